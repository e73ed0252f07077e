/*
 * frame.c - peer frames on the TCP ring links (layouts in WIRE.md).
 *
 * Decoding is two-phase so that a link never buffers more than it must:
 * frame_decode_header() tells how many body bytes follow and refuses a length
 * the type cannot have, before anything is read into memory; then the body
 * decoder checks the body against the exact layout of its type. Every length
 * that comes from the wire is checked before it is used.
 */
#include <string.h>

#include "proto/bytes.h"
#include "proto/frame.h"
#include "proto/summary-internal.h"

_Static_assert(FRAME_HEADER_SIZE == BYTES_HEADER_SIZE, "one header layout for frames and messages");

/* Largest bodies the encoders can produce: they must fit the limits that
 * frame_decode_header() enforces, or a peer would refuse our own frames. */
#define HELLO_MAX_BODY (16 + 2 + FRAME_MAX_NAME + 2 + FRAME_MAX_NAME + FRAME_NONCE_SIZE + 11)
#define WELCOME_MAX_BODY (8 + 2 + FRAME_MAX_TEXT + FRAME_NONCE_SIZE + FRAME_MAC_SIZE)
#define ABORT_MAX_BODY (16 + 2 + FRAME_MAX_TEXT)
#define AUTH_BODY FRAME_MAC_SIZE
#define PRIOR_MAX_BODY (50 + 2 + FRAME_MAX_TEXT + 2 + FRAME_MAX_WAITING)
#define EPOCH_MAX_BODY                                                                             \
    (47 + 2 + FRAME_MAX_TEXT + 2 + FRAME_MAX_WAITING + 12 + 2 + FRAME_MAX_WAITING +                \
     PRIOR_MAX_BODY + 16 + PRIOR_MAX_BODY)
_Static_assert(HELLO_MAX_BODY <= FRAME_MAX_CONTROL_BODY, "HELLO fits a control body");
_Static_assert(WELCOME_MAX_BODY <= FRAME_MAX_CONTROL_BODY, "WELCOME fits a control body");
_Static_assert(ABORT_MAX_BODY <= FRAME_MAX_CONTROL_BODY, "ABORT fits a control body");
_Static_assert(AUTH_BODY <= FRAME_MAX_CONTROL_BODY, "AUTH fits a control body");
_Static_assert(EPOCH_MAX_BODY <= FRAME_MAX_CONTROL_BODY, "EPOCH fits a control body");
/* The daemon's frame reader holds any body but DATA's in a buffer of the
 * COMMIT's size (daemon/reader.h). */
_Static_assert(FRAME_MAX_REPORT_BODY <= FRAME_MAX_COMMIT_BODY, "REPORT fits the reader's body");
_Static_assert(FRAME_MAX_CONTROL_BODY <= FRAME_MAX_COMMIT_BODY, "control bodies fit the reader's");

const char *frame_strerror(int err)
{
    switch (err) {
    case FRAME_OK:
        return "success";
    case FRAME_EAGAIN:
        return "incomplete frame";
    case FRAME_EMAGIC:
        return "bad magic: not a ringd peer frame";
    case FRAME_EVERSION:
        return "unsupported peer protocol version";
    case FRAME_ETYPE:
        return "unknown frame type";
    case FRAME_ELENGTH:
        return "frame length out of range for its type";
    case FRAME_EMALFORMED:
        return "malformed frame body";
    case FRAME_ESPACE:
        return "buffer too small for frame";
    }
    return "unknown frame error";
}

const char *frame_type_name(int type)
{
    switch (type) {
    case FRAME_HELLO:
        return "HELLO";
    case FRAME_WELCOME:
        return "WELCOME";
    case FRAME_DATA:
        return "DATA";
    case FRAME_ABORT:
        return "ABORT";
    case FRAME_PING:
        return "PING";
    case FRAME_AUTH:
        return "AUTH";
    case FRAME_EPOCH:
        return "EPOCH";
    case FRAME_COMMIT:
        return "COMMIT";
    case FRAME_REPORT:
        return "REPORT";
    }
    return "UNKNOWN";
}

