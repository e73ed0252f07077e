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

/* Answers request id of session s (the caller's session, opaque here). */
typedef void (*gather_reply_cb)(void *s, uint64_t id, int status, const char *text);

/* The gathering of host me; e runs the host's collectives. c and e must
 * outlive it. */
gather *gather_new(uv_loop_t *loop, const cfg *c, int me, engine *e, gather_reply_cb reply);

/* A checked COLLECTIVE m (request id) of local rank `rank` (session s) on
 * buf in region reg (both NULL for no bytes); *next is the session's next
 * collective number, which it advances. Every path ends in one reply. */
void gather_submit(gather *g, void *s, int rank, uint64_t *next, uint64_t id, region *reg,
                   uint8_t *buf, const msg_collective *m);

/* The number a newcomer's first submission gets: the oldest collective
 * still waiting for local ranks, or the first after those running. */
uint64_t gather_joining_index(const gather *g);

/* Session s (local rank rank, process pid) is gone: its submissions that
 * wait are withdrawn; those already running fail on every host. */
void gather_withdraw(gather *g, void *s, int rank, uint32_t pid, const char *why);

/* Answers every collective not running yet with (status, message), closes
 * the timer and frees g once the running ones are done. */
void gather_close(gather *g, int status, const char *message);

/* "allreduce of 1000 x float32 sum named \"fc1\"", for messages. */
const char *gather_describe(const msg_collective *m, char *buf, size_t len);

#endif /* RINGD_GATHER_H */
