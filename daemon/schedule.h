/*
 * schedule.h - what a ring host does at each step of a collective: which
 * chunk it sends, which it receives, and whether it reduces or stores it;
 * and where each chunk lies in the buffer. Pure: no I/O, no state.
 *
 * Allreduce: the buffer is cut into n chunks. Host r runs 2(n-1) steps: in
 * reduce-scatter step g (0 <= g < n-1) it sends chunk r-g and receives chunk
 * r-g-1, which it reduces into its own copy; after n-1 steps it holds chunk
 * r+1 fully reduced. In allgather step g it sends chunk r+1-(g-n+1) and
 * receives chunk r-(g-n+1), which it stores. Indices mod n. The chunk a host
 * receives at step g is the one it sends at g+1, so received segments are
 * forwarded at once and stream round the ring.
 *
 * Reduce-scatter runs only the first n-1 steps and allgather only the last
 * n-1, on chunks that are the hosts' blocks of ranks, renumbered by one so
 * that host r ends with (or starts from) its own block. Broadcast is a
 * chain from the root's host: the host d hops after it receives at step
 * d-1 and forwards at step d. A barrier is an allreduce of one byte.
 */
#ifndef RINGD_SCHEDULE_H
#define RINGD_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "ringd.h"

typedef struct {
    int n, me;
    ringd_coll kind;
    int first, last; /* the steps this host runs, inclusive */
    int dist;        /* BROADCAST: hops from the root's host */
} schedule;

/* The schedule of host me of n for kind; root_host: the host of a
 * broadcast's root rank (ignored otherwise). */
void schedule_init(schedule *s, int n, int me, ringd_coll kind, int root_host);

/* Steps of every collective on n hosts: 2(n-1). */
int schedule_steps(int n);

/* The chunk this host receives at step g, or -1 if it receives nothing. */
int schedule_recv(const schedule *s, int g);

/* The chunk this host sends at step g, or -1 if it sends nothing. */
int schedule_send(const schedule *s, int g);

/* Whether a segment received at step g is reduced into this host's buffer
 * (else it is stored there). */
int schedule_reduces(const schedule *s, int g);

/* Whether step g completes this host's own chunk (where MEAN and WMEAN
 * divide). */
int schedule_completes(const schedule *s, int g);

/* Byte offset and length of chunk c of a collective of count elements of
 * esize bytes (per_rank: ALLGATHER, REDUCE_SCATTER), on the hosts of c. */
void schedule_chunk(const schedule *s, const cfg *c, uint64_t count, uint64_t per_rank,
                    size_t esize, int chunk, uint64_t *off, uint64_t *len);

#endif /* RINGD_SCHEDULE_H */
