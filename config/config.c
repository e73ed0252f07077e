/*
 * config.c - load and validate the ringd YAML configuration.
 *
 * libyaml's document API turns the file into a node tree whose nodes carry
 * their position in the file. We walk that tree once: every mapping is
 * checked against a table of known keys (unknown and duplicate keys are
 * errors), every value is parsed by the function its table entry names, and
 * the first problem stops the walk with one message pointing at the node.
 * Cross-key rules (inherited per-host settings, backoff_max >= initial) are
 * applied after the walk, when every key has been seen.
 */
#include "config/config.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define DEFAULT_SOCKET "/run/ringd/ringd.sock"
#define SUN_PATH_MAX 107 /* sizeof(sockaddr_un.sun_path) minus the NUL */
/* A configuration is a few KiB (1024 hosts: about 100 KiB). The caps keep
 * libyaml's time bounded on hostile input: its scanner does work per token
 * proportional to the nesting depth, so 100,000 nested "[" took over 20 s. */
#define MAX_FILE_BYTES (1u << 20)
#define MAX_DEPTH 32 /* nested mappings and sequences; the schema needs 3 */
#define KiB 1024ull
#define MiB (1024ull * KiB)
#define GiB (1024ull * MiB)
#define SEC 1000ull
#define MIN (60 * SEC)
#define HOUR (60 * MIN)

typedef struct {
    const char *text; /* the whole input, to place reader errors */
    size_t len;
    yaml_document_t *doc;
    cfg *c;
    char *err;
    size_t errlen;
    char got[96]; /* the "got ..." part of the current message */
} ctx;

struct key;
typedef int parse_fn(ctx *x, void *obj, const struct key *k, yaml_node_t *v, const char *kp);

/* One accepted key of a mapping: how to parse its value and where to store
 * it (offset and size of the field in a cfg or a cfg_host). */
struct key {
    const char *name;
    parse_fn *parse;
    bool required;
    size_t offset, size;
    uint64_t min, max;
};

#define FIELD(type, f) offsetof(type, f), sizeof(((type *)0)->f)

static parse_fn parse_name, parse_socket, parse_count, parse_size, parse_duration, parse_log_level,
    parse_hosts, parse_address, parse_path, parse_checksum, parse_listen, parse_mode, parse_id,
    parse_id_list, parse_algorithm, parse_encryption, parse_wire_dtype, parse_congestion,
    parse_evict_after, parse_watts;

static const struct key top_keys[] = {
    {"cluster", parse_name, true, FIELD(cfg, cluster), 0, 0},
    {"socket", parse_socket, false, FIELD(cfg, socket), 0, 0},
    {"local_clients", parse_count, false, FIELD(cfg, local_clients), 1, 1024},
    {"hosts", parse_hosts, true, 0, 0, 0, 0},
    {"segment_size", parse_size, false, FIELD(cfg, segment_bytes), 4 * KiB, 16 * MiB},
    {"max_buffer", parse_size, false, FIELD(cfg, max_buffer_bytes), 1 * MiB, 64 * GiB},
    {"collective_timeout", parse_duration, false, FIELD(cfg, collective_timeout_ms), 100,
     24 * HOUR},
    {"connect_timeout", parse_duration, false, FIELD(cfg, connect_timeout_ms), 100, 10 * MIN},
    {"backoff_initial", parse_duration, false, FIELD(cfg, backoff_initial_ms), 10, 1 * HOUR},
    {"backoff_max", parse_duration, false, FIELD(cfg, backoff_max_ms), 10, 1 * HOUR},
    {"socket_buffer", parse_size, false, FIELD(cfg, socket_buffer_bytes), 0, 1 * GiB},
    {"fusion_threshold", parse_size, false, FIELD(cfg, fusion_threshold_bytes), 0, 1 * GiB},
    {"fusion_max", parse_count, false, FIELD(cfg, fusion_max), 1, 64},
    {"streams", parse_count, false, FIELD(cfg, streams), 1, 8},
    {"congestion_control", parse_congestion, false, FIELD(cfg, congestion_control), 0, 0},
    {"log_level", parse_log_level, false, FIELD(cfg, log_level), 0, 0},
    {"heartbeat_interval", parse_duration, false, FIELD(cfg, heartbeat_interval_ms), 10, 1 * MIN},
    {"heartbeat_timeout", parse_duration, false, FIELD(cfg, heartbeat_timeout_ms), 50, 1 * HOUR},
    {"secret_file", parse_path, false, FIELD(cfg, secret_file), 0, 0},
    {"checksum", parse_checksum, false, FIELD(cfg, checksum), 0, 0},
    {"encryption", parse_encryption, false, FIELD(cfg, encryption), 0, 0},
    {"wire_dtype", parse_wire_dtype, false, FIELD(cfg, wire_dtype), 0, 0},
    {"metrics", parse_listen, false, FIELD(cfg, metrics), 0, 0},
    {"socket_mode", parse_mode, false, FIELD(cfg, socket_mode), 0, 0777},
    {"socket_group", parse_id, false, FIELD(cfg, socket_group), 0, 0},
    {"allowed_uids", parse_id_list, false, FIELD(cfg, allowed_uids), 0, 0},
    {"allowed_gids", parse_id_list, false, FIELD(cfg, allowed_gids), 0, 0},
    {"algorithm", parse_algorithm, false, FIELD(cfg, algorithm), 0, 0},
    {"star_root", parse_name, false, FIELD(cfg, star_root), 0, 0},
    {"min_hosts", parse_count, false, FIELD(cfg, min_hosts), 1, CFG_MAX_HOSTS},
    {"evict_after", parse_evict_after, false, FIELD(cfg, evict_after_ms), 1 * SEC, 1 * HOUR},
    {"watts_per_core", parse_watts, false, FIELD(cfg, watts_per_core), 0, 1000},
};

static const struct key host_keys[] = {
    {"name", parse_name, true, FIELD(cfg_host, name), 0, 0},
    {"address", parse_address, true, 0, 0, 0, 0},
    {"socket", parse_socket, false, FIELD(cfg_host, socket), 0, 0},
    {"local_clients", parse_count, false, FIELD(cfg_host, local_clients), 1, 1024},
    {"metrics", parse_listen, false, FIELD(cfg_host, metrics), 0, 0},
};

#define N_TOP (sizeof top_keys / sizeof top_keys[0])
#define N_HOST (sizeof host_keys / sizeof host_keys[0])

/* ---- Messages ---------------------------------------------------------- */

