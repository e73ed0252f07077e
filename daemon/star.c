/*
 * star.c - the star baseline: one host collects, reduces and sends back.
 *
 * Host `star_root` (the root) accepts one link from each other host (a
 * leaf); a leaf connects to the root as a ring host connects to its right
 * neighbour, on the same transport (peer.c, listener.c): the same
 * handshake and cluster key, CRC32C on every payload, and heartbeats.
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
 * link is up; the root numbers them (its WELCOME tells a leaf the next
 * number). A failure that leaves the streams usable (hosts disagree, a
 * deadline, a bad checksum, a preset failure) travels as an ABORT: a leaf
 * tells the root, the root tells every leaf, and late frames of the
 * collective are skipped by their seq. A lost link fails the running
 * collective with RINGD_ERING naming the host, on the root and (by ABORT) on
 * the other leaves; the leaf reconnects by itself.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "listener.h"
#include "log.h"
#include "reduce.h"

#define STAR_WINDOW 4 /* segments of each leaf buffered at the root */
#define CONTROL_CAP (FRAME_HEADER_SIZE + FRAME_MAX_CONTROL_BODY)

/* Another host as this one sees it: the root for a leaf, each leaf for the
 * root. */
typedef struct {
    peer *p;
    /* Root: what arrived from this leaf for the running collective. */
    uint8_t *window; /* STAR_WINDOW segments of window_seg bytes */
    uint32_t window_seg;
    uint64_t recv_off, recv_segs;
    double weight;
} star_peer;

/* The running collective. */
typedef struct {
    job *job;
    size_t esize;
    uint64_t bytes, nseg;
    uint32_t seg;
    uint64_t done_segs; /* root: reduced and sent; leaf: result segments in */
    uint64_t recv_off;  /* leaf: result bytes in */
    size_t writes;      /* DATA frames not yet written */
    int reading;        /* a leaf reads a result payload into the job's buffer */
    job_timing t;
} run;

typedef struct {
    engine base;
    uv_loop_t *loop;
    const cfg *cfg;
    int me, n, root;
    lifetime lt;
    net_env env;
    hs_ctx hs;
    auth_key key;
    net_stats stats;
    listener *listener;
    star_peer *peers; /* by host index; the root's own entry and a leaf's others unused */
    uv_timer_t heartbeat;
    peer_clock beat;
    jobs q;
    run run;
    int advancing, closing;
    void (*done)(void *);
    void *done_data;
} star;

static void advance(star *s);

static int is_root(const star *s)
{
    return s->me == s->root;
}

static const char *host_name(const star *s, int h)
{
    return s->cfg->hosts[h].name;
}

/* Every peer this host has: the root for a leaf, the leaves for the root. */
#define FOR_PEERS(s, h)                                                                            \
    for (int h = 0; h < (s)->n; h++)                                                               \
        if ((s)->peers[h].p)

static void resume_all(star *s)
{
    FOR_PEERS(s, h) peer_resume(s->peers[h].p);
}

/* ---- failing and sending ---- */

/* jobs_ops.abort: a leaf tells the root, the root every leaf. */
static void on_job_abort(void *eng, job *j)
{
    star *s = eng;
    frame_abort ab = {.seq = j->seq, .code = j->status};
    snprintf(ab.reason, sizeof ab.reason, "%.*s", FRAME_MAX_TEXT, j->message);
    uint8_t buf[CONTROL_CAP];
    int n = frame_encode_abort(buf, sizeof buf, &ab);
    if (n > 0) FOR_PEERS(s, h) peer_send_control(s->peers[h].p, buf, (size_t)n);
}

/* Sends one DATA frame of the running collective to host h: the payload
 * goes from the job's buffer, not copied. */
static void send_data(star *s, int h, uint16_t step, uint64_t off, uint32_t len, double wsum)
{
    run *r = &s->run;
    job *j = r->job;
    frame_data d = {.seq = j->seq,
                    .step = step,
                    .dtype = (uint8_t)j->dtype,
                    .op = (uint8_t)j->op,
                    .length = len,
                    .count = j->count,
                    .offset = off,
                    .kind = (uint8_t)j->kind,
                    .wsum = wsum,
                    .delta_us = FRAME_DELTA_UNKNOWN};
    int rc = peer_send_data(s->peers[h].p, &d, 0, j->buf + off, r);
    if (rc < 0) {
        jobs_fail(&s->q, j, FAIL_RING, RINGD_ERING,
                  "%s #%" PRIu64 ": cannot send to host %s: not connected", j->label, j->seq,
                  host_name(s, h));
        return;
    }
    r->writes++;
}

