/*
 * test_faults.c - what clients see when a host of the ring fails, and that
 * the ring comes back by itself.
 *
 * Four daemons on 127.0.0.1, one client thread per host. In each scenario
 * the surviving ranks start a 64 MiB allreduce, a fault hits one host while
 * it runs, and then:
 *   - every surviving client gets an error naming the host that failed,
 *     within the time the fault allows (asserted with a margin);
 *   - no daemon crashes (harness_stop() checks exits and sanitizer logs);
 *   - once the fault is repaired, the ring re-forms by itself and 100
 *     allreduces in a row are correct on every rank.
 * The victim's own rank does not submit the big allreduce, so the survivors
 * are certainly in the middle of it (waiting for data that depends on the
 * victim) when the fault comes: no timing decides the outcome.
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/harness/harness.h"
#include "tests/harness/proxy.h"
#include "proto/frame.h"
#include "ringd.h"

#define N 4
#define VICTIM 2
#define BIG_COUNT (16u << 20) /* float32: 64 MiB */
#define SMALL_COUNT 4096
#define RECOVERY_MS 60000 /* the ring must be back within this */
#define IN_A_ROW 100

/* Fast failure detection, so the tests are quick and the bounds tight. Every
 * timing and bound here is written for a machine shared two ways, and
 * stretched on a busier one (harness_ms(), tests/harness/timing.h). */
#define HEARTBEAT_INTERVAL_MS 200
#define HEARTBEAT_TIMEOUT_MS 1000
#define COLLECTIVE_TIMEOUT_MS 20000

/* The fault tests' config, stretched, with extra (complete lines) after it. */
static const char *fault_yaml(int collective_timeout_ms, const char *extra)
{
    static char yaml[1024];
    snprintf(yaml, sizeof yaml,
             "collective_timeout: %dms\nheartbeat_interval: %dms\nheartbeat_timeout: %dms\n"
             "connect_timeout: %dms\nbackoff_initial: %dms\nbackoff_max: %dms\n%s",
             harness_ms(collective_timeout_ms), harness_ms(HEARTBEAT_INTERVAL_MS),
             harness_ms(HEARTBEAT_TIMEOUT_MS), harness_ms(1000), harness_ms(50), harness_ms(500),
             extra ? extra : "");
    return yaml;
}

/* A survivor's collective that the fault fails waits for the lap that
 * re-forms the ring, which settles it with one code and message on every
 * host: once the host is back (restarted, as systemd does after RestartSec,
 * or thawed), within this margin, which covers a loaded machine and the
 * sanitizer build. */
#define MARGIN_MS 4000
#define RESTART_MS 2000 /* deploy/ringd.service: RestartSec=2s */

static harness H;

static void setup(void)
{
    harness_reset(&H);
}

static void teardown(void)
{
    harness_cleanup(&H);
}

TestSuite(faults, .init = setup, .fini = teardown, .timeout = 600);

typedef enum { FAULT_KILL, FAULT_STOP, FAULT_CLIENT, FAULT_KEY } fault;

typedef struct {
    fault kind;
    harness_barrier bar;
    atomic_int submitted;  /* survivors whose big allreduce is in */
    atomic_int fault_done; /* the fault has been injected */
    atomic_int repaired;   /* the fault has been repaired */
    int64_t fault_ms;      /* when it was injected */
    int64_t repair_ms;     /* when the host came back */
    /* per rank */
    int big_rc[N];
    int64_t err_ms[N];
    char big_msg[N][1024];
    char why[N][512]; /* what went wrong in the thread, if anything */
} scenario;

static int connect_retry(int i, ringd_client **c, int timeout_ms)
{
    int64_t deadline = harness_now_ms() + timeout_ms;
    int rc;
    while ((rc = ringd_connect(H.d[i].socket, c)) < 0 && harness_now_ms() < deadline)
        harness_sleep_ms(50);
    return rc;
}

/* Retries one allreduce until it succeeds everywhere: hosts that learned of
 * the fault at different times may each fail a different number of times
 * before the ring is whole again. */
static int recover(int idx, ringd_client **c, float *small, char *why, size_t len)
{
    int64_t deadline = harness_now_ms() + RECOVERY_MS;
    for (int attempt = 0;; attempt++) {
        harness_fill_f32(small, SMALL_COUNT, idx, -1);
        int rc = ringd_allreduce(*c, small, SMALL_COUNT, RINGD_FLOAT32, RINGD_SUM);
        /* A host out for evict_after was closed over, and its ranks' part
         * is rightly missing from a sum of the smaller ring: recovered is
         * when the whole ring is back. */
        if (rc == 0 && ringd_size(*c) == N)
            return harness_check_f32(small, SMALL_COUNT, N, -1, why, len);
        if (rc == 0) rc = RINGD_ERESIZED;
        if (rc == RINGD_ECLOSED) {
            snprintf(why, len, "attempt %d: the daemon closed the connection: %s", attempt,
                     ringd_last_error(*c));
            return -1;
        }
        if (harness_now_ms() > deadline) {
            snprintf(why, len, "no allreduce succeeded within %d ms; the last: %s: %s", RECOVERY_MS,
                     ringd_errname(rc), ringd_last_error(*c));
            return -1;
        }
        harness_sleep_ms(20);
    }
}

