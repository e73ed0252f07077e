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
 * Collective k of this host is the k-th submission of each of its
 * local_clients sessions. Once all have arrived, their buffers are reduced
 * into local rank 0's in local-rank order (never arrival order, so the bits
 * do not depend on timing), the ring runs on that buffer, and the result is
 * copied back to the other local ranks.
 */
#include "local.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"
#include "perm.h"
#include "proto/msg.h"
#include "reduce.h"
#include "star.h"

#define IN_CAP (2 * (MSG_HEADER_SIZE + MSG_MAX_BODY))
#define OUT_LIMIT (64 << 10) /* unread replies before we stop reading */
#define MAX_FDS 4            /* descriptors received but not yet claimed */
#define MAX_REGIONS 4096     /* per session */
#define MAX_COLLS 1024       /* collectives waiting for local ranks */
#define MAX_SESSIONS 256
#define TICK_MS 100
#define HELLO_CHECK_MS 1000 /* how often sessions without a HELLO are checked */
#define BAD_LOG_BURST 100   /* bad connections logged one by one per BAD_LOG_MS */
#define BAD_LOG_MS 10000
/* A collective on the ring waits this much past its deadline, so that a host
 * whose own rank never came (and that fails it at the deadline) can tell the
 * others why before they time out on their own. */
#define RING_GRACE_MS 1000

typedef struct region {
    uint32_t id;
    uint8_t *base;
    uint64_t size;
    int refs; /* the session's list, plus each submission using it */
    struct region *next;
} region;

typedef struct session session;

typedef struct {
    session *s;  /* NULL once the client is gone */
    uint64_t id; /* request id to answer */
    region *reg; /* holds a reference; NULL for count 0 */
    uint8_t *buf;
    msg_collective m;
} submission;

typedef struct coll {
    uint64_t index; /* collective number on this host */
    int arrived;
    int running; /* handed to the ring */
    uint64_t deadline;
    char label[MSG_MAX_NAME + 32];
    int work;             /* the local rank whose buffer the ring runs on */
    uint8_t barrier_byte; /* a barrier's buffer */
    char failure[MSG_MAX_TEXT];
    ring_job job;
    local *owner;
    struct coll *next;
    submission subs[]; /* one per local rank */
} coll;

struct session {
    local *owner;
    int fd;
    uv_poll_t poll;
    int events; /* what poll watches now; -1 before the first update_poll() */
    int closing;
    int welcomed, observer;
    int local_rank;
    uint32_t pid; /* from SO_PEERCRED, then as the HELLO says */
    uint32_t uid;
    uint64_t accepted_ms;
    uint64_t next_index; /* host collective number of its next submission */
    region *regions;
    int n_regions;
    int fds[MAX_FDS];
    int n_fds;
    uint8_t in[IN_CAP];
    size_t in_len;
    uint8_t *out;
    size_t out_len, out_cap;
    session *next;
};

struct local {
    uv_loop_t *loop;
    const cfg *cfg;
    int me, ranks, local_size;
    ring *ring;
    int listen_fd;
    uv_poll_t listen_poll;
    int listening;
    uv_timer_t tick;
    uv_timer_t hello_timer; /* closes sessions that never say HELLO */
    perm_policy perm;
    uint64_t bad_window_ms; /* start of the current BAD_LOG_MS window */
    int bad_in_window;
    log_ratelimit bad_rl;
    session *sessions;
    int n_sessions;
    session **by_rank; /* local rank -> session */
    coll *colls;       /* waiting or running, by index */
    int n_colls;
    uint64_t next_index; /* of the oldest collective not yet finished */
    uint64_t start_ms;
    const rates *rates; /* for status; may be NULL */
    int closing, open_handles;
    void (*done)(void *);
    void *done_data;
};

static void session_close(session *s, const char *why);
static void update_poll(session *s);
static void on_tick(uv_timer_t *t);
static void on_hello_timer(uv_timer_t *t);

/* ---- output ---- */

static void flush_out(session *s)
{
    while (s->out_len > 0) {
        ssize_t n = send(s->fd, s->out, s->out_len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            session_close(s, strerror(errno));
            return;
        }
        memmove(s->out, s->out + n, s->out_len - (size_t)n);
        s->out_len -= (size_t)n;
    }
    update_poll(s);
}

/* Appends an encoded message (n bytes in buf, or an encoder error). */
static void queue_out(session *s, const uint8_t *buf, int n)
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

