/*
 * test_account.c - where a rank's time goes (daemon/account.c), driven by a
 * clock of the test's own: compute between calls, wait for the last rank,
 * transfer, failure until the next success; jobs, restarts, the window.
 */
#include <criterion/criterion.h>

#include "daemon/account.h"
#include "ringd.h"

#define MS 1000000ull
#define S 1000000000ull
#define T0 (1000 * S) /* a clock that has run a while */

static account a;

static void setup(void)
{
    cr_assert_eq(account_init(&a, 2), 0);
}

static void teardown(void)
{
    account_free(&a);
}

/* A successful call of local rank lr from submit to result, the last rank
 * of the ring having submitted it at last. */
static void call(int lr, uint64_t submit, uint64_t last, uint64_t result)
{
    account_submit(&a, lr, submit, RINGD_COLL_ALLREDUCE);
    account_call c = {.last_ns = last, .bytes = 64, .kind = RINGD_COLL_ALLREDUCE};
    account_result(&a, lr, result, &c);
}

static void failed_call(int lr, uint64_t submit, uint64_t result)
{
    account_submit(&a, lr, submit, RINGD_COLL_ALLREDUCE);
    account_call c = {.status = RINGD_ETIMEDOUT, .bytes = 64, .kind = RINGD_COLL_ALLREDUCE};
    account_result(&a, lr, result, &c);
}

static account_view view(int lr, uint64_t now)
{
    account_view v;
    account_read(&a, lr, now, &v);
    return v;
}

static uint64_t sum(const account_times *t)
{
    return t->compute + t->wait + t->transfer + t->failure;
}

TestSuite(account, .init = setup, .fini = teardown);

Test(account, splits_a_call_at_the_last_ranks_submission)
{
    cr_assert_eq(account_connect(&a, 0, T0, 42, 0), 1);
    call(0, T0 + 1 * S, T0 + 1300 * MS, T0 + 1500 * MS);
    account_view v = view(0, T0 + 1500 * MS);
    cr_assert_eq(v.life.compute, 1 * S); /* connection to submission */
    cr_assert_eq(v.life.wait, 300 * MS);
    cr_assert_eq(v.life.transfer, 200 * MS);
    cr_assert_eq(v.life.failure, 0);
    cr_assert_eq(v.life.calls, 1);
    cr_assert_eq(v.life.bytes, 64);
    cr_assert_eq(v.pid, 42);
    cr_assert(v.connected && v.ever && !v.failing);
}

Test(account, a_rank_that_came_last_waits_for_nobody)
{
    account_connect(&a, 0, T0, 1, 0);
    /* The last submission was before this one's (or unknown): no wait. */
    call(0, T0 + 1 * S, T0 + 500 * MS, T0 + 1200 * MS);
    call(0, T0 + 2 * S, 0, T0 + 2100 * MS);
    account_view v = view(0, T0 + 2100 * MS);
    cr_assert_eq(v.life.wait, 0);
    cr_assert_eq(v.life.transfer, 300 * MS);
    cr_assert_eq(v.life.compute, 1800 * MS);
}

Test(account, the_kinds_add_up_to_the_time_in_the_job)
{
    account_connect(&a, 0, T0, 1, 0);
    uint64_t t = T0;
    for (int i = 0; i < 50; i++) {
        call(0, t + 10 * MS, t + 15 * MS, t + 17 * MS);
        t += 17 * MS;
    }
    failed_call(0, t + 5 * MS, t + 40 * MS);
    account_view v = view(0, t + 100 * MS); /* computing since: counts up to now */
    cr_assert_eq(sum(&v.life), 100 * MS + t - T0);
    cr_assert_eq(v.life.compute, 50 * 10 * MS + 5 * MS);
    cr_assert_eq(v.life.wait, 50 * 5 * MS);
    cr_assert_eq(v.life.transfer, 50 * 2 * MS);
    cr_assert_eq(v.life.failure, 35 * MS + 60 * MS); /* the failed call, then since */
    cr_assert_eq(v.life.calls, 51);
    cr_assert_eq(v.life.failed, 1);
    cr_assert_eq(v.life.bytes, 50 * 64);
}

