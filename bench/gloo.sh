#!/usr/bin/env bash
# gloo.sh - ringd's CPU per GB against Gloo's, measured in one run (issue
# 17): on a testbed of N hosts (default 4) with unshaped links (or RATE),
# Gloo's ring allreduce as PyTorch runs it (bench/gloo_bench.cc: one process
# per rank, the timing loop only), then bench/run.sh for ringd with float32
# and with wire_dtype: bfloat16, alternating ROUNDS times (default 2).
# Prints each run's CPU seconds per GB reduced: Gloo's ranks (all their
# threads); ringd's daemons and its clients inside their calls.
#
#   bench/gloo.sh [N [RATE]]      SIZE (64M), ITERS (10), ROUNDS (2) from the environment
#
# Needs root, g++ and libgloo-dev (deploy/install-deps.sh --bench).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=../tests/netns/testbed.sh
source "$root/tests/netns/testbed.sh"
n=${1:-4} rate=${2:-none}
size=${SIZE:-64M} iters=${ITERS:-10} rounds=${ROUNDS:-2}
bytes=$(numfmt --from=iec "$size")
[ -f /usr/include/gloo/allreduce.h ] && command -v g++ >/dev/null ||
    "$root/deploy/install-deps.sh" --bench
build=${RINGD_BUILD:-$root/build}
dir=$(mktemp -d /tmp/ringd-gloo.XXXXXX)
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    [ -z "${TESTBED:-}" ] || tb_down "$TESTBED"
    rm -rf "$dir"
}
trap cleanup EXIT
g++ -O2 -std=c++17 "$root/bench/gloo_bench.cc" -o "$dir/gloo_bench" -lgloo -lpthread

gloo_once() {
    local i out=() status=0
    tb_up "$n" "$rate"
    tb_verify
    rm -rf "$dir/store" && mkdir "$dir/store"
    pids=()
    for ((i = 0; i < n; i++)); do
        ip netns exec "$(tb_ns "$i")" timeout 600 "$dir/gloo_bench" "$i" "$n" "$dir/store" \
            "$(tb_addr "$i")" "$bytes" "$iters" >"$dir/gloo-$i.out" 2>&1 &
        pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i" || status=1; done
    pids=()
    tb_down "$TESTBED"
    unset TESTBED
    [ $status -eq 0 ] || { cat "$dir"/gloo-*.out >&2; return 1; }
    cat "$dir"/gloo-*.out | awk -v n="$n" '{ cpu += $6; if ($4 > wall) wall = $4; b = $8; it = $10 }
        END { gb = b * it / 1e9
            printf "gloo      %8.1f ms  busbw %7.1f MB/s  %6.3f CPU s per GB (ranks)\n", \
                wall / it * 1e3, b / (wall / it) / 1e6 * 2 * (n - 1) / n, cpu / gb }'
}

ringd_once() {
    local label=$1 yaml=$2
    RINGD_EXTRA_YAML="$yaml" RINGD_BUILD="$build" "$root/bench/run.sh" "$n" "$rate" --no-iperf -- \
        --min "$size" --max "$size" --iters "$iters" --budget 1000 >"$dir/ringd.txt" 2>&1 ||
        { cat "$dir/ringd.txt" >&2; return 1; }
    awk -v l="$label" '!/^#/ && NF >= 7 { t = $4; bus = $7 }
        /daemons and clients:/ { cpu = $(NF - 5) }
        END { printf "%-9s %8.1f ms  busbw %7.1f MB/s  %6.3f CPU s per GB (daemons + clients)\n", \
            l, t / 1e3, bus, cpu }' "$dir/ringd.txt"
}

printf '# %d hosts, links %s, %s float32 sum, %d timed runs; %s; load %s\n' "$n" "$rate" "$size" \
    "$iters" "$(date -u +%FT%TZ)" "$(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= rounds; r++)); do
    gloo_once
    ringd_once ringd ""
    ringd_once "ringd bf16" "wire_dtype: bfloat16"
done
