"""The documents say what the code does, and say it alike.

The configuration reference is ringd.yaml(5) (deploy/man/man5/ringd.yaml.5):
its entries must be config/config.c's keys, with the parser's ranges,
defaults and words (tests/reference.py reads them), and its RELOADING
section must put every key in one class; deploy/ringd.example.yaml, an
annotated example, shows every key and says the same about reload
(tests/service checks that the daemon does what it says). The README and
docs/ link to it, and their commands, links and tables must hold: what each
script installs (against deploy/install-deps.sh), the build targets they
name, the test command CI runs, the test labels.
"""
import glob
import json
import os
import re
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import reference  # noqa: E402
from reference import path  # noqa: E402

MAN5 = reference.MAN5
EXAMPLE = "deploy/ringd.example.yaml"
MANUALS = ["deploy/man/man8/ringd.8", "deploy/man/man1/ringctl.1", MAN5]
DOCS = ["README.md"] + sorted(os.path.relpath(f, reference.SOURCE)
                              for f in glob.glob(path("docs/*.md")))
DURATION_KEYS = ["collective_timeout", "connect_timeout", "backoff_initial", "backoff_max",
                 "heartbeat_interval", "heartbeat_timeout"]


def read(rel):
    with open(path(rel)) as f:
        return f.read()


# ---- the configuration reference ----

def test_ringd_yaml5_has_one_entry_for_each_key_the_parser_accepts():
    top, host = reference.config_keys()
    entries = reference.man_entries()
    assert sorted(entries["top"]) == sorted(top), (
        "ringd.yaml(5) lacks %s; not parser keys: %s" % (
            set(top) - set(entries["top"]), set(entries["top"]) - set(top)))
    assert sorted(entries["host"]) == sorted(host), (
        "ringd.yaml(5), HOST KEYS, lacks %s; not host keys: %s" % (
            set(host) - set(entries["host"]), set(entries["host"]) - set(host)))


def test_ringd_yaml5_states_each_keys_range_default_and_words_as_the_parser_has_them():
    entries = reference.man_entries()["top"]
    wrong = []
    for key, info in reference.key_table().items():
        text = re.sub(r"\s+", " ", entries[key])
        first = re.split(r"\.\s", text)[0]  # the format, range and default
        if info["required"] and "required" not in first:
            wrong.append("%s: does not say it is required" % key)
        value = lambda s: reference.parse_value(s, info["parser"])
        numeric = info["parser"] in ("parse_count", "parse_size", "parse_duration",
                                     "parse_evict_after")
        if numeric and info["max"]:
            m = re.search(r"(\w+)\.\.(\w+)", first)
            if not m or (value(m.group(1)), value(m.group(2))) != (info["min"], info["max"]):
                wrong.append("%s: the parser accepts %s..%s: %r" % (
                    key, reference.show(info["min"], info["parser"]),
                    reference.show(info["max"], info["parser"]), first))
        if info["default"] is not None and info["parser"] != "parse_mode":
            m = re.search(r"default (\w+)", first)
            got = m and (m.group(1) if isinstance(info["default"], str) else value(m.group(1)))
            if got != info["default"]:
                wrong.append("%s: the default is %s: %r" % (key, info["default"], first))
        for word in reference.parser_words(info["parser"]):
            if not re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(word), first):
                wrong.append("%s: the parser accepts %s: %r" % (key, word, first))
    assert not wrong, "\n".join(wrong)


def test_ringd_yaml5_and_the_example_say_the_same_about_reload():
    assert reference.reload_classes(EXAMPLE) == reference.reload_classes(MAN5), (
        "%s and %s differ on reload:\n%s\n%s" % (MAN5, EXAMPLE, reference.reload_classes(MAN5),
                                                 reference.reload_classes(EXAMPLE)))


def test_reload_puts_every_top_level_key_in_exactly_one_class():
    top, _ = reference.config_keys()
    classes = reference.reload_classes(MAN5)
    named = [k for keys in classes.values() for k in keys]
    assert sorted(named) == sorted(set(named)), "a key in two classes: %s" % classes
    assert set(named) == set(top), "not config keys: %s; keys left out: %s" % (
        set(named) - set(top), set(top) - set(named))


