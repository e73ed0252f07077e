/*
 * timing.h - the C tests' clock: how much slower this machine runs now than
 * when idle, and the tests' heartbeats, deadlines and bounds stretched by it.
 *
 * The timings written in a test hold on a machine whose CPUs are shared two
 * ways (load 4 on 2 cores). A test process measures the slowdown the first
 * time it asks, and stretches them by max(1, slowdown / 2), at most 4, so
 * that a test that fails under load fails for a defect, not for a margin.
 * tests/timing.py is the same for the pytest stages; it explains the
 * measurement. RINGD_TEST_SCALE=S fixes the factor.
 *
 *     snprintf(yaml, n, "heartbeat_timeout: %dms\n", harness_ms(1000));
 *     assert(took < harness_ms(4000));
 */
#ifndef RINGD_TEST_TIMING_H
#define RINGD_TEST_TIMING_H

#include <stddef.h>
#include <sys/types.h>

/* The factor, >= 1: measured on the first call (100-400 ms), then kept. */
double harness_scale(void);

/* ms stretched by harness_scale(), rounded. */
int harness_ms(int ms);

/* Writes what a failure message says about the timings: the factor and how
 * it was found, or that none was scaled. */
void harness_describe_timing(char *buf, size_t len);

/* Milliseconds process pid (0: this process) has waited for a CPU, runnable
 * but not running, since it started: the kernel's run_delay
 * (/proc/PID/schedstat). A bound on how long something takes can leave out
 * what the machine withheld (load, not the code under test); a process
 * stopped by SIGSTOP is not runnable and adds nothing. -1 if the kernel
 * does not say (no schedstat, or no such process). */
long long harness_cpu_wait_ms(pid_t pid);

#endif
