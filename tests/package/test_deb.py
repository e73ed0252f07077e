"""The Debian packages that `cpack -G DEB` makes (deploy/package.cmake):
their names, files, dependencies and maintainer scripts, and lintian.

ctest runs cpack first (the fixture deb_packages) and points RINGD_PACKAGES
at its output directory.
"""
import glob
import os
import re
import subprocess
import sys

import pytest

PACKAGES = os.environ.get("RINGD_PACKAGES", "build/packages")
VERSION = os.environ.get("RINGD_VERSION", "0.1.0")
ARCH = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True,
                      check=True).stdout.strip()
MULTIARCH = subprocess.run(["dpkg-architecture", "-qDEB_HOST_MULTIARCH"], capture_output=True,
                           text=True, check=True).stdout.strip()
NAMES = {"ringd": ARCH, "libringd0": ARCH, "libringd-dev": ARCH, "python3-ringd": "all"}


def deb(name):
    return os.path.join(PACKAGES, "%s_%s_%s.deb" % (name, VERSION, NAMES[name]))


def field(name, key):
    return subprocess.run(["dpkg-deb", "-f", deb(name), key], capture_output=True, text=True,
                          check=True).stdout.strip()


def depends(name, key="Depends"):
    """{package: constraint} of a relation field; alternatives as 'a | b'."""
    out = {}
    for rel in filter(None, (r.strip() for r in field(name, key).split(","))):
        m = re.match(r"^(\S+)(?:\s*\((.*)\))?$", rel)
        out[m.group(1) if m else rel] = m.group(2) if m else None
    return out


def files(name):
    """Regular files and symlinks of a package, as absolute paths."""
    out = subprocess.run(["dpkg-deb", "-c", deb(name)], capture_output=True, text=True,
                         check=True).stdout
    paths = set()
    for line in out.splitlines():
        perms, owner, path = line.split()[0], line.split()[1], line.split(None, 5)[5]
        assert owner == "root/root", line
        if not perms.startswith("d"):
            paths.add(path.split(" -> ")[0].lstrip("."))
    return paths


def control(name, member):
    r = subprocess.run(["sh", "-c", "dpkg-deb --ctrl-tarfile \"$0\" | tar -xOf - ./\"$1\"",
                        deb(name), member], capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else None


def test_cpack_makes_four_packages_named_as_debian_names_them():
    made = sorted(os.path.basename(p) for p in glob.glob(os.path.join(PACKAGES, "*.deb")))
    assert made == sorted(os.path.basename(deb(n)) for n in NAMES), made
    for name, arch in NAMES.items():
        assert field(name, "Package") == name
        assert field(name, "Version") == VERSION
        assert field(name, "Architecture") == arch


def test_each_package_holds_its_files_under_usr():
    lib = "/usr/lib/" + MULTIARCH
    docs = lambda p: {"/usr/share/doc/%s/copyright" % p, "/usr/share/doc/%s/changelog.gz" % p}
    assert files("ringd") == {
        "/usr/bin/ringd", "/usr/bin/ringctl",
        "/usr/lib/systemd/system/ringd.service", "/usr/lib/sysusers.d/ringd.conf",
        "/usr/lib/tmpfiles.d/ringd.conf",
        "/usr/share/man/man8/ringd.8.gz", "/usr/share/man/man1/ringctl.1.gz",
        "/usr/share/man/man5/ringd.yaml.5.gz",
        "/usr/share/ringd/ringd.example.yaml", "/usr/share/ringd/ringd.service",
        "/usr/share/ringd/ringd.sysusers", "/usr/share/ringd/ringd.tmpfiles"} | docs("ringd")
    assert files("libringd0") == {lib + "/libringd.so.0", lib + "/libringd.so.%s" % VERSION,
                                  "/usr/share/lintian/overrides/libringd0"} | docs("libringd0")
    assert files("libringd-dev") == {"/usr/include/ringd.h", lib + "/libringd.so",
                                     lib + "/pkgconfig/ringd.pc"} | docs("libringd-dev")
    py = "/usr/lib/python3/dist-packages/ringd/"
    got = files("python3-ringd")
    assert {py + f for f in ["__init__.py", "_core.py", "_lib.py", "_paths.py"]} <= got
    assert all(p.startswith(py) and p.endswith(".py") for p in got - docs("python3-ringd")), got


def test_the_daemon_depends_on_its_libraries_through_shlibdeps_and_on_systemd():
    d = depends("ringd")
    for lib in ["libc6", "libuv1", "libyaml-0-2", "libssl3", "libsystemd0"]:
        assert lib in d, "ringd does not depend on %s: %s" % (lib, d)
    assert d["libringd0"] == "= " + VERSION
    assert "systemd" in d
    assert depends("libringd-dev")["libringd0"] == "= " + VERSION
    assert "libc6" in depends("libringd0")


def test_python3_ringd_depends_on_python3_numpy_and_the_library():
    d = depends("python3-ringd")
    assert {"python3:any", "python3-numpy", "libringd0"} <= set(d), d
    assert "ringd" in depends("python3-ringd", "Recommends")


def test_libringd0_declares_its_soname_and_lets_the_ldconfig_trigger_run():
    assert control("libringd0", "shlibs").strip() == "libringd 0 libringd0 (>= %s)" % VERSION
    assert "activate-noawait ldconfig" in control("libringd0", "triggers")
    for script in ["postinst", "postrm"]:
        assert "ldconfig" not in re.sub(r"#.*", "", control("libringd0", script))


def owner(path):
    """The host package that ships path (dpkg -S), or None."""
    r = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True)
    owners = [l.split(":")[0] for l in r.stdout.splitlines() if not l.startswith("diversion ")]
    return owners[0] if r.returncode == 0 and owners else None


