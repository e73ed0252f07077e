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

void status_collect(status_snapshot *s, const cfg *c, int me, const engine *e, int clients,
                    uint64_t uptime_ms, const rates *rt)
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
    if (rt) rates_get(rt, &s->rate_in, &s->rate_out);
    if (!e) return;
    engine_get_stats(e, &s->eng);
    s->left = c->hosts[s->eng.left.host].name;
    s->right = c->hosts[s->eng.right.host].name;
    s->left_up = up(s->eng.left.state);
    s->right_up = up(s->eng.right.state);
}

void status_message(const status_snapshot *s, uint64_t id, msg_status *out)
{
    const engine_stats *e = &s->eng;
    /* Links report link_state; the wire has its own, simpler set. */
    static const uint8_t wire[] = {MSG_LINK_DOWN, MSG_LINK_CONNECTING, MSG_LINK_CONNECTING,
                                   MSG_LINK_UP, MSG_LINK_SELF};
    *out = (msg_status){.id = id,
                        .host_index = (uint32_t)s->me,
                        .n_hosts = (uint32_t)s->n_hosts,
                        .left_state = wire[e->left.state <= LINK_SELF ? e->left.state : 0],
                        .right_state = wire[e->right.state <= LINK_SELF ? e->right.state : 0],
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
                        .wait_sum_us = (uint64_t)(e->jobs.wait_sum_s * 1e6)};
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
