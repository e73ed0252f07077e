/*
 * links.h - the two links of a ring host, and the ring's epoch.
 *
 * This host connects to its right neighbour, and only sends on that link;
 * it accepts its left neighbour, and only receives on that one (peer.h,
 * listener.h). This module knows which link is which, routes what arrives
 * to the engine, and keeps the ring's epoch (epoch.h): a link that breaks
 * starts a BREAK that travels the ring from there, so every host fails its
 * collectives at once, not at their deadlines; a link that forms starts a
 * FORM, and once it has gone round and been confirmed the ring is ready.
 * DATA and ABORT frames of another epoch are dropped here.
 */
#ifndef RINGD_LINKS_H
#define RINGD_LINKS_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "auth.h"
#include "config/config.h"
#include "epoch.h"
#include "net.h"
#include "peer.h"
#include "proto/frame.h"

typedef enum { LINK_LEFT = 0, LINK_RIGHT = 1 } link_side;

typedef enum {
    LINKS_BREAK, /* a link broke: every collective submitted fails at once */
    LINKS_RESET, /* a collective failed or a rank left: every one not confirmed fails; how,
                    on_settle() says */
    LINKS_FORM,  /* a link formed or a host's ranks are back: the running ones fail */
} links_change;

/* How a confirmation leaves this host (links_callbacks.on_settle). */
typedef enum {
    LINKS_WAITING, /* settled, and the ring waits for what confirm->waiting says */
    LINKS_READY,   /* settled, and the ring is ready in confirm->epoch */
    LINKS_PASSED,  /* a confirmation this host missed: the ring was ready in confirm->epoch,
                      which has ended since; another settles it next */
    LINKS_BELOW,   /* a ring of fewer than min_hosts hosts: it waits, and settles nothing
                      (the hosts it closed over may have settled it otherwise) */
} links_settled;

typedef struct {
    uint32_t epoch;
    links_change kind;
    int gone;           /* a rank left (a RESET): why names it */
    int code;           /* RINGD_E* the failed collectives get */
    const char *why;    /* for the log and the collectives failed here now */
    const char *reason; /* the failure the ring reports, as the verdict words it */
} links_event;

