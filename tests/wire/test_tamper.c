/*
 * test_tamper.c - a machine on the path between two daemons changes,
 * replays, reorders or drops frames (issue 17, item 1).
 *
 * A frame-aware proxy sits on the link h0 -> h1 of a ring of three. Once
 * armed it does one thing to the DATA frames going forward: changes a
 * payload byte and fixes up the CRC32C when the frame has one (what the
 * checksum cannot catch), sends a frame twice, swaps two, or drops one.
 * With a cluster key every frame carries a tag over a per-link sequence
 * number: each of these fails the collective on every rank (RINGD_EAUTH
 * where the tag is checked and, by ABORT, after it; RINGD_ERING on the host
 * before the link, which learns of it as a lost link),
 * never a wrong value, and the ring re-forms by itself.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/crc32c.h"
#include "proto/frame.h"
#include "ringd.h"
#include "tests/harness/harness.h"
#include "tests/wire/wire_test.h"

#define N 3
#define COUNT (256u << 10) /* float32: 1 MiB, four segments per chunk step */
#define RECOVERY_MS 30000

static harness H;

static void setup(void)
{
    harness_reset(&H);
}

static void teardown(void)
{
    harness_cleanup(&H);
}

TestSuite(tamper, .init = setup, .fini = teardown, .timeout = 300);

/* ---- the proxy ---- */

typedef enum { CHANGE, REPLAY, REORDER, DROP } attack;

typedef struct {
    int listen_fd;
    uint16_t port, target;
    attack what;
    atomic_int armed, done, stop;
    pthread_t tid;
    uint8_t *frame, *held; /* one frame read whole; one held back to reorder */
    size_t held_len;
    int replayed;
    int seen; /* DATA frames seen since armed */
} proxy;

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int read_full(int fd, uint8_t *buf, size_t n, proxy *p)
{
    size_t got = 0;
    while (got < n && !atomic_load(&p->stop)) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, 100) <= 0) continue;
        ssize_t r = read(fd, buf + got, n - got);
        if (r <= 0) return -1;
        got += (size_t)r;
    }
    return got == n ? 0 : -1;
}

/* Does the attack to one whole forward frame; returns how many bytes of
 * what to send (0: nothing now). */
static size_t tamper(proxy *p, uint8_t *f, size_t len, int data, uint8_t **out)
{
    *out = f;
    if (!data || !atomic_load(&p->armed) || len < 12 + 64 + 200) return len;
    /* Not the first frame: the receiver reads the second only once its own
     * rank has started the collective (it holds the first until then), so
     * the attack never races a submission there. */
    if (++p->seen < 2) return len;
    uint16_t flags = (uint16_t)(f[6] << 8 | f[7]);
    switch (p->what) {
    case CHANGE: {
        uint8_t *payload = f + 12 + 64 + ((flags & FRAME_FLAG_TAG) ? FRAME_TAG_SIZE : 0);
        payload[100] ^= 0x10;
        if (flags & FRAME_FLAG_CRC) {
            /* What an attacker does to get past a checksum: make it match. */
            uint8_t fixed[64];
            memcpy(fixed, f + 12, 64);
            memset(fixed + FRAME_DATA_CRC_OFFSET, 0, 4);
            uint32_t plen = get32(f + 8) - 64;
            uint32_t crc = crc32c(crc32c(0, payload, plen), fixed, 64);
            uint8_t *c = f + 12 + FRAME_DATA_CRC_OFFSET;
            c[0] = (uint8_t)(crc >> 24), c[1] = (uint8_t)(crc >> 16);
            c[2] = (uint8_t)(crc >> 8), c[3] = (uint8_t)crc;
        }
        break;
    }
    case REPLAY:
        /* Sent now and once more below. */
        break;
    case DROP:
        atomic_store(&p->armed, 0);
        atomic_fetch_add(&p->done, 1);
        return 0;
    case REORDER:
        if (!p->held_len) {
            memcpy(p->held, f, len);
            p->held_len = len;
            return 0;
        }
        break;
    }
    atomic_store(&p->armed, 0);
    atomic_fetch_add(&p->done, 1);
    return len;
}

