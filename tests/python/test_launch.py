"""python3 -m ringd.launch: one process per rank on a ring of its own (-n),
or on the hosts of a cluster through a remote shell (--hosts), here the
network-namespace testbed (tests/netns/testbed.sh) with `ip netns exec`.
Every rank is watched: the first that fails stops the others within
seconds and is named; output lines carry their rank; signals pass on."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from ringd import launch
from timing import scaled

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent.parent
PYTHON = sys.executable
ENV = dict(os.environ, PYTHONPATH=str(SOURCE / "client" / "python"), PYTHONDONTWRITEBYTECODE="1")


def launcher(*args, code=None, timeout=120, **kwargs):
    """Runs the launcher (with `python3 -c code` as the command, if given)."""
    command = [PYTHON, "-m", "ringd.launch", *args]
    if code is not None:
        command += ["--", PYTHON, "-c", textwrap.dedent(code)]
    return subprocess.run(command, env=kwargs.pop("env", ENV), capture_output=True, text=True,
                          timeout=timeout, **kwargs)


# A rank that fails while the others wait in a collective that it never joins.
FAILING = """
    import ringd, sys, time, numpy as np
    c = ringd.connect()
    c.allreduce(np.ones(4))
    print(f"rank {c.rank} ready", flush=True)
    if c.rank == 1:
        time.sleep(0.5)
        raise RuntimeError("rank 1 fails on purpose")
    c.allreduce(np.ones(4))       # never completes: rank 1 is gone
    print("not reached", flush=True)
