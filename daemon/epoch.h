/*
 * epoch.h - the ring's epochs: the rules, without sockets.
 *
 * The ring runs under an epoch that every host agrees on once the ring is
 * whole; collectives are numbered from 0 in each, and frames of another
 * epoch are stale. A host that sees a link break or form, a collective
 * fail, or one of its ranks leave or come back, starts an EPOCH frame with
 * a new epoch of its own (epoch % n == its position, larger than any it has
 * seen, so no two hosts pick the same one); hosts adopt larger epochs and
 * pass them on.
 *
 *   BREAK    a link broke: every host up to the next break fails what it
 *            has submitted. It travels one way and comes back to nobody.
 *   RESET    a collective failed, or a rank left: every host fails what is
 *            not confirmed yet. It goes round the ring and comes back.
 *   FORM     a right link came up, or a host has all its ranks again; it
 *            goes round the ring and comes back.
 *   CONFIRM  sent by the host whose RESET or FORM came back: the ring is
 *            ready again, or, INCOMPLETE, waits for the ranks it names.
 *            In an elastic ring of spare configured hosts above
 *            min_hosts, the origin and the hosts fewer than spare hops
 *            after it pass the CONFIRM on and hold it, and settle it when
 *            it comes past them a second time, so that no host acts on a
 *            verdict before spare + 1 hosts have it (one of them is on
 *            any later lap, which then carries it).
 *
 * A RESET or FORM gathers, as it goes round, what settles the epoch the
 * ring was last ready in: the first failure any host knows of, how many
 * collectives of that epoch every host completed (the minimum), and how
 * many any rank submitted in it (the maximum, top). The CONFIRM hands them
 * to every host: collectives below done succeeded on every host, those from
 * done to top failed, with that failure, and every rank's collectives from
 * top on are the next epoch's. PROTOCOL.md, "Ring epochs" and "Outcomes",
 * has the whole story; this module decides, links.c sends.
 */
#ifndef RINGD_EPOCH_H
#define RINGD_EPOCH_H

#include <stdint.h>

#include "proto/frame.h"

/* Where a host stands in its epoch. */
typedef enum {
    RING_BROKEN,  /* a link broke, or a collective failed, under this epoch */
    RING_FORMING, /* a FORM or RESET of this epoch is going round */
    RING_WAITING, /* confirmed, but a host lacks a rank (epochs.waiting) */
    RING_READY,   /* confirmed: collectives run */
} ring_phase;

#define EPOCH_HISTORY 4 /* ready epochs a host remembers its counts of */
#define EPOCH_ADOPTED 32 /* epochs a host remembers it took part in */

/* A failure, as a host knows it and as laps carry it. */
typedef struct {
    int32_t code; /* RINGD_E*; 0: none */
    uint64_t seq; /* its collective, FRAME_NO_SEQ if none */
    uint8_t cls;  /* EPOCH_CAUSE or EPOCH_CONSEQUENCE */
    uint32_t origin;
    char reason[FRAME_MAX_TEXT + 1];
} epoch_failure;

/* What a failure is, to choose between two of the same collective: its
 * cause (the ranks disagree, a rank was late, a payload was corrupted),
 * then a rank that left (the reason names the rank, not a collective),
 * before what followed from either (a host timed out waiting). */
#define EPOCH_CAUSE 0
#define EPOCH_LEFT 1
#define EPOCH_CONSEQUENCE 2

