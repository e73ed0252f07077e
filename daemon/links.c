/*
 * links.c - the two links of a ring host and the ring's epoch; see links.h.
 *
 * A BREAK starts at the host downstream of a broken link (it lost its left
 * link; the host upstream lost its right one and knows already) and reaches
 * every host up to the next break. A FORM starts at the host whose right
 * link came up; if it comes back from the left, every link carried it, and
 * the CONFIRM that follows tells each host the ring is ready. Frames travel
 * one way, in order, so a host has always adopted an epoch before the first
 * DATA frame of it arrives.
 */
#include "links.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "epoch.h"
#include "listener.h"
#include "log.h"
#include "probe.h"
#include "ringd.h"

#define CONTROL_CAP (FRAME_HEADER_SIZE + FRAME_MAX_CONTROL_BODY)
#define ELASTIC_TICK_MS 200
#define LINKS_LEAVE_MS 200 /* for a LEAVE to go out before the links close */
/* A ring below min_hosts looks for the hosts it closed over (a split
 * network may have healed) every evict_after, at most this often. */
#define SEARCH_MIN_MS 5000
#define PROBE_MS 1000 /* how often a host tries one it cut out (Reachability) */

struct links {
    uv_loop_t *loop;
    const cfg *cfg;
    int me, n, left_host, right_host;
    links_callbacks cb;
    void *data;

    lifetime lt; /* every handle, link and connection of l */
    net_env env;
    hs_ctx hs;
    auth_key key;
    net_stats stats;
    listener *listener;
    peer *left, *right;
    uv_timer_t heartbeat; /* PINGs out, silent links closed */
    peer_clock beat;
    void (*close_done)(void *);
    void *close_data;

    epochs ep;
    /* This host's ranks were all there again while a lap went round: its
     * FORM follows that lap's confirmation, which it would otherwise cut
     * short for the hosts after it (since form_due, uv_now(); 0: none). */
    uint64_t form_due;
    /* It holds a CONFIRM until its second pass (epochs_hold()), since
     * held_since (uv_now(); 0: none). A second pass lost with a link, or
     * dropped by a host that moved on, would leave every host that held
     * it short of ready and no host ready to fail a collective and start
     * the lap that settles it: after heartbeat_timeout, this one does. */
    uint64_t held_since;
    char left_error[640]; /* why the left link is not up, as far as we know */
    int left_refused;     /* ... and it is that this host refused the last attempt */

    /* The elastic ring: the right link goes to the next host not closed
     * over, and the left link comes from the nearest that connects. */
    int elastic;
    uv_timer_t elastic_timer;
    int target;             /* the host the right link goes to, or tries */
    uint64_t target_ended;  /* peer_ended() of the right link then */
    uint64_t failing_since; /* the right link has not been up since; 0 while it is */
    uint64_t skipped;       /* hosts between this one and target: closed over */
    uint64_t gone;          /* hosts that said they leave (LEAVE): closed over at once */
    int left_leaves;        /* the left neighbour said it leaves: any host may replace it */
    uint64_t out_since[CFG_MAX_ELASTIC]; /* uv_now() a host went out of the ring; 0: in */
    uint64_t resizes;
    char resize_why[FRAME_MAX_WAITING + 64];
    uint32_t resize_epoch; /* the membership resize_why was said of */
    int below_min;          /* the last confirmation had fewer than min_hosts */
    uint64_t below_since;   /* ... since then, or the last search for the hosts closed over */
    int left_ring;          /* ringctl leave: no links until ringctl join */

    /* Reachability (PROTOCOL.md): a host that others reach but this one
     * cannot. As connector: the farther target that refused this host for
     * a nearer left neighbour, and the hosts between that this host then
     * found it still cannot reach (cut), which its HELLOs say and which it
     * probes until one answers. As acceptor: the hosts the left neighbour
     * said it cannot reach, refused while its link is up. */
    int refused_by; /* -1: none */
    uint64_t cut;   /* hosts between this one and target, out of its reach */
    probe *probe;
    uint64_t probed_at;     /* uv_now() of the last probe */
    int excluded_by;        /* -1: none */
    uint64_t excluded;      /* hosts between excluded_by and this one */
    /* Hosts the right link has tried at once, without waiting out the
     * backoff or the next tick, because they showed signs of life while it
     * was down (heard_from(), on_link_failed()); once each until it is up. */
    uint64_t hastened;
    uint64_t heard_at[CFG_MAX_ELASTIC]; /* uv_now() of each host's last sign of life */
    /* Looking ahead: while the right link is down, the host after its
     * target is probed too, so that two neighbours cut off at once are
     * closed over together, not one evict_after after the other. */
    int ahead;              /* the host probed; -1: none */
    uint64_t ahead_since;   /* uv_now() of its first probe; 0: none yet */
    int ahead_answered;     /* it accepted a connection since */
    uv_timer_t leave_timer; /* drops the links once the LEAVE is out */
};

#define BIT(h) (UINT64_C(1) << (h))

static const char *host_name(const links *l, int h)
{
    return l->cfg->hosts[h].name;
}

/* ---- epochs ---- */

static int send_epoch(links *l, const frame_epoch *e)
{
    uint8_t buf[CONTROL_CAP];
    int n = frame_encode_epoch(buf, sizeof buf, e);
    if (n < 0) return RINGD_EINVAL;
    return peer_send_control(l->right, buf, (size_t)n);
}

/* This host moved to epoch l->ep.epoch. why is what the log and the failed
 * collectives say; reason is the failure the lap carries ("" for a FORM). */
static void adopt(links *l, links_change kind, int gone, int code, const char *why,
                  const char *reason)
{
    log_info("ring epoch %u: %s", l->ep.epoch, why);
    l->form_due = 0; /* a new lap folds this host's ranks as they are now */
    l->held_since = 0; /* and what it holds */
    links_event ev = {.epoch = l->ep.epoch,
                      .kind = kind,
                      .gone = gone,
                      .code = code,
                      .why = why,
                      .reason = reason};
    l->cb.on_epoch(l->data, &ev);
    /* A frame held back for the ring is of the old epoch now: drop it. */
    if (l->left) peer_resume(l->left);
}

/* A link of this host broke: every host from here round to the next break
 * fails what it has submitted. */
