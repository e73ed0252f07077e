/*
 * test_reader.c - the frame reader (daemon/reader.c), fed bytes by hand:
 * frames come out whole however the bytes are cut, payloads land where the
 * owner says, a paused frame waits, bad bytes stop it.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "daemon/reader.h"
#include "ringd.h"

typedef struct {
    reader r;
    int headers, controls, datas, payloads, fails;
    int code; /* of the last fail() */
    uint8_t types[64];
    int n_types;
    reader_verdict verdict; /* what data() answers */
    int refuse_data;        /* data() fails instead */
    int stop_on_control;    /* the owner gives up on the first control frame */
    uint8_t dst[4096];
    uint8_t got_payload[4096];
    size_t got_len;
    char why[256];
} owner;

static void on_header(void *o, int rc, const frame_header *h)
{
    owner *w = o;
    (void)h, (void)rc;
    w->headers++;
}

static void on_control(void *o, const frame_header *h, const uint8_t *body)
{
    owner *w = o;
    (void)body;
    w->controls++;
    w->types[w->n_types++] = h->type;
    if (w->stop_on_control) reader_stop(&w->r);
}

static int on_data(void *o, const frame_data *d, uint8_t **dst, char *why, size_t len)
{
    owner *w = o;
    (void)d;
    w->datas++;
    if (w->refuse_data) {
        snprintf(why, len, "refused");
        return RINGD_EMISMATCH;
    }
    *dst = w->dst;
    return (int)w->verdict;
}

static void on_payload(void *o, const frame_data *d, uint8_t *dst)
{
    owner *w = o;
    w->payloads++;
    w->types[w->n_types++] = FRAME_DATA;
    memcpy(w->got_payload, dst, d->length);
    w->got_len = d->length;
}

static void on_fail(void *o, int code, const char *why)
{
    owner *w = o;
    w->fails++;
    w->code = code;
    snprintf(w->why, sizeof w->why, "%s", why);
}

static const reader_ops ops = {on_header, on_control, on_data, on_payload, on_fail};

static void start(owner *w, int read_ahead)
{
    memset(w, 0, sizeof *w);
    reader_init(&w->r, &ops, w, read_ahead);
}

/* Feeds bytes in pieces of at most chunk; returns how many were taken. */
static size_t feed(owner *w, const uint8_t *bytes, size_t len, size_t chunk)
{
    size_t done = 0;
    while (done < len) {
        uint8_t *p;
        size_t n;
        reader_buf(&w->r, SIZE_MAX, &p, &n);
        if (n == 0) break;
        size_t take = len - done < n ? len - done : n;
        if (take > chunk) take = chunk;
        memcpy(p, bytes + done, take);
        reader_got(&w->r, take);
        done += take;
    }
    return done;
}

/* A stream of: PING, ABORT, DATA (payload of plen bytes), PING. */
static size_t stream(uint8_t *buf, size_t cap, uint32_t plen)
{
    size_t n = 0;
    n += (size_t)frame_encode_ping(buf + n, cap - n);
    frame_abort a = {.seq = 3, .epoch = 1, .code = -9};
    snprintf(a.reason, sizeof a.reason, "no");
    n += (size_t)frame_encode_abort(buf + n, cap - n, &a);
    frame_data d = {.seq = 1, .epoch = 1, .length = plen, .count = plen, .kind = 1};
    n += (size_t)frame_encode_data(buf + n, cap - n, &d);
    for (uint32_t i = 0; i < plen; i++)
        buf[n++] = (uint8_t)(i * 7 + 1);
    n += (size_t)frame_encode_ping(buf + n, cap - n);
    return n;
}

static void assert_stream_read(const owner *w, uint32_t plen)
{
    cr_assert_eq(w->fails, 0, "%s", w->why);
    cr_assert_eq(w->n_types, 4);
    cr_assert_eq(w->types[0], FRAME_PING);
    cr_assert_eq(w->types[1], FRAME_ABORT);
    cr_assert_eq(w->types[2], FRAME_DATA);
    cr_assert_eq(w->types[3], FRAME_PING);
    cr_assert_eq(w->got_len, plen);
    for (uint32_t i = 0; i < plen; i++)
        cr_assert_eq(w->got_payload[i], (uint8_t)(i * 7 + 1));
}

