/*
 * test_schedule.c - the ring schedule of every kind, checked by running it:
 * for N = 1..9, every host's sends and receives are played step by step
 * and what each host holds at the end must be what the kind promises.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "daemon/schedule.h"

#define MAX_N 9

/* What host h holds of chunk c: for reductions, the set of hosts whose
 * values it has summed (a bit mask); for copies, whether it has the data. */
typedef struct {
    int n;
    ringd_coll kind;
    schedule s[MAX_N];
    uint32_t have[MAX_N][MAX_N];
} ring_sim;

static const ringd_coll kinds[] = {RINGD_COLL_ALLREDUCE, RINGD_COLL_REDUCE_SCATTER,
                                   RINGD_COLL_ALLGATHER, RINGD_COLL_BROADCAST, RINGD_COLL_BARRIER};

static int reduces(ringd_coll k)
{
    return k == RINGD_COLL_ALLREDUCE || k == RINGD_COLL_REDUCE_SCATTER || k == RINGD_COLL_BARRIER;
}

static void sim_init(ring_sim *r, int n, ringd_coll kind, int root_host)
{
    memset(r, 0, sizeof *r);
    r->n = n;
    r->kind = kind;
    for (int h = 0; h < n; h++) {
        schedule_init(&r->s[h], n, h, kind, root_host);
        for (int c = 0; c < n; c++) {
            if (reduces(kind))
                r->have[h][c] = 1u << h; /* its own value of every chunk */
            else if (kind == RINGD_COLL_ALLGATHER)
                r->have[h][c] = c == h; /* its own block */
            else
                r->have[h][c] = h == root_host && c == 0; /* the root's buffer */
        }
    }
}

/* Plays step g on every link at once: host h sends to h+1. */
static void sim_step(ring_sim *r, int g)
{
    uint32_t before[MAX_N][MAX_N];
    memcpy(before, r->have, sizeof before);
    for (int h = 0; h < r->n; h++) {
        int right = (h + 1) % r->n;
        int sent = schedule_send(&r->s[h], g), got = schedule_recv(&r->s[right], g);
        cr_assert_eq(sent, got, "N=%d kind %d step %d: host %d sends chunk %d, host %d expects %d",
                     r->n, r->kind, g, h, sent, right, got);
        if (sent < 0) continue;
        cr_assert(before[h][sent] != 0, "N=%d kind %d step %d: host %d sends chunk %d it lacks",
                  r->n, r->kind, g, h, sent);
        if (schedule_reduces(&r->s[right], g)) {
            cr_assert_eq(before[right][sent] & before[h][sent], 0,
                         "N=%d step %d: host %d would add a value twice", r->n, g, right);
            r->have[right][sent] |= before[h][sent];
        } else {
            r->have[right][sent] = before[h][sent];
        }
    }
}

static void sim_run(ring_sim *r)
{
    for (int g = 0; g < schedule_steps(r->n); g++)
        sim_step(r, g);
}

Test(schedule, allreduce_leaves_every_chunk_summed_over_every_host_on_every_host)
{
    for (int n = 1; n <= MAX_N; n++) {
        ring_sim r;
        sim_init(&r, n, RINGD_COLL_ALLREDUCE, 0);
        sim_run(&r);
        uint32_t all = (1u << n) - 1;
        for (int h = 0; h < n; h++)
            for (int c = 0; c < n; c++)
                cr_assert_eq(r.have[h][c], all, "N=%d: host %d chunk %d has %#x", n, h, c,
                             r.have[h][c]);
    }
}

Test(schedule, reduce_scatter_leaves_each_host_its_own_block_summed)
{
    for (int n = 1; n <= MAX_N; n++) {
        ring_sim r;
        sim_init(&r, n, RINGD_COLL_REDUCE_SCATTER, 0);
        sim_run(&r);
        for (int h = 0; h < n; h++)
            cr_assert_eq(r.have[h][h], (1u << n) - 1, "N=%d: host %d's block has %#x", n, h,
                         r.have[h][h]);
    }
}

Test(schedule, allgather_leaves_every_block_on_every_host)
{
    for (int n = 1; n <= MAX_N; n++) {
        ring_sim r;
        sim_init(&r, n, RINGD_COLL_ALLGATHER, 0);
        sim_run(&r);
        for (int h = 0; h < n; h++)
            for (int c = 0; c < n; c++)
                cr_assert(r.have[h][c], "N=%d: host %d lacks block %d", n, h, c);
    }
}

Test(schedule, broadcast_reaches_every_host_from_any_root_along_a_chain)
{
    for (int n = 1; n <= MAX_N; n++) {
        for (int root = 0; root < n; root++) {
            ring_sim r;
            sim_init(&r, n, RINGD_COLL_BROADCAST, root);
            sim_run(&r);
            for (int h = 0; h < n; h++) {
                cr_assert(r.have[h][0], "N=%d root %d: host %d got nothing", n, root, h);
                int dist = ((h - root) % n + n) % n;
                /* The last host of the chain only receives. */
                int sends = 0;
                for (int g = 0; g < schedule_steps(n); g++)
                    sends += schedule_send(&r.s[h], g) >= 0;
                cr_assert_eq(sends, dist < n - 1 ? 1 : 0, "N=%d root %d host %d sends %d times", n,
                             root, h, sends);
            }
        }
    }
}

