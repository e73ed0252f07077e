/*
 * test_collectives.c - every collective, several processes per host, async
 * requests, and what every rank sees when the ranks disagree or one of them
 * never comes. Real daemons, real clients: one thread per rank.
 *
 * Inputs and expected results come from client/check.c, the data of
 * ringctl's end-to-end checks: small integers, exact in every dtype, with
 * every expected result computed independently of the daemon's kernels. So
 * results are compared bit for bit with the reference, and across ranks. A
 * separate test checks WMEAN with unequal values against a double reference
 * within a stated bound.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/check.h"
#include "ringd.h"
#include "tests/harness/harness.h"

#define YAML "collective_timeout: 30s\nsegment_size: 4KiB\n"

static harness H;

static void setup(void)
{
    harness_reset(&H);
}

static void teardown(void)
{
    harness_cleanup(&H);
}

TestSuite(collectives, .init = setup, .fini = teardown, .timeout = 600);
TestSuite(async, .init = setup, .fini = teardown, .timeout = 300);
TestSuite(mismatch, .init = setup, .fini = teardown, .timeout = 300);

/* ---- values ---- */

static int is_float(ringd_dtype t)
{
    return t >= RINGD_FLOAT16;
}

/* ---- one rank's work ---- */

typedef struct {
    int hosts, per_host, n; /* n = hosts x per_host ranks */
    size_t count;
    harness_failures fail;
} job;

static ringd_client *connect_rank(job *j, int idx)
{
    return harness_connect(&H, idx / j->per_host, &j->fail, idx);
}

static int check_bytes(job *j, const char *what, int rank, const void *got, const void *want,
                       size_t bytes)
{
    if (memcmp(got, want, bytes) == 0) return 0;
    size_t k = 0;
    while (((const uint8_t *)got)[k] == ((const uint8_t *)want)[k])
        k++;
    harness_fail(&j->fail, "%s: rank %d: byte %zu differs from the reference", what, rank, k);
    return -1;
}

static const ringd_dtype dtypes[] = {RINGD_INT8,    RINGD_UINT8,    RINGD_INT32,   RINGD_INT64,
                                     RINGD_FLOAT16, RINGD_BFLOAT16, RINGD_FLOAT32, RINGD_FLOAT64};
#define N_DTYPES (sizeof dtypes / sizeof *dtypes)

