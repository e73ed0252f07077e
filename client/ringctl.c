/*
 * ringctl.c - command-line tool of ringd.
 *
 *   ringctl [--socket PATH] status [--json]
 *   ringctl [--socket PATH] allreduce [--count N] [--dtype T] [--op O] ...
 *   ringctl [--socket PATH] broadcast | allgather | reduce_scatter | barrier ...
 *   ringctl --version
 *
 * `status` opens its own observer session (it is not a rank) and prints the
 * daemon's MSG_STATUS. The collective commands make this process a rank like
 * any training process: they use the public API, check every result against
 * values computed locally (check.h), and report the median time and
 * bandwidth. One loop runs them all, parametrised by a `command`.
 * `checkpoints` lives in ringctl_checkpoints.c.
 *
 * Exit status: 0 success, 1 failure (message on stderr), 2 usage error.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "ringctl.h"
#include "ringctl_checkpoints.h"
#include "ringd.h"
#include "session.h"

#define COMMAND_NAMES                                                                              \
    "status, allreduce, broadcast, allgather, reduce_scatter, barrier or checkpoints"

static const char usage_main[] =
    "Usage: ringctl [--socket PATH] COMMAND [OPTIONS]\n"
    "       ringctl --version\n"
    "\n"
    "Talks to the ringd daemon of this host.\n"
    "\n"
    "Commands:\n"
    "  status          show the state of the ring as this host's daemon sees it\n"
    "  allreduce       run and verify allreduces as one rank; print the bandwidth\n"
    "  broadcast       the same for broadcasts from one rank to all\n"
    "  allgather       the same for allgathers\n"
    "  reduce_scatter  the same for reduce-scatters\n"
    "  barrier         time barriers as one rank; print the median latency\n"
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

static const char usage_status[] =
    "Usage: ringctl [--socket PATH] status [--json]\n"
    "\n"
    "Shows this host's place in the ring, the state of its links to the left and\n"
    "right neighbours, its clients, counters, payload rates over the last few\n"
    "seconds and the last collective failure; then, for stragglers, the recent\n"
    "collectives: how long each took here and how long this host waited for its\n"
    "left neighbour's data (about 0: that neighbour was there first, so this host\n"
    "or one before it came last). Connects as an observer: it takes no rank.\n"
    "\n"
    "Options:\n"
    "  -j, --json         print one JSON object with every field instead\n"
    "  -s, --socket PATH  the daemon's Unix socket (as before the command)\n"
    "  -h, --help         show this help\n";

/* Help lines shared by the collective commands. */
#define HELP_JOIN                                                                                  \
    "Joins the ring as one rank (local rank from $RINGD_LOCAL_RANK or $LOCAL_RANK)\n"              \
    "and runs W warm-up and K timed collectives, in place. Every rank must run the\n"              \
    "same command at once.\n"
#define HELP_DTYPE                                                                                 \
    "  -t, --dtype T      int8, uint8, int32, int64, float16, bfloat16, float32,\n"                \
    "                     float64 (default float32)\n"
#define HELP_OP                                                                                    \
    "  -o, --op O         sum, mean, wmean (float types only; wmean weighs rank r by\n"            \
    "                     r + 1), min, max, prod (default sum)\n"
#define HELP_RUN                                                                                   \
    "  -i, --iters K      timed iterations, 1 to 1000000 (default 5)\n"                            \
    "  -w, --warmup W     untimed iterations first, 0 to 1000000 (default 1)\n"                    \
    "  -c, --copy         use malloc'd memory (copied through the daemon's staging\n"              \
    "                     buffer) instead of ringd_alloc'd shared memory\n"
#define HELP_END                                                                                   \
    "  -q, --quiet        print nothing on success\n"                                              \
    "  -s, --socket PATH  the daemon's Unix socket (as before the command)\n"                      \
    "  -h, --help         show this help\n"                                                        \
    "\n"                                                                                           \
    "Exit status: 0 success, 1 failure or wrong result, 2 usage error.\n"

