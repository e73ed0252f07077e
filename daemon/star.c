/*
 * star.c - the star baseline: one host collects, reduces and sends back.
 *
 * Host `star_root` (the root, or hub) accepts one TCP connection from each
 * other host (a leaf); a leaf connects to the root with a HELLO, as a ring
 * host connects to its right neighbour, and the root answers WELCOME.
 *
 * An allreduce of B bytes runs in segments of segment_size. Every leaf sends
 * its whole buffer at once, segment by segment (DATA step 0, straight from
 * the job's buffer). The root reads each leaf's segments into a window of
 * STAR_WINDOW segments per leaf and, as soon as segment k has arrived from
 * every leaf, reduces it into its own buffer in a fixed order (the root's
 * value, then the leaves' in host order), finishes it (MEAN, WMEAN) and sends
 * it to every leaf (DATA step 1), which reads it straight into its buffer.
 * A leaf that runs a window ahead is not read until the others catch up; TCP
 * then holds it back. Every rank gets the root's bytes, so the result is the
 * same bits everywhere and on every run. A leaf's result segment k can only
 * arrive after the root has read the leaf's own segment k, so receiving in
 * place never overwrites bytes still to be sent.
 *
 * The root sends (N-1)B and receives (N-1)B: its link is the bottleneck, and
 * the time grows about linearly with N, where the ring's stays near 2B.
 *
 * Collectives run one at a time, in submission order, and only when every
 * connection is up. A failure that leaves the streams usable (hosts
 * disagree, a deadline, a preset failure) travels as an ABORT: a leaf tells
 * the root, the root tells every leaf, and late frames of the collective are
 * skipped by their seq. A lost connection fails the running collective with
 * RINGD_ERING naming the host, on the root and (by ABORT) on the other
 * leaves; the leaf reconnects by itself.
 */
#include "star.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "net.h"
#include "reduce.h"

#define STAR_WINDOW 4          /* segments of each leaf buffered at the root */
#define STAR_HELLO 0x53544152u /* "STAR" in HELLO.epoch: not a ring link */
#define TICK_MS 100
#define MAX_PENDING 16
#define MAX_ABORTS 8
#define SKIP_BUF (64 << 10)
#define CONTROL_CAP (FRAME_HEADER_SIZE + FRAME_MAX_CONTROL_BODY)
#define DATA_CAP (FRAME_HEADER_SIZE + FRAME_DATA_HEADER_SIZE)

typedef enum { RD_HEADER, RD_BODY, RD_PAYLOAD, RD_SKIP, RD_PAUSED } rd_state;

typedef struct conn {
    uv_tcp_t tcp;
    uv_timer_t timer; /* handshake deadline */
    star *owner;
    int host; /* the peer's host index; -1 until its HELLO is accepted */
    int up;   /* handshake done: carries frames */
    int closing;
    int refusing;
    struct conn *next; /* in owner->pending */
    char peer[64];

    rd_state rd;
    size_t got, need;
    uint8_t hdr_buf[FRAME_HEADER_SIZE];
    frame_header hdr;
    uint8_t body[FRAME_MAX_CONTROL_BODY];
    frame_data data;
    uint8_t *dst;
} conn;

/* Another host as this one sees it: the root for a leaf, each leaf for the
 * root. */
typedef struct {
    conn *c;
    link_state state;
    char error[256];
    /* Root: what arrived from this leaf for the running collective. */
    uint8_t *window; /* STAR_WINDOW segments */
    uint64_t recv_off, recv_segs;
    double weight;
} peer;

typedef struct {
    uint64_t seq;
    int32_t code;
    char reason[FRAME_MAX_TEXT + 1];
} pending_abort;

/* The running collective. */
typedef struct {
    ring_job *job;
    size_t esize;
    uint64_t bytes, nseg;
    uint32_t seg;
    uint64_t done_segs; /* root: reduced and sent; leaf: result segments in */
    uint64_t recv_off;  /* leaf: result bytes in */
    size_t writes;      /* DATA frames not yet written */
    int reading;        /* a leaf reads a result payload into the job's buffer */
    int status;
    char message[RING_MAX_MESSAGE];
} run;

typedef struct {
    uv_write_t req;
    star *owner;
    int data; /* counts in run.writes */
    uint8_t buf[];
} send_req;

struct star {
    uv_loop_t *loop;
    const cfg *cfg;
    int me, n, root;
    peer *peers; /* by host index; the root's own entry and a leaf's others unused */
    uv_tcp_t listener;
    int listening;
    uv_timer_t retry, tick, resume;
    uv_getaddrinfo_t gai;
    int resolving;
    uv_connect_t connect_req;
    uint32_t backoff_ms;
    log_ratelimit connect_rl;
    conn *pending;
    int n_pending;

    ring_job *head, *tail;
    run run;
    pending_abort aborts[MAX_ABORTS];
    int n_aborts;
    ring_stats stats;
    links_stats lstats;
    int was_up, advancing;

    int closing;
    int open_handles;
    void (*done)(void *);
    void *done_data;
    uint8_t skip[SKIP_BUF];
};

static void advance(star *s);
static void on_tick(uv_timer_t *t);
static void on_resume(uv_timer_t *t);
static void conn_close(conn *c, const char *why);
static void start_reading(conn *c);
static void start_connect(star *s);

static int is_root(const star *s)
{
    return s->me == s->root;
}

static const char *host_name(const star *s, int h)
{
    return s->cfg->hosts[h].name;
}

/* ---- handles ---- */

static void release(star *s)
{
    if (--s->open_handles == 0 && s->closing) {
        void (*done)(void *) = s->done;
        void *data = s->done_data;
        for (int h = 0; h < s->n; h++)
            free(s->peers[h].window);
        free(s->peers);
        free(s);
        if (done) done(data);
    }
}

static void handle_closed(uv_handle_t *h)
{
    release(h->data);
}

/* ---- failing the running collective ---- */

