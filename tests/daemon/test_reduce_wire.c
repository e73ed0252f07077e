/*
 * test_reduce_wire.c - the narrow wire types of daemon/reduce_wire.c (issue 17,
 * item 3): float32 collectives travelling as bfloat16 or float16.
 *
 * The conversions are checked against reduce.c's own scalar converters
 * (which test_reduce.c checks against references of its own). The
 * collectives are checked the way the ring composes the kernels: each
 * chunk starts at one host as pack(own), is folded by each host on its way
 * and completed by the last, and every other host widens the bits that
 * host sends on. Results must be the same bits on every host and within
 * the documented bound of a float64 reference: |r - s| <= (N + 2) u
 * sum|x_i|, u = 2^-8 for bfloat16 and 2^-11 for float16 (MEAN: both sides
 * divided by N).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/reduce.h"
#include "daemon/reduce-internal.h"
#include "daemon/reduce_wire.h"

#define COUNT 10007 /* elements per host; chunks of uneven sizes */
#define MAX_HOSTS 8

static uint64_t rng = 0x9e3779b97f4a7c15u;

static double uniform(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0 * 2 - 1;
}

static double unit_roundoff(ringd_dtype wire)
{
    return wire == RINGD_BFLOAT16 ? 0x1p-8 : 0x1p-11;
}

Test(wire, pack_rounds_like_the_scalar_converters_and_makes_nans_the_default_nan)
{
    enum { n = 4099 };
    static float f[n], back[n];
    static uint16_t w[n];
    for (size_t i = 0; i < n; i++) {
        rng = rng * 6364136223846793005u + 1442695040888963407u;
        uint32_t bits = (uint32_t)(rng >> 32); /* any float: NaNs, subnormals, infinities */
        memcpy(&f[i], &bits, sizeof bits);
    }
    f[0] = NAN, f[1] = -INFINITY, f[2] = 65504.0f, f[3] = 65520.0f, f[4] = -0.0f, f[5] = 1e-8f;
    ringd_dtype wires[] = {RINGD_BFLOAT16, RINGD_FLOAT16};
    for (int k = 0; k < 2; k++) {
        reduce_wire_pack(wires[k], w, f, n);
        reduce_wire_unpack(wires[k], back, w, n);
        for (size_t i = 0; i < n; i++) {
            if (isnan(f[i])) {
                cr_assert_eq(w[i], wires[k] == RINGD_BFLOAT16 ? 0x7FC0 : 0x7E00, "element %zu", i);
                continue;
            }
            uint16_t want = wires[k] == RINGD_BFLOAT16 ? reduce_float_to_bf16(f[i])
                                                       : reduce_float_to_half(f[i]);
            cr_assert_eq(w[i], want, "element %zu: %a packs to %04x, expected %04x", i,
                         (double)f[i], w[i], want);
            float wf = wires[k] == RINGD_BFLOAT16 ? reduce_bf16_to_float(want)
                                                  : reduce_half_to_float(want);
            cr_assert(memcmp(&back[i], &wf, sizeof wf) == 0, "element %zu widens wrong", i);
        }
    }
}

Test(wire, only_float32_travels_narrow)
{
    cr_assert_eq(reduce_wire_check(RINGD_FLOAT32, RINGD_SUM, RINGD_BFLOAT16), 0);
    cr_assert_eq(reduce_wire_check(RINGD_FLOAT32, RINGD_MEAN, RINGD_FLOAT16), 0);
    cr_assert_eq(reduce_wire_check(RINGD_FLOAT64, RINGD_SUM, RINGD_BFLOAT16), RINGD_EINVAL);
    cr_assert_eq(reduce_wire_check(RINGD_FLOAT32, RINGD_SUM, RINGD_FLOAT32), RINGD_EINVAL);
    cr_assert_eq(reduce_wire_check(RINGD_INT32, RINGD_SUM, RINGD_FLOAT16), RINGD_EINVAL);
}

typedef struct {
    int n;
    float *x[MAX_HOSTS];  /* each host's float32 buffer, in place */
    double *ref;          /* float64: sum of the inputs */
    double *abs;          /* float64: sum of their magnitudes */
} ring_sim;

