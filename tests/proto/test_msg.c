/*
 * test_msg.c - the client <-> daemon messages of proto/msg.h (version 4), as
 * specified in proto/WIRE.md: layouts, limits, and refusal of every
 * malformed input.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "proto/msg.h"

#define MSG_BUF (MSG_HEADER_SIZE + MSG_MAX_BODY)
/* STATUS after its recent collectives (version 2): two link reasons, four
 * ages and next_seq, waiting, and the host counts, each string and count
 * at its longest. */
#define STATUS_V2_TAIL (2 * (2 + MSG_MAX_REASON) + 32 + 2 + MSG_MAX_WAITING + 1 + 8 * MSG_MAX_DONE)

typedef union {
    msg_hello hello;
    msg_welcome welcome;
    msg_error error;
    msg_register reg;
    msg_unregister unreg;
    msg_collective coll;
    msg_result result;
    msg_status_req status_req;
    msg_status status;
    msg_leave_req leave;
    msg_balance balance;
    msg_report_req report_req;
    msg_report report;
} any_msg;

static const int all_types[] = {MSG_HELLO,      MSG_WELCOME,    MSG_ERROR,   MSG_REGISTER,
                                MSG_UNREGISTER, MSG_COLLECTIVE, MSG_RESULT,  MSG_STATUS_REQ,
                                MSG_STATUS,     MSG_LEAVE_REQ,  MSG_BALANCE, MSG_REPORT_REQ,
                                MSG_REPORT};
#define N_TYPES (sizeof all_types / sizeof *all_types)

static void fill(char *dst, size_t n, char c)
{
    memset(dst, c, n);
    dst[n] = '\0';
}

static int encode_any(int type, const any_msg *m, uint8_t *buf, size_t cap)
{
    switch (type) {
    case MSG_HELLO:
        return msg_encode_hello(buf, cap, &m->hello);
    case MSG_WELCOME:
        return msg_encode_welcome(buf, cap, &m->welcome);
    case MSG_ERROR:
        return msg_encode_error(buf, cap, &m->error);
    case MSG_REGISTER:
        return msg_encode_register(buf, cap, &m->reg);
    case MSG_UNREGISTER:
        return msg_encode_unregister(buf, cap, &m->unreg);
    case MSG_COLLECTIVE:
        return msg_encode_collective(buf, cap, &m->coll);
    case MSG_RESULT:
        return msg_encode_result(buf, cap, &m->result);
    case MSG_STATUS_REQ:
        return msg_encode_status_req(buf, cap, &m->status_req);
    case MSG_STATUS:
        return msg_encode_status(buf, cap, &m->status);
    case MSG_LEAVE_REQ:
        return msg_encode_leave_req(buf, cap, &m->leave);
    case MSG_BALANCE:
        return msg_encode_balance(buf, cap, &m->balance);
    case MSG_REPORT_REQ:
        return msg_encode_report_req(buf, cap, &m->report_req);
    case MSG_REPORT:
        return msg_encode_report(buf, cap, &m->report);
    }
    cr_assert_fail("no encoder for type %d", type);
    return -1;
}

/* Decodes the body of h with the decoder of type, from an exact-size heap
 * copy, so that AddressSanitizer catches any read past h->length bytes. */
static int decode_as(int type, const msg_header *h, const uint8_t *body, any_msg *out)
{
    uint8_t *copy = malloc(h->length);
    int rc = MSG_EMALFORMED;

    cr_assert(copy != NULL || h->length == 0);
    if (h->length > 0) memcpy(copy, body, h->length);
    switch (type) {
    case MSG_HELLO:
        rc = msg_decode_hello(h, copy, &out->hello);
        break;
    case MSG_WELCOME:
        rc = msg_decode_welcome(h, copy, &out->welcome);
        break;
    case MSG_ERROR:
        rc = msg_decode_error(h, copy, &out->error);
        break;
    case MSG_REGISTER:
        rc = msg_decode_register(h, copy, &out->reg);
        break;
    case MSG_UNREGISTER:
        rc = msg_decode_unregister(h, copy, &out->unreg);
        break;
    case MSG_COLLECTIVE:
        rc = msg_decode_collective(h, copy, &out->coll);
        break;
    case MSG_RESULT:
        rc = msg_decode_result(h, copy, &out->result);
        break;
    case MSG_STATUS_REQ:
        rc = msg_decode_status_req(h, copy, &out->status_req);
        break;
    case MSG_STATUS:
        rc = msg_decode_status(h, copy, &out->status);
        break;
    case MSG_LEAVE_REQ:
        rc = msg_decode_leave_req(h, copy, &out->leave);
        break;
    case MSG_BALANCE:
        rc = msg_decode_balance(h, copy, &out->balance);
        break;
    case MSG_REPORT_REQ:
        rc = msg_decode_report_req(h, copy, &out->report_req);
        break;
    case MSG_REPORT:
        rc = msg_decode_report(h, copy, &out->report);
        break;
    default:
        cr_assert_fail("no decoder for type %d", type);
    }
    free(copy);
    return rc;
}

static int decode_exact(const msg_header *h, const uint8_t *body, any_msg *out)
{
    return decode_as(h->type, h, body, out);
}

/* A split of n_ranks ranks, every counter extreme, every entry distinct. */
static void fill_split(msg_split *s, uint32_t n_ranks)
{
    s->step = 0xc1c2c3c4c5c6c7c8u;
    s->global_batch = 0xd1d2d3d4d5d6d7d8u;
    s->resplits = 0xe1e2e3e4u;
    s->every = 0xf1f2f3f4u;
    s->n_ranks = n_ranks;
    for (uint32_t i = 0; i < MSG_MAX_SHARES; i++)
        s->shares[i] = (msg_share){.rows = 0xa0000000u + i, .rate = 1e6 + 0.25 * i};
}

/* A message of each type with every field set to a distinct, extreme value
 * and every string at its longest. */