/* Every collective, every dtype, and for the reductions every op. */
static int all_collectives(int idx, void *arg)
{
    job *j = arg;
    ringd_client *c = connect_rank(j, idx);
    if (!c) return -1;
    int r = ringd_rank(c), n = ringd_size(c);
    size_t count = j->count;
    uint8_t *buf = ringd_alloc(c, (size_t)n * count * 8 + 64);
    uint8_t *plain = malloc((size_t)n * count * 8 + 64), *want = malloc((size_t)n * count * 8);
    uint8_t *in = malloc((size_t)n * count * 8), *full = malloc((size_t)n * count * 8);
    char what[128];
    if (n != j->n) harness_fail(&j->fail, "rank %d: size %d, expected %d", r, n, j->n);

    for (size_t d = 0; d < N_DTYPES && buf; d++) {
        ringd_dtype t = dtypes[d];
        size_t es = ringd_dtype_size(t);
        /* Alternate shared and plain memory. */
        uint8_t *b = d % 2 ? plain : buf;

        for (ringd_op op = RINGD_SUM; op < RINGD_OP_COUNT; op++) {
            if ((op == RINGD_MEAN || op == RINGD_WMEAN) && !is_float(t)) continue;
            /* allreduce */
            check_fill(t, op, r, n, count, b, want);
            ringd_collective ar = {.kind = RINGD_COLL_ALLREDUCE,
                                   .buf = b,
                                   .count = count,
                                   .dtype = t,
                                   .op = op,
                                   .weight = r + 1.0};
            snprintf(what, sizeof what, "allreduce %s %s", ringd_dtype_name(t), ringd_op_name(op));
            int rc = ringd_run(c, &ar);
            if (rc < 0)
                harness_fail(&j->fail, "%s: rank %d: %s", what, r, ringd_last_error(c));
            else
                check_bytes(j, what, r, b, want, count * es);

            /* reduce_scatter: rank r gets block r of the reduction; the
             * input is every rank's n blocks. */
            check_fill(t, op, r, n, (size_t)n * count, in, full);
            snprintf(what, sizeof what, "reduce_scatter %s %s", ringd_dtype_name(t),
                     ringd_op_name(op));
            ringd_collective rs = {.kind = RINGD_COLL_REDUCE_SCATTER,
                                   .input = in,
                                   .buf = b,
                                   .count = count,
                                   .dtype = t,
                                   .op = op,
                                   .weight = r + 1.0};
            rc = ringd_run(c, &rs);
            if (rc < 0)
                harness_fail(&j->fail, "%s: rank %d: %s", what, r, ringd_last_error(c));
            else
                check_bytes(j, what, r, b, full + (size_t)r * count * es, count * es);
        }

        /* broadcast from every root */
        for (int root = 0; root < n; root++) {
            check_fill(t, RINGD_SUM, root, n, count, want, full);
            if (r == root)
                memcpy(b, want, count * es);
            else
                memset(b, 0, count * es);
            snprintf(what, sizeof what, "broadcast %s from %d", ringd_dtype_name(t), root);
            int rc = ringd_broadcast(c, b, count, t, root);
            if (rc < 0)
                harness_fail(&j->fail, "%s: rank %d: %s", what, r, ringd_last_error(c));
            else
                check_bytes(j, what, r, b, want, count * es);
        }

        /* allgather, from a separate input and in place */
        for (int in_place = 0; in_place < 2; in_place++) {
            memset(b, 0x5a, (size_t)n * count * es);
            for (int k = 0; k < n; k++)
                check_fill(t, RINGD_MIN, k, n, count, want + (size_t)k * count * es, full);
            memcpy(in_place ? b + (size_t)r * count * es : in, want + (size_t)r * count * es,
                   count * es);
            snprintf(what, sizeof what, "allgather %s%s", ringd_dtype_name(t),
                     in_place ? " in place" : "");
            int rc = ringd_allgather(c, in_place ? NULL : in, b, count, t);
            if (rc < 0)
                harness_fail(&j->fail, "%s: rank %d: %s", what, r, ringd_last_error(c));
            else
                check_bytes(j, what, r, b, want, (size_t)n * count * es);
        }
    }
    int rc = ringd_barrier(c);
    if (rc < 0) harness_fail(&j->fail, "barrier: rank %d: %s", r, ringd_last_error(c));
    free(plain);
    free(want);
    free(in);
    free(full);
    ringd_free(c, buf);
    ringd_close(c);
    return atomic_load(&j->fail.count) ? -1 : 0;
}

