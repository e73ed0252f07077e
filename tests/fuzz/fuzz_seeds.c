/*
 * fuzz_seeds.c - writes the seed corpora of the fuzzers: one file per valid
 * frame and message of every type (with empty, typical and longest strings),
 * and the example config plus the test configs, good and bad.
 *
 *     fuzz_seeds OUTDIR    creates OUTDIR/frame, OUTDIR/msg (configs are
 *                          checked-in files, see run.sh)
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "proto/frame.h"
#include "proto/msg.h"

static const char *outdir;
static int failed;

static void put(const char *kind, const char *name, const uint8_t *buf, int n)
{
    char path[4096];
    if (n < 0) {
        fprintf(stderr, "fuzz_seeds: cannot encode %s/%s\n", kind, name);
        failed = 1;
        return;
    }
    snprintf(path, sizeof path, "%s/%s/%s", outdir, kind, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, (size_t)n, f) != (size_t)n || fclose(f) != 0) {
        fprintf(stderr, "fuzz_seeds: %s: %s\n", path, strerror(errno));
        failed = 1;
    }
}

/* A summary part of host 2 that keeps the rules: 3 ranks, 2 spans each. */
static const summary_part *sample_part(void)
{
    static summary_part p;
    p = (summary_part){.host = 2,
                       .parts = 1,
                       .boot_us = 1000,
                       .version = 7,
                       .job_us = 2000000,
                       .at_us = 12000000,
                       .window_ms = 60000,
                       .energy = SUMMARY_ENERGY_ESTIMATED,
                       .watts_mw = 10000,
                       .local_size = 3,
                       .n = 3};
    for (int i = 0; i < 3; i++) {
        summary_rank *k = &p.ranks[i];
        k->rank = 6 + i;
        k->pid = 4000 + (uint32_t)i;
        k->flags = SUMMARY_RANK_CONNECTED;
        k->life = (summary_times){.compute_us = 6000000,
                                  .wait_us = 2000000,
                                  .transfer_us = 1000000,
                                  .calls = 100,
                                  .bytes = 4000};
        k->window = k->life;
        k->n_spans = 2;
        k->spans[0] = (summary_span){.start_us = 11000000, .dur_us = 50, .wait_us = 40, .kind = 1};
        k->spans[1] = (summary_span){.start_us = 11000100, .dur_us = 50, .kind = 1};
    }
    return &p;
}

