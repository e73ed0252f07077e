/*
 * frame.h - frames of the peer protocol on the TCP ring links.
 *
 * Pure encoding and decoding: no I/O, no allocation. The byte layout of every
 * frame is specified in proto/WIRE.md. Every frame starts with the same
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

#include "proto/summary.h"

#define FRAME_MAGIC 0x52474e44u /* "RGND" */
#define FRAME_VERSION 12
#define FRAME_HEADER_SIZE 12
#define FRAME_DATA_HEADER_SIZE 64     /* DATA body before the payload */
#define FRAME_DELTA_UNKNOWN INT32_MIN /* frame_data.delta_us not known */
#define FRAME_DATA_CRC_OFFSET 56      /* the crc field within it */
#define FRAME_MAX_PAYLOAD (16u << 20) /* largest DATA payload */
#define FRAME_MAX_BODY (FRAME_DATA_HEADER_SIZE + FRAME_MAX_PAYLOAD)
#define FRAME_MAX_NAME 64           /* cluster names, host names */
#define FRAME_MAX_TEXT 512          /* reasons in WELCOME and ABORT */
#define FRAME_MAX_CONTROL_BODY 3072 /* any frame but DATA */
#define FRAME_MAX_WAITING 256       /* EPOCH: who an incomplete ring waits for */
#define FRAME_MAX_COMMIT_HOSTS 1024 /* hosts a COMMIT frame counts (CFG_MAX_HOSTS) */
#define FRAME_MAX_COMMIT_BODY (14 + 8 * FRAME_MAX_COMMIT_HOSTS)
#define FRAME_MAX_REPORT_BODY SUMMARY_MAX_BODY /* one part of a host's summary */
#define FRAME_NO_SEQ UINT64_MAX /* EPOCH.fail_seq: no collective failed */
#define FRAME_NONCE_SIZE 32     /* handshake challenges */
#define FRAME_MAC_SIZE 32       /* HMAC-SHA256 */

/* Flags of the common header. */
#define FRAME_FLAG_LITTLE_ENDIAN 0x0001 /* HELLO: the sender stores elements little-endian */
#define FRAME_FLAG_AUTH 0x0002          /* HELLO, WELCOME: the sender has a cluster key */
#define FRAME_FLAG_CRC 0x0004           /* DATA: crc holds the payload's CRC32C */
#define FRAME_FLAG_TAG 0x0008 /* every frame of a keyed link: tags follow (FRAME_TAG_SIZE) */
#define FRAME_FLAG_CUT                                                                             \
    0x0010                    /* HELLO of an elastic ring: the sender cannot reach the hosts       \
                                 between it and the receiver (see PROTOCOL.md, Reachability) */
#define FRAME_TAG_SIZE 16     /* an AEAD tag: after the body, and after a DATA payload */

typedef enum {
    FRAME_HELLO = 1,   /* connector -> acceptor: who I am, who I think you are */
    FRAME_WELCOME = 2, /* acceptor -> connector: accepted, or refused with a reason */
    FRAME_DATA = 3,    /* a segment of a collective's buffer */
    FRAME_ABORT = 4,   /* a collective failed; travels the ring */
    FRAME_PING = 5,    /* liveness on an idle link; either direction */
    FRAME_AUTH = 6,    /* connector -> acceptor: its answer to the acceptor's challenge */
    FRAME_EPOCH = 7,   /* the ring broke, re-forms or is whole again; travels the ring */
    FRAME_COMMIT = 8,  /* how many collectives each host has completed; travels the ring */
    FRAME_REPORT = 9,  /* where one host's ranks spent their time (summary.h); travels the ring */
} frame_type;

typedef struct {
    uint8_t version;
    uint8_t type; /* frame_type */
    uint16_t flags;
    uint32_t length; /* body bytes following the header */
} frame_header;

