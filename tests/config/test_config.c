/*
 * test_config.c - the configuration file, as specified by
 * deploy/ringd.example.yaml: what it accepts, its defaults, and the exact
 * message for each way of getting it wrong.
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"

#define HOST_A "hosts:\n  - name: a\n    address: 10.0.0.1:7701\n"
#define MINIMAL "cluster: demo\n" HOST_A

static char err[512];

/* Loads tests/config/bad/<name> and expects the failure message
 * "<its path>:<where_what>". */
static void expect_file_rejected(const char *name, const char *where_what) {
    char path[PATH_MAX], expected[PATH_MAX + 512];
    cfg c;
    snprintf(path, sizeof path, "%s/bad/%s", RINGD_TEST_DATA, name);
    snprintf(expected, sizeof expected, "%s:%s", path, where_what);
    cr_assert_eq(cfg_load(path, &c, err, sizeof err), -1, "%s was accepted", name);
    cr_assert_str_eq(err, expected);
}

/* Parses yaml, which claims to be "t.yaml", and expects message "t.yaml:<where_what>". */
static void expect_rejected(const char *yaml, const char *where_what) {
    char expected[512];
    cfg c;
    snprintf(expected, sizeof expected, "t.yaml:%s", where_what);
    cr_assert_eq(cfg_parse("t.yaml", yaml, strlen(yaml), &c, err, sizeof err), -1,
                 "accepted:\n%s", yaml);
    cr_assert_str_eq(err, expected);
    cr_assert_null(c.hosts, "a failed parse leaves nothing to free");
    cr_assert_null(c.path);
}

static cfg parse_ok(const char *yaml) {
    cfg c;
    int rc = cfg_parse("t.yaml", yaml, strlen(yaml), &c, err, sizeof err);
    cr_assert_eq(rc, 0, "rejected: %s", err);
    return c;
}

/* ---- The example file ------------------------------------------------- */

Test(config, example_file_parses_with_the_documented_values) {
    cfg c;
    cr_assert_eq(cfg_load(RINGD_SOURCE_DIR "/deploy/ringd.example.yaml", &c, err, sizeof err), 0,
                 "%s", err);
    cr_assert_str_eq(c.cluster, "demo");
    cr_assert_str_eq(c.socket, "/run/ringd/ringd.sock");
    cr_assert_eq(c.local_clients, 1);
    cr_assert_eq(c.n_hosts, 4);
    const char *names[] = {"a", "b", "c", "d"};
    for (size_t i = 0; i < 4; i++) {
        char address[32], sock[32];
        snprintf(address, sizeof address, "127.0.0.1:%zu", 7701 + i);
        snprintf(sock, sizeof sock, "/tmp/ringd-%s.sock", names[i]);
        cr_assert_str_eq(c.hosts[i].name, names[i]);
        cr_assert_str_eq(c.hosts[i].address, address);
        cr_assert_str_eq(c.hosts[i].node, "127.0.0.1");
        cr_assert_eq(c.hosts[i].port, 7701 + i);
        cr_assert_str_eq(c.hosts[i].socket, sock);
        cr_assert_eq(c.hosts[i].local_clients, 1);
    }
    cr_assert_eq(c.segment_bytes, 256 * 1024);
    cr_assert_eq(c.max_buffer_bytes, 4ull << 30);
    cr_assert_eq(c.collective_timeout_ms, 60000);
    cr_assert_eq(c.connect_timeout_ms, 5000);
    cr_assert_eq(c.backoff_initial_ms, 100);
    cr_assert_eq(c.backoff_max_ms, 5000);
    cr_assert_eq(c.socket_buffer_bytes, 4 << 20);
    cr_assert_eq(c.fusion_threshold_bytes, 4 << 20);
    cr_assert_eq(c.fusion_max, 32);
    cr_assert_eq(c.log_level, CFG_LOG_INFO);
    cr_assert_eq(c.algorithm, CFG_ALG_RING);
    cr_assert_null(c.star_root);
    cr_assert_eq(c.star_root_index, 0);
    cr_assert_eq(c.heartbeat_interval_ms, 1000);
    cr_assert_eq(c.heartbeat_timeout_ms, 5000);
    cr_assert_null(c.secret_file);
    cr_assert(c.checksum);
    cfg_free(&c);
}

Test(config, never_fails_badly_on_any_truncation_of_the_example) {
    FILE *f = fopen(RINGD_SOURCE_DIR "/deploy/ringd.example.yaml", "rb");
    cr_assert_not_null(f);
    static char text[65536];
    size_t len = fread(text, 1, sizeof text, f);
    fclose(f);
    cr_assert_lt(len, sizeof text, "the example outgrew this test's buffer");
    for (size_t n = 0; n <= len; n++) {
        cfg c;
        if (cfg_parse("t.yaml", text, n, &c, err, sizeof err) == 0)
            cfg_free(&c);
        else
            cr_assert(strncmp(err, "t.yaml:", 7) == 0 && !strchr(err, '\n'), "%zu: %s", n, err);
    }
}

/* ---- Defaults and inheritance ----------------------------------------- */

Test(config, applies_defaults_when_optional_keys_are_absent) {
    cfg c = parse_ok(MINIMAL);
    cr_assert_str_eq(c.socket, "/run/ringd/ringd.sock");
    cr_assert_eq(c.local_clients, 1);
    cr_assert_eq(c.segment_bytes, 256 * 1024);
    cr_assert_eq(c.max_buffer_bytes, 4ull << 30);
    cr_assert_eq(c.collective_timeout_ms, 60000);
    cr_assert_eq(c.connect_timeout_ms, 5000);
    cr_assert_eq(c.backoff_initial_ms, 100);
    cr_assert_eq(c.backoff_max_ms, 5000);
    cr_assert_eq(c.socket_buffer_bytes, 4 << 20);
    cr_assert_eq(c.log_level, CFG_LOG_INFO);
    cr_assert_str_eq(c.path, "t.yaml");
    cfg_free(&c);
}

Test(config, hosts_inherit_the_top_level_socket_and_local_clients) {
    /* The top-level keys may come after the hosts. */
    cfg c = parse_ok(MINIMAL "socket: /tmp/r.sock\nlocal_clients: 8\n");
    cr_assert_str_eq(c.hosts[0].socket, "/tmp/r.sock");
    cr_assert_eq(c.hosts[0].local_clients, 8);
    cfg_free(&c);
}

