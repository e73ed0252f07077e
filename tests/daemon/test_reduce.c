/*
 * test_reduce.c - daemon/reduce.c against references written here.
 *
 * The references do not share code with reduce.c: integers are computed in a
 * wider type and truncated; float32 arithmetic, which the half types use too,
 * is done in double and rounded once to float32 (the same result: double has
 * more than twice the bits); float16 and bfloat16 are decoded and encoded
 * with frexp, ldexp and nearbyint instead of bit tricks. Inputs are random bit patterns mixed with
 * the values that break conversions: NaNs (quiet, signalling, negative),
 * infinities, signed zeros, subnormals, the largest finite values.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/reduce.h"
#include "daemon/reduce-internal.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* Counts around every vector width and block size, and one large odd count. */
static const size_t counts[] = {0, 1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 129, 1000003};
#define NCOUNTS (sizeof counts / sizeof counts[0])

static const ringd_op all_ops[] = {RINGD_SUM, RINGD_MEAN, RINGD_MIN, RINGD_MAX, RINGD_PROD};

static const char *const dtype_names[] = {"int8",    "uint8",    "int32",   "int64",
                                          "float16", "bfloat16", "float32", "float64"};
static const char *const op_names[] = {"sum", "mean", "min", "max", "prod", "wmean"};

static size_t elem_size(ringd_dtype dtype)
{
    static const size_t sizes[] = {1, 1, 4, 8, 2, 2, 4, 8};
    return sizes[dtype];
}

static int is_float_type(ringd_dtype dtype)
{
    return dtype >= RINGD_FLOAT16;
}

/* ---- Random input ------------------------------------------------------ */

static uint64_t rng_state;

static void seed(uint64_t s)
{
    rng_state = s;
}