static int in_a_row(int idx, ringd_client *c, float *buf, char *why, size_t len)
{
    for (int it = 0; it < IN_A_ROW; it++) {
        size_t n = SMALL_COUNT + (size_t)it * 13;
        harness_fill_f32(buf, n, idx, it);
        int rc = ringd_allreduce(c, buf, n, RINGD_FLOAT32, RINGD_SUM);
        if (rc != 0) {
            snprintf(why, len, "allreduce %d of %d after recovery failed: %s: %s", it + 1, IN_A_ROW,
                     ringd_errname(rc), ringd_last_error(c));
            return -1;
        }
        if (harness_check_f32(buf, n, N, it, why, len) < 0) return -1;
    }
    return 0;
}

static void wait_flag(atomic_int *flag, int timeout_ms)
{
    int64_t deadline = harness_now_ms() + timeout_ms;
    while (!atomic_load(flag) && harness_now_ms() < deadline)
        harness_sleep_ms(5);
}

static int client_thread(int idx, void *arg)
{
    scenario *s = arg;
    char *why = s->why[idx];
    size_t wl = sizeof s->why[idx];
    ringd_client *c = NULL;
    int victim = idx == VICTIM;
    /* With FAULT_CLIENT, the victim rank is a separate process at first. */
    int joins_late = victim && s->kind == FAULT_CLIENT;

    if (!joins_late && connect_retry(idx, &c, 20000) < 0) {
        snprintf(why, wl, "cannot connect to %s", H.d[idx].socket);
        goto fail_early;
    }
    float *big = NULL, *small = NULL;
    if (c) {
        big = ringd_alloc(c, (size_t)BIG_COUNT * sizeof *big);
        small = ringd_alloc(c, (size_t)(SMALL_COUNT + IN_A_ROW * 13) * sizeof *small);
        if (!big || !small) {
            snprintf(why, wl, "ringd_alloc: %s", ringd_last_error(c));
            goto fail_early;
        }
    }
    /* Everyone is in and the ring works. A wrong key keeps the ring from
     * forming at all: then the first collective is the one that fails; and
     * the victim process of FAULT_CLIENT submits the big one straight away. */
    if (s->kind == FAULT_KILL || s->kind == FAULT_STOP) {
        harness_fill_f32(small, SMALL_COUNT, idx, -1);
        int rc = ringd_allreduce(c, small, SMALL_COUNT, RINGD_FLOAT32, RINGD_SUM);
        if (rc != 0) {
            snprintf(why, wl, "warm-up: %s: %s", ringd_errname(rc), ringd_last_error(c));
            goto fail_early;
        }
    }
    if (harness_barrier_wait(&s->bar, false, 60000) != 0) {
        snprintf(why, wl, "another rank failed before the fault");
        goto out;
    }

    if (!victim) {
        /* The client-death scenario needs one survivor that submits only
         * after the death: the abort must reach it too. */
        int late = s->kind == FAULT_CLIENT && idx == VICTIM + 1;
        if (late) wait_flag(&s->fault_done, 60000);
        ringd_request *req = NULL;
        harness_fill_f32(big, BIG_COUNT, idx, 0);
        int rc = ringd_iallreduce(c, big, BIG_COUNT, RINGD_FLOAT32, RINGD_SUM, &req);
        if (rc == 0) {
            if (!late) atomic_fetch_add(&s->submitted, 1);
            rc = ringd_wait(req, 120000);
        }
        s->big_rc[idx] = rc;
        s->err_ms[idx] = harness_now_ms();
        snprintf(s->big_msg[idx], sizeof s->big_msg[idx], "%s", rc ? ringd_last_error(c) : "");
    }

    /* Repair, then the ring must come back by itself. */
    wait_flag(&s->repaired, 120000);
    if (victim && (s->kind == FAULT_KILL || s->kind == FAULT_KEY)) {
        ringd_close(c); /* its daemon is a new process */
        c = NULL;
    }
    if (!c) {
        if (connect_retry(idx, &c, 20000) < 0) {
            snprintf(why, wl, "cannot reconnect to %s", H.d[idx].socket);
            goto out;
        }
        small = ringd_alloc(c, (size_t)(SMALL_COUNT + IN_A_ROW * 13) * sizeof *small);
        if (!small) {
            snprintf(why, wl, "ringd_alloc: %s", ringd_last_error(c));
            goto out;
        }
    }
    if (recover(idx, &c, small, why, wl) < 0) goto out;
    if (harness_barrier_wait(&s->bar, false, RECOVERY_MS) != 0) {
        snprintf(why, wl, "another rank did not recover");
        goto out;
    }
    if (in_a_row(idx, c, small, why, wl) < 0) goto out;
    ringd_close(c);
    return 0;

fail_early:
    harness_barrier_wait(&s->bar, true, 60000);
out:
    if (c) ringd_close(c);
    return -1;
}

static void start_ring(const char *extra)
{
    cr_assert_eq(harness_init(&H, N, fault_yaml(COLLECTIVE_TIMEOUT_MS, extra)), 0, "%s", H.err);
    cr_assert_eq(harness_start(&H, harness_seed("faults"), 50), 0, "%s", H.err);
}

/* Waits until the survivors' big allreduces are in, plus a little so that
 * their first segments are on the wire. */
static void wait_submitted(scenario *s, int count)
{
    int64_t deadline = harness_now_ms() + 60000;
    while (atomic_load(&s->submitted) < count && harness_now_ms() < deadline)
        harness_sleep_ms(5);
    cr_assert_geq(atomic_load(&s->submitted), count, "the survivors did not submit");
    harness_sleep_ms(200);
}

