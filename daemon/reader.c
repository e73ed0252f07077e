/*
 * reader.c - the incremental frame reader; see reader.h.
 *
 * A frame is read in pieces: the header, then the body (a DATA frame's fixed
 * part only), then a DATA frame's payload, which goes where the owner says.
 * `need` is the size of the piece being read and `got` how much of it is in.
 * Every complete piece moves the state on and may call the owner, which may
 * stop the reader from within the callback: each loop checks `stopped`.
 */
#include "reader.h"

#include <stdio.h>
#include <string.h>

#include "ringd.h"

/* Skipped payloads land here; nobody reads it, so one sink serves all. */
static uint8_t skip_sink[READER_SKIP_BUF];

static void expect(reader *r, reader_state st, size_t need)
{
    r->st = st;
    r->got = 0;
    r->need = need;
}

void reader_init(reader *r, const reader_ops *ops, void *owner, int read_ahead)
{
    memset(r, 0, offsetof(reader, ahead));
    r->ops = ops;
    r->owner = owner;
    r->read_ahead = read_ahead;
    r->small = 1;
    expect(r, RD_HEADER, FRAME_HEADER_SIZE);
}

void reader_set_guard(reader *r, const reader_guard *g, void *ctx)
{
    r->guard = g;
    r->guard_ctx = ctx;
}

void reader_set_read_ahead(reader *r, int on)
{
    r->read_ahead = on;
}

int reader_paused(const reader *r)
{
    return r->st == RD_PAUSED;
}

void reader_stop(reader *r)
{
    r->stopped = 1;
}

int reader_mid_frame(const reader *r)
{
    return r->st != RD_HEADER || r->got > 0 || r->ahead_pos < r->ahead_len;
}

static void fail(reader *r, int code, const char *why)
{
    r->stopped = 1;
    r->ops->fail(r->owner, code, why);
}

/* The payload (and its tag) is in: hand it out. */
static void payload_done(reader *r)
{
    expect(r, RD_HEADER, FRAME_HEADER_SIZE);
    if (r->verdict == READER_INTO) r->ops->payload(r->owner, &r->data, r->dst);
}

/* The payload's bytes are in: its tag comes next on a keyed link. */
static void payload_read(reader *r)
{
    if (r->guard)
        expect(r, RD_PAYLOAD_TAG, READER_TAG);
    else
        payload_done(r);
}

/* Asks the owner about the DATA frame in r->data and sets up its payload. */
static void offer_data(reader *r)
{
    char why[512] = "";
    uint8_t *dst = NULL;
    int v = r->ops->data(r->owner, &r->data, &dst, why, sizeof why);
    if (r->stopped) return;
    if (v < 0) {
        fail(r, v, why[0] ? why : "DATA frame refused");
        return;
    }
    if (v == READER_PAUSE) {
        r->st = RD_PAUSED;
        return;
    }
    r->verdict = v;
    r->dst = dst;
    if (r->guard) r->guard->payload_begin(r->guard_ctx);
    if (r->data.length == 0)
        payload_read(r);
    else if (v == READER_INTO)
        expect(r, RD_PAYLOAD, r->data.length);
    else
        expect(r, RD_SKIP, r->data.length);
}

/* The body (a DATA frame's fixed part) is in, and checked on a keyed link:
 * hand it out. */
static void body_done(reader *r)
{
    char why[160];
    if (r->hdr.type != FRAME_DATA) {
        /* The body stays put until the next piece is read, after this. */
        expect(r, RD_HEADER, FRAME_HEADER_SIZE);
        r->ops->control(r->owner, &r->hdr, r->body);
        return;
    }
    int rc = frame_decode_data(&r->hdr, r->body, &r->data);
    r->small = r->data.length <= READER_SMALL_PAYLOAD;
    if (rc < 0) {
        snprintf(why, sizeof why, "bad DATA frame: %s", frame_strerror(rc));
        fail(r, RINGD_EPROTO, why);
        return;
    }
    offer_data(r);
}

static size_t body_size(const reader *r)
{
    return r->hdr.type == FRAME_DATA ? FRAME_DATA_HEADER_SIZE : r->hdr.length;
}