__attribute__((format(printf, 4, 5))) static int fail(ctx *x, yaml_mark_t m, const char *kp,
                                                      const char *fmt, ...)
{
    int n = snprintf(x->err, x->errlen, "%s:%zu:%zu: %s%s", x->c->path, m.line + 1, m.column + 1,
                     kp, *kp ? ": " : "");
    if (n >= 0 && (size_t)n < x->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(x->err + n, x->errlen - n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int fail_oom(ctx *x)
{
    snprintf(x->err, x->errlen, "%s: out of memory", x->c->path ? x->c->path : "config");
    return -1;
}

/* Quotes s for a message: printable ASCII as is, the rest escaped, long
 * values cut short, so that a message always stays one readable line. */
static const char *quote(ctx *x, const char *s, size_t len)
{
    char *o = x->got, *end = x->got + sizeof x->got - 8;
    *o++ = '"';
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (o + 4 >= end) {
            strcpy(o, "...");
            o += 3;
            break;
        }
        if (ch == '"' || ch == '\\')
            o += sprintf(o, "\\%c", ch);
        else if (ch < 0x20 || ch >= 0x7f)
            o += sprintf(o, "\\x%02x", ch);
        else
            *o++ = (char)ch;
    }
    strcpy(o, "\"");
    return x->got;
}

/* What a node is, for the "got ..." part of a message. */
static const char *describe(ctx *x, yaml_node_t *n)
{
    switch (n->type) {
    case YAML_MAPPING_NODE:
        return "a mapping";
    case YAML_SEQUENCE_NODE:
        return "a sequence";
    case YAML_SCALAR_NODE:
        if (n->data.scalar.length == 0 && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE)
            return "an empty value";
        return quote(x, (const char *)n->data.scalar.value, n->data.scalar.length);
    default:
        return "nothing";
    }
}

static void fmt_size(char *buf, size_t len, uint64_t v)
{
    static const char *unit[] = {"bytes", "KiB", "MiB", "GiB"};
    int u = 0;
    while (u < 3 && v >= 1024 && v % 1024 == 0) {
        v /= 1024;
        u++;
    }
    snprintf(buf, len, "%llu %s", (unsigned long long)v, unit[u]);
}

static void fmt_duration(char *buf, size_t len, uint64_t ms)
{
    if (ms >= HOUR && ms % HOUR == 0)
        snprintf(buf, len, "%lluh", (unsigned long long)(ms / HOUR));
    else if (ms >= MIN && ms % MIN == 0)
        snprintf(buf, len, "%llum", (unsigned long long)(ms / MIN));
    else if (ms >= SEC && ms % SEC == 0)
        snprintf(buf, len, "%llus", (unsigned long long)(ms / SEC));
    else
        snprintf(buf, len, "%llums", (unsigned long long)ms);
}

/* ---- Number formats, shared with the command-line flags --------------- */

/* A decimal number without sign; *end is left after it. */
static int parse_digits(const char *s, uint64_t *out, const char **end)
{
    uint64_t v = 0;
    if (*s < '0' || *s > '9') return -1;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10) return -1;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    *end = s;
    return 0;
}

struct unit {
    const char *suffix;
    uint64_t mult;
};

static int parse_with_units(const char *s, uint64_t *out, const struct unit *units, size_t n)
{
    uint64_t v;
    const char *rest;
    if (!s || parse_digits(s, &v, &rest) < 0) return -1;
    while (*rest == ' ') /* "4 MiB" reads as well as "4MiB" */
        rest++;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(rest, units[i].suffix) == 0) {
            if (units[i].mult && v > UINT64_MAX / units[i].mult) return -1;
            *out = v * units[i].mult;
            return 0;
        }
    }
    return -1;
}

int cfg_parse_size(const char *s, uint64_t *out)
{
    static const struct unit units[] = {{"", 1},      {"K", KiB}, {"KiB", KiB}, {"M", MiB},
                                        {"MiB", MiB}, {"G", GiB}, {"GiB", GiB}};
    return parse_with_units(s, out, units, sizeof units / sizeof units[0]);
}

int cfg_parse_duration_ms(const char *s, uint64_t *out)
{
    /* No unitless form: "collective_timeout: 30" read as 30 ms was a trap. */
    static const struct unit units[] = {{"ms", 1}, {"s", SEC}, {"m", MIN}, {"h", HOUR}};
    return parse_with_units(s, out, units, sizeof units / sizeof units[0]);
}

/* ---- Values ------------------------------------------------------------ */

/* The text of a scalar node, or an error naming what was expected. Scalars
 * with an embedded NUL are refused: everything downstream is C strings. */
static const char *scalar(ctx *x, yaml_node_t *v, const char *kp, const char *expected)
{
    if (v->type != YAML_SCALAR_NODE) {
        fail(x, v->start_mark, kp, "expected %s, got %s", expected, describe(x, v));
        return NULL;
    }
    const char *s = (const char *)v->data.scalar.value;
    if (memchr(s, '\0', v->data.scalar.length)) {
        fail(x, v->start_mark, kp, "expected %s, got a value containing a NUL byte", expected);
        return NULL;
    }
    return s;
}

static void *field(void *obj, const struct key *k)
{
    return (char *)obj + k->offset;
}

static void store_uint(void *obj, const struct key *k, uint64_t v)
{
    switch (k->size) {
    case sizeof(uint32_t):
        *(uint32_t *)field(obj, k) = (uint32_t)v;
        break;
    case sizeof(uint64_t):
        *(uint64_t *)field(obj, k) = v;
        break;
    }
}

static int store_string(ctx *x, void *obj, const struct key *k, const char *s)
{
    char *copy = strdup(s);
    if (!copy) return fail_oom(x);
    *(char **)field(obj, k) = copy;
    return 0;
}

static bool valid_name(const char *s)
{
    size_t len = strlen(s);
    return len >= 1 && len <= CFG_MAX_NAME &&
           strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == len;
}

static int parse_name(ctx *x, void *obj, const struct key *k, yaml_node_t *v, const char *kp)
{
    static const char expected[] = "a name of 1 to 64 characters from A-Z a-z 0-9 . _ -";
    const char *s = scalar(x, v, kp, expected);
    if (!s) return -1;
    if (!valid_name(s))
        return fail(x, v->start_mark, kp, "expected %s, got %s", expected, describe(x, v));
    return store_string(x, obj, k, s);
}

