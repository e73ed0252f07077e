/*
 * links.h - the two TCP links of this host in the ring.
 *
 * This host connects to its right neighbour (and only sends data on that
 * connection) and accepts its left neighbour (and only receives data on that
 * one). The module keeps both up: it resolves, connects and handshakes with
 * capped exponential backoff, validates the left neighbour's HELLO, and reads
 * frames straight into the buffers the ring names, so payload bytes are never
 * copied on the way in or out.
 */
#ifndef RINGD_LINKS_H
#define RINGD_LINKS_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "config/config.h"
#include "proto/frame.h"

typedef enum { LINK_LEFT = 0, LINK_RIGHT = 1 } link_side;

typedef enum {
    LINK_DOWN = 0,   /* no connection: waiting (left) or backing off (right) */
    LINK_CONNECTING, /* resolving or TCP connect in progress (right only) */
    LINK_HANDSHAKE,  /* HELLO sent, WELCOME awaited (right only) */
    LINK_UP,         /* carrying frames */
    LINK_SELF,       /* a ring of one host has no links */
} link_state;

/* What the ring wants done with the payload of a DATA frame. */
typedef enum {
    LINK_RECV_INTO,  /* read it into *dst */
    LINK_RECV_PAUSE, /* not now: stop reading until links_resume() */
    LINK_RECV_SKIP,  /* stale: read and discard it */
} link_recv;

typedef struct {
    void (*on_up)(void *data, link_side side);
    void (*on_down)(void *data, link_side side, const char *why);
    /* A DATA header arrived on the left link. Returns a link_recv, or a
     * negative RINGD_E* code with a message in why: the link is then closed. */
    int (*on_data)(void *data, const frame_data *d, uint8_t **dst, char *why, size_t whylen);
    /* The payload of the frame accepted with LINK_RECV_INTO is in place. */
    void (*on_payload)(void *data, const frame_data *d);
    /* A frame sent with links_send_data(..., ctx) left this process (or was
     * cancelled: status < 0); its payload buffer is free again. */
    void (*on_sent)(void *data, void *ctx, int status);
    /* An ABORT arrived on the left link (already checked against its epoch). */
    void (*on_abort)(void *data, const frame_abort *a);
} links_callbacks;

typedef struct links links;

/* Creates the links of host `me` of c. Nothing happens until links_start().
 * c must outlive the links. */
int links_new(links **out, uv_loop_t *loop, const cfg *c, int me, const links_callbacks *cb,
              void *data);

/* Listens on this host's address and starts connecting to the right
 * neighbour. Returns 0 or a negative code with a message in err (for
 * example "cannot listen on 127.0.0.1:7701: address already in use"). */
int links_start(links *l, char *err, size_t errlen);

/* Closes every connection and handle; done(data) runs once all are closed and
 * l has been freed. */
void links_close(links *l, void (*done)(void *data), void *data);

/* Drops both connections (after a failed collective left the streams in an
 * unknown place); they re-form by themselves. */
void links_reset(links *l, const char *why);

/* Sends one DATA frame on the right link, stamped with the link's epoch. The
 * payload is not copied: it must stay valid and unchanged until on_sent.
 * Returns 0 or RINGD_ERING. DATA frames of another epoch than their link's
 * are dropped on receipt, never offered to the ring. */
int links_send_data(links *l, const frame_data *d, const uint8_t *payload, void *ctx);

/* Sends an ABORT on the right link, behind the frames already queued (so a
 * neighbour sees a collective's data before its abort). Returns 0 or
 * RINGD_ERING. */
int links_send_abort(links *l, const frame_abort *a);

/* Re-offers a paused DATA frame to on_data, from the loop (not from within
 * this call). */
void links_resume(links *l);

link_state links_state(const links *l, link_side side);
/* This host's ring epoch: bumped whenever a link that was up goes down,
 * and raised to the neighbour's at a handshake when that one is higher. */
uint32_t links_epoch(const links *l);
const char *links_state_name(link_state s);

/* Why the link on side is not up ("connection refused", ...), or "". */
const char *links_last_error(const links *l, link_side side);

typedef struct {
    uint64_t bytes_in, bytes_out; /* payload bytes */
    uint64_t reconnects;          /* right link re-established after being up */
} links_stats;

void links_get_stats(const links *l, links_stats *out);

#endif /* RINGD_LINKS_H */