/* A complete piece is in: decide what comes next. */
static void piece_done(reader *r)
{
    char why[160];
    switch (r->st) {
    case RD_HEADER: {
        int rc = frame_decode_header(r->hdr_buf, FRAME_HEADER_SIZE, &r->hdr);
        r->ops->header(r->owner, rc, &r->hdr);
        if (r->stopped) return;
        if (rc < 0) {
            snprintf(why, sizeof why, "bad frame header: %s", frame_strerror(rc));
            fail(r, RINGD_EPROTO, why);
            return;
        }
        if (!!r->guard != !!(r->hdr.flags & FRAME_FLAG_TAG)) {
            if (r->guard)
                fail(r, RINGD_EAUTH, "a frame without a tag on a keyed link");
            else
                fail(r, RINGD_EPROTO, "a frame with a tag on a link without a key");
            return;
        }
        if (body_size(r) > 0)
            expect(r, RD_BODY, body_size(r));
        else if (r->guard)
            expect(r, RD_TAG, READER_TAG);
        else
            body_done(r);
        return;
    }
    case RD_BODY:
        if (r->guard)
            expect(r, RD_TAG, READER_TAG);
        else
            body_done(r);
        return;
    case RD_TAG:
        if (!r->guard->head(r->guard_ctx, r->hdr_buf, r->body, body_size(r), r->tag)) {
            snprintf(why, sizeof why,
                     "a %s frame has a wrong tag (changed, replayed, reordered or dropped on "
                     "the way)",
                     frame_type_name(r->hdr.type));
            fail(r, RINGD_EAUTH, why);
            return;
        }
        body_done(r);
        return;
    case RD_PAYLOAD:
    case RD_SKIP:
        payload_read(r);
        return;
    case RD_PAYLOAD_TAG:
        if (!r->guard->payload_end(r->guard_ctx, r->tag)) {
            snprintf(why, sizeof why,
                     "the %u-byte payload of a DATA frame has a wrong tag (changed on the way)",
                     r->data.length);
            if (r->verdict == READER_INTO && r->ops->forged) {
                r->stopped = 1;
                r->ops->forged(r->owner, &r->data, why);
            } else {
                fail(r, RINGD_EAUTH, why);
            }
            return;
        }
        payload_done(r);
        return;
    case RD_PAUSED:
        return;
    }
}

/* n bytes of the piece being read arrived at p: a keyed link's payload
 * bytes go through the guard (and are decrypted there) before anything
 * else sees them. */
static void arrived(reader *r, uint8_t *p, size_t n)
{
    if (r->guard && (r->st == RD_PAYLOAD || r->st == RD_SKIP))
        r->guard->payload_part(r->guard_ctx, p, n);
}

/* Where the bytes of the piece being read go (NULL: nowhere, a skip). */
static uint8_t *piece(reader *r)
{
    switch (r->st) {
    case RD_HEADER:
        return r->hdr_buf + r->got;
    case RD_BODY:
        return r->body + r->got;
    case RD_TAG:
    case RD_PAYLOAD_TAG:
        return r->tag + r->got;
    case RD_PAYLOAD:
        return r->dst + r->got;
    default:
        return NULL;
    }
}

/* Hands out the bytes read ahead, piece by piece, until they run out, the
 * reader pauses, or the owner stops it. */
static void drain_ahead(reader *r)
{
    while (!r->stopped && r->st != RD_PAUSED && r->ahead_pos < r->ahead_len) {
        size_t n = r->need - r->got, avail = r->ahead_len - r->ahead_pos;
        if (n > avail) n = avail;
        uint8_t *p = piece(r);
        if (p) {
            memcpy(p, r->ahead + r->ahead_pos, n);
        } else {
            p = r->ahead + r->ahead_pos; /* skipped: seen where it is */
        }
        arrived(r, p, n);
        r->ahead_pos += n;
        r->got += n;
        if (r->got == r->need) piece_done(r);
    }
    if (r->ahead_pos == r->ahead_len) r->ahead_pos = r->ahead_len = 0;
}

void reader_buf(reader *r, size_t limit, uint8_t **p, size_t *n)
{
    *p = NULL;
    *n = 0;
    if (r->stopped || r->st == RD_PAUSED) return;
    size_t left = r->need - r->got;
    if (left > limit) left = limit;
    r->into_ahead = r->read_ahead && r->small &&
                    (r->st == RD_HEADER || r->st == RD_BODY || r->st == RD_TAG ||
                     r->st == RD_PAYLOAD_TAG);
    if (r->into_ahead) {
        size_t room = READER_AHEAD - r->ahead_len;
        *p = r->ahead + r->ahead_len;
        *n = room < limit ? room : limit;
        return;
    }
    uint8_t *dst = piece(r);
    if (!dst) {
        dst = skip_sink;
        if (left > READER_SKIP_BUF) left = READER_SKIP_BUF;
    }
    *p = r->last = dst;
    *n = left;
}

void reader_got(reader *r, size_t n)
{
    if (r->stopped) return;
    if (r->into_ahead) {
        r->ahead_len += n;
        drain_ahead(r);
        return;
    }
    arrived(r, r->last, n);
    r->got += n;
    if (r->got == r->need) piece_done(r);
}

void reader_resume(reader *r)
{
    if (r->stopped || r->st != RD_PAUSED) return;
    offer_data(r);
    /* Bytes read ahead of the paused frame come first. */
    if (!r->stopped && r->st != RD_PAUSED) drain_ahead(r);
}
