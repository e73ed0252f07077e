/*
 * harness.h - starts real ringd daemons for integration tests.
 *
 * A test describes a cluster of N hosts on 127.0.0.1; the harness makes a
 * temporary directory, picks free TCP ports, writes the YAML config, starts one
 * `ringd` process per host (stderr to a log file in the directory), waits until
 * each daemon's Unix socket accepts connections, and at the end stops them and
 * checks how each one exited. Everything waits on a condition with a deadline,
 * never on a fixed sleep.
 *
 *     static harness H;
 *     static void setup(void) { harness_reset(&H); }
 *     static void teardown(void) { harness_cleanup(&H); }
 *     TestSuite(ring, .init = setup, .fini = teardown);
 *
 *     Test(ring, something) {
 *         cr_assert_eq(harness_init(&H, 3, "collective_timeout: 30s\n"), 0, "%s", H.err);
 *         cr_assert_eq(harness_start(&H, harness_seed("something"), 100), 0, "%s", H.err);
 *         ... ringd_connect(H.d[i].socket, &c) in harness_run_threads() ...
 *         cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
 *     }
 *
 * Every function returning int returns 0 on success or -1 with a one-line
 * message in h->err (details, such as the tail of a daemon's log, also go to
 * stderr). harness_cleanup() is safe after any failure, including a failed
 * assertion in the middle of a test: it kills what is still running and removes
 * the directory. Daemons are also killed if the test process dies (they get
 * SIGKILL through PR_SET_PDEATHSIG, and an atexit handler kills any survivor),
 * so call the start functions from the test's main thread.
 *
 * Compile definitions used: RINGD_BIN, the path of the ringd binary.
 * Environment: RINGD_TEST_SEED fixes the seed of harness_seed();
 * RINGD_TEST_KEEP=1 keeps the temporary directory for inspection.
 */
#ifndef RINGD_TEST_HARNESS_H
#define RINGD_TEST_HARNESS_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ringd.h"
#include "timing.h"

#define HARNESS_MAX_HOSTS 16

/* Deadlines in milliseconds. Generous, because under ASan on a loaded 2-core
 * machine everything is a few times slower; a healthy run never waits them out. */
#define HARNESS_READY_TIMEOUT_MS 20000 /* daemon start to socket accepting */
#define HARNESS_STOP_TIMEOUT_MS 15000  /* SIGTERM to exit */

typedef struct {
    char name[16];      /* "h0", "h1", ...: the host's name in the config */
    char socket[108];   /* its Unix socket (sun_path is 108 bytes) */
    char log[PATH_MAX]; /* its stderr */
    uint16_t port;      /* its TCP port on 127.0.0.1 */
    int port_lock;      /* the fd that holds port's lock (pick_ports()), if port_locked */
    bool port_locked;
    pid_t pid;          /* > 0 while started and not yet reaped */
    bool started, reaped;
    int status;      /* waitpid() status, once reaped */
    int sent_signal; /* the last signal the harness sent it, 0 if none */
} harness_daemon;

typedef struct {
    char dir[64];          /* the temporary directory, "" before harness_init() */
    char config[PATH_MAX]; /* dir/ringd.yaml */
    int n;                 /* number of hosts */
    harness_daemon d[HARNESS_MAX_HOSTS];
    char err[1024]; /* message of the last failure */
} harness;

/* Zeroes *h so that harness_cleanup() is a no-op until harness_init(). */
void harness_reset(harness *h);

/* Creates the temporary directory, picks n distinct free ports and writes the
 * config for n hosts h0..h{n-1} in ring order, with local_clients 1. The
 * optional extra_yaml (complete lines, e.g. "segment_size: 64KiB\n") is added
 * at the top level. Starts nothing. */
int harness_init(harness *h, int n, const char *extra_yaml);

/* The same with local_clients processes per host. */
int harness_init_local(harness *h, int n, int local_clients, const char *extra_yaml);

/* Writes text to dir/name and stores its path in path (pathlen bytes). */
int harness_write_file(harness *h, const char *name, const char *text, char *path, size_t pathlen);

/* Writes a copy of the config to dir/name with the first `from` replaced
 * by `to` (a host's own view: another key file, a proxy's port), and its
 * path into path. */
int harness_config_variant(harness *h, const char *name, const char *from, const char *to,
                           char *path, size_t pathlen);

/* Writes a key file (mode 0600) to dir/name and its path into path. */
int harness_write_key(harness *h, const char *name, const char *key, char *path, size_t pathlen);

/* Writes all n bytes to fd, retrying EINTR and short writes. 0 or -1. */
int harness_write_all(int fd, const void *buf, size_t n);

/* Waits until daemon i's log has a line containing text. */
int harness_wait_log(harness *h, int i, const char *text, int timeout_ms);

/* Starts all daemons in a random order drawn from seed, sleeping a random
 * 0..max_delay_ms between starts (the scenario, not synchronisation), then
 * waits until every socket accepts a connection. Prints the order. */
int harness_start(harness *h, uint64_t seed, int max_delay_ms);

/* Starts every daemon, in order, with host i's right link going to
 * 127.0.0.1:port (a proxy's) instead of to its right neighbour (config
 * dir/<host>.yaml, a harness_config_variant()), then waits until every
 * socket accepts a connection. */
int harness_start_through(harness *h, int i, uint16_t port);

/* Starts daemon order[k] after sleeping delay_ms[k] (delay_ms may be NULL),
 * for k < count, without waiting for readiness. */
int harness_start_in_order(harness *h, const int *order, const int *delay_ms, int count);

/* Starts daemon i (fork and exec of RINGD_BIN --config CONFIG --host NAME). */
int harness_spawn(harness *h, int i);

