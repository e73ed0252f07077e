/*
 * fuzz.h - what the libFuzzer targets share.
 *
 * Each target gets arbitrary bytes, as a peer, a client or a config file
 * could send them, and must neither crash nor trip a sanitizer. Bodies are
 * copied into buffers of exactly the size the decoders are allowed to read,
 * so that AddressSanitizer catches a read one byte past them.
 */
#ifndef RINGD_FUZZ_H
#define RINGD_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A heap copy of n bytes of p (at least one byte allocated, so that n = 0
 * still gives a pointer to pass), for the caller to free. */
static inline uint8_t *fuzz_copy(const uint8_t *p, size_t n)
{
    uint8_t *c = malloc(n ? n : 1);
    if (c && n) memcpy(c, p, n);
    return c;
}

/* A string field must come back NUL-terminated within its array. */
#define FUZZ_CHECK_STRING(field)                                                                   \
    do {                                                                                           \
        if (!memchr((field), '\0', sizeof(field))) abort();                                        \
    } while (0)

#endif /* RINGD_FUZZ_H */
