/*
 * reload.c - what a reload changes; see reload.h.
 *
 * Every top-level key of config.h is compared here, each in one place, so a
 * new key that is not is easy to spot; tests/service checks the documents'
 * classes against what this file does, key by key.
 */
#include "reload.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define KiB ((uint64_t)1024)

/* ---- values as the file writes them ---- */

static void size_text(uint64_t v, char *out)
{
    if (v && v % (KiB * KiB * KiB) == 0)
        snprintf(out, RELOAD_MAX_VALUE, "%" PRIu64 "GiB", v / (KiB * KiB * KiB));
    else if (v && v % (KiB * KiB) == 0)
        snprintf(out, RELOAD_MAX_VALUE, "%" PRIu64 "MiB", v / (KiB * KiB));
    else if (v && v % KiB == 0)
        snprintf(out, RELOAD_MAX_VALUE, "%" PRIu64 "KiB", v / KiB);
    else
        snprintf(out, RELOAD_MAX_VALUE, "%" PRIu64, v);
}

static void duration_text(uint64_t ms, char *out)
{
    if (ms == 0)
        snprintf(out, RELOAD_MAX_VALUE, "0");
    else if (ms % 1000 == 0)
        snprintf(out, RELOAD_MAX_VALUE, "%" PRIu64 "s", ms / 1000);
    else
        snprintf(out, RELOAD_MAX_VALUE, "%" PRIu64 "ms", ms);
}

static void int_text(uint64_t v, char *out)
{
    snprintf(out, RELOAD_MAX_VALUE, "%" PRIu64, v);
}

static void string_text(const char *s, const char *none, char *out)
{
    snprintf(out, RELOAD_MAX_VALUE, "%s", s ? s : none);
}

static void ids_text(const cfg_id_list *l, char *out)
{
    size_t len = 0;
    out[0] = '\0';
    for (size_t i = 0; i < l->n && len + 1 < RELOAD_MAX_VALUE; i++) {
        int k = snprintf(out + len, RELOAD_MAX_VALUE - len, "%s%s", i ? "," : "", l->items[i].value);
        if (k < 0) break;
        len += (size_t)k;
    }
    if (!l->n) snprintf(out, RELOAD_MAX_VALUE, "(anyone)");
}

static int same_string(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static int same_ids(const cfg_id_list *a, const cfg_id_list *b)
{
    if (a->n != b->n) return 0;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->items[i].value, b->items[i].value) != 0) return 0;
    return 1;
}

static reload_change *add(reload_plan *p, const char *key, reload_how how)
{
    if (p->n == RELOAD_MAX_CHANGES) return NULL; /* more keys than the file has: never */
    reload_change *c = &p->changes[p->n++];
    memset(c, 0, sizeof *c);
    c->key = key;
    c->how = how;
    if (how == RELOAD_REFORM) p->reform = 1;
    if (how == RELOAD_ACCESS) p->access = 1;
    return c;
}

/* A change of a number, shown by fmt. */
static void number(reload_plan *p, const char *key, reload_how how, uint64_t a, uint64_t b,
                   void (*fmt)(uint64_t, char *))
{
    if (a == b) return;
    reload_change *c = add(p, key, how);
    if (!c) return;
    fmt(a, c->from);
    fmt(b, c->to);
}

static void string(reload_plan *p, const char *key, reload_how how, const char *a, const char *b,
                   const char *none)
{
    if (same_string(a, b)) return;
    reload_change *c = add(p, key, how);
    if (!c) return;
    string_text(a, none, c->from);
    string_text(b, none, c->to);
}

static void named(reload_plan *p, const char *key, reload_how how, int a, int b,
                  const char *const *names)
{
    if (a == b) return;
    reload_change *c = add(p, key, how);
    if (!c) return;
    string_text(names[a], "", c->from);
    string_text(names[b], "", c->to);
}

/* ---- the ring's shape ---- */

static int same_hosts(const cfg *a, int a_me, const cfg *b, int b_me)
{
    if (a_me != b_me || a->n_hosts != b->n_hosts) return 0;
    for (size_t i = 0; i < a->n_hosts; i++)
        if (strcmp(a->hosts[i].name, b->hosts[i].name) != 0 ||
            strcmp(a->hosts[i].address, b->hosts[i].address) != 0)
            return 0;
    return 1;
}

/* Another count of hosts, or the first host that differs. */
static void hosts_text(const cfg *a, const cfg *b, reload_change *c)
{
    if (a->n_hosts != b->n_hosts) {
        snprintf(c->from, sizeof c->from, "%zu hosts", a->n_hosts);
        snprintf(c->to, sizeof c->to, "%zu hosts", b->n_hosts);
        return;
    }
    size_t i = 0;
    while (i + 1 < a->n_hosts && strcmp(a->hosts[i].name, b->hosts[i].name) == 0 &&
           strcmp(a->hosts[i].address, b->hosts[i].address) == 0)
        i++;
    snprintf(c->from, sizeof c->from, "%s at %s", a->hosts[i].name, a->hosts[i].address);
    snprintf(c->to, sizeof c->to, "%s at %s", b->hosts[i].name, b->hosts[i].address);
}

