#!/usr/bin/env bash
# test_testbed.sh - the testbed works end to end: 3 hosts at 100mbit, one
# ringd per host, a checked 3-rank allreduce with ringctl across the
# namespaces, traffic seen on the hosts' links, and nothing left afterwards.
#
#   tests/netns/test_testbed.sh RINGD RINGCTL
#
# Exit status 0 pass, 1 fail, 77 skipped (not root, or no iproute2).
# Bounded: every wait has a deadline, the whole test takes a few seconds.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ringd=${1:?usage: test_testbed.sh RINGD RINGCTL}
ringctl=${2:?usage: test_testbed.sh RINGD RINGCTL}

if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
    echo "SKIP: needs root and iproute2"
    exit 77
fi
# shellcheck source=testbed.sh
source "$here/testbed.sh"

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

dir=$(mktemp -d /tmp/ringd-netns-test.XXXXXX)
daemons=()
name=""
cleanup() {
    local p
    for p in "${daemons[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${daemons[@]}"; do wait "$p" 2>/dev/null || true; done
    [ -z "$name" ] || tb_down "$name"
    rm -rf "$dir"
}
trap cleanup EXIT

# The testbed's veths (hI <-> eth0) live in its namespaces only. Count those
# names here: other tests may add veths of their own meanwhile (ctest runs
# test_container, whose systemd-nspawn adds ve-*, beside this one).
testbed_veths() { ip -o link show type veth 2>/dev/null | grep -cE '^[0-9]+: (h[0-9]+|eth0)@' || true; }
veths_before=$(testbed_veths)

tb_up 3 100mbit || fail "tb_up 3 100mbit"
name=$TESTBED
tb_verify || fail "the testbed is not isolated"
for i in 0 1 2; do
    tc -n "$(tb_ns $i)" qdisc show dev eth0 | grep -q 'tbf.*rate 100Mbit' ||
        fail "host $i: eth0 is not shaped to 100mbit"
    tc -n "$(tb_ns br)" qdisc show dev "h$i" | grep -q 'tbf.*rate 100Mbit' ||
        fail "switch port h$i is not shaped to 100mbit"
done

{
    echo "cluster: netns-test"
    echo "collective_timeout: 20s"
    echo "hosts:"
    for i in 0 1 2; do
        echo "  - name: h$i"
        echo "    address: $(tb_addr $i):7701"
        echo "    socket: $dir/h$i.sock"
    done
} >"$dir/ringd.yaml"
for i in 0 1 2; do
    ip netns exec "$(tb_ns $i)" "$ringd" --config "$dir/ringd.yaml" --host "h$i" \
        2>"$dir/ringd-h$i.log" &
    daemons+=($!)
done
for i in 0 1 2; do
    for ((k = 0; k < 100; k++)); do [ -S "$dir/h$i.sock" ] && break; sleep 0.05; done
    [ -S "$dir/h$i.sock" ] || fail "ringd of h$i did not start: $(cat "$dir/ringd-h$i.log")"
done

# 1 MiB per rank: each link carries 2/3 MiB each way.
pids=()
for i in 0 1 2; do
    ip netns exec "$(tb_ns $i)" timeout 30 "$ringctl" --socket "$dir/h$i.sock" allreduce \
        --count 262144 --dtype float32 --op sum --iters 2 >"$dir/ringctl-h$i.out" 2>&1 &
    pids+=($!)
done
for i in 0 1 2; do
    wait "${pids[$i]}" || fail "ringctl on h$i: $(cat "$dir/ringctl-h$i.out")
ringd log of h$i: $(cat "$dir/ringd-h$i.log")"
done
grep -q '3 ranks: ok' "$dir/ringctl-h0.out" || fail "unexpected output: $(cat "$dir/ringctl-h0.out")"
echo "allreduce across 3 namespaces: $(cat "$dir/ringctl-h0.out")"

# The data went over the testbed's links: 3 allreduces (1 warm-up, 2 timed)
# of 1 MiB bring each host 3 x 2/3 MiB.
rx=$(ip netns exec "$(tb_ns 0)" cat /sys/class/net/eth0/statistics/rx_bytes)
[ "${rx:-0}" -ge 2097152 ] || fail "host 0 received only ${rx:-0} bytes on eth0"

for p in "${daemons[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
for p in "${daemons[@]}"; do wait "$p" 2>/dev/null || true; done
daemons=()
tb_down "$name"
left=$(ip netns list | awk '{print $1}' | grep "^$name-" || true)
[ -z "$left" ] || fail "namespaces left after down: $left"
name=""
[ "$(testbed_veths)" -eq "$veths_before" ] ||
    fail "veth interfaces left in this namespace"

# `run` removes its testbed even when the command fails.
"$here/testbed.sh" run 2 none sh -c 'echo "$TESTBED" >"$1"; exit 3' sh "$dir/run-name"
rc=$?
[ $rc -eq 3 ] || fail "testbed.sh run returned $rc, expected the command's 3"
run_name=$(cat "$dir/run-name")
! ip netns list | awk '{print $1}' | grep -q "^$run_name-" || fail "testbed.sh run left $run_name"

echo "PASS"
