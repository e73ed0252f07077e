/*
 * test_ringctl.c - the ringctl command line (client/ringctl*.c), run as a
 * process against the fake daemon: status in words and JSON, the
 * verification of every collective command and the fields of its requests,
 * help and exit codes.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fake_daemon.h"
#include "ringd.h"

#define RUN_TIMEOUT_MS 20000

static fake_daemon F;
static char out[8192], err[8192];

static void start(void)
{
    cr_assert_eq(fake_start(&F), 0, "cannot start the fake daemon");
}

static void stop(void)
{
    fake_stop(&F);
}

TestSuite(ringctl, .init = start, .fini = stop, .timeout = 60);

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Runs ringctl with the NULL-terminated arguments, captures stdout into out
 * and stderr into err, and returns its exit status. */
static int ringctl(const char *arg, ...)
{
    const char *argv[32] = {RINGCTL_BIN};
    int argc = 1;
    va_list ap;
    va_start(ap, arg);
    for (const char *a = arg; a && argc < 31; a = va_arg(ap, const char *))
        argv[argc++] = a;
    va_end(ap);

    int po[2], pe[2];
    cr_assert_eq(pipe(po), 0);
    cr_assert_eq(pipe(pe), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        dup2(po[1], 1);
        dup2(pe[1], 2);
        close(po[0]), close(pe[0]), close(po[1]), close(pe[1]);
        execv(RINGCTL_BIN, (char *const *)argv);
        _exit(127);
    }
    close(po[1]);
    close(pe[1]);
    size_t no = 0, ne = 0;
    int64_t deadline = now_ms() + RUN_TIMEOUT_MS;
    struct pollfd p[2] = {{.fd = po[0], .events = POLLIN}, {.fd = pe[0], .events = POLLIN}};
    while ((p[0].fd >= 0 || p[1].fd >= 0) && now_ms() < deadline) {
        if (poll(p, 2, (int)(deadline - now_ms())) <= 0) continue;
        for (int i = 0; i < 2; i++) {
            if (p[i].fd < 0 || !p[i].revents) continue;
            char *buf = i ? err : out;
            size_t *n = i ? &ne : &no;
            ssize_t r = read(p[i].fd, buf + *n, sizeof out - 1 - *n);
            if (r > 0) {
                *n += (size_t)r;
            } else {
                close(p[i].fd);
                p[i].fd = -1;
            }
        }
    }
    out[no] = err[ne] = '\0';
    int timed_out = p[0].fd >= 0 || p[1].fd >= 0;
    if (timed_out) kill(pid, SIGKILL);
    for (int i = 0; i < 2; i++)
        if (p[i].fd >= 0) close(p[i].fd);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    cr_assert(!timed_out, "ringctl ran over %d ms; stderr: %s", RUN_TIMEOUT_MS, err);
    cr_assert(WIFEXITED(status), "ringctl died: status 0x%x; stderr: %s", status, err);
    return WEXITSTATUS(status);
}

static void demo_status(void)
{
    msg_status *s = &F.status;
    snprintf(s->cluster, sizeof s->cluster, "demo");
    snprintf(s->host, sizeof s->host, "b");
    snprintf(s->left, sizeof s->left, "a");
    snprintf(s->right, sizeof s->right, "c");
    s->host_index = 1;
    s->n_hosts = 4;
    s->left_state = MSG_LINK_UP;
    s->right_state = MSG_LINK_UP;
    s->epoch = 1;
    s->clients = 1;
    s->local_size = 1;
    s->collectives_done = 12;
    s->bytes_in = 129394278; /* 123.4 MiB */
    s->bytes_out = 129394278;
    s->uptime_ms = 63000;
    s->left_age_ms = 62000;
    s->right_age_ms = 61500;
    s->last_error_age_ms = MSG_NO_AGE;
    s->next_seq = 12;
    s->n_done = 4;
    for (int h = 0; h < 4; h++)
        s->done[h] = 12;
}

Test(ringctl, status_describes_the_ring_in_words_as_an_observer)
{
    demo_status();
    cr_assert_eq(ringctl("--socket", F.path, "status", NULL), 0, "stderr: %s", err);
    cr_assert_str_eq(out, "cluster demo, host b (2 of 4), epoch 1, next collective #12\n"
                          "left  a: up for 1m 2s\n"
                          "right c: up for 1m 1s\n"
                          "completed in this epoch, by host: 12 12 12 12\n"
                          "clients 1/1, collectives 12 done, 0 failed\n"
                          "bytes in 123.4 MiB, out 123.4 MiB, uptime 1m 3s, reconnects 0\n"
                          "rates in 0 B/s, out 0 B/s\n"
                          "last error: -\n");
    cr_assert_eq(fake_join(&F), 0);
    cr_assert_str_empty(F.problem, "%s", F.problem);
    cr_assert_eq(F.hello.flags, MSG_HELLO_OBSERVER);
    cr_assert_eq(F.requests, 1);
    cr_assert_eq(F.types[0], MSG_STATUS_REQ);
}

Test(ringctl, status_says_what_the_last_reload_changed_or_why_it_was_refused)
{
    demo_status();
    F.status.reloads = 2;
    F.status.reload_age_ms = 5000;
    snprintf(F.status.reload_said, sizeof F.status.reload_said, "segment_size 256KiB -> 1MiB");
    cr_assert_eq(ringctl("--socket", F.path, "status", NULL), 0, "stderr: %s", err);
    cr_assert_not_null(
        strstr(out, "last reload (5s ago, 2 since start): segment_size 256KiB -> 1MiB\n"), "%s",
        out);
    F.status.reload_refused = 1;
    snprintf(F.status.reload_said, sizeof F.status.reload_said,
             "/etc/ringd/ringd.yaml:3:1: hosts: expected a list");
    cr_assert_eq(ringctl("--socket", F.path, "status", "--json", NULL), 0, "stderr: %s", err);
    cr_assert_not_null(strstr(out, ",\"reloads\":2,\"last_reload\":{\"age_ms\":5000,"
                                   "\"refused\":true,\"said\":\"/etc/ringd/ringd.yaml:3:1: "
                                   "hosts: expected a list\"},\"balance\":null}\n"),
                       "%s", out);
    cr_assert_eq(ringctl("--socket", F.path, "status", NULL), 0, "stderr: %s", err);
    cr_assert_not_null(strstr(out, "last reload (5s ago, 2 since start): refused, running the "
                                   "configuration loaded before: /etc/ringd/ringd.yaml:3:1: "),
                       "%s", out);
}

