/*
 * ring.c - bandwidth-optimal ring collectives, pipelined by segments.
 *
 * Allreduce: the buffer of `count` elements is cut into N chunks (chunk c
 * has count/N elements, one more when c < count%N). Host r runs 2(N-1)
 * steps: in reduce-scatter step g (0 <= g < N-1) it sends chunk r-g and
 * receives chunk r-g-1, which it reduces into its own copy; after N-1 steps
 * it holds chunk r+1 fully reduced. In allgather step g it sends chunk
 * r+1-(g-N+1) and receives chunk r-(g-N+1), which it stores. Indices mod N.
 *
 * The other collectives are parts of the same schedule. Reduce-scatter runs
 * only the first N-1 steps and allgather only the last N-1, on chunks that
 * are the hosts' blocks of ranks, renumbered by one so that host r ends with
 * (or starts from) its own block. Broadcast is a chain from the root's host:
 * the host d hops after it receives at step d-1 and forwards at step d. A
 * barrier is an allreduce of one byte.
 *
 * The chunk a host receives at step g is the one it sends at step g+1, so a
 * received segment is reduced (or stored) and forwarded at once, with the
 * same offset and length: segments stream around the ring and the link never
 * waits for a whole step. Only the first step's segments are cut here; every
 * later step forwards them as they come.
 *
 * Each element is reduced in the same order on every run: chunk c starts at
 * one host and travels the ring, each host adding its own value in the same
 * position (dst = own (op) received). Timing changes nothing, and the
 * allgather copies the final bytes, so every rank gets the same bits.
 *
 * Sends read the user's buffer in place; allgather and broadcast receives
 * write it in place. Neither can race: a segment comes back to a host only
 * after its right neighbour has received that host's own send of the same
 * bytes, i.e. after the kernel has taken them.
 *
 * A collective that fails for a reason the streams survive (the hosts
 * disagree on it, a rank never came, a deadline, a bad checksum) sends an
 * ABORT around the ring, so every host fails it with the same message and
 * the links stay up; frames of it still in flight are dropped as stale. A
 * protocol error drops both links instead (see drop_links()).
 *
 * Collectives run only while the links say the ring is ready, and are
 * numbered from 0 in each ring epoch. When a link breaks, the links move
 * every host to a new epoch (see links.c): each fails the collectives it has
 * running or queued, with a message naming the lost link, and numbering
 * starts again once the ring has re-formed, so hosts agree on it whatever
 * each had submitted when the link broke.
 *
 * Small collectives run together (fusion): while one is in flight, the next
 * queued ones start too, up to fusion_max of them and as long as each is no
 * larger than fusion_threshold, so a burst of small gradients pays the
 * ring's latency about once instead of once each. Each is still computed
 * exactly as alone, so fused and unfused runs give the same bits. Frames
 * carry their collective's seq; a frame of a collective queued here but not
 * started yet starts it, so hosts need not agree on how many run at once.
 * A frame of one that this host's ranks have not submitted yet stops the
 * link until they do: if they wait for an earlier collective whose data is
 * behind that frame (blocking calls here, a burst of async ones upstream),
 * the earlier one ends at its deadline rather than hanging.
 */
#include "ring.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "reduce.h"
#include "star.h"

#define TICK_MS 100   /* granularity of collective deadlines */
#define MAX_ABORTS 8  /* aborts remembered for collectives not started here yet */
#define MAX_ACTIVE 64 /* collectives running at once */

typedef struct {
    ring_job *job;  /* the running collective, or NULL */
    uint32_t epoch; /* the ring epoch it started in */
    size_t esize;
    uint64_t base, extra; /* allreduce chunks: base + (c < extra) elements */
    int dist;             /* broadcast: hops from the root's host */
    int first, last;      /* the steps this collective runs */
    unsigned steps_left;  /* steps whose chunk has not fully arrived */
    size_t writes;        /* sends not yet completed by the links */
    int reading;          /* a payload is being read into the job's buffer */
    uint64_t *recv_off;   /* per step: the next byte offset expected */
    int status;
    char message[RING_MAX_MESSAGE];
    uint64_t start_ns, wait_ns; /* uv_hrtime() at start; its first DATA frame's wait */
    int got_data;
    /* Allreduce: per host h, when h's first data from its left neighbour
     * came, relative to h's own start (microseconds; negative: it was
     * waiting). FRAME_DELTA_UNKNOWN until learnt; see name_straggler(). */
    int32_t *delta_us;
} active;

typedef struct {
    uint64_t seq;
    int32_t code;
    char reason[FRAME_MAX_TEXT + 1];
} pending_abort;

struct ring {
    uv_loop_t *loop;
    const cfg *cfg;
    int me, n;
    links *links;
    star *star;             /* algorithm: star runs the jobs instead; links stay idle */
    ring_job *head, *tail;  /* queue, in submission order; the running jobs first */
    ring_job *next_start;   /* the first queued job not started yet */
    active act[MAX_ACTIVE]; /* running collectives: a circular buffer in seq order */
    int first, n_act;
    uint8_t *staging; /* where reduce-scatter payloads land before reduction */
    size_t staging_cap;
    pending_abort aborts[MAX_ABORTS];
    int n_aborts;
    frame_abort unsent[MAX_ABORTS]; /* aborts to pass on once the right link is up */
    int n_unsent;
    uint32_t epoch; /* the links' epoch: seqs count from 0 in each */
    /* The first frame of a collective not started here: when it came. */
    int early_set;
    uint32_t early_epoch;
    uint64_t early_seq, early_ns;
    uv_timer_t tick;
    int advancing;
    int closing;
    ring_stats stats;
    void (*done)(void *);
    void *done_data;
};