/* ---- the collective ---- */

static uint32_t seg_len(const run *r, uint64_t k)
{
    uint64_t off = k * r->seg;
    return (uint32_t)(r->bytes - off < r->seg ? r->bytes - off : r->seg);
}

static int all_up(const star *s)
{
    FOR_PEERS(s, h) if (peer_state(s->peers[h].p) != LINK_UP) return 0;
    return 1;
}

/* Root: every leaf's window holds STAR_WINDOW segments of the running
 * collective's size (segment_size may have grown with a reload). */
static int size_windows(star *s)
{
    FOR_PEERS(s, h)
    {
        star_peer *p = &s->peers[h];
        if (p->window && p->window_seg >= s->run.seg) continue;
        free(p->window);
        p->window = malloc((size_t)STAR_WINDOW * s->run.seg);
        p->window_seg = p->window ? s->run.seg : 0;
        if (!p->window) return RINGD_ENOMEM;
    }
    return 0;
}

static void start(star *s)
{
    run *r = &s->run;
    memset(r, 0, sizeof *r);
    job *j = r->job = jobs_start(&s->q);
    r->t.start_ns = uv_hrtime();
    r->t.last_host = -1;
    r->esize = ringd_dtype_size(j->dtype);
    r->bytes = j->count * r->esize;
    r->seg = s->cfg->segment_bytes / (uint32_t)r->esize * (uint32_t)r->esize;
    r->nseg = (r->bytes + r->seg - 1) / r->seg;
    jobs_apply_preset(&s->q, j);
    if (j->status != 0) return; /* failed before it started: preset, or aborted */
    if (s->n == 1 || j->count == 0) {
        if (j->count > 0 && j->kind == RINGD_COLL_ALLREDUCE) {
            double divisor = j->op == RINGD_WMEAN ? j->weight : j->ranks;
            if (j->op == RINGD_WMEAN && !(divisor > 0 && isfinite(divisor)))
                jobs_fail(&s->q, j, FAIL_RING, RINGD_EINVAL,
                          "%s #%" PRIu64 ": the weights of all ranks sum to %g", j->label, j->seq,
                          divisor);
            else
                reduce_finish(j->dtype, j->op, j->buf, j->count, divisor);
        }
        r->done_segs = r->nseg;
        r->recv_off = r->bytes;
        return;
    }
    log_debug("%s #%" PRIu64 ": %" PRIu64 " x %s %s started (star)", j->label, j->seq, j->count,
              ringd_dtype_name(j->dtype), ringd_op_name(j->op));
    if (is_root(s)) {
        if (size_windows(s) < 0) {
            jobs_fail(&s->q, j, FAIL_RING, RINGD_ENOMEM, "%s #%" PRIu64 ": out of memory", j->label,
                      j->seq);
            return;
        }
        FOR_PEERS(s, h)
        {
            star_peer *p = &s->peers[h];
            p->recv_off = p->recv_segs = 0;
            p->weight = 0;
        }
    } else {
        for (uint64_t k = 0; k < r->nseg && j->status == 0; k++)
            send_data(s, s->root, 0, k * r->seg, seg_len(r, k), j->weight);
    }
}

/* Root: reduces, finishes and sends every segment that has arrived from all
 * leaves, in order. */