typedef struct {
    int n, me;
    uint32_t epoch; /* the largest seen */
    ring_phase phase;
    uint32_t birth; /* the first epoch this host made or adopted: older ones are not its */
    /* The last epochs this host was ready in, newest last: how many
     * collectives it completed in each, how many its ranks submitted, how
     * many it knew every host of the ring had completed (from COMMITs),
     * and, in an elastic ring, the ring's hosts. One whose ring closed over
     * this host (a confirmation it missed) is not its to count (outside):
     * only how it became ready is. */
    struct {
        uint32_t epoch;
        uint64_t done, top, confirmed;
        uint64_t members;
        int outside;
    } ready[EPOCH_HISTORY];
    int n_ready;
    /* The last epochs this host adopted or started (their laps passed it),
     * in a ring of EPOCH_ADOPTED, and how many in all: an epoch it did not
     * take part in (it was closed over) is not its to count. */
    uint32_t adopted[EPOCH_ADOPTED];
    unsigned n_adopted;
    frame_prior last;                    /* the verdict that made the newest ready epoch ready */
    frame_prior waited; /* the first that settled it since, leaving the ring waiting; 0: none */
    epoch_failure failure;               /* the first failure known of the last ready epoch */
    int incomplete;                      /* a rank of this host left and none has come back */
    char missing[FRAME_MAX_WAITING + 1]; /* then: which */
    char waiting[FRAME_MAX_WAITING + 1]; /* RING_WAITING: what the ring waits for */
    /* Membership, in an elastic ring (epochs_set_elastic()): laps collect
     * the hosts they pass, and the confirmation is the ring. */
    int elastic;
    int min_hosts;                    /* a ring of fewer hosts does not run */
    uint64_t members;                 /* the ring's hosts, as last confirmed (at first: all) */
    uint32_t members_epoch;           /* the epoch they were agreed in; 0: the configured ring */
    char note[FRAME_MAX_WAITING + 1]; /* why this host closed over a host, for the next lap */
    /* A CONFIRM this host passed on and holds until it comes round again
     * (epochs_hold()); epoch 0: none. Until it settles it, the laps it
     * folds carry its verdict as if it had. */
    frame_epoch held;
} epochs;

/* What to do with an EPOCH frame that arrived from the left. */
typedef enum {
    EPOCH_DROP,        /* older than what this host knows, or a CONFIRM never proposed here */
    EPOCH_BROKE,       /* adopted a BREAK: fail everything submitted; pass the frame on */
    EPOCH_RESETTING,   /* adopted a RESET: fail everything not confirmed; fold, pass it on */
    EPOCH_REFORMING,   /* adopted a FORM: fail what runs; fold, pass it on */
    EPOCH_CAME_ROUND,  /* this host's RESET or FORM came back: send the CONFIRM */
    EPOCH_BREAK_ROUND, /* this host's BREAK came back: every link is up, and no lap
                          newer than it is going round; start a FORM */
    EPOCH_CONFIRMED,   /* a CONFIRM of this epoch: pass it on, then settle */
    EPOCH_HELD,        /* a CONFIRM too near its origin to settle yet: pass it on and
                          wait for its second pass (epochs_hold()) */
} epoch_action;

/* Epoch 1, broken: a host starts with no links. */
void epochs_init(epochs *e, int n, int me);

/* Makes the ring elastic (n <= 64): its laps carry the membership, and
 * any ring of min_hosts of its hosts runs. */
void epochs_set_elastic(epochs *e, int min_hosts);

/* A reload changed min_hosts. */
void epochs_set_min_hosts(epochs *e, int min_hosts);

/* Why this host closes over another ("h4 unreachable for 10 s"): the next
 * lap carries it, so that the resize names it. */
void epochs_note(epochs *e, const char *why);

/* The epoch this host would start now: the smallest larger than any seen
 * with epoch % n == me. */
uint32_t epochs_next(const epochs *e);

/* This host starts a new epoch of its own: a BREAK (RING_BROKEN) or a FORM
 * or RESET (RING_FORMING). Returns the epoch. For a FORM or RESET, *lap is
 * the frame to send, folded with what this host knows. */
uint32_t epochs_start(epochs *e, epoch_phase phase, frame_epoch *lap);

/* Decides what an EPOCH frame does, and adopts its epoch when it says so;
 * an adopted RESET or FORM is folded with what this host knows before it is
 * passed on. A host that came round sends epochs_confirmation(); a host
 * CONFIRMED passes it on; both then call epochs_settle(). */
epoch_action epochs_receive(epochs *e, frame_epoch *f);

/* The CONFIRM of the lap f that came back to this host. */
frame_epoch epochs_confirmation(const epochs *e, const frame_epoch *f);