Test(config, host_socket_and_local_clients_override_the_top_level_ones) {
    cfg c = parse_ok("cluster: demo\nsocket: /tmp/r.sock\nlocal_clients: 8\nhosts:\n"
                     "  - {name: a, address: 10.0.0.1:7701, socket: /tmp/a.sock, local_clients: 2}\n"
                     "  - {name: b, address: 10.0.0.2:7701}\n");
    cr_assert_str_eq(c.hosts[0].socket, "/tmp/a.sock");
    cr_assert_eq(c.hosts[0].local_clients, 2);
    cr_assert_str_eq(c.hosts[1].socket, "/tmp/r.sock");
    cr_assert_eq(c.hosts[1].local_clients, 8);
    cfg_free(&c);
}

Test(config, allows_two_hosts_with_the_same_node_and_socket) {
    cfg c = parse_ok("cluster: demo\nhosts:\n  - {name: a, address: 127.0.0.1:7701}\n"
                     "  - {name: b, address: 127.0.0.1:7702}\n");
    cr_assert_str_eq(c.hosts[0].socket, c.hosts[1].socket);
    cfg_free(&c);
}

Test(config, records_where_each_host_entry_starts) {
    cfg c = parse_ok("cluster: demo\nhosts:\n  - name: a\n    address: 10.0.0.1:7701\n"
                     "  - name: b\n    address: 10.0.0.2:7701\n");
    cr_assert_eq(c.hosts[1].line, 5);
    cr_assert_eq(c.hosts[1].column, 5);
    cfg_free(&c);
}

/* ---- Ranks ------------------------------------------------------------ */

Test(config, numbers_ranks_host_by_host_in_list_order) {
    cfg c = parse_ok("cluster: demo\nlocal_clients: 2\nhosts:\n"
                     "  - {name: a, address: 10.0.0.1:7701}\n"
                     "  - {name: b, address: 10.0.0.2:7701, local_clients: 5}\n"
                     "  - {name: c, address: 10.0.0.3:7701}\n");
    cr_assert_eq(cfg_first_rank(&c, 0), 0);
    cr_assert_eq(cfg_first_rank(&c, 1), 2);
    cr_assert_eq(cfg_first_rank(&c, 2), 7);
    cr_assert_eq(cfg_total_ranks(&c), 9);
    cfg_free(&c);
}

Test(config, finds_hosts_by_name) {
    cfg c = parse_ok("cluster: demo\nhosts:\n  - {name: a, address: 10.0.0.1:7701}\n"
                     "  - {name: b.example_1, address: 10.0.0.2:7701}\n");
    cr_assert_eq(cfg_host_index(&c, "a"), 0);
    cr_assert_eq(cfg_host_index(&c, "b.example_1"), 1);
    cr_assert_eq(cfg_host_index(&c, "c"), -1);
    cfg_free(&c);
}

/* ---- Sizes and durations ---------------------------------------------- */

Test(config, sizes_accept_bytes_and_every_suffix) {
    static const struct {
        const char *text;
        uint64_t bytes;
    } ok[] = {{"0", 0},           {"4096", 4096},        {"4K", 4096},         {"4KiB", 4096},
              {"4 KiB", 4096},    {"3M", 3 << 20},       {"3MiB", 3 << 20},    {"2G", 2ull << 30},
              {"2 GiB", 2ull << 30}, {"16777216G", 1ull << 54}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        uint64_t v = 1;
        cr_assert_eq(cfg_parse_size(ok[i].text, &v), 0, "%s", ok[i].text);
        cr_assert_eq(v, ok[i].bytes, "%s", ok[i].text);
    }
}

Test(config, sizes_reject_other_suffixes_fractions_and_overflow) {
    const char *bad[] = {"", "K", "4KB", "4k", "4 kib", "1.5M", "-1", "+1", " 4K", "4K ",
                         "18446744073709551616", "17179869184G", "4 MiB!"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v;
        cr_assert_eq(cfg_parse_size(bad[i], &v), -1, "\"%s\" accepted", bad[i]);
    }
}

Test(config, durations_accept_every_suffix) {
    static const struct {
        const char *text;
        uint64_t ms;
    } ok[] = {{"500ms", 500}, {"5s", 5000}, {"5 s", 5000}, {"2m", 120000},
              {"1h", 3600000}, {"0ms", 0}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        uint64_t v = 1;
        cr_assert_eq(cfg_parse_duration_ms(ok[i].text, &v), 0, "%s", ok[i].text);
        cr_assert_eq(v, ok[i].ms, "%s", ok[i].text);
    }
}

Test(config, durations_reject_other_suffixes_fractions_and_overflow) {
    const char *bad[] = {"", "s", "5 sec", "5S", "1.5s", "-5s", "5d", "5min",
                         "18446744073709551615h", "250", "0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v;
        cr_assert_eq(cfg_parse_duration_ms(bad[i], &v), -1, "\"%s\" accepted", bad[i]);
    }
}

Test(config, tuning_keys_take_sizes_and_durations_with_suffixes) {
    cfg c = parse_ok(MINIMAL "segment_size: 1 MiB\nmax_buffer: 8G\nsocket_buffer: 512K\n"
                             "collective_timeout: 2m\nconnect_timeout: 1500ms\n"
                             "backoff_initial: 1s\nbackoff_max: 1h\nlog_level: debug\n");
    cr_assert_eq(c.segment_bytes, 1 << 20);
    cr_assert_eq(c.max_buffer_bytes, 8ull << 30);
    cr_assert_eq(c.socket_buffer_bytes, 512 << 10);
    cr_assert_eq(c.collective_timeout_ms, 120000);
    cr_assert_eq(c.connect_timeout_ms, 1500);
    cr_assert_eq(c.backoff_initial_ms, 1000);
    cr_assert_eq(c.backoff_max_ms, 3600000);
    cr_assert_eq(c.log_level, CFG_LOG_DEBUG);
    cfg_free(&c);
}

Test(config, tuning_keys_accept_the_bounds_of_their_ranges) {
    cfg c = parse_ok(MINIMAL "segment_size: 4KiB\nmax_buffer: 1MiB\nsocket_buffer: 0\n"
                             "collective_timeout: 100ms\nconnect_timeout: 100ms\nlog_level: error\n");
    cr_assert_eq(c.segment_bytes, 4096);
    cr_assert_eq(c.max_buffer_bytes, 1 << 20);
    cr_assert_eq(c.socket_buffer_bytes, 0);
    cfg_free(&c);
    c = parse_ok(MINIMAL "segment_size: 16MiB\nmax_buffer: 64GiB\nsocket_buffer: 1GiB\n"
                         "collective_timeout: 24h\nconnect_timeout: 10m\nlog_level: warn\n");
    cr_assert_eq(c.segment_bytes, 16 << 20);
    cr_assert_eq(c.max_buffer_bytes, 64ull << 30);
    cr_assert_eq(c.socket_buffer_bytes, 1u << 30);
    cr_assert_eq(c.collective_timeout_ms, 86400000);
    cr_assert_eq(c.connect_timeout_ms, 600000);
    cr_assert_eq(c.log_level, CFG_LOG_WARN);
    cfg_free(&c);
}

