"""Daemons and training processes of an elastic ring, for its tests.

    c = Cluster(tmp, hosts=5, extra_yaml="evict_after: 2s\\n")
    c.start_all()                       # daemons h0..h4, each waits ready
    c.start_rank(i, steps=400)          # elastic_rank on host i
    c.kill(i)                           # SIGKILL its daemon and its rank
    c.start(i)                          # the daemon back (the rank: start_rank)
    c.stop_all()                        # SIGTERM, check clean exits

A host's daemon runs as `ringd --config ringd.yaml --host hI` (hosts on
127.0.0.1, or in network namespaces: `wrap` prefixes each command, e.g.
["ip", "netns", "exec", NS]). Every wait has a deadline. The paths of the
binaries come from the environment: RINGD_BIN, RINGCTL_BIN, ELASTIC_RANK;
the ringd package (client/python) must be importable, for its launch helpers.
"""

import collections
import json
import os
import re
import signal
import subprocess
import time

from ringd.launch import _die_with_parent, free_ports, wait_accepting


class Cluster:
    def __init__(self, dirpath, hosts, extra_yaml="", addresses=None, wrap=None, local_clients=1):
        self.dir = str(dirpath)
        self.n = hosts
        self.local = local_clients
        self.wrap = wrap or (lambda i: [])
        self.ringd = os.environ["RINGD_BIN"]
        self.ringctl_bin = os.environ.get("RINGCTL_BIN")
        self.rank_bin = os.environ.get("ELASTIC_RANK")
        if addresses is None:
            addresses = [f"127.0.0.1:{p}" for p in free_ports(hosts)]
        self.sockets = [os.path.join(self.dir, f"h{i}.sock") for i in range(hosts)]
        self.logs = [os.path.join(self.dir, f"h{i}.log") for i in range(hosts)]
        # Training processes by ID: host x local_clients + local rank.
        self.rank_logs = [os.path.join(self.dir, f"rank{i}.log")
                          for i in range(hosts * local_clients)]
        self.daemons = [None] * hosts
        self.ranks = [None] * (hosts * local_clients)
        self.config = os.path.join(self.dir, "ringd.yaml")
        lines = ["cluster: elastic", f"local_clients: {local_clients}"]
        lines += [l for l in extra_yaml.splitlines() if l.strip()]
        lines.append("hosts:")
        for i in range(hosts):
            lines += [f"  - name: h{i}", f"    address: {addresses[i]}", f"    socket: {self.sockets[i]}"]
        with open(self.config, "w") as f:
            f.write("\n".join(lines) + "\n")

    # ---- daemons ----

    def start(self, i, wait=True):
        assert self.daemons[i] is None or self.daemons[i].poll() is not None
        with open(self.logs[i], "ab") as log:
            self.daemons[i] = subprocess.Popen(
                self.wrap(i) + [self.ringd, "--config", self.config, "--host", f"h{i}"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, preexec_fn=_die_with_parent)
        if wait:
            self.wait_ready(i)

    def start_all(self):
        for i in range(self.n):
            self.start(i, wait=False)
        for i in range(self.n):
            self.wait_ready(i)

    def wait_ready(self, i, timeout=20):
        why = wait_accepting(self.daemons[i], self.sockets[i], time.monotonic() + timeout)
        assert why is None, f"ringd h{i} {why} ({timeout} s):\n" + self.tail(i)

    def kill(self, i, sig=signal.SIGKILL):
        """Kills host i: its daemon (sig) and its training processes (SIGKILL)."""
        for r in self.ranks[i * self.local:(i + 1) * self.local]:
            if r is not None and r.poll() is None:
                r.kill()
                r.wait()
        d = self.daemons[i]
        if d is not None and d.poll() is None:
            d.send_signal(sig)
            d.wait(timeout=20)
        return d.returncode if d is not None else None

    def stop_all(self):
        """SIGTERM to every daemon; returns the hosts that did not exit 0."""
        for r in self.ranks:
            if r is not None and r.poll() is None:
                r.kill()
                r.wait()
        for d in self.daemons:
            if d is not None and d.poll() is None:
                d.send_signal(signal.SIGTERM)
        bad = []
        for i, d in enumerate(self.daemons):
            if d is None:
                continue
            try:
                code = d.wait(timeout=20)
            except subprocess.TimeoutExpired:
                d.kill()
                code = d.wait()
            if code not in (0, -signal.SIGKILL):
                bad.append(i)
        return bad

    def tail(self, i, lines=40):
        try:
            with open(self.logs[i], errors="replace") as f:
                return "\n".join(f"  h{i}| {l}" for l in f.read().splitlines()[-lines:])
        except OSError:
            return f"  h{i}| (no log)"

    def ringctl(self, i, *args, timeout=20):
        out = subprocess.run(self.wrap(i) + [self.ringctl_bin, "--socket", self.sockets[i], *args],
                             capture_output=True, text=True, timeout=timeout)
        return out.returncode, out.stdout + out.stderr

    def status(self, i):
        code, out = self.ringctl(i, "status", "--json")
        assert code in (0, 1), out
        return json.loads(out)

    # ---- training processes ----

    def start_rank(self, i, steps, step_ms=20, deadline_s=240):
        """Starts host i's training processes (elastic_rank, one per local rank)."""
        for k in range(self.local):
            pid = i * self.local + k
            env = dict(os.environ, RINGD_LOCAL_RANK=str(k))
            self.ranks[pid] = subprocess.Popen(
                self.wrap(i) + [self.rank_bin, self.sockets[i], str(pid), str(steps),
                                self.rank_logs[pid], str(step_ms), str(deadline_s)],
                env=env, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)

    def start_command(self, i, argv, env=None):
        """Host i's training process is argv (RINGD_SOCKET set), its output
        appended to rank_logs[i]."""
        e = dict(os.environ if env is None else env)
        e["RINGD_SOCKET"] = self.sockets[i]
        with open(self.rank_logs[i], "ab") as log:
            self.ranks[i] = subprocess.Popen(self.wrap(i) + argv, env=e, stdin=subprocess.DEVNULL,
                                             stdout=log, stderr=log, preexec_fn=_die_with_parent)

    def rank_output(self, i):
        with open(self.rank_logs[i], errors="replace") as f:
            return f.read()

    def train(self, steps, until_step, step_ms=20):
        """Starts every daemon and a training process on each host, and
        waits until host 0 has run until_step steps."""
        self.start_all()
        for i in range(self.n):
            self.start_rank(i, steps, step_ms)
        self.wait_event(0, lambda e: e[1] == "ok" and int(e[2][0]) >= until_step, 60)

    def check_run(self, hosts, steps, timeout=120):
        """Waits for the training processes of hosts to finish, then checks
        the run (replay()) and that each ends with the replay's model.
        Returns {step: hosts that ran it}."""
        ids = [i * self.local + k for i in hosts for k in range(self.local)]
        codes = self.wait_ranks(ids, timeout)
        logs = {i: self.rank_events(i) for i in range(len(self.ranks))}
        assert all(code == 0 for code in codes.values()), (
            f"exit codes {codes}; last events:\n"
            + "\n".join(f"process {i}: {logs[i][-5:]}" for i in ids))
        schedule = replay(logs)
        assert sorted(schedule) == list(range(steps)), "some step never ran, or ran twice"
        want = model_hash(schedule, steps)
        for i in ids:
            done = [e for e in logs[i] if e[1] == "done"]
            assert done and done[-1][2][0] == want, (
                f"process {i} ends with model {done}, the replay {want}")
        return schedule

    def rank_events(self, i):
        """The events of training process i (the processes of that ID one
        after another), as (ms, kind, fields)."""
        events = []
        try:
            with open(self.rank_logs[i]) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) >= 2:
                        events.append((int(parts[0]), parts[1], parts[2:]))
        except OSError:
            pass
        return events

    def wait_ranks(self, ids, timeout):
        """Waits for the training processes ids to exit; returns their codes."""
        deadline = time.monotonic() + timeout
        codes = {}
        for i in ids:
            try:
                codes[i] = self.ranks[i].wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                codes[i] = None
        return codes

    def wait_event(self, i, pred, timeout, after_ms=0):
        """Waits until process i's log has an event (ms, kind, fields) after
        after_ms for which pred is true; returns it."""
        deadline = time.monotonic() + timeout
        while True:
            for e in self.rank_events(i):
                if e[0] >= after_ms and pred(e):
                    return e
            assert time.monotonic() < deadline, (
                f"no such event of rank h{i} in {timeout} s; its last ones:\n"
                + "\n".join(map(str, self.rank_events(i)[-10:])) + "\n" + self.tail(i))
            time.sleep(0.05)


