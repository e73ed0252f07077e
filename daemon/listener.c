/*
 * listener.c - a daemon's TCP port and the acceptor's handshake; see
 * listener.h.
 */
#include "listener.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "ringd.h"

#define REFUSAL_LOG_MS 60000
#define CONTROL_CAP (FRAME_HEADER_SIZE + FRAME_MAX_CONTROL_BODY)

/* A connection whose handshake is not done. */
typedef struct pending {
    listener *l;
    conn *c;
    struct sockaddr_storage from_addr; /* the source, IPv4-mapped read as IPv4 */
    int expected;      /* from an address of a host that may connect here */
    int greeted;       /* its HELLO arrived */
    uint64_t since;    /* uv_now() at accept */
    int awaiting_auth; /* WELCOME sent, AUTH expected */
    int refusing;      /* a refusal is logged and on its way: close quietly */
    int heard;         /* a frame header arrived */
    int from;          /* HELLO's from_pos, once accepted */
    struct pending *next;
} pending;

struct listener {
    net_env env;
    const listener_ops *ops;
    void *owner;
    uv_tcp_t tcp;
    int listening;
    pending *pending;
    int n_pending;
    /* A connection closed here is freed two loop turns later (conn.c);
     * accepts go on while the backlog refills, so a turn takes at most
     * LISTENER_ACCEPT_BURST: a flood cannot pile up closing ones. */
    uv_idle_t turn;
    int accepted; /* this turn */
    int deferred; /* a connection waits in libuv for the next turn */
    int open_handles;
    log_ratelimit refuse_rl, drop_rl;
    /* Addresses of the hosts that may connect here, resolved at start. */
    struct sockaddr_storage *allowed;
    int n_allowed;
};

static const reader_ops pending_ops;

static uint64_t now(const listener *l)
{
    return uv_now(l->env.loop);
}

/* Takes p off the list and frees it. */
static void forget(pending *p)
{
    listener *l = p->l;
    for (pending **q = &l->pending; *q; q = &(*q)->next) {
        if (*q == p) {
            *q = p->next;
            l->n_pending--;
            break;
        }
    }
    free(p);
}

static void on_pending_closed(void *owner, conn *c, const char *why)
{
    pending *p = owner;
    listener *l = p->l;
    /* A host of the ring that connects and closes without a byte probes
     * whether it can reach this one (probe.h): nothing wrong. */
    if (!p->refusing && !l->env.lt->closing && p->expected && !p->heard) {
        log_debug("dropped connection from %s before its handshake: %s (no byte came: a "
                  "reachability probe or a port check)",
                  c->peer, why);
        forget(p);
        return;
    }
    /* A stranger's bytes: said once a minute at warn, every time at debug,
     * so that a port scanner cannot flood the log. */
    if (!p->refusing && !l->env.lt->closing)
        log_limited(&l->drop_rl, now(l), REFUSAL_LOG_MS, LOG_WARN,
                    "dropped connection from %s before its handshake: %s", c->peer, why);
    forget(p);
}

/* Answers a HELLO with a refusal and closes once it is out. */
static void refuse(pending *p, int code, const char *reason, uint32_t epoch)
{
    listener *l = p->l;
    log_limited(&l->refuse_rl, now(l), REFUSAL_LOG_MS, LOG_WARN, "refused connection from %s: %s",
                p->c->peer, reason);
    char text[FRAME_MAX_TEXT + 96];
    snprintf(text, sizeof text, "refused a connection from %s: %s", p->c->peer, reason);
    l->ops->refused(l->owner, text);
    frame_welcome w;
    uint8_t buf[CONTROL_CAP];
    hs_refusal(code, reason, epoch, &w);
    int n = frame_encode_welcome(buf, sizeof buf, &w);
    p->refusing = 1;
    reader_stop(&p->c->rd);
    conn_stop_reading(p->c);
    if (n < 0 || conn_send(p->c, buf, (size_t)n, 1) < 0) conn_close(p->c, "refused");
}

/* The handshake is done: the connection goes to the owner. */
static void hand_over(pending *p)
{
    listener *l = p->l;
    conn *c = p->c;
    int from = p->from;
    /* Orphaned first: if the owner closes it, nobody here hears of it. */
    conn_adopt(c, l->env.lt, &pending_ops, NULL, NULL);
    forget(p);
    l->ops->accepted(l->owner, c, from);
}

