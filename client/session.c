/*
 * session.c - blocking message I/O on a ringd daemon's Unix socket.
 *
 * The socket stays in blocking mode (so connect() is bounded by SO_SNDTIMEO)
 * and every read and write passes MSG_DONTWAIT and waits in poll() with what
 * is left of its deadline. Messages are read exactly: the 12-byte header,
 * then the body length it announces, so no bytes are buffered between calls.
 */
#include "session.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "ringd.h"

int64_t session_deadline(int timeout_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + timeout_ms;
}

int session_fail(session *s, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    return code;
}

/* Marks the session unusable: its byte stream may be out of step. */
static int breaks(session *s, int code)
{
    if (!s->broken) s->broken = code;
    return code;
}

/* Waits until fd is ready for events. Returns 1, 0 when the deadline passed,
 * or -errno. A deadline already past still looks once (ringd_test()). */
static int wait_ready(int fd, short events, int64_t deadline)
{
    for (;;) {
        int timeout = -1;
        if (deadline >= 0) {
            int64_t left = deadline - session_deadline(0);
            timeout = left <= 0 ? 0 : left > INT_MAX ? INT_MAX : (int)left;
        }
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, timeout);
        if (n > 0) return 1; /* POLLHUP and POLLERR too: the next call reports them */
        if (n == 0 && timeout == 0) return 0;
        if (n < 0 && errno != EINTR) return -errno;
    }
}

int session_connect(session *s, const char *path, int timeout_ms)
{
    s->fd = -1;
    s->broken = 0;
    s->err[0] = '\0';
    if (strlen(path) >= sizeof s->path)
        return session_fail(s, RINGD_ECONNECT,
                            "cannot connect to ringd at %s: the path is longer than %zu bytes "
                            "(use a shorter socket path)",
                            path, sizeof s->path - 1);
    snprintf(s->path, sizeof s->path, "%s", path);

    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return session_fail(s, RINGD_ECONNECT, "cannot connect to ringd at %s: socket: %s", path,
                            strerror(errno));

    /* A Unix connect() only blocks while the daemon's backlog is full, and
     * then for at most SO_SNDTIMEO, after which it fails with EAGAIN. */
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = timeout_ms % 1000 * 1000};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);

    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, s->path, strlen(s->path) + 1);
    while (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        int e = errno;
        if (e == EINTR) continue; /* nothing was established: retrying is safe */
        if (e == EISCONN) break;
        close(fd);
        const char *hint = "is the daemon running? pass the socket path or set RINGD_SOCKET";
        if (e == EACCES || e == EPERM)
            hint = "check the permissions of the socket and its directory";
        else if (e == EAGAIN)
            hint = "the daemon is not accepting connections; is it overloaded or stuck?";
        return session_fail(s, RINGD_ECONNECT, "cannot connect to ringd at %s: %s (%s)", path,
                            e == EAGAIN ? "timed out" : strerror(e), hint);
    }
    s->fd = fd;
    return 0;
}

void session_close(session *s)
{
    if (s->fd >= 0) close(s->fd);
    s->fd = -1;
}

static int io_error(session *s, int e, const char *verb, const char *what)
{
    if (e == EPIPE || e == ECONNRESET)
        return breaks(s, session_fail(s, RINGD_ECLOSED,
                                      "ringd daemon closed the connection during %s: %s: %s "
                                      "(did it exit or drop this client? see its log)",
                                      what, s->path, strerror(e)));
    return breaks(s, session_fail(s, RINGD_EIO, "%s: cannot %s ringd at %s: %s", what, verb,
                                  s->path, strerror(e)));
}

static int timed_out(session *s, const char *verb, const char *what)
{
    return breaks(s, session_fail(s, RINGD_ETIMEDOUT,
                                  "%s: ringd at %s did not %s within the deadline "
                                  "(is the daemon stuck? see its log)",
                                  what, s->path, verb));
}

/* The daemon closed the socket under a write. A daemon that ends a session
 * says why first (MSG_ERROR, e.g. RINGD_ESHUTDOWN): if that message is
 * waiting, its code and text are the better answer. */
