/*
 * collective.c - libringd's collectives: checked, submitted on a buffer in
 * a shared region (shm.c), and waited for (requests.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "region.h"
#include "requests.h"
#include "shm.h"

static const char *kind_name(ringd_coll kind)
{
    const char *name = ringd_coll_name(kind);
    return name ? name : "collective";
}

static int is_float(ringd_dtype dtype)
{
    return dtype == RINGD_FLOAT16 || dtype == RINGD_BFLOAT16 || dtype == RINGD_FLOAT32 ||
           dtype == RINGD_FLOAT64;
}

/* ---- submission ---- */

/* Checks coll against the contract of ringd.h; sets *elems to the elements of
 * the buffer the daemon works on. */
static int check(ringd_client *c, const ringd_collective *coll, size_t *elems)
{
    const char *what = kind_name(coll->kind);
    if (coll->kind < RINGD_COLL_ALLREDUCE || coll->kind > RINGD_COLL_BARRIER)
        return session_fail(&c->s, RINGD_EINVAL, "unknown collective kind %d (see ringd_coll)",
                            (int)coll->kind);
    *elems = 0;
    if (coll->kind == RINGD_COLL_BARRIER) return 0;
    size_t esize = ringd_dtype_size(coll->dtype);
    if (esize == 0)
        return session_fail(&c->s, RINGD_EINVAL, "%s: unknown dtype %d (see ringd_dtype)", what,
                            (int)coll->dtype);
    if (coll->kind == RINGD_COLL_ALLREDUCE || coll->kind == RINGD_COLL_REDUCE_SCATTER) {
        if ((unsigned)coll->op >= RINGD_OP_COUNT)
            return session_fail(&c->s, RINGD_EINVAL, "%s: unknown op %d (see ringd_op)", what,
                                (int)coll->op);
        if ((coll->op == RINGD_MEAN || coll->op == RINGD_WMEAN) && !is_float(coll->dtype))
            return session_fail(&c->s, RINGD_EINVAL, "%s: op %s needs a float dtype, got %s", what,
                                ringd_op_name(coll->op), ringd_dtype_name(coll->dtype));
        if (coll->op == RINGD_WMEAN && !(coll->weight >= 0 && coll->weight <= 1e300))
            return session_fail(&c->s, RINGD_EINVAL, "%s: op wmean needs a weight >= 0, got %g",
                                what, coll->weight);
    }
    if ((unsigned)coll->wire_dtype > RINGD_WIRE_FLOAT16)
        return session_fail(&c->s, RINGD_EINVAL, "%s: unknown wire_dtype %d (see ringd_wire)", what,
                            (int)coll->wire_dtype);
    if ((coll->wire_dtype == RINGD_WIRE_BFLOAT16 || coll->wire_dtype == RINGD_WIRE_FLOAT16) &&
        (coll->dtype != RINGD_FLOAT32 || coll->kind == RINGD_COLL_BROADCAST))
        return session_fail(&c->s, RINGD_EINVAL,
                            "%s: wire_dtype %s is for float32 allreduce, reduce_scatter and "
                            "allgather, not %s",
                            what, coll->wire_dtype == RINGD_WIRE_BFLOAT16 ? "bfloat16" : "float16",
                            ringd_dtype_name(coll->dtype));
    if (coll->kind == RINGD_COLL_BROADCAST && (coll->root < 0 || coll->root >= c->w.size))
        return session_fail(&c->s, RINGD_EINVAL, "broadcast: root %d is not a rank (0..%d)",
                            coll->root, c->w.size - 1);
    size_t n = coll->count;
    int per_rank = coll->kind == RINGD_COLL_ALLGATHER || coll->kind == RINGD_COLL_REDUCE_SCATTER;
    if (per_rank && n > SIZE_MAX / (size_t)c->w.size)
        n = SIZE_MAX;
    else if (per_rank)
        n *= (size_t)c->w.size;
    if (n > SIZE_MAX / esize || n * esize > c->w.max_bytes)
        return session_fail(&c->s, RINGD_ETOOBIG,
                            "%s: %zu x %s%s is more than the daemon's limit of %llu bytes "
                            "(max_buffer in its configuration); split the buffer",
                            what, coll->count, ringd_dtype_name(coll->dtype),
                            per_rank ? " per rank" : "", (unsigned long long)c->w.max_bytes);
    if (n > 0 && !coll->buf)
        return session_fail(&c->s, RINGD_EINVAL, "%s: buf is NULL with count %zu", what,
                            coll->count);
    *elems = n;
    return 0;
}