static int parse_socket(ctx *x, void *obj, const struct key *k, yaml_node_t *v, const char *kp)
{
    const char *s = scalar(x, v, kp, "an absolute path");
    if (!s) return -1;
    if (s[0] != '/')
        return fail(x, v->start_mark, kp, "expected an absolute path, got %s", describe(x, v));
    if (strlen(s) > SUN_PATH_MAX)
        return fail(x, v->start_mark, kp,
                    "expected a path of at most %d bytes (the sun_path limit of Unix sockets), "
                    "got %zu bytes",
                    SUN_PATH_MAX, strlen(s));
    return store_string(x, obj, k, s);
}

static int parse_path(ctx *x, void *obj, const struct key *k, yaml_node_t *v, const char *kp)
{
    const char *s = scalar(x, v, kp, "an absolute path");
    if (!s) return -1;
    if (s[0] != '/')
        return fail(x, v->start_mark, kp, "expected an absolute path, got %s", describe(x, v));
    return store_string(x, obj, k, s);
}

static int parse_checksum(ctx *x, void *obj, const struct key *k, yaml_node_t *v, const char *kp)
{
    static const char expected[] = "one of crc32c, none";
    const char *s = scalar(x, v, kp, expected);
    if (!s) return -1;
    if (strcmp(s, "crc32c") != 0 && strcmp(s, "none") != 0)
        return fail(x, v->start_mark, kp, "expected %s, got %s", expected, describe(x, v));
    *(bool *)field(obj, k) = strcmp(s, "crc32c") == 0;
    return 0;
}

/* One of names[0..n), stored as its index in an enum field. */
static int parse_choice(ctx *x, void *obj, const struct key *k, yaml_node_t *v, const char *kp,
                        const char *const *names, int n)
{
    char expected[128];
    size_t len = (size_t)snprintf(expected, sizeof expected, "one of ");
    for (int i = 0; i < n && len < sizeof expected; i++)
        len += (size_t)snprintf(expected + len, sizeof expected - len, "%s%s", i ? ", " : "",
                                names[i]);
    const char *s = scalar(x, v, kp, expected);
    if (!s) return -1;
    for (int i = 0; i < n; i++) {
        if (strcmp(s, names[i]) == 0) {
            *(int *)field(obj, k) = i;
            return 0;
        }
    }
    return fail(x, v->start_mark, kp, "expected %s, got %s", expected, describe(x, v));
}

/* A Linux TCP congestion control name (as in
 * net.ipv4.tcp_available_congestion_control), or "system". */
static int parse_congestion(ctx *x, void *obj, const struct key *k, yaml_node_t *v, const char *kp)
{
    static const char expected[] = "a TCP congestion control name (cubic, reno, bbr, ...) or system";
    const char *s = scalar(x, v, kp, expected);
    if (!s) return -1;
    size_t len = strlen(s);
    if (len < 1 || len > 15 || strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789_-") != len)
        return fail(x, v->start_mark, kp, "expected %s, got %s", expected, describe(x, v));
    char **f = field(obj, k);
    free(*f);
    *f = NULL;
    return strcmp(s, "system") == 0 ? 0 : store_string(x, obj, k, s);
}

static int parse_encryption(ctx *x, void *obj, const struct key *k, yaml_node_t *v, const char *kp)
{
    /* In cfg_cipher order. */
    static const char *const names[] = {"none", "aes-256-gcm", "chacha20-poly1305"};
    _Static_assert(sizeof(cfg_cipher) == sizeof(int), "stored as an int");
    return parse_choice(x, obj, k, v, kp, names, 3);
}

static int parse_wire_dtype(ctx *x, void *obj, const struct key *k, yaml_node_t *v, const char *kp)
{
    /* In cfg_wire order. */
    static const char *const names[] = {"none", "bfloat16", "float16"};
    _Static_assert(sizeof(cfg_wire) == sizeof(int), "stored as an int");
    return parse_choice(x, obj, k, v, kp, names, 3);
}

static int parse_count(ctx *x, void *obj, const struct key *k, yaml_node_t *v, const char *kp)
{
    char expected[48];
    snprintf(expected, sizeof expected, "an integer %llu..%llu", (unsigned long long)k->min,
             (unsigned long long)k->max);
    const char *s = scalar(x, v, kp, expected), *rest;
    uint64_t n;
    if (!s) return -1;
    if (parse_digits(s, &n, &rest) < 0 || *rest || n < k->min || n > k->max)
        return fail(x, v->start_mark, kp, "expected %s, got %s", expected, describe(x, v));
    *(int *)field(obj, k) = (int)n;
    return 0;
}

/* A decimal number of watts, "10" or "7.5" (at most three decimals, no
 * sign or exponent), from k->min to k->max. */
static int parse_watts(ctx *x, void *obj, const struct key *k, yaml_node_t *v, const char *kp)
{
    char expected[64];
    snprintf(expected, sizeof expected, "a number of watts %llu..%llu, such as 7.5",
             (unsigned long long)k->min, (unsigned long long)k->max);
    const char *s = scalar(x, v, kp, expected), *rest;
    uint64_t whole, frac = 0;
    if (!s) return -1;
    int ok = parse_digits(s, &whole, &rest) == 0;
    int decimals = 0;
    if (ok && *rest == '.') {
        for (rest++; *rest >= '0' && *rest <= '9' && decimals < 3; rest++, decimals++)
            frac = frac * 10 + (uint64_t)(*rest - '0');
        ok = decimals > 0;
    }
    if (!ok || *rest || whole > k->max || (whole == k->max && frac) || whole < k->min)
        return fail(x, v->start_mark, kp, "expected %s, got %s", expected, describe(x, v));
    double scale = 1;
    while (decimals-- > 0)
        scale *= 10;
    *(double *)field(obj, k) = (double)whole + (double)frac / scale;
    return 0;
}

static int parse_size(ctx *x, void *obj, const struct key *k, yaml_node_t *v, const char *kp)
{
    static const char format[] = "a size (bytes, or a number with K, KiB, M, MiB, G or GiB)";
    char lo[32], hi[32];
    uint64_t n;
    const char *s = scalar(x, v, kp, format);
    if (!s) return -1;
    if (cfg_parse_size(s, &n) < 0)
        return fail(x, v->start_mark, kp, "expected %s, got %s", format, describe(x, v));
    if (n < k->min || n > k->max) {
        fmt_size(lo, sizeof lo, k->min);
        fmt_size(hi, sizeof hi, k->max);
        return fail(x, v->start_mark, kp, "expected a size from %s to %s, got %s", lo, hi,
                    describe(x, v));
    }
    /* Segments hold whole elements of every data type, the widest being 8 bytes. */
    if (k->offset == offsetof(cfg, segment_bytes) && n % 8 != 0)
        return fail(x, v->start_mark, kp, "expected a multiple of 8 bytes, got %s", describe(x, v));
    store_uint(obj, k, n);
    return 0;
}

static int parse_duration(ctx *x, void *obj, const struct key *k, yaml_node_t *v, const char *kp)
{
    static const char format[] = "a duration (a number with ms, s, m or h)";
    char lo[32], hi[32];
    uint64_t n;
    const char *rest;
    const char *s = scalar(x, v, kp, format);
    if (!s) return -1;
    /* A bare number is the likeliest mistake: say what to write instead. */
    if (parse_digits(s, &n, &rest) == 0 && !*rest)
        return fail(x, v->start_mark, kp, "%s has no unit: add a unit, e.g. %llus (or ms, m, h)",
                    describe(x, v), (unsigned long long)n);
    if (cfg_parse_duration_ms(s, &n) < 0)
        return fail(x, v->start_mark, kp, "expected %s, got %s", format, describe(x, v));
    if (n < k->min || n > k->max) {
        fmt_duration(lo, sizeof lo, k->min);
        fmt_duration(hi, sizeof hi, k->max);
        return fail(x, v->start_mark, kp, "expected a duration from %s to %s, got %s", lo, hi,
                    describe(x, v));
    }
    store_uint(obj, k, n);
    return 0;
}

/* evict_after: a duration, or 0 (off: the ring waits for a host forever). */
static int parse_evict_after(ctx *x, void *obj, const struct key *k, yaml_node_t *v, const char *kp)
{
    const char *s = scalar(x, v, kp, "a duration (a number with ms, s, m or h), or 0");
    if (!s) return -1;
    if (strcmp(s, "0") == 0) {
        store_uint(obj, k, 0);
        ((cfg *)obj)->evict_set = true;
        return 0;
    }
    if (parse_duration(x, obj, k, v, kp) < 0) return -1;
    ((cfg *)obj)->evict_set = true;
    return 0;
}

static int parse_log_level(ctx *x, void *obj, const struct key *k, yaml_node_t *v, const char *kp)
{
    static const char *names[] = {"debug", "info", "warn", "error"};
    static const char expected[] = "one of debug, info, warn, error";
    const char *s = scalar(x, v, kp, expected);
    if (!s) return -1;
    for (int i = 0; i < 4; i++) {
        if (strcmp(s, names[i]) == 0) {
            *(cfg_log_level *)field(obj, k) = (cfg_log_level)i;
            return 0;
        }
    }
    return fail(x, v->start_mark, kp, "expected %s, got %s", expected, describe(x, v));
}

static int parse_algorithm(ctx *x, void *obj, const struct key *k, yaml_node_t *v, const char *kp) {
    static const char expected[] = "one of ring, star";
    const char *s = scalar(x, v, kp, expected);
    if (!s)
        return -1;
    if (strcmp(s, "ring") == 0 || strcmp(s, "star") == 0) {
        *(cfg_algorithm *)field(obj, k) = s[0] == 'r' ? CFG_ALG_RING : CFG_ALG_STAR;
        return 0;
    }
    return fail(x, v->start_mark, kp, "expected %s, got %s", expected, describe(x, v));
}

/* A DNS name: dot-separated labels of letters, digits, '-' and '_' (common in
 * internal names), no label empty or starting or ending with '-'. */
static bool valid_hostname(const char *s, size_t len)
{
    if (len == 0 || len > 253) return false;
    size_t label = 0;
    for (size_t i = 0; i <= len; i++) {
        char ch = i < len ? s[i] : '.';
        if (ch == '.') {
            if (label == 0 || label > 63 || s[i - 1] == '-') return false;
            label = 0;
        } else if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                   (ch >= '0' && ch <= '9') || ch == '_' || (ch == '-' && label > 0)) {
            label++;
        } else {
            return false;
        }
    }
    return true;
}

