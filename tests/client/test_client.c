/*
 * test_client.c - libringd (client/client.c) against a scripted fake daemon:
 * the handshake, shared memory registration, the allreduce paths (zero copy,
 * staged, empty) and how every kind of failure reaches the caller.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fake_daemon.h"
#include "ringd.h"

static fake_daemon F;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void start(void)
{
    cr_assert_eq(fake_start(&F), 0, "cannot start the fake daemon");
}

static void stop(void)
{
    fake_stop(&F);
}

TestSuite(connect, .init = start, .fini = stop, .timeout = 30);
TestSuite(alloc, .init = start, .fini = stop, .timeout = 30);
TestSuite(allreduce, .init = start, .fini = stop, .timeout = 30);
TestSuite(elastic, .init = start, .fini = stop, .timeout = 30);

static ringd_client *connect_ok(void)
{
    ringd_client *c = NULL;
    int rc = ringd_connect(F.path, &c);
    cr_assert_eq(rc, 0, "ringd_connect: %s: %s", ringd_errname(rc), ringd_last_error(NULL));
    cr_assert_not_null(c);
    return c;
}

/* Closes c, waits for the fake to see the end of the session, and checks
 * that it saw nothing wrong. */
static void finish(ringd_client *c)
{
    ringd_close(c);
    cr_assert_eq(fake_join(&F), 0);
    cr_assert_str_empty(F.problem, "the fake daemon saw: %s", F.problem);
}

/* ---- connect ---- */

Test(connect, fails_with_econnect_naming_a_missing_socket)
{
    ringd_client *c = (ringd_client *)&c;
    char path[200];
    snprintf(path, sizeof path, "%s/absent.sock", F.dir);
    cr_assert_eq(ringd_connect(path, &c), RINGD_ECONNECT);
    cr_assert_null(c);
    cr_assert_not_null(strstr(ringd_last_error(NULL), path), "%s", ringd_last_error(NULL));
    cr_assert_not_null(strstr(ringd_last_error(NULL), "RINGD_SOCKET"), "%s",
                       ringd_last_error(NULL));
}

Test(connect, uses_RINGD_SOCKET_when_the_path_is_null)
{
    setenv("RINGD_SOCKET", F.path, 1);
    ringd_client *c = NULL;
    cr_assert_eq(ringd_connect(NULL, &c), 0, "%s", ringd_last_error(NULL));
    finish(c);
    cr_assert_eq(F.sessions, 1);
}

Test(connect, sends_hello_and_takes_the_ranks_of_welcome)
{
    F.welcome.rank = 5;
    F.welcome.size = 8;
    F.welcome.local_rank = 1;
    F.welcome.local_size = 2;
    setenv("RINGD_LOCAL_RANK", "1", 1);
    setenv("LOCAL_RANK", "0", 1); /* RINGD_LOCAL_RANK wins */
    ringd_client *c = connect_ok();
    cr_assert_eq(ringd_rank(c), 5);
    cr_assert_eq(ringd_size(c), 8);
    cr_assert_eq(ringd_local_rank(c), 1);
    cr_assert_eq(ringd_local_size(c), 2);
    cr_assert_str_empty(ringd_last_error(c));
    finish(c);
    cr_assert_eq(F.hello.local_rank, 1);
    cr_assert_eq(F.hello.flags, 0);
    cr_assert_eq(F.hello.pid, (uint32_t)getpid());
    cr_assert_eq(F.requests, 0);
}

Test(connect, asks_for_LOCAL_RANK_without_RINGD_LOCAL_RANK)
{
    F.welcome.local_rank = 2;
    F.welcome.local_size = 4;
    F.welcome.size = 4;
    setenv("LOCAL_RANK", "2", 1);
    finish(connect_ok());
    cr_assert_eq(F.hello.local_rank, 2);
}

Test(connect, asks_for_any_local_rank_without_either_variable)
{
    finish(connect_ok());
    cr_assert_eq(F.hello.local_rank, -1);
}

Test(connect, returns_the_code_and_text_of_a_refusal)
{
    F.hello_action = HELLO_REFUSE;
    F.refuse_code = RINGD_EBUSY;
    snprintf(F.refuse_text, sizeof F.refuse_text, "local rank 0 is taken");
    ringd_client *c = NULL;
    cr_assert_eq(ringd_connect(F.path, &c), RINGD_EBUSY);
    cr_assert_null(c);
    cr_assert_not_null(strstr(ringd_last_error(NULL), "local rank 0 is taken"), "%s",
                       ringd_last_error(NULL));
}

