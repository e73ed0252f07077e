/*
 * test_frame.c - the peer frames of proto/frame.h (version 9), as specified
 * in proto/WIRE.md: layouts, flags, limits, and refusal of every
 * malformed input.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "proto/frame.h"

#define FRAME_BUF (FRAME_HEADER_SIZE + FRAME_MAX_CONTROL_BODY)

typedef union {
    frame_hello hello;
    frame_welcome welcome;
    frame_data data;
    frame_abort abort;
    frame_auth auth;
    frame_epoch epoch;
    frame_commit commit;
    summary_part report;
} any_frame;

/* Every frame type that has a body, and every frame type. */
static const int body_types[] = {FRAME_HELLO, FRAME_WELCOME, FRAME_DATA,   FRAME_ABORT,
                                 FRAME_AUTH,  FRAME_EPOCH,   FRAME_COMMIT, FRAME_REPORT};
#define N_BODY_TYPES (sizeof body_types / sizeof *body_types)
static const int all_types[] = {FRAME_HELLO, FRAME_WELCOME, FRAME_DATA,   FRAME_ABORT, FRAME_PING,
                                FRAME_AUTH,  FRAME_EPOCH,   FRAME_COMMIT, FRAME_REPORT};
#define N_ALL_TYPES (sizeof all_types / sizeof *all_types)

/* Offsets and sizes in bodies (WIRE.md). */
#define HELLO_STREAMS 11 /* stream, streams, session, cipher */
#define DATA_CRC 56
#define DATA_DELTA 60
#define EPOCH_PHASE 8
#define EPOCH_FLAGS 9
#define EPOCH_FIXED 47   /* before the reason */
#define EPOCH_MEMBERS 12 /* members, members_epoch: after waiting, before members_why */
#define PRIOR_FLAGS 12   /* in the prior, which follows members_why */
#define PRIOR_FIXED 54   /* the prior before its reason */
#define PRIOR_EMPTY (PRIOR_FIXED + 2 + 2)                     /* a prior with empty strings */
#define EPOCH_TAIL (16 + PRIOR_EMPTY) /* prev_members, confirmed, a waited of none */
#define WAITED_FULL (PRIOR_FIXED + 2 + FRAME_MAX_TEXT + 2 + FRAME_MAX_WAITING)
#define EPOCH_EMPTY (EPOCH_FIXED + 2 + 2 + EPOCH_MEMBERS + 2) /* the prior, after empty strings */
#define COMMIT_HOSTS 200 /* in sample(): a COMMIT that fits FRAME_BUF */
#define WELCOME_TAIL (FRAME_NONCE_SIZE + FRAME_MAC_SIZE) /* after the reason */

static void fill(char *dst, size_t n, char c)
{
    memset(dst, c, n);
    dst[n] = '\0';
}

/* n bytes counting up from first, so that a field moved or swapped with
 * another shows. */
static void count_up(uint8_t *dst, size_t n, uint8_t first)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = (uint8_t)(first + i);
}

static int host_is_little_endian(void)
{
    const uint16_t probe = 1;
    uint8_t first;
    memcpy(&first, &probe, 1);
    return first == 1;
}

static int encode_any(int type, const any_frame *f, uint8_t *buf, size_t cap)
{
    switch (type) {
    case FRAME_HELLO:
        return frame_encode_hello(buf, cap, &f->hello);
    case FRAME_WELCOME:
        return frame_encode_welcome(buf, cap, &f->welcome);
    case FRAME_DATA:
        return frame_encode_data(buf, cap, &f->data);
    case FRAME_ABORT:
        return frame_encode_abort(buf, cap, &f->abort);
    case FRAME_PING:
        return frame_encode_ping(buf, cap);
    case FRAME_AUTH:
        return frame_encode_auth(buf, cap, &f->auth);
    case FRAME_EPOCH:
        return frame_encode_epoch(buf, cap, &f->epoch);
    case FRAME_COMMIT:
        return frame_encode_commit(buf, cap, &f->commit);
    case FRAME_REPORT:
        return frame_encode_report(buf, cap, &f->report);
    }
    cr_assert_fail("no encoder for type %d", type);
    return -1;
}

/* Decodes the body of h with the decoder of type, from an exact-size heap
 * copy of its first n bytes, so that AddressSanitizer catches any read past
 * them. */
static int decode_as(int type, const frame_header *h, const uint8_t *body, size_t n, any_frame *out)
{
    uint8_t *copy = malloc(n);
    int rc = FRAME_EMALFORMED;

    cr_assert(copy != NULL || n == 0);
    if (n > 0) memcpy(copy, body, n);
    switch (type) {
    case FRAME_HELLO:
        rc = frame_decode_hello(h, copy, &out->hello);
        break;
    case FRAME_WELCOME:
        rc = frame_decode_welcome(h, copy, &out->welcome);
        break;
    case FRAME_DATA:
        rc = frame_decode_data(h, copy, &out->data);
        break;
    case FRAME_ABORT:
        rc = frame_decode_abort(h, copy, &out->abort);
        break;
    case FRAME_AUTH:
        rc = frame_decode_auth(h, copy, &out->auth);
        break;
    case FRAME_EPOCH:
        rc = frame_decode_epoch(h, copy, &out->epoch);
        break;
    case FRAME_COMMIT:
        rc = frame_decode_commit(h, copy, &out->commit);
        break;
    case FRAME_REPORT:
        rc = frame_decode_report(h, copy, &out->report);
        break;
    default:
        cr_assert_fail("no decoder for type %d", type);
    }
    free(copy);
    return rc;
}

static int decode_exact(const frame_header *h, const uint8_t *body, size_t n, any_frame *out)
{
    return decode_as(h->type, h, body, n, out);
}

/* A frame of each type with every field set, strings at their longest, a
 * cluster key and a checksum in use. */
static any_frame sample(int type)
{
    any_frame f;

    memset(&f, 0, sizeof f);
    switch (type) {
    case FRAME_HELLO:
        f.hello.n_hosts = 0xfffffff1u;
        f.hello.from_pos = 0x01020304u;
        f.hello.to_pos = 0xa1a2a3a4u;
        f.hello.epoch = 0xfffffffeu;
        f.hello.stream = 6;
        f.hello.streams = 8;
        f.hello.session = 0xfedcba9876543210u;
        fill(f.hello.cluster, FRAME_MAX_NAME, 'c');
        fill(f.hello.from_name, FRAME_MAX_NAME, 'n');
        count_up(f.hello.nonce, FRAME_NONCE_SIZE, 0x10);
        f.hello.auth = 1;
        break;
    case FRAME_WELCOME:
        f.welcome.status = -2147483647 - 1;
        f.welcome.epoch = 0x80000001u;
        fill(f.welcome.reason, FRAME_MAX_TEXT, 'r');
        count_up(f.welcome.nonce, FRAME_NONCE_SIZE, 0x40);
        count_up(f.welcome.mac, FRAME_MAC_SIZE, 0x80);
        f.welcome.auth = 1;
        break;
    case FRAME_DATA:
        f.data.seq = 0xfedcba9876543210u;
        f.data.epoch = 0x89abcdefu;
        f.data.step = 0xfffe;
        f.data.dtype = 7;
        f.data.op = 4;
        f.data.chunk = 0x7ffffffdu;
        f.data.length = FRAME_MAX_PAYLOAD;
        f.data.count = 0x8000000000000001u;
        f.data.offset = 0x0123456789abcdefu;
        f.data.kind = 5;
        f.data.root = 0xfffffffeu;
        f.data.wsum = 1e300;
        f.data.has_crc = 1;
        f.data.crc = 0xe3069283u;
        f.data.delta_us = FRAME_DELTA_UNKNOWN;
        f.data.name_tag = 0xbeef;
        break;
    case FRAME_ABORT:
        f.abort.seq = UINT64_MAX;
        f.abort.epoch = 42;
        f.abort.code = -10;
        fill(f.abort.reason, FRAME_MAX_TEXT, 'a');
        break;
    case FRAME_AUTH:
        count_up(f.auth.mac, FRAME_MAC_SIZE, 0xc0);
        break;
    case FRAME_EPOCH:
        f.epoch.epoch = 0xfffffffdu;
        f.epoch.origin = 0x01020304u;
        f.epoch.phase = EPOCH_CONFIRM;
        f.epoch.flags = EPOCH_FLAGS_ALL;
        f.epoch.code = -2147483647 - 1;
        f.epoch.fail_seq = 0xfedcba9876543211u;
        f.epoch.fail_class = 0xfe;
        f.epoch.fail_origin = 0xa1a2a3a4u;
        f.epoch.prev_epoch = 0xfffffff9u;
        f.epoch.done = 0x8000000000000003u;
        f.epoch.top = 0x8000000000000005u;
        fill(f.epoch.reason, FRAME_MAX_TEXT, 'e');
        fill(f.epoch.waiting, FRAME_MAX_WAITING, 'w');
        f.epoch.members = 0x8000000000000001u;
        f.epoch.members_epoch = 0xfffffff7u;
        fill(f.epoch.members_why, FRAME_MAX_WAITING, 'm');
        f.epoch.prior.epoch = f.epoch.prev_epoch;
        f.epoch.prior.by = 0xfffffffcu;
        f.epoch.prior.prev_epoch = 0xfffffff3u;
        f.epoch.prior.flags = EPOCH_FLAG_DONE_UNKNOWN | EPOCH_FLAG_RESIZED;
        f.epoch.prior.code = -2147483647;
        f.epoch.prior.fail_seq = 0xfedcba9876543213u;
        f.epoch.prior.fail_class = 0xfd;
        f.epoch.prior.done = 0x8000000000000007u;
        f.epoch.prior.top = 0x8000000000000009u;
        f.epoch.prior.members = 0x8000000000000011u;
        f.epoch.prior.members_epoch = 0xfffffff5u;
        fill(f.epoch.prior.reason, FRAME_MAX_TEXT, 'p');
        fill(f.epoch.prior.members_why, FRAME_MAX_WAITING, 'q');
        f.epoch.prev_members = 0x8000000000000013u;
        f.epoch.confirmed = 0x8000000000000015u;
        f.epoch.waited.epoch = 0xfffffffbu;
        f.epoch.waited.by = 0xfffffffbu;
        f.epoch.waited.prev_epoch = f.epoch.prev_epoch;
        f.epoch.waited.flags = EPOCH_FLAG_INCOMPLETE | EPOCH_FLAG_DONE_UNKNOWN | EPOCH_FLAG_RESIZED;
        f.epoch.waited.code = -2147483645;
        f.epoch.waited.fail_seq = 0xfedcba9876543215u;
        f.epoch.waited.fail_class = 0xfc;
        f.epoch.waited.done = 0x8000000000000017u;
        f.epoch.waited.top = 0x8000000000000019u;
        f.epoch.waited.members = 0x8000000000000021u;
        f.epoch.waited.members_epoch = 0xfffffffbu;
        fill(f.epoch.waited.reason, FRAME_MAX_TEXT, 's');
        fill(f.epoch.waited.members_why, FRAME_MAX_WAITING, 't');
        break;
    case FRAME_COMMIT:
        f.commit.epoch = 0xfffffffbu;
        f.commit.n = COMMIT_HOSTS;
        for (int i = 0; i < COMMIT_HOSTS; i++) {
            f.commit.done[i] = 0xfffffff000000000u + (uint64_t)i * 0x10001u;
            f.commit.known[i] = 0xfffffff000000000u - (uint64_t)i * 0x10003u;
        }
        break;
    case FRAME_REPORT:
        /* Two ranks of four spans: it fits FRAME_BUF (the whole part's
         * limits are test_summary.c's). */
        f.report.host = 0xfffffff1u;
        f.report.part = 0xfffe;
        f.report.parts = 0xffff;
        f.report.boot_us = 0x8000000000000001u;
        f.report.version = 0x8000000000000003u;
        f.report.at_us = 0x8000000000000005u;
        f.report.job_us = 0x8000000000000007u;
        f.report.window_ms = 0xfffffff3u;
        f.report.daemon_cpu_us = 0x8000000000000009u;
        f.report.energy_mj = 0x800000000000000bu;
        f.report.energy = 0xfe;
        f.report.watts_mw = 0xfffffff5u;
        f.report.local_size = 0xfffd;
        f.report.first = 0xfffc;
        f.report.n = 2;
        for (int i = 0; i < 2; i++) {
            summary_rank *k = &f.report.ranks[i];
            uint64_t b = 0xf000000000000000u + (uint64_t)i * 0x100u;
            k->rank = -2147483647 + i;
            k->pid = 0xfffffff0u - (uint32_t)i;
            k->flags = 0xff;
            k->life = (summary_times){b + 1, b + 2, b + 3, b + 4, b + 5, b + 6, b + 7};
            k->window = (summary_times){b + 11, b + 12, b + 13, b + 14, b + 15, b + 16, b + 17};
            k->late_us = b + 21;
            k->late_calls = b + 22;
            k->cpu_us = b + 23;
            k->n_spans = 4;
            for (int j = 0; j < 4; j++)
                k->spans[j] = (summary_span){.start_us = b + 31 + (uint64_t)j,
                                             .dur_us = 0xfffffff0u + (uint32_t)j,
                                             .wait_us = 0xffffff00u + (uint32_t)j,
                                             .kind = (uint8_t)(0xf0 + j),
                                             .flags = (uint8_t)(0xe0 + j)};
        }
        break;
    }
    return f;
}

/* Encodes sample(type) into buf and decodes its header. */
static int encode_sample(int type, uint8_t *buf, size_t cap, frame_header *h)
{
    any_frame f = sample(type);
    int n = encode_any(type, &f, buf, cap);

    cr_assert_gt(n, 0, "encoding %s: %s", frame_type_name(type), frame_strerror(n));
    cr_assert_eq(frame_decode_header(buf, (size_t)n, h), FRAME_OK);
    return n;
}

/* Bytes of the body a decoder reads: all of it, or DATA's fixed part. */
static size_t decoded_len(const frame_header *h)
{
    return h->type == FRAME_DATA ? FRAME_DATA_HEADER_SIZE : h->length;
}

