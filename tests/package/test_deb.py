"""The Debian packages that `cpack -G DEB` makes (deploy/package.cmake):
their names, files, dependencies and maintainer scripts, and lintian; the
Python module and the torch.distributed backend, unpacked, under Debian's
python3 and python3-torch.

ctest runs cpack first (the fixture deb_packages) and points RINGD_PACKAGES
at its output directory, and RINGD_DEB_NAMES says which packages it makes
(python3-ringd-torch where this machine can build the torch backend).
"""
import glob
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGES = os.environ.get("RINGD_PACKAGES", "build/packages")
VERSION = os.environ.get("RINGD_VERSION", "0.1.0")
ARCH = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True,
                      check=True).stdout.strip()
MULTIARCH = subprocess.run(["dpkg-architecture", "-qDEB_HOST_MULTIARCH"], capture_output=True,
                           text=True, check=True).stdout.strip()
NAMES = {n: "all" if n == "python3-ringd" else ARCH for n in os.environ.get(
    "RINGD_DEB_NAMES", "ringd,libringd0,libringd-dev,python3-ringd").split(",")}
TORCH = "python3-ringd-torch"
PY = "/usr/lib/python3/dist-packages/ringd/"


def dpkg_query(pkg, fmt):
    """A field of a host package (dpkg-query -W -f FMT), "" if it is unknown."""
    return subprocess.run(["dpkg-query", "-W", "-f", fmt, pkg], capture_output=True,
                          text=True).stdout.strip()


def installed(pkg):
    return dpkg_query(pkg, "${Status}").endswith(" installed")


def needs_torch_package():
    """Skips unless cpack made python3-ringd-torch, which it must where
    Debian's torch and its headers are installed (deploy/install-deps.sh)."""
    if TORCH in NAMES:
        return
    can = all(installed(p) for p in ["python3-torch", "libtorch-dev", "pybind11-dev",
                                     "python3-dev"])
    assert not can, "python3-torch, libtorch-dev, pybind11-dev and python3-dev are installed, " \
        "but cpack made no %s (client/python/torch_ext, deploy/CMakeLists.txt)" % TORCH
    pytest.skip("no %s: this machine cannot build the torch backend "
                "(deploy/install-deps.sh installs what it needs)" % TORCH)


def deb(name):
    return os.path.join(PACKAGES, "%s_%s_%s.deb" % (name, VERSION, NAMES[name]))


def relations(name, key="Depends"):
    """[(package, constraint or None)] of a relation field, in order (a
    package may appear twice, bounded from both sides)."""
    out = []
    for rel in filter(None, (r.strip() for r in field(name, key).split(","))):
        m = re.match(r"^(\S+)(?:\s*\((.*)\))?$", rel)
        out.append((m.group(1), m.group(2)) if m else (rel, None))
    return out


def field(name, key):
    return subprocess.run(["dpkg-deb", "-f", deb(name), key], capture_output=True, text=True,
                          check=True).stdout.strip()


def depends(name, key="Depends"):
    """{package: constraint} of a relation field; alternatives as 'a | b'."""
    return dict(relations(name, key))


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


def test_cpack_makes_the_packages_named_as_debian_names_them():
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
    got = files("python3-ringd")
    assert {PY + f for f in ["__init__.py", "_core.py", "_lib.py", "_paths.py"]} <= got
    assert all(p.startswith(PY) and p.endswith(".py") for p in got - docs("python3-ringd")), got


def test_python3_ringd_torch_holds_the_extension_for_debians_python3():
    needs_torch_package()
    suffix = subprocess.run(["/usr/bin/python3", "-c",
                             "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    assert files(TORCH) == {PY + "torch/_ringd_pg" + suffix,
                            "/usr/share/doc/%s/copyright" % TORCH,
                            "/usr/share/doc/%s/changelog.gz" % TORCH}


def test_python3_ringd_torch_depends_on_the_torch_and_python_it_was_built_for():
    needs_torch_package()
    torch = subprocess.run(["/usr/bin/python3", "-c", "import torch; print(torch.__version__)"],
                           capture_output=True, text=True, check=True).stdout.strip()
    major, minor = map(int, torch.split(".")[:2])
    py = subprocess.run(["/usr/bin/python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                        capture_output=True, text=True, check=True).stdout.strip()
    pmaj, pmin = map(int, py.split("."))
    rel = relations(TORCH)
    assert ("python3-ringd", "= " + VERSION) in rel, rel
    assert ("python3-torch", ">= %d.%d" % (major, minor)) in rel, rel
    assert ("python3-torch", "<< %d.%d~" % (major, minor + 1)) in rel, rel
    assert ("python3", ">= %s~" % py) in rel and ("python3", "<< %d.%d" % (pmaj, pmin + 1)) in rel, rel
    # dpkg-shlibdeps: the library package of the libtorch it links.
    assert any(p == "libtorch%d.%d" % (major, minor) for p, _ in rel), rel
    assert TORCH in depends("python3-ringd", "Suggests")


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
    return dpkg_query(pkg, "${Essential}") == "yes"


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
    for name in ["ringd", "libringd0"] + [n for n in [TORCH] if n in NAMES]:
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


def test_a_ddp_step_with_init_process_group_ringd_from_the_packages(tmp_path):
    needs_torch_package()
    root = tmp_path / "root"
    for name in ["libringd0", "python3-ringd", TORCH, "ringd"]:
        subprocess.run(["dpkg-deb", "-x", deb(name), str(root)], check=True)
    site = root / "usr/lib/python3/dist-packages"
    env = {"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(site),
           "HOME": str(tmp_path)}
    r = subprocess.run(["/usr/bin/python3", "-m", "ringd.launch", "-n", "2", "--timeout", "120",
                        "--", "/usr/bin/python3", os.path.join(HERE, "ddp_step.py")],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in range(2):
        assert "[%d] rank %d of 2: ok, extension %s/ringd/torch/_ringd_pg" % (rank, rank, site) \
            in r.stdout, r.stdout + r.stderr


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
