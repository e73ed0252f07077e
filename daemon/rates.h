/*
 * rates.h - bytes per second over the last few seconds, from samples of
 * ever-growing counters taken about once a second. Pure: no loop, no clock.
 */
#ifndef RINGD_RATES_H
#define RINGD_RATES_H

#include <stdint.h>

#define RATES_SAMPLES 6 /* the window: the last 5 intervals */

typedef struct {
    uint64_t t_ms, in, out;
} rates_sample;

typedef struct {
    rates_sample s[RATES_SAMPLES]; /* ring buffer, the newest at (n-1) % RATES_SAMPLES */
    uint64_t n;                    /* samples added since the last restart */
} rates;

/* Adds a sample of the counters at now_ms. Counters that went back (a new
 * ring after a reload starts from 0) restart the window. */
void rates_add(rates *r, uint64_t now_ms, uint64_t in, uint64_t out);

/* Bytes per second between the oldest and newest sample of the window; 0
 * until there are two samples. */
void rates_get(const rates *r, uint64_t *in_per_s, uint64_t *out_per_s);

#endif /* RINGD_RATES_H */