static const char usage_allreduce[] =
    "Usage: ringctl [--socket PATH] allreduce [OPTIONS]\n"
    "\n" HELP_JOIN "\n"
    "Each rank's result is checked, element by element, against the reduction of\n"
    "all ranks' inputs computed locally. On success one line gives the median\n"
    "time, the algorithm bandwidth (bytes / time) and the bus bandwidth\n"
    "(algbw * 2(n-1)/n for n ranks), in MB/s = 1e6 B/s.\n"
    "\n"
    "Options:\n"
    "  -n, --count N      elements per allreduce (default 1048576)\n" HELP_DTYPE HELP_OP HELP_RUN
        HELP_END;

static const char usage_broadcast[] =
    "Usage: ringctl [--socket PATH] broadcast [OPTIONS]\n"
    "\n" HELP_JOIN "\n"
    "The root's buffer holds values that every rank can compute; the others start\n"
    "from a different value, and every element they get is checked. On success one\n"
    "line gives the median time, the algorithm bandwidth (bytes / time) and the bus\n"
    "bandwidth (equal to algbw for a broadcast), in MB/s = 1e6 B/s.\n"
    "\n"
    "Options:\n"
    "  -n, --count N      elements per broadcast (default 1048576)\n" HELP_DTYPE
    "  -r, --root R       the rank whose buffer every rank gets (default 0)\n" HELP_RUN HELP_END;

static const char usage_allgather[] =
    "Usage: ringctl [--socket PATH] allgather [OPTIONS]\n"
    "\n" HELP_JOIN "\n"
    "Each rank contributes N elements and gets every rank's, n x N in rank order;\n"
    "every element is checked. On success one line gives the median time, the\n"
    "algorithm bandwidth (n x N x element size / time) and the bus bandwidth\n"
    "(algbw * (n-1)/n for n ranks), in MB/s = 1e6 B/s.\n"
    "\n"
    "Options:\n"
    "  -n, --count N      elements per rank; each gets n x N (default 1048576)\n" HELP_DTYPE
        HELP_RUN HELP_END;

static const char usage_reduce_scatter[] =
    "Usage: ringctl [--socket PATH] reduce_scatter [OPTIONS]\n"
    "\n" HELP_JOIN "\n"
    "Each rank submits n x N elements and gets block `rank` of their reduction\n"
    "over all ranks, N elements, checked against the reduction computed locally.\n"
    "On success one line gives the median time, the algorithm bandwidth (n x N x\n"
    "element size / time) and the bus bandwidth (algbw * (n-1)/n for n ranks), in\n"
    "MB/s = 1e6 B/s.\n"
    "\n"
    "Options:\n"
    "  -n, --count N      elements of the result per rank; each submits n x N\n"
    "                     (default 1048576)\n" HELP_DTYPE HELP_OP HELP_RUN HELP_END;

static const char usage_barrier[] =
    "Usage: ringctl [--socket PATH] barrier [OPTIONS]\n"
    "\n"
    "Joins the ring as one rank (local rank from $RINGD_LOCAL_RANK or $LOCAL_RANK)\n"
    "and runs W warm-up and K timed barriers. Every rank must run the same command\n"
    "at once. On success one line gives the median latency: from entering a\n"
    "barrier to its return, once every rank has entered it.\n"
    "\n"
    "Options:\n"
    "  -i, --iters K      timed iterations, 1 to 1000000 (default 100)\n"
    "  -w, --warmup W     untimed iterations first, 0 to 1000000 (default 1)\n" HELP_END;

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

void ringctl_put_bytes(uint64_t n)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (n < 1024) {
        printf("%" PRIu64 " B", n);
        return;
    }
    double v = (double)n / 1024;
    size_t u = 0;
    while (v >= 1024 && u + 1 < sizeof units / sizeof units[0]) {
        v /= 1024;
        u++;
    }
    printf("%.1f %s", v, units[u]);
}

static int parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    if (!*s || *s == '-') return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v > max) return -1;
    *out = v;
    return 0;
}

/* ---- status ---- */

static const char *link_state_name(int state)
{
    switch (state) {
    case MSG_LINK_DOWN:
        return "down";
    case MSG_LINK_CONNECTING:
        return "connecting";
    case MSG_LINK_UP:
        return "up";
    case MSG_LINK_SELF:
        return "self";
    case MSG_LINK_REFUSED:
        return "refused";
    default:
        return "unknown";
    }
}

