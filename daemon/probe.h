/*
 * probe.h - whether this host can reach another's ring port now: a TCP
 * connection attempt, closed as soon as it is made, sending nothing.
 *
 * An elastic ring that runs without a host it cannot reach although that
 * host is up (an asymmetric cut, PROTOCOL.md "Reachability") tries it this
 * way, once a second, to learn when the cut heals without breaking the
 * ring that runs meanwhile. The host probed sees a connection that closes
 * before its handshake, which its listener logs at debug level only.
 */
#ifndef RINGD_PROBE_H
#define RINGD_PROBE_H

#include <uv.h>

#include "config/config.h"
#include "conn.h"

typedef struct probe probe;

/* status 0: host's port accepted a connection; else a negative uv code
 * (UV_ETIMEDOUT after connect_timeout). */
typedef void (*probe_cb)(void *data, int host, int status);

/* A prober for the hosts of c; each attempt holds lt while its handles
 * live. Returns 0 or RINGD_ENOMEM. */
int probe_new(probe **out, uv_loop_t *loop, const cfg *c, lifetime *lt, probe_cb cb, void *data);

/* Starts an attempt on host, unless one is under way (returns 0 then too);
 * cb runs when it ends, never from within this call. */
int probe_start(probe *p, int host);

int probe_busy(const probe *p);

/* Ends the attempt under way without its callback; p is freed once its
 * handles are closed. */
void probe_close(probe *p);

#endif /* RINGD_PROBE_H */
