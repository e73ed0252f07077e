/*
 * log.h - one event per line to stderr, with a level; journald adds the time.
 *
 * The macros check the level before formatting, so a disabled debug line
 * costs one comparison.
 */
#ifndef RINGD_LOG_H
#define RINGD_LOG_H

#include <stddef.h>
#include <stdint.h>

typedef enum { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR } log_level_e;

extern log_level_e log_level;

/* Sets the prefix of every line ("ringd[a]") and the threshold. */
void log_init(const char *host, log_level_e level);

void log_emit(log_level_e level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_at(lvl, ...)                                                                           \
    do {                                                                                           \
        if ((lvl) >= log_level) log_emit((lvl), __VA_ARGS__);                                      \
    } while (0)
#define log_debug(...) log_at(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_at(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_at(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_at(LOG_ERROR, __VA_ARGS__)

/* Rate limiting for events that repeat (a neighbour that stays unreachable):
 * log_ratelimit_ok() says whether to print now. The first event prints, then
 * at most one per interval, reporting how many were suppressed. */
typedef struct {
    uint64_t next_ms;    /* earliest time the next line may print */
    uint32_t suppressed; /* events swallowed since the last printed line */
} log_ratelimit;

int log_ratelimit_ok(log_ratelimit *rl, uint64_t now_ms, uint64_t interval_ms,
                     uint32_t *suppressed);
void log_ratelimit_reset(log_ratelimit *rl);

/* Logs a line that a peer could repeat for ever (a misconfigured or hostile
 * host, a flood of bad connections): at `level` at most once per interval_ms
 * of now_ms, saying how many were not, and at debug otherwise. */
void log_limited(log_ratelimit *rl, uint64_t now_ms, uint64_t interval_ms, log_level_e level,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* The suffix of a rate-limited line: "" when nothing was suppressed, else
 * " (N more since the last such line; at most one per S s)", in buf. */
const char *log_repeated(char *buf, size_t len, uint32_t suppressed, unsigned interval_s);

#endif /* RINGD_LOG_H */
