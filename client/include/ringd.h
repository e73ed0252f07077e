/*
 * ringd.h - client library of ringd, the ring allreduce daemon.
 *
 * A training process connects to the ringd daemon of its own host over a Unix
 * socket and submits buffers; the daemons of all hosts reduce them over a TCP
 * ring and every process gets the same result back, in place.
 *
 *     ringd_client *c;
 *     int rc = ringd_connect(NULL, &c);            // $RINGD_SOCKET or /run/ringd/ringd.sock
 *     if (rc < 0) { fprintf(stderr, "%s\n", ringd_last_error(NULL)); exit(1); }
 *     float *grad = ringd_alloc(c, n * sizeof *grad);   // shared with the daemon: no copy
 *     ...
 *     rc = ringd_allreduce(c, grad, n, RINGD_FLOAT32, RINGD_MEAN);
 *     if (rc < 0) fprintf(stderr, "allreduce: %s\n", ringd_last_error(c));
 *     ringd_free(c, grad);
 *     ringd_close(c);
 *
 * Conventions
 *   - Functions that can fail return 0 (or a non-negative value) on success and
 *     a negative RINGD_E* code on failure; ringd_strerror() names the code and
 *     ringd_last_error() gives the full message of the last failure on that
 *     client (for example the daemon's explanation of a mismatch).
 *   - A ringd_client is not thread-safe: use one per thread, or serialize.
 *   - Every blocking call has a deadline (the daemon's collective_timeout, see
 *     ringd.example.yaml); none blocks forever.
 */
#ifndef RINGD_H
#define RINGD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RINGD_VERSION_MAJOR 0
#define RINGD_VERSION_MINOR 1
#define RINGD_VERSION_PATCH 0

/* Error codes: X(name, value, description). The values are part of the wire
 * protocol (the daemon sends them to clients), so never renumber them. */
#define RINGD_ERRNO_MAP(X)                                                                         \
    X(EINVAL, -1, "invalid argument")                                                              \
    X(ENOMEM, -2, "out of memory")                                                                 \
    X(ECONNECT, -3, "cannot connect to the ringd daemon")                                          \
    X(ECLOSED, -4, "connection to the ringd daemon was closed")                                    \
    X(EPROTO, -5, "protocol error")                                                                \
    X(EVERSION, -6, "protocol version mismatch")                                                   \
    X(ETIMEDOUT, -7, "collective timed out")                                                       \
    X(ERING, -8, "ring is down or a neighbour was lost")                                           \
    X(EMISMATCH, -9, "collective differs between ranks")                                           \
    X(EABORTED, -10, "collective aborted")                                                         \
    X(ESHM, -11, "shared memory error")                                                            \
    X(EBUSY, -12, "local rank already taken")                                                      \
    X(ERANGE, -13, "buffer outside shared memory region")                                          \
    X(ETOOBIG, -14, "buffer too large")                                                            \
    X(EIO, -15, "I/O error")                                                                       \
    X(ESHUTDOWN, -16, "daemon is shutting down")                                                   \
    X(EINPROGRESS, -17, "request still in progress")                                               \
    X(EAUTH, -18, "authentication failed")                                                         \
    X(ECORRUPT, -19, "data corrupted in transit")                                                  \
    X(EPERM, -20, "not allowed to use this daemon")                                                \
    X(ERESIZED, -21, "the ring's membership changed")

typedef enum {
#define RINGD_ERR_ENUM(name, value, desc) RINGD_##name = value,
    RINGD_ERRNO_MAP(RINGD_ERR_ENUM)
#undef RINGD_ERR_ENUM
} ringd_errno;

/* Element types. Values are on the wire: never renumber. Elements travel in
 * the host's byte order; all hosts of a ring must share it (checked at
 * handshake). FLOAT16 is IEEE binary16, BFLOAT16 the upper half of binary32. */
typedef enum {
    RINGD_INT8 = 0,
    RINGD_UINT8 = 1,
    RINGD_INT32 = 2,
    RINGD_INT64 = 3,
    RINGD_FLOAT16 = 4,
    RINGD_BFLOAT16 = 5,
    RINGD_FLOAT32 = 6,
    RINGD_FLOAT64 = 7,
    RINGD_DTYPE_COUNT
} ringd_dtype;