static any_msg sample(int type)
{
    any_msg m;

    memset(&m, 0, sizeof m);
    switch (type) {
    case MSG_HELLO:
        m.hello.flags = MSG_HELLO_OBSERVER | 0x80000000u;
        m.hello.local_rank = -1;
        m.hello.pid = 0xfffffff0u;
        break;
    case MSG_WELCOME:
        m.welcome.rank = 0x7fffffff;
        m.welcome.size = -2147483647 - 1;
        m.welcome.local_rank = 3;
        m.welcome.local_size = 8;
        m.welcome.host_index = 0xfffffffeu;
        m.welcome.n_hosts = 1023;
        m.welcome.max_bytes = 0xffffffffffffff01u;
        fill(m.welcome.host, MSG_MAX_NAME, 'h');
        m.welcome.members_epoch = 0xfffffff3u;
        break;
    case MSG_ERROR:
        m.error.code = -6;
        fill(m.error.text, MSG_MAX_TEXT, 'e');
        break;
    case MSG_REGISTER:
        m.reg.id = UINT64_MAX;
        m.reg.region = 0xdeadbeefu;
        m.reg.size = 0x8000000000000000u;
        break;
    case MSG_UNREGISTER:
        m.unreg.id = 0x0102030405060708u;
        m.unreg.region = UINT32_MAX;
        break;
    case MSG_COLLECTIVE:
        m.coll.id = 0xfedcba9876543210u;
        m.coll.kind = MSG_COLL_ALLREDUCE;
        m.coll.dtype = 0xfe;
        m.coll.op = 0xfd;
        m.coll.region = 0x7ffffffeu;
        m.coll.offset = 0x1122334455667788u;
        m.coll.count = UINT64_MAX - 1;
        m.coll.root = -7;
        m.coll.weight = 1234.5;
        m.coll.timeout_ms = 0xffffffffu;
        fill(m.coll.name, MSG_MAX_NAME, 'c');
        m.coll.members_epoch = 0x80000007u;
        break;
    case MSG_RESULT:
        m.result.id = 77;
        m.result.status = -9;
        fill(m.result.text, MSG_MAX_TEXT, 'r');
        break;
    case MSG_STATUS_REQ:
        m.status_req.id = 0xa5a5a5a5a5a5a5a5u;
        break;
    case MSG_STATUS:
        m.status.id = 1;
        fill(m.status.cluster, MSG_MAX_NAME, 'C');
        fill(m.status.host, MSG_MAX_NAME, 'H');
        fill(m.status.left, MSG_MAX_NAME, 'L');
        fill(m.status.right, MSG_MAX_NAME, 'R');
        m.status.host_index = 2;
        m.status.n_hosts = 0xfffffffdu;
        m.status.left_state = MSG_LINK_UP;
        m.status.right_state = 0xff;
        m.status.epoch = 0x80000000u;
        m.status.clients = 5;
        m.status.local_size = 6;
        m.status.collectives_done = 0x0102030405060708u;
        m.status.collectives_failed = 0x1112131415161718u;
        m.status.bytes_in = 0x2122232425262728u;
        m.status.bytes_out = 0x3132333435363738u;
        m.status.uptime_ms = 0x4142434445464748u;
        m.status.reconnects = UINT64_MAX;
        fill(m.status.last_error, MSG_MAX_TEXT, 'x');
        m.status.rate_in = 0x5152535455565758u;
        m.status.rate_out = 7;
        m.status.waits = 8;
        m.status.wait_sum_us = 9;
        m.status.n_recent = MSG_MAX_RECENT;
        for (int i = 0; i < MSG_MAX_RECENT; i++) {
            m.status.recent[i] = (msg_recent){.seq = 100u + (unsigned)i,
                                              .kind = MSG_COLL_ALLREDUCE,
                                              .has_wait = (uint8_t)(i & 1),
                                              .status = -i,
                                              .wait_us = 1000u * (unsigned)i,
                                              .latency_us = UINT64_MAX - (unsigned)i,
                                              .spread_us = 7u * (unsigned)i};
            snprintf(m.status.recent[i].last, sizeof m.status.recent[i].last, "h%d", i);
        }
        fill(m.status.left_reason, MSG_MAX_REASON, 'l');
        fill(m.status.right_reason, MSG_MAX_REASON, 'r');
        m.status.left_age_ms = 0x6162636465666768u;
        m.status.right_age_ms = 0x7172737475767778u;
        m.status.last_error_age_ms = MSG_NO_AGE;
        m.status.next_seq = 0x8182838485868788u;
        fill(m.status.waiting, MSG_MAX_WAITING, 'w');
        m.status.n_done = MSG_MAX_DONE;
        for (int i = 0; i < MSG_MAX_DONE; i++)
            m.status.done[i] = 0x9000000000000000u + (unsigned)i;
        break;
    case MSG_LEAVE_REQ:
        m.leave.id = 0xf0e0d0c0b0a09080u;
        m.leave.action = MSG_JOIN;
        break;
    case MSG_BALANCE:
        m.balance.id = 0x0f0e0d0c0b0a0908u;
        fill_split(&m.balance.split, MSG_MAX_SHARES + 3);
        break;
    case MSG_REPORT_REQ:
        m.report_req.id = 0xf1e1d1c1b1a19181u;
        break;
    case MSG_REPORT: {
        /* The largest: every rank of a part, every span of a rank. */
        msg_report *r = &m.report;
        r->id = 0xf2e2d2c2b2a29282u;
        r->index = 0xfffffffdu;
        r->count = 0xfffffffeu;
        r->n_hosts = 0xffffffffu;
        r->me = 0xfffffff0u;
        r->host_index = 0xfffffff1u;
        r->now_us = 0x8000000000000001u;
        r->flags = MSG_REPORT_HAS_PART;
        fill(r->cluster, MSG_MAX_NAME, 'c');
        fill(r->host, MSG_MAX_NAME, 'h');
        r->part.host = r->host_index;
        r->part.boot_us = 0x8000000000000003u;
        r->part.version = 0x8000000000000005u;
        r->part.local_size = 0xfff0;
        r->part.n = SUMMARY_MAX_RANKS;
        for (int i = 0; i < SUMMARY_MAX_RANKS; i++) {
            summary_rank *k = &r->part.ranks[i];
            k->rank = 0x7ffffff0 + i;
            k->life.compute_us = 0x9000000000000000u + (uint64_t)i;
            k->window.bytes = 0xa000000000000000u + (uint64_t)i;
            k->n_spans = SUMMARY_MAX_SPANS;
            for (int j = 0; j < SUMMARY_MAX_SPANS; j++)
                k->spans[j].start_us = 0xb000000000000000u + (uint64_t)(i * 64 + j);
        }
        break;
    }
    }
    return m;
}

/* The samples of the messages that elastic rings extend, with the
 * extension: a RESULT of RINGD_ERESIZED with its trailer, a STATUS with its
 * membership block at its longest. */
static any_msg sample_resized(void)
{
    any_msg m = sample(MSG_RESULT);

    m.result.status = MSG_STATUS_RESIZED;
    m.result.members_epoch = 0xfffffff1u;
    m.result.rank = 0x7ffffffe;
    m.result.size = 0x7fffffff;
    return m;
}

static any_msg sample_elastic(void)
{
    any_msg m = sample(MSG_STATUS);

    m.status.members_epoch = 0xa1a2a3a4u;
    m.status.min_hosts = 3;
    m.status.n_live = 0xfffffffeu;
    m.status.live = 0xb1b2b3b4b5b6b7b8u;
    m.status.resizes = UINT64_MAX - 2;
    m.status.left_ring = 1;
    fill(m.status.resize_why, MSG_MAX_REASON, 'y');
    m.status.n_out = MSG_MAX_DONE;
    for (int i = 0; i < MSG_MAX_DONE; i++)
        m.status.out_age_ms[i] = i % 2 ? MSG_NO_AGE : 1000u * (unsigned)i;
    fill(m.status.hosts, MSG_MAX_TEXT, 'n');
    return m;
}

/* STATUS's membership block at its longest: five counters and left_ring,
 * resize_why, the out ages and the host names. */
#define STATUS_MEMBERS (29 + 2 + MSG_MAX_REASON + 1 + 8 * MSG_MAX_DONE + 2 + MSG_MAX_TEXT)
#define STATUS_RELOAD (17 + 2 + MSG_MAX_REASON)

/* A daemon whose ring is not elastic, reloaded (refused the last time). */
static any_msg sample_reloaded(void)
{
    any_msg m = sample(MSG_STATUS);

    m.status.reloads = 0x0102030405060708u;
    m.status.reload_age_ms = 0x1112131415161718u;
    m.status.reload_refused = 1;
    snprintf(m.status.reload_said, sizeof m.status.reload_said,
             "ringd.yaml:3:1: hosts: expected a list");
    return m;
}

/* A daemon whose ranks reported a balanced job's split: no membership, no
 * reload, so both blocks go empty before the balance block. */
static any_msg sample_balanced(uint32_t n_ranks)
{
    any_msg m = sample(MSG_STATUS);

    m.status.balance_age_ms = 0x2122232425262728u;
    fill_split(&m.status.split, n_ranks);
    return m;
}

/* A split on the wire: five counters, 12 bytes per rank shown. */
#define SPLIT_BYTES(n) (28 + 12 * ((n) < MSG_MAX_SHARES ? (n) : MSG_MAX_SHARES))

/* Encodes in, checks its header and decodes it back into out. */
static int round_trip(int type, const any_msg *in, any_msg *out)
{
    uint8_t buf[MSG_BUF];
    msg_header h;
    int n = encode_any(type, in, buf, sizeof buf);

    cr_assert_gt(n, 0, "encoding %s: %s", msg_type_name(type), msg_strerror(n));
    cr_assert_eq(msg_decode_header(buf, (size_t)n, &h), MSG_OK);
    cr_assert_eq(h.version, MSG_VERSION);
    cr_assert_eq(h.type, type);
    cr_assert_eq(h.flags, 0);
    cr_assert_eq(h.length, (uint32_t)(n - MSG_HEADER_SIZE));
    memset(out, 0x5a, sizeof *out);
    cr_assert_eq(decode_exact(&h, buf + MSG_HEADER_SIZE, out), MSG_OK, "decoding %s",
                 msg_type_name(type));
    return n;
}

/* Encoding and decoding */

Test(msg, hello_round_trips_every_field)
{
    any_msg in = sample(MSG_HELLO), out;

    cr_assert_eq(round_trip(MSG_HELLO, &in, &out), MSG_HEADER_SIZE + 12);
    cr_assert_eq(out.hello.flags, in.hello.flags);
    cr_assert_eq(out.hello.local_rank, in.hello.local_rank);
    cr_assert_eq(out.hello.pid, in.hello.pid);
}

Test(msg, welcome_round_trips_every_field)
{
    any_msg in = sample(MSG_WELCOME), out;

    cr_assert_eq(round_trip(MSG_WELCOME, &in, &out), MSG_HEADER_SIZE + 32 + 2 + MSG_MAX_NAME + 4);
    cr_assert_eq(out.welcome.rank, in.welcome.rank);
    cr_assert_eq(out.welcome.size, in.welcome.size);
    cr_assert_eq(out.welcome.local_rank, in.welcome.local_rank);
    cr_assert_eq(out.welcome.local_size, in.welcome.local_size);
    cr_assert_eq(out.welcome.host_index, in.welcome.host_index);
    cr_assert_eq(out.welcome.n_hosts, in.welcome.n_hosts);
    cr_assert_eq(out.welcome.max_bytes, in.welcome.max_bytes);
    cr_assert_str_eq(out.welcome.host, in.welcome.host);
    cr_assert_eq(out.welcome.members_epoch, in.welcome.members_epoch);
}

