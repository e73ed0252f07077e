/*
 * ring.c - bandwidth-optimal ring allreduce, pipelined by segments.
 *
 * The buffer of `count` elements is cut into N chunks (chunk c has count/N
 * elements, one more when c < count%N). Host r runs 2(N-1) steps: in
 * reduce-scatter step g (0 <= g < N-1) it sends chunk r-g and receives chunk
 * r-g-1, which it reduces into its own copy; after N-1 steps it holds chunk
 * r+1 fully reduced. In allgather step g it sends chunk r+1-(g-N+1) and
 * receives chunk r-(g-N+1), which it stores. All indices are mod N.
 *
 * The chunk a host receives at step g is the one it sends at step g+1, so a
 * received segment is reduced (or stored) and forwarded at once, with the
 * same offset and length: segments stream around the ring and the link never
 * waits for a whole step. Only the segments of step 0 are cut here; every
 * later step forwards them as they come.
 *
 * Each element is reduced in the same order on every run: chunk c starts at
 * host c and travels c+1, c+2, ..., each adding its own value in the same
 * position (dst = own (op) received). Timing changes nothing, and the
 * allgather copies the final bytes, so every rank gets the same bits.
 *
 * The send of a segment reads the user's buffer in place; a receive in
 * allgather writes it in place. Neither can race: a segment comes back to a
 * host only after its right neighbour has received that host's own send of
 * the same bytes, i.e. after the kernel has taken them.
 */
#include "ring.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "reduce.h"

#define TICK_MS 100 /* granularity of collective deadlines */

typedef struct {
    ring_job *job; /* the running collective, or NULL */
    size_t esize;
    uint64_t base, extra; /* chunk c has base + (c < extra) elements */
    unsigned steps_left;  /* steps whose chunk has not fully arrived */
    size_t writes;        /* sends not yet completed by the links */
    int status;
    char message[RING_MAX_MESSAGE];
} active;

struct ring {
    uv_loop_t *loop;
    const cfg *cfg;
    int me, n;
    links *links;
    ring_job *head, *tail; /* queue; the head is the active job when one runs */
    active cur;
    uint64_t *recv_off; /* per step: the next byte offset expected */
    uint8_t *staging;   /* where reduce-scatter payloads land before reduction */
    size_t staging_cap;
    uv_timer_t tick;
    int advancing;
    int closing;
    ring_stats stats;
    void (*done)(void *);
    void *done_data;
};

static void advance(ring *r);
static void on_tick(uv_timer_t *t);

/* ---- geometry ---- */

static int mod(int x, int n)
{
    return ((x % n) + n) % n;
}

static int recv_chunk(const ring *r, int g)
{
    return g < r->n - 1 ? mod(r->me - g - 1, r->n) : mod(r->me - (g - (r->n - 1)), r->n);
}

static int send_chunk(const ring *r, int g)
{
    return g < r->n - 1 ? mod(r->me - g, r->n) : mod(r->me + 1 - (g - (r->n - 1)), r->n);
}

static uint64_t chunk_bytes(const active *a, int c)
{
    return (a->base + ((uint64_t)c < a->extra)) * a->esize;
}

static uint64_t chunk_start(const active *a, int c)
{
    uint64_t uc = (uint64_t)c;
    return (uc * a->base + (uc < a->extra ? uc : a->extra)) * a->esize;
}

/* ---- failure ---- */

static void fail(ring *r, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Records the first failure of the running collective. Its frames may be
 * half sent or half read, so both links are dropped: that also fails the
 * collective at the neighbours at once, and around the ring from there,
 * instead of leaving them to their deadlines. */
static void fail(ring *r, int status, const char *fmt, ...)
{
    active *a = &r->cur;
    if (!a->job || a->status != 0) return;
    a->status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->message, sizeof a->message, fmt, ap);
    va_end(ap);
    log_warn("%s", a->message);
    if (r->n > 1) links_reset(r->links, "the collective on this host failed");
}

/* ---- sending ---- */

static void send_segment(ring *r, int g, int c, uint64_t off, uint32_t len)
{
    active *a = &r->cur;
    ring_job *j = a->job;
    frame_data d = {.seq = j->seq,
                    .epoch = 0, /* stamped by the link */
                    .step = (uint16_t)g,
                    .dtype = (uint8_t)j->dtype,
                    .op = (uint8_t)j->op,
                    .chunk = (uint32_t)c,
                    .length = len,
                    .count = j->count,
                    .offset = off};
    int rc = links_send_data(r->links, &d, j->buf + chunk_start(a, c) + off);
    if (rc < 0) {
        fail(r, RINGD_ERING, "%s #%" PRIu64 ": cannot send to right neighbour %s: %s", j->label,
             j->seq, r->cfg->hosts[(r->me + 1) % r->n].name, ringd_strerror(rc));
        return;
    }
    a->writes++;
}