/* "HOST:PORT": an IPv4 literal, a host name or a bracketed IPv6 literal
 * (with an optional %zone), then a port 1..65535. */
static int parse_address(ctx *x, void *obj, const struct key *k, yaml_node_t *v, const char *kp)
{
    cfg_host *h = obj;
    char node[256];
    const char *s = scalar(x, v, kp, "HOST:PORT"), *host, *colon, *rest;
    size_t hlen;
    uint64_t port;
    (void)k;
    if (!s) return -1;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':')
            return fail(x, v->start_mark, kp, "expected [IPv6]:PORT, got %s", describe(x, v));
        host = s + 1;
        hlen = (size_t)(close - host);
        colon = close + 1;
        if (hlen >= sizeof node)
            return fail(x, v->start_mark, kp, "expected an IPv6 address in brackets, got %s",
                        describe(x, v));
        memcpy(node, host, hlen);
        node[hlen] = '\0';
        char *zone = strchr(node, '%');
        if (zone) *zone = '\0';
        struct in6_addr a6;
        if (inet_pton(AF_INET6, node, &a6) != 1 ||
            (zone && (!zone[1] || strspn(zone + 1, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopq"
                                                   "rstuvwxyz0123456789._-") != strlen(zone + 1))))
            return fail(x, v->start_mark, kp, "expected an IPv6 address in brackets, got %s",
                        describe(x, v));
        if (zone) *zone = '%';
    } else {
        colon = strrchr(s, ':');
        if (!colon) return fail(x, v->start_mark, kp, "expected HOST:PORT, got %s", describe(x, v));
        host = s;
        hlen = (size_t)(colon - s);
        if (memchr(host, ':', hlen))
            return fail(x, v->start_mark, kp,
                        "expected HOST:PORT (an IPv6 address goes in "
                        "brackets: [::1]:7701), got %s",
                        describe(x, v));
        if (!valid_hostname(host, hlen))
            return fail(x, v->start_mark, kp,
                        "expected an IPv4 address or a host name before "
                        "the port, got %s",
                        describe(x, v));
        memcpy(node, host, hlen);
        node[hlen] = '\0';
        /* All digits and dots is meant as an IPv4 literal; "10.0.0.300" is a typo. */
        struct in_addr a4;
        if (strspn(node, "0123456789.") == hlen && inet_pton(AF_INET, node, &a4) != 1)
            return fail(x, v->start_mark, kp, "expected a valid IPv4 address, got %s",
                        describe(x, v));
    }
    if (parse_digits(colon + 1, &port, &rest) < 0 || *rest || port < 1 || port > 65535)
        return fail(x, v->start_mark, kp, "expected a port 1..65535 after the colon, got %s",
                    describe(x, v));
    if (!(h->address = strdup(s)) || !(h->node = strdup(node))) return fail_oom(x);
    h->port = (uint16_t)port;
    return 0;
}

