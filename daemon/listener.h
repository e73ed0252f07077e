/*
 * listener.h - a daemon's TCP port: accepts connections from other daemons
 * and runs the acceptor's side of their handshake (handshake.h).
 *
 * A connection that has not finished its handshake is pending: it gets
 * LISTENER_HELLO_MS (or connect_timeout, if shorter) to send its HELLO and
 * connect_timeout for the whole handshake, and at most LISTENER_MAX_PENDING
 * are kept at once, so that strangers cannot take unbounded memory. Anyone
 * who can reach the port could hold those slots, so a host that must get in
 * always can: one source address holds at most LISTENER_PER_SOURCE of them,
 * and when all are taken, a connection from an address of a host that may
 * connect here (the left neighbour; any host on the star's root; as
 * resolved at start) takes the slot of the oldest pending connection that
 * has not sent its HELLO yet, or failing that of the oldest stranger's.
 * Nothing but HELLO
 * (then, with a key, AUTH) is accepted from it. A HELLO that does not fit
 * this host is answered with a refusal saying why; refusals and strangers
 * dropped are logged at most once a minute (at debug otherwise), since a
 * misconfigured or hostile host retries for ever. A connection whose
 * handshake is done goes to the owner, which gives it to its link.
 */
#ifndef RINGD_LISTENER_H
#define RINGD_LISTENER_H

#include <stddef.h>
#include <stdint.h>

#include "net.h"

#define LISTENER_MAX_PENDING 16
#define LISTENER_PER_SOURCE 4 /* pending connections of one source address */
#define LISTENER_HELLO_MS 2000 /* from accept to a complete HELLO */
#define LISTENER_ACCEPT_BURST 32 /* connections accepted in one loop turn */

typedef struct listener listener;

typedef struct {
    /* The epoch field of the WELCOME accepting h (the ring adopts a larger
     * epoch of HELLO here; the star root gives its next collective), or of
     * a refusal when h is NULL. */
    uint32_t (*welcome_epoch)(void *owner, const frame_hello *h);
    /* c finished its handshake as stream c->hs.stream of a link from host
     * `from`: the owner gives it to that host's link or closes it. */
    void (*accepted)(void *owner, conn *c, int from);
    /* A connection was refused (why says so): the owner may keep it as the
     * reason why a link is not up. */
    void (*refused)(void *owner, const char *why);
    /* Whether the owner takes a link from the sender of h, whose HELLO
     * passed the handshake's checks: 0, or a RINGD_E* code to refuse it
     * with and the reason in why. NULL: always. */
    int (*admit)(void *owner, const frame_hello *h, char *why, size_t len);
} listener_ops;

/* A listener in env (which must outlive it), calling ops with owner. */
listener *listener_new(const net_env *env, const listener_ops *ops, void *owner);

/* Listens on this host's address. Returns 0, or a negative code with a
 * message in err ("cannot listen on 127.0.0.1:7701: address already in use
 * (is another ringd running there?)"). */
int listener_start(listener *l, char *err, size_t errlen);

/* Stops listening and drops every pending connection; l is freed once its
 * handles are. */
void listener_close(listener *l);

#endif /* RINGD_LISTENER_H */
