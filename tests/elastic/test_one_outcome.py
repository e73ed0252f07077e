"""One outcome on every rank, call by call, on an elastic ring (issue 22).

Four daemons on 127.0.0.1 (min_hosts 3, evict_after 3 s) each run a
training process (elastic_rank) that loops allreduce and logs every call's
outcome as "T call N RC TEXT". Faults hit one host, h3: its daemon is
killed mid-collective and kept away past evict_after; frozen past
evict_after and resumed, 20 times; killed and started again while the
others are closing over it. Then every process that lived through the run
on a host that stayed in the ring is compared call by call: for every N,
the same code and the same message on all of them, except where one got
RINGD_ECLOSED or an answer that says "outcome unknown" (PROTOCOL.md,
Outcomes, "Where one outcome is impossible"); never a success on one and
an error on another (cluster.py, check_one_outcome). Every run ends with the model a single-process replay
of its membership schedule gives (cluster.py, check_run).
"""

import os
import random
import signal
import sys
import time

import pytest

from cluster import RINGD_ERESIZED, Cluster, check_one_outcome, exempt, now_ms, rank_calls
from timing import durations, scaled

# Timings as written for a machine shared two ways, stretched on a busier one.
EVICT_S = scaled(3)
HOSTS = 4
VICTIM = 3
STEP_MS = 5
CONFIG = "min_hosts: 3\n" + durations(evict_after=3, heartbeat_interval=0.25, heartbeat_timeout=1,
                                     collective_timeout=6, backoff_max=1)



@pytest.fixture
def cluster(tmp_path):
    """A cluster of four whose training processes stop at the step written
    to its stop file (Cluster.finish())."""
    c = Cluster(tmp_path, HOSTS, CONFIG)
    yield c
    # A test that failed while h3 was frozen leaves it stopped: wake it, or
    # SIGTERM waits for nothing.
    for d in c.daemons:
        if d is not None and d.poll() is None:
            d.send_signal(signal.SIGCONT)
    bad = c.stop_all()
    assert not bad, "daemons that did not exit cleanly:\n" + "\n".join(c.tail(i) for i in bad)


# ---- driving the run ----

def start_training(c):
    c.start_all()
    for i in range(HOSTS):
        c.start_rank(i, 10**9, step_ms=STEP_MS, deadline_s=600)
    c.wait_event(0, lambda e: e[1] == "ok" and int(e[2][0]) >= 30, 60)


def ok_count(c, i, after_ms, size):
    return sum(1 for e in c.rank_events(i)
               if e[1] == "ok" and e[0] >= after_ms and int(e[2][2]) == size)


def wait_ring(c, ids, size, after_ms, steps=20, timeout=30):
    """Waits until each process of ids has run steps steps on size hosts
    since after_ms; returns the time of the first one on process ids[0]."""
    timeout = scaled(timeout)
    deadline = time.monotonic() + timeout
    for i in ids:
        while ok_count(c, i, after_ms, size) < steps:
            assert time.monotonic() < deadline, (
                f"process {i} has not run {steps} steps on {size} hosts in {timeout:.0f} s; "
                "its last events:\n" + "\n".join(map(str, c.rank_events(i)[-10:]))
                + "\n" + "\n".join(c.tail(h, 15) for h in range(HOSTS)))
            time.sleep(0.05)
    return c.wait_event(ids[0], lambda e: e[1] == "ok" and int(e[2][2]) == size, 1, after_ms)[0]


def kill_daemon(c, i):
    """SIGKILLs host i's daemon alone: its training process gets
    RINGD_ECLOSED, logs it and exits 3."""
    c.daemons[i].kill()
    c.daemons[i].wait(timeout=scaled(20))
    code = c.ranks[i].wait(timeout=scaled(20))
    assert code == 3, f"process {i} exited {code} when its daemon was killed"


def restart(c, i):
    c.start(i)
    c.start_rank(i, 10**9, step_ms=STEP_MS, deadline_s=600)


# ---- the check (check_one_outcome(): cluster.py) ----