static void break_ring(links *l, const char *what)
{
    char reason[FRAME_MAX_TEXT + 1];
    int n = snprintf(reason, sizeof reason, "ring broken: host %s ", host_name(l, l->me));
    snprintf(reason + n, sizeof reason - (size_t)n, "%s", what);
    epoch_failure f = {.code = RINGD_ERING,
                       .seq = FRAME_NO_SEQ,
                       .cls = EPOCH_CONSEQUENCE,
                       .origin = (uint32_t)l->me};
    memcpy(f.reason, reason, sizeof f.reason);
    epochs_note_failure(&l->ep, &f);
    uint32_t e = epochs_start(&l->ep, EPOCH_BREAK, NULL);
    adopt(l, LINKS_BREAK, 0, RINGD_ERING, reason, reason);
    frame_epoch b = {.epoch = e,
                     .origin = (uint32_t)l->me,
                     .phase = EPOCH_BREAK,
                     .code = RINGD_ERING,
                     .fail_seq = FRAME_NO_SEQ};
    memcpy(b.reason, reason, sizeof b.reason);
    send_epoch(l, &b);
}

/* Starts a lap of this host's own round the ring: a FORM (its right link
 * came up, or its ranks are all there again) or a RESET (a collective
 * failed, or a rank left: cause says what; the lap carries the first
 * failure of the epoch, which may be an earlier one). */
static void start_lap(links *l, epoch_phase phase, int gone, const char *cause)
{
    frame_epoch lap;
    epochs_start(&l->ep, phase, &lap);
    if (gone) lap.flags |= EPOCH_FLAG_GONE;
    char why[FRAME_MAX_TEXT + 64];
    if (phase == EPOCH_FORM)
        snprintf(why, sizeof why, "re-forming from host %s", host_name(l, l->me));
    else
        snprintf(why, sizeof why, "reset from host %s: %s", host_name(l, l->me), cause);
    adopt(l, phase == EPOCH_FORM ? LINKS_FORM : LINKS_RESET, gone, lap.code, why, lap.reason);
    send_epoch(l, &lap);
}

/* This host's ranks are all there again: a FORM ends the ring's wait. */
static void form_now(links *l)
{
    l->form_due = 0;
    if (l->n > 1 && !l->ep.incomplete && peer_state(l->right) == LINK_UP)
        start_lap(l, EPOCH_FORM, 0, NULL);
}

/* A lap came round: the last ready epoch is settled, and the ring is
 * ready, or waits for the ranks the confirmation names. */
static void note_members(links *l, const frame_epoch *c);

static void settle(links *l, const frame_epoch *c, int sent)
{
    l->held_since = 0;
    if (epochs_missed(&l->ep, c)) {
        /* The lap before went round with this host on it, and its CONFIRM
         * never came here (a link broke, or a newer lap overtook it: a host
         * drops the CONFIRM of an epoch before its own): what it said comes
         * first, or this host would settle c from another start than every
         * other host. Routine when ranks come and go: not a warning. */
        frame_epoch p = epochs_prior_confirm(&c->prior);
        log_info("epoch %u: its confirmation, which settled epoch %u, did not reach this host "
                 "(overtaken by a newer lap, or a link broke); settling it now as the others did",
                 p.epoch, p.prev_epoch);
        int waited_here = l->ep.waited.epoch != 0;
        epochs_settle_missed(&l->ep, &p);
        if (l->elastic && p.members) note_members(l, &p);
        if ((p.flags & EPOCH_FLAG_INCOMPLETE) && !waited_here) {
            /* Its verdict on the epoch's collectives was a waiting one's,
             * which resized nothing, and only then did the ring resize
             * (epoch.c, push_ready()): they end as that one said, as on
             * every host that had it, and then the ring moves on. */
            frame_epoch w = p;
            w.flags &= (uint8_t) ~(EPOCH_FLAG_RESIZED | EPOCH_FLAG_INCOMPLETE);
            w.members = 0;
            w.members_epoch = 0;
            w.members_why[0] = '\0';
            l->cb.on_settle(l->data, &w, LINKS_WAITING);
        }
        p.flags &= (uint8_t)~EPOCH_FLAG_INCOMPLETE;
        l->cb.on_settle(l->data, &p, LINKS_PASSED);
    }
    /* The ring's verdict on the last ready epoch, also if it waits: a
     * confirmation of a ring below min_hosts is no one's (below). */
    int below = l->elastic && c->members && __builtin_popcountll(c->members) < l->cfg->min_hosts;
    if (epochs_missed_waited(&l->ep, c)) {
        /* The first confirmation that settled that epoch left the ring
         * waiting, and never reached this host (a link broke on its way, a
         * newer lap overtook it, or it closed over this host): what it
         * said comes first. */
        frame_epoch w = epochs_prior_confirm(&c->waited);
        log_info("epoch %u: its confirmation, which settled epoch %u and left the ring waiting, "
                 "did not reach this host (overtaken by a newer lap, or a link broke); settling "
                 "it now as the others did",
                 w.epoch, w.prev_epoch);
        epochs_settle_waited(&l->ep, &w);
        if (l->elastic && w.members) note_members(l, &w);
        l->cb.on_settle(l->data, &w, LINKS_WAITING);
    }
    epochs_settle(&l->ep, c);
    if (!below && (c->flags & EPOCH_FLAG_INCOMPLETE)) epochs_keep_waited(&l->ep, c);
    if (l->elastic && c->members) note_members(l, c);
    int ready = epochs_ready(&l->ep);
    if (ready && !sent) l->ep.phase = RING_FORMING; /* not passed on: not ready */
    if (ready && sent)
        log_info("ring formed: %d hosts, epoch %u",
                 l->elastic ? __builtin_popcountll(c->members) : l->n, l->ep.epoch);
    else if (!ready)
        log_info("ring epoch %u: not ready until every local rank of every host is connected: %s",
                 l->ep.epoch, c->waiting);
    /* Fewer than min_hosts: the hosts this lap closed over may be a ring of
     * min_hosts that has settled the epoch otherwise (a split network), so
     * this side's verdict is no one's. What it held waits for theirs, which
     * the lap that takes it back carries (prior), or ends "outcome unknown"
     * at its deadline. */
    l->cb.on_settle(l->data, c, below ? LINKS_BELOW : ready && sent ? LINKS_READY : LINKS_WAITING);
    if (l->form_due && l->ep.phase == RING_WAITING)
        form_now(l);
    else
        l->form_due = 0;
}