typedef struct {
    uint32_t n_hosts;                 /* ring size as configured by the sender */
    uint32_t from_pos;                /* sender's position in the ring */
    uint32_t to_pos;                  /* position the sender believes the receiver has */
    uint32_t epoch;                   /* sender's ring epoch */
    char cluster[FRAME_MAX_NAME + 1]; /* NUL-terminated */
    char from_name[FRAME_MAX_NAME + 1];
    uint8_t nonce[FRAME_NONCE_SIZE]; /* the connector's challenge (zeros without a key) */
    int auth;                        /* FRAME_FLAG_AUTH: the sender has a key */
    uint8_t stream;                  /* which TCP stream of the link this is, 0..streams-1 */
    uint8_t streams;                 /* TCP streams per link, as configured by the sender
                                        (0 reads as 1) */
    uint64_t session;                /* the same on every stream of one link */
    uint8_t cipher;                  /* with a key: 0 MAC only, 1 aes-256-gcm,
                                        2 chacha20-poly1305 (auth_cipher) */
    int cut;                         /* FRAME_FLAG_CUT */
} frame_hello;

typedef struct {
    int32_t status;                  /* 0 accepted, else a negative RINGD_E* code */
    uint32_t epoch;                  /* epoch the link runs under (agreed: the larger of both) */
    char reason[FRAME_MAX_TEXT + 1]; /* why it was refused; "" when accepted */
    uint8_t nonce[FRAME_NONCE_SIZE]; /* the acceptor's challenge */
    uint8_t mac[FRAME_MAC_SIZE];     /* the acceptor's answer to the connector's */
    int auth;                        /* FRAME_FLAG_AUTH: the sender has a key */
} frame_welcome;

typedef struct {
    uint8_t mac[FRAME_MAC_SIZE]; /* the connector's answer to the acceptor's challenge */
} frame_auth;

/* How an EPOCH frame changes the ring. */
typedef enum {
    EPOCH_BREAK = 1,   /* a link broke: fail every collective submitted so far */
    EPOCH_FORM = 2,    /* a link (re)formed, or a host has all its ranks again: the ring
                          may be whole under this epoch */
    EPOCH_CONFIRM = 3, /* the FORM or RESET went all the way round: collectives may start
                          (unless INCOMPLETE) */
    EPOCH_RESET = 4,   /* a collective failed, or a rank left: fail every collective not
                          yet confirmed, on every host, and re-form */
    EPOCH_LEAVE = 5,   /* the origin leaves the ring for good (ringd stopping, ringctl
                          leave): the hosts up to its left neighbour close over it now */
} epoch_phase;

#define EPOCH_FLAG_GONE 0x01         /* RESET: a rank left (named in reason) */
#define EPOCH_FLAG_INCOMPLETE 0x02   /* FORM, CONFIRM: a host lacks a rank: not ready */
#define EPOCH_FLAG_DONE_UNKNOWN 0x04 /* a host on the lap could not count prev_epoch's */
#define EPOCH_FLAG_RESIZED                                                                         \
    0x08 /* FORM, RESET: a host on the lap was in another                                          \
            membership; CONFIRM: the membership is new */
#define EPOCH_FLAGS_ALL 0x0f

/* A CONFIRM's verdict, carried by a later lap for a host that missed the
 * CONFIRM (PROTOCOL.md, "A lost confirmation"). As a lap's prior: the
 * verdict by which its prev_epoch E became ready (epoch == E), what E's
 * CONFIRM said of the epoch before it. As a lap's waited: the first
 * verdict that settled E since without making the ring ready (INCOMPLETE:
 * it waited for a rank), which the lap's own must not replace. */
typedef struct {
    uint32_t epoch;      /* the CONFIRM's epoch; 0: none carried */
    /* The newest CONFIRM known on the lap to carry this verdict: its own
     * epoch, or that of a later one that carried it as prior or waited,
     * which a host settled or holds (peer protocol 12). Two verdicts of one
     * epoch are weighed by it, not by their own epochs: one that any host
     * acted on through CONFIRM C is carried by every CONFIRM after C. */
    uint32_t by;
    uint32_t prev_epoch; /* the epoch it settled */
    /* The CONFIRM's DONE_UNKNOWN and RESIZED; a waited's: and INCOMPLETE. A
     * prior's INCOMPLETE (only with RESIZED): its verdict on prev_epoch's
     * collectives is that of a waited that resized nothing, and RESIZED and
     * the membership are the CONFIRM's own (epoch.c, push_ready()). */
    uint8_t flags;
    int32_t code;
    uint64_t fail_seq;
    uint8_t fail_class;
    uint64_t done, top;
    uint64_t members;
    uint32_t members_epoch;
    char reason[FRAME_MAX_TEXT + 1];
    char members_why[FRAME_MAX_WAITING + 1];
} frame_prior;

