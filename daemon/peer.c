/*
 * peer.c - a link to one other daemon; see peer.h. This file is the link's
 * life: its state, the connector (resolving, connecting with backoff and
 * jitter, HELLO, the WELCOME and AUTH that answer it, then the link's
 * other streams), the acceptor (the listener hands it streams whose
 * handshake is done), up and down, heartbeats and closing.
 *
 * The rest of a peer: peer_send.c writes its frames (DATA batched into one
 * write per turn of the loop, control frames behind them), peer_recv.c
 * takes the frames the reader hands out, and peer_protect.c protects them
 * (CRC32C, or on keyed links tags and encryption, with the link's keys set
 * here when its stream 0 is up). peer-internal.h is what they share.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net.h"
#include "peer-internal.h"
#include "ringd.h"

#define CONTROL_CAP (FRAME_HEADER_SIZE + FRAME_MAX_CONTROL_BODY)
#define REFUSAL_LOG_MS 60000
#define CONNECT_LOG_MS 30000

static void start_connect(peer *p);

const char *link_state_name(link_state s)
{
    static const char *const names[] = {"down", "connecting", "handshake", "up", "self"};
    return s <= LINK_SELF ? names[s] : "?";
}

const char *peer_host_name(const peer *p)
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

/* ---- the link's state ---- */

static void on_retry(uv_timer_t *t)
{
    start_connect(t->data);
}

static void schedule_retry(peer *p)
{
    if (p->closing || p->held) return;
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
    p->ended++;
    p->keyed = 0;
    set_state(p, LINK_DOWN);
    /* Frames still in the batch go nowhere: peer_flush() reports them as
     * failed now that the link is down. */
    peer_flush(p);
    snprintf(p->error, sizeof p->error, "%s", why);
    p->refused = p->refusing;
    p->refusing = 0;
    if (p->closing) return;
    if (was == LINK_UP) {
        p->env.stats->breaks++;
        p->backoff_ms = p->env.cfg->backoff_initial_ms;
    } else if (p->role == PEER_CONNECTOR) {
        const cfg_host *h = &p->env.cfg->hosts[p->host];
        log_limited(&p->connect_rl, uv_now(p->env.loop), CONNECT_LOG_MS, LOG_WARN,
                    "cannot reach %s %s (%s): %s; retrying", p->what, h->name, h->address, why);
    }
    /* The next attempt is scheduled before the owner hears how this one
     * ended, so that it may bring it forward (peer_retry_now(), or
     * peer_set_host() to another host) without the backoff undoing that. */
    if (p->role == PEER_CONNECTOR) schedule_retry(p);
    if (was == LINK_UP)
        p->ops->down(p->owner, p, why);
    else if (p->role == PEER_CONNECTOR && p->ops->failed)
        p->ops->failed(p->owner, p);
}

static void link_up(peer *p)
{
    conn *c = p->c;
    set_state(p, LINK_UP);
    p->error[0] = '\0';
    p->refused = 0;
    snprintf(p->address, sizeof p->address, "%s", c->peer);
    c->silence_ms = p->env.cfg->heartbeat_timeout_ms;
    if (p->role == PEER_CONNECTOR) {
        p->backoff_ms = p->env.cfg->backoff_initial_ms;
        log_ratelimit_reset(&p->connect_rl);
        log_ratelimit_reset(&p->refuse_rl);
        if (p->was_up) p->env.stats->reconnects++;
        p->was_up = 1;
    }
    char extra[96] = "";
    if (streams(p) > 1) snprintf(extra, sizeof extra, ", %d TCP streams", streams(p));
    const char *prot = !p->keyed           ? ""
                       : p->fr.out.encrypt ? ", every frame authenticated, payloads encrypted"
                                           : ", every frame authenticated";
    if (p->keyed && p->fr.out.encrypt)
        snprintf(extra + strlen(extra), sizeof extra - strlen(extra), " (%s)",
                 auth_cipher_name(hs_cipher(p->env.hs)));
    log_info("link %s %s %s (%s) up%s%s", p->role == PEER_CONNECTOR ? "to" : "from", p->what,
             peer_host_name(p), c->peer, prot, extra);
    p->ops->up(p->owner, p);
}

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
    h.cut = p->cut;
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
    conn *c = conn_new(p->env.loop, &p->lt, &peer_link_ops, p, on_conn_closed);
    if (!c) return NULL;
    c->index = index;
    /* A stream after the first reads exactly its handshake, nothing more. */
    if (index > 0) reader_set_read_ahead(&c->rd, 0);
    conn_deadline(c, p->env.cfg->connect_timeout_ms);
    return c;
}