static void put_duration(uint64_t ms)
{
    uint64_t s = ms / 1000, d = s / 86400, h = s / 3600 % 24, m = s / 60 % 60;
    if (d)
        printf("%" PRIu64 "d %" PRIu64 "h %" PRIu64 "m %" PRIu64 "s", d, h, m, s % 60);
    else if (h)
        printf("%" PRIu64 "h %" PRIu64 "m %" PRIu64 "s", h, m, s % 60);
    else if (m)
        printf("%" PRIu64 "m %" PRIu64 "s", m, s % 60);
    else
        printf("%" PRIu64 "s", s);
}

/* "up for 3m 2s", "refused for 12s: refused by h2: ..." */
static void put_link(const char *side, const char *name, int state, uint64_t age_ms,
                     const char *reason)
{
    printf("%s", side);
    ringctl_put_text(name[0] ? name : "-");
    printf(": %s", link_state_name(state));
    if (state != MSG_LINK_SELF) {
        printf(" for ");
        put_duration(age_ms);
    }
    if (state != MSG_LINK_UP && state != MSG_LINK_SELF && reason[0]) {
        printf(": ");
        ringctl_put_text(reason);
    } else if (state == MSG_LINK_DOWN && side[0] == 'l') {
        printf(": it has not connected");
    }
    putchar('\n');
}

static void print_status(const msg_status *st)
{
    printf("cluster ");
    ringctl_put_text(st->cluster);
    printf(", host ");
    ringctl_put_text(st->host);
    printf(" (%" PRIu32 " of %" PRIu32 "), epoch %" PRIu32 ", next collective #%" PRIu64 "\n",
           st->host_index + 1, st->n_hosts, st->epoch, st->next_seq);
    put_link("left  ", st->left, st->left_state, st->left_age_ms, st->left_reason);
    put_link("right ", st->right, st->right_state, st->right_age_ms, st->right_reason);
    if (st->waiting[0]) {
        printf("ring not ready: ");
        ringctl_put_text(st->waiting);
        putchar('\n');
    }
    if (st->n_done) {
        /* Hosts in step have completed the same count, or nearly. */
        printf("completed in this epoch, by host:");
        for (unsigned i = 0; i < st->n_done; i++)
            printf(" %" PRIu64, st->done[i]);
        putchar('\n');
    }
    printf("clients %" PRIu32 "/%" PRIu32 ", collectives %" PRIu64 " done, %" PRIu64 " failed\n",
           st->clients, st->local_size, st->collectives_done, st->collectives_failed);
    printf("bytes in ");
    ringctl_put_bytes(st->bytes_in);
    printf(", out ");
    ringctl_put_bytes(st->bytes_out);
    printf(", uptime ");
    put_duration(st->uptime_ms);
    printf(", reconnects %" PRIu64 "\n", st->reconnects);
    printf("rates in ");
    ringctl_put_bytes(st->rate_in);
    printf("/s, out ");
    ringctl_put_bytes(st->rate_out);
    printf("/s\n");
    if (st->waits)
        printf("waited for left neighbour: %.3f ms on average over %" PRIu64 " collective%s\n",
               (double)st->wait_sum_us / 1000 / (double)st->waits, st->waits,
               st->waits == 1 ? "" : "s");
    if (st->n_recent) printf("recent collectives (wait here for left neighbour ");
    if (st->n_recent) ringctl_put_text(st->left[0] ? st->left : "-");
    if (st->n_recent) printf("):\n");
    for (unsigned i = 0; i < st->n_recent; i++) {
        const msg_recent *e = &st->recent[i];
        printf("  #%" PRIu64 " %-14s %-7s took %9.3f ms, ", e->seq, ringd_coll_name(e->kind),
               e->status == 0 ? "ok" : "failed", (double)e->latency_us / 1000);
        if (!e->has_wait)
            printf("no data from the left");
        else if (e->wait_us < 100)
            printf("no wait: the left neighbour's data was here, this host came after it");
        else
            printf("waited %.3f ms for its left neighbour", (double)e->wait_us / 1000);
        if (e->last[0] && e->spread_us >= 1000) {
            printf("; last to start: ");
            ringctl_put_text(e->last);
            printf(", %.3f ms after the first", (double)e->spread_us / 1000);
        } else if (e->last[0]) {
            printf("; all hosts started within 1 ms");
        }
        putchar('\n');
    }
    printf("last error");
    if (st->last_error[0] && st->last_error_age_ms != MSG_NO_AGE) {
        printf(" (");
        put_duration(st->last_error_age_ms);
        printf(" ago)");
    }
    printf(": ");
    ringctl_put_text(st->last_error[0] ? st->last_error : "-");
    putchar('\n');
}

