/*
 * main.c - ringd: the ring allreduce daemon of one host.
 *
 *   ringd --config /etc/ringd/ringd.yaml --host a
 *
 * One libuv loop runs everything: the ring links (ring.c, links.c) and the
 * local clients (local.c), and optionally the metrics endpoint (metrics.c).
 * SIGTERM or SIGINT fail what is in flight with an error to its clients and
 * exit cleanly; SIGHUP re-reads the configuration (see reload()). Under
 * systemd it speaks the notify protocol (notify.c).
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "auth.h"
#include "config/config.h"
#include "local.h"
#include "log.h"
#include "metrics.h"
#include "notify.h"
#include "rates.h"
#include "engine.h"
#include "perm.h"
#include "reload.h"
#include "report.h"
#include "status.h"
#include "ringd.h"

#define EXIT_USAGE 2
#define STOP_LEAVE_MS 300 /* stopping: for the LEAVE to reach the right neighbour */

typedef struct {
    uv_loop_t *loop;
    const char *config_path, *host_name;
    cfg config;
    int me;
    engine *engine;
    local *local;
    metrics *metrics;
    report *report; /* the ranks' accounting and the ring's summaries */
    rates rates;
    status_reload reload; /* the last reload, for status */
    status_balance balance; /* the split a balanced job last reported, for status */
    uv_signal_t sigterm, sigint, sighup;
    uv_timer_t second; /* rates and systemd STATUS= */
    uv_timer_t leaving; /* stopping: the ring hears this host leaves, then it closes */
    int stopping, status;
    int level_from_cli;
    uint64_t started_ms; /* of the running engine */
    /* A reload that changed the ring: the engine closes, then this config
     * replaces the running one and a new engine starts. */
    int reforming;
    cfg next;
    int next_me;
    /* The cluster key (secret_file), of the running config and the next. */
    int has_key, next_has_key;
    auth_key key, next_key;
} daemon_state;

static void usage(FILE *out)
{
    fprintf(out, "usage: ringd --config FILE --host NAME [--log-level LEVEL]\n"
                 "       ringd --config FILE --check\n"
                 "\n"
                 "Runs the ringd daemon of one host: joins the TCP ring described in FILE as the\n"
                 "host named NAME and serves the local training processes on its Unix socket.\n"
                 "\n"
                 "  -c, --config FILE      YAML configuration (see ringd.example.yaml)\n"
                 "  -H, --host NAME        which of the config's hosts this is\n"
                 "  -l, --log-level LEVEL  debug, info, warn or error (overrides log_level,\n"
                 "                         also across reloads)\n"
                 "  -t, --check            validate the configuration and exit (--host optional)\n"
                 "  -h, --help             show this help\n"
                 "  -V, --version          show the version\n"
                 "\n"
                 "Signals: SIGTERM, SIGINT stop cleanly; SIGHUP re-reads FILE: tuning keys\n"
                 "apply at once, a changed host list re-forms the ring (collectives in flight\n"
                 "fail, clients must reconnect); an invalid file is logged and ignored.\n"
                 "Under systemd (Type=notify) it reports READY=1 once it listens, its state in\n"
                 "STATUS=, and feeds the watchdog when WatchdogSec= is set.\n"
                 "The optional metrics key serves Prometheus text at http://IP:PORT/metrics.\n"
                 "\n"
                 "Exit status: 0 after a clean stop (SIGTERM, SIGINT), 1 on a runtime failure,\n"
                 "2 on a bad command line or configuration.\n");
}

static void on_handle_closed(uv_handle_t *h)
{
    (void)h;
}

static void on_local_closed(void *data)
{
    daemon_state *d = data;
    d->local = NULL;
    if (d->report) report_close(d->report);
    d->report = NULL;
    uv_close((uv_handle_t *)&d->sigterm, on_handle_closed);
    uv_close((uv_handle_t *)&d->sigint, on_handle_closed);
    uv_close((uv_handle_t *)&d->sighup, on_handle_closed);
    uv_close((uv_handle_t *)&d->second, on_handle_closed);
    uv_close((uv_handle_t *)&d->leaving, on_handle_closed);
    notify_close();
}

static void on_engine_closed(void *data)
{
    daemon_state *d = data;
    d->engine = NULL;
    local_close(d->local, RINGD_ESHUTDOWN, "ringd is shutting down", on_local_closed, d);
}

static void on_left(uv_timer_t *t)
{
    daemon_state *d = t->data;
    engine_close(d->engine, RINGD_ESHUTDOWN, "ringd is shutting down", on_engine_closed, d);
}

