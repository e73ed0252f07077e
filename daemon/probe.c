/*
 * probe.c - a TCP reachability check of one host at a time; see probe.h.
 *
 * One attempt is a resolution, a connect bounded by connect_timeout, and a
 * close. Its handles live in one struct that holds the owner's lifetime
 * until they are closed, so that closing the owner mid-attempt is safe.
 */
#include "probe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringd.h"

typedef struct attempt attempt;

struct probe {
    uv_loop_t *loop;
    const cfg *cfg;
    lifetime *lt;
    probe_cb cb;
    void *data;
    attempt *now; /* the attempt under way, or NULL */
};

struct attempt {
    probe *p;     /* NULL once the probe has closed: no callback */
    lifetime *lt; /* the owner's, held until the handles are closed */
    int host, open_handles; /* handles and the resolution, while pending */
    uv_getaddrinfo_t gai;
    uv_tcp_t tcp;
    uv_connect_t req;
    uv_timer_t timer;
    int has_tcp, reported;
};

int probe_new(probe **out, uv_loop_t *loop, const cfg *c, lifetime *lt, probe_cb cb, void *data)
{
    probe *p = calloc(1, sizeof *p);
    if (!p) return RINGD_ENOMEM;
    *p = (probe){.loop = loop, .cfg = c, .lt = lt, .cb = cb, .data = data};
    *out = p;
    return 0;
}

int probe_busy(const probe *p)
{
    return p->now != NULL;
}

static void drop(attempt *a)
{
    if (--a->open_handles > 0) return;
    lifetime *lt = a->lt;
    free(a);
    lifetime_release(lt);
}

static void on_handle_closed(uv_handle_t *h)
{
    drop(h->data);
}

/* The attempt ends with status: reported once, then its handles close. */
static void finish(attempt *a, int status)
{
    if (a->reported) return;
    a->reported = 1;
    uv_timer_stop(&a->timer);
    probe *p = a->p;
    if (p) {
        p->now = NULL;
        p->cb(p->data, a->host, status);
    }
    uv_close((uv_handle_t *)&a->timer, on_handle_closed);
    if (a->has_tcp) uv_close((uv_handle_t *)&a->tcp, on_handle_closed);
}

static void on_connect(uv_connect_t *req, int status)
{
    finish(req->data, status);
}

static void on_timeout(uv_timer_t *t)
{
    finish(t->data, UV_ETIMEDOUT);
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    attempt *a = req->data;
    if (!a->reported && (status < 0 || !res)) finish(a, status < 0 ? status : UV_EAI_NONAME);
    if (!a->reported) {
        int rc = uv_tcp_init(a->p->loop, &a->tcp);
        if (rc == 0) {
            a->has_tcp = 1;
            a->open_handles++;
            a->tcp.data = a;
            a->req.data = a;
            rc = uv_tcp_connect(&a->req, &a->tcp, res->ai_addr, on_connect);
        }
        if (rc < 0) finish(a, rc);
    }
    uv_freeaddrinfo(res);
    drop(a); /* the resolution is over */
}

int probe_start(probe *p, int host)
{
    if (p->now) return 0;
    attempt *a = calloc(1, sizeof *a);
    if (!a) return RINGD_ENOMEM;
    a->p = p;
    a->lt = p->lt;
    a->host = host;
    uv_timer_init(p->loop, &a->timer);
    a->timer.data = a;
    a->open_handles = 2; /* the timer, the resolution */
    lifetime_hold(p->lt);
    p->now = a;
    const cfg_host *h = &p->cfg->hosts[host];
    char port[8];
    snprintf(port, sizeof port, "%u", (unsigned)h->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    a->gai.data = a;
    uv_timer_start(&a->timer, on_timeout, p->cfg->connect_timeout_ms, 0);
    int rc = uv_getaddrinfo(p->loop, &a->gai, on_resolved, h->node, port, &hints);
    if (rc < 0) {
        a->open_handles--; /* no resolution */
        a->p = NULL;       /* the caller hears it from the return value */
        p->now = NULL;
        finish(a, rc);
        return rc;
    }
    return 0;
}

void probe_close(probe *p)
{
    attempt *a = p->now;
    if (a) {
        a->p = NULL; /* no callback; its handles close by themselves */
        p->now = NULL;
        finish(a, UV_ECANCELED);
        uv_cancel((uv_req_t *)&a->gai);
    }
    free(p);
}
