"""The nemesis (issue 25): an elastic ring of five hosts under random faults.

Five hosts on a namespace testbed of their own (test_nemesis.sh: $TESTBED,
addresses in $TB_NET.0/24), one ringd each (min_hosts 3, evict_after 3 s,
heartbeat_timeout 1 s, collective_timeout 6 s) and one training process
each (elastic_rank) that loops allreduce, every call with inputs of its own
and every result checked. For $RINGD_NEMESIS_S seconds (120 by default)
faults come one after another from a seed ($RINGD_TEST_SEED replays the
schedule; the seed is printed), each bounded in time and healed before the
next quiet gap, sometimes two at once (a second one starting while the
first lasts, on other hosts):

  partition   the hosts split in two (1 or 2 against the rest): each side
              drops, silently, everything from the other
  asym        one host cannot connect to another's ring port (or two such
              pairs), every other direction works: an asymmetric cut
  flap        a host's switch port down, then up
  kill        SIGKILL of a daemon (its process gets RINGD_ECLOSED and
              exits), restarted with a new process after a while
  term        the same with SIGTERM (the daemon leaves the ring first)
  freeze      SIGSTOP of a daemon short of evict_after (up to 3 s)
  freeze-long SIGSTOP past heartbeat_timeout + evict_after (4.5 to 8 s)
  reload      a reloadable key changed in the file, SIGHUP to one or every
              daemon
  leave       ringctl leave on a host, ringctl join after a while

Cuts are ip rules in the receiving host's namespace (its `local` rule moved
behind them, so that they see what arrives for it); tc filters and
nftables are not needed.

What is checked, every 30 s and at the end (cluster.py, check_calls): no
wrong sum; each step's success names the very call of each process it was
summed from, and those calls got that success (or RINGD_ECLOSED, or
"outcome unknown"); never two rings (each step ran on at least min_hosts
hosts, on the membership its calls were made for, one set of hosts per
membership epoch); one outcome for every call of a membership on every
process of it, but for those two answers and for a failure on a host that
left the ring while the call ran (ringctl leave, SIGTERM: PROTOCOL.md,
Outcomes, "a host that has left the ring ... its failures go back at
once, as it saw them").

And liveness: whenever the hosts that are up and can reach each other in
ring order include min_hosts of them, collectives complete. From the
faults in force the test knows at every moment which rings of min_hosts
hosts or more are possible (the largest ones: those the daemons should
come to); while the same ones stay possible, the longest time without a
completed collective must stay within evict_after + heartbeat_timeout +
3 s. That time across faults that changed which rings were possible (a
kill while the others close over a cut host) is reported too, unchecked.

At the end, with every fault healed, the ring of five runs again and every
process stops at the same step with the same model. A violation prints
the event log around it and the daemons' logs of that time; the run stops
at the first one unless $RINGD_NEMESIS_KEEP_GOING is set.
"""

import collections
import datetime
import heapq
import itertools
import os
import random
import signal
import subprocess
import time

from cluster import Cluster, RankLog, check_calls, now_ms
from timing import duration, scaled

TESTBED = os.environ.get("TESTBED", "")
NET = os.environ.get("TB_NET", "198.18.0")
HOSTS = 5
MIN_HOSTS = 3
# The protocol's timings and the bounds made of them, as written for a
# machine shared two ways, stretched on a busier one (tests/timing.py).
EVICT_S = scaled(3)
HEARTBEAT_TIMEOUT_S = scaled(1)
# The rule: whenever min_hosts hosts can reach each other in ring
# order for evict_after (after heartbeat_timeout has told the others that a
# host is gone) plus a few seconds, collectives run.
FEW_S = scaled(3)
LIVENESS_S = EVICT_S + HEARTBEAT_TIMEOUT_S + FEW_S
PORT = 7700
STEP_MS = 10
CHECK_EVERY_S = 30
# The run stops at the first violation, unless $RINGD_NEMESIS_KEEP_GOING
# is set: then it goes on to the end and reports them all.
KEEP_GOING = bool(os.environ.get("RINGD_NEMESIS_KEEP_GOING"))
RELOADABLE = {"segment_size": ["4KiB", "64KiB", "1MiB"],
              "fusion_threshold": ["0", "64KiB", "4MiB"],
              "backoff_max": ["500ms", "1s", "2s"]}