int frame_decode_header(const uint8_t *buf, size_t len, frame_header *out)
{
    uint32_t n;
    int ok;

    if (len < FRAME_HEADER_SIZE) return FRAME_EAGAIN;

    /* Filled before validation: on FRAME_EVERSION the acceptor names the
     * peer's version in its refusal. */
    out->version = buf[4];
    out->type = buf[5];
    out->flags = get_u16(buf + 6);
    out->length = n = get_u32(buf + 8);

    if (get_u32(buf) != FRAME_MAGIC) return FRAME_EMAGIC;
    /* Version before type: a newer peer's new frame types are a version
     * mismatch, not garbage. */
    if (out->version != FRAME_VERSION) return FRAME_EVERSION;

    switch (out->type) {
    case FRAME_DATA:
        ok = n >= FRAME_DATA_HEADER_SIZE && n <= FRAME_MAX_BODY;
        break;
    case FRAME_PING:
        ok = n == 0;
        break;
    case FRAME_HELLO:
    case FRAME_WELCOME:
    case FRAME_ABORT:
    case FRAME_AUTH:
    case FRAME_EPOCH:
        ok = n <= FRAME_MAX_CONTROL_BODY;
        break;
    case FRAME_COMMIT:
        ok = n <= FRAME_MAX_COMMIT_BODY;
        break;
    case FRAME_REPORT:
        ok = n <= FRAME_MAX_REPORT_BODY;
        break;
    default:
        return FRAME_ETYPE;
    }
    return ok ? FRAME_OK : FRAME_ELENGTH;
}

static int finish(bytes_writer *w, frame_type type, uint16_t flags, uint32_t length)
{
    if (w->overflow) return FRAME_ESPACE;
    put_header(w->buf, FRAME_MAGIC, FRAME_VERSION, (uint8_t)type, flags, length);
    return (int)w->len;
}

static uint32_t body_len(const bytes_writer *w)
{
    return (uint32_t)(w->len - FRAME_HEADER_SIZE);
}

/* Elements travel in host byte order, so the acceptor must learn ours to
 * refuse a ring that mixes byte orders. */
static uint16_t hello_flags(void)
{
    const uint16_t probe = 1;
    uint8_t first;

    memcpy(&first, &probe, 1);
    return first ? FRAME_FLAG_LITTLE_ENDIAN : 0;
}

static void wr_bytes(bytes_writer *w, const uint8_t *src, size_t n)
{
    uint8_t *p = wr_take(w, n);
    if (p) memcpy(p, src, n);
}

static void rd_bytes(bytes_reader *r, uint8_t *dst, size_t n)
{
    const uint8_t *p = rd_take(r, n);
    if (p)
        memcpy(dst, p, n);
    else
        memset(dst, 0, n);
}

int frame_encode_hello(uint8_t *buf, size_t cap, const frame_hello *h)
{
    bytes_writer w;

    wr_begin(&w, buf, cap);
    wr_u32(&w, h->n_hosts);
    wr_u32(&w, h->from_pos);
    wr_u32(&w, h->to_pos);
    wr_u32(&w, h->epoch);
    wr_str(&w, h->cluster, FRAME_MAX_NAME);
    wr_str(&w, h->from_name, FRAME_MAX_NAME);
    wr_bytes(&w, h->nonce, FRAME_NONCE_SIZE);
    wr_u8(&w, h->stream);
    wr_u8(&w, h->streams);
    wr_u64(&w, h->session);
    wr_u8(&w, h->cipher);
    return finish(
        &w, FRAME_HELLO,
        (uint16_t)(hello_flags() | (h->auth ? FRAME_FLAG_AUTH : 0) | (h->cut ? FRAME_FLAG_CUT : 0)),
        body_len(&w));
}

