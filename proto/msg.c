/*
 * msg.c - client <-> daemon messages on the Unix socket (layouts in
 * WIRE.md).
 *
 * Same discipline as frame.c: the header is checked before the body is read,
 * and a body must have exactly the bytes its type's layout needs. Fixed-size
 * fields come first and strings after them; fields added in later versions
 * follow (WELCOME's and COLLECTIVE's members_epoch, RESULT's and STATUS's
 * trailers). STATUS's optional blocks come in a fixed order, each sent when
 * it has something to say or a later block follows, so that one status has
 * one encoding.
 */
#include "proto/bytes.h"
#include "proto/msg.h"
#include "proto/summary-internal.h"

_Static_assert(MSG_HEADER_SIZE == BYTES_HEADER_SIZE, "one header layout for frames and messages");

/* The largest body, STATUS, must fit MSG_MAX_BODY or a daemon could build a
 * reply its own clients refuse. */
#define STATUS_MAX_BODY                                                                            \
    (80 + 4 * (2 + MSG_MAX_NAME) + 2 + MSG_MAX_TEXT + 33 +                                         \
     (40 + 2 + MSG_MAX_NAME) * MSG_MAX_RECENT + 2 * (2 + MSG_MAX_REASON) + 32 + 2 +                \
     MSG_MAX_WAITING + 1 + 8 * MSG_MAX_DONE + STATUS_MEMBERS_MAX + STATUS_RELOAD_MAX +             \
     STATUS_BALANCE_MAX)
/* The membership block: five counters and left_ring, resize_why, the out
 * ages and the host names. */
#define STATUS_MEMBERS_MAX (29 + 2 + MSG_MAX_REASON + 1 + 8 * MSG_MAX_DONE + 2 + MSG_MAX_TEXT)
/* The reload block: two counters, refused, reload_said. */
#define STATUS_RELOAD_MAX (17 + 2 + MSG_MAX_REASON)
/* A split: five counters, then rows and rate of up to MSG_MAX_SHARES ranks. */
#define SPLIT_MAX (28 + 12 * MSG_MAX_SHARES)
/* The balance block: its age and a split. */
#define STATUS_BALANCE_MAX (8 + SPLIT_MAX)
_Static_assert(STATUS_MAX_BODY <= MSG_MAX_BODY, "STATUS fits a message body");
_Static_assert(12 + 2 + MSG_MAX_TEXT + 12 <= MSG_MAX_BODY, "RESULT and ERROR fit a message body");

const char *msg_strerror(int err)
{
    switch (err) {
    case MSG_OK:
        return "success";
    case MSG_EAGAIN:
        return "incomplete message";
    case MSG_EMAGIC:
        return "bad magic: not a ringd client message";
    case MSG_EVERSION:
        return "unsupported client protocol version";
    case MSG_ETYPE:
        return "unknown message type";
    case MSG_ELENGTH:
        return "message length over the limit";
    case MSG_EMALFORMED:
        return "malformed message body";
    case MSG_ESPACE:
        return "buffer too small for message";
    }
    return "unknown message error";
}

const char *msg_type_name(int type)
{
    switch (type) {
    case MSG_HELLO:
        return "HELLO";
    case MSG_WELCOME:
        return "WELCOME";
    case MSG_ERROR:
        return "ERROR";
    case MSG_REGISTER:
        return "REGISTER";
    case MSG_UNREGISTER:
        return "UNREGISTER";
    case MSG_COLLECTIVE:
        return "COLLECTIVE";
    case MSG_RESULT:
        return "RESULT";
    case MSG_STATUS_REQ:
        return "STATUS_REQ";
    case MSG_STATUS:
        return "STATUS";
    case MSG_LEAVE_REQ:
        return "LEAVE_REQ";
    case MSG_BALANCE:
        return "BALANCE";
    case MSG_REPORT_REQ:
        return "REPORT_REQ";
    case MSG_REPORT:
        return "REPORT";
    }
    return "UNKNOWN";
}

int msg_decode_header(const uint8_t *buf, size_t len, msg_header *out)
{
    if (len < MSG_HEADER_SIZE) return MSG_EAGAIN;

    /* Filled before validation: on MSG_EVERSION the daemon names the
     * client's version in its ERROR. */
    out->version = buf[4];
    out->type = buf[5];
    out->flags = get_u16(buf + 6);
    out->length = get_u32(buf + 8);

    if (get_u32(buf) != MSG_MAGIC) return MSG_EMAGIC;
    if (out->version != MSG_VERSION) return MSG_EVERSION;
    if (out->type < MSG_HELLO || out->type > MSG_REPORT) return MSG_ETYPE;
    if (out->length > MSG_MAX_BODY) return MSG_ELENGTH;
    return MSG_OK;
}

