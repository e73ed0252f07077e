/*
 * ring_outcome.c - how the ring engine's collectives end: the oldest
 * finished one completes and waits for the ring's word, COMMIT counts
 * confirm successes, the links' epoch events settle failures, and the
 * deadline tick fails what waits too long.
 *
 * A result goes back only once every host has completed the collective
 * (COMMIT frames carry each host's count), so no rank sees a success that
 * another does not. A collective that fails for a reason the streams
 * survive (the hosts disagree on it, a rank never came or left, a deadline,
 * a bad checksum) starts a RESET lap round the ring (links.c, epoch.c); its
 * CONFIRM hands every host the same verdict on every collective not yet
 * answered, and the ring goes on under a new epoch with the links up. A
 * protocol error drops both links instead (see ring_drop_links()), and the
 * BREAK that follows fails what each host has submitted. PROTOCOL.md,
 * "Outcomes", has the rules.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "ring-internal.h"

#define WIRE_SPARE_MAX (128u << 20) /* a wire buffer kept between jobs, at most */

/*
 * Which host came last to an allreduce. Host h learns delta_h, the time from
 * its own start to its left neighbour's first data, which left at the left
 * neighbour's start: delta_h = start(left(h)) - start(h) + one hop. Each host
 * sends its delta with the allgather frames of the chunk it completed, so
 * every host learns all N and can place every start relative to its own:
 * start(left(h)) = start(h) + delta_h, round the ring. The latest is the
 * straggler; spread is how long after the first it came.
 */
static void name_straggler(const ring *r, active *a)
{
    a->t.last_host = -1;
    a->t.spread_us = 0;
    a->t.offsets = 0;
    if (a->job->kind != RINGD_COLL_ALLREDUCE || r->n < 2) return;
    for (int h = 0; h < r->n; h++)
        if (a->delta_us[h] == FRAME_DELTA_UNKNOWN) return;
    int64_t at = 0, lo = 0, hi = 0, other = INT64_MIN;
    int h = r->me;
    a->t.last_host = h;
    for (int k = 1; k < r->n; k++) {
        at += a->delta_us[h];
        h = ring_mod(h - 1, r->n);
        if (at > hi) {
            hi = at;
            a->t.last_host = h;
        }
        if (at < lo) lo = at;
        if (at > other) other = at;
    }
    a->t.spread_us = (uint64_t)(hi - lo);
    /* For the accounting of this host's ranks (gather.c): how long after
     * this host the last one started, how long before it the first. */
    a->t.offsets = 1;
    a->t.latest_us = other;
    a->t.early_us = (uint64_t)-lo;
}

/* ---- completing ---- */

/* How long a collective done here waits for the ring's word. A success
 * waits up to collective_timeout for every host to complete it. A failure
 * waits for the lap that settles it, whatever broke (a link, a host, a
 * rank, a deadline), so that every rank gets the same code and message:
 * until its own deadline and JOBS_SETTLE_GRACE_MS more; then it goes back
 * as "outcome unknown" (jobs_expire_held()). */
static uint64_t hold_until(const ring *r, const job *j)
{
    uint64_t now = uv_now(r->loop);
    if (j->status == 0) return now + r->cfg->collective_timeout_ms;
    return (j->deadline > now ? j->deadline : now) + JOBS_SETTLE_GRACE_MS;
}

#define COMPLETED_UNKNOWN                                                                          \
    "outcome unknown: this host completed it, but the ring broke before every host was known "     \
    "to have; restart the training step from a checkpoint on every rank"

/* Failed ones go back at once, in order, as long as no success is still
 * waiting for the ring's word before them. */
static void release_failed(ring *r)
{
    while (r->q.held && r->q.held->status != 0)
        jobs_release_first(&r->q);
}

/* This host has left the ring: no lap and no COMMIT reach it until it
 * joins again, so everything held goes back now, a failure as it failed
 * here, a success as one whose outcome it cannot know. */
static void release_left(ring *r)
{
    while (r->q.held) {
        if (r->q.held->status != 0) {
            jobs_release_first(&r->q);
        } else {
            r->q.held->hold_deadline = 0;
            jobs_expire_held(&r->q, 0, RINGD_ERING, COMPLETED_UNKNOWN, "");
        }
    }
}

/* Every collective below the least count has completed on every host, as
 * this host knows, which a lap that closes over others then confirms (it
 * must be told before any success goes back). Those that spare + 1 hosts
 * know of go back: a lap closes over at most spare of them (commit.h). */