int frame_encode_welcome(uint8_t *buf, size_t cap, const frame_welcome *wl)
{
    bytes_writer w;

    wr_begin(&w, buf, cap);
    wr_i32(&w, wl->status);
    wr_u32(&w, wl->epoch);
    wr_str(&w, wl->reason, FRAME_MAX_TEXT);
    wr_bytes(&w, wl->nonce, FRAME_NONCE_SIZE);
    wr_bytes(&w, wl->mac, FRAME_MAC_SIZE);
    return finish(&w, FRAME_WELCOME, wl->auth ? FRAME_FLAG_AUTH : 0, body_len(&w));
}

int frame_encode_data(uint8_t *buf, size_t cap, const frame_data *d)
{
    bytes_writer w;

    /* A frame the receiver would refuse is the caller's bug; say so here
     * rather than in the peer's log. */
    if (d->length > FRAME_MAX_PAYLOAD) return FRAME_ELENGTH;

    wr_begin(&w, buf, cap);
    wr_u64(&w, d->seq);
    wr_u32(&w, d->epoch);
    wr_u16(&w, d->step);
    wr_u8(&w, d->dtype);
    wr_u8(&w, d->op);
    wr_u32(&w, d->chunk);
    wr_u32(&w, d->length);
    wr_u64(&w, d->count);
    wr_u64(&w, d->offset);
    wr_u8(&w, d->kind);
    wr_u8(&w, d->wire);
    wr_u16(&w, d->name_tag);
    wr_u32(&w, d->root);
    wr_f64(&w, d->wsum);
    wr_u32(&w, d->has_crc ? d->crc : 0);
    wr_u32(&w, (uint32_t)d->delta_us);
    /* The header counts the payload that the caller sends after these bytes. */
    return finish(&w, FRAME_DATA, d->has_crc ? FRAME_FLAG_CRC : 0,
                  FRAME_DATA_HEADER_SIZE + d->length);
}

int frame_encode_abort(uint8_t *buf, size_t cap, const frame_abort *a)
{
    bytes_writer w;

    wr_begin(&w, buf, cap);
    wr_u64(&w, a->seq);
    wr_u32(&w, a->epoch);
    wr_i32(&w, a->code);
    wr_str(&w, a->reason, FRAME_MAX_TEXT);
    return finish(&w, FRAME_ABORT, 0, body_len(&w));
}

int frame_encode_ping(uint8_t *buf, size_t cap)
{
    bytes_writer w;

    wr_begin(&w, buf, cap);
    return finish(&w, FRAME_PING, 0, 0);
}

int frame_encode_auth(uint8_t *buf, size_t cap, const frame_auth *a)
{
    bytes_writer w;

    wr_begin(&w, buf, cap);
    wr_bytes(&w, a->mac, FRAME_MAC_SIZE);
    return finish(&w, FRAME_AUTH, 0, body_len(&w));
}

static void wr_prior(bytes_writer *w, const frame_prior *p)
{
    wr_u32(w, p->epoch);
    wr_u32(w, p->by);
    wr_u32(w, p->prev_epoch);
    wr_u8(w, p->flags);
    wr_i32(w, p->code);
    wr_u64(w, p->fail_seq);
    wr_u8(w, p->fail_class);
    wr_u64(w, p->done);
    wr_u64(w, p->top);
    wr_u64(w, p->members);
    wr_u32(w, p->members_epoch);
    wr_str(w, p->reason, FRAME_MAX_TEXT);
    wr_str(w, p->members_why, FRAME_MAX_WAITING);
}

int frame_encode_epoch(uint8_t *buf, size_t cap, const frame_epoch *e)
{
    bytes_writer w;

    wr_begin(&w, buf, cap);
    wr_u32(&w, e->epoch);
    wr_u32(&w, e->origin);
    wr_u8(&w, e->phase);
    wr_u8(&w, e->flags);
    wr_i32(&w, e->code);
    wr_u64(&w, e->fail_seq);
    wr_u8(&w, e->fail_class);
    wr_u32(&w, e->fail_origin);
    wr_u32(&w, e->prev_epoch);
    wr_u64(&w, e->done);
    wr_u64(&w, e->top);
    wr_str(&w, e->reason, FRAME_MAX_TEXT);
    wr_str(&w, e->waiting, FRAME_MAX_WAITING);
    wr_u64(&w, e->members);
    wr_u32(&w, e->members_epoch);
    wr_str(&w, e->members_why, FRAME_MAX_WAITING);
    wr_prior(&w, &e->prior);
    wr_u64(&w, e->prev_members);
    wr_u64(&w, e->confirmed);
    wr_prior(&w, &e->waited);
    return finish(&w, FRAME_EPOCH, 0, body_len(&w));
}

