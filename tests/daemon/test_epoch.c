/*
 * test_epoch.c - the ring's epoch rules (daemon/epoch.c), without sockets:
 * single decisions, then whole rings of N hosts passing EPOCH frames along
 * their links until every host is ready, what a lap settles, and the
 * membership an elastic ring's laps collect.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/epoch.h"
#include "ringd.h"

static frame_epoch frame(uint32_t epoch, uint32_t origin, epoch_phase phase)
{
    frame_epoch f;
    memset(&f, 0, sizeof f);
    f.epoch = epoch;
    f.origin = origin;
    f.phase = (uint8_t)phase;
    f.fail_seq = FRAME_NO_SEQ;
    f.done = UINT64_MAX;
    return f;
}

Test(epoch, a_host_starts_broken_at_epoch_1)
{
    epochs e;
    epochs_init(&e, 4, 2);
    cr_assert_eq(e.epoch, 1);
    cr_assert_not(epochs_ready(&e));
}

Test(epoch, a_new_epoch_is_the_smallest_larger_one_only_its_host_can_make)
{
    for (int n = 1; n <= 9; n++) {
        for (uint32_t seen = 1; seen < 40; seen++) {
            for (int me = 0; me < n; me++) {
                epochs e;
                epochs_init(&e, n, me);
                e.epoch = seen;
                uint32_t x = epochs_next(&e);
                cr_assert_gt(x, seen);
                cr_assert_eq(x % (uint32_t)n, (uint32_t)me);
                cr_assert_leq(x - seen, (uint32_t)n, "the smallest such epoch");
            }
        }
    }
}

Test(epoch, a_larger_break_from_another_host_is_adopted_and_fails_everything)
{
    epochs e;
    epochs_init(&e, 3, 0);
    e.epoch = 10;
    e.phase = RING_READY;
    frame_epoch f = frame(14, 2, EPOCH_BREAK);
    cr_assert_eq(epochs_receive(&e, &f), EPOCH_BROKE);
    cr_assert_eq(e.epoch, 14);
    cr_assert_not(epochs_ready(&e));
}

Test(epoch, an_older_or_equal_epoch_is_dropped)
{
    epochs e;
    epochs_init(&e, 3, 0);
    e.epoch = 10;
    e.phase = RING_READY;
    for (uint32_t x = 5; x <= 10; x++) {
        frame_epoch b = frame(x, 1, EPOCH_BREAK), f = frame(x, 1, EPOCH_FORM),
                    r = frame(x, 1, EPOCH_RESET);
        cr_assert_eq(epochs_receive(&e, &b), EPOCH_DROP);
        cr_assert_eq(epochs_receive(&e, &f), EPOCH_DROP);
        cr_assert_eq(epochs_receive(&e, &r), EPOCH_DROP);
    }
    cr_assert_eq(e.epoch, 10);
    cr_assert(epochs_ready(&e));
}

Test(epoch, a_larger_form_or_reset_is_adopted_and_the_host_waits_for_its_confirm)
{
    for (int p = 0; p < 2; p++) {
        epochs e;
        epochs_init(&e, 3, 0);
        frame_epoch f = frame(5, 2, p ? EPOCH_RESET : EPOCH_FORM);
        cr_assert_eq(epochs_receive(&e, &f), p ? EPOCH_RESETTING : EPOCH_REFORMING);
        cr_assert_eq(e.epoch, 5);
        cr_assert_not(epochs_ready(&e));
        frame_epoch c = frame(5, 2, EPOCH_CONFIRM);
        cr_assert_eq(epochs_receive(&e, &c), EPOCH_CONFIRMED);
        epochs_settle(&e, &c);
        cr_assert(epochs_ready(&e));
    }
}

Test(epoch, a_confirm_of_an_epoch_never_proposed_here_goes_no_further)
{
    epochs e;
    epochs_init(&e, 3, 0);
    frame_epoch c = frame(5, 2, EPOCH_CONFIRM);
    cr_assert_eq(epochs_receive(&e, &c), EPOCH_DROP);
    cr_assert_eq(e.epoch, 1);
}

Test(epoch, a_hosts_own_lap_coming_back_means_every_link_carried_it)
{
    epochs e;
    epochs_init(&e, 4, 1);
    frame_epoch lap;
    uint32_t x = epochs_start(&e, EPOCH_FORM, &lap);
    cr_assert_eq(lap.epoch, x);
    cr_assert_eq(epochs_receive(&e, &lap), EPOCH_CAME_ROUND);
    frame_epoch c = epochs_confirmation(&e, &lap);
    cr_assert_eq(c.phase, EPOCH_CONFIRM);
    /* Its own CONFIRM coming back stops there. */
    cr_assert_eq(epochs_receive(&e, &c), EPOCH_DROP);
}

Test(epoch, a_handshake_raises_the_epoch_without_making_the_host_ready)
{
    epochs e;
    epochs_init(&e, 2, 0);
    epochs_raise(&e, 7);
    cr_assert_eq(e.epoch, 7);
    epochs_raise(&e, 3);
    cr_assert_eq(e.epoch, 7);
    cr_assert_not(epochs_ready(&e));
    cr_assert(epochs_current(&e, 7));
    cr_assert_not(epochs_current(&e, 6));
}

Test(epoch, the_first_failure_is_the_earliest_collective_then_its_cause)
{
    epoch_failure none = {.seq = FRAME_NO_SEQ};
    epoch_failure late = {.code = RINGD_ETIMEDOUT, .seq = 3, .cls = EPOCH_CONSEQUENCE, .origin = 0};
    epoch_failure cause = {.code = RINGD_EMISMATCH, .seq = 3, .cls = EPOCH_CAUSE, .origin = 2};
    epoch_failure earlier = {.code = RINGD_ETIMEDOUT, .seq = 2, .cls = EPOCH_CONSEQUENCE};
    cr_assert(epochs_failure_first(&late, &none));
    cr_assert_not(epochs_failure_first(&none, &late));
    cr_assert(epochs_failure_first(&cause, &late));
    cr_assert(epochs_failure_first(&earlier, &cause));
}

/* A ring of n hosts whose links carry EPOCH frames in order, host h to
 * h+1, as links.c sends them; an elastic ring's links close over the hosts
 * that are out (host h to the next host not out). */
#define MAX_HOSTS 9
#define QUEUE 64
#define MAX_ENDED 96

typedef struct {
    int n;
    int min_hosts; /* an elastic ring's; 0: a fixed ring */
    epochs h[MAX_HOSTS];
    frame_epoch q[MAX_HOSTS][QUEUE]; /* on the link from host i to i+1 */
    int head[MAX_HOSTS], tail[MAX_HOSTS];
    int down[MAX_HOSTS];            /* the link from host i is broken: frames are lost */
    frame_epoch settled[MAX_HOSTS]; /* the last CONFIRM each host settled with */
    int n_settled[MAX_HOSTS];
    frame_epoch missed[MAX_HOSTS]; /* the last CONFIRM a host settled late (it missed it) */
    int n_missed[MAX_HOSTS];
    int lose_confirm[MAX_HOSTS]; /* the link from host i loses the next CONFIRM */
    uint64_t out; /* bit h: host h is out of reach, and the links close over it */
    uint32_t watch;               /* an epoch whose settling is followed; 0: none */
    frame_epoch first[MAX_HOSTS]; /* the first confirmation that settled it on each host */
    int n_first[MAX_HOSTS];
    /* What each host ended each of its ready epochs with: the first
     * confirmation that settled it there, as its ranks' answers do. */
    struct {
        uint32_t of, by; /* the epoch ended; the confirmation's epoch */
        int code;
        uint64_t fail_seq, done, top;
        int resized; /* its collectives failed with a resize */
        char reason[FRAME_MAX_TEXT + 1];
    } ended[MAX_HOSTS][MAX_ENDED];
    int n_ended[MAX_HOSTS];
} ring_sim;

#define BIT(h) (UINT64_C(1) << (h))

/* RINGD_TEST_TRACE_SEED=S prints what the random schedules' seed S does. */
static int tracing;
#define trace(...) (tracing ? (void)fprintf(stderr, __VA_ARGS__) : (void)0)

#define MAJORITY(n) ((n) / 2 + 1) /* min_hosts as ringd's docs advise */

static const char *phase_name(int phase)
{
    static const char *names[] = {"?", "BREAK", "FORM", "CONFIRM", "RESET", "LEAVE"};
    return phase > 0 && phase < 6 ? names[phase] : "?";
}

/* The host the right link of host h goes to. */
static int right_of(const ring_sim *r, int h)
{
    int to = (h + 1) % r->n;
    while (to != h && (r->out & BIT(to)))
        to = (to + 1) % r->n;
    return to;
}

static void send_right(ring_sim *r, int from, frame_epoch f)
{
    /* As links.c sends it: what the codec takes, the peer must take. */
    static uint8_t buf[FRAME_HEADER_SIZE + FRAME_MAX_CONTROL_BODY];
    frame_header hdr;
    frame_epoch back;
    int len = frame_encode_epoch(buf, sizeof buf, &f);
    cr_assert_gt(len, 0, "host %d: an EPOCH frame the codec cannot encode", from);
    cr_assert_eq(frame_decode_header(buf, (size_t)len, &hdr), FRAME_OK);
    cr_assert_eq(
        frame_decode_epoch(&hdr, buf + FRAME_HEADER_SIZE, &back), FRAME_OK,
        "host %d sends a malformed %s of epoch %u (prev %u, prior %u of %u, waited %u of %u)", from,
        phase_name(f.phase), f.epoch, f.prev_epoch, f.prior.epoch, f.prior.prev_epoch,
        f.waited.epoch, f.waited.prev_epoch);
    if (r->down[from]) return;
    if (f.phase == EPOCH_CONFIRM && r->lose_confirm[from]) {
        r->lose_confirm[from] = 0;
        return;
    }
    cr_assert_lt(r->tail[from] - r->head[from], QUEUE);
    r->q[from][r->tail[from]++ % QUEUE] = f;
}