/* Re-offers paused frames from the loop: a window slot is free, a
 * collective started, or one failed and its frames are to be skipped. */
static void resume_soon(star *s)
{
    if (!s->closing) uv_timer_start(&s->resume, on_resume, 0, 0);
}

static void send_abort(star *s, conn *c, const frame_abort *a);

static int record_v(run *r, int status, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

static int record_v(run *r, int status, const char *fmt, va_list ap)
{
    if (!r->job || r->status != 0) return 0;
    r->status = status;
    vsnprintf(r->message, sizeof r->message, fmt, ap);
    log_warn("%s", r->message);
    return 1;
}

/* Fails the running collective and tells the others: a leaf tells the root,
 * the root every leaf but `except` (the one it heard it from, or lost). */
static void fail_run(star *s, int except, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void fail_run(star *s, int except, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int first = record_v(&s->run, status, fmt, ap);
    va_end(ap);
    if (!first || s->n == 1) return;
    resume_soon(s);
    frame_abort ab = {.seq = s->run.job->seq, .code = status};
    snprintf(ab.reason, sizeof ab.reason, "%.*s", FRAME_MAX_TEXT, s->run.message);
    for (int h = 0; h < s->n; h++)
        if (h != s->me && h != except && s->peers[h].c && s->peers[h].state == LINK_UP)
            send_abort(s, s->peers[h].c, &ab);
}

/* ---- sending ---- */

static void on_write_done(uv_write_t *req, int status)
{
    send_req *w = (send_req *)req;
    star *s = w->owner;
    if (w->data) {
        s->run.writes--;
        if (status < 0 && s->run.job)
            fail_run(s, -1, RINGD_ERING,
                     "%s #%" PRIu64 " failed: sending on a connection failed: %s",
                     s->run.job->label, s->run.job->seq, uv_strerror(status));
    }
    free(w);
    advance(s);
}

static void send_abort(star *s, conn *c, const frame_abort *a)
{
    send_req *w = malloc(sizeof *w + CONTROL_CAP);
    if (!w) return;
    w->owner = s;
    w->data = 0;
    int n = frame_encode_abort(w->buf, CONTROL_CAP, a);
    uv_buf_t b = uv_buf_init((char *)w->buf, (unsigned)(n > 0 ? n : 0));
    if (n < 0 || uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_write_done) < 0) free(w);
}

/* Sends one DATA frame of the running collective: the payload goes from the
 * job's buffer, not copied, and must stay put until the write is done. */
static void send_data(star *s, int h, uint16_t step, uint64_t off, uint32_t len, double wsum)
{
    run *r = &s->run;
    ring_job *j = r->job;
    peer *p = &s->peers[h];
    if (!p->c || p->state != LINK_UP) {
        fail_run(s, h, RINGD_ERING, "%s #%" PRIu64 ": cannot send to host %s: not connected",
                 j->label, j->seq, host_name(s, h));
        return;
    }
    frame_data d = {.seq = j->seq,
                    .step = step,
                    .dtype = (uint8_t)j->dtype,
                    .op = (uint8_t)j->op,
                    .length = len,
                    .count = j->count,
                    .offset = off,
                    .kind = (uint8_t)j->kind,
                    .wsum = wsum};
    send_req *w = malloc(sizeof *w + DATA_CAP);
    if (!w) {
        fail_run(s, -1, RINGD_ENOMEM, "%s #%" PRIu64 ": out of memory", j->label, j->seq);
        return;
    }
    w->owner = s;
    w->data = 1;
    int n = frame_encode_data(w->buf, DATA_CAP, &d);
    uv_buf_t b[2] = {uv_buf_init((char *)w->buf, (unsigned)n),
                     uv_buf_init((char *)j->buf + off, len)};
    int rc = n < 0 ? UV_EINVAL : uv_write(&w->req, (uv_stream_t *)&p->c->tcp, b, 2, on_write_done);
    if (rc < 0) {
        free(w);
        fail_run(s, h, RINGD_ERING, "%s #%" PRIu64 ": cannot send to host %s: %s", j->label, j->seq,
                 host_name(s, h), uv_strerror(rc));
        return;
    }
    r->writes++;
    s->lstats.bytes_out += len;
}

/* ---- the collective ---- */

static uint32_t seg_len(const run *r, uint64_t k)
{
    uint64_t off = k * r->seg;
    return (uint32_t)(r->bytes - off < r->seg ? r->bytes - off : r->seg);
}

static int all_up(const star *s)
{
    if (s->n == 1) return 1;
    if (!is_root(s)) return s->peers[s->root].state == LINK_UP;
    for (int h = 0; h < s->n; h++)
        if (h != s->me && s->peers[h].state != LINK_UP) return 0;
    return 1;
}

static const pending_abort *find_abort(const star *s, uint64_t seq)
{
    for (int i = 0; i < s->n_aborts; i++)
        if (s->aborts[i].seq == seq) return &s->aborts[i];
    return NULL;
}

static void remember_abort(star *s, const frame_abort *a)
{
    if (find_abort(s, a->seq)) return;
    if (s->n_aborts == MAX_ABORTS) s->n_aborts--;
    pending_abort *p = &s->aborts[s->n_aborts++];
    p->seq = a->seq;
    p->code = a->code;
    snprintf(p->reason, sizeof p->reason, "%s", a->reason);
}

static void start(star *s)
{
    run *r = &s->run;
    ring_job *j = s->head;
    memset(r, 0, sizeof *r);
    r->job = j;
    j->seq = s->stats.seq++;
    r->esize = ringd_dtype_size(j->dtype);
    r->bytes = j->count * r->esize;
    r->seg = s->cfg->segment_bytes / (uint32_t)r->esize * (uint32_t)r->esize;
    r->nseg = (r->bytes + r->seg - 1) / r->seg;

    if (j->preset_status < 0) {
        fail_run(s, -1, j->preset_status, "%s", j->preset_message);
        return;
    }
    const pending_abort *pa = find_abort(s, j->seq);
    if (pa) {
        /* Another host failed it before this host's ranks submitted it; the
         * abort has been passed on already. */
        r->status = pa->code;
        snprintf(r->message, sizeof r->message, "%s", pa->reason);
        log_warn("%s", r->message);
        return;
    }
    if (s->n == 1 || j->count == 0) {
        if (j->count > 0 && j->kind == RINGD_COLL_ALLREDUCE) {
            double divisor = j->op == RINGD_WMEAN ? j->weight : j->ranks;
            if (j->op == RINGD_WMEAN && !(divisor > 0 && isfinite(divisor)))
                fail_run(s, -1, RINGD_EINVAL, "%s #%" PRIu64 ": the weights of all ranks sum to %g",
                         j->label, j->seq, divisor);
            else
                reduce_finish(j->dtype, j->op, j->buf, j->count, divisor);
        }
        r->done_segs = r->nseg;
        r->recv_off = r->bytes;
        return;
    }
    log_debug("%s #%" PRIu64 ": %" PRIu64 " x %s %s started (star)", j->label, j->seq, j->count,
              ringd_dtype_name(j->dtype), ringd_op_name(j->op));
    /* Frames of peers that ran ahead wait in their sockets. */
    resume_soon(s);
    if (is_root(s)) {
        for (int h = 0; h < s->n; h++) {
            peer *p = &s->peers[h];
            p->recv_off = p->recv_segs = 0;
            p->weight = 0;
        }
    } else {
        for (uint64_t k = 0; k < r->nseg && r->status == 0; k++)
            send_data(s, s->root, 0, k * r->seg, seg_len(r, k), j->weight);
    }
}

/* Root: reduces, finishes and sends every segment that has arrived from all
 * leaves, in order. */
static void reduce_ready(star *s)
{
    run *r = &s->run;
    ring_job *j = r->job;
    while (r->status == 0 && r->done_segs < r->nseg) {
        uint64_t k = r->done_segs;
        for (int h = 0; h < s->n; h++)
            if (h != s->me && s->peers[h].recv_segs <= k) return;
        uint32_t len = seg_len(r, k);
        uint8_t *dst = j->buf + k * r->seg;
        double wsum = j->weight;
        for (int h = 0; h < s->n; h++) {
            if (h == s->me) continue;
            reduce_apply(j->dtype, j->op, dst, s->peers[h].window + (k % STAR_WINDOW) * r->seg,
                         len / r->esize);
            wsum += s->peers[h].weight;
        }
        double divisor = j->op == RINGD_WMEAN ? wsum : j->ranks;
        if (j->op == RINGD_WMEAN && !(divisor > 0 && isfinite(divisor))) {
            fail_run(s, -1, RINGD_EINVAL,
                     "%s #%" PRIu64 ": wmean needs positive weights; they sum to %g", j->label,
                     j->seq, divisor);
            return;
        }
        reduce_finish(j->dtype, j->op, dst, len / r->esize, divisor);
        for (int h = 0; h < s->n && r->status == 0; h++)
            if (h != s->me) send_data(s, h, 1, k * r->seg, len, 0);
        r->done_segs++;
        resume_soon(s); /* a window slot is free again */
    }
}

static int finished(const star *s)
{
    const run *r = &s->run;
    if (r->writes > 0 || r->reading) return 0;
    if (r->status != 0) return 1;
    return is_root(s) ? r->done_segs == r->nseg : r->recv_off == r->bytes;
}

static void complete(star *s)
{
    run *r = &s->run;
    ring_job *j = r->job;
    int status = r->status;
    char message[RING_MAX_MESSAGE];
    snprintf(message, sizeof message, "%s", r->message);
    r->job = NULL;
    s->head = j->next;
    if (!s->head) s->tail = NULL;
    for (int i = 0; i < s->n_aborts; i++)
        if (s->aborts[i].seq <= j->seq) s->aborts[i--] = s->aborts[--s->n_aborts];
    if (status == 0) {
        s->stats.done++;
    } else {
        s->stats.failed++;
        snprintf(s->stats.last_error, sizeof s->stats.last_error, "%s", message);
    }
    j->done(j, status, status ? message : NULL);
}

static void fail_queue(star *s, int status, const char *message)
{
    while (s->head && s->head != s->run.job) {
        ring_job *j = s->head;
        s->head = j->next;
        if (!s->head) s->tail = NULL;
        s->stats.failed++;
        j->done(j, status, message);
    }
}

/* The one place that moves collectives forward. */
static void advance(star *s)
{
    if (s->advancing) return;
    s->advancing = 1;
    for (;;) {
        if (s->run.job) {
            if (is_root(s)) reduce_ready(s);
            if (!finished(s)) break;
            complete(s);
            continue;
        }
        if (s->closing) {
            fail_queue(s, RINGD_ESHUTDOWN, "ringd is shutting down");
            break;
        }
        if (!s->head || !all_up(s)) break;
        start(s);
    }
    s->advancing = 0;
    if (s->head && !s->closing) {
        if (!uv_is_active((uv_handle_t *)&s->tick))
            uv_timer_start(&s->tick, on_tick, TICK_MS, TICK_MS);
    } else if (!s->closing) {
        uv_timer_stop(&s->tick);
    }
}

/* ---- deadlines ---- */

/* What a collective past its deadline waits for. */
static void describe_wait(const star *s, int started, char *out, size_t len)
{
    if (!is_root(s)) {
        const peer *p = &s->peers[s->root];
        if (p->state != LINK_UP)
            snprintf(out, len, "the connection to star root %s (%s) is %s%s%s",
                     host_name(s, s->root), s->cfg->hosts[s->root].address,
                     links_state_name(p->state), *p->error ? ": " : "", p->error);
        else if (started)
            snprintf(out, len,
                     "waiting for the result from star root %s (has every rank submitted this "
                     "collective?)",
                     host_name(s, s->root));
        else
            snprintf(out, len, "waiting for the star root %s", host_name(s, s->root));
        return;
    }
    size_t o = 0;
    for (int h = 0; h < s->n && o + 64 < len; h++) {
        const peer *p = &s->peers[h];
        if (h == s->me) continue;
        if (p->state != LINK_UP)
            o += (size_t)snprintf(out + o, len - o, "%shost %s (%s) is not connected%s%s",
                                  o ? "; " : "", host_name(s, h), s->cfg->hosts[h].address,
                                  *p->error ? ": " : "", p->error);
        else if (started && p->recv_segs <= s->run.done_segs)
            o += (size_t)snprintf(out + o, len - o,
                                  "%swaiting for data from host %s (has every rank submitted "
                                  "this collective?)",
                                  o ? "; " : "", host_name(s, h));
    }
    if (o == 0) snprintf(out, len, "waiting for sends to finish");
}

static void on_tick(uv_timer_t *t)
{
    star *s = t->data;
    uint64_t now = uv_now(s->loop);
    char why[512];
    run *r = &s->run;
    if (r->job && r->status == 0 && r->job->deadline <= now) {
        describe_wait(s, 1, why, sizeof why);
        fail_run(s, -1, RINGD_ETIMEDOUT, "%s #%" PRIu64 " timed out on host %s: %s", r->job->label,
                 r->job->seq, host_name(s, s->me), why);
        /* Data a peer does not read would hold the job's buffer for ever:
         * drop the connections, which cancels the writes; they re-form. */
        if (r->writes > 0)
            for (int h = 0; h < s->n; h++)
                if (s->peers[h].c)
                    conn_close(s->peers[h].c, "a collective timed out with data unsent");
    }
    ring_job *j = s->head;
    if (j && !r->job && j->deadline <= now && is_root(s)) {
        /* The root numbers the collectives: it starts this one to fail it,
         * and the leaves that are up hear of it, so all stay in step. */
        describe_wait(s, 0, why, sizeof why);
        start(s);
        fail_run(s, -1, RINGD_ETIMEDOUT,
                 "%s #%" PRIu64 " timed out before it could start on star root %s: %s", j->label,
                 j->seq, host_name(s, s->me), why);
    } else if (j && !r->job && j->deadline <= now) {
        char msg[RING_MAX_MESSAGE];
        describe_wait(s, 0, why, sizeof why);
        snprintf(msg, sizeof msg, "%s timed out before it could start on host %s: %s", j->label,
                 host_name(s, s->me), why);
        log_warn("%s", msg);
        s->head = j->next;
        if (!s->head) s->tail = NULL;
        s->stats.failed++;
        snprintf(s->stats.last_error, sizeof s->stats.last_error, "%s", msg);
        j->done(j, RINGD_ETIMEDOUT, msg);
    }
    advance(s);
}

/* ---- frames in ---- */

static int mismatch(star *s, int h, const frame_data *d)
{
    const ring_job *j = s->run.job;
    if (d->kind == j->kind && d->count == j->count && d->dtype == j->dtype && d->op == j->op)
        return 0;
    char theirs[160], ours[160];
    ring_describe(theirs, sizeof theirs, d->kind, d->count, d->dtype, d->op, (int)d->root);
    ring_describe(ours, sizeof ours, j->kind, j->count, j->dtype, j->op, j->root);
    fail_run(s, -1, RINGD_EMISMATCH,
             "%s #%" PRIu64 " differs between ranks: host %s (rank %d) has %s, host %s (rank %d) "
             "has %s",
             j->label, j->seq, host_name(s, h), cfg_first_rank(s->cfg, (size_t)h), theirs,
             host_name(s, s->me), cfg_first_rank(s->cfg, (size_t)s->me), ours);
    return 1;
}

/* A DATA header from host h: returns where its payload goes. */
static int on_data(star *s, int h, const frame_data *d, uint8_t **dst, char *why, size_t len)
{
    run *r = &s->run;
    peer *p = &s->peers[h];
    if (!r->job) return d->seq >= s->stats.seq ? LINK_RECV_PAUSE : LINK_RECV_SKIP;
    if (d->seq != r->job->seq) return d->seq > r->job->seq ? LINK_RECV_PAUSE : LINK_RECV_SKIP;
    if (r->status != 0 || mismatch(s, h, d)) return LINK_RECV_SKIP;
    uint16_t step = is_root(s) ? 0 : 1;
    uint64_t expect_off = is_root(s) ? p->recv_off : r->recv_off;
    uint64_t k = expect_off / r->seg;
    if (d->step != step || d->offset != expect_off || k >= r->nseg || d->length != seg_len(r, k)) {
        snprintf(why, len,
                 "unexpected DATA frame: step %u, %u bytes at offset %" PRIu64
                 "; expected step %u, %u bytes at offset %" PRIu64,
                 d->step, d->length, d->offset, step, k < r->nseg ? seg_len(r, k) : 0, expect_off);
        fail_run(s, h, RINGD_EPROTO, "%s #%" PRIu64 ": protocol error from host %s: %s",
                 r->job->label, r->job->seq, host_name(s, h), why);
        return RINGD_EPROTO;
    }
    if (!is_root(s)) {
        *dst = r->job->buf + d->offset;
        r->reading = 1;
        return LINK_RECV_INTO;
    }
    if (k >= r->done_segs + STAR_WINDOW) return LINK_RECV_PAUSE;
    if (!p->window) {
        p->window = malloc((size_t)STAR_WINDOW * s->cfg->segment_bytes);
        if (!p->window) {
            snprintf(why, len, "out of memory");
            fail_run(s, -1, RINGD_ENOMEM, "%s #%" PRIu64 ": out of memory", r->job->label,
                     r->job->seq);
            return RINGD_ENOMEM;
        }
    }
    p->weight = d->wsum;
    *dst = p->window + (k % STAR_WINDOW) * r->seg;
    return LINK_RECV_INTO;
}

static void on_payload(star *s, int h, const frame_data *d)
{
    run *r = &s->run;
    s->lstats.bytes_in += d->length;
    if (!is_root(s)) r->reading = 0;
    if (!r->job || d->seq != r->job->seq || r->status != 0) {
        advance(s);
        return;
    }
    if (is_root(s)) {
        s->peers[h].recv_off += d->length;
        s->peers[h].recv_segs++;
    } else {
        r->recv_off += d->length;
        r->done_segs++;
    }
    advance(s);
}

static void on_abort(star *s, int h, const frame_abort *a)
{
    run *r = &s->run;
    if (r->job && a->seq == r->job->seq) {
        if (r->status == 0) fail_run(s, h, a->code, "%s", a->reason);
    } else if (a->seq >= s->stats.seq && !find_abort(s, a->seq)) {
        /* Not started here yet: remember it; the root passes it on now. */
        remember_abort(s, a);
        if (is_root(s))
            for (int o = 0; o < s->n; o++)
                if (o != s->me && o != h && s->peers[o].c && s->peers[o].state == LINK_UP)
                    send_abort(s, s->peers[o].c, a);
    }
    advance(s);
}

/* ---- the frame reader ---- */

static void expect(conn *c, rd_state st, size_t need)
{
    c->rd = st;
    c->got = 0;
    c->need = need;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    conn *c = h->data;
    size_t left = c->need - c->got;
    switch (c->rd) {
    case RD_HEADER:
        *buf = uv_buf_init((char *)c->hdr_buf + c->got, (unsigned)left);
        break;
    case RD_BODY:
        *buf = uv_buf_init((char *)c->body + c->got, (unsigned)left);
        break;
    case RD_PAYLOAD:
        *buf = uv_buf_init((char *)c->dst + c->got, (unsigned)left);
        break;
    case RD_SKIP:
        *buf = uv_buf_init((char *)c->owner->skip, (unsigned)(left < SKIP_BUF ? left : SKIP_BUF));
        break;
    case RD_PAUSED:
        *buf = uv_buf_init(NULL, 0);
        break;
    }
}

static void offer_data(conn *c)
{
    star *s = c->owner;
    char why[512] = "";
    uint8_t *dst = NULL;
    int act = on_data(s, c->host, &c->data, &dst, why, sizeof why);
    if (act < 0) {
        conn_close(c, why);
        return;
    }
    if (act == LINK_RECV_PAUSE) {
        if (c->rd != RD_PAUSED) uv_read_stop((uv_stream_t *)&c->tcp);
        c->rd = RD_PAUSED;
        return;
    }
    int was_paused = c->rd == RD_PAUSED;
    if (act == LINK_RECV_INTO) {
        c->dst = dst;
        expect(c, RD_PAYLOAD, c->data.length);
    } else {
        expect(c, RD_SKIP, c->data.length);
    }
    if (was_paused) start_reading(c);
}

static void on_resume(uv_timer_t *t)
{
    star *s = t->data;
    for (int h = 0; h < s->n; h++) {
        conn *c = s->peers[h].c;
        if (c && !c->closing && c->rd == RD_PAUSED) offer_data(c);
    }
}

static void handle_hello(conn *c);
static void handle_welcome(conn *c);

static void piece_done(conn *c)
{
    star *s = c->owner;
    char why[256];
    if (c->rd == RD_HEADER) {
        int rc = frame_decode_header(c->hdr_buf, FRAME_HEADER_SIZE, &c->hdr);
        if (rc < 0) {
            snprintf(why, sizeof why, "bad frame header: %s", frame_strerror(rc));
            conn_close(c, why);
            return;
        }
        int ok = c->host < 0 ? c->hdr.type == FRAME_HELLO
                 : !c->up    ? c->hdr.type == FRAME_WELCOME
                             : c->hdr.type == FRAME_DATA || c->hdr.type == FRAME_ABORT ||
                                c->hdr.type == FRAME_PING;
        if (!ok) {
            snprintf(why, sizeof why, "unexpected %s frame", frame_type_name(c->hdr.type));
            conn_close(c, why);
            return;
        }
        size_t body = c->hdr.type == FRAME_DATA ? FRAME_DATA_HEADER_SIZE : c->hdr.length;
        if (body == 0)
            expect(c, RD_HEADER, FRAME_HEADER_SIZE);
        else
            expect(c, RD_BODY, body);
        return;
    }
    if (c->rd == RD_BODY) {
        switch (c->hdr.type) {
        case FRAME_HELLO:
            handle_hello(c);
            return;
        case FRAME_WELCOME:
            handle_welcome(c);
            return;
        case FRAME_ABORT: {
            frame_abort a;
            if (frame_decode_abort(&c->hdr, c->body, &a) < 0) {
                conn_close(c, "malformed ABORT");
                return;
            }
            expect(c, RD_HEADER, FRAME_HEADER_SIZE);
            on_abort(s, c->host, &a);
            return;
        }
        default: /* DATA */
            if (frame_decode_data(&c->hdr, c->body, &c->data) < 0 || c->data.length == 0) {
                conn_close(c, "malformed DATA frame");
                return;
            }
            offer_data(c);
            return;
        }
    }
    if (c->rd == RD_PAYLOAD) {
        expect(c, RD_HEADER, FRAME_HEADER_SIZE);
        on_payload(s, c->host, &c->data);
        return;
    }
    expect(c, RD_HEADER, FRAME_HEADER_SIZE); /* a skip is over */
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    conn *c = st->data;
    if (c->closing || nread == 0) return;
    if (nread < 0) {
        char why[128];
        snprintf(why, sizeof why, "%s",
                 nread == UV_EOF ? "connection closed by peer" : uv_strerror((int)nread));
        conn_close(c, why);
        return;
    }
    c->got += (size_t)nread;
    if (c->got == c->need) piece_done(c);
}

static void start_reading(conn *c)
{
    int rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    if (rc < 0) conn_close(c, uv_strerror(rc));
}

/* ---- connections ---- */

static void conn_closed(uv_handle_t *h)
{
    conn *c = h->data;
    star *s = c->owner;
    free(c);
    release(s);
}

static void conn_timer_closed(uv_handle_t *h)
{
    conn *c = h->data;
    uv_close((uv_handle_t *)&c->tcp, conn_closed);
}

static conn *conn_new(star *s, int host)
{
    conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->owner = s;
    c->host = host;
    uv_tcp_init(s->loop, &c->tcp);
    uv_timer_init(s->loop, &c->timer);
    c->tcp.data = c;
    c->timer.data = c;
    s->open_handles++;
    expect(c, RD_HEADER, FRAME_HEADER_SIZE);
    return c;
}

static void on_retry(uv_timer_t *t)
{
    start_connect(t->data);
}

static void schedule_retry(star *s)
{
    if (s->closing) return;
    uint32_t delay = s->backoff_ms + (uint32_t)(rand() % (int)(s->backoff_ms / 4 + 1));
    s->backoff_ms =
        s->backoff_ms * 2 > s->cfg->backoff_max_ms ? s->cfg->backoff_max_ms : s->backoff_ms * 2;
    uv_timer_start(&s->retry, on_retry, delay, 0);
}

/* Closes c; safe from c's own callbacks (memory goes in the close callback).
 * A connection that carried frames fails the running collective. */
static void conn_close(conn *c, const char *why)
{
    if (c->closing) return;
    star *s = c->owner;
    c->closing = 1;
    uv_read_stop((uv_stream_t *)&c->tcp);
    uv_timer_stop(&c->timer);
    uv_close((uv_handle_t *)&c->timer, conn_timer_closed);
    if (c->host < 0) {
        for (conn **p = &s->pending; *p; p = &(*p)->next) {
            if (*p == c) {
                *p = c->next;
                s->n_pending--;
                break;
            }
        }
        log_debug("dropped connection from %s: %s", c->peer, why);
        return;
    }
    peer *p = &s->peers[c->host];
    if (p->c != c) return; /* replaced already */
    int was_up = p->state == LINK_UP;
    p->c = NULL;
    p->state = LINK_DOWN;
    snprintf(p->error, sizeof p->error, "%s", why);
    if (s->closing) return;
    const cfg_host *h = &s->cfg->hosts[c->host];
    if (!is_root(s)) s->run.reading = 0; /* the payload will not arrive */
    if (was_up) {
        log_warn("connection %s %s lost: %s", is_root(s) ? "from star leaf" : "to star root",
                 h->name, why);
        if (s->run.job)
            fail_run(s, c->host, RINGD_ERING, "%s #%" PRIu64 " failed: lost host %s (%s): %s",
                     s->run.job->label, s->run.job->seq, h->name, h->address, why);
        s->backoff_ms = s->cfg->backoff_initial_ms;
    } else if (!is_root(s)) {
        uint32_t suppressed = 0;
        if (log_ratelimit_ok(&s->connect_rl, uv_now(s->loop), 30000, &suppressed))
            log_warn("cannot reach star root %s (%s): %s; retrying%s", h->name, h->address, why,
                     suppressed ? " (repeated failures not logged)" : "");
    }
    if (!is_root(s)) schedule_retry(s);
    advance(s);
}

static void on_handshake_timeout(uv_timer_t *t)
{
    conn_close(t->data, "handshake timed out");
}

/* ---- a leaf's connection to the root ---- */

static void on_connect(uv_connect_t *req, int status)
{
    conn *c = req->data;
    star *s = c->owner;
    if (c->closing) return;
    if (status < 0) {
        conn_close(c, uv_strerror(status));
        return;
    }
    net_tune_tcp(&c->tcp, s->cfg->socket_buffer_bytes);
    frame_hello h = {.n_hosts = (uint32_t)s->n,
                     .from_pos = (uint32_t)s->me,
                     .to_pos = (uint32_t)s->root,
                     .epoch = STAR_HELLO};
    snprintf(h.cluster, sizeof h.cluster, "%s", s->cfg->cluster);
    snprintf(h.from_name, sizeof h.from_name, "%s", host_name(s, s->me));
    send_req *w = malloc(sizeof *w + CONTROL_CAP);
    int n = w ? frame_encode_hello(w->buf, CONTROL_CAP, &h) : -1;
    if (n < 0) {
        free(w);
        conn_close(c, "cannot encode HELLO");
        return;
    }
    w->owner = s;
    w->data = 0;
    uv_buf_t b = uv_buf_init((char *)w->buf, (unsigned)n);
    if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_write_done) < 0) {
        free(w);
        conn_close(c, "cannot send HELLO");
        return;
    }
    s->peers[s->root].state = LINK_HANDSHAKE;
    start_reading(c);
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    star *s = req->data;
    conn *c = s->peers[s->root].c;
    s->resolving = 0;
    if (!s->closing && c && !c->closing) {
        if (status < 0 || !res) {
            char why[160];
            snprintf(why, sizeof why, "cannot resolve %s: %s", s->cfg->hosts[s->root].node,
                     uv_strerror(status));
            conn_close(c, why);
        } else {
            net_describe_addr(res->ai_addr, c->peer, sizeof c->peer);
            s->connect_req.data = c;
            int rc = uv_tcp_connect(&s->connect_req, &c->tcp, res->ai_addr, on_connect);
            if (rc < 0) conn_close(c, uv_strerror(rc));
        }
    }
    uv_freeaddrinfo(res);
    release(s);
}

