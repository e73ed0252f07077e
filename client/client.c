/*
 * client.c - libringd's connection: ringd_connect(), ringd_close() and what
 * the daemon said of this rank.
 *
 * libringd is a one-way chain of modules, each using only those before it:
 * session.c (messages on the socket), region.c (shared memory on this side),
 * requests.c (outstanding requests and replies), shm.c (regions registered
 * with the daemon, staging), collective.c (the collectives), client.c.
 * ringd_membership() is here too: it asks the daemon's STATUS over the
 * client's own session; and ringd_report_split(), which tells the daemon a
 * balanced job's split.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "region.h"
#include "report.h"
#include "requests.h"
#include "ringd.h"

/* The message of the last failed ringd_connect() of this thread. */
static _Thread_local char connect_err[SESSION_ERR_MAX];

/* Reads the requested local rank from $RINGD_LOCAL_RANK, else $LOCAL_RANK,
 * into *out (-1 if neither is set; an empty value counts as unset). */
static int env_local_rank(int32_t *out, char *err, size_t errlen)
{
    static const char *const vars[] = {"RINGD_LOCAL_RANK", "LOCAL_RANK"};
    *out = -1;
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (!v || !*v) continue;
        char *end;
        errno = 0;
        long n = strtol(v, &end, 10);
        if (errno || *end || end == v || n < 0 || n > INT32_MAX) {
            snprintf(err, errlen,
                     "cannot connect to ringd: %s=\"%s\" is not a local rank "
                     "(expected an integer >= 0, or unset it to let the daemon choose)",
                     vars[i], v);
            return RINGD_EINVAL;
        }
        *out = (int32_t)n;
        return 0;
    }
    return 0;
}

/* Checks that the WELCOME describes a rank the daemon could have given us. */
static int check_welcome(session *s, const msg_welcome *w, int32_t asked)
{
    if (w->size < 1 || w->rank < 0 || w->rank >= w->size || w->local_size < 1 ||
        w->local_rank < 0 || w->local_rank >= w->local_size || w->local_size > w->size ||
        (asked >= 0 && w->local_rank != asked))
        return session_fail(s, RINGD_EPROTO,
                            "handshake: ringd at %s sent an impossible WELCOME: rank %d of %d, "
                            "local rank %d of %d (asked for %d)",
                            s->path, (int)w->rank, (int)w->size, (int)w->local_rank,
                            (int)w->local_size, (int)asked);
    return 0;
}

int ringd_connect(const char *socket_path, ringd_client **out)
{
    if (!out) {
        snprintf(connect_err, sizeof connect_err, "ringd_connect: out is NULL");
        return RINGD_EINVAL;
    }
    *out = NULL;
    if (!socket_path) {
        socket_path = getenv("RINGD_SOCKET");
        if (!socket_path || !*socket_path) socket_path = SESSION_DEFAULT_SOCKET;
    }
    int32_t local_rank;
    int rc = env_local_rank(&local_rank, connect_err, sizeof connect_err);
    if (rc < 0) return rc;

    ringd_client *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(connect_err, sizeof connect_err, "cannot connect to ringd: out of memory");
        return RINGD_ENOMEM;
    }
    rc = session_connect(&c->s, socket_path, SESSION_CONNECT_TIMEOUT_MS);
    if (rc == 0) rc = session_hello(&c->s, 0, local_rank, &c->w);
    if (rc == 0) rc = check_welcome(&c->s, &c->w, local_rank);
    if (rc < 0) {
        snprintf(connect_err, sizeof connect_err, "%s", c->s.err);
        session_close(&c->s);
        free(c);
        return rc;
    }
    c->next_id = 1;
    c->next_region = 1;
    *out = c;
    return 0;
}

void ringd_close(ringd_client *c)
{
    if (!c) return;
    /* Closing the socket tells the daemon to drop our regions: no UNREGISTER. */
    session_close(&c->s);
    region_unmap_all(&c->regions);
    requests_free(c);
    region_unmap_all(&c->spare);
    free(c);
}

int ringd_rank(const ringd_client *c)
{
    return c ? c->w.rank : RINGD_EINVAL;
}
int ringd_size(const ringd_client *c)
{
    return c ? c->w.size : RINGD_EINVAL;
}
int ringd_local_rank(const ringd_client *c)
{
    return c ? c->w.local_rank : RINGD_EINVAL;
}
int ringd_local_size(const ringd_client *c)
{
    return c ? c->w.local_size : RINGD_EINVAL;
}

const char *ringd_last_error(const ringd_client *c)
{
    return c ? c->s.err : connect_err;
}