/* ---- the running collective ---- */

static void start(ring *r, ring_job *j)
{
    active *a = &r->cur;
    memset(a, 0, sizeof *a);
    a->job = j;
    j->seq = r->stats.seq++;
    a->esize = ringd_dtype_size(j->dtype);

    if (r->n == 1 || j->count == 0) {
        reduce_finish(j->dtype, j->op, j->buf, j->count, j->ranks);
        return;
    }
    a->base = j->count / (uint64_t)r->n;
    a->extra = j->count % (uint64_t)r->n;
    for (int g = 0; g < 2 * (r->n - 1); g++) {
        r->recv_off[g] = 0;
        if (chunk_bytes(a, recv_chunk(r, g)) > 0) a->steps_left++;
    }
    log_debug("%s #%" PRIu64 ": %" PRIu64 " x %s %s started", j->label, j->seq, j->count,
              ringd_dtype_name(j->dtype), ringd_op_name(j->op));

    /* Step 0: this host's own chunk, cut into segments. */
    uint32_t seg = r->cfg->segment_bytes / (uint32_t)a->esize * (uint32_t)a->esize;
    int c = send_chunk(r, 0);
    uint64_t bytes = chunk_bytes(a, c);
    for (uint64_t off = 0; off < bytes && a->status == 0; off += seg)
        send_segment(r, 0, c, off, (uint32_t)(bytes - off < seg ? bytes - off : seg));

    /* The left neighbour may have started first; its frames wait for us. */
    links_resume(r->links);
}

static int finished(const active *a)
{
    return (a->status != 0 || a->steps_left == 0) && a->writes == 0;
}

static void complete(ring *r)
{
    active *a = &r->cur;
    ring_job *j = a->job;
    a->job = NULL;
    r->head = j->next;
    if (!r->head) r->tail = NULL;
    if (a->status == 0) {
        r->stats.done++;
        log_debug("%s #%" PRIu64 " done", j->label, j->seq);
    } else {
        r->stats.failed++;
        snprintf(r->stats.last_error, sizeof r->stats.last_error, "%s", a->message);
    }
    j->done(j, a->status, a->status ? a->message : NULL);
}

static int ring_up(const ring *r)
{
    return r->n == 1 || (links_state(r->links, LINK_LEFT) == LINK_UP &&
                         links_state(r->links, LINK_RIGHT) == LINK_UP);
}

/* Ends queued jobs that cannot run: the ring is closing. */
static void drain_queue(ring *r, int status, const char *message)
{
    while (r->head && r->head != r->cur.job) {
        ring_job *j = r->head;
        r->head = j->next;
        if (!r->head) r->tail = NULL;
        r->stats.failed++;
        j->done(j, status, message);
    }
}

/* The one place that moves collectives forward: completes the running one
 * when it is finished and starts the next when the ring is up. Every event
 * ends here. */
