/*
 * ringd_hop.c - the latency of one hop: a small frame from one host to its
 * neighbour, as a ring's links carry it.
 *
 *   ringd_hop --listen ADDR:PORT [--config FILE]
 *   ringd_hop --connect ADDR:PORT [--config FILE] [--size BYTES]
 *             [--warmup W] [--iters N]
 *
 * The listener echoes what arrives; the connector sends a PING frame (the
 * 12-byte header every peer frame starts with, padded to --size), waits
 * for it to come back, and does so W + N times. Both ends run a libuv loop
 * over TCP sockets tuned as the daemon tunes its links (net_tune_tcp():
 * TCP_NODELAY, socket_buffer and congestion_control from --config, the
 * daemons' ringd.yaml, or ringd's defaults), so what it measures is what a hop of the ring
 * costs below the daemon's own work. The connector prints the round trip's
 * median, minimum and 90th percentile over the N timed ones, and one hop:
 * half the median round trip.
 *
 * bench/run.sh --latency runs it between two hosts of the testbed and
 * reports the 8-byte allreduce as a multiple of its hop limit: 2(N-1) hops
 * plus the client's round trip to its daemon (the allreduce of a ring of
 * one host).
 *
 * Exit status: 0, 1 failure (message on stderr), 2 usage error.
 */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "config/config.h"
#include "daemon/net.h"
#include "proto/frame.h"

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

#define MAX_SIZE 65536
#define MAX_ITERS 1000000

static const char usage[] =
    "Usage: ringd_hop --listen ADDR:PORT [--config FILE]\n"
    "       ringd_hop --connect ADDR:PORT [--config FILE] [--size BYTES] [--warmup W]\n"
    "                 [--iters N]\n"
    "\n"
    "The round trip of a small frame over a TCP link tuned as ringd's (--config:\n"
    "the daemons' ringd.yaml, for socket_buffer and congestion_control).\n"
    "  --size BYTES   frame size, 12 (a PING frame) to 65536; default 12\n"
    "  --warmup W     untimed round trips first; default 1000\n"
    "  --iters N      timed round trips; default 20000\n";

/* One end of the link: the connector times, the listener echoes. */
typedef struct {
    uv_loop_t loop;
    uv_tcp_t server, tcp;
    uv_connect_t connect;
    cfg config;
    int timing; /* the connector */
    size_t size;
    long warmup, iters, done;
    uint8_t out[MAX_SIZE]; /* the frame sent (connector) or being echoed */
    uint8_t in[MAX_SIZE];  /* what has come in of the current round trip */
    size_t have;
    uint64_t sent_ns;
    uint64_t *rtt_ns;
    int failed;
} hop;

static void fail(hop *h, const char *what, int rc)
{
    fprintf(stderr, "ringd_hop: %s: %s\n", what, uv_strerror(rc));
    h->failed = 1;
    uv_stop(&h->loop);
}

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    hop *h = handle->data;
    /* Never more than the rest of this round trip's frame: the next one is
     * not sent before this one is whole. */
    *buf = uv_buf_init((char *)h->in + h->have, (unsigned)(h->size - h->have));
}

static void on_written(uv_write_t *w, int status)
{
    hop *h = w->handle->data;
    free(w);
    if (status < 0) fail(h, "write", status);
}

static void send_frame(hop *h, const uint8_t *frame)
{
    uv_write_t *w = malloc(sizeof *w);
    if (!w) {
        fail(h, "write", UV_ENOMEM);
        return;
    }
    uv_buf_t b = uv_buf_init((char *)frame, (unsigned)h->size);
    h->sent_ns = uv_hrtime();
    int rc = uv_write(w, (uv_stream_t *)&h->tcp, &b, 1, on_written);
    if (rc < 0) {
        free(w);
        fail(h, "write", rc);
    }
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    (void)buf;
    hop *h = s->data;
    if (n == UV_EOF && !h->timing) { /* the connector is done */
        uv_close((uv_handle_t *)&h->tcp, NULL);
        uv_close((uv_handle_t *)&h->server, NULL);
        return;
    }
    if (n < 0) {
        fail(h, "read", (int)n);
        return;
    }
    h->have += (size_t)n;
    if (h->have < h->size) return;
    h->have = 0;
    if (!h->timing) { /* echo it: the write is done before the next arrives */
        memcpy(h->out, h->in, h->size);
        send_frame(h, h->out);
        return;
    }
    uint64_t now = uv_hrtime();
    if (memcmp(h->in, h->out, h->size) != 0) {
        fprintf(stderr, "ringd_hop: round trip %ld came back changed\n", h->done);
        h->failed = 1;
        uv_stop(&h->loop);
        return;
    }
    if (h->done >= h->warmup) h->rtt_ns[h->done - h->warmup] = now - h->sent_ns;
    if (++h->done == h->warmup + h->iters) {
        uv_close((uv_handle_t *)&h->tcp, NULL);
        return;
    }
    send_frame(h, h->out);
}

static int start_reading(hop *h)
{
    h->tcp.data = h;
    net_tune_tcp(&h->tcp, &h->config);
    return uv_read_start((uv_stream_t *)&h->tcp, on_alloc, on_read);
}

static void on_connection(uv_stream_t *server, int status)
{
    hop *h = server->data;
    if (status < 0) {
        fail(h, "accept", status);
        return;
    }
    int rc = uv_tcp_init(&h->loop, &h->tcp);
    if (rc == 0) rc = uv_accept(server, (uv_stream_t *)&h->tcp);
    if (rc == 0) rc = start_reading(h);
    if (rc < 0) fail(h, "accept", rc);
    /* One connector: later ones wait in the backlog. */
}

