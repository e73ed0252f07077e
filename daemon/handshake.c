/*
 * handshake.c - HELLO, WELCOME and AUTH; see handshake.h.
 */
#include "handshake.h"

#include <stdio.h>
#include <string.h>

#include "ringd.h"

static int little_endian(void)
{
    int one = 1;
    return *(const uint8_t *)&one == 1;
}

auth_cipher hs_cipher(const hs_ctx *x)
{
    /* cfg_cipher and auth_cipher number the ciphers alike. */
    _Static_assert((int)CFG_CIPHER_AES_256_GCM == (int)AUTH_AES_256_GCM &&
                       (int)CFG_CIPHER_CHACHA20_POLY1305 == (int)AUTH_CHACHA20_POLY1305,
                   "one numbering of ciphers");
    return x->key ? (auth_cipher)x->cfg->encryption : AUTH_MAC;
}

auth_link hs_link(const hs_ctx *x, const hs_state *st)
{
    return (auth_link){.cluster = x->cfg->cluster,
                       .connector = st->connector,
                       .acceptor = st->acceptor,
                       .connector_epoch = st->hello_epoch,
                       .acceptor_epoch = st->welcome_epoch,
                       .connector_nonce = st->connector_nonce,
                       .acceptor_nonce = st->acceptor_nonce};
}

int hs_hello(const hs_ctx *x, int to, uint32_t epoch, int stream, uint64_t session,
             frame_hello *out, hs_state *st)
{
    memset(out, 0, sizeof *out);
    memset(st, 0, sizeof *st);
    out->n_hosts = (uint32_t)x->cfg->n_hosts;
    out->from_pos = (uint32_t)x->me;
    out->to_pos = (uint32_t)to;
    out->epoch = epoch;
    out->auth = x->key != NULL;
    out->stream = (uint8_t)stream;
    out->streams = (uint8_t)x->streams;
    out->session = session;
    out->cipher = (uint8_t)hs_cipher(x);
    snprintf(out->cluster, sizeof out->cluster, "%s", x->cfg->cluster);
    snprintf(out->from_name, sizeof out->from_name, "%s", x->cfg->hosts[x->me].name);
    if (x->key && auth_nonce(out->nonce) < 0) return RINGD_EIO;
    st->connector = out->from_pos;
    st->acceptor = out->to_pos;
    st->hello_epoch = epoch;
    memcpy(st->connector_nonce, out->nonce, FRAME_NONCE_SIZE);
    return 0;
}

/* Who may connect to this host: its left neighbour on the ring (in an
 * elastic ring any other host, which may be its left neighbour now), any
 * other host on the star's root. */
static int check_sender(const hs_ctx *x, const frame_hello *h, char *why, size_t len)
{
    const cfg *c = x->cfg;
    int n = (int)c->n_hosts, me = x->me;
    const char *self = c->hosts[me].name;
    if (x->mode == HS_STAR) {
        if (h->epoch != HS_STAR_EPOCH) {
            snprintf(why, len,
                     "peer \"%s\" runs algorithm ring, this host (%s) algorithm star; are the "
                     "configs of both identical?",
                     h->from_name, self);
            return RINGD_EMISMATCH;
        }
        if (h->n_hosts != (uint32_t)n || h->from_pos >= (uint32_t)n ||
            h->from_pos == (uint32_t)me || h->to_pos != (uint32_t)me ||
            strcmp(h->from_name, c->hosts[h->from_pos].name) != 0) {
            snprintf(why, len,
                     "hosts disagree: peer \"%s\" says it is host %u of %u sending to host %u, "
                     "but this star root (%s, %d of %d) does not know it so; are the hosts "
                     "lists of both configs identical?",
                     h->from_name, h->from_pos, h->n_hosts, h->to_pos, self, me, n);
            return RINGD_EMISMATCH;
        }
        return 0;
    }
    if (h->epoch == HS_STAR_EPOCH) {
        snprintf(why, len,
                 "peer \"%s\" runs algorithm star, this host (%s) algorithm ring; are the "
                 "configs of both identical?",
                 h->from_name, self);
        return RINGD_EMISMATCH;
    }
    int left = (me + n - 1) % n;
    const char *left_name = c->hosts[left].name;
    if (x->elastic && h->n_hosts == (uint32_t)n && h->from_pos < (uint32_t)n &&
        h->from_pos != (uint32_t)me && h->to_pos == (uint32_t)me &&
        strcmp(h->from_name, c->hosts[h->from_pos].name) == 0)
        return 0;
    if (h->n_hosts != (uint32_t)n || h->from_pos != (uint32_t)left || h->to_pos != (uint32_t)me ||
        strcmp(h->from_name, left_name) != 0) {
        snprintf(why, len,
                 "ring positions disagree: peer \"%s\" says it is host %u of %u sending to "
                 "host %u, but this host (%s, %d of %d) expects its left neighbour \"%s\" (%d); "
                 "are the hosts lists of both configs identical?",
                 h->from_name, h->from_pos, h->n_hosts, h->to_pos, self, me, n, left_name, left);
        return RINGD_EMISMATCH;
    }
    return 0;
}

