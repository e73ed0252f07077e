/*
 * jobs.h - the collectives an engine runs: a queue in submission order,
 * their failures, remembered aborts, deadlines and the counters of how they
 * ended. Shared by both engines (ring.c, star.c).
 *
 * The queue holds the running jobs first, oldest first, then the ones not
 * started yet. A job starts with the next sequence number and ends in
 * order: the oldest running job completes first, so results go back in the
 * order they were submitted.
 */
#ifndef RINGD_JOBS_H
#define RINGD_JOBS_H

#include <stdint.h>
#include <uv.h>

#include "log.h"
#include "proto/frame.h"
#include "ringd.h"

#define JOB_MAX_MESSAGE 1024

typedef struct job job;

/* How a job that ran went, for the counters (NULL: it never started). */
typedef struct {
    uint64_t start_ns; /* uv_hrtime() at its start */
    int got_wait;
    uint64_t wait_ns; /* its first data's wait */
    int last_host;    /* the straggler, or -1 */
    uint64_t spread_us;
    /* Allreduce, every host's start known (offsets): the latest start of
     * another host relative to this host's own (negative: before it), and
     * the earliest before it (0: none started before), microseconds. */
    int offsets;
    int64_t latest_us;
    uint64_t early_us;
} job_timing;

/* Called once per job, from the loop. status is 0 or a RINGD_E* code with
 * a message saying what failed and where. The engine no longer touches the
 * job's buffer (no read or write of it is pending). */
typedef void (*job_done_cb)(job *j, int status, const char *message);

/* A collective as an engine sees it: one buffer of this host, in place. The
 * submitter owns the job and its buffer until done() is called.
 *   ALLREDUCE       buf: count elements, reduced everywhere
 *   REDUCE_SCATTER  buf: count = ranks x per_rank elements; afterwards the
 *                   blocks of this host's ranks are reduced (the rest is junk)
 *   ALLGATHER       buf: count = ranks x per_rank elements, this host's
 *                   ranks' blocks filled in; afterwards all are
 *   BROADCAST       buf: count elements, read on the root's host, written elsewhere
 *   BARRIER         buf: one byte, count 1 (it runs as a 1-byte allreduce) */
struct job {
    ringd_coll kind;
    uint8_t *buf;
    uint64_t count;
    uint64_t per_rank; /* ALLGATHER, REDUCE_SCATTER: elements of one rank's block */
    ringd_dtype dtype;
    ringd_op op;
    int root;          /* BROADCAST: the root rank */
    int ranks;         /* divisor of MEAN: the total number of ranks */
    double weight;     /* WMEAN: the sum of this host's ranks' weights */
    uint64_t deadline; /* uv_now() milliseconds after which the job fails */
    const char *label; /* how messages name it, e.g. "allreduce \"fc1\"" */
    uint16_t name_tag; /* a hash of its name, 0 for none; hosts compare them */
    uint8_t wire;      /* float32 travelling narrow: RINGD_WIRE_BFLOAT16 or
                          RINGD_WIRE_FLOAT16 (reduce_wire.h); 0: as it is */
    job_done_cb done;
    void *data;
    /* A job that already failed on this host (its local ranks disagree, one
     * of them never came): the engine fails it on every host, so every rank
     * learns why. */
    int preset_status;
    const char *preset_message;

    /* The engine's. */
    job *next;
    uint64_t seq;
    uint32_t epoch; /* the ring epoch it started in (seq counts in it) */
    int started;
    int status; /* the first failure recorded, or 0 */
    char message[JOB_MAX_MESSAGE];
    /* Held: done here, waiting for the ring to say how it ended. */
    job_timing t;
    uint64_t hold_deadline;
};

/* How much a failure takes down. */
typedef enum {
    FAIL_JOB,     /* this job, on this host only (others know already) */
    FAIL_RING,    /* this job here, and on every host by an ABORT */
    FAIL_RUNNING, /* every running job here: the links are gone or must go */
    FAIL_ALL,     /* every job here, running or waiting (j is NULL) */
} fail_scope;

/* How a collective ended, for the counters by kind and outcome. */
typedef enum { JOB_OK = 0, JOB_TIMEOUT, JOB_MISMATCH, JOB_ERROR, JOB_OUTCOMES } job_outcome;

#define JOB_KINDS 6            /* by_kind is indexed by ringd_coll (1..5) */
#define JOB_LATENCY_BUCKETS 16 /* finite bounds of the latency histogram */
#define JOB_RECENT 8           /* collectives remembered for stragglers */
#define JOB_STATS_HOSTS 64     /* hosts counted in last_count */
#define JOB_STRAGGLER_US 1000  /* a host that came this much after the first was late */

