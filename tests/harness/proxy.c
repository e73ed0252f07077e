/*
 * proxy.c - the bit-flipping TCP proxy of the fault tests; see proxy.h.
 */
#include "proxy.h"

#include "harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* The frame parser of the forward direction. */
typedef struct {
    uint8_t hdr[12];
    size_t hdr_got;
    uint64_t left;   /* body bytes of the current frame still to come */
    uint64_t pos;    /* body bytes of it seen */
    int64_t flip_at; /* body offset to flip, or -1 */
} stream;

static void corrupt(harness_proxy *p, stream *st, uint8_t *buf, size_t n)
{
    for (size_t i = 0; i < n;) {
        if (st->left == 0) {
            st->hdr[st->hdr_got++] = buf[i++];
            if (st->hdr_got == sizeof st->hdr) {
                st->hdr_got = 0;
                st->left = (uint64_t)st->hdr[8] << 24 | (uint64_t)st->hdr[9] << 16 |
                           (uint64_t)st->hdr[10] << 8 | st->hdr[11];
                st->pos = 0;
                /* DATA (type 3) with a payload past its 64-byte fixed part. */
                st->flip_at = st->hdr[5] == 3 && st->left > 64 + 100 && atomic_load(&p->armed)
                                  ? 64 + 100
                                  : -1;
            }
            continue;
        }
        size_t take = n - i < st->left ? n - i : (size_t)st->left;
        if (st->flip_at >= 0 && (uint64_t)st->flip_at >= st->pos &&
            (uint64_t)st->flip_at < st->pos + take) {
            buf[i + (size_t)((uint64_t)st->flip_at - st->pos)] ^= 0x10;
            atomic_store(&p->armed, 0);
            atomic_fetch_add(&p->flipped, 1);
            st->flip_at = -1;
        }
        st->pos += take;
        st->left -= take;
        i += take;
    }
}

static void relay(harness_proxy *p, int from_left)
{
    int right = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(p->target)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(right, (struct sockaddr *)&sa, sizeof sa) < 0) {
        close(right);
        return;
    }
    stream st = {.flip_at = -1};
    static uint8_t buf[1 << 16];
    struct pollfd fds[2] = {{.fd = from_left, .events = POLLIN}, {.fd = right, .events = POLLIN}};
    while (!atomic_load(&p->stop)) {
        if (poll(fds, 2, 100) <= 0) continue;
        if (fds[0].revents) {
            ssize_t n = read(from_left, buf, sizeof buf);
            if (n <= 0) break;
            corrupt(p, &st, buf, (size_t)n);
            if (harness_write_all(right, buf, (size_t)n) < 0) break;
        }
        if (fds[1].revents) {
            ssize_t n = read(right, buf, sizeof buf);
            if (n <= 0 || harness_write_all(from_left, buf, (size_t)n) < 0) break;
        }
    }
    close(right);
}

static void *proxy_main(void *arg)
{
    harness_proxy *p = arg;
    while (!atomic_load(&p->stop)) {
        struct pollfd pf = {.fd = p->listen_fd, .events = POLLIN};
        if (poll(&pf, 1, 100) <= 0) continue;
        int c = accept(p->listen_fd, NULL, NULL);
        if (c < 0) continue;
        relay(p, c);
        close(c);
    }
    return NULL;
}

int harness_proxy_start(harness_proxy *p, uint16_t target)
{
    memset(p, 0, sizeof *p);
    p->target = target;
    p->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof sa;
    if (p->listen_fd < 0 || bind(p->listen_fd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
        listen(p->listen_fd, 4) < 0 || getsockname(p->listen_fd, (struct sockaddr *)&sa, &sl) < 0) {
        if (p->listen_fd >= 0) close(p->listen_fd);
        return -1;
    }
    p->port = ntohs(sa.sin_port);
    if (pthread_create(&p->tid, NULL, proxy_main, p) != 0) {
        close(p->listen_fd);
        return -1;
    }
    return 0;
}

void harness_proxy_arm(harness_proxy *p)
{
    atomic_store(&p->armed, 1);
}

int harness_proxy_flipped(harness_proxy *p)
{
    return atomic_load(&p->flipped);
}

void harness_proxy_stop(harness_proxy *p)
{
    atomic_store(&p->stop, 1);
    pthread_join(p->tid, NULL);
    close(p->listen_fd);
}
