/*
 * reduce_wire.c - the narrow wire types; see reduce_wire.h.
 *
 * A float32 collective with a wire type travels as bfloat16 or float16: each
 * hop widens what it receives, combines it with its own float32 value in
 * float32, and rounds the result once to the wire type to send it on (NaN
 * as the default NaN, as in reduce.c's kernels). The loops are the portable
 * converters' of reduce-kernel.h, in blocks, so that they vectorise; with
 * AVX2 and F16C, eight elements go at a time. Tables map (wire, op) to
 * loops, as in reduce.c, so nothing is decided inside a loop.
 */
#include "reduce_wire.h"

#include <assert.h>

#include "reduce-internal.h"
#include "reduce-kernel.h"
#include "reduce.h"

/* BODY for every i < n, in blocks of BLOCK_BYTES of float32 and then one
 * at a time, so that it vectorises (reduce-kernel.h says why). */
#define WIRE_LOOP(n, BODY)                                                                         \
    do {                                                                                           \
        const size_t w_ = BLOCK_BYTES / sizeof(float);                                             \
        size_t i_ = 0;                                                                             \
        for (; i_ + w_ <= (n); i_ += w_)                                                           \
            UNROLL_BLOCK                                                                           \
            for (size_t i = i_; i < i_ + w_; i++)                                                  \
                BODY;                                                                              \
        for (size_t i = i_; i < (n); i++)                                                          \
            BODY;                                                                                  \
    } while (0)

/* seg[i] = store(own[i] OP load(seg[i])) */
typedef void wire_fold_fn(uint16_t *restrict seg, const float *restrict own, size_t n);

#define WIRE_FOLD(name, LOAD, STORE, OP)                                                           \
    static void name(uint16_t *restrict seg, const float *restrict own, size_t n)                  \
    {                                                                                              \
        WIRE_LOOP(n, seg[i] = (uint16_t)STORE(OP(own[i], LOAD(seg[i]))));                          \
    }

WIRE_FOLD(bf16_wire_sum, bf16_to_float, bf16_store, ADD)
WIRE_FOLD(bf16_wire_prod, bf16_to_float, bf16_store, MUL)
WIRE_FOLD(bf16_wire_min, bf16_to_float, bf16_store, FMIN)
WIRE_FOLD(bf16_wire_max, bf16_to_float, bf16_store, FMAX)
WIRE_FOLD(f16_wire_sum, half_to_float, half_store, ADD)
WIRE_FOLD(f16_wire_prod, half_to_float, half_store, MUL)
WIRE_FOLD(f16_wire_min, half_to_float, half_store, FMIN)
WIRE_FOLD(f16_wire_max, half_to_float, half_store, FMAX)

static wire_fold_fn *const wire_folds[2][RINGD_OP_COUNT] = {
    {[RINGD_SUM] = bf16_wire_sum,
     [RINGD_MEAN] = bf16_wire_sum,
     [RINGD_WMEAN] = bf16_wire_sum,
     [RINGD_MIN] = bf16_wire_min,
     [RINGD_MAX] = bf16_wire_max,
     [RINGD_PROD] = bf16_wire_prod},
    {[RINGD_SUM] = f16_wire_sum,
     [RINGD_MEAN] = f16_wire_sum,
     [RINGD_WMEAN] = f16_wire_sum,
     [RINGD_MIN] = f16_wire_min,
     [RINGD_MAX] = f16_wire_max,
     [RINGD_PROD] = f16_wire_prod},
};

static int is_bf16(ringd_dtype wire)
{
    return wire == RINGD_BFLOAT16;
}

int reduce_wire_check(ringd_dtype dtype, ringd_op op, ringd_dtype wire)
{
    if (dtype != RINGD_FLOAT32 || (wire != RINGD_BFLOAT16 && wire != RINGD_FLOAT16)) return RINGD_EINVAL;
    return reduce_check(dtype, op);
}

