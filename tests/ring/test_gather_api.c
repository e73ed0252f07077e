/*
 * test_gather_api.c - ringd_gather(), ringd_scatter() and ringd_alltoall(),
 * which libringd composes from allgather and broadcast (client/compose.c).
 * Real daemons, real clients: one thread per rank.
 *
 * Every rank's input differs per rank and per call: element k of rank r's
 * input in call `call` is value(r, call, k) = 1000 r + 10 call + k (modulo
 * 2048 for float16, where every integer below 2048 is exact), so a block
 * delivered to the wrong rank, from the wrong rank or from an earlier call
 * is caught. Every result is compared element by element with the value it
 * must hold.
 */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringd.h"
#include "tests/harness/harness.h"

#define YAML "collective_timeout: 30s\nsegment_size: 4KiB\n"
#define CALLS 3

static harness H;

static void setup(void)
{
    harness_reset(&H);
}

static void teardown(void)
{
    harness_cleanup(&H);
}

TestSuite(gather_api, .init = setup, .fini = teardown, .timeout = 600);

/* ---- values ---- */

static const ringd_dtype dtypes[] = {RINGD_FLOAT32, RINGD_INT64, RINGD_FLOAT16};
#define N_DTYPES (sizeof dtypes / sizeof *dtypes)

static long value(int rank, int call, size_t k)
{
    return 1000L * rank + 10L * call + (long)k;
}

/* binary16 of a whole number in [0, 2048): exact. */
static uint16_t half_of(long v)
{
    if (v == 0) return 0;
    int e = 0;
    while ((v >> (e + 1)) != 0)
        e++;
    return (uint16_t)(((e + 15) << 10) | ((v << (10 - e)) & 0x3ff));
}

/* Stores v as element k of p, of dtype t. */
static void put(ringd_dtype t, void *p, size_t k, long v)
{
    if (t == RINGD_FLOAT32)
        ((float *)p)[k] = (float)v;
    else if (t == RINGD_INT64)
        ((int64_t *)p)[k] = v;
    else
        ((uint16_t *)p)[k] = half_of(v % 2048);
}

/* Element k of p as a number, for messages. */
static double get(ringd_dtype t, const void *p, size_t k)
{
    if (t == RINGD_FLOAT32) return ((const float *)p)[k];
    if (t == RINGD_INT64) return (double)((const int64_t *)p)[k];
    uint16_t h = ((const uint16_t *)p)[k];
    int e = (h >> 10) & 0x1f;
    return e ? (double)(1024 + (h & 0x3ff)) * (double)(1L << e) / (1024.0 * 32768.0) : 0;
}

/* ---- one rank's work ---- */

typedef struct {
    int hosts, per_host, n;
    size_t count;
    harness_failures fail;
    char msg[HARNESS_MAX_HOSTS][512]; /* each rank's error message (mismatch) */
} job;

static ringd_client *connect_rank(job *j, int idx)
{
    return harness_connect(&H, idx / j->per_host, &j->fail, idx);
}

/* Compares got with want element by element; 0 if they agree. */
static int check_elems(job *j, const char *what, int rank, ringd_dtype t, const void *got,
                       const void *want, size_t count)
{
    size_t es = ringd_dtype_size(t);
    for (size_t k = 0; k < count; k++) {
        if (memcmp((const uint8_t *)got + k * es, (const uint8_t *)want + k * es, es) != 0) {
            harness_fail(&j->fail, "%s: rank %d: element %zu is %g, expected %g", what, rank, k,
                         get(t, got, k), get(t, want, k));
            return -1;
        }
    }
    return 0;
}

static int expect_rc(job *j, const char *what, int rank, ringd_client *c, int rc, int want)
{
    if (rc == want) return 0;
    harness_fail(&j->fail, "%s: rank %d: got %s (%s), expected %s", what, rank, ringd_errname(rc),
                 ringd_last_error(c), ringd_errname(want));
    return -1;
}