static void frames(void)
{
    static uint8_t b[FRAME_HEADER_SIZE + FRAME_MAX_COMMIT_BODY + 64];
    char longest[FRAME_MAX_TEXT + 1];
    memset(longest, 'x', FRAME_MAX_TEXT);
    longest[FRAME_MAX_TEXT] = '\0';
    frame_hello h = {.n_hosts = 4, .from_pos = 3, .to_pos = 0, .epoch = 7};
    strcpy(h.cluster, "demo");
    strcpy(h.from_name, "d");
    put("frame", "hello", b, frame_encode_hello(b, sizeof b, &h));
    frame_welcome w = {.status = 0, .epoch = 7};
    put("frame", "welcome", b, frame_encode_welcome(b, sizeof b, &w));
    w.status = -9;
    memcpy(w.reason, longest, sizeof w.reason);
    put("frame", "welcome_refused", b, frame_encode_welcome(b, sizeof b, &w));
    frame_data d = {.seq = 12,
                    .epoch = 7,
                    .step = 3,
                    .dtype = 6,
                    .op = 0,
                    .chunk = 1,
                    .length = 16,
                    .count = 1000,
                    .offset = 64,
                    .kind = 1,
                    .wsum = 2.5};
    int n = frame_encode_data(b, sizeof b, &d);
    if (n > 0) memset(b + n, 0x3f, 16); /* the payload, right behind */
    put("frame", "data", b, n > 0 ? n + 16 : n);
    frame_abort a = {.seq = 12, .epoch = 7, .code = -7};
    strcpy(a.reason, "allreduce #12 timed out");
    put("frame", "abort", b, frame_encode_abort(b, sizeof b, &a));
    put("frame", "ping", b, frame_encode_ping(b, sizeof b));
    frame_epoch e = {.epoch = 9,
                     .origin = 1,
                     .phase = EPOCH_RESET,
                     .flags = EPOCH_FLAG_GONE | EPOCH_FLAG_INCOMPLETE,
                     .code = -16,
                     .fail_seq = 3,
                     .prev_epoch = 5,
                     .done = 3};
    strcpy(e.reason, "rank 2 (pid 4242) on host c exited");
    strcpy(e.waiting, "rank 2 on host c");
    put("frame", "epoch_reset", b, frame_encode_epoch(b, sizeof b, &e));
    e.phase = EPOCH_CONFIRM;
    put("frame", "epoch_confirm", b, frame_encode_epoch(b, sizeof b, &e));
    /* An elastic ring's: a resize, and a host that leaves. */
    e.flags = EPOCH_FLAG_RESIZED;
    e.members = 0x1b;
    e.members_epoch = 9;
    strcpy(e.members_why, "ring resized to 4 hosts (4 ranks): c unreachable for 10 s");
    put("frame", "epoch_resized", b, frame_encode_epoch(b, sizeof b, &e));
    /* The next lap carries how epoch 9 became ready, for a host that missed it. */
    frame_epoch next = e;
    next.epoch = 13;
    next.prev_epoch = 9;
    next.flags = 0;
    next.members_why[0] = '\0';
    next.prior = (frame_prior){.epoch = 9,
                               .by = 11,
                               .prev_epoch = 5,
                               .flags = EPOCH_FLAG_RESIZED,
                               .code = -16,
                               .fail_seq = 3,
                               .done = 3,
                               .top = 4,
                               .members = 0x1b,
                               .members_epoch = 9};
    strcpy(next.prior.reason, e.reason);
    strcpy(next.prior.members_why, e.members_why);
    put("frame", "epoch_prior", b, frame_encode_epoch(b, sizeof b, &next));
    /* ... and the confirmation that settled epoch 9 first, leaving the ring
     * waiting for a rank, for a host that missed that one. */
    next.waited = (frame_prior){.epoch = 11,
                                .by = 11,
                                .prev_epoch = 9,
                                .flags = EPOCH_FLAG_INCOMPLETE | EPOCH_FLAG_RESIZED,
                                .code = -16,
                                .fail_seq = 3,
                                .done = 3,
                                .top = 4,
                                .members = 0x1b,
                                .members_epoch = 11};
    strcpy(next.waited.reason, e.reason);
    strcpy(next.waited.members_why, "ring resized to 4 hosts (4 ranks): d left");
    put("frame", "epoch_waited", b, frame_encode_epoch(b, sizeof b, &next));
    frame_epoch leave = {.epoch = 9, .origin = 2, .phase = EPOCH_LEAVE, .fail_seq = FRAME_NO_SEQ};
    strcpy(leave.reason, "ringd on c is stopping (SIGTERM)");
    put("frame", "epoch_leave", b, frame_encode_epoch(b, sizeof b, &leave));
    static frame_commit c = {.epoch = 9, .n = 4, .done = {12, 11, 12, 13}};
    put("frame", "commit", b, frame_encode_commit(b, sizeof b, &c));
    put("frame", "report", b, frame_encode_report(b, sizeof b, sample_part()));
    /* A handshake followed by traffic, as one stream. */
    int k = frame_encode_hello(b, sizeof b, &h);
    k += frame_encode_ping(b + k, sizeof b - (size_t)k);
    k += frame_encode_abort(b + k, sizeof b - (size_t)k, &a);
    put("frame", "stream", b, k);
}

