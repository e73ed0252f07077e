/*
 * test_outcomes.c - every rank sees the same outcome, and no call is ever
 * paired with another (issue 11; PROTOCOL.md, "Outcomes").
 *
 * The daemons stay up, as under systemd; the training processes are real
 * processes, forked here, that exit, crash, hang or disagree while the
 * others go on, and fresh ones take their place. Every input names its
 * call (team.h), so any result made of the wrong calls shows.
 *
 * For 2, 3 and 4 hosts with 1 and 2 local ranks, one ring per shape runs
 * each fault in turn: a rank that exits between calls, one that exits in
 * the middle of one, one that never submits, one whose call differs, a
 * daemon killed and restarted, a daemon frozen past its heartbeat. Each
 * time every rank must get the outcome the fault calls for, the same on
 * every rank; then fresh processes on every host make 20 allreduces, of
 * which at most the first may fail, and only with the same error
 * everywhere.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "team.h"
#include "tests/harness/harness.h"

static harness H;

/* collective_timeout and heartbeat_timeout, 2 s and 1 s as written for a
 * machine shared two ways, stretched on a busier one (harness_ms(),
 * tests/harness/timing.h); outcome_yaml is the config made of them. */
static int collective_ms, heartbeat_ms;
static char outcome_yaml[256];

static void setup(void)
{
    harness_reset(&H);
    collective_ms = harness_ms(2000);
    heartbeat_ms = harness_ms(1000);
    snprintf(outcome_yaml, sizeof outcome_yaml,
             "collective_timeout: %dms\nheartbeat_interval: %dms\nheartbeat_timeout: %dms\n"
             "connect_timeout: %dms\nbackoff_initial: %dms\nbackoff_max: %dms\n",
             collective_ms, harness_ms(200), heartbeat_ms, harness_ms(1000), harness_ms(50),
             harness_ms(500));
}

static void teardown(void)
{
    harness_cleanup(&H);
}

TestSuite(outcomes, .init = setup, .fini = teardown, .timeout = 900);

#define COUNT 1024 /* int64 elements per call */
#define FRESH_CALLS 20
#define MAX_CALLS 64
#if defined(__SANITIZE_ADDRESS__)
#define SLOW 3 /* the sanitizer build is about this much slower */
#else
#define SLOW 1
#endif

typedef enum {
    PLAY_NOTHING,
    EXIT_BETWEEN, /* the victim exits after call at - 1 */
    EXIT_MID,     /* the victim submits call at and exits at once */
    NEVER,        /* the victim never submits call at, and stays */
    DIFFERS,      /* the victim's call at differs from the others' */
    DAEMON_KILL,  /* the victim's daemon is killed (SIGKILL) in call at, then restarted */
    DAEMON_STOP,  /* the victim's daemon is frozen (SIGSTOP) past heartbeat_timeout */
} fault;

static const char *const fault_names[] = {
    "nothing", "exit between calls", "exit mid-call", "never submits",
    "differs", "daemon killed",      "daemon frozen"};

/* One collective as a rank submits it. */
typedef struct {
    ringd_coll kind;
    size_t count;
    ringd_dtype dtype;
    ringd_op op;
    int root;
    const char *name;
} call_shape;

#define ALLREDUCE_SHAPE                                                                            \
    {                                                                                              \
        RINGD_COLL_ALLREDUCE, COUNT, RINGD_INT64, RINGD_SUM, 0, NULL                               \
    }
static const call_shape ALLREDUCE = ALLREDUCE_SHAPE;

/* What a team of processes does: `calls` allreduces of job `job`; rank
 * `victim` plays fault f at call `at` (its call there is `differ` for
 * DIFFERS). */
typedef struct {
    int hosts, local, size;
    int job, calls;
    int victim;
    fault f;
    int at;
    call_shape differ;
    /* Or pairs: call 2p is pair[p].common on every rank but the victim,
     * which makes pair[p].victim's; call 2p + 1 is a checked allreduce. */
    int n_pairs;
    struct {
        call_shape common, victim;
    } pair[16];
    /* Written by the test, read by the processes: */
    atomic_int fault_done; /* the test played its part (a daemon fault) */
    atomic_int finished[MAX_CALLS];
    team_log log[TEAM_MAX_RANKS];
    pid_t pids[TEAM_MAX_RANKS];
} team;

#define TEAM_CAP MAX_CALLS

static team *team_new(int hosts, int local)
{
    size_t bytes = sizeof(team) + TEAM_MAX_RANKS * TEAM_CAP * sizeof(team_call);
    team *t = team_shared(bytes);
    cr_assert_not_null(t, "shared memory for a team");
    t->hosts = hosts;
    t->local = local;
    t->size = hosts * local;
    team_call *calls = (team_call *)(t + 1);
    for (int r = 0; r < TEAM_MAX_RANKS; r++) {
        t->log[r].cap = TEAM_CAP;
        t->log[r].calls = calls + r * TEAM_CAP;
    }
    return t;
}

static void team_free(team *t)
{
    team_unshare(t, sizeof(team) + TEAM_MAX_RANKS * TEAM_CAP * sizeof(team_call));
}

/* Clears a team's records for its next script. */
static void team_clear(team *t)
{
    t->n_pairs = 0;
    t->at = -1;
    atomic_store(&t->fault_done, 0);
    for (int k = 0; k < MAX_CALLS; k++)
        atomic_store(&t->finished[k], 0);
    for (int r = 0; r < TEAM_MAX_RANKS; r++) {
        team_log *lg = &t->log[r];
        atomic_store(&lg->n, 0);
        atomic_store(&lg->submitted, 0);
        lg->pid = 0;
        lg->exit_ms = 0;
        lg->why[0] = '\0';
        memset(lg->calls, 0, (size_t)lg->cap * sizeof *lg->calls);
        t->pids[r] = 0;
    }
}

