/*
 * shm.c - libringd's shared memory with the daemon: regions registered
 * with it, ringd_alloc() and ringd_free(), and staging.
 *
 * Buffers never travel on the socket. A region is a sealed memfd, mapped
 * here and passed to the daemon with MSG_REGISTER; the daemon maps the same
 * pages and works in place. A buffer outside every region is staged: copied
 * into a staging region before the submission and back after the result.
 * Staging regions are kept for reuse, so a training loop stops mapping new
 * ones after its first step.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "region.h"
#include "requests.h"
#include "shm.h"

/* Creates a sealed memfd of at least bytes, maps it, and registers it with
 * the daemon into *out. The fd is closed once the daemon has answered: both
 * sides keep their mapping. Returns 0 or a code with the message set. */
int shm_map(ringd_client *c, size_t bytes, const char *what, struct region **out)
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
    if (rc == 0) rc = requests_wait_reply(c, m.id, deadline, what);
    close(fd);
    if (rc < 0) {
        region_unmap(r);
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
int shm_unmap(ringd_client *c, struct region *r, const char *what)
{
    int rc = 0;
    if (!c->s.broken) {
        msg_unregister m = {.id = c->next_id++, .region = r->number};
        uint8_t buf[SESSION_MSG_MAX];
        int n = msg_encode_unregister(buf, sizeof buf, &m);
        int64_t deadline = session_deadline(SESSION_REQUEST_TIMEOUT_MS);
        rc = n < 0 ? session_fail(&c->s, RINGD_EPROTO, "%s: cannot encode UNREGISTER", what)
                   : session_send(&c->s, buf, (size_t)n, -1, deadline, what);
        if (rc == 0) rc = requests_wait_reply(c, m.id, deadline, what);
    }
    region_unmap(r);
    return rc;
}

int shm_staging(ringd_client *c, size_t bytes, const char *what, struct region **out)
{
    *out = region_take_spare(c, bytes);
    return *out ? 0 : shm_map(c, bytes, what, out);
}

void shm_trim(ringd_client *c)
{
    struct region *r;
    while ((r = region_take_surplus(c)))
        shm_unmap(c, r, "staging");
}

void *ringd_alloc(ringd_client *c, size_t bytes)
{
    if (!c) return NULL;
    if (bytes == 0) {
        session_fail(&c->s, RINGD_EINVAL, "ringd_alloc: 0 bytes requested");
        return NULL;
    }
    if (c->s.broken) {
        requests_broken(c, "ringd_alloc");
        return NULL;
    }
    struct region *r;
    if (shm_map(c, bytes, "ringd_alloc", &r) < 0) return NULL;
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
            shm_unmap(c, r, "ringd_free");
            return;
        }
    }
}