/* Encoding and decoding */

Test(frame, hello_round_trips_every_field)
{
    any_frame in = sample(FRAME_HELLO), out;
    uint8_t buf[FRAME_BUF];
    frame_header h;
    int n = encode_sample(FRAME_HELLO, buf, sizeof buf, &h);

    cr_assert_eq(n, FRAME_HEADER_SIZE + 16 + 2 + FRAME_MAX_NAME + 2 + FRAME_MAX_NAME +
                        FRAME_NONCE_SIZE + HELLO_STREAMS);
    cr_assert_eq(h.version, 12);
    cr_assert_eq(FRAME_VERSION, 12);
    cr_assert_eq(h.type, FRAME_HELLO);
    cr_assert_eq(h.length, (uint32_t)(n - FRAME_HEADER_SIZE));
    cr_assert_eq(decode_exact(&h, buf + FRAME_HEADER_SIZE, h.length, &out), FRAME_OK);
    cr_assert_eq(out.hello.n_hosts, in.hello.n_hosts);
    cr_assert_eq(out.hello.from_pos, in.hello.from_pos);
    cr_assert_eq(out.hello.to_pos, in.hello.to_pos);
    cr_assert_eq(out.hello.epoch, in.hello.epoch);
    cr_assert_str_eq(out.hello.cluster, in.hello.cluster);
    cr_assert_str_eq(out.hello.from_name, in.hello.from_name);
    cr_assert_arr_eq(out.hello.nonce, in.hello.nonce, FRAME_NONCE_SIZE);
    cr_assert_eq(out.hello.auth, 1);
    cr_assert_eq(out.hello.stream, in.hello.stream);
    cr_assert_eq(out.hello.streams, in.hello.streams);
    cr_assert_eq(out.hello.session, in.hello.session);
}

Test(frame, hello_says_in_its_header_flags_that_the_sender_cannot_reach_the_hosts_between)
{
    frame_hello in = {.n_hosts = 5, .from_pos = 0, .to_pos = 3}, out;
    uint8_t buf[FRAME_BUF];
    frame_header h;
    int n = frame_encode_hello(buf, sizeof buf, &in);
    cr_assert_eq(frame_decode_header(buf, (size_t)n, &h), FRAME_OK);
    cr_assert_eq(h.flags & FRAME_FLAG_CUT, 0);
    cr_assert_eq(frame_decode_hello(&h, buf + FRAME_HEADER_SIZE, &out), FRAME_OK);
    cr_assert_eq(out.cut, 0);
    in.cut = 1;
    n = frame_encode_hello(buf, sizeof buf, &in);
    cr_assert_eq(frame_decode_header(buf, (size_t)n, &h), FRAME_OK);
    cr_assert_eq(h.flags & FRAME_FLAG_CUT, FRAME_FLAG_CUT);
    cr_assert_eq(frame_decode_hello(&h, buf + FRAME_HEADER_SIZE, &out), FRAME_OK);
    cr_assert_eq(out.cut, 1);
}

Test(frame, rejects_a_hello_for_a_stream_past_its_streams)
{
    frame_hello in = {.n_hosts = 2, .stream = 3, .streams = 3}, out;
    uint8_t buf[FRAME_BUF];
    frame_header h;
    int n = frame_encode_hello(buf, sizeof buf, &in);
    cr_assert_eq(frame_decode_header(buf, (size_t)n, &h), FRAME_OK);
    cr_assert_eq(frame_decode_hello(&h, buf + FRAME_HEADER_SIZE, &out), FRAME_EMALFORMED);
    in.stream = 2;
    n = frame_encode_hello(buf, sizeof buf, &in);
    cr_assert_eq(frame_decode_hello(&h, buf + FRAME_HEADER_SIZE, &out), FRAME_OK);
}

Test(frame, welcome_round_trips_every_field)
{
    any_frame in = sample(FRAME_WELCOME), out;
    uint8_t buf[FRAME_BUF];
    frame_header h;
    int n = encode_sample(FRAME_WELCOME, buf, sizeof buf, &h);

    cr_assert_eq(n, FRAME_HEADER_SIZE + 8 + 2 + FRAME_MAX_TEXT + FRAME_NONCE_SIZE + FRAME_MAC_SIZE);
    cr_assert_eq(decode_exact(&h, buf + FRAME_HEADER_SIZE, h.length, &out), FRAME_OK);
    cr_assert_eq(out.welcome.status, in.welcome.status);
    cr_assert_eq(out.welcome.epoch, in.welcome.epoch);
    cr_assert_str_eq(out.welcome.reason, in.welcome.reason);
    cr_assert_arr_eq(out.welcome.nonce, in.welcome.nonce, FRAME_NONCE_SIZE);
    cr_assert_arr_eq(out.welcome.mac, in.welcome.mac, FRAME_MAC_SIZE);
    cr_assert_eq(out.welcome.auth, 1);
}

Test(frame, data_round_trips_every_field)
{
    any_frame in = sample(FRAME_DATA), out;
    uint8_t buf[FRAME_BUF];
    frame_header h;
    int n = encode_sample(FRAME_DATA, buf, sizeof buf, &h);

    /* The encoder writes the fixed part only; the header counts the payload. */
    cr_assert_eq(n, FRAME_HEADER_SIZE + FRAME_DATA_HEADER_SIZE);
    cr_assert_eq(h.length, FRAME_MAX_BODY);
    cr_assert_eq(decode_exact(&h, buf + FRAME_HEADER_SIZE, FRAME_DATA_HEADER_SIZE, &out), FRAME_OK);
    cr_assert_eq(out.data.seq, in.data.seq);
    cr_assert_eq(out.data.epoch, in.data.epoch);
    cr_assert_eq(out.data.step, in.data.step);
    cr_assert_eq(out.data.dtype, in.data.dtype);
    cr_assert_eq(out.data.op, in.data.op);
    cr_assert_eq(out.data.chunk, in.data.chunk);
    cr_assert_eq(out.data.kind, in.data.kind);
    cr_assert_eq(out.data.root, in.data.root);
    cr_assert_eq(out.data.wsum, in.data.wsum);
    cr_assert_eq(out.data.delta_us, in.data.delta_us);
    cr_assert_eq(out.data.name_tag, in.data.name_tag);
    cr_assert_eq(out.data.length, in.data.length);
    cr_assert_eq(out.data.count, in.data.count);
    cr_assert_eq(out.data.offset, in.data.offset);
    cr_assert_eq(out.data.has_crc, 1);
    cr_assert_eq(out.data.crc, in.data.crc);
}

Test(frame, abort_round_trips_every_field)
{
    any_frame in = sample(FRAME_ABORT), out;
    uint8_t buf[FRAME_BUF];
    frame_header h;
    int n = encode_sample(FRAME_ABORT, buf, sizeof buf, &h);

    cr_assert_eq(n, FRAME_HEADER_SIZE + 16 + 2 + FRAME_MAX_TEXT);
    cr_assert_eq(decode_exact(&h, buf + FRAME_HEADER_SIZE, h.length, &out), FRAME_OK);
    cr_assert_eq(out.abort.seq, in.abort.seq);
    cr_assert_eq(out.abort.epoch, in.abort.epoch);
    cr_assert_eq(out.abort.code, in.abort.code);
    cr_assert_str_eq(out.abort.reason, in.abort.reason);
}

Test(frame, auth_round_trips_its_mac)
{
    any_frame in = sample(FRAME_AUTH), out;
    uint8_t buf[FRAME_BUF];
    frame_header h;
    int n = encode_sample(FRAME_AUTH, buf, sizeof buf, &h);

    cr_assert_eq(n, FRAME_HEADER_SIZE + FRAME_MAC_SIZE);
    cr_assert_eq(h.type, FRAME_AUTH);
    cr_assert_eq(decode_exact(&h, buf + FRAME_HEADER_SIZE, h.length, &out), FRAME_OK);
    cr_assert_arr_eq(out.auth.mac, in.auth.mac, FRAME_MAC_SIZE);
}

static void assert_prior_eq(const frame_prior *out, const frame_prior *in)
{
    cr_assert_eq(out->epoch, in->epoch);
    cr_assert_eq(out->by, in->by);
    cr_assert_eq(out->prev_epoch, in->prev_epoch);
    cr_assert_eq(out->flags, in->flags);
    cr_assert_eq(out->code, in->code);
    cr_assert_eq(out->fail_seq, in->fail_seq);
    cr_assert_eq(out->fail_class, in->fail_class);
    cr_assert_eq(out->done, in->done);
    cr_assert_eq(out->top, in->top);
    cr_assert_eq(out->members, in->members);
    cr_assert_eq(out->members_epoch, in->members_epoch);
    cr_assert_str_eq(out->reason, in->reason);
    cr_assert_str_eq(out->members_why, in->members_why);
}

Test(frame, epoch_round_trips_every_field)
{
    any_frame in = sample(FRAME_EPOCH), out;
    uint8_t buf[FRAME_BUF];
    frame_header h;
    int n = encode_sample(FRAME_EPOCH, buf, sizeof buf, &h);

    cr_assert_eq(n, FRAME_HEADER_SIZE + EPOCH_FIXED + 2 + FRAME_MAX_TEXT + 2 + FRAME_MAX_WAITING +
                        EPOCH_MEMBERS + 2 + FRAME_MAX_WAITING + PRIOR_FIXED + 2 + FRAME_MAX_TEXT +
                        2 + FRAME_MAX_WAITING + EPOCH_TAIL - PRIOR_EMPTY + WAITED_FULL);
    /* At its longest it still fits a control body (why that limit is 3072). */
    cr_assert_eq(h.length, 2757);
    cr_assert_leq(h.length, FRAME_MAX_CONTROL_BODY);
    cr_assert_eq(FRAME_MAX_CONTROL_BODY, 3072);
    cr_assert_eq(h.type, FRAME_EPOCH);
    cr_assert_eq(decode_exact(&h, buf + FRAME_HEADER_SIZE, h.length, &out), FRAME_OK);
    cr_assert_eq(out.epoch.epoch, in.epoch.epoch);
    cr_assert_eq(out.epoch.origin, in.epoch.origin);
    cr_assert_eq(out.epoch.phase, in.epoch.phase);
    cr_assert_eq(out.epoch.flags, in.epoch.flags);
    cr_assert_eq(out.epoch.code, in.epoch.code);
    cr_assert_eq(out.epoch.fail_seq, in.epoch.fail_seq);
    cr_assert_eq(out.epoch.fail_class, in.epoch.fail_class);
    cr_assert_eq(out.epoch.fail_origin, in.epoch.fail_origin);
    cr_assert_eq(out.epoch.prev_epoch, in.epoch.prev_epoch);
    cr_assert_eq(out.epoch.done, in.epoch.done);
    cr_assert_eq(out.epoch.top, in.epoch.top);
    cr_assert_str_eq(out.epoch.reason, in.epoch.reason);
    cr_assert_str_eq(out.epoch.waiting, in.epoch.waiting);
    cr_assert_eq(out.epoch.members, in.epoch.members);
    cr_assert_eq(out.epoch.members_epoch, in.epoch.members_epoch);
    cr_assert_str_eq(out.epoch.members_why, in.epoch.members_why);
    assert_prior_eq(&out.epoch.prior, &in.epoch.prior);
    cr_assert_eq(out.epoch.prev_members, in.epoch.prev_members);
    cr_assert_eq(out.epoch.confirmed, in.epoch.confirmed);
    assert_prior_eq(&out.epoch.waited, &in.epoch.waited);
}

Test(frame, commit_round_trips_every_count)
{
    any_frame in = sample(FRAME_COMMIT), out;
    uint8_t buf[FRAME_BUF];
    frame_header h;
    int n = encode_sample(FRAME_COMMIT, buf, sizeof buf, &h);

    cr_assert_eq(n, FRAME_HEADER_SIZE + 14 + 8 * COMMIT_HOSTS);
    cr_assert_eq(h.type, FRAME_COMMIT);
    cr_assert_eq(decode_exact(&h, buf + FRAME_HEADER_SIZE, h.length, &out), FRAME_OK);
    cr_assert_eq(out.commit.epoch, in.commit.epoch);
    cr_assert_eq(out.commit.n, COMMIT_HOSTS);
    cr_assert_arr_eq(out.commit.done, in.commit.done, COMMIT_HOSTS * sizeof *in.commit.done);
    cr_assert_arr_eq(out.commit.known, in.commit.known, COMMIT_HOSTS * sizeof *in.commit.known);
}

/* What a host knows travels as its shortfall below the least count; one
 * that cannot, being further below it than 2^32 - 1, goes as the smaller
 * knowledge that can: never as more than the host knew. */
Test(frame, commit_never_says_a_host_knew_more_than_it_did)
{
    static frame_commit in, out;
    uint8_t buf[FRAME_BUF];
    frame_header h;

    in.n = 3;
    in.done[0] = in.done[1] = in.done[2] = UINT64_C(1) << 40;
    in.known[0] = in.done[0];
    in.known[1] = 7;                   /* too far below: goes as 2^40 - (2^32 - 1) */
    in.known[2] = (UINT64_C(1) << 41); /* above the least count: goes as the least */
    int n = frame_encode_commit(buf, sizeof buf, &in);
    cr_assert_gt(n, 0);
    cr_assert_eq(frame_decode_header(buf, (size_t)n, &h), FRAME_OK);
    cr_assert_eq(frame_decode_commit(&h, buf + FRAME_HEADER_SIZE, &out), FRAME_OK);
    cr_assert_eq(out.known[0], in.done[0]);
    cr_assert_eq(out.known[1], (UINT64_C(1) << 40) - UINT32_MAX);
    cr_assert_eq(out.known[2], in.done[0]);
}