"""


def test_each_rank_has_torchrun_variables_and_prefixed_lines(tmp_path):
    r = launcher("-n", "2", "--local-clients", "2", "--timeout", "60", code="""
        import os, ringd, numpy as np
        c = ringd.connect()
        s = int(c.allreduce(np.array([c.rank], np.int64))[0])
        v = [os.environ[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")]
        print(c.rank, c.size, c.local_rank, c.local_size, s, *v)
    """, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = sorted(r.stdout.splitlines())
    assert lines == [f"[{k}] {k} 4 {k % 2} 2 6 {k} 4 {k % 2} 2" for k in range(4)]


def test_report_says_where_the_time_went_as_the_job_ends(tmp_path):
    # Rank 0 is the slow one: 0.3 s a step more than the others, 1.5 s in
    # all, more than the ranks' start-up may differ by on a loaded machine
    # (the first call waits for the last to start: 0.4 s at load 6), and
    # stretched on a busier one (tests/timing.py).
    late = scaled(0.3)
    r = launcher("-n", "2", "--local-clients", "2", "--timeout", "60", "--report",
                 "--report-dir", str(tmp_path / "rep"), code=f"""
        import time, ringd, numpy as np
        c = ringd.connect()
        for _ in range(5):
            time.sleep(0.05 if c.rank else 0.05 + {late})
            c.allreduce(np.ones(8, np.float32))
    """, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    line = [l for l in r.stderr.splitlines() if l.startswith("ringd.launch: 4 ranks, ")]
    assert len(line) == 1, r.stderr
    assert "speedup " in line[0] and "of 4 (efficiency " in line[0], line[0]
    assert "the others waited most for rank 0 on h0" in line[0], line[0]
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert [k["rank"] for k in report["ranks"]] == [0, 1, 2, 3]
    assert all(k["calls"] == 5 for k in report["ranks"])
    assert (tmp_path / "rep" / "report.svg").read_text().startswith("<?xml")
    assert json.loads((tmp_path / "rep" / "trace.json").read_text())["traceEvents"]


def test_distributed_optimizer_reports_as_rank_0_exits(tmp_path):
    if os.environ.get("RINGD_SKIP_TORCH_TESTS"):
        pytest.skip("the PyTorch tests run in the normal build only")
    pytest.importorskip("torch")
    r = launcher("-n", "2", "--timeout", "120", code="""
        import torch, ringd.torch as rt
        rt.init()
        model = torch.nn.Linear(4, 2)
        opt = rt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                      named_parameters=model.named_parameters(), report=True)
        for _ in range(3):
            opt.zero_grad()
            model(torch.ones(8, 4)).sum().backward()
            opt.step()
    """, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stderr.splitlines() if "ringd: 2 ranks, " in l]
    assert len(lines) == 1 and lines[0].startswith("[0] "), r.stderr
    assert "speedup " in lines[0]


def test_report_line_sums_up_a_report():
    from ringd._report import report_line

    r = {"ranks_reporting": 4, "wall_s": 16.0, "useful_s": 40.0, "wait_s": 16.0,
         "transfer_s": 8.0, "failure_s": 0.0, "speedup": 2.5, "efficiency": 0.625,
         "waited_most": {"rank": 3, "host": "d", "late_s": 4.0, "late_calls": 100},
         "energy_source": "estimated", "energy_j": 315.0,
         "hosts": [{"host": "a", "reported": True}, {"host": "c", "reported": False}]}
    assert report_line(r) == (
        "4 ranks, 16.0 s: compute 62%, wait 25%, transfer 12%, failure 0%; speedup 2.50 of 4 "
        "(efficiency 62%); the others waited most for rank 3 on d (4.0 s); energy 315 J "
        "(estimated); no summary from c")
    assert report_line({"ranks_reporting": 0}) == "no rank has reported"


def test_the_first_rank_that_fails_stops_the_others_at_once_and_is_named(tmp_path):
    start = time.monotonic()
    r = launcher("-n", "4", code=FAILING, cwd=tmp_path)
    took = time.monotonic() - start
    assert r.returncode == 1, r.stderr
    assert took < 15, f"took {took:.1f} s: the others waited for their collective's timeout"
    assert "not reached" not in r.stdout
    assert "[1] RuntimeError: rank 1 fails on purpose" in r.stderr
    # The failed rank is named, first and last, and its traceback ends the
    # output, although the others fail within milliseconds of it (ringd
    # tells them at once) and may be seen to exit first.
    first = [l for l in r.stderr.splitlines() if l.startswith("ringd.launch: rank ")]
    assert first[0].startswith("ringd.launch: rank 1 (pid"), r.stderr
    tail = r.stderr.rstrip().splitlines()
    assert tail[-1] == "ringd.launch: rank 1 exited with status 1; ranks stopped: 0, 2, 3"
    assert "  [1] RuntimeError: rank 1 fails on purpose" in tail[-3:-1]


def test_a_rank_killed_by_a_signal_is_blamed_with_it(tmp_path):
    r = launcher("-n", "3", code="""
        import os, signal, time, ringd
        c = ringd.connect()
        if c.rank == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)
    """, cwd=tmp_path)
    assert r.returncode == 128 + signal.SIGKILL
    assert "rank 2 was killed by SIGKILL; ranks stopped: 0, 1" in r.stderr


def test_a_rank_that_exits_early_with_status_0_is_blamed_for_the_others_failing(tmp_path):
    r = launcher("-n", "3", code="""
        import ringd, sys, numpy as np
        c = ringd.connect()
        c.allreduce(np.ones(4))
        if c.rank == 1:
            sys.exit(0)               # done, it thinks: the others are not
        c.allreduce(np.ones(4))       # fails on every other rank, naming rank 1
    """, cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    assert "allreduce failed: rank 1 (pid" in r.stderr  # the others' own errors
    first = [l for l in r.stderr.splitlines() if l.startswith("ringd.launch: rank ")]
    assert first[0].startswith("ringd.launch: rank 1 (pid"), r.stderr
    assert "exited with status 0 after" in first[0] and "while the others still needed it" \
        in first[0], r.stderr
    tail = r.stderr.rstrip().splitlines()
    assert tail[-1].startswith("ringd.launch: rank 1 exited with status 0 while the others "
                               "still needed it; ranks stopped: "), tail[-1]


def test_ctrl_c_is_passed_on_to_every_rank(tmp_path):
    code = textwrap.dedent("""
        import signal, sys, time
        def bye(*_):
            print("got SIGINT", flush=True)
            sys.exit(0)
        signal.signal(signal.SIGINT, bye)
        print("ready", flush=True)
        time.sleep(60)
    """)
    p = subprocess.Popen([PYTHON, "-m", "ringd.launch", "-n", "2", "--", PYTHON, "-c", code],
                         env=ENV, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        ready = []
        deadline = time.monotonic() + 60
        while len(ready) < 2 and time.monotonic() < deadline:
            line = p.stdout.readline()
            if line.rstrip().endswith("ready"):
                ready.append(line)
        assert len(ready) == 2
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 128 + signal.SIGINT
    assert sorted(out.splitlines()) == ["[0] got SIGINT", "[1] got SIGINT"]
    assert "got SIGINT: passing it on to every rank" in err


def test_launching_needs_no_numpy(tmp_path):
    code = (
        "import sys, runpy\n"
        "sys.modules['numpy'] = None  # import numpy fails\n"
        "sys.argv = ['ringd.launch', '-n', '2', '--', 'sh', '-c', 'echo $RANK']\n"
        "runpy.run_module('ringd.launch', run_name='__main__')\n"
    )
    r = subprocess.run([PYTHON, "-c", code], env=ENV, cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["[0] 0", "[1] 1"]


def test_hosts_and_hostfiles_are_read_in_ring_order(tmp_path):
    assert launch.parse_hosts("a:2,b, c:1") == [("a", 2), ("b", 1), ("c", 1)]
    assert launch.parse_hosts("a\nb slots=3\n# c\n", 2) == [("a", 2), ("b", 3)]
    with pytest.raises(ValueError):
        launch.parse_hosts("a:0")
    argv = launch.remote_argv("ssh -p 22 {host} {cmd}", "n1", "echo 'x'")
    assert argv == ["ssh", "-p", "22", "n1", "sh -c 'echo '\"'\"'x'\"'\"''"]
    assert launch.remote_argv("ip netns exec {host}", "ns", "true") == [
        "ip", "netns", "exec", "ns", "sh", "-c", "true"]


def test_find_ringd_honours_ringd_bin(monkeypatch):
    monkeypatch.setenv("RINGD_BIN", "/some/where/ringd")
    assert launch.find_ringd() == "/some/where/ringd"


# ---- several hosts: the namespace testbed ---------------------------------------------

TESTBED = SOURCE / "tests" / "netns" / "testbed.sh"


@pytest.fixture
def testbed_ring(tmp_path):
    """3 hosts as network namespaces, a ringd in each, with its socket
    in a directory of its own: yields (namespaces, socket directory)."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("the testbed needs root and iproute2")
    name = subprocess.run(["bash", str(TESTBED), "up", "3", "none"], capture_output=True,
                          text=True, timeout=60, check=True).stdout.strip()
    namespaces = [f"{name}-h{i}" for i in range(3)]
    sockets = tempfile.mkdtemp(prefix="ringd-tb-", dir="/tmp")  # short: socket paths
    daemons = []
    try:
        config = Path(sockets) / "ringd.yaml"
        lines = ["cluster: tb", "collective_timeout: 60s", "hosts:"]
        for i, ns in enumerate(namespaces):
            lines += [f"  - name: {ns}", f"    address: 198.18.0.{i + 1}:7701",
                      f"    socket: {sockets}/{ns}.sock"]
        config.write_text("\n".join(lines) + "\n")
        for ns in namespaces:
            daemons.append(subprocess.Popen(
                ["ip", "netns", "exec", ns, launch.find_ringd(), "--config", str(config),
                 "--host", ns], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 20
        while not all(os.path.exists(f"{sockets}/{ns}.sock") for ns in namespaces):
            assert time.monotonic() < deadline, "the daemons did not start"
            time.sleep(0.05)
        yield namespaces, sockets
    finally:
        for d in daemons:
            d.terminate()
        for d in daemons:
            try:
                d.wait(15)
            except subprocess.TimeoutExpired:
                d.kill()
                d.wait()
        subprocess.run(["bash", str(TESTBED), "down", name], capture_output=True, timeout=60)
        shutil.rmtree(sockets, ignore_errors=True)


def on_testbed(namespaces, sockets, code, tmp_path, slots=""):
    hosts = ",".join(ns + slots for ns in namespaces)
    remote = f"ip netns exec {{host}} env RINGD_SOCKET={sockets}/{{host}}.sock"
    return launcher("--hosts", hosts, "--remote", remote, "--timeout", "90", code=code,
                    cwd=tmp_path)


def leftovers(namespaces):
    """Processes still in the namespaces, other than the daemons."""
    out = []
    for ns in namespaces:
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                              text=True).stdout.split()
        for pid in pids:
            try:
                exe = os.readlink(f"/proc/{pid}/exe")
            except OSError:
                continue
            if not exe.endswith("/ringd"):
                out.append((ns, pid, exe))
    return out


def test_ranks_on_several_hosts_run_through_the_remote_shell(testbed_ring, tmp_path):
    namespaces, sockets = testbed_ring
    r = on_testbed(namespaces, sockets, """
        import os, ringd, numpy as np
        c = ringd.connect()
        s = int(c.allreduce(np.array([c.rank + 1], np.int64))[0])
        print(os.environ["RANK"], c.rank, c.size, s, os.getcwd(), flush=True)
    """, tmp_path)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == [f"[{k}] {k} {k} 3 6 {tmp_path}" for k in range(3)]


def test_a_failing_rank_on_one_host_stops_the_others_on_theirs(testbed_ring, tmp_path):
    namespaces, sockets = testbed_ring
    start = time.monotonic()
    r = on_testbed(namespaces, sockets, FAILING, tmp_path)
    took = time.monotonic() - start
    assert r.returncode == 1, r.stderr
    assert took < 20, f"took {took:.1f} s"
    assert "not reached" not in r.stdout
    assert r.stderr.rstrip().splitlines()[-1] == (
        "ringd.launch: rank 1 exited with status 1; ranks stopped: 0, 2")
    deadline = time.monotonic() + 10  # the remote shells' last kill
    while leftovers(namespaces) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not leftovers(namespaces)