/* Every survivor got the same error, within bound_ms (as written: it is
 * stretched here) of since_ms (the fault, or the host's return), saying
 * which host failed. */
static void assert_survivors_failed(scenario *s, int64_t since_ms, int bound_ms, const char *names)
{
    int first = VICTIM == 0 ? 1 : 0;
    int bound = harness_ms(bound_ms);
    for (int i = 0; i < N; i++) {
        if (i == VICTIM) continue;
        cr_expect_neq(s->big_rc[i], 0, "rank %d: the allreduce succeeded despite the fault", i);
        int64_t after = s->err_ms[i] - since_ms;
        cr_expect_leq(after, bound,
                      "rank %d learned of the fault %" PRId64 " ms late, past %d ms (%s)", i, after,
                      bound, s->big_msg[i]);
        cr_expect(strstr(s->big_msg[i], names) != NULL,
                  "rank %d: the message does not name %s: \"%s\"", i, names, s->big_msg[i]);
        cr_expect_eq(s->big_rc[i], s->big_rc[first], "ranks %d and %d: %s / %s", i, first,
                     ringd_errname(s->big_rc[i]), ringd_errname(s->big_rc[first]));
        cr_expect_str_eq(s->big_msg[i], s->big_msg[first], "ranks %d and %d: one message", i,
                         first);
        fprintf(stderr, "rank %d %" PRId64 " ms after the fault: %s: %s\n", i,
                s->err_ms[i] - s->fault_ms, ringd_errname(s->big_rc[i]), s->big_msg[i]);
    }
}

static void join(scenario *s, harness_threads *t)
{
    int rc = harness_threads_join(&H, t, 300000);
    for (int i = 0; i < N; i++)
        cr_expect_str_empty(s->why[i], "rank %d: %s", i, s->why[i]);
    cr_assert_eq(rc, 0, "a client thread failed");
    harness_barrier_destroy(&s->bar);
}

/* The ring runs, every rank's thread runs, and the survivors' big
 * allreduce is in: the fault may come. */
static void start_scenario(scenario *s, harness_threads *t, const char *extra)
{
    start_ring(extra);
    harness_barrier_init(&s->bar, N);
    cr_assert_eq(harness_threads_start(&H, t, N, client_thread, s), 0, "%s", H.err);
    wait_submitted(s, N - 1);
}