int reduce_wire_of(ringd_coll kind, ringd_dtype dtype, int requested, int config_wire)
{
    int narrow = dtype == RINGD_FLOAT32 && (kind == RINGD_COLL_ALLREDUCE ||
                                            kind == RINGD_COLL_REDUCE_SCATTER ||
                                            kind == RINGD_COLL_ALLGATHER);
    int w = requested == RINGD_WIRE_DEFAULT ? config_wire : requested;
    if (w != RINGD_WIRE_BFLOAT16 && w != RINGD_WIRE_FLOAT16) return 0;
    if (narrow) return w;
    /* The daemon's default leaves what it does not apply to alone. */
    return requested == RINGD_WIRE_DEFAULT ? 0 : -1;
}

ringd_dtype reduce_wire_type(int wire)
{
    return wire == RINGD_WIRE_BFLOAT16 ? RINGD_BFLOAT16 : RINGD_FLOAT16;
}

static void pack_portable(ringd_dtype wire, uint16_t *restrict d, const float *restrict s, size_t n)
{
    if (is_bf16(wire))
        WIRE_LOOP(n, d[i] = (uint16_t)bf16_store(s[i]));
    else
        WIRE_LOOP(n, d[i] = (uint16_t)half_store(s[i]));
}

static void unpack_portable(ringd_dtype wire, float *restrict d, const uint16_t *restrict s,
                            size_t n)
{
    if (is_bf16(wire))
        WIRE_LOOP(n, d[i] = bf16_to_float(s[i]));
    else
        WIRE_LOOP(n, d[i] = half_to_float(s[i]));
}

static void divide_portable(ringd_dtype wire, uint16_t *restrict s, size_t n, float k)
{
    if (is_bf16(wire))
        WIRE_LOOP(n, s[i] = (uint16_t)bf16_store(bf16_to_float(s[i]) / k));
    else
        WIRE_LOOP(n, s[i] = (uint16_t)half_store(half_to_float(s[i]) / k));
}

/* The same with AVX2 and F16C, eight elements at a time; a tail of fewer
 * goes through the portable loops, which round alike. */
#if defined(__x86_64__)
#define AVX2_TARGET __attribute__((target("avx2,f16c,avx")))

AVX2_TARGET static inline __m256 bf16_load8(const uint16_t *p)
{
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

/* bf16_store(), eight at a time: round to nearest even, NaN to the default. */
AVX2_TARGET static inline void bf16_store8(uint16_t *p, __m256 x)
{
    __m256i b = _mm256_castps_si256(x);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7FFF)),
                                                   lsb),
                                  16);
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(BF16_DEFAULT_NAN), nan);
    __m128i lo = _mm256_castsi256_si128(r), hi = _mm256_extracti128_si256(r, 1);
    _mm_storeu_si128((__m128i *)(void *)p, _mm_packus_epi32(lo, hi));
}

#define WIRE_AVX2(name, LOAD8, STORE8, VOP)                                                        \
    AVX2_TARGET static size_t name(uint16_t *restrict seg, const float *restrict own, size_t n)    \
    {                                                                                              \
        size_t i = 0;                                                                              \
        for (; i + 8 <= n; i += 8)                                                                 \
            STORE8(seg + i, VOP(_mm256_loadu_ps(own + i), LOAD8(seg + i)));                        \
        return i;                                                                                  \
    }

WIRE_AVX2(bf16_fold8_sum, bf16_load8, bf16_store8, V_ADD)
WIRE_AVX2(bf16_fold8_prod, bf16_load8, bf16_store8, V_MUL)
WIRE_AVX2(bf16_fold8_min, bf16_load8, bf16_store8, V_MIN)
WIRE_AVX2(bf16_fold8_max, bf16_load8, bf16_store8, V_MAX)
WIRE_AVX2(f16_fold8_sum, load8, store8, V_ADD)
WIRE_AVX2(f16_fold8_prod, load8, store8, V_MUL)
WIRE_AVX2(f16_fold8_min, load8, store8, V_MIN)
WIRE_AVX2(f16_fold8_max, load8, store8, V_MAX)

typedef size_t fold8_fn(uint16_t *restrict seg, const float *restrict own, size_t n);

