/*
 * msg.h - messages between a local client (libringd, ringctl) and its daemon,
 * on the daemon's Unix stream socket.
 *
 * Same shape as the peer frames (proto/frame.h): a 12-byte header with its own
 * magic, then a bounded body; integers big-endian; specified in
 * proto/WIRE.md. No message carries user data: buffers live in shared
 * memory regions whose file descriptors travel beside MSG_REGISTER as
 * SCM_RIGHTS ancillary data. Pure encode/decode: no I/O, no allocation.
 *
 * A session: the client sends HELLO, the daemon answers WELCOME (or ERROR and
 * closes). Then every request carries a client-chosen id and gets exactly one
 * reply carrying the same id, in order: RESULT for REGISTER, UNREGISTER and
 * COLLECTIVE, LEAVE_REQ, BALANCE; STATUS for STATUS_REQ; for REPORT_REQ a
 * run of REPORT messages, each with the id.
 */
#ifndef RINGD_PROTO_MSG_H
#define RINGD_PROTO_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "proto/summary.h"

#define MSG_MAGIC 0x52474443u /* "RGDC" */
#define MSG_VERSION 4
#define MSG_HEADER_SIZE 12
#define MSG_MAX_BODY 8192
#define MSG_MAX_NAME 64   /* host names, collective names */
#define MSG_MAX_TEXT 1024 /* error messages */

typedef enum {
    MSG_HELLO = 1,       /* client -> daemon */
    MSG_WELCOME = 2,     /* daemon -> client */
    MSG_ERROR = 3,       /* daemon -> client: session refused or broken; the daemon closes */
    MSG_REGISTER = 4,    /* client -> daemon, with one fd (SCM_RIGHTS): a shared region */
    MSG_UNREGISTER = 5,  /* client -> daemon */
    MSG_COLLECTIVE = 6,  /* client -> daemon: run a collective on a registered region */
    MSG_RESULT = 7,      /* daemon -> client: outcome of a request */
    MSG_STATUS_REQ = 8,  /* client -> daemon: the ring's state (ringctl status) */
    MSG_STATUS = 9,      /* daemon -> client */
    MSG_LEAVE_REQ = 10,  /* client -> daemon: this host leaves or rejoins the ring (ringctl) */
    MSG_BALANCE = 11,    /* client -> daemon: the split of a balanced job (ringd.balance) */
    MSG_REPORT_REQ = 12, /* client -> daemon: where every rank's time went (ringctl report) */
    MSG_REPORT = 13,     /* daemon -> client: one part of one host's summary; `count` answer */
} msg_type;

/* The status of a RESULT that carries the resize trailer: RINGD_ERESIZED of
 * ringd.h, which proto/ does not include (client.c checks they agree). */
#define MSG_STATUS_RESIZED (-21)

/* LEAVE_REQ actions. Values are on the wire. */
typedef enum {
    MSG_LEAVE = 1, /* leave the ring now, and stay out until JOIN */
    MSG_JOIN = 2,  /* return to the ring */
} msg_leave_action;

/* Kinds of collective. Values are on the wire. */
typedef enum {
    MSG_COLL_ALLREDUCE = 1,
    MSG_COLL_BROADCAST = 2,
    MSG_COLL_ALLGATHER = 3,
    MSG_COLL_REDUCE_SCATTER = 4,
    MSG_COLL_BARRIER = 5,
} msg_coll_kind;

/* HELLO flags. */
#define MSG_HELLO_OBSERVER 0x1 /* ringctl status: not a rank, joins no collective */

typedef struct {
    uint8_t version;
    uint8_t type;    /* msg_type */
    uint16_t flags;  /* reserved, 0 */
    uint32_t length; /* body bytes */
} msg_header;

typedef struct {
    uint32_t flags;     /* MSG_HELLO_* */
    int32_t local_rank; /* requested local rank, -1: any free one */
    uint32_t pid;
} msg_hello;

typedef struct {
    int32_t rank, size;
    int32_t local_rank, local_size;
    uint32_t host_index, n_hosts;
    uint64_t max_bytes; /* largest collective buffer the daemon accepts */
    char host[MSG_MAX_NAME + 1];
    uint32_t members_epoch; /* the ring's membership rank and size are of (0: never resized) */
} msg_welcome;

typedef struct {
    int32_t code; /* RINGD_E* */
    char text[MSG_MAX_TEXT + 1];
} msg_error;

