/*
 * ring_recv.c - what the ring engine does with DATA from its left
 * neighbour: checks it against the collective it belongs to, reduces or
 * stores its payload, and forwards it at once to the right.
 *
 * Checks on a DATA header, in order (PROTOCOL.md, "Checks on a received
 * DATA frame"): it names a running collective (one queued here starts, one
 * not submitted here yet waits in the socket, an older one is skipped);
 * kind, count, type, op, root and name agree with this host's (else the
 * collective fails everywhere with RINGD_EMISMATCH); its step, chunk,
 * offset and length are the ones the schedule expects next (else the
 * stream cannot be trusted: RINGD_EPROTO drops the links).
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

static int protocol_error(ring *r, active *a, char *why, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static int protocol_error(ring *r, active *a, char *why, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
    jobs_fail(&r->q, a->job, FAIL_RUNNING, RINGD_EPROTO,
              "%s #%" PRIu64 ": protocol error from left neighbour %s: %s", a->job->label,
              a->job->seq, ring_neighbour(r, -1), why);
    ring_drop_links(r);
    return RINGD_EPROTO;
}

/* Fails a with RINGD_EMISMATCH if d is of another collective; 1 if so. */
static int mismatch(ring *r, active *a, const frame_data *d)
{
    job *j = a->job;
    char lr[32], mr[32];
    int left = ring_mod(r->me - 1, r->n);
    if (d->kind != j->kind || d->count != j->count || d->dtype != j->dtype || d->op != j->op ||
        (j->kind == RINGD_COLL_BROADCAST && d->root != (uint32_t)j->root)) {
        char theirs[160], ours[160];
        engine_describe(theirs, sizeof theirs, d->kind, d->count, d->dtype, d->op, (int)d->root);
        engine_describe(ours, sizeof ours, j->kind, j->count, j->dtype, j->op, j->root);
        ring_host_ranks(r, left, lr, sizeof lr);
        ring_host_ranks(r, r->me, mr, sizeof mr);
        jobs_fail(&r->q, j, FAIL_RING, RINGD_EMISMATCH,
                  "%s #%" PRIu64 " differs between ranks: host %s (%s) has %s, host %s (%s) has %s",
                  j->label, j->seq, r->view.hosts[left].name, lr, theirs, r->view.hosts[r->me].name,
                  mr, ours);
        return 1;
    }
    if (d->wire != (a->wbuf ? j->wire : 0)) {
        static const char *const as[] = {"float32", "float32", "bfloat16", "float16"};
        ring_host_ranks(r, left, lr, sizeof lr);
        ring_host_ranks(r, r->me, mr, sizeof mr);
        jobs_fail(&r->q, j, FAIL_RING, RINGD_EMISMATCH,
                  "%s #%" PRIu64 " travels as %s from host %s (%s) and as %s from host %s (%s); "
                  "set the same wire_dtype on every host, or in the call on every rank",
                  j->label, j->seq, as[d->wire & 3], r->view.hosts[left].name, lr,
                  as[a->wbuf ? j->wire & 3 : 0], r->view.hosts[r->me].name, mr);
        return 1;
    }
    if (d->name_tag && j->name_tag && d->name_tag != j->name_tag) {
        ring_host_ranks(r, left, lr, sizeof lr);
        ring_host_ranks(r, r->me, mr, sizeof mr);
        jobs_fail(&r->q, j, FAIL_RING, RINGD_EMISMATCH,
                  "%s #%" PRIu64 " differs between ranks: host %s (%s) submitted a collective "
                  "of the same shape under another name, host %s (%s) this one; are the ranks "
                  "out of step (after an error, did every rank retry the same collective)?",
                  j->label, j->seq, r->view.hosts[left].name, lr, r->view.hosts[r->me].name, mr);
        return 1;
    }
    return 0;
}

