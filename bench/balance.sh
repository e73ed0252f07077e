#!/usr/bin/env bash
# balance.sh - one slow host: step times with batches split by measured speed
# (ringd.balance), with equal shares, and with DDP over gloo, against the
# ideal, on 4 hosts of the namespace testbed.
#
#   bench/balance.sh [ROUNDS [RATE]] [-- BALANCE.PY OPTIONS]
#
# One ringd per host (tests/netns/testbed.sh), one rank per host started by
# python3 -m ringd.launch --hosts through `ip netns exec`; each round runs
# bench/balance.py in every mode (equal, balanced, ddp-gloo) with the last
# host at 1/2 and at 1/3 of the others' speed per row, so that the machine's
# load falls on all of them alike. Prints one JSON line per run, then for each
# slowdown the medians over rounds of each mode's median step time, the ideal
# (the global batch over the hosts' total speed) and the ratios. ROUNDS
# defaults to 3, RATE to 1gbit; RINGD_TESTBED_PREFIX names the testbed's
# namespaces (default rgd). Needs root, iproute2, a build of ringd in
# $RINGD_BUILD (default build/) and Debian's python3 with python3-torch.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=../tests/netns/testbed.sh
source "$root/tests/netns/testbed.sh"
TB_PREFIX=${RINGD_TESTBED_PREFIX:-$TB_PREFIX}

rounds=${1:-3}
rate=${2:-1gbit}
shift $(($# < 2 ? $# : 2)) || true
[ "${1:-}" != -- ] || shift
hosts=4
build=${RINGD_BUILD:-$root/build}
python=/usr/bin/python3
[ -x "$build/daemon/ringd" ] || { echo "balance.sh: no $build/daemon/ringd: build first" >&2; exit 1; }

dir=$(mktemp -d /tmp/ringd-balance.XXXXXX)
daemons=()
cleanup() {
    local p
    for p in "${daemons[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${daemons[@]}"; do wait "$p" 2>/dev/null || true; done
    [ -z "${TESTBED:-}" ] || tb_down "$TESTBED"
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

tb_up "$hosts" "$rate"
tb_verify
{
    echo "cluster: balance"
    echo "collective_timeout: 5m"
    echo "hosts:"
    for ((i = 0; i < hosts; i++)); do
        echo "  - name: $(tb_ns "$i")"
        echo "    address: $(tb_addr "$i"):7701"
        echo "    socket: $dir/$(tb_ns "$i").sock"
    done
} >"$dir/ringd.yaml"
names=()
for ((i = 0; i < hosts; i++)); do
    ns=$(tb_ns "$i")
    names+=("$ns")
    ip netns exec "$ns" "$build/daemon/ringd" --config "$dir/ringd.yaml" --host "$ns" \
        2>"$dir/ringd-$i.log" &
    daemons+=($!)
done
for ((i = 0; i < hosts; i++)); do
    for ((k = 0; k < 100; k++)); do [ -S "$dir/${names[$i]}.sock" ] && break; sleep 0.05; done
    [ -S "$dir/${names[$i]}.sock" ] || { echo "balance.sh: ringd of ${names[$i]} did not start:" >&2
        cat "$dir/ringd-$i.log" >&2; exit 1; }
done
echo "# testbed $TESTBED: $hosts hosts, links $rate; $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"

export PYTHONPATH=$root/client/python RINGD_LIBRARY=$build/client/libringd.so.0 \
    OMP_NUM_THREADS=1 MASTER_ADDR=$(tb_addr 0) MASTER_PORT=29500 GLOO_SOCKET_IFNAME=eth0
hostlist=$(IFS=,; echo "${names[*]}")
for ((r = 1; r <= rounds; r++)); do
    for slowdown in 2 3; do
        for mode in equal balanced ddp-gloo; do
            "$python" -m ringd.launch --no-prefix --timeout 600 --hosts "$hostlist" \
                --remote "ip netns exec {host} env RINGD_SOCKET=$dir/{host}.sock" -- \
                "$python" "$root/bench/balance.py" --mode "$mode" --slowdown "$slowdown" "$@" |
                tee -a "$dir/results.jsonl"
        done
    done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
"$python" - "$dir/results.jsonl" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
med = statistics.median
r0 = runs[0]
print(f"# {r0['ranks']} ranks, global batch {r0['batch']} rows, {r0['row_ms']} ms per row at "
      f"full speed, MLP {r0['layers']} x {r0['width']} ({r0['params']} parameters); medians over "
      f"{len(runs) // 6} rounds of each run's median step")
print("slow host at | equal | balanced | ddp-gloo | ideal: emulated | ideal: measured | "
      "balanced/ideal measured | equal/balanced | rows")
for slowdown in sorted({r["slowdown"] for r in runs}):
    by = {m: [r for r in runs if r["slowdown"] == slowdown and r["mode"] == m]
          for m in ("equal", "balanced", "ddp-gloo")}
    t = {m: med([r["median_ms"] for r in rs]) for m, rs in by.items()}
    ideal = by["equal"][0]["ideal_ms"]
    measured = med([r["ideal_measured_ms"] for r in by["balanced"]])
    rows = by["balanced"][-1]["rows"]
    print(f"1/{slowdown:g} | {t['equal']:.1f} ms | {t['balanced']:.1f} ms | {t['ddp-gloo']:.1f} ms | "
          f"{ideal:.1f} ms | {measured:.1f} ms | {t['balanced'] / measured:.2f} | "
          f"{t['equal'] / t['balanced']:.2f} | {'/'.join(map(str, rows))}")
PY
