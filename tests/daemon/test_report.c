/*
 * test_report.c - the summaries of the ring (daemon/report.c): what a host
 * keeps and sends on of the others' summaries, what it drops and why, and
 * what it answers a REPORT_REQ with. Driven without sockets: the owner's
 * send is recorded.
 */
#include <criterion/criterion.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "daemon/report.h"
#include "ringd.h"

static uv_loop_t loop;
static cfg c;
static report *rep;
static summary_part sent[8];
static int n_sent;
static msg_report answers[8];
static int n_answers;

static void on_send(void *data, const summary_part *p)
{
    (void)data;
    cr_assert_lt(n_sent, 8);
    sent[n_sent++] = *p;
}

static int first_rank(void *data)
{
    (void)data;
    return 0;
}

static void on_answer(void *data, const msg_report *m)
{
    (void)data;
    cr_assert_lt(n_answers, 8);
    answers[n_answers++] = *m;
}

static void setup(void)
{
    /* h0 (this host, 2 ranks), h1 (10 ranks: two parts), h2 (1 rank). */
    static const char yaml[] = "cluster: t\n"
                               "local_clients: 2\n"
                               "hosts:\n"
                               "  - {name: h0, address: \"127.0.0.1:7701\"}\n"
                               "  - {name: h1, address: \"127.0.0.1:7702\", local_clients: 10}\n"
                               "  - {name: h2, address: \"127.0.0.1:7703\", local_clients: 1}\n";
    char err[256];
    cr_assert_eq(cfg_parse("t.yaml", yaml, strlen(yaml), &c, err, sizeof err), 0, "%s", err);
    uv_loop_init(&loop);
    static const report_ops ops = {on_send, first_rank};
    cr_assert_eq(report_new(&rep, &loop, &c, 0, &ops, NULL), 0);
    n_sent = n_answers = 0;
}

static void teardown(void)
{
    report_close(rep);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    cfg_free(&c);
}

TestSuite(report, .init = setup, .fini = teardown, .timeout = 30);

/* Part `part` of host h2's (or h1's) summary, version v. */
static summary_part part_of(int host, int part, uint64_t version)
{
    summary_part p;
    memset(&p, 0, sizeof p);
    p.host = (uint32_t)host;
    p.local_size = (uint16_t)c.hosts[host].local_clients;
    p.parts = (uint16_t)summary_parts(p.local_size);
    p.part = (uint16_t)part;
    p.first = (uint16_t)(part * SUMMARY_MAX_RANKS);
    int left = p.local_size - p.first;
    p.n = (uint8_t)(left < SUMMARY_MAX_RANKS ? left : SUMMARY_MAX_RANKS);
    p.boot_us = 1000;
    p.version = version;
    p.at_us = 5000000;
    p.job_us = 2000000;
    p.window_ms = 60000;
    for (int i = 0; i < p.n; i++) {
        p.ranks[i].rank = cfg_first_rank(&c, (size_t)host) + p.first + i;
        p.ranks[i].life.compute_us = 1000000;
    }
    return p;
}

static int receive(const summary_part *p, char *why, size_t len)
{
    why[0] = '\0';
    return report_receive(rep, p, why, len);
}

Test(report, keeps_and_sends_on_a_newer_summary_only)
{
    char why[256];
    summary_part p = part_of(2, 0, 5);
    cr_assert_eq(receive(&p, why, sizeof why), 1, "%s", why);
    cr_assert_eq(n_sent, 1);
    cr_assert_eq(sent[0].version, 5);
    cr_assert_eq(receive(&p, why, sizeof why), 0, "the same again stops here");
    p.version = 4;
    cr_assert_eq(receive(&p, why, sizeof why), 0, "an older one too");
    p.boot_us = 2000; /* the daemon restarted: its versions count again */
    p.version = 1;
    cr_assert_eq(receive(&p, why, sizeof why), 1);
    cr_assert_eq(n_sent, 2);
}

Test(report, its_own_summary_come_round_stops)
{
    char why[256];
    summary_part p = part_of(0, 0, 99);
    cr_assert_eq(receive(&p, why, sizeof why), 0);
    cr_assert_eq(n_sent, 0);
}

Test(report, drops_what_does_not_fit_this_configuration_and_says_why)
{
    char why[256];
    summary_part p = part_of(2, 0, 1);
    p.host = 3;
    cr_assert_eq(receive(&p, why, sizeof why), -1);
    cr_assert(strstr(why, "host #3 is not in this configuration (3 hosts)"), "%s", why);

    p = part_of(2, 0, 1);
    p.local_size = 2; /* h2 has 1 rank here */
    p.n = 2;
    p.ranks[1].rank = 13;
    cr_assert_eq(receive(&p, why, sizeof why), -1);
    cr_assert(strstr(why, "host h2: 2 local ranks, 1 in this configuration"), "%s", why);

    p = part_of(2, 0, 1);
    p.ranks[0].rank = 13; /* 2 + 10 + 1 ranks: 0..12 */
    cr_assert_eq(receive(&p, why, sizeof why), -1);
    cr_assert(strstr(why, "rank 13 of a ring of 13 ranks"), "%s", why);

    p = part_of(2, 0, 1);
    p.ranks[0].life.compute_us = 5000000; /* in a job of 3 s */
    cr_assert_eq(receive(&p, why, sizeof why), -1);
    cr_assert(strstr(why, "accounted in a job of"), "%s", why);
    cr_assert_eq(n_sent, 0, "nothing dropped goes on");
}