Test(connect, rejects_a_bad_RINGD_LOCAL_RANK_before_connecting)
{
    const char *bad[] = {"abc", "-1", "1x", " ", "99999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        setenv("RINGD_LOCAL_RANK", bad[i], 1);
        ringd_client *c = NULL;
        cr_assert_eq(ringd_connect(F.path, &c), RINGD_EINVAL, "value '%s'", bad[i]);
        cr_assert_null(c);
        cr_assert_not_null(strstr(ringd_last_error(NULL), "RINGD_LOCAL_RANK"), "%s",
                           ringd_last_error(NULL));
    }
    cr_assert_eq(fake_join(&F), 0);
    cr_assert_eq(F.sessions, 0);
}

Test(connect, rejects_a_bad_LOCAL_RANK)
{
    setenv("LOCAL_RANK", "first", 1);
    ringd_client *c = NULL;
    cr_assert_eq(ringd_connect(F.path, &c), RINGD_EINVAL);
    cr_assert_not_null(strstr(ringd_last_error(NULL), "LOCAL_RANK=\"first\""), "%s",
                       ringd_last_error(NULL));
}

Test(connect, rejects_an_impossible_welcome)
{
    F.welcome.rank = 4;
    F.welcome.size = 4;
    ringd_client *c = NULL;
    cr_assert_eq(ringd_connect(F.path, &c), RINGD_EPROTO);
    cr_assert_null(c);
    cr_assert_not_null(strstr(ringd_last_error(NULL), "rank 4 of 4"), "%s", ringd_last_error(NULL));
}

Test(connect, reports_a_daemon_that_hangs_up_during_the_handshake)
{
    F.hello_action = HELLO_CLOSE;
    ringd_client *c = NULL;
    cr_assert_eq(ringd_connect(F.path, &c), RINGD_ECLOSED);
    cr_assert_not_null(strstr(ringd_last_error(NULL), "handshake"), "%s", ringd_last_error(NULL));
}

Test(connect, keeps_the_connect_error_per_thread_and_the_client_error_per_client)
{
    ringd_client *c = connect_ok();
    cr_assert_null(ringd_alloc(c, 0));
    cr_assert_not_null(strstr(ringd_last_error(c), "0 bytes"));
    ringd_client *d = NULL;
    cr_assert_eq(ringd_connect("/nonexistent/ringd.sock", &d), RINGD_ECONNECT);
    cr_assert_not_null(strstr(ringd_last_error(c), "0 bytes"));
    cr_assert_not_null(strstr(ringd_last_error(NULL), "/nonexistent/ringd.sock"));
    finish(c);
}

/* ---- alloc ---- */

Test(alloc, registers_a_sealed_memfd_of_whole_pages_that_the_daemon_sees)
{
    ringd_client *c = connect_ok();
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char *p = ringd_alloc(c, page + 100);
    cr_assert_not_null(p, "%s", ringd_last_error(c));
    cr_assert_eq((uintptr_t)p % 64, 0);
    for (size_t i = 0; i < page + 100; i++)
        cr_assert_eq(p[i], 0, "not zero-filled at %zu", i);
    for (size_t i = 0; i < 64; i++)
        p[i] = (unsigned char)(i * 3 + 1);
    ringd_free(c, p);
    finish(c);

    cr_assert_eq(F.n_registers, 1);
    cr_assert_eq(F.registers[0].region, 1);
    cr_assert_eq(F.registers[0].size, 2 * page);
    cr_assert_eq(F.region_fd_size, (long long)(2 * page));
    cr_assert_eq(F.region_seals & (F_SEAL_SHRINK | F_SEAL_GROW), F_SEAL_SHRINK | F_SEAL_GROW);
    cr_assert_eq(F.n_unregisters, 1);
    cr_assert_eq(F.unregisters[0].region, 1);
    for (size_t i = 0; i < 64; i++)
        cr_assert_eq(F.unregistered_head[i], (unsigned char)(i * 3 + 1), "byte %zu", i);
}

