/*
 * region.h - libringd's shared memory on this side (region.c). Internal.
 */
#ifndef RINGD_CLIENT_REGION_H
#define RINGD_CLIENT_REGION_H

#include <stddef.h>

#include "client-internal.h"

/* Unmaps r and frees it (the daemon forgets it on UNREGISTER or when the
 * session closes). */
void region_unmap(struct region *r);

/* The region from ringd_alloc() that holds [p, p + bytes), or NULL. */
struct region *region_find(ringd_client *c, const void *p, size_t bytes);

/* The smallest idle staging region of at least bytes, taken, or NULL. */
struct region *region_take_spare(ringd_client *c, size_t bytes);

/* Keeps r, registered, for reuse as staging. */
void region_give_spare(ringd_client *c, struct region *r);

/* The smallest idle region while more than CLIENT_MAX_SPARE are kept,
 * taken; NULL when within the limit. */
struct region *region_take_surplus(ringd_client *c);

/* Unmaps every region of the list. */
void region_unmap_all(struct region **list);

#endif /* RINGD_CLIENT_REGION_H */
