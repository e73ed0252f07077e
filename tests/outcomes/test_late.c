/*
 * test_late.c - ranks that sit out a call the others make, on hosts apart
 * (issue 11; PROTOCOL.md, "Outcomes").
 *
 * On a ring of four, ranks 0 and 2 make a call that ranks 1 and 3 do not:
 * two hosts time out on it at about the same moment and reset the ring
 * from two places. Ranks 1 and 3 learn of it late: their next call is
 * that call, and fails with the others' message. From then on every call
 * pairs with the same call of every other rank. Every input names its
 * call (team.h), so a result made of two different calls shows.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "team.h"
#include "tests/harness/harness.h"

#define HOSTS 4
#define COUNT (TEAM_BLOCK * HOSTS)
#define AFTER 8  /* calls after the one sat out */
#define ROUNDS 4 /* the scenario, again and again on the same daemons */
static harness H;

/* collective_timeout 2 s, heartbeat_interval 200 ms, heartbeat_timeout 1 s,
 * as written for a machine shared two ways, stretched on a busier one
 * (harness_ms(), tests/harness/timing.h). */
static char late_yaml[160];

static void setup(void)
{
    harness_reset(&H);
    snprintf(late_yaml, sizeof late_yaml,
             "collective_timeout: %dms\nheartbeat_interval: %dms\nheartbeat_timeout: %dms\n",
             harness_ms(2000), harness_ms(200), harness_ms(1000));
}

static void teardown(void)
{
    harness_cleanup(&H);
}

TestSuite(late, .init = setup, .fini = teardown, .timeout = 600);

/* What one call of one rank returned. */
typedef struct {
    uint64_t tag;
    int rc;
    uint64_t tags[HOSTS];
    char msg[TEAM_MSG];
} late_call;

typedef struct {
    int round;
    atomic_int sat_out_done; /* ranks 0 and 2 have their answer to the call */
    harness_barrier bar;
    late_call calls[HOSTS][AFTER + 2];
    int n[HOSTS];
    ringd_client *c[HOSTS];
    char why[HOSTS][256];
} late;

/* team_connect() names the local rank in the environment, which threads
 * share: one connection at a time. */
static int connect_as(const char *socket, int local, ringd_client **c)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&mu);
    int rc = team_connect(socket, local, 20000, c);
    pthread_mutex_unlock(&mu);
    return rc;
}

static uint64_t tag_of(int round, int rank, int call)
{
    return ((uint64_t)round << 16) | ((uint64_t)rank << 8) | (uint64_t)(call + 1);
}

/* One allreduce of n elements of rank's blocks tagged tag, recorded in rec
 * (its first COUNT elements decoded). */
static void call_into(late_call *rec, ringd_client *c, int64_t *buf, size_t n, int rank,
                      uint64_t tag)
{
    rec->tag = tag;
    team_fill(buf, n, rank, HOSTS, tag);
    rec->rc = ringd_allreduce(c, buf, n, RINGD_INT64, RINGD_SUM);
    if (rec->rc == 0)
        team_decode(buf, COUNT, HOSTS, rec->tags);
    else
        snprintf(rec->msg, sizeof rec->msg, "%s", ringd_last_error(c));
}

/* Waits (30 s at most) until *n reaches want. */
static void wait_count(atomic_int *n, int want)
{
    int64_t end = harness_now_ms() + 30000;
    while (atomic_load(n) < want && harness_now_ms() < end)
        harness_sleep_ms(5);
}

static void one_call(late *s, int rank, int call, int64_t *buf)
{
    call_into(&s->calls[rank][s->n[rank]++], s->c[rank], buf, COUNT, rank,
              tag_of(s->round, rank, call));
}