static void finish(scenario *s, harness_threads *t)
{
    join(s, t);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

static void kill_scenario(const char *extra)
{
    static scenario s = {.kind = FAULT_KILL};
    harness_threads t;
    start_scenario(&s, &t, extra);
    s.fault_ms = harness_now_ms();
    harness_kill(&H, VICTIM);
    atomic_store(&s.fault_done, 1);

    /* The host comes back as systemd would bring it back. */
    harness_sleep_ms(RESTART_MS);
    s.repair_ms = harness_now_ms();
    cr_assert_eq(harness_spawn(&H, VICTIM), 0, "%s", H.err);
    cr_assert_eq(harness_wait_ready(&H, VICTIM, HARNESS_READY_TIMEOUT_MS), 0, "%s", H.err);
    atomic_store(&s.repaired, 1);
    finish(&s, &t);
    assert_survivors_failed(&s, s.repair_ms, MARGIN_MS, "h2");
}

Test(faults, a_daemon_killed_mid_allreduce_fails_it_everywhere_and_the_ring_recovers)
{
    kill_scenario(NULL);
}

Test(faults, with_3_tcp_streams_per_link_a_killed_daemon_fails_it_and_the_ring_recovers)
{
    kill_scenario("streams: 3\n");
}

Test(faults, a_frozen_daemon_is_noticed_by_heartbeats_and_the_ring_recovers)
{
    static scenario s = {.kind = FAULT_STOP};
    harness_threads t;
    start_scenario(&s, &t, NULL);
    s.fault_ms = harness_now_ms();
    harness_signal(&H, VICTIM, SIGSTOP);
    atomic_store(&s.fault_done, 1);

    /* Past heartbeat_timeout: the others have closed their links to it. */
    harness_sleep_ms(harness_ms(HEARTBEAT_TIMEOUT_MS + MARGIN_MS));
    s.repair_ms = harness_now_ms();
    harness_signal(&H, VICTIM, SIGCONT);
    atomic_store(&s.repaired, 1);
    finish(&s, &t);
    assert_survivors_failed(&s, s.repair_ms, MARGIN_MS, "h2");
}

/* ---- a stall of the whole machine ---- */

typedef struct {
    harness_barrier bar;
    char why[N][256];
} stall;

/* A rank of the stalled machine: the ring works, the machine stalls (the
 * main thread stops every daemon between the barriers), and then the ring
 * comes back by itself and sums right. */
static int stall_thread(int idx, void *arg)
{
    stall *st = arg;
    char *why = st->why[idx];
    size_t wl = sizeof st->why[idx];
    ringd_client *c = NULL;
    float *small = NULL;
    if (connect_retry(idx, &c, 20000) < 0) {
        snprintf(why, wl, "cannot connect to %s", H.d[idx].socket);
        goto fail_early;
    }
    small = ringd_alloc(c, (size_t)(SMALL_COUNT + IN_A_ROW * 13) * sizeof *small);
    if (!small) {
        snprintf(why, wl, "ringd_alloc: %s", ringd_last_error(c));
        goto fail_early;
    }
    if (recover(idx, &c, small, why, wl) < 0) goto fail_early;
    for (int phase = 0; phase < 2; phase++) /* before the stall; after it */
        if (harness_barrier_wait(&st->bar, false, RECOVERY_MS) != 0) {
            snprintf(why, wl, "another rank failed");
            goto out;
        }
    if (recover(idx, &c, small, why, wl) < 0) goto out;
    if (in_a_row(idx, c, small, why, wl) < 0) goto out;
    ringd_close(c);
    return 0;

fail_early:
    harness_barrier_wait(&st->bar, true, RECOVERY_MS);
out:
    if (c) ringd_close(c);
    return -1;
}

Test(faults, a_stall_of_the_whole_machine_is_said_by_every_daemon_and_the_ring_comes_back)
{
    static stall st;
    harness_barrier_init(&st.bar, N + 1);
    start_ring(NULL);
    harness_threads t;
    cr_assert_eq(harness_threads_start(&H, &t, N, stall_thread, &st), 0, "%s", H.err);
    cr_assert_eq(harness_barrier_wait(&st.bar, false, RECOVERY_MS), 0, "the ring did not work");

    /* As a paused VM or a starved machine: nothing runs for twice
     * heartbeat_timeout, and then every link looks dead to both its ends. */
    harness_signal_all(&H, SIGSTOP);
    harness_sleep_ms(harness_ms(2 * HEARTBEAT_TIMEOUT_MS));
    harness_signal_all(&H, SIGCONT);
    char stalled[128];
    snprintf(stalled, sizeof stalled, "s late (due every %.1f s): this process was stalled",
             harness_ms(HEARTBEAT_INTERVAL_MS) / 1000.0);
    for (int i = 0; i < N; i++)
        cr_assert_eq(harness_wait_log(&H, i, stalled, 10000), 0,
                     "h%d does not say that it was stalled: %s", i, H.err);
    cr_assert_eq(harness_barrier_wait(&st.bar, false, RECOVERY_MS), 0, "a rank failed");
    int rc = harness_threads_join(&H, &t, 300000);
    for (int i = 0; i < N; i++)
        cr_expect_str_empty(st.why[i], "rank %d: %s", i, st.why[i]);
    cr_assert_eq(rc, 0, "a client thread failed");
    harness_barrier_destroy(&st.bar);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

/* The victim rank: a process that submits the big allreduce and waits to be
 * killed. Forked before any thread exists. */
static void victim_client(int ready_fd)
{
    ringd_client *c = NULL;
    if (connect_retry(VICTIM, &c, 20000) < 0) _exit(2);
    float *big = ringd_alloc(c, (size_t)BIG_COUNT * sizeof *big);
    if (!big) _exit(3);
    harness_fill_f32(big, BIG_COUNT, VICTIM, 0);
    ringd_request *req;
    if (ringd_iallreduce(c, big, BIG_COUNT, RINGD_FLOAT32, RINGD_SUM, &req) < 0) _exit(4);
    (void)!write(ready_fd, "s", 1);
    for (;;)
        pause();
}

static int count_mappings(pid_t pid, const char *what)
{
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, what) != NULL;
    fclose(f);
    return n;
}

Test(faults, a_client_killed_mid_allreduce_fails_it_for_the_others_and_is_cleaned_up)
{
    static scenario s = {.kind = FAULT_CLIENT};
    start_ring(NULL);
    int before = count_mappings(H.d[VICTIM].pid, "memfd:ringd");

    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t child = fork();
    cr_assert_geq(child, 0);
    if (child == 0) {
        close(fds[0]);
        victim_client(fds[1]);
    }
    close(fds[1]);

    harness_barrier_init(&s.bar, N);
    harness_threads t;
    cr_assert_eq(harness_threads_start(&H, &t, N, client_thread, &s), 0, "%s", H.err);
    struct pollfd p = {.fd = fds[0], .events = POLLIN};
    char ok = 0;
    cr_assert_eq(poll(&p, 1, 60000), 1, "the victim client did not submit");
    cr_assert_eq(read(fds[0], &ok, 1), 1, "the victim client failed before submitting");
    close(fds[0]);
    /* Two survivors are in; the third submits only after the death. */
    wait_submitted(&s, N - 2);
    int during = count_mappings(H.d[VICTIM].pid, "memfd:ringd");

    s.fault_ms = harness_now_ms();
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    atomic_store(&s.fault_done, 1);
    atomic_store(&s.repaired, 1);
    join(&s, &t);
    assert_survivors_failed(&s, s.fault_ms, MARGIN_MS, "exited during the collective");

    /* Its shared memory went with it (and the clients that closed since):
     * the daemon maps no more than before. */
    int after = -1;
    for (int64_t end = harness_now_ms() + 5000; harness_now_ms() < end; harness_sleep_ms(20))
        if ((after = count_mappings(H.d[VICTIM].pid, "memfd:ringd")) == before) break;
    cr_expect_gt(during, before, "the victim's region was never mapped (%d, %d)", before, during);
    cr_expect_eq(after, before, "the daemon still maps %d region(s) of dead clients",
                 after - before);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

static void config_variant(const char *name, const char *from, const char *to, char *path,
                           size_t len)
{
    cr_assert_eq(harness_config_variant(&H, name, from, to, path, len), 0, "%s", H.err);
}

static void write_key(const char *name, const char *key, char *path, size_t len)
{
    cr_assert_eq(harness_write_key(&H, name, key, path, len), 0, "%s", H.err);
}

Test(faults, a_host_with_the_wrong_key_is_refused_and_the_ring_forms_once_it_is_fixed)
{
    static scenario s = {.kind = FAULT_KEY};
    char good[PATH_MAX], bad[PATH_MAX];
    cr_assert_eq(harness_init(&H, N, fault_yaml(COLLECTIVE_TIMEOUT_MS, NULL)), 0, "%s", H.err);
    write_key("good.key", "0123456789abcdef-the-cluster-key\n", good, sizeof good);
    write_key("bad.key", "0123456789abcdef-another-key-xxx\n", bad, sizeof bad);

    /* Every host gets the good key but the victim, which gets the bad one. */
    char config[PATH_MAX], bad_config[PATH_MAX];
    snprintf(config, sizeof config, "%s", H.config);
    FILE *f = fopen(config, "a");
    cr_assert_not_null(f);
    fprintf(f, "secret_file: %s\n", good);
    fclose(f);
    config_variant("bad.yaml", good, bad, bad_config, sizeof bad_config);

    for (int i = 0; i < N; i++) {
        snprintf(H.config, sizeof H.config, "%s", i == VICTIM ? bad_config : config);
        cr_assert_eq(harness_spawn(&H, i), 0, "%s", H.err);
    }
    snprintf(H.config, sizeof H.config, "%s", config);
    cr_assert_eq(harness_wait_all_ready(&H, HARNESS_READY_TIMEOUT_MS), 0, "%s", H.err);

    harness_barrier_init(&s.bar, N);
    harness_threads t;
    /* The survivors' allreduce cannot run: no ring. It ends at its deadline
     * saying why; the fault "happened" when they submitted. */
    s.fault_ms = harness_now_ms();
    cr_assert_eq(harness_threads_start(&H, &t, N, client_thread, &s), 0, "%s", H.err);
    wait_submitted(&s, N - 1);
    int64_t wait_until = harness_now_ms() + 30000;
    while (harness_now_ms() < wait_until) {
        int done = 0;
        for (int i = 0; i < N; i++)
            done += i != VICTIM && s.err_ms[i] != 0;
        if (done == N - 1) break;
        harness_sleep_ms(50);
    }

    /* Each neighbour of the victim said why in its log. */
    char line[1024];
    int refused = 0;
    for (int i = 0; i < N; i++) {
        FILE *lf = fopen(H.d[i].log, "r");
        if (!lf) continue;
        while (fgets(line, sizeof line, lf))
            refused += strstr(line, "authentication failed") != NULL;
        fclose(lf);
    }
    cr_expect_gt(refused, 0, "no daemon logged the failed authentication");

    /* Fix the key and restart the victim: the ring forms. */
    harness_kill(&H, VICTIM);
    cr_assert_eq(harness_spawn(&H, VICTIM), 0, "%s", H.err);
    cr_assert_eq(harness_wait_ready(&H, VICTIM, HARNESS_READY_TIMEOUT_MS), 0, "%s", H.err);
    atomic_store(&s.repaired, 1);
    finish(&s, &t);
    /* The others close over the host that refuses them after evict_after
     * (10 s), before their deadline: their allreduce fails with the resize,
     * which says why; the repaired host is taken back. */
    assert_survivors_failed(&s, s.fault_ms, COLLECTIVE_TIMEOUT_MS + MARGIN_MS,
                            "unreachable for 10 s (authentication failed");
}

Test(faults, sigterm_fails_collectives_in_flight_and_exits_cleanly)
{
    start_ring(NULL);
    ringd_client *c[N];
    for (int i = 0; i < N; i++)
        cr_assert_eq(connect_retry(i, &c[i], 20000), 0);
    /* Ranks 0..N-2 submit; the last never does, so they are in flight. */
    ringd_request *req[N];
    float *buf[N];
    for (int i = 0; i < N - 1; i++) {
        buf[i] = ringd_alloc(c[i], SMALL_COUNT * sizeof(float));
        cr_assert_not_null(buf[i]);
        harness_fill_f32(buf[i], SMALL_COUNT, i, 0);
        cr_assert_eq(ringd_iallreduce(c[i], buf[i], SMALL_COUNT, RINGD_FLOAT32, RINGD_SUM, &req[i]),
                     0);
    }
    harness_sleep_ms(300);
    int64_t t0 = harness_now_ms();
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err); /* SIGTERM; checks clean exits */
    for (int i = 0; i < N - 1; i++) {
        int rc = ringd_wait(req[i], 10000);
        cr_expect(rc == RINGD_ESHUTDOWN || rc == RINGD_ECLOSED || rc == RINGD_ERING,
                  "rank %d: %s: %s", i, ringd_errname(rc), ringd_last_error(c[i]));
        cr_expect_lt(harness_now_ms() - t0, HARNESS_STOP_TIMEOUT_MS);
    }
    for (int i = 0; i < N; i++)
        ringd_close(c[i]);
}

Test(faults, a_key_file_others_can_read_or_a_short_key_stops_the_daemon_at_start)
{
    char key[PATH_MAX], config[PATH_MAX], out[2048], err[2048];
    int status;
    cr_assert_eq(harness_init(&H, 2, NULL), 0, "%s", H.err);
    write_key("cluster.key", "0123456789abcdef-the-cluster-key\n", key, sizeof key);
    cr_assert_eq(chmod(key, 0644), 0);
    char line[PATH_MAX + 32];
    snprintf(line, sizeof line, "secret_file: %s\nhosts:", key);
    config_variant("keyed.yaml", "hosts:", line, config, sizeof config);
    char *argv[] = {(char *)RINGD_BIN, (char *)"--config", config, (char *)"--host",
                    (char *)"h0",      (char *)"--check",  NULL};

    cr_assert_eq(harness_run(&H, argv, 10000, &status, out, sizeof out, err, sizeof err), 0);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 2, "exit status %d", status);
    cr_expect(strstr(err, "chmod 600") != NULL, "the refusal does not say what to do: %s", err);

    cr_assert_eq(chmod(key, 0600), 0);
    cr_assert_eq(harness_run(&H, argv, 10000, &status, out, sizeof out, err, sizeof err), 0);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s", err);

    write_key("cluster.key", "short\n", key, sizeof key);
    cr_assert_eq(harness_run(&H, argv, 10000, &status, out, sizeof out, err, sizeof err), 0);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 2, "exit status %d", status);
    cr_expect(strstr(err, "5 bytes") != NULL, "%s", err);
}