Test(config, rejects_segment_size_out_of_range) {
    expect_file_rejected("segment_size_too_large.yaml",
                         "2:15: segment_size: expected a size from 4 KiB to 16 MiB, got \"32MiB\"");
}

Test(config, watts_per_core_is_a_decimal_number_of_watts_up_to_1000)
{
    cfg c = parse_ok(MINIMAL);
    cr_assert_float_eq(c.watts_per_core, 10.0, 1e-9, "the default");
    cfg_free(&c);
    static const struct {
        const char *text;
        double watts;
    } good[] = {{"0", 0}, {"7.5", 7.5}, {"12.125", 12.125}, {"1000", 1000}, {"1000.000", 1000}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        char yaml[256];
        snprintf(yaml, sizeof yaml, MINIMAL "watts_per_core: %s\n", good[i].text);
        c = parse_ok(yaml);
        cr_assert_float_eq(c.watts_per_core, good[i].watts, 1e-9, "%s", good[i].text);
        cfg_free(&c);
    }
    static const char *const bad[] = {"1000.5", "-1", "1e3", "7.", ".5", "7.1234", "lots", "nan"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char yaml[256], want[256];
        snprintf(yaml, sizeof yaml, MINIMAL "watts_per_core: %s\n", bad[i]);
        snprintf(want, sizeof want,
                 "5:17: watts_per_core: expected a number of watts 0..1000, such as 7.5, got "
                 "\"%s\"",
                 bad[i]);
        expect_rejected(yaml, want);
    }
}

Test(config, rejects_segment_size_not_a_multiple_of_8) {
    expect_rejected(MINIMAL "segment_size: 4100\n",
                    "5:15: segment_size: expected a multiple of 8 bytes, got \"4100\"");
}

Test(config, rejects_a_size_that_is_not_a_size) {
    expect_rejected(MINIMAL "max_buffer: lots\n",
                    "5:13: max_buffer: expected a size (bytes, or a number with K, KiB, M, MiB, "
                    "G or GiB), got \"lots\"");
}

Test(config, rejects_a_malformed_duration) {
    expect_file_rejected("bad_duration.yaml",
                         "2:21: collective_timeout: expected a duration (a number with ms, s, m or "
                         "h), got \"5 sec\"");
}

/* "collective_timeout: 30" used to mean 30 ms: a trap for whoever meant seconds. */
Test(config, rejects_a_duration_without_a_unit_and_says_to_add_one) {
    expect_rejected(MINIMAL "collective_timeout: 30\n",
                    "5:21: collective_timeout: \"30\" has no unit: add a unit, e.g. 30s "
                    "(or ms, m, h)");
}

Test(config, every_duration_key_needs_a_unit) {
    static const char *const keys[] = {"collective_timeout", "connect_timeout", "backoff_initial",
                                       "backoff_max",        "heartbeat_interval",
                                       "heartbeat_timeout"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        char yaml[256];
        cfg c;
        snprintf(yaml, sizeof yaml, MINIMAL "%s: 500\n", keys[i]);
        cr_assert_eq(cfg_parse("t.yaml", yaml, strlen(yaml), &c, err, sizeof err), -1,
                     "%s: 500 accepted", keys[i]);
        cr_assert(strstr(err, "\"500\" has no unit: add a unit, e.g. 500s"), "%s: %s", keys[i],
                  err);
    }
}

Test(config, rejects_a_duration_out_of_range) {
    expect_rejected(MINIMAL "connect_timeout: 50ms\n",
                    "5:18: connect_timeout: expected a duration from 100ms to 10m, got \"50ms\"");
}

Test(config, rejects_backoff_max_below_backoff_initial) {
    expect_rejected(MINIMAL "backoff_initial: 2s\nbackoff_max: 1s\n",
                    "6:14: backoff_max: expected at least backoff_initial (2s), got \"1s\"");
}

Test(config, rejects_backoff_initial_above_the_default_backoff_max) {
    expect_rejected(MINIMAL "backoff_initial: 10s\n",
                    "5:18: backoff_initial: expected at most backoff_max (5s by default), "
                    "got \"10s\"");
}

Test(config, rejects_an_unknown_log_level) {
    expect_rejected(MINIMAL "log_level: verbose\n",
                    "5:12: log_level: expected one of debug, info, warn, error, got \"verbose\"");
}

/* ---- Metrics ---------------------------------------------------------- */

Test(config, metrics_is_off_unless_given_an_ip_and_port_to_listen_on) {
    cfg c = parse_ok(MINIMAL);
    cr_assert_null(c.metrics);
    cfg_free(&c);
    c = parse_ok(MINIMAL "metrics: 127.0.0.1:9711\n");
    cr_assert_str_eq(c.metrics, "127.0.0.1:9711");
    cfg_free(&c);
    c = parse_ok(MINIMAL "metrics: \"[::1]:9711\"\n");
    cr_assert_str_eq(c.metrics, "[::1]:9711");
    cfg_free(&c);
}

Test(config, hosts_inherit_the_top_level_metrics) {
    cfg c = parse_ok("cluster: demo\nmetrics: 0.0.0.0:9711\nhosts:\n"
                     "  - {name: a, address: 10.0.0.1:7701}\n"
                     "  - {name: b, address: 10.0.0.2:7701}\n");
    cr_assert_str_eq(c.hosts[0].metrics, "0.0.0.0:9711");
    cr_assert_str_eq(c.hosts[1].metrics, "0.0.0.0:9711");
    cfg_free(&c);
    c = parse_ok(MINIMAL);
    cr_assert_null(c.hosts[0].metrics);
    cfg_free(&c);
}

/* Two daemons on one machine cannot both listen on the top-level port. */
Test(config, a_host_metrics_key_overrides_the_top_level_one) {
    cfg c = parse_ok("cluster: demo\nmetrics: 127.0.0.1:9711\nhosts:\n"
                     "  - {name: a, address: 127.0.0.1:7701}\n"
                     "  - {name: b, address: 127.0.0.1:7702, metrics: 127.0.0.1:9712}\n");
    cr_assert_str_eq(c.metrics, "127.0.0.1:9711");
    cr_assert_str_eq(c.hosts[0].metrics, "127.0.0.1:9711");
    cr_assert_str_eq(c.hosts[1].metrics, "127.0.0.1:9712");
    cfg_free(&c);
    c = parse_ok("cluster: demo\nhosts:\n"
                 "  - {name: a, address: 127.0.0.1:7701, metrics: \"[::1]:9711\"}\n"
                 "  - {name: b, address: 127.0.0.1:7702}\n");
    cr_assert_null(c.metrics);
    cr_assert_str_eq(c.hosts[0].metrics, "[::1]:9711");
    cr_assert_null(c.hosts[1].metrics);
    cfg_free(&c);
}

