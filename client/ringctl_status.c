/*
 * ringctl_status.c - `ringctl status`: opens its own observer session (it is
 * not a rank), asks the daemon for its MSG_STATUS and prints it, as lines
 * for a person or as one JSON object with every field.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ringctl.h"
#include "ringctl_status.h"
#include "ringd.h"
#include "session.h"

static const char usage_status[] =
    "Usage: ringctl [--socket PATH] status [--json]\n"
    "\n"
    "Shows this host's place in the ring, the state of its links to the left and\n"
    "right neighbours, its clients, counters, payload rates over the last few\n"
    "seconds and the last collective failure; then, for stragglers, the recent\n"
    "collectives: how long each took here and how long this host waited for its\n"
    "left neighbour's data (about 0: that neighbour was there first, so this host\n"
    "or one before it came last). In an elastic ring, also how many hosts are in\n"
    "the ring, which are out and for how long, whether this host left it\n"
    "(ringctl leave), and the last resize. When a job balances its batches by\n"
    "speed (Python's ringd.balance), each rank's share of the global batch and\n"
    "its measured speed, as the ranks last agreed them. Connects as an observer:\n"
    "it takes no rank.\n"
    "\n"
    "Options:\n"
    "  -j, --json         print one JSON object with every field instead\n"
    "  -s, --socket PATH  the daemon's Unix socket (as before the command)\n"
    "  -h, --help         show this help\n";

static const char *link_state_name(int state)
{
    switch (state) {
    case MSG_LINK_DOWN:
        return "down";
    case MSG_LINK_CONNECTING:
        return "connecting";
    case MSG_LINK_UP:
        return "up";
    case MSG_LINK_SELF:
        return "self";
    case MSG_LINK_REFUSED:
        return "refused";
    default:
        return "unknown";
    }
}

static void put_duration(uint64_t ms)
{
    uint64_t s = ms / 1000, d = s / 86400, h = s / 3600 % 24, m = s / 60 % 60;
    if (d)
        printf("%" PRIu64 "d %" PRIu64 "h %" PRIu64 "m %" PRIu64 "s", d, h, m, s % 60);
    else if (h)
        printf("%" PRIu64 "h %" PRIu64 "m %" PRIu64 "s", h, m, s % 60);
    else if (m)
        printf("%" PRIu64 "m %" PRIu64 "s", m, s % 60);
    else
        printf("%" PRIu64 "s", s);
}

/* "up for 3m 2s", "refused for 12s: refused by h2: ..." */
static void put_link(const char *side, const char *name, int state, uint64_t age_ms,
                     const char *reason)
{
    printf("%s", side);
    ringctl_put_text(name[0] ? name : "-");
    printf(": %s", link_state_name(state));
    if (state != MSG_LINK_SELF) {
        printf(" for ");
        put_duration(age_ms);
    }
    if (state != MSG_LINK_UP && state != MSG_LINK_SELF && reason[0]) {
        printf(": ");
        ringctl_put_text(reason);
    } else if (state == MSG_LINK_DOWN && side[0] == 'l') {
        printf(": it has not connected");
    }
    putchar('\n');
}

/* Name i of the configured hosts (STATUS's space-separated list) into out;
 * "#i+1" where the list is short (truncated, or from an older daemon). */
static void host_name(const msg_status *st, unsigned i, char *out, size_t len)
{
    const char *p = st->hosts;
    for (unsigned k = 0; *p; k++) {
        size_t n = strcspn(p, " ");
        if (k == i) {
            snprintf(out, len, "%.*s", (int)n, p);
            return;
        }
        p += n;
        p += strspn(p, " ");
    }
    snprintf(out, len, "#%u", i + 1);
}

static int host_live(const msg_status *st, unsigned i)
{
    return i < 64 && (st->live >> i & 1);
}

/* An elastic ring: which hosts are out of it, since when, and its last
 * resize. Nothing from a daemon that does not report membership. */