static void start_connect(peer *p)
{
    if (p->closing || p->held || p->c) return;
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

/* The acceptor's WELCOME: refused, or accepted (then, with a cluster key,
 * AUTH answers its challenge and the link gets its frame keys). */
void peer_handle_welcome(peer *p, conn *c, const frame_header *hdr, const uint8_t *body)
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
        snprintf(why, sizeof why, "refused by %s: %s", peer_host_name(p), w.reason);
        log_limited(&p->refuse_rl, now, REFUSAL_LOG_MS, LOG_ERROR, "%s %s refused the link: %s",
                    p->what, peer_host_name(p), w.reason);
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
                     peer_host_name(p));
            log_limited(&p->refuse_rl, now, REFUSAL_LOG_MS, LOG_ERROR, "%s %s (%s): %s", p->what,
                        peer_host_name(p), c->peer, why);
            p->env.stats->auth_failures++;
            p->backoff_ms = cf->backoff_max_ms;
            p->refusing = 1;
            conn_close(c, why);
            return;
        }
    }
    /* Stream 0's handshake keys the link: the acceptor's next frames on it
     * are tagged. */
    if (c == p->c && peer_key_link(p, c, AUTH_CONNECTOR) < 0) {
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

/* ---- the acceptor ---- */

void peer_accept(peer *p, conn *c)
{
    /* A host that reconnects replaces its old connection, which may be a
     * half-open leftover from before it restarted. */
    if (p->c) conn_close(p->c, "replaced by a new connection from the same host");
    conn_adopt(c, &p->lt, &peer_link_ops, p, on_conn_closed);
    if (peer_key_link(p, c, AUTH_ACCEPTOR) < 0) {
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
    conn_adopt(c, &p->lt, &peer_link_ops, p, on_conn_closed);
    conn_clear_deadline(c);
    net_tune_tcp(&c->tcp, p->env.cfg);
    c->index = k;
    conn_attach_stream(link, c);
}

/* ---- lifecycle ---- */

static void peer_free(void *data)
{
    peer *p = data;
    lifetime *owner = p->env.lt;
    peer_protect_free(p);
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

/* A connector tries again now, from the first backoff step. */
static void retry_now(peer *p)
{
    p->backoff_ms = p->env.cfg->backoff_initial_ms;
    if (p->role == PEER_CONNECTOR && !p->closing) uv_timer_start(&p->retry, on_retry, 0, 0);
}

void peer_set_host(peer *p, int host, const char *why)
{
    if (p->host == host) return;
    if (p->c) conn_close(p->c, why);
    p->host = host;
    p->refused = 0;
    p->error[0] = '\0';
    log_ratelimit_reset(&p->connect_rl);
    log_ratelimit_reset(&p->refuse_rl);
    retry_now(p); /* a new host: not after the old one's backoff */
}

void peer_retry_now(peer *p)
{
    if (!p->c && !p->held) retry_now(p);
}

void peer_set_cut(peer *p, int cut)
{
    p->cut = cut;
}

void peer_hold(peer *p, int hold, const char *why)
{
    p->held = hold;
    if (hold) {
        uv_timer_stop(&p->retry);
        if (p->c) conn_close(p->c, why);
    } else {
        retry_now(p);
    }
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

/* A tick this much later than its interval follows a stall of the
 * process: a quarter of heartbeat_timeout, or the interval if longer. */
static uint64_t stall_ms(const cfg *c)
{
    uint64_t q = c->heartbeat_timeout_ms / 4;
    return q > c->heartbeat_interval_ms ? q : c->heartbeat_interval_ms;
}

void peer_clock_tick(peer_clock *k, uint64_t now, const cfg *c)
{
    /* A reload's new interval is the timer's two ticks later (libuv re-arms
     * a timer before its callback sets the next repeat). */
    uint64_t every = c->heartbeat_interval_ms;
    for (int i = 0; i < 2; i++)
        if (k->every[i] > every) every = k->every[i];
    k->every[1] = k->every[0];
    k->every[0] = c->heartbeat_interval_ms;
    uint64_t late = now - k->last > every ? now - k->last - every : 0;
    k->last = now;
    k->stalled_ms = late >= stall_ms(c) ? late : 0;
    if (k->stalled_ms)
        log_limited(&k->rl, now, 10000, LOG_WARN,
                    "heartbeat %.1f s late (due every %.1f s): this process was stalled (the "
                    "machine overloaded, paused or swapping, or the loop blocked); a link "
                    "silent for heartbeat_timeout (%.1f s) is closed",
                    (double)late / 1000, (double)c->heartbeat_interval_ms / 1000,
                    (double)c->heartbeat_timeout_ms / 1000);
}

void peer_heartbeat(peer *p, uint64_t now, const peer_clock *k)
{
    conn *c = p->c;
    if (!c || c->closing || p->state != LINK_UP) return;
    uint64_t silent = now - c->last_read;
    c->silence_ms = p->env.cfg->heartbeat_timeout_ms; /* a reload may change it */
    if (!reader_paused(&c->rd) && silent >= p->env.cfg->heartbeat_timeout_ms) {
        char why[256];
        if (k->stalled_ms) /* Its bytes may be waiting unread: timers run before I/O. */
            snprintf(why, sizeof why,
                     "nothing received for %.1f s (heartbeat_timeout), %.1f s of it while the "
                     "host that noticed was stalled itself (overloaded, paused or swapping): the "
                     "stall is there, or on both",
                     (double)silent / 1000, (double)k->stalled_ms / 1000);
        else
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

uint64_t peer_ended(const peer *p)
{
    return p->ended;
}

uint64_t peer_since(const peer *p)
{
    return p->since;
}

const char *peer_address(const peer *p)
{
    return p->state == LINK_UP ? p->address : "";
}