Test(ringctl, status_shows_links_that_are_down_and_the_last_error)
{
    demo_status();
    F.status.right_state = MSG_LINK_CONNECTING;
    F.status.right_age_ms = 3000;
    F.status.left_state = MSG_LINK_DOWN;
    F.status.left_age_ms = 40000;
    snprintf(F.status.left_reason, sizeof F.status.left_reason, "connection reset by peer");
    F.status.uptime_ms = 90061000; /* 1d 1h 1m 1s */
    F.status.bytes_in = 512;
    snprintf(F.status.last_error, sizeof F.status.last_error, "allreduce #7: timed out");
    F.status.last_error_age_ms = 125000;
    setenv("RINGD_SOCKET", F.path, 1);
    cr_assert_eq(ringctl("status", NULL), 0, "stderr: %s", err);
    cr_assert_not_null(strstr(out, "left  a: down for 40s: connection reset by peer\n"
                                   "right c: connecting for 3s\n"),
                       "%s", out);
    cr_assert_not_null(strstr(out, "bytes in 512 B, out 123.4 MiB, uptime 1d 1h 1m 1s"), "%s", out);
    cr_assert_not_null(strstr(out, "last error (2m 5s ago): allreduce #7: timed out\n"), "%s", out);
}

Test(ringctl, status_says_a_link_was_refused_and_what_the_ring_waits_for)
{
    demo_status();
    F.status.right_state = MSG_LINK_REFUSED;
    F.status.right_age_ms = 120000;
    snprintf(F.status.right_reason, sizeof F.status.right_reason,
             "refused by c: wrong cluster key");
    F.status.left_state = MSG_LINK_DOWN;
    F.status.left_age_ms = 5000;
    snprintf(F.status.waiting, sizeof F.status.waiting, "rank 2 (pid 4242) on host c exited");
    F.status.done[2] = 11;
    cr_assert_eq(ringctl("--socket", F.path, "status", NULL), 0, "stderr: %s", err);
    cr_assert_not_null(strstr(out, "left  a: down for 5s: it has not connected\n"
                                   "right c: refused for 2m 0s: refused by c: wrong cluster key\n"
                                   "ring not ready: rank 2 (pid 4242) on host c exited\n"
                                   "completed in this epoch, by host: 12 12 11 12\n"),
                       "%s", out);
}

Test(ringctl, status_json_has_every_field_with_strings_escaped)
{
    demo_status();
    snprintf(F.status.last_error, sizeof F.status.last_error,
             "say \"hi\"\\\n\t\x01 caf\xc3\xa9 \xff!");
    cr_assert_eq(ringctl("--socket", F.path, "status", "--json", NULL), 0, "stderr: %s", err);
    cr_assert_str_eq(out,
                     "{\"id\":1,\"cluster\":\"demo\",\"host\":\"b\",\"left\":\"a\",\"right\":\"c\","
                     "\"host_index\":1,\"n_hosts\":4,\"left_state\":\"up\",\"right_state\":\"up\","
                     "\"epoch\":1,\"clients\":1,\"local_size\":1,\"collectives_done\":12,"
                     "\"collectives_failed\":0,\"bytes_in\":129394278,\"bytes_out\":129394278,"
                     "\"uptime_ms\":63000,\"reconnects\":0,"
                     "\"last_error\":\"say \\\"hi\\\"\\\\\\n\\t\\u0001 caf\xc3\xa9 \\ufffd!\","
                     "\"rate_in\":0,\"rate_out\":0,\"waits\":0,\"wait_sum_us\":0,\"recent\":[],"
                     "\"left_reason\":\"\",\"right_reason\":\"\",\"left_age_ms\":62000,"
                     "\"right_age_ms\":61500,\"last_error_age_ms\":null,\"next_seq\":12,"
                     "\"waiting\":\"\",\"done\":[12,12,12,12],\"members_epoch\":0,"
                     "\"min_hosts\":0,\"resizes\":0,\"left_ring\":false,\"last_resize\":\"\","
                     "\"live_hosts\":null,\"out_hosts\":null,\"reloads\":0,"
                     "\"last_reload\":null,\"balance\":null}\n");
}

/* demo_status() as an elastic ring of five hosts, d out of it for 12 s. */
static void demo_elastic(void)
{
    demo_status();
    msg_status *s = &F.status;
    s->n_hosts = 5;
    s->n_live = 4;
    s->min_hosts = 3;
    s->live = 0x17; /* a b c e */
    s->members_epoch = 9;
    s->resizes = 2;
    snprintf(s->resize_why, sizeof s->resize_why,
             "ring resized to 4 hosts (4 ranks): d unreachable for 10 s");
    s->n_out = 5;
    for (int h = 0; h < 5; h++)
        s->out_age_ms[h] = h == 3 ? 12000 : MSG_NO_AGE;
    snprintf(s->hosts, sizeof s->hosts, "a b c d e");
}

Test(ringctl, status_says_which_hosts_are_out_of_an_elastic_ring_and_why)
{
    demo_elastic();
    cr_assert_eq(ringctl("--socket", F.path, "status", NULL), 0, "stderr: %s", err);
    cr_assert_not_null(strstr(out, "right c: up for 1m 1s\n"
                                   "hosts: 4 of 5 in the ring (min_hosts 3)\n"
                                   "out: d for 12s\n"
                                   "last resize (2 since start, membership epoch 9): ring resized "
                                   "to 4 hosts (4 ranks): d unreachable for 10 s\n"
                                   "completed in this epoch"),
                       "%s", out);
    cr_assert_null(strstr(out, "left the ring"), "%s", out);
}

