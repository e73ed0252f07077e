"""tests/timing.py, the factor every test stretches its timings by on a
loaded machine: fixed by RINGD_TEST_SCALE, never below 1, and measured
from how much of a CPU a process gets."""

import multiprocessing
import os
import subprocess
import sys
import time

import timing

TIMING = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "timing.py")


def scale_printed(env_scale):
    env = dict(os.environ)
    env.pop("RINGD_TEST_SCALE", None)
    if env_scale is not None:
        env["RINGD_TEST_SCALE"] = env_scale
    out = subprocess.run([sys.executable, TIMING], env=env, capture_output=True, text=True,
                         check=True)
    return float(out.stdout)


def test_ringd_test_scale_fixes_the_factor_and_it_never_shrinks_a_timing():
    assert scale_printed("1.5") == 1.5
    assert scale_printed("0.5") == 1.0


def test_a_measured_factor_is_between_1_and_4():
    assert 1.0 <= scale_printed(None) <= timing.MAX_SCALE


def test_durations_stretch_every_key_alike_in_milliseconds(monkeypatch):
    monkeypatch.setattr(timing, "_measured", (None, 1.5))
    assert timing.durations(evict_after=3, heartbeat_interval=0.25) == (
        "evict_after: 4500ms\nheartbeat_interval: 375ms\n")
    assert timing.scaled(20) == 30
    assert "timings x1.50 (RINGD_TEST_SCALE)" in timing.describe()


def spin(until):
    while time.monotonic() < until:
        pass


def test_busy_loops_on_every_core_are_measured_as_a_slowdown():
    """Two busy loops per core leave this process less than half a CPU: the
    measurement says it runs at least 1.5 times slower than alone."""
    until = time.monotonic() + 3
    ctx = multiprocessing.get_context("fork")
    loops = [ctx.Process(target=spin, args=(until,)) for _ in range(2 * os.cpu_count())]
    for p in loops:
        p.start()
    try:
        time.sleep(0.2)
        slowdown = timing.measure_slowdown()
    finally:
        for p in loops:
            p.kill()
            p.join()
    assert slowdown > 1.5, f"measured {slowdown:.2f} beside {len(loops)} busy loops"