CONFIG = {"min_hosts": str(MIN_HOSTS),
          "evict_after": duration(3),
          "heartbeat_interval": duration(0.25),
          "heartbeat_timeout": duration(1),
          "collective_timeout": duration(6),
          "connect_timeout": duration(1),
          "backoff_max": duration(1),
          "segment_size": "1MiB",
          "fusion_threshold": "4MiB"}


def ip(*args, check=True):
    out = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and out.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {out.stderr.strip()}")
    return out.returncode


class Net:
    """The testbed's links, and cuts in them: a cut is an ip rule in the
    receiving host's namespace that drops, silently, what comes from one
    host (all of it, or only what goes to the ring port: new connections
    to it and what is sent on them)."""

    def __init__(self):
        self.br = f"{TESTBED}-br"
        self.ns = [f"{TESTBED}-h{i}" for i in range(HOSTS)]
        self.addr = [f"{NET}.{i + 1}" for i in range(HOSTS)]
        self.prio = itertools.count(100)

    def setup(self):
        # Local delivery is decided by the rule `lookup local` at priority
        # 0, before any other: moved to 1000, the cuts (100 and up) come
        # first and see what arrives for this host.
        for ns in self.ns:
            ip("-n", ns, "rule", "add", "pref", "1000", "lookup", "local")
            ip("-n", ns, "rule", "del", "pref", "0")

    def drop(self, frm, to, ring_port_only=False):
        prio = str(next(self.prio))
        args = ["-n", self.ns[to], "rule", "add", "from", f"{self.addr[frm]}/32", "iif", "eth0"]
        if ring_port_only:
            args += ["ipproto", "tcp", "dport", str(PORT)]
        ip(*args, "prio", prio, "blackhole")
        return (to, prio)

    def undrop(self, rule):
        ip("-n", self.ns[rule[0]], "rule", "del", "prio", rule[1], check=False)

    def port(self, h, up):
        ip("-n", self.br, "link", "set", f"h{h}", "up" if up else "down")


class World:
    """What the faults have done, and from it whether a ring of min_hosts
    hosts is possible: hosts up (daemon running, not frozen, not left) of
    which each can connect to the next in ring order. timeline holds (ms,
    that ring or None) at every change."""

    def __init__(self):
        self.down = {h: set() for h in range(HOSTS)}
        self.cuts = {}
        self.timeline = []

    def connects(self, a, b):
        return not any((a, b) in pairs for pairs in self.cuts.values())

    def rings(self):
        """The rings of min_hosts hosts or more that are possible now and
        not part of a larger one: what the daemons should come to."""
        up = [h for h in range(HOSTS) if not self.down[h]]
        found = [set(s) for size in range(len(up), MIN_HOSTS - 1, -1)
                 for s in itertools.combinations(up, size)
                 if all(self.connects(s[k], s[(k + 1) % size]) for k in range(size))]
        return frozenset(tuple(sorted(s)) for s in found if not any(s < t for t in found))

    def changed(self):
        r = self.rings()
        if not self.timeline or self.timeline[-1][1] != r:
            self.timeline.append((now_ms(), r))


