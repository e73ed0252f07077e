/*
 * regions.h - the shared memory regions of a local session.
 *
 * A client creates a memfd, seals it against shrinking and growing, and
 * passes its descriptor with MSG_REGISTER; the daemon maps it and works on
 * the buffers in it in place (PROTOCOL.md, "Session"). A region lives while
 * its session has it registered or a collective still uses it: each holds a
 * reference, and the last one unmaps it.
 */
#ifndef RINGD_REGIONS_H
#define RINGD_REGIONS_H

#include <stddef.h>
#include <stdint.h>

#define REGIONS_MAX 4096 /* per session */

typedef struct region {
    uint32_t id;
    uint8_t *base;
    uint64_t size;
    int refs; /* the session's set, plus each submission using it */
    struct region *next;
} region;

/* A session's registered regions. */
typedef struct {
    region *head;
    int n;
} region_set;

/* Maps the memfd fd (always closed) as region id of size bytes into set.
 * Returns 0, or RINGD_ESHM with what was wrong in why (no descriptor,
 * number in use, missing seals, wrong size, mmap failed). */
int regions_add(region_set *set, uint32_t id, uint64_t size, int fd, char *why, size_t whylen);

region *regions_find(const region_set *set, uint32_t id);

/* Drops region id from set. Returns 0 or RINGD_EINVAL (no such region). */
int regions_remove(region_set *set, uint32_t id);

/* Drops every region of set (the session is closing). */
void regions_clear(region_set *set);

void region_ref(region *r);
/* Drops one reference; the last unmaps r. */
void region_unref(region *r);

#endif /* RINGD_REGIONS_H */