Test(msg, error_round_trips_every_field)
{
    any_msg in = sample(MSG_ERROR), out;

    cr_assert_eq(round_trip(MSG_ERROR, &in, &out), MSG_HEADER_SIZE + 4 + 2 + MSG_MAX_TEXT);
    cr_assert_eq(out.error.code, in.error.code);
    cr_assert_str_eq(out.error.text, in.error.text);
}

Test(msg, register_round_trips_every_field)
{
    any_msg in = sample(MSG_REGISTER), out;

    cr_assert_eq(round_trip(MSG_REGISTER, &in, &out), MSG_HEADER_SIZE + 20);
    cr_assert_eq(out.reg.id, in.reg.id);
    cr_assert_eq(out.reg.region, in.reg.region);
    cr_assert_eq(out.reg.size, in.reg.size);
}

Test(msg, unregister_round_trips_every_field)
{
    any_msg in = sample(MSG_UNREGISTER), out;

    cr_assert_eq(round_trip(MSG_UNREGISTER, &in, &out), MSG_HEADER_SIZE + 12);
    cr_assert_eq(out.unreg.id, in.unreg.id);
    cr_assert_eq(out.unreg.region, in.unreg.region);
}

Test(msg, collective_round_trips_every_field)
{
    any_msg in = sample(MSG_COLLECTIVE), out;

    cr_assert_eq(round_trip(MSG_COLLECTIVE, &in, &out),
                 MSG_HEADER_SIZE + 48 + 2 + MSG_MAX_NAME + 4);
    cr_assert_eq(out.coll.id, in.coll.id);
    cr_assert_eq(out.coll.kind, in.coll.kind);
    cr_assert_eq(out.coll.dtype, in.coll.dtype);
    cr_assert_eq(out.coll.op, in.coll.op);
    cr_assert_eq(out.coll.region, in.coll.region);
    cr_assert_eq(out.coll.offset, in.coll.offset);
    cr_assert_eq(out.coll.count, in.coll.count);
    cr_assert_eq(out.coll.root, in.coll.root);
    cr_assert_eq(out.coll.weight, in.coll.weight);
    cr_assert_eq(out.coll.timeout_ms, in.coll.timeout_ms);
    cr_assert_str_eq(out.coll.name, in.coll.name);
    cr_assert_eq(out.coll.members_epoch, in.coll.members_epoch);
}

Test(msg, result_round_trips_every_field)
{
    any_msg in = sample(MSG_RESULT), out;

    cr_assert_eq(round_trip(MSG_RESULT, &in, &out), MSG_HEADER_SIZE + 12 + 2 + MSG_MAX_TEXT);
    cr_assert_eq(out.result.id, in.result.id);
    cr_assert_eq(out.result.status, in.result.status);
    cr_assert_str_eq(out.result.text, in.result.text);
}

Test(msg, status_req_round_trips_every_field)
{
    any_msg in = sample(MSG_STATUS_REQ), out;

    cr_assert_eq(round_trip(MSG_STATUS_REQ, &in, &out), MSG_HEADER_SIZE + 8);
    cr_assert_eq(out.status_req.id, in.status_req.id);
}

Test(msg, status_round_trips_every_field)
{
    any_msg in = sample(MSG_STATUS), out;
    const msg_status *a = &in.status, *b = &out.status;

    cr_assert_eq(round_trip(MSG_STATUS, &in, &out),
                 MSG_HEADER_SIZE + 80 + 4 * (2 + MSG_MAX_NAME) + 2 + MSG_MAX_TEXT + 33 +
                     (30 + 2 + 2 + 8) * MSG_MAX_RECENT + STATUS_V2_TAIL);
    cr_assert_eq(b->id, a->id);
    cr_assert_str_eq(b->cluster, a->cluster);
    cr_assert_str_eq(b->host, a->host);
    cr_assert_str_eq(b->left, a->left);
    cr_assert_str_eq(b->right, a->right);
    cr_assert_eq(b->host_index, a->host_index);
    cr_assert_eq(b->n_hosts, a->n_hosts);
    cr_assert_eq(b->left_state, a->left_state);
    cr_assert_eq(b->right_state, a->right_state);
    cr_assert_eq(b->epoch, a->epoch);
    cr_assert_eq(b->clients, a->clients);
    cr_assert_eq(b->local_size, a->local_size);
    cr_assert_eq(b->collectives_done, a->collectives_done);
    cr_assert_eq(b->collectives_failed, a->collectives_failed);
    cr_assert_eq(b->bytes_in, a->bytes_in);
    cr_assert_eq(b->bytes_out, a->bytes_out);
    cr_assert_eq(b->uptime_ms, a->uptime_ms);
    cr_assert_eq(b->reconnects, a->reconnects);
    cr_assert_str_eq(b->last_error, a->last_error);
    cr_assert_eq(b->rate_in, a->rate_in);
    cr_assert_eq(b->rate_out, a->rate_out);
    cr_assert_eq(b->waits, a->waits);
    cr_assert_eq(b->wait_sum_us, a->wait_sum_us);
    cr_assert_eq(b->n_recent, a->n_recent);
    for (int i = 0; i < MSG_MAX_RECENT; i++) {
        cr_assert_eq(b->recent[i].seq, a->recent[i].seq);
        cr_assert_eq(b->recent[i].kind, a->recent[i].kind);
        cr_assert_eq(b->recent[i].has_wait, a->recent[i].has_wait);
        cr_assert_eq(b->recent[i].status, a->recent[i].status);
        cr_assert_eq(b->recent[i].wait_us, a->recent[i].wait_us);
        cr_assert_eq(b->recent[i].latency_us, a->recent[i].latency_us);
        cr_assert_str_eq(b->recent[i].last, a->recent[i].last);
        cr_assert_eq(b->recent[i].spread_us, a->recent[i].spread_us);
    }
    cr_assert_str_eq(b->left_reason, a->left_reason);
    cr_assert_str_eq(b->right_reason, a->right_reason);
    cr_assert_eq(b->left_age_ms, a->left_age_ms);
    cr_assert_eq(b->right_age_ms, a->right_age_ms);
    cr_assert_eq(b->last_error_age_ms, a->last_error_age_ms);
    cr_assert_eq(b->next_seq, a->next_seq);
    cr_assert_str_eq(b->waiting, a->waiting);
    cr_assert_eq(b->n_done, a->n_done);
    cr_assert_arr_eq(b->done, a->done, sizeof a->done);
}

Test(msg, status_rejects_more_recent_collectives_than_it_can_hold)
{
    any_msg in = sample(MSG_STATUS), out;
    uint8_t buf[MSG_BUF];
    msg_header h;
    int n = encode_any(MSG_STATUS, &in, buf, sizeof buf);
    cr_assert_gt(n, 0);
    /* n_recent is the byte before the 8 entries that end the body: 30 bytes
     * each, then a 2-byte host name ("h0".."h7") and its spread. */
    buf[n - STATUS_V2_TAIL - (30 + 2 + 2 + 8) * MSG_MAX_RECENT - 1] = MSG_MAX_RECENT + 1;
    cr_assert_eq(msg_decode_header(buf, (size_t)n, &h), MSG_OK);
    cr_assert_eq(msg_decode_status(&h, buf + MSG_HEADER_SIZE, &out.status), MSG_EMALFORMED);
}

Test(msg, status_rejects_more_host_counts_than_it_can_hold)
{
    any_msg in = sample(MSG_STATUS), out;
    uint8_t buf[MSG_BUF];
    msg_header h;
    int n = encode_any(MSG_STATUS, &in, buf, sizeof buf);
    cr_assert_gt(n, 0);
    /* n_done is the byte before the 64 counts that end the body. */
    cr_assert_eq(buf[n - 8 * MSG_MAX_DONE - 1], MSG_MAX_DONE);
    buf[n - 8 * MSG_MAX_DONE - 1] = MSG_MAX_DONE + 1;
    cr_assert_eq(msg_decode_header(buf, (size_t)n, &h), MSG_OK);
    cr_assert_eq(msg_decode_status(&h, buf + MSG_HEADER_SIZE, &out.status), MSG_EMALFORMED);
}

/* Elastic rings: the RESULT trailer, the STATUS membership block, LEAVE_REQ */