static void confirm(ring *r)
{
    if (r->links) links_confirmed(r->links, commit_least(&r->cv));
    jobs_confirm(&r->q, r->epoch, commit_answerable(&r->cv));
}

/* How many hosts may not know of a success when it goes back: the
 * configured hosts above min_hosts, in an elastic ring. Any later ring of
 * min_hosts hosts has one of any n_hosts - min_hosts + 1, whichever hosts
 * came and went meanwhile (not only this ring's size above min_hosts: a
 * ring of exactly min_hosts may lose one host while another comes back). */
static int closable(const ring *r)
{
    if (!r->links) return 0;
    links_membership m;
    links_get_membership(r->links, &m);
    return m.elastic && m.n_hosts > m.min_hosts ? m.n_hosts - m.min_hosts : 0;
}

void ring_reset_commit(ring *r)
{
    commit_reset(&r->cv, r->n, r->me, closable(r));
}

/* Sends what this host knows of every host's count, once per turn of the
 * loop however many collectives completed in it. */
static void on_commit_due(uv_idle_t *h)
{
    ring *r = h->data;
    uv_idle_stop(h);
    ring_flush_commit(r);
}

/* A COMMIT may tell the next host that the collective its ranks wait for is
 * done everywhere. The DATA of the next collective, which a rank here may
 * submit as soon as it has that answer, must come after it on the link:
 * that host, whose ranks have not submitted it yet, stops reading the link
 * at that DATA, and would never read the COMMIT behind it. */
void ring_flush_commit(ring *r)
{
    if (!r->commit_due || !links_ready(r->links)) return;
    r->commit_due = 0;
    static frame_commit c; /* 16 KiB: not on the stack */
    commit_frame(&r->cv, &c);
    links_send_commit(r->links, &c);
}

/* The oldest running collective is done here: a success waits for every
 * host to have completed it too (confirm()), a failure for the ring to say
 * how it ended (ring_on_settle()). Results go back in order. */
void ring_complete(ring *r)
{
    active *a = ring_slot(r, 0);
    job *j = a->job;
    name_straggler(r, a);
    job_timing t = a->t;
    /* The largest wire buffer (up to WIRE_SPARE_MAX) stays for the next job. */
    if (a->wbuf && a->wbuf_cap > r->wire_spare_cap && a->wbuf_cap <= WIRE_SPARE_MAX) {
        free(r->wire_spare);
        r->wire_spare = a->wbuf;
        r->wire_spare_cap = a->wbuf_cap;
    } else {
        free(a->wbuf);
    }
    a->wbuf = NULL;
    a->job = NULL;
    r->first = (r->first + 1) % MAX_ACTIVE;
    r->n_act--;
    if (r->n == 1) {
        jobs_complete(&r->q, &t);
        return;
    }
    j->epoch = a->epoch;
    jobs_hold(&r->q, &t, hold_until(r, j));
    if (j->status == 0 && a->epoch == r->epoch) {
        uint64_t count = r->cv.done[r->me] + 1;
        commit_completed(&r->cv, count);
        links_completed(r->links, count);
        r->commit_due = 1;
        uv_idle_start(&r->commit, on_commit_due);
        confirm(r); /* this host may have been the last */
    } else if (a->epoch < r->settled) {
        /* Nothing more will settle it: ring_on_settle() already has. */
        release_failed(r);
    }
    if (r->links && links_left(r->links)) release_left(r);
}

/* Tells the owner how the collectives it held for the engine ended. */
static void notify_settled(ring *r, const job_verdict *v)
{
    if (r->watcher) r->watcher->settled(r->watcher_data, v);
}

/* ---- the links' epochs ---- */