Test(ringctl, status_says_that_this_host_left_the_ring)
{
    demo_elastic();
    F.status.left_ring = 1;
    F.status.live = 0x1d; /* b (this host) left */
    F.status.out_age_ms[3] = MSG_NO_AGE;
    F.status.out_age_ms[1] = 2000;
    cr_assert_eq(ringctl("--socket", F.path, "status", NULL), 0, "stderr: %s", err);
    cr_assert_not_null(strstr(out, "left the ring (ringctl join to return)\n"
                                   "hosts: 4 of 5 in the ring (min_hosts 3)\n"
                                   "out: b for 2s\n"),
                       "%s", out);
}

Test(ringctl, status_of_a_whole_elastic_ring_shows_only_its_last_resize)
{
    demo_elastic();
    F.status.n_live = 5;
    F.status.live = 0x1f;
    cr_assert_eq(ringctl("--socket", F.path, "status", NULL), 0, "stderr: %s", err);
    cr_assert_null(strstr(out, "hosts:"), "%s", out);
    cr_assert_null(strstr(out, "out:"), "%s", out);
    cr_assert_not_null(strstr(out, "last resize (2 since start"), "%s", out);
}

Test(ringctl, status_json_lists_the_hosts_in_and_out_of_the_ring)
{
    demo_elastic();
    cr_assert_eq(ringctl("--socket", F.path, "status", "--json", NULL), 0, "stderr: %s", err);
    cr_assert_not_null(strstr(out,
                              ",\"members_epoch\":9,\"min_hosts\":3,\"resizes\":2,"
                              "\"left_ring\":false,\"last_resize\":\"ring resized to 4 "
                              "hosts (4 ranks): d unreachable for 10 s\",\"live_hosts\":[\"a\","
                              "\"b\",\"c\",\"e\"],\"out_hosts\":[{\"name\":\"d\","
                              "\"out_s\":12.000}],\"reloads\":0,\"last_reload\":null,"
                              "\"balance\":null}\n"),
                       "%s", out);
}

/* Three ranks of a balanced job, the last at half the speed of the others. */
static void demo_balance(void)
{
    demo_status();
    F.status.balance_age_ms = 2000;
    F.status.split = (msg_split){.step = 40,
                                 .global_batch = 100,
                                 .resplits = 4,
                                 .every = 10,
                                 .n_ranks = 3,
                                 .shares = {{40, 2000}, {40, 2000}, {20, 1000.5}}};
}

Test(ringctl, status_shows_each_ranks_share_and_speed_of_a_balanced_job)
{
    demo_balance();
    cr_assert_eq(ringctl("--socket", F.path, "status", NULL), 0, "stderr: %s", err);
    cr_assert_not_null(strstr(out, "balanced batches (reported 2s ago): step 40, global batch 100 "
                                   "rows, 4 re-splits (every 10 steps)\n"
                                   "  rank      rows   share        rows/s   compute/step\n"
                                   "     0        40   40.0%        2000.0      20.000 ms\n"
                                   "     1        40   40.0%        2000.0      20.000 ms\n"
                                   "     2        20   20.0%        1000.5      19.990 ms\n"),
                       "%s", out);
    F.status.split.every = 0;
    F.status.split.shares[2].rate = 0;
    cr_assert_eq(ringctl("--socket", F.path, "status", NULL), 0, "stderr: %s", err);
    cr_assert_not_null(strstr(out, "(equal shares, never re-split)\n"), "%s", out);
    cr_assert_not_null(strstr(out, "     2        20   20.0%             -              -\n"), "%s",
                       out);
}

Test(ringctl, status_json_has_the_split_of_a_balanced_job)
{
    demo_balance();
    cr_assert_eq(ringctl("--socket", F.path, "status", "--json", NULL), 0, "stderr: %s", err);
    cr_assert_not_null(strstr(out, ",\"balance\":{\"age_ms\":2000,\"step\":40,\"global_batch\":100,"
                                   "\"resplits\":4,\"every\":10,\"n_ranks\":3,\"ranks\":["
                                   "{\"rank\":0,\"rows\":40,\"rate\":2000},"
                                   "{\"rank\":1,\"rows\":40,\"rate\":2000},"
                                   "{\"rank\":2,\"rows\":20,\"rate\":1000.5}]}}\n"),
                       "%s", out);
}

Test(ringctl, leave_asks_the_daemon_as_an_observer_and_prints_its_answer)
{
    snprintf(F.leave_text, sizeof F.leave_text, "b left the ring; 3 hosts go on");
    cr_assert_eq(ringctl("--socket", F.path, "leave", NULL), 0, "stderr: %s", err);
    cr_assert_str_eq(out, "b left the ring; 3 hosts go on\n");
    cr_assert_eq(fake_join(&F), 0);
    cr_assert_str_empty(F.problem, "%s", F.problem);
    cr_assert_eq(F.hello.flags, MSG_HELLO_OBSERVER);
    cr_assert_eq(F.types[0], MSG_LEAVE_REQ);
    cr_assert_eq(F.n_leaves, 1);
    cr_assert_eq(F.leave.action, MSG_LEAVE);
}

Test(ringctl, join_asks_to_return)
{
    cr_assert_eq(ringctl("--socket", F.path, "join", NULL), 0, "stderr: %s", err);
    cr_assert_str_eq(out, "this host joins the ring\n");
    cr_assert_eq(fake_join(&F), 0);
    cr_assert_eq(F.leave.action, MSG_JOIN);
}

Test(ringctl, leave_refused_exits_1_with_the_daemons_reason)
{
    F.leave_code = RINGD_EINVAL;
    snprintf(F.leave_text, sizeof F.leave_text,
             "cannot leave: the ring would have 2 hosts, under min_hosts 3");
    cr_assert_eq(ringctl("--socket", F.path, "leave", NULL), 1);
    cr_assert_str_empty(out);
    cr_assert_not_null(strstr(err, "under min_hosts 3"), "%s", err);
}

