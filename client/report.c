/*
 * report.c - the ring's report, fetched and added up; see report.h.
 */
#include "report.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringd.h"
#include "session.h"

#define MAX_HOSTS 1024 /* CFG_MAX_HOSTS */

const char *report_kind_name(int kind)
{
    const char *n = ringd_coll_name((ringd_coll)kind);
    return n ? n : "call";
}

static double sec(uint64_t us)
{
    return (double)us / 1e6;
}

static int fail(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return RINGD_EPROTO;
}

/* ---- adding up ---- */

int report_add(report_view *v, const msg_report *m, char *err, size_t len)
{
    if (!v->hosts) {
        if (m->n_hosts > MAX_HOSTS)
            return fail(err, len, "report: %" PRIu32 " hosts, more than a ring has", m->n_hosts);
        v->hosts = calloc(m->n_hosts, sizeof *v->hosts);
        if (!v->hosts) return fail(err, len, "report: out of memory");
        v->n_hosts = (int)m->n_hosts;
        v->me = (int)m->me;
        v->now_us = m->now_us;
        snprintf(v->cluster, sizeof v->cluster, "%s", m->cluster);
        for (int h = 0; h < v->n_hosts; h++) {
            snprintf(v->hosts[h].name, sizeof v->hosts[h].name, "#%d", h + 1);
            v->hosts[h].index = h;
        }
    }
    if (m->n_hosts != (uint32_t)v->n_hosts)
        return fail(err, len, "report: one message says %" PRIu32 " hosts, another %d", m->n_hosts,
                    v->n_hosts);
    report_host *h = &v->hosts[m->host_index];
    snprintf(h->name, sizeof h->name, "%s", m->host);
    if (!(m->flags & MSG_REPORT_HAS_PART)) return 0;
    const summary_part *p = &m->part;
    char why[256];
    if (summary_check(p, why, sizeof why) < 0)
        return fail(err, len, "report: the summary of host %s is malformed: %s", m->host, why);
    h->reported = 1;
    h->at_us = p->at_us;
    h->job_us = p->job_us;
    h->age_s = m->now_us > p->at_us ? sec(m->now_us - p->at_us) : 0;
    h->daemon_cpu_s = sec(p->daemon_cpu_us);
    h->energy_j = (double)p->energy_mj / 1000;
    h->energy = (summary_energy)p->energy;
    h->watts_per_core = (double)p->watts_mw / 1000;
    h->local_size = p->local_size;
    if (p->window_ms) v->window_s = (double)p->window_ms / 1000;
    report_rank *grown = realloc(v->ranks, (size_t)(v->n_ranks + p->n) * sizeof *v->ranks);
    if (!grown) return fail(err, len, "report: out of memory");
    v->ranks = grown;
    for (int i = 0; i < p->n; i++) {
        const summary_rank *k = &p->ranks[i];
        h->connected += (k->flags & SUMMARY_RANK_CONNECTED) != 0;
        h->ranks_cpu_s += sec(k->cpu_us);
        if (k->rank < 0) continue; /* no process held it in this job */
        report_rank *r = &v->ranks[v->n_ranks++];
        *r = (report_rank){.rank = k->rank,
                           .local_rank = p->first + i,
                           .host = (int)m->host_index,
                           .pid = k->pid,
                           .connected = (k->flags & SUMMARY_RANK_CONNECTED) != 0,
                           .failing = (k->flags & SUMMARY_RANK_FAILING) != 0,
                           .life = k->life,
                           .window = k->window,
                           .late_us = k->late_us,
                           .late_calls = k->late_calls,
                           .cpu_us = k->cpu_us,
                           .n_spans = k->n_spans};
        memcpy(r->spans, k->spans, sizeof r->spans);
    }
    return 0;
}

static int by_rank(const void *a, const void *b)
{
    const report_rank *x = a, *y = b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    return x->host < y->host ? -1 : x->host > y->host;
}

