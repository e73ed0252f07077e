"""Starting the processes of a job, one per rank: on this machine with a
ring of daemons of its own, or on the hosts of a cluster.

    python3 -m ringd.launch -n 4 -- python3 train.py --epochs 5
    python3 -m ringd.launch --hosts node1:2,node2:2 -- python3 train.py

With -n K it starts K ringd daemons on 127.0.0.1 (free ports, a generated
config and sockets in a temporary directory; LocalRing) and
--local-clients processes for each. With --hosts (or --hostfile) the
daemons are the cluster's, already running: it starts each host's
processes through a remote shell, `ssh -o BatchMode=yes {host} {cmd}` by
default (--remote sets another: `ip netns exec {host}` on the namespace
testbed); the hosts are listed in ring order, as in the daemons' config,
each with its number of processes (its local_clients).

Every rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (what
torchrun sets) and RINGD_LOCAL_RANK (and RINGD_SOCKET on this machine), in
the directory the launcher runs in. Each line a rank prints comes out with
"[rank] " in front. Every rank is watched: the first that fails (exits
non-zero or is killed) stops the others at once, is named, and its last
lines are shown again at the end; Ctrl-C and SIGTERM are passed on to
every rank. The exit status is the failed rank's (0 if none failed).

    with LocalRing(4) as ring:          # in Python
        env = ring.env(rank)            # os.environ plus RINGD_SOCKET, RINGD_LOCAL_RANK
        ...

With --report it prints, as the job ends, one line saying where the ranks
spent their time (ringd.report_line(): compute, wait, transfer, failure,
the speedup reached, who made the others wait most, energy); with -n,
--report-dir DIR also keeps the whole report there: report.json (ringd.report()),
report.svg (a bar per rank) and trace.json (a Chrome trace of the last
calls), the last two by ringctl.

The ringd binary is $RINGD_BIN, else the build tree of the source checkout
this package sits in (build/daemon/ringd), else the one installed with this
package, else `ringd` on $PATH; ringctl likewise ($RINGCTL_BIN, build/client/ringctl). Daemons die with the process that started them
(PR_SET_PDEATHSIG), so none outlives a crashed test. NumPy is not needed.
"""

import argparse
import ctypes
import json
import os
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from ._lib import checkout_root
from ._supervise import GRACE, Proc, early, status_text, supervise

READY_TIMEOUT = 20.0  # daemon start to socket accepting
STOP_TIMEOUT = 15.0  # SIGTERM to exit


def find_ringd():
    """Path of the ringd binary to start, or raise FileNotFoundError."""
    env = os.environ.get("RINGD_BIN")
    if env:
        return env
    root = checkout_root()
    if root is not None and (root / "build" / "daemon" / "ringd").is_file():
        return str(root / "build" / "daemon" / "ringd")
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


def find_ringctl():
    """Path of ringctl, found as find_ringd() finds ringd, or None."""
    env = os.environ.get("RINGCTL_BIN")
    if env:
        return env
    root = checkout_root()
    if root is not None and (root / "build" / "client" / "ringctl").is_file():
        return str(root / "build" / "client" / "ringctl")
    try:
        from . import _paths

        path = os.path.join(os.path.dirname(_paths.RINGD), "ringctl")
        if os.path.isfile(path):
            return path
    except ImportError:
        pass
    return shutil.which("ringctl")


def _port_window():
    """Ports outside the kernel's ephemeral range (ip_local_port_range),
    which connect() never takes a source port from: a port found free is
    then not taken by some outgoing connection before its daemon binds it."""
    lo, hi = 32768, 60999
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split()[:2])
    except (OSError, ValueError):
        pass
    if lo >= 12000:
        return 10000, lo - 1
    if hi <= 63000:
        return hi + 1, 65535
    return lo, hi


