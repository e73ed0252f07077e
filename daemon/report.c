/*
 * report.c - this host's summary and those of the ring; see report.h.
 *
 * Times inside the daemon are uv_hrtime() nanoseconds; a summary carries
 * Unix microseconds, so that the rows of different hosts line up in a
 * trace as far as their clocks agree. The conversion is fixed when the
 * daemon starts (the Unix time of hrtime 0), so that one moment reads the
 * same in every summary, and durations never disagree with the times.
 */
#include "report.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "ringd.h"
#include "usage.h"

#define URGENT_MIN_MS 100 /* the summary sent at once when the last rank leaves: at most */
#define DROP_LOG_MS 60000 /* dropped summaries: a line per this */

/* The CPU time of the processes that held one local rank in the job. */
typedef struct {
    uint32_t pid;  /* the process read last */
    uint64_t done; /* of the job's processes before it, microseconds */
    uint64_t cur;  /* of it, as last read */
} rank_cpu;

/* What is known of another host: the newest of each of its parts. */
typedef struct {
    summary_part *parts; /* summary_parts(its local_clients); NULL until one arrives */
    uint8_t *have;
    uint64_t *got_ms; /* uv_now() when each arrived */
} host_known;

struct report {
    uv_loop_t *loop;
    const cfg *cfg;
    int me, n_hosts, local_size;
    report_ops ops;
    void *data;
    account acct;
    usage use;
    rank_cpu *cpu;
    uint64_t ranks_cpu_us; /* every rank process's CPU time since the daemon started */
    uint64_t job_self_us;  /* the daemon's CPU time when the job began */
    uint64_t job_rapl_uj;  /* the RAPL count when it began */
    uint64_t boot_us, version;
    uint64_t unix0_us;           /* the Unix time of uv_hrtime() 0, microseconds */
    uint64_t sent_ms, urgent_ms; /* uv_now() of the last summary sent, and the last at once */
    uint64_t events;             /* since then */
    uv_timer_t tick;
    host_known *known;
    log_ratelimit drop_rl;
    report_rank_total *totals;
};

static uint64_t unix_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* ---- CPU and energy ---- */

/* Reads the CPU time of local rank lr's process. */
static void track_cpu(report *r, int lr)
{
    const account_rank *a = &r->acct.ranks[lr];
    rank_cpu *c = &r->cpu[lr];
    uint64_t us;
    if (!a->pid || usage_pid_cpu(&r->use, a->pid, &us) < 0) return;
    if (c->pid != a->pid) { /* a new process: the last one's time is done */
        c->done += c->cur;
        c->cur = 0;
        c->pid = a->pid;
    }
    if (us > c->cur) {
        r->ranks_cpu_us += us - c->cur;
        c->cur = us;
    }
}

static void sample(report *r)
{
    for (int lr = 0; lr < r->local_size; lr++)
        if (r->acct.ranks[lr].connected) track_cpu(r, lr);
    usage_sample(&r->use, usage_self_cpu() + r->ranks_cpu_us, r->cfg->watts_per_core);
}

static uint64_t job_ranks_cpu(const report *r)
{
    uint64_t sum = 0;
    for (int lr = 0; lr < r->local_size; lr++)
        sum += r->cpu[lr].done + r->cpu[lr].cur;
    return sum;
}

static void begin_job(report *r)
{
    memset(r->cpu, 0, (size_t)r->local_size * sizeof *r->cpu);
    usage_sample(&r->use, usage_self_cpu() + r->ranks_cpu_us, r->cfg->watts_per_core);
    r->job_self_us = usage_self_cpu();
    r->job_rapl_uj = r->use.rapl_uj;
}

/* ---- this host's summary ---- */

