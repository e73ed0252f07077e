/*
 * client-internal.h - the types libringd's modules share: a client, its
 * regions and its requests. Not installed. Each module's functions are in
 * its own internal header (region.h, requests.h, shm.h).
 */
#ifndef RINGD_CLIENT_INTERNAL_H
#define RINGD_CLIENT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "ringd.h"
#include "session.h"

#define CLIENT_MAX_SPARE 4 /* idle staging regions kept for reuse */

/* Memory shared with the daemon: one memfd, mapped once on each side. */
struct region {
    struct region *next;
    void *base;
    size_t size; /* the memfd's size: a whole number of pages */
    uint32_t number;
};

/* A submitted collective, from ringd_submit() until ringd_wait() or
 * ringd_test() hands back its outcome. */
struct ringd_request {
    ringd_client *c;
    struct ringd_request *next; /* in c->requests, in submission order */
    uint64_t id;
    int done; /* its RESULT arrived */
    int status;
    char *text; /* the daemon's message when status < 0 */
    ringd_coll kind;
    uint8_t *work;          /* the buffer the daemon works on */
    struct region *staging; /* holds work when the user's buffer is not shared */
    void *user;             /* where the result goes when staged or moved */
    size_t result_off;      /* offset of the result in work */
    size_t result_bytes;    /* bytes of result to deliver to user */
};

struct ringd_client {
    session s; /* its err is the client's last error */
    msg_welcome w;
    uint64_t next_id;       /* request ids, from 1 */
    uint32_t next_region;   /* region numbers, from 1; 0 means "no region" */
    struct region *regions; /* from ringd_alloc() */
    struct region *spare;   /* idle staging regions */
    int n_spare;
    struct ringd_request *requests, *last; /* not yet handed back */
};

#endif /* RINGD_CLIENT_INTERNAL_H */
