/*
 * local.c - sessions of local clients on the daemon's Unix socket.
 *
 * Each session is a non-blocking socket watched by a uv_poll_t: we call
 * recvmsg() ourselves because shared memory regions arrive as file
 * descriptors (SCM_RIGHTS) beside MSG_REGISTER, which libuv's streams do not
 * hand over. process_input() consumes every complete message in the input
 * buffer; replies go through a bounded output buffer, and a session whose
 * client does not read its replies stops being read.
 *
 * What a session asks for is local_requests.c's: its regions go to
 * regions.c, its collectives to gather.c, which makes one collective of the
 * host from those of its local ranks, its status to status.c.
 */
#include "local.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "local-internal.h"
#include "log.h"

#define OUT_LIMIT (64 << 10) /* unread replies before we stop reading */
#define MAX_SESSIONS 256
#define MAX_ANSWERS 8192    /* COLLECTIVEs of a session not answered yet */
#define HELLO_CHECK_MS 1000 /* how often sessions without a HELLO are checked */
#define BAD_LOG_BURST 100   /* bad connections logged one by one per BAD_LOG_MS */
#define BAD_LOG_MS 10000

static void update_poll(session *s);
static void on_hello_timer(uv_timer_t *t);

/* ---- output ---- */

static void flush_out(session *s)
{
    while (s->out_len > 0) {
        ssize_t n = send(s->fd, s->out, s->out_len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            session_close(s, errno == EPIPE || errno == ECONNRESET ? "client disconnected"
                                                                   : strerror(errno));
            return;
        }
        memmove(s->out, s->out + n, s->out_len - (size_t)n);
        s->out_len -= (size_t)n;
    }
    update_poll(s);
}

/* Appends an encoded message (n bytes in buf, or an encoder error). */
void session_queue(session *s, const uint8_t *buf, int n)
{
    if (s->closing) return;
    if (n < 0) {
        session_close(s, "cannot encode a reply");
        return;
    }
    if (s->out_len + (size_t)n > s->out_cap) {
        size_t cap = s->out_cap ? s->out_cap : 4096;
        while (cap < s->out_len + (size_t)n)
            cap *= 2;
        uint8_t *p = realloc(s->out, cap);
        if (!p) {
            session_close(s, "out of memory");
            return;
        }
        s->out = p;
        s->out_cap = cap;
    }
    memcpy(s->out + s->out_len, buf, (size_t)n);
    s->out_len += (size_t)n;
    flush_out(s);
}

const engine_resize *session_resize(const session *s, const engine_view *v, uint32_t made_for)
{
    /* The first by membership epoch, not by when this host learnt it: a
     * host out of the ring may learn a later ring that left it out before
     * the earlier one (from the lap that takes it back). */
    const engine_resize *first = NULL;
    for (int i = 0; i < v->n_resizes; i++) {
        const engine_resize *z = &v->resizes[i];
        if (z->from != made_for || (z->first_rank < 0 && z->to <= s->told_out)) continue;
        if (!first || z->to < first->to) first = z;
    }
    return first;
}

/* A RESULT of RINGD_ERESIZED tells the client where it is: in the
 * membership that followed the one its call was made for (made_for). After
 * two resizes in a row, a rank that made a call for the first membership
 * learns of them one at a time, as one whose calls the first one settled
 * does: its next call, made for the second membership, fails with the
 * resize after it, so every rank makes as many calls before the ring's
 * next success. */
static void resize_trailer(session *s, msg_result *r, uint32_t made_for)
{
    if (r->status != RINGD_ERESIZED || s->observer) return;
    engine_view v;
    engine_get_view(s->owner->engine, &v);
    const engine_resize *z = session_resize(s, &v, made_for);
    if (z && z->first_rank < 0) {
        /* A ring without this host: no place in it (size 0, which
         * libringd takes as none), and the next call is made for made_for
         * again. */
        s->told_out = z->to;
        r->members_epoch = made_for;
        r->rank = 0;
        r->size = 0;
    } else if (z) {
        r->members_epoch = z->to;
        r->rank = z->first_rank + s->local_rank;
        r->size = z->ranks;
    } else {
        r->members_epoch = v.members_epoch;
        r->rank = cfg_first_rank(v.hosts, (size_t)v.me) + s->local_rank;
        r->size = cfg_total_ranks(v.hosts);
    }
}

