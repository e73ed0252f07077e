/*
 * ringctl_leave.h - `ringctl leave` and `ringctl join` (ringctl_leave.c):
 * this host leaves an elastic ring at once, or returns to it.
 */
#ifndef RINGD_CLIENT_RINGCTL_LEAVE_H
#define RINGD_CLIENT_RINGCTL_LEAVE_H

/* Runs `ringctl leave` or `ringctl join` (argv[0]) against the daemon at path
 * (a --socket after the command overrides it); returns an exit status. */
int leave_command(const char *path, int argc, char **argv);

#endif /* RINGD_CLIENT_RINGCTL_LEAVE_H */