static int finish(bytes_writer *w, msg_type type)
{
    if (w->overflow) return MSG_ESPACE;
    put_header(w->buf, MSG_MAGIC, MSG_VERSION, (uint8_t)type, 0,
               (uint32_t)(w->len - MSG_HEADER_SIZE));
    return (int)w->len;
}

/* A reader over the body of h, already failed if h is of another type:
 * handing a body to the wrong decoder is a bug, not a well-formed message. */
static bytes_reader reader(const msg_header *h, msg_type type, const uint8_t *body)
{
    bytes_reader r = {body, h->length, h->type != type};
    return r;
}

static int done(const bytes_reader *r)
{
    return rd_done(r) ? MSG_OK : MSG_EMALFORMED;
}

int msg_encode_hello(uint8_t *buf, size_t cap, const msg_hello *m)
{
    bytes_writer w;

    wr_begin(&w, buf, cap);
    wr_u32(&w, m->flags);
    wr_i32(&w, m->local_rank);
    wr_u32(&w, m->pid);
    return finish(&w, MSG_HELLO);
}

int msg_decode_hello(const msg_header *h, const uint8_t *body, msg_hello *out)
{
    bytes_reader r = reader(h, MSG_HELLO, body);

    out->flags = rd_u32(&r);
    out->local_rank = rd_i32(&r);
    out->pid = rd_u32(&r);
    return done(&r);
}

int msg_encode_welcome(uint8_t *buf, size_t cap, const msg_welcome *m)
{
    bytes_writer w;

    wr_begin(&w, buf, cap);
    wr_i32(&w, m->rank);
    wr_i32(&w, m->size);
    wr_i32(&w, m->local_rank);
    wr_i32(&w, m->local_size);
    wr_u32(&w, m->host_index);
    wr_u32(&w, m->n_hosts);
    wr_u64(&w, m->max_bytes);
    wr_str(&w, m->host, MSG_MAX_NAME);
    wr_u32(&w, m->members_epoch);
    return finish(&w, MSG_WELCOME);
}

int msg_decode_welcome(const msg_header *h, const uint8_t *body, msg_welcome *out)
{
    bytes_reader r = reader(h, MSG_WELCOME, body);

    out->rank = rd_i32(&r);
    out->size = rd_i32(&r);
    out->local_rank = rd_i32(&r);
    out->local_size = rd_i32(&r);
    out->host_index = rd_u32(&r);
    out->n_hosts = rd_u32(&r);
    out->max_bytes = rd_u64(&r);
    rd_str(&r, out->host, MSG_MAX_NAME);
    out->members_epoch = rd_u32(&r);
    return done(&r);
}

int msg_encode_error(uint8_t *buf, size_t cap, const msg_error *m)
{
    bytes_writer w;

    wr_begin(&w, buf, cap);
    wr_i32(&w, m->code);
    wr_str(&w, m->text, MSG_MAX_TEXT);
    return finish(&w, MSG_ERROR);
}

int msg_decode_error(const msg_header *h, const uint8_t *body, msg_error *out)
{
    bytes_reader r = reader(h, MSG_ERROR, body);

    out->code = rd_i32(&r);
    rd_str(&r, out->text, MSG_MAX_TEXT);
    return done(&r);
}

int msg_encode_register(uint8_t *buf, size_t cap, const msg_register *m)
{
    bytes_writer w;

    wr_begin(&w, buf, cap);
    wr_u64(&w, m->id);
    wr_u32(&w, m->region);
    wr_u64(&w, m->size);
    return finish(&w, MSG_REGISTER);
}

int msg_decode_register(const msg_header *h, const uint8_t *body, msg_register *out)
{
    bytes_reader r = reader(h, MSG_REGISTER, body);

    out->id = rd_u64(&r);
    out->region = rd_u32(&r);
    out->size = rd_u64(&r);
    return done(&r);
}

int msg_encode_unregister(uint8_t *buf, size_t cap, const msg_unregister *m)
{
    bytes_writer w;

    wr_begin(&w, buf, cap);
    wr_u64(&w, m->id);
    wr_u32(&w, m->region);
    return finish(&w, MSG_UNREGISTER);
}

