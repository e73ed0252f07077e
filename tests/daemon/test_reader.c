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

typedef struct {
    reader r;
    int headers, controls, datas, payloads, fails;
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
        return -5;
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

static void on_fail(void *o, const char *why)
{
    owner *w = o;
    w->fails++;
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
