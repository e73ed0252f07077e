/*
 * notify.h - the systemd service protocol (sd_notify): READY=1 once the
 * daemon listens, STATUS= lines with the ring's state, RELOADING=1 around a
 * reload, STOPPING=1, and WATCHDOG=1 keep-alives from the loop when the
 * unit sets WatchdogSec=. Every call does nothing outside systemd (no
 * $NOTIFY_SOCKET).
 */
#ifndef RINGD_NOTIFY_H
#define RINGD_NOTIFY_H

#include <uv.h>

/* Starts the watchdog timer at half the interval systemd asks for, if any.
 * Returns 0 or a negative RINGD_E* code. */
int notify_init(uv_loop_t *loop);

void notify_ready(void);
void notify_reloading(void);
void notify_stopping(void);

/* Sends STATUS=text unless it is the text last sent. */
void notify_status(const char *text);

/* Stops and closes the watchdog timer. */
void notify_close(void);

#endif /* RINGD_NOTIFY_H */