static void follow(ring_sim *r, int h, const frame_epoch *c)
{
    if (r->watch && c->prev_epoch == r->watch && !r->n_first[h]++) r->first[h] = *c;
}

static uint32_t newest_ready(const epochs *e)
{
    return e->n_ready ? e->ready[e->n_ready - 1].epoch : 0;
}

/* Host h ends its ready epoch `of` with c, unless an earlier one did. */
static void end_epoch(ring_sim *r, int h, uint32_t of, const frame_epoch *c)
{
    if (!of) return;
    for (int i = 0; i < r->n_ended[h]; i++)
        if (r->ended[h][i].of == of) return;
    cr_assert_lt(r->n_ended[h], MAX_ENDED);
    int i = r->n_ended[h]++;
    r->ended[h][i].of = of;
    r->ended[h][i].by = c->epoch;
    r->ended[h][i].code = c->code;
    r->ended[h][i].fail_seq = c->fail_seq;
    r->ended[h][i].done = c->done;
    r->ended[h][i].top = c->top;
    r->ended[h][i].resized = !!(c->flags & EPOCH_FLAG_RESIZED);
    snprintf(r->ended[h][i].reason, sizeof r->ended[h][i].reason, "%s", c->reason);
}

static int below_min_hosts(const ring_sim *r, const frame_epoch *c)
{
    return r->min_hosts && c->members && __builtin_popcountll(c->members) < r->min_hosts;
}

/* As links.c settles a confirmation: one this host missed comes first. */
static void settle(ring_sim *r, int h, const frame_epoch *c)
{
    if (epochs_missed(&r->h[h], c)) {
        frame_epoch p = epochs_prior_confirm(&c->prior);
        trace(
            "  host %d settles the prior %u (prev %u, done %llu, flags 0x%x, code %d) it missed\n",
            h, p.epoch, p.prev_epoch, (unsigned long long)p.done, p.flags, p.code);
        if ((p.flags & EPOCH_FLAG_INCOMPLETE) && !r->h[h].waited.epoch) {
            frame_epoch w = p; /* a waiting one's verdict, then a resize */
            w.flags &= (uint8_t) ~(EPOCH_FLAG_RESIZED | EPOCH_FLAG_INCOMPLETE);
            end_epoch(r, h, newest_ready(&r->h[h]), &w);
        }
        end_epoch(r, h, newest_ready(&r->h[h]), &p);
        epochs_settle_missed(&r->h[h], &p);
        r->missed[h] = p;
        r->n_missed[h]++;
        follow(r, h, &p);
    }
    if (epochs_missed_waited(&r->h[h], c)) {
        frame_epoch w = epochs_prior_confirm(&c->waited);
        trace("  host %d settles the waited %u (prev %u, done %llu, code %d) it missed\n", h,
              w.epoch, w.prev_epoch, (unsigned long long)w.done, w.code);
        end_epoch(r, h, newest_ready(&r->h[h]), &w);
        epochs_settle_waited(&r->h[h], &w);
        follow(r, h, &w);
    }
    /* Of another epoch than its newest ready one, c ends nothing here: the
     * gather answers what it holds "outcome unknown". */
    trace("  host %d settles %u (prev %u, done %llu, flags 0x%x, code %d, prior %u, waited %u)\n",
          h, c->epoch, c->prev_epoch, (unsigned long long)c->done, c->flags, c->code,
          c->prior.epoch, c->waited.epoch);
    /* A ring below min_hosts settles nothing: its hosts wait for the
     * verdict of the others (links.c). */
    int below = below_min_hosts(r, c);
    if (!below && c->prev_epoch == newest_ready(&r->h[h])) end_epoch(r, h, c->prev_epoch, c);
    epochs_settle(&r->h[h], c);
    if (!below && (c->flags & EPOCH_FLAG_INCOMPLETE)) epochs_keep_waited(&r->h[h], c);
    r->settled[h] = *c;
    r->n_settled[h]++;
    follow(r, h, c);
}

static void lap(ring_sim *r, int h, epoch_phase phase);

/* Delivers one frame on the link from host `from`; returns 0 if none. */
static int deliver(ring_sim *r, int from)
{
    if (r->head[from] == r->tail[from]) return 0;
    frame_epoch f = r->q[from][r->head[from]++ % QUEUE];
    int to = right_of(r, from);
    epoch_action a = epochs_receive(&r->h[to], &f);
    trace("  %d -> %d: %s %u (origin %u, prev %u, done %llu, members 0x%llx): action %d\n", from,
          to, phase_name(f.phase), f.epoch, f.origin, f.prev_epoch, (unsigned long long)f.done,
          (unsigned long long)f.members, (int)a);
    switch (a) {
    case EPOCH_BROKE:
    case EPOCH_RESETTING:
    case EPOCH_REFORMING:
        send_right(r, to, f);
        break;
    case EPOCH_CONFIRMED:
        send_right(r, to, f);
        settle(r, to, &f);
        break;
    case EPOCH_CAME_ROUND: {
        frame_epoch c = epochs_confirmation(&r->h[to], &f);
        if (below_min_hosts(r, &c)) c.flags |= EPOCH_FLAG_INCOMPLETE; /* not ready */
        send_right(r, to, c);
        if (!epochs_hold(&r->h[to], &c)) settle(r, to, &c);
        break;
    }
    case EPOCH_HELD:
        send_right(r, to, f);
        break;
    case EPOCH_BREAK_ROUND:
        lap(r, to, EPOCH_FORM);
        break;
    case EPOCH_DROP:
        break;
    }
    return 1;
}

static void lap(ring_sim *r, int h, epoch_phase phase)
{
    frame_epoch f;
    epochs_start(&r->h[h], phase, &f);
    send_right(r, h, f);
}

/* Delivers frames in an order drawn from seed until no link carries any. */
static void run(ring_sim *r, unsigned seed)
{
    for (int budget = 100000; budget > 0; budget--) {
        int any = 0;
        for (int k = 0; k < r->n; k++) {
            seed = seed * 1103515245u + 12345u;
            any |= deliver(r, (int)((seed >> 16) % (unsigned)r->n));
        }
        for (int k = 0; k < r->n && !any; k++)
            any |= deliver(r, k);
        if (!any) return;
    }
    cr_assert_fail("frames kept travelling");
}

/* A ring of n hosts; an elastic one if min_hosts > 0 (a lap may then close
 * over n - min_hosts hosts, and the hosts fewer than that many hops after
 * a CONFIRM's origin hold it until its second pass). */
static void init_ring(ring_sim *r, int n, int min_hosts)
{
    memset(r, 0, sizeof *r);
    r->n = n;
    r->min_hosts = min_hosts;
    for (int h = 0; h < n; h++) {
        epochs_init(&r->h[h], n, h);
        if (min_hosts) epochs_set_elastic(&r->h[h], min_hosts);
    }
}

/* The same, once every host has started a FORM and the laps went round. */
static void start_ring_of(ring_sim *r, int n, int min_hosts)
{
    init_ring(r, n, min_hosts);
    for (int h = 0; h < n; h++)
        lap(r, h, EPOCH_FORM);
    run(r, 7);
}

static void start_ring(ring_sim *r, int n)
{
    start_ring_of(r, n, 0);
}

static void assert_all_ready_in_one_epoch(const ring_sim *r)
{
    for (int h = 0; h < r->n; h++) {
        cr_assert(epochs_ready(&r->h[h]), "N=%d: host %d is not ready", r->n, h);
        cr_assert_eq(r->h[h].epoch, r->h[0].epoch, "N=%d: host %d is at epoch %u, host 0 at %u",
                     r->n, h, r->h[h].epoch, r->h[0].epoch);
    }
}

/* Every host but one (closed over) ready in one epoch. */
static void assert_ready_but(const ring_sim *r, int out)
{
    int first = out == 0 ? 1 : 0;
    for (int h = 0; h < r->n; h++) {
        if (h == out) continue;
        cr_assert(epochs_ready(&r->h[h]), "N=%d: host %d is not ready", r->n, h);
        cr_assert_eq(r->h[h].epoch, r->h[first].epoch, "N=%d: host %d at epoch %u, not %u", r->n, h,
                     r->h[h].epoch, r->h[first].epoch);
    }
}

Test(epoch, links_coming_up_in_any_order_leave_every_host_ready_in_the_same_epoch)
{
    for (int n = 2; n <= MAX_HOSTS; n++) {
        for (unsigned seed = 1; seed <= 30; seed++) {
            ring_sim r;
            init_ring(&r, n, 0);
            /* Every right link comes up, in an order drawn from seed, with
             * frames in flight meanwhile. */
            unsigned s = seed;
            int order[MAX_HOSTS];
            for (int h = 0; h < n; h++)
                order[h] = h;
            for (int h = n - 1; h > 0; h--) {
                s = s * 1103515245u + 12345u;
                int k = (int)((s >> 16) % (unsigned)(h + 1)), t = order[h];
                order[h] = order[k];
                order[k] = t;
            }
            for (int k = 0; k < n; k++) {
                lap(&r, order[k], EPOCH_FORM);
                deliver(&r, order[(k + 1) % n]);
            }
            run(&r, seed);
            assert_all_ready_in_one_epoch(&r);
        }
    }
}