static harness_proxy the_proxy;

static int proxy_thread(int idx, void *arg)
{
    scenario *s = arg;
    char *why = s->why[idx];
    size_t wl = sizeof s->why[idx];
    ringd_client *c = NULL;
    if (connect_retry(idx, &c, 20000) < 0) {
        snprintf(why, wl, "cannot connect");
        return -1;
    }
    float *buf = ringd_alloc(c, (size_t)(SMALL_COUNT + IN_A_ROW * 13) * 64 * sizeof *buf);
    int rc = -1;
    if (!buf) {
        snprintf(why, wl, "ringd_alloc: %s", ringd_last_error(c));
        goto out;
    }
    size_t big = (size_t)SMALL_COUNT * 64; /* 1 MiB: several segments per link */
    for (int phase = 0; phase < 3; phase++) {
        if (harness_barrier_wait(&s->bar, false, 60000) != 0) {
            snprintf(why, wl, "another rank failed");
            goto out;
        }
        /* 0: the ring works; 1: one bit flips in flight; 2: it works again.
         * The proxy is armed once every rank has its phase 0 result, so no
         * frame of phase 0 is still on its way. */
        if (phase == 1) {
            if (idx == 0) harness_proxy_arm(&the_proxy);
            if (harness_barrier_wait(&s->bar, false, 60000) != 0) {
                snprintf(why, wl, "another rank failed");
                goto out;
            }
        }
        harness_fill_f32(buf, big, idx, phase);
        rc = ringd_allreduce(c, buf, big, RINGD_FLOAT32, RINGD_SUM);
        if (phase == 1) {
            s->big_rc[idx] = rc;
            snprintf(s->big_msg[idx], sizeof s->big_msg[idx], "%s", ringd_last_error(c));
            rc = 0;
            continue;
        }
        if (rc != 0) {
            snprintf(why, wl, "phase %d: %s: %s", phase, ringd_errname(rc), ringd_last_error(c));
            goto out;
        }
        if ((rc = harness_check_f32(buf, big, N, phase, why, wl)) < 0) goto out;
    }
    rc = in_a_row(idx, c, buf, why, wl);
out:
    ringd_close(c);
    return rc;
}

