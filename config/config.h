/*
 * config.h - the ringd YAML configuration, parsed with libyaml into a
 * validated struct. Knows YAML, not the event loop.
 *
 * The schema, key by key, is documented in deploy/ringd.example.yaml. A file
 * that does not follow it is rejected with one message of the form
 *   "ringd.yaml:12:5: hosts[2].address: expected HOST:PORT, got \"10.0.0.7\""
 * (file:line:column of the offending node, the key path, what was expected).
 */
#ifndef RINGD_CONFIG_H
#define RINGD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CFG_MAX_HOSTS 1024
#define CFG_MAX_IDS 64  /* entries of allowed_uids, allowed_gids */
#define CFG_MAX_NAME 64 /* cluster and host names: [A-Za-z0-9._-], 1..64 chars */
#define CFG_MAX_ELASTIC 64 /* hosts of a ring that closes over missing ones (evict_after) */

typedef enum { CFG_LOG_DEBUG = 0, CFG_LOG_INFO, CFG_LOG_WARN, CFG_LOG_ERROR } cfg_log_level;

/* How the daemons run collectives: the ring, or the star baseline (one
 * host, star_root, collects, reduces and sends back). */
typedef enum { CFG_ALG_RING = 0, CFG_ALG_STAR } cfg_algorithm;

/* encryption: what the links do to DATA payloads once a cluster key
 * authenticates every frame (PROTOCOL.md, "Frame authentication"). */
typedef enum {
    CFG_CIPHER_NONE = 0,          /* authenticated (AES-256-GMAC), not encrypted */
    CFG_CIPHER_AES_256_GCM,       /* encrypted and authenticated with AES-256-GCM */
    CFG_CIPHER_CHACHA20_POLY1305, /* the same with ChaCha20-Poly1305 */
} cfg_cipher;

/* wire_dtype: the type float32 payloads travel in, converted at each hop. */
typedef enum { CFG_WIRE_NONE = 0, CFG_WIRE_BFLOAT16, CFG_WIRE_FLOAT16 } cfg_wire;

typedef struct {
    char *name;
    char *address; /* as written: "10.0.0.7:7701", "[::1]:7701", "node3:7701" */
    char *node;    /* host part, IPv6 brackets removed: "::1", "node3" */
    uint16_t port;
    char *socket;      /* Unix socket path for this host: its own key, else the top-level one */
    int local_clients; /* its own key, else the top-level one; >= 1 */
    char *metrics;     /* IP:PORT of its metrics endpoint: its own key, else the top-level
                          one; NULL = off. Two daemons on one machine need one each. */
    int line, column;  /* where the host's entry starts, for later messages */
} cfg_host;

/* A user or group as written in the file (a name or a number), with its
 * place for messages: names are resolved by the daemon when it starts, on
 * the host where they must exist, not by the parser. */
typedef struct {
    char *value;
    int line, column;
} cfg_id;

typedef struct {
    cfg_id *items;
    size_t n;
} cfg_id_list;