Test(reader, frames_come_out_whole_however_the_bytes_are_cut)
{
    static const uint32_t plens[] = {4, 100, 4000};
    static const size_t chunks[] = {1, 2, 3, 7, 12, 64, 1000, SIZE_MAX};
    uint8_t buf[8192];
    for (int ra = 0; ra < 2; ra++) {
        for (size_t i = 0; i < sizeof plens / sizeof *plens; i++) {
            for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++) {
                owner w;
                start(&w, ra);
                size_t n = stream(buf, sizeof buf, plens[i]);
                cr_assert_eq(feed(&w, buf, n, chunks[c]), n);
                assert_stream_read(&w, plens[i]);
            }
        }
    }
}

Test(reader, without_read_ahead_it_never_reads_past_a_frame)
{
    owner w;
    start(&w, 0);
    uint8_t *p;
    size_t n;
    reader_buf(&w.r, SIZE_MAX, &p, &n);
    cr_assert_eq(n, FRAME_HEADER_SIZE);
}

Test(reader, a_paused_frame_waits_and_the_bytes_behind_it_follow_on_resume)
{
    uint8_t buf[8192];
    owner w;
    start(&w, 1);
    w.verdict = READER_PAUSE;
    size_t n = stream(buf, sizeof buf, 100);
    size_t taken = feed(&w, buf, n, SIZE_MAX);
    cr_assert(reader_paused(&w.r));
    cr_assert_eq(w.payloads, 0);
    uint8_t *p;
    size_t room;
    reader_buf(&w.r, SIZE_MAX, &p, &room);
    cr_assert_eq(room, 0, "a paused reader takes no bytes");
    w.verdict = READER_INTO;
    reader_resume(&w.r);
    cr_assert_not(reader_paused(&w.r));
    cr_assert_eq(feed(&w, buf + taken, n - taken, SIZE_MAX), n - taken);
    assert_stream_read(&w, 100);
    cr_assert_eq(w.datas, 2, "offered once, then again on resume");
}

Test(reader, a_skipped_payload_is_read_and_dropped)
{
    uint8_t buf[8192];
    owner w;
    start(&w, 1);
    w.verdict = READER_SKIP;
    size_t n = stream(buf, sizeof buf, 3000);
    cr_assert_eq(feed(&w, buf, n, 500), n);
    cr_assert_eq(w.payloads, 0);
    cr_assert_eq(w.controls, 3, "PING, ABORT and the PING after the payload");
}

Test(reader, bytes_that_are_not_a_frame_stop_it_saying_why)
{
    owner w;
    start(&w, 1);
    uint8_t junk[64];
    memset(junk, 0x5a, sizeof junk);
    feed(&w, junk, sizeof junk, SIZE_MAX);
    cr_assert_eq(w.fails, 1);
    cr_assert(strstr(w.why, "bad frame header") != NULL, "%s", w.why);
    cr_assert_eq(w.code, RINGD_EPROTO);
    uint8_t *p;
    size_t n;
    reader_buf(&w.r, SIZE_MAX, &p, &n);
    cr_assert_eq(n, 0);
}

Test(reader, a_data_frame_the_owner_refuses_stops_it)
{
    uint8_t buf[8192];
    owner w;
    start(&w, 1);
    w.refuse_data = 1;
    size_t n = stream(buf, sizeof buf, 10);
    feed(&w, buf, n, SIZE_MAX);
    cr_assert_eq(w.fails, 1);
    cr_assert_eq(w.code, RINGD_EMISMATCH, "the owner's own code");
    cr_assert_str_eq(w.why, "refused");
    cr_assert_eq(w.controls, 2, "nothing after the refused frame");
}

Test(reader, an_owner_that_stops_it_in_a_callback_gets_nothing_more)
{
    uint8_t buf[8192];
    owner w;
    start(&w, 1);
    w.stop_on_control = 1;
    size_t n = stream(buf, sizeof buf, 10);
    feed(&w, buf, n, SIZE_MAX);
    cr_assert_eq(w.controls, 1);
    cr_assert_eq(w.datas, 0);
}

Test(reader, reads_stop_at_the_limit_the_owner_gives)
{
    owner w;
    start(&w, 1);
    uint8_t *p;
    size_t n;
    reader_buf(&w.r, 5, &p, &n);
    cr_assert_eq(n, 5, "a stripe ends in 5 bytes");
}