Test(ringctl, leave_and_join_take_no_arguments)
{
    cr_assert_eq(ringctl("--socket", F.path, "leave", "now", NULL), 2);
    cr_assert_eq(ringctl("--socket", F.path, "join", "--json", NULL), 2);
    cr_assert_eq(ringctl("join", "--help", NULL), 0);
    cr_assert_not_null(strstr(out, "ringctl join"), "%s", out);
}

Test(ringctl, status_without_a_daemon_fails_with_status_1_naming_the_socket)
{
    cr_assert_eq(ringctl("--socket", "/nonexistent/ringd.sock", "status", NULL), 1);
    cr_assert_str_empty(out);
    cr_assert_not_null(strstr(err, "/nonexistent/ringd.sock"), "%s", err);
}

Test(ringctl, allreduce_verifies_every_dtype_and_op_on_a_ring_of_one)
{
    F.coll_action = COLL_KEEP;
    for (int t = 0; t < RINGD_DTYPE_COUNT; t++) {
        for (int o = 0; o < RINGD_OP_COUNT; o++) {
            int is_float = t >= RINGD_FLOAT16;
            if ((o == RINGD_MEAN || o == RINGD_WMEAN) && !is_float) continue;
            const char *dt = ringd_dtype_name((ringd_dtype)t), *op = ringd_op_name((ringd_op)o);
            cr_assert_eq(ringctl("--socket", F.path, "allreduce", "--count", "1000", "--dtype", dt,
                                 "--op", op, "--iters", "2", "--warmup", "0",
                                 o % 2 ? "--copy" : "--quiet", NULL),
                         0, "%s %s: %s", dt, op, err);
            if (o % 2 == 0) {
                cr_assert_str_empty(out, "--quiet printed: %s", out);
                continue;
            }
            char want[128];
            snprintf(want, sizeof want, "allreduce 1000 x %s %s, 1 rank: ok, median ", dt, op);
            cr_assert_eq(strncmp(out, want, strlen(want)), 0, "%s", out);
            cr_assert_not_null(strstr(out, " MB/s, busbw 0.0 MB/s\n"), "%s", out);
        }
    }
    cr_assert_eq(fake_join(&F), 0);
    cr_assert_str_empty(F.problem, "%s", F.problem);
}

Test(ringctl, allreduce_reports_the_first_wrong_element_with_status_1)
{
    F.coll_action = COLL_DOUBLE;
    cr_assert_eq(ringctl("--socket", F.path, "allreduce", "--count", "100", NULL), 1);
    cr_assert_not_null(strstr(err, "wrong result at index 0: expected -2, got -4"), "%s", err);
}

Test(ringctl, allreduce_reports_the_daemons_error_with_status_1)
{
    F.coll_action = COLL_FAIL;
    F.reply_code = RINGD_ERING;
    snprintf(F.reply_text, sizeof F.reply_text, "allreduce #0: ring is down: host c is gone");
    cr_assert_eq(ringctl("--socket", F.path, "allreduce", "--count", "0", NULL), 1);
    cr_assert_not_null(strstr(err, "allreduce #0: ring is down: host c is gone"), "%s", err);
}

Test(ringctl, usage_errors_exit_with_status_2)
{
    cr_assert_eq(ringctl(NULL), 2);
    cr_assert_eq(ringctl("frobnicate", NULL), 2);
    cr_assert_not_null(strstr(err, "frobnicate"), "%s", err);
    cr_assert_eq(ringctl("status", "--bogus", NULL), 2);
    cr_assert_eq(ringctl("status", "extra", NULL), 2);
    cr_assert_eq(ringctl("allreduce", "--count", "ten", NULL), 2);
    cr_assert_eq(ringctl("allreduce", "--count", "-1", NULL), 2);
    cr_assert_eq(ringctl("allreduce", "--iters", "0", NULL), 2);
    cr_assert_eq(ringctl("allreduce", "--dtype", "float128", NULL), 2);
    cr_assert_eq(ringctl("allreduce", "--op", "xor", NULL), 2);
    cr_assert_eq(ringctl("allreduce", "--op", "mean", "--dtype", "int8", NULL), 2);
    cr_assert_not_null(strstr(err, "mean"), "%s", err);
}

/* The fake answers every collective by leaving the buffer as it is: right
 * for a ring of one rank, and for the root of a broadcast. */

Test(ringctl, broadcast_sends_its_root_and_count_and_verifies_on_the_root)
{
    F.coll_action = COLL_KEEP;
    F.welcome.rank = 2;
    F.welcome.size = 4;
    cr_assert_eq(ringctl("--socket", F.path, "broadcast", "--count", "1000", "--root", "2",
                         "--dtype", "int32", "--iters", "2", "--warmup", "1", NULL),
                 0, "%s", err);
    const char *want = "broadcast 1000 x int32 from rank 2, 4 ranks: ok, median ";
    cr_assert_eq(strncmp(out, want, strlen(want)), 0, "%s", out);
    /* A broadcast's bus bandwidth is its algorithm bandwidth. */
    const char *alg = strstr(out, "algbw "), *bus = strstr(out, "busbw ");
    cr_assert(alg && bus, "%s", out);
    cr_assert_eq(strcspn(alg + 6, " "), strcspn(bus + 6, " "), "%s", out);
    cr_assert_eq(strncmp(alg + 6, bus + 6, strcspn(alg + 6, " ")), 0, "%s", out);
    cr_assert_eq(fake_join(&F), 0);
    cr_assert_str_empty(F.problem, "%s", F.problem);
    cr_assert_eq(F.n_colls, 3);
    for (int i = 0; i < F.n_colls; i++) {
        cr_assert_eq(F.colls[i].kind, RINGD_COLL_BROADCAST);
        cr_assert_eq(F.colls[i].root, 2);
        cr_assert_eq(F.colls[i].count, 1000);
        cr_assert_eq(F.colls[i].dtype, RINGD_INT32);
    }
}

