/*
 * report_render.h - the report drawn for people: a Chrome trace of every
 * rank's recent calls (chrome://tracing, Perfetto: one row per rank, each
 * call from its start to its result, the wait in it shaded, the compute
 * between calls), and an SVG chart of one stacked bar per rank (compute,
 * wait, transfer, failure). Internal to ringctl.
 */
#ifndef RINGD_CLIENT_REPORT_RENDER_H
#define RINGD_CLIENT_REPORT_RENDER_H

#include <stdio.h>

#include "report.h"

/* Writes the trace, in the JSON Object Format of the Trace Event Format:
 * 0, or -1 if writing failed. */
int report_write_trace(const report_view *v, FILE *f);

/* Writes the chart of the job (window 0) or of the last minute (1): 0, or
 * -1 if writing failed. */
int report_write_svg(const report_view *v, int window, FILE *f);

#endif /* RINGD_CLIENT_REPORT_RENDER_H */
