/*
 * auth.h - the cluster key and the links' challenge-response.
 *
 * Hosts of one cluster share a secret key (secret_file). A link is accepted
 * only if each side proves it holds the key: each sends a fresh random nonce,
 * and each answers with HMAC-SHA256 over both nonces and what the link is
 * (cluster, both ring positions, both epochs), labelled with its role so an
 * answer can never be replayed as the other side's.
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

#endif /* RINGD_AUTH_H */