static void print_membership(const msg_status *st)
{
    char name[MSG_MAX_NAME + 1];
    if (st->n_live == 0) return;
    if (st->left_ring) printf("left the ring (ringctl join to return)\n");
    if (st->n_live < st->n_hosts) {
        printf("hosts: %" PRIu32 " of %" PRIu32 " in the ring (min_hosts %" PRIu32 ")\n",
               st->n_live, st->n_hosts, st->min_hosts);
        for (unsigned i = 0; i < st->n_hosts && i < 64; i++) {
            if (host_live(st, i)) continue;
            host_name(st, i, name, sizeof name);
            printf("out: ");
            ringctl_put_text(name);
            if (i < st->n_out && st->out_age_ms[i] != MSG_NO_AGE) {
                printf(" for ");
                put_duration(st->out_age_ms[i]);
            }
            putchar('\n');
        }
    }
    if (st->resize_why[0]) {
        printf("last resize (%" PRIu64 " since start, membership epoch %" PRIu32 "): ", st->resizes,
               st->members_epoch);
        ringctl_put_text(st->resize_why);
        putchar('\n');
    }
}

/* The last reload: what it changed, or why it kept the running file. */
static void print_reload(const msg_status *st)
{
    if (!st->reloads) return;
    printf("last reload (");
    put_duration(st->reload_age_ms);
    printf(" ago, %" PRIu64 " since start): %s", st->reloads,
           st->reload_refused ? "refused, running the configuration loaded before: " : "");
    ringctl_put_text(st->reload_said);
    putchar('\n');
}

/* A balanced job's split: each rank's rows of the global batch and its
 * speed, and the time those rows take it (the ranks finish together when
 * these agree). */
void status_print_balance(const msg_status *st)
{
    const msg_split *sp = &st->split;
    if (!sp->n_ranks) return;
    printf("balanced batches (reported ");
    put_duration(st->balance_age_ms);
    printf(" ago): step %" PRIu64 ", global batch %" PRIu64 " rows, %" PRIu32 " re-split%s",
           sp->step, sp->global_batch, sp->resplits, sp->resplits == 1 ? "" : "s");
    if (sp->every)
        printf(" (every %" PRIu32 " steps)\n", sp->every);
    else
        printf(" (equal shares, never re-split)\n");
    printf("  rank      rows   share        rows/s   compute/step\n");
    for (uint32_t i = 0; i < sp->n_ranks && i < MSG_MAX_SHARES; i++) {
        const msg_share *e = &sp->shares[i];
        double share = sp->global_batch ? 100.0 * e->rows / (double)sp->global_batch : 0;
        printf("  %4" PRIu32 " %9" PRIu32 "  %5.1f%%", i, e->rows, share);
        if (e->rate > 0)
            printf("  %12.1f  %10.3f ms\n", e->rate, 1000.0 * e->rows / e->rate);
        else
            printf("  %12s  %13s\n", "-", "-");
    }
    if (sp->n_ranks > MSG_MAX_SHARES)
        printf("  (ranks %d-%" PRIu32 " not shown)\n", MSG_MAX_SHARES, sp->n_ranks - 1);
}