void ring_on_epoch(void *data, const links_event *ev)
{
    ring *r = data;
    uint32_t old = r->epoch;
    uint64_t next = r->q.stats.seq;
    r->epoch = ev->epoch;
    jobs_renumber(&r->q);
    r->early_set = 0;
    ring_reset_commit(r);
    r->commit_due = 0;
    if (ev->gone) {
        r->gen++;
        r->gone = 1;
        snprintf(r->gone_why, sizeof r->gone_why, "%s", ev->reason);
    }
    /* What runs cannot be confirmed in the old epoch any more. A lap
     * whose failure was of an older epoch than the one it settles carries
     * none (epoch.c, fold()): the ring was reset all the same. */
    int code = ev->code ? ev->code : RINGD_ERING;
    for (int k = 0; k < r->n_act; k++) {
        job *j = ring_slot(r, k)->job;
        jobs_fail(&r->q, j, FAIL_JOB, code, "%s #%" PRIu64 " failed: %s", j->label, j->seq,
                  ev->why);
    }
    if (ev->kind != LINKS_FORM) {
        /* Hosts may have submitted different numbers of collectives, or a
         * rank may have sent more before it learnt of a failure: nothing
         * submitted so far may pair with another host's. */
        /* They keep the numbers they would have had in the ready epoch they
         * were submitted in, as every other host numbers them, so that the
         * verdict names each the same way everywhere; after a BREAK too,
         * whose verdict comes with the lap that follows the repair. */
        uint32_t in = old == r->ready_epoch ? old : 0;
        jobs_hold_waiting(&r->q, code, ev->why, uv_now(r->loop), JOBS_SETTLE_GRACE_MS, in, &next);
        if (r->watcher) r->watcher->reset(r->watcher_data);
        if (links_left(r->links)) {
            /* Out of the ring (ringctl leave), this host hears no lap until
             * it joins again: what it holds goes back now, and what its
             * ranks submitted since, saying so. */
            release_left(r);
            job_verdict v = {.code = RINGD_ERING,
                             .fail_seq = FRAME_NO_SEQ,
                             .reason = "this host has left the ring (ringctl leave; ringctl join "
                                       "takes it back)"};
            notify_settled(r, &v);
        }
    }
    ring_advance(r);
}

/* Keeps the resize from membership from to membership to, in words why:
 * to the view just set, or (member 0) to a ring that closed over this
 * host. */
static void remember_resize(ring *r, uint32_t from, uint32_t to, int member, const char *why)
{
    if (r->n_resizes == ENGINE_RESIZES_KEPT) {
        memmove(r->resizes, r->resizes + 1, (ENGINE_RESIZES_KEPT - 1) * sizeof r->resizes[0]);
        r->n_resizes--;
    }
    engine_resize *z = &r->resizes[r->n_resizes++];
    z->from = from;
    z->to = to;
    z->first_rank = member ? cfg_first_rank(&r->view, (size_t)r->me) : -1;
    z->ranks = member ? cfg_total_ranks(&r->view) : 0;
    snprintf(z->why, sizeof z->why, "%s", why);
}