static void advance(ring *r);
static int mod(int x, int n);
static void on_tick(uv_timer_t *t);

const double ring_latency_bounds[RING_LATENCY_BUCKETS] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};

/*
 * Which host came last to an allreduce. Host h learns delta_h, the time from
 * its own start to its left neighbour's first data, which left at the left
 * neighbour's start: delta_h = start(left(h)) - start(h) + one hop. Each host
 * sends its delta with the allgather frames of the chunk it completed, so
 * every host learns all N and can place every start relative to its own:
 * start(left(h)) = start(h) + delta_h, round the ring. The latest is the
 * straggler; spread is how long after the first it came.
 */
static void name_straggler(const ring *r, const active *a, int *last, uint64_t *spread_us)
{
    *last = -1;
    *spread_us = 0;
    if (a->job->kind != RINGD_COLL_ALLREDUCE || r->n < 2) return;
    for (int h = 0; h < r->n; h++)
        if (a->delta_us[h] == FRAME_DELTA_UNKNOWN) return;
    int64_t at = 0, lo = 0, hi = 0;
    int h = r->me;
    *last = h;
    for (int k = 1; k < r->n; k++) {
        at += a->delta_us[h];
        h = mod(h - 1, r->n);
        if (at > hi) {
            hi = at;
            *last = h;
        }
        if (at < lo) lo = at;
    }
    *spread_us = (uint64_t)(hi - lo);
}

/* Counts an ended collective for the metrics; a is NULL for one that ended
 * before it started here (no latency, no wait). */
static void count_outcome(ring *r, const ring_job *j, int status, const active *a)
{
    ring_stats *s = &r->stats;
    int o = status == 0                 ? RING_OK
            : status == RINGD_ETIMEDOUT ? RING_TIMEOUT
            : status == RINGD_EMISMATCH ? RING_MISMATCH
                                        : RING_ERROR;
    s->by_kind[(unsigned)j->kind < RING_KINDS ? j->kind : 0][o]++;
    if (!a) return;
    uint64_t ns = uv_hrtime() - a->start_ns;
    double sec = (double)ns / 1e9;
    int b = 0;
    while (b < RING_LATENCY_BUCKETS && sec > ring_latency_bounds[b])
        b++;
    s->latency[b]++;
    s->latency_sum_s += sec;
    if (a->got_data) {
        s->waits++;
        s->wait_sum_s += (double)a->wait_ns / 1e9;
    }
    int last;
    uint64_t spread_us;
    name_straggler(r, a, &last, &spread_us);
    if (last >= 0 && spread_us >= RING_STRAGGLER_US && last < RING_STATS_HOSTS)
        s->last_count[last]++;
    ring_recent *rc = &s->recent[s->n_recent++ % RING_RECENT];
    *rc = (ring_recent){.seq = j->seq,
                        .kind = (uint8_t)j->kind,
                        .has_wait = (uint8_t)a->got_data,
                        .status = status,
                        .wait_us = a->wait_ns / 1000,
                        .latency_us = ns / 1000,
                        .last_host = (int16_t)last,
                        .spread_us = spread_us};
}

/* ---- schedule and geometry ---- */

static int mod(int x, int n)
{
    return ((x % n) + n) % n;
}

static int host_of_rank(const ring *r, int rank)
{
    for (int h = 0; h < r->n; h++)
        if (rank < cfg_first_rank(r->cfg, (size_t)h) + r->cfg->hosts[h].local_clients) return h;
    return 0;
}

static int reduces(const ring_job *j)
{
    return j->kind == RINGD_COLL_ALLREDUCE || j->kind == RINGD_COLL_REDUCE_SCATTER ||
           j->kind == RINGD_COLL_BARRIER;
}

/* Reduce-scatter and allgather run on the hosts' blocks, renumbered so that
 * the schedule's chunk r+1 (where reduce-scatter ends on host r, and
 * allgather starts) is host r's own block. */
static int physical(const ring *r, const active *a, int v)
{
    ringd_coll k = a->job->kind;
    int shift = k == RINGD_COLL_REDUCE_SCATTER || k == RINGD_COLL_ALLGATHER;
    return mod(v - shift, r->n);
}

/* The chunk this host receives at step g, or -1 if it receives nothing. */
static int recv_chunk(const ring *r, const active *a, int g)
{
    if (g < a->first || g > a->last) return -1;
    if (a->job->kind == RINGD_COLL_BROADCAST) return g == a->dist - 1 ? 0 : -1;
    int v = g < r->n - 1 ? r->me - g - 1 : r->me - (g - (r->n - 1));
    return physical(r, a, v);
}

/* The chunk this host sends at step g, or -1 if it sends nothing. */
static int send_chunk(const ring *r, const active *a, int g)
{
    if (g < a->first || g > a->last) return -1;
    if (a->job->kind == RINGD_COLL_BROADCAST) return g == a->dist ? 0 : -1;
    int v = g < r->n - 1 ? r->me - g : r->me + 1 - (g - (r->n - 1));
    return physical(r, a, v);
}

