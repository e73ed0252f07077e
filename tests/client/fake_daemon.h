/*
 * fake_daemon.h - a scripted stand-in for ringd's Unix socket, for testing
 * libringd and ringctl without the real daemon.
 *
 * It listens on a socket in a fresh temporary directory and serves one
 * session at a time in its own thread, speaking proto/msg.h: it answers HELLO
 * with f->welcome (or refuses), maps the memfds passed with REGISTER after
 * checking their seals and size, and answers COLLECTIVE as f->coll_action
 * says. It never uses Criterion assertions (they cannot jump across
 * threads): it records what it saw, and the first thing that was wrong in
 * f->problem, for the test to assert on after fake_join().
 *
 *     static fake_daemon F;
 *     TestSuite(client, .init = start, .fini = stop);   // fake_start / fake_stop
 *     Test(client, x) { F.welcome.size = 4; ringd_connect(F.path, &c); ... }
 */
#ifndef RINGD_TEST_FAKE_DAEMON_H
#define RINGD_TEST_FAKE_DAEMON_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/msg.h"

#define FAKE_MAX_REGIONS 16
#define FAKE_MAX_LOG 64

/* What the fake does with a HELLO. */
typedef enum {
    HELLO_WELCOME = 0,
    HELLO_REFUSE,             /* MSG_ERROR(refuse_code, refuse_text), then close */
    HELLO_CLOSE,              /* close without a word */
    HELLO_WELCOME_THEN_ERROR, /* WELCOME, then at once MSG_ERROR(refuse_*) and close */
} fake_hello_action;

/* What the fake does with a COLLECTIVE. */
typedef enum {
    COLL_DOUBLE = 0, /* doubles each float32 of the buffer in place, RESULT 0 */
    COLL_KEEP,       /* leaves the buffer, RESULT 0 (a ring of one rank) */
    COLL_FAIL,       /* RESULT with reply_code and reply_text */
    COLL_ERROR,      /* MSG_ERROR with reply_code and reply_text, then close */
    COLL_CLOSE,      /* close without an answer */
    COLL_WRONG_ID,   /* RESULT 0 with another id */
} fake_coll_action;

typedef struct {
    uint32_t number;
    void *base;
    size_t size;
} fake_region;

typedef struct {
    /* Set by fake_start(). */
    char dir[64];
    char path[128];
    int listen_fd;
    int stop_pipe[2];
    pthread_t thread;
    int running;

    /* Script: set by the test before the client connects. */
    fake_hello_action hello_action;
    msg_welcome welcome; /* default: rank 0 of 1, host "a", max_bytes 1 GiB */
    int32_t refuse_code;
    char refuse_text[MSG_MAX_TEXT + 1];
    fake_coll_action coll_action;
    int32_t reply_code;
    char reply_text[MSG_MAX_TEXT + 1];
    uint32_t reply_epoch;           /* COLL_FAIL with RINGD_ERESIZED: the resize trailer, */
    int32_t reply_rank, reply_size; /* sent when reply_size > 0 */
    int fail_count;                 /* COLL_FAIL: only so many fail (0: all), then COLL_KEEP */
    int32_t leave_code;             /* RESULT status for LEAVE_REQ, 0 by default */
    char leave_text[MSG_MAX_TEXT + 1];
    int32_t register_code; /* RESULT status for REGISTER, 0 by default */
    msg_status status;     /* the answer to STATUS_REQ (its id is set by the fake) */
    int32_t balance_code;  /* RESULT status for BALANCE, 0 by default */
    /* The answer to REPORT_REQ: these, with the request's id (points at the
     * test's; NULL: REPORT_REQ is unexpected). */
    const msg_report *reports;
    int n_reports;

    /* Record: read by the test after fake_join(). */
    int sessions;                /* connections accepted */
    msg_hello hello;             /* the last HELLO */
    int requests;                /* messages after HELLO */
    uint8_t types[FAKE_MAX_LOG]; /* their types, in order */
    msg_register registers[FAKE_MAX_LOG];
    int n_registers;
    msg_unregister unregisters[FAKE_MAX_LOG];
    int n_unregisters;
    msg_collective colls[FAKE_MAX_LOG];
    int n_colls;
    msg_leave_req leave; /* the last LEAVE_REQ */
    int n_leaves;
    msg_balance balance; /* the last BALANCE */
    int n_balances;
    int region_seals;              /* F_GET_SEALS of the last registered memfd */
    long long region_fd_size;      /* its st_size */
    uint8_t unregistered_head[64]; /* the first bytes of the last unregistered region */
    fake_region regions[FAKE_MAX_REGIONS];
    int eof;           /* the client closed the session */
    int closed;        /* sessions that ended (atomic: read while running) */
    char problem[512]; /* the first violation of the protocol, "" if none */
} fake_daemon;

/* Creates the directory and socket and starts the thread. 0 or -1. Also
 * clears $RINGD_SOCKET, $RINGD_LOCAL_RANK and $LOCAL_RANK, so the client
 * under test sees only what the test sets. */
int fake_start(fake_daemon *f);

/* Waits (up to 10 s) for the thread to finish its current session and exit;
 * the thread serves sessions until fake_join() or fake_stop(). Returns 0, or -1
 * if it did not finish. */
int fake_join(fake_daemon *f);

/* Stops the thread if it still runs, unmaps the regions, removes the socket
 * and the directory. Safe after any failure; for .fini. */
void fake_stop(fake_daemon *f);

#endif /* RINGD_TEST_FAKE_DAEMON_H */
