/*
 * test_gather.c - how a host gathers its local ranks' submissions into
 * collectives (daemon/gather.c), driven without sockets: a fake engine
 * records what it is handed, and the test plays the engine's part (resets,
 * verdicts) and the ranks' (joins, submissions, buffers).
 *
 * Each test is a schedule that the chaos tests met only by chance; here it
 * happens every time.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config/config.h"
#include "daemon/engine.h"
#include "daemon/gather.h"
#include "daemon/regions.h"
#include "ringd.h"

/* ---- a fake engine: one host of two, which runs nothing itself ---- */

#define MAX_JOBS 16

typedef struct {
    engine base;
    cfg cfg;
    job *jobs[MAX_JOBS];
    int n_jobs;
} fake_engine;

static void fake_submit(engine *e, job *j)
{
    fake_engine *f = (fake_engine *)e;
    cr_assert_lt(f->n_jobs, MAX_JOBS);
    f->jobs[f->n_jobs++] = j;
}

static void fake_view(const engine *e, engine_view *out)
{
    const fake_engine *f = (const fake_engine *)e;
    *out = (engine_view){.hosts = &f->cfg, .me = 0, .members_epoch = 0, .resize_why = ""};
}

static void fake_submitted(engine *e, uint64_t top)
{
    (void)e;
    (void)top;
}

static void fake_why_waiting(const engine *e, char *out, size_t len)
{
    (void)e;
    snprintf(out, len, "the ring is not formed (test)");
}

static const engine_ops fake_ops = {.submit = fake_submit,
                                    .submitted = fake_submitted,
                                    .why_waiting = fake_why_waiting,
                                    .view = fake_view};

/* ---- the ranks' side: replies as the sessions would get them ---- */

#define MAX_REPLIES 16

typedef struct {
    void *s;
    uint64_t id;
    int status;
    char text[MSG_MAX_TEXT + 1];
    int timed; /* t holds how it went (a success) */
    gather_timing t;
} reply;

static reply replies[MAX_REPLIES];
static int n_replies;

static void on_reply(void *s, uint64_t id, int status, const char *text, const gather_timing *t)
{
    cr_assert_lt(n_replies, MAX_REPLIES);
    replies[n_replies++] = (reply){.s = s, .id = id, .status = status, .timed = t != NULL};
    if (t) replies[n_replies - 1].t = *t;
    snprintf(replies[n_replies - 1].text, sizeof replies[0].text, "%s", text ? text : "");
}

static const reply *reply_to(void *s, uint64_t id)
{
    for (int i = 0; i < n_replies; i++)
        if (replies[i].s == s && replies[i].id == id) return &replies[i];
    return NULL;
}

static uv_loop_t loop;
static fake_engine fe;
static gather *g;
static char err[256];

static void setup(void)
{
    static const char yaml[] = "cluster: t\n"
                               "local_clients: 2\n"
                               "collective_timeout: 1s\n"
                               "hosts:\n"
                               "  - {name: h0, address: \"127.0.0.1:7701\"}\n"
                               "  - {name: h1, address: \"127.0.0.1:7702\"}\n";
    cr_assert_eq(cfg_parse("t.yaml", yaml, strlen(yaml), &fe.cfg, err, sizeof err), 0, "%s", err);
    fe.base.ops = &fake_ops;
    fe.n_jobs = 0;
    n_replies = 0;
    uv_loop_init(&loop);
    g = gather_new(&loop, &fe.cfg, 0, &fe.base, on_reply);
    cr_assert_not_null(g);
}

static void teardown(void)
{
    gather_close(g, RINGD_ESHUTDOWN, "test over");
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    cfg_free(&fe.cfg);
}

TestSuite(gather, .init = setup, .fini = teardown, .timeout = 30);

/* A session's shared memory, as a client makes it: a sealed memfd. */
static region *shared_region(region_set *set, uint32_t id)
{
    int fd = memfd_create("test", MFD_ALLOW_SEALING);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, 4096), 0);
    cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
    char why[128];
    cr_assert_eq(regions_add(set, id, 4096, fd, why, sizeof why), 0, "%s", why);
    return regions_find(set, id);
}