/* Byte offset and length of chunk c in the job's buffer. */
static void chunk_range(const ring *r, const active *a, int c, uint64_t *off, uint64_t *len)
{
    const ring_job *j = a->job;
    switch (j->kind) {
    case RINGD_COLL_BROADCAST:
        *off = 0;
        *len = j->count * a->esize;
        return;
    case RINGD_COLL_ALLGATHER:
    case RINGD_COLL_REDUCE_SCATTER:
        *off = (uint64_t)cfg_first_rank(r->cfg, (size_t)c) * j->per_rank * a->esize;
        *len = (uint64_t)r->cfg->hosts[c].local_clients * j->per_rank * a->esize;
        return;
    default: {
        uint64_t uc = (uint64_t)c;
        *off = (uc * a->base + (uc < a->extra ? uc : a->extra)) * a->esize;
        *len = (a->base + (uc < a->extra)) * a->esize;
        return;
    }
    }
}

static uint64_t chunk_len(const ring *r, const active *a, int c)
{
    uint64_t off, len;
    chunk_range(r, a, c, &off, &len);
    return len;
}

static const char *neighbour(const ring *r, int side)
{
    return r->cfg->hosts[mod(r->me + side, r->n)].name;
}

/* ---- the running collectives ---- */

static active *slot(ring *r, int k)
{
    return &r->act[(r->first + k) % MAX_ACTIVE];
}

/* The running collective (epoch, seq), or NULL. The running ones of an
 * epoch have consecutive seqs, and those of an older epoch come first. */
static active *find_active(ring *r, uint32_t epoch, uint64_t seq)
{
    int k = 0;
    while (k < r->n_act && slot(r, k)->epoch != epoch)
        k++;
    if (k == r->n_act) return NULL;
    uint64_t first = slot(r, k)->job->seq;
    if (seq < first || seq - first >= (uint64_t)(r->n_act - k)) return NULL;
    active *a = slot(r, k + (int)(seq - first));
    return a->epoch == epoch ? a : NULL;
}

/* Whether collectives of an older epoch still run (failed, finishing their
 * sends and reads): the new epoch's cannot start beside them. */
static int stale(ring *r)
{
    return r->n_act > 0 && slot(r, 0)->epoch != r->epoch;
}

/* ---- failure ---- */