/* The ring goes first: failing its jobs answers their clients while the
 * sessions are still open; then the sessions and the socket go. */
static void stop(daemon_state *d, const char *why)
{
    if (d->stopping) return;
    d->stopping = 1;
    log_info("stopping: %s", why);
    notify_stopping();
    if (d->metrics) metrics_close(d->metrics, NULL, NULL);
    d->metrics = NULL;
    /* A re-forming engine is already closing; on_reformed sees stopping. */
    if (d->reforming) return;
    /* An elastic ring closes over this host at once, not after evict_after:
     * the LEAVE goes out before the links close. */
    char text[128];
    snprintf(text, sizeof text, "ringd on %s is stopping (%s)", d->config.hosts[d->me].name, why);
    if (engine_leave(d->engine, 1, text) == 0) {
        uv_timer_start(&d->leaving, on_left, STOP_LEAVE_MS, 0);
        return;
    }
    engine_close(d->engine, RINGD_ESHUTDOWN, "ringd is shutting down", on_engine_closed, d);
}

static void on_signal(uv_signal_t *h, int signum)
{
    stop(h->data, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

/* ---- the ranks' report ---- */

static void send_report(void *data, const summary_part *p)
{
    daemon_state *d = data;
    if (d->engine && !d->reforming) (void)engine_send_report(d->engine, p);
}

static int first_rank(void *data)
{
    daemon_state *d = data;
    return d->engine ? engine_first_rank(d->engine) : cfg_first_rank(&d->config, (size_t)d->me);
}

static void on_report(void *data, const summary_part *p)
{
    daemon_state *d = data;
    char why[256];
    if (d->report) (void)report_receive(d->report, p, why, sizeof why);
}

/* The report of the running config: kept across a reload of the same
 * shape, made anew otherwise. */
static int start_report(daemon_state *d, char *err, size_t errlen)
{
    static const report_ops ops = {send_report, first_rank};
    if (d->report && report_set_config(d->report, &d->config, d->me) == 0) return 0;
    if (d->report) report_close(d->report);
    d->report = NULL;
    int rc = report_new(&d->report, d->loop, &d->config, d->me, &ops, d);
    if (rc < 0) snprintf(err, errlen, "cannot start: %s", ringd_strerror(rc));
    return rc;
}

/* ---- the engine: ring and local sessions of the running config ---- */

static int start_engine(daemon_state *d, char *err, size_t errlen)
{
    if (start_report(d, err, errlen) < 0) return RINGD_ENOMEM;
    int rc = engine_new(&d->engine, d->loop, &d->config, d->me, d->has_key ? &d->key : NULL);
    if (rc < 0) {
        snprintf(err, errlen, "cannot start: %s", ringd_strerror(rc));
        d->engine = NULL;
        return rc;
    }
    rc = local_new(&d->local, d->loop, &d->config, d->me, d->engine);
    if (rc < 0) {
        snprintf(err, errlen, "cannot start: %s", ringd_strerror(rc));
        engine_close(d->engine, RINGD_ESHUTDOWN, "start-up failed", NULL, NULL);
        d->engine = NULL;
        return rc;
    }
    local_set_rates(d->local, &d->rates);
    local_set_reload(d->local, &d->reload);
    local_set_balance(d->local, &d->balance);
    local_set_report(d->local, d->report);
    engine_watch_reports(d->engine, on_report, d);
    d->started_ms = uv_now(d->loop);
    if (local_start(d->local, err, errlen) < 0 || engine_start(d->engine, err, errlen) < 0)
        return RINGD_EIO;
    const cfg_host *h = &d->config.hosts[d->me];
    log_info("ringd %d.%d.%d: host %s (%d of %zu) in cluster %s, %d local client(s), %d "
             "rank(s) in all",
             RINGD_VERSION_MAJOR, RINGD_VERSION_MINOR, RINGD_VERSION_PATCH, h->name, d->me + 1,
             d->config.n_hosts, d->config.cluster, h->local_clients, cfg_total_ranks(&d->config));
    return 0;
}

static void collect(void *data, status_snapshot *s)
{
    daemon_state *d = data;
    int between = !d->engine || !d->local; /* between two engines of a reload */
    uint64_t now = uv_now(d->loop);
    status_collect(s, &d->config, d->me, between ? NULL : d->engine,
                   between ? 0 : local_clients(d->local), now, now - d->started_ms, &d->rates,
                   &d->reload, &d->balance);
    if (d->report) report_get_totals(d->report, &s->totals);
}

static void start_metrics(daemon_state *d)
{
    const char *addr = d->config.hosts[d->me].metrics; /* the host's own, else the top-level */
    if (!addr) return;
    char err[256];
    if (metrics_new(&d->metrics, d->loop, addr, collect, d, err, sizeof err) < 0) {
        log_error("%s; running without metrics", err);
        d->metrics = NULL;
        return;
    }
    log_info("metrics: http://%s/metrics", addr);
}

/* Once a second: a sample for the rates, and the state for systemd. */
static void on_second(uv_timer_t *t)
{
    daemon_state *d = t->data;
    if (!d->engine || !d->local || d->stopping) return;
    status_snapshot s;
    collect(d, &s);
    rates_add(&d->rates, uv_now(d->loop), s.eng.net.bytes_in, s.eng.net.bytes_out);
    char text[512];
    int live = status_live_hosts(&s);
    if (s.eng.ready && live < s.n_hosts)
        snprintf(text, sizeof text,
                 "ring up with %d of %d hosts, epoch %u, %llu collectives done, %llu failed, "
                 "%d/%d clients",
                 live, s.n_hosts, (unsigned)s.eng.epoch, (unsigned long long)s.eng.jobs.done,
                 (unsigned long long)s.eng.jobs.failed, s.clients, s.local_size);
    else if (s.eng.ready)
        snprintf(text, sizeof text,
                 "ring up, epoch %u, %llu collectives done, %llu failed, %d/%d clients",
                 (unsigned)s.eng.epoch, (unsigned long long)s.eng.jobs.done,
                 (unsigned long long)s.eng.jobs.failed, s.clients, s.local_size);
    else if (s.eng.short_of_hosts)
        snprintf(text, sizeof text, "ring not ready (epoch %u): %s", (unsigned)s.eng.epoch,
                 s.eng.waiting);
    else if (s.left_up && s.right_up && s.eng.waiting[0])
        snprintf(text, sizeof text, "ring up, waiting for ranks (epoch %u): %s",
                 (unsigned)s.eng.epoch, s.eng.waiting);
    else if (s.left_up && s.right_up)
        snprintf(text, sizeof text,
                 "ring forming: both links up, waiting for the rest of the ring (epoch %u)",
                 (unsigned)s.eng.epoch);
    else
        snprintf(text, sizeof text, "ring forming: left link from %s %s, right link to %s %s",
                 s.left, s.left_up ? "up" : "down", s.right, s.right_up ? "up" : "down");
    notify_status(text);
}

/* ---- reload (SIGHUP) ---- */

static void set_log_level(daemon_state *d, cfg_log_level level)
{
    if (!d->level_from_cli) log_level = (log_level_e)level;
}

/* What the last reload did, for ringctl status and the metrics. */
static void record_reload(daemon_state *d, int refused, const char *said)
{
    d->reload.count++;
    d->reload.at_ms = uv_now(d->loop);
    d->reload.refused = refused;
    snprintf(d->reload.said, sizeof d->reload.said, "%s", said);
}

static void refuse_reload(daemon_state *d, const char *why)
{
    log_error("reload: %s; keeping the running configuration", why);
    record_reload(d, 1, why);
    notify_ready();
}

/* Restarts the metrics endpoint if this host's address is no longer old. */
static void apply_metrics(daemon_state *d, const char *old)
{
    const char *now = d->config.hosts[d->me].metrics;
    if ((!old && !now) || (old && now && strcmp(old, now) == 0)) return;
    if (d->metrics) metrics_close(d->metrics, NULL, NULL);
    d->metrics = NULL;
    start_metrics(d);
}

/* A reload that keeps the ring: every change applies in place. */
static void apply_in_place(daemon_state *d, cfg *n, const reload_plan *plan, perm_policy *access)
{
    char err[1024];
    if (plan->access && d->local && local_set_access(d->local, access, err, sizeof err) < 0) {
        refuse_reload(d, err);
        return;
    }
    char *old_metrics =
        d->config.hosts[d->me].metrics ? strdup(d->config.hosts[d->me].metrics) : NULL;
    reload_apply(&d->config, d->me, n);
    for (int i = 0; i < plan->n; i++) {
        const reload_change *c = &plan->changes[i];
        log_info("reload: %s %s -> %s", c->key, c->from, c->to);
    }
    set_log_level(d, d->config.log_level);
    apply_metrics(d, old_metrics);
    free(old_metrics);
    char said[MSG_MAX_REASON + 1];
    reload_describe(plan, -1, said, sizeof said);
    record_reload(d, 0, plan->n ? said : "nothing changed");
    log_info("reload: done, the ring is unchanged");
    notify_ready();
}

static void on_reform_local_closed(void *data)
{
    daemon_state *d = data;
    d->local = NULL;
    cfg_free(&d->config);
    d->config = d->next;
    d->me = d->next_me;
    d->has_key = d->next_has_key;
    d->key = d->next_key;
    memset(&d->next, 0, sizeof d->next);
    memset(&d->rates, 0, sizeof d->rates);
    d->reforming = 0;
    set_log_level(d, d->config.log_level);
    if (d->stopping) {
        on_local_closed(d);
        return;
    }
    char err[1024];
    if (start_engine(d, err, sizeof err) < 0) {
        log_error("reload: %s", err);
        d->status = 1;
        if (d->engine) {
            stop(d, "the re-formed ring could not start");
        } else {
            d->stopping = 1;
            on_local_closed(d);
        }
        return;
    }
    rates_add(&d->rates, uv_now(d->loop), 0, 0);
    start_metrics(d);
    notify_ready();
}

static void on_reform_engine_closed(void *data)
{
    daemon_state *d = data;
    d->engine = NULL;
    local_close(d->local, RINGD_ERING,
                "the ring is re-formed after a configuration reload; reconnect",
                on_reform_local_closed, d);
}

static void reload(daemon_state *d)
{
    if (d->stopping || d->reforming) {
        const char *why = d->stopping ? "ignored, stopping" : "ignored, still re-forming the ring";
        log_warn("reload: %s", why);
        record_reload(d, 1, why);
        return;
    }
    notify_reloading();
    char err[1024];
    cfg n;
    if (cfg_load(d->config_path, &n, err, sizeof err) < 0) {
        refuse_reload(d, err);
        return;
    }
    int me = cfg_host_index(&n, d->host_name);
    if (me < 0) {
        snprintf(err, sizeof err, "%s: no host named \"%s\" in hosts", d->config_path,
                 d->host_name);
        refuse_reload(d, err);
        cfg_free(&n);
        return;
    }
    /* The key file is read again: a new key (or none) re-forms the ring,
     * since every link must authenticate with it. */
    auth_key key;
    int has_key = n.secret_file != NULL;
    if (has_key && auth_load_key(n.secret_file, &key, err, sizeof err) < 0) {
        refuse_reload(d, err);
        cfg_free(&n);
        return;
    }
    /* Names of users and groups are resolved now, so that a file naming
     * one this host lacks is refused whole, before anything changed. */
    perm_policy access;
    if (perm_resolve(&access, &n, err, sizeof err) < 0) {
        refuse_reload(d, err);
        perm_free(&access);
        cfg_free(&n);
        return;
    }
    int same_key =
        has_key == d->has_key &&
        (!has_key || (key.len == d->key.len && memcmp(key.bytes, d->key.bytes, key.len) == 0));
    reload_plan plan;
    reload_diff(&d->config, d->me, &n, me, !same_key, &plan);
    if (!plan.reform) {
        apply_in_place(d, &n, &plan, &access);
        perm_free(&access);
        cfg_free(&n);
        return;
    }
    perm_free(&access);
    /* Links and ring point into the running config: it is replaced only
     * once they are gone. The metrics endpoint restarts with the new one. */
    char what[MSG_MAX_REASON + 1], said[MSG_MAX_REASON + 1];
    reload_describe(&plan, RELOAD_REFORM, what, sizeof what);
    log_warn("reload: %s: re-forming the ring (collectives in flight fail, clients must "
             "reconnect)",
             what);
    reload_describe(&plan, -1, said, sizeof said);
    record_reload(d, 0, said);
    d->next_has_key = has_key;
    if (has_key) d->next_key = key;
    if (d->metrics) metrics_close(d->metrics, NULL, NULL);
    d->metrics = NULL;
    d->next = n;
    d->next_me = me;
    d->reforming = 1;
    engine_close(d->engine, RINGD_ERING, "the ring is re-formed after a configuration reload",
                 on_reform_engine_closed, d);
}

static void on_sighup(uv_signal_t *h, int signum)
{
    (void)signum;
    reload(h->data);
}

static int parse_level(const char *s, log_level_e *out)
{
    static const char *const names[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = (log_level_e)i;
            return 0;
        }
    }
    return RINGD_EINVAL;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"config", required_argument, NULL, 'c'},
                                         {"host", required_argument, NULL, 'H'},
                                         {"log-level", required_argument, NULL, 'l'},
                                         {"check", no_argument, NULL, 't'},
                                         {"help", no_argument, NULL, 'h'},
                                         {"version", no_argument, NULL, 'V'},
                                         {NULL, 0, NULL, 0}};
    const char *config_path = NULL, *host = NULL, *level_arg = NULL;
    int check_only = 0, opt;
    while ((opt = getopt_long(argc, argv, "c:H:l:thV", opts, NULL)) != -1) {
        switch (opt) {
        case 'c':
            config_path = optarg;
            break;
        case 'H':
            host = optarg;
            break;
        case 'l':
            level_arg = optarg;
            break;
        case 't':
            check_only = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("ringd %d.%d.%d\n", RINGD_VERSION_MAJOR, RINGD_VERSION_MINOR,
                   RINGD_VERSION_PATCH);
            return 0;
        default:
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (optind < argc || !config_path || (!host && !check_only)) {
        fprintf(stderr, "ringd: %s\n",
                optind < argc ? "unexpected argument" : "--config and --host are required");
        usage(stderr);
        return EXIT_USAGE;
    }
    log_level_e level = LOG_INFO;
    if (level_arg && parse_level(level_arg, &level) < 0) {
        fprintf(stderr, "ringd: --log-level: expected debug, info, warn or error, got \"%s\"\n",
                level_arg);
        return EXIT_USAGE;
    }

    daemon_state d = {0};
    char err[1024];
    if (cfg_load(config_path, &d.config, err, sizeof err) < 0) {
        fprintf(stderr, "ringd: %s\n", err);
        return EXIT_USAGE;
    }
    int me = host ? cfg_host_index(&d.config, host) : 0;
    if (me < 0) {
        fprintf(stderr, "ringd: %s: no host named \"%s\" in hosts (", config_path, host);
        for (size_t i = 0; i < d.config.n_hosts; i++)
            fprintf(stderr, "%s%s", i ? ", " : "", d.config.hosts[i].name);
        fprintf(stderr, ")\n");
        cfg_free(&d.config);
        return EXIT_USAGE;
    }
    /* The key is checked here, before anything starts: a daemon that cannot
     * authenticate must not join the ring unauthenticated. */
    d.has_key = d.config.secret_file != NULL;
    if (d.has_key && auth_load_key(d.config.secret_file, &d.key, err, sizeof err) < 0) {
        fprintf(stderr, "ringd: %s: %s\n", config_path, err);
        cfg_free(&d.config);
        return EXIT_USAGE;
    }
    if (check_only) {
        printf("%s: ok, cluster %s, %zu host(s), %d rank(s)\n", config_path, d.config.cluster,
               d.config.n_hosts, cfg_total_ranks(&d.config));
        cfg_free(&d.config);
        return 0;
    }
    if (!level_arg) level = (log_level_e)d.config.log_level;
    d.level_from_cli = level_arg != NULL;
    d.config_path = config_path;
    d.host_name = host;
    d.me = me;
    log_init(d.config.hosts[me].name, level);
    signal(SIGPIPE, SIG_IGN);
    srand((unsigned)time(NULL) ^ (unsigned)getpid());

    d.loop = uv_default_loop();
    uv_signal_init(d.loop, &d.sigterm);
    uv_timer_init(d.loop, &d.leaving);
    uv_signal_init(d.loop, &d.sigint);
    uv_signal_init(d.loop, &d.sighup);
    uv_timer_init(d.loop, &d.second);
    d.sigterm.data = d.sigint.data = d.sighup.data = d.second.data = d.leaving.data = &d;
    uv_signal_start(&d.sigterm, on_signal, SIGTERM);
    uv_signal_start(&d.sigint, on_signal, SIGINT);
    uv_signal_start(&d.sighup, on_sighup, SIGHUP);
    notify_init(d.loop);

    if (start_engine(&d, err, sizeof err) < 0) {
        log_error("%s", err);
        d.status = 1;
        if (d.engine) {
            stop(&d, "start-up failed");
        } else {
            on_local_closed(&d);
        }
    } else {
        rates_add(&d.rates, uv_now(d.loop), 0, 0);
        start_metrics(&d);
        uv_timer_start(&d.second, on_second, 1000, 1000);
        /* Both sockets listen now: clients and the left neighbour may come. */
        notify_ready();
    }
    uv_run(d.loop, UV_RUN_DEFAULT);
    uv_loop_close(d.loop);
    cfg_free(&d.config);
    if (d.status == 0) log_info("stopped");
    return d.status;
}
