/*
 * test_keyed.c - keyed links carry every kind of collective right, with
 * each encryption, over one and over several TCP streams, ring and star
 * (issue 17, items 1-2). Run under ASan by tests/run.sh too: the sealing
 * and the in-place opening of frames touch every byte of every payload.
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringd.h"
#include "tests/harness/harness.h"
#include "tests/wire/wire_test.h"

#define N 3
#define COUNT 70001 /* float32 per rank: several 64 KiB segments, uneven chunks */

static harness H;

static void setup(void)
{
    harness_reset(&H);
}

static void teardown(void)
{
    harness_cleanup(&H);
}

TestSuite(keyed, .init = setup, .fini = teardown, .timeout = 300);

typedef struct {
    int star;
    char why[N][512];
} run_state;

static int fail(char *why, size_t len, const char *what, ringd_client *c, int rc)
{
    snprintf(why, len, "%s: %s: %s", what, ringd_errname(rc), ringd_last_error(c));
    return -1;
}

/* Small integers: exact in float32 whatever the order. */
static float value(int rank, size_t k)
{
    return (float)((rank + 1) * 100 + (int)(k % 89));
}

static int kinds_thread(int idx, void *arg)
{
    run_state *s = arg;
    char *why = s->why[idx];
    size_t wl = sizeof s->why[idx];
    ringd_client *c = wire_connect(&H, idx, 20000, why, wl);
    if (!c) return -1;
    float *buf = ringd_alloc(c, (size_t)N * COUNT * sizeof *buf);
    float *in = malloc((size_t)N * COUNT * sizeof *in);
    int rc = -1;
    if (!buf || !in) goto out;

    /* allreduce, sizes from one element to several segments */
    size_t sizes[] = {1, 7, 4096, COUNT};
    for (int t = 0; t < 4; t++) {
        for (size_t k = 0; k < sizes[t]; k++)
            buf[k] = value(idx, k);
        if ((rc = ringd_allreduce(c, buf, sizes[t], RINGD_FLOAT32, RINGD_SUM)) < 0) {
            fail(why, wl, "allreduce", c, rc);
            goto out;
        }
        for (size_t k = 0; k < sizes[t]; k++) {
            float want = 0;
            for (int r = 0; r < N; r++)
                want += value(r, k);
            if (buf[k] != want) {
                snprintf(why, wl, "allreduce of %zu: element %zu is %g, expected %g", sizes[t], k,
                         (double)buf[k], (double)want);
                rc = -1;
                goto out;
            }
        }
    }
    if (s->star) {
        rc = 0; /* the star runs allreduce and barrier only */
        goto out;
    }
    /* broadcast from rank 1 */
    for (size_t k = 0; k < COUNT; k++)
        buf[k] = value(idx, k);
    if ((rc = ringd_broadcast(c, buf, COUNT, RINGD_FLOAT32, 1)) < 0) {
        fail(why, wl, "broadcast", c, rc);
        goto out;
    }
    for (size_t k = 0; k < COUNT; k++)
        if (buf[k] != value(1, k)) {
            snprintf(why, wl, "broadcast: element %zu is %g", k, (double)buf[k]);
            rc = -1;
            goto out;
        }
    /* allgather */
    for (size_t k = 0; k < COUNT; k++)
        in[k] = value(idx, k);
    if ((rc = ringd_allgather(c, in, buf, COUNT, RINGD_FLOAT32)) < 0) {
        fail(why, wl, "allgather", c, rc);
        goto out;
    }
    for (int r = 0; r < N; r++)
        for (size_t k = 0; k < COUNT; k++)
            if (buf[(size_t)r * COUNT + k] != value(r, k)) {
                snprintf(why, wl, "allgather: rank %d's element %zu is %g", r, k,
                         (double)buf[(size_t)r * COUNT + k]);
                rc = -1;
                goto out;
            }
    /* reduce_scatter */
    for (size_t k = 0; k < (size_t)N * COUNT; k++)
        in[k] = value(idx, k);
    if ((rc = ringd_reduce_scatter(c, in, buf, COUNT, RINGD_FLOAT32, RINGD_SUM)) < 0) {
        fail(why, wl, "reduce_scatter", c, rc);
        goto out;
    }
    for (size_t k = 0; k < COUNT; k++) {
        size_t at = (size_t)idx * COUNT + k;
        float want = 0;
        for (int r = 0; r < N; r++)
            want += value(r, at);
        if (buf[k] != want) {
            snprintf(why, wl, "reduce_scatter: element %zu is %g, expected %g", k, (double)buf[k],
                     (double)want);
            rc = -1;
            goto out;
        }
    }
    rc = 0;
out:
    free(in);
    ringd_close(c);
    return rc;
}

