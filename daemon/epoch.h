/*
 * epoch.h - the ring's epochs: the rules, without sockets.
 *
 * The ring runs under an epoch that every host agrees on once the ring is
 * whole; collectives are numbered from 0 in each, and frames of another
 * epoch are stale. A host that sees a link break or form starts an EPOCH
 * frame with a new epoch of its own (epoch % n == its position, larger than
 * any it has seen, so no two hosts pick the same one); hosts adopt larger
 * epochs and pass them on. A BREAK fails everything submitted; a FORM that
 * comes back to its origin has crossed every link, and the CONFIRM that
 * follows makes each host ready. PROTOCOL.md, "Ring epochs", has the whole
 * story; this module decides, links.c sends.
 */
#ifndef RINGD_EPOCH_H
#define RINGD_EPOCH_H

#include <stdint.h>

#include "proto/frame.h"

/* Where a host stands in its epoch. */
typedef enum {
    RING_BROKEN,  /* a link broke under this epoch: waiting for the links */
    RING_FORMING, /* a FORM of this epoch is going round: waiting for CONFIRM */
    RING_READY,   /* confirmed: collectives run */
} ring_phase;

typedef struct {
    int n, me;
    uint32_t epoch; /* the largest seen */
    ring_phase phase;
} epochs;

/* What to do with an EPOCH frame that arrived from the left. */
typedef enum {
    EPOCH_DROP,       /* older than what this host knows, or a CONFIRM never proposed here */
    EPOCH_BROKE,      /* adopted a BREAK: fail everything submitted; pass the frame on */
    EPOCH_REFORMING,  /* adopted a FORM: fail what runs; pass the frame on */
    EPOCH_CAME_ROUND, /* this host's FORM came back: send CONFIRM, then it is ready */
    EPOCH_CONFIRMED,  /* a CONFIRM of this epoch: pass it on, then it is ready */
} epoch_action;

/* Epoch 1, broken: a host starts with no links. */
void epochs_init(epochs *e, int n, int me);

/* The epoch this host would start now: the smallest larger than any seen
 * with epoch % n == me. */
uint32_t epochs_next(const epochs *e);

/* This host starts a new epoch of its own in `phase` (RING_BROKEN: it lost
 * a link; RING_FORMING: its right link came up). Returns the epoch. */
uint32_t epochs_start(epochs *e, ring_phase phase);

/* Decides what an EPOCH frame does, and adopts its epoch when it says so.
 * A CAME_ROUND or CONFIRMED host is ready only once it has sent the
 * CONFIRM on: then call epochs_confirm(). */
epoch_action epochs_receive(epochs *e, const frame_epoch *f);
void epochs_confirm(epochs *e);

/* A handshake told of epoch x: a larger one is adopted without a phase
 * change (the FORM that follows a new link carries a larger one still). */
void epochs_raise(epochs *e, uint32_t x);

/* Whether a DATA or ABORT frame of epoch x belongs to this epoch. */
int epochs_current(const epochs *e, uint32_t x);

int epochs_ready(const epochs *e);

#endif /* RINGD_EPOCH_H */
