/*
 * bench_reduce.c - throughput of the reduction kernels.
 *
 * Usage: bench_reduce [KiB]   (buffer size, default 16384 = 16 MiB)
 *
 * For each case, reduces a src buffer into a dst buffer of the given size
 * nine times and prints the median rate in GB/s of reduced input (bytes of
 * src consumed per second; the memory traffic is three times that: dst read,
 * src read, dst written). Values stay normal and finite, as real gradients
 * mostly do, so no case falls onto a slow subnormal path.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/reduce.h"
#include "daemon/reduce-internal.h"

#define RUNS 9

typedef struct {
    const char *name;
    ringd_dtype dtype;
    int portable_f16; /* run the portable float16 kernel instead of the best one */
} bench_case;

static const bench_case cases[] = {
    {"float32 sum", RINGD_FLOAT32, 0},   {"float64 sum", RINGD_FLOAT64, 0},
    {"float16 sum", RINGD_FLOAT16, 0},   {"float16 sum (portable)", RINGD_FLOAT16, 1},
    {"bfloat16 sum", RINGD_BFLOAT16, 0}, {"int32 sum", RINGD_INT32, 0},
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static size_t elem_size(ringd_dtype dtype)
{
    switch (dtype) {
    case RINGD_FLOAT16:
    case RINGD_BFLOAT16:
        return 2;
    case RINGD_FLOAT64:
        return 8;
    default:
        return 4;
    }
}

/* Values in [0.5, 1): the nine sums stay far from overflow and subnormals. */
static void fill(ringd_dtype dtype, void *buf, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        float v = 0.5f + (float)(i % 1000) / 2000.0f;
        switch (dtype) {
        case RINGD_FLOAT16:
            ((uint16_t *)buf)[i] = reduce_float_to_half(v);
            break;
        case RINGD_BFLOAT16:
            ((uint16_t *)buf)[i] = reduce_float_to_bf16(v);
            break;
        case RINGD_FLOAT32:
            ((float *)buf)[i] = v;
            break;
        case RINGD_FLOAT64:
            ((double *)buf)[i] = v;
            break;
        default:
            ((int32_t *)buf)[i] = (int32_t)i;
            break;
        }
    }
}

static void run(const bench_case *c, void *dst, const void *src, size_t count)
{
    if (c->portable_f16)
        reduce_f16_apply(REDUCE_F16_PORTABLE, RINGD_SUM, dst, src, count);
    else
        reduce_apply(c->dtype, RINGD_SUM, dst, src, count);
}

int main(int argc, char **argv)
{
    size_t bytes = 16u << 20;

    if (argc > 1) {
        char *end;
        unsigned long kib = strtoul(argv[1], &end, 10);
        if (*end != '\0' || kib == 0) {
            fprintf(stderr, "usage: %s [buffer size in KiB]\n", argv[0]);
            return 2;
        }
        bytes = (size_t)kib << 10;
    }
    /* Multiples of 64 bytes, so both buffers start on a cache line. */
    bytes = (bytes + 63) & ~(size_t)63;

    void *dst = aligned_alloc(64, bytes);
    void *src = aligned_alloc(64, bytes);
    if (!dst || !src) {
        fprintf(stderr, "bench_reduce: cannot allocate 2 x %zu bytes\n", bytes);
        return 1;
    }

    printf("buffer %zu KiB, median of %d runs, GB/s of reduced input\n", bytes >> 10, RUNS);
    printf("float16 kernels: %s\n",
           reduce_f16_available(REDUCE_F16_F16C) ? "F16C" : "portable (no F16C)");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bench_case *c = &cases[i];
        size_t count = bytes / elem_size(c->dtype);
        double secs[RUNS];

        fill(c->dtype, dst, count);
        fill(c->dtype, src, count);
        run(c, dst, src, count); /* fault the pages in, warm the caches */
        for (int r = 0; r < RUNS; r++) {
            double t0 = now();
            run(c, dst, src, count);
            secs[r] = now() - t0;
        }
        qsort(secs, RUNS, sizeof secs[0], compare_doubles);
        printf("%-24s %7.2f GB/s\n", c->name, (double)bytes / secs[RUNS / 2] / 1e9);
    }
    free(dst);
    free(src);
    return 0;
}
