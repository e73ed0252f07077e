/*
 * compose.c - gather, scatter and all-to-all, built in libringd on the
 * ring's own collectives (no daemon or wire support of their own).
 *
 *   gather    an allgather into a staging region; the root copies it out.
 *   scatter   a broadcast of the root's whole input into a staging region;
 *             each rank copies out its own block.
 *   alltoall  an allgather of every rank's whole input into a staging
 *             region of size x size x count elements; each rank copies out
 *             the block that every rank addressed to it.
 *
 * count 0 returns at once, on every rank, without a collective: there is
 * nothing to move, and the ranks stay in step all the same.
 *
 * The staging region is shared memory listed among the client's regions
 * while the collective runs, so the daemon works in it in place; it then
 * goes back to the idle staging regions (shm.c) for reuse. Each composed
 * collective carries a name ("gather to rank 2", "scatter", "alltoall"), so
 * that a mismatch names what the ranks called, and two ranks that disagree
 * on a gather's root fail with RINGD_EMISMATCH instead of going on.
 */
#include <stdio.h>
#include <string.h>

#include "region.h"
#include "requests.h"
#include "shm.h"

/* What a composed collective needs of the underlying one. */
typedef struct {
    const char *what; /* "gather", ... in messages */
    size_t esize;     /* bytes per element */
    size_t block;     /* bytes of count elements */
    size_t stage;     /* bytes of the staging region */
} plan;

/* Checks the arguments common to the three, before anything is sent, and
 * sizes the staging region: blocks of count elements (size of them for
 * gather and scatter, size x size for alltoall). root is NULL for alltoall. */
static int prepare(ringd_client *c, const char *what, size_t count, ringd_dtype dtype,
                   const int *root, size_t blocks_per_rank, plan *p)
{
    p->what = what;
    p->esize = ringd_dtype_size(dtype);
    if (p->esize == 0)
        return session_fail(&c->s, RINGD_EINVAL, "%s: unknown dtype %d (see ringd_dtype)", what,
                            (int)dtype);
    int size = c->w.size;
    if (root && (*root < 0 || *root >= size))
        return session_fail(&c->s, RINGD_EINVAL, "%s: root %d is not a rank (0..%d)", what, *root,
                            size - 1);
    size_t blocks = (size_t)size * blocks_per_rank;
    if (count > c->w.max_bytes / p->esize / blocks)
        return session_fail(&c->s, RINGD_ETOOBIG,
                            "%s: %zu x %s per block x %zu blocks is more than the daemon's limit "
                            "of %llu bytes (max_buffer in its configuration); split the buffer",
                            what, count, ringd_dtype_name(dtype), blocks,
                            (unsigned long long)c->w.max_bytes);
    p->block = count * p->esize;
    p->stage = p->block * blocks;
    return 0;
}

/* A staging region of at least bytes, listed among the client's regions so
 * that the collective runs in it in place (no copy in ringd_submit()). */
static int stage_take(ringd_client *c, const plan *p, struct region **out)
{
    *out = NULL;
    if (c->s.broken) return requests_broken(c, p->what);
    int rc = shm_staging(c, p->stage, p->what, out);
    if (rc < 0) return rc;
    (*out)->next = c->regions;
    c->regions = *out;
    return 0;
}

/* Takes r off the client's regions and keeps it for reuse as staging. */
static void stage_give(ringd_client *c, struct region *r)
{
    for (struct region **link = &c->regions; *link; link = &(*link)->next) {
        if (*link == r) {
            *link = r->next;
            break;
        }
    }
    region_give_spare(c, r);
}

int ringd_gather(ringd_client *c, const void *input, void *buf, size_t count, ringd_dtype dtype,
                 int root)
{
    if (!c) return RINGD_EINVAL;
    plan p;
    int rc = prepare(c, "gather", count, dtype, &root, 1, &p);
    if (rc < 0 || count == 0) return rc;
    int me = c->w.rank;
    if (!input || (me == root && !buf))
        return session_fail(&c->s, RINGD_EINVAL, "gather: %s is NULL with count %zu",
                            input ? "buf" : "input", count);
    struct region *r;
    if ((rc = stage_take(c, &p, &r)) < 0) return rc;
    char name[32];
    snprintf(name, sizeof name, "gather to rank %d", root);
    ringd_collective coll = {.kind = RINGD_COLL_ALLGATHER,
                             .input = input,
                             .buf = r->base,
                             .count = count,
                             .dtype = dtype,
                             .name = name};
    rc = ringd_run(c, &coll);
    if (rc == 0 && me == root) memcpy(buf, r->base, p.stage);
    stage_give(c, r);
    return rc;
}

int ringd_scatter(ringd_client *c, const void *input, void *buf, size_t count, ringd_dtype dtype,
                  int root)
{
    if (!c) return RINGD_EINVAL;
    plan p;
    int rc = prepare(c, "scatter", count, dtype, &root, 1, &p);
    if (rc < 0 || count == 0) return rc;
    int me = c->w.rank;
    if (!buf || (me == root && !input))
        return session_fail(&c->s, RINGD_EINVAL, "scatter: %s is NULL with count %zu",
                            buf ? "input" : "buf", count);
    struct region *r;
    if ((rc = stage_take(c, &p, &r)) < 0) return rc;
    if (me == root) memcpy(r->base, input, p.stage);
    ringd_collective coll = {.kind = RINGD_COLL_BROADCAST,
                             .buf = r->base,
                             .count = count * (size_t)c->w.size,
                             .dtype = dtype,
                             .root = root,
                             .name = "scatter"};
    rc = ringd_run(c, &coll);
    if (rc == 0) memmove(buf, (const uint8_t *)r->base + (size_t)me * p.block, p.block);
    stage_give(c, r);
    return rc;
}

int ringd_alltoall(ringd_client *c, const void *input, void *buf, size_t count, ringd_dtype dtype)
{
    if (!c) return RINGD_EINVAL;
    plan p;
    int rc = prepare(c, "alltoall", count, dtype, NULL, (size_t)c->w.size, &p);
    if (rc < 0 || count == 0) return rc;
    if (!input || !buf)
        return session_fail(&c->s, RINGD_EINVAL, "alltoall: %s is NULL with count %zu",
                            input ? "buf" : "input", count);
    size_t n = (size_t)c->w.size, me = (size_t)c->w.rank, row = p.block * n;
    struct region *r;
    if ((rc = stage_take(c, &p, &r)) < 0) return rc;
    /* This rank's whole input goes in place as its block of the allgather,
     * so input may be buf itself. */
    memcpy((uint8_t *)r->base + me * row, input, row);
    ringd_collective coll = {.kind = RINGD_COLL_ALLGATHER,
                             .buf = r->base,
                             .count = count * n,
                             .dtype = dtype,
                             .name = "alltoall"};
    rc = ringd_run(c, &coll);
    for (size_t i = 0; rc == 0 && i < n; i++)
        memcpy((uint8_t *)buf + i * p.block, (const uint8_t *)r->base + i * row + me * p.block,
               p.block);
    stage_give(c, r);
    return rc;
}
