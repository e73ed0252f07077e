/*
 * shm.h - regions of shared memory registered with the daemon (shm.c).
 * Internal.
 */
#ifndef RINGD_CLIENT_SHM_H
#define RINGD_CLIENT_SHM_H

#include <stddef.h>

#include "client-internal.h"

/* Creates a sealed memfd of at least bytes, maps it and registers it with
 * the daemon into *out. Returns 0 or a code with the message set. */
int shm_map(ringd_client *c, size_t bytes, const char *what, struct region **out);

/* Unregisters r (while the session works) and unmaps it. */
int shm_unmap(ringd_client *c, struct region *r, const char *what);

/* A staging region of at least bytes: an idle one if one fits, else new. */
int shm_staging(ringd_client *c, size_t bytes, const char *what, struct region **out);

/* Unregisters idle staging regions beyond CLIENT_MAX_SPARE. It talks to
 * the daemon, so it runs before a submission, never while a result is read. */
void shm_trim(ringd_client *c);

#endif /* RINGD_CLIENT_SHM_H */