/* One gather, scatter and alltoall of dtype t with root, call `call`. */
static void one_round(job *j, ringd_client *c, ringd_dtype t, int root, int call, uint8_t *in,
                      uint8_t *out, uint8_t *want)
{
    int r = ringd_rank(c), n = ringd_size(c);
    size_t count = j->count, es = ringd_dtype_size(t), all = (size_t)n * count;
    char what[128];

    /* gather: non-roots give no buffer at all. */
    snprintf(what, sizeof what, "gather %s to rank %d, call %d", ringd_dtype_name(t), root, call);
    for (size_t k = 0; k < count; k++)
        put(t, in, k, value(r, call, k));
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < count; k++)
            put(t, want, (size_t)i * count + k, value(i, call, k));
    memset(out, 0xee, all * es);
    int rc = ringd_gather(c, in, r == root ? out : NULL, count, t, root);
    if (expect_rc(j, what, r, c, rc, 0) == 0 && r == root)
        check_elems(j, what, r, t, out, want, all);

    /* scatter: only the root has an input. */
    snprintf(what, sizeof what, "scatter %s from rank %d, call %d", ringd_dtype_name(t), root,
             call);
    for (size_t k = 0; k < all; k++)
        put(t, in, k, value(root, call, k));
    for (size_t k = 0; k < count; k++)
        put(t, want, k, value(root, call, (size_t)r * count + k));
    memset(out, 0xee, all * es);
    rc = ringd_scatter(c, r == root ? in : NULL, out, count, t, root);
    if (expect_rc(j, what, r, c, rc, 0) == 0) check_elems(j, what, r, t, out, want, count);

    /* alltoall: block i of rank r's input is for rank i. */
    snprintf(what, sizeof what, "alltoall %s, call %d", ringd_dtype_name(t), call);
    for (size_t k = 0; k < all; k++)
        put(t, in, k, value(r, call, k));
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < count; k++)
            put(t, want, (size_t)i * count + k, value(i, call, (size_t)r * count + k));
    memset(out, 0xee, all * es);
    rc = ringd_alltoall(c, in, out, count, t);
    if (expect_rc(j, what, r, c, rc, 0) == 0) check_elems(j, what, r, t, out, want, all);
}

/* Every dtype, three roots, several calls; then count 0 and bad roots. */
static int all_three(int idx, void *arg)
{
    job *j = arg;
    ringd_client *c = connect_rank(j, idx);
    if (!c) return -1;
    int r = ringd_rank(c), n = ringd_size(c);
    if (n != j->n) harness_fail(&j->fail, "rank %d: size %d, expected %d", r, n, j->n);
    size_t bytes = (size_t)n * j->count * 8;
    uint8_t *in = malloc(bytes), *out = malloc(bytes), *want = malloc(bytes);
    /* Shared memory for the input too: the composed calls copy from it. */
    uint8_t *shared = ringd_alloc(c, bytes);
    int roots[] = {0, n - 1, 1 % n};
    if (!in || !out || !want || !shared) {
        harness_fail(&j->fail, "rank %d: cannot allocate %zu bytes", r, bytes);
        goto out;
    }
    for (int call = 0; call < CALLS; call++)
        for (size_t d = 0; d < N_DTYPES; d++)
            one_round(j, c, dtypes[d], roots[(call + (int)d) % 3], call, call % 2 ? shared : in,
                      out, want);

    /* count 0: a no-op, with or without buffers (and a bad root is still
     * refused). */
    expect_rc(j, "gather of 0", r, c, ringd_gather(c, NULL, NULL, 0, RINGD_FLOAT32, 1 % n), 0);
    expect_rc(j, "scatter of 0", r, c, ringd_scatter(c, NULL, NULL, 0, RINGD_INT64, 0), 0);
    expect_rc(j, "alltoall of 0", r, c, ringd_alltoall(c, in, out, 0, RINGD_FLOAT16), 0);
    expect_rc(j, "gather of 0 to rank n", r, c, ringd_gather(c, NULL, NULL, 0, RINGD_FLOAT32, n),
              RINGD_EINVAL);

    /* A bad root fails before anything is sent, so the ranks stay in step. */
    int rc = ringd_gather(c, in, out, j->count, RINGD_FLOAT32, n);
    if (expect_rc(j, "gather to rank n", r, c, rc, RINGD_EINVAL) == 0 &&
        !strstr(ringd_last_error(c), "root"))
        harness_fail(&j->fail, "gather to rank n: rank %d: message says nothing of the root: %s", r,
                     ringd_last_error(c));
    expect_rc(j, "gather to rank -1", r, c, ringd_gather(c, in, out, 4, RINGD_FLOAT32, -1),
              RINGD_EINVAL);
    expect_rc(j, "scatter from rank n", r, c, ringd_scatter(c, in, out, 4, RINGD_INT64, n),
              RINGD_EINVAL);

    /* And the ring goes on. */
    one_round(j, c, RINGD_FLOAT32, n - 1, CALLS, in, out, want);
out:
    ringd_free(c, shared);
    free(in);
    free(out);
    free(want);
    ringd_close(c);
    return atomic_load(&j->fail.count) ? -1 : 0;
}

