/*
 * test_summary.c - a host's summary (proto/summary.h) and the frame and
 * message that carry it (REPORT in frame.h and msg.h), as WIRE.md
 * specifies them: the layout, the limits, and what a part must say of
 * itself to be believed.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "proto/frame.h"
#include "proto/msg.h"
#include "proto/summary.h"

#define JOB_US 1000000000000000ull /* a Unix time, microseconds */

/* Part 0 of a host of 3 local ranks, 10 s into its job: each rank with
 * figures that fit, and two spans. */
static summary_part good(void)
{
    summary_part p;
    memset(&p, 0, sizeof p);
    p.host = 2;
    p.part = 0;
    p.parts = 1;
    p.boot_us = JOB_US - 5000000;
    p.version = 7;
    p.job_us = JOB_US;
    p.at_us = JOB_US + 10000000;
    p.window_ms = 60000;
    p.energy = SUMMARY_ENERGY_ESTIMATED;
    p.watts_mw = 10000;
    p.local_size = 3;
    p.first = 0;
    p.n = 3;
    for (int i = 0; i < 3; i++) {
        summary_rank *k = &p.ranks[i];
        k->rank = 6 + i;
        k->pid = 100 + (uint32_t)i;
        k->flags = SUMMARY_RANK_CONNECTED;
        k->life = (summary_times){.compute_us = 6000000,
                                  .wait_us = 2000000,
                                  .transfer_us = 1000000,
                                  .failure_us = 500000,
                                  .calls = 100,
                                  .failed = 1,
                                  .bytes = 4000};
        k->window = k->life;
        k->late_us = 1000;
        k->late_calls = 1;
        k->n_spans = 2;
        k->spans[0] =
            (summary_span){.start_us = JOB_US + 100, .dur_us = 50, .wait_us = 40, .kind = 1};
        k->spans[1] = (summary_span){
            .start_us = JOB_US + 200, .dur_us = 50, .kind = 5, .flags = SUMMARY_SPAN_FAILED};
    }
    return p;
}

static void expect_refused(const summary_part *p, const char *why_has)
{
    char why[256] = "";
    cr_expect_eq(summary_check(p, why, sizeof why), -1, "accepted, wanted \"%s\"", why_has);
    cr_expect(strstr(why, why_has) != NULL, "reason \"%s\" does not say \"%s\"", why, why_has);
}

Test(summary, accepts_a_part_that_keeps_the_rules)
{
    summary_part p = good();
    char why[256] = "";
    cr_assert_eq(summary_check(&p, why, sizeof why), 0, "%s", why);
}

Test(summary, a_part_must_be_where_its_host_has_it)
{
    summary_part p = good();
    p.parts = 2;
    expect_refused(&p, "2 parts for 3 local ranks");
    p = good();
    p.n = 2;
    expect_refused(&p, "holds local ranks 0..1 of 3");
    p = good();
    p.local_size = 9; /* two parts, of which this would be the first of 8 */
    p.parts = 2;
    expect_refused(&p, "holds local ranks 0..2 of 9");
    p = good();
    p.part = 1;
    expect_refused(&p, "part 1 of 1");
    p = good();
    p.local_size = 0;
    expect_refused(&p, "0 local ranks");
}

Test(summary, needs_a_version_and_a_job_before_it_was_made)
{
    summary_part p = good();
    p.version = 0;
    expect_refused(&p, "no boot time or version");
    p = good();
    p.job_us = p.at_us + 1;
    expect_refused(&p, "a job that begins after");
    p = good();
    p.window_ms = 0;
    expect_refused(&p, "an empty window");
}

Test(summary, energy_says_where_it_comes_from)
{
    summary_part p = good();
    p.energy = 3;
    expect_refused(&p, "energy source 3");
    p = good();
    p.energy = SUMMARY_ENERGY_RAPL;
    expect_refused(&p, "watts per core with energy that is not estimated");
}

Test(summary, a_rank_cannot_account_more_time_than_its_job_had)
{
    summary_part p = good();
    p.ranks[1].life.compute_us = 9000000; /* 12.5 s in a job of 10 */
    expect_refused(&p, "local rank 1: 12500000 us accounted in a job of 10000000 us");
    p = good();
    p.ranks[0].window.wait_us = 61000000;
    expect_refused(&p, "in a window of 60000 ms");
    p = good();
    p.ranks[2].life.compute_us = UINT64_MAX; /* sums must not wrap round */
    expect_refused(&p, "local rank 2");
}