typedef struct {
    uint32_t epoch;  /* the new ring epoch; larger wins */
    uint32_t origin; /* ring position of the host that started this frame */
    uint8_t phase;   /* epoch_phase */
    uint8_t flags;   /* EPOCH_FLAG_* */
    /* The failure that ends the previous epoch, the first one by (fail_seq,
     * fail_class, fail_origin) of those the lap has met: */
    int32_t code;         /* RINGD_E* code collectives fail with; 0 if none */
    uint64_t fail_seq;    /* its collective in prev_epoch, FRAME_NO_SEQ if none */
    uint8_t fail_class;   /* what failed first wins ties: lower first */
    uint32_t fail_origin; /* the host that found it */
    /* What the lap settles of the last epoch the ring was ready in: */
    uint32_t prev_epoch;
    uint64_t done; /* collectives of prev_epoch completed on every host the lap passed */
    uint64_t top;  /* collectives of prev_epoch any rank submitted there, on the hosts passed */
    char reason[FRAME_MAX_TEXT + 1];     /* the failure, "" if none */
    char waiting[FRAME_MAX_WAITING + 1]; /* INCOMPLETE: the ranks the ring waits for */
    /* Membership (an elastic ring; all 0 otherwise). FORM, RESET: the hosts
     * the lap has passed; CONFIRM: the hosts of the ring. Bit i: host i. */
    uint64_t members;
    uint32_t members_epoch; /* the epoch that membership was agreed in (FORM, RESET: the
                               origin's; CONFIRM: the ring's, this one if RESIZED) */
    char members_why[FRAME_MAX_WAITING + 1]; /* who left or came back, and why */
    /* FORM, RESET, CONFIRM: how prev_epoch itself became ready (prior.epoch
     * == prev_epoch), added by a host that was ready in it; else 0. */
    frame_prior prior;
    /* FORM, RESET, CONFIRM of an elastic ring (0 otherwise): what settles
     * prev_epoch when the lap closes over one of its hosts, whose own count
     * the lap cannot take (Outcomes, "A success needs every host"). */
    uint64_t prev_members; /* the hosts of prev_epoch's ring, as those on the lap knew it */
    uint64_t confirmed;    /* collectives of prev_epoch some host on the lap knew every host
                              of that ring had completed (the maximum) */
    /* FORM, RESET, CONFIRM: the CONFIRM that settled prev_epoch first and
     * left the ring waiting (waited.prev_epoch == prev_epoch), added by a
     * host that settled it; else 0. */
    frame_prior waited;
} frame_epoch;

/* EPOCH.members of a ring of all its n configured hosts. */
static inline uint64_t frame_members_all(size_t n)
{
    return n >= 64 ? UINT64_MAX : (UINT64_C(1) << n) - 1;
}

/* Collectives each host has completed in the current epoch, as the sender
 * knows: a collective is confirmed once every host has completed it. And
 * what each host knew every host had completed: a success is answered only
 * once enough hosts know it that a lap closing over some still does. */
typedef struct {
    uint32_t epoch;
    uint16_t n;                             /* hosts */
    uint64_t done[FRAME_MAX_COMMIT_HOSTS];  /* host h completed done[h] */
    uint64_t known[FRAME_MAX_COMMIT_HOSTS]; /* host h knew every host had completed known[h] */
} frame_commit;