Test(alloc, numbers_regions_from_one_with_distinct_request_ids)
{
    ringd_client *c = connect_ok();
    void *a = ringd_alloc(c, 1), *b = ringd_alloc(c, 1);
    cr_assert(a && b && a != b);
    finish(c); /* ringd_close() frees both without UNREGISTER */
    cr_assert_eq(F.n_registers, 2);
    cr_assert_eq(F.registers[0].region, 1);
    cr_assert_eq(F.registers[1].region, 2);
    cr_assert_neq(F.registers[0].id, F.registers[1].id);
    cr_assert_eq(F.n_unregisters, 0);
    cr_assert(F.eof);
}

Test(alloc, returns_null_with_einval_for_zero_bytes)
{
    ringd_client *c = connect_ok();
    cr_assert_null(ringd_alloc(c, 0));
    cr_assert_not_null(strstr(ringd_last_error(c), "0 bytes"));
    finish(c);
    cr_assert_eq(F.requests, 0);
}

Test(alloc, returns_null_with_the_text_when_the_daemon_refuses)
{
    F.register_code = RINGD_ESHM;
    ringd_client *c = connect_ok();
    cr_assert_null(ringd_alloc(c, 4096));
    cr_assert_str_eq(ringd_last_error(c), "region refused by the fake daemon");
    finish(c);
}

Test(alloc, ignores_free_of_null_and_of_unknown_pointers)
{
    ringd_client *c = connect_ok();
    int local;
    ringd_free(c, NULL);
    ringd_free(c, &local);
    finish(c);
    cr_assert_eq(F.requests, 0);
}

/* ---- allreduce ---- */

Test(allreduce, stages_a_malloced_buffer_through_a_shared_region)
{
    ringd_client *c = connect_ok();
    size_t n = 1000;
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)i - 3.5f;
    cr_assert_eq(ringd_allreduce(c, x, n, RINGD_FLOAT32, RINGD_SUM), 0, "%s", ringd_last_error(c));
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(x[i], 2 * ((float)i - 3.5f), "x[%zu] = %g", i, x[i]);
    /* A second call of the same size reuses the staging region. */
    cr_assert_eq(ringd_allreduce(c, x, n, RINGD_FLOAT32, RINGD_MAX), 0, "%s", ringd_last_error(c));
    cr_assert_eq(x[10], 4 * (10 - 3.5f));
    free(x);
    finish(c);

    cr_assert_eq(F.n_registers, 1);
    cr_assert_eq(F.n_colls, 2);
    const msg_collective *m = &F.colls[0];
    cr_assert_eq(m->kind, MSG_COLL_ALLREDUCE);
    cr_assert_eq(m->dtype, RINGD_FLOAT32);
    cr_assert_eq(m->op, RINGD_SUM);
    cr_assert_eq(m->region, F.registers[0].region);
    cr_assert_eq(m->offset, 0);
    cr_assert_eq(m->count, n);
    cr_assert_eq(m->timeout_ms, 0);
    cr_assert_str_empty(m->name);
    cr_assert_eq(F.colls[1].op, RINGD_MAX);
    cr_assert_neq(F.colls[0].id, F.colls[1].id);
}

Test(allreduce, keeps_staging_regions_for_reuse_and_maps_a_bigger_one_when_needed)
{
    ringd_client *c = connect_ok();
    size_t page = (size_t)sysconf(_SC_PAGESIZE), small = page / 4, big = 3 * page;
    float *x = calloc(big, sizeof *x);
    x[0] = 1;
    x[big - 1] = 3;
    cr_assert_eq(ringd_allreduce(c, x, small, RINGD_FLOAT32, RINGD_SUM), 0);
    cr_assert_eq(ringd_allreduce(c, x, big, RINGD_FLOAT32, RINGD_SUM), 0, "%s",
                 ringd_last_error(c));
    cr_assert_eq(x[0], 4);
    cr_assert_eq(x[big - 1], 6);
    /* The small buffer fits the first staging region again. */
    cr_assert_eq(ringd_allreduce(c, x, small, RINGD_FLOAT32, RINGD_SUM), 0);
    free(x);
    finish(c);
    cr_assert_eq(F.n_registers, 2);
    cr_assert_eq(F.registers[0].size, page);
    cr_assert_geq(F.registers[1].size, big * sizeof(float));
    cr_assert_eq(F.n_unregisters, 0);
    cr_assert_eq(F.colls[1].region, F.registers[1].region);
    cr_assert_eq(F.colls[2].region, F.registers[0].region);
}

