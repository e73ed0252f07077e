/*
 * schedule.c - the steps of ring collectives; see schedule.h.
 */
#include "schedule.h"

static int mod(int x, int n)
{
    return ((x % n) + n) % n;
}

static int reduces_kind(ringd_coll k)
{
    return k == RINGD_COLL_ALLREDUCE || k == RINGD_COLL_REDUCE_SCATTER || k == RINGD_COLL_BARRIER;
}

void schedule_init(schedule *s, int n, int me, ringd_coll kind, int root_host)
{
    s->n = n;
    s->me = me;
    s->kind = kind;
    s->first = kind == RINGD_COLL_ALLGATHER ? n - 1 : 0;
    s->last = kind == RINGD_COLL_REDUCE_SCATTER || kind == RINGD_COLL_BROADCAST ? n - 2 : 2 * n - 3;
    s->dist = kind == RINGD_COLL_BROADCAST ? mod(me - root_host, n) : 0;
}

int schedule_steps(int n)
{
    return 2 * (n - 1);
}

/* Reduce-scatter and allgather run on the hosts' blocks, renumbered so that
 * the schedule's chunk r+1 (where reduce-scatter ends on host r, and
 * allgather starts) is host r's own block. */
static int physical(const schedule *s, int v)
{
    int shift = s->kind == RINGD_COLL_REDUCE_SCATTER || s->kind == RINGD_COLL_ALLGATHER;
    return mod(v - shift, s->n);
}

int schedule_recv(const schedule *s, int g)
{
    if (g < s->first || g > s->last) return -1;
    if (s->kind == RINGD_COLL_BROADCAST) return g == s->dist - 1 ? 0 : -1;
    int v = g < s->n - 1 ? s->me - g - 1 : s->me - (g - (s->n - 1));
    return physical(s, v);
}

int schedule_send(const schedule *s, int g)
{
    if (g < s->first || g > s->last) return -1;
    if (s->kind == RINGD_COLL_BROADCAST) return g == s->dist ? 0 : -1;
    int v = g < s->n - 1 ? s->me - g : s->me + 1 - (g - (s->n - 1));
    return physical(s, v);
}

int schedule_reduces(const schedule *s, int g)
{
    return reduces_kind(s->kind) && g < s->n - 1;
}

int schedule_completes(const schedule *s, int g)
{
    return reduces_kind(s->kind) && g == s->n - 2;
}

void schedule_chunk(const schedule *s, const cfg *c, uint64_t count, uint64_t per_rank,
                    size_t esize, int chunk, uint64_t *off, uint64_t *len)
{
    switch (s->kind) {
    case RINGD_COLL_BROADCAST:
        *off = 0;
        *len = count * esize;
        return;
    case RINGD_COLL_ALLGATHER:
    case RINGD_COLL_REDUCE_SCATTER:
        *off = (uint64_t)cfg_first_rank(c, (size_t)chunk) * per_rank * esize;
        *len = (uint64_t)c->hosts[chunk].local_clients * per_rank * esize;
        return;
    default: {
        uint64_t n = (uint64_t)s->n, uc = (uint64_t)chunk;
        uint64_t base = count / n, extra = count % n;
        *off = (uc * base + (uc < extra ? uc : extra)) * esize;
        *len = (base + (uc < extra)) * esize;
        return;
    }
    }
}