/* Upper bounds, in seconds, of the latency histogram's buckets. */
extern const double job_latency_bounds[JOB_LATENCY_BUCKETS];

/* One recent collective as this host saw it. wait_us: from its start here to
 * the first DATA frame of it from the left neighbour (about 0 when that data
 * was already waiting, i.e. this host came after its left neighbour);
 * has_wait is 0 when this host received nothing for it. */
typedef struct {
    uint64_t seq;
    uint8_t kind; /* ringd_coll */
    uint8_t has_wait;
    int32_t status;
    uint64_t wait_us, latency_us;
    /* Allreduce: the host that started last (-1: not known, e.g. a count
     * below the number of hosts), and how long after the first it started. */
    int16_t last_host;
    uint64_t spread_us;
} job_recent;

typedef struct {
    uint64_t done, failed;
    uint64_t seq; /* sequence number of the next collective */
    char last_error[JOB_MAX_MESSAGE];
    uint64_t last_error_ms; /* uv_now() of last_error */
    uint64_t by_kind[JOB_KINDS][JOB_OUTCOMES];
    uint64_t latency[JOB_LATENCY_BUCKETS + 1]; /* per bucket (not cumulative); last: +Inf */
    double latency_sum_s;                      /* collectives started here, start to end */
    uint64_t waits;                            /* collectives with a measured wait */
    double wait_sum_s;                         /* their waits for the left neighbour */
    job_recent recent[JOB_RECENT];             /* ring buffer, the latest at (n_recent-1) % */
    uint64_t n_recent;                         /* collectives recorded in it so far */
    uint64_t last_count[JOB_STATS_HOSTS];      /* allreduces each host came last to, late */
} job_stats;

typedef struct {
    /* Tells every other host that j failed (j->status, j->message). */
    void (*abort)(void *eng, job *j);
    /* The deadline tick, every JOBS_TICK_MS while jobs wait. */
    void (*tick)(void *eng, uint64_t now);
} jobs_ops;

#define JOBS_TICK_MS 100      /* granularity of deadlines */
/* A failure waits for the lap that settles it until its deadline and this
 * much more: the time a lap stuck behind a paused link needs to be freed by
 * the reset of the host that holds it. Then its outcome is unknown. */
#define JOBS_SETTLE_GRACE_MS 2000
/* A deadline tick this late after the one before follows a stall of the
 * whole process (SIGSTOP, a VM paused, swapping): the time that passed is
 * not the ranks' nor the peers' fault, and the links' own news (a peer that
 * gave up on this host) is still unread. Such a tick judges nothing; the
 * next one, JOBS_TICK_MS later, does (jobs_stalled()). */
#define JOBS_STALL_MS 500

/* Whether a deadline tick at now comes after a stall of the process; *last
 * is the time of the tick before, updated. */
static inline int jobs_stalled(uint64_t *last, uint64_t now)
{
    int stalled = *last && now - *last > JOBS_STALL_MS;
    *last = now;
    return stalled;
}
#define JOBS_FAIL_LOG_MS 1000 /* at most one failure line per this (log_limited()) */
#define JOBS_MAX_ABORTS 8     /* aborts remembered for jobs not started here yet */

typedef struct {
    uint64_t seq;
    int32_t code;
    char reason[FRAME_MAX_TEXT + 1];
} job_abort;

typedef struct {
    const jobs_ops *ops;
    void *engine;
    job *head, *tail; /* the queue: running first, then waiting */
    job *waiting;     /* the first job not started yet */
    int running;
    job *held, *held_tail; /* done here (or failed), waiting for the ring's word */
    job_abort aborts[JOBS_MAX_ABORTS];
    int n_aborts;
    uv_timer_t tick;
    int awaiting;          /* the engine waits for a word of the ring: keep ticking */
    log_ratelimit fail_rl; /* failures: a dying client can fail thousands at once */
    job_stats stats;
} jobs;

void jobs_init(jobs *q, uv_loop_t *loop, const jobs_ops *ops, void *eng);
/* Closes the tick timer; cb(handle) runs when it is closed. */
void jobs_close(jobs *q, uv_close_cb cb);

void jobs_push(jobs *q, job *j);
/* The oldest running job, or NULL. */
job *jobs_oldest(const jobs *q);
/* The first job not started yet, or NULL. */
job *jobs_waiting(const jobs *q);
/* Starts jobs_waiting(q) with the next sequence number. */
job *jobs_start(jobs *q);
/* Once the engine has set j up as running: records its preset failure
 * (scope FAIL_RING, so the engine tells every host), or the abort
 * remembered for its number. */
void jobs_apply_preset(jobs *q, job *j);
/* Ends the oldest running job with its status, counted with t (NULL: it
 * never ran; else the job keeps it in j->t), and calls its done(). */
