/*
 * summary.h - where one host's ranks spent their time: the summary a daemon
 * sends round the ring in REPORT frames (frame.h) and hands to ringctl in
 * REPORT messages (msg.h), one part of up to SUMMARY_MAX_RANKS local ranks
 * at a time. Both carry the same body (WIRE.md, "REPORT"); this module
 * knows its layout and its rules, the two protocols only frame it.
 *
 * Every duration is in microseconds, every time a Unix time in
 * microseconds on the origin host's clock. Pure: no I/O, no allocation.
 */
#ifndef RINGD_PROTO_SUMMARY_H
#define RINGD_PROTO_SUMMARY_H

#include <stddef.h>
#include <stdint.h>

#define SUMMARY_MAX_RANKS 8    /* local ranks in one part */
#define SUMMARY_MAX_SPANS 16   /* recent calls of one rank */
#define SUMMARY_MAX_LOCAL 1024 /* local ranks of one host (local_clients) */
#define SUMMARY_MAX_PARTS ((SUMMARY_MAX_LOCAL + SUMMARY_MAX_RANKS - 1) / SUMMARY_MAX_RANKS)
#define SUMMARY_HEAD_SIZE 70
#define SUMMARY_RANK_SIZE 146 /* a rank without its spans */
#define SUMMARY_SPAN_SIZE 18
#define SUMMARY_MAX_BODY                                                                           \
    (SUMMARY_HEAD_SIZE +                                                                           \
     SUMMARY_MAX_RANKS * (SUMMARY_RANK_SIZE + SUMMARY_MAX_SPANS * SUMMARY_SPAN_SIZE))

/* How a host's energy was found. Values are on the wire. */
typedef enum {
    SUMMARY_ENERGY_NONE = 0,      /* neither: no RAPL, watts_per_core 0 */
    SUMMARY_ENERGY_RAPL = 1,      /* measured: the CPU packages' RAPL counters */
    SUMMARY_ENERGY_ESTIMATED = 2, /* CPU seconds x watts_per_core */
} summary_energy;

#define SUMMARY_RANK_CONNECTED 0x01 /* a process holds the rank now */
#define SUMMARY_RANK_FAILING 0x02   /* its last call failed, and none succeeded since */
#define SUMMARY_RANK_FLAGS 0x03

#define SUMMARY_SPAN_FAILED 0x01 /* the call failed */
#define SUMMARY_SPAN_FLAGS 0x01

/* One recent call of a rank: from its start (its submission, or the result
 * of the call before it when that came later) to its result. */
typedef struct {
    uint64_t start_us;
    uint32_t dur_us;  /* start to result */
    uint32_t wait_us; /* of which waiting for the last rank of the ring, <= dur_us */
    uint8_t kind;     /* ringd_coll; 0: a call refused before it had a kind */
    uint8_t flags;    /* SUMMARY_SPAN_* */
} summary_span;

/* Time by what a rank did: the four add up to its time in the job. */
typedef struct {
    uint64_t compute_us;           /* from a result to the next submission: the useful work */
    uint64_t wait_us;              /* in a call until the last rank of the ring submitted it */
    uint64_t transfer_us;          /* from then to the result */
    uint64_t failure_us;           /* from a failed call to the next successful one */
    uint64_t calls, failed, bytes; /* calls ended, of which failed; bytes of those that did not */
} summary_times;

typedef struct {
    int32_t rank;         /* its global rank now; -1: no process ever held it in the job */
    uint32_t pid;         /* of the process that holds it, or held it last; 0: none */
    uint8_t flags;        /* SUMMARY_RANK_* */
    summary_times life;   /* since the job began */
    summary_times window; /* in the last window_ms */
    uint64_t late_us;     /* the calls it came last to: how long after the first rank */
    uint64_t late_calls;  /* how many (by 1 ms or more) */
    uint64_t cpu_us;      /* CPU time of its processes in the job */
    uint8_t n_spans;      /* 0..SUMMARY_MAX_SPANS, oldest first */
    summary_span spans[SUMMARY_MAX_SPANS];
} summary_rank;

/* Part `part` of `parts` of host `host`'s summary: its local ranks first ..
 * first + n - 1 of local_size. A summary is newer than another of the same
 * host when its (boot_us, version) is larger. */
typedef struct {
    uint32_t host; /* the origin's place in the configured ring */
    uint16_t part, parts;
    uint64_t boot_us;       /* when the origin daemon started */
    uint64_t version;       /* >= 1; grows with each summary the daemon makes */
    uint64_t at_us;         /* when it was made */
    uint64_t job_us;        /* when the job began there; 0: no rank has connected yet */
    uint32_t window_ms;     /* the window of summary_rank.window */
    uint64_t daemon_cpu_us; /* the daemon's CPU time in the job */
    uint64_t energy_mj;     /* the host's energy in the job, millijoules */
    uint8_t energy;         /* summary_energy */
    uint32_t watts_mw;      /* ESTIMATED: watts_per_core, in milliwatts */
    uint16_t local_size;    /* the host's local ranks in all */
    uint16_t first;         /* local rank of ranks[0]: part x SUMMARY_MAX_RANKS */
    uint8_t n;              /* ranks in this part */
    summary_rank ranks[SUMMARY_MAX_RANKS];
} summary_part;

/* The parts a host of local_size ranks sends. */
static inline int summary_parts(int local_size)
{
    return (local_size + SUMMARY_MAX_RANKS - 1) / SUMMARY_MAX_RANKS;
}

/* Whether a is newer than b (of the same host and part). */
static inline int summary_newer(const summary_part *a, const summary_part *b)
{
    return a->boot_us > b->boot_us || (a->boot_us == b->boot_us && a->version > b->version);
}

/* Checks what a part says of itself (the layout is the decoder's): its
 * place (part < parts = summary_parts(local_size), first and n to match),
 * flags, version, spans and counts that cannot be. Returns 0, or -1 with
 * the reason in why. The receiver checks it against its configuration. */
int summary_check(const summary_part *p, char *why, size_t len);

#endif /* RINGD_PROTO_SUMMARY_H */
