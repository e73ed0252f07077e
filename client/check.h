/*
 * check.h - the data of ringctl's collective commands: what each rank
 * submits, what the collective of all ranks must give, and the comparison of
 * the two.
 *
 * Rank r's element i is a small integer that depends only on (r, i), so every
 * rank computes the expected result of all ranks by itself, and every sum,
 * product, minimum and maximum is exact in every dtype (sums of n ranks stay
 * within 3n: exact in bfloat16 up to 85 ranks, in float16 up to 682). MEAN
 * divides the exact sum once, in float32 for the half types, like the daemon's
 * reduce_finish(). The half conversions here are written independently of the
 * daemon's kernels on purpose: this is the check of those kernels.
 *
 * ringctl runs every collective in place (ringd_collective.input NULL), so
 * one buffer starts as `init` and must end as `want`:
 *   ALLREDUCE       count elements: rank's input; want: their reduction
 *   BROADCAST       count elements: root's input on the root, CHECK_UNSET
 *                   elsewhere; want: root's input
 *   ALLGATHER       n x count elements: rank's input in block `rank`,
 *                   CHECK_UNSET in the others; want: every rank's input
 *   REDUCE_SCATTER  n x count elements: rank's input; want: block `rank` of
 *                   the reduction, count elements, at the start of the buffer
 *   BARRIER         nothing
 */
#ifndef RINGD_CLIENT_CHECK_H
#define RINGD_CLIENT_CHECK_H

#include <stddef.h>

#include "ringd.h"

/* What a buffer holds where no rank's data has arrived yet: outside the range
 * of every input, exact in every dtype. */
#define CHECK_UNSET 99

/* One collective as one rank runs it. */
typedef struct {
    ringd_coll kind;
    ringd_dtype dtype;
    ringd_op op;  /* ALLREDUCE, REDUCE_SCATTER; WMEAN weighs rank r by r + 1 */
    int root;     /* BROADCAST */
    int rank, n;  /* this rank, and the number of ranks */
    size_t count; /* as in ringd_collective: per rank for ALLGATHER, REDUCE_SCATTER */
} check_case;

/* Elements of the buffer: n x count for ALLGATHER and REDUCE_SCATTER, else
 * count (0 for BARRIER). The caller makes sure that it fits in a size_t. */
size_t check_buf_len(const check_case *k);

/* Elements of the result: n x count for ALLGATHER, else count. */
size_t check_want_len(const check_case *k);

/* Fills init[0..check_buf_len) with what the rank submits and
 * want[0..check_want_len) with what it must get back. */
void check_fill_case(const check_case *k, void *init, void *want);

/* The ALLREDUCE case of check_fill_case(): in[0..count) gets rank's input and
 * want[0..count) the allreduce of all n ranks' inputs under op. */
void check_fill(ringd_dtype t, ringd_op op, int rank, int n, size_t count, void *in, void *want);

/* The first index where got and want hold different values (+0 equals -0),
 * or count if none does. */
size_t check_first_wrong(ringd_dtype t, const void *got, const void *want, size_t count);

/* Element i of buf as text ("-3", "1.5"), for a mismatch report. */
void check_show(ringd_dtype t, const void *buf, size_t i, char *out, size_t len);

#endif /* RINGD_CLIENT_CHECK_H */