/* Length of the valid UTF-8 sequence at s, or 0. */
static size_t utf8_len(const unsigned char *s)
{
    size_t n = s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
    if (s[0] >= 0xf5) return 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    /* Overlong forms, surrogates and code points past U+10FFFF. */
    if ((n == 3 && s[0] == 0xe0 && s[1] < 0xa0) || (n == 3 && s[0] == 0xed && s[1] >= 0xa0) ||
        (n == 4 && s[0] == 0xf0 && s[1] < 0x90) || (n == 4 && s[0] == 0xf4 && s[1] >= 0x90))
        return 0;
    return n;
}

/* Prints s as a JSON string; invalid UTF-8 becomes U+FFFD. */
static void put_json_string(const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    putchar('"');
    while (*s) {
        if (*s == '"' || *s == '\\') {
            printf("\\%c", *s++);
        } else if (*s == '\n') {
            fputs("\\n", stdout), s++;
        } else if (*s == '\t') {
            fputs("\\t", stdout), s++;
        } else if (*s < 0x20 || *s == 0x7f) {
            printf("\\u%04x", *s++);
        } else if (*s < 0x80) {
            putchar(*s++);
        } else {
            size_t n = utf8_len(s);
            if (n) {
                fwrite(s, 1, n, stdout);
                s += n;
            } else {
                fputs("\\ufffd", stdout);
                s++;
            }
        }
    }
    putchar('"');
}

static void print_status_json(const msg_status *st)
{
    printf("{\"id\":%" PRIu64 ",\"cluster\":", st->id);
    put_json_string(st->cluster);
    printf(",\"host\":");
    put_json_string(st->host);
    printf(",\"left\":");
    put_json_string(st->left);
    printf(",\"right\":");
    put_json_string(st->right);
    printf(",\"host_index\":%" PRIu32 ",\"n_hosts\":%" PRIu32
           ",\"left_state\":\"%s\",\"right_state\":\"%s\",\"epoch\":%" PRIu32
           ",\"clients\":%" PRIu32 ",\"local_size\":%" PRIu32 ",\"collectives_done\":%" PRIu64
           ",\"collectives_failed\":%" PRIu64 ",\"bytes_in\":%" PRIu64 ",\"bytes_out\":%" PRIu64
           ",\"uptime_ms\":%" PRIu64 ",\"reconnects\":%" PRIu64 ",\"last_error\":",
           st->host_index, st->n_hosts, link_state_name(st->left_state),
           link_state_name(st->right_state), st->epoch, st->clients, st->local_size,
           st->collectives_done, st->collectives_failed, st->bytes_in, st->bytes_out, st->uptime_ms,
           st->reconnects);
    put_json_string(st->last_error);
    printf(",\"rate_in\":%" PRIu64 ",\"rate_out\":%" PRIu64 ",\"waits\":%" PRIu64
           ",\"wait_sum_us\":%" PRIu64 ",\"recent\":[",
           st->rate_in, st->rate_out, st->waits, st->wait_sum_us);
    for (unsigned i = 0; i < st->n_recent; i++) {
        const msg_recent *e = &st->recent[i];
        printf("%s{\"seq\":%" PRIu64 ",\"kind\":\"%s\",\"status\":%" PRId32
               ",\"latency_us\":%" PRIu64 ",\"wait_us\":",
               i ? "," : "", e->seq, ringd_coll_name(e->kind), e->status, e->latency_us);
        if (e->has_wait)
            printf("%" PRIu64, e->wait_us);
        else
            printf("null");
        printf(",\"last\":");
        if (e->last[0])
            put_json_string(e->last);
        else
            printf("null");
        printf(",\"spread_us\":%" PRIu64 "}", e->spread_us);
    }
    printf("],\"left_reason\":");
    put_json_string(st->left_reason);
    printf(",\"right_reason\":");
    put_json_string(st->right_reason);
    printf(",\"left_age_ms\":%" PRIu64 ",\"right_age_ms\":%" PRIu64 ",\"last_error_age_ms\":",
           st->left_age_ms, st->right_age_ms);
    if (st->last_error_age_ms == MSG_NO_AGE)
        printf("null");
    else
        printf("%" PRIu64, st->last_error_age_ms);
    printf(",\"next_seq\":%" PRIu64 ",\"waiting\":", st->next_seq);
    put_json_string(st->waiting);
    printf(",\"done\":[");
    for (unsigned i = 0; i < st->n_done; i++)
        printf("%s%" PRIu64, i ? "," : "", st->done[i]);
    printf("]}\n");
}

