/*
 * notify.c - sd_notify() for Type=notify units, through libsystemd.
 *
 * The watchdog is fed from a timer of the loop, not a thread: a loop that
 * hangs stops feeding it, and systemd restarts the daemon.
 */
#include "notify.h"

#include <stdio.h>
#include <string.h>
#include <systemd/sd-daemon.h>

#include "log.h"

static uv_timer_t watchdog;
static int watchdog_on;
static char last_status[256];

static void on_watchdog(uv_timer_t *t)
{
    (void)t;
    sd_notify(0, "WATCHDOG=1");
}

int notify_init(uv_loop_t *loop)
{
    uint64_t usec = 0;
    int rc = sd_watchdog_enabled(0, &usec);
    if (rc <= 0 || usec == 0) return 0;
    /* Half the interval: one late turn of the loop is not a missed beat. */
    uint64_t ms = usec / 2000;
    if (ms == 0) ms = 1;
    uv_timer_init(loop, &watchdog);
    uv_timer_start(&watchdog, on_watchdog, ms, ms);
    watchdog_on = 1;
    log_info("systemd watchdog: every %llu ms", (unsigned long long)ms);
    return 0;
}

void notify_ready(void)
{
    sd_notify(0, "READY=1");
}

void notify_reloading(void)
{
    sd_notify(0, "RELOADING=1");
}

void notify_stopping(void)
{
    sd_notify(0, "STOPPING=1");
}

void notify_status(const char *text)
{
    if (strcmp(text, last_status) == 0) return;
    snprintf(last_status, sizeof last_status, "%s", text);
    sd_notifyf(0, "STATUS=%s", last_status);
}

void notify_close(void)
{
    if (!watchdog_on) return;
    watchdog_on = 0;
    uv_timer_stop(&watchdog);
    uv_close((uv_handle_t *)&watchdog, NULL);
}