Test(msg, resized_result_round_trips_its_trailer)
{
    any_msg in = sample_resized(), out;

    cr_assert_eq(round_trip(MSG_RESULT, &in, &out), MSG_HEADER_SIZE + 12 + 2 + MSG_MAX_TEXT + 12);
    cr_assert_eq(out.result.status, MSG_STATUS_RESIZED);
    cr_assert_str_eq(out.result.text, in.result.text);
    cr_assert_eq(out.result.members_epoch, in.result.members_epoch);
    cr_assert_eq(out.result.rank, in.result.rank);
    cr_assert_eq(out.result.size, in.result.size);
}

Test(msg, resized_result_has_the_documented_byte_layout)
{
    msg_result in = {.id = 5,
                     .status = MSG_STATUS_RESIZED,
                     .text = "r",
                     .members_epoch = 0x01020304u,
                     .rank = 2,
                     .size = 3};
    /* clang-format off */
    static const uint8_t want[] = {
        0x52, 0x47, 0x44, 0x43, 4, MSG_RESULT, 0, 0, 0, 0, 0, 27, /* header */
        0, 0, 0, 0, 0, 0, 0, 5,                                   /* id */
        0xff, 0xff, 0xff, 0xeb,                                   /* status -21 */
        0, 1, 'r',                                                /* text */
        1, 2, 3, 4,                                               /* members_epoch */
        0, 0, 0, 2,                                               /* rank */
        0, 0, 0, 3,                                               /* size */
    };
    /* clang-format on */
    uint8_t buf[MSG_BUF];

    cr_assert_eq(msg_encode_result(buf, sizeof buf, &in), sizeof want);
    cr_assert_arr_eq(buf, want, sizeof want);
}

Test(msg, result_trailer_travels_only_with_resized)
{
    any_msg in = sample(MSG_RESULT), out;

    in.result.members_epoch = 9;
    in.result.rank = 1;
    in.result.size = 2;
    cr_assert_eq(round_trip(MSG_RESULT, &in, &out), MSG_HEADER_SIZE + 12 + 2 + MSG_MAX_TEXT);
    cr_assert_eq(out.result.members_epoch, 0);
    cr_assert_eq(out.result.rank, 0);
    cr_assert_eq(out.result.size, 0);
}

Test(msg, resized_result_of_an_older_daemon_decodes_without_trailer)
{
    any_msg in = sample_resized(), out;

    in.result.size = 0; /* what a daemon without the trailer amounts to */
    cr_assert_eq(round_trip(MSG_RESULT, &in, &out), MSG_HEADER_SIZE + 12 + 2 + MSG_MAX_TEXT);
    cr_assert_eq(out.result.status, MSG_STATUS_RESIZED);
    cr_assert_eq(out.result.rank, 0);
    cr_assert_eq(out.result.size, 0);
}

Test(msg, resized_result_rejects_a_short_or_long_trailer)
{
    any_msg in = sample_resized(), out;
    uint8_t buf[MSG_BUF + 1] = {0};
    msg_header h;
    int n = encode_any(MSG_RESULT, &in, buf, sizeof buf);

    cr_assert_eq(msg_decode_header(buf, (size_t)n, &h), MSG_OK);
    for (uint32_t cut = 1; cut < 12; cut++) {
        msg_header short_h = h;
        short_h.length -= cut;
        cr_assert_eq(decode_exact(&short_h, buf + MSG_HEADER_SIZE, &out), MSG_EMALFORMED,
                     "trailer cut by %u bytes", cut);
    }
    h.length++;
    cr_assert_eq(decode_exact(&h, buf + MSG_HEADER_SIZE, &out), MSG_EMALFORMED);
}

Test(msg, resized_result_rejects_a_trailer_of_size_0)
{
    any_msg in = sample_resized(), out;
    uint8_t buf[MSG_BUF];
    msg_header h;
    int n = encode_any(MSG_RESULT, &in, buf, sizeof buf);

    memset(buf + n - 4, 0, 4); /* size: 0 is sent as no trailer */
    cr_assert_eq(msg_decode_header(buf, (size_t)n, &h), MSG_OK);
    cr_assert_eq(decode_exact(&h, buf + MSG_HEADER_SIZE, &out), MSG_EMALFORMED);
}

Test(msg, status_round_trips_its_membership_block)
{
    any_msg in = sample_elastic(), out;
    const msg_status *a = &in.status, *b = &out.status;

    cr_assert_eq(round_trip(MSG_STATUS, &in, &out),
                 MSG_HEADER_SIZE + 80 + 4 * (2 + MSG_MAX_NAME) + 2 + MSG_MAX_TEXT + 33 +
                     (30 + 2 + 2 + 8) * MSG_MAX_RECENT + STATUS_V2_TAIL + STATUS_MEMBERS);
    cr_assert_str_eq(b->waiting, a->waiting);
    cr_assert_arr_eq(b->done, a->done, sizeof a->done);
    cr_assert_eq(b->members_epoch, a->members_epoch);
    cr_assert_eq(b->min_hosts, a->min_hosts);
    cr_assert_eq(b->n_live, a->n_live);
    cr_assert_eq(b->live, a->live);
    cr_assert_eq(b->resizes, a->resizes);
    cr_assert_eq(b->left_ring, a->left_ring);
    cr_assert_str_eq(b->resize_why, a->resize_why);
    cr_assert_eq(b->n_out, a->n_out);
    cr_assert_arr_eq(b->out_age_ms, a->out_age_ms, sizeof a->out_age_ms);
    cr_assert_str_eq(b->hosts, a->hosts);
}

Test(msg, status_of_an_older_daemon_decodes_without_membership)
{
    any_msg in = sample(MSG_STATUS), out;

    memset(&out, 0x5a, sizeof out);
    round_trip(MSG_STATUS, &in, &out);
    cr_assert_eq(out.status.n_live, 0);
    cr_assert_eq(out.status.members_epoch, 0);
    cr_assert_eq(out.status.live, 0);
    cr_assert_eq(out.status.resizes, 0);
    cr_assert_eq(out.status.left_ring, 0);
    cr_assert_eq(out.status.n_out, 0);
    cr_assert_str_eq(out.status.resize_why, "");
    cr_assert_str_eq(out.status.hosts, "");
}

Test(msg, status_membership_block_starts_with_its_counters)
{
    any_msg in = sample_elastic();
    uint8_t buf[MSG_BUF];
    int n = msg_encode_status(buf, sizeof buf, &in.status);
    const uint8_t *p = buf + n - STATUS_MEMBERS;

    cr_assert_eq((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3],
                 0xa1a2a3a4u);
    cr_assert_eq(p[7], 3);     /* min_hosts */
    cr_assert_eq(p[11], 0xfe); /* n_live */
    cr_assert_eq(p[12], 0xb1); /* live */
    cr_assert_eq(p[28], 1);    /* left_ring */
    cr_assert_eq(p[29] << 8 | p[30], MSG_MAX_REASON);
}

Test(msg, status_rejects_every_truncated_membership_block)
{
    any_msg in = sample_elastic(), out;
    uint8_t buf[MSG_BUF];
    msg_header h;
    int n = encode_any(MSG_STATUS, &in, buf, sizeof buf);

    cr_assert_eq(msg_decode_header(buf, (size_t)n, &h), MSG_OK);
    /* Cut to the end of the older body it decodes; anywhere after, not. */
    for (uint32_t cut = 1; cut <= STATUS_MEMBERS; cut++) {
        msg_header c = h;
        c.length -= cut;
        cr_assert_eq(decode_exact(&c, buf + MSG_HEADER_SIZE, &out),
                     cut == STATUS_MEMBERS ? MSG_OK : MSG_EMALFORMED, "block cut by %u bytes", cut);
    }
}

Test(msg, status_rejects_a_membership_block_with_no_live_host)
{
    any_msg in = sample_elastic(), out;
    uint8_t buf[MSG_BUF];
    msg_header h;
    int n = encode_any(MSG_STATUS, &in, buf, sizeof buf);

    memset(buf + n - STATUS_MEMBERS + 8, 0, 4); /* n_live 0 is sent as no block */
    cr_assert_eq(msg_decode_header(buf, (size_t)n, &h), MSG_OK);
    cr_assert_eq(decode_exact(&h, buf + MSG_HEADER_SIZE, &out), MSG_EMALFORMED);
}

Test(msg, status_of_a_reloaded_daemon_carries_its_last_reload_after_an_empty_membership_block)
{
    any_msg in = sample_reloaded(), out;
    const msg_status *a = &in.status, *b = &out.status;

    any_msg plain = sample(MSG_STATUS);
    uint8_t buf[MSG_BUF];
    int n = msg_encode_status(buf, sizeof buf, &plain.status);

    /* An empty membership block (34 bytes: no reason, no ages, no names),
     * then the reload block. */
    cr_assert_eq(round_trip(MSG_STATUS, &in, &out),
                 n + 34 + STATUS_RELOAD - MSG_MAX_REASON + (int)strlen(a->reload_said));
    cr_assert_eq(b->n_live, 0, "no membership: the ring is not elastic");
    cr_assert_eq(b->reloads, a->reloads);
    cr_assert_eq(b->reload_age_ms, a->reload_age_ms);
    cr_assert_eq(b->reload_refused, 1);
    cr_assert_str_eq(b->reload_said, a->reload_said);
}

