/*
 * test_input.c - bad input and local access, end to end (issue 6, parts 5
 * and 6): real ringd daemons, fed what no ringd or libringd would send.
 *
 * The specification, for the ring's TCP port and for the Unix socket alike:
 * any byte stream (random bytes, a length over the limit, a wrong magic or
 * type, a message cut short, a flood of connections opened and dropped)
 * closes that connection with a line in the daemon's log saying why; the
 * daemon does not crash (harness_stop() also fails on any sanitizer report
 * in its log, LeakSanitizer's included), its memory stays bounded, and
 * afterwards 100 allreduces in a row are correct on every rank. And the
 * Unix socket gets the configured mode and group, and the daemon refuses
 * processes outside allowed_uids/allowed_gids with RINGD_EPERM.
 *
 * Every loop is bounded in count and in time. Seeds are printed;
 * RINGD_TEST_SEED=N reproduces a run.
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proto/frame.h"
#include "proto/msg.h"
#include "ringd.h"
#include "tests/harness/harness.h"

/* log_level debug: connections dropped on the TCP port before a handshake
 * are logged at debug level (a port open to the network sees scanners). */
#define YAML "collective_timeout: 30s\nconnect_timeout: 2s\nlog_level: debug\n"
#define HOSTS 2
#define ROUNDS 100     /* allreduces in a row after each kind of bad input */
#define COUNT 4099     /* elements of each */
#define FLOOD 1000     /* connections opened and dropped */
#define FLOOD_MS 60000 /* ... within this time */
#define CLOSE_MS 10000 /* for the daemon to close one bad connection */
#define LOG_MS 20000   /* for log lines to appear */
#define ALLREDUCE_MS 120000

/* RSS growth allowed over a flood of FLOOD connections, after a first flood
 * has warmed up the allocator. A leak of the smallest per-connection state
 * (a local session is about 9 KiB) would exceed it. AddressSanitizer keeps
 * freed memory in quarantine, so its builds get room for that; its
 * LeakSanitizer checks for leaks at exit instead. */
#if defined(__SANITIZE_ADDRESS__)
#define RSS_MARGIN_KB (64 * 1024)
#else
#define RSS_MARGIN_KB (4 * 1024)
#endif

static harness H;

static void setup(void)
{
    harness_reset(&H);
    unsetenv("RINGD_LOCAL_RANK");
    unsetenv("LOCAL_RANK");
}

static void teardown(void)
{
    harness_cleanup(&H);
}

TestSuite(tcp, .init = setup, .fini = teardown, .timeout = 600);
TestSuite(unix_socket, .init = setup, .fini = teardown, .timeout = 600);
TestSuite(access, .init = setup, .fini = teardown, .timeout = 300);

/* ---- the ring still works ------------------------------------------------------------------- */

typedef struct {
    pthread_mutex_t mu;
    char failure[512];
} ar_job;

