/*
 * test_requests.c - requests a client gets refused, on the Unix socket's
 * own protocol (issue 22, part 4): what libringd checks before it sends, sent
 * anyway, to a real ringd.
 *
 * The specification: every request that decodes but cannot be done (a
 * COLLECTIVE of an unknown kind or dtype, an op that does not apply, a narrow
 * wire_dtype where there is none, too many elements, a buffer outside its
 * region, a root that is not a rank, an observer's; a REGISTER without a
 * descriptor; an UNREGISTER of an unknown region; a BALANCE that is no split;
 * a LEAVE_REQ of an unknown
 * action) gets a RESULT with its id, its RINGD_E* code and a text, in its
 * place among the session's answers (after those of the COLLECTIVEs before
 * it). The session goes on: the request sent after it is answered too. A
 * refused COLLECTIVE takes no number, so the rank's next one still pairs
 * with the other ranks' next one. Only a second HELLO, which has no id to be
 * answered with, gets an ERROR and ends the session.
 *
 * Suite `refused` runs one host with one rank, whose session C each test
 * uses; suite `order` one host with two ranks.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client/session.h"
#include "proto/msg.h"
#include "ringd.h"
#include "tests/harness/harness.h"

/* A small max_buffer, for a count over it; evict_after 0: the ring does not
 * close over hosts, so a host cannot leave it. */
#define YAML "collective_timeout: 30s\nmax_buffer: 1MiB\nevict_after: 0\n"
#define REPLY_MS 20000 /* for one reply; a healthy daemon answers in ms */

/* A client speaking the protocol itself, through libringd's message I/O
 * (which checks nothing of what it carries). */
typedef struct {
    session s;
    int observer;
    uint64_t next_id;
} raw_client;

static harness H;
static raw_client C; /* a rank's session on host h0 */

/* Starts host h0 with local_clients ranks. */
static void start_host(int local_clients)
{
    harness_reset(&H);
    cr_assert_eq(harness_init_local(&H, 1, local_clients, YAML), 0, "%s", H.err);
    cr_assert_eq(harness_start(&H, harness_seed("refused requests"), 0), 0, "%s", H.err);
}

/* Says HELLO as a rank (any free local rank) or as an observer. */
static raw_client connect_raw(int observer)
{
    raw_client c = {.observer = observer};
    msg_welcome w;
    cr_assert_eq(session_connect(&c.s, H.d[0].socket, REPLY_MS), 0, "%s", c.s.err);
    cr_assert_eq(session_hello(&c.s, observer ? MSG_HELLO_OBSERVER : 0, -1, &w), 0, "%s", c.s.err);
    return c;
}

static void start_one_rank(void)
{
    start_host(1);
    C = connect_raw(0);
}

static void start_two_ranks(void)
{
    start_host(2);
}

static void stop_host(void)
{
    session_close(&C.s);
    int rc = harness_stop(&H);
    harness_cleanup(&H);
    cr_assert_eq(rc, 0, "%s", H.err);
}

TestSuite(refused, .init = start_one_rank, .fini = stop_host, .timeout = 300);
TestSuite(order, .init = start_two_ranks, .fini = stop_host, .timeout = 300);

/* Sends an encoded message of n bytes, with descriptor pass_fd (if >= 0). */
static void send_raw(raw_client *c, const uint8_t *buf, int n, int pass_fd)
{
    cr_assert_gt(n, 0, "cannot encode a message");
    cr_assert_eq(session_send(&c->s, buf, (size_t)n, pass_fd, session_deadline(REPLY_MS), "test"),
                 0, "%s", c->s.err);
}

/* The next message from the daemon, which must come within REPLY_MS. */
static void recv_raw(raw_client *c, msg_header *h, uint8_t *body, const char *waiting_for)
{
    int rc = session_recv(&c->s, h, body, session_deadline(REPLY_MS), waiting_for);
    if (rc < 0) harness_dump_logs(&H, 20);
    cr_assert_eq(rc, 0, "%s", c->s.err);
}

static void send_collective(raw_client *c, const msg_collective *m)
{
    uint8_t buf[SESSION_MSG_MAX];
    send_raw(c, buf, msg_encode_collective(buf, sizeof buf, m), -1);
}