int ringd_report_json(const char *socket_path, char **json)
{
    if (!json) {
        snprintf(connect_err, sizeof connect_err, "ringd_report_json: json is NULL");
        return RINGD_EINVAL;
    }
    *json = NULL;
    if (!socket_path) {
        socket_path = getenv("RINGD_SOCKET");
        if (!socket_path || !*socket_path) socket_path = SESSION_DEFAULT_SOCKET;
    }
    report_view v;
    int rc = report_fetch(socket_path, &v, connect_err, sizeof connect_err);
    if (rc < 0) return rc;
    *json = report_json(&v);
    report_free(&v);
    if (!*json) {
        snprintf(connect_err, sizeof connect_err, "report: out of memory");
        return RINGD_ENOMEM;
    }
    return 0;
}

void ringd_report_free(char *json)
{
    free(json);
}

int ringd_membership(ringd_client *c, ringd_membership_info *out)
{
    const char *what = "membership";
    if (!c || !out) return RINGD_EINVAL;
    memset(out, 0, sizeof *out);
    if (c->s.broken) return requests_broken(c, what);

    /* A STATUS is answered at once, ahead of collectives still in flight,
     * whose results may come before or after it. */
    msg_status_req m = {.id = c->next_id++};
    uint8_t buf[SESSION_MSG_MAX];
    int64_t deadline = session_deadline(SESSION_REQUEST_TIMEOUT_MS);
    int n = msg_encode_status_req(buf, sizeof buf, &m);
    int rc = n < 0 ? session_fail(&c->s, RINGD_EPROTO, "%s: cannot encode STATUS_REQ", what)
                   : session_send(&c->s, buf, (size_t)n, -1, deadline, what);
    if (rc < 0) return rc;
    msg_status *st = malloc(sizeof *st);
    if (!st) return session_fail(&c->s, RINGD_ENOMEM, "%s: out of memory", what);
    rc = requests_wait_status(c, m.id, deadline, what, st);
    if (rc == 0) {
        out->epoch = st->members_epoch;
        out->rank = c->w.rank;
        out->size = c->w.size;
        out->n_configured = (int)st->n_hosts;
        /* A daemon that does not report membership runs every host. */
        out->n_live = st->n_live ? (int)st->n_live : (int)st->n_hosts;
        if (st->n_live)
            out->live = st->live;
        else
            out->live = st->n_hosts >= 64 ? UINT64_MAX : (UINT64_C(1) << st->n_hosts) - 1;
        out->ready = !st->waiting[0] && !st->left_ring;
        snprintf(out->hosts, sizeof out->hosts, "%s", st->hosts);
    }
    free(st);
    return rc;
}

int ringd_report_split(ringd_client *c, const ringd_split *split)
{
    const char *what = "report_split";
    if (!c) return RINGD_EINVAL;
    if (!split || split->n_ranks < 1 || !split->rows || !split->rate)
        return session_fail(&c->s, RINGD_EINVAL,
                            "%s: needs a split of at least one rank, with rows and rates", what);
    if (c->s.broken) return requests_broken(c, what);
    msg_balance *m = calloc(1, sizeof *m);
    if (!m) return session_fail(&c->s, RINGD_ENOMEM, "%s: out of memory", what);
    uint64_t rows = 0;
    int rc = 0;
    for (int i = 0; i < split->n_ranks && rc == 0; i++) {
        rows += split->rows[i];
        if (!(split->rate[i] >= 0 && isfinite(split->rate[i])))
            rc = session_fail(&c->s, RINGD_EINVAL, "%s: rank %d's rate is %g rows/s", what, i,
                              split->rate[i]);
        if (i < MSG_MAX_SHARES)
            m->split.shares[i] = (msg_share){.rows = split->rows[i], .rate = split->rate[i]};
    }
    if (rc == 0 && rows != split->global_batch)
        rc = session_fail(&c->s, RINGD_EINVAL,
                          "%s: the ranks' rows sum to %llu, not the global batch of %llu", what,
                          (unsigned long long)rows, (unsigned long long)split->global_batch);
    if (rc < 0) {
        free(m);
        return rc;
    }
    m->id = c->next_id++;
    m->split.step = split->step;
    m->split.global_batch = split->global_batch;
    m->split.resplits = split->resplits;
    m->split.every = split->every;
    m->split.n_ranks = (uint32_t)split->n_ranks;
    uint8_t buf[SESSION_MSG_MAX];
    int64_t deadline = session_deadline(SESSION_REQUEST_TIMEOUT_MS);
    int n = msg_encode_balance(buf, sizeof buf, m);
    uint64_t id = m->id;
    free(m);
    rc = n < 0 ? session_fail(&c->s, RINGD_EPROTO, "%s: cannot encode BALANCE", what)
               : session_send(&c->s, buf, (size_t)n, -1, deadline, what);
    if (rc < 0) return rc;
    /* Answered at once, like a REGISTER: results of collectives still in
     * flight may come first, and complete their requests on the way. */
    return requests_wait_reply(c, id, deadline, what);
}