/* Reduction operators. Values are on the wire: never renumber.
 *   SUM   x_0 + x_1 + ... + x_{n-1}. Integers wrap around (two's complement).
 *   MEAN  SUM divided by ringd_size(): the equal-weight mean; float types only
 *         (RINGD_EINVAL otherwise).
 *   WMEAN the weighted mean (w_0 x_0 + ... + w_{n-1} x_{n-1}) / (w_0 + ... +
 *         w_{n-1}), each rank giving its own weight w_i >= 0 (say, its batch
 *         size) in ringd_collective.weight; float types only, and the weights
 *         must not all be 0. With equal weights it is MEAN up to rounding.
 *   MIN, MAX  elementwise; a NaN in any input gives NaN.
 *   PROD  x_0 * x_1 * ... * x_{n-1}. Integers wrap around.
 * Floats are reduced in an order fixed by the ring (each element always in the
 * same order), so the same inputs give the same bits on every rank and run. */
typedef enum {
    RINGD_SUM = 0,
    RINGD_MEAN = 1,
    RINGD_MIN = 2,
    RINGD_MAX = 3,
    RINGD_PROD = 4,
    RINGD_WMEAN = 5,
    RINGD_OP_COUNT
} ringd_op;

typedef struct ringd_client ringd_client;

/* Connects to the local ringd daemon and joins the cluster's ranks.
 * socket_path: the daemon's Unix socket; NULL means $RINGD_SOCKET if set, else
 * /run/ringd/ringd.sock. The local rank is $RINGD_LOCAL_RANK, else $LOCAL_RANK,
 * else assigned by the daemon. On success *out owns a client that the caller
 * releases with ringd_close(). On failure *out is NULL and the message is
 * available from ringd_last_error(NULL): RINGD_ECONNECT (no daemon, or no
 * permission on the socket file), RINGD_EPERM (the daemon's allowed_uids /
 * allowed_gids do not include this process), RINGD_EBUSY (local rank taken).
 * Blocks for at most a few seconds. */
int ringd_connect(const char *socket_path, ringd_client **out);

/* Closes the connection and frees everything the client owns, including the
 * memory returned by ringd_alloc(). NULL is accepted. */
void ringd_close(ringd_client *c);

/* This process's rank among all clients of all hosts, in [0, ringd_size()).
 * In an elastic ring it changes when the membership does: a call that fails
 * with RINGD_ERESIZED has already updated it (and ringd_size()). */
int ringd_rank(const ringd_client *c);

/* Number of ranks: the sum of local_clients over the hosts in the ring. */
int ringd_size(const ringd_client *c);

/* This process's rank on its host, and the number of processes on its host. */
int ringd_local_rank(const ringd_client *c);
int ringd_local_size(const ringd_client *c);

/* Reduces buf (count elements of dtype) with op across all ranks, in place;
 * blocks until every rank has contributed and the result is in buf, or until
 * the collective's deadline. Every rank must make the same sequence of calls
 * with the same count, dtype and op. buf may come from ringd_alloc() (zero
 * copy) or be any other memory (copied through a shared staging buffer).
 * Returns 0, or RINGD_EINVAL (bad dtype/op, MEAN on integers), RINGD_ETIMEDOUT,
 * RINGD_ERING (the ring broke), RINGD_EMISMATCH (another rank submitted a
 * different collective), RINGD_ECLOSED (daemon went away), RINGD_ERESIZED
 * (see below), ... On error the contents of buf are unspecified. count 0 is
 * a valid no-op collective.
 *
 * Elastic rings: when a host leaves or returns, the collective in flight
 * fails on every rank with RINGD_ERESIZED, once per rank per resize, and a
 * message such as "ring resized to 3 hosts (3 ranks): h4 unreachable for
 * 10 s". By then ringd_rank() and ringd_size() give this process's place in
 * the new ring; the next collective runs on it. This holds for every
 * collective, blocking or not (ringd_wait() reports it). Restore the state
 * the ranks agree on and go on (Python: ringd.elastic). */
int ringd_allreduce(ringd_client *c, void *buf, size_t count, ringd_dtype dtype, ringd_op op);

