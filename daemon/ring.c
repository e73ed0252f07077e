/*
 * ring.c - the ring engine: bandwidth-optimal collectives over the ring's
 * links, pipelined by segments.
 *
 * Each collective follows its schedule (schedule.h). Only the first step's
 * segments are cut here, from this host's own chunk; every later step
 * forwards a received segment as soon as it is reduced or stored, with the
 * same offset and length, so segments stream round the ring and a link
 * never waits for a whole step.
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
 * How each collective ends, the same on every rank, is ring_outcome.c's
 * part (completion, confirmation, the links' epochs, deadlines), and what
 * arrives from the left ring_recv.c's.
 *
 * Collectives run only while the links say the ring is ready, and are
 * numbered from 0 in each ring epoch; every host starts an epoch at the same
 * collective of its ranks' sequence (gather.c), so seq k of an epoch is the
 * same call everywhere.
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
 * behind that frame, the earlier one ends at its deadline, never hangs.
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "reduce.h"
#include "reduce_wire.h"
#include "ring-internal.h"

int ring_mod(int x, int n)
{
    return ((x % n) + n) % n;
}

const char *ring_neighbour(const ring *r, int side)
{
    return r->view.hosts[ring_mod(r->me + side, r->n)].name;
}

/* Ranks of host h, for messages: "rank 3" or "ranks 2-3". */
void ring_host_ranks(const ring *r, int h, char *out, size_t len)
{
    int first = cfg_first_rank(&r->view, (size_t)h), k = r->view.hosts[h].local_clients;
    if (k == 1)
        snprintf(out, len, "rank %d", first);
    else
        snprintf(out, len, "ranks %d-%d", first, first + k - 1);
}

static int host_of_rank(const ring *r, int rank)
{
    for (int h = 0; h < r->n; h++)
        if (rank < cfg_first_rank(&r->view, (size_t)h) + r->view.hosts[h].local_clients) return h;
    return 0;
}

void ring_chunk_range(const ring *r, const active *a, int c, uint64_t *off, uint64_t *len)
{
    const job *j = a->job;
    schedule_chunk(&a->sch, &r->view, j->count, j->per_rank, a->esize, c, off, len);
}

uint64_t ring_chunk_len(const ring *r, const active *a, int c)
{
    uint64_t off, len;
    ring_chunk_range(r, a, c, &off, &len);
    return len;
}

/* ---- the running collectives ---- */

active *ring_slot(ring *r, int k)
{
    return &r->act[(r->first + k) % MAX_ACTIVE];
}

/* The running collective (epoch, seq), or NULL. The running ones of an
 * epoch have consecutive seqs, and those of an older epoch come first. */
active *ring_find_active(ring *r, uint32_t epoch, uint64_t seq)
{
    int k = 0;
    while (k < r->n_act && ring_slot(r, k)->epoch != epoch)
        k++;
    if (k == r->n_act) return NULL;
    uint64_t first = ring_slot(r, k)->job->seq;
    if (seq < first || seq - first >= (uint64_t)(r->n_act - k)) return NULL;
    active *a = ring_slot(r, k + (int)(seq - first));
    return a->epoch == epoch ? a : NULL;
}

/* Whether collectives of an older epoch still run (failed, finishing their
 * sends and reads): the new epoch's cannot start beside them. */
static int stale(ring *r)
{
    return r->n_act > 0 && ring_slot(r, 0)->epoch != r->epoch;
}

/* ---- failure ---- */

/* jobs_ops.abort: a collective failed here. Every host fails everything not
 * confirmed yet, through a RESET round the ring, so that hosts agree on
 * which collective each submission is and on how each ended. */
static void on_job_failed(void *eng, job *j)
{
    ring *r = eng;
    int consequence = j->status == RINGD_ERING || j->status == RINGD_EPROTO ||
                      (j->status == RINGD_ETIMEDOUT && !j->preset_status);
    epoch_failure f = {.code = j->status,
                       .seq = j->started ? j->seq : r->q.stats.seq,
                       .cls = consequence ? EPOCH_CONSEQUENCE : EPOCH_CAUSE,
                       .origin = (uint32_t)r->pos};
    snprintf(f.reason, sizeof f.reason, "%.*s", FRAME_MAX_TEXT, j->message);
    if (r->n == 1 || !r->links) return;
    links_fail(r->links, &f, 0);
}

