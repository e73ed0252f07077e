/*
 * auth.c - the cluster key and the links' challenge-response, on libcrypto.
 */
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proto/bytes.h"
#include "ringd.h"

int auth_load_key(const char *path, auth_key *out, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        snprintf(err, errlen, "secret_file %s: cannot open: %s", path, strerror(errno));
        return RINGD_EIO;
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "secret_file %s: not a regular file", path);
        close(fd);
        return RINGD_EINVAL;
    }
    if (st.st_mode & (S_IRWXG | S_IRWXO)) {
        snprintf(err, errlen,
                 "secret_file %s: group or others may access it (mode %03o); "
                 "make it readable by its owner only: chmod 600 %s",
                 path, (unsigned)(st.st_mode & 0777), path);
        close(fd);
        return RINGD_EAUTH;
    }
    uint8_t buf[AUTH_MAX_KEY + 2];
    size_t len = 0;
    ssize_t n;
    while (len < sizeof buf && (n = read(fd, buf + len, sizeof buf - len)) != 0) {
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            snprintf(err, errlen, "secret_file %s: cannot read: %s", path, strerror(errno));
            close(fd);
            return RINGD_EIO;
        }
        len += (size_t)n;
    }
    close(fd);
    if (len > 0 && buf[len - 1] == '\n') len--;
    if (len > 0 && buf[len - 1] == '\r') len--;
    if (len < AUTH_MIN_KEY || len > AUTH_MAX_KEY) {
        snprintf(err, errlen,
                 "secret_file %s: the key has %zu bytes, expected %d..%d "
                 "(make one with: head -c 32 /dev/urandom | base64 > %s)",
                 path, len, AUTH_MIN_KEY, AUTH_MAX_KEY, path);
        OPENSSL_cleanse(buf, sizeof buf);
        return RINGD_EINVAL;
    }
    memcpy(out->bytes, buf, len);
    out->len = len;
    OPENSSL_cleanse(buf, sizeof buf);
    return 0;
}

int auth_nonce(uint8_t nonce[FRAME_NONCE_SIZE])
{
    return RAND_bytes(nonce, FRAME_NONCE_SIZE) == 1 ? 0 : RINGD_EIO;
}

int auth_answer(const auth_key *k, auth_role role, const auth_link *link,
                uint8_t mac[FRAME_MAC_SIZE])
{
    /* Fixed-size fields first, then the cluster name, so no two links
     * serialise alike. */
    uint8_t msg[16 + 4 * 4 + 2 * FRAME_NONCE_SIZE + 256];
    size_t n = 0;
    memcpy(msg, role == AUTH_ACCEPTOR ? "ringd-acceptor\0\0" : "ringd-connector\0", 16);
    n += 16;
    put_u32(msg + n, link->connector), n += 4;
    put_u32(msg + n, link->acceptor), n += 4;
    put_u32(msg + n, link->connector_epoch), n += 4;
    put_u32(msg + n, link->acceptor_epoch), n += 4;
    memcpy(msg + n, link->connector_nonce, FRAME_NONCE_SIZE), n += FRAME_NONCE_SIZE;
    memcpy(msg + n, link->acceptor_nonce, FRAME_NONCE_SIZE), n += FRAME_NONCE_SIZE;
    size_t cl = strnlen(link->cluster, 255);
    msg[n++] = (uint8_t)cl;
    memcpy(msg + n, link->cluster, cl), n += cl;
    unsigned int len = FRAME_MAC_SIZE;
    if (HMAC(EVP_sha256(), k->bytes, (int)k->len, msg, n, mac, &len) && len == FRAME_MAC_SIZE)
        return 0;
    /* An answer that proves nothing, never one a check would accept. */
    RAND_bytes(mac, FRAME_MAC_SIZE);
    return RINGD_EIO;
}

int auth_check(const auth_key *k, auth_role role, const auth_link *link,
               const uint8_t mac[FRAME_MAC_SIZE])
{
    uint8_t want[FRAME_MAC_SIZE];
    if (auth_answer(k, role, link, want) < 0) return 0; /* fail closed */
    return CRYPTO_memcmp(want, mac, FRAME_MAC_SIZE) == 0;
}
