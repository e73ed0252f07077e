/*
 * crc32c.h - CRC-32C (Castagnoli) of DATA payloads.
 *
 * With SSE4.2 the CPU computes it (the crc32 instruction, 8 bytes at a time:
 * several GB/s, far above any link); elsewhere a slicing-by-8 table does.
 */
#ifndef RINGD_CRC32C_H
#define RINGD_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* CRC-32C of buf[0..len), continuing from crc (0 to start). */
uint32_t crc32c(uint32_t crc, const void *buf, size_t len);

/* The portable version, for tests to compare with. */
uint32_t crc32c_portable(uint32_t crc, const void *buf, size_t len);

/* Whether crc32c() uses the CPU's instruction. */
int crc32c_hardware(void);

#endif /* RINGD_CRC32C_H */