/* Kinds of collective. Values are on the wire: never renumber. */
typedef enum {
    RINGD_COLL_ALLREDUCE = 1,      /* every rank gets the reduction of all buffers */
    RINGD_COLL_BROADCAST = 2,      /* every rank gets the root rank's buffer */
    RINGD_COLL_ALLGATHER = 3,      /* every rank gets all ranks' buffers, in rank order */
    RINGD_COLL_REDUCE_SCATTER = 4, /* rank i gets block i of the reduction */
    RINGD_COLL_BARRIER = 5,        /* returns once every rank has entered it */
} ringd_coll;

/* How a float32 collective travels between hosts (ringd_collective.wire_dtype).
 * Values are on the wire: never renumber. BFLOAT16 and FLOAT16 halve the bytes
 * sent: each host widens what it receives to float32, adds its own value in
 * float32 and rounds once to the wire type to pass it on, so results stay the
 * same bits on every rank, within (N + 2) u sum|x_i| of the exact sum for N
 * hosts (u = 2^-8 bfloat16, 2^-11 float16; float16 overflows past 65504).
 * For allreduce, reduce_scatter and allgather of float32 only. */
typedef enum {
    RINGD_WIRE_DEFAULT = 0,  /* the daemon's wire_dtype (float32 collectives only) */
    RINGD_WIRE_NONE = 1,     /* as float32, exact */
    RINGD_WIRE_BFLOAT16 = 2, /* as bfloat16 */
    RINGD_WIRE_FLOAT16 = 3,  /* as float16 */
} ringd_wire;

/* One collective, described for ringd_submit(). Zero-initialise it and set
 * what the kind needs:
 *   ALLREDUCE       buf (count elements, in place), dtype, op (+ weight for WMEAN)
 *   BROADCAST       buf (count elements, in place; read on root, written elsewhere), root
 *   ALLGATHER       input (count elements of this rank), buf (size x count elements:
 *                   rank i's block at buf + i x count); input NULL means this rank's
 *                   block is already in place in buf
 *   REDUCE_SCATTER  input (size x count elements), buf (count elements: the
 *                   reduction of block `rank` of every rank's input), op;
 *                   input NULL means it is buf itself, holding size x count
 *                   elements, and the result lands in its first count elements
 *   BARRIER         nothing
 * Every rank must submit the same sequence of collectives with the same kind,
 * count, dtype, op and root; a difference fails that collective on every rank
 * with RINGD_EMISMATCH and a message naming what differs and where. */
typedef struct {
    ringd_coll kind;
    void *buf;
    const void *input;
    size_t count;
    ringd_dtype dtype;
    ringd_op op;
    int root;            /* BROADCAST: the rank whose buffer everybody gets */
    double weight;       /* WMEAN: this rank's weight */
    const char *name;    /* optional, up to 64 bytes; errors name the collective by it */
    uint32_t timeout_ms; /* 0: the daemon's collective_timeout */
    ringd_wire wire_dtype; /* float32 ALLREDUCE, REDUCE_SCATTER, ALLGATHER: how it
                              travels; another kind or dtype with BFLOAT16 or
                              FLOAT16 is RINGD_EINVAL */
} ringd_collective;

typedef struct ringd_request ringd_request;

/* Submits a collective without waiting for it; *req is completed by
 * ringd_wait() or ringd_test(). Many requests may be in flight on one client;
 * they complete in submission order. The buffers must stay valid and must not
 * be touched until the request completes. Returns 0, or an error without
 * creating a request (invalid description, daemon gone, ...). */
int ringd_submit(ringd_client *c, const ringd_collective *coll, ringd_request **req);

/* Waits up to timeout_ms (< 0: as long as it takes; the daemon's deadline
 * still bounds it) for req. Returns 0 when it succeeded and the results are
 * in place, a negative RINGD_E* code when it failed (message in
 * ringd_last_error()); in both cases req is freed. Returns RINGD_EINPROGRESS
 * if the time ran out first: req stays valid. Completing a request also
 * completes every request submitted before it on the same client. */
int ringd_wait(ringd_request *req, int timeout_ms);

/* ringd_wait(req, 0): never blocks. */
int ringd_test(ringd_request *req);

/* Blocking forms: ringd_submit() then ringd_wait(req, -1). */
int ringd_run(ringd_client *c, const ringd_collective *coll);
int ringd_broadcast(ringd_client *c, void *buf, size_t count, ringd_dtype dtype, int root);
int ringd_allgather(ringd_client *c, const void *input, void *buf, size_t count, ringd_dtype dtype);
int ringd_reduce_scatter(ringd_client *c, const void *input, void *buf, size_t count,
                         ringd_dtype dtype, ringd_op op);
