/*
 * client.c - libringd: the public API of ringd.h over a session with the
 * local daemon (session.c).
 *
 * Buffers never travel on the socket. ringd_alloc() creates a sealed memfd,
 * maps it, and passes the fd to the daemon with MSG_REGISTER; the daemon maps
 * the same pages and reduces in place. An allreduce names a registered
 * region and an offset in it. A buffer outside every region is copied
 * through one internal staging region, which grows as needed.
 *
 * Every request waits for its reply before the call returns, so at most one
 * request is outstanding and replies arrive in order.
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
#include "session.h"

/* Memory shared with the daemon: one memfd, mapped once on each side. */
struct region {
    struct region *next;
    void *base;
    size_t size; /* the memfd's size: a whole number of pages */
    uint32_t number;
};

struct ringd_client {
    session s; /* its err is the client's last error */
    msg_welcome w;
    uint64_t next_id;       /* request ids, from 1 */
    uint32_t next_region;   /* region numbers, from 1; 0 means "no region" */
    struct region *regions; /* from ringd_alloc() */
    struct region *staging; /* for buffers outside every region; NULL until needed */
};

/* The message of the last failed ringd_connect() of this thread. */
static _Thread_local char connect_err[SESSION_ERR_MAX];

static int broken(ringd_client *c, const char *what)
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

static void unmap(struct region *r)
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
        unmap(r);
    }
    if (c->staging) unmap(c->staging);
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
static int map_region(ringd_client *c, size_t bytes, const char *what, struct region **out)
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
    if (rc == 0) rc = session_result(&c->s, m.id, deadline, what);
    close(fd);
    if (rc < 0) {
        unmap(r);
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
static int unmap_region(ringd_client *c, struct region *r, const char *what)
{
    int rc = 0;
    if (!c->s.broken) {
        msg_unregister m = {.id = c->next_id++, .region = r->number};
        uint8_t buf[SESSION_MSG_MAX];
        int n = msg_encode_unregister(buf, sizeof buf, &m);
        int64_t deadline = session_deadline(SESSION_REQUEST_TIMEOUT_MS);
        rc = n < 0 ? session_fail(&c->s, RINGD_EPROTO, "%s: cannot encode UNREGISTER", what)
                   : session_send(&c->s, buf, (size_t)n, -1, deadline, what);
        if (rc == 0) rc = session_result(&c->s, m.id, deadline, what);
    }
    unmap(r);
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
        broken(c, "ringd_alloc");
        return NULL;
    }
    struct region *r;
    if (map_region(c, bytes, "ringd_alloc", &r) < 0) return NULL;
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
            unmap_region(c, r, "ringd_free");
            return;
        }
    }
}

/* The registered region that holds [p, p + bytes), or NULL. */
static struct region *find_region(ringd_client *c, const void *p, size_t bytes)
{
    uintptr_t a = (uintptr_t)p;
    for (struct region *r = c->regions; r; r = r->next) {
        uintptr_t base = (uintptr_t)r->base;
        if (a >= base && a - base <= r->size && bytes <= r->size - (a - base)) return r;
    }
    return NULL;
}

/* Makes the staging region hold at least bytes. It grows geometrically (up
 * to the daemon's limit) so a training loop settles on one size quickly. */
static int ensure_staging(ringd_client *c, size_t bytes)
{
    if (c->staging && c->staging->size >= bytes) return 0;
    size_t want = bytes;
    if (c->staging) {
        size_t twice = c->staging->size > SIZE_MAX / 2 ? SIZE_MAX : c->staging->size * 2;
        if (twice > c->w.max_bytes) twice = (size_t)c->w.max_bytes;
        if (twice > want) want = twice;
        struct region *old = c->staging;
        c->staging = NULL;
        int rc = unmap_region(c, old, "allreduce");
        if (rc < 0) return rc;
    }
    return map_region(c, want, "allreduce", &c->staging);
}

static int is_float(ringd_dtype dtype)
{
    return dtype == RINGD_FLOAT16 || dtype == RINGD_BFLOAT16 || dtype == RINGD_FLOAT32 ||
           dtype == RINGD_FLOAT64;
}

int ringd_allreduce(ringd_client *c, void *buf, size_t count, ringd_dtype dtype, ringd_op op)
{
    if (!c) return RINGD_EINVAL;
    size_t esize = ringd_dtype_size(dtype);
    if (esize == 0)
        return session_fail(&c->s, RINGD_EINVAL,
                            "allreduce: unknown dtype %d (see ringd_dtype in ringd.h)", (int)dtype);
    if ((unsigned)op >= RINGD_OP_COUNT)
        return session_fail(&c->s, RINGD_EINVAL,
                            "allreduce: unknown op %d (see ringd_op in ringd.h)", (int)op);
    if (op == RINGD_MEAN && !is_float(dtype))
        return session_fail(&c->s, RINGD_EINVAL, "allreduce: op mean needs a float dtype, got %s",
                            ringd_dtype_name(dtype));
    if (count > SIZE_MAX / esize || count * esize > c->w.max_bytes)
        return session_fail(&c->s, RINGD_ETOOBIG,
                            "allreduce: %zu x %s is more than the daemon's limit of %llu bytes "
                            "(max_buffer in its configuration); split the buffer",
                            count, ringd_dtype_name(dtype), (unsigned long long)c->w.max_bytes);
    size_t bytes = count * esize;
    if (count > 0 && !buf)
        return session_fail(&c->s, RINGD_EINVAL, "allreduce: buf is NULL with count %zu", count);
    if (c->s.broken) return broken(c, "allreduce");

    /* count 0 names no region: the daemon still runs it as a collective. */
    msg_collective m = {
        .kind = MSG_COLL_ALLREDUCE, .dtype = (uint8_t)dtype, .op = (uint8_t)op, .count = count};
    struct region *r = count ? find_region(c, buf, bytes) : NULL;
    /* The daemon wants elements aligned in the region; copy the odd case. */
    if (r && ((uintptr_t)buf - (uintptr_t)r->base) % esize != 0) r = NULL;
    int staged = count > 0 && !r;
    if (staged) {
        int rc = ensure_staging(c, bytes);
        if (rc < 0) return rc;
        r = c->staging;
        memcpy(r->base, buf, bytes);
    }
    if (r) {
        m.region = r->number;
        m.offset = staged ? 0 : (uint64_t)((char *)buf - (char *)r->base);
    }
    m.id = c->next_id++;

    uint8_t msg[SESSION_MSG_MAX];
    int n = msg_encode_collective(msg, sizeof msg, &m);
    if (n < 0) return session_fail(&c->s, RINGD_EPROTO, "allreduce: cannot encode COLLECTIVE");
    int rc = session_send(&c->s, msg, (size_t)n, -1, session_deadline(SESSION_REQUEST_TIMEOUT_MS),
                          "allreduce");
    /* The daemon answers within its own collective timeout, so the wait for
     * the result has no deadline of ours: only a closed socket ends it early. */
    if (rc == 0) rc = session_result(&c->s, m.id, -1, "allreduce");
    if (rc == 0 && staged) memcpy(buf, r->base, bytes);
    return rc;
}
