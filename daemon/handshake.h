/*
 * handshake.h - HELLO, WELCOME and AUTH of a link, for both ends.
 *
 * Pure: builds the frames and checks them, no I/O. The connector sends
 * HELLO; the acceptor checks it (version, byte order, cluster, ring size,
 * who may connect, streams, key on both sides or neither) and answers
 * WELCOME, accepting with its challenge and its answer to the connector's,
 * or refusing with a reason; with a cluster key the connector checks that
 * answer and sends AUTH, its own answer, which the acceptor checks. See
 * PROTOCOL.md, "Handshake" and "Challenge-response".
 *
 * The ring and the star use the same handshake; they differ in who may
 * connect to whom (hs_mode) and in what HELLO's and WELCOME's epoch fields
 * carry.
 */
#ifndef RINGD_HANDSHAKE_H
#define RINGD_HANDSHAKE_H

#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "config/config.h"
#include "proto/frame.h"

/* HELLO.epoch of a star leaf: "STAR", so that ring and star hosts refuse
 * each other. */
#define HS_STAR_EPOCH 0x53544152u

typedef enum {
    HS_RING, /* a host accepts its left neighbour */
    HS_STAR, /* the star root accepts every other host */
} hs_mode;

/* What this host is, for its handshakes. key NULL: no cluster key. */
typedef struct {
    const cfg *cfg;
    int me;
    const auth_key *key;
    int streams; /* TCP streams per link */
    hs_mode mode;
    int elastic; /* a ring that closes over missing hosts: any host may connect (the
                    links decide whether it is the left neighbour now) */
} hs_ctx;

/* One connection's handshake, from either end. */
typedef struct {
    uint32_t connector, acceptor;        /* ring positions */
    uint32_t hello_epoch, welcome_epoch; /* HELLO's and WELCOME's epoch fields */
    uint8_t connector_nonce[FRAME_NONCE_SIZE], acceptor_nonce[FRAME_NONCE_SIZE];
    char claimed[FRAME_MAX_NAME + 1]; /* acceptor: the name in HELLO */
    uint8_t stream;                   /* acceptor: HELLO's stream */
    uint64_t session;                 /* acceptor: HELLO's session */
    int cut;                          /* acceptor: HELLO's FRAME_FLAG_CUT */
} hs_state;

/* What protects a keyed link's frames: the configuration's encryption. */
auth_cipher hs_cipher(const hs_ctx *x);

/* What the link of a finished handshake is, for its frame keys
 * (auth_frames_key()). */
auth_link hs_link(const hs_ctx *x, const hs_state *st);

/* Connector: the HELLO of stream `stream` to host `to`, with a fresh
 * challenge when there is a key. Returns 0 or RINGD_EIO (no randomness). */
int hs_hello(const hs_ctx *x, int to, uint32_t epoch, int stream, uint64_t session,
             frame_hello *out, hs_state *st);

/* Acceptor: checks a HELLO (hdr is its header). Returns 0, or the code to
 * refuse it with (RINGD_EMISMATCH, RINGD_EAUTH) and the reason in why. */
int hs_check_hello(const hs_ctx *x, const frame_header *hdr, const frame_hello *h, char *why,
                   size_t whylen);

/* Acceptor: the WELCOME accepting h under `epoch`, with this end's
 * challenge and answer. Returns 0 or RINGD_EIO. */
int hs_welcome(const hs_ctx *x, const frame_hello *h, uint32_t epoch, frame_welcome *out,
               hs_state *st);

/* Acceptor: the WELCOME refusing a HELLO. */
void hs_refusal(int code, const char *reason, uint32_t epoch, frame_welcome *out);

/* Connector: takes an accepting WELCOME and writes AUTH (this end's answer)
 * into *auth. Returns 1 if the acceptor's answer was right, 0 if not; the
 * AUTH goes out either way, so that both ends log a key that differs. */
int hs_answer(const hs_ctx *x, const frame_welcome *w, hs_state *st, frame_auth *auth);

/* Acceptor: whether AUTH is the right answer to this end's challenge. */
int hs_check_auth(const hs_ctx *x, const hs_state *st, const frame_auth *a);

#endif /* RINGD_HANDSHAKE_H */