static int ar_fail(ar_job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int ar_fail(ar_job *j, const char *fmt, ...)
{
    pthread_mutex_lock(&j->mu);
    if (!j->failure[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(j->failure, sizeof j->failure, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&j->mu);
    return -1;
}

/* ROUNDS int32 sum allreduces; rank r contributes (r + 1) * (i + k) to
 * element i of round k, so every element has one exact expected value. */
static int allreduce_thread(int idx, void *arg)
{
    ar_job *j = arg;
    ringd_client *c;
    if (ringd_connect(H.d[idx].socket, &c) < 0)
        return ar_fail(j, "host %d: connect: %s", idx, ringd_last_error(NULL));
    int rank = ringd_rank(c), n = ringd_size(c), rc = 0;
    int32_t *buf = ringd_alloc(c, COUNT * sizeof *buf);
    if (!buf) {
        rc = ar_fail(j, "rank %d: alloc: %s", rank, ringd_last_error(c));
        goto out;
    }
    for (int k = 0; k < ROUNDS && rc == 0; k++) {
        for (int i = 0; i < COUNT; i++)
            buf[i] = (rank + 1) * (i + k);
        if (ringd_allreduce(c, buf, COUNT, RINGD_INT32, RINGD_SUM) < 0) {
            rc = ar_fail(j, "rank %d: allreduce %d of %d: %s", rank, k + 1, ROUNDS,
                         ringd_last_error(c));
            break;
        }
        for (int i = 0; i < COUNT; i++) {
            int32_t want = (i + k) * n * (n + 1) / 2;
            if (buf[i] != want) {
                rc = ar_fail(j, "rank %d: allreduce %d of %d: element %d is %d, expected %d", rank,
                             k + 1, ROUNDS, i, buf[i], want);
                break;
            }
        }
    }
    ringd_free(c, buf);
out:
    ringd_close(c);
    return rc;
}

static void assert_allreduces_correct(void)
{
    ar_job j = {.mu = PTHREAD_MUTEX_INITIALIZER};
    int rc = harness_run_threads(&H, H.n, allreduce_thread, &j, ALLREDUCE_MS);
    cr_assert_str_empty(j.failure, "%s", j.failure);
    cr_assert_eq(rc, 0, "%s", H.err);
}

static void assert_running(void)
{
    for (int i = 0; i < H.n; i++)
        cr_assert(kill(H.d[i].pid, 0) == 0, "daemon %s is gone", H.d[i].name);
}

static void start_ring(const char *what, const char *extra)
{
    char yaml[1024];
    snprintf(yaml, sizeof yaml, YAML "%s", extra ? extra : "");
    cr_assert_eq(harness_init(&H, HOSTS, yaml), 0, "%s", H.err);
    cr_assert_eq(harness_start(&H, harness_seed(what), 0), 0, "%s", H.err);
    assert_allreduces_correct(); /* the ring is up, the allocator warm */
}

/* ---- logs and memory ------------------------------------------------------------------------ */

static int count_in_log(const harness_daemon *d, const char *needle)
{
    FILE *f = fopen(d->log, "r");
    if (!f) return 0;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

/* Waits until d's log has at least min lines containing needle; returns the count. */
static int wait_log(const harness_daemon *d, const char *needle, int min)
{
    int64_t deadline = harness_now_ms() + LOG_MS;
    int n;
    while ((n = count_in_log(d, needle)) < min && harness_now_ms() < deadline)
        harness_sleep_ms(20);
    return n;
}

static void assert_logged(const harness_daemon *d, const char *needle, int min)
{
    int n = wait_log(d, needle, min);
    if (n < min) harness_dump_logs(&H, 30);
    cr_assert_geq(n, min, "%s: %d line(s) with \"%s\" in its log, expected at least %d", d->name, n,
                  needle, min);
}

static long rss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1) break;
    if (f) fclose(f);
    cr_assert_gt(kb, 0, "cannot read VmRSS of pid %d", (int)pid);
    return kb;
}

/* ---- connections ---------------------------------------------------------------------------- */

static int tcp_connect(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert(fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0,
              "connect to port %u: %s", (unsigned)port, strerror(errno));
    return fd;
}

static int unix_connect(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    cr_assert(fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0, "connect to %s: %s",
              path, strerror(errno));
    return fd;
}

/* Sends what it can of buf (the daemon may close before reading it all). */
static void send_some(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n <= 0) return;
        p += n;
        len -= (size_t)n;
    }
}

/* Waits until the daemon closes fd (reading and dropping whatever it sends
 * first, a refusal say), then closes it. Returns 1 if it did in time. */
static int closed_by_daemon(int fd)
{
    int64_t deadline = harness_now_ms() + CLOSE_MS;
    uint8_t sink[4096];
    for (;;) {
        int64_t left = deadline - harness_now_ms();
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, (int)left) <= 0) break;
        ssize_t n = recv(fd, sink, sizeof sink, 0);
        if (n == 0 || (n < 0 && errno != EINTR)) {
            close(fd);
            return 1;
        }
    }
    close(fd);
    return 0;
}

/* Sends bytes on a new connection and expects the daemon to hang up on it;
 * half_close also ends our side, as a truncated stream does. */