Test(frame, commit_counts_as_many_hosts_as_a_ring_may_have)
{
    static frame_commit in, out;
    static uint8_t buf[FRAME_HEADER_SIZE + FRAME_MAX_COMMIT_BODY];
    frame_header h;

    in.n = FRAME_MAX_COMMIT_HOSTS;
    for (int i = 0; i < FRAME_MAX_COMMIT_HOSTS; i++) {
        in.done[i] = 1000 + (uint64_t)(i % 7);
        in.known[i] = 1000 - (uint64_t)(i % 5);
    }
    cr_assert_eq(frame_encode_commit(buf, sizeof buf, &in), sizeof buf);
    cr_assert_eq(frame_decode_header(buf, sizeof buf, &h), FRAME_OK);
    cr_assert_eq(frame_decode_commit(&h, buf + FRAME_HEADER_SIZE, &out), FRAME_OK);
    cr_assert_arr_eq(out.done, in.done, sizeof in.done);
    cr_assert_arr_eq(out.known, in.known, sizeof in.known);

    in.n = FRAME_MAX_COMMIT_HOSTS + 1;
    cr_assert_eq(frame_encode_commit(buf, sizeof buf, &in), FRAME_ESPACE);
    in.n = 0;
    cr_assert_eq(frame_encode_commit(buf, sizeof buf, &in), FRAME_ESPACE);
}

Test(frame, epoch_round_trips_every_phase)
{
    static const int phases[] = {EPOCH_BREAK, EPOCH_FORM, EPOCH_CONFIRM, EPOCH_RESET, EPOCH_LEAVE};

    for (size_t i = 0; i < sizeof phases / sizeof *phases; i++) {
        frame_epoch in = {.epoch = 9, .origin = 1, .phase = (uint8_t)phases[i]}, out;
        uint8_t buf[FRAME_BUF];
        frame_header h;
        int n = frame_encode_epoch(buf, sizeof buf, &in);

        cr_assert_eq(frame_decode_header(buf, (size_t)n, &h), FRAME_OK);
        cr_assert_eq(frame_decode_epoch(&h, buf + FRAME_HEADER_SIZE, &out), FRAME_OK, "phase %d",
                     phases[i]);
        cr_assert_eq(out.phase, phases[i]);
        cr_assert_str_eq(out.reason, "");
    }
}

Test(frame, epoch_carries_a_leave_and_a_resized_membership)
{
    /* A host leaving for good, then the confirmation of the ring that
     * closed over it: hosts 0, 1 and 3 of four. */
    frame_epoch leave = {.epoch = 40,
                         .origin = 2,
                         .phase = EPOCH_LEAVE,
                         .fail_seq = FRAME_NO_SEQ,
                         .done = UINT64_MAX,
                         .reason = "ringctl leave on host h2"};
    frame_epoch confirm = {.epoch = 41,
                           .origin = 1,
                           .phase = EPOCH_CONFIRM,
                           .flags = EPOCH_FLAG_RESIZED,
                           .fail_seq = FRAME_NO_SEQ,
                           .prev_epoch = 36,
                           .done = 12,
                           .top = 12,
                           .members = 0x0b,
                           .members_epoch = 41,
                           .members_why = "ring resized to 3 hosts (3 ranks): h2 left"};
    const frame_epoch *in[] = {&leave, &confirm};

    for (size_t i = 0; i < sizeof in / sizeof *in; i++) {
        uint8_t buf[FRAME_BUF];
        frame_header h;
        frame_epoch out;
        int n = frame_encode_epoch(buf, sizeof buf, in[i]);

        cr_assert_eq(n, FRAME_HEADER_SIZE + EPOCH_FIXED + 2 + strlen(in[i]->reason) + 2 +
                            EPOCH_MEMBERS + 2 + strlen(in[i]->members_why) + PRIOR_FIXED + 2 + 2 +
                            EPOCH_TAIL);
        cr_assert_eq(frame_decode_header(buf, (size_t)n, &h), FRAME_OK);
        memset(&out, 0x5a, sizeof out);
        cr_assert_eq(frame_decode_epoch(&h, buf + FRAME_HEADER_SIZE, &out), FRAME_OK);
        cr_assert_eq(out.epoch, in[i]->epoch);
        cr_assert_eq(out.origin, in[i]->origin);
        cr_assert_eq(out.phase, in[i]->phase);
        cr_assert_eq(out.flags, in[i]->flags);
        cr_assert_eq(out.fail_seq, in[i]->fail_seq);
        cr_assert_eq(out.prev_epoch, in[i]->prev_epoch);
        cr_assert_eq(out.done, in[i]->done);
        cr_assert_eq(out.top, in[i]->top);
        cr_assert_str_eq(out.reason, in[i]->reason);
        cr_assert_str_eq(out.waiting, "");
        cr_assert_eq(out.members, in[i]->members, "%#llx", (unsigned long long)out.members);
        cr_assert_eq(out.members_epoch, in[i]->members_epoch);
        cr_assert_str_eq(out.members_why, in[i]->members_why);
        /* Without a prior, all of it decodes as 0. */
        cr_assert_eq(out.prior.epoch, 0);
        cr_assert_eq(out.prior.prev_epoch, 0);
        cr_assert_str_eq(out.prior.reason, "");
        cr_assert_str_eq(out.prior.members_why, "");
    }
}

Test(frame, epoch_membership_is_a_bit_per_configured_host_up_to_64)
{
    static const uint64_t masks[] = {0, 1, UINT64_C(1) << 63, UINT64_MAX, 0x5555555555555555u};

    for (size_t i = 0; i < sizeof masks / sizeof *masks; i++) {
        frame_epoch in = {.epoch = 7, .phase = EPOCH_FORM, .members = masks[i]}, out;
        uint8_t buf[FRAME_BUF];
        frame_header h;
        int n = frame_encode_epoch(buf, sizeof buf, &in);

        cr_assert_eq(frame_decode_header(buf, (size_t)n, &h), FRAME_OK);
        cr_assert_eq(frame_decode_epoch(&h, buf + FRAME_HEADER_SIZE, &out), FRAME_OK);
        cr_assert_eq(out.members, masks[i], "members %#llx", (unsigned long long)masks[i]);
        cr_assert_eq(out.members_epoch, 0);
        cr_assert_str_eq(out.members_why, "");
    }
}

Test(frame, ping_is_a_bare_header)
{
    static const uint8_t want[] = {0x52, 0x47, 0x4e, 0x44, 12, FRAME_PING, 0, 0, 0, 0, 0, 0};
    uint8_t buf[FRAME_BUF];
    frame_header h;

    cr_assert_eq(frame_encode_ping(buf, sizeof buf), sizeof want);
    cr_assert_arr_eq(buf, want, sizeof want);
    cr_assert_eq(frame_decode_header(buf, sizeof want, &h), FRAME_OK);
    cr_assert_eq(h.type, FRAME_PING);
    cr_assert_eq(h.length, 0);
}

Test(frame, hello_has_the_documented_byte_layout)
{
    frame_hello in = {.n_hosts = 3,
                      .from_pos = 0,
                      .to_pos = 1,
                      .epoch = 0x01020304,
                      .cluster = "c1",
                      .from_name = "a",
                      .auth = 1,
                      .stream = 1,
                      .streams = 3,
                      .session = 0x1112131415161718u,
                      .cipher = 2};
    uint8_t le = host_is_little_endian() ? 1 : 0;
    /* clang-format off */
    const uint8_t want[] = {
        0x52, 0x47, 0x4e, 0x44, 12, FRAME_HELLO, 0, 2 | le, 0, 0, 0, 66, /* header, AUTH flag */
        0, 0, 0, 3,   0, 0, 0, 0,   0, 0, 0, 1,   1, 2, 3, 4,           /* n_hosts .. epoch */
        0, 2, 'c', '1',                                                 /* cluster */
        0, 1, 'a',                                                      /* from_name */
        0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7,                 /* nonce */
        0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf,
        0xb0, 0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7,
        0xb8, 0xb9, 0xba, 0xbb, 0xbc, 0xbd, 0xbe, 0xbf,
        1, 3,                                                           /* stream, streams */
        0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18,                 /* session */
        2,                                                              /* cipher */
    };
    /* clang-format on */
    uint8_t buf[FRAME_BUF];

    count_up(in.nonce, FRAME_NONCE_SIZE, 0xa0);
    cr_assert_eq(frame_encode_hello(buf, sizeof buf, &in), sizeof want);
    cr_assert_arr_eq(buf, want, sizeof want);
}

Test(frame, welcome_has_the_documented_byte_layout)
{
    /* An accepted WELCOME has an empty reason; "ok" shows where one goes. */
    frame_welcome in = {.status = 0, .epoch = 0x01020304, .reason = "ok", .auth = 1};
    /* clang-format off */
    const uint8_t want[] = {
        0x52, 0x47, 0x4e, 0x44, 12, FRAME_WELCOME, 0, 2, 0, 0, 0, 76, /* header, AUTH flag */
        0, 0, 0, 0,   1, 2, 3, 4,                                   /* status, epoch */
        0, 2, 'o', 'k',                                             /* reason */
        0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7,             /* nonce */
        0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf,
        0xb0, 0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7,
        0xb8, 0xb9, 0xba, 0xbb, 0xbc, 0xbd, 0xbe, 0xbf,
        0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7,             /* mac */
        0xc8, 0xc9, 0xca, 0xcb, 0xcc, 0xcd, 0xce, 0xcf,
        0xd0, 0xd1, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7,
        0xd8, 0xd9, 0xda, 0xdb, 0xdc, 0xdd, 0xde, 0xdf,
    };
    /* clang-format on */
    uint8_t buf[FRAME_BUF];

    count_up(in.nonce, FRAME_NONCE_SIZE, 0xa0);
    count_up(in.mac, FRAME_MAC_SIZE, 0xc0);
    cr_assert_eq(frame_encode_welcome(buf, sizeof buf, &in), sizeof want);
    cr_assert_arr_eq(buf, want, sizeof want);
}

Test(frame, a_refusal_keeps_the_nonce_and_mac_fields)
{
    /* -18 is RINGD_EAUTH; a refusal carries no key material, only zeros. */
    frame_welcome in = {.status = -18, .epoch = 3, .reason = "no key"}, out;
    uint8_t buf[FRAME_BUF];
    frame_header h;
    int n = frame_encode_welcome(buf, sizeof buf, &in);
    static const uint8_t zeros[FRAME_NONCE_SIZE + FRAME_MAC_SIZE];

    cr_assert_eq(n, FRAME_HEADER_SIZE + 8 + 2 + 6 + FRAME_NONCE_SIZE + FRAME_MAC_SIZE);
    cr_assert_arr_eq(buf + n - sizeof zeros, zeros, sizeof zeros);
    cr_assert_eq(frame_decode_header(buf, (size_t)n, &h), FRAME_OK);
    cr_assert_eq(h.flags, 0);
    cr_assert_eq(frame_decode_welcome(&h, buf + FRAME_HEADER_SIZE, &out), FRAME_OK);
    cr_assert_eq(out.status, -18);
    cr_assert_str_eq(out.reason, "no key");
    cr_assert_eq(out.auth, 0);
}

Test(frame, auth_has_the_documented_byte_layout)
{
    frame_auth in;
    /* clang-format off */
    const uint8_t want[] = {
        0x52, 0x47, 0x4e, 0x44, 12, FRAME_AUTH, 0, 0, 0, 0, 0, 32, /* header */
        0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7,           /* mac */
        0xc8, 0xc9, 0xca, 0xcb, 0xcc, 0xcd, 0xce, 0xcf,
        0xd0, 0xd1, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7,
        0xd8, 0xd9, 0xda, 0xdb, 0xdc, 0xdd, 0xde, 0xdf,
    };
    /* clang-format on */
    uint8_t buf[FRAME_BUF];

    count_up(in.mac, FRAME_MAC_SIZE, 0xc0);
    cr_assert_eq(frame_encode_auth(buf, sizeof buf, &in), sizeof want);
    cr_assert_arr_eq(buf, want, sizeof want);
}