/* Fetches the daemon's status over an observer session. */
static int fetch_status(session *s, const char *path, msg_status *st)
{
    int rc = session_connect(s, path, SESSION_CONNECT_TIMEOUT_MS);
    msg_welcome w;
    if (rc == 0) rc = session_hello(s, MSG_HELLO_OBSERVER, -1, &w);
    uint8_t buf[SESSION_MSG_MAX];
    int64_t deadline = session_deadline(SESSION_REQUEST_TIMEOUT_MS);
    msg_status_req req = {.id = 1};
    if (rc == 0) {
        int n = msg_encode_status_req(buf, sizeof buf, &req);
        rc = n < 0 ? session_fail(s, RINGD_EPROTO, "status: cannot encode STATUS_REQ")
                   : session_send(s, buf, (size_t)n, -1, deadline, "status");
    }
    msg_header h;
    if (rc == 0) rc = session_expect(s, MSG_STATUS, &h, buf, deadline, "status");
    if (rc == 0 && msg_decode_status(&h, buf, st) != MSG_OK)
        rc = session_fail(s, RINGD_EPROTO,
                          "status: ringd at %s sent a malformed STATUS message "
                          "(are ringd and ringctl the same version?)",
                          s->path);
    if (rc == 0 && st->id != req.id)
        rc = session_fail(s, RINGD_EPROTO,
                          "status: ringd at %s answered request %" PRIu64 " instead of %" PRIu64,
                          s->path, st->id, req.id);
    session_close(s);
    return rc;
}

static int cmd_status(const char *path, int argc, char **argv)
{
    static const struct option opts[] = {{"json", no_argument, NULL, 'j'},
                                         {"socket", required_argument, NULL, 's'},
                                         {"help", no_argument, NULL, 'h'},
                                         {0}};
    int json = 0, ch;
    optind = 0;
    while ((ch = getopt_long(argc, argv, "+js:h", opts, NULL)) != -1) {
        switch (ch) {
        case 'j':
            json = 1;
            break;
        case 's':
            path = optarg;
            break;
        case 'h':
            fputs(usage_status, stdout);
            return EXIT_OK;
        default:
            return ringctl_usage_error("status", "invalid option for status");
        }
    }
    if (optind < argc)
        return ringctl_usage_error("status", "unexpected argument '%s'", argv[optind]);

    session s;
    msg_status st;
    if (fetch_status(&s, path, &st) < 0) {
        fprintf(stderr, "ringctl: %s\n", s.err);
        return EXIT_FAIL;
    }
    if (json)
        print_status_json(&st);
    else
        print_status(&st);
    return fflush(stdout) == 0 ? EXIT_OK : EXIT_FAIL;
}

/* ---- collectives ---- */

/* One collective command: which options it takes and their defaults. */
typedef struct {
    const char *name; /* the command, and the collective in messages */
    ringd_coll kind;
    const char *flags; /* the short options of coll_opts that it takes */
    uint64_t count, iters;
    const char *usage;
} command;

static const struct option coll_opts[] = {
    {"count", required_argument, NULL, 'n'},  {"dtype", required_argument, NULL, 't'},
    {"op", required_argument, NULL, 'o'},     {"root", required_argument, NULL, 'r'},
    {"iters", required_argument, NULL, 'i'},  {"warmup", required_argument, NULL, 'w'},
    {"copy", no_argument, NULL, 'c'},         {"quiet", no_argument, NULL, 'q'},
    {"socket", required_argument, NULL, 's'}, {"help", no_argument, NULL, 'h'}};
#define N_COLL_OPTS (sizeof coll_opts / sizeof coll_opts[0])

