/*
 * proxy.h - a TCP proxy for tests that sits on one link between two daemons
 * and, when armed, flips one bit in the payload of the next DATA frame
 * going forward: what a faulty NIC or switch could do, and TCP's 16-bit
 * checksum may miss. One connection is relayed at a time.
 *
 *     harness_proxy p;
 *     harness_proxy_start(&p, target_port);   // listens on 127.0.0.1:p.port
 *     ... point the daemon's config at p.port ...
 *     harness_proxy_arm(&p);                  // the next DATA payload is hit
 *     harness_proxy_stop(&p);
 */
#ifndef RINGD_TEST_PROXY_H
#define RINGD_TEST_PROXY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

typedef struct {
    int listen_fd;
    uint16_t port;   /* where it listens, on 127.0.0.1 */
    uint16_t target; /* where it connects, on 127.0.0.1 */
    atomic_int armed, flipped, stop;
    pthread_t tid;
} harness_proxy;

/* Listens on a free port and relays to target. Returns 0 or -1. */
int harness_proxy_start(harness_proxy *p, uint16_t target);

/* Flips one bit of the next DATA payload of over 100 bytes. */
void harness_proxy_arm(harness_proxy *p);

/* Bits flipped so far. */
int harness_proxy_flipped(harness_proxy *p);

void harness_proxy_stop(harness_proxy *p);

#endif /* RINGD_TEST_PROXY_H */