Test(account, failure_runs_from_a_failed_call_to_the_next_success)
{
    account_connect(&a, 0, T0, 1, 0);
    failed_call(0, T0 + 1 * S, T0 + 3 * S); /* 2 s in the failed call */
    failed_call(0, T0 + 4 * S, T0 + 4 * S); /* refused at once */
    account_view v = view(0, T0 + 5 * S);
    cr_assert(v.failing);
    cr_assert_eq(v.life.failure, 4 * S); /* the compute between counts too */
    call(0, T0 + 6 * S, T0 + 6500 * MS, T0 + 7 * S);
    v = view(0, T0 + 8 * S);
    cr_assert(!v.failing);
    cr_assert_eq(v.life.failure, 5 * S);
    cr_assert_eq(v.life.wait, 500 * MS);
    cr_assert_eq(v.life.transfer, 500 * MS);
    cr_assert_eq(v.life.compute, 1 * S + 1 * S); /* before the failure, after the success */
}

Test(account, calls_outstanding_together_count_once)
{
    account_connect(&a, 0, T0, 1, 0);
    account_submit(&a, 0, T0 + 1 * S, RINGD_COLL_ALLREDUCE);
    account_submit(&a, 0, T0 + 1100 * MS, RINGD_COLL_ALLREDUCE);
    account_call first = {.last_ns = T0 + 1200 * MS}, second = {.last_ns = T0 + 1300 * MS};
    account_result(&a, 0, T0 + 1500 * MS, &first);
    /* The second's interval starts at the first's result, after its last
     * submission: all of it transfer. */
    account_result(&a, 0, T0 + 1700 * MS, &second);
    account_view v = view(0, T0 + 1700 * MS);
    cr_assert_eq(v.life.compute, 1 * S);
    cr_assert_eq(v.life.wait, 200 * MS);
    cr_assert_eq(v.life.transfer, 500 * MS);
    cr_assert_eq(sum(&v.life), 1700 * MS);
    cr_assert_eq(v.n_spans, 2);
    cr_assert_eq(v.spans[1].start, T0 + 1500 * MS);
}

Test(account, a_process_that_dies_in_a_call_fails_it_and_its_restart_continues_the_job)
{
    account_connect(&a, 0, T0, 1, 0);
    account_connect(&a, 1, T0, 2, 0);
    call(0, T0 + 1 * S, 0, T0 + 1100 * MS);
    account_submit(&a, 0, T0 + 2 * S, RINGD_COLL_ALLREDUCE);
    account_disconnect(&a, 0, T0 + 3 * S);
    account_disconnect(&a, 1, T0 + 3 * S); /* the whole host's ranks go */
    account_view v = view(0, T0 + 5 * S);
    cr_assert(v.failing && !v.connected);
    cr_assert_eq(v.life.failure, 1 * S + 2 * S); /* the call, then the time without a process */
    cr_assert_eq(v.life.failed, 1);
    cr_assert_eq(account_connect(&a, 0, T0 + 10 * S, 3, 0), 0, "a restart is the same job");
    v = view(0, T0 + 10 * S);
    cr_assert_eq(v.life.failure, 8 * S);
    cr_assert_eq(v.pid, 3);
    call(0, T0 + 11 * S, 0, T0 + 11 * S);
    v = view(0, T0 + 11 * S);
    cr_assert(!v.failing);
    cr_assert_eq(v.life.failure, 9 * S, "the new process computed again until it succeeded");
    cr_assert_eq(v.life.compute, 1 * S + 900 * MS);
    cr_assert_eq(a.jobs, 1);
}

Test(account, a_job_begins_when_a_rank_comes_to_a_host_none_of_whose_ranks_is_there)
{
    account_connect(&a, 0, T0, 1, 0);
    call(0, T0 + 1 * S, 0, T0 + 2 * S);
    account_disconnect(&a, 0, T0 + 3 * S); /* a clean end */
    account_view v = view(0, T0 + 100 * S);
    cr_assert_eq(v.life.compute, 2 * S, "no process, no time");
    cr_assert_eq(account_connect(&a, 0, T0 + 200 * S, 2, 0), 1);
    v = view(0, T0 + 200 * S);
    cr_assert_eq(sum(&v.life), 0);
    cr_assert_eq(v.life.calls, 0);
    cr_assert_eq(v.n_spans, 0);
    cr_assert_eq(v.total.compute, 2 * S, "the totals never start again");
    cr_assert_eq(v.total.calls, 1);
    cr_assert_eq(a.job_ns, T0 + 200 * S);
    cr_assert_eq(a.jobs, 2);
    cr_assert(!view(1, T0 + 200 * S).ever);
}

