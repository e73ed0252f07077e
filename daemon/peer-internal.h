/*
 * peer-internal.h - what the files of a peer share: peer.c (the link's
 * life: connecting, accepting, up and down, closing), peer_send.c (frames
 * out: DATA frames batched into one write, control frames behind them),
 * peer_recv.c (frames in: the reader's callbacks) and peer_protect.c (what
 * protects the frames: a CRC32C on DATA frames, or on a keyed link a tag on
 * every frame and encrypted payloads).
 */
#ifndef RINGD_PEER_INTERNAL_H
#define RINGD_PEER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "auth.h"
#include "conn.h"
#include "log.h"
#include "net.h"
#include "peer.h"

#define SEALED_POOL 64 /* encrypted payload buffers kept for reuse */

/* An encrypted copy of a payload, kept in the peer's pool between uses:
 * allocating and freeing a segment's worth each time costs more than the
 * cipher (glibc returns it to the kernel and faults it back in). */
typedef struct {
    size_t cap;
    uint8_t bytes[];
} sealed_buf;

/* DATA frames queued in this turn of the loop (peer_send.c). */
typedef struct batch batch;

struct peer {
    net_env env;
    const peer_ops *ops;
    void *owner;
    lifetime lt; /* its handles and connections; the last frees it */
    int host;
    peer_role role;
    unsigned accepts;
    const char *what; /* "right neighbour", "star root", ... */
    link_state state;
    uint64_t since;
    char error[640];
    int refusing, refused; /* the link closes, or closed, as a refusal (peer_refused()) */
    int held;              /* peer_hold(): no connection, no retry */
    int cut;               /* peer_set_cut(): HELLOs say FRAME_FLAG_CUT */
    uint64_t ended;        /* connections closed, attempts or links (peer_ended()) */
    char address[64];
    conn *c; /* stream 0 of the link, NULL when down */
    int closing;

    /* Connector. */
    uv_timer_t retry; /* backoff before the next attempt */
    uv_getaddrinfo_t gai;
    int resolving;
    uint32_t backoff_ms;
    struct sockaddr_storage addr; /* where stream 0 went */
    int n_up;                     /* streams accepted */
    int was_up;
    log_ratelimit connect_rl, refuse_rl;

    /* Writing. */
    uv_idle_t flush; /* writes the batch before the loop next waits */
    batch *out;
    uv_timer_t resume;

    /* Keyed links: the frame keys of the link up now. */
    auth_frames fr;
    int keyed;
    sealed_buf *pool[SEALED_POOL];
    int n_pool;
    frame_data last_data; /* keyed: the last DATA frame whose header checked out */
    int have_last;
};

/* peer.c: the name of p's host in the configuration. */
const char *peer_host_name(const peer *p);
/* peer.c: the connector's WELCOME on stream c (peer_recv.c hands it over). */
void peer_handle_welcome(peer *p, conn *c, const frame_header *hdr, const uint8_t *body);

/* peer_send.c: hands the queued DATA frames to libuv now; with the link
 * down, reports them failed. */
void peer_flush(peer *p);

/* peer_recv.c: the reader's callbacks of every stream of a link. */
extern const reader_ops peer_link_ops;

/* peer_protect.c. The CRC32C of a DATA frame: its payload, then its fixed
 * part (fixed) with the crc field zero. */
uint32_t peer_data_crc(const uint8_t *payload, uint32_t len, const uint8_t *fixed);
/* With a cluster key, the link whose stream 0 is c (its handshake done)
 * gets its frame keys, and c's reader checks every frame from the next on.
 * Returns 0 or RINGD_EIO / RINGD_ENOMEM. */
int peer_key_link(peer *p, conn *c, auth_role self);
/* Keyed: marks the encoded frame at f (n bytes, header first) as tagged
 * and appends its tag; returns the new length. */
size_t peer_seal_head(peer *p, uint8_t *f, size_t n);
/* A buffer for an encrypted payload of len bytes, NULL when out of memory;
 * it goes back with peer_give_sealed() (NULL is fine). */
sealed_buf *peer_take_sealed(peer *p, size_t len);
void peer_give_sealed(peer *p, sealed_buf *s);
/* "authentication failed on the link from left neighbour b (10.0.0.2:7701): ..." */
void peer_name_auth_failure(peer *p, conn *c, const char *why, char *out, size_t len);
/* Frees the frame keys and the pool of p. */
void peer_protect_free(peer *p);

#endif /* RINGD_PEER_INTERNAL_H */
