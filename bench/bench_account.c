/*
 * bench_account.c - what the report's accounting costs the daemon, apart
 * from the noise of a shared machine: the work added to every call of a
 * rank (the clock read three times, account_submit() and account_result()),
 * and the work of one summary part a second (made by account_read() for 8
 * ranks of 16 spans, encoded as a REPORT frame, decoded and checked by the
 * next host).
 *
 *   bench_account [CALLS]
 *
 * Prints nanoseconds per call and microseconds per part, the median of 5
 * repetitions. A benchmark, not a test: the figures depend on the machine.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "daemon/account.h"
#include "proto/frame.h"
#include "proto/summary.h"
#include "ringd.h"

#define REPS 5

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v)
{
    qsort(v, REPS, sizeof *v, cmp);
    return v[REPS / 2];
}

int main(int argc, char **argv)
{
    long calls = argc > 1 ? atol(argv[1]) : 2000000;
    account a;
    if (account_init(&a, SUMMARY_MAX_RANKS) < 0) return 1;
    uint64_t t = uv_hrtime();
    for (int lr = 0; lr < SUMMARY_MAX_RANKS; lr++)
        account_connect(&a, lr, t, 1, 0);

    /* Per call: what local.c, gather.c and report.c add to one COLLECTIVE
     * and its RESULT (the clock read at the submission, in gather and at
     * the answer). */
    double per_call[REPS];
    for (int rep = 0; rep < REPS; rep++) {
        uint64_t t0 = uv_hrtime();
        for (long i = 0; i < calls; i++) {
            account_submit(&a, 0, uv_hrtime(), RINGD_COLL_ALLREDUCE);
            account_call c = {.last_ns = uv_hrtime(), .bytes = 8, .kind = RINGD_COLL_ALLREDUCE};
            account_result(&a, 0, uv_hrtime(), &c);
        }
        per_call[rep] = (double)(uv_hrtime() - t0) / (double)calls;
    }
    for (int lr = 1; lr < SUMMARY_MAX_RANKS; lr++)
        for (int i = 0; i < SUMMARY_MAX_SPANS; i++) {
            account_submit(&a, lr, uv_hrtime(), RINGD_COLL_ALLREDUCE);
            account_call c = {.last_ns = uv_hrtime(), .kind = RINGD_COLL_ALLREDUCE};
            account_result(&a, lr, uv_hrtime(), &c);
        }

    /* Per second: one part made, sent, received and checked. */
    static summary_part p, out;
    static uint8_t buf[FRAME_HEADER_SIZE + FRAME_MAX_REPORT_BODY];
    double per_part[REPS];
    int parts = 20000, bytes = 0;
    for (int rep = 0; rep < REPS; rep++) {
        uint64_t t0 = uv_hrtime();
        for (int i = 0; i < parts; i++) {
            uint64_t now = uv_hrtime();
            memset(&p, 0, sizeof p);
            p = (summary_part){.parts = 1,
                               .boot_us = 1,
                               .version = 1,
                               .window_ms = 60000,
                               .local_size = SUMMARY_MAX_RANKS,
                               .n = SUMMARY_MAX_RANKS};
            for (int lr = 0; lr < SUMMARY_MAX_RANKS; lr++) {
                account_view v;
                account_read(&a, lr, now, &v);
                p.ranks[lr].rank = lr;
                p.ranks[lr].n_spans = (uint8_t)v.n_spans;
                for (int s = 0; s < v.n_spans; s++)
                    p.ranks[lr].spans[s].start_us = v.spans[s].start / 1000;
            }
            p.at_us = now / 1000 + 1;
            bytes = frame_encode_report(buf, sizeof buf, &p);
            frame_header h;
            char why[256];
            if (bytes < 0 || frame_decode_header(buf, (size_t)bytes, &h) != FRAME_OK ||
                frame_decode_report(&h, buf + FRAME_HEADER_SIZE, &out) != FRAME_OK ||
                summary_check(&out, why, sizeof why) < 0) {
                fprintf(stderr, "bench_account: the part does not go round: %s\n", why);
                return 1;
            }
        }
        per_part[rep] = (double)(uv_hrtime() - t0) / parts / 1000;
    }
    printf("accounting per call: %.0f ns (median of %d x %ld calls)\n", median(per_call), REPS,
           calls);
    printf("a summary part of %d ranks x %d spans (%d bytes): %.1f us to make, encode, decode "
           "and check (median of %d x %d)\n",
           SUMMARY_MAX_RANKS, SUMMARY_MAX_SPANS, bytes, median(per_part), REPS, parts);
    account_free(&a);
    return 0;
}
