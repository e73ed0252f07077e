/*
 * net.h - small helpers for the daemon's TCP connections (ring links and
 * the star baseline).
 */
#ifndef RINGD_NET_H
#define RINGD_NET_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

/* "10.0.0.7:7701" or "[::1]:7701" ("?" for another family). */
void net_describe_addr(const struct sockaddr *sa, char *out, size_t len);

/* TCP_NODELAY (segments are pipelined: Nagle would only add latency) and,
 * unless 0, SO_SNDBUF and SO_RCVBUF of buffer_bytes (a fast link stays busy
 * across the loop's scheduling gaps). */
void net_tune_tcp(uv_tcp_t *tcp, uint32_t buffer_bytes);

#endif /* RINGD_NET_H */
