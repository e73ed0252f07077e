#!/usr/bin/env bash
# stalls.sh - the spread of repeated allreduces at 1 Gbit/s (issue 17): for
# N = 4 and 8 and 64 MiB and 16 MiB, 20 timed runs each (ringd_bench
# --each), and per case the distribution of busbw / goodput over the runs
# (min, median, max), with what the network did meanwhile (retransmitted
# segments, RTOs, tail loss probes, tbf drops; bench/run.sh).
#
#   bench/stalls.sh [RUNS] [-- RUN.SH OPTIONS]
#       RUNS timed runs per case (default 20). Environment: STALLS_N ("4 8"),
#       STALLS_SIZES ("64M 16M"), STALLS_RATE (1gbit), RINGD_EXTRA_YAML.
#
# Needs root, like bench/run.sh, which it calls once per N (goodput measured
# there with iperf3, one TCP stream, alone on the testbed).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-20}
[ $# -lt 1 ] || shift
[ "${1:-}" != -- ] || shift
extra=("$@")
rate=${STALLS_RATE:-1gbit}
dir=$(mktemp -d /tmp/ringd-stalls.XXXXXX)
trap 'rm -rf "$dir"' EXIT

printf '# %s; %d timed runs per case; links %s; load %s\n' "$(date -u +%FT%TZ)" "$runs" "$rate" \
    "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-3s %-5s %9s %9s %9s  %s\n' N size min median max "runs below 0.95 (bus/good of each)"
for n in ${STALLS_N:-4 8}; do
    for size in ${STALLS_SIZES:-64M 16M}; do
        f="$dir/n$n-$size.txt"
        "$root/bench/run.sh" "$n" "$rate" "${extra[@]}" -- --min "$size" --max "$size" \
            --warmup 2 --iters "$runs" --budget 100000 --each >"$f" 2>&1 ||
            { echo "stalls.sh: N=$n $size failed:" >&2; tail -5 "$f" >&2; continue; }
        good=$(awk '/one TCP stream host 0 -> 1/ { print $(NF - 1) }' "$f")
        awk -v n="$n" -v size="$size" -v good="$good" '
            /^# each_us/ { bytes = $3 + 0; for (i = 4; i <= NF; i++) t[++k] = $i }
            END {
                for (i = 1; i <= k; i++) r[i] = bytes / t[i] * 2 * (n - 1) / n / good
                m = k
                for (i = 1; i <= m; i++) s[i] = r[i]
                for (i = 2; i <= m; i++)     # insertion sort: mawk has no asort
                    for (j = i; j > 1 && s[j - 1] > s[j]; j--) { x = s[j]; s[j] = s[j - 1]; s[j - 1] = x }
                med = (m % 2) ? s[(m + 1) / 2] : (s[m / 2] + s[m / 2 + 1]) / 2
                slow = ""
                for (i = 1; i <= k; i++) if (r[i] < 0.95) slow = slow sprintf(" #%d:%.3f", i, r[i])
                printf "%-3s %-5s %9.3f %9.3f %9.3f  %s\n", n, size, s[1], med, s[m], slow == "" ? "none" : slow
            }' "$f"
        grep -E '^# (network|machine)' "$f" | sed 's/^# /#   /'
    done
done
