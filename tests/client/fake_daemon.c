/*
 * fake_daemon.c - a scripted stand-in for ringd's Unix socket; see
 * fake_daemon.h.
 */
#include "fake_daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "ringd.h"

#define WAIT_MS 10000

static void problem(fake_daemon *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void problem(fake_daemon *f, const char *fmt, ...)
{
    if (f->problem[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->problem, sizeof f->problem, fmt, ap);
    va_end(ap);
}

/* Reads exactly len bytes; the first read also takes a passed fd. */
static int read_exact(int fd, uint8_t *buf, size_t len, int *passed_fd)
{
    size_t off = 0;
    while (off < len) {
        struct iovec iov = {.iov_base = buf + off, .iov_len = len - off};
        union {
            char b[CMSG_SPACE(sizeof(int) * 4)];
            struct cmsghdr align;
        } ctl;
        struct msghdr mh = {
            .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b, .msg_controllen = sizeof ctl.b};
        ssize_t n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
            if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
            size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < k; i++) {
                int got;
                memcpy(&got, CMSG_DATA(cm) + i * sizeof(int), sizeof got);
                if (passed_fd && *passed_fd < 0)
                    *passed_fd = got;
                else
                    close(got);
            }
        }
        off += (size_t)n;
    }
    return 0;
}