Test(epoch, a_break_reaches_every_host_up_to_the_next_break_and_the_ring_re_forms)
{
    for (int n = 2; n <= MAX_HOSTS; n++) {
        ring_sim r;
        start_ring(&r, n);
        assert_all_ready_in_one_epoch(&r);
        /* The link from host 0 to host 1 breaks: host 1 starts a BREAK,
         * host 0 (no right link) adopts one of its own. */
        r.down[0] = 1;
        epochs_start(&r.h[0], EPOCH_BREAK, NULL);
        uint32_t b = epochs_start(&r.h[1], EPOCH_BREAK, NULL);
        frame_epoch br = frame(b, 1, EPOCH_BREAK);
        send_right(&r, 1, br);
        run(&r, 3);
        for (int h = 0; h < n; h++)
            cr_assert_not(epochs_ready(&r.h[h]), "N=%d: host %d still ready after the break", n, h);
        /* The link comes back: host 0's right link forms. */
        r.down[0] = 0;
        lap(&r, 0, EPOCH_FORM);
        run(&r, 11);
        assert_all_ready_in_one_epoch(&r);
    }
}

/*
 * Nemesis finding 4 (tests/FAULTS.md): host 1 cannot reach host 2 and
 * connects to host 3 (an asymmetric cut), which drops its link from host 2
 * for it. Host 1's right link came up first: its FORM is of an older epoch
 * than the BREAK host 3 starts as it drops host 2, and is dropped on the
 * way. Every link of the ring 0 -> 1 -> 3 -> 0 is up; the BREAK coming
 * round to host 3 is what says so, and host 3 forms the ring.
 */
Test(epoch, a_break_that_comes_round_to_its_host_forms_the_ring)
{
    ring_sim r;
    start_ring(&r, 4);
    assert_all_ready_in_one_epoch(&r);
    r.out = BIT(2);
    frame_epoch form;
    uint32_t f = epochs_start(&r.h[1], EPOCH_FORM, &form);
    epochs_raise(&r.h[3], f); /* host 1's HELLO */
    uint32_t b = epochs_start(&r.h[3], EPOCH_BREAK, NULL);
    cr_assert_gt(b, f);
    send_right(&r, 1, form);
    send_right(&r, 3, frame(b, 3, EPOCH_BREAK));
    deliver(&r, 1); /* host 1's FORM reaches host 3, in epoch b: dropped */
    cr_assert_eq(r.h[3].epoch, b);
    run(&r, 5);
    for (int h = 0; h < 4; h++) {
        if (h == 2) continue;
        cr_assert(epochs_ready(&r.h[h]), "host %d is not ready: nothing formed the ring", h);
        cr_assert_eq(r.h[h].epoch, r.h[3].epoch);
    }
}

Test(epoch, a_reset_settles_the_collectives_completed_on_every_host_and_the_first_failure)
{
    for (int n = 2; n <= MAX_HOSTS; n++) {
        ring_sim r;
        start_ring(&r, n);
        /* Each host completed a different number; host n-1 found a failure
         * of #4 and another host one of #6, later. */
        for (int h = 0; h < n; h++)
            epochs_completed(&r.h[h], (uint64_t)(5 + h));
        epoch_failure late = {
            .code = RINGD_ETIMEDOUT, .seq = 6, .cls = EPOCH_CONSEQUENCE, .origin = 0};
        snprintf(late.reason, sizeof late.reason, "#6 timed out");
        epochs_note_failure(&r.h[0], &late);
        epoch_failure first = {
            .code = RINGD_EMISMATCH, .seq = 4, .cls = EPOCH_CAUSE, .origin = (uint32_t)n - 1};
        snprintf(first.reason, sizeof first.reason, "#4 differs between ranks");
        epochs_note_failure(&r.h[n - 1], &first);
        lap(&r, n - 1, EPOCH_RESET);
        run(&r, 5);
        assert_all_ready_in_one_epoch(&r);
        for (int h = 0; h < n; h++) {
            const frame_epoch *c = &r.settled[h];
            cr_assert_eq(c->done, 5, "N=%d host %d: %llu confirmed, the least is 5", n, h,
                         (unsigned long long)c->done);
            cr_assert_eq(c->code, RINGD_EMISMATCH);
            cr_assert_eq(c->fail_seq, 4);
            cr_assert_str_eq(c->reason, "#4 differs between ranks");
        }
    }
}

/*
 * A CONFIRM lost on one link: the hosts after it went round on the lap but
 * never heard how it ended, so they never settled the epoch it settled nor
 * knew where the new one started. The next lap settles the new epoch and
 * carries the lost verdict with it (the prior): each of those hosts
 * settles that first, so every host counts from the same start.
 */
Test(epoch, a_host_that_missed_a_confirm_settles_it_from_the_next_lap_first)
{
    for (int n = 2; n <= MAX_HOSTS; n++) {
        ring_sim r;
        start_ring(&r, n);
        uint32_t e0 = r.h[0].epoch;
        for (int h = 0; h < n; h++) {
            epochs_submitted(&r.h[h], 3);
            epochs_completed(&r.h[h], 2);
        }
        epoch_failure f = {.code = RINGD_EMISMATCH, .seq = 2, .cls = EPOCH_CAUSE, .origin = 0};
        snprintf(f.reason, sizeof f.reason, "#2 differs between ranks");
        epochs_note_failure(&r.h[0], &f);
        /* Host 0's RESET goes round; its CONFIRM is lost on the way to host 1. */
        r.lose_confirm[0] = 1;
        lap(&r, 0, EPOCH_RESET);
        run(&r, 5);
        cr_assert(epochs_ready(&r.h[0]));
        uint32_t e1 = r.h[0].epoch;
        for (int h = 1; h < n; h++)
            cr_assert_not(epochs_ready(&r.h[h]), "N=%d: host %d never got the CONFIRM", n, h);
        /* Host 0 ran epoch e1 alone for 4 collectives; host 1 times out. */
        epochs_submitted(&r.h[0], 4);
        epoch_failure t = {.code = RINGD_ETIMEDOUT, .seq = 0, .cls = EPOCH_CAUSE, .origin = 1};
        snprintf(t.reason, sizeof t.reason, "#0 timed out");
        epochs_note_failure(&r.h[1], &t);
        lap(&r, 1, EPOCH_RESET);
        run(&r, 9);
        assert_all_ready_in_one_epoch(&r);
        cr_assert_eq(r.n_missed[0], 0, "host 0 settled e1 when it came");
        for (int h = 0; h < n; h++) {
            const frame_epoch *c = &r.settled[h];
            cr_assert_eq(c->prev_epoch, e1, "N=%d host %d", n, h);
            cr_assert_eq(c->done, 0, "nothing of e1 completed on every host");
            cr_assert_eq(c->top, 4, "N=%d host %d: e1 starts where e0's verdict cut it", n, h);
            if (h == 0) continue;
            cr_assert_eq(r.n_missed[h], 1, "N=%d: host %d settles the lost CONFIRM", n, h);
            const frame_epoch *m = &r.missed[h];
            cr_assert_eq(m->epoch, e1);
            cr_assert_eq(m->prev_epoch, e0);
            cr_assert_eq(m->top, 3);
            cr_assert_eq(m->done, 2);
            cr_assert_eq(m->code, RINGD_EMISMATCH);
            cr_assert_str_eq(m->reason, "#2 differs between ranks");
        }
    }
}

/* A host that missed two CONFIRMs in a row cannot place itself: it settles
 * none late (the prior is not of the epoch it knows). */
Test(epoch, a_prior_of_an_epoch_a_host_does_not_know_is_not_settled)
{
    epochs e;
    epochs_init(&e, 3, 1);
    e.epoch = 9;
    frame_epoch c = frame(12, 0, EPOCH_CONFIRM);
    c.prev_epoch = 9;
    c.prior = (frame_prior){.epoch = 9, .prev_epoch = 5};
    cr_assert_not(epochs_missed(&e, &c), "this host was never ready in 5");
}

Test(epoch, a_host_that_restarted_does_not_count_for_an_epoch_before_it)
{
    ring_sim r;
    start_ring(&r, 3);
    for (int h = 0; h < 3; h++)
        epochs_completed(&r.h[h], 7);
    /* Host 2 restarts: it knows nothing of the old epochs but what the
     * handshake told it. */
    uint32_t old = r.h[0].epoch;
    epochs_init(&r.h[2], 3, 2);
    epochs_raise(&r.h[2], old);
    lap(&r, 0, EPOCH_FORM);
    run(&r, 9);
    assert_all_ready_in_one_epoch(&r);
    for (int h = 0; h < 3; h++) {
        cr_assert_eq(r.settled[h].prev_epoch, old);
        cr_assert_eq(r.settled[h].done, 7, "host %d: the survivors' count stands", h);
    }
}

/* The same, when the restarted host starts the lap: it was never ready, so
 * the first host on the lap that was settles its epoch (else the others
 * would start the next epoch at different collectives). */
Test(epoch, a_lap_started_by_a_host_that_was_never_ready_settles_the_others_last_epoch)
{
    for (int n = 2; n <= MAX_HOSTS; n++) {
        ring_sim r;
        start_ring(&r, n);
        uint32_t old = r.h[0].epoch;
        for (int h = 0; h < n; h++) {
            epochs_submitted(&r.h[h], 9);
            epochs_completed(&r.h[h], (uint64_t)(6 + h % 2));
        }
        epochs_init(&r.h[n - 1], n, n - 1);
        epochs_raise(&r.h[n - 1], old);
        lap(&r, n - 1, EPOCH_FORM);
        run(&r, 11);
        assert_all_ready_in_one_epoch(&r);
        for (int h = 0; h < n; h++) {
            cr_assert_eq(r.settled[h].prev_epoch, old, "N=%d host %d", n, h);
            cr_assert_eq(r.settled[h].done, 6, "N=%d host %d: %llu", n, h,
                         (unsigned long long)r.settled[h].done);
            cr_assert_eq(r.settled[h].top, 9, "N=%d host %d: top %llu", n, h,
                         (unsigned long long)r.settled[h].top);
        }
    }
}