static int closed_on_send(session *s, int e, const char *what)
{
    msg_header h = {0};
    uint8_t body[MSG_MAX_BODY];
    int rc = session_expect(s, MSG_ERROR, &h, body, session_deadline(0), what);
    if (h.type == MSG_ERROR && rc < 0 && rc != RINGD_ECLOSED && rc != RINGD_ETIMEDOUT) return rc;
    return io_error(s, e, "write to", what);
}

int session_send(session *s, const uint8_t *msg, size_t len, int pass_fd, int64_t deadline,
                 const char *what)
{
    size_t off = 0;
    while (off < len) {
        struct iovec iov = {.iov_base = (void *)(msg + off), .iov_len = len - off};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
        union {
            char buf[CMSG_SPACE(sizeof(int))];
            struct cmsghdr align;
        } ctl;
        /* The descriptor rides on the first byte; once any byte is out, it went. */
        if (pass_fd >= 0 && off == 0) {
            memset(&ctl, 0, sizeof ctl);
            mh.msg_control = ctl.buf;
            mh.msg_controllen = sizeof ctl.buf;
            struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
            cm->cmsg_level = SOL_SOCKET;
            cm->cmsg_type = SCM_RIGHTS;
            cm->cmsg_len = CMSG_LEN(sizeof(int));
            memcpy(CMSG_DATA(cm), &pass_fd, sizeof(int));
        }
        ssize_t n = sendmsg(s->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n >= 0) {
            off += (size_t)n;
            continue;
        }
        if (errno == EINTR) continue;
        if (errno == EPIPE || errno == ECONNRESET) return closed_on_send(s, errno, what);
        if (errno != EAGAIN && errno != EWOULDBLOCK) return io_error(s, errno, "write to", what);
        int r = wait_ready(s->fd, POLLOUT, deadline);
        if (r == 0) return timed_out(s, "read our request", what);
        if (r < 0) return io_error(s, -r, "write to", what);
    }
    return 0;
}

/* Reads exactly len bytes. */
static int recv_exact(session *s, uint8_t *buf, size_t len, int64_t deadline, const char *what)
{
    size_t off = 0;
    while (off < len) {
        ssize_t n = recv(s->fd, buf + off, len - off, MSG_DONTWAIT);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n == 0)
            return breaks(s, session_fail(s, RINGD_ECLOSED,
                                          "ringd daemon closed the connection during %s: "
                                          "end of stream on %s (did it exit or drop this client? "
                                          "see its log)",
                                          what, s->path));
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return io_error(s, errno, "read from", what);
        int r = wait_ready(s->fd, POLLIN, deadline);
        if (r == 0) return timed_out(s, "answer", what);
        if (r < 0) return io_error(s, -r, "read from", what);
    }
    return 0;
}

static int malformed(session *s, const char *what, const char *type, int err)
{
    return breaks(s, session_fail(s, RINGD_EPROTO,
                                  "%s: ringd at %s sent a malformed %smessage: %s "
                                  "(are the daemon and libringd the same version?)",
                                  what, s->path, type, msg_strerror(err)));
}

int session_recv(session *s, msg_header *h, uint8_t *body, int64_t deadline, const char *what)
{
    uint8_t head[MSG_HEADER_SIZE];
    int rc = recv_exact(s, head, sizeof head, deadline, what);
    if (rc < 0) return rc;
    int err = msg_decode_header(head, sizeof head, h);
    if (err == MSG_EVERSION)
        return breaks(s, session_fail(s, RINGD_EVERSION,
                                      "%s: ringd at %s speaks another protocol version than this "
                                      "libringd (%d); install matching versions",
                                      what, s->path, MSG_VERSION));
    if (err == MSG_OK && h->length > MSG_MAX_BODY) err = MSG_ELENGTH;
    if (err != MSG_OK) return malformed(s, what, "", err);
    rc = recv_exact(s, body, h->length, deadline, what);
    if (rc < 0) return rc;

    if (h->type == MSG_ERROR) {
        msg_error e;
        if (msg_decode_error(h, body, &e) != MSG_OK)
            return malformed(s, what, "ERROR ", MSG_EMALFORMED);
        session_fail(s, e.code < 0 ? e.code : RINGD_EPROTO, "ringd at %s %s during %s: %s", s->path,
                     strcmp(what, "handshake") ? "ended the session" : "refused the session", what,
                     e.text[0] ? e.text : ringd_strerror(e.code));
        return breaks(s, e.code < 0 ? e.code : RINGD_EPROTO);
    }
    return 0;
}