/* Ranks are numbered over every host's local_clients (another host list
 * is a change of hosts, not of this key). */
static int same_local_clients(const cfg *a, const cfg *b)
{
    if (a->n_hosts != b->n_hosts) return 1;
    for (size_t i = 0; i < a->n_hosts; i++)
        if (a->hosts[i].local_clients != b->hosts[i].local_clients) return 0;
    return 1;
}

static void ring_shape(reload_plan *p, const cfg *a, int a_me, const cfg *b, int b_me,
                       int key_changed)
{
    static const char *const algorithms[] = {"ring", "star"};
    static const char *const ciphers[] = {"none", "aes-256-gcm", "chacha20-poly1305"};
    string(p, "cluster", RELOAD_REFORM, a->cluster, b->cluster, "");
    if (!same_hosts(a, a_me, b, b_me)) {
        reload_change *c = add(p, "hosts", RELOAD_REFORM);
        if (c) hosts_text(a, b, c);
    }
    /* Only this host's socket: the others' are theirs to reload. */
    string(p, "socket", RELOAD_REFORM, a->hosts[a_me].socket, b->hosts[b_me].socket, "");
    if (!same_local_clients(a, b))
        number(p, "local_clients", RELOAD_REFORM, (uint64_t)cfg_total_ranks(a),
               (uint64_t)cfg_total_ranks(b), int_text);
    number(p, "streams", RELOAD_REFORM, (uint64_t)a->streams, (uint64_t)b->streams, int_text);
    named(p, "encryption", RELOAD_REFORM, (int)a->encryption, (int)b->encryption, ciphers);
    if (key_changed) {
        reload_change *c = add(p, "secret_file", RELOAD_REFORM);
        if (c) {
            string_text(a->secret_file, "(none)", c->from);
            string_text(b->secret_file, "(none)", c->to);
            if (same_string(a->secret_file, b->secret_file))
                snprintf(c->to, sizeof c->to, "a new key");
        }
    } else {
        /* The same key from another file: nothing to do but remember it. */
        string(p, "secret_file", RELOAD_AT_ONCE, a->secret_file, b->secret_file, "(none)");
    }
    named(p, "algorithm", RELOAD_REFORM, (int)a->algorithm, (int)b->algorithm, algorithms);
    if (b->algorithm == CFG_ALG_STAR && a->algorithm == CFG_ALG_STAR)
        string(p, "star_root", RELOAD_REFORM, a->star_root, b->star_root, a->hosts[0].name);
    /* The links are elastic or not from their start: turning evict_after
     * on or off builds them again; another duration applies at once. */
    number(p, "evict_after", (a->evict_after_ms > 0) != (b->evict_after_ms > 0) ? RELOAD_REFORM
                                                                                 : RELOAD_AT_ONCE,
           a->evict_after_ms, b->evict_after_ms, duration_text);
}

/* ---- the rest ---- */

static void log_level_text(uint64_t v, char *out)
{
    static const char *const names[] = {"debug", "info", "warn", "error"};
    string_text(v < 4 ? names[v] : "?", "", out);
}

static void milliwatt_text(uint64_t v, char *out)
{
    snprintf(out, RELOAD_MAX_VALUE, "%g", (double)v / 1000);
}

static void socket_mode_text(uint64_t v, char *out)
{
    snprintf(out, RELOAD_MAX_VALUE, "%04" PRIo64, v);
}

