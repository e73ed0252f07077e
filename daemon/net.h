/*
 * net.h - what the daemon's TCP connections share: the environment every
 * link and listener of one engine lives in, their counters, and small
 * helpers for addresses and sockets.
 */
#ifndef RINGD_NET_H
#define RINGD_NET_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "conn.h"

/* Counters of every link of one host, for status and metrics. */
typedef struct {
    uint64_t bytes_in, bytes_out; /* DATA payload bytes */
    uint64_t reconnects;          /* a connector's link re-established after being up */
    uint64_t breaks;              /* links lost (either end) */
    uint64_t auth_failures;       /* peers refused for a wrong or missing key */
    uint64_t checksum_errors;     /* DATA payloads with a bad CRC32C */
    uint64_t tag_errors;          /* keyed links: frames with a wrong tag */
} net_stats;

/* Where the links and the listener of one engine live; owned by the engine
 * and outliving them all. */
typedef struct {
    uv_loop_t *loop;
    const cfg *cfg;
    const hs_ctx *hs;
    lifetime *lt; /* the engine's: each link and listener holds it */
    net_stats *stats;
} net_env;

/* A literal "10.0.0.7:7701" or "[::1]:7701" into *sa (no name lookup): 0,
 * or -1 if it is not one. */
int net_parse_addr(const char *address, struct sockaddr_storage *sa);

/* "10.0.0.7:7701" or "[::1]:7701" ("?" for another family). */
void net_describe_addr(const struct sockaddr *sa, char *out, size_t len);

/* TCP_NODELAY (segments are pipelined: Nagle would only add latency);
 * unless 0, SO_SNDBUF and SO_RCVBUF of c->socket_buffer_bytes (a fast link
 * stays busy across the loop's scheduling gaps); and c->congestion_control
 * as TCP_CONGESTION, unless NULL. A congestion control that the kernel
 * refuses is logged (once an hour) and the system's is kept. */
void net_tune_tcp(uv_tcp_t *tcp, const cfg *c);

#endif /* RINGD_NET_H */