Test(config, rejects_a_host_metrics_key_that_is_not_ip_and_port) {
    expect_rejected("cluster: demo\nhosts:\n"
                    "  - name: a\n    address: 10.0.0.1:7701\n    metrics: node1:9711\n",
                    "5:14: hosts[0].metrics: expected IP:PORT to listen on (127.0.0.1:9711), got "
                    "\"node1:9711\"");
    expect_rejected("cluster: demo\nhosts:\n"
                    "  - name: a\n    address: 10.0.0.1:7701\n    metrics: 9711\n",
                    "5:14: hosts[0].metrics: expected HOST:PORT, got \"9711\"");
}

Test(config, rejects_metrics_on_a_host_name_or_without_a_port) {
    expect_rejected(MINIMAL "metrics: localhost:9711\n",
                    "5:10: metrics: expected IP:PORT to listen on (127.0.0.1:9711), got "
                    "\"localhost:9711\"");
    expect_rejected(MINIMAL "metrics: 127.0.0.1\n",
                    "5:10: metrics: expected HOST:PORT, got \"127.0.0.1\"");
}

/* ---- Addresses -------------------------------------------------------- */

Test(config, accepts_an_ipv6_address_in_brackets) {
    cfg c = parse_ok("cluster: demo\nhosts:\n  - {name: a, address: \"[::1]:7701\"}\n"
                     "  - {name: b, address: \"[fe80::1%eth0]:7702\"}\n");
    cr_assert_str_eq(c.hosts[0].address, "[::1]:7701");
    cr_assert_str_eq(c.hosts[0].node, "::1");
    cr_assert_eq(c.hosts[0].port, 7701);
    cr_assert_str_eq(c.hosts[1].node, "fe80::1%eth0");
    cfg_free(&c);
}

Test(config, accepts_a_host_name_address) {
    cfg c = parse_ok("cluster: demo\nhosts:\n  - {name: a, address: localhost:7701}\n"
                     "  - {name: b, address: node-3.rack_2.example:65535}\n");
    cr_assert_str_eq(c.hosts[0].node, "localhost");
    cr_assert_eq(c.hosts[0].port, 7701);
    cr_assert_str_eq(c.hosts[1].node, "node-3.rack_2.example");
    cr_assert_eq(c.hosts[1].port, 65535);
    cfg_free(&c);
}

Test(config, rejects_an_address_without_a_port) {
    expect_file_rejected("address_without_port.yaml",
                         "6:14: hosts[1].address: expected HOST:PORT, got \"10.0.0.7\"");
}

Test(config, rejects_a_port_out_of_range) {
    expect_file_rejected("port_out_of_range.yaml",
                         "4:14: hosts[0].address: expected a port 1..65535 after the colon, "
                         "got \"10.0.0.1:70000\"");
    expect_rejected("cluster: demo\nhosts: [{name: a, address: \"10.0.0.1:0\"}]\n",
                    "2:28: hosts[0].address: expected a port 1..65535 after the colon, "
                    "got \"10.0.0.1:0\"");
    expect_rejected("cluster: demo\nhosts: [{name: a, address: \"10.0.0.1:\"}]\n",
                    "2:28: hosts[0].address: expected a port 1..65535 after the colon, "
                    "got \"10.0.0.1:\"");
}

Test(config, rejects_an_unclosed_ipv6_bracket) {
    expect_file_rejected("ipv6_unclosed_bracket.yaml",
                         "4:14: hosts[0].address: expected [IPv6]:PORT, got \"[::1:7701\"");
}

Test(config, rejects_an_invalid_address_in_brackets) {
    expect_rejected("cluster: demo\nhosts: [{name: a, address: \"[10.0.0.1]:7701\"}]\n",
                    "2:28: hosts[0].address: expected an IPv6 address in brackets, "
                    "got \"[10.0.0.1]:7701\"");
}

Test(config, rejects_an_ipv6_address_without_brackets) {
    expect_rejected("cluster: demo\nhosts: [{name: a, address: \"::1:7701\"}]\n",
                    "2:28: hosts[0].address: expected HOST:PORT (an IPv6 address goes in "
                    "brackets: [::1]:7701), got \"::1:7701\"");
}

Test(config, rejects_an_invalid_ipv4_address_or_host_name) {
    expect_rejected("cluster: demo\nhosts: [{name: a, address: \"10.0.0.300:7701\"}]\n",
                    "2:28: hosts[0].address: expected a valid IPv4 address, "
                    "got \"10.0.0.300:7701\"");
    expect_rejected("cluster: demo\nhosts: [{name: a, address: \":7701\"}]\n",
                    "2:28: hosts[0].address: expected an IPv4 address or a host name before the "
                    "port, got \":7701\"");
    expect_rejected("cluster: demo\nhosts: [{name: a, address: \"-node:7701\"}]\n",
                    "2:28: hosts[0].address: expected an IPv4 address or a host name before the "
                    "port, got \"-node:7701\"");
}

Test(config, rejects_two_hosts_with_the_same_address) {
    expect_file_rejected("duplicate_address.yaml",
                         "6:14: hosts[1].address: duplicate address \"10.0.0.1:7701\", already "
                         "used by hosts[0] at line 3");
}

/* ---- Hosts ------------------------------------------------------------ */

Test(config, rejects_a_missing_hosts_key) {
    expect_file_rejected("missing_hosts.yaml", "1:1: hosts: required key is missing");
}

Test(config, rejects_an_empty_host_list) {
    expect_file_rejected("empty_hosts.yaml",
                         "2:8: hosts: expected at least one host, got an empty sequence");
}

Test(config, rejects_hosts_that_is_not_a_sequence) {
    expect_file_rejected("hosts_is_scalar.yaml",
                         "2:8: hosts: expected a sequence of hosts, got \"a\"");
}

Test(config, rejects_a_host_that_is_not_a_mapping) {
    expect_file_rejected("host_is_scalar.yaml",
                         "3:5: hosts[0]: expected a mapping with name and address, got \"a\"");
}

Test(config, rejects_duplicate_host_names) {
    expect_file_rejected("duplicate_host_name.yaml",
                         "7:11: hosts[2].name: duplicate host name \"a\", already used by "
                         "hosts[0] at line 3");
}

Test(config, rejects_a_host_without_an_address) {
    expect_rejected("cluster: demo\nhosts:\n  - name: a\n",
                    "3:5: hosts[0].address: required key is missing");
}

