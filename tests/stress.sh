#!/usr/bin/env bash
# The chaos tests under CPU load: one busy loop per core while the chaos
# tests run one after another, each with a fresh seed, until MINUTES have
# passed. A run fails on what its test asserts (a mixed sum, a split
# outcome, a wrong sum, a call past its deadline plus the test's margin) or
# if it hangs; each failure prints the command that replays it (and a failed
# Python run keeps its daemons' and ranks' logs: BUILD/stress/RUN-TEST.files).
#
#   tests/stress.sh MINUTES           the normal build ($RINGD_BUILD_DIR, default build/)
#   tests/stress.sh MINUTES --asan    the sanitized one (default build-asan/)
#
# With $RINGD_STRESS_BESIDE=PID, process PID (tests/run.sh: the next
# stage's build, or the fuzzers) is the load while it runs, and the busy
# loops start once it has exited.
#
# The chaos tests' binaries are built if missing (not rebuilt: tests/run.sh
# has just built them, or run cmake --build DIR first). MINUTES may be a
# fraction. $RINGD_STRESS_CHAOS_S (default 20) is each run's chaos length,
# shortened to the time left. The last line is "stress: N passed, M failed";
# the exit status is 1 if any run failed.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

usage() { echo "usage: tests/stress.sh MINUTES [--asan]" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || usage
minutes=$1
asan=0
[ $# -eq 2 ] && { [ "$2" = --asan ] && asan=1 || usage; }
total_s=$(awk -v m="$minutes" 'BEGIN { if (m !~ /^[0-9]+(\.[0-9]+)?$/ || m <= 0) exit 1; printf "%d", m * 60 + 0.5 }') || usage
chaos_s=${RINGD_STRESS_CHAOS_S:-20}

if [ $asan = 1 ]; then
    dir=${RINGD_BUILD_DIR:-build-asan}
    cmake_opts=(-DRINGD_SANITIZE=ON)
    # As tests/run.sh: a sanitizer report fails the test that caused it.
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:abort_on_error=0}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
    run_limit=$((chaos_s + 900)) # a run still going then hangs (the sanitized build is slower)
else
    dir=${RINGD_BUILD_DIR:-build}
    cmake_opts=()
    run_limit=$((chaos_s + 600))
fi
case $dir in /*) ;; *) dir=$root/$dir ;; esac

# What the chaos tests run, built (only those targets) if any is missing.
targets=(ringd ringctl ringd_client elastic_rank test_outcomes test_faults)
binaries=(daemon/ringd client/ringctl client/libringd.so tests/elastic/elastic_rank
          tests/outcomes/test_outcomes tests/faults/test_faults)
missing=0
for b in "${binaries[@]}"; do [ -e "$dir/$b" ] || missing=1; done
if [ $missing = 1 ]; then
    if [ ! -f "$dir/CMakeCache.txt" ]; then
        echo "== configure $dir (${cmake_opts[*]:-})"
        cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${cmake_opts[@]}" >/dev/null
    fi
    echo "== build $dir (${targets[*]})"
    cmake --build "$dir" -j "$(nproc)" --target "${targets[@]}"
fi

# The chaos tests, as ctest runs them. test_elastic's environment (paths of
# the binaries, the sanitizer's options) is ctest's, and it runs under
# Debian's python3 as there.
elastic_env=$(ctest --test-dir "$dir" --show-only=json-v1 -R '^test_elastic$' |
    /usr/bin/python3 -c '
import json, shlex, sys
for t in json.load(sys.stdin)["tests"]:
    for p in t.get("properties", []):
        if p["name"] == "ENVIRONMENT":
            print(" ".join(shlex.quote(v) for v in p["value"]))')
[ -n "$elastic_env" ] || { echo "stress: no test_elastic in $dir" >&2; exit 2; }
names=(outcomes faults faults_2_streams elastic one_outcome)
command_of() { # name seed chaos-seconds files: the command line that runs it
    local env="RINGD_TEST_SEED=$2 RINGD_CHAOS_MS=$(($3 * 1000))"
    case $1 in
    outcomes)
        echo "env $env $dir/tests/outcomes/test_outcomes" \
             "--filter 'outcomes/a_minute_of_chaos_never_mixes_calls_nor_splits_an_outcome'" ;;
    faults)
        echo "env $env $dir/tests/faults/test_faults" \
             "--filter 'faults/random_kills_and_freezes_never_hang_a_call_or_give_a_wrong_sum'" ;;
    faults_2_streams)
        echo "env $env $dir/tests/faults/test_faults" \
             "--filter 'faults/the_same_chaos_over_2_tcp_streams_per_link'" ;;
    elastic)
        echo "env $elastic_env RINGD_TEST_SEED=$2 RINGD_ELASTIC_CHAOS_S=$3" \
             "/usr/bin/python3 -m pytest -q -s -p no:cacheprovider --basetemp=$4" \
             "$root/tests/elastic/test_elastic.py -k test_a_minute_of_random_kills_and_returns" ;;
    one_outcome) # a host frozen past evict_after 20 times, then restarted 6 (about 2.5 min)
        echo "env $elastic_env RINGD_TEST_SEED=$2" \
             "/usr/bin/python3 -m pytest -q -s -p no:cacheprovider --basetemp=$4" \
             "$root/tests/elastic/test_one_outcome.py -k 'frozen or restarted'" ;;
    esac
}
# What broke, from a failed run's output (the tests' own words).
why_failed() { # log exit-status
    if [ "$2" = 124 ] || [ "$2" = 137 ]; then echo "hung: killed after $run_limit s"
    elif grep -q "mixed sum" "$1"; then echo "a mixed sum"
    elif grep -Eq "got OK for a collective|different results for one collective|a success on one and an error on another" "$1"; then
        echo "a split outcome"
    elif grep -Eq "step [0-9]+ ran on hosts" "$1"; then
        echo "a split outcome (one step ran on two sets of hosts)"
    elif grep -q "different outcomes" "$1"; then echo "different errors for one call"
    elif grep -Eq "a call took [0-9]+ ms|'deadline'" "$1"; then
        echo "a call past its deadline and margin"
    elif grep -Eq "element [0-9]+ of iteration|'wrong'" "$1"; then echo "a wrong sum"
    elif grep -Eq "AddressSanitizer|UndefinedBehaviorSanitizer|LeakSanitizer|runtime error" "$1"; then
        echo "a sanitizer report"
    else echo "another assertion (see the tail)"
    fi
}

# One bounded busy loop per core, ended on exit whatever happens; beside
# another process, they wait for it to exit.
beside=${RINGD_STRESS_BESIDE:-}
loops=()
current=
cleanup() {
    [ -n "$current" ] && kill -TERM "$current" 2>/dev/null || true
    for p in "${loops[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM
for _ in $(seq "$(nproc)"); do
    timeout $((total_s + run_limit)) bash -c '
        [ -z "$1" ] || while kill -0 "$1" 2>/dev/null; do sleep 0.2; done
        while :; do :; done' busy "$beside" &
    loops+=($!)
done
load="${#loops[@]} busy loops"
[ -z "$beside" ] || load="process $beside while it runs, then $load"

logs=$dir/stress # this pass's logs, one a run
rm -rf "$logs"
mkdir -p "$logs"
echo "== stress $dir: $minutes min, chaos ${chaos_s} s a run, load: $load; logs in $logs"
start=$(date +%s)
passed=0 failed=0 n=0
while :; do
    left=$((start + total_s - $(date +%s)))
    [ $left -gt 0 ] || break
    name=${names[n % ${#names[@]}]}
    n=$((n + 1))
    seed=$(od -An -N8 -tu8 /dev/urandom | tr -d ' ')
    secs=$((left < chaos_s ? (left < 10 ? 10 : left) : chaos_s))
    log=$logs/$n-$name.log
    files=$logs/$n-$name.files # pytest's: the daemons' and the ranks' logs
    cmd=$(command_of "$name" "$seed" "$secs" "$files")
    read -r l1 l5 l15 _ </proc/loadavg
    echo "stress: run $n: $name seed $seed (${secs} s of chaos), load $l1 $l5 $l15"
    t0=$(date +%s)
    rc=0
    timeout -k 10 "$run_limit" bash -c "$cmd" >"$log" 2>&1 &
    current=$!
    wait "$current" || rc=$?
    current=
    read -r l1 l5 l15 _ </proc/loadavg
    if [ $rc = 0 ]; then
        passed=$((passed + 1))
        rm -rf "$files"
        echo "stress: run $n: $name seed $seed passed in $(($(date +%s) - t0)) s, load $l1 $l5 $l15"
    else
        failed=$((failed + 1))
        echo "stress: run $n: $name seed $seed FAILED in $(($(date +%s) - t0)) s" \
             "(exit $rc: $(why_failed "$log" $rc)), load $l1 $l5 $l15"
        echo "stress: replay it with:"
        [ $asan = 1 ] && echo "  ASAN_OPTIONS=$ASAN_OPTIONS UBSAN_OPTIONS=$UBSAN_OPTIONS \\"
        echo "  $cmd"
        echo "stress: the last lines of $log:"
        tail -n 40 "$log" | sed 's/^/  | /'
        [ -d "$files" ] && echo "stress: the daemons' and the ranks' logs of that run are in $files"
    fi
done
echo "stress: $passed passed, $failed failed"
[ $failed = 0 ]