static void send_all(int fd, const uint8_t *buf, int n)
{
    size_t off = 0;
    while (n > 0 && off < (size_t)n) {
        ssize_t w = send(fd, buf + off, (size_t)n - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return; /* the client went away: its test will tell */
        off += (size_t)w;
    }
}

static void send_msg_result(int fd, const msg_result *r)
{
    uint8_t buf[MSG_HEADER_SIZE + MSG_MAX_BODY];
    send_all(fd, buf, msg_encode_result(buf, sizeof buf, r));
}

static void send_result(int fd, uint64_t id, int32_t status, const char *text)
{
    msg_result r = {.id = id, .status = status};
    snprintf(r.text, sizeof r.text, "%s", text ? text : "");
    send_msg_result(fd, &r);
}

static void send_error(int fd, int32_t code, const char *text)
{
    msg_error e = {.code = code};
    snprintf(e.text, sizeof e.text, "%s", text);
    uint8_t buf[MSG_HEADER_SIZE + MSG_MAX_BODY];
    send_all(fd, buf, msg_encode_error(buf, sizeof buf, &e));
}

static fake_region *find_region(fake_daemon *f, uint32_t number)
{
    for (int i = 0; i < FAKE_MAX_REGIONS; i++)
        if (f->regions[i].base && f->regions[i].number == number) return &f->regions[i];
    return NULL;
}

static void drop_region(fake_region *r)
{
    munmap(r->base, r->size);
    memset(r, 0, sizeof *r);
}

/* Checks the memfd like the daemon does, maps it, and answers. */
static void on_register(fake_daemon *f, int conn, const msg_register *m, int fd)
{
    if (f->n_registers < FAKE_MAX_LOG) f->registers[f->n_registers++] = *m;
    if (fd < 0) {
        problem(f, "REGISTER %u came without a file descriptor", m->region);
        send_result(conn, m->id, RINGD_ESHM, "no fd");
        return;
    }
    struct stat st;
    f->region_seals = fcntl(fd, F_GET_SEALS);
    f->region_fd_size = fstat(fd, &st) == 0 ? (long long)st.st_size : -1;
    if ((f->region_seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
        problem(f, "region %u: seals 0x%x lack SHRINK|GROW", m->region, f->region_seals);
    if ((uint64_t)f->region_fd_size != m->size)
        problem(f, "region %u: REGISTER says %llu bytes, the memfd has %lld", m->region,
                (unsigned long long)m->size, f->region_fd_size);
    if (m->region == 0 || find_region(f, m->region))
        problem(f, "region number %u is 0 or already registered", m->region);
    if (f->register_code < 0) {
        close(fd);
        send_result(conn, m->id, f->register_code, "region refused by the fake daemon");
        return;
    }
    fake_region *slot = find_region(f, 0);
    for (int i = 0; !slot && i < FAKE_MAX_REGIONS; i++)
        if (!f->regions[i].base) slot = &f->regions[i];
    void *p = slot && m->size ? mmap(NULL, m->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                              : MAP_FAILED;
    close(fd);
    if (p == MAP_FAILED) {
        problem(f, "region %u: cannot map it", m->region);
        send_result(conn, m->id, RINGD_ESHM, "cannot map");
        return;
    }
    *slot = (fake_region){.number = m->region, .base = p, .size = m->size};
    send_result(conn, m->id, 0, "");
}

static void on_unregister(fake_daemon *f, int conn, const msg_unregister *m)
{
    if (f->n_unregisters < FAKE_MAX_LOG) f->unregisters[f->n_unregisters++] = *m;
    fake_region *r = find_region(f, m->region);
    if (!r) {
        problem(f, "UNREGISTER of unknown region %u", m->region);
        send_result(conn, m->id, RINGD_EINVAL, "unknown region");
        return;
    }
    memcpy(f->unregistered_head, r->base,
           r->size < sizeof f->unregistered_head ? r->size : sizeof f->unregistered_head);
    drop_region(r);
    send_result(conn, m->id, 0, "");
}

/* Returns 0 to go on with the session, -1 to end it. */
static int on_collective(fake_daemon *f, int conn, const msg_collective *m)
{
    if (f->n_colls < FAKE_MAX_LOG) f->colls[f->n_colls++] = *m;
    size_t bytes = (size_t)m->count * ringd_dtype_size((ringd_dtype)m->dtype);
    fake_region *r = m->region ? find_region(f, m->region) : NULL;
    if (m->count == 0 ? m->region != 0 || m->offset != 0
                      : !r || m->offset > r->size || bytes > r->size - m->offset)
        problem(f, "COLLECTIVE names region %u offset %llu for %llu elements: outside", m->region,
                (unsigned long long)m->offset, (unsigned long long)m->count);
    switch (f->coll_action) {
    case COLL_DOUBLE:
        if (r && m->dtype == RINGD_FLOAT32 && bytes <= r->size - m->offset) {
            float *x = (float *)((char *)r->base + m->offset);
            for (uint64_t i = 0; i < m->count; i++)
                x[i] *= 2;
        }
        send_result(conn, m->id, 0, "");
        return 0;
    case COLL_KEEP:
        send_result(conn, m->id, 0, "");
        return 0;
    case COLL_FAIL: {
        /* The trailer goes only with RINGD_ERESIZED (msg_encode_result). */
        msg_result res = {.id = m->id,
                          .status = f->reply_code,
                          .members_epoch = f->reply_epoch,
                          .rank = f->reply_rank,
                          .size = f->reply_size};
        snprintf(res.text, sizeof res.text, "%s", f->reply_text);
        send_msg_result(conn, &res);
        if (f->fail_count > 0 && --f->fail_count == 0) f->coll_action = COLL_KEEP;
        return 0;
    }
    case COLL_WRONG_ID:
        send_result(conn, m->id + 7, 0, "");
        return 0;
    case COLL_ERROR:
        send_error(conn, f->reply_code, f->reply_text);
        return -1;
    case COLL_CLOSE:
        return -1;
    }
    return -1;
}

/* Handles one message after HELLO; 0 to go on, -1 to end the session. */
static int on_message(fake_daemon *f, int conn, const msg_header *h, const uint8_t *body, int fd)
{
    if (f->requests < FAKE_MAX_LOG) f->types[f->requests] = h->type;
    f->requests++;
    if (fd >= 0 && h->type != MSG_REGISTER) {
        problem(f, "an fd came with %s", msg_type_name(h->type));
        close(fd);
        fd = -1;
    }
    union {
        msg_register reg;
        msg_unregister unreg;
        msg_collective coll;
        msg_status_req sreq;
        msg_leave_req leave;
        msg_balance balance;
        msg_report_req rreq;
    } m;
    switch (h->type) {
    case MSG_REGISTER:
        if (msg_decode_register(h, body, &m.reg) != MSG_OK) break;
        on_register(f, conn, &m.reg, fd);
        return 0;
    case MSG_UNREGISTER:
        if (msg_decode_unregister(h, body, &m.unreg) != MSG_OK) break;
        on_unregister(f, conn, &m.unreg);
        return 0;
    case MSG_COLLECTIVE:
        if (msg_decode_collective(h, body, &m.coll) != MSG_OK) break;
        return on_collective(f, conn, &m.coll);
    case MSG_STATUS_REQ: {
        if (msg_decode_status_req(h, body, &m.sreq) != MSG_OK) break;
        msg_status st = f->status;
        st.id = m.sreq.id;
        uint8_t buf[MSG_HEADER_SIZE + MSG_MAX_BODY];
        send_all(conn, buf, msg_encode_status(buf, sizeof buf, &st));
        return 0;
    }
    case MSG_REPORT_REQ: {
        if (!f->reports || msg_decode_report_req(h, body, &m.rreq) != MSG_OK) break;
        static msg_report r; /* 5 KiB: not on the thread's stack */
        uint8_t buf[MSG_HEADER_SIZE + MSG_MAX_BODY];
        for (int i = 0; i < f->n_reports; i++) {
            r = f->reports[i];
            r.id = m.rreq.id;
            send_all(conn, buf, msg_encode_report(buf, sizeof buf, &r));
        }
        return 0;
    }
    case MSG_LEAVE_REQ:
        if (msg_decode_leave_req(h, body, &m.leave) != MSG_OK) break;
        f->leave = m.leave;
        f->n_leaves++;
        send_result(conn, m.leave.id, f->leave_code, f->leave_text);
        return 0;
    case MSG_BALANCE:
        if (msg_decode_balance(h, body, &m.balance) != MSG_OK) break;
        f->balance = m.balance;
        f->n_balances++;
        send_result(conn, m.balance.id, f->balance_code,
                    f->balance_code ? "balance: refused by the fake" : "");
        return 0;
    default:
        break;
    }
    if (fd >= 0) close(fd);
    problem(f, "unexpected or malformed %s from the client", msg_type_name(h->type));
    return -1;
}

/* Waits for conn (or, with conn -1, the listening socket) to be readable.
 * Returns 1 when it is, 0 when asked to stop, -1 on timeout. Pending input
 * wins over a stop request, so a session that the client closed before
 * fake_join() is read to its end. */
static int wait_input(fake_daemon *f, int fd)
{
    struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = f->stop_pipe[0], .events = POLLIN}};
    int n;
    do
        n = poll(p, 2, WAIT_MS);
    while (n < 0 && errno == EINTR);
    if (n <= 0) return -1;
    if (p[0].revents) return 1;
    return 0;
}

static void serve(fake_daemon *f, int conn)
{
    uint8_t head[MSG_HEADER_SIZE], body[MSG_MAX_BODY];
    msg_header h;
    int hello_done = 0;
    for (;;) {
        int w = wait_input(f, conn);
        if (w < 0) problem(f, "the client sent nothing for %d ms", WAIT_MS);
        if (w <= 0) break;
        int fd = -1;
        if (read_exact(conn, head, sizeof head, &fd) < 0) {
            f->eof = 1;
            break;
        }
        if (msg_decode_header(head, sizeof head, &h) != MSG_OK ||
            read_exact(conn, body, h.length, &fd) < 0) {
            problem(f, "bad message header or short body");
            if (fd >= 0) close(fd);
            break;
        }
        if (hello_done) {
            if (on_message(f, conn, &h, body, fd) < 0) break;
            continue;
        }
        if (h.type != MSG_HELLO || fd >= 0 || msg_decode_hello(&h, body, &f->hello) != MSG_OK) {
            problem(f, "the session did not start with a plain HELLO");
            if (fd >= 0) close(fd);
            break;
        }
        hello_done = 1;
        if (f->hello_action == HELLO_CLOSE) break;
        if (f->hello_action == HELLO_REFUSE) {
            send_error(conn, f->refuse_code, f->refuse_text);
            break;
        }
        uint8_t buf[MSG_HEADER_SIZE + MSG_MAX_BODY];
        send_all(conn, buf, msg_encode_welcome(buf, sizeof buf, &f->welcome));
        if (f->hello_action == HELLO_WELCOME_THEN_ERROR) {
            send_error(conn, f->refuse_code, f->refuse_text);
            break;
        }
    }
    /* Like the daemon: a session's regions end with it. */
    for (int i = 0; i < FAKE_MAX_REGIONS; i++)
        if (f->regions[i].base) drop_region(&f->regions[i]);
}

static void *run(void *arg)
{
    fake_daemon *f = arg;
    for (;;) {
        if (wait_input(f, f->listen_fd) <= 0) return NULL;
        int conn = accept4(f->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (conn < 0) continue;
        /* Bounds the reads inside a message too. */
        struct timeval tv = {.tv_sec = WAIT_MS / 1000};
        setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        f->sessions++;
        serve(f, conn);
        close(conn);
        __atomic_add_fetch(&f->closed, 1, __ATOMIC_SEQ_CST);
    }
}

int fake_start(fake_daemon *f)
{
    unsetenv("RINGD_SOCKET");
    unsetenv("RINGD_LOCAL_RANK");
    unsetenv("LOCAL_RANK");
    memset(f, 0, sizeof *f);
    f->listen_fd = f->stop_pipe[0] = f->stop_pipe[1] = -1;
    f->welcome = (msg_welcome){.rank = 0,
                               .size = 1,
                               .local_rank = 0,
                               .local_size = 1,
                               .host_index = 0,
                               .n_hosts = 1,
                               .max_bytes = 1ull << 30};
    snprintf(f->welcome.host, sizeof f->welcome.host, "a");
    snprintf(f->dir, sizeof f->dir, "/tmp/ringd-client-XXXXXX");
    if (!mkdtemp(f->dir)) {
        f->dir[0] = '\0';
        return -1;
    }
    snprintf(f->path, sizeof f->path, "%s/ringd.sock", f->dir);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, f->path, strlen(f->path) + 1); /* 40 bytes: it fits */
    f->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (f->listen_fd < 0 || bind(f->listen_fd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
        listen(f->listen_fd, 8) < 0 || pipe2(f->stop_pipe, O_CLOEXEC) < 0)
        return -1;
    if (pthread_create(&f->thread, NULL, run, f) != 0) return -1;
    f->running = 1;
    return 0;
}

int fake_join(fake_daemon *f)
{
    if (!f->running) return 0;
    if (write(f->stop_pipe[1], "x", 1) != 1) return -1;
    /* The thread waits at most WAIT_MS in each poll, so the join is bounded. */
    pthread_join(f->thread, NULL);
    f->running = 0;
    return 0;
}

void fake_stop(fake_daemon *f)
{
    fake_join(f);
    for (int i = 0; i < FAKE_MAX_REGIONS; i++)
        if (f->regions[i].base) drop_region(&f->regions[i]);
    for (int i = 0; i < 2; i++)
        if (f->stop_pipe[i] >= 0) close(f->stop_pipe[i]);
    if (f->listen_fd >= 0) close(f->listen_fd);
    f->listen_fd = f->stop_pipe[0] = f->stop_pipe[1] = -1;
    if (f->path[0]) unlink(f->path);
    if (f->dir[0]) rmdir(f->dir);
}
