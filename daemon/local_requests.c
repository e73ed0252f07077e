/*
 * local_requests.c - what a local session asks for: HELLO (which local rank
 * it is), REGISTER and UNREGISTER (its shared memory, regions.c),
 * COLLECTIVE (checked here, then gathered with the other local ranks' by
 * gather.c), STATUS_REQ (status.c), LEAVE_REQ (ringctl leave and join),
 * BALANCE (the split of a balanced job, kept for STATUS) and REPORT_REQ
 * (report.c).
 *
 * Each handler decides and session_handle() answers: a request the daemon
 * refuses gets its RESULT in its place among the session's answers, and the
 * session goes on. Only what does not decode closes it.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "local-internal.h"
#include "log.h"
#include "reduce.h"
#include "reduce_wire.h"
#include "status.h"

/* What a handler returns when session_handle() has nothing to answer:
 * gather answers an accepted COLLECTIVE, and STATUS_REQ has its STATUS. */
#define ANSWERED 1
#define TEXT_LEN (MSG_MAX_TEXT + 1)

/* Writes a RESULT's text (why a request is refused, or what was done) into
 * text, of TEXT_LEN bytes; returns status. */
static int explainf(char *text, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int explainf(char *text, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, TEXT_LEN, fmt, ap);
    va_end(ap);
    return status;
}

/* ---- regions ---- */

int session_take_fd(session *s)
{
    if (s->n_fds == 0) return -1;
    int fd = s->fds[0];
    memmove(s->fds, s->fds + 1, (size_t)(s->n_fds - 1) * sizeof *s->fds);
    s->n_fds--;
    return fd;
}

static int do_register(session *s, const msg_register *m, char *text)
{
    return regions_add(&s->regions, m->region, m->size, session_take_fd(s), text, TEXT_LEN);
}

static int do_unregister(session *s, const msg_unregister *m, char *text)
{
    if (regions_remove(&s->regions, m->region) == 0) return 0;
    return explainf(text, RINGD_EINVAL, "unregister: no region %u", m->region);
}

/* ---- collectives ---- */

/* Checks a submission: 0, or a RINGD_E* code with what is wrong in text.
 * Normalises the fields a kind does not use, so that ranks agree on them. */
static int check_collective(session *s, msg_collective *m, region **reg_out, char *text)
{
    local *l = s->owner;
    const char *kn = engine_kind_name(m->kind);
    if (s->observer) {
        return explainf(text, RINGD_EINVAL, "this session is an observer and joins no collective");
    }
    if (m->kind < MSG_COLL_ALLREDUCE || m->kind > MSG_COLL_BARRIER) {
        return explainf(text, RINGD_EINVAL, "unknown collective kind %u", m->kind);
    }
    if (m->kind == MSG_COLL_BARRIER) {
        m->count = 0;
        m->dtype = RINGD_UINT8;
    }
    if (m->dtype >= RINGD_DTYPE_COUNT) {
        return explainf(text, RINGD_EINVAL, "%s: unknown dtype %u", kn, m->dtype);
    }
    if (m->kind == MSG_COLL_ALLREDUCE || m->kind == MSG_COLL_REDUCE_SCATTER) {
        if (m->op >= RINGD_OP_COUNT || reduce_check(m->dtype, m->op) < 0) {
            return explainf(text, RINGD_EINVAL, "%s: op %s does not apply to dtype %s", kn,
                            ringd_op_name(m->op) ? ringd_op_name(m->op) : "?",
                            ringd_dtype_name(m->dtype));
        }
        if (m->op == RINGD_WMEAN && !(m->weight >= 0 && isfinite(m->weight))) {
            return explainf(text, RINGD_EINVAL, "%s: wmean needs a weight >= 0, got %g", kn,
                            m->weight);
        }
    } else {
        m->op = 0;
    }
    int ranks = engine_ranks(l->engine);
    if (m->kind == MSG_COLL_BROADCAST && (m->root < 0 || m->root >= ranks)) {
        return explainf(text, RINGD_EINVAL, "broadcast: root %d is not a rank (0..%d)", m->root,
                        ranks - 1);
    }
    if (m->kind != MSG_COLL_BROADCAST) m->root = 0;
    /* cfg_wire counts from none as ringd_wire does from RINGD_WIRE_NONE. */
    int wire = reduce_wire_of((ringd_coll)m->kind, m->dtype, m->wire,
                              RINGD_WIRE_NONE + (int)l->cfg->wire_dtype);
    if (wire < 0) {
        return explainf(text, RINGD_EINVAL,
                        "%s: a narrow wire_dtype is for float32 allreduce, reduce_scatter "
                        "and allgather, not %s",
                        kn, ringd_dtype_name(m->dtype));
    }
    m->wire = (uint8_t)wire;
    if (m->op != RINGD_WMEAN) m->weight = 0;

    size_t esize = ringd_dtype_size(m->dtype);
    uint64_t limit = l->cfg->max_buffer_bytes / esize;
    int per_rank = m->kind == MSG_COLL_ALLGATHER || m->kind == MSG_COLL_REDUCE_SCATTER;
    if (m->count > limit || (per_rank && m->count > limit / (uint64_t)ranks)) {
        return explainf(text, RINGD_ETOOBIG,
                        "%s of %" PRIu64 " x %s%s is over max_buffer (%" PRIu64 " bytes)", kn,
                        m->count, ringd_dtype_name(m->dtype), per_rank ? " per rank" : "",
                        l->cfg->max_buffer_bytes);
    }
    uint64_t bytes = (per_rank ? m->count * (uint64_t)ranks : m->count) * esize;
    *reg_out = NULL;
    if (bytes == 0) return 0;
    region *reg = regions_find(&s->regions, m->region);
    if (!reg || m->offset > reg->size || bytes > reg->size - m->offset) {
        return explainf(text, RINGD_ERANGE,
                        "%s: %" PRIu64 " bytes at offset %" PRIu64 " are outside region %u", kn,
                        bytes, m->offset, m->region);
    }
    if (m->offset % esize != 0) {
        return explainf(text, RINGD_EINVAL, "%s: buffer is not aligned to its %zu-byte elements",
                        kn, esize);
    }
    *reg_out = reg;
    return 0;
}