def free_ports(n):
    """n distinct free TCP ports on 127.0.0.1, outside the ephemeral range
    (bound together, then released)."""
    lo, hi = _port_window()
    rng = random.SystemRandom()
    socks, taken = [], set()
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            for _ in range(200):
                # Two sockets with SO_REUSEADDR, neither listening, may
                # bind one port: the set keeps them distinct.
                port = rng.randint(lo, hi)
                if port in taken:
                    continue
                try:
                    s.bind(("127.0.0.1", port))
                    taken.add(port)
                    break
                except OSError:
                    continue
            else:
                raise OSError("no free port on 127.0.0.1 in %d..%d after 200 tries" % (lo, hi))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_accepting(proc, path, deadline):
    """Waits until the Unix socket path (of daemon proc) accepts a
    connection. Returns None, or why not: "exited with status N" if proc
    exited first, "did not accept in time" past deadline (time.monotonic())."""
    while True:
        if proc.poll() is not None:
            return f"exited with status {proc.returncode}"
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            return None
        except OSError:
            pass
        finally:
            s.close()
        if time.monotonic() > deadline:
            return "did not accept in time"
        time.sleep(0.01)


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
        why = wait_accepting(self.procs[i], self.sockets[i], deadline)
        if why is None:
            return
        if self.procs[i].poll() is not None:
            raise RuntimeError(f"ringd h{i} {why} while starting:\n{self.log_tail(i)}")
        raise RuntimeError(f"ringd h{i} did not accept on {self.sockets[i]} in time")

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


def rank_env(rank, size, local_rank, local_size, base=None):
    """base (default os.environ) with the variables every rank gets."""
    env = dict(os.environ if base is None else base)
    env.update(
        RANK=str(rank),
        WORLD_SIZE=str(size),
        LOCAL_RANK=str(local_rank),
        LOCAL_WORLD_SIZE=str(local_size),
        RINGD_LOCAL_RANK=str(local_rank),
    )
    return env


def _report(status, failed, procs):
    """The last words of a job that failed: the failed rank's last lines,
    which its own output may have scrolled away, then which it was."""
    if failed is not None and failed.tail:
        print(f"ringd.launch: the last lines of rank {failed.rank}:", file=sys.stderr)
        for line in failed.tail:
            print(f"  [{failed.rank}] {line}", file=sys.stderr)
    if failed is not None:
        stopped = [p.rank for p in procs if p is not failed and p.status not in (0, None)]
        also = f"; ranks stopped: {', '.join(map(str, stopped))}" if stopped else ""
        print(f"ringd.launch: rank {failed.rank} {status_text(failed.status)}{early(failed)}"
              f"{also}",
              file=sys.stderr, flush=True)


def _print_report(r):
    from ._report import report_line

    print(f"ringd.launch: {report_line(r)}", file=sys.stderr, flush=True)