int ringd_submit(ringd_client *c, const ringd_collective *coll, ringd_request **req)
{
    if (!c || !coll || !req) return RINGD_EINVAL;
    *req = NULL;
    const char *what = kind_name(coll->kind);
    size_t elems;
    int rc = check(c, coll, &elems);
    if (rc < 0) return rc;
    if (c->s.broken) return requests_broken(c, what);
    shm_trim(c);

    struct ringd_request *q = calloc(1, sizeof *q);
    if (!q) return session_fail(&c->s, RINGD_ENOMEM, "%s: out of memory", what);
    q->c = c;
    q->kind = coll->kind;
    size_t esize = elems ? ringd_dtype_size(coll->dtype) : 0;
    size_t bytes = elems * esize, block = coll->count * esize;
    size_t mine = (size_t)c->w.rank * block;
    uint8_t *buf = coll->buf;

    /* Where the daemon works, and what of it the caller gets back. */
    const void *source = buf; /* what the work buffer starts as */
    if (coll->kind == RINGD_COLL_ALLGATHER && coll->input && bytes > 0)
        memmove(buf + mine, coll->input, block);
    if (coll->kind == RINGD_COLL_REDUCE_SCATTER) {
        if (coll->input) source = coll->input;
        q->result_off = mine;
        q->result_bytes = block;
    } else {
        q->result_bytes = bytes;
    }
    q->user = buf;
    struct region *r = bytes ? region_find(c, source, bytes) : NULL;
    /* The daemon wants elements aligned in their region; stage the odd case,
     * and a reduce-scatter input, which must stay as it is. */
    if (r && (((uintptr_t)source - (uintptr_t)r->base) % esize != 0 || source != (void *)buf))
        r = NULL;
    if (bytes > 0 && !r) {
        rc = shm_staging(c, bytes, what, &q->staging);
        if (rc < 0) {
            free(q);
            return rc;
        }
        r = q->staging;
        memcpy(r->base, source, bytes);
    }
    /* Unstaged, the work buffer is the caller's own (source is buf then). */
    q->work = q->staging ? q->staging->base : bytes ? buf : NULL;

    msg_collective m = {.id = c->next_id++,
                        .kind = (uint8_t)coll->kind,
                        .dtype = (uint8_t)coll->dtype,
                        .op = (uint8_t)coll->op,
                        .wire = (uint8_t)coll->wire_dtype,
                        .region = r ? r->number : 0,
                        .offset = r ? (uint64_t)(q->work - (uint8_t *)r->base) : 0,
                        .count = coll->count,
                        .root = coll->root,
                        .weight = coll->weight,
                        .timeout_ms = coll->timeout_ms,
                        .members_epoch = c->w.members_epoch};
    if (coll->name) snprintf(m.name, sizeof m.name, "%s", coll->name);
    q->id = m.id;
    uint8_t msg[SESSION_MSG_MAX];
    int n = msg_encode_collective(msg, sizeof msg, &m);
    rc = n < 0 ? session_fail(&c->s, RINGD_EPROTO, "%s: cannot encode COLLECTIVE", what)
               : session_send(&c->s, msg, (size_t)n, -1,
                              session_deadline(SESSION_REQUEST_TIMEOUT_MS), what);
    if (rc < 0) {
        if (q->staging) region_give_spare(c, q->staging);
        free(q);
        return rc;
    }
    requests_push(c, q);
    *req = q;
    return 0;
}

int ringd_wait(ringd_request *req, int timeout_ms)
{
    if (!req) return RINGD_EINVAL;
    ringd_client *c = req->c;
    const char *what = kind_name(req->kind);
    int64_t deadline = timeout_ms < 0 ? -1 : session_deadline(timeout_ms);
    while (!req->done) {
        if (deadline >= 0) {
            int rc = session_readable(&c->s, deadline, what);
            if (rc == 0) return RINGD_EINPROGRESS;
            if (rc < 0) {
                requests_fail_all(c, rc);
                break;
            }
        }
        /* The daemon answers within its collective timeout: a reply that has
         * begun to arrive is whole within moments. */
        int64_t rest = deadline < 0 ? -1 : session_deadline(SESSION_REQUEST_TIMEOUT_MS);
        if (requests_read_one(c, rest, what) < 0) break;
    }
    int status = req->status;
    if (status < 0) session_fail(&c->s, status, "%s", req->text ? req->text : "");
    requests_unlink(c, req);
    free(req->text);
    free(req);
    return status;
}