static void print_status(const msg_status *st)
{
    printf("cluster ");
    ringctl_put_text(st->cluster);
    printf(", host ");
    ringctl_put_text(st->host);
    printf(" (%" PRIu32 " of %" PRIu32 "), epoch %" PRIu32 ", next collective #%" PRIu64 "\n",
           st->host_index + 1, st->n_hosts, st->epoch, st->next_seq);
    put_link("left  ", st->left, st->left_state, st->left_age_ms, st->left_reason);
    put_link("right ", st->right, st->right_state, st->right_age_ms, st->right_reason);
    print_membership(st);
    if (st->waiting[0]) {
        printf("ring not ready: ");
        ringctl_put_text(st->waiting);
        putchar('\n');
    }
    if (st->n_done) {
        /* Hosts in step have completed the same count, or nearly. */
        printf("completed in this epoch, by host:");
        for (unsigned i = 0; i < st->n_done; i++)
            printf(" %" PRIu64, st->done[i]);
        putchar('\n');
    }
    printf("clients %" PRIu32 "/%" PRIu32 ", collectives %" PRIu64 " done, %" PRIu64 " failed\n",
           st->clients, st->local_size, st->collectives_done, st->collectives_failed);
    printf("bytes in ");
    ringctl_put_bytes(st->bytes_in);
    printf(", out ");
    ringctl_put_bytes(st->bytes_out);
    printf(", uptime ");
    put_duration(st->uptime_ms);
    printf(", reconnects %" PRIu64 "\n", st->reconnects);
    printf("rates in ");
    ringctl_put_bytes(st->rate_in);
    printf("/s, out ");
    ringctl_put_bytes(st->rate_out);
    printf("/s\n");
    if (st->waits)
        printf("waited for left neighbour: %.3f ms on average over %" PRIu64 " collective%s\n",
               (double)st->wait_sum_us / 1000 / (double)st->waits, st->waits,
               st->waits == 1 ? "" : "s");
    if (st->n_recent) printf("recent collectives (wait here for left neighbour ");
    if (st->n_recent) ringctl_put_text(st->left[0] ? st->left : "-");
    if (st->n_recent) printf("):\n");
    for (unsigned i = 0; i < st->n_recent; i++) {
        const msg_recent *e = &st->recent[i];
        printf("  #%" PRIu64 " %-14s %-7s took %9.3f ms, ", e->seq, ringd_coll_name(e->kind),
               e->status == 0 ? "ok" : "failed", (double)e->latency_us / 1000);
        if (!e->has_wait)
            printf("no data from the left");
        else if (e->wait_us < 100)
            printf("no wait: the left neighbour's data was here, this host came after it");
        else
            printf("waited %.3f ms for its left neighbour", (double)e->wait_us / 1000);
        if (e->last[0] && e->spread_us >= 1000) {
            printf("; last to start: ");
            ringctl_put_text(e->last);
            printf(", %.3f ms after the first", (double)e->spread_us / 1000);
        } else if (e->last[0]) {
            printf("; all hosts started within 1 ms");
        }
        putchar('\n');
    }
    printf("last error");
    if (st->last_error[0] && st->last_error_age_ms != MSG_NO_AGE) {
        printf(" (");
        put_duration(st->last_error_age_ms);
        printf(" ago)");
    }
    printf(": ");
    ringctl_put_text(st->last_error[0] ? st->last_error : "-");
    putchar('\n');
    print_reload(st);
    status_print_balance(st);
}

/* Length of the valid UTF-8 sequence at s, or 0. */
static size_t utf8_len(const unsigned char *s)
{
    size_t n = s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
    if (s[0] >= 0xf5) return 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    /* Overlong forms, surrogates and code points past U+10FFFF. */
    if ((n == 3 && s[0] == 0xe0 && s[1] < 0xa0) || (n == 3 && s[0] == 0xed && s[1] >= 0xa0) ||
        (n == 4 && s[0] == 0xf0 && s[1] < 0x90) || (n == 4 && s[0] == 0xf4 && s[1] >= 0x90))
        return 0;
    return n;
}

/* Prints s as a JSON string; invalid UTF-8 becomes U+FFFD. */
static void put_json_string(const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    putchar('"');
    while (*s) {
        if (*s == '"' || *s == '\\') {
            printf("\\%c", *s++);
        } else if (*s == '\n') {
            fputs("\\n", stdout), s++;
        } else if (*s == '\t') {
            fputs("\\t", stdout), s++;
        } else if (*s < 0x20 || *s == 0x7f) {
            printf("\\u%04x", *s++);
        } else if (*s < 0x80) {
            putchar(*s++);
        } else {
            size_t n = utf8_len(s);
            if (n) {
                fwrite(s, 1, n, stdout);
                s += n;
            } else {
                fputs("\\ufffd", stdout);
                s++;
            }
        }
    }
    putchar('"');
}

/* The membership keys; live_hosts and out_hosts are null from a daemon that
 * does not report membership. */