void ring_on_settle(void *data, const frame_epoch *c, links_settled how)
{
    ring *r = data;
    int ready = how == LINKS_READY, passed = how == LINKS_PASSED;
    /* A rank that left is not waited for once its host is out of the ring
     * (the ring may not run yet: fewer than min_hosts hosts). */
    if (c->members && c->members != r->members) r->gone = 0;
    if (how == LINKS_BELOW) {
        /* A verdict of the minority side of a split: neither its membership
         * nor its failures are the ring's (links.c, settle()). */
        log_debug("epoch %u: a ring of %d hosts, fewer than min_hosts: nothing settled", c->epoch,
                  __builtin_popcountll(c->members));
        ring_advance(r);
        return;
    }
    /* A new membership: the ring is made of the confirmation's hosts, and
     * what it settles failed with the resize, on every host alike; also
     * when the ring waits for a rank (not for min_hosts: above). Every host on the
     * lap takes the membership now, and a call made for the old one fails
     * at once with the resize's words (local_requests.c), so the calls
     * this confirmation settles must too: a host whose rank made call k
     * before it and one whose rank makes call k after it answer alike. */
    int resized = c->members && c->members_epoch != r->members_epoch;
    int member = (int)(c->members >> r->pos & 1);
    uint32_t was = r->members_epoch;
    /* A ring that closed over this host (a confirmation it missed): its
     * verdict applies here, its hosts do not; the next one's do. */
    if (resized && member) ring_set_view(r, c->members, c->members_epoch);
    job_verdict v = {.epoch = c->prev_epoch,
                     .done = c->flags & EPOCH_FLAG_DONE_UNKNOWN ? 0 : c->done,
                     .code = c->code ? c->code : RINGD_ERING,
                     .fail_seq = c->fail_seq,
                     .own = c->code && c->fail_class != EPOCH_LEFT,
                     .reason = c->code ? c->reason : "the ring was reset",
                     .top = c->top,
                     .ready = ready,
                     .passed = passed,
                     .next_epoch = c->epoch,
                     .resized = resized};
    char why[FRAME_MAX_WAITING + 64];
    if (resized) {
        v.code = RINGD_ERESIZED;
        v.fail_seq = FRAME_NO_SEQ;
        v.own = 0;
        /* A resized CONFIRM says how. The membership may have been agreed
         * by an earlier one that left the ring waiting (a rank was not
         * connected yet): its words, which every host on its lap took, and
         * which a call made for the old membership since fails with
         * (local_requests.c). One that is new only to this host (it missed
         * the resize) may carry no words of it. */
        const char *agreed = r->links ? links_resize_why_of(r->links, c->members_epoch) : NULL;
        if (c->members_why[0])
            snprintf(why, sizeof why, "%s", c->members_why);
        else if (agreed)
            snprintf(why, sizeof why, "%s", agreed);
        else
            snprintf(why, sizeof why, "ring resized to %d hosts (this host missed the resize)",
                     __builtin_popcountll(c->members));
        v.reason = why;
        /* Also a ring that closed over this host: a call made for
         * membership was after both it and the one that takes this host
         * back fails with the first's words here (local_requests.c), as
         * on the hosts that ring included. (A call that waits here for
         * was when that ring's verdict comes fails with it at once.) */
        remember_resize(r, was, c->members_epoch, member, why);
    }
    jobs_settle(&r->q, &v);
    /* Nothing made for the old membership runs on the new one (after a
     * reset none waits: they were held and settled just now). */
    while (resized && jobs_waiting(&r->q)) {
        char text[FRAME_MAX_TEXT + 160];
        snprintf(text, sizeof text, "%s failed: %s", jobs_waiting(&r->q)->label, why);
        jobs_end_waiting(&r->q, RINGD_ERESIZED, text);
    }
    /* Those still finishing their sends or reads failed too, the same way;
     * they go back as they finish (ring_complete()). */
    for (int k = 0; k < r->n_act; k++) {
        active *a = ring_slot(r, k);
        if (a->epoch >= c->epoch) continue;
        a->job->epoch = a->epoch;
        jobs_settle_one(a->job, &v);
    }
    r->settled = c->epoch;
    if (ready || passed) {
        r->ready_epoch = c->epoch;
        r->gone = 0;
        log_debug("epoch %u settled: %" PRIu64 " collectives of epoch %u confirmed", c->epoch,
                  v.done, c->prev_epoch);
    }
    /* Last: the owner may hand over collectives now, which may fail and
     * reset the ring again from in here. */
    notify_settled(r, &v);
    ring_advance(r);
}

void ring_on_commit(void *data, const frame_commit *c)
{
    ring *r = data;
    /* One counted in another membership changes nothing. */
    if (!commit_merge(&r->cv, c)) return;
    r->commit_due = 1;
    uv_idle_start(&r->commit, on_commit_due);
    confirm(r);
    ring_advance(r);
}

/* ---- deadlines ---- */

/* The deadline tick runs while jobs wait or are held, while a reset waits
 * to be settled, and while frames of a collective not submitted here hold
 * the left link (check_unsubmitted()). */
void ring_update_tick(ring *r)
{
    r->q.awaiting = r->early_set;
    jobs_update_tick(&r->q);
}

/* Says what a collective past its deadline was waiting for (a NULL: one that
 * has not started). */
void ring_describe_wait(const ring *r, const active *a, char *out, size_t len)
{
    if (!a) {
        const cfg_host *right = &r->cfg->hosts[links_host(r->links, LINK_RIGHT)];
        const char *left = r->cfg->hosts[links_host(r->links, LINK_LEFT)].name;
        link_state ls = links_state(r->links, LINK_LEFT), rs = links_state(r->links, LINK_RIGHT);
        const char *le = links_last_error(r->links, LINK_LEFT);
        const char *re = links_last_error(r->links, LINK_RIGHT);
        const char *waiting = links_waiting(r->links);
        /* Too few hosts, or this one left: nothing here will change it. */
        if (links_short_of_hosts(r->links))
            snprintf(out, len, "the ring is not ready: %s", waiting);
        else if (ls == LINK_UP && rs == LINK_UP && *waiting)
            snprintf(out, len,
                     "the ring is not ready until every local rank of every host is "
                     "connected: %s",
                     waiting);
        else if (ls == LINK_UP && rs == LINK_UP)
            snprintf(out, len,
                     "the ring is not formed: both links of this host are up, so a link "
                     "further round the ring is down (see the other hosts' logs or "
                     "ringctl status there)");
        else
            snprintf(out, len,
                     "the ring is not formed: right link to %s (%s) is %s%s%s; left link "
                     "from %s is %s%s%s",
                     right->name, right->address, link_state_name(rs), *re ? ": " : "", re, left,
                     link_state_name(ls), *le ? ": " : "", le);
        return;
    }
    int g = a->sch.first;
    while (g <= a->sch.last) {
        int c = schedule_recv(&a->sch, g);
        if (c >= 0 && a->recv_off[g] < ring_chunk_len(r, a, c)) break;
        g++;
    }
    if (g <= a->sch.last)
        snprintf(out, len,
                 "at step %d of %d, waiting for data from left neighbour %s "
                 "(has every rank submitted this collective?)",
                 g - a->sch.first + 1, a->sch.last - a->sch.first + 1, ring_neighbour(r, -1));
    else
        snprintf(out, len, "all data received, waiting for sends to right neighbour %s",
                 ring_neighbour(r, 1));
}

