/*
 * test_epoch.c - the ring's epoch rules (daemon/epoch.c), without sockets:
 * single decisions, then whole rings of N hosts passing EPOCH frames along
 * their links until every host is ready.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "daemon/epoch.h"

static frame_epoch frame(uint32_t epoch, uint32_t origin, epoch_phase phase)
{
    frame_epoch f;
    memset(&f, 0, sizeof f);
    f.epoch = epoch;
    f.origin = origin;
    f.phase = (uint8_t)phase;
    return f;
}

Test(epoch, a_host_starts_broken_at_epoch_1)
{
    epochs e;
    epochs_init(&e, 4, 2);
    cr_assert_eq(e.epoch, 1);
    cr_assert_not(epochs_ready(&e));
}

Test(epoch, a_new_epoch_is_larger_than_any_seen_and_only_its_host_can_make_it)
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
        frame_epoch b = frame(x, 1, EPOCH_BREAK), f = frame(x, 1, EPOCH_FORM);
        cr_assert_eq(epochs_receive(&e, &b), EPOCH_DROP);
        cr_assert_eq(epochs_receive(&e, &f), EPOCH_DROP);
    }
    cr_assert_eq(e.epoch, 10);
    cr_assert(epochs_ready(&e));
}

Test(epoch, a_larger_form_is_adopted_and_the_host_waits_for_its_confirm)
{
    epochs e;
    epochs_init(&e, 3, 0);
    frame_epoch f = frame(5, 2, EPOCH_FORM);
    cr_assert_eq(epochs_receive(&e, &f), EPOCH_REFORMING);
    cr_assert_eq(e.epoch, 5);
    cr_assert_not(epochs_ready(&e));
    frame_epoch c = frame(5, 2, EPOCH_CONFIRM);
    cr_assert_eq(epochs_receive(&e, &c), EPOCH_CONFIRMED);
    epochs_confirm(&e);
    cr_assert(epochs_ready(&e));
}

Test(epoch, a_confirm_of_an_epoch_never_proposed_here_goes_no_further)
{
    epochs e;
    epochs_init(&e, 3, 0);
    frame_epoch c = frame(5, 2, EPOCH_CONFIRM);
    cr_assert_eq(epochs_receive(&e, &c), EPOCH_DROP);
    cr_assert_eq(e.epoch, 1);
}

Test(epoch, a_hosts_own_form_coming_back_means_every_link_carried_it)
{
    epochs e;
    epochs_init(&e, 4, 1);
    uint32_t x = epochs_start(&e, RING_FORMING);
    frame_epoch back = frame(x, 1, EPOCH_FORM);
    cr_assert_eq(epochs_receive(&e, &back), EPOCH_CAME_ROUND);
    /* Its own CONFIRM coming back stops there. */
    frame_epoch c = frame(x, 1, EPOCH_CONFIRM);
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

/* A ring of n hosts whose links carry EPOCH frames in order, host h to
 * h+1, as links.c sends them. */
#define MAX_HOSTS 9
#define QUEUE 64

typedef struct {
    int n;
    epochs h[MAX_HOSTS];
    frame_epoch q[MAX_HOSTS][QUEUE]; /* on the link from host i to i+1 */
    int head[MAX_HOSTS], tail[MAX_HOSTS];
    int down[MAX_HOSTS]; /* the link from host i is broken: frames are lost */
} ring_sim;

static void send_right(ring_sim *r, int from, frame_epoch f)
{
    if (r->down[from]) return;
    cr_assert_lt(r->tail[from] - r->head[from], QUEUE);
    r->q[from][r->tail[from]++ % QUEUE] = f;
}

/* Delivers one frame on the link from host `from`; returns 0 if none. */
static int deliver(ring_sim *r, int from)
{
    if (r->head[from] == r->tail[from]) return 0;
    frame_epoch f = r->q[from][r->head[from]++ % QUEUE];
    int to = (from + 1) % r->n;
    epochs *e = &r->h[to];
    switch (epochs_receive(e, &f)) {
    case EPOCH_BROKE:
    case EPOCH_REFORMING:
    case EPOCH_CONFIRMED:
        send_right(r, to, f);
        if (f.phase == EPOCH_CONFIRM) epochs_confirm(e);
        break;
    case EPOCH_CAME_ROUND:
        send_right(r, to, frame(f.epoch, f.origin, EPOCH_CONFIRM));
        epochs_confirm(e);
        break;
    case EPOCH_DROP:
        break;
    }
    return 1;
}

static void form(ring_sim *r, int h)
{
    uint32_t x = epochs_start(&r->h[h], RING_FORMING);
    send_right(r, h, frame(x, (uint32_t)h, EPOCH_FORM));
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

static void assert_all_ready_in_one_epoch(const ring_sim *r)
{
    for (int h = 0; h < r->n; h++) {
        cr_assert(epochs_ready(&r->h[h]), "N=%d: host %d is not ready", r->n, h);
        cr_assert_eq(r->h[h].epoch, r->h[0].epoch, "N=%d: host %d is at epoch %u, host 0 at %u",
                     r->n, h, r->h[h].epoch, r->h[0].epoch);
    }
}

Test(epoch, links_coming_up_in_any_order_leave_every_host_ready_in_the_same_epoch)
{
    for (int n = 2; n <= MAX_HOSTS; n++) {
        for (unsigned seed = 1; seed <= 30; seed++) {
            ring_sim r;
            memset(&r, 0, sizeof r);
            r.n = n;
            for (int h = 0; h < n; h++)
                epochs_init(&r.h[h], n, h);
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
                form(&r, order[k]);
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
        memset(&r, 0, sizeof r);
        r.n = n;
        for (int h = 0; h < n; h++)
            epochs_init(&r.h[h], n, h);
        for (int h = 0; h < n; h++)
            form(&r, h);
        run(&r, 7);
        assert_all_ready_in_one_epoch(&r);
        /* The link from host 0 to host 1 breaks: host 1 starts a BREAK,
         * host 0 (no right link) adopts one of its own. */
        r.down[0] = 1;
        epochs_start(&r.h[0], RING_BROKEN);
        uint32_t b = epochs_start(&r.h[1], RING_BROKEN);
        send_right(&r, 1, frame(b, 1, EPOCH_BREAK));
        run(&r, 3);
        for (int h = 0; h < n; h++)
            cr_assert_not(epochs_ready(&r.h[h]), "N=%d: host %d still ready after the break", n, h);
        /* The link comes back: host 0's right link forms. */
        r.down[0] = 0;
        form(&r, 0);
        run(&r, 11);
        assert_all_ready_in_one_epoch(&r);
    }
}
