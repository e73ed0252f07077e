/*
 * ringctl_report.c - `ringctl report`: asks this host's daemon for every
 * host's summary (report.c) and shows where each rank of the ring spent its
 * time: a table for a person, the JSON of ringd.report(), a Chrome trace
 * of the recent calls (--trace) or a chart (--svg).
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"
#include "report_render.h"
#include "ringctl.h"
#include "ringctl_report.h"
#include "ringctl_status.h"
#include "ringd.h"

#define STALE_S 5 /* a summary older than this is named */

static const char usage_report[] =
    "Usage: ringctl [--socket PATH] report [--json] [--window] [--trace FILE] [--svg FILE]\n"
    "\n"
    "Shows where every rank of the ring spent its time in the current job (since\n"
    "the ranks of each host connected), as the daemons account it: compute (from a\n"
    "result to the next call: the useful work), wait (in a call, until the last\n"
    "rank of the ring submitted it), transfer (from then to the result) and\n"
    "failure (from a failed call to the next successful one); calls and bytes; the\n"
    "CPU time of the ranks' processes and the calls each came last to. Then the\n"
    "speedup the job reached (useful work / wall time: every rank's compute over\n"
    "the longest rank's time), its efficiency (speedup / ranks), who made the\n"
    "others wait most, each host's CPU time and energy (measured by RAPL, or\n"
    "estimated at watts_per_core). The daemons exchange their summaries once a\n"
    "second, so any host shows every rank. A balanced job (ringd.balance) adds its\n"
    "split: each rank's rows of the global batch and its measured speed, as in\n"
    "ringctl status. Connects as an observer: it takes no rank.\n"
    "\n"
    "Options:\n"
    "  -j, --json         print one JSON object with every figure instead (what\n"
    "                     ringd.report() returns in Python, and the split as\n"
    "                     \"balance\")\n"
    "  -w, --window       the last minute instead of the whole job (CPU, energy\n"
    "                     and the calls each came last to stay the job's)\n"
    "  -t, --trace FILE   also write the recent calls of every rank as a Chrome\n"
    "                     trace (open it in https://ui.perfetto.dev or\n"
    "                     chrome://tracing): a row per rank, waits shaded\n"
    "  -g, --svg FILE     also write a chart: one stacked bar per rank\n"
    "  -s, --socket PATH  the daemon's Unix socket (as before the command)\n"
    "  -h, --help         show this help\n";

static void put_secs(double s, int width)
{
    printf(" %*.2fs", width - 1, s);
}

static double sec(uint64_t us)
{
    return (double)us / 1e6;
}

static void print_table(const report_view *v, int window)
{
    const report_totals_view *t = window ? &v->window : &v->life;
    printf("ring ");
    ringctl_put_text(v->cluster);
    printf(", %d host%s, as ", v->n_hosts, v->n_hosts == 1 ? "" : "s");
    ringctl_put_text(v->hosts[v->me].name);
    if (window)
        printf(" sees it: the last %.0f s\n", v->window_s);
    else
        printf(" sees it: the job so far (its longest rank: %.1f s)\n", t->wall_s);
    if (!v->n_ranks) {
        printf("no rank has connected yet\n");
    } else {
        printf("%5s %-12s %10s %10s %10s %10s %7s %6s %11s %9s %7s\n", "rank", "host", "compute",
               "wait", "transfer", "failure", "calls", "failed", "bytes", "cpu", "last to");
    }
    for (int i = 0; i < v->n_ranks; i++) {
        const report_rank *r = &v->ranks[i];
        const summary_times *tm = window ? &r->window : &r->life;
        char host[16];
        snprintf(host, sizeof host, "%.12s", v->hosts[r->host].name);
        printf("%5d ", r->rank);
        ringctl_put_text(host);
        printf("%*s", 12 - (int)strlen(host), "");
        put_secs(sec(tm->compute_us), 10);
        put_secs(sec(tm->wait_us), 10);
        put_secs(sec(tm->transfer_us), 10);
        put_secs(sec(tm->failure_us), 10);
        printf(" %7" PRIu64 " %6" PRIu64 " ", tm->calls, tm->failed);
        char bytes[32];
        ringctl_format_bytes(bytes, sizeof bytes, tm->bytes);
        printf("%11s", bytes);
        put_secs(sec(r->cpu_us), 9);
        printf(" %7" PRIu64 "%s\n", r->late_calls,
               r->failing     ? "  failing"
               : r->connected ? ""
                              : "  (left)");
    }
    if (v->n_ranks)
        printf("useful work %.1f s in %.1f s of wall time: speedup %.2f of %d ranks, "
               "efficiency %.0f%%\n",
               t->useful_s, t->wall_s, t->speedup, v->n_ranks, t->efficiency * 100);
    if (!window && v->waited_most >= 0) {
        const report_rank *r = &v->ranks[v->waited_most];
        printf("the others waited most for rank %d on ", r->rank);
        ringctl_put_text(v->hosts[r->host].name);
        printf(": it came last to %" PRIu64 " call%s, %.2f s after the first rank in all\n",
               r->late_calls, r->late_calls == 1 ? "" : "s", sec(r->late_us));
    } else if (!window && v->n_ranks) {
        printf("no rank made the others wait (by 1 ms or more)\n");
    }
    printf("energy %.0f J", v->energy_j);
    int estimated = 0;
    double watts = 0;
    for (int h = 0; h < v->n_hosts; h++) {
        if (v->hosts[h].energy == SUMMARY_ENERGY_ESTIMATED) {
            estimated++;
            watts = v->hosts[h].watts_per_core;
        }
    }
    if (!strcmp(v->energy_source, "estimated"))
        printf(" (estimated: CPU seconds x %g W)", watts);
    else if (!strcmp(v->energy_source, "rapl"))
        printf(" (measured: RAPL)");
    else if (!strcmp(v->energy_source, "mixed"))
        printf(" (RAPL on some hosts, estimated on %d)", estimated);
    printf("; CPU: daemons %.1f s, ranks %.1f s\n", v->daemon_cpu_s, v->ranks_cpu_s);
    for (int h = 0; h < v->n_hosts; h++) {
        const report_host *x = &v->hosts[h];
        if (!x->reported) {
            printf("no summary from host ");
            ringctl_put_text(x->name);
            printf(" yet (its daemon is down, out of the ring, or just started)\n");
        } else if (x->age_s > STALE_S) {
            printf("the summary of host ");
            ringctl_put_text(x->name);
            printf(" is %.0f s old (out of the ring?)\n", x->age_s);
        }
    }
}