/* An allreduce of 4 int64 on buf, timing out after timeout_ms. */
static msg_collective allreduce(uint32_t timeout_ms)
{
    return (msg_collective){.kind = MSG_COLL_ALLREDUCE,
                            .dtype = RINGD_INT64,
                            .op = RINGD_SUM,
                            .count = 4,
                            .timeout_ms = timeout_ms};
}

/* The ring settles the old epoch (nothing of it submitted) and is ready in
 * epoch 7. */
static void ready(void)
{
    job_verdict v = {.epoch = 0,
                     .code = RINGD_ERING,
                     .fail_seq = FRAME_NO_SEQ,
                     .reason = "the ring was reset",
                     .ready = 1,
                     .next_epoch = 7};
    gather_settled(g, &v);
}

/* Runs the loop until the reply to (s, id) is there, for at most 3 s. */
static const reply *await_reply(void *s, uint64_t id)
{
    for (int i = 0; i < 300 && !reply_to(s, id); i++) {
        usleep(10000);
        uv_run(&loop, UV_RUN_NOWAIT);
    }
    return reply_to(s, id);
}

/*
 * The mixed sum of issue 22. While the ring is not ready (the next epoch's
 * start is unknown), a rank that has just connected takes its numbers from
 * the next epoch's start; its first call times out there and is answered,
 * and the process goes on to write its next call into the same buffer. The
 * other local rank, older, submits the call with the same number later.
 * When the ring is ready the two are one collective: it must fail as the
 * first rank was told, never run with a buffer whose owner was answered
 * and is writing it again.
 */
Test(gather, a_newcomers_call_answered_while_the_ring_waited_never_runs_with_a_later_one)
{
    int s0, s1; /* the sessions, by address */
    region_set set0 = {0}, set1 = {0};
    region *reg0 = shared_region(&set0, 1), *reg1 = shared_region(&set1, 1);
    gather_pos p0 = {0}, p1 = {0};

    gather_join(g, &p0); /* the first epoch's start is not known yet: both are newcomers */
    ready();
    gather_reset(g); /* a reset: limbo again */
    gather_join(g, &p1);

    msg_collective m = allreduce(100);
    gather_submit(g, &s1, 1, &p1, 1, reg1, reg1->base, &m);
    const reply *r1 = await_reply(&s1, 1);
    cr_assert_not_null(r1, "the newcomer's call is answered at its deadline");
    cr_assert_eq(r1->status, RINGD_ETIMEDOUT, "%s", r1->text);

    /* The older rank's call of the same number, after that answer. */
    m = allreduce(60000);
    gather_submit(g, &s0, 0, &p0, 1, reg0, reg0->base, &m);
    cr_assert_null(reply_to(&s0, 1));

    ready();
    for (int i = 0; i < fe.n_jobs; i++) {
        job *j = fe.jobs[i];
        cr_assert_neq(j->preset_status, 0,
                      "a collective ran with the buffer of a rank already answered for it");
        j->done(j, j->preset_status, j->preset_message);
    }
    const reply *r0 = reply_to(&s0, 1);
    cr_assert_not_null(r0, "the older rank's call ends too");
    cr_assert_eq(r0->status, r1->status, "one outcome for both ranks: %s / %s", r0->text,
                 r1->text);
    cr_assert_str_eq(r0->text, r1->text);
    regions_clear(&set0);
    regions_clear(&set1);
}

/* The verdict of a lap that settled epoch `epoch`: done collectives of it
 * succeeded, top were submitted somewhere; how says what follows. */
static job_verdict verdict(uint32_t epoch, uint64_t done, uint64_t top, uint32_t next, int ready,
                           int passed)
{
    return (job_verdict){.epoch = epoch,
                         .done = done,
                         .code = RINGD_ETIMEDOUT,
                         .fail_seq = FRAME_NO_SEQ,
                         .reason = "a rank was late",
                         .top = top,
                         .ready = ready,
                         .passed = passed,
                         .next_epoch = next};
}

/* Submits local rank `rank`'s next call until one is handed to the engine;
 * returns how many were answered at once (they failed without running). */