static double total(const summary_times *t)
{
    return sec(t->compute_us) + sec(t->wait_us) + sec(t->transfer_us) + sec(t->failure_us);
}

/* The ring's figures from each rank's times (life or window). */
static void add_up(const report_view *v, report_totals_view *out, int window)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < v->n_ranks; i++) {
        const summary_times *t = window ? &v->ranks[i].window : &v->ranks[i].life;
        double wall = total(t);
        if (wall > out->wall_s) out->wall_s = wall;
        out->useful_s += sec(t->compute_us);
        out->wait_s += sec(t->wait_us);
        out->transfer_s += sec(t->transfer_us);
        out->failure_s += sec(t->failure_us);
    }
    /* Useful work over wall time: what N ranks bought over one doing it
     * all, and that over N. */
    if (out->wall_s > 0) {
        out->speedup = out->useful_s / out->wall_s;
        out->efficiency = v->n_ranks ? out->speedup / v->n_ranks : 0;
    }
}

void report_finish(report_view *v)
{
    if (v->n_ranks > 1) qsort(v->ranks, (size_t)v->n_ranks, sizeof *v->ranks, by_rank);
    add_up(v, &v->life, 0);
    add_up(v, &v->window, 1);
    v->waited_most = -1;
    uint64_t most = REPORT_LATE_US;
    for (int i = 0; i < v->n_ranks; i++) {
        if (v->ranks[i].late_us >= most) {
            most = v->ranks[i].late_us;
            v->waited_most = i;
        }
    }
    int rapl = 0, estimated = 0;
    for (int h = 0; h < v->n_hosts; h++) {
        const report_host *x = &v->hosts[h];
        v->energy_j += x->energy_j;
        v->daemon_cpu_s += x->daemon_cpu_s;
        v->ranks_cpu_s += x->ranks_cpu_s;
        rapl += x->reported && x->energy == SUMMARY_ENERGY_RAPL;
        estimated += x->reported && x->energy == SUMMARY_ENERGY_ESTIMATED;
    }
    v->energy_source = rapl && estimated ? "mixed"
                       : rapl            ? "rapl"
                       : estimated       ? "estimated"
                                         : "none";
}

void report_free(report_view *v)
{
    free(v->hosts);
    free(v->ranks);
    memset(v, 0, sizeof *v);
}

/* ---- fetching ---- */

int report_fetch(const char *path, report_view *out, char *err, size_t errlen)
{
    static const char what[] = "report";
    session s = {.fd = -1};
    memset(out, 0, sizeof *out);
    int rc = session_connect(&s, path, SESSION_CONNECT_TIMEOUT_MS);
    msg_welcome w;
    if (rc == 0) rc = session_hello(&s, MSG_HELLO_OBSERVER, -1, &w);
    /* 13 KiB: not on the stack (a Python thread's may be small). */
    uint8_t *buf = malloc(SESSION_MSG_MAX);
    msg_report *m = malloc(sizeof *m);
    if (rc == 0 && (!buf || !m)) rc = session_fail(&s, RINGD_ENOMEM, "%s: out of memory", what);
    int64_t deadline = session_deadline(REPORT_TIMEOUT_MS);
    msg_report_req req = {.id = 1};
    if (rc == 0) {
        int n = msg_encode_report_req(buf, SESSION_MSG_MAX, &req);
        rc = n < 0 ? session_fail(&s, RINGD_EPROTO, "%s: cannot encode REPORT_REQ", what)
                   : session_send(&s, buf, (size_t)n, -1, deadline, what);
    }
    /* The REPORTs come in order, index 0 .. count - 1. */
    for (uint32_t want = 0, count = 1; rc == 0 && want < count; want++) {
        msg_header h;
        rc = session_recv(&s, &h, buf, deadline, what);
        if (rc < 0) break;
        if (h.type == MSG_RESULT) { /* a refusal */
            msg_result r;
            rc = session_decode_result(&s, &h, buf, &r, what);
            if (rc == 0)
                rc = session_fail(&s, r.status < 0 ? r.status : RINGD_EPROTO, "%s: %s", what,
                                  r.text[0] ? r.text : ringd_strerror(r.status));
            break;
        }
        if (h.type != MSG_REPORT || msg_decode_report(&h, buf, m) < 0 || m->id != req.id ||
            m->index != want || (want > 0 && m->count != count)) {
            rc = session_fail(&s, RINGD_EPROTO,
                              "%s: ringd at %s sent a malformed or unexpected "
                              "%s",
                              what, s.path, msg_type_name(h.type));
            break;
        }
        count = m->count;
        char why[512];
        if (report_add(out, m, why, sizeof why) < 0) rc = session_fail(&s, RINGD_EPROTO, "%s", why);
    }
    free(buf);
    free(m);
    if (rc < 0) {
        snprintf(err, errlen, "%s", s.err);
        report_free(out);
    } else {
        report_finish(out);
    }
    session_close(&s);
    return rc;
}