static void handle_hello(pending *p, const frame_header *hdr, const uint8_t *body)
{
    listener *l = p->l;
    const hs_ctx *hs = l->env.hs;
    frame_hello h;
    char why[FRAME_MAX_TEXT];
    p->greeted = 1;
    /* The rest of the handshake gets the rest of connect_timeout. */
    conn_deadline(p->c, l->env.cfg->connect_timeout_ms);
    if (frame_decode_hello(hdr, body, &h) < 0) {
        conn_close(p->c, "malformed HELLO");
        return;
    }
    int rc = hs_check_hello(hs, hdr, &h, why, sizeof why);
    if (rc == 0 && h.stream == 0 && l->ops->admit)
        rc = l->ops->admit(l->owner, &h, why, sizeof why);
    if (rc < 0) {
        if (rc == RINGD_EAUTH) l->env.stats->auth_failures++;
        refuse(p, rc, why, l->ops->welcome_epoch(l->owner, NULL));
        return;
    }
    frame_welcome w;
    uint8_t buf[CONTROL_CAP];
    if (hs_welcome(hs, &h, l->ops->welcome_epoch(l->owner, &h), &w, &p->c->hs) < 0) {
        conn_close(p->c, "cannot make a random challenge");
        return;
    }
    int n = frame_encode_welcome(buf, sizeof buf, &w);
    if (n < 0 || conn_send(p->c, buf, (size_t)n, 0) < 0) {
        conn_close(p->c, "cannot send WELCOME");
        return;
    }
    p->from = (int)h.from_pos;
    /* With several streams, a byte past the handshake belongs to the link's
     * stripes: read the rest of the handshake exactly, nothing ahead. */
    if (hs->streams > 1) reader_set_read_ahead(&p->c->rd, 0);
    if (hs->key) {
        p->awaiting_auth = 1; /* not a link until it answers our challenge */
        return;
    }
    hand_over(p);
}

static void handle_auth(pending *p, const frame_header *hdr, const uint8_t *body)
{
    listener *l = p->l;
    frame_auth a;
    if (frame_decode_auth(hdr, body, &a) < 0) {
        conn_close(p->c, "malformed AUTH");
        return;
    }
    if (!hs_check_auth(l->env.hs, &p->c->hs, &a)) {
        log_limited(&l->refuse_rl, now(l), REFUSAL_LOG_MS, LOG_WARN,
                    "refused connection from %s claiming to be \"%s\": authentication failed "
                    "(wrong cluster key; are both secret_files identical?)",
                    p->c->peer, p->c->hs.claimed);
        char text[256];
        snprintf(text, sizeof text,
                 "a connection from %s claiming to be \"%s\" failed authentication (wrong "
                 "cluster key)",
                 p->c->peer, p->c->hs.claimed);
        l->ops->refused(l->owner, text);
        l->env.stats->auth_failures++;
        p->refusing = 1; /* logged here, once */
        conn_close(p->c, "authentication failed");
        return;
    }
    hand_over(p);
}

static void on_header(void *owner, int rc, const frame_header *h)
{
    conn *c = owner;
    pending *p = c->owner;
    char why[192];
    p->heard = 1;
    if (rc == FRAME_EVERSION) {
        snprintf(why, sizeof why,
                 "peer speaks protocol version %u, this ringd speaks %u; run the same ringd "
                 "version on every host",
                 h->version, FRAME_VERSION);
        refuse(p, RINGD_EVERSION, why, p->l->ops->welcome_epoch(p->l->owner, NULL));
        return;
    }
    if (rc < 0) return; /* the reader fails with the reason */
    if (h->type == (p->awaiting_auth ? FRAME_AUTH : FRAME_HELLO)) return;
    snprintf(why, sizeof why, "unexpected %s frame", frame_type_name(h->type));
    conn_close(c, why);
}

static void on_control(void *owner, const frame_header *h, const uint8_t *body)
{
    conn *c = owner;
    pending *p = c->owner;
    if (h->type == FRAME_HELLO)
        handle_hello(p, h, body);
    else
        handle_auth(p, h, body);
}

static int on_data(void *owner, const frame_data *d, uint8_t **dst, char *why, size_t len)
{
    (void)owner, (void)d, (void)dst;
    snprintf(why, len, "DATA before the handshake");
    return RINGD_EPROTO;
}

