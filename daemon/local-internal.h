/*
 * local-internal.h - what the two files of the local sessions share:
 * local.c (the socket, sessions, their bytes in and out) and
 * local_requests.c (what a session asks for: HELLO, REGISTER, UNREGISTER,
 * COLLECTIVE, STATUS_REQ, LEAVE_REQ, BALANCE).
 */
#ifndef RINGD_LOCAL_INTERNAL_H
#define RINGD_LOCAL_INTERNAL_H

#include <stdint.h>
#include <uv.h>

#include "gather.h"
#include "local.h"
#include "report.h"
#include "perm.h"
#include "proto/msg.h"
#include "regions.h"

#define IN_CAP (2 * (MSG_HEADER_SIZE + MSG_MAX_BODY))
#define MAX_FDS 4 /* descriptors received but not yet claimed */

typedef struct session session;

struct session {
    local *owner;
    int fd;
    uv_poll_t poll;
    int events; /* what poll watches now; -1 before the first update_poll() */
    int closing;
    int welcomed, observer;
    int local_rank;
    uint32_t pid; /* from SO_PEERCRED, then as the HELLO says */
    uint32_t uid;
    uint64_t accepted_ms;
    gather_pos pos; /* its place in the numbering of the host's collectives */
    uint64_t born;  /* engine_generation() at its first collective */
    int submitted;  /* it has submitted a collective */
    /* The newest resize that left this host out (a ring that closed over
     * it) which this session was told of, by its membership epoch; 0:
     * none (session_resize()). */
    uint32_t told_out;
    /* Answers to COLLECTIVEs go back in request order: each waits in
     * answers until those before it have gone. */
    struct answer *answers, *answers_tail;
    int n_answers;
    region_set regions;
    int fds[MAX_FDS];
    int n_fds;
    uint8_t in[IN_CAP];
    size_t in_len;
    uint8_t *out;
    size_t out_len, out_cap;
    session *next;
};

struct local {
    uv_loop_t *loop;
    const cfg *cfg;
    int me, local_size; /* this host's place in the configuration */
    engine *engine;
    gather *gather;
    int listen_fd;
    uv_poll_t listen_poll;
    int listening;
    uv_timer_t hello_timer; /* closes sessions that never say HELLO */
    perm_policy perm;
    uint64_t bad_window_ms; /* start of the current BAD_LOG_MS window */
    int bad_in_window;
    session *sessions;
    int n_sessions;
    session **by_rank; /* local rank -> session */
    char (*left)[160]; /* local rank -> how its last process left, "" if none */
    uint64_t start_ms;
    const rates *rates;          /* for status; may be NULL */
    const status_reload *reload; /* for status; may be NULL */
    status_balance *balance;     /* the split last reported (BALANCE); may be NULL */
    report *report;              /* the ranks' accounting, REPORT_REQ; may be NULL */
    int closing, open_handles;
    void (*done)(void *);
    void *done_data;
};

/* A COLLECTIVE's answer, in request order. */
typedef struct answer {
    uint64_t id;
    int ready, status;
    char *text;
    uint8_t kind;    /* for the accounting (report.h) */
    uint32_t made_for; /* the membership epoch the client made it for */
    uint64_t bytes;  /* the buffer's */
    gather_timing t; /* a success: how it went */
    struct answer *next;
} answer;

/* Queues an encoded message (n bytes in buf, or an encoder error). */
void session_queue(session *s, const uint8_t *buf, int n);
/* Takes COLLECTIVE id's place in the order of answers, before anything
 * may answer it; kind and bytes are for the rank's accounting, made_for
 * (the membership epoch the client made it for) for a resize's answer. */
int session_expect(session *s, uint64_t id, uint8_t kind, uint64_t bytes, uint32_t made_for);
/* The resize that ended membership made_for, as s learns of them (one at a
 * time): the first kept, by membership epoch, that s has not been told of. A resize that left
 * this host out has no place for s: s is told of it and stays in made_for,
 * and its next call made for it fails with the next resize, or runs where
 * there is none yet (this host is still out). NULL: none is kept. */
const engine_resize *session_resize(const session *s, const engine_view *v, uint32_t made_for);
/* Answers request id, a message of type type, with a RESULT: the one way a
 * request is answered, refused or done (but STATUS_REQ, whose STATUS goes
 * at once). A COLLECTIVE's answer waits in the place session_expect() took
 * for those of the COLLECTIVEs before it; any other request's goes at once. */
void session_answer(session *s, uint8_t type, uint64_t id, int status, const char *text);
/* The same for a COLLECTIVE that succeeded, with how it went (t). */
void session_answer_timed(session *s, uint64_t id, int status, const char *text,
                          const gather_timing *t);
/* Sends MSG_ERROR and closes the session once it is out. */
void session_refuse(session *s, int code, const char *text);
/* Closes a session whose client sent what no libringd sends, saying so. */
void session_drop(session *s, const char *why);
void session_close(session *s, const char *why);

/* Tells the engine whether every local rank is connected, and if not,
 * which are missing. */
void local_report_members(local *l);

/* local_requests.c: decodes and runs one message, and answers it (or
 * leaves a COLLECTIVE to gather to answer); one that does not decode
 * closes s. */
void session_handle(session *s, const msg_header *h, const uint8_t *body);
/* The descriptor the next REGISTER claims, or -1. */
int session_take_fd(session *s);

#endif /* RINGD_LOCAL_INTERNAL_H */