/* Sends a RESULT now; made_for as resize_trailer() says. */
static void send_result(session *s, uint64_t id, int status, const char *text, uint32_t made_for)
{
    msg_result r = {.id = id, .status = status};
    resize_trailer(s, &r, made_for);
    if (status < 0 && (!text || !*text)) {
        /* Every failure says what and where; one that does not is a bug,
         * which must not reach the user as an empty string. */
        log_warn("bug: a %s answer with no message (pid %u)", ringd_errname(status), s->pid);
        snprintf(r.text, sizeof r.text,
                 "%s (ringd gave no message: a bug; please report it with the daemons' logs)",
                 ringd_strerror(status));
    } else {
        snprintf(r.text, sizeof r.text, "%s", text ? text : "");
    }
    uint8_t buf[MSG_HEADER_SIZE + MSG_MAX_BODY];
    session_queue(s, buf, msg_encode_result(buf, sizeof buf, &r));
}

int session_expect(session *s, uint64_t id, uint8_t kind, uint64_t bytes, uint32_t made_for)
{
    if (s->n_answers >= MAX_ANSWERS) return RINGD_EBUSY;
    answer *a = calloc(1, sizeof *a);
    if (!a) return RINGD_ENOMEM;
    a->id = id;
    a->kind = kind;
    a->bytes = bytes;
    a->made_for = made_for;
    if (s->owner->report && !s->observer) report_submit(s->owner->report, s->local_rank, kind);
    if (s->answers_tail)
        s->answers_tail->next = a;
    else
        s->answers = a;
    s->answers_tail = a;
    s->n_answers++;
    return 0;
}

static void free_answer(session *s)
{
    answer *a = s->answers;
    s->answers = a->next;
    if (!s->answers) s->answers_tail = NULL;
    s->n_answers--;
    free(a->text);
    free(a);
}

/* A COLLECTIVE's result goes back now: the rank's call ends. */
static void account_answer(session *s, const answer *a)
{
    if (!s->owner->report || s->observer) return;
    account_call c = {.last_ns = a->t.last_ns,
                      .late_ns = a->t.late_ns,
                      .bytes = a->bytes,
                      .status = a->status,
                      .kind = a->kind};
    report_result(s->owner->report, s->local_rank, &c);
}

void session_answer_timed(session *s, uint64_t id, int status, const char *text,
                          const gather_timing *t)
{
    answer *a = s->answers;
    while (a && a->id != id)
        a = a->next;
    if (a && t) a->t = *t;
    session_answer(s, MSG_COLLECTIVE, id, status, text);
}

void session_answer(session *s, uint8_t type, uint64_t id, int status, const char *text)
{
    /* Only COLLECTIVEs wait for one another: libringd registers a staging
     * region while its earlier collectives run, and waits for that answer. */
    if (type != MSG_COLLECTIVE) {
        engine_view v;
        engine_get_view(s->owner->engine, &v);
        send_result(s, id, status, text, v.members_epoch);
        return;
    }
    answer *a = s->answers;
    while (a && a->id != id)
        a = a->next;
    if (!a) return; /* cannot happen: every COLLECTIVE was expected */
    a->ready = 1;
    a->status = status;
    a->text = text && *text ? strdup(text) : NULL;
    /* The oldest ones go, in order. */
    while (s->answers && s->answers->ready && !s->closing) {
        a = s->answers;
        account_answer(s, a);
        send_result(s, a->id, a->status, a->text, a->made_for);
        /* A write that failed closed the session, which freed them all. */
        if (s->closing) break;
        free_answer(s);
    }
}

/* Sends MSG_ERROR and closes the session once it is out. */
void session_refuse(session *s, int code, const char *text)
{
    msg_error e = {.code = code};
    snprintf(e.text, sizeof e.text, "%s", text);
    uint8_t buf[MSG_HEADER_SIZE + MSG_MAX_BODY];
    session_queue(s, buf, msg_encode_error(buf, sizeof buf, &e));
    log_warn("refused local client (pid %u): %s", s->pid, text);
    session_close(s, text);
}

/* Closes a session whose client sent what no libringd sends, with a line
 * saying who and why: BAD_LOG_BURST of them per BAD_LOG_MS, then only their
 * number, so that a flood cannot fill the journal. */