static void start_connect(star *s)
{
    peer *p = &s->peers[s->root];
    if (s->closing || p->c) return;
    if (s->resolving) {
        schedule_retry(s);
        return;
    }
    conn *c = conn_new(s, s->root);
    if (!c) {
        schedule_retry(s);
        return;
    }
    p->c = c;
    p->state = LINK_CONNECTING;
    uv_timer_start(&c->timer, on_handshake_timeout, s->cfg->connect_timeout_ms, 0);
    const cfg_host *h = &s->cfg->hosts[s->root];
    char port[8];
    snprintf(port, sizeof port, "%u", h->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    s->gai.data = s;
    s->resolving = 1;
    s->open_handles++;
    int rc = uv_getaddrinfo(s->loop, &s->gai, on_resolved, h->node, port, &hints);
    if (rc < 0) {
        s->resolving = 0;
        s->open_handles--;
        conn_close(c, uv_strerror(rc));
    }
}

static void handle_welcome(conn *c)
{
    star *s = c->owner;
    peer *p = &s->peers[s->root];
    frame_welcome w;
    if (frame_decode_welcome(&c->hdr, c->body, &w) < 0) {
        conn_close(c, "malformed WELCOME");
        return;
    }
    if (w.status < 0) {
        char why[FRAME_MAX_TEXT + 64];
        snprintf(why, sizeof why, "refused by %s: %s", host_name(s, s->root), w.reason);
        log_error("star root %s refused the connection: %s", host_name(s, s->root), w.reason);
        s->backoff_ms = s->cfg->backoff_max_ms; /* a configuration problem: do not hammer */
        conn_close(c, why);
        return;
    }
    uv_timer_stop(&c->timer);
    /* The root numbers the collectives (WELCOME.epoch is its next seq): a
     * leaf that restarted, or missed some while away, falls in step. */
    if (!s->run.job && s->stats.seq != w.epoch) {
        log_info("star root %s is at collective #%u, this host was at #%" PRIu64,
                 host_name(s, s->root), w.epoch, s->stats.seq);
        s->stats.seq = w.epoch;
        s->n_aborts = 0;
    }
    c->up = 1;
    p->state = LINK_UP;
    p->error[0] = '\0';
    s->backoff_ms = s->cfg->backoff_initial_ms;
    log_ratelimit_reset(&s->connect_rl);
    if (s->was_up) s->lstats.reconnects++;
    s->was_up = 1;
    expect(c, RD_HEADER, FRAME_HEADER_SIZE);
    log_info("connection to star root %s (%s) up", host_name(s, s->root), c->peer);
    advance(s);
}

/* ---- the root's connections from the leaves ---- */

static void on_refusal_sent(uv_write_t *req, int status)
{
    (void)status;
    conn *c = req->handle->data;
    free(req);
    conn_close(c, "refused");
}

static void send_welcome(conn *c, int code, const char *reason)
{
    frame_welcome w = {.status = code, .epoch = (uint32_t)c->owner->stats.seq};
    snprintf(w.reason, sizeof w.reason, "%s", reason);
    send_req *sr = malloc(sizeof *sr + CONTROL_CAP);
    int n = sr ? frame_encode_welcome(sr->buf, CONTROL_CAP, &w) : -1;
    if (n < 0) {
        free(sr);
        conn_close(c, "cannot encode WELCOME");
        return;
    }
    sr->owner = c->owner;
    sr->data = 0;
    uv_buf_t b = uv_buf_init((char *)sr->buf, (unsigned)n);
    if (code < 0) {
        log_warn("refused connection from %s: %s", c->peer, reason);
        c->refusing = 1;
        uv_read_stop((uv_stream_t *)&c->tcp);
    }
    if (uv_write(&sr->req, (uv_stream_t *)&c->tcp, &b, 1,
                 code < 0 ? on_refusal_sent : on_write_done) < 0) {
        free(sr);
        conn_close(c, "cannot send WELCOME");
    }
}

static void handle_hello(conn *c)
{
    star *s = c->owner;
    frame_hello h;
    char why[FRAME_MAX_TEXT];
    if (frame_decode_hello(&c->hdr, c->body, &h) < 0) {
        conn_close(c, "malformed HELLO");
        return;
    }
    int little = 1;
    int we_are_le = *(const uint8_t *)&little == 1;
    if (!!(c->hdr.flags & FRAME_FLAG_LITTLE_ENDIAN) != we_are_le) {
        send_welcome(c, RINGD_EMISMATCH, "byte order differs from this host's");
        return;
    }
    if (strcmp(h.cluster, s->cfg->cluster) != 0) {
        snprintf(why, sizeof why, "cluster \"%s\" is not ours (\"%s\")", h.cluster,
                 s->cfg->cluster);
        send_welcome(c, RINGD_EMISMATCH, why);
        return;
    }
    if (h.epoch != STAR_HELLO) {
        snprintf(why, sizeof why,
                 "peer \"%s\" runs algorithm ring, this host (%s) algorithm star; are the configs "
                 "of both identical?",
                 h.from_name, host_name(s, s->me));
        send_welcome(c, RINGD_EMISMATCH, why);
        return;
    }
    if (h.n_hosts != (uint32_t)s->n || h.from_pos >= (uint32_t)s->n ||
        h.from_pos == (uint32_t)s->me || h.to_pos != (uint32_t)s->me ||
        strcmp(h.from_name, host_name(s, (int)h.from_pos)) != 0) {
        snprintf(why, sizeof why,
                 "hosts disagree: peer \"%s\" says it is host %u of %u sending to host %u, but "
                 "this star root (%s, %d of %d) does not know it so; are the hosts lists of both "
                 "configs identical?",
                 h.from_name, h.from_pos, h.n_hosts, h.to_pos, host_name(s, s->me), s->me, s->n);
        send_welcome(c, RINGD_EMISMATCH, why);
        return;
    }
    send_welcome(c, 0, "");
    if (c->closing) return;
    int leaf = (int)h.from_pos;
    peer *p = &s->peers[leaf];
    /* A leaf that reconnects replaces its old connection. */
    if (p->c) conn_close(p->c, "replaced by a new connection from the same host");
    for (conn **q = &s->pending; *q; q = &(*q)->next) {
        if (*q == c) {
            *q = c->next;
            s->n_pending--;
            break;
        }
    }
    uv_timer_stop(&c->timer);
    c->host = leaf;
    c->up = 1;
    p->c = c;
    p->state = LINK_UP;
    p->error[0] = '\0';
    net_tune_tcp(&c->tcp, s->cfg->socket_buffer_bytes);
    expect(c, RD_HEADER, FRAME_HEADER_SIZE);
    log_info("connection from star leaf %s (%s) up", h.from_name, c->peer);
    advance(s);
}

static void on_connection(uv_stream_t *server, int status)
{
    star *s = server->data;
    if (status < 0 || s->closing) return;
    conn *c = conn_new(s, -1);
    if (!c) return;
    c->next = s->pending;
    s->pending = c;
    s->n_pending++;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0) {
        conn_close(c, "accept failed");
        return;
    }
    struct sockaddr_storage ss;
    int len = sizeof ss;
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) == 0)
        net_describe_addr((struct sockaddr *)&ss, c->peer, sizeof c->peer);
    else
        snprintf(c->peer, sizeof c->peer, "?");
    /* Bound the memory a flood of half-open connections can take. */
    if (s->n_pending > MAX_PENDING) {
        conn_close(c, "too many connections awaiting a handshake");
        return;
    }
    uv_timer_start(&c->timer, on_handshake_timeout, s->cfg->connect_timeout_ms, 0);
    start_reading(c);
}