static int submit_until_handed(void *s, int rank, gather_pos *pos, region *reg, uint64_t *id)
{
    int answered = 0;
    msg_collective m = allreduce(60000);
    for (int i = 0; i < 20; i++) {
        uint64_t at = pos->next;
        gather_submit(g, s, rank, pos, ++*id, reg, reg->base, &m);
        const reply *r = reply_to(s, *id);
        if (!r) return pos->next == at + 1 ? answered : -1;
        cr_assert_neq(r->status, 0, "a call answered OK without running");
        answered++;
    }
    return -1;
}

/*
 * A host that missed the CONFIRM of epoch 8 (it went round with the host on
 * its lap, and was lost on the link into it) settles it late, from the
 * next lap, before that lap's own verdict: its ranks' calls then start the
 * next epoch at the same index as every other host's (7, here: epoch 7 had
 * 5 calls submitted somewhere, epoch 8 had 2), never at the older base.
 */
Test(gather, a_host_that_missed_a_confirm_starts_the_next_epoch_where_the_others_do)
{
    int s0, s1;
    region_set set0 = {0}, set1 = {0};
    region *reg0 = shared_region(&set0, 1), *reg1 = shared_region(&set1, 1);
    gather_pos p0 = {0}, p1 = {0};
    uint64_t id0 = 0, id1 = 0;
    gather_join(g, &p0);
    gather_join(g, &p1);
    job_verdict v = verdict(0, 0, 0, 7, 1, 0);
    gather_settled(g, &v);
    /* Epoch 7: three calls run and succeed here. */
    msg_collective m = allreduce(60000);
    for (int k = 0; k < 3; k++) {
        gather_submit(g, &s0, 0, &p0, ++id0, reg0, reg0->base, &m);
        gather_submit(g, &s1, 1, &p1, ++id1, reg1, reg1->base, &m);
    }
    cr_assert_eq(fe.n_jobs, 3);
    for (int k = 0; k < 3; k++)
        fe.jobs[k]->done(fe.jobs[k], 0, NULL);
    gather_reset(g); /* epoch 8's lap (a RESET) passes this host */
    /* The lost CONFIRM of 8 (epoch 7: 3 done, 5 submitted somewhere),
     * then the verdict of the lap that ended 8 (nothing done, 2 submitted). */
    v = verdict(7, 3, 5, 8, 0, 1);
    gather_settled(g, &v);
    v = verdict(8, 0, 2, 9, 1, 0);
    gather_settled(g, &v);
    /* Calls 3..6 were numbered in 7 and 8 elsewhere and failed there. */
    cr_assert_eq(submit_until_handed(&s0, 0, &p0, reg0, &id0), 4);
    cr_assert_eq(submit_until_handed(&s1, 1, &p1, reg1, &id1), 4);
    cr_assert_eq(fe.n_jobs, 4, "call 7 is epoch 9's first, on both ranks");
    cr_assert_eq(p0.next, 8);
    fe.jobs[3]->done(fe.jobs[3], 0, NULL);
    regions_clear(&set0);
    regions_clear(&set1);
}

/*
 * A host cut off from the ring while the others settled its epoch (7) and
 * then ran another (8): the lap that takes it back settles 8, resized, and
 * says nothing of 7. Rank 0's call of epoch 7, set aside at the reset while
 * rank 1 had not submitted it, ended on the other hosts in words this host
 * never heard: "outcome unknown", never the words of the resize that took
 * it back. A host that heard 7's verdict answers with the resize's.
 */
static const reply *call_across_a_resize(uint32_t settles)
{
    int s0;
    region_set set0 = {0};
    region *reg0 = shared_region(&set0, 1);
    gather_pos p0 = {0}, p1 = {0};
    gather_join(g, &p0);
    gather_join(g, &p1);
    job_verdict v = verdict(0, 0, 0, 7, 1, 0);
    gather_settled(g, &v);
    msg_collective m = allreduce(60000);
    gather_submit(g, &s0, 0, &p0, 1, reg0, reg0->base, &m);
    gather_reset(g);
    v = verdict(settles, 0, 1, 9, 1, 0);
    v.code = RINGD_ERESIZED;
    v.reason = "ring resized to 3 hosts (3 ranks): back: h1";
    v.resized = 1;
    gather_settled(g, &v);
    regions_clear(&set0);
    return reply_to(&s0, 1);
}