/* ---- Keyed links: the guard (issue 17) ------------------------------- */

/* A toy guard, no cryptography: a tag is the byte sum of what it covers
 * plus a running count of tags, and payloads travel XOR 0x5A ("encrypted").
 * It shows the reader checks what it must, in order, before handing out. */
typedef struct {
    uint32_t seq, sum;
    int parts;
} toy;

static toy the_toy;

static void toy_tag(uint32_t sum, uint32_t seq, uint8_t tag[READER_TAG])
{
    memset(tag, 0, READER_TAG);
    memcpy(tag, &sum, 4);
    memcpy(tag + 4, &seq, 4);
}

static int toy_head(void *ctx, const uint8_t *hdr, const uint8_t *body, size_t n, const uint8_t *tag)
{
    toy *t = ctx;
    uint32_t sum = 0;
    uint8_t want[READER_TAG];
    for (size_t i = 0; i < FRAME_HEADER_SIZE; i++)
        sum += hdr[i];
    for (size_t i = 0; i < n; i++)
        sum += body[i];
    toy_tag(sum, t->seq++, want);
    return memcmp(want, tag, READER_TAG) == 0;
}

static void toy_begin(void *ctx)
{
    toy *t = ctx;
    t->sum = 0;
}

static void toy_part(void *ctx, uint8_t *p, size_t n)
{
    toy *t = ctx;
    t->parts++;
    for (size_t i = 0; i < n; i++) {
        t->sum += p[i];
        p[i] ^= 0x5A;
    }
}

static int toy_end(void *ctx, const uint8_t *tag)
{
    toy *t = ctx;
    uint8_t want[READER_TAG];
    toy_tag(t->sum, t->seq++, want);
    return memcmp(want, tag, READER_TAG) == 0;
}

static const reader_guard toy_guard = {toy_head, toy_begin, toy_part, toy_end};

static int forged;
static void on_forged(void *o, const frame_data *d, const char *why)
{
    owner *w = o;
    (void)d;
    forged++;
    snprintf(w->why, sizeof w->why, "%s", why);
}

static const reader_ops keyed_ops = {on_header, on_control, on_data, on_payload, on_fail, on_forged};

/* Appends the encoded frame at f (n bytes) as a keyed link sends it: the
 * tag flag, the head's tag, then for DATA the payload (XOR 0x5A) and its
 * tag. Returns the bytes written to out. */
static size_t seal(uint8_t *out, const uint8_t *f, size_t n, const uint8_t *payload, size_t plen,
                   uint32_t *seq)
{
    uint32_t sum = 0;
    size_t k = 0;
    memcpy(out, f, n);
    out[7] |= FRAME_FLAG_TAG;
    for (size_t i = 0; i < n; i++)
        sum += out[i];
    k = n;
    toy_tag(sum, (*seq)++, out + k);
    k += READER_TAG;
    if (f[5] != FRAME_DATA) return k;
    sum = 0;
    for (size_t i = 0; i < plen; i++) {
        out[k + i] = payload[i] ^ 0x5A;
        sum += out[k + i];
    }
    k += plen;
    toy_tag(sum, (*seq)++, out + k);
    return k + READER_TAG;
}

/* PING, ABORT, DATA of plen bytes, PING, each sealed. */
static size_t keyed_stream(uint8_t *buf, uint32_t plen, uint32_t *seq)
{
    uint8_t f[256], payload[4096];
    size_t n = 0;
    int k;
    *seq = 0;
    k = frame_encode_ping(f, sizeof f);
    n += seal(buf + n, f, (size_t)k, NULL, 0, seq);
    frame_abort a = {.seq = 3, .epoch = 1, .code = -9};
    snprintf(a.reason, sizeof a.reason, "no");
    k = frame_encode_abort(f, sizeof f, &a);
    n += seal(buf + n, f, (size_t)k, NULL, 0, seq);
    frame_data d = {.seq = 1, .epoch = 1, .length = plen, .count = plen, .kind = 1};
    k = frame_encode_data(f, sizeof f, &d);
    for (uint32_t i = 0; i < plen; i++)
        payload[i] = (uint8_t)(i * 7 + 1);
    n += seal(buf + n, f, (size_t)k, payload, plen, seq);
    k = frame_encode_ping(f, sizeof f);
    n += seal(buf + n, f, (size_t)k, NULL, 0, seq);
    return n;
}