/* Counts travel as their minimum and each host's excess over it, which
 * stays small: hosts are at most a few collectives apart. */
int frame_encode_commit(uint8_t *buf, size_t cap, const frame_commit *c)
{
    bytes_writer w;
    uint64_t base = UINT64_MAX;

    if (c->n == 0 || c->n > FRAME_MAX_COMMIT_HOSTS) return FRAME_ESPACE;
    for (uint16_t i = 0; i < c->n; i++)
        if (c->done[i] < base) base = c->done[i];
    wr_begin(&w, buf, cap);
    wr_u32(&w, c->epoch);
    wr_u16(&w, c->n);
    wr_u64(&w, base);
    /* A count too far above base, or a knowledge too far below it, goes as
     * less than it is: never as more than the sender knows. */
    for (uint16_t i = 0; i < c->n; i++) {
        uint64_t d = c->done[i] - base;
        wr_u32(&w, d > UINT32_MAX ? UINT32_MAX : (uint32_t)d);
    }
    for (uint16_t i = 0; i < c->n; i++) {
        uint64_t d = c->known[i] < base ? base - c->known[i] : 0;
        wr_u32(&w, d > UINT32_MAX ? UINT32_MAX : (uint32_t)d);
    }
    return finish(&w, FRAME_COMMIT, 0, body_len(&w));
}

/* The decoders check the header's type too: handing a body to the wrong
 * decoder is a bug that would otherwise read as a malformed peer. */

int frame_decode_hello(const frame_header *hdr, const uint8_t *body, frame_hello *out)
{
    bytes_reader r = {body, hdr->length, hdr->type != FRAME_HELLO};

    out->n_hosts = rd_u32(&r);
    out->from_pos = rd_u32(&r);
    out->to_pos = rd_u32(&r);
    out->epoch = rd_u32(&r);
    rd_str(&r, out->cluster, FRAME_MAX_NAME);
    rd_str(&r, out->from_name, FRAME_MAX_NAME);
    rd_bytes(&r, out->nonce, FRAME_NONCE_SIZE);
    out->auth = !!(hdr->flags & FRAME_FLAG_AUTH);
    out->cut = !!(hdr->flags & FRAME_FLAG_CUT);
    out->stream = rd_u8(&r);
    out->streams = rd_u8(&r);
    out->session = rd_u64(&r);
    out->cipher = rd_u8(&r);
    if (out->stream >= (out->streams ? out->streams : 1)) r.bad = 1; /* 0 streams: 1 */
    return rd_done(&r) ? FRAME_OK : FRAME_EMALFORMED;
}

int frame_decode_welcome(const frame_header *hdr, const uint8_t *body, frame_welcome *out)
{
    bytes_reader r = {body, hdr->length, hdr->type != FRAME_WELCOME};

    out->status = rd_i32(&r);
    out->epoch = rd_u32(&r);
    rd_str(&r, out->reason, FRAME_MAX_TEXT);
    rd_bytes(&r, out->nonce, FRAME_NONCE_SIZE);
    rd_bytes(&r, out->mac, FRAME_MAC_SIZE);
    out->auth = !!(hdr->flags & FRAME_FLAG_AUTH);
    return rd_done(&r) ? FRAME_OK : FRAME_EMALFORMED;
}

