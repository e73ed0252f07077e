"""A ring of ringd daemons on this machine, and processes to use it.

For examples, tests and trying things out: LocalRing starts N daemons on
127.0.0.1 (free ports, a generated config and sockets in a temporary
directory) and stops them; the command line also starts the training
processes, one per rank, each with RINGD_SOCKET and RINGD_LOCAL_RANK set:

    python3 -m ringd.launch -n 4 -- python3 train.py --epochs 5

    with LocalRing(4) as ring:          # in Python
        env = ring.env(rank)            # os.environ plus RINGD_SOCKET, RINGD_LOCAL_RANK
        ...

The ringd binary is $RINGD_BIN, else the build tree of the source checkout
this package sits in (build/daemon/ringd), else the one installed with this
package, else `ringd` on $PATH. Daemons die with the process that started them
(PR_SET_PDEATHSIG), so none outlives a crashed test.
"""

import argparse
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_PKG_DIR = Path(__file__).resolve().parent

READY_TIMEOUT = 20.0  # daemon start to socket accepting
STOP_TIMEOUT = 15.0  # SIGTERM to exit


def find_ringd():
    """Path of the ringd binary to start, or raise FileNotFoundError."""
    env = os.environ.get("RINGD_BIN")
    if env:
        return env
    root = _PKG_DIR.parent.parent.parent
    cand = root / "build" / "daemon" / "ringd"
    if (root / "client" / "include" / "ringd.h").is_file() and cand.is_file():
        return str(cand)
    try:
        from . import _paths

        if os.path.isfile(_paths.RINGD):
            return _paths.RINGD
    except ImportError:
        pass
    found = shutil.which("ringd")
    if found:
        return found
    raise FileNotFoundError(
        "cannot find the ringd binary: build it (README), or set RINGD_BIN to its path"
    )


