/*
 * frame_proxy.h - a TCP proxy for tests that sits on one link between two
 * daemons and reads the frames going forward (connector -> acceptor) one
 * whole frame at a time, so that a test can drop any of them: what a
 * network that loses one message would do, without breaking the TCP
 * stream. The frames coming back pass as bytes. One connection is relayed
 * at a time; when the daemon reconnects, the next one is.
 *
 *     static int drop_confirm(void *arg, uint8_t *f, size_t len) {
 *         return f[5] == FRAME_EPOCH && f[12 + 8] == EPOCH_CONFIRM
 *                    ? HARNESS_FRAME_DROP : HARNESS_FRAME_PASS;
 *     }
 *     harness_frame_proxy p;
 *     harness_frame_proxy_start(&p, target_port, drop_confirm, arg);
 *     harness_start_through(&h, 0, p.port);   // h0's right link goes to p
 *     harness_frame_proxy_stop(&p);
 *
 * Dropping a frame keeps the stream consistent only on a link without a
 * cluster key: a keyed link tags every frame over a sequence number, and
 * its receiver takes a dropped one for an attack.
 */
#ifndef RINGD_TEST_FRAME_PROXY_H
#define RINGD_TEST_FRAME_PROXY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define HARNESS_FRAME_PASS 0
#define HARNESS_FRAME_DROP 1

/* Decides what happens to one whole forward frame f of len bytes (the
 * 12-byte header, the body and any tags), which it may change in place (a
 * new length it may not). Runs on the proxy's thread: it must not use
 * Criterion assertions. */
typedef int (*harness_frame_fn)(void *arg, uint8_t *f, size_t len);

typedef struct {
    int listen_fd;
    uint16_t port;   /* where it listens, on 127.0.0.1 */
    uint16_t target; /* where it connects, on 127.0.0.1 */
    harness_frame_fn fn;
    void *arg;
    atomic_int stop;
    atomic_int frames, dropped; /* forward frames read, and dropped */
    atomic_int connections;     /* connections relayed so far */
    uint8_t *frame;             /* one frame read whole */
    pthread_t tid;
} harness_frame_proxy;

/* Listens on a free port and relays to target, asking fn (NULL: pass
 * everything) about every forward frame. Returns 0 or -1. */
int harness_frame_proxy_start(harness_frame_proxy *p, uint16_t target, harness_frame_fn fn,
                              void *arg);

/* Stops the thread and closes every socket. */
void harness_frame_proxy_stop(harness_frame_proxy *p);

#endif /* RINGD_TEST_FRAME_PROXY_H */
