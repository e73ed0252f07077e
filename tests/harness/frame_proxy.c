/*
 * frame_proxy.c - the frame-dropping TCP proxy of the tests; see
 * frame_proxy.h.
 */
#include "frame_proxy.h"

#include "harness.h"
#include "proto/frame.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Room for the largest frame: a DATA body and its two tags. */
#define FRAME_CAP (FRAME_HEADER_SIZE + FRAME_MAX_BODY + 2 * FRAME_TAG_SIZE)

static uint32_t get32(const uint8_t *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* Reads exactly n bytes, or -1 when the peer closes or the proxy stops. */
static int read_full(harness_frame_proxy *p, int fd, uint8_t *buf, size_t n)
{
    size_t got = 0;
    while (got < n && !atomic_load(&p->stop)) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, 100) <= 0) continue;
        ssize_t r = read(fd, buf + got, n - got);
        if (r <= 0) return -1;
        got += (size_t)r;
    }
    return got == n ? 0 : -1;
}

static void relay(harness_frame_proxy *p, int left)
{
    int right = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(p->target)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (right < 0 || connect(right, (struct sockaddr *)&sa, sizeof sa) < 0) {
        if (right >= 0) close(right);
        return;
    }
    atomic_fetch_add(&p->connections, 1);
    uint8_t back[1 << 16];
    while (!atomic_load(&p->stop)) {
        struct pollfd fds[2] = {{.fd = left, .events = POLLIN}, {.fd = right, .events = POLLIN}};
        if (poll(fds, 2, 100) <= 0) continue;
        if (fds[1].revents) {
            ssize_t n = read(right, back, sizeof back);
            if (n <= 0 || harness_write_all(left, back, (size_t)n) < 0) break;
        }
        if (!fds[0].revents) continue;
        uint8_t *f = p->frame;
        if (read_full(p, left, f, FRAME_HEADER_SIZE) < 0) break;
        uint32_t body = get32(f + 8);
        uint16_t flags = (uint16_t)(f[6] << 8 | f[7]);
        int data = f[5] == FRAME_DATA;
        size_t tags = (flags & FRAME_FLAG_TAG) ? (data ? 2u : 1u) * FRAME_TAG_SIZE : 0;
        size_t len = FRAME_HEADER_SIZE + body + tags;
        if (body > FRAME_MAX_BODY ||
            read_full(p, left, f + FRAME_HEADER_SIZE, len - FRAME_HEADER_SIZE) < 0)
            break;
        atomic_fetch_add(&p->frames, 1);
        if (p->fn && p->fn(p->arg, f, len) == HARNESS_FRAME_DROP) {
            atomic_fetch_add(&p->dropped, 1);
            continue;
        }
        if (harness_write_all(right, f, len) < 0) break;
    }
    close(right);
}

static void *proxy_main(void *arg)
{
    harness_frame_proxy *p = arg;
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

int harness_frame_proxy_start(harness_frame_proxy *p, uint16_t target, harness_frame_fn fn,
                              void *arg)
{
    memset(p, 0, sizeof *p);
    p->target = target;
    p->fn = fn;
    p->arg = arg;
    p->frame = malloc(FRAME_CAP);
    p->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof sa;
    if (!p->frame || p->listen_fd < 0 ||
        bind(p->listen_fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(p->listen_fd, 4) < 0 ||
        getsockname(p->listen_fd, (struct sockaddr *)&sa, &sl) < 0)
        goto fail;
    p->port = ntohs(sa.sin_port);
    if (pthread_create(&p->tid, NULL, proxy_main, p) != 0) goto fail;
    return 0;
fail:
    if (p->listen_fd >= 0) close(p->listen_fd);
    free(p->frame);
    p->frame = NULL;
    return -1;
}

void harness_frame_proxy_stop(harness_frame_proxy *p)
{
    if (!p->frame) return;
    atomic_store(&p->stop, 1);
    pthread_join(p->tid, NULL);
    close(p->listen_fd);
    free(p->frame);
    p->frame = NULL;
}
