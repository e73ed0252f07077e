/*
 * summary.c - the body of a host's summary (summary.h): its codec, shared
 * by the REPORT frame and the REPORT message, and the rules a part must
 * keep whoever sent it.
 */
#include <stdio.h>

#include "proto/summary-internal.h"

/* Slack for the checks that compare durations with the clock: rounding to
 * microseconds, and a window counted in whole seconds. */
#define SLACK_US 1000000u

static void put_times(bytes_writer *w, const summary_times *t)
{
    wr_u64(w, t->compute_us);
    wr_u64(w, t->wait_us);
    wr_u64(w, t->transfer_us);
    wr_u64(w, t->failure_us);
    wr_u64(w, t->calls);
    wr_u64(w, t->failed);
    wr_u64(w, t->bytes);
}

static void get_times(bytes_reader *r, summary_times *t)
{
    t->compute_us = rd_u64(r);
    t->wait_us = rd_u64(r);
    t->transfer_us = rd_u64(r);
    t->failure_us = rd_u64(r);
    t->calls = rd_u64(r);
    t->failed = rd_u64(r);
    t->bytes = rd_u64(r);
}

void summary_put(bytes_writer *w, const summary_part *p)
{
    wr_u32(w, p->host);
    wr_u16(w, p->part);
    wr_u16(w, p->parts);
    wr_u64(w, p->boot_us);
    wr_u64(w, p->version);
    wr_u64(w, p->at_us);
    wr_u64(w, p->job_us);
    wr_u32(w, p->window_ms);
    wr_u64(w, p->daemon_cpu_us);
    wr_u64(w, p->energy_mj);
    wr_u8(w, p->energy);
    wr_u32(w, p->watts_mw);
    wr_u16(w, p->local_size);
    wr_u16(w, p->first);
    int n = p->n <= SUMMARY_MAX_RANKS ? p->n : SUMMARY_MAX_RANKS;
    wr_u8(w, (uint8_t)n);
    for (int i = 0; i < n; i++) {
        const summary_rank *k = &p->ranks[i];
        wr_i32(w, k->rank);
        wr_u32(w, k->pid);
        wr_u8(w, k->flags);
        put_times(w, &k->life);
        put_times(w, &k->window);
        wr_u64(w, k->late_us);
        wr_u64(w, k->late_calls);
        wr_u64(w, k->cpu_us);
        int m = k->n_spans <= SUMMARY_MAX_SPANS ? k->n_spans : SUMMARY_MAX_SPANS;
        wr_u8(w, (uint8_t)m);
        for (int s = 0; s < m; s++) {
            const summary_span *sp = &k->spans[s];
            wr_u64(w, sp->start_us);
            wr_u32(w, sp->dur_us);
            wr_u32(w, sp->wait_us);
            wr_u8(w, sp->kind);
            wr_u8(w, sp->flags);
        }
    }
}

void summary_get(bytes_reader *r, summary_part *p)
{
    p->host = rd_u32(r);
    p->part = rd_u16(r);
    p->parts = rd_u16(r);
    p->boot_us = rd_u64(r);
    p->version = rd_u64(r);
    p->at_us = rd_u64(r);
    p->job_us = rd_u64(r);
    p->window_ms = rd_u32(r);
    p->daemon_cpu_us = rd_u64(r);
    p->energy_mj = rd_u64(r);
    p->energy = rd_u8(r);
    p->watts_mw = rd_u32(r);
    p->local_size = rd_u16(r);
    p->first = rd_u16(r);
    p->n = rd_u8(r);
    if (p->n > SUMMARY_MAX_RANKS) {
        p->n = 0;
        r->bad = 1;
    }
    for (int i = 0; i < p->n && !r->bad; i++) {
        summary_rank *k = &p->ranks[i];
        k->rank = rd_i32(r);
        k->pid = rd_u32(r);
        k->flags = rd_u8(r);
        get_times(r, &k->life);
        get_times(r, &k->window);
        k->late_us = rd_u64(r);
        k->late_calls = rd_u64(r);
        k->cpu_us = rd_u64(r);
        k->n_spans = rd_u8(r);
        if (k->n_spans > SUMMARY_MAX_SPANS) {
            k->n_spans = 0;
            r->bad = 1;
        }
        for (int s = 0; s < k->n_spans; s++) {
            summary_span *sp = &k->spans[s];
            sp->start_us = rd_u64(r);
            sp->dur_us = rd_u32(r);
            sp->wait_us = rd_u32(r);
            sp->kind = rd_u8(r);
            sp->flags = rd_u8(r);
        }
    }
}