/* ---- lifecycle ---- */

int star_new(star **out, uv_loop_t *loop, const cfg *c, int me)
{
    star *s = calloc(1, sizeof *s);
    if (!s) return RINGD_ENOMEM;
    s->peers = calloc(c->n_hosts, sizeof *s->peers);
    if (!s->peers) {
        free(s);
        return RINGD_ENOMEM;
    }
    s->loop = loop;
    s->cfg = c;
    s->me = me;
    s->n = (int)c->n_hosts;
    s->root = c->star_root_index;
    s->backoff_ms = c->backoff_initial_ms;
    uv_timer_init(loop, &s->retry);
    uv_timer_init(loop, &s->tick);
    uv_timer_init(loop, &s->resume);
    s->retry.data = s->tick.data = s->resume.data = s;
    s->open_handles = 3;
    *out = s;
    return 0;
}

int star_start(star *s, char *err, size_t errlen)
{
    if (s->n == 1) return 0;
    /* A baseline for benchmarks, not a way to run a cluster. */
    log_warn("algorithm star: the star's connections are not authenticated, checksummed or "
             "watched by heartbeats (secret_file, checksum and heartbeat_* apply to the ring "
             "only); use it to compare, not to train");
    if (!is_root(s)) {
        log_info("star leaf: connecting to star root %s (%s)", host_name(s, s->root),
                 s->cfg->hosts[s->root].address);
        start_connect(s);
        return 0;
    }
    const cfg_host *h = &s->cfg->hosts[s->me];
    char port[8];
    snprintf(port, sizeof port, "%u", h->port);
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(h->node, port, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "cannot resolve this host's address %s: %s", h->address,
                 gai_strerror(rc));
        return RINGD_EINVAL;
    }
    uv_tcp_init(s->loop, &s->listener);
    s->listener.data = s;
    s->listening = 1;
    s->open_handles++;
    rc = uv_tcp_bind(&s->listener, res->ai_addr, 0);
    freeaddrinfo(res);
    if (rc == 0) rc = uv_listen((uv_stream_t *)&s->listener, 128, on_connection);
    if (rc < 0) {
        snprintf(err, errlen, "cannot listen on %s: %s (is another ringd running there?)",
                 h->address, uv_strerror(rc));
        return RINGD_EIO;
    }
    log_info("star root: listening on %s for %d leaves", h->address, s->n - 1);
    return 0;
}

