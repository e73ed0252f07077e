/*
 * wire_test.h - what the tests of tests/wire share.
 */
#ifndef RINGD_TEST_WIRE_H
#define RINGD_TEST_WIRE_H

#include <stdio.h>

#include "ringd.h"
#include "tests/harness/harness.h"

/* Connects to daemon idx of h, retrying until it accepts (it may still be
 * starting) or timeout_ms pass. Returns the client, or NULL with a message
 * in why. */
static inline ringd_client *wire_connect(harness *h, int idx, int timeout_ms, char *why,
                                         size_t len)
{
    int64_t deadline = harness_now_ms() + timeout_ms;
    ringd_client *c = NULL;
    while (ringd_connect(h->d[idx].socket, &c) < 0) {
        if (harness_now_ms() > deadline) {
            snprintf(why, len, "cannot connect to %s: %s", h->d[idx].name,
                     ringd_last_error(NULL));
            return NULL;
        }
        harness_sleep_ms(20);
    }
    return c;
}

#endif /* RINGD_TEST_WIRE_H */
