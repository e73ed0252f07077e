/*
 * metrics.c - GET /metrics over HTTP/1.0, Prometheus text format 0.0.4.
 *
 * Each connection reads one request of at most MAX_REQUEST bytes within
 * REQUEST_TIMEOUT_MS, gets one response and is closed: 200 with the metrics
 * for GET /metrics, 404 for another path, 405 for another method, 400 for
 * garbage or an over-long request. At most MAX_CONNS connections at once;
 * more are accepted and closed at once, so a scraper storm cannot pile up.
 */
#include "metrics.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "net.h"
#include "ringd.h"

#define MAX_REQUEST 4096
#define MAX_CONNS 16
#define REQUEST_TIMEOUT_MS 5000
#define MAX_BODY (1024 * 1024) /* 1024 local ranks' series fit */

typedef struct http_conn http_conn;

struct metrics {
    uv_loop_t *loop;
    uv_tcp_t server;
    metrics_collect_cb collect;
    void *data;
    http_conn *conns;
    int n_conns;
    int closing, open_handles;
    void (*done)(void *);
    void *done_data;
};

typedef enum { CONN_READING, CONN_WRITING, CONN_CLOSING } conn_state;

struct http_conn {
    metrics *m;
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_write_t write;
    conn_state state;
    int handles;
    char req[MAX_REQUEST];
    size_t req_len;
    char *resp;
    http_conn *next;
};

/* ---- rendering ---- */

typedef struct {
    char *p;
    size_t len, cap;
    int overflow;
} out_buf;

__attribute__((format(printf, 2, 3))) static void put(out_buf *o, const char *fmt, ...)
{
    if (o->overflow) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= o->cap - o->len)
        o->overflow = 1;
    else
        o->len += (size_t)n;
}

static void head(out_buf *o, const char *name, const char *type, const char *help)
{
    put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Names are [A-Za-z0-9._-] by the config's rules; escape anyway. */
static const char *label(const char *s, char *buf, size_t cap)
{
    size_t j = 0;
    for (; s && *s && j + 3 < cap; s++) {
        if (*s == '"' || *s == '\\') buf[j++] = '\\';
        if (*s == '\n') {
            buf[j++] = '\\';
            buf[j++] = 'n';
            continue;
        }
        buf[j++] = *s;
    }
    buf[j] = '\0';
    return buf;
}

static const char *const outcome_names[JOB_OUTCOMES] = {"ok", "timeout", "mismatch", "error"};

/* Where this host's ranks spent their time (report.h), and what the host
 * spent: counters since the daemon started. */
static void rank_metrics(out_buf *o, const report_totals *t)
{
    static const struct {
        const char *name, *help;
        size_t off;
    } kinds[] = {
        {"ringd_rank_compute_seconds_total",
         "Time each local rank computed: from a result to its next call (useful work).",
         offsetof(report_rank_total, compute_s)},
        {"ringd_rank_wait_seconds_total",
         "Time each local rank waited in calls for the last rank of the ring to submit.",
         offsetof(report_rank_total, wait_s)},
        {"ringd_rank_transfer_seconds_total",
         "Time each local rank spent in calls after the last rank submitted.",
         offsetof(report_rank_total, transfer_s)},
        {"ringd_rank_failure_seconds_total",
         "Time each local rank spent from a failed call to its next successful one.",
         offsetof(report_rank_total, failure_s)},
    };
    if (t->n == 0) return;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        head(o, kinds[k].name, "counter", kinds[k].help);
        for (int i = 0; i < t->n; i++) {
            double v;
            memcpy(&v, (const char *)&t->ranks[i] + kinds[k].off, sizeof v);
            put(o, "%s{rank=\"%d\"} %.6f\n", kinds[k].name, t->ranks[i].rank, v);
        }
    }
    head(o, "ringd_rank_calls_total", "counter", "Calls each local rank made, by outcome.");
    for (int i = 0; i < t->n; i++) {
        const report_rank_total *r = &t->ranks[i];
        put(o, "ringd_rank_calls_total{rank=\"%d\",outcome=\"ok\"} %llu\n", r->rank,
            (unsigned long long)(r->calls - r->failed));
        put(o, "ringd_rank_calls_total{rank=\"%d\",outcome=\"failed\"} %llu\n", r->rank,
            (unsigned long long)r->failed);
    }
    head(o, "ringd_cpu_seconds_total", "counter",
         "CPU time of this daemon, and of the processes of its local ranks.");
    put(o, "ringd_cpu_seconds_total{process=\"daemon\"} %.6f\n", t->daemon_cpu_s);
    put(o, "ringd_cpu_seconds_total{process=\"ranks\"} %.6f\n", t->ranks_cpu_s);
    if (t->energy == SUMMARY_ENERGY_NONE) return;
    head(o, "ringd_energy_joules_total", "counter",
         "Energy of this host: measured by RAPL (the CPU packages), or estimated from the CPU "
         "time of the daemon and its ranks at watts_per_core.");
    put(o, "ringd_energy_joules_total{source=\"%s\"} %.3f\n",
        t->energy == SUMMARY_ENERGY_RAPL ? "rapl" : "estimated", t->energy_j);
}

