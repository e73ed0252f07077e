/*
 * peer_recv.c - a peer's frames in: the reader's callbacks on every stream
 * of a link (reader.h), and pausing.
 *
 * A frame of a type the link does not take closes it. The connector's
 * WELCOME goes to peer.c; ABORT and EPOCH, the DATA headers and their
 * payloads go to the owner (peer_ops), each payload checked against its
 * CRC32C first if it has one. On a keyed link the reader's guard
 * (peer_protect.c) has checked every tag before anything comes here; a
 * wrong one fails the collective it belongs to with RINGD_EAUTH and closes
 * the link.
 */
#include <stdio.h>
#include <string.h>

#include "peer-internal.h"
#include "ringd.h"

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

static void on_control(void *owner, const frame_header *h, const uint8_t *body)
{
    conn *c = owner;
    peer *p = c->owner;
    if (h->type == FRAME_WELCOME)
        peer_handle_welcome(p, c, h, body);
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
    uint32_t crc = d->has_crc ? peer_data_crc(dst, d->length, c->rd.body) : 0;
    if (d->has_crc && crc != d->crc) {
        char why[320];
        p->env.stats->checksum_errors++;
        snprintf(why, sizeof why,
                 "checksum mismatch on a %u-byte segment host %s received from %s "
                 "(CRC32C %08x, expected %08x): the data was corrupted in transit",
                 d->length, p->env.cfg->hosts[p->env.hs->me].name, peer_host_name(p), crc, d->crc);
        p->ops->payload(p->owner, p, d, RINGD_ECORRUPT, why);
        return;
    }
    p->ops->payload(p->owner, p, d, 0, NULL);
}

static void on_fail(void *owner, int code, const char *why)
{
    conn *c = owner;
    peer *p = c->owner;
    char msg[640];
    if (code != RINGD_EAUTH) {
        conn_close(c, why);
        return;
    }
    p->env.stats->tag_errors++;
    peer_name_auth_failure(p, c, why, msg, sizeof msg);
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
    peer_name_auth_failure(p, c, why, msg, sizeof msg);
    log_error("%s", msg);
    p->ops->payload(p->owner, p, d, RINGD_EAUTH, msg);
    conn_close(c, msg);
}

const reader_ops peer_link_ops = {on_header, on_control, on_data, on_payload, on_fail, on_forged};

/* ---- pausing ---- */

static void on_resume(uv_timer_t *t)
{
    peer *p = t->data;
    if (p->c) conn_resume(p->c);
}

void peer_resume(peer *p)
{
    if (p->c && reader_paused(&p->c->rd)) uv_timer_start(&p->resume, on_resume, 0, 0);
}
