/*
 * team.c - training processes for the outcome tests; see team.h.
 */
#include "team.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static int owner_of(size_t i, int size)
{
    return (int)((i / TEAM_BLOCK) % (size_t)size);
}

void team_fill(int64_t *buf, size_t count, int rank, int size, uint64_t tag)
{
    for (size_t i = 0; i < count; i++)
        buf[i] = owner_of(i, size) == rank ? (int64_t)((tag << 24) | (i & 0xffffff)) : 0;
}

int team_decode(const int64_t *buf, size_t count, int size, uint64_t *tags)
{
    int bad = 0;
    for (int r = 0; r < size; r++)
        tags[r] = 0;
    for (size_t i = 0; i < count; i++) {
        int r = owner_of(i, size);
        uint64_t v = (uint64_t)buf[i];
        if (tags[r] == TEAM_BAD_TAG) continue;
        if ((v & 0xffffff) != (i & 0xffffff) || (tags[r] && tags[r] != v >> 24) || v >> 24 == 0)
            tags[r] = TEAM_BAD_TAG;
        else
            tags[r] = v >> 24;
    }
    for (int r = 0; r < size; r++)
        bad += tags[r] == TEAM_BAD_TAG;
    return bad;
}

void team_explain(const int64_t *buf, size_t count, int size, int rank, char *out, size_t len)
{
    size_t n = 0, start = 0;
    out[0] = '\0';
    uint64_t run = 0, first = 0;
    int in_run = 0;
    for (size_t i = 0; i <= count && n < len; i++) {
        int mine = i < count && owner_of(i, size) == rank;
        if (i < count && !mine) continue;
        uint64_t v = i < count ? (uint64_t)buf[i] : 0;
        uint64_t tag = (v & 0xffffff) == (i & 0xffffff) ? v >> 24 : TEAM_BAD_TAG;
        if (in_run && (i == count || tag != run)) {
            if (run == TEAM_BAD_TAG)
                n += (size_t)snprintf(out + n, len - n, "%s[%zu..%zu] not a tag (%#llx first)",
                                      n ? ", " : "", start, i - 1, (unsigned long long)first);
            else
                n += (size_t)snprintf(out + n, len - n, "%s[%zu..%zu] %llx", n ? ", " : "", start,
                                      i - 1, (unsigned long long)run);
            in_run = 0;
        }
        if (i < count && !in_run) {
            in_run = 1;
            run = tag;
            start = i;
            first = v;
        }
    }
}

void *team_shared(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void team_unshare(void *p, size_t bytes)
{
    if (p) munmap(p, bytes);
}

int64_t team_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int team_connect(const char *socket, int local_rank, int timeout_ms, ringd_client **out)
{
    char lr[16];
    snprintf(lr, sizeof lr, "%d", local_rank);
    setenv("RINGD_LOCAL_RANK", lr, 1);
    int64_t end = team_now_ms() + timeout_ms;
    int rc;
    /* A daemon being restarted refuses the connection; a rank whose
     * predecessor has just exited may find its slot still taken. */
    while ((rc = ringd_connect(socket, out)) == RINGD_ECONNECT || rc == RINGD_EBUSY ||
           rc == RINGD_ECLOSED) {
        if (team_now_ms() >= end) break;
        struct timespec ts = {0, 20 * 1000000};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
            ;
    }
    return rc;
}