Test(config, rejects_an_invalid_host_name) {
    expect_file_rejected("bad_host_name.yaml",
                         "3:11: hosts[0].name: expected a name of 1 to 64 characters from "
                         "A-Z a-z 0-9 . _ -, got \"host a\"");
}

Test(config, rejects_more_than_the_maximum_number_of_hosts) {
    size_t cap = 64 + (CFG_MAX_HOSTS + 1) * 48;
    char *yaml = malloc(cap);
    size_t n = (size_t)snprintf(yaml, cap, "cluster: demo\nhosts:\n");
    for (int i = 0; i < CFG_MAX_HOSTS; i++)
        n += (size_t)snprintf(yaml + n, cap - n, "  - {name: h%d, address: \"h%d:7701\"}\n", i, i);
    cfg c = parse_ok(yaml);
    cr_assert_eq(c.n_hosts, CFG_MAX_HOSTS);
    cfg_free(&c);
    snprintf(yaml + n, cap - n, "  - {name: extra, address: \"extra:7701\"}\n");
    expect_rejected(yaml, "3:3: hosts: expected at most 1024 hosts, got 1025");
    free(yaml);
}

/* ---- Names, paths and counts ------------------------------------------ */

Test(config, rejects_a_missing_cluster_name) {
    expect_file_rejected("missing_cluster.yaml", "2:1: cluster: required key is missing");
}

Test(config, accepts_a_64_character_cluster_name_but_not_65) {
    char yaml[256], name[66];
    memset(name, 'x', 65);
    name[64] = '\0';
    snprintf(yaml, sizeof yaml, "cluster: %s\n" HOST_A, name);
    cfg c = parse_ok(yaml);
    cr_assert_str_eq(c.cluster, name);
    cfg_free(&c);
    name[64] = 'x';
    name[65] = '\0';
    snprintf(yaml, sizeof yaml, "cluster: %s\n" HOST_A, name);
    cr_assert_eq(cfg_parse("t.yaml", yaml, strlen(yaml), &c, err, sizeof err), -1);
    cr_assert(strstr(err, "t.yaml:1:10: cluster: expected a name of 1 to 64 characters"), "%s",
              err);
}

Test(config, rejects_an_empty_value) {
    expect_rejected("cluster:\n" HOST_A, "1:9: cluster: expected a name of 1 to 64 characters "
                                         "from A-Z a-z 0-9 . _ -, got an empty value");
}

Test(config, rejects_a_socket_path_longer_than_sun_path) {
    expect_file_rejected("socket_too_long.yaml",
                         "2:9: socket: expected a path of at most 107 bytes (the sun_path limit "
                         "of Unix sockets), got 116 bytes");
}

Test(config, rejects_a_relative_socket_path) {
    expect_rejected(MINIMAL "socket: ringd.sock\n",
                    "5:9: socket: expected an absolute path, got \"ringd.sock\"");
}

Test(config, rejects_local_clients_that_is_not_an_integer) {
    expect_file_rejected("local_clients_is_string.yaml",
                         "2:16: local_clients: expected an integer 1..1024, got \"many\"");
}

Test(config, rejects_local_clients_out_of_range) {
    expect_rejected(MINIMAL "local_clients: 0\n",
                    "5:16: local_clients: expected an integer 1..1024, got \"0\"");
    expect_rejected("cluster: demo\nhosts: [{name: a, address: \"h:1\", local_clients: 1025}]\n",
                    "2:50: hosts[0].local_clients: expected an integer 1..1024, got \"1025\"");
}

Test(config, rejects_a_sequence_where_a_scalar_is_expected) {
    expect_rejected(MINIMAL "log_level: [info]\n",
                    "5:12: log_level: expected one of debug, info, warn, error, got a sequence");
}

Test(config, rejects_a_value_with_a_nul_byte) {
    expect_rejected("cluster: \"de\\0mo\"\n" HOST_A,
                    "1:10: cluster: expected a name of 1 to 64 characters from A-Z a-z 0-9 . _ -, "
                    "got a value containing a NUL byte");
}

Test(config, quotes_odd_values_on_one_line_and_cuts_long_ones) {
    expect_rejected(MINIMAL "log_level: \"a\\tb\\\"c\"\n",
                    "5:12: log_level: expected one of debug, info, warn, error, got \"a\\x09b\\\"c\"");
    expect_rejected(MINIMAL "log_level: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
                            "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n",
                    "5:12: log_level: expected one of debug, info, warn, error, got \"xxxxxxxxxxx"
                    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...\"");
}

/* ---- Keys ------------------------------------------------------------- */

Test(config, rejects_an_unknown_top_level_key_and_suggests_the_close_one) {
    expect_file_rejected("unknown_top_key.yaml",
                         "5:1: segmnt_size: unknown key, did you mean segment_size?");
}

Test(config, rejects_an_unknown_host_key_and_suggests_the_close_one) {
    expect_file_rejected("unknown_host_key.yaml",
                         "4:5: hosts[0].adress: unknown key, did you mean address?");
}

Test(config, rejects_an_unknown_key_listing_the_known_ones) {
    expect_rejected("cluster: demo\nhosts: [{name: a, address: \"h:1\", weight: 3}]\n",
                    "2:35: hosts[0].weight: unknown key, expected one of name, address, socket, "
                    "local_clients, metrics");
}

Test(config, rejects_a_duplicate_key) {
    expect_file_rejected("duplicate_key.yaml",
                         "5:1: cluster: duplicate key, first given at line 1");
}

Test(config, rejects_a_key_that_is_not_a_scalar) {
    expect_rejected(MINIMAL "? [a, b]\n: 1\n", "5:3: expected a key name, got a sequence");
}

/* ---- Files that are not a configuration ------------------------------- */

Test(config, rejects_an_empty_file) {
    expect_file_rejected("empty.yaml", "1:1: expected a mapping of settings, got an empty file");
}

Test(config, rejects_a_top_level_that_is_not_a_mapping) {
    expect_file_rejected("top_level_sequence.yaml",
                         "1:1: expected a mapping of settings at the top level, got a sequence");
}

Test(config, rejects_yaml_with_an_unclosed_bracket) {
    expect_file_rejected("unclosed_bracket.yaml",
                         "3:1: invalid YAML: did not find expected ',' or ']' (while parsing a "
                         "flow sequence started at line 2, column 8)");
}

Test(config, rejects_yaml_indented_with_a_tab) {
    expect_file_rejected("tab_indentation.yaml",
                         "4:1: invalid YAML: found a tab character that violates indentation "
                         "(while scanning a plain scalar started at line 3, column 11)");
}