static void reduce_ready(star *s)
{
    run *r = &s->run;
    job *j = r->job;
    while (j->status == 0 && r->done_segs < r->nseg) {
        uint64_t k = r->done_segs;
        FOR_PEERS(s, h) if (s->peers[h].recv_segs <= k) return;
        uint32_t len = seg_len(r, k);
        uint8_t *dst = j->buf + k * r->seg;
        double wsum = j->weight;
        FOR_PEERS(s, h)
        {
            const star_peer *p = &s->peers[h];
            reduce_apply(j->dtype, j->op, dst, p->window + (k % STAR_WINDOW) * r->seg,
                         len / r->esize);
            wsum += p->weight;
        }
        double divisor = j->op == RINGD_WMEAN ? wsum : j->ranks;
        if (j->op == RINGD_WMEAN && !(divisor > 0 && isfinite(divisor))) {
            jobs_fail(&s->q, j, FAIL_RING, RINGD_EINVAL,
                      "%s #%" PRIu64 ": wmean needs positive weights; they sum to %g", j->label,
                      j->seq, divisor);
            return;
        }
        reduce_finish(j->dtype, j->op, dst, len / r->esize, divisor);
        FOR_PEERS(s, h)
        {
            if (j->status != 0) break;
            send_data(s, h, 1, k * r->seg, len, 0);
        }
        r->done_segs++;
        resume_all(s); /* a window slot is free again */
    }
}

static int finished(const star *s)
{
    const run *r = &s->run;
    if (r->writes > 0 || r->reading) return 0;
    if (r->job->status != 0) return 1;
    return is_root(s) ? r->done_segs == r->nseg : r->recv_off == r->bytes;
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
            jobs_forget_aborts(&s->q, s->run.job->seq);
            s->run.job = NULL;
            jobs_complete(&s->q, &s->run.t);
            continue;
        }
        if (s->closing) {
            if (jobs_waiting(&s->q))
                jobs_fail(&s->q, NULL, FAIL_ALL, RINGD_ESHUTDOWN, "ringd is shutting down");
            break;
        }
        if (!jobs_waiting(&s->q) || !all_up(s)) break;
        start(s);
        resume_all(s); /* frames of peers that ran ahead wait in their sockets */
    }
    s->advancing = 0;
    if (!s->closing) jobs_update_tick(&s->q);
}

/* ---- deadlines ---- */

