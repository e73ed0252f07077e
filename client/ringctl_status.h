/*
 * ringctl_status.h - `ringctl status` (ringctl_status.c): the state of the
 * ring as this host's daemon sees it, as text or JSON.
 */
#ifndef RINGD_CLIENT_RINGCTL_STATUS_H
#define RINGD_CLIENT_RINGCTL_STATUS_H

#include "session.h" /* and proto/msg.h */

/* Runs `ringctl status` against the daemon at path (a --socket after the
 * command overrides it), with argv[0] "status" and its options after it;
 * returns an exit status. */
int status_command(const char *path, int argc, char **argv);

/* Fetches the daemon's status over an observer session of its own, closed
 * again; 0, or a negative code with s->err saying why. */
int status_fetch(session *s, const char *path, msg_status *st);

/* A balanced job's split (ringd.balance), as the daemon last heard of it:
 * a table, or `,"balance":` and its JSON (null if none) to end an object.
 * The table prints nothing if there is none. */
void status_print_balance(const msg_status *st);
void status_print_balance_json(const msg_status *st);

#endif /* RINGD_CLIENT_RINGCTL_STATUS_H */
