/*
 * ringctl.h - what ringctl's commands share, from ringctl.c: the exit
 * statuses, the usage error, and the printing of text and sizes that come
 * from a daemon or a checkpoint directory. Internal to ringctl.
 */
#ifndef RINGD_CLIENT_RINGCTL_H
#define RINGD_CLIENT_RINGCTL_H

#include <stddef.h>
#include <stdint.h>

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

/* Prints "ringctl: " and fmt to stderr, then where to find help: `ringctl
 * COMMAND --help`, or `ringctl --help` for a NULL command. Returns
 * EXIT_USAGE. */
int ringctl_usage_error(const char *command, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prints s to stdout, with control characters shown as '?': the text comes
 * from a daemon or a file and must not drive the terminal. */
void ringctl_put_text(const char *s);

/* Prints n bytes to stdout as "512 B", "1.5 KiB", ..., "2.0 EiB". */
void ringctl_put_bytes(uint64_t n);
/* The same into out. */
void ringctl_format_bytes(char *out, size_t len, uint64_t n);

#endif /* RINGD_CLIENT_RINGCTL_H */