Test(summary, counts_must_add_up)
{
    summary_part p = good();
    p.ranks[0].life.failed = 101;
    expect_refused(&p, "more calls failed than ended");
    p = good();
    p.ranks[0].window.calls = 101;
    expect_refused(&p, "more calls in the window");
    p = good();
    p.ranks[0].late_calls = 101;
    expect_refused(&p, "or late");
    p = good();
    p.ranks[0].rank = -2;
    expect_refused(&p, "rank -2");
    p = good();
    p.ranks[0].flags = 0x80;
    expect_refused(&p, "unknown flags 0x80");
}

Test(summary, spans_are_calls_in_order_that_waited_less_than_they_took)
{
    summary_part p = good();
    p.ranks[0].spans[0].wait_us = 51;
    expect_refused(&p, "waited longer than it ran");
    p = good();
    p.ranks[0].spans[1].start_us = JOB_US;
    expect_refused(&p, "out of order");
    p = good();
    p.ranks[0].spans[1].kind = 6;
    expect_refused(&p, "kind 6");
    p = good();
    p.ranks[0].spans[1].start_us = p.at_us + 2000000;
    expect_refused(&p, "ends after the summary was made");
}

Test(summary, newer_is_a_later_boot_or_a_later_version)
{
    summary_part a = good(), b = good();
    b.version++;
    cr_assert(summary_newer(&b, &a));
    cr_assert(!summary_newer(&a, &b));
    cr_assert(!summary_newer(&a, &a));
    a.boot_us++; /* a restarted daemon counts from 1 again */
    a.version = 1;
    cr_assert(summary_newer(&a, &b));
}

Test(summary, parts_hold_eight_ranks)
{
    cr_assert_eq(summary_parts(1), 1);
    cr_assert_eq(summary_parts(8), 1);
    cr_assert_eq(summary_parts(9), 2);
    cr_assert_eq(summary_parts(1024), SUMMARY_MAX_PARTS);
}

/* The frame */

