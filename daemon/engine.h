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
#include "links.h"
#include "net.h"
#include "peer.h"

/* One of the two links a host shows in its status: the ring's left and
 * right neighbours (the star: the root, or for the root all leaves). */
typedef struct {
    link_state state;
    int host;          /* the host at the other end */
    char error[640];   /* why it is not up, "" */
    uint64_t since_ms; /* uv_now() of its last change of state */
    int refused;       /* down: its last attempt was refused (error says why) */
} engine_link;

typedef struct {
    job_stats jobs;
    net_stats net;
    uint32_t epoch;
    int ready; /* collectives may run now */
    engine_link left, right;
    uint64_t next_seq;                   /* the number of the next collective in the epoch */
    char waiting[FRAME_MAX_WAITING + 1]; /* not ready: what the ring waits for, "" */
    int short_of_hosts;                  /* ... and it is hosts (links_short_of_hosts()) */
    int n_done;                          /* hosts in done */
    uint64_t done[64]; /* collectives each host completed in the epoch, as known here */
} engine_stats;

typedef struct engine engine;

/* A resize of an elastic ring, as this host settled it; also one that left
 * this host out (a ring that closed over it), whose words are the ones the
 * calls it settled failed with on the hosts it did include. */
typedef struct {
    uint32_t from, to; /* the membership epochs it ended and began */
    /* This host's first rank in the one it began, its ranks; -1, 0: this
     * host was not in it. */
    int first_rank, ranks;
    char why[FRAME_MAX_WAITING + 64]; /* its words: "ring resized to 4 hosts (4 ranks): ..." */
} engine_resize;

#define ENGINE_RESIZES_KEPT 8

/* The hosts collectives run on now, for numbering ranks: the configured
 * ones, or in an elastic ring those of its current membership. */
typedef struct {
    const cfg *hosts;       /* hosts and n_hosts in ring order; read nothing else of it */
    int me;                 /* this host in it */
    uint32_t members_epoch; /* changes with every resize; 0: never resized */
    const char *resize_why; /* the last resize, "" */
    /* The last resizes, oldest first: a call made for an older membership
     * fails with the resize that ended that membership, whichever came
     * since, as the calls that one settled did (session_resize(),
     * local-internal.h). */
    const engine_resize *resizes;
    int n_resizes;
} engine_view;

/* What an engine tells its owner (the local sessions) besides each job's
 * outcome. */
typedef struct {
    /* Every collective submitted so far fails (a new epoch began after a
     * failure): the owner fails what it holds for the engine too, and
     * hands over nothing more until settled() says where the next epoch
     * starts (gather.h). */
    void (*reset)(void *data);
    /* How they failed, in one verdict for every host: the owner answers
     * what it held by it (job_verdict_apply()). */
    void (*settled)(void *data, const job_verdict *v);
    /* Which local ranks have not submitted the host's next collective
     * ("rank 3", "ranks 2, 3 (no process connected)"), for messages. */
    void (*missing)(void *data, char *out, size_t len);
} engine_watcher;

/* A part of some host's summary arrived from another daemon (report.h). */
typedef void (*engine_report_cb)(void *data, const summary_part *p);

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
    /* Who to tell about resets (w and data must outlive e). */
    void (*watch)(engine *e, const engine_watcher *w, void *data);
    /* This host's ranks are all there (complete) or not; gone: one left,
     * and why names it: every host's collectives fail at once. */
    void (*members)(engine *e, int complete, int gone, const char *why);
    /* Whether a session born at generation `born` (engine_generation() when
     * it began) must fail its collectives at once: a rank it knew of left
     * and the ring waits for it; why says which. */
    int (*left)(const engine *e, uint64_t born, char *why, size_t len);
    uint64_t (*generation)(const engine *e);
    /* Some local rank has submitted `top` collectives of the current epoch
     * (counted from its first). */
    void (*submitted)(engine *e, uint64_t top);
    /* Why collectives cannot start now, for messages ("" if they can). */
    void (*why_waiting)(const engine *e, char *out, size_t len);
    void (*view)(const engine *e, engine_view *out);
    /* The membership as the links know it, for status (elastic 0: none). */
    void (*membership)(const engine *e, links_membership *out);
    /* This host leaves the ring (leave 1: ringctl leave, the daemon stops)
     * or joins it again (0). 0, or RINGD_EINVAL: the ring is not elastic. */
    int (*leave)(engine *e, int leave, const char *why);
    /* Sends part p of a host's summary on round the ring: 0, RINGD_ERING
     * (no right link now) or RINGD_EINVAL (the star carries none). */
    int (*send_report)(engine *e, const summary_part *p);
    /* Who hears the summaries that arrive (data must outlive e). */
    void (*watch_reports)(engine *e, engine_report_cb cb, void *data);
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

static inline void engine_watch(engine *e, const engine_watcher *w, void *data)
{
    e->ops->watch(e, w, data);
}

static inline void engine_members(engine *e, int complete, int gone, const char *why)
{
    e->ops->members(e, complete, gone, why);
}

static inline int engine_left(const engine *e, uint64_t born, char *why, size_t len)
{
    return e->ops->left(e, born, why, len);
}

static inline uint64_t engine_generation(const engine *e)
{
    return e->ops->generation(e);
}

static inline void engine_submitted(engine *e, uint64_t top)
{
    e->ops->submitted(e, top);
}

static inline void engine_why_waiting(const engine *e, char *out, size_t len)
{
    e->ops->why_waiting(e, out, len);
}

static inline void engine_get_view(const engine *e, engine_view *out)
{
    e->ops->view(e, out);
}

/* This host's first rank, and the ranks of the ring, as it is now (an
 * elastic ring renumbers them when it resizes). */
static inline int engine_first_rank(const engine *e)
{
    engine_view v;
    engine_get_view(e, &v);
    return cfg_first_rank(v.hosts, (size_t)v.me);
}

static inline int engine_ranks(const engine *e)
{
    engine_view v;
    engine_get_view(e, &v);
    return cfg_total_ranks(v.hosts);
}

static inline void engine_get_membership(const engine *e, links_membership *out)
{
    e->ops->membership(e, out);
}

static inline int engine_leave(engine *e, int leave, const char *why)
{
    return e->ops->leave(e, leave, why);
}

static inline int engine_send_report(engine *e, const summary_part *p)
{
    return e->ops->send_report(e, p);
}

static inline void engine_watch_reports(engine *e, engine_report_cb cb, void *data)
{
    e->ops->watch_reports(e, cb, data);
}

/* How messages name a collective: "allreduce", "?" for an unknown kind;
 * and "allreduce of 1000 x float32 sum", "broadcast of 10 x int8 from rank
 * 2". */
const char *engine_kind_name(int kind);
void engine_describe(char *out, size_t len, int kind, uint64_t count, int dtype, int op, int root);

#endif /* RINGD_ENGINE_H */
