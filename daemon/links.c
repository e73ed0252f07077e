/*
 * links.c - the ring's TCP links: connect right, accept left, read frames.
 *
 * Each connection is a `conn`: a TCP handle, a state, and a frame reader.
 * The reader never buffers: libuv's alloc callback hands out exactly the bytes
 * still missing from the current piece (the 12-byte header, the body, or the
 * payload, which goes straight to where the ring wants it), so every byte is
 * read once into its final place. Reading is paused while the ring is not
 * ready for a frame; TCP flow control then holds the sender back.
 *
 * The right link is ours to keep up: resolve, connect, HELLO, WELCOME (and
 * AUTH with a cluster key), with capped exponential backoff between attempts.
 * The left link is whoever connects to our port with a valid HELLO (and
 * answers our challenge); a newer valid one replaces it, and half-open
 * strangers are dropped after connect_timeout.
 *
 * Epochs. Every host that sees a link form or break starts an EPOCH frame
 * with a new epoch, unique to it (epoch % n == its position) and larger than
 * any it has seen; hosts adopt larger epochs and pass them on. A BREAK starts
 * at the host downstream of the broken link (it lost its left link; the host
 * upstream lost its right one and knows already) and reaches every host up
 * to the next break. A FORM starts at the host whose right link came up; if
 * it comes back from the left, every link carried it, and the CONFIRM that
 * follows tells each host the ring is ready. Frames travel one way, in
 * order, so a host has always adopted an epoch before the first DATA frame
 * of it arrives.
 */
#include "links.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "proto/bytes.h"
#include "log.h"
#include "net.h"
#include "ringd.h"

#define MAX_PENDING 16       /* unauthenticated connections at once */
#define SKIP_BUF (64 << 10)  /* sink for discarded payloads */
#define AHEAD_CAP (16 << 10) /* read-ahead while frames are small */
#define SMALL_PAYLOAD (8 << 10)

typedef enum { RD_HEADER, RD_BODY, RD_PAYLOAD, RD_SKIP, RD_PAUSED } rd_state;

typedef enum {
    CONN_PENDING, /* accepted, HELLO (or AUTH) not yet validated */
    CONN_LEFT,    /* the left link (its stream 0) */
    CONN_RIGHT,   /* the right link (its stream 0; any state from connecting to up) */
    CONN_STREAM,  /* another TCP stream of a link (streams > 1): see the top */
} conn_role;

#define MAX_STREAMS 8
#define STRIPE_BYTES (64 << 10) /* bytes of a link's stream on one TCP stream in turn */

typedef struct conn {
    uv_tcp_t tcp;
    uv_timer_t timer; /* handshake deadline */
    links *owner;
    conn_role role;
    int closing;
    int refusing;       /* WELCOME with an error is being sent; close after it */
    struct conn *next;  /* in owner->pending */
    char peer[64];      /* printable remote address */
    uint64_t last_read; /* uv_now() of the last bytes read: heartbeat_timeout */

    /* Streams of a link (streams > 1). The link's byte stream goes round
     * its TCP streams in stripes of STRIPE_BYTES; the left link's reader
     * reads stripe by stripe from stream[cur], so frames keep their order.
     * A CONN_STREAM has `link`, its stream 0; once attached, its bytes are
     * read by that conn's reader. */
    struct conn *link;
    struct conn *stream[MAX_STREAMS]; /* stream 0: the conn itself */
    int index, n_up;                  /* this conn's stream; streams attached */
    int cur;                          /* the stream being read */
    size_t stripe_left;               /* its bytes still to read in this stripe */
    int switch_due;                   /* the stripe ended: move to the next stream */
    int feeds_link;                   /* left link's stream: its bytes go to link's reader */
    int welcomed;                     /* right link's stream: its handshake is done */
    uint64_t session;                 /* the same on all streams of one link */
    uv_connect_t connect_req;         /* right link's streams 1.. */

    /* The challenge-response, while it runs. */
    int awaiting_auth; /* acceptor: WELCOME sent, AUTH expected */
    uint8_t my_nonce[FRAME_NONCE_SIZE], peer_nonce[FRAME_NONCE_SIZE];
    uint32_t hello_epoch, welcome_epoch;
    char claimed[FRAME_MAX_NAME + 1]; /* the name in the peer's HELLO */

    rd_state rd;
    size_t got, need;
    uint8_t hdr_buf[FRAME_HEADER_SIZE];
    frame_header hdr;
    uint8_t body[FRAME_MAX_CONTROL_BODY];
    frame_data data; /* the DATA frame being read */
    uint8_t *dst;

    /* While frames are small, whole runs of them are read at once into
     * `ahead` and handed to the reader from there (a copy of a few bytes is
     * cheaper than three reads per frame). A large payload is read straight
     * into its buffer, as always. */
    int small;      /* the last DATA payload was small */
    int into_ahead; /* the read in progress goes to ahead */
    size_t ahead_pos, ahead_len;
    uint8_t ahead[AHEAD_CAP];
} conn;

/* A write request of a control frame, allocated together with the frame. */
typedef struct {
    uv_write_t req;
    uint8_t buf[];
} send_req;

#define CONTROL_CAP (FRAME_HEADER_SIZE + FRAME_MAX_CONTROL_BODY)
#define DATA_CAP (FRAME_HEADER_SIZE + FRAME_DATA_HEADER_SIZE)
#define BATCH_MAX 64 /* DATA frames in one write */

/* DATA frames queued during one turn of the loop, written together: one
 * writev for a burst of small segments instead of one each. */
typedef struct {
    uv_write_t req;
    links *owner;
    int n;
    uv_buf_t bufs[2 * BATCH_MAX];
    void *ctx[BATCH_MAX];
    uint8_t hdr[BATCH_MAX][DATA_CAP];
} batch;

struct links {
    uv_loop_t *loop;
    const cfg *cfg;
    int me, n, left, right;
    links_callbacks cb;
    void *data;

    uv_tcp_t listener;
    uv_timer_t retry;     /* backoff before the next connect attempt */
    uv_timer_t resume;    /* deferred links_resume() */
    uv_idle_t flush;      /* writes the batch before the loop next waits for events */
    uv_timer_t heartbeat; /* PINGs out, silent links closed */
    batch *out;           /* DATA frames not yet handed to libuv */
    uv_getaddrinfo_t gai;
    conn *resolving; /* the right conn whose address is being resolved */
    uv_connect_t connect_req;
    int listening; /* listener initialised */
    uint32_t backoff_ms;

    conn *l; /* left link, NULL when down */
    conn *r; /* right link, NULL when down */
    link_state r_state;
    conn *pending;
    int n_pending;

    int streams;                        /* TCP streams per link (config streams) */
    int out_cur;                        /* the right link's stream written to now */
    size_t out_left;                    /* and the bytes left of its stripe */
    struct sockaddr_storage right_addr; /* where the right link's stream 0 went */
    uint32_t epoch;                     /* the ring's: the largest seen */
    int ready;                          /* the ring is whole under epoch: collectives may run */
    int has_key;
    auth_key key;
    char left_error[256], right_error[256];
    log_ratelimit connect_rl; /* the right link's failures to connect */
    log_ratelimit refuse_rl;  /* refusals, either side: a misconfigured peer retries */
    log_ratelimit drop_rl;    /* strangers dropped before their handshake */
    int was_up;               /* the right link has been up before */
    links_stats stats;

    int closing;
    int open_handles; /* handles, connections and a resolution that keep l alive */
    void (*done)(void *);
    void *done_data;
    uint8_t skip[SKIP_BUF];
};

#define REFUSAL_LOG_MS 60000

static void start_connect(links *l);