Test(report_frame, has_the_documented_byte_layout)
{
    summary_part p;
    memset(&p, 0, sizeof p);
    p.host = 1;
    p.part = 0;
    p.parts = 1;
    p.boot_us = 0x0102030405060708u;
    p.version = 2;
    p.at_us = 3;
    p.job_us = 4;
    p.window_ms = 60000;
    p.daemon_cpu_us = 5;
    p.energy_mj = 6;
    p.energy = SUMMARY_ENERGY_ESTIMATED;
    p.watts_mw = 7;
    p.local_size = 1;
    p.n = 1;
    p.ranks[0] = (summary_rank){.rank = -1, .pid = 9, .flags = SUMMARY_RANK_FAILING, .n_spans = 1};
    p.ranks[0].life.calls = 0x11;
    p.ranks[0].window.bytes = 0x22;
    p.ranks[0].late_us = 0x33;
    p.ranks[0].late_calls = 0x44;
    p.ranks[0].cpu_us = 0x55;
    p.ranks[0].spans[0] = (summary_span){
        .start_us = 0x66, .dur_us = 0x77, .wait_us = 0x08, .kind = 1, .flags = SUMMARY_SPAN_FAILED};
    /* clang-format off */
    static const uint8_t head[] = {
        0x52, 0x47, 0x4e, 0x44, 12, FRAME_REPORT, 0, 0, 0, 0, 0, 0xea, /* 70 + 146 + 18 */
        0, 0, 0, 1,   0, 0,   0, 1,                       /* host, part, parts */
        1, 2, 3, 4, 5, 6, 7, 8,                           /* boot_us */
        0, 0, 0, 0, 0, 0, 0, 2,   0, 0, 0, 0, 0, 0, 0, 3, /* version, at_us */
        0, 0, 0, 0, 0, 0, 0, 4,   0, 0, 0xea, 0x60,       /* job_us, window_ms */
        0, 0, 0, 0, 0, 0, 0, 5,   0, 0, 0, 0, 0, 0, 0, 6, /* daemon_cpu_us, energy_mj */
        2,   0, 0, 0, 7,   0, 1,   0, 0,   1,             /* energy, watts_mw, local_size, first, n */
        0xff, 0xff, 0xff, 0xff,   0, 0, 0, 9,   2,        /* rank, pid, flags */
    };
    static const uint8_t tail[] = {
        0, 0, 0, 0, 0, 0, 0, 0x33,   0, 0, 0, 0, 0, 0, 0, 0x44, /* late_us, late_calls */
        0, 0, 0, 0, 0, 0, 0, 0x55,   1,                         /* cpu_us, n_spans */
        0, 0, 0, 0, 0, 0, 0, 0x66,   0, 0, 0, 0x77,   0, 0, 0, 8,   1,   1, /* the span */
    };
    /* clang-format on */
    uint8_t buf[FRAME_HEADER_SIZE + FRAME_MAX_REPORT_BODY];
    int n = frame_encode_report(buf, sizeof buf, &p);
    cr_assert_eq(n, FRAME_HEADER_SIZE + SUMMARY_HEAD_SIZE + SUMMARY_RANK_SIZE + SUMMARY_SPAN_SIZE);
    cr_assert_arr_eq(buf, head, sizeof head);
    /* life: calls is the fifth of its seven; window: bytes the seventh. */
    const uint8_t *times = buf + sizeof head;
    cr_assert_eq(times[4 * 8 + 7], 0x11);
    cr_assert_eq(times[7 * 8 + 6 * 8 + 7], 0x22);
    cr_assert_arr_eq(buf + n - sizeof tail, tail, sizeof tail);
    cr_assert_eq(FRAME_REPORT, 9);

    frame_header h;
    summary_part out;
    cr_assert_eq(frame_decode_header(buf, (size_t)n, &h), FRAME_OK);
    cr_assert_eq(frame_decode_report(&h, buf + FRAME_HEADER_SIZE, &out), FRAME_OK);
    cr_assert_eq(out.boot_us, p.boot_us);
    cr_assert_eq(out.ranks[0].rank, -1);
    cr_assert_eq(out.ranks[0].spans[0].flags, SUMMARY_SPAN_FAILED);
}

Test(report_frame, its_largest_part_fits_the_limit_and_more_is_refused)
{
    summary_part p = good();
    p.local_size = 8;
    p.n = SUMMARY_MAX_RANKS;
    for (int i = 0; i < SUMMARY_MAX_RANKS; i++)
        p.ranks[i].n_spans = SUMMARY_MAX_SPANS;
    uint8_t buf[FRAME_HEADER_SIZE + FRAME_MAX_REPORT_BODY];
    int n = frame_encode_report(buf, sizeof buf, &p);
    cr_assert_eq(n, FRAME_HEADER_SIZE + FRAME_MAX_REPORT_BODY);
    frame_header h;
    cr_assert_eq(frame_decode_header(buf, (size_t)n, &h), FRAME_OK);
    buf[11]++; /* one byte more than any part */
    cr_assert_eq(frame_decode_header(buf, (size_t)n, &h), FRAME_ELENGTH);
}

Test(report_frame, refuses_counts_over_their_limits)
{
    summary_part p = good(), out;
    uint8_t buf[FRAME_HEADER_SIZE + FRAME_MAX_REPORT_BODY];
    int n = frame_encode_report(buf, sizeof buf, &p);
    frame_header h;
    cr_assert_eq(frame_decode_header(buf, (size_t)n, &h), FRAME_OK);
    uint8_t *body = buf + FRAME_HEADER_SIZE;
    body[SUMMARY_HEAD_SIZE - 1] = SUMMARY_MAX_RANKS + 1; /* n */
    cr_assert_eq(frame_decode_report(&h, body, &out), FRAME_EMALFORMED);
    body[SUMMARY_HEAD_SIZE - 1] = 3;
    body[SUMMARY_HEAD_SIZE + SUMMARY_RANK_SIZE - 1] = SUMMARY_MAX_SPANS + 1; /* n_spans */
    cr_assert_eq(frame_decode_report(&h, body, &out), FRAME_EMALFORMED);
    body[SUMMARY_HEAD_SIZE + SUMMARY_RANK_SIZE - 1] = 2;
    cr_assert_eq(frame_decode_report(&h, body, &out), FRAME_OK);
}

