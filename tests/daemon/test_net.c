/*
 * test_net.c - net_parse_addr(): an IP literal and a port, "10.0.0.7:7701"
 * or "[::1]:7701", and nothing else.
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include "daemon/net.h"

static int port_of(const char *address)
{
    struct sockaddr_storage sa;
    if (net_parse_addr(address, &sa) < 0) return -1;
    return ntohs(sa.ss_family == AF_INET ? ((struct sockaddr_in *)&sa)->sin_port
                                         : ((struct sockaddr_in6 *)&sa)->sin6_port);
}

Test(net, an_ipv4_or_bracketed_ipv6_literal_and_a_port_parse)
{
    cr_assert_eq(port_of("127.0.0.1:7701"), 7701);
    cr_assert_eq(port_of("[::1]:1"), 1);
    cr_assert_eq(port_of("198.18.0.1:65535"), 65535);
}

Test(net, a_port_with_anything_but_digits_or_out_of_range_is_refused)
{
    const char *bad[] = {"127.0.0.1:9100x",
                         "127.0.0.1: 9100",
                         "127.0.0.1:+9100",
                         "127.0.0.1:-1",
                         "127.0.0.1:0",
                         "127.0.0.1:65536",
                         "127.0.0.1:",
                         "127.0.0.1",
                         "[::1]:77a",
                         "[::1]7701",
                         "127.0.0.1:99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_expect_eq(port_of(bad[i]), -1, "%s was taken as port %d", bad[i], port_of(bad[i]));
}

Test(net, a_name_is_not_an_address)
{
    cr_assert_eq(port_of("localhost:7701"), -1);
    cr_assert_eq(port_of("[localhost]:7701"), -1);
}