/* ---- the elastic ring ---- */

/* Steps from host a forward to host b. */
static int dist(const links *l, int a, int b)
{
    return (b - a + l->n) % l->n;
}

/* The hosts strictly between a and b going forward. */
static uint64_t between(const links *l, int a, int b)
{
    uint64_t m = 0;
    for (int h = (a + 1) % l->n; h != b; h = (h + 1) % l->n)
        m |= BIT(h);
    return m;
}

static int ranks_of(const links *l, uint64_t members)
{
    int r = 0;
    for (int h = 0; h < l->n; h++)
        if (members & BIT(h)) r += l->cfg->hosts[h].local_clients;
    return r;
}

/* Appends the names of the hosts in mask to out: "h3, h4". */
static void append_names(const links *l, uint64_t mask, char *out, size_t len)
{
    for (int h = 0; h < l->n; h++) {
        size_t n = strlen(out);
        if (!(mask & BIT(h)) || n + 2 >= len) continue;
        snprintf(out + n, len - n, "%s%s", n && out[n - 1] != ' ' ? ", " : "", host_name(l, h));
    }
}

/* The origin of a lap that came round: a ring smaller than min_hosts does
 * not run; a new membership says what changed. */
static void judge_members(links *l, frame_epoch *c)
{
    int live = __builtin_popcountll(c->members), ranks = ranks_of(l, c->members);
    uint64_t all = frame_members_all((size_t)l->n);
    if (live < l->cfg->min_hosts) {
        size_t n = strlen(c->waiting);
        char out[FRAME_MAX_WAITING] = "";
        append_names(l, all & ~c->members, out, sizeof out);
        snprintf(c->waiting + n, sizeof c->waiting - n,
                 "%sonly %d of %d hosts reachable (min_hosts %d); not in the ring: %s",
                 n ? "; " : "", live, l->n, l->cfg->min_hosts, out);
        c->flags |= EPOCH_FLAG_INCOMPLETE;
    }
    if (!(c->flags & EPOCH_FLAG_RESIZED)) return;
    char what[FRAME_MAX_WAITING + 1] = "";
    uint64_t left = l->ep.members & ~c->members, back = c->members & ~l->ep.members;
    if (c->members_why[0]) {
        snprintf(what, sizeof what, "%s", c->members_why);
    } else if (left) {
        append_names(l, left, what, sizeof what);
        snprintf(what + strlen(what), sizeof what - strlen(what), " left");
    }
    if (back) {
        size_t n = strlen(what);
        snprintf(what + n, sizeof what - n, "%s", n ? "; back: " : "back: ");
        append_names(l, back, what, sizeof what);
    }
    if (!what[0]) snprintf(what, sizeof what, "a host restarted");
    snprintf(c->members_why, sizeof c->members_why, "ring resized to %d host%s (%d rank%s): %s",
             live, live == 1 ? "" : "s", ranks, ranks == 1 ? "" : "s", what);
}

/* A confirmation reached this host: who is in the ring, since when. */
static void note_members(links *l, const frame_epoch *c)
{
    uint64_t now = uv_now(l->loop);
    for (int h = 0; h < l->n; h++) {
        if (c->members & BIT(h))
            l->out_since[h] = 0;
        else if (!l->out_since[h])
            l->out_since[h] = now;
    }
    int below = __builtin_popcountll(c->members) < l->cfg->min_hosts;
    if (below && !l->below_min) l->below_since = now;
    l->below_min = below;
    if (c->flags & EPOCH_FLAG_RESIZED) {
        l->resizes++;
        snprintf(l->resize_why, sizeof l->resize_why, "%s", c->members_why);
        l->resize_epoch = c->members_epoch;
        log_warn("%s (epoch %u)", c->members_why, c->epoch);
    }
}

/* The right link goes to host h from now on. */
static void retarget(links *l, int h, const char *why)
{
    if (h == l->target) return;
    log_info("right link: %s; connecting to %s (%s)", why, host_name(l, h),
             l->cfg->hosts[h].address);
    l->cut = 0;
    peer_set_cut(l->right, 0);
    l->ahead = -1;
    l->target = h;
    l->failing_since = uv_now(l->loop);
    peer_set_host(l->right, h, why);
    l->target_ended = peer_ended(l->right); /* after closing the old host's connection */
}

/* Closes over the right link's host: the next one is tried. */
static void close_over(links *l, const char *why)
{
    int t = l->target, next = (t + 1) % l->n;
    l->skipped |= BIT(t);
    if (next == l->me) {
        /* Everyone else is out of reach: start again from the nearest. */
        next = l->right_host;
        l->skipped = 0;
        if (next == t) return;
    }
    char text[FRAME_MAX_WAITING];
    /* Back at the host that refused this one for a nearer left neighbour,
     * having found that neighbour out of reach again (not refusing: out of
     * reach): it is up for others, not for this host. The HELLO says so,
     * and the refuser takes this host instead (an asymmetric cut). */
    if (next == l->refused_by && !peer_refused(l->right)) {
        snprintf(text, sizeof text,
                 "closing over %s: %s, although %s has it as its left neighbour: asking %s to "
                 "take this host instead (an asymmetric cut)",
                 host_name(l, t), why, host_name(l, next), host_name(l, next));
        retarget(l, next, text);
        l->cut = between(l, l->me, next);
        peer_set_cut(l->right, 1);
        return;
    }
    snprintf(text, sizeof text, "closing over %s: %s", host_name(l, t), why);
    retarget(l, next, text);
}

/* The right link's target, farther than the nearest host, refused this one
 * for a nearer left neighbour: that neighbour is up and reaches it, so the
 * hosts between may be back; the nearest is tried again. */
static void search_nearest(links *l)
{
    l->refused_by = l->target;
    retarget(l, l->right_host, "refused by a farther host: looking for the nearest again");
}

/* While the right link is down: probes the host after its target, once a
 * PROBE_MS until it answers (a probe that times out or is refused is no
 * answer). */
static void look_ahead(links *l, uint64_t now)
{
    int h = (l->target + 1) % l->n;
    if (h == l->me || l->cut) return;
    if (h != l->ahead) {
        l->ahead = h;
        l->ahead_since = 0;
        l->ahead_answered = 0;
    }
    if (l->ahead_answered || probe_busy(l->probe)) return;
    if (l->ahead_since && now - l->probed_at < PROBE_MS) return;
    if (!l->ahead_since) l->ahead_since = now;
    l->probed_at = now;
    probe_start(l->probe, h);
}