/* Hands a COLLECTIVE to gather, or returns why it fails before it starts:
 * then it takes no part in the numbering. */
static int do_collective(session *s, msg_collective *m, char *text)
{
    local *l = s->owner;
    region *reg = NULL;
    char label[MSG_MAX_NAME + 32];
    /* Made for another membership (its rank, size and root are of that
     * one): it fails, as every rank's collectives do until they know of
     * the resize. */
    engine_view v;
    engine_get_view(l->engine, &v);
    if (!s->observer && m->members_epoch != v.members_epoch) {
        /* With the resize that ended the membership it was made for, as
         * the calls that resize settled (local.c, resize_trailer()). */
        const engine_resize *z = session_resize(s, &v, m->members_epoch);
        return explainf(text, RINGD_ERESIZED, "%s failed: %s", gather_label(m, label, sizeof label),
                        z                 ? z->why
                        : v.resize_why[0] ? v.resize_why
                                          : "the ring was resized");
    }
    int rc = check_collective(s, m, &reg, text);
    if (rc < 0) return rc;
    /* A rank that left fails the collectives of the ranks that knew it,
     * until a process takes its place; a process that has not submitted
     * anything yet is in step with that one, whenever it connected. */
    if (!s->submitted) {
        s->submitted = 1;
        s->born = engine_generation(l->engine);
    }
    char why[MSG_MAX_TEXT];
    if (!gather_settled_before(l->gather, &s->pos) &&
        engine_left(l->engine, s->born, why, sizeof why)) {
        /* As the verdict words it for the ranks whose collective was on the
         * ring (job_verdict_apply()). */
        return explainf(text, RINGD_EABORTED, "%s failed: %.*s",
                        gather_label(m, label, sizeof label), FRAME_MAX_TEXT, why);
    }
    gather_submit(l->gather, s, s->local_rank, &s->pos, m->id, reg,
                  reg ? reg->base + m->offset : NULL, m);
    return ANSWERED;
}

/* ---- status ---- */

static int do_status(session *s, const msg_status_req *m)
{
    local *l = s->owner;
    status_snapshot snap;
    msg_status st;
    uint64_t now = uv_now(l->loop);
    status_collect(&snap, l->cfg, l->me, l->engine, local_clients(l), now, now - l->start_ms,
                   l->rates, l->reload, l->balance);
    status_message(&snap, m->id, &st);
    uint8_t buf[MSG_HEADER_SIZE + MSG_MAX_BODY];
    session_queue(s, buf, msg_encode_status(buf, sizeof buf, &st));
    return ANSWERED;
}

/* ---- a balanced job's split ---- */

/* Keeps the split a rank reports for STATUS. Every rank of the job computes
 * the same split, so whichever of the host's ranks reported last, the table
 * is the job's; the daemon only shows it. */
