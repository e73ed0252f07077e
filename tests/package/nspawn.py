"""Debian 12 containers booted by systemd-nspawn, for the container stage.

root(packages) builds, once, a minimal Debian 12 root filesystem with
mmdebstrap from this machine's own Debian apt sources, holding systemd and
the given packages (the dependencies of the packages under test: the
containers have no network to fetch them). It is cached under
$RINGD_TEST_CACHE (default /var/cache/ringd-test), keyed by what went into
it, and never written to: each container boots it with --volatile=overlay,
its changes in a tmpfs.

Container boots one with systemd as PID 1:
  systemd-nspawn --register=no --keep-unit -b -D ROOT ...
(no machined, no scope unit: this machine's PID 1 need not be systemd),
moves a network interface into it, and runs commands inside with
nsenter -t PID -a. A directory of the host is
bound read-only at /srv/ringd-test (the container's /tmp is a fresh tmpfs).

Unavailable(reason) says the machine cannot do this at all; a test stage
turns it into a skip naming the reason.
"""
import glob
import hashlib
import os
import shutil
import signal
import subprocess
import time

CACHE = os.environ.get("RINGD_TEST_CACHE", "/var/cache/ringd-test")
SHARE = "/srv/ringd-test"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BOOT_TIMEOUT = 90
ROOT_TIMEOUT = 900


class Unavailable(Exception):
    """The machine cannot build or boot the containers; the text says why."""


def check_machine():
    """Raises Unavailable unless this machine can boot containers at all."""
    if os.geteuid() != 0:
        raise Unavailable("needs root (systemd-nspawn, mmdebstrap, veth pairs)")
    for tool, pkg in [("systemd-nspawn", "systemd-container"), ("mmdebstrap", "mmdebstrap"),
                      ("nsenter", "util-linux"), ("ip", "iproute2")]:
        if not shutil.which(tool):
            raise Unavailable("%s is not installed (Debian package %s; deploy/install-deps.sh)"
                              % (tool, pkg))
    if not os.path.isdir("/sys/fs/cgroup") or not os.listdir("/sys/fs/cgroup"):
        raise Unavailable("no cgroup file system at /sys/fs/cgroup, which systemd needs")


def debian_sources():
    """This machine's apt source files for Debian 12 (mmdebstrap takes each as
    a mirror), so that the root comes from where this machine's packages do."""
    files = [f for f in ["/etc/apt/sources.list"] if os.path.isfile(f)]
    files += sorted(glob.glob("/etc/apt/sources.list.d/*.list")
                    + glob.glob("/etc/apt/sources.list.d/*.sources"))
    out = []
    for f in files:
        text = open(f).read()
        lines = [l for l in text.splitlines() if l.strip() and not l.lstrip().startswith("#")]
        if any("bookworm" in l for l in lines) and any("debian" in l for l in lines):
            out.append(f)
    if not out:
        raise Unavailable("no Debian 12 (bookworm) source in /etc/apt/sources.list*")
    return out


def root(packages):
    """Path of the cached root with systemd and packages, built if missing."""
    sources = debian_sources()
    include = sorted(set(["systemd"] + list(packages)))
    version = subprocess.run(["mmdebstrap", "--version"], capture_output=True,
                             text=True).stdout.strip()
    key = hashlib.sha256("\n".join([version, ",".join(include)] +
                                   [open(f).read() for f in sources]).encode()).hexdigest()[:16]
    path = os.path.join(CACHE, "bookworm-" + key)
    if os.path.isfile(os.path.join(path, "etc", "os-release")):
        return path
    os.makedirs(CACHE, exist_ok=True)
    tmp = "%s.tmp-%d" % (path, os.getpid())
    cmd = ["mmdebstrap", "--variant=minbase", "--include=" + ",".join(include),
           "--aptopt=Acquire::Check-Valid-Until \"false\"",
           # The container's host name is its machine name (-M), which an
           # /etc/hostname copied from this machine would override.
           "--customize-hook=rm -f \"$1/etc/hostname\"",
           "bookworm", tmp] + sources
    t = time.monotonic()
    r = subprocess.run(["nice", "-n", "10"] + cmd, capture_output=True, text=True,
                       timeout=ROOT_TIMEOUT)
    if r.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise Unavailable("mmdebstrap could not build the Debian 12 root (exit %d): %s" % (
            r.returncode, (r.stderr or r.stdout).strip().splitlines()[-3:]))
    os.rename(tmp, path)
    print("built %s in %.0f s" % (path, time.monotonic() - t))
    # Roots of other keys are stale: keep the cache to one.
    for old in glob.glob(os.path.join(CACHE, "bookworm-*")):
        if old != path and ".tmp-" not in old:
            shutil.rmtree(old, ignore_errors=True)
    return path