static void relay(proxy *p, int left)
{
    int right = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(p->target)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(right, (struct sockaddr *)&sa, sizeof sa) < 0) {
        close(right);
        return;
    }
    static uint8_t back[1 << 16];
    size_t hs = 0; /* HELLO, AUTH: the handshake passes untouched */
    p->held_len = 0;
    while (!atomic_load(&p->stop)) {
        struct pollfd fds[2] = {{.fd = left, .events = POLLIN}, {.fd = right, .events = POLLIN}};
        if (poll(fds, 2, 100) <= 0) continue;
        if (fds[1].revents) {
            ssize_t n = read(right, back, sizeof back);
            if (n <= 0 || harness_write_all(left, back, (size_t)n) < 0) break;
        }
        if (!fds[0].revents) continue;
        uint8_t *f = p->frame;
        if (read_full(left, f, 12, p) < 0) break;
        uint32_t body = get32(f + 8);
        uint16_t flags = (uint16_t)(f[6] << 8 | f[7]);
        int data = f[5] == FRAME_DATA;
        size_t tags = (flags & FRAME_FLAG_TAG) ? (data ? 2 : 1) * FRAME_TAG_SIZE : 0;
        size_t len = 12 + body + tags;
        if (body > (17u << 20) || read_full(left, f + 12, len - 12, p) < 0) break;
        hs++;
        uint8_t *out;
        size_t n = tamper(p, f, len, data, &out);
        if (n && harness_write_all(right, out, n) < 0) break;
        if (n && data && p->what == REPLAY && atomic_load(&p->done) == 1 && !p->replayed) {
            p->replayed = 1;
            if (harness_write_all(right, out, n) < 0) break;
        }
        if (n && data && p->what == REORDER && p->held_len > 1) {
            if (harness_write_all(right, p->held, p->held_len) < 0) break;
            p->held_len = 1;
        }
    }
    close(right);
}

static void *proxy_main(void *arg)
{
    proxy *p = arg;
    while (!atomic_load(&p->stop)) {
        struct pollfd pf = {.fd = p->listen_fd, .events = POLLIN};
        if (poll(&pf, 1, 100) <= 0) continue;
        int c = accept(p->listen_fd, NULL, NULL);
        if (c < 0) continue;
        relay(p, c);
        close(c);
    }
    return NULL;
}

static void proxy_start(proxy *p, uint16_t target, attack what)
{
    memset(p, 0, sizeof *p);
    p->target = target;
    p->what = what;
    p->frame = malloc(18u << 20);
    p->held = malloc(18u << 20);
    cr_assert(p->frame && p->held);
    p->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof sa;
    cr_assert_eq(bind(p->listen_fd, (struct sockaddr *)&sa, sizeof sa), 0);
    cr_assert_eq(listen(p->listen_fd, 4), 0);
    cr_assert_eq(getsockname(p->listen_fd, (struct sockaddr *)&sa, &sl), 0);
    p->port = ntohs(sa.sin_port);
    cr_assert_eq(pthread_create(&p->tid, NULL, proxy_main, p), 0);
}

static void proxy_stop(proxy *p)
{
    atomic_store(&p->stop, 1);
    pthread_join(p->tid, NULL);
    close(p->listen_fd);
    free(p->frame);
    free(p->held);
}

/* ---- the ranks ---- */

static proxy P;

typedef struct {
    harness_barrier bar;
    int rc[N];
    char msg[N][1024];
    char why[N][512];
} scenario;

static int allreduce_named(ringd_client *c, float *buf, const char *name)
{
    ringd_collective coll = {.kind = RINGD_COLL_ALLREDUCE,
                             .buf = buf,
                             .count = COUNT,
                             .dtype = RINGD_FLOAT32,
                             .op = RINGD_SUM,
                             .name = name};
    return ringd_run(c, &coll);
}

static int rank_thread(int idx, void *arg)
{
    scenario *s = arg;
    char *why = s->why[idx];
    size_t wl = sizeof s->why[idx];
    ringd_client *c = wire_connect(&H, idx, 20000, why, wl);
    int64_t deadline;
    if (!c) return -1;
    float *buf = ringd_alloc(c, COUNT * sizeof *buf);
    int rc = -1;
    if (!buf) goto out;
    /* Named collectives: a rank whose submission came after the ring broke
     * may be left a step behind, and must then fail, never mix phases. */
    static const char *const names[] = {"before", "tamper"};
    for (int phase = 0; phase < 2; phase++) {
        if (harness_barrier_wait(&s->bar, false, 60000) != 0) {
            snprintf(why, wl, "another rank failed");
            goto out;
        }
        if (phase == 1) {
            if (idx == 0) atomic_store(&P.armed, 1);
            if (harness_barrier_wait(&s->bar, false, 60000) != 0) goto out;
        }
        harness_fill_f32(buf, COUNT, idx, phase);
        rc = allreduce_named(c, buf, names[phase]);
        if (phase == 1) {
            s->rc[idx] = rc;
            snprintf(s->msg[idx], sizeof s->msg[idx], "%s", ringd_last_error(c));
            /* Whatever happened, a result that came back is right. */
            if (rc == 0 && harness_check_f32(buf, COUNT, N, phase, why, wl) < 0) goto out;
            continue;
        }
        if (rc != 0) {
            snprintf(why, wl, "phase %d: %s: %s", phase, ringd_errname(rc), ringd_last_error(c));
            goto out;
        }
        if (harness_check_f32(buf, COUNT, N, phase, why, wl) < 0) goto out;
    }
    /* The ring re-forms: each rank retries until one succeeds (they may
     * fail different numbers of times), the same values each time. */
    deadline = harness_now_ms() + RECOVERY_MS;
    do {
        harness_fill_f32(buf, COUNT, idx, 2);
        rc = allreduce_named(c, buf, "recover");
    } while (rc != 0 && rc != RINGD_ECLOSED && harness_now_ms() < deadline);
    if (rc != 0) {
        snprintf(why, wl, "no recovery: %s: %s", ringd_errname(rc), ringd_last_error(c));
        harness_barrier_wait(&s->bar, true, 60000);
        goto out;
    }
    if (harness_check_f32(buf, COUNT, N, 2, why, wl) < 0 ||
        harness_barrier_wait(&s->bar, false, 60000) != 0)
        goto out;
    for (int iter = 3; iter < 5; iter++) {
        harness_fill_f32(buf, COUNT, idx, iter);
        if ((rc = allreduce_named(c, buf, "after")) != 0) {
            snprintf(why, wl, "after recovery: %s: %s", ringd_errname(rc), ringd_last_error(c));
            goto out;
        }
        if (harness_check_f32(buf, COUNT, N, iter, why, wl) < 0) goto out;
    }
    rc = 0;
out:
    ringd_close(c);
    return rc;
}

/* Runs the attack on h0 -> h1 with extra_yaml; returns once every rank is
 * done, the results in s. */