/* The message */

Test(report_msg, carries_the_part_behind_its_host)
{
    msg_report m;
    memset(&m, 0, sizeof m);
    m.id = 5;
    m.index = 1;
    m.count = 3;
    m.n_hosts = 4;
    m.me = 0;
    m.host_index = 2;
    m.now_us = 9;
    m.flags = MSG_REPORT_HAS_PART;
    snprintf(m.cluster, sizeof m.cluster, "c");
    snprintf(m.host, sizeof m.host, "h2");
    m.part = good();
    uint8_t buf[MSG_HEADER_SIZE + MSG_MAX_BODY];
    int n = msg_encode_report(buf, sizeof buf, &m);
    cr_assert_gt(n, 0);
    /* clang-format off */
    static const uint8_t head[] = {
        0, 0, 0, 0, 0, 0, 0, 5,   0, 0, 0, 1,   0, 0, 0, 3, /* id, index, count */
        0, 0, 0, 4,   0, 0, 0, 0,   0, 0, 0, 2,             /* n_hosts, me, host_index */
        0, 0, 0, 0, 0, 0, 0, 9,   1,                        /* now_us, flags */
        0, 1, 'c',   0, 2, 'h', '2',                        /* cluster, host */
        0, 0, 0, 2,                                         /* the part: its host */
    };
    /* clang-format on */
    cr_assert_arr_eq(buf + MSG_HEADER_SIZE, head, sizeof head);
    cr_assert_eq(buf[5], MSG_REPORT);
    msg_header h;
    msg_report out;
    cr_assert_eq(msg_decode_header(buf, (size_t)n, &h), MSG_OK);
    cr_assert_eq(msg_decode_report(&h, buf + MSG_HEADER_SIZE, &out), MSG_OK);
    cr_assert_eq(out.part.ranks[2].rank, 8);

    /* A part of another host than the one named is malformed. */
    m.part.host = 3;
    n = msg_encode_report(buf, sizeof buf, &m);
    cr_assert_eq(msg_decode_header(buf, (size_t)n, &h), MSG_OK);
    cr_assert_eq(msg_decode_report(&h, buf + MSG_HEADER_SIZE, &out), MSG_EMALFORMED);
}

Test(report_msg, refuses_places_that_cannot_be)
{
    msg_report m;
    memset(&m, 0, sizeof m);
    m.count = 2;
    m.n_hosts = 2;
    uint8_t buf[MSG_HEADER_SIZE + MSG_MAX_BODY];
    msg_header h;
    msg_report out;
    struct {
        uint32_t index, count, me, host;
        uint8_t flags;
        int ok;
    } cases[] = {{1, 2, 1, 1, 0, 1}, {2, 2, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0},
                 {0, 2, 2, 0, 0, 0}, {0, 2, 0, 2, 0, 0}, {0, 2, 0, 0, 2, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        m.index = cases[i].index;
        m.count = cases[i].count;
        m.me = cases[i].me;
        m.host_index = cases[i].host;
        m.flags = cases[i].flags;
        int n = msg_encode_report(buf, sizeof buf, &m);
        cr_assert_eq(msg_decode_header(buf, (size_t)n, &h), MSG_OK);
        cr_expect_eq(msg_decode_report(&h, buf + MSG_HEADER_SIZE, &out) == MSG_OK, cases[i].ok,
                     "case %zu", i);
    }
}

Test(report_msg, a_request_is_its_id)
{
    msg_report_req in = {.id = 0x0102030405060708u}, out;
    uint8_t buf[MSG_HEADER_SIZE + MSG_MAX_BODY];
    int n = msg_encode_report_req(buf, sizeof buf, &in);
    cr_assert_eq(n, MSG_HEADER_SIZE + 8);
    cr_assert_eq(buf[5], MSG_REPORT_REQ);
    cr_assert_eq(MSG_REPORT_REQ, 12);
    msg_header h;
    cr_assert_eq(msg_decode_header(buf, (size_t)n, &h), MSG_OK);
    cr_assert_eq(msg_decode_report_req(&h, buf + MSG_HEADER_SIZE, &out), MSG_OK);
    cr_assert_eq(out.id, in.id);
}
