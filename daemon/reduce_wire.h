/*
 * reduce_wire.h - the narrow wire types (wire_dtype): a float32 collective
 * travelling between hosts as bfloat16 or float16.
 *
 * A float32 collective may travel between hosts as bfloat16 or float16
 * (`wire`, 2 bytes an element), halving the bytes sent. Segments on the
 * wire are in the wire type; a host's own buffer stays float32. Every hop
 * widens what it receives to float32, combines it with its own value in
 * float32 (own (op) received, as reduce_apply()), and rounds once to the
 * wire type to pass it on; the host completing a chunk also finishes
 * MEAN/WMEAN (dividing the rounded sum in float32 and rounding again), and
 * every host's result is the widened wire value, so every rank gets the
 * same bits. Error bound (docs/user.md, "Wire types"): with N hosts and u = 2^-8
 * (bfloat16) or 2^-11 (float16), |result - exact sum| <= (N + 2) u
 * sum|x_i| (for MEAN, both sides divided by N); float16 overflows to
 * infinity beyond 65504.
 *
 * Elementwise like reduce.h's kernels, and vectorised alike: with AVX2 and
 * F16C when the CPU has both (checked once, at load time), else portable
 * loops that give the same bits.
 */
#ifndef RINGD_REDUCE_WIRE_H
#define RINGD_REDUCE_WIRE_H

#include <stddef.h>

#include "ringd.h"

/* 0 if a collective of dtype and op may travel as wire: float32 only, wire
 * RINGD_BFLOAT16 or RINGD_FLOAT16; RINGD_EINVAL otherwise. */
int reduce_wire_check(ringd_dtype dtype, ringd_op op, ringd_dtype wire);

/* How a collective travels, as a ringd_wire: the requested one
 * (RINGD_WIRE_DEFAULT: config_wire, the daemon's, for float32 allreduce,
 * reduce_scatter and allgather, else none). Returns 0 (as it is),
 * RINGD_WIRE_BFLOAT16 or RINGD_WIRE_FLOAT16, or -1 if a narrow type was
 * asked for a collective that cannot travel so. */
int reduce_wire_of(ringd_coll kind, ringd_dtype dtype, int requested, int config_wire);

/* The element type of a ringd_wire (RINGD_WIRE_BFLOAT16 or _FLOAT16). */
ringd_dtype reduce_wire_type(int wire);

/* dst[i] = src[i] rounded to wire (a host's first send of its own chunk). */
void reduce_wire_pack(ringd_dtype wire, void *dst, const float *src, size_t n);
/* dst[i] = src[i] widened to float32 (an allgather step: the final value). */
void reduce_wire_unpack(ringd_dtype wire, float *dst, const void *src, size_t n);
/* dst = pack(src), then src = unpack(dst): allgather's own block, so that
 * it holds what every other host receives. */
void reduce_wire_round(ringd_dtype wire, void *dst, float *src, size_t n);
/* A reduce-scatter step that is not the last: the received segment seg (in
 * wire) becomes pack(own (op) widen(seg)), ready to send on from seg;
 * own is unchanged. */
void reduce_wire_fold(ringd_dtype wire, ringd_op op, void *seg, const float *own, size_t n);
/* The last reduce-scatter step, which completes this host's chunk: as
 * reduce_wire_fold(), then for MEAN and WMEAN seg = pack(widen(seg) /
 * divisor); then own = widen(seg), and seg is what the allgather sends. */
void reduce_wire_complete(ringd_dtype wire, ringd_op op, void *seg, float *own, size_t n,
                          double divisor);

#endif /* RINGD_REDUCE_WIRE_H */
