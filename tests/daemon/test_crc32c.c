/*
 * test_crc32c.c - daemon/crc32c.c: CRC-32C (Castagnoli) as iSCSI (RFC 3720)
 * defines it, the same whether the CPU's instruction or the tables compute
 * it, whole or in pieces, at any length and alignment.
 *
 * The check values come from RFC 3720 B.4 and the CRC catalogue; they do not
 * depend on either implementation.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/crc32c.h"

#define MAX_LEN 300
#define MAX_SHIFT 16 /* start offsets 0..15: every alignment of an 8-byte load */

/* Both implementations, so that every property is checked of each. */
typedef uint32_t (*crc_fn)(uint32_t crc, const void *buf, size_t len);
static const struct {
    const char *name;
    crc_fn fn;
} impls[] = {{"crc32c", crc32c}, {"crc32c_portable", crc32c_portable}};
#define N_IMPLS (sizeof impls / sizeof *impls)

static uint64_t rng = 0x9e3779b97f4a7c15u;

static uint64_t rnd(void)
{
    /* xorshift64*: deterministic, so a failure reproduces. */
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545f4914f6cdd1du;
}

static void rnd_fill(uint8_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = (uint8_t)rnd();
}

/* An exact-size heap copy of src[0..len) that starts shift bytes past an
 * aligned address, so that AddressSanitizer catches a read past its end. The
 * caller frees the returned block, not the pointer stored in *data. */
static uint8_t *shifted_copy(const uint8_t *src, size_t len, size_t shift, const uint8_t **data)
{
    uint8_t *block = malloc(shift + len + 1);

    cr_assert_not_null(block);
    if (len > 0) memcpy(block + shift, src, len);
    *data = block + shift;
    return block;
}

Test(crc32c, of_123456789_is_the_check_value)
{
    for (size_t i = 0; i < N_IMPLS; i++)
        cr_assert_eq(impls[i].fn(0, "123456789", 9), 0xe3069283u, "%s", impls[i].name);
}

Test(crc32c, matches_the_rfc3720_vectors)
{
    uint8_t zeros[32], ones[32], up[32], down[32];

    memset(zeros, 0, sizeof zeros);
    memset(ones, 0xff, sizeof ones);
    for (int i = 0; i < 32; i++) {
        up[i] = (uint8_t)i;
        down[i] = (uint8_t)(31 - i);
    }
    for (size_t i = 0; i < N_IMPLS; i++) {
        cr_assert_eq(impls[i].fn(0, zeros, 32), 0x8a9136aau, "%s: 32 x 0x00", impls[i].name);
        cr_assert_eq(impls[i].fn(0, ones, 32), 0x62a8ab43u, "%s: 32 x 0xff", impls[i].name);
        cr_assert_eq(impls[i].fn(0, up, 32), 0x46dd794eu, "%s: 0x00 .. 0x1f", impls[i].name);
        cr_assert_eq(impls[i].fn(0, down, 32), 0x113fdb5cu, "%s: 0x1f .. 0x00", impls[i].name);
    }
}

Test(crc32c, of_nothing_is_the_crc_it_continues)
{
    for (size_t i = 0; i < N_IMPLS; i++) {
        cr_assert_eq(impls[i].fn(0, "", 0), 0, "%s", impls[i].name);
        cr_assert_eq(impls[i].fn(0xe3069283u, "", 0), 0xe3069283u, "%s", impls[i].name);
        cr_assert_eq(impls[i].fn(0xffffffffu, "", 0), 0xffffffffu, "%s", impls[i].name);
    }
}

Test(crc32c, hardware_equals_portable_at_every_length_and_alignment)
{
    uint8_t src[MAX_LEN];

    /* Without SSE4.2 both are the tables, and this test checks nothing. */
    cr_log_info("crc32c() uses %s", crc32c_hardware() ? "the SSE4.2 instruction" : "the tables");
    rnd_fill(src, sizeof src);
    for (size_t len = 0; len <= MAX_LEN; len++) {
        for (size_t shift = 0; shift < MAX_SHIFT; shift++) {
            const uint8_t *p;
            uint8_t *block = shifted_copy(src, len, shift, &p);
            uint32_t seed = (uint32_t)rnd();

            cr_assert_eq(crc32c(0, p, len), crc32c_portable(0, p, len), "%zu bytes at offset %zu",
                         len, shift);
            cr_assert_eq(crc32c(seed, p, len), crc32c_portable(seed, p, len),
                         "%zu bytes at offset %zu, continuing from %08x", len, shift, seed);
            free(block);
        }
    }
}

/* Long buffers take the three-way path (blocks of 3 x 8 KiB, then 3 x 256 B)
 * and combine the three CRCs: every block boundary, and either side of it. */
Test(crc32c, hardware_equals_portable_on_long_buffers)
{
    static const size_t lens[] = {767,      768,          769,         3 * 8192 - 1,
                                  3 * 8192, 3 * 8192 + 1, 24576 + 768, 2 * 24576 + 775,
                                  262144,   262144 + 64};
    size_t cap = 262144 + 64 + MAX_SHIFT;
    uint8_t *src = malloc(cap);
    cr_assert_not_null(src);
    rnd_fill(src, cap);
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        for (size_t shift = 0; shift < MAX_SHIFT; shift += 3) {
            uint32_t seed = (uint32_t)rnd();
            cr_assert_eq(crc32c(seed, src + shift, lens[i]),
                         crc32c_portable(seed, src + shift, lens[i]), "%zu bytes at offset %zu",
                         lens[i], shift);
        }
    }
    free(src);
}

Test(crc32c, does_not_depend_on_alignment)
{
    uint8_t src[MAX_LEN];

    rnd_fill(src, sizeof src);
    for (size_t i = 0; i < N_IMPLS; i++) {
        for (size_t len = 0; len <= MAX_LEN; len += 7) {
            uint32_t want = impls[i].fn(0, src, len);

            for (size_t shift = 1; shift < MAX_SHIFT; shift++) {
                const uint8_t *p;
                uint8_t *block = shifted_copy(src, len, shift, &p);

                cr_assert_eq(impls[i].fn(0, p, len), want, "%s: %zu bytes at offset %zu",
                             impls[i].name, len, shift);
                free(block);
            }
        }
    }
}

Test(crc32c, of_a_then_b_continues_from_the_crc_of_a)
{
    uint8_t src[MAX_LEN];

    rnd_fill(src, sizeof src);
    for (size_t i = 0; i < N_IMPLS; i++) {
        for (size_t len = 0; len <= MAX_LEN; len += 13) {
            uint32_t whole = impls[i].fn(0, src, len);

            /* Every split point, so pieces of every length meet in every way. */
            for (size_t cut = 0; cut <= len; cut++) {
                uint32_t a = impls[i].fn(0, src, cut);

                cr_assert_eq(impls[i].fn(a, src + cut, len - cut), whole,
                             "%s: %zu bytes cut after %zu", impls[i].name, len, cut);
            }
        }
    }
}

Test(crc32c, tells_apart_buffers_that_differ_in_one_bit)
{
    uint8_t src[64];

    rnd_fill(src, sizeof src);
    for (size_t i = 0; i < N_IMPLS; i++) {
        uint32_t want = impls[i].fn(0, src, sizeof src);

        for (size_t bit = 0; bit < 8 * sizeof src; bit++) {
            src[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            cr_assert_neq(impls[i].fn(0, src, sizeof src), want, "%s: bit %zu flipped",
                          impls[i].name, bit);
            src[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        }
    }
}