static int do_balance(session *s, const msg_balance *m, char *text)
{
    local *l = s->owner;
    const msg_split *sp = &m->split;
    if (s->observer)
        return explainf(text, RINGD_EINVAL, "balance: an observer session is no rank of a job");
    if (!l->balance) return explainf(text, RINGD_EINVAL, "balance: this daemon keeps no split");
    if (sp->n_ranks == 0) return explainf(text, RINGD_EINVAL, "balance: a split of no ranks");
    uint64_t rows = 0;
    for (uint32_t i = 0; i < sp->n_ranks && i < MSG_MAX_SHARES; i++) {
        double rate = sp->shares[i].rate;
        if (!(rate >= 0 && isfinite(rate)))
            return explainf(text, RINGD_EINVAL, "balance: rank %u's rate is %g rows/s", i, rate);
        rows += sp->shares[i].rows;
    }
    if (sp->n_ranks <= MSG_MAX_SHARES && rows != sp->global_batch)
        return explainf(text, RINGD_EINVAL,
                        "balance: the ranks' rows sum to %" PRIu64 ", not the global batch of "
                        "%" PRIu64,
                        rows, sp->global_batch);
    l->balance->split = *sp;
    l->balance->at_ms = uv_now(l->loop);
    return 0;
}

/* ---- ringctl report ---- */

static void put_report(void *data, const msg_report *m)
{
    static uint8_t buf[MSG_HEADER_SIZE + MSG_MAX_BODY];
    session_queue(data, buf, msg_encode_report(buf, sizeof buf, m));
}

/* Every host's summary, in REPORT messages (a STATUS_REQ's kind of
 * answer: at once, before RESULTs still due). */
static int do_report(session *s, const msg_report_req *m, char *text)
{
    local *l = s->owner;
    if (!l->report)
        return explainf(text, RINGD_EINVAL, "host %s keeps no report", l->cfg->hosts[l->me].name);
    report_answer(l->report, m->id, put_report, s);
    return ANSWERED;
}

/* A COLLECTIVE's kind and buffer bytes, for its rank's accounting, as far
 * as they make sense before it is checked. */
static uint8_t coll_kind(const msg_collective *m)
{
    return m->kind >= MSG_COLL_ALLREDUCE && m->kind <= MSG_COLL_BARRIER ? m->kind : 0;
}

static uint64_t coll_bytes(const session *s, const msg_collective *m)
{
    if (m->dtype >= RINGD_DTYPE_COUNT || m->kind == MSG_COLL_BARRIER) return 0;
    uint64_t n = m->count;
    if (m->kind == MSG_COLL_ALLGATHER || m->kind == MSG_COLL_REDUCE_SCATTER)
        n *= (uint64_t)engine_ranks(s->owner->engine);
    return n * ringd_dtype_size(m->dtype);
}

/* ---- ringctl leave, ringctl join ---- */

static int do_leave(session *s, const msg_leave_req *m, char *text)
{
    local *l = s->owner;
    const char *host = l->cfg->hosts[l->me].name;
    if (m->action != MSG_LEAVE && m->action != MSG_JOIN) {
        return explainf(text, RINGD_EINVAL, "leave: unknown action %u", m->action);
    }
    int leave = m->action == MSG_LEAVE;
    char why[128];
    snprintf(why, sizeof why, "ringctl leave on host %s", host);
    if (engine_leave(l->engine, leave, why) < 0) {
        return explainf(text, RINGD_EINVAL,
                        "host %s cannot %s: this ring does not close over hosts (evict_after: 0, "
                        "algorithm: star, or more than %d hosts); stop or start its daemon "
                        "instead",
                        host, leave ? "leave the ring" : "join the ring", CFG_MAX_ELASTIC);
    }
    if (leave)
        return explainf(text, 0,
                        "host %s left the ring: the others close over it now; its ranks' "
                        "collectives fail until `ringctl join`",
                        host);
    return explainf(text, 0, "host %s joins the ring again", host);
}

/* ---- sessions ---- */

