/*
 * test_slots.c - anyone who can reach the ring port may open connections
 * and never finish a handshake; the configured neighbour must still get in
 * at once (issue 17, 5a; listener.h says how the slots are shared).
 *
 * A flood holds hundreds of half-open connections on h1's port, each
 * sending one byte every half second and reopened as soon as it is
 * closed, from a stranger's address (127.0.0.2) and from the neighbour's
 * own (127.0.0.1). h0, h1's left neighbour, is killed and restarted under
 * the flood: the ring must be whole again within a few seconds (before
 * the fix, about 30 s).
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ringd.h"
#include "tests/harness/harness.h"
#include "tests/wire/wire_test.h"

#define FLOOD 400        /* connections held open at once, per source */
#define REJOIN_MS 5000   /* the ring must be back within this (stretched: timing.h) */
#define COUNT 1024

static harness H;

static void setup(void)
{
    harness_reset(&H);
}

static void teardown(void)
{
    harness_cleanup(&H);
}

TestSuite(slots, .init = setup, .fini = teardown, .timeout = 300);

typedef struct {
    uint16_t port;
    const char *source; /* bind address */
    atomic_int stop;
    atomic_int opened;
    pthread_t tid;
} flood;

static int open_one(const flood *f)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    struct sockaddr_in src = {.sin_family = AF_INET}, dst = {.sin_family = AF_INET};
    inet_pton(AF_INET, f->source, &src.sin_addr);
    inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr);
    dst.sin_port = htons(f->port);
    if (bind(fd, (struct sockaddr *)&src, sizeof src) < 0 ||
        (connect(fd, (struct sockaddr *)&dst, sizeof dst) < 0 && errno != EINPROGRESS)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Keeps FLOOD connections open, a byte on each every 500 ms, each one
 * reopened once the daemon closes it; bounded by f->stop and 120 s. */
static void *flood_main(void *arg)
{
    flood *f = arg;
    static _Thread_local int fds[FLOOD];
    int64_t end = harness_now_ms() + 120000, next_byte = 0;
    for (int i = 0; i < FLOOD; i++)
        fds[i] = -1;
    while (!atomic_load(&f->stop) && harness_now_ms() < end) {
        int64_t now = harness_now_ms();
        int tick = now >= next_byte;
        if (tick) next_byte = now + 500;
        for (int i = 0; i < FLOOD; i++) {
            if (fds[i] < 0) {
                if ((fds[i] = open_one(f)) >= 0) atomic_fetch_add(&f->opened, 1);
                continue;
            }
            char b;
            ssize_t r = recv(fds[i], &b, 1, MSG_DONTWAIT);
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOTCONN)) {
                close(fds[i]);
                fds[i] = -1;
            } else if (tick && send(fds[i], "R", 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 &&
                       errno != EAGAIN && errno != ENOTCONN) {
                close(fds[i]);
                fds[i] = -1;
            }
        }
        harness_sleep_ms(20);
    }
    for (int i = 0; i < FLOOD; i++)
        if (fds[i] >= 0) close(fds[i]);
    return NULL;
}

typedef struct {
    float buf[COUNT];
    char why[512];
} rank_state;

/* One allreduce, retried while the ring re-forms, checked. */
static int allreduce_thread(int idx, void *arg)
{
    rank_state *s = (rank_state *)arg + idx;
    int64_t deadline = harness_now_ms() + 30000;
    ringd_client *c = wire_connect(&H, idx, 30000, s->why, sizeof s->why);
    if (!c) return -1;
    int rc;
    do {
        for (int k = 0; k < COUNT; k++)
            s->buf[k] = (float)(idx + 1);
        rc = ringd_allreduce(c, s->buf, COUNT, RINGD_FLOAT32, RINGD_SUM);
    } while (rc < 0 && rc != RINGD_ECLOSED && harness_now_ms() < deadline);
    if (rc < 0)
        snprintf(s->why, sizeof s->why, "%s: %s", ringd_errname(rc), ringd_last_error(c));
    else if (s->buf[0] != 3.0f || s->buf[COUNT - 1] != 3.0f)
        snprintf(s->why, sizeof s->why, "got %g, expected 3", (double)s->buf[0]);
    ringd_close(c);
    return s->why[0] ? -1 : 0;
}

Test(slots, a_restarted_neighbour_gets_in_at_once_through_a_flood_of_half_open_connections)
{
    static rank_state st[2];
    cr_assert_eq(harness_init(&H, 2,
                              "collective_timeout: 20s\nconnect_timeout: 5s\n"
                              "backoff_initial: 50ms\nbackoff_max: 1s\n"),
                 0, "%s", H.err);
    cr_assert_eq(harness_start(&H, harness_seed("slots"), 0), 0, "%s", H.err);
    cr_assert_eq(harness_run_threads(&H, 2, allreduce_thread, st, 60000), 0, "%s / %s",
                 st[0].why, st[1].why);

    static flood f[2] = {{.source = "127.0.0.2"}, {.source = "127.0.0.1"}};
    for (int i = 0; i < 2; i++) {
        f[i].port = H.d[1].port;
        atomic_store(&f[i].stop, 0);
        cr_assert_eq(pthread_create(&f[i].tid, NULL, flood_main, &f[i]), 0);
    }
    /* The flood is in place: both sources have opened more than the slots. */
    int64_t until = harness_now_ms() + 10000;
    while ((atomic_load(&f[0].opened) < 100 || atomic_load(&f[1].opened) < 100) &&
           harness_now_ms() < until)
        harness_sleep_ms(20);
    harness_sleep_ms(500);

    harness_kill(&H, 0);
    int64_t t0 = harness_now_ms();
    cr_assert_eq(harness_spawn(&H, 0), 0, "%s", H.err);
    memset(st, 0, sizeof st);
    int rc = harness_run_threads(&H, 2, allreduce_thread, st, 60000);
    int64_t took = harness_now_ms() - t0;
    for (int i = 0; i < 2; i++) {
        atomic_store(&f[i].stop, 1);
        pthread_join(f[i].tid, NULL);
    }
    cr_assert_eq(rc, 0, "%s / %s", st[0].why, st[1].why);
    fprintf(stderr, "slots: ring whole again %lld ms after the restart, under %d + %d "
            "connections opened\n", (long long)took, atomic_load(&f[0].opened),
            atomic_load(&f[1].opened));
    cr_expect_lt(took, harness_ms(REJOIN_MS), "the restarted neighbour took %lld ms to rejoin",
                 (long long)took);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}
