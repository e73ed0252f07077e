/*
 * bench_fusion.c - what fusion buys a training step: many small allreduces
 * submitted at once, with fusion on and off.
 *
 *   bench_fusion [--hosts N] [--count ELEMS] [--requests K] [--reps R]
 *
 * Starts N daemons on 127.0.0.1 (the test harness does it), one client per
 * host, and times K asynchronous float32 allreduces of ELEMS elements each
 * (default 200 x 1024, i.e. 4 KiB), submitted back to back and then waited
 * for. Prints the median over R repetitions for each setting and the ratio.
 * A benchmark, not a test: the figures depend on the machine.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ringd.h"
#include "tests/harness/harness.h"

typedef struct {
    int requests, reps;
    size_t count;
    harness_barrier bar;
    double ms[64]; /* rank 0's time per repetition */
    int failed;
} bench;

static harness H;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int rank_main(int idx, void *arg)
{
    bench *b = arg;
    harness *h = &H;
    ringd_client *c;
    if (ringd_connect(h->d[idx].socket, &c) < 0) {
        fprintf(stderr, "connect: %s\n", ringd_last_error(NULL));
        b->failed = 1;
        return -1;
    }
    float *x = ringd_alloc(c, (size_t)b->requests * b->count * sizeof *x);
    ringd_request **req = calloc((size_t)b->requests, sizeof *req);
    int rc = x && req ? 0 : -1;
    for (int rep = -1; rep < b->reps && rc == 0; rep++) { /* rep -1 warms up */
        for (size_t i = 0; i < (size_t)b->requests * b->count; i++)
            x[i] = 1.0f;
        if (harness_barrier_wait(&b->bar, false, 60000) != 0) rc = -1;
        double start = now_ms();
        for (int k = 0; k < b->requests && rc == 0; k++)
            rc = ringd_iallreduce(c, x + (size_t)k * b->count, b->count, RINGD_FLOAT32, RINGD_SUM,
                                  &req[k]);
        for (int k = 0; k < b->requests && rc == 0; k++)
            rc = ringd_wait(req[k], -1);
        double end = now_ms();
        if (rc == 0 && x[0] != (float)h->n) rc = -1;
        if (rc < 0) fprintf(stderr, "allreduce: %s\n", ringd_last_error(c));
        if (idx == 0 && rep >= 0) b->ms[rep] = end - start;
    }
    free(req);
    ringd_close(c);
    if (rc < 0) b->failed = 1;
    return rc;
}

static double run(int hosts, const char *yaml, bench *b)
{
    harness *h = &H;
    harness_reset(h);
    if (harness_init(h, hosts, yaml) < 0 || harness_start(h, 1, 0) < 0) {
        fprintf(stderr, "bench_fusion: %s\n", h->err);
        harness_cleanup(h);
        exit(1);
    }
    harness_barrier_init(&b->bar, hosts);
    b->failed = 0;
    int rc = harness_run_threads(h, hosts, rank_main, b, 600000);
    harness_barrier_destroy(&b->bar);
    harness_stop(h);
    harness_cleanup(h);
    if (rc < 0 || b->failed) {
        fprintf(stderr, "bench_fusion: a rank failed\n");
        exit(1);
    }
    qsort(b->ms, (size_t)b->reps, sizeof *b->ms, cmp);
    return b->ms[b->reps / 2];
}

int main(int argc, char **argv)
{
    int hosts = 4, opt;
    bench b = {.requests = 200, .reps = 9, .count = 1024};
    static const struct option opts[] = {{"hosts", required_argument, NULL, 'n'},
                                         {"count", required_argument, NULL, 'c'},
                                         {"requests", required_argument, NULL, 'k'},
                                         {"reps", required_argument, NULL, 'r'},
                                         {NULL, 0, NULL, 0}};
    while ((opt = getopt_long(argc, argv, "n:c:k:r:", opts, NULL)) != -1) {
        switch (opt) {
        case 'n':
            hosts = atoi(optarg);
            break;
        case 'c':
            b.count = (size_t)atol(optarg);
            break;
        case 'k':
            b.requests = atoi(optarg);
            break;
        case 'r':
            b.reps = atoi(optarg);
            break;
        default:
            fprintf(stderr, "usage: bench_fusion [--hosts N] [--count ELEMS] [--requests K] "
                            "[--reps R]\n");
            return 2;
        }
    }
    if (hosts < 1 || hosts > HARNESS_MAX_HOSTS || b.requests < 1 || b.reps < 1 || b.reps > 64 ||
        b.count < 1) {
        fprintf(stderr, "bench_fusion: bad arguments\n");
        return 2;
    }
    double off = run(hosts, "fusion_threshold: 0\n", &b);
    double on = run(hosts, "", &b);
    printf("%d hosts, %d async allreduces of %zu x float32 (%zu bytes), median of %d:\n", hosts,
           b.requests, b.count, b.count * 4, b.reps);
    printf("  fusion off: %8.2f ms  (%.1f us per allreduce)\n", off, off * 1e3 / b.requests);
    printf("  fusion on:  %8.2f ms  (%.1f us per allreduce)\n", on, on * 1e3 / b.requests);
    printf("  speedup:    %8.2fx\n", off / on);
    return 0;
}