Test(frame, epoch_has_the_documented_byte_layout)
{
    frame_epoch in = {.epoch = 0x01020304,
                      .origin = 5,
                      .phase = EPOCH_RESET,
                      .flags = EPOCH_FLAG_GONE | EPOCH_FLAG_INCOMPLETE | EPOCH_FLAG_RESIZED,
                      .code = -8,
                      .fail_seq = 0x1112131415161718u,
                      .fail_class = 1,
                      .fail_origin = 0x21222324u,
                      .prev_epoch = 0x31323334u,
                      .done = 0x4142434445464748u,
                      .top = 0x5152535455565758u,
                      .reason = "lost",
                      .waiting = "r3",
                      .members = 0x6162636465666768u,
                      .members_epoch = 0x71727374u,
                      .members_why = "h2 left",
                      .prior = {.epoch = 0x31323334u,
                                .by = 0x35363738u,
                                .prev_epoch = 0x2a2b2c2du,
                                .flags = EPOCH_FLAG_DONE_UNKNOWN | EPOCH_FLAG_RESIZED,
                                .code = -9,
                                .fail_seq = 0x8182838485868788u,
                                .fail_class = 2,
                                .done = 0x9192939495969798u,
                                .top = 0xa1a2a3a4a5a6a7a8u,
                                .members = 0xb1b2b3b4b5b6b7b8u,
                                .members_epoch = 0xc1c2c3c4u,
                                .reason = "late",
                                .members_why = "h4 back"},
                      .prev_members = 0xd1d2d3d4d5d6d7d8u,
                      .confirmed = 0xe1e2e3e4e5e6e7e8u,
                      .waited = {.epoch = 0x3a3b3c3du,
                                 .by = 0x3e3f4041u,
                                 .prev_epoch = 0x31323334u,
                                 .flags = EPOCH_FLAG_INCOMPLETE | EPOCH_FLAG_RESIZED,
                                 .code = -21,
                                 .fail_seq = 0xf1f2f3f4f5f6f7f8u,
                                 .fail_class = 0,
                                 .done = 0x0102030405060708u,
                                 .top = 0x1112131415161718u,
                                 .members = 0x2122232425262728u,
                                 .members_epoch = 0x3a3b3c3du,
                                 .reason = "wait",
                                 .members_why = "h3 out"}};
    /* clang-format off */
    const uint8_t want[] = {
        0x52, 0x47, 0x4e, 0x44, 12, FRAME_EPOCH, 0, 0, 0, 0, 0, 231, /* header */
        1, 2, 3, 4,                                                 /* epoch */
        0, 0, 0, 5,                                                 /* origin */
        EPOCH_RESET, 0x0b,                                          /* phase, flags */
        0xff, 0xff, 0xff, 0xf8,                                     /* code: -8 */
        0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18,             /* fail_seq */
        1,                                                          /* fail_class */
        0x21, 0x22, 0x23, 0x24,                                     /* fail_origin */
        0x31, 0x32, 0x33, 0x34,                                     /* prev_epoch */
        0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48,             /* done */
        0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58,             /* top */
        0, 4, 'l', 'o', 's', 't',                                   /* reason */
        0, 2, 'r', '3',                                             /* waiting */
        0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68,             /* members */
        0x71, 0x72, 0x73, 0x74,                                     /* members_epoch */
        0, 7, 'h', '2', ' ', 'l', 'e', 'f', 't',                    /* members_why */
        0x31, 0x32, 0x33, 0x34,                                     /* prior: epoch */
        0x35, 0x36, 0x37, 0x38,                                     /* by */
        0x2a, 0x2b, 0x2c, 0x2d,                                     /* prev_epoch */
        0x0c,                                                       /* flags */
        0xff, 0xff, 0xff, 0xf7,                                     /* code: -9 */
        0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88,             /* fail_seq */
        2,                                                          /* fail_class */
        0x91, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98,             /* done */
        0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8,             /* top */
        0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8,             /* members */
        0xc1, 0xc2, 0xc3, 0xc4,                                     /* members_epoch */
        0, 4, 'l', 'a', 't', 'e',                                   /* reason */
        0, 7, 'h', '4', ' ', 'b', 'a', 'c', 'k',                    /* members_why */
        0xd1, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8,             /* prev_members */
        0xe1, 0xe2, 0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0xe8,             /* confirmed */
        0x3a, 0x3b, 0x3c, 0x3d,                                     /* waited: epoch */
        0x3e, 0x3f, 0x40, 0x41,                                     /* by */
        0x31, 0x32, 0x33, 0x34,                                     /* prev_epoch */
        0x0a,                                                       /* flags */
        0xff, 0xff, 0xff, 0xeb,                                     /* code: -21 */
        0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8,             /* fail_seq */
        0,                                                          /* fail_class */
        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,             /* done */
        0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18,             /* top */
        0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28,             /* members */
        0x3a, 0x3b, 0x3c, 0x3d,                                     /* members_epoch */
        0, 4, 'w', 'a', 'i', 't',                                   /* reason */
        0, 6, 'h', '3', ' ', 'o', 'u', 't',                         /* members_why */
    };
    /* clang-format on */
    uint8_t buf[FRAME_BUF];

    cr_assert_eq(EPOCH_BREAK, 1);
    cr_assert_eq(EPOCH_FORM, 2);
    cr_assert_eq(EPOCH_CONFIRM, 3);
    cr_assert_eq(EPOCH_RESET, 4);
    cr_assert_eq(EPOCH_LEAVE, 5);
    cr_assert_eq(EPOCH_FLAG_GONE, 0x01);
    cr_assert_eq(EPOCH_FLAG_INCOMPLETE, 0x02);
    cr_assert_eq(EPOCH_FLAG_DONE_UNKNOWN, 0x04);
    cr_assert_eq(EPOCH_FLAG_RESIZED, 0x08);
    cr_assert_eq(EPOCH_FLAGS_ALL, 0x0f);
    cr_assert_eq(frame_encode_epoch(buf, sizeof buf, &in), sizeof want);
    cr_assert_arr_eq(buf, want, sizeof want);
}

Test(frame, commit_has_the_documented_byte_layout)
{
    /* Counts travel as the least and each host's excess over it, what
     * each host knew as its shortfall below the least. */
    frame_commit in = {.epoch = 0x01020304,
                       .n = 3,
                       .done = {0x100000005u, 0x100000002u, 0x100000102u},
                       .known = {0x100000002u, 0x0ffffff00u, 0x100000001u}};
    /* clang-format off */
    const uint8_t want[] = {
        0x52, 0x47, 0x4e, 0x44, 12, FRAME_COMMIT, 0, 0, 0, 0, 0, 38, /* header */
        1, 2, 3, 4,                                                 /* epoch */
        0, 3,                                                       /* hosts */
        0, 0, 0, 1, 0, 0, 0, 2,                                     /* base: the least */
        0, 0, 0, 3,   0, 0, 0, 0,   0, 0, 1, 0,                     /* each one's excess */
        0, 0, 0, 0,   0, 0, 1, 2,   0, 0, 0, 1,                     /* each one's shortfall */
    };
    /* clang-format on */
    uint8_t buf[FRAME_BUF];

    cr_assert_eq(FRAME_COMMIT, 8);
    cr_assert_eq(frame_encode_commit(buf, sizeof buf, &in), sizeof want);
    cr_assert_arr_eq(buf, want, sizeof want);
}

Test(frame, data_has_the_documented_byte_layout)
{
    frame_data in = {.seq = 0x0102030405060708u,
                     .epoch = 0x090a0b0cu,
                     .step = 0x0d0e,
                     .dtype = 6,
                     .op = 1,
                     .chunk = 0x11121314u,
                     .length = 0x100,
                     .count = 0x2122232425262728u,
                     .offset = 0x3132333435363738u,
                     .kind = 2,
                     .name_tag = 0x4546,
                     .root = 0x41424344u,
                     .wsum = -2.0,
                     .has_crc = 1,
                     .crc = 0x51525354u,
                     .delta_us = -2};
    /* clang-format off */
    const uint8_t want[] = {
        0x52, 0x47, 0x4e, 0x44, 12, FRAME_DATA, 0, 4, 0, 0, 0x01, 0x40, /* CRC flag, 64 + 256 */
        1, 2, 3, 4, 5, 6, 7, 8,                                         /* seq */
        9, 10, 11, 12,                                                  /* epoch */
        13, 14, 6, 1,                                                   /* step, dtype, op */
        0x11, 0x12, 0x13, 0x14,                                         /* chunk */
        0, 0, 1, 0,                                                     /* length */
        0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28,                 /* count */
        0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38,                 /* offset */
        2, 0, 0x45, 0x46,                                      /* kind, reserved, name_tag */
        0x41, 0x42, 0x43, 0x44,                                         /* root */
        0xc0, 0, 0, 0, 0, 0, 0, 0,                                      /* wsum: binary64 -2.0 */
        0x51, 0x52, 0x53, 0x54,                                         /* crc */
        0xff, 0xff, 0xff, 0xfe,                                         /* delta_us: -2 */
    };
    /* clang-format on */
    uint8_t buf[FRAME_BUF];

    cr_assert_eq(frame_encode_data(buf, sizeof buf, &in), sizeof want);
    cr_assert_arr_eq(buf, want, sizeof want);
}

Test(frame, each_type_sets_only_its_own_flags)
{
    uint16_t le = host_is_little_endian() ? FRAME_FLAG_LITTLE_ENDIAN : 0;
    uint8_t buf[FRAME_BUF];
    frame_header h;

    cr_assert_eq(FRAME_FLAG_LITTLE_ENDIAN, 0x0001);
    cr_assert_eq(FRAME_FLAG_AUTH, 0x0002);
    cr_assert_eq(FRAME_FLAG_CRC, 0x0004);
    for (size_t i = 0; i < N_ALL_TYPES; i++) {
        uint16_t want = 0;

        encode_sample(all_types[i], buf, sizeof buf, &h);
        if (all_types[i] == FRAME_HELLO) want = le | FRAME_FLAG_AUTH;
        if (all_types[i] == FRAME_WELCOME) want = FRAME_FLAG_AUTH;
        if (all_types[i] == FRAME_DATA) want = FRAME_FLAG_CRC;
        cr_assert_eq(h.flags, want, "%s flags", frame_type_name(all_types[i]));
    }
}

Test(frame, without_a_key_or_a_checksum_only_the_byte_order_flag_is_set)
{
    any_frame hello = sample(FRAME_HELLO), welcome = sample(FRAME_WELCOME),
              data = sample(FRAME_DATA), out;
    uint8_t buf[FRAME_BUF];
    frame_header h;

    hello.hello.auth = 0;
    cr_assert_gt(frame_encode_hello(buf, sizeof buf, &hello.hello), 0);
    cr_assert_eq(frame_decode_header(buf, sizeof buf, &h), FRAME_OK);
    cr_assert_eq(h.flags, host_is_little_endian() ? FRAME_FLAG_LITTLE_ENDIAN : 0);
    cr_assert_eq(frame_decode_hello(&h, buf + FRAME_HEADER_SIZE, &out.hello), FRAME_OK);
    cr_assert_eq(out.hello.auth, 0);

    welcome.welcome.auth = 0;
    cr_assert_gt(frame_encode_welcome(buf, sizeof buf, &welcome.welcome), 0);
    cr_assert_eq(frame_decode_header(buf, sizeof buf, &h), FRAME_OK);
    cr_assert_eq(h.flags, 0);
    cr_assert_eq(frame_decode_welcome(&h, buf + FRAME_HEADER_SIZE, &out.welcome), FRAME_OK);
    cr_assert_eq(out.welcome.auth, 0);

    data.data.has_crc = 0;
    cr_assert_gt(frame_encode_data(buf, sizeof buf, &data.data), 0);
    cr_assert_eq(frame_decode_header(buf, sizeof buf, &h), FRAME_OK);
    cr_assert_eq(h.flags, 0);
    cr_assert_eq(frame_decode_data(&h, buf + FRAME_HEADER_SIZE, &out.data), FRAME_OK);
    cr_assert_eq(out.data.has_crc, 0);
}

Test(frame, decoders_take_auth_and_crc_from_the_header_flags)
{
    any_frame hello = sample(FRAME_HELLO), welcome = sample(FRAME_WELCOME),
              data = sample(FRAME_DATA), out;
    uint8_t buf[FRAME_BUF];
    frame_header h;

    hello.hello.auth = 0;
    frame_encode_hello(buf, sizeof buf, &hello.hello);
    buf[7] |= FRAME_FLAG_AUTH;
    cr_assert_eq(frame_decode_header(buf, sizeof buf, &h), FRAME_OK);
    cr_assert_eq(frame_decode_hello(&h, buf + FRAME_HEADER_SIZE, &out.hello), FRAME_OK);
    cr_assert_eq(out.hello.auth, 1);

    welcome.welcome.auth = 0;
    frame_encode_welcome(buf, sizeof buf, &welcome.welcome);
    buf[7] |= FRAME_FLAG_AUTH;
    cr_assert_eq(frame_decode_header(buf, sizeof buf, &h), FRAME_OK);
    cr_assert_eq(frame_decode_welcome(&h, buf + FRAME_HEADER_SIZE, &out.welcome), FRAME_OK);
    cr_assert_eq(out.welcome.auth, 1);

    /* A CRC of 0 is a CRC like any other once the flag says so. */
    data.data.has_crc = 0;
    frame_encode_data(buf, sizeof buf, &data.data);
    buf[7] |= FRAME_FLAG_CRC;
    cr_assert_eq(frame_decode_header(buf, sizeof buf, &h), FRAME_OK);
    cr_assert_eq(frame_decode_data(&h, buf + FRAME_HEADER_SIZE, &out.data), FRAME_OK);
    cr_assert_eq(out.data.has_crc, 1);
    cr_assert_eq(out.data.crc, 0);
}

Test(frame, data_carries_its_crc_only_with_the_crc_flag)
{
    frame_data in = {.seq = 1, .length = 4, .has_crc = 1, .crc = 0xe3069283u}, out;
    uint8_t buf[FRAME_BUF];
    frame_header h;
    int n = frame_encode_data(buf, sizeof buf, &in);
    static const uint8_t crc[] = {0xe3, 0x06, 0x92, 0x83}, zeros[4];

    cr_assert_eq(frame_decode_header(buf, (size_t)n, &h), FRAME_OK);
    cr_assert_eq(h.flags, FRAME_FLAG_CRC);
    cr_assert_arr_eq(buf + FRAME_HEADER_SIZE + DATA_CRC, crc, 4);
    cr_assert_eq(frame_decode_data(&h, buf + FRAME_HEADER_SIZE, &out), FRAME_OK);
    cr_assert_eq(out.has_crc, 1);
    cr_assert_eq(out.crc, 0xe3069283u);

    /* Without the flag the field is sent as 0, whatever the struct holds. */
    in.has_crc = 0;
    n = frame_encode_data(buf, sizeof buf, &in);
    cr_assert_eq(frame_decode_header(buf, (size_t)n, &h), FRAME_OK);
    cr_assert_eq(h.flags, 0);
    cr_assert_arr_eq(buf + FRAME_HEADER_SIZE + DATA_CRC, zeros, 4);
    cr_assert_eq(frame_decode_data(&h, buf + FRAME_HEADER_SIZE, &out), FRAME_OK);
    cr_assert_eq(out.has_crc, 0);

    /* A crc without its flag: the flag was lost, and with it the check. */
    buf[FRAME_HEADER_SIZE + DATA_CRC] = 1;
    cr_assert_eq(frame_decode_data(&h, buf + FRAME_HEADER_SIZE, &out), FRAME_EMALFORMED);
}

Test(frame, empty_strings_round_trip)
{
    frame_hello in = {.n_hosts = 1}, out;
    uint8_t buf[FRAME_BUF];
    frame_header h;
    int n = frame_encode_hello(buf, sizeof buf, &in);

    cr_assert_eq(n, FRAME_HEADER_SIZE + 16 + 2 + 2 + FRAME_NONCE_SIZE + HELLO_STREAMS);
    cr_assert_eq(frame_decode_header(buf, (size_t)n, &h), FRAME_OK);
    cr_assert_eq(frame_decode_hello(&h, buf + FRAME_HEADER_SIZE, &out), FRAME_OK);
    cr_assert_str_eq(out.cluster, "");
    cr_assert_str_eq(out.from_name, "");
}