void session_drop(session *s, const char *why)
{
    local *l = s->owner;
    uint64_t now = uv_now(l->loop);
    if (now - l->bad_window_ms >= BAD_LOG_MS) {
        if (l->bad_in_window > BAD_LOG_BURST)
            log_warn("%d more bad local connections were dropped without a line each",
                     l->bad_in_window - BAD_LOG_BURST);
        l->bad_window_ms = now;
        l->bad_in_window = 0;
    }
    if (l->bad_in_window++ < BAD_LOG_BURST)
        log_warn("dropped local connection (pid %u, uid %u): %s", s->pid, s->uid, why);
    session_close(s, why);
}

/* Consumes every complete message in the input buffer. */
static void process_input(session *s)
{
    size_t pos = 0;
    while (!s->closing && s->out_len < OUT_LIMIT) {
        msg_header h;
        int rc = msg_decode_header(s->in + pos, s->in_len - pos, &h);
        if (rc == MSG_EAGAIN) break;
        if (rc < 0) {
            char why[128];
            snprintf(why, sizeof why, "bad message header: %s", msg_strerror(rc));
            if (rc == MSG_EVERSION) {
                snprintf(why, sizeof why,
                         "client speaks protocol version %u, this ringd speaks "
                         "%u; use the libringd of this ringd version",
                         h.version, MSG_VERSION);
                session_refuse(s, RINGD_EVERSION, why);
            } else
                session_drop(s, why);
            return;
        }
        if (s->in_len - pos < MSG_HEADER_SIZE + h.length) break;
        session_handle(s, &h, s->in + pos + MSG_HEADER_SIZE);
        if (s->closing) return;
        pos += MSG_HEADER_SIZE + h.length;
    }
    memmove(s->in, s->in + pos, s->in_len - pos);
    s->in_len -= pos;
}

static void read_input(session *s)
{
    for (;;) {
        if (s->in_len == sizeof s->in) break; /* full: wait for process_input */
        union {
            struct cmsghdr align;
            char buf[CMSG_SPACE(sizeof(int) * MAX_FDS)];
        } ctl;
        struct iovec iov = {s->in + s->in_len, sizeof s->in - s->in_len};
        struct msghdr mh = {.msg_iov = &iov,
                            .msg_iovlen = 1,
                            .msg_control = ctl.buf,
                            .msg_controllen = sizeof ctl.buf};
        ssize_t n = recvmsg(s->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
            if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
            int k = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            for (int i = 0; i < k; i++) {
                int fd;
                memcpy(&fd, CMSG_DATA(cm) + (size_t)i * sizeof fd, sizeof fd);
                if (s->n_fds < MAX_FDS)
                    s->fds[s->n_fds++] = fd;
                else
                    close(fd);
            }
        }
        if (mh.msg_flags & MSG_CTRUNC) {
            session_drop(s, "too many file descriptors in one message");
            return;
        }
        if (n == 0 && s->in_len > 0) {
            char why[96];
            snprintf(why, sizeof why, "client disconnected in the middle of a message (%zu bytes)",
                     s->in_len);
            session_drop(s, why);
            return;
        }
        if (n <= 0) {
            session_close(s, n == 0 ? "client disconnected" : strerror(errno));
            return;
        }
        s->in_len += (size_t)n;
        process_input(s);
        if (s->closing) return;
    }
}

static void on_session_io(uv_poll_t *p, int status, int events)
{
    session *s = p->data;
    if (s->closing) return;
    if (status < 0) {
        session_close(s, uv_strerror(status));
        return;
    }
    if (events & UV_WRITABLE) flush_out(s);
    if (!s->closing && (events & UV_READABLE)) read_input(s);
    if (!s->closing) {
        process_input(s); /* input left over while replies were backed up */
        update_poll(s);
    }
}

/* Reads only while replies flow out; writes only while some are pending. */
static void update_poll(session *s)
{
    if (s->closing) return;
    int events = 0;
    if (s->out_len < OUT_LIMIT) events |= UV_READABLE;
    if (s->out_len > 0) events |= UV_WRITABLE;
    /* uv_poll_start() re-registers the fd with epoll even when nothing
     * changes: two syscalls per reply, which small collectives notice. */
    if (events == s->events) return;
    s->events = events;
    uv_poll_start(&s->poll, events, on_session_io);
}