/* Whether host h, the one after the target that is being closed over, has
 * been out of reach as long: probed from (within a tick of) the moment the
 * right link failed, it never answered, and it showed no sign of life
 * either. Frozen hosts do not count: their kernel still accepts. */
static int ahead_out_of_reach(const links *l, int h)
{
    return h == l->ahead && l->ahead_since && !l->ahead_answered &&
           l->ahead_since <= l->failing_since + ELASTIC_TICK_MS && l->heard_at[h] < l->ahead_since;
}

/* Every few hundred milliseconds: whether the right link's host has been
 * out of reach for evict_after, and whether a ring below min_hosts should
 * look for the hosts it closed over again (a split network heals). */
static void on_elastic(uv_timer_t *timer)
{
    links *l = timer->data;
    if (l->left_ring) return;
    uint64_t now = uv_now(l->loop), evict = l->cfg->evict_after_ms;
    int nearest = l->right_host, t = l->target;
    if (peer_state(l->right) == LINK_UP) {
        l->failing_since = 0;
        l->ahead = -1;
        if (l->cut && now - l->probed_at >= PROBE_MS && !probe_busy(l->probe)) {
            l->probed_at = now;
            probe_start(l->probe, nearest);
        }
        uint64_t search = evict > SEARCH_MIN_MS ? evict : SEARCH_MIN_MS;
        if (evict && l->below_min && t != nearest && now - l->below_since >= search) {
            l->below_since = now;
            retarget(l, nearest, "the ring has fewer than min_hosts: trying the hosts closed over");
        }
        return;
    }
    if (!l->failing_since) l->failing_since = now;
    char why[FRAME_MAX_WAITING];
    if (l->gone & BIT(t)) {
        /* Once: from now on it is a host closed over, tried again when
         * this host looks for the nearest (it may join again). */
        l->gone &= ~BIT(t);
        snprintf(why, sizeof why, "%s left", host_name(l, t));
        epochs_note(&l->ep, why);
        close_over(l, why);
        return;
    }
    if (!evict) return;
    look_ahead(l, now);
    /* A host closed over before gets one attempt, not evict_after again. */
    /* Counted, not timed: a refusal on loopback may come in the same
     * millisecond as the retarget, and would wait out a backoff unseen. */
    int tried = peer_state(l->right) == LINK_DOWN && peer_ended(l->right) > l->target_ended;
    if ((l->skipped & BIT(t)) && tried) {
        close_over(l, "still out of reach");
        return;
    }
    /* A farther host that refuses has a nearer left neighbour: search again. */
    if (t != nearest && tried && peer_refused(l->right)) {
        search_nearest(l);
        return;
    }
    if (now - l->failing_since < evict) return;
    /* A link timed out by heartbeats has no error of a connect attempt. */
    const char *err = peer_error(l->right);
    snprintf(why, sizeof why, "%s unreachable for %.0f s (%s)", host_name(l, t),
             (double)(now - l->failing_since) / 1000,
             *err ? err : "no answer since its link was lost");
    epochs_note(&l->ep, why);
    int next = (t + 1) % l->n, also = ahead_out_of_reach(l, next);
    close_over(l, why);
    if (!also || l->target != next || l->cut) return;
    snprintf(why, sizeof why,
             "%s unreachable for %.0f s too (no answer to a probe, no sign of life)",
             host_name(l, next), (double)(now - l->ahead_since) / 1000);
    epochs_note(&l->ep, why);
    close_over(l, why);
}

/* A probe of the nearest host this one cut out ended: if it answers, the
 * cut has healed, and the right link goes to it (the ring re-forms with it,
 * as its right neighbour takes it back once this host's link there ends). */
static void on_probed(void *data, int host, int status)
{
    links *l = data;
    if (host == l->ahead) {
        if (status == 0) l->ahead_answered = 1;
        return;
    }
    if (status < 0 || !(l->cut & BIT(host)) || l->left_ring) return;
    char why[FRAME_MAX_WAITING];
    snprintf(why, sizeof why, "%s answers again: the cut has healed", host_name(l, host));
    epochs_note(&l->ep, why);
    retarget(l, host, why);
}

/* A sign of life of host h while the right link is down: a lap h started
 * came round to this host, or h's HELLO reached its listener. If h is the
 * host the right link tries, it is tried at once: it is back (its daemon
 * restarted, say), and waiting out the backoff would keep the ring without
 * it for up to backoff_max. Once while the right link is down: a host that
 * others reach and this one cannot (an asymmetric cut) keeps sending signs
 * of life, and is not to be tried over and over. A host closed over is not
 * taken back this way but through the host beyond, which has it as its
 * left neighbour again: that host drops this one's link, or refuses it
 * (on_link_failed()). Trying it before that refusal would spend its one
 * attempt before close_over() could tell a failure from an asymmetric cut. */
static void heard_from(links *l, int h)
{
    if (h >= 0 && h < l->n && h < CFG_MAX_ELASTIC) l->heard_at[h] = uv_now(l->loop);
    if (!l->elastic || l->left_ring || h != l->target || peer_state(l->right) != LINK_DOWN) return;
    if ((l->hastened & BIT(h)) || (l->cut & BIT(h))) return;
    l->hastened |= BIT(h);
    log_info("right link: %s shows signs of life: trying it at once", host_name(l, h));
    peer_retry_now(l->right);
}

/* An attempt of the right link ended without it coming up. A refusal by a
 * farther host for a nearer left neighbour is news that the ring changes
 * there (a host is back): the nearest host is tried at once, not at the
 * next tick, once while the right link is down; the tick does the rest. */
static void on_link_failed(void *owner, peer *p)
{
    links *l = owner;
    /* A connection closed by retarget() belongs to the old target. */
    if (!l->elastic || l->left_ring || peer_host(p) != l->target) return;
    if (l->target == l->right_host || !peer_refused(p) || (l->hastened & BIT(l->right_host)))
        return;
    l->hastened |= BIT(l->right_host);
    search_nearest(l);
}

/* A host leaves for good: the hosts up to its left neighbour pass it on,
 * and that neighbour closes over it at once. */