Test(frame, encoder_truncates_strings_to_their_limit)
{
    frame_abort in = {.code = -10}, out;
    frame_epoch ein = {.epoch = 12,
                       .phase = EPOCH_CONFIRM,
                       .code = -8,
                       .prev_epoch = 9,
                       .prior = {.epoch = 9, .by = 9, .prev_epoch = 5}},
                eout;
    uint8_t buf[FRAME_BUF];
    frame_header h;

    /* No NUL anywhere in the array: one byte over the limit. */
    memset(in.reason, 'x', sizeof in.reason);
    cr_assert_eq(frame_encode_abort(buf, sizeof buf, &in),
                 FRAME_HEADER_SIZE + 16 + 2 + FRAME_MAX_TEXT);
    cr_assert_eq(frame_decode_header(buf, sizeof buf, &h), FRAME_OK);
    cr_assert_eq(frame_decode_abort(&h, buf + FRAME_HEADER_SIZE, &out), FRAME_OK);
    cr_assert_eq(strlen(out.reason), FRAME_MAX_TEXT);

    memset(ein.reason, 'x', sizeof ein.reason);
    memset(ein.waiting, 'y', sizeof ein.waiting);
    memset(ein.members_why, 'z', sizeof ein.members_why);
    memset(ein.prior.reason, 'u', sizeof ein.prior.reason);
    memset(ein.prior.members_why, 'v', sizeof ein.prior.members_why);
    cr_assert_eq(frame_encode_epoch(buf, sizeof buf, &ein),
                 FRAME_HEADER_SIZE + EPOCH_FIXED + 2 + FRAME_MAX_TEXT + 2 + FRAME_MAX_WAITING +
                     EPOCH_MEMBERS + 2 + FRAME_MAX_WAITING + PRIOR_FIXED + 2 + FRAME_MAX_TEXT + 2 +
                     FRAME_MAX_WAITING + EPOCH_TAIL);
    cr_assert_eq(frame_decode_header(buf, sizeof buf, &h), FRAME_OK);
    cr_assert_eq(frame_decode_epoch(&h, buf + FRAME_HEADER_SIZE, &eout), FRAME_OK);
    cr_assert_eq(strlen(eout.reason), FRAME_MAX_TEXT);
    cr_assert_eq(strlen(eout.waiting), FRAME_MAX_WAITING);
    cr_assert_eq(strlen(eout.members_why), FRAME_MAX_WAITING);
    cr_assert_eq(strlen(eout.prior.reason), FRAME_MAX_TEXT);
    cr_assert_eq(strlen(eout.prior.members_why), FRAME_MAX_WAITING);
}

Test(frame, encoders_refuse_a_short_buffer_without_writing_past_it)
{
    for (size_t t = 0; t < N_ALL_TYPES; t++) {
        any_frame f = sample(all_types[t]);
        uint8_t buf[FRAME_BUF + 1];
        int n = encode_any(all_types[t], &f, buf, sizeof buf);

        for (int cap = 0; cap < n; cap++) {
            memset(buf, 0xee, sizeof buf);
            cr_assert_eq(encode_any(all_types[t], &f, buf, (size_t)cap), FRAME_ESPACE,
                         "%s into %d bytes", frame_type_name(all_types[t]), cap);
            for (size_t i = (size_t)cap; i < sizeof buf; i++)
                cr_assert_eq(buf[i], 0xee, "%s wrote byte %zu of a %d-byte buffer",
                             frame_type_name(all_types[t]), i, cap);
        }
    }
}

Test(frame, encoder_refuses_data_payload_over_limit)
{
    frame_data d = {.length = FRAME_MAX_PAYLOAD + 1};
    uint8_t buf[FRAME_BUF];

    cr_assert_eq(frame_encode_data(buf, sizeof buf, &d), FRAME_ELENGTH);
}

/* The common header */

Test(frame, header_needs_all_twelve_bytes)
{
    for (size_t t = 0; t < N_ALL_TYPES; t++) {
        any_frame f = sample(all_types[t]);
        uint8_t buf[FRAME_BUF];
        frame_header h;

        encode_any(all_types[t], &f, buf, sizeof buf);
        for (size_t len = 0; len < FRAME_HEADER_SIZE; len++)
            cr_assert_eq(frame_decode_header(buf, len, &h), FRAME_EAGAIN,
                         "%s header cut to %zu bytes", frame_type_name(all_types[t]), len);
        cr_assert_eq(frame_decode_header(buf, FRAME_HEADER_SIZE, &h), FRAME_OK);
    }
}

Test(frame, rejects_wrong_magic)
{
    uint8_t buf[FRAME_BUF];
    frame_header h;
    int n = frame_encode_ping(buf, sizeof buf);

    for (int i = 0; i < 4; i++) {
        buf[i] ^= 0x20;
        cr_assert_eq(frame_decode_header(buf, (size_t)n, &h), FRAME_EMAGIC, "magic byte %d", i);
        buf[i] ^= 0x20;
    }
}

Test(frame, rejects_other_version_and_reports_it)
{
    uint8_t buf[FRAME_BUF];
    frame_header h;
    int n = frame_encode_ping(buf, sizeof buf);

    buf[4] = FRAME_VERSION + 1;
    cr_assert_eq(frame_decode_header(buf, (size_t)n, &h), FRAME_EVERSION);
    cr_assert_eq(h.version, FRAME_VERSION + 1);
    buf[4] = 0;
    cr_assert_eq(frame_decode_header(buf, (size_t)n, &h), FRAME_EVERSION);
    /* Version 1 had other layouts; its frames are refused, not misread. */
    buf[4] = 1;
    cr_assert_eq(frame_decode_header(buf, (size_t)n, &h), FRAME_EVERSION);
    cr_assert_eq(h.version, 1);
}

Test(frame, reports_other_version_before_unknown_type)
{
    uint8_t buf[FRAME_BUF];
    frame_header h;
    int n = frame_encode_ping(buf, sizeof buf);

    buf[4] = FRAME_VERSION + 1;
    buf[5] = 99;
    cr_assert_eq(frame_decode_header(buf, (size_t)n, &h), FRAME_EVERSION);
}

Test(frame, rejects_unknown_type)
{
    static const uint8_t bad[] = {0, FRAME_REPORT + 1, 0x80, 0xff};
    uint8_t buf[FRAME_BUF];
    frame_header h;
    int n = frame_encode_ping(buf, sizeof buf);

    for (size_t i = 0; i < sizeof bad; i++) {
        buf[5] = bad[i];
        cr_assert_eq(frame_decode_header(buf, (size_t)n, &h), FRAME_ETYPE, "type %d", bad[i]);
    }
}

static int header_with_length(int type, uint32_t length)
{
    uint8_t buf[FRAME_HEADER_SIZE];
    frame_header h;

    frame_encode_ping(buf, sizeof buf);
    buf[5] = (uint8_t)type;
    buf[8] = (uint8_t)(length >> 24);
    buf[9] = (uint8_t)(length >> 16);
    buf[10] = (uint8_t)(length >> 8);
    buf[11] = (uint8_t)length;
    return frame_decode_header(buf, sizeof buf, &h);
}

Test(frame, rejects_control_length_over_limit)
{
    static const int types[] = {FRAME_HELLO, FRAME_WELCOME, FRAME_ABORT, FRAME_AUTH, FRAME_EPOCH};

    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        cr_assert_eq(header_with_length(types[i], 0), FRAME_OK);
        cr_assert_eq(header_with_length(types[i], FRAME_MAX_CONTROL_BODY), FRAME_OK);
        cr_assert_eq(header_with_length(types[i], FRAME_MAX_CONTROL_BODY + 1), FRAME_ELENGTH);
        cr_assert_eq(header_with_length(types[i], UINT32_MAX), FRAME_ELENGTH);
    }
    /* A COMMIT counts up to FRAME_MAX_COMMIT_HOSTS hosts. */
    cr_assert_eq(header_with_length(FRAME_COMMIT, FRAME_MAX_COMMIT_BODY), FRAME_OK);
    cr_assert_eq(header_with_length(FRAME_COMMIT, FRAME_MAX_COMMIT_BODY + 1), FRAME_ELENGTH);
}

Test(frame, rejects_data_length_outside_fixed_part_and_max_body)
{
    cr_assert_eq(header_with_length(FRAME_DATA, 0), FRAME_ELENGTH);
    cr_assert_eq(header_with_length(FRAME_DATA, FRAME_DATA_HEADER_SIZE - 1), FRAME_ELENGTH);
    cr_assert_eq(header_with_length(FRAME_DATA, FRAME_DATA_HEADER_SIZE), FRAME_OK);
    cr_assert_eq(header_with_length(FRAME_DATA, FRAME_MAX_BODY), FRAME_OK);
    cr_assert_eq(header_with_length(FRAME_DATA, FRAME_MAX_BODY + 1), FRAME_ELENGTH);
    cr_assert_eq(header_with_length(FRAME_DATA, UINT32_MAX), FRAME_ELENGTH);
}

Test(frame, rejects_ping_with_a_body)
{
    cr_assert_eq(header_with_length(FRAME_PING, 1), FRAME_ELENGTH);
    cr_assert_eq(header_with_length(FRAME_PING, FRAME_MAX_CONTROL_BODY), FRAME_ELENGTH);
}

/* Bodies */

Test(frame, rejects_every_truncated_body)
{
    for (size_t t = 0; t < N_BODY_TYPES; t++) {
        uint8_t buf[FRAME_BUF];
        frame_header h;
        any_frame out;

        encode_sample(body_types[t], buf, sizeof buf, &h);
        for (uint32_t len = 0; len < decoded_len(&h); len++) {
            frame_header cut = h;
            /* For DATA, the header's length is what it is; a body shorter
             * than the fixed part has no room for the payload length field. */
            cut.length = len;
            cr_assert_eq(decode_exact(&cut, buf + FRAME_HEADER_SIZE, len, &out), FRAME_EMALFORMED,
                         "%s body cut to %u bytes", frame_type_name(h.type), len);
        }
    }
}

Test(frame, rejects_trailing_bytes_after_the_body)
{
    for (size_t t = 0; t < N_BODY_TYPES; t++) {
        uint8_t buf[FRAME_BUF + 1];
        frame_header h;
        any_frame out;
        int n = encode_sample(body_types[t], buf, sizeof buf, &h);

        buf[n] = 'x';
        h.length++;
        cr_assert_eq(decode_exact(&h, buf + FRAME_HEADER_SIZE, decoded_len(&h), &out),
                     FRAME_EMALFORMED, "%s with a trailing byte", frame_type_name(h.type));
    }
}

Test(frame, rejects_string_with_nul)
{
    frame_hello in = {.cluster = "prod", .from_name = "host-a"}, out;
    uint8_t buf[FRAME_BUF];
    frame_header h;
    int n = frame_encode_hello(buf, sizeof buf, &in);
    size_t cluster = FRAME_HEADER_SIZE + 16 + 2, name = cluster + 4 + 2;

    cr_assert_eq(frame_decode_header(buf, (size_t)n, &h), FRAME_OK);
    buf[cluster + 1] = '\0';
    cr_assert_eq(frame_decode_hello(&h, buf + FRAME_HEADER_SIZE, &out), FRAME_EMALFORMED);
    buf[cluster + 1] = 'r';
    buf[name + 5] = '\0';
    cr_assert_eq(frame_decode_hello(&h, buf + FRAME_HEADER_SIZE, &out), FRAME_EMALFORMED);
    buf[name + 5] = 'a';
    cr_assert_eq(frame_decode_hello(&h, buf + FRAME_HEADER_SIZE, &out), FRAME_OK);
}

/* Builds a frame of type whose body is `fixed` bytes of zeros, one string of
 * slen bytes and `tail` bytes of zeros, with every length consistent. */
static size_t body_with_string(uint8_t *buf, int type, size_t fixed, size_t slen, size_t tail)
{
    size_t body = fixed + 2 + slen + tail;

    memset(buf, 0, FRAME_HEADER_SIZE + body);
    frame_encode_ping(buf, FRAME_HEADER_SIZE);
    buf[5] = (uint8_t)type;
    buf[10] = (uint8_t)(body >> 8);
    buf[11] = (uint8_t)body;
    buf[FRAME_HEADER_SIZE + fixed] = (uint8_t)(slen >> 8);
    buf[FRAME_HEADER_SIZE + fixed + 1] = (uint8_t)slen;
    memset(buf + FRAME_HEADER_SIZE + fixed + 2, 's', slen);
    return FRAME_HEADER_SIZE + body;
}

/* Makes the EPOCH body in buf the CONFIRM of epoch 12 that settles epoch 9
 * and carries how 9 became ready (it settled 5; 9 itself carried it): a
 * prior is only of such a lap. */
static void as_lap_with_prior(uint8_t *buf)
{
    uint8_t *b = buf + FRAME_HEADER_SIZE;
    b[3] = 12; /* epoch */
    b[EPOCH_PHASE] = EPOCH_CONFIRM;
    b[27 + 3] = 9;              /* prev_epoch */
    b[EPOCH_EMPTY + 3] = 9;     /* prior.epoch */
    b[EPOCH_EMPTY + 4 + 3] = 9; /* prior.by */
    b[EPOCH_EMPTY + 8 + 3] = 5; /* prior.prev_epoch */
}