Test(faults, a_payload_corrupted_in_transit_fails_the_collective_never_the_sum)
{
    static scenario s;
    cr_assert_eq(harness_init(&H, N, fault_yaml(COLLECTIVE_TIMEOUT_MS, NULL)), 0, "%s", H.err);

    cr_assert_eq(harness_proxy_start(&the_proxy, H.d[1].port), 0);

    /* h0 reaches h1 through the proxy; h1 still listens on its own port. */
    char from[64], to[64], config[PATH_MAX], h0_config[PATH_MAX];
    snprintf(from, sizeof from, "127.0.0.1:%u", (unsigned)H.d[1].port);
    snprintf(to, sizeof to, "127.0.0.1:%u", (unsigned)the_proxy.port);
    snprintf(config, sizeof config, "%s", H.config);
    config_variant("h0.yaml", from, to, h0_config, sizeof h0_config);
    for (int i = 0; i < N; i++) {
        snprintf(H.config, sizeof H.config, "%s", i == 0 ? h0_config : config);
        cr_assert_eq(harness_spawn(&H, i), 0, "%s", H.err);
    }
    snprintf(H.config, sizeof H.config, "%s", config);
    cr_assert_eq(harness_wait_all_ready(&H, HARNESS_READY_TIMEOUT_MS), 0, "%s", H.err);

    harness_barrier_init(&s.bar, N);
    harness_threads t;
    cr_assert_eq(harness_threads_start(&H, &t, N, proxy_thread, &s), 0, "%s", H.err);
    int rc = harness_threads_join(&H, &t, 300000);
    harness_proxy_stop(&the_proxy);
    for (int i = 0; i < N; i++)
        cr_expect_str_empty(s.why[i], "rank %d: %s", i, s.why[i]);
    cr_assert_eq(rc, 0, "a client thread failed");
    cr_expect_eq(harness_proxy_flipped(&the_proxy), 1, "the proxy flipped %d bits",
                 harness_proxy_flipped(&the_proxy));
    for (int i = 0; i < N; i++) {
        cr_expect_eq(s.big_rc[i], RINGD_ECORRUPT, "rank %d: %s: %s", i, ringd_errname(s.big_rc[i]),
                     s.big_msg[i]);
        cr_expect(strstr(s.big_msg[i], "checksum mismatch") != NULL, "rank %d: %s", i,
                  s.big_msg[i]);
    }
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
    harness_barrier_destroy(&s.bar);
}