/* The fixed part of a DATA body; the payload of `length` bytes follows. */
typedef struct {
    uint64_t seq;      /* collective sequence number within the epoch */
    uint32_t epoch;    /* ring epoch; frames of another epoch are stale */
    uint16_t step;     /* ring step, 0 .. 2(N-1)-1: reduce-scatter, then allgather */
    uint8_t dtype;     /* ringd_dtype of the collective */
    uint8_t op;        /* ringd_op of the collective */
    uint32_t chunk;    /* chunk index, 0 .. N-1 */
    uint32_t length;   /* payload bytes */
    uint64_t count;    /* elements in the whole collective buffer */
    uint64_t offset;   /* byte offset of the payload within its chunk */
    uint8_t kind;      /* ringd_coll of the collective */
    uint8_t wire;      /* float32 travelling narrow: RINGD_WIRE_BFLOAT16 or
                          RINGD_WIRE_FLOAT16 (then offset and length count wire
                          bytes); else 0 */
    uint16_t name_tag; /* 16 bits of a hash of the collective's name; 0: unnamed */
    uint32_t root;     /* BROADCAST: the root rank; else 0 */
    double wsum;       /* WMEAN, reduce-scatter steps: sum of the weights reduced so far */
    int32_t delta_us;  /* allgather of an allreduce: the start-to-first-data time of the host
                          that completed this chunk, for straggler naming; else
                          FRAME_DELTA_UNKNOWN */
    int has_crc;       /* FRAME_FLAG_CRC */
    uint32_t crc;      /* has_crc: CRC32C of the payload, then of the fixed part with
                          this field zero; else 0 */
} frame_data;

typedef struct {
    uint64_t seq;
    uint32_t epoch;
    int32_t code; /* RINGD_E* */
    char reason[FRAME_MAX_TEXT + 1];
} frame_abort;

/* Errors of the decoders and encoders. Each names what was wrong;
 * frame_strerror() prints it. They have a range of their own (-101..-199),
 * apart from the RINGD_E* codes, so that one can never pass for the other;
 * modules outside proto/ turn them into RINGD_E* codes with a message. */
typedef enum {
    FRAME_OK = 0,
    FRAME_EAGAIN = -101,     /* not enough bytes yet: read more and call again */
    FRAME_EMAGIC = -102,     /* not a ringd frame */
    FRAME_EVERSION = -103,   /* another protocol version */
    FRAME_ETYPE = -104,      /* unknown frame type */
    FRAME_ELENGTH = -105,    /* body length over the limit for its type */
    FRAME_EMALFORMED = -106, /* body inconsistent with its type (bad field, bad string) */
    FRAME_ESPACE = -107,     /* the output buffer is too small (encoders) */
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
int frame_encode_auth(uint8_t *buf, size_t cap, const frame_auth *a);
int frame_encode_epoch(uint8_t *buf, size_t cap, const frame_epoch *e);
int frame_encode_commit(uint8_t *buf, size_t cap, const frame_commit *c);
int frame_encode_report(uint8_t *buf, size_t cap, const summary_part *p);

/* Body decoders: body is the `hdr->length` bytes after the header (for DATA,
 * only the first FRAME_DATA_HEADER_SIZE of them). They check that the body is
 * consistent (lengths, NUL-free strings, payload length equal to the header's
 * length minus the fixed part) and return FRAME_OK or FRAME_EMALFORMED. */
int frame_decode_hello(const frame_header *hdr, const uint8_t *body, frame_hello *out);
int frame_decode_welcome(const frame_header *hdr, const uint8_t *body, frame_welcome *out);
int frame_decode_data(const frame_header *hdr, const uint8_t *body, frame_data *out);
int frame_decode_abort(const frame_header *hdr, const uint8_t *body, frame_abort *out);
int frame_decode_auth(const frame_header *hdr, const uint8_t *body, frame_auth *out);
int frame_decode_epoch(const frame_header *hdr, const uint8_t *body, frame_epoch *out);
int frame_decode_commit(const frame_header *hdr, const uint8_t *body, frame_commit *out);
/* The layout only: what the part says of itself is summary_check()'s. */
int frame_decode_report(const frame_header *hdr, const uint8_t *body, summary_part *out);

#endif /* RINGD_PROTO_FRAME_H */