void jobs_complete(jobs *q, const job_timing *t);
/* Holds the oldest running job, finished here (t: how it ran) or failed:
 * done() waits for jobs_confirm() or jobs_settle(), which tell how it ended
 * on every host. hold_ms bounds the wait (jobs_expire_held()). */
void jobs_hold(jobs *q, const job_timing *t, uint64_t hold_deadline);
/* How the ring settled the collectives of an epoch: those of `epoch`
 * numbered below `done` succeeded on every host; every other one failed
 * with code: collective fail_seq of epoch with reason as it is when `own`
 * (the reason is that collective's own and names it), every other one with
 * "<label> failed: <reason>". An epoch of 0 settles nothing as a success
 * and names no collective. Every host applies the same verdict to the
 * same numbers, so every rank gets the same code and the same message. */
typedef struct {
    uint32_t epoch;
    uint64_t done;
    int code;
    uint64_t fail_seq;
    int own;
    const char *reason;
    /* Where the next epoch starts: `top` collectives of epoch were
     * submitted somewhere; once ready, the ring runs epoch next_epoch. */
    uint64_t top;
    int ready;
    /* The ring was ready in next_epoch, which has ended: this host missed
     * that confirmation and settles it late, before the one that ends
     * next_epoch; its numbering moves on to next_epoch's start, and it
     * waits for the next verdict. */
    int passed;
    uint32_t next_epoch;
    /* The ring has a new membership (an elastic ring), ready or not: what
     * did not succeed failed with RINGD_ERESIZED, and every rank's
     * numbering starts afresh with the next ready epoch (gather.h). */
    int resized;
} job_verdict;

/* Whether v settles an epoch after `epoch` (nonzero), the one a collective
 * of this host ran in or was numbered for: the verdict of its own epoch
 * went round without this host, which cannot tell how it ended. */
int job_verdict_unheard(const job_verdict *v, uint32_t epoch);
/* What verdict v says of the collective labelled label, number seq of epoch
 * (a number it would have had, for one that never started): 0 if it
 * succeeded, else its code, with its message in out; "outcome unknown"
 * (RINGD_ERING) where v is unheard of that epoch. */
int job_verdict_apply(const job_verdict *v, const char *label, uint32_t epoch, uint64_t seq,
                      char *out, size_t len);

/* Holds every waiting job, failed with (status, message) and never started,
 * until its own deadline (at least now) plus grace. With epoch nonzero,
 * they take the numbers they would have had in it, from *next on
 * (jobs_settle() places them by those). */
void jobs_hold_waiting(jobs *q, int status, const char *message, uint64_t now, uint64_t grace,
                       uint32_t epoch, uint64_t *next);
/* Every held job of epoch that succeeded here with seq < upto succeeded on
 * every host: its done() runs. Stops at the first that is not so. */
void jobs_confirm(jobs *q, uint32_t epoch, uint64_t upto);
/* Ends every held job as verdict v says. */
void jobs_settle(jobs *q, const job_verdict *v);
/* Records what v says of j, one still running here when the ring settled
 * it; it is not released. */
void jobs_settle_one(job *j, const job_verdict *v);
/* Ends the first held job as it is. */
void jobs_release_first(jobs *q);
/* Ends the held jobs past their hold_deadline with code: those that
 * succeeded here with `unknown` (nothing tells whether every host did),
 * those that failed here with "outcome unknown: <their failure>; <unsettled>"
 * (nothing tells how the others ended them). Returns how many ended. */
int jobs_expire_held(jobs *q, uint64_t now, int code, const char *unknown, const char *unsettled);

/* Ends the first waiting job, which never started. */
void jobs_end_waiting(jobs *q, int status, const char *message);
/* Ends j, never queued, at once (the engine cannot run it). */
void jobs_reject(jobs *q, job *j, int status, const char *message);

/* Records a failure (the first one of a job wins) with the given scope.
 * FAIL_RUNNING: j gets the message, the others running say they failed
 * with j. FAIL_ALL: each running job says it failed with the message, and
 * each waiting one ends with it. */
void jobs_fail(jobs *q, job *j, fail_scope scope, int status, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Aborts of jobs not started here yet (another host failed them first). */
void jobs_remember_abort(jobs *q, const frame_abort *a);
const job_abort *jobs_find_abort(const jobs *q, uint64_t seq);
void jobs_forget_aborts(jobs *q, uint64_t upto);
/* A new numbering (a new epoch): the next job is #0, no abort applies. */
void jobs_renumber(jobs *q);

/* Runs the tick while jobs wait, are held or q->awaiting; call after every
 * change. */
void jobs_update_tick(jobs *q);

#endif /* RINGD_JOBS_H */
