/*
 * status.c - a daemon's state for ringctl status and metrics; see status.h.
 */
#include "status.h"

#include <stdio.h>
#include <string.h>

static int up(link_state s)
{
    return s == LINK_UP || s == LINK_SELF;
}

msg_link_state status_link_state(const engine_link *l)
{
    switch (l->state) {
    case LINK_DOWN:
        return l->refused ? MSG_LINK_REFUSED : MSG_LINK_DOWN;
    case LINK_CONNECTING:
    case LINK_HANDSHAKE:
        return MSG_LINK_CONNECTING;
    case LINK_UP:
        return MSG_LINK_UP;
    case LINK_SELF:
        return MSG_LINK_SELF;
    }
    return MSG_LINK_DOWN;
}

static uint64_t age(uint64_t now, uint64_t then)
{
    return now > then ? now - then : 0;
}

void status_collect(status_snapshot *s, const cfg *c, int me, const engine *e, int clients,
                    uint64_t now_ms, uint64_t uptime_ms, const rates *rt, const status_reload *rl,
                    const status_balance *bl)
{
    int n = (int)c->n_hosts;
    memset(s, 0, sizeof *s);
    s->cluster = c->cluster;
    s->hosts = c->hosts;
    s->n_hosts = n;
    s->me = me;
    s->host = c->hosts[me].name;
    s->left = c->hosts[(me + n - 1) % n].name;
    s->right = c->hosts[(me + 1) % n].name;
    s->local_size = c->hosts[me].local_clients;
    s->clients = clients;
    s->uptime_ms = uptime_ms;
    s->last_error_age_ms = MSG_NO_AGE;
    s->now_ms = now_ms;
    if (rt) rates_get(rt, &s->rate_in, &s->rate_out);
    if (rl) s->reload = *rl;
    if (bl) s->balance = *bl;
    if (!e) return;
    engine_get_stats(e, &s->eng);
    engine_get_view(e, &s->view);
    engine_get_membership(e, &s->members);
    s->left_age_ms = age(now_ms, s->eng.left.since_ms);
    s->right_age_ms = age(now_ms, s->eng.right.since_ms);
    if (s->eng.jobs.last_error[0]) s->last_error_age_ms = age(now_ms, s->eng.jobs.last_error_ms);
    s->left = c->hosts[s->eng.left.host].name;
    s->right = c->hosts[s->eng.right.host].name;
    s->left_up = up(s->eng.left.state);
    s->right_up = up(s->eng.right.state);
}

int status_live_hosts(const status_snapshot *s)
{
    if (!s->view.hosts) return 0;
    return s->n_hosts > 64 ? s->n_hosts : __builtin_popcountll(s->members.members);
}

/* The membership block of STATUS: an elastic ring's only. */
static void membership(const status_snapshot *s, msg_status *out)
{
    const links_membership *m = &s->members;
    if (!s->view.hosts || !m->elastic) return;
    out->members_epoch = m->members_epoch;
    out->min_hosts = (uint32_t)m->min_hosts;
    out->n_live = (uint32_t)status_live_hosts(s);
    out->live = m->members;
    out->resizes = m->resizes;
    out->left_ring = (uint8_t)m->left_ring;
    snprintf(out->resize_why, sizeof out->resize_why, "%.*s", MSG_MAX_REASON,
             m->resize_why ? m->resize_why : "");
    out->n_out = (uint8_t)(s->n_hosts < MSG_MAX_DONE ? s->n_hosts : MSG_MAX_DONE);
    size_t at = 0;
    for (int h = 0; h < s->n_hosts; h++) {
        if (h < out->n_out)
            out->out_age_ms[h] = m->out_since[h] ? age(s->now_ms, m->out_since[h]) : MSG_NO_AGE;
        if (at < sizeof out->hosts - 1)
            at += (size_t)snprintf(out->hosts + at, sizeof out->hosts - at, "%s%s", h ? " " : "",
                                   s->hosts[h].name);
    }
}

void status_message(const status_snapshot *s, uint64_t id, msg_status *out)
{
    const engine_stats *e = &s->eng;
    *out = (msg_status){.id = id,
                        .host_index = (uint32_t)s->me,
                        .n_hosts = (uint32_t)s->n_hosts,
                        .left_state = (uint8_t)status_link_state(&e->left),
                        .right_state = (uint8_t)status_link_state(&e->right),
                        .epoch = e->epoch,
                        .clients = (uint32_t)s->clients,
                        .local_size = (uint32_t)s->local_size,
                        .collectives_done = e->jobs.done,
                        .collectives_failed = e->jobs.failed,
                        .bytes_in = e->net.bytes_in,
                        .bytes_out = e->net.bytes_out,
                        .uptime_ms = s->uptime_ms,
                        .reconnects = e->net.reconnects,
                        .rate_in = s->rate_in,
                        .rate_out = s->rate_out,
                        .waits = e->jobs.waits,
                        .wait_sum_us = (uint64_t)(e->jobs.wait_sum_s * 1e6),
                        .left_age_ms = s->left_age_ms,
                        .right_age_ms = s->right_age_ms,
                        .last_error_age_ms = s->last_error_age_ms,
                        .next_seq = e->next_seq};
    snprintf(out->left_reason, sizeof out->left_reason, "%.*s", MSG_MAX_REASON, e->left.error);
    snprintf(out->right_reason, sizeof out->right_reason, "%.*s", MSG_MAX_REASON, e->right.error);
    snprintf(out->waiting, sizeof out->waiting, "%s", e->waiting);
    membership(s, out);
    if (s->reload.count) {
        out->reloads = s->reload.count;
        out->reload_age_ms = age(s->now_ms, s->reload.at_ms);
        out->reload_refused = (uint8_t)s->reload.refused;
        snprintf(out->reload_said, sizeof out->reload_said, "%s", s->reload.said);
    }
    if (s->balance.split.n_ranks) {
        out->split = s->balance.split;
        out->balance_age_ms = age(s->now_ms, s->balance.at_ms);
    }
    out->n_done = (uint8_t)(e->n_done < MSG_MAX_DONE ? e->n_done : MSG_MAX_DONE);
    memcpy(out->done, e->done, out->n_done * sizeof *out->done);
    snprintf(out->cluster, sizeof out->cluster, "%s", s->cluster);
    snprintf(out->host, sizeof out->host, "%s", s->host);
    snprintf(out->left, sizeof out->left, "%s", s->left);
    snprintf(out->right, sizeof out->right, "%s", s->right);
    snprintf(out->last_error, sizeof out->last_error, "%s", e->jobs.last_error);
    /* The recent collectives, oldest first. */
    uint64_t n_recent = e->jobs.n_recent < JOB_RECENT ? e->jobs.n_recent : JOB_RECENT;
    for (uint64_t i = e->jobs.n_recent - n_recent;
         i < e->jobs.n_recent && out->n_recent < MSG_MAX_RECENT; i++) {
        const job_recent *r = &e->jobs.recent[i % JOB_RECENT];
        msg_recent *m = &out->recent[out->n_recent++];
        *m = (msg_recent){.seq = r->seq,
                          .kind = r->kind,
                          .has_wait = r->has_wait,
                          .status = r->status,
                          .wait_us = r->wait_us,
                          .latency_us = r->latency_us,
                          .spread_us = r->spread_us};
        if (r->last_host >= 0 && r->last_host < s->n_hosts)
            snprintf(m->last, sizeof m->last, "%s", s->hosts[r->last_host].name);
    }
}