static void run(int hosts, int per_host, size_t count, harness_thread_fn fn, const char *yaml,
                const char *seed_name)
{
    cr_assert_eq(harness_init_local(&H, hosts, per_host, yaml), 0, "%s", H.err);
    cr_assert_eq(harness_start(&H, harness_seed(seed_name), 50), 0, "%s", H.err);
    job j = {.hosts = hosts, .per_host = per_host, .n = hosts * per_host, .count = count};
    harness_failures_init(&j.fail);
    int rc = harness_run_threads(&H, j.n, fn, &j, 400000);
    cr_expect_eq(atomic_load(&j.fail.count), 0, "%s", j.fail.first);
    cr_expect_eq(rc, 0, "%s", H.err);
    harness_failures_destroy(&j.fail);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

Test(collectives, every_kind_dtype_and_op_on_3_hosts_with_2_processes_each)
{
    run(3, 2, 1031, all_collectives, YAML, "3x2");
}

Test(collectives, every_kind_dtype_and_op_on_4_hosts_with_1_process_each)
{
    run(4, 1, 517, all_collectives, YAML, "4x1");
}

/* streams: 3 stripes every link's bytes over three TCP connections: the
 * results must be the same, frame order and all. */
Test(collectives, every_kind_dtype_and_op_over_3_tcp_streams_per_link)
{
    run(4, 1, 20011, all_collectives, YAML "streams: 3\n", "4x1-streams");
}

Test(collectives, every_kind_on_one_host_with_3_processes)
{
    run(1, 3, 77, all_collectives, YAML, "1x3");
}

/* ---- weighted mean with unequal values ---- */

static int wmean_values(int idx, void *arg)
{
    job *j = arg;
    ringd_client *c = connect_rank(j, idx);
    if (!c) return -1;
    int r = ringd_rank(c), n = ringd_size(c);
    enum { COUNT = 999 };
    double x[COUNT];
    for (size_t i = 0; i < COUNT; i++)
        x[i] = sin((double)(r * COUNT + i)) * 100;
    ringd_collective coll = {.kind = RINGD_COLL_ALLREDUCE,
                             .buf = x,
                             .count = COUNT,
                             .dtype = RINGD_FLOAT64,
                             .op = RINGD_WMEAN,
                             .weight = r + 1.0};
    int rc = ringd_run(c, &coll);
    if (rc < 0) harness_fail(&j->fail, "wmean: rank %d: %s", r, ringd_last_error(c));
    /* Against Σ w_k x_k / Σ w_k in long double: each of the n products,
     * n - 1 additions and the division rounds once in float64, so the error
     * is below (2n + 1) u Σ w_k |x_k| / Σ w_k with u = 2^-53. */
    for (size_t i = 0; i < COUNT && rc == 0; i++) {
        long double num = 0, den = 0, mag = 0;
        for (int k = 0; k < n; k++) {
            long double xk = sinl((long double)(k * COUNT + i)) * 100;
            xk = (double)xk;
            num += (k + 1) * xk;
            mag += (k + 1) * fabsl(xk);
            den += k + 1;
        }
        long double bound = (2 * n + 1) * ldexpl(1, -53) * mag / den;
        if (fabsl(x[i] - num / den) > bound) {
            harness_fail(&j->fail, "wmean: rank %d element %zu: %.17g, want %.17Lg (bound %Lg)", r,
                         i, x[i], num / den, bound);
            break;
        }
    }
    ringd_close(c);
    return atomic_load(&j->fail.count) ? -1 : 0;
}

Test(collectives, wmean_weighs_each_rank_by_its_own_weight)
{
    run(3, 2, 0, wmean_values, YAML, "wmean");
}

/* ---- async ---- */

#define ASYNC_N 100

static int many_in_flight(int idx, void *arg)
{
    job *j = arg;
    ringd_client *c = connect_rank(j, idx);
    if (!c) return -1;
    int r = ringd_rank(c), n = ringd_size(c);
    ringd_request *req[ASYNC_N];
    int32_t *bufs[ASYNC_N];
    size_t counts[ASYNC_N];
    /* Mixed sizes, half of them in shared memory. */
    for (int k = 0; k < ASYNC_N; k++) {
        counts[k] = (size_t)(k * 7919 % 5000) + (k % 3 == 0 ? 70000 : 1);
        bufs[k] = k % 2 ? malloc(counts[k] * 4) : ringd_alloc(c, counts[k] * 4);
        for (size_t i = 0; i < counts[k]; i++)
            bufs[k][i] = (int32_t)((size_t)r * 1000 + i + (size_t)k);
        if (ringd_iallreduce(c, bufs[k], counts[k], RINGD_INT32, RINGD_SUM, &req[k]) < 0) {
            harness_fail(&j->fail, "async: rank %d: submit %d: %s", r, k, ringd_last_error(c));
            return -1;
        }
    }
    /* Waiting for the last completes all: the earlier ones test as done. */
    int rc = ringd_wait(req[ASYNC_N - 1], 60000);
    if (rc < 0) harness_fail(&j->fail, "async: rank %d: wait last: %s", r, ringd_last_error(c));
    for (int k = 0; k < ASYNC_N - 1; k++) {
        rc = ringd_test(req[k]);
        if (rc < 0)
            harness_fail(&j->fail, "async: rank %d: request %d: %s", r, k, ringd_last_error(c));
        if (rc == RINGD_EINPROGRESS)
            harness_fail(&j->fail, "async: rank %d: request %d not done", r, k);
    }
    for (int k = 0; k < ASYNC_N; k++) {
        for (size_t i = 0; i < counts[k]; i++) {
            int32_t want =
                (int32_t)((size_t)n * (i + (size_t)k) + 1000 * (size_t)(n * (n - 1) / 2));
            if (bufs[k][i] != want) {
                harness_fail(&j->fail, "async: rank %d: request %d element %zu: %d, want %d", r, k,
                             i, bufs[k][i], want);
                break;
            }
        }
        if (k % 2)
            free(bufs[k]);
        else
            ringd_free(c, bufs[k]);
    }
    ringd_close(c);
    return atomic_load(&j->fail.count) ? -1 : 0;
}

Test(async, a_hundred_requests_of_mixed_sizes_in_flight_complete_in_order)
{
    run(3, 2, 0, many_in_flight, YAML, "async");
}

Test(async, the_same_over_2_tcp_streams_per_link)
{
    run(3, 2, 0, many_in_flight, YAML "streams: 2\n", "async-streams");
}

/* ---- disagreement and absence ---- */

/* After a failed collective the next one works: closes c. */
static int ring_goes_on(job *j, ringd_client *c, int r)
{
    float x[100];
    for (size_t i = 0; i < 100; i++)
        x[i] = 1;
    int rc = ringd_allreduce(c, x, 100, RINGD_FLOAT32, RINGD_SUM);
    if (rc < 0)
        harness_fail(&j->fail, "after the mismatch: rank %d: %s", r, ringd_last_error(c));
    else if (x[0] != (float)j->n)
        harness_fail(&j->fail, "after the mismatch: rank %d: %g", r, x[0]);
    ringd_close(c);
    return atomic_load(&j->fail.count) ? -1 : 0;
}

static int one_rank_differs(int idx, void *arg)
{
    job *j = arg;
    ringd_client *c = connect_rank(j, idx);
    if (!c) return -1;
    int r = ringd_rank(c);
    float x[100] = {0};
    /* Rank 3 asks for 99 elements where the others ask for 100. */
    ringd_collective coll = {.kind = RINGD_COLL_ALLREDUCE,
                             .buf = x,
                             .count = r == 3 ? 99 : 100,
                             .dtype = RINGD_FLOAT32,
                             .op = RINGD_SUM,
                             .name = "fc1.weight"};
    int rc = ringd_run(c, &coll);
    const char *msg = ringd_last_error(c);
    if (rc != RINGD_EMISMATCH)
        harness_fail(&j->fail, "mismatch: rank %d got %s (%s), want RINGD_EMISMATCH", r,
                     ringd_errname(rc), msg);
    else if (!strstr(msg, "fc1.weight") || !strstr(msg, "differs") || !strstr(msg, "rank 3") ||
             !strstr(msg, "99"))
        harness_fail(&j->fail, "mismatch: rank %d: the message does not say what differs where: %s",
                     r, msg);
    return ring_goes_on(j, c, r);
}

/* Same shape, another name: ranks out of step after an error must fail, not
 * sum one tensor with another. */
static int one_rank_names_another(int idx, void *arg)
{
    job *j = arg;
    ringd_client *c = connect_rank(j, idx);
    if (!c) return -1;
    int r = ringd_rank(c);
    float x[100] = {0};
    ringd_collective coll = {.kind = RINGD_COLL_ALLREDUCE,
                             .buf = x,
                             .count = 100,
                             .dtype = RINGD_FLOAT32,
                             .op = RINGD_SUM,
                             .name = r == 3 ? "fc2.weight" : "fc1.weight"};
    int rc = ringd_run(c, &coll);
    const char *msg = ringd_last_error(c);
    if (rc != RINGD_EMISMATCH)
        harness_fail(&j->fail, "name: rank %d got %s (%s), want RINGD_EMISMATCH", r,
                     ringd_errname(rc), msg);
    else if (!strstr(msg, "differs") || !strstr(msg, "name"))
        harness_fail(&j->fail, "name: rank %d: the message does not say the names differ: %s", r,
                     msg);
    return ring_goes_on(j, c, r);
}

Test(mismatch, a_rank_with_another_name_fails_the_collective_on_every_rank)
{
    run(4, 1, 0, one_rank_names_another, YAML, "name4");   /* across hosts */
    harness_cleanup(&H);                                   /* its directory too */
    run(2, 2, 0, one_rank_names_another, YAML, "name2x2"); /* within a host */
}

Test(mismatch, a_rank_with_another_count_fails_the_collective_on_every_rank)
{
    run(3, 2, 0, one_rank_differs, YAML, "mismatch");
}

Test(mismatch, on_4_hosts_names_the_rank_on_every_rank)
{
    run(4, 1, 0, one_rank_differs, YAML, "mismatch4");
}

static int one_rank_missing(int idx, void *arg)
{
    job *j = arg;
    ringd_client *c = connect_rank(j, idx);
    if (!c) return -1;
    int r = ringd_rank(c);
    float x[10] = {0};
    int rc = ringd_allreduce(c, x, 10, RINGD_FLOAT32, RINGD_SUM);
    const char *msg = ringd_last_error(c);
    if (rc != RINGD_ETIMEDOUT)
        harness_fail(&j->fail, "missing: rank %d got %s (%s), want RINGD_ETIMEDOUT", r,
                     ringd_errname(rc), msg);
    else if (!strstr(msg, "rank 5 on host h2 is not connected") &&
             !strstr(msg, "rank 5 did not submit"))
        harness_fail(&j->fail, "missing: rank %d: the message does not name rank 5: %s", r, msg);
    ringd_close(c);
    return atomic_load(&j->fail.count) ? -1 : 0;
}

Test(mismatch, a_process_that_never_comes_gives_a_timeout_naming_it)
{
    cr_assert_eq(harness_init_local(&H, 3, 2, "collective_timeout: 2s\n"), 0, "%s", H.err);
    cr_assert_eq(harness_start(&H, harness_seed("missing"), 50), 0, "%s", H.err);
    /* Five of the six ranks: host h2's second process never starts. */
    job j = {.hosts = 3, .per_host = 2, .n = 6};
    harness_failures_init(&j.fail);
    int64_t t0 = harness_now_ms();
    int rc = harness_run_threads(&H, 5, one_rank_missing, &j, 60000);
    int64_t took = harness_now_ms() - t0;
    cr_expect_eq(atomic_load(&j.fail.count), 0, "%s", j.fail.first);
    cr_expect_eq(rc, 0, "%s", H.err);
    /* Within the deadline, with a margin for a loaded machine. */
    cr_expect_lt(took, 2000 + 8000, "took %lld ms", (long long)took);
    harness_failures_destroy(&j.fail);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

/* ---- confirmations ---- */

#define IN_TURN 300

/* Each rank alternates an empty allgather, which completes on a host as it
 * starts, and a small allreduce. A host whose ranks have the empty one's
 * answer at once sends the allreduce's data right away: it must not pass
 * the COMMIT that tells the next host every host completed the empty one,
 * or that host, still waiting for it, holds its left link on the data and
 * never reads the COMMIT behind it (both wait until collective_timeout). */
static int empty_and_small_in_turn(int idx, void *arg)
{
    job *j = arg;
    ringd_client *c = connect_rank(j, idx);
    if (!c) return -1;
    int r = ringd_rank(c), n = ringd_size(c);
    float x[16], none[1];
    for (int it = 0; it < IN_TURN && !atomic_load(&j->fail.count); it++) {
        int rc = ringd_allgather(c, none, none, 0, RINGD_FLOAT32);
        for (int i = 0; rc == 0 && i < 16; i++)
            x[i] = (float)(r * 1000 + it * 16 + i);
        if (rc == 0) rc = ringd_allreduce(c, x, 16, RINGD_FLOAT32, RINGD_SUM);
        if (rc != 0) {
            harness_fail(&j->fail, "rank %d, round %d: %s: %s", r, it, ringd_errname(rc),
                         ringd_last_error(c));
            break;
        }
        for (int i = 0; i < 16; i++) {
            float want = (float)(1000 * n * (n - 1) / 2 + n * (it * 16 + i));
            if (x[i] != want) {
                harness_fail(&j->fail, "rank %d, round %d, element %d: %g, want %g", r, it, i, x[i],
                             want);
                break;
            }
        }
    }
    ringd_close(c);
    return atomic_load(&j->fail.count) ? -1 : 0;
}

Test(collectives, an_empty_collective_answered_at_once_never_waits_behind_the_next_ones_data)
{
    run(4, 1, 0, empty_and_small_in_turn, "collective_timeout: 5s\n", "in-turn");
}

/* ---- fusion ---- */

#define FUSE_N 60
#define FUSE_MAX 3000

/* Results of rank r's FUSE_N collectives, from one run. */
static float fuse_out[2][6][FUSE_N][FUSE_MAX];
static int fuse_run;

static int many_small_floats(int idx, void *arg)
{
    job *j = arg;
    ringd_client *c = connect_rank(j, idx);
    if (!c) return -1;
    int r = ringd_rank(c);
    ringd_request *req[FUSE_N];
    for (int k = 0; k < FUSE_N; k++) {
        size_t count = (size_t)(k * 131 % FUSE_MAX) + 1;
        float *x = fuse_out[fuse_run][r][k];
        /* Values whose sums round: the order of reduction shows in the bits. */
        for (size_t i = 0; i < count; i++)
            x[i] = (float)sin((double)(r * 7919 + k * 104729 + (int)i)) * 1e3f;
        if (ringd_iallreduce(c, x, count, RINGD_FLOAT32, k % 2 ? RINGD_SUM : RINGD_MEAN, &req[k]) <
            0) {
            harness_fail(&j->fail, "fusion: rank %d: submit %d: %s", r, k, ringd_last_error(c));
            return -1;
        }
    }
    for (int k = 0; k < FUSE_N; k++)
        if (ringd_wait(req[k], 60000) < 0)
            harness_fail(&j->fail, "fusion: rank %d: request %d: %s", r, k, ringd_last_error(c));
    ringd_close(c);
    return atomic_load(&j->fail.count) ? -1 : 0;
}

Test(collectives, fused_and_unfused_runs_give_the_same_bits)
{
    static const char *const yaml[2] = {YAML "fusion_threshold: 1MiB\nfusion_max: 64\n",
                                        YAML "fusion_threshold: 0\n"};
    for (fuse_run = 0; fuse_run < 2; fuse_run++) {
        harness_reset(&H);
        run(3, 2, 0, many_small_floats, yaml[fuse_run], fuse_run ? "unfused" : "fused");
        harness_cleanup(&H);
    }
    for (int r = 0; r < 6; r++)
        for (int k = 0; k < FUSE_N; k++) {
            size_t count = (size_t)(k * 131 % FUSE_MAX) + 1;
            cr_assert(memcmp(fuse_out[0][r][k], fuse_out[1][r][k], count * sizeof(float)) == 0,
                      "rank %d, collective %d: fused and unfused results differ", r, k);
            cr_assert(memcmp(fuse_out[0][r][k], fuse_out[0][0][k], count * sizeof(float)) == 0,
                      "collective %d: rank %d differs from rank 0", k, r);
        }
}