static void msgs(void)
{
    uint8_t b[2 * (MSG_HEADER_SIZE + MSG_MAX_BODY)];
    msg_hello h = {.flags = 0, .local_rank = -1, .pid = 4242};
    put("msg", "hello", b, msg_encode_hello(b, sizeof b, &h));
    msg_welcome w = {.rank = 1,
                     .size = 4,
                     .local_rank = 0,
                     .local_size = 1,
                     .host_index = 1,
                     .n_hosts = 4,
                     .max_bytes = 1ull << 32,
                     .members_epoch = 9};
    strcpy(w.host, "b");
    put("msg", "welcome", b, msg_encode_welcome(b, sizeof b, &w));
    msg_error e = {.code = -12};
    memset(e.text, 'e', MSG_MAX_TEXT);
    put("msg", "error", b, msg_encode_error(b, sizeof b, &e));
    msg_register r = {.id = 1, .region = 3, .size = 4096};
    put("msg", "register", b, msg_encode_register(b, sizeof b, &r));
    msg_unregister u = {.id = 2, .region = 3};
    put("msg", "unregister", b, msg_encode_unregister(b, sizeof b, &u));
    msg_collective c = {.id = 3,
                        .kind = 1,
                        .dtype = 6,
                        .op = 5,
                        .region = 3,
                        .offset = 0,
                        .count = 1024,
                        .root = 0,
                        .weight = 32,
                        .timeout_ms = 0,
                        .members_epoch = 9};
    strcpy(c.name, "fc1.weight");
    put("msg", "collective", b, msg_encode_collective(b, sizeof b, &c));
    msg_result res = {.id = 3, .status = 0};
    put("msg", "result", b, msg_encode_result(b, sizeof b, &res));
    msg_result resized = {
        .id = 3, .status = MSG_STATUS_RESIZED, .members_epoch = 9, .rank = 2, .size = 4};
    strcpy(resized.text, "allreduce failed: ring resized to 4 hosts (4 ranks): c left");
    put("msg", "result_resized", b, msg_encode_result(b, sizeof b, &resized));
    msg_leave_req lv = {.id = 5, .action = MSG_LEAVE};
    put("msg", "leave_req", b, msg_encode_leave_req(b, sizeof b, &lv));
    msg_report_req rq = {.id = 6};
    put("msg", "report_req", b, msg_encode_report_req(b, sizeof b, &rq));
    static msg_report rp = {.id = 6,
                            .count = 1,
                            .n_hosts = 4,
                            .host_index = 2,
                            .flags = MSG_REPORT_HAS_PART,
                            .cluster = "demo",
                            .host = "c"};
    rp.part = *sample_part();
    put("msg", "report", b, msg_encode_report(b, sizeof b, &rp));
    msg_status_req sr = {.id = 4};
    put("msg", "status_req", b, msg_encode_status_req(b, sizeof b, &sr));
    msg_status st = {.id = 4, .host_index = 1, .n_hosts = 4, .epoch = 2, .clients = 1};
    strcpy(st.cluster, "demo");
    strcpy(st.host, "b");
    put("msg", "status", b, msg_encode_status(b, sizeof b, &st));
    msg_balance bal = {.id = 6,
                       .split = {.step = 40,
                                 .global_batch = 96,
                                 .resplits = 4,
                                 .every = 10,
                                 .n_ranks = 3,
                                 .shares = {{38, 950.5}, {39, 975.0}, {19, 480.25}}}};
    put("msg", "balance", b, msg_encode_balance(b, sizeof b, &bal));
    st.split = bal.split;
    st.balance_age_ms = 1500;
    put("msg", "status_balance", b, msg_encode_status(b, sizeof b, &st));
    /* A session as libringd starts it: HELLO, REGISTER, COLLECTIVE. */
    int k = msg_encode_hello(b, sizeof b, &h);
    k += msg_encode_register(b + k, sizeof b - (size_t)k, &r);
    k += msg_encode_collective(b + k, sizeof b - (size_t)k, &c);
    put("msg", "session", b, k);
}

int main(int argc, char **argv)
{
    char path[4096];
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_seeds OUTDIR\n");
        return 2;
    }
    outdir = argv[1];
    const char *dirs[] = {"", "/frame", "/msg"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s%s", outdir, dirs[i]);
        if (mkdir(path, 0755) < 0 && errno != EEXIST) {
            fprintf(stderr, "fuzz_seeds: %s: %s\n", path, strerror(errno));
            return 1;
        }
    }
    frames();
    msgs();
    return failed;
}
