/*
 * ringctl.c - command-line tool of ringd.
 *
 *   ringctl [--socket PATH] status [--json]
 *   ringctl [--socket PATH] allreduce [--count N] [--dtype T] [--op O] ...
 *
 * `status` opens its own observer session (it is not a rank) and prints the
 * daemon's MSG_STATUS. `allreduce` is a rank like any training process: it
 * uses the public API, checks every result against values computed locally,
 * and reports the median time and bandwidth.
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
#include "ringd.h"
#include "session.h"

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

static const char usage_main[] =
    "Usage: ringctl [--socket PATH] COMMAND [OPTIONS]\n"
    "\n"
    "Talks to the ringd daemon of this host.\n"
    "\n"
    "Commands:\n"
    "  status      show the state of the ring as this host's daemon sees it\n"
    "  allreduce   run and verify allreduces as one rank; print the bandwidth\n"
    "\n"
    "Options:\n"
    "  -s, --socket PATH  the daemon's Unix socket (default: $RINGD_SOCKET, else\n"
    "                     " SESSION_DEFAULT_SOCKET ")\n"
    "  -h, --help         show this help; `ringctl COMMAND --help` for a command\n"
    "\n"
    "Exit status: 0 success, 1 failure, 2 usage error.\n";

static const char usage_status[] =
    "Usage: ringctl [--socket PATH] status [--json]\n"
    "\n"
    "Shows this host's place in the ring, the state of its links to the left and\n"
    "right neighbours, its clients, counters and the last collective failure.\n"
    "Connects as an observer: it takes no rank.\n"
    "\n"
    "Options:\n"
    "  -j, --json         print one JSON object with every field instead\n"
    "  -s, --socket PATH  the daemon's Unix socket (as before the command)\n"
    "  -h, --help         show this help\n";

static const char usage_allreduce[] =
    "Usage: ringctl [--socket PATH] allreduce [OPTIONS]\n"
    "\n"
    "Joins the ring as one rank (local rank from $RINGD_LOCAL_RANK or $LOCAL_RANK)\n"
    "and runs W warm-up and K timed allreduces. Every rank must run the same\n"
    "command. Each result is checked against the value computed locally for all\n"
    "ranks; on success one line gives the median time, the algorithm bandwidth\n"
    "(bytes / time) and the bus bandwidth (algbw * 2(n-1)/n), in MB/s = 1e6 B/s.\n"
    "\n"
    "Options:\n"
    "  -n, --count N      elements per allreduce (default 1048576)\n"
    "  -t, --dtype T      int8, uint8, int32, int64, float16, bfloat16, float32,\n"
    "                     float64 (default float32)\n"
    "  -o, --op O         sum, mean, wmean (float types only; wmean weighs rank r by\n"
    "                     r + 1), min, max, prod (default sum)\n"
    "  -i, --iters K      timed iterations, >= 1 (default 5)\n"
    "  -w, --warmup W     untimed iterations first (default 1)\n"
    "  -c, --copy         use malloc'd memory (copied through the daemon's staging\n"
    "                     buffer) instead of ringd_alloc'd shared memory\n"
    "  -q, --quiet        print nothing on success\n"
    "  -s, --socket PATH  the daemon's Unix socket (as before the command)\n"
    "  -h, --help         show this help\n";

static int usage_error(const char *command, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int usage_error(const char *command, const char *fmt, ...)
{
    va_list ap;
    fputs("ringctl: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'ringctl%s%s --help'.\n", command ? " " : "", command ? command : "");
    return EXIT_USAGE;
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
    default:
        return "unknown";
    }
}

/* Prints s, with control characters from the daemon shown as '?'. */
static void put_text(const char *s)
{
    for (; *s; s++)
        putchar((unsigned char)*s < 0x20 || *s == 0x7f ? '?' : *s);
}

static void put_bytes(uint64_t n)
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

static void print_status(const msg_status *st)
{
    printf("cluster ");
    put_text(st->cluster);
    printf(", host ");
    put_text(st->host);
    printf(" (%" PRIu32 " of %" PRIu32 "), epoch %" PRIu32 "\n", st->host_index + 1, st->n_hosts,
           st->epoch);
    printf("left  ");
    put_text(st->left[0] ? st->left : "-");
    printf(": %s\nright ", link_state_name(st->left_state));
    put_text(st->right[0] ? st->right : "-");
    printf(": %s\n", link_state_name(st->right_state));
    printf("clients %" PRIu32 "/%" PRIu32 ", collectives %" PRIu64 " done, %" PRIu64 " failed\n",
           st->clients, st->local_size, st->collectives_done, st->collectives_failed);
    printf("bytes in ");
    put_bytes(st->bytes_in);
    printf(", out ");
    put_bytes(st->bytes_out);
    printf(", uptime ");
    put_duration(st->uptime_ms);
    printf(", reconnects %" PRIu64 "\n", st->reconnects);
    printf("last error: ");
    put_text(st->last_error[0] ? st->last_error : "-");
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
    printf("}\n");
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
            return usage_error("status", "invalid option for status");
        }
    }
    if (optind < argc) return usage_error("status", "unexpected argument '%s'", argv[optind]);

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