Test(allreduce, works_in_place_on_alloced_memory)
{
    ringd_client *c = connect_ok();
    float *x = ringd_alloc(c, 100 * sizeof *x);
    cr_assert_not_null(x);
    for (int i = 0; i < 100; i++)
        x[i] = (float)i;
    cr_assert_eq(ringd_allreduce(c, x + 16, 50, RINGD_FLOAT32, RINGD_SUM), 0, "%s",
                 ringd_last_error(c));
    cr_assert_eq(x[15], 15);
    cr_assert_eq(x[16], 32);
    cr_assert_eq(x[65], 130);
    cr_assert_eq(x[66], 66);
    finish(c);
    cr_assert_eq(F.n_registers, 1, "no staging region");
    cr_assert_eq(F.colls[0].region, F.registers[0].region);
    cr_assert_eq(F.colls[0].offset, 16 * sizeof(float));
    cr_assert_eq(F.colls[0].count, 50);
}

Test(allreduce, of_zero_elements_is_a_collective_on_region_zero)
{
    ringd_client *c = connect_ok();
    cr_assert_eq(ringd_allreduce(c, NULL, 0, RINGD_INT64, RINGD_PROD), 0, "%s",
                 ringd_last_error(c));
    finish(c);
    cr_assert_eq(F.n_colls, 1);
    cr_assert_eq(F.colls[0].region, 0);
    cr_assert_eq(F.colls[0].offset, 0);
    cr_assert_eq(F.colls[0].count, 0);
    cr_assert_eq(F.colls[0].dtype, RINGD_INT64);
    cr_assert_eq(F.n_registers, 0);
}

Test(allreduce, returns_the_daemons_error_with_its_text_and_stays_usable)
{
    F.coll_action = COLL_FAIL;
    F.reply_code = RINGD_EMISMATCH;
    snprintf(F.reply_text, sizeof F.reply_text,
             "allreduce #0: count differs: this host has 4, host b has 5");
    ringd_client *c = connect_ok();
    float x[4] = {1, 2, 3, 4};
    cr_assert_eq(ringd_allreduce(c, x, 4, RINGD_FLOAT32, RINGD_SUM), RINGD_EMISMATCH);
    cr_assert_str_eq(ringd_last_error(c), F.reply_text);
    cr_assert_eq(ringd_allreduce(c, x, 4, RINGD_FLOAT32, RINGD_SUM), RINGD_EMISMATCH,
                 "the session still works after a failed collective");
    finish(c);
    cr_assert_eq(F.n_colls, 2);
}

Test(allreduce, returns_the_code_of_a_session_error_instead_of_a_result)
{
    F.coll_action = COLL_ERROR;
    F.reply_code = RINGD_ESHUTDOWN;
    snprintf(F.reply_text, sizeof F.reply_text, "ringd is shutting down (SIGTERM)");
    ringd_client *c = connect_ok();
    float x[4] = {0};
    cr_assert_eq(ringd_allreduce(c, x, 4, RINGD_FLOAT32, RINGD_SUM), RINGD_ESHUTDOWN);
    cr_assert_not_null(strstr(ringd_last_error(c), "ringd is shutting down (SIGTERM)"), "%s",
                       ringd_last_error(c));
    finish(c);
}

Test(allreduce, returns_the_code_of_an_error_sent_before_the_daemon_hung_up)
{
    F.hello_action = HELLO_WELCOME_THEN_ERROR;
    F.refuse_code = RINGD_ESHUTDOWN;
    snprintf(F.refuse_text, sizeof F.refuse_text, "ringd on host a is shutting down");
    ringd_client *c = connect_ok();
    /* Wait until the socket is closed, so that the request meets a dead peer. */
    int64_t deadline = now_ms() + 10000;
    while (__atomic_load_n(&F.closed, __ATOMIC_SEQ_CST) == 0 && now_ms() < deadline)
        usleep(1000);
    float x[4] = {0};
    cr_assert_eq(ringd_allreduce(c, x, 4, RINGD_FLOAT32, RINGD_SUM), RINGD_ESHUTDOWN, "%s",
                 ringd_last_error(c));
    cr_assert_not_null(strstr(ringd_last_error(c), "ringd on host a is shutting down"), "%s",
                       ringd_last_error(c));
    cr_assert_eq(ringd_allreduce(c, x, 4, RINGD_FLOAT32, RINGD_SUM), RINGD_ESHUTDOWN);
    finish(c);
}

