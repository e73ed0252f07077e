"""ringd.elastic end to end: examples/elastic_train.py on five hosts, one
killed (daemon and process) and started again mid-training. The others
train on through the resize; the returning process takes the trained state
through sync(); every rank ends with the same weights, converged."""

import os
import re
import sys
import time

from cluster import Cluster, now_ms
from timing import durations, scaled

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "elastic_train.py")
# Stretched on a machine busier than two ways shared (tests/timing.py).
CONFIG = durations(evict_after=2, collective_timeout=8, heartbeat_interval=0.25,
                   heartbeat_timeout=1.5, backoff_max=1)


def steps_done(c, i):
    found = re.findall(r"step +(\d+) +ranks", c.rank_output(i))
    return int(found[-1]) if found else 0


def test_the_example_trains_on_through_a_host_that_leaves_and_returns(tmp_path):
    c = Cluster(tmp_path, 5, CONFIG)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(HERE, "..", "..", "client", "python")
    if os.environ.get("RINGD_PYTHON_PRELOAD"):  # a sanitized libringd (CMakeLists.txt)
        env["LD_PRELOAD"] = os.environ["RINGD_PYTHON_PRELOAD"]
        env["ASAN_OPTIONS"] = "detect_leaks=0:halt_on_error=1:abort_on_error=0"
    env["OMP_NUM_THREADS"] = "1"
    argv = [sys.executable, EXAMPLE, "--steps", "1500", "--sleep", "0.005", "--print-every", "50"]
    try:
        c.start_all()
        for i in range(5):
            c.start_command(i, argv, env)
        deadline = time.monotonic() + scaled(60)
        while steps_done(c, 0) < 200:
            assert time.monotonic() < deadline, c.rank_output(0)
            time.sleep(0.1)
        c.kill(4)
        deadline = time.monotonic() + scaled(30)
        while "ranks 4" not in c.rank_output(0):
            assert time.monotonic() < deadline, c.rank_output(0)[-2000:]
            time.sleep(0.1)
        c.start(4)
        c.start_command(4, argv, env)
        codes = c.wait_ranks(range(5), 240)
        outs = [c.rank_output(i) for i in range(5)]
        assert all(code == 0 for code in codes.values()), (codes, [o[-1500:] for o in outs])
        finals = [re.findall(r"rank \d+ of (\d+): .* weights ([0-9a-f]+), the same on every rank",
                             o) for o in outs]
        assert all(finals), outs
        assert {f[-1] for f in finals} == {("5", finals[0][-1][1])}, finals
        assert "ring resized to 4 hosts" in outs[0], outs[0][-2000:]
        # The returning process was the newest: it took the others' state.
        assert "ranks 5" in outs[0].split("ring resized to 4 hosts")[-1]
    finally:
        bad = c.stop_all()
        assert not bad, "\n".join(c.tail(i) for i in bad)
