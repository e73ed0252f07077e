#!/usr/bin/env bash
# overlap.sh - does DistributedOptimizer's overlap of the gradients' allreduce
# with the backward pass pay, on 4 hosts of the namespace testbed at 1gbit?
#
#   bench/overlap.sh [ROUNDS [RATE]] [-- OVERLAP.PY OPTIONS]
#
# One ringd per host (tests/netns/testbed.sh), one rank per host started by
# python3 -m ringd.launch --hosts through `ip netns exec`; each round runs
# bench/overlap.py in every mode (calibrate, step, overlap, ddp-gloo,
# ddp-ringd), so that the machine's load falls on all of them alike. Prints
# one JSON line per run, then the medians over rounds of each mode's median
# step time and the ratios. ROUNDS defaults to 3, RATE to 1gbit.
#
# The defaults emulate an accelerator (overlap.py --device-ms); plain CPU
# compute is `-- --device-ms 0 --batch 16` (bench/RESULTS.md says why both).
# Four hosts share this machine's cores: run it on a quiet machine, at nice 0.
# Needs root, iproute2, a build of ringd in $RINGD_BUILD (default build/)
# and Debian's python3 with python3-torch.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=../tests/netns/testbed.sh
source "$root/tests/netns/testbed.sh"

rounds=${1:-3}
rate=${2:-1gbit}
shift $(($# < 2 ? $# : 2)) || true
[ "${1:-}" != -- ] || shift
hosts=4
build=${RINGD_BUILD:-$root/build}
python=/usr/bin/python3
[ -x "$build/daemon/ringd" ] || { echo "overlap.sh: no $build/daemon/ringd: build first" >&2; exit 1; }

dir=$(mktemp -d /tmp/ringd-overlap.XXXXXX)
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
    echo "cluster: overlap"
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
    [ -S "$dir/${names[$i]}.sock" ] || { echo "overlap.sh: ringd of ${names[$i]} did not start:" >&2
        cat "$dir/ringd-$i.log" >&2; exit 1; }
done
echo "# testbed $TESTBED: $hosts hosts, links $rate; $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"

export PYTHONPATH=$root/client/python RINGD_LIBRARY=$build/client/libringd.so.0 \
    OMP_NUM_THREADS=1 MASTER_ADDR=$(tb_addr 0) MASTER_PORT=29500 GLOO_SOCKET_IFNAME=eth0
ext=$(ls "$build"/client/python/torch_ext/_ringd_pg*.so 2>/dev/null | head -1 || true)
[ -z "$ext" ] || export RINGD_TORCH_EXT=$ext
hostlist=$(IFS=,; echo "${names[*]}")
for ((r = 1; r <= rounds; r++)); do
    for mode in calibrate step overlap ddp-gloo ddp-ringd; do
        "$python" -m ringd.launch --no-prefix --timeout 600 --hosts "$hostlist" \
            --remote "ip netns exec {host} env RINGD_SOCKET=$dir/{host}.sock" -- \
            "$python" "$root/bench/overlap.py" --mode "$mode" "$@" | tee -a "$dir/results.jsonl"
    done
done
"$python" - "$dir/results.jsonl" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = {}
for r in runs:
    by.setdefault(r["mode"], []).append(r)
med = lambda xs: statistics.median(xs)
cal = by["calibrate"]
print(f"# {runs[0]['params']} parameters ({runs[0]['grad_MB']} MB of float32 gradients), "
      f"{runs[0]['layers']} layers of {runs[0]['width']}, batch {runs[0]['batch']}, "
      f"{runs[0]['ranks']} ranks; medians over {len(cal)} rounds of each run's median")
print(f"# a step that reduces nothing: {med([c['step_without_reduction']['median_ms'] for c in cal]):.1f} ms, "
      f"its backward pass {med([c['backward']['median_ms'] for c in cal]):.1f} ms; "
      f"the allreduce of all gradients alone: {med([c['allreduce_alone']['median_ms'] for c in cal]):.1f} ms")
step = {m: med([r["median_ms"] for r in by[m]]) for m in ("step", "overlap", "ddp-gloo", "ddp-ringd")}
for m, t in step.items():
    print(f"{m:10s} {t:8.1f} ms per step")
print(f"# overlap vs reduce-in-step: {step['step'] / step['overlap']:.2f}x faster; "
      f"vs gloo DDP: {step['ddp-gloo'] / step['overlap']:.2f}x")
PY
