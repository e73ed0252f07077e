"""ringd as a service: what systemd, an operator and Prometheus see.

Every test starts real ringd daemons on 127.0.0.1 (free ports, a temporary
directory), waits on conditions with a deadline, and stops what it started.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from waiting import wait_for  # noqa: E402

BUILD = os.environ.get("RINGD_BINARY_DIR", "build")
SOURCE = os.environ.get("RINGD_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
RINGD = os.path.join(BUILD, "daemon", "ringd")
RINGCTL = os.path.join(BUILD, "client", "ringctl")
DEADLINE = 20.0


sys.path.insert(0, os.path.join(SOURCE, "client", "python"))
from ringd.launch import free_ports  # noqa: E402  (outside the ephemeral range)


class Ring:
    """Configs for a ring of n hosts h0..h(n-1); daemons started on demand."""

    def __init__(self, tmp, n, extra="", metrics=False):
        self.tmp, self.n = tmp, n
        self.ports = free_ports(2 * n)
        self.names = ["h%d" % i for i in range(n)]
        self.procs = {}
        self.extra = extra
        self.metrics = metrics
        for i in range(n):
            self.write(i)

    def sock(self, i):
        return os.path.join(self.tmp, self.names[i] + ".sock")

    def conf(self, i):
        return os.path.join(self.tmp, self.names[i] + ".yaml")

    def log(self, i):
        return os.path.join(self.tmp, self.names[i] + ".log")

    def metrics_port(self, i):
        return self.ports[self.n + i]

    def text(self, i, n_hosts=None, extra=None):
        lines = ["cluster: svc", "hosts:"]
        for j in range(n_hosts or self.n):
            lines += ["  - name: h%d" % j,
                      "    address: 127.0.0.1:%d" % (self.ports[j] if j < self.n else free_ports(1)[0]),
                      "    socket: %s" % os.path.join(self.tmp, "h%d.sock" % j)]
        if self.metrics:
            lines.append("metrics: 127.0.0.1:%d" % self.metrics_port(i))
        lines.append(self.extra if extra is None else extra)
        return "\n".join(lines) + "\n"

    def write(self, i, **kw):
        with open(self.conf(i), "w") as f:
            f.write(self.text(i, **kw))

    def start(self, i, env=None):
        e = dict(os.environ)
        e.update(env or {})
        log = open(self.log(i), "w")
        self.procs[i] = subprocess.Popen([RINGD, "--config", self.conf(i), "--host", self.names[i]],
                                         stderr=log, env=e)
        return self.procs[i]

    def wait_socket(self, i):
        wait_for(self.sock(i), lambda: os.path.exists(self.sock(i)))

    def logtext(self, i):
        with open(self.log(i)) as f:
            return f.read()

    def ringctl(self, i, *args, timeout=60):
        return subprocess.run([RINGCTL, "--socket", self.sock(i)] + list(args),
                              capture_output=True, text=True, timeout=timeout)

    def status(self, i):
        r = self.ringctl(i, "status", "--json")
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    def stop(self):
        for i, p in self.procs.items():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for i, p in self.procs.items():
            try:
                rc = p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                raise AssertionError("h%d did not stop on SIGTERM" % i)
            assert rc == 0, "h%d exited with %d:\n%s" % (i, rc, self.logtext(i))
            assert "ERROR: AddressSanitizer" not in self.logtext(i)
            assert "runtime error:" not in self.logtext(i)


@pytest.fixture
def tmp():
    d = tempfile.mkdtemp(prefix="ringd-svc-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def ring_factory(tmp):
    rings = []

    def make(n, **kw):
        r = Ring(tmp, n, **kw)
        rings.append(r)
        return r

    yield make
    for r in rings:
        r.stop()


def allreduce_everywhere(ring, count=65536, iters=3):
    procs = [subprocess.Popen([RINGCTL, "--socket", ring.sock(i), "allreduce", "--count", str(count),
                               "--iters", str(iters), "--warmup", "1", "--quiet"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(ring.n)]
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err


# ---- the unit ----

def test_the_unit_passes_systemd_analyze_verify(tmp):
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze not installed (Debian package systemd; deploy/install-deps.sh)")
    # The unit as installed, but starting the ringd of this build.
    with open(os.path.join(BUILD, "deploy", "ringd.service")) as f:
        unit = re.sub(r"^ExecStart=\S+", "ExecStart=" + os.path.abspath(RINGD), f.read(), flags=re.M)
    path = os.path.join(tmp, "ringd.service")
    with open(path, "w") as f:
        f.write(unit)
    env = dict(os.environ, MANPATH=os.path.join(SOURCE, "deploy", "man"))
    r = subprocess.run(["systemd-analyze", "verify", path], capture_output=True, text=True,
                       cwd=tmp, env=env, timeout=60)
    assert r.returncode == 0 and r.stderr.strip() == "" and r.stdout.strip() == "", r.stdout + r.stderr
    for key in ["Type=notify", "Restart=on-failure", "RuntimeDirectory=ringd", "NoNewPrivileges=yes",
                "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes",
                "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6", "CapabilityBoundingSet=\n",
                "MemoryDenyWriteExecute=yes", "ExecReload=/bin/sh -c 'kill -HUP ${MAINPID}'",
                "WatchdogSec="]:
        assert key in unit, key


# ---- the notify protocol ----

def notify_socket(tmp):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = os.path.join(tmp, "notify.sock")
    s.bind(path)
    s.settimeout(0.1)
    return s, path


def test_ready_comes_only_once_both_sockets_listen_then_status_and_watchdog(tmp, ring_factory):
    ring = ring_factory(2)
    ns, path = notify_socket(tmp)
    ring.start(0, env={"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "400000"})
    got = []
    end = time.monotonic() + DEADLINE
    while "READY=1" not in got and time.monotonic() < end:
        try:
            got += ns.recv(4096).decode().split("\n")
        except socket.timeout:
            pass
    assert "READY=1" in got, got
    # By READY=1 both the ring port and the Unix socket accept connections.
    socket.create_connection(("127.0.0.1", ring.ports[0]), timeout=2).close()
    u = socket.socket(socket.AF_UNIX)
    u.connect(ring.sock(0))
    u.close()
    # Then the state in words, and the watchdog fed at half of 400 ms.
    end = time.monotonic() + DEADLINE
    while not (any(m.startswith("STATUS=ring forming") for m in got) and
               got.count("WATCHDOG=1") >= 2) and time.monotonic() < end:
        try:
            got += ns.recv(4096).decode().split("\n")
        except socket.timeout:
            pass
    assert any(m.startswith("STATUS=ring forming") for m in got), got
    assert got.count("WATCHDOG=1") >= 2, got
    # Once the ring forms, STATUS= says so, and that it waits for the
    # training processes (none has connected).
    ring.start(1)
    end = time.monotonic() + DEADLINE
    while not any(m.startswith("STATUS=ring up, waiting for ranks") for m in got) and \
            time.monotonic() < end:
        try:
            got += ns.recv(4096).decode().split("\n")
        except socket.timeout:
            pass
    waiting = [m for m in got if m.startswith("STATUS=ring up, waiting for ranks")]
    assert waiting and "rank 0 on host h0 is not connected" in waiting[-1], got


def test_a_bad_config_exits_2_without_ready(tmp):
    ns, path = notify_socket(tmp)
    conf = os.path.join(tmp, "bad.yaml")
    with open(conf, "w") as f:
        f.write("cluster: x\nhosts: []\n")
    r = subprocess.run([RINGD, "--config", conf, "--host", "a"], capture_output=True, text=True,
                       env=dict(os.environ, NOTIFY_SOCKET=path), timeout=30)
    assert r.returncode == 2, r.stderr
    with pytest.raises(socket.timeout):
        ns.recv(4096)


def test_help_documents_every_flag():
    r = subprocess.run([RINGD, "--help"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0
    for flag in ["--config", "--host", "--log-level", "--check", "--help", "--version", "SIGHUP"]:
        assert flag in r.stdout, flag


# ---- reload ----

def test_sighup_applies_a_tuning_key_live(ring_factory):
    ring = ring_factory(2)
    for i in range(2):
        ring.start(i)
    for i in range(2):
        ring.wait_socket(i)
    wait_for("ring up", lambda: ring.status(0)["right_state"] == "up" and ring.status(0)["left_state"] == "up")
    # A barrier that only h0 joins waits for h1 until collective_timeout:
    # 60 s by default, 300 ms after the reload.
    ring.write(0, extra="collective_timeout: 300ms")
    ring.procs[0].send_signal(signal.SIGHUP)
    wait_for("reload logged", lambda: "reload: done" in ring.logtext(0))
    assert "reload: collective_timeout 60s -> 300ms" in ring.logtext(0)
    t = time.monotonic()
    r = ring.ringctl(0, "barrier", "--iters", "1", "--warmup", "0", timeout=30)
    assert r.returncode == 1 and "timed out" in r.stderr, r.stderr
    assert time.monotonic() - t < 10


def test_sighup_with_an_invalid_config_keeps_the_running_one(ring_factory):
    ring = ring_factory(1)
    ring.start(0)
    ring.wait_socket(0)
    with open(ring.conf(0), "w") as f:
        f.write("cluster: svc\nhosts: [\n")
    ring.procs[0].send_signal(signal.SIGHUP)
    wait_for("refusal logged", lambda: "keeping the running configuration" in ring.logtext(0))
    assert ring.procs[0].poll() is None
    st = ring.status(0)
    assert st["n_hosts"] == 1
    # ringctl status says the file was refused, where, and that the old one runs.
    assert st["reloads"] == 1 and st["last_reload"]["refused"], st["last_reload"]
    assert ring.conf(0) in st["last_reload"]["said"], st["last_reload"]
    r = ring.ringctl(0, "status")
    assert "last reload (" in r.stdout and "refused, running the configuration loaded before: " \
        in r.stdout, r.stdout


def test_sighup_naming_a_group_this_host_lacks_changes_nothing(ring_factory):
    ring = ring_factory(1)
    ring.start(0)
    ring.wait_socket(0)
    mode = os.stat(ring.sock(0)).st_mode & 0o7777
    # A valid file whose socket_mode would apply at once, but whose group
    # does not exist here: refused whole, the mode unchanged.
    ring.write(0, extra='socket_mode: "0600"\nsocket_group: no-such-group-ringd')
    ring.procs[0].send_signal(signal.SIGHUP)
    wait_for("refusal logged", lambda: "keeping the running configuration" in ring.logtext(0))
    assert "socket_group" in ring.logtext(0) and "reload: socket_mode" not in ring.logtext(0)
    assert os.stat(ring.sock(0)).st_mode & 0o7777 == mode
    st = ring.status(0)["last_reload"]
    assert st["refused"] and "no-such-group-ringd" in st["said"], st


def test_sighup_with_another_host_list_re_forms_the_ring(ring_factory):
    ring = ring_factory(2)
    for i in range(2):
        ring.start(i)
    for i in range(2):
        ring.wait_socket(i)
    wait_for("ring up", lambda: ring.status(0)["left_state"] == "up")
    # Both hosts drop to a ring of one: h0 alone.
    ring.write(0, n_hosts=1)
    ring.procs[0].send_signal(signal.SIGHUP)
    # The socket closes and reopens while the engine is replaced: status
    # may fail in between, and that is not the question here.
    def one_host():
        r = ring.ringctl(0, "status", "--json")
        return r.returncode == 0 and json.loads(r.stdout)["n_hosts"] == 1

    wait_for("re-formed", lambda: "reload: hosts 2 hosts -> 1 hosts: re-forming the ring"
             in ring.logtext(0) and one_host())
    assert ring.status(0)["left_state"] == "self"
    r = ring.ringctl(0, "allreduce", "--count", "1000", "--iters", "1")
    assert r.returncode == 0, r.stderr


# ---- metrics and status ----

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"'
                    r'(,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")*)?\})? (\S+)$')
COMMENT = re.compile(r"^# (HELP [a-zA-Z_:][a-zA-Z0-9_:]* .*|TYPE [a-zA-Z_:][a-zA-Z0-9_:]* "
                     r"(counter|gauge|histogram|summary|untyped))$")


def scrape(port, path="/metrics"):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=10) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = r.read().decode()
    samples, typed = {}, set()
    for line in text.splitlines():
        if line.startswith("#"):
            assert COMMENT.match(line), "not Prometheus text: %r" % line
            if line.startswith("# TYPE"):
                typed.add(line.split()[2])
            continue
        m = SAMPLE.match(line)
        assert m, "not Prometheus text: %r" % line
        float(m.group(5).replace("+Inf", "inf"))
        base = re.sub(r"_(bucket|sum|count)$", "", m.group(1))
        assert m.group(1) in typed or base in typed, "sample without # TYPE: %r" % line
        samples[m.group(1) + (m.group(2) or "")] = float(m.group(5))
    return samples


def test_a_scrape_is_prometheus_text_and_its_counters_move_after_a_collective(ring_factory):
    ring = ring_factory(2, metrics=True)
    for i in range(2):
        ring.start(i)
    for i in range(2):
        ring.wait_socket(i)
    wait_for("ring up", lambda: ring.status(0)["left_state"] == "up" and ring.status(0)["right_state"] == "up")
    port = ring.metrics_port(0)
    before = scrape(port)
    ok = 'ringd_collectives_total{kind="allreduce",outcome="ok"}'
    assert before[ok] == 0
    assert before['ringd_link_up{link="left",peer="h1"}'] == 1
    allreduce_everywhere(ring, count=65536, iters=3)
    after = scrape(port)
    assert after[ok] == before[ok] + 4
    assert after['ringd_link_bytes_total{link="left",peer="h1",direction="in"}'] > 0
    assert after['ringd_link_bytes_total{link="right",peer="h1",direction="out"}'] > 0
    assert after["ringd_collective_duration_seconds_count"] == 4
    assert after['ringd_collective_duration_seconds_bucket{le="+Inf"}'] == 4
    assert after['ringd_straggler_waits_total{peer="h1"}'] == 4
    assert after["ringd_epoch"] >= 1 and after["ringd_clients_configured"] == 1
    # Where the rank's time went (ringctl report), since the daemon started.
    assert after['ringd_rank_calls_total{rank="0",outcome="ok"}'] == 4
    assert after['ringd_rank_calls_total{rank="0",outcome="failed"}'] == 0
    assert after['ringd_rank_transfer_seconds_total{rank="0"}'] > 0
    assert after['ringd_rank_failure_seconds_total{rank="0"}'] == 0
    assert 'ringd_rank_compute_seconds_total{rank="0"}' in after
    assert after['ringd_cpu_seconds_total{process="daemon"}'] > 0
    energy = [k for k in after if k.startswith("ringd_energy_joules_total{source=")]
    assert len(energy) == 1 and after[energy[0]] > 0, energy
    # Only GET /metrics.
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen("http://127.0.0.1:%d/other" % port, timeout=10)
    assert e.value.code == 404


def test_two_daemons_of_one_file_on_one_machine_each_serve_their_own_metrics(tmp):
    ports = free_ports(4)
    conf = os.path.join(tmp, "one.yaml")
    with open(conf, "w") as f:
        f.write("cluster: svc\nmetrics: 127.0.0.1:%d\nhosts:\n" % ports[2])
        for i in range(2):
            f.write("  - name: h%d\n    address: 127.0.0.1:%d\n    socket: %s\n" % (
                i, ports[i], os.path.join(tmp, "h%d.sock" % i)))
        f.write("    metrics: 127.0.0.1:%d\n" % ports[3])  # h1's own
    procs = [subprocess.Popen([RINGD, "--config", conf, "--host", "h%d" % i],
                              stderr=open(os.path.join(tmp, "h%d.log" % i), "w")) for i in range(2)]
    try:
        for i, port in [(0, ports[2]), (1, ports[3])]:
            def info():
                try:
                    return [k for k in scrape(port) if k.startswith("ringd_info")]
                except OSError:
                    return None
            found = wait_for("h%d's metrics on port %d" % (i, port), info)
            assert 'host="h%d"' % i in found[0], found
        assert all(p.poll() is None for p in procs)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(timeout=10)


def test_status_json_parses_and_shows_the_collectives_and_stragglers(ring_factory):
    ring = ring_factory(2)
    for i in range(2):
        ring.start(i)
    for i in range(2):
        ring.wait_socket(i)
    wait_for("ring up", lambda: ring.status(0)["left_state"] == "up" and ring.status(0)["right_state"] == "up")
    before = ring.status(0)
    assert before["collectives_done"] == 0 and before["recent"] == []
    allreduce_everywhere(ring, count=262144, iters=2)
    # The rates are sampled once a second: wait for a sample after the traffic.
    after = wait_for("a rate", lambda: (lambda s: s if s["rate_in"] > 0 else None)(ring.status(0)))
    assert after["collectives_done"] == before["collectives_done"] + 3
    assert after["bytes_in"] > 0 and after["bytes_out"] > 0
    assert after["waits"] == 3
    assert [c["kind"] for c in after["recent"]] == ["allreduce"] * 3
    assert all(c["status"] == 0 and c["wait_us"] is not None for c in after["recent"])
    text = ring.ringctl(0, "status").stdout
    assert "recent collectives (wait here for left neighbour h1)" in text


# ---- install ----

def test_an_install_into_destdir_holds_every_file(tmp):
    dest = os.path.join(tmp, "root")
    r = subprocess.run(["cmake", "--install", BUILD], env=dict(os.environ, DESTDIR=dest),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    cache = open(os.path.join(BUILD, "CMakeCache.txt")).read()
    prefix = re.search(r"^CMAKE_INSTALL_PREFIX:PATH=(.*)$", cache, re.M).group(1)
    root = dest + prefix
    files = ["bin/ringd", "bin/ringctl", "include/ringd.h",
             "lib/systemd/system/ringd.service", "lib/sysusers.d/ringd.conf",
             "lib/tmpfiles.d/ringd.conf", "share/ringd/ringd.example.yaml",
             "share/ringd/ringd.service", "share/ringd/ringd.sysusers", "share/ringd/ringd.tmpfiles",
             "share/man/man8/ringd.8.gz", "share/man/man1/ringctl.1.gz",
             "share/man/man5/ringd.yaml.5.gz"]
    missing = [f for f in files if not os.path.exists(os.path.join(root, f))]
    assert not missing, "missing after install: %s" % missing
    unit = open(os.path.join(root, "lib/systemd/system/ringd.service")).read()
    assert "ExecStart=%s/bin/ringd --config /etc/ringd/ringd.yaml" % prefix in unit
    assert "u ringd" in open(os.path.join(root, "lib/sysusers.d/ringd.conf")).read()


def test_cmake_install_puts_the_python_package_where_debians_python3_finds_it(tmp):
    cache = open(os.path.join(BUILD, "CMakeCache.txt")).read()
    prefix = re.search(r"^CMAKE_INSTALL_PREFIX:PATH=(.*)$", cache, re.M).group(1)
    pydir = re.search(r"^RINGD_PYTHON_DIR:STRING=(.*)$", cache, re.M).group(1)
    sys_path = subprocess.run(["/usr/bin/python3", "-c", "import sys; print('\\n'.join(sys.path))"],
                              capture_output=True, text=True, check=True).stdout.split()
    if prefix in ("/usr", "/usr/local"):
        assert os.path.join(prefix, pydir) in sys_path, (prefix, pydir, sys_path)
    dest = os.path.join(tmp, "root")
    r = subprocess.run(["cmake", "--install", BUILD, "--component", "python"],
                       env=dict(os.environ, DESTDIR=dest), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    pkg = dest + os.path.join(prefix, pydir, "ringd")
    assert {"__init__.py", "_paths.py"} <= set(os.listdir(pkg))
    # _paths.py names the installed library relative to the package itself.
    paths = open(os.path.join(pkg, "_paths.py")).read()
    assert "os.path.join(_here, '../../" in paths and "libringd.so.0" in paths


# ---- reload, key by key, as the documents say ----

# A value to change each key to, from the defaults; tests/reference.py reads
# which class the documents put each key in.
NEW_VALUES = {
    "segment_size": "128KiB", "max_buffer": "2GiB", "collective_timeout": "30s",
    "connect_timeout": "4s", "backoff_initial": "200ms", "backoff_max": "4s",
    "socket_buffer": "2MiB", "fusion_threshold": "2MiB", "fusion_max": "16",
    "log_level": "debug", "heartbeat_interval": "500ms", "heartbeat_timeout": "4s",
    "checksum": "none", "wire_dtype": "bfloat16", "congestion_control": "reno",
    "watts_per_core": "25",
    "metrics": None,  # a free port, below
    "cluster": "svc2", "hosts": None, "socket": None, "local_clients": "2", "streams": "2",
    "secret_file": None, "encryption": "aes-256-gcm",  # encryption needs the key: after it
    "socket_mode": '"0600"', "socket_group": "65534", "allowed_uids": "[0]", "allowed_gids": "[0]",
    "algorithm": "star", "star_root": "h1",  # the default root is the first host
    "evict_after": "5s", "min_hosts": "3",  # of three hosts (the default is 2)
}


def test_reload_applies_each_key_as_the_readme_ringd8_and_the_example_say(tmp):
    import reference
    classes = reference.reload_classes("deploy/ringd.example.yaml")
    missing = {k for keys in classes.values() for k in keys} - set(NEW_VALUES)
    assert not missing, "add a value to try in NEW_VALUES for %s" % missing
    port, port2, mport, p1, p2 = free_ports(5)
    key = os.path.join(tmp, "cluster.key")
    with open(key, "w") as f:
        f.write("a-test-key-that-is-long-enough-0123456789\n")
    os.chmod(key, 0o600)
    values = {"hosts": None, "socket": os.path.join(tmp, "a.sock"), "cluster": "svc"}
    new = dict(NEW_VALUES, metrics="127.0.0.1:%d" % mport, socket=os.path.join(tmp, "b.sock"),
               secret_file=key, hosts=port2)
    conf, log = os.path.join(tmp, "r.yaml"), os.path.join(tmp, "r.log")

    def write():
        with open(conf, "w") as f:
            # h1 and h2 never run: min_hosts has a value to change to.
            f.write("hosts:\n  - name: h0\n    address: 127.0.0.1:%d\n" % (values["hosts"] or port))
            f.write("  - name: h1\n    address: 127.0.0.1:%d\n" % p1)
            f.write("  - name: h2\n    address: 127.0.0.1:%d\n" % p2)
            for k, v in values.items():
                if k != "hosts":
                    f.write("%s: %s\n" % (k, v))

    def logtext():
        with open(log) as f:
            return f.read()

    def status():
        r = subprocess.run([RINGCTL, "--socket", values["socket"], "status", "--json"],
                           capture_output=True, text=True, timeout=30)
        return json.loads(r.stdout) if r.returncode == 0 else None

    def status_ok():
        return status() is not None

    def last_reload_says(k):
        last = status()["last_reload"]
        assert not last["refused"] and k + " " in last["said"], "%s: ringctl status: %s" % (k, last)

    write()
    p = subprocess.Popen([RINGD, "--config", conf, "--host", "h0"], stderr=open(log, "w"))
    try:
        wait_for("the socket", status_ok)
        for cls in reference.CLASSES:
            for k in sorted(classes[cls], key=lambda k: (k == "encryption", k)):
                before = len(logtext())
                values[k] = new[k]
                if k == "algorithm":
                    values["evict_after"] = "0"  # only the ring closes over missing hosts
                write()
                p.send_signal(signal.SIGHUP)
                if cls == "re-form":
                    wait_for("%s: re-forming" % k, lambda: "re-forming the ring" in logtext()[before:])
                    said = logtext()[before:]
                    assert "reload: " + k + " " in said, "%s: not named:\n%s" % (k, said)
                    wait_for("%s: the socket again" % k, status_ok)
                    last_reload_says(k)
                    continue
                wait_for("%s: reload done" % k, lambda: "reload: done" in logtext()[before:])
                said = logtext()[before:]
                assert "re-forming" not in said, "%s re-formed the ring:\n%s" % (k, said)
                assert "reload: " + k + " " in said, "%s changed, not applied:\n%s" % (k, said)
                last_reload_says(k)
                # Applied, not only logged: the socket file has the new mode and group.
                st = os.stat(values["socket"])
                if k == "socket_mode":
                    assert st.st_mode & 0o7777 == 0o600, oct(st.st_mode)
                if k == "socket_group":
                    assert st.st_gid == 65534, st.st_gid
        assert p.poll() is None, logtext()
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