static void on_payload(void *owner, const frame_data *d, uint8_t *dst)
{
    (void)owner, (void)d, (void)dst;
}

static void on_fail(void *owner, int code, const char *why)
{
    char msg[320];
    if (code == RINGD_EAUTH) {
        snprintf(msg, sizeof msg, "authentication failed: %s", why);
        why = msg;
    }
    conn_close(owner, why);
}

static const reader_ops pending_ops = {on_header, on_control, on_data, on_payload, on_fail};

/* ---- who gets a slot ---- */

/* The IP of sa alone (port zeroed), IPv4-mapped IPv6 as IPv4, so that one
 * machine has one form. */
static void normalise(const struct sockaddr *sa, struct sockaddr_storage *out)
{
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    memset(out, 0, sizeof *out);
    if (sa->sa_family == AF_INET) {
        struct sockaddr_in *o = (struct sockaddr_in *)out;
        o->sin_family = AF_INET;
        o->sin_addr = ((const struct sockaddr_in *)sa)->sin_addr;
    } else if (sa->sa_family == AF_INET6) {
        const uint8_t *b = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
        if (memcmp(b, mapped, sizeof mapped) == 0) {
            struct sockaddr_in *o = (struct sockaddr_in *)out;
            o->sin_family = AF_INET;
            memcpy(&o->sin_addr, b + 12, 4);
        } else {
            struct sockaddr_in6 *o = (struct sockaddr_in6 *)out;
            o->sin6_family = AF_INET6;
            memcpy(o->sin6_addr.s6_addr, b, 16);
        }
    }
}

static int same_ip(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family) return 0;
    if (a->ss_family == AF_INET)
        return memcmp(&((const struct sockaddr_in *)a)->sin_addr,
                      &((const struct sockaddr_in *)b)->sin_addr, 4) == 0;
    if (a->ss_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                      &((const struct sockaddr_in6 *)b)->sin6_addr, 16) == 0;
    return 0;
}

/* Resolves the hosts that may connect here: the ring's left neighbour, or
 * every other host on the star's root. A name that does not resolve now
 * only loses the reserved slot, not the right to connect. */
static void resolve_allowed(listener *l)
{
    const cfg *c = l->env.cfg;
    int n = (int)c->n_hosts, me = l->env.hs->me;
    l->allowed = calloc((size_t)n, sizeof *l->allowed);
    if (!l->allowed) return;
    for (int h = 0; h < n; h++) {
        if (h == me || (l->env.hs->mode == HS_RING && !l->env.hs->elastic && h != (me + n - 1) % n))
            continue;
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
        if (getaddrinfo(c->hosts[h].node, NULL, &hints, &res) != 0) continue;
        for (struct addrinfo *a = res; a && l->n_allowed < n; a = a->ai_next)
            normalise(a->ai_addr, &l->allowed[l->n_allowed++]);
        freeaddrinfo(res);
    }
}

static int is_allowed(const listener *l, const struct sockaddr_storage *ss)
{
    for (int i = 0; i < l->n_allowed; i++)
        if (same_ip(&l->allowed[i], ss)) return 1;
    return 0;
}

/* The pending connection to close for a newcomer from an allowed address
 * when every slot is taken: the oldest that has not sent its HELLO (a real
 * daemon sends it at once), else the oldest stranger's; NULL if every slot
 * holds an allowed host's connection in mid-handshake. */
static pending *victim(listener *l, const pending *newcomer)
{
    pending *silent = NULL, *stranger = NULL;
    for (pending *q = l->pending; q; q = q->next) {
        if (q == newcomer || q->c->closing) continue;
        if (!q->greeted && (!silent || q->since <= silent->since)) silent = q;
        if (!q->expected && (!stranger || q->since <= stranger->since)) stranger = q;
    }
    return silent ? silent : stranger;
}

/* Whether newcomer p gets a slot; may close another to make room. */
static int admit(listener *l, pending *p)
{
    int same = 0;
    for (pending *q = l->pending; q; q = q->next)
        if (q != p && !q->c->closing && same_ip(&q->from_addr, &p->from_addr)) same++;
    if (same >= LISTENER_PER_SOURCE && !p->expected) {
        conn_close(p->c, "too many connections from one address awaiting a handshake");
        return 0;
    }
    if (l->n_pending <= LISTENER_MAX_PENDING) return 1;
    pending *v = p->expected ? victim(l, p) : NULL;
    if (!v) {
        conn_close(p->c, "too many connections awaiting a handshake");
        return 0;
    }
    conn_close(v->c, "its slot went to a host of this ring awaiting a handshake");
    return 1;
}