int ringd_barrier(ringd_client *c);

/* Non-blocking forms of the above, and of ringd_allreduce(). */
int ringd_iallreduce(ringd_client *c, void *buf, size_t count, ringd_dtype dtype, ringd_op op,
                     ringd_request **req);
int ringd_ibroadcast(ringd_client *c, void *buf, size_t count, ringd_dtype dtype, int root,
                     ringd_request **req);
int ringd_iallgather(ringd_client *c, const void *input, void *buf, size_t count, ringd_dtype dtype,
                     ringd_request **req);
int ringd_ireduce_scatter(ringd_client *c, const void *input, void *buf, size_t count,
                          ringd_dtype dtype, ringd_op op, ringd_request **req);
int ringd_ibarrier(ringd_client *c, ringd_request **req);

/* Gather, scatter and all-to-all, composed in the library from the ring's
 * collectives above (the daemon has no collective of their own). Blocking
 * only: there are no ringd_i* forms, and they may not be described in a
 * ringd_collective. Each runs its collective in a shared staging region the
 * library owns (the daemon works in it in place) and copies the caller's
 * part out; the region is kept for reuse and freed by ringd_close(), also
 * on every error. Their rules are those of the collectives: every rank makes
 * the same sequence of calls with the same count, dtype and root; a
 * difference fails on every rank with RINGD_EMISMATCH, and the message names
 * the underlying collective and the composed one ('allgather "gather to rank
 * 2" #7 differs between ranks: host b (rank 3) has allgather of 396 x
 * float32, host a (rank 0) has allgather of 400 x float32'). The counts in
 * it are the underlying collective's, not count: its whole buffer (n x count
 * for gather and scatter, n x n x count for alltoall, n = ringd_size()) when
 * hosts differ, an allgather's count per rank (count for gather, n x count
 * for alltoall) when two ranks of one host do. A root
 * outside [0, n) is RINGD_EINVAL before anything is sent, as are an unknown
 * dtype and a NULL buffer that the call needs (the other ranks then time
 * out). count 0 is a valid no-op: after those checks it returns 0 at once,
 * without a collective. On error the output buffer is unspecified.
 *
 * ringd_gather: every rank's input (count elements) goes to root, into buf
 * in rank order (n x count elements: rank i's at buf + i x count). buf is
 * only written on root and may be NULL elsewhere. Memory: one staging buffer
 * of n x count elements per rank; traffic: that of an allgather.
 *
 * ringd_scatter: root's input (n x count elements; ignored, and may be NULL,
 * on other ranks) is cut into n blocks, and rank i gets block i in buf
 * (count elements). Runs as a broadcast of root's whole input: memory n x
 * count elements per rank, traffic a broadcast of n x count elements.
 *
 * ringd_alltoall: every rank's input is n x count elements, block j for
 * rank j; rank i's buf (n x count elements) gets block i of rank j's input
 * at buf + j x count. input may be buf. Runs as an allgather of every rank's
 * whole input: each rank holds n x n x count elements of staging (n times
 * the memory of a true all-to-all), and on the one-way ring every block
 * travels the whole way round (n - 1 hops against n / 2 on average), about twice the traffic of a
 * true all-to-all. */
int ringd_gather(ringd_client *c, const void *input, void *buf, size_t count, ringd_dtype dtype,
                 int root);
int ringd_scatter(ringd_client *c, const void *input, void *buf, size_t count, ringd_dtype dtype,
                  int root);
int ringd_alltoall(ringd_client *c, const void *input, void *buf, size_t count, ringd_dtype dtype);

/* The membership of the ring, for ringd_membership(). */
typedef struct {
    uint32_t epoch;           /* the ring epoch the membership was agreed in */
    int rank, size;           /* this process's rank, and the ranks in the ring */
    int n_live, n_configured; /* hosts in the ring, hosts in the configuration */
    uint64_t live;            /* bit i: configured host i is in the ring */
    int ready;                /* the ring runs collectives now */
    char hosts[1025];         /* configured host names, space-separated */
} ringd_membership_info;

/* Asks the daemon for the ring's membership and fills *out; blocks for at
 * most a few seconds, and waits for no collective (results that arrive
 * first complete their requests). rank and size are this client's current
 * values. A daemon that does not run an elastic ring reports every
 * configured host as live (n_live == n_configured, epoch 0). Returns 0,
 * RINGD_EINVAL (NULL argument), or a session error (RINGD_ECLOSED, ...). */