int msg_decode_unregister(const msg_header *h, const uint8_t *body, msg_unregister *out)
{
    bytes_reader r = reader(h, MSG_UNREGISTER, body);

    out->id = rd_u64(&r);
    out->region = rd_u32(&r);
    return done(&r);
}

int msg_encode_collective(uint8_t *buf, size_t cap, const msg_collective *m)
{
    bytes_writer w;

    wr_begin(&w, buf, cap);
    wr_u64(&w, m->id);
    wr_u8(&w, m->kind);
    wr_u8(&w, m->dtype);
    wr_u8(&w, m->op);
    wr_u8(&w, m->wire);
    wr_u32(&w, m->region);
    wr_u64(&w, m->offset);
    wr_u64(&w, m->count);
    wr_i32(&w, m->root);
    wr_f64(&w, m->weight);
    wr_u32(&w, m->timeout_ms);
    wr_str(&w, m->name, MSG_MAX_NAME);
    wr_u32(&w, m->members_epoch);
    return finish(&w, MSG_COLLECTIVE);
}

int msg_decode_collective(const msg_header *h, const uint8_t *body, msg_collective *out)
{
    bytes_reader r = reader(h, MSG_COLLECTIVE, body);

    out->id = rd_u64(&r);
    out->kind = rd_u8(&r);
    out->dtype = rd_u8(&r);
    out->op = rd_u8(&r);
    out->wire = rd_u8(&r);
    if (out->wire > 3) r.bad = 1; /* ringd_wire: default, none, bfloat16, float16 */
    out->region = rd_u32(&r);
    out->offset = rd_u64(&r);
    out->count = rd_u64(&r);
    out->root = rd_i32(&r);
    out->weight = rd_f64(&r);
    out->timeout_ms = rd_u32(&r);
    rd_str(&r, out->name, MSG_MAX_NAME);
    out->members_epoch = rd_u32(&r);
    return done(&r);
}

int msg_encode_result(uint8_t *buf, size_t cap, const msg_result *m)
{
    bytes_writer w;

    wr_begin(&w, buf, cap);
    wr_u64(&w, m->id);
    wr_i32(&w, m->status);
    wr_str(&w, m->text, MSG_MAX_TEXT);
    /* Only a resize moves the session in the ring; size 0 is "not known",
     * which is the absence of the trailer, so that one message has one
     * encoding. */
    if (m->status == MSG_STATUS_RESIZED && m->size > 0) {
        wr_u32(&w, m->members_epoch);
        wr_i32(&w, m->rank);
        wr_i32(&w, m->size);
    }
    return finish(&w, MSG_RESULT);
}

int msg_decode_result(const msg_header *h, const uint8_t *body, msg_result *out)
{
    bytes_reader r = reader(h, MSG_RESULT, body);

    out->id = rd_u64(&r);
    out->status = rd_i32(&r);
    rd_str(&r, out->text, MSG_MAX_TEXT);
    out->members_epoch = 0;
    out->rank = out->size = 0;
    /* A daemon from before elastic rings sends no trailer. */
    if (out->status == MSG_STATUS_RESIZED && !r.bad && r.left > 0) {
        out->members_epoch = rd_u32(&r);
        out->rank = rd_i32(&r);
        out->size = rd_i32(&r);
        if (out->size <= 0) r.bad = 1;
    }
    return done(&r);
}

int msg_encode_status_req(uint8_t *buf, size_t cap, const msg_status_req *m)
{
    bytes_writer w;

    wr_begin(&w, buf, cap);
    wr_u64(&w, m->id);
    return finish(&w, MSG_STATUS_REQ);
}

int msg_decode_status_req(const msg_header *h, const uint8_t *body, msg_status_req *out)
{
    bytes_reader r = reader(h, MSG_STATUS_REQ, body);

    out->id = rd_u64(&r);
    return done(&r);
}

/* A split: its counters, then the entries of its first MSG_MAX_SHARES
 * ranks (as many as n_ranks says, so that the count is not sent twice). */
static void wr_split(bytes_writer *w, const msg_split *s)
{
    wr_u64(w, s->step);
    wr_u64(w, s->global_batch);
    wr_u32(w, s->resplits);
    wr_u32(w, s->every);
    wr_u32(w, s->n_ranks);
    for (uint32_t i = 0; i < s->n_ranks && i < MSG_MAX_SHARES; i++) {
        wr_u32(w, s->shares[i].rows);
        wr_f64(w, s->shares[i].rate);
    }
}

