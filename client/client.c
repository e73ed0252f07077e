/*
 * client.c - libringd: the public API of ringd.h over a session with the
 * local daemon (session.c).
 *
 * Buffers never travel on the socket. ringd_alloc() creates a sealed memfd,
 * maps it, and passes the fd to the daemon with MSG_REGISTER; the daemon maps
 * the same pages and reduces in place. An allreduce names a registered
 * region and an offset in it; buffers outside every region are copied
 * through staging regions (collective.c).
 *
 * The daemon answers requests in order. Collectives may be outstanding
 * (collective.c); a call that needs its own reply (REGISTER, UNREGISTER)
 * completes the collectives whose replies come before it on the way.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ringd.h"
#include "client-internal.h"

/* The message of the last failed ringd_connect() of this thread. */
static _Thread_local char connect_err[SESSION_ERR_MAX];

int client_broken(ringd_client *c, const char *what)
{
    return session_fail(&c->s, c->s.broken < 0 ? c->s.broken : RINGD_ECLOSED,
                        "%s: the session with ringd at %s failed earlier and cannot be used; "
                        "call ringd_close() and ringd_connect() again",
                        what, c->s.path);
}

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

void client_unmap(struct region *r)
{
    munmap(r->base, r->size);
    free(r);
}

void ringd_close(ringd_client *c)
{
    if (!c) return;
    /* Closing the socket tells the daemon to drop our regions: no UNREGISTER. */
    session_close(&c->s);
    while (c->regions) {
        struct region *r = c->regions;
        c->regions = r->next;
        client_unmap(r);
    }
    client_free_requests(c);
    while (c->spare) {
        struct region *r = c->spare;
        c->spare = r->next;
        client_unmap(r);
    }
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

/* Creates a sealed memfd of at least bytes, maps it, and registers it with
 * the daemon into *out. The fd is closed once the daemon has answered: both
 * sides keep their mapping. Returns 0 or a code with the message set. */
int client_map_region(ringd_client *c, size_t bytes, const char *what, struct region **out)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (bytes > SIZE_MAX - (page - 1))
        return session_fail(&c->s, RINGD_ENOMEM, "%s: %zu bytes is more than memory can hold", what,
                            bytes);
    size_t size = (bytes + page - 1) / page * page;
    int rc;
    struct region *r = calloc(1, sizeof *r);
    int fd = memfd_create("ringd", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (!r || fd < 0) {
        rc = session_fail(&c->s, r ? RINGD_ESHM : RINGD_ENOMEM,
                          "%s: cannot create shared memory: %s", what,
                          r ? strerror(errno) : "out of memory");
        goto fail;
    }
    if (ftruncate(fd, (off_t)size) < 0) {
        rc = session_fail(&c->s, RINGD_ESHM, "%s: cannot size shared memory to %zu bytes: %s", what,
                          size, strerror(errno));
        goto fail;
    }
    /* The daemon refuses a region that could shrink under its mapping. */
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
        rc = session_fail(&c->s, RINGD_ESHM, "%s: cannot seal shared memory: %s", what,
                          strerror(errno));
        goto fail;
    }
    r->base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (r->base == MAP_FAILED) {
        rc = session_fail(&c->s, RINGD_ENOMEM, "%s: cannot map %zu bytes of shared memory: %s",
                          what, size, strerror(errno));
        goto fail;
    }
    r->size = size;
    r->number = c->next_region++;
    if (c->next_region == 0) c->next_region = 1;

    msg_register m = {.id = c->next_id++, .region = r->number, .size = size};
    uint8_t buf[SESSION_MSG_MAX];
    int n = msg_encode_register(buf, sizeof buf, &m);
    int64_t deadline = session_deadline(SESSION_REQUEST_TIMEOUT_MS);
    rc = n < 0 ? session_fail(&c->s, RINGD_EPROTO, "%s: cannot encode REGISTER", what)
               : session_send(&c->s, buf, (size_t)n, fd, deadline, what);
    if (rc == 0) rc = client_wait_reply(c, m.id, deadline, what);
    close(fd);
    if (rc < 0) {
        client_unmap(r);
        return rc;
    }
    *out = r;
    return 0;

fail:
    if (fd >= 0) close(fd);
    free(r);
    return rc;
}

/* Unregisters r (while the session works) and unmaps it. */
int client_unmap_region(ringd_client *c, struct region *r, const char *what)
{
    int rc = 0;
    if (!c->s.broken) {
        msg_unregister m = {.id = c->next_id++, .region = r->number};
        uint8_t buf[SESSION_MSG_MAX];
        int n = msg_encode_unregister(buf, sizeof buf, &m);
        int64_t deadline = session_deadline(SESSION_REQUEST_TIMEOUT_MS);
        rc = n < 0 ? session_fail(&c->s, RINGD_EPROTO, "%s: cannot encode UNREGISTER", what)
                   : session_send(&c->s, buf, (size_t)n, -1, deadline, what);
        if (rc == 0) rc = client_wait_reply(c, m.id, deadline, what);
    }
    client_unmap(r);
    return rc;
}

void *ringd_alloc(ringd_client *c, size_t bytes)
{
    if (!c) return NULL;
    if (bytes == 0) {
        session_fail(&c->s, RINGD_EINVAL, "ringd_alloc: 0 bytes requested");
        return NULL;
    }
    if (c->s.broken) {
        client_broken(c, "ringd_alloc");
        return NULL;
    }
    struct region *r;
    if (client_map_region(c, bytes, "ringd_alloc", &r) < 0) return NULL;
    r->next = c->regions;
    c->regions = r;
    return r->base;
}

void ringd_free(ringd_client *c, void *p)
{
    if (!c || !p) return;
    for (struct region **link = &c->regions; *link; link = &(*link)->next) {
        if ((*link)->base == p) {
            struct region *r = *link;
            *link = r->next;
            client_unmap_region(c, r, "ringd_free");
            return;
        }
    }
}
