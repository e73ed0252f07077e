/*
 * perm.c - socket_mode, socket_group, allowed_uids and allowed_gids: the
 * permissions of the Unix socket and the check of each peer. See perm.h.
 */
#include "perm.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "ringd.h"

#define MAX_PEER_GROUPS 64 /* supplementary groups of a peer we look at */

/* A number as written, or the uid of a user name (the gid of a group name). */
static int resolve(const cfg *c, const char *key, const cfg_id *id, int group, unsigned *out,
                   char *err, size_t errlen)
{
    char *end;
    errno = 0;
    unsigned long n = strtoul(id->value, &end, 10);
    if (id->value[0] >= '0' && id->value[0] <= '9' && !*end && errno == 0) {
        *out = (unsigned)n; /* the parser bounded it below UINT32_MAX */
        return 0;
    }
    char buf[16384];
    int rc;
    if (group) {
        struct group gr, *res = NULL;
        rc = getgrnam_r(id->value, &gr, buf, sizeof buf, &res);
        if (res) *out = res->gr_gid;
        if (res) return 0;
    } else {
        struct passwd pw, *res = NULL;
        rc = getpwnam_r(id->value, &pw, buf, sizeof buf, &res);
        if (res) *out = res->pw_uid;
        if (res) return 0;
    }
    snprintf(err, errlen, "%s:%d:%d: %s: %s %s\"%s\" on this host%s%s", c->path, id->line,
             id->column, key, rc ? "cannot look up" : "no", group ? "group " : "user ", id->value,
             rc ? ": " : "", rc ? strerror(rc) : "");
    return RINGD_EINVAL;
}

static int resolve_list(const cfg *c, const char *key, const cfg_id_list *l, int group,
                        unsigned **out, size_t *n, char *err, size_t errlen)
{
    char kp[64];
    *n = 0;
    if (l->n == 0) return 0;
    if (!(*out = calloc(l->n, sizeof **out))) {
        snprintf(err, errlen, "out of memory");
        return RINGD_ENOMEM;
    }
    for (size_t i = 0; i < l->n; i++) {
        snprintf(kp, sizeof kp, "%s[%zu]", key, i);
        int rc = resolve(c, kp, &l->items[i], group, &(*out)[i], err, errlen);
        if (rc < 0) return rc;
        (*n)++;
    }
    return 0;
}

int perm_resolve(perm_policy *p, const cfg *c, char *err, size_t errlen)
{
    _Static_assert(sizeof(uid_t) == sizeof(unsigned) && sizeof(gid_t) == sizeof(unsigned),
                   "uid_t and gid_t are unsigned int on Linux");
    memset(p, 0, sizeof *p);
    p->mode = (mode_t)c->socket_mode;
    p->group = (gid_t)-1;
    if (c->socket_group.value) {
        unsigned g;
        int rc = resolve(c, "socket_group", &c->socket_group, 1, &g, err, errlen);
        if (rc < 0) return rc;
        p->group = g;
    }
    int rc =
        resolve_list(c, "allowed_uids", &c->allowed_uids, 0, &p->uids, &p->n_uids, err, errlen);
    if (rc == 0)
        rc =
            resolve_list(c, "allowed_gids", &c->allowed_gids, 1, &p->gids, &p->n_gids, err, errlen);
    return rc;
}

void perm_free(perm_policy *p)
{
    free(p->uids);
    free(p->gids);
    p->uids = NULL;
    p->gids = NULL;
    p->n_uids = p->n_gids = 0;
}

int perm_bind(const perm_policy *p, int fd, const char *path, char *err, size_t errlen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) {
        snprintf(err, errlen, "socket path %s is too long", path);
        return RINGD_EIO;
    }
    memcpy(sa.sun_path, path, strlen(path));
    /* bind() creates the file with 0777 & ~umask: make that owner-only, then
     * open it up to exactly the configured mode. */
    mode_t old = umask(0177);
    int rc = bind(fd, (struct sockaddr *)&sa, sizeof sa);
    int e = errno;
    umask(old);
    if (rc < 0) {
        snprintf(err, errlen, "cannot listen on socket %s: %s (does its directory exist?)", path,
                 strerror(e));
        return RINGD_EIO;
    }
    return perm_apply(p, path, err, errlen);
}

int perm_apply(const perm_policy *p, const char *path, char *err, size_t errlen)
{
    if (p->group != (gid_t)-1 && chown(path, (uid_t)-1, p->group) < 0) {
        snprintf(err, errlen, "cannot give socket %s to group %u (socket_group): %s", path,
                 (unsigned)p->group, strerror(errno));
        return RINGD_EIO;
    }
    if (chmod(path, p->mode) < 0) {
        snprintf(err, errlen, "cannot set mode %04o (socket_mode) on socket %s: %s",
                 (unsigned)p->mode, path, strerror(errno));
        return RINGD_EIO;
    }
    return 0;
}

static int has_id(const unsigned *ids, size_t n, unsigned id)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] == id) return 1;
    return 0;
}

int perm_check_peer(const perm_policy *p, int fd, pid_t *pid, uid_t *uid, gid_t *gid, char *why,
                    size_t whylen)
{
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0) {
        snprintf(why, whylen, "cannot read the peer's credentials: %s", strerror(errno));
        return RINGD_EIO;
    }
    *pid = cr.pid;
    *uid = cr.uid;
    *gid = cr.gid;
    if (p->n_uids == 0 && p->n_gids == 0) return 1;
    if (cr.uid == 0 || cr.uid == geteuid() || has_id(p->uids, p->n_uids, cr.uid) ||
        has_id(p->gids, p->n_gids, cr.gid))
        return 1;
    /* Supplementary groups count too: being added to a group is how one
     * usually grants access. A peer with more than we read is judged on the
     * ones we read (its primary group was checked above). */
    gid_t groups[MAX_PEER_GROUPS];
    len = sizeof groups;
    if (p->n_gids > 0 && getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) == 0) {
        for (size_t i = 0; i < len / sizeof *groups; i++)
            if (has_id(p->gids, p->n_gids, groups[i])) return 1;
    }
    snprintf(why, whylen,
             "uid %u (gid %u) is not allowed: not in allowed_uids, and neither its group nor "
             "its supplementary groups are in allowed_gids",
             (unsigned)cr.uid, (unsigned)cr.gid);
    return 0;
}
