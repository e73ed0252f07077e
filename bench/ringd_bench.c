/*
 * ringd_bench.c - allreduce time and bandwidth over a sweep of sizes, in the
 * style of nccl-tests.
 *
 *   ringd_bench [--socket PATH] [--min SIZE] [--max SIZE] [--factor F]
 *               [--dtype T] [--op O] [--warmup W] [--iters N] [--budget SEC]
 *               [--copy] [--json] [--goodput MBPS]
 *
 * One process per rank, every rank with the same options (bench/run.sh
 * starts one next to each host's ringd). For each size S = min, min*F, ...
 * up to max, every rank runs W untimed and then n timed allreduces of S
 * bytes. Before each one it refills its buffer with its input, after each
 * one it checks every element of the result: inputs are the small integers
 * of client/check.c, so every result is exact and known to every rank.
 *
 * n is --iters, fewer when that many would take more than --budget seconds
 * (never fewer than 3): the ranks agree on n from the slowest rank's last
 * warm-up time, shared by an allreduce (MAX), which also synchronises them
 * before the timed runs. After the timed runs a second allreduce (MAX)
 * gives every rank each run's time on the slowest rank and the number of
 * wrong results on any rank; the time of a run is that slowest rank's, and
 * the time reported for S is the median over the runs (and the minimum).
 * Each timed run starts right after an 8-byte allreduce (untimed), so that
 * the ranks start together whatever their refills and checks took.
 *
 *   algbw = S / time, busbw = algbw * 2(N-1)/N (the bytes each link carries
 *   per second in a ring allreduce), in MB/s = 1e6 B/s. With --goodput, the
 *   TCP goodput of one link (iperf3), the table adds busbw / goodput.
 *
 * Rank 0 prints a table, or with --json one JSON object per size, and at
 * the end the total bytes reduced (warm-up and timed runs, not the small
 * synchronising allreduces), from which bench/run.sh computes CPU per GB.
 * Buffers come from ringd_alloc() (zero copy) unless --copy asks for
 * malloc'd ones, which libringd copies through its staging region.
 *
 * Exit status: 0 all results right, 1 failure (a wrong result or an error;
 * message on stderr), 2 usage error.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "client/check.h"
#include "ringd.h"

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

#define MIN_RUNS 3
#define MAX_RUNS 100000

static const char usage[] =
    "Usage: ringd_bench [OPTIONS]\n"
    "\n"
    "Runs as one rank: sweeps allreduce sizes, times and checks every run; rank 0\n"
    "prints median time, algbw and busbw per size. Start it on every rank with\n"
    "the same options.\n"
    "\n"
    "Options:\n"
    "  -s, --socket PATH  the daemon's Unix socket (default $RINGD_SOCKET, else\n"
    "                     libringd's default)\n"
    "  -b, --min SIZE     smallest buffer in bytes (default 8); suffixes K, M, G\n"
    "                     (and KiB, MiB, GiB) are powers of 1024\n"
    "  -e, --max SIZE     largest buffer (default 256M)\n"
    "  -f, --factor F     size multiplier between steps, >= 2 (default 2)\n"
    "  -t, --dtype T      element type (default float32)\n"
    "  -o, --op O         sum, min, max, prod, mean (default sum)\n"
    "  -w, --warmup W     untimed runs per size, >= 1 (default 2)\n"
    "  -n, --iters N      timed runs per size, at most (default 20)\n"
    "  -B, --budget SEC   fewer timed runs when N would take longer (default 5;\n"
    "                     never fewer than 3)\n"
    "  -c, --copy         malloc'd buffers (copied by libringd) instead of\n"
    "                     ringd_alloc'd shared memory\n"
    "  -j, --json         one JSON object per size instead of the table\n"
    "  -g, --goodput MBPS TCP goodput of one link in MB/s: adds busbw/goodput\n"
    "  -E, --each         also each timed run's time (slowest rank), in run order,\n"
    "                     on a line \"# each_us SIZE: T1 T2 ...\" before the row\n"
    "  -h, --help         show this help\n";

typedef struct {
    const char *socket;
    uint64_t min, max, factor, warmup, iters;
    double budget, goodput;
    ringd_dtype dtype;
    ringd_op op;
    int copy, json, each;
} options;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Parses a byte size: digits with an optional K, M, G (KiB, MiB, GiB). */
static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    if (!*s || *s == '-') return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s) return -1;
    unsigned shift = 0;
    if (*end == 'K' || *end == 'k')
        shift = 10;
    else if (*end == 'M')
        shift = 20;
    else if (*end == 'G')
        shift = 30;
    if (shift) {
        end++;
        if (strcmp(end, "iB") == 0) end += 2;
    }
    if (*end || v > (UINT64_MAX >> shift)) return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