Test(ringctl, broadcast_reports_an_element_that_did_not_come_from_the_root)
{
    F.coll_action = COLL_KEEP;
    F.welcome.size = 2;
    /* Rank 0 starts with 99s, not root 1's data, and the fake keeps them. */
    cr_assert_eq(ringctl("--socket", F.path, "broadcast", "--root", "1", "--count", "10", NULL), 1);
    cr_assert_not_null(
        strstr(err, "broadcast 1 of 6: wrong result at index 0: expected -1, got 99"), "%s", err);
}

Test(ringctl, broadcast_from_a_root_outside_the_ring_is_a_usage_error)
{
    cr_assert_eq(ringctl("--socket", F.path, "broadcast", "--root", "5", NULL), 2);
    cr_assert_not_null(strstr(err, "--root 5: the ring has 1 rank (0..0)"), "%s", err);
    cr_assert_eq(fake_join(&F), 0);
    cr_assert_eq(F.n_colls, 0);
}

Test(ringctl, allgather_and_reduce_scatter_verify_every_dtype_and_op_on_a_ring_of_one)
{
    F.coll_action = COLL_KEEP;
    int runs = 0;
    for (int t = 0; t < RINGD_DTYPE_COUNT; t++) {
        const char *dt = ringd_dtype_name((ringd_dtype)t);
        cr_assert_eq(ringctl("--socket", F.path, "allgather", "--count", "1000", "--dtype", dt,
                             "--iters", "1", "--warmup", "0", t % 2 ? "--copy" : "--quiet", NULL),
                     0, "allgather %s: %s", dt, err);
        runs++;
        char want[128];
        snprintf(want, sizeof want, "allgather 1000 x %s per rank, 1 rank: ok, median ", dt);
        if (t % 2) cr_assert_eq(strncmp(out, want, strlen(want)), 0, "%s", out);
        for (int o = 0; o < RINGD_OP_COUNT; o++) {
            if ((o == RINGD_MEAN || o == RINGD_WMEAN) && t < RINGD_FLOAT16) continue;
            const char *op = ringd_op_name((ringd_op)o);
            cr_assert_eq(ringctl("--socket", F.path, "reduce_scatter", "--count", "1000", "--dtype",
                                 dt, "--op", op, "--iters", "1", "--warmup", "0",
                                 o % 2 ? "--copy" : "--quiet", NULL),
                         0, "reduce_scatter %s %s: %s", dt, op, err);
            runs++;
            snprintf(want, sizeof want, "reduce_scatter 1000 x %s %s per rank, 1 rank: ok, ", dt,
                     op);
            if (o % 2) cr_assert_eq(strncmp(out, want, strlen(want)), 0, "%s", out);
        }
    }
    cr_assert_eq(fake_join(&F), 0);
    cr_assert_str_empty(F.problem, "%s", F.problem);
    cr_assert_eq(F.n_colls, runs < FAKE_MAX_LOG ? runs : FAKE_MAX_LOG);
    /* Each names its kind and the count per rank. */
    cr_assert_eq(F.colls[0].kind, RINGD_COLL_ALLGATHER);
    cr_assert_eq(F.colls[0].count, 1000);
    cr_assert_eq(F.colls[1].kind, RINGD_COLL_REDUCE_SCATTER);
    cr_assert_eq(F.colls[1].count, 1000);
    cr_assert_eq(F.colls[1].op, RINGD_SUM);
    cr_assert_eq(F.colls[2].op, RINGD_MIN); /* mean and wmean skipped for int8 */
}

Test(ringctl, allgather_names_the_block_that_the_daemon_left_unfilled)
{
    F.coll_action = COLL_KEEP;
    F.welcome.size = 2;
    cr_assert_eq(ringctl("--socket", F.path, "allgather", "--count", "10", NULL), 1);
    cr_assert_not_null(strstr(err, "wrong result at index 10 (element 0 of rank 1's block): "
                                   "expected -1, got 99 (rank 0 of 2)"),
                       "%s", err);
    cr_assert_eq(fake_join(&F), 0);
    cr_assert_eq(F.colls[0].count, 10, "the count is per rank");
}

Test(ringctl, reduce_scatter_sends_its_op_and_the_count_per_rank)
{
    F.coll_action = COLL_KEEP;
    cr_assert_eq(ringctl("--socket", F.path, "reduce_scatter", "-n", "77", "-t", "bfloat16", "-o",
                         "wmean", "-i", "1", "-w", "0", NULL),
                 0, "%s", err);
    cr_assert_eq(fake_join(&F), 0);
    cr_assert_eq(F.n_colls, 1);
    cr_assert_eq(F.colls[0].kind, RINGD_COLL_REDUCE_SCATTER);
    cr_assert_eq(F.colls[0].count, 77);
    cr_assert_eq(F.colls[0].dtype, RINGD_BFLOAT16);
    cr_assert_eq(F.colls[0].op, RINGD_WMEAN);
    cr_assert_eq(F.colls[0].weight, 1.0, "rank 0 weighs 1");
}

Test(ringctl, barrier_runs_warmup_and_timed_iterations_and_prints_the_median)
{
    F.coll_action = COLL_KEEP;
    cr_assert_eq(ringctl("--socket", F.path, "barrier", "--iters", "3", "--warmup", "2", NULL), 0,
                 "%s", err);
    const char *want = "barrier, 1 rank: ok, median ";
    cr_assert_eq(strncmp(out, want, strlen(want)), 0, "%s", out);
    cr_assert_not_null(strstr(out, " ms\n"), "%s", out);
    cr_assert_null(strstr(out, "MB/s"), "%s", out);
    cr_assert_eq(fake_join(&F), 0);
    cr_assert_str_empty(F.problem, "%s", F.problem);
    cr_assert_eq(F.n_colls, 5);
    for (int i = 0; i < F.n_colls; i++) {
        cr_assert_eq(F.colls[i].kind, RINGD_COLL_BARRIER);
        cr_assert_eq(F.colls[i].count, 0);
        cr_assert_eq(F.colls[i].region, 0);
    }
}

