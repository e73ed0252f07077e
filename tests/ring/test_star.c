/*
 * test_star.c - `algorithm: star`: one host collects, reduces and sends
 * back. Real daemons, real clients, one thread per rank.
 *
 * Every allreduce is checked bit for bit on every rank: against the exact
 * reference of client/check.c for small integer inputs (every dtype and op,
 * sizes 0, 1, odd and many segments), and for float inputs that round,
 * against a reference that adds in the star's order (the root's value, then
 * the others in host order), which is also what makes every rank's bits the
 * same.
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/check.h"
#include "ringd.h"
#include "tests/harness/harness.h"
#include "tests/harness/proxy.h"

/* 4 KiB segments: 5003 int64 elements take 10 of them, more than the
 * root's window of 4 per leaf. */
#define YAML "algorithm: star\ncollective_timeout: 30s\nsegment_size: 4KiB\n"

static harness H;

static void setup(void)
{
    harness_reset(&H);
}

static void teardown(void)
{
    harness_cleanup(&H);
}

TestSuite(star, .init = setup, .fini = teardown, .timeout = 600);

typedef struct {
    int n, root;
    harness_failures fail;
} job;

static int is_float(ringd_dtype t)
{
    return t >= RINGD_FLOAT16;
}

static int check(job *j, const char *what, int rank, const void *got, const void *want,
                 size_t bytes)
{
    if (memcmp(got, want, bytes) == 0) return 0;
    size_t k = 0;
    while (((const uint8_t *)got)[k] == ((const uint8_t *)want)[k])
        k++;
    harness_fail(&j->fail, "%s: rank %d: byte %zu of %zu differs from the reference", what, rank, k,
                 bytes);
    return -1;
}

static const ringd_dtype dtypes[] = {RINGD_INT8,    RINGD_UINT8,    RINGD_INT32,   RINGD_INT64,
                                     RINGD_FLOAT16, RINGD_BFLOAT16, RINGD_FLOAT32, RINGD_FLOAT64};
static const size_t counts[] = {0, 1, 7, 1031, 5003};

/* A float input that rounds when added: sums depend on the order. */
static double rough(int r, size_t i)
{
    return sin((double)r * 7919.0 + (double)i) * 1e3 / (1.0 + (double)(i % 17));
}

