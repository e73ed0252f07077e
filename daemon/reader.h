/*
 * reader.h - the incremental reader of peer frames on one byte stream.
 *
 * No I/O: whoever owns the stream asks reader_buf() where the next bytes go,
 * reads at most that many there, and calls reader_got(). The reader decodes
 * the 12-byte header, then the body (for DATA only its 64-byte fixed part),
 * and hands each complete piece to its owner through reader_ops. A DATA
 * payload goes straight to where the owner wants it (read in place, never
 * copied), or is skipped, or waits: a paused reader takes no bytes until
 * reader_resume(), so TCP flow control holds the sender back.
 *
 * While frames are small, runs of them are read at once into a read-ahead
 * buffer and handed out from there: a copy of a few bytes is cheaper than
 * three reads per frame. A large payload is read into its buffer directly.
 *
 * On a keyed link (reader_set_guard()) every frame carries FRAME_FLAG_TAG
 * and tags (WIRE.md, "Tags (keyed links)"; PROTOCOL.md, "Frame
 * authentication"): the header and body (a DATA frame's fixed part) are
 * followed by a tag, checked before anything of the frame is handed out;
 * a DATA payload by another, its bytes fed to the guard as they arrive
 * (decrypted in place if the link encrypts) and handed out only once that
 * tag is right.
 */
#ifndef RINGD_READER_H
#define RINGD_READER_H

#include <stddef.h>
#include <stdint.h>

#include "proto/frame.h"

#define READER_AHEAD (16 << 10)        /* read-ahead while frames are small */
#define READER_SMALL_PAYLOAD (8 << 10) /* a payload up to this size is small */
#define READER_SKIP_BUF (64 << 10)     /* sink for skipped payloads */

/* What the owner wants done with a DATA frame's payload. */
typedef enum {
    READER_INTO = 0, /* read it into *dst */
    READER_PAUSE,    /* not now: take no bytes until reader_resume() */
    READER_SKIP,     /* stale: read and discard it */
} reader_verdict;

typedef struct reader reader;

typedef struct {
    /* A header arrived; rc is its decoding (FRAME_OK or a FRAME_E* code, the
     * header filled in as far as it could be). The owner may refuse it by
     * stopping the reader (closing, refusing); otherwise a bad header makes
     * the reader fail. */
    void (*header)(void *owner, int rc, const frame_header *h);
    /* A frame other than DATA is complete (PING has an empty body). */
    void (*control)(void *owner, const frame_header *h, const uint8_t *body);
    /* A DATA frame's fixed part is decoded: returns a reader_verdict (with
     * *dst for READER_INTO), or a negative RINGD_E* code with a message in
     * why, after which the owner closes the stream. */
    int (*data)(void *owner, const frame_data *d, uint8_t **dst, char *why, size_t whylen);
    /* The payload of a DATA frame taken with READER_INTO is in place. */
    void (*payload)(void *owner, const frame_data *d, uint8_t *dst);
    /* Bytes that are not a valid frame (RINGD_EPROTO), a frame whose tag
     * is missing or wrong on a keyed link (RINGD_EAUTH: why says which,
     * without "authentication failed"), or the code data() returned: the
     * owner closes the stream. */
    void (*fail)(void *owner, int code, const char *why);
    /* Keyed links: the payload of a DATA frame taken with READER_INTO has a
     * wrong tag (RINGD_EAUTH, said as for fail()); its bytes are not to be
     * used, and the owner closes the stream. NULL: fail() is called instead. */
    void (*forged)(void *owner, const frame_data *d, const char *why);
} reader_ops;

#define READER_TAG 16 /* bytes of a tag on a keyed link */

/* The checks of a keyed link, with ctx. Each returns 1 if the tag is right. */
typedef struct {
    /* A frame's header, its body (a DATA frame's fixed part: n bytes) and
     * the tag that followed them. */
    int (*head)(void *ctx, const uint8_t *hdr, const uint8_t *body, size_t n,
                const uint8_t *tag);
    /* A DATA payload: begin, its bytes in order as they arrive (to be
     * decrypted in place if need be), then its tag. */
    void (*payload_begin)(void *ctx);
    void (*payload_part)(void *ctx, uint8_t *p, size_t n);
    int (*payload_end)(void *ctx, const uint8_t *tag);
} reader_guard;

typedef enum {
    RD_HEADER,
    RD_BODY,
    RD_TAG, /* keyed: the tag of the header and body */
    RD_PAYLOAD,
    RD_SKIP,
    RD_PAYLOAD_TAG, /* keyed: the tag of the payload */
    RD_PAUSED
} reader_state;

struct reader {
    const reader_ops *ops;
    void *owner;
    reader_state st;
    int stopped;    /* the owner gave up on the stream: take nothing more */
    int read_ahead; /* read-ahead allowed at all */
    size_t got, need;
    uint8_t hdr_buf[FRAME_HEADER_SIZE];
    frame_header hdr;
    uint8_t body[FRAME_MAX_COMMIT_BODY]; /* the largest body but DATA's */
    frame_data data;                     /* the DATA frame being read */
    uint8_t *dst;
    int verdict;   /* READER_INTO or READER_SKIP, once its payload is taken */
    uint8_t *last; /* where reader_buf() sent the bytes last */
    const reader_guard *guard;
    void *guard_ctx;
    uint8_t tag[READER_TAG];

    int small;      /* the last DATA payload was small: read ahead */
    int into_ahead; /* the read in progress goes to ahead */
    size_t ahead_pos, ahead_len;
    uint8_t ahead[READER_AHEAD];
};

/* Starts r at a frame boundary. With read_ahead 0 it reads exactly the
 * bytes of each piece, never past a frame (a handshake that hands the rest
 * of the stream over to another reader). */
void reader_init(reader *r, const reader_ops *ops, void *owner, int read_ahead);

/* From the next frame on, every frame must carry tags that g checks (a
 * keyed link; g NULL: none may). Call it between frames, e.g. from the
 * control callback of the last handshake frame. */
void reader_set_guard(reader *r, const reader_guard *g, void *ctx);

/* Allows or forbids read-ahead from now on. */
void reader_set_read_ahead(reader *r, int on);

/* Where the next bytes go, at most limit of them: *n is 0 while paused or
 * stopped. */
void reader_buf(reader *r, size_t limit, uint8_t **p, size_t *n);

/* n bytes arrived where reader_buf() said: hands out every piece they
 * complete. */
void reader_got(reader *r, size_t n);

/* Offers the paused DATA frame again; if it is taken, hands out the bytes
 * read ahead of it. Call it from the loop, not from a reader callback. */
void reader_resume(reader *r);

int reader_paused(const reader *r);

/* The owner gives up on the stream: the reader hands out nothing more. */
void reader_stop(reader *r);

/* Whether a frame is partly read (the stream is mid-frame). */
int reader_mid_frame(const reader *r);

#endif /* RINGD_READER_H */
