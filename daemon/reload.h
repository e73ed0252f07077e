/*
 * reload.h - what a reload (SIGHUP) changes: every key of the new
 * configuration that differs from the running one, and how it applies.
 *
 * No key waits for a restart. A key applies in one of three ways:
 *   RELOAD_AT_ONCE  copied into the running config, which the ring, the
 *                   links and the sessions read each time they need it;
 *   RELOAD_ACCESS   socket_mode, socket_group, allowed_uids, allowed_gids:
 *                   the socket file gets the new owner and mode, the next
 *                   clients are checked against the new lists;
 *   RELOAD_REFORM   the ring is re-formed on the new config: collectives in
 *                   flight fail and clients reconnect.
 * Pure: no I/O, no clock, so a test drives it with two parsed configs.
 */
#ifndef RINGD_RELOAD_H
#define RINGD_RELOAD_H

#include "config/config.h"

#define RELOAD_MAX_CHANGES 48
#define RELOAD_MAX_VALUE 48 /* a value as the log shows it, truncated */

typedef enum { RELOAD_AT_ONCE = 0, RELOAD_ACCESS, RELOAD_REFORM } reload_how;

typedef struct {
    const char *key; /* as in the file: "segment_size", "hosts" */
    reload_how how;
    char from[RELOAD_MAX_VALUE], to[RELOAD_MAX_VALUE]; /* "256KiB" -> "128KiB" */
} reload_change;

typedef struct {
    reload_change changes[RELOAD_MAX_CHANGES];
    int n;
    int reform; /* some change is RELOAD_REFORM */
    int access; /* some change is RELOAD_ACCESS */
} reload_plan;

/* The changes from run (this host is run_me in it) to next (next_me);
 * key_changed: the cluster key read from secret_file differs. */
void reload_diff(const cfg *run, int run_me, const cfg *next, int next_me, int key_changed,
                 reload_plan *out);

/* Applies the RELOAD_AT_ONCE and RELOAD_ACCESS keys of next to run, for a
 * plan without RELOAD_REFORM. Strings are swapped, not copied: run owns
 * next's and next the old ones, which cfg_free(next) frees. */
void reload_apply(cfg *run, int me, cfg *next);

/* One line for the log and ringctl status: "segment_size 256KiB -> 128KiB,
 * fusion_max 32 -> 16" (the changes of class how, all of them if how < 0),
 * or "" if none; truncated to len. */
void reload_describe(const reload_plan *p, int how, char *out, size_t len);

#endif /* RINGD_RELOAD_H */
