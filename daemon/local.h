/*
 * local.h - the daemon's Unix socket: sessions of the local training
 * processes. Their regions are regions.h's, their collectives go through
 * gather.h to the engine, their status comes from status.h.
 */
#ifndef RINGD_LOCAL_H
#define RINGD_LOCAL_H

#include <stddef.h>
#include <uv.h>

#include "config/config.h"
#include "rates.h"
#include "engine.h"
#include "perm.h"
#include "report.h"
#include "status.h"

typedef struct local local;

/* Creates the local side of host `me`; e runs its collectives. c and e must
 * outlive it. */
int local_new(local **out, uv_loop_t *loop, const cfg *c, int me, engine *e);

/* Creates the socket (replacing a stale one) and accepts clients. Returns 0
 * or a negative code with a message in err. */
int local_start(local *l, char *err, size_t errlen);

/* Stops accepting, fails pending submissions with (status, message), closes
 * every session and removes the socket; done(data) runs when l is freed. */
void local_close(local *l, int status, const char *message, void (*done)(void *), void *data);

/* The payload rates that STATUS reports; rt (may be NULL) must outlive l. */
void local_set_rates(local *l, const rates *rt);

/* The last reload that STATUS reports; rl (may be NULL) must outlive l. */
void local_set_reload(local *l, const status_reload *rl);

/* Where BALANCE messages leave the split that STATUS reports; bl (may be
 * NULL: they are refused) must outlive l. */
void local_set_balance(local *l, status_balance *bl);
/* Where the ranks' accounting goes and REPORT_REQ is answered from; rep
 * (may be NULL) must outlive l. */
void local_set_report(local *l, report *rep);

/* A reload's socket_mode, socket_group, allowed_uids and allowed_gids: the
 * socket file gets p's group and mode, and the next clients are checked
 * against p. Those connected stay. On success l owns p's lists (*p is
 * emptied); on failure (RINGD_EIO, a message in err) *p is still the
 * caller's, and l keeps its policy. */
int local_set_access(local *l, perm_policy *p, char *err, size_t errlen);

/* Local ranks connected now. */
int local_clients(const local *l);

#endif /* RINGD_LOCAL_H */