static int late_thread(int rank, void *arg)
{
    late *s = arg;
    int64_t *buf = ringd_alloc(s->c[rank], COUNT * sizeof *buf);
    if (!buf) {
        snprintf(s->why[rank], sizeof s->why[rank], "ringd_alloc: %s",
                 ringd_last_error(s->c[rank]));
        return -1;
    }
    s->n[rank] = 0;
    if (rank % 2 == 0) {
        one_call(s, rank, 0, buf); /* the call ranks 1 and 3 sit out */
        atomic_fetch_add(&s->sat_out_done, 1);
    } else {
        wait_count(&s->sat_out_done, 2);
    }
    /* Ranks 1 and 3 make one more: their first is the call sat out. */
    for (int k = 1; k <= AFTER + rank % 2; k++)
        one_call(s, rank, k, buf);
    ringd_free(s->c[rank], buf);
    return harness_barrier_wait(&s->bar, false, 60000) == 0 ? 0 : -1;
}

static const late_call *find(const late *s, int rank, uint64_t tag)
{
    for (int i = 0; i < s->n[rank]; i++)
        if (s->calls[rank][i].tag == tag) return &s->calls[rank][i];
    return NULL;
}

/* Every OK result is one call of each rank, and each of those calls got
 * OK with the same result: never two calls mixed, never a split. */
static void check_pairing(const late *s)
{
    for (int r = 0; r < HOSTS; r++) {
        for (int i = 0; i < s->n[r]; i++) {
            const late_call *c = &s->calls[r][i];
            if (c->rc != 0) continue;
            for (int b = 0; b < HOSTS; b++) {
                cr_assert_neq(c->tags[b], TEAM_BAD_TAG,
                              "round %d: rank %d call %" PRIx64
                              ": block of rank %d is not one call",
                              s->round, r, c->tag, b);
                const late_call *o = find(s, b, c->tags[b]);
                cr_assert_not_null(o,
                                   "round %d: rank %d's result holds call %" PRIx64
                                   " of rank %d, which it never made",
                                   s->round, r, c->tags[b], b);
                cr_assert_eq(o->rc, 0,
                             "round %d: rank %d got OK for a collective with call %" PRIx64
                             " of rank %d, which got %s: %s",
                             s->round, r, c->tags[b], b, ringd_errname(o->rc), o->msg);
                cr_assert_arr_eq(o->tags, c->tags, sizeof c->tags,
                                 "round %d: ranks %d and %d got different results for one "
                                 "collective",
                                 s->round, r, b);
            }
        }
    }
}