/* splitmix64 */
static uint64_t next_random(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

static const uint64_t special_f16[] = {0x7E00, 0x7C01, 0xFE01, 0x7D55, 0x7C00, 0xFC00,
                                       0x0000, 0x8000, 0x0001, 0x83FF, 0x0400, 0x7BFF,
                                       0xFBFF, 0x3C00, 0x3800, 0x0200};
static const uint64_t special_bf16[] = {0x7FC0, 0x7F81, 0xFFC1, 0x7FAA, 0x7F80, 0xFF80,
                                        0x0000, 0x8000, 0x0001, 0x807F, 0x0080, 0x7F7F,
                                        0xFF7F, 0x3F80, 0x3F00, 0x0040};
static const uint64_t special_f32[] = {
    0x7FC00000, 0x7F800001, 0xFFC00001, 0x7FAAAAAA, 0x7F800000, 0xFF800000, 0x00000000, 0x80000000,
    0x00000001, 0x807FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000, 0x3F000000, 0x00400000};
static const uint64_t special_f64[] = {
    0x7FF8000000000000, 0x7FF0000000000001, 0xFFF8000000000001, 0x7FF5555555555555,
    0x7FF0000000000000, 0xFFF0000000000000, 0x0000000000000000, 0x8000000000000000,
    0x0000000000000001, 0x800FFFFFFFFFFFFF, 0x0010000000000000, 0x7FEFFFFFFFFFFFFF,
    0xFFEFFFFFFFFFFFFF, 0x3FF0000000000000, 0x3FE0000000000000, 0x0008000000000000};
static const uint64_t special_int[] = {0,
                                       1,
                                       2,
                                       0xFF,
                                       0x7F,
                                       0x80,
                                       0x7FFFFFFF,
                                       0x80000000,
                                       0xFFFFFFFF,
                                       0x7FFFFFFFFFFFFFFF,
                                       0x8000000000000000,
                                       0xFFFFFFFFFFFFFFFF,
                                       3,
                                       0x10,
                                       0xFFFFFFFE,
                                       0x55};
#define NSPECIAL 16

static uint64_t load_bits(ringd_dtype dtype, const void *p)
{
    switch (elem_size(dtype)) {
    case 1: {
        uint8_t v;
        memcpy(&v, p, 1);
        return v;
    }
    case 2: {
        uint16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case 4: {
        uint32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    default: {
        uint64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    }
}

static void store_bits(ringd_dtype dtype, void *p, uint64_t bits)
{
    uint8_t v8 = (uint8_t)bits;
    uint16_t v16 = (uint16_t)bits;
    uint32_t v32 = (uint32_t)bits;

    switch (elem_size(dtype)) {
    case 1:
        memcpy(p, &v8, 1);
        break;
    case 2:
        memcpy(p, &v16, 2);
        break;
    case 4:
        memcpy(p, &v32, 4);
        break;
    default:
        memcpy(p, &bits, 8);
        break;
    }
}

/* A value of moderate magnitude (exponent within +-4 of 1.0), so that sums
 * and products mostly stay finite and round in interesting ways. */
static uint64_t moderate_bits(ringd_dtype dtype, uint64_t r)
{
    int e = (int)(r >> 40 & 7) - 4;
    uint64_t sign = r >> 63;

    switch (dtype) {
    case RINGD_FLOAT16:
        return sign << 15 | (uint64_t)(15 + e) << 10 | (r & 0x3FF);
    case RINGD_BFLOAT16:
        return sign << 15 | (uint64_t)(127 + e) << 7 | (r & 0x7F);
    case RINGD_FLOAT32:
        return sign << 31 | (uint64_t)(127 + e) << 23 | (r & 0x7FFFFF);
    default:
        return sign << 63 | (uint64_t)(1023 + e) << 52 | (r & 0xFFFFFFFFFFFFF);
    }
}

static void fill_random(ringd_dtype dtype, void *buf, size_t count)
{
    const uint64_t *special = special_int;
    size_t es = elem_size(dtype);

    if (dtype == RINGD_FLOAT16)
        special = special_f16;
    else if (dtype == RINGD_BFLOAT16)
        special = special_bf16;
    else if (dtype == RINGD_FLOAT32)
        special = special_f32;
    else if (dtype == RINGD_FLOAT64)
        special = special_f64;

    for (size_t i = 0; i < count; i++) {
        uint64_t r = next_random();
        uint64_t bits;
        switch (r & 3) {
        case 0:
            bits = special[(r >> 2) % NSPECIAL];
            break;
        case 1:
            bits = r >> 2 ^ r << 30;
            break;
        default:
            bits = is_float_type(dtype) ? moderate_bits(dtype, r) : r >> 2;
            break;
        }
        store_bits(dtype, (char *)buf + i * es, bits);
    }
}

/* ---- Reference half formats -------------------------------------------- */

typedef struct {
    int mant; /* stored mantissa bits */
    int exp;  /* exponent bits */
    uint32_t default_nan;
} half_format;

static const half_format f16_format = {10, 5, 0x7E00};
static const half_format bf16_format = {7, 8, 0x7FC0};

static int format_bias(const half_format *f)
{
    return (1 << (f->exp - 1)) - 1;
}

static double ref_decode(const half_format *f, uint32_t h)
{
    int bias = format_bias(f);
    uint32_t emask = (1u << f->exp) - 1;
    uint32_t e = h >> f->mant & emask;
    uint32_t m = h & ((1u << f->mant) - 1);
    double v;

    if (e == emask)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp(m, 1 - bias - f->mant);
    else
        v = ldexp(m + (1u << f->mant), (int)e - bias - f->mant);
    return h >> (f->mant + f->exp) & 1 ? -v : v;
}

/* Rounds v to the format, nearest even; NaN gives the default NaN. */
static uint32_t ref_encode(const half_format *f, double v)
{
    int bias = format_bias(f);
    int emin = 1 - bias;
    uint32_t sign = signbit(v) ? 1u << (f->mant + f->exp) : 0;
    uint32_t inf = ((1u << f->exp) - 1) << f->mant;
    double a = fabs(v);

    if (isnan(v)) return f->default_nan;
    if (isinf(a)) return sign | inf;
    if (a < ldexp(1, emin)) {
        /* Subnormal: count units of the smallest subnormal (exact scaling),
         * round to an integer; 2^mant units is the smallest normal's code. */
        return sign | (uint32_t)nearbyint(ldexp(a, f->mant - emin));
    }
    int k;
    double fr = frexp(a, &k); /* a = fr * 2^k, 0.5 <= fr < 1 */
    int e = k - 1;
    double m = nearbyint(ldexp(fr, f->mant + 1));
    if (m == ldexp(1, f->mant + 1)) {
        m /= 2;
        e++;
    }
    if (e > bias) return sign | inf;
    return sign | (uint32_t)(e + bias) << f->mant | ((uint32_t)m - (1u << f->mant));
}

/* ---- Reference reductions ---------------------------------------------- */

static double bits_to_double(ringd_dtype dtype, uint64_t bits)
{
    float f;
    double d;
    uint32_t b32 = (uint32_t)bits;

    switch (dtype) {
    case RINGD_FLOAT16:
        return ref_decode(&f16_format, (uint32_t)bits);
    case RINGD_BFLOAT16:
        return ref_decode(&bf16_format, (uint32_t)bits);
    case RINGD_FLOAT32:
        memcpy(&f, &b32, 4);
        return f;
    default:
        memcpy(&d, &bits, 8);
        return d;
    }
}

/* Rounds v to the element type. For the half types v is first rounded to
 * float32 (overflowing to infinity, as IEEE conversions do): they compute in
 * float32. */
static uint64_t double_to_bits(ringd_dtype dtype, double v)
{
    uint32_t b32;
    uint64_t b64;
    float f;

    switch (dtype) {
    case RINGD_FLOAT16:
        return ref_encode(&f16_format, (float)v);
    case RINGD_BFLOAT16:
        return ref_encode(&bf16_format, (float)v);
    case RINGD_FLOAT32:
        f = (float)v;
        memcpy(&b32, &f, 4);
        return b32;
    default:
        memcpy(&b64, &v, 8);
        return b64;
    }
}

/* MIN and MAX: NaN if either is NaN; between equal values (+0 and -0) the
 * second operand, src. */
static double ref_fop(ringd_op op, double a, double b)
{
    switch (op) {
    case RINGD_SUM:
    case RINGD_MEAN:
        return a + b;
    case RINGD_PROD:
        return a * b;
    case RINGD_MIN:
        return isnan(a) || isnan(b) ? NAN : a < b ? a : b;
    default:
        return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
    }
}

static uint64_t ref_apply(ringd_dtype dtype, ringd_op op, uint64_t a, uint64_t b)
{
    switch (dtype) {
    case RINGD_INT8: {
        int x = (int8_t)a, y = (int8_t)b;
        int r = op == RINGD_SUM    ? x + y
                : op == RINGD_PROD ? x * y
                : op == RINGD_MIN  ? (x < y ? x : y)
                                   : (x > y ? x : y);
        return (uint8_t)r;
    }
    case RINGD_UINT8: {
        unsigned x = (uint8_t)a, y = (uint8_t)b;
        unsigned r = op == RINGD_SUM    ? x + y
                     : op == RINGD_PROD ? x * y
                     : op == RINGD_MIN  ? (x < y ? x : y)
                                        : (x > y ? x : y);
        return (uint8_t)r;
    }
    case RINGD_INT32: {
        int64_t x = (int32_t)a, y = (int32_t)b;
        int64_t r = op == RINGD_SUM    ? x + y
                    : op == RINGD_PROD ? x * y
                    : op == RINGD_MIN  ? (x < y ? x : y)
                                       : (x > y ? x : y);
        return (uint32_t)r;
    }
    case RINGD_INT64: {
        __int128 x = (int64_t)a, y = (int64_t)b;
        __int128 r = op == RINGD_SUM    ? x + y
                     : op == RINGD_PROD ? x * y
                     : op == RINGD_MIN  ? (x < y ? x : y)
                                        : (x > y ? x : y);
        return (uint64_t)r;
    }
    default:
        return double_to_bits(dtype,
                              ref_fop(op, bits_to_double(dtype, a), bits_to_double(dtype, b)));
    }
}

static uint64_t ref_mean(ringd_dtype dtype, uint64_t a, int ranks)
{
    return double_to_bits(dtype, bits_to_double(dtype, a) / ranks);
}

/* float32 and float64 results keep whatever NaN the CPU produced; the half
 * types must store exactly the default NaN, which ref_encode() gives. */
static int same_result(ringd_dtype dtype, uint64_t got, uint64_t want)
{
    if (dtype == RINGD_FLOAT32 || dtype == RINGD_FLOAT64) {
        if (isnan(bits_to_double(dtype, want))) return isnan(bits_to_double(dtype, got));
    }
    return got == want;
}

/* ---- Harness ----------------------------------------------------------- */

typedef void apply_fn(ringd_dtype dtype, ringd_op op, void *dst, const void *src, size_t count);
typedef void finish_fn(ringd_dtype dtype, ringd_op op, void *buf, size_t count, int ranks);

static void apply_f16_portable(ringd_dtype dtype, ringd_op op, void *dst, const void *src,
                               size_t count)
{
    cr_assert_eq(dtype, RINGD_FLOAT16);
    reduce_f16_apply(REDUCE_F16_PORTABLE, op, dst, src, count);
}

static void apply_f16c(ringd_dtype dtype, ringd_op op, void *dst, const void *src, size_t count)
{
    cr_assert_eq(dtype, RINGD_FLOAT16);
    reduce_f16_apply(REDUCE_F16_F16C, op, dst, src, count);
}

static void finish_f16_portable(ringd_dtype dtype, ringd_op op, void *buf, size_t count, int ranks)
{
    cr_assert_eq(dtype, RINGD_FLOAT16);
    reduce_f16_finish(REDUCE_F16_PORTABLE, op, buf, count, ranks);
}

static void finish_f16c(ringd_dtype dtype, ringd_op op, void *buf, size_t count, int ranks)
{
    cr_assert_eq(dtype, RINGD_FLOAT16);
    reduce_f16_finish(REDUCE_F16_F16C, op, buf, count, ranks);
}

/* Elements past the end of the buffers, which must stay untouched. */
#define GUARD 80

/* Runs apply on random buffers placed at element offsets dst_off and src_off
 * from malloc's alignment and compares each element with the reference. */
static void check_apply_once(apply_fn *apply, ringd_dtype dtype, ringd_op op, size_t count,
                             size_t dst_off, size_t src_off)
{
    size_t es = elem_size(dtype);
    size_t n = count + GUARD;
    char *dst = malloc((dst_off + n) * es);
    char *src = malloc((src_off + n) * es);
    char *dst0 = malloc(n * es);
    char *src0 = malloc(n * es);

    cr_assert(dst && src && dst0 && src0);
    fill_random(dtype, dst0, n);
    fill_random(dtype, src0, n);
    memcpy(dst + dst_off * es, dst0, n * es);
    memcpy(src + src_off * es, src0, n * es);

    apply(dtype, op, dst + dst_off * es, src + src_off * es, count);

    for (size_t i = 0; i < count; i++) {
        uint64_t a = load_bits(dtype, dst0 + i * es);
        uint64_t b = load_bits(dtype, src0 + i * es);
        uint64_t got = load_bits(dtype, dst + (dst_off + i) * es);
        uint64_t want = ref_apply(dtype, op, a, b);
        if (!same_result(dtype, got, want))
            cr_assert_fail("%s %s, count %zu, offsets %zu/%zu, element %zu: "
                           "%#llx (op) %#llx gave %#llx, want %#llx",
                           dtype_names[dtype], op_names[op], count, dst_off, src_off, i,
                           (unsigned long long)a, (unsigned long long)b, (unsigned long long)got,
                           (unsigned long long)want);
    }
    cr_assert(memcmp(dst + (dst_off + count) * es, dst0 + count * es, GUARD * es) == 0,
              "%s %s, count %zu: wrote past the end", dtype_names[dtype], op_names[op], count);
    cr_assert(memcmp(src + src_off * es, src0, n * es) == 0, "%s %s, count %zu: src modified",
              dtype_names[dtype], op_names[op], count);
    free(dst);
    free(src);
    free(dst0);
    free(src0);
}

static void check_every_op(apply_fn *apply, ringd_dtype dtype)
{
    seed(0x5EED0000 + dtype);
    for (size_t o = 0; o < sizeof all_ops / sizeof all_ops[0]; o++) {
        ringd_op op = all_ops[o];
        if (reduce_check(dtype, op) != 0) continue;
        for (size_t c = 0; c < NCOUNTS; c++) {
            check_apply_once(apply, dtype, op, counts[c], 0, 0);
            check_apply_once(apply, dtype, op, counts[c], 1, 3);
        }
    }
}

static void check_mean_finish(finish_fn *finish, ringd_dtype dtype)
{
    static const int ranks[] = {1, 2, 3, 7, 10, 1000};
    size_t es = elem_size(dtype);

    seed(0xF1515 + dtype);
    for (size_t r = 0; r < sizeof ranks / sizeof ranks[0]; r++) {
        for (size_t c = 0; c < NCOUNTS; c++) {
            size_t count = counts[c];
            size_t n = count + GUARD;
            char *buf = malloc(n * es);
            char *buf0 = malloc(n * es);
            cr_assert(buf && buf0);
            fill_random(dtype, buf0, n);
            memcpy(buf, buf0, n * es);

            finish(dtype, RINGD_MEAN, buf, count, ranks[r]);

            for (size_t i = 0; i < count; i++) {
                uint64_t a = load_bits(dtype, buf0 + i * es);
                uint64_t got = load_bits(dtype, buf + i * es);
                uint64_t want = ref_mean(dtype, a, ranks[r]);
                if (!same_result(dtype, got, want))
                    cr_assert_fail("%s mean over %d ranks, count %zu, element %zu: "
                                   "%#llx gave %#llx, want %#llx",
                                   dtype_names[dtype], ranks[r], count, i, (unsigned long long)a,
                                   (unsigned long long)got, (unsigned long long)want);
            }
            cr_assert(memcmp(buf + count * es, buf0 + count * es, GUARD * es) == 0,
                      "%s mean, count %zu: wrote past the end", dtype_names[dtype], count);
            free(buf);
            free(buf0);
        }
    }
}

static void skip_without_f16c(void)
{
    if (!reduce_f16_available(REDUCE_F16_F16C)) cr_skip_test("this CPU has no F16C");
}

/* ---- reduce_check ------------------------------------------------------ */

Test(reduce, check_accepts_every_op_on_float_types)
{
    for (ringd_dtype t = RINGD_FLOAT16; t <= RINGD_FLOAT64; t++)
        for (ringd_op op = RINGD_SUM; op < RINGD_OP_COUNT; op++)
            cr_expect_eq(reduce_check(t, op), 0, "%s %s", dtype_names[t], op_names[op]);
}

Test(reduce, check_accepts_every_op_but_the_means_on_integer_types)
{
    for (ringd_dtype t = RINGD_INT8; t <= RINGD_INT64; t++)
        for (ringd_op op = RINGD_SUM; op < RINGD_OP_COUNT; op++)
            cr_expect_eq(reduce_check(t, op),
                         op == RINGD_MEAN || op == RINGD_WMEAN ? RINGD_EINVAL : 0, "%s %s",
                         dtype_names[t], op_names[op]);
}

Test(reduce, wmean_reduces_as_sum_then_divides_by_the_weight_sum)
{
    float a[3] = {1.0f, 2.0f, -3.0f}, b[3] = {3.0f, 6.0f, 1.0f};
    double c[2] = {1.0, 10.0}, d[2] = {3.0, 2.0};
    reduce_apply(RINGD_FLOAT32, RINGD_WMEAN, a, b, 3);
    reduce_finish(RINGD_FLOAT32, RINGD_WMEAN, a, 3, 0.5);
    cr_expect(a[0] == 8.0f && a[1] == 16.0f && a[2] == -4.0f, "%g %g %g", a[0], a[1], a[2]);
    reduce_apply(RINGD_FLOAT64, RINGD_WMEAN, c, d, 2);
    reduce_finish(RINGD_FLOAT64, RINGD_WMEAN, c, 2, 4.0);
    cr_expect(c[0] == 1.0 && c[1] == 3.0);
}

Test(reduce, scale_multiplies_each_float_type_by_the_factor)
{
    float f[2] = {1.5f, -2.0f};
    double g[2] = {1.5, -2.0};
    uint16_t h[2] = {reduce_float_to_half(1.5f), reduce_float_to_half(-2.0f)};
    uint16_t bf[2] = {reduce_float_to_bf16(1.5f), reduce_float_to_bf16(-2.0f)};
    reduce_scale(RINGD_FLOAT32, f, 2, 4.0);
    reduce_scale(RINGD_FLOAT64, g, 2, 4.0);
    reduce_scale(RINGD_FLOAT16, h, 2, 4.0);
    reduce_scale(RINGD_BFLOAT16, bf, 2, 4.0);
    cr_expect(f[0] == 6.0f && f[1] == -8.0f);
    cr_expect(g[0] == 6.0 && g[1] == -8.0);
    cr_expect(reduce_half_to_float(h[0]) == 6.0f && reduce_half_to_float(h[1]) == -8.0f);
    cr_expect(reduce_bf16_to_float(bf[0]) == 6.0f && reduce_bf16_to_float(bf[1]) == -8.0f);
}

Test(reduce, check_rejects_unknown_dtypes_and_ops)
{
    cr_expect_eq(reduce_check(RINGD_DTYPE_COUNT, RINGD_SUM), RINGD_EINVAL);
    cr_expect_eq(reduce_check((ringd_dtype)-1, RINGD_SUM), RINGD_EINVAL);
    cr_expect_eq(reduce_check((ringd_dtype)1000, RINGD_SUM), RINGD_EINVAL);
    cr_expect_eq(reduce_check(RINGD_FLOAT32, RINGD_OP_COUNT), RINGD_EINVAL);
    cr_expect_eq(reduce_check(RINGD_FLOAT32, (ringd_op)-1), RINGD_EINVAL);
    cr_expect_eq(reduce_check(RINGD_INT32, (ringd_op)77), RINGD_EINVAL);
}

/* ---- Every dtype and op against the reference -------------------------- */

Test(reduce, int8_matches_reference_for_every_op)
{
    check_every_op(reduce_apply, RINGD_INT8);
}

Test(reduce, uint8_matches_reference_for_every_op)
{
    check_every_op(reduce_apply, RINGD_UINT8);
}

Test(reduce, int32_matches_reference_for_every_op)
{
    check_every_op(reduce_apply, RINGD_INT32);
}

Test(reduce, int64_matches_reference_for_every_op)
{
    check_every_op(reduce_apply, RINGD_INT64);
}

Test(reduce, float16_matches_reference_for_every_op)
{
    check_every_op(reduce_apply, RINGD_FLOAT16);
}

Test(reduce, float16_portable_kernels_match_reference_for_every_op)
{
    check_every_op(apply_f16_portable, RINGD_FLOAT16);
}

Test(reduce, float16_f16c_kernels_match_reference_for_every_op)
{
    skip_without_f16c();
    check_every_op(apply_f16c, RINGD_FLOAT16);
}

Test(reduce, bfloat16_matches_reference_for_every_op)
{
    check_every_op(reduce_apply, RINGD_BFLOAT16);
}

Test(reduce, float32_matches_reference_for_every_op)
{
    check_every_op(reduce_apply, RINGD_FLOAT32);
}

Test(reduce, float64_matches_reference_for_every_op)
{
    check_every_op(reduce_apply, RINGD_FLOAT64);
}

/* ---- Integers ---------------------------------------------------------- */

Test(reduce, int32_sum_wraps_around)
{
    int32_t dst[3] = {INT32_MAX, INT32_MIN, -1};
    int32_t src[3] = {1, -1, INT32_MIN};

    reduce_apply(RINGD_INT32, RINGD_SUM, dst, src, 3);
    cr_expect_eq(dst[0], INT32_MIN);
    cr_expect_eq(dst[1], INT32_MAX);
    cr_expect_eq(dst[2], INT32_MAX);
}

Test(reduce, int8_and_uint8_sums_wrap_around)
{
    int8_t d8[2] = {127, -128};
    int8_t s8[2] = {1, -1};
    uint8_t du[2] = {255, 0};
    uint8_t su[2] = {1, 255};

    reduce_apply(RINGD_INT8, RINGD_SUM, d8, s8, 2);
    reduce_apply(RINGD_UINT8, RINGD_SUM, du, su, 2);
    cr_expect_eq(d8[0], -128);
    cr_expect_eq(d8[1], 127);
    cr_expect_eq(du[0], 0);
    cr_expect_eq(du[1], 255);
}

Test(reduce, int64_sum_and_prod_wrap_around)
{
    int64_t dst[2] = {INT64_MAX, INT64_MAX};
    int64_t src[2] = {1, 2};
    int64_t p[2] = {INT64_MIN, 3037000500};
    int64_t q[2] = {-1, 3037000500};

    reduce_apply(RINGD_INT64, RINGD_SUM, dst, src, 2);
    cr_expect_eq(dst[0], INT64_MIN);
    cr_expect_eq(dst[1], INT64_MIN + 1);
    reduce_apply(RINGD_INT64, RINGD_PROD, p, q, 2);
    cr_expect_eq(p[0], INT64_MIN);
    /* 3037000500^2 is 145474193 past INT64_MAX. */
    cr_expect_eq(p[1], INT64_MIN + 145474192);
}

Test(reduce, int32_and_int8_prod_wrap_around)
{
    int32_t d32[2] = {65536, -65536};
    int32_t s32[2] = {65536, 32768};
    int8_t d8[2] = {16, -128};
    int8_t s8[2] = {16, -1};

    reduce_apply(RINGD_INT32, RINGD_PROD, d32, s32, 2);
    reduce_apply(RINGD_INT8, RINGD_PROD, d8, s8, 2);
    cr_expect_eq(d32[0], 0);
    cr_expect_eq(d32[1], INT32_MIN);
    cr_expect_eq(d8[0], 0);
    cr_expect_eq(d8[1], -128);
}

Test(reduce, integer_min_and_max_respect_signedness)
{
    int8_t d8[2] = {-1, -1};
    int8_t s8[2] = {1, 1};
    uint8_t du[2] = {255, 255};
    uint8_t su[2] = {1, 1};
    int64_t d64[2] = {INT64_MIN, INT64_MIN};
    int64_t s64[2] = {INT64_MAX, INT64_MAX};

    reduce_apply(RINGD_INT8, RINGD_MIN, d8, s8, 1);
    reduce_apply(RINGD_INT8, RINGD_MAX, d8 + 1, s8 + 1, 1);
    reduce_apply(RINGD_UINT8, RINGD_MIN, du, su, 1);
    reduce_apply(RINGD_UINT8, RINGD_MAX, du + 1, su + 1, 1);
    reduce_apply(RINGD_INT64, RINGD_MIN, d64, s64, 1);
    reduce_apply(RINGD_INT64, RINGD_MAX, d64 + 1, s64 + 1, 1);
    cr_expect_eq(d8[0], -1);
    cr_expect_eq(d8[1], 1);
    cr_expect_eq(du[0], 1);
    cr_expect_eq(du[1], 255);
    cr_expect_eq(d64[0], INT64_MIN);
    cr_expect_eq(d64[1], INT64_MAX);
}

/* ---- NaN and the half types -------------------------------------------- */

static void check_nan_propagates(ringd_dtype dtype, uint64_t nan_bits, uint64_t one_bits)
{
    size_t es = elem_size(dtype);
    enum { N = 37 }; /* a vector body and a tail */
    _Alignas(8) char dst[N * 8];
    _Alignas(8) char src[N * 8];

    for (ringd_op op = RINGD_MIN; op <= RINGD_MAX; op++) {
        for (size_t i = 0; i < N; i++) {
            /* NaN in dst, in src, in both, or in neither, in turn. */
            store_bits(dtype, dst + i * es, i % 4 == 0 || i % 4 == 2 ? nan_bits : one_bits);
            store_bits(dtype, src + i * es, i % 4 == 1 || i % 4 == 2 ? nan_bits : one_bits);
        }
        reduce_apply(dtype, op, dst, src, N);
        for (size_t i = 0; i < N; i++) {
            double got = bits_to_double(dtype, load_bits(dtype, dst + i * es));
            if (i % 4 == 3)
                cr_expect_eq(got, 1.0, "%s %s element %zu", dtype_names[dtype], op_names[op], i);
            else
                cr_expect(isnan(got), "%s %s element %zu: NaN lost", dtype_names[dtype],
                          op_names[op], i);
        }
    }
}

Test(reduce, min_and_max_give_nan_when_either_input_is_nan)
{
    check_nan_propagates(RINGD_FLOAT32, 0x7FC00000, 0x3F800000);
    check_nan_propagates(RINGD_FLOAT32, 0xFF800001, 0x3F800000);
    check_nan_propagates(RINGD_FLOAT64, 0x7FF8000000000000, 0x3FF0000000000000);
    check_nan_propagates(RINGD_FLOAT64, 0xFFF0000000000001, 0x3FF0000000000000);
    check_nan_propagates(RINGD_FLOAT16, 0x7E00, 0x3C00);
    check_nan_propagates(RINGD_FLOAT16, 0xFC01, 0x3C00);
    check_nan_propagates(RINGD_BFLOAT16, 0x7FC0, 0x3F80);
    check_nan_propagates(RINGD_BFLOAT16, 0xFF81, 0x3F80);
}

Test(reduce, half_types_store_nan_results_as_the_default_quiet_nan)
{
    /* inf - inf, NaN + 1, signalling NaN + 1, negative NaN min 1. */
    uint16_t h_dst[4] = {0x7C00, 0x7E01, 0x7C01, 0xFE00};
    uint16_t h_src[4] = {0xFC00, 0x3C00, 0x3C00, 0x3C00};
    uint16_t b_dst[4] = {0x7F80, 0x7FC1, 0x7F81, 0xFFC0};
    uint16_t b_src[4] = {0xFF80, 0x3F80, 0x3F80, 0x3F80};

    reduce_apply(RINGD_FLOAT16, RINGD_SUM, h_dst, h_src, 3);
    reduce_apply(RINGD_FLOAT16, RINGD_MIN, h_dst + 3, h_src + 3, 1);
    reduce_apply(RINGD_BFLOAT16, RINGD_SUM, b_dst, b_src, 3);
    reduce_apply(RINGD_BFLOAT16, RINGD_MIN, b_dst + 3, b_src + 3, 1);
    for (int i = 0; i < 4; i++) {
        cr_expect_eq(h_dst[i], 0x7E00, "float16 element %d: %#x", i, h_dst[i]);
        cr_expect_eq(b_dst[i], 0x7FC0, "bfloat16 element %d: %#x", i, b_dst[i]);
    }
}

Test(reduce, float16_sum_rounds_ties_to_even)
{
    /* 1 + 2^-11 is halfway between 1 and the next half, 1 + 2^-10: the even
     * one is 1. 1 + 3 * 2^-11 is halfway between odd 0x3C01 and even 0x3C02. */
    uint16_t dst[2] = {0x3C00, 0x3C01};
    uint16_t src[2] = {0x1000, 0x1000}; /* 2^-11 */

    reduce_apply(RINGD_FLOAT16, RINGD_SUM, dst, src, 2);
    cr_expect_eq(dst[0], 0x3C00);
    cr_expect_eq(dst[1], 0x3C02);
}

Test(reduce, float16_f16c_and_portable_kernels_agree_bit_for_bit)
{
    skip_without_f16c();
    enum { N = 1000003 };
    uint16_t *src = malloc(N * sizeof *src);
    uint16_t *dst0 = malloc(N * sizeof *dst0);
    uint16_t *a = malloc(N * sizeof *a);
    uint16_t *b = malloc(N * sizeof *b);
    cr_assert(src && dst0 && a && b);

    /* Every float16 value as dst against random partners, then random bits:
     * about 3% NaNs, 3% subnormals, and many sums and products that overflow
     * or underflow. */
    seed(0xF16C);
    for (size_t i = 0; i < N; i++) {
        uint64_t r = next_random();
        dst0[i] = i < 65536 ? (uint16_t)i : (uint16_t)r;
        src[i] = (uint16_t)(r >> 16);
    }
    for (ringd_op op = RINGD_SUM; op < RINGD_OP_COUNT; op++) {
        memcpy(a, dst0, N * sizeof *a);
        memcpy(b, dst0, N * sizeof *b);
        reduce_f16_apply(REDUCE_F16_PORTABLE, op, a, src, N);
        reduce_f16_apply(REDUCE_F16_F16C, op, b, src, N);
        for (size_t i = 0; i < N; i++)
            if (a[i] != b[i])
                cr_assert_fail("%s element %zu: %#x (op) %#x: portable %#x, F16C %#x", op_names[op],
                               i, dst0[i], src[i], a[i], b[i]);
    }
    for (int ranks = 1; ranks <= 1000; ranks *= 3) {
        memcpy(a, dst0, N * sizeof *a);
        memcpy(b, dst0, N * sizeof *b);
        reduce_f16_finish(REDUCE_F16_PORTABLE, RINGD_MEAN, a, N, ranks);
        reduce_f16_finish(REDUCE_F16_F16C, RINGD_MEAN, b, N, ranks);
        for (size_t i = 0; i < N; i++)
            if (a[i] != b[i])
                cr_assert_fail("mean over %d ranks, element %zu: %#x: portable %#x, F16C %#x",
                               ranks, i, dst0[i], a[i], b[i]);
    }
    free(src);
    free(dst0);
    free(a);
    free(b);
}

/* ---- MEAN -------------------------------------------------------------- */

static void finish_public(ringd_dtype dtype, ringd_op op, void *buf, size_t count, int ranks)
{
    reduce_finish(dtype, op, buf, count, ranks);
}

Test(reduce, mean_finish_divides_every_element_by_ranks)
{
    for (ringd_dtype t = RINGD_FLOAT16; t <= RINGD_FLOAT64; t++)
        check_mean_finish(finish_public, t);
}

Test(reduce, float16_mean_finish_divides_by_ranks_in_both_implementations)
{
    check_mean_finish(finish_f16_portable, RINGD_FLOAT16);
    if (reduce_f16_available(REDUCE_F16_F16C)) check_mean_finish(finish_f16c, RINGD_FLOAT16);
}

Test(reduce, mean_finish_rounds_once_in_float32_for_half_types)
{
    /* 0x3C01 / 3 = (1 + 2^-10) / 3: in float32 then rounded once. */
    uint16_t h = 0x3C01;
    float want = (float)(1.0009765625 / 3);

    reduce_finish(RINGD_FLOAT16, RINGD_MEAN, &h, 1, 3);
    cr_expect_eq(h, ref_encode(&f16_format, want));
}

Test(reduce, mean_reduces_as_sum)
{
    float a[5] = {1, 2, 3, 4, 5}, b[5] = {1, 2, 3, 4, 5};
    float s[5] = {0.5f, 0.25f, -3, 1e30f, -0.0f};

    reduce_apply(RINGD_FLOAT32, RINGD_MEAN, a, s, 5);
    reduce_apply(RINGD_FLOAT32, RINGD_SUM, b, s, 5);
    cr_expect(memcmp(a, b, sizeof a) == 0);
}

Test(reduce, finish_leaves_the_buffer_alone_for_other_ops)
{
    for (ringd_dtype t = RINGD_INT8; t < RINGD_DTYPE_COUNT; t++) {
        for (ringd_op op = RINGD_SUM; op < RINGD_OP_COUNT; op++) {
            _Alignas(8) char buf[64];
            _Alignas(8) char buf0[64];
            if (op == RINGD_MEAN || op == RINGD_WMEAN) continue;
            fill_random(t, buf0, sizeof buf0 / elem_size(t));
            memcpy(buf, buf0, sizeof buf);
            reduce_finish(t, op, buf, sizeof buf / elem_size(t), 7);
            cr_expect(memcmp(buf, buf0, sizeof buf) == 0, "%s %s", dtype_names[t], op_names[op]);
        }
    }
}

Test(reduce, count_zero_touches_nothing)
{
    for (ringd_dtype t = RINGD_INT8; t < RINGD_DTYPE_COUNT; t++) {
        for (ringd_op op = RINGD_SUM; op < RINGD_OP_COUNT; op++) {
            if (reduce_check(t, op) != 0) continue;
            reduce_apply(t, op, NULL, NULL, 0);
            reduce_finish(t, op, NULL, 0, 2);
        }
    }
}

/* ---- Converters -------------------------------------------------------- */

Test(reduce, every_float16_value_round_trips_through_float)
{
    for (uint32_t h = 0; h <= 0xFFFF; h++) {
        float f = reduce_half_to_float((uint16_t)h);
        double want = ref_decode(&f16_format, h);
        uint16_t back = reduce_float_to_half(f);

        if (isnan(want)) {
            /* NaNs stay NaNs, become quiet, and keep their sign and payload. */
            uint32_t bits;
            memcpy(&bits, &f, sizeof bits);
            cr_assert(isnan(f), "%#x", h);
            cr_assert(bits & 0x00400000, "%#x decoded as signalling %#x", h, bits);
            cr_assert_eq(back, h | 0x0200, "%#x came back as %#x", h, back);
        } else {
            cr_assert_eq((double)f, want, "%#x decoded as %a, want %a", h, f, want);
            cr_assert_eq(!!signbit(f), !!(h & 0x8000), "%#x", h);
            cr_assert_eq(back, h, "%#x came back as %#x", h, back);
        }
    }
}

Test(reduce, every_bfloat16_value_round_trips_through_float)
{
    for (uint32_t h = 0; h <= 0xFFFF; h++) {
        float f = reduce_bf16_to_float((uint16_t)h);
        double want = ref_decode(&bf16_format, h);
        uint16_t back = reduce_float_to_bf16(f);

        if (isnan(want)) {
            cr_assert(isnan(f), "%#x", h);
            cr_assert_eq(back, h | 0x0040, "%#x came back as %#x", h, back);
        } else {
            cr_assert_eq((double)f, want, "%#x decoded as %a, want %a", h, f, want);
            cr_assert_eq(!!signbit(f), !!(h & 0x8000), "%#x", h);
            cr_assert_eq(back, h, "%#x came back as %#x", h, back);
        }
    }
}

typedef uint16_t to_half_fn(float f);

/* Both halfway points around every finite value of the format, and the
 * floats just below and above them. */
static void check_halfway_points(const half_format *fmt, to_half_fn *convert)
{
    int bias = format_bias(fmt);
    uint32_t inf = ((1u << fmt->exp) - 1) << fmt->mant;
    uint32_t sign = 1u << (fmt->mant + fmt->exp);

    for (uint32_t h = 0; h < inf; h++) {
        double lo = ref_decode(fmt, h);
        double hi = h + 1 == inf ? ldexp(1, bias + 1) : ref_decode(fmt, h + 1);
        float mid = (float)((lo + hi) / 2);
        uint32_t even = h & 1 ? h + 1 : h;

        cr_assert_eq((lo + hi) / 2, (double)mid);
        cr_assert_eq(convert(mid), even, "%a", mid);
        cr_assert_eq(convert(-mid), even | sign, "%a", -mid);
        cr_assert_eq(convert(nextafterf(mid, 0)), h, "%a", nextafterf(mid, 0));
        cr_assert_eq(convert(nextafterf(mid, INFINITY)), h + 1, "%a", nextafterf(mid, INFINITY));
    }
}

static void check_random_floats(const half_format *fmt, to_half_fn *convert)
{
    uint32_t sign = 1u << (fmt->mant + fmt->exp);
    uint32_t quiet = 1u << (fmt->mant - 1);

    for (int i = 0; i < 1000000; i++) {
        uint32_t bits = (uint32_t)next_random();
        float f;
        memcpy(&f, &bits, sizeof f);
        uint16_t got = convert(f);
        if (isnan(f)) {
            cr_assert(isnan(ref_decode(fmt, got)), "%#x gave %#x", bits, got);
            cr_assert(got & quiet, "%#x gave signalling %#x", bits, got);
            cr_assert_eq(!!(got & sign), bits >> 31, "%#x gave %#x", bits, got);
        } else {
            cr_assert_eq(got, ref_encode(fmt, f), "%#x (%a) gave %#x", bits, f, got);
        }
    }
}

Test(reduce, float_to_half_rounds_halfway_cases_to_even)
{
    check_halfway_points(&f16_format, reduce_float_to_half);
}

Test(reduce, float_to_half_matches_reference_on_random_floats)
{
    seed(0xF2F16);
    check_random_floats(&f16_format, reduce_float_to_half);
}

Test(reduce, float_to_bf16_rounds_halfway_cases_to_even)
{
    check_halfway_points(&bf16_format, reduce_float_to_bf16);
}

Test(reduce, float_to_bf16_matches_reference_on_random_floats)
{
    seed(0xF2BF16);
    check_random_floats(&bf16_format, reduce_float_to_bf16);
}

static float float_from(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

Test(reduce, float_to_half_handles_crafted_edge_cases)
{
    static const struct {
        float f;
        uint16_t h;
    } cases[] = {
        {1.0f + 0x1p-11f, 0x3C00},            /* tie, even below */
        {1.0f + 3 * 0x1p-11f, 0x3C02},        /* tie, even above */
        {1.0f + 0x1p-11f + 0x1p-23f, 0x3C01}, /* just past the tie */
        {-1.0f - 0x1p-11f, 0xBC00},
        {65504.0f, 0x7BFF},        /* largest half */
        {65519.99609375f, 0x7BFF}, /* just below the tie with 2^16 */
        {65520.0f, 0x7C00},        /* the tie rounds to infinity */
        {1e10f, 0x7C00},
        {-1e10f, 0xFC00},
        {0x1p-25f, 0x0000},            /* half the smallest subnormal */
        {0x1.000002p-25f, 0x0001},     /* just above it */
        {3 * 0x1p-25f, 0x0002},        /* 1.5 units: even is 2 */
        {5 * 0x1p-25f, 0x0002},        /* 2.5 units: even is 2 */
        {0x1p-14f - 0x1p-25f, 0x0400}, /* halfway to the smallest normal */
        {0x1p-24f, 0x0001},
        {-0.0f, 0x8000},
        {0x1p-149f, 0x0000}, /* float's smallest subnormal */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_expect_eq(reduce_float_to_half(cases[i].f), cases[i].h, "%a gave %#x, want %#x",
                     cases[i].f, reduce_float_to_half(cases[i].f), cases[i].h);
}

Test(reduce, float_to_bf16_handles_crafted_edge_cases)
{
    static const struct {
        uint32_t f;
        uint16_t h;
    } cases[] = {
        {0x3F808000, 0x3F80},                       /* 1 + 2^-8, tie, even below */
        {0x3F818000, 0x3F82},                       /* tie, even above */
        {0x3F808001, 0x3F81},                       /* just past the tie */
        {0x7F7F7FFF, 0x7F7F},                       /* just below the tie with infinity */
        {0x7F7F8000, 0x7F80},                       /* the tie rounds to infinity */
        {0x7F7FFFFF, 0x7F80},                       /* FLT_MAX */
        {0x00000001, 0x0000}, {0x00008000, 0x0000}, /* tie, even below */
        {0x00018000, 0x0002},                       /* tie, even above */
        {0x80000000, 0x8000},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_expect_eq(reduce_float_to_bf16(float_from(cases[i].f)), cases[i].h,
                     "%#x gave %#x, want %#x", cases[i].f,
                     reduce_float_to_bf16(float_from(cases[i].f)), cases[i].h);
}

Test(reduce, nans_stay_quiet_nans_through_conversions)
{
    /* A signalling NaN whose payload is only in the low bits would become
     * infinity if truncated. */
    cr_expect_eq(reduce_float_to_half(float_from(0x7F800001)), 0x7E00);
    cr_expect_eq(reduce_float_to_half(float_from(0xFF800001)), 0xFE00);
    cr_expect_eq(reduce_float_to_half(float_from(0x7FC00000)), 0x7E00);
    cr_expect_eq(reduce_float_to_bf16(float_from(0x7F800001)), 0x7FC0);
    cr_expect_eq(reduce_float_to_bf16(float_from(0xFF800001)), 0xFFC0);
    cr_expect_eq(reduce_float_to_bf16(float_from(0x7FC00000)), 0x7FC0);
    cr_expect(isnan(reduce_half_to_float(0x7C01)));
    cr_expect(isnan(reduce_bf16_to_float(0x7F81)));
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) static uint16_t hw_float_to_half(float f)
{
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}

__attribute__((target("f16c"))) static float hw_half_to_float(uint16_t h)
{
    return _cvtsh_ss(h);
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
#endif

Test(reduce, float16_converters_match_the_f16c_instructions_bit_for_bit)
{
    skip_without_f16c();
#if defined(__x86_64__)
    for (uint32_t h = 0; h <= 0xFFFF; h++)
        cr_assert_eq(bits_of(reduce_half_to_float((uint16_t)h)),
                     bits_of(hw_half_to_float((uint16_t)h)), "%#x", h);
    seed(0xC0FFEE);
    for (int i = 0; i < 1000000; i++) {
        float f = float_from((uint32_t)next_random());
        cr_assert_eq(reduce_float_to_half(f), hw_float_to_half(f), "%#x", bits_of(f));
    }
#endif
}
