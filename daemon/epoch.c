/*
 * epoch.c - the ring's epoch rules; see epoch.h.
 */
#include "epoch.h"

#include <stdio.h>
#include <string.h>

void epochs_init(epochs *e, int n, int me)
{
    memset(e, 0, sizeof *e);
    e->n = n;
    e->me = me;
    e->epoch = 1;
    e->phase = RING_BROKEN;
    e->failure.seq = FRAME_NO_SEQ;
}

/* Appends "; " and src to the string dst of cap bytes, cut to fit. */
static void append_note(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(dst);
    if (n && n + 2 < cap) {
        memcpy(dst + n, "; ", 2);
        n += 2;
    }
    size_t k = strlen(src);
    if (k > cap - 1 - n) k = cap - 1 - n;
    memcpy(dst + n, src, k);
    dst[n + k] = '\0';
}

void epochs_set_elastic(epochs *e, int min_hosts)
{
    e->elastic = 1;
    e->min_hosts = min_hosts;
    e->members = frame_members_all((size_t)e->n);
}

void epochs_set_min_hosts(epochs *e, int min_hosts)
{
    e->min_hosts = min_hosts;
}

void epochs_note(epochs *e, const char *why)
{
    append_note(e->note, sizeof e->note, why);
}

uint32_t epochs_next(const epochs *e)
{
    uint32_t n = (uint32_t)e->n, x = e->epoch - e->epoch % n + (uint32_t)e->me;
    return x > e->epoch ? x : x + n;
}

static void adopt(epochs *e, uint32_t x, ring_phase phase)
{
    e->epoch = x;
    e->phase = phase;
    if (!e->birth) e->birth = x;
    e->adopted[e->n_adopted++ % EPOCH_ADOPTED] = x;
}

/* Whether x's lap passed this host: 1, 0, or -1 if it cannot tell (x is
 * older than the epochs it remembers). */
static int took_part(const epochs *e, uint32_t x)
{
    unsigned n = e->n_adopted < EPOCH_ADOPTED ? e->n_adopted : EPOCH_ADOPTED;
    uint32_t oldest = UINT32_MAX;
    for (unsigned i = 0; i < n; i++) {
        if (e->adopted[i] == x) return 1;
        if (e->adopted[i] < oldest) oldest = e->adopted[i];
    }
    return e->n_adopted > EPOCH_ADOPTED && x < oldest ? -1 : 0;
}

int epochs_failure_first(const epoch_failure *a, const epoch_failure *b)
{
    if (!a->code) return 0;
    if (!b->code) return 1;
    if (a->seq != b->seq) return a->seq < b->seq;
    if (a->cls != b->cls) return a->cls < b->cls;
    return a->origin < b->origin;
}

void epochs_note_failure(epochs *e, const epoch_failure *f)
{
    epoch_failure g = *f;
    /* Numbers count in the epoch the ring was last ready in; one that is
     * not ready numbers afresh, so a failure found now names no collective
     * of it, and comes after any that does. */
    if (e->phase != RING_READY) g.seq = FRAME_NO_SEQ;
    if (epochs_failure_first(&g, &e->failure)) e->failure = g;
}

int epochs_done_of(const epochs *e, uint32_t x, uint64_t *done)
{
    for (int i = 0; i < e->n_ready; i++) {
        if (e->ready[i].epoch == x) {
            *done = e->ready[i].done;
            return e->ready[i].outside ? -1 : 1;
        }
    }
    if (!e->birth || x < e->birth) return -1;
    /* Ready in it so long ago it is gone. */
    if (e->n_ready == EPOCH_HISTORY && x < e->ready[0].epoch) return 0;
    switch (took_part(e, x)) {
    case 1: /* and never ready in it */
        *done = 0;
        return 1;
    case 0: /* closed over: the hosts of that ring count it */
        return -1;
    default:
        return 0;
    }
}

/* The number of collectives of ready epoch x this host's ranks submitted,
 * or 0 if it does not remember. */
static uint64_t top_of(const epochs *e, uint32_t x)
{
    for (int i = 0; i < e->n_ready; i++)
        if (e->ready[i].epoch == x) return e->ready[i].top;
    return 0;
}

/* In an elastic ring, adds prev_epoch's hosts and what this host knew
 * every one of them had completed. A host the lap does not pass (it closes
 * over it) may not have completed what the others did: it was frozen or
 * cut off before its last step. Its own count is not on the lap, so the
 * confirmation takes, for the whole ring, the most that any host on the
 * lap knew from COMMITs: no more than every host completed, and no less
 * than a success any host has already answered (epochs_confirmation()). */
