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

/* Reads one RESULT and completes the request it answers; fills *r. */
static int read_result(ringd_client *c, msg_result *r, int64_t deadline, const char *what)
{
    int rc = session_recv_result(&c->s, r, deadline, what);
    if (rc < 0) requests_fail_all(c, rc);
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
        if (complete(c, &r) < 0) {
            c->s.broken = RINGD_EPROTO;
            rc = session_fail(&c->s, RINGD_EPROTO,
                              "%s: ringd at %s answered request %llu, which is not outstanding",
                              what, c->s.path, (unsigned long long)r.id);
            requests_fail_all(c, rc);
            return rc;
        }
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
    if (complete(c, &r) < 0) {
        c->s.broken = RINGD_EPROTO;
        rc = session_fail(&c->s, RINGD_EPROTO,
                          "%s: ringd at %s answered request %llu, which is not outstanding", what,
                          c->s.path, (unsigned long long)r.id);
        requests_fail_all(c, rc);
    }
    return rc;
}