static void do_hello(session *s, const msg_hello *m)
{
    local *l = s->owner;
    const char *host = l->cfg->hosts[l->me].name;
    char text[MSG_MAX_TEXT];
    /* A HELLO has no id for a RESULT: its refusal is an ERROR, which ends
     * the session. */
    if (s->welcomed) {
        snprintf(text, sizeof text, "HELLO again: this session is %s already",
                 s->observer ? "an observer" : "a local rank");
        session_refuse(s, RINGD_EINVAL, text);
        return;
    }
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
            session_refuse(s, RINGD_EINVAL, text);
            return;
        }
        if (want >= 0 && l->by_rank[want]) {
            snprintf(text, sizeof text,
                     "local rank %d on host %s is taken by pid %u; is an earlier training "
                     "process still running?",
                     want, host, l->by_rank[want]->pid);
            session_refuse(s, RINGD_EBUSY, text);
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
            session_refuse(s, RINGD_EBUSY, text);
            return;
        }
        s->local_rank = want;
        l->by_rank[want] = s;
        l->left[want][0] = '\0';
        gather_join(l->gather, &s->pos);
        if (l->report) report_connect(l->report, want, s->pid);
        log_info("local rank %d connected (pid %u)", want, m->pid);
        local_report_members(l);
    }
    s->welcomed = 1;
    engine_view v;
    engine_get_view(l->engine, &v);
    msg_welcome w = {.rank =
                         s->observer ? -1 : cfg_first_rank(v.hosts, (size_t)v.me) + s->local_rank,
                     .size = cfg_total_ranks(v.hosts),
                     .members_epoch = v.members_epoch,
                     .local_rank = s->local_rank,
                     .local_size = l->local_size,
                     .host_index = (uint32_t)l->me,
                     .n_hosts = (uint32_t)l->cfg->n_hosts,
                     .max_bytes = l->cfg->max_buffer_bytes};
    snprintf(w.host, sizeof w.host, "%s", host);
    uint8_t buf[MSG_HEADER_SIZE + MSG_MAX_BODY];
    session_queue(s, buf, msg_encode_welcome(buf, sizeof buf, &w));
}

/* Decodes and runs one message, and answers it: every request's RESULT,
 * a refusal's too, goes through session_answer() here. */
void session_handle(session *s, const msg_header *h, const uint8_t *body)
{
    union {
        msg_hello hello;
        msg_register reg;
        msg_unregister unreg;
        msg_collective coll;
        msg_status_req status;
        msg_leave_req leave;
        msg_balance balance;
        msg_report_req report;
    } m;
    char text[TEXT_LEN] = "";
    uint64_t id = 0;
    int rc = MSG_EMALFORMED, status = ANSWERED;
    if (!s->welcomed && h->type != MSG_HELLO) {
        char why[64];
        snprintf(why, sizeof why, "first message is %s, not HELLO", msg_type_name(h->type));
        session_drop(s, why);
        return;
    }
    switch (h->type) {
    case MSG_HELLO:
        if ((rc = msg_decode_hello(h, body, &m.hello)) == 0) do_hello(s, &m.hello);
        break;
    case MSG_REGISTER:
        if ((rc = msg_decode_register(h, body, &m.reg)) < 0) break;
        id = m.reg.id;
        status = do_register(s, &m.reg, text);
        break;
    case MSG_UNREGISTER:
        if ((rc = msg_decode_unregister(h, body, &m.unreg)) < 0) break;
        id = m.unreg.id;
        status = do_unregister(s, &m.unreg, text);
        break;
    case MSG_COLLECTIVE:
        if ((rc = msg_decode_collective(h, body, &m.coll)) < 0) break;
        /* Its place among the answers first: whatever answers it, a refusal
         * here or gather later, waits for the COLLECTIVEs before it. */
        if (session_expect(s, m.coll.id, coll_kind(&m.coll), coll_bytes(s, &m.coll),
                           m.coll.members_epoch) < 0) {
            session_drop(s, "too many collectives not answered yet");
            return;
        }
        id = m.coll.id;
        status = do_collective(s, &m.coll, text);
        break;
    case MSG_STATUS_REQ:
        if ((rc = msg_decode_status_req(h, body, &m.status)) == 0) status = do_status(s, &m.status);
        break;
    case MSG_LEAVE_REQ:
        if ((rc = msg_decode_leave_req(h, body, &m.leave)) < 0) break;
        id = m.leave.id;
        status = do_leave(s, &m.leave, text);
        break;
    case MSG_BALANCE:
        if ((rc = msg_decode_balance(h, body, &m.balance)) < 0) break;
        id = m.balance.id;
        status = do_balance(s, &m.balance, text);
        break;
    case MSG_REPORT_REQ:
        if ((rc = msg_decode_report_req(h, body, &m.report)) < 0) break;
        id = m.report.id;
        status = do_report(s, &m.report, text);
        break;
    default:
        break;
    }
    if (rc < 0) {
        char why[128];
        snprintf(why, sizeof why, "bad %s message: %s", msg_type_name(h->type), msg_strerror(rc));
        session_drop(s, why);
        return;
    }
    if (status != ANSWERED) session_answer(s, h->type, id, status, text);
}
