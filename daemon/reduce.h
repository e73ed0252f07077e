/*
 * reduce.h - elementwise reduction kernels, one per (dtype, op).
 *
 * The loops are written to vectorise; float16 goes through F16C when the CPU
 * has it (checked once at run time), bfloat16 through shifts. Half types are
 * reduced in float32 and rounded back to nearest-even after every operation,
 * so the result of one step does not depend on the kernel chosen. A float32
 * collective that travels narrow between hosts is reduce_wire.h's.
 */
#ifndef RINGD_REDUCE_H
#define RINGD_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "ringd.h"

/* 0 if op applies to dtype, RINGD_EINVAL otherwise (MEAN on integer types,
 * unknown values). */
int reduce_check(ringd_dtype dtype, ringd_op op);

/* dst[i] = dst[i] (op) src[i] for i < count. MEAN and WMEAN reduce as SUM;
 * their division is reduce_finish()'s. dst and src must not overlap. */
void reduce_apply(ringd_dtype dtype, ringd_op op, void *dst, const void *src, size_t count);

/* Completes op on a fully reduced buffer: for MEAN (divisor: the number of
 * ranks) and WMEAN (divisor: the sum of the weights), divides every element
 * by divisor, in float32 for float32 and half types (rounded once), in
 * float64 for float64; for other ops, nothing. */
void reduce_finish(ringd_dtype dtype, ringd_op op, void *buf, size_t count, double divisor);

/* buf[i] = buf[i] * factor, for a float dtype (the local weighting of
 * WMEAN); rounding as in reduce_finish(). */
void reduce_scale(ringd_dtype dtype, void *buf, size_t count, double factor);

/* Converters used by the kernels and the tests. */
float reduce_half_to_float(uint16_t h);
uint16_t reduce_float_to_half(float f);
float reduce_bf16_to_float(uint16_t h);
uint16_t reduce_float_to_bf16(float f);

#endif /* RINGD_REDUCE_H */