int metrics_render(const status_snapshot *s, char *buf, size_t cap)
{
    out_buf o = {buf, 0, cap, 0};
    char c[2 * 64 + 8], h[2 * 64 + 8], l[2 * 64 + 8], r[2 * 64 + 8];
    label(s->cluster, c, sizeof c);
    label(s->host, h, sizeof h);
    label(s->left, l, sizeof l);
    label(s->right, r, sizeof r);

    head(&o, "ringd_info", "gauge", "This daemon: cluster, host and version; always 1.");
    put(&o, "ringd_info{cluster=\"%s\",host=\"%s\",version=\"%d.%d.%d\"} 1\n", c, h,
        RINGD_VERSION_MAJOR, RINGD_VERSION_MINOR, RINGD_VERSION_PATCH);
    head(&o, "ringd_uptime_seconds", "gauge", "Seconds since the ring engine started.");
    put(&o, "ringd_uptime_seconds %.3f\n", (double)s->uptime_ms / 1000);
    head(&o, "ringd_epoch", "gauge", "Ring epoch: a new one whenever a link breaks or forms.");
    put(&o, "ringd_epoch %u\n", (unsigned)s->eng.epoch);
    head(&o, "ringd_ring_ready", "gauge",
         "1 if the ring is whole under the current epoch and collectives run.");
    put(&o, "ringd_ring_ready %d\n", s->eng.ready);
    head(&o, "ringd_next_collective", "gauge",
         "The number the next collective gets in this epoch; hosts in step agree.");
    put(&o, "ringd_next_collective %llu\n", (unsigned long long)s->eng.next_seq);
    head(&o, "ringd_hosts_live", "gauge",
         "Hosts in the ring: all configured, or an elastic ring's current members.");
    put(&o, "ringd_hosts_live %d\n", status_live_hosts(s));
    head(&o, "ringd_hosts_configured", "gauge", "Hosts in the configuration.");
    put(&o, "ringd_hosts_configured %d\n", s->n_hosts);
    head(&o, "ringd_host_in_ring", "gauge", "1 if the configured host is in the ring.");
    for (int k = 0; k < s->n_hosts && k < 64; k++)
        put(&o, "ringd_host_in_ring{host=\"%s\"} %d\n", s->hosts[k].name,
            s->view.hosts ? (int)((s->members.members >> k) & 1) : 0);
    head(&o, "ringd_resizes_total", "counter",
         "Times the ring's membership changed: a host closed over, or taken back.");
    put(&o, "ringd_resizes_total %llu\n",
        (unsigned long long)(s->view.hosts ? s->members.resizes : 0));
    head(&o, "ringd_config_reloads_total", "counter",
         "Reloads (SIGHUP) since the daemon started, refused ones too.");
    put(&o, "ringd_config_reloads_total %llu\n", (unsigned long long)s->reload.count);
    head(&o, "ringd_config_last_reload_successful", "gauge",
         "0 if the last reload was refused and the daemon runs the configuration loaded before.");
    put(&o, "ringd_config_last_reload_successful %d\n", !s->reload.refused);
    const msg_split *sp = &s->balance.split;
    if (sp->n_ranks) {
        /* A balanced job's split, as its ranks last reported it. */
        head(&o, "ringd_balance_rows", "gauge",
             "Rows of each global batch a rank of a balanced job takes (ringd.balance).");
        for (uint32_t i = 0; i < sp->n_ranks && i < MSG_MAX_SHARES; i++)
            put(&o, "ringd_balance_rows{rank=\"%u\"} %u\n", (unsigned)i,
                (unsigned)sp->shares[i].rows);
        head(&o, "ringd_balance_rows_per_second", "gauge",
             "A rank's measured speed in a balanced job, rows per second of compute.");
        for (uint32_t i = 0; i < sp->n_ranks && i < MSG_MAX_SHARES; i++)
            put(&o, "ringd_balance_rows_per_second{rank=\"%u\"} %.3f\n", (unsigned)i,
                sp->shares[i].rate);
    }
    head(&o, "ringd_clients", "gauge", "Local ranks connected.");
    put(&o, "ringd_clients %d\n", s->clients);
    head(&o, "ringd_clients_configured", "gauge", "local_clients configured for this host.");
    put(&o, "ringd_clients_configured %d\n", s->local_size);

    head(&o, "ringd_link_up", "gauge", "1 if the ring link to the neighbour is up.");
    put(&o, "ringd_link_up{link=\"left\",peer=\"%s\"} %d\n", l, s->left_up);
    put(&o, "ringd_link_up{link=\"right\",peer=\"%s\"} %d\n", r, s->right_up);
    head(&o, "ringd_link_state", "gauge",
         "1 for the state each ring link is in (down, connecting, up, refused), 0 for the others.");
    static const char *const states[] = {"down", "connecting", "up", "refused"};
    static const msg_link_state state_of[] = {MSG_LINK_DOWN, MSG_LINK_CONNECTING, MSG_LINK_UP,
                                              MSG_LINK_REFUSED};
    msg_link_state ls = status_link_state(&s->eng.left), rs = status_link_state(&s->eng.right);
    for (int i = 0; i < 4; i++)
        put(&o, "ringd_link_state{link=\"left\",peer=\"%s\",state=\"%s\"} %d\n", l, states[i],
            ls == state_of[i] || (ls == MSG_LINK_SELF && state_of[i] == MSG_LINK_UP));
    for (int i = 0; i < 4; i++)
        put(&o, "ringd_link_state{link=\"right\",peer=\"%s\",state=\"%s\"} %d\n", r, states[i],
            rs == state_of[i] || (rs == MSG_LINK_SELF && state_of[i] == MSG_LINK_UP));
    head(&o, "ringd_link_state_seconds", "gauge",
         "Seconds since each ring link last changed state.");
    put(&o, "ringd_link_state_seconds{link=\"left\",peer=\"%s\"} %.3f\n", l,
        (double)s->left_age_ms / 1000);
    put(&o, "ringd_link_state_seconds{link=\"right\",peer=\"%s\"} %.3f\n", r,
        (double)s->right_age_ms / 1000);
    head(&o, "ringd_link_bytes_total", "counter",
         "Collective payload bytes: received on the left link, sent on the right one.");
    put(&o, "ringd_link_bytes_total{link=\"left\",peer=\"%s\",direction=\"in\"} %llu\n", l,
        (unsigned long long)s->eng.net.bytes_in);
    put(&o, "ringd_link_bytes_total{link=\"right\",peer=\"%s\",direction=\"out\"} %llu\n", r,
        (unsigned long long)s->eng.net.bytes_out);
    head(&o, "ringd_link_breaks_total", "counter", "Ring links lost, either side.");
    put(&o, "ringd_link_breaks_total %llu\n", (unsigned long long)s->eng.net.breaks);
    head(&o, "ringd_auth_failures_total", "counter",
         "Peers refused for a wrong or missing cluster key.");
    put(&o, "ringd_auth_failures_total %llu\n", (unsigned long long)s->eng.net.auth_failures);
    head(&o, "ringd_checksum_errors_total", "counter", "DATA payloads received with a bad CRC32C.");
    put(&o, "ringd_checksum_errors_total %llu\n", (unsigned long long)s->eng.net.checksum_errors);
    head(&o, "ringd_tag_errors_total", "counter",
         "Frames on keyed links with a wrong tag (changed, replayed, reordered or dropped).");
    put(&o, "ringd_tag_errors_total %llu\n", (unsigned long long)s->eng.net.tag_errors);
    head(&o, "ringd_link_reconnects_total", "counter",
         "Times the right link was re-established after being up.");
    put(&o, "ringd_link_reconnects_total{link=\"right\",peer=\"%s\"} %llu\n", r,
        (unsigned long long)s->eng.net.reconnects);

    head(&o, "ringd_collectives_total", "counter", "Collectives ended, by kind and outcome.");
    for (int k = RINGD_COLL_ALLREDUCE; k <= RINGD_COLL_BARRIER && k < JOB_KINDS; k++)
        for (int oc = 0; oc < JOB_OUTCOMES; oc++)
            put(&o, "ringd_collectives_total{kind=\"%s\",outcome=\"%s\"} %llu\n",
                engine_kind_name(k), outcome_names[oc],
                (unsigned long long)s->eng.jobs.by_kind[k][oc]);
    if (s->last_error_age_ms != MSG_NO_AGE) {
        head(&o, "ringd_last_failure_seconds", "gauge",
             "Seconds since a collective last failed here (absent if none has).");
        put(&o, "ringd_last_failure_seconds %.3f\n", (double)s->last_error_age_ms / 1000);
    }

    head(&o, "ringd_collective_duration_seconds", "histogram",
         "Time of a collective on this host, from its start here to its end.");
    uint64_t cum = 0;
    for (int b = 0; b < JOB_LATENCY_BUCKETS; b++) {
        cum += s->eng.jobs.latency[b];
        put(&o, "ringd_collective_duration_seconds_bucket{le=\"%g\"} %llu\n", job_latency_bounds[b],
            (unsigned long long)cum);
    }
    cum += s->eng.jobs.latency[JOB_LATENCY_BUCKETS];
    put(&o, "ringd_collective_duration_seconds_bucket{le=\"+Inf\"} %llu\n",
        (unsigned long long)cum);
    put(&o, "ringd_collective_duration_seconds_sum %.6f\n", s->eng.jobs.latency_sum_s);
    put(&o, "ringd_collective_duration_seconds_count %llu\n", (unsigned long long)cum);

    head(&o, "ringd_straggler_wait_seconds_total", "counter",
         "Time collectives waited on this host for the left neighbour's first data.");
    put(&o, "ringd_straggler_wait_seconds_total{peer=\"%s\"} %.6f\n", l, s->eng.jobs.wait_sum_s);
    head(&o, "ringd_straggler_waits_total", "counter",
         "Collectives whose wait for the left neighbour was measured.");
    put(&o, "ringd_straggler_waits_total{peer=\"%s\"} %llu\n", l,
        (unsigned long long)s->eng.jobs.waits);
    head(&o, "ringd_straggler_last_total", "counter",
         "Allreduces each host started last, at least 1 ms after the first host (as this host "
         "worked out from every host's wait).");
    for (int i = 0; i < s->n_hosts && i < JOB_STATS_HOSTS; i++) {
        char name[256];
        put(&o, "ringd_straggler_last_total{host=\"%s\"} %llu\n",
            label(s->hosts[i].name, name, sizeof name),
            (unsigned long long)s->eng.jobs.last_count[i]);
    }
    rank_metrics(&o, &s->totals);
    return o.overflow ? -1 : (int)o.len;
}

