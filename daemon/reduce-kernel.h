/*
 * reduce-kernel.h - what the reduction loops of reduce.c (reduce_apply()
 * and its kernels) and reduce_wire.c (the narrow wire types) are built
 * from: the block size, the operators, the float16 and bfloat16
 * conversions, and float16 eight at a time with F16C.
 *
 * Everything here is static inline or a macro, so that it sits in the loops
 * of each file that includes it: the loops vectorise only if nothing in
 * their body is a call.
 *
 * GCC at -O2 only vectorises a loop when the vector code replaces the scalar
 * code entirely, that is when the trip count is a known multiple of the vector
 * width. The kernels therefore walk the buffers in blocks of BLOCK_BYTES with
 * an inner loop of constant count, which becomes straight vector code, and
 * finish the last partial block one element at a time.
 *
 * float16 and bfloat16 are computed in float32 and rounded back to nearest
 * even; the kernels store a NaN result as the default quiet NaN (half_store(),
 * bf16_store(); reduce.c says why). The float16 converters round exactly like
 * VCVTPS2PH and VCVTPH2PS, NaN payloads included, so the portable loops and
 * the F16C ones give the same bits. IEEE semantics are required (no
 * -ffast-math), and the default rounding mode (to nearest) is assumed, as in
 * any float code. Only reduce.c and reduce_wire.c include this.
 */
#ifndef RINGD_REDUCE_KERNEL_H
#define RINGD_REDUCE_KERNEL_H

#include <stdint.h>
#include <string.h>

#if defined(__FAST_MATH__)
#error "the reduction kernels rely on IEEE NaN and rounding semantics: build without -ffast-math"
#endif

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* Bytes per block of the vectorised loops: four SSE vectors, two AVX ones.
 * Unrolling the inner loop completely leaves one loop of straight vector code
 * instead of two nested ones. */
#define BLOCK_BYTES 64
#define UNROLL_BLOCK _Pragma("GCC unroll 64")

#define HALF_DEFAULT_NAN 0x7E00
#define BF16_DEFAULT_NAN 0x7FC0

/* ---- Conversions ------------------------------------------------------- */

static inline uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float float_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* c ? x : y, computed with masks. With ?: GCC moves the float operations
 * that only one case needs into a branch, and then may not vectorise the loop
 * because it must not execute a float operation (which could trap) that the
 * branch skips. */
static inline uint32_t pick(int c, uint32_t x, uint32_t y)
{
    uint32_t mask = 0u - (uint32_t)c;
    return (x & mask) | (y & ~mask);
}

/* The float16 converters match VCVTPH2PS and VCVTPS2PH bit for bit, NaN
 * payloads included, on every input (the tests compare them). They compute
 * every case and pick one, without branches, so that the kernels vectorise.
 *
 * All converters here pass 16-bit values in uint32_t: given uint16_t, GCC
 * computes what fits in 16-bit vector lanes and then spends more instructions
 * widening and narrowing lanes than on the arithmetic. */
static inline float half_to_float(uint32_t h)
{
    uint32_t sign = (h & 0x8000) << 16;
    uint32_t em = h & 0x7FFF; /* exponent and mantissa */

    /* Normal: move into place and rebias the exponent from 15 to 127. */
    uint32_t normal = (em << 13) + ((127u - 15) << 23);
    /* Infinity, or a NaN made quiet with its payload kept. */
    uint32_t special = em << 13 | 0x7F800000 | (em > 0x7C00 ? 0x00400000 : 0);
    /* Zero or subnormal: em units of 2^-24, exact in float32. */
    uint32_t small = float_bits((float)(int32_t)em * 0x1p-24f);

    return float_from_bits(sign | pick(em < 0x0400, small, pick(em >= 0x7C00, special, normal)));
}

