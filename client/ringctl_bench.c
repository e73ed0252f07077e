/*
 * ringctl_bench.c - ringctl's collective commands: allreduce, broadcast,
 * allgather, reduce_scatter and barrier, and gather, scatter and alltoall
 * (composed by libringd from allgather and broadcast; their data is the
 * check case of the collective they are built on, of which each rank takes
 * its part). Each makes this process a rank like
 * any training process: it joins the ring through the public API, runs W
 * warm-up and K timed collectives in place, checks every result against
 * values computed locally (check.h), and reports the median time and
 * bandwidth. One loop runs them all, parametrised by a `bench_cmd`.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "ringctl.h"
#include "ringctl_bench.h"
#include "ringd.h"

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

static const char usage_gather[] =
    "Usage: ringctl [--socket PATH] gather [OPTIONS]\n"
    "\n" HELP_JOIN "\n"
    "Each rank contributes N elements and the root gets every rank's, n x N in\n"
    "rank order; every element is checked on the root. ringd_gather() is an\n"
    "allgather into a staging buffer. On success one line gives the median time\n"
    "and the algorithm bandwidth (n x N x element size / time), in MB/s = 1e6 B/s.\n"
    "\n"
    "Options:\n"
    "  -n, --count N      elements per rank; the root gets n x N (default 1048576)\n" HELP_DTYPE
    "  -r, --root R       the rank that gets every rank's elements (default 0)\n"
    "  -i, --iters K      timed iterations, 1 to 1000000 (default 5)\n"
    "  -w, --warmup W     untimed iterations first, 0 to 1000000 (default 1)\n" HELP_END;

static const char usage_scatter[] =
    "Usage: ringctl [--socket PATH] scatter [OPTIONS]\n"
    "\n" HELP_JOIN "\n"
    "The root holds n x N elements and rank i gets its block i, N elements; every\n"
    "element is checked. ringd_scatter() is a broadcast of the root's n x N. On\n"
    "success one line gives the median time and the algorithm bandwidth (n x N x\n"
    "element size / time), in MB/s = 1e6 B/s.\n"
    "\n"
    "Options:\n"
    "  -n, --count N      elements each rank gets; the root holds n x N\n"
    "                     (default 1048576)\n" HELP_DTYPE
    "  -r, --root R       the rank whose elements are scattered (default 0)\n"
    "  -i, --iters K      timed iterations, 1 to 1000000 (default 5)\n"
    "  -w, --warmup W     untimed iterations first, 0 to 1000000 (default 1)\n" HELP_END;

static const char usage_alltoall[] =
    "Usage: ringctl [--socket PATH] alltoall [OPTIONS]\n"
    "\n" HELP_JOIN "\n"
    "Each rank holds n blocks of N elements, block j for rank j, and gets block i\n"
    "of every rank i's, n x N in rank order; every element is checked.\n"
    "ringd_alltoall() is an allgather of every rank's n x N: n times the memory\n"
    "and about twice the traffic of a true all-to-all. On success one line gives\n"
    "the median time and the algorithm bandwidth (n x N x element size / time),\n"
    "in MB/s = 1e6 B/s.\n"
    "\n"
    "Options:\n"
    "  -n, --count N      elements per block; each rank sends and gets n x N\n"
    "                     (default 1048576)\n" HELP_DTYPE
    "  -i, --iters K      timed iterations, 1 to 1000000 (default 5)\n"
    "  -w, --warmup W     untimed iterations first, 0 to 1000000 (default 1)\n" HELP_END;

/* The collectives libringd composes from the ring's (ringd_gather(), ...). */
typedef enum { COMPOSED_NONE, COMPOSED_GATHER, COMPOSED_SCATTER, COMPOSED_ALLTOALL } composed;

/* One collective command: which options it takes and their defaults. */
struct bench_cmd {
    const char *name;  /* the command, and the collective in messages */
    ringd_coll kind;   /* composed: the collective it is built on */
    const char *flags; /* the short options of coll_opts that it takes */
    uint64_t count, iters;
    const char *usage;
    composed composed;
};

static const struct option coll_opts[] = {
    {"count", required_argument, NULL, 'n'},  {"dtype", required_argument, NULL, 't'},
    {"op", required_argument, NULL, 'o'},     {"root", required_argument, NULL, 'r'},
    {"iters", required_argument, NULL, 'i'},  {"warmup", required_argument, NULL, 'w'},
    {"copy", no_argument, NULL, 'c'},         {"quiet", no_argument, NULL, 'q'},
    {"socket", required_argument, NULL, 's'}, {"help", no_argument, NULL, 'h'}};
#define N_COLL_OPTS (sizeof coll_opts / sizeof coll_opts[0])

static const bench_cmd commands[] = {
    {"allreduce", RINGD_COLL_ALLREDUCE, "ntoiwcqsh", 1048576, 5, usage_allreduce},
    {"broadcast", RINGD_COLL_BROADCAST, "ntriwcqsh", 1048576, 5, usage_broadcast},
    {"allgather", RINGD_COLL_ALLGATHER, "ntiwcqsh", 1048576, 5, usage_allgather},
    {"reduce_scatter", RINGD_COLL_REDUCE_SCATTER, "ntoiwcqsh", 1048576, 5, usage_reduce_scatter},
    {"barrier", RINGD_COLL_BARRIER, "iwqsh", 0, 100, usage_barrier},
    {"gather", RINGD_COLL_ALLGATHER, "ntriwqsh", 1048576, 5, usage_gather, COMPOSED_GATHER},
    {"scatter", RINGD_COLL_BROADCAST, "ntriwqsh", 1048576, 5, usage_scatter, COMPOSED_SCATTER},
    {"alltoall", RINGD_COLL_ALLGATHER, "ntiwqsh", 1048576, 5, usage_alltoall, COMPOSED_ALLTOALL},
};

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
    const bench_cmd *cmd;
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