static void handle_leave(links *l, const frame_epoch *e)
{
    int who = (int)e->origin;
    if (!l->elastic || who == l->me) return;
    log_info("%s leaves the ring: %s", host_name(l, who), e->reason);
    if (who == peer_host(l->left)) l->left_leaves = 1;
    if (l->target != who) {
        send_epoch(l, e);
        return;
    }
    l->gone |= BIT(who);
    if (peer_state(l->right) == LINK_UP) peer_reset(l->right, "the host leaves the ring");
    on_elastic(&l->elastic_timer);
}

static void handle_epoch(links *l, const frame_header *h, const uint8_t *body)
{
    frame_epoch e;
    if (frame_decode_epoch(h, body, &e) < 0 || e.origin >= (uint32_t)l->n) {
        peer_reset(l->left, "malformed EPOCH frame");
        return;
    }
    if (e.phase == EPOCH_LEAVE) {
        handle_leave(l, &e);
        return;
    }
    char why[FRAME_MAX_TEXT + 64];
    epochs_set_min_hosts(&l->ep, l->cfg->min_hosts); /* a reload changes it at once */
    switch (epochs_receive(&l->ep, &e)) {
    case EPOCH_BROKE:
        adopt(l, LINKS_BREAK, 0, e.code, e.reason, e.reason);
        send_epoch(l, &e);
        break;
    case EPOCH_RESETTING:
        snprintf(why, sizeof why, "reset from host %s: %s", host_name(l, (int)e.origin), e.reason);
        adopt(l, LINKS_RESET, !!(e.flags & EPOCH_FLAG_GONE), e.code, why, e.reason);
        send_epoch(l, &e);
        break;
    case EPOCH_REFORMING:
        snprintf(why, sizeof why, "re-forming from host %s", host_name(l, (int)e.origin));
        adopt(l, LINKS_FORM, 0, RINGD_ERING, why, "");
        send_epoch(l, &e);
        break;
    case EPOCH_CAME_ROUND: {
        frame_epoch c = epochs_confirmation(&l->ep, &e);
        if (l->elastic) judge_members(l, &c);
        int sent = send_epoch(l, &c) == 0;
        /* Held also if it could not go on: settled here alone, it would be
         * a verdict no later lap carries (epochs_hold()). */
        if (epochs_hold(&l->ep, &c)) {
            log_debug("ring epoch %u: confirmation sent; settling it when it comes round again",
                      c.epoch);
            l->held_since = uv_now(l->loop);
        } else
            settle(l, &c, sent);
        break;
    }
    case EPOCH_CONFIRMED:
        settle(l, &e, send_epoch(l, &e) == 0);
        break;
    case EPOCH_HELD:
        log_debug("ring epoch %u: confirmation passed on; settling it when it comes round again",
                  e.epoch);
        l->held_since = uv_now(l->loop);
        send_epoch(l, &e);
        break;
    case EPOCH_BREAK_ROUND:
        log_info("ring epoch %u: the break came round: every link is up", l->ep.epoch);
        if (peer_state(l->right) == LINK_UP) start_lap(l, EPOCH_FORM, 0, NULL);
        break;
    case EPOCH_DROP:
        break;
    }
    heard_from(l, (int)e.origin);
}

/* ---- the links' events ---- */

static void on_link_up(void *owner, peer *p)
{
    links *l = owner;
    if (p == l->left) {
        l->left_error[0] = '\0';
        l->left_refused = 0;
        l->cb.on_up(l->data, LINK_LEFT);
        /* Someone took this host as its right neighbour: the ring is
         * changing, and the host the right link tries may take it now (it
         * refused it for a host that could not reach this one, which can
         * now): backing off would keep the ring down after a cut heals. */
        if (l->elastic && !l->left_ring && peer_state(l->right) != LINK_UP)
            peer_retry_now(l->right);
        return;
    }
    if (l->elastic) {
        /* The hosts between here and the target stay closed over. */
        l->refused_by = -1;
        l->skipped = 0;
        for (int h = l->right_host; h != l->target; h = (h + 1) % l->n)
            l->skipped |= BIT(h);
        l->gone &= ~BIT(l->target);
        l->failing_since = 0;
        l->hastened = 0;
    }
    l->cb.on_up(l->data, LINK_RIGHT);
    start_lap(l, EPOCH_FORM, 0, NULL);
}

static void on_link_down(void *owner, peer *p, const char *why)
{
    links *l = owner;
    const cfg_host *h = &l->cfg->hosts[peer_host(p)];
    char what[FRAME_MAX_TEXT];
    if (p == l->left) {
        snprintf(l->left_error, sizeof l->left_error, "%s", why);
        l->left_refused = 0;
        l->excluded = 0; /* whoever connects next may be the left neighbour */
        l->excluded_by = -1;
        log_warn("left link from %s lost: %s", h->name, why);
        l->cb.on_down(l->data, LINK_LEFT, why);
        snprintf(what, sizeof what, "lost its link from %s (%s): %s", h->name, h->address, why);
        break_ring(l, what);
        return;
    }
    log_warn("right link to %s lost: %s", h->name, why);
    l->cb.on_down(l->data, LINK_RIGHT, why);
    if (l->elastic && !l->left_ring) {
        l->failing_since = uv_now(l->loop);
        /* Look for the nearest host again: one closed over may be back. */
        if (!(l->gone & BIT(l->target)))
            retarget(l, l->right_host, "lost the link: trying the nearest host again");
    }
    /* The break travels from the right neighbour's side; here it only fails
     * what this host has. */
    snprintf(what, sizeof what, "ring broken: host %s lost its link to %s (%s): %s",
             host_name(l, l->me), h->name, h->address, why);
    epoch_failure f = {.code = RINGD_ERING,
                       .seq = FRAME_NO_SEQ,
                       .cls = EPOCH_CONSEQUENCE,
                       .origin = (uint32_t)l->me};
    snprintf(f.reason, sizeof f.reason, "%s", what);
    epochs_note_failure(&l->ep, &f);
    epochs_start(&l->ep, EPOCH_BREAK, NULL);
    adopt(l, LINKS_BREAK, 0, RINGD_ERING, what, what);
}

static int on_link_data(void *owner, peer *p, const frame_data *d, uint8_t **dst, char *why,
                        size_t len)
{
    links *l = owner;
    (void)p;
    /* Frames of an older epoch belong to collectives that failed. */
    if (!epochs_current(&l->ep, d->epoch)) return READER_SKIP;
    return l->cb.on_data(l->data, d, dst, why, len);
}