static void add_ring_of(const epochs *e, frame_epoch *f)
{
    if (!e->elastic) return;
    for (int i = 0; i < e->n_ready; i++) {
        if (e->ready[i].epoch != f->prev_epoch) continue;
        f->prev_members |= e->ready[i].members;
        if (e->ready[i].confirmed > f->confirmed) f->confirmed = e->ready[i].confirmed;
    }
}

/* The newest epoch this host was ready in; 0: none. */
static uint32_t newest_ready(const epochs *e)
{
    return e->n_ready ? e->ready[e->n_ready - 1].epoch : 0;
}

/* Hosts of c's ring from its origin forward to this one: 0 at the origin. */
static int hops_from_origin(const epochs *e, const frame_epoch *c)
{
    int d = 0;
    for (int h = (int)c->origin; h != e->me; h = (h + 1) % e->n)
        if (c->members & (UINT64_C(1) << h)) d++;
    return d;
}

/* How many hosts may not know of c's verdict: the configured hosts above
 * min_hosts. Any ring of min_hosts hosts has at least one host of any
 * n - min_hosts + 1, whatever hosts came and went meanwhile (a ring of
 * exactly min_hosts may lose one while another comes back): spare + 1 of
 * c's hosts must have it before any acts on it. A ring below min_hosts
 * settles nothing (links.c), so holds nothing either. */
static int spare_of(const epochs *e, const frame_epoch *c)
{
    if (!e->elastic || !c->members || __builtin_popcountll(c->members) < e->min_hosts) return 0;
    return e->n > e->min_hosts ? e->n - e->min_hosts : 0;
}

/* What the confirmation c said, for a later lap to carry (flags: the
 * ones kept). */
static frame_prior verdict_of(const frame_epoch *c, uint8_t flags)
{
    frame_prior p = {.epoch = c->epoch,
                     .by = c->epoch,
                     .prev_epoch = c->prev_epoch,
                     .flags = c->flags & flags,
                     .code = c->code,
                     .fail_seq = c->fail_seq,
                     .fail_class = c->fail_class,
                     .done = c->done,
                     .top = c->top,
                     .members = c->members,
                     .members_epoch = c->members_epoch};
    memcpy(p.reason, c->reason, sizeof p.reason);
    memcpy(p.members_why, c->members_why, sizeof p.members_why);
    return p;
}

/* The CONFIRM of epoch by carries the verdict carried (its prior or
 * waited): if that is v, v's by is at least that. A host that has v and
 * that CONFIRM (settled or held) thus carries v with a by no older. */
static void carried_by(frame_prior *v, const frame_prior *carried, uint32_t by)
{
    if (v->epoch && v->epoch == carried->epoch && by > v->by) v->by = by;
}

/* A confirmation that left the ring waiting (w) settled the epoch that
 * the verdict p settles, before p: for a host that missed both, what w
 * said of it stands (what succeeded, what failed and why), not p's word
 * on what was settled already. Where the epoch ends, and so where p's
 * starts, is still p's top, as on every host that had p. If w resized
 * nothing and p did, the collectives ended without a resize, and only
 * then did the ring move to p's membership: INCOMPLETE says so (links.c
 * settles it in two). p carries w's verdict from then on, as late as w
 * was carried. Merging w twice changes nothing. */
static void merge_waited(frame_prior *p, const frame_prior *w)
{
    if (!w->epoch || w->prev_epoch != p->prev_epoch) return;
    if (w->by > p->by) p->by = w->by;
    if ((p->flags & EPOCH_FLAG_RESIZED) && !(w->flags & EPOCH_FLAG_RESIZED))
        p->flags |= EPOCH_FLAG_INCOMPLETE;
    p->flags =
        (uint8_t)((p->flags & ~EPOCH_FLAG_DONE_UNKNOWN) | (w->flags & EPOCH_FLAG_DONE_UNKNOWN));
    p->code = w->code;
    p->fail_seq = w->fail_seq;
    p->fail_class = w->fail_class;
    p->done = w->done;
    memcpy(p->reason, w->reason, sizeof p->reason);
    if (w->flags & EPOCH_FLAG_RESIZED) {
        p->flags |= EPOCH_FLAG_RESIZED;
        memcpy(p->members_why, w->members_why, sizeof p->members_why);
    }
}

