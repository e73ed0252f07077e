/*
 * net.c - small helpers for the daemon's TCP connections.
 */
#include "net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

int net_parse_addr(const char *address, struct sockaddr_storage *sa)
{
    char node[128];
    const char *colon;
    if (address[0] == '[') {
        const char *close = strchr(address, ']');
        if (!close || close[1] != ':' || (size_t)(close - address - 1) >= sizeof node) return -1;
        memcpy(node, address + 1, (size_t)(close - address - 1));
        node[close - address - 1] = '\0';
        colon = close + 1;
    } else {
        colon = strrchr(address, ':');
        if (!colon || (size_t)(colon - address) >= sizeof node) return -1;
        memcpy(node, address, (size_t)(colon - address));
        node[colon - address] = '\0';
    }
    /* Digits and nothing else: "7701x" or "+7701" is no port. */
    const char *digits = colon + 1;
    char *end = (char *)digits;
    errno = 0;
    long port = digits[0] >= '0' && digits[0] <= '9' ? strtol(digits, &end, 10) : 0;
    if (port < 1 || port > 65535 || errno || *end) return -1;
    if (uv_ip4_addr(node, (int)port, (struct sockaddr_in *)sa) == 0) return 0;
    if (uv_ip6_addr(node, (int)port, (struct sockaddr_in6 *)sa) == 0) return 0;
    return -1;
}

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

static void set_congestion(uv_tcp_t *tcp, const char *name)
{
    static log_ratelimit rl;
    uv_os_fd_t fd;
    if (!name || uv_fileno((uv_handle_t *)tcp, &fd) != 0) return;
    if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, (socklen_t)strlen(name)) == 0) return;
    int err = errno;
    log_limited(&rl, uv_now(tcp->loop), 3600 * 1000, LOG_WARN,
                "cannot use TCP congestion control %s on the ring links (%s)%s; keeping the "
                "system's, or set congestion_control: system",
                name, strerror(err),
                err == EPERM ? ": add it to net.ipv4.tcp_allowed_congestion_control" : "");
}

void net_tune_tcp(uv_tcp_t *tcp, const cfg *c)
{
    uint32_t buffer_bytes = c->socket_buffer_bytes;
    uv_tcp_nodelay(tcp, 1);
    set_congestion(tcp, c->congestion_control);
    if (buffer_bytes == 0) return;
    int size = (int)buffer_bytes;
    uv_send_buffer_size((uv_handle_t *)tcp, &size);
    size = (int)buffer_bytes;
    uv_recv_buffer_size((uv_handle_t *)tcp, &size);
}
