/*
 * elastic_rank.c - a training process for the elastic ring's tests: it
 * trains for STEPS steps on whatever ring its daemon is in, and checks
 * every result.
 *
 *   elastic_rank SOCKET ID STEPS LOG [STEP_MS] [DEADLINE_S]
 *
 * ID is the process's own number, 0..63: its host's configured index times
 * local_clients plus its local rank. What a rank adds depends on it, never
 * on its rank, which a resize changes. A step is an allreduce (int64, SUM)
 * of ELEMS + 64 elements:
 *   [0]   1 << ID            the sum is the set of processes that ran it
 *   [1]   step               the sum is step x ranks: all ranks at one step
 *   [i]   grad(ID, step, i) + noise(NONCE, i), 2 <= i < ELEMS
 *   [ELEMS + ID]  NONCE      this call's own number, 0 in the other slots
 * NONCE is (pid << 24) | N, N the call's number below: no two calls of any
 * processes add the same input, and the result names, in its slots, the
 * very call of every process that it was summed from. The model p
 * (ELEMS - 2 int64) adds the sum of the grads (the noise taken out again),
 * so it does not depend on the nonces. A result is checked against the set
 * in [0] (which must have ringd_size() members) and the nonces in the slots
 * (one for each member and none else, this call's own in its own slot), so
 * a sum of two different steps or calls, or of another set than the
 * ring's, is found.
 * On RINGD_ERESIZED, and once at the start, the ranks sync: the largest
 * step wins, and the lowest rank at it broadcasts its model, so a process
 * that comes back catches up. So they do on RINGD_EMISMATCH: a host whose
 * daemon restarted before the others closed over it comes back without a
 * resize, and its new process's first sync meets their step. And so they
 * do on an answer that says "outcome unknown" (PROTOCOL.md, Outcomes):
 * other ranks may have had a success for that call and gone on to the next
 * step, so retrying it would pair this rank's step with their next one;
 * the sync's first call differs in count from a step's, so it fails
 * (RINGD_EMISMATCH) on every rank that went on, and they all sync. Any
 * other failure retries the step (every rank saw the same outcome).
 *
 * LOG gets one line per event, each starting with CLOCK_REALTIME in ms:
 *   T start PID ID                 the process started
 *   T ok STEP MASK SIZE RANK NONCES  a step ran on the processes of MASK;
 *                                  NONCES: the slots of MASK's members in
 *                                  ID order, in hex, comma-separated
 *   T resized TEXT                 RINGD_ERESIZED and its message
 *   T error CODE TEXT              another failure
 *   T sync STEP ROOT               synced to STEP from rank ROOT
 *   T done HASH                    all steps ran; HASH of the model
 *   T call N RC TEXT               every call (a step's allreduce and each
 *                                  of a sync's three calls): N counts this
 *                                  process's calls from 0, RC is the ringd
 *                                  code (0 or RINGD_E*, as a number), TEXT
 *                                  ringd_last_error() or "ok"; logged before
 *                                  the call's other line, so the ranks'
 *                                  outcomes can be compared call by call
 *   T members EPOCH LIVE READY     with $ELASTIC_RANK_MEMBERS set, at the
 *                                  start and after every failed call: the
 *                                  daemon's membership (ringd_membership():
 *                                  the epoch it was agreed in, its hosts as
 *                                  a mask, whether the ring is ready), which
 *                                  the calls after it are made for until
 *                                  one fails
 * With $ELASTIC_RANK_STOP set, the process stops at the step that file holds
 * once it exists (when below STEPS): a test writes it, ahead of every rank's
 * step, to end the run when its faults are over, and every rank stops at the
 * same step.
 * Exit status: 0 done, 1 a wrong result (logged as "wrong ..."), 2 usage,
 * 3 the daemon went away, 4 past the deadline.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ringd.h"

#define ELEMS 1024
#define MODEL (ELEMS - 2)
#define SLOTS 64 /* [ELEMS + ID]: the nonce of process ID's call */

static FILE *log_file;
static ringd_client *c;
static int64_t *buf, *p;
static int64_t step;
static int64_t calls;
static int id;
static int members_log; /* $ELASTIC_RANK_MEMBERS */

