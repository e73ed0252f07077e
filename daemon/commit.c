/*
 * commit.c - the COMMIT counts: what every host completed, what every host
 * knew, and what this host may answer (commit.h).
 */
#include <stdlib.h>
#include <string.h>

#include "commit.h"
#include "config/config.h"
#include "ringd.h"

int commit_init(commit_view *v, int cap)
{
    memset(v, 0, sizeof *v);
    v->done = calloc((size_t)cap, sizeof *v->done);
    v->known = calloc((size_t)cap, sizeof *v->known);
    if (!v->done || !v->known) {
        commit_free(v);
        return RINGD_ENOMEM;
    }
    v->cap = cap;
    v->n = 1;
    return 0;
}

void commit_free(commit_view *v)
{
    free(v->done);
    free(v->known);
    v->done = v->known = NULL;
    v->cap = 0;
}

void commit_reset(commit_view *v, int n, int me, int spare)
{
    v->n = n;
    v->me = me;
    v->spare = spare < 0 ? 0 : spare < n ? spare : n - 1;
    if (v->spare >= CFG_MAX_ELASTIC) v->spare = CFG_MAX_ELASTIC - 1; /* never so: n is larger */
    memset(v->done, 0, (size_t)v->cap * sizeof *v->done);
    memset(v->known, 0, (size_t)v->cap * sizeof *v->known);
}

uint64_t commit_least(const commit_view *v)
{
    uint64_t least = UINT64_MAX;
    for (int h = 0; h < v->n; h++)
        if (v->done[h] < least) least = v->done[h];
    return least;
}

void commit_completed(commit_view *v, uint64_t count)
{
    if (count > v->done[v->me]) v->done[v->me] = count;
    v->known[v->me] = commit_least(v);
}

int commit_merge(commit_view *v, const frame_commit *c)
{
    if (c->n != v->n) return 0;
    int learnt = 0;
    for (int h = 0; h < v->n; h++) {
        if (h == v->me) continue; /* its own are exact here */
        if (c->done[h] > v->done[h]) {
            v->done[h] = c->done[h];
            learnt = 1;
        }
        if (c->known[h] > v->known[h]) {
            v->known[h] = c->known[h];
            learnt = 1;
        }
    }
    v->known[v->me] = commit_least(v);
    return learnt;
}

/* The (spare + 1)-th largest of known[]: as many hosts as that know it.
 * Only an elastic ring, of at most CFG_MAX_ELASTIC hosts, has spare > 0. */
uint64_t commit_answerable(const commit_view *v)
{
    if (v->spare == 0) return v->known[v->me]; /* the most any host knows */
    uint64_t top[CFG_MAX_ELASTIC];             /* the spare + 1 largest, descending */
    int k = 0, want = v->spare + 1;
    for (int h = 0; h < v->n; h++) {
        uint64_t x = v->known[h];
        if (k == want && x <= top[k - 1]) continue;
        int i = k < want ? k++ : k - 1;
        for (; i > 0 && top[i - 1] < x; i--)
            top[i] = top[i - 1];
        top[i] = x;
    }
    return k == want ? top[want - 1] : 0;
}

void commit_frame(const commit_view *v, frame_commit *out)
{
    out->n = (uint16_t)v->n;
    memcpy(out->done, v->done, (size_t)v->n * sizeof *v->done);
    memcpy(out->known, v->known, (size_t)v->n * sizeof *v->known);
}