/* The tag of call k of rank r in job j: nonzero, unique across the test. */
static uint64_t tag_of(int job, int k, int r)
{
    return ((uint64_t)job << 12 | (uint64_t)k << 4 | (uint64_t)r) + 1;
}

/* ---- a rank's process ---- */

static void wait_flag(atomic_int *flag, int want, int timeout_ms)
{
    int64_t end = team_now_ms() + timeout_ms;
    while (atomic_load(flag) < want && team_now_ms() < end)
        usleep(2000);
}

/* Submits the team's allreduce on buf, lets delay_us pass and exits, in
 * the middle of it. */
__attribute__((noreturn)) static void submit_and_exit(ringd_client *c, int64_t *buf,
                                                      unsigned delay_us)
{
    ringd_request *req;
    ringd_collective coll = {.kind = RINGD_COLL_ALLREDUCE,
                             .buf = buf,
                             .count = COUNT,
                             .dtype = RINGD_INT64,
                             .op = RINGD_SUM};
    if (ringd_submit(c, &coll, &req) == 0) usleep(delay_us);
    _exit(0);
}

/* Submits shape s on buf (the team's pattern lives in the first COUNT
 * int64 of it) and waits. */
static int run_shape(ringd_client *c, const call_shape *s, int64_t *buf, int64_t *out)
{
    ringd_collective coll = {.kind = s->kind,
                             .buf = buf,
                             .count = s->count,
                             .dtype = s->dtype,
                             .op = s->op,
                             .root = s->root,
                             .name = s->name};
    if (s->kind == RINGD_COLL_ALLGATHER) {
        coll.input = buf;
        coll.buf = out;
    }
    return ringd_run(c, &coll);
}

static void record(team_log *lg, uint64_t key, int rc, int64_t start, const int64_t *buf, int size,
                   const ringd_client *c)
{
    int i = atomic_load(&lg->n);
    if (i >= lg->cap) return;
    team_call *rec = &lg->calls[i];
    rec->key = key;
    rec->rc = rc;
    rec->start_ms = start;
    rec->end_ms = team_now_ms();
    if (rc == 0)
        team_decode(buf, COUNT, size, rec->tags);
    else
        snprintf(rec->msg, sizeof rec->msg, "%s", ringd_last_error(c));
    atomic_store(&lg->n, i + 1);
}

/* The body of rank r's process: its calls, the fault if it is the victim,
 * every outcome recorded. Never returns. */
static void rank_main(team *t, int r)
{
    team_log *lg = &t->log[r];
    ringd_client *c = NULL;
    int host = r / t->local;
    lg->pid = getpid();
    if (team_connect(H.d[host].socket, r % t->local, 30000 * SLOW, &c) < 0) {
        snprintf(lg->why, sizeof lg->why, "connect to %s: %s", H.d[host].socket,
                 ringd_last_error(NULL));
        _exit(1);
    }
    if (ringd_rank(c) != r || ringd_size(c) != t->size) {
        snprintf(lg->why, sizeof lg->why, "rank %d of %d, expected %d of %d", ringd_rank(c),
                 ringd_size(c), r, t->size);
        _exit(1);
    }
    /* Room for the widest differing call: an allgather's result. */
    size_t elems = (size_t)COUNT * (size_t)(t->size + 1);
    int64_t *buf = ringd_alloc(c, elems * sizeof *buf);
    int64_t *out = ringd_alloc(c, elems * sizeof *buf);
    if (!buf || !out) {
        snprintf(lg->why, sizeof lg->why, "ringd_alloc: %s", ringd_last_error(c));
        _exit(1);
    }
    int victim = r == t->victim;
    for (int k = 0; k < t->calls; k++) {
        uint64_t tag = tag_of(t->job, k, r);
        team_fill(buf, COUNT, r, t->size, tag);
        const call_shape *s = &ALLREDUCE;
        if (t->n_pairs && k % 2 == 0) s = victim ? &t->pair[k / 2].victim : &t->pair[k / 2].common;
        if (victim && k == t->at) {
            switch (t->f) {
            case EXIT_BETWEEN:
                lg->exit_ms = team_now_ms();
                _exit(0);
            case EXIT_MID:
                atomic_fetch_add(&lg->submitted, 1);
                lg->exit_ms = team_now_ms();
                submit_and_exit(c, buf, 20000); /* lets it reach the ring first */
            case NEVER:
                /* Stays connected, and lets the others find out. */
                wait_flag(&t->finished[k], t->size - 1, 60000 * SLOW);
                _exit(0);
            case DIFFERS:
                s = &t->differ;
                break;
            case DAEMON_KILL:
            case DAEMON_STOP:
                /* Comes to the call only once the test has struck. */
                wait_flag(&t->fault_done, 1, 60000 * SLOW);
                break;
            case PLAY_NOTHING:
                break;
            }
        }
        atomic_fetch_add(&lg->submitted, 1);
        int64_t start = team_now_ms();
        int rc = run_shape(c, s, buf, out);
        record(lg, tag, rc, start, buf, t->size, c);
        atomic_fetch_add(&t->finished[k], 1);
        if (rc == RINGD_ECLOSED) break; /* its daemon went away */
    }
    ringd_close(c);
    _exit(0);
}

/* ---- the test's side ---- */

static void team_start(team *t)
{
    for (int r = 0; r < t->size; r++) {
        pid_t pid = fork();
        cr_assert_geq(pid, 0, "fork");
        if (pid == 0) rank_main(t, r);
        t->pids[r] = pid;
    }
}