static const command commands[] = {
    {"allreduce", RINGD_COLL_ALLREDUCE, "ntoiwcqsh", 1048576, 5, usage_allreduce},
    {"broadcast", RINGD_COLL_BROADCAST, "ntriwcqsh", 1048576, 5, usage_broadcast},
    {"allgather", RINGD_COLL_ALLGATHER, "ntiwcqsh", 1048576, 5, usage_allgather},
    {"reduce_scatter", RINGD_COLL_REDUCE_SCATTER, "ntoiwcqsh", 1048576, 5, usage_reduce_scatter},
    {"barrier", RINGD_COLL_BARRIER, "iwqsh", 0, 100, usage_barrier},
};

static int is_int(ringd_dtype t)
{
    return t == RINGD_INT8 || t == RINGD_UINT8 || t == RINGD_INT32 || t == RINGD_INT64;
}

static int per_rank(ringd_coll kind)
{
    return kind == RINGD_COLL_ALLGATHER || kind == RINGD_COLL_REDUCE_SCATTER;
}

static int has_op(ringd_coll kind)
{
    return kind == RINGD_COLL_ALLREDUCE || kind == RINGD_COLL_REDUCE_SCATTER;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    const command *cmd;
    const char *path;
    uint64_t count, iters, warmup;
    ringd_dtype dtype;
    ringd_op op;
    int root;
    int copy, quiet;
} bench_opts;

static void print_ms(const char *label, double ms)
{
    printf(ms >= 10 ? "%s %.1f ms" : ms >= 1 ? "%s %.2f ms" : "%s %.3f ms", label, ms);
}

/* Prints the line of a success: what ran, the median time and, except for a
 * barrier, the bandwidths as nccl-tests computes them. algbw is the bytes of
 * the whole collective (n x count elements for allgather and reduce_scatter)
 * over the time; busbw scales it to what each link carries. */
static void print_result(const bench_opts *o, int n, double med)
{
    ringd_coll kind = o->cmd->kind;
    printf("%s", o->cmd->name);
    if (kind != RINGD_COLL_BARRIER)
        printf(" %" PRIu64 " x %s", o->count, ringd_dtype_name(o->dtype));
    if (has_op(kind)) printf(" %s", ringd_op_name(o->op));
    if (per_rank(kind)) printf(" per rank");
    if (kind == RINGD_COLL_BROADCAST) printf(" from rank %d", o->root);
    printf(", %d rank%s: ok, ", n, n == 1 ? "" : "s");
    print_ms("median", med);
    if (kind != RINGD_COLL_BARRIER) {
        double bytes = (double)o->count * (double)ringd_dtype_size(o->dtype);
        if (per_rank(kind)) bytes *= n;
        double factor = kind == RINGD_COLL_ALLREDUCE   ? 2.0 * (n - 1) / n
                        : kind == RINGD_COLL_BROADCAST ? 1.0
                                                       : (double)(n - 1) / n;
        double algbw = med > 0 ? bytes / (med / 1e3) / 1e6 : 0;
        printf(", algbw %.1f MB/s, busbw %.1f MB/s", algbw, algbw * factor);
    }
    putchar('\n');
}

/* Runs the warm-up and timed iterations of o's collective in place on buf,
 * which starts each one as init and must end as want (see check.h); returns
 * an exit status. */
