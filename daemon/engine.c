/*
 * engine.c - picking an engine, and how messages name collectives.
 */
#include "engine.h"

#include <inttypes.h>
#include <stdio.h>

int engine_new(engine **out, uv_loop_t *loop, const cfg *c, int me, const auth_key *key)
{
    if (c->algorithm == CFG_ALG_STAR) return star_new(out, loop, c, me, key);
    return ring_new(out, loop, c, me, key);
}

const char *engine_kind_name(int kind)
{
    const char *name = ringd_coll_name((ringd_coll)kind);
    return name ? name : "?";
}

void engine_describe(char *out, size_t len, int kind, uint64_t count, int dtype, int op, int root)
{
    const char *dn = ringd_dtype_name(dtype), *on = ringd_op_name(op);
    if (kind == RINGD_COLL_BARRIER)
        snprintf(out, len, "barrier");
    else if (kind == RINGD_COLL_BROADCAST)
        snprintf(out, len, "broadcast of %" PRIu64 " x %s from rank %d", count, dn ? dn : "?",
                 root);
    else if (kind == RINGD_COLL_ALLGATHER) /* no op: nothing is reduced */
        snprintf(out, len, "allgather of %" PRIu64 " x %s", count, dn ? dn : "?");
    else
        snprintf(out, len, "%s of %" PRIu64 " x %s %s", engine_kind_name(kind), count,
                 dn ? dn : "?", on ? on : "?");
}