Test(msg, status_of_an_elastic_ring_carries_membership_and_the_last_reload)
{
    any_msg in = sample_elastic(), out;
    in.status.reloads = 2;
    in.status.reload_age_ms = 1500;
    snprintf(in.status.reload_said, sizeof in.status.reload_said, "segment_size 256KiB -> 1MiB");

    round_trip(MSG_STATUS, &in, &out);
    cr_assert_eq(out.status.n_live, in.status.n_live);
    cr_assert_str_eq(out.status.hosts, in.status.hosts);
    cr_assert_eq(out.status.reloads, 2);
    cr_assert_eq(out.status.reload_age_ms, 1500);
    cr_assert_eq(out.status.reload_refused, 0);
    cr_assert_str_eq(out.status.reload_said, "segment_size 256KiB -> 1MiB");
}

Test(msg, status_rejects_a_reload_block_cut_short_or_with_no_reload)
{
    any_msg in = sample_reloaded(), out;
    uint8_t buf[MSG_BUF];
    msg_header h;
    int n = encode_any(MSG_STATUS, &in, buf, sizeof buf);

    uint32_t block = STATUS_RELOAD - MSG_MAX_REASON + (uint32_t)strlen(in.status.reload_said);

    cr_assert_eq(msg_decode_header(buf, (size_t)n, &h), MSG_OK);
    /* Without the whole reload block the empty membership block is alone. */
    for (uint32_t cut = 1; cut <= block; cut++) {
        msg_header c = h;
        c.length -= cut;
        cr_assert_eq(decode_exact(&c, buf + MSG_HEADER_SIZE, &out), MSG_EMALFORMED,
                     "block cut by %u bytes", cut);
    }
    memset(buf + n - block, 0, 8); /* reloads 0 is sent as no block */
    cr_assert_eq(decode_exact(&h, buf + MSG_HEADER_SIZE, &out), MSG_EMALFORMED);
}

Test(msg, status_rejects_more_out_ages_than_it_can_hold)
{
    any_msg in = sample_elastic(), out;
    uint8_t buf[MSG_BUF];
    msg_header h;
    int n = encode_any(MSG_STATUS, &in, buf, sizeof buf);
    /* n_out comes before the 64 ages and the host names. */
    size_t at = (size_t)n - (2 + MSG_MAX_TEXT) - 8 * MSG_MAX_DONE - 1;

    cr_assert_eq(buf[at], MSG_MAX_DONE);
    buf[at] = MSG_MAX_DONE + 1;
    cr_assert_eq(msg_decode_header(buf, (size_t)n, &h), MSG_OK);
    cr_assert_eq(decode_exact(&h, buf + MSG_HEADER_SIZE, &out), MSG_EMALFORMED);
}

Test(msg, leave_req_has_the_documented_byte_layout)
{
    msg_leave_req in = {.id = 0x0102030405060708u, .action = MSG_LEAVE}, out;
    /* clang-format off */
    static const uint8_t want[] = {
        0x52, 0x47, 0x44, 0x43, 4, MSG_LEAVE_REQ, 0, 0, 0, 0, 0, 9, /* header */
        1, 2, 3, 4, 5, 6, 7, 8,                                     /* id */
        1,                                                          /* action: leave */
    };
    /* clang-format on */
    uint8_t buf[MSG_BUF];
    msg_header h;

    cr_assert_eq(msg_encode_leave_req(buf, sizeof buf, &in), sizeof want);
    cr_assert_arr_eq(buf, want, sizeof want);
    cr_assert_eq(msg_decode_header(buf, sizeof want, &h), MSG_OK);
    cr_assert_eq(msg_decode_leave_req(&h, buf + MSG_HEADER_SIZE, &out), MSG_OK);
    cr_assert_eq(out.id, in.id);
    cr_assert_eq(out.action, MSG_LEAVE);
}

Test(msg, balance_round_trips_every_field)
{
    any_msg in = sample(MSG_BALANCE), out;
    const msg_split *a = &in.balance.split, *b = &out.balance.split;

    cr_assert_eq(round_trip(MSG_BALANCE, &in, &out),
                 MSG_HEADER_SIZE + 8 + SPLIT_BYTES(MSG_MAX_SHARES));
    cr_assert_eq(out.balance.id, in.balance.id);
    cr_assert_eq(b->step, a->step);
    cr_assert_eq(b->global_batch, a->global_batch);
    cr_assert_eq(b->resplits, a->resplits);
    cr_assert_eq(b->every, a->every);
    cr_assert_eq(b->n_ranks, MSG_MAX_SHARES + 3, "the count of ranks, beyond those shown");
    for (int i = 0; i < MSG_MAX_SHARES; i++) {
        cr_assert_eq(b->shares[i].rows, a->shares[i].rows);
        cr_assert_eq(b->shares[i].rate, a->shares[i].rate);
    }
}

Test(msg, balance_has_the_documented_byte_layout)
{
    msg_balance in = {.id = 7,
                      .split = {.step = 0x0102030405060708u,
                                .global_batch = 384,
                                .resplits = 3,
                                .every = 10,
                                .n_ranks = 2,
                                .shares = {{.rows = 256, .rate = 1.0}, {.rows = 128, .rate = 0}}}},
                out;
    /* clang-format off */
    static const uint8_t want[] = {
        0x52, 0x47, 0x44, 0x43, 4, MSG_BALANCE, 0, 0, 0, 0, 0, 60, /* header */
        0, 0, 0, 0, 0, 0, 0, 7,                                   /* id */
        1, 2, 3, 4, 5, 6, 7, 8,                                   /* step */
        0, 0, 0, 0, 0, 0, 1, 128,                                 /* global_batch: 384 */
        0, 0, 0, 3,                                               /* resplits */
        0, 0, 0, 10,                                              /* every */
        0, 0, 0, 2,                                               /* n_ranks */
        0, 0, 1, 0, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0,                 /* rank 0: 256 rows, 1.0 rows/s */
        0, 0, 0, 128, 0, 0, 0, 0, 0, 0, 0, 0,                     /* rank 1: 128 rows, not measured */
    };
    /* clang-format on */
    uint8_t buf[MSG_BUF];
    msg_header h;

    cr_assert_eq(msg_encode_balance(buf, sizeof buf, &in), sizeof want);
    cr_assert_arr_eq(buf, want, sizeof want);
    cr_assert_eq(msg_decode_header(buf, sizeof want, &h), MSG_OK);
    cr_assert_eq(msg_decode_balance(&h, buf + MSG_HEADER_SIZE, &out), MSG_OK);
    cr_assert_eq(out.split.n_ranks, 2);
    cr_assert_eq(out.split.shares[1].rows, 128);
}

Test(msg, balance_carries_the_entries_its_count_of_ranks_says)
{
    for (uint32_t n = 0; n <= MSG_MAX_SHARES + 1; n++) {
        any_msg in = sample(MSG_BALANCE), out;
        uint8_t buf[MSG_BUF];
        msg_header h;

        in.balance.split.n_ranks = n;
        int len = round_trip(MSG_BALANCE, &in, &out);
        cr_assert_eq(len, MSG_HEADER_SIZE + 8 + SPLIT_BYTES(n), "%u ranks", n);
        /* One more rank than the entries sent is malformed, below the limit. */
        encode_any(MSG_BALANCE, &in, buf, sizeof buf);
        buf[MSG_HEADER_SIZE + 8 + 27]++;
        cr_assert_eq(msg_decode_header(buf, (size_t)len, &h), MSG_OK);
        cr_assert_eq(decode_exact(&h, buf + MSG_HEADER_SIZE, &out),
                     n >= MSG_MAX_SHARES ? MSG_OK : MSG_EMALFORMED, "%u ranks, one more said", n);
    }
}