Test(allreduce, stages_a_buffer_that_is_misaligned_in_its_region)
{
    ringd_client *c = connect_ok();
    char *p = ringd_alloc(c, 64);
    float x = 1.5f;
    memcpy(p + 2, &x, sizeof x);
    cr_assert_eq(ringd_allreduce(c, p + 2, 1, RINGD_FLOAT32, RINGD_SUM), 0, "%s",
                 ringd_last_error(c));
    memcpy(&x, p + 2, sizeof x);
    cr_assert_eq(x, 3.0f);
    finish(c);
    cr_assert_eq(F.n_registers, 2, "the buffer went through a staging region");
    cr_assert_eq(F.colls[0].region, F.registers[1].region);
    cr_assert_eq(F.colls[0].offset, 0);
}

Test(allreduce, returns_eclosed_when_the_daemon_hangs_up_and_then_refuses_to_go_on)
{
    F.coll_action = COLL_CLOSE;
    ringd_client *c = connect_ok();
    float x[4] = {0};
    cr_assert_eq(ringd_allreduce(c, x, 4, RINGD_FLOAT32, RINGD_SUM), RINGD_ECLOSED);
    cr_assert_not_null(
        strstr(ringd_last_error(c), "ringd daemon closed the connection during allreduce"), "%s",
        ringd_last_error(c));
    cr_assert_eq(ringd_allreduce(c, x, 4, RINGD_FLOAT32, RINGD_SUM), RINGD_ECLOSED);
    cr_assert_not_null(strstr(ringd_last_error(c), "ringd_connect"), "%s", ringd_last_error(c));
    cr_assert_null(ringd_alloc(c, 10));
    finish(c);
    cr_assert_eq(F.n_colls, 1);
}

Test(allreduce, rejects_a_result_with_another_id)
{
    F.coll_action = COLL_WRONG_ID;
    ringd_client *c = connect_ok();
    cr_assert_eq(ringd_allreduce(c, NULL, 0, RINGD_FLOAT32, RINGD_SUM), RINGD_EPROTO);
    cr_assert_not_null(strstr(ringd_last_error(c), "request"), "%s", ringd_last_error(c));
    finish(c);
}

Test(allreduce, rejects_mean_on_int32_without_sending_anything)
{
    ringd_client *c = connect_ok();
    int32_t x[4] = {0};
    cr_assert_eq(ringd_allreduce(c, x, 4, RINGD_INT32, RINGD_MEAN), RINGD_EINVAL);
    cr_assert_str_eq(ringd_last_error(c), "allreduce: op mean needs a float dtype, got int32");
    finish(c);
    cr_assert_eq(F.requests, 0);
}

Test(allreduce, rejects_unknown_dtypes_and_ops_without_sending_anything)
{
    ringd_client *c = connect_ok();
    float x[4] = {0};
    cr_assert_eq(ringd_allreduce(c, x, 4, RINGD_DTYPE_COUNT, RINGD_SUM), RINGD_EINVAL);
    cr_assert_eq(ringd_allreduce(c, x, 4, RINGD_FLOAT32, (ringd_op)-1), RINGD_EINVAL);
    cr_assert_eq(ringd_allreduce(c, NULL, 4, RINGD_FLOAT32, RINGD_SUM), RINGD_EINVAL);
    finish(c);
    cr_assert_eq(F.requests, 0);
}

Test(allreduce, rejects_buffers_over_the_daemons_limit_without_sending_anything)
{
    F.welcome.max_bytes = 1000;
    ringd_client *c = connect_ok();
    double x[126] = {0};
    cr_assert_eq(ringd_allreduce(c, x, 126, RINGD_FLOAT64, RINGD_SUM), RINGD_ETOOBIG);
    cr_assert_not_null(strstr(ringd_last_error(c), "1000 bytes"), "%s", ringd_last_error(c));
    cr_assert_eq(ringd_allreduce(c, x, SIZE_MAX / 2, RINGD_INT32, RINGD_SUM), RINGD_ETOOBIG);
    finish(c);
    cr_assert_eq(F.requests, 0);
}