def now_ms():
    return int(time.time() * 1000)


def replay(events_by_host):
    """Checks the run: every step ran exactly once on one set of hosts
    (the same for every rank that ran it), and returns {step: mask}."""
    ran = {}
    for host, events in events_by_host.items():
        for _, kind, f in events:
            if kind == "wrong":
                raise AssertionError(f"h{host}: wrong result: {' '.join(f)}")
            if kind != "ok":
                continue
            step, mask = int(f[0]), int(f[1], 16)
            assert ran.setdefault(step, mask) == mask, (
                f"step {step} ran on hosts {ran[step]:#x} and on {mask:#x}")
    return ran


def model_hash(schedule, steps, elems=1024):
    """The model elastic_rank ends with after steps whose hosts schedule
    gives: the single-process replay of the same membership schedule."""
    p = [0] * (elems - 2)
    mask64 = (1 << 64) - 1
    for s in range(steps):
        hosts = [h for h in range(64) if schedule[s] >> h & 1]
        for i in range(2, elems):
            p[i - 2] += sum(((h + 1) * 7919 + s * 104729 + i * 31) % 1000003 for h in hosts)
    x = 1469598103934665603
    for v in p:
        x ^= v & mask64
        x = (x * 1099511628211) & mask64
    return f"{x:016x}"