def check_closed_over(c, f, ref, scenario):
    """Compares process f, whose host was closed over (frozen) and taken
    back while it lived, with ref's calls, which check_one_outcome()
    found alike on every host that stayed. They match call for call, the
    call f had in flight over a freeze included (a success if every host
    had completed it, else the resize that closed over f, with its
    message: f settles that verdict when it is taken back), but for the
    calls the ring made without f: f's first call after its return fails
    with the resize that took it back, as ref's call then did, and f goes
    on from there. Never a success where ref failed, nor the reverse.
    Returns the returns (f's line, ref's, ref's at f's return)."""
    fc, rc_ = rank_calls(c.rank_logs[f]), rank_calls(c.rank_logs[ref])
    d, n, compared, returns, exempted = 0, 0, 0, [], []

    def violation(why):
        raise AssertionError(
            f"{scenario}: process {f}'s call {n}, process {ref}'s call {n + d}: {why}:\n"
            f"  process {f} (h{f}): {fc[n][3]}\n  process {ref} (h{ref}): {rc_[n + d][3]}\n"
            + "the daemons' logs:\n" + "\n".join(c.tail(h, 60) for h in range(HOSTS)))

    def closed_over_at(m):
        """Whether ref's call m or the one before is the resize that closed
        over f: then f's next call may be its first after its return."""
        return any(0 <= k < len(rc_) and rc_[k][1] == RINGD_ERESIZED and
                   f"ring resized to {HOSTS - 1} hosts" in rc_[k][2] for k in (m - 1, m))

    while n < len(fc) and n + d < len(rc_):
        _, frc, ftext, fline = fc[n]
        _, rrc, rtext, rline = rc_[n + d]
        if exempt(frc, ftext) or exempt(rrc, rtext):
            exempted.append((fline, rline))
        elif (frc, ftext) != (rrc, rtext):
            back = None
            if frc == RINGD_ERESIZED and closed_over_at(n + d):
                back = next((m for m in range(n + d + 1, len(rc_))
                             if rc_[m][1:3] == (frc, ftext)), None)
            if back is None:
                violation("a success on one and an error on another"
                          if (frc == 0) != (rrc == 0) else "different outcomes")
            returns.append((fline, rline, rc_[back][3]))
            d = back - n
        compared += 1
        n += 1
    assert compared >= len(fc) - 10, (
        f"{scenario}: only {compared} of process {f}'s {len(fc)} calls compared")
    for fline, rline in exempted:
        print(f"{scenario}: exempt:\n  process {f}: {fline}\n  process {ref}: {rline}")
    print(f"{scenario}: process {f} (closed over and back): {compared} calls compared with "
          f"process {ref}, {len(exempted)} exempt, {len(returns)} returns; the first:")
    for lines in returns[:1]:
        print("\n".join(f"  {l}" for l in lines))
    return returns


def resizes(outcomes, to_hosts):
    return sum(k for (rc, text), k in outcomes.items()
               if rc == RINGD_ERESIZED and f"ring resized to {to_hosts} hosts" in text)


# ---- the scenarios ----

def test_a_daemon_killed_mid_collective_and_back_after_evict_after(cluster):
    c = cluster
    start_training(c)
    survivors = [h for h in range(HOSTS) if h != VICTIM]
    cycles = 2
    for _ in range(cycles):
        t = now_ms()
        kill_daemon(c, VICTIM)
        wait_ring(c, survivors, 3, t, steps=10)
        # Away past evict_after, then back.
        time.sleep(max(0, EVICT_S + scaled(1) - (now_ms() - t) / 1000))
        t = now_ms()
        restart(c, VICTIM)
        wait_ring(c, list(range(HOSTS)), 4, t)
    c.finish(range(HOSTS))
    n, failed, outcomes, _ = check_one_outcome(c, survivors, "killed")
    assert failed >= 2 * cycles, "the kills failed no call"
    assert resizes(outcomes, 3) >= cycles and resizes(outcomes, 4) >= cycles, outcomes


