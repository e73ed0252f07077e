/*
 * frame.h - frames of the peer protocol on the TCP ring links.
 *
 * Pure encoding and decoding: no I/O, no allocation. The byte layout of every
 * frame is specified in proto/PROTOCOL.md. Every frame starts with the same
 * 12-byte header (magic, version, type, flags, body length); the body length
 * is bounded by FRAME_MAX_BODY so a corrupt length is an error, never a huge
 * allocation. Integers are big-endian. A DATA frame's payload (the elements
 * themselves) is not copied by these functions: the caller sends it from, and
 * receives it into, its own buffer right after the encoded headers.
 */
#ifndef RINGD_PROTO_FRAME_H
#define RINGD_PROTO_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define FRAME_MAGIC 0x52474e44u /* "RGND" */
#define FRAME_VERSION 1
#define FRAME_HEADER_SIZE 12
#define FRAME_DATA_HEADER_SIZE 56             /* DATA body before the payload */
#define FRAME_MAX_PAYLOAD (16u << 20)          /* largest DATA payload */
#define FRAME_MAX_BODY (FRAME_DATA_HEADER_SIZE + FRAME_MAX_PAYLOAD)
#define FRAME_MAX_NAME 64                      /* cluster names, host names */
#define FRAME_MAX_TEXT 512                     /* reasons in WELCOME and ABORT */
#define FRAME_MAX_CONTROL_BODY 1024            /* any frame but DATA */

/* Flags of the common header. */
#define FRAME_FLAG_LITTLE_ENDIAN 0x0001 /* HELLO: the sender stores elements little-endian */

typedef enum {
    FRAME_HELLO = 1,   /* connector -> acceptor: who I am, who I think you are */
    FRAME_WELCOME = 2, /* acceptor -> connector: accepted, or refused with a reason */
    FRAME_DATA = 3,    /* a segment of a collective's buffer */
    FRAME_ABORT = 4,   /* a collective failed; travels the ring */
    FRAME_PING = 5,    /* liveness on an idle link; either direction */
} frame_type;

typedef struct {
    uint8_t version;
    uint8_t type;   /* frame_type */
    uint16_t flags;
    uint32_t length; /* body bytes following the header */
} frame_header;

typedef struct {
    uint32_t n_hosts;   /* ring size as configured by the sender */
    uint32_t from_pos;  /* sender's position in the ring */
    uint32_t to_pos;    /* position the sender believes the receiver has */
    uint32_t epoch;     /* sender's ring epoch */
    char cluster[FRAME_MAX_NAME + 1]; /* NUL-terminated */
    char from_name[FRAME_MAX_NAME + 1];
} frame_hello;

typedef struct {
    int32_t status;   /* 0 accepted, else a negative RINGD_E* code */
    uint32_t epoch;   /* epoch the link runs under (agreed: the larger of both) */
    char reason[FRAME_MAX_TEXT + 1]; /* why it was refused; "" when accepted */
} frame_welcome;

/* The fixed part of a DATA body; the payload of `length` bytes follows. */
typedef struct {
    uint64_t seq;     /* collective sequence number within the epoch */
    uint32_t epoch;   /* ring epoch; frames of another epoch are stale */
    uint16_t step;    /* ring step, 0 .. 2(N-1)-1: reduce-scatter, then allgather */
    uint8_t dtype;    /* ringd_dtype of the collective */
    uint8_t op;       /* ringd_op of the collective */
    uint32_t chunk;   /* chunk index, 0 .. N-1 */
    uint32_t length;  /* payload bytes */
    uint64_t count;   /* elements in the whole collective buffer */
    uint64_t offset;  /* byte offset of the payload within its chunk */
    uint8_t kind;     /* ringd_coll of the collective */
    uint32_t root;    /* BROADCAST: the root rank; else 0 */
    double wsum;      /* WMEAN, reduce-scatter steps: sum of the weights reduced so far */
} frame_data;

typedef struct {
    uint64_t seq;
    uint32_t epoch;
    int32_t code;     /* RINGD_E* */
    char reason[FRAME_MAX_TEXT + 1];
} frame_abort;

/* Errors of the decoders. Each names what was wrong; frame_strerror() prints it. */
typedef enum {
    FRAME_OK = 0,
    FRAME_EAGAIN = -1,     /* not enough bytes yet: read more and call again */
    FRAME_EMAGIC = -2,     /* not a ringd frame */
    FRAME_EVERSION = -3,   /* another protocol version */
    FRAME_ETYPE = -4,      /* unknown frame type */
    FRAME_ELENGTH = -5,    /* body length over the limit for its type */
    FRAME_EMALFORMED = -6, /* body inconsistent with its type (bad field, bad string) */
    FRAME_ESPACE = -7,     /* the output buffer is too small (encoders) */
} frame_err;

const char *frame_strerror(int err);
const char *frame_type_name(int type);

/* Decodes a common header from buf[0..len). Returns FRAME_OK, FRAME_EAGAIN when
 * len < FRAME_HEADER_SIZE, or an error if the magic, version, type or length
 * (checked against the type's own limit) is wrong. Unless FRAME_EAGAIN, *out
 * is filled even on error, so that a refusal can name the peer's version. */
int frame_decode_header(const uint8_t *buf, size_t len, frame_header *out);

/* Encoders write a complete frame (header and body; for DATA, header and the
 * fixed DATA part, without the payload) into buf and return the number of
 * bytes written, or FRAME_ESPACE (FRAME_ELENGTH for a DATA payload over
 * FRAME_MAX_PAYLOAD). Strings longer than their limit are truncated. */
int frame_encode_hello(uint8_t *buf, size_t cap, const frame_hello *h);
int frame_encode_welcome(uint8_t *buf, size_t cap, const frame_welcome *w);
int frame_encode_data(uint8_t *buf, size_t cap, const frame_data *d);
int frame_encode_abort(uint8_t *buf, size_t cap, const frame_abort *a);
int frame_encode_ping(uint8_t *buf, size_t cap);

/* Body decoders: body is the `hdr->length` bytes after the header (for DATA,
 * only the first FRAME_DATA_HEADER_SIZE of them). They check that the body is
 * consistent (lengths, NUL-free strings, payload length equal to the header's
 * length minus the fixed part) and return FRAME_OK or FRAME_EMALFORMED. */
int frame_decode_hello(const frame_header *hdr, const uint8_t *body, frame_hello *out);
int frame_decode_welcome(const frame_header *hdr, const uint8_t *body, frame_welcome *out);
int frame_decode_data(const frame_header *hdr, const uint8_t *body, frame_data *out);
int frame_decode_abort(const frame_header *hdr, const uint8_t *body, frame_abort *out);

#endif /* RINGD_PROTO_FRAME_H */