Test(ringctl, barrier_reports_the_daemons_error_with_status_1)
{
    F.coll_action = COLL_FAIL;
    F.reply_code = RINGD_ETIMEDOUT;
    snprintf(F.reply_text, sizeof F.reply_text, "barrier #3: timed out waiting for rank(s) 5");
    cr_assert_eq(ringctl("--socket", F.path, "barrier", NULL), 1);
    cr_assert_not_null(strstr(err, "barrier 1 of 101 failed: barrier #3: timed out waiting for "
                                   "rank(s) 5 (RINGD_ETIMEDOUT)"),
                       "%s", err);
}

/* Runs ringctl with the arguments, expects exit status 2 and a message on
 * stderr that contains what. */
#define USAGE_ERROR(what, ...)                                                                     \
    do {                                                                                           \
        cr_assert_eq(ringctl(__VA_ARGS__, NULL), 2, "%s", err);                                    \
        cr_assert_not_null(strstr(err, what), "stderr lacks \"%s\": %s", what, err);               \
    } while (0)

Test(ringctl, collective_commands_refuse_bad_and_foreign_flags_with_status_2)
{
    setenv("RINGD_SOCKET", F.path, 1);
    USAGE_ERROR("broadcast does not take --op", "broadcast", "--op", "sum");
    USAGE_ERROR("allgather does not take --root", "allgather", "--root", "1");
    USAGE_ERROR("allgather does not take --op", "allgather", "--op=max");
    USAGE_ERROR("barrier does not take --count", "barrier", "--count", "5");
    USAGE_ERROR("barrier does not take --dtype", "barrier", "--dtype", "int8");
    USAGE_ERROR("barrier does not take -c", "barrier", "-c");
    USAGE_ERROR("--root: expected a rank", "broadcast", "--root", "x");
    USAGE_ERROR("--root: expected a rank", "broadcast", "--root", "-1");
    USAGE_ERROR("--root needs a value", "broadcast", "--root");
    USAGE_ERROR("--count: expected a number", "allgather", "--count", "1e6");
    USAGE_ERROR("--dtype: unknown type 'complex64'", "reduce_scatter", "--dtype", "complex64");
    USAGE_ERROR("--op: unknown operator 'xor'", "reduce_scatter", "--op", "xor");
    USAGE_ERROR("--op wmean needs a float dtype", "reduce_scatter", "--op", "wmean", "--dtype",
                "int64");
    USAGE_ERROR("--iters: expected 1 to 1000000", "barrier", "--iters", "0");
    USAGE_ERROR("--warmup: expected 0 to 1000000", "allgather", "--warmup", "-3");
    USAGE_ERROR("unexpected argument 'now'", "barrier", "now");
    USAGE_ERROR("Try 'ringctl reduce_scatter --help'", "reduce_scatter", "--bogus");
    USAGE_ERROR("gather does not take --copy", "gather", "--copy");
    USAGE_ERROR("alltoall does not take --root", "alltoall", "--root", "1");
    USAGE_ERROR("scatter does not take --op", "scatter", "--op", "sum");
    USAGE_ERROR("unknown command 'gatherv'", "gatherv");
    cr_assert_eq(fake_join(&F), 0);
    cr_assert_eq(F.sessions, 0, "a usage error connected to the daemon");
}

Test(ringctl, help_documents_every_flag_and_exits_0)
{
    cr_assert_eq(ringctl("--help", NULL), 0);
    cr_assert_not_null(strstr(out, "--socket"));
    cr_assert_not_null(strstr(out, "status"));
    cr_assert_not_null(strstr(out, "allreduce"));
    cr_assert_eq(ringctl("status", "--help", NULL), 0);
    cr_assert_not_null(strstr(out, "--json"));
    cr_assert_eq(ringctl("allreduce", "--help", NULL), 0);
    const char *flags[] = {"--count", "--dtype", "--op",     "--iters", "--warmup",
                           "--copy",  "--quiet", "--socket", "--help"};
    for (size_t i = 0; i < sizeof flags / sizeof *flags; i++)
        cr_assert_not_null(strstr(out, flags[i]), "allreduce --help lacks %s", flags[i]);
}

Test(ringctl, version_prints_the_version_and_exits_0_without_a_daemon)
{
    char expected[64];
    snprintf(expected, sizeof expected, "ringctl %d.%d.%d\n", RINGD_VERSION_MAJOR,
             RINGD_VERSION_MINOR, RINGD_VERSION_PATCH);
    cr_assert_eq(ringctl("--version", NULL), 0);
    cr_assert_str_eq(out, expected);
    cr_assert_eq(ringctl("-V", NULL), 0);
    cr_assert_str_eq(out, expected);
    cr_assert_eq(ringctl("--socket", "/nonexistent/ringd.sock", "--version", NULL), 0);
    cr_assert_eq(ringctl("--help", NULL), 0);
    cr_assert_not_null(strstr(out, "--version"));
    cr_assert_eq(fake_join(&F), 0);
    cr_assert_eq(F.sessions, 0, "--version connected to the daemon");
}

