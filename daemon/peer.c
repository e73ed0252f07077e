/*
 * peer.c - a link to one other daemon; see peer.h.
 *
 * Writing: DATA frames queued during one turn of the loop are written
 * together (one writev for a burst of small segments instead of one each),
 * their payloads straight from the collective's buffer; conn_write() cuts
 * them into stripes on a link of several streams.
 *
 * Keyed links (a secret_file): once the handshake is done, every frame
 * either way is sealed here, whatever its type, in the order it is handed
 * to libuv, and checked by the reader's guard in the order it is read
 * (PROTOCOL.md, "Frame authentication"). A DATA frame is its header and
 * fixed part with their tag, then the payload (from the collective's
 * buffer; or, encrypted, from a copy) and its tag. A wrong tag closes the
 * link; a payload's also fails its collective with RINGD_EAUTH.
 */
#include "peer.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "net.h"
#include "proto/bytes.h"
#include "ringd.h"

#define BATCH_MAX 64 /* DATA frames in one write */
#define DATA_CAP (FRAME_HEADER_SIZE + FRAME_DATA_HEADER_SIZE + FRAME_TAG_SIZE)
#define CONTROL_CAP (FRAME_HEADER_SIZE + FRAME_MAX_CONTROL_BODY)
#define SEALED_POOL 64 /* encrypted payload buffers kept for reuse */
#define REFUSAL_LOG_MS 60000
#define CONNECT_LOG_MS 30000

/* An encrypted copy of a payload, kept in the peer's pool between uses:
 * allocating and freeing a segment's worth each time costs more than the
 * cipher (glibc returns it to the kernel and faults it back in). */
typedef struct {
    size_t cap;
    uint8_t bytes[];
} sealed_buf;

typedef struct {
    uv_write_t req;
    peer *owner;
    int n, nbufs;
    uv_buf_t bufs[3 * BATCH_MAX];
    void *ctx[BATCH_MAX];
    sealed_buf *sealed[BATCH_MAX]; /* encrypted payloads, back to the pool when written */
    uint8_t hdr[BATCH_MAX][DATA_CAP];
    uint8_t tag[BATCH_MAX][FRAME_TAG_SIZE]; /* keyed: the payloads' tags */
} batch;

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

static void start_connect(peer *p);
static const reader_ops link_ops;

const char *link_state_name(link_state s)
{
    static const char *const names[] = {"down", "connecting", "handshake", "up", "self"};
    return s <= LINK_SELF ? names[s] : "?";
}

static const char *host_name(const peer *p)
{
    return p->env.cfg->hosts[p->host].name;
}

static int streams(const peer *p)
{
    return p->env.hs->streams;
}

static void set_state(peer *p, link_state s)
{
    p->state = s;
    p->since = uv_now(p->env.loop);
}

/* ---- writing ---- */

/* Writes bufs on the link, striped over the connector's streams. req and
 * cb are the caller's, as for uv_write(). */
static int link_write(peer *p, uv_write_t *req, const uv_buf_t *bufs, unsigned n, uv_write_cb cb)
{
    if (!p->c || p->state != LINK_UP) return UV_ENOTCONN;
    return conn_write(p->c, req, bufs, n, cb);
}

/* A buffer for an encrypted payload of len bytes: from the pool if one is
 * large enough, else new. NULL when out of memory. */
static sealed_buf *take_sealed(peer *p, size_t len)
{
    for (int i = p->n_pool - 1; i >= 0; i--) {
        sealed_buf *s = p->pool[i];
        if (s->cap < len) continue;
        p->pool[i] = p->pool[--p->n_pool];
        return s;
    }
    sealed_buf *s = malloc(sizeof *s + len);
    if (s) s->cap = len;
    return s;
}

static void give_sealed(peer *p, sealed_buf *s)
{
    if (!s) return;
    if (p->n_pool < SEALED_POOL)
        p->pool[p->n_pool++] = s;
    else
        free(s);
}

static void on_batch_done(uv_write_t *req, int status)
{
    batch *b = (batch *)req;
    peer *p = b->owner;
    for (int i = 0; i < b->n; i++) {
        give_sealed(p, b->sealed[i]);
        p->ops->sent(p->owner, b->ctx[i], status < 0 ? RINGD_ERING : 0);
    }
    free(b);
}

