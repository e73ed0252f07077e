#!/usr/bin/env bash
# scaling.sh - ring against the star baseline at one size, for several N:
# the time of an allreduce and the bytes the busiest host sends.
#
#   bench/scaling.sh [DIR]
#
# For each algorithm (ring, star) and N (2, 3, 4, 6, 8), one bench/run.sh on
# a fresh testbed at RATE with `--min SIZE --max SIZE`, its output kept in
# DIR (default: a new directory under /tmp). Then one table: median time,
# time / time(N=2), busbw, and the wire bytes (eth0 TX, headers included)
# per allreduce of the busiest host, also in units of SIZE.
#
# Environment: SCALING_N ("2 3 4 6 8"), SCALING_ALGS ("ring star"),
# SCALING_SIZE (64M), SCALING_RATE (1gbit), SCALING_ITERS (5 timed runs, 1
# warm-up). Needs root, like bench/run.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$(mktemp -d /tmp/ringd-scaling.XXXXXX)}
mkdir -p "$out"
ns=${SCALING_N:-"2 3 4 6 8"}
algs=${SCALING_ALGS:-"ring star"}
size=${SCALING_SIZE:-64M}
rate=${SCALING_RATE:-1gbit}
iters=${SCALING_ITERS:-5}

for alg in $algs; do
    for n in $ns; do
        f="$out/$alg-n$n.txt"
        {
            echo "# $(date -u '+%Y-%m-%d %H:%M:%S UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"
            echo "# bench/run.sh $n $rate --no-iperf --algorithm $alg -- --min $size --max $size" \
                "--warmup 1 --iters $iters --budget 120"
            "$here/run.sh" "$n" "$rate" --no-iperf --algorithm "$alg" -- --min "$size" \
                --max "$size" --warmup 1 --iters "$iters" --budget 120 2>&1 ||
                echo "# FAILED: exit $?"
        } >"$f"
        echo "== $alg N=$n: $(awk '!/^#/ && NF >= 9 { print $4 / 1000 " ms, " $9 }' "$f")" >&2
    done
done

# The table, from the outputs.
echo "| algorithm | N | median time, ms | time / time(N=2) | busbw MB/s | busiest host | its wire bytes per allreduce | in units of S | check |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for alg in $algs; do
    t2=""
    for n in $ns; do
        f="$out/$alg-n$n.txt"
        awk -v alg="$alg" -v n="$n" -v t2="$t2" '
            !/^#/ && NF >= 9 { bytes = $1; t = $4 / 1000; bus = $7; check = $9 }
            /^# wire bytes sent/ { w = $NF; sub(/.*busiest /, ""); h = $1 }
            /^# FAILED/ { check = "FAILED" }
            END {
                if (t2 == "") t2 = t
                printf "| %s | %d | %.1f | %.2f | %.1f | %s | %.0f | %.2f | %s |\n", alg, n, t,
                    (t2 > 0 ? t / t2 : 0), bus, h, w, (bytes > 0 ? w / bytes : 0), check
            }' "$f"
        [ -n "$t2" ] || t2=$(awk '!/^#/ && NF >= 9 { print $4 / 1000 }' "$f")
    done
done