def test_a_daemon_frozen_past_evict_after_and_resumed_20_times(cluster):
    c = cluster
    start_training(c)
    survivors = [h for h in range(HOSTS) if h != VICTIM]
    freezes, frozen_s = 20, []
    for _ in range(freezes):
        t = now_ms()
        c.daemons[VICTIM].send_signal(signal.SIGSTOP)
        try:
            # Frozen until the others have closed over it (heartbeat_timeout,
            # then evict_after) and train without it.
            wait_ring(c, survivors, 3, t, steps=5, timeout=15)
        finally:
            c.daemons[VICTIM].send_signal(signal.SIGCONT)
        frozen_s.append((now_ms() - t) / 1000)
        t = now_ms()
        wait_ring(c, list(range(HOSTS)), 4, t)
    print(f"{freezes} freezes of {min(frozen_s):.1f} to {max(frozen_s):.1f} s")
    c.finish(range(HOSTS))
    n, failed, outcomes, _ = check_one_outcome(c, survivors, "frozen")
    assert failed >= 2 * freezes, "the freezes failed no call"
    assert resizes(outcomes, 3) >= freezes and resizes(outcomes, 4) >= freezes, outcomes
    returns = check_closed_over(c, VICTIM, survivors[0], "frozen")
    assert len(returns) >= freezes // 2, "the frozen host's returns were not seen"


def test_a_daemon_restarted_while_the_others_close_over_it(cluster):
    env = os.environ.get("RINGD_TEST_SEED")
    seed = int(env, 0) if env else time.time_ns() ^ os.getpid() << 32
    print(f"restarts: seed {seed} (RINGD_TEST_SEED={seed} reproduces them)", flush=True)
    rnd = random.Random(seed)
    c = cluster
    start_training(c)
    survivors = [h for h in range(HOSTS) if h != VICTIM]
    cycles = 6
    for _ in range(cycles):
        away = rnd.uniform(EVICT_S - scaled(0.4), EVICT_S + scaled(0.4))
        t = now_ms()
        kill_daemon(c, VICTIM)
        time.sleep(max(0, away - (now_ms() - t) / 1000))
        t = now_ms()
        restart(c, VICTIM)
        print(f"h{VICTIM} away {away:.2f} s", flush=True)
        wait_ring(c, list(range(HOSTS)), 4, t)
    c.finish(range(HOSTS))
    n, failed, outcomes, _ = check_one_outcome(c, survivors, "restarted")
    assert failed >= cycles, "the restarts failed no call"


# ---- a resize agreed while the ring waits for a rank ----

# A training process that makes one allreduce each time the test writes its
# go file (go-ID-K, the K-th), and logs "call K RC TEXT".
STEPPER = r"""
import os, sys, time
import numpy as np
import ringd
d, me = sys.argv[1], sys.argv[2]
c = ringd.connect()
k = 0
while True:
    go = os.path.join(d, f"go-{me}-{k}")
    while not os.path.exists(go):
        time.sleep(0.005)
    try:
        c.allreduce(np.full(4, float(k)))
        print(f"call {k} 0 ok", flush=True)
    except ringd.RingError as e:
        print(f"call {k} {e.code} {e}", flush=True)
    k += 1
"""


STEPPED_EVICT_S = scaled(2)
STEPPED = "min_hosts: 2\n" + durations(evict_after=2, heartbeat_interval=0.25, heartbeat_timeout=1,
                                      collective_timeout=6, backoff_max=1)