/* Hands the batch to libuv, behind whatever it already writes. */
static void flush_batch(peer *p)
{
    batch *b = p->out;
    if (!b) return;
    p->out = NULL;
    uv_idle_stop(&p->flush);
    int rc = link_write(p, &b->req, b->bufs, (unsigned)b->nbufs, on_batch_done);
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

/* Keyed: marks the encoded frame at f (n bytes, header first) as tagged
 * and appends its tag; returns the new length. */
static size_t seal_head(peer *p, uint8_t *f, size_t n)
{
    put_u16(f + 6, (uint16_t)(get_u16(f + 6) | FRAME_FLAG_TAG));
    auth_seal(&p->fr.out, f, n, NULL, NULL, 0, f + n);
    return n + FRAME_TAG_SIZE;
}

int peer_send_data(peer *p, const frame_data *d, uint32_t epoch, const uint8_t *payload, void *ctx)
{
    if (!p->c || p->state != LINK_UP) return RINGD_ERING;
    sealed_buf *sealed = NULL;
    if (p->keyed && p->fr.out.encrypt && d->length > 0 && !(sealed = take_sealed(p, d->length)))
        return RINGD_ENOMEM;
    if (!p->out) {
        p->out = malloc(sizeof *p->out);
        if (!p->out) {
            give_sealed(p, sealed);
            return RINGD_ENOMEM;
        }
        p->out->owner = p;
        p->out->n = p->out->nbufs = 0;
        uv_idle_start(&p->flush, on_flush);
    }
    batch *b = p->out;
    int i = b->n++;
    frame_data stamped = *d;
    stamped.epoch = epoch;
    /* A keyed link's tags cover everything a CRC would. */
    stamped.has_crc = !p->keyed && p->env.cfg->checksum;
    stamped.crc = 0;
    size_t n = (size_t)frame_encode_data(b->hdr[i], DATA_CAP, &stamped);
    if (stamped.has_crc)
        put_u32(b->hdr[i] + FRAME_HEADER_SIZE + FRAME_DATA_CRC_OFFSET,
                data_crc(payload, d->length, b->hdr[i] + FRAME_HEADER_SIZE));
    b->sealed[i] = sealed;
    if (p->keyed) {
        n = seal_head(p, b->hdr[i], n);
        auth_seal(&p->fr.out, NULL, 0, payload, sealed ? sealed->bytes : NULL, d->length,
                  b->tag[i]);
    }
    b->bufs[b->nbufs++] = uv_buf_init((char *)b->hdr[i], (unsigned)n);
    b->bufs[b->nbufs++] =
        uv_buf_init((char *)(sealed ? sealed->bytes : payload), d->length);
    if (p->keyed) b->bufs[b->nbufs++] = uv_buf_init((char *)b->tag[i], FRAME_TAG_SIZE);
    b->ctx[i] = ctx;
    p->env.stats->bytes_out += d->length;
    if (b->n == BATCH_MAX) flush_batch(p);
    return 0;
}

typedef struct {
    uv_write_t req;
    uint8_t buf[];
} control_req;

static void on_control_done(uv_write_t *req, int status)
{
    (void)status; /* a failed link shows on its reads */
    free(req);
}

int peer_send_control(peer *p, const uint8_t *frame, size_t n)
{
    if (!p->c || p->state != LINK_UP) return RINGD_ERING;
    control_req *s = malloc(sizeof *s + n + FRAME_TAG_SIZE);
    if (!s) return RINGD_ENOMEM;
    memcpy(s->buf, frame, n);
    flush_batch(p); /* behind the DATA frames already queued, tags in order */
    if (p->keyed) n = seal_head(p, s->buf, n);
    uv_buf_t b = uv_buf_init((char *)s->buf, (unsigned)n);
    int rc = link_write(p, &s->req, &b, 1, on_control_done);
    if (rc < 0) {
        free(s);
        return conn_error(rc);
    }
    return 0;
}

/* ---- the link's state ---- */

static void on_retry(uv_timer_t *t)
{
    start_connect(t->data);
}

static void schedule_retry(peer *p)
{
    if (p->closing) return;
    uint32_t delay = p->backoff_ms;
    /* Up to 25% jitter, so hosts that failed together do not retry in step. */
    delay += (uint32_t)(rand() % (int)(delay / 4 + 1));
    uint32_t max = p->env.cfg->backoff_max_ms;
    p->backoff_ms = p->backoff_ms * 2 > max ? max : p->backoff_ms * 2;
    uv_timer_start(&p->retry, on_retry, delay, 0);
}

/* The link's stream 0 closed (the others went with it). */
static void on_conn_closed(void *owner, conn *c, const char *why)
{
    peer *p = owner;
    if (c != p->c) return; /* another stream of it, or a replaced link */
    link_state was = p->state;
    p->c = NULL;
    p->keyed = 0;
    set_state(p, LINK_DOWN);
    /* Frames still in the batch go nowhere: flush_batch() reports them as
     * failed now that the link is down. */
    flush_batch(p);
    snprintf(p->error, sizeof p->error, "%s", why);
    p->refused = p->refusing;
    p->refusing = 0;
    if (p->closing) return;
    if (was == LINK_UP) {
        p->env.stats->breaks++;
        p->backoff_ms = p->env.cfg->backoff_initial_ms;
        p->ops->down(p->owner, p, why);
    } else if (p->role == PEER_CONNECTOR) {
        const cfg_host *h = &p->env.cfg->hosts[p->host];
        log_limited(&p->connect_rl, uv_now(p->env.loop), CONNECT_LOG_MS, LOG_WARN,
                    "cannot reach %s %s (%s): %s; retrying", p->what, h->name, h->address, why);
    }
    if (p->role == PEER_CONNECTOR) schedule_retry(p);
}

static void link_up(peer *p)
{
    conn *c = p->c;
    set_state(p, LINK_UP);
    p->error[0] = '\0';
    p->refused = 0;
    snprintf(p->address, sizeof p->address, "%s", c->peer);
    if (p->role == PEER_CONNECTOR) {
        p->backoff_ms = p->env.cfg->backoff_initial_ms;
        log_ratelimit_reset(&p->connect_rl);
        log_ratelimit_reset(&p->refuse_rl);
        if (p->was_up) p->env.stats->reconnects++;
        p->was_up = 1;
    }
    char extra[96] = "";
    if (streams(p) > 1) snprintf(extra, sizeof extra, ", %d TCP streams", streams(p));
    const char *prot = !p->keyed                   ? ""
                       : p->fr.out.encrypt ? ", every frame authenticated, payloads encrypted"
                                           : ", every frame authenticated";
    if (p->keyed && p->fr.out.encrypt)
        snprintf(extra + strlen(extra), sizeof extra - strlen(extra), " (%s)",
                 auth_cipher_name(hs_cipher(p->env.hs)));
    log_info("link %s %s %s (%s) up%s%s", p->role == PEER_CONNECTOR ? "to" : "from", p->what,
             host_name(p), c->peer, prot, extra);
    p->ops->up(p->owner, p);
}

/* ---- frames in ---- */

/* The reader's checks on a keyed link: each tag in the order sealed. */
static int guard_head(void *ctx, const uint8_t *hdr, const uint8_t *body, size_t n,
                      const uint8_t *tag)
{
    auth_dir *in = &((peer *)ctx)->fr.in;
    auth_open_begin(in);
    auth_open_aad(in, hdr, FRAME_HEADER_SIZE);
    auth_open_aad(in, body, n);
    return auth_open_end(in, tag);
}

static void guard_begin(void *ctx)
{
    auth_open_begin(&((peer *)ctx)->fr.in);
}

static void guard_part(void *ctx, uint8_t *b, size_t n)
{
    auth_open_payload(&((peer *)ctx)->fr.in, b, n);
}

static int guard_end(void *ctx, const uint8_t *tag)
{
    return auth_open_end(&((peer *)ctx)->fr.in, tag);
}

static const reader_guard guard = {guard_head, guard_begin, guard_part, guard_end};

/* With a cluster key, the link whose stream 0 is c (its handshake done)
 * gets its frame keys, and c's reader checks every frame from the next on.
 * Returns 0 or RINGD_EIO. */
static int key_link(peer *p, conn *c, auth_role self)
{
    const hs_ctx *x = p->env.hs;
    p->keyed = 0;
    if (!x->key) return 0;
    /* The key comes after the peer (links_set_key()): contexts on first use. */
    if (!p->fr.out.ctx && auth_frames_init(&p->fr) < 0) return RINGD_ENOMEM;
    auth_link link = hs_link(x, &c->hs);
    if (auth_frames_key(&p->fr, x->key, &link, hs_cipher(x), self) < 0) return RINGD_EIO;
    reader_set_guard(&c->rd, &guard, p);
    p->keyed = 1;
    p->have_last = 0;
    return 0;
}

/* "authentication failed on the link from left neighbour b (10.0.0.2:7701): ..." */
static void name_auth_failure(peer *p, conn *c, const char *why, char *out, size_t len)
{
    static const char prefix[] = "authentication failed";
    const char *rest = strncmp(why, prefix, sizeof prefix - 1) == 0 ? why + sizeof prefix - 1 : why;
    snprintf(out, len, "%s on the link %s %s %s (%s)%s", prefix,
             p->role == PEER_CONNECTOR ? "to" : "from", p->what, host_name(p), c->peer, rest);
}

static void on_header(void *owner, int rc, const frame_header *h)
{
    conn *c = owner;
    peer *p = c->owner;
    char why[128];
    if (rc < 0) return; /* the reader fails with the reason */
    int ok;
    if (p->role == PEER_CONNECTOR && !c->welcomed)
        ok = h->type == FRAME_WELCOME;
    else if (p->role == PEER_CONNECTOR && c != p->c)
        ok = 0; /* the other streams carry nothing back */
    else
        ok = h->type == FRAME_PING || (p->accepts & PEER_ACCEPTS(h->type));
    if (ok) return;
    snprintf(why, sizeof why, "unexpected %s frame", frame_type_name(h->type));
    conn_close(c, why);
}

static void open_streams(peer *p);

static void handle_welcome(peer *p, conn *c, const frame_header *hdr, const uint8_t *body)
{
    frame_welcome w;
    const cfg *cf = p->env.cfg;
    if (frame_decode_welcome(hdr, body, &w) < 0) {
        conn_close(c, "malformed WELCOME");
        return;
    }
    uint64_t now = uv_now(p->env.loop);
    if (w.status < 0) {
        char why[FRAME_MAX_TEXT + 96];
        snprintf(why, sizeof why, "refused by %s: %s", host_name(p), w.reason);
        log_limited(&p->refuse_rl, now, REFUSAL_LOG_MS, LOG_ERROR, "%s %s refused the link: %s",
                    p->what, host_name(p), w.reason);
        if (w.status == RINGD_EAUTH) p->env.stats->auth_failures++;
        /* A refusal is a configuration problem; do not hammer the peer. */
        p->backoff_ms = cf->backoff_max_ms;
        snprintf(p->error, sizeof p->error, "%s", why);
        p->refusing = 1;
        conn_close(c, why);
        return;
    }
    if (p->env.hs->key) {
        frame_auth a;
        uint8_t buf[CONTROL_CAP];
        int ok = hs_answer(p->env.hs, &w, &c->hs, &a);
        int n = frame_encode_auth(buf, sizeof buf, &a);
        if (n < 0 || conn_send(c, buf, (size_t)n, 0) < 0) ok = 0;
        if (!ok) {
            char why[256];
            snprintf(why, sizeof why,
                     "authentication failed: %s did not prove it holds this cluster's key "
                     "(are both secret_files identical?)",
                     host_name(p));
            log_limited(&p->refuse_rl, now, REFUSAL_LOG_MS, LOG_ERROR, "%s %s (%s): %s", p->what,
                        host_name(p), c->peer, why);
            p->env.stats->auth_failures++;
            p->backoff_ms = cf->backoff_max_ms;
            p->refusing = 1;
            conn_close(c, why);
            return;
        }
    }
    /* Stream 0's handshake keys the link: the acceptor's next frames on it
     * are tagged. */
    if (c == p->c && key_link(p, c, AUTH_CONNECTOR) < 0) {
        conn_close(c, "cannot derive the link's keys");
        return;
    }
    conn_clear_deadline(c);
    c->welcomed = 1;
    p->ops->welcomed(p->owner, p, &w);
    if (c != p->c) {
        /* Another stream of the link is ready. */
        if (++p->n_up == streams(p)) link_up(p);
        return;
    }
    if (streams(p) > 1) {
        open_streams(p);
        return;
    }
    link_up(p);
}

static void on_control(void *owner, const frame_header *h, const uint8_t *body)
{
    conn *c = owner;
    peer *p = c->owner;
    if (h->type == FRAME_WELCOME)
        handle_welcome(p, c, h, body);
    else if (h->type != FRAME_PING)
        p->ops->control(p->owner, p, h, body);
}

static int on_data(void *owner, const frame_data *d, uint8_t **dst, char *why, size_t len)
{
    conn *c = owner;
    peer *p = c->owner;
    if (p->keyed) {
        p->last_data = *d;
        p->have_last = 1;
    }
    return p->ops->data(p->owner, p, d, dst, why, len);
}

static void on_payload(void *owner, const frame_data *d, uint8_t *dst)
{
    conn *c = owner;
    peer *p = c->owner;
    p->env.stats->bytes_in += d->length;
    uint32_t crc = d->has_crc ? data_crc(dst, d->length, c->rd.body) : 0;
    if (d->has_crc && crc != d->crc) {
        char why[320];
        p->env.stats->checksum_errors++;
        snprintf(why, sizeof why,
                 "checksum mismatch on a %u-byte segment host %s received from %s "
                 "(CRC32C %08x, expected %08x): the data was corrupted in transit",
                 d->length, p->env.cfg->hosts[p->env.hs->me].name, host_name(p), crc, d->crc);
        p->ops->payload(p->owner, p, d, RINGD_ECORRUPT, why);
        return;
    }
    p->ops->payload(p->owner, p, d, 0, NULL);
}

static void on_fail(void *owner, const char *why)
{
    conn *c = owner;
    peer *p = c->owner;
    char msg[640];
    if (!p->keyed || strncmp(why, "authentication failed", 21) != 0) {
        conn_close(c, why);
        return;
    }
    p->env.stats->tag_errors++;
    name_auth_failure(p, c, why, msg, sizeof msg);
    log_error("%s", msg);
    /* A frame dropped, replayed or moved shows as the next one's wrong tag:
     * the collective the link was carrying fails with RINGD_EAUTH (and tells
     * the ring), before the link's loss fails the rest with RINGD_ERING. */
    if (p->have_last) {
        frame_data d = p->last_data;
        p->have_last = 0;
        p->ops->payload(p->owner, p, &d, RINGD_EAUTH, msg);
    }
    conn_close(c, msg);
}

/* A DATA payload with a wrong tag: its collective fails with RINGD_EAUTH,
 * and the link closes (what else on it was changed is not known). */
static void on_forged(void *owner, const frame_data *d, const char *why)
{
    conn *c = owner;
    peer *p = c->owner;
    char msg[640];
    p->env.stats->tag_errors++;
    name_auth_failure(p, c, why, msg, sizeof msg);
    log_error("%s", msg);
    p->ops->payload(p->owner, p, d, RINGD_EAUTH, msg);
    conn_close(c, msg);
}

static const reader_ops link_ops = {on_header, on_control, on_data, on_payload, on_fail, on_forged};

/* ---- the connector ---- */

static void on_connect(uv_connect_t *req, int status)
{
    conn *c = req->data;
    peer *p = c->owner;
    if (c->closing) return;
    if (status < 0) {
        conn_close(c, uv_strerror(status));
        return;
    }
    net_tune_tcp(&c->tcp, p->env.cfg);
    uint32_t epoch = p->ops->hello_epoch(p->owner, p);
    frame_hello h;
    uint8_t buf[CONTROL_CAP];
    if (hs_hello(p->env.hs, p->host, epoch, c->index, c->hs.session, &h, &c->hs) < 0) {
        conn_close(c, "cannot make a random challenge");
        return;
    }
    c->hs.session = h.session;
    int n = frame_encode_hello(buf, sizeof buf, &h);
    if (n < 0 || conn_send(c, buf, (size_t)n, 0) < 0) {
        conn_close(c, "cannot send HELLO");
        return;
    }
    if (c == p->c) set_state(p, LINK_HANDSHAKE);
    conn_start_reading(c);
}

static void connect_to(conn *c, const struct sockaddr *sa)
{
    c->connect_req.data = c;
    int rc = uv_tcp_connect(&c->connect_req, &c->tcp, sa, on_connect);
    if (rc < 0) conn_close(c, uv_strerror(rc));
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    peer *p = req->data;
    conn *c = p->c;
    p->resolving = 0;
    /* The attempt may have timed out meanwhile; no new one starts while a
     * resolution is pending, so a conn here is still this attempt's. */
    if (!p->closing && c && !c->closing) {
        if (status < 0 || !res) {
            char why[192];
            snprintf(why, sizeof why, "cannot resolve %s: %s", p->env.cfg->hosts[p->host].node,
                     uv_strerror(status));
            conn_close(c, why);
        } else {
            net_describe_addr(res->ai_addr, c->peer, sizeof c->peer);
            memcpy(&p->addr, res->ai_addr, res->ai_addrlen);
            connect_to(c, res->ai_addr);
        }
    }
    uv_freeaddrinfo(res);
    lifetime_release(&p->lt);
}

static conn *new_stream(peer *p, int index)
{
    conn *c = conn_new(p->env.loop, &p->lt, &link_ops, p, on_conn_closed);
    if (!c) return NULL;
    c->index = index;
    /* A stream after the first reads exactly its handshake, nothing more. */
    if (index > 0) reader_set_read_ahead(&c->rd, 0);
    conn_deadline(c, p->env.cfg->connect_timeout_ms);
    return c;
}

static void start_connect(peer *p)
{
    if (p->closing || p->c) return;
    if (p->resolving) {
        schedule_retry(p);
        return;
    }
    conn *c = new_stream(p, 0);
    if (!c) {
        schedule_retry(p);
        return;
    }
    p->c = c;
    set_state(p, LINK_CONNECTING);
    c->hs.session = ((uint64_t)(uint32_t)rand() << 32) ^ (uint64_t)(uint32_t)rand() ^ uv_hrtime();
    const cfg_host *h = &p->env.cfg->hosts[p->host];
    char port[8];
    snprintf(port, sizeof port, "%u", h->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    p->gai.data = p;
    p->resolving = 1;
    lifetime_hold(&p->lt);
    int rc = uv_getaddrinfo(p->env.loop, &p->gai, on_resolved, h->node, port, &hints);
    if (rc < 0) {
        p->resolving = 0;
        lifetime_release(&p->lt);
        conn_close(c, uv_strerror(rc));
    }
}

/* Stream 0 is accepted: open the others to the same address, each with its
 * own handshake, under the same session. */
static void open_streams(peer *p)
{
    conn *link = p->c;
    conn_make_link(link, streams(p), 0);
    p->n_up = 1;
    for (int k = 1; k < streams(p); k++) {
        conn *c = new_stream(p, k);
        if (!c) {
            conn_close(link, "out of memory");
            return;
        }
        c->link = link;
        c->hs.session = link->hs.session;
        snprintf(c->peer, sizeof c->peer, "%s", link->peer);
        link->stream[k] = c;
        connect_to(c, (struct sockaddr *)&p->addr);
        if (link->closing) return;
    }
}

/* ---- the acceptor ---- */

void peer_accept(peer *p, conn *c)
{
    /* A host that reconnects replaces its old connection, which may be a
     * half-open leftover from before it restarted. */
    if (p->c) conn_close(p->c, "replaced by a new connection from the same host");
    conn_adopt(c, &p->lt, &link_ops, p, on_conn_closed);
    if (key_link(p, c, AUTH_ACCEPTOR) < 0) {
        conn_close(c, "cannot derive the link's keys");
        return;
    }
    conn_clear_deadline(c);
    net_tune_tcp(&c->tcp, p->env.cfg);
    c->last_read = uv_now(p->env.loop);
    if (streams(p) > 1) {
        conn_make_link(c, streams(p), 1);
        reader_set_read_ahead(&c->rd, 1);
    }
    p->c = c;
    link_up(p);
}

void peer_attach(peer *p, conn *c)
{
    conn *link = p->c;
    int k = c->hs.stream;
    if (!link || link->closing || link->hs.session != c->hs.session || k == 0 || link->stream[k]) {
        conn_close(c, "a stream of no link this host has");
        return;
    }
    conn_adopt(c, &p->lt, &link_ops, p, on_conn_closed);
    conn_clear_deadline(c);
    net_tune_tcp(&c->tcp, p->env.cfg);
    c->index = k;
    conn_attach_stream(link, c);
}

/* ---- lifecycle ---- */

static void on_resume(uv_timer_t *t)
{
    peer *p = t->data;
    if (p->c) conn_resume(p->c);
}

void peer_resume(peer *p)
{
    if (p->c && reader_paused(&p->c->rd)) uv_timer_start(&p->resume, on_resume, 0, 0);
}

static void peer_free(void *data)
{
    peer *p = data;
    lifetime *owner = p->env.lt;
    auth_frames_free(&p->fr);
    while (p->n_pool > 0)
        free(p->pool[--p->n_pool]);
    free(p);
    lifetime_release(owner);
}

peer *peer_new(const net_env *env, const peer_ops *ops, void *owner, int host, peer_role role,
               unsigned accepts)
{
    peer *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->env = *env;
    p->ops = ops;
    p->owner = owner;
    p->host = host;
    p->role = role;
    p->accepts = accepts;
    p->state = LINK_DOWN;
    p->since = uv_now(env->loop);
    p->backoff_ms = env->cfg->backoff_initial_ms;
    int n = (int)env->cfg->n_hosts, me = env->hs->me;
    if (env->hs->mode == HS_STAR)
        p->what = role == PEER_CONNECTOR ? "star root" : "star leaf";
    else
        p->what = host == (me + 1) % n ? "right neighbour" : "left neighbour";
    uv_timer_init(env->loop, &p->retry);
    uv_timer_init(env->loop, &p->resume);
    uv_idle_init(env->loop, &p->flush);
    p->retry.data = p->resume.data = p->flush.data = p;
    p->lt.held = 0;
    lifetime_hold(env->lt);
    return p;
}

void peer_start(peer *p)
{
    if (p->role == PEER_CONNECTOR) start_connect(p);
}

void peer_reset(peer *p, const char *why)
{
    if (p->c) conn_close(p->c, why);
}

static void close_handle(peer *p, uv_handle_t *h)
{
    h->data = &p->lt;
    lifetime_hold(&p->lt);
    uv_close(h, lifetime_handle_closed);
}

void peer_close(peer *p)
{
    p->closing = 1;
    if (p->c) conn_close(p->c, "shutting down");
    if (p->resolving) uv_cancel((uv_req_t *)&p->gai);
    close_handle(p, (uv_handle_t *)&p->retry);
    close_handle(p, (uv_handle_t *)&p->resume);
    close_handle(p, (uv_handle_t *)&p->flush);
    lifetime_end(&p->lt, peer_free, p);
}

void peer_heartbeat(peer *p, uint64_t now)
{
    conn *c = p->c;
    if (!c || c->closing || p->state != LINK_UP) return;
    uint64_t silent = now - c->last_read;
    if (!reader_paused(&c->rd) && silent >= p->env.cfg->heartbeat_timeout_ms) {
        char why[200];
        snprintf(why, sizeof why,
                 "nothing received for %.1f s (heartbeat_timeout): the host is frozen, "
                 "overloaded or cut off",
                 (double)silent / 1000);
        conn_close(c, why);
        return;
    }
    uint8_t ping[FRAME_HEADER_SIZE];
    int n = frame_encode_ping(ping, sizeof ping);
    peer_send_control(p, ping, (size_t)n);
}

link_state peer_state(const peer *p)
{
    return p->state;
}

int peer_host(const peer *p)
{
    return p->host;
}

const char *peer_error(const peer *p)
{
    return p->error;
}

int peer_refused(const peer *p)
{
    return p->state == LINK_DOWN && p->refused;
}

uint64_t peer_since(const peer *p)
{
    return p->since;
}

const char *peer_address(const peer *p)
{
    return p->state == LINK_UP ? p->address : "";
}
