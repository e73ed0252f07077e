/*
 * test_handshake.c - HELLO, WELCOME and AUTH (daemon/handshake.c) between
 * two ends built from one configuration: who may connect to whom, keys on
 * both sides or neither, and answers that only the key's holder can give.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "daemon/handshake.h"
#include "ringd.h"

static cfg_host hosts[4];
static cfg conf;

static void setup(void)
{
    static char *names[] = {"a", "b", "c", "d"};
    memset(&conf, 0, sizeof conf);
    conf.cluster = "test";
    conf.hosts = hosts;
    conf.n_hosts = 4;
    for (int i = 0; i < 4; i++)
        hosts[i] = (cfg_host){.name = names[i], .local_clients = 1};
}

TestSuite(handshake, .init = setup);

static auth_key key_of(const char *text)
{
    auth_key k;
    memset(&k, 0, sizeof k);
    k.len = strlen(text);
    memcpy(k.bytes, text, k.len);
    return k;
}

static frame_header header_of(const frame_hello *h)
{
    uint8_t buf[FRAME_HEADER_SIZE + FRAME_MAX_CONTROL_BODY];
    frame_header hdr;
    cr_assert_gt(frame_encode_hello(buf, sizeof buf, h), 0);
    cr_assert_eq(frame_decode_header(buf, sizeof buf, &hdr), 0);
    return hdr;
}

/* Host `from` says HELLO to host `to`; returns the acceptor's verdict. */
static int hello(const hs_ctx *from, const hs_ctx *to, int target, char *why, size_t len)
{
    frame_hello h;
    hs_state st;
    cr_assert_eq(hs_hello(from, target, 5, 0, 42, &h, &st), 0);
    frame_header hdr = header_of(&h);
    return hs_check_hello(to, &hdr, &h, why, len);
}

Test(handshake, a_ring_host_accepts_its_left_neighbour_only)
{
    char why[512];
    hs_ctx b = {.cfg = &conf, .me = 1, .streams = 1, .mode = HS_RING};
    hs_ctx a = {.cfg = &conf, .me = 0, .streams = 1, .mode = HS_RING};
    hs_ctx c = {.cfg = &conf, .me = 2, .streams = 1, .mode = HS_RING};
    cr_assert_eq(hello(&a, &b, 1, why, sizeof why), 0, "%s", why);
    cr_assert_eq(hello(&c, &b, 1, why, sizeof why), RINGD_EMISMATCH);
    cr_assert(strstr(why, "ring positions disagree") != NULL, "%s", why);
    cr_assert(strstr(why, "expects its left neighbour \"a\"") != NULL, "%s", why);
}

Test(handshake, another_cluster_or_stream_count_is_refused_saying_why)
{
    char why[512];
    hs_ctx b = {.cfg = &conf, .me = 1, .streams = 1, .mode = HS_RING};
    hs_ctx a3 = {.cfg = &conf, .me = 0, .streams = 3, .mode = HS_RING};
    cr_assert_eq(hello(&a3, &b, 1, why, sizeof why), RINGD_EMISMATCH);
    cr_assert(strstr(why, "3 TCP streams") != NULL, "%s", why);

    cfg other = conf;
    other.cluster = "prod";
    hs_ctx a = {.cfg = &other, .me = 0, .streams = 1, .mode = HS_RING};
    cr_assert_eq(hello(&a, &b, 1, why, sizeof why), RINGD_EMISMATCH);
    cr_assert_str_eq(why, "cluster \"prod\" is not ours (\"test\")");
}

Test(handshake, a_key_on_one_side_only_is_refused_with_eauth_either_way)
{
    char why[512];
    auth_key k = key_of("0123456789abcdef0123");
    hs_ctx a = {.cfg = &conf, .me = 0, .streams = 1, .mode = HS_RING};
    hs_ctx b_key = {.cfg = &conf, .me = 1, .key = &k, .streams = 1, .mode = HS_RING};
    cr_assert_eq(hello(&a, &b_key, 1, why, sizeof why), RINGD_EAUTH);
    cr_assert(strstr(why, "requires a cluster key") != NULL, "%s", why);
    hs_ctx a_key = {.cfg = &conf, .me = 0, .key = &k, .streams = 1, .mode = HS_RING};
    hs_ctx b = {.cfg = &conf, .me = 1, .streams = 1, .mode = HS_RING};
    cr_assert_eq(hello(&a_key, &b, 1, why, sizeof why), RINGD_EAUTH);
}