static void sim_init(ring_sim *s, int n, double scale)
{
    s->n = n;
    s->ref = calloc(COUNT, sizeof *s->ref);
    s->abs = calloc(COUNT, sizeof *s->abs);
    for (int h = 0; h < n; h++) {
        s->x[h] = malloc(COUNT * sizeof(float));
        for (size_t i = 0; i < COUNT; i++) {
            float v = (float)(uniform() * scale);
            s->x[h][i] = v;
            s->ref[i] += v;
            s->abs[i] += fabs(v);
        }
    }
}

static void sim_free(ring_sim *s)
{
    for (int h = 0; h < s->n; h++)
        free(s->x[h]);
    free(s->ref);
    free(s->abs);
}

static void chunk(int n, int c, size_t *off, size_t *len)
{
    size_t base = COUNT / (size_t)n, extra = COUNT % (size_t)n;
    *off = (size_t)c * base + ((size_t)c < extra ? (size_t)c : extra);
    *len = base + ((size_t)c < extra);
}

/* Reduce-scatter as the ring runs it, then (allreduce) the allgather. */
static void sim_reduce(ring_sim *s, ringd_dtype wire, ringd_op op, int gather)
{
    int n = s->n;
    uint16_t *seg = malloc(COUNT * sizeof *seg);
    for (int c = 0; c < n; c++) {
        size_t off, len;
        chunk(n, c, &off, &len);
        reduce_wire_pack(wire, seg, s->x[(c + 1) % n] + off, len);
        for (int k = 2; k < n; k++)
            reduce_wire_fold(wire, op, seg, s->x[(c + k) % n] + off, len);
        reduce_wire_complete(wire, op, seg, s->x[c] + off, len, n);
        for (int h = 0; gather && h < n; h++)
            if (h != c) reduce_wire_unpack(wire, s->x[h] + off, seg, len);
    }
    free(seg);
}

static void expect_within_bound(const ring_sim *s, int h, ringd_dtype wire, ringd_op op,
                                size_t from, size_t to)
{
    double u = unit_roundoff(wire), div = op == RINGD_MEAN ? s->n : 1;
    for (size_t i = from; i < to; i++) {
        double want = s->ref[i] / div, got = s->x[h][i];
        double bound = (s->n + 2) * u * s->abs[i] / div * (1 + 0x1p-20) + 0x1p-140;
        cr_assert(fabs(got - want) <= bound,
                  "host %d element %zu: %.9g, float64 says %.9g, off by %.3g > bound %.3g", h, i,
                  got, want, fabs(got - want), bound);
    }
}

static void check_allreduce(int n, ringd_dtype wire, ringd_op op, double scale)
{
    ring_sim s;
    sim_init(&s, n, scale);
    sim_reduce(&s, wire, op, 1);
    for (int h = 0; h < n; h++) {
        cr_assert(memcmp(s.x[h], s.x[0], COUNT * sizeof(float)) == 0,
                  "host %d's result differs from host 0's", h);
        expect_within_bound(&s, h, wire, op, 0, COUNT);
    }
    sim_free(&s);
}

Test(wire, allreduce_is_the_same_bits_everywhere_and_within_the_bound)
{
    int hosts[] = {2, 3, 4, 8};
    for (int k = 0; k < 4; k++) {
        check_allreduce(hosts[k], RINGD_BFLOAT16, RINGD_SUM, 1000);
        check_allreduce(hosts[k], RINGD_BFLOAT16, RINGD_MEAN, 1e-3);
        check_allreduce(hosts[k], RINGD_FLOAT16, RINGD_SUM, 100);
        check_allreduce(hosts[k], RINGD_FLOAT16, RINGD_MEAN, 1);
    }
}

Test(wire, reduce_scatter_leaves_each_host_its_block_within_the_bound)
{
    ring_sim s;
    sim_init(&s, 4, 10);
    sim_reduce(&s, RINGD_BFLOAT16, RINGD_SUM, 0);
    for (int c = 0; c < 4; c++) {
        size_t off, len;
        chunk(4, c, &off, &len);
        expect_within_bound(&s, c, RINGD_BFLOAT16, RINGD_SUM, off, off + len);
    }
    sim_free(&s);
}

