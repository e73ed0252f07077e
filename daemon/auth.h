/*
 * auth.h - the cluster key, the links' challenge-response, and the keys
 * that protect every frame of a link.
 *
 * Hosts of one cluster share a secret key (secret_file). A link is accepted
 * only if each side proves it holds the key: each sends a fresh random nonce,
 * and each answers with HMAC-SHA256 over both nonces and what the link is
 * (cluster, both ring positions, both epochs), labelled with its role so an
 * answer can never be replayed as the other side's.
 *
 * Once accepted, the link gets two keys of its own, one per direction,
 * derived with HKDF-SHA256 from the cluster key, both nonces and what the
 * link is; every frame then carries a 16-byte AEAD tag (AES-256-GCM or
 * ChaCha20-Poly1305) whose nonce is the direction's count of tags so far,
 * never sent: a frame changed, replayed, reordered or dropped fails the next
 * tag check. Without encryption the payload is authenticated only (AES-GCM
 * with no plaintext: GMAC). PROTOCOL.md, "Frame authentication".
 */
#ifndef RINGD_AUTH_H
#define RINGD_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "proto/frame.h"

#define AUTH_MIN_KEY 16
#define AUTH_MAX_KEY 1024

typedef struct {
    uint8_t bytes[AUTH_MAX_KEY];
    size_t len;
} auth_key;

/* Reads the key file at path. Refuses a file that group or others may read
 * or write, and keys shorter than AUTH_MIN_KEY bytes (a trailing newline is
 * not part of the key). Returns 0, or a negative RINGD_E* code with a message
 * in err. */
int auth_load_key(const char *path, auth_key *out, char *err, size_t errlen);

/* Fills nonce with random bytes. Returns 0 or RINGD_EIO. */
int auth_nonce(uint8_t nonce[FRAME_NONCE_SIZE]);

/* What a link's answers are computed over. */
typedef struct {
    const char *cluster;
    uint32_t connector, acceptor;             /* ring positions */
    uint32_t connector_epoch, acceptor_epoch; /* HELLO's and WELCOME's */
    const uint8_t *connector_nonce, *acceptor_nonce;
} auth_link;

typedef enum { AUTH_ACCEPTOR = 1, AUTH_CONNECTOR = 2 } auth_role;

/* The answer of `role` for link: HMAC-SHA256(key, role label | link).
 * Returns 0, or RINGD_EIO if libcrypto failed (mac is then random). */
int auth_answer(const auth_key *k, auth_role role, const auth_link *link,
                uint8_t mac[FRAME_MAC_SIZE]);

/* Whether mac is role's answer for link; compares in constant time. */
int auth_check(const auth_key *k, auth_role role, const auth_link *link,
               const uint8_t mac[FRAME_MAC_SIZE]);

/* ---- Frame protection ---- */

#define AUTH_TAG_SIZE 16
#define AUTH_LINK_KEY 32

/* What protects a link's frames; the value travels in HELLO. */
typedef enum {
    AUTH_MAC = 0,               /* AES-256-GMAC: authenticated, not encrypted */
    AUTH_AES_256_GCM = 1,       /* payloads encrypted, everything authenticated */
    AUTH_CHACHA20_POLY1305 = 2, /* the same with ChaCha20-Poly1305 */
} auth_cipher;

const char *auth_cipher_name(auth_cipher c);

/* One direction of a keyed link. */
typedef struct {
    void *ctx;    /* EVP_CIPHER_CTX, keyed for this direction */
    uint64_t seq; /* tags made (sending) or checked (receiving) so far */
    int encrypt;  /* payloads are encrypted, not only authenticated */
    int sending;
    int broken; /* libcrypto failed mid-frame: every check fails */
} auth_dir;

typedef struct {
    auth_dir out, in;
} auth_frames;

/* Allocates the contexts; 0 or RINGD_ENOMEM. auth_frames_free() undoes it. */
int auth_frames_init(auth_frames *f);
void auth_frames_free(auth_frames *f);

/* Keys f for a link just authenticated (link as in the handshake), for the
 * end `self`: HKDF-SHA256(key, salt = both nonces, info = the link and the
 * cipher) gives the connector's and the acceptor's keys; sequence numbers
 * start at 0. Returns 0 or RINGD_EIO. */
int auth_frames_key(auth_frames *f, const auth_key *k, const auth_link *link, auth_cipher c,
                    auth_role self);

/* Sending: the tag of the next frame part, over aad and then the n bytes of
 * in: with out, in is encrypted into out (in place allowed); without, in is
 * authenticated only. Returns 0 or RINGD_EIO (tag then random). */
int auth_seal(auth_dir *d, const uint8_t *aad, size_t aadlen, const uint8_t *in, uint8_t *out,
              size_t n, uint8_t tag[AUTH_TAG_SIZE]);

/* Receiving, as the bytes arrive: begin, then aad and payload parts in the
 * sender's order, then end with the tag read; payload bytes are decrypted
 * in place when the link encrypts. end returns 1 if the tag is right. */
void auth_open_begin(auth_dir *d);
void auth_open_aad(auth_dir *d, const uint8_t *p, size_t n);
void auth_open_payload(auth_dir *d, uint8_t *p, size_t n);
int auth_open_end(auth_dir *d, const uint8_t tag[AUTH_TAG_SIZE]);

#endif /* RINGD_AUTH_H */