/* After a failure that may leave frames half sent or half read: both links
 * are dropped, which breaks the ring from here (links.c); they re-form by
 * themselves. */
void ring_drop_links(ring *r)
{
    if (r->n > 1 && r->links) links_reset(r->links, "a collective on this host failed");
}

/* ---- sending ---- */

float *ring_wire_own(const active *a, uint64_t pos)
{
    return (float *)(a->job->buf + 2 * pos);
}

/* A first-step segment of a job travelling narrow: this host's own
 * elements in the wire type, ready to send from wbuf. An allgather's own
 * block is rounded in place too, so this host keeps what the others get. */
static void pack_segment(ring *r, active *a, int c, uint64_t off, uint32_t len)
{
    uint64_t coff, clen;
    ring_chunk_range(r, a, c, &coff, &clen);
    uint8_t *w = a->wbuf + coff + off;
    float *own = ring_wire_own(a, coff + off);
    ringd_dtype t = reduce_wire_type(a->job->wire);
    if (a->job->kind == RINGD_COLL_ALLGATHER)
        reduce_wire_round(t, w, own, len / 2);
    else
        reduce_wire_pack(t, w, own, len / 2);
}

void ring_send_segment(ring *r, active *a, int g, int c, uint64_t off, uint32_t len, double wsum,
                       int32_t delta_us)
{
    job *j = a->job;
    frame_data d = {.seq = j->seq,
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
                    .name_tag = j->name_tag,
                    .wire = a->wbuf ? j->wire : 0};
    uint64_t coff, clen;
    ring_chunk_range(r, a, c, &coff, &clen);
    int rc = links_send_data(r->links, &d, (a->wbuf ? a->wbuf : j->buf) + coff + off, a);
    if (rc < 0) {
        jobs_fail(&r->q, j, FAIL_RUNNING, RINGD_ERING,
                  "%s #%" PRIu64 ": cannot send to right neighbour %s: %s", j->label, j->seq,
                  ring_neighbour(r, 1), ringd_strerror(rc));
        return;
    }
    a->writes++;
}

/* ---- starting ---- */

/* A collective of one host, or of nothing, completes without the ring. */
static void run_alone(ring *r, active *a)
{
    job *j = a->job;
    if (j->count == 0 || (j->kind != RINGD_COLL_ALLREDUCE && j->kind != RINGD_COLL_REDUCE_SCATTER))
        return;
    double divisor = j->op == RINGD_WMEAN ? j->weight : j->ranks;
    if (j->op == RINGD_WMEAN && !(divisor > 0 && isfinite(divisor))) {
        jobs_fail(&r->q, j, FAIL_RING, RINGD_EINVAL,
                  "%s #%" PRIu64 ": the weights of all ranks sum to %g", j->label, j->seq, divisor);
        return;
    }
    reduce_finish(j->dtype, j->op, j->buf, j->count, divisor);
}

static uint64_t job_bytes(const job *j)
{
    return j->count * ringd_dtype_size(j->dtype);
}

