/*
 * crc32c.c - CRC-32C, with the SSE4.2 instruction where the CPU has it.
 */
#include "crc32c.h"

#include <string.h>

#define POLY 0x82f63b78u /* Castagnoli, reflected */

static uint32_t table[8][256];

/* Built before main(): no thread or lazy-init question later. */
__attribute__((constructor)) static void build_table(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
}

uint32_t crc32c_portable(uint32_t crc, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    crc = ~crc;
    while (len >= 8) {
        /* The first byte is the lowest: read the word little-endian
         * whatever this CPU's byte order. */
        uint64_t w = (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 |
                     (uint64_t)p[3] << 24 | (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 |
                     (uint64_t)p[6] << 48 | (uint64_t)p[7] << 56;
        w ^= crc;
        crc = table[7][w & 0xff] ^ table[6][(w >> 8) & 0xff] ^ table[5][(w >> 16) & 0xff] ^
              table[4][(w >> 24) & 0xff] ^ table[3][(w >> 32) & 0xff] ^ table[2][(w >> 40) & 0xff] ^
              table[1][(w >> 48) & 0xff] ^ table[0][w >> 56];
        p += 8;
        len -= 8;
    }
    while (len--)
        crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
    return ~crc;
}

#if defined(__x86_64__)
#include <nmmintrin.h>

/*
 * The crc32 instruction takes 3 cycles and can start one per cycle, so
 * three independent CRCs over three consecutive blocks run at three times
 * the speed of one; the three are then combined. The CRC register is
 * linear: running over B from register r gives shift(r, |B|) ^ crc(B from
 * 0), where shift(r, n) appends n zero bytes, a fixed 32x32 bit matrix for
 * a fixed n, applied here through four byte tables (as in Mark Adler's
 * crc32c.c, and zlib's crc32_combine()).
 */
#define LONG_BLOCK 8192
#define SHORT_BLOCK 256

static uint32_t shift_long[4][256], shift_short[4][256];

static uint32_t matrix_times(const uint32_t *mat, uint32_t vec)
{
    uint32_t sum = 0;
    for (; vec; vec >>= 1, mat++)
        if (vec & 1) sum ^= *mat;
    return sum;
}

static void matrix_square(uint32_t *square, const uint32_t *mat)
{
    for (int n = 0; n < 32; n++)
        square[n] = matrix_times(mat, mat[n]);
}

/* Tables of the operator that appends len zero bytes (len a power of 2). */
static void build_shift(uint32_t zeros[4][256], size_t len)
{
    uint32_t op[32], tmp[32];
    op[0] = POLY; /* one zero bit */
    for (int n = 1; n < 32; n++)
        op[n] = 1u << (n - 1);
    for (size_t bits = 1; bits < len * 8; bits <<= 1) {
        matrix_square(tmp, op);
        memcpy(op, tmp, sizeof op);
    }
    for (int b = 0; b < 4; b++)
        for (uint32_t v = 0; v < 256; v++)
            zeros[b][v] = matrix_times(op, v << (8 * b));
}

static inline uint32_t shift(uint32_t zeros[4][256], uint32_t crc)
{
    return zeros[0][crc & 0xff] ^ zeros[1][(crc >> 8) & 0xff] ^ zeros[2][(crc >> 16) & 0xff] ^
           zeros[3][crc >> 24];
}

__attribute__((target("sse4.2"))) static uint64_t crc_words(uint64_t c, const uint8_t *p,
                                                            size_t words)
{
    for (size_t i = 0; i < words; i++) {
        uint64_t w;
        memcpy(&w, p + 8 * i, 8);
        c = _mm_crc32_u64(c, w);
    }
    return c;
}

/* Three blocks of `block` bytes at p, from register c; returns the register. */
__attribute__((target("sse4.2"))) static uint32_t crc_three(uint32_t c, const uint8_t *p,
                                                            size_t block, uint32_t zeros[4][256])
{
    uint64_t c0 = c, c1 = 0, c2 = 0;
    for (size_t i = 0; i < block; i += 8) {
        uint64_t w0, w1, w2;
        memcpy(&w0, p + i, 8);
        memcpy(&w1, p + block + i, 8);
        memcpy(&w2, p + 2 * block + i, 8);
        c0 = _mm_crc32_u64(c0, w0);
        c1 = _mm_crc32_u64(c1, w1);
        c2 = _mm_crc32_u64(c2, w2);
    }
    return shift(zeros, shift(zeros, (uint32_t)c0) ^ (uint32_t)c1) ^ (uint32_t)c2;
}

__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(uint32_t crc, const void *buf,
                                                               size_t len)
{
    const uint8_t *p = buf;
    uint32_t c = ~crc;
    for (; len >= 3 * LONG_BLOCK; p += 3 * LONG_BLOCK, len -= 3 * LONG_BLOCK)
        c = crc_three(c, p, LONG_BLOCK, shift_long);
    for (; len >= 3 * SHORT_BLOCK; p += 3 * SHORT_BLOCK, len -= 3 * SHORT_BLOCK)
        c = crc_three(c, p, SHORT_BLOCK, shift_short);
    c = (uint32_t)crc_words(c, p, len / 8);
    p += len / 8 * 8;
    for (len %= 8; len--;)
        c = _mm_crc32_u8(c, *p++);
    return ~c;
}

int crc32c_hardware(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2");
}

static int use_hw;

__attribute__((constructor)) static void pick(void)
{
    use_hw = crc32c_hardware();
    build_shift(shift_long, LONG_BLOCK);
    build_shift(shift_short, SHORT_BLOCK);
}

uint32_t crc32c(uint32_t crc, const void *buf, size_t len)
{
    return use_hw ? crc32c_sse42(crc, buf, len) : crc32c_portable(crc, buf, len);
}
#else
int crc32c_hardware(void)
{
    return 0;
}

uint32_t crc32c(uint32_t crc, const void *buf, size_t len)
{
    return crc32c_portable(crc, buf, len);
}
#endif