/* One raw HELLO to daemon h1, as if from its left neighbour; returns the
 * WELCOME's status and copies its reason. */
static int hello_reply(const frame_hello *h, int version, char *reason, size_t len)
{
    uint8_t buf[2048];
    int n = frame_encode_hello(buf, sizeof buf, h);
    cr_assert_gt(n, 0);
    buf[4] = (uint8_t)version;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(H.d[1].port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0, "connect to h1 (port %u): %s",
                 (unsigned)H.d[1].port, strerror(errno));
    cr_assert_eq(harness_write_all(fd, buf, (size_t)n), 0);
    size_t got = 0;
    frame_header hdr;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (poll(&p, 1, 10000) == 1) {
        ssize_t r = read(fd, buf + got, sizeof buf - got);
        if (r <= 0) break;
        got += (size_t)r;
        if (frame_decode_header(buf, got, &hdr) == FRAME_OK &&
            got >= FRAME_HEADER_SIZE + hdr.length)
            break;
    }
    close(fd);
    frame_welcome w;
    cr_assert_eq(frame_decode_header(buf, got, &hdr), FRAME_OK, "no WELCOME (%zu bytes)", got);
    cr_assert_eq(frame_decode_welcome(&hdr, buf + FRAME_HEADER_SIZE, &w), FRAME_OK);
    snprintf(reason, len, "%s", w.reason);
    return w.status;
}

static int ring_works_thread(int idx, void *arg)
{
    scenario *s = arg;
    ringd_client *c = NULL;
    if (connect_retry(idx, &c, 20000) < 0) {
        snprintf(s->why[idx], sizeof s->why[idx], "cannot connect");
        return -1;
    }
    float *buf = ringd_alloc(c, (size_t)(SMALL_COUNT + IN_A_ROW * 13) * sizeof *buf);
    int rc = buf ? in_a_row(idx, c, buf, s->why[idx], sizeof s->why[idx]) : -1;
    ringd_close(c);
    return rc;
}