void reload_diff(const cfg *a, int a_me, const cfg *b, int b_me, int key_changed, reload_plan *p)
{
    static const char *const wires[] = {"none", "bfloat16", "float16"};
    static const char *const checksums[] = {"none", "crc32c"};
    memset(p, 0, sizeof *p);
    ring_shape(p, a, a_me, b, b_me, key_changed);
    number(p, "segment_size", RELOAD_AT_ONCE, a->segment_bytes, b->segment_bytes, size_text);
    number(p, "max_buffer", RELOAD_AT_ONCE, a->max_buffer_bytes, b->max_buffer_bytes, size_text);
    number(p, "collective_timeout", RELOAD_AT_ONCE, a->collective_timeout_ms,
           b->collective_timeout_ms, duration_text);
    number(p, "connect_timeout", RELOAD_AT_ONCE, a->connect_timeout_ms, b->connect_timeout_ms,
           duration_text);
    number(p, "backoff_initial", RELOAD_AT_ONCE, a->backoff_initial_ms, b->backoff_initial_ms,
           duration_text);
    number(p, "backoff_max", RELOAD_AT_ONCE, a->backoff_max_ms, b->backoff_max_ms, duration_text);
    number(p, "socket_buffer", RELOAD_AT_ONCE, a->socket_buffer_bytes, b->socket_buffer_bytes,
           size_text);
    number(p, "fusion_threshold", RELOAD_AT_ONCE, a->fusion_threshold_bytes,
           b->fusion_threshold_bytes, size_text);
    number(p, "fusion_max", RELOAD_AT_ONCE, (uint64_t)a->fusion_max, (uint64_t)b->fusion_max,
           int_text);
    number(p, "log_level", RELOAD_AT_ONCE, a->log_level, b->log_level, log_level_text);
    number(p, "heartbeat_interval", RELOAD_AT_ONCE, a->heartbeat_interval_ms,
           b->heartbeat_interval_ms, duration_text);
    number(p, "heartbeat_timeout", RELOAD_AT_ONCE, a->heartbeat_timeout_ms,
           b->heartbeat_timeout_ms, duration_text);
    named(p, "checksum", RELOAD_AT_ONCE, a->checksum, b->checksum, checksums);
    named(p, "wire_dtype", RELOAD_AT_ONCE, (int)a->wire_dtype, (int)b->wire_dtype, wires);
    number(p, "min_hosts", RELOAD_AT_ONCE, (uint64_t)a->min_hosts, (uint64_t)b->min_hosts,
           int_text);
    string(p, "metrics", RELOAD_AT_ONCE, a->hosts[a_me].metrics, b->hosts[b_me].metrics, "off");
    string(p, "congestion_control", RELOAD_AT_ONCE, a->congestion_control, b->congestion_control,
           "system");
    number(p, "watts_per_core", RELOAD_AT_ONCE, (uint64_t)(a->watts_per_core * 1000 + 0.5),
           (uint64_t)(b->watts_per_core * 1000 + 0.5), milliwatt_text);

    number(p, "socket_mode", RELOAD_ACCESS, a->socket_mode, b->socket_mode, socket_mode_text);
    string(p, "socket_group", RELOAD_ACCESS, a->socket_group.value, b->socket_group.value,
           "(the daemon's)");
    if (!same_ids(&a->allowed_uids, &b->allowed_uids)) {
        reload_change *c = add(p, "allowed_uids", RELOAD_ACCESS);
        if (c) ids_text(&a->allowed_uids, c->from), ids_text(&b->allowed_uids, c->to);
    }
    if (!same_ids(&a->allowed_gids, &b->allowed_gids)) {
        reload_change *c = add(p, "allowed_gids", RELOAD_ACCESS);
        if (c) ids_text(&a->allowed_gids, c->from), ids_text(&b->allowed_gids, c->to);
    }
}

/* ---- applying ---- */

#define SWAP(type, x, y)                                                                           \
    do {                                                                                           \
        type swap_ = (x);                                                                          \
        (x) = (y);                                                                                 \
        (y) = swap_;                                                                               \
    } while (0)

void reload_apply(cfg *a, int me, cfg *b)
{
    a->segment_bytes = b->segment_bytes;
    a->max_buffer_bytes = b->max_buffer_bytes;
    a->collective_timeout_ms = b->collective_timeout_ms;
    a->connect_timeout_ms = b->connect_timeout_ms;
    a->backoff_initial_ms = b->backoff_initial_ms;
    a->backoff_max_ms = b->backoff_max_ms;
    a->socket_buffer_bytes = b->socket_buffer_bytes;
    a->fusion_threshold_bytes = b->fusion_threshold_bytes;
    a->fusion_max = b->fusion_max;
    a->log_level = b->log_level;
    a->heartbeat_interval_ms = b->heartbeat_interval_ms;
    a->heartbeat_timeout_ms = b->heartbeat_timeout_ms;
    a->checksum = b->checksum;
    a->wire_dtype = b->wire_dtype;
    a->evict_after_ms = b->evict_after_ms;
    a->evict_set = b->evict_set;
    a->min_hosts = b->min_hosts;
    a->watts_per_core = b->watts_per_core;
    a->socket_mode = b->socket_mode;
    SWAP(char *, a->secret_file, b->secret_file);
    SWAP(char *, a->congestion_control, b->congestion_control);
    SWAP(char *, a->metrics, b->metrics);
    SWAP(char *, a->hosts[me].metrics, b->hosts[me].metrics);
    SWAP(cfg_id, a->socket_group, b->socket_group);
    SWAP(cfg_id_list, a->allowed_uids, b->allowed_uids);
    SWAP(cfg_id_list, a->allowed_gids, b->allowed_gids);
}

void reload_describe(const reload_plan *p, int how, char *out, size_t len)
{
    size_t used = 0;
    if (len) out[0] = '\0';
    for (int i = 0; i < p->n && used + 1 < len; i++) {
        const reload_change *c = &p->changes[i];
        if (how >= 0 && c->how != (reload_how)how) continue;
        int k = snprintf(out + used, len - used, "%s%s %s -> %s", used ? ", " : "", c->key,
                         c->from, c->to);
        if (k < 0) break;
        used += (size_t)k < len - used ? (size_t)k : len - used - 1;
    }
}
