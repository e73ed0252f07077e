/*
 * test_wire_dtype.c - float32 collectives travelling as bfloat16 or float16
 * between real daemons (issue 17, item 3): every kind that may, set in the
 * configuration or per call; the results are the same bits on every rank
 * and within the documented bound of a float64 reference, |r - s| <=
 * (N + 2) u sum|x_i| (u = 2^-8 bfloat16, 2^-11 float16; MEAN divided by N;
 * float16 adds 2^-25 a rounding below 2^-14, its subnormals).
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringd.h"
#include "tests/harness/harness.h"
#include "tests/wire/wire_test.h"

#define N 4
#define COUNT 100003 /* per rank: several segments, uneven chunks */

static harness H;

static void setup(void)
{
    harness_reset(&H);
}

static void teardown(void)
{
    harness_cleanup(&H);
}

TestSuite(wire_dtype, .init = setup, .fini = teardown, .timeout = 300);

/* Rank r's k-th input: the same on every run, of both signs. */
static float input(int r, size_t k)
{
    uint64_t x = (uint64_t)(r + 1) * 0x9e3779b97f4a7c15u ^ (uint64_t)k * 0xbf58476d1ce4e5b9u;
    x ^= x >> 31;
    return (float)((double)(x >> 11) / 9007199254740992.0 * 200 - 100);
}

typedef struct {
    ringd_coll kind;
    ringd_op op;
    ringd_wire wire; /* per call */
    double u;        /* the wire type's unit roundoff */
    float *out[N];   /* each rank's result */
    size_t out_len;
    char why[N][512];
} scenario;

static int rank_thread(int idx, void *arg)
{
    scenario *s = arg;
    char *why = s->why[idx];
    size_t wl = sizeof s->why[idx];
    ringd_client *c = wire_connect(&H, idx, 20000, why, wl);
    if (!c) return -1;
    size_t total = s->kind == RINGD_COLL_ALLREDUCE ? COUNT : (size_t)N * COUNT;
    float *buf = ringd_alloc(c, total * sizeof *buf), *in = malloc(total * sizeof *in);
    int rc = -1;
    if (!buf || !in) goto out;
    for (size_t k = 0; k < total; k++)
        in[k] = input(idx, k);
    ringd_collective coll = {.kind = s->kind, .buf = buf, .count = COUNT, .dtype = RINGD_FLOAT32,
                             .op = s->op, .wire_dtype = s->wire};
    if (s->kind == RINGD_COLL_ALLREDUCE)
        memcpy(buf, in, total * sizeof *in);
    else if (s->kind == RINGD_COLL_ALLGATHER)
        coll.input = in + (size_t)idx * COUNT;
    else
        coll.input = in;
    if ((rc = ringd_run(c, &coll)) < 0) {
        snprintf(why, wl, "%s: %s", ringd_errname(rc), ringd_last_error(c));
        goto out;
    }
    s->out_len = s->kind == RINGD_COLL_REDUCE_SCATTER ? COUNT : total;
    memcpy(s->out[idx], buf, s->out_len * sizeof(float));
    rc = 0;
out:
    free(in);
    ringd_close(c);
    return rc;
}

static void start(const char *yaml)
{
    cr_assert_eq(harness_init(&H, N, yaml), 0, "%s", H.err);
    cr_assert_eq(harness_start(&H, harness_seed("wire_dtype"), 20), 0, "%s", H.err);
}

static void run(scenario *s)
{
    for (int i = 0; i < N; i++) {
        s->out[i] = calloc((size_t)N * COUNT, sizeof(float));
        s->why[i][0] = '\0';
    }
    int rc = harness_run_threads(&H, N, rank_thread, s, 120000);
    for (int i = 0; i < N; i++)
        cr_expect_str_empty(s->why[i], "rank %d: %s", i, s->why[i]);
    cr_assert_eq(rc, 0, "a rank failed");
}

/* The reduction of element k over the ranks, in float64, and the bound. */
static void reference(const scenario *s, size_t k, double *want, double *bound)
{
    double sum = 0, mag = 0, div = s->op == RINGD_MEAN ? N : 1;
    for (int r = 0; r < N; r++) {
        sum += input(r, k);
        mag += fabs(input(r, k));
    }
    *want = sum / div;
    /* The absolute term: float16's subnormals are 2^-24 apart. */
    *bound = (N + 2) * (s->u * mag / div * (1 + 0x1p-20) + 0x1p-25);
}

