/*
 * peer_send.c - a peer's frames out; see peer.h.
 *
 * DATA frames queued during one turn of the loop are written together (one
 * writev for a burst of small segments instead of one each), their payloads
 * straight from the collective's buffer; conn_write() cuts them into stripes
 * on a link of several streams. Each carries a CRC32C unless `checksum:
 * none`, or on a keyed link is sealed instead (peer_protect.c), in the order
 * it is handed to libuv. Control frames go out behind the DATA frames
 * already queued, so that their tags stay in order too.
 */
#include <stdlib.h>
#include <string.h>

#include "peer-internal.h"
#include "proto/bytes.h"
#include "ringd.h"

#define BATCH_MAX 64 /* DATA frames in one write */
#define DATA_CAP (FRAME_HEADER_SIZE + FRAME_DATA_HEADER_SIZE + FRAME_TAG_SIZE)

struct batch {
    uv_write_t req;
    peer *owner;
    int n, nbufs;
    uv_buf_t bufs[3 * BATCH_MAX];
    void *ctx[BATCH_MAX];
    sealed_buf *sealed[BATCH_MAX]; /* encrypted payloads, back to the pool when written */
    uint8_t hdr[BATCH_MAX][DATA_CAP];
    uint8_t tag[BATCH_MAX][FRAME_TAG_SIZE]; /* keyed: the payloads' tags */
};

/* Writes bufs on the link, striped over the connector's streams. req and
 * cb are the caller's, as for uv_write(). */
static int link_write(peer *p, uv_write_t *req, const uv_buf_t *bufs, unsigned n, uv_write_cb cb)
{
    if (!p->c || p->state != LINK_UP) return UV_ENOTCONN;
    return conn_write(p->c, req, bufs, n, cb);
}

static void on_batch_done(uv_write_t *req, int status)
{
    batch *b = (batch *)req;
    peer *p = b->owner;
    for (int i = 0; i < b->n; i++) {
        peer_give_sealed(p, b->sealed[i]);
        p->ops->sent(p->owner, b->ctx[i], status < 0 ? RINGD_ERING : 0);
    }
    free(b);
}

/* Hands the batch to libuv, behind whatever it already writes. */
void peer_flush(peer *p)
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
    peer_flush(h->data);
}

int peer_send_data(peer *p, const frame_data *d, uint32_t epoch, const uint8_t *payload, void *ctx)
{
    if (!p->c || p->state != LINK_UP) return RINGD_ERING;
    sealed_buf *sealed = NULL;
    if (p->keyed && p->fr.out.encrypt && d->length > 0 &&
        !(sealed = peer_take_sealed(p, d->length)))
        return RINGD_ENOMEM;
    if (!p->out) {
        p->out = malloc(sizeof *p->out);
        if (!p->out) {
            peer_give_sealed(p, sealed);
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
                peer_data_crc(payload, d->length, b->hdr[i] + FRAME_HEADER_SIZE));
    b->sealed[i] = sealed;
    if (p->keyed) {
        n = peer_seal_head(p, b->hdr[i], n);
        auth_seal(&p->fr.out, NULL, 0, payload, sealed ? sealed->bytes : NULL, d->length,
                  b->tag[i]);
    }
    b->bufs[b->nbufs++] = uv_buf_init((char *)b->hdr[i], (unsigned)n);
    b->bufs[b->nbufs++] = uv_buf_init((char *)(sealed ? sealed->bytes : payload), d->length);
    if (p->keyed) b->bufs[b->nbufs++] = uv_buf_init((char *)b->tag[i], FRAME_TAG_SIZE);
    b->ctx[i] = ctx;
    p->env.stats->bytes_out += d->length;
    if (b->n == BATCH_MAX) peer_flush(p);
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
    peer_flush(p); /* behind the DATA frames already queued, tags in order */
    if (p->keyed) n = peer_seal_head(p, s->buf, n);
    uv_buf_t b = uv_buf_init((char *)s->buf, (unsigned)n);
    int rc = link_write(p, &s->req, &b, 1, on_control_done);
    if (rc < 0) {
        free(s);
        return conn_error(rc);
    }
    return 0;
}
