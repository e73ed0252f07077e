"""The tests' clock: how much slower this machine runs now than when idle,
and the tests' heartbeats, deadlines and waits stretched by it.

The timings written in the tests (heartbeat_timeout 1 s, evict_after 3 s,
"within 20 s") hold on a machine whose CPUs are shared two ways: load 4 on
2 cores, what tests/stress.sh's busy loops and CI's sanitized stage make.
On a busier machine a daemon may wait a second for a CPU, and a test
written for load 4 would fail for its margin, not for a defect. So every
test process measures the slowdown when it starts and stretches its
timings by scale() = max(1, slowdown / 2): a failure at load 6 is then a
defect to find, as it is at load 1 (tests/FAULTS.md).

The measurement (the same in C: tests/harness/timing.c, harness_scale()):
the fastest of 20 short bursts of arithmetic, each right after a sleep,
is the machine's speed when this process has a CPU to itself; 100 ms of
the same bursts back to back, divided by that, is how much of a CPU it
gets now. Measured with 2, 4 and 6 busy loops on 2 cores: 1.6-2.4, 2.5-3.0,
3.4-3.6. The load average is no substitute: it lags by a minute, and in a
container it may count another machine's tasks.

RINGD_TEST_SCALE=S fixes the scale (to replay a failure with the timings it
ran with); `python3 tests/timing.py` prints it, for the shell tests.
"""

import os
import time

# The slowdown the tests' written timings are made for (see above).
SHARED = 2.0
# Beyond this the machine is too slow for the suite to mean anything; the
# timings stop stretching and the failure messages say why.
MAX_SCALE = 4.0


def _burst(n=2000):
    x = 0
    for i in range(n):
        x += i * i
    return x


def measure_slowdown(window_s=0.1):
    """This process's wall time for window_s of work over its CPU time when
    it has a CPU to itself: 1 on an idle machine, about L / cores at load L."""
    fastest = float("inf")
    for _ in range(20):
        time.sleep(0.001)
        t = time.perf_counter()
        _burst()
        fastest = min(fastest, time.perf_counter() - t)
    k = max(1, int(window_s / fastest))
    t = time.perf_counter()
    for _ in range(k):
        _burst()
    return (time.perf_counter() - t) / (k * fastest)


_measured = None  # (slowdown or None, scale), once measured


def _measure():
    global _measured
    if _measured is None:
        fixed = os.environ.get("RINGD_TEST_SCALE")
        if fixed:
            _measured = (None, max(1.0, float(fixed)))
        else:
            slowdown = measure_slowdown()
            _measured = (slowdown, min(MAX_SCALE, max(1.0, slowdown / SHARED)))
    return _measured


def scale():
    """The factor this process's timings stretch by, measured on the first call
    (not at import: the rank processes a test spawns import it too)."""
    return _measure()[1]


def scaled(seconds):
    """seconds, stretched for the machine's load."""
    return seconds * scale()


def duration(seconds):
    """A YAML duration for seconds, stretched: duration(1) == "1500ms" at scale 1.5."""
    return f"{round(seconds * scale() * 1000)}ms"


def durations(**seconds):
    """YAML lines for timing keys, each stretched: durations(evict_after=3)
    == "evict_after: 4500ms\\n" at scale 1.5. Every timing key of a test's
    config stretches alike, so that their ratios stay as written."""
    return "".join(f"{key}: {duration(s)}\n" for key, s in seconds.items())


def describe():
    """What a failure message says about the timings it ran with."""
    load = os.getloadavg()
    text = (f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (1, 5, 15 min) on "
            f"{os.cpu_count()} CPUs; ")
    if _measured is None:
        return text + "timings as written (none was scaled)"
    slowdown, factor = _measured
    if slowdown is None:
        return text + f"timings x{factor:.2f} (RINGD_TEST_SCALE)"
    return text + (f"timings x{factor:.2f} (slowdown {slowdown:.2f} measured at the start, "
                   f"/ {SHARED:g}, at most {MAX_SCALE:g})")


try:
    import pytest
    _hookwrapper = pytest.hookimpl(hookwrapper=True)
except ImportError:  # `python3 tests/timing.py` where pytest is not installed
    def _hookwrapper(fn):
        return fn


@_hookwrapper
def pytest_runtest_makereport(item, call):
    """A conftest that imports this hook has every failure say the load and the
    timings it ran with: a rare failure at load 6 on 2 cores is still a bug
    until proven otherwise, and the proof starts here."""
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        rep.sections.append(("load", describe()))


if __name__ == "__main__":
    print(f"{scale():.2f}")