typedef struct {
    char *path; /* the file it was read from */
    char *cluster;
    char *socket;      /* default "/run/ringd/ringd.sock" */
    int local_clients; /* default 1 */
    cfg_host *hosts;   /* ring order */
    size_t n_hosts;    /* >= 1 */

    /* Tuning, all optional. Sizes accept a plain byte count or a suffix
     * (K, KiB, M, MiB, G, GiB; powers of 1024); durations need a unit
     * (ms, s, m, h): a bare number is refused. */
    uint32_t segment_bytes;    /* segment_size: pipelining unit; default 256 KiB, 4 KiB..16 MiB */
    uint64_t max_buffer_bytes; /* max_buffer: largest collective; default 4 GiB, 1 MiB..64 GiB */
    uint32_t collective_timeout_ms; /* collective_timeout: default 60 s */
    uint32_t connect_timeout_ms;    /* connect_timeout: TCP connect + handshake; default 5 s */
    uint32_t backoff_initial_ms;    /* reconnect backoff start; default 100 ms */
    uint32_t backoff_max_ms;        /* reconnect backoff cap; default 5 s */
    uint32_t socket_buffer_bytes; /* socket_buffer: SO_SNDBUF/SO_RCVBUF; 0 = kernel default; default
                                     4 MiB */
    uint64_t fusion_threshold_bytes; /* fusion_threshold: collectives up to this size run
                                        together; 0 = one at a time; default 4 MiB */
    int streams;                     /* streams: TCP connections per ring link, 1..8; default 1 */
    char *congestion_control; /* congestion_control: the links' TCP congestion control
                                 (TCP_CONGESTION), default "cubic"; NULL ("system"): the
                                 machine's default */
    int fusion_max;                  /* fusion_max: at most this many at once; 1..64, default 32 */
    cfg_log_level log_level;         /* log_level: debug, info, warn, error; default info */

    /* Faults and security. */
    uint32_t heartbeat_interval_ms; /* heartbeat_interval: PING on quiet links; default 1 s */
    uint32_t heartbeat_timeout_ms;  /* heartbeat_timeout: a link silent this long is dead;
                                       default 5 s, at least twice the interval */
    char *secret_file;              /* secret_file: the cluster key; NULL = no authentication */
    bool checksum;                  /* checksum: crc32c (true, default) or none; with a key
                                       every frame has a MAC instead */
    cfg_cipher encryption;          /* encryption: needs secret_file; default none */
    cfg_wire wire_dtype;            /* wire_dtype: default none (float32 travels as is) */
    char *metrics; /* metrics: IP:PORT of the Prometheus endpoint; NULL = off. The
                      daemon serves its host's (cfg_host.metrics), which defaults to it. */

    /* Local access to the Unix socket, all optional. */
    uint32_t socket_mode;     /* socket_mode: permission bits, octal "0660"; default 0660 */
    cfg_id socket_group;      /* socket_group: group owning the socket; value NULL: the daemon's */
    cfg_id_list allowed_uids; /* allowed_uids: peers (SO_PEERCRED) allowed; empty: anyone */
    cfg_id_list allowed_gids; /* allowed_gids: the same by primary group; a peer in either passes */
    cfg_algorithm algorithm;  /* algorithm: ring or star; default ring */
    char *star_root;          /* star_root: a host name; default the first host */
    int star_root_index;      /* its index in hosts */

    /* The elastic ring. */
    int min_hosts;           /* min_hosts: hosts the ring needs to run; default and least a
                                majority, n_hosts / 2 + 1 */
    uint32_t evict_after_ms; /* evict_after: a host unreachable this long is closed over;
                                default 10 s; 0 = never (the ring waits for it) */
    bool evict_set;          /* evict_after was in the file */

    /* ringctl report. */
    double watts_per_core; /* watts_per_core: the energy estimate where RAPL cannot be
                              read, W per CPU second; 0..1000, default 10; 0 = none */
} cfg;

/* Reads and validates path into *out. Returns 0, or -1 with a one-line
 * message "path:line:col: what" in err (errlen bytes, always NUL-terminated).
 * On failure *out holds nothing that needs cfg_free(). Beyond cfg_parse(),
 * it resolves the addresses of hosts that share a port (getaddrinfo, so it
 * may block) and refuses two that are one address written two ways. */
int cfg_load(const char *path, cfg *out, char *err, size_t errlen);

/* Same, from a string in memory, without resolving anything; `path` is only
 * used in messages. Input over 1 MiB, or nested over 32 levels deep, is
 * refused before it is parsed. */
int cfg_parse(const char *path, const char *text, size_t len, cfg *out, char *err, size_t errlen);

/* Frees everything cfg_load() allocated; the struct itself is the caller's. */
void cfg_free(cfg *c);

/* Index of the host named name, or -1. */
int cfg_host_index(const cfg *c, const char *name);

/* Total ranks: the sum of local_clients over all hosts. */
int cfg_total_ranks(const cfg *c);

/* First rank of host i: the sum of local_clients of the hosts before it. */
int cfg_first_rank(const cfg *c, size_t i);

/* The size and duration formats of the file, for command-line flags too:
 * "4194304", "256KiB", "4 MiB" (K, KiB, M, MiB, G, GiB: powers of 1024) and
 * "500ms", "5s", "2m", "1h" (a duration always has a unit). Return 0, or -1
 * if s is not in the format or overflows 64 bits; no range check. */
int cfg_parse_size(const char *s, uint64_t *out);
int cfg_parse_duration_ms(const char *s, uint64_t *out);

#endif /* RINGD_CONFIG_H */
