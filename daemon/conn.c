/*
 * conn.c - one TCP connection between two daemons; see conn.h.
 *
 * Reading: libuv's alloc callback asks the reader where the next bytes go
 * (the header, the body, a payload in its final place, or read-ahead), never
 * past the end of the current stripe; the read callback hands them over.
 * When the reader pauses (a DATA frame the owner cannot take yet) reading
 * stops, and TCP holds the sender back until conn_resume().
 */
#include "conn.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "net.h"
#include "ringd.h"

void lifetime_hold(lifetime *lt)
{
    lt->held++;
}

void lifetime_release(lifetime *lt)
{
    if (--lt->held == 0 && lt->closing) lt->done(lt->data);
}

void lifetime_end(lifetime *lt, void (*done)(void *data), void *data)
{
    lt->closing = 1;
    lt->done = done;
    lt->data = data;
    lt->held++;
    lifetime_release(lt);
}

void lifetime_handle_closed(uv_handle_t *h)
{
    lifetime_release(h->data);
}

int conn_error(int uv_err)
{
    switch (uv_err) {
    case 0:
        return 0;
    case UV_ENOMEM:
    case UV_ENOBUFS:
        return RINGD_ENOMEM;
    case UV_ENOTCONN:
    case UV_EPIPE:
    case UV_ECONNRESET:
    case UV_ECONNREFUSED:
    case UV_ECANCELED:
    case UV_EOF:
    case UV_ETIMEDOUT:
        return RINGD_ERING;
    default:
        return RINGD_EIO;
    }
}

/* ---- lifecycle ---- */

static void on_tcp_closed(uv_handle_t *h)
{
    conn *c = h->data;
    lifetime *lt = c->lt;
    free(c);
    lifetime_release(lt);
}

static void on_timer_closed(uv_handle_t *h)
{
    conn *c = h->data;
    uv_close((uv_handle_t *)&c->tcp, on_tcp_closed);
}

conn *conn_new(uv_loop_t *loop, lifetime *lt, const reader_ops *ops, void *owner,
               conn_closed_cb closed)
{
    conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->lt = lt;
    c->owner = owner;
    c->closed = closed;
    c->n_streams = 1;
    c->last_read = uv_now(loop);
    reader_init(&c->rd, ops, c, 1);
    uv_tcp_init(loop, &c->tcp);
    uv_timer_init(loop, &c->timer);
    c->tcp.data = c;
    c->timer.data = c;
    lifetime_hold(lt);
    return c;
}

void conn_adopt(conn *c, lifetime *lt, const reader_ops *ops, void *owner, conn_closed_cb closed)
{
    if (c->lt != lt) {
        lifetime *old = c->lt;
        lifetime_hold(lt);
        c->lt = lt;
        lifetime_release(old);
    }
    c->owner = owner;
    c->closed = closed;
    c->rd.ops = ops;
}

void conn_close(conn *c, const char *why)
{
    if (c->closing) return;
    c->closing = 1;
    reader_stop(&c->rd);
    uv_read_stop((uv_stream_t *)&c->tcp);
    uv_timer_stop(&c->timer);
    uv_close((uv_handle_t *)&c->timer, on_timer_closed);
    /* The streams of a link go together. */
    if (c->link) {
        if (c->link->stream[c->index] == c) c->link->stream[c->index] = NULL;
        conn_close(c->link, why);
    }
    for (int k = 1; k < CONN_MAX_STREAMS; k++) {
        conn *s = c->stream[k];
        if (!s || s == c) continue;
        c->stream[k] = NULL;
        conn_close(s, why);
    }
    if (c->closed) c->closed(c->owner, c, why);
}

static void on_deadline(uv_timer_t *t)
{
    conn_close(t->data, "handshake timed out");
}

void conn_deadline(conn *c, uint64_t ms)
{
    uv_timer_start(&c->timer, on_deadline, ms, 0);
}

void conn_clear_deadline(conn *c)
{
    uv_timer_stop(&c->timer);
}