static void rd_split(bytes_reader *r, msg_split *s)
{
    s->step = rd_u64(r);
    s->global_batch = rd_u64(r);
    s->resplits = rd_u32(r);
    s->every = rd_u32(r);
    s->n_ranks = rd_u32(r);
    if (r->bad) s->n_ranks = 0;
    for (uint32_t i = 0; i < s->n_ranks && i < MSG_MAX_SHARES; i++) {
        s->shares[i].rows = rd_u32(r);
        s->shares[i].rate = rd_f64(r);
    }
}

int msg_encode_status(uint8_t *buf, size_t cap, const msg_status *m)
{
    bytes_writer w;

    wr_begin(&w, buf, cap);
    wr_u64(&w, m->id);
    wr_u32(&w, m->host_index);
    wr_u32(&w, m->n_hosts);
    wr_u8(&w, m->left_state);
    wr_u8(&w, m->right_state);
    wr_u16(&w, 0); /* reserved */
    wr_u32(&w, m->epoch);
    wr_u32(&w, m->clients);
    wr_u32(&w, m->local_size);
    wr_u64(&w, m->collectives_done);
    wr_u64(&w, m->collectives_failed);
    wr_u64(&w, m->bytes_in);
    wr_u64(&w, m->bytes_out);
    wr_u64(&w, m->uptime_ms);
    wr_u64(&w, m->reconnects);
    wr_str(&w, m->cluster, MSG_MAX_NAME);
    wr_str(&w, m->host, MSG_MAX_NAME);
    wr_str(&w, m->left, MSG_MAX_NAME);
    wr_str(&w, m->right, MSG_MAX_NAME);
    wr_str(&w, m->last_error, MSG_MAX_TEXT);
    wr_u64(&w, m->rate_in);
    wr_u64(&w, m->rate_out);
    wr_u64(&w, m->waits);
    wr_u64(&w, m->wait_sum_us);
    uint8_t n = m->n_recent < MSG_MAX_RECENT ? m->n_recent : MSG_MAX_RECENT;
    wr_u8(&w, n);
    for (uint8_t i = 0; i < n; i++) {
        const msg_recent *e = &m->recent[i];
        wr_u64(&w, e->seq);
        wr_u8(&w, e->kind);
        wr_u8(&w, e->has_wait);
        wr_i32(&w, e->status);
        wr_u64(&w, e->wait_us);
        wr_u64(&w, e->latency_us);
        wr_str(&w, e->last, MSG_MAX_NAME);
        wr_u64(&w, e->spread_us);
    }
    wr_str(&w, m->left_reason, MSG_MAX_REASON);
    wr_str(&w, m->right_reason, MSG_MAX_REASON);
    wr_u64(&w, m->left_age_ms);
    wr_u64(&w, m->right_age_ms);
    wr_u64(&w, m->last_error_age_ms);
    wr_u64(&w, m->next_seq);
    wr_str(&w, m->waiting, MSG_MAX_WAITING);
    uint8_t nd = m->n_done < MSG_MAX_DONE ? m->n_done : MSG_MAX_DONE;
    wr_u8(&w, nd);
    for (uint8_t i = 0; i < nd; i++)
        wr_u64(&w, m->done[i]);
    int balance = m->split.n_ranks > 0;
    if (m->n_live > 0 || m->reloads > 0 || balance) {
        wr_u32(&w, m->members_epoch);
        wr_u32(&w, m->min_hosts);
        wr_u32(&w, m->n_live);
        wr_u64(&w, m->live);
        wr_u64(&w, m->resizes);
        wr_u8(&w, m->left_ring);
        wr_str(&w, m->resize_why, MSG_MAX_REASON);
        uint8_t no = m->n_out < MSG_MAX_DONE ? m->n_out : MSG_MAX_DONE;
        wr_u8(&w, no);
        for (uint8_t i = 0; i < no; i++)
            wr_u64(&w, m->out_age_ms[i]);
        wr_str(&w, m->hosts, MSG_MAX_TEXT);
    }
    if (m->reloads > 0 || balance) {
        wr_u64(&w, m->reloads);
        wr_u64(&w, m->reload_age_ms);
        wr_u8(&w, m->reload_refused);
        wr_str(&w, m->reload_said, MSG_MAX_REASON);
    }
    if (balance) {
        wr_u64(&w, m->balance_age_ms);
        wr_split(&w, &m->split);
    }
    return finish(&w, MSG_STATUS);
}