Test(epoch, a_host_that_lost_a_rank_keeps_the_ring_waiting_and_says_for_what)
{
    ring_sim r;
    start_ring(&r, 4);
    epochs_set_members(&r.h[2], 0, "rank 2 (pid 4242) on host h2 exited");
    lap(&r, 2, EPOCH_RESET);
    run(&r, 13);
    for (int h = 0; h < 4; h++) {
        cr_assert_not(epochs_ready(&r.h[h]), "host %d is ready without rank 2", h);
        cr_assert_eq(r.h[h].phase, RING_WAITING);
        cr_assert(strstr(r.h[h].waiting, "rank 2 (pid 4242) on host h2 exited") != NULL, "%s",
                  r.h[h].waiting);
    }
    /* A process takes its place: host 2 forms, and every host is ready. */
    epochs_set_members(&r.h[2], 1, "");
    lap(&r, 2, EPOCH_FORM);
    run(&r, 17);
    assert_all_ready_in_one_epoch(&r);
}

/* The elastic ring: laps collect the hosts they pass, and a confirmation
 * that differs from the ring its origin knows is a new membership. */

static uint64_t all_hosts(int n)
{
    return n >= 64 ? UINT64_MAX : BIT(n) - 1;
}

Test(epoch, an_elastic_ring_of_every_configured_host_confirms_all_of_them_unresized)
{
    for (int n = 2; n <= MAX_HOSTS; n++) {
        ring_sim r;
        start_ring_of(&r, n, MAJORITY(n));
        assert_all_ready_in_one_epoch(&r);
        /* The first laps, then a lap with nothing changed. */
        for (int k = 0; k < 2; k++) {
            for (int h = 0; h < n; h++) {
                const frame_epoch *c = &r.settled[h];
                cr_assert_eq(c->members, all_hosts(n), "N=%d host %d: members %#llx", n, h,
                             (unsigned long long)c->members);
                cr_assert_not(c->flags & EPOCH_FLAG_RESIZED, "N=%d host %d: resized", n, h);
                cr_assert_eq(c->members_epoch, 0, "N=%d host %d", n, h);
                cr_assert_str_eq(c->members_why, "");
                cr_assert_eq(r.h[h].members, all_hosts(n));
                cr_assert_eq(r.h[h].members_epoch, 0, "the configured ring");
            }
            lap(&r, n - 1, EPOCH_RESET);
            run(&r, 19);
            assert_all_ready_in_one_epoch(&r);
        }
    }
}

Test(epoch, a_lap_that_closes_over_a_host_confirms_a_new_membership_on_every_host_it_passed)
{
    for (int n = 3; n <= MAX_HOSTS; n++) {
        for (int gone = 0; gone < n; gone++) {
            ring_sim r;
            start_ring_of(&r, n, MAJORITY(n));
            int before = r.n_settled[gone];
            /* Host `gone` is out of reach: its left neighbour closes over
             * it, and forms with the host after it. */
            int left = (gone + n - 1) % n;
            r.out = BIT(gone);
            epochs_note(&r.h[left], "h unreachable for 10 s");
            frame_epoch f;
            uint32_t x = epochs_start(&r.h[left], EPOCH_FORM, &f);
            send_right(&r, left, f);
            run(&r, 23);

            uint64_t members = all_hosts(n) & ~BIT(gone);
            for (int h = 0; h < n; h++) {
                if (h == gone) continue;
                const frame_epoch *c = &r.settled[h];
                cr_assert(epochs_ready(&r.h[h]), "N=%d gone %d: host %d not ready", n, gone, h);
                cr_assert_eq(r.h[h].epoch, x);
                cr_assert_eq(c->epoch, x);
                cr_assert(c->flags & EPOCH_FLAG_RESIZED, "N=%d gone %d host %d", n, gone, h);
                cr_assert_eq(c->members, members, "N=%d gone %d host %d: %#llx", n, gone, h,
                             (unsigned long long)c->members);
                cr_assert_eq(c->members_epoch, x, "agreed in the lap's epoch");
                cr_assert_eq(r.h[h].members, members);
                cr_assert_eq(r.h[h].members_epoch, x);
            }
            /* The host closed over heard nothing of it. */
            cr_assert_eq(r.n_settled[gone], before);
            cr_assert_eq(r.h[gone].members, all_hosts(n));
            cr_assert_eq(r.h[gone].members_epoch, 0);

            /* The next lap round the smaller ring changes nothing. */
            lap(&r, (gone + 1) % n, EPOCH_RESET);
            run(&r, 29);
            for (int h = 0; h < n; h++) {
                if (h == gone) continue;
                cr_assert(epochs_ready(&r.h[h]));
                cr_assert_not(r.settled[h].flags & EPOCH_FLAG_RESIZED, "N=%d gone %d host %d", n,
                              gone, h);
                cr_assert_eq(r.settled[h].members, members);
                cr_assert_eq(r.settled[h].members_epoch, x, "still the membership of epoch %u", x);
            }
        }
    }
}

Test(epoch, a_host_of_another_membership_makes_an_otherwise_unchanged_lap_a_resize)
{
    ring_sim r;
    start_ring_of(&r, 4, 4); /* spare 0: a CONFIRM settles where it passes */
    /* Host 2 is closed over: hosts 0, 1 and 3 resize in epoch x. */
    r.out = BIT(2);
    lap(&r, 1, EPOCH_FORM);
    run(&r, 31);
    uint32_t x = r.h[1].epoch;
    cr_assert_eq(r.h[0].members_epoch, x);
    /* Host 2 is back: a lap from host 3 takes it in, but the CONFIRM of the
     * new membership (epoch y) is lost on the link from host 1 to host 2. */
    r.out = 0;
    lap(&r, 3, EPOCH_FORM);
    for (int from = 3, k = 0; k < 4; k++, from = (from + 1) % 4)
        cr_assert(deliver(&r, from), "the FORM at host %d", from);
    for (int from = 3, k = 0; k < 2; k++, from = (from + 1) % 4)
        cr_assert(deliver(&r, from), "the CONFIRM at host %d", from);
    r.head[1] = r.tail[1];
    uint32_t y = r.h[3].epoch;
    for (int h = 0; h < 4; h++) {
        if (h == 2) continue;
        cr_assert_eq(r.h[h].members, all_hosts(4), "host %d", h);
        cr_assert_eq(r.h[h].members_epoch, y, "host %d", h);
    }
    cr_assert_eq(r.h[2].members, all_hosts(4));
    cr_assert_eq(r.h[2].members_epoch, 0, "host 2 missed it");
    cr_assert_not(epochs_ready(&r.h[2]));

    /* The next lap passes the same hosts as host 1's membership, but host
     * 2 was in another one: the ring that forms is a new membership. */
    frame_epoch f;
    uint32_t z = epochs_start(&r.h[1], EPOCH_FORM, &f);
    send_right(&r, 1, f);
    run(&r, 37);
    assert_all_ready_in_one_epoch(&r);
    for (int h = 0; h < 4; h++) {
        const frame_epoch *c = &r.settled[h];
        cr_assert_eq(c->epoch, z);
        cr_assert_eq(c->members, all_hosts(4));
        cr_assert(c->flags & EPOCH_FLAG_RESIZED, "host %d", h);
        cr_assert_eq(c->members_epoch, z);
        cr_assert_eq(r.h[h].members_epoch, z, "host %d", h);
    }
}

Test(epoch, a_lap_carries_why_hosts_were_closed_over_until_a_resize_settles)
{
    ring_sim r;
    start_ring_of(&r, 5, MAJORITY(5));
    /* Hosts 1 and 2 are out of reach: host 0 closes over both, one after
     * the other, and host 3 (whose left link came from host 2) has
     * something to say too. */
    r.out = BIT(1) | BIT(2);
    epochs_note(&r.h[0], "h1 unreachable for 10 s");
    epochs_note(&r.h[0], "h2 unreachable for 10 s");
    epochs_note(&r.h[3], "h2 left");
    lap(&r, 0, EPOCH_FORM);
    run(&r, 41);
    for (int h = 0; h < 5; h++) {
        if (h == 1 || h == 2) continue;
        const frame_epoch *c = &r.settled[h];
        cr_assert(c->flags & EPOCH_FLAG_RESIZED);
        cr_assert_eq(c->members, BIT(0) | BIT(3) | BIT(4));
        /* In lap order, from the origin, "; " apart. */
        cr_assert_str_eq(c->members_why,
                         "h1 unreachable for 10 s; h2 unreachable for 10 s; h2 left");
        cr_assert_str_eq(r.h[h].note, "", "host %d: said once, in the resize", h);
    }
    /* The next lap names nothing. */
    lap(&r, 3, EPOCH_RESET);
    run(&r, 43);
    cr_assert_str_eq(r.settled[4].members_why, "");
    cr_assert_not(r.settled[4].flags & EPOCH_FLAG_RESIZED);
}

/* A host closed over while it was frozen or cut off never heard how the
 * ring ended its last epoch (the lap that closed over it did not pass it).
 * The lap that takes it back carries that verdict, and it settles it
 * first: its collectives of that epoch end as they did on every other
 * host. */