int frame_decode_data(const frame_header *hdr, const uint8_t *body, frame_data *out)
{
    /* Only the fixed part is ours to read; the payload is still on the wire. */
    bytes_reader r = {body, FRAME_DATA_HEADER_SIZE,
                      hdr->type != FRAME_DATA || hdr->length < FRAME_DATA_HEADER_SIZE};

    out->seq = rd_u64(&r);
    out->epoch = rd_u32(&r);
    out->step = rd_u16(&r);
    out->dtype = rd_u8(&r);
    out->op = rd_u8(&r);
    out->chunk = rd_u32(&r);
    out->length = rd_u32(&r);
    out->count = rd_u64(&r);
    out->offset = rd_u64(&r);
    out->kind = rd_u8(&r);
    out->wire = rd_u8(&r);
    if (out->wire != 0 && out->wire != 2 && out->wire != 3) r.bad = 1; /* ringd_wire */
    out->name_tag = rd_u16(&r);
    out->root = rd_u32(&r);
    out->wsum = rd_f64(&r);
    out->crc = rd_u32(&r);
    out->has_crc = !!(hdr->flags & FRAME_FLAG_CRC);
    if (!out->has_crc && out->crc != 0) r.bad = 1; /* a flag lost in transit */
    out->delta_us = (int32_t)rd_u32(&r);
    if (!rd_done(&r) || out->length != hdr->length - FRAME_DATA_HEADER_SIZE)
        return FRAME_EMALFORMED;
    return FRAME_OK;
}

int frame_decode_abort(const frame_header *hdr, const uint8_t *body, frame_abort *out)
{
    bytes_reader r = {body, hdr->length, hdr->type != FRAME_ABORT};

    out->seq = rd_u64(&r);
    out->epoch = rd_u32(&r);
    out->code = rd_i32(&r);
    rd_str(&r, out->reason, FRAME_MAX_TEXT);
    return rd_done(&r) ? FRAME_OK : FRAME_EMALFORMED;
}

int frame_decode_auth(const frame_header *hdr, const uint8_t *body, frame_auth *out)
{
    bytes_reader r = {body, hdr->length, hdr->type != FRAME_AUTH};

    rd_bytes(&r, out->mac, FRAME_MAC_SIZE);
    return rd_done(&r) ? FRAME_OK : FRAME_EMALFORMED;
}

static void rd_prior(bytes_reader *r, frame_prior *p)
{
    p->epoch = rd_u32(r);
    p->by = rd_u32(r);
    p->prev_epoch = rd_u32(r);
    p->flags = rd_u8(r);
    p->code = rd_i32(r);
    p->fail_seq = rd_u64(r);
    p->fail_class = rd_u8(r);
    p->done = rd_u64(r);
    p->top = rd_u64(r);
    p->members = rd_u64(r);
    p->members_epoch = rd_u32(r);
    rd_str(r, p->reason, FRAME_MAX_TEXT);
    rd_str(r, p->members_why, FRAME_MAX_WAITING);
}

static int prior_is_zero(const frame_prior *p)
{
    return !p->by && !p->prev_epoch && !p->flags && !p->code && !p->fail_seq && !p->fail_class &&
           !p->done && !p->top && !p->members && !p->members_epoch && !p->reason[0] &&
           !p->members_why[0];
}

