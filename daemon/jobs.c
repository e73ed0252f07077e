/*
 * jobs.c - the queue of collectives an engine runs; see jobs.h.
 */
#include "jobs.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "log.h"

const double job_latency_bounds[JOB_LATENCY_BUCKETS] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};

static void on_tick(uv_timer_t *t)
{
    jobs *q = t->data;
    q->ops->tick(q->engine, uv_now(t->loop));
}

void jobs_init(jobs *q, uv_loop_t *loop, const jobs_ops *ops, void *eng)
{
    memset(q, 0, sizeof *q);
    q->ops = ops;
    q->engine = eng;
    uv_timer_init(loop, &q->tick);
    q->tick.data = q;
}

void jobs_close(jobs *q, uv_close_cb cb)
{
    uv_close((uv_handle_t *)&q->tick, cb);
}

void jobs_update_tick(jobs *q)
{
    /* Held jobs have a deadline too (jobs_expire_held()). */
    if (q->head || q->held || q->awaiting) {
        if (!uv_is_active((uv_handle_t *)&q->tick))
            uv_timer_start(&q->tick, on_tick, JOBS_TICK_MS, JOBS_TICK_MS);
    } else {
        uv_timer_stop(&q->tick);
    }
}

/* A collective failed: a line at warn, rate-limited (a client that dies
 * with thousands queued fails them all at once), at debug otherwise. */
static void warn_failure(jobs *q, const char *message)
{
    log_limited(&q->fail_rl, uv_now(q->tick.loop), JOBS_FAIL_LOG_MS, LOG_WARN, "%s", message);
}

/* ---- the counters ---- */

/* Counts an ended collective; t is NULL for one that never ran here. */
static void count(jobs *q, const job *j, int status, const job_timing *t)
{
    job_stats *s = &q->stats;
    int o = status == 0                 ? JOB_OK
            : status == RINGD_ETIMEDOUT ? JOB_TIMEOUT
            : status == RINGD_EMISMATCH ? JOB_MISMATCH
                                        : JOB_ERROR;
    s->by_kind[(unsigned)j->kind < JOB_KINDS ? j->kind : 0][o]++;
    if (status == 0) {
        s->done++;
    } else {
        s->failed++;
        snprintf(s->last_error, sizeof s->last_error, "%s", j->message);
        s->last_error_ms = uv_now(q->tick.loop);
    }
    if (!t) return;
    uint64_t ns = uv_hrtime() - t->start_ns;
    double sec = (double)ns / 1e9;
    int b = 0;
    while (b < JOB_LATENCY_BUCKETS && sec > job_latency_bounds[b])
        b++;
    s->latency[b]++;
    s->latency_sum_s += sec;
    if (t->got_wait) {
        s->waits++;
        s->wait_sum_s += (double)t->wait_ns / 1e9;
    }
    if (t->last_host >= 0 && t->spread_us >= JOB_STRAGGLER_US && t->last_host < JOB_STATS_HOSTS)
        s->last_count[t->last_host]++;
    s->recent[s->n_recent++ % JOB_RECENT] = (job_recent){.seq = j->seq,
                                                         .kind = (uint8_t)j->kind,
                                                         .has_wait = (uint8_t)t->got_wait,
                                                         .status = status,
                                                         .wait_us = t->wait_ns / 1000,
                                                         .latency_us = ns / 1000,
                                                         .last_host = (int16_t)t->last_host,
                                                         .spread_us = t->spread_us};
}

/* ---- the queue ---- */

void jobs_push(jobs *q, job *j)
{
    j->next = NULL;
    j->status = 0;
    j->message[0] = '\0';
    if (q->tail)
        q->tail->next = j;
    else
        q->head = j;
    q->tail = j;
    if (!q->waiting) q->waiting = j;
}

job *jobs_oldest(const jobs *q)
{
    return q->running ? q->head : NULL;
}

job *jobs_waiting(const jobs *q)
{
    return q->waiting;
}

/* Removes the head of the queue. */
static job *pop(jobs *q)
{
    job *j = q->head;
    q->head = j->next;
    if (!q->head) q->tail = NULL;
    if (q->waiting == j) q->waiting = j->next;
    return j;
}

