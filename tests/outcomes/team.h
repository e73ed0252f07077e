/*
 * team.h - training processes for the outcome tests: one real process per
 * rank, forked by the test, which the test can let exit, kill or start
 * again while the daemons stay up, as they do under systemd.
 *
 * Every rank's input names its call: a buffer of int64 is cut into blocks
 * of TEAM_BLOCK elements, block i belongs to rank (i / TEAM_BLOCK) % size,
 * and only that rank puts anything there: (tag << 24) | i, the rest is 0.
 * A SUM therefore gives each rank's block back untouched, and the result
 * says, block by block, which call of which rank it was made of. A result
 * made of two calls of one rank, or of a call that rank never made, shows
 * at once (team_decode()).
 *
 * Processes record what each call returned into shared memory; the test
 * reads it once they have exited. They never use Criterion assertions.
 */
#ifndef RINGD_TEST_TEAM_H
#define RINGD_TEST_TEAM_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "ringd.h"

#define TEAM_MAX_RANKS 8
#define TEAM_BLOCK 8
#define TEAM_BAD_TAG UINT64_MAX /* a block that is not one call of its rank */
#define TEAM_MSG 360

/* What one call returned on one rank. */
typedef struct {
    uint64_t key; /* which call of the rank: the tag it submitted */
    int32_t rc;   /* 0 or RINGD_E* */
    int64_t start_ms, end_ms;
    uint64_t tags[TEAM_MAX_RANKS]; /* rc 0: the tag found in each rank's block */
    char msg[TEAM_MSG];            /* rc < 0: ringd_last_error() */
} team_call;

/* One rank's record. */
typedef struct {
    atomic_int n;         /* calls recorded */
    atomic_int submitted; /* calls submitted so far */
    pid_t pid;
    int64_t exit_ms;    /* when it chose to exit (a fault it plays), 0 if not */
    char why[TEAM_MSG]; /* the process itself failed (connect, memory) */
    int cap;            /* capacity of calls */
    team_call *calls;   /* in shared memory */
} team_log;

/* Fills the blocks of rank `rank` of size ranks with tag, zeroes the rest. */
void team_fill(int64_t *buf, size_t count, int rank, int size, uint64_t tag);

/* Reads the tag of every rank's block of a result into tags[size]:
 * TEAM_BAD_TAG for a block that is not exactly one tag's pattern. Returns
 * the number of bad blocks. */
int team_decode(const int64_t *buf, size_t count, int size, uint64_t *tags);

/* Says what rank `rank`'s blocks of a result hold, run by run: "[0..335]
 * 2a, [336..1023] 2b" (element ranges and tags, hexadecimal), for the
 * message of a result that is not one call. */
void team_explain(const int64_t *buf, size_t count, int size, int rank, char *out, size_t len);

/* Shared memory that forked processes write and the test reads; zeroed. */
void *team_shared(size_t bytes);
void team_unshare(void *p, size_t bytes);

/* Milliseconds of CLOCK_MONOTONIC, the same in every process. */
int64_t team_now_ms(void);

/* Connects to socket as local rank local_rank, retrying for timeout_ms
 * while the daemon is away (being restarted, or killed in the handshake)
 * or the slot is still taken. 0 or a RINGD_E* code. */
int team_connect(const char *socket, int local_rank, int timeout_ms, ringd_client **out);

#endif /* RINGD_TEST_TEAM_H */