static int run_iterations(ringd_client *c, const bench_opts *o, const check_case *k, void *buf,
                          const void *init, const void *want, double *times)
{
    const char *name = o->cmd->name;
    size_t esize = ringd_dtype_size(o->dtype), init_bytes = check_buf_len(k) * esize;
    size_t n_want = check_want_len(k);
    uint64_t total = o->warmup + o->iters;
    /* wmean weighs each rank by rank + 1, which check.c expects. */
    ringd_collective coll = {.kind = o->cmd->kind,
                             .buf = buf,
                             .count = o->count,
                             .dtype = o->dtype,
                             .op = o->op,
                             .root = o->root,
                             .weight = k->rank + 1.0};
    for (uint64_t it = 0; it < total; it++) {
        if (init_bytes) memcpy(buf, init, init_bytes);
        double t0 = now_ms();
        int rc = ringd_run(c, &coll);
        double t = now_ms() - t0;
        if (rc < 0) {
            fprintf(stderr, "ringctl: %s %" PRIu64 " of %" PRIu64 " failed: %s (%s)\n", name,
                    it + 1, total, ringd_last_error(c), ringd_errname(rc));
            return EXIT_FAIL;
        }
        if (it >= o->warmup) times[it - o->warmup] = t;
        size_t bad = check_first_wrong(o->dtype, buf, want, n_want);
        if (bad < n_want) {
            char e[64], g[64], from[96] = "";
            check_show(o->dtype, want, bad, e, sizeof e);
            check_show(o->dtype, buf, bad, g, sizeof g);
            if (k->kind == RINGD_COLL_ALLGATHER)
                snprintf(from, sizeof from, " (element %zu of rank %zu's block)", bad % k->count,
                         bad / k->count);
            fprintf(stderr,
                    "ringctl: %s %" PRIu64 " of %" PRIu64
                    ": wrong result at index %zu%s: expected %s, got %s (rank %d of %d)\n",
                    name, it + 1, total, bad, from, e, g, k->rank, k->n);
            return EXIT_FAIL;
        }
    }
    qsort(times, o->iters, sizeof *times, cmp_double);
    double med =
        o->iters % 2 ? times[o->iters / 2] : (times[o->iters / 2 - 1] + times[o->iters / 2]) / 2;
    if (!o->quiet) print_result(o, k->n, med);
    return fflush(stdout) == 0 ? EXIT_OK : EXIT_FAIL;
}

/* Joins the ring, prepares the buffers of o's collective and runs it. */
static int bench(const bench_opts *o)
{
    ringd_client *c;
    if (ringd_connect(o->path, &c) < 0) {
        fprintf(stderr, "ringctl: %s\n", ringd_last_error(NULL));
        return EXIT_FAIL;
    }
    check_case k = {.kind = o->cmd->kind,
                    .dtype = o->dtype,
                    .op = o->op,
                    .root = o->root,
                    .rank = ringd_rank(c),
                    .n = ringd_size(c),
                    .count = o->count};
    size_t esize = ringd_dtype_size(o->dtype);
    int status = EXIT_FAIL;
    void *buf = NULL, *init = NULL, *want = NULL;
    double *times = NULL;
    if (o->root >= k.n) {
        status = ringctl_usage_error(o->cmd->name, "--root %d: the ring has %d rank%s (0..%d)",
                                     o->root, k.n, k.n == 1 ? "" : "s", k.n - 1);
        goto out;
    }
    if (per_rank(k.kind) && o->count > SIZE_MAX / esize / (size_t)k.n) {
        fprintf(stderr,
                "ringctl: %s: %" PRIu64 " x %s per rank x %d ranks does not fit in memory\n",
                o->cmd->name, o->count, ringd_dtype_name(o->dtype), k.n);
        goto out;
    }
    size_t bytes = check_buf_len(&k) * esize, want_bytes = check_want_len(&k) * esize;
    init = bytes ? malloc(bytes) : NULL;
    want = want_bytes ? malloc(want_bytes) : NULL;
    times = malloc(o->iters * sizeof *times);
    if ((bytes && (!init || !want)) || !times) {
        fprintf(stderr, "ringctl: out of memory for %zu-byte buffers\n", bytes);
        goto out;
    }
    if (bytes) {
        buf = o->copy ? malloc(bytes) : ringd_alloc(c, bytes);
        if (!buf) {
            fprintf(stderr, "ringctl: cannot allocate %zu bytes: %s\n", bytes,
                    o->copy ? "out of memory" : ringd_last_error(c));
            goto out;
        }
    }
    check_fill_case(&k, init, want);
    status = run_iterations(c, o, &k, buf, init, want, times);
out:
    if (o->copy)
        free(buf);
    else
        ringd_free(c, buf);
    free(init);
    free(want);
    free(times);
    ringd_close(c);
    return status;
}

/* The getopt tables of cmd: the entries of coll_opts whose letter is in
 * cmd->flags, and their short form ("+n:t:...") in shorts. */
static void command_options(const command *cmd, struct option *longs, char *shorts)
{
    size_t n = 0;
    /* '+': stop at the first argument; ':': report a missing value as ':'. */
    *shorts++ = '+';
    *shorts++ = ':';
    for (size_t i = 0; i < N_COLL_OPTS; i++) {
        if (!strchr(cmd->flags, coll_opts[i].val)) continue;
        longs[n++] = coll_opts[i];
        *shorts++ = (char)coll_opts[i].val;
        if (coll_opts[i].has_arg == required_argument) *shorts++ = ':';
    }
    *shorts = '\0';
    longs[n] = (struct option){0};
}

