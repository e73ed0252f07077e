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

typedef struct {
    void *s;     /* the session; NULL once the client is gone */
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
    uint8_t barrier_byte; /* a barrier's buffer */
    char failure[MSG_MAX_TEXT];
    job job;
    struct coll *next;
    submission subs[]; /* one per local rank */
} coll;

struct gather {
    uv_loop_t *loop;
    const cfg *cfg;
    int me, ranks, local_size;
    engine *engine;
    gather_reply_cb reply;
    uv_timer_t tick; /* local deadlines */
    coll *colls;     /* waiting or running, by index */
    int n_colls;
    uint64_t next_index; /* of the oldest collective not yet finished */
};

static void on_tick(uv_timer_t *t);

static void replyf(gather *g, void *s, uint64_t id, int status, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void replyf(gather *g, void *s, uint64_t id, int status, const char *fmt, ...)
{
    char text[MSG_MAX_TEXT + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    g->reply(s, id, status, text);
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
    if (c->index >= g->next_index) g->next_index = c->index + 1;
    free(c);
}

/* Answers every submission of c and frees it. */
static void coll_finish(gather *g, coll *c, int status, const char *message)
{
    for (int i = 0; i < g->local_size; i++)
        if (c->subs[i].s) g->reply(c->subs[i].s, c->subs[i].id, status, message);
    coll_free(g, c);
}

/* Elements of the buffer a collective works on: ranks x count for the kinds
 * whose count is per rank. */
static uint64_t buffer_elems(const gather *g, const msg_collective *m)
{
    int per_rank = m->kind == MSG_COLL_ALLGATHER || m->kind == MSG_COLL_REDUCE_SCATTER;
    return per_rank ? m->count * (uint64_t)g->ranks : m->count;
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
        size_t bytes = buffer_elems(g, m) * esize;
        int first = cfg_first_rank(g->cfg, (size_t)g->me);
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
    coll_finish(g, c, status, message);
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

static void coll_fail(gather *g, coll *c, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->failure, sizeof c->failure, fmt, ap);
    va_end(ap);
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

/* Combines the local ranks' buffers into local rank 0's, in local-rank
 * order; returns the weight of a WMEAN. */
static double combine(gather *g, coll *c)
{
    const msg_collective *m0 = &c->subs[0].m;
    size_t esize = ringd_dtype_size(m0->dtype);
    uint64_t elems = buffer_elems(g, m0);
    int first = cfg_first_rank(g->cfg, (size_t)g->me);
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
    const msg_collective *m0 = &c->subs[0].m;
    int first = cfg_first_rank(g->cfg, (size_t)g->me);
    for (int i = 1; i < g->local_size; i++) {
        const msg_collective *mi = &c->subs[i].m;
        if (!same_collective(m0, mi)) {
            char a[128], b[128];
            coll_fail(g, c, RINGD_EMISMATCH,
                      "%s #%" PRIu64 " differs between ranks on host %s: rank %d has %s, "
                      "rank %d has %s",
                      c->label, c->index, g->cfg->hosts[g->me].name, first,
                      gather_describe(m0, a, sizeof a), first + i,
                      gather_describe(mi, b, sizeof b));
            return;
        }
    }
    c->work = 0;
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
                   .ranks = g->ranks,
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
    uint32_t timeout = m->timeout_ms ? m->timeout_ms : g->cfg->collective_timeout_ms;
    c->deadline = uv_now(g->loop) + timeout;
    if (m->name[0])
        snprintf(c->label, sizeof c->label, "%s \"%s\"", engine_kind_name(m->kind), m->name);
    else
        snprintf(c->label, sizeof c->label, "%s", engine_kind_name(m->kind));
    /* Keep the list in index order: the engine must run them in order. */
    coll **p = &g->colls;
    while (*p && (*p)->index < index)
        p = &(*p)->next;
    c->next = *p;
    *p = c;
    g->n_colls++;
    return c;
}

void gather_submit(gather *g, void *s, int rank, uint64_t *next, uint64_t id, region *reg,
                   uint8_t *buf, const msg_collective *m)
{
    uint64_t index = *next;
    if (index < g->next_index) {
        /* Its collective ended without it: it came too late. */
        (*next)++;
        replyf(g, s, id, RINGD_ETIMEDOUT,
               "%s #%" PRIu64 " already ended on host %s without this rank: it came too late",
               engine_kind_name(m->kind), index, g->cfg->hosts[g->me].name);
        return;
    }
    coll *c = find(g, index);
    if (c && (c->running || c->subs[rank].s)) {
        replyf(g, s, id, RINGD_EPROTO,
               "collective #%" PRIu64 " already has local rank %d's "
               "submission",
               index, rank);
        return;
    }
    if (!(c = open_coll(g, s, id, index, m))) return;
    (*next)++;
    c->subs[rank] = (submission){.s = s, .id = id, .reg = reg, .buf = buf, .m = *m};
    if (reg) region_ref(reg);
    char d[160];
    log_debug("local rank %d submitted %s #%" PRIu64 ": %s", rank, c->label, index,
              gather_describe(m, d, sizeof d));
    if (++c->arrived == g->local_size) coll_run(g, c);
    if (g->colls && !uv_is_active((uv_handle_t *)&g->tick))
        uv_timer_start(&g->tick, on_tick, TICK_MS, TICK_MS);
}

/* Fails the collectives whose local ranks did not all arrive in time. The
 * engine enforces the deadline of those already running. */
static void on_tick(uv_timer_t *t)
{
    gather *g = t->data;
    uint64_t now = uv_now(g->loop);
    int first = cfg_first_rank(g->cfg, (size_t)g->me);
    /* Handing a collective to the engine may finish others and free them,
     * so look again from the start each time. */
    for (;;) {
        coll *c = g->colls;
        while (c && (c->running || c->deadline > now))
            c = c->next;
        if (!c) break;
        char missing[256] = "";
        size_t len = 0;
        for (int i = 0; i < g->local_size && len < sizeof missing - 16; i++)
            if (!c->subs[i].s)
                len += (size_t)snprintf(missing + len, sizeof missing - len, "%s%d",
                                        len ? ", " : "", first + i);
        coll_fail(g, c, RINGD_ETIMEDOUT,
                  "%s #%" PRIu64 " timed out on host %s: rank(s) %s did not submit it in time "
                  "(%d of its %d local ranks did)",
                  c->label, c->index, g->cfg->hosts[g->me].name, missing, c->arrived,
                  g->local_size);
    }
    if (!g->colls) uv_timer_stop(&g->tick);
}

uint64_t gather_joining_index(const gather *g)
{
    uint64_t index = g->next_index;
    for (const coll *c = g->colls; c; c = c->next) {
        if (!c->running) return c->index;
        index = c->index + 1;
    }
    return index;
}

void gather_withdraw(gather *g, void *s, int rank, uint32_t pid, const char *why)
{
    coll *next;
    for (coll *c = g->colls; c; c = next) {
        next = c->next;
        submission *sub = &c->subs[rank];
        if (sub->s != s) continue;
        if (c->running) {
            /* Its result can reach nobody here, and a process that died
             * mid-collective may not have finished writing its buffer:
             * fail it everywhere rather than return a sum that may hold
             * half a gradient. Its region stays mapped until the engine is
             * done with it. */
            sub->s = NULL;
            if (!c->failure[0])
                snprintf(c->failure, sizeof c->failure,
                         "rank %d (pid %u) on host %s exited during the collective (%s)",
                         cfg_first_rank(g->cfg, (size_t)g->me) + rank, pid,
                         g->cfg->hosts[g->me].name, why);
            engine_cancel(g->engine, &c->job, RINGD_EABORTED, c->failure);
            continue;
        }
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
    g->ranks = cfg_total_ranks(c);
    g->local_size = c->hosts[me].local_clients;
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
    uv_close((uv_handle_t *)&g->tick, on_tick_closed);
}