/* "IP:PORT" to listen on: a host's address format, but an IP literal, since
 * the daemon binds it without resolving. */
static int parse_listen(ctx *x, void *obj, const struct key *k, yaml_node_t *v, const char *kp)
{
    cfg_host tmp = {0};
    unsigned char a[sizeof(struct in6_addr)];
    if (parse_address(x, &tmp, k, v, kp) < 0) return -1;
    int ip = inet_pton(AF_INET, tmp.node, a) == 1 || inet_pton(AF_INET6, tmp.node, a) == 1;
    free(tmp.node);
    if (!ip) {
        free(tmp.address);
        return fail(x, v->start_mark, kp, "expected IP:PORT to listen on (127.0.0.1:9711), got %s",
                    describe(x, v));
    }
    *(char **)field(obj, k) = tmp.address;
    return 0;
}

/* ---- Local access ------------------------------------------------------ */

/* Permission bits in octal, as chmod takes them: "0660", "660", "0o660". */
static int parse_mode(ctx *x, void *obj, const struct key *k, yaml_node_t *v, const char *kp) {
    static const char expected[] = "octal permission bits 0000..0777, such as \"0660\"";
    const char *s = scalar(x, v, kp, expected), *p;
    if (!s)
        return -1;
    p = strncmp(s, "0o", 2) == 0 ? s + 2 : s;
    size_t n = strspn(p, "01234567");
    unsigned long mode = n >= 1 && n <= 4 && !p[n] ? strtoul(p, NULL, 8) : ULONG_MAX;
    if (mode > k->max)
        return fail(x, v->start_mark, kp, "expected %s, got %s", expected, describe(x, v));
    *(uint32_t *)field(obj, k) = (uint32_t)mode;
    return 0;
}

/* A user or group name (as useradd allows them) or a number. */
static int store_id(ctx *x, cfg_id *id, yaml_node_t *v, const char *kp) {
    static const char expected[] = "a user or group name or a number";
    const char *s = scalar(x, v, kp, expected), *rest;
    uint64_t n;
    if (!s)
        return -1;
    size_t len = strlen(s);
    bool number = parse_digits(s, &n, &rest) == 0 && !*rest;
    bool name = len >= 1 && len <= 32 && s[0] != '-' &&
                strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") ==
                    len;
    if ((number && n >= UINT32_MAX) || (!number && !name))
        return fail(x, v->start_mark, kp, "expected %s, got %s", expected, describe(x, v));
    if (!(id->value = strdup(s)))
        return fail_oom(x);
    id->line = (int)v->start_mark.line + 1;
    id->column = (int)v->start_mark.column + 1;
    return 0;
}

static int parse_id(ctx *x, void *obj, const struct key *k, yaml_node_t *v, const char *kp) {
    return store_id(x, field(obj, k), v, kp);
}

static int parse_id_list(ctx *x, void *obj, const struct key *k, yaml_node_t *v, const char *kp) {
    cfg_id_list *l = field(obj, k);
    char ikp[300];
    if (v->type != YAML_SEQUENCE_NODE)
        return fail(x, v->start_mark, kp, "expected a sequence of names or numbers, got %s",
                    describe(x, v));
    size_t n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
    if (n > CFG_MAX_IDS)
        return fail(x, v->start_mark, kp, "expected at most %d entries, got %zu", CFG_MAX_IDS, n);
    if (n && !(l->items = calloc(n, sizeof *l->items)))
        return fail_oom(x);
    for (size_t i = 0; i < n; i++) {
        l->n = i + 1; /* so that cfg_free() sees every one filled in */
        snprintf(ikp, sizeof ikp, "%s[%zu]", kp, i);
        if (store_id(x, &l->items[i],
                     yaml_document_get_node(x->doc, v->data.sequence.items.start[i]), ikp) < 0)
            return -1;
    }
    return 0;
}

/* ---- Mappings ---------------------------------------------------------- */

static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), row[65];
    if (la > 64 || lb > 64) return SIZE_MAX;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[lb];
}

/* Appends key to the path prefix, escaping anything odd a file may hold. */
static void join_path(char *out, size_t len, const char *prefix, const char *key, size_t klen)
{
    size_t n = (size_t)snprintf(out, len, "%s%s", prefix, *prefix ? "." : "");
    for (size_t i = 0; i < klen && n + 5 < len; i++) {
        unsigned char ch = (unsigned char)key[i];
        n += (size_t)snprintf(out + n, len - n, ch > 0x20 && ch < 0x7f ? "%c" : "\\x%02x", ch);
    }
}

static int unknown_key(ctx *x, yaml_node_t *kn, const char *kp, const char *key,
                       const struct key *keys, size_t nkeys)
{
    const char *best = NULL;
    size_t best_d = SIZE_MAX;
    for (size_t i = 0; i < nkeys; i++) {
        size_t d = edit_distance(key, keys[i].name);
        if (d < best_d) {
            best_d = d;
            best = keys[i].name;
        }
    }
    if (best && best_d <= 2 && best_d < strlen(key))
        return fail(x, kn->start_mark, kp, "unknown key, did you mean %s?", best);
    char list[512];
    size_t n = 0;
    /* Bounded: snprintf returns what it would have written, not what it wrote. */
    for (size_t i = 0; i < nkeys && n < sizeof list; i++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", keys[i].name);
    return fail(x, kn->start_mark, kp, "unknown key, expected one of %s", list);
}

/* Checks every key of mapping m against keys[] and parses the values into
 * obj. found[i] gets the value node of keys[i], or NULL if absent. */
static int walk_mapping(ctx *x, yaml_node_t *m, const char *prefix, const struct key *keys,
                        size_t nkeys, void *obj, yaml_node_t **found)
{
    yaml_node_t *found_key[N_TOP > N_HOST ? N_TOP : N_HOST] = {0};
    char kp[256];
    for (size_t i = 0; i < nkeys; i++)
        found[i] = NULL;
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        yaml_node_t *kn = yaml_document_get_node(x->doc, p->key);
        yaml_node_t *vn = yaml_document_get_node(x->doc, p->value);
        if (kn->type != YAML_SCALAR_NODE)
            return fail(x, kn->start_mark, prefix, "expected a key name, got %s", describe(x, kn));
        const char *key = (const char *)kn->data.scalar.value;
        size_t klen = kn->data.scalar.length;
        join_path(kp, sizeof kp, prefix, key, klen);
        size_t i = 0;
        while (i < nkeys && !(strlen(keys[i].name) == klen && memcmp(keys[i].name, key, klen) == 0))
            i++;
        if (i == nkeys)
            return unknown_key(x, kn, kp, memchr(key, '\0', klen) ? "" : key, keys, nkeys);
        if (found[i])
            return fail(x, kn->start_mark, kp, "duplicate key, first given at line %zu",
                        found_key[i]->start_mark.line + 1);
        found[i] = vn;
        found_key[i] = kn;
        if (keys[i].parse(x, obj, &keys[i], vn, kp) < 0) return -1;
    }
    for (size_t i = 0; i < nkeys; i++) {
        if (keys[i].required && !found[i]) {
            join_path(kp, sizeof kp, prefix, keys[i].name, strlen(keys[i].name));
            return fail(x, m->start_mark, kp, "required key is missing");
        }
    }
    return 0;
}