/* A barrier: the simplest collective that runs, with no buffer. */
static uint64_t send_barrier(raw_client *c)
{
    msg_collective m = {.id = c->next_id++, .kind = MSG_COLL_BARRIER};
    send_collective(c, &m);
    return m.id;
}

static uint64_t send_status_req(raw_client *c)
{
    uint8_t buf[SESSION_MSG_MAX];
    msg_status_req m = {.id = c->next_id++};
    send_raw(c, buf, msg_encode_status_req(buf, sizeof buf, &m), -1);
    return m.id;
}

/* The next message must be the RESULT of request id, with status; for a
 * refusal, its text must say `says`. */
static void expect_result(raw_client *c, uint64_t id, int status, const char *says)
{
    msg_header h;
    uint8_t body[MSG_MAX_BODY];
    msg_result r;
    char what[64];
    snprintf(what, sizeof what, "the RESULT of request %llu", (unsigned long long)id);
    recv_raw(c, &h, body, what);
    cr_assert_eq(h.type, MSG_RESULT, "got %s, expected %s", msg_type_name(h.type), what);
    cr_assert_eq(msg_decode_result(&h, body, &r), 0);
    cr_assert_eq(r.id, id, "got the RESULT of request %llu (status %d: %s), expected %s",
                 (unsigned long long)r.id, r.status, r.text, what);
    cr_assert_eq(r.status, status, "request %llu: status %d (%s), expected %d (%s)",
                 (unsigned long long)id, r.status, r.text, status, ringd_strerror(status));
    if (says) cr_assert_not_null(strstr(r.text, says), "\"%s\" does not say \"%s\"", r.text, says);
}

static void expect_status(raw_client *c, uint64_t id)
{
    msg_header h;
    uint8_t body[MSG_MAX_BODY];
    msg_status st;
    recv_raw(c, &h, body, "STATUS");
    cr_assert_eq(h.type, MSG_STATUS, "got %s, expected STATUS", msg_type_name(h.type));
    cr_assert_eq(msg_decode_status(&h, body, &st), 0);
    cr_assert_eq(st.id, id);
}

/* The refused request (already sent, id) is answered with code and a text
 * saying `says`; the request sent right after it (a barrier, or a
 * STATUS_REQ from an observer, which joins no collective) is answered after
 * it. */
static void assert_refused_then_goes_on(raw_client *c, uint64_t id, int code, const char *says)
{
    uint64_t next = c->observer ? send_status_req(c) : send_barrier(c);
    expect_result(c, id, code, says);
    if (c->observer)
        expect_status(c, next);
    else
        expect_result(c, next, 0, NULL);
}

/* Sends COLLECTIVE m (its id set here); it must be refused with code. */
static void assert_collective_refused(raw_client *c, msg_collective m, int code, const char *says)
{
    m.id = c->next_id++;
    send_collective(c, &m);
    assert_refused_then_goes_on(c, m.id, code, says);
}

