#!/usr/bin/env bash
# modes.sh - what protecting the links costs (issue 17): the same 64 MiB
# float32 allreduce on one testbed per mode, one after the other in one run:
#   plain    no key, CRC32C (the default)
#   mac      secret_file: every frame authenticated (AES-256-GMAC)
#   aes      + encryption: aes-256-gcm
#   chacha   + encryption: chacha20-poly1305
#   bf16     no key, wire_dtype: bfloat16 (busbw counted in float32 bytes)
#   f16      no key, wire_dtype: float16
# and, per mode, the busbw, busbw / one link's iperf3 goodput, and the
# daemons' CPU seconds per GB reduced. With ROUNDS=R (default 1) the modes
# run R times in turn (plain, mac, aes, chacha, plain, ...), so that other
# load on the machine falls on all alike, and the last table has each
# column's median over the rounds. MODES="plain bf16" runs only those.
#
#   bench/modes.sh [N [RATE]] [-- RINGD_BENCH OPTIONS]
#       N hosts (default 4), links of RATE (default 1gbit; `none`: unshaped,
#       for CPU per GB). RINGD_BENCH OPTIONS default to --min 64M --max 64M.
#
# Like bench/run.sh, which it calls: needs root; tears everything down.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
n=${1:-4} rate=${2:-1gbit}
[ $# -lt 2 ] || shift 2
[ "${1:-}" != -- ] || shift
bench=("$@")
[ ${#bench[@]} -gt 0 ] || bench=(--min 64M --max 64M)

dir=$(mktemp -d /tmp/ringd-modes.XXXXXX)
trap 'rm -rf "$dir"' EXIT
head -c 32 /dev/urandom | base64 >"$dir/cluster.key"
chmod 600 "$dir/cluster.key"
key="secret_file: $dir/cluster.key"

declare -A yaml=(
    [plain]=""
    [mac]="$key"
    [aes]="$key"$'\n'"encryption: aes-256-gcm"
    [chacha]="$key"$'\n'"encryption: chacha20-poly1305"
    [bf16]="wire_dtype: bfloat16"
    [f16]="wire_dtype: float16"
)
modes=${MODES:-"plain mac aes chacha bf16 f16"}
goodput=""
rounds=${ROUNDS:-1}
row() { printf '%-8s %12s %10s %9s %14s\n' "$@"; }
printf '# %d hosts, links %s, ringd_bench %s; %s\n' "$n" "$rate" "${bench[*]}" "$(date -u +%FT%TZ)"
row mode median_us busbw_MB/s bus/good "daemon CPU s/GB"
for ((r = 1; r <= rounds; r++)); do
    for mode in $modes; do
        opts=(--no-iperf)
        args=("${bench[@]}")
        if [ "$rate" != none ] && [ -z "$goodput" ]; then opts=(); fi
        [ -z "$goodput" ] || args+=(--goodput "$goodput")
        RINGD_EXTRA_YAML="${yaml[$mode]}" "$root/bench/run.sh" "$n" "$rate" "${opts[@]}" -- \
            "${args[@]}" >"$dir/$mode.txt" 2>&1 || { cat "$dir/$mode.txt" >&2; exit 1; }
        if [ -z "$goodput" ] && [ "$rate" != none ]; then
            goodput=$(awk '/one TCP stream host 0 -> 1/ { print $(NF - 1) }' "$dir/$mode.txt")
            echo "# iperf3 goodput of one link: $goodput MB/s"
        fi
        awk -v m="$mode" '
            !/^#/ && NF >= 7 { med = $4; bus = $7; good = (NF >= 8 && $8 ~ /^[0-9.]+$/) ? $8 : "-" }
            /CPU s per GB reduced/ { for (i = 1; i <= NF; i++) if ($i == "CPU" && $(i + 1) == "s" && $(i + 2) == "per") cpu = $(i - 1) }
            END { printf "%-8s %12s %10s %9s %14s\n", m, med, bus, good, cpu }' "$dir/$mode.txt" |
            tee -a "$dir/rows"
        grep '^# machine:' "$dir/$mode.txt" | sed "s/^# /#   $mode: /"
    done
done
[ "$rounds" -gt 1 ] || exit 0
echo "# median of $rounds rounds"
for mode in $modes; do
    args=("$mode")
    for col in 2 3 4 5; do
        args+=("$(awk -v m="$mode" -v c="$col" '$1 == m { print $c }' "$dir/rows" | sort -g |
            awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')")
    done
    row "${args[@]}"
done