int frame_decode_epoch(const frame_header *hdr, const uint8_t *body, frame_epoch *out)
{
    bytes_reader r = {body, hdr->length, hdr->type != FRAME_EPOCH};

    out->epoch = rd_u32(&r);
    out->origin = rd_u32(&r);
    out->phase = rd_u8(&r);
    out->flags = rd_u8(&r);
    out->code = rd_i32(&r);
    out->fail_seq = rd_u64(&r);
    out->fail_class = rd_u8(&r);
    out->fail_origin = rd_u32(&r);
    out->prev_epoch = rd_u32(&r);
    out->done = rd_u64(&r);
    out->top = rd_u64(&r);
    rd_str(&r, out->reason, FRAME_MAX_TEXT);
    rd_str(&r, out->waiting, FRAME_MAX_WAITING);
    out->members = rd_u64(&r);
    out->members_epoch = rd_u32(&r);
    rd_str(&r, out->members_why, FRAME_MAX_WAITING);
    const frame_prior *p = &out->prior, *w = &out->waited;
    rd_prior(&r, &out->prior);
    out->prev_members = rd_u64(&r);
    out->confirmed = rd_u64(&r);
    rd_prior(&r, &out->waited);
    if (out->phase < EPOCH_BREAK || out->phase > EPOCH_LEAVE) r.bad = 1;
    if (out->flags & ~EPOCH_FLAGS_ALL) r.bad = 1;
    if (p->flags & ~(EPOCH_FLAG_DONE_UNKNOWN | EPOCH_FLAG_RESIZED | EPOCH_FLAG_INCOMPLETE))
        r.bad = 1;
    if ((p->flags & EPOCH_FLAG_INCOMPLETE) && !(p->flags & EPOCH_FLAG_RESIZED)) r.bad = 1;
    /* A prior is of the epoch a lap settles, which came after the one it
     * settled; a waited settled that epoch, and came after it, waiting.
     * Each was carried by its own CONFIRM or a later one, all older than
     * the lap (by). None is all zero. */
    int lap = out->phase == EPOCH_FORM || out->phase == EPOCH_RESET || out->phase == EPOCH_CONFIRM;
    if (p->epoch && (!lap || p->epoch != out->prev_epoch || p->prev_epoch >= p->epoch ||
                     p->by < p->epoch || p->by >= out->epoch))
        r.bad = 1;
    if (!p->epoch && !prior_is_zero(p)) r.bad = 1;
    if (w->epoch && (!lap || !out->prev_epoch || w->prev_epoch != out->prev_epoch ||
                     w->epoch <= w->prev_epoch || w->by < w->epoch || w->by >= out->epoch ||
                     !(w->flags & EPOCH_FLAG_INCOMPLETE) || (w->flags & ~EPOCH_FLAGS_ALL) ||
                     (w->flags & EPOCH_FLAG_GONE)))
        r.bad = 1;
    if (!w->epoch && !prior_is_zero(w)) r.bad = 1;
    return rd_done(&r) ? FRAME_OK : FRAME_EMALFORMED;
}

int frame_decode_commit(const frame_header *hdr, const uint8_t *body, frame_commit *out)
{
    bytes_reader r = {body, hdr->length, hdr->type != FRAME_COMMIT};

    out->epoch = rd_u32(&r);
    out->n = rd_u16(&r);
    uint64_t base = rd_u64(&r);
    if (out->n == 0 || out->n > FRAME_MAX_COMMIT_HOSTS) {
        out->n = 0;
        r.bad = 1;
    }
    /* One canonical form: base is the least count, so some excess is 0. */
    uint32_t least = UINT32_MAX;
    for (uint16_t i = 0; i < out->n; i++) {
        uint32_t d = rd_u32(&r);
        if (d < least) least = d;
        if (base > UINT64_MAX - d) r.bad = 1;
        out->done[i] = base + d;
    }
    /* Nobody knows more completed everywhere than the least count. */
    for (uint16_t i = 0; i < out->n; i++) {
        uint32_t d = rd_u32(&r);
        if (d > base) r.bad = 1;
        out->known[i] = d > base ? 0 : base - d;
    }
    if (out->n && least != 0) r.bad = 1;
    return rd_done(&r) ? FRAME_OK : FRAME_EMALFORMED;
}

int frame_encode_report(uint8_t *buf, size_t cap, const summary_part *p)
{
    bytes_writer w;

    wr_begin(&w, buf, cap);
    summary_put(&w, p);
    return finish(&w, FRAME_REPORT, 0, body_len(&w));
}

int frame_decode_report(const frame_header *hdr, const uint8_t *body, summary_part *out)
{
    bytes_reader r = {body, hdr->length, hdr->type != FRAME_REPORT};

    summary_get(&r, out);
    return rd_done(&r) ? FRAME_OK : FRAME_EMALFORMED;
}