static int record_v(active *a, int status, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* Records the first failure of a running collective; returns 1 if it was
 * the first. */
static int record_v(active *a, int status, const char *fmt, va_list ap)
{
    if (!a->job || a->status != 0) return 0;
    a->status = status;
    vsnprintf(a->message, sizeof a->message, fmt, ap);
    log_warn("%s", a->message);
    return 1;
}

/* Fails a running collective on this host only. */
static void fail_here(active *a, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void fail_here(active *a, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    record_v(a, status, fmt, ap);
    va_end(ap);
}

/* Passes an abort to the right neighbour, now or as soon as the link to it is
 * up: a host that never hears of it would wait for the deadline instead. */
static void send_abort(ring *r, const frame_abort *ab)
{
    if (links_send_abort(r->links, ab) == 0) return;
    if (r->n_unsent == MAX_ABORTS) {
        memmove(r->unsent, r->unsent + 1, (MAX_ABORTS - 1) * sizeof *r->unsent);
        r->n_unsent--;
    }
    r->unsent[r->n_unsent++] = *ab;
}

static void flush_aborts(ring *r)
{
    int n = r->n_unsent;
    r->n_unsent = 0;
    for (int i = 0; i < n; i++)
        send_abort(r, &r->unsent[i]);
}

/* Fails a running collective and tells the ring: the ABORT follows this
 * host's frames of the collective, and every host fails it in turn. */
static void fail_abort(ring *r, active *a, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void fail_abort(ring *r, active *a, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int first = record_v(a, status, fmt, ap);
    va_end(ap);
    if (!first || r->n == 1) return;
    frame_abort ab = {.seq = a->job->seq, .code = status};
    size_t n = strnlen(a->message, FRAME_MAX_TEXT);
    memcpy(ab.reason, a->message, n);
    ab.reason[n] = '\0';
    send_abort(r, &ab);
}

/* The others running go down with a. */
static void fail_others(ring *r, active *a)
{
    for (int k = 0; k < r->n_act; k++) {
        active *o = slot(r, k);
        if (o != a && o->status == 0)
            fail_here(o, a->status, "%s #%" PRIu64 " failed with #%" PRIu64 ": %s", o->job->label,
                      o->job->seq, a->job->seq, a->message);
    }
}

/* Fails every running collective when a link is already gone: the links
 * break the ring themselves. */
static void fail_running(ring *r, active *a, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void fail_running(ring *r, active *a, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    record_v(a, status, fmt, ap);
    va_end(ap);
    fail_others(r, a);
}

/* After fail_running(), when frames may be half sent or half read: both
 * links are dropped, which breaks the ring from here (see links.c); they
 * re-form by themselves. */
static void drop_links(ring *r)
{
    if (r->n > 1) links_reset(r->links, "a collective on this host failed");
}

/* ---- sending ---- */

static void send_segment(ring *r, active *a, int g, int c, uint64_t off, uint32_t len, double wsum,
                         int32_t delta_us)
{
    ring_job *j = a->job;
    frame_data d = {.seq = j->seq,
                    .epoch = 0, /* stamped by the link */
                    .step = (uint16_t)g,
                    .dtype = (uint8_t)j->dtype,
                    .op = (uint8_t)j->op,
                    .chunk = (uint32_t)c,
                    .length = len,
                    .count = j->count,
                    .offset = off,
                    .kind = (uint8_t)j->kind,
                    .root = (uint32_t)j->root,
                    .wsum = wsum,
                    .delta_us = delta_us,
                    .name_tag = j->name_tag};
    uint64_t coff, clen;
    chunk_range(r, a, c, &coff, &clen);
    int rc = links_send_data(r->links, &d, j->buf + coff + off, a);
    if (rc < 0) {
        fail_running(r, a, RINGD_ERING, "%s #%" PRIu64 ": cannot send to right neighbour %s: %s",
                     j->label, j->seq, neighbour(r, 1), ringd_strerror(rc));
        return;
    }
    a->writes++;
}

/* ---- starting ---- */

static const pending_abort *find_abort(const ring *r, uint64_t seq)
{
    for (int i = 0; i < r->n_aborts; i++)
        if (r->aborts[i].seq == seq) return &r->aborts[i];
    return NULL;
}

/* A collective of one host, or of nothing, completes without the ring. */
static void run_alone(ring *r, active *a)
{
    ring_job *j = a->job;
    if (j->count == 0 || (j->kind != RINGD_COLL_ALLREDUCE && j->kind != RINGD_COLL_REDUCE_SCATTER))
        return;
    double divisor = j->op == RINGD_WMEAN ? j->weight : j->ranks;
    if (j->op == RINGD_WMEAN && !(divisor > 0 && isfinite(divisor))) {
        fail_abort(r, a, RINGD_EINVAL, "%s #%" PRIu64 ": the weights of all ranks sum to %g",
                   j->label, j->seq, divisor);
        return;
    }
    reduce_finish(j->dtype, j->op, j->buf, j->count, divisor);
}

static uint64_t job_bytes(const ring_job *j)
{
    return j->count * ringd_dtype_size(j->dtype);
}

/* Starts r->next_start: its seq is the next one. */
static void start(ring *r)
{
    ring_job *j = r->next_start;
    r->next_start = j->next;
    active *a = slot(r, r->n_act++);
    uint64_t *recv_off = a->recv_off;
    int32_t *delta_us = a->delta_us;
    memset(a, 0, sizeof *a);
    a->recv_off = recv_off;
    a->delta_us = delta_us;
    for (int h = 0; h < r->n; h++)
        a->delta_us[h] = FRAME_DELTA_UNKNOWN;
    a->job = j;
    a->epoch = r->epoch;
    a->start_ns = uv_hrtime();
    j->seq = r->stats.seq++;
    if (r->early_set && r->early_epoch == r->epoch && r->early_seq == j->seq) {
        /* Its left neighbour's data was here first: no wait, and by how much. */
        r->early_set = 0;
        a->got_data = 1;
        a->wait_ns = 0;
        a->delta_us[r->me] = -(int32_t)((a->start_ns - r->early_ns) / 1000);
    }
    a->esize = ringd_dtype_size(j->dtype);

    if (j->preset_status < 0) {
        fail_abort(r, a, j->preset_status, "%s", j->preset_message);
        return;
    }
    const pending_abort *pa = find_abort(r, j->seq);
    if (pa) {
        /* Another host failed it before this host's ranks submitted it; the
         * abort has gone on around the ring already. */
        fail_here(a, pa->code, "%s", pa->reason);
        return;
    }
    if (r->n == 1 || j->count == 0) {
        run_alone(r, a);
        return;
    }

    int n = r->n;
    a->base = j->count / (uint64_t)n;
    a->extra = j->count % (uint64_t)n;
    a->first = j->kind == RINGD_COLL_ALLGATHER ? n - 1 : 0;
    a->last =
        j->kind == RINGD_COLL_REDUCE_SCATTER || j->kind == RINGD_COLL_BROADCAST ? n - 2 : 2 * n - 3;
    if (j->kind == RINGD_COLL_BROADCAST) a->dist = mod(r->me - host_of_rank(r, j->root), n);
    for (int g = 0; g < 2 * (n - 1); g++) {
        a->recv_off[g] = 0;
        int c = recv_chunk(r, a, g);
        if (c >= 0 && chunk_len(r, a, c) > 0) a->steps_left++;
    }
    log_debug("%s #%" PRIu64 ": %" PRIu64 " x %s %s started", j->label, j->seq, j->count,
              ringd_dtype_name(j->dtype), ringd_op_name(j->op));

    /* The first step: this host's own chunk, cut into segments. */
    uint32_t seg = r->cfg->segment_bytes / (uint32_t)a->esize * (uint32_t)a->esize;
    int c = send_chunk(r, a, a->first);
    uint64_t bytes = c >= 0 ? chunk_len(r, a, c) : 0;
    for (uint64_t off = 0; off < bytes && a->status == 0; off += seg)
        send_segment(r, a, a->first, c, off, (uint32_t)(bytes - off < seg ? bytes - off : seg),
                     j->weight, FRAME_DELTA_UNKNOWN);

    /* The left neighbour may have started first; its frames wait for us. */
    links_resume(r->links);
}

static int ring_up(ring *r)
{
    return links_ready(r->links) && !stale(r);
}

/* Whether the next queued job may start now, beside those running: only
 * small ones run together (see the top of this file). */
static int may_start(ring *r)
{
    const ring_job *j = r->next_start;
    if (!j || !ring_up(r) || r->n_act == MAX_ACTIVE) return 0;
    if (r->n_act == 0) return 1;
    uint64_t limit = r->cfg->fusion_threshold_bytes;
    if (r->n_act >= (int)r->cfg->fusion_max || job_bytes(j) > limit) return 0;
    for (int k = 0; k < r->n_act; k++)
        if (job_bytes(slot(r, k)->job) > limit) return 0;
    return 1;
}

/* ---- completing ---- */

static int finished(const active *a)
{
    return (a->status != 0 || a->steps_left == 0) && a->writes == 0 && !a->reading;
}

static void forget_abort(ring *r, uint64_t seq)
{
    for (int i = 0; i < r->n_aborts; i++) {
        if (r->aborts[i].seq <= seq) {
            r->aborts[i] = r->aborts[--r->n_aborts];
            i--;
        }
    }
}

static void pop(ring *r, ring_job *j)
{
    r->head = j->next;
    if (!r->head) r->tail = NULL;
}

/* Completes the oldest running collective: results go back in order. */
static void complete(ring *r)
{
    active *a = slot(r, 0);
    ring_job *j = a->job;
    int status = a->status;
    char message[RING_MAX_MESSAGE];
    snprintf(message, sizeof message, "%s", a->message);
    count_outcome(r, j, status, a);
    a->job = NULL;
    r->first = (r->first + 1) % MAX_ACTIVE;
    r->n_act--;
    pop(r, j);
    /* Remembered aborts are of this epoch's numbering only. */
    if (a->epoch == r->epoch) forget_abort(r, j->seq);
    if (status == 0) {
        r->stats.done++;
        log_debug("%s #%" PRIu64 " done", j->label, j->seq);
    } else {
        r->stats.failed++;
        snprintf(r->stats.last_error, sizeof r->stats.last_error, "%s", message);
    }
    j->done(j, status, status ? message : NULL);
}

/* Ends queued jobs that have not started: the ring is closing. */
static void drain_queue(ring *r, int status, const char *message)
{
    ring_job *j = r->next_start;
    if (!j) return;
    /* The unstarted jobs are the tail of the queue: cut it off. */
    if (r->head == j) {
        r->head = r->tail = NULL;
    } else {
        ring_job *p = r->head;
        while (p->next != j)
            p = p->next;
        p->next = NULL;
        r->tail = p;
    }
    r->next_start = NULL;
    while (j) {
        ring_job *next = j->next;
        r->stats.failed++;
        count_outcome(r, j, status, NULL);
        j->done(j, status, message);
        j = next;
    }
}

/* The one place that moves collectives forward: completes the oldest
 * running one when it is finished and starts queued ones when they may.
 * Every event ends here. */
static void advance(ring *r)
{
    if (r->advancing) return;
    r->advancing = 1;
    for (;;) {
        if (r->n_act > 0 && finished(slot(r, 0))) {
            complete(r);
            continue;
        }
        if (r->closing) {
            if (r->next_start) drain_queue(r, RINGD_ESHUTDOWN, "ringd is shutting down");
            break;
        }
        if (!may_start(r)) break;
        start(r);
    }
    r->advancing = 0;
    /* Deadlines are checked on a coarse tick, and only while jobs wait. */
    if (r->head && !r->closing) {
        if (!uv_is_active((uv_handle_t *)&r->tick))
            uv_timer_start(&r->tick, on_tick, TICK_MS, TICK_MS);
    } else {
        uv_timer_stop(&r->tick);
    }
}

/* ---- deadlines ---- */

/* Says what a collective past its deadline was waiting for (a NULL: one that
 * has not started). */
static void describe_wait(const ring *r, const active *a, char *out, size_t len)
{
    if (!a) {
        const cfg_host *right = &r->cfg->hosts[mod(r->me + 1, r->n)];
        link_state ls = links_state(r->links, LINK_LEFT), rs = links_state(r->links, LINK_RIGHT);
        const char *le = links_last_error(r->links, LINK_LEFT);
        const char *re = links_last_error(r->links, LINK_RIGHT);
        if (ls == LINK_UP && rs == LINK_UP)
            snprintf(out, len,
                     "the ring is not formed: both links of this host are up, so a link "
                     "further round the ring is down (see the other hosts' logs or "
                     "ringctl status there)");
        else
            snprintf(out, len,
                     "the ring is not formed: right link to %s (%s) is %s%s%s; left link "
                     "from %s is %s%s%s",
                     right->name, right->address, links_state_name(rs), *re ? ": " : "", re,
                     neighbour(r, -1), links_state_name(ls), *le ? ": " : "", le);
        return;
    }
    int g = a->first;
    while (g <= a->last) {
        int c = recv_chunk(r, a, g);
        if (c >= 0 && a->recv_off[g] < chunk_len(r, a, c)) break;
        g++;
    }
    if (g <= a->last)
        snprintf(out, len,
                 "at step %d of %d, waiting for data from left neighbour %s "
                 "(has every rank submitted this collective?)",
                 g - a->first + 1, a->last - a->first + 1, neighbour(r, -1));
    else
        snprintf(out, len, "all data received, waiting for sends to right neighbour %s",
                 neighbour(r, 1));
}

static void on_tick(uv_timer_t *t)
{
    ring *r = t->data;
    uint64_t now = uv_now(r->loop);
    char why[512];
    for (int k = 0; k < r->n_act; k++) {
        active *a = slot(r, k);
        if (a->status != 0 || a->job->deadline > now) continue;
        describe_wait(r, a, why, sizeof why);
        fail_abort(r, a, RINGD_ETIMEDOUT, "%s #%" PRIu64 " timed out on host %s %s", a->job->label,
                   a->job->seq, r->cfg->hosts[r->me].name, why);
    }
    /* One that could not even start: nothing to tell the ring. */
    ring_job *j = r->next_start;
    if (j && r->n_act == 0 && j->deadline <= now) {
        char msg[RING_MAX_MESSAGE];
        describe_wait(r, NULL, why, sizeof why);
        snprintf(msg, sizeof msg, "%s timed out before it could start on host %s: %s", j->label,
                 r->cfg->hosts[r->me].name, why);
        log_warn("%s", msg);
        r->next_start = j->next;
        pop(r, j);
        r->stats.failed++;
        count_outcome(r, j, RINGD_ETIMEDOUT, NULL);
        snprintf(r->stats.last_error, sizeof r->stats.last_error, "%s", msg);
        j->done(j, RINGD_ETIMEDOUT, msg);
    }
    advance(r);
}

/* ---- link events ---- */

static void on_up(void *data, link_side side)
{
    (void)side;
    advance(data);
}

static void on_ready(void *data)
{
    ring *r = data;
    flush_aborts(r);
    advance(r);
}

static void on_epoch(void *data, uint32_t epoch, int broke, int code, const char *why)
{
    ring *r = data;
    r->epoch = epoch;
    r->stats.seq = 0;
    /* Aborts are of the old numbering. */
    r->n_aborts = 0;
    r->n_unsent = 0;
    for (int k = 0; k < r->n_act; k++) {
        active *a = slot(r, k);
        if (a->status == 0)
            fail_here(a, code, "%s #%" PRIu64 " failed: %s", a->job->label, a->job->seq, why);
    }
    /* After a break, hosts may have submitted different numbers of
     * collectives: nothing submitted so far may pair with another host's. */
    if (broke) drain_queue(r, code, why);
    advance(r);
}

static void on_down(void *data, link_side side, const char *why)
{
    ring *r = data;
    const cfg_host *peer = &r->cfg->hosts[mod(r->me + (side == LINK_LEFT ? -1 : 1), r->n)];
    /* A payload being read will not arrive, for any of them. */
    for (int k = 0; side == LINK_LEFT && k < r->n_act; k++)
        slot(r, k)->reading = 0;
    for (int k = 0; k < r->n_act; k++) {
        active *a = slot(r, k);
        if (a->status == 0 && (a->steps_left > 0 || a->writes > 0)) {
            fail_running(r, a, RINGD_ERING, "%s #%" PRIu64 " failed: lost %s neighbour %s (%s): %s",
                         a->job->label, a->job->seq, side == LINK_LEFT ? "left" : "right",
                         peer->name, peer->address, why);
            break; /* the others went with it */
        }
    }
    advance(r);
}

static void on_abort(void *data, const frame_abort *ab)
{
    ring *r = data;
    active *a = find_active(r, r->epoch, ab->seq);
    if (a) {
        /* The first failure wins; an abort of a collective that already
         * failed here stops, so each abort goes round the ring once. */
        if (a->status == 0) fail_abort(r, a, ab->code, "%s", ab->reason);
    } else if (ab->seq >= r->stats.seq && !find_abort(r, ab->seq)) {
        /* Not started here yet: remember it, and pass it on now. */
        if (r->n_aborts == MAX_ABORTS) r->n_aborts--;
        pending_abort *p = &r->aborts[r->n_aborts++];
        p->seq = ab->seq;
        p->code = ab->code;
        snprintf(p->reason, sizeof p->reason, "%s", ab->reason);
        send_abort(r, ab);
    }
    advance(r);
}

static int protocol_error(ring *r, active *a, char *why, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static int protocol_error(ring *r, active *a, char *why, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
    fail_running(r, a, RINGD_EPROTO, "%s #%" PRIu64 ": protocol error from left neighbour %s: %s",
                 a->job->label, a->job->seq, neighbour(r, -1), why);
    drop_links(r);
    return RINGD_EPROTO;
}

const char *ring_coll_name(int kind)
{
    const char *name = ringd_coll_name((ringd_coll)kind);
    return name ? name : "?";
}

void ring_describe(char *out, size_t len, int kind, uint64_t count, int dtype, int op, int root)
{
    const char *dn = ringd_dtype_name(dtype), *on = ringd_op_name(op);
    if (kind == RINGD_COLL_BARRIER)
        snprintf(out, len, "barrier");
    else if (kind == RINGD_COLL_BROADCAST)
        snprintf(out, len, "broadcast of %" PRIu64 " x %s from rank %d", count, dn ? dn : "?",
                 root);
    else
        snprintf(out, len, "%s of %" PRIu64 " x %s %s", ring_coll_name(kind), count, dn ? dn : "?",
                 on ? on : "?");
}

/* Ranks of host h, for messages: "rank 3" or "ranks 2-3". */
static void host_ranks(const ring *r, int h, char *out, size_t len)
{
    int first = cfg_first_rank(r->cfg, (size_t)h), k = r->cfg->hosts[h].local_clients;
    if (k == 1)
        snprintf(out, len, "rank %d", first);
    else
        snprintf(out, len, "ranks %d-%d", first, first + k - 1);
}

static int on_data(void *data, const frame_data *d, uint8_t **dst, char *why, size_t whylen)
{
    ring *r = data;
    /* A frame of a collective queued here but not started starts it: the
     * left neighbour runs it already, and frames of those running here may
     * be behind it. One not submitted here yet waits in the socket. */
    while (d->seq >= r->stats.seq && r->next_start && ring_up(r) && r->n_act < MAX_ACTIVE)
        start(r);
    active *a = find_active(r, d->epoch, d->seq);
    if (!a && d->seq >= r->stats.seq) {
        if (!r->early_set || r->early_seq != d->seq || r->early_epoch != d->epoch) {
            r->early_set = 1;
            r->early_epoch = d->epoch;
            r->early_seq = d->seq;
            r->early_ns = uv_hrtime();
        }
        return LINK_RECV_PAUSE;
    }
    if (!a) return LINK_RECV_SKIP;
    ring_job *j = a->job;
    /* Frames of one that failed here are late, not wrong. */
    if (a->status != 0) return LINK_RECV_SKIP;
    /* How long this host waited for its left neighbour: stragglers. */
    if (!a->got_data) {
        a->got_data = 1;
        a->wait_ns = uv_hrtime() - a->start_ns;
        a->delta_us[r->me] = (int32_t)(a->wait_ns / 1000);
    }

    if (d->kind != j->kind || d->count != j->count || d->dtype != j->dtype || d->op != j->op ||
        (j->kind == RINGD_COLL_BROADCAST && d->root != (uint32_t)j->root)) {
        char theirs[160], ours[160], lr[32], mr[32];
        int left = mod(r->me - 1, r->n);
        ring_describe(theirs, sizeof theirs, d->kind, d->count, d->dtype, d->op, (int)d->root);
        ring_describe(ours, sizeof ours, j->kind, j->count, j->dtype, j->op, j->root);
        host_ranks(r, left, lr, sizeof lr);
        host_ranks(r, r->me, mr, sizeof mr);
        fail_abort(r, a, RINGD_EMISMATCH,
                   "%s #%" PRIu64 " differs between ranks: host %s (%s) has %s, host %s "
                   "(%s) has %s",
                   j->label, j->seq, r->cfg->hosts[left].name, lr, theirs,
                   r->cfg->hosts[r->me].name, mr, ours);
        return LINK_RECV_SKIP;
    }
    if (d->name_tag && j->name_tag && d->name_tag != j->name_tag) {
        char lr[32], mr[32];
        int left = mod(r->me - 1, r->n);
        host_ranks(r, left, lr, sizeof lr);
        host_ranks(r, r->me, mr, sizeof mr);
        fail_abort(r, a, RINGD_EMISMATCH,
                   "%s #%" PRIu64 " differs between ranks: host %s (%s) submitted a collective "
                   "of the same shape under another name, host %s (%s) this one; are the ranks "
                   "out of step (after an error, did every rank retry the same collective)?",
                   j->label, j->seq, r->cfg->hosts[left].name, lr, r->cfg->hosts[r->me].name, mr);
        return LINK_RECV_SKIP;
    }

    int c = recv_chunk(r, a, d->step);
    if (c < 0) return protocol_error(r, a, why, whylen, "no data expected at step %u", d->step);
    if (d->chunk != (uint32_t)c)
        return protocol_error(r, a, why, whylen, "step %u carries chunk %u, expected chunk %d",
                              d->step, d->chunk, c);
    if (d->offset != a->recv_off[d->step])
        return protocol_error(r, a, why, whylen, "step %u: offset %" PRIu64 ", expected %" PRIu64,
                              d->step, d->offset, a->recv_off[d->step]);
    uint64_t coff, clen;
    chunk_range(r, a, c, &coff, &clen);
    if (d->length == 0 || d->length % a->esize != 0 || d->length > clen - d->offset)
        return protocol_error(r, a, why, whylen,
                              "step %u: %u bytes at offset %" PRIu64 " do not fit chunk %d "
                              "(%" PRIu64 " bytes of %zu-byte elements)",
                              d->step, d->length, d->offset, c, clen, a->esize);

    if (reduces(j) && d->step < r->n - 1) {
        if (d->length > r->staging_cap) {
            uint8_t *p = realloc(r->staging, d->length);
            if (!p) {
                fail_running(r, a, RINGD_ENOMEM,
                             "%s #%" PRIu64 ": out of memory for a %u-byte segment", j->label,
                             j->seq, d->length);
                drop_links(r);
                snprintf(why, whylen, "out of memory");
                return RINGD_ENOMEM;
            }
            r->staging = p;
            r->staging_cap = d->length;
        }
        *dst = r->staging;
    } else {
        *dst = j->buf + coff + d->offset;
        a->reading = 1;
    }
    return LINK_RECV_INTO;
}

static void on_payload(void *data, const frame_data *d, int status, const char *why)
{
    ring *r = data;
    active *a = find_active(r, d->epoch, d->seq);
    if (!a) return; /* cannot happen: running jobs complete only after their reads */
    ring_job *j = a->job;
    a->reading = 0;
    if (status < 0 && a->status == 0)
        fail_abort(r, a, status, "%s #%" PRIu64 " failed at step %u: %s", j->label, j->seq, d->step,
                   why);
    if (a->status != 0) {
        advance(r);
        return;
    }
    int g = d->step, c = (int)d->chunk;
    uint64_t coff, clen;
    chunk_range(r, a, c, &coff, &clen);
    uint8_t *p = j->buf + coff + d->offset;
    size_t elems = d->length / a->esize;
    double wsum = 0;

    if (reduces(j) && g < r->n - 1) {
        reduce_apply(j->dtype, j->op, p, r->staging, elems);
        wsum = d->wsum + j->weight;
        /* The last reduce-scatter step completes this host's own chunk. */
        if (g == r->n - 2) {
            double divisor = j->op == RINGD_WMEAN ? wsum : j->ranks;
            if (j->op == RINGD_WMEAN && !(divisor > 0 && isfinite(divisor))) {
                fail_abort(r, a, RINGD_EINVAL,
                           "%s #%" PRIu64 ": wmean needs positive weights; they sum to %g",
                           j->label, j->seq, divisor);
                advance(r);
                return;
            }
            reduce_finish(j->dtype, j->op, p, elems, divisor);
        }
    }
    a->recv_off[g] += d->length;
    if (a->recv_off[g] == clen) a->steps_left--;
    /* Allgather of an allreduce: the chunk carries the delta of the host
     * that completed it (this one at the first allgather step). */
    int32_t delta = FRAME_DELTA_UNKNOWN;
    if (j->kind == RINGD_COLL_ALLREDUCE && g >= r->n - 1) {
        if (d->delta_us != FRAME_DELTA_UNKNOWN) a->delta_us[mod(c - 1, r->n)] = d->delta_us;
        delta = d->delta_us;
    } else if (j->kind == RINGD_COLL_ALLREDUCE && g == r->n - 2) {
        delta = a->delta_us[r->me];
    }
    if (send_chunk(r, a, g + 1) == c)
        send_segment(r, a, g + 1, c, d->offset, d->length, wsum, delta);
    advance(r);
}

static void on_sent(void *data, void *ctx, int status)
{
    ring *r = data;
    active *a = ctx;
    a->writes--;
    if (status < 0 && a->status == 0)
        fail_running(r, a, RINGD_ERING,
                     "%s #%" PRIu64 " failed: sending to right neighbour %s failed", a->job->label,
                     a->job->seq, neighbour(r, 1));
    advance(r);
}

/* ---- lifecycle ---- */

int ring_new(ring **out, uv_loop_t *loop, const cfg *c, int me)
{
    ring *r = calloc(1, sizeof *r);
    if (!r) return RINGD_ENOMEM;
    r->loop = loop;
    r->cfg = c;
    r->me = me;
    r->n = (int)c->n_hosts;
    int rc = 0;
    for (int k = 0; k < MAX_ACTIVE && rc == 0; k++) {
        r->act[k].recv_off = calloc(2 * (size_t)r->n, sizeof *r->act[k].recv_off);
        r->act[k].delta_us = calloc((size_t)r->n, sizeof *r->act[k].delta_us);
        if (!r->act[k].recv_off || !r->act[k].delta_us) rc = RINGD_ENOMEM;
    }
    static const links_callbacks cb = {on_up,   on_down,  on_data,  on_payload,
                                       on_sent, on_abort, on_epoch, on_ready};
    if (rc == 0) rc = links_new(&r->links, loop, c, me, &cb, r);
    if (rc == 0 && c->algorithm == CFG_ALG_STAR) rc = star_new(&r->star, loop, c, me);
    if (rc < 0) {
        for (int k = 0; k < MAX_ACTIVE; k++) {
            free(r->act[k].recv_off);
            free(r->act[k].delta_us);
        }
        free(r);
        return rc;
    }
    uv_timer_init(loop, &r->tick);
    r->tick.data = r;
    *out = r;
    return 0;
}

void ring_set_key(ring *r, const auth_key *key)
{
    links_set_key(r->links, key);
}

int ring_start(ring *r, char *err, size_t errlen)
{
    if (r->star) return star_start(r->star, err, errlen);
    return links_start(r->links, err, errlen);
}

void ring_submit(ring *r, ring_job *j)
{
    if (r->star) {
        star_submit(r->star, j);
        return;
    }
    j->next = NULL;
    if (r->tail)
        r->tail->next = j;
    else
        r->head = j;
    r->tail = j;
    if (!r->next_start) r->next_start = j;
    advance(r);
}

void ring_cancel(ring *r, ring_job *j, int status, const char *message)
{
    for (int k = 0; k < r->n_act; k++) {
        active *a = slot(r, k);
        if (a->job != j) continue;
        if (a->status == 0)
            fail_abort(r, a, status, "%s #%" PRIu64 " failed: %s", j->label, j->seq, message);
        advance(r);
        return;
    }
    /* Not started: it still takes its seq, and fails as it starts. */
    if (j->preset_status == 0) {
        j->preset_status = status;
        j->preset_message = message;
    }
}

static void on_tick_closed(uv_handle_t *h)
{
    ring *r = h->data;
    void (*done)(void *) = r->done;
    void *data = r->done_data;
    free(r->staging);
    for (int k = 0; k < MAX_ACTIVE; k++) {
        free(r->act[k].recv_off);
        free(r->act[k].delta_us);
    }
    free(r);
    if (done) done(data);
}

static void on_links_closed(void *data)
{
    ring *r = data;
    r->links = NULL;
    uv_close((uv_handle_t *)&r->tick, on_tick_closed);
}

static void on_star_closed(void *data)
{
    ring *r = data;
    r->star = NULL;
    links_close(r->links, on_links_closed, r);
}

void ring_close(ring *r, int status, const char *message, void (*done)(void *), void *data)
{
    r->closing = 1;
    r->done = done;
    r->done_data = data;
    if (r->star) {
        star_close(r->star, status, message, on_star_closed, r);
        return;
    }
    for (int k = 0; k < r->n_act; k++) {
        active *a = slot(r, k);
        fail_here(a, status, "%s", message);
        /* Closing the links stops a payload being read. */
        a->reading = 0;
    }
    drain_queue(r, status, message);
    /* Closing the links cancels the pending sends; their callbacks finish
     * the running jobs before on_links_closed runs. */
    links_close(r->links, on_links_closed, r);
    advance(r);
}

const links *ring_links(const ring *r)
{
    return r->links;
}

const star *ring_star(const ring *r)
{
    return r->star;
}

void ring_get_stats(const ring *r, ring_stats *out)
{
    if (r->star)
        star_get_stats(r->star, out);
    else
        *out = r->stats;
}
