#!/usr/bin/python3
"""elastic.py - how long training stalls when a host leaves or comes back
(issue 13): 5 daemons on 127.0.0.1 with a training process each
(tests/elastic/elastic_rank, a 1024-element allreduce every 10 ms), then,
per trial:

  kill      SIGKILL a host's daemon and process: the time from the kill to
            the first step on 4 hosts (of which evict_after is the wait
            asked for; the rest is detection, agreement and the next step)
  return    start its daemon again: the time from the start to the first
            step on 5 hosts (the daemon's own start-up included)
  leave     SIGTERM the daemon (systemctl stop): to the first step on 4
  join      start it again: to the first step on 5

Prints each trial's times and the medians.

    bench/elastic.py BUILD_DIR [TRIALS] [EVICT_AFTER_S]
"""

import os
import signal
import statistics
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tests", "elastic"))
sys.path.insert(0, os.path.join(here, "..", "client", "python"))
from cluster import Cluster, now_ms  # noqa: E402


def first_step(c, size, after_ms, timeout=60):
    e = c.wait_event(0, lambda e: e[1] == "ok" and int(e[2][2]) == size, timeout, after_ms)
    return (e[0] - after_ms) / 1000


def main():
    build = sys.argv[1]
    trials = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    evict = float(sys.argv[3]) if len(sys.argv) > 3 else 2
    os.environ.setdefault("RINGD_BIN", os.path.join(build, "daemon", "ringd"))
    os.environ.setdefault("RINGCTL_BIN", os.path.join(build, "client", "ringctl"))
    os.environ.setdefault("ELASTIC_RANK", os.path.join(build, "tests", "elastic", "elastic_rank"))
    config = (f"evict_after: {evict:g}s\ncollective_timeout: 8s\nheartbeat_interval: 250ms\n"
              "heartbeat_timeout: 1500ms\nbackoff_max: 1s\n")
    rows = {"kill": [], "return": [], "leave": [], "join": []}
    with tempfile.TemporaryDirectory(prefix="ringd-elastic-", dir="/tmp") as d:
        c = Cluster(d, 5, config)
        try:
            c.start_all()
            for i in range(5):
                c.start_rank(i, 10 ** 7, step_ms=10, deadline_s=3600)
            first_step(c, 5, 0)
            print(f"# {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}; 5 hosts on 127.0.0.1; "
                  f"evict_after {evict:g} s; load {open('/proc/loadavg').read().split()[0]}")
            print(f"{'trial':>5} {'kill':>7} {'return':>7} {'leave':>7} {'join':>7}  (s)")
            for t in range(trials):
                h = 1 + t % 4
                times = []
                for kind, sig in (("kill", signal.SIGKILL), ("leave", signal.SIGTERM)):
                    time.sleep(1)
                    at = now_ms()
                    c.kill(h, sig)
                    times.append(first_step(c, 4, at))
                    time.sleep(1)
                    at = now_ms()
                    c.start(h, wait=False)
                    c.start_rank(h, 10 ** 7, step_ms=10, deadline_s=3600)
                    times.append(first_step(c, 5, at))
                kill, ret, leave, join = times
                for k, v in zip(("kill", "return", "leave", "join"), times):
                    rows[k].append(v)
                print(f"{t + 1:>5} {kill:7.2f} {ret:7.2f} {leave:7.2f} {join:7.2f}", flush=True)
            med = {k: statistics.median(v) for k, v in rows.items()}
            print(f"{'median':>5} {med['kill']:7.2f} {med['return']:7.2f} {med['leave']:7.2f} "
                  f"{med['join']:7.2f}")
            print(f"kill: median {med['kill'] - evict:.2f} s beyond evict_after")
        finally:
            bad = c.stop_all()
            if bad:
                print("daemons that did not exit cleanly:", bad, file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