Test(account, a_failed_job_left_for_long_is_not_resumed)
{
    account_connect(&a, 0, T0, 1, 0);
    failed_call(0, T0 + 1 * S, T0 + 2 * S);
    account_disconnect(&a, 0, T0 + 3 * S);
    uint64_t later = T0 + 3 * S + ACCOUNT_RECOVER_NS + 1;
    account_view v = view(0, later + 100 * S);
    /* Failure runs on without a process only for ACCOUNT_RECOVER_NS. */
    cr_assert_eq(v.life.failure, 2 * S + ACCOUNT_RECOVER_NS);
    cr_assert_eq(account_connect(&a, 0, later, 2, 0), 1);
    cr_assert_eq(view(0, later).life.failure, 0);
    cr_assert_eq(view(0, later).total.failure, 2 * S + ACCOUNT_RECOVER_NS);
}

Test(account, the_window_holds_the_last_minute)
{
    account_connect(&a, 0, T0, 1, 0);
    call(0, T0 + 30 * S, T0 + 30 * S, T0 + 40 * S); /* 30 s compute, 10 s transfer */
    call(0, T0 + 100 * S, T0 + 105 * S, T0 + 110 * S);
    account_view v = view(0, T0 + 110 * S);
    /* The last 60 whole seconds, 50 s..110 s: compute 50..100, wait and
     * transfer 5 s each. The first call is out of it. */
    cr_assert_eq(v.window.wait, 5 * S);
    cr_assert_eq(v.window.transfer, 5 * S);
    cr_assert(v.window.compute >= 50 * S && v.window.compute <= 51 * S, "%llu",
              (unsigned long long)v.window.compute);
    cr_assert_eq(v.window.calls, 1);
    cr_assert_eq(v.life.calls, 2);
    /* A rank computing all minute: the open interval fills the window. */
    v = view(0, T0 + 400 * S);
    cr_assert_eq(v.window.calls, 0);
    cr_assert(v.window.compute >= 59 * S && v.window.compute <= 60 * S);
}

Test(account, lateness_under_a_millisecond_is_noise)
{
    account_connect(&a, 0, T0, 1, 0);
    account_submit(&a, 0, T0 + 1 * S, RINGD_COLL_ALLREDUCE);
    account_call c = {.late_ns = ACCOUNT_LATE_NS - 1};
    account_result(&a, 0, T0 + 2 * S, &c);
    account_submit(&a, 0, T0 + 3 * S, RINGD_COLL_ALLREDUCE);
    c.late_ns = 300 * MS;
    account_result(&a, 0, T0 + 4 * S, &c);
    account_view v = view(0, T0 + 4 * S);
    cr_assert_eq(v.late_calls, 1);
    cr_assert_eq(v.late_ns, 300 * MS);
}

Test(account, keeps_the_latest_spans_oldest_first)
{
    account_connect(&a, 0, T0, 1, 0);
    for (uint64_t i = 0; i < ACCOUNT_SPANS + 5; i++)
        call(0, T0 + i * S, 0, T0 + i * S + 1 * MS);
    account_view v = view(0, T0 + 100 * S);
    cr_assert_eq(v.n_spans, ACCOUNT_SPANS);
    cr_assert_eq(v.spans[0].start, T0 + 5 * S);
    cr_assert_eq(v.spans[ACCOUNT_SPANS - 1].start, T0 + (ACCOUNT_SPANS + 4) * S);
    cr_assert_eq(v.spans[0].dur, 1 * MS);
}

Test(account, a_process_lost_between_calls_while_the_others_fail_for_it_is_replaced)
{
    account_connect(&a, 0, T0, 1, 0);
    call(0, T0 + 1 * S, 0, T0 + 2 * S);
    account_disconnect(&a, 0, T0 + 3 * S); /* between calls: nothing failed here */
    /* Ranks of other hosts fail their calls for want of it: the new process
     * takes its place in the same job, and the time without one is failure. */
    cr_assert_eq(account_connect(&a, 0, T0 + 5 * S, 2, 1), 0);
    call(0, T0 + 6 * S, 0, T0 + 6 * S);
    account_view v = view(0, T0 + 6 * S);
    cr_assert_eq(v.life.failure, 3 * S);
    cr_assert(!v.failing);
    /* The same without the others failing: a job that ended, and a new one. */
    account_disconnect(&a, 0, T0 + 7 * S);
    cr_assert_eq(account_connect(&a, 0, T0 + 8 * S, 3, 0), 1);
}