Test(msg, status_round_trips_its_balance_block_after_two_empty_ones)
{
    any_msg in = sample_balanced(3), out;
    const msg_status *a = &in.status, *b = &out.status;
    any_msg plain = sample(MSG_STATUS);
    uint8_t buf[MSG_BUF];
    int n = msg_encode_status(buf, sizeof buf, &plain.status);

    /* An empty membership block (34 bytes), an empty reload block (19),
     * then the balance block: its age and the split. */
    cr_assert_eq(round_trip(MSG_STATUS, &in, &out), n + 34 + 19 + 8 + SPLIT_BYTES(3));
    cr_assert_eq(b->n_live, 0);
    cr_assert_eq(b->reloads, 0);
    cr_assert_eq(b->balance_age_ms, a->balance_age_ms);
    cr_assert_eq(b->split.step, a->split.step);
    cr_assert_eq(b->split.global_batch, a->split.global_batch);
    cr_assert_eq(b->split.n_ranks, 3);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(b->split.shares[i].rows, a->split.shares[i].rows);
        cr_assert_eq(b->split.shares[i].rate, a->split.shares[i].rate);
    }
}

Test(msg, status_carries_membership_reload_and_balance_at_their_longest)
{
    any_msg in = sample_elastic(), out;
    in.status.reloads = 1;
    fill(in.status.reload_said, MSG_MAX_REASON, 's');
    in.status.balance_age_ms = 5;
    fill_split(&in.status.split, MSG_MAX_SHARES + 9);

    int n = round_trip(MSG_STATUS, &in, &out);
    cr_assert_leq(n, MSG_HEADER_SIZE + MSG_MAX_BODY);
    cr_assert_eq(out.status.n_live, in.status.n_live);
    cr_assert_eq(out.status.reloads, 1);
    cr_assert_eq(out.status.split.n_ranks, MSG_MAX_SHARES + 9);
    cr_assert_eq(out.status.split.shares[MSG_MAX_SHARES - 1].rows,
                 in.status.split.shares[MSG_MAX_SHARES - 1].rows);
}

Test(msg, status_of_an_older_daemon_decodes_without_balance)
{
    any_msg in = sample_reloaded(), out;

    memset(&out, 0x5a, sizeof out);
    round_trip(MSG_STATUS, &in, &out);
    cr_assert_eq(out.status.split.n_ranks, 0);
    cr_assert_eq(out.status.balance_age_ms, 0);
}

Test(msg, status_rejects_a_balance_block_of_no_ranks_or_cut_short)
{
    any_msg in = sample_balanced(2), out;
    uint8_t buf[MSG_BUF];
    msg_header h;
    int n = encode_any(MSG_STATUS, &in, buf, sizeof buf);
    uint32_t block = 8 + SPLIT_BYTES(2);

    cr_assert_eq(msg_decode_header(buf, (size_t)n, &h), MSG_OK);
    /* Without the whole balance block the empty reload block is alone. */
    for (uint32_t cut = 1; cut <= block; cut++) {
        msg_header c = h;
        c.length -= cut;
        cr_assert_eq(decode_exact(&c, buf + MSG_HEADER_SIZE, &out), MSG_EMALFORMED,
                     "block cut by %u bytes", cut);
    }
    /* n_ranks 0 is sent as no block; its entries then trail. */
    memset(buf + n - block + 8 + 24, 0, 4);
    cr_assert_eq(decode_exact(&h, buf + MSG_HEADER_SIZE, &out), MSG_EMALFORMED);
    /* With no entries at all, still malformed: 0 ranks is no block. */
    h.length -= 24;
    cr_assert_eq(decode_exact(&h, buf + MSG_HEADER_SIZE, &out), MSG_EMALFORMED);
}

Test(msg, empty_strings_round_trip)
{
    any_msg in, out;

    memset(&in, 0, sizeof in);
    cr_assert_eq(round_trip(MSG_STATUS, &in, &out),
                 MSG_HEADER_SIZE + 80 + 5 * 2 + 33 + 3 * 2 + 32 + 1);
    cr_assert_str_eq(out.status.cluster, "");
    cr_assert_str_eq(out.status.last_error, "");
}

Test(msg, hello_has_the_documented_byte_layout)
{
    msg_hello in = {.flags = MSG_HELLO_OBSERVER, .local_rank = -1, .pid = 0x01020304};
    /* clang-format off */
    static const uint8_t want[] = {
        0x52, 0x47, 0x44, 0x43, 4, MSG_HELLO, 0, 0, 0, 0, 0, 12, /* header */
        0, 0, 0, 1,                                              /* flags */
        0xff, 0xff, 0xff, 0xff,                                  /* local_rank */
        1, 2, 3, 4,                                              /* pid */
    };
    /* clang-format on */
    uint8_t buf[MSG_BUF];

    cr_assert_eq(MSG_VERSION, 4);
    cr_assert_eq(msg_encode_hello(buf, sizeof buf, &in), sizeof want);
    cr_assert_arr_eq(buf, want, sizeof want);
}

Test(msg, welcome_has_the_documented_byte_layout)
{
    msg_welcome in = {.rank = 5,
                      .size = 8,
                      .local_rank = 1,
                      .local_size = 2,
                      .host_index = 2,
                      .n_hosts = 4,
                      .max_bytes = 0x0102030405060708u,
                      .host = "h2",
                      .members_epoch = 0x11121314u};
    /* clang-format off */
    static const uint8_t want[] = {
        0x52, 0x47, 0x44, 0x43, 4, MSG_WELCOME, 0, 0, 0, 0, 0, 40, /* header */
        0, 0, 0, 5,   0, 0, 0, 8,                                  /* rank, size */
        0, 0, 0, 1,   0, 0, 0, 2,                                  /* local_rank, local_size */
        0, 0, 0, 2,   0, 0, 0, 4,                                  /* host_index, n_hosts */
        1, 2, 3, 4, 5, 6, 7, 8,                                    /* max_bytes */
        0, 2, 'h', '2',                                            /* host */
        0x11, 0x12, 0x13, 0x14,                                    /* members_epoch */
    };
    /* clang-format on */
    uint8_t buf[MSG_BUF];

    cr_assert_eq(msg_encode_welcome(buf, sizeof buf, &in), sizeof want);
    cr_assert_arr_eq(buf, want, sizeof want);
}

Test(msg, welcome_and_collective_carry_the_membership_epoch_after_their_string)
{
    /* 0: a ring never resized; the membership a session was told of comes
     * back, unchanged, in every COLLECTIVE it makes for that membership. */
    static const uint32_t epochs[] = {0, 1, 41, UINT32_MAX};

    for (size_t i = 0; i < sizeof epochs / sizeof *epochs; i++) {
        any_msg w = sample(MSG_WELCOME), c = sample(MSG_COLLECTIVE), out;

        w.welcome.members_epoch = epochs[i];
        c.coll.members_epoch = epochs[i];
        round_trip(MSG_WELCOME, &w, &out);
        cr_assert_eq(out.welcome.members_epoch, epochs[i]);
        cr_assert_str_eq(out.welcome.host, w.welcome.host);
        round_trip(MSG_COLLECTIVE, &c, &out);
        cr_assert_eq(out.coll.members_epoch, epochs[i]);
        cr_assert_str_eq(out.coll.name, c.coll.name);
    }
}

Test(msg, collective_has_the_documented_byte_layout)
{
    msg_collective in = {.id = 0x0102030405060708u,
                         .kind = MSG_COLL_ALLREDUCE,
                         .dtype = 6,
                         .op = 1,
                         .region = 0x11121314u,
                         .offset = 0x2122232425262728u,
                         .count = 0x3132333435363738u,
                         .root = 0x51525354,
                         .weight = 2.0,
                         .timeout_ms = 0x41424344u,
                         .name = "g",
                         .members_epoch = 0x61626364u};
    /* clang-format off */
    static const uint8_t want[] = {
        0x52, 0x47, 0x44, 0x43, 4, MSG_COLLECTIVE, 0, 0, 0, 0, 0, 55, /* header */
        1, 2, 3, 4, 5, 6, 7, 8,                                       /* id */
        1, 6, 1, 0,                                     /* kind, dtype, op, reserved */
        0x11, 0x12, 0x13, 0x14,                         /* region */
        0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, /* offset */
        0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, /* count */
        0x51, 0x52, 0x53, 0x54,                         /* root */
        0x40, 0, 0, 0, 0, 0, 0, 0,                      /* weight: binary64 2.0 */
        0x41, 0x42, 0x43, 0x44,                         /* timeout_ms */
        0, 1, 'g',                                      /* name */
        0x61, 0x62, 0x63, 0x64,                         /* members_epoch */
    };
    /* clang-format on */
    uint8_t buf[MSG_BUF];

    cr_assert_eq(msg_encode_collective(buf, sizeof buf, &in), sizeof want);
    cr_assert_arr_eq(buf, want, sizeof want);
}