int msg_decode_status(const msg_header *h, const uint8_t *body, msg_status *out)
{
    bytes_reader r = reader(h, MSG_STATUS, body);

    out->id = rd_u64(&r);
    out->host_index = rd_u32(&r);
    out->n_hosts = rd_u32(&r);
    out->left_state = rd_u8(&r);
    out->right_state = rd_u8(&r);
    if (rd_u16(&r) != 0) r.bad = 1;
    out->epoch = rd_u32(&r);
    out->clients = rd_u32(&r);
    out->local_size = rd_u32(&r);
    out->collectives_done = rd_u64(&r);
    out->collectives_failed = rd_u64(&r);
    out->bytes_in = rd_u64(&r);
    out->bytes_out = rd_u64(&r);
    out->uptime_ms = rd_u64(&r);
    out->reconnects = rd_u64(&r);
    rd_str(&r, out->cluster, MSG_MAX_NAME);
    rd_str(&r, out->host, MSG_MAX_NAME);
    rd_str(&r, out->left, MSG_MAX_NAME);
    rd_str(&r, out->right, MSG_MAX_NAME);
    rd_str(&r, out->last_error, MSG_MAX_TEXT);
    out->rate_in = rd_u64(&r);
    out->rate_out = rd_u64(&r);
    out->waits = rd_u64(&r);
    out->wait_sum_us = rd_u64(&r);
    out->n_recent = rd_u8(&r);
    if (out->n_recent > MSG_MAX_RECENT) {
        out->n_recent = 0;
        r.bad = 1;
    }
    for (uint8_t i = 0; i < out->n_recent; i++) {
        msg_recent *e = &out->recent[i];
        e->seq = rd_u64(&r);
        e->kind = rd_u8(&r);
        e->has_wait = rd_u8(&r);
        e->status = rd_i32(&r);
        e->wait_us = rd_u64(&r);
        e->latency_us = rd_u64(&r);
        rd_str(&r, e->last, MSG_MAX_NAME);
        e->spread_us = rd_u64(&r);
    }
    rd_str(&r, out->left_reason, MSG_MAX_REASON);
    rd_str(&r, out->right_reason, MSG_MAX_REASON);
    out->left_age_ms = rd_u64(&r);
    out->right_age_ms = rd_u64(&r);
    out->last_error_age_ms = rd_u64(&r);
    out->next_seq = rd_u64(&r);
    rd_str(&r, out->waiting, MSG_MAX_WAITING);
    out->n_done = rd_u8(&r);
    if (out->n_done > MSG_MAX_DONE) {
        out->n_done = 0;
        r.bad = 1;
    }
    for (uint8_t i = 0; i < out->n_done; i++)
        out->done[i] = rd_u64(&r);
    out->members_epoch = out->min_hosts = out->n_live = 0;
    out->live = out->resizes = 0;
    out->left_ring = 0;
    out->resize_why[0] = out->hosts[0] = '\0';
    out->n_out = 0;
    out->reloads = out->reload_age_ms = 0;
    out->reload_refused = 0;
    out->reload_said[0] = '\0';
    out->balance_age_ms = 0;
    out->split.n_ranks = 0;
    /* The membership block, absent from an older daemon and when this one
     * reports neither membership nor a reload (n_live 0: no membership). */
    int saw_members = !r.bad && r.left > 0;
    if (saw_members) {
        out->members_epoch = rd_u32(&r);
        out->min_hosts = rd_u32(&r);
        out->n_live = rd_u32(&r);
        out->live = rd_u64(&r);
        out->resizes = rd_u64(&r);
        out->left_ring = rd_u8(&r);
        rd_str(&r, out->resize_why, MSG_MAX_REASON);
        out->n_out = rd_u8(&r);
        if (out->n_out > MSG_MAX_DONE) {
            out->n_out = 0;
            r.bad = 1;
        }
        for (uint8_t i = 0; i < out->n_out; i++)
            out->out_age_ms[i] = rd_u64(&r);
        rd_str(&r, out->hosts, MSG_MAX_TEXT);
    }
    /* The reload block, after a membership block, and the balance block
     * after both. One body has one decoding: a membership block with n_live
     * 0 is sent only before a reload block, which is sent with reloads 0
     * only before a balance block, which is never sent with no ranks. */
    int saw_reload = !r.bad && r.left > 0;
    if (saw_reload) {
        out->reloads = rd_u64(&r);
        out->reload_age_ms = rd_u64(&r);
        out->reload_refused = rd_u8(&r);
        rd_str(&r, out->reload_said, MSG_MAX_REASON);
    } else if (!r.bad && saw_members && out->n_live == 0) {
        r.bad = 1;
    }
    if (!r.bad && r.left > 0) {
        out->balance_age_ms = rd_u64(&r);
        rd_split(&r, &out->split);
        if (out->split.n_ranks == 0) r.bad = 1;
    } else if (!r.bad && saw_reload && out->reloads == 0) {
        r.bad = 1;
    }
    return done(&r);
}