int ringd_membership(ringd_client *c, ringd_membership_info *out);

/* How a job that balances its batches by speed (Python's ringd.balance)
 * splits each global batch between its ranks, for ringd_report_split(). */
typedef struct {
    uint64_t step;         /* steps the job has taken */
    uint64_t global_batch; /* rows of each step over all ranks: the sum of rows[] */
    uint32_t resplits;     /* times the ranks agreed on new shares */
    uint32_t every;        /* steps between two agreements; 0: equal shares, never re-split */
    int n_ranks;           /* entries of rows and rate: the ranks of the job */
    const uint32_t *rows;  /* rank i takes rows[i] rows of each step */
    const double *rate;    /* rank i's measured speed, rows per second; 0: not measured yet */
} ringd_split;

/* Tells this host's daemon the split, which `ringctl status` then shows
 * (the daemon keeps the last one reported by any of its ranks, and only the
 * first 64 ranks' entries). Every rank of a balanced job computes the same
 * split; each reports it to its own daemon. Blocks for at most a few
 * seconds and waits for no collective. Returns 0, RINGD_EINVAL (a NULL
 * argument, n_ranks < 1, rows that do not sum to global_batch, a negative
 * or non-finite rate), or a session error (RINGD_ECLOSED, ...). */
int ringd_report_split(ringd_client *c, const ringd_split *split);
/* Where every rank of the ring spent its time: what `ringctl report --json`
 * prints. Asks the daemon at socket_path (NULL: $RINGD_SOCKET if set, else
 * /run/ringd/ringd.sock) as an observer (it takes no rank); the daemon
 * answers with the latest summary of every host of the ring, which the
 * daemons exchange once a second. On success *json is one JSON object,
 * NUL-terminated, that the caller frees with ringd_report_free(): per rank
 * its compute, wait, transfer and failure seconds, calls and bytes, for the
 * job and for the last minute, and its recent calls; per host its CPU
 * seconds and energy; the job's wall time, useful work, speedup and
 * efficiency, and the rank that made the others wait most (docs/ops.md,
 * "Report", has every key). Blocks for at most a few seconds. Returns 0, or
 * RINGD_EINVAL (json is NULL), RINGD_ECONNECT, RINGD_EPROTO (the daemon
 * sent something malformed), ..., with the message in
 * ringd_last_error(NULL). */
int ringd_report_json(const char *socket_path, char **json);

/* Frees what ringd_report_json() returned. NULL is accepted. */
void ringd_report_free(char *json);

/* Allocates bytes of memory shared with the daemon, which reads and writes it
 * in place. Aligned to 64 bytes, zero-filled. Returns NULL on failure (see
 * ringd_last_error()). Freed by ringd_free() or ringd_close(). */
void *ringd_alloc(ringd_client *c, size_t bytes);

/* Releases memory from ringd_alloc(). NULL is accepted; any other pointer that
 * did not come from ringd_alloc() on this client is ignored. */
void ringd_free(ringd_client *c, void *p);

/* Short description of an error code ("collective timed out"). Never NULL. */
const char *ringd_strerror(int err);

/* Name of an error code ("RINGD_ETIMEDOUT"). Never NULL. */
const char *ringd_errname(int err);

/* The full message of the last failure on c (or of the last failed
 * ringd_connect() in this thread when c is NULL), for example
 * "allreduce #12: count differs: this host has 1000, host b has 999".
 * Valid until the next call on c. Never NULL; "" if nothing failed. */
const char *ringd_last_error(const ringd_client *c);

/* Size in bytes of one element of dtype, or 0 for an unknown dtype. */
size_t ringd_dtype_size(ringd_dtype dtype);

/* Names as used by ringctl and the logs ("float32", "sum"); NULL if unknown.
 * The parse functions return the value, or RINGD_EINVAL. */
const char *ringd_dtype_name(ringd_dtype dtype);
const char *ringd_op_name(ringd_op op);
const char *ringd_coll_name(ringd_coll kind); /* "allreduce", "reduce_scatter", ... */
int ringd_dtype_parse(const char *name);
int ringd_op_parse(const char *name);

#ifdef __cplusplus
}
#endif

#endif /* RINGD_H */
