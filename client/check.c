/*
 * check.c - the data of ringctl's collective commands; see check.h.
 */
#include "check.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static uint16_t float_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t fexp = (x >> 23) & 0xff, mant = x & 0x7fffff;
    int32_t exp = (int32_t)fexp - 127 + 15;
    if (fexp == 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
    if (exp >= 31) return sign | 0x7c00;
    if (exp <= 0) { /* subnormal in half: units of 2^-24 */
        if (exp < -10) return sign;
        mant |= 0x800000;
        int shift = 14 - exp;
        uint32_t h = mant >> shift, rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (h & 1))) h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((uint32_t)exp << 10) | (mant >> 13), rem = mant & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
        h++; /* a carry into the exponent is still right, up to infinity */
    return (uint16_t)(sign | h);
}

static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0) {
        float v = (float)mant / 16777216.0f;
        return sign ? -v : v;
    }
    uint32_t x = sign | (exp == 31 ? 0x7f800000 | mant << 13 : (exp + 112) << 23 | mant << 13);
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

static uint16_t float_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)(x >> 16 | 0x40);
    return (uint16_t)((x + 0x7fff + (x >> 16 & 1)) >> 16);
}

static float bf16_to_float(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

/* Stores v, an integer or a value exact in t, as element i of buf. Integers
 * wrap around like the daemon's arithmetic. */
static void put(ringd_dtype t, void *buf, size_t i, int64_t iv, double fv)
{
    uint64_t u = (uint64_t)iv;
    switch (t) {
    case RINGD_INT8:
    case RINGD_UINT8:
        ((uint8_t *)buf)[i] = (uint8_t)u;
        break;
    case RINGD_INT32:
        ((uint32_t *)buf)[i] = (uint32_t)u;
        break;
    case RINGD_INT64:
        ((uint64_t *)buf)[i] = u;
        break;
    case RINGD_FLOAT16:
        ((uint16_t *)buf)[i] = float_to_half((float)fv);
        break;
    case RINGD_BFLOAT16:
        ((uint16_t *)buf)[i] = float_to_bf16((float)fv);
        break;
    case RINGD_FLOAT32:
        ((float *)buf)[i] = (float)fv;
        break;
    case RINGD_FLOAT64:
        ((double *)buf)[i] = fv;
        break;
    default:
        break;
    }
}

void check_show(ringd_dtype t, const void *buf, size_t i, char *out, size_t len)
{
    switch (t) {
    case RINGD_INT8:
        snprintf(out, len, "%d", ((const int8_t *)buf)[i]);
        break;
    case RINGD_UINT8:
        snprintf(out, len, "%u", ((const uint8_t *)buf)[i]);
        break;
    case RINGD_INT32:
        snprintf(out, len, "%" PRId32, ((const int32_t *)buf)[i]);
        break;
    case RINGD_INT64:
        snprintf(out, len, "%" PRId64, ((const int64_t *)buf)[i]);
        break;
    case RINGD_FLOAT16:
        snprintf(out, len, "%.9g", half_to_float(((const uint16_t *)buf)[i]));
        break;
    case RINGD_BFLOAT16:
        snprintf(out, len, "%.9g", bf16_to_float(((const uint16_t *)buf)[i]));
        break;
    case RINGD_FLOAT32:
        snprintf(out, len, "%.9g", ((const float *)buf)[i]);
        break;
    case RINGD_FLOAT64:
        snprintf(out, len, "%.17g", ((const double *)buf)[i]);
        break;
    default:
        snprintf(out, len, "?");
        break;
    }
}

/* Whether element i of a and b hold the same value (+0 equals -0). */
static int same(ringd_dtype t, const void *a, const void *b, size_t i)
{
    size_t sz = ringd_dtype_size(t);
    if (memcmp((const char *)a + i * sz, (const char *)b + i * sz, sz) == 0) return 1;
    switch (t) {
    case RINGD_FLOAT16:
        return half_to_float(((const uint16_t *)a)[i]) == half_to_float(((const uint16_t *)b)[i]);
    case RINGD_BFLOAT16:
        return bf16_to_float(((const uint16_t *)a)[i]) == bf16_to_float(((const uint16_t *)b)[i]);
    case RINGD_FLOAT32:
        return ((const float *)a)[i] == ((const float *)b)[i];
    case RINGD_FLOAT64:
        return ((const double *)a)[i] == ((const double *)b)[i];
    default:
        return 0;
    }
}

/* The input of rank r at index i. PROD multiplies 1s and -1s and a single 2,
 * so it never overflows. */
static int64_t input(ringd_dtype t, ringd_op op, int r, int n, size_t i)
{
    if (op == RINGD_PROD) return (size_t)r == i % (size_t)n ? 2 : ((size_t)r + i) % 2 ? -1 : 1;
    int64_t v = (r + 1) * (int64_t)(i % 13 + 1) % 7 - 3;
    return t == RINGD_UINT8 ? v + 3 : v;
}

/* The reduction of element i over n ranks, stored as element at of buf.
 * Integer SUM and PROD wrap in 64 bits, then put() truncates: the same as
 * wrapping in t. */
static void expect(ringd_dtype t, ringd_op op, int n, size_t i, void *buf, size_t at)
{
    /* WMEAN weighs rank r by r + 1 (see ringctl's run_iterations()). */
    int64_t acc = input(t, op, 0, n, i);
    for (int r = 1; r < n; r++) {
        int64_t v = input(t, op, r, n, i);
        switch (op) {
        case RINGD_WMEAN:
            acc += (r + 1) * v;
            break;
        case RINGD_SUM:
        case RINGD_MEAN:
            acc = (int64_t)((uint64_t)acc + (uint64_t)v);
            break;
        case RINGD_PROD:
            acc = (int64_t)((uint64_t)acc * (uint64_t)v);
            break;
        case RINGD_MIN:
            acc = v < acc ? v : acc;
            break;
        case RINGD_MAX:
            acc = v > acc ? v : acc;
            break;
        default:
            break;
        }
    }
    double fv = (double)acc;
    /* MEAN divides the exact sum once: in float32 for the half types. */
    if (op == RINGD_MEAN || op == RINGD_WMEAN) {
        int64_t d = op == RINGD_MEAN ? n : (int64_t)n * (n + 1) / 2;
        fv = t == RINGD_FLOAT64 ? (double)acc / (double)d : (double)((float)acc / (float)d);
    }
    put(t, buf, at, acc, fv);
}

static void put_int(ringd_dtype t, void *buf, size_t i, int64_t v)
{
    put(t, buf, i, v, (double)v);
}

size_t check_buf_len(const check_case *k)
{
    switch (k->kind) {
    case RINGD_COLL_ALLGATHER:
    case RINGD_COLL_REDUCE_SCATTER:
        return (size_t)k->n * k->count;
    case RINGD_COLL_BARRIER:
        return 0;
    default:
        return k->count;
    }
}

size_t check_want_len(const check_case *k)
{
    return k->kind == RINGD_COLL_REDUCE_SCATTER ? k->count : check_buf_len(k);
}

void check_fill(ringd_dtype t, ringd_op op, int rank, int n, size_t count, void *in, void *want)
{
    for (size_t i = 0; i < count; i++) {
        put_int(t, in, i, input(t, op, rank, n, i));
        expect(t, op, n, i, want, i);
    }
}

void check_fill_case(const check_case *k, void *init, void *want)
{
    ringd_dtype t = k->dtype;
    size_t count = k->count, mine = (size_t)k->rank * count;
    switch (k->kind) {
    case RINGD_COLL_ALLREDUCE:
        check_fill(t, k->op, k->rank, k->n, count, init, want);
        break;
    case RINGD_COLL_REDUCE_SCATTER:
        for (size_t i = 0; i < (size_t)k->n * count; i++)
            put_int(t, init, i, input(t, k->op, k->rank, k->n, i));
        for (size_t i = 0; i < count; i++)
            expect(t, k->op, k->n, mine + i, want, i);
        break;
    case RINGD_COLL_BROADCAST:
        for (size_t i = 0; i < count; i++) {
            int64_t v = input(t, RINGD_SUM, k->root, k->n, i);
            put_int(t, init, i, k->rank == k->root ? v : CHECK_UNSET);
            put_int(t, want, i, v);
        }
        break;
    case RINGD_COLL_ALLGATHER:
        for (int r = 0; r < k->n; r++) {
            for (size_t i = 0; i < count; i++) {
                int64_t v = input(t, RINGD_SUM, r, k->n, i);
                put_int(t, init, (size_t)r * count + i, r == k->rank ? v : CHECK_UNSET);
                put_int(t, want, (size_t)r * count + i, v);
            }
        }
        break;
    case RINGD_COLL_BARRIER:
        break;
    }
}

size_t check_first_wrong(ringd_dtype t, const void *got, const void *want, size_t count)
{
    if (count == 0 || memcmp(got, want, count * ringd_dtype_size(t)) == 0) return count;
    size_t i = 0;
    while (i < count && same(t, got, want, i))
        i++;
    return i;
}