/* The verdict by which c's epoch becomes ready, for a later lap to carry
 * as its prior, where w was the first confirmation to settle the epoch
 * before (one that left the ring waiting), if any. */
static frame_prior verdict_after(const frame_prior *w, const frame_epoch *c)
{
    /* (c's INCOMPLETE: c is a prior that says so, settled late.) */
    frame_prior p =
        verdict_of(c, EPOCH_FLAG_DONE_UNKNOWN | EPOCH_FLAG_RESIZED | EPOCH_FLAG_INCOMPLETE);
    merge_waited(&p, w);
    return p;
}

/* What this host knows of the epochs, counting the CONFIRM it holds
 * (epochs_hold()) as settled: the laps it folds carry that as if it had
 * settled it. */
typedef struct {
    uint32_t ready;     /* the newest epoch ready */
    frame_prior last;   /* the verdict that made it ready */
    frame_prior waited; /* the first that settled it since, leaving the ring waiting */
    int held;           /* ready only by what this host holds */
} knowledge;

static knowledge known(const epochs *e)
{
    knowledge k = {.ready = newest_ready(e), .last = e->last, .waited = e->waited};
    const frame_epoch *h = e->held.epoch && e->held.epoch > k.ready ? &e->held : NULL;
    if (!h) return k;
    /* The verdict that made the held one's epoch ready, if this host
     * missed it: a host that settles h would settle it first. */
    if (h->prior.epoch && h->prior.epoch == h->prev_epoch && h->prev_epoch > k.ready) {
        k.ready = h->prev_epoch;
        k.last = h->prior;
        memset(&k.waited, 0, sizeof k.waited);
        k.held = 1;
    }
    carried_by(&k.last, &h->prior, h->epoch);
    if (h->prev_epoch != k.ready) return k;
    frame_prior w = k.waited;
    if (!w.epoch && h->waited.epoch && h->waited.prev_epoch == k.ready) w = h->waited;
    carried_by(&w, &h->waited, h->epoch);
    if (h->flags & EPOCH_FLAG_INCOMPLETE) {
        /* It makes nothing ready: it settles k.ready, waiting (none if the
         * ring was never ready: nothing to settle). */
        if (!k.ready) return k;
        if (!w.epoch)
            w = verdict_of(h, EPOCH_FLAG_DONE_UNKNOWN | EPOCH_FLAG_RESIZED | EPOCH_FLAG_INCOMPLETE);
        k.waited = w;
        return k;
    }
    k.last = verdict_after(&w, h);
    k.ready = h->epoch;
    memset(&k.waited, 0, sizeof k.waited);
    k.held = 1;
    return k;
}

/* The epoch the membership this host would run in was agreed in, k being
 * known(e): that of one it holds, if that resized the ring. */
static uint32_t members_epoch_of(const epochs *e, const knowledge *k)
{
    return k->held && (k->last.flags & EPOCH_FLAG_RESIZED) ? k->last.members_epoch
                                                           : e->members_epoch;
}

/* Whether verdict a stands rather than b, two that settled the same
 * epoch and that hosts on a lap know as the first to (two waiteds; or a
 * waited and a prior, which the waited's verdict then joins): the one
 * carried by the later CONFIRM (by). Had any host acted on one through
 * CONFIRM C, spare + 1 hosts had C (epochs_hold()), one of them was on
 * every later lap, and every CONFIRM after C carried it: the other was
 * carried by none after C. Either may be only held; of the same verdict,
 * the newer by goes on. */
static int carried_later(const frame_prior *a, const frame_prior *b)
{
    return !b->epoch || a->by > b->by;
}

