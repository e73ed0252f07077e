/*
 * net.c - small helpers for the daemon's TCP connections.
 */
#include "net.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>

void net_describe_addr(const struct sockaddr *sa, char *out, size_t len)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const void *)sa;
        inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
        snprintf(out, len, "%s:%d", ip, ntohs(in->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const void *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof ip);
        snprintf(out, len, "[%s]:%d", ip, ntohs(in6->sin6_port));
    } else {
        snprintf(out, len, "?");
    }
}

void net_tune_tcp(uv_tcp_t *tcp, uint32_t buffer_bytes)
{
    uv_tcp_nodelay(tcp, 1);
    if (buffer_bytes == 0) return;
    int size = (int)buffer_bytes;
    uv_send_buffer_size((uv_handle_t *)tcp, &size);
    size = (int)buffer_bytes;
    uv_recv_buffer_size((uv_handle_t *)tcp, &size);
}
