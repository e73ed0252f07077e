/*
 * status.h - one snapshot of a daemon's state, from which both `ringctl
 * status` (the STATUS message) and the metrics endpoint are made, so that
 * they always agree.
 */
#ifndef RINGD_STATUS_H
#define RINGD_STATUS_H

#include <stdint.h>

#include "config/config.h"
#include "engine.h"
#include "proto/msg.h"
#include "rates.h"
#include "report.h"

/* The last reload (SIGHUP), as main.c records it. */
typedef struct {
    uint64_t count;                /* reloads since the daemon started, refused ones too */
    uint64_t at_ms;                /* uv_now() of the last */
    int refused;                   /* the last kept the running configuration */
    char said[MSG_MAX_REASON + 1]; /* what it changed, or why it was refused */
} status_reload;

/* The split of a balanced job (ringd.balance) that a local rank last
 * reported (BALANCE), as local_requests.c keeps it. */
typedef struct {
    msg_split split; /* n_ranks 0: none reported */
    uint64_t at_ms;  /* uv_now() when it came */
} status_balance;

typedef struct {
    const char *cluster, *host, *left, *right; /* names */
    const cfg_host *hosts;                     /* every host, ring order */
    int n_hosts, me;
    engine_stats eng; /* zero between two engines of a reload */
    int left_up, right_up;
    int clients, local_size;
    uint64_t uptime_ms;
    /* Since each link last changed state, and since the last error
     * (MSG_NO_AGE: none). */
    uint64_t left_age_ms, right_age_ms, last_error_age_ms;
    uint64_t rate_in, rate_out; /* payload bytes/s over the last few seconds */
    engine_view view;           /* who is in the ring (view.hosts NULL between engines) */
    links_membership members;   /* the same as the links know it, with who is out since when */
    uint64_t now_ms;
    status_reload reload;
    status_balance balance;
    report_totals totals; /* the ranks' time and the host's energy (n 0: none) */
} status_snapshot;

/* Hosts in the ring: all configured, or an elastic ring's members. */
int status_live_hosts(const status_snapshot *s);

/* Takes the snapshot of host me of c at now_ms (uv_now()): e (NULL between
 * two engines) runs its collectives, clients ranks are connected, the
 * engine has run uptime_ms, rt (may be NULL) has the rates, rl (may be
 * NULL) the last reload, bl (may be NULL) the last split reported. */
void status_collect(status_snapshot *s, const cfg *c, int me, const engine *e, int clients,
                    uint64_t now_ms, uint64_t uptime_ms, const rates *rt, const status_reload *rl,
                    const status_balance *bl);

/* The state of a link as the STATUS message and the metrics name it. */
msg_link_state status_link_state(const engine_link *l);

/* The STATUS message answering request id. */
void status_message(const status_snapshot *s, uint64_t id, msg_status *out);

#endif /* RINGD_STATUS_H */