def test_the_others_point_at_ringd_yaml5_for_the_keys_and_reload():
    sighup = re.search(r"^\.B SIGHUP\n(.*?)(?=^\.(?:SH|TP))", read("deploy/man/man8/ringd.8"),
                       re.S | re.M).group(1)
    assert ".BR ringd.yaml (5)" in sighup, "ringd(8)'s SIGHUP does not point at ringd.yaml(5)"
    assert ".BR ringd.yaml (5)" in read("deploy/man/man8/ringd.8").split(".SH SEE ALSO")[1]
    reload_md = re.search(r"^## Reload\n(.*?)(?=^#)", read("docs/ops.md"), re.S | re.M).group(1)
    assert "man5/ringd.yaml.5" in reload_md, "docs/ops.md's Reload does not link ringd.yaml(5)"
    assert "ringd.yaml(5)" in read(EXAMPLE).split("\n\n")[0]
    assert "deploy/man/man5/ringd.yaml.5" in read("README.md")


def test_the_example_documents_every_key_the_parser_accepts():
    top, host = reference.config_keys()
    text = read(EXAMPLE)
    for key in top:
        assert re.search(r"^(# )?%s:" % key, text, re.M), "%s is not in the example" % key
    hosts_comment = re.search(r"^# The ring, in ring order.*?^hosts:", text, re.M | re.S).group(0)
    for key in host:
        assert re.search(r"^#\s+%s\s" % key, hosts_comment, re.M), (
            "the example's hosts comment does not describe %s" % key)


def test_no_file_shows_a_duration_without_a_unit():
    """A bare number is refused ("add a unit, e.g. 30s"); no example may show one."""
    files = DOCS + MANUALS + [EXAMPLE, "tests/FAULTS.md", "bench/RESULTS.md", "proto/PROTOCOL.md",
                              "proto/WIRE.md"]
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
    """[(command, purpose, packages the row names, base purpose or None)] of
    the README's table of what each command installs."""
    rows = re.findall(r"^\| `([^`]+)` \| (`--[a-z]+`|everything) \| (.*) \|$", read("README.md"),
                      re.M)
    assert rows, "the README has no table of what each command installs"
    out = []
    for command, purpose, packages in rows:
        base = re.match(r"those of `(--[a-z]+)`", packages)
        base = base.group(1) if base else ("all" if packages.startswith("all of the above")
                                           else None)
        named = re.findall(r"`([a-z0-9][a-z0-9.+-]*)`", packages.split(", and", 1)[-1]
                           if base else packages)
        out.append((command, purpose.strip("`"), set(named), base))
    return out


def install_deps(purpose):
    args = [path("deploy/install-deps.sh"), "--list"] + (
        [purpose] if purpose not in (None, "everything") else [])
    return set(subprocess.run(["bash"] + args, capture_output=True, text=True,
                              check=True).stdout.split())


def test_each_script_installs_what_the_readme_says_and_no_more():
    for command, purpose, _, _ in readme_install_table():
        script = command.split()[0]
        if script == "deploy/install-deps.sh":
            assert command == "deploy/install-deps.sh " + purpose
            assert re.search(r"^%s$" % re.escape(command), read("README.md"), re.M), (
                "the README's commands do not run %s" % command)
            continue
        calls = re.findall(r"install-deps\.sh\"?( --[a-z]+)?", read(script))
        assert calls, "%s does not call deploy/install-deps.sh" % script
        args = {(c.strip() or "everything") for c in calls}
        assert args == {purpose}, "%s installs %s, the README says %s" % (script, args, purpose)


def test_the_readmes_package_lists_are_what_install_deps_installs():
    rows = readme_install_table()
    assert {purpose for _, purpose, _, _ in rows} == {
        "--build", "--python", "--bench", "--package", "everything"}, rows
    previous = set()
    for command, purpose, named, base in rows:
        want = install_deps(purpose)
        got = set(named)
        if base == "all":
            got |= previous
        elif base:
            got |= install_deps(base)
        assert got == want, ("%s: the README says %s; install-deps.sh --list %s: missing %s, "
                             "extra %s" % (command, sorted(got), purpose, sorted(want - got),
                                           sorted(got - want)))
        previous |= got


