#!/usr/bin/env bash
# Builds the libFuzzer targets with clang into build-fuzz/ and runs them, at
# once, for a bounded time each on its seed corpus: the peer frame decoders,
# the client message decoders and the config parser. A crash, a sanitizer
# report, a leak or an input slower than 10 s fails the run, leaving the
# input in build-fuzz/artifacts/ (replay: build-fuzz/tests/fuzz/fuzz_X FILE).
#
#   tests/fuzz/run.sh [SECONDS]    per target, default 60
set -euo pipefail
cd "$(dirname "$0")/../.."

secs=${1:-60}
dir=build-fuzz
echo "== configure $dir (clang, -DRINGD_FUZZ=ON)"
CC=clang-14 cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRINGD_FUZZ=ON >/dev/null
echo "== build $dir"
cmake --build "$dir" -j "$(nproc)"

seeds=$dir/seeds
rm -rf "$seeds"
"$dir/tests/fuzz/fuzz_seeds" "$seeds"
mkdir -p "$seeds/config"
cp deploy/ringd.example.yaml tests/config/bad/*.yaml tests/fuzz/corpus/config/*.yaml "$seeds/config/"

mkdir -p "$dir/artifacts"
# The three run at once, each for SECONDS: the machine's cores are shared
# between them (CI's time budget; each still runs tens of thousands of
# inputs a second over its corpus).
fuzz() { # target
    local t=$1
    # The working corpus grows across runs; the seeds are read, never written.
    mkdir -p "$dir/corpus/$t"
    "$dir/tests/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -max_len=8192 -artifact_prefix="$dir/artifacts/fuzz_$t-" -print_final_stats=1 \
        "$dir/corpus/$t" "$seeds/$t" 2>"$dir/fuzz_$t.log"
}
targets=(frame msg config)
pids=()
echo "== ${targets[*]/#/fuzz_} for ${secs}s each, at once"
for t in "${targets[@]}"; do
    fuzz "$t" &
    pids+=($!)
done
failed=()
for i in "${!targets[@]}"; do
    t=${targets[$i]}
    if wait "${pids[$i]}"; then
        echo "fuzz_$t: $(grep -E '^stat::(number_of_executed_units|new_units_added)' \
            "$dir/fuzz_$t.log" | tr '\n' ' ')"
    else
        tail -n 60 "$dir/fuzz_$t.log"
        failed+=("fuzz_$t")
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "== ${failed[*]} FAILED; the input is in $dir/artifacts/" >&2
    exit 1
fi
echo "== fuzzers passed"
