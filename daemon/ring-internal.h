/*
 * ring-internal.h - what the ring engine's files share: ring.c (the engine:
 * starting, sending, failing, advancing, the links' up and down, the
 * engine's ops), ring_outcome.c (how collectives end: completion,
 * confirmation, the links' epochs, deadlines) and ring_recv.c (what arrives
 * from the left: checks, reduction, forwarding).
 */
#ifndef RINGD_RING_INTERNAL_H
#define RINGD_RING_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "commit.h"
#include "engine.h"
#include "links.h"
#include "schedule.h"

#define MAX_ACTIVE 64 /* collectives running at once */

/* A running collective: the job's, and where it is in its schedule. */
typedef struct {
    job *job;
    uint32_t epoch; /* the ring epoch it started in */
    schedule sch;
    size_t esize;
    unsigned steps_left; /* steps whose chunk has not fully arrived */
    size_t writes;       /* sends not yet completed by the links */
    int reading;         /* a payload is being read into the job's buffer (or wbuf) */
    /* A job travelling narrow (job.wire): the whole buffer in the wire type,
     * where segments are sent from and received into; esize is then 2 and
     * every offset and length counts wire bytes (the float32 element of wire
     * byte offset o is at job.buf + 2 o). Freed at completion. */
    uint8_t *wbuf;
    size_t wbuf_cap;
    uint64_t *recv_off;  /* per step: the next byte offset expected */
    job_timing t;
    /* Allreduce: per host h, when h's first data from its left neighbour
     * came, relative to h's own start (microseconds; negative: it was
     * waiting). FRAME_DELTA_UNKNOWN until learnt; see name_straggler(). */
    int32_t *delta_us;
} active;

typedef struct {
    engine base;
    uv_loop_t *loop;
    const cfg *cfg; /* the configuration: tuning, and the hosts the links know */
    /* The ring's hosts: the configured ones, or in an elastic ring those of
     * the last membership it was ready in, in ring order. Collectives are
     * cut, numbered and named by it: me and n are this host's place in it
     * and its size; pos is this host's place in the configuration. */
    cfg view;
    int me, n, pos;
    uint64_t members;
    uint32_t members_epoch;
    engine_resize resizes[ENGINE_RESIZES_KEPT]; /* engine_view.resizes */
    int n_resizes;
    links *links;
    jobs q;
    active act[MAX_ACTIVE]; /* running collectives: a circular buffer in seq order */
    int first, n_act;
    uint8_t *staging; /* where reduce-scatter payloads land before reduction */
    size_t staging_cap;
    uint8_t *wire_spare; /* a finished job's wire buffer, kept: a new one of
                            32 MiB would be faulted in page by page */
    size_t wire_spare_cap;
    uint32_t epoch; /* the links' epoch: seqs count from 0 in each */
    /* Confirmation: collectives each host has completed in this epoch, and
     * what each knew every host had, as known here (commit.h). */
    commit_view cv;
    int commit_due;   /* cv changed: a COMMIT goes out before the loop waits */
    uv_idle_t commit; /* sends it */
    const engine_watcher *watcher;
    void *watcher_data;
    engine_report_cb report_cb; /* summaries that arrive (report.h) */
    void *report_data;
    uint64_t gen; /* ranks that left, as this host heard of it */
    int gone;     /* a rank left and the ring waits for it */
    char gone_why[FRAME_MAX_TEXT + 1];
    uint32_t settled; /* the epoch of the last lap that settled: older collectives are settled */
    uint64_t last_tick;   /* of the deadline tick (jobs_stalled()) */
    uint32_t ready_epoch; /* the last epoch the ring was ready in */
    /* The first frame of a collective not started here: when it came. */
    int early_set;
    uint32_t early_epoch;
    uint64_t early_seq, early_ns;
    uint8_t early_kind;
    int advancing, closing;
    void (*done_cb)(void *);
    void *done_data;
} ring;

int ring_mod(int x, int n);
/* The ring is made of the configured hosts in members from now on. */
void ring_set_view(ring *r, uint64_t members, uint32_t members_epoch);
active *ring_slot(ring *r, int k);
/* The running collective (epoch, seq), or NULL. */
active *ring_find_active(ring *r, uint32_t epoch, uint64_t seq);
/* A neighbour's name: side -1 left, +1 right. */
const char *ring_neighbour(const ring *r, int side);
/* Ranks of host h, for messages: "rank 3" or "ranks 2-3". */
void ring_host_ranks(const ring *r, int h, char *out, size_t len);
/* Byte offset and length of chunk c of a's buffer. */
void ring_chunk_range(const ring *r, const active *a, int c, uint64_t *off, uint64_t *len);
uint64_t ring_chunk_len(const ring *r, const active *a, int c);
/* Wire types: the float32 elements of a's buffer at wire byte offset pos. */
float *ring_wire_own(const active *a, uint64_t pos);
/* Queues one segment of a's step g (chunk c) for the right neighbour. */
void ring_send_segment(ring *r, active *a, int g, int c, uint64_t off, uint32_t len, double wsum,
                       int32_t delta_us);
/* Drops both links after a failure that may leave frames half sent or read. */
void ring_drop_links(ring *r);
/* Whether collectives may start: the ring is ready and none of an older
 * epoch still runs. */
int ring_up(ring *r);
/* Starts the first waiting job (ring_advance() decides when). */
void ring_start_next(ring *r);
/* Completes what is finished and starts what may start; every event ends here. */
void ring_advance(ring *r);

/* ring_outcome.c: how collectives end. */
/* Completes the oldest running collective, finished here (ring_advance()). */
void ring_complete(ring *r);

/* Sends the COMMIT due now rather than at the end of the loop's turn: before
 * the first DATA of a collective, which must not pass it (ring_outcome.c). */
void ring_flush_commit(ring *r);
/* Every COMMIT count back to 0: a new epoch, or a new view. */
void ring_reset_commit(ring *r);
/* Says what a collective past its deadline was waiting for (NULL: one that
 * has not started). */
void ring_describe_wait(const ring *r, const active *a, char *out, size_t len);
/* Runs the deadline tick while something waits for it. */
void ring_update_tick(ring *r);
/* jobs_ops.tick: the deadlines. */
void ring_on_tick(void *eng, uint64_t now);
/* The links' epoch callbacks: a new epoch, a lap that settles, COMMIT counts. */
void ring_on_epoch(void *data, const links_event *ev);
void ring_on_settle(void *data, const frame_epoch *c, links_settled how);
void ring_on_commit(void *data, const frame_commit *c);

/* ring_recv.c: the links' DATA callbacks. */
int ring_on_data(void *data, const frame_data *d, uint8_t **dst, char *why, size_t whylen);
void ring_on_payload(void *data, const frame_data *d, int status, const char *why);

#endif /* RINGD_RING_INTERNAL_H */