static void on_link_payload(void *owner, peer *p, const frame_data *d, int status, const char *why)
{
    links *l = owner;
    (void)p;
    l->cb.on_payload(l->data, d, status, why);
}

static void on_link_control(void *owner, peer *p, const frame_header *h, const uint8_t *body)
{
    links *l = owner;
    (void)p;
    if (h->type == FRAME_EPOCH) {
        handle_epoch(l, h, body);
        return;
    }
    if (h->type == FRAME_REPORT) {
        static summary_part rp; /* 5 KiB: not on the stack */
        if (frame_decode_report(h, body, &rp) < 0) {
            peer_reset(l->left, "malformed REPORT frame");
            return;
        }
        if (l->cb.on_report) l->cb.on_report(l->data, &rp);
        return;
    }
    static frame_commit c; /* 16 KiB: not on the stack */
    if (frame_decode_commit(h, body, &c) < 0 || c.n > l->n) {
        peer_reset(l->left, "malformed COMMIT frame");
        return;
    }
    if (epochs_current(&l->ep, c.epoch) && epochs_ready(&l->ep)) l->cb.on_commit(l->data, &c);
}

static void on_link_sent(void *owner, void *ctx, int status)
{
    links *l = owner;
    l->cb.on_sent(l->data, ctx, status);
}

static uint32_t hello_epoch(void *owner, peer *p)
{
    links *l = owner;
    (void)p;
    return l->ep.epoch;
}

static void on_welcomed(void *owner, peer *p, const frame_welcome *w)
{
    links *l = owner;
    (void)p;
    epochs_raise(&l->ep, w->epoch);
}

static const peer_ops link_ops = {on_link_up,      on_link_down,    on_link_data,
                                  on_link_payload, on_link_control, on_link_sent,
                                  hello_epoch,     on_welcomed,     on_link_failed};

/* ---- the listener's events ---- */

static uint32_t welcome_epoch(void *owner, const frame_hello *h)
{
    links *l = owner;
    if (h) epochs_raise(&l->ep, h->epoch);
    return l->ep.epoch;
}

/* Elastic: whether host from may be the left neighbour now: it is the
 * nearest host that wants to be (closer than the current one), or the
 * left link is down, or it cannot reach the current one (cut: its HELLO
 * says FRAME_FLAG_CUT). A host the left neighbour cannot reach is not taken
 * while that link is up. 0, or a code with the reason in why. */
static int may_take_left(links *l, int from, int cut, char *why, size_t len)
{
    if (l->left_ring) {
        snprintf(why, len, "host %s has left the ring (ringctl leave; ringctl join takes it back)",
                 host_name(l, l->me));
        return RINGD_ESHUTDOWN;
    }
    int cur = peer_host(l->left);
    int up = peer_state(l->left) == LINK_UP;
    if (up && cur == l->excluded_by && (l->excluded & BIT(from))) {
        snprintf(why, len,
                 "host %s runs without %s: its left neighbour %s cannot reach %s (an asymmetric "
                 "cut); %s is taken back once %s can",
                 host_name(l, l->me), host_name(l, from), host_name(l, cur), host_name(l, from),
                 host_name(l, from), host_name(l, cur));
        return RINGD_EBUSY;
    }
    if (!up || l->left_leaves || from == cur || dist(l, from, l->me) < dist(l, cur, l->me) || cut)
        return 0;
    snprintf(why, len, "host %s's left neighbour is %s, which is nearer on the ring than %s",
             host_name(l, l->me), host_name(l, cur), host_name(l, from));
    return RINGD_EBUSY;
}

static int admit(void *owner, const frame_hello *h, char *why, size_t len)
{
    links *l = owner;
    if (!l->elastic) return 0;
    int rc = may_take_left(l, (int)h->from_pos, h->cut, why, len);
    heard_from(l, (int)h->from_pos);
    return rc;
}

static void on_accepted(void *owner, conn *c, int from)
{
    links *l = owner;
    char why[256];
    if (!l->elastic && from != l->left_host) {
        conn_close(c, "not this host's left neighbour");
        return;
    }
    if (c->hs.stream != 0) {
        if (from == peer_host(l->left))
            peer_attach(l->left, c);
        else
            conn_close(c, "a stream of no link this host has");
        return;
    }
    if (l->elastic && from != peer_host(l->left)) {
        if (may_take_left(l, from, c->hs.cut, why, sizeof why) < 0) {
            conn_close(c, why);
            return;
        }
        /* The ring changes here: the old left link breaks it first. */
        int cur = peer_host(l->left), up = peer_state(l->left) == LINK_UP;
        uint64_t cut = 0;
        if (l->left_leaves) {
            snprintf(why, sizeof why, "%s connected: %s leaves the ring", host_name(l, from),
                     host_name(l, cur));
        } else if (up && c->hs.cut && dist(l, cur, l->me) < dist(l, from, l->me)) {
            cut = between(l, from, l->me);
            snprintf(why, sizeof why,
                     "%s cannot reach %s (an asymmetric cut): %s is the left neighbour now, "
                     "without %s",
                     host_name(l, from), host_name(l, cur), host_name(l, from), host_name(l, cur));
            log_warn("%s", why);
        } else {
            snprintf(why, sizeof why, "%s, nearer on the ring, connected", host_name(l, from));
        }
        if (up) peer_reset(l->left, why);
        peer_set_host(l->left, from, why);
        l->excluded = cut; /* after the reset, which ends any earlier exclusion */
        l->excluded_by = cut ? from : -1;
        l->gone &= ~BIT(from);
    }
    l->left_leaves = 0;
    peer_accept(l->left, c);
}

static void on_refused(void *owner, const char *why)
{
    links *l = owner;
    if (peer_state(l->left) == LINK_UP) return;
    snprintf(l->left_error, sizeof l->left_error, "%s", why);
    l->left_refused = 1;
}

static const listener_ops listen_ops = {welcome_epoch, on_accepted, on_refused, admit};

/* ---- heartbeats ---- */