static void print_membership_json(const msg_status *st)
{
    char name[MSG_MAX_NAME + 1];
    printf(",\"members_epoch\":%" PRIu32 ",\"min_hosts\":%" PRIu32 ",\"resizes\":%" PRIu64
           ",\"left_ring\":%s,\"last_resize\":",
           st->members_epoch, st->min_hosts, st->resizes, st->left_ring ? "true" : "false");
    put_json_string(st->resize_why);
    if (st->n_live == 0) {
        printf(",\"live_hosts\":null,\"out_hosts\":null");
        return;
    }
    printf(",\"live_hosts\":[");
    int first = 1;
    for (unsigned i = 0; i < st->n_hosts && i < 64; i++) {
        if (!host_live(st, i)) continue;
        host_name(st, i, name, sizeof name);
        printf("%s", first ? "" : ",");
        put_json_string(name);
        first = 0;
    }
    printf("],\"out_hosts\":[");
    first = 1;
    for (unsigned i = 0; i < st->n_hosts && i < 64; i++) {
        if (host_live(st, i)) continue;
        host_name(st, i, name, sizeof name);
        printf("%s{\"name\":", first ? "" : ",");
        put_json_string(name);
        printf(",\"out_s\":");
        if (i < st->n_out && st->out_age_ms[i] != MSG_NO_AGE)
            printf("%.3f", (double)st->out_age_ms[i] / 1000);
        else
            printf("null");
        putchar('}');
        first = 0;
    }
    putchar(']');
}

/* "balance": null, or the split with one entry per rank (the first 64). */
void status_print_balance_json(const msg_status *st)
{
    const msg_split *sp = &st->split;
    printf(",\"balance\":");
    if (!sp->n_ranks) {
        printf("null");
        return;
    }
    printf("{\"age_ms\":%" PRIu64 ",\"step\":%" PRIu64 ",\"global_batch\":%" PRIu64
           ",\"resplits\":%" PRIu32 ",\"every\":%" PRIu32 ",\"n_ranks\":%" PRIu32 ",\"ranks\":[",
           st->balance_age_ms, sp->step, sp->global_batch, sp->resplits, sp->every, sp->n_ranks);
    for (uint32_t i = 0; i < sp->n_ranks && i < MSG_MAX_SHARES; i++) {
        const msg_share *e = &sp->shares[i];
        printf("%s{\"rank\":%" PRIu32 ",\"rows\":%" PRIu32 ",\"rate\":", i ? "," : "", i, e->rows);
        if (e->rate > 0)
            printf("%.17g}", e->rate);
        else
            printf("null}");
    }
    printf("]}");
}

static void print_status_json(const msg_status *st)
{
    printf("{\"id\":%" PRIu64 ",\"cluster\":", st->id);
    put_json_string(st->cluster);
    printf(",\"host\":");
    put_json_string(st->host);
    printf(",\"left\":");
    put_json_string(st->left);
    printf(",\"right\":");
    put_json_string(st->right);
    printf(",\"host_index\":%" PRIu32 ",\"n_hosts\":%" PRIu32
           ",\"left_state\":\"%s\",\"right_state\":\"%s\",\"epoch\":%" PRIu32
           ",\"clients\":%" PRIu32 ",\"local_size\":%" PRIu32 ",\"collectives_done\":%" PRIu64
           ",\"collectives_failed\":%" PRIu64 ",\"bytes_in\":%" PRIu64 ",\"bytes_out\":%" PRIu64
           ",\"uptime_ms\":%" PRIu64 ",\"reconnects\":%" PRIu64 ",\"last_error\":",
           st->host_index, st->n_hosts, link_state_name(st->left_state),
           link_state_name(st->right_state), st->epoch, st->clients, st->local_size,
           st->collectives_done, st->collectives_failed, st->bytes_in, st->bytes_out, st->uptime_ms,
           st->reconnects);
    put_json_string(st->last_error);
    printf(",\"rate_in\":%" PRIu64 ",\"rate_out\":%" PRIu64 ",\"waits\":%" PRIu64
           ",\"wait_sum_us\":%" PRIu64 ",\"recent\":[",
           st->rate_in, st->rate_out, st->waits, st->wait_sum_us);
    for (unsigned i = 0; i < st->n_recent; i++) {
        const msg_recent *e = &st->recent[i];
        printf("%s{\"seq\":%" PRIu64 ",\"kind\":\"%s\",\"status\":%" PRId32
               ",\"latency_us\":%" PRIu64 ",\"wait_us\":",
               i ? "," : "", e->seq, ringd_coll_name(e->kind), e->status, e->latency_us);
        if (e->has_wait)
            printf("%" PRIu64, e->wait_us);
        else
            printf("null");
        printf(",\"last\":");
        if (e->last[0])
            put_json_string(e->last);
        else
            printf("null");
        printf(",\"spread_us\":%" PRIu64 "}", e->spread_us);
    }
    printf("],\"left_reason\":");
    put_json_string(st->left_reason);
    printf(",\"right_reason\":");
    put_json_string(st->right_reason);
    printf(",\"left_age_ms\":%" PRIu64 ",\"right_age_ms\":%" PRIu64 ",\"last_error_age_ms\":",
           st->left_age_ms, st->right_age_ms);
    if (st->last_error_age_ms == MSG_NO_AGE)
        printf("null");
    else
        printf("%" PRIu64, st->last_error_age_ms);
    printf(",\"next_seq\":%" PRIu64 ",\"waiting\":", st->next_seq);
    put_json_string(st->waiting);
    printf(",\"done\":[");
    for (unsigned i = 0; i < st->n_done; i++)
        printf("%s%" PRIu64, i ? "," : "", st->done[i]);
    printf("]");
    print_membership_json(st);
    printf(",\"reloads\":%" PRIu64 ",\"last_reload\":", st->reloads);
    if (st->reloads) {
        printf("{\"age_ms\":%" PRIu64 ",\"refused\":%s,\"said\":", st->reload_age_ms,
               st->reload_refused ? "true" : "false");
        put_json_string(st->reload_said);
        putchar('}');
    } else {
        printf("null");
    }
    status_print_balance_json(st);
    printf("}\n");
}