Test(msg, status_fixed_fields_come_before_the_strings)
{
    any_msg in = sample(MSG_STATUS);
    uint8_t buf[MSG_BUF];
    const uint8_t *body = buf + MSG_HEADER_SIZE;

    msg_encode_status(buf, sizeof buf, &in.status);
    cr_assert_eq(body[16], MSG_LINK_UP);                  /* left_state */
    cr_assert_eq(body[17], 0xff);                         /* right_state */
    cr_assert_eq(body[18] | body[19], 0);                 /* reserved */
    cr_assert_eq(body[20], 0x80);                         /* epoch */
    cr_assert_eq(body[72], 0xff);                         /* reconnects */
    cr_assert_eq(body[80] << 8 | body[81], MSG_MAX_NAME); /* cluster's length */
}

Test(msg, encoder_truncates_strings_to_their_limit)
{
    any_msg in, out;

    memset(&in, 0, sizeof in);
    memset(in.result.text, 'x', sizeof in.result.text); /* no NUL: one byte too long */
    round_trip(MSG_RESULT, &in, &out);
    cr_assert_eq(strlen(out.result.text), MSG_MAX_TEXT);
}

Test(msg, encoders_refuse_a_short_buffer_without_writing_past_it)
{
    for (size_t t = 0; t < N_TYPES; t++) {
        any_msg m = sample(all_types[t]);
        uint8_t buf[MSG_BUF + 1];
        int n = encode_any(all_types[t], &m, buf, sizeof buf);

        for (int cap = 0; cap < n; cap++) {
            memset(buf, 0xee, sizeof buf);
            cr_assert_eq(encode_any(all_types[t], &m, buf, (size_t)cap), MSG_ESPACE,
                         "%s into %d bytes", msg_type_name(all_types[t]), cap);
            for (size_t i = (size_t)cap; i < sizeof buf; i++)
                cr_assert_eq(buf[i], 0xee, "%s wrote byte %zu of a %d-byte buffer",
                             msg_type_name(all_types[t]), i, cap);
        }
    }
}

/* The header */

Test(msg, header_needs_all_twelve_bytes)
{
    for (size_t t = 0; t < N_TYPES; t++) {
        any_msg m = sample(all_types[t]);
        uint8_t buf[MSG_BUF];
        msg_header h;

        encode_any(all_types[t], &m, buf, sizeof buf);
        for (size_t len = 0; len < MSG_HEADER_SIZE; len++)
            cr_assert_eq(msg_decode_header(buf, len, &h), MSG_EAGAIN, "%s header cut to %zu",
                         msg_type_name(all_types[t]), len);
        cr_assert_eq(msg_decode_header(buf, MSG_HEADER_SIZE, &h), MSG_OK);
    }
}

static size_t encode_status_req(uint8_t *buf)
{
    msg_status_req m = {.id = 1};
    return (size_t)msg_encode_status_req(buf, MSG_BUF, &m);
}

Test(msg, rejects_wrong_magic)
{
    uint8_t buf[MSG_BUF];
    msg_header h;
    size_t n = encode_status_req(buf);

    for (int i = 0; i < 4; i++) {
        buf[i] ^= 0x01;
        cr_assert_eq(msg_decode_header(buf, n, &h), MSG_EMAGIC, "magic byte %d", i);
        buf[i] ^= 0x01;
    }
}

Test(msg, rejects_a_peer_frame_on_the_client_socket)
{
    /* The peer magic "RGND": a ring port dialled by mistake is not a client. */
    static const uint8_t frame[] = {0x52, 0x47, 0x4e, 0x44, 1, 5, 0, 0, 0, 0, 0, 0};
    msg_header h;

    cr_assert_eq(msg_decode_header(frame, sizeof frame, &h), MSG_EMAGIC);
}

Test(msg, rejects_other_version_and_reports_it)
{
    uint8_t buf[MSG_BUF];
    msg_header h;
    size_t n = encode_status_req(buf);

    buf[4] = MSG_VERSION + 1;
    buf[5] = 200; /* a newer version may have newer types */
    cr_assert_eq(msg_decode_header(buf, n, &h), MSG_EVERSION);
    cr_assert_eq(h.version, MSG_VERSION + 1);
}

Test(msg, rejects_unknown_type)
{
    static const uint8_t bad[] = {0, MSG_REPORT + 1, 0x7f, 0xff};
    uint8_t buf[MSG_BUF];
    msg_header h;
    size_t n = encode_status_req(buf);

    for (size_t i = 0; i < sizeof bad; i++) {
        buf[5] = bad[i];
        cr_assert_eq(msg_decode_header(buf, n, &h), MSG_ETYPE, "type %d", bad[i]);
    }
}

Test(msg, rejects_length_over_limit)
{
    uint8_t buf[MSG_BUF];
    msg_header h;
    size_t n = encode_status_req(buf);

    buf[8] = 0, buf[9] = 0, buf[10] = MSG_MAX_BODY >> 8, buf[11] = MSG_MAX_BODY & 0xff;
    cr_assert_eq(msg_decode_header(buf, n, &h), MSG_OK);
    buf[11]++;
    cr_assert_eq(msg_decode_header(buf, n, &h), MSG_ELENGTH);
    buf[8] = 0xff;
    cr_assert_eq(msg_decode_header(buf, n, &h), MSG_ELENGTH);
}

/* Bodies */

Test(msg, rejects_every_truncated_body)
{
    for (size_t t = 0; t < N_TYPES; t++) {
        any_msg m = sample(all_types[t]), out;
        uint8_t buf[MSG_BUF];
        msg_header h;
        int n = encode_any(all_types[t], &m, buf, sizeof buf);

        cr_assert_eq(msg_decode_header(buf, (size_t)n, &h), MSG_OK);
        for (uint32_t len = 0; len < (uint32_t)n - MSG_HEADER_SIZE; len++) {
            msg_header cut = h;
            cut.length = len;
            cr_assert_eq(decode_exact(&cut, buf + MSG_HEADER_SIZE, &out), MSG_EMALFORMED,
                         "%s body cut to %u bytes", msg_type_name(h.type), len);
        }
    }
}

Test(msg, rejects_trailing_bytes_after_the_body)
{
    for (size_t t = 0; t < N_TYPES; t++) {
        any_msg m = sample(all_types[t]), out;
        uint8_t buf[MSG_BUF + 1];
        msg_header h;
        int n = encode_any(all_types[t], &m, buf, sizeof buf);

        cr_assert_eq(msg_decode_header(buf, (size_t)n, &h), MSG_OK);
        buf[n] = 0;
        h.length++;
        cr_assert_eq(decode_exact(&h, buf + MSG_HEADER_SIZE, &out), MSG_EMALFORMED,
                     "%s with a trailing byte", msg_type_name(h.type));
    }
}

Test(msg, rejects_string_with_nul)
{
    msg_result in = {.id = 9, .status = -1, .text = "bad buffer"}, out;
    uint8_t buf[MSG_BUF];
    msg_header h;
    int n = msg_encode_result(buf, sizeof buf, &in);

    cr_assert_eq(msg_decode_header(buf, (size_t)n, &h), MSG_OK);
    buf[n - 1] = '\0';
    cr_assert_eq(msg_decode_result(&h, buf + MSG_HEADER_SIZE, &out), MSG_EMALFORMED);
}

Test(msg, rejects_string_over_its_limit)
{
    any_msg in = sample(MSG_COLLECTIVE), out;
    uint8_t buf[MSG_BUF];
    msg_header h;
    size_t name = MSG_HEADER_SIZE + 48;
    int n = msg_encode_collective(buf, sizeof buf, &in.coll);

    /* One more byte of name, with both length fields consistent: members_epoch
     * moves one byte on. */
    cr_assert_eq(buf[name] << 8 | buf[name + 1], MSG_MAX_NAME);
    memmove(buf + n - 3, buf + n - 4, 4);
    buf[n - 4] = 'c';
    buf[name + 1]++;
    buf[11]++;
    cr_assert_eq(msg_decode_header(buf, (size_t)n + 1, &h), MSG_OK);
    cr_assert_eq(decode_exact(&h, buf + MSG_HEADER_SIZE, &out), MSG_EMALFORMED);
}

Test(msg, rejects_text_over_its_limit)
{
    uint8_t buf[MSG_BUF] = {0};
    msg_header h;
    msg_error out;
    size_t body = 4 + 2 + MSG_MAX_TEXT + 1;

    msg_encode_status_req(buf, sizeof buf, &(msg_status_req){0});
    buf[5] = MSG_ERROR;
    buf[10] = (uint8_t)(body >> 8), buf[11] = (uint8_t)body;
    buf[MSG_HEADER_SIZE + 4] = (MSG_MAX_TEXT + 1) >> 8;
    buf[MSG_HEADER_SIZE + 5] = (MSG_MAX_TEXT + 1) & 0xff;
    memset(buf + MSG_HEADER_SIZE + 6, 't', MSG_MAX_TEXT + 1);
    cr_assert_eq(msg_decode_header(buf, sizeof buf, &h), MSG_OK);
    cr_assert_eq(msg_decode_error(&h, buf + MSG_HEADER_SIZE, &out), MSG_EMALFORMED);
}

