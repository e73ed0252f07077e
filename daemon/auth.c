/*
 * auth.c - the cluster key and the links' challenge-response, on libcrypto.
 */
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>
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

/* ---- Frame protection ---- */

const char *auth_cipher_name(auth_cipher c)
{
    switch (c) {
    case AUTH_MAC:
        return "none";
    case AUTH_AES_256_GCM:
        return "aes-256-gcm";
    case AUTH_CHACHA20_POLY1305:
        return "chacha20-poly1305";
    }
    return "?";
}

int auth_frames_init(auth_frames *f)
{
    memset(f, 0, sizeof *f);
    f->out.ctx = EVP_CIPHER_CTX_new();
    f->in.ctx = EVP_CIPHER_CTX_new();
    if (f->out.ctx && f->in.ctx) return 0;
    auth_frames_free(f);
    return RINGD_ENOMEM;
}

void auth_frames_free(auth_frames *f)
{
    EVP_CIPHER_CTX_free(f->out.ctx);
    EVP_CIPHER_CTX_free(f->in.ctx);
    f->out.ctx = f->in.ctx = NULL;
}

static int hkdf(const auth_key *k, const uint8_t *salt, size_t saltlen, const uint8_t *info,
                size_t infolen, uint8_t *out, size_t outlen)
{
    EVP_PKEY_CTX *pc = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, NULL);
    int ok = pc && EVP_PKEY_derive_init(pc) > 0 &&
             EVP_PKEY_CTX_set_hkdf_md(pc, EVP_sha256()) > 0 &&
             EVP_PKEY_CTX_set1_hkdf_salt(pc, salt, (int)saltlen) > 0 &&
             EVP_PKEY_CTX_set1_hkdf_key(pc, k->bytes, (int)k->len) > 0 &&
             EVP_PKEY_CTX_add1_hkdf_info(pc, info, (int)infolen) > 0 &&
             EVP_PKEY_derive(pc, out, &outlen) > 0;
    EVP_PKEY_CTX_free(pc);
    return ok ? 0 : RINGD_EIO;
}

static int key_dir(auth_dir *d, auth_cipher c, const uint8_t key[AUTH_LINK_KEY], int sending)
{
    const EVP_CIPHER *ci = c == AUTH_CHACHA20_POLY1305 ? EVP_chacha20_poly1305() : EVP_aes_256_gcm();
    d->seq = 0;
    d->encrypt = c != AUTH_MAC;
    d->sending = sending;
    d->broken = 0;
    if (EVP_CipherInit_ex(d->ctx, ci, NULL, key, NULL, sending) != 1) return RINGD_EIO;
    return 0;
}

int auth_frames_key(auth_frames *f, const auth_key *k, const auth_link *link, auth_cipher c,
                    auth_role self)
{
    static const char label[] = "ringd frame keys, peer protocol 3";
    uint8_t salt[2 * FRAME_NONCE_SIZE], info[sizeof label + 4 * 4 + 1 + 256];
    uint8_t keys[2 * AUTH_LINK_KEY];
    size_t n = 0;
    memcpy(salt, link->connector_nonce, FRAME_NONCE_SIZE);
    memcpy(salt + FRAME_NONCE_SIZE, link->acceptor_nonce, FRAME_NONCE_SIZE);
    memcpy(info, label, sizeof label), n += sizeof label; /* with its NUL */
    put_u32(info + n, link->connector), n += 4;
    put_u32(info + n, link->acceptor), n += 4;
    put_u32(info + n, link->connector_epoch), n += 4;
    put_u32(info + n, link->acceptor_epoch), n += 4;
    info[n++] = (uint8_t)c;
    size_t cl = strnlen(link->cluster, 255);
    memcpy(info + n, link->cluster, cl), n += cl;
    int rc = hkdf(k, salt, sizeof salt, info, n, keys, sizeof keys);
    /* The first key protects what the connector sends, the second what the
     * acceptor sends. */
    const uint8_t *mine = keys, *theirs = keys + AUTH_LINK_KEY;
    if (self == AUTH_ACCEPTOR) mine = keys + AUTH_LINK_KEY, theirs = keys;
    if (rc == 0) rc = key_dir(&f->out, c, mine, 1);
    if (rc == 0) rc = key_dir(&f->in, c, theirs, 0);
    OPENSSL_cleanse(keys, sizeof keys);
    return rc;
}

/* The nonce of a direction's next tag: its sequence number, 96 bits. */
static void next_nonce(auth_dir *d, uint8_t iv[12])
{
    memset(iv, 0, 4);
    put_u64(iv + 4, d->seq++);
}

int auth_seal(auth_dir *d, const uint8_t *aad, size_t aadlen, const uint8_t *in, uint8_t *out,
              size_t n, uint8_t tag[AUTH_TAG_SIZE])
{
    EVP_CIPHER_CTX *ctx = d->ctx;
    uint8_t iv[12];
    int len, ok;
    next_nonce(d, iv);
    ok = EVP_CipherInit_ex(ctx, NULL, NULL, NULL, iv, 1) == 1;
    if (ok && aadlen) ok = EVP_CipherUpdate(ctx, NULL, &len, aad, (int)aadlen) == 1;
    /* Without out, the bytes are authenticated only; GCM's and Poly1305's
     * AAD is the place for that. */
    if (ok && n) ok = EVP_CipherUpdate(ctx, out, &len, in, (int)n) == 1;
    if (ok) ok = EVP_CipherFinal_ex(ctx, iv, &len) == 1;
    if (ok) ok = EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, AUTH_TAG_SIZE, tag) == 1;
    if (ok) return 0;
    RAND_bytes(tag, AUTH_TAG_SIZE); /* a tag no check accepts */
    return RINGD_EIO;
}

void auth_open_begin(auth_dir *d)
{
    uint8_t iv[12];
    next_nonce(d, iv);
    d->broken = EVP_CipherInit_ex(d->ctx, NULL, NULL, NULL, iv, 0) != 1;
}

void auth_open_aad(auth_dir *d, const uint8_t *p, size_t n)
{
    int len;
    if (!d->broken && n) d->broken = EVP_CipherUpdate(d->ctx, NULL, &len, p, (int)n) != 1;
}

void auth_open_payload(auth_dir *d, uint8_t *p, size_t n)
{
    int len;
    if (d->broken || !n) return;
    d->broken = EVP_CipherUpdate(d->ctx, d->encrypt ? p : NULL, &len, p, (int)n) != 1;
}

int auth_open_end(auth_dir *d, const uint8_t tag[AUTH_TAG_SIZE])
{
    uint8_t t[AUTH_TAG_SIZE], last[16];
    int len;
    memcpy(t, tag, sizeof t);
    if (d->broken) return 0;
    if (EVP_CIPHER_CTX_ctrl(d->ctx, EVP_CTRL_AEAD_SET_TAG, AUTH_TAG_SIZE, t) != 1) return 0;
    return EVP_CipherFinal_ex(d->ctx, last, &len) == 1;
}
