/*
 * bytes.h - big-endian integers and length-prefixed strings, shared by
 * frame.c and msg.c. Internal to proto/: nothing outside it includes this.
 *
 * Encoders append through a bytes_writer and decoders consume through a
 * bytes_reader. Both are sticky: the first overflow or underflow marks the
 * cursor and every later call does nothing, so a codec checks once, at the
 * end, instead of after every field.
 */
#ifndef RINGD_PROTO_BYTES_H
#define RINGD_PROTO_BYTES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline void put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static inline void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline void put_u64(uint8_t *p, uint64_t v)
{
    put_u32(p, (uint32_t)(v >> 32));
    put_u32(p + 4, (uint32_t)v);
}

static inline uint16_t get_u16(const uint8_t *p)
{
    return (uint16_t)((unsigned)p[0] << 8 | p[1]);
}

static inline uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t get_u64(const uint8_t *p)
{
    return (uint64_t)get_u32(p) << 32 | get_u32(p + 4);
}

/* Every frame and message starts with the same 12 bytes: magic u32, version
 * u8, type u8, flags u16, body length u32. */
#define BYTES_HEADER_SIZE 12

static inline void put_header(uint8_t *p, uint32_t magic, uint8_t version, uint8_t type,
                              uint16_t flags, uint32_t length)
{
    put_u32(p, magic);
    p[4] = version;
    p[5] = type;
    put_u16(p + 6, flags);
    put_u32(p + 8, length);
}

typedef struct {
    uint8_t *buf;
    size_t cap;
    size_t len;
    int overflow;
} bytes_writer;

/* Starts a writer on buf[0..cap) with room for the header, which the encoder
 * fills last, once it knows the body length. */
static inline void wr_begin(bytes_writer *w, uint8_t *buf, size_t cap)
{
    w->buf = buf;
    w->cap = cap;
    w->len = BYTES_HEADER_SIZE;
    w->overflow = cap < BYTES_HEADER_SIZE;
}

static inline uint8_t *wr_take(bytes_writer *w, size_t n)
{
    uint8_t *p;

    if (w->overflow || w->cap - w->len < n) {
        w->overflow = 1;
        return NULL;
    }
    p = w->buf + w->len;
    w->len += n;
    return p;
}

static inline void wr_u8(bytes_writer *w, uint8_t v)
{
    uint8_t *p = wr_take(w, 1);
    if (p) *p = v;
}

static inline void wr_u16(bytes_writer *w, uint16_t v)
{
    uint8_t *p = wr_take(w, 2);
    if (p) put_u16(p, v);
}

static inline void wr_u32(bytes_writer *w, uint32_t v)
{
    uint8_t *p = wr_take(w, 4);
    if (p) put_u32(p, v);
}

static inline void wr_u64(bytes_writer *w, uint64_t v)
{
    uint8_t *p = wr_take(w, 8);
    if (p) put_u64(p, v);
}

/* int32_t is two's complement by definition, so the bits carry over as is. */
/* IEEE binary64, sent as the big-endian bytes of its bit pattern. */
static inline void wr_f64(bytes_writer *w, double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    wr_u64(w, u);
}

static inline void wr_i32(bytes_writer *w, int32_t v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    wr_u32(w, u);
}

/* Writes u16 length + bytes, without the NUL. Strings in the structs are
 * arrays of max + 1 bytes, so strnlen() also bounds one that lost its NUL:
 * over-long strings are truncated to max. */
static inline void wr_str(bytes_writer *w, const char *s, size_t max)
{
    size_t n = strnlen(s, max);
    uint8_t *p;

    wr_u16(w, (uint16_t)n);
    if (n > 0 && (p = wr_take(w, n))) memcpy(p, s, n);
}

typedef struct {
    const uint8_t *p;
    size_t left;
    int bad;
} bytes_reader;

static inline const uint8_t *rd_take(bytes_reader *r, size_t n)
{
    const uint8_t *p;

    if (r->bad || r->left < n) {
        r->bad = 1;
        return NULL;
    }
    p = r->p;
    r->p += n;
    r->left -= n;
    return p;
}

static inline uint8_t rd_u8(bytes_reader *r)
{
    const uint8_t *p = rd_take(r, 1);
    return p ? *p : 0;
}

static inline uint16_t rd_u16(bytes_reader *r)
{
    const uint8_t *p = rd_take(r, 2);
    return p ? get_u16(p) : 0;
}

static inline uint32_t rd_u32(bytes_reader *r)
{
    const uint8_t *p = rd_take(r, 4);
    return p ? get_u32(p) : 0;
}

static inline uint64_t rd_u64(bytes_reader *r)
{
    const uint8_t *p = rd_take(r, 8);
    return p ? get_u64(p) : 0;
}

static inline double rd_f64(bytes_reader *r)
{
    uint64_t u = rd_u64(r);
    double v;
    memcpy(&v, &u, sizeof v);
    return v;
}

static inline int32_t rd_i32(bytes_reader *r)
{
    uint32_t u = rd_u32(r);
    int32_t v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* Reads u16 length + bytes into dst (max + 1 bytes), NUL-terminated. A length
 * over max, a NUL inside (which would silently shorten the string) or a body
 * too short for the bytes marks the reader bad; dst is then "". */
static inline void rd_str(bytes_reader *r, char *dst, size_t max)
{
    size_t n = rd_u16(r);
    const uint8_t *p = NULL;

    dst[0] = '\0';
    if (n > max) {
        r->bad = 1;
        return;
    }
    if (n == 0 || !(p = rd_take(r, n))) return;
    if (memchr(p, '\0', n)) {
        r->bad = 1;
        return;
    }
    memcpy(dst, p, n);
    dst[n] = '\0';
}

/* True when the body was well formed and consumed to its last byte: trailing
 * bytes are as malformed as missing ones. */
static inline int rd_done(const bytes_reader *r)
{
    return !r->bad && r->left == 0;
}

#endif /* RINGD_PROTO_BYTES_H */