int status_fetch(session *s, const char *path, msg_status *st)
{
    int rc = session_connect(s, path, SESSION_CONNECT_TIMEOUT_MS);
    msg_welcome w;
    if (rc == 0) rc = session_hello(s, MSG_HELLO_OBSERVER, -1, &w);
    uint8_t buf[SESSION_MSG_MAX];
    int64_t deadline = session_deadline(SESSION_REQUEST_TIMEOUT_MS);
    msg_status_req req = {.id = 1};
    if (rc == 0) {
        int n = msg_encode_status_req(buf, sizeof buf, &req);
        rc = n < 0 ? session_fail(s, RINGD_EPROTO, "status: cannot encode STATUS_REQ")
                   : session_send(s, buf, (size_t)n, -1, deadline, "status");
    }
    msg_header h;
    if (rc == 0) rc = session_expect(s, MSG_STATUS, &h, buf, deadline, "status");
    if (rc == 0 && msg_decode_status(&h, buf, st) != MSG_OK)
        rc = session_fail(s, RINGD_EPROTO,
                          "status: ringd at %s sent a malformed STATUS message "
                          "(are ringd and ringctl the same version?)",
                          s->path);
    if (rc == 0 && st->id != req.id)
        rc = session_fail(s, RINGD_EPROTO,
                          "status: ringd at %s answered request %" PRIu64 " instead of %" PRIu64,
                          s->path, st->id, req.id);
    session_close(s);
    return rc;
}

int status_command(const char *path, int argc, char **argv)
{
    static const struct option opts[] = {{"json", no_argument, NULL, 'j'},
                                         {"socket", required_argument, NULL, 's'},
                                         {"help", no_argument, NULL, 'h'},
                                         {0}};
    int json = 0, ch;
    optind = 0;
    while ((ch = getopt_long(argc, argv, "+js:h", opts, NULL)) != -1) {
        switch (ch) {
        case 'j':
            json = 1;
            break;
        case 's':
            path = optarg;
            break;
        case 'h':
            fputs(usage_status, stdout);
            return EXIT_OK;
        default:
            return ringctl_usage_error("status", "invalid option for status");
        }
    }
    if (optind < argc)
        return ringctl_usage_error("status", "unexpected argument '%s'", argv[optind]);

    session s;
    msg_status st;
    if (status_fetch(&s, path, &st) < 0) {
        fprintf(stderr, "ringctl: %s\n", s.err);
        return EXIT_FAIL;
    }
    if (json)
        print_status_json(&st);
    else
        print_status(&st);
    return fflush(stdout) == 0 ? EXIT_OK : EXIT_FAIL;
}