/* Parses the options of cmd into o; returns -1 to go on, else an exit status. */
static int parse_collective(const command *cmd, int argc, char **argv, bench_opts *o)
{
    struct option longs[N_COLL_OPTS + 1];
    char shorts[2 * N_COLL_OPTS + 3];
    const char *name = cmd->name;
    uint64_t u;
    int ch, v;
    command_options(cmd, longs, shorts);
    optind = 0;
    opterr = 0; /* the messages below name the command */
    while ((ch = getopt_long(argc, argv, shorts, longs, NULL)) != -1) {
        switch (ch) {
        case 'n':
            if (parse_u64(optarg, SIZE_MAX, &o->count) < 0)
                return ringctl_usage_error(name, "--count: expected a number of elements, got '%s'",
                                           optarg);
            break;
        case 't':
            if ((v = ringd_dtype_parse(optarg)) < 0)
                return ringctl_usage_error(name, "--dtype: unknown type '%s'", optarg);
            o->dtype = (ringd_dtype)v;
            break;
        case 'o':
            if ((v = ringd_op_parse(optarg)) < 0)
                return ringctl_usage_error(name, "--op: unknown operator '%s'", optarg);
            o->op = (ringd_op)v;
            break;
        case 'r':
            if (parse_u64(optarg, INT32_MAX, &u) < 0)
                return ringctl_usage_error(name, "--root: expected a rank (0 or more), got '%s'",
                                           optarg);
            o->root = (int)u;
            break;
        case 'i':
            if (parse_u64(optarg, 1000000, &o->iters) < 0 || o->iters == 0)
                return ringctl_usage_error(name, "--iters: expected 1 to 1000000, got '%s'",
                                           optarg);
            break;
        case 'w':
            if (parse_u64(optarg, 1000000, &o->warmup) < 0)
                return ringctl_usage_error(name, "--warmup: expected 0 to 1000000, got '%s'",
                                           optarg);
            break;
        case 'c':
            o->copy = 1;
            break;
        case 'q':
            o->quiet = 1;
            break;
        case 's':
            o->path = optarg;
            break;
        case 'h':
            fputs(cmd->usage, stdout);
            return EXIT_OK;
        case ':':
            return ringctl_usage_error(name, "%s needs a value", argv[optind - 1]);
        default:
            if (optopt) return ringctl_usage_error(name, "%s does not take -%c", name, optopt);
            return ringctl_usage_error(name, "%s does not take %.*s", name,
                                       (int)strcspn(argv[optind - 1], "="), argv[optind - 1]);
        }
    }
    if (optind < argc) return ringctl_usage_error(name, "unexpected argument '%s'", argv[optind]);
    if ((o->op == RINGD_MEAN || o->op == RINGD_WMEAN) && is_int(o->dtype))
        return ringctl_usage_error(name, "--op %s needs a float dtype, got %s",
                                   ringd_op_name(o->op), ringd_dtype_name(o->dtype));
    if (o->count > SIZE_MAX / ringd_dtype_size(o->dtype))
        return ringctl_usage_error(name, "--count %" PRIu64 " x %s does not fit in memory",
                                   o->count, ringd_dtype_name(o->dtype));
    return -1;
}

static int cmd_collective(const command *cmd, const char *path, int argc, char **argv)
{
    bench_opts o = {.cmd = cmd,
                    .path = path,
                    .count = cmd->count,
                    .iters = cmd->iters,
                    .warmup = 1,
                    .dtype = RINGD_FLOAT32,
                    .op = RINGD_SUM};
    int status = parse_collective(cmd, argc, argv, &o);
    return status >= 0 ? status : bench(&o);
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
    if (strcmp(cmd, "status") == 0) return cmd_status(path, argc, argv);
    if (strcmp(cmd, "checkpoints") == 0) return ckpt_command(argc, argv);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(cmd, commands[i].name) == 0)
            return cmd_collective(&commands[i], path, argc, argv);
    if (strcmp(cmd, "help") == 0) {
        fputs(usage_main, stdout);
        return EXIT_OK;
    }
    return ringctl_usage_error(NULL, "unknown command '%s' (%s)", cmd, COMMAND_NAMES);
}