static void release(local *l)
{
    if (--l->open_handles == 0 && l->closing) {
        void (*done)(void *) = l->done;
        void *data = l->done_data;
        free(l->by_rank);
        free(l->left);
        perm_free(&l->perm);
        free(l);
        if (done) done(data);
    }
}

static void on_session_closed(uv_handle_t *h)
{
    session *s = h->data;
    local *l = s->owner;
    close(s->fd);
    free(s->out);
    free(s);
    release(l);
}

/* The local ranks without a process, rank `first` (if >= 0) first: how each
 * left, or that none ever came. */
static void missing_ranks(const local *l, int first, char *out, size_t len)
{
    int base = engine_first_rank(l->engine);
    size_t at = 0;
    out[0] = '\0';
    for (int k = -1; k < l->local_size && at < len; k++) {
        int i = k < 0 ? first : k;
        if (i < 0 || (k >= 0 && i == first) || l->by_rank[i]) continue;
        const char *sep = at ? "; " : "";
        if (l->left[i][0])
            at += (size_t)snprintf(out + at, len - at, "%s%s", sep, l->left[i]);
        else
            at += (size_t)snprintf(out + at, len - at, "%srank %d on host %s is not connected", sep,
                                   base + i, l->cfg->hosts[l->me].name);
    }
}

void session_close(session *s, const char *why)
{
    if (s->closing) return;
    local *l = s->owner;
    int gone = 0;
    s->closing = 1;
    /* Best effort: push out what is queued (an ERROR explaining a refusal). */
    if (s->out_len > 0) (void)!send(s->fd, s->out, s->out_len, MSG_NOSIGNAL | MSG_DONTWAIT);

    if (!s->observer && s->welcomed) {
        log_info("local rank %d disconnected (pid %u): %s", s->local_rank, s->pid, why);
        l->by_rank[s->local_rank] = NULL;
        gone = !l->closing;
        /* Its calls still outstanding fail with it. */
        if (l->report) report_disconnect(l->report, s->local_rank);
    } else {
        log_debug("local session closed (pid %u): %s", s->pid, why);
    }
    int mid_call = s->answers != NULL;
    /* Withdraw its submissions; those already on the ring fail everywhere. */
    while (s->answers)
        free_answer(s);
    if (s->local_rank >= 0) gather_withdraw(l->gather, s, s->local_rank, &s->pos);
    if (gone) {
        /* Every host fails what is not confirmed yet, at once, and the
         * ranks that knew this one fail their next collectives until a
         * process takes its place. */
        char what[MSG_MAX_TEXT];
        snprintf(l->left[s->local_rank], sizeof l->left[s->local_rank],
                 "rank %d (pid %u) on host %s exited%s",
                 engine_first_rank(l->engine) + s->local_rank, s->pid, l->cfg->hosts[l->me].name,
                 mid_call ? " during the collective" : "");
        missing_ranks(l, s->local_rank, what, sizeof what);
        engine_members(l->engine, 0, 1, what);
    }
    regions_clear(&s->regions);
    for (int i = 0; i < s->n_fds; i++)
        close(s->fds[i]);
    s->n_fds = 0;
    for (session **p = &l->sessions; *p; p = &(*p)->next) {
        if (*p == s) {
            *p = s->next;
            break;
        }
    }
    l->n_sessions--;
    uv_poll_stop(&s->poll);
    uv_close((uv_handle_t *)&s->poll, on_session_closed);
}

