/*
 * test_report_frames.c - the summaries the daemons send round the ring
 * (REPORT frames) are never believed blindly. A frame-aware proxy sits on
 * the link h0 -> h1 of a ring of three and, once armed, changes h0's
 * summaries on their way: a part that claims what cannot be (a rank with
 * more time than its job had) is dropped by h1 with a log line saying why
 * and not sent on, so no host shows it, while the ring goes on; a part that
 * does not decode (more ranks than a part holds) closes the link like any
 * malformed frame, and the ring re-forms and goes on.
 */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "proto/frame.h"
#include "ringd.h"
#include "tests/harness/frame_proxy.h"
#include "tests/harness/harness.h"

#define N 3
#define CALLS 30   /* per rank, 100 ms apart: summaries go round meanwhile */
#define LAST_OK 5  /* the last calls must succeed: the ring went on */
#define LIFE 79    /* in a REPORT body: the first rank's life.compute_us */
#define N_RANKS 69 /* ... and the part's number of ranks */

static harness H;

static void setup(void)
{
    harness_reset(&H);
}

static void teardown(void)
{
    harness_cleanup(&H);
}

TestSuite(report_frames, .init = setup, .fini = teardown, .timeout = 300);

typedef enum { LIE, MALFORMED } change;

typedef struct {
    change what;
    atomic_int changed;
} tamper;

/* h0's own summaries (host 0): the others' only pass through h0. */
static int on_frame(void *arg, uint8_t *f, size_t len)
{
    tamper *t = arg;
    if (len < FRAME_HEADER_SIZE + 70 || f[5] != FRAME_REPORT) return HARNESS_FRAME_PASS;
    uint8_t *body = f + FRAME_HEADER_SIZE;
    if (body[0] || body[1] || body[2] || body[3]) return HARNESS_FRAME_PASS;
    if (t->what == LIE) {
        body[LIFE] = 0x7f; /* 2^62 us of compute */
        atomic_fetch_add(&t->changed, 1);
    } else if (atomic_load(&t->changed) == 0) {
        body[N_RANKS] = SUMMARY_MAX_RANKS + 1;
        atomic_fetch_add(&t->changed, 1);
    }
    return HARNESS_FRAME_PASS;
}

typedef struct {
    int rc[N][CALLS];
} calls;

static int rank_thread(int idx, void *arg)
{
    calls *c = arg;
    ringd_client *cl;
    if (ringd_connect(H.d[idx].socket, &cl) < 0) return -1;
    float buf[16] = {0};
    for (int k = 0; k < CALLS; k++) {
        c->rc[idx][k] = ringd_allreduce(cl, buf, 16, RINGD_FLOAT32, RINGD_SUM);
        harness_sleep_ms(100);
    }
    ringd_close(cl);
    return 0;
}

/* Runs a rank on each host with h0's right link through the proxy. */
static void run(tamper *t, calls *c)
{
    cr_assert_eq(harness_init(&H, N, "collective_timeout: 10s\n"), 0, "%s", H.err);
    harness_frame_proxy p;
    cr_assert_eq(harness_frame_proxy_start(&p, H.d[1].port, on_frame, t), 0);
    cr_assert_eq(harness_start_through(&H, 0, p.port), 0, "%s", H.err);
    int rc = harness_run_threads(&H, N, rank_thread, c, 120000);
    harness_frame_proxy_stop(&p);
    cr_assert_eq(rc, 0, "a rank could not connect");
    for (int r = 0; r < N; r++)
        for (int k = CALLS - LAST_OK; k < CALLS; k++)
            cr_expect_eq(c->rc[r][k], 0, "rank %d call %d: %s: the ring did not go on", r, k,
                         ringd_errname(c->rc[r][k]));
}

/* ringctl report --json at host i, into out. */
static void report_json(int i, char *out, size_t len)
{
    char *argv[] = {RINGCTL_BIN, "--socket", H.d[i].socket, "report", "--json", NULL};
    int status;
    cr_assert_eq(harness_run(&H, argv, 20000, &status, out, len, NULL, 0), 0, "%s", H.err);
    cr_assert_eq(status, 0, "ringctl report failed: %s", out);
}

Test(report_frames, a_summary_that_claims_what_cannot_be_is_dropped_with_a_reason)
{
    static tamper t = {.what = LIE};
    static calls c;
    run(&t, &c);
    cr_assert_gt(atomic_load(&t.changed), 0, "h0 sent no summary");
    cr_assert_eq(harness_wait_log(&H, 1,
                                  "dropped a summary (REPORT frame) from the left neighbour: local "
                                  "rank 0: ",
                                  5000),
                 0, "h1 logged no reason");
    cr_assert_eq(harness_wait_log(&H, 1, "accounted in a job of", 1000), 0);
    /* Not sent on: h2 never heard of h0's ranks; but of h1's, through h1. */
    static char out[65536];
    report_json(2, out, sizeof out);
    cr_assert_not_null(strstr(out, "{\"host\": \"h0\", \"index\": 0, \"reported\": false}"), "%s",
                       out);
    cr_assert_not_null(strstr(out, "{\"host\": \"h1\", \"index\": 1, \"reported\": true"), "%s",
                       out);
    for (int r = 0; r < N; r++)
        for (int k = 0; k < CALLS; k++)
            cr_expect_eq(c.rc[r][k], 0, "rank %d call %d: %s: a dropped summary broke a call", r, k,
                         ringd_errname(c.rc[r][k]));
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

Test(report_frames, a_malformed_summary_closes_the_link_and_the_ring_re_forms)
{
    static tamper t = {.what = MALFORMED};
    static calls c;
    run(&t, &c);
    cr_assert_eq(atomic_load(&t.changed), 1);
    cr_assert_eq(harness_wait_log(&H, 1, "malformed REPORT frame", 5000), 0,
                 "h1 did not say why it closed the link");
    /* Later summaries of h0 went round: h2 shows its rank. */
    static char out[65536];
    report_json(2, out, sizeof out);
    cr_assert_not_null(strstr(out, "{\"host\": \"h0\", \"index\": 0, \"reported\": true"), "%s",
                       out);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}
