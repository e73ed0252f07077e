#!/usr/bin/env bash
# The whole test suite: installs what is missing, configures, builds and runs
# every test, first in a normal build, then under AddressSanitizer and
# UndefinedBehaviorSanitizer; then runs the libFuzzer targets (clang) for
# $RINGD_FUZZ_SECONDS (default 60) each.
#
#   tests/run.sh            all three stages
#   tests/run.sh --fast     the normal build only
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

run_suite build
if [ "${1:-}" != "--fast" ]; then
    # halt_on_error: a sanitizer report fails the test that caused it.
    export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=0
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    run_suite build-asan -DRINGD_SANITIZE=ON
    tests/fuzz/run.sh "${RINGD_FUZZ_SECONDS:-60}"
fi
echo "== all tests passed"