static void on_accept(uv_poll_t *p, int status, int events)
{
    (void)events;
    local *l = p->data;
    if (status < 0 || l->closing) return;
    for (int i = 0; i < 16; i++) { /* bounded: let other events run */
        int fd = accept4(l->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                log_warn("accept on %s failed: %s", l->cfg->hosts[l->me].socket, strerror(errno));
            return;
        }
        if (l->n_sessions >= MAX_SESSIONS) {
            log_warn("refused local connection: %d sessions open", l->n_sessions);
            close(fd);
            continue;
        }
        session *s = calloc(1, sizeof *s);
        if (!s) {
            close(fd);
            continue;
        }
        s->owner = l;
        s->fd = fd;
        s->events = -1;
        s->local_rank = -1;
        if (uv_poll_init(l->loop, &s->poll, fd) < 0) {
            close(fd);
            free(s);
            continue;
        }
        s->poll.data = s;
        s->accepted_ms = uv_now(l->loop);
        l->open_handles++;
        s->next = l->sessions;
        l->sessions = s;
        l->n_sessions++;
        pid_t pid;
        uid_t uid;
        gid_t gid;
        char why[256];
        int ok = perm_check_peer(&l->perm, fd, &pid, &uid, &gid, why, sizeof why);
        if (ok < 0) {
            session_drop(s, why);
            continue;
        }
        s->pid = (uint32_t)pid;
        s->uid = (uint32_t)uid;
        if (!ok) {
            char text[MSG_MAX_TEXT];
            snprintf(text, sizeof text, "ringd on host %s refuses pid %u: %s",
                     l->cfg->hosts[l->me].name, s->pid, why);
            session_refuse(s, RINGD_EPERM, text);
            continue;
        }
        update_poll(s);
        if (!uv_is_active((uv_handle_t *)&l->hello_timer))
            uv_timer_start(&l->hello_timer, on_hello_timer, HELLO_CHECK_MS, HELLO_CHECK_MS);
    }
}

/* A connection that never says HELLO would hold one of the MAX_SESSIONS
 * slots for ever: it gets connect_timeout to do so. */
static void on_hello_timer(uv_timer_t *t)
{
    local *l = t->data;
    uint64_t now = uv_now(l->loop);
    int waiting = 0;
    session *next;
    for (session *s = l->sessions; s; s = next) {
        next = s->next;
        if (s->welcomed || s->closing) continue;
        if (now - s->accepted_ms >= l->cfg->connect_timeout_ms)
            session_drop(s, "no HELLO within connect_timeout");
        else
            waiting++;
    }
    if (!waiting) uv_timer_stop(&l->hello_timer);
}

/* gather's way to answer a session. */
static void gather_reply(void *s, uint64_t id, int status, const char *text, const gather_timing *t)
{
    session_answer_timed(s, id, status, text, t);
}

static void on_engine_reset(void *data)
{
    local *l = data;
    gather_reset(l->gather);
}

static void on_engine_settled(void *data, const job_verdict *v)
{
    local *l = data;
    gather_settled(l->gather, v);
    if (!v->resized) return;
    /* Every rank's next collective, once it knows of the resize, is the
     * new ring's first. */
    uint64_t start = gather_resized(l->gather);
    for (session *s = l->sessions; s; s = s->next)
        s->pos.next = start;
}

static void on_engine_missing(void *data, char *out, size_t len)
{
    local *l = data;
    int first = engine_first_rank(l->engine), n = 0, absent = 0;
    size_t at = 0;
    out[0] = '\0';
    for (int i = 0; i < l->local_size && at < len; i++) {
        if (gather_submitted(l->gather, i)) continue;
        absent += l->by_rank[i] == NULL;
        at += (size_t)snprintf(out + at, len - at, "%s%d", n++ ? ", " : "", first + i);
    }
    if (at >= len) return;
    char ranks[160];
    snprintf(ranks, sizeof ranks, "%s", out);
    snprintf(out, len, "%s %s%s", n == 1 ? "rank" : "ranks", ranks,
             absent == n ? (n == 1 ? " (no process connected)" : " (no processes connected)") : "");
}

static const engine_watcher watcher = {on_engine_reset, on_engine_settled, on_engine_missing};

/* ---- lifecycle ---- */

int local_new(local **out, uv_loop_t *loop, const cfg *c, int me, engine *e)
{
    local *l = calloc(1, sizeof *l);
    if (!l) return RINGD_ENOMEM;
    l->loop = loop;
    l->cfg = c;
    l->me = me;
    l->engine = e;
    l->local_size = c->hosts[me].local_clients;
    l->listen_fd = -1;
    l->by_rank = calloc((size_t)l->local_size, sizeof *l->by_rank);
    l->left = calloc((size_t)l->local_size, sizeof *l->left);
    if (!l->by_rank || !l->left) {
        free(l->by_rank);
        free(l->left);
        free(l);
        return RINGD_ENOMEM;
    }
    l->gather = gather_new(loop, c, me, e, gather_reply);
    if (!l->gather) {
        free(l->by_rank);
        free(l->left);
        free(l);
        return RINGD_ENOMEM;
    }
    engine_watch(e, &watcher, l);
    local_report_members(l);
    uv_timer_init(loop, &l->hello_timer);
    l->hello_timer.data = l;
    l->open_handles = 1;
    l->start_ms = uv_now(loop);
    *out = l;
    return 0;
}