static void run(attack what, const char *extra_yaml, scenario *s)
{
    char key[PATH_MAX], yaml[1024], from[64], to[64], config[PATH_MAX], h0[PATH_MAX];
    /* The timings as written for a machine shared two ways, stretched on a
     * busier one (tests/harness/timing.h). */
    snprintf(yaml, sizeof yaml,
             "collective_timeout: %dms\nheartbeat_interval: %dms\nheartbeat_timeout: %dms\n"
             "connect_timeout: %dms\nbackoff_initial: %dms\nbackoff_max: %dms\n"
             "segment_size: 64KiB\n%s",
             harness_ms(5000), harness_ms(200), harness_ms(2000), harness_ms(2000), harness_ms(50),
             harness_ms(500), extra_yaml);
    cr_assert_eq(harness_init(&H, N, yaml), 0, "%s", H.err);
    cr_assert_eq(
        harness_write_key(&H, "cluster.key", "0123456789abcdef0123456789abcdef", key, sizeof key),
        0, "%s", H.err);
    FILE *f = fopen(H.config, "a");
    cr_assert_not_null(f);
    fprintf(f, "secret_file: %s\n", key);
    fclose(f);
    proxy_start(&P, H.d[1].port, what);
    snprintf(from, sizeof from, "127.0.0.1:%u", (unsigned)H.d[1].port);
    snprintf(to, sizeof to, "127.0.0.1:%u", (unsigned)P.port);
    snprintf(config, sizeof config, "%s", H.config);
    cr_assert_eq(harness_config_variant(&H, "h0.yaml", from, to, h0, sizeof h0), 0, "%s", H.err);
    for (int i = 0; i < N; i++) {
        snprintf(H.config, sizeof H.config, "%s", i == 0 ? h0 : config);
        cr_assert_eq(harness_spawn(&H, i), 0, "%s", H.err);
    }
    snprintf(H.config, sizeof H.config, "%s", config);
    cr_assert_eq(harness_wait_all_ready(&H, HARNESS_READY_TIMEOUT_MS), 0, "%s", H.err);
    harness_barrier_init(&s->bar, N);
    int rc = harness_run_threads(&H, N, rank_thread, s, 120000);
    proxy_stop(&P);
    for (int i = 0; i < N; i++)
        cr_expect_str_empty(s->why[i], "rank %d: %s", i, s->why[i]);
    cr_assert_eq(rc, 0, "a rank failed");
    cr_expect_eq(atomic_load(&P.done), 1, "the proxy attacked %d times", atomic_load(&P.done));
    harness_barrier_destroy(&s->bar);
}

/* Every rank failed, and h1, which checks the tags of h0's frames, says
 * why, naming the link. */
static void expect_failed_everywhere(scenario *s, int h1_code)
{
    /* h0 and h2 may also have submitted it after the ring broke there: it
     * then fails later, on its own (ETIMEDOUT, or EMISMATCH against the
     * next collective). */
    for (int i = 0; i < N; i++) {
        int rc = s->rc[i];
        cr_expect(rc == RINGD_EAUTH || rc == RINGD_ERING || rc == RINGD_ETIMEDOUT ||
                      rc == RINGD_EMISMATCH,
                  "rank %d: %s: %s (expected a failure)", i, ringd_errname(rc), s->msg[i]);
    }
    cr_expect_eq(s->rc[1], h1_code, "rank 1: %s: %s", ringd_errname(s->rc[1]), s->msg[1]);
    cr_expect(strstr(s->msg[1], "authentication failed on the link from left neighbour h0") != NULL,
              "rank 1: %s", s->msg[1]);
    cr_expect_eq(harness_wait_log(&H, 1,
                                  "authentication failed on the link from left "
                                  "neighbour h0",
                                  5000),
                 0, "h1 logs the failure");
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

Test(tamper, a_changed_payload_with_its_crc_fixed_up_fails_with_eauth_never_a_wrong_sum)
{
    static scenario s;
    run(CHANGE, "", &s);
    expect_failed_everywhere(&s, RINGD_EAUTH);
    /* The ABORT carries it on to h2 (unless h2's rank came after the break). */
    cr_expect(s.rc[2] == RINGD_EAUTH || s.rc[2] == RINGD_ETIMEDOUT || s.rc[2] == RINGD_EMISMATCH,
              "rank 2: %s: %s", ringd_errname(s.rc[2]), s.msg[2]);
}

Test(tamper, a_changed_encrypted_payload_fails_the_same_way)
{
    static scenario s;
    run(CHANGE, "encryption: chacha20-poly1305\n", &s);
    expect_failed_everywhere(&s, RINGD_EAUTH);
}

Test(tamper, a_replayed_frame_breaks_the_link)
{
    static scenario s;
    run(REPLAY, "", &s);
    expect_failed_everywhere(&s, RINGD_EAUTH);
}

Test(tamper, reordered_frames_break_the_link)
{
    static scenario s;
    run(REORDER, "encryption: aes-256-gcm\n", &s);
    expect_failed_everywhere(&s, RINGD_EAUTH);
}

Test(tamper, a_dropped_frame_breaks_the_link)
{
    static scenario s;
    run(DROP, "", &s);
    expect_failed_everywhere(&s, RINGD_EAUTH);
}