Test(epoch, a_host_taken_back_settles_the_verdict_of_the_lap_that_closed_over_it)
{
    for (int n = 3; n <= MAX_HOSTS; n++) {
        int gone = n - 1, left = n - 2;
        ring_sim r;
        start_ring_of(&r, n, MAJORITY(n));
        uint32_t e0 = r.h[0].epoch;
        r.out = BIT(gone);
        epochs_note(&r.h[left], "h unreachable for 10 s");
        lap(&r, left, EPOCH_FORM);
        run(&r, 31);
        uint32_t x = r.h[0].epoch;
        cr_assert_eq(r.n_missed[gone], 0);
        /* The smaller ring ran 5 collectives, all completed on its hosts. */
        for (int h = 0; h < n; h++) {
            if (h == gone) continue;
            epochs_submitted(&r.h[h], 5);
            epochs_completed(&r.h[h], 5);
        }
        /* It is back: the host before it reaches it again. */
        r.out = 0;
        lap(&r, left, EPOCH_FORM);
        run(&r, 37);
        assert_all_ready_in_one_epoch(&r);
        cr_assert_eq(r.n_missed[gone], 1, "N=%d: the host taken back settles the lap it missed", n);
        const frame_epoch *m = &r.missed[gone];
        cr_assert_eq(m->epoch, x);
        cr_assert_eq(m->prev_epoch, e0);
        cr_assert(m->flags & EPOCH_FLAG_RESIZED);
        cr_assert_eq(m->members, all_hosts(n) & ~BIT(gone));
        for (int h = 0; h < n; h++) {
            cr_assert_eq(r.settled[h].prev_epoch, x, "N=%d host %d", n, h);
            /* The host that was away has no count of x: those of the ring
             * that ran it stand (a success there was one). */
            cr_assert_eq(r.settled[h].done, 5, "N=%d host %d: %llu done", n, h,
                         (unsigned long long)r.settled[h].done);
            cr_assert_eq(r.settled[h].top, 5);
            if (h != gone) cr_assert_eq(r.n_missed[h], 0, "N=%d host %d missed nothing", n, h);
        }
    }
}

/* A confirmation that leaves the ring waiting (a rank is missing) settles
 * the last ready epoch all the same: its collectives fail with its verdict,
 * here a resize. Lost on one link, it leaves the hosts after the loss
 * holding them; the lap that makes the ring ready settles the same epoch
 * again, and it must end them as the lost confirmation did on the hosts
 * before the loss: the same code, failure and words, on every host. */
Test(epoch, a_waiting_confirmation_lost_on_one_link_settles_alike_on_every_host)
{
    for (int n = 4; n <= MAX_HOSTS; n++) {
        for (int lost = 0; lost < n; lost++) {
            int gone = 2, left = 1; /* host 1 closes over host 2 */
            if (lost == gone) continue;
            ring_sim r;
            start_ring_of(&r, n, MAJORITY(n));
            r.watch = r.h[0].epoch;
            for (int h = 0; h < n; h++) {
                epochs_submitted(&r.h[h], 3);
                epochs_completed(&r.h[h], 2);
            }
            /* Host 3 lacks a rank; host 2 is out of reach, and host 1's
             * lap closes over it: the ring of n - 1 waits for the rank. */
            epochs_set_members(&r.h[3], 0, "rank 3 (pid 4243) on host h3 exited");
            r.out = BIT(gone);
            epochs_note(&r.h[left], "h2 unreachable for 3 s");
            r.lose_confirm[lost] = 1;
            lap(&r, left, EPOCH_FORM);
            run(&r, 59);
            for (int h = 0; h < n; h++)
                cr_assert_not(h != gone && epochs_ready(&r.h[h]), "N=%d host %d", n, h);
            /* The rank is back: host 3 forms the ring. */
            epochs_set_members(&r.h[3], 1, "");
            lap(&r, 3, EPOCH_FORM);
            run(&r, 61);
            assert_ready_but(&r, gone);
            /* Host 1 started the lap that left the ring waiting: it
             * settled the epoch with that lap's confirmation. */
            const frame_epoch *w = &r.first[left];
            cr_assert(w->flags & EPOCH_FLAG_INCOMPLETE);
            cr_assert(w->flags & EPOCH_FLAG_RESIZED);
            cr_assert_str_eq(w->members_why, "h2 unreachable for 3 s");
            for (int h = 0; h < n; h++) {
                if (h == gone) continue;
                cr_assert(r.n_first[h], "N=%d lost %d: host %d never settled epoch %u", n, lost, h,
                          r.watch);
                const frame_epoch *c = &r.first[h];
                cr_assert_eq(c->epoch, w->epoch, "N=%d lost %d host %d: settled by %u, not %u", n,
                             lost, h, c->epoch, w->epoch);
                cr_assert_eq(c->code, w->code);
                cr_assert_str_eq(c->reason, w->reason);
                cr_assert_eq(c->done, w->done);
                cr_assert_eq(c->top, w->top);
                cr_assert_eq(c->members_epoch, w->members_epoch);
                cr_assert_str_eq(c->members_why, w->members_why, "N=%d lost %d host %d", n, lost,
                                 h);
            }
            /* Host 2, closed over by that lap, is taken back: what it held
             * of the epoch ends as it did everywhere else. */
            frame_epoch was = *w;
            r.out = 0;
            lap(&r, left, EPOCH_FORM);
            run(&r, 67);
            assert_all_ready_in_one_epoch(&r);
            const frame_epoch *c = &r.first[gone];
            cr_assert(r.n_first[gone], "N=%d lost %d: host 2 never settled epoch %u", n, lost,
                      r.watch);
            cr_assert_eq(c->code, was.code);
            cr_assert_str_eq(c->reason, was.reason);
            cr_assert_eq(c->done, was.done);
            cr_assert_eq(c->top, was.top);
            cr_assert(c->flags & EPOCH_FLAG_RESIZED);
            cr_assert_str_eq(c->members_why, was.members_why, "N=%d lost %d", n, lost);
        }
    }
}

/*
 * A host that missed both a confirmation that left the ring waiting (W: a
 * rank left; no resize) and the one after it that closed over a host and
 * made the ring ready (C) learns of both from the next lap's prior. Its
 * collectives of the epoch W ended must end as W said on every other
 * host, not with C's resize; then it moves to C's membership.
 */
Test(
    epoch,
    a_host_that_missed_a_waiting_confirmation_and_the_resize_after_it_ends_the_epoch_as_the_waiting_one_said)
{
    ring_sim r;
    start_ring_of(&r, 5, 3);
    uint32_t e = r.h[0].epoch;
    for (int h = 0; h < 5; h++) {
        epochs_submitted(&r.h[h], 3);
        epochs_completed(&r.h[h], 2);
    }
    /* #2 fails on host 4, and a rank of host 3 leaves: host 4's RESET (W)
     * leaves the ring waiting. Hosts 4 and 0 hold its CONFIRM (fewer than 2
     * hops from its origin), host 1 settles it, and it is lost there:
     * hosts 2 and 3 miss it. */
    epoch_failure f = {.code = RINGD_EMISMATCH, .seq = 2, .cls = EPOCH_CAUSE, .origin = 4};
    snprintf(f.reason, sizeof f.reason, "#2 differs between ranks");
    epochs_note_failure(&r.h[4], &f);
    epochs_set_members(&r.h[3], 0, "rank 3 (pid 4243) on host h3 exited");
    r.lose_confirm[1] = 1;
    lap(&r, 4, EPOCH_RESET);
    run(&r, 71);
    cr_assert_eq(r.n_ended[1], 1);
    cr_assert_eq(r.n_ended[2], 0, "host 2 missed W");
    /* The rank is back; host 0 is out of reach: host 4's lap (C) closes
     * over it and the ring is ready on 4 hosts, once C has passed hosts 4,
     * 1 and 2. It is lost after host 2: host 3 misses it too. */
    epochs_set_members(&r.h[3], 1, "");
    r.out = BIT(0);
    epochs_note(&r.h[4], "h0 unreachable for 3 s");
    r.lose_confirm[2] = 1;
    lap(&r, 4, EPOCH_FORM);
    run(&r, 73);
    cr_assert(epochs_ready(&r.h[2]) && !epochs_ready(&r.h[3]));
    /* Host 0 is back; the next lap takes it back and carries C's verdict. */
    r.out = 0;
    lap(&r, 4, EPOCH_FORM);
    run(&r, 79);
    assert_all_ready_in_one_epoch(&r);
    for (int h = 0; h < 5; h++) {
        int i = 0;
        while (i < r.n_ended[h] && r.ended[h][i].of != e)
            i++;
        cr_assert_lt(i, r.n_ended[h], "host %d never ended epoch %u", h, e);
        cr_assert_eq(r.ended[h][i].code, RINGD_EMISMATCH, "host %d", h);
        cr_assert_str_eq(r.ended[h][i].reason, "#2 differs between ranks", "host %d", h);
        cr_assert_eq(r.ended[h][i].done, 2, "host %d", h);
        cr_assert_not(r.ended[h][i].resized,
                      "host %d ended epoch %u with a resize, the others as W said", h, e);
    }
}

/* A success needs every host, also the one a lap closes over. A host
 * frozen before its last step of collective #4 never completed it, while
 * the others did: their own counts say 5, but nothing they heard says the
 * frozen host completed #4 (its COMMIT never came). The lap that closes
 * over it confirms only what some host knew every host of the old ring had
 * completed, so #4 fails with the resize on every host, and on the frozen
 * one when it is taken back, instead of succeeding where it failed. */