/* Whether this host, having passed on the CONFIRM c, must hold it rather
 * than settle it now (and then holds it): in an elastic ring of spare > 0
 * configured hosts above min_hosts, the origin and the hosts fewer than
 * spare hops after it. Until spare + 1 hosts have a verdict, no host may
 * act on it: if every host that had it vanished before passing a lap on,
 * the others would settle the epoch otherwise (PROTOCOL.md, Outcomes). A
 * held CONFIRM settles on its second pass (epochs_receive() says
 * EPOCH_CONFIRMED), or as the prior of a later lap. */
int epochs_hold(epochs *e, const frame_epoch *c);

/* Takes a sent CONFIRM: the host is ready, or waits (INCOMPLETE). */
void epochs_settle(epochs *e, const frame_epoch *confirm);

/* Whether this host missed the CONFIRM that made the epoch c settles
 * ready (a lap that closed over this host too: then its epoch counts as
 * ready here without counts of this host's, `outside`, so that the laps
 * this host folds carry the verdict): it was ready in the epoch before that one, and never heard
 * how it ended (the CONFIRM was lost on the way, or the lap closed over this host while it was
 * frozen or cut off). It then settles c->prior first, as epochs_prior_confirm() rebuilds it, and
 * epochs_settle_missed() takes it: that epoch passed without this host. */
int epochs_missed(const epochs *e, const frame_epoch *c);
frame_epoch epochs_prior_confirm(const frame_prior *p);
void epochs_settle_missed(epochs *e, const frame_epoch *confirm);

/* The CONFIRM c, which left the ring waiting (INCOMPLETE), settled the
 * newest ready epoch here, as the ring's verdict (not that of a ring below
 * min_hosts): the first such is kept, and the laps that settle that epoch
 * again carry it (waited) to the hosts that missed it. */
void epochs_keep_waited(epochs *e, const frame_epoch *c);

/* Whether this host missed a CONFIRM that settled the epoch c settles
 * and left the ring waiting (c->waited): the link broke while it went
 * round, or the lap closed over this host. It then settles that one
 * first, as epochs_prior_confirm() rebuilds it, so that what it holds of
 * the epoch ends as it did on the hosts that had it, and
 * epochs_settle_waited() takes it. */
int epochs_missed_waited(const epochs *e, const frame_epoch *c);
void epochs_settle_waited(epochs *e, const frame_epoch *confirm);

/* A handshake told of epoch x: a larger one is adopted without a phase
 * change (the FORM that follows a new link carries a larger one still). */
void epochs_raise(epochs *e, uint32_t x);

/* Collectives this host completed in the current (ready) epoch. */
void epochs_completed(epochs *e, uint64_t done);
/* Collectives of the current (ready) epoch this host knows every host of
 * the ring completed (the least count COMMITs told it of). */
void epochs_confirmed(epochs *e, uint64_t least);

/* Collectives some rank of this host has submitted in the current epoch,
 * while it is ready (later ones are not of it). */
void epochs_submitted(epochs *e, uint64_t top);

/* What this host knows of the first failure in the epoch it was last
 * ready in; the first by (seq, cls, origin) is kept. One found while the
 * ring is not ready names no collective (its seq becomes FRAME_NO_SEQ). */
void epochs_note_failure(epochs *e, const epoch_failure *f);

/* This host's ranks: all there (complete), or one left (missing says
 * which, e.g. "rank 2 (pid 4242) on host h2 exited"). */
void epochs_set_members(epochs *e, int complete, const char *missing);

/* Whether a DATA or ABORT frame of epoch x belongs to this epoch. */
int epochs_current(const epochs *e, uint32_t x);

int epochs_ready(const epochs *e);

/* The count of epoch x's collectives this host completed: 1 and *done, or
 * 0 if it cannot tell (older than what it remembers). An epoch this host
 * took part in but was never ready in counts 0; one before its birth, or
 * one whose lap never passed it (a ring that closed over it), is not its
 * to count (-1). */
int epochs_done_of(const epochs *e, uint32_t x, uint64_t *done);

/* Whether failure a comes before b: the one the ring reports. */
int epochs_failure_first(const epoch_failure *a, const epoch_failure *b);

#endif /* RINGD_EPOCH_H */
