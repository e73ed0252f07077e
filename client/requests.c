/*
 * requests.c - libringd's outstanding requests and the daemon's replies.
 *
 * Requests complete in submission order, because the daemon answers in that
 * order: whoever reads a RESULT completes the oldest outstanding request,
 * whether that is ringd_wait() or a call waiting for its own reply
 * (REGISTER, UNREGISTER), which completes the collectives answered before
 * it on the way.
 */
#include <stdlib.h>
#include <string.h>

#include "region.h"
#include "requests.h"

int requests_broken(ringd_client *c, const char *what)
{
    return session_fail(&c->s, c->s.broken < 0 ? c->s.broken : RINGD_ECLOSED,
                        "%s: the session with ringd at %s failed earlier and cannot be used; "
                        "call ringd_close() and ringd_connect() again",
                        what, c->s.path);
}

/* Records the outcome of the oldest outstanding request, which r must
 * answer, and delivers its result. Returns 0, or -1 if r answers nothing. */
static int complete(ringd_client *c, const msg_result *r)
{
    struct ringd_request *q = c->requests;
    while (q && q->done)
        q = q->next;
    if (!q || q->id != r->id) return -1;
    q->done = 1;
    q->status = r->status;
    if (r->status < 0)
        q->text = strdup(r->text[0] ? r->text : ringd_strerror(r->status));
    else if (q->result_bytes > 0 && (q->staging || q->user != q->work + q->result_off))
        memmove(q->user, q->work + q->result_off, q->result_bytes);
    if (q->staging) region_give_spare(c, q->staging);
    q->staging = NULL;
    return 0;
}

/* The session broke: every outstanding request fails with its error. */
void requests_fail_all(ringd_client *c, int code)
{
    for (struct ringd_request *q = c->requests; q; q = q->next) {
        if (q->done) continue;
        q->done = 1;
        q->status = code;
        q->text = strdup(c->s.err);
        if (q->staging) region_unmap(q->staging);
        q->staging = NULL;
    }
}

_Static_assert(MSG_STATUS_RESIZED == RINGD_ERESIZED, "proto/msg.h knows RINGD_ERESIZED");

/* A resize moved this session in the ring: it takes its new place before
 * the call that failed returns, so that the caller's next collective is
 * sized for the new ring. A trailer that names no possible rank (or none,
 * from an older daemon) leaves the old place. */
static void note_result(ringd_client *c, const msg_result *r)
{
    if (r->status != RINGD_ERESIZED || r->size <= 0 || r->rank < 0 || r->rank >= r->size) return;
    c->w.rank = r->rank;
    c->w.size = r->size;
    c->w.members_epoch = r->members_epoch;
}

/* Reads one RESULT into *r; 0, or the code that failed every request. */
static int read_result(ringd_client *c, msg_result *r, int64_t deadline, const char *what)
{
    int rc = session_recv_result(&c->s, r, deadline, what);
    if (rc < 0)
        requests_fail_all(c, rc);
    else
        note_result(c, r);
    return rc;
}

/* r answers no outstanding request: the daemon and we are out of step. */
static int not_outstanding(ringd_client *c, const msg_result *r, const char *what)
{
    c->s.broken = RINGD_EPROTO;
    int rc = session_fail(&c->s, RINGD_EPROTO,
                          "%s: ringd at %s answered request %llu, which is not outstanding", what,
                          c->s.path, (unsigned long long)r->id);
    requests_fail_all(c, rc);
    return rc;
}

int requests_wait_reply(ringd_client *c, uint64_t id, int64_t deadline, const char *what)
{
    for (;;) {
        msg_result r;
        int rc = read_result(c, &r, deadline, what);
        if (rc < 0) return rc;
        if (r.id == id) {
            if (r.status < 0) session_fail(&c->s, r.status, "%s", r.text[0] ? r.text : what);
            return r.status;
        }
        if (complete(c, &r) < 0) return not_outstanding(c, &r, what);
    }
}

int requests_wait_status(ringd_client *c, uint64_t id, int64_t deadline, const char *what,
                         msg_status *st)
{
    for (;;) {
        msg_header h;
        uint8_t body[MSG_MAX_BODY];
        msg_result r;
        int rc = session_recv(&c->s, &h, body, deadline, what);
        if (rc == 0 && h.type == MSG_RESULT) {
            rc = session_decode_result(&c->s, &h, body, &r, what);
            if (rc == 0) {
                note_result(c, &r);
                if (complete(c, &r) < 0) return not_outstanding(c, &r, what);
                continue;
            }
        } else if (rc == 0 && h.type == MSG_STATUS) {
            if (msg_decode_status(&h, body, st) == MSG_OK && st->id == id) return 0;
            c->s.broken = RINGD_EPROTO;
            rc = session_fail(&c->s, RINGD_EPROTO,
                              "%s: ringd at %s sent a malformed STATUS or one for another request "
                              "(are the daemon and libringd the same version?)",
                              what, c->s.path);
        } else if (rc == 0) {
            c->s.broken = RINGD_EPROTO;
            rc = session_fail(&c->s, RINGD_EPROTO,
                              "%s: ringd at %s sent %s where STATUS was expected", what, c->s.path,
                              msg_type_name(h.type));
        }
        requests_fail_all(c, rc);
        return rc;
    }
}

void requests_unlink(ringd_client *c, struct ringd_request *q)
{
    struct ringd_request *prev = NULL;
    for (struct ringd_request *p = c->requests; p; prev = p, p = p->next) {
        if (p != q) continue;
        if (prev)
            prev->next = q->next;
        else
            c->requests = q->next;
        if (c->last == q) c->last = prev;
        return;
    }
}

void requests_free(ringd_client *c)
{
    while (c->requests) {
        struct ringd_request *q = c->requests;
        c->requests = q->next;
        if (q->staging) region_unmap(q->staging);
        free(q->text);
        free(q);
    }
    c->last = NULL;
}

void requests_push(ringd_client *c, struct ringd_request *q)
{
    if (c->last)
        c->last->next = q;
    else
        c->requests = q;
    c->last = q;
}

/* Reads one RESULT for ringd_wait(); 0, or a code that failed the session. */
int requests_read_one(ringd_client *c, int64_t deadline, const char *what)
{
    msg_result r;
    int rc = read_result(c, &r, deadline, what);
    if (rc < 0) return rc;
    if (complete(c, &r) < 0) rc = not_outstanding(c, &r, what);
    return rc;
}