int msg_encode_leave_req(uint8_t *buf, size_t cap, const msg_leave_req *m)
{
    bytes_writer w;

    wr_begin(&w, buf, cap);
    wr_u64(&w, m->id);
    wr_u8(&w, m->action);
    return finish(&w, MSG_LEAVE_REQ);
}

int msg_decode_leave_req(const msg_header *h, const uint8_t *body, msg_leave_req *out)
{
    bytes_reader r = reader(h, MSG_LEAVE_REQ, body);

    out->id = rd_u64(&r);
    out->action = rd_u8(&r);
    return done(&r);
}

int msg_encode_balance(uint8_t *buf, size_t cap, const msg_balance *m)
{
    bytes_writer w;

    wr_begin(&w, buf, cap);
    wr_u64(&w, m->id);
    wr_split(&w, &m->split);
    return finish(&w, MSG_BALANCE);
}

int msg_decode_balance(const msg_header *h, const uint8_t *body, msg_balance *out)
{
    bytes_reader r = reader(h, MSG_BALANCE, body);

    out->id = rd_u64(&r);
    rd_split(&r, &out->split);
    return done(&r);
}

int msg_encode_report_req(uint8_t *buf, size_t cap, const msg_report_req *m)
{
    bytes_writer w;

    wr_begin(&w, buf, cap);
    wr_u64(&w, m->id);
    return finish(&w, MSG_REPORT_REQ);
}

int msg_decode_report_req(const msg_header *h, const uint8_t *body, msg_report_req *out)
{
    bytes_reader r = reader(h, MSG_REPORT_REQ, body);

    out->id = rd_u64(&r);
    return done(&r);
}

int msg_encode_report(uint8_t *buf, size_t cap, const msg_report *m)
{
    bytes_writer w;

    wr_begin(&w, buf, cap);
    wr_u64(&w, m->id);
    wr_u32(&w, m->index);
    wr_u32(&w, m->count);
    wr_u32(&w, m->n_hosts);
    wr_u32(&w, m->me);
    wr_u32(&w, m->host_index);
    wr_u64(&w, m->now_us);
    wr_u8(&w, m->flags);
    wr_str(&w, m->cluster, MSG_MAX_NAME);
    wr_str(&w, m->host, MSG_MAX_NAME);
    if (m->flags & MSG_REPORT_HAS_PART) summary_put(&w, &m->part);
    return finish(&w, MSG_REPORT);
}

int msg_decode_report(const msg_header *h, const uint8_t *body, msg_report *out)
{
    bytes_reader r = reader(h, MSG_REPORT, body);

    out->id = rd_u64(&r);
    out->index = rd_u32(&r);
    out->count = rd_u32(&r);
    out->n_hosts = rd_u32(&r);
    out->me = rd_u32(&r);
    out->host_index = rd_u32(&r);
    out->now_us = rd_u64(&r);
    out->flags = rd_u8(&r);
    rd_str(&r, out->cluster, MSG_MAX_NAME);
    rd_str(&r, out->host, MSG_MAX_NAME);
    out->part.n = 0;
    if (out->flags & MSG_REPORT_HAS_PART) summary_get(&r, &out->part);
    if (out->index >= out->count || out->me >= out->n_hosts || out->host_index >= out->n_hosts)
        r.bad = 1;
    if ((out->flags & ~MSG_REPORT_HAS_PART) ||
        ((out->flags & MSG_REPORT_HAS_PART) && out->part.host != out->host_index))
        r.bad = 1;
    return done(&r);
}