void star_submit(star *s, ring_job *j)
{
    if (j->kind != RINGD_COLL_ALLREDUCE && j->kind != RINGD_COLL_BARRIER) {
        char msg[RING_MAX_MESSAGE];
        snprintf(msg, sizeof msg,
                 "%s: algorithm star supports allreduce and barrier only (set algorithm: ring "
                 "for %s)",
                 j->label, ring_coll_name(j->kind));
        s->stats.failed++;
        snprintf(s->stats.last_error, sizeof s->stats.last_error, "%s", msg);
        j->done(j, RINGD_EINVAL, msg);
        return;
    }
    j->next = NULL;
    if (s->tail)
        s->tail->next = j;
    else
        s->head = j;
    s->tail = j;
    advance(s);
}

void star_close(star *s, int status, const char *message, void (*done)(void *), void *data)
{
    s->done = done;
    s->done_data = data;
    if (s->run.job) fail_run(s, -1, status, "%s", message);
    s->closing = 1;
    s->run.reading = 0; /* closing the connections stops a payload being read */
    for (int h = 0; h < s->n; h++)
        if (s->peers[h].c) conn_close(s->peers[h].c, "shutting down");
    while (s->pending)
        conn_close(s->pending, "shutting down");
    if (s->resolving) uv_cancel((uv_req_t *)&s->gai);
    advance(s);
    uv_close((uv_handle_t *)&s->retry, handle_closed);
    uv_close((uv_handle_t *)&s->tick, handle_closed);
    uv_close((uv_handle_t *)&s->resume, handle_closed);
    if (s->listening) uv_close((uv_handle_t *)&s->listener, handle_closed);
}

void star_get_stats(const star *s, ring_stats *out)
{
    *out = s->stats;
}

link_state star_state(const star *s)
{
    if (s->n == 1) return LINK_SELF;
    if (!is_root(s)) return s->peers[s->root].state;
    return all_up(s) ? LINK_UP : LINK_DOWN;
}

void star_get_link_stats(const star *s, links_stats *out)
{
    *out = s->lstats;
}