def essential(pkg):
    r = subprocess.run(["dpkg-query", "-W", "-f", "${Essential}", pkg], capture_output=True,
                       text=True)
    return r.stdout.strip() == "yes"


def test_every_command_of_the_unit_is_in_the_package_an_essential_one_or_a_dependency():
    unit = subprocess.run(["sh", "-c", "dpkg-deb --fsys-tarfile \"$0\" | tar -xOf - "
                           "./usr/lib/systemd/system/ringd.service", deb("ringd")],
                          capture_output=True, text=True, check=True).stdout
    assert "ExecStart=/usr/bin/ringd --config /etc/ringd/ringd.yaml" in unit
    deps = set(depends("ringd"))
    for m in re.finditer(r"^Exec\w+=[-+@!:]*(\S+)", unit, re.M):
        path = m.group(1)
        if path in files("ringd"):
            continue
        pkg = owner(path)
        assert pkg and (essential(pkg) or pkg in deps), (
            "%s needs %s, from %s: neither essential nor a dependency of ringd" % (
                m.group(0), path, pkg))


def test_the_maintainer_scripts_never_start_or_enable_the_service():
    post = control("ringd", "postinst")
    # What the postinst asks of systemd: a daemon-reload, and after an
    # upgrade a try-restart (of a service that runs already).
    actions = re.findall(r"\b(?:systemctl|deb-systemd-invoke|deb-systemd-helper)((?:\s+-\S+)*)\s+(\S+)",
                         re.sub(r"#.*", "", post))
    assert actions and {a for _, a in actions} <= {"daemon-reload", "try-restart"}, actions
    assert "systemd-sysusers ringd.conf" in post and "systemd-tmpfiles --create ringd.conf" in post
    assert "daemon-reload" in post
    assert "deb-systemd-invoke stop ringd.service" in control("ringd", "prerm")


def test_no_binary_carries_an_rpath(tmp_path):
    for name in ["ringd", "libringd0"]:
        root = tmp_path / name
        subprocess.run(["dpkg-deb", "-x", deb(name), str(root)], check=True)
        for path in files(name):
            f = str(root) + path
            if os.path.islink(f) or not open(f, "rb").read(4) == b"\x7fELF":
                continue
            dyn = subprocess.run(["readelf", "-d", f], capture_output=True, text=True,
                                 check=True).stdout
            assert "RPATH" not in dyn and "RUNPATH" not in dyn, (path, dyn)


def test_the_python_module_is_on_debians_path_and_loads_the_packaged_library(tmp_path):
    assert "/usr/lib/python3/dist-packages" in subprocess.run(
        ["/usr/bin/python3", "-c", "import sys; print('\\n'.join(sys.path))"],
        capture_output=True, text=True, check=True).stdout.split()
    root = tmp_path / "root"
    for name in ["libringd0", "python3-ringd", "ringd"]:
        subprocess.run(["dpkg-deb", "-x", deb(name), str(root)], check=True)
    env = {"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": str(root / "usr/lib/python3/dist-packages")}
    r = subprocess.run(["/usr/bin/python3", "-c",
                        "import ringd, ringd.launch; print(ringd.library_path()); "
                        "print(ringd.launch.find_ringd()); print(ringd.__version__)"],
                       capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lib, daemon, version = r.stdout.splitlines()
    assert lib == str(root / ("usr/lib/%s/libringd.so.0" % MULTIARCH))
    assert daemon == str(root / "usr/bin/ringd")
    assert version == VERSION


def test_lintian_finds_no_error_and_no_warning():
    if not os.path.exists("/usr/bin/lintian"):
        pytest.skip("lintian is not installed (deploy/install-deps.sh installs it)")
    r = subprocess.run(["lintian", "--display-level", ">=info", "--allow-root"]
                       + [deb(n) for n in NAMES], capture_output=True, text=True, timeout=240)
    tags = [l for l in r.stdout.splitlines() if re.match(r"^[EWIPXO]: ", l)]
    print("lintian:\n" + "\n".join(tags))
    bad = [t for t in tags if t[0] in "EW"]
    assert not bad, "\n".join(bad)
    assert r.returncode == 0, r.stdout + r.stderr