/* ---- allreduce ---- */

static int is_int(ringd_dtype t)
{
    return t == RINGD_INT8 || t == RINGD_UINT8 || t == RINGD_INT32 || t == RINGD_INT64;
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
    const char *path;
    uint64_t count, iters, warmup;
    ringd_dtype dtype;
    ringd_op op;
    int copy, quiet;
} bench_opts;

static void print_ms(const char *label, double ms)
{
    printf(ms >= 10 ? "%s %.1f ms" : ms >= 1 ? "%s %.2f ms" : "%s %.3f ms", label, ms);
}

/* Runs the iterations on buf; returns an exit status. */
static int run_allreduce(ringd_client *c, const bench_opts *o, void *buf, void *in, void *want,
                         double *times)
{
    size_t esize = ringd_dtype_size(o->dtype), bytes = o->count * esize;
    uint64_t total = o->warmup + o->iters;
    for (uint64_t it = 0; it < total; it++) {
        if (bytes) memcpy(buf, in, bytes);
        double t0 = now_ms();
        /* wmean weighs each rank by rank + 1, which check.c expects. */
        ringd_collective coll = {.kind = RINGD_COLL_ALLREDUCE,
                                 .buf = buf,
                                 .count = o->count,
                                 .dtype = o->dtype,
                                 .op = o->op,
                                 .weight = ringd_rank(c) + 1.0};
        int rc = ringd_run(c, &coll);
        double t = now_ms() - t0;
        if (rc < 0) {
            fprintf(stderr, "ringctl: allreduce %" PRIu64 " of %" PRIu64 " failed: %s (%s)\n",
                    it + 1, total, ringd_last_error(c), ringd_errname(rc));
            return EXIT_FAIL;
        }
        if (it >= o->warmup) times[it - o->warmup] = t;
        size_t bad = check_first_wrong(o->dtype, buf, want, o->count);
        if (bad < o->count) {
            char e[64], g[64];
            check_show(o->dtype, want, bad, e, sizeof e);
            check_show(o->dtype, buf, bad, g, sizeof g);
            fprintf(stderr,
                    "ringctl: allreduce %" PRIu64 " of %" PRIu64
                    ": wrong result at index %zu: expected %s, got %s (rank %d of %d)\n",
                    it + 1, total, bad, e, g, ringd_rank(c), ringd_size(c));
            return EXIT_FAIL;
        }
    }
    qsort(times, o->iters, sizeof *times, cmp_double);
    double med =
        o->iters % 2 ? times[o->iters / 2] : (times[o->iters / 2 - 1] + times[o->iters / 2]) / 2;
    int n = ringd_size(c);
    double algbw = med > 0 ? (double)bytes / (med / 1e3) / 1e6 : 0;
    double busbw = algbw * 2 * (n - 1) / n;
    if (!o->quiet) {
        printf("allreduce %" PRIu64 " x %s %s, %d rank%s: ok, ", o->count,
               ringd_dtype_name(o->dtype), ringd_op_name(o->op), n, n == 1 ? "" : "s");
        print_ms("median", med);
        printf(", algbw %.1f MB/s, busbw %.1f MB/s\n", algbw, busbw);
    }
    return fflush(stdout) == 0 ? EXIT_OK : EXIT_FAIL;
}

