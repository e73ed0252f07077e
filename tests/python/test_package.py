"""The package as a user meets it: importing it from a checkout or from an
install finds libringd and ringd by themselves; the example."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import import_torch

import ringd

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent.parent
PYTHON = sys.executable


def clean_env(**extra):
    """os.environ without the variables that point the package at a build."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("RINGD_LIBRARY", "RINGD_BIN", "PYTHONPATH", "RINGD_SOCKET",
                        "RINGD_TORCH_EXT")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra)
    return env


def run_python(code, env, cwd, timeout=120):
    return subprocess.run([PYTHON, "-c", code], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def test_import_in_a_checkout_finds_the_library_in_its_build_tree(tmp_path):
    fake = tmp_path / "checkout"
    shutil.copytree(SOURCE / "client" / "python" / "ringd", fake / "client" / "python" / "ringd",
                    ignore=shutil.ignore_patterns("__pycache__", "_paths.py"))
    (fake / "client" / "include").mkdir(parents=True)
    (fake / "client" / "include" / "ringd.h").write_text("")
    (fake / "build" / "client").mkdir(parents=True)
    (fake / "build" / "client" / "libringd.so.0").symlink_to(ringd.library_path())
    r = run_python("import ringd; print(ringd.library_path())",
                   clean_env(PYTHONPATH=str(fake / "client" / "python")), tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(fake / "build" / "client" / "libringd.so.0")


def test_a_bad_ringd_library_fails_at_connect_naming_it(tmp_path):
    code = ("import ringd\n"
            "try:\n    ringd.connect()\nexcept OSError as e:\n    print('OSError', e)\n")
    r = run_python(code, clean_env(RINGD_LIBRARY="/nonexistent/libringd.so.0",
                                   PYTHONPATH=str(SOURCE / "client" / "python")), tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("OSError") and "/nonexistent/libringd.so.0" in r.stdout


def test_cmake_install_puts_a_package_that_finds_the_installed_library(tmp_path):
    build = os.environ.get("RINGD_BINARY_DIR")
    if not build:
        pytest.skip("RINGD_BINARY_DIR is not set (ctest sets it)")
    prefix = tmp_path / "prefix"
    # Not under the sanitizer runtime that a sanitized build preloads for us.
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    subprocess.run(["cmake", "--install", build, "--prefix", str(prefix)], check=True,
                   capture_output=True, timeout=120, env=env)
    found = sorted(prefix.glob("lib/python3*/dist-packages/ringd/__init__.py"))
    if not found:
        pytest.skip("the build does not install client/python (add_subdirectory(client/python))")
    site = found[0].parent.parent
    code = ("import ringd, ringd.launch\n"
            "print(ringd.library_path())\nprint(ringd.launch.find_ringd())\n")
    r = run_python(code, clean_env(PYTHONPATH=str(site), PATH="/usr/bin:/bin"), tmp_path)
    assert r.returncode == 0, r.stderr
    lib, daemon = r.stdout.split()
    assert Path(lib).name == "libringd.so.0"
    assert Path(lib).is_relative_to(prefix) and Path(lib).is_file(), lib
    assert Path(daemon) == prefix / "bin" / "ringd"
    if os.environ.get("RINGD_TORCH_EXT"):  # the build has the torch.distributed backend
        code = "from ringd.torch import _distributed as d\nprint(d._extension().__file__)\n"
        r = run_python(code, clean_env(PYTHONPATH=str(site), PATH="/usr/bin:/bin"), tmp_path)
        assert r.returncode == 0, r.stderr
        assert Path(r.stdout.strip()).is_relative_to(site / "ringd" / "torch"), r.stdout
    # ... and runs collectives with what it found.
    code = ("import numpy, os, ringd\nc = ringd.connect()\n"
            "os.write(1, b'%r\\n' % float(c.allreduce(numpy.ones(3) * (c.rank + 1))[0]))\n")
    r = subprocess.run([PYTHON, "-m", "ringd.launch", "-n", "2", "--timeout", "60",
                        "--no-prefix", "--", PYTHON, "-c", code], env=clean_env(PYTHONPATH=str(site),
                                                            PATH="/usr/bin:/bin"),
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["3.0", "3.0"]


def test_the_training_example_runs_and_checks_itself(tmp_path):
    import_torch()
    env = dict(os.environ, PYTHONPATH=str(SOURCE / "client" / "python"),
               PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1")
    r = subprocess.run([PYTHON, str(SOURCE / "examples" / "train_mlp.py"), "--launch", "4",
                        "--epochs", "2", "--samples", "1024"],
                       env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "epoch   2  loss per rank:" in r.stdout
    assert "all 4 replicas bit-identical" in r.stdout
    assert "matches: OK" in r.stdout




def test_the_ddp_example_trains_with_one_changed_line(tmp_path):
    import_torch()
    env = dict(os.environ, PYTHONPATH=str(SOURCE / "client" / "python"),
               PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1")
    r = subprocess.run([PYTHON, "-m", "ringd.launch", "-n", "3", "--timeout", "200", "--",
                        PYTHON, str(SOURCE / "examples" / "train_ddp.py")],
                       env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[0] epoch 3: mean loss" in r.stdout
    assert "[0] 3 replicas identical" in r.stdout