Test(ringctl, help_lists_every_collective_and_each_documents_its_own_flags)
{
    static const struct {
        const char *command, *flags[10];
    } cases[] = {
        {"allreduce",
         {"--count", "--dtype", "--op", "--iters", "--warmup", "--copy", "--quiet", "--socket",
          "--help"}},
        {"broadcast",
         {"--count", "--dtype", "--root", "--iters", "--warmup", "--copy", "--quiet", "--socket",
          "--help"}},
        {"allgather",
         {"--count", "--dtype", "--iters", "--warmup", "--copy", "--quiet", "--socket", "--help"}},
        {"reduce_scatter",
         {"--count", "--dtype", "--op", "--iters", "--warmup", "--copy", "--quiet", "--socket",
          "--help"}},
        {"barrier", {"--iters", "--warmup", "--quiet", "--socket", "--help"}},
        {"gather",
         {"--count", "--dtype", "--root", "--iters", "--warmup", "--quiet", "--socket", "--help"}},
        {"scatter",
         {"--count", "--dtype", "--root", "--iters", "--warmup", "--quiet", "--socket", "--help"}},
        {"alltoall",
         {"--count", "--dtype", "--iters", "--warmup", "--quiet", "--socket", "--help"}},
    };
    static const char *const all[] = {"--count",  "--dtype", "--op",    "--root",   "--iters",
                                      "--warmup", "--copy",  "--quiet", "--socket", "--help"};
    cr_assert_eq(ringctl("--help", NULL), 0);
    char main_help[sizeof out];
    snprintf(main_help, sizeof main_help, "%s", out);
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char line[64];
        snprintf(line, sizeof line, "\n  %s ", cases[c].command);
        cr_assert_not_null(strstr(main_help, line), "--help lacks %s", cases[c].command);
        cr_assert_eq(ringctl(cases[c].command, "--help", NULL), 0);
        size_t n = 0;
        for (; n < 10 && cases[c].flags[n]; n++)
            cr_assert_not_null(strstr(out, cases[c].flags[n]), "%s --help lacks %s",
                               cases[c].command, cases[c].flags[n]);
        /* And no flag that it does not take. */
        for (size_t a = 0; a < sizeof all / sizeof *all; a++) {
            int takes = 0;
            for (size_t k = 0; k < n; k++)
                takes |= strcmp(all[a], cases[c].flags[k]) == 0;
            if (!takes)
                cr_assert_null(strstr(out, all[a]), "%s --help shows %s", cases[c].command, all[a]);
        }
    }
}

Test(ringctl, status_shows_rates_and_which_collectives_waited_for_the_left_neighbour)
{
    demo_status();
    F.status.rate_in = 3 << 20;
    F.status.rate_out = 2048;
    F.status.waits = 2;
    F.status.wait_sum_us = 250000;
    F.status.n_recent = 2;
    F.status.recent[0] = (msg_recent){.seq = 11,
                                      .kind = MSG_COLL_ALLREDUCE,
                                      .has_wait = 1,
                                      .wait_us = 250000,
                                      .latency_us = 300000,
                                      .last = "h2",
                                      .spread_us = 251000};
    F.status.recent[1] = (msg_recent){
        .seq = 12, .kind = MSG_COLL_BARRIER, .has_wait = 1, .wait_us = 5, .latency_us = 1500};
    cr_assert_eq(ringctl("--socket", F.path, "status", NULL), 0, "stderr: %s", err);
    cr_assert_not_null(strstr(out, "rates in 3.0 MiB/s, out 2.0 KiB/s\n"), "%s", out);
    cr_assert_not_null(
        strstr(out, "waited for left neighbour: 125.000 ms on average over 2 collectives\n"), "%s",
        out);
    cr_assert_not_null(strstr(out, "#11 allreduce      ok      took   300.000 ms, waited 250.000 "
                                   "ms for its left neighbour; last to start: h2, 251.000 ms "
                                   "after the first\n"),
                       "%s", out);
    cr_assert_not_null(strstr(out, "#12 barrier        ok      took     1.500 ms, no wait: the "
                                   "left neighbour's data was here, this host came after it\n"),
                       "%s", out);
    cr_assert_eq(ringctl("--socket", F.path, "status", "--json", NULL), 0, "stderr: %s", err);
    cr_assert_not_null(strstr(out, "\"recent\":[{\"seq\":11,\"kind\":\"allreduce\",\"status\":0,"
                                   "\"latency_us\":300000,\"wait_us\":250000,\"last\":\"h2\","
                                   "\"spread_us\":251000},"),
                       "%s", out);
}

/* ---- ringctl report ---- */

#define JOB_US 1700000000000000ull /* a Unix time */

/* The worked example of issue 27: 40 s of work spread over four ranks of
 * one host each, 6 s of communication: 16 s, a speedup of 2.5. Rank 3 is
 * the slow one (the others wait 4 s for it). Host c (rank 2) has sent no
 * summary; its rank shows nowhere. */
static msg_report reports[4];

static void seed_example(void)
{
    static const char *const names[] = {"a", "b", "c", "d"};
    for (int h = 0; h < 4; h++) {
        msg_report *m = &reports[h];
        memset(m, 0, sizeof *m);
        m->index = (uint32_t)h;
        m->count = 4;
        m->n_hosts = 4;
        m->me = 1;
        m->host_index = (uint32_t)h;
        m->now_us = JOB_US + 16000000;
        snprintf(m->cluster, sizeof m->cluster, "demo");
        snprintf(m->host, sizeof m->host, "%s", names[h]);
        if (h == 2) continue;
        m->flags = MSG_REPORT_HAS_PART;
        summary_part *p = &m->part;
        p->host = (uint32_t)h;
        p->parts = 1;
        p->boot_us = JOB_US - 1;
        p->version = 3;
        p->at_us = JOB_US + 16000000;
        p->job_us = JOB_US;
        p->window_ms = 60000;
        p->daemon_cpu_us = 500000;
        p->energy = SUMMARY_ENERGY_ESTIMATED;
        p->energy_mj = 105000;
        p->watts_mw = 10000;
        p->local_size = 1;
        p->n = 1;
        summary_rank *k = &p->ranks[0];
        k->rank = h;
        k->pid = 4000 + (uint32_t)h;
        k->life = (summary_times){.compute_us = h == 3 ? 14000000 : 10000000,
                                  .wait_us = h == 3 ? 0 : 4000000,
                                  .transfer_us = 2000000,
                                  .calls = 100,
                                  .bytes = 100 << 20};
        k->window = k->life;
        k->cpu_us = 10000000;
        if (h == 3) {
            k->late_us = 4000000;
            k->late_calls = 100;
        }
        k->n_spans = 2;
        k->spans[0] = (summary_span){
            .start_us = JOB_US + 15000000, .dur_us = 60000, .wait_us = 40000, .kind = 1};
        k->spans[1] = (summary_span){.start_us = JOB_US + 15100000,
                                     .dur_us = 60000,
                                     .wait_us = 0,
                                     .kind = 1,
                                     .flags = h == 0 ? SUMMARY_SPAN_FAILED : 0};
    }
    F.reports = reports;
    F.n_reports = 4;
}