/* a + b, or UINT64_MAX if it overflows. */
static uint64_t add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t sum(const summary_times *t)
{
    return add(add(t->compute_us, t->wait_us), add(t->transfer_us, t->failure_us));
}

#define BAD(...)                                                                                   \
    do {                                                                                           \
        snprintf(why, len, __VA_ARGS__);                                                           \
        return -1;                                                                                 \
    } while (0)

static int check_rank(const summary_part *p, const summary_rank *k, int lr, char *why, size_t len)
{
    if (k->rank < -1) BAD("local rank %d: rank %d", lr, (int)k->rank);
    if (k->flags & ~SUMMARY_RANK_FLAGS) BAD("local rank %d: unknown flags 0x%02x", lr, k->flags);
    if (k->life.failed > k->life.calls || k->window.failed > k->window.calls)
        BAD("local rank %d: more calls failed than ended", lr);
    if (k->window.calls > k->life.calls || k->late_calls > k->life.calls)
        BAD("local rank %d: more calls in the window, or late, than in the job", lr);
    /* A rank's time in the job fits in the job, its window in the window. */
    uint64_t job = p->job_us && p->at_us > p->job_us ? p->at_us - p->job_us : 0;
    if (sum(&k->life) > add(job, SLACK_US))
        BAD("local rank %d: %llu us accounted in a job of %llu us", lr,
            (unsigned long long)sum(&k->life), (unsigned long long)job);
    if (sum(&k->window) > add((uint64_t)p->window_ms * 1000, SLACK_US))
        BAD("local rank %d: %llu us accounted in a window of %u ms", lr,
            (unsigned long long)sum(&k->window), p->window_ms);
    uint64_t prev = 0;
    for (int s = 0; s < k->n_spans; s++) {
        const summary_span *sp = &k->spans[s];
        if (sp->wait_us > sp->dur_us)
            BAD("local rank %d, span %d: waited longer than it ran", lr, s);
        if (sp->flags & ~SUMMARY_SPAN_FLAGS || sp->kind > 5)
            BAD("local rank %d, span %d: kind %u, flags 0x%02x", lr, s, sp->kind, sp->flags);
        if (sp->start_us < prev) BAD("local rank %d, span %d: out of order", lr, s);
        if (add(sp->start_us, sp->dur_us) > add(p->at_us, SLACK_US))
            BAD("local rank %d, span %d: ends after the summary was made", lr, s);
        prev = sp->start_us;
    }
    return 0;
}

int summary_check(const summary_part *p, char *why, size_t len)
{
    if (p->local_size < 1 || p->local_size > SUMMARY_MAX_LOCAL)
        BAD("%u local ranks (1..%d)", p->local_size, SUMMARY_MAX_LOCAL);
    if (p->parts != summary_parts(p->local_size))
        BAD("%u parts for %u local ranks", p->parts, p->local_size);
    if (p->part >= p->parts) BAD("part %u of %u", p->part, p->parts);
    int first = p->part * SUMMARY_MAX_RANKS, left = p->local_size - first;
    if (p->first != first || p->n != (left < SUMMARY_MAX_RANKS ? left : SUMMARY_MAX_RANKS))
        BAD("part %u holds local ranks %u..%u of %u", p->part, p->first, p->first + p->n - 1,
            p->local_size);
    if (!p->boot_us || !p->version) BAD("no boot time or version");
    if (p->job_us > p->at_us) BAD("a job that begins after the summary was made");
    if (!p->window_ms) BAD("an empty window");
    if (p->energy > SUMMARY_ENERGY_ESTIMATED) BAD("energy source %u", p->energy);
    if (p->watts_mw && p->energy != SUMMARY_ENERGY_ESTIMATED)
        BAD("watts per core with energy that is not estimated");
    for (int i = 0; i < p->n; i++)
        if (check_rank(p, &p->ranks[i], p->first + i, why, len) < 0) return -1;
    return 0;
}
