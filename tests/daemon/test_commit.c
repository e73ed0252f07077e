/*
 * test_commit.c - when a host may answer a success (daemon/commit.c),
 * without sockets: single rules, then rings of N hosts passing COMMIT
 * frames along their links in orders drawn from a seed, some hosts frozen
 * or cut off at any moment.
 *
 * What a lap that closes over hosts confirms is the most that some host on
 * it knew every host had completed (test_epoch.c,
 * a_success_one_host_gave_stands_when_a_lap_closes_over_another). So no
 * host, the ones closed over included, may have answered a success above
 * that, or it gets a success where the others get the resize.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "daemon/commit.h"

#define MAX_HOSTS 9
#define QUEUE 256

typedef struct {
    int n;
    commit_view h[MAX_HOSTS];
    int due[MAX_HOSTS];            /* host h has a COMMIT to send */
    uint64_t target[MAX_HOSTS];    /* collectives host h completes in all */
    uint64_t answered[MAX_HOSTS];  /* the most host h answered as successes */
    frame_commit q[MAX_HOSTS][16]; /* on the link from host h to h + 1 */
    int head[MAX_HOSTS], tail[MAX_HOSTS];
    uint64_t out; /* bit h: host h is frozen or cut off: it does nothing more */
} ring_sim;

#define BIT(h) (UINT64_C(1) << (h))

static void start(ring_sim *r, int n, int spare, uint64_t collectives)
{
    memset(r, 0, sizeof *r);
    r->n = n;
    for (int h = 0; h < n; h++) {
        cr_assert_eq(commit_init(&r->h[h], n), 0);
        commit_reset(&r->h[h], n, h, spare);
        r->target[h] = collectives;
    }
}

static void stop(ring_sim *r)
{
    for (int h = 0; h < r->n; h++)
        commit_free(&r->h[h]);
}

static void note_answers(ring_sim *r, int h)
{
    uint64_t a = commit_answerable(&r->h[h]);
    if (a > r->answered[h]) r->answered[h] = a;
}

static void complete(ring_sim *r, int h)
{
    commit_completed(&r->h[h], r->h[h].done[h] + 1);
    r->due[h] = 1;
    note_answers(r, h);
}

static void send(ring_sim *r, int h)
{
    r->due[h] = 0;
    cr_assert_lt(r->tail[h] - r->head[h], 16, "a link's queue overflowed");
    commit_frame(&r->h[h], &r->q[h][r->tail[h]++ % 16]);
}

static void deliver(ring_sim *r, int from)
{
    const frame_commit *c = &r->q[from][r->head[from]++ % 16];
    int to = (from + 1) % r->n;
    if (r->out & BIT(to)) return;
    if (commit_merge(&r->h[to], c)) r->due[to] = 1;
    note_answers(r, to);
}

/* One step of host h, if it has one: complete, send, or take a frame from
 * the left. Returns 0 if it had nothing to do. */
static int step(ring_sim *r, int h, unsigned pick)
{
    if (r->out & BIT(h)) return 0;
    int left = (h + r->n - 1) % r->n;
    int can[3] = {r->h[h].done[h] < r->target[h], r->due[h] && r->tail[h] - r->head[h] < 16,
                  !(r->out & BIT(left)) && r->head[left] < r->tail[left]};
    for (int k = 0; k < 3; k++) {
        int what = (int)((pick + (unsigned)k) % 3);
        if (!can[what]) continue;
        if (what == 0) complete(r, h);
        if (what == 1) send(r, h);
        if (what == 2) deliver(r, left);
        return 1;
    }
    return 0;
}

static unsigned next(unsigned *seed)
{
    *seed = *seed * 1103515245u + 12345u;
    return *seed >> 16;
}

/* Runs in an order drawn from seed for at most steps steps (0: until
 * nothing moves). */
static void run(ring_sim *r, unsigned seed, int steps)
{
    for (int budget = 1000000; budget > 0; budget--) {
        if (steps && steps-- == 1) return;
        int any = step(r, (int)(next(&seed) % (unsigned)r->n), next(&seed));
        for (int h = 0; h < r->n && !any; h++)
            any = step(r, h, next(&seed));
        if (!any) return;
    }
    cr_assert_fail("COMMITs kept travelling");
}

/* What a lap that passes every host not out confirms. */
static uint64_t lap_confirms(const ring_sim *r)
{
    uint64_t most = 0;
    for (int h = 0; h < r->n; h++)
        if (!(r->out & BIT(h)) && commit_least(&r->h[h]) > most) most = commit_least(&r->h[h]);
    return most;
}

/* ---- single rules ---- */

Test(commit, a_host_knows_every_host_completed_the_least_count)
{
    commit_view v;
    cr_assert_eq(commit_init(&v, 4), 0);
    commit_reset(&v, 3, 1, 0);
    commit_completed(&v, 5);
    cr_assert_eq(commit_least(&v), 0);
    frame_commit c = {.n = 3, .done = {4, 0, 7}};
    cr_assert(commit_merge(&v, &c));
    cr_assert_eq(commit_least(&v), 4);
    cr_assert_not(commit_merge(&v, &c), "nothing new");
    commit_free(&v);
}

Test(commit, a_host_keeps_its_own_count_whatever_a_commit_says_of_it)
{
    commit_view v;
    cr_assert_eq(commit_init(&v, 3), 0);
    commit_reset(&v, 3, 0, 0);
    commit_completed(&v, 2);
    frame_commit c = {.n = 3, .done = {9, 9, 9}, .known = {9, 9, 9}};
    commit_merge(&v, &c);
    cr_assert_eq(v.done[0], 2);
    cr_assert_eq(commit_least(&v), 2);
    commit_free(&v);
}