/* Adds what this host knows to a RESET or FORM going round. */
static void fold(const epochs *e, frame_epoch *f)
{
    /* The lap settles the newest epoch any host on it was ready in. Its
     * origin may know an older one, or none (it has just started, or it
     * missed a confirmation): the hosts before this one on the lap were
     * not ready in this one's, so what they added is of no use to it. */
    knowledge k = known(e);
    /* An epoch ready only by what this host holds counts as ready here,
     * with nothing done in it (this host ran none of its collectives). */
    uint32_t mine = k.ready;
    frame_prior lap_waited = f->waited;
    if (mine > f->prev_epoch) {
        f->prev_epoch = mine;
        f->done = UINT64_MAX;
        f->top = 0;
        f->prev_members = 0;
        f->confirmed = 0;
        f->flags &= (uint8_t)~EPOCH_FLAG_DONE_UNKNOWN;
        memset(&f->prior, 0, sizeof f->prior);
        memset(&f->waited, 0, sizeof f->waited);
        if (f->fail_seq != FRAME_NO_SEQ) { /* a collective of the older epoch */
            f->code = 0;
            f->fail_seq = FRAME_NO_SEQ;
            f->fail_class = 0;
            f->fail_origin = 0;
            f->reason[0] = '\0';
        }
    }
    /* How prev_epoch became ready, for a host on the lap that missed it:
     * as the later CONFIRM carried it, if hosts on the lap know it apart
     * (one with a waited's verdict joined, one without). */
    if (mine == f->prev_epoch && k.last.epoch == mine && carried_later(&k.last, &f->prior)) {
        f->prior = k.last;
        /* A waited that hosts before this one on the lap knew, of the
         * epoch the prior settles: if it was carried later, the prior
         * carries its verdict on that epoch. */
        if (lap_waited.epoch && carried_later(&lap_waited, &f->prior))
            merge_waited(&f->prior, &lap_waited);
    }
    if (f->prior.epoch && f->prior.prev_epoch == newest_ready(e) && k.waited.epoch &&
        carried_later(&k.waited, &f->prior))
        merge_waited(&f->prior, &k.waited);
    /* The first confirmation that settled prev_epoch, for a host that
     * missed it: the lap's own verdict comes too late for what it held. */
    if (mine == f->prev_epoch && k.waited.epoch && k.waited.prev_epoch == mine &&
        carried_later(&k.waited, &f->waited))
        f->waited = k.waited;
    uint64_t done;
    switch (f->prev_epoch ? epochs_done_of(e, f->prev_epoch, &done) : -1) {
    case 1:
        if (done < f->done) f->done = done;
        if (top_of(e, f->prev_epoch) > f->top) f->top = top_of(e, f->prev_epoch);
        add_ring_of(e, f);
        break;
    case 0:
        f->flags |= EPOCH_FLAG_DONE_UNKNOWN;
        break;
    default:
        break; /* not this host's epoch: it has nothing of it */
    }
    epoch_failure theirs = {
        .code = f->code, .seq = f->fail_seq, .cls = f->fail_class, .origin = f->fail_origin};
    /* A failure of a collective of the epoch the held CONFIRM settled is
     * not of the one after it (which this host never ran). */
    int failure_here = !k.held || e->failure.seq == FRAME_NO_SEQ;
    if (failure_here && epochs_failure_first(&e->failure, &theirs)) {
        f->code = e->failure.code;
        f->fail_seq = e->failure.seq;
        f->fail_class = e->failure.cls;
        f->fail_origin = e->failure.origin;
        memcpy(f->reason, e->failure.reason, sizeof f->reason);
    }
    if (e->elastic) {
        f->members |= UINT64_C(1) << e->me;
        /* A host of another membership (one that was closed over, or that
         * missed a resize): the ring that forms is a new one. */
        if (members_epoch_of(e, &k) != f->members_epoch) f->flags |= EPOCH_FLAG_RESIZED;
        if (e->note[0]) append_note(f->members_why, sizeof f->members_why, e->note);
    }
    if (e->incomplete) {
        size_t n = strlen(f->waiting);
        f->flags |= EPOCH_FLAG_INCOMPLETE;
        snprintf(f->waiting + n, sizeof f->waiting - n, "%s%s", n ? "; " : "", e->missing);
    }
}

/* Takes the failure a lap carries as this host's own knowledge, so that
 * the laps it starts later carry it too. */
static void learn(epochs *e, const frame_epoch *f)
{
    if (!f->code || !e->n_ready || f->prev_epoch != e->ready[e->n_ready - 1].epoch) return;
    epoch_failure theirs = {
        .code = f->code, .seq = f->fail_seq, .cls = f->fail_class, .origin = f->fail_origin};
    memcpy(theirs.reason, f->reason, sizeof theirs.reason);
    if (epochs_failure_first(&theirs, &e->failure)) e->failure = theirs;
}

uint32_t epochs_start(epochs *e, epoch_phase phase, frame_epoch *lap)
{
    uint32_t x = epochs_next(e);
    adopt(e, x, phase == EPOCH_BREAK ? RING_BROKEN : RING_FORMING);
    if (!lap) return x;
    memset(lap, 0, sizeof *lap);
    lap->epoch = x;
    lap->origin = (uint32_t)e->me;
    lap->phase = (uint8_t)phase;
    lap->fail_seq = FRAME_NO_SEQ;
    lap->prev_epoch = newest_ready(e);
    lap->done = UINT64_MAX;
    knowledge k = known(e);
    lap->members_epoch = members_epoch_of(e, &k);
    fold(e, lap);
    return x;
}