/* A memfd of size bytes, sealed as libringd seals one or not. */
static int memfd(size_t size, int sealed)
{
    int fd = memfd_create("test_requests", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    cr_assert(fd >= 0 && ftruncate(fd, (off_t)size) == 0, "memfd: %s", strerror(errno));
    if (sealed) cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
    return fd;
}

/* Sends REGISTER of region (size bytes) with descriptor fd (-1: none);
 * returns its id. */
static uint64_t send_register(raw_client *c, uint32_t region, uint64_t size, int fd)
{
    uint8_t buf[SESSION_MSG_MAX];
    msg_register m = {.id = c->next_id++, .region = region, .size = size};
    send_raw(c, buf, msg_encode_register(buf, sizeof buf, &m), fd);
    if (fd >= 0) close(fd);
    return m.id;
}

/* Registers region 1 of 4096 bytes, which the daemon accepts. */
static void register_region_1(raw_client *c)
{
    expect_result(c, send_register(c, 1, 4096, memfd(4096, 1)), 0, NULL);
}

/* ---- COLLECTIVE ------------------------------------------------------------------------------ */

static const msg_collective allreduce_f32 = {
    .kind = MSG_COLL_ALLREDUCE, .dtype = RINGD_FLOAT32, .op = RINGD_SUM, .count = 0};

Test(refused, a_collective_of_unknown_kind_gets_einval_and_the_session_goes_on)
{
    assert_collective_refused(&C, (msg_collective){.kind = 9}, RINGD_EINVAL,
                              "unknown collective kind 9");
    assert_collective_refused(&C, (msg_collective){.kind = 0}, RINGD_EINVAL,
                              "unknown collective kind 0");
}

Test(refused, a_collective_of_unknown_dtype_gets_einval_and_the_session_goes_on)
{
    assert_collective_refused(&C, (msg_collective){.kind = MSG_COLL_ALLGATHER, .dtype = 200},
                              RINGD_EINVAL, "allgather: unknown dtype 200");
}

Test(refused, an_op_that_does_not_apply_to_the_dtype_gets_einval_and_the_session_goes_on)
{
    assert_collective_refused(
        &C, (msg_collective){.kind = MSG_COLL_ALLREDUCE, .dtype = RINGD_INT32, .op = RINGD_MEAN},
        RINGD_EINVAL, "op mean does not apply to dtype int32");
    assert_collective_refused(&C,
                              (msg_collective){.kind = MSG_COLL_REDUCE_SCATTER,
                                               .dtype = RINGD_FLOAT32,
                                               .op = RINGD_OP_COUNT},
                              RINGD_EINVAL, "op ? does not apply");
}

Test(refused, a_wmean_without_a_weight_of_0_or_more_gets_einval_and_the_session_goes_on)
{
    msg_collective m = allreduce_f32;
    m.op = RINGD_WMEAN;
    m.weight = -1;
    assert_collective_refused(&C, m, RINGD_EINVAL, "wmean needs a weight >= 0, got -1");
}

Test(refused, a_narrow_wire_dtype_where_none_applies_gets_einval_and_the_session_goes_on)
{
    assert_collective_refused(&C,
                              (msg_collective){.kind = MSG_COLL_ALLREDUCE,
                                               .dtype = RINGD_INT32,
                                               .op = RINGD_SUM,
                                               .wire = RINGD_WIRE_BFLOAT16},
                              RINGD_EINVAL, "a narrow wire_dtype is for float32");
    assert_collective_refused(&C,
                              (msg_collective){.kind = MSG_COLL_BROADCAST,
                                               .dtype = RINGD_FLOAT32,
                                               .wire = RINGD_WIRE_FLOAT16},
                              RINGD_EINVAL, "not float32");
}

Test(refused, a_count_over_max_buffer_gets_etoobig_and_the_session_goes_on)
{
    msg_collective m = allreduce_f32;
    m.count = (1 << 20) / 4 + 1; /* max_buffer: 1MiB */
    assert_collective_refused(&C, m, RINGD_ETOOBIG, "is over max_buffer (1048576 bytes)");
    m.kind = MSG_COLL_ALLGATHER;
    m.count = UINT64_MAX;
    assert_collective_refused(&C, m, RINGD_ETOOBIG, "per rank is over max_buffer");
}

Test(refused, a_buffer_outside_its_region_gets_erange_and_the_session_goes_on)
{
    register_region_1(&C);
    msg_collective m = allreduce_f32;
    m.count = 4;
    m.region = 2; /* never registered */
    assert_collective_refused(&C, m, RINGD_ERANGE, "16 bytes at offset 0 are outside region 2");
    m.region = 1;
    m.offset = 4096 - 8;
    assert_collective_refused(&C, m, RINGD_ERANGE, "16 bytes at offset 4088 are outside region 1");
    m.offset = UINT64_MAX;
    assert_collective_refused(&C, m, RINGD_ERANGE, "outside region 1");
}

Test(refused, a_buffer_not_aligned_to_its_elements_gets_einval_and_the_session_goes_on)
{
    register_region_1(&C);
    msg_collective m = allreduce_f32;
    m.count = 4;
    m.region = 1;
    m.offset = 2;
    assert_collective_refused(&C, m, RINGD_EINVAL, "not aligned to its 4-byte elements");
}

Test(refused, a_broadcast_root_that_is_not_a_rank_gets_einval_and_the_session_goes_on)
{
    msg_collective m = {.kind = MSG_COLL_BROADCAST, .dtype = RINGD_FLOAT32, .root = 1};
    assert_collective_refused(&C, m, RINGD_EINVAL, "broadcast: root 1 is not a rank (0..0)");
    m.root = -1;
    assert_collective_refused(&C, m, RINGD_EINVAL, "root -1 is not a rank");
}

Test(refused, an_observers_collective_gets_einval_and_the_session_goes_on)
{
    raw_client o = connect_raw(1);
    assert_collective_refused(&o, allreduce_f32, RINGD_EINVAL,
                              "this session is an observer and joins no collective");
    assert_collective_refused(&o, (msg_collective){.kind = 9}, RINGD_EINVAL, "observer");
    session_close(&o.s);
}

Test(refused, a_collective_for_another_membership_gets_eresized_and_the_session_goes_on)
{
    msg_collective m = allreduce_f32;
    m.members_epoch = 7; /* this ring is not elastic: its membership is 0 */
    assert_collective_refused(&C, m, RINGD_ERESIZED, "failed: the ring was resized");
}

/* ---- REGISTER, UNREGISTER, LEAVE_REQ --------------------------------------------------------- */

Test(refused, a_register_without_a_fit_descriptor_gets_eshm_and_the_session_goes_on)
{
    uint64_t id = send_register(&C, 1, 4096, -1);
    assert_refused_then_goes_on(&C, id, RINGD_ESHM, "no file descriptor came with it");
    id = send_register(&C, 1, 8192, memfd(4096, 1));
    assert_refused_then_goes_on(&C, id, RINGD_ESHM, "size differs from the file's");
    id = send_register(&C, 1, 4096, memfd(4096, 0));
    assert_refused_then_goes_on(&C, id, RINGD_ESHM, "not sealed against shrinking and growing");
    id = send_register(&C, 1, 4096, memfd(4096, 1));
    expect_result(&C, id, 0, NULL);
    id = send_register(&C, 1, 4096, memfd(4096, 1));
    assert_refused_then_goes_on(&C, id, RINGD_ESHM, "region number already in use");
}

Test(refused, an_unregister_of_an_unknown_region_gets_einval_and_the_session_goes_on)
{
    uint8_t buf[SESSION_MSG_MAX];
    msg_unregister m = {.id = C.next_id++, .region = 5};
    send_raw(&C, buf, msg_encode_unregister(buf, sizeof buf, &m), -1);
    assert_refused_then_goes_on(&C, m.id, RINGD_EINVAL, "unregister: no region 5");
}

static void send_leave_req(raw_client *c, uint64_t id, uint8_t action)
{
    uint8_t buf[SESSION_MSG_MAX];
    msg_leave_req m = {.id = id, .action = action};
    send_raw(c, buf, msg_encode_leave_req(buf, sizeof buf, &m), -1);
}

Test(refused, a_leave_request_of_an_unknown_action_gets_einval_and_the_session_goes_on)
{
    raw_client o = connect_raw(1); /* as ringctl leave */
    uint64_t id = o.next_id++;
    send_leave_req(&o, id, 3);
    assert_refused_then_goes_on(&o, id, RINGD_EINVAL, "leave: unknown action 3");
    /* And one the ring cannot do: it does not close over hosts. */
    id = o.next_id++;
    send_leave_req(&o, id, MSG_LEAVE);
    assert_refused_then_goes_on(&o, id, RINGD_EINVAL, "cannot leave the ring");
    session_close(&o.s);
}

static uint64_t send_balance(raw_client *c, const msg_split *sp)
{
    uint8_t buf[SESSION_MSG_MAX];
    msg_balance m = {.id = c->next_id++, .split = *sp};
    send_raw(c, buf, msg_encode_balance(buf, sizeof buf, &m), -1);
    return m.id;
}

Test(refused, a_balance_that_is_no_split_gets_einval_and_the_session_goes_on)
{
    msg_split sp = {
        .step = 9, .global_batch = 30, .every = 3, .n_ranks = 2, .shares = {{20, 1000}, {10, 500}}};
    raw_client o = connect_raw(1);
    assert_refused_then_goes_on(&o, send_balance(&o, &sp), RINGD_EINVAL, "observer");
    session_close(&o.s);
    sp.shares[1].rate = -1;
    assert_refused_then_goes_on(&C, send_balance(&C, &sp), RINGD_EINVAL, "rank 1's rate is -1");
    sp.shares[1] = (msg_share){.rows = 11, .rate = 500};
    assert_refused_then_goes_on(&C, send_balance(&C, &sp), RINGD_EINVAL,
                                "rows sum to 31, not the global batch of 30");
    sp.n_ranks = 0;
    assert_refused_then_goes_on(&C, send_balance(&C, &sp), RINGD_EINVAL, "a split of no ranks");
    /* A good one is kept, and STATUS shows it. */
    sp.n_ranks = 2;
    sp.shares[1].rows = 10;
    expect_result(&C, send_balance(&C, &sp), 0, NULL);
    uint64_t id = send_status_req(&C);
    msg_header h;
    uint8_t body[MSG_MAX_BODY];
    msg_status st;
    recv_raw(&C, &h, body, "STATUS");
    cr_assert_eq(h.type, MSG_STATUS);
    cr_assert_eq(msg_decode_status(&h, body, &st), 0);
    cr_assert_eq(st.id, id);
    cr_assert_eq(st.split.n_ranks, 2);
    cr_assert_eq(st.split.step, 9);
    cr_assert_eq(st.split.shares[0].rows, 20);
    cr_assert_eq(st.split.shares[1].rate, 500);
}

/* ---- HELLO ----------------------------------------------------------------------------------- */

Test(refused, a_second_hello_gets_an_error_and_ends_the_session)
{
    uint8_t buf[SESSION_MSG_MAX];
    msg_hello hello = {.local_rank = -1, .pid = (uint32_t)getpid()};
    send_raw(&C, buf, msg_encode_hello(buf, sizeof buf, &hello), -1);
    msg_header h;
    int rc = session_recv(&C.s, &h, buf, session_deadline(REPLY_MS), "ERROR");
    cr_assert_eq(rc, RINGD_EINVAL, "%d: %s", rc, C.s.err);
    cr_assert_not_null(strstr(C.s.err, "HELLO again"), "%s", C.s.err);
    rc = session_recv(&C.s, &h, buf, session_deadline(REPLY_MS), "the end of the session");
    cr_assert_eq(rc, RINGD_ECLOSED, "the session went on after an ERROR: %s", C.s.err);
    session_close(&C.s);
    /* Its local rank is free again. */
    C = connect_raw(0);
    expect_result(&C, send_barrier(&C), 0, NULL);
}

/* ---- order and numbering --------------------------------------------------------------------- */

Test(order, a_refused_collective_waits_for_the_answers_before_it_and_takes_no_number)
{
    raw_client a = connect_raw(0), b = connect_raw(0);
    /* a's barrier waits for b's; a's refused collective is answered after
     * it, though the daemon decided at once (the STATUS, answered at once,
     * shows it has read the refused one). */
    uint64_t first = send_barrier(&a);
    msg_collective bad = allreduce_f32;
    bad.id = a.next_id++;
    bad.dtype = RINGD_INT32;
    bad.wire = RINGD_WIRE_BFLOAT16;
    send_collective(&a, &bad);
    expect_status(&a, send_status_req(&a));
    uint64_t b_first = send_barrier(&b);
    expect_result(&b, b_first, 0, NULL);
    expect_result(&a, first, 0, NULL);
    expect_result(&a, bad.id, RINGD_EINVAL, "narrow wire_dtype");
    /* Each rank's next collective is the host's next: the refused one was
     * none. */
    uint64_t second = send_barrier(&a);
    expect_result(&b, send_barrier(&b), 0, NULL);
    expect_result(&a, second, 0, NULL);
    session_close(&a.s);
    session_close(&b.s);
}