/* Every kind on a keyed ring (or star) configured with extra_yaml; each
 * daemon's log says how its links are protected. */
static void run(const char *extra_yaml, int star, const char *log_says)
{
    static run_state s;
    char key[PATH_MAX];
    memset(&s, 0, sizeof s);
    s.star = star;
    cr_assert_eq(harness_init(&H, N, extra_yaml), 0, "%s", H.err);
    cr_assert_eq(harness_write_key(&H, "cluster.key", "0123456789abcdef-a-cluster-key", key,
                                   sizeof key),
                 0, "%s", H.err);
    FILE *f = fopen(H.config, "a");
    cr_assert_not_null(f);
    fprintf(f, "secret_file: %s\nsegment_size: 64KiB\ncollective_timeout: 30s\n", key);
    fclose(f);
    cr_assert_eq(harness_start(&H, harness_seed("keyed"), 50), 0, "%s", H.err);
    int rc = harness_run_threads(&H, N, kinds_thread, &s, 120000);
    for (int i = 0; i < N; i++)
        cr_expect_str_empty(s.why[i], "rank %d: %s", i, s.why[i]);
    cr_assert_eq(rc, 0, "a rank failed");
    cr_expect_eq(harness_wait_log(&H, 1, log_says, 5000), 0, "h1's log does not say \"%s\"",
                 log_says);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

Test(keyed, every_kind_is_right_with_every_frame_authenticated)
{
    run("", 0, "every frame authenticated");
}

Test(keyed, every_kind_is_right_with_aes_256_gcm_over_two_streams)
{
    run("encryption: aes-256-gcm\nstreams: 2\n", 0, "payloads encrypted, 2 TCP streams (aes-256-gcm)");
}

Test(keyed, every_kind_is_right_with_chacha20_poly1305)
{
    run("encryption: chacha20-poly1305\n", 0, "payloads encrypted (chacha20-poly1305)");
}

Test(keyed, the_star_encrypts_too)
{
    run("encryption: aes-256-gcm\nalgorithm: star\n", 1, "payloads encrypted");
}

Test(keyed, a_host_with_another_encryption_is_refused_saying_so)
{
    char key[PATH_MAX], other[PATH_MAX];
    cr_assert_eq(harness_init(&H, 2, NULL), 0, "%s", H.err);
    cr_assert_eq(harness_write_key(&H, "k", "0123456789abcdef-a-cluster-key", key, sizeof key), 0);
    FILE *f = fopen(H.config, "a");
    cr_assert_not_null(f);
    fprintf(f, "secret_file: %s\nencryption: aes-256-gcm\n", key);
    fclose(f);
    cr_assert_eq(harness_config_variant(&H, "other.yaml", "encryption: aes-256-gcm",
                                        "encryption: chacha20-poly1305", other, sizeof other),
                 0, "%s", H.err);
    char config[PATH_MAX];
    snprintf(config, sizeof config, "%s", H.config);
    snprintf(H.config, sizeof H.config, "%s", other);
    cr_assert_eq(harness_spawn(&H, 0), 0, "%s", H.err);
    snprintf(H.config, sizeof H.config, "%s", config);
    cr_assert_eq(harness_spawn(&H, 1), 0, "%s", H.err);
    cr_assert_eq(harness_wait_log(&H, 1,
                                  "\"h0\" uses encryption chacha20-poly1305 and this host "
                                  "aes-256-gcm; set the same encryption",
                                  10000),
                 0);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}