Test(commit, a_commit_of_another_membership_changes_nothing)
{
    commit_view v;
    cr_assert_eq(commit_init(&v, 4), 0);
    commit_reset(&v, 3, 0, 1);
    frame_commit c = {.n = 4, .done = {5, 5, 5, 5}, .known = {5, 5, 5, 5}};
    cr_assert_not(commit_merge(&v, &c));
    cr_assert_eq(v.done[1], 0);
    commit_free(&v);
}

/* Not elastic, no lap closes over a host: what this host knows, it
 * answers. */
Test(commit, a_ring_that_closes_over_nobody_answers_what_this_host_knows)
{
    commit_view v;
    cr_assert_eq(commit_init(&v, 4), 0);
    commit_reset(&v, 4, 3, 0);
    commit_completed(&v, 6);
    frame_commit c = {.n = 4, .done = {6, 6, 6, 0}};
    commit_merge(&v, &c);
    cr_assert_eq(commit_answerable(&v), 6);
    commit_free(&v);
}

/* The split met in stress (tests/FAULTS.md): 4 hosts, min_hosts 3. Host 3
 * learns first that every host completed #0 (the COMMIT from its left
 * carries the three others' counts). Frozen right after, before its own
 * COMMIT went out, it had answered its rank with a success, while the lap
 * that closed over it failed #0 on the three others: nobody there knew. So
 * it answers only once another host knows too. */
Test(commit, the_first_host_to_know_a_success_answers_only_once_another_knows)
{
    ring_sim r;
    start(&r, 4, 1, 1);
    for (int h = 0; h < 4; h++)
        complete(&r, h);
    /* Counts go round from host 0 to host 3. */
    for (int h = 0; h < 3; h++) {
        send(&r, h);
        deliver(&r, h);
    }
    cr_assert_eq(commit_least(&r.h[3]), 1, "host 3 knows");
    cr_assert_eq(commit_answerable(&r.h[3]), 0, "but nobody else does: it may not answer yet");
    r.out = BIT(3);
    cr_assert_eq(lap_confirms(&r), 0, "the lap that closes over it fails #0");
    /* Not frozen, it tells host 0, which then knows that two hosts know. */
    r.out = 0;
    send(&r, 3);
    deliver(&r, 3);
    cr_assert_eq(commit_answerable(&r.h[0]), 1);
    cr_assert_eq(commit_answerable(&r.h[3]), 0, "host 3 still waits to hear it");
    send(&r, 0);
    deliver(&r, 0);
    send(&r, 1);
    deliver(&r, 1);
    send(&r, 2);
    deliver(&r, 2);
    cr_assert_eq(commit_answerable(&r.h[3]), 1);
    stop(&r);
}

/* ---- whole rings ---- */

/* Without faults, every host answers every collective. */
Test(commit, every_host_answers_every_collective_on_a_working_ring)
{
    for (int n = 2; n <= MAX_HOSTS; n++) {
        for (int spare = 0; spare < n; spare++) {
            for (unsigned seed = 1; seed <= 30; seed++) {
                ring_sim r;
                start(&r, n, spare, 5);
                run(&r, seed * 7919u + (unsigned)n, 0);
                for (int h = 0; h < n; h++)
                    cr_assert_eq(r.answered[h], 5, "N=%d spare %d seed %u: host %d answered %llu",
                                 n, spare, seed, h, (unsigned long long)r.answered[h]);
                stop(&r);
            }
        }
    }
}

/* Any up to spare hosts stop at any moment (frozen, or cut off with their
 * frames lost): whatever any host answered, the ones that stopped too,
 * the lap over the others confirms. */
Test(commit, a_success_any_host_answered_is_confirmed_by_a_lap_that_closes_over_up_to_spare)
{
    int checked = 0;
    for (int n = 2; n <= MAX_HOSTS; n++) {
        for (int spare = 0; spare < n; spare++) {
            for (unsigned seed = 1; seed <= 60; seed++) {
                ring_sim r;
                start(&r, n, spare, 4);
                unsigned s = seed * 104729u + (unsigned)(n * 31 + spare);
                run(&r, s, 1 + (int)(next(&s) % (unsigned)(12 * n * 4)));
                /* The hosts that stop: spare of them, drawn from the seed. */
                for (int k = 0; k < spare; k++)
                    r.out |= BIT(next(&s) % (unsigned)n);
                uint64_t confirmed = lap_confirms(&r);
                for (int h = 0; h < n; h++)
                    cr_assert_leq(r.answered[h], confirmed,
                                  "N=%d spare %d seed %u, hosts %#llx stopped: host %d answered "
                                  "%llu, the lap confirms %llu",
                                  n, spare, seed, (unsigned long long)r.out, h,
                                  (unsigned long long)r.answered[h],
                                  (unsigned long long)confirmed);
                checked++;
                stop(&r);
            }
        }
    }
    cr_assert_gt(checked, 2000);
}

/* Nobody answers what some host has not completed. */
Test(commit, no_host_answers_what_another_has_not_completed)
{
    for (int n = 2; n <= MAX_HOSTS; n++) {
        for (unsigned seed = 1; seed <= 40; seed++) {
            ring_sim r;
            start(&r, n, (n - 1) / 2, 6);
            r.target[seed % (unsigned)n] = 3; /* one host stops at 3 */
            run(&r, seed, 0);
            for (int h = 0; h < n; h++)
                cr_assert_leq(r.answered[h], 3, "N=%d seed %u host %d", n, seed, h);
            stop(&r);
        }
    }
}