void conn_name_peer(conn *c)
{
    struct sockaddr_storage ss;
    int len = sizeof ss;
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) == 0)
        net_describe_addr((struct sockaddr *)&ss, c->peer, sizeof c->peer);
    else
        memcpy(c->peer, "?", 2);
}

/* ---- reading ---- */

/* The conn whose reader takes the bytes of c's handle. */
static conn *reader_of(conn *c)
{
    return c->feeds && c->link ? c->link : c;
}

static int striped(const conn *c)
{
    return c->read_striped;
}

/* The handle c's reader reads now; NULL while that stream is not attached. */
static uv_stream_t *read_handle(conn *c)
{
    if (!striped(c)) return (uv_stream_t *)&c->tcp;
    return c->stream[c->cur] ? (uv_stream_t *)&c->stream[c->cur]->tcp : NULL;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    conn *c = reader_of(h->data);
    uint8_t *p;
    size_t n;
    /* Never past the end of this stream's stripe: the next bytes of the
     * link are on the next stream. */
    reader_buf(&c->rd, striped(c) ? c->stripe_left : SIZE_MAX, &p, &n);
    *buf = uv_buf_init((char *)p, (unsigned)n);
}

/* The stripe of the stream being read is whole: read the next stream. */
static void next_stream(conn *c)
{
    c->switch_due = 0;
    conn_stop_reading(c);
    c->cur = (c->cur + 1) % c->n_streams;
    c->stripe_left = CONN_STRIPE;
    if (!c->closing && !reader_paused(&c->rd)) conn_start_reading(c);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    conn *self = s->data, *c = reader_of(self);
    if (c->closing || self->closing) return;
    if (nread == UV_ENOBUFS) { /* paused or stopped: nothing to read into */
        uv_read_stop(s);
        return;
    }
    uint64_t now = uv_now(s->loop);
    if (nread > 0 && c->silence_ms && now - c->last_read >= c->silence_ms) {
        /* The heartbeat would have closed this link before these bytes came,
         * had this process run: it was stalled (SIGSTOP, a paused VM), and
         * its neighbours have closed the link and gone on without it. What
         * was sent to it meanwhile (COMMITs) is of a ring that has given up
         * on it: acting on it would answer what the others failed. */
        char why[200];
        snprintf(why, sizeof why,
                 "nothing received for %.1f s (heartbeat_timeout) before these bytes: this "
                 "host was stalled (frozen, paused or starved of CPU)",
                 (double)(now - c->last_read) / 1000);
        conn_close(self, why);
        return;
    }
    c->last_read = now;
    if (nread < 0) {
        conn_close(self, nread == UV_EOF ? "connection closed by peer" : uv_strerror((int)nread));
        return;
    }
    if (striped(c) && (c->stripe_left -= (size_t)nread) == 0) c->switch_due = 1;
    reader_got(&c->rd, (size_t)nread);
    if (c->closing) return;
    if (c->switch_due)
        next_stream(c);
    else if (reader_paused(&c->rd))
        conn_stop_reading(c);
}

void conn_start_reading(conn *c)
{
    uv_stream_t *h = read_handle(c);
    if (!h || c->closing) return; /* that stream attaches later, and starts it */
    int rc = uv_read_start(h, on_alloc, on_read);
    if (rc < 0) conn_close(c, uv_strerror(rc));
}

void conn_stop_reading(conn *c)
{
    uv_stream_t *h = read_handle(c);
    if (h) uv_read_stop(h);
}

void conn_resume(conn *c)
{
    if (c->closing || !reader_paused(&c->rd)) return;
    reader_resume(&c->rd);
    if (c->closing || reader_paused(&c->rd)) return;
    c->last_read = uv_now(c->tcp.loop); /* it was quiet because we held it */
    conn_start_reading(c);
}

void conn_make_link(conn *c, int n, int read_striped)
{
    c->n_streams = n;
    c->stream[0] = c;
    c->read_striped = read_striped;
    c->cur = 0;
    c->stripe_left = CONN_STRIPE;
    c->out_cur = 0;
    c->out_left = CONN_STRIPE;
}