Test(ringctl, report_shows_each_rank_the_speedup_and_who_made_the_others_wait)
{
    seed_example();
    cr_assert_eq(ringctl("--socket", F.path, "report", NULL), 0, "stderr: %s", err);
    cr_assert_not_null(strstr(out, "ring demo, 4 hosts, as b sees it: the job so far (its longest "
                                   "rank: 16.0 s)\n"),
                       "%s", out);
    cr_assert_not_null(strstr(out, "    3 d                14.00s      0.00s      2.00s      "
                                   "0.00s     100      0   100.0 MiB    10.00s     100  (left)\n"),
                       "%s", out);
    /* (10 + 10 + 14) s of work in 16 s: three ranks reported. */
    cr_assert_not_null(strstr(out, "useful work 34.0 s in 16.0 s of wall time: speedup 2.12 of 3 "
                                   "ranks, efficiency 71%\n"),
                       "%s", out);
    cr_assert_not_null(strstr(out, "the others waited most for rank 3 on d: it came last to 100 "
                                   "calls, 4.00 s after the first rank in all\n"),
                       "%s", out);
    cr_assert_not_null(strstr(out, "energy 315 J (estimated: CPU seconds x 10 W)"), "%s", out);
    cr_assert_not_null(strstr(out, "no summary from host c yet"), "%s", out);
    cr_assert_eq(fake_join(&F), 0);
    cr_assert_str_empty(F.problem, "%s", F.problem);
    cr_assert_eq(F.hello.flags, MSG_HELLO_OBSERVER);
    cr_assert_eq(F.types[0], MSG_REPORT_REQ);
}

Test(ringctl, report_json_has_the_keys_of_ringd_report)
{
    seed_example();
    cr_assert_eq(ringctl("--socket", F.path, "report", "--json", NULL), 0, "stderr: %s", err);
    static const char *const keys[] = {
        "{\"cluster\": \"demo\", \"host\": \"b\", ",
        "\"wall_s\": 16.000000, \"useful_s\": 34.000000, ",
        "\"speedup\": 2.125000, \"efficiency\": 0.708333",
        "\"waited_most\": {\"rank\": 3, \"host\": \"d\", \"late_s\": 4.000000, \"late_calls\": "
        "100}",
        "\"energy_j\": 315.000000, \"energy_source\": \"estimated\"",
        "{\"host\": \"c\", \"index\": 2, \"reported\": false}",
        "{\"rank\": 0, \"host\": \"a\", \"local_rank\": 0, \"pid\": 4000, \"connected\": false, "
        "\"failing\": false, \"compute_s\": 10.000000, \"wait_s\": 4.000000, \"transfer_s\": "
        "2.000000, \"failure_s\": 0.000000, \"wall_s\": 16.000000, \"calls\": 100, "
        "\"failed_calls\": 0, \"bytes\": 104857600",
        "{\"kind\": \"allreduce\", \"start\": 1700000015.100000, \"dur_s\": 0.060000, \"wait_s\": "
        "0.000000, \"ok\": false}",
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        cr_expect_not_null(strstr(out, keys[i]), "no %s in %s", keys[i], out);
}

Test(ringctl, report_writes_a_trace_and_a_chart)
{
    seed_example();
    char trace[256], svg[256];
    snprintf(trace, sizeof trace, "%s/t.json", F.dir);
    snprintf(svg, sizeof svg, "%s/c.svg", F.dir);
    cr_assert_eq(ringctl("--socket", F.path, "report", "--trace", trace, "--svg", svg, NULL), 0,
                 "stderr: %s", err);
    char text[16384];
    FILE *f = fopen(trace, "r");
    cr_assert_not_null(f);
    text[fread(text, 1, sizeof text - 1, f)] = '\0';
    fclose(f);
    unlink(trace);
    cr_assert_not_null(strstr(text, "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 4, "
                                    "\"tid\": 3, \"args\": {\"name\": \"rank 3\"}}"),
                       "%s", text);
    cr_assert_not_null(strstr(text,
                              "{\"name\": \"wait\", \"cat\": \"wait\", \"ph\": \"X\", \"ts\": "
                              "0, \"dur\": 40000, \"pid\": 1, \"tid\": 0, \"cname\": "
                              "\"grey\"}"),
                       "%s", text);
    cr_assert_not_null(strstr(text, "{\"name\": \"allreduce (failed)\", \"cat\": \"failure\""),
                       "%s", text);
    f = fopen(svg, "r");
    cr_assert_not_null(f);
    text[fread(text, 1, sizeof text - 1, f)] = '\0';
    fclose(f);
    unlink(svg);
    cr_assert_not_null(strstr(text, "<svg xmlns=\"http://www.w3.org/2000/svg\""), "%s", text);
    cr_assert_not_null(strstr(text, "<title>rank 3 compute: 14.000 s</title>"), "%s", text);
    cr_assert_not_null(strstr(text, "</svg>\n"));
}

Test(ringctl, report_refuses_a_summary_that_claims_what_cannot_be)
{
    seed_example();
    reports[3].part.ranks[0].life.compute_us = 60000000; /* in a job of 16 s */
    cr_assert_eq(ringctl("--socket", F.path, "report", NULL), 1);
    cr_assert_not_null(strstr(err, "report: the summary of host d is malformed: local rank 0: "
                                   "62000000 us accounted in a job of 16000000 us"),
                       "%s", err);
}
