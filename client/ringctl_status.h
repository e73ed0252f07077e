/*
 * ringctl_status.h - `ringctl status` (ringctl_status.c): the state of the
 * ring as this host's daemon sees it, as text or JSON.
 */
#ifndef RINGD_CLIENT_RINGCTL_STATUS_H
#define RINGD_CLIENT_RINGCTL_STATUS_H

/* Runs `ringctl status` against the daemon at path (a --socket after the
 * command overrides it), with argv[0] "status" and its options after it;
 * returns an exit status. */
int status_command(const char *path, int argc, char **argv);

#endif /* RINGD_CLIENT_RINGCTL_STATUS_H */
