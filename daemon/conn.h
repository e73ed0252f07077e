/*
 * conn.h - one TCP connection between two daemons: its handle, a handshake
 * deadline, and the frames read from it.
 *
 * A link between two hosts is one conn, or K of them (`streams: K`): then
 * the link's byte stream is cut into stripes of CONN_STRIPE bytes that go
 * round its TCP streams in turn, and stream 0's reader reads each stripe from
 * its stream in the same turn, so it sees exactly the bytes one connection
 * would carry (PROTOCOL.md, "Several streams per link"). Only the connector
 * writes striped; the acceptor writes on stream 0, which the connector reads
 * as one stream.
 *
 * Memory: a conn is freed only in its handles' close callbacks, so
 * conn_close() is safe from within the conn's own callbacks. Every conn
 * holds its owner's lifetime (below) until it is freed.
 */
#ifndef RINGD_CONN_H
#define RINGD_CONN_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "handshake.h"
#include "reader.h"

#define CONN_MAX_STREAMS 8
#define CONN_STRIPE (64 << 10) /* bytes of a link on one TCP stream in turn */

/* What keeps an owner (the ring's links, the star) alive while it closes:
 * every handle and connection holds it; the last release runs done(data). */
typedef struct {
    int held;
    int closing;
    void (*done)(void *data);
    void *data;
} lifetime;

void lifetime_hold(lifetime *lt);
void lifetime_release(lifetime *lt);
/* Marks lt closing; done(data) runs at the last release (maybe now). */
void lifetime_end(lifetime *lt, void (*done)(void *data), void *data);
/* A uv close callback for a handle whose data is a lifetime. */
void lifetime_handle_closed(uv_handle_t *h);

typedef struct conn conn;

/* Called once, from conn_close(), before the conn's handles close. */
typedef void (*conn_closed_cb)(void *owner, conn *c, const char *why);

struct conn {
    uv_tcp_t tcp;
    uv_timer_t timer; /* handshake deadline */
    lifetime *lt;
    void *owner;
    conn_closed_cb closed;
    int closing;
    char peer[64];      /* printable remote address */
    uint64_t last_read; /* uv_now() of the last bytes read: heartbeat_timeout */
    uint64_t silence_ms; /* a link: silent this long, it is dead (heartbeat_timeout); 0: none */
    reader rd;          /* stream 0 (or a lone conn): the frames read */
    hs_state hs;        /* its handshake */
    int welcomed;       /* connector: the acceptor accepted it */
    uv_connect_t connect_req;

    /* Streams of a link. Stream k > 0 has `link`, its stream 0; once it
     * `feeds` the link, its bytes go to the link's reader. Stream 0 lists
     * every stream and reads stripe by stripe from stream[cur]. */
    conn *link;
    conn *stream[CONN_MAX_STREAMS];
    int index, n_streams; /* this stream; streams of the link (1: not striped) */
    int feeds;
    int read_striped;   /* stream 0 of an accepted link: reads stripe by stripe */
    int cur;            /* stream 0: the stream being read */
    size_t stripe_left; /* and its bytes still to read in this stripe */
    int switch_due;     /* the stripe ended: move to the next stream */
    int out_cur;        /* stream 0 of a connector's link: the stream written now */
    size_t out_left;    /* and the bytes left of its stripe */
};

/* A new conn, its TCP handle initialised (to connect, or to accept into),
 * holding lt. Its reader calls ops with the conn itself as their owner
 * argument; c->owner is owner. NULL when out of memory. */
conn *conn_new(uv_loop_t *loop, lifetime *lt, const reader_ops *ops, void *owner,
               conn_closed_cb closed);

/* Hands c to another owner (its handshake is done, a link takes it). */
void conn_adopt(conn *c, lifetime *lt, const reader_ops *ops, void *owner, conn_closed_cb closed);

/* Closes c (idempotent) and, if it is part of a link of several streams, the
 * link's other streams. */
void conn_close(conn *c, const char *why);

/* Closes c unless it has finished its handshake within ms. */
void conn_deadline(conn *c, uint64_t ms);
void conn_clear_deadline(conn *c);

/* Reads frames into c's reader: from c itself, or stripe by stripe from the
 * streams of the link c is stream 0 of. Stops by itself while the reader is
 * paused. */
void conn_start_reading(conn *c);
void conn_stop_reading(conn *c);

/* Offers c's paused DATA frame again and reads on if it was taken. */
void conn_resume(conn *c);

/* Makes c stream 0 of a link of n streams (n > 1); the acceptor's reads
 * them stripe by stripe (read_striped), the connector's only writes so. */
void conn_make_link(conn *c, int n, int read_striped);

/* Attaches stream s (index s->index > 0) to the link of stream 0 `link`,
 * whose reader reads its bytes from now on. */
void conn_attach_stream(conn *link, conn *s);

/* Writes bufs on the link c is stream 0 of: cut into stripes over its
 * streams on a connector's link of several, else on c. req and cb are the
 * caller's, as for uv_write(); the buffers must stay valid until cb. Returns
 * 0 or a libuv error. */
int conn_write(conn *c, uv_write_t *req, const uv_buf_t *bufs, unsigned n, uv_write_cb cb);

/* Writes n bytes of a frame, copied, on c alone; closes c once written if
 * close_after (a refusal). Returns 0 or a RINGD_E* code. */
int conn_send(conn *c, const uint8_t *frame, size_t n, int close_after);

/* The printable address of c's peer into c->peer (after accept). */
void conn_name_peer(conn *c);

/* Maps a libuv error to the RINGD_E* code a caller reports. */
int conn_error(int uv_err);

#endif /* RINGD_CONN_H */
