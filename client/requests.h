/*
 * requests.h - libringd's outstanding requests and the daemon's replies
 * (requests.c). Internal.
 */
#ifndef RINGD_CLIENT_REQUESTS_H
#define RINGD_CLIENT_REQUESTS_H

#include <stdint.h>

#include "client-internal.h"

/* The session broke earlier: fails `what` saying so. Returns the code. */
int requests_broken(ringd_client *c, const char *what);

/* Appends q, just submitted, to the outstanding requests. */
void requests_push(ringd_client *c, struct ringd_request *q);

/* Takes q, completed, off the list (the caller frees it). */
void requests_unlink(ringd_client *c, struct ringd_request *q);

/* Waits for the RESULT of request id, completing the collectives whose
 * results come first. Returns its status (message in c->s.err). */
int requests_wait_reply(ringd_client *c, uint64_t id, int64_t deadline, const char *what);

/* Waits for the STATUS answering STATUS_REQ id, into *st, completing the
 * collectives whose results come first. Returns 0 or the code of a failure
 * that failed every outstanding request. */
int requests_wait_status(ringd_client *c, uint64_t id, int64_t deadline, const char *what,
                         msg_status *st);

/* Reads one RESULT and completes the request it answers. Returns 0, or the
 * code of a failure that failed every outstanding request. */
int requests_read_one(ringd_client *c, int64_t deadline, const char *what);

/* The session broke: every outstanding request fails with code. */
void requests_fail_all(ringd_client *c, int code);

/* Frees every request and its staging (ringd_close()). */
void requests_free(ringd_client *c);

#endif /* RINGD_CLIENT_REQUESTS_H */