static void start_keyed(owner *w, int read_ahead)
{
    memset(w, 0, sizeof *w);
    memset(&the_toy, 0, sizeof the_toy);
    forged = 0;
    reader_init(&w->r, &keyed_ops, w, read_ahead);
    reader_set_guard(&w->r, &toy_guard, &the_toy);
}

Test(reader, a_keyed_stream_comes_out_whole_and_opened_however_it_is_cut)
{
    static uint8_t buf[8192];
    static owner w;
    uint32_t seq;
    uint32_t plens[] = {0, 1, 100, 3000};
    size_t chunks[] = {1, 5, 16, 4096};
    for (int p = 0; p < 4; p++) {
        size_t n = keyed_stream(buf, plens[p], &seq);
        for (int c = 0; c < 4; c++) {
            for (int ahead = 0; ahead < 2; ahead++) {
                start_keyed(&w, ahead);
                cr_assert_eq(feed(&w, buf, n, chunks[c]), n);
                assert_stream_read(&w, plens[p]);
                cr_assert_eq(the_toy.seq, seq, "every tag checked, in order");
            }
        }
    }
}

Test(reader, a_wrong_head_tag_stops_the_stream_before_the_frame_is_handed_out)
{
    static uint8_t buf[8192];
    static owner w;
    uint32_t seq;
    size_t n = keyed_stream(buf, 100, &seq);
    buf[2 * FRAME_HEADER_SIZE + FRAME_TAG_SIZE + 5] ^= 1; /* the ABORT's body, after the PING */
    start_keyed(&w, 1);
    feed(&w, buf, n, 7);
    cr_assert_eq(w.fails, 1);
    cr_assert_eq(w.code, RINGD_EAUTH);
    cr_assert(strstr(w.why, "a ABORT frame has a wrong tag") != NULL, "%s", w.why);
    cr_assert_eq(w.controls, 1, "only the PING before it came out");
}

Test(reader, a_wrong_payload_tag_is_forged_and_never_handed_out)
{
    static uint8_t buf[8192];
    static owner w;
    uint32_t seq;
    size_t n = keyed_stream(buf, 100, &seq);
    /* The DATA payload: after PING+tag, ABORT+tag, DATA head+tag. */
    size_t at = n - (FRAME_HEADER_SIZE + FRAME_TAG_SIZE) - FRAME_TAG_SIZE - 50;
    buf[at] ^= 0x10;
    start_keyed(&w, 0);
    feed(&w, buf, n, 4096);
    cr_assert_eq(forged, 1, "%s", w.why);
    cr_assert_eq(w.payloads, 0);
    cr_assert(strstr(w.why, "100-byte payload of a DATA frame has a wrong tag") != NULL, "%s",
              w.why);
}

Test(reader, a_skipped_payload_is_still_checked_so_the_next_frame_is_too)
{
    static uint8_t buf[8192];
    static owner w;
    uint32_t seq;
    size_t n = keyed_stream(buf, 3000, &seq);
    start_keyed(&w, 1);
    w.verdict = READER_SKIP;
    cr_assert_eq(feed(&w, buf, n, 333), n);
    cr_assert_eq(w.fails, 0, "%s", w.why);
    cr_assert_eq(w.payloads, 0);
    cr_assert_eq(w.controls, 3);
    cr_assert_eq(the_toy.seq, seq);
}

Test(reader, a_keyed_link_refuses_an_untagged_frame_and_a_plain_one_a_tagged_one)
{
    static uint8_t buf[8192];
    static owner w;
    int n = frame_encode_ping(buf, sizeof buf);
    start_keyed(&w, 1);
    feed(&w, buf, (size_t)n, 64);
    cr_assert_eq(w.fails, 1);
    cr_assert_eq(w.code, RINGD_EAUTH);
    cr_assert_str_eq(w.why, "a frame without a tag on a keyed link");
    uint32_t seq = 0;
    uint8_t f[64];
    memcpy(f, buf, (size_t)n);
    size_t m = seal(buf, f, (size_t)n, NULL, 0, &seq);
    start(&w, 1);
    feed(&w, buf, m, 64);
    cr_assert_eq(w.fails, 1);
    cr_assert_eq(w.code, RINGD_EPROTO, "not an authentication failure: the link has no key");
    cr_assert_str_eq(w.why, "a frame with a tag on a link without a key");
}