typedef struct {
    uint64_t id;
    uint32_t region; /* client-chosen region number, unique per session */
    uint64_t size;   /* bytes; must equal the size of the passed memfd */
} msg_register;

typedef struct {
    uint64_t id;
    uint32_t region;
} msg_unregister;

typedef struct {
    uint64_t id;
    uint8_t kind;  /* msg_coll_kind */
    uint8_t dtype; /* ringd_dtype */
    uint8_t op;    /* ringd_op */
    uint8_t wire;  /* ringd_wire: how a float32 collective travels; 0 the daemon's */
    uint32_t region;
    uint64_t offset;             /* byte offset of the buffer in the region */
    uint64_t count;              /* elements; per rank for ALLGATHER and REDUCE_SCATTER, whose
                                    buffers hold size x count */
    int32_t root;                /* BROADCAST: root rank */
    double weight;               /* WMEAN: this rank's weight */
    uint32_t timeout_ms;         /* 0: the daemon's default */
    char name[MSG_MAX_NAME + 1]; /* optional, "" if none; used in errors */
    /* The membership the client made it for (WELCOME's, or the last resize
     * trailer's): one made for another fails with RINGD_ERESIZED. */
    uint32_t members_epoch;
} msg_collective;

typedef struct {
    uint64_t id;
    int32_t status;              /* 0 or RINGD_E* */
    char text[MSG_MAX_TEXT + 1]; /* the error message, "" on success */
    /* The resize trailer: on the wire only when status is MSG_STATUS_RESIZED
     * and size > 0 (0 when absent, e.g. from an older daemon). The session's
     * place in the new ring, for the client to update before the failed
     * call returns. */
    uint32_t members_epoch; /* the epoch in which the new membership was agreed */
    int32_t rank, size;     /* this session's new rank, and the ranks in the new ring */
} msg_result;

typedef struct {
    uint64_t id;
} msg_status_req;

typedef struct {
    uint64_t id;
    uint8_t action; /* msg_leave_action; the daemon answers another with RINGD_EINVAL */
} msg_leave_req;

/* The split of each global batch between the ranks of a job that balances
 * its batches by speed (Python's ringd.balance), as its ranks agreed it: a
 * BALANCE from a rank, and the balance block of STATUS. On the wire only
 * the first MSG_MAX_SHARES ranks' entries travel. */
#define MSG_MAX_SHARES 64
typedef struct {
    uint32_t rows; /* rows of each global batch this rank takes */
    double rate;   /* its measured speed, rows per second of compute (smoothed); 0: not yet */
} msg_share;

typedef struct {
    uint64_t step;         /* steps the ranks have taken */
    uint64_t global_batch; /* rows of each step, over all ranks */
    uint32_t resplits;     /* times the ranks agreed on new shares */
    uint32_t every;        /* steps between two agreements; 0: equal shares, never re-split */
    uint32_t n_ranks;      /* ranks sharing the batch; entries for the first MSG_MAX_SHARES */
    msg_share shares[MSG_MAX_SHARES];
} msg_split;

typedef struct {
    uint64_t id;
    msg_split split;
} msg_balance;
typedef struct {
    uint64_t id;
} msg_report_req;

#define MSG_REPORT_HAS_PART 0x01 /* the host has sent a summary: part follows */

/* One of the `count` REPORTs answering a REPORT_REQ: one part of one
 * host's summary (summary.h), or for a host that has sent none, just its
 * name. Every configured host appears, in ring order. */
typedef struct {
    uint64_t id;
    uint32_t index, count; /* this message, of count (>= 1) answering the request */
    uint32_t n_hosts, me;  /* hosts configured; the answering host's place */
    uint32_t host_index;   /* the place of the host the part is of */
    uint64_t now_us;       /* the answering daemon's clock (Unix time, microseconds) */
    uint8_t flags;         /* MSG_REPORT_HAS_PART */
    char cluster[MSG_MAX_NAME + 1];
    char host[MSG_MAX_NAME + 1]; /* the name of host host_index */
    summary_part part;           /* with MSG_REPORT_HAS_PART; part.host == host_index */
} msg_report;

/* Connection state of a ring link, as shown by ringctl status. */
typedef enum {
    MSG_LINK_DOWN = 0,       /* no connection; retrying (right) or waiting (left) */
    MSG_LINK_CONNECTING = 1, /* TCP connect or handshake in progress */
    MSG_LINK_UP = 2,         /* handshake done, carrying frames */
    MSG_LINK_SELF = 3,       /* a ring of one host: no link */
    MSG_LINK_REFUSED = 4,    /* down: the other end refused it (reason says why) */
} msg_link_state;