/* Starts the first waiting job: its seq is the next one. */
void ring_start_next(ring *r)
{
    ring_flush_commit(r); /* before any of its DATA */
    active *a = ring_slot(r, r->n_act++);
    uint64_t *recv_off = a->recv_off;
    int32_t *delta_us = a->delta_us;
    memset(a, 0, sizeof *a);
    a->recv_off = recv_off;
    a->delta_us = delta_us;
    for (int h = 0; h < r->n; h++)
        a->delta_us[h] = FRAME_DELTA_UNKNOWN;
    job *j = a->job = jobs_start(&r->q);
    a->epoch = r->epoch;
    a->t.start_ns = uv_hrtime();
    a->t.last_host = -1;
    if (r->early_set && r->early_epoch == r->epoch && r->early_seq == j->seq) {
        /* Its left neighbour's data was here first: no wait, and by how much. */
        r->early_set = 0;
        a->t.got_wait = 1;
        a->delta_us[r->me] = -(int32_t)((a->t.start_ns - r->early_ns) / 1000);
    }
    a->esize = ringd_dtype_size(j->dtype);
    jobs_apply_preset(&r->q, j);
    if (j->status != 0) return; /* failed before it started */
    if (r->n == 1 || j->count == 0) {
        run_alone(r, a);
        return;
    }
    if (j->wire) {
        a->esize = 2; /* offsets and lengths count wire bytes from here on */
        if (r->wire_spare && r->wire_spare_cap >= j->count * 2) {
            a->wbuf = r->wire_spare;
            a->wbuf_cap = r->wire_spare_cap;
            r->wire_spare = NULL;
            r->wire_spare_cap = 0;
        } else if ((a->wbuf = malloc(j->count * 2))) {
            a->wbuf_cap = j->count * 2;
        } else {
            jobs_fail(&r->q, j, FAIL_RING, RINGD_ENOMEM,
                      "%s #%" PRIu64 ": out of memory for its %" PRIu64 "-byte wire buffer",
                      j->label, j->seq, j->count * 2);
            return;
        }
    }

    int n = r->n;
    schedule_init(&a->sch, n, r->me, j->kind,
                  j->kind == RINGD_COLL_BROADCAST ? host_of_rank(r, j->root) : 0);
    for (int g = 0; g < schedule_steps(n); g++) {
        a->recv_off[g] = 0;
        int c = schedule_recv(&a->sch, g);
        if (c >= 0 && ring_chunk_len(r, a, c) > 0) a->steps_left++;
    }
    log_debug("%s #%" PRIu64 ": %" PRIu64 " x %s %s started", j->label, j->seq, j->count,
              ringd_dtype_name(j->dtype), ringd_op_name(j->op));

    /* The first step: this host's own chunk, cut into segments. */
    uint32_t seg = r->cfg->segment_bytes / (uint32_t)a->esize * (uint32_t)a->esize;
    int c = schedule_send(&a->sch, a->sch.first);
    uint64_t bytes = c >= 0 ? ring_chunk_len(r, a, c) : 0;
    for (uint64_t off = 0; off < bytes && j->status == 0; off += seg) {
        uint32_t len = (uint32_t)(bytes - off < seg ? bytes - off : seg);
        if (a->wbuf) pack_segment(r, a, c, off, len);
        ring_send_segment(r, a, a->sch.first, c, off, len, j->weight, FRAME_DELTA_UNKNOWN);
    }

    /* The left neighbour may have started first; its frames wait for us. */
    links_resume(r->links);
}

int ring_up(ring *r)
{
    /* Closing, the links are gone before the engine: nothing starts. */
    return r->links && links_ready(r->links) && !stale(r);
}

/* Whether the next waiting job may start now, beside those running: only
 * small ones run together (see the top of this file). */
static int may_start(ring *r)
{
    const job *j = jobs_waiting(&r->q);
    if (!j || !ring_up(r) || r->n_act == MAX_ACTIVE) return 0;
    if (r->n_act == 0) return 1;
    uint64_t limit = r->cfg->fusion_threshold_bytes;
    if (r->n_act >= (int)r->cfg->fusion_max || job_bytes(j) > limit) return 0;
    for (int k = 0; k < r->n_act; k++)
        if (job_bytes(ring_slot(r, k)->job) > limit) return 0;
    return 1;
}

/* ---- advancing ---- */

static int finished(const active *a)
{
    return (a->job->status != 0 || a->steps_left == 0) && a->writes == 0 && !a->reading;
}

/* The one place that moves collectives forward: completes the oldest
 * running one when it is finished and starts waiting ones when they may.
 * Every event ends here. */
void ring_advance(ring *r)
{
    if (r->advancing) return;
    r->advancing = 1;
    for (;;) {
        if (r->n_act > 0 && finished(ring_slot(r, 0))) {
            ring_complete(r);
            continue;
        }
        if (r->closing) {
            if (jobs_waiting(&r->q))
                jobs_fail(&r->q, NULL, FAIL_ALL, RINGD_ESHUTDOWN, "ringd is shutting down");
            break;
        }
        if (!may_start(r)) break;
        ring_start_next(r);
    }
    r->advancing = 0;
    if (!r->closing) ring_update_tick(r);
}