/* Records j's first failure; returns whether it was the first. */
static int record(job *j, int status, const char *message)
{
    if (j->status != 0) return 0;
    j->status = status;
    snprintf(j->message, sizeof j->message, "%.*s", (int)sizeof j->message - 1, message);
    return 1;
}

job *jobs_start(jobs *q)
{
    job *j = q->waiting;
    q->waiting = j->next;
    q->running++;
    j->started = 1;
    j->seq = q->stats.seq++;
    return j;
}

void jobs_apply_preset(jobs *q, job *j)
{
    if (j->preset_status < 0) {
        jobs_fail(q, j, FAIL_RING, j->preset_status, "%s", j->preset_message);
        return;
    }
    /* Another host failed it before this host's ranks submitted it; the
     * abort has gone on around the ring already. */
    const job_abort *a = jobs_find_abort(q, j->seq);
    if (a && record(j, a->code, a->reason)) warn_failure(q, j->message);
}

void jobs_complete(jobs *q, const job_timing *t)
{
    job *j = pop(q);
    q->running--;
    if (t) j->t = *t;
    count(q, j, j->status, t);
    if (j->status == 0) log_debug("%s #%" PRIu64 " done", j->label, j->seq);
    j->done(j, j->status, j->status ? j->message : NULL);
}

/* Appends j to the held jobs. */
static void hold(jobs *q, job *j, uint64_t hold_deadline)
{
    j->next = NULL;
    j->hold_deadline = hold_deadline;
    if (q->held_tail)
        q->held_tail->next = j;
    else
        q->held = j;
    q->held_tail = j;
}

void jobs_hold(jobs *q, const job_timing *t, uint64_t hold_deadline)
{
    job *j = pop(q);
    q->running--;
    if (t) j->t = *t;
    hold(q, j, hold_deadline);
}

/* Takes the first waiting job off the queue, whose tail the waiting ones are. */
static job *unlink_waiting(jobs *q)
{
    job *j = q->waiting;
    if (q->head == j) {
        pop(q);
    } else {
        job *p = q->head;
        while (p->next != j)
            p = p->next;
        p->next = j->next;
        if (q->tail == j) q->tail = p;
        q->waiting = j->next;
    }
    return j;
}

void jobs_hold_waiting(jobs *q, int status, const char *message, uint64_t now, uint64_t grace,
                       uint32_t epoch, uint64_t *next)
{
    while (q->waiting) {
        job *j = unlink_waiting(q);
        record(j, status, message);
        j->epoch = epoch;
        if (epoch && next) j->seq = (*next)++;
        hold(q, j, (j->deadline > now ? j->deadline : now) + grace);
    }
}

/* Ends the first held job with its status. */
static void release(jobs *q)
{
    job *j = q->held;
    q->held = j->next;
    if (!q->held) q->held_tail = NULL;
    count(q, j, j->status, j->started ? &j->t : NULL);
    if (j->status == 0) log_debug("%s #%" PRIu64 " done", j->label, j->seq);
    j->done(j, j->status, j->status ? j->message : NULL);
}

void jobs_release_first(jobs *q)
{
    release(q);
}

void jobs_confirm(jobs *q, uint32_t epoch, uint64_t upto)
{
    while (q->held && q->held->status == 0 && q->held->epoch == epoch && q->held->seq < upto)
        release(q);
}

int job_verdict_unheard(const job_verdict *v, uint32_t epoch)
{
    return epoch && v->epoch && epoch < v->epoch;
}

int job_verdict_apply(const job_verdict *v, const char *label, uint32_t epoch, uint64_t seq,
                      char *out, size_t len)
{
    if (job_verdict_unheard(v, epoch)) {
        /* The verdict that settled epoch went round while this host was
         * out of the ring (cut off, frozen) and this one settles a later
         * epoch: the others ended the collective with words never heard
         * here, and may have had it succeed. */
        snprintf(out, len,
                 "%s #%" PRIu64 " failed: outcome unknown: this host was out of the ring while "
                 "the others settled it (it ran in epoch %" PRIu32 ", the ring has settled epoch "
                 "%" PRIu32 " since); restart the training step from a checkpoint on every rank",
                 label, seq, epoch, v->epoch);
        return RINGD_ERING;
    }
    int same = v->epoch && epoch == v->epoch;
    if (same && seq < v->done) return 0;
    if (same && seq == v->fail_seq && v->own)
        snprintf(out, len, "%s", v->reason);
    else
        snprintf(out, len, "%s failed: %s", label, v->reason);
    return v->code;
}