/* Runs the warm-up and timed iterations of gather, scatter or alltoall
 * (o->cmd->composed). The check case of the collective each is built on
 * gives every rank's input and what the ranks hold together at the end: an
 * allgather of N per rank (gather), a broadcast of n x N (scatter), an
 * allgather of n x N per rank (alltoall); each rank takes its part of it.
 * Returns an exit status. */
static int run_composed(ringd_client *c, const bench_opts *o, check_case *k)
{
    const char *name = o->cmd->name;
    composed how = o->cmd->composed;
    size_t n = (size_t)k->n, me = (size_t)k->rank, esize = ringd_dtype_size(o->dtype);
    size_t count = o->count, blocks = how == COMPOSED_ALLTOALL ? n * n : n;
    if (count > SIZE_MAX / esize / blocks) {
        fprintf(stderr, "ringctl: %s: %" PRIu64 " x %s x %zu blocks does not fit in memory\n", name,
                o->count, ringd_dtype_name(o->dtype), blocks);
        return EXIT_FAIL;
    }
    k->count = how == COMPOSED_GATHER ? count : n * count;
    size_t all = check_buf_len(k) * esize, block = count * esize;
    size_t got_len = how == COMPOSED_SCATTER ? count : n * count;
    uint8_t *init = malloc(all ? all : 1), *want = malloc(all ? all : 1);
    uint8_t *mine = malloc(got_len ? got_len * esize : 1), *buf = malloc(got_len * esize + 1);
    double *times = malloc(o->iters * sizeof *times);
    int status = EXIT_FAIL;
    if (!init || !want || !mine || !buf || !times) {
        fprintf(stderr, "ringctl: out of memory for %zu-byte buffers\n", all);
        goto out;
    }
    check_fill_case(k, init, want);
    /* What this rank submits, and what it must get in buf (mine). */
    const void *input = how == COMPOSED_GATHER    ? init + me * block
                        : how == COMPOSED_SCATTER ? (me == (size_t)o->root ? init : NULL)
                                                  : init + me * n * block;
    if (how == COMPOSED_GATHER)
        memcpy(mine, want, n * block);
    else if (how == COMPOSED_SCATTER)
        memcpy(mine, want + me * block, block);
    else
        for (size_t j = 0; j < n; j++)
            memcpy(mine + j * block, want + (j * n + me) * block, block);
    int checked = how != COMPOSED_GATHER || me == (size_t)o->root;
    uint64_t total = o->warmup + o->iters;
    for (uint64_t it = 0; it < total; it++) {
        memset(buf, 0xee, got_len * esize);
        double t0 = now_ms();
        int rc = how == COMPOSED_GATHER
                     ? ringd_gather(c, input, checked ? buf : NULL, count, o->dtype, o->root)
                 : how == COMPOSED_SCATTER ? ringd_scatter(c, input, buf, count, o->dtype, o->root)
                                           : ringd_alltoall(c, input, buf, count, o->dtype);
        double t = now_ms() - t0;
        if (rc < 0) {
            fprintf(stderr, "ringctl: %s %" PRIu64 " of %" PRIu64 " failed: %s (%s)\n", name,
                    it + 1, total, ringd_last_error(c), ringd_errname(rc));
            goto out;
        }
        if (it >= o->warmup) times[it - o->warmup] = t;
        size_t bad = checked ? check_first_wrong(o->dtype, buf, mine, got_len) : got_len;
        if (bad < got_len) {
            char e[64], g[64], from[96] = "";
            check_show(o->dtype, mine, bad, e, sizeof e);
            check_show(o->dtype, buf, bad, g, sizeof g);
            if (how != COMPOSED_SCATTER)
                snprintf(from, sizeof from, " (element %zu of rank %zu's block)", bad % count,
                         bad / count);
            fprintf(stderr,
                    "ringctl: %s %" PRIu64 " of %" PRIu64
                    ": wrong result at index %zu%s: expected %s, got %s (rank %d of %d)\n",
                    name, it + 1, total, bad, from, e, g, k->rank, k->n);
            goto out;
        }
    }
    qsort(times, o->iters, sizeof *times, cmp_double);
    double med =
        o->iters % 2 ? times[o->iters / 2] : (times[o->iters / 2 - 1] + times[o->iters / 2]) / 2;
    if (!o->quiet) {
        printf("%s %" PRIu64 " x %s%s", name, o->count, ringd_dtype_name(o->dtype),
               how == COMPOSED_ALLTOALL ? " per block" : " per rank");
        if (how == COMPOSED_GATHER) printf(" to rank %d", o->root);
        if (how == COMPOSED_SCATTER) printf(" from rank %d", o->root);
        printf(", %d rank%s: ok, ", k->n, k->n == 1 ? "" : "s");
        print_ms("median", med);
        double algbw = med > 0 ? (double)(n * block) / (med / 1e3) / 1e6 : 0;
        printf(", algbw %.1f MB/s\n", algbw);
    }
    status = fflush(stdout) == 0 ? EXIT_OK : EXIT_FAIL;
out:
    free(init);
    free(want);
    free(mine);
    free(buf);
    free(times);
    return status;
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
    if (o->cmd->composed != COMPOSED_NONE) {
        status = run_composed(c, o, &k);
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
static void command_options(const bench_cmd *cmd, struct option *longs, char *shorts)
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
static int parse_collective(const bench_cmd *cmd, int argc, char **argv, bench_opts *o)
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

int bench_command(const bench_cmd *cmd, const char *path, int argc, char **argv)
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

const bench_cmd *bench_find(const char *name)
{
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(name, commands[i].name) == 0) return &commands[i];
    return NULL;
}