Test(config, rejects_a_second_document) {
    expect_rejected(MINIMAL "---\ncluster: other\n",
                    "5:1: expected a single YAML document, got a second one");
}

Test(config, rejects_text_that_is_not_utf8) {
    expect_rejected("cluster: demo\nsocket: /tmp/\xff\n",
                    "2:14: invalid YAML: invalid leading UTF-8 octet");
}

Test(config, reports_a_file_that_cannot_be_opened) {
    cfg c;
    cr_assert_eq(cfg_load("/nonexistent/ringd.yaml", &c, err, sizeof err), -1);
    cr_assert_str_eq(err, "/nonexistent/ringd.yaml: cannot open: No such file or directory");
}

Test(config, reports_a_path_that_cannot_be_read) {
    char expected[PATH_MAX + 64];
    cfg c;
    snprintf(expected, sizeof expected, "%s: cannot read: Is a directory", RINGD_TEST_DATA);
    cr_assert_eq(cfg_load(RINGD_TEST_DATA, &c, err, sizeof err), -1);
    cr_assert_str_eq(err, expected);
}

Test(config, rejects_a_host_list_that_contains_itself) {
    expect_rejected("cluster: demo\nhosts: &h [*h]\n",
                    "2:8: hosts[0]: expected a mapping with name and address, got a sequence");
}

Test(config, fusion_can_be_tuned_or_turned_off) {
    cfg c = parse_ok(MINIMAL "fusion_threshold: 0\nfusion_max: 1\n");
    cr_assert_eq(c.fusion_threshold_bytes, 0);
    cr_assert_eq(c.fusion_max, 1);
    cfg_free(&c);
    c = parse_ok(MINIMAL "fusion_threshold: 64KiB\nfusion_max: 64\n");
    cr_assert_eq(c.fusion_threshold_bytes, 64 << 10);
    cr_assert_eq(c.fusion_max, 64);
    cfg_free(&c);
    expect_rejected(MINIMAL "fusion_max: 65\n", "5:13: fusion_max: expected an integer 1..64, got \"65\"");
}

/* ---- Local access ----------------------------------------------------- */

Test(config, socket_mode_defaults_to_0660_and_access_is_open) {
    cfg c = parse_ok(MINIMAL);
    cr_assert_eq(c.socket_mode, 0660);
    cr_assert_null(c.socket_group.value);
    cr_assert_eq(c.allowed_uids.n, 0);
    cr_assert_eq(c.allowed_gids.n, 0);
    cfg_free(&c);
}

Test(config, socket_mode_takes_octal_with_or_without_a_leading_zero) {
    const char *texts[] = {"\"0600\"", "0600", "600", "0o600", "\"0\""};
    const unsigned modes[] = {0600, 0600, 0600, 0600, 0};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        char yaml[256];
        snprintf(yaml, sizeof yaml, MINIMAL "socket_mode: %s\n", texts[i]);
        cfg c = parse_ok(yaml);
        cr_assert_eq(c.socket_mode, modes[i], "%s", texts[i]);
        cfg_free(&c);
    }
}

Test(config, rejects_a_socket_mode_that_is_not_octal_permission_bits) {
    static const char *bad[] = {"0680", "rw-rw----", "\"\"", "04755", "1000", "-660", "0x1b0"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char yaml[256], where[256];
        snprintf(yaml, sizeof yaml, MINIMAL "socket_mode: %s\n", bad[i]);
        const char *q = bad[i][0] == '"' ? "" : "\"";
        snprintf(where, sizeof where,
                 "5:14: socket_mode: expected octal permission bits 0000..0777, such as "
                 "\"0660\", got %s%s%s",
                 q, strcmp(bad[i], "\"\"") ? bad[i] : "\"\"", q);
        expect_rejected(yaml, where);
    }
}

Test(config, rejects_a_bad_socket_mode_file_with_its_place) {
    expect_file_rejected("bad_socket_mode.yaml",
                         "2:14: socket_mode: expected octal permission bits 0000..0777, such as "
                         "\"0660\", got \"0668\"");
}

Test(config, socket_group_and_allowed_ids_keep_names_numbers_and_places) {
    cfg c = parse_ok(MINIMAL "socket_group: ringd\nallowed_uids: [0, alice]\n"
                             "allowed_gids:\n  - 1000\n  - train-users\n");
    cr_assert_str_eq(c.socket_group.value, "ringd");
    cr_assert_eq(c.socket_group.line, 5);
    cr_assert_eq(c.socket_group.column, 15);
    cr_assert_eq(c.allowed_uids.n, 2);
    cr_assert_str_eq(c.allowed_uids.items[0].value, "0");
    cr_assert_str_eq(c.allowed_uids.items[1].value, "alice");
    cr_assert_eq(c.allowed_uids.items[1].line, 6);
    cr_assert_eq(c.allowed_uids.items[1].column, 19);
    cr_assert_eq(c.allowed_gids.n, 2);
    cr_assert_str_eq(c.allowed_gids.items[1].value, "train-users");
    cr_assert_eq(c.allowed_gids.items[1].line, 9);
    cfg_free(&c);
}

Test(config, an_empty_allowed_list_means_anyone) {
    cfg c = parse_ok(MINIMAL "allowed_uids: []\n");
    cr_assert_eq(c.allowed_uids.n, 0);
    cfg_free(&c);
}

Test(config, rejects_an_allowed_list_that_is_not_a_sequence) {
    expect_rejected(MINIMAL "allowed_uids: alice\n",
                    "5:15: allowed_uids: expected a sequence of names or numbers, got \"alice\"");
}

Test(config, rejects_an_allowed_entry_that_is_not_a_name_or_number) {
    expect_rejected(MINIMAL "allowed_gids: [wheel, \"a b\"]\n",
                    "5:23: allowed_gids[1]: expected a user or group name or a number, got "
                    "\"a b\"");
    expect_rejected(MINIMAL "allowed_uids: [4294967295]\n",
                    "5:16: allowed_uids[0]: expected a user or group name or a number, got "
                    "\"4294967295\"");
    expect_rejected(MINIMAL "socket_group: [a]\n",
                    "5:15: socket_group: expected a user or group name or a number, got a "
                    "sequence");
}

Test(config, rejects_more_than_the_maximum_number_of_allowed_ids) {
    char yaml[2048];
    size_t n = (size_t)snprintf(yaml, sizeof yaml, MINIMAL "allowed_uids: [");
    for (int i = 0; i <= CFG_MAX_IDS; i++)
        n += (size_t)snprintf(yaml + n, sizeof yaml - n, "%s%d", i ? ", " : "", i);
    snprintf(yaml + n, sizeof yaml - n, "]\n");
    expect_rejected(yaml, "5:15: allowed_uids: expected at most 64 entries, got 65");
}

