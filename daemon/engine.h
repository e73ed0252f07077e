/*
 * engine.h - what runs a host's collectives: the ring (ring.c), or the star
 * baseline (star.c). main.c makes the one the configuration names; the rest
 * of the daemon sees only this interface.
 */
#ifndef RINGD_ENGINE_H
#define RINGD_ENGINE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "auth.h"
#include "config/config.h"
#include "jobs.h"
#include "net.h"
#include "peer.h"

/* One of the two links a host shows in its status: the ring's left and
 * right neighbours (the star: the root, or for the root all leaves). */
typedef struct {
    link_state state;
    int host;          /* the host at the other end */
    char error[640];   /* why it is not up, "" */
    uint64_t since_ms; /* uv_now() of its last change of state */
} engine_link;

typedef struct {
    job_stats jobs;
    net_stats net;
    uint32_t epoch;
    int ready; /* collectives may run now */
    engine_link left, right;
} engine_stats;

typedef struct engine engine;

typedef struct {
    /* Starts listening and connecting. Returns 0 or a negative code with a
     * message in err. */
    int (*start)(engine *e, char *err, size_t errlen);
    /* Queues a job; the outcome arrives through job->done. */
    void (*submit)(engine *e, job *j);
    /* Fails job j (queued or running) on every host: its submitter is
     * gone. message must live until j is done. */
    void (*cancel)(engine *e, job *j, int status, const char *message);
    /* Fails every job with (status, message) and closes; done(data) runs
     * once everything is closed and e has been freed. */
    void (*close)(engine *e, int status, const char *message, void (*done)(void *), void *data);
    void (*stats)(const engine *e, engine_stats *out);
} engine_ops;

struct engine {
    const engine_ops *ops;
};

/* The engine of host `me` of c (algorithm: ring or star), authenticating
 * its links with key (NULL: none). c and key must outlive it. */
int engine_new(engine **out, uv_loop_t *loop, const cfg *c, int me, const auth_key *key);

int ring_new(engine **out, uv_loop_t *loop, const cfg *c, int me, const auth_key *key);
int star_new(engine **out, uv_loop_t *loop, const cfg *c, int me, const auth_key *key);

static inline int engine_start(engine *e, char *err, size_t errlen)
{
    return e->ops->start(e, err, errlen);
}

static inline void engine_submit(engine *e, job *j)
{
    e->ops->submit(e, j);
}

static inline void engine_cancel(engine *e, job *j, int status, const char *message)
{
    e->ops->cancel(e, j, status, message);
}

static inline void engine_close(engine *e, int status, const char *message, void (*done)(void *),
                                void *data)
{
    e->ops->close(e, status, message, done, data);
}

static inline void engine_get_stats(const engine *e, engine_stats *out)
{
    e->ops->stats(e, out);
}

/* How messages name a collective: "allreduce", "?" for an unknown kind;
 * and "allreduce of 1000 x float32 sum", "broadcast of 10 x int8 from rank
 * 2". */
const char *engine_kind_name(int kind);
void engine_describe(char *out, size_t len, int kind, uint64_t count, int dtype, int op, int root);

#endif /* RINGD_ENGINE_H */