int local_start(local *l, char *err, size_t errlen)
{
    const char *path = l->cfg->hosts[l->me].socket;
    int rc = perm_resolve(&l->perm, l->cfg, err, errlen);
    if (rc < 0) return rc;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) {
        snprintf(err, errlen, "socket path %s is too long", path);
        return RINGD_EINVAL;
    }
    memcpy(sa.sun_path, path, strlen(path));
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "cannot create socket: %s", strerror(errno));
        return RINGD_EIO;
    }
    /* A socket file left by a daemon that died is replaced; one that still
     * answers belongs to a running daemon and is not. */
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof sa) == 0) {
        close(probe);
        close(fd);
        snprintf(err, errlen, "socket %s is in use by a running ringd; stop it first", path);
        return RINGD_EBUSY;
    }
    if (probe >= 0) close(probe);
    unlink(path);
    if ((rc = perm_bind(&l->perm, fd, path, err, errlen)) < 0) {
        close(fd);
        return rc;
    }
    if (listen(fd, 64) < 0) {
        snprintf(err, errlen, "cannot listen on socket %s: %s", path, strerror(errno));
        close(fd);
        return RINGD_EIO;
    }
    l->listen_fd = fd;
    uv_poll_init(l->loop, &l->listen_poll, fd);
    l->listen_poll.data = l;
    l->listening = 1;
    l->open_handles++;
    uv_poll_start(&l->listen_poll, UV_READABLE, on_accept);
    log_info("accepting local clients on %s (mode %04o%s)", path, (unsigned)l->perm.mode,
             l->perm.n_uids || l->perm.n_gids ? ", allowed_uids/allowed_gids checked" : "");
    return 0;
}

static void on_handle_closed(uv_handle_t *h)
{
    release(h->data);
}

void local_close(local *l, int status, const char *message, void (*done)(void *), void *data)
{
    l->closing = 1;
    l->done = done;
    l->done_data = data;
    gather_close(l->gather, status, message);
    while (l->sessions)
        session_close(l->sessions, message);
    if (l->listening) {
        uv_close((uv_handle_t *)&l->listen_poll, on_handle_closed);
        close(l->listen_fd);
        unlink(l->cfg->hosts[l->me].socket);
    }
    uv_close((uv_handle_t *)&l->hello_timer, on_handle_closed);
}

void local_set_rates(local *l, const rates *rt)
{
    l->rates = rt;
}

void local_set_reload(local *l, const status_reload *rl)
{
    l->reload = rl;
}

void local_set_balance(local *l, status_balance *bl)
{
    l->balance = bl;
}

void local_set_report(local *l, report *rep)
{
    l->report = rep;
}

int local_set_access(local *l, perm_policy *p, char *err, size_t errlen)
{
    if (l->listening) {
        int rc = perm_apply(p, l->cfg->hosts[l->me].socket, err, errlen);
        if (rc < 0) return rc;
    }
    perm_free(&l->perm);
    l->perm = *p;
    *p = (perm_policy){.group = (gid_t)-1};
    log_info("local clients: socket mode %04o%s from now on", (unsigned)l->perm.mode,
             l->perm.n_uids || l->perm.n_gids ? ", allowed_uids/allowed_gids checked"
                                              : ", anyone who can open the socket");
    return 0;
}

int local_clients(const local *l)
{
    int n = 0;
    for (int i = 0; i < l->local_size; i++)
        n += l->by_rank[i] != NULL;
    return n;
}

void local_report_members(local *l)
{
    if (local_clients(l) == l->local_size) {
        engine_members(l->engine, 1, 0, "");
        return;
    }
    /* The ring waits for a rank that never came as for one that left, so
     * that a late starter's first call is every other rank's first too,
     * whatever failed before it came (PROTOCOL.md, "Outcomes"). */
    char why[MSG_MAX_TEXT];
    missing_ranks(l, -1, why, sizeof why);
    engine_members(l->engine, 0, 0, why);
}