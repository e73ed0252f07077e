#!/usr/bin/env bash
# results.sh - reruns the measurements of bench/RESULTS.md, each with
# bench/run.sh, one at a time, and keeps every output in DIR.
#
#   bench/results.sh DIR [PART...]
#       PART: sweep4 sweep8 scaling star segments latency cpu (default: all)
#
# The machine may be shared: before each run it waits (at most 3 minutes)
# for the 1-minute load average to fall under $RESULTS_MAX_LOAD (default 2),
# and each output starts with the load it got.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: results.sh DIR [PART...]}
shift
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(sweep4 sweep8 scaling star segments latency cpu)
mkdir -p "$out"
max_load=${RESULTS_MAX_LOAD:-2}

# measure NAME RUN.SH-ARGS...: one run into $out/NAME.txt.
measure() {
    local name=$1 i
    shift
    for ((i = 0; i < 36; i++)); do
        awk -v m="$max_load" '{ exit !($1 < m) }' /proc/loadavg && break
        sleep 5
    done
    {
        echo "# $(date -u '+%Y-%m-%d %H:%M:%S UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"
        echo "# bench/run.sh $*"
        "$here/run.sh" "$@" 2>&1 || echo "# FAILED: exit $?"
    } >"$out/$name.txt"
    echo "== $name"
    grep -v '^# \(ringd_bench\|busbw\|[0-9] warm\|ringd.yaml\)' "$out/$name.txt"
}

for part in "${parts[@]}"; do
    case $part in
    sweep4) measure sweep-n4 4 1gbit ;;
    sweep8) measure sweep-n8 8 1gbit ;;
    scaling)
        for rep in 1 2; do
            for n in 2 3 4 6 8; do
                measure "scaling-n$n-$rep" "$n" 1gbit --no-iperf -- --min 64M --max 64M \
                    --iters 5 --budget 30
            done
        done
        ;;
    star)
        # Ring against the star baseline, N = 2..8 at 64 MiB: its own table.
        "$here/scaling.sh" "$out/star" | tee "$out/star.md"
        ;;
    segments)
        for rep in 1 2; do
            for seg in 64KiB 128KiB 256KiB 512KiB 1MiB 2MiB 4MiB; do
                measure "segment-$seg-$rep" 4 1gbit --no-iperf --segment "$seg" -- \
                    --min 1M --max 16M --factor 16 --iters 20 --budget 8
            done
        done
        ;;
    latency) measure latency --latency ;;
    cpu)
        for rep in 1 2 3; do
            measure "cpu-n4-$rep" 4 none -- --min 64M --max 64M --iters 10 --budget 10
        done
        measure cpu-n4-copy 4 none -- --min 64M --max 64M --iters 10 --budget 10 --copy
        ;;
    *) echo "results.sh: unknown part $part" >&2; exit 2 ;;
    esac
done