class Nemesis:
    def __init__(self, c, net, rnd, config_path, t0):
        self.c, self.net, self.rnd, self.config_path, self.t0 = c, net, rnd, config_path, t0
        self.world = World()
        self.events = []  # (ms, text)
        self.survived = collections.Counter()
        self.busy = set()  # hosts of the faults in progress
        self.pending = []  # (monotonic due, seq, action)
        self.seq = itertools.count()
        self.config = dict(CONFIG)
        self.reloads = collections.Counter()  # host -> SIGHUPs sent
        self.rank_restarts = 0
        self.problems = []  # (ms, text): daemons or processes that ended unasked
        self.expected_exit = set()  # hosts whose daemon is down on purpose
        self.left = collections.defaultdict(list)  # host -> [ms from, ms to or None]

    # ---- the event log ----

    def note(self, text):
        t = now_ms()
        self.events.append((t, text))
        print(f"nemesis: {(t - self.t0) / 1000:8.2f} s  {text}", flush=True)
        self.world.changed()

    def after(self, delay, action):
        heapq.heappush(self.pending, (time.monotonic() + delay, next(self.seq), action))

    # ---- faults: each applies itself and schedules its own heal ----

    def free_host(self, alive=False):
        hosts = [h for h in range(HOSTS) if h not in self.busy
                 and (not alive or h not in self.expected_exit)]
        return self.rnd.choice(hosts) if hosts else None

    def partition(self):
        side = sorted(self.rnd.sample(range(HOSTS), self.rnd.choice([1, 2, 2])))
        rest = [h for h in range(HOSTS) if h not in side]
        dur = self.rnd.uniform(1, 10)
        rules = []
        for a in side:
            for b in rest:
                rules += [self.net.drop(a, b), self.net.drop(b, a)]
        key = object()
        self.world.cuts[key] = {(a, b) for a in side for b in rest} | {
            (b, a) for a in side for b in rest}
        self.note(f"partition: {side} | {rest} for {dur:.1f} s")

        def heal():
            for r in rules:
                self.net.undrop(r)
            del self.world.cuts[key]
            self.survived["partition"] += 1
            self.note(f"heal partition {side} | {rest}")
        self.after(dur, heal)

    def asym(self):
        pairs = []
        for _ in range(self.rnd.choice([1, 1, 2])):
            a = self.rnd.randrange(HOSTS)
            b = (a + 1) % HOSTS if self.rnd.random() < 0.7 else self.rnd.choice(
                [h for h in range(HOSTS) if h != a])
            if (a, b) not in pairs:
                pairs.append((a, b))
        dur = self.rnd.uniform(2, 12)
        rules = [self.net.drop(a, b, ring_port_only=True) for a, b in pairs]
        key = object()
        self.world.cuts[key] = set(pairs)
        self.note("asym: " + ", ".join(f"h{a} cannot connect to h{b}" for a, b in pairs)
                  + f" for {dur:.1f} s")

        def heal():
            for r in rules:
                self.net.undrop(r)
            del self.world.cuts[key]
            self.survived["asym"] += 1
            self.note("heal asym " + ", ".join(f"h{a}->h{b}" for a, b in pairs))
        self.after(dur, heal)

    def flap(self):
        h = self.free_host()
        if h is None:
            return
        dur = self.rnd.uniform(0.3, 6)
        self.busy.add(h)
        self.net.port(h, False)
        key = object()
        self.world.cuts[key] = {(h, x) for x in range(HOSTS)} | {(x, h) for x in range(HOSTS)}
        self.note(f"flap: h{h}'s switch port down for {dur:.1f} s")

        def heal():
            self.net.port(h, True)
            del self.world.cuts[key]
            self.busy.discard(h)
            self.survived["flap"] += 1
            self.note(f"heal flap: h{h}'s port up")
        self.after(dur, heal)

    def stop_daemon(self, kind, sig):
        h = self.free_host(alive=True)
        if h is None:
            return
        dur = self.rnd.uniform(0.2, 8 if kind == "kill" else 5)
        self.busy.add(h)
        self.expected_exit.add(h)
        if kind == "term":
            self.left[h].append([now_ms(), None])
        d = self.c.daemons[h]
        d.send_signal(sig)
        try:
            code = d.wait(timeout=scaled(20))
        except subprocess.TimeoutExpired:
            d.kill()
            code = d.wait()
            self.problems.append((now_ms(), f"h{h}'s daemon did not exit within 20 s of {kind}"))
        self.world.down[h].add(kind)
        self.note(f"{kind}: h{h}'s daemon (exit {code}), back in {dur:.1f} s")

        def heal():
            r = self.c.ranks[h]
            if r is not None:
                try:
                    r.wait(timeout=scaled(10))
                except subprocess.TimeoutExpired:
                    self.problems.append((now_ms(), f"h{h}'s process still runs 10 s after its "
                                          "daemon was gone"))
                    r.kill()
                    r.wait()
            self.c.start(h)
            self.c.start_rank(h, 10**9, step_ms=STEP_MS, deadline_s=self.rank_deadline)
            self.expected_exit.discard(h)
            self.world.down[h].discard(kind)
            if kind == "term":
                self.left[h][-1][1] = now_ms()
            self.busy.discard(h)
            self.survived[kind] += 1
            self.note(f"restart: h{h}'s daemon and a new process")
        self.after(dur, heal)

    def kill(self):
        self.stop_daemon("kill", signal.SIGKILL)

    def term(self):
        self.stop_daemon("term", signal.SIGTERM)

    def freeze(self, long):
        h = self.free_host(alive=True)
        if h is None:
            return
        kind = "freeze-long" if long else "freeze"
        dur = (self.rnd.uniform(EVICT_S + HEARTBEAT_TIMEOUT_S + scaled(0.5), scaled(8)) if long
               else self.rnd.uniform(0.2, EVICT_S))
        self.busy.add(h)
        self.c.daemons[h].send_signal(signal.SIGSTOP)
        self.world.down[h].add(kind)
        self.note(f"{kind}: h{h}'s daemon stopped for {dur:.1f} s")

        def heal():
            self.c.daemons[h].send_signal(signal.SIGCONT)
            self.world.down[h].discard(kind)
            self.busy.discard(h)
            self.survived[kind] += 1
            self.note(f"heal {kind}: h{h} continues")
        self.after(dur, heal)

    def freeze_short(self):
        self.freeze(False)

    def freeze_long(self):
        self.freeze(True)

    def reload(self):
        key = self.rnd.choice(sorted(RELOADABLE))
        value = self.rnd.choice([v for v in RELOADABLE[key] if v != self.config[key]])
        self.config[key] = value
        write_config(self.config_path, self.config)
        every = self.rnd.random() < 0.3
        hosts = [h for h in range(HOSTS) if h not in self.expected_exit and
                 (every or h not in self.busy)]
        if not every and hosts:
            hosts = [self.rnd.choice(hosts)]
        for h in hosts:
            self.c.daemons[h].send_signal(signal.SIGHUP)
            self.reloads[h] += 1
        self.survived["reload"] += 1
        self.note(f"reload: {key}: {value}, SIGHUP to " + ", ".join(f"h{h}" for h in hosts))

    def leave(self):
        h = self.free_host(alive=True)
        if h is None:
            return
        dur = self.rnd.uniform(0.5, 8)
        self.busy.add(h)
        self.left[h].append([now_ms(), None])
        code, out = self.c.ringctl(h, "leave")
        self.world.down[h].add("leave")
        self.note(f"leave: ringctl leave on h{h} (exit {code}: {out.strip()[:120]}), "
                  f"join in {dur:.1f} s")

        def heal():
            code, out = self.c.ringctl(h, "join")
            self.left[h][-1][1] = now_ms()
            self.world.down[h].discard("leave")
            self.busy.discard(h)
            self.survived["leave"] += 1
            self.note(f"join: ringctl join on h{h} (exit {code}: {out.strip()[:120]})")
        self.after(dur, heal)

    KINDS = [("partition", 3), ("asym", 2), ("flap", 2), ("kill", 2), ("term", 1),
             ("freeze_short", 2), ("freeze_long", 2), ("reload", 1), ("leave", 2)]

    def excused(self, call, since):
        """Why a failure of this call may differ from the other ranks': its
        host left the ring while it ran. PROTOCOL.md, Outcomes: a host that
        has left hears no lap until it joins again, and its failures go
        back as it saw them (a stopped daemon leaves first too)."""
        for a, b in self.left[call.proc.id]:
            if a <= call.t and (b is None or since <= b):
                return "its host left the ring while the call ran (ringctl leave, SIGTERM)"
        return None

    def one_fault(self):
        kinds, weights = zip(*self.KINDS)
        getattr(self, self.rnd.choices(kinds, weights)[0])()

    # ---- the run ----

    def watch(self):
        """Daemons that exit and processes that end without being asked."""
        for h in range(HOSTS):
            d = self.c.daemons[h]
            if h not in self.expected_exit and d is not None and d.poll() is not None:
                self.expected_exit.add(h)
                self.problems.append((now_ms(), f"h{h}'s daemon exited by itself "
                                      f"(status {d.returncode}):\n" + self.c.tail(h, 30)))
                self.note(f"h{h}'s daemon exited by itself (status {d.returncode})")
            r = self.c.ranks[h]
            if r is None or r.poll() is None or h in self.expected_exit:
                continue
            if r.returncode == 3:
                # Its session ended while the daemon lives (a membership
                # query that timed out): a new process takes its place.
                self.rank_restarts += 1
                last = self.c.rank_events(h)[-1:]
                self.note(f"h{h}'s process exited 3 ({last}), started again")
                self.c.start_rank(h, 10**9, step_ms=STEP_MS, deadline_s=self.rank_deadline)
            elif r.returncode != 3:
                self.expected_exit.add(h)
                self.problems.append((now_ms(), f"h{h}'s process exited {r.returncode}: "
                                      f"{self.c.rank_events(h)[-3:]}"))
                self.note(f"h{h}'s process exited {r.returncode}")

    def run(self, duration_s, check):
        end = time.monotonic() + duration_s
        next_fault = time.monotonic() + 2
        next_check = time.monotonic() + CHECK_EVERY_S
        while True:
            now = time.monotonic()
            while self.pending and self.pending[0][0] <= now:
                heapq.heappop(self.pending)[2]()
            if not self.pending and next_fault is None:
                gap = (self.rnd.uniform(8, 15) if self.rnd.random() < 0.15
                       else self.rnd.uniform(0.5, 4))
                next_fault = now + gap
            if next_fault is not None and now >= next_fault:
                if now >= end:
                    break
                self.one_fault()
                # Sometimes a second fault while the first lasts.
                if self.rnd.random() < 0.3 and self.pending:
                    first_heal = self.pending[0][0] - now
                    self.after(self.rnd.uniform(0, first_heal), self.one_fault)
                next_fault = None
            self.watch()
            if self.problems and not KEEP_GOING:
                break
            if now >= next_check:
                next_check = now + CHECK_EVERY_S
                if check() and not KEEP_GOING:
                    break
            time.sleep(0.05)
        self.heal_all()

    def heal_all(self):
        """Runs the heals still pending, now (a run cut short)."""
        while self.pending:
            action = heapq.heappop(self.pending)[2]
            if action.__name__ == "heal":
                action()