Test(allreduce, accepts_null_clients_and_close_of_null)
{
    cr_assert_eq(ringd_allreduce(NULL, NULL, 0, RINGD_FLOAT32, RINGD_SUM), RINGD_EINVAL);
    cr_assert_null(ringd_alloc(NULL, 1));
    ringd_free(NULL, NULL);
    ringd_close(NULL);
}

/* ---- elastic rings ---- */

/* The fake answers the next collective with RINGD_ERESIZED, moving this
 * client to rank 2 of 3 in membership epoch 7 (trailer or not), then keeps
 * the buffers of the collectives after it. */
static void script_resize(int trailer)
{
    F.welcome.rank = 1;
    F.welcome.size = 2;
    F.coll_action = COLL_FAIL;
    F.fail_count = 1;
    F.reply_code = RINGD_ERESIZED;
    snprintf(F.reply_text, sizeof F.reply_text,
             "ring resized to 3 hosts (3 ranks): h4 unreachable for 10 s");
    if (trailer) {
        F.reply_epoch = 7;
        F.reply_rank = 2;
        F.reply_size = 3;
    }
}

Test(elastic, a_resize_moves_the_client_to_its_new_rank_before_the_call_returns)
{
    script_resize(1);
    ringd_client *c = connect_ok();
    float x[4] = {0};
    cr_assert_eq(ringd_size(c), 2);
    cr_assert_eq(ringd_broadcast(c, x, 4, RINGD_FLOAT32, 2), RINGD_EINVAL, "no rank 2 of 2 yet");
    cr_assert_eq(ringd_allreduce(c, x, 4, RINGD_FLOAT32, RINGD_SUM), RINGD_ERESIZED);
    cr_assert_str_eq(ringd_last_error(c), F.reply_text);
    cr_assert_eq(ringd_rank(c), 2);
    cr_assert_eq(ringd_size(c), 3);
    cr_assert_eq(ringd_broadcast(c, x, 4, RINGD_FLOAT32, 2), 0, "%s", ringd_last_error(c));
    finish(c);
    cr_assert_eq(F.n_colls, 2);
}

Test(elastic, a_resize_reported_by_wait_moves_the_client_too)
{
    script_resize(1);
    ringd_client *c = connect_ok();
    float *x = ringd_alloc(c, 4 * sizeof *x);
    ringd_request *req;
    cr_assert_not_null(x);
    cr_assert_eq(ringd_iallreduce(c, x, 4, RINGD_FLOAT32, RINGD_SUM, &req), 0);
    cr_assert_eq(ringd_wait(req, 5000), RINGD_ERESIZED);
    cr_assert_eq(ringd_rank(c), 2);
    cr_assert_eq(ringd_size(c), 3);
    finish(c);
}

Test(elastic, a_resize_without_its_trailer_keeps_the_old_place)
{
    script_resize(0);
    ringd_client *c = connect_ok();
    float x[4] = {0};
    cr_assert_eq(ringd_allreduce(c, x, 4, RINGD_FLOAT32, RINGD_SUM), RINGD_ERESIZED);
    cr_assert_eq(ringd_rank(c), 1);
    cr_assert_eq(ringd_size(c), 2);
    finish(c);
}

Test(elastic, another_error_with_rank_and_size_moves_nothing)
{
    script_resize(1);
    F.reply_code = RINGD_ERING;
    ringd_client *c = connect_ok();
    float x[4] = {0};
    cr_assert_eq(ringd_allreduce(c, x, 4, RINGD_FLOAT32, RINGD_SUM), RINGD_ERING);
    cr_assert_eq(ringd_rank(c), 1);
    cr_assert_eq(ringd_size(c), 2);
    finish(c);
}