# ---- every call's outcome (elastic_rank's "call" lines) ----

RINGD_ECLOSED = -4
RINGD_ERESIZED = -21
CALL = re.compile(r"^(\d+) call (\d+) (-?\d+) (.*)$")


def rank_calls(path):
    """The calls logged in path as (N, RC, TEXT, line), in the order made."""
    calls = []
    with open(path, errors="replace") as f:
        for line in f:
            m = CALL.match(line.rstrip("\n"))
            if m:
                calls.append((int(m[2]), int(m[3]), m[4], line.rstrip("\n")))
    return calls


def exempt(rc, text):
    """Whether an answer is one of the two that PROTOCOL.md (Outcomes,
    "Where one outcome is impossible") lets differ from the other ranks'."""
    return rc == RINGD_ECLOSED or "outcome unknown" in text


def check_one_outcome(c, ids, scenario):
    """Asserts that processes ids, which lived through the whole run on
    hosts that stayed in the ring, got one outcome for every call: the same
    code and message, but where one got RINGD_ECLOSED or "outcome unknown".
    Returns what it saw: calls compared, failed calls and their outcomes,
    the exceptions."""
    calls = {i: rank_calls(c.rank_logs[i]) for i in ids}
    for i, cs in calls.items():
        assert [n for n, *_ in cs] == list(range(len(cs))), (
            f"process {i}'s calls are not numbered 0, 1, 2, ... (restarted?)")
    lengths = {i: len(cs) for i, cs in calls.items()}
    n_calls = min(lengths.values())
    exceptions, failed, outcomes = [], 0, collections.Counter()
    for n in range(n_calls):
        at = {i: calls[i][n] for i in ids}
        if any(exempt(rc, text) for _, rc, text, _ in at.values()):
            exceptions.append((n, at))
            continue
        if len({(rc, text) for _, rc, text, _ in at.values()}) != 1:
            kinds = "a success on one and an error on another" if (
                len({rc == 0 for _, rc, _, _ in at.values()}) > 1) else "different outcomes"
            raise AssertionError(
                f"{scenario}: call {n}: {kinds}:\n"
                + "\n".join(f"  process {i} (h{i}): {at[i][3]}" for i in ids)
                + "\nthe daemons' logs:\n" + "\n".join(c.tail(h, 60) for h in range(c.n)))
        rc, text = at[ids[0]][1], at[ids[0]][2]
        if rc < 0:
            failed += 1
            # Messages differ by collective number and host; their shape:
            outcomes[(rc, re.sub(r"#\d+", "#N", text))] += 1
    for n, at in exceptions:
        print(f"{scenario}: call {n} exempt:\n"
              + "\n".join(f"  process {i}: {at[i][3]}" for i in ids))
    if len(set(lengths.values())) != 1:
        # Only after an exception may the processes part (one retries a step
        # that another has synced after).
        assert exceptions, f"{scenario}: processes made {lengths} calls, with no exception"
        print(f"{scenario}: processes made {lengths} calls")
    print(f"{scenario}: {n_calls} calls compared on processes {ids}, {failed} failed alike, "
          f"{len(exceptions)} exempt; outcomes:")
    for (rc, text), k in sorted(outcomes.items()):
        print(f"  {k:4d} x {rc} {text}")
    return n_calls, failed, outcomes, exceptions
