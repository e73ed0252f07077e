/*
 * ring.h - the collective engine: runs allreduce jobs over the ring links, one
 * at a time, in submission order.
 */
#ifndef RINGD_RING_H
#define RINGD_RING_H

#include <stdint.h>
#include <uv.h>

#include "config/config.h"
#include "links.h"
#include "ringd.h"

#define RING_MAX_MESSAGE 1024

typedef struct ring ring;
typedef struct ring_job ring_job;

/* Called once per job, from the loop. status is 0 or a RINGD_E* code with a
 * message saying what failed and where. The job's buffer is no longer
 * touched by the ring (no read or write of it is pending). */
typedef void (*ring_done_cb)(ring_job *job, int status, const char *message);

/* A collective as the ring sees it: one buffer of this host, in place. The
 * submitter owns the job and its buffer until done() is called.
 *   ALLREDUCE       buf: count elements, reduced everywhere
 *   REDUCE_SCATTER  buf: count = ranks x per_rank elements; afterwards the
 *                   blocks of this host's ranks are reduced (the rest is junk)
 *   ALLGATHER       buf: count = ranks x per_rank elements, this host's
 *                   ranks' blocks filled in; afterwards all are
 *   BROADCAST       buf: count elements, read on the root's host, written elsewhere
 *   BARRIER         buf: one byte, count 1 (it runs as a 1-byte allreduce) */
struct ring_job {
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
    ring_done_cb done;
    void *data;
    /* A job that already failed on this host (its local ranks disagree, one
     * of them never came): it still takes its place in the sequence, and its
     * failure travels the ring as an ABORT so every rank learns why. */
    int preset_status;
    const char *preset_message;

    /* The ring's. */
    ring_job *next;
    uint64_t seq;
};

/* How a collective ended, for the counters by kind and outcome. */
typedef enum { RING_OK = 0, RING_TIMEOUT, RING_MISMATCH, RING_ERROR, RING_OUTCOMES } ring_outcome;

#define RING_KINDS 6            /* by_kind is indexed by ringd_coll (1..5) */
#define RING_LATENCY_BUCKETS 16 /* finite bounds of the latency histogram */
#define RING_RECENT 8           /* collectives remembered for stragglers */

/* Upper bounds, in seconds, of the latency histogram's buckets. */
extern const double ring_latency_bounds[RING_LATENCY_BUCKETS];

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
} ring_recent;

#define RING_STATS_HOSTS 64    /* hosts counted in last_count */
#define RING_STRAGGLER_US 1000 /* a host that came this much after the first was late */

typedef struct {
    uint64_t done, failed;
    uint64_t seq; /* sequence number of the next collective */
    char last_error[RING_MAX_MESSAGE];
    /* Added for metrics and status: */
    uint64_t by_kind[RING_KINDS][RING_OUTCOMES];
    uint64_t latency[RING_LATENCY_BUCKETS + 1]; /* per bucket (not cumulative); last: +Inf */
    double latency_sum_s;                       /* collectives started here, start to end */
    uint64_t waits;                             /* collectives with a measured wait */
    double wait_sum_s;                          /* their waits for the left neighbour */
    ring_recent recent[RING_RECENT];            /* ring buffer, the latest at (n_recent-1) % */
    uint64_t n_recent;                          /* collectives recorded in it so far */
    uint64_t last_count[RING_STATS_HOSTS];      /* allreduces each host came last to, late */
} ring_stats;

/* Creates the engine of host `me` and its links (not started). */
int ring_new(ring **out, uv_loop_t *loop, const cfg *c, int me);

/* Requires the links to authenticate with key; see links_set_key(). */
void ring_set_key(ring *r, const auth_key *key);

/* Starts listening and connecting; see links_start(). */
int ring_start(ring *r, char *err, size_t errlen);

/* Queues a job. Returns 0; the outcome arrives through job->done. */
void ring_submit(ring *r, ring_job *job);

/* Fails job j (queued or running) on every host, with an ABORT round the
 * ring: its submitter is gone. message must live until j is done. */
void ring_cancel(ring *r, ring_job *j, int status, const char *message);

/* Fails every job (status, message) and closes the links; done(data) runs
 * when everything is closed and r has been freed. */
void ring_close(ring *r, int status, const char *message, void (*done)(void *), void *data);

const links *ring_links(const ring *r);

/* The star engine when the config says algorithm: star (it then runs every
 * job, and the links stay idle), else NULL. */
struct star;
const struct star *ring_star(const ring *r);

/* How messages name a collective: "allreduce", "?" for an unknown kind; and
 * "allreduce of 1000 x float32 sum", "broadcast of 10 x int8 from rank 2". */
const char *ring_coll_name(int kind);
void ring_describe(char *out, size_t len, int kind, uint64_t count, int dtype, int op, int root);
void ring_get_stats(const ring *r, ring_stats *out);

#endif /* RINGD_RING_H */
