/*
 * peer_protect.c - what protects a peer's frames: a CRC32C on each DATA
 * frame, or on a keyed link (a secret_file) a tag on every frame and, with
 * encryption, encrypted payloads.
 *
 * Keyed links: once the handshake is done, every frame either way is sealed,
 * whatever its type, in the order it is handed to libuv (peer_send.c), and
 * checked by the reader's guard (below) in the order it is read
 * (PROTOCOL.md, "Frame authentication"). A DATA frame is its header and
 * fixed part with their tag, then the payload (from the collective's
 * buffer; or, encrypted, from a copy) and its tag. A wrong tag closes the
 * link; a payload's also fails its collective with RINGD_EAUTH
 * (peer_recv.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "peer-internal.h"
#include "proto/bytes.h"
#include "ringd.h"

/* ---- checksums ---- */

/* The fixed part counts too, so a flipped bit in wsum or offset is caught. */
uint32_t peer_data_crc(const uint8_t *payload, uint32_t len, const uint8_t *fixed)
{
    uint8_t copy[FRAME_DATA_HEADER_SIZE];
    memcpy(copy, fixed, sizeof copy);
    memset(copy + FRAME_DATA_CRC_OFFSET, 0, 4);
    return crc32c(crc32c(0, payload, len), copy, sizeof copy);
}

/* ---- keyed links ---- */

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

int peer_key_link(peer *p, conn *c, auth_role self)
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

size_t peer_seal_head(peer *p, uint8_t *f, size_t n)
{
    put_u16(f + 6, (uint16_t)(get_u16(f + 6) | FRAME_FLAG_TAG));
    auth_seal(&p->fr.out, f, n, NULL, NULL, 0, f + n);
    return n + FRAME_TAG_SIZE;
}

/* From the pool if one is large enough, else new. */
sealed_buf *peer_take_sealed(peer *p, size_t len)
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

void peer_give_sealed(peer *p, sealed_buf *s)
{
    if (!s) return;
    if (p->n_pool < SEALED_POOL)
        p->pool[p->n_pool++] = s;
    else
        free(s);
}

void peer_name_auth_failure(peer *p, conn *c, const char *why, char *out, size_t len)
{
    snprintf(out, len, "authentication failed on the link %s %s %s (%s): %s",
             p->role == PEER_CONNECTOR ? "to" : "from", p->what, peer_host_name(p), c->peer, why);
}

void peer_protect_free(peer *p)
{
    auth_frames_free(&p->fr);
    while (p->n_pool > 0)
        free(p->pool[--p->n_pool]);
}