void jobs_settle_one(job *j, const job_verdict *v)
{
    /* One code and one message for a collective, on every host, whatever
     * each saw of the failure. A success here is one only if the verdict
     * says so; a failure here stays one. */
    char message[JOB_MAX_MESSAGE];
    int code = job_verdict_apply(v, j->label, j->epoch, j->seq, message, sizeof message);
    /* (A failure here is never below done: this host's count stops at it.) */
    if (code == 0) return;
    j->status = code;
    memcpy(j->message, message, sizeof j->message);
}

void jobs_settle(jobs *q, const job_verdict *v)
{
    while (q->held) {
        jobs_settle_one(q->held, v);
        release(q);
    }
}

int jobs_expire_held(jobs *q, uint64_t now, int code, const char *unknown, const char *unsettled)
{
    int n = 0;
    /* Held jobs end in order: the first not due holds the rest. */
    while (q->held && q->held->hold_deadline <= now) {
        job *j = q->held;
        char own[JOB_MAX_MESSAGE];
        if (j->status == 0) {
            snprintf(j->message, sizeof j->message, "%s #%" PRIu64 ": %s", j->label, j->seq,
                     unknown);
        } else {
            memcpy(own, j->message, sizeof own);
            snprintf(j->message, sizeof j->message, "outcome unknown: %.600s; %s", own, unsettled);
        }
        j->status = code;
        warn_failure(q, j->message);
        release(q);
        n++;
    }
    return n;
}

void jobs_end_waiting(jobs *q, int status, const char *message)
{
    job *j = unlink_waiting(q);
    record(j, status, message);
    count(q, j, status, NULL);
    j->done(j, status, j->message);
}

void jobs_reject(jobs *q, job *j, int status, const char *message)
{
    j->status = 0;
    record(j, status, message);
    count(q, j, status, NULL);
    j->done(j, status, j->message);
}

void jobs_fail(jobs *q, job *j, fail_scope scope, int status, const char *fmt, ...)
{
    char message[JOB_MAX_MESSAGE], other[JOB_MAX_MESSAGE + 64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    if (scope == FAIL_ALL) {
        if (q->head) warn_failure(q, message);
        int k = 0;
        for (job *o = q->head; o && k < q->running; o = o->next, k++) {
            snprintf(other, sizeof other, "%s #%" PRIu64 " failed: %s", o->label, o->seq, message);
            record(o, status, other);
        }
        while (q->waiting)
            jobs_end_waiting(q, status, message);
        return;
    }
    int first = record(j, status, message);
    if (first) warn_failure(q, message);
    if (scope == FAIL_RING && first) q->ops->abort(q->engine, j);
    if (scope != FAIL_RUNNING) return;
    /* The others running go down with j. */
    int k = 0;
    for (job *o = q->head; o && k < q->running; o = o->next, k++) {
        if (o == j) continue;
        snprintf(other, sizeof other, "%s #%" PRIu64 " failed with #%" PRIu64 ": %s", o->label,
                 o->seq, j->seq, j->message);
        record(o, j->status, other);
    }
}

/* ---- remembered aborts ---- */

const job_abort *jobs_find_abort(const jobs *q, uint64_t seq)
{
    for (int i = 0; i < q->n_aborts; i++)
        if (q->aborts[i].seq == seq) return &q->aborts[i];
    return NULL;
}

void jobs_remember_abort(jobs *q, const frame_abort *a)
{
    if (jobs_find_abort(q, a->seq)) return;
    if (q->n_aborts == JOBS_MAX_ABORTS) q->n_aborts--;
    job_abort *p = &q->aborts[q->n_aborts++];
    p->seq = a->seq;
    p->code = a->code;
    snprintf(p->reason, sizeof p->reason, "%s", a->reason);
}

void jobs_forget_aborts(jobs *q, uint64_t upto)
{
    for (int i = 0; i < q->n_aborts; i++)
        if (q->aborts[i].seq <= upto) q->aborts[i--] = q->aborts[--q->n_aborts];
}

void jobs_renumber(jobs *q)
{
    q->stats.seq = 0;
    q->n_aborts = 0;
}