Test(frame, rejects_string_over_its_limit)
{
    uint8_t buf[FRAME_BUF];
    frame_header h;
    frame_welcome w;
    frame_abort a;
    frame_epoch e;

    body_with_string(buf, FRAME_WELCOME, 8, FRAME_MAX_TEXT, WELCOME_TAIL);
    cr_assert_eq(frame_decode_header(buf, sizeof buf, &h), FRAME_OK);
    cr_assert_eq(frame_decode_welcome(&h, buf + FRAME_HEADER_SIZE, &w), FRAME_OK);

    body_with_string(buf, FRAME_WELCOME, 8, FRAME_MAX_TEXT + 1, WELCOME_TAIL);
    cr_assert_eq(frame_decode_header(buf, sizeof buf, &h), FRAME_OK);
    cr_assert_eq(frame_decode_welcome(&h, buf + FRAME_HEADER_SIZE, &w), FRAME_EMALFORMED);

    body_with_string(buf, FRAME_ABORT, 16, FRAME_MAX_TEXT, 0);
    cr_assert_eq(frame_decode_header(buf, sizeof buf, &h), FRAME_OK);
    cr_assert_eq(frame_decode_abort(&h, buf + FRAME_HEADER_SIZE, &a), FRAME_OK);

    body_with_string(buf, FRAME_ABORT, 16, FRAME_MAX_TEXT + 1, 0);
    cr_assert_eq(frame_decode_header(buf, sizeof buf, &h), FRAME_OK);
    cr_assert_eq(frame_decode_abort(&h, buf + FRAME_HEADER_SIZE, &a), FRAME_EMALFORMED);

    /* EPOCH's fixed part needs a valid phase to get as far as its reason;
     * after the reason come an empty waiting, members, members_epoch, an
     * empty members_why and a prior of none. */
    body_with_string(buf, FRAME_EPOCH, EPOCH_FIXED, FRAME_MAX_TEXT,
                     2 + EPOCH_MEMBERS + 2 + PRIOR_EMPTY + EPOCH_TAIL);
    buf[FRAME_HEADER_SIZE + EPOCH_PHASE] = EPOCH_BREAK;
    cr_assert_eq(frame_decode_header(buf, sizeof buf, &h), FRAME_OK);
    cr_assert_eq(frame_decode_epoch(&h, buf + FRAME_HEADER_SIZE, &e), FRAME_OK);

    body_with_string(buf, FRAME_EPOCH, EPOCH_FIXED, FRAME_MAX_TEXT + 1,
                     2 + EPOCH_MEMBERS + 2 + PRIOR_EMPTY + EPOCH_TAIL);
    buf[FRAME_HEADER_SIZE + EPOCH_PHASE] = EPOCH_BREAK;
    cr_assert_eq(frame_decode_header(buf, sizeof buf, &h), FRAME_OK);
    cr_assert_eq(frame_decode_epoch(&h, buf + FRAME_HEADER_SIZE, &e), FRAME_EMALFORMED);

    /* members_why, after an empty reason and waiting. */
    body_with_string(buf, FRAME_EPOCH, EPOCH_FIXED + 2 + 2 + EPOCH_MEMBERS, FRAME_MAX_WAITING,
                     PRIOR_EMPTY + EPOCH_TAIL);
    buf[FRAME_HEADER_SIZE + EPOCH_PHASE] = EPOCH_BREAK;
    cr_assert_eq(frame_decode_header(buf, sizeof buf, &h), FRAME_OK);
    cr_assert_eq(frame_decode_epoch(&h, buf + FRAME_HEADER_SIZE, &e), FRAME_OK);
    cr_assert_eq(strlen(e.members_why), FRAME_MAX_WAITING);

    body_with_string(buf, FRAME_EPOCH, EPOCH_FIXED + 2 + 2 + EPOCH_MEMBERS, FRAME_MAX_WAITING + 1,
                     PRIOR_EMPTY + EPOCH_TAIL);
    buf[FRAME_HEADER_SIZE + EPOCH_PHASE] = EPOCH_BREAK;
    cr_assert_eq(frame_decode_header(buf, sizeof buf, &h), FRAME_OK);
    cr_assert_eq(frame_decode_epoch(&h, buf + FRAME_HEADER_SIZE, &e), FRAME_EMALFORMED);

    /* The prior's reason, then its members_why, the last string. */
    body_with_string(buf, FRAME_EPOCH, EPOCH_EMPTY + PRIOR_FIXED, FRAME_MAX_TEXT, 2 + EPOCH_TAIL);
    as_lap_with_prior(buf);
    cr_assert_eq(frame_decode_header(buf, sizeof buf, &h), FRAME_OK);
    cr_assert_eq(frame_decode_epoch(&h, buf + FRAME_HEADER_SIZE, &e), FRAME_OK);
    cr_assert_eq(strlen(e.prior.reason), FRAME_MAX_TEXT);

    body_with_string(buf, FRAME_EPOCH, EPOCH_EMPTY + PRIOR_FIXED, FRAME_MAX_TEXT + 1,
                     2 + EPOCH_TAIL);
    as_lap_with_prior(buf);
    cr_assert_eq(frame_decode_header(buf, sizeof buf, &h), FRAME_OK);
    cr_assert_eq(frame_decode_epoch(&h, buf + FRAME_HEADER_SIZE, &e), FRAME_EMALFORMED);

    body_with_string(buf, FRAME_EPOCH, EPOCH_EMPTY + PRIOR_FIXED + 2, FRAME_MAX_WAITING,
                     EPOCH_TAIL);
    as_lap_with_prior(buf);
    cr_assert_eq(frame_decode_header(buf, sizeof buf, &h), FRAME_OK);
    cr_assert_eq(frame_decode_epoch(&h, buf + FRAME_HEADER_SIZE, &e), FRAME_OK);
    cr_assert_eq(strlen(e.prior.members_why), FRAME_MAX_WAITING);

    body_with_string(buf, FRAME_EPOCH, EPOCH_EMPTY + PRIOR_FIXED + 2, FRAME_MAX_WAITING + 1,
                     EPOCH_TAIL);
    as_lap_with_prior(buf);
    cr_assert_eq(frame_decode_header(buf, sizeof buf, &h), FRAME_OK);
    cr_assert_eq(frame_decode_epoch(&h, buf + FRAME_HEADER_SIZE, &e), FRAME_EMALFORMED);
}

/* Decodes a HELLO whose from_name has len bytes, built by encoding one of
 * len - 1 bytes and growing it by one in place: every length field stays
 * consistent and the nonce moves one byte on. */
static int decode_hello_with_name_of(size_t len, frame_hello *out)
{
    frame_hello in = {.cluster = "prod"};
    uint8_t buf[FRAME_BUF];
    frame_header h;
    size_t name = FRAME_HEADER_SIZE + 16 + 2 + 4;
    size_t nonce;
    int n;

    count_up(in.nonce, FRAME_NONCE_SIZE, 0x10);
    fill(in.from_name, len - 1, 'n');
    n = frame_encode_hello(buf, sizeof buf, &in);
    nonce = (size_t)n - FRAME_NONCE_SIZE - HELLO_STREAMS;
    memmove(buf + nonce + 1, buf + nonce, FRAME_NONCE_SIZE + HELLO_STREAMS);
    buf[nonce] = 'n';
    buf[name + 1]++;
    buf[11]++;
    cr_assert_eq(frame_decode_header(buf, (size_t)n + 1, &h), FRAME_OK);
    return frame_decode_hello(&h, buf + FRAME_HEADER_SIZE, out);
}

Test(frame, rejects_name_over_its_limit)
{
    frame_hello out, nonce = {0};

    count_up(nonce.nonce, FRAME_NONCE_SIZE, 0x10);
    cr_assert_eq(decode_hello_with_name_of(FRAME_MAX_NAME, &out), FRAME_OK);
    cr_assert_eq(strlen(out.from_name), FRAME_MAX_NAME);
    cr_assert_arr_eq(out.nonce, nonce.nonce, FRAME_NONCE_SIZE);
    cr_assert_eq(decode_hello_with_name_of(FRAME_MAX_NAME + 1, &out), FRAME_EMALFORMED);
}

Test(frame, rejects_data_whose_payload_length_disagrees_with_the_header)
{
    frame_data in = {.length = 1024}, out;
    uint8_t buf[FRAME_BUF];
    frame_header h;
    int n = frame_encode_data(buf, sizeof buf, &in);

    cr_assert_eq(frame_decode_header(buf, (size_t)n, &h), FRAME_OK);
    cr_assert_eq(frame_decode_data(&h, buf + FRAME_HEADER_SIZE, &out), FRAME_OK);
    h.length--;
    cr_assert_eq(frame_decode_data(&h, buf + FRAME_HEADER_SIZE, &out), FRAME_EMALFORMED);
    h.length += 2;
    cr_assert_eq(frame_decode_data(&h, buf + FRAME_HEADER_SIZE, &out), FRAME_EMALFORMED);
    h.length--;
    buf[FRAME_HEADER_SIZE + 23]++; /* the payload length field */
    cr_assert_eq(frame_decode_data(&h, buf + FRAME_HEADER_SIZE, &out), FRAME_EMALFORMED);
}

Test(frame, accepts_data_with_an_empty_payload)
{
    frame_data in = {.seq = 1, .length = 0};
    any_frame out;
    uint8_t buf[FRAME_BUF];
    frame_header h;
    int n = frame_encode_data(buf, sizeof buf, &in);

    cr_assert_eq(frame_decode_header(buf, (size_t)n, &h), FRAME_OK);
    cr_assert_eq(h.length, FRAME_DATA_HEADER_SIZE);
    cr_assert_eq(decode_exact(&h, buf + FRAME_HEADER_SIZE, FRAME_DATA_HEADER_SIZE, &out), FRAME_OK);
    cr_assert_eq(out.data.length, 0);
}

Test(frame, data_takes_the_wire_types_and_refuses_other_values_after_kind)
{
    /* The byte after kind: 0, or RINGD_WIRE_BFLOAT16 (2) or RINGD_WIRE_FLOAT16 (3). */
    static const size_t reserved[] = {41};
    any_frame in = sample(FRAME_DATA), out;
    uint8_t buf[FRAME_BUF];
    frame_header h;

    frame_encode_data(buf, sizeof buf, &in.data);
    cr_assert_eq(frame_decode_header(buf, sizeof buf, &h), FRAME_OK);
    cr_assert_eq(frame_decode_data(&h, buf + FRAME_HEADER_SIZE, &out.data), FRAME_OK);
    for (size_t i = 0; i < sizeof reserved / sizeof *reserved; i++) {
        for (int v = 2; v <= 3; v++) {
            buf[FRAME_HEADER_SIZE + reserved[i]] = (uint8_t)v;
            cr_assert_eq(frame_decode_data(&h, buf + FRAME_HEADER_SIZE, &out.data), FRAME_OK);
            cr_assert_eq(out.data.wire, v);
        }
        for (int bit = 0; bit < 8; bit++) {
            if (bit == 1) continue; /* 2: bfloat16 */
            buf[FRAME_HEADER_SIZE + reserved[i]] = (uint8_t)(1u << bit);
            cr_assert_eq(frame_decode_data(&h, buf + FRAME_HEADER_SIZE, &out.data),
                         FRAME_EMALFORMED, "reserved byte %zu = %#x", reserved[i], 1u << bit);
        }
        buf[FRAME_HEADER_SIZE + reserved[i]] = 0;
    }
    cr_assert_eq(frame_decode_data(&h, buf + FRAME_HEADER_SIZE, &out.data), FRAME_OK);
}

Test(frame, rejects_epoch_with_an_unknown_phase)
{
    static const uint8_t bad[] = {0, EPOCH_LEAVE + 1, 0x7f, 0x80, 0xff};
    any_frame in = sample(FRAME_EPOCH), out;
    uint8_t buf[FRAME_BUF];
    frame_header h;
    int n = frame_encode_epoch(buf, sizeof buf, &in.epoch);

    cr_assert_eq(frame_decode_header(buf, (size_t)n, &h), FRAME_OK);
    cr_assert_eq(buf[FRAME_HEADER_SIZE + EPOCH_PHASE], in.epoch.phase);
    for (size_t i = 0; i < sizeof bad; i++) {
        buf[FRAME_HEADER_SIZE + EPOCH_PHASE] = bad[i];
        cr_assert_eq(decode_exact(&h, buf + FRAME_HEADER_SIZE, h.length, &out), FRAME_EMALFORMED,
                     "phase %d", bad[i]);
    }
}

Test(frame, rejects_epoch_with_an_unknown_flag)
{
    static const uint8_t bad[] = {0x10, 0x20, 0x40, 0x80, 0xff};
    any_frame in = sample(FRAME_EPOCH), out;
    uint8_t buf[FRAME_BUF];
    frame_header h;
    int n = frame_encode_epoch(buf, sizeof buf, &in.epoch);

    cr_assert_eq(frame_decode_header(buf, (size_t)n, &h), FRAME_OK);
    cr_assert_eq(buf[FRAME_HEADER_SIZE + EPOCH_FLAGS], EPOCH_FLAGS_ALL);
    for (size_t i = 0; i < sizeof bad; i++) {
        buf[FRAME_HEADER_SIZE + EPOCH_FLAGS] = bad[i];
        cr_assert_eq(decode_exact(&h, buf + FRAME_HEADER_SIZE, h.length, &out), FRAME_EMALFORMED,
                     "flags 0x%02x", bad[i]);
    }
}

/* Where sample(FRAME_EPOCH)'s prior starts: after three strings at their longest. */
#define SAMPLE_PRIOR                                                                               \
    (FRAME_HEADER_SIZE + EPOCH_FIXED + 2 + FRAME_MAX_TEXT + 2 + FRAME_MAX_WAITING +                \
     EPOCH_MEMBERS + 2 + FRAME_MAX_WAITING)