static yaml_node_t *found_node(yaml_node_t **found, const struct key *keys, size_t nkeys,
                               const char *name)
{
    for (size_t i = 0; i < nkeys; i++)
        if (strcmp(keys[i].name, name) == 0) return found[i];
    return NULL;
}

static int parse_host(ctx *x, size_t i, yaml_node_t *item)
{
    cfg_host *h = &x->c->hosts[i];
    yaml_node_t *found[N_HOST];
    char kp[48];
    snprintf(kp, sizeof kp, "hosts[%zu]", i);
    h->line = (int)item->start_mark.line + 1;
    h->column = (int)item->start_mark.column + 1;
    if (item->type != YAML_MAPPING_NODE)
        return fail(x, item->start_mark, kp, "expected a mapping with name and address, got %s",
                    describe(x, item));
    if (walk_mapping(x, item, kp, host_keys, N_HOST, h, found) < 0) return -1;
    /* Names and addresses identify a host; the same socket path on two hosts
     * is fine, they may well be different machines. */
    for (size_t j = 0; j < i; j++) {
        const cfg_host *o = &x->c->hosts[j];
        if (strcmp(o->name, h->name) == 0) {
            snprintf(kp, sizeof kp, "hosts[%zu].name", i);
            return fail(x, found_node(found, host_keys, N_HOST, "name")->start_mark, kp,
                        "duplicate host name %s, already used by hosts[%zu] at line %d",
                        quote(x, h->name, strlen(h->name)), j, o->line);
        }
        if (strcmp(o->address, h->address) == 0) {
            snprintf(kp, sizeof kp, "hosts[%zu].address", i);
            return fail(x, found_node(found, host_keys, N_HOST, "address")->start_mark, kp,
                        "duplicate address %s, already used by hosts[%zu] at line %d",
                        quote(x, h->address, strlen(h->address)), j, o->line);
        }
    }
    return 0;
}

static int parse_hosts(ctx *x, void *obj, const struct key *k, yaml_node_t *v, const char *kp)
{
    cfg *c = obj;
    (void)k;
    if (v->type != YAML_SEQUENCE_NODE)
        return fail(x, v->start_mark, kp, "expected a sequence of hosts, got %s", describe(x, v));
    size_t n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
    if (n == 0)
        return fail(x, v->start_mark, kp, "expected at least one host, got an empty sequence");
    if (n > CFG_MAX_HOSTS)
        return fail(x, v->start_mark, kp, "expected at most %d hosts, got %zu", CFG_MAX_HOSTS, n);
    if (!(c->hosts = calloc(n, sizeof *c->hosts))) return fail_oom(x);
    /* Count hosts as they are filled in, so that cfg_free() sees them all. */
    for (size_t i = 0; i < n; i++) {
        c->n_hosts = i + 1;
        if (parse_host(x, i, yaml_document_get_node(x->doc, v->data.sequence.items.start[i])) < 0)
            return -1;
    }
    return 0;
}

/* ---- Addresses that are the same machine and port ------------------- */

/* The address ringd would use for node (the first getaddrinfo() gives, as
 * the daemon's connect and bind do), IPv4-mapped IPv6 read as IPv4, into
 * out as text. Returns 0, or -1 if it does not resolve. */
static int resolve_node(const char *node, char *out, size_t len)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(node, NULL, &hints, &res) != 0 || !res) return -1;
    const void *a;
    int family = res->ai_family;
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (family == AF_INET) {
        a = &((struct sockaddr_in *)res->ai_addr)->sin_addr;
    } else {
        const uint8_t *b = ((struct sockaddr_in6 *)res->ai_addr)->sin6_addr.s6_addr;
        a = b;
        if (memcmp(b, mapped, sizeof mapped) == 0) {
            family = AF_INET;
            a = b + 12;
        }
    }
    int ok = inet_ntop(family, a, out, (socklen_t)len) != NULL;
    freeaddrinfo(res);
    return ok ? 0 : -1;
}

/* The parser compares addresses as written; here hosts whose addresses
 * differ in writing but resolve to the same IP and port are refused
 * (127.0.0.1:1 beside localhost:1 or [::ffff:127.0.0.1]:1): their daemons
 * would fight over one port. Only hosts that share a port with another are
 * resolved, and a name that does not resolve (yet) is not compared. */
static int check_resolved(const cfg *c, char *err, size_t errlen)
{
    char (*ip)[INET6_ADDRSTRLEN] = calloc(c->n_hosts, sizeof *ip);
    if (!ip) {
        snprintf(err, errlen, "%s: out of memory", c->path);
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; i < c->n_hosts && rc == 0; i++) {
        const cfg_host *h = &c->hosts[i];
        int shared = 0;
        for (size_t j = 0; j < c->n_hosts && !shared; j++)
            shared = j != i && c->hosts[j].port == h->port;
        if (!shared) continue;
        /* One lookup per name, however many hosts write it alike. */
        for (size_t j = 0; j < i && !ip[i][0]; j++)
            if (strcmp(c->hosts[j].node, h->node) == 0) memcpy(ip[i], ip[j], sizeof ip[i]);
        if (!ip[i][0] && resolve_node(h->node, ip[i], sizeof ip[i]) < 0) ip[i][0] = '\0';
        for (size_t j = 0; j < i && ip[i][0]; j++) {
            const cfg_host *o = &c->hosts[j];
            if (o->port != h->port || strcmp(ip[j], ip[i]) != 0) continue;
            snprintf(err, errlen,
                     "%s:%d:%d: hosts[%zu].address: %s is the address of hosts[%zu] (%s, %s at "
                     "line %d): both are %s port %u; give each host its own address or port",
                     c->path, h->line, h->column, i, h->address, j, o->name, o->address, o->line,
                     ip[i], (unsigned)h->port);
            rc = -1;
            break;
        }
    }
    free(ip);
    return rc;
}