static void send_bad(int fd, const void *buf, size_t len, int half_close, const char *what)
{
    send_some(fd, buf, len);
    if (half_close) shutdown(fd, SHUT_WR);
    cr_assert(closed_by_daemon(fd), "%s: the daemon kept the connection open", what);
}

static size_t random_bytes(uint64_t *seed, uint8_t *buf, size_t cap)
{
    size_t len = 1 + harness_rand(seed) % cap;
    for (size_t i = 0; i < len; i++)
        buf[i] = (uint8_t)harness_rand(seed);
    return len;
}

/* Opens and drops FLOOD connections, each right after connecting. */
static void flood(int tcp)
{
    int64_t deadline = harness_now_ms() + FLOOD_MS;
    for (int i = 0; i < FLOOD; i++) {
        cr_assert_lt(harness_now_ms(), deadline, "only %d connections in %d ms", i, FLOOD_MS);
        int fd = tcp ? tcp_connect(H.d[0].port) : unix_connect(H.d[0].socket);
        close(fd);
    }
}

/* Floods twice: the second flood must not grow the daemon's RSS by more than
 * RSS_MARGIN_KB, and every dropped connection must have its log line. */
static void assert_flood_bounded(int tcp, const char *line)
{
    const harness_daemon *d = &H.d[0];
    int before = count_in_log(d, line);
    flood(tcp);
    assert_logged(d, line, before + FLOOD);
    long warm = rss_kb(d->pid);
    flood(tcp);
    assert_logged(d, line, before + 2 * FLOOD);
    long after = rss_kb(d->pid);
    fprintf(stderr, "%s flood: VmRSS %ld kB after %d connections, %ld kB after %d\n",
            tcp ? "tcp" : "unix", warm, FLOOD, after, 2 * FLOOD);
    cr_assert_leq(after - warm, RSS_MARGIN_KB,
                  "VmRSS grew by %ld kB over %d connections (allowed %d kB)", after - warm, FLOOD,
                  RSS_MARGIN_KB);
    assert_running();
}

/* ---- the TCP port --------------------------------------------------------------------------- */

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* A frame header as the wire has it: magic, version, type, flags, length. */
static void frame_header_bytes(uint8_t *b, uint32_t magic, uint8_t type, uint32_t length)
{
    put32(b, magic);
    b[4] = FRAME_VERSION;
    b[5] = type;
    b[6] = b[7] = 0;
    put32(b + 8, length);
}

