/*
 * perm.h - who may use the daemon's Unix socket.
 *
 * Two layers. The file system: the socket is created with socket_mode
 * (default 0660) and owned by socket_group, so only those users can connect
 * at all. The daemon: if allowed_uids or allowed_gids is set, each accepted
 * peer's credentials (SO_PEERCRED, and SO_PEERGROUPS for its supplementary
 * groups) must match one of them. Root and the daemon's own user always pass:
 * they could get past any check of ours anyway, and `sudo ringctl status`
 * should keep working.
 */
#ifndef RINGD_PERM_H
#define RINGD_PERM_H

#include <stddef.h>
#include <sys/types.h>

#include "config/config.h"

typedef struct {
    mode_t mode;
    gid_t group; /* (gid_t)-1: leave the daemon's group */
    uid_t *uids; /* allowed_uids, resolved; NULL with n_uids 0 if absent */
    size_t n_uids;
    gid_t *gids;
    size_t n_gids;
} perm_policy;

/* Resolves the names of c's socket_group, allowed_uids and allowed_gids on
 * this host into *p. Returns 0, or RINGD_EINVAL with a message in err
 * naming the place in the file ("ringd.yaml:9:15: socket_group: no group
 * \"ringd\" on this host"). Free with perm_free() either way. */
int perm_resolve(perm_policy *p, const cfg *c, char *err, size_t errlen);

void perm_free(perm_policy *p);

/* Binds the socket fd to path and gives the file p's group and mode. The
 * file is created owner-only, so it is never more open than p says, and fd
 * must not be listening yet: until listen() nobody can connect whatever the
 * mode. Returns 0 or RINGD_EIO with a message in err. */
int perm_bind(const perm_policy *p, int fd, const char *path, char *err, size_t errlen);

/* Gives the socket file at path p's group and mode (perm_bind() does, and a
 * reload that changes them). Returns 0 or RINGD_EIO with a message in err. */
int perm_apply(const perm_policy *p, const char *path, char *err, size_t errlen);

/* Whether the peer of the connected socket fd may use the daemon: 1 if so,
 * 0 if not (why says who it is and why not), RINGD_EIO if its credentials
 * cannot be read. *pid, *uid and *gid get the peer's credentials. */
int perm_check_peer(const perm_policy *p, int fd, pid_t *pid, uid_t *uid, gid_t *gid, char *why,
                    size_t whylen);

#endif /* RINGD_PERM_H */
