/*
 * ringctl.c - command-line tool of ringd: the global options, the dispatch to
 * a command, and what the commands share (ringctl.h).
 *
 *   ringctl [--socket PATH] status [--json]
 *   ringctl [--socket PATH] report [--json] [--window] [--trace FILE] [--svg FILE]
 *   ringctl [--socket PATH] leave | join
 *   ringctl [--socket PATH] allreduce [--count N] [--dtype T] [--op O] ...
 *   ringctl [--socket PATH] broadcast | allgather | reduce_scatter | barrier ...
 *   ringctl [--socket PATH] gather | scatter | alltoall ...
 *   ringctl checkpoints [--sizes] DIR
 *   ringctl --version
 *
 * Each command has its own file. `status` (ringctl_status.c) opens its own
 * observer session (it is not a rank) and prints the daemon's MSG_STATUS;
 * `leave` and `join` (ringctl_leave.c) do the same with MSG_LEAVE_REQ.
 * The collective commands (ringctl_bench.c) make this process a rank like
 * any training process, check every result and report the median time and
 * bandwidth. `checkpoints` (ringctl_checkpoints.c) reads the directories of
 * ringd.checkpoint and talks to no daemon.
 *
 * Exit status: 0 success, 1 failure (message on stderr), 2 usage error.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringctl.h"
#include "ringctl_bench.h"
#include "ringctl_checkpoints.h"
#include "ringctl_leave.h"
#include "ringctl_report.h"
#include "ringctl_status.h"
#include "ringd.h"
#include "session.h"

#define COMMAND_NAMES                                                                              \
    "status, report, leave, join, allreduce, broadcast, allgather, reduce_scatter, barrier, "      \
    "gather, scatter, alltoall or checkpoints"

static const char usage_main[] =
    "Usage: ringctl [--socket PATH] COMMAND [OPTIONS]\n"
    "       ringctl --version\n"
    "\n"
    "Talks to the ringd daemon of this host.\n"
    "\n"
    "Commands:\n"
    "  status          show the state of the ring as this host's daemon sees it\n"
    "  report          show where every rank of the ring spent its time: compute,\n"
    "                  wait, transfer, failure; speedup, energy; trace, chart\n"
    "  leave           take this host out of its elastic ring now (until join)\n"
    "  join            bring this host back into its elastic ring\n"
    "  allreduce       run and verify allreduces as one rank; print the bandwidth\n"
    "  broadcast       the same for broadcasts from one rank to all\n"
    "  allgather       the same for allgathers\n"
    "  reduce_scatter  the same for reduce-scatters\n"
    "  barrier         time barriers as one rank; print the median latency\n"
    "  gather          run and verify gathers to one rank (libringd composes\n"
    "                  them from an allgather); print the median time\n"
    "  scatter         the same for scatters from one rank (from a broadcast)\n"
    "  alltoall        the same for all-to-alls (from an allgather)\n"
    "  checkpoints     list the steps of a ringd.checkpoint directory, and which\n"
    "                  are complete\n"
    "\n"
    "The collective commands join the ring as one rank each, like a training\n"
    "process: run the same command in every process of every host at once (the\n"
    "local rank comes from $RINGD_LOCAL_RANK, else $LOCAL_RANK, else the order\n"
    "of connection).\n"
    "\n"
    "Options:\n"
    "  -s, --socket PATH  the daemon's Unix socket (default: $RINGD_SOCKET, else\n"
    "                     " SESSION_DEFAULT_SOCKET ")\n"
    "  -h, --help         show this help; `ringctl COMMAND --help` for a command\n"
    "  -V, --version      show the version of ringctl and libringd\n"
    "\n"
    "Exit status: 0 success, 1 failure, 2 usage error.\n";

int ringctl_usage_error(const char *command, const char *fmt, ...)
{
    va_list ap;
    fputs("ringctl: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'ringctl%s%s --help'.\n", command ? " " : "", command ? command : "");
    return EXIT_USAGE;
}

void ringctl_put_text(const char *s)
{
    for (; *s; s++)
        putchar((unsigned char)*s < 0x20 || *s == 0x7f ? '?' : *s);
}

void ringctl_format_bytes(char *out, size_t len, uint64_t n)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (n < 1024) {
        snprintf(out, len, "%" PRIu64 " B", n);
        return;
    }
    double v = (double)n / 1024;
    size_t u = 0;
    while (v >= 1024 && u + 1 < sizeof units / sizeof units[0]) {
        v /= 1024;
        u++;
    }
    snprintf(out, len, "%.1f %s", v, units[u]);
}

void ringctl_put_bytes(uint64_t n)
{
    char text[32];
    ringctl_format_bytes(text, sizeof text, n);
    fputs(text, stdout);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"socket", required_argument, NULL, 's'},
                                         {"help", no_argument, NULL, 'h'},
                                         {"version", no_argument, NULL, 'V'},
                                         {0}};
    const char *path = NULL;
    int ch;
    /* "+": stop at the command; its options are parsed by the command. */
    while ((ch = getopt_long(argc, argv, "+s:hV", opts, NULL)) != -1) {
        switch (ch) {
        case 's':
            path = optarg;
            break;
        case 'h':
            fputs(usage_main, stdout);
            return EXIT_OK;
        case 'V':
            /* ringctl is built with the libringd it links: one version. */
            printf("ringctl %d.%d.%d\n", RINGD_VERSION_MAJOR, RINGD_VERSION_MINOR,
                   RINGD_VERSION_PATCH);
            return EXIT_OK;
        default:
            return ringctl_usage_error(NULL, "invalid option");
        }
    }
    if (optind >= argc) return ringctl_usage_error(NULL, "missing command (%s)", COMMAND_NAMES);
    if (!path) {
        path = getenv("RINGD_SOCKET");
        if (!path || !*path) path = SESSION_DEFAULT_SOCKET;
    }
    const char *cmd = argv[optind];
    argc -= optind;
    argv += optind;
    if (strcmp(cmd, "status") == 0) return status_command(path, argc, argv);
    if (strcmp(cmd, "report") == 0) return report_command(path, argc, argv);
    if (strcmp(cmd, "leave") == 0 || strcmp(cmd, "join") == 0)
        return leave_command(path, argc, argv);
    if (strcmp(cmd, "checkpoints") == 0) return ckpt_command(argc, argv);
    const bench_cmd *coll = bench_find(cmd);
    if (coll) return bench_command(coll, path, argc, argv);
    if (strcmp(cmd, "help") == 0) {
        fputs(usage_main, stdout);
        return EXIT_OK;
    }
    return ringctl_usage_error(NULL, "unknown command '%s' (%s)", cmd, COMMAND_NAMES);
}
