"""Running the processes of a job, one per rank, as one thing: their output
line by line with the rank in front, every exit seen at once, the first
failure stopping the others and named, signals passed on.

Used by ringd.launch; the standard library only (the launcher runs where
NumPy may be missing).

A Proc is one rank's process: a local one (its own session, so that
stopping it stops what it started) or the local end of a remote one (ssh,
ip netns exec ...), which ringd.launch starts with a small shell script on
the other side that reads signal names from its standard input and sends
them to the rank's process group, and stops it when the input closes.

supervise() waits on the processes' exits with pidfds (Linux 5.3; polling
every 50 ms where there are none) in the same loop that reads their
output, so a rank that fails is seen when it exits, not when the loop gets
round to it, and the others are stopped then.
"""

import collections
import os
import re
import selectors
import signal
import sys
import time

GRACE = 3.0  # seconds from SIGTERM to SIGKILL when stopping ranks
TAIL_LINES = 20  # last lines of a failed rank's output shown again at the end
# A rank's failure makes the others fail within milliseconds (ringd tells
# them at once), and which exit is seen first is down to scheduling and
# remote shells. So the launcher waits this long after the first failure
# before it names one, and blames the rank the others' errors name.
SETTLE = 0.5
_BLAMES = re.compile(r"\brank (\d+) \(pid \d+\) on host \S+ exited")