int hs_check_hello(const hs_ctx *x, const frame_header *hdr, const frame_hello *h, char *why,
                   size_t whylen)
{
    if (!!(hdr->flags & FRAME_FLAG_LITTLE_ENDIAN) != little_endian()) {
        snprintf(why, whylen, "byte order differs from this host's");
        return RINGD_EMISMATCH;
    }
    if (strcmp(h->cluster, x->cfg->cluster) != 0) {
        snprintf(why, whylen, "cluster \"%s\" is not ours (\"%s\")", h->cluster, x->cfg->cluster);
        return RINGD_EMISMATCH;
    }
    int rc = check_sender(x, h, why, whylen);
    if (rc < 0) return rc;
    if ((h->streams ? h->streams : 1) != x->streams) {
        snprintf(why, whylen,
                 "\"%s\" uses %u TCP streams per link and this host %d; set the same streams "
                 "in every host's configuration",
                 h->from_name, h->streams, x->streams);
        return RINGD_EMISMATCH;
    }
    if (x->key && h->auth && h->cipher != hs_cipher(x)) {
        snprintf(why, whylen,
                 "\"%s\" uses encryption %s and this host %s; set the same encryption in every "
                 "host's configuration",
                 h->from_name, h->cipher <= AUTH_CHACHA20_POLY1305 ? auth_cipher_name(h->cipher)
                                                                    : "(unknown)",
                 auth_cipher_name(hs_cipher(x)));
        return RINGD_EMISMATCH;
    }
    if ((x->key != NULL) != h->auth) {
        snprintf(why, whylen,
                 x->key ? "this host requires a cluster key (secret_file) and \"%s\" has none"
                        : "\"%s\" uses a cluster key (secret_file) and this host has none",
                 h->from_name);
        return RINGD_EAUTH;
    }
    return 0;
}

int hs_welcome(const hs_ctx *x, const frame_hello *h, uint32_t epoch, frame_welcome *out,
               hs_state *st)
{
    memset(out, 0, sizeof *out);
    memset(st, 0, sizeof *st);
    out->epoch = epoch;
    out->auth = x->key != NULL;
    st->connector = h->from_pos;
    st->acceptor = (uint32_t)x->me;
    st->hello_epoch = h->epoch;
    st->welcome_epoch = epoch;
    st->stream = h->stream;
    st->session = h->session;
    st->cut = h->cut;
    snprintf(st->claimed, sizeof st->claimed, "%s", h->from_name);
    if (!x->key) return 0;
    memcpy(st->connector_nonce, h->nonce, FRAME_NONCE_SIZE);
    if (auth_nonce(out->nonce) < 0) return RINGD_EIO;
    memcpy(st->acceptor_nonce, out->nonce, FRAME_NONCE_SIZE);
    auth_link link = hs_link(x, st);
    auth_answer(x->key, AUTH_ACCEPTOR, &link, out->mac);
    return 0;
}

void hs_refusal(int code, const char *reason, uint32_t epoch, frame_welcome *out)
{
    memset(out, 0, sizeof *out);
    out->status = code;
    out->epoch = epoch;
    snprintf(out->reason, sizeof out->reason, "%s", reason);
}

int hs_answer(const hs_ctx *x, const frame_welcome *w, hs_state *st, frame_auth *auth)
{
    memcpy(st->acceptor_nonce, w->nonce, FRAME_NONCE_SIZE);
    st->welcome_epoch = w->epoch;
    auth_link link = hs_link(x, st);
    int ok = w->auth && auth_check(x->key, AUTH_ACCEPTOR, &link, w->mac);
    auth_answer(x->key, AUTH_CONNECTOR, &link, auth->mac);
    return ok;
}

int hs_check_auth(const hs_ctx *x, const hs_state *st, const frame_auth *a)
{
    auth_link link = hs_link(x, st);
    return auth_check(x->key, AUTH_CONNECTOR, &link, a->mac);
}
