/*
 * gather.c - a host's collectives from its local ranks; see gather.h.
 */
#include "gather.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "reduce.h"

#define TICK_MS 100
/* A collective on the ring waits this much past its deadline, so that a host
 * whose own rank never came (and that fails it at the deadline) can tell the
 * others why before they time out on their own. */
#define RING_GRACE_MS 1000
/* Indices of newcomers while the next epoch's start is unknown: k-th
 * submission at JOIN_BASE + k, moved to the start once it is known. */
#define JOIN_BASE (UINT64_C(1) << 62)
#define MAX_JOINERS 64

typedef struct {
    void *who;   /* the session that submitted it */
    void *s;     /* the session to answer; NULL once answered or gone */
    uint64_t id; /* request id to answer */
    region *reg; /* holds a reference; NULL for no bytes */
    uint8_t *buf;
    msg_collective m;
} submission;

typedef struct coll {
    gather *owner;
    uint64_t index; /* collective number on this host */
    int arrived;
    int running; /* handed to the engine */
    uint64_t deadline;
    char label[MSG_MAX_NAME + 32];
    int work;             /* the local rank whose buffer the engine runs on */
    uint64_t first_ns;    /* uv_hrtime() of its first local rank's submission */
    uint64_t ready_ns;    /* ... and of its last one's */
    int last_local;       /* which local rank came last */
    int first;            /* this host's first rank when it ran */
    uint8_t barrier_byte; /* a barrier's buffer */
    char failure[MSG_MAX_TEXT];
    int fail_status; /* it failed here (coll_fail()): handed over failed, or to be once the
                        next epoch's start is known */
    int deferred;    /* complete, waiting for the next epoch's start */
    int limbo;       /* made while the next epoch's start was unknown */
    int expired;     /* its ranks were answered at its deadline; it keeps its place */
    job job;
    struct coll *next;
    submission subs[]; /* one per local rank */
} coll;

#define SETTLED_KEPT 8

/* A verdict and the first index it settled (its epoch's seq 0). */
typedef struct {
    job_verdict v;
    char reason[FRAME_MAX_TEXT + 64];
    uint64_t base;
} settled;

struct gather {
    uv_loop_t *loop;
    const cfg *cfg;
    int me, local_size;
    engine *engine;
    gather_reply_cb reply;
    uv_timer_t tick; /* local deadlines */
    coll *colls;     /* waiting or running, by index */
    int n_colls;
    uint64_t next_index; /* of the oldest collective not yet finished */
    /* The numbering (gather.h): the current epoch's seq 0 is index base;
     * top is how many of it any local rank submitted while the ring was
     * ready in it. After a reset (limbo) the next epoch's start is not
     * known until a verdict; colls that waited for local ranks then are set
     * aside, answered by the verdict. */
    uint32_t epoch; /* the ready epoch base counts in, 0 before the first */
    uint64_t base, top;
    uint64_t high; /* above every index a rank has had */
    uint64_t last_tick; /* jobs_stalled() */
    int limbo;
    coll *aside;
    gather_pos *joiners[MAX_JOINERS]; /* newcomers in limbo, at JOIN_BASE + k */
    log_ratelimit fail_rl;
    int n_joiners;
    /* The verdicts that ended the last limbos, newest last, for
     * submissions of their epochs that come later: a rank that sat out
     * collectives (it waited, or failed early) still has those numbers
     * next, and they failed everywhere else. A rank may be several
     * verdicts behind; one further back than SETTLED_KEPT still fails. */
    settled past[SETTLED_KEPT];
    int n_past;
};

static void on_tick(uv_timer_t *t);
static void expire_aside(gather *g, uint64_t now);

/* Finds the verdict that settled index, or NULL if it is older than any
 * kept. Indices below base were all settled by some verdict. */
static const settled *settled_of(const gather *g, uint64_t index)
{
    for (int i = g->n_past - 1; i >= 0; i--)
        if (index >= g->past[i].base) return &g->past[i];
    return NULL;
}