static void run(int hosts, int per_host, size_t count, harness_thread_fn fn, const char *seed_name,
                job *j)
{
    cr_assert_eq(harness_init_local(&H, hosts, per_host, YAML), 0, "%s", H.err);
    cr_assert_eq(harness_start(&H, harness_seed(seed_name), 50), 0, "%s", H.err);
    *j = (job){.hosts = hosts, .per_host = per_host, .n = hosts * per_host, .count = count};
    harness_failures_init(&j->fail);
    int rc = harness_run_threads(&H, j->n, fn, j, 400000);
    cr_expect_eq(atomic_load(&j->fail.count), 0, "%s", j->fail.first);
    cr_expect_eq(rc, 0, "%s", H.err);
    harness_failures_destroy(&j->fail);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

static job J;

Test(gather_api, gather_scatter_and_alltoall_on_3_hosts_with_2_processes_each)
{
    run(3, 2, 1031, all_three, "gather3x2", &J);
}

Test(gather_api, gather_scatter_and_alltoall_on_4_hosts_with_1_process_each)
{
    run(4, 1, 517, all_three, "gather4x1", &J);
}

/* ---- disagreement ---- */

/* Rank 3 calls with another count (or, for gather, another root); every
 * rank must fail with RINGD_EMISMATCH, and the ring go on. */
typedef enum { GATHER_COUNT, GATHER_ROOT, SCATTER_COUNT, ALLTOALL_COUNT } differ;
static differ what_differs;

static int one_rank_differs(int idx, void *arg)
{
    job *j = arg;
    ringd_client *c = connect_rank(j, idx);
    if (!c) return -1;
    int r = ringd_rank(c), n = ringd_size(c);
    size_t count = r == 3 && what_differs != GATHER_ROOT ? 99 : 100;
    int root = r == 3 && what_differs == GATHER_ROOT ? 2 : 1;
    float in[100 * HARNESS_MAX_HOSTS] = {0}, out[100 * HARNESS_MAX_HOSTS];
    int rc = what_differs == SCATTER_COUNT ? ringd_scatter(c, in, out, count, RINGD_FLOAT32, 1)
             : what_differs == ALLTOALL_COUNT
                 ? ringd_alltoall(c, in, out, count, RINGD_FLOAT32)
                 : ringd_gather(c, in, out, count, RINGD_FLOAT32, root);
    const char *msg = ringd_last_error(c);
    snprintf(j->msg[r], sizeof j->msg[r], "%s", msg);
    const char *name = what_differs == SCATTER_COUNT    ? "scatter"
                       : what_differs == ALLTOALL_COUNT ? "alltoall"
                                                        : "gather to rank";
    if (rc != RINGD_EMISMATCH)
        harness_fail(&j->fail, "rank %d got %s (%s), expected RINGD_EMISMATCH", r,
                     ringd_errname(rc), msg);
    else if (!strstr(msg, "differs") || !strstr(msg, name))
        harness_fail(&j->fail, "rank %d: the message does not say what differs: %s", r, msg);
    /* The counts are the underlying collective's, as ringd.h says: its whole
     * buffer (n x count, n x n x count for alltoall) when hosts differ, and
     * an allgather's per-rank count when two ranks of one host do. */
    else if (what_differs != GATHER_ROOT && n == 4 &&
             !strstr(msg, what_differs == ALLTOALL_COUNT ? "1584 x float32" : "396 x float32") &&
             !(what_differs == GATHER_COUNT && strstr(msg, "99 x float32")))
        harness_fail(&j->fail, "rank %d: the message does not give the counts: %s", r, msg);
    /* The ring goes on. */
    for (int i = 0; i < n; i++)
        in[i] = (float)(r + 1);
    rc = ringd_allgather(c, in, out, 1, RINGD_FLOAT32);
    if (rc < 0) harness_fail(&j->fail, "after the mismatch: rank %d: %s", r, ringd_last_error(c));
    for (int i = 0; rc == 0 && i < n; i++)
        if (out[i] != (float)(i + 1))
            harness_fail(&j->fail, "after the mismatch: rank %d: element %d is %g", r, i, out[i]);
    ringd_close(c);
    return atomic_load(&j->fail.count) ? -1 : 0;
}

/* Every rank got the same message. */
static void same_message(const job *j)
{
    for (int r = 1; r < j->n; r++)
        cr_expect_str_eq(j->msg[r], j->msg[0], "rank %d's message differs from rank 0's", r);
}

Test(gather_api, a_gather_with_another_count_fails_on_every_rank_with_the_same_message)
{
    what_differs = GATHER_COUNT;
    run(4, 1, 0, one_rank_differs, "gcount4", &J);
    same_message(&J);
    harness_cleanup(&H);
    run(2, 2, 0, one_rank_differs, "gcount2x2", &J); /* within a host */
}

Test(gather_api, a_gather_to_another_root_fails_on_every_rank)
{
    what_differs = GATHER_ROOT;
    run(4, 1, 0, one_rank_differs, "groot4", &J);
    harness_cleanup(&H);
    run(2, 2, 0, one_rank_differs, "groot2x2", &J);
}

Test(gather_api, a_scatter_or_alltoall_with_another_count_fails_on_every_rank)
{
    what_differs = SCATTER_COUNT;
    run(4, 1, 0, one_rank_differs, "scount4", &J);
    same_message(&J);
    harness_cleanup(&H);
    what_differs = ALLTOALL_COUNT;
    run(4, 1, 0, one_rank_differs, "acount4", &J);
    same_message(&J);
}