/* ---- link events ---- */

static void on_up(void *data, link_side side)
{
    (void)side;
    ring_advance(data);
}

static void on_down(void *data, link_side side, const char *why)
{
    ring *r = data;
    const cfg_host *ph = &r->cfg->hosts[links_host(r->links, side)];
    /* A payload being read will not arrive, for any of them. */
    for (int k = 0; side == LINK_LEFT && k < r->n_act; k++)
        ring_slot(r, k)->reading = 0;
    for (int k = 0; k < r->n_act; k++) {
        active *a = ring_slot(r, k);
        job *j = a->job;
        if (j->status == 0 && (a->steps_left > 0 || a->writes > 0)) {
            jobs_fail(&r->q, j, FAIL_RUNNING, RINGD_ERING,
                      "%s #%" PRIu64 " failed: lost %s neighbour %s (%s): %s", j->label, j->seq,
                      side == LINK_LEFT ? "left" : "right", ph->name, ph->address, why);
            break; /* the others went with it */
        }
    }
    ring_advance(r);
}

static void on_sent(void *data, void *ctx, int status)
{
    ring *r = data;
    active *a = ctx;
    a->writes--;
    if (status < 0 && a->job->status == 0)
        jobs_fail(&r->q, a->job, FAIL_RUNNING, RINGD_ERING,
                  "%s #%" PRIu64 " failed: sending to right neighbour %s failed", a->job->label,
                  a->job->seq, ring_neighbour(r, 1));
    ring_advance(r);
}

/* ---- the engine ---- */

static int ring_start(engine *e, char *err, size_t errlen)
{
    ring *r = (ring *)e;
    return links_start(r->links, err, errlen);
}

static void ring_submit(engine *e, job *j)
{
    ring *r = (ring *)e;
    if (r->closing) {
        jobs_reject(&r->q, j, RINGD_ESHUTDOWN, "ringd is shutting down");
        return;
    }
    jobs_push(&r->q, j);
    /* A collective that failed before it could start (its local ranks
     * disagree, one never came) fails every host's: now if the ring runs,
     * else when its turn comes (jobs_start()), so that it keeps its place
     * in the numbering every host agrees on. */
    if (j->preset_status < 0 && r->n > 1 && ring_up(r)) {
        epoch_failure f = {.code = j->preset_status,
                           .seq = r->q.stats.seq,
                           .cls = EPOCH_CAUSE,
                           .origin = (uint32_t)r->pos};
        snprintf(f.reason, sizeof f.reason, "%.*s", FRAME_MAX_TEXT, j->preset_message);
        links_fail(r->links, &f, 0);
    }
    ring_advance(r);
}

static void ring_cancel(engine *e, job *j, int status, const char *message)
{
    ring *r = (ring *)e;
    for (int k = 0; k < r->n_act; k++) {
        if (ring_slot(r, k)->job != j) continue;
        if (j->status == 0)
            jobs_fail(&r->q, j, FAIL_RING, status, "%s #%" PRIu64 " failed: %s", j->label, j->seq,
                      message);
        ring_advance(r);
        return;
    }
    /* Not started: it fails as it starts. */
    if (j->preset_status == 0) {
        j->preset_status = status;
        j->preset_message = message;
    }
}

static void ring_watch(engine *e, const engine_watcher *w, void *data)
{
    ring *r = (ring *)e;
    r->watcher = w;
    r->watcher_data = data;
    if (r->n == 1) {
        /* No laps: collectives run from the first on. */
        job_verdict v = {.code = RINGD_ERING,
                         .fail_seq = FRAME_NO_SEQ,
                         .reason = "",
                         .ready = 1,
                         .next_epoch = 1};
        w->settled(data, &v);
    }
}

static void ring_members(engine *e, int complete, int gone, const char *why)
{
    ring *r = (ring *)e;
    if (r->n == 1 || !r->links) return;
    links_members(r->links, complete, why);
    if (!gone) return;
    /* Every host fails what is not confirmed, at once, naming the rank. */
    epoch_failure f = {.code = RINGD_EABORTED,
                       .seq = r->q.stats.seq,
                       .cls = EPOCH_LEFT,
                       .origin = (uint32_t)r->pos};
    snprintf(f.reason, sizeof f.reason, "%s", why);
    links_fail(r->links, &f, 1);
}

