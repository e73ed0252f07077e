/*
 * harness.c - starts real ringd daemons for integration tests; see harness.h.
 *
 * Processes are tracked two ways: by the harness struct of the test (which
 * knows names, logs and how each one should end) and by a process-wide
 * registry of live pids, which an atexit handler kills so that no daemon
 * outlives a test process that exits without reaching its cleanup. A test
 * process killed outright is covered by PR_SET_PDEATHSIG in each child.
 */
#include "harness.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef RINGD_BIN
#error "RINGD_BIN must be defined to the path of the ringd binary"
#endif

#define POLL_MS 10 /* period of every wait-for-condition loop */
#define KILL_REAP_TIMEOUT_MS 5000
#define LOG_TAIL_LINES 40
#define LOG_SCAN_MAX (64u << 20)
#define REGISTRY_MAX 256

/* Criterion's runner leaks a small allocation when it runs tests in parallel,
 * which makes LeakSanitizer fail a sanitized test binary whose tests all
 * passed. LeakSanitizer asks for this hook at start-up; it is unused in a
 * build without sanitizers. */
const char *__lsan_default_suppressions(void);

const char *__lsan_default_suppressions(void)
{
    return "leak:libcriterion.so\n";
}

/* ---- pid registry -------------------------------------------------------- */

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static pid_t registry[REGISTRY_MAX];
static bool registry_hooked;

static void kill_registered(void)
{
    pthread_mutex_lock(&registry_mu);
    for (int i = 0; i < REGISTRY_MAX; i++) {
        if (registry[i] > 0) {
            kill(registry[i], SIGKILL);
            waitpid(registry[i], NULL, 0);
            registry[i] = 0;
        }
    }
    pthread_mutex_unlock(&registry_mu);
}

static int register_pid(pid_t pid)
{
    int rc = -1;
    pthread_mutex_lock(&registry_mu);
    if (!registry_hooked) {
        atexit(kill_registered);
        registry_hooked = true;
    }
    for (int i = 0; i < REGISTRY_MAX; i++) {
        if (registry[i] == 0) {
            registry[i] = pid;
            rc = 0;
            break;
        }
    }
    pthread_mutex_unlock(&registry_mu);
    return rc;
}

static void unregister_pid(pid_t pid)
{
    pthread_mutex_lock(&registry_mu);
    for (int i = 0; i < REGISTRY_MAX; i++) {
        if (registry[i] == pid) registry[i] = 0;
    }
    pthread_mutex_unlock(&registry_mu);
}

/* ---- small helpers --------------------------------------------------------- */

static int fail(harness *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(harness *h, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->err, sizeof h->err, fmt, ap);
    va_end(ap);
    fprintf(stderr, "harness: %s\n", h->err);
    return -1;
}

int64_t harness_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void harness_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    /* Restart after a signal, a bounded number of times. */
    for (int i = 0; i < 100 && nanosleep(&ts, &ts) < 0 && errno == EINTR; i++)
        ;
}

uint64_t harness_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t harness_seed(const char *what)
{
    const char *env = getenv("RINGD_TEST_SEED");
    uint64_t seed;
    if (env && *env) {
        seed = strtoull(env, NULL, 0);
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t s = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
        s ^= (uint64_t)getpid() << 32;
        seed = harness_rand(&s);
    }
    fprintf(stderr, "%s: seed %llu (RINGD_TEST_SEED=%llu reproduces it)\n", what,
            (unsigned long long)seed, (unsigned long long)seed);
    return seed;
}

static const char *describe_status(int status, char *buf, size_t len)
{
    if (WIFEXITED(status))
        snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, len, "killed by signal %d (%s)%s", WTERMSIG(status),
                 strsignal(WTERMSIG(status)), WCOREDUMP(status) ? ", core dumped" : "");
    else
        snprintf(buf, len, "status 0x%x", status);
    return buf;
}

/* Reaps d if it has exited. Returns true if d is (now) reaped. */
static bool reap_nohang(harness_daemon *d)
{
    if (!d->started || d->reaped) return d->reaped;
    int st;
    pid_t r = waitpid(d->pid, &st, WNOHANG);
    if (r == d->pid || (r < 0 && errno == ECHILD)) {
        d->reaped = true;
        d->status = r == d->pid ? st : 0;
        unregister_pid(d->pid);
    }
    return d->reaped;
}