static int64_t now_ms(int clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(log_file, "%" PRId64 " ", now_ms(CLOCK_REALTIME));
    vfprintf(log_file, fmt, ap);
    fputc('\n', log_file);
    fflush(log_file);
    va_end(ap);
}

/* Logs the outcome of this process's next call and returns it. */
static int logged(int rc)
{
    note("call %" PRId64 " %d %s", calls++, rc, rc < 0 ? ringd_last_error(c) : "ok");
    return rc;
}

static int64_t grad(int h, int64_t s, int i)
{
    return ((int64_t)(h + 1) * 7919 + s * 104729 + (int64_t)i * 31) % 1000003;
}

/* What a call with this nonce adds to element i on top of its grads: up to
 * 10^6, so sums of 64 of them stay far from overflow. */
static int64_t noise(int64_t nonce, int i)
{
    uint64_t x = (uint64_t)nonce * 0x9e3779b97f4a7c15u + (uint64_t)i * 0xbf58476d1ce4e5b9u;
    x ^= x >> 31;
    return (int64_t)(x % 1000003);
}

static uint64_t model_hash(void)
{
    uint64_t x = 1469598103934665603u;
    for (int i = 0; i < MODEL; i++) {
        x ^= (uint64_t)p[i];
        x *= 1099511628211u;
    }
    return x;
}

/* With $ELASTIC_RANK_MEMBERS, logs the daemon's membership: what the next
 * calls are made for (a call made for another one fails with
 * RINGD_ERESIZED, after which this is asked again). A daemon that does not
 * answer ends the process, as a call would. */
static void log_members(void)
{
    if (!members_log) return;
    ringd_membership_info m;
    if (ringd_membership(c, &m) < 0) {
        note("closed membership: %s", ringd_last_error(c));
        exit(3);
    }
    note("members %" PRIu32 " %#" PRIx64 " %d", m.epoch, m.live, m.ready);
}

/* A failure other than a wrong result: the daemon gone ends the process,
 * anything else is logged and retried. */
static void failed(int rc)
{
    if (rc == RINGD_ECLOSED || rc == RINGD_ESHUTDOWN || rc == RINGD_ECONNECT) {
        note("closed %s", ringd_last_error(c));
        exit(3);
    }
    if (rc == RINGD_ERESIZED)
        note("resized %s", ringd_last_error(c));
    else
        note("error %s %s", ringd_errname(rc), ringd_last_error(c));
    log_members();
}

/* Lowers *steps to the step in $ELASTIC_RANK_STOP, once that file exists. */
static void read_stop(int64_t *steps)
{
    const char *path = getenv("ELASTIC_RANK_STOP");
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) return;
    long long s;
    if (fscanf(f, "%lld", &s) == 1 && s < *steps) *steps = s;
    fclose(f);
}

/* Agrees with the other ranks on the step and the model. 0, or the code of
 * a failure (the caller syncs again). */
static int sync_once(void)
{
    buf[0] = step;
    int rc = logged(ringd_allreduce(c, buf, 1, RINGD_INT64, RINGD_MAX));
    if (rc < 0) return rc;
    int64_t top = buf[0];
    buf[0] = step == top ? ringd_rank(c) : INT64_MAX;
    if ((rc = logged(ringd_allreduce(c, buf, 1, RINGD_INT64, RINGD_MIN))) < 0) return rc;
    int root = (int)buf[0];
    if (ringd_rank(c) == root) memcpy(buf, p, MODEL * sizeof *p);
    if ((rc = logged(ringd_broadcast(c, buf, MODEL, RINGD_INT64, root))) < 0) return rc;
    memcpy(p, buf, MODEL * sizeof *p);
    step = top;
    note("sync %" PRId64 " %d", step, root);
    return 0;
}

static void sync_all(void)
{
    int rc;
    while ((rc = sync_once()) < 0)
        failed(rc);
}