Test(gather, a_call_of_an_epoch_whose_verdict_went_round_without_this_host_is_outcome_unknown)
{
    const reply *r = call_across_a_resize(8);
    cr_assert_not_null(r);
    cr_assert_eq(r->status, RINGD_ERING, "%s: %s", ringd_errname(r->status), r->text);
    cr_assert(strstr(r->text, "outcome unknown: this host was out of the ring"), "%s", r->text);
    cr_assert_null(strstr(r->text, "resized"), "%s", r->text);
}

Test(gather, a_call_of_the_epoch_a_resize_settles_fails_with_the_resize)
{
    const reply *r = call_across_a_resize(7);
    cr_assert_not_null(r);
    cr_assert_eq(r->status, RINGD_ERESIZED, "%s: %s", ringd_errname(r->status), r->text);
    cr_assert_str_eq(r->text, "allreduce failed: ring resized to 3 hosts (3 ranks): back: h1");
}

/*
 * The mixed sum the stress test found next (an OK result holding nothing
 * but the rank's own input). A rank's call times out while the ring waits
 * for the other local rank to connect, and keeps its place, failed; the
 * other rank connects and, once the ring is ready, makes its call of that
 * number after the failed collective was handed to the engine. It must get
 * the failure the first rank got, never a success that nothing computed.
 */
Test(gather, a_late_rank_gets_the_failure_of_a_collective_handed_over_failed_never_ok)
{
    int s0, s1;
    region_set set0 = {0}, set1 = {0};
    region *reg0 = shared_region(&set0, 1), *reg1 = shared_region(&set1, 1);
    gather_pos p0 = {0}, p1 = {0};
    gather_join(g, &p0); /* the daemon has just started: no epoch yet */
    msg_collective m = allreduce(100);
    gather_submit(g, &s0, 0, &p0, 1, reg0, reg0->base, &m);
    const reply *r0 = await_reply(&s0, 1);
    cr_assert_not_null(r0, "answered at its deadline, local rank 1 never came");
    cr_assert_eq(r0->status, RINGD_ETIMEDOUT, "%s", r0->text);
    gather_join(g, &p1);
    ready();
    cr_assert_eq(fe.n_jobs, 1, "handed over failed, so that every host fails it");
    cr_assert_neq(fe.jobs[0]->preset_status, 0);
    m = allreduce(60000);
    gather_submit(g, &s1, 1, &p1, 1, reg1, reg1->base, &m);
    const reply *r1 = reply_to(&s1, 1);
    cr_assert_not_null(r1, "answered at once: the collective failed without it");
    cr_assert_eq(r1->status, r0->status, "%s: %s", ringd_errname(r1->status), r1->text);
    cr_assert_str_eq(r1->text, r0->text);
    fe.jobs[0]->done(fe.jobs[0], fe.jobs[0]->preset_status, fe.jobs[0]->preset_message);
    regions_clear(&set0);
    regions_clear(&set1);
}

/* Both local ranks submit one allreduce, rank 1 20 ms after rank 0, and
 * the engine starts it lag_us after that and completes it as t says;
 * returns the job. */
static job *run_one_lagged(region *reg0, region *reg1, const job_timing *t, uint64_t *submitted1,
                           useconds_t lag_us)
{
    static int s0, s1;
    gather_pos p0 = {0}, p1 = {0};
    gather_join(g, &p0);
    gather_join(g, &p1);
    ready();
    msg_collective m = allreduce(60000);
    gather_submit(g, &s0, 0, &p0, 1, reg0, reg0->base, &m);
    usleep(20000);
    *submitted1 = uv_hrtime();
    gather_submit(g, &s1, 1, &p1, 1, reg1, reg1->base, &m);
    cr_assert_eq(fe.n_jobs, 1);
    job *j = fe.jobs[0];
    j->t = *t;
    if (lag_us) usleep(lag_us);
    j->t.start_ns = uv_hrtime();
    j->done(j, 0, NULL);
    cr_assert_eq(n_replies, 2);
    return j;
}