def free_ports(n):
    """n distinct free TCP ports on 127.0.0.1 (bound together, then released)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _die_with_parent():
    """preexec_fn: SIGKILL this child when the parent thread dies."""
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


class LocalRing:
    """hosts daemons h0..h{hosts-1} on 127.0.0.1, local_clients processes
    each; extra_yaml (complete lines) goes into the config's top level."""

    def __init__(self, hosts=4, local_clients=1, extra_yaml="", ringd_bin=None, keep=False):
        self.hosts = hosts
        self.local_clients = local_clients
        self.extra_yaml = extra_yaml
        self.ringd_bin = ringd_bin or find_ringd()
        self.keep = keep or bool(os.environ.get("RINGD_TEST_KEEP"))
        self.dir = None
        self.config = None
        self.sockets = []
        self.logs = []
        self.procs = []

    @property
    def size(self):
        return self.hosts * self.local_clients

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def write_config(self):
        # /tmp rather than $TMPDIR: socket paths must fit in 108 bytes.
        self.dir = tempfile.mkdtemp(prefix="ringd-py-", dir="/tmp")
        ports = free_ports(self.hosts)
        lines = [
            "# written by ringd.launch",
            "cluster: local",
            f"local_clients: {self.local_clients}",
        ]
        lines += [l for l in self.extra_yaml.splitlines() if l.strip()]
        lines.append("hosts:")
        for i, port in enumerate(ports):
            sock = os.path.join(self.dir, f"h{i}.sock")
            self.sockets.append(sock)
            self.logs.append(os.path.join(self.dir, f"h{i}.log"))
            lines += [f"  - name: h{i}", f"    address: 127.0.0.1:{port}", f"    socket: {sock}"]
        self.config = os.path.join(self.dir, "ringd.yaml")
        with open(self.config, "w") as f:
            f.write("\n".join(lines) + "\n")

    def start(self):
        """Starts every daemon and waits until each one's socket accepts."""
        try:
            self.write_config()
            for i in range(self.hosts):
                with open(self.logs[i], "ab") as log:
                    self.procs.append(
                        subprocess.Popen(
                            [self.ringd_bin, "--config", self.config, "--host", f"h{i}"],
                            stdin=subprocess.DEVNULL,
                            stdout=log,
                            stderr=log,
                            preexec_fn=_die_with_parent,
                        )
                    )
            deadline = time.monotonic() + READY_TIMEOUT
            for i in range(self.hosts):
                self._wait_ready(i, deadline)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, i, deadline):
        while True:
            if self.procs[i].poll() is not None:
                raise RuntimeError(
                    f"ringd h{i} exited with status {self.procs[i].returncode} while "
                    f"starting:\n{self.log_tail(i)}"
                )
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(self.sockets[i])
                return
            except OSError:
                pass
            finally:
                s.close()
            if time.monotonic() > deadline:
                raise RuntimeError(f"ringd h{i} did not accept on {self.sockets[i]} in time")
            time.sleep(0.01)

    def socket_of(self, rank):
        """The socket of the host of rank (ranks are numbered host by host)."""
        return self.sockets[rank // self.local_clients]

    def env(self, rank, base=None):
        """Environment for the process of rank: base (default os.environ) with
        RINGD_SOCKET and RINGD_LOCAL_RANK set."""
        env = dict(os.environ if base is None else base)
        env["RINGD_SOCKET"] = self.socket_of(rank)
        env["RINGD_LOCAL_RANK"] = str(rank % self.local_clients)
        return env

    def log_tail(self, i, lines=30):
        try:
            with open(self.logs[i], errors="replace") as f:
                tail = f.read().splitlines()[-lines:]
        except OSError:
            return f"(no log at {self.logs[i]})"
        return "\n".join(f"  h{i}| {l}" for l in tail)

    def stop(self):
        """Stops the daemons (SIGTERM, then SIGKILL after STOP_TIMEOUT) and
        removes the directory, unless one of them failed. Returns the daemons'
        exit statuses (0 for a clean exit)."""
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        codes = []
        for p in self.procs:
            try:
                codes.append(p.wait(max(0.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                p.kill()
                codes.append(p.wait())
        self.procs = []
        # The logs of a daemon that did not exit cleanly stay for inspection.
        if self.dir and not self.keep and all(code == 0 for code in codes):
            shutil.rmtree(self.dir, ignore_errors=True)
        return codes


def run(command, hosts=4, local_clients=1, extra_yaml="", timeout=None):
    """Starts a LocalRing and one process of command per rank; returns the
    first non-zero exit status, or 0. When a process fails the others are
    stopped, since their collectives can no longer complete."""
    with LocalRing(hosts, local_clients, extra_yaml) as ring:
        procs = [
            subprocess.Popen(command, env=ring.env(r), preexec_fn=_die_with_parent)
            for r in range(ring.size)
        ]
        status = 0
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while any(p.poll() is None for p in procs):
                failed = [p for p in procs if p.returncode not in (None, 0)]
                if failed or (deadline is not None and time.monotonic() > deadline):
                    if not failed:
                        print(f"ringd.launch: timed out after {timeout} s", file=sys.stderr)
                        status = 1
                    for p in procs:
                        if p.poll() is None:
                            p.terminate()
                    break
                time.sleep(0.05)
            for p in procs:
                p.wait()
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        for r, p in enumerate(procs):
            if p.returncode != 0 and status == 0:
                status = p.returncode if p.returncode > 0 else 128 - p.returncode
                print(f"ringd.launch: rank {r} exited with status {p.returncode}", file=sys.stderr)
        if status:
            for i in range(ring.hosts):
                print(ring.log_tail(i, 10), file=sys.stderr)
        return status


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python3 -m ringd.launch",
        description="Start a ring of ringd daemons on 127.0.0.1 and one copy of COMMAND per "
        "rank, with RINGD_SOCKET and RINGD_LOCAL_RANK set; stop everything at the end.",
    )
    ap.add_argument("-n", "--hosts", type=int, default=4, help="daemons in the ring (4)")
    ap.add_argument("--local-clients", type=int, default=1, help="processes per daemon (1)")
    ap.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="a config key, e.g. --set collective_timeout=30s (repeatable)",
    )
    ap.add_argument("--timeout", type=float, default=None, help="stop everything after S seconds")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("no command given")
    extra = "\n".join(kv.replace("=", ": ", 1) for kv in args.set)
    return run(command, args.hosts, args.local_clients, extra, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