void conn_attach_stream(conn *link, conn *s)
{
    uv_read_stop((uv_stream_t *)&s->tcp);
    s->link = link;
    s->feeds = 1;
    link->stream[s->index] = s;
    /* The reader may be waiting for exactly this stream. */
    if (link->cur == s->index && !reader_paused(&link->rd)) conn_start_reading(link);
}

/* ---- writing ---- */

/* A write split over the connector's streams: done when every part is. */
typedef struct {
    uv_write_t *orig;
    uv_write_cb cb;
    int pending, status;
    uv_write_t part[CONN_MAX_STREAMS];
} striped_write;

static void on_part_done(uv_write_t *req, int status)
{
    striped_write *w = req->data;
    if (status < 0 && w->status == 0) w->status = status;
    if (--w->pending > 0) return;
    w->cb(w->orig, w->status);
    free(w);
}

int conn_write(conn *c, uv_write_t *req, const uv_buf_t *bufs, unsigned n, uv_write_cb cb)
{
    int k = c->n_streams;
    if (k == 1 || c->read_striped) return uv_write(req, (uv_stream_t *)&c->tcp, bufs, n, cb);
    size_t total = 0;
    for (unsigned i = 0; i < n; i++)
        total += bufs[i].len;
    size_t cap = n + total / CONN_STRIPE + 2; /* pieces per stream, at most */
    striped_write *w = calloc(1, sizeof *w);
    uv_buf_t *parts = malloc((size_t)k * cap * sizeof *parts);
    unsigned count[CONN_MAX_STREAMS] = {0};
    if (!w || !parts) {
        free(w);
        free(parts);
        return UV_ENOMEM;
    }
    for (unsigned i = 0; i < n; i++) {
        char *b = bufs[i].base;
        size_t left = bufs[i].len;
        while (left > 0) {
            size_t take = left < c->out_left ? left : c->out_left;
            parts[(size_t)c->out_cur * cap + count[c->out_cur]++] = uv_buf_init(b, (unsigned)take);
            b += take;
            left -= take;
            if ((c->out_left -= take) == 0) {
                c->out_cur = (c->out_cur + 1) % k;
                c->out_left = CONN_STRIPE;
            }
        }
    }
    w->orig = req;
    w->cb = cb;
    int rc = 0;
    w->pending = 1; /* held until every part is issued */
    for (int s = 0; s < k; s++) {
        if (!count[s]) continue;
        w->part[s].data = w;
        w->pending++;
        int r = uv_write(&w->part[s], (uv_stream_t *)&c->stream[s]->tcp, parts + (size_t)s * cap,
                         count[s], on_part_done);
        if (r < 0) {
            w->pending--;
            if (!rc) rc = r;
        }
    }
    free(parts); /* libuv keeps its own copy of the buffer descriptors */
    if (rc < 0) w->status = rc;
    uv_write_t hold = {.data = w};
    on_part_done(&hold, 0); /* releases the hold */
    return 0;
}


typedef struct {
    uv_write_t req;
    conn *c;
    int close_after;
    uint8_t buf[];
} send_req;

static void on_sent(uv_write_t *req, int status)
{
    (void)status; /* a failed connection shows on its reads */
    send_req *s = (send_req *)req;
    if (s->close_after) conn_close(s->c, "refused");
    free(s);
}

int conn_send(conn *c, const uint8_t *frame, size_t n, int close_after)
{
    if (c->closing) return RINGD_ERING;
    send_req *s = malloc(sizeof *s + n);
    if (!s) return RINGD_ENOMEM;
    s->c = c;
    s->close_after = close_after;
    memcpy(s->buf, frame, n);
    uv_buf_t b = uv_buf_init((char *)s->buf, (unsigned)n);
    int rc = uv_write(&s->req, (uv_stream_t *)&c->tcp, &b, 1, on_sent);
    if (rc < 0) {
        free(s);
        return conn_error(rc);
    }
    return 0;
}
