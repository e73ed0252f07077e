/*
 * metrics.h - an optional Prometheus endpoint: a minimal HTTP/1.0 server on
 * the loop answering GET /metrics in the text exposition format 0.0.4.
 *
 * The server does not know the ring: on each scrape it asks its collect
 * callback for a snapshot of the figures and renders that.
 */
#ifndef RINGD_METRICS_H
#define RINGD_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "status.h"

typedef void (*metrics_collect_cb)(void *data, status_snapshot *out);

typedef struct metrics metrics;

/* Listens on address ("127.0.0.1:9711", "[::1]:9711"). Returns 0, or a
 * negative RINGD_E* code with a message in err. */
int metrics_new(metrics **out, uv_loop_t *loop, const char *address, metrics_collect_cb collect,
                void *data, char *err, size_t errlen);

/* Stops listening and closes every connection; done(data) runs when m has
 * been freed. */
void metrics_close(metrics *m, void (*done)(void *), void *data);

/* Renders s as Prometheus text into buf. Returns the length, or -1 if cap
 * is too small. */
int metrics_render(const status_snapshot *s, char *buf, size_t cap);

#endif /* RINGD_METRICS_H */