/* Waits until daemon i's Unix socket accepts a connection; fails early if the
 * daemon exits meanwhile. */
int harness_wait_ready(harness *h, int i, int timeout_ms);

/* harness_wait_ready() for every started daemon. */
int harness_wait_all_ready(harness *h, int timeout_ms);

/* Sends SIGTERM to every running daemon, waits up to HARNESS_STOP_TIMEOUT_MS,
 * then SIGKILLs the rest. Fails if any daemon crashed: it exited with a
 * non-zero status (ASan and UBSan exit with 1), was killed by a signal other
 * than our SIGTERM, needed the SIGKILL, or its log has a sanitizer report.
 * Prints the status of each failing daemon and the tail of its log. */
int harness_stop(harness *h);

/* Sends sig to daemon i and remembers it as expected. */
void harness_signal(harness *h, int i, int sig);

/* SIGKILLs daemon i and reaps it (a fault, not a crash: harness_stop() does
 * not count it); harness_spawn() may start it again. */
void harness_kill(harness *h, int i);

/* Sends sig to every running daemon and remembers it as expected. */
void harness_signal_all(harness *h, int sig);

/* Prints the last tail_lines lines of every daemon's log to stderr. */
void harness_dump_logs(const harness *h, int tail_lines);

/* Kills (SIGKILL) and reaps every daemon still running and removes the
 * temporary directory, unless RINGD_TEST_KEEP is set. Never fails; for .fini. */
void harness_cleanup(harness *h);

/* Runs argv (argv[0] a path) with stdout and stderr captured into out and
 * errout (NUL-terminated, truncated to their sizes; either may be NULL) and
 * waits up to timeout_ms for it to exit; *status gets the waitpid() status. A
 * command still running at the deadline is killed and the call fails. */
int harness_run(harness *h, char *const argv[], int timeout_ms, int *status, char *out,
                size_t outlen, char *errout, size_t errlen);

/* A seed for a test: $RINGD_TEST_SEED if set, else from the clock and pid.
 * Prints "<what>: seed N" to stderr so that a failure can be replayed. */
uint64_t harness_seed(const char *what);

/* splitmix64: the next pseudo-random number of *state. */
uint64_t harness_rand(uint64_t *state);

/* Sleeps ms milliseconds (scenario delays only). */
void harness_sleep_ms(int ms);

/* Milliseconds of CLOCK_MONOTONIC. */
int64_t harness_now_ms(void);

/*
 * Client threads. A test runs one client per host, each in its own thread:
 * fn(idx, arg) for idx < k returns 0 or -1. The threads must not use
 * Criterion assertions (they would jump across threads); they record failures
 * and return -1, and the test asserts after the join.
 */
typedef int (*harness_thread_fn)(int idx, void *arg);

typedef struct {
    int k;
    pthread_t tid[HARNESS_MAX_HOSTS];
    struct harness_thread_slot {
        harness_thread_fn fn;
        void *arg;
        int idx;
        int rc;
    } slot[HARNESS_MAX_HOSTS];
} harness_threads;

/* Starts k threads running fn(idx, arg). */
int harness_threads_start(harness *h, harness_threads *t, int k, harness_thread_fn fn, void *arg);

/* Joins them within timeout_ms. Returns 0 if every fn returned 0. If a thread
 * is still running at the deadline, SIGKILLs the daemons (which makes blocked
 * client calls return), joins again, and fails; if even that does not help,
 * dumps the logs and aborts the test process. */
int harness_threads_join(harness *h, harness_threads *t, int timeout_ms);

/* harness_threads_start() then harness_threads_join(). */
int harness_run_threads(harness *h, int k, harness_thread_fn fn, void *arg, int timeout_ms);

/*
 * What a job's client threads record when something is wrong: how many
 * failures, and the first one's words for the test's assertion. The first
 * HARNESS_FAILURES_PRINTED also go to stderr as they happen.
 */
#define HARNESS_FAILURES_PRINTED 20

typedef struct {
    atomic_int count;
    pthread_mutex_t mu;
    char first[1024];
} harness_failures;

void harness_failures_init(harness_failures *f);
void harness_failures_destroy(harness_failures *f);
void harness_fail(harness_failures *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Connects a client to daemon i for thread idx; NULL, with a failure
 * recorded, if it cannot. */
ringd_client *harness_connect(harness *h, int i, harness_failures *f, int idx);

/*
 * A barrier for the client threads with a deadline, which also tells every
 * thread whether any of them failed in the phase that just ended, so that all
 * of them stop at the same point. A barrier that timed out stays broken.
 */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int k, arrived;
    unsigned generation;
    bool any_failed, result, broken;
} harness_barrier;

void harness_barrier_init(harness_barrier *b, int k);
void harness_barrier_destroy(harness_barrier *b);

/* Waits until all k threads arrived. Returns 1 if any thread passed
 * failed = true in this round, 0 if none did, -1 on timeout or a broken
 * barrier. */
int harness_barrier_wait(harness_barrier *b, bool failed, int timeout_ms);

/* ---- data whose float32 sum is exact ---- */

/* Fills p with rank's contribution to iteration iter: small integers, so
 * their sum over ranks is exact in float32 in any order. */
void harness_fill_f32(float *p, size_t n, int rank, int iter);

/* Checks p against the sum over ranks 0..ranks-1 of harness_fill_f32().
 * Returns 0, or -1 with the first wrong element in why. */
int harness_check_f32(const float *p, size_t n, int ranks, int iter, char *why, size_t len);

#endif /* RINGD_TEST_HARNESS_H */
