/*
 * test_reload.c - what a reload changes and how each key applies
 * (daemon/reload.c), from two parsed files. tests/service checks the
 * daemon does it, key by key, as the documents say.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "daemon/reload.h"

#define HOSTS_OF(cluster)                                                                          \
    "cluster: " cluster "\n"                                                                       \
    "hosts:\n"                                                                                     \
    "  - {name: a, address: 127.0.0.1:7701, socket: /run/a.sock}\n"                                \
    "  - {name: b, address: 127.0.0.1:7702, socket: /run/b.sock}\n"                                \
    "  - {name: c, address: 127.0.0.1:7703, socket: /run/c.sock}\n"
#define HOSTS HOSTS_OF("c")

static cfg run, next;

static void parse(cfg *c, const char *text)
{
    char err[512];
    cr_assert_eq(cfg_parse("ringd.yaml", text, strlen(text), c, err, sizeof err), 0, "%s", err);
}

/* The plan from a file of HOSTS + from to one of HOSTS + to, on host a. */
static reload_plan diff(const char *from, const char *to)
{
    char a[4096], b[4096];
    snprintf(a, sizeof a, "%s%s", HOSTS, from);
    snprintf(b, sizeof b, "%s%s", HOSTS, to);
    parse(&run, a);
    parse(&next, b);
    reload_plan p;
    reload_diff(&run, 0, &next, 0, 0, &p);
    return p;
}

static const reload_change *change(const reload_plan *p, const char *key)
{
    for (int i = 0; i < p->n; i++)
        if (strcmp(p->changes[i].key, key) == 0) return &p->changes[i];
    return NULL;
}

static void assert_change(const reload_plan *p, const char *key, reload_how how, const char *from,
                          const char *to)
{
    const reload_change *c = change(p, key);
    cr_assert_not_null(c, "%s: no change", key);
    cr_assert_eq(c->how, how, "%s: applied as %d, not %d", key, c->how, how);
    cr_assert_str_eq(c->from, from, "%s", key);
    cr_assert_str_eq(c->to, to, "%s", key);
}

static void fini(void)
{
    cfg_free(&run);
    cfg_free(&next);
}

TestSuite(reload, .fini = fini);

Test(reload, the_same_file_changes_nothing)
{
    reload_plan p = diff("segment_size: 1MiB\nallowed_uids: [0]\n",
                         "segment_size: 1MiB\nallowed_uids: [0]\n");
    cr_assert_eq(p.n, 0);
    cr_assert_not(p.reform);
    cr_assert_not(p.access);
}

Test(reload, tuning_keys_apply_at_once_and_read_as_the_file_writes_them)
{
    reload_plan p = diff("", "segment_size: 1MiB\ncollective_timeout: 300ms\nfusion_max: 16\n"
                             "log_level: debug\nchecksum: none\nwire_dtype: bfloat16\n"
                             "congestion_control: reno\nmin_hosts: 3\n");
    cr_assert_not(p.reform);
    assert_change(&p, "segment_size", RELOAD_AT_ONCE, "256KiB", "1MiB");
    assert_change(&p, "collective_timeout", RELOAD_AT_ONCE, "60s", "300ms");
    assert_change(&p, "fusion_max", RELOAD_AT_ONCE, "32", "16");
    assert_change(&p, "log_level", RELOAD_AT_ONCE, "info", "debug");
    assert_change(&p, "checksum", RELOAD_AT_ONCE, "crc32c", "none");
    assert_change(&p, "wire_dtype", RELOAD_AT_ONCE, "none", "bfloat16");
    assert_change(&p, "congestion_control", RELOAD_AT_ONCE, "cubic", "reno");
    assert_change(&p, "min_hosts", RELOAD_AT_ONCE, "2", "3");
    cr_assert_eq(p.n, 8);
}

/* The reload: it logged only "the ring is unchanged" and turned the
 * elastic ring off with evict_after 0 while the ring kept running. */
Test(reload, switching_to_the_star_re_forms_the_ring_with_the_star_s_evict_after)
{
    reload_plan p = diff("", "algorithm: star\n");
    cr_assert(p.reform);
    assert_change(&p, "algorithm", RELOAD_REFORM, "ring", "star");
    assert_change(&p, "evict_after", RELOAD_REFORM, "10s", "0");
}