def write_config(path, config):
    """Rewrites the keys of path above its host list with config's values."""
    with open(path) as f:
        lines = f.read().splitlines()
    hosts = lines.index("hosts:")
    top = [l for l in lines[:hosts] if l.split(":")[0] not in config]
    top += [f"{k}: {v}" for k, v in config.items()]
    with open(path + ".new", "w") as f:
        f.write("\n".join(top + lines[hosts:]) + "\n")
    os.rename(path + ".new", path)


# ---- reporting ----

def log_time_ms(line):
    """The time of a daemon log line (its UTC timestamp), or None."""
    try:
        t = datetime.datetime.strptime(line[:23], "%Y-%m-%dT%H:%M:%S.%f")
    except ValueError:
        return None
    return int(t.replace(tzinfo=datetime.timezone.utc).timestamp() * 1000)


def daemon_lines(c, h, t0, t1, most=40):
    try:
        with open(c.logs[h], errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    keep, t = [], None
    for line in lines:
        t = log_time_ms(line) or t
        if t is not None and t0 <= t <= t1:
            keep.append(line)
    return keep[-most:]


def show(c, nemesis, what, t, detail=""):
    """Prints a violation at ms t: the faults around it and the daemons'
    logs of that time."""
    print(f"\nVIOLATION at {(t - nemesis.t0) / 1000:.2f} s: {what}\n{detail}")
    print("the faults from 30 s before to 5 s after:")
    for te, text in nemesis.events:
        if t - 30000 <= te <= t + 5000:
            print(f"  {(te - nemesis.t0) / 1000:8.2f} s  {text}")
    for h in range(HOSTS):
        print(f"h{h}'s daemon, 10 s before to 2 s after:")
        for line in daemon_lines(c, h, t - 10000, t + 2000):
            print(f"  h{h}| {line}")


def stalls(timeline, oks, t_from, t_to, whole=False):
    """The periods in [t_from, t_to] while the same rings of min_hosts or
    more were possible (or, with whole, while any was), each with its
    longest time without a completed collective: a list of (stall ms, its
    start, its end, the period's start, end)."""
    periods, start, rings = [], None, frozenset()
    for t, now in timeline + [(t_to, frozenset())]:
        t = min(max(t, t_from), t_to)
        if start is not None and (not now or not whole and now != rings):
            periods.append((start, t))
            start = None
        if now and start is None:
            start = t
        rings = now
    out = []
    for a, b in periods:
        times = [a] + [t for t in oks if a < t < b] + [b]
        gap = max(((y - x, x, y) for x, y in zip(times, times[1:])), default=(0, a, a))
        out.append((*gap, a, b))
    return out


def test_nemesis(tmp_path, monkeypatch):
    assert TESTBED, "run it through test_nemesis.sh (it makes the testbed)"
    env = os.environ.get("RINGD_TEST_SEED")
    seed = int(env, 0) if env else time.time_ns() ^ os.getpid() << 32
    duration = float(os.environ.get("RINGD_NEMESIS_S", "120"))
    print(f"nemesis: seed {seed} (RINGD_TEST_SEED={seed} replays the faults), "
          f"{duration:.0f} s of faults; liveness bound {LIVENESS_S:.1f} s", flush=True)
    rnd = random.Random(seed)
    monkeypatch.setenv("ELASTIC_RANK_MEMBERS", "1")
    net = Net()
    net.setup()
    c = Cluster(tmp_path, HOSTS, "", addresses=[f"{a}:{PORT}" for a in net.addr],
                wrap=lambda i: ["ip", "netns", "exec", net.ns[i]])
    write_config(c.config, CONFIG)
    stop = c.stop_file  # the step every process stops at, once written
    logs = [RankLog(c.rank_logs[i], i) for i in range(HOSTS)]
    nemesis = None
    try:
        t0 = now_ms()
        nemesis = Nemesis(c, net, rnd, c.config, t0)
        nemesis.rank_deadline = int(duration) + 900
        c.start_all()
        for i in range(HOSTS):
            c.start_rank(i, 10**9, step_ms=STEP_MS, deadline_s=nemesis.rank_deadline)
        c.wait_event(0, lambda e: e[1] == "ok" and int(e[2][0]) >= 20, 60)
        nemesis.t0 = t0 = now_ms()
        nemesis.world.changed()

        shown = set()

        def check(final=False):
            """Checks the calls so far; shows the violations not shown yet
            (at most 5 each time)."""
            for log in logs:
                log.update()
            r = check_calls(logs, MIN_HOSTS, final=final, excused=nemesis.excused)
            new = [v for v in r.violations if str(v) not in shown]
            for v in new[:5]:
                show(c, nemesis, v.what, v.t or now_ms(), str(v))
            shown.update(str(v) for v in new)
            return r if final else bool(r.violations)

        nemesis.run(duration, check)
        t_healed = now_ms()
        nemesis.note("every fault healed")
        violations = [text for _, text in nemesis.problems]
        for t, text in nemesis.problems:
            show(c, nemesis, text, t)

        # The ring of five runs again, and every process stops at one step.
        if not violations:
            deadline = time.monotonic() + 60
            while True:
                for log in logs:
                    log.update()
                back = [i for i in range(HOSTS) if any(
                    call.t > t_healed and call.ok and bin(call.ok[1]).count("1") == HOSTS
                    for call in log_calls(logs[i]))]
                if len(back) == HOSTS:
                    break
                if time.monotonic() > deadline:
                    violations.append(f"60 s after the last heal, only processes {back} ran a "
                                      "step on all five hosts")
                    show(c, nemesis, violations[-1], now_ms())
                    break
                nemesis.watch()
                time.sleep(0.2)
        t_end = now_ms()
        if not violations:
            top = max(call.ok[0] for log in logs for p in log.procs for call in p.calls
                      if call.ok)
            with open(str(stop) + ".new", "w") as f:
                f.write(f"{top + 50}\n")
            os.rename(str(stop) + ".new", stop)
            codes = c.wait_ranks(range(HOSTS), 120)
            if any(code != 0 for code in codes.values()):
                violations.append(f"the processes did not all stop at step {top + 50}: "
                                  f"exit codes {codes}")
                show(c, nemesis, violations[-1], now_ms())
            hashes = {i: [e[2][0] for e in c.rank_events(i) if e[1] == "done"][-1:]
                      for i in range(HOSTS)}
            if len({tuple(h) for h in hashes.values()}) != 1:
                violations.append(f"the processes end with different models: {hashes}")

        r = check(final=True)
        violations += [str(v) for v in r.violations]

        # Liveness.
        oks = sorted(call.t for log in logs for p in log.procs for call in p.calls
                     if call.rc == 0)
        found = stalls(nemesis.world.timeline, oks, t0, t_end)
        longest = max(found, default=(0, t0, t0, t0, t0))
        for gap, x, y, a, b in found:
            if gap > LIVENESS_S * 1000:
                what = (f"no collective completed for {gap / 1000:.1f} s (from "
                        f"{(x - t0) / 1000:.2f} s to {(y - t0) / 1000:.2f} s) while the same "
                        f"rings of {MIN_HOSTS} or more hosts were possible; "
                        f"bound {LIVENESS_S:.1f} s")
                violations.append(what)
                show(c, nemesis, what, y)
        # The same, across faults that changed which rings were possible.
        longest_any = max(stalls(nemesis.world.timeline, oks, t0, t_end, whole=True),
                          default=(0, t0, t0, t0, t0))

        # Reloads: each SIGHUP done, none refused.
        for h in range(HOSTS):
            with open(c.logs[h], errors="replace") as f:
                text = f.read()
            if "keeping the running configuration" in text:
                violations.append(f"h{h} refused a reload:\n" + "\n".join(
                    l for l in text.splitlines() if "keeping the running" in l))
            done = text.count("reload: done")
            if done < nemesis.reloads[h]:
                violations.append(f"h{h} got {nemesis.reloads[h]} SIGHUPs and did {done} reloads")

        # The figures.
        print("\nnemesis: seed", seed)
        print(f"nemesis: {(t_end - t0) / 1000:.0f} s, faults survived: "
              + ", ".join(f"{k} {v}" for k, v in sorted(nemesis.survived.items()))
              + f" ({sum(nemesis.survived.values())}); processes restarted on their own: "
              f"{nemesis.rank_restarts}")
        print("nemesis: " + ", ".join(f"{k} {v}" for k, v in r.counts.items()))
        print(f"nemesis: memberships that ran steps: {len(r.memberships)}")
        print("nemesis: wrong sums", sum(1 for v in r.violations if "wrong" in v.what),
              "; split outcomes", sum(1 for v in r.violations if "one collective" in v.what
                                       or "a success on" in v.what))
        print("nemesis: exempt answers: " + (", ".join(
            f"{k} {v}" for k, v in sorted(r.exempt.items())) or "none"))
        print("nemesis: not compared: " + (", ".join(
            f"{k} {v}" for k, v in sorted(r.uncompared.items())) or "none"))
        print("nemesis: failed calls with the same outcome as the other ranks', by kind "
              "(each process's call counted):")
        for (rc, text), k in sorted(r.outcomes.items(), key=lambda x: -x[1]):
            print(f"  {k:5d} x {rc} {text[:200]}")
        gap, x, y, a, b = longest
        print(f"nemesis: longest stall while the same rings of {MIN_HOSTS} or more were "
              f"possible: {gap / 1000:.2f} s (from {(x - t0) / 1000:.2f} s to "
              f"{(y - t0) / 1000:.2f} s), bound {LIVENESS_S:.1f} s")
        gap, x, y, a, b = longest_any
        print(f"nemesis: longest stall while some ring of {MIN_HOSTS} or more was possible "
              f"(across faults that changed which): {gap / 1000:.2f} s (from "
              f"{(x - t0) / 1000:.2f} s to {(y - t0) / 1000:.2f} s)")
        for gap, x, y, a, b in sorted(found, reverse=True)[:5]:
            print(f"  {gap / 1000:5.2f} s from {(x - t0) / 1000:.2f} s; faults then:")
            for te, text in nemesis.events:
                if x - 12000 <= te <= y:
                    print(f"      {(te - t0) / 1000:8.2f} s  {text}")
        assert not violations, (f"seed {seed}: {len(violations)} violations:\n"
                                + "\n".join(v[:2000] for v in violations[:10]))
    finally:
        if nemesis is not None:
            nemesis.heal_all()
        for d in c.daemons:
            if d is not None and d.poll() is None:
                d.send_signal(signal.SIGCONT)
        bad = c.stop_all()
        assert not bad, "daemons that did not exit cleanly:\n" + "\n".join(
            c.tail(i) for i in bad)


def log_calls(log):
    return [call for p in log.procs for call in p.calls]