/* Logs a line that a misconfigured or hostile peer could repeat for ever:
 * at `level` at most once per REFUSAL_LOG_MS (saying how many were not),
 * at debug otherwise. */
static void log_limited(links *l, log_ratelimit *rl, log_level_e level, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void log_limited(links *l, log_ratelimit *rl, log_level_e level, const char *fmt, ...)
{
    char line[1024], note[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    uint32_t suppressed = 0;
    if (log_ratelimit_ok(rl, uv_now(l->loop), REFUSAL_LOG_MS, &suppressed))
        log_at(level, "%s%s", line,
               log_repeated(note, sizeof note, suppressed, REFUSAL_LOG_MS / 1000));
    else
        log_debug("%s", line);
}
static void conn_close(conn *c, const char *why);
static void start_reading(conn *c);
static void stop_reading(conn *c);
static void drain_ahead(conn *c);

/* ---- small helpers ---- */

/* Drops one of the things (handles, connections, a pending resolution) that
 * keep l alive while closing; the last one frees it. */
static void release(links *l)
{
    if (--l->open_handles == 0 && l->closing) {
        void (*done)(void *) = l->done;
        void *data = l->done_data;
        free(l);
        if (done) done(data);
    }
}

static void handle_closed(uv_handle_t *h)
{
    release(h->data);
}

static void close_handle(links *l, uv_handle_t *h)
{
    h->data = l;
    uv_close(h, handle_closed);
}

static const char *side_name(const links *l, link_side side)
{
    return l->cfg->hosts[side == LINK_LEFT ? l->left : l->right].name;
}

/* ---- sending ---- */

static void on_write_done(uv_write_t *req, int status)
{
    (void)status; /* a failed link shows on its reads */
    free(req);
}

/* Sends a control frame already encoded in s->buf (n bytes). */
static int send_control(conn *c, send_req *s, int n, uv_write_cb cb)
{
    uv_buf_t b = uv_buf_init((char *)s->buf, (unsigned)n);
    int rc = uv_write(&s->req, (uv_stream_t *)&c->tcp, &b, 1, cb ? cb : on_write_done);
    if (rc < 0) free(s);
    return rc;
}

/* A write of the right link split over its streams: done when every part is. */
typedef struct {
    uv_write_t *orig;
    uv_write_cb cb;
    int pending, status;
    uv_write_t part[MAX_STREAMS];
} striped_write;

static void on_part_done(uv_write_t *req, int status)
{
    striped_write *w = req->data;
    if (status < 0 && w->status == 0) w->status = status;
    if (--w->pending > 0) return;
    w->cb(w->orig, w->status);
    free(w);
}

/* Writes bufs on the right link: with one stream as one uv_write, else cut
 * at stripe boundaries and written to each stream in turn. req and cb are
 * the caller's, as for uv_write(); the buffers must stay valid until cb. */
static int right_write(links *l, uv_write_t *req, const uv_buf_t *bufs, unsigned n, uv_write_cb cb)
{
    if (!l->r || l->r_state != LINK_UP) return UV_ENOTCONN;
    int k = l->streams;
    if (k == 1) return uv_write(req, (uv_stream_t *)&l->r->tcp, bufs, n, cb);
    size_t total = 0;
    for (unsigned i = 0; i < n; i++)
        total += bufs[i].len;
    size_t cap = n + total / STRIPE_BYTES + 2; /* pieces per stream, at most */
    striped_write *w = calloc(1, sizeof *w);
    uv_buf_t *parts = malloc((size_t)k * cap * sizeof *parts);
    unsigned count[MAX_STREAMS] = {0};
    if (!w || !parts) {
        free(w);
        free(parts);
        return UV_ENOMEM;
    }
    for (unsigned i = 0; i < n; i++) {
        char *p = bufs[i].base;
        size_t left = bufs[i].len;
        while (left > 0) {
            size_t take = left < l->out_left ? left : l->out_left;
            parts[(size_t)l->out_cur * cap + count[l->out_cur]++] = uv_buf_init(p, (unsigned)take);
            p += take;
            left -= take;
            if ((l->out_left -= take) == 0) {
                l->out_cur = (l->out_cur + 1) % k;
                l->out_left = STRIPE_BYTES;
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
        int r = uv_write(&w->part[s], (uv_stream_t *)&l->r->stream[s]->tcp, parts + (size_t)s * cap,
                         count[s], on_part_done);
        if (r < 0) {
            w->pending--;
            if (!rc) rc = r;
        }
    }
    free(parts); /* libuv keeps its own copy of the buffer descriptors */
    if (rc < 0) w->status = rc;
    uv_write_t dummy = {.data = w};
    on_part_done(&dummy, 0); /* releases the hold */
    return 0;
}

/* Sends a control frame in s->buf (n bytes) on the right link, in order with
 * the DATA frames. */
static int send_right(links *l, send_req *s, int n)
{
    uv_buf_t b = uv_buf_init((char *)s->buf, (unsigned)n);
    int rc = right_write(l, &s->req, &b, 1, on_write_done);
    if (rc < 0) free(s);
    return rc;
}

static void on_batch_done(uv_write_t *req, int status)
{
    batch *b = (batch *)req;
    links *l = b->owner;
    for (int i = 0; i < b->n; i++)
        l->cb.on_sent(l->data, b->ctx[i], status < 0 ? RINGD_ERING : 0);
    free(b);
}

/* Hands the batch to libuv, behind whatever it already writes. */
static void flush_batch(links *l)
{
    batch *b = l->out;
    if (!b) return;
    l->out = NULL;
    uv_idle_stop(&l->flush);
    int rc = right_write(l, &b->req, b->bufs, (unsigned)(2 * b->n), on_batch_done);
    if (rc < 0) on_batch_done(&b->req, rc);
}

static void on_flush(uv_idle_t *h)
{
    flush_batch(h->data);
}

/* The CRC32C of a DATA frame: its payload, then its fixed part with the crc
 * field zero, so a flipped bit in wsum or offset is caught too. */
static uint32_t data_crc(const uint8_t *payload, uint32_t len, const uint8_t *fixed)
{
    uint8_t copy[FRAME_DATA_HEADER_SIZE];
    memcpy(copy, fixed, sizeof copy);
    memset(copy + FRAME_DATA_CRC_OFFSET, 0, 4);
    return crc32c(crc32c(0, payload, len), copy, sizeof copy);
}

int links_send_data(links *l, const frame_data *d, const uint8_t *payload, void *ctx)
{
    if (!l->r || l->r_state != LINK_UP) return RINGD_ERING;
    if (!l->out) {
        l->out = malloc(sizeof *l->out);
        if (!l->out) return RINGD_ENOMEM;
        l->out->owner = l;
        l->out->n = 0;
        uv_idle_start(&l->flush, on_flush);
    }
    batch *b = l->out;
    int i = b->n++;
    frame_data stamped = *d;
    stamped.epoch = l->epoch;
    stamped.has_crc = l->cfg->checksum;
    stamped.crc = 0;
    int n = frame_encode_data(b->hdr[i], DATA_CAP, &stamped);
    if (stamped.has_crc)
        put_u32(b->hdr[i] + FRAME_HEADER_SIZE + FRAME_DATA_CRC_OFFSET,
                data_crc(payload, d->length, b->hdr[i] + FRAME_HEADER_SIZE));
    b->bufs[2 * i] = uv_buf_init((char *)b->hdr[i], (unsigned)n);
    b->bufs[2 * i + 1] = uv_buf_init((char *)payload, d->length);
    b->ctx[i] = ctx;
    l->stats.bytes_out += d->length;
    if (b->n == BATCH_MAX) flush_batch(l);
    return 0;
}

int links_send_abort(links *l, const frame_abort *a)
{
    if (!l->r || l->r_state != LINK_UP) return RINGD_ERING;
    send_req *s = malloc(sizeof *s + CONTROL_CAP);
    if (!s) return RINGD_ENOMEM;
    frame_abort stamped = *a;
    stamped.epoch = l->epoch;
    int n = frame_encode_abort(s->buf, CONTROL_CAP, &stamped);
    flush_batch(l); /* the abort goes after the data frames already queued */
    if (n < 0) {
        free(s);
        return RINGD_EINVAL;
    }
    return send_right(l, s, n) < 0 ? RINGD_ERING : 0;
}

static int send_ping(conn *c)
{
    links *l = c->owner;
    send_req *s = malloc(sizeof *s + FRAME_HEADER_SIZE);
    if (!s) return RINGD_ENOMEM;
    int n = frame_encode_ping(s->buf, FRAME_HEADER_SIZE);
    if (c == l->r) {
        flush_batch(l);
        return send_right(l, s, n) < 0 ? RINGD_ERING : 0;
    }
    return send_control(c, s, n, NULL) < 0 ? RINGD_ERING : 0;
}

/* Sends an EPOCH frame on the right link, behind the DATA frames queued. */
static int send_epoch(links *l, const frame_epoch *e)
{
    if (!l->r || l->r_state != LINK_UP) return RINGD_ERING;
    send_req *s = malloc(sizeof *s + CONTROL_CAP);
    if (!s) return RINGD_ENOMEM;
    int n = frame_encode_epoch(s->buf, CONTROL_CAP, e);
    flush_batch(l);
    if (n < 0) {
        free(s);
        return RINGD_EINVAL;
    }
    return send_right(l, s, n) < 0 ? RINGD_ERING : 0;
}

/* ---- epochs ---- */

/* A new epoch of this host's own: larger than any seen, and unlike any
 * other host's (epoch % n is the position of the host that made it). */
static uint32_t new_epoch(const links *l)
{
    uint32_t n = (uint32_t)l->n;
    return (l->epoch / n + 1) * n + (uint32_t)l->me;
}

static void on_resume(uv_timer_t *t);

static void adopt(links *l, uint32_t epoch, int broke, int code, const char *why)
{
    l->epoch = epoch;
    l->ready = 0;
    log_info("ring epoch %u: %s", epoch, why);
    l->cb.on_epoch(l->data, epoch, broke, code, why);
    /* A frame held back for the ring is of the old epoch now: drop it. */
    if (l->l && l->l->rd == RD_PAUSED) uv_timer_start(&l->resume, on_resume, 0, 0);
}

/* A link of this host broke: every host from here round to the next break
 * fails what it has submitted. */
static void break_ring(links *l, const char *why)
{
    uint32_t e = new_epoch(l);
    char reason[FRAME_MAX_TEXT + 1];
    int n = snprintf(reason, sizeof reason, "ring broken: host %s ", l->cfg->hosts[l->me].name);
    snprintf(reason + n, sizeof reason - (size_t)n, "%s", why);
    adopt(l, e, 1, RINGD_ERING, reason);
    frame_epoch f = {
        .epoch = e, .origin = (uint32_t)l->me, .phase = EPOCH_BREAK, .code = RINGD_ERING};
    memcpy(f.reason, reason, sizeof f.reason);
    send_epoch(l, &f);
}

/* The right link came up: propose a new epoch round the ring. */
static void form_ring(links *l)
{
    uint32_t e = new_epoch(l);
    char why[160];
    snprintf(why, sizeof why, "re-forming from host %s", l->cfg->hosts[l->me].name);
    adopt(l, e, 0, RINGD_ERING, why);
    frame_epoch f = {.epoch = e, .origin = (uint32_t)l->me, .phase = EPOCH_FORM};
    send_epoch(l, &f);
}

static void handle_epoch(conn *c)
{
    links *l = c->owner;
    frame_epoch e;
    if (frame_decode_epoch(&c->hdr, c->body, &e) < 0 || e.origin >= (uint32_t)l->n) {
        conn_close(c, "malformed EPOCH frame");
        return;
    }
    int mine = e.origin == (uint32_t)l->me;
    if (e.epoch > l->epoch && !mine) {
        if (e.phase == EPOCH_BREAK) {
            adopt(l, e.epoch, 1, e.code, e.reason);
        } else if (e.phase == EPOCH_FORM) {
            char why[160];
            snprintf(why, sizeof why, "re-forming from host %s", l->cfg->hosts[e.origin].name);
            adopt(l, e.epoch, 0, RINGD_ERING, why);
        } else {
            return; /* a CONFIRM of an epoch never proposed here */
        }
        send_epoch(l, &e);
    } else if (e.epoch == l->epoch && e.phase == EPOCH_FORM && mine) {
        /* Our proposal came back: every link carried it. */
        frame_epoch f = {.epoch = e.epoch, .origin = e.origin, .phase = EPOCH_CONFIRM};
        if (send_epoch(l, &f) == 0) {
            l->ready = 1;
            log_info("ring formed: %d hosts, epoch %u", l->n, l->epoch);
            l->cb.on_ready(l->data);
        }
    } else if (e.epoch == l->epoch && e.phase == EPOCH_CONFIRM && !mine) {
        if (send_epoch(l, &e) == 0) {
            l->ready = 1;
            log_info("ring formed: %d hosts, epoch %u", l->n, l->epoch);
            l->cb.on_ready(l->data);
        }
    }
    /* Anything else is older than what this host knows: dropped. */
}

/* ---- reading ---- */

static void expect(conn *c, rd_state st, size_t need)
{
    c->rd = st;
    c->got = 0;
    c->need = need;
}

/* The conn whose reader takes the bytes of handle h: an attached stream's
 * go to its link's stream 0. */
static conn *reader_of(uv_handle_t *h)
{
    conn *c = h->data;
    return c->feeds_link && c->link ? c->link : c;
}

/* Whether c's bytes come stripe by stripe from several streams. */
static int striped(const conn *c)
{
    return c->role == CONN_LEFT && c->owner->streams > 1;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    conn *c = reader_of(h);
    size_t left = c->need - c->got;
    /* Never past the end of this stream's stripe: the next bytes of the
     * link are on the next stream. */
    size_t limit = striped(c) ? c->stripe_left : SIZE_MAX;
    if (left > limit) left = limit;
    c->into_ahead = c->small && (c->rd == RD_HEADER || c->rd == RD_BODY);
    if (c->into_ahead) {
        size_t room = AHEAD_CAP - c->ahead_len;
        *buf =
            uv_buf_init((char *)c->ahead + c->ahead_len, (unsigned)(room < limit ? room : limit));
        return;
    }
    switch (c->rd) {
    case RD_HEADER:
        *buf = uv_buf_init((char *)c->hdr_buf + c->got, (unsigned)left);
        break;
    case RD_BODY:
        *buf = uv_buf_init((char *)c->body + c->got, (unsigned)left);
        break;
    case RD_PAYLOAD:
        *buf = uv_buf_init((char *)c->dst + c->got, (unsigned)left);
        break;
    case RD_SKIP:
        *buf = uv_buf_init((char *)c->owner->skip, (unsigned)(left < SKIP_BUF ? left : SKIP_BUF));
        break;
    case RD_PAUSED:
        *buf = uv_buf_init(NULL, 0);
        break;
    }
}

/* Offers the DATA frame in c->data to the ring and sets up the payload read. */
static void offer_data(conn *c)
{
    links *l = c->owner;
    char why[512] = "";
    uint8_t *dst = NULL;
    /* Frames of an older epoch belong to collectives that failed. */
    int act = c->data.epoch != l->epoch ? LINK_RECV_SKIP
                                        : l->cb.on_data(l->data, &c->data, &dst, why, sizeof why);
    if (act < 0) {
        conn_close(c, why);
        return;
    }
    if (act == LINK_RECV_PAUSE) {
        if (c->rd != RD_PAUSED) stop_reading(c);
        c->rd = RD_PAUSED;
        return;
    }
    int was_paused = c->rd == RD_PAUSED;
    if (was_paused) c->last_read = uv_now(l->loop); /* it was quiet because we held it */
    if (c->data.length == 0) {
        if (act == LINK_RECV_INTO) l->cb.on_payload(l->data, &c->data, 0, NULL);
        expect(c, RD_HEADER, FRAME_HEADER_SIZE);
    } else if (act == LINK_RECV_INTO) {
        c->dst = dst;
        expect(c, RD_PAYLOAD, c->data.length);
    } else {
        expect(c, RD_SKIP, c->data.length);
    }
    if (was_paused && !c->closing) {
        /* Bytes read ahead of the paused frame come first. */
        drain_ahead(c);
        if (!c->closing && c->rd != RD_PAUSED) start_reading(c);
    }
}

static void handle_hello(conn *c);
static void accept_stream(conn *c);
static void refuse(conn *c, int code, const char *reason);
static void handle_welcome(conn *c);
static void handle_auth(conn *c);

/* A complete header or body is in; decide what comes next. */
static void frame_piece_done(conn *c)
{
    links *l = c->owner;
    int rc;
    char why[256];

    if (c->rd == RD_HEADER) {
        rc = frame_decode_header(c->hdr_buf, FRAME_HEADER_SIZE, &c->hdr);
        if (rc == FRAME_EVERSION && c->role == CONN_PENDING) {
            snprintf(why, sizeof why,
                     "peer speaks protocol version %u, this ringd speaks %u; "
                     "run the same ringd version on every host",
                     c->hdr.version, FRAME_VERSION);
            refuse(c, RINGD_EVERSION, why);
            return;
        }
        if (rc < 0) {
            snprintf(why, sizeof why, "bad frame header: %s", frame_strerror(rc));
            conn_close(c, why);
            return;
        }
        /* Each connection carries its own frame types, in its own order. */
        int ok;
        switch (c->role) {
        case CONN_PENDING:
            ok = c->hdr.type == (c->awaiting_auth ? FRAME_AUTH : FRAME_HELLO);
            break;
        case CONN_RIGHT:
            ok = (l->r_state == LINK_HANDSHAKE && !c->welcomed && c->hdr.type == FRAME_WELCOME) ||
                 (l->r_state == LINK_UP && c->hdr.type == FRAME_PING);
            break;
        case CONN_STREAM: /* the right link's other streams carry nothing back */
            ok = !c->welcomed && c->hdr.type == FRAME_WELCOME;
            break;
        default:
            ok = c->hdr.type == FRAME_DATA || c->hdr.type == FRAME_ABORT ||
                 c->hdr.type == FRAME_PING || c->hdr.type == FRAME_EPOCH;
            break;
        }
        if (!ok) {
            snprintf(why, sizeof why, "unexpected %s frame", frame_type_name(c->hdr.type));
            conn_close(c, why);
            return;
        }
        size_t body = c->hdr.type == FRAME_DATA ? FRAME_DATA_HEADER_SIZE : c->hdr.length;
        if (body == 0) {
            expect(c, RD_HEADER, FRAME_HEADER_SIZE); /* PING */
            return;
        }
        expect(c, RD_BODY, body);
        return;
    }

    if (c->rd == RD_BODY) {
        switch (c->hdr.type) {
        case FRAME_HELLO:
            handle_hello(c);
            return;
        case FRAME_WELCOME:
            handle_welcome(c);
            return;
        case FRAME_AUTH:
            handle_auth(c);
            return;
        case FRAME_EPOCH:
            expect(c, RD_HEADER, FRAME_HEADER_SIZE);
            handle_epoch(c);
            return;
        case FRAME_ABORT: {
            frame_abort a;
            if (frame_decode_abort(&c->hdr, c->body, &a) < 0) {
                conn_close(c, "malformed ABORT");
                return;
            }
            expect(c, RD_HEADER, FRAME_HEADER_SIZE);
            if (a.epoch == l->epoch) l->cb.on_abort(l->data, &a);
            return;
        }
        case FRAME_DATA:
            rc = frame_decode_data(&c->hdr, c->body, &c->data);
            c->small = c->data.length <= SMALL_PAYLOAD;
            if (rc < 0) {
                snprintf(why, sizeof why, "bad DATA frame: %s", frame_strerror(rc));
                conn_close(c, why);
                return;
            }
            c->rd = RD_BODY; /* offer_data() moves on from here */
            offer_data(c);
            return;
        default:
            conn_close(c, "unexpected frame body");
            return;
        }
    }

    if (c->rd == RD_PAYLOAD) {
        l->stats.bytes_in += c->data.length;
        expect(c, RD_HEADER, FRAME_HEADER_SIZE);
        uint32_t crc = c->data.has_crc ? data_crc(c->dst, c->data.length, c->body) : 0;
        if (c->data.has_crc && crc != c->data.crc) {
            l->stats.checksum_errors++;
            snprintf(why, sizeof why,
                     "checksum mismatch on a %u-byte segment host %s received from %s "
                     "(CRC32C %08x, expected %08x): the data was corrupted in transit",
                     c->data.length, l->cfg->hosts[l->me].name, side_name(l, LINK_LEFT), crc,
                     c->data.crc);
            l->cb.on_payload(l->data, &c->data, RINGD_ECORRUPT, why);
            return;
        }
        l->cb.on_payload(l->data, &c->data, 0, NULL);
        return;
    }

    if (c->rd == RD_SKIP) expect(c, RD_HEADER, FRAME_HEADER_SIZE);
}

/* Where the bytes of the piece being read go (NULL: nowhere, a skip). */
static uint8_t *piece(conn *c)
{
    switch (c->rd) {
    case RD_HEADER:
        return c->hdr_buf + c->got;
    case RD_BODY:
        return c->body + c->got;
    case RD_PAYLOAD:
        return c->dst + c->got;
    default:
        return NULL;
    }
}

/* Feeds the bytes read ahead to the reader, piece by piece, until they run
 * out, the reader pauses, or the connection closes or is being refused (a
 * refused HELLO leaves its piece complete: going on would refuse it again,
 * for ever). */
static void drain_ahead(conn *c)
{
    while (!c->closing && !c->refusing && c->rd != RD_PAUSED && c->ahead_pos < c->ahead_len) {
        size_t n = c->need - c->got, avail = c->ahead_len - c->ahead_pos;
        if (n > avail) n = avail;
        uint8_t *p = piece(c);
        if (p) memcpy(p, c->ahead + c->ahead_pos, n);
        c->ahead_pos += n;
        c->got += n;
        if (c->got == c->need) frame_piece_done(c);
    }
    if (c->ahead_pos == c->ahead_len) c->ahead_pos = c->ahead_len = 0;
}

/* The handle c's reader reads now; NULL while that stream is not attached. */
static uv_stream_t *read_handle(conn *c)
{
    if (!striped(c)) return (uv_stream_t *)&c->tcp;
    return c->stream[c->cur] ? (uv_stream_t *)&c->stream[c->cur]->tcp : NULL;
}

static void stop_reading(conn *c)
{
    uv_stream_t *h = read_handle(c);
    if (h) uv_read_stop(h);
}

/* The stripe of the stream being read is whole: read the next stream. */
static void next_stream(conn *c)
{
    c->switch_due = 0;
    stop_reading(c);
    c->cur = (c->cur + 1) % c->owner->streams;
    c->stripe_left = STRIPE_BYTES;
    if (!c->closing && c->rd != RD_PAUSED) start_reading(c);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    conn *c = reader_of((uv_handle_t *)s);
    if (c->closing || ((conn *)s->data)->closing) return;
    c->last_read = uv_now(c->owner->loop);
    if (nread < 0) {
        char why[128];
        if (nread == UV_EOF)
            snprintf(why, sizeof why, "connection closed by peer");
        else
            snprintf(why, sizeof why, "read failed: %s", uv_strerror((int)nread));
        conn_close(s->data, why);
        return;
    }
    if (striped(c) && (c->stripe_left -= (size_t)nread) == 0) c->switch_due = 1;
    if (c->into_ahead) {
        c->ahead_len += (size_t)nread;
        drain_ahead(c);
    } else {
        c->got += (size_t)nread;
        if (c->got == c->need) frame_piece_done(c);
    }
    if (c->switch_due && !c->closing) next_stream(c);
}

static void start_reading(conn *c)
{
    uv_stream_t *h = read_handle(c);
    if (!h) return; /* that stream attaches later, and starts it */
    int rc = uv_read_start(h, on_alloc, on_read);
    if (rc < 0) {
        char why[128];
        snprintf(why, sizeof why, "cannot read: %s", uv_strerror(rc));
        conn_close(c, why);
    }
}

static void on_resume(uv_timer_t *t)
{
    links *l = t->data;
    if (l->l && l->l->rd == RD_PAUSED && !l->l->closing) offer_data(l->l);
}

void links_resume(links *l)
{
    if (l->l && l->l->rd == RD_PAUSED) uv_timer_start(&l->resume, on_resume, 0, 0);
}

/* ---- connections ---- */

static void conn_closed(uv_handle_t *h)
{
    conn *c = h->data;
    links *l = c->owner;
    free(c);
    release(l);
}

static void conn_timer_closed(uv_handle_t *h)
{
    conn *c = h->data;
    uv_close((uv_handle_t *)&c->tcp, conn_closed);
}

static conn *conn_new(links *l, conn_role role)
{
    conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->owner = l;
    c->role = role;
    c->small = 1;
    c->last_read = uv_now(l->loop);
    uv_tcp_init(l->loop, &c->tcp);
    uv_timer_init(l->loop, &c->timer);
    c->tcp.data = c;
    c->timer.data = c;
    l->open_handles++;
    expect(c, RD_HEADER, FRAME_HEADER_SIZE);
    return c;
}

static void unlink_pending(links *l, conn *c)
{
    for (conn **p = &l->pending; *p; p = &(*p)->next) {
        if (*p == c) {
            *p = c->next;
            l->n_pending--;
            return;
        }
    }
}

static void on_retry(uv_timer_t *t)
{
    start_connect(t->data);
}

static void schedule_retry(links *l)
{
    if (l->closing) return;
    uint32_t delay = l->backoff_ms;
    /* Up to 25% jitter, so hosts that failed together do not retry in step. */
    delay += (uint32_t)(rand() % (int)(delay / 4 + 1));
    l->backoff_ms =
        l->backoff_ms * 2 > l->cfg->backoff_max_ms ? l->cfg->backoff_max_ms : l->backoff_ms * 2;
    uv_timer_start(&l->retry, on_retry, delay, 0);
}

/* Closes c, tells the ring if it was a link, and schedules what comes next.
 * Safe from within c's own callbacks: the memory goes in the close callback. */
static void conn_close(conn *c, const char *why)
{
    if (c->closing) return;
    links *l = c->owner;
    c->closing = 1;
    uv_read_stop((uv_stream_t *)&c->tcp);
    uv_timer_stop(&c->timer);
    uv_close((uv_handle_t *)&c->timer, conn_timer_closed);
    /* The streams of a link go together. */
    for (int k = 1; k < MAX_STREAMS; k++)
        if (c->stream[k]) conn_close(c->stream[k], why);

    switch (c->role) {
    case CONN_STREAM:
        if (c->link) {
            c->link->stream[c->index] = NULL;
            if (!c->link->closing) conn_close(c->link, why);
        }
        break;
    case CONN_PENDING:
        if (c->link) c->link->stream[c->index] = NULL; /* a stream not attached yet */
        unlink_pending(l, c);
        if (!c->refusing && !l->closing) {
            /* A stranger's bytes: said once a minute at warn, every time at
             * debug, so a port scanner cannot flood the log. */
            log_limited(l, &l->drop_rl, LOG_WARN,
                        "dropped connection from %s before its handshake: %s", c->peer, why);
        }
        break;
    case CONN_LEFT: {
        l->l = NULL;
        snprintf(l->left_error, sizeof l->left_error, "%s", why);
        if (l->closing) break;
        const cfg_host *h = &l->cfg->hosts[l->left];
        char what[FRAME_MAX_TEXT];
        snprintf(what, sizeof what, "lost its link from %s (%s): %s", h->name, h->address, why);
        log_warn("left link from %s lost: %s", h->name, why);
        l->stats.breaks++;
        l->cb.on_down(l->data, LINK_LEFT, why);
        break_ring(l, what);
        break;
    }
    case CONN_RIGHT: {
        link_state was = l->r_state;
        /* Frames still in the batch go nowhere: flush_batch() reports them
         * as failed once the link is marked down below. */
        l->r = NULL;
        l->r_state = LINK_DOWN;
        flush_batch(l);
        snprintf(l->right_error, sizeof l->right_error, "%s", why);
        if (l->closing) break;
        if (was == LINK_UP) {
            const cfg_host *h = &l->cfg->hosts[l->right];
            char what[FRAME_MAX_TEXT + 1];
            log_warn("right link to %s lost: %s", h->name, why);
            l->stats.breaks++;
            l->backoff_ms = l->cfg->backoff_initial_ms;
            l->cb.on_down(l->data, LINK_RIGHT, why);
            /* The break travels from the right neighbour's side; here it
             * only fails what this host has. */
            snprintf(what, sizeof what, "ring broken: host %s lost its link to %s (%s): %s",
                     l->cfg->hosts[l->me].name, h->name, h->address, why);
            adopt(l, new_epoch(l), 1, RINGD_ERING, what);
        } else {
            uint32_t suppressed = 0;
            char rep[64];
            if (log_ratelimit_ok(&l->connect_rl, uv_now(l->loop), 30000, &suppressed))
                log_warn("cannot reach right neighbour %s (%s): %s; retrying%s",
                         side_name(l, LINK_RIGHT), l->cfg->hosts[l->right].address, why,
                         log_repeated(rep, sizeof rep, suppressed, 30));
        }
        schedule_retry(l);
        break;
    }
    }
}

static void on_handshake_timeout(uv_timer_t *t)
{
    conn *c = t->data;
    conn_close(c, "handshake timed out");
}

/* ---- the right link ---- */

static void on_connect(uv_connect_t *req, int status)
{
    conn *c = req->data;
    links *l = c->owner;
    if (c->closing) return;
    if (status < 0) {
        conn_close(c, uv_strerror(status));
        return;
    }
    net_tune_tcp(&c->tcp, l->cfg->socket_buffer_bytes);
    frame_hello h = {.n_hosts = (uint32_t)l->n,
                     .from_pos = (uint32_t)l->me,
                     .to_pos = (uint32_t)l->right,
                     .epoch = l->epoch,
                     .auth = l->has_key};
    if (l->has_key && auth_nonce(h.nonce) < 0) {
        conn_close(c, "cannot make a random challenge");
        return;
    }
    memcpy(c->my_nonce, h.nonce, sizeof h.nonce);
    c->hello_epoch = h.epoch;
    h.stream = (uint8_t)c->index;
    h.streams = (uint8_t)l->streams;
    h.session = c->session;
    snprintf(h.cluster, sizeof h.cluster, "%s", l->cfg->cluster);
    snprintf(h.from_name, sizeof h.from_name, "%s", l->cfg->hosts[l->me].name);
    send_req *s = malloc(sizeof *s + CONTROL_CAP);
    if (!s) {
        conn_close(c, "out of memory");
        return;
    }
    int n = frame_encode_hello(s->buf, CONTROL_CAP, &h);
    if (n < 0 || send_control(c, s, n, NULL) < 0) {
        conn_close(c, "cannot send HELLO");
        return;
    }
    if (c->role == CONN_RIGHT) l->r_state = LINK_HANDSHAKE;
    start_reading(c);
}

static void connect_resolved(links *l, conn *c, int status, struct addrinfo *res)
{
    if (status < 0 || !res) {
        char why[160];
        snprintf(why, sizeof why, "cannot resolve %s: %s", l->cfg->hosts[l->right].node,
                 uv_strerror(status));
        conn_close(c, why);
        return;
    }
    net_describe_addr(res->ai_addr, c->peer, sizeof c->peer);
    memcpy(&l->right_addr, res->ai_addr, res->ai_addrlen);
    l->connect_req.data = c;
    int rc = uv_tcp_connect(&l->connect_req, &c->tcp, res->ai_addr, on_connect);
    if (rc < 0) conn_close(c, uv_strerror(rc));
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    links *l = req->data;
    conn *c = l->resolving;
    l->resolving = NULL;
    /* The attempt may have timed out meanwhile; no new one starts while a
     * resolution is pending, so c == l->r means it is still this attempt. */
    if (!l->closing && c == l->r && !c->closing) connect_resolved(l, c, status, res);
    uv_freeaddrinfo(res);
    release(l);
}

static void start_connect(links *l)
{
    if (l->closing || l->r) return;
    if (l->resolving) {
        schedule_retry(l);
        return;
    }
    conn *c = conn_new(l, CONN_RIGHT);
    if (!c) {
        schedule_retry(l);
        return;
    }
    l->r = c;
    l->r_state = LINK_CONNECTING;
    c->session = ((uint64_t)(uint32_t)rand() << 32) ^ (uint64_t)(uint32_t)rand() ^ uv_hrtime();
    uv_timer_start(&c->timer, on_handshake_timeout, l->cfg->connect_timeout_ms, 0);

    const cfg_host *h = &l->cfg->hosts[l->right];
    char port[8];
    snprintf(port, sizeof port, "%u", h->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    l->gai.data = l;
    l->resolving = c;
    l->open_handles++;
    int rc = uv_getaddrinfo(l->loop, &l->gai, on_resolved, h->node, port, &hints);
    if (rc < 0) {
        l->resolving = NULL;
        l->open_handles--;
        conn_close(c, uv_strerror(rc));
    }
}

static void right_link_up(links *l);

/* Stream 0 of the right link is accepted: open the others to the same
 * address, each with its own handshake, under the same session. */
static void open_streams(links *l, conn *link)
{
    link->stream[0] = link;
    link->n_up = 1;
    for (int k = 1; k < l->streams; k++) {
        conn *c = conn_new(l, CONN_STREAM);
        if (!c) {
            conn_close(link, "out of memory");
            return;
        }
        c->link = link;
        c->index = k;
        c->session = link->session;
        c->small = 0; /* reads exactly its handshake frames */
        snprintf(c->peer, sizeof c->peer, "%s", link->peer);
        link->stream[k] = c;
        uv_timer_start(&c->timer, on_handshake_timeout, l->cfg->connect_timeout_ms, 0);
        c->connect_req.data = c;
        int rc =
            uv_tcp_connect(&c->connect_req, &c->tcp, (struct sockaddr *)&l->right_addr, on_connect);
        if (rc < 0) {
            conn_close(c, uv_strerror(rc));
            return;
        }
    }
}

/* The link this host's right connection c is, for the challenge-response. */
static auth_link right_link(const links *l, const conn *c)
{
    return (auth_link){.cluster = l->cfg->cluster,
                       .connector = (uint32_t)l->me,
                       .acceptor = (uint32_t)l->right,
                       .connector_epoch = c->hello_epoch,
                       .acceptor_epoch = c->welcome_epoch,
                       .connector_nonce = c->my_nonce,
                       .acceptor_nonce = c->peer_nonce};
}

/* Answers the acceptor's challenge; returns whether its own answer to ours
 * was right. The answer goes out either way, so that both ends log a key
 * that differs. */
static int answer_challenge(conn *c, const frame_welcome *w)
{
    links *l = c->owner;
    memcpy(c->peer_nonce, w->nonce, FRAME_NONCE_SIZE);
    c->welcome_epoch = w->epoch;
    auth_link link = right_link(l, c);
    int ok = w->auth && auth_check(&l->key, AUTH_ACCEPTOR, &link, w->mac);
    frame_auth a;
    auth_answer(&l->key, AUTH_CONNECTOR, &link, a.mac);
    send_req *s = malloc(sizeof *s + CONTROL_CAP);
    int n = s ? frame_encode_auth(s->buf, CONTROL_CAP, &a) : -1;
    if (n < 0 || send_control(c, s, n, NULL) < 0) return 0;
    return ok;
}

static void handle_welcome(conn *c)
{
    links *l = c->owner;
    frame_welcome w;
    if (frame_decode_welcome(&c->hdr, c->body, &w) < 0) {
        conn_close(c, "malformed WELCOME");
        return;
    }
    if (w.status < 0) {
        char why[FRAME_MAX_TEXT + 64];
        snprintf(why, sizeof why, "refused by %s: %s", side_name(l, LINK_RIGHT), w.reason);
        log_limited(l, &l->refuse_rl, LOG_ERROR, "right neighbour %s refused the link: %s",
                    side_name(l, LINK_RIGHT), w.reason);
        if (w.status == RINGD_EAUTH) l->stats.auth_failures++;
        /* A refusal is a configuration problem; do not hammer the peer. */
        l->backoff_ms = l->cfg->backoff_max_ms;
        conn_close(c, why);
        return;
    }
    if (l->has_key && !answer_challenge(c, &w)) {
        char why[256];
        snprintf(why, sizeof why,
                 "authentication failed: %s did not prove it holds this cluster's key "
                 "(are both secret_files identical?)",
                 side_name(l, LINK_RIGHT));
        log_limited(l, &l->refuse_rl, LOG_ERROR, "right neighbour %s (%s): %s",
                    side_name(l, LINK_RIGHT), c->peer, why);
        l->stats.auth_failures++;
        l->backoff_ms = l->cfg->backoff_max_ms;
        conn_close(c, why);
        return;
    }
    uv_timer_stop(&c->timer);
    if (w.epoch > l->epoch) l->epoch = w.epoch;
    c->welcomed = 1;
    expect(c, RD_HEADER, FRAME_HEADER_SIZE);
    if (c->role == CONN_STREAM) {
        /* Its stream is ready; nothing more comes on it but its end. */
        conn *link = c->link;
        if (++link->n_up == l->streams) right_link_up(l);
        return;
    }
    if (l->streams > 1) {
        open_streams(l, c);
        return;
    }
    right_link_up(l);
}

/* Every stream of the right link is up: the link is. */
static void right_link_up(links *l)
{
    conn *c = l->r;
    l->r_state = LINK_UP;
    l->out_cur = 0;
    l->out_left = STRIPE_BYTES;
    l->right_error[0] = '\0';
    l->backoff_ms = l->cfg->backoff_initial_ms;
    log_ratelimit_reset(&l->connect_rl);
    log_ratelimit_reset(&l->refuse_rl);
    if (l->was_up) l->stats.reconnects++;
    l->was_up = 1;
    if (l->streams > 1)
        log_info("right link to %s (%s) up%s, %d TCP streams", side_name(l, LINK_RIGHT), c->peer,
                 l->has_key ? ", authenticated" : "", l->streams);
    else
        log_info("right link to %s (%s) up%s", side_name(l, LINK_RIGHT), c->peer,
                 l->has_key ? ", authenticated" : "");
    l->cb.on_up(l->data, LINK_RIGHT);
    form_ring(l);
}

/* ---- the left link ---- */

static void on_refusal_sent(uv_write_t *req, int status)
{
    (void)status;
    send_req *s = (send_req *)req;
    conn *c = s->req.handle->data;
    free(s);
    conn_close(c, "refused");
}

static void refuse(conn *c, int code, const char *reason)
{
    links *l = c->owner;
    log_limited(l, &l->refuse_rl, LOG_WARN, "refused connection from %s: %s", c->peer, reason);
    if (!l->l) /* why the left link is not up, as far as we know */
        snprintf(l->left_error, sizeof l->left_error, "refused a connection from %s: %s", c->peer,
                 reason);
    frame_welcome w = {.status = code, .epoch = l->epoch};
    snprintf(w.reason, sizeof w.reason, "%s", reason);
    send_req *s = malloc(sizeof *s + CONTROL_CAP);
    int n = s ? frame_encode_welcome(s->buf, CONTROL_CAP, &w) : -1;
    c->refusing = 1;
    uv_read_stop((uv_stream_t *)&c->tcp);
    if (n < 0 || send_control(c, s, n, on_refusal_sent) < 0) conn_close(c, "refused");
}

/* The connection from the left neighbour is ours now. */
static void accept_left(conn *c)
{
    links *l = c->owner;
    const char *left_name = l->cfg->hosts[l->left].name;
    /* A left neighbour that reconnects replaces its old connection, which
     * may be a half-open leftover from before it restarted. */
    if (l->l) conn_close(l->l, "replaced by a new connection from the left neighbour");
    unlink_pending(l, c);
    uv_timer_stop(&c->timer);
    c->role = CONN_LEFT;
    c->awaiting_auth = 0;
    c->last_read = uv_now(l->loop);
    l->l = c;
    l->left_error[0] = '\0';
    net_tune_tcp(&c->tcp, l->cfg->socket_buffer_bytes);
    expect(c, RD_HEADER, FRAME_HEADER_SIZE);
    log_info("left link from %s (%s) up%s", left_name, c->peer,
             l->has_key ? ", authenticated" : "");
    l->cb.on_up(l->data, LINK_LEFT);
}

/* Stream k > 0 of the left link joins its stream 0, whose reader reads it in
 * turn from now on. */
static void attach_stream(conn *c)
{
    links *l = c->owner;
    conn *link = l->l;
    if (!link || link->closing || link->session != c->session || link->stream[c->index]) {
        conn_close(c, "a stream of no link this host has");
        return;
    }
    unlink_pending(l, c);
    uv_timer_stop(&c->timer);
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->role = CONN_STREAM;
    c->awaiting_auth = 0;
    c->link = link;
    c->feeds_link = 1;
    link->stream[c->index] = c;
    net_tune_tcp(&c->tcp, l->cfg->socket_buffer_bytes);
    /* The reader may be waiting for exactly this stream. */
    if (link->cur == c->index && link->rd != RD_PAUSED) start_reading(link);
}

static void accept_stream(conn *c)
{
    if (c->index == 0) {
        if (c->owner->streams > 1) {
            c->stream[0] = c;
            c->cur = 0;
            c->stripe_left = STRIPE_BYTES;
            c->small = 1;
        }
        accept_left(c);
    } else {
        attach_stream(c);
    }
}

static auth_link left_link(const links *l, const conn *c)
{
    return (auth_link){.cluster = l->cfg->cluster,
                       .connector = (uint32_t)l->left,
                       .acceptor = (uint32_t)l->me,
                       .connector_epoch = c->hello_epoch,
                       .acceptor_epoch = c->welcome_epoch,
                       .connector_nonce = c->peer_nonce,
                       .acceptor_nonce = c->my_nonce};
}

static void handle_hello(conn *c)
{
    links *l = c->owner;
    frame_hello h;
    char why[FRAME_MAX_TEXT];
    if (frame_decode_hello(&c->hdr, c->body, &h) < 0) {
        conn_close(c, "malformed HELLO");
        return;
    }
    const char *left_name = l->cfg->hosts[l->left].name;
    int little = 1;
    int we_are_le = *(const uint8_t *)&little == 1;
    if (!!(c->hdr.flags & FRAME_FLAG_LITTLE_ENDIAN) != we_are_le) {
        refuse(c, RINGD_EMISMATCH, "byte order differs from this host's");
        return;
    }
    if (strcmp(h.cluster, l->cfg->cluster) != 0) {
        snprintf(why, sizeof why, "cluster \"%s\" is not ours (\"%s\")", h.cluster,
                 l->cfg->cluster);
        refuse(c, RINGD_EMISMATCH, why);
        return;
    }
    if (h.n_hosts != (uint32_t)l->n || h.from_pos != (uint32_t)l->left ||
        h.to_pos != (uint32_t)l->me || strcmp(h.from_name, left_name) != 0) {
        snprintf(why, sizeof why,
                 "ring positions disagree: peer \"%s\" says it is host %u of %u sending to "
                 "host %u, but this host (%s, %d of %d) expects its left neighbour \"%s\" (%d); "
                 "are the hosts lists of both configs identical?",
                 h.from_name, h.from_pos, h.n_hosts, h.to_pos, l->cfg->hosts[l->me].name, l->me,
                 l->n, left_name, l->left);
        refuse(c, RINGD_EMISMATCH, why);
        return;
    }

    if ((h.streams ? h.streams : 1) != l->streams) {
        snprintf(why, sizeof why,
                 "\"%s\" uses %u TCP streams per link and this host %d; set the same streams "
                 "in every host's configuration",
                 h.from_name, h.streams, l->streams);
        refuse(c, RINGD_EMISMATCH, why);
        return;
    }
    if (l->has_key != h.auth) {
        snprintf(why, sizeof why,
                 l->has_key ? "this host requires a cluster key (secret_file) and \"%s\" has none"
                            : "\"%s\" uses a cluster key (secret_file) and this host has none",
                 h.from_name);
        l->stats.auth_failures++;
        refuse(c, RINGD_EAUTH, why);
        return;
    }

    if (h.epoch > l->epoch) l->epoch = h.epoch;
    frame_welcome w = {.status = 0, .epoch = l->epoch, .auth = l->has_key};
    snprintf(c->claimed, sizeof c->claimed, "%s", h.from_name);
    c->index = h.stream;
    c->session = h.session;
    /* With several streams, a byte past the handshake belongs to the link's
     * stripes: read the rest of the handshake exactly, nothing ahead. */
    if (l->streams > 1) c->small = 0;
    if (l->has_key) {
        memcpy(c->peer_nonce, h.nonce, FRAME_NONCE_SIZE);
        c->hello_epoch = h.epoch;
        c->welcome_epoch = w.epoch;
        if (auth_nonce(w.nonce) < 0) {
            conn_close(c, "cannot make a random challenge");
            return;
        }
        memcpy(c->my_nonce, w.nonce, FRAME_NONCE_SIZE);
        auth_link link = left_link(l, c);
        auth_answer(&l->key, AUTH_ACCEPTOR, &link, w.mac);
    }
    send_req *s = malloc(sizeof *s + CONTROL_CAP);
    int n = s ? frame_encode_welcome(s->buf, CONTROL_CAP, &w) : -1;
    if (n < 0 || send_control(c, s, n, NULL) < 0) {
        conn_close(c, "cannot send WELCOME");
        return;
    }
    if (l->has_key) {
        /* Not a link until it answers our challenge. */
        c->awaiting_auth = 1;
        expect(c, RD_HEADER, FRAME_HEADER_SIZE);
        return;
    }
    accept_stream(c);
}

static void handle_auth(conn *c)
{
    links *l = c->owner;
    frame_auth a;
    if (frame_decode_auth(&c->hdr, c->body, &a) < 0) {
        conn_close(c, "malformed AUTH");
        return;
    }
    auth_link link = left_link(l, c);
    if (!auth_check(&l->key, AUTH_CONNECTOR, &link, a.mac)) {
        log_limited(l, &l->refuse_rl, LOG_WARN,
                    "refused connection from %s claiming to be \"%s\": authentication failed "
                    "(wrong cluster key; are both secret_files identical?)",
                    c->peer, c->claimed);
        if (!l->l)
            snprintf(l->left_error, sizeof l->left_error,
                     "a connection from %s claiming to be \"%s\" failed authentication "
                     "(wrong cluster key)",
                     c->peer, c->claimed);
        l->stats.auth_failures++;
        c->refusing = 1; /* logged here, once */
        conn_close(c, "authentication failed");
        return;
    }
    accept_stream(c);
}

static void on_connection(uv_stream_t *server, int status)
{
    links *l = server->data;
    if (status < 0 || l->closing) return;
    conn *c = conn_new(l, CONN_PENDING);
    if (!c) return;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0) {
        conn_close(c, "accept failed");
        return;
    }
    struct sockaddr_storage ss;
    int len = sizeof ss;
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) == 0)
        net_describe_addr((struct sockaddr *)&ss, c->peer, sizeof c->peer);
    else
        snprintf(c->peer, sizeof c->peer, "?");
    /* Bound the memory a flood of half-open connections can take. */
    if (l->n_pending >= MAX_PENDING) {
        conn_close(c, "too many connections awaiting a handshake");
        return;
    }
    c->next = l->pending;
    l->pending = c;
    l->n_pending++;
    uv_timer_start(&c->timer, on_handshake_timeout, l->cfg->connect_timeout_ms, 0);
    start_reading(c);
}

/* ---- heartbeats ---- */

/* TCP keepalive notices a dead peer after minutes, and not at all a frozen
 * one whose kernel still acknowledges: each side PINGs the other on both
 * links, and a link on which nothing at all arrived for heartbeat_timeout is
 * closed (which breaks the ring, so collectives fail now, not at their
 * deadline). A left link we stopped reading is quiet by our choice. */
static void check_link(links *l, conn *c, uint64_t now)
{
    if (!c || c->closing || (c->role == CONN_RIGHT && l->r_state != LINK_UP)) return;
    if (c->rd != RD_PAUSED && now - c->last_read >= l->cfg->heartbeat_timeout_ms) {
        char why[200];
        snprintf(why, sizeof why,
                 "nothing received for %.1f s (heartbeat_timeout): the host is frozen, "
                 "overloaded or cut off",
                 (double)(now - c->last_read) / 1000);
        conn_close(c, why);
        return;
    }
    send_ping(c);
}

static void on_heartbeat(uv_timer_t *t)
{
    links *l = t->data;
    uint64_t now = uv_now(l->loop);
    uv_timer_set_repeat(t, l->cfg->heartbeat_interval_ms); /* a reload may change it */
    check_link(l, l->l, now);
    check_link(l, l->r, now);
}

/* ---- lifecycle ---- */

int links_new(links **out, uv_loop_t *loop, const cfg *c, int me, const links_callbacks *cb,
              void *data)
{
    links *l = calloc(1, sizeof *l);
    if (!l) return RINGD_ENOMEM;
    l->loop = loop;
    l->cfg = c;
    l->me = me;
    l->n = (int)c->n_hosts;
    l->left = (me + l->n - 1) % l->n;
    l->right = (me + 1) % l->n;
    l->cb = *cb;
    l->data = data;
    l->streams = c->streams > 0 ? c->streams : 1;
    l->backoff_ms = c->backoff_initial_ms;
    l->epoch = 1;
    l->r_state = l->n == 1 ? LINK_SELF : LINK_DOWN;
    uv_timer_init(loop, &l->retry);
    uv_timer_init(loop, &l->resume);
    uv_idle_init(loop, &l->flush);
    uv_timer_init(loop, &l->heartbeat);
    l->heartbeat.data = l;
    l->flush.data = l;
    l->retry.data = l;
    l->resume.data = l;
    l->open_handles = 4;
    *out = l;
    return 0;
}

int links_start(links *l, char *err, size_t errlen)
{
    if (l->n == 1) return 0;
    const cfg_host *h = &l->cfg->hosts[l->me];
    char port[8];
    snprintf(port, sizeof port, "%u", h->port);
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(h->node, port, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "cannot resolve this host's address %s: %s", h->address,
                 gai_strerror(rc));
        return RINGD_EINVAL;
    }
    uv_tcp_init(l->loop, &l->listener);
    l->listener.data = l;
    l->listening = 1;
    l->open_handles++;
    rc = uv_tcp_bind(&l->listener, res->ai_addr, 0);
    freeaddrinfo(res);
    if (rc == 0) rc = uv_listen((uv_stream_t *)&l->listener, 128, on_connection);
    if (rc < 0) {
        snprintf(err, errlen, "cannot listen on %s: %s (is another ringd running there?)",
                 h->address, uv_strerror(rc));
        return RINGD_EIO;
    }
    log_info("listening on %s for left neighbour %s", h->address, side_name(l, LINK_LEFT));
    if (!l->has_key)
        log_warn("no secret_file: any host that can reach %s may join the ring; "
                 "set a cluster key in the config",
                 h->address);
    uv_timer_start(&l->heartbeat, on_heartbeat, l->cfg->heartbeat_interval_ms,
                   l->cfg->heartbeat_interval_ms);
    start_connect(l);
    return 0;
}

void links_reset(links *l, const char *why)
{
    if (l->l) conn_close(l->l, why);
    if (l->r) conn_close(l->r, why);
}

void links_close(links *l, void (*done)(void *), void *data)
{
    l->closing = 1;
    l->done = done;
    l->done_data = data;
    links_reset(l, "shutting down");
    while (l->pending)
        conn_close(l->pending, "shutting down");
    if (l->resolving) uv_cancel((uv_req_t *)&l->gai);
    /* These handles are embedded in l: whichever of them or of the
     * connections closes last frees l (handle_closed, conn_closed). */
    close_handle(l, (uv_handle_t *)&l->retry);
    close_handle(l, (uv_handle_t *)&l->resume);
    close_handle(l, (uv_handle_t *)&l->flush);
    close_handle(l, (uv_handle_t *)&l->heartbeat);
    if (l->listening) close_handle(l, (uv_handle_t *)&l->listener);
}

link_state links_state(const links *l, link_side side)
{
    if (l->n == 1) return LINK_SELF;
    if (side == LINK_LEFT) return l->l ? LINK_UP : LINK_DOWN;
    return l->r_state;
}

int links_ready(const links *l)
{
    return l->n == 1 || (l->ready && l->l && l->r && l->r_state == LINK_UP);
}

void links_set_key(links *l, const auth_key *key)
{
    l->key = *key;
    l->has_key = 1;
}

uint32_t links_epoch(const links *l)
{
    return l->epoch;
}

const char *links_state_name(link_state s)
{
    static const char *const names[] = {"down", "connecting", "handshake", "up", "self"};
    return s <= LINK_SELF ? names[s] : "?";
}

const char *links_last_error(const links *l, link_side side)
{
    return side == LINK_LEFT ? l->left_error : l->right_error;
}

void links_get_stats(const links *l, links_stats *out)
{
    *out = l->stats;
}
