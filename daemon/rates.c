/*
 * rates.c - bytes per second over a short window of samples.
 */
#include "rates.h"

void rates_add(rates *r, uint64_t now_ms, uint64_t in, uint64_t out)
{
    if (r->n > 0) {
        const rates_sample *last = &r->s[(r->n - 1) % RATES_SAMPLES];
        if (in < last->in || out < last->out || now_ms < last->t_ms) r->n = 0;
    }
    r->s[r->n++ % RATES_SAMPLES] = (rates_sample){now_ms, in, out};
}

void rates_get(const rates *r, uint64_t *in_per_s, uint64_t *out_per_s)
{
    *in_per_s = *out_per_s = 0;
    if (r->n < 2) return;
    const rates_sample *newest = &r->s[(r->n - 1) % RATES_SAMPLES];
    const rates_sample *oldest = &r->s[(r->n < RATES_SAMPLES ? 0 : r->n) % RATES_SAMPLES];
    uint64_t ms = newest->t_ms - oldest->t_ms;
    if (ms == 0) return;
    *in_per_s = (newest->in - oldest->in) * 1000 / ms;
    *out_per_s = (newest->out - oldest->out) * 1000 / ms;
}
