/*
 * star.h - the star baseline (`algorithm: star`): one host, the root,
 * collects every host's buffer, reduces them and sends the result back.
 *
 * It exists to be compared with the ring: its root sends (N-1) times the
 * buffer where a ring host sends 2(N-1)/N of it. It runs the ring's jobs
 * (ring.h) in submission order, one at a time, and owns this host's TCP port
 * instead of the ring links: the root accepts one connection from every
 * other host (a leaf), each leaf connects to the root with capped
 * exponential backoff. The frames are the ring's (proto/frame.h).
 */
#ifndef RINGD_STAR_H
#define RINGD_STAR_H

#include <stddef.h>
#include <uv.h>

#include "config/config.h"
#include "links.h"
#include "ring.h"

typedef struct star star;

/* Creates the star engine of host `me` of c (c->algorithm == CFG_ALG_STAR);
 * nothing happens until star_start(). c must outlive it. */
int star_new(star **out, uv_loop_t *loop, const cfg *c, int me);

/* Listens on this host's address (root) or starts connecting to the root
 * (leaf). Returns 0 or a negative code with a message in err. */
int star_start(star *s, char *err, size_t errlen);

/* Queues a job; the outcome arrives through job->done, possibly before this
 * returns. Only ALLREDUCE and BARRIER run; other kinds fail at once with
 * RINGD_EINVAL. */
void star_submit(star *s, ring_job *job);

/* Fails every job (status, message), closes every connection and handle;
 * done(data) runs once all are closed and s has been freed. */
void star_close(star *s, int status, const char *message, void (*done)(void *), void *data);

void star_get_stats(const star *s, ring_stats *out);

/* For `ringctl status`: the state of this host's connections (a leaf: the
 * one to the root; the root: up when every leaf is up, else down) and the
 * payload bytes moved. */
link_state star_state(const star *s);
void star_get_link_stats(const star *s, links_stats *out);

#endif /* RINGD_STAR_H */