class Proc:
    """One rank's process. remote: it is the local end of a remote shell,
    which takes signals as their names on its standard input."""

    def __init__(self, rank, popen, remote=False):
        self.rank = rank
        self.popen = popen
        self.remote = remote
        self.status = None  # exit status once it exited
        self.exited_at = None
        self.stopped = False  # the launcher asked it to stop
        self.tail = collections.deque(maxlen=TAIL_LINES)

    @property
    def running(self):
        return self.status is None

    def signal(self, sig):
        """Sends sig to the rank's process group (a remote one through its
        shell); SIGKILL also ends the local end of a remote one."""
        if not self.running:
            return
        try:
            if self.remote:
                if sig != signal.SIGKILL:
                    self._tell(signal.Signals(sig).name[3:])
                else:
                    self.popen.kill()
            else:
                os.killpg(self.popen.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _tell(self, name):
        try:
            self.popen.stdin.write(name.encode() + b"\n")
            self.popen.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass

    def stop(self):
        """SIGTERM, and for a remote rank the end of its input, after which
        its shell kills what is left after GRACE seconds."""
        self.stopped = True
        self.signal(signal.SIGTERM)
        if self.remote and self.popen.stdin:
            try:
                self.popen.stdin.close()
            except OSError:
                pass


def early(proc):
    """What to add to a rank's exit to blame it for the others' failure."""
    return " while the others still needed it" if proc.status == 0 else ""


def status_text(status):
    if status < 0:
        try:
            return f"was killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"was killed by signal {-status}"
    return f"exited with status {status}"


def exit_code(status):
    """A shell's exit code for a process's status (128 + N for signal N)."""
    return status if status >= 0 else 128 - status


class _Output:
    """Copies one pipe of one rank to stdout or stderr, a whole line at a
    time, with the rank in front."""

    def __init__(self, proc, pipe, out, prefix):
        self.proc = proc
        self.fd = pipe.fileno()
        self.pipe = pipe
        self.out = out
        self.prefix = prefix
        self.partial = b""

    def read(self):
        """Copies what is there; False at the end of the pipe."""
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return True
        if not data:
            if self.partial:
                self._emit([self.partial + b"\n"])
                self.partial = b""
            return False
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        self._emit([line + b"\n" for line in lines])
        return True

    def _emit(self, lines):
        for line in lines:
            self.proc.tail.append(line.decode("utf-8", "replace").rstrip("\n"))
        self.out.write(b"".join(self.prefix + line for line in lines))
        self.out.flush()


def _culprit(failures, procs):
    """The rank to blame for failures (Procs in the order their exits were
    seen): the rank that the others' last error messages name, followed
    from one to the next, else the first seen. A rank named that exited
    with status 0 is the one: it left while the others still needed it."""
    by_rank = {p.rank: p for p in procs}
    chosen = failures[0]
    for _ in range(len(procs)):
        named = None
        for line in reversed(chosen.tail):
            m = _BLAMES.search(line)
            if m:
                named = by_rank.get(int(m.group(1)))
                break
        if named is None or named is chosen or named.status is None:
            break
        chosen = named
    return chosen


def _pidfd(pid):
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def supervise(procs, timeout=None, prefix=True, say=None):
    """Waits for every process of procs (each started with stdout and stderr
    pipes), copying their output with "[rank] " in front of each line. The
    first that fails (exits non-zero or is killed) stops the others at once
    (SIGTERM, SIGKILL after GRACE seconds); SIGINT, SIGTERM and SIGHUP of
    this process are passed on to every rank (a second one kills them).
    timeout: seconds after which every rank is stopped. say(text) reports
    what happens (default: stderr). Returns (status, failed): the exit code
    for the job (0, the failed rank's, 124 for the timeout, 128 + N for
    signal N) and the Proc that failed first, or None."""
    say = say or (lambda text: print(f"ringd.launch: {text}", file=sys.stderr, flush=True))
    sel = selectors.DefaultSelector()
    streams = 0
    for p in procs:
        for pipe, out in ((p.popen.stdout, sys.stdout.buffer), (p.popen.stderr, sys.stderr.buffer)):
            if pipe is None:
                continue
            os.set_blocking(pipe.fileno(), False)
            tag = f"[{p.rank}] ".encode() if prefix else b""
            sel.register(pipe, selectors.EVENT_READ, _Output(p, pipe, out, tag))
            streams += 1
        fd = _pidfd(p.popen.pid)
        if fd is not None:
            sel.register(fd, selectors.EVENT_READ, p)
    # Without pidfds, exits are found by polling.
    polling = len(sel.get_map()) < streams + len(procs)

    received = []

    def on_signal(signum, frame):
        received.append(signum)

    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        try:
            previous[sig] = signal.signal(sig, on_signal)
        except ValueError:  # not the main thread: no forwarding
            pass

    start = time.monotonic()
    deadline = None if timeout is None else start + timeout
    status, failed, kill_at, drain_until = 0, None, None, None
    failures, judge_at = [], None

    def ranks(ps):
        return f"rank{'s' if len(ps) > 1 else ''} {', '.join(str(p.rank) for p in ps)}"

    def stop_all(why, failed_too=()):
        nonlocal kill_at
        if kill_at is not None:
            return
        running = [p for p in procs if p.running]
        if failed_too:
            why += f"; {ranks(failed_too)} failed after it"
        if running:
            why += f"; stopping {ranks(running)}"
            for p in running:
                p.stop()
            kill_at = time.monotonic() + GRACE
        say(why)

    def reap(p):
        nonlocal judge_at
        code = p.popen.poll()
        if code is None:
            return
        p.status, p.exited_at = code, time.monotonic() - start
        if code != 0 and not status and not p.stopped:
            failures.append(p)
            if judge_at is None:
                judge_at = time.monotonic() + SETTLE

    def judge():
        nonlocal status, failed, judge_at
        judge_at = None
        if status:  # a signal or the deadline came first
            return
        failed = _culprit(failures, procs)
        # A rank that left early exited 0: the job's status is the first
        # failure's.
        status = exit_code(failed.status) or exit_code(failures[0].status)
        stop_all(f"rank {failed.rank} (pid {failed.popen.pid}) {status_text(failed.status)} "
                 f"after {failed.exited_at:.1f} s{early(failed)}",
                 sorted((p for p in failures if p is not failed), key=lambda p: p.rank))

    try:
        while True:
            for key, _ in sel.select(0.05):  # also the pace of signals and deadlines
                if isinstance(key.data, _Output):
                    if not key.data.read():
                        sel.unregister(key.fileobj)
                else:  # a pidfd: that process exited
                    sel.unregister(key.fileobj)
                    os.close(key.fileobj)
                    reap(key.data)
            if polling:
                for p in procs:
                    if p.running:
                        reap(p)
            now = time.monotonic()
            if judge_at is not None and (now >= judge_at or not any(p.running for p in procs)):
                judge()
            for sig in received:
                if not status:
                    status = 128 + sig
                    say(f"got {signal.Signals(sig).name}: passing it on to every rank")
                    for p in procs:
                        p.signal(sig)
                    kill_at = now + GRACE
                else:  # a second one
                    kill_at = now
            received.clear()
            if deadline is not None and now > deadline:
                deadline = None
                if not status:
                    status = 124
                stop_all(f"timed out after {timeout} s")
            if kill_at is not None and now >= kill_at:
                for p in procs:
                    p.signal(signal.SIGKILL)
                kill_at = now + GRACE  # and again, should one survive
            if not any(p.running for p in procs):
                # Every rank has exited: what is left in the pipes comes
                # now, unless something they started keeps them open.
                drain_until = drain_until or now + 2.0
                if now > drain_until or not any(
                    isinstance(k.data, _Output) for k in sel.get_map().values()
                ):
                    break
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        for key in list(sel.get_map().values()):
            if not isinstance(key.data, _Output):
                os.close(key.fileobj)
        sel.close()
        for p in procs:
            if p.popen.poll() is None:
                p.popen.kill()
            p.popen.wait()
            if p.status is None:
                p.status = p.popen.returncode
    return status, failed