int session_expect(session *s, int type, msg_header *h, uint8_t *body, int64_t deadline,
                   const char *what)
{
    int rc = session_recv(s, h, body, deadline, what);
    if (rc < 0) return rc;
    if (h->type != type)
        return breaks(s, session_fail(s, RINGD_EPROTO,
                                      "%s: ringd at %s sent %s where %s was expected "
                                      "(are the daemon and libringd the same version?)",
                                      what, s->path, msg_type_name(h->type), msg_type_name(type)));
    return 0;
}

int session_hello(session *s, uint32_t flags, int32_t local_rank, msg_welcome *out)
{
    int64_t deadline = session_deadline(SESSION_CONNECT_TIMEOUT_MS);
    uint8_t buf[SESSION_MSG_MAX];
    msg_hello m = {.flags = flags, .local_rank = local_rank, .pid = (uint32_t)getpid()};
    int n = msg_encode_hello(buf, sizeof buf, &m);
    if (n < 0)
        return session_fail(s, RINGD_EPROTO, "handshake: cannot encode HELLO: %s", msg_strerror(n));
    int rc = session_send(s, buf, (size_t)n, -1, deadline, "handshake");
    if (rc < 0) return rc;
    msg_header h;
    rc = session_expect(s, MSG_WELCOME, &h, buf, deadline, "handshake");
    if (rc < 0) return rc;
    if (msg_decode_welcome(&h, buf, out) != MSG_OK)
        return malformed(s, "handshake", "WELCOME ", MSG_EMALFORMED);
    return 0;
}

int session_readable(session *s, int64_t deadline, const char *what)
{
    int rc = wait_ready(s->fd, POLLIN, deadline);
    if (rc < 0) return breaks(s, io_error(s, -rc, "wait for", what));
    return rc > 0;
}

int session_decode_result(session *s, const msg_header *h, const uint8_t *body, msg_result *r,
                          const char *what)
{
    if (msg_decode_result(h, body, r) != MSG_OK)
        return malformed(s, what, "RESULT ", MSG_EMALFORMED);
    if (r->status > 0)
        return breaks(s, session_fail(s, RINGD_EPROTO,
                                      "%s: ringd at %s answered with status %d, not 0 or an error "
                                      "code",
                                      what, s->path, (int)r->status));
    return 0;
}

int session_recv_result(session *s, msg_result *r, int64_t deadline, const char *what)
{
    msg_header h;
    uint8_t body[MSG_MAX_BODY];
    int rc = session_expect(s, MSG_RESULT, &h, body, deadline, what);
    return rc < 0 ? rc : session_decode_result(s, &h, body, r, what);
}

int session_result(session *s, uint64_t id, int64_t deadline, const char *what)
{
    msg_result r;
    int rc = session_recv_result(s, &r, deadline, what);
    if (rc < 0) return rc;
    if (r.id != id)
        return breaks(s, session_fail(s, RINGD_EPROTO,
                                      "%s: ringd at %s answered request %llu while request %llu "
                                      "was outstanding (are the daemon and libringd the same "
                                      "version?)",
                                      what, s->path, (unsigned long long)r.id,
                                      (unsigned long long)id));
    if (r.status < 0) {
        if (r.text[0])
            session_fail(s, r.status, "%s", r.text);
        else
            session_fail(s, r.status, "%s: %s", what, ringd_strerror(r.status));
    }
    return r.status;
}