/* ---- connections ---- */

static void maybe_done(metrics *m)
{
    if (!m->closing || m->open_handles > 0 || m->conns) return;
    void (*done)(void *) = m->done;
    void *data = m->done_data;
    free(m);
    if (done) done(data);
}

static void on_conn_handle_closed(uv_handle_t *hd)
{
    http_conn *c = hd->data;
    if (--c->handles > 0) return;
    metrics *m = c->m;
    for (http_conn **p = &m->conns; *p; p = &(*p)->next) {
        if (*p == c) {
            *p = c->next;
            break;
        }
    }
    m->n_conns--;
    free(c->resp);
    free(c);
    maybe_done(m);
}

static void http_close(http_conn *c)
{
    if (c->state == CONN_CLOSING) return;
    c->state = CONN_CLOSING;
    uv_close((uv_handle_t *)&c->tcp, on_conn_handle_closed);
    uv_close((uv_handle_t *)&c->timer, on_conn_handle_closed);
}

static void on_write_done(uv_write_t *w, int status)
{
    (void)status;
    http_close(w->data);
}

static void respond(http_conn *c, const char *status_line, const char *type, const char *body,
                    size_t body_len)
{
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->state = CONN_WRITING;
    char hdr[256];
    int n = snprintf(hdr, sizeof hdr,
                     "HTTP/1.0 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     status_line, type, body_len);
    c->resp = malloc((size_t)n + body_len);
    if (!c->resp) {
        http_close(c);
        return;
    }
    memcpy(c->resp, hdr, (size_t)n);
    memcpy(c->resp + n, body, body_len);
    uv_buf_t b = uv_buf_init(c->resp, (unsigned)((size_t)n + body_len));
    c->write.data = c;
    if (uv_write(&c->write, (uv_stream_t *)&c->tcp, &b, 1, on_write_done) < 0) http_close(c);
}

static void respond_text(http_conn *c, const char *status_line, const char *text)
{
    respond(c, status_line, "text/plain; charset=utf-8", text, strlen(text));
}

static void serve_metrics(http_conn *c)
{
    status_snapshot s;
    memset(&s, 0, sizeof s);
    c->m->collect(c->m->data, &s);
    char *body = malloc(MAX_BODY);
    int n = body ? metrics_render(&s, body, MAX_BODY) : -1;
    if (n < 0)
        respond_text(c, "500 Internal Server Error", "cannot render the metrics\n");
    else
        respond(c, "200 OK", "text/plain; version=0.0.4; charset=utf-8", body, (size_t)n);
    free(body);
}

/* A complete request head is in c->req: answer it. */
static void process_request(http_conn *c)
{
    char *eol = memchr(c->req, '\n', c->req_len);
    size_t len = (size_t)(eol - c->req);
    if (len > 0 && c->req[len - 1] == '\r') len--;
    c->req[len] = '\0';
    char *sp = strchr(c->req, ' ');
    if (!sp) {
        respond_text(c, "400 Bad Request", "bad request line\n");
        return;
    }
    *sp = '\0';
    char *path = sp + 1, *end = strchr(path, ' ');
    if (end) *end = '\0';
    char *query = strchr(path, '?');
    if (query) *query = '\0';
    if (strcmp(c->req, "GET") != 0)
        respond_text(c, "405 Method Not Allowed", "only GET /metrics\n");
    else if (strcmp(path, "/metrics") != 0)
        respond_text(c, "404 Not Found", "not found: try /metrics\n");
    else
        serve_metrics(c);
}

static void on_alloc(uv_handle_t *hd, size_t suggested, uv_buf_t *buf)
{
    http_conn *c = hd->data;
    (void)suggested;
    *buf = uv_buf_init(c->req + c->req_len, (unsigned)(sizeof c->req - 1 - c->req_len));
}

/* The request head ends with an empty line. */
static int head_complete(const http_conn *c)
{
    for (size_t i = 0; i + 1 < c->req_len; i++) {
        if (c->req[i] == '\n' && c->req[i + 1] == '\n') return 1;
        if (i + 3 < c->req_len && memcmp(c->req + i, "\r\n\r\n", 4) == 0) return 1;
    }
    return 0;
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    http_conn *c = st->data;
    (void)buf;
    if (c->state != CONN_READING) return;
    if (nread < 0) {
        http_close(c);
        return;
    }
    c->req_len += (size_t)nread;
    if (head_complete(c))
        process_request(c);
    else if (c->req_len >= sizeof c->req - 1)
        respond_text(c, "400 Bad Request", "request too large\n");
}

static void on_request_timeout(uv_timer_t *t)
{
    http_close(t->data);
}

static void on_connection(uv_stream_t *server, int status)
{
    metrics *m = server->data;
    if (status < 0 || m->closing) return;
    http_conn *c = calloc(1, sizeof *c);
    if (!c) return;
    c->m = m;
    uv_tcp_init(m->loop, &c->tcp);
    uv_timer_init(m->loop, &c->timer);
    c->tcp.data = c->timer.data = c;
    c->handles = 2;
    c->next = m->conns;
    m->conns = c;
    m->n_conns++;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0 || m->n_conns > MAX_CONNS) {
        http_close(c);
        return;
    }
    uv_timer_start(&c->timer, on_request_timeout, REQUEST_TIMEOUT_MS, 0);
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0) http_close(c);
}