Test(config, algorithm_is_ring_or_star_with_a_root_among_the_hosts) {
    cfg c = parse_ok(MINIMAL);
    cr_assert_eq(c.algorithm, CFG_ALG_RING);
    cr_assert_eq(c.star_root_index, 0);
    cfg_free(&c);
    c = parse_ok("cluster: demo\nalgorithm: star\nstar_root: b\nhosts:\n"
                 "  - name: a\n    address: 10.0.0.1:7701\n"
                 "  - name: b\n    address: 10.0.0.2:7701\n");
    cr_assert_eq(c.algorithm, CFG_ALG_STAR);
    cr_assert_str_eq(c.star_root, "b");
    cr_assert_eq(c.star_root_index, 1);
    cfg_free(&c);
    c = parse_ok(MINIMAL "algorithm: ring\n");
    cr_assert_eq(c.algorithm, CFG_ALG_RING);
    cfg_free(&c);
    expect_rejected(MINIMAL "algorithm: tree\n", "5:12: algorithm: expected one of ring, star, got \"tree\"");
    expect_rejected(MINIMAL "algorithm: star\nstar_root: z\n",
                    "6:12: star_root: expected the name of a host in hosts, got \"z\"");
}

/* ---- Faults and security ---------------------------------------------- */

Test(config, heartbeats_key_and_checksum_have_safe_defaults) {
    cfg c = parse_ok(MINIMAL);
    cr_assert_eq(c.heartbeat_interval_ms, 1000);
    cr_assert_eq(c.heartbeat_timeout_ms, 5000);
    cr_assert_null(c.secret_file, "no key unless configured (the daemon warns)");
    cr_assert(c.checksum, "crc32c by default");
    cfg_free(&c);
}

Test(config, takes_heartbeats_a_key_file_and_no_checksum) {
    cfg c = parse_ok(MINIMAL "heartbeat_interval: 200ms\nheartbeat_timeout: 1s\n"
                             "secret_file: /etc/ringd/cluster.key\nchecksum: none\n");
    cr_assert_eq(c.heartbeat_interval_ms, 200);
    cr_assert_eq(c.heartbeat_timeout_ms, 1000);
    cr_assert_str_eq(c.secret_file, "/etc/ringd/cluster.key");
    cr_assert(!c.checksum);
    cfg_free(&c);
}

Test(config, rejects_a_heartbeat_timeout_under_twice_the_interval) {
    expect_rejected(MINIMAL "heartbeat_interval: 1s\nheartbeat_timeout: 1500ms\n",
                    "6:20: heartbeat_timeout: expected at least twice heartbeat_interval (2s), "
                    "got \"1500ms\"");
    expect_rejected(MINIMAL "heartbeat_interval: 3s\n",
                    "5:21: heartbeat_interval: expected at most half of heartbeat_timeout "
                    "(2500ms), got \"3s\"");
}

/* ---- The elastic ring -------------------------------------------------- */

#define FIVE_HOSTS                                                                                \
    "cluster: demo\nhosts:\n"                                                                     \
    "  - {name: h0, address: 127.0.0.1:7000}\n  - {name: h1, address: 127.0.0.1:7001}\n"          \
    "  - {name: h2, address: 127.0.0.1:7002}\n  - {name: h3, address: 127.0.0.1:7003}\n"          \
    "  - {name: h4, address: 127.0.0.1:7004}\n"

Test(config, a_ring_closes_over_a_host_after_10s_and_needs_a_majority) {
    cfg c = parse_ok(FIVE_HOSTS);
    cr_assert_eq(c.evict_after_ms, 10000);
    cr_assert_eq(c.min_hosts, 3, "5 hosts: a majority is 3");
    cfg_free(&c);
    c = parse_ok(MINIMAL);
    cr_assert_eq(c.min_hosts, 1);
    cfg_free(&c);
}

Test(config, takes_evict_after_zero_as_never_and_a_larger_min_hosts) {
    cfg c = parse_ok(FIVE_HOSTS "evict_after: 0\nmin_hosts: 5\n");
    cr_assert_eq(c.evict_after_ms, 0);
    cr_assert_eq(c.min_hosts, 5);
    cfg_free(&c);
    c = parse_ok(FIVE_HOSTS "evict_after: 2500ms\n");
    cr_assert_eq(c.evict_after_ms, 2500);
    cfg_free(&c);
}

Test(config, refuses_a_min_hosts_that_two_sides_of_a_split_could_both_reach) {
    expect_rejected(FIVE_HOSTS "min_hosts: 2\n",
                    "8:12: min_hosts: expected 3..5 (a majority of the 5 hosts, so that the two "
                    "sides of a split network can never both run), got \"2\"");
    expect_rejected(FIVE_HOSTS "min_hosts: 6\n",
                    "8:12: min_hosts: expected 3..5 (a majority of the 5 hosts, so that the two "
                    "sides of a split network can never both run), got \"6\"");
}

Test(config, refuses_an_evict_after_without_a_unit_or_for_the_star) {
    expect_rejected(FIVE_HOSTS "evict_after: 10\n",
                    "8:14: evict_after: \"10\" has no unit: add a unit, e.g. 10s (or ms, m, h)");
    expect_rejected(FIVE_HOSTS "evict_after: 100ms\n",
                    "8:14: evict_after: expected a duration from 1s to 1h, got \"100ms\"");
    expect_rejected(FIVE_HOSTS "algorithm: star\nevict_after: 5s\n",
                    "9:14: evict_after: only the ring closes over a missing host: set "
                    "evict_after: 0 with algorithm: star");
    cfg c = parse_ok(FIVE_HOSTS "algorithm: star\n");
    cr_assert_eq(c.evict_after_ms, 0, "the star's default: it does not close over hosts");
    cfg_free(&c);
}

Test(config, rejects_a_relative_key_file_and_an_unknown_checksum) {
    expect_rejected(MINIMAL "secret_file: cluster.key\n",
                    "5:14: secret_file: expected an absolute path, got \"cluster.key\"");
    expect_rejected(MINIMAL "checksum: md5\n",
                    "5:11: checksum: expected one of crc32c, none, got \"md5\"");
}

Test(config, streams_per_link_default_to_one_and_go_up_to_eight) {
    cfg c = parse_ok(MINIMAL);
    cr_assert_eq(c.streams, 1);
    cfg_free(&c);
    c = parse_ok(MINIMAL "streams: 4\n");
    cr_assert_eq(c.streams, 4);
    cfg_free(&c);
    expect_rejected(MINIMAL "streams: 9\n", "5:10: streams: expected an integer 1..8, got \"9\"");
    expect_rejected(MINIMAL "streams: 0\n", "5:10: streams: expected an integer 1..8, got \"0\"");
}