/* ---- JSON ---- */

typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(sbuf *b, const char *fmt, ...)
{
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if (b->p && (size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->len + (size_t)n + 1)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
}

/* A JSON string: names come from the daemon's configuration, but quote
 * whatever they hold. */
static void put_str(sbuf *b, const char *s)
{
    put(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            put(b, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            put(b, "\\u%04x", c);
        else
            put(b, "%c", c);
    }
    put(b, "\"");
}

/* A number JSON can hold (no NaN or infinity). */
static void put_num(sbuf *b, double x)
{
    put(b, "%.6f", isfinite(x) ? x : 0.0);
}

static void put_times(sbuf *b, const summary_times *t)
{
    put(b, "\"compute_s\": ");
    put_num(b, sec(t->compute_us));
    put(b, ", \"wait_s\": ");
    put_num(b, sec(t->wait_us));
    put(b, ", \"transfer_s\": ");
    put_num(b, sec(t->transfer_us));
    put(b, ", \"failure_s\": ");
    put_num(b, sec(t->failure_us));
    put(b, ", \"wall_s\": ");
    put_num(b, total(t));
    put(b, ", \"calls\": %" PRIu64 ", \"failed_calls\": %" PRIu64 ", \"bytes\": %" PRIu64, t->calls,
        t->failed, t->bytes);
}

static void put_totals(sbuf *b, const report_totals_view *t)
{
    put(b, "\"wall_s\": ");
    put_num(b, t->wall_s);
    put(b, ", \"useful_s\": ");
    put_num(b, t->useful_s);
    put(b, ", \"wait_s\": ");
    put_num(b, t->wait_s);
    put(b, ", \"transfer_s\": ");
    put_num(b, t->transfer_s);
    put(b, ", \"failure_s\": ");
    put_num(b, t->failure_s);
    put(b, ", \"speedup\": ");
    put_num(b, t->speedup);
    put(b, ", \"efficiency\": ");
    put_num(b, t->efficiency);
}

static const char *energy_name(summary_energy e)
{
    return e == SUMMARY_ENERGY_RAPL ? "rapl" : e == SUMMARY_ENERGY_ESTIMATED ? "estimated" : "none";
}

static void put_rank(sbuf *b, const report_view *v, const report_rank *r)
{
    put(b, "{\"rank\": %d, \"host\": ", r->rank);
    put_str(b, v->hosts[r->host].name);
    put(b, ", \"local_rank\": %d, \"pid\": %" PRIu32 ", \"connected\": %s, \"failing\": %s, ",
        r->local_rank, r->pid, r->connected ? "true" : "false", r->failing ? "true" : "false");
    put_times(b, &r->life);
    put(b, ", \"late_s\": ");
    put_num(b, sec(r->late_us));
    put(b, ", \"late_calls\": %" PRIu64 ", \"cpu_s\": ", r->late_calls);
    put_num(b, sec(r->cpu_us));
    put(b, ", \"window\": {");
    put_times(b, &r->window);
    put(b, "}, \"recent\": [");
    for (int s = 0; s < r->n_spans; s++) {
        const summary_span *sp = &r->spans[s];
        put(b, "%s{\"kind\": ", s ? ", " : "");
        put_str(b, report_kind_name(sp->kind));
        put(b, ", \"start\": ");
        put_num(b, sec(sp->start_us));
        put(b, ", \"dur_s\": ");
        put_num(b, sec(sp->dur_us));
        put(b, ", \"wait_s\": ");
        put_num(b, sec(sp->wait_us));
        put(b, ", \"ok\": %s}", sp->flags & SUMMARY_SPAN_FAILED ? "false" : "true");
    }
    put(b, "]}");
}

static void put_host(sbuf *b, const report_host *h)
{
    put(b, "{\"host\": ");
    put_str(b, h->name);
    put(b, ", \"index\": %d, \"reported\": %s", h->index, h->reported ? "true" : "false");
    if (h->reported) {
        put(b, ", \"age_s\": ");
        put_num(b, h->age_s);
        put(b, ", \"job_s\": ");
        put_num(b, h->job_us && h->at_us > h->job_us ? sec(h->at_us - h->job_us) : 0);
        put(b, ", \"daemon_cpu_s\": ");
        put_num(b, h->daemon_cpu_s);
        put(b, ", \"ranks_cpu_s\": ");
        put_num(b, h->ranks_cpu_s);
        put(b, ", \"energy_j\": ");
        put_num(b, h->energy_j);
        put(b, ", \"energy_source\": \"%s\"", energy_name(h->energy));
        if (h->energy == SUMMARY_ENERGY_ESTIMATED) {
            put(b, ", \"watts_per_core\": ");
            put_num(b, h->watts_per_core);
        }
        put(b, ", \"local_clients\": %d, \"ranks_connected\": %d", h->local_size, h->connected);
    }
    put(b, "}");
}

char *report_json(const report_view *v)
{
    sbuf b = {0};
    put(&b, "{\"cluster\": ");
    put_str(&b, v->cluster);
    put(&b, ", \"host\": ");
    put_str(&b, v->n_hosts ? v->hosts[v->me].name : "");
    put(&b, ", \"at\": ");
    put_num(&b, sec(v->now_us));
    put(&b, ", \"hosts_configured\": %d, \"ranks_reporting\": %d, ", v->n_hosts, v->n_ranks);
    put_totals(&b, &v->life);
    put(&b, ", \"window_s\": ");
    put_num(&b, v->window_s);
    put(&b, ", \"window\": {");
    put_totals(&b, &v->window);
    put(&b, "}, \"waited_most\": ");
    if (v->waited_most >= 0) {
        const report_rank *r = &v->ranks[v->waited_most];
        put(&b, "{\"rank\": %d, \"host\": ", r->rank);
        put_str(&b, v->hosts[r->host].name);
        put(&b, ", \"late_s\": ");
        put_num(&b, sec(r->late_us));
        put(&b, ", \"late_calls\": %" PRIu64 "}", r->late_calls);
    } else {
        put(&b, "null");
    }
    put(&b, ", \"energy_j\": ");
    put_num(&b, v->energy_j);
    put(&b, ", \"energy_source\": \"%s\", \"daemon_cpu_s\": ", v->energy_source);
    put_num(&b, v->daemon_cpu_s);
    put(&b, ", \"ranks_cpu_s\": ");
    put_num(&b, v->ranks_cpu_s);
    put(&b, ", \"hosts\": [");
    for (int h = 0; h < v->n_hosts; h++) {
        if (h) put(&b, ", ");
        put_host(&b, &v->hosts[h]);
    }
    put(&b, "], \"ranks\": [");
    for (int i = 0; i < v->n_ranks; i++) {
        if (i) put(&b, ", ");
        put_rank(&b, v, &v->ranks[i]);
    }
    put(&b, "]}\n");
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
