/*
 * ringctl_leave.c - `ringctl leave` and `ringctl join`: open an observer
 * session (not a rank), send LEAVE_REQ and print the daemon's answer.
 *
 * Leaving takes this host out of an elastic ring at once, without waiting
 * for evict_after: the other hosts go on without it (their collective in
 * flight fails with RINGD_ERESIZED) and it stays out, across reconnects,
 * until `ringctl join` (or a restart of the daemon) brings it back.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ringctl.h"
#include "ringctl_leave.h"
#include "ringd.h"
#include "session.h"

/* The daemon answers once the other hosts know: longer than a STATUS. */
#define LEAVE_TIMEOUT_MS 30000

static const char usage_leave[] =
    "Usage: ringctl [--socket PATH] leave\n"
    "       ringctl [--socket PATH] join\n"
    "\n"
    "leave: takes this host out of its elastic ring now, as if it had been gone\n"
    "for evict_after: the other hosts resize the ring and go on without it (the\n"
    "collective in flight fails there with RINGD_ERESIZED; ringd.elastic resumes\n"
    "it), and this host's ranks fail their collectives until it returns. It stays\n"
    "out until `ringctl join`, or until the daemon restarts.\n"
    "join: brings a host that left back into the ring.\n"
    "Prints the daemon's answer. Connects as an observer: it takes no rank.\n"
    "\n"
    "Options:\n"
    "  -s, --socket PATH  the daemon's Unix socket (as before the command)\n"
    "  -h, --help         show this help\n"
    "\n"
    "Exit status: 0 done, 1 refused or failed (the daemon's reason on stderr),\n"
    "2 usage error.\n";

/* Sends LEAVE_REQ with action over an observer session; on success *text
 * gets the daemon's message ("" if none). Returns 0 or a RINGD_E* code,
 * with the message in s->err. */
static int request(session *s, const char *path, int action, const char *what, char *text,
                   size_t len)
{
    int rc = session_connect(s, path, SESSION_CONNECT_TIMEOUT_MS);
    msg_welcome w;
    if (rc == 0) rc = session_hello(s, MSG_HELLO_OBSERVER, -1, &w);
    uint8_t buf[SESSION_MSG_MAX];
    int64_t deadline = session_deadline(LEAVE_TIMEOUT_MS);
    msg_leave_req req = {.id = 1, .action = (uint8_t)action};
    if (rc == 0) {
        int n = msg_encode_leave_req(buf, sizeof buf, &req);
        rc = n < 0 ? session_fail(s, RINGD_EPROTO, "%s: cannot encode LEAVE_REQ", what)
                   : session_send(s, buf, (size_t)n, -1, deadline, what);
    }
    msg_result r;
    if (rc == 0) rc = session_recv_result(s, &r, deadline, what);
    if (rc == 0 && r.id != req.id)
        rc = session_fail(s, RINGD_EPROTO,
                          "%s: ringd at %s answered request %" PRIu64 " instead of %" PRIu64, what,
                          s->path, r.id, req.id);
    if (rc == 0 && r.status < 0)
        rc = session_fail(s, r.status, "%s: %s", what,
                          r.text[0] ? r.text : ringd_strerror(r.status));
    if (rc == 0) snprintf(text, len, "%s", r.text);
    session_close(s);
    return rc;
}

int leave_command(const char *path, int argc, char **argv)
{
    static const struct option opts[] = {
        {"socket", required_argument, NULL, 's'}, {"help", no_argument, NULL, 'h'}, {0}};
    const char *what = argv[0];
    int action = strcmp(what, "join") == 0 ? MSG_JOIN : MSG_LEAVE;
    int ch;
    optind = 0;
    while ((ch = getopt_long(argc, argv, "+s:h", opts, NULL)) != -1) {
        switch (ch) {
        case 's':
            path = optarg;
            break;
        case 'h':
            fputs(usage_leave, stdout);
            return EXIT_OK;
        default:
            return ringctl_usage_error(what, "invalid option for %s", what);
        }
    }
    if (optind < argc) return ringctl_usage_error(what, "unexpected argument '%s'", argv[optind]);

    session s;
    char text[MSG_MAX_TEXT + 1];
    if (request(&s, path, action, what, text, sizeof text) < 0) {
        fprintf(stderr, "ringctl: %s\n", s.err);
        return EXIT_FAIL;
    }
    if (text[0]) {
        ringctl_put_text(text);
        putchar('\n');
    } else {
        printf("%s\n",
               action == MSG_LEAVE ? "this host left the ring" : "this host joins the ring");
    }
    return fflush(stdout) == 0 ? EXIT_OK : EXIT_FAIL;
}