def test_examples_install_no_test_tools():
    packages = install_deps
    everything = packages(None)
    for purpose in ["--build", "--python", "--bench", "--package"]:
        assert packages(purpose) <= everything
        for tool in ["clang-14", "lintian", "mmdebstrap", "man-db", "python3-pytest"]:
            assert tool not in packages(purpose), "%s installs %s" % (purpose, tool)
    assert "iperf3" not in packages("--python") and "python3-torch" not in packages("--build")


def test_every_build_target_the_docs_name_exists():
    targets = set()
    for doc in DOCS:
        targets |= set(re.findall(r"--target\s+([a-z_]+)", read(doc)))
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
    for man in MANUALS:
        assert '"ringd %s"' % version in read(man).splitlines()[0], man
    assert '__version__ = "%s"' % version in read("client/python/ringd/__init__.py")


# ---- the README and docs/ ----

def test_the_readme_stays_short():
    n = len(read("README.md").splitlines())
    assert n <= 250, "README.md has %d lines; move what a reader of one kind needs to docs/" % n


def test_ci_runs_the_readmes_test_command_and_the_readme_shows_the_demo():
    readme = read("README.md")
    assert "```sh\ntests/run.sh\n```" in readme and "```sh\ndeploy/demo.sh\n```" in readme
    assert re.search(r"^exec tests/run\.sh$", read(".ci/run"), re.M)


def anchors(doc):
    """GitHub's anchors of a Markdown file's headings."""
    out = set()
    for h in re.findall(r"^#+ (.*)$", read(doc), re.M):
        a = re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
        out.add(a)
    return out


def test_every_link_of_the_readme_docs_and_results_leads_somewhere():
    broken = []
    for doc in DOCS + ["bench/RESULTS.md"]:
        text = re.sub(r"```.*?```", "", read(doc), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            rel = os.path.normpath(os.path.join(os.path.dirname(doc), file)) if file else doc
            if not os.path.exists(path(rel)):
                broken.append("%s: %s: no such file" % (doc, target))
            elif anchor and rel.endswith(".md") and anchor not in anchors(rel):
                broken.append("%s: %s: no such heading in %s" % (doc, target, rel))
    assert not broken, "\n".join(broken)


def test_no_document_points_at_an_issue_number():
    found = []
    for doc in DOCS:
        for n, line in enumerate(read(doc).splitlines(), 1):
            if re.search(r"\bissue[ -]\d", line, re.I):
                found.append("%s:%d: %s" % (doc, n, line.strip()))
    assert not found, "say what is meant, not an issue number:\n" + "\n".join(found)


# ---- the test tiers ----

TIERS = {"unit", "ring", "faults", "python", "package"}


def ctest_labels():
    build = os.environ.get("RINGD_BINARY_DIR")
    if not build:
        pytest.skip("RINGD_BINARY_DIR is not set (ctest sets it)")
    out = subprocess.run(["ctest", "--show-only=json-v1"], cwd=build, capture_output=True,
                         text=True, check=True).stdout
    labels = {}
    for t in json.loads(out)["tests"]:
        labels[t["name"]] = {v for p in t.get("properties", []) if p["name"] == "LABELS"
                             for v in p["value"]}
    return labels


def test_every_test_has_a_tier_label():
    labels = ctest_labels()
    assert labels, "ctest lists no test"
    unlabelled = [name for name, l in labels.items() if not l & TIERS]
    assert not unlabelled, "tests without a label of %s: %s" % (sorted(TIERS), unlabelled)


def test_the_quick_tier_is_the_unit_tests_one_ring_test_and_the_python_smoke_test():
    labels = ctest_labels()
    quick = {name for name, l in labels.items() if "quick" in l}
    unit = {name for name, l in labels.items() if "unit" in l}
    assert unit <= quick, "unit tests outside the quick tier: %s" % (unit - quick)
    assert {"test_frame", "test_msg", "test_config", "test_python_smoke"} <= quick
    ring = [name for name in quick if "ring" in labels[name]]
    assert len(ring) == 1, "the quick tier has one ring test: %s" % ring
    assert not [name for name in quick if labels[name] & {"slow", "faults", "package"}], quick