/* Waits up to timeout_ms for pid to exit; returns true and its status if so. */
static bool wait_pid(pid_t pid, int timeout_ms, int *status)
{
    int64_t deadline = harness_now_ms() + timeout_ms;
    for (int i = 0; i <= timeout_ms / POLL_MS + 1; i++) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid) return true;
        if (r < 0 && errno != EINTR) {
            *status = 0;
            return true;
        }
        if (harness_now_ms() > deadline) break;
        harness_sleep_ms(POLL_MS);
    }
    return false;
}

static void kill_and_reap(harness_daemon *d)
{
    if (!d->started || reap_nohang(d)) return;
    kill(d->pid, SIGKILL);
    d->sent_signal = SIGKILL;
    int st;
    if (wait_pid(d->pid, KILL_REAP_TIMEOUT_MS, &st)) {
        d->reaped = true;
        d->status = st;
        unregister_pid(d->pid);
    } else {
        fprintf(stderr, "harness: %s (pid %d) survived SIGKILL for %d ms\n", d->name, (int)d->pid,
                KILL_REAP_TIMEOUT_MS);
    }
}

/* Reads at most max bytes from the end of path into a malloc'ed string. */
static char *read_tail(const char *path, size_t max, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) < 0) {
        close(fd);
        return NULL;
    }
    size_t size = (size_t)st.st_size;
    size_t want = size < max ? size : max;
    char *buf = malloc(want + 1);
    if (!buf) {
        close(fd);
        return NULL;
    }
    ssize_t got = pread(fd, buf, want, (off_t)(size - want));
    close(fd);
    if (got < 0) got = 0;
    buf[got] = '\0';
    *len = (size_t)got;
    return buf;
}

static void print_log_tail(const harness_daemon *d, int lines)
{
    size_t len = 0;
    char *buf = read_tail(d->log, 64 * 1024, &len);
    if (!buf) {
        fprintf(stderr, "---- %s: no log at %s\n", d->name, d->log);
        return;
    }
    /* Find the start of the last `lines` lines. */
    size_t start = len;
    int seen = 0;
    if (start > 0 && buf[start - 1] == '\n') start--;
    while (start > 0) {
        if (buf[start - 1] == '\n' && ++seen == lines) break;
        start--;
    }
    fprintf(stderr, "---- last %d lines of %s's log (%s):\n", lines, d->name, d->log);
    const char *p = buf + start;
    for (int i = 0; i < lines && *p; i++) {
        const char *nl = strchr(p, '\n');
        int n = nl ? (int)(nl - p) : (int)strlen(p);
        fprintf(stderr, "  %s| %.*s\n", d->name, n, p);
        p += n + (nl ? 1 : 0);
    }
    fprintf(stderr, "---- end of %s's log\n", d->name);
    free(buf);
}

/* The machine's load, for a failure to be read against: a rare failure at
 * load 6 on 2 cores is still a bug until proven otherwise, and the proof
 * starts here (and at the daemons' "heartbeat ... late" lines), with the
 * factor the test's timings were stretched by (timing.h). */
static void print_load(void)
{
    double l1 = -1, l5 = -1, l15 = -1;
    FILE *f = fopen("/proc/loadavg", "re");
    if (f) {
        if (fscanf(f, "%lf %lf %lf", &l1, &l5, &l15) != 3) l1 = -1;
        fclose(f);
    }
    char timing[160];
    harness_describe_timing(timing, sizeof timing);
    fprintf(stderr, "harness: load average %.2f %.2f %.2f (1, 5, 15 min) on %ld CPUs; %s\n", l1, l5,
            l15, sysconf(_SC_NPROCESSORS_ONLN), timing);
}

void harness_dump_logs(const harness *h, int tail_lines)
{
    print_load();
    for (int i = 0; i < h->n; i++) {
        if (h->d[i].started) print_log_tail(&h->d[i], tail_lines);
    }
}

