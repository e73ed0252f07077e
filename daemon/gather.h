/*
 * gather.h - the collectives of one host: the submissions of its local
 * ranks, gathered into one job for the engine.
 *
 * Collective k of this host is the k-th submission of each of its
 * local_clients ranks. Once all have arrived, their buffers are reduced into
 * one in local-rank order (never arrival order, so the bits do not depend on
 * timing), the engine runs on that buffer, and the result is copied back to
 * the other local ranks. A collective whose ranks do not all come in time,
 * or disagree, still takes its place on the ring, already failed, so that
 * every rank of every host learns why.
 *
 * Every rank's submissions are numbered in one sequence that never
 * restarts; an epoch of the ring starts at an index (base) and collective
 * seq of the epoch is index base + seq. When the engine resets, nobody
 * knows yet where the next epoch starts: the ring settles it as base +
 * top, top being how many collectives any rank of any host submitted in
 * the old epoch (engine_submitted()). Until then new submissions wait;
 * then those below the cut fail as the old epoch's did, and the rest are
 * the new epoch's, on every host alike (PROTOCOL.md, "Outcomes").
 */
#ifndef RINGD_GATHER_H
#define RINGD_GATHER_H

#include <stdint.h>
#include <uv.h>

#include "config/config.h"
#include "engine.h"
#include "proto/msg.h"
#include "regions.h"

#define GATHER_MAX_COLLS 1024 /* collectives waiting for local ranks */

typedef struct gather gather;

/* Where a session is in the numbering of its host's collectives. */
typedef struct {
    uint64_t next; /* the index of its next submission */
} gather_pos;

/* How a collective that succeeded went, for the accounting of the rank
 * answered (account.h). */
typedef struct {
    uint64_t last_ns; /* uv_hrtime() when the last rank of the ring submitted it, as far as
                         this host knows */
    uint64_t late_ns; /* this rank submitted it last in the ring: this long after the first */
} gather_timing;

/* Answers request id of session s (the caller's session, opaque here); t
 * is NULL but for a success. */
typedef void (*gather_reply_cb)(void *s, uint64_t id, int status, const char *text,
                                const gather_timing *t);

/* The gathering of host me; e runs the host's collectives. c and e must
 * outlive it. */
gather *gather_new(uv_loop_t *loop, const cfg *c, int me, engine *e, gather_reply_cb reply);

/* A checked COLLECTIVE m (request id) of local rank `rank` (session s) on
 * buf in region reg (both NULL for no bytes); pos is the session's place in
 * the numbering, which it advances. Every path ends in one reply. */
void gather_submit(gather *g, void *s, int rank, gather_pos *pos, uint64_t id, region *reg,
                   uint8_t *buf, const msg_collective *m);

/* Where a newcomer starts: the oldest collective still waiting for local
 * ranks, or the first after those running; after a reset, at the start of
 * the next epoch (pos is then kept until it is known, and must stay valid
 * until gather_withdraw()). */
void gather_join(gather *g, gather_pos *pos);

/* The engine reset (every collective submitted so far fails): those waiting
 * for local ranks are set aside, and the next epoch's start is not known
 * until a verdict says so. */
void gather_reset(gather *g);

/* How a reset ended: the set-aside collectives, and those submitted since
 * below the cut (base + v->top), are answered as verdict v says
 * (job_verdict_apply()); once the ring is ready (v->ready) the new epoch
 * starts at the cut. */
void gather_settled(gather *g, const job_verdict *v);

/* After a verdict that resized the ring (v->resized): every waiting
 * collective failed with it, and each rank's next collective is the new
 * epoch's first, at the index returned: the owner moves every session's
 * gather_pos there. */
uint64_t gather_resized(gather *g);

/* Session s (local rank rank, at pos) is gone: its submissions that wait
 * are withdrawn; those running lose their answer (the engine fails them
 * when it hears the rank left). */
void gather_withdraw(gather *g, void *s, int rank, gather_pos *pos);

/* Answers every collective not running yet with (status, message), closes
 * the timer and frees g once the running ones are done. */
void gather_close(gather *g, int status, const char *message);

/* Whether the next submission at pos belongs to an epoch a verdict has
 * settled already (gather_submit() answers it by that verdict). */
int gather_settled_before(const gather *g, const gather_pos *pos);

/* Whether local rank `rank` has submitted the host's next collective that
 * waits for local ranks (0 when none waits). */
int gather_submitted(const gather *g, int rank);

/* How messages name m: "allreduce", or "allreduce \"fc1\"" with a name. */
const char *gather_label(const msg_collective *m, char *buf, size_t len);

/* "allreduce of 1000 x float32 sum named \"fc1\"", for messages. */
const char *gather_describe(const msg_collective *m, char *buf, size_t len);

#endif /* RINGD_GATHER_H */