Test(frame, rejects_epoch_whose_prior_has_a_flag_a_confirm_cannot_pass_on)
{
    /* A prior keeps only DONE_UNKNOWN and RESIZED of its CONFIRM (a ready
     * epoch had no INCOMPLETE, and GONE is a RESET's), and INCOMPLETE with
     * RESIZED: its verdict on the epoch before is a waited's that resized
     * nothing (version 9). */
    static const uint8_t good[] = {0,
                                   EPOCH_FLAG_DONE_UNKNOWN,
                                   EPOCH_FLAG_RESIZED,
                                   EPOCH_FLAG_DONE_UNKNOWN | EPOCH_FLAG_RESIZED,
                                   EPOCH_FLAG_INCOMPLETE | EPOCH_FLAG_RESIZED,
                                   EPOCH_FLAG_INCOMPLETE | EPOCH_FLAG_RESIZED |
                                       EPOCH_FLAG_DONE_UNKNOWN};
    static const uint8_t bad[] = {EPOCH_FLAG_GONE,
                                  EPOCH_FLAG_INCOMPLETE,
                                  EPOCH_FLAG_INCOMPLETE | EPOCH_FLAG_DONE_UNKNOWN,
                                  0x10,
                                  0x20,
                                  0x40,
                                  0x80,
                                  0xff};
    any_frame in = sample(FRAME_EPOCH), out;
    uint8_t buf[FRAME_BUF];
    frame_header h;
    int n = frame_encode_epoch(buf, sizeof buf, &in.epoch);

    cr_assert_eq(frame_decode_header(buf, (size_t)n, &h), FRAME_OK);
    cr_assert_eq(buf[SAMPLE_PRIOR + PRIOR_FLAGS], in.epoch.prior.flags);
    for (size_t i = 0; i < sizeof good; i++) {
        buf[SAMPLE_PRIOR + PRIOR_FLAGS] = good[i];
        cr_assert_eq(decode_exact(&h, buf + FRAME_HEADER_SIZE, h.length, &out), FRAME_OK,
                     "prior flags 0x%02x", good[i]);
        cr_assert_eq(out.epoch.prior.flags, good[i]);
    }
    for (size_t i = 0; i < sizeof bad; i++) {
        buf[SAMPLE_PRIOR + PRIOR_FLAGS] = bad[i];
        cr_assert_eq(decode_exact(&h, buf + FRAME_HEADER_SIZE, h.length, &out), FRAME_EMALFORMED,
                     "prior flags 0x%02x", bad[i]);
    }
}

/* Encodes e (the encoder writes any prior as it is) and decodes it back. */
static int epoch_round_trip(const frame_epoch *e, frame_epoch *out)
{
    uint8_t buf[FRAME_BUF];
    frame_header h;
    int n = frame_encode_epoch(buf, sizeof buf, e);

    cr_assert_gt(n, 0);
    cr_assert_eq(frame_decode_header(buf, (size_t)n, &h), FRAME_OK);
    return frame_decode_epoch(&h, buf + FRAME_HEADER_SIZE, out);
}

Test(frame, rejects_epoch_whose_prior_is_none_but_not_all_zero_or_rides_a_break)
{
    frame_epoch in = {.epoch = 45,
                      .origin = 1,
                      .phase = EPOCH_CONFIRM,
                      .fail_seq = FRAME_NO_SEQ,
                      .prev_epoch = 41,
                      .prior = {.epoch = 41, .by = 41, .prev_epoch = 36, .top = 3}},
                out;
    cr_assert_eq(epoch_round_trip(&in, &out), FRAME_OK);
    /* Only a lap (FORM, RESET, CONFIRM) settles an epoch, and carries a prior. */
    static const uint8_t not_laps[] = {EPOCH_BREAK, EPOCH_LEAVE};
    for (size_t i = 0; i < sizeof not_laps; i++) {
        in.phase = not_laps[i];
        cr_assert_eq(epoch_round_trip(&in, &out), FRAME_EMALFORMED, "phase %u", not_laps[i]);
    }
    /* None is all zero: prior.epoch 0 with anything else set is malformed. */
    in.phase = EPOCH_CONFIRM;
    in.prior.epoch = 0;
    cr_assert_eq(epoch_round_trip(&in, &out), FRAME_EMALFORMED);
    in.prior = (frame_prior){0};
    in.prior.reason[0] = 'x';
    cr_assert_eq(epoch_round_trip(&in, &out), FRAME_EMALFORMED);
    in.prior = (frame_prior){0};
    cr_assert_eq(epoch_round_trip(&in, &out), FRAME_OK);
}

Test(frame, rejects_epoch_whose_prior_is_not_of_its_prev_epoch)
{
    frame_epoch in = {.epoch = 45,
                      .origin = 1,
                      .phase = EPOCH_FORM,
                      .fail_seq = FRAME_NO_SEQ,
                      .prev_epoch = 41,
                      .prior = {.epoch = 41, .by = 43, .prev_epoch = 36, .fail_seq = FRAME_NO_SEQ}},
                out;

    cr_assert_eq(epoch_round_trip(&in, &out), FRAME_OK);
    cr_assert_eq(out.prior.epoch, 41);
    /* The verdict of another epoch than the one the lap settles. */
    static const uint32_t other[] = {40, 42, 45, 36, UINT32_MAX};
    for (size_t i = 0; i < sizeof other / sizeof *other; i++) {
        in.prior.epoch = other[i];
        cr_assert_eq(epoch_round_trip(&in, &out), FRAME_EMALFORMED, "prior of epoch %u", other[i]);
    }
    /* None carried: no host on the lap was ready in prev_epoch. */
    in.prior = (frame_prior){0};
    cr_assert_eq(epoch_round_trip(&in, &out), FRAME_OK);
    /* A lap that settles no epoch carries none either. */
    in.prev_epoch = 0;
    cr_assert_eq(epoch_round_trip(&in, &out), FRAME_OK);
    in.prior.epoch = 41;
    in.prior.by = 41;
    in.prior.prev_epoch = 36;
    cr_assert_eq(epoch_round_trip(&in, &out), FRAME_EMALFORMED);
}

Test(frame, rejects_epoch_whose_prior_settled_no_earlier_epoch)
{
    frame_epoch in = {.epoch = 45,
                      .origin = 1,
                      .phase = EPOCH_RESET,
                      .fail_seq = FRAME_NO_SEQ,
                      .prev_epoch = 41,
                      .prior = {.epoch = 41, .by = 41, .fail_seq = FRAME_NO_SEQ}},
                out;

    /* The ring's first ready epoch settled none (0), and any earlier one
     * may come before it. */
    static const uint32_t good[] = {0, 1, 36, 40};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        in.prior.prev_epoch = good[i];
        cr_assert_eq(epoch_round_trip(&in, &out), FRAME_OK, "prior settling %u", good[i]);
        cr_assert_eq(out.prior.prev_epoch, good[i]);
    }
    static const uint32_t bad[] = {41, 42, UINT32_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        in.prior.prev_epoch = bad[i];
        cr_assert_eq(epoch_round_trip(&in, &out), FRAME_EMALFORMED, "prior settling %u", bad[i]);
    }
}

/* A waited is the confirmation that settled the lap's prev_epoch first and
 * left the ring waiting: of that epoch, later than it, INCOMPLETE, and
 * never a RESET's GONE; none is all zero, and only a lap carries one. */
Test(frame, rejects_epoch_whose_waited_is_not_a_waiting_verdict_on_its_prev_epoch)
{
    frame_epoch in = {.epoch = 45,
                      .origin = 1,
                      .phase = EPOCH_CONFIRM,
                      .fail_seq = FRAME_NO_SEQ,
                      .prev_epoch = 41,
                      .waited = {.epoch = 43,
                                 .by = 44,
                                 .prev_epoch = 41,
                                 .flags = EPOCH_FLAG_INCOMPLETE,
                                 .fail_seq = FRAME_NO_SEQ}},
                out;
    cr_assert_eq(epoch_round_trip(&in, &out), FRAME_OK);
    cr_assert_eq(out.waited.epoch, 43);
    static const uint8_t good[] = {EPOCH_FLAG_INCOMPLETE,
                                   EPOCH_FLAG_INCOMPLETE | EPOCH_FLAG_DONE_UNKNOWN,
                                   EPOCH_FLAG_INCOMPLETE | EPOCH_FLAG_RESIZED};
    for (size_t i = 0; i < sizeof good; i++) {
        in.waited.flags = good[i];
        cr_assert_eq(epoch_round_trip(&in, &out), FRAME_OK, "waited flags 0x%02x", good[i]);
    }
    static const uint8_t bad[] = {0, EPOCH_FLAG_RESIZED, EPOCH_FLAG_INCOMPLETE | EPOCH_FLAG_GONE,
                                  EPOCH_FLAG_INCOMPLETE | 0x10};
    for (size_t i = 0; i < sizeof bad; i++) {
        in.waited.flags = bad[i];
        cr_assert_eq(epoch_round_trip(&in, &out), FRAME_EMALFORMED, "waited flags 0x%02x", bad[i]);
    }
    in.waited.flags = EPOCH_FLAG_INCOMPLETE;
    static const uint32_t other_prev[] = {0, 36, 40, 42, 45};
    for (size_t i = 0; i < sizeof other_prev / sizeof *other_prev; i++) {
        in.waited.prev_epoch = other_prev[i];
        cr_assert_eq(epoch_round_trip(&in, &out), FRAME_EMALFORMED, "waited settling %u",
                     other_prev[i]);
    }
    in.waited.prev_epoch = 41;
    static const uint32_t not_later[] = {41, 40, 1};
    for (size_t i = 0; i < sizeof not_later / sizeof *not_later; i++) {
        in.waited.epoch = not_later[i];
        cr_assert_eq(epoch_round_trip(&in, &out), FRAME_EMALFORMED, "waited of epoch %u",
                     not_later[i]);
    }
    in.waited.epoch = 43;
    static const uint8_t not_laps[] = {EPOCH_BREAK, EPOCH_LEAVE};
    for (size_t i = 0; i < sizeof not_laps; i++) {
        in.phase = not_laps[i];
        cr_assert_eq(epoch_round_trip(&in, &out), FRAME_EMALFORMED, "phase %u", not_laps[i]);
    }
    in.phase = EPOCH_FORM;
    in.prev_epoch = in.waited.prev_epoch = 0; /* a lap that settles no epoch */
    cr_assert_eq(epoch_round_trip(&in, &out), FRAME_EMALFORMED, "a waited of no epoch");
    in.prev_epoch = in.waited.prev_epoch = 41;
    in.waited.epoch = 0;
    cr_assert_eq(epoch_round_trip(&in, &out), FRAME_EMALFORMED, "none, but not all zero");
    in.waited = (frame_prior){0};
    cr_assert_eq(epoch_round_trip(&in, &out), FRAME_OK);
}

Test(frame, rejects_epoch_whose_verdict_was_carried_before_it_was_made_or_by_a_later_lap)
{
    /* by: the newest CONFIRM that carried the verdict, its own or a later
     * one, and older than the lap that carries it now (version 12). */
    frame_epoch in = {.epoch = 45,
                      .origin = 1,
                      .phase = EPOCH_FORM,
                      .fail_seq = FRAME_NO_SEQ,
                      .prev_epoch = 41,
                      .prior = {.epoch = 41, .prev_epoch = 36, .fail_seq = FRAME_NO_SEQ},
                      .waited = {.epoch = 43,
                                 .prev_epoch = 41,
                                 .flags = EPOCH_FLAG_INCOMPLETE,
                                 .fail_seq = FRAME_NO_SEQ}},
                out;
    static const uint32_t good_prior[] = {41, 42, 44}, good_waited[] = {43, 44};
    static const uint32_t bad_prior[] = {0, 40, 45, 46}, bad_waited[] = {0, 42, 45, UINT32_MAX};

    in.waited.by = 43;
    for (size_t i = 0; i < sizeof good_prior / sizeof *good_prior; i++) {
        in.prior.by = good_prior[i];
        cr_assert_eq(epoch_round_trip(&in, &out), FRAME_OK, "prior by %u", good_prior[i]);
        cr_assert_eq(out.prior.by, good_prior[i]);
    }
    for (size_t i = 0; i < sizeof bad_prior / sizeof *bad_prior; i++) {
        in.prior.by = bad_prior[i];
        cr_assert_eq(epoch_round_trip(&in, &out), FRAME_EMALFORMED, "prior by %u", bad_prior[i]);
    }
    in.prior.by = 41;
    for (size_t i = 0; i < sizeof good_waited / sizeof *good_waited; i++) {
        in.waited.by = good_waited[i];
        cr_assert_eq(epoch_round_trip(&in, &out), FRAME_OK, "waited by %u", good_waited[i]);
        cr_assert_eq(out.waited.by, good_waited[i]);
    }
    for (size_t i = 0; i < sizeof bad_waited / sizeof *bad_waited; i++) {
        in.waited.by = bad_waited[i];
        cr_assert_eq(epoch_round_trip(&in, &out), FRAME_EMALFORMED, "waited by %u", bad_waited[i]);
    }
}

/* A COMMIT frame of 2 hosts around body (30 bytes), in buf. */
static void commit_of_2(uint8_t *buf, const uint8_t body[30], frame_header *h)
{
    frame_encode_ping(buf, FRAME_BUF);
    buf[5] = FRAME_COMMIT;
    buf[11] = 30;
    memcpy(buf + FRAME_HEADER_SIZE, body, 30);
    cr_assert_eq(frame_decode_header(buf, FRAME_BUF, h), FRAME_OK);
}

Test(frame, rejects_commit_whose_base_is_not_the_least_count)
{
    /* base 2, excesses 1 and 3: the same counts as base 3, excesses 0 and
     * 2, which is the only form an encoder writes. */
    static const uint8_t body[30] = {0, 0, 0, 9, 0, 2, 0, 0, 0, 0, 0, 0, 0, 2, 0,
                                     0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0};
    uint8_t buf[FRAME_BUF];
    frame_header h;
    any_frame out;

    commit_of_2(buf, body, &h);
    cr_assert_eq(decode_exact(&h, buf + FRAME_HEADER_SIZE, h.length, &out), FRAME_EMALFORMED);
    buf[FRAME_HEADER_SIZE + 13] = 3; /* base 3: excesses 1 and 3 still */
    buf[FRAME_HEADER_SIZE + 17] = 0; /* now 0 and 3 */
    cr_assert_eq(decode_exact(&h, buf + FRAME_HEADER_SIZE, h.length, &out), FRAME_OK);
    cr_assert_eq(out.commit.done[0], 3);
    cr_assert_eq(out.commit.done[1], 6);
}