static void on_connection(uv_stream_t *server, int status);

static void on_turn(uv_idle_t *h)
{
    listener *l = h->data;
    l->accepted = 0;
    uv_idle_stop(h);
    if (l->deferred) {
        l->deferred = 0;
        on_connection((uv_stream_t *)&l->tcp, 0); /* libuv polls again once it is accepted */
    }
}

static void on_connection(uv_stream_t *server, int status)
{
    listener *l = server->data;
    if (status < 0 || l->env.lt->closing) return;
    if (l->accepted == LISTENER_ACCEPT_BURST) {
        l->deferred = 1; /* not accepted: libuv stops polling the port until it is */
        return;
    }
    if (l->accepted++ == 0) uv_idle_start(&l->turn, on_turn);
    pending *p = calloc(1, sizeof *p);
    conn *c = p ? conn_new(l->env.loop, l->env.lt, &pending_ops, p, on_pending_closed) : NULL;
    if (!c) {
        free(p);
        return;
    }
    p->l = l;
    p->c = c;
    p->from = -1;
    p->since = now(l);
    p->next = l->pending;
    l->pending = p;
    l->n_pending++;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0) {
        conn_close(c, "accept failed");
        return;
    }
    conn_name_peer(c);
    struct sockaddr_storage ss;
    int len = sizeof ss;
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) == 0) {
        normalise((struct sockaddr *)&ss, &p->from_addr);
        p->expected = is_allowed(l, &p->from_addr);
    }
    /* Bound the memory and the slots a flood of half-open connections can
     * take, and keep a way in for the hosts of this ring. */
    if (!admit(l, p)) return;
    uint64_t hello_ms = l->env.cfg->connect_timeout_ms;
    conn_deadline(c, hello_ms < LISTENER_HELLO_MS ? hello_ms : LISTENER_HELLO_MS);
    conn_start_reading(c);
}

listener *listener_new(const net_env *env, const listener_ops *ops, void *owner)
{
    listener *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    l->env = *env;
    l->ops = ops;
    l->owner = owner;
    return l;
}

/* Why a listen failed, and what to check. */
static const char *listen_hint(int rc)
{
    switch (rc) {
    case UV_EADDRINUSE:
        return "is another ringd running there?";
    case UV_EADDRNOTAVAIL:
        return "that address is not on this machine: is --host right?";
    case UV_EACCES:
        return "ports below 1024 need privileges";
    default:
        return "check the address in the configuration";
    }
}

int listener_start(listener *l, char *err, size_t errlen)
{
    const cfg_host *h = &l->env.cfg->hosts[l->env.hs->me];
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
    resolve_allowed(l);
    uv_tcp_init(l->env.loop, &l->tcp);
    l->tcp.data = l;
    uv_idle_init(l->env.loop, &l->turn);
    l->turn.data = l;
    l->listening = 1;
    lifetime_hold(l->env.lt);
    rc = uv_tcp_bind(&l->tcp, res->ai_addr, 0);
    freeaddrinfo(res);
    if (rc == 0) rc = uv_listen((uv_stream_t *)&l->tcp, 128, on_connection);
    if (rc < 0) {
        snprintf(err, errlen, "cannot listen on %s: %s (%s)", h->address, uv_strerror(rc),
                 listen_hint(rc));
        return RINGD_EIO;
    }
    return 0;
}

static void on_closed(uv_handle_t *h)
{
    listener *l = h->data;
    if (--l->open_handles > 0) return;
    lifetime *lt = l->env.lt;
    free(l->allowed);
    free(l);
    lifetime_release(lt);
}

void listener_close(listener *l)
{
    while (l->pending)
        conn_close(l->pending->c, "shutting down");
    if (l->listening) {
        l->open_handles = 2;
        uv_close((uv_handle_t *)&l->tcp, on_closed);
        uv_close((uv_handle_t *)&l->turn, on_closed);
    } else {
        free(l->allowed);
        free(l);
    }
}
