"""A host that comes back is in the ring at once (issue 25: no regrow races).

Four daemons on 127.0.0.1 (min_hosts 3, evict_after 3 s, the default
backoff_max of 5 s) each run a training process (elastic_rank) that loops
allreduce. A host's daemon is killed, 20 times, and started again at a
random moment from 1.5 s before the others close over it to 0.5 s after:
while its left neighbour backs off between attempts to reach it, closes
over it, is refused by the host beyond (whose left neighbour it is again),
or runs without it. Whatever they were doing, every process runs a step on
the ring of four within 1 s of that daemon's start: from just before its
start to the latest of the processes' first steps on four hosts, less the
time a daemon spent waiting for a CPU meanwhile (the machine is shared: a
stall of a second, which no daemon can help, is not a regrow race).
RINGD_TEST_SEED replays a run's hosts and delays.
"""

import os
import random
import statistics
import time

import pytest

from cluster import Cluster, now_ms
from timing import durations, scaled

# Timings as written for a machine shared two ways, stretched on a busier one
# (tests/timing.py); BOUND_S is not: the waits for a CPU are taken out of it.
EVICT_S = scaled(3)
HOSTS = 4
RESTARTS = 20
# After the kill: from the left neighbour's backoff to past evict_after.
AWAY_S = (EVICT_S - scaled(1.5), EVICT_S + scaled(0.5))
BOUND_S = 1.0
STEP_MS = 5
CONFIG = "min_hosts: 3\n" + durations(evict_after=3, heartbeat_interval=0.25, heartbeat_timeout=1,
                                     collective_timeout=6)


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path, HOSTS, CONFIG)
    yield c
    bad = c.stop_all()
    assert not bad, "daemons that did not exit cleanly:\n" + "\n".join(c.tail(i) for i in bad)


def first_ok(c, i, after_ms, size):
    """The time of process i's first step on size hosts since after_ms, or None."""
    return next((e[0] for e in c.rank_events(i)
                 if e[1] == "ok" and e[0] >= after_ms and int(e[2][2]) == size), None)


def ok_count(c, i, after_ms, size):
    return sum(1 for e in c.rank_events(i)
               if e[1] == "ok" and e[0] >= after_ms and int(e[2][2]) == size)


def logs(c):
    return "\n".join(c.tail(h, 40) for h in range(HOSTS))


def wait_full_ring(c, after_ms, timeout=30):
    """Waits until every process has run a step on every host since
    after_ms; returns the latest of their first such steps (ms)."""
    timeout = scaled(timeout)
    deadline = time.monotonic() + timeout
    while True:
        firsts = [first_ok(c, i, after_ms, HOSTS) for i in range(HOSTS)]
        if None not in firsts:
            return max(firsts)
        assert time.monotonic() < deadline, (
            f"processes {[i for i, t in enumerate(firsts) if t is None]} ran no step on "
            f"{HOSTS} hosts in {timeout:.0f} s; the daemons' logs:\n" + logs(c))
        time.sleep(0.02)


def wait_steady(c, after_ms, steps=10, timeout=30):
    """Waits until every process has run steps steps on every host."""
    timeout = scaled(timeout)
    deadline = time.monotonic() + timeout
    for i in range(HOSTS):
        while ok_count(c, i, after_ms, HOSTS) < steps:
            assert time.monotonic() < deadline, (
                f"process {i} has not run {steps} steps on {HOSTS} hosts in {timeout:.0f} s:\n"
                + logs(c))
            time.sleep(0.05)


def cpu_waits(c):
    """Seconds each running daemon has waited for a CPU so far, by pid: the
    run_delay of /proc/PID/schedstat (0 where the kernel does not say)."""
    waits = {}
    for d in c.daemons:
        if d is None or d.poll() is not None:
            continue
        try:
            with open(f"/proc/{d.pid}/schedstat") as f:
                waits[d.pid] = int(f.read().split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            waits[d.pid] = 0.0
    return waits


def kill_daemon(c, i):
    """SIGKILLs host i's daemon alone; its training process gets
    RINGD_ECLOSED and exits 3."""
    c.daemons[i].kill()
    c.daemons[i].wait(timeout=scaled(20))
    code = c.ranks[i].wait(timeout=scaled(20))
    assert code == 3, f"process {i} exited {code} when its daemon was killed"


def test_a_host_restarted_while_the_others_close_over_it_is_back_within_1s(cluster):
    env = os.environ.get("RINGD_TEST_SEED")
    seed = int(env, 0) if env else time.time_ns() ^ os.getpid() << 32
    print(f"regrow: seed {seed} (RINGD_TEST_SEED={seed} reproduces it)", flush=True)
    rnd = random.Random(seed)
    c = cluster
    c.start_all()
    t = now_ms()
    for i in range(HOSTS):
        c.start_rank(i, 10**9, step_ms=STEP_MS, deadline_s=900)
    wait_steady(c, t, steps=30, timeout=60)

    times, net, slow = [], [], []
    for k in range(RESTARTS):
        victim = rnd.randrange(HOSTS)
        away = rnd.uniform(*AWAY_S)
        t_kill = now_ms()
        kill_daemon(c, victim)
        time.sleep(max(0, away - (now_ms() - t_kill) / 1000))
        before = cpu_waits(c)
        t_start = now_ms()
        c.start(victim)
        c.start_rank(victim, 10**9, step_ms=STEP_MS, deadline_s=900)
        back_s = (wait_full_ring(c, t_start) - t_start) / 1000
        # The restarted daemon's wait counts from its fork (before: 0). Read
        # once the ring is back, or later if this process waited too: never
        # more than the time measured.
        starved = max(w - before.get(pid, 0.0) for pid, w in cpu_waits(c).items())
        starved = min(starved, back_s)
        times.append(back_s)
        net.append(back_s - starved)
        print(f"restart {k + 1:2d}: h{victim} away {(t_start - t_kill) / 1000:.2f} s; every "
              f"process on {HOSTS} hosts {back_s:.3f} s after its daemon started "
              f"({starved:.3f} s of it a daemon waiting for a CPU)", flush=True)
        if net[-1] > BOUND_S:
            slow.append((k + 1, victim, net[-1], logs(c)))
        wait_steady(c, t_start)
    within = sum(1 for s in net if s <= BOUND_S)
    print(f"regrow: {within} of {RESTARTS} restarts within {BOUND_S:.0f} s; "
          f"median {statistics.median(times):.3f} s, max {max(times):.3f} s; less the waits "
          f"for a CPU: median {statistics.median(net):.3f} s, max {max(net):.3f} s", flush=True)
    for k, victim, net_s, tails in slow[:2]:
        print(f"restart {k} (h{victim}, {net_s:.3f} s): the daemons' logs then:\n{tails}")
    late = [f"restart {k}: {net_s:.3f} s" for k, _, net_s, _ in slow]
    assert not late, (f"longer than {BOUND_S:.0f} s, less the waits for a CPU (seed {seed}): "
                      + ", ".join(late))
