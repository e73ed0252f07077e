/*
 * summary-internal.h - the body codec of summary.h, for frame.c (REPORT)
 * and msg.c (REPORT). Internal to proto/.
 */
#ifndef RINGD_PROTO_SUMMARY_INTERNAL_H
#define RINGD_PROTO_SUMMARY_INTERNAL_H

#include "proto/bytes.h"
#include "proto/summary.h"

/* Appends p (its n ranks, each with its n_spans spans). */
void summary_put(bytes_writer *w, const summary_part *p);

/* Reads a part: the reader goes bad on a count over its limit (n over
 * SUMMARY_MAX_RANKS, n_spans over SUMMARY_MAX_SPANS) or missing bytes. */
void summary_get(bytes_reader *r, summary_part *p);

#endif /* RINGD_PROTO_SUMMARY_INTERNAL_H */