#define MSG_MAX_REASON 512  /* why a link is not up */
#define MSG_MAX_WAITING 256 /* what a ring that is not ready waits for */
#define MSG_MAX_DONE 64     /* hosts whose completed collectives STATUS lists */
#define MSG_NO_AGE UINT64_MAX

/* A recent collective as this host saw it, for stragglers: wait_us is how
 * long it waited here for the left neighbour's first data (about 0: that
 * data was already waiting, this host came after its left neighbour). */
#define MSG_MAX_RECENT 8
typedef struct {
    uint64_t seq;
    uint8_t kind;     /* msg_coll_kind */
    uint8_t has_wait; /* 0: no data came from the left (e.g. a broadcast's root) */
    int32_t status;   /* 0 or RINGD_E* */
    uint64_t wait_us, latency_us;
    char last[MSG_MAX_NAME + 1]; /* allreduce: the host that started it last; "" unknown */
    uint64_t spread_us;          /* how long after the first host it started */
} msg_recent;

typedef struct {
    uint64_t id;
    char cluster[MSG_MAX_NAME + 1];
    char host[MSG_MAX_NAME + 1];
    char left[MSG_MAX_NAME + 1];
    char right[MSG_MAX_NAME + 1];
    uint32_t host_index, n_hosts;
    uint8_t left_state, right_state; /* msg_link_state */
    uint32_t epoch;
    uint32_t clients;    /* connected ranks on this host */
    uint32_t local_size; /* local_clients configured for this host */
    uint64_t collectives_done, collectives_failed;
    uint64_t bytes_in, bytes_out; /* ring payload bytes since start */
    uint64_t uptime_ms;
    uint64_t reconnects;
    char last_error[MSG_MAX_TEXT + 1]; /* last collective failure, "" if none */
    /* Added after last_error: */
    uint64_t rate_in, rate_out;  /* ring payload bytes/s over the last few seconds */
    uint64_t waits, wait_sum_us; /* collectives that waited for the left neighbour, total */
    uint8_t n_recent;            /* 0..MSG_MAX_RECENT entries of recent, oldest first */
    msg_recent recent[MSG_MAX_RECENT];
    /* Added in version 2: */
    char left_reason[MSG_MAX_REASON + 1], right_reason[MSG_MAX_REASON + 1]; /* not up: why */
    uint64_t left_age_ms, right_age_ms; /* since the link's state last changed */
    uint64_t last_error_age_ms;         /* since last_error, MSG_NO_AGE if none */
    uint64_t next_seq;                  /* the number of the next collective in the epoch */
    char waiting[MSG_MAX_WAITING + 1];  /* not ready: what the ring waits for */
    uint8_t n_done;                     /* hosts in done, 0..MSG_MAX_DONE */
    uint64_t done[MSG_MAX_DONE];        /* collectives each host completed in the epoch */
    /* Membership of an elastic ring, a trailing block on the wire when
     * n_live > 0 or a reload block follows; a body without it (an older
     * daemon) decodes with these 0 and "", and n_live 0 means "the daemon
     * does not report membership". */
    uint32_t members_epoch;              /* the epoch the membership was agreed in */
    uint32_t min_hosts;                  /* the ring runs with no fewer hosts */
    uint32_t n_live;                     /* hosts in the ring */
    uint64_t live;                       /* bit i: configured host i is in the ring */
    uint64_t resizes;                    /* membership changes since start */
    uint8_t left_ring;                   /* this host left (ringctl leave) */
    char resize_why[MSG_MAX_REASON + 1]; /* the last resize message, "" if none */
    uint8_t n_out;                       /* entries of out_age_ms, 0..MSG_MAX_DONE */
    uint64_t out_age_ms[MSG_MAX_DONE];   /* per configured host: ms since it went out
                                            of the ring, MSG_NO_AGE while in it */
    char hosts[MSG_MAX_TEXT + 1];        /* configured host names, one space apart */
    /* The last reload (SIGHUP), a trailing block after the membership one
     * (which is then sent with n_live 0 if the ring is not elastic) only
     * when reloads > 0. */
    uint64_t reloads;                     /* since the daemon started, refused ones too */
    uint64_t reload_age_ms;               /* since the last */
    uint8_t reload_refused;               /* it kept the running configuration */
    char reload_said[MSG_MAX_REASON + 1]; /* what it changed, or why it was refused */
    /* Version 4: the split of a balanced job that this host's ranks last
     * reported (BALANCE), a trailing block after the reload one (which is
     * then sent with reloads 0 if there was no reload) only when
     * split.n_ranks > 0. */
    uint64_t balance_age_ms; /* since a rank reported it */
    msg_split split;         /* n_ranks 0: no balanced job reported */
} msg_status;