static void check(scenario *s)
{
    for (int i = 1; i < N; i++)
        if (s->kind != RINGD_COLL_REDUCE_SCATTER)
            cr_assert(memcmp(s->out[i], s->out[0], s->out_len * sizeof(float)) == 0,
                      "rank %d's result differs from rank 0's", i);
    size_t worst = 0;
    double worst_ratio = 0;
    for (int i = 0; i < N; i++) {
        for (size_t k = 0; k < s->out_len; k++) {
            double want, bound, got = s->out[i][k];
            if (s->kind == RINGD_COLL_ALLGATHER) {
                want = input((int)(k / COUNT), k); /* rank r gave in + r x COUNT */
                bound = s->u * fabs(want) + 0x1p-25;
            } else {
                reference(s, s->kind == RINGD_COLL_REDUCE_SCATTER ? (size_t)i * COUNT + k : k,
                          &want, &bound);
            }
            cr_assert(fabs(got - want) <= bound,
                      "rank %d element %zu: %.9g, float64 says %.9g: off by %.3g > %.3g", i, k,
                      got, want, fabs(got - want), bound);
            if (bound > 0 && fabs(got - want) / bound > worst_ratio)
                worst_ratio = fabs(got - want) / bound, worst = k;
        }
        free(s->out[i]);
    }
    fprintf(stderr, "wire_dtype: worst error %.2f of the bound (element %zu)\n", worst_ratio,
            worst);
}

Test(wire_dtype, allreduce_as_bfloat16_from_the_configuration)
{
    static scenario s = {.kind = RINGD_COLL_ALLREDUCE, .op = RINGD_SUM, .u = 0x1p-8};
    start("wire_dtype: bfloat16\nsegment_size: 64KiB\n");
    run(&s);
    check(&s);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

Test(wire_dtype, mean_as_float16_per_call_and_every_kind)
{
    static scenario s = {.kind = RINGD_COLL_ALLREDUCE, .op = RINGD_MEAN, .u = 0x1p-11,
                         .wire = RINGD_WIRE_FLOAT16};
    start("segment_size: 64KiB\n");
    run(&s);
    check(&s);
    s.kind = RINGD_COLL_REDUCE_SCATTER;
    s.op = RINGD_SUM;
    s.wire = RINGD_WIRE_BFLOAT16;
    s.u = 0x1p-8;
    run(&s);
    check(&s);
    s.kind = RINGD_COLL_ALLGATHER;
    s.wire = RINGD_WIRE_FLOAT16;
    s.u = 0x1p-11;
    run(&s);
    check(&s);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

Test(wire_dtype, none_per_call_overrides_the_configuration_and_is_exact)
{
    static scenario s = {.kind = RINGD_COLL_ALLREDUCE, .op = RINGD_SUM, .u = 0x1p-22,
                         .wire = RINGD_WIRE_NONE};
    start("wire_dtype: float16\n");
    run(&s);
    check(&s);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

static int mismatch_thread(int idx, void *arg)
{
    scenario *s = arg;
    ringd_client *c = wire_connect(&H, idx, 20000, s->why[idx], sizeof s->why[idx]);
    if (!c) return -1;
    float *buf = ringd_alloc(c, 1000 * sizeof *buf);
    ringd_collective coll = {.kind = RINGD_COLL_ALLREDUCE, .buf = buf, .count = 1000,
                             .dtype = RINGD_FLOAT32, .op = RINGD_SUM,
                             .wire_dtype = idx == 2 ? RINGD_WIRE_BFLOAT16 : RINGD_WIRE_DEFAULT};
    int rc = ringd_run(c, &coll);
    snprintf(s->why[idx], sizeof s->why[idx], "%s: %s", ringd_errname(rc), ringd_last_error(c));
    /* A float64 collective cannot travel narrow. */
    ringd_collective f64 = {.kind = RINGD_COLL_ALLREDUCE, .buf = buf, .count = 10,
                            .dtype = RINGD_FLOAT64, .op = RINGD_SUM,
                            .wire_dtype = RINGD_WIRE_FLOAT16};
    int rc64 = ringd_run(c, &f64);
    ringd_close(c);
    return rc == RINGD_EMISMATCH && rc64 == RINGD_EINVAL ? 0 : -1;
}

Test(wire_dtype, ranks_that_disagree_on_the_wire_type_fail_saying_so)
{
    static scenario s;
    start("");
    int rc = harness_run_threads(&H, N, mismatch_thread, &s, 60000);
    for (int i = 0; i < N; i++)
        cr_expect(strstr(s.why[i], "travels as") != NULL, "rank %d: %s", i, s.why[i]);
    cr_assert_eq(rc, 0, "rank 0: %s", s.why[0]);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}