Test(reload, a_key_taken_out_of_the_file_goes_back_to_its_default_never_0)
{
    reload_plan p = diff("segment_size: 1MiB\nevict_after: 3s\nsocket_buffer: 8MiB\n"
                         "heartbeat_timeout: 9s\nmin_hosts: 3\nmax_buffer: 1GiB\n",
                         "");
    cr_assert_not(p.reform);
    assert_change(&p, "segment_size", RELOAD_AT_ONCE, "1MiB", "256KiB");
    assert_change(&p, "evict_after", RELOAD_AT_ONCE, "3s", "10s");
    assert_change(&p, "socket_buffer", RELOAD_AT_ONCE, "8MiB", "4MiB");
    assert_change(&p, "heartbeat_timeout", RELOAD_AT_ONCE, "9s", "5s");
    assert_change(&p, "min_hosts", RELOAD_AT_ONCE, "3", "2");
    assert_change(&p, "max_buffer", RELOAD_AT_ONCE, "1GiB", "4GiB");
}

Test(reload, evict_after_re_forms_the_ring_only_when_it_turns_on_or_off)
{
    reload_plan p = diff("evict_after: 3s\n", "evict_after: 5s\n");
    cr_assert_not(p.reform);
    assert_change(&p, "evict_after", RELOAD_AT_ONCE, "3s", "5s");
    fini();
    p = diff("evict_after: 3s\n", "evict_after: 0\n");
    assert_change(&p, "evict_after", RELOAD_REFORM, "3s", "0");
    fini();
    p = diff("evict_after: 0\n", "");
    assert_change(&p, "evict_after", RELOAD_REFORM, "0", "10s");
}

Test(reload, local_access_applies_to_the_socket_without_re_forming)
{
    reload_plan p = diff("allowed_uids: [1000]\n", "socket_mode: \"0600\"\nsocket_group: 65534\n"
                                                   "allowed_uids: [1000, 1001]\n"
                                                   "allowed_gids: [27]\n");
    cr_assert_not(p.reform);
    cr_assert(p.access);
    assert_change(&p, "socket_mode", RELOAD_ACCESS, "0660", "0600");
    assert_change(&p, "socket_group", RELOAD_ACCESS, "(the daemon's)", "65534");
    assert_change(&p, "allowed_uids", RELOAD_ACCESS, "1000", "1000,1001");
    assert_change(&p, "allowed_gids", RELOAD_ACCESS, "(anyone)", "27");
}

Test(reload, the_ring_s_shape_re_forms_it)
{
    reload_plan p;
    parse(&run, HOSTS);
    parse(&next, HOSTS_OF("d") "streams: 2\nlocal_clients: 2\n");
    reload_diff(&run, 0, &next, 0, 0, &p);
    cr_assert(p.reform);
    assert_change(&p, "cluster", RELOAD_REFORM, "c", "d");
    assert_change(&p, "streams", RELOAD_REFORM, "1", "2");
    assert_change(&p, "local_clients", RELOAD_REFORM, "3", "6"); /* ranks in all */
    fini();
    p = diff("algorithm: star\nevict_after: 0\n", "algorithm: star\nevict_after: 0\nstar_root: b\n");
    assert_change(&p, "star_root", RELOAD_REFORM, "a", "b");
}