/* The whole exchange between connector a and acceptor b; returns whether
 * a accepted b's answer, and in *b_ok whether b accepted a's. */
static int exchange(const hs_ctx *a, const hs_ctx *b, int *b_ok)
{
    frame_hello h;
    hs_state ast, bst;
    cr_assert_eq(hs_hello(a, b->me, 5, 0, 42, &h, &ast), 0);
    frame_welcome w;
    cr_assert_eq(hs_welcome(b, &h, 9, &w, &bst), 0);
    frame_auth au;
    int a_ok = hs_answer(a, &w, &ast, &au);
    *b_ok = hs_check_auth(b, &bst, &au);
    return a_ok;
}

Test(handshake, both_ends_prove_they_hold_the_same_key)
{
    auth_key k = key_of("0123456789abcdef0123");
    hs_ctx a = {.cfg = &conf, .me = 0, .key = &k, .streams = 1, .mode = HS_RING};
    hs_ctx b = {.cfg = &conf, .me = 1, .key = &k, .streams = 1, .mode = HS_RING};
    int b_ok;
    cr_assert(exchange(&a, &b, &b_ok));
    cr_assert(b_ok);
}

Test(handshake, a_different_key_fails_on_both_ends)
{
    auth_key k1 = key_of("0123456789abcdef0123"), k2 = key_of("0123456789abcdef0124");
    hs_ctx a = {.cfg = &conf, .me = 0, .key = &k1, .streams = 1, .mode = HS_RING};
    hs_ctx b = {.cfg = &conf, .me = 1, .key = &k2, .streams = 1, .mode = HS_RING};
    int b_ok;
    cr_assert_not(exchange(&a, &b, &b_ok));
    cr_assert_not(b_ok);
}

Test(handshake, an_answer_for_one_connection_does_not_fit_another)
{
    auth_key k = key_of("0123456789abcdef0123");
    hs_ctx a = {.cfg = &conf, .me = 0, .key = &k, .streams = 1, .mode = HS_RING};
    hs_ctx b = {.cfg = &conf, .me = 1, .key = &k, .streams = 1, .mode = HS_RING};
    frame_hello h1, h2;
    hs_state a1, a2, b1, b2;
    frame_welcome w1, w2;
    frame_auth au1;
    cr_assert_eq(hs_hello(&a, 1, 5, 0, 1, &h1, &a1), 0);
    cr_assert_eq(hs_hello(&a, 1, 5, 0, 2, &h2, &a2), 0);
    cr_assert_eq(hs_welcome(&b, &h1, 9, &w1, &b1), 0);
    cr_assert_eq(hs_welcome(&b, &h2, 9, &w2, &b2), 0);
    cr_assert(hs_answer(&a, &w1, &a1, &au1));
    cr_assert(hs_check_auth(&b, &b1, &au1));
    cr_assert_not(hs_check_auth(&b, &b2, &au1), "fresh nonces: a replayed answer fails");
}

Test(handshake, the_star_root_accepts_any_leaf_and_refuses_a_ring_host)
{
    char why[512];
    conf.star_root_index = 0;
    hs_ctx root = {.cfg = &conf, .me = 0, .streams = 1, .mode = HS_STAR};
    hs_ctx leaf = {.cfg = &conf, .me = 2, .streams = 1, .mode = HS_STAR};
    frame_hello h;
    hs_state st;
    cr_assert_eq(hs_hello(&leaf, 0, HS_STAR_EPOCH, 0, 7, &h, &st), 0);
    frame_header hdr = header_of(&h);
    cr_assert_eq(hs_check_hello(&root, &hdr, &h, why, sizeof why), 0, "%s", why);
    hs_ctx ring_host = {.cfg = &conf, .me = 3, .streams = 1, .mode = HS_RING};
    cr_assert_eq(hello(&ring_host, &root, 0, why, sizeof why), RINGD_EMISMATCH);
    cr_assert(strstr(why, "runs algorithm ring") != NULL, "%s", why);
}