/* Returns the sanitizer report found in d's log, or NULL. */
static const char *sanitizer_report(const harness_daemon *d)
{
    static const char *const marks[] = {"ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                                        "runtime error:", "WARNING: ThreadSanitizer"};
    size_t len = 0;
    char *buf = read_tail(d->log, LOG_SCAN_MAX, &len);
    const char *found = NULL;
    for (size_t i = 0; buf && !found && i < sizeof marks / sizeof marks[0]; i++) {
        if (strstr(buf, marks[i])) found = marks[i];
    }
    free(buf);
    return found;
}

/* Prints the sanitizer report in d's log, from its first line on (it may be
 * far from the tail). */
static void print_report(const harness_daemon *d, const char *mark)
{
    size_t len = 0;
    char *buf = read_tail(d->log, LOG_SCAN_MAX, &len);
    const char *at = buf ? strstr(buf, mark) : NULL;
    if (at) {
        while (at > buf && at[-1] != '\n')
            at--;
        int lines = 0;
        const char *end = at;
        while (*end && lines < 40)
            lines += *end++ == '\n';
        fprintf(stderr, "---- the report in %s's log:\n%.*s---- end of the report\n", d->name,
                (int)(end - at), at);
    }
    free(buf);
}

/* ---- setup ------------------------------------------------------------------ */

void harness_reset(harness *h)
{
    memset(h, 0, sizeof *h);
}

/* The ports a test's daemons listen on are picked below the kernel's
 * ephemeral range (ip_local_port_range), which connect() never takes a
 * source port from: a port found free is then not taken by some link's
 * outgoing connection before its daemon binds it, as one picked by
 * bind(port 0) from inside that range was under parallel tests. */
static void port_window(unsigned *lo, unsigned *hi)
{
    unsigned a = 32768, b = 60999;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");
    if (f) {
        if (fscanf(f, "%u %u", &a, &b) != 2) a = 32768, b = 60999;
        fclose(f);
    }
    if (a >= 12000) { /* below the range */
        *lo = 10000, *hi = a - 1;
    } else if (b <= 63000) { /* above it */
        *lo = b + 1, *hi = 65535;
    } else { /* no room outside: inside it, as before */
        *lo = a, *hi = b;
    }
}

/* Binds fd to 127.0.0.1:port; 0 or -1. */
static int try_port(int fd, unsigned port)
{
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return bind(fd, (struct sockaddr *)&sa, sizeof sa);
}

/* Whether port is one of the first n picked. */
static int picked(const harness *h, int n, unsigned port)
{
    for (int i = 0; i < n; i++)
        if (h->d[i].port == port) return 1;
    return 0;
}

/* Takes the lock of port: an abstract Unix socket named after it, which
 * only one process of this machine (of its network namespace) can bind,
 * and which goes when that process closes it or exits, leaving no file.
 * Every harness holds the locks of the ports its daemons were given for as
 * long as it runs them: a port is free to bind while its daemon is not
 * started yet, or killed and not yet back (the chaos tests), and a harness
 * beside it must not pick it then (a daemon of test_faults found its port
 * taken, "address already in use", in a suite of four slots). The fd, or
 * -1 if another holds it. */
static int lock_port(unsigned port)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int len = snprintf(sa.sun_path + 1, sizeof sa.sun_path - 1, "ringd-test-port-%u", port);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    socklen_t size = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len);
    if (bind(fd, (struct sockaddr *)&sa, size) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void unlock_ports(harness *h)
{
    for (int i = 0; i < h->n; i++) {
        if (h->d[i].port_locked) close(h->d[i].port_lock);
        h->d[i].port_locked = false;
    }
}

/* Picks n distinct free ports on 127.0.0.1 for the daemons, at random in
 * port_window(), each locked (lock_port()) until harness_cleanup(). */
static int pick_ports(harness *h, int n)
{
    int fds[HARNESS_MAX_HOSTS];
    int rc = 0, opened = 0;
    unsigned lo, hi;
    port_window(&lo, &hi);
    /* Held bound until all are picked, so that no other process takes
     * one meanwhile. Distinct by the check: with SO_REUSEADDR (a port in
     * TIME_WAIT is free), Linux lets sockets that do not listen bind one
     * port together (test_keyed met two hosts on one port). */
    /* Not from RINGD_TEST_SEED: two tests replaying one seed side by side
     * must not pick the same ports. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t state = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    state ^= (uint64_t)getpid() << 32;
    for (; opened < n; opened++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            rc = fail(h, "socket: %s", strerror(errno));
            break;
        }
        fds[opened] = fd;
        unsigned port = 0;
        for (int tries = 0; tries < 200 && !port; tries++) {
            unsigned p = lo + (unsigned)(harness_rand(&state) % (hi - lo + 1));
            if (picked(h, opened, p)) continue;
            int lock = lock_port(p);
            if (lock < 0) continue;
            if (try_port(fd, p) == 0) {
                port = p;
                h->d[opened].port_lock = lock;
                h->d[opened].port_locked = true;
            } else {
                close(lock);
            }
        }
        if (!port) {
            rc = fail(h, "no free port on 127.0.0.1 in %u..%u after 200 tries", lo, hi);
            opened++;
            break;
        }
        h->d[opened].port = (uint16_t)port;
    }
    for (int i = 0; i < opened; i++)
        close(fds[i]);
    return rc;
}

int harness_write_file(harness *h, const char *name, const char *text, char *path, size_t pathlen)
{
    char tmp[PATH_MAX];
    if (!path) {
        path = tmp;
        pathlen = sizeof tmp;
    }
    if (!h->dir[0]) return fail(h, "harness_write_file(%s): harness_init() was not called", name);
    snprintf(path, pathlen, "%s/%s", h->dir, name);
    FILE *f = fopen(path, "we");
    if (!f) return fail(h, "%s: %s", path, strerror(errno));
    size_t len = strlen(text);
    bool ok = fwrite(text, 1, len, f) == len;
    ok = fclose(f) == 0 && ok;
    if (!ok) return fail(h, "%s: write failed", path);
    return 0;
}

int harness_config_variant(harness *h, const char *name, const char *from, const char *to,
                           char *path, size_t pathlen)
{
    FILE *f = fopen(h->config, "r");
    if (!f) return fail(h, "cannot read %s: %s", h->config, strerror(errno));
    char text[16384], out[16384 + 512];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    char *at = strstr(text, from);
    if (!at) return fail(h, "%s is not in %s", from, h->config);
    snprintf(out, sizeof out, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    return harness_write_file(h, name, out, path, pathlen);
}

int harness_write_key(harness *h, const char *name, const char *key, char *path, size_t pathlen)
{
    if (harness_write_file(h, name, key, path, pathlen) < 0) return -1;
    if (chmod(path, 0600) < 0) return fail(h, "chmod %s: %s", path, strerror(errno));
    return 0;
}

int harness_write_all(int fd, const void *buf, size_t n)
{
    const uint8_t *b = buf;
    while (n > 0) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

int harness_wait_log(harness *h, int i, const char *text, int timeout_ms)
{
    int64_t end = harness_now_ms() + timeout_ms;
    do {
        size_t len;
        char *tail = read_tail(h->d[i].log, 1 << 20, &len);
        int found = tail && strstr(tail, text);
        free(tail);
        if (found) return 0;
        harness_sleep_ms(20);
    } while (harness_now_ms() < end);
    return fail(h, "%s never logged \"%s\" within %d ms", h->d[i].name, text, timeout_ms);
}

int harness_init(harness *h, int n, const char *extra_yaml)
{
    return harness_init_local(h, n, 1, extra_yaml);
}

int harness_init_local(harness *h, int n, int local_clients, const char *extra_yaml)
{
    harness_reset(h);
    if (n < 1 || n > HARNESS_MAX_HOSTS)
        return fail(h, "harness_init: %d hosts, expected 1..%d", n, HARNESS_MAX_HOSTS);
    /* /tmp rather than $TMPDIR: socket paths must fit in 108 bytes. */
    snprintf(h->dir, sizeof h->dir, "/tmp/ringd-test-XXXXXX");
    if (!mkdtemp(h->dir)) {
        int e = errno;
        h->dir[0] = '\0';
        return fail(h, "mkdtemp: %s", strerror(e));
    }
    h->n = n;
    if (pick_ports(h, n) < 0) return -1;

    size_t cap = 4096 + (extra_yaml ? strlen(extra_yaml) : 0) + (size_t)n * 256;
    char *text = malloc(cap);
    if (!text) return fail(h, "out of memory");
    size_t off = (size_t)snprintf(
        text, cap, "# written by the ringd test harness\ncluster: test\nlocal_clients: %d\n%s",
        local_clients, extra_yaml ? extra_yaml : "");
    off += (size_t)snprintf(text + off, cap - off, "hosts:\n");
    for (int i = 0; i < n; i++) {
        harness_daemon *d = &h->d[i];
        char name[sizeof d->name];
        snprintf(name, sizeof name, "h%d", i);
        memcpy(d->name, name, sizeof name);
        snprintf(d->socket, sizeof d->socket, "%s/%s.sock", h->dir, name);
        snprintf(d->log, sizeof d->log, "%s/%s.log", h->dir, name);
        off += (size_t)snprintf(text + off, cap - off,
                                "  - name: %s\n    address: 127.0.0.1:%u\n    socket: %s\n",
                                d->name, (unsigned)d->port, d->socket);
    }
    int rc = harness_write_file(h, "ringd.yaml", text, h->config, sizeof h->config);
    free(text);
    return rc;
}

/* ---- processes ----------------------------------------------------------------- */

/* Forks and execs argv with stdin from /dev/null and stdout/stderr to the
 * given files (opened in append mode, so a restarted daemon keeps its history).
 * The child dies with the calling thread (PR_SET_PDEATHSIG). */
static pid_t spawn(harness *h, char *const argv[], const char *out_path, const char *err_path)
{
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    int out = open(out_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    int err = err_path == out_path
                  ? out
                  : open(err_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (devnull < 0 || out < 0 || err < 0) {
        fail(h, "open %s: %s",
             out < 0   ? out_path
             : err < 0 ? err_path
                       : "/dev/null",
             strerror(errno));
        goto done;
    }
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        /* Only async-signal-safe calls from here on. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(126);
        if (dup2(devnull, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) _exit(126);
        /* Leave Criterion's own pipes and sockets behind. */
        close_range(3, ~0u, 0);
        execv(argv[0], argv);
        static const char msg[] = "harness: exec failed\n";
        ssize_t ignored = write(2, msg, sizeof msg - 1);
        (void)ignored;
        _exit(127);
    }
    if (pid < 0) {
        fail(h, "fork: %s", strerror(errno));
    } else if (register_pid(pid) < 0) {
        fprintf(stderr, "harness: pid registry full; pid %d is not covered by the exit handler\n",
                (int)pid);
    }
    close(devnull);
    close(out);
    if (err != out) close(err);
    return pid;
done:
    if (devnull >= 0) close(devnull);
    if (out >= 0) close(out);
    if (err >= 0 && err != out) close(err);
    return -1;
}

int harness_spawn(harness *h, int i)
{
    if (i < 0 || i >= h->n) return fail(h, "harness_spawn: no host %d", i);
    harness_daemon *d = &h->d[i];
    if (d->started && !reap_nohang(d))
        return fail(h, "harness_spawn: %s is already running (pid %d)", d->name, (int)d->pid);
    char *argv[] = {
        (char *)RINGD_BIN, (char *)"--config", h->config, (char *)"--host", d->name, NULL};
    pid_t pid = spawn(h, argv, d->log, d->log);
    if (pid < 0) return -1;
    d->pid = pid;
    d->started = true;
    d->reaped = false;
    d->status = 0;
    d->sent_signal = 0;
    return 0;
}

static int try_connect(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
    close(fd);
    return rc;
}

int harness_wait_ready(harness *h, int i, int timeout_ms)
{
    harness_daemon *d = &h->d[i];
    if (!d->started) return fail(h, "harness_wait_ready: %s was not started", d->name);
    int64_t start = harness_now_ms(), deadline = start + timeout_ms;
    for (int iter = 0; iter <= timeout_ms / POLL_MS + 1; iter++) {
        if (reap_nohang(d)) {
            char how[96];
            print_log_tail(d, LOG_TAIL_LINES);
            return fail(h, "%s (pid %d) %s before its socket %s accepted connections", d->name,
                        (int)d->pid, describe_status(d->status, how, sizeof how), d->socket);
        }
        if (try_connect(d->socket) == 0) return 0;
        if (harness_now_ms() > deadline) break;
        harness_sleep_ms(POLL_MS);
    }
    print_log_tail(d, LOG_TAIL_LINES);
    return fail(h, "%s (pid %d): socket %s did not accept a connection within %d ms", d->name,
                (int)d->pid, d->socket, timeout_ms);
}

int harness_wait_all_ready(harness *h, int timeout_ms)
{
    int64_t deadline = harness_now_ms() + timeout_ms;
    for (int i = 0; i < h->n; i++) {
        if (!h->d[i].started) continue;
        int left = (int)(deadline - harness_now_ms());
        if (harness_wait_ready(h, i, left > 0 ? left : 0) < 0) return -1;
    }
    return 0;
}

int harness_start_in_order(harness *h, const int *order, const int *delay_ms, int count)
{
    for (int k = 0; k < count; k++) {
        if (delay_ms && delay_ms[k] > 0) harness_sleep_ms(delay_ms[k]);
        if (harness_spawn(h, order[k]) < 0) return -1;
    }
    return 0;
}

int harness_start(harness *h, uint64_t seed, int max_delay_ms)
{
    int order[HARNESS_MAX_HOSTS], delay[HARNESS_MAX_HOSTS];
    uint64_t st = seed;
    for (int i = 0; i < h->n; i++)
        order[i] = i;
    /* Fisher-Yates. */
    for (int i = h->n - 1; i > 0; i--) {
        int j = (int)(harness_rand(&st) % (uint64_t)(i + 1));
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    char desc[256];
    size_t off = 0;
    for (int k = 0; k < h->n; k++) {
        delay[k] = k == 0 || max_delay_ms <= 0
                       ? 0
                       : (int)(harness_rand(&st) % (uint64_t)(max_delay_ms + 1));
        off += (size_t)snprintf(desc + off, sizeof desc - off, "%s+%dms%s", h->d[order[k]].name,
                                delay[k], k + 1 < h->n ? " " : "");
        if (off >= sizeof desc) off = sizeof desc - 1;
    }
    fprintf(stderr, "harness: starting %d daemons in %s: %s\n", h->n, h->dir, desc);
    if (harness_start_in_order(h, order, delay, h->n) < 0) return -1;
    return harness_wait_all_ready(h, HARNESS_READY_TIMEOUT_MS);
}

int harness_start_through(harness *h, int i, uint16_t port)
{
    char from[64], to[64], config[PATH_MAX], mine[PATH_MAX], name[32];
    /* The whole line, so that no longer port that starts the same matches. */
    snprintf(from, sizeof from, "address: 127.0.0.1:%u\n", (unsigned)h->d[(i + 1) % h->n].port);
    snprintf(to, sizeof to, "address: 127.0.0.1:%u\n", (unsigned)port);
    snprintf(name, sizeof name, "%s.yaml", h->d[i].name);
    if (harness_config_variant(h, name, from, to, mine, sizeof mine) < 0) return -1;
    /* harness_spawn() starts a daemon with h->config: host i with its own. */
    snprintf(config, sizeof config, "%s", h->config);
    int rc = 0;
    for (int k = 0; k < h->n && rc == 0; k++) {
        snprintf(h->config, sizeof h->config, "%s", k == i ? mine : config);
        rc = harness_spawn(h, k);
    }
    snprintf(h->config, sizeof h->config, "%s", config);
    return rc < 0 ? -1 : harness_wait_all_ready(h, HARNESS_READY_TIMEOUT_MS);
}

void harness_signal(harness *h, int i, int sig)
{
    harness_daemon *d = &h->d[i];
    if (d->started && !reap_nohang(d)) {
        kill(d->pid, sig);
        d->sent_signal = sig;
    }
}

void harness_kill(harness *h, int i)
{
    kill_and_reap(&h->d[i]);
}

void harness_signal_all(harness *h, int sig)
{
    for (int i = 0; i < h->n; i++) {
        harness_daemon *d = &h->d[i];
        if (d->started && !reap_nohang(d)) {
            kill(d->pid, sig);
            d->sent_signal = sig;
        }
    }
}

int harness_stop(harness *h)
{
    bool needed_kill[HARNESS_MAX_HOSTS] = {false};
    harness_signal_all(h, SIGTERM);

    int64_t deadline = harness_now_ms() + HARNESS_STOP_TIMEOUT_MS;
    for (int iter = 0; iter <= HARNESS_STOP_TIMEOUT_MS / POLL_MS + 1; iter++) {
        bool all = true;
        for (int i = 0; i < h->n; i++)
            all = reap_nohang(&h->d[i]) && all;
        if (all || harness_now_ms() > deadline) break;
        harness_sleep_ms(POLL_MS);
    }
    for (int i = 0; i < h->n; i++) {
        harness_daemon *d = &h->d[i];
        if (d->started && !reap_nohang(d)) {
            needed_kill[i] = true;
            kill_and_reap(d);
        }
    }

    int failures = 0;
    char first[512] = "";
    for (int i = 0; i < h->n; i++) {
        harness_daemon *d = &h->d[i];
        if (!d->started) continue;
        char how[96], why[384] = "";
        describe_status(d->status, how, sizeof how);
        const char *report = sanitizer_report(d);
        if (needed_kill[i])
            snprintf(why, sizeof why, "did not exit within %d ms of SIGTERM (then %s)",
                     HARNESS_STOP_TIMEOUT_MS, how);
        else if (WIFEXITED(d->status) && WEXITSTATUS(d->status) != 0)
            snprintf(why, sizeof why, "%s", how);
        else if (WIFEXITED(d->status) && d->sent_signal == 0)
            snprintf(why, sizeof why, "%s before it was asked to stop", how);
        else if (WIFSIGNALED(d->status) && WTERMSIG(d->status) != d->sent_signal)
            snprintf(why, sizeof why, "%s (the harness sent %s)", how,
                     d->sent_signal ? strsignal(d->sent_signal) : "nothing");
        else if (report)
            snprintf(why, sizeof why, "%s, but its log has \"%s\"", how, report);
        if (why[0]) {
            if (failures++ == 0)
                snprintf(first, sizeof first, "ringd %s (pid %d) %s", d->name, (int)d->pid, why);
            fprintf(stderr, "harness: ringd %s (pid %d) %s\n", d->name, (int)d->pid, why);
            if (report) print_report(d, report);
            print_log_tail(d, LOG_TAIL_LINES);
        }
    }
    if (failures) return fail(h, "%s%s", first, failures > 1 ? " (and others, see stderr)" : "");
    return 0;
}

/* Removes the files of dir (flat: the harness creates no subdirectories) and dir. */
static void remove_dir(const char *dir)
{
    DIR *dp = opendir(dir);
    if (dp) {
        struct dirent *e;
        char path[PATH_MAX];
        for (int i = 0; i < 100000 && (e = readdir(dp)) != NULL; i++) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
        closedir(dp);
    }
    if (rmdir(dir) < 0) fprintf(stderr, "harness: rmdir %s: %s\n", dir, strerror(errno));
}

void harness_cleanup(harness *h)
{
    bool running = false;
    for (int i = 0; i < h->n; i++)
        running = running || (h->d[i].started && !reap_nohang(&h->d[i]));
    if (running) {
        /* The test did not reach harness_stop(): it failed on the way. */
        fprintf(stderr, "harness: cleaning up with daemons still running (the test failed?)\n");
        harness_dump_logs(h, LOG_TAIL_LINES);
    }
    for (int i = 0; i < h->n; i++)
        kill_and_reap(&h->d[i]);
    unlock_ports(h);
    if (h->dir[0]) {
        const char *keep = getenv("RINGD_TEST_KEEP");
        if (keep && *keep && strcmp(keep, "0"))
            fprintf(stderr, "harness: keeping %s\n", h->dir);
        else
            remove_dir(h->dir);
    }
    harness_reset(h);
}

/* Copies the file at path into buf (NUL-terminated, truncated to len). */
static void slurp(const char *path, char *buf, size_t len)
{
    if (!buf || len == 0) return;
    buf[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    size_t off = 0;
    for (int i = 0; i < 1000 && off + 1 < len; i++) {
        ssize_t n = read(fd, buf + off, len - 1 - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        off += (size_t)n;
    }
    buf[off] = '\0';
    close(fd);
}

int harness_run(harness *h, char *const argv[], int timeout_ms, int *status, char *out,
                size_t outlen, char *errout, size_t errlen)
{
    static int seq;
    char out_path[PATH_MAX], err_path[PATH_MAX];
    if (!h->dir[0]) return fail(h, "harness_run(%s): harness_init() was not called", argv[0]);
    int k = __atomic_fetch_add(&seq, 1, __ATOMIC_RELAXED);
    snprintf(out_path, sizeof out_path, "%s/cmd%d.out", h->dir, k);
    snprintf(err_path, sizeof err_path, "%s/cmd%d.err", h->dir, k);
    pid_t pid = spawn(h, argv, out_path, err_path);
    if (pid < 0) return -1;
    int st = 0;
    bool exited = wait_pid(pid, timeout_ms, &st);
    if (!exited) {
        kill(pid, SIGKILL);
        if (!wait_pid(pid, KILL_REAP_TIMEOUT_MS, &st))
            fprintf(stderr, "harness: %s (pid %d) survived SIGKILL\n", argv[0], (int)pid);
    }
    unregister_pid(pid);
    *status = st;
    slurp(out_path, out, outlen);
    slurp(err_path, errout, errlen);
    if (!exited) return fail(h, "%s did not exit within %d ms", argv[0], timeout_ms);
    return 0;
}

/* ---- threads ------------------------------------------------------------------------ */

static void *thread_main(void *p)
{
    struct harness_thread_slot *s = p;
    s->rc = s->fn(s->idx, s->arg);
    return NULL;
}

int harness_threads_start(harness *h, harness_threads *t, int k, harness_thread_fn fn, void *arg)
{
    memset(t, 0, sizeof *t);
    if (k < 1 || k > HARNESS_MAX_HOSTS) return fail(h, "harness_threads_start: %d threads", k);
    for (int i = 0; i < k; i++) {
        t->slot[i] = (struct harness_thread_slot){.fn = fn, .arg = arg, .idx = i, .rc = -1};
        int e = pthread_create(&t->tid[i], NULL, thread_main, &t->slot[i]);
        if (e) {
            /* Join those started; they finish by their own deadlines. */
            t->k = i;
            harness_threads_join(h, t, 120000);
            return fail(h, "pthread_create: %s", strerror(e));
        }
    }
    t->k = k;
    return 0;
}

static struct timespec realtime_in(int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

int harness_threads_join(harness *h, harness_threads *t, int timeout_ms)
{
    struct timespec deadline = realtime_in(timeout_ms);
    bool joined[HARNESS_MAX_HOSTS] = {false};
    bool late = false;
    for (int i = 0; i < t->k; i++)
        joined[i] = pthread_timedjoin_np(t->tid[i], NULL, &deadline) == 0;
    for (int i = 0; i < t->k; i++)
        late = late || !joined[i];
    if (late) {
        fprintf(stderr, "harness: client threads still running after %d ms; killing the daemons\n",
                timeout_ms);
        harness_dump_logs(h, LOG_TAIL_LINES);
        harness_signal_all(h, SIGKILL);
        deadline = realtime_in(30000);
        for (int i = 0; i < t->k; i++) {
            if (!joined[i] && pthread_timedjoin_np(t->tid[i], NULL, &deadline) != 0) {
                fprintf(stderr,
                        "harness: client thread %d is stuck even without daemons; aborting\n", i);
                abort();
            }
        }
        return fail(h, "client threads did not finish within %d ms", timeout_ms);
    }
    for (int i = 0; i < t->k; i++) {
        if (t->slot[i].rc != 0) return fail(h, "client thread %d failed (see above)", i);
    }
    return 0;
}

int harness_run_threads(harness *h, int k, harness_thread_fn fn, void *arg, int timeout_ms)
{
    harness_threads t;
    if (harness_threads_start(h, &t, k, fn, arg) < 0) return -1;
    return harness_threads_join(h, &t, timeout_ms);
}

/* ---- barrier ---------------------------------------------------------------------------- */

void harness_failures_init(harness_failures *f)
{
    atomic_init(&f->count, 0);
    pthread_mutex_init(&f->mu, NULL);
    f->first[0] = '\0';
}

void harness_failures_destroy(harness_failures *f)
{
    pthread_mutex_destroy(&f->mu);
}

void harness_fail(harness_failures *f, const char *fmt, ...)
{
    char msg[sizeof f->first];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&f->mu);
    int k = atomic_fetch_add(&f->count, 1);
    if (k == 0) snprintf(f->first, sizeof f->first, "%s", msg);
    if (k < HARNESS_FAILURES_PRINTED) fprintf(stderr, "FAIL: %s\n", msg);
    pthread_mutex_unlock(&f->mu);
}

ringd_client *harness_connect(harness *h, int i, harness_failures *f, int idx)
{
    ringd_client *c = NULL;
    if (ringd_connect(h->d[i].socket, &c) < 0) {
        harness_fail(f, "thread %d: connect to h%d: %s", idx, i, ringd_last_error(NULL));
        return NULL;
    }
    return c;
}

void harness_barrier_init(harness_barrier *b, int k)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, &ca);
    pthread_condattr_destroy(&ca);
    b->k = k;
    b->arrived = 0;
    b->generation = 0;
    b->any_failed = b->result = b->broken = false;
}

void harness_barrier_destroy(harness_barrier *b)
{
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
}

int harness_barrier_wait(harness_barrier *b, bool failed, int timeout_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&b->mu);
    if (b->broken) {
        pthread_mutex_unlock(&b->mu);
        return -1;
    }
    b->any_failed = b->any_failed || failed;
    if (++b->arrived == b->k) {
        /* The last one in publishes the round's verdict. It stays valid until
         * the next round completes, which needs every waiter to arrive again. */
        b->result = b->any_failed;
        b->any_failed = false;
        b->arrived = 0;
        b->generation++;
        pthread_cond_broadcast(&b->cv);
        int r = b->result;
        pthread_mutex_unlock(&b->mu);
        return r;
    }
    unsigned gen = b->generation;
    int rc = 0;
    while (gen == b->generation && !b->broken && rc == 0)
        rc = pthread_cond_timedwait(&b->cv, &b->mu, &ts);
    int r;
    if (gen != b->generation) {
        r = b->result;
    } else {
        b->broken = true;
        pthread_cond_broadcast(&b->cv);
        r = -1;
    }
    pthread_mutex_unlock(&b->mu);
    return r;
}

/* ---- data whose float32 sum is exact ---- */

static float f32_value(size_t k, int rank, int iter)
{
    return (float)((rank + 1) * 1000 + (int)(k % 997) + iter);
}

void harness_fill_f32(float *p, size_t n, int rank, int iter)
{
    for (size_t k = 0; k < n; k++)
        p[k] = f32_value(k, rank, iter);
}

int harness_check_f32(const float *p, size_t n, int ranks, int iter, char *why, size_t len)
{
    for (size_t k = 0; k < n; k++) {
        float want = 0;
        for (int r = 0; r < ranks; r++)
            want += f32_value(k, r, iter);
        if (p[k] != want) {
            snprintf(why, len, "element %zu of iteration %d is %.9g, expected %.9g", k, iter,
                     (double)p[k], (double)want);
            return -1;
        }
    }
    return 0;
}
