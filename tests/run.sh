#!/usr/bin/env bash
# The whole test suite: installs what is missing, configures, builds and runs
# every test, first in a normal build, then under AddressSanitizer and
# UndefinedBehaviorSanitizer; then runs the libFuzzer targets (clang) for
# $RINGD_FUZZ_SECONDS (default 60) each. After each of the two suites, a
# short stress pass (tests/stress.sh) runs the chaos tests under CPU load:
# $RINGD_STRESS_MINUTES (default 3) of the normal build, then
# $RINGD_STRESS_ASAN_MINUTES (default 2) of the sanitized one; 0 skips one.
# A failed stress pass lets the later stages run, then fails the whole.
#
#   tests/run.sh            all three stages
#   tests/run.sh --fast     the normal build's suite only (no stress pass)
set -euo pipefail
cd "$(dirname "$0")/.."

"deploy/install-deps.sh"

jobs=$(nproc)
run_suite() { # build-dir cmake-options...
    local dir=$1; shift
    echo "== configure $dir ($*)"
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
    echo "== build $dir"
    cmake --build "$dir" -j "$jobs"
    echo "== test $dir"
    (cd "$dir" && ctest --output-on-failure --timeout 1500)
}

stress_failed=()
stress() { # build-dir minutes [--asan]
    local dir=$1; shift
    [ "$1" != 0 ] || return 0
    RINGD_BUILD_DIR=$dir tests/stress.sh "$@" || stress_failed+=("tests/stress.sh $* ($dir)")
}

run_suite build
if [ "${1:-}" != "--fast" ]; then
    stress build "${RINGD_STRESS_MINUTES:-3}"
    # halt_on_error: a sanitizer report fails the test that caused it.
    export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=0
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    run_suite build-asan -DRINGD_SANITIZE=ON
    stress build-asan "${RINGD_STRESS_ASAN_MINUTES:-2}" --asan
    tests/fuzz/run.sh "${RINGD_FUZZ_SECONDS:-60}"
fi
if [ ${#stress_failed[@]} -gt 0 ]; then
    echo "== failed: ${stress_failed[*]} (each failure above says what replays it)"
    exit 1
fi
echo "== all tests passed"