static void reply(session *s, uint64_t id, int status, const char *text)
{
    if (!s) return;
    msg_result r = {.id = id, .status = status};
    snprintf(r.text, sizeof r.text, "%s", text ? text : "");
    uint8_t buf[MSG_HEADER_SIZE + MSG_MAX_BODY];
    queue_out(s, buf, msg_encode_result(buf, sizeof buf, &r));
}

static void replyf(session *s, uint64_t id, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void replyf(session *s, uint64_t id, int status, const char *fmt, ...)
{
    char text[MSG_MAX_TEXT + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    reply(s, id, status, text);
}

/* Sends MSG_ERROR and closes the session once it is out. */
static void refuse(session *s, int code, const char *text)
{
    msg_error e = {.code = code};
    snprintf(e.text, sizeof e.text, "%s", text);
    uint8_t buf[MSG_HEADER_SIZE + MSG_MAX_BODY];
    queue_out(s, buf, msg_encode_error(buf, sizeof buf, &e));
    log_warn("refused local client (pid %u): %s", s->pid, text);
    session_close(s, text);
}

/* Closes a session whose client sent what no libringd sends, with a line
 * saying who and why: BAD_LOG_BURST of them per BAD_LOG_MS, then only their
 * number, so that a flood cannot fill the journal. */
static void drop(session *s, const char *why)
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

/* ---- regions ---- */

static void region_unref(region *r)
{
    if (--r->refs > 0) return;
    munmap(r->base, r->size);
    free(r);
}

static region *find_region(session *s, uint32_t id)
{
    for (region *r = s->regions; r; r = r->next)
        if (r->id == id) return r;
    return NULL;
}

static int take_fd(session *s)
{
    if (s->n_fds == 0) return -1;
    int fd = s->fds[0];
    memmove(s->fds, s->fds + 1, (size_t)(s->n_fds - 1) * sizeof *s->fds);
    s->n_fds--;
    return fd;
}

static void do_register(session *s, const msg_register *m)
{
    int fd = take_fd(s);
    if (fd < 0) {
        replyf(s, m->id, RINGD_ESHM, "register region %u: no file descriptor came with it",
               m->region);
        return;
    }
    struct stat st;
    int seals = fcntl(fd, F_GET_SEALS);
    const char *bad = NULL;
    if (find_region(s, m->region))
        bad = "region number already in use";
    else if (s->n_regions >= MAX_REGIONS)
        bad = "too many regions";
    else if (m->size == 0 || m->size > SIZE_MAX / 2)
        bad = "bad size";
    else if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        bad = "not a memory file";
    else if ((uint64_t)st.st_size != m->size)
        bad = "size differs from the file's";
    else if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
        /* An unsealed file could shrink under us and turn our reads into SIGBUS. */
        bad = "file is not sealed against shrinking and growing";
    if (bad) {
        close(fd);
        replyf(s, m->id, RINGD_ESHM, "register region %u (%" PRIu64 " bytes): %s", m->region,
               m->size, bad);
        return;
    }
    void *p = mmap(NULL, m->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int err = errno;
    close(fd);
    region *r = p == MAP_FAILED ? NULL : calloc(1, sizeof *r);
    if (!r) {
        if (p != MAP_FAILED) munmap(p, m->size);
        replyf(s, m->id, RINGD_ESHM, "register region %u: cannot map %" PRIu64 " bytes: %s",
               m->region, m->size, strerror(p == MAP_FAILED ? err : ENOMEM));
        return;
    }
    r->id = m->region;
    r->base = p;
    r->size = m->size;
    r->refs = 1;
    r->next = s->regions;
    s->regions = r;
    s->n_regions++;
    reply(s, m->id, 0, NULL);
}

static void do_unregister(session *s, const msg_unregister *m)
{
    for (region **p = &s->regions; *p; p = &(*p)->next) {
        if ((*p)->id == m->region) {
            region *r = *p;
            *p = r->next;
            s->n_regions--;
            region_unref(r);
            reply(s, m->id, 0, NULL);
            return;
        }
    }
    replyf(s, m->id, RINGD_EINVAL, "unregister: no region %u", m->region);
}

/* ---- collectives ---- */

static coll *find_coll(local *l, uint64_t index)
{
    for (coll *c = l->colls; c; c = c->next)
        if (c->index == index) return c;
    return NULL;
}

static void coll_free(local *l, coll *c)
{
    for (coll **p = &l->colls; *p; p = &(*p)->next) {
        if (*p == c) {
            *p = c->next;
            break;
        }
    }
    l->n_colls--;
    for (int i = 0; i < l->local_size; i++)
        if (c->subs[i].reg) region_unref(c->subs[i].reg);
    /* Collectives finish in order, so the oldest unfinished one moves on. */
    if (c->index >= l->next_index) l->next_index = c->index + 1;
    free(c);
}

/* Answers every submission of c and frees it. */
static void coll_finish(local *l, coll *c, int status, const char *message)
{
    for (int i = 0; i < l->local_size; i++) {
        submission *sub = &c->subs[i];
        if (sub->s) reply(sub->s, sub->id, status, message);
    }
    coll_free(l, c);
}

/* Elements of the buffer a collective works on: size x count for the kinds
 * whose count is per rank. */
static uint64_t buffer_elems(const local *l, const msg_collective *m)
{
    int per_rank = m->kind == MSG_COLL_ALLGATHER || m->kind == MSG_COLL_REDUCE_SCATTER;
    return per_rank ? m->count * (uint64_t)l->ranks : m->count;
}

static void on_ring_done(ring_job *job, int status, const char *message)
{
    coll *c = job->data;
    local *l = c->owner;
    const msg_collective *m = &c->subs[c->work].m;
    if (status == 0 && job->kind != RINGD_COLL_BARRIER && job->count > 0) {
        /* Hand the result to the other local ranks: all of it, or for a
         * reduce-scatter each rank's own block. */
        size_t esize = ringd_dtype_size(m->dtype);
        size_t bytes = buffer_elems(l, m) * esize;
        int first = cfg_first_rank(l->cfg, (size_t)l->me);
        for (int i = 0; i < l->local_size; i++) {
            if (i == c->work || !c->subs[i].buf) continue;
            if (job->kind == RINGD_COLL_REDUCE_SCATTER) {
                size_t off = (size_t)(first + i) * m->count * esize;
                memcpy(c->subs[i].buf + off, job->buf + off, m->count * esize);
            } else {
                memcpy(c->subs[i].buf, job->buf, bytes);
            }
        }
    }
    coll_finish(l, c, status, message);
}

static const char *describe(const msg_collective *m, char *buf, size_t len)
{
    ring_describe(buf, len, m->kind, m->count, m->dtype, m->op, m->root);
    size_t n = strlen(buf);
    if (m->name[0] && n < len) snprintf(buf + n, len - n, " named \"%s\"", m->name);
    return buf;
}

static int same_collective(const msg_collective *a, const msg_collective *b)
{
    return a->kind == b->kind && a->count == b->count && a->dtype == b->dtype && a->op == b->op &&
           a->root == b->root && strcmp(a->name, b->name) == 0;
}

/* 16 bits of the FNV-1a hash of a collective's name, 0 for none: hosts
 * compare them, so that two collectives of the same shape but different
 * names (ranks out of step after an error) fail instead of being summed. */
static uint16_t name_tag(const char *name)
{
    if (!name[0]) return 0;
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 16777619u;
    uint16_t tag = (uint16_t)(h ^ (h >> 16));
    return tag ? tag : 1;
}

/* Hands c to the ring already failed: it keeps its place in the sequence,
 * and the ring tells every host why. */
static void coll_fail(local *l, coll *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void coll_fail(local *l, coll *c, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->failure, sizeof c->failure, fmt, ap);
    va_end(ap);
    c->running = 1;
    c->job = (ring_job){.kind = RINGD_COLL_BARRIER,
                        .dtype = RINGD_UINT8,
                        .op = RINGD_MAX,
                        .deadline = c->deadline,
                        .label = c->label,
                        .done = on_ring_done,
                        .data = c,
                        .preset_status = status,
                        .preset_message = c->failure};
    ring_submit(l->ring, &c->job);
}

/* All local ranks have submitted c: check they agree, combine their
 * buffers into one in local-rank order, and run it on the ring. */
static void coll_run(local *l, coll *c)
{
    const msg_collective *m0 = &c->subs[0].m;
    int first = cfg_first_rank(l->cfg, (size_t)l->me);
    for (int i = 1; i < l->local_size; i++) {
        const msg_collective *mi = &c->subs[i].m;
        if (!same_collective(m0, mi)) {
            char a[128], b[128];
            coll_fail(l, c, RINGD_EMISMATCH,
                      "%s #%" PRIu64 " differs between ranks on host %s: rank %d has %s, "
                      "rank %d has %s",
                      c->label, c->index, l->cfg->hosts[l->me].name, first,
                      describe(m0, a, sizeof a), first + i, describe(mi, b, sizeof b));
            return;
        }
    }

    size_t esize = ringd_dtype_size(m0->dtype);
    uint64_t elems = buffer_elems(l, m0);
    double weight = 0;
    c->work = 0;
    switch (m0->kind) {
    case MSG_COLL_ALLREDUCE:
    case MSG_COLL_REDUCE_SCATTER:
        for (int i = 0; i < l->local_size && m0->op == RINGD_WMEAN; i++) {
            weight += c->subs[i].m.weight;
            if (elems > 0) reduce_scale(m0->dtype, c->subs[i].buf, elems, c->subs[i].m.weight);
        }
        for (int i = 1; i < l->local_size && elems > 0; i++)
            reduce_apply(m0->dtype, m0->op, c->subs[0].buf, c->subs[i].buf, elems);
        break;
    case MSG_COLL_ALLGATHER:
        for (int i = 1; i < l->local_size && elems > 0; i++) {
            size_t off = (size_t)(first + i) * m0->count * esize;
            memcpy(c->subs[0].buf + off, c->subs[i].buf + off, m0->count * esize);
        }
        break;
    case MSG_COLL_BROADCAST:
        if (m0->root >= first && m0->root < first + l->local_size) c->work = m0->root - first;
        break;
    default:
        break;
    }

    c->running = 1;
    int barrier = m0->kind == MSG_COLL_BARRIER;
    c->job = (ring_job){.kind = (ringd_coll)m0->kind,
                        .buf = barrier ? &c->barrier_byte : c->subs[c->work].buf,
                        .count = barrier ? 1 : elems,
                        .per_rank = m0->count,
                        .dtype = barrier ? RINGD_UINT8 : m0->dtype,
                        .op = barrier ? RINGD_MAX : m0->op,
                        .root = m0->root,
                        .ranks = l->ranks,
                        .weight = weight,
                        .deadline = c->deadline + RING_GRACE_MS,
                        .label = c->label,
                        .name_tag = name_tag(m0->name),
                        .done = on_ring_done,
                        .data = c};
    ring_submit(l->ring, &c->job);
}

/* Checks a submission; 0, or a reply has said what is wrong. Normalises the
 * fields a kind does not use, so that ranks agree on them. */
static int check_collective(session *s, msg_collective *m, region **reg_out)
{
    local *l = s->owner;
    const char *kn = ring_coll_name(m->kind);
    if (s->observer) {
        replyf(s, m->id, RINGD_EINVAL, "this session is an observer and joins no collective");
        return -1;
    }
    if (m->kind < MSG_COLL_ALLREDUCE || m->kind > MSG_COLL_BARRIER) {
        replyf(s, m->id, RINGD_EINVAL, "unknown collective kind %u", m->kind);
        return -1;
    }
    if (m->kind == MSG_COLL_BARRIER) {
        m->count = 0;
        m->dtype = RINGD_UINT8;
    }
    if (m->dtype >= RINGD_DTYPE_COUNT) {
        replyf(s, m->id, RINGD_EINVAL, "%s: unknown dtype %u", kn, m->dtype);
        return -1;
    }
    if (m->kind == MSG_COLL_ALLREDUCE || m->kind == MSG_COLL_REDUCE_SCATTER) {
        if (m->op >= RINGD_OP_COUNT || reduce_check(m->dtype, m->op) < 0) {
            replyf(s, m->id, RINGD_EINVAL, "%s: op %s does not apply to dtype %s", kn,
                   ringd_op_name(m->op) ? ringd_op_name(m->op) : "?", ringd_dtype_name(m->dtype));
            return -1;
        }
        if (m->op == RINGD_WMEAN && !(m->weight >= 0 && isfinite(m->weight))) {
            replyf(s, m->id, RINGD_EINVAL, "%s: wmean needs a weight >= 0, got %g", kn, m->weight);
            return -1;
        }
    } else {
        m->op = 0;
    }
    if (m->kind == MSG_COLL_BROADCAST && (m->root < 0 || m->root >= l->ranks)) {
        replyf(s, m->id, RINGD_EINVAL, "broadcast: root %d is not a rank (0..%d)", m->root,
               l->ranks - 1);
        return -1;
    }
    if (m->kind != MSG_COLL_BROADCAST) m->root = 0;
    if (m->op != RINGD_WMEAN) m->weight = 0;

    size_t esize = ringd_dtype_size(m->dtype);
    uint64_t limit = l->cfg->max_buffer_bytes / esize;
    int per_rank = m->kind == MSG_COLL_ALLGATHER || m->kind == MSG_COLL_REDUCE_SCATTER;
    if (m->count > limit || (per_rank && m->count > limit / (uint64_t)l->ranks)) {
        replyf(s, m->id, RINGD_ETOOBIG,
               "%s of %" PRIu64 " x %s%s is over max_buffer (%" PRIu64 " bytes)", kn, m->count,
               ringd_dtype_name(m->dtype), per_rank ? " per rank" : "", l->cfg->max_buffer_bytes);
        return -1;
    }
    uint64_t bytes = buffer_elems(l, m) * esize;
    *reg_out = NULL;
    if (bytes == 0) return 0;
    region *reg = find_region(s, m->region);
    if (!reg || m->offset > reg->size || bytes > reg->size - m->offset) {
        replyf(s, m->id, RINGD_ERANGE,
               "%s: %" PRIu64 " bytes at offset %" PRIu64 " are outside region %u", kn, bytes,
               m->offset, m->region);
        return -1;
    }
    if (m->offset % esize != 0) {
        replyf(s, m->id, RINGD_EINVAL, "%s: buffer is not aligned to its %zu-byte elements", kn,
               esize);
        return -1;
    }
    *reg_out = reg;
    return 0;
}

static void do_collective(session *s, msg_collective *m)
{
    local *l = s->owner;
    char d[128];
    region *reg;
    if (check_collective(s, m, &reg) < 0) return;

    uint64_t index = s->next_index;
    if (index < l->next_index) {
        /* Its collective ended without it: it came too late. */
        s->next_index++;
        replyf(s, m->id, RINGD_ETIMEDOUT,
               "%s #%" PRIu64 " already ended on host %s without this rank: it came too late",
               ring_coll_name(m->kind), index, l->cfg->hosts[l->me].name);
        return;
    }
    coll *c = find_coll(l, index);
    if (c && (c->running || c->subs[s->local_rank].s)) {
        replyf(s, m->id, RINGD_EPROTO,
               "collective #%" PRIu64 " already has local rank %d's "
               "submission",
               index, s->local_rank);
        return;
    }
    if (!c) {
        if (l->n_colls >= MAX_COLLS) {
            replyf(s, m->id, RINGD_EBUSY, "too many collectives waiting for local ranks");
            return;
        }
        c = calloc(1, sizeof *c + (size_t)l->local_size * sizeof(submission));
        if (!c) {
            replyf(s, m->id, RINGD_ENOMEM, "out of memory");
            return;
        }
        c->index = index;
        c->owner = l;
        uint32_t timeout = m->timeout_ms ? m->timeout_ms : l->cfg->collective_timeout_ms;
        c->deadline = uv_now(l->loop) + timeout;
        if (m->name[0])
            snprintf(c->label, sizeof c->label, "%s \"%s\"", ring_coll_name(m->kind), m->name);
        else
            snprintf(c->label, sizeof c->label, "%s", ring_coll_name(m->kind));
        /* Keep the list in index order: the ring must run them in order. */
        coll **p = &l->colls;
        while (*p && (*p)->index < index)
            p = &(*p)->next;
        c->next = *p;
        *p = c;
        l->n_colls++;
    }
    s->next_index++;
    submission *sub = &c->subs[s->local_rank];
    *sub = (submission){
        .s = s, .id = m->id, .reg = reg, .buf = reg ? reg->base + m->offset : NULL, .m = *m};
    if (reg) reg->refs++;
    log_debug("local rank %d submitted %s #%" PRIu64 ": %s", s->local_rank, c->label, index,
              describe(m, d, sizeof d));
    if (++c->arrived == l->local_size) coll_run(l, c);
    if (l->colls && !uv_is_active((uv_handle_t *)&l->tick))
        uv_timer_start(&l->tick, on_tick, TICK_MS, TICK_MS);
}

/* Fails the collectives whose local ranks did not all arrive in time. The
 * ring enforces the deadline of those already running. */
static void on_tick(uv_timer_t *t)
{
    local *l = t->data;
    uint64_t now = uv_now(l->loop);
    int first = cfg_first_rank(l->cfg, (size_t)l->me);
    /* Handing a collective to the ring may finish others and free them, so
     * look again from the start each time. */
    for (;;) {
        coll *c = l->colls;
        while (c && (c->running || c->deadline > now))
            c = c->next;
        if (!c) break;
        char missing[256] = "";
        size_t len = 0;
        for (int i = 0; i < l->local_size && len < sizeof missing - 16; i++)
            if (!c->subs[i].s)
                len += (size_t)snprintf(missing + len, sizeof missing - len, "%s%d",
                                        len ? ", " : "", first + i);
        coll_fail(l, c, RINGD_ETIMEDOUT,
                  "%s #%" PRIu64 " timed out on host %s: rank(s) %s did not submit it in time "
                  "(%d of its %d local ranks did)",
                  c->label, c->index, l->cfg->hosts[l->me].name, missing, c->arrived,
                  l->local_size);
    }
    if (!l->colls) uv_timer_stop(&l->tick);
}

/* A newcomer's first submission joins the oldest collective still waiting
 * for local ranks, or the first after those already on the ring. */
static uint64_t joining_index(const local *l)
{
    uint64_t index = l->next_index;
    for (const coll *c = l->colls; c; c = c->next) {
        if (!c->running) return c->index;
        index = c->index + 1;
    }
    return index;
}

/* ---- status ---- */

static void do_status(session *s, const msg_status_req *m)
{
    local *l = s->owner;
    const cfg *c = l->cfg;
    const links *lk = ring_links(l->ring);
    ring_stats rs;
    links_stats ls;
    ring_get_stats(l->ring, &rs);
    links_get_stats(lk, &ls);
    const star *sr = ring_star(l->ring);
    if (sr) star_get_link_stats(sr, &ls);
    int n = (int)c->n_hosts;
    msg_status st = {.id = m->id,
                     .host_index = (uint32_t)l->me,
                     .n_hosts = (uint32_t)n,
                     .left_state = (uint8_t)links_state(lk, LINK_LEFT),
                     .right_state = (uint8_t)links_state(lk, LINK_RIGHT),
                     .epoch = links_epoch(lk),
                     .local_size = (uint32_t)l->local_size,
                     .collectives_done = rs.done,
                     .collectives_failed = rs.failed,
                     .bytes_in = ls.bytes_in,
                     .bytes_out = ls.bytes_out,
                     .uptime_ms = uv_now(l->loop) - l->start_ms,
                     .reconnects = ls.reconnects};
    /* Links report LINK_* states; the wire has its own, simpler set. */
    static const uint8_t wire[] = {MSG_LINK_DOWN, MSG_LINK_CONNECTING, MSG_LINK_CONNECTING,
                                   MSG_LINK_UP, MSG_LINK_SELF};
    if (sr) st.left_state = st.right_state = (uint8_t)star_state(sr);
    st.left_state = wire[st.left_state];
    st.right_state = wire[st.right_state];
    for (int i = 0; i < l->local_size; i++)
        st.clients += l->by_rank[i] != NULL;
    snprintf(st.cluster, sizeof st.cluster, "%s", c->cluster);
    snprintf(st.host, sizeof st.host, "%s", c->hosts[l->me].name);
    snprintf(st.left, sizeof st.left, "%s", c->hosts[(l->me + n - 1) % n].name);
    snprintf(st.right, sizeof st.right, "%s", c->hosts[(l->me + 1) % n].name);
    if (sr) {
        /* A star host's one peer that matters is the root. */
        snprintf(st.left, sizeof st.left, "%s", c->hosts[c->star_root_index].name);
        snprintf(st.right, sizeof st.right, "%s", c->hosts[c->star_root_index].name);
    }
    snprintf(st.last_error, sizeof st.last_error, "%s", rs.last_error);
    if (l->rates) rates_get(l->rates, &st.rate_in, &st.rate_out);
    st.waits = rs.waits;
    st.wait_sum_us = (uint64_t)(rs.wait_sum_s * 1e6);
    /* The recent collectives, oldest first. */
    uint64_t n_recent = rs.n_recent < RING_RECENT ? rs.n_recent : RING_RECENT;
    for (uint64_t i = rs.n_recent - n_recent; i < rs.n_recent && st.n_recent < MSG_MAX_RECENT;
         i++) {
        const ring_recent *e = &rs.recent[i % RING_RECENT];
        st.recent[st.n_recent++] = (msg_recent){.seq = e->seq,
                                                .kind = e->kind,
                                                .has_wait = e->has_wait,
                                                .status = e->status,
                                                .wait_us = e->wait_us,
                                                .latency_us = e->latency_us,
                                                .spread_us = e->spread_us};
        if (e->last_host >= 0 && (size_t)e->last_host < l->cfg->n_hosts)
            snprintf(st.recent[st.n_recent - 1].last, sizeof st.recent[0].last, "%s",
                     l->cfg->hosts[e->last_host].name);
    }
    uint8_t buf[MSG_HEADER_SIZE + MSG_MAX_BODY];
    queue_out(s, buf, msg_encode_status(buf, sizeof buf, &st));
}

/* ---- sessions ---- */

static void do_hello(session *s, const msg_hello *m)
{
    local *l = s->owner;
    const char *host = l->cfg->hosts[l->me].name;
    char text[MSG_MAX_TEXT];
    if (!s->pid) s->pid = m->pid; /* the kernel's word is better than the client's */
    if (m->flags & MSG_HELLO_OBSERVER) {
        s->observer = 1;
        s->local_rank = -1;
    } else {
        int want = m->local_rank;
        if (want >= l->local_size || want < -1) {
            snprintf(text, sizeof text,
                     "local rank %d is out of range: host %s has local_clients: %d (ranks 0..%d)",
                     want, host, l->local_size, l->local_size - 1);
            refuse(s, RINGD_EINVAL, text);
            return;
        }
        if (want >= 0 && l->by_rank[want]) {
            snprintf(text, sizeof text,
                     "local rank %d on host %s is taken by pid %u; is an earlier training "
                     "process still running?",
                     want, host, l->by_rank[want]->pid);
            refuse(s, RINGD_EBUSY, text);
            return;
        }
        if (want < 0)
            for (want = 0; want < l->local_size && l->by_rank[want]; want++)
                ;
        if (want == l->local_size) {
            snprintf(text, sizeof text,
                     "host %s already has its %d local client(s) (local_clients: %d); is an "
                     "earlier training process still running?",
                     host, l->local_size, l->local_size);
            refuse(s, RINGD_EBUSY, text);
            return;
        }
        s->local_rank = want;
        l->by_rank[want] = s;
        s->next_index = joining_index(l);
        log_info("local rank %d connected (pid %u)", want, m->pid);
    }
    s->welcomed = 1;
    msg_welcome w = {.rank =
                         s->observer ? -1 : cfg_first_rank(l->cfg, (size_t)l->me) + s->local_rank,
                     .size = l->ranks,
                     .local_rank = s->local_rank,
                     .local_size = l->local_size,
                     .host_index = (uint32_t)l->me,
                     .n_hosts = (uint32_t)l->cfg->n_hosts,
                     .max_bytes = l->cfg->max_buffer_bytes};
    snprintf(w.host, sizeof w.host, "%s", host);
    uint8_t buf[MSG_HEADER_SIZE + MSG_MAX_BODY];
    queue_out(s, buf, msg_encode_welcome(buf, sizeof buf, &w));
}

/* Decodes and runs one message; returns 0, or -1 after closing the session. */
static int handle_message(session *s, const msg_header *h, const uint8_t *body)
{
    union {
        msg_hello hello;
        msg_register reg;
        msg_unregister unreg;
        msg_collective coll;
        msg_status_req status;
    } m;
    int rc = MSG_EMALFORMED;
    if (!s->welcomed && h->type != MSG_HELLO) {
        char why[64];
        snprintf(why, sizeof why, "first message is %s, not HELLO", msg_type_name(h->type));
        drop(s, why);
        return -1;
    }
    switch (h->type) {
    case MSG_HELLO:
        if (s->welcomed) break;
        if ((rc = msg_decode_hello(h, body, &m.hello)) == 0) do_hello(s, &m.hello);
        break;
    case MSG_REGISTER:
        if ((rc = msg_decode_register(h, body, &m.reg)) == 0) do_register(s, &m.reg);
        break;
    case MSG_UNREGISTER:
        if ((rc = msg_decode_unregister(h, body, &m.unreg)) == 0) do_unregister(s, &m.unreg);
        break;
    case MSG_COLLECTIVE:
        if ((rc = msg_decode_collective(h, body, &m.coll)) == 0) do_collective(s, &m.coll);
        break;
    case MSG_STATUS_REQ:
        if ((rc = msg_decode_status_req(h, body, &m.status)) == 0) do_status(s, &m.status);
        break;
    default:
        break;
    }
    if (rc < 0) {
        char why[128];
        snprintf(why, sizeof why, "bad %s message: %s", msg_type_name(h->type), msg_strerror(rc));
        drop(s, why);
        return -1;
    }
    return s->closing ? -1 : 0;
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
                refuse(s, RINGD_EVERSION, why);
            } else
                drop(s, why);
            return;
        }
        if (s->in_len - pos < MSG_HEADER_SIZE + h.length) break;
        if (handle_message(s, &h, s->in + pos + MSG_HEADER_SIZE) < 0) return;
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
            drop(s, "too many file descriptors in one message");
            return;
        }
        if (n == 0 && s->in_len > 0) {
            char why[96];
            snprintf(why, sizeof why, "client disconnected in the middle of a message (%zu bytes)",
                     s->in_len);
            drop(s, why);
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

static void session_close(session *s, const char *why)
{
    if (s->closing) return;
    local *l = s->owner;
    s->closing = 1;
    /* Best effort: push out what is queued (an ERROR explaining a refusal). */
    if (s->out_len > 0) (void)!send(s->fd, s->out, s->out_len, MSG_NOSIGNAL | MSG_DONTWAIT);

    if (!s->observer && s->welcomed) {
        log_info("local rank %d disconnected (pid %u): %s", s->local_rank, s->pid, why);
        l->by_rank[s->local_rank] = NULL;
    } else {
        log_debug("local session closed (pid %u): %s", s->pid, why);
    }
    /* Withdraw its submissions; those already on the ring only lose their
     * reply, and keep their region mapped until the ring is done with it. */
    coll *next;
    for (coll *c = l->colls; c; c = next) {
        next = c->next;
        if (s->local_rank < 0 || c->subs[s->local_rank].s != s) continue;
        submission *sub = &c->subs[s->local_rank];
        if (c->running) {
            /* Its result can reach nobody here, and a process that died
             * mid-collective may not have finished writing its buffer:
             * fail it everywhere rather than return a sum that may hold
             * half a gradient. */
            sub->s = NULL;
            if (!c->failure[0])
                snprintf(c->failure, sizeof c->failure,
                         "rank %d (pid %u) on host %s exited during the collective (%s)",
                         cfg_first_rank(l->cfg, (size_t)l->me) + s->local_rank, s->pid,
                         l->cfg->hosts[l->me].name, why);
            ring_cancel(l->ring, &c->job, RINGD_EABORTED, c->failure);
            continue;
        }
        if (sub->reg) region_unref(sub->reg);
        memset(sub, 0, sizeof *sub);
        if (--c->arrived == 0) coll_free(l, c);
    }
    while (s->regions) {
        region *r = s->regions;
        s->regions = r->next;
        region_unref(r);
    }
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
            drop(s, why);
            continue;
        }
        s->pid = (uint32_t)pid;
        s->uid = (uint32_t)uid;
        if (!ok) {
            char text[MSG_MAX_TEXT];
            snprintf(text, sizeof text, "ringd on host %s refuses pid %u: %s",
                     l->cfg->hosts[l->me].name, s->pid, why);
            refuse(s, RINGD_EPERM, text);
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
            drop(s, "no HELLO within connect_timeout");
        else
            waiting++;
    }
    if (!waiting) uv_timer_stop(&l->hello_timer);
}

/* ---- lifecycle ---- */

int local_new(local **out, uv_loop_t *loop, const cfg *c, int me, ring *r)
{
    local *l = calloc(1, sizeof *l);
    if (!l) return RINGD_ENOMEM;
    l->loop = loop;
    l->cfg = c;
    l->me = me;
    l->ring = r;
    l->ranks = cfg_total_ranks(c);
    l->local_size = c->hosts[me].local_clients;
    l->listen_fd = -1;
    l->by_rank = calloc((size_t)l->local_size, sizeof *l->by_rank);
    if (!l->by_rank) {
        free(l);
        return RINGD_ENOMEM;
    }
    uv_timer_init(loop, &l->tick);
    uv_timer_init(loop, &l->hello_timer);
    l->tick.data = l->hello_timer.data = l;
    l->open_handles = 2;
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
    while (l->colls && !l->colls->running)
        coll_finish(l, l->colls, status, message);
    for (coll *c = l->colls; c;) { /* not running ones behind a running one */
        coll *next = c->next;
        if (!c->running) coll_finish(l, c, status, message);
        c = next;
    }
    while (l->sessions)
        session_close(l->sessions, message);
    if (l->listening) {
        uv_close((uv_handle_t *)&l->listen_poll, on_handle_closed);
        close(l->listen_fd);
        unlink(l->cfg->hosts[l->me].socket);
    }
    uv_close((uv_handle_t *)&l->tick, on_handle_closed);
    uv_close((uv_handle_t *)&l->hello_timer, on_handle_closed);
}

void local_set_rates(local *l, const rates *rt)
{
    l->rates = rt;
}

int local_clients(const local *l)
{
    int n = 0;
    for (int i = 0; i < l->local_size; i++)
        n += l->by_rank[i] != NULL;
    return n;
}