/* ---- Whole file -------------------------------------------------------- */

/* Rules that involve several keys, checked once all of them are known. */
static int finish(ctx *x, yaml_node_t **found)
{
    cfg *c = x->c;
    if (c->backoff_max_ms < c->backoff_initial_ms) {
        char a[32], b[32];
        yaml_node_t *mx = found_node(found, top_keys, N_TOP, "backoff_max");
        yaml_node_t *in = found_node(found, top_keys, N_TOP, "backoff_initial");
        fmt_duration(a, sizeof a, c->backoff_initial_ms);
        fmt_duration(b, sizeof b, c->backoff_max_ms);
        if (mx)
            return fail(x, mx->start_mark, "backoff_max",
                        "expected at least backoff_initial (%s), got %s", a, describe(x, mx));
        return fail(x, in->start_mark, "backoff_initial",
                    "expected at most backoff_max (%s by default), got %s", b, describe(x, in));
    }
    if (c->heartbeat_timeout_ms < 2 * c->heartbeat_interval_ms) {
        char a[32], b[32];
        yaml_node_t *to = found_node(found, top_keys, N_TOP, "heartbeat_timeout");
        yaml_node_t *iv = found_node(found, top_keys, N_TOP, "heartbeat_interval");
        fmt_duration(a, sizeof a, 2 * c->heartbeat_interval_ms);
        fmt_duration(b, sizeof b, c->heartbeat_timeout_ms / 2);
        /* One late heartbeat must not look like a dead neighbour. */
        if (to)
            return fail(x, to->start_mark, "heartbeat_timeout",
                        "expected at least twice heartbeat_interval (%s), got %s", a,
                        describe(x, to));
        return fail(x, iv->start_mark, "heartbeat_interval",
                    "expected at most half of heartbeat_timeout (%s), got %s", b, describe(x, iv));
    }
    if (c->encryption != CFG_CIPHER_NONE && !c->secret_file) {
        yaml_node_t *n = found_node(found, top_keys, N_TOP, "encryption");
        return fail(x, n->start_mark, "encryption",
                    "needs a cluster key: set secret_file too (the links' keys come from it)");
    }
    if (c->star_root) {
        c->star_root_index = cfg_host_index(c, c->star_root);
        if (c->star_root_index < 0) {
            yaml_node_t *n = found_node(found, top_keys, N_TOP, "star_root");
            return fail(x, n->start_mark, "star_root", "expected the name of a host in hosts, got %s",
                        describe(x, n));
        }
    }
    /* A majority: two sides of a split network cannot both have one, so
     * never two rings run at once. */
    size_t majority = c->n_hosts / 2 + 1;
    if (c->min_hosts == 0) {
        c->min_hosts = (int)majority;
    } else if ((size_t)c->min_hosts < majority || (size_t)c->min_hosts > c->n_hosts) {
        yaml_node_t *n = found_node(found, top_keys, N_TOP, "min_hosts");
        return fail(x, n->start_mark, "min_hosts",
                    "expected %zu..%zu (a majority of the %zu hosts, so that the two sides of a "
                    "split network can never both run), got %s",
                    majority, c->n_hosts, c->n_hosts, describe(x, n));
    }
    if (c->evict_after_ms && (c->algorithm != CFG_ALG_RING || c->n_hosts > CFG_MAX_ELASTIC)) {
        yaml_node_t *n = found_node(found, top_keys, N_TOP, "evict_after");
        if (!c->evict_set) {
            c->evict_after_ms = 0; /* the default: only where it applies */
        } else if (c->algorithm != CFG_ALG_RING) {
            return fail(x, n->start_mark, "evict_after",
                        "only the ring closes over a missing host: set evict_after: 0 with "
                        "algorithm: star");
        } else {
            return fail(x, n->start_mark, "evict_after",
                        "a ring closes over missing hosts only up to %d hosts, this one has %zu: "
                        "set evict_after: 0",
                        CFG_MAX_ELASTIC, c->n_hosts);
        }
    }
    if (!c->socket && !(c->socket = strdup(DEFAULT_SOCKET)))
        return fail_oom(x);
    for (size_t i = 0; i < c->n_hosts; i++) {
        cfg_host *h = &c->hosts[i];
        if (!h->socket && !(h->socket = strdup(c->socket))) return fail_oom(x);
        if (!h->local_clients) h->local_clients = c->local_clients;
        if (!h->metrics && c->metrics && !(h->metrics = strdup(c->metrics))) return fail_oom(x);
    }
    return 0;
}

static void set_defaults(cfg *c)
{
    c->local_clients = 1;
    c->segment_bytes = 256 * KiB;
    c->max_buffer_bytes = 4 * GiB;
    c->collective_timeout_ms = 60 * SEC;
    c->connect_timeout_ms = 5 * SEC;
    c->backoff_initial_ms = 100;
    c->backoff_max_ms = 5 * SEC;
    c->socket_buffer_bytes = 4 * MiB;
    c->fusion_threshold_bytes = 4 * MiB;
    c->fusion_max = 32;
    c->streams = 1;
    c->log_level = CFG_LOG_INFO;
    c->heartbeat_interval_ms = 1 * SEC;
    c->heartbeat_timeout_ms = 5 * SEC;
    c->evict_after_ms = 10 * SEC;
    c->checksum = true;
    c->socket_mode = 0660;
    /* A server core under load draws a few watts to 15 (a package's TDP
     * over its cores); 10 is a round middle for an estimate. */
    c->watts_per_core = 10;
    /* BBR, the default of some kernels, drains its window for 200 ms every
     * 10 s (ProbeRTT) and overfills small switch buffers when it probes:
     * runs of a ring allreduce 20% slow (bench/RESULTS.md, "Stalls"). */
    c->congestion_control = strdup("cubic");
}

static int parse_yaml_error(ctx *x, yaml_parser_t *p)
{
    if (p->error == YAML_MEMORY_ERROR) return fail_oom(x);
    /* The reader (bad UTF-8) only knows a byte offset: turn it into a mark. */
    if (p->error == YAML_READER_ERROR) {
        yaml_mark_t m = {0, 0, 0};
        for (size_t i = 0; i < p->problem_offset && i < x->len; i++) {
            if (x->text[i] == '\n') {
                m.line++;
                m.column = 0;
            } else {
                m.column++;
            }
        }
        return fail(x, m, "", "invalid YAML: %s", p->problem ? p->problem : "unreadable input");
    }
    if (p->context)
        return fail(x, p->problem_mark, "", "invalid YAML: %s (%s started at line %zu, column %zu)",
                    p->problem, p->context, p->context_mark.line + 1, p->context_mark.column + 1);
    return fail(x, p->problem_mark, "", "invalid YAML: %s", p->problem ? p->problem : "error");
}