static int every_dtype_op_and_size(int idx, void *arg)
{
    job *j = arg;
    ringd_client *c = NULL;
    if (ringd_connect(H.d[idx].socket, &c) < 0) {
        harness_fail(&j->fail, "rank %d: connect: %s", idx, ringd_last_error(NULL));
        return -1;
    }
    int r = ringd_rank(c), n = ringd_size(c);
    size_t max = 5003;
    uint8_t *buf = ringd_alloc(c, max * 8), *plain = malloc(max * 8), *want = malloc(max * 8);
    char what[160];
    if (n != j->n) harness_fail(&j->fail, "rank %d: size %d, expected %d", r, n, j->n);

    for (size_t d = 0; d < sizeof dtypes / sizeof *dtypes && buf; d++) {
        ringd_dtype t = dtypes[d];
        size_t es = ringd_dtype_size(t);
        for (ringd_op op = RINGD_SUM; op < RINGD_OP_COUNT; op++) {
            if ((op == RINGD_MEAN || op == RINGD_WMEAN) && !is_float(t)) continue;
            for (size_t s = 0; s < sizeof counts / sizeof *counts; s++) {
                size_t count = counts[s];
                /* Alternate shared and plain memory. */
                uint8_t *b = (d + s) % 2 ? plain : buf;
                check_fill(t, op, r, n, count, b, want);
                ringd_collective ar = {.kind = RINGD_COLL_ALLREDUCE,
                                       .buf = b,
                                       .count = count,
                                       .dtype = t,
                                       .op = op,
                                       .weight = r + 1.0};
                snprintf(what, sizeof what, "allreduce of %zu x %s %s", count, ringd_dtype_name(t),
                         ringd_op_name(op));
                if (ringd_run(c, &ar) < 0)
                    harness_fail(&j->fail, "%s: rank %d: %s", what, r, ringd_last_error(c));
                else
                    check(j, what, r, b, want, count * es);
            }
        }
    }

    /* Rounding inputs: the sum in the root's order, the root first. */
    for (int f = 0; f < 2 && buf; f++) {
        size_t count = 5003;
        for (size_t i = 0; i < count; i++) {
            double acc64 = rough(j->root, i);
            float acc32 = (float)rough(j->root, i);
            for (int h = 0; h < n; h++) {
                if (h == j->root) continue;
                acc64 += rough(h, i);
                acc32 += (float)rough(h, i);
            }
            if (f) {
                ((double *)buf)[i] = rough(r, i);
                ((double *)want)[i] = acc64;
            } else {
                ((float *)buf)[i] = (float)rough(r, i);
                ((float *)want)[i] = acc32;
            }
        }
        ringd_dtype t = f ? RINGD_FLOAT64 : RINGD_FLOAT32;
        snprintf(what, sizeof what, "allreduce of rounding %s", ringd_dtype_name(t));
        if (ringd_allreduce(c, buf, count, t, RINGD_SUM) < 0)
            harness_fail(&j->fail, "%s: rank %d: %s", what, r, ringd_last_error(c));
        else
            check(j, what, r, buf, want, count * ringd_dtype_size(t));
    }

    if (ringd_barrier(c) < 0)
        harness_fail(&j->fail, "barrier: rank %d: %s", r, ringd_last_error(c));

    /* The other collectives are refused, the same way on every rank, and
     * the star goes on. */
    int rc = ringd_broadcast(c, buf, 10, RINGD_INT32, 0);
    if (rc != RINGD_EINVAL ||
        !strstr(ringd_last_error(c), "algorithm star supports allreduce and barrier only"))
        harness_fail(&j->fail, "broadcast: rank %d: %s (%d), expected RINGD_EINVAL", r,
                     ringd_last_error(c), rc);
    if (ringd_barrier(c) < 0)
        harness_fail(&j->fail, "barrier: rank %d: %s", r, ringd_last_error(c));

    free(plain);
    free(want);
    ringd_free(c, buf);
    ringd_close(c);
    return atomic_load(&j->fail.count) ? -1 : 0;
}

