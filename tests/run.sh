#!/usr/bin/env bash
# The test suite: installs what is missing, configures, builds and runs the
# tests. The whole suite (what CI runs, .ci/run): every test in a normal
# build, then under AddressSanitizer and UndefinedBehaviorSanitizer; then the
# libFuzzer targets (clang) for $RINGD_FUZZ_SECONDS (default 60) each. After
# each of the two suites, a short stress pass (tests/stress.sh) runs the
# chaos tests under CPU load: $RINGD_STRESS_MINUTES (default 1) of the normal
# build, then $RINGD_STRESS_ASAN_MINUTES (default 1) of the sanitized one
# (a run started runs to its end); 0 skips one. Each runs beside the next
# stage (the sanitized build's compilation, the fuzzers), the load while
# that runs (beside() below). Longer passes are
# tests/stress.sh's, by hand (tests/FAULTS.md, "Under load"). A failed
# stress pass lets the later stages run, then fails the whole. ctest runs
# tests on $RINGD_TEST_JOBS slots (default two per core), the longest first
# (ctest COST), so that none starts last and leaves the others idle. A test
# takes half a core or a whole one, by what it does and the build
# (tests/CMakeLists.txt, "Slots"): most tests wait on timers and peers more
# than they compute (at one test per core the cores sat 60% idle), but a
# sanitized test computes two to three times as much. Those that build the
# namespace testbed take it in turn (ctest RESOURCE_LOCK netns_testbed).
#
#   tests/run.sh            all three stages
#   tests/run.sh --fast     the normal build's suite only (no stress pass)
#   tests/run.sh --quick    the quick tier (ctest label quick: the unit, protocol
#                           and config tests, one ring test, the Python smoke
#                           test), building only what they need: for after
#                           every change, about 2 minutes on 2 busy cores
#
# The build directories are $RINGD_BUILD_DIR (default build/) and
# $RINGD_ASAN_BUILD_DIR (default build-asan/). Each is configured here with
# the tests on, whatever its cache says (a build directory configured with
# -DRINGD_TESTS=OFF would otherwise run no test and pass), and a ctest run
# that finds no test fails.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=full
case "${1:-}" in
"") ;;
--fast) mode=fast ;;
--quick) mode=quick ;;
*)
    echo "tests/run.sh: unknown option '$1' (--fast, --quick or none)" >&2
    exit 2
    ;;
esac

# Where the time goes, stage by stage, printed at the end (and on a failure
# that stops the suite), to keep the whole within CI's budget.
stage_times=()
timed() { # name command...
    local name=$1 t0=$SECONDS; shift
    "$@"
    stage_times+=("$name $((SECONDS - t0)) s")
}
print_times() {
    local out="" s
    for s in "${stage_times[@]}"; do out+="${out:+, }$s"; done
    [ -z "$out" ] || echo "== time: $out; total $SECONDS s"
}
trap print_times EXIT

timed install "deploy/install-deps.sh"

build=${RINGD_BUILD_DIR:-build}
build_asan=${RINGD_ASAN_BUILD_DIR:-build-asan}
jobs=$(nproc)
test_jobs=${RINGD_TEST_JOBS:-$((2 * jobs))}

configure() { # build-dir cmake-options...
    local dir=$1; shift
    echo "== configure $dir ($*)"
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRINGD_TESTS=ON -DRINGD_FUZZ=OFF \
        "$@" >/dev/null
}

run_ctest() { # build-dir slots ctest-options...
    local dir=$1 slots=$2; shift 2
    echo "== test $dir on $slots slots $*"
    # test_nemesis (label nemesis): five hosts on a testbed of their own under
    # random faults for minutes; the defects it found are fixed (tests/FAULTS.md,
    # "The nemesis"). It stays out of the suite for CI's time: run it alone,
    # ctest -L nemesis (RINGD_NEMESIS_S sets its length).
    echo "== not run: test_nemesis (minutes of its own testbed; ctest -L nemesis runs it)"
    (cd "$dir" && ctest --output-on-failure --no-tests=error --timeout 1500 -j "$slots" \
        -LE nemesis "$@")
}

run_suite() { # build-dir slots cmake-options...
    local dir=$1 slots=$2; shift 2
    timed "configure+build $dir" build_tree "$dir" "$@"
    timed "tests $dir" run_ctest "$dir" "$slots"
}

build_tree() { # build-dir cmake-options...
    local dir=$1; shift
    configure "$dir" "$@"
    echo "== build $dir"
    cmake --build "$dir" -j "$jobs"
}

# The quick tier builds the daemon, ringctl, the library and the tests of
# the label quick: a Criterion test's executable is named as the test, and
# ctest shows no command for a test whose executable is not built yet.
quick() {
    configure "$build" -DRINGD_SANITIZE=OFF
    local targets
    targets=$(cd "$build" && ctest -L quick --show-only=json-v1 | /usr/bin/python3 -c '
import json, os, sys
here = os.getcwd() + "/"
print(" ".join(t["name"] for t in json.load(sys.stdin)["tests"]
               if not t.get("command") or t["command"][0].startswith(here)))')
    echo "== build $build: ringd ringctl ringd_client $targets"
    cmake --build "$build" -j "$jobs" --target ringd ringctl ringd_client $targets
    run_ctest "$build" "$test_jobs" -L quick
}

stress_failed=()
stress() { # build-dir minutes [--asan]
    local dir=$1; shift
    [ "$1" != 0 ] || return 0
    local t0=$SECONDS
    RINGD_BUILD_DIR=$dir tests/stress.sh "$@" || stress_failed+=("tests/stress.sh $* ($dir)")
    stage_times+=("stress $dir $((SECONDS - t0)) s")
}

# A stress pass and the next stage at once: the stage's compilers or
# fuzzers are the pass's load while they run, its busy loops after
# (tests/stress.sh, RINGD_STRESS_BESIDE), which on 2 cores saves the minute
# each would take alone. The stage's output follows the pass's.
beside() { # stage-name stress-arguments... -- stage-command...
    local name=$1 args=() t0=$SECONDS log pid rc=0
    shift
    while [ "$1" != -- ]; do args+=("$1"); shift; done
    shift
    log=$(mktemp)
    "$@" >"$log" 2>&1 &
    pid=$!
    RINGD_STRESS_BESIDE=$pid stress "${args[@]}"
    wait "$pid" || rc=$?
    cat "$log"
    rm -f "$log"
    stage_times+=("$name (beside) $((SECONDS - t0)) s")
    return $rc
}

if [ $mode = quick ]; then
    timed "quick tier" quick
    echo "== the quick tier passed"
    exit 0
fi
run_suite "$build" "$test_jobs" -DRINGD_SANITIZE=OFF
if [ $mode = full ]; then
    # halt_on_error: a sanitizer report fails the test that caused it.
    export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=0
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    beside "configure+build $build_asan" "$build" "${RINGD_STRESS_MINUTES:-1}" -- \
        build_tree "$build_asan" -DRINGD_SANITIZE=ON
    timed "tests $build_asan" run_ctest "$build_asan" "$test_jobs"
    beside fuzzers "$build_asan" "${RINGD_STRESS_ASAN_MINUTES:-1}" --asan -- \
        tests/fuzz/run.sh "${RINGD_FUZZ_SECONDS:-60}"
fi
if [ ${#stress_failed[@]} -gt 0 ]; then
    echo "== failed: ${stress_failed[*]} (each failure above says what replays it)"
    exit 1
fi
echo "== all tests passed"