static int ring_left(const engine *e, uint64_t born, char *why, size_t len)
{
    const ring *r = (const ring *)e;
    if (!r->gone || born >= r->gen) return 0;
    snprintf(why, len, "%s", r->gone_why);
    return 1;
}

static uint64_t ring_generation(const engine *e)
{
    return ((const ring *)e)->gen;
}

static void ring_submitted(engine *e, uint64_t top)
{
    ring *r = (ring *)e;
    if (r->links) links_submitted(r->links, top);
}

static void ring_why_waiting(const engine *e, char *out, size_t len)
{
    const ring *r = (const ring *)e;
    if (!r->links)
        snprintf(out, len, "ringd is shutting down");
    else if (ring_up((ring *)r))
        out[0] = '\0';
    else
        ring_describe_wait(r, NULL, out, len);
}

static void ring_free(ring *r)
{
    free(r->staging);
    commit_free(&r->cv);
    free(r->view.hosts);
    free(r->wire_spare);
    for (int k = 0; k < MAX_ACTIVE; k++) {
        free(r->act[k].recv_off);
        free(r->act[k].delta_us);
    }
    free(r);
}

static void on_commit_closed(uv_handle_t *h)
{
    ring *r = h->data;
    void (*done)(void *) = r->done_cb;
    void *data = r->done_data;
    ring_free(r);
    if (done) done(data);
}

static void on_tick_closed(uv_handle_t *h)
{
    ring *r = ((jobs *)h->data)->engine;
    uv_close((uv_handle_t *)&r->commit, on_commit_closed);
}

static void on_links_closed(void *data)
{
    ring *r = data;
    r->links = NULL;
    jobs_close(&r->q, on_tick_closed);
}

static void ring_close(engine *e, int status, const char *message, void (*done)(void *), void *data)
{
    ring *r = (ring *)e;
    r->closing = 1;
    r->done_cb = done;
    r->done_data = data;
    jobs_fail(&r->q, NULL, FAIL_ALL, status, "%s", message);
    /* Held ones end too: no word of the ring comes any more. */
    job_verdict v = {.code = status, .fail_seq = FRAME_NO_SEQ, .reason = message};
    jobs_settle(&r->q, &v);
    /* Closing the links stops a payload being read, and cancels the pending
     * sends: their callbacks finish the running jobs before
     * on_links_closed runs. */
    for (int k = 0; k < r->n_act; k++)
        ring_slot(r, k)->reading = 0;
    links_close(r->links, on_links_closed, r);
    ring_advance(r);
}

static void ring_stats(const engine *e, engine_stats *out)
{
    const ring *r = (const ring *)e;
    memset(out, 0, sizeof *out);
    out->jobs = r->q.stats;
    if (!r->links) { /* closing */
        snprintf(out->waiting, sizeof out->waiting, "ringd is shutting down");
        return;
    }
    links_get_stats(r->links, &out->net);
    out->epoch = links_epoch(r->links);
    out->ready = links_ready(r->links);
    out->next_seq = r->q.stats.seq;
    snprintf(out->waiting, sizeof out->waiting, "%s", links_waiting(r->links));
    out->short_of_hosts = links_short_of_hosts(r->links);
    out->n_done = r->n < 64 ? r->n : 64;
    memcpy(out->done, r->cv.done, (size_t)out->n_done * sizeof *r->cv.done);
    engine_link *side[2] = {&out->left, &out->right};
    for (int s = 0; s < 2; s++) {
        side[s]->host = links_host(r->links, (link_side)s);
        side[s]->state = links_state(r->links, (link_side)s);
        side[s]->since_ms = links_since(r->links, (link_side)s);
        side[s]->refused = links_refused(r->links, (link_side)s);
        snprintf(side[s]->error, sizeof side[s]->error, "%s",
                 links_last_error(r->links, (link_side)s));
    }
}

