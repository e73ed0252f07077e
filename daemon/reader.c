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

static void fail(reader *r, const char *why)
{
    r->stopped = 1;
    r->ops->fail(r->owner, why);
}

/* Asks the owner about the DATA frame in r->data and sets up its payload. */
static void offer_data(reader *r)
{
    char why[512] = "";
    uint8_t *dst = NULL;
    int v = r->ops->data(r->owner, &r->data, &dst, why, sizeof why);
    if (r->stopped) return;
    if (v < 0) {
        fail(r, why[0] ? why : "DATA frame refused");
        return;
    }
    if (v == READER_PAUSE) {
        r->st = RD_PAUSED;
        return;
    }
    if (r->data.length == 0) {
        expect(r, RD_HEADER, FRAME_HEADER_SIZE);
        if (v == READER_INTO) r->ops->payload(r->owner, &r->data, dst);
    } else if (v == READER_INTO) {
        r->dst = dst;
        expect(r, RD_PAYLOAD, r->data.length);
    } else {
        expect(r, RD_SKIP, r->data.length);
    }
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
            fail(r, why);
            return;
        }
        if (r->hdr.type == FRAME_DATA) {
            expect(r, RD_BODY, FRAME_DATA_HEADER_SIZE);
        } else if (r->hdr.length == 0) {
            expect(r, RD_HEADER, FRAME_HEADER_SIZE);
            r->ops->control(r->owner, &r->hdr, r->body);
        } else {
            expect(r, RD_BODY, r->hdr.length);
        }
        return;
    }
    case RD_BODY:
        if (r->hdr.type != FRAME_DATA) {
            /* The body stays put until the next piece is read, after this. */
            expect(r, RD_HEADER, FRAME_HEADER_SIZE);
            r->ops->control(r->owner, &r->hdr, r->body);
            return;
        }
        {
            int rc = frame_decode_data(&r->hdr, r->body, &r->data);
            r->small = r->data.length <= READER_SMALL_PAYLOAD;
            if (rc < 0) {
                snprintf(why, sizeof why, "bad DATA frame: %s", frame_strerror(rc));
                fail(r, why);
                return;
            }
        }
        offer_data(r);
        return;
    case RD_PAYLOAD:
        expect(r, RD_HEADER, FRAME_HEADER_SIZE);
        r->ops->payload(r->owner, &r->data, r->dst);
        return;
    case RD_SKIP:
        expect(r, RD_HEADER, FRAME_HEADER_SIZE);
        return;
    case RD_PAUSED:
        return;
    }
}

/* Where the bytes of the piece being read go (NULL: nowhere, a skip). */
static uint8_t *piece(reader *r)
{
    switch (r->st) {
    case RD_HEADER:
        return r->hdr_buf + r->got;
    case RD_BODY:
        return r->body + r->got;
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
        if (p) memcpy(p, r->ahead + r->ahead_pos, n);
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
    r->into_ahead = r->read_ahead && r->small && (r->st == RD_HEADER || r->st == RD_BODY);
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
    *p = dst;
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