static void on_heartbeat(uv_timer_t *t)
{
    links *l = t->data;
    uint64_t now = uv_now(l->loop);
    uv_timer_set_repeat(t, l->cfg->heartbeat_interval_ms); /* a reload may change it */
    peer_clock_tick(&l->beat, now, l->cfg);
    peer_heartbeat(l->left, now, &l->beat);
    peer_heartbeat(l->right, now, &l->beat);
    /* The lap it waited for neither came back nor gave way to another. */
    if (l->form_due && now - l->form_due >= l->cfg->heartbeat_timeout_ms) form_now(l);
    if (l->held_since && now - l->held_since >= l->cfg->heartbeat_timeout_ms &&
        l->ep.phase == RING_FORMING && peer_state(l->right) == LINK_UP) {
        log_info("ring epoch %u: its confirmation did not come round again: a FORM settles it",
                 l->ep.epoch);
        start_lap(l, EPOCH_FORM, 0, NULL);
    }
}

/* ---- lifecycle ---- */

int links_new(links **out, uv_loop_t *loop, const cfg *c, int me, const links_callbacks *cb,
              void *data)
{
    links *l = calloc(1, sizeof *l);
    if (!l) return RINGD_ENOMEM;
    l->loop = loop;
    l->cfg = c;
    l->me = me;
    l->n = (int)c->n_hosts;
    l->left_host = (me + l->n - 1) % l->n;
    l->right_host = (me + 1) % l->n;
    l->cb = *cb;
    l->data = data;
    epochs_init(&l->ep, l->n, me);
    l->hs = (hs_ctx){.cfg = c,
                     .me = me,
                     .streams = c->streams > 0 ? c->streams : 1,
                     .mode = HS_RING,
                     .elastic = l->n > 1 && l->n <= CFG_MAX_ELASTIC && c->evict_after_ms > 0};
    l->env = (net_env){.loop = loop, .cfg = c, .hs = &l->hs, .lt = &l->lt, .stats = &l->stats};
    uv_timer_init(loop, &l->heartbeat);
    l->heartbeat.data = l;
    uv_timer_init(loop, &l->elastic_timer);
    l->elastic_timer.data = l;
    uv_timer_init(loop, &l->leave_timer);
    l->leave_timer.data = l;
    l->target = l->right_host;
    l->refused_by = l->excluded_by = l->ahead = -1;
    l->elastic = l->n > 1 && l->n <= CFG_MAX_ELASTIC && c->algorithm == CFG_ALG_RING &&
                 c->evict_after_ms > 0;
    if (l->elastic) epochs_set_elastic(&l->ep, c->min_hosts);
    if (l->elastic && probe_new(&l->probe, loop, c, &l->lt, on_probed, l) < 0) {
        links_close(l, NULL, NULL);
        return RINGD_ENOMEM;
    }
    if (l->n > 1) {
        unsigned accepts = PEER_ACCEPTS(FRAME_DATA) | PEER_ACCEPTS(FRAME_COMMIT) |
                           PEER_ACCEPTS(FRAME_EPOCH) | PEER_ACCEPTS(FRAME_REPORT);
        l->listener = listener_new(&l->env, &listen_ops, l);
        l->left = peer_new(&l->env, &link_ops, l, l->left_host, PEER_ACCEPTOR, accepts);
        l->right = peer_new(&l->env, &link_ops, l, l->right_host, PEER_CONNECTOR, 0);
        if (!l->listener || !l->left || !l->right) {
            links_close(l, NULL, NULL);
            return RINGD_ENOMEM;
        }
    }
    *out = l;
    return 0;
}

void links_set_key(links *l, const auth_key *key)
{
    l->key = *key;
    l->hs.key = &l->key;
}

int links_start(links *l, char *err, size_t errlen)
{
    if (l->n == 1) return 0;
    const cfg_host *h = &l->cfg->hosts[l->me];
    int rc = listener_start(l->listener, err, errlen);
    if (rc < 0) return rc;
    log_info("listening on %s for left neighbour %s", h->address, host_name(l, l->left_host));
    if (!l->hs.key)
        log_warn("no secret_file: any host that can reach %s may join the ring; "
                 "set a cluster key in the config",
                 h->address);
    l->beat.last = uv_now(l->loop);
    uv_timer_start(&l->heartbeat, on_heartbeat, l->cfg->heartbeat_interval_ms,
                   l->cfg->heartbeat_interval_ms);
    if (l->elastic) uv_timer_start(&l->elastic_timer, on_elastic, ELASTIC_TICK_MS, ELASTIC_TICK_MS);
    peer_start(l->right);
    return 0;
}

void links_reset(links *l, const char *why)
{
    if (l->n == 1) return;
    peer_reset(l->left, why);
    peer_reset(l->right, why);
}

static void links_free(void *data)
{
    links *l = data;
    void (*done)(void *) = l->close_done;
    void *done_data = l->close_data;
    free(l);
    if (done) done(done_data);
}

void links_close(links *l, void (*done)(void *data), void *data)
{
    l->close_done = done;
    l->close_data = data;
    if (l->listener) listener_close(l->listener);
    if (l->left) peer_close(l->left);
    if (l->right) peer_close(l->right);
    if (l->probe) probe_close(l->probe);
    l->probe = NULL;
    l->heartbeat.data = &l->lt;
    lifetime_hold(&l->lt);
    uv_close((uv_handle_t *)&l->heartbeat, lifetime_handle_closed);
    l->elastic_timer.data = &l->lt;
    lifetime_hold(&l->lt);
    uv_close((uv_handle_t *)&l->elastic_timer, lifetime_handle_closed);
    l->leave_timer.data = &l->lt;
    lifetime_hold(&l->lt);
    uv_close((uv_handle_t *)&l->leave_timer, lifetime_handle_closed);
    lifetime_end(&l->lt, links_free, l);
}

int links_send_data(links *l, const frame_data *d, const uint8_t *payload, void *ctx)
{
    return peer_send_data(l->right, d, l->ep.epoch, payload, ctx);
}

int links_send_commit(links *l, frame_commit *c)
{
    static uint8_t buf[FRAME_HEADER_SIZE + FRAME_MAX_COMMIT_BODY];
    c->epoch = l->ep.epoch;
    int n = frame_encode_commit(buf, sizeof buf, c);
    if (n < 0) return RINGD_EINVAL;
    return peer_send_control(l->right, buf, (size_t)n) < 0 ? RINGD_ERING : 0;
}