Test(report, answers_with_every_host_in_ring_order)
{
    char why[256];
    summary_part p = part_of(1, 1, 3); /* h1's second part only */
    cr_assert_eq(receive(&p, why, sizeof why), 1, "%s", why);
    report_answer(rep, 77, on_answer, NULL);
    /* h0: its one part, made now; h1: the part it has; h2: its name only. */
    cr_assert_eq(n_answers, 3);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(answers[i].id, 77);
        cr_assert_eq(answers[i].index, (uint32_t)i);
        cr_assert_eq(answers[i].count, 3);
        cr_assert_eq(answers[i].n_hosts, 3);
        cr_assert_eq(answers[i].me, 0);
        cr_assert_str_eq(answers[i].cluster, "t");
    }
    cr_assert_str_eq(answers[0].host, "h0");
    cr_assert_eq(answers[0].flags, MSG_REPORT_HAS_PART);
    cr_assert_eq(answers[0].part.local_size, 2);
    char reason[256];
    cr_assert_eq(summary_check(&answers[0].part, reason, sizeof reason), 0, "%s", reason);
    cr_assert_str_eq(answers[1].host, "h1");
    cr_assert_eq(answers[1].part.part, 1);
    cr_assert_eq(answers[1].host_index, 1);
    cr_assert_str_eq(answers[2].host, "h2");
    cr_assert_eq(answers[2].flags, 0);
}

Test(report, its_own_summary_has_what_its_ranks_did)
{
    /* The "rank" is this process: it has used some CPU time, 50 ms of it
     * (CPU time, not wall time: on a busy machine 30 ms of wall time may be
     * less than the clock tick /proc counts in). */
    struct timespec cpu;
    do {
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
    } while (cpu.tv_sec == 0 && cpu.tv_nsec < 50000000);
    report_connect(rep, 1, (uint32_t)getpid());
    usleep(20000);
    report_submit(rep, 1, RINGD_COLL_ALLREDUCE);
    usleep(10000);
    account_call call = {.last_ns = uv_hrtime(), .bytes = 4096, .kind = RINGD_COLL_ALLREDUCE};
    usleep(10000);
    report_result(rep, 1, &call);
    summary_part p;
    report_build(rep, 0, &p);
    char why[256];
    cr_assert_eq(summary_check(&p, why, sizeof why), 0, "%s", why);
    cr_assert_eq(p.host, 0);
    cr_assert_neq(p.job_us, 0);
    cr_assert_eq(p.energy, SUMMARY_ENERGY_ESTIMATED, "no RAPL in the test");
    cr_assert_eq(p.watts_mw, 10000, "the default watts_per_core");
    cr_assert_eq(p.ranks[0].rank, -1, "local rank 0 never connected");
    const summary_rank *k = &p.ranks[1];
    cr_assert_eq(k->rank, 1);
    cr_assert_eq(k->pid, (uint32_t)getpid());
    cr_assert_eq(k->flags, SUMMARY_RANK_CONNECTED);
    cr_assert_geq(k->life.compute_us, 20000);
    cr_assert_geq(k->life.wait_us, 10000);
    cr_assert_geq(k->life.transfer_us, 10000);
    cr_assert_eq(k->life.calls, 1);
    cr_assert_eq(k->life.bytes, 4096);
    cr_assert_eq(k->n_spans, 1);
    cr_assert_gt(k->cpu_us, 0, "this process's CPU time, from /proc");
    report_disconnect(rep, 1);
    cr_assert_eq(n_sent, 1, "the last rank leaving sends the summary at once");
}

Test(report, counts_every_rank_for_the_metrics)
{
    report_connect(rep, 0, (uint32_t)getpid());
    usleep(10000);
    report_totals t;
    report_get_totals(rep, &t);
    cr_assert_eq(t.n, 2);
    cr_assert_eq(t.ranks[0].rank, 0);
    cr_assert_eq(t.ranks[1].rank, 1);
    cr_assert_geq(t.ranks[0].compute_s, 0.01);
    cr_assert_eq(t.energy, SUMMARY_ENERGY_ESTIMATED);
    cr_assert_gt(t.daemon_cpu_s, 0);
}

Test(report, a_rank_back_while_other_hosts_fail_for_it_continues_the_job)
{
    report_connect(rep, 0, (uint32_t)getpid());
    summary_part before;
    report_build(rep, 0, &before);
    report_disconnect(rep, 0); /* between calls: nothing failed here */
    /* h2's rank fails its calls for want of it. */
    summary_part p = part_of(2, 0, 1);
    p.ranks[0].flags = SUMMARY_RANK_CONNECTED | SUMMARY_RANK_FAILING;
    char why[256];
    cr_assert_eq(receive(&p, why, sizeof why), 1, "%s", why);
    usleep(20000);
    report_connect(rep, 0, (uint32_t)getpid());
    summary_part after;
    report_build(rep, 0, &after);
    cr_assert_eq(after.job_us, before.job_us, "the same job");
    cr_assert_geq(after.ranks[0].life.failure_us, 20000, "the time without a process");
    cr_assert(after.ranks[0].flags & SUMMARY_RANK_FAILING);
}