static inline uint32_t float_to_half(float f)
{
    uint32_t x = float_bits(f);
    uint32_t sign = x >> 16 & 0x8000;
    uint32_t a = x & 0x7FFFFFFF;

    /* NaN: made quiet, the top of the payload kept. */
    uint32_t nan = 0x7E00 | (a >> 13 & 0x3FF);
    /* Normal half (2^-14 and up): rebias the exponent, then round the 13
     * dropped mantissa bits to nearest even; a carry into the exponent gives
     * the correct next binade, or infinity from 65520 (halfway between the
     * largest half, 65504, and 2^16) up. From 2^16 up the exponent would run
     * past infinity's, so those get infinity explicitly. */
    uint32_t normal = (a - ((127u - 15) << 23) + 0x0FFF + (a >> 13 & 1)) >> 13;
    /* Subnormal half or zero: adding 0.5, whose last mantissa bit is worth
     * 2^-24 like a subnormal half's, rounds a to a multiple of 2^-24 (to
     * nearest even, the default rounding mode that all of reduce.c assumes),
     * and leaves that multiple in the low bits. */
    uint32_t small = float_bits(float_from_bits(a) + 0.5f) - 0x3F000000;

    uint32_t h = pick(a >= 0x38800000, normal, small);
    h = pick(a >= 0x47800000, 0x7C00, h);
    h = pick(a > 0x7F800000, nan, h);
    return sign | h;
}

static inline float bf16_to_float(uint32_t h)
{
    return float_from_bits(h << 16);
}

/* Rounds the bits of a float that is not NaN to bfloat16, nearest even, and
 * leaves the result in the top 16 bits (the low 16 are garbage). An overflow
 * of the mantissa carries into the exponent, up to infinity. */
static inline uint32_t bf16_round(uint32_t x)
{
    return x + 0x7FFF + (x >> 16 & 1);
}

static inline uint32_t float_to_bf16(float f)
{
    uint32_t x = float_bits(f);

    /* A NaN is made quiet: truncating a payload in the low bits only would
     * otherwise turn it into infinity. */
    if ((x & 0x7FFFFFFF) > 0x7F800000) return x >> 16 | 0x0040;
    return bf16_round(x) >> 16;
}

/* The kernels' rounding: NaN becomes the default NaN, see the top. */
static inline uint32_t half_store(float f)
{
    return pick(f != f, HALF_DEFAULT_NAN, float_to_half(f));
}

static inline uint32_t bf16_store(float f)
{
    return pick(f != f, BF16_DEFAULT_NAN, bf16_round(float_bits(f)) >> 16);
}

/* ---- Operators --------------------------------------------------------- */

/* Operators. FMIN and FMAX give NaN if either operand is NaN. */
#define ADD(a, b) ((a) + (b))
#define MUL(a, b) ((a) * (b))
#define IMIN(a, b) ((a) < (b) ? (a) : (b))
#define IMAX(a, b) ((a) > (b) ? (a) : (b))
#define FMIN(a, b) ((a) < (b) || (a) != (a) ? (a) : (b))
#define FMAX(a, b) ((a) > (b) || (a) != (a) ? (a) : (b))

/* ---- float16 with F16C, eight at a time ------------------------------- */

#if defined(__x86_64__)
#define F16C_TARGET __attribute__((target("f16c,avx")))

F16C_TARGET static inline __m256 load8(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}

/* Rounds to nearest even like float_to_half(), then replaces NaNs by the
 * default NaN like half_store(). */
F16C_TARGET static inline void store8(uint16_t *p, __m256 x)
{
    __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
    __m128i nan = _mm_cmpgt_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7FFF)), _mm_set1_epi16(0x7C00));

    h = _mm_blendv_epi8(h, _mm_set1_epi16(HALF_DEFAULT_NAN), nan);
    _mm_storeu_si128((__m128i *)(void *)p, h);
}

/* MINPS and MAXPS return b when either operand is NaN, which is FMIN/FMAX
 * except when a is the NaN; or-ing the unordered mask turns those lanes into
 * all-ones, a NaN. */
#define V_ADD(a, b) _mm256_add_ps(a, b)
#define V_MUL(a, b) _mm256_mul_ps(a, b)
#define V_MIN(a, b) _mm256_or_ps(_mm256_min_ps(a, b), _mm256_cmp_ps(a, b, _CMP_UNORD_Q))
#define V_MAX(a, b) _mm256_or_ps(_mm256_max_ps(a, b), _mm256_cmp_ps(a, b, _CMP_UNORD_Q))

/* 1 if this CPU can run the F16C loops, else 0 (reduce.c). */
int reduce_have_f16c(void);
#endif /* __x86_64__ */

#endif /* RINGD_REDUCE_KERNEL_H */