/* Decoder and encoder errors: the meanings of frame_err, in a range of their
 * own (-201..-299), apart from RINGD_E* and FRAME_E* codes. */
typedef enum {
    MSG_OK = 0,
    MSG_EAGAIN = -201,
    MSG_EMAGIC = -202,
    MSG_EVERSION = -203,
    MSG_ETYPE = -204,
    MSG_ELENGTH = -205,
    MSG_EMALFORMED = -206,
    MSG_ESPACE = -207,
} msg_err;

const char *msg_strerror(int err);
const char *msg_type_name(int type);

/* Decodes a header from buf[0..len): MSG_OK, MSG_EAGAIN if len <
 * MSG_HEADER_SIZE, else an error for a wrong magic, version, type, or a
 * length over MSG_MAX_BODY. Unless MSG_EAGAIN, *out is filled even on error,
 * so that a refusal can name the client's version. */
int msg_decode_header(const uint8_t *buf, size_t len, msg_header *out);

/* Encoders write header and body into buf and return the byte count, or
 * MSG_ESPACE. Over-long strings are truncated. */
int msg_encode_hello(uint8_t *buf, size_t cap, const msg_hello *m);
int msg_encode_welcome(uint8_t *buf, size_t cap, const msg_welcome *m);
int msg_encode_error(uint8_t *buf, size_t cap, const msg_error *m);
int msg_encode_register(uint8_t *buf, size_t cap, const msg_register *m);
int msg_encode_unregister(uint8_t *buf, size_t cap, const msg_unregister *m);
int msg_encode_collective(uint8_t *buf, size_t cap, const msg_collective *m);
int msg_encode_result(uint8_t *buf, size_t cap, const msg_result *m);
int msg_encode_status_req(uint8_t *buf, size_t cap, const msg_status_req *m);
int msg_encode_status(uint8_t *buf, size_t cap, const msg_status *m);
int msg_encode_leave_req(uint8_t *buf, size_t cap, const msg_leave_req *m);
int msg_encode_balance(uint8_t *buf, size_t cap, const msg_balance *m);
int msg_encode_report_req(uint8_t *buf, size_t cap, const msg_report_req *m);
int msg_encode_report(uint8_t *buf, size_t cap, const msg_report *m);

/* Decoders take the header and its body and return MSG_OK or MSG_EMALFORMED
 * (the body does not have the type's layout: wrong size, bad string).
 * Values are not range-checked beyond the layout: dtype, op, kind and the
 * like are the daemon's to validate, with a reply that says what is wrong. */
int msg_decode_hello(const msg_header *h, const uint8_t *body, msg_hello *out);
int msg_decode_welcome(const msg_header *h, const uint8_t *body, msg_welcome *out);
int msg_decode_error(const msg_header *h, const uint8_t *body, msg_error *out);
int msg_decode_register(const msg_header *h, const uint8_t *body, msg_register *out);
int msg_decode_unregister(const msg_header *h, const uint8_t *body, msg_unregister *out);
int msg_decode_collective(const msg_header *h, const uint8_t *body, msg_collective *out);
int msg_decode_result(const msg_header *h, const uint8_t *body, msg_result *out);
int msg_decode_status_req(const msg_header *h, const uint8_t *body, msg_status_req *out);
int msg_decode_status(const msg_header *h, const uint8_t *body, msg_status *out);
int msg_decode_leave_req(const msg_header *h, const uint8_t *body, msg_leave_req *out);
int msg_decode_balance(const msg_header *h, const uint8_t *body, msg_balance *out);
int msg_decode_report_req(const msg_header *h, const uint8_t *body, msg_report_req *out);
/* Also malformed: index not below count, a host or me not below n_hosts,
 * unknown flags, a part of another host than host_index. What the part says
 * of itself is summary_check()'s. */
int msg_decode_report(const msg_header *h, const uint8_t *body, msg_report *out);

#endif /* RINGD_PROTO_MSG_H */