class Container:
    """A booted container: name (also its host name), its PID 1, run()."""

    def __init__(self, root_dir, name, share, interface=None):
        self.root, self.name, self.share, self.interface = root_dir, name, share, interface
        self.proc = None
        self.pid = None
        self.log = os.path.join(share, name + ".console")

    def start(self):
        """Starts the boot; wait_booted() waits for it."""
        cmd = ["systemd-nspawn", "--register=no", "--keep-unit", "--boot", "--quiet",
               "--directory=" + self.root, "--machine=" + self.name, "--volatile=overlay",
               "--console=read-only", "--bind-ro=%s:%s" % (self.share, SHARE)]
        if self.interface:
            # Not --network-interface=, which wants the interface initialised
            # by udev, and this machine need not run udev: an empty network
            # namespace now, the interface moved into it once booted.
            cmd.append("--private-network")
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    def console(self, lines=30):
        try:
            with open(self.log, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def wait_booted(self):
        """Waits for PID 1 inside to finish booting; Unavailable if it cannot."""
        end = time.monotonic() + BOOT_TIMEOUT
        while self.pid is None and time.monotonic() < end:
            if self.proc.poll() is not None:
                raise Unavailable("systemd-nspawn could not boot %s (exit %d): %s" % (
                    self.name, self.proc.returncode, self.console(8).strip()))
            try:
                with open("/proc/%d/task/%d/children" % (self.proc.pid, self.proc.pid)) as f:
                    kids = f.read().split()
                for k in kids:
                    with open("/proc/%s/comm" % k) as f:
                        if f.read().strip() == "systemd":
                            self.pid = int(k)
            except OSError:
                pass
            time.sleep(0.1)
        state = ""
        while time.monotonic() < end:
            try:
                state = self.out("systemctl is-system-running --wait", check=False,
                                 timeout=max(1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                break
            if state in ("running", "degraded"):
                if self.interface:
                    subprocess.run(["ip", "link", "set", self.interface, "netns", str(self.pid)],
                                   check=True)
                return
            time.sleep(0.2)
        raise Unavailable("%s did not finish booting in %d s (state %r): %s" % (
            self.name, BOOT_TIMEOUT, state, self.console(8).strip()))

    def run(self, script, check=True, timeout=60, popen=False):
        """Runs sh -c script inside as root; a CompletedProcess (or a Popen)."""
        cmd = ["nsenter", "-t", str(self.pid), "-a", "env", "-i", "PATH=" + PATH,
               "LANG=C.UTF-8", "DEBIAN_FRONTEND=noninteractive", "sh", "-c", script]
        if popen:
            return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True)
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError("%s: `%s` exited %d:\n%s%s" % (
                self.name, script, r.returncode, r.stdout, r.stderr))
        return r

    def out(self, script, **kw):
        return self.run(script, **kw).stdout.strip()

    def stop(self):
        """Powers the container off (SIGTERM to nspawn), SIGKILL after 30 s."""
        if not self.proc or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        shutil.rmtree("/run/systemd/nspawn/propagate/" + self.name, ignore_errors=True)