/* Refuses input nested deeper than MAX_DEPTH before libyaml builds its
 * document: one pass of events, stopped at the first node too deep. */
static int check_depth(ctx *x, const char *text, size_t len)
{
    yaml_parser_t p;
    yaml_event_t ev;
    int depth = 0, rc = 0;
    if (!yaml_parser_initialize(&p)) return fail_oom(x);
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    for (;;) {
        if (!yaml_parser_parse(&p, &ev)) {
            rc = parse_yaml_error(x, &p);
            break;
        }
        yaml_event_type_t t = ev.type;
        yaml_mark_t m = ev.start_mark;
        yaml_event_delete(&ev);
        if (t == YAML_SEQUENCE_START_EVENT || t == YAML_MAPPING_START_EVENT) {
            if (++depth > MAX_DEPTH) {
                rc = fail(x, m, "",
                          "nested more than %d levels deep: a ringd configuration needs 3",
                          MAX_DEPTH);
                break;
            }
        } else if (t == YAML_SEQUENCE_END_EVENT || t == YAML_MAPPING_END_EVENT) {
            depth--;
        } else if (t == YAML_STREAM_END_EVENT) {
            break;
        }
    }
    yaml_parser_delete(&p);
    return rc;
}

static int parse_document(ctx *x, yaml_parser_t *p)
{
    yaml_node_t *found[N_TOP];
    yaml_node_t *root = yaml_document_get_root_node(x->doc);
    yaml_mark_t start = {0, 0, 0};
    if (!root) return fail(x, start, "", "expected a mapping of settings, got an empty file");
    if (root->type != YAML_MAPPING_NODE)
        return fail(x, root->start_mark, "",
                    "expected a mapping of settings at the top level, "
                    "got %s",
                    describe(x, root));
    if (walk_mapping(x, root, "", top_keys, N_TOP, x->c, found) < 0 || finish(x, found) < 0)
        return -1;

    /* A second document would be silently ignored; say so instead. */
    yaml_document_t next;
    if (!yaml_parser_load(p, &next)) return parse_yaml_error(x, p);
    bool more = yaml_document_get_root_node(&next) != NULL;
    yaml_mark_t m = next.start_mark;
    yaml_document_delete(&next);
    if (more) return fail(x, m, "", "expected a single YAML document, got a second one");
    return 0;
}

int cfg_parse(const char *path, const char *text, size_t len, cfg *out, char *err, size_t errlen)
{
    ctx x = {.text = text, .len = len, .c = out, .err = err, .errlen = errlen};
    yaml_parser_t parser;
    yaml_document_t doc;
    int rc = -1;

    if (errlen) err[0] = '\0';
    memset(out, 0, sizeof *out);
    set_defaults(out);
    if (!(out->path = strdup(path ? path : "config"))) return fail_oom(&x);
    if (len > MAX_FILE_BYTES) {
        snprintf(err, errlen, "%s: %zu bytes, larger than the %u KiB a configuration may have",
                 out->path, len, MAX_FILE_BYTES >> 10);
        goto out;
    }
    if (check_depth(&x, text, len) < 0) goto out;
    if (!yaml_parser_initialize(&parser)) {
        rc = fail_oom(&x);
        goto out;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        rc = parse_yaml_error(&x, &parser);
    } else {
        x.doc = &doc;
        rc = parse_document(&x, &parser);
        yaml_document_delete(&doc);
    }
    yaml_parser_delete(&parser);
out:
    if (rc < 0) {
        cfg_free(out);
        memset(out, 0, sizeof *out);
    }
    return rc;
}

int cfg_load(const char *path, cfg *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            /* Reads past the limit, so that cfg_parse() says how large it is. */
            char *nb = cap <= MAX_FILE_BYTES ? realloc(buf, cap ? cap * 2 : 4096) : NULL;
            if (!nb) {
                snprintf(err, errlen, "%s: cannot read: %s", path,
                         cap <= MAX_FILE_BYTES ? "out of memory"
                                               : "larger than the 1024 KiB a configuration may have");
                goto fail;
            }
            buf = nb;
            cap = cap ? cap * 2 : 4096;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0) {
            if (ferror(f)) {
                snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
                goto fail;
            }
            break;
        }
    }
    fclose(f);
    int rc = cfg_parse(path, buf, len, out, err, errlen);
    free(buf);
    if (rc == 0 && (rc = check_resolved(out, err, errlen)) < 0) {
        cfg_free(out);
        memset(out, 0, sizeof *out);
    }
    return rc;
fail:
    free(buf);
    fclose(f);
    return -1;
}

void cfg_free(cfg *c)
{
    for (size_t i = 0; c->hosts && i < c->n_hosts; i++) {
        free(c->hosts[i].name);
        free(c->hosts[i].address);
        free(c->hosts[i].node);
        free(c->hosts[i].socket);
        free(c->hosts[i].metrics);
    }
    free(c->hosts);
    free(c->socket_group.value);
    for (size_t i = 0; i < c->allowed_uids.n; i++)
        free(c->allowed_uids.items[i].value);
    for (size_t i = 0; i < c->allowed_gids.n; i++)
        free(c->allowed_gids.items[i].value);
    free(c->allowed_uids.items);
    free(c->allowed_gids.items);
    c->socket_group.value = NULL;
    c->allowed_uids = c->allowed_gids = (cfg_id_list){0};
    free(c->path);
    free(c->cluster);
    free(c->socket);
    free(c->secret_file);
    free(c->congestion_control);
    c->congestion_control = NULL;
    free(c->metrics);
    c->metrics = NULL;
    free(c->star_root);
    c->star_root = NULL;
    c->hosts = NULL;
    c->n_hosts = 0;
    c->path = c->cluster = c->socket = c->secret_file = NULL;
}

int cfg_host_index(const cfg *c, const char *name)
{
    for (size_t i = 0; i < c->n_hosts; i++)
        if (strcmp(c->hosts[i].name, name) == 0) return (int)i;
    return -1;
}

int cfg_total_ranks(const cfg *c)
{
    return cfg_first_rank(c, c->n_hosts);
}

int cfg_first_rank(const cfg *c, size_t i)
{
    int rank = 0;
    for (size_t j = 0; j < i && j < c->n_hosts; j++)
        rank += c->hosts[j].local_clients;
    return rank;
}
