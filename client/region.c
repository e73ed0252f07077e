/*
 * region.c - libringd's shared memory, on this side only: unmapping, the
 * idle staging regions kept for reuse, and which region holds a buffer.
 * Nothing here talks to the daemon (shm.c registers regions with it).
 */
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "region.h"

void region_unmap(struct region *r)
{
    munmap(r->base, r->size);
    free(r);
}

struct region *region_find(ringd_client *c, const void *p, size_t bytes)
{
    uintptr_t a = (uintptr_t)p;
    for (struct region *r = c->regions; r; r = r->next) {
        uintptr_t base = (uintptr_t)r->base;
        if (a >= base && a - base <= r->size && bytes <= r->size - (a - base)) return r;
    }
    return NULL;
}

struct region *region_take_spare(ringd_client *c, size_t bytes)
{
    struct region **best = NULL;
    for (struct region **p = &c->spare; *p; p = &(*p)->next)
        if ((*p)->size >= bytes && (!best || (*p)->size < (*best)->size)) best = p;
    if (!best) return NULL;
    struct region *r = *best;
    *best = r->next;
    c->n_spare--;
    return r;
}

void region_give_spare(ringd_client *c, struct region *r)
{
    r->next = c->spare;
    c->spare = r;
    c->n_spare++;
}

struct region *region_take_surplus(ringd_client *c)
{
    if (c->n_spare <= CLIENT_MAX_SPARE) return NULL;
    struct region **small = &c->spare;
    for (struct region **p = &c->spare; *p; p = &(*p)->next)
        if ((*p)->size < (*small)->size) small = p;
    struct region *r = *small;
    *small = r->next;
    c->n_spare--;
    return r;
}

void region_unmap_all(struct region **list)
{
    while (*list) {
        struct region *r = *list;
        *list = r->next;
        region_unmap(r);
    }
}