int links_send_report(links *l, const summary_part *p)
{
    static uint8_t buf[FRAME_HEADER_SIZE + FRAME_MAX_REPORT_BODY];
    if (l->n == 1) return RINGD_ERING;
    int n = frame_encode_report(buf, sizeof buf, p);
    if (n < 0) return RINGD_EINVAL;
    return peer_send_control(l->right, buf, (size_t)n) < 0 ? RINGD_ERING : 0;
}

static void on_left(uv_timer_t *t)
{
    links *l = t->data;
    if (!l->left_ring) return; /* joined again meanwhile */
    char why[128];
    snprintf(why, sizeof why, "host %s left the ring", host_name(l, l->me));
    peer_hold(l->right, 1, why);
    peer_reset(l->left, why);
}

int links_leave(links *l, const char *why)
{
    if (!l->elastic) return RINGD_EINVAL;
    if (l->left_ring) return 0;
    l->left_ring = 1;
    log_warn("leaving the ring: %s", why);
    if (peer_state(l->right) == LINK_UP) {
        frame_epoch e = {.epoch = l->ep.epoch,
                         .origin = (uint32_t)l->me,
                         .phase = EPOCH_LEAVE,
                         .fail_seq = FRAME_NO_SEQ,
                         .done = UINT64_MAX};
        snprintf(e.reason, sizeof e.reason, "%s", why);
        send_epoch(l, &e);
    }
    /* The LEAVE goes out first; the links close behind it. */
    uv_timer_start(&l->leave_timer, on_left, LINKS_LEAVE_MS, 0);
    return 0;
}

int links_join(links *l)
{
    if (!l->elastic) return RINGD_EINVAL;
    if (!l->left_ring) return 0;
    l->left_ring = 0;
    uv_timer_stop(&l->leave_timer);
    log_info("joining the ring again");
    l->skipped = 0;
    retarget(l, l->right_host, "joining the ring again");
    peer_hold(l->right, 0, NULL);
    return 0;
}

int links_left(const links *l)
{
    return l->left_ring;
}

const char *links_resize_why(const links *l)
{
    return l->resize_why;
}

const char *links_resize_why_of(const links *l, uint32_t members_epoch)
{
    return l->resize_why[0] && l->resize_epoch == members_epoch ? l->resize_why : NULL;
}

void links_get_membership(const links *l, links_membership *out)
{
    memset(out, 0, sizeof *out);
    out->elastic = l->elastic;
    out->n_hosts = l->n;
    out->min_hosts = l->cfg->min_hosts;
    out->members = l->elastic ? l->ep.members : frame_members_all((size_t)l->n);
    out->members_epoch = l->ep.members_epoch;
    out->resizes = l->resizes;
    out->resize_why = l->resize_why;
    out->left_ring = l->left_ring;
    for (int h = 0; h < l->n && h < CFG_MAX_ELASTIC; h++)
        out->out_since[h] = l->out_since[h];
}

void links_fail(links *l, const epoch_failure *f, int gone)
{
    epochs_note_failure(&l->ep, f);
    if (l->n == 1) return;
    if (peer_state(l->right) == LINK_UP) {
        start_lap(l, EPOCH_RESET, gone, f->reason);
        return;
    }
    /* No lap can go round: this host alone moves on; the FORM that follows
     * the link's return settles the rest. */
    char why[FRAME_MAX_TEXT + 64];
    snprintf(why, sizeof why, "reset on host %s: %s", host_name(l, l->me), f->reason);
    epochs_start(&l->ep, EPOCH_BREAK, NULL);
    adopt(l, LINKS_BREAK, gone, f->code, why, f->reason);
}

void links_members(links *l, int complete, const char *missing)
{
    int was = l->ep.incomplete;
    epochs_set_members(&l->ep, complete, missing);
    if (!was || !complete) return;
    if (l->ep.phase == RING_FORMING) {
        /* A lap of this epoch passed this host while a rank was missing:
         * its confirmation (INCOMPLETE) settles the collectives before it,
         * or resizes the ring, on every host it reaches. A FORM now would
         * stop it here, and the hosts after this one would settle them by
         * the next lap instead, maybe otherwise (another resize's words). */
        l->form_due = uv_now(l->loop);
        return;
    }
    form_now(l);
}

void links_completed(links *l, uint64_t done)
{
    epochs_completed(&l->ep, done);
}

void links_confirmed(links *l, uint64_t least)
{
    epochs_confirmed(&l->ep, least);
}

void links_submitted(links *l, uint64_t top)
{
    epochs_submitted(&l->ep, top);
}

const char *links_waiting(const links *l)
{
    /* What the last confirmation said the ring waits for holds until one
     * says it is ready, also while a later lap goes round. */
    if (l->left_ring)
        return "this host has left the ring (ringctl leave; ringctl join takes it back)";
    return l->ep.phase == RING_READY ? "" : l->ep.waiting;
}

int links_short_of_hosts(const links *l)
{
    return l->left_ring || l->below_min;
}

void links_resume(links *l)
{
    if (l->left) peer_resume(l->left);
}

link_state links_state(const links *l, link_side side)
{
    if (l->n == 1) return LINK_SELF;
    return peer_state(side == LINK_LEFT ? l->left : l->right);
}

int links_host(const links *l, link_side side)
{
    if (l->n == 1) return l->me;
    return peer_host(side == LINK_LEFT ? l->left : l->right);
}

int links_ready(const links *l)
{
    return l->n == 1 || (epochs_ready(&l->ep) && peer_state(l->left) == LINK_UP &&
                         peer_state(l->right) == LINK_UP);
}

uint32_t links_epoch(const links *l)
{
    return l->ep.epoch;
}

const char *links_last_error(const links *l, link_side side)
{
    if (l->n == 1) return "";
    if (side == LINK_LEFT) return peer_state(l->left) == LINK_UP ? "" : l->left_error;
    return peer_error(l->right);
}

int links_refused(const links *l, link_side side)
{
    if (l->n == 1) return 0;
    if (side == LINK_LEFT) return peer_state(l->left) != LINK_UP && l->left_refused;
    return peer_refused(l->right);
}

uint64_t links_since(const links *l, link_side side)
{
    if (l->n == 1) return 0;
    return peer_since(side == LINK_LEFT ? l->left : l->right);
}

void links_get_stats(const links *l, net_stats *out)
{
    *out = l->stats;
}