Test(elastic, membership_reports_the_daemons_membership_and_this_clients_place)
{
    F.welcome.rank = 1;
    F.welcome.size = 3;
    F.status.n_hosts = 4;
    F.status.n_live = 3;
    F.status.live = 0xb; /* hosts 0, 1 and 3 */
    F.status.members_epoch = 7;
    snprintf(F.status.hosts, sizeof F.status.hosts, "a b c d");
    ringd_client *c = connect_ok();
    ringd_membership_info m;
    cr_assert_eq(ringd_membership(c, &m), 0, "%s", ringd_last_error(c));
    cr_assert_eq(m.epoch, 7);
    cr_assert_eq(m.rank, 1);
    cr_assert_eq(m.size, 3);
    cr_assert_eq(m.n_live, 3);
    cr_assert_eq(m.n_configured, 4);
    cr_assert_eq(m.live, 0xb);
    cr_assert_eq(m.ready, 1);
    cr_assert_str_eq(m.hosts, "a b c d");
    finish(c);
    cr_assert_eq(F.types[0], MSG_STATUS_REQ);
}

Test(elastic, membership_of_a_ring_that_waits_or_that_this_host_left_is_not_ready)
{
    F.status.n_hosts = 2;
    F.status.n_live = 1;
    F.status.live = 1;
    F.status.left_ring = 1;
    ringd_client *c = connect_ok();
    ringd_membership_info m;
    cr_assert_eq(ringd_membership(c, &m), 0, "%s", ringd_last_error(c));
    cr_assert_eq(m.ready, 0);
    F.status.left_ring = 0;
    snprintf(F.status.waiting, sizeof F.status.waiting, "host b to connect");
    cr_assert_eq(ringd_membership(c, &m), 0, "%s", ringd_last_error(c));
    cr_assert_eq(m.ready, 0);
    finish(c);
}

Test(elastic, membership_of_a_daemon_without_elastic_rings_counts_every_host_in)
{
    F.status.n_hosts = 3;
    ringd_client *c = connect_ok();
    ringd_membership_info m;
    cr_assert_eq(ringd_membership(c, &m), 0, "%s", ringd_last_error(c));
    cr_assert_eq(m.n_live, 3);
    cr_assert_eq(m.n_configured, 3);
    cr_assert_eq(m.live, 0x7);
    cr_assert_eq(m.epoch, 0);
    cr_assert_eq(m.ready, 1);
    finish(c);
}

Test(elastic, membership_completes_a_collective_whose_result_comes_first)
{
    F.coll_action = COLL_DOUBLE;
    ringd_client *c = connect_ok();
    float *x = ringd_alloc(c, 4 * sizeof *x);
    ringd_request *req;
    ringd_membership_info m;
    cr_assert_not_null(x);
    x[0] = 1.5f;
    cr_assert_eq(ringd_iallreduce(c, x, 4, RINGD_FLOAT32, RINGD_SUM, &req), 0);
    cr_assert_eq(ringd_membership(c, &m), 0, "%s", ringd_last_error(c));
    cr_assert_eq(ringd_test(req), 0, "the collective completed on the way");
    cr_assert_eq(x[0], 3.0f);
    finish(c);
}

Test(elastic, membership_rejects_null_arguments)
{
    ringd_membership_info m;
    cr_assert_eq(ringd_membership(NULL, &m), RINGD_EINVAL);
    ringd_client *c = connect_ok();
    cr_assert_eq(ringd_membership(c, NULL), RINGD_EINVAL);
    finish(c);
}

Test(elastic, report_split_sends_the_split_and_completes_a_collective_answered_first)
{
    F.coll_action = COLL_DOUBLE;
    F.welcome.size = 3;
    ringd_client *c = connect_ok();
    float *x = ringd_alloc(c, 4 * sizeof *x);
    ringd_request *req;
    cr_assert_not_null(x);
    x[0] = 1.5f;
    cr_assert_eq(ringd_iallreduce(c, x, 4, RINGD_FLOAT32, RINGD_SUM, &req), 0);
    uint32_t rows[3] = {40, 40, 16};
    double rate[3] = {2000.5, 1990.25, 0};
    ringd_split s = {.step = 30,
                     .global_batch = 96,
                     .resplits = 3,
                     .every = 10,
                     .n_ranks = 3,
                     .rows = rows,
                     .rate = rate};
    cr_assert_eq(ringd_report_split(c, &s), 0, "%s", ringd_last_error(c));
    cr_assert_eq(ringd_test(req), 0, "the collective completed on the way");
    cr_assert_eq(x[0], 3.0f);
    finish(c);
    cr_assert_eq(F.n_balances, 1);
    const msg_split *got = &F.balance.split;
    cr_assert_eq(got->step, 30);
    cr_assert_eq(got->global_batch, 96);
    cr_assert_eq(got->resplits, 3);
    cr_assert_eq(got->every, 10);
    cr_assert_eq(got->n_ranks, 3);
    cr_assert_eq(got->shares[2].rows, 16);
    cr_assert_eq(got->shares[1].rate, 1990.25);
}