static void on_connected(uv_connect_t *req, int status)
{
    hop *h = req->data;
    if (status < 0) {
        fail(h, "connect", status);
        return;
    }
    int rc = start_reading(h);
    if (rc < 0) {
        fail(h, "read", rc);
        return;
    }
    send_frame(h, h->out);
}

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    static hop h;
    const char *listen_at = NULL, *connect_to = NULL, *config = NULL;
    long size = FRAME_HEADER_SIZE;
    h.warmup = 1000;
    h.iters = 20000;
    static const struct option opts[] = {
        {"listen", required_argument, NULL, 'l'}, {"connect", required_argument, NULL, 'c'},
        {"config", required_argument, NULL, 'f'}, {"size", required_argument, NULL, 's'},
        {"warmup", required_argument, NULL, 'w'}, {"iters", required_argument, NULL, 'n'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        int bad = 0;
        switch (o) {
        case 'l':
            listen_at = optarg;
            break;
        case 'c':
            connect_to = optarg;
            break;
        case 'f':
            config = optarg;
            break;
        case 's':
            bad = parse_long(optarg, FRAME_HEADER_SIZE, MAX_SIZE, &size);
            break;
        case 'w':
            bad = parse_long(optarg, 0, MAX_ITERS, &h.warmup);
            break;
        case 'n':
            bad = parse_long(optarg, 1, MAX_ITERS, &h.iters);
            break;
        case 'h':
            fputs(usage, stdout);
            return EXIT_OK;
        default:
            bad = 1;
        }
        if (bad) {
            fprintf(stderr, "ringd_hop: bad value for --%s: '%s'\n%s", argv[optind - 1] + 2,
                    optarg ? optarg : "", usage);
            return EXIT_USAGE;
        }
    }
    if (optind != argc || !listen_at == !connect_to) {
        fputs("ringd_hop: give one of --listen and --connect\n", stderr);
        fputs(usage, stderr);
        return EXIT_USAGE;
    }
    struct sockaddr_storage addr;
    if (net_parse_addr(listen_at ? listen_at : connect_to, &addr) < 0) {
        fprintf(stderr, "ringd_hop: '%s': expected ADDR:PORT (IPv4, or [IPv6]:PORT)\n",
                listen_at ? listen_at : connect_to);
        return EXIT_USAGE;
    }
    /* Without --config, the daemon's defaults: those of a ring that sets
     * nothing but its one host. */
    static const char defaults[] =
        "cluster: hop\nhosts:\n  - name: a\n    address: 127.0.0.1:7701\n";
    char err[512];
    if (config
            ? cfg_load(config, &h.config, err, sizeof err)
            : cfg_parse("(defaults)", defaults, sizeof defaults - 1, &h.config, err, sizeof err)) {
        fprintf(stderr, "ringd_hop: %s\n", err);
        return EXIT_USAGE;
    }
    h.size = (size_t)size;
    h.timing = connect_to != NULL;
    /* A PING frame (a header, no body) at the front, padded to --size. */
    frame_encode_ping(h.out, sizeof h.out);
    for (size_t i = FRAME_HEADER_SIZE; i < h.size; i++)
        h.out[i] = (uint8_t)i;
    if (h.timing && !(h.rtt_ns = calloc((size_t)h.iters, sizeof *h.rtt_ns))) {
        fputs("ringd_hop: out of memory\n", stderr);
        return EXIT_FAIL;
    }

    int rc = uv_loop_init(&h.loop);
    if (rc < 0) {
        fprintf(stderr, "ringd_hop: uv_loop_init: %s\n", uv_strerror(rc));
        return EXIT_FAIL;
    }
    if (listen_at) {
        rc = uv_tcp_init(&h.loop, &h.server);
        h.server.data = &h;
        if (rc == 0) rc = uv_tcp_bind(&h.server, (const struct sockaddr *)&addr, 0);
        if (rc == 0) rc = uv_listen((uv_stream_t *)&h.server, 1, on_connection);
        if (rc < 0) {
            fprintf(stderr, "ringd_hop: listen on %s: %s\n", listen_at, uv_strerror(rc));
            return EXIT_FAIL;
        }
    } else {
        rc = uv_tcp_init(&h.loop, &h.tcp);
        h.connect.data = &h;
        if (rc == 0)
            rc = uv_tcp_connect(&h.connect, &h.tcp, (const struct sockaddr *)&addr, on_connected);
        if (rc < 0) {
            fprintf(stderr, "ringd_hop: connect to %s: %s\n", connect_to, uv_strerror(rc));
            return EXIT_FAIL;
        }
    }
    uv_run(&h.loop, UV_RUN_DEFAULT);
    if (h.failed) return EXIT_FAIL;
    if (h.timing) {
        qsort(h.rtt_ns, (size_t)h.iters, sizeof *h.rtt_ns, compare_u64);
        double med = (double)h.rtt_ns[h.iters / 2] / 1e3;
        printf("# round trip of a %zu-byte frame, %ld timed (%ld warm-up): median %.1f us, "
               "min %.1f us, p90 %.1f us\n",
               h.size, h.iters, h.warmup, med, (double)h.rtt_ns[0] / 1e3,
               (double)h.rtt_ns[h.iters * 9 / 10] / 1e3);
        printf("hop_us %.2f\n", med / 2);
        free(h.rtt_ns);
    }
    uv_loop_close(&h.loop);
    cfg_free(&h.config);
    return EXIT_OK;
}