def _local_report(ring, report_dir):
    """The report of a LocalRing whose ranks have ended: printed, and with
    report_dir written there (report.json; report.svg, trace.json by
    ringctl). A report that cannot be made is said, never fatal."""
    from ._lib import RingError
    from ._report import final_report

    try:
        r = final_report(ring.sockets[0])
    except (RingError, OSError) as e:
        print(f"ringd.launch: no report: {e}", file=sys.stderr)
        return
    _print_report(r)
    if not report_dir:
        return
    os.makedirs(report_dir, exist_ok=True)
    with open(os.path.join(report_dir, "report.json"), "w") as f:
        json.dump(r, f, indent=1)
        f.write("\n")
    ringctl = find_ringctl()
    if not ringctl:
        print("ringd.launch: no ringctl found: report.svg and trace.json not written",
              file=sys.stderr)
        return
    done = subprocess.run(
        [ringctl, "--socket", ring.sockets[0], "report", "--svg",
         os.path.join(report_dir, "report.svg"), "--trace", os.path.join(report_dir, "trace.json")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        print(f"ringd.launch: ringctl report: {done.stderr.strip()}", file=sys.stderr)
    print(f"ringd.launch: the report is in {report_dir}", file=sys.stderr)


def run(command, hosts=4, local_clients=1, extra_yaml="", timeout=None, prefix=True, keep=False,
        report=False, report_dir=None):
    """Starts a LocalRing and one process of command per rank, and
    supervises them (see the module's docstring). Returns the exit status:
    that of the rank that failed first, or 0. keep: keep the daemons'
    directory (config, logs); a daemon that fails keeps it too. report:
    print where the time went as the job ends; report_dir: keep the whole
    report there too."""
    ring = LocalRing(hosts, local_clients, extra_yaml, keep=keep)
    ring.start()
    procs = []
    try:
        for r in range(ring.size):
            env = rank_env(r, ring.size, r % ring.local_clients, ring.local_clients, ring.env(r))
            if prefix:
                env.setdefault("PYTHONUNBUFFERED", "1")  # lines as they are printed
            procs.append(Proc(r, subprocess.Popen(
                command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True, preexec_fn=_die_with_parent)))
        status, failed = supervise(procs, timeout, prefix)
    finally:
        for p in procs:
            if p.popen.poll() is None:
                p.signal(signal.SIGKILL)
                p.popen.wait()
        if report or report_dir:
            _local_report(ring, report_dir)
        codes = ring.stop()
    if status:
        _report(status, failed, procs)
    crashed = [i for i, code in enumerate(codes) if code != 0]
    for i in crashed:
        print(f"ringd.launch: daemon h{i} exited with status {codes[i]}:\n{ring.log_tail(i, 10)}",
              file=sys.stderr)
    if crashed or keep:
        print(f"ringd.launch: the daemons' config and logs are in {ring.dir}", file=sys.stderr)
    return status


# ---- on the hosts of a cluster -------------------------------------------------------

DEFAULT_REMOTE = "ssh -o BatchMode=yes {host} {cmd}"

# What a remote rank runs: the command in its own session, in the launcher's
# directory, and a watcher that passes on the signal names the launcher
# writes to its input, and stops the command when that input ends (the
# launcher stopped it, or went away).
# (A background job's input is /dev/null unless redirected: hence fd 3.)
_REMOTE_SCRIPT = """\
cd {cwd} || exit 127
exec 3<&0
setsid env {env} {command} </dev/null 3<&- &
pid=$!
(while read -r sig; do kill -s "$sig" -- -$pid 2>/dev/null; done
 kill -s TERM -- -$pid 2>/dev/null; sleep {grace}; kill -s KILL -- -$pid 2>/dev/null) <&3 &
watcher=$!
wait $pid
status=$?
kill $watcher 2>/dev/null
exit $status
"""


def parse_hosts(text, default_slots=1):
    """[(host, processes)] of "a:2,b,c:4" (or of a hostfile's lines, "a:2",
    "a slots=2" or "a", # comments)."""
    out = []
    for item in text.replace("\n", ",").split(","):
        item = item.split("#", 1)[0].strip()
        if not item:
            continue
        host, slots = item, default_slots
        if "slots=" in item:
            host, _, slots = item.partition("slots=")
        elif ":" in item and not item.startswith("["):
            host, _, slots = item.rpartition(":")
        host = host.strip()
        try:
            slots = int(slots)
        except ValueError:
            raise ValueError(f"host {item!r}: expected HOST, HOST:N or HOST slots=N") from None
        if not host or slots < 1:
            raise ValueError(f"host {item!r}: expected HOST, HOST:N or HOST slots=N, N >= 1")
        out.append((host, slots))
    if not out:
        raise ValueError("no hosts given")
    return out


def remote_argv(template, host, script):
    """The argv that runs script (sh) on host: template's words with {host}
    replaced, and {cmd} replaced by `sh -c SCRIPT` as one shell-quoted word
    (what ssh wants: it hands a string to the remote shell); without {cmd},
    `sh -c SCRIPT` as three words at the end (ip netns exec, docker exec)."""
    words = shlex.split(template)
    quoted = "sh -c " + shlex.quote(script)
    argv = [quoted if w == "{cmd}" else w.replace("{host}", host) for w in words]
    if "{cmd}" not in words:
        argv += ["sh", "-c", script]
    return argv


def _remote_report(remote, host, timeout=3.0):
    """`ringctl report --json` on host through the remote shell, until the
    summaries hold the end of the job (ringd._report.final_report()), then
    printed; a report that cannot be made is said, never fatal."""
    from ._report import job_over

    deadline = time.monotonic() + timeout
    while True:
        done = subprocess.run(remote_argv(remote, host, "ringctl report --json"),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if done.returncode != 0:
            print(f"ringd.launch: no report from {host}: {done.stderr.strip()}", file=sys.stderr)
            return
        try:
            r = json.loads(done.stdout)
        except ValueError:
            print(f"ringd.launch: no report from {host}: not JSON", file=sys.stderr)
            return
        if job_over(r) or time.monotonic() >= deadline:
            _print_report(r)
            return
        time.sleep(0.5)


def run_remote(command, hosts, remote=DEFAULT_REMOTE, env=None, timeout=None, prefix=True,
               cwd=None, report=False):
    """Starts command on each (host, processes) of hosts, in ring order,
    through the remote shell template remote, with env (a dict) added to
    the rank variables, and supervises them. Returns the exit status.
    report: print where the time went as the job ends (ringctl report on
    the first host)."""
    size = sum(n for _, n in hosts)
    cwd = cwd or os.getcwd()
    procs = []
    try:
        rank = 0
        for host, n in hosts:
            for local in range(n):
                variables = dict(env or {})
                variables.update(rank_env(rank, size, local, n, base={}))
                if prefix:
                    variables.setdefault("PYTHONUNBUFFERED", "1")
                script = _REMOTE_SCRIPT.format(
                    cwd=shlex.quote(cwd),
                    env=" ".join(shlex.quote(f"{k}={v}") for k, v in sorted(variables.items())),
                    command=" ".join(shlex.quote(w) for w in command),
                    grace=int(round(GRACE)),
                )
                procs.append(Proc(rank, subprocess.Popen(
                    remote_argv(remote, host, script), stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                    preexec_fn=_die_with_parent), remote=True))
                rank += 1
        status, failed = supervise(procs, timeout, prefix)
    finally:
        for p in procs:
            if p.popen.poll() is None:
                p.stop()
                p.signal(signal.SIGKILL)
                p.popen.wait()
    if report:
        _remote_report(remote, hosts[0][0])
    if status:
        _report(status, failed, procs)
    return status


def _env_options(items):
    """-x NAME (this process's value) and -x NAME=VALUE, as a dict."""
    out = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq:
            if name not in os.environ:
                raise ValueError(f"-x {name}: not set here")
            value = os.environ[name]
        out[name] = value
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python3 -m ringd.launch",
        description="Start one copy of COMMAND per rank, on a ring of ringd daemons started "
        "here (-n) or on the hosts of a cluster (--hosts, --hostfile); watch them all, stop "
        "them all when one fails.",
    )
    where = ap.add_mutually_exclusive_group()
    where.add_argument("-n", "--np", dest="n", type=int, default=None,
                       help="daemons on 127.0.0.1 (default 4), each with --local-clients ranks")
    where.add_argument("--hosts", metavar="H[:N],...",
                       help="the cluster's hosts in ring order, N processes each (default "
                       "--local-clients)")
    where.add_argument("--hostfile", metavar="FILE",
                       help="the hosts, one a line: HOST, HOST:N or HOST slots=N")
    ap.add_argument("--local-clients", type=int, default=1,
                    help="processes per host (1), where not given with the host")
    ap.add_argument("--remote", default=DEFAULT_REMOTE, metavar="TEMPLATE",
                    help="how to run a command on {host}: {cmd} is the command as one "
                    "shell word; without {cmd} it is appended as `sh -c SCRIPT` "
                    f"(default: {DEFAULT_REMOTE!r})")
    ap.add_argument("-x", "--env", action="append", default=[], metavar="NAME[=VALUE]",
                    help="an environment variable for the remote ranks (repeatable)")
    ap.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="-n: a config key of the daemons, e.g. --set collective_timeout=30s (repeatable)",
    )
    ap.add_argument("--timeout", type=float, default=None, help="stop everything after S seconds")
    ap.add_argument("--keep", action="store_true",
                    help="-n: keep the daemons' directory (config, logs) and say where")
    ap.add_argument("--no-prefix", dest="prefix", action="store_false",
                    help="copy the ranks' output as it is, without [rank] in front of each line")
    ap.add_argument("--report", action="store_true",
                    help="as the job ends, print where the ranks spent their time: compute, "
                    "wait, transfer, failure, speedup, who made the others wait, energy")
    ap.add_argument("--report-dir", metavar="DIR",
                    help="-n: also keep the whole report in DIR: report.json, report.svg, "
                    "trace.json")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("no command given")
    if args.hosts and args.hosts.isdigit():  # the older spelling of -n
        args.n, args.hosts = int(args.hosts), None
    try:
        if args.hosts or args.hostfile:
            text = args.hosts
            if args.hostfile:
                with open(args.hostfile) as f:
                    text = f.read()
            hosts = parse_hosts(text, args.local_clients)
            if args.report_dir:
                raise ValueError("--report-dir is for -n: with --hosts, run ringctl report "
                                 "--svg/--trace on a host of the cluster")
            return run_remote(command, hosts, args.remote, _env_options(args.env), args.timeout,
                              args.prefix, report=args.report)
    except (ValueError, OSError) as e:
        ap.error(str(e))
    extra = "\n".join(kv.replace("=", ": ", 1) for kv in args.set)
    return run(command, args.n or 4, args.local_clients, extra, args.timeout, args.prefix,
               args.keep, report=args.report, report_dir=args.report_dir)


if __name__ == "__main__":
    sys.exit(main())