Test(elastic, report_split_refuses_a_split_that_is_no_split)
{
    ringd_client *c = connect_ok();
    uint32_t rows[2] = {40, 40};
    double rate[2] = {1, 1};
    ringd_split s = {.global_batch = 81, .n_ranks = 2, .rows = rows, .rate = rate};
    cr_assert_eq(ringd_report_split(c, &s), RINGD_EINVAL);
    cr_assert(strstr(ringd_last_error(c), "sum to 80, not the global batch of 81"), "%s",
              ringd_last_error(c));
    s.global_batch = 80;
    rate[1] = -1;
    cr_assert_eq(ringd_report_split(c, &s), RINGD_EINVAL);
    cr_assert(strstr(ringd_last_error(c), "rank 1's rate"), "%s", ringd_last_error(c));
    s.n_ranks = 0;
    cr_assert_eq(ringd_report_split(c, &s), RINGD_EINVAL);
    cr_assert_eq(ringd_report_split(c, NULL), RINGD_EINVAL);
    rate[1] = 1;
    s.n_ranks = 2;
    F.balance_code = RINGD_EINVAL;
    cr_assert_eq(ringd_report_split(c, &s), RINGD_EINVAL, "the daemon's refusal");
    cr_assert(strstr(ringd_last_error(c), "refused by the fake"), "%s", ringd_last_error(c));
    F.balance_code = 0;
    cr_assert_eq(ringd_report_split(c, &s), 0, "the session goes on: %s", ringd_last_error(c));
    finish(c);
    cr_assert_eq(F.n_balances, 2, "only the valid splits were sent");
}

/* ---- ringd_report_json() ---- */

TestSuite(report, .init = start, .fini = stop, .timeout = 30);

Test(report, returns_the_rings_report_as_json_from_an_observer_session)
{
    static msg_report m;
    memset(&m, 0, sizeof m);
    m.count = 1;
    m.n_hosts = 1;
    m.flags = MSG_REPORT_HAS_PART;
    snprintf(m.cluster, sizeof m.cluster, "c");
    snprintf(m.host, sizeof m.host, "a");
    m.part = (summary_part){.parts = 1,
                            .boot_us = 1,
                            .version = 1,
                            .at_us = 20000000,
                            .job_us = 10000000,
                            .window_ms = 60000,
                            .local_size = 1,
                            .n = 1};
    m.part.ranks[0].rank = 0;
    m.part.ranks[0].flags = SUMMARY_RANK_CONNECTED;
    m.part.ranks[0].life.compute_us = 8000000;
    m.part.ranks[0].life.transfer_us = 2000000;
    F.reports = &m;
    F.n_reports = 1;
    char *json = NULL;
    cr_assert_eq(ringd_report_json(F.path, &json), 0, "%s", ringd_last_error(NULL));
    cr_assert_not_null(json);
    cr_assert_not_null(strstr(json, "\"speedup\": 0.800000"), "%s", json);
    cr_assert_not_null(strstr(json, "\"ranks\": [{\"rank\": 0, \"host\": \"a\""), "%s", json);
    ringd_report_free(json);
    cr_assert_eq(fake_join(&F), 0);
    cr_assert_str_empty(F.problem, "%s", F.problem);
    cr_assert_eq(F.hello.flags, MSG_HELLO_OBSERVER);
}

Test(report, says_why_when_there_is_none)
{
    char *json = (char *)"untouched";
    cr_assert_eq(ringd_report_json("/nonexistent/ringd.sock", &json), RINGD_ECONNECT);
    cr_assert_null(json);
    cr_assert_not_null(strstr(ringd_last_error(NULL), "/nonexistent/ringd.sock"), "%s",
                       ringd_last_error(NULL));
    cr_assert_eq(ringd_report_json(F.path, NULL), RINGD_EINVAL);
    ringd_report_free(NULL);
}