/* Where a segment of a reduce-scatter step lands before it is reduced. */
static uint8_t *staging(ring *r, active *a, uint32_t len, char *why, size_t whylen)
{
    if (len <= r->staging_cap) return r->staging;
    uint8_t *p = realloc(r->staging, len);
    if (!p) {
        jobs_fail(&r->q, a->job, FAIL_RUNNING, RINGD_ENOMEM,
                  "%s #%" PRIu64 ": out of memory for a %u-byte segment", a->job->label,
                  a->job->seq, len);
        ring_drop_links(r);
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    r->staging = p;
    r->staging_cap = len;
    return p;
}

int ring_on_data(void *data, const frame_data *d, uint8_t **dst, char *why, size_t whylen)
{
    ring *r = data;
    /* A frame of a collective queued here but not started starts it: the
     * left neighbour runs it already, and frames of those running here may
     * be behind it. One not submitted here yet waits in the socket. */
    while (d->seq >= r->q.stats.seq && jobs_waiting(&r->q) && ring_up(r) && r->n_act < MAX_ACTIVE)
        ring_start_next(r);
    active *a = ring_find_active(r, d->epoch, d->seq);
    if (!a && d->seq >= r->q.stats.seq) {
        if (!r->early_set || r->early_seq != d->seq || r->early_epoch != d->epoch) {
            r->early_set = 1;
            r->early_epoch = d->epoch;
            r->early_seq = d->seq;
            r->early_ns = uv_hrtime();
            r->early_kind = d->kind;
            ring_update_tick(r);
        }
        return READER_PAUSE;
    }
    if (!a) return READER_SKIP;
    job *j = a->job;
    /* Frames of one that failed here are late, not wrong. */
    if (j->status != 0) return READER_SKIP;
    /* How long this host waited for its left neighbour: stragglers. */
    if (!a->t.got_wait) {
        a->t.got_wait = 1;
        a->t.wait_ns = uv_hrtime() - a->t.start_ns;
        a->delta_us[r->me] = (int32_t)(a->t.wait_ns / 1000);
    }
    if (mismatch(r, a, d)) return READER_SKIP;

    int c = schedule_recv(&a->sch, d->step);
    if (c < 0) return protocol_error(r, a, why, whylen, "no data expected at step %u", d->step);
    if (d->chunk != (uint32_t)c)
        return protocol_error(r, a, why, whylen, "step %u carries chunk %u, expected chunk %d",
                              d->step, d->chunk, c);
    if (d->offset != a->recv_off[d->step])
        return protocol_error(r, a, why, whylen, "step %u: offset %" PRIu64 ", expected %" PRIu64,
                              d->step, d->offset, a->recv_off[d->step]);
    uint64_t coff, clen;
    ring_chunk_range(r, a, c, &coff, &clen);
    if (d->length == 0 || d->length % a->esize != 0 || d->length > clen - d->offset)
        return protocol_error(r, a, why, whylen,
                              "step %u: %u bytes at offset %" PRIu64 " do not fit chunk %d "
                              "(%" PRIu64 " bytes of %zu-byte elements)",
                              d->step, d->length, d->offset, c, clen, a->esize);

    if (a->wbuf) {
        /* Every step lands in the wire buffer, in place, and is sent on
         * from there (see ring.c on why the bytes are free by then). */
        *dst = a->wbuf + coff + d->offset;
        a->reading = 1;
    } else if (schedule_reduces(&a->sch, d->step)) {
        *dst = staging(r, a, d->length, why, whylen);
        if (!*dst) return RINGD_ENOMEM;
    } else {
        *dst = j->buf + coff + d->offset;
        a->reading = 1;
    }
    return READER_INTO;
}

void ring_on_payload(void *data, const frame_data *d, int status, const char *why)
{
    ring *r = data;
    active *a = ring_find_active(r, d->epoch, d->seq);
    if (!a) return; /* cannot happen: running jobs complete only after their reads */
    job *j = a->job;
    a->reading = 0;
    if (status < 0 && j->status == 0)
        jobs_fail(&r->q, j, FAIL_RING, status, "%s #%" PRIu64 " failed at step %u: %s", j->label,
                  j->seq, d->step, why);
    if (j->status != 0) {
        ring_advance(r);
        return;
    }
    int g = d->step, c = (int)d->chunk;
    uint64_t coff, clen;
    ring_chunk_range(r, a, c, &coff, &clen);
    uint8_t *p = j->buf + coff + d->offset;
    size_t elems = d->length / a->esize;
    double wsum = 0;

    if (schedule_reduces(&a->sch, g)) {
        wsum = d->wsum + j->weight;
        /* The last reduce-scatter step completes this host's own chunk. */
        int last = schedule_completes(&a->sch, g);
        double divisor = j->op == RINGD_WMEAN ? wsum : j->ranks;
        if (last && j->op == RINGD_WMEAN && !(divisor > 0 && isfinite(divisor))) {
            jobs_fail(&r->q, j, FAIL_RING, RINGD_EINVAL,
                      "%s #%" PRIu64 ": wmean needs positive weights; they sum to %g", j->label,
                      j->seq, divisor);
            ring_advance(r);
            return;
        }
        if (a->wbuf && last) {
            reduce_wire_complete(reduce_wire_type(j->wire), j->op, a->wbuf + coff + d->offset,
                                 ring_wire_own(a, coff + d->offset), elems, divisor);
        } else if (a->wbuf) {
            reduce_wire_fold(reduce_wire_type(j->wire), j->op, a->wbuf + coff + d->offset,
                             ring_wire_own(a, coff + d->offset), elems);
        } else {
            reduce_apply(j->dtype, j->op, p, r->staging, elems);
            if (last) reduce_finish(j->dtype, j->op, p, elems, divisor);
        }
    } else if (a->wbuf) {
        reduce_wire_unpack(reduce_wire_type(j->wire), ring_wire_own(a, coff + d->offset),
                           a->wbuf + coff + d->offset, elems);
    }
    a->recv_off[g] += d->length;
    if (a->recv_off[g] == clen) a->steps_left--;
    /* Allgather of an allreduce: the chunk carries the delta of the host
     * that completed it (this one at the first allgather step). */
    int32_t delta = FRAME_DELTA_UNKNOWN;
    if (j->kind == RINGD_COLL_ALLREDUCE && g >= r->n - 1) {
        if (d->delta_us != FRAME_DELTA_UNKNOWN) a->delta_us[ring_mod(c - 1, r->n)] = d->delta_us;
        delta = d->delta_us;
    } else if (j->kind == RINGD_COLL_ALLREDUCE && schedule_completes(&a->sch, g)) {
        delta = a->delta_us[r->me];
    }
    if (schedule_send(&a->sch, g + 1) == c)
        ring_send_segment(r, a, g + 1, c, d->offset, d->length, wsum, delta);
    ring_advance(r);
}