Test(late, ranks_on_two_hosts_apart_sit_out_a_call_and_fail_it_late_never_pairing_another)
{
    cr_assert_eq(harness_init(&H, HOSTS, late_yaml), 0, "%s", H.err);
    cr_assert_eq(harness_start(&H, harness_seed("late"), 50), 0, "%s", H.err);
    static late s;
    for (int r = 0; r < HOSTS; r++)
        cr_assert_eq(team_connect(H.d[r].socket, 0, 20000, &s.c[r]), 0, "%s",
                     ringd_last_error(NULL));
    for (int round = 1; round <= ROUNDS; round++) {
        memset(s.calls, 0, sizeof s.calls);
        memset(s.why, 0, sizeof s.why);
        s.round = round;
        atomic_store(&s.sat_out_done, 0);
        harness_barrier_init(&s.bar, HOSTS);
        cr_assert_eq(harness_run_threads(&H, HOSTS, late_thread, &s, 120000), 0,
                     "round %d: %s | %s | %s | %s", round, s.why[0], s.why[1], s.why[2], s.why[3]);
        harness_barrier_destroy(&s.bar);
        for (int r = 0; r < HOSTS; r++)
            for (int i = 0; i < s.n[r]; i++)
                fprintf(stderr, "round %d rank %d call %d: %s %s\n", round, r, i,
                        ringd_errname(s.calls[r][i].rc), s.calls[r][i].msg);
        check_pairing(&s);
        /* The call sat out failed on ranks 0 and 2 alike ... */
        const late_call *a = &s.calls[0][0], *b = &s.calls[2][0];
        cr_assert_neq(a->rc, 0, "round %d: the call ranks 1 and 3 sat out succeeded", round);
        cr_assert_eq(a->rc, b->rc, "round %d", round);
        cr_assert_str_eq(a->msg, b->msg, "round %d", round);
        /* ... and on 1 and 3, as their next call, with the same message. */
        for (int r = 1; r < HOSTS; r += 2) {
            cr_assert_eq(s.calls[r][0].rc, a->rc, "round %d: rank %d: %s", round, r,
                         s.calls[r][0].msg);
            cr_assert_str_eq(s.calls[r][0].msg, a->msg, "round %d: rank %d", round, r);
        }
        /* Then every rank's calls pair, all of them. */
        for (int r = 0; r < HOSTS; r++) {
            cr_assert_eq(s.n[r], AFTER + 1, "round %d: rank %d made %d calls", round, r, s.n[r]);
            for (int i = 1; i < s.n[r]; i++)
                cr_assert_eq(s.calls[r][i].rc, 0, "round %d: rank %d call %d: %s: %s", round, r, i,
                             ringd_errname(s.calls[r][i].rc), s.calls[r][i].msg);
        }
    }
    for (int r = 0; r < HOSTS; r++)
        ringd_close(s.c[r]);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

/*
 * A host's ranks start before another host's, and their first call fails
 * on their own host (its two ranks disagree) before the others have even
 * connected. The ring waits for every rank, so the late starters' first
 * call is that same call, and fails alike; their second pairs with the
 * second of every other rank (was: the late ones' first call paired with
 * the early ones' second, and succeeded where theirs had failed).
 */
typedef struct {
    atomic_int early_in;
    late_call calls[HOSTS][2];
    char why[HOSTS][256];
} start;

static int start_thread(int idx, void *arg)
{
    start *s = arg;
    int host = idx < 2 ? 1 : 0, local = idx % 2, rank = host * 2 + local;
    if (host == 0) { /* the late host: after the early ones have submitted */
        wait_count(&s->early_in, 2);
        harness_sleep_ms(300);
    }
    ringd_client *c;
    if (connect_as(H.d[host].socket, local, &c) < 0) {
        snprintf(s->why[rank], sizeof s->why[rank], "connect: %s", ringd_last_error(NULL));
        return -1;
    }
    int64_t *buf = ringd_alloc(c, 2 * COUNT * sizeof *buf);
    if (!buf) {
        snprintf(s->why[rank], sizeof s->why[rank], "ringd_alloc: %s", ringd_last_error(c));
        ringd_close(c);
        return -1;
    }
    for (int k = 0; k < 2; k++) {
        /* Rank 3's first call has another count than everyone's. */
        size_t n = rank == 3 && k == 0 ? 2 * COUNT : COUNT;
        if (host == 1 && k == 0) atomic_fetch_add(&s->early_in, 1);
        call_into(&s->calls[rank][k], c, buf, n, rank, tag_of(9, rank, k));
    }
    ringd_free(c, buf);
    ringd_close(c);
    return 0;
}

Test(late, ranks_that_start_late_fail_the_first_call_with_the_others_and_pair_the_second)
{
    cr_assert_eq(harness_init_local(&H, 2, 2, late_yaml), 0, "%s", H.err);
    cr_assert_eq(harness_start(&H, harness_seed("start"), 50), 0, "%s", H.err);
    static start s;
    cr_assert_eq(harness_run_threads(&H, 4, start_thread, &s, 60000), 0, "%s | %s | %s | %s",
                 s.why[0], s.why[1], s.why[2], s.why[3]);
    for (int r = 0; r < HOSTS; r++)
        fprintf(stderr, "rank %d: %s %s / %s %s\n", r, ringd_errname(s.calls[r][0].rc),
                s.calls[r][0].msg, ringd_errname(s.calls[r][1].rc), s.calls[r][1].msg);
    for (int r = 0; r < HOSTS; r++) {
        const late_call *first = &s.calls[r][0], *second = &s.calls[r][1];
        cr_assert_eq(first->rc, RINGD_EMISMATCH, "rank %d's first call: %s: %s", r,
                     ringd_errname(first->rc), first->msg);
        cr_assert_str_eq(first->msg, s.calls[2][0].msg, "rank %d", r);
        cr_assert_eq(second->rc, 0, "rank %d's second call: %s: %s", r, ringd_errname(second->rc),
                     second->msg);
        for (int b = 0; b < HOSTS; b++)
            cr_assert_eq(second->tags[b], tag_of(9, b, 1),
                         "rank %d's second call holds call %" PRIx64 " of rank %d", r,
                         second->tags[b], b);
    }
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

/*
 * A rank sits out two calls in a row, each of which times out on its host:
 * two resets settle them while it is away. When it comes back, its first
 * two calls are those two and fail as they failed for the others; its
 * third pairs with the others' third (was: its first paired with the
 * others' third, and succeeded).
 */
typedef struct {
    atomic_int others_done; /* calls the other ranks have their answer to */
    late_call calls[HOSTS][3];
    char why[HOSTS][256];
    ringd_client *c[HOSTS];
} behind;

static int behind_thread(int rank, void *arg)
{
    behind *s = arg;
    int64_t *buf = ringd_alloc(s->c[rank], COUNT * sizeof *buf);
    if (!buf) {
        snprintf(s->why[rank], sizeof s->why[rank], "ringd_alloc: %s",
                 ringd_last_error(s->c[rank]));
        return -1;
    }
    if (rank == 0) /* away until the others have had both answers */
        wait_count(&s->others_done, 2 * (HOSTS - 1));
    for (int k = 0; k < 3; k++) {
        call_into(&s->calls[rank][k], s->c[rank], buf, COUNT, rank, tag_of(7, rank, k));
        if (rank != 0) atomic_fetch_add(&s->others_done, 1);
    }
    ringd_free(s->c[rank], buf);
    return 0;
}

Test(late, a_rank_that_sits_out_two_failed_calls_fails_both_when_it_comes_back)
{
    cr_assert_eq(harness_init(&H, HOSTS, late_yaml), 0, "%s", H.err);
    cr_assert_eq(harness_start(&H, harness_seed("behind"), 50), 0, "%s", H.err);
    static behind s;
    for (int r = 0; r < HOSTS; r++)
        cr_assert_eq(team_connect(H.d[r].socket, 0, 20000, &s.c[r]), 0, "%s",
                     ringd_last_error(NULL));
    cr_assert_eq(harness_run_threads(&H, HOSTS, behind_thread, &s, 120000), 0, "%s | %s", s.why[0],
                 s.why[1]);
    for (int r = 0; r < HOSTS; r++)
        for (int k = 0; k < 3; k++)
            fprintf(stderr, "rank %d call %d: %s %s\n", r, k, ringd_errname(s.calls[r][k].rc),
                    s.calls[r][k].msg);
    for (int k = 0; k < 2; k++) {
        cr_assert_neq(s.calls[1][k].rc, 0, "call %d succeeded without rank 0", k);
        for (int r = 0; r < HOSTS; r++) {
            cr_assert_eq(s.calls[r][k].rc, s.calls[1][k].rc, "rank %d call %d: %s", r, k,
                         s.calls[r][k].msg);
            cr_assert_str_eq(s.calls[r][k].msg, s.calls[1][k].msg, "rank %d call %d", r, k);
        }
    }
    for (int r = 0; r < HOSTS; r++) {
        cr_assert_eq(s.calls[r][2].rc, 0, "rank %d's third call: %s: %s", r,
                     ringd_errname(s.calls[r][2].rc), s.calls[r][2].msg);
        for (int b = 0; b < HOSTS; b++)
            cr_assert_eq(s.calls[r][2].tags[b], tag_of(7, b, 2),
                         "rank %d's third call holds call %" PRIx64 " of rank %d", r,
                         s.calls[r][2].tags[b], b);
    }
    for (int r = 0; r < HOSTS; r++)
        ringd_close(s.c[r]);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}