/* ---- lifecycle ---- */

static void on_server_closed(uv_handle_t *hd)
{
    metrics *m = hd->data;
    m->open_handles--;
    maybe_done(m);
}

int metrics_new(metrics **out, uv_loop_t *loop, const char *address, metrics_collect_cb collect,
                void *data, char *err, size_t errlen)
{
    struct sockaddr_storage sa;
    if (net_parse_addr(address, &sa) < 0) {
        snprintf(err, errlen, "metrics: expected IP:PORT to listen on, got \"%s\"", address);
        return RINGD_EINVAL;
    }
    metrics *m = calloc(1, sizeof *m);
    if (!m) return RINGD_ENOMEM;
    m->loop = loop;
    m->collect = collect;
    m->data = data;
    uv_tcp_init(loop, &m->server);
    m->server.data = m;
    m->open_handles = 1;
    int rc = uv_tcp_bind(&m->server, (const struct sockaddr *)&sa, 0);
    if (rc == 0) rc = uv_listen((uv_stream_t *)&m->server, 64, on_connection);
    if (rc < 0) {
        snprintf(err, errlen, "metrics: cannot listen on %s: %s", address, uv_strerror(rc));
        m->closing = 1;
        uv_close((uv_handle_t *)&m->server, on_server_closed);
        return RINGD_EIO;
    }
    *out = m;
    return 0;
}

void metrics_close(metrics *m, void (*done)(void *), void *data)
{
    m->closing = 1;
    m->done = done;
    m->done_data = data;
    for (http_conn *c = m->conns; c; c = c->next)
        http_close(c);
    uv_close((uv_handle_t *)&m->server, on_server_closed);
}
