/*
 * timing.c - the slowdown the tests' timings stretch by; see timing.h.
 */
#include "timing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* The slowdown the tests' written timings are made for, and the most they
 * stretch: beyond it the machine is too slow for the suite to mean anything. */
#define SHARED 2.0
#define MAX_SCALE 4.0

static double measured_slowdown = -1; /* < 0: not measured (or fixed) */
static double factor;                 /* 0: not yet known */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* About 50 us of arithmetic that the compiler cannot drop. */
static void burst(void)
{
    volatile unsigned long x = 0;
    for (unsigned long i = 0; i < 50000; i++)
        x += i * i;
}

/* The fastest of 20 bursts, each right after a sleep, is this process's
 * speed with a CPU to itself; 100 ms of bursts back to back, divided by it,
 * is how much of a CPU it gets now: about L / cores at load L. */
static double measure_slowdown(void)
{
    double fastest = INFINITY;
    for (int i = 0; i < 20; i++) {
        nanosleep(&(struct timespec){0, 1000000}, NULL);
        double t = now_s();
        burst();
        fastest = fmin(fastest, now_s() - t);
    }
    long k = lround(fmax(1, 0.1 / fastest));
    double t = now_s();
    for (long i = 0; i < k; i++)
        burst();
    return (now_s() - t) / ((double)k * fastest);
}

double harness_scale(void)
{
    if (factor > 0) return factor;
    const char *fixed = getenv("RINGD_TEST_SCALE");
    if (fixed && *fixed) {
        factor = fmax(1, atof(fixed));
    } else {
        measured_slowdown = measure_slowdown();
        factor = fmin(MAX_SCALE, fmax(1, measured_slowdown / SHARED));
    }
    return factor;
}

int harness_ms(int ms)
{
    return (int)lround(ms * harness_scale());
}

void harness_describe_timing(char *buf, size_t len)
{
    if (factor == 0)
        snprintf(buf, len, "timings as written (none was scaled)");
    else if (measured_slowdown < 0)
        snprintf(buf, len, "timings x%.2f (RINGD_TEST_SCALE)", factor);
    else
        snprintf(buf, len, "timings x%.2f (slowdown %.2f measured at the start, / %g, at most %g)",
                 factor, measured_slowdown, SHARED, MAX_SCALE);
}

long long harness_cpu_wait_ms(pid_t pid)
{
    char path[64];
    if (pid)
        snprintf(path, sizeof path, "/proc/%d/schedstat", (int)pid);
    else
        snprintf(path, sizeof path, "/proc/self/schedstat");
    FILE *f = fopen(path, "re");
    if (!f) return -1;
    unsigned long long on_cpu, waited;
    int n = fscanf(f, "%llu %llu", &on_cpu, &waited);
    fclose(f);
    return n == 2 ? (long long)(waited / 1000000) : -1;
}