Test(epoch, a_lap_that_closes_over_a_host_confirms_only_what_every_host_of_the_old_ring_completed)
{
    for (int n = 3; n <= MAX_HOSTS; n++) {
        for (int frozen = 0; frozen < n; frozen++) {
            ring_sim r;
            start_ring_of(&r, n, MAJORITY(n));
            for (int h = 0; h < n; h++) {
                epochs_submitted(&r.h[h], 5);
                epochs_completed(&r.h[h], h == frozen ? 4 : 5);
                /* COMMITs told each host of every count up to 3 or 4. */
                epochs_confirmed(&r.h[h], h == (frozen + 1) % n ? 4 : 3);
            }
            int left = (frozen + n - 1) % n;
            r.out = BIT(frozen);
            epochs_note(&r.h[left], "h unreachable for 3 s");
            lap(&r, left, EPOCH_FORM);
            run(&r, 47);
            for (int h = 0; h < n; h++) {
                if (h == frozen) continue;
                cr_assert(r.settled[h].flags & EPOCH_FLAG_RESIZED);
                cr_assert_eq(r.settled[h].done, 4,
                             "N=%d frozen %d host %d: %llu done, but host %d completed 4", n,
                             frozen, h, (unsigned long long)r.settled[h].done, frozen);
            }
            /* Taken back, the frozen host settles the same verdict. */
            r.out = 0;
            lap(&r, left, EPOCH_FORM);
            run(&r, 53);
            assert_all_ready_in_one_epoch(&r);
            cr_assert_eq(r.n_missed[frozen], 1);
            cr_assert_eq(r.missed[frozen].done, 4, "N=%d frozen %d", n, frozen);
        }
    }
}

/* Where some host knew that every host had completed #4 (it answered its
 * ranks with a success), the lap that closes over one confirms #4 too,
 * whatever the others had heard. */
Test(epoch, a_success_one_host_gave_stands_when_a_lap_closes_over_another)
{
    ring_sim r;
    start_ring_of(&r, 4, MAJORITY(4));
    for (int h = 0; h < 4; h++) {
        epochs_submitted(&r.h[h], 5);
        epochs_completed(&r.h[h], 5);
        epochs_confirmed(&r.h[h], h == 0 ? 5 : 2);
    }
    r.out = BIT(3);
    lap(&r, 2, EPOCH_FORM);
    run(&r, 59);
    for (int h = 0; h < 3; h++)
        cr_assert_eq(r.settled[h].done, 5, "host %d: %llu", h,
                     (unsigned long long)r.settled[h].done);
}

/* A lap that passes every host of the old ring counts their own
 * completions, as before: the COMMITs still on their way take nothing. */
Test(epoch, a_lap_that_passes_every_host_confirms_what_each_completed)
{
    ring_sim r;
    start_ring_of(&r, 4, MAJORITY(4));
    for (int h = 0; h < 4; h++) {
        epochs_submitted(&r.h[h], 6);
        epochs_completed(&r.h[h], 6);
        epochs_confirmed(&r.h[h], 2);
    }
    lap(&r, 1, EPOCH_RESET);
    run(&r, 61);
    for (int h = 0; h < 4; h++)
        cr_assert_eq(r.settled[h].done, 6, "host %d", h);
}

Test(epoch, a_ring_that_is_not_elastic_carries_no_membership)
{
    for (int n = 2; n <= MAX_HOSTS; n++) {
        ring_sim r;
        start_ring(&r, n);
        for (int h = 0; h < n; h++) {
            cr_assert_eq(r.settled[h].members, 0, "N=%d host %d", n, h);
            cr_assert_not(r.settled[h].flags & EPOCH_FLAG_RESIZED);
        }
        /* Even a lap that passes only some hosts, from a host that noted
         * why: links.c never closes over a host here, but the rules hold. */
        if (n < 3) continue;
        r.out = BIT(1);
        epochs_note(&r.h[0], "h1 unreachable for 10 s");
        frame_epoch f;
        epochs_start(&r.h[0], EPOCH_FORM, &f);
        cr_assert_eq(f.members, 0);
        cr_assert_str_eq(f.members_why, "");
        send_right(&r, 0, f);
        run(&r, 47);
        for (int h = 0; h < n; h++) {
            if (h == 1) continue;
            const frame_epoch *c = &r.settled[h];
            cr_assert(epochs_ready(&r.h[h]), "N=%d host %d", n, h);
            cr_assert_eq(c->members, 0, "N=%d host %d", n, h);
            cr_assert_eq(c->members_epoch, 0);
            cr_assert_not(c->flags & EPOCH_FLAG_RESIZED, "N=%d host %d", n, h);
            cr_assert_str_eq(c->members_why, "");
            cr_assert_eq(r.h[h].members, 0);
            cr_assert_eq(r.h[h].members_epoch, 0);
        }
    }
}

/* ---- random schedules ---- */

static uint64_t next_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* A collective fails on host h, at or a little after done, with a cause
 * drawn from s; h starts a RESET. */
static void fail_one(ring_sim *r, int h, uint64_t done, int step, uint64_t *s)
{
    epoch_failure f = {.code = next_rand(s) % 2 ? RINGD_ETIMEDOUT : RINGD_EMISMATCH,
                       .seq = done + next_rand(s) % 3,
                       .cls = (uint8_t)(next_rand(s) % 3),
                       .origin = (uint32_t)h};
    snprintf(f.reason, sizeof f.reason, "#%llu failed on host %d (step %d)",
             (unsigned long long)f.seq, h, step);
    trace("host %d: %s\n", h, f.reason);
    epochs_note_failure(&r->h[h], &f);
    lap(r, h, EPOCH_RESET);
}

/* Every host that ended epoch E ended it with one verdict. */
static void assert_every_epoch_ended_alike(const ring_sim *r, uint64_t seed)
{
    for (int a = 0; a < r->n; a++)
        for (int i = 0; i < r->n_ended[a]; i++)
            for (int b = a + 1; b < r->n; b++)
                for (int k = 0; k < r->n_ended[b]; k++) {
                    if (r->ended[a][i].of != r->ended[b][k].of) continue;
                    /* Collectives [0, done) succeed, [done, top) fail with the
                     * failure (none: no failure to tell). The next epoch's
                     * numbers start at the next confirmation's top. */
                    const char *what = NULL;
                    if (r->ended[a][i].done != r->ended[b][k].done)
                        what = "with another count";
                    else if ((r->ended[a][i].top > r->ended[a][i].done ||
                              r->ended[b][k].top > r->ended[b][k].done) &&
                             (r->ended[a][i].code != r->ended[b][k].code ||
                              strcmp(r->ended[a][i].reason, r->ended[b][k].reason)))
                        what = "with another failure";
                    cr_assert_null(
                        what,
                        "seed %llu, N=%d: epoch %u ended on host %d by %u (code %d, "
                        "done %llu, top %llu) and on host %d %s, by %u (code %d, "
                        "done %llu, top %llu)",
                        (unsigned long long)seed, r->n, r->ended[a][i].of, a, r->ended[a][i].by,
                        r->ended[a][i].code, (unsigned long long)r->ended[a][i].done,
                        (unsigned long long)r->ended[a][i].top, b, what, r->ended[b][k].by,
                        r->ended[b][k].code, (unsigned long long)r->ended[b][k].done,
                        (unsigned long long)r->ended[b][k].top);
                }
}

/* The host before h on the ring, skipping the hosts that are out. */
static int left_of(const ring_sim *r, int h)
{
    int from = (h + r->n - 1) % r->n;
    while (from != h && (r->out & BIT(from)))
        from = (from + r->n - 1) % r->n;
    return from;
}

/* Host h is out of reach (frozen, cut off): what its left neighbour was
 * sending it is lost, and so is what it sends; its left neighbour closes
 * over it. */
static void go_out(ring_sim *r, int h)
{
    int from = left_of(r, h);
    r->head[from] = r->tail[from];
    r->out |= BIT(h);
    r->down[h] = 1;
    char why[64];
    snprintf(why, sizeof why, "h%d unreachable for 3 s", h);
    epochs_note(&r->h[from], why);
    lap(r, from, EPOCH_FORM);
}

/* Host h is back, with what it knew: its left neighbour's link goes to it
 * again (what was on the old one is lost), and both start a FORM. */
static void come_back(ring_sim *r, int h)
{
    r->out &= ~BIT(h);
    r->down[h] = 0;
    int from = left_of(r, h);
    r->head[from] = r->tail[from];
    lap(r, from, EPOCH_FORM);
    lap(r, h, EPOCH_FORM);
}

/* Five hosts, min_hosts 3 (a lap may close over 2): every host completed
 * #0 to #2 of epoch e (returned), and knows from COMMITs that every host
 * completed known[h]; a RESET from host 0 goes round, and the next
 * CONFIRM on the link from host lose_at is lost. */
static uint32_t five_hosts_done_three_reset_from_0(ring_sim *r, const uint64_t known[5],
                                                   int lose_at)
{
    start_ring_of(r, 5, 3);
    uint32_t e = r->h[0].epoch;
    for (int h = 0; h < 5; h++) {
        epochs_submitted(&r->h[h], 3);
        epochs_completed(&r->h[h], 3);
        epochs_confirmed(&r->h[h], known[h]);
    }
    r->lose_confirm[lose_at] = 1;
    lap(r, 0, EPOCH_RESET);
    for (int from = 0, k = 0; k < 5; k++, from = (from + 1) % 5)
        cr_assert(deliver(r, from), "the RESET at host %d", (from + 1) % 5);
    return e;
}