Test(frame, rejects_commit_whose_knowledge_is_below_zero)
{
    /* base 2, excesses 0 and 1; shortfalls 2 (known 0) and 3 (below 0). */
    static const uint8_t body[30] = {0, 0, 0, 9, 0, 2, 0, 0, 0, 0, 0, 0, 0, 2, 0,
                                     0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3};
    uint8_t buf[FRAME_BUF];
    frame_header h;
    any_frame out;

    commit_of_2(buf, body, &h);
    cr_assert_eq(decode_exact(&h, buf + FRAME_HEADER_SIZE, h.length, &out), FRAME_EMALFORMED);
    buf[FRAME_HEADER_SIZE + 29] = 2; /* known 0: fine */
    cr_assert_eq(decode_exact(&h, buf + FRAME_HEADER_SIZE, h.length, &out), FRAME_OK);
    cr_assert_eq(out.commit.known[0], 0);
    cr_assert_eq(out.commit.known[1], 0);
}

Test(frame, rejects_commit_whose_host_count_disagrees_with_its_length)
{
    any_frame in = sample(FRAME_COMMIT), out;
    uint8_t buf[FRAME_BUF];
    frame_header h;
    int n = frame_encode_commit(buf, sizeof buf, &in.commit);
    size_t hosts = FRAME_HEADER_SIZE + 4;

    cr_assert_eq(frame_decode_header(buf, (size_t)n, &h), FRAME_OK);
    /* One host more or fewer than the body holds, none, and too many. */
    static const uint16_t bad[] = {COMMIT_HOSTS + 1, COMMIT_HOSTS - 1, 0,
                                   FRAME_MAX_COMMIT_HOSTS + 1};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        buf[hosts] = (uint8_t)(bad[i] >> 8);
        buf[hosts + 1] = (uint8_t)bad[i];
        cr_assert_eq(decode_exact(&h, buf + FRAME_HEADER_SIZE, h.length, &out), FRAME_EMALFORMED,
                     "%u hosts", bad[i]);
    }
}

Test(frame, rejects_auth_with_a_mac_of_another_size)
{
    any_frame in = sample(FRAME_AUTH), out;
    uint8_t buf[FRAME_BUF] = {0};
    frame_header h;
    int n = frame_encode_auth(buf, sizeof buf, &in.auth);

    cr_assert_eq(frame_decode_header(buf, (size_t)n, &h), FRAME_OK);
    cr_assert_eq(h.length, FRAME_MAC_SIZE);
    for (uint32_t len = 0; len <= 2 * FRAME_MAC_SIZE; len++) {
        frame_header other = h;

        other.length = len;
        cr_assert_eq(decode_exact(&other, buf + FRAME_HEADER_SIZE, len, &out),
                     len == FRAME_MAC_SIZE ? FRAME_OK : FRAME_EMALFORMED, "AUTH of %u bytes", len);
    }
}

Test(frame, decoders_refuse_a_header_of_another_type)
{
    for (size_t t = 0; t < N_BODY_TYPES; t++) {
        uint8_t buf[FRAME_BUF];
        frame_header h;
        any_frame out;

        encode_sample(body_types[t], buf, sizeof buf, &h);
        for (size_t u = 0; u < N_BODY_TYPES; u++) {
            frame_header other = h;
            if (u == t) continue;
            other.type = (uint8_t)body_types[u];
            cr_assert_eq(decode_as(h.type, &other, buf + FRAME_HEADER_SIZE, decoded_len(&h), &out),
                         FRAME_EMALFORMED, "%s decoder given a %s header", frame_type_name(h.type),
                         frame_type_name(other.type));
        }
    }
}

/* Corrupted input */

static uint64_t rng = 0x9e3779b97f4a7c15u;

static uint64_t rnd(void)
{
    /* xorshift64*: deterministic, so a failure reproduces. */
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545f4914f6cdd1du;
}

static void rnd_str(char *dst, size_t max)
{
    size_t n = rnd() % (max + 1);
    for (size_t i = 0; i < n; i++)
        dst[i] = (char)(1 + rnd() % 255);
    dst[n] = '\0';
}

static void rnd_bytes(uint8_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = (uint8_t)rnd();
}

static int rnd_frame(any_frame *f)
{
    int type = (int)all_types[rnd() % N_ALL_TYPES];

    memset(f, 0, sizeof *f);
    switch (type) {
    case FRAME_HELLO:
        f->hello.n_hosts = (uint32_t)rnd();
        f->hello.from_pos = (uint32_t)rnd();
        f->hello.to_pos = (uint32_t)rnd();
        f->hello.epoch = (uint32_t)rnd();
        rnd_str(f->hello.cluster, FRAME_MAX_NAME);
        rnd_str(f->hello.from_name, FRAME_MAX_NAME);
        rnd_bytes(f->hello.nonce, FRAME_NONCE_SIZE);
        f->hello.auth = (int)(rnd() % 2);
        break;
    case FRAME_WELCOME:
        f->welcome.status = (int32_t)(rnd() % 32) - 16;
        f->welcome.epoch = (uint32_t)rnd();
        rnd_str(f->welcome.reason, FRAME_MAX_TEXT);
        rnd_bytes(f->welcome.nonce, FRAME_NONCE_SIZE);
        rnd_bytes(f->welcome.mac, FRAME_MAC_SIZE);
        f->welcome.auth = (int)(rnd() % 2);
        break;
    case FRAME_DATA:
        f->data.seq = rnd();
        f->data.epoch = (uint32_t)rnd();
        f->data.step = (uint16_t)rnd();
        f->data.dtype = (uint8_t)rnd();
        f->data.op = (uint8_t)rnd();
        f->data.chunk = (uint32_t)rnd();
        f->data.length = (uint32_t)(rnd() % (FRAME_MAX_PAYLOAD + 1));
        f->data.count = rnd();
        f->data.offset = rnd();
        f->data.kind = (uint8_t)rnd();
        f->data.root = (uint32_t)rnd();
        f->data.has_crc = (int)(rnd() % 2);
        f->data.crc = (uint32_t)rnd();
        break;
    case FRAME_ABORT:
        f->abort.seq = rnd();
        f->abort.epoch = (uint32_t)rnd();
        f->abort.code = (int32_t)(rnd() % 32) - 16;
        rnd_str(f->abort.reason, FRAME_MAX_TEXT);
        break;
    case FRAME_AUTH:
        rnd_bytes(f->auth.mac, FRAME_MAC_SIZE);
        break;
    case FRAME_EPOCH:
        f->epoch.epoch = (uint32_t)rnd();
        f->epoch.origin = (uint32_t)rnd();
        f->epoch.phase = (uint8_t)(EPOCH_BREAK + rnd() % 5);
        f->epoch.flags = (uint8_t)(rnd() & EPOCH_FLAGS_ALL);
        f->epoch.code = (int32_t)(rnd() % 32) - 16;
        f->epoch.fail_seq = rnd();
        f->epoch.fail_class = (uint8_t)rnd();
        f->epoch.fail_origin = (uint32_t)rnd();
        f->epoch.prev_epoch = (uint32_t)rnd();
        f->epoch.done = rnd();
        f->epoch.top = rnd();
        rnd_str(f->epoch.reason, FRAME_MAX_TEXT);
        rnd_str(f->epoch.waiting, FRAME_MAX_WAITING);
        f->epoch.members = rnd();
        f->epoch.members_epoch = (uint32_t)rnd();
        rnd_str(f->epoch.members_why, FRAME_MAX_WAITING);
        f->epoch.prev_members = rnd();
        f->epoch.confirmed = rnd();
        /* Half of them carry a prior, which must be of prev_epoch. */
        if (f->epoch.prev_epoch && rnd() % 2) {
            frame_prior *p = &f->epoch.prior;
            p->epoch = f->epoch.prev_epoch;
            p->prev_epoch = (uint32_t)(rnd() % p->epoch);
            p->flags = (uint8_t)(rnd() & (EPOCH_FLAG_DONE_UNKNOWN | EPOCH_FLAG_RESIZED));
            p->code = (int32_t)(rnd() % 32) - 16;
            p->fail_seq = rnd();
            p->fail_class = (uint8_t)rnd();
            p->done = rnd();
            p->top = rnd();
            p->members = rnd();
            p->members_epoch = (uint32_t)rnd();
            rnd_str(p->reason, FRAME_MAX_TEXT);
            rnd_str(p->members_why, FRAME_MAX_WAITING);
        }
        break;
    case FRAME_COMMIT: {
        uint64_t base = rnd() >> 1;
        f->commit.epoch = (uint32_t)rnd();
        f->commit.n = (uint16_t)(1 + rnd() % COMMIT_HOSTS);
        for (int i = 0; i < f->commit.n; i++)
            f->commit.done[i] = base + rnd() % 4;
        break;
    }
    case FRAME_REPORT: {
        summary_part *p = &f->report;
        p->host = (uint32_t)rnd();
        p->version = rnd();
        p->at_us = rnd();
        p->local_size = (uint16_t)rnd();
        p->n = (uint8_t)(rnd() % (SUMMARY_MAX_RANKS + 1));
        for (int i = 0; i < p->n; i++) {
            p->ranks[i].rank = (int32_t)rnd();
            p->ranks[i].life.wait_us = rnd();
            p->ranks[i].n_spans = (uint8_t)(rnd() % (SUMMARY_MAX_SPANS + 1));
            for (int j = 0; j < p->ranks[i].n_spans; j++)
                p->ranks[i].spans[j].dur_us = (uint32_t)rnd();
        }
        break;
    }
    }
    return type;
}

Test(frame, survives_random_corruption_of_valid_frames)
{
    int decoded = 0, refused = 0;

    for (int iter = 0; iter < 100000; iter++) {
        /* Zeros after the frame stand for whatever the peer sends next. */
        /* A corrupted length may claim a COMMIT's largest body. */
        uint8_t buf[FRAME_HEADER_SIZE + FRAME_MAX_COMMIT_BODY] = {0},
            again[FRAME_HEADER_SIZE + FRAME_MAX_COMMIT_BODY];
        any_frame f, out;
        frame_header h, h2;
        int type = rnd_frame(&f);
        int n = encode_any(type, &f, buf, sizeof buf), rc;
        int flips = 1 + (int)(rnd() % 4);

        for (int i = 0; i < flips; i++)
            buf[rnd() % (uint64_t)n] ^= (uint8_t)(1 + rnd() % 255);

        rc = frame_decode_header(buf, (size_t)n, &h);
        cr_assert(rc == FRAME_OK || rc == FRAME_EMAGIC || rc == FRAME_EVERSION ||
                      rc == FRAME_ETYPE || rc == FRAME_ELENGTH,
                  "iteration %d: header gave %d", iter, rc);
        if (rc != FRAME_OK || h.type == FRAME_PING) {
            refused += rc != FRAME_OK;
            continue;
        }

        rc = decode_exact(&h, buf + FRAME_HEADER_SIZE, decoded_len(&h), &out);
        cr_assert(rc == FRAME_OK || rc == FRAME_EMALFORMED, "iteration %d: body gave %d", iter, rc);
        if (rc != FRAME_OK) {
            refused++;
            continue;
        }

        /* Whatever decodes is canonical: it encodes back to the same body. */
        decoded++;
        n = encode_any(h.type, &out, again, sizeof again);
        cr_assert_gt(n, 0);
        cr_assert_eq(frame_decode_header(again, (size_t)n, &h2), FRAME_OK);
        cr_assert_eq(h2.length, h.length, "iteration %d", iter);
        cr_assert_arr_eq(again + FRAME_HEADER_SIZE, buf + FRAME_HEADER_SIZE, decoded_len(&h),
                         "iteration %d: %s re-encodes differently", iter, frame_type_name(h.type));
    }
    /* Both outcomes happen, or the loop tests nothing. */
    cr_assert_gt(decoded, 1000);
    cr_assert_gt(refused, 1000);
}

/* Names */

Test(frame, every_error_has_its_own_message)
{
    static const int codes[] = {FRAME_OK,    FRAME_EAGAIN,  FRAME_EMAGIC,     FRAME_EVERSION,
                                FRAME_ETYPE, FRAME_ELENGTH, FRAME_EMALFORMED, FRAME_ESPACE};
    const int n = sizeof codes / sizeof *codes;
    for (int a = 0; a < n; a++) {
        cr_assert_neq(strcmp(frame_strerror(codes[a]), frame_strerror(-1)), 0, "error %d",
                      codes[a]);
        for (int b = 0; b < a; b++)
            cr_assert_str_neq(frame_strerror(codes[a]), frame_strerror(codes[b]));
    }
}

Test(frame, errors_are_apart_from_the_ringd_codes)
{
    cr_assert_lt(FRAME_EAGAIN, -100);
    cr_assert_gt(FRAME_ESPACE, -200);
}

Test(frame, types_have_the_documented_numbers)
{
    cr_assert_eq(FRAME_HELLO, 1);
    cr_assert_eq(FRAME_WELCOME, 2);
    cr_assert_eq(FRAME_DATA, 3);
    cr_assert_eq(FRAME_ABORT, 4);
    cr_assert_eq(FRAME_PING, 5);
    cr_assert_eq(FRAME_AUTH, 6);
    cr_assert_eq(FRAME_EPOCH, 7);
}

Test(frame, every_type_has_a_name)
{
    cr_assert_str_eq(frame_type_name(FRAME_HELLO), "HELLO");
    cr_assert_str_eq(frame_type_name(FRAME_WELCOME), "WELCOME");
    cr_assert_str_eq(frame_type_name(FRAME_DATA), "DATA");
    cr_assert_str_eq(frame_type_name(FRAME_ABORT), "ABORT");
    cr_assert_str_eq(frame_type_name(FRAME_PING), "PING");
    cr_assert_str_eq(frame_type_name(FRAME_AUTH), "AUTH");
    cr_assert_str_eq(frame_type_name(FRAME_EPOCH), "EPOCH");
    cr_assert_str_eq(frame_type_name(FRAME_COMMIT), "COMMIT");
    cr_assert_str_eq(frame_type_name(FRAME_REPORT), "REPORT");
    cr_assert_str_eq(frame_type_name(0), "UNKNOWN");
    cr_assert_str_eq(frame_type_name(FRAME_REPORT + 1), "UNKNOWN");
}
