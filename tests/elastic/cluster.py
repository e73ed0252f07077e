"""Daemons and training processes of an elastic ring, for its tests.

    c = Cluster(tmp, hosts=5, extra_yaml="evict_after: 2s\\n")
    c.start_all()                       # daemons h0..h4, each waits ready
    c.start_rank(i, steps=400)          # elastic_rank on host i
    c.finish(hosts)                     # open-ended ranks stop, the run checked
    c.kill(i)                           # SIGKILL its daemon and its rank
    c.start(i)                          # the daemon back (the rank: start_rank)
    c.stop_all()                        # SIGTERM, check clean exits

A host's daemon runs as `ringd --config ringd.yaml --host hI` (hosts on
127.0.0.1, or in network namespaces: `wrap` prefixes each command, e.g.
["ip", "netns", "exec", NS]). Every wait has a deadline. The paths of the
binaries come from the environment: RINGD_BIN, RINGCTL_BIN, ELASTIC_RANK;
the ringd package (client/python) must be importable, for its launch helpers.
Every timeout here is stretched for the machine's load (tests/timing.py).
"""

import collections
import json
import os
import re
import signal
import socket
import subprocess
import time

from ringd.launch import _die_with_parent, free_ports, wait_accepting
from timing import scaled


class Cluster:
    def __init__(self, dirpath, hosts, extra_yaml="", addresses=None, wrap=None, local_clients=1):
        self.dir = str(dirpath)
        self.n = hosts
        self.local = local_clients
        self.wrap = wrap or (lambda i: [])
        self.ringd = os.environ["RINGD_BIN"]
        self.ringctl_bin = os.environ.get("RINGCTL_BIN")
        self.rank_bin = os.environ.get("ELASTIC_RANK")
        self._port_locks = []
        if addresses is None:
            addresses = [f"127.0.0.1:{p}" for p in self._locked_ports(hosts)]
        self.sockets = [os.path.join(self.dir, f"h{i}.sock") for i in range(hosts)]
        self.logs = [os.path.join(self.dir, f"h{i}.log") for i in range(hosts)]
        # Training processes by ID: host x local_clients + local rank.
        self.rank_logs = [os.path.join(self.dir, f"rank{i}.log")
                          for i in range(hosts * local_clients)]
        self.daemons = [None] * hosts
        self.ranks = [None] * (hosts * local_clients)
        self.config = os.path.join(self.dir, "ringd.yaml")
        # Where finish() writes the step every training process stops at.
        self.stop_file = os.path.join(self.dir, "stop")
        lines = ["cluster: elastic", f"local_clients: {local_clients}"]
        lines += [l for l in extra_yaml.splitlines() if l.strip()]
        lines.append("hosts:")
        for i in range(hosts):
            lines += [f"  - name: h{i}", f"    address: {addresses[i]}", f"    socket: {self.sockets[i]}"]
        with open(self.config, "w") as f:
            f.write("\n".join(lines) + "\n")

    def _locked_ports(self, n):
        """n free ports (free_ports()), each locked as the C harness locks its
        daemons' ports (tests/harness/harness.c, lock_port(): an abstract Unix
        socket per port) for as long as this cluster lives: a daemon killed
        here is started again on its port, which a harness beside it must
        not pick meanwhile."""
        for _ in range(100):
            ports, locks = free_ports(n), []
            for p in ports:
                lock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    lock.bind(f"\0ringd-test-port-{p}")
                except OSError:
                    lock.close()
                    break
                locks.append(lock)
            if len(locks) == n:
                self._port_locks = locks
                return ports
            for lock in locks:
                lock.close()
        raise RuntimeError(f"no {n} free ports that no other test holds after 100 tries")

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
        timeout = scaled(timeout)
        why = wait_accepting(self.daemons[i], self.sockets[i], time.monotonic() + timeout)
        assert why is None, f"ringd h{i} {why} ({timeout:.0f} s):\n" + self.tail(i)

    def kill(self, i, sig=signal.SIGKILL):
        """Kills host i: its daemon (sig) and its training processes (SIGKILL)."""
        for r in self.ranks[i * self.local:(i + 1) * self.local]:
            if r is not None and r.poll() is None:
                r.kill()
                r.wait()
        d = self.daemons[i]
        if d is not None and d.poll() is None:
            d.send_signal(sig)
            d.wait(timeout=scaled(20))
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
                code = d.wait(timeout=scaled(20))
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
                             capture_output=True, text=True, timeout=scaled(timeout))
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
            env = dict(os.environ, RINGD_LOCAL_RANK=str(k), ELASTIC_RANK_STOP=self.stop_file)
            self.ranks[pid] = subprocess.Popen(
                self.wrap(i) + [self.rank_bin, self.sockets[i], str(pid), str(steps),
                                self.rank_logs[pid], str(step_ms), str(round(scaled(deadline_s)))],
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

    def finish(self, hosts, ahead=100, timeout=120):
        """Ends a run of training processes started with more steps than
        the test needs (10**9): each stops at the step ahead steps past the
        furthest any has run, which finish() writes to their stop file.
        Then checks the run (check_run()) and returns its schedule. The
        run's length is the test's, not a count of steps that a fast
        machine may finish before the test's faults are over."""
        top = max((int(e[2][0]) for i in range(len(self.ranks)) for e in self.rank_events(i)
                   if e[1] == "ok"), default=0)
        steps = top + ahead
        tmp = self.stop_file + ".new"
        with open(tmp, "w") as f:
            f.write(f"{steps}\n")
        os.rename(tmp, self.stop_file)
        return self.check_run(hosts, steps, timeout)

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
        timeout = scaled(timeout)
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
        timeout = scaled(timeout)
        deadline = time.monotonic() + timeout
        while True:
            for e in self.rank_events(i):
                if e[0] >= after_ms and pred(e):
                    return e
            assert time.monotonic() < deadline, (
                f"no such event of rank h{i} in {timeout:.0f} s; its last ones:\n"
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
            outcomes[(rc, outcome_shape(text))] += 1
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


def outcome_shape(text):
    """A message without what differs from one collective to the next (its
    number, how long a host was away), to count outcomes by kind."""
    text = re.sub(r"#\d+", "#N", text)
    return re.sub(r"\d+(\.\d+)? ?m?s\b", "T", text)


# ---- the logs of a long run: every process, every call, every membership ----

class Call:
    """One call of a training process: when it returned (ms), its number N
    in the process, its code and message, the membership it was made for
    (tag: (epoch, hosts mask, ready), from the "members" line before it, or
    None) and, for a step that ran, (step, mask, nonces)."""
    __slots__ = ("t", "n", "rc", "text", "line", "tag", "ok", "proc")

    def __init__(self, t, n, rc, text, line, tag, proc):
        self.t, self.n, self.rc, self.text, self.line = t, n, rc, text, line
        self.tag, self.ok, self.proc = tag, None, proc


class Process:
    """One training process: an ID's life from its "start" line to its exit."""

    def __init__(self, ident, pid, t):
        self.id, self.pid, self.t0 = ident, pid, t
        self.calls, self.wrong, self.end = [], [], None

    def __repr__(self):
        return f"process {self.id} (pid {self.pid})"


class RankLog:
    """The log of training process ID (elastic_rank with
    $ELASTIC_RANK_MEMBERS: its processes one after another), read as it
    grows: update() parses what was appended since the last time."""

    def __init__(self, path, ident):
        self.path, self.id = path, ident
        self.offset, self.rest, self.procs, self.tag = 0, b"", [], None

    def update(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return
        self.offset += len(data)
        lines = (self.rest + data).split(b"\n")
        self.rest = lines.pop()
        for line in lines:
            self._parse(line.decode(errors="replace"))

    def _parse(self, line):
        parts = line.split(" ", 2)
        if len(parts) < 2 or not parts[0].isdigit():
            return
        t, kind, rest = int(parts[0]), parts[1], parts[2] if len(parts) > 2 else ""
        if kind == "start":
            self.procs.append(Process(self.id, int(rest.split()[0]), t))
            self.tag = None
            return
        if not self.procs:
            self.procs.append(Process(self.id, None, t))
        p = self.procs[-1]
        if kind == "members":
            epoch, live, ready = rest.split()
            self.tag = (int(epoch), int(live, 16), int(ready))
        elif kind == "call":
            m = CALL.match(line)
            if m:
                p.calls.append(Call(t, int(m[2]), int(m[3]), m[4], line, self.tag, p))
        elif kind == "ok" and p.calls:
            f = rest.split()
            if len(f) >= 5:
                p.calls[-1].ok = (int(f[0]), int(f[1], 16),
                                  tuple(int(x, 16) for x in f[4].split(",")))
        elif kind == "wrong":
            p.wrong.append((t, line))
        elif kind in ("closed", "done", "deadline"):
            p.end = (t, kind, rest)


def bits(mask):
    return [h for h in range(64) if mask >> h & 1]


class Violation:
    def __init__(self, t, what, lines):
        self.t, self.what, self.lines = t, what, lines

    def __str__(self):
        return f"{self.what}:\n" + "\n".join(f"  {l}" for l in self.lines)


class CallCheck:
    """What check_calls() found: violations (each with the time it happened)
    and counts."""

    def __init__(self):
        self.violations, self.counts = [], collections.Counter()
        self.outcomes, self.exempt = collections.Counter(), collections.Counter()
        self.memberships = set()
        self.uncompared = collections.Counter()

    def violation(self, t, what, *lines):
        self.violations.append(Violation(t, what, list(lines)))


def check_calls(logs, min_hosts, local_clients=1, final=True, excused=None):
    """Checks the calls of every process in logs (RankLogs, each updated):

    - no wrong result (elastic_rank checks each sum and logs "wrong");
    - every step that ran names, in its nonces, the very call of each of
      its processes, and each of those calls got that same success, or one
      of the two answers that may differ (exempt()): one collective, one
      outcome;
    - never two rings: every step ran on at least min_hosts hosts, on the
      hosts of the membership its calls were made for (the daemon's, from
      the "members" line), every call of it was made for the same
      membership epoch, and each membership epoch ran on one set of hosts;
    - one outcome for every call: the calls that the processes of a
      membership made for it are the ring's collectives in the same order,
      from the call after the resize that made it (or, where a process
      joined later, as the steps that ran pair them), and each gets the
      same code and message on every process, but for exempt() ones.

    Two failures that differ are let be where excused(call, since) (since:
    when the process made the call, at the latest) names a reason for one
    of them; a success is never excused. Without final, calls not logged
    yet are left for a later check. Returns a CallCheck."""
    r = CallCheck()
    procs = [p for log in logs for p in log.procs]
    by_pid = {(p.id, p.pid): p for p in procs}

    def host_mask(mask):
        return sum(1 << (i // local_clients) for i in bits(mask))

    for p in procs:
        for t, line in p.wrong:
            r.violation(t, f"a wrong result on {p}", line)
        r.counts["calls"] += len(p.calls)
        r.counts["processes"] += 1

    # Steps that ran, by the calls they were summed from.
    steps = {}
    for p in procs:
        for call in p.calls:
            if call.ok is not None:
                steps.setdefault(call.ok[2], []).append(call)
    epoch_masks = collections.defaultdict(set)
    for key, oks in steps.items():
        first = oks[0]
        step, mask, _ = first.ok
        r.counts["steps run"] += 1
        hosts = host_mask(mask)
        if bin(hosts).count("1") < min_hosts:
            r.violation(first.t, f"step {step} ran on {bin(hosts).count('1')} hosts, fewer than "
                        f"min_hosts {min_hosts}", first.line)
        for ident, nonce in zip(bits(mask), key):
            q = by_pid.get((ident, nonce >> 24))
            n = nonce & 0xffffff
            if q is None or n >= len(q.calls):
                if q is None and final:
                    r.violation(first.t, f"step {step} names a call of process {ident} (pid "
                                f"{nonce >> 24}) that never logged", first.line)
                elif q is not None and q.end is not None:
                    r.counts["steps with a process that died before its answer"] += 1
                continue
            qc = q.calls[n]
            if qc.ok is not None and qc.ok[2] == key:
                if qc.tag and first.tag and qc.tag[0] != first.tag[0]:
                    r.violation(max(qc.t, first.t), f"step {step} ran as calls made for two "
                                f"memberships (epochs {first.tag[0]} and {qc.tag[0]})",
                                first.line, qc.line)
            elif exempt(qc.rc, qc.text):
                r.exempt["a step's success on one process, " + exempt_kind(qc)] += 1
            elif qc.rc == 0 and qc.ok is None and not final:
                continue
            else:
                r.violation(max(qc.t, first.t),
                            f"step {step}: a success on {first.proc}, another outcome for the "
                            f"same call on {q}", first.line, qc.line)
        if first.tag:
            r.memberships.add(first.tag[:2])
            epoch_masks[first.tag[0]].add(mask)
            if host_mask(mask) != first.tag[1]:
                r.violation(first.t, f"step {step} ran on hosts {host_mask(mask):#x}, while the "
                            f"membership its calls were made for is {first.tag[1]:#x} "
                            f"(epoch {first.tag[0]})", first.line)
    for epoch, masks in epoch_masks.items():
        if len(masks) > 1:
            r.violation(0, f"membership epoch {epoch} ran steps on different sets of processes: "
                        + ", ".join(f"{m:#x}" for m in sorted(masks)))

    # Call by call, within each membership of at least min_hosts hosts.
    seqs = collections.defaultdict(dict)
    first_of = {}
    uncompared = {}
    for p in procs:
        first_of.setdefault(p.id, p)
        for call in p.calls:
            if call.tag is None:
                uncompared[id(call)] = "made before any membership was logged"
                continue
            epoch, live, _ = call.tag
            if bin(live).count("1") < min_hosts:
                uncompared[id(call)] = "made for a membership of fewer than min_hosts hosts"
                continue
            if not live >> (p.id // local_clients) & 1:
                uncompared[id(call)] = "made for a membership without its own host"
                continue
            # Epoch 0 is the configured ring: a daemon that restarted has it
            # until its first lap, which is not the ring of the run's start.
            if epoch == 0 and first_of[p.id] is not p:
                uncompared[id(call)] = "made for a restarted daemon's configured ring"
                continue
            uncompared[id(call)] = "with no other process of its membership to pair it with"
            seqs[(epoch, live)].setdefault(p, []).append(call)
    compared, failed_alike, exempted = set(), set(), {}
    splits = collections.defaultdict(list)
    outcome_of = {}

    def excuse(call):
        if excused is None or call.rc == 0:
            return None
        calls = call.proc.calls
        since = calls[call.n - 1].t if 0 < call.n <= len(calls) else call.proc.t0
        return excused(call, since)
    for tag, by_proc in seqs.items():
        # A call made for the membership before, after the daemon had
        # agreed on this one, takes no number: it is answered at once with
        # this membership's resize, which the other processes got for their
        # last call before it. It stands first, and pairs with nothing.
        made = {resize_message(p.calls[seq[0].n - 1]) for p, seq in by_proc.items()
                if seq[0].n > 0 and p.calls[seq[0].n - 1].rc == RINGD_ERESIZED}
        for p, seq in by_proc.items():
            first, before = seq[0], p.calls[seq[0].n - 1] if seq[0].n > 0 else None
            if (first.rc == RINGD_ERESIZED and resize_message(first) in made
                    and (before is None or resize_message(before) != resize_message(first))):
                r.counts["calls answered at once for the membership before"] += 1
                uncompared[id(first)] = "made for the membership before, answered at once"
                del seq[0]
        by_proc = {p: seq for p, seq in by_proc.items() if seq}
        pos = {id(call): i for seq in by_proc.values() for i, call in enumerate(seq)}
        # The steps that ran pair calls of two processes exactly.
        pairs = collections.defaultdict(set)
        for seq in by_proc.values():
            for call in seq:
                key = call.ok[2] if call.ok else None
                if key is None:
                    continue
                for other in steps.get(key, ()):
                    if other.proc is not call.proc and id(other) in pos:
                        pairs[(call.proc, other.proc)].add(pos[id(other)] - pos[id(call)])
        procs_in = list(by_proc)
        for i, a in enumerate(procs_in):
            for b in procs_in[i + 1:]:
                sa, sb = by_proc[a], by_proc[b]
                offsets = pairs.get((a, b), set())
                if len(offsets) > 1:
                    r.violation(sa[-1].t, f"membership epoch {tag[0]}: {a} and {b} ran steps "
                                f"out of step (their calls pair with offsets {sorted(offsets)})")
                    continue
                if offsets:
                    d = offsets.pop()
                elif entered_at_start(sa[0]) and entered_at_start(sb[0]):
                    d = 0
                else:
                    r.counts["pairs of processes of a membership with nothing to pair them"] += 1
                    continue
                for k, ca in enumerate(sa):
                    if not 0 <= k + d < len(sb):
                        continue
                    cb = sb[k + d]
                    compared.add(id(ca))
                    compared.add(id(cb))
                    if exempt(ca.rc, ca.text) or exempt(cb.rc, cb.text):
                        if (ca.rc, ca.text) != (cb.rc, cb.text):
                            for x in (ca, cb):
                                if exempt(x.rc, x.text):
                                    exempted[id(x)] = exempt_kind(x)
                        continue
                    if ca.rc == 0 and cb.rc == 0:
                        if (ca.ok and cb.ok and ca.ok[2] != cb.ok[2]
                                or final and bool(ca.ok) != bool(cb.ok)):
                            r.violation(max(ca.t, cb.t), f"membership epoch {tag[0]}: calls "
                                        "paired as one collective are not", ca.line, cb.line)
                    elif (ca.rc, ca.text) != (cb.rc, cb.text):
                        why = (excuse(ca) or excuse(cb)) if ca.rc < 0 and cb.rc < 0 else None
                        if why:
                            for x in (ca, cb):
                                if excuse(x):
                                    exempted[id(x)] = why
                            continue
                        splits[tag].append((ca, cb))
                    elif ca.rc < 0:
                        failed_alike.update((id(ca), id(cb)))
                        for x in (ca, cb):
                            outcome_of[id(x)] = (x.rc, outcome_shape(x.text))
    # One violation for each collective split: the pairs of calls that
    # differ, each pair's calls returned within 10 s of the first's.
    for tag, pairs_ in splits.items():
        pairs_.sort(key=lambda p: min(p[0].t, p[1].t))
        groups = []
        for ca, cb in pairs_:
            if groups and min(ca.t, cb.t) - groups[-1][0] < 10000:
                groups[-1][1].update((ca, cb))
            else:
                groups.append((min(ca.t, cb.t), {ca, cb}))
        for _, calls in groups:
            calls = sorted(calls, key=lambda x: (x.proc.id, x.t))
            kind = ("a success on one and an error on another" if len({x.rc == 0 for x in calls})
                    > 1 else "different outcomes")
            r.violation(max(x.t for x in calls), f"membership epoch {tag[0]} (hosts "
                        f"{tag[1]:#x}): one collective, {kind}",
                        *[f"{x.proc}: {x.line}" for x in calls])
    for kind in exempted.values():
        r.exempt["an answer that differs from another rank's: " + kind] += 1
    for outcome in outcome_of.values():
        r.outcomes[outcome] += 1
    r.counts["calls compared"] = len(compared)
    failed = [call for p in procs for call in p.calls if call.rc < 0]
    r.counts["failed calls"] = len(failed)
    r.counts["failed calls alike on the ranks compared"] = len(failed_alike)
    for call in failed:
        if id(call) not in compared:
            r.uncompared["failed calls " + uncompared[id(call)]] += 1
    return r


def entered_at_start(call):
    """Whether a process's first call for a membership is that membership's
    first collective: the process's first call, or the one after the resize
    that made the membership (a call made for the old membership after the
    daemon agreed on the new one fails at once, for the old)."""
    calls = call.proc.calls
    k = call.n if call.n < len(calls) and calls[call.n] is call else calls.index(call)
    return k == 0 or calls[k - 1].rc == RINGD_ERESIZED


def resize_message(call):
    """What a RINGD_ERESIZED answer says of the resize, without the label of
    the collective it failed ("allreduce failed: ")."""
    return call.text.split(" failed: ", 1)[-1]


def exempt_kind(call):
    return "RINGD_ECLOSED" if call.rc == RINGD_ECLOSED else "outcome unknown"