Test(faults, a_peer_that_disagrees_is_refused_saying_why_and_the_ring_goes_on)
{
    static scenario s;
    start_ring(NULL);
    /* Its local socket comes first: h1 may not listen for peers yet. */
    cr_assert_eq(harness_wait_log(&H, 1, "listening on", HARNESS_READY_TIMEOUT_MS), 0, "%s", H.err);
    char reason[FRAME_MAX_TEXT + 1];
    frame_hello h = {
        .n_hosts = N, .from_pos = 0, .to_pos = 1, .cluster = "test", .from_name = "h0"};

    frame_hello other = h;
    snprintf(other.cluster, sizeof other.cluster, "intruder");
    cr_expect_eq(hello_reply(&other, FRAME_VERSION, reason, sizeof reason), RINGD_EMISMATCH);
    cr_expect(strstr(reason, "cluster \"intruder\" is not ours") != NULL, "%s", reason);

    frame_hello moved = h;
    moved.from_pos = 2;
    cr_expect_eq(hello_reply(&moved, FRAME_VERSION, reason, sizeof reason), RINGD_EMISMATCH);
    cr_expect(strstr(reason, "ring positions disagree") != NULL, "%s", reason);

    cr_expect_eq(hello_reply(&h, 1, reason, sizeof reason), RINGD_EVERSION);
    cr_expect(strstr(reason, "protocol version 1") != NULL, "%s", reason);

    /* This ring has no key: a peer that offers one is refused too. */
    frame_hello keyed = h;
    keyed.auth = 1;
    cr_expect_eq(hello_reply(&keyed, FRAME_VERSION, reason, sizeof reason), RINGD_EAUTH);
    cr_expect(strstr(reason, "this host has none") != NULL, "%s", reason);

    cr_assert_eq(harness_run_threads(&H, N, ring_works_thread, &s, 120000), 0);
    for (int i = 0; i < N; i++)
        cr_expect_str_empty(s.why[i], "rank %d: %s", i, s.why[i]);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

/*
 * Chaos: for a while, daemons are killed and restarted or frozen and thawed
 * at random while every rank allreduces in a loop. Whatever happens, a call
 * returns within collective_timeout (plus a margin) and a call that succeeds
 * has the right sum (the inputs do not change between attempts, so any
 * pairing of attempts is correct); afterwards the ring recovers and 100
 * allreduces in a row are correct. When the chaos stops, ranks leave the
 * loop one by one: the last call of a rank whose peers have left waits for
 * its deadline, as a collective some rank never submits must.
 * RINGD_CHAOS_MS sets how long the chaos lasts (tests/stress.sh), and
 * RINGD_TEST_SEED replays a run's seed.
 */
#define CHAOS_MS 20000 /* unless $RINGD_CHAOS_MS says */
#define CHAOS_TIMEOUT_MS 8000

typedef struct {
    harness_barrier bar;
    atomic_int over;
    int calls[N], ok[N];
    int64_t longest_ms[N];
    char longest[N][512]; /* what the longest call returned */
    int errors[N][32];    /* calls that failed, by -code */
    char why[N][512];
} chaos;

static int chaos_thread(int idx, void *arg)
{
    chaos *ch = arg;
    char *why = ch->why[idx];
    size_t wl = sizeof ch->why[idx];
    ringd_client *c = NULL;
    float *buf = NULL;
    while (!atomic_load(&ch->over)) {
        if (!c) {
            if (connect_retry(idx, &c, 30000) < 0) {
                snprintf(why, wl, "cannot reconnect to %s", H.d[idx].socket);
                return -1;
            }
            buf = ringd_alloc(c, (size_t)(SMALL_COUNT + IN_A_ROW * 13) * sizeof *buf);
            if (!buf) {
                ringd_close(c);
                c = NULL;
                continue; /* the daemon went away again */
            }
        }
        harness_fill_f32(buf, SMALL_COUNT, idx, -1); /* as recover() does */
        int64_t t0 = harness_now_ms();
        int rc = ringd_allreduce(c, buf, SMALL_COUNT, RINGD_FLOAT32, RINGD_SUM);
        int64_t took = harness_now_ms() - t0;
        ch->calls[idx]++;
        if (took > ch->longest_ms[idx]) {
            ch->longest_ms[idx] = took;
            snprintf(ch->longest[idx], sizeof ch->longest[idx], "%s",
                     rc ? ringd_last_error(c) : "ok");
        }
        if (took > harness_ms(CHAOS_TIMEOUT_MS + MARGIN_MS)) {
            snprintf(why, wl, "a call took %" PRId64 " ms (%s)", took,
                     rc ? ringd_last_error(c) : "ok");
            return -1;
        }
        if (rc < 0 && -rc < 32) ch->errors[idx][-rc]++;
        if (rc == 0) {
            ch->ok[idx]++;
            if (harness_check_f32(buf, SMALL_COUNT, N, -1, why, wl) < 0)
                return -1; /* a wrong sum */
        } else if (rc == RINGD_ECLOSED) {
            ringd_close(c);
            c = NULL;
        }
    }
    /* No call in flight anywhere from here: the ranks recover together. */
    if (harness_barrier_wait(&ch->bar, false, 60000) != 0) {
        snprintf(why, wl, "another rank did not leave the chaos");
        if (c) ringd_close(c);
        return -1;
    }
    if (!c && connect_retry(idx, &c, 30000) < 0) {
        snprintf(why, wl, "cannot reconnect after the chaos");
        return -1;
    }
    if (!buf || !(buf = ringd_alloc(c, (size_t)(SMALL_COUNT + IN_A_ROW * 13) * sizeof *buf))) {
        snprintf(why, wl, "ringd_alloc: %s", ringd_last_error(c));
        ringd_close(c);
        return -1;
    }
    int rc = recover(idx, &c, buf, why, wl);
    if (rc == 0 && harness_barrier_wait(&ch->bar, false, RECOVERY_MS) != 0) {
        snprintf(why, wl, "another rank did not recover");
        rc = -1;
    }
    if (rc == 0) rc = in_a_row(idx, c, buf, why, wl);
    ringd_close(c);
    return rc;
}

static void chaos_run(const char *extra)
{
    static chaos ch;
    cr_assert_eq(harness_init(&H, N, fault_yaml(CHAOS_TIMEOUT_MS, extra)), 0, "%s", H.err);
    const char *env = getenv("RINGD_CHAOS_MS");
    int chaos_ms = env && *env ? atoi(env) : CHAOS_MS;
    uint64_t seed = harness_seed("chaos");
    cr_assert_eq(harness_start(&H, seed, 50), 0, "%s", H.err);
    harness_barrier_init(&ch.bar, N);
    harness_threads t;
    cr_assert_eq(harness_threads_start(&H, &t, N, chaos_thread, &ch), 0, "%s", H.err);

    int kills = 0, freezes = 0;
    for (int64_t end = harness_now_ms() + chaos_ms; harness_now_ms() < end;) {
        harness_sleep_ms(500 + (int)(harness_rand(&seed) % 1500));
        int v = (int)(harness_rand(&seed) % N);
        if (harness_rand(&seed) % 2) {
            harness_kill(&H, v);
            harness_sleep_ms(200 + (int)(harness_rand(&seed) % 800));
            cr_assert_eq(harness_spawn(&H, v), 0, "%s", H.err);
            kills++;
        } else {
            harness_signal(&H, v, SIGSTOP);
            harness_sleep_ms(500 + (int)(harness_rand(&seed) % 2000));
            harness_signal(&H, v, SIGCONT);
            freezes++;
        }
    }
    atomic_store(&ch.over, 1);
    int rc = harness_threads_join(&H, &t, 300000);
    int calls = 0, ok = 0;
    int64_t longest = 0;
    for (int i = 0; i < N; i++) {
        cr_expect_str_empty(ch.why[i], "rank %d: %s", i, ch.why[i]);
        calls += ch.calls[i];
        ok += ch.ok[i];
        if (ch.longest_ms[i] > longest) longest = ch.longest_ms[i];
        fprintf(stderr, "chaos: rank %d: longest call %" PRId64 " ms: %s\n", i, ch.longest_ms[i],
                ch.longest[i]);
        for (int e = 1; e < 32; e++)
            if (ch.errors[i][e])
                fprintf(stderr, "chaos: rank %d: %d x %s\n", i, ch.errors[i][e], ringd_errname(-e));
    }
    fprintf(stderr,
            "chaos: %d s, %d kills, %d freezes; %d calls, %d ok, the longest %" PRId64 " ms\n",
            chaos_ms / 1000, kills, freezes, calls, ok, longest);
    cr_assert_eq(rc, 0, "a client thread failed");
    harness_barrier_destroy(&ch.bar);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

Test(faults, random_kills_and_freezes_never_hang_a_call_or_give_a_wrong_sum)
{
    chaos_run("");
}

Test(faults, the_same_chaos_over_2_tcp_streams_per_link)
{
    chaos_run("streams: 2\n");
}