typedef struct {
    void (*on_up)(void *data, link_side side);
    void (*on_down)(void *data, link_side side, const char *why);
    /* A DATA header of the current epoch arrived on the left link. Returns
     * a reader_verdict, or a negative RINGD_E* code with a message in why:
     * the link is then closed. */
    int (*on_data)(void *data, const frame_data *d, uint8_t **dst, char *why, size_t whylen);
    /* The payload of the frame accepted with READER_INTO is in place
     * (status 0), or arrived with a bad checksum (RINGD_ECORRUPT, message in
     * why): the stream is intact, the bytes are not. */
    void (*on_payload)(void *data, const frame_data *d, int status, const char *why);
    /* A frame sent with links_send_data(..., ctx) left this process (or was
     * cancelled: status < 0); its payload buffer is free again. */
    void (*on_sent)(void *data, void *ctx, int status);
    /* The ring moved to a new epoch and is not ready (ev says how). */
    void (*on_epoch)(void *data, const links_event *ev);
    /* A lap came back round: confirm settles the epoch the ring was last
     * ready in (prev_epoch: collectives below done succeeded on every host,
     * all others failed, with the failure it names); how says what now. */
    void (*on_settle)(void *data, const frame_epoch *confirm, links_settled how);
    /* A COMMIT of the current epoch arrived while ready. */
    void (*on_commit)(void *data, const frame_commit *c);
    /* A REPORT arrived (a part of some host's summary; its layout checked,
     * what it says is the receiver's to check). */
    void (*on_report)(void *data, const summary_part *p);
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
 * neighbour. Returns 0 or a negative code with a message in err. */
int links_start(links *l, char *err, size_t errlen);

/* Closes every connection and handle; done(data) runs once all are closed
 * and l has been freed. */
void links_close(links *l, void (*done)(void *data), void *data);

/* Drops both links (after a failed collective left the streams in an
 * unknown place); they re-form by themselves. */
void links_reset(links *l, const char *why);

/* Sends one DATA frame on the right link, stamped with the epoch. The
 * payload is not copied: it must stay valid and unchanged until on_sent.
 * Returns 0 or RINGD_ERING. */
int links_send_data(links *l, const frame_data *d, const uint8_t *payload, void *ctx);

/* Sends a COMMIT, stamped here with the epoch, on the right link behind the
 * frames already queued. Returns 0 or RINGD_ERING. */
int links_send_commit(links *l, frame_commit *c);

/* Sends a REPORT (part p of a host's summary) on the right link behind the
 * frames already queued. Returns 0 or RINGD_ERING (the link is not up). */
int links_send_report(links *l, const summary_part *p);

/* A collective of this host failed (f), or one of its ranks left (gone): a
 * RESET goes round the ring, or, with the right link down, this host alone
 * moves on to a new epoch. */
void links_fail(links *l, const epoch_failure *f, int gone);

/* This host's ranks are all there (complete), or one left (missing says
 * which); once all are back, a FORM goes round. */
void links_members(links *l, int complete, const char *missing);

/* Collectives this host has completed in the current (ready) epoch. */
void links_completed(links *l, uint64_t done);
/* Collectives of the current epoch every host of the ring completed, as
 * COMMITs told this host: what a lap that closes over a host confirms. */
void links_confirmed(links *l, uint64_t least);
/* Collectives some rank of this host submitted in the current epoch. */
void links_submitted(links *l, uint64_t top);

/* What the ring waits for: the ranks the last confirmation named as not
 * connected, until one says the ring is ready; "" if none. */
const char *links_waiting(const links *l);

/* Whether what the ring waits for is hosts, which nothing on this host can
 * bring: the last confirmation had fewer than min_hosts, or this host left
 * (links_leave()). links_waiting() says which. */
int links_short_of_hosts(const links *l);

/* Re-offers a paused DATA frame to on_data, from the loop. */
void links_resume(links *l);

link_state links_state(const links *l, link_side side);
/* The host at the other end of the link on side (elastic: it changes). */
int links_host(const links *l, link_side side);
/* Whether collectives may run: the ring is whole under the current epoch. */
int links_ready(const links *l);
/* This host's ring epoch: a new one whenever a link breaks or forms; the
 * largest seen wins. */
uint32_t links_epoch(const links *l);

/* Why the link on side is not up ("connection refused", ...), or "". */
const char *links_last_error(const links *l, link_side side);
/* Whether the link on side is down because its last attempt was refused
 * (a configuration problem: a wrong key, cluster or address). */
int links_refused(const links *l, link_side side);
/* uv_now() when the link on side last changed state. */
uint64_t links_since(const links *l, link_side side);

void links_get_stats(const links *l, net_stats *out);

/* ---- the elastic ring (evict_after) ----
 *
 * The right link goes to the next host not closed over: one unreachable
 * for evict_after, or that said it leaves, is closed over, and the next
 * tried. The left link comes from the nearest host that connects: one
 * nearer than the current left neighbour replaces it (a host back). Laps
 * collect the hosts they pass, so a confirmation is exactly the ring; one
 * of fewer than min_hosts does not run (links.c, judge_members()). */

typedef struct {
    int elastic;
    int n_hosts, min_hosts;
    uint64_t members;       /* bit h: host h is in the ring, as last confirmed */
    uint32_t members_epoch; /* when that membership was agreed; 0: never resized */
    uint64_t resizes;
    const char *resize_why;              /* the last resize, "" */
    int left_ring;                       /* links_leave() */
    uint64_t out_since[CFG_MAX_ELASTIC]; /* uv_now() when host h went out; 0: in */
} links_membership;

void links_get_membership(const links *l, links_membership *out);
/* Whether this host has left the ring (links_leave(), until links_join()). */
int links_left(const links *l);
/* The last resize, as the ring worded it ("" if none). */
const char *links_resize_why(const links *l);
/* The words of the resize that agreed the membership of members_epoch, if
 * this host saw its confirmation, else NULL. */
const char *links_resize_why_of(const links *l, uint32_t members_epoch);

/* This host leaves the ring (ringctl leave, or the daemon stops): a LEAVE
 * tells the others to close over it at once, then the links close and
 * stay closed until links_join(). RINGD_EINVAL if the ring is not elastic. */
int links_leave(links *l, const char *why);
int links_join(links *l);

#endif /* RINGD_LINKS_H */
