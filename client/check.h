/*
 * check.h - the data of `ringctl allreduce`: what each rank submits, what
 * the allreduce of all ranks must give, and the comparison of the two.
 *
 * Rank r's element i is a small integer that depends only on (r, i), so every
 * rank computes the expected result of all ranks by itself, and every sum,
 * product, minimum and maximum is exact in every dtype (sums of n ranks stay
 * within 3n: exact in bfloat16 up to 85 ranks, in float16 up to 682). MEAN
 * divides the exact sum once, in float32 for the half types, like the daemon's
 * reduce_finish(). The half conversions here are written independently of the
 * daemon's kernels on purpose: this is the check of those kernels.
 */
#ifndef RINGD_CLIENT_CHECK_H
#define RINGD_CLIENT_CHECK_H

#include <stddef.h>

#include "ringd.h"

/* Fills in[0..count) with rank's input and want[0..count) with the
 * allreduce of all n ranks' inputs under op. */
void check_fill(ringd_dtype t, ringd_op op, int rank, int n, size_t count, void *in, void *want);

/* The first index where got and want hold different values (+0 equals -0),
 * or count if none does. */
size_t check_first_wrong(ringd_dtype t, const void *got, const void *want, size_t count);

/* Element i of buf as text ("-3", "1.5"), for a mismatch report. */
void check_show(ringd_dtype t, const void *buf, size_t i, char *out, size_t len);

#endif /* RINGD_CLIENT_CHECK_H */