int ringd_test(ringd_request *req)
{
    return ringd_wait(req, 0);
}

int ringd_run(ringd_client *c, const ringd_collective *coll)
{
    ringd_request *req;
    int rc = ringd_submit(c, coll, &req);
    return rc < 0 ? rc : ringd_wait(req, -1);
}

/* ---- the named forms ---- */

int ringd_iallreduce(ringd_client *c, void *buf, size_t count, ringd_dtype dtype, ringd_op op,
                     ringd_request **req)
{
    if (op == RINGD_WMEAN && c)
        return session_fail(&c->s, RINGD_EINVAL,
                            "allreduce: op wmean needs each rank's weight: use ringd_run() or "
                            "ringd_submit() with ringd_collective.weight");
    ringd_collective coll = {
        .kind = RINGD_COLL_ALLREDUCE, .buf = buf, .count = count, .dtype = dtype, .op = op};
    return ringd_submit(c, &coll, req);
}

int ringd_ibroadcast(ringd_client *c, void *buf, size_t count, ringd_dtype dtype, int root,
                     ringd_request **req)
{
    ringd_collective coll = {
        .kind = RINGD_COLL_BROADCAST, .buf = buf, .count = count, .dtype = dtype, .root = root};
    return ringd_submit(c, &coll, req);
}

int ringd_iallgather(ringd_client *c, const void *input, void *buf, size_t count, ringd_dtype dtype,
                     ringd_request **req)
{
    ringd_collective coll = {
        .kind = RINGD_COLL_ALLGATHER, .input = input, .buf = buf, .count = count, .dtype = dtype};
    return ringd_submit(c, &coll, req);
}

int ringd_ireduce_scatter(ringd_client *c, const void *input, void *buf, size_t count,
                          ringd_dtype dtype, ringd_op op, ringd_request **req)
{
    ringd_collective coll = {.kind = RINGD_COLL_REDUCE_SCATTER,
                             .input = input,
                             .buf = buf,
                             .count = count,
                             .dtype = dtype,
                             .op = op};
    return ringd_submit(c, &coll, req);
}

int ringd_ibarrier(ringd_client *c, ringd_request **req)
{
    ringd_collective coll = {.kind = RINGD_COLL_BARRIER};
    return ringd_submit(c, &coll, req);
}

/* Blocking: submit, then wait. */

int ringd_allreduce(ringd_client *c, void *buf, size_t count, ringd_dtype dtype, ringd_op op)
{
    ringd_request *req;
    int rc = ringd_iallreduce(c, buf, count, dtype, op, &req);
    return rc < 0 ? rc : ringd_wait(req, -1);
}

int ringd_broadcast(ringd_client *c, void *buf, size_t count, ringd_dtype dtype, int root)
{
    ringd_request *req;
    int rc = ringd_ibroadcast(c, buf, count, dtype, root, &req);
    return rc < 0 ? rc : ringd_wait(req, -1);
}

int ringd_allgather(ringd_client *c, const void *input, void *buf, size_t count, ringd_dtype dtype)
{
    ringd_request *req;
    int rc = ringd_iallgather(c, input, buf, count, dtype, &req);
    return rc < 0 ? rc : ringd_wait(req, -1);
}

int ringd_reduce_scatter(ringd_client *c, const void *input, void *buf, size_t count,
                         ringd_dtype dtype, ringd_op op)
{
    ringd_request *req;
    int rc = ringd_ireduce_scatter(c, input, buf, count, dtype, op, &req);
    return rc < 0 ? rc : ringd_wait(req, -1);
}

int ringd_barrier(ringd_client *c)
{
    ringd_request *req;
    int rc = ringd_ibarrier(c, &req);
    return rc < 0 ? rc : ringd_wait(req, -1);
}