Test(reload, another_host_list_re_forms_the_ring_and_only_this_host_s_socket_counts)
{
    parse(&run, HOSTS);
    parse(&next, "cluster: c\nhosts:\n"
                 "  - {name: a, address: 127.0.0.1:7701, socket: /run/a.sock}\n"
                 "  - {name: b, address: 127.0.0.1:7702, socket: /run/elsewhere.sock}\n"
                 "  - {name: c, address: 127.0.0.1:7703, socket: /run/c.sock}\n");
    reload_plan p;
    reload_diff(&run, 0, &next, 0, 0, &p);
    cr_assert_eq(p.n, 0, "host b's socket is b's to reload");
    reload_diff(&run, 1, &next, 1, 0, &p);
    assert_change(&p, "socket", RELOAD_REFORM, "/run/b.sock", "/run/elsewhere.sock");
    fini();
    parse(&run, HOSTS);
    parse(&next, "cluster: c\nhosts:\n"
                 "  - {name: a, address: 127.0.0.1:7701, socket: /run/a.sock}\n"
                 "  - {name: c, address: 127.0.0.1:7703, socket: /run/c.sock}\n");
    reload_diff(&run, 0, &next, 0, 0, &p);
    assert_change(&p, "hosts", RELOAD_REFORM, "3 hosts", "2 hosts");
    cr_assert_null(change(&p, "local_clients"), "the host list changed, not local_clients");
    fini();
    parse(&run, HOSTS);
    parse(&next, "cluster: c\nhosts:\n"
                 "  - {name: a, address: 127.0.0.1:7701, socket: /run/a.sock}\n"
                 "  - {name: b, address: 127.0.0.1:7712, socket: /run/b.sock}\n"
                 "  - {name: c, address: 127.0.0.1:7703, socket: /run/c.sock}\n");
    reload_diff(&run, 2, &next, 2, 0, &p);
    assert_change(&p, "hosts", RELOAD_REFORM, "b at 127.0.0.1:7702", "b at 127.0.0.1:7712");
}

Test(reload, a_new_cluster_key_re_forms_the_ring_and_the_same_key_elsewhere_does_not)
{
    reload_plan p;
    parse(&run, HOSTS "secret_file: /etc/ringd/a.key\n");
    parse(&next, HOSTS "secret_file: /etc/ringd/b.key\n");
    reload_diff(&run, 0, &next, 0, 1, &p);
    assert_change(&p, "secret_file", RELOAD_REFORM, "/etc/ringd/a.key", "/etc/ringd/b.key");
    reload_diff(&run, 0, &next, 0, 0, &p);
    assert_change(&p, "secret_file", RELOAD_AT_ONCE, "/etc/ringd/a.key", "/etc/ringd/b.key");
    reload_diff(&run, 0, &run, 0, 1, &p);
    assert_change(&p, "secret_file", RELOAD_REFORM, "/etc/ringd/a.key", "a new key");
}

Test(reload, applying_moves_the_new_values_in_and_the_old_out_to_be_freed)
{
    reload_plan p = diff("metrics: 127.0.0.1:9711\nallowed_uids: [1]\n",
                         "metrics: 127.0.0.1:9712\nallowed_uids: [2, 3]\nsegment_size: 1MiB\n"
                         "congestion_control: system\n");
    reload_apply(&run, 0, &next);
    cr_assert_str_eq(run.hosts[0].metrics, "127.0.0.1:9712");
    cr_assert_str_eq(next.hosts[0].metrics, "127.0.0.1:9711");
    cr_assert_eq(run.allowed_uids.n, 2);
    cr_assert_str_eq(run.allowed_uids.items[1].value, "3");
    cr_assert_eq(run.segment_bytes, 1u << 20);
    cr_assert_null(run.congestion_control);
    reload_plan again;
    reload_diff(&run, 0, &run, 0, 0, &again);
    cr_assert_eq(again.n, 0);
    (void)p; /* fini() frees both: ASan says if a string is freed twice or lost */
}

Test(reload, the_description_lists_the_changes_of_a_class_and_stays_in_its_buffer)
{
    reload_plan p = diff("", "algorithm: star\nsegment_size: 1MiB\n");
    char text[512], tiny[20];
    reload_describe(&p, RELOAD_REFORM, text, sizeof text);
    cr_assert_str_eq(text, "algorithm ring -> star, evict_after 10s -> 0");
    reload_describe(&p, -1, text, sizeof text);
    cr_assert_not_null(strstr(text, "segment_size 256KiB -> 1MiB"), "%s", text);
    reload_describe(&p, -1, tiny, sizeof tiny);
    cr_assert_eq(strlen(tiny), sizeof tiny - 1);
}

Test(reload, watts_per_core_applies_at_once)
{
    reload_plan p = diff("", "watts_per_core: 7.5\n");
    cr_assert_not(p.reform);
    assert_change(&p, "watts_per_core", RELOAD_AT_ONCE, "10", "7.5");
    cr_assert_eq(p.n, 1);
    reload_apply(&run, 0, &next);
    cr_assert_float_eq(run.watts_per_core, 7.5, 1e-9);
}
