/*
 * session.h - blocking message I/O on a ringd daemon's Unix socket, shared by
 * libringd (client.c) and ringctl. Internal: not installed, not exported.
 *
 * A session is one connected socket that carries the messages of proto/msg.h.
 * Every call is bounded by a deadline (session_deadline(), or -1 for none),
 * retries EINTR and partial writes, and never raises SIGPIPE. A failure leaves
 * a message in s->err that says what failed, where and what to do, and a
 * failure that may have left the byte stream out of step (an I/O error, a
 * timeout, a malformed or unexpected message, a MSG_ERROR) marks the session
 * broken: every later request must fail until the caller reconnects.
 */
#ifndef RINGD_CLIENT_SESSION_H
#define RINGD_CLIENT_SESSION_H

#include <stddef.h>
#include <stdint.h>
#include <sys/un.h>

#include "proto/msg.h"

#define SESSION_ERR_MAX 1536
#define SESSION_DEFAULT_SOCKET "/run/ringd/ringd.sock"
#define SESSION_CONNECT_TIMEOUT_MS 10000 /* connect and handshake */
#define SESSION_REQUEST_TIMEOUT_MS 10000 /* REGISTER, UNREGISTER, STATUS_REQ, and any send */

/* A whole message, header and body, as sent or received. */
#define SESSION_MSG_MAX (MSG_HEADER_SIZE + MSG_MAX_BODY)

typedef struct {
    int fd;     /* -1 when not connected */
    int broken; /* 0, or the code that broke it */
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    char err[SESSION_ERR_MAX]; /* last failure, "" if none */
} session;

/* CLOCK_MONOTONIC milliseconds timeout_ms from now. */
int64_t session_deadline(int timeout_ms);

/* Formats a message into s->err and returns code; for callers' own failures. */
int session_fail(session *s, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Connects to the daemon's socket at path. Returns 0, or RINGD_ECONNECT with
 * s->fd == -1 and a message naming the path. */
int session_connect(session *s, const char *path, int timeout_ms);

/* Closes the socket; idempotent. */
void session_close(session *s);

/* Sends len bytes, with pass_fd (unless -1) as SCM_RIGHTS on the first byte.
 * Returns 0, RINGD_ECLOSED, RINGD_ETIMEDOUT or RINGD_EIO. what names the
 * operation in messages ("allreduce"). */
int session_send(session *s, const uint8_t *msg, size_t len, int pass_fd, int64_t deadline,
                 const char *what);

/* Receives one message of any type into *h and body (MSG_MAX_BODY bytes);
 * the caller dispatches on h->type. A MSG_ERROR returns the daemon's code
 * with its text in s->err; end of stream RINGD_ECLOSED. */
int session_recv(session *s, msg_header *h, uint8_t *body, int64_t deadline, const char *what);

/* Receives one message of the type `type` into *h and body (MSG_MAX_BODY
 * bytes). A MSG_ERROR instead returns the daemon's code with its text in
 * s->err; end of stream RINGD_ECLOSED; anything else unexpected RINGD_EPROTO. */
int session_expect(session *s, int type, msg_header *h, uint8_t *body, int64_t deadline,
                   const char *what);

/* Waits for the RESULT of request id. Returns its status: 0, or the daemon's
 * negative code with its text in s->err (the session stays usable); or a
 * session failure (a wrong id is RINGD_EPROTO). */
int session_result(session *s, uint64_t id, int64_t deadline, const char *what);

/* Receives one RESULT into *r, whatever its id; 0 or a code that broke the
 * session (an ERROR from the daemon, a closed socket, a malformed reply). */
int session_recv_result(session *s, msg_result *r, int64_t deadline, const char *what);

/* Decodes a received RESULT into *r: 0, or RINGD_EPROTO (malformed, or a
 * positive status), which breaks the session. */
int session_decode_result(session *s, const msg_header *h, const uint8_t *body, msg_result *r,
                          const char *what);

/* Waits until a message starts to arrive: 1, 0 at the deadline, or a code. */
int session_readable(session *s, int64_t deadline, const char *what);

/* The handshake: sends HELLO and waits for WELCOME into *out. Returns 0, the
 * code of the daemon's MSG_ERROR, or a session failure. */
int session_hello(session *s, uint32_t flags, int32_t local_rank, msg_welcome *out);

#endif /* RINGD_CLIENT_SESSION_H */