Test(schedule, a_chunk_received_at_one_step_is_the_one_forwarded_at_the_next)
{
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        for (int n = 2; n <= MAX_N; n++) {
            for (int me = 0; me < n; me++) {
                schedule s;
                schedule_init(&s, n, me, kinds[k], 0);
                for (int g = s.first; g < s.last; g++) {
                    int c = schedule_recv(&s, g);
                    if (c >= 0 && kinds[k] != RINGD_COLL_BROADCAST)
                        cr_assert_eq(schedule_send(&s, g + 1), c,
                                     "kind %d N=%d host %d: got %d at step %d", kinds[k], n, me, c,
                                     g);
                }
            }
        }
    }
}

Test(schedule, only_reductions_reduce_and_only_at_the_last_reduce_scatter_step_is_a_chunk_done)
{
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        for (int n = 2; n <= MAX_N; n++) {
            schedule s;
            schedule_init(&s, n, 0, kinds[k], 0);
            for (int g = 0; g < schedule_steps(n); g++) {
                cr_assert_eq(schedule_reduces(&s, g), reduces(kinds[k]) && g < n - 1);
                cr_assert_eq(schedule_completes(&s, g), reduces(kinds[k]) && g == n - 2);
            }
        }
    }
}

/* A config of n hosts with the given local_clients, for chunk geometry. */
static cfg config_of(int n, const int *clients, cfg_host *hosts)
{
    cfg c;
    memset(&c, 0, sizeof c);
    c.hosts = hosts;
    c.n_hosts = (size_t)n;
    for (int h = 0; h < n; h++)
        hosts[h] = (cfg_host){.local_clients = clients[h]};
    return c;
}

Test(schedule, allreduce_chunks_cover_the_buffer_in_order_and_differ_by_at_most_one_element)
{
    static const uint64_t counts[] = {0, 1, 2, 5, 8, 9, 17, 1000003};
    static const size_t sizes[] = {1, 2, 4, 8};
    int ones[MAX_N] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    cfg_host hosts[MAX_N];
    for (int n = 1; n <= MAX_N; n++) {
        cfg c = config_of(n, ones, hosts);
        for (size_t i = 0; i < sizeof counts / sizeof *counts; i++) {
            for (size_t e = 0; e < sizeof sizes / sizeof *sizes; e++) {
                schedule s;
                schedule_init(&s, n, 0, RINGD_COLL_ALLREDUCE, 0);
                uint64_t at = 0, lo = UINT64_MAX, hi = 0;
                for (int ch = 0; ch < n; ch++) {
                    uint64_t off, len;
                    schedule_chunk(&s, &c, counts[i], 0, sizes[e], ch, &off, &len);
                    cr_assert_eq(off, at, "N=%d count %llu: chunk %d at %llu, expected %llu", n,
                                 (unsigned long long)counts[i], ch, (unsigned long long)off,
                                 (unsigned long long)at);
                    cr_assert_eq(len % sizes[e], 0);
                    at += len;
                    lo = len < lo ? len : lo;
                    hi = len > hi ? len : hi;
                }
                cr_assert_eq(at, counts[i] * sizes[e]);
                cr_assert_leq(hi - lo, sizes[e]);
            }
        }
    }
}

Test(schedule, gather_and_scatter_chunks_are_each_hosts_ranks_blocks)
{
    static const int clients[MAX_N] = {1, 3, 2, 1, 4, 1, 2, 2, 1};
    cfg_host hosts[MAX_N];
    for (int n = 1; n <= MAX_N; n++) {
        cfg c = config_of(n, clients, hosts);
        for (int k = 0; k < 2; k++) {
            schedule s;
            schedule_init(&s, n, 0, k ? RINGD_COLL_ALLGATHER : RINGD_COLL_REDUCE_SCATTER, 0);
            uint64_t per_rank = 7, at = 0;
            for (int ch = 0; ch < n; ch++) {
                uint64_t off, len;
                schedule_chunk(&s, &c, 0, per_rank, 4, ch, &off, &len);
                cr_assert_eq(off, at);
                cr_assert_eq(len, (uint64_t)clients[ch] * per_rank * 4);
                at += len;
            }
            cr_assert_eq(at, (uint64_t)cfg_total_ranks(&c) * per_rank * 4);
        }
    }
}

Test(schedule, broadcast_has_one_chunk_the_whole_buffer)
{
    int ones[MAX_N] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    cfg_host hosts[MAX_N];
    cfg c = config_of(5, ones, hosts);
    schedule s;
    schedule_init(&s, 5, 3, RINGD_COLL_BROADCAST, 1);
    uint64_t off, len;
    schedule_chunk(&s, &c, 1001, 0, 8, 0, &off, &len);
    cr_assert_eq(off, 0);
    cr_assert_eq(len, 8008);
    cr_assert_eq(s.dist, 2);
}