static void run_star(int n, int root, const char *extra)
{
    char yaml[256];
    snprintf(yaml, sizeof yaml, "%s%s", YAML, extra);
    cr_assert_eq(harness_init(&H, n, yaml), 0, "%s", H.err);
    cr_assert_eq(harness_start(&H, harness_seed("star"), 50), 0, "%s", H.err);
    job j = {.n = n, .root = root};
    harness_failures_init(&j.fail);
    int rc = harness_run_threads(&H, n, every_dtype_op_and_size, &j, 300000);
    cr_expect_eq(atomic_load(&j.fail.count), 0, "N=%d: %s", n, j.fail.first);
    cr_expect_eq(rc, 0, "%s", H.err);
    harness_failures_destroy(&j.fail);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

Test(star, allreduce_is_exact_on_every_rank_with_1_host)
{
    run_star(1, 0, "");
}

Test(star, allreduce_is_exact_on_every_rank_with_2_hosts)
{
    run_star(2, 0, "");
}

Test(star, allreduce_is_exact_on_every_rank_with_3_hosts)
{
    run_star(3, 0, "");
}

Test(star, allreduce_is_exact_on_every_rank_with_4_hosts)
{
    run_star(4, 0, "");
}

Test(star, the_root_may_be_any_host_and_reduces_its_own_value_first)
{
    run_star(3, 2, "star_root: h2\n");
}

/* ---- a host that is not up ---- */

static int times_out(int idx, void *arg)
{
    job *j = arg;
    ringd_client *c = NULL;
    if (ringd_connect(H.d[idx].socket, &c) < 0) {
        harness_fail(&j->fail, "rank %d: connect: %s", idx, ringd_last_error(NULL));
        return -1;
    }
    float x[100] = {0};
    int64_t t0 = harness_now_ms();
    int rc = ringd_allreduce(c, x, 100, RINGD_FLOAT32, RINGD_SUM);
    int64_t took = harness_now_ms() - t0;
    const char *msg = ringd_last_error(c);
    if (rc != RINGD_ETIMEDOUT)
        harness_fail(&j->fail, "rank %d: got %d (%s), expected RINGD_ETIMEDOUT", idx, rc, msg);
    else if (idx == 0 && !strstr(msg, "host h2"))
        harness_fail(&j->fail, "rank 0: the message does not name host h2: %s", msg);
    else if (took > 10000)
        harness_fail(&j->fail, "rank %d: failed after %lld ms, the deadline is 1 s", idx,
                     (long long)took);
    ringd_close(c);
    return atomic_load(&j->fail.count) ? -1 : 0;
}

static int allreduce_ok(int idx, void *arg)
{
    job *j = arg;
    ringd_client *c = NULL;
    if (ringd_connect(H.d[idx].socket, &c) < 0) {
        harness_fail(&j->fail, "rank %d: connect: %s", idx, ringd_last_error(NULL));
        return -1;
    }
    int64_t x[3000];
    for (int i = 0; i < 3000; i++)
        x[i] = idx * 1000 + i;
    int rc = ringd_allreduce(c, x, 3000, RINGD_INT64, RINGD_SUM);
    if (rc < 0) harness_fail(&j->fail, "rank %d: %s", idx, ringd_last_error(c));
    for (int i = 0; i < 3000 && rc == 0; i++)
        if (x[i] != 3000 + 3 * i) {
            harness_fail(&j->fail, "rank %d: element %d is %lld, expected %d", idx, i,
                         (long long)x[i], 3000 + 3 * i);
            break;
        }
    ringd_close(c);
    return atomic_load(&j->fail.count) ? -1 : 0;
}

Test(star, a_host_that_is_not_up_makes_the_collective_time_out_then_it_joins)
{
    cr_assert_eq(harness_init(&H, 3,
                              "algorithm: star\ncollective_timeout: 1s\nsegment_size: 4KiB\n"
                              "backoff_max: 200ms\n"),
                 0, "%s", H.err);
    int order[] = {0, 1};
    cr_assert_eq(harness_start_in_order(&H, order, NULL, 2), 0, "%s", H.err);
    cr_assert_eq(harness_wait_ready(&H, 0, HARNESS_READY_TIMEOUT_MS), 0, "%s", H.err);
    cr_assert_eq(harness_wait_ready(&H, 1, HARNESS_READY_TIMEOUT_MS), 0, "%s", H.err);
    job j = {.n = 3};
    harness_failures_init(&j.fail);
    int rc = harness_run_threads(&H, 2, times_out, &j, 60000);
    cr_expect_eq(atomic_load(&j.fail.count), 0, "%s", j.fail.first);
    cr_expect_eq(rc, 0, "%s", H.err);

    /* The missing host comes: the star forms and works. */
    cr_assert_eq(harness_spawn(&H, 2), 0, "%s", H.err);
    cr_assert_eq(harness_wait_ready(&H, 2, HARNESS_READY_TIMEOUT_MS), 0, "%s", H.err);
    rc = harness_run_threads(&H, 3, allreduce_ok, &j, 60000);
    cr_expect_eq(atomic_load(&j.fail.count), 0, "%s", j.fail.first);
    cr_expect_eq(rc, 0, "%s", H.err);
    harness_failures_destroy(&j.fail);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

/* ---- a host that goes away ---- */

Test(star, a_lost_leaf_fails_the_collective_naming_it_and_the_rest_go_on)
{
    cr_assert_eq(harness_init(&H, 3,
                              "algorithm: star\ncollective_timeout: 20s\n"
                              "backoff_max: 200ms\n"),
                 0, "%s", H.err);
    cr_assert_eq(harness_start(&H, harness_seed("star-lost"), 0), 0, "%s", H.err);
    job j = {.n = 3};
    harness_failures_init(&j.fail);
    cr_assert_eq(harness_run_threads(&H, 3, allreduce_ok, &j, 60000), 0, "%s", j.fail.first);

    /* Ranks 0 and 1 start an allreduce that h2 never joins: h2 dies. */
    ringd_client *c[2];
    ringd_request *req[2];
    static float x[2][1000];
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(ringd_connect(H.d[i].socket, &c[i]), 0, "%s", ringd_last_error(NULL));
        cr_assert_eq(ringd_iallreduce(c[i], x[i], 1000, RINGD_FLOAT32, RINGD_SUM, &req[i]), 0, "%s",
                     ringd_last_error(c[i]));
    }
    harness_sleep_ms(300); /* the scenario: both have submitted */
    kill(H.d[2].pid, SIGKILL);
    for (int i = 0; i < 2; i++) {
        int rc = ringd_wait(req[i], 30000);
        cr_expect_eq(rc, RINGD_ERING, "rank %d: %d: %s", i, rc, ringd_last_error(c[i]));
        cr_expect(strstr(ringd_last_error(c[i]), "h2") != NULL, "rank %d: %s", i,
                  ringd_last_error(c[i]));
        ringd_close(c[i]);
    }

    /* h2 comes back, falls in step with the root, and the star works. */
    int spawned = -1;
    for (int t = 0; t < 500 && (spawned = harness_spawn(&H, 2)) < 0; t++)
        harness_sleep_ms(10); /* until the killed one is reaped */
    cr_assert_eq(spawned, 0, "%s", H.err);
    cr_assert_eq(harness_wait_ready(&H, 2, HARNESS_READY_TIMEOUT_MS), 0, "%s", H.err);
    cr_expect_eq(harness_run_threads(&H, 3, allreduce_ok, &j, 60000), 0, "%s", j.fail.first);
    harness_failures_destroy(&j.fail);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

/* ---- ranks that disagree ---- */

static char mismatch_msg[3][1024];

static int count_differs(int idx, void *arg)
{
    job *j = arg;
    ringd_client *c = NULL;
    if (ringd_connect(H.d[idx].socket, &c) < 0) {
        harness_fail(&j->fail, "rank %d: connect: %s", idx, ringd_last_error(NULL));
        return -1;
    }
    static float x[3][20000];
    /* h2 (a leaf) has one element fewer; 20000 floats are 20 segments. */
    size_t count = idx == 2 ? 19999 : 20000;
    int rc = ringd_allreduce(c, x[idx], count, RINGD_FLOAT32, RINGD_SUM);
    const char *msg = ringd_last_error(c);
    snprintf(mismatch_msg[idx], sizeof mismatch_msg[idx], "%s", msg);
    if (rc != RINGD_EMISMATCH || !strstr(msg, "differs between ranks") || !strstr(msg, "h2"))
        harness_fail(&j->fail, "rank %d: got %d (%s), expected RINGD_EMISMATCH naming h2", idx, rc,
                     msg);
    /* The star goes on with the next collective. */
    if (ringd_barrier(c) < 0)
        harness_fail(&j->fail, "barrier: rank %d: %s", idx, ringd_last_error(c));
    ringd_close(c);
    return atomic_load(&j->fail.count) ? -1 : 0;
}

Test(star, ranks_that_disagree_fail_on_every_rank_with_the_same_message_and_the_star_goes_on)
{
    cr_assert_eq(
        harness_init(&H, 3, "algorithm: star\ncollective_timeout: 20s\nsegment_size: 4KiB\n"), 0,
        "%s", H.err);
    cr_assert_eq(harness_start(&H, harness_seed("star-mismatch"), 30), 0, "%s", H.err);
    job j = {.n = 3};
    harness_failures_init(&j.fail);
    int rc = harness_run_threads(&H, 3, count_differs, &j, 60000);
    cr_expect_eq(atomic_load(&j.fail.count), 0, "%s", j.fail.first);
    cr_expect_eq(rc, 0, "%s", H.err);
    for (int i = 1; i < 3; i++)
        cr_expect_str_eq(mismatch_msg[i], mismatch_msg[0],
                         "rank %d's message differs from rank 0's", i);
    harness_failures_destroy(&j.fail);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

/* ---- the star on the ring's transport ---- */

/* Spawns every host with config, but `odd` with odd_config; waits for all. */
static void spawn_all(const char *config, int odd, const char *odd_config)
{
    for (int i = 0; i < H.n; i++) {
        snprintf(H.config, sizeof H.config, "%s", i == odd ? odd_config : config);
        cr_assert_eq(harness_spawn(&H, i), 0, "%s", H.err);
    }
    snprintf(H.config, sizeof H.config, "%s", config);
    cr_assert_eq(harness_wait_all_ready(&H, HARNESS_READY_TIMEOUT_MS), 0, "%s", H.err);
}

Test(star, a_leaf_with_the_wrong_key_is_refused_and_joins_once_it_is_fixed)
{
    char good[PATH_MAX], bad[PATH_MAX], config[PATH_MAX], bad_config[PATH_MAX];
    cr_assert_eq(harness_init(&H, 3, YAML "backoff_max: 200ms\n"), 0, "%s", H.err);
    cr_assert_eq(harness_write_key(&H, "good.key", "0123456789abcdef-the-cluster-key\n", good,
                                   sizeof good),
                 0, "%s", H.err);
    cr_assert_eq(harness_write_key(&H, "bad.key", "0123456789abcdef-another-key-xxx\n", bad,
                                   sizeof bad),
                 0, "%s", H.err);
    snprintf(config, sizeof config, "%s", H.config);
    FILE *f = fopen(config, "a");
    cr_assert_not_null(f);
    fprintf(f, "secret_file: %s\n", good);
    fclose(f);
    cr_assert_eq(harness_config_variant(&H, "bad.yaml", good, bad, bad_config, sizeof bad_config),
                 0, "%s", H.err);
    spawn_all(config, 2, bad_config);

    /* The root refuses h2 and says why; h2 hears it was refused. */
    cr_expect_eq(harness_wait_log(&H, 0, "authentication failed", 20000), 0, "%s", H.err);
    cr_expect_eq(harness_wait_log(&H, 2, "authentication failed", 20000), 0, "%s", H.err);

    /* With the right key it joins, and the star works. */
    harness_kill(&H, 2);
    cr_assert_eq(harness_spawn(&H, 2), 0, "%s", H.err);
    cr_assert_eq(harness_wait_ready(&H, 2, HARNESS_READY_TIMEOUT_MS), 0, "%s", H.err);
    job j = {.n = 3};
    harness_failures_init(&j.fail);
    cr_expect_eq(harness_run_threads(&H, 3, allreduce_ok, &j, 60000), 0, "%s", j.fail.first);
    harness_failures_destroy(&j.fail);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

static harness_proxy proxy;

typedef struct {
    job j;
    harness_barrier bar;
    int rc[3];
    char msg[3][1024];
} flip_run;

/* Three allreduces: the second while the proxy on h1's link flips a bit. */
static int three_phases(int idx, void *arg)
{
    flip_run *f = arg;
    ringd_client *c = NULL;
    if (ringd_connect(H.d[idx].socket, &c) < 0) {
        harness_fail(&f->j.fail, "rank %d: connect: %s", idx, ringd_last_error(NULL));
        harness_barrier_wait(&f->bar, true, 60000);
        return -1;
    }
    int64_t x[3000];
    for (int phase = 0; phase < 3; phase++) {
        if (harness_barrier_wait(&f->bar, false, 60000) != 0) break;
        if (phase == 1 && idx == 0) harness_proxy_arm(&proxy);
        if (phase == 1 && harness_barrier_wait(&f->bar, false, 60000) != 0) break;
        for (int i = 0; i < 3000; i++)
            x[i] = idx * 1000 + i + phase;
        int rc = ringd_allreduce(c, x, 3000, RINGD_INT64, RINGD_SUM);
        if (phase == 1) {
            f->rc[idx] = rc;
            snprintf(f->msg[idx], sizeof f->msg[idx], "%s", ringd_last_error(c));
            continue;
        }
        if (rc < 0)
            harness_fail(&f->j.fail, "phase %d: rank %d: %s", phase, idx, ringd_last_error(c));
        for (int i = 0; i < 3000 && rc == 0; i++)
            if (x[i] != 3000 + 3 * (i + phase)) {
                harness_fail(&f->j.fail, "phase %d: rank %d: element %d is %lld", phase, idx, i,
                             (long long)x[i]);
                break;
            }
    }
    ringd_close(c);
    return atomic_load(&f->j.fail.count) ? -1 : 0;
}

Test(star, a_bit_flipped_on_a_leafs_link_fails_the_collective_on_every_rank_never_the_sum)
{
    static flip_run f;
    char from[64], to[64], config[PATH_MAX], h1_config[PATH_MAX];
    cr_assert_eq(harness_init(&H, 3, YAML), 0, "%s", H.err);
    cr_assert_eq(harness_proxy_start(&proxy, H.d[0].port), 0);
    /* h1 reaches the root h0 through the proxy. */
    snprintf(from, sizeof from, "127.0.0.1:%u", (unsigned)H.d[0].port);
    snprintf(to, sizeof to, "127.0.0.1:%u", (unsigned)proxy.port);
    snprintf(config, sizeof config, "%s", H.config);
    cr_assert_eq(harness_config_variant(&H, "h1.yaml", from, to, h1_config, sizeof h1_config), 0,
                 "%s", H.err);
    spawn_all(config, 1, h1_config);

    harness_failures_init(&f.j.fail);
    harness_barrier_init(&f.bar, 3);
    int rc = harness_run_threads(&H, 3, three_phases, &f, 120000);
    harness_proxy_stop(&proxy);
    cr_expect_eq(atomic_load(&f.j.fail.count), 0, "%s", f.j.fail.first);
    cr_expect_eq(rc, 0, "%s", H.err);
    cr_expect_eq(harness_proxy_flipped(&proxy), 1, "the proxy flipped %d bits",
                 harness_proxy_flipped(&proxy));
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(f.rc[i], RINGD_ECORRUPT, "rank %d: %s: %s", i, ringd_errname(f.rc[i]),
                     f.msg[i]);
        cr_expect(strstr(f.msg[i], "checksum mismatch") != NULL, "rank %d: %s", i, f.msg[i]);
    }
    harness_barrier_destroy(&f.bar);
    harness_failures_destroy(&f.j.fail);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

/* An allreduce of `count` int32 on every rank, checked element by element. */
static size_t big_count;

static int big_allreduce(int idx, void *arg)
{
    job *j = arg;
    ringd_client *c = NULL;
    if (ringd_connect(H.d[idx].socket, &c) < 0) {
        harness_fail(&j->fail, "rank %d: connect: %s", idx, ringd_last_error(NULL));
        return -1;
    }
    int32_t *x = ringd_alloc(c, big_count * sizeof *x);
    int rc = x ? 0 : -1;
    for (size_t i = 0; i < big_count && x; i++)
        x[i] = idx * 1000 + (int32_t)(i % 100000);
    if (x) rc = ringd_allreduce(c, x, big_count, RINGD_INT32, RINGD_SUM);
    if (rc < 0) harness_fail(&j->fail, "rank %d: %s", idx, ringd_last_error(c));
    for (size_t i = 0; i < big_count && rc == 0; i++)
        if (x[i] != 3000 + 3 * (int32_t)(i % 100000)) {
            harness_fail(&j->fail, "rank %d: element %zu is %d", idx, i, x[i]);
            break;
        }
    ringd_close(c);
    return atomic_load(&j->fail.count) ? -1 : 0;
}

Test(star, a_reload_to_a_larger_segment_size_keeps_every_result_exact)
{
    char path[PATH_MAX];
    cr_assert_eq(harness_init(&H, 3, "algorithm: star\ncollective_timeout: 60s\n"
                                     "segment_size: 64KiB\n"),
                 0, "%s", H.err);
    cr_assert_eq(harness_start(&H, harness_seed("star-reload"), 0), 0, "%s", H.err);
    job j = {.n = 3};
    harness_failures_init(&j.fail);
    big_count = 1u << 20; /* 4 MiB: 64 segments, 16 windows' worth at the root */
    cr_expect_eq(harness_run_threads(&H, 3, big_allreduce, &j, 120000), 0, "%s", j.fail.first);

    /* Every host reloads to 4 MiB segments: the root's windows must grow. */
    cr_assert_eq(harness_config_variant(&H, "ringd.yaml", "segment_size: 64KiB",
                                        "segment_size: 4MiB", path, sizeof path),
                 0, "%s", H.err);
    harness_signal_all(&H, SIGHUP);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(harness_wait_log(&H, i, "reload: segment_size", 20000), 0, "%s", H.err);
    big_count = 6u << 20; /* 24 MiB: 6 segments, more than the root's window of 4 */
    cr_expect_eq(harness_run_threads(&H, 3, big_allreduce, &j, 120000), 0, "%s", j.fail.first);
    harness_failures_destroy(&j.fail);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}