/* The left neighbour's data for a collective this host's ranks have not
 * submitted holds the link (ring_on_data()), and with it every frame
 * behind it. Once it has waited collective_timeout the other hosts are
 * timing out on it: this host says why, as the cause, so that every rank
 * learns which ranks did not come, and the reset unblocks the link. */
static void check_unsubmitted(ring *r, uint64_t now)
{
    (void)now;
    if (!r->early_set || r->early_epoch != r->epoch || r->early_seq < r->q.stats.seq) return;
    uint64_t waited_ms = (uv_hrtime() - r->early_ns) / 1000000;
    if (waited_ms < r->cfg->collective_timeout_ms) return;
    r->early_set = 0;
    char ranks[160];
    if (r->watcher)
        r->watcher->missing(r->watcher_data, ranks, sizeof ranks);
    else
        ring_host_ranks(r, r->me, ranks, sizeof ranks);
    epoch_failure f = {.code = RINGD_ETIMEDOUT,
                       .seq = r->early_seq,
                       .cls = EPOCH_CAUSE,
                       .origin = (uint32_t)r->pos};
    snprintf(f.reason, sizeof f.reason,
             "%s #%" PRIu64 " timed out on host %s: %s did not submit it within %.3g s "
             "(collective_timeout) of the other hosts' data for it; is a rank stuck, or "
             "behind the others?",
             engine_kind_name(r->early_kind), r->early_seq, r->view.hosts[r->me].name, ranks,
             (double)r->cfg->collective_timeout_ms / 1000);
    log_warn("%s", f.reason);
    links_fail(r->links, &f, 0);
}

void ring_on_tick(void *eng, uint64_t now)
{
    ring *r = eng;
    char why[512];
    if (jobs_stalled(&r->last_tick, now)) return;
    for (int k = 0; k < r->n_act; k++) {
        active *a = ring_slot(r, k);
        job *j = a->job;
        if (j->status != 0 || j->deadline > now) continue;
        ring_describe_wait(r, a, why, sizeof why);
        jobs_fail(&r->q, j, FAIL_RING, RINGD_ETIMEDOUT, "%s #%" PRIu64 " timed out on host %s %s",
                  j->label, j->seq, r->view.hosts[r->me].name, why);
    }
    /* One that could not even start: nothing to tell the ring. */
    job *j = jobs_waiting(&r->q);
    if (j && r->n_act == 0 && j->deadline <= now) {
        char msg[JOB_MAX_MESSAGE];
        ring_describe_wait(r, NULL, why, sizeof why);
        snprintf(msg, sizeof msg, "%s timed out before it could start on host %s: %s", j->label,
                 r->view.hosts[r->me].name, why);
        log_warn("%s", msg);
        if (r->q.held) {
            /* Replies go in order: behind the held ones. */
            jobs_hold_waiting(&r->q, RINGD_ETIMEDOUT, msg, now, 0, 0, NULL);
        } else {
            jobs_end_waiting(&r->q, RINGD_ETIMEDOUT, msg);
        }
    }
    check_unsubmitted(r, now);
    /* Held ones the ring never settled: a host that completed one cannot
     * tell whether every other host did, nor one that failed here how the
     * others ended it. */
    jobs_expire_held(&r->q, now, RINGD_ERING, COMPLETED_UNKNOWN,
                     "the ring did not settle it on every host in time; restart the training "
                     "step from a checkpoint on every rank");
    ring_advance(r);
}
