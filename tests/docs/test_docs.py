"""The documents say what the code does, and say it alike.

The configuration reference lives in three places for three readers: the
README, ringd(8) and deploy/ringd.example.yaml. They must agree with each
other and with config/config.c's key tables (tests/reference.py reads
them); tests/service checks that the daemon does what they say on reload.
"""
import glob
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import reference  # noqa: E402
from reference import path  # noqa: E402

DOCS = ["README.md", "deploy/man/man8/ringd.8", "deploy/ringd.example.yaml"]
DURATION_KEYS = ["collective_timeout", "connect_timeout", "backoff_initial", "backoff_max",
                 "heartbeat_interval", "heartbeat_timeout"]


def read(rel):
    with open(path(rel)) as f:
        return f.read()


def test_the_readme_ringd8_and_the_example_say_the_same_about_reload():
    classes = {doc: reference.reload_classes(doc) for doc in DOCS}
    for doc in DOCS[1:]:
        assert classes[doc] == classes[DOCS[0]], "%s and %s differ on reload:\n%s\n%s" % (
            DOCS[0], doc, classes[DOCS[0]], classes[doc])


def test_reload_puts_every_top_level_key_in_exactly_one_class():
    top, _ = reference.config_keys()
    classes = reference.reload_classes(DOCS[0])
    named = [k for keys in classes.values() for k in keys]
    assert sorted(named) == sorted(set(named)), "a key in two classes: %s" % classes
    assert set(named) == set(top), "not config keys: %s; keys left out: %s" % (
        set(named) - set(top), set(top) - set(named))


def test_the_example_documents_every_key_the_parser_accepts():
    top, host = reference.config_keys()
    text = read("deploy/ringd.example.yaml")
    for key in top:
        assert re.search(r"^(# )?%s:" % key, text, re.M), "%s is not in the example" % key
    hosts_comment = re.search(r"^# The ring, in ring order.*?^hosts:", text, re.M | re.S).group(0)
    for key in host:
        assert re.search(r"^#\s+%s\s" % key, hosts_comment, re.M), (
            "the example's hosts comment does not describe %s" % key)


def test_no_file_shows_a_duration_without_a_unit():
    """A bare number is refused ("add a unit, e.g. 30s"); no example may show one."""
    files = DOCS + ["deploy/man/man1/ringctl.1", "tests/FAULTS.md", "bench/RESULTS.md",
                    "proto/PROTOCOL.md"]
    for pattern in ["deploy/*.sh", "examples/*", "bench/*.sh", "bench/*.c", "tests/*/*.c",
                    "tests/*/*.py", "tests/*/*.sh", "tests/*/*.h", "client/python/ringd/*.py"]:
        files += [os.path.relpath(f, reference.SOURCE) for f in glob.glob(path(pattern))]
    bare = re.compile(r"\b(%s)[\"']?\s*:\s*[\"']?(\d+)(?![\d.]*\s*(ms|s|m|h)\b)(?!\s*(sec|min))"
                      % "|".join(DURATION_KEYS))
    # The parser's own test shows bare numbers on purpose, to see them refused.
    files = [f for f in files if f != "tests/config/test_config.c"]
    found = []
    for f in sorted(set(files)):
        if not os.path.isfile(path(f)):
            continue
        for n, line in enumerate(read(f).splitlines(), 1):
            if bare.search(line):
                found.append("%s:%d: %s" % (f, n, line.strip()))
    assert not found, "durations without a unit:\n" + "\n".join(found)


def readme_install_table():
    """{script: purpose} from the README's table of what each command installs."""
    rows = re.findall(r"^\| `([^`]+)` \| (`--[a-z]+`|everything)", read("README.md"), re.M)
    assert rows, "the README has no table of what each command installs"
    return {script: purpose.strip("`") for script, purpose in rows}


def test_each_script_installs_what_the_readme_says_and_no_more():
    for script, purpose in readme_install_table().items():
        calls = re.findall(r"install-deps\.sh\"?( --[a-z]+)?", read(script))
        assert calls, "%s does not call deploy/install-deps.sh" % script
        args = {(c.strip() or "everything") for c in calls}
        assert args == {purpose}, "%s installs %s, the README says %s" % (script, args, purpose)


def test_examples_install_no_test_tools():
    def packages(purpose):
        args = [path("deploy/install-deps.sh"), "--list"] + ([purpose] if purpose else [])
        return set(subprocess.run(["bash"] + args, capture_output=True, text=True,
                                  check=True).stdout.split())
    everything = packages(None)
    for purpose in ["--build", "--python", "--bench", "--package"]:
        assert packages(purpose) <= everything
        for tool in ["clang-14", "lintian", "mmdebstrap", "man-db", "python3-pytest"]:
            assert tool not in packages(purpose), "%s installs %s" % (purpose, tool)
    assert "iperf3" not in packages("--python") and "python3-torch" not in packages("--build")


def test_every_build_target_the_readme_names_exists():
    targets = set(re.findall(r"--target\s+([a-z_]+)", read("README.md")))
    defined = set()
    for f in glob.glob(path("**/CMakeLists.txt"), recursive=True):
        if "/build" not in os.path.relpath(f, reference.SOURCE):
            defined |= set(re.findall(r"add_(?:executable|library)\((\w+)", read(f)))
    assert targets and targets <= defined, "not targets: %s" % (targets - defined)


def test_the_version_is_one_everywhere():
    version = re.search(r"project\(ringd VERSION ([0-9.]+)", read("CMakeLists.txt")).group(1)
    header = read("client/include/ringd.h")
    parts = [re.search(r"#define RINGD_VERSION_%s (\d+)" % p, header).group(1)
             for p in ("MAJOR", "MINOR", "PATCH")]
    assert ".".join(parts) == version, "ringd.h says %s" % ".".join(parts)
    for man in ["deploy/man/man8/ringd.8", "deploy/man/man1/ringctl.1"]:
        assert '"ringd %s"' % version in read(man).splitlines()[0], man
    assert '__version__ = "%s"' % version in read("client/python/ringd/__init__.py")