static int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end;
    errno = 0;
    if (!*s || *s == '-') return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_double(const char *s, double lo, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo)) return -1;
    *out = v;
    return 0;
}

/* The state of one rank. `sync` is a small shared buffer of doubles for the
 * allreduces that synchronise the ranks and gather times. */
typedef struct {
    const options *o;
    ringd_client *c;
    int rank, n;
    size_t esize;
    void *buf, *in, *want;
    double *sync, *times;
    uint64_t bytes_reduced, runs_done;
    double cpu_in_calls; /* this rank's CPU s inside ringd_allreduce() of the runs */
    int filled; /* buf already holds this rank's input */
} bench;

static int fail_rc(bench *b, int rc, const char *what, uint64_t bytes)
{
    fprintf(stderr, "ringd_bench: rank %d: %s of %" PRIu64 " bytes failed: %s (%s)\n", b->rank,
            what, bytes, ringd_last_error(b->c), ringd_errname(rc));
    return EXIT_FAIL;
}

/* One checked allreduce of count elements; *secs is its time, *wrong counts
 * a wrong result. */
/* This process's CPU time so far (user + system), for the client's share
 * of ringd's CPU: what libringd spends inside the calls, not the refill and
 * check around them. */
static double cpu_s(void)
{
    struct rusage u;
    if (getrusage(RUSAGE_SELF, &u) < 0) return 0;
    return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

static int run_once(bench *b, size_t count, double *secs, unsigned *wrong)
{
    size_t bytes = count * b->esize;
    if (!b->filled) memcpy(b->buf, b->in, bytes);
    b->filled = 0;
    double c0 = cpu_s(), t0 = now_s();
    int rc = ringd_allreduce(b->c, b->buf, count, b->o->dtype, b->o->op);
    *secs = now_s() - t0;
    b->cpu_in_calls += cpu_s() - c0;
    if (rc < 0) return fail_rc(b, rc, "allreduce", bytes);
    b->bytes_reduced += bytes;
    b->runs_done++;
    size_t bad = check_first_wrong(b->o->dtype, b->buf, b->want, count);
    if (bad < count) {
        char e[64], g[64];
        check_show(b->o->dtype, b->want, bad, e, sizeof e);
        check_show(b->o->dtype, b->buf, bad, g, sizeof g);
        fprintf(stderr,
                "ringd_bench: rank %d: allreduce of %zu bytes: wrong result at index %zu: "
                "expected %s, got %s\n",
                b->rank, bytes, bad, e, g);
        (*wrong)++;
    }
    return EXIT_OK;
}

/* Allreduces b->sync[0..k) with MAX across ranks. */
static int sync_max(bench *b, size_t k)
{
    int rc = ringd_allreduce(b->c, b->sync, k, RINGD_FLOAT64, RINGD_MAX);
    return rc < 0 ? fail_rc(b, rc, "synchronising allreduce", k * sizeof(double)) : EXIT_OK;
}

static void print_header(const bench *b)
{
    const options *o = b->o;
    printf("# ringd_bench: %d ranks, %s %s, buffers %s\n", b->n, ringd_dtype_name(o->dtype),
           ringd_op_name(o->op),
           o->copy ? "malloc'd (copied by libringd)" : "from ringd_alloc (zero copy)");
    printf("# %" PRIu64 " warm-up + up to %" PRIu64 " timed runs per size (at least %d, about "
           "%.0f s); time: median over runs of the slowest rank\n",
           o->warmup, o->iters, MIN_RUNS, o->budget);
    printf("# busbw = algbw * 2(n-1)/n; MB/s = 1e6 B/s");
    if (o->goodput > 0) printf("; goodput of one link %.1f MB/s", o->goodput);
    printf("\n#%13s %12s %5s %12s %12s %11s %11s %8s %6s\n", "bytes", "count", "runs", "median_us",
           "min_us", "algbw_MB/s", "busbw_MB/s", "bus/good", "check");
}

static void print_row(const bench *b, uint64_t bytes, size_t count, uint64_t runs, double med,
                      double min, unsigned wrong)
{
    double algbw = (double)bytes / med / 1e6;
    double busbw = algbw * 2 * (b->n - 1) / b->n;
    double ratio = b->o->goodput > 0 ? busbw / b->o->goodput : 0;
    if (b->o->json) {
        printf("{\"bytes\":%" PRIu64 ",\"count\":%zu,\"dtype\":\"%s\",\"op\":\"%s\",\"ranks\":%d,"
               "\"runs\":%" PRIu64 ",\"median_us\":%.3f,\"min_us\":%.3f,\"algbw_MBps\":%.3f,"
               "\"busbw_MBps\":%.3f",
               bytes, count, ringd_dtype_name(b->o->dtype), ringd_op_name(b->o->op), b->n, runs,
               med * 1e6, min * 1e6, algbw, busbw);
        if (b->o->goodput > 0) printf(",\"bus_over_goodput\":%.4f", ratio);
        printf(",\"wrong\":%u}\n", wrong);
    } else {
        printf("%14" PRIu64 " %12zu %5" PRIu64 " %12.1f %12.1f %11.2f %11.2f", bytes, count, runs,
               med * 1e6, min * 1e6, algbw, busbw);
        if (b->o->goodput > 0)
            printf(" %8.3f", ratio);
        else
            printf(" %8s", "-");
        printf(" %6s\n", wrong ? "WRONG" : "ok");
    }
    fflush(stdout);
}

/* Runs one size on every rank; returns an exit status (EXIT_FAIL if any rank
 * saw a wrong result, so that all ranks stop at the same size). */
static int run_size(bench *b, uint64_t bytes)
{
    const options *o = b->o;
    size_t count = bytes / b->esize;
    unsigned wrong = 0;
    double t = 0;
    for (uint64_t i = 0; i < o->warmup; i++)
        if (run_once(b, count, &t, &wrong)) return EXIT_FAIL;

    /* Agree on the number of timed runs from the slowest warm-up. */
    b->sync[0] = t;
    if (sync_max(b, 1)) return EXIT_FAIL;
    uint64_t runs = o->iters;
    if (b->sync[0] > 0 && o->budget / b->sync[0] < (double)runs)
        runs = (uint64_t)(o->budget / b->sync[0]);
    if (runs < MIN_RUNS) runs = MIN_RUNS;

    for (uint64_t i = 0; i < runs; i++) {
        /* Refilling and checking take each rank a different time: line the
         * ranks up again, or the slowest rank's lag would count as ringd's. */
        memcpy(b->buf, b->in, count * b->esize);
        b->filled = 1;
        b->sync[0] = 0;
        if (sync_max(b, 1)) return EXIT_FAIL;
        if (run_once(b, count, &b->times[i], &wrong)) return EXIT_FAIL;
    }

    /* Each run's time on the slowest rank, and whether any rank was wrong. */
    memcpy(b->sync, b->times, runs * sizeof(double));
    b->sync[runs] = wrong;
    if (sync_max(b, runs + 1)) return EXIT_FAIL;
    unsigned any_wrong = (unsigned)b->sync[runs];
    /* Slow runs among fast ones (stalls) show here, not in the median. */
    if (o->each && b->rank == 0) {
        printf("# each_us %" PRIu64 ":", bytes);
        for (uint64_t i = 0; i < runs; i++)
            printf(" %.1f", b->sync[i] * 1e6);
        printf("\n");
    }
    qsort(b->sync, runs, sizeof(double), cmp_double);
    double med = runs % 2 ? b->sync[runs / 2] : (b->sync[runs / 2 - 1] + b->sync[runs / 2]) / 2;
    if (b->rank == 0) print_row(b, bytes, count, runs, med, b->sync[0], any_wrong);
    return any_wrong ? EXIT_FAIL : EXIT_OK;
}

static int run(const options *o)
{
    bench b = {.o = o, .esize = ringd_dtype_size(o->dtype)};
    if (ringd_connect(o->socket, &b.c) < 0) {
        fprintf(stderr, "ringd_bench: %s\n", ringd_last_error(NULL));
        return EXIT_FAIL;
    }
    b.rank = ringd_rank(b.c);
    b.n = ringd_size(b.c);
    size_t maxb = (size_t)(o->max / b.esize * b.esize), maxcount = maxb / b.esize;
    int status = EXIT_FAIL;
    b.in = malloc(maxb);
    b.want = malloc(maxb);
    b.buf = o->copy ? malloc(maxb) : ringd_alloc(b.c, maxb);
    b.times = malloc(MAX_RUNS * sizeof(double));
    b.sync = ringd_alloc(b.c, (MAX_RUNS + 1) * sizeof(double));
    if (!b.in || !b.want || !b.buf || !b.times || !b.sync) {
        fprintf(stderr, "ringd_bench: cannot allocate buffers of %zu bytes: %s\n", maxb,
                ringd_last_error(b.c)[0] ? ringd_last_error(b.c) : "out of memory");
        goto out;
    }
    /* Rank r's element i depends on (r, i) only: one fill serves every size. */
    check_fill(o->dtype, o->op, b.rank, b.n, maxcount, b.in, b.want);

    if (b.rank == 0 && !o->json) print_header(&b);
    double t0 = now_s();
    status = EXIT_OK;
    for (uint64_t bytes = o->min; bytes <= o->max && status == EXIT_OK; bytes *= o->factor) {
        uint64_t sz = bytes / b.esize * b.esize;
        if (sz > 0) status = run_size(&b, sz);
        if (bytes > UINT64_MAX / o->factor) break;
    }
    if (b.rank == 0 && status == EXIT_OK) {
        double el = now_s() - t0;
        if (o->json)
            printf("{\"total_bytes_reduced\":%" PRIu64 ",\"allreduces\":%" PRIu64
                   ",\"seconds\":%.3f}\n",
                   b.bytes_reduced, b.runs_done, el);
        else
            printf("# total: %" PRIu64 " bytes reduced in %" PRIu64 " allreduces, %.1f s\n",
                   b.bytes_reduced, b.runs_done, el);
    }
    /* Every rank: bench/run.sh adds them up. */
    if (status == EXIT_OK)
        fprintf(stderr, "# client CPU s in the allreduce calls: %.3f\n", b.cpu_in_calls);
out:
    if (o->copy)
        free(b.buf);
    else
        ringd_free(b.c, b.buf);
    ringd_free(b.c, b.sync);
    free(b.in);
    free(b.want);
    free(b.times);
    ringd_close(b.c);
    if (fflush(stdout) != 0) status = EXIT_FAIL;
    return status;
}

static int usage_error(const char *msg, const char *arg)
{
    fprintf(stderr, "ringd_bench: %s '%s'\nTry 'ringd_bench --help'.\n", msg, arg);
    return EXIT_USAGE;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"socket", required_argument, NULL, 's'}, {"min", required_argument, NULL, 'b'},
        {"max", required_argument, NULL, 'e'},    {"factor", required_argument, NULL, 'f'},
        {"dtype", required_argument, NULL, 't'},  {"op", required_argument, NULL, 'o'},
        {"warmup", required_argument, NULL, 'w'}, {"iters", required_argument, NULL, 'n'},
        {"budget", required_argument, NULL, 'B'}, {"copy", no_argument, NULL, 'c'},
        {"json", no_argument, NULL, 'j'},         {"goodput", required_argument, NULL, 'g'},
        {"each", no_argument, NULL, 'E'},
        {"help", no_argument, NULL, 'h'},         {0}};
    options o = {.min = 8,
                 .max = 256u << 20,
                 .factor = 2,
                 .warmup = 2,
                 .iters = 20,
                 .budget = 5,
                 .dtype = RINGD_FLOAT32,
                 .op = RINGD_SUM};
    int ch, v;
    while ((ch = getopt_long(argc, argv, "s:b:e:f:t:o:w:n:B:cjEg:h", opts, NULL)) != -1) {
        switch (ch) {
        case 's':
            o.socket = optarg;
            break;
        case 'b':
            if (parse_size(optarg, &o.min) < 0 || o.min == 0)
                return usage_error("--min: expected a size of at least 1 byte, got", optarg);
            break;
        case 'e':
            if (parse_size(optarg, &o.max) < 0 || o.max == 0 || o.max > SIZE_MAX / 2)
                return usage_error("--max: expected a size, got", optarg);
            break;
        case 'f':
            if (parse_u64(optarg, 2, 1024, &o.factor) < 0)
                return usage_error("--factor: expected 2 to 1024, got", optarg);
            break;
        case 't':
            if ((v = ringd_dtype_parse(optarg)) < 0)
                return usage_error("--dtype: unknown type", optarg);
            o.dtype = (ringd_dtype)v;
            break;
        case 'o':
            if ((v = ringd_op_parse(optarg)) < 0)
                return usage_error("--op: unknown operator", optarg);
            o.op = (ringd_op)v;
            break;
        case 'w':
            if (parse_u64(optarg, 1, 1000, &o.warmup) < 0)
                return usage_error("--warmup: expected 1 to 1000, got", optarg);
            break;
        case 'n':
            if (parse_u64(optarg, MIN_RUNS, MAX_RUNS, &o.iters) < 0)
                return usage_error("--iters: expected 3 to 100000, got", optarg);
            break;
        case 'B':
            if (parse_double(optarg, 0, &o.budget) < 0)
                return usage_error("--budget: expected seconds, got", optarg);
            break;
        case 'c':
            o.copy = 1;
            break;
        case 'E':
            o.each = 1;
            break;
        case 'j':
            o.json = 1;
            break;
        case 'g':
            if (parse_double(optarg, 0, &o.goodput) < 0)
                return usage_error("--goodput: expected MB/s, got", optarg);
            break;
        case 'h':
            fputs(usage, stdout);
            return EXIT_OK;
        default:
            fputs("Try 'ringd_bench --help'.\n", stderr);
            return EXIT_USAGE;
        }
    }
    if (optind < argc) return usage_error("unexpected argument", argv[optind]);
    if (o.min > o.max) return usage_error("--min is larger than --max", "");
    if (o.op == RINGD_MEAN && ringd_dtype_size(o.dtype) != 0 &&
        (o.dtype == RINGD_INT8 || o.dtype == RINGD_UINT8 || o.dtype == RINGD_INT32 ||
         o.dtype == RINGD_INT64))
        return usage_error("--op mean needs a float dtype, got", ringd_dtype_name(o.dtype));
    if (o.max < ringd_dtype_size(o.dtype))
        return usage_error("--max is smaller than one element of", ringd_dtype_name(o.dtype));
    return run(&o);
}
