/*
 * account.h - where each local rank's time goes, for ringctl report and the
 * metrics: computing, waiting for the other ranks, transferring, failing.
 *
 * A rank's time in a job is cut into intervals between its events (it
 * connects, submits a call, gets a result, disconnects), and each interval
 * goes to one kind, so that the kinds add up to its time in the job:
 *   compute   from a result (or its connection) to its next submission: the
 *             useful work between collectives;
 *   wait      in a call, until the last rank of the ring submitted it
 *             (account_call.last_ns: the ranks that were late made it);
 *   transfer  in a call, from then to its result;
 *   failure   from a failed call (or a process that died in one) to the
 *             next successful call, whatever the rank did in between.
 * With several calls outstanding, a call's interval starts at the result of
 * the one before it, so no time counts twice. A call still running counts
 * when it ends.
 *
 * A job begins when a rank connects while none of this host's ranks is, but
 * for a restart after a failure: a rank that connects within
 * ACCOUNT_RECOVER_NS of the last one leaving, when one of them was failing
 * or the ring is recovering (ranks of other hosts are failing: the process
 * that left was missed), continues the job, and the time between is
 * failure.
 *
 * Besides each job's figures, totals since the daemon started (for the
 * Prometheus counters) and the last ACCOUNT_WINDOW_S whole seconds and the
 * current one, in buckets of a second. Pure: every time (uv_hrtime() nanoseconds) comes from the
 * caller, so a test drives it with a clock of its own.
 */
#ifndef RINGD_ACCOUNT_H
#define RINGD_ACCOUNT_H

#include <stdint.h>

#include "proto/summary.h"

#define ACCOUNT_WINDOW_S 60               /* the window: the last minute */
#define ACCOUNT_BUCKETS 64                /* seconds kept, more than the window */
#define ACCOUNT_SPANS SUMMARY_MAX_SPANS   /* recent calls kept per rank */
#define ACCOUNT_LATE_NS 1000000ull        /* coming last by less is noise */
#define ACCOUNT_RECOVER_NS 60000000000ull /* a restart after a failure within this */

/* Nanoseconds of each kind, and the calls that ended. */
typedef struct {
    uint64_t compute, wait, transfer, failure;
    uint64_t calls, failed, bytes; /* bytes of the calls that did not fail */
} account_times;

/* A recent call: its interval and how much of it was waiting. */
typedef struct {
    uint64_t start, dur, wait;
    uint8_t kind; /* ringd_coll */
    uint8_t failed;
} account_span;

/* How a call ended, for account_result(). */
typedef struct {
    uint64_t last_ns; /* when the last rank of the ring submitted it, as far as
                         this host knows; 0: not known (all of it is transfer) */
    uint64_t late_ns; /* this rank submitted it last in the ring, this long after the first */
    uint64_t bytes;
    int status; /* 0 or a RINGD_E* code */
    uint8_t kind;
} account_call;

typedef struct {
    account_times life, total;
    account_times bucket[ACCOUNT_BUCKETS];
    uint64_t bucket_id[ACCOUNT_BUCKETS]; /* the second + 1 each bucket holds; 0: none */
    uint64_t late_ns, late_calls;
    account_span spans[ACCOUNT_SPANS]; /* a ring: the latest at (n_spans - 1) % */
    uint64_t n_spans;
    uint64_t mark; /* the time accounted up to */
    int connected, failing, outstanding;
    uint8_t kind; /* of the oldest call outstanding */
    uint32_t pid;
    int32_t ever; /* a process held it in this job */
} account_rank;

typedef struct {
    int n;
    account_rank *ranks;
    uint64_t job_ns;  /* when the current job began; 0: none yet */
    uint64_t left_ns; /* when the last connected rank left */
    uint64_t jobs;    /* jobs begun */
} account;

/* What account_read() tells of a rank now, open intervals included: a rank
 * computing or failing since its last event counts up to now. */
typedef struct {
    account_times life, window, total;
    uint64_t late_ns, late_calls;
    int connected, failing, ever;
    uint32_t pid;
    int n_spans; /* oldest first */
    account_span spans[ACCOUNT_SPANS];
} account_view;

/* For n local ranks: 0 or RINGD_ENOMEM. account_free() releases it. */
int account_init(account *a, int n);
void account_free(account *a);

/* Local rank lr's process (pid) connected at now; recovering: ranks of
 * other hosts are failing now. Returns 1 when this began a new job (every
 * rank's job figures start again), else 0. */
int account_connect(account *a, int lr, uint64_t now, uint32_t pid, int recovering);
/* Its process disconnected: a call still outstanding failed with it. */
void account_disconnect(account *a, int lr, uint64_t now);
/* It submitted a call of kind (ringd_coll). */
void account_submit(account *a, int lr, uint64_t now, uint8_t kind);
/* Its oldest outstanding call ended (its result went back) at now. */
void account_result(account *a, int lr, uint64_t now, const account_call *c);

void account_read(const account *a, int lr, uint64_t now, account_view *out);

#endif /* RINGD_ACCOUNT_H */