static fold8_fn *const wire_folds8[2][RINGD_OP_COUNT] = {
    {[RINGD_SUM] = bf16_fold8_sum,
     [RINGD_MEAN] = bf16_fold8_sum,
     [RINGD_WMEAN] = bf16_fold8_sum,
     [RINGD_MIN] = bf16_fold8_min,
     [RINGD_MAX] = bf16_fold8_max,
     [RINGD_PROD] = bf16_fold8_prod},
    {[RINGD_SUM] = f16_fold8_sum,
     [RINGD_MEAN] = f16_fold8_sum,
     [RINGD_WMEAN] = f16_fold8_sum,
     [RINGD_MIN] = f16_fold8_min,
     [RINGD_MAX] = f16_fold8_max,
     [RINGD_PROD] = f16_fold8_prod},
};

AVX2_TARGET static size_t pack8(ringd_dtype wire, uint16_t *restrict d, const float *restrict s,
                                size_t n)
{
    size_t i = 0;
    if (is_bf16(wire))
        for (; i + 8 <= n; i += 8)
            bf16_store8(d + i, _mm256_loadu_ps(s + i));
    else
        for (; i + 8 <= n; i += 8)
            store8(d + i, _mm256_loadu_ps(s + i));
    return i;
}

AVX2_TARGET static size_t unpack8(ringd_dtype wire, float *restrict d, const uint16_t *restrict s,
                                  size_t n)
{
    size_t i = 0;
    if (is_bf16(wire))
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(d + i, bf16_load8(s + i));
    else
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(d + i, load8(s + i));
    return i;
}

AVX2_TARGET static size_t divide8(ringd_dtype wire, uint16_t *restrict s, size_t n, float k)
{
    const __m256 kk = _mm256_set1_ps(k);
    size_t i = 0;
    if (is_bf16(wire))
        for (; i + 8 <= n; i += 8)
            bf16_store8(s + i, _mm256_div_ps(bf16_load8(s + i), kk));
    else
        for (; i + 8 <= n; i += 8)
            store8(s + i, _mm256_div_ps(load8(s + i), kk));
    return i;
}

static int wire_avx2; /* chosen before main() runs; 0 until then: same bits */

__attribute__((constructor)) static void choose_wire_impl(void)
{
    wire_avx2 = reduce_have_f16c() && __builtin_cpu_supports("avx2");
}
#endif

int reduce_wire_fast(int on)
{
#if defined(__x86_64__)
    int was = wire_avx2;
    wire_avx2 = on && reduce_have_f16c() && __builtin_cpu_supports("avx2");
    return was;
#else
    (void)on;
    return 0;
#endif
}

void reduce_wire_pack(ringd_dtype wire, void *dst, const float *src, size_t n)
{
    size_t i = 0;
#if defined(__x86_64__)
    if (wire_avx2) i = pack8(wire, dst, src, n);
#endif
    pack_portable(wire, (uint16_t *)dst + i, src + i, n - i);
}

void reduce_wire_unpack(ringd_dtype wire, float *dst, const void *src, size_t n)
{
    size_t i = 0;
#if defined(__x86_64__)
    if (wire_avx2) i = unpack8(wire, dst, src, n);
#endif
    unpack_portable(wire, dst + i, (const uint16_t *)src + i, n - i);
}

void reduce_wire_round(ringd_dtype wire, void *dst, float *src, size_t n)
{
    reduce_wire_pack(wire, dst, src, n);
    reduce_wire_unpack(wire, src, dst, n);
}

void reduce_wire_fold(ringd_dtype wire, ringd_op op, void *seg, const float *own, size_t n)
{
    size_t i = 0;
    assert(reduce_wire_check(RINGD_FLOAT32, op, wire) == 0);
#if defined(__x86_64__)
    if (wire_avx2) i = wire_folds8[!is_bf16(wire)][op](seg, own, n);
#endif
    wire_folds[!is_bf16(wire)][op]((uint16_t *)seg + i, own + i, n - i);
}

void reduce_wire_complete(ringd_dtype wire, ringd_op op, void *seg, float *own, size_t n,
                          double divisor)
{
    reduce_wire_fold(wire, op, seg, own, n);
    if (op == RINGD_MEAN || op == RINGD_WMEAN) {
        size_t i = 0;
#if defined(__x86_64__)
        if (wire_avx2) i = divide8(wire, seg, n, (float)divisor);
#endif
        divide_portable(wire, (uint16_t *)seg + i, n - i, (float)divisor);
    }
    reduce_wire_unpack(wire, own, seg, n);
}
