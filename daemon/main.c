/*
 * main.c - ringd: the ring allreduce daemon of one host.
 *
 *   ringd --config /etc/ringd/ringd.yaml --host a
 *
 * One libuv loop runs everything: the ring links (ring.c, links.c) and the
 * local clients (local.c). SIGTERM or SIGINT fail what is in flight with an
 * error to its clients and exit cleanly.
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
#include "ring.h"
#include "ringd.h"

#define EXIT_USAGE 2

typedef struct {
    uv_loop_t *loop;
    cfg config;
    ring *ring;
    local *local;
    uv_signal_t sigterm, sigint;
    int stopping;
} daemon_state;

static void usage(FILE *out)
{
    fprintf(out, "usage: ringd --config FILE --host NAME [--log-level LEVEL]\n"
                 "\n"
                 "Runs the ringd daemon of one host: joins the TCP ring described in FILE as the\n"
                 "host named NAME and serves the local training processes on its Unix socket.\n"
                 "\n"
                 "  -c, --config FILE      YAML configuration (see ringd.example.yaml)\n"
                 "  -H, --host NAME        which of the config's hosts this is\n"
                 "  -l, --log-level LEVEL  debug, info, warn or error (overrides log_level)\n"
                 "  -t, --check            validate the configuration and exit\n"
                 "  -h, --help             show this help\n"
                 "  -V, --version          show the version\n"
                 "\n"
                 "Exit status: 0 after a clean stop (SIGTERM, SIGINT), 1 on a runtime failure,\n"
                 "2 on a bad command line or configuration.\n");
}

static void on_local_closed(void *data)
{
    daemon_state *d = data;
    d->local = NULL;
    uv_close((uv_handle_t *)&d->sigterm, NULL);
    uv_close((uv_handle_t *)&d->sigint, NULL);
}

static void on_ring_closed(void *data)
{
    daemon_state *d = data;
    d->ring = NULL;
    local_close(d->local, RINGD_ESHUTDOWN, "ringd is shutting down", on_local_closed, d);
}

/* The ring goes first: failing its jobs answers their clients while the
 * sessions are still open; then the sessions and the socket go. */
static void stop(daemon_state *d, const char *why)
{
    if (d->stopping) return;
    d->stopping = 1;
    log_info("stopping: %s", why);
    ring_close(d->ring, RINGD_ESHUTDOWN, "ringd is shutting down", on_ring_closed, d);
}

static void on_signal(uv_signal_t *h, int signum)
{
    stop(h->data, signum == SIGTERM ? "SIGTERM" : "SIGINT");
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
    return -1;
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
    static auth_key key;
    if (d.config.secret_file && auth_load_key(d.config.secret_file, &key, err, sizeof err) < 0) {
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
    log_init(d.config.hosts[me].name, level);
    signal(SIGPIPE, SIG_IGN);
    srand((unsigned)time(NULL) ^ (unsigned)getpid());

    d.loop = uv_default_loop();
    int rc = ring_new(&d.ring, d.loop, &d.config, me);
    if (rc == 0 && d.config.secret_file) ring_set_key(d.ring, &key);
    if (rc == 0) rc = local_new(&d.local, d.loop, &d.config, me, d.ring);
    if (rc < 0) {
        fprintf(stderr, "ringd: cannot start: %s\n", ringd_strerror(rc));
        return 1;
    }
    uv_signal_init(d.loop, &d.sigterm);
    uv_signal_init(d.loop, &d.sigint);
    d.sigterm.data = d.sigint.data = &d;
    uv_signal_start(&d.sigterm, on_signal, SIGTERM);
    uv_signal_start(&d.sigint, on_signal, SIGINT);

    int status = 0;
    if (local_start(d.local, err, sizeof err) < 0 || ring_start(d.ring, err, sizeof err) < 0) {
        log_error("%s", err);
        status = 1;
        stop(&d, "start-up failed");
    } else {
        const cfg_host *h = &d.config.hosts[me];
        log_info("ringd %d.%d.%d: host %s (%d of %zu) in cluster %s, %d local client(s), %d "
                 "rank(s) in all",
                 RINGD_VERSION_MAJOR, RINGD_VERSION_MINOR, RINGD_VERSION_PATCH, h->name, me + 1,
                 d.config.n_hosts, d.config.cluster, h->local_clients, cfg_total_ranks(&d.config));
    }
    uv_run(d.loop, UV_RUN_DEFAULT);
    uv_loop_close(d.loop);
    cfg_free(&d.config);
    if (status == 0) log_info("stopped");
    return status;
}