/*
 * The verdict known only to hosts that vanish. Five hosts, min_hosts 3: a
 * lap may close over 2 of them. Every host completed #0 to #2 of the
 * epoch, but hosts 2 to 4 have heard of only #0 as complete everywhere
 * (COMMITs). A RESET from host 0 goes round; its CONFIRM, which counts the
 * three done, reaches host 1 and is lost on the way to host 2; then hosts
 * 0 and 1 are cut off before they pass another lap on. The lap of hosts 2
 * to 4 closes over them and confirms only #0 (what they know every host
 * completed). Had hosts 0 and 1 settled the lost CONFIRM at once, their
 * ranks would have #1 and #2 succeed while the others' fail with the
 * resize: the origin and the host after it (fewer than 2 hops from it)
 * only hold it, and settle the epoch, when they are back, as the lap that
 * takes them back says the others did.
 */
Test(epoch, a_confirmation_lost_with_the_hosts_it_reached_decides_nothing)
{
    ring_sim r;
    const uint64_t known[5] = {3, 3, 1, 1, 1};
    uint32_t e = five_hosts_done_three_reset_from_0(&r, known, 1);
    cr_assert(deliver(&r, 0), "the CONFIRM at host 1");
    cr_assert_eq(r.head[1], r.tail[1], "lost on the way to host 2");
    for (int h = 0; h < 5; h++) {
        cr_assert_not(epochs_ready(&r.h[h]), "host %d", h);
        cr_assert_eq(r.n_ended[h], 0, "host %d settled the CONFIRM on its first pass", h);
    }
    /* Hosts 0 and 1 are cut off; host 4 closes over them. */
    r.out = BIT(0) | BIT(1);
    r.down[0] = r.down[1] = 1;
    epochs_note(&r.h[4], "h0 unreachable for 3 s; h1 unreachable for 3 s too");
    lap(&r, 4, EPOCH_FORM);
    run(&r, 83);
    for (int h = 2; h < 5; h++) {
        cr_assert(epochs_ready(&r.h[h]), "host %d", h);
        cr_assert_eq(r.ended[h][0].of, e);
        cr_assert_eq(r.ended[h][0].done, 1, "host %d", h);
        cr_assert(r.ended[h][0].resized, "host %d", h);
    }
    /* Back: the lap that takes them in ends the epoch there as here. */
    come_back(&r, 0);
    come_back(&r, 1);
    run(&r, 89);
    assert_all_ready_in_one_epoch(&r);
    for (int h = 0; h < 2; h++) {
        cr_assert_eq(r.ended[h][0].of, e, "host %d", h);
        cr_assert_eq(r.ended[h][0].done, 1, "host %d ended it with %llu done", h,
                     (unsigned long long)r.ended[h][0].done);
        cr_assert(r.ended[h][0].resized, "host %d", h);
    }
    assert_every_epoch_ended_alike(&r, 0);
}

/* The other half of the rule: a host that holds a CONFIRM carries its
 * verdict on the next lap as if it had settled it. Five hosts, min_hosts
 * 3; every host completed #0 to #2, but knows of only #0 as complete
 * everywhere (COMMITs on their way). The CONFIRM from host 0, which counts
 * the three, is held by hosts 0 and 1, settled by host 2 (its ranks have
 * their successes) and lost on the way to host 3; then host 2 is cut off.
 * The lap of hosts 3, 4, 0 and 1 that closes over it must end the epoch as
 * host 2 did, not with the one success every host on it knew of. */
Test(epoch, a_held_confirmation_goes_round_with_the_next_lap_if_the_host_that_settled_it_vanishes)
{
    ring_sim r;
    const uint64_t known[5] = {1, 1, 1, 1, 1};
    uint32_t e = five_hosts_done_three_reset_from_0(&r, known, 2);
    cr_assert(deliver(&r, 0) && deliver(&r, 1), "the CONFIRM at hosts 1 and 2");
    cr_assert(epochs_ready(&r.h[2]) && !epochs_ready(&r.h[0]) && !epochs_ready(&r.h[1]));
    cr_assert_eq(r.ended[2][0].done, 3);
    r.out = BIT(2);
    r.down[2] = 1;
    epochs_note(&r.h[1], "h2 unreachable for 3 s");
    lap(&r, 1, EPOCH_FORM);
    run(&r, 101);
    for (int h = 0; h < 5; h++) {
        if (h == 2) continue;
        cr_assert(epochs_ready(&r.h[h]), "host %d", h);
        cr_assert_eq(r.ended[h][0].of, e);
        cr_assert_eq(r.ended[h][0].done, 3, "host %d ended it with %llu done, host 2 with 3", h,
                     (unsigned long long)r.ended[h][0].done);
    }
    come_back(&r, 2);
    run(&r, 103);
    assert_all_ready_in_one_epoch(&r);
    assert_every_epoch_ended_alike(&r, 0);
}

/* A ring that starts before its ranks are all there: the CONFIRMs that
 * leave it waiting settle no epoch (none was ever ready), held or not, and
 * the one after the last rank connects makes it ready everywhere. */
Test(epoch, an_elastic_ring_whose_ranks_connect_late_is_ready_once_they_have)
{
    for (int n = 2; n <= MAX_HOSTS; n++) {
        for (unsigned seed = 1; seed <= 20; seed++) {
            ring_sim r;
            init_ring(&r, n, MAJORITY(n));
            for (int h = 0; h < n; h++)
                epochs_set_members(&r.h[h], 0, "a rank is not connected");
            for (int h = 0; h < n; h++)
                lap(&r, h, EPOCH_FORM);
            run(&r, seed);
            for (int h = 0; h < n; h++) {
                cr_assert_not(epochs_ready(&r.h[h]));
                epochs_set_members(&r.h[h], 1, "");
                lap(&r, h, EPOCH_FORM);
                run(&r, seed * 7 + (unsigned)h);
            }
            assert_all_ready_in_one_epoch(&r);
        }
    }
}

/* Spare hops: in a ring of n hosts of which a lap may close over `spare`,
 * a CONFIRM settles first on the host spare hops after its origin, and
 * on the origin and the hosts between only when it comes past them again;
 * with no spare, everywhere at once, as in a fixed ring. */
Test(epoch, a_confirmation_settles_spare_hops_after_its_origin_then_on_its_second_pass)
{
    for (int n = 2; n <= MAX_HOSTS; n++) {
        for (int min = n / 2 + 1; min <= n; min++) {
            ring_sim r;
            start_ring_of(&r, n, min);
            int spare = n - min, origin = n - 1;
            lap(&r, origin, EPOCH_RESET);
            for (int from = origin, k = 0; k < n; k++, from = (from + 1) % n)
                cr_assert(deliver(&r, from));
            cr_assert_eq(epochs_ready(&r.h[origin]), spare == 0);
            /* The CONFIRM's first pass. */
            for (int hops = 1; hops < n; hops++) {
                int from = (origin + hops - 1) % n, at = (origin + hops) % n;
                cr_assert(deliver(&r, from), "n %d, min_hosts %d: the CONFIRM to host %d", n, min,
                          at);
                cr_assert_eq(epochs_ready(&r.h[at]), hops >= spare,
                             "n %d, min_hosts %d: host %d, %d hops after the origin", n, min, at,
                             hops);
            }
            cr_assert_eq(epochs_ready(&r.h[origin]), spare == 0);
            run(&r, 97);
            assert_all_ready_in_one_epoch(&r);
        }
    }
}

/*
 * The outcome rules as a seeded simulation (issue 23 will extend it to the
 * whole protocol): laps started by any host at any time, overtaking each
 * other; CONFIRMs lost on any link; ranks leaving and coming back (the
 * ring waits); collectives completing and failing at different counts on
 * each host; frames delivered in an order drawn from the seed. Whatever the
 * schedule, every host that ends an epoch's collectives ends them with the
 * same verdict, and once the ranks are back and a lap goes round whole, the
 * ring is ready again. (A host that cannot end one, having missed two
 * confirmations, answers "outcome unknown": not checked here.) A failing
 * seed replays exactly; without the waited rule, seed 3 fails.
 */
Test(epoch, any_schedule_of_laps_lost_confirmations_and_leaving_ranks_ends_each_epoch_alike)
{
    static ring_sim r;
    for (uint64_t seed = 1; seed <= 20000; seed++) {
        uint64_t s = seed * 0x9e3779b97f4a7c15ull;
        int n = 3 + (int)(next_rand(&s) % 5);
        start_ring(&r, n);
        uint64_t top[MAX_HOSTS] = {0}, done[MAX_HOSTS] = {0};
        for (int step = 0; step < 40; step++) {
            int h = (int)(next_rand(&s) % (unsigned)n);
            switch (next_rand(&s) % 8) {
            case 0: /* collectives go on */
                top[h] += next_rand(&s) % 4;
                done[h] += next_rand(&s) % (top[h] - done[h] + 1);
                epochs_submitted(&r.h[h], top[h]);
                epochs_completed(&r.h[h], done[h]);
                break;
            case 1: /* one fails here */
                fail_one(&r, h, done[h], step, &s);
                break;
            case 2: /* a rank of h leaves, or comes back */
                if (next_rand(&s) % 2) {
                    char why[64];
                    snprintf(why, sizeof why, "rank %d on host h%d exited", h, h);
                    epochs_set_members(&r.h[h], 0, why);
                    lap(&r, h, EPOCH_RESET);
                } else {
                    epochs_set_members(&r.h[h], 1, "");
                    lap(&r, h, EPOCH_FORM);
                }
                break;
            case 3: /* the next CONFIRM on h's right link is lost */
                r.lose_confirm[h] = 1;
                break;
            default: /* some frames move on */
                for (int k = (int)(next_rand(&s) % 6); k > 0; k--)
                    deliver(&r, (int)(next_rand(&s) % (unsigned)n));
            }
            if (step == 0) { /* new epochs from here: new counts */
                for (int k = 0; k < n; k++)
                    top[k] = done[k] = 0;
            }
        }
        run(&r, (unsigned)seed);
        /* Every rank back, no loss: one whole lap makes the ring ready. */
        for (int k = 0; k < n; k++) {
            epochs_set_members(&r.h[k], 1, "");
            r.lose_confirm[k] = 0;
        }
        lap(&r, (int)(next_rand(&s) % (unsigned)n), EPOCH_FORM);
        run(&r, (unsigned)seed + 1);
        assert_every_epoch_ended_alike(&r, seed);
        for (int k = 0; k < n; k++) {
            cr_assert(epochs_ready(&r.h[k]), "seed %llu, N=%d: host %d is not ready",
                      (unsigned long long)seed, n, k);
            cr_assert_eq(r.h[k].epoch, r.h[0].epoch, "seed %llu, N=%d: host %d at %u, host 0 at %u",
                         (unsigned long long)seed, n, k, r.h[k].epoch, r.h[0].epoch);
        }
    }
}