Test(wire, allgather_gives_every_host_the_same_rounded_blocks)
{
    enum { n = 3 };
    static float x[n][COUNT], orig[COUNT];
    static uint16_t seg[COUNT];
    for (int h = 0; h < n; h++)
        for (size_t i = 0; i < COUNT; i++)
            x[h][i] = (float)(uniform() * 7);
    /* Host c's block c: rounded in place, sent, widened by the others. */
    for (int c = 0; c < n; c++) {
        size_t off, len;
        chunk(n, c, &off, &len);
        memcpy(orig + off, x[c] + off, len * sizeof(float));
        reduce_wire_round(RINGD_FLOAT16, seg, x[c] + off, len);
        for (int h = 0; h < n; h++)
            if (h != c) reduce_wire_unpack(RINGD_FLOAT16, x[h] + off, seg, len);
    }
    for (int h = 1; h < n; h++)
        cr_assert(memcmp(x[h], x[0], sizeof x[0]) == 0, "host %d differs", h);
    for (size_t i = 0; i < COUNT; i++)
        cr_assert(fabs((double)x[0][i] - orig[i]) <= 0x1p-11 * fabs(orig[i]) + 0x1p-25,
                  "element %zu: %.9g from %.9g", i, (double)x[0][i], (double)orig[i]);
}

Test(wire, min_and_max_pick_a_rounded_input)
{
    ring_sim s;
    sim_init(&s, 3, 50);
    sim_reduce(&s, RINGD_BFLOAT16, RINGD_MAX, 1);
    for (size_t i = 0; i < COUNT; i++) {
        float r = s.x[0][i];
        cr_assert_eq(reduce_bf16_to_float(reduce_float_to_bf16(r)), r, "element %zu", i);
        cr_assert_eq(memcmp(&s.x[1][i], &r, sizeof r), 0);
    }
    sim_free(&s);
}

/* The AVX2/F16C kernels and the portable ones give the same bits on every
 * input, NaNs and infinities included, at every count around the vector
 * width. */
Test(wire, fast_and_portable_kernels_give_the_same_bits)
{
    enum { n = 1037 };
    static float own[n], own_a[n], own_b[n], back_a[n], back_b[n];
    static uint16_t seg[n], a[n], b[n];
    if (!reduce_wire_fast(1)) cr_skip_test("this CPU has no AVX2 and F16C");
    for (size_t i = 0; i < n; i++) {
        rng = rng * 6364136223846793005u + 1442695040888963407u;
        uint32_t bits = (uint32_t)(rng >> 32);
        if (i % 3) bits = (bits & 0x83FFFFFF) | 0x3C000000; /* mostly ordinary magnitudes */
        memcpy(&own[i], &bits, sizeof bits);
        seg[i] = (uint16_t)(rng >> 11);
    }
    ringd_dtype wires[] = {RINGD_BFLOAT16, RINGD_FLOAT16};
    ringd_op ops[] = {RINGD_SUM, RINGD_MEAN, RINGD_MIN, RINGD_MAX, RINGD_PROD};
    size_t counts[] = {0, 1, 7, 8, 9, 17, n};
    for (int w = 0; w < 2; w++) {
        for (int c = 0; c < 7; c++) {
            size_t m = counts[c];
            for (int fast = 0; fast < 2; fast++) {
                reduce_wire_fast(fast);
                reduce_wire_pack(wires[w], fast ? a : b, own, m);
                reduce_wire_unpack(wires[w], fast ? back_a : back_b, seg, m);
            }
            cr_assert(memcmp(a, b, m * 2) == 0, "pack, %s, %zu", w ? "f16" : "bf16", m);
            cr_assert(memcmp(back_a, back_b, m * 4) == 0, "unpack, %zu", m);
            for (int o = 0; o < 5; o++) {
                for (int fast = 0; fast < 2; fast++) {
                    reduce_wire_fast(fast);
                    memcpy(fast ? a : b, seg, m * 2);
                    memcpy(fast ? own_a : own_b, own, m * 4);
                    reduce_wire_fold(wires[w], ops[o], fast ? a : b, own, m);
                }
                cr_assert(memcmp(a, b, m * 2) == 0, "fold op %d, %zu", ops[o], m);
                for (int fast = 0; fast < 2; fast++) {
                    reduce_wire_fast(fast);
                    memcpy(fast ? a : b, seg, m * 2);
                    reduce_wire_complete(wires[w], ops[o], fast ? a : b, fast ? own_a : own_b, m,
                                         3.0);
                }
                cr_assert(memcmp(a, b, m * 2) == 0, "complete op %d, %zu", ops[o], m);
                cr_assert(memcmp(own_a, own_b, m * 4) == 0, "complete's own, op %d, %zu", ops[o],
                          m);
            }
        }
    }
    reduce_wire_fast(1);
}
