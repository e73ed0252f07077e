/*
 * commit.h - what one host knows of its ring's completions in an epoch,
 * from the COMMIT frames that travel the ring, and which successes it may
 * answer. Pure: no I/O, no clock.
 *
 * Each host counts the collectives it has completed (done) and learns the
 * others' counts from COMMITs; the least of them is what it knows every
 * host has completed. That is not enough to answer a success: the host
 * that learns it first may be frozen or cut off before any other host
 * hears it, and the lap that closes over that host fails the collective
 * on the others (PROTOCOL.md, Outcomes: a lap confirms what some host on
 * it knew). So each COMMIT also says what each host knew (known), and a
 * host answers a success only once spare + 1 hosts know it, spare being
 * the configured hosts above min_hosts in an elastic ring (else 0): any
 * later ring has min_hosts hosts, so one of any spare + 1 is on it,
 * whichever hosts it left out and whichever came back meanwhile.
 */
#ifndef RINGD_COMMIT_H
#define RINGD_COMMIT_H

#include <stdint.h>

#include "proto/frame.h"

typedef struct {
    int n, me, spare;
    int cap;         /* hosts the arrays hold */
    uint64_t *done;  /* done[h]: collectives host h completed, as known here */
    uint64_t *known; /* known[h]: what host h knew every host had completed */
} commit_view;

/* Room for rings of up to cap hosts. Returns 0 or RINGD_ENOMEM. */
int commit_init(commit_view *v, int cap);
void commit_free(commit_view *v);

/* A new epoch, or a new membership: n hosts, this one at me, of whom a lap
 * may close over spare (0 <= spare < n); every count back to 0. */
void commit_reset(commit_view *v, int n, int me, int spare);

/* This host has completed count collectives. */
void commit_completed(commit_view *v, uint64_t count);

/* Takes what a COMMIT of this epoch says. Returns 1 when this host learnt
 * something (then it sends a COMMIT on), 0 when not, or when c counts
 * another number of hosts (another membership's). */
int commit_merge(commit_view *v, const frame_commit *c);

/* Collectives this host knows every host has completed. */
uint64_t commit_least(const commit_view *v);

/* Collectives this host may answer as successes: spare + 1 hosts know
 * every host has completed them. */
uint64_t commit_answerable(const commit_view *v);

/* The COMMIT this host sends (its epoch is the links'). */
void commit_frame(const commit_view *v, frame_commit *out);

#endif
