/*
 * peer.h - a link to one other daemon: one frame stream each way over 1..K
 * TCP connections (conn.h).
 *
 * Both ends of a link are peers. The connector end (a ring host's link to
 * its right neighbour, a star leaf's link to the root) keeps the link up by
 * itself: it resolves, connects and handshakes (handshake.h), with capped
 * exponential backoff and jitter between attempts. The acceptor end (a ring
 * host's link from its left neighbour, the star root's link from each leaf)
 * is given its connections by the listener once their handshake is done.
 *
 * Once up, a peer carries frames: DATA frames queued in one turn of the
 * loop go out in one write, each with a CRC32C unless `checksum: none`;
 * control frames (ABORT, EPOCH) go out behind the DATA frames already
 * queued; every DATA payload that arrives with a CRC is checked. PINGs keep
 * quiet links alive both ways, and a link on which nothing arrived for
 * heartbeat_timeout is closed (peer_heartbeat()).
 */
#ifndef RINGD_PEER_H
#define RINGD_PEER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "conn.h"
#include "log.h"
#include "net.h"

typedef enum {
    LINK_DOWN = 0,   /* no connection: waiting (acceptor) or backing off (connector) */
    LINK_CONNECTING, /* resolving or TCP connect in progress (connector) */
    LINK_HANDSHAKE,  /* HELLO sent, WELCOME awaited (connector) */
    LINK_UP,         /* carrying frames */
    LINK_SELF,       /* a ring of one host has no links */
} link_state;

const char *link_state_name(link_state s);

typedef enum { PEER_CONNECTOR, PEER_ACCEPTOR } peer_role;

/* Frame types a peer accepts once up, as a mask of 1 << frame_type. */
#define PEER_ACCEPTS(t) (1u << (t))

typedef struct peer peer;

typedef struct {
    /* The link is up (every stream of it). */
    void (*up)(void *owner, peer *p);
    /* A link that was up is lost (why says how); the connector retries,
     * after the first backoff step unless the owner brings it forward. */
    void (*down)(void *owner, peer *p, const char *why);
    /* A DATA header arrived: a reader_verdict with *dst, or a negative
     * RINGD_E* code with a message in why (the link is then closed). */
    int (*data)(void *owner, peer *p, const frame_data *d, uint8_t **dst, char *why, size_t len);
    /* The payload of a DATA frame taken with READER_INTO is in place
     * (status 0), or arrived with a bad checksum (RINGD_ECORRUPT, message in
     * why): the stream is intact, the bytes are not. */
    void (*payload)(void *owner, peer *p, const frame_data *d, int status, const char *why);
    /* An ABORT or EPOCH frame arrived (PINGs stay here). */
    void (*control)(void *owner, peer *p, const frame_header *h, const uint8_t *body);
    /* A DATA frame sent with peer_send_data(..., ctx) left this process (or
     * was cancelled: status < 0); its payload is free again. */
    void (*sent)(void *owner, void *ctx, int status);
    /* Connector: the epoch field of HELLO. */
    uint32_t (*hello_epoch)(void *owner, peer *p);
    /* Connector: the acceptor accepted; w->epoch is its epoch field. */
    void (*welcomed)(void *owner, peer *p, const frame_welcome *w);
    /* Connector: an attempt ended without the link coming up (refused, as
     * peer_refused() says, or failed) and the next one waits out the
     * backoff, unless the owner calls peer_retry_now() or peer_set_host()
     * now. NULL: not told. */
    void (*failed)(void *owner, peer *p);
} peer_ops;

/* A peer in env (which must outlive it) for host `host` (a position in
 * cfg), calling ops with owner. A connector starts connecting at
 * peer_start(); an acceptor waits for peer_accept(). accepts: the frame
 * types it takes once up (PEER_ACCEPTS(FRAME_DATA) | ...; PING always). */
peer *peer_new(const net_env *env, const peer_ops *ops, void *owner, int host, peer_role role,
               unsigned accepts);
void peer_start(peer *p);

/* Acceptor: c, stream 0 of a link from this peer's host whose handshake is
 * done, replaces the link (an older connection may be a half-open leftover
 * of a restarted host). Streams 1.. of it come with peer_attach(). */
void peer_accept(peer *p, conn *c);
/* Acceptor: stream c->hs.stream > 0 of the link; refused unless it belongs
 * to the link up now (same session). */
void peer_attach(peer *p, conn *c);

/* Closes the link (it re-forms by itself, through the connector). */
void peer_reset(peer *p, const char *why);

/* The link goes to (connector) or comes from (acceptor) another host from
 * now on; a connection it has closes with why. An elastic ring's links
 * change hosts as hosts leave and come back. */
void peer_set_host(peer *p, int host, const char *why);

/* Connector without a connection: the next attempt now, not after the
 * backoff (something changed that may let it through). */
void peer_retry_now(peer *p);

/* Connector: whether its HELLOs say FRAME_FLAG_CUT (this host cannot reach
 * the hosts between it and the one it connects to); the next attempt on. */
void peer_set_cut(peer *p, int cut);

/* hold 1: closes the connection (why) and makes no other until hold 0
 * (a host that left the ring). */
void peer_hold(peer *p, int hold, const char *why);

/* Closes everything of p for good; p is freed once its handles are. */
void peer_close(peer *p);

/* Queues one DATA frame, stamped with epoch. The payload is not copied: it
 * must stay valid and unchanged until ops->sent(ctx). Returns 0 or
 * RINGD_ERING (not up) / RINGD_ENOMEM. */
int peer_send_data(peer *p, const frame_data *d, uint32_t epoch, const uint8_t *payload, void *ctx);
/* Sends an encoded control frame behind the DATA frames queued. */
int peer_send_control(peer *p, const uint8_t *frame, size_t n);

/* Re-offers a paused DATA frame to ops->data, from the loop. */
void peer_resume(peer *p);

/* The heartbeat tick's own clock. A tick that comes much later than its
 * interval says that this process did not run meanwhile (the machine was
 * overloaded, paused or swapping): the silence of its links was then at
 * least partly its own, which is logged and said when they time out. */
typedef struct {
    uint64_t last;       /* the tick before, or the timer's start */
    uint64_t every[2];   /* heartbeat_interval at the two ticks before */
    uint64_t stalled_ms; /* how long this process did not run before this tick; 0: it ran */
    log_ratelimit rl;
} peer_clock;

/* Advances k to a heartbeat tick at now. */
void peer_clock_tick(peer_clock *k, uint64_t now, const cfg *c);

/* PINGs p if up, or closes it if nothing arrived for heartbeat_timeout (a
 * link held paused by us is quiet by our choice); k is the tick's clock. */
void peer_heartbeat(peer *p, uint64_t now, const peer_clock *k);

link_state peer_state(const peer *p);
int peer_host(const peer *p);
/* Why the link is not up ("connection refused", ...), or "". */
const char *peer_error(const peer *p);
/* uv_now() when the state last changed. */
uint64_t peer_since(const peer *p);
/* Connections of p closed so far, attempts or links: whether an attempt
 * ended since some moment, however fast (uv_now() has 1 ms steps). */
uint64_t peer_ended(const peer *p);
/* Whether the link is down because its last attempt was refused (the other
 * end refused it, or it failed to authenticate): a configuration problem,
 * not a host that is away. */
int peer_refused(const peer *p);
/* The remote address of the link, "" if none. */
const char *peer_address(const peer *p);

#endif /* RINGD_PEER_H */
