"""wait_for(): what every pytest stage of ringd waits with: a condition
polled until a deadline, never a fixed sleep."""
import time

from timing import scale


def wait_for(what, cond, timeout=20.0, interval=0.05):
    """Returns cond()'s first true value; AssertionError naming what after
    timeout s, stretched for the machine's load (timing.py)."""
    timeout *= scale()
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(interval)
    raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))