epoch_action epochs_receive(epochs *e, frame_epoch *f)
{
    int mine = f->origin == (uint32_t)e->me;
    if (f->epoch > e->epoch && !mine) {
        switch (f->phase) {
        case EPOCH_BREAK:
            adopt(e, f->epoch, RING_BROKEN);
            return EPOCH_BROKE;
        case EPOCH_RESET:
            adopt(e, f->epoch, RING_FORMING);
            fold(e, f);
            learn(e, f);
            return EPOCH_RESETTING;
        case EPOCH_FORM:
            adopt(e, f->epoch, RING_FORMING);
            fold(e, f);
            learn(e, f);
            return EPOCH_REFORMING;
        default:
            return EPOCH_DROP; /* a CONFIRM of an epoch never proposed here */
        }
    }
    if (f->epoch != e->epoch) return EPOCH_DROP;
    /* Our lap came back: every link carried it. */
    if ((f->phase == EPOCH_FORM || f->phase == EPOCH_RESET) && mine) return EPOCH_CAME_ROUND;
    /* A FORM that a link coming up started before this BREAK, of an older
     * epoch, was dropped on the way: nothing else would form the ring. */
    if (f->phase == EPOCH_BREAK && mine && e->phase == RING_BROKEN) return EPOCH_BREAK_ROUND;
    if (f->phase == EPOCH_CONFIRM && e->phase == RING_FORMING) {
        if (e->held.epoch == f->epoch) return EPOCH_CONFIRMED; /* its second pass */
        if (mine) return EPOCH_DROP;
        return epochs_hold(e, f) ? EPOCH_HELD : EPOCH_CONFIRMED;
    }
    return EPOCH_DROP;
}

int epochs_hold(epochs *e, const frame_epoch *c)
{
    if (hops_from_origin(e, c) >= spare_of(e, c)) return 0;
    e->held = *c;
    return 1;
}

frame_epoch epochs_confirmation(const epochs *e, const frame_epoch *f)
{
    frame_epoch c = *f;
    c.phase = EPOCH_CONFIRM;
    c.flags &= (uint8_t)~EPOCH_FLAG_RESIZED;
    if (e->elastic && ((f->flags & EPOCH_FLAG_RESIZED) || f->members != e->members)) {
        c.flags |= EPOCH_FLAG_RESIZED;
        c.members_epoch = f->epoch;
    }
    /* The lap closed over a host of prev_epoch's ring: what it completed
     * is only known from COMMITs (add_ring_of()). */
    if (e->elastic && (f->prev_members & ~f->members) && c.confirmed < c.done) c.done = c.confirmed;
    return c;
}

/* c's epoch is ready from now on, as far as this host counts: done and
 * top start at 0, and c is the verdict that made it so. */
static void push_ready(epochs *e, const frame_epoch *c)
{
    e->failure = (epoch_failure){.seq = FRAME_NO_SEQ};
    if (e->n_ready == EPOCH_HISTORY) {
        memmove(e->ready, e->ready + 1, (EPOCH_HISTORY - 1) * sizeof e->ready[0]);
        e->n_ready--;
    }
    e->ready[e->n_ready].epoch = c->epoch;
    e->ready[e->n_ready].done = 0;
    e->ready[e->n_ready].top = 0;
    e->ready[e->n_ready].confirmed = 0;
    e->ready[e->n_ready].members = e->members;
    e->ready[e->n_ready].outside = 0;
    e->n_ready++;
    /* The first waiting verdict on c's prev_epoch: the one this host
     * settled, or else the one c carries (a host that was not in that
     * epoch's ring settles none, but c's prior is its to carry now). */
    e->last = verdict_after(e->waited.epoch ? &e->waited : &c->waited, c);
    memset(&e->waited, 0, sizeof e->waited);
}

static void take_members(epochs *e, const frame_epoch *c)
{
    if (e->elastic && c->members) {
        e->members = c->members;
        e->members_epoch = c->members_epoch;
        if (c->flags & EPOCH_FLAG_RESIZED) e->note[0] = '\0';
    }
}