static void advance(ring *r)
{
    if (r->advancing) return;
    r->advancing = 1;
    for (;;) {
        if (r->cur.job) {
            if (!finished(&r->cur)) break;
            complete(r);
            continue;
        }
        if (!r->head) break;
        if (r->closing) {
            drain_queue(r, RINGD_ESHUTDOWN, "ringd is shutting down");
            break;
        }
        if (!ring_up(r)) break;
        start(r, r->head);
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

/* Says what a collective past its deadline was waiting for. */
static void describe_wait(const ring *r, char *out, size_t len)
{
    const active *a = &r->cur;
    if (!a->job) {
        const char *left = r->cfg->hosts[(r->me + r->n - 1) % r->n].name;
        const char *right = r->cfg->hosts[(r->me + 1) % r->n].name;
        link_state ls = links_state(r->links, LINK_LEFT), rs = links_state(r->links, LINK_RIGHT);
        snprintf(out, len,
                 "the ring is not formed: right link to %s (%s) is %s%s%s; left link "
                 "from %s is %s%s%s",
                 right, r->cfg->hosts[(r->me + 1) % r->n].address, links_state_name(rs),
                 *links_last_error(r->links, LINK_RIGHT) ? ": " : "",
                 links_last_error(r->links, LINK_RIGHT), left, links_state_name(ls),
                 *links_last_error(r->links, LINK_LEFT) ? ": " : "",
                 links_last_error(r->links, LINK_LEFT));
        return;
    }
    int g = 0;
    while (g < 2 * (r->n - 1) && r->recv_off[g] == chunk_bytes(a, recv_chunk(r, g)))
        g++;
    if (g < 2 * (r->n - 1))
        snprintf(out, len,
                 "at step %d of %d, waiting for data from left neighbour %s "
                 "(has every rank submitted this collective?)",
                 g + 1, 2 * (r->n - 1), r->cfg->hosts[(r->me + r->n - 1) % r->n].name);
    else
        snprintf(out, len, "all data received, waiting for sends to right neighbour %s",
                 r->cfg->hosts[(r->me + 1) % r->n].name);
}

static void on_tick(uv_timer_t *t)
{
    ring *r = t->data;
    uint64_t now = uv_now(r->loop);
    char why[512];
    ring_job *j = r->head;
    if (!j || j->deadline > now) return;
    describe_wait(r, why, sizeof why);
    if (r->cur.job == j) {
        fail(r, RINGD_ETIMEDOUT, "%s #%" PRIu64 " (%" PRIu64 " x %s %s) timed out: %s", j->label,
             j->seq, j->count, ringd_dtype_name(j->dtype), ringd_op_name(j->op), why);
    } else {
        char msg[RING_MAX_MESSAGE];
        snprintf(msg, sizeof msg, "%s (%" PRIu64 " x %s %s) timed out before it could start: %s",
                 j->label, j->count, ringd_dtype_name(j->dtype), ringd_op_name(j->op), why);
        log_warn("%s", msg);
        r->head = j->next;
        if (!r->head) r->tail = NULL;
        r->stats.failed++;
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

static void on_down(void *data, link_side side, const char *why)
{
    ring *r = data;
    active *a = &r->cur;
    if (a->job && a->steps_left > 0) {
        int peer = side == LINK_LEFT ? (r->me + r->n - 1) % r->n : (r->me + 1) % r->n;
        fail(r, RINGD_ERING, "%s #%" PRIu64 " failed: lost %s neighbour %s (%s): %s", a->job->label,
             a->job->seq, side == LINK_LEFT ? "left" : "right", r->cfg->hosts[peer].name,
             r->cfg->hosts[peer].address, why);
    }
    advance(r);
}

static int protocol_error(ring *r, char *why, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int protocol_error(ring *r, char *why, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
    fail(r, RINGD_EPROTO, "%s #%" PRIu64 ": protocol error from left neighbour %s: %s",
         r->cur.job->label, r->cur.job->seq, r->cfg->hosts[(r->me + r->n - 1) % r->n].name, why);
    return RINGD_EPROTO;
}

static int on_data(void *data, const frame_data *d, uint8_t **dst, char *why, size_t whylen)
{
    ring *r = data;
    active *a = &r->cur;
    ring_job *j = a->job;

    /* Frames of a collective this host has not started wait in the socket. */
    if (!j || a->status != 0 || d->seq > j->seq) return LINK_RECV_PAUSE;
    if (d->seq < j->seq) {
        log_debug("dropping stale frame of collective #%" PRIu64, d->seq);
        return LINK_RECV_SKIP;
    }
    if (d->count != j->count || d->dtype != j->dtype || d->op != j->op) {
        const char *left = r->cfg->hosts[(r->me + r->n - 1) % r->n].name;
        fail(r, RINGD_EMISMATCH,
             "%s #%" PRIu64 " differs between hosts: left neighbour %s has %" PRIu64 " x %s %s, "
             "host %s has %" PRIu64 " x %s %s",
             j->label, j->seq, left, d->count,
             ringd_dtype_name(d->dtype) ? ringd_dtype_name(d->dtype) : "?",
             ringd_op_name(d->op) ? ringd_op_name(d->op) : "?", r->cfg->hosts[r->me].name, j->count,
             ringd_dtype_name(j->dtype), ringd_op_name(j->op));
        snprintf(why, whylen, "collective mismatch");
        return RINGD_EMISMATCH;
    }

    int steps = 2 * (r->n - 1);
    if (d->step >= steps)
        return protocol_error(r, why, whylen, "step %u out of range (%d steps)", d->step, steps);
    int c = recv_chunk(r, d->step);
    if (d->chunk != (uint32_t)c)
        return protocol_error(r, why, whylen, "step %u carries chunk %u, expected chunk %d",
                              d->step, d->chunk, c);
    if (d->offset != r->recv_off[d->step])
        return protocol_error(r, why, whylen, "step %u: offset %" PRIu64 ", expected %" PRIu64,
                              d->step, d->offset, r->recv_off[d->step]);
    uint64_t cb = chunk_bytes(a, c);
    if (d->length == 0 || d->length % a->esize != 0 || d->length > cb - d->offset)
        return protocol_error(r, why, whylen,
                              "step %u: %u bytes at offset %" PRIu64 " do not fit chunk %d "
                              "(%" PRIu64 " bytes of %zu-byte elements)",
                              d->step, d->length, d->offset, c, cb, a->esize);

    if (d->step < r->n - 1) {
        if (d->length > r->staging_cap) {
            uint8_t *p = realloc(r->staging, d->length);
            if (!p) {
                fail(r, RINGD_ENOMEM, "%s #%" PRIu64 ": out of memory for a %u-byte segment",
                     j->label, j->seq, d->length);
                snprintf(why, whylen, "out of memory");
                return RINGD_ENOMEM;
            }
            r->staging = p;
            r->staging_cap = d->length;
        }
        *dst = r->staging;
    } else {
        *dst = j->buf + chunk_start(a, c) + d->offset;
    }
    return LINK_RECV_INTO;
}

static void on_payload(void *data, const frame_data *d)
{
    ring *r = data;
    active *a = &r->cur;
    ring_job *j = a->job;
    int g = d->step, c = (int)d->chunk;
    uint8_t *p = j->buf + chunk_start(a, c) + d->offset;
    size_t elems = d->length / a->esize;

    if (g < r->n - 1) {
        reduce_apply(j->dtype, j->op, p, r->staging, elems);
        /* The last reduce-scatter step completes this host's own chunk. */
        if (g == r->n - 2) reduce_finish(j->dtype, j->op, p, elems, j->ranks);
    }
    r->recv_off[g] += d->length;
    if (r->recv_off[g] == chunk_bytes(a, c)) a->steps_left--;
    if (g + 1 < 2 * (r->n - 1)) send_segment(r, g + 1, c, d->offset, d->length);
    advance(r);
}

static void on_sent(void *data, int status)
{
    ring *r = data;
    active *a = &r->cur;
    a->writes--;
    if (status < 0 && a->job)
        fail(r, RINGD_ERING, "%s #%" PRIu64 " failed: sending to right neighbour %s failed",
             a->job->label, a->job->seq, r->cfg->hosts[(r->me + 1) % r->n].name);
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
    r->recv_off = calloc(2 * (size_t)r->n, sizeof *r->recv_off);
    static const links_callbacks cb = {on_up, on_down, on_data, on_payload, on_sent};
    int rc = r->recv_off ? links_new(&r->links, loop, c, me, &cb, r) : RINGD_ENOMEM;
    if (rc < 0) {
        free(r->recv_off);
        free(r);
        return rc;
    }
    uv_timer_init(loop, &r->tick);
    r->tick.data = r;
    *out = r;
    return 0;
}

int ring_start(ring *r, char *err, size_t errlen)
{
    return links_start(r->links, err, errlen);
}

void ring_submit(ring *r, ring_job *j)
{
    j->next = NULL;
    if (r->tail)
        r->tail->next = j;
    else
        r->head = j;
    r->tail = j;
    advance(r);
}

static void on_tick_closed(uv_handle_t *h)
{
    ring *r = h->data;
    void (*done)(void *) = r->done;
    void *data = r->done_data;
    free(r->staging);
    free(r->recv_off);
    free(r);
    if (done) done(data);
}

static void on_links_closed(void *data)
{
    ring *r = data;
    r->links = NULL;
    uv_close((uv_handle_t *)&r->tick, on_tick_closed);
}

void ring_close(ring *r, int status, const char *message, void (*done)(void *), void *data)
{
    r->closing = 1;
    r->done = done;
    r->done_data = data;
    if (r->cur.job && r->cur.status == 0) {
        r->cur.status = status;
        snprintf(r->cur.message, sizeof r->cur.message, "%s", message);
    }
    drain_queue(r, status, message);
    /* Closing the links cancels the pending sends; their callbacks finish
     * the running job before on_links_closed runs. */
    links_close(r->links, on_links_closed, r);
    advance(r);
}

const links *ring_links(const ring *r)
{
    return r->links;
}

void ring_get_stats(const ring *r, ring_stats *out)
{
    *out = r->stats;
}