void ring_set_view(ring *r, uint64_t members, uint32_t members_epoch)
{
    const cfg *c = r->cfg;
    cfg_host *hosts = r->view.hosts;
    /* A copy: the view's own fields are read for its hosts only (tuning
     * is read from r->cfg, which a reload updates). */
    r->view = *c;
    r->view.hosts = hosts;
    size_t k = 0;
    for (size_t h = 0; h < c->n_hosts; h++) {
        if (h < 64 && !(members & (UINT64_C(1) << h))) continue;
        if ((int)h == r->pos) r->me = (int)k;
        hosts[k++] = c->hosts[h];
    }
    r->view.n_hosts = k;
    r->n = (int)k;
    /* Counts are of a view's hosts: none of another view's may stay. */
    ring_reset_commit(r);
    r->members = members;
    r->members_epoch = members_epoch;
}

static void ring_view(const engine *e, engine_view *out)
{
    const ring *r = (const ring *)e;
    *out = (engine_view){.hosts = &r->view,
                         .me = r->me,
                         .members_epoch = r->members_epoch,
                         .resize_why = r->links ? links_resize_why(r->links) : "",
                         .resizes = r->resizes,
                         .n_resizes = r->n_resizes};
}

static void ring_membership(const engine *e, links_membership *out)
{
    const ring *r = (const ring *)e;
    if (r->links)
        links_get_membership(r->links, out);
    else
        memset(out, 0, sizeof *out);
}

static int ring_leave(engine *e, int leave, const char *why)
{
    ring *r = (ring *)e;
    if (!r->links) return RINGD_ESHUTDOWN;
    return leave ? links_leave(r->links, why) : links_join(r->links);
}

static int ring_send_report(engine *e, const summary_part *p)
{
    ring *r = (ring *)e;
    return r->links ? links_send_report(r->links, p) : RINGD_ERING;
}

static void ring_watch_reports(engine *e, engine_report_cb cb, void *data)
{
    ring *r = (ring *)e;
    r->report_cb = cb;
    r->report_data = data;
}

static void on_report(void *data, const summary_part *p)
{
    ring *r = data;
    if (r->report_cb) r->report_cb(r->report_data, p);
}

static const engine_ops ring_ops = {
    ring_start,      ring_submit, ring_cancel,      ring_close,        ring_stats,       ring_watch,
    ring_members,    ring_left,   ring_generation,  ring_submitted,    ring_why_waiting, ring_view,
    ring_membership, ring_leave,  ring_send_report, ring_watch_reports};

int ring_new(engine **out, uv_loop_t *loop, const cfg *c, int me, const auth_key *key)
{
    ring *r = calloc(1, sizeof *r);
    if (!r) return RINGD_ENOMEM;
    r->base.ops = &ring_ops;
    r->loop = loop;
    r->cfg = c;
    r->pos = me;
    size_t n = c->n_hosts; /* the most hosts a view has */
    r->view.hosts = calloc(n, sizeof *r->view.hosts);
    int rc = r->view.hosts && commit_init(&r->cv, (int)n) == 0 ? 0 : RINGD_ENOMEM;
    if (rc == 0) ring_set_view(r, frame_members_all(n), 0);
    for (int k = 0; k < MAX_ACTIVE && rc == 0; k++) {
        r->act[k].recv_off = calloc(2 * n, sizeof *r->act[k].recv_off);
        r->act[k].delta_us = calloc(n, sizeof *r->act[k].delta_us);
        if (!r->act[k].recv_off || !r->act[k].delta_us) rc = RINGD_ENOMEM;
    }
    static const links_callbacks cb = {on_up,           on_down,        ring_on_data,
                                       ring_on_payload, on_sent,        ring_on_epoch,
                                       ring_on_settle,  ring_on_commit, on_report};
    if (rc == 0) rc = links_new(&r->links, loop, c, me, &cb, r);
    if (rc < 0) {
        ring_free(r);
        return rc;
    }
    if (key) links_set_key(r->links, key);
    static const jobs_ops qops = {on_job_failed, ring_on_tick};
    jobs_init(&r->q, loop, &qops, r);
    uv_idle_init(loop, &r->commit);
    r->commit.data = r;
    *out = &r->base;
    return 0;
}