static int bench(const bench_opts *o)
{
    ringd_client *c;
    if (ringd_connect(o->path, &c) < 0) {
        fprintf(stderr, "ringctl: %s\n", ringd_last_error(NULL));
        return EXIT_FAIL;
    }
    size_t esize = ringd_dtype_size(o->dtype), bytes = o->count * esize;
    int status = EXIT_FAIL;
    void *buf = NULL;
    void *in = bytes ? malloc(bytes) : NULL, *want = bytes ? malloc(bytes) : NULL;
    double *times = malloc(o->iters * sizeof *times);
    if ((bytes && (!in || !want)) || !times) {
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
    check_fill(o->dtype, o->op, ringd_rank(c), ringd_size(c), o->count, in, want);
    status = run_allreduce(c, o, buf, in, want, times);
out:
    if (o->copy)
        free(buf);
    else
        ringd_free(c, buf);
    free(in);
    free(want);
    free(times);
    ringd_close(c);
    return status;
}

static int cmd_allreduce(const char *path, int argc, char **argv)
{
    static const struct option opts[] = {
        {"count", required_argument, NULL, 'n'},  {"dtype", required_argument, NULL, 't'},
        {"op", required_argument, NULL, 'o'},     {"iters", required_argument, NULL, 'i'},
        {"warmup", required_argument, NULL, 'w'}, {"copy", no_argument, NULL, 'c'},
        {"quiet", no_argument, NULL, 'q'},        {"socket", required_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},         {0}};
    bench_opts o = {.path = path,
                    .count = 1048576,
                    .iters = 5,
                    .warmup = 1,
                    .dtype = RINGD_FLOAT32,
                    .op = RINGD_SUM};
    int ch, v;
    optind = 0;
    while ((ch = getopt_long(argc, argv, "+n:t:o:i:w:cqs:h", opts, NULL)) != -1) {
        switch (ch) {
        case 'n':
            if (parse_u64(optarg, SIZE_MAX, &o.count) < 0)
                return usage_error("allreduce", "--count: expected a number of elements, got '%s'",
                                   optarg);
            break;
        case 't':
            if ((v = ringd_dtype_parse(optarg)) < 0)
                return usage_error("allreduce", "--dtype: unknown type '%s'", optarg);
            o.dtype = (ringd_dtype)v;
            break;
        case 'o':
            if ((v = ringd_op_parse(optarg)) < 0)
                return usage_error("allreduce", "--op: unknown operator '%s'", optarg);
            o.op = (ringd_op)v;
            break;
        case 'i':
            if (parse_u64(optarg, 1000000, &o.iters) < 0 || o.iters == 0)
                return usage_error("allreduce", "--iters: expected 1 to 1000000, got '%s'", optarg);
            break;
        case 'w':
            if (parse_u64(optarg, 1000000, &o.warmup) < 0)
                return usage_error("allreduce", "--warmup: expected 0 to 1000000, got '%s'",
                                   optarg);
            break;
        case 'c':
            o.copy = 1;
            break;
        case 'q':
            o.quiet = 1;
            break;
        case 's':
            o.path = optarg;
            break;
        case 'h':
            fputs(usage_allreduce, stdout);
            return EXIT_OK;
        default:
            return usage_error("allreduce", "invalid option for allreduce");
        }
    }
    if (optind < argc) return usage_error("allreduce", "unexpected argument '%s'", argv[optind]);
    if ((o.op == RINGD_MEAN || o.op == RINGD_WMEAN) && is_int(o.dtype))
        return usage_error("allreduce", "--op %s needs a float dtype, got %s",
                           ringd_op_name(o.op), ringd_dtype_name(o.dtype));
    if (o.count > SIZE_MAX / ringd_dtype_size(o.dtype))
        return usage_error("allreduce", "--count %" PRIu64 " x %s does not fit in memory", o.count,
                           ringd_dtype_name(o.dtype));
    return bench(&o);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"socket", required_argument, NULL, 's'}, {"help", no_argument, NULL, 'h'}, {0}};
    const char *path = NULL;
    int ch;
    /* "+": stop at the command; its options are parsed by the command. */
    while ((ch = getopt_long(argc, argv, "+s:h", opts, NULL)) != -1) {
        switch (ch) {
        case 's':
            path = optarg;
            break;
        case 'h':
            fputs(usage_main, stdout);
            return EXIT_OK;
        default:
            return usage_error(NULL, "invalid option");
        }
    }
    if (optind >= argc) return usage_error(NULL, "missing command (status or allreduce)");
    if (!path) {
        path = getenv("RINGD_SOCKET");
        if (!path || !*path) path = SESSION_DEFAULT_SOCKET;
    }
    const char *cmd = argv[optind];
    argc -= optind;
    argv += optind;
    if (strcmp(cmd, "status") == 0) return cmd_status(path, argc, argv);
    if (strcmp(cmd, "allreduce") == 0) return cmd_allreduce(path, argc, argv);
    if (strcmp(cmd, "help") == 0) {
        fputs(usage_main, stdout);
        return EXIT_OK;
    }
    return usage_error(NULL, "unknown command '%s' (status or allreduce)", cmd);
}