class Steppers:
    """Three hosts, each with a STEPPER process that the test moves one
    call at a time."""

    def __init__(self, tmp_path):
        self.c = Cluster(tmp_path, 3, STEPPED)
        self.d = str(tmp_path)
        self.since = {}

    def start(self):
        """Starts the ring and its processes, whose call 0 succeeds."""
        self.c.start_all()
        for i in range(3):
            self.start_process(i, str(i))
        for i in range(3):
            self.go(i, 0)
        assert [self.call(i, 0) for i in range(3)] == [(0, "ok")] * 3

    def start_process(self, i, me):
        """Host i's training process is a new STEPPER, named me."""
        log = self.c.rank_logs[i]
        self.since[i] = os.path.getsize(log) if os.path.exists(log) else 0
        env = dict(os.environ)
        if os.environ.get("RINGD_PYTHON_PRELOAD"):  # a sanitized libringd (CMakeLists.txt)
            env["LD_PRELOAD"] = os.environ["RINGD_PYTHON_PRELOAD"]
            env["ASAN_OPTIONS"] = "detect_leaks=0:halt_on_error=1:abort_on_error=0"
        self.c.start_command(i, [sys.executable, "-c", STEPPER, self.d, me], env)

    def go(self, me, k):
        with open(os.path.join(self.d, f"go-{me}-{k}"), "w"):
            pass

    def call(self, i, k, timeout=30):
        """Host i's process's call k: (code, message)."""
        timeout = scaled(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.c.rank_output(i)[self.since[i]:].splitlines():
                if line.startswith(f"call {k} "):
                    _, _, rc, text = line.split(" ", 3)
                    return int(rc), text
            time.sleep(0.02)
        raise AssertionError(f"process {i} made no call {k} in {timeout:.0f} s:\n"
                             + self.c.rank_output(i)
                             + "\n".join(self.c.tail(h, 30) for h in range(3)))

    def made(self, i, k):
        return f"call {k} " in self.c.rank_output(i)[self.since[i]:]

    def wait_log(self, i, text, timeout=30):
        timeout = scaled(timeout)
        deadline = time.monotonic() + timeout
        while text not in self.c.tail(i, 200):
            assert time.monotonic() < deadline, (
                f"h{i} never logged {text!r}:\n" + self.c.tail(i, 40))
            time.sleep(0.02)

    def logged(self, i, text):
        return self.c.tail(i, 10000).count(text)

    def stop(self):
        bad = self.c.stop_all()
        assert not bad, "daemons that did not exit cleanly:\n" + "\n".join(
            self.c.tail(i) for i in bad)


@pytest.fixture
def steppers(tmp_path):
    s = Steppers(tmp_path)
    try:
        yield s
    finally:
        s.stop()


def test_a_resize_the_ring_waits_in_fails_calls_alike_made_before_or_after_it(steppers):
    """h2 comes back without its rank: the confirmation that takes it back
    ("back: h2") is the resize, although the ring waits for rank 2. Rank
    0's call 3, made before it and running on h0 (rank 1 has not made its
    call 3 yet), fails with the resize's words at once; rank 1's call 3,
    made after it, fails alike, for the old membership; call 4 waits for
    rank 2 and runs on three hosts. (Was: rank 0's call 3 failed with the
    break that let h2 back in, "ring broken: host h0 lost its link from h1
    ...: h2, nearer on the ring, connected", and rank 1's with the resize,
    once the ring was ready: one call, two outcomes. Found by
    test_a_daemon_restarted_while_the_others_close_over_it at -j2.)"""
    s = steppers
    s.start()
    s.c.kill(2)
    s.wait_log(0, "ring resized to 2 hosts")
    for i in (0, 1):
        s.go(i, 1)
    first = [s.call(i, 1) for i in (0, 1)]
    assert first[0] == first[1] and first[0][0] == RINGD_ERESIZED, first
    for i in (0, 1):
        s.go(i, 2)
    assert [s.call(i, 2)[0] for i in (0, 1)] == [0, 0]
    # Rank 0's call 3 runs on h0 and waits for rank 1's.
    s.go(0, 3)
    time.sleep(0.3)
    assert not s.made(0, 3), "rank 0's call 3 ran without rank 1"
    # h2 is back, its rank not yet: the ring takes it back and waits.
    formed = s.logged(0, "ring formed: 3 hosts")
    s.c.start(2)
    s.wait_log(0, "ring resized to 3 hosts")
    s.wait_log(0, "rank 2 on host h2 is not connected")
    first = s.call(0, 3, timeout=5)
    assert first == (RINGD_ERESIZED, "RINGD_ERESIZED: allreduce failed: "
                     "ring resized to 3 hosts (3 ranks): back: h2"), first
    assert s.logged(0, "ring formed: 3 hosts") == formed, (
        "rank 0's call 3 was answered only once the ring was ready")
    s.go(1, 3)
    second = s.call(1, 3)
    assert first == second, f"one call, two outcomes:\n  rank 0: {first}\n  rank 1: {second}"
    # The next call is the new ring's first on every rank, rank 2's
    # newcomer included.
    for i in (0, 1):
        s.go(i, 4)
    time.sleep(0.3)
    assert not s.made(0, 4), "call 4 ran without rank 2"
    s.start_process(2, "2b")
    s.go("2b", 0)
    s.wait_log(0, "ring formed: 3 hosts")
    assert [s.call(0, 4), s.call(1, 4), s.call(2, 0)] == [(0, "ok")] * 3


def test_a_call_made_for_a_membership_two_resizes_ago_fails_with_the_first(steppers):
    """Two resizes in a row: h2 is closed over (the first), then comes back
    (the second). Rank 0's call 1, made while h2 was being closed over,
    fails with the first. Rank 1 makes its call 1 only after the second,
    for the membership before both: it fails with the first too, and its
    RESULT tells it of the ring of two, so that its call 2 fails with the
    second, as rank 0's does. Every rank then makes its first call on the
    ring of three as its call 3. (Was: rank 1's call 1 failed with the
    second resize and its call 2 ran, paired with rank 0's call 3, while
    rank 0's call 2 failed: found by
    test_a_daemon_restarted_while_the_others_close_over_it at -j2.)"""
    s = steppers
    s.start()
    # h2's daemon dies; its process, which makes no call, is no rank any more.
    s.c.daemons[2].kill()
    s.c.daemons[2].wait(timeout=scaled(20))
    s.c.ranks[2].kill()
    s.c.ranks[2].wait(timeout=scaled(20))
    s.go(0, 1)
    one = s.call(0, 1)
    assert one == (RINGD_ERESIZED, "RINGD_ERESIZED: allreduce failed: ring resized to 2 hosts "
                   f"(2 ranks): h2 unreachable for {STEPPED_EVICT_S:.0f} s "
                   "(connection refused)"), one
    resizes = s.logged(0, "ring resized to")
    s.c.start(2)
    s.start_process(2, "2b")
    s.wait_log(0, "ring formed: 3 hosts")
    assert s.logged(0, "ring resized to") == resizes + 1
    s.go(1, 1)
    assert s.call(1, 1) == one
    for i in (0, 1):
        s.go(i, 2)
    two = [s.call(i, 2) for i in (0, 1)]
    assert two[0] == two[1] == (RINGD_ERESIZED, "RINGD_ERESIZED: allreduce failed: "
                                "ring resized to 3 hosts (3 ranks): back: h2"), two
    for i in (0, 1):
        s.go(i, 3)
    s.go("2b", 0)
    assert [s.call(0, 3), s.call(1, 3), s.call(2, 0)] == [(0, "ok")] * 3


def test_a_host_closed_over_fails_its_calls_for_its_old_membership_as_the_others_did(steppers):
    """h2 is frozen past evict_after: h0 and h1 close over it (the first
    resize), and their call 1 fails with it. h2 resumes and the ring takes
    it back (the second resize); h2 learns of the first from the lap that
    takes it back, a ring it was not in. Its rank makes its call 1 only
    then, for the membership before both: it fails with the first's words,
    as the others' call 1 did, and leaves the rank where it was (it has no
    place in a ring without h2), so that its call 2 fails with the second,
    as the others' does; call 3 runs on all three. (Was: its call 1 failed
    with the second's words, "back: h2", and its call 2 ran: h2 kept no
    words of a resize that left it out. Found by test_elastic_netns, a call
    held by a host cut off over two resizes.)"""
    s = steppers
    s.start()
    frozen = s.c.daemons[2]
    frozen.send_signal(signal.SIGSTOP)
    try:
        s.wait_log(0, "ring resized to 2 hosts")
        for i in (0, 1):
            s.go(i, 1)
        first = [s.call(i, 1) for i in (0, 1)]
    finally:
        frozen.send_signal(signal.SIGCONT)
    assert first[0] == first[1] and first[0][0] == RINGD_ERESIZED, first
    assert "ring resized to 2 hosts (2 ranks): h2 unreachable" in first[0][1], first
    # h2 learns of both resizes as the ring takes it back.
    s.wait_log(0, "ring formed: 3 hosts")
    s.wait_log(2, "ring resized to 3 hosts (3 ranks): back: h2")
    s.go(2, 1)
    assert s.call(2, 1) == first[0], f"one call, two outcomes:\n  ranks 0, 1: {first[0]}\n" \
        f"  rank 2: {s.call(2, 1)}\n" + s.c.tail(2, 30)
    for i in range(3):
        s.go(i, 2)
    two = [s.call(i, 2) for i in range(3)]
    assert two == [(RINGD_ERESIZED, "RINGD_ERESIZED: allreduce failed: "
                    "ring resized to 3 hosts (3 ranks): back: h2")] * 3, two
    for i in range(3):
        s.go(i, 3)
    assert [s.call(i, 3) for i in range(3)] == [(0, "ok")] * 3