int epochs_missed(const epochs *e, const frame_epoch *c)
{
    const frame_prior *p = &c->prior;
    uint32_t mine = newest_ready(e);
    /* It was in the ring that prior settles, and has not been ready since:
     * whether it was on prior's lap or closed over by it (frozen, cut
     * off), what it still holds of that epoch ended as prior says. */
    return p->epoch && mine < p->epoch && mine == p->prev_epoch && e->birth && e->birth <= p->epoch;
}

frame_epoch epochs_prior_confirm(const frame_prior *p)
{
    frame_epoch c;
    memset(&c, 0, sizeof c);
    c.epoch = p->epoch;
    c.phase = EPOCH_CONFIRM;
    c.flags = p->flags & EPOCH_FLAGS_ALL;
    c.code = p->code;
    c.fail_seq = p->fail_seq;
    c.fail_class = p->fail_class;
    c.prev_epoch = p->prev_epoch;
    c.done = p->done;
    c.top = p->top;
    c.members = p->members;
    c.members_epoch = p->members_epoch;
    memcpy(c.reason, p->reason, sizeof c.reason);
    memcpy(c.members_why, p->members_why, sizeof c.members_why);
    return c;
}

void epochs_settle_missed(epochs *e, const frame_epoch *c)
{
    if (e->elastic && c->members && !(c->members & (UINT64_C(1) << e->me))) {
        /* Closed over by it, this host was never in that ring: its verdict
         * ends what this host still held, and counts of that epoch are not
         * this host's to give. But the verdict is: this host may be the
         * only one on a later lap that has it. */
        push_ready(e, c);
        e->ready[e->n_ready - 1].outside = 1;
        e->ready[e->n_ready - 1].members = c->members;
        return;
    }
    take_members(e, c);
    push_ready(e, c);
}

void epochs_keep_waited(epochs *e, const frame_epoch *c)
{
    uint32_t mine = newest_ready(e);
    if (mine && c->prev_epoch == mine && !e->waited.epoch)
        e->waited =
            verdict_of(c, EPOCH_FLAG_DONE_UNKNOWN | EPOCH_FLAG_RESIZED | EPOCH_FLAG_INCOMPLETE);
}

int epochs_missed_waited(const epochs *e, const frame_epoch *c)
{
    const frame_prior *w = &c->waited;
    uint32_t mine = newest_ready(e);
    return w->epoch && mine && mine == w->prev_epoch && !e->waited.epoch && e->birth &&
           e->birth <= w->prev_epoch;
}

void epochs_settle_waited(epochs *e, const frame_epoch *c)
{
    /* Closed over by it, this host was not in the ring it agreed. */
    if (!(e->elastic && c->members && !(c->members & (UINT64_C(1) << e->me)))) take_members(e, c);
    epochs_keep_waited(e, c);
}

void epochs_settle(epochs *e, const frame_epoch *c)
{
    carried_by(&e->last, &c->prior, c->epoch);
    carried_by(&e->waited, &c->waited, c->epoch);
    take_members(e, c);
    if (c->flags & EPOCH_FLAG_INCOMPLETE) {
        e->phase = RING_WAITING;
        snprintf(e->waiting, sizeof e->waiting, "%s", c->waiting);
        return;
    }
    e->phase = RING_READY;
    e->waiting[0] = '\0';
    push_ready(e, c);
}

void epochs_completed(epochs *e, uint64_t done)
{
    if (e->phase == RING_READY && e->n_ready && e->ready[e->n_ready - 1].epoch == e->epoch)
        e->ready[e->n_ready - 1].done = done;
}

void epochs_confirmed(epochs *e, uint64_t least)
{
    if (e->phase == RING_READY && e->n_ready && e->ready[e->n_ready - 1].epoch == e->epoch &&
        least > e->ready[e->n_ready - 1].confirmed)
        e->ready[e->n_ready - 1].confirmed = least;
}

void epochs_submitted(epochs *e, uint64_t top)
{
    if (e->phase == RING_READY && e->n_ready && e->ready[e->n_ready - 1].epoch == e->epoch &&
        top > e->ready[e->n_ready - 1].top)
        e->ready[e->n_ready - 1].top = top;
}

void epochs_raise(epochs *e, uint32_t x)
{
    if (x > e->epoch) e->epoch = x;
}

void epochs_set_members(epochs *e, int complete, const char *missing)
{
    e->incomplete = !complete;
    snprintf(e->missing, sizeof e->missing, "%s", complete ? "" : missing);
}

int epochs_current(const epochs *e, uint32_t x)
{
    return x == e->epoch;
}

int epochs_ready(const epochs *e)
{
    return e->phase == RING_READY;
}