static uint32_t clamp32(uint64_t v)
{
    return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

static void to_times(summary_times *out, const account_times *t)
{
    *out = (summary_times){.compute_us = t->compute / 1000,
                           .wait_us = t->wait / 1000,
                           .transfer_us = t->transfer / 1000,
                           .failure_us = t->failure / 1000,
                           .calls = t->calls,
                           .failed = t->failed,
                           .bytes = t->bytes};
}

/* A uv_hrtime() as Unix time. */
static uint64_t to_unix(const report *r, uint64_t ns)
{
    return r->unix0_us + ns / 1000;
}

void report_build(report *r, int part, summary_part *out)
{
    uint64_t now = uv_hrtime(), now_us = to_unix(r, now);
#define UNIX(ns) to_unix(r, ns)
    const account *a = &r->acct;
    double w = r->cfg->watts_per_core;
    memset(out, 0, sizeof *out);
    out->host = (uint32_t)r->me;
    out->part = (uint16_t)part;
    out->parts = (uint16_t)summary_parts(r->local_size);
    out->boot_us = r->boot_us;
    out->version = ++r->version;
    out->at_us = now_us;
    out->job_us = a->job_ns ? UNIX(a->job_ns) : 0;
    out->window_ms = ACCOUNT_WINDOW_S * 1000;
    uint64_t self = usage_self_cpu();
    out->daemon_cpu_us = a->job_ns && self > r->job_self_us ? self - r->job_self_us : 0;
    out->energy = (uint8_t)usage_source(&r->use, w);
    if (out->energy == SUMMARY_ENERGY_RAPL) {
        out->energy_mj = (r->use.rapl_uj - r->job_rapl_uj) / 1000;
    } else if (out->energy == SUMMARY_ENERGY_ESTIMATED) {
        double cpu_s = (double)(out->daemon_cpu_us + job_ranks_cpu(r)) / 1e6;
        out->energy_mj = (uint64_t)(cpu_s * w * 1000);
        out->watts_mw = (uint32_t)(w * 1000 + 0.5);
    }
    if (!a->job_ns) out->energy_mj = 0;
    out->local_size = (uint16_t)r->local_size;
    out->first = (uint16_t)(part * SUMMARY_MAX_RANKS);
    int left = r->local_size - out->first;
    out->n = (uint8_t)(left < SUMMARY_MAX_RANKS ? left : SUMMARY_MAX_RANKS);
    int first_rank = r->ops.first_rank(r->data);
    for (int i = 0; i < out->n; i++) {
        int lr = out->first + i;
        account_view v;
        account_read(a, lr, now, &v);
        summary_rank *k = &out->ranks[i];
        k->rank = v.ever ? first_rank + lr : -1;
        k->pid = v.pid;
        k->flags = (uint8_t)((v.connected ? SUMMARY_RANK_CONNECTED : 0) |
                             (v.failing ? SUMMARY_RANK_FAILING : 0));
        to_times(&k->life, &v.life);
        to_times(&k->window, &v.window);
        k->late_us = v.late_ns / 1000;
        k->late_calls = v.late_calls;
        k->cpu_us = r->cpu[lr].done + r->cpu[lr].cur;
        k->n_spans = (uint8_t)v.n_spans;
        for (int s = 0; s < v.n_spans; s++) {
            const account_span *sp = &v.spans[s];
            uint32_t dur = clamp32(sp->dur / 1000), wait = clamp32(sp->wait / 1000);
            k->spans[s] = (summary_span){.start_us = UNIX(sp->start),
                                         .dur_us = dur,
                                         .wait_us = wait < dur ? wait : dur,
                                         .kind = sp->kind,
                                         .flags = sp->failed ? SUMMARY_SPAN_FAILED : 0};
        }
    }
#undef UNIX
}

static void send_own(report *r)
{
    static summary_part p; /* 5 KiB: not on the stack */
    sample(r);
    for (int part = 0; part < summary_parts(r->local_size); part++) {
        report_build(r, part, &p);
        r->ops.send(r->data, &p);
    }
    r->sent_ms = uv_now(r->loop);
    r->events = 0;
}

static int any_connected(const report *r)
{
    for (int lr = 0; lr < r->local_size; lr++)
        if (r->acct.ranks[lr].connected) return 1;
    return 0;
}

/* Sends this host's summary now, unless it did less than URGENT_MIN_MS
 * ago (the next tick then does). */
static void send_soon(report *r)
{
    uint64_t now = uv_now(r->loop);
    if (now - r->urgent_ms < URGENT_MIN_MS) return;
    r->urgent_ms = now;
    send_own(r);
}

/* Whether ranks of other hosts are failing now, as their summaries of the
 * last few seconds say: a process of this host that left was missed. */
static int ring_failing(const report *r)
{
    uint64_t now = uv_now(r->loop);
    for (int h = 0; h < r->n_hosts; h++) {
        const host_known *k = &r->known[h];
        int parts = summary_parts(r->cfg->hosts[h].local_clients);
        for (int p = 0; h != r->me && k->parts && p < parts; p++) {
            if (!k->have[p] || now - k->got_ms[p] > REPORT_IDLE_MS + REPORT_INTERVAL_MS) continue;
            for (int i = 0; i < k->parts[p].n; i++) {
                uint8_t f = k->parts[p].ranks[i].flags;
                if ((f & SUMMARY_RANK_CONNECTED) && (f & SUMMARY_RANK_FAILING)) return 1;
            }
        }
    }
    return 0;
}

static void on_tick(uv_timer_t *t)
{
    report *r = t->data;
    uint64_t now = uv_now(r->loop);
    sample(r);
    /* While ranks run, the figures change every second; without them, a
     * summary now and then tells hosts that came back since. */
    if (((r->events || any_connected(r)) && now - r->sent_ms >= REPORT_INTERVAL_MS - 50) ||
        now - r->sent_ms >= REPORT_IDLE_MS)
        send_own(r);
}

/* ---- the local sessions ---- */

void report_connect(report *r, int lr, uint32_t pid)
{
    if (lr < 0 || lr >= r->local_size) return;
    if (account_connect(&r->acct, lr, uv_hrtime(), pid, ring_failing(r))) begin_job(r);
    track_cpu(r, lr);
    r->events++;
}

void report_disconnect(report *r, int lr)
{
    if (lr < 0 || lr >= r->local_size) return;
    track_cpu(r, lr); /* its last reading, while /proc still has it */
    int failing = r->acct.ranks[lr].failing;
    account_disconnect(&r->acct, lr, uv_hrtime());
    r->events++;
    /* The job ends here, or a process died in a call: the others learn it
     * now, not a second later (ringd.launch prints the figures as the job
     * ends; a host whose process was lost tells a replacement from a new
     * job by the others' failing). */
    if (!any_connected(r) || (!failing && r->acct.ranks[lr].failing)) send_soon(r);
}

void report_submit(report *r, int lr, uint8_t kind)
{
    if (lr < 0 || lr >= r->local_size) return;
    account_submit(&r->acct, lr, uv_hrtime(), kind);
    r->events++;
}

void report_result(report *r, int lr, const account_call *c)
{
    if (lr < 0 || lr >= r->local_size) return;
    int failing = r->acct.ranks[lr].failing;
    account_result(&r->acct, lr, uv_hrtime(), c);
    r->events++;
    if (failing != r->acct.ranks[lr].failing) send_soon(r); /* it fails, or is well again */
}

/* ---- the other hosts' ---- */

#define DROP(...)                                                                                  \
    do {                                                                                           \
        snprintf(why, len, __VA_ARGS__);                                                           \
        goto drop;                                                                                 \
    } while (0)

int report_receive(report *r, const summary_part *p, char *why, size_t len)
{
    char reason[256];
    if (summary_check(p, reason, sizeof reason) < 0) DROP("%s", reason);
    if (p->host >= (uint32_t)r->n_hosts)
        DROP("host #%" PRIu32 " is not in this configuration (%d hosts)", p->host, r->n_hosts);
    if (p->host == (uint32_t)r->me) return 0; /* round the ring: it stops here */
    const cfg_host *h = &r->cfg->hosts[p->host];
    if (p->local_size != h->local_clients)
        DROP("host %s: %u local ranks, %d in this configuration", h->name, p->local_size,
             h->local_clients);
    int ranks = cfg_total_ranks(r->cfg);
    for (int i = 0; i < p->n; i++)
        if (p->ranks[i].rank >= ranks)
            DROP("host %s: rank %d of a ring of %d ranks", h->name, (int)p->ranks[i].rank, ranks);
    host_known *k = &r->known[p->host];
    if (!k->parts) {
        k->parts = calloc((size_t)p->parts, sizeof *k->parts);
        k->have = calloc((size_t)p->parts, 1);
        k->got_ms = calloc((size_t)p->parts, sizeof *k->got_ms);
        if (!k->parts || !k->have || !k->got_ms) {
            free(k->parts);
            free(k->have);
            free(k->got_ms);
            memset(k, 0, sizeof *k);
            DROP("out of memory");
        }
    }
    if (k->have[p->part] && !summary_newer(p, &k->parts[p->part])) return 0;
    k->parts[p->part] = *p;
    k->have[p->part] = 1;
    k->got_ms[p->part] = uv_now(r->loop);
    r->ops.send(r->data, p);
    return 1;
drop:
    log_limited(&r->drop_rl, uv_now(r->loop), DROP_LOG_MS, LOG_WARN,
                "dropped a summary (REPORT frame) from the left neighbour: %s", why);
    return -1;
}

/* ---- answers ---- */

void report_answer(report *r, uint64_t id, void (*put)(void *data, const msg_report *m), void *data)
{
    static msg_report m; /* 5 KiB: not on the stack */
    sample(r);
    uint32_t count = 0;
    for (int h = 0; h < r->n_hosts; h++) {
        const host_known *k = &r->known[h];
        int n = 0, parts = summary_parts(r->cfg->hosts[h].local_clients);
        for (int p = 0; h != r->me && k->parts && p < parts; p++)
            n += k->have[p];
        count += h == r->me ? (uint32_t)parts : n ? (uint32_t)n : 1;
    }
    memset(&m, 0, sizeof m);
    m.id = id;
    m.count = count;
    m.n_hosts = (uint32_t)r->n_hosts;
    m.me = (uint32_t)r->me;
    m.now_us = to_unix(r, uv_hrtime());
    snprintf(m.cluster, sizeof m.cluster, "%s", r->cfg->cluster);
    for (int h = 0; h < r->n_hosts; h++) {
        const host_known *k = &r->known[h];
        int parts = summary_parts(r->cfg->hosts[h].local_clients), sent = 0;
        m.host_index = (uint32_t)h;
        snprintf(m.host, sizeof m.host, "%s", r->cfg->hosts[h].name);
        for (int p = 0; p < parts; p++) {
            if (h == r->me) {
                report_build(r, p, &m.part);
            } else if (k->parts && k->have[p]) {
                m.part = k->parts[p];
            } else {
                continue;
            }
            m.flags = MSG_REPORT_HAS_PART;
            put(data, &m);
            m.index++;
            sent++;
        }
        if (!sent) {
            m.flags = 0;
            put(data, &m);
            m.index++;
        }
    }
}

/* ---- metrics ---- */

void report_get_totals(report *r, report_totals *out)
{
    uint64_t now = uv_hrtime();
    int first = r->ops.first_rank(r->data);
    for (int lr = 0; lr < r->local_size; lr++) {
        account_view v;
        account_read(&r->acct, lr, now, &v);
        r->totals[lr] = (report_rank_total){.rank = first + lr,
                                            .compute_s = (double)v.total.compute / 1e9,
                                            .wait_s = (double)v.total.wait / 1e9,
                                            .transfer_s = (double)v.total.transfer / 1e9,
                                            .failure_s = (double)v.total.failure / 1e9,
                                            .calls = v.total.calls,
                                            .failed = v.total.failed};
    }
    double w = r->cfg->watts_per_core;
    *out = (report_totals){.n = r->local_size,
                           .ranks = r->totals,
                           .energy = usage_source(&r->use, w),
                           .energy_j = usage_joules(&r->use, w),
                           .daemon_cpu_s = (double)usage_self_cpu() / 1e6,
                           .ranks_cpu_s = (double)r->ranks_cpu_us / 1e6};
}

/* ---- life ---- */

static void forget_known(report *r)
{
    for (int h = 0; r->known && h < r->n_hosts; h++) {
        free(r->known[h].parts);
        free(r->known[h].have);
        free(r->known[h].got_ms);
    }
    free(r->known);
    r->known = NULL;
}

static void report_free(report *r)
{
    forget_known(r);
    account_free(&r->acct);
    free(r->cpu);
    free(r->totals);
    free(r);
}

int report_new(report **out, uv_loop_t *loop, const cfg *c, int me, const report_ops *ops,
               void *data)
{
    report *r = calloc(1, sizeof *r);
    if (!r) return RINGD_ENOMEM;
    r->loop = loop;
    r->cfg = c;
    r->me = me;
    r->n_hosts = (int)c->n_hosts;
    r->local_size = c->hosts[me].local_clients;
    r->ops = *ops;
    r->data = data;
    r->cpu = calloc((size_t)r->local_size, sizeof *r->cpu);
    r->totals = calloc((size_t)r->local_size, sizeof *r->totals);
    r->known = calloc((size_t)r->n_hosts, sizeof *r->known);
    if (!r->cpu || !r->totals || !r->known || account_init(&r->acct, r->local_size) < 0) {
        report_free(r);
        return RINGD_ENOMEM;
    }
    int rapl = usage_init(&r->use, NULL);
    log_debug("energy: %s", rapl ? "measured by RAPL" : "estimated from CPU time");
    r->boot_us = unix_us();
    uint64_t hr_us = uv_hrtime() / 1000;
    r->unix0_us = r->boot_us > hr_us ? r->boot_us - hr_us : 0;
    r->sent_ms = uv_now(loop);
    uv_timer_init(loop, &r->tick);
    r->tick.data = r;
    uv_timer_start(&r->tick, on_tick, REPORT_INTERVAL_MS, REPORT_INTERVAL_MS);
    *out = r;
    return 0;
}

int report_set_config(report *r, const cfg *c, int me)
{
    if ((int)c->n_hosts != r->n_hosts || me != r->me || c->hosts[me].local_clients != r->local_size)
        return RINGD_EINVAL;
    r->cfg = c;
    /* Another host's local ranks may have changed: what it sent is of the
     * old shape. */
    forget_known(r);
    r->known = calloc((size_t)r->n_hosts, sizeof *r->known);
    return r->known ? 0 : RINGD_ENOMEM;
}

static void on_closed(uv_handle_t *h)
{
    report_free(h->data);
}

void report_close(report *r)
{
    uv_close((uv_handle_t *)&r->tick, on_closed);
}