/* The JSON of the report with the balanced split added as "balance"
 * (null if none), as ringctl status --json shows it. */
static int print_json(const report_view *v, const msg_status *st)
{
    char *text = report_json(v);
    if (!text) {
        fprintf(stderr, "ringctl: report: out of memory\n");
        return EXIT_FAIL;
    }
    char *end = strrchr(text, '}');
    if (!end) {
        fprintf(stderr, "ringctl: report: the report's JSON is not an object\n");
        free(text);
        return EXIT_FAIL;
    }
    fwrite(text, 1, (size_t)(end - text), stdout);
    if (st)
        status_print_balance_json(st);
    else
        printf(",\"balance\":null");
    printf("}\n");
    free(text);
    return EXIT_OK;
}

/* Writes one of the drawings to path: 0, or EXIT_FAIL with a message. */
static int write_file(const char *path, const report_view *v, int window, int svg)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "ringctl: report: cannot write %s: %m\n", path);
        return EXIT_FAIL;
    }
    int rc = svg ? report_write_svg(v, window, f) : report_write_trace(v, f);
    if (fclose(f) != 0 || rc < 0) {
        fprintf(stderr, "ringctl: report: writing %s failed\n", path);
        return EXIT_FAIL;
    }
    return EXIT_OK;
}

int report_command(const char *path, int argc, char **argv)
{
    static const struct option opts[] = {{"json", no_argument, NULL, 'j'},
                                         {"window", no_argument, NULL, 'w'},
                                         {"trace", required_argument, NULL, 't'},
                                         {"svg", required_argument, NULL, 'g'},
                                         {"socket", required_argument, NULL, 's'},
                                         {"help", no_argument, NULL, 'h'},
                                         {0}};
    int json = 0, window = 0, ch;
    const char *trace = NULL, *svg = NULL;
    optind = 0;
    while ((ch = getopt_long(argc, argv, "+jwt:g:s:h", opts, NULL)) != -1) {
        switch (ch) {
        case 'j':
            json = 1;
            break;
        case 'w':
            window = 1;
            break;
        case 't':
            trace = optarg;
            break;
        case 'g':
            svg = optarg;
            break;
        case 's':
            path = optarg;
            break;
        case 'h':
            fputs(usage_report, stdout);
            return EXIT_OK;
        default:
            return ringctl_usage_error("report", "invalid option for report");
        }
    }
    if (optind < argc)
        return ringctl_usage_error("report", "unexpected argument '%s'", argv[optind]);

    report_view v;
    char err[1600];
    if (report_fetch(path, &v, err, sizeof err) < 0) {
        fprintf(stderr, "ringctl: %s\n", err);
        return EXIT_FAIL;
    }
    /* The split comes with the daemon's status. The report is what was
     * asked for: without the split it is still shown, and stderr says why. */
    session s;
    msg_status st;
    int have_split = status_fetch(&s, path, &st) == 0;
    if (!have_split)
        fprintf(stderr, "ringctl: report: the balanced split is not shown: %s\n", s.err);
    int rc = EXIT_OK;
    if (json) {
        rc = print_json(&v, have_split ? &st : NULL);
    } else {
        print_table(&v, window);
        if (have_split && st.split.n_ranks) {
            putchar('\n');
            status_print_balance(&st);
        }
    }
    if (rc == EXIT_OK && trace) rc = write_file(trace, &v, window, 0);
    if (rc == EXIT_OK && svg) rc = write_file(svg, &v, window, 1);
    report_free(&v);
    if (fflush(stdout) != 0) rc = EXIT_FAIL;
    return rc;
}
