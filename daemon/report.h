/*
 * report.h - where every rank of the ring spends its time, for ringctl
 * report: this host's summary (its ranks' accounting, account.h; its CPU
 * time and energy, usage.h) and the latest summary of every other host.
 *
 * The daemons exchange their summaries round the ring (PROTOCOL.md,
 * "Summaries"): each sends its own to its right neighbour once a second while
 * it has ranks (at once when its last rank leaves, or one starts or stops
 * failing; else every 10 s),
 * and each host keeps, per host and part, the newest it has seen and sends
 * it on; a summary that is not newer (its own, come round) stops. A
 * summary that breaks the rules, or does not fit this host's configuration,
 * is dropped with a line in the log saying why, and not sent on.
 *
 * Owned by main.c: it lives across engines (a reload that re-forms the
 * ring keeps each rank's job and totals).
 */
#ifndef RINGD_REPORT_H
#define RINGD_REPORT_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "account.h"
#include "config/config.h"
#include "proto/msg.h"
#include "proto/summary.h"

#define REPORT_INTERVAL_MS 1000 /* this host's summary, while it has ranks */
#define REPORT_IDLE_MS 10000    /* ... and without */

typedef struct report report;

/* What the report needs from its owner. */
typedef struct {
    /* Sends part p of this host's summary, or another's passing through, to
     * the right neighbour (engine_send_report()); may fail quietly. */
    void (*send)(void *data, const summary_part *p);
    /* This host's first rank in the ring as it is now. */
    int (*first_rank)(void *data);
} report_ops;

/* For host me of c (c must outlive it; report_set_config() changes it). */
int report_new(report **out, uv_loop_t *loop, const cfg *c, int me, const report_ops *ops,
               void *data);

/* Closes its timer; frees it from the loop. */
void report_close(report *r);

/* A reload: c replaces the configuration. A changed shape (hosts, this
 * host's place or local ranks) drops what is known of the other hosts and
 * returns RINGD_EINVAL: the owner makes a new report. */
int report_set_config(report *r, const cfg *c, int me);

/* What the local sessions do (local.c): a process (pid) takes local rank
 * lr, leaves it, submits a call of kind (ringd_coll), gets its result. */
void report_connect(report *r, int lr, uint32_t pid);
void report_disconnect(report *r, int lr);
void report_submit(report *r, int lr, uint8_t kind);
void report_result(report *r, int lr, const account_call *c);

/* A summary part from the left neighbour (decoded; its layout is sound):
 * kept and sent on if it is newer than the one kept; dropped with a
 * logged reason if it breaks the rules. Returns 1 (kept and sent on), 0
 * (not newer, or this host's own) or -1 (dropped; why says why). */
int report_receive(report *r, const summary_part *p, char *why, size_t len);

/* The answer to a REPORT_REQ: calls put(data, m) for each of its messages,
 * in order (m->index of m->count), this host's parts made now. */
void report_answer(report *r, uint64_t id, void (*put)(void *data, const msg_report *m),
                   void *data);

/* Part `part` of this host's summary as of now. */
void report_build(report *r, int part, summary_part *out);

/* The Prometheus figures of this host (metrics.c): totals since the daemon
 * started, which never go back. */
typedef struct {
    int rank; /* its global rank now */
    double compute_s, wait_s, transfer_s, failure_s;
    uint64_t calls, failed;
} report_rank_total;

typedef struct {
    int n;                          /* local ranks */
    const report_rank_total *ranks; /* n of them; valid until the next call */
    summary_energy energy;
    double energy_j; /* since the daemon started */
    double daemon_cpu_s, ranks_cpu_s;
} report_totals;

void report_get_totals(report *r, report_totals *out);

#endif /* RINGD_REPORT_H */