Test(msg, rejects_nonzero_reserved_bytes)
{
    any_msg coll = sample(MSG_COLLECTIVE), status = sample(MSG_STATUS), out;
    uint8_t buf[MSG_BUF];
    msg_header h;
    int n;

    /* Byte 11 of COLLECTIVE is wire (ringd_wire, 0..3). */
    n = msg_encode_collective(buf, sizeof buf, &coll.coll);
    buf[MSG_HEADER_SIZE + 11] = 3;
    cr_assert_eq(msg_decode_header(buf, (size_t)n, &h), MSG_OK);
    cr_assert_eq(decode_exact(&h, buf + MSG_HEADER_SIZE, &out), MSG_OK);
    cr_assert_eq(out.coll.wire, 3);
    buf[MSG_HEADER_SIZE + 11] = 4;
    cr_assert_eq(msg_decode_header(buf, (size_t)n, &h), MSG_OK);
    cr_assert_eq(decode_exact(&h, buf + MSG_HEADER_SIZE, &out), MSG_EMALFORMED);

    n = msg_encode_status(buf, sizeof buf, &status.status);
    buf[MSG_HEADER_SIZE + 19] = 1;
    cr_assert_eq(msg_decode_header(buf, (size_t)n, &h), MSG_OK);
    cr_assert_eq(decode_exact(&h, buf + MSG_HEADER_SIZE, &out), MSG_EMALFORMED);
}

Test(msg, decoders_refuse_a_header_of_another_type)
{
    for (size_t t = 0; t < N_TYPES; t++) {
        any_msg m = sample(all_types[t]), out;
        uint8_t buf[MSG_BUF];
        msg_header h;
        int n = encode_any(all_types[t], &m, buf, sizeof buf);

        cr_assert_eq(msg_decode_header(buf, (size_t)n, &h), MSG_OK);
        for (size_t u = 0; u < N_TYPES; u++) {
            msg_header other = h;
            int rc;

            if (u == t) continue;
            other.type = (uint8_t)all_types[u];
            /* Even where the sizes agree (HELLO and UNREGISTER). */
            rc = decode_as(h.type, &other, buf + MSG_HEADER_SIZE, &out);
            cr_assert_eq(rc, MSG_EMALFORMED, "%s decoder given a %s header", msg_type_name(h.type),
                         msg_type_name(other.type));
        }
    }
}

/* Corrupted input */

static uint64_t rng = 0x2545f4914f6cdd1du;

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

/* A valid message of a random type: the sample with random integers and
 * random strings of random lengths. */
static int rnd_msg(any_msg *m)
{
    int type = all_types[rnd() % N_TYPES];

    *m = sample(type);
    switch (type) {
    case MSG_HELLO:
        m->hello.pid = (uint32_t)rnd();
        break;
    case MSG_WELCOME:
        m->welcome.max_bytes = rnd();
        rnd_str(m->welcome.host, MSG_MAX_NAME);
        m->welcome.members_epoch = (uint32_t)rnd();
        break;
    case MSG_ERROR:
        rnd_str(m->error.text, MSG_MAX_TEXT);
        break;
    case MSG_REGISTER:
        m->reg.size = rnd();
        break;
    case MSG_UNREGISTER:
        m->unreg.region = (uint32_t)rnd();
        break;
    case MSG_COLLECTIVE:
        m->coll.count = rnd();
        rnd_str(m->coll.name, MSG_MAX_NAME);
        m->coll.members_epoch = (uint32_t)rnd();
        break;
    case MSG_RESULT:
        if (rnd() % 2) *m = sample_resized();
        rnd_str(m->result.text, MSG_MAX_TEXT);
        break;
    case MSG_STATUS_REQ:
        m->status_req.id = rnd();
        break;
    case MSG_LEAVE_REQ:
        m->leave.action = (uint8_t)rnd();
        break;
    case MSG_BALANCE:
        m->balance.split.n_ranks = (uint32_t)(rnd() % (MSG_MAX_SHARES + 2));
        m->balance.split.step = rnd();
        break;
    case MSG_REPORT_REQ:
        m->report_req.id = rnd();
        break;
    case MSG_REPORT:
        rnd_str(m->report.cluster, MSG_MAX_NAME);
        rnd_str(m->report.host, MSG_MAX_NAME);
        m->report.now_us = rnd();
        if (rnd() % 4 == 0) m->report.flags = 0;
        m->report.part.n = (uint8_t)(rnd() % (SUMMARY_MAX_RANKS + 1));
        for (int i = 0; i < m->report.part.n; i++)
            m->report.part.ranks[i].n_spans = (uint8_t)(rnd() % (SUMMARY_MAX_SPANS + 1));
        break;
    case MSG_STATUS:
        if (rnd() % 3 == 0) *m = sample_elastic();
        if (rnd() % 3 == 0) *m = sample_balanced((uint32_t)(1 + rnd() % (MSG_MAX_SHARES + 2)));
        rnd_str(m->status.resize_why, MSG_MAX_REASON);
        rnd_str(m->status.cluster, MSG_MAX_NAME);
        rnd_str(m->status.host, MSG_MAX_NAME);
        rnd_str(m->status.left, MSG_MAX_NAME);
        rnd_str(m->status.right, MSG_MAX_NAME);
        rnd_str(m->status.last_error, MSG_MAX_TEXT);
        break;
    }
    return type;
}

Test(msg, survives_random_corruption_of_valid_messages)
{
    int decoded = 0, refused = 0;

    for (int iter = 0; iter < 100000; iter++) {
        /* Zeros after the message stand for whatever the client sends next. */
        uint8_t buf[MSG_BUF] = {0}, again[MSG_BUF];
        any_msg m, out;
        msg_header h;
        int type = rnd_msg(&m);
        int n = encode_any(type, &m, buf, sizeof buf), rc;
        int flips = 1 + (int)(rnd() % 4);

        for (int i = 0; i < flips; i++)
            buf[rnd() % (uint64_t)n] ^= (uint8_t)(1 + rnd() % 255);

        rc = msg_decode_header(buf, (size_t)n, &h);
        cr_assert(rc == MSG_OK || rc == MSG_EMAGIC || rc == MSG_EVERSION || rc == MSG_ETYPE ||
                      rc == MSG_ELENGTH,
                  "iteration %d: header gave %d", iter, rc);
        if (rc != MSG_OK) {
            refused++;
            continue;
        }

        rc = decode_exact(&h, buf + MSG_HEADER_SIZE, &out);
        cr_assert(rc == MSG_OK || rc == MSG_EMALFORMED, "iteration %d: body gave %d", iter, rc);
        if (rc != MSG_OK) {
            refused++;
            continue;
        }

        /* Whatever decodes is canonical: it encodes back to the same bytes. */
        decoded++;
        n = encode_any(h.type, &out, again, sizeof again);
        cr_assert_eq(n, MSG_HEADER_SIZE + (int)h.length, "iteration %d", iter);
        cr_assert_arr_eq(again + MSG_HEADER_SIZE, buf + MSG_HEADER_SIZE, h.length,
                         "iteration %d: %s re-encodes differently", iter, msg_type_name(h.type));
    }
    cr_assert_gt(decoded, 1000);
    cr_assert_gt(refused, 1000);
}

/* Names */

Test(msg, every_error_has_its_own_message)
{
    static const int codes[] = {MSG_OK,    MSG_EAGAIN,  MSG_EMAGIC,     MSG_EVERSION,
                                MSG_ETYPE, MSG_ELENGTH, MSG_EMALFORMED, MSG_ESPACE};
    const int n = sizeof codes / sizeof *codes;
    for (int a = 0; a < n; a++) {
        cr_assert_str_neq(msg_strerror(codes[a]), msg_strerror(-1), "error %d", codes[a]);
        for (int b = 0; b < a; b++)
            cr_assert_str_neq(msg_strerror(codes[a]), msg_strerror(codes[b]));
    }
}

Test(msg, errors_are_apart_from_the_ringd_and_frame_codes)
{
    cr_assert_lt(MSG_EAGAIN, -200);
    cr_assert_gt(MSG_ESPACE, -300);
}

Test(msg, every_type_has_a_name)
{
    for (size_t t = 0; t < N_TYPES; t++)
        cr_assert_str_neq(msg_type_name(all_types[t]), "UNKNOWN");
    cr_assert_str_eq(msg_type_name(MSG_STATUS_REQ), "STATUS_REQ");
    cr_assert_str_eq(msg_type_name(0), "UNKNOWN");
}