/* The newest epoch host h is ready in, and its ring then; 0: none. */
static uint32_t ready_in(const ring_sim *r, int h, uint64_t *members)
{
    const epochs *e = &r->h[h];
    if (!epochs_ready(e) || !e->n_ready || e->ready[e->n_ready - 1].epoch != e->epoch) return 0;
    *members = e->ready[e->n_ready - 1].members;
    return e->epoch;
}

/* Whether every host of the ring of epoch e is ready in it. */
static int whole(const ring_sim *r, uint32_t e, uint64_t members)
{
    for (int m = 0; m < r->n; m++) {
        uint64_t theirs;
        if ((members & BIT(m)) && ready_in(r, m, &theirs) != e) return 0;
    }
    return 1;
}

/*
 * The same, in elastic rings whose hosts go out of reach and come back
 * (frozen or cut off: they keep what they knew), at most as many at once
 * as a lap may close over (the ring never falls below min_hosts, a
 * majority), with collectives failing and ranks leaving and coming back
 * as above. Collectives complete on every host of a ring; some hosts hear
 * from COMMITs that every host completed the first v of them, and once
 * spare + 1 hosts know it, those answer their ranks with the successes
 * (commit.h). Whatever the schedule, every host that ends an epoch ends it
 * with the same verdict, and no success any host answered is failed by
 * the verdict anywhere. 100000 seeds ($RINGD_TEST_SEEDS: more; and
 * RINGD_TEST_TRACE_SEED=S prints what seed S does), and the seeds beyond
 * them that once failed. Without the CONFIRM's hold (epochs_hold()), seed
 * 779 fails; without the held verdict on the next lap (fold()), seed
 * 23310; with two verdicts of one epoch weighed by their own epochs
 * instead of by the CONFIRMs that carried them (by), seed 229439.
 */
Test(epoch, any_schedule_of_hosts_closed_over_and_back_ends_each_epoch_alike_after_its_successes)
{
    static ring_sim r;
    static struct {
        uint32_t epoch;
        uint64_t v;
    } answered[MAX_HOSTS][MAX_ENDED];
    int n_answered[MAX_HOSTS];
    const char *t = getenv("RINGD_TEST_TRACE_SEED"), *env_seeds = getenv("RINGD_TEST_SEEDS");
    const char *env_first = getenv("RINGD_TEST_FIRST_SEED");
    uint64_t seeds = env_seeds ? strtoull(env_seeds, NULL, 10) : 100000;
    uint64_t first = env_first ? strtoull(env_first, NULL, 10) : 1;
    /* Found in 1000000 seeds, with verdicts weighed by their own epochs
     * (peer protocol 11): run first, every time (not when replaying from
     * RINGD_TEST_FIRST_SEED). */
    static const uint64_t found[] = {229439, 515313, 517360, 724305, 979832};
    uint64_t n_found = env_first ? 0 : sizeof found / sizeof *found;
    for (uint64_t nth = 0; nth < n_found + seeds; nth++) {
        uint64_t seed = nth < n_found ? found[nth] : nth - n_found + 1;
        tracing = t && strtoull(t, NULL, 10) == seed;
        if (seed < first) continue;
        uint64_t s = seed * 0x9e3779b97f4a7c15ull;
        int n = 3 + (int)(next_rand(&s) % 7), min = n / 2 + 1 + (int)(next_rand(&s) % 2);
        if (min > n) min = n;
        start_ring_of(&r, n, min);
        uint32_t cur[MAX_HOSTS] = {0};
        uint64_t top[MAX_HOSTS] = {0}, done[MAX_HOSTS] = {0};
        memset(n_answered, 0, sizeof n_answered);
        for (int step = 0; step < 60; step++) {
            int h = (int)(next_rand(&s) % (unsigned)n);
            uint64_t members;
            uint32_t e = ready_in(&r, h, &members);
            switch (next_rand(&s) % 10) {
            case 0: { /* collectives of h's ring run, once every host of it is in it */
                if (!e || !whole(&r, e, members)) break;
                uint64_t more = 1 + next_rand(&s) % 3;
                for (int m = 0; m < n; m++) {
                    if (!(members & BIT(m))) continue;
                    if (cur[m] != e) cur[m] = e, top[m] = done[m] = 0;
                    top[m] += more;
                    done[m] += next_rand(&s) % (top[m] - done[m] + 1);
                    epochs_submitted(&r.h[m], top[m]);
                    epochs_completed(&r.h[m], done[m]);
                    trace("host %d: epoch %u, %llu submitted, %llu done\n", m, e,
                          (unsigned long long)top[m], (unsigned long long)done[m]);
                }
                break;
            }
            case 1: { /* COMMITs tell some hosts of h's ring what every host completed */
                if (!e) break;
                uint64_t v = UINT64_MAX, told = 0;
                for (int m = 0; m < n; m++) {
                    uint64_t theirs = cur[m] == e ? done[m] : 0; /* none of e's, if not counted */
                    if ((members & BIT(m)) && theirs < v) v = theirs;
                }
                v = next_rand(&s) % (v + 1);
                for (int m = 0; m < n; m++) {
                    uint64_t theirs;
                    if ((members & BIT(m)) && ready_in(&r, m, &theirs) == e && next_rand(&s) % 3) {
                        epochs_confirmed(&r.h[m], v);
                        told |= BIT(m);
                    }
                }
                trace("hosts 0x%llx know %llu of epoch %u done everywhere\n",
                      (unsigned long long)told, (unsigned long long)v, e);
                if (__builtin_popcountll(told) < n - min + 1) break;
                for (int m = 0; m < n; m++) {
                    if (!(told & BIT(m))) continue;
                    cr_assert_lt(n_answered[m], MAX_ENDED);
                    answered[m][n_answered[m]].epoch = e;
                    answered[m][n_answered[m]++].v = v;
                }
                break;
            }
            case 2: /* the next CONFIRM on h's right link is lost */
                trace("host %d: its next CONFIRM is lost\n", h);
                r.lose_confirm[h] = 1;
                break;
            case 3: /* h goes out of reach, or comes back */
                if (r.out & BIT(h)) {
                    trace("host %d is back\n", h);
                    come_back(&r, h);
                } else if (__builtin_popcountll(r.out) < n - min) {
                    trace("host %d goes out of reach\n", h);
                    go_out(&r, h);
                }
                break;
            case 4: /* one fails on h */
                fail_one(&r, h, done[h], step, &s);
                break;
            case 5: /* a rank of h leaves (the ring waits for it), or comes back */
                if (!r.h[h].incomplete) {
                    trace("host %d: a rank leaves\n", h);
                    epochs_set_members(&r.h[h], 0, "a rank exited");
                    lap(&r, h, EPOCH_RESET);
                } else {
                    trace("host %d: its rank is back\n", h);
                    epochs_set_members(&r.h[h], 1, "");
                    lap(&r, h, EPOCH_FORM);
                }
                break;
            default: /* some frames move on */
                for (int k = (int)(next_rand(&s) % 6); k > 0; k--)
                    deliver(&r, (int)(next_rand(&s) % (unsigned)n));
            }
        }
        trace("the schedule ends\n");
        run(&r, (unsigned)seed);
        for (int k = 0; k < n; k++) {
            r.lose_confirm[k] = 0;
            if (r.out & BIT(k)) come_back(&r, k);
            epochs_set_members(&r.h[k], 1, "");
        }
        run(&r, (unsigned)seed + 1);
        lap(&r, (int)(next_rand(&s) % (unsigned)n), EPOCH_FORM);
        run(&r, (unsigned)seed + 2);
        assert_every_epoch_ended_alike(&r, seed);
        for (int a = 0; a < n; a++)
            for (int i = 0; i < n_answered[a]; i++)
                for (int b = 0; b < n; b++)
                    for (int k = 0; k < r.n_ended[b]; k++)
                        cr_assert(r.ended[b][k].of != answered[a][i].epoch ||
                                      r.ended[b][k].done >= answered[a][i].v,
                                  "seed %llu, N=%d, min_hosts %d: host %d answered %llu successes "
                                  "of epoch %u, host %d ended it with %llu done",
                                  (unsigned long long)seed, n, min, a,
                                  (unsigned long long)answered[a][i].v, answered[a][i].epoch, b,
                                  (unsigned long long)r.ended[b][k].done);
        for (int k = 0; k < n; k++) {
            cr_assert(epochs_ready(&r.h[k]), "seed %llu, N=%d: host %d is not ready",
                      (unsigned long long)seed, n, k);
            cr_assert_eq(r.h[k].epoch, r.h[0].epoch, "seed %llu, N=%d: host %d at %u, host 0 at %u",
                         (unsigned long long)seed, n, k, r.h[k].epoch, r.h[0].epoch);
        }
    }
}