/* Waits for every process of t to exit; kills what is left at the deadline. */
static void team_join(team *t, int timeout_ms)
{
    int64_t end = harness_now_ms() + timeout_ms;
    int left = t->size;
    while (left > 0 && harness_now_ms() < end) {
        for (int r = 0; r < t->size; r++) {
            if (t->pids[r] <= 0) continue;
            int status;
            if (waitpid(t->pids[r], &status, WNOHANG) == t->pids[r]) {
                t->pids[r] = 0;
                left--;
                if (t->log[r].why[0] == '\0' && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
                    snprintf(t->log[r].why, sizeof t->log[r].why, "exited with status 0x%x",
                             status);
            }
        }
        harness_sleep_ms(5);
    }
    for (int r = 0; r < t->size; r++) {
        if (t->pids[r] <= 0) continue;
        kill(t->pids[r], SIGKILL);
        waitpid(t->pids[r], NULL, 0);
        t->pids[r] = 0;
        snprintf(t->log[r].why, sizeof t->log[r].why, "still running after %d ms", timeout_ms);
    }
    for (int r = 0; r < t->size; r++)
        cr_expect_str_empty(t->log[r].why, "rank %d: %s", r, t->log[r].why);
}

static const team_call *call_of(const team *t, int r, int k)
{
    const team_log *lg = &t->log[r];
    uint64_t key = tag_of(t->job, k, r);
    for (int i = 0; i < atomic_load(&lg->n); i++)
        if (lg->calls[i].key == key) return &lg->calls[i];
    return NULL;
}

/* Call k succeeded on rank r with every rank's block of call k. */
static void expect_correct(const team *t, int r, int k, const char *when)
{
    const team_call *c = call_of(t, r, k);
    cr_assert_not_null(c, "%s: rank %d has no record of call %d", when, r, k);
    cr_assert_eq(c->rc, 0, "%s: rank %d, call %d failed: %s: %s", when, r, k, ringd_errname(c->rc),
                 c->msg);
    for (int b = 0; b < t->size; b++)
        cr_assert_eq(c->tags[b], tag_of(t->job, k, b),
                     "%s: rank %d, call %d: the block of rank %d is tag %" PRIx64
                     ", expected %" PRIx64 " (a result made of the wrong calls)",
                     when, r, k, b, c->tags[b], tag_of(t->job, k, b));
}

/* Every rank in `who` (a bit per rank) got the same outcome for call k:
 * the same code and the same message. Returns that code. */
static int expect_same(const team *t, unsigned who, int k, const char *when)
{
    const team_call *first = NULL;
    int fr = -1;
    for (int r = 0; r < t->size; r++) {
        if (!(who >> r & 1)) continue;
        const team_call *c = call_of(t, r, k);
        cr_assert_not_null(c, "%s: rank %d has no record of call %d", when, r, k);
        if (!first) {
            first = c;
            fr = r;
            continue;
        }
        cr_assert_eq(c->rc, first->rc, "%s: call %d: rank %d got %s (%s), rank %d %s (%s)", when, k,
                     r, ringd_errname(c->rc), c->msg, fr, ringd_errname(first->rc), first->msg);
        cr_assert_str_eq(c->msg, first->msg,
                         "%s: call %d: ranks %d and %d got different messages:\n  %s\n  %s", when,
                         k, r, fr, c->msg, first->msg);
    }
    return first ? first->rc : 0;
}

static unsigned all_but(const team *t, unsigned skip)
{
    return ((1u << t->size) - 1) & ~skip;
}

/* The ranks of host h, as a bit set. */
static unsigned host_ranks(const team *t, int h)
{
    return ((1u << t->local) - 1) << (h * t->local);
}

/* Fresh processes on every host: 20 allreduces, each checked; at most the
 * first fails, and then the same way on every rank. */
static void fresh_team(team *t, int job, const char *after)
{
    char when[96];
    snprintf(when, sizeof when, "fresh processes after \"%s\"", after);
    team_clear(t);
    t->job = job;
    t->calls = FRESH_CALLS;
    t->victim = -1;
    t->f = PLAY_NOTHING;
    team_start(t);
    team_join(t, 120000 * SLOW);
    unsigned all = all_but(t, 0);
    int first = expect_same(t, all, 0, when);
    if (first != 0) {
        const team_call *c = call_of(t, 0, 0);
        cr_expect_gt(strlen(c->msg), 20, "%s: the first call failed without a clear message: %s",
                     when, c->msg);
        fprintf(stderr, "  %s: the first call failed on every rank: %s: %s\n", when,
                ringd_errname(first), c->msg);
    }
    for (int k = first != 0; k < FRESH_CALLS; k++)
        for (int r = 0; r < t->size; r++)
            expect_correct(t, r, k, when);
}

/* ---- the faults ---- */

#define AT 2 /* the call at which the fault comes; calls 0 and 1 run in step */

static void check_before(const team *t, const char *when)
{
    for (int k = 0; k < AT; k++)
        for (int r = 0; r < t->size; r++)
            expect_correct(t, r, k, when);
}

/* Plays fault f with the last rank as the victim, then checks what every
 * rank got at call AT. */
static void play(team *t, int job, fault f)
{
    const char *name = fault_names[f];
    int victim = t->size - 1, vhost = t->hosts - 1;
    team_clear(t);
    t->job = job;
    t->calls = AT + 1;
    t->victim = victim;
    t->f = f;
    t->at = AT;
    t->differ = ALLREDUCE;
    t->differ.count = COUNT + TEAM_BLOCK;
    fprintf(stderr, "%d hosts x %d: %s\n", t->hosts, t->local, name);
    team_start(t);

    if (f == DAEMON_KILL || f == DAEMON_STOP) {
        /* Every other rank is in call AT when the daemon goes. */
        int64_t end = harness_now_ms() + 30000 * SLOW;
        int in = 0;
        while (harness_now_ms() < end) {
            in = 0;
            for (int r = 0; r < t->size; r++)
                in += r != victim && atomic_load(&t->log[r].submitted) > AT;
            if (in == t->size - 1) break;
            harness_sleep_ms(5);
        }
        cr_assert_eq(in, t->size - 1, "%s: the other ranks did not reach call %d", name, AT);
        harness_sleep_ms(200);
        if (f == DAEMON_KILL) {
            harness_kill(&H, vhost);
            cr_assert_eq(harness_spawn(&H, vhost), 0, "%s", H.err);
            cr_assert_eq(harness_wait_ready(&H, vhost, 20000 * SLOW), 0, "%s", H.err);
        } else {
            harness_signal(&H, vhost, SIGSTOP);
            harness_sleep_ms(heartbeat_ms + harness_ms(1000));
            harness_signal(&H, vhost, SIGCONT);
        }
        atomic_store(&t->fault_done, 1);
    }
    team_join(t, 120000 * SLOW);
    check_before(t, name);

    unsigned victim_bit = 1u << victim;
    unsigned others = all_but(t, victim_bit);
    const team_call *c = NULL;
    for (int r = 0; r < t->size && !c; r++)
        if (others >> r & 1) c = call_of(t, r, AT);
    cr_assert_not_null(c);
    switch (f) {
    case EXIT_BETWEEN: {
        /* The others fail at once, naming the rank that left. */
        char who[96];
        snprintf(who, sizeof who, "rank %d (pid %d) on host h%d exited", victim,
                 (int)t->log[victim].pid, vhost);
        cr_assert_eq(expect_same(t, others, AT, name), RINGD_EABORTED, "%s: %s", name, c->msg);
        cr_assert(strstr(c->msg, who), "%s: the message does not say \"%s\": %s", name, who,
                  c->msg);
        for (int r = 0; r < t->size; r++) {
            if (!(others >> r & 1)) continue;
            int64_t after = call_of(t, r, AT)->end_ms - t->log[victim].exit_ms;
            cr_expect_leq(after, harness_ms(1000) * SLOW,
                          "%s: rank %d learned of it %" PRId64 " ms after", name, r, after);
        }
        break;
    }
    case EXIT_MID:
        /* Its data may have made it round the ring: then the others have
         * the right sum; if not, they all fail naming it. */
        if (expect_same(t, others, AT, name) == 0) {
            for (int r = 0; r < t->size; r++)
                if (others >> r & 1) expect_correct(t, r, AT, name);
        } else {
            cr_assert_eq(c->rc, RINGD_EABORTED, "%s: %s", name, c->msg);
            cr_assert(strstr(c->msg, "exited during the collective"), "%s: %s", name, c->msg);
        }
        break;
    case NEVER:
        /* The others time out, told which ranks did not come. */
        cr_assert_eq(expect_same(t, others, AT, name), RINGD_ETIMEDOUT, "%s: %s", name, c->msg);
        {
            char who[64];
            snprintf(who, sizeof who, "rank %d did not submit it", victim);
            cr_assert(strstr(c->msg, who), "%s: the message does not say \"%s\": %s", name, who,
                      c->msg);
        }
        for (int r = 0; r < t->size; r++) {
            if (!(others >> r & 1)) continue;
            const team_call *o = call_of(t, r, AT);
            cr_expect_leq(o->end_ms - o->start_ms, (collective_ms + harness_ms(3000)) * SLOW,
                          "%s: rank %d waited %" PRId64 " ms", name, r, o->end_ms - o->start_ms);
        }
        break;
    case DIFFERS:
        /* Every rank, the victim too, fails the same way. */
        cr_assert_eq(expect_same(t, all_but(t, 0), AT, name), RINGD_EMISMATCH, "%s: %s", name,
                     c->msg);
        break;
    case DAEMON_KILL:
    case DAEMON_STOP: {
        /* The ring broke: every rank elsewhere fails, naming the host. */
        char host[16];
        snprintf(host, sizeof host, "h%d", vhost);
        for (int r = 0; r < t->size; r++) {
            const team_call *o = call_of(t, r, AT);
            cr_assert_not_null(o, "%s: rank %d has no record of call %d", name, r, AT);
            cr_assert_neq(o->rc, 0, "%s: rank %d: call %d succeeded", name, r, AT);
            if (host_ranks(t, vhost) >> r & 1) continue;
            cr_assert_eq(o->rc, RINGD_ERING, "%s: rank %d: %s: %s", name, r, ringd_errname(o->rc),
                         o->msg);
            cr_assert(strstr(o->msg, host), "%s: rank %d: the message does not name %s: %s", name,
                      r, host, o->msg);
        }
        break;
    }
    case PLAY_NOTHING:
        break;
    }
    fprintf(stderr, "  %s: rank 0 got %s: %s\n", name, ringd_errname(call_of(t, 0, AT)->rc),
            call_of(t, 0, AT)->msg);
    fresh_team(t, job + 1, name);
}

static void every_fault(int hosts, int local)
{
    cr_assert_eq(harness_init_local(&H, hosts, local, outcome_yaml), 0, "%s", H.err);
    cr_assert_eq(harness_start(&H, harness_seed("outcomes"), 50), 0, "%s", H.err);
    team *t = team_new(hosts, local);
    int job = 1;
    fresh_team(t, job++, "the start");
    for (fault f = EXIT_BETWEEN; f <= DAEMON_STOP; f++, job += 2)
        play(t, job, f);
    team_free(t);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

Test(outcomes, every_fault_on_2_hosts_with_1_rank_each)
{
    every_fault(2, 1);
}

Test(outcomes, every_fault_on_2_hosts_with_2_ranks_each)
{
    every_fault(2, 2);
}

Test(outcomes, every_fault_on_3_hosts_with_1_rank_each)
{
    every_fault(3, 1);
}

Test(outcomes, every_fault_on_3_hosts_with_2_ranks_each)
{
    every_fault(3, 2);
}

Test(outcomes, every_fault_on_4_hosts_with_1_rank_each)
{
    every_fault(4, 1);
}

Test(outcomes, every_fault_on_4_hosts_with_2_ranks_each)
{
    every_fault(4, 2);
}

/* ---- ranks that disagree ---- */

typedef struct {
    const char *what;
    call_shape common, victim;
} disagreement;

#define BCAST(count, root)                                                                         \
    {                                                                                              \
        RINGD_COLL_BROADCAST, count, RINGD_INT64, RINGD_SUM, root, NULL                            \
    }
#define GATHER(count)                                                                              \
    {                                                                                              \
        RINGD_COLL_ALLGATHER, count, RINGD_INT64, RINGD_SUM, 0, NULL                               \
    }

static const disagreement disagreements[] = {
    {"count", ALLREDUCE_SHAPE, {RINGD_COLL_ALLREDUCE, COUNT + 8, RINGD_INT64, RINGD_SUM, 0, NULL}},
    {"dtype", ALLREDUCE_SHAPE, {RINGD_COLL_ALLREDUCE, COUNT, RINGD_INT32, RINGD_SUM, 0, NULL}},
    {"op", ALLREDUCE_SHAPE, {RINGD_COLL_ALLREDUCE, COUNT, RINGD_INT64, RINGD_MAX, 0, NULL}},
    {"kind", ALLREDUCE_SHAPE, BCAST(COUNT, 0)},
    {"a barrier", ALLREDUCE_SHAPE, {RINGD_COLL_BARRIER, 0, RINGD_INT64, RINGD_SUM, 0, NULL}},
    {"name",
     {RINGD_COLL_ALLREDUCE, COUNT, RINGD_INT64, RINGD_SUM, 0, "weights"},
     {RINGD_COLL_ALLREDUCE, COUNT, RINGD_INT64, RINGD_SUM, 0, "biases"}},
    {"broadcast root", BCAST(COUNT, 0), BCAST(COUNT, 1)},
    {"broadcast size", BCAST(COUNT, 0), BCAST(COUNT / 2, 0)},
    {"allgather count", GATHER(COUNT / 16), GATHER(COUNT / 16 + 1)},
};
#define N_DISAGREEMENTS (int)(sizeof disagreements / sizeof *disagreements)

/* Every kind of disagreement between the last rank and the others: every
 * rank fails it with the same error, never OK on some; the next call, a
 * checked allreduce, succeeds everywhere. */
static void every_disagreement(int hosts, int local)
{
    cr_assert_eq(harness_init_local(&H, hosts, local, outcome_yaml), 0, "%s", H.err);
    cr_assert_eq(harness_start(&H, harness_seed("disagree"), 50), 0, "%s", H.err);
    team *t = team_new(hosts, local);
    team_clear(t);
    t->job = 1;
    t->victim = t->size - 1;
    t->n_pairs = N_DISAGREEMENTS;
    t->calls = 2 * N_DISAGREEMENTS;
    for (int p = 0; p < N_DISAGREEMENTS; p++) {
        t->pair[p].common = disagreements[p].common;
        t->pair[p].victim = disagreements[p].victim;
    }
    team_start(t);
    team_join(t, 120000 * SLOW);
    for (int p = 0; p < N_DISAGREEMENTS; p++) {
        char when[96];
        snprintf(when, sizeof when, "%d hosts x %d, ranks disagree on %s", hosts, local,
                 disagreements[p].what);
        int rc = expect_same(t, all_but(t, 0), 2 * p, when);
        const team_call *c = call_of(t, 0, 2 * p);
        cr_assert_eq(rc, RINGD_EMISMATCH, "%s: %s: %s", when, ringd_errname(rc), c->msg);
        fprintf(stderr, "  %s: %s\n", when, c->msg);
        for (int r = 0; r < t->size; r++)
            expect_correct(t, r, 2 * p + 1, when);
    }
    team_free(t);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

Test(outcomes, every_disagreement_fails_on_every_rank_alike_on_3_hosts_with_1_rank_each)
{
    every_disagreement(3, 1);
}

Test(outcomes, every_disagreement_fails_on_every_rank_alike_on_2_hosts_with_2_ranks_each)
{
    every_disagreement(2, 2);
}

Test(outcomes, every_disagreement_fails_on_every_rank_alike_on_3_hosts_with_2_ranks_each)
{
    every_disagreement(3, 2);
}

/* ---- chaos ---- */

/*
 * A minute of chaos on 3 hosts with 2 ranks each: rank processes exit
 * between calls and in the middle of them, sit out a call (the others time
 * out), get killed from outside; daemons are killed and restarted, or
 * frozen past their heartbeat. A process that is gone is started again (a
 * new life). Every call returns within collective_timeout and a margin,
 * not counting the time its own daemon was frozen (nothing can answer it
 * then) nor the longest time a daemon waited for a CPU meanwhile (a loaded
 * machine's, not ringd's: harness_cpu_wait_ms()); every result that comes back OK is made of
 * exactly one call of each rank, and every rank whose call is in it and that lived to tell got OK
 * too, with the same result. Afterwards fresh processes make 20 checked allreduces.
 */
#define CHAOS_HOSTS 3
#define CHAOS_LOCAL 2
#define CHAOS_SLOTS (CHAOS_HOSTS * CHAOS_LOCAL)
#define CHAOS_CAP 40000 /* calls one slot records, over all its lives */
#define CHAOS_MARGIN_MS 4000
#define CHAOS_MAX_FREEZES 256 /* per host */

/* When a host's daemon was frozen (to 0: it still is). */
typedef struct {
    atomic_llong from, to;
} chaos_freeze;

typedef struct {
    uint64_t key; /* the tag it submitted */
    int32_t rc;
    int unknown; /* rc says its host could not learn how it ended everywhere */
    uint64_t tags[CHAOS_SLOTS];
} chaos_call;

typedef struct {
    atomic_int n;
    int lives;
    pid_t pid;
    char why[TEAM_MSG];      /* a broken rule, or the process itself failed */
    char last_msg[TEAM_MSG]; /* the last error message, for the log */
    char bad[4 * TEAM_MSG];  /* the first result that was not one call, explained */
    int errors[64];          /* failed calls, by -code */
    int64_t longest, starved; /* its longest call, and a daemon's wait for a CPU in it (ms) */
    chaos_call calls[CHAOS_CAP];
} chaos_slot;

typedef struct {
    atomic_int over;
    chaos_slot slot[CHAOS_SLOTS];
    chaos_freeze freezes[CHAOS_HOSTS][CHAOS_MAX_FREEZES];
    atomic_int n_freezes[CHAOS_HOSTS];
    atomic_int daemon[CHAOS_HOSTS]; /* each host's daemon's pid, as restarts change it */
} chaos;

/* Each daemon's time waiting for a CPU so far (harness_cpu_wait_ms()), and
 * the pid it was read for. */
typedef struct {
    pid_t pid[CHAOS_HOSTS];
    long long ms[CHAOS_HOSTS];
} chaos_waits;

static void chaos_read_waits(chaos *ch, chaos_waits *w)
{
    for (int h = 0; h < CHAOS_HOSTS; h++) {
        w->pid[h] = atomic_load(&ch->daemon[h]);
        w->ms[h] = harness_cpu_wait_ms(w->pid[h]);
    }
}

/* The longest any daemon waited for a CPU between two readings (ms): as
 * long as one daemon of the ring waits, no call can end. A daemon started
 * again in between counts from its start. */
static int64_t chaos_starved(const chaos_waits *before, const chaos_waits *after)
{
    int64_t most = 0;
    for (int h = 0; h < CHAOS_HOSTS; h++) {
        long long from = after->pid[h] == before->pid[h] ? before->ms[h] : 0;
        if (after->ms[h] >= 0 && from >= 0 && after->ms[h] - from > most)
            most = after->ms[h] - from;
    }
    return most;
}

/* How long host's daemon was frozen between t0 and t1 (ms). */
static int64_t chaos_frozen(chaos *ch, int host, int64_t t0, int64_t t1)
{
    int64_t sum = 0;
    int n = atomic_load(&ch->n_freezes[host]);
    for (int i = 0; i < n && i < CHAOS_MAX_FREEZES; i++) {
        int64_t a = atomic_load(&ch->freezes[host][i].from);
        int64_t b = atomic_load(&ch->freezes[host][i].to);
        if (!b || b > t1) b = t1;
        if (a < t0) a = t0;
        if (b > a) sum += b - a;
    }
    return sum;
}

static uint64_t chaos_key(int life, int cnt)
{
    return ((uint64_t)(life & 0xfff) << 20 | (uint64_t)cnt) + 1;
}

static void chaos_main(chaos *ch, int r, int life, uint64_t seed)
{
    chaos_slot *sl = &ch->slot[r];
    int host = r / CHAOS_LOCAL;
    ringd_client *c = NULL;
    int64_t *buf = NULL;
    for (int cnt = 0; cnt < (1 << 20) && !atomic_load(&ch->over); cnt++) {
        if (!c) {
            if (team_connect(H.d[host].socket, r % CHAOS_LOCAL, 30000 * SLOW, &c) < 0) {
                if (!atomic_load(&ch->over))
                    snprintf(sl->why, sizeof sl->why, "life %d: cannot connect: %s", life,
                             ringd_last_error(NULL));
                _exit(1);
            }
            if (!(buf = ringd_alloc(c, COUNT * sizeof *buf))) {
                ringd_close(c); /* the daemon went away again */
                c = NULL;
                continue;
            }
        }
        int n = atomic_load(&sl->n);
        if (n >= CHAOS_CAP) break;
        uint64_t key = chaos_key(life, cnt), dice = harness_rand(&seed) % 1000;
        team_fill(buf, COUNT, r, CHAOS_SLOTS, key);
        if (dice < 3) _exit(0); /* exits between calls */
        if (dice < 5) submit_and_exit(c, buf, (unsigned)(harness_rand(&seed) % 3000));
        if (dice < 7)
            usleep((useconds_t)(collective_ms + harness_ms(500)) * 1000); /* sits out a call */
        chaos_waits w0, w1;
        chaos_read_waits(ch, &w0);
        int64_t t0 = team_now_ms();
        int rc = ringd_allreduce(c, buf, COUNT, RINGD_INT64, RINGD_SUM);
        int64_t took = team_now_ms() - t0;
        chaos_read_waits(ch, &w1);
        chaos_call *rec = &sl->calls[n];
        rec->key = key;
        rec->rc = rc;
        if (rc == 0) {
            if (team_decode(buf, COUNT, CHAOS_SLOTS, rec->tags) && !sl->bad[0]) {
                size_t len = (size_t)snprintf(sl->bad, sizeof sl->bad, "call %" PRIx64 ":", key);
                for (int b = 0; b < CHAOS_SLOTS && len < sizeof sl->bad; b++) {
                    if (rec->tags[b] != TEAM_BAD_TAG) continue;
                    len += (size_t)snprintf(sl->bad + len, sizeof sl->bad - len, " rank %d:", b);
                    if (len < sizeof sl->bad)
                        team_explain(buf, COUNT, CHAOS_SLOTS, b, sl->bad + len,
                                     sizeof sl->bad - len);
                    len += strlen(sl->bad + len);
                }
            }
        } else {
            if (-rc < 64) sl->errors[-rc]++;
            snprintf(sl->last_msg, sizeof sl->last_msg, "%s", ringd_last_error(c));
            /* Its daemon died under it, or could not learn how the ring
             * ended it: either way this rank cannot know. */
            rec->unknown = rc == RINGD_ECLOSED || strstr(sl->last_msg, "outcome unknown") != NULL;
            if (rc == RINGD_EPROTO) fprintf(stderr, "chaos: rank %d: %s\n", r, sl->last_msg);
        }
        atomic_store(&sl->n, n + 1);
        /* Not counted: its own daemon frozen (nothing can answer then), and
         * a daemon waiting for a CPU that the loaded machine withheld (the
         * daemons say so too: "heartbeat ... late"). */
        int64_t frozen = chaos_frozen(ch, host, t0, t0 + took);
        int64_t starved = chaos_starved(&w0, &w1);
        if (took > sl->longest) {
            sl->longest = took;
            sl->starved = starved;
        }
        if (took - frozen - starved > (collective_ms + harness_ms(CHAOS_MARGIN_MS)) * SLOW) {
            snprintf(sl->why, sizeof sl->why,
                     "a call took %" PRId64 " ms (its daemon was frozen for %" PRId64
                     " ms of it, a daemon waited %" PRId64 " ms of it for a CPU): %s: %s",
                     took, frozen, starved, ringd_errname(rc), rc ? ringd_last_error(c) : "ok");
            _exit(1);
        }
        if (rc == RINGD_ECLOSED) {
            ringd_close(c);
            c = NULL;
        }
        usleep((useconds_t)(harness_rand(&seed) % 3000));
    }
    if (c) ringd_close(c);
    _exit(0);
}

static const chaos_call *chaos_find(const chaos_slot *sl, uint64_t key)
{
    int lo = 0, hi = atomic_load(&sl->n);
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (sl->calls[mid].key < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < atomic_load(&sl->n) && sl->calls[lo].key == key ? &sl->calls[lo] : NULL;
}

/* Every OK result is one call of each rank, and each of those ranks that
 * recorded its call got OK and the same result, or was told that it cannot
 * know: its daemon died under it (RINGD_ECLOSED), or its host could not
 * learn the outcome (the ring broke between the last host completing it
 * and this one hearing so). */
static void chaos_check(const chaos *ch, int *ok, int *failed, int *unknown)
{
    *ok = *failed = *unknown = 0;
    for (int r = 0; r < CHAOS_SLOTS; r++) {
        const chaos_slot *sl = &ch->slot[r];
        for (int i = 0; i < atomic_load(&sl->n); i++) {
            const chaos_call *c = &sl->calls[i];
            if (c->rc != 0) {
                (*failed)++;
                *unknown += c->unknown;
                continue;
            }
            (*ok)++;
            cr_assert_eq(c->tags[r], c->key, "rank %d: an OK result without its own call in it", r);
            for (int b = 0; b < CHAOS_SLOTS; b++) {
                cr_assert_neq(c->tags[b], TEAM_BAD_TAG,
                              "rank %d: an OK result whose block of rank %d is not one call "
                              "(a mixed sum); the first such: %s",
                              r, b, sl->bad);
                const chaos_call *o = chaos_find(&ch->slot[b], c->tags[b]);
                if (!o || o->unknown) continue; /* it died first, or could not know */
                cr_assert_eq(o->rc, 0,
                             "rank %d got OK for a collective with call %" PRIx64
                             " of rank %d, which got %s",
                             r, c->tags[b], b, ringd_errname(o->rc));
                cr_assert_arr_eq(o->tags, c->tags, sizeof c->tags,
                                 "ranks %d and %d got different results for one collective", r, b);
            }
        }
    }
}

Test(outcomes, a_minute_of_chaos_never_mixes_calls_nor_splits_an_outcome)
{
    int chaos_ms = getenv("RINGD_CHAOS_MS") ? atoi(getenv("RINGD_CHAOS_MS")) : 60000;
    cr_assert_eq(harness_init_local(&H, CHAOS_HOSTS, CHAOS_LOCAL, outcome_yaml), 0, "%s", H.err);
    uint64_t seed = harness_seed("chaos");
    cr_assert_eq(harness_start(&H, seed, 50), 0, "%s", H.err);
    chaos *ch = team_shared(sizeof *ch);
    cr_assert_not_null(ch);
    for (int h = 0; h < CHAOS_HOSTS; h++)
        atomic_store(&ch->daemon[h], H.d[h].pid);
    int kills = 0, restarts = 0, freezes = 0, exits = 0;
    pid_t pids[CHAOS_SLOTS] = {0};
    int64_t end = harness_now_ms() + chaos_ms, next_event = harness_now_ms() + 1000;
    while (harness_now_ms() < end) {
        for (int r = 0; r < CHAOS_SLOTS; r++) {
            int status;
            if (pids[r] > 0 && waitpid(pids[r], &status, WNOHANG) == pids[r]) {
                pids[r] = 0;
                exits++;
                cr_assert_str_empty(ch->slot[r].why, "rank %d: %s", r, ch->slot[r].why);
            }
            if (pids[r] == 0) {
                int life = ++ch->slot[r].lives;
                uint64_t s = harness_rand(&seed);
                pid_t pid = fork();
                cr_assert_geq(pid, 0);
                if (pid == 0) chaos_main(ch, r, life, s);
                pids[r] = pid;
            }
        }
        if (harness_now_ms() >= next_event) {
            next_event = harness_now_ms() + 1000 + (int64_t)(harness_rand(&seed) % 2000);
            int what = (int)(harness_rand(&seed) % 3);
            if (what == 0) {
                int r = (int)(harness_rand(&seed) % CHAOS_SLOTS);
                if (pids[r] > 0) kill(pids[r], SIGKILL);
                kills++;
            } else if (what == 1) {
                int h = (int)(harness_rand(&seed) % CHAOS_HOSTS);
                harness_kill(&H, h);
                harness_sleep_ms(200 + (int)(harness_rand(&seed) % 600));
                cr_assert_eq(harness_spawn(&H, h), 0, "%s", H.err);
                atomic_store(&ch->daemon[h], H.d[h].pid);
                restarts++;
            } else {
                int h = (int)(harness_rand(&seed) % CHAOS_HOSTS);
                int k = atomic_load(&ch->n_freezes[h]);
                cr_assert_lt(k, CHAOS_MAX_FREEZES);
                atomic_store(&ch->freezes[h][k].from, team_now_ms());
                atomic_store(&ch->n_freezes[h], k + 1);
                harness_signal(&H, h, SIGSTOP);
                harness_sleep_ms(heartbeat_ms + harness_ms(500) +
                                 (int)(harness_rand(&seed) % 1000));
                harness_signal(&H, h, SIGCONT);
                atomic_store(&ch->freezes[h][k].to, team_now_ms());
                freezes++;
            }
        }
        harness_sleep_ms(10);
    }
    atomic_store(&ch->over, 1);
    for (int r = 0; r < CHAOS_SLOTS; r++) {
        if (pids[r] <= 0) continue;
        int64_t deadline = harness_now_ms() + 60000 * SLOW;
        int status = 0;
        while (waitpid(pids[r], &status, WNOHANG) == 0 && harness_now_ms() < deadline)
            harness_sleep_ms(10);
        if (harness_now_ms() >= deadline) {
            kill(pids[r], SIGKILL);
            waitpid(pids[r], NULL, 0);
            cr_assert_fail("rank %d did not leave the chaos", r);
        }
        cr_assert_str_empty(ch->slot[r].why, "rank %d: %s", r, ch->slot[r].why);
    }
    int ok, failed, unknown;
    chaos_check(ch, &ok, &failed, &unknown);
    fprintf(stderr,
            "chaos: %d s, %d processes killed, %d daemons restarted, %d frozen, %d exits; "
            "%d calls ok, %d failed (%d of them could not know the outcome)\n",
            chaos_ms / 1000, kills, restarts, freezes, exits, ok, failed, unknown);
    for (int r = 0; r < CHAOS_SLOTS; r++) {
        for (int e = 1; e < 64; e++)
            if (ch->slot[r].errors[e])
                fprintf(stderr, "chaos: rank %d: %d x %s\n", r, ch->slot[r].errors[e],
                        ringd_errname(-e));
        if (ch->slot[r].last_msg[0])
            fprintf(stderr, "chaos: rank %d, last error: %s\n", r, ch->slot[r].last_msg);
        fprintf(stderr,
                "chaos: rank %d, longest call %" PRId64 " ms (a daemon waited %" PRId64
                " ms of it for a CPU)\n",
                r, ch->slot[r].longest, ch->slot[r].starved);
    }
    cr_assert_gt(ok, 100, "too few calls succeeded for the chaos to test anything");
    team_unshare(ch, sizeof *ch);

    team *t = team_new(CHAOS_HOSTS, CHAOS_LOCAL);
    fresh_team(t, 1, "the chaos");
    team_free(t);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

/* ---- a client that dies with thousands queued ---- */

static int count_lines(const char *path, const char *level, const char *what)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, level) && (!what || strstr(line, what));
    fclose(f);
    return n;
}

/* Rank 1 submits 2500 barriers without reading a reply and exits. Its host
 * logs why in a few lines, with the real reason; none of its barriers
 * completes anywhere, so rank 0's barriers, made after, all fail; then
 * fresh processes work. */
Test(outcomes, a_client_that_dies_with_2500_collectives_queued_completes_none_of_them)
{
    enum { QUEUED = 2500, LATER = 3 };
    cr_assert_eq(harness_init_local(&H, 2, 1, outcome_yaml), 0, "%s", H.err);
    cr_assert_eq(harness_start(&H, harness_seed("queued"), 50), 0, "%s", H.err);
    int before = count_lines(H.d[1].log, ": warn: ", NULL);

    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        ringd_client *c;
        if (team_connect(H.d[1].socket, 0, 20000, &c) < 0) _exit(1);
        for (int i = 0; i < QUEUED; i++) {
            ringd_request *req;
            if (ringd_ibarrier(c, &req) < 0) _exit(2);
        }
        _exit(0); /* never reads a reply */
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the queueing client: 0x%x", status);

    ringd_client *c;
    cr_assert_eq(team_connect(H.d[0].socket, 0, 20000, &c), 0, "%s", ringd_last_error(NULL));
    int ok = 0;
    for (int i = 0; i < LATER; i++) {
        int rc = ringd_barrier(c);
        ok += rc == 0;
        if (i == 0)
            fprintf(stderr, "  rank 0's first barrier: %s: %s\n", ringd_errname(rc),
                    rc ? ringd_last_error(c) : "");
    }
    ringd_close(c);
    cr_expect_eq(ok, 0, "%d of rank 0's barriers succeeded, paired with a dead client's", ok);

    int warns = count_lines(H.d[1].log, ": warn: ", NULL) - before;
    cr_expect_leq(warns, 10, "the dead client's host logged %d warn lines", warns);
    cr_expect_eq(count_lines(H.d[1].log, "", "ad file descriptor"), 0,
                 "the log gives a wrong reason (bad file descriptor)");
    cr_expect_geq(count_lines(H.d[1].log, "", "rank 1 (pid"), 1,
                  "the log does not say rank 1 left");

    team *t = team_new(2, 1);
    fresh_team(t, 1, "a client that died with 2500 queued");
    team_free(t);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}
