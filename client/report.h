/*
 * report.h - the ring's report as a client sees it: every host's summary
 * fetched from one daemon (REPORT_REQ), one row per rank, and what follows
 * from them: the job's wall time, its useful work, the speedup and
 * efficiency that work reached (useful work / wall time: 40 s of work done
 * in 16 s is a speedup of 2.5, and 2.5 / 4 = 62% on four ranks) and who
 * made the others wait most. Internal to libringd
 * (ringd_report_json()) and ringctl (ringctl_report.c), which both build it
 * in: not installed, not exported.
 */
#ifndef RINGD_CLIENT_REPORT_H
#define RINGD_CLIENT_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "proto/msg.h"
#include "proto/summary.h"

#define REPORT_TIMEOUT_MS 10000
#define REPORT_LATE_US 1000 /* coming last by less is not named */

/* One rank: what its host's summary says of it. */
typedef struct {
    int rank;       /* its global rank */
    int local_rank; /* on its host */
    int host;       /* index into report_view.hosts */
    uint32_t pid;
    int connected, failing;
    summary_times life, window;
    uint64_t late_us, late_calls, cpu_us;
    int n_spans;
    summary_span spans[SUMMARY_MAX_SPANS];
} report_rank;

typedef struct {
    char name[MSG_MAX_NAME + 1];
    int index;              /* its place in the ring */
    int reported;           /* a summary of it has arrived */
    uint64_t at_us, job_us; /* when its summary was made; when its job began (0: none) */
    double age_s;           /* how old its summary was when the answer was made */
    double daemon_cpu_s, ranks_cpu_s, energy_j;
    summary_energy energy;
    double watts_per_core; /* ESTIMATED */
    int local_size, connected;
} report_host;

/* Lifetime or window figures of the whole ring. */
typedef struct {
    double wall_s;   /* the longest rank's time: compute + wait + transfer + failure */
    double useful_s; /* every rank's compute */
    double wait_s, transfer_s, failure_s;
    double speedup;    /* useful_s / wall_s */
    double efficiency; /* speedup / ranks */
} report_totals_view;

typedef struct {
    char cluster[MSG_MAX_NAME + 1];
    int n_hosts, me; /* hosts configured; the host asked */
    uint64_t now_us; /* the asked daemon's clock */
    double window_s;
    report_host *hosts; /* n_hosts, ring order */
    report_rank *ranks; /* n_ranks, by rank */
    int n_ranks;
    report_totals_view life, window;
    int waited_most; /* index into ranks of the rank that came last longest in all, or -1 */
    double energy_j;
    const char *energy_source; /* "rapl", "estimated", "mixed" or "none" */
    double daemon_cpu_s, ranks_cpu_s;
} report_view;

/* Asks the daemon at path for the report and fills *out (report_free()).
 * Returns 0, or a RINGD_E* code with the message in err. */
int report_fetch(const char *path, report_view *out, char *err, size_t errlen);

/* Adds one REPORT message to *v (as report_fetch() does for each): 0, or
 * RINGD_EPROTO with the reason in err. Then report_finish() sorts and adds
 * up. For tests that make their own messages. */
int report_add(report_view *v, const msg_report *m, char *err, size_t errlen);
void report_finish(report_view *v);

void report_free(report_view *v);

/* The report as one JSON object (what ringctl report --json prints and
 * ringd.report() returns), malloc'd; NULL if out of memory. */
char *report_json(const report_view *v);

/* "allreduce", or "call" for a kind it does not know. */
const char *report_kind_name(int kind);

#endif /* RINGD_CLIENT_REPORT_H */
