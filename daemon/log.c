/*
 * log.c - leveled, line-oriented logging to stderr.
 */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

log_level_e log_level = LOG_INFO;
static char prefix[96] = "ringd";
static int timestamps = 1;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void log_init(const char *host, log_level_e level)
{
    if (host && *host) snprintf(prefix, sizeof prefix, "ringd[%s]", host);
    log_level = level;
    /* Under systemd stderr is the journal, which stamps each line itself. */
    timestamps = getenv("JOURNAL_STREAM") == NULL;
}

void log_emit(log_level_e level, const char *fmt, ...)
{
    /* Format into one buffer and write it with a single call, so lines of
     * several daemons sharing a terminal do not interleave. */
    char line[2048];
    int n = 0;
    if (timestamps) {
        struct timeval tv;
        struct tm tm;
        gettimeofday(&tv, NULL);
        gmtime_r(&tv.tv_sec, &tm);
        n = (int)strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
        n += snprintf(line + n, sizeof line - (size_t)n, ".%03dZ ", (int)(tv.tv_usec / 1000));
    }
    n += snprintf(line + n, sizeof line - (size_t)n, "%s: %s: ", prefix, level_names[level]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof line - 2) len = sizeof line - 2;
    line[len++] = '\n';
    fwrite(line, 1, len, stderr);
    fflush(stderr);
}

int log_ratelimit_ok(log_ratelimit *rl, uint64_t now_ms, uint64_t interval_ms, uint32_t *suppressed)
{
    if (now_ms < rl->next_ms) {
        rl->suppressed++;
        return 0;
    }
    *suppressed = rl->suppressed;
    rl->suppressed = 0;
    rl->next_ms = now_ms + interval_ms;
    return 1;
}

void log_ratelimit_reset(log_ratelimit *rl)
{
    memset(rl, 0, sizeof *rl);
}

const char *log_repeated(char *buf, size_t len, uint32_t suppressed, unsigned interval_s)
{
    if (suppressed == 0) return "";
    snprintf(buf, len, " (%u more since the last such line; at most one per %u s)", suppressed,
             interval_s);
    return buf;
}

void log_limited(log_ratelimit *rl, uint64_t now_ms, uint64_t interval_ms, log_level_e level,
                 const char *fmt, ...)
{
    char line[1024], note[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    uint32_t suppressed = 0;
    if (log_ratelimit_ok(rl, now_ms, interval_ms, &suppressed))
        log_at(level, "%s%s", line,
               log_repeated(note, sizeof note, suppressed, (unsigned)(interval_ms / 1000)));
    else
        log_debug("%s", line);
}