/* What a collective past its deadline waits for. */
static void describe_wait(const star *s, int started, char *out, size_t len)
{
    if (!is_root(s)) {
        const peer *p = s->peers[s->root].p;
        const char *err = peer_error(p);
        if (peer_state(p) != LINK_UP)
            snprintf(out, len, "the connection to star root %s (%s) is %s%s%s",
                     host_name(s, s->root), s->cfg->hosts[s->root].address,
                     link_state_name(peer_state(p)), *err ? ": " : "", err);
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
    FOR_PEERS(s, h)
    {
        const star_peer *p = &s->peers[h];
        const char *err = peer_error(p->p);
        if (o + 64 >= len) break;
        if (peer_state(p->p) != LINK_UP)
            o += (size_t)snprintf(out + o, len - o, "%shost %s (%s) is not connected%s%s",
                                  o ? "; " : "", host_name(s, h), s->cfg->hosts[h].address,
                                  *err ? ": " : "", err);
        else if (started && p->recv_segs <= s->run.done_segs)
            o += (size_t)snprintf(out + o, len - o,
                                  "%swaiting for data from host %s (has every rank submitted "
                                  "this collective?)",
                                  o ? "; " : "", host_name(s, h));
    }
    if (o == 0) snprintf(out, len, "waiting for sends to finish");
}

static void on_tick(void *eng, uint64_t now)
{
    star *s = eng;
    char why[512];
    run *r = &s->run;
    if (r->job && r->job->status == 0 && r->job->deadline <= now) {
        describe_wait(s, 1, why, sizeof why);
        jobs_fail(&s->q, r->job, FAIL_RING, RINGD_ETIMEDOUT,
                  "%s #%" PRIu64 " timed out on host %s: %s", r->job->label, r->job->seq,
                  host_name(s, s->me), why);
        /* Data a peer does not read would hold the job's buffer for ever:
         * drop the links, which cancels the writes; they re-form. */
        if (r->writes > 0)
            FOR_PEERS(s, h) peer_reset(s->peers[h].p, "a collective timed out with data unsent");
    }
    job *j = jobs_waiting(&s->q);
    if (j && !r->job && j->deadline <= now) {
        describe_wait(s, 0, why, sizeof why);
        if (is_root(s)) {
            /* The root numbers the collectives: it starts this one to fail
             * it, and the leaves that are up hear of it, so all stay in step. */
            start(s);
            jobs_fail(&s->q, r->job, FAIL_RING, RINGD_ETIMEDOUT,
                      "%s #%" PRIu64 " timed out before it could start on star root %s: %s",
                      j->label, j->seq, host_name(s, s->me), why);
        } else {
            char msg[JOB_MAX_MESSAGE];
            snprintf(msg, sizeof msg, "%s timed out before it could start on host %s: %s", j->label,
                     host_name(s, s->me), why);
            log_warn("%s", msg);
            jobs_end_waiting(&s->q, RINGD_ETIMEDOUT, msg);
        }
    }
    advance(s);
}

/* ---- frames in ---- */

static int mismatch(star *s, int h, const frame_data *d)
{
    job *j = s->run.job;
    if (d->kind == j->kind && d->count == j->count && d->dtype == j->dtype && d->op == j->op)
        return 0;
    char theirs[160], ours[160];
    engine_describe(theirs, sizeof theirs, d->kind, d->count, d->dtype, d->op, (int)d->root);
    engine_describe(ours, sizeof ours, j->kind, j->count, j->dtype, j->op, j->root);
    jobs_fail(&s->q, j, FAIL_RING, RINGD_EMISMATCH,
              "%s #%" PRIu64 " differs between ranks: host %s (rank %d) has %s, host %s (rank %d) "
              "has %s",
              j->label, j->seq, host_name(s, h), cfg_first_rank(s->cfg, (size_t)h), theirs,
              host_name(s, s->me), cfg_first_rank(s->cfg, (size_t)s->me), ours);
    return 1;
}

/* A DATA header from a peer: where its payload goes. */
static int on_data(void *owner, peer *pp, const frame_data *d, uint8_t **dst, char *why, size_t len)
{
    star *s = owner;
    int h = peer_host(pp);
    run *r = &s->run;
    star_peer *p = &s->peers[h];
    if (!r->job) return d->seq >= s->q.stats.seq ? READER_PAUSE : READER_SKIP;
    job *j = r->job;
    if (d->seq != j->seq) return d->seq > j->seq ? READER_PAUSE : READER_SKIP;
    if (j->status != 0 || mismatch(s, h, d)) return READER_SKIP;
    uint16_t step = is_root(s) ? 0 : 1;
    uint64_t expect_off = is_root(s) ? p->recv_off : r->recv_off;
    uint64_t k = expect_off / r->seg;
    if (d->step != step || d->offset != expect_off || k >= r->nseg || d->length != seg_len(r, k)) {
        snprintf(why, len,
                 "unexpected DATA frame: step %u, %u bytes at offset %" PRIu64
                 "; expected step %u, %u bytes at offset %" PRIu64,
                 d->step, d->length, d->offset, step, k < r->nseg ? seg_len(r, k) : 0, expect_off);
        jobs_fail(&s->q, j, FAIL_RING, RINGD_EPROTO,
                  "%s #%" PRIu64 ": protocol error from host %s: %s", j->label, j->seq,
                  host_name(s, h), why);
        return RINGD_EPROTO;
    }
    if (!is_root(s)) {
        *dst = j->buf + d->offset;
        r->reading = 1;
        return READER_INTO;
    }
    if (k >= r->done_segs + STAR_WINDOW) return READER_PAUSE;
    p->weight = d->wsum;
    *dst = p->window + (k % STAR_WINDOW) * r->seg;
    return READER_INTO;
}

static void on_payload(void *owner, peer *pp, const frame_data *d, int status, const char *why)
{
    star *s = owner;
    run *r = &s->run;
    if (!is_root(s)) r->reading = 0;
    if (!r->job || d->seq != r->job->seq) {
        advance(s);
        return;
    }
    if (status < 0)
        jobs_fail(&s->q, r->job, FAIL_RING, status, "%s #%" PRIu64 " failed: %s", r->job->label,
                  r->job->seq, why);
    if (r->job->status != 0) {
        advance(s);
        return;
    }
    if (is_root(s)) {
        star_peer *p = &s->peers[peer_host(pp)];
        p->recv_off += d->length;
        p->recv_segs++;
    } else {
        r->recv_off += d->length;
        r->done_segs++;
    }
    advance(s);
}

static void on_control(void *owner, peer *pp, const frame_header *h, const uint8_t *body)
{
    star *s = owner;
    frame_abort a;
    if (h->type != FRAME_ABORT || frame_decode_abort(h, body, &a) < 0) {
        peer_reset(pp, "malformed ABORT");
        return;
    }
    run *r = &s->run;
    if (r->job && a.seq == r->job->seq) {
        if (r->job->status == 0) jobs_fail(&s->q, r->job, FAIL_RING, a.code, "%s", a.reason);
    } else if (a.seq >= s->q.stats.seq && !jobs_find_abort(&s->q, a.seq)) {
        /* Not started here yet: remember it; the root passes it on now. */
        jobs_remember_abort(&s->q, &a);
        uint8_t buf[CONTROL_CAP];
        int n = frame_encode_abort(buf, sizeof buf, &a);
        if (is_root(s) && n > 0) FOR_PEERS(s, o)
        if (s->peers[o].p != pp) peer_send_control(s->peers[o].p, buf, (size_t)n);
    }
    advance(s);
}

static void on_link_up(void *owner, peer *p)
{
    (void)p;
    advance(owner);
}

static void on_link_down(void *owner, peer *p, const char *why)
{
    star *s = owner;
    int h = peer_host(p);
    const cfg_host *hc = &s->cfg->hosts[h];
    log_warn("link %s %s lost: %s", is_root(s) ? "from star leaf" : "to star root", hc->name, why);
    if (!is_root(s)) s->run.reading = 0; /* the payload will not arrive */
    if (s->run.job && s->run.job->status == 0)
        jobs_fail(&s->q, s->run.job, FAIL_RING, RINGD_ERING,
                  "%s #%" PRIu64 " failed: lost host %s (%s): %s", s->run.job->label,
                  s->run.job->seq, hc->name, hc->address, why);
    advance(s);
}

static void on_sent(void *owner, void *ctx, int status)
{
    star *s = owner;
    run *r = ctx;
    r->writes--;
    if (status < 0 && r->job && r->job->status == 0)
        jobs_fail(&s->q, r->job, FAIL_RING, RINGD_ERING,
                  "%s #%" PRIu64 " failed: sending on a link failed", r->job->label, r->job->seq);
    advance(s);
}

static uint32_t hello_epoch(void *owner, peer *p)
{
    (void)owner, (void)p;
    return HS_STAR_EPOCH;
}

/* The root numbers the collectives (WELCOME.epoch is its next seq): a leaf
 * that restarted, or missed some while away, falls in step. */
static void on_welcomed(void *owner, peer *p, const frame_welcome *w)
{
    star *s = owner;
    (void)p;
    if (s->run.job || s->q.stats.seq == w->epoch) return;
    log_info("star root %s is at collective #%u, this host was at #%" PRIu64, host_name(s, s->root),
             w->epoch, s->q.stats.seq);
    jobs_renumber(&s->q);
    s->q.stats.seq = w->epoch;
}

static const peer_ops star_link_ops = {on_link_up, on_link_down, on_data,     on_payload,
                                       on_control, on_sent,      hello_epoch, on_welcomed};

static uint32_t welcome_epoch(void *owner, const frame_hello *h)
{
    const star *s = owner;
    (void)h;
    return (uint32_t)s->q.stats.seq;
}

static void on_accepted(void *owner, conn *c, int from)
{
    star *s = owner;
    peer *p = from >= 0 && from < s->n ? s->peers[from].p : NULL;
    if (!p)
        conn_close(c, "not a leaf of this star");
    else if (c->hs.stream == 0)
        peer_accept(p, c);
    else
        peer_attach(p, c);
}

static void on_refused(void *owner, const char *why)
{
    (void)owner, (void)why;
}

static const listener_ops star_listen_ops = {welcome_epoch, on_accepted, on_refused, NULL};

static void on_heartbeat(uv_timer_t *t)
{
    star *s = t->data;
    uint64_t now = uv_now(s->loop);
    uv_timer_set_repeat(t, s->cfg->heartbeat_interval_ms);
    peer_clock_tick(&s->beat, now, s->cfg);
    FOR_PEERS(s, h) peer_heartbeat(s->peers[h].p, now, &s->beat);
}

/* ---- the engine ---- */

static int star_start(engine *e, char *err, size_t errlen)
{
    star *s = (star *)e;
    if (s->n == 1) return 0;
    s->beat.last = uv_now(s->loop);
    uv_timer_start(&s->heartbeat, on_heartbeat, s->cfg->heartbeat_interval_ms,
                   s->cfg->heartbeat_interval_ms);
    if (!is_root(s)) {
        log_info("star leaf: connecting to star root %s (%s)", host_name(s, s->root),
                 s->cfg->hosts[s->root].address);
        peer_start(s->peers[s->root].p);
        return 0;
    }
    int rc = listener_start(s->listener, err, errlen);
    if (rc < 0) return rc;
    log_info("star root: listening on %s for %d leaves", s->cfg->hosts[s->me].address, s->n - 1);
    return 0;
}

static void star_submit(engine *e, job *j)
{
    star *s = (star *)e;
    if (j->kind != RINGD_COLL_ALLREDUCE && j->kind != RINGD_COLL_BARRIER) {
        char msg[JOB_MAX_MESSAGE];
        snprintf(msg, sizeof msg,
                 "%s: algorithm star supports allreduce and barrier only (set algorithm: ring "
                 "for %s)",
                 j->label, engine_kind_name(j->kind));
        jobs_reject(&s->q, j, RINGD_EINVAL, msg);
        return;
    }
    jobs_push(&s->q, j);
    advance(s);
}

static void star_cancel(engine *e, job *j, int status, const char *message)
{
    star *s = (star *)e;
    if (s->run.job == j) {
        if (j->status == 0)
            jobs_fail(&s->q, j, FAIL_RING, status, "%s #%" PRIu64 " failed: %s", j->label, j->seq,
                      message);
        advance(s);
        return;
    }
    if (j->preset_status == 0) {
        j->preset_status = status;
        j->preset_message = message;
    }
}

static void star_free(void *data)
{
    star *s = data;
    void (*done)(void *) = s->done;
    void *done_data = s->done_data;
    for (int h = 0; h < s->n; h++)
        free(s->peers[h].window);
    free(s->peers);
    free(s);
    if (done) done(done_data);
}

static void close_handle(star *s, uv_handle_t *h)
{
    h->data = &s->lt;
    lifetime_hold(&s->lt);
    uv_close(h, lifetime_handle_closed);
}

static void star_close(engine *e, int status, const char *message, void (*done)(void *), void *data)
{
    star *s = (star *)e;
    s->done = done;
    s->done_data = data;
    jobs_fail(&s->q, NULL, FAIL_ALL, status, "%s", message);
    s->closing = 1;
    s->run.reading = 0; /* closing the links stops a payload being read */
    if (s->listener) listener_close(s->listener);
    FOR_PEERS(s, h) peer_close(s->peers[h].p);
    advance(s);
    close_handle(s, (uv_handle_t *)&s->heartbeat);
    lifetime_hold(&s->lt);
    s->q.tick.data = &s->lt;
    jobs_close(&s->q, lifetime_handle_closed);
    lifetime_end(&s->lt, star_free, s);
}

static void star_stats(const engine *e, engine_stats *out)
{
    const star *s = (const star *)e;
    memset(out, 0, sizeof *out);
    out->jobs = s->q.stats;
    out->net = s->stats;
    out->ready = s->n == 1 || all_up(s);
    out->next_seq = s->q.stats.seq;
    /* A star host's one link that matters: to the root, or the root's own
     * summary of its leaves (the first that is not up). */
    engine_link *l = &out->left;
    l->host = is_root(s) ? s->me : s->root;
    l->state = s->n == 1 ? LINK_SELF : LINK_UP;
    FOR_PEERS(s, h)
    {
        if (peer_state(s->peers[h].p) == LINK_UP) continue;
        l->state = is_root(s) ? LINK_DOWN : peer_state(s->peers[h].p);
        l->host = h;
        l->since_ms = peer_since(s->peers[h].p);
        l->refused = peer_refused(s->peers[h].p);
        snprintf(l->error, sizeof l->error, "%s", peer_error(s->peers[h].p));
        break;
    }
    out->right = *l;
}

/* The star does not re-form on a failure: the root numbers every
 * collective, and an ABORT fails one on every host without a reset. */
static void star_watch(engine *e, const engine_watcher *w, void *data)
{
    (void)e;
    /* The root numbers every collective: they run from the first on. */
    job_verdict v = {
        .code = RINGD_ERING, .fail_seq = UINT64_MAX, .reason = "", .ready = 1, .next_epoch = 1};
    w->settled(data, &v);
}

static void star_members(engine *e, int complete, int gone, const char *why)
{
    (void)e, (void)complete, (void)gone, (void)why;
}

static int star_left(const engine *e, uint64_t born, char *why, size_t len)
{
    (void)e, (void)born, (void)why, (void)len;
    return 0;
}

static uint64_t star_generation(const engine *e)
{
    (void)e;
    return 0;
}

static void star_submitted(engine *e, uint64_t top)
{
    (void)e, (void)top;
}

static void star_why_waiting(const engine *e, char *out, size_t len)
{
    (void)e;
    snprintf(out, len, "%s", "");
}

/* The star does not close over hosts: its hosts are the configured ones. */
static void star_view(const engine *e, engine_view *out)
{
    const star *s = (const star *)e;
    *out = (engine_view){.hosts = s->cfg, .me = s->me, .resize_why = ""};
}

static void star_membership(const engine *e, links_membership *out)
{
    const star *s = (const star *)e;
    *out = (links_membership){.n_hosts = s->n,
                              .min_hosts = s->n,
                              .members = frame_members_all((size_t)s->n),
                              .resize_why = ""};
}

static int star_leave(engine *e, int leave, const char *why)
{
    (void)e;
    (void)leave;
    (void)why;
    return RINGD_EINVAL;
}

/* The star is a baseline for the ring's bandwidth: its links carry no
 * summaries, and ringctl report shows the host it asks only. */
static int star_send_report(engine *e, const summary_part *p)
{
    (void)e;
    (void)p;
    return RINGD_EINVAL;
}

static void star_watch_reports(engine *e, engine_report_cb cb, void *data)
{
    (void)e;
    (void)cb;
    (void)data;
}

static const engine_ops star_ops = {
    star_start,      star_submit, star_cancel,      star_close,        star_stats,       star_watch,
    star_members,    star_left,   star_generation,  star_submitted,    star_why_waiting, star_view,
    star_membership, star_leave,  star_send_report, star_watch_reports};

int star_new(engine **out, uv_loop_t *loop, const cfg *c, int me, const auth_key *key)
{
    star *s = calloc(1, sizeof *s);
    if (!s) return RINGD_ENOMEM;
    s->peers = calloc(c->n_hosts, sizeof *s->peers);
    if (!s->peers) {
        free(s);
        return RINGD_ENOMEM;
    }
    s->base.ops = &star_ops;
    s->loop = loop;
    s->cfg = c;
    s->me = me;
    s->n = (int)c->n_hosts;
    s->root = c->star_root_index;
    if (key) s->key = *key;
    s->hs = (hs_ctx){.cfg = c,
                     .me = me,
                     .key = key ? &s->key : NULL,
                     .streams = c->streams > 0 ? c->streams : 1,
                     .mode = HS_STAR};
    s->env = (net_env){.loop = loop, .cfg = c, .hs = &s->hs, .lt = &s->lt, .stats = &s->stats};
    uv_timer_init(loop, &s->heartbeat);
    s->heartbeat.data = s;
    static const jobs_ops qops = {on_job_abort, on_tick};
    jobs_init(&s->q, loop, &qops, s);
    unsigned accepts = PEER_ACCEPTS(FRAME_DATA) | PEER_ACCEPTS(FRAME_ABORT);
    int ok = 1;
    if (s->n > 1 && is_root(s)) {
        s->listener = listener_new(&s->env, &star_listen_ops, s);
        ok = s->listener != NULL;
        for (int h = 0; h < s->n && ok; h++)
            if (h != me)
                ok = (s->peers[h].p =
                          peer_new(&s->env, &star_link_ops, s, h, PEER_ACCEPTOR, accepts)) != NULL;
    } else if (s->n > 1) {
        ok = (s->peers[s->root].p =
                  peer_new(&s->env, &star_link_ops, s, s->root, PEER_CONNECTOR, accepts)) != NULL;
    }
    *out = &s->base;
    if (!ok) {
        star_close(&s->base, RINGD_ENOMEM, "out of memory", NULL, NULL);
        return RINGD_ENOMEM;
    }
    return 0;
}