/* One step: 0, or a failure code. Exits on a wrong result. */
static int train_step(void)
{
    int64_t nonce = (int64_t)getpid() << 24 | (calls & 0xffffff);
    buf[0] = (int64_t)1 << id;
    buf[1] = step;
    for (int i = 2; i < ELEMS; i++)
        buf[i] = grad(id, step, i) + noise(nonce, i);
    memset(buf + ELEMS, 0, SLOTS * sizeof *buf);
    buf[ELEMS + id] = nonce;
    int rc = logged(ringd_allreduce(c, buf, ELEMS + SLOTS, RINGD_INT64, RINGD_SUM));
    if (rc < 0) return rc;
    uint64_t mask = (uint64_t)buf[0];
    int size = ringd_size(c), members = __builtin_popcountll(mask);
    if (members != size || !(mask & ((uint64_t)1 << id)) || buf[1] != step * size) {
        note("wrong step %" PRId64 ": members %#" PRIx64 " (%d), size %d, step sum %" PRId64,
             step, mask, members, size, buf[1]);
        exit(1);
    }
    char nonces[SLOTS * 17 + 1];
    size_t len = 0;
    for (int h = 0; h < SLOTS; h++) {
        int64_t n = buf[ELEMS + h];
        int member = (mask & ((uint64_t)1 << h)) != 0;
        if (member != (n > 0) || (h == id && n != nonce)) {
            note("wrong step %" PRId64 ": slot %d holds %#" PRIx64 " (members %#" PRIx64
                 ", this call's nonce %#" PRIx64 ")",
                 step, h, (uint64_t)n, mask, (uint64_t)nonce);
            exit(1);
        }
        if (member)
            len += (size_t)snprintf(nonces + len, sizeof nonces - len, "%s%" PRIx64, len ? "," : "",
                                    (uint64_t)n);
    }
    for (int i = 2; i < ELEMS; i++) {
        int64_t want = 0, extra = 0;
        for (int h = 0; h < SLOTS; h++)
            if (mask & ((uint64_t)1 << h)) {
                want += grad(h, step, i);
                extra += noise(buf[ELEMS + h], i);
            }
        if (buf[i] != want + extra) {
            note("wrong step %" PRId64 ": element %d is %" PRId64 ", not %" PRId64, step, i, buf[i],
                 want + extra);
            exit(1);
        }
        p[i - 2] += buf[i] - extra;
    }
    note("ok %" PRId64 " %#" PRIx64 " %d %d %s", step, mask, size, ringd_rank(c), nonces);
    step++;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 5 || argc > 7) {
        fprintf(stderr, "usage: elastic_rank SOCKET ID STEPS LOG [STEP_MS] [DEADLINE_S]\n");
        return 2;
    }
    id = atoi(argv[2]);
    int64_t steps = atoll(argv[3]);
    int step_ms = argc > 5 ? atoi(argv[5]) : 0;
    int64_t deadline = now_ms(CLOCK_MONOTONIC) + 1000 * (argc > 6 ? atoll(argv[6]) : 300);
    if (!(log_file = fopen(argv[4], "a"))) {
        perror(argv[4]);
        return 2;
    }
    members_log = getenv("ELASTIC_RANK_MEMBERS") != NULL;
    note("start %ld %d", (long)getpid(), id);
    /* The daemon may be starting: try for a while. */
    int rc;
    while ((rc = ringd_connect(argv[1], &c)) < 0) {
        if (now_ms(CLOCK_MONOTONIC) > deadline) {
            note("closed cannot connect: %s", ringd_last_error(NULL));
            return 3;
        }
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    buf = ringd_alloc(c, (ELEMS + SLOTS) * sizeof *buf);
    p = calloc(MODEL, sizeof *p);
    if (!buf || !p) {
        note("closed out of memory");
        return 3;
    }
    log_members();
    sync_all();
    while (read_stop(&steps), step < steps) {
        if (now_ms(CLOCK_MONOTONIC) > deadline) {
            note("deadline at step %" PRId64, step);
            return 4;
        }
        if ((rc = train_step()) < 0) {
            int unknown = strstr(ringd_last_error(c), "outcome unknown") != NULL;
            failed(rc);
            if (rc == RINGD_ERESIZED || rc == RINGD_EMISMATCH || unknown) sync_all();
            continue;
        }
        if (step_ms > 0) {
            struct timespec ts = {step_ms / 1000, (long)(step_ms % 1000) * 1000000};
            nanosleep(&ts, NULL);
        }
    }
    note("done %016" PRIx64, model_hash());
    ringd_close(c);
    return 0;
}