Test(tcp, random_bytes_close_the_connection_with_a_log_line_and_the_ring_goes_on)
{
    start_ring("tcp random bytes", NULL);
    uint64_t seed = harness_seed("tcp random streams");
    static uint8_t buf[64 << 10];
    int before = count_in_log(&H.d[0], "dropped connection from 127.0.0.1");
    enum { STREAMS = 16 };
    for (int s = 0; s < STREAMS; s++) {
        size_t len = random_bytes(&seed, buf, s % 2 ? sizeof buf : 64);
        send_bad(tcp_connect(H.d[0].port), buf, len, s % 3 == 0, "random bytes");
    }
    assert_logged(&H.d[0], "dropped connection from 127.0.0.1", before + STREAMS);
    assert_running();
    assert_allreduces_correct();
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

Test(tcp, each_malformed_frame_closes_its_connection_saying_why)
{
    start_ring("tcp malformed", NULL);
    uint8_t b[FRAME_HEADER_SIZE + FRAME_MAX_CONTROL_BODY];
    const harness_daemon *d = &H.d[0];

    char line[256];

    /* The log says what the decoder says. */
    frame_header_bytes(b, FRAME_MAGIC, FRAME_HELLO, FRAME_MAX_CONTROL_BODY + 1);
    send_bad(tcp_connect(d->port), b, FRAME_HEADER_SIZE, 0, "oversized length");
    snprintf(line, sizeof line, "bad frame header: %s", frame_strerror(FRAME_ELENGTH));
    assert_logged(d, line, 1);

    frame_header_bytes(b, 0x47455420 /* "GET " */, FRAME_HELLO, 0);
    send_bad(tcp_connect(d->port), b, FRAME_HEADER_SIZE, 0, "wrong magic");
    snprintf(line, sizeof line, "bad frame header: %s", frame_strerror(FRAME_EMAGIC));
    assert_logged(d, line, 1);

    frame_header_bytes(b, FRAME_MAGIC, 99, 0);
    send_bad(tcp_connect(d->port), b, FRAME_HEADER_SIZE, 0, "unknown type");
    snprintf(line, sizeof line, "bad frame header: %s", frame_strerror(FRAME_ETYPE));
    assert_logged(d, line, 1);

    frame_header_bytes(b, FRAME_MAGIC, FRAME_DATA, FRAME_DATA_HEADER_SIZE);
    send_bad(tcp_connect(d->port), b, FRAME_HEADER_SIZE, 0, "DATA before HELLO");
    assert_logged(d, "unexpected DATA frame", 1);

    /* Cut short in the body, then closed: the daemon sees the end of it. */
    int before = count_in_log(d, "connection closed by peer");
    frame_hello h = {.n_hosts = HOSTS, .from_pos = 1, .to_pos = 0};
    snprintf(h.cluster, sizeof h.cluster, "test");
    snprintf(h.from_name, sizeof h.from_name, "h1");
    int n = frame_encode_hello(b, sizeof b, &h);
    cr_assert_gt(n, FRAME_HEADER_SIZE + 2);
    send_bad(tcp_connect(d->port), b, (size_t)n - 2, 1, "truncated HELLO");
    assert_logged(d, "connection closed by peer", before + 1);

    /* A HELLO from another cluster is refused; what follows is never read. */
    snprintf(h.cluster, sizeof h.cluster, "intruder");
    n = frame_encode_hello(b, sizeof b, &h);
    memset(b + n, 0xa5, 256);
    send_bad(tcp_connect(d->port), b, (size_t)n + 256, 0, "HELLO then garbage");
    assert_logged(d, "refused connection from 127.0.0.1", 1);
    assert_logged(d, "cluster \"intruder\" is not ours", 1);

    assert_running();
    assert_allreduces_correct();
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

Test(tcp, a_flood_of_1000_connections_dropped_leaves_memory_bounded_and_the_ring_working)
{
    start_ring("tcp flood", NULL);
    assert_flood_bounded(1, "dropped connection from 127.0.0.1");
    assert_allreduces_correct();
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

/* ---- the Unix socket ------------------------------------------------------------------------ */

/* "(pid N, uid U)" of this process, as the daemon logs a local peer. */
static const char *me(void)
{
    static char s[64];
    snprintf(s, sizeof s, "dropped local connection (pid %d, uid %u)", (int)getpid(),
             (unsigned)getuid());
    return s;
}

static void msg_header_bytes(uint8_t *b, uint32_t magic, uint8_t type, uint32_t length)
{
    frame_header_bytes(b, magic, type, length);
    b[4] = MSG_VERSION;
}

Test(unix_socket, random_bytes_close_the_session_with_a_log_line_and_the_ring_goes_on)
{
    start_ring("unix random bytes", NULL);
    uint64_t seed = harness_seed("unix random streams");
    static uint8_t buf[64 << 10];
    int before = count_in_log(&H.d[0], me());
    enum { STREAMS = 16 };
    for (int s = 0; s < STREAMS; s++) {
        size_t len = random_bytes(&seed, buf, s % 2 ? sizeof buf : 64);
        /* At least a header's worth, so that the daemon has something to
         * refuse rather than a short read to wait on. */
        if (len < MSG_HEADER_SIZE) len = MSG_HEADER_SIZE;
        send_bad(unix_connect(H.d[0].socket), buf, len, s % 3 == 0, "random bytes");
    }
    assert_logged(&H.d[0], me(), before + STREAMS);
    assert_running();
    assert_allreduces_correct();
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

Test(unix_socket, each_malformed_message_closes_its_session_saying_why)
{
    start_ring("unix malformed", NULL);
    uint8_t b[2 * (MSG_HEADER_SIZE + MSG_MAX_BODY)];
    const harness_daemon *d = &H.d[0];
    const char *sock = d->socket;
    char line[256];

    msg_header_bytes(b, MSG_MAGIC, MSG_HELLO, MSG_MAX_BODY + 1);
    send_bad(unix_connect(sock), b, MSG_HEADER_SIZE, 0, "oversized length");
    snprintf(line, sizeof line, "%s: bad message header: %s", me(), msg_strerror(MSG_ELENGTH));
    assert_logged(d, line, 1);

    msg_header_bytes(b, FRAME_MAGIC, MSG_HELLO, 0);
    send_bad(unix_connect(sock), b, MSG_HEADER_SIZE, 0, "wrong magic");
    snprintf(line, sizeof line, "%s: bad message header: %s", me(), msg_strerror(MSG_EMAGIC));
    assert_logged(d, line, 1);

    msg_header_bytes(b, MSG_MAGIC, 99, 0);
    send_bad(unix_connect(sock), b, MSG_HEADER_SIZE, 0, "unknown type");
    snprintf(line, sizeof line, "%s: bad message header: %s", me(), msg_strerror(MSG_ETYPE));
    assert_logged(d, line, 1);

    msg_status_req sr = {.id = 1};
    int n = msg_encode_status_req(b, sizeof b, &sr);
    send_bad(unix_connect(sock), b, (size_t)n, 0, "no HELLO first");
    snprintf(line, sizeof line, "%s: first message is STATUS_REQ, not HELLO", me());
    assert_logged(d, line, 1);

    msg_header_bytes(b, MSG_MAGIC, MSG_HELLO, 3);
    memset(b + MSG_HEADER_SIZE, 0, 3);
    send_bad(unix_connect(sock), b, MSG_HEADER_SIZE + 3, 0, "HELLO of the wrong size");
    snprintf(line, sizeof line, "%s: bad HELLO message: %s", me(), msg_strerror(MSG_EMALFORMED));
    assert_logged(d, line, 1);

    msg_hello h = {.local_rank = -1, .pid = (uint32_t)getpid(), .flags = MSG_HELLO_OBSERVER};
    n = msg_encode_hello(b, sizeof b, &h);
    send_bad(unix_connect(sock), b, (size_t)n - 3, 1, "truncated HELLO");
    snprintf(line, sizeof line, "%s: client disconnected in the middle of a message (%d bytes)",
             me(), n - 3);
    assert_logged(d, line, 1);

    /* Welcomed, then garbage: the session ends the same way. */
    n = msg_encode_hello(b, sizeof b, &h);
    memset(b + n, 0x5a, 64);
    send_bad(unix_connect(sock), b, (size_t)n + 64, 0, "HELLO then garbage");
    snprintf(line, sizeof line, "%s: bad message header: %s", me(), msg_strerror(MSG_EMAGIC));
    assert_logged(d, line, 2);

    /* A session that never says anything is closed after connect_timeout. */
    int quiet = unix_connect(sock);
    cr_assert(closed_by_daemon(quiet), "a silent session was kept open");
    snprintf(line, sizeof line, "%s: no HELLO within connect_timeout", me());
    assert_logged(d, line, 1);

    assert_running();
    assert_allreduces_correct();
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

Test(unix_socket, a_flood_of_1000_connections_dropped_leaves_memory_bounded_and_the_ring_working)
{
    start_ring("unix flood", NULL);
    char line[128];
    snprintf(line, sizeof line, "local session closed (pid %d): client disconnected",
             (int)getpid());
    assert_flood_bounded(0, line);
    assert_allreduces_correct();
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

/* ---- local access --------------------------------------------------------------------------- */

/* Runs ringd_connect() on socket as uid, gid and supplementary group sup
 * (-1: none) in a child process; returns its result code. */
static int connect_as(const char *socket, uid_t uid, gid_t gid, int sup, char *msg, size_t len)
{
    int pipefd[2];
    cr_assert_eq(pipe(pipefd), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        gid_t groups[1] = {(gid_t)sup};
        int rc = RINGD_EINVAL;
        char text[1024] = "cannot change credentials";
        if (setgroups(sup < 0 ? 0 : 1, groups) == 0 && setgid(gid) == 0 && setuid(uid) == 0) {
            ringd_client *c;
            rc = ringd_connect(socket, &c);
            snprintf(text, sizeof text, "%s", rc < 0 ? ringd_last_error(NULL) : "");
            if (rc == 0) ringd_close(c);
        }
        ssize_t ignored = write(pipefd[1], text, strlen(text));
        (void)ignored;
        _exit(-rc);
    }
    close(pipefd[1]);
    ssize_t n = read(pipefd[0], msg, len - 1);
    msg[n > 0 ? n : 0] = '\0';
    close(pipefd[0]);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status), "connecting child died");
    return -WEXITSTATUS(status);
}

/* Starts one daemon with extra config lines, its socket reachable by
 * anyone who has the permission on the file itself. */
static void start_one(const char *what, const char *extra)
{
    cr_assert_eq(harness_init(&H, 1, extra), 0, "%s", H.err);
    cr_assert_eq(chmod(H.dir, 0711), 0, "chmod %s: %s", H.dir, strerror(errno));
    cr_assert_eq(harness_start(&H, harness_seed(what), 0), 0, "%s", H.err);
}

Test(access, the_socket_is_created_with_mode_0660_by_default)
{
    start_one("default mode", NULL);
    struct stat st;
    cr_assert_eq(stat(H.d[0].socket, &st), 0);
    cr_assert(S_ISSOCK(st.st_mode));
    cr_assert_eq(st.st_mode & 07777, 0660, "mode %04o", (unsigned)(st.st_mode & 07777));
    char msg[1024];
    cr_assert_eq(connect_as(H.d[0].socket, 65534, 65534, -1, msg, sizeof msg), RINGD_ECONNECT,
                 "a user outside the socket's group connected: %s", msg);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

Test(access, the_socket_gets_socket_mode_and_socket_group)
{
    /* A group every Debian system has: nogroup, gid 65534. */
    struct group *g = getgrgid(65534);
    char extra[256];
    snprintf(extra, sizeof extra, "socket_mode: \"0620\"\nsocket_group: %s\n",
             g ? g->gr_name : "65534");
    start_one("mode and group", extra);
    struct stat st;
    cr_assert_eq(stat(H.d[0].socket, &st), 0);
    cr_assert_eq(st.st_mode & 07777, 0620, "mode %04o", (unsigned)(st.st_mode & 07777));
    cr_assert_eq(st.st_gid, 65534);
    /* Group members may write, hence connect; the rest may not. */
    char msg[1024];
    cr_assert_eq(connect_as(H.d[0].socket, 4242, 65534, -1, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(connect_as(H.d[0].socket, 4242, 4242, -1, msg, sizeof msg), RINGD_ECONNECT, "%s",
                 msg);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

Test(access, allowed_uids_and_gids_refuse_other_processes_with_eperm_and_a_log_line)
{
    start_one("allowed ids", "socket_mode: \"0666\"\nallowed_uids: [1234]\nallowed_gids: [4321]\n");
    const char *sock = H.d[0].socket;
    char msg[1024];
    /* In allowed_uids; in allowed_gids by primary group; by a supplementary group. */
    cr_assert_eq(connect_as(sock, 1234, 1234, -1, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(connect_as(sock, 5555, 4321, -1, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(connect_as(sock, 5555, 5555, 4321, msg, sizeof msg), 0, "%s", msg);
    /* Root always may: it could get round us anyway. */
    cr_assert_eq(connect_as(sock, 0, 0, -1, msg, sizeof msg), 0, "%s", msg);

    cr_assert_eq(connect_as(sock, 5555, 5555, -1, msg, sizeof msg), RINGD_EPERM, "%s", msg);
    cr_assert_not_null(strstr(msg, "uid 5555 (gid 5555) is not allowed"), "%s", msg);
    assert_logged(&H.d[0], "refused local client (pid ", 1);
    assert_logged(&H.d[0], "uid 5555 (gid 5555) is not allowed", 1);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

/* Rewrites the running config with from replaced by to, reloads the
 * daemon and waits for it to log `logged`. */
static void reload_with(const char *from, const char *to, const char *logged)
{
    char path[PATH_MAX];
    cr_assert_eq(harness_config_variant(&H, "ringd.yaml", from, to, path, sizeof path), 0, "%s",
                 H.err);
    cr_assert_str_eq(path, H.config);
    harness_signal(&H, 0, SIGHUP);
    cr_assert_eq(harness_wait_log(&H, 0, logged, 20000), 0, "%s", H.err);
}

Test(access, a_reload_applies_allowed_uids_and_socket_mode_to_the_next_clients_at_once)
{
    /* Two local ranks: one stays connected across the reloads. */
    cr_assert_eq(harness_init_local(&H, 1, 2, "socket_mode: \"0666\"\nallowed_uids: [1234]\n"), 0,
                 "%s", H.err);
    cr_assert_eq(chmod(H.dir, 0711), 0, "chmod %s: %s", H.dir, strerror(errno));
    cr_assert_eq(harness_start(&H, harness_seed("access reload"), 0), 0, "%s", H.err);
    const char *sock = H.d[0].socket;
    char msg[1024];
    ringd_client *kept;
    cr_assert_eq(ringd_connect(sock, &kept), 0, "%s", ringd_last_error(NULL));
    cr_assert_eq(connect_as(sock, 5555, 5555, -1, msg, sizeof msg), RINGD_EPERM, "%s", msg);

    reload_with("allowed_uids: [1234]", "allowed_uids: [1234, 5555]", "reload: allowed_uids");
    cr_assert_eq(connect_as(sock, 5555, 5555, -1, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(count_in_log(&H.d[0], "re-forming"), 0, "a change of access re-formed the ring");

    /* Owner-only: a user the list allows cannot even open the file now. */
    reload_with("socket_mode: \"0666\"", "socket_mode: \"0600\"", "reload: socket_mode");
    struct stat st;
    cr_assert_eq(stat(sock, &st), 0);
    cr_assert_eq(st.st_mode & 07777, 0600, "mode %04o", (unsigned)(st.st_mode & 07777));
    cr_assert_eq(connect_as(sock, 1234, 1234, -1, msg, sizeof msg), RINGD_ECONNECT, "%s", msg);

    /* The session that was connected before both reloads still answers. */
    ringd_membership_info info;
    cr_assert_eq(ringd_membership(kept, &info), 0, "%s", ringd_last_error(kept));
    cr_assert_eq(info.size, 2);
    ringd_close(kept);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

/* Runs ringd on H's config and returns its exit status, stderr in err. */
static int run_ringd(char *err, size_t len)
{
    char *argv[] = {(char *)RINGD_BIN, (char *)"--config", H.config,
                    (char *)"--host",  (char *)"h0",       NULL};
    char out[1024];
    int status;
    cr_assert_eq(harness_run(&H, argv, 20000, &status, out, sizeof out, err, len), 0, "%s", H.err);
    cr_assert(WIFEXITED(status), "ringd died of signal %d:\n%s", WTERMSIG(status), err);
    return WEXITSTATUS(status);
}

Test(access, a_bad_socket_mode_is_refused_with_its_place_in_the_file)
{
    cr_assert_eq(harness_init(&H, 1, "socket_mode: \"0868\"\n"), 0, "%s", H.err);
    char err[4096], want[PATH_MAX + 128];
    cr_assert_eq(run_ringd(err, sizeof err), 2, "%s", err);
    snprintf(want, sizeof want, "%s:4:14: socket_mode: expected octal permission bits", H.config);
    cr_assert_not_null(strstr(err, want), "expected \"%s\" in:\n%s", want, err);
}

Test(access, an_unknown_socket_group_stops_the_daemon_with_its_place_in_the_file)
{
    cr_assert_eq(harness_init(&H, 1, "socket_group: no-such-group-6\n"), 0, "%s", H.err);
    char err[4096], want[PATH_MAX + 128];
    cr_assert_eq(run_ringd(err, sizeof err), 1, "%s", err);
    snprintf(want, sizeof want, "%s:4:15: socket_group: no group \"no-such-group-6\" on this host",
             H.config);
    cr_assert_not_null(strstr(err, want), "expected \"%s\" in:\n%s", want, err);
}
