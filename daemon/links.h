/*
 * links.h - the two TCP links of this host in the ring.
 *
 * This host connects to its right neighbour (and only sends data on that
 * connection) and accepts its left neighbour (and only receives data on that
 * one). The module keeps both up: it resolves, connects and handshakes with
 * capped exponential backoff, validates the left neighbour's HELLO (and, with
 * a cluster key, authenticates both ends), and reads frames straight into the
 * buffers the ring names, so payload bytes are never copied on the way in or
 * out.
 *
 * It also keeps the ring's epoch. A ring is "ready" when an EPOCH FORM frame
 * sent by the host whose right link came up last has gone all the way round
 * and been confirmed; collectives run only then, numbered from 0 in each
 * epoch. A link that breaks (closed, reset, or silent for heartbeat_timeout:
 * PINGs flow both ways on quiet links) starts a BREAK that travels the ring
 * from there, so every host fails its collectives at once, not at their
 * deadlines. Frames of an older epoch are dropped.
 */
#ifndef RINGD_LINKS_H
#define RINGD_LINKS_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "auth.h"
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
    /* The payload of the frame accepted with LINK_RECV_INTO is in place
     * (status 0), or arrived with a bad checksum (RINGD_ECORRUPT, message in
     * why): the stream is intact, the bytes are not. */
    void (*on_payload)(void *data, const frame_data *d, int status, const char *why);
    /* A frame sent with links_send_data(..., ctx) left this process (or was
     * cancelled: status < 0); its payload buffer is free again. */
    void (*on_sent)(void *data, void *ctx, int status);
    /* An ABORT arrived on the left link (already checked against its epoch). */
    void (*on_abort)(void *data, const frame_abort *a);
    /* The ring moved to a new epoch and is not ready. broke: a link broke,
     * so every collective submitted until now fails with (code, why);
     * otherwise the ring is re-forming: running collectives fail, queued
     * ones wait. */
    void (*on_epoch)(void *data, uint32_t epoch, int broke, int code, const char *why);
    /* The ring is whole and confirmed under the current epoch. */
    void (*on_ready)(void *data);
} links_callbacks;

typedef struct links links;

/* Creates the links of host `me` of c. Nothing happens until links_start().
 * c must outlive the links. */
int links_new(links **out, uv_loop_t *loop, const cfg *c, int me, const links_callbacks *cb,
              void *data);

/* Requires every link to prove it holds key (copied). Call before
 * links_start(); without it the links are not authenticated. */
void links_set_key(links *l, const auth_key *key);

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
/* Whether collectives may run: the ring is whole under the current epoch. */
int links_ready(const links *l);
/* This host's ring epoch: a new one whenever a link breaks or forms; the
 * largest seen wins. */
uint32_t links_epoch(const links *l);
const char *links_state_name(link_state s);

/* Why the link on side is not up ("connection refused", ...), or "". */
const char *links_last_error(const links *l, link_side side);

typedef struct {
    uint64_t bytes_in, bytes_out; /* payload bytes */
    uint64_t reconnects;          /* right link re-established after being up */
    uint64_t breaks;              /* links lost (either side) */
    uint64_t auth_failures;       /* peers refused for a wrong or missing key */
    uint64_t checksum_errors;     /* DATA payloads with a bad CRC32C */
} links_stats;

void links_get_stats(const links *l, links_stats *out);

#endif /* RINGD_LINKS_H */