/* ---- Frame protection and wire types (issue 17) ------------------------ */

Test(config, encryption_and_wire_dtype_default_to_none_and_take_their_names) {
    cfg c = parse_ok(MINIMAL);
    cr_assert_eq(c.encryption, CFG_CIPHER_NONE);
    cr_assert_eq(c.wire_dtype, CFG_WIRE_NONE);
    cfg_free(&c);
    c = parse_ok(MINIMAL "secret_file: /k\nencryption: chacha20-poly1305\nwire_dtype: bfloat16\n");
    cr_assert_eq(c.encryption, CFG_CIPHER_CHACHA20_POLY1305);
    cr_assert_eq(c.wire_dtype, CFG_WIRE_BFLOAT16);
    cfg_free(&c);
    c = parse_ok(MINIMAL "secret_file: /k\nencryption: aes-256-gcm\nwire_dtype: float16\n");
    cr_assert_eq(c.encryption, CFG_CIPHER_AES_256_GCM);
    cr_assert_eq(c.wire_dtype, CFG_WIRE_FLOAT16);
    cfg_free(&c);
}

Test(config, rejects_encryption_without_a_key_and_unknown_names) {
    expect_rejected(MINIMAL "encryption: aes-256-gcm\n",
                    "5:13: encryption: needs a cluster key: set secret_file too (the links' keys "
                    "come from it)");
    expect_rejected(MINIMAL "secret_file: /k\nencryption: aes\n",
                    "6:13: encryption: expected one of none, aes-256-gcm, chacha20-poly1305, got "
                    "\"aes\"");
    expect_rejected(MINIMAL "wire_dtype: int8\n",
                    "5:13: wire_dtype: expected one of none, bfloat16, float16, got \"int8\"");
}

/* ---- Hostile input is refused quickly (issue 17, 5b) ------------------- */

static char *nested(size_t depth, size_t *len) {
    size_t cap = 64 + 2 * depth + sizeof MINIMAL;
    char *s = malloc(cap);
    cr_assert_not_null(s);
    size_t n = (size_t)snprintf(s, cap, MINIMAL "x: ");
    memset(s + n, '[', depth);
    memset(s + n + depth, ']', depth);
    n += 2 * depth;
    s[n++] = '\n';
    s[n] = '\0';
    *len = n;
    return s;
}

Test(config, refuses_deeply_nested_collections_at_once_saying_how_deep) {
    size_t len;
    cfg c;
    char *s = nested(100000, &len); /* about 200 KB: took over 20 s */
    int64_t t0 = 0;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    t0 = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    cr_assert_eq(cfg_parse("t.yaml", s, len, &c, err, sizeof err), -1);
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 - t0;
    cr_expect_lt(ms, 1000, "took %lld ms", (long long)ms);
    cr_expect_str_eq(err, "t.yaml:5:35: nested more than 32 levels deep: a ringd configuration "
                          "needs 3");
    free(s);
    /* Within the cap it is an ordinary unknown key. */
    s = nested(31, &len);
    cr_assert_eq(cfg_parse("t.yaml", s, len, &c, err, sizeof err), -1);
    cr_expect(strstr(err, "x: unknown key") != NULL, "%s", err);
    free(s);
}

Test(config, refuses_a_file_over_one_mebibyte) {
    size_t len = (1u << 20) + 1;
    char *s = malloc(len);
    cfg c;
    cr_assert_not_null(s);
    memset(s, '#', len);
    memcpy(s, MINIMAL, strlen(MINIMAL));
    cr_assert_eq(cfg_parse("t.yaml", s, len, &c, err, sizeof err), -1);
    cr_expect_str_eq(err, "t.yaml: 1048577 bytes, larger than the 1024 KiB a configuration may "
                          "have");
    free(s);
}

/* ---- One address written two ways (issue 17, 5c) ----------------------- */

static void expect_clash(const char *first, const char *second) {
    char path[] = "/tmp/ringd-config-XXXXXX", yaml[512], want[256];
    int fd = mkstemp(path);
    cfg c;
    cr_assert_geq(fd, 0);
    int n = snprintf(yaml, sizeof yaml,
                     "cluster: demo\nhosts:\n  - {name: a, address: \"%s\"}\n"
                     "  - {name: b, address: \"%s\"}\n",
                     first, second);
    cr_assert_eq(write(fd, yaml, (size_t)n), n);
    close(fd);
    int rc = cfg_load(path, &c, err, sizeof err);
    unlink(path);
    cr_assert_eq(rc, -1, "%s beside %s was accepted", first, second);
    snprintf(want, sizeof want, "%s:4:5: hosts[1].address: %s is the address of hosts[0] (a, %s "
             "at line 3): both are 127.0.0.1 port 1",
             path, second, first);
    cr_expect(strncmp(err, want, strlen(want)) == 0, "got:  %s\nwant: %s", err, want);
    cr_expect(strstr(err, "give each host its own address or port") != NULL, "%s", err);
}

Test(config, refuses_two_hosts_whose_addresses_resolve_alike) {
    expect_clash("127.0.0.1:1", "localhost:1");
    expect_clash("127.0.0.1:1", "[::ffff:127.0.0.1]:1");
}

Test(config, accepts_one_address_on_two_ports) {
    char path[] = "/tmp/ringd-config-XXXXXX";
    const char yaml[] = "cluster: demo\nhosts:\n  - {name: a, address: \"127.0.0.1:1\"}\n"
                        "  - {name: b, address: \"localhost:2\"}\n";
    int fd = mkstemp(path);
    cfg c;
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, yaml, sizeof yaml - 1), (ssize_t)(sizeof yaml - 1));
    close(fd);
    int rc = cfg_load(path, &c, err, sizeof err);
    unlink(path);
    cr_assert_eq(rc, 0, "%s", err);
    cfg_free(&c);
}

Test(config, the_links_use_cubic_unless_told_otherwise) {
    cfg c = parse_ok(MINIMAL);
    cr_assert_str_eq(c.congestion_control, "cubic");
    cfg_free(&c);
    c = parse_ok(MINIMAL "congestion_control: bbr\n");
    cr_assert_str_eq(c.congestion_control, "bbr");
    cfg_free(&c);
    c = parse_ok(MINIMAL "congestion_control: system\n");
    cr_assert_null(c.congestion_control, "system: the machine's own");
    cfg_free(&c);
    expect_rejected(MINIMAL "congestion_control: \"cubic; rm\"\n",
                    "5:21: congestion_control: expected a TCP congestion control name (cubic, "
                    "reno, bbr, ...) or system, got \"cubic; rm\"");
}