static job *run_one(region *reg0, region *reg1, const job_timing *t, uint64_t *submitted1)
{
    return run_one_lagged(reg0, reg1, t, submitted1, 0);
}

Test(gather, a_success_tells_each_rank_when_the_last_rank_of_the_ring_came)
{
    region_set set0 = {0}, set1 = {0};
    region *reg0 = shared_region(&set0, 1), *reg1 = shared_region(&set1, 1);
    uint64_t submitted1;
    /* Another host started 30 ms after this one. */
    job_timing t = {.offsets = 1, .latest_us = 30000, .early_us = 0};
    run_one(reg0, reg1, &t, &submitted1);
    for (int i = 0; i < 2; i++) {
        cr_assert(replies[i].timed);
        cr_assert_eq(replies[i].t.late_ns, 0, "another host came last");
    }
    uint64_t last = replies[0].t.last_ns;
    cr_assert_eq(replies[1].t.last_ns, last);
    cr_assert_geq(last, submitted1 + 30000000ull, "the other host's start, not this one's");
    regions_clear(&set0);
    regions_clear(&set1);
}

Test(gather, the_last_local_rank_of_the_last_host_is_named_late)
{
    region_set set0 = {0}, set1 = {0};
    region *reg0 = shared_region(&set0, 1), *reg1 = shared_region(&set1, 1);
    uint64_t submitted1;
    /* This host came last, 50 ms after the first host. */
    job_timing t = {.offsets = 1, .latest_us = -50000, .early_us = 50000};
    run_one(reg0, reg1, &t, &submitted1);
    cr_assert_eq(replies[0].t.late_ns == 0, replies[1].t.late_ns != 0, "one rank came last");
    const reply *late = replies[0].t.late_ns ? &replies[0] : &replies[1];
    /* From the first host's start, 50 ms before this host's (which is
     * after its last rank's submission, by the time the test takes). */
    cr_assert_geq(late->t.late_ns, 45000000ull);
    cr_assert_lt(late->t.late_ns, 1000000000ull);
    cr_assert_geq(late->t.last_ns, submitted1, "the last rank of the ring is this host's last");
    regions_clear(&set0);
    regions_clear(&set1);
}

Test(gather, a_start_this_host_delayed_itself_is_no_rank_s_wait)
{
    region_set set0 = {0}, set1 = {0};
    region *reg0 = shared_region(&set0, 1), *reg1 = shared_region(&set1, 1);
    uint64_t submitted1;
    /* This host started 100 ms after its last rank's submission (its loop
     * was busy), the other host 150 ms before that start: the rank was the
     * last of the ring and waited for nobody. */
    job_timing t = {.offsets = 1, .latest_us = -150000, .early_us = 150000};
    run_one_lagged(reg0, reg1, &t, &submitted1, 100000);
    const reply *late = replies[0].t.late_ns ? &replies[0] : &replies[1];
    cr_assert_geq(late->t.last_ns, submitted1);
    cr_assert_lt(late->t.last_ns, submitted1 + 50000000ull,
                 "the last submission is rank 1's, not this host's late start");
    regions_clear(&set0);
    regions_clear(&set1);
}

Test(gather, without_other_hosts_starts_only_the_local_ranks_count)
{
    region_set set0 = {0}, set1 = {0};
    region *reg0 = shared_region(&set0, 1), *reg1 = shared_region(&set1, 1);
    uint64_t submitted1;
    job_timing t = {0}; /* no offsets: a host alone, or a kind that carries none */
    run_one(reg0, reg1, &t, &submitted1);
    const reply *late = replies[0].t.late_ns ? &replies[0] : &replies[1];
    cr_assert_geq(late->t.late_ns, 20000000ull, "rank 1 came 20 ms after rank 0");
    cr_assert_geq(late->t.last_ns, submitted1);
    regions_clear(&set0);
    regions_clear(&set1);
}