static void replyf(gather *g, void *s, uint64_t id, int status, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void replyf(gather *g, void *s, uint64_t id, int status, const char *fmt, ...)
{
    char text[MSG_MAX_TEXT + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    g->reply(s, id, status, text, NULL);
}

int gather_settled_before(const gather *g, const gather_pos *pos)
{
    return pos->next < g->base;
}

int gather_submitted(const gather *g, int rank)
{
    const coll *c = g->colls;
    while (c && c->running)
        c = c->next;
    return c && c->subs[rank].s != NULL;
}

const char *gather_label(const msg_collective *m, char *buf, size_t len)
{
    if (m->name[0])
        snprintf(buf, len, "%s \"%s\"", engine_kind_name(m->kind), m->name);
    else
        snprintf(buf, len, "%s", engine_kind_name(m->kind));
    return buf;
}

const char *gather_describe(const msg_collective *m, char *buf, size_t len)
{
    engine_describe(buf, len, m->kind, m->count, m->dtype, m->op, m->root);
    size_t n = strlen(buf);
    if (m->name[0] && n < len) snprintf(buf + n, len - n, " named \"%s\"", m->name);
    return buf;
}

static coll *find(gather *g, uint64_t index)
{
    for (coll *c = g->colls; c; c = c->next)
        if (c->index == index) return c;
    return NULL;
}

static void coll_free(gather *g, coll *c)
{
    for (coll **p = &g->colls; *p; p = &(*p)->next) {
        if (*p == c) {
            *p = c->next;
            break;
        }
    }
    g->n_colls--;
    for (int i = 0; i < g->local_size; i++)
        if (c->subs[i].reg) region_unref(c->subs[i].reg);
    /* Collectives finish in order, so the oldest unfinished one moves on. */
    if (!c->limbo && c->index >= g->next_index) g->next_index = c->index + 1;
    free(c);
}

/* Answers every submission of c and frees it; t (NULL: none) says how it
 * went, for the accounting of each rank (late_ns for the last_local one). */
static void coll_finish_timed(gather *g, coll *c, int status, const char *message,
                              const gather_timing *t)
{
    for (int i = 0; i < g->local_size; i++) {
        if (!c->subs[i].s) continue;
        gather_timing mine;
        if (t) {
            mine = *t;
            if (i != c->last_local) mine.late_ns = 0;
        }
        g->reply(c->subs[i].s, c->subs[i].id, status, message, t ? &mine : NULL);
    }
    coll_free(g, c);
}

static void coll_finish(gather *g, coll *c, int status, const char *message)
{
    coll_finish_timed(g, c, status, message, NULL);
}

/* When the last rank of the ring submitted c (its job j done here), and
 * how late c's last local rank came, if it was the last of the ring. A
 * host knows every host's start for an allreduce (the Stragglers of
 * PROTOCOL.md: job_timing.offsets); for the others, its left neighbour's
 * only (its first data's wait), and later hosts' lateness reaches it as
 * transfer. A host's start is its last local rank's submission, or later
 * if the collectives before it or its own loop held it up: that delay is
 * this host's, so the last submission is the latest of its own ranks' and
 * the other hosts' starts, never its own start. */
static void timing_of(const coll *c, const job *j, gather_timing *out)
{
    const job_timing *t = &j->t;
    uint64_t last = c->ready_ns, first = c->first_ns;
    if (t->start_ns && t->offsets) {
        int64_t at = (int64_t)t->start_ns + t->latest_us * 1000;
        if (at > (int64_t)last) last = (uint64_t)at;
        uint64_t early = t->start_ns - t->early_us * 1000;
        if (t->early_us && early < first) first = early;
    } else if (t->start_ns && t->got_wait && t->wait_ns) {
        /* The left neighbour's first data came after this host's start
         * (a wait of 0: it was here first). */
        uint64_t at = t->start_ns + t->wait_ns;
        if (at > last) last = at;
    }
    out->last_ns = last;
    /* This host came last (no other started after it): its last local
     * rank made the others wait. */
    int came_last = !t->offsets || t->latest_us <= 0;
    out->late_ns = came_last && c->ready_ns > first ? c->ready_ns - first : 0;
}

/* Elements of the buffer a collective works on: ranks x count for the kinds
 * whose count is per rank. */
static uint64_t buffer_elems(const gather *g, const msg_collective *m)
{
    int per_rank = m->kind == MSG_COLL_ALLGATHER || m->kind == MSG_COLL_REDUCE_SCATTER;
    return per_rank ? m->count * (uint64_t)engine_ranks(g->engine) : m->count;
}

static void on_job_done(job *j, int status, const char *message)
{
    coll *c = j->data;
    gather *g = c->owner;
    const msg_collective *m = &c->subs[c->work].m;
    if (status == 0 && j->kind != RINGD_COLL_BARRIER && j->count > 0) {
        /* Hand the result to the other local ranks: all of it, or for a
         * reduce-scatter each rank's own block. */
        size_t esize = ringd_dtype_size(m->dtype);
        /* As the ring was when it ran: a resize may have renumbered the
         * ranks since (the verdict that says it succeeded came with one). */
        size_t bytes = j->count * esize;
        int first = c->first;
        for (int i = 0; i < g->local_size; i++) {
            if (i == c->work || !c->subs[i].buf) continue;
            if (j->kind == RINGD_COLL_REDUCE_SCATTER) {
                size_t off = (size_t)(first + i) * m->count * esize;
                memcpy(c->subs[i].buf + off, j->buf + off, m->count * esize);
            } else {
                memcpy(c->subs[i].buf, j->buf, bytes);
            }
        }
    }
    gather_timing t;
    if (status == 0) timing_of(c, j, &t);
    coll_finish_timed(g, c, status, message, status == 0 ? &t : NULL);
}

static int same_collective(const msg_collective *a, const msg_collective *b)
{
    return a->kind == b->kind && a->count == b->count && a->dtype == b->dtype && a->op == b->op &&
           a->root == b->root && a->wire == b->wire && strcmp(a->name, b->name) == 0;
}

/* 16 bits of the FNV-1a hash of a collective's name, 0 for none: hosts
 * compare them, so that two collectives of the same shape but different
 * names (ranks out of step after an error) fail instead of being summed. */
static uint16_t name_tag(const char *name)
{
    if (!name[0]) return 0;
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 16777619u;
    uint16_t tag = (uint16_t)(h ^ (h >> 16));
    return tag ? tag : 1;
}

/* Hands c to the engine already failed: it keeps its place in the sequence,
 * and the engine tells every host why. */
static void coll_fail(gather *g, coll *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Hands c, already failed with (status, c->failure), to the engine, or
 * keeps it until the next epoch's start is known. */
static void coll_hand_failed(gather *g, coll *c, int status)
{
    /* fail_status stays: ranks that come late to it get it (gather_submit()). */
    c->fail_status = status;
    if (g->limbo) return;
    c->running = 1;
    c->job = (job){.kind = RINGD_COLL_BARRIER,
                   .dtype = RINGD_UINT8,
                   .op = RINGD_MAX,
                   .deadline = c->deadline,
                   .label = c->label,
                   .done = on_job_done,
                   .data = c,
                   .preset_status = status,
                   .preset_message = c->failure};
    engine_submit(g->engine, &c->job);
}

static void coll_fail(gather *g, coll *c, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->failure, sizeof c->failure, fmt, ap);
    va_end(ap);
    coll_hand_failed(g, c, status);
}

/* Combines the local ranks' buffers into local rank 0's, in local-rank
 * order; returns the weight of a WMEAN. */
static double combine(gather *g, coll *c)
{
    const msg_collective *m0 = &c->subs[0].m;
    size_t esize = ringd_dtype_size(m0->dtype);
    uint64_t elems = buffer_elems(g, m0);
    int first = engine_first_rank(g->engine);
    double weight = 0;
    switch (m0->kind) {
    case MSG_COLL_ALLREDUCE:
    case MSG_COLL_REDUCE_SCATTER:
        for (int i = 0; i < g->local_size && m0->op == RINGD_WMEAN; i++) {
            weight += c->subs[i].m.weight;
            if (elems > 0) reduce_scale(m0->dtype, c->subs[i].buf, elems, c->subs[i].m.weight);
        }
        for (int i = 1; i < g->local_size && elems > 0; i++)
            reduce_apply(m0->dtype, m0->op, c->subs[0].buf, c->subs[i].buf, elems);
        break;
    case MSG_COLL_ALLGATHER:
        for (int i = 1; i < g->local_size && elems > 0; i++) {
            size_t off = (size_t)(first + i) * m0->count * esize;
            memcpy(c->subs[0].buf + off, c->subs[i].buf + off, m0->count * esize);
        }
        break;
    case MSG_COLL_BROADCAST:
        if (m0->root >= first && m0->root < first + g->local_size) c->work = m0->root - first;
        break;
    default:
        break;
    }
    return weight;
}

/* All local ranks have submitted c: check they agree, combine their
 * buffers, and run it on the ring. */
static void coll_run(gather *g, coll *c)
{
    if (g->limbo) {
        c->deferred = 1;
        return;
    }
    c->deferred = 0;
    const msg_collective *m0 = &c->subs[0].m;
    int first = engine_first_rank(g->engine);
    for (int i = 1; i < g->local_size; i++) {
        const msg_collective *mi = &c->subs[i].m;
        if (!same_collective(m0, mi)) {
            char a[128], b[128];
            coll_fail(g, c, RINGD_EMISMATCH,
                      "%s differs between ranks on host %s: rank %d has %s, rank %d has %s",
                      c->label, g->cfg->hosts[g->me].name, first, gather_describe(m0, a, sizeof a),
                      first + i, gather_describe(mi, b, sizeof b));
            return;
        }
    }
    c->work = 0;
    c->first = first;
    double weight = combine(g, c);
    c->running = 1;
    int barrier = m0->kind == MSG_COLL_BARRIER;
    c->job = (job){.kind = (ringd_coll)m0->kind,
                   .buf = barrier ? &c->barrier_byte : c->subs[c->work].buf,
                   .count = barrier ? 1 : buffer_elems(g, m0),
                   .per_rank = m0->count,
                   .dtype = barrier ? RINGD_UINT8 : m0->dtype,
                   .op = barrier ? RINGD_MAX : m0->op,
                   .root = m0->root,
                   .ranks = engine_ranks(g->engine),
                   .weight = weight,
                   .deadline = c->deadline + RING_GRACE_MS,
                   .label = c->label,
                   .name_tag = name_tag(m0->name),
                   .wire = barrier ? 0 : m0->wire,
                   .done = on_job_done,
                   .data = c};
    engine_submit(g->engine, &c->job);
}

/* The collective index, created if it is new; NULL after a reply. */
static coll *open_coll(gather *g, void *s, uint64_t id, uint64_t index, const msg_collective *m)
{
    coll *c = find(g, index);
    if (c) return c;
    if (g->n_colls >= GATHER_MAX_COLLS) {
        replyf(g, s, id, RINGD_EBUSY, "too many collectives waiting for local ranks");
        return NULL;
    }
    c = calloc(1, sizeof *c + (size_t)g->local_size * sizeof(submission));
    if (!c) {
        replyf(g, s, id, RINGD_ENOMEM, "out of memory");
        return NULL;
    }
    c->owner = g;
    c->index = index;
    c->limbo = g->limbo;
    uint32_t timeout = m->timeout_ms ? m->timeout_ms : g->cfg->collective_timeout_ms;
    c->deadline = uv_now(g->loop) + timeout;
    gather_label(m, c->label, sizeof c->label);
    /* Keep the list in index order: the engine must run them in order. */
    coll **p = &g->colls;
    while (*p && (*p)->index < index)
        p = &(*p)->next;
    c->next = *p;
    *p = c;
    g->n_colls++;
    return c;
}

void gather_submit(gather *g, void *s, int rank, gather_pos *pos, uint64_t id, region *reg,
                   uint8_t *buf, const msg_collective *m)
{
    uint64_t *next = &pos->next;
    uint64_t index = *next;
    if (index < JOIN_BASE && index >= g->high) g->high = index + 1;
    if (gather_settled_before(g, pos)) {
        /* Of an epoch a verdict settled (the last, or one before it: this
         * rank sat out collectives since): it failed everywhere with it,
         * this rank's part included. */
        (*next)++;
        char label[MSG_MAX_NAME + 32], text[MSG_MAX_TEXT];
        gather_label(m, label, sizeof label);
        const settled *p = settled_of(g, index);
        if (!p) {
            replyf(g, s, id, RINGD_EABORTED,
                   "%s failed: this rank is more than %d resets behind the ring on host %s; "
                   "restart the training step on every rank",
                   label, SETTLED_KEPT, g->cfg->hosts[g->me].name);
            return;
        }
        int code = job_verdict_apply(&p->v, label, p->v.epoch, index - p->base, text, sizeof text);
        if (code == 0) { /* cannot be: it never ran without this rank */
            code = p->v.code;
            snprintf(text, sizeof text, "%s failed: %s", label, p->v.reason);
        }
        g->reply(s, id, code, text, NULL);
        return;
    }
    if (index < g->next_index) {
        /* Its collective ended without it: it came too late. */
        (*next)++;
        replyf(g, s, id, RINGD_ETIMEDOUT,
               "%s #%" PRIu64 " already ended on host %s without this rank: it came too late",
               engine_kind_name(m->kind), index, g->cfg->hosts[g->me].name);
        return;
    }
    coll *c = find(g, index);
    if (c && (c->expired || (c->running && c->job.preset_status && !c->subs[rank].s))) {
        /* It failed without this rank (it did not come in time): its other
         * ranks were answered, or will be, the same way. */
        (*next)++;
        g->reply(s, id, c->fail_status, c->failure, NULL);
        return;
    }
    if (c && (c->running || c->subs[rank].s)) {
        replyf(g, s, id, RINGD_EPROTO,
               "collective #%" PRIu64 " already has local rank %d's "
               "submission",
               index, rank);
        return;
    }
    if (!(c = open_coll(g, s, id, index, m))) return;
    (*next)++;
    /* What the ring will count as submitted in this epoch (the cut of the
     * next one is above it). */
    if (!g->limbo && index >= g->base && index - g->base + 1 > g->top) {
        g->top = index - g->base + 1;
        engine_submitted(g->engine, g->top);
    }
    c->subs[rank] = (submission){.who = s, .s = s, .id = id, .reg = reg, .buf = buf, .m = *m};
    if (reg) region_ref(reg);
    char d[160];
    log_debug("local rank %d submitted %s #%" PRIu64 ": %s", rank, c->label, index,
              gather_describe(m, d, sizeof d));
    uint64_t now = uv_hrtime();
    if (!c->arrived) c->first_ns = now;
    c->ready_ns = now;
    c->last_local = rank;
    if (++c->arrived == g->local_size) coll_run(g, c);
    if (g->colls && !uv_is_active((uv_handle_t *)&g->tick))
        uv_timer_start(&g->tick, on_tick, TICK_MS, TICK_MS);
}

/* Answers c's ranks now with (status, failure); c keeps its place in the
 * numbering, already failed, and never runs: the buffers of ranks that
 * have their answer are theirs again. */
static void coll_expire(gather *g, coll *c, int status, const char *failure)
{
    if (failure != c->failure) snprintf(c->failure, sizeof c->failure, "%s", failure);
    c->expired = 1;
    c->fail_status = status;
    for (int i = 0; i < g->local_size; i++) {
        if (c->subs[i].s) g->reply(c->subs[i].s, c->subs[i].id, status, c->failure, NULL);
        c->subs[i].s = NULL;
    }
}

/* Fails the collectives whose local ranks did not all arrive in time. The
 * engine enforces the deadline of those already running. */
static void on_tick(uv_timer_t *t)
{
    gather *g = t->data;
    uint64_t now = uv_now(g->loop);
    if (jobs_stalled(&g->last_tick, now)) return;
    int first = engine_first_rank(g->engine);
    /* Handing a collective to the engine may finish others and free them,
     * so look again from the start each time. */
    for (;;) {
        coll *c = g->colls;
        while (c && (c->running || c->expired || c->deadline > now))
            c = c->next;
        if (!c) break;
        char missing[256] = "";
        size_t len = 0;
        for (int i = 0; i < g->local_size && len < sizeof missing - 16; i++)
            if (!c->subs[i].s)
                len += (size_t)snprintf(missing + len, sizeof missing - len, "%s%d",
                                        len ? ", " : "", first + i);
        if (c->arrived < g->local_size && !c->fail_status)
            snprintf(c->failure, sizeof c->failure,
                     "%s timed out on host %s: %s %s did not submit it in time "
                     "(%d of its %d local ranks did); is a rank stuck, or behind the others?",
                     c->label, g->cfg->hosts[g->me].name,
                     g->local_size - c->arrived == 1 ? "rank" : "ranks", missing, c->arrived,
                     g->local_size);
        if (!g->limbo) {
            coll_hand_failed(g, c, RINGD_ETIMEDOUT);
            continue;
        }
        /* Waiting for the next epoch's start, which may never come: its
         * ranks get their answer now, and it keeps its place. */
        if (!c->fail_status && c->arrived == g->local_size) {
            char why[512];
            engine_why_waiting(g->engine, why, sizeof why);
            snprintf(c->failure, sizeof c->failure,
                     "outcome unknown: %s timed out on host %s before it could start (%s); "
                     "restart the training step from a checkpoint on every rank",
                     c->label, g->cfg->hosts[g->me].name, why);
        }
        log_limited(&g->fail_rl, now, JOBS_FAIL_LOG_MS, LOG_WARN, "%s", c->failure);
        coll_expire(g, c, c->fail_status ? c->fail_status : RINGD_ETIMEDOUT, c->failure);
    }
    expire_aside(g, now);
    if (!g->colls && !g->aside) uv_timer_stop(&g->tick);
}

void gather_join(gather *g, gather_pos *pos)
{
    if (g->limbo && g->n_joiners < MAX_JOINERS) {
        /* Its first collective is the next epoch's first. */
        pos->next = JOIN_BASE;
        g->joiners[g->n_joiners++] = pos;
        return;
    }
    uint64_t index = g->next_index > g->base ? g->next_index : g->base;
    for (const coll *c = g->colls; c; c = c->next) {
        if (!c->running) {
            pos->next = c->index;
            return;
        }
        index = c->index + 1;
    }
    pos->next = index;
}

void gather_reset(gather *g)
{
    coll **tail = &g->aside;
    while (*tail)
        tail = &(*tail)->next;
    for (coll **p = &g->colls; *p;) {
        coll *c = *p;
        /* Those made since an earlier reset belong to no epoch yet. */
        if (c->running || c->limbo) {
            p = &c->next;
            continue;
        }
        /* Set aside: answered once the engine says how the reset ended. */
        *p = c->next;
        g->n_colls--;
        c->next = NULL;
        *tail = c;
        tail = &c->next;
    }
    g->limbo = 1;
    if (g->aside && !uv_is_active((uv_handle_t *)&g->tick))
        uv_timer_start(&g->tick, on_tick, TICK_MS, TICK_MS);
}

/* Answers every submission of c with (code, text) and frees it (c is off
 * every list). */
static void answer_free(gather *g, coll *c, int code, const char *text)
{
    for (int i = 0; i < g->local_size; i++) {
        submission *sub = &c->subs[i];
        if (sub->s) g->reply(sub->s, sub->id, code, text, NULL);
        if (sub->reg) region_unref(sub->reg);
    }
    free(c);
}

/* Answers every submission of c by verdict v, as collective seq of the
 * epoch the verdict settles, and frees it. */
static void answer_by(gather *g, coll *c, const job_verdict *v, uint32_t epoch, uint64_t seq)
{
    char text[MSG_MAX_TEXT];
    int code = job_verdict_apply(v, c->label, epoch, seq, text, sizeof text);
    if (code == 0) { /* cannot be: it never ran */
        code = v->code;
        snprintf(text, sizeof text, "%s failed: %s", c->label, v->reason);
    }
    answer_free(g, c, code, text);
}

/* Those set aside at a reset wait for the verdict, which comes with the
 * lap that re-forms the ring; once past their deadline and the grace a
 * failure has (JOBS_SETTLE_GRACE_MS), nothing here can tell how the other
 * hosts ended them. */
static void expire_aside(gather *g, uint64_t now)
{
    for (coll **p = &g->aside; *p;) {
        coll *c = *p;
        if (c->deadline + RING_GRACE_MS + JOBS_SETTLE_GRACE_MS > now) {
            p = &c->next;
            continue;
        }
        *p = c->next;
        char why[512], text[MSG_MAX_TEXT];
        engine_why_waiting(g->engine, why, sizeof why);
        snprintf(text, sizeof text,
                 "%s failed: outcome unknown: the ring was reset on host %s and did not settle "
                 "it on every host in time (%s); restart the training step from a checkpoint "
                 "on every rank",
                 c->label, g->cfg->hosts[g->me].name, why[0] ? why : "it is ready again");
        log_limited(&g->fail_rl, now, JOBS_FAIL_LOG_MS, LOG_WARN, "%s", text);
        answer_free(g, c, RINGD_ERING, text);
    }
}

/* Remembers verdict v, which settled the epoch that started at base and
 * ends at cut, for ranks that come back with numbers of it. */
static void remember(gather *g, const job_verdict *v, uint64_t cut)
{
    if (cut <= g->base) return;
    if (g->n_past == SETTLED_KEPT) {
        memmove(g->past, g->past + 1, (SETTLED_KEPT - 1) * sizeof g->past[0]);
        g->n_past--;
    }
    settled *p = &g->past[g->n_past++];
    p->v = *v;
    snprintf(p->reason, sizeof p->reason, "%s", v->reason);
    p->v.reason = p->reason;
    p->base = g->base;
}

/* Newcomers' collective c (made while the next epoch's start was unknown)
 * and same, of the same index, are one collective: c's submissions join
 * same, and c is freed. A part whose ranks were answered already (its
 * deadline passed while the ring waited) decides for the whole: those
 * ranks may be writing their buffers for their next call, so it must never
 * run, and every rank of it gets the answer they got. */
static void coll_merge(gather *g, coll *same, coll *c)
{
    for (int i = 0; i < g->local_size; i++) {
        if (!c->subs[i].s && !c->subs[i].reg) continue;
        if (same->subs[i].s || same->subs[i].reg) { /* cannot be: one pos per rank */
            if (c->subs[i].s)
                replyf(g, c->subs[i].s, c->subs[i].id, RINGD_EPROTO,
                       "collective already has local rank %d's submission", i);
            if (c->subs[i].reg) region_unref(c->subs[i].reg);
            continue;
        }
        same->subs[i] = c->subs[i];
        same->arrived++;
    }
    if (same->expired)
        coll_expire(g, same, same->fail_status, same->failure);
    else if (c->expired)
        coll_expire(g, same, c->fail_status, c->failure);
    else if (c->fail_status && !same->fail_status) { /* handed over failed, in its turn */
        same->fail_status = c->fail_status;
        memcpy(same->failure, c->failure, sizeof same->failure);
    }
    same->deferred = same->arrived == g->local_size;
    g->n_colls--;
    free(c);
}

/* The next epoch starts at index cut: newcomers move there, what is below
 * it failed with the old epoch, the rest runs. */
static void start_epoch(gather *g, const job_verdict *v, uint64_t cut)
{
    remember(g, v, cut);
    g->base = cut;
    g->top = 0;
    g->epoch = v->next_epoch;
    g->limbo = 0;
    /* Newcomers' collectives move to the start; one that a local rank of
     * the old epoch submitted too (same index) is one collective. */
    coll *joined = NULL, **p = &g->colls;
    while (*p) {
        coll *c = *p;
        c->limbo = 0;
        if (c->index < JOIN_BASE) {
            p = &c->next;
            continue;
        }
        *p = c->next;
        c->index = cut + (c->index - JOIN_BASE);
        c->next = joined;
        joined = c;
    }
    for (int i = 0; i < g->n_joiners; i++)
        g->joiners[i]->next = cut + (g->joiners[i]->next - JOIN_BASE);
    g->n_joiners = 0;
    while (joined) {
        coll *c = joined;
        joined = c->next;
        coll *same = find(g, c->index);
        if (same && !same->running) {
            coll_merge(g, same, c);
            continue;
        }
        coll **q = &g->colls;
        while (*q && (*q)->index < c->index)
            q = &(*q)->next;
        c->next = *q;
        *q = c;
    }
    /* What this epoch has submitted is counted first: a collective that
     * failed here before the epoch began starts a reset as it is handed
     * over, and that reset's lap must count it, or the hosts would start
     * the next epoch at different collectives. */
    for (coll *c = g->colls; c; c = c->next)
        if (!c->running && c->index - g->base + 1 > g->top) g->top = c->index - g->base + 1;
    if (g->top) engine_submitted(g->engine, g->top);
    /* In index order: the engine numbers them as they come. */
    coll *next;
    for (coll *c = g->colls; c; c = next) {
        next = c->next;
        if (c->running) continue;
        if (c->fail_status) {
            coll_hand_failed(g, c, c->fail_status);
        } else if (c->deferred) {
            coll_run(g, c);
        }
    }
}

/* The ring has a new membership: what waits here was numbered for the old
 * one (ranks, sizes, roots), so it all fails with the resize, and every
 * rank's next collective is the next ready epoch's first, at high. */
static void resize(gather *g, const job_verdict *v)
{
    /* Numbered for an epoch whose verdict went round without this host:
     * the others ended them in words never heard here ("outcome unknown"). */
    uint32_t in = job_verdict_unheard(v, g->epoch) ? g->epoch : 0;
    while (g->aside) {
        coll *c = g->aside;
        g->aside = c->next;
        answer_by(g, c, v, in, c->index - g->base);
    }
    for (coll **p = &g->colls; *p;) {
        coll *c = *p;
        if (c->running) { /* the engine ends it as the verdict says */
            p = &c->next;
            continue;
        }
        *p = c->next;
        g->n_colls--;
        answer_by(g, c, v, in, c->index - g->base);
    }
    uint64_t start = g->high;
    if (g->next_index > start) start = g->next_index;
    if (g->base + g->top > start) start = g->base + g->top;
    g->high = g->base = g->next_index = start;
    g->top = 0;
    g->epoch = v->next_epoch;
    g->limbo = 0;
    g->n_joiners = 0;
    g->n_past = 0; /* every rank starts at base: none is behind */
}

uint64_t gather_resized(gather *g)
{
    return g->base;
}

void gather_settled(gather *g, const job_verdict *v)
{
    if (v->resized) {
        resize(g, v);
        /* Not ready: the ring waits (for a rank, or for min_hosts), or this
         * host missed a confirmation and the epoch is over since. The next
         * verdict says where the next epoch starts. */
        if (!v->ready) g->limbo = 1;
        return;
    }
    /* The numbers from base are of g->epoch: only a verdict of it says
     * where they end (one of another epoch, or none, cuts at base). */
    uint64_t cut = g->base + (v->epoch && v->epoch == g->epoch ? v->top : 0);
    while (g->aside) {
        coll *c = g->aside;
        g->aside = c->next;
        answer_by(g, c, v, g->epoch, c->index - g->base);
    }
    if (!g->limbo) {
        /* The ring formed, nothing was reset. */
        if (v->ready || v->passed) g->epoch = v->next_epoch;
        return;
    }
    /* Those of the old epoch made since the reset failed with it too. */
    for (coll **p = &g->colls; *p;) {
        coll *c = *p;
        if (c->running || c->index >= cut) {
            p = &c->next;
            continue;
        }
        *p = c->next;
        g->n_colls--;
        if (c->index >= g->next_index) g->next_index = c->index + 1;
        if (c->expired) { /* its ranks have their answer */
            for (int i = 0; i < g->local_size; i++)
                c->subs[i].s = NULL;
        }
        answer_by(g, c, v, g->epoch, c->index - g->base);
    }
    if (v->ready) {
        start_epoch(g, v, cut);
    } else if (v->passed) {
        /* next_epoch started at cut everywhere else; what this host's ranks
         * submitted since is numbered from there, and waits for the
         * verdict on it. */
        remember(g, v, cut);
        g->base = cut;
        g->top = 0;
        g->epoch = v->next_epoch;
    }
}

void gather_withdraw(gather *g, void *s, int rank, gather_pos *pos)
{
    for (int i = 0; i < g->n_joiners; i++)
        if (g->joiners[i] == pos) g->joiners[i--] = g->joiners[--g->n_joiners];
    for (coll *c = g->aside; c; c = c->next)
        if (c->subs[rank].s == s) c->subs[rank].s = NULL;
    coll *next;
    for (coll *c = g->colls; c; c = next) {
        next = c->next;
        submission *sub = &c->subs[rank];
        if (sub->who != s) continue;
        if (c->running) {
            /* Its result can reach nobody here; the engine fails it on
             * every host when it hears that the rank left (a process that
             * died mid-collective may not have finished writing its
             * buffer). Its region stays mapped until the engine is done. */
            sub->s = NULL;
            continue;
        }
        /* One that waits for the next epoch, or that kept its place after
         * its deadline, goes with it: it never ran anywhere. */
        if (sub->reg) region_unref(sub->reg);
        memset(sub, 0, sizeof *sub);
        if (--c->arrived == 0) coll_free(g, c);
    }
}

gather *gather_new(uv_loop_t *loop, const cfg *c, int me, engine *e, gather_reply_cb reply)
{
    gather *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->loop = loop;
    g->cfg = c;
    g->me = me;
    g->engine = e;
    g->reply = reply;
    g->local_size = c->hosts[me].local_clients;
    /* Nothing runs until the engine says where the first epoch starts. */
    g->limbo = 1;
    uv_timer_init(loop, &g->tick);
    g->tick.data = g;
    return g;
}

static void on_tick_closed(uv_handle_t *h)
{
    free(h->data);
}

void gather_close(gather *g, int status, const char *message)
{
    /* The engine has closed first, so nothing runs any more. */
    while (g->colls)
        coll_finish(g, g->colls, status, message);
    job_verdict v = {.code = status, .fail_seq = UINT64_MAX, .reason = message};
    while (g->aside) {
        coll *c = g->aside;
        g->aside = c->next;
        answer_by(g, c, &v, 0, 0);
    }
    uv_close((uv_handle_t *)&g->tick, on_tick_closed);
}
