/*
 * reduce-internal.h - the two float16 implementations behind reduce.h,
 * and the two behind reduce_wire.h.
 *
 * reduce_apply() and reduce_finish() run the F16C kernels when the CPU has
 * F16C and AVX (checked once, when the program loads) and the portable ones
 * otherwise. Both must give the same bits for every input, NaNs included; the
 * tests call each one directly to check that. Nothing else should need this.
 * (What reduce.c and reduce_wire.c share is reduce-kernel.h.)
 */
#ifndef RINGD_REDUCE_INTERNAL_H
#define RINGD_REDUCE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "reduce.h"

typedef enum {
    REDUCE_F16_PORTABLE, /* plain C, any CPU */
    REDUCE_F16_F16C,     /* x86-64 with F16C and AVX */
} reduce_f16_impl;

/* 1 if impl can run on this CPU (REDUCE_F16_PORTABLE always can), else 0. */
int reduce_f16_available(reduce_f16_impl impl);

/* reduce_apply() and reduce_finish() for RINGD_FLOAT16 with a chosen
 * implementation, which must be available; op must pass reduce_check(). */
void reduce_f16_apply(reduce_f16_impl impl, ringd_op op, uint16_t *dst, const uint16_t *src,
                      size_t count);
void reduce_f16_finish(reduce_f16_impl impl, ringd_op op, uint16_t *buf, size_t count,
                       double divisor);

/* The wire-type kernels (reduce_wire.h) use AVX2 and F16C when the CPU has
 * both, else portable loops that give the same bits. on 0 forces the
 * portable ones, for tests; returns whether the fast ones were on. */
int reduce_wire_fast(int on);

#endif /* RINGD_REDUCE_INTERNAL_H */
