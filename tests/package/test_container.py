"""The unit under a real systemd: two Debian 12 containers (systemd as PID 1,
nspawn.py) joined by a veth pair, the packages installed with apt, then
what an operator does and sees, in order: apt installs without starting
anything, the ring forms with a cluster key, start returns once ringd
listens (Type=notify), a DDP step with init_process_group("ringd") across
the two (python3-ringd-torch, where it is made), reload, the watchdog, the
hardening, a crash and its restart, an upgrade, stop, and removal.

Skipped, saying why, where the machine cannot boot containers (not root, no
systemd-nspawn, no mirror for mmdebstrap, nspawn failing to boot).
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

import nspawn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from waiting import wait_for  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGES = os.environ.get("RINGD_PACKAGES", "build/packages")
VERSION = os.environ.get("RINGD_VERSION", "0.1.0")
NET = "198.18.0."  # 198.18.0.0/15: addresses for tests, inside the containers only
# python3-ringd-torch where cpack made it (tests/package/CMakeLists.txt):
# then the Python packages go in too, with Debian's torch in the root.
TORCH = "python3-ringd-torch" in os.environ.get("RINGD_DEB_NAMES", "").split(",")


def debs(*names):
    out = []
    for n in names:
        found = glob.glob(os.path.join(PACKAGES, "%s_%s_*.deb" % (n, VERSION)))
        assert len(found) == 1, "no %s package in %s (run cpack -G DEB)" % (n, PACKAGES)
        out.append(found[0])
    return out


def depends_of(paths, own):
    """The first alternative of each Depends of the packages, without ours."""
    names = set()
    for p in paths:
        field = subprocess.run(["dpkg-deb", "-f", p, "Depends"], capture_output=True, text=True,
                               check=True).stdout
        for rel in filter(None, (r.strip() for r in field.split(","))):
            names.add(re.split(r"[\s(|:]", rel.split("|")[0].strip())[0])
    return sorted(names - set(own))


def show(c, prop):
    return c.out("systemctl show -p %s --value ringd" % prop)


def mainpid(c):
    return int(show(c, "MainPID"))


def journal(c):
    return c.out("journalctl -u ringd --no-pager -o cat", check=False)


def ringd_running(c):
    """PIDs of processes named ringd in the container (procps is not there)."""
    return c.out("for f in /proc/[0-9]*/comm; do [ \"$(cat $f 2>/dev/null)\" = ringd ] && "
                 "echo ${f%/comm}; done; true", check=False).split()


def status_json(c):
    r = c.run("ringctl status --json", check=False)
    return json.loads(r.stdout) if r.returncode == 0 else None


def ring_up(c):
    s = status_json(c)
    return s and s["left_state"] == "up" and s["right_state"] == "up"


@pytest.fixture(scope="module")
def ring():
    """Two booted containers a and b, the packages installed in both."""
    try:
        nspawn.check_machine()
        ours = ["ringd", "libringd0"] + (["python3-ringd", "python3-ringd-torch"] if TORCH else [])
        files = debs(*ours)
        root = nspawn.root(depends_of(files, ours))
    except nspawn.Unavailable as e:
        pytest.skip("container stage skipped: %s" % e)
    tag = "%d" % (os.getpid() % 10000000)
    share = tempfile.mkdtemp(prefix="ringd-nspawn-")
    os.chmod(share, 0o755)
    for f in files + [os.path.join(HERE, "ddp_step.py")]:
        shutil.copy(f, share)
    veth = ["rd%sa" % tag, "rd%sb" % tag]
    subprocess.run(["ip", "link", "add", veth[0], "type", "veth", "peer", "name", veth[1]],
                   check=True)
    cs = [nspawn.Container(root, "ringd-%s-%s" % (x, tag), share, veth[i])
          for i, x in enumerate("ab")]
    try:
        t = time.monotonic()
        for c in cs:
            c.start()
        try:
            for c in cs:
                c.wait_booted()
        except nspawn.Unavailable as e:
            pytest.skip("container stage skipped: %s" % e)
        print("container stage: booted %s in %.1f s" % (", ".join(c.name for c in cs),
                                                         time.monotonic() - t))
        for i, c in enumerate(cs):
            c.address = NET + str(i + 1)
            c.run("ip link set lo up 2>/dev/null; true")
            subprocess.run(["nsenter", "-t", str(c.pid), "-n", "sh", "-c",
                            "ip addr add %s/24 dev %s && ip link set %s up" % (
                                c.address, veth[i], veth[i])], check=True)
            c.run("apt-get install -y -q --no-install-recommends %s" % " ".join(
                os.path.join(nspawn.SHARE, os.path.basename(f)) for f in files), timeout=300)
        with open(os.path.join(share, "ringd.yaml"), "w") as f:
            f.write("cluster: nspawn\nsecret_file: /etc/ringd/cluster.key\n"
                    "log_level: info\nhosts:\n" + "".join(
                        "  - name: %s\n    address: %s:7701\n" % (c.name, c.address) for c in cs))
        with open(os.path.join(share, "cluster.key"), "w") as f:
            f.write("a-test-key-that-is-long-enough-0123456789\n")
        yield cs
    finally:
        for c in cs:
            c.stop()
        for v in veth:
            subprocess.run(["ip", "link", "del", v], capture_output=True)
        shutil.rmtree(share, ignore_errors=True)


def test_apt_installs_the_packages_creates_the_user_and_starts_nothing(ring):
    for c in ring:
        assert c.out("getent passwd ringd").split(":")[6] == "/usr/sbin/nologin"
        assert c.out("stat -c '%U %G %a' /etc/ringd") == "root root 755"
        assert c.out("systemctl is-enabled ringd", check=False) == "disabled"
        assert c.out("systemctl is-active ringd", check=False) == "inactive"
        assert ringd_running(c) == []
        assert c.out("ringctl --version") == "ringctl " + VERSION
        # The procps kill is not there: reload must not need it.
        assert c.run("test -e /bin/kill", check=False).returncode != 0


def test_start_returns_once_ringd_listens_and_two_containers_form_a_keyed_ring(ring):
    for c in ring:
        c.run("install -m 644 %s/ringd.yaml /etc/ringd/ && "
              "install -o ringd -g ringd -m 600 %s/cluster.key /etc/ringd/" % (
                  nspawn.SHARE, nspawn.SHARE))
        c.run("ringd --config /etc/ringd/ringd.yaml --check")
    for c in ring:
        c.run("systemctl start ringd")
        # Type=notify: by the time start returns, the socket answers.
        assert status_json(c) is not None, journal(c)
        assert show(c, "Type") == "notify" and show(c, "SubState") == "running"
    for c in ring:
        wait_for("%s: ring up" % c.name, lambda: ring_up(c))
        wait_for("STATUS= ring up", lambda: show(c, "StatusText").startswith("ring up"))
    procs = [c.run("ringctl allreduce --count 262144 --iters 3 --quiet", popen=True)
             for c in ring]
    for c, p in zip(ring, procs):
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, "%s: %s\n%s" % (c.name, err, journal(c))
    for c in ring:
        assert "no secret_file" not in journal(c)
        assert c.out("stat -c '%U %G %a' /run/ringd/ringd.sock") == "ringd ringd 660"


def test_a_ddp_step_with_init_process_group_ringd_across_the_two_containers(ring):
    """Debian's python3 in each container, with python3-ringd-torch and
    Debian's python3-torch installed: one rank each, through its host's
    ringd (tests/package/ddp_step.py checks the gradients)."""
    if not TORCH:
        pytest.skip("no python3-ringd-torch: this machine cannot build the torch backend")
    for c in ring:
        wait_for("%s: ring up" % c.name, lambda: ring_up(c))
    procs = [c.run("python3 %s/ddp_step.py" % nspawn.SHARE, popen=True) for c in ring]
    said = []
    for c, p in zip(ring, procs):
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, "%s: %s\n%s\n%s" % (c.name, out, err, journal(c))
        said.append(out.strip())
    assert sorted(said) == ["rank %d of 2: ok, extension /usr/lib/python3/dist-packages/ringd/"
                            "torch/_ringd_pg%s" % (r, said[0].rsplit("_ringd_pg", 1)[1])
                            for r in range(2)], said


def test_systemctl_reload_re_reads_the_file_in_the_same_process(ring):
    a = ring[0]
    pid = mainpid(a)
    a.run("sed -i 's/^log_level: info$/log_level: info\\ncollective_timeout: 45s/' "
          "/etc/ringd/ringd.yaml")
    a.run("systemctl reload ringd")
    assert mainpid(a) == pid and show(a, "ActiveState") == "active"
    wait_for("reload logged", lambda: "reload: done" in journal(a))
    assert "reload: collective_timeout 60s -> 45s" in journal(a)


def test_the_watchdog_is_fed_and_a_frozen_daemon_is_killed_and_restarted(ring):
    a = ring[0]
    # The unit's 30 s, shortened for the test by a drop-in in /run.
    a.run("mkdir -p /run/systemd/system/ringd.service.d && printf '[Service]\\n"
          "WatchdogSec=2s\\nTimeoutAbortSec=3s\\n' "
          ">/run/systemd/system/ringd.service.d/50-test-watchdog.conf && "
          "systemctl daemon-reload && systemctl restart ringd")
    pid, restarts = mainpid(a), int(show(a, "NRestarts"))
    assert show(a, "WatchdogUSec") == "2s"
    # Fed from the event loop: three periods pass without a kill.
    end = time.monotonic() + 6
    while time.monotonic() < end:
        assert mainpid(a) == pid, journal(a)
        time.sleep(0.5)
    a.run("kill -STOP %d" % pid)
    wait_for("restart after the watchdog timeout",
             lambda: mainpid(a) not in (0, pid) and show(a, "ActiveState") == "active")
    assert "Watchdog timeout" in a.out("journalctl -u ringd --no-pager", check=False)
    assert int(show(a, "NRestarts")) == restarts + 1
    a.run("rm /run/systemd/system/ringd.service.d/50-test-watchdog.conf && "
          "systemctl daemon-reload && systemctl restart ringd")
    assert show(a, "WatchdogUSec") == "30s"


def test_the_daemon_runs_without_privileges_and_cannot_write_etc_or_home(ring):
    a = ring[0]
    pid = mainpid(a)
    status = dict(l.split(":", 1) for l in a.out("cat /proc/%d/status" % pid).splitlines())
    uid = a.out("id -u ringd")
    assert status["Uid"].split()[0] == uid
    assert int(status["CapEff"], 16) == 0 and int(status["CapBnd"], 16) == 0
    assert status["NoNewPrivs"].strip() == "1"
    a.run("mkdir -p /home/alice && echo secret >/home/alice/notes")
    # Even root, in the daemon's mount namespace, cannot write there.
    for path in ["/etc/ringd-was-here", "/home/alice/ringd-was-here", "/usr/ringd-was-here"]:
        r = a.run("nsenter -t %d -m sh -c 'echo x >%s'" % (pid, path), check=False)
        assert r.returncode != 0, "ringd's mount namespace lets %s be written" % path
    r = a.run("nsenter -t %d -m cat /home/alice/notes" % pid, check=False)
    assert r.returncode != 0 and "secret" not in r.stdout
    # ... while outside it root can: the namespace is what stops it.
    a.run("echo x >/etc/ringd-was-here && rm /etc/ringd-was-here")


def test_a_crashed_daemon_is_restarted_and_the_ring_forms_again(ring):
    a = ring[0]
    wait_for("ring up", lambda: ring_up(a))
    pid, restarts = mainpid(a), int(show(a, "NRestarts"))
    a.run("kill -SEGV %d" % pid)
    wait_for("restart after SIGSEGV",
             lambda: mainpid(a) not in (0, pid) and show(a, "ActiveState") == "active")
    assert int(show(a, "NRestarts")) == restarts + 1
    for c in ring:
        wait_for("%s: ring up again" % c.name, lambda: ring_up(c))


def test_an_upgrade_restarts_a_running_service_and_starts_no_stopped_one(ring):
    a, b = ring
    deb = os.path.join(nspawn.SHARE, os.path.basename(debs("ringd")[0]))
    b.run("systemctl stop ringd")
    pid = mainpid(a)
    for c in ring:
        c.run("dpkg -i %s" % deb, timeout=120)  # the same version again: an upgrade
    wait_for("a restarted", lambda: mainpid(a) not in (0, pid) and status_json(a) is not None)
    assert show(a, "ActiveState") == "active"
    assert show(b, "ActiveState") == "inactive" and ringd_running(b) == []
    b.run("systemctl start ringd")
    for c in ring:
        wait_for("%s: ring up" % c.name, lambda: ring_up(c))


def test_systemctl_stop_fails_a_waiting_client_with_eshutdown(ring):
    a = ring[0]
    wait_for("ring up", lambda: ring_up(a))
    # A barrier only a joins: it waits for b's rank until stopped.
    p = a.run("ringctl barrier --iters 1 --warmup 0", popen=True)
    try:
        wait_for("the client connected", lambda: (status_json(a) or {}).get("clients") == 1)
        a.run("systemctl stop ringd")
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 1 and "RINGD_ESHUTDOWN" in err, err
    assert show(a, "ActiveState") == "inactive" and ringd_running(a) == []


def test_apt_remove_stops_the_service_and_leaves_nothing_running(ring):
    a, b = ring
    a.run("systemctl enable --now ringd")
    assert ringd_running(a) and ringd_running(b)
    for c in ring:
        c.run("apt-get remove -y -q ringd", timeout=120)
        assert ringd_running(c) == [], journal(c)
        assert c.run("test -e /usr/bin/ringd", check=False).returncode != 0
    # A purge also drops the link that enable made; the user stays, as on Debian.
    a.run("apt-get purge -y -q ringd libringd0", timeout=120)
    assert a.run("test -e /etc/systemd/system/multi-user.target.wants/ringd.service",
                 check=False).returncode != 0
    assert a.out("getent passwd ringd")
    assert ringd_running(a) == []
