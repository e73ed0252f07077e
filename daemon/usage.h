/*
 * usage.h - what a host spends on a job: the CPU time of the daemon and of
 * its ranks' processes (/proc/PID/stat), and energy in joules, measured by
 * the RAPL counters of the CPU packages (/sys/class/powercap/intel-rapl:N,
 * those named package-N) where this daemon may read them, else estimated
 * as CPU seconds x watts_per_core.
 *
 * RAPL counts the whole package (every process on it, and its idle power);
 * the estimate counts only the CPU time of the daemon and of its ranks. On
 * Linux 5.10 and later energy_uj is readable by root only, so a daemon
 * running as the user ringd estimates unless the file is made readable
 * (docs/ops.md, "Report").
 */
#ifndef RINGD_USAGE_H
#define RINGD_USAGE_H

#include <stdint.h>

#include "proto/summary.h"

#define USAGE_MAX_RAPL 16 /* package domains read */

typedef struct {
    char path[1024]; /* its energy_uj */
    uint64_t last;   /* the last reading, microjoules */
    uint64_t range;  /* max_energy_range_uj: where it wraps */
} usage_rapl;

typedef struct {
    char root[256]; /* where proc/ and sys/ are: "" for the real ones (a test's directory) */
    int n_rapl;     /* package domains readable */
    usage_rapl rapl[USAGE_MAX_RAPL];
    uint64_t rapl_uj;   /* measured since usage_init() */
    double estimated_j; /* estimated since usage_init() */
    uint64_t cpu_us;    /* the CPU time the estimate has counted */
} usage;

/* Finds the RAPL package domains under root ("" or NULL: /) that can be
 * read. Returns how many. */
int usage_init(usage *u, const char *root);

/* The CPU time (user and system) of process pid so far, in microseconds:
 * 0, or -1 if it cannot be read (it is gone). */
int usage_pid_cpu(const usage *u, uint32_t pid, uint64_t *us);

/* The CPU time of this process so far, in microseconds. */
uint64_t usage_self_cpu(void);

/* A sample, about once a second: reads the RAPL counters (each wraps at
 * its range), and counts the CPU time used since the last sample,
 * cpu_us_total (a total that only grows: the daemon's and every rank's)
 * minus what was counted, at watts_per_core. */
void usage_sample(usage *u, uint64_t cpu_us_total, double watts_per_core);

/* Where the energy comes from with watts_per_core w: RAPL when readable,
 * else the estimate (NONE if w is 0). */
summary_energy usage_source(const usage *u, double w);

/* Joules since usage_init() from that source. */
double usage_joules(const usage *u, double w);

#endif /* RINGD_USAGE_H */
