#!/usr/bin/env bash
# testbed.sh - N emulated hosts on this machine: network namespaces joined
# by a switch, each link shaped to a given rate in both directions.
#
#   testbed.sh up N RATE          create a testbed; print its NAME on stdout
#   testbed.sh run N RATE CMD...  create one, run CMD with $TESTBED set to its
#                                 name, remove it however CMD ends; exit
#                                 status of CMD
#   testbed.sh exec HOST CMD...   run CMD on host HOST (0..N-1) of $TESTBED
#                                 (or of the only testbed there is)
#   testbed.sh addr HOST          print host HOST's IPv4 address
#   testbed.sh down [NAME]        remove testbed NAME ($TESTBED if unset);
#                                 with neither, remove the leftovers: every
#                                 testbed whose owner process has exited
#   testbed.sh down --all         remove every testbed of this script
#   testbed.sh list               print the testbeds: NAME HOSTS OWNER-PID
#
# It is also a library: `source tests/netns/testbed.sh` defines tb_up,
# tb_down, tb_exec, tb_addr, tb_ns, tb_list and tb_verify (same arguments as
# the commands; tb_up sets TESTBED). The library sets no trap: a script that
# calls tb_up removes the testbed itself, e.g. `trap 'tb_down' EXIT`.
#
# What is built. A testbed NAME is rgd-<owner pid>[-k] (or $TB_PREFIX-...,
# for a test that keeps its testbeds apart from the others); the owner is the
# process that keeps it (the shell that ran `up`, this script for `run`, the
# shell that sourced it for tb_up), so parallel runs never collide and
# `down` knows what is left over. It has
#   NAME-br          a namespace holding the switch: bridge br0 with ports
#                    h0..h{N-1}, bridge netfilter off
#   NAME-h0 .. -hN-1 one namespace per host: lo, and eth0 with address
#                    198.18.0.(i+1)/24 (198.18.0.0/15 is reserved for
#                    benchmarks, RFC 2544; $TB_NET changes 198.18.0 to
#                    another /24 of it), MTU 1500, IPv6 off
# joined by veth pairs hI <-> eth0, created directly inside the namespaces:
# nothing is added to the namespace this script runs in, a host has no route
# but its /24, so all traffic stays inside the testbed (tb_verify
# checks this).
#
# Shaping. RATE is a tc rate (SI units: 100mbit, 1gbit, 10gbit) or `none`.
# A full-duplex link is two token bucket filters: `tbf` as root qdisc on
# egress of the host's eth0 (what the host sends) and on egress of the
# switch's port hI (what it receives). Burst: 1 ms of RATE, at least 128 KiB,
# so that a 64 KiB TSO/GSO packet passes whole; queue: 5 ms of RATE (tbf
# `latency 5ms`). On this testbed kind one TCP stream then reaches about 955
# Mbit/s of goodput at 1gbit (1448 payload bytes per 1514-byte frame: 95.6%).
# Smaller bursts (64 KiB) lose ~2%, and queues of 1 ms ~1.5%.
#
# Needs root and iproute2.

TB_PREFIX=${TB_PREFIX:-rgd}
TB_NET=${TB_NET:-198.18.0}

tb_die() {
    echo "testbed: $*" >&2
    return 1
}

# Prints the namespace name of host I of testbed $TESTBED.
tb_ns() {
    local t=${TESTBED:?TESTBED is not set}
    case $1 in
    br) echo "$t-br" ;;
    h[0-9]*) echo "$t-$1" ;;
    [0-9]*) echo "$t-h$1" ;;
    *) tb_die "no host '$1' (expected 0..N-1)" ;;
    esac
}

tb_addr() {
    local i=${1#h}
    [[ $i =~ ^[0-9]+$ ]] || tb_die "no host '$1'" || return 1
    echo "$TB_NET.$((i + 1))"
}

# Prints "NAME HOSTS OWNER" for each testbed.
tb_list() {
    local ns name
    declare -A hosts=()
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
        [[ $ns =~ ^($TB_PREFIX-[0-9]+(-[0-9]+)?)-(br|h[0-9]+)$ ]] || continue
        name=${BASH_REMATCH[1]}
        : "${hosts[$name]:=0}"
        [[ ${BASH_REMATCH[3]} == br ]] || hosts[$name]=$((hosts[$name] + 1))
    done
    for name in "${!hosts[@]}"; do
        local owner=${name#"$TB_PREFIX"-}
        echo "$name ${hosts[$name]} ${owner%%-*}"
    done | sort
}

# Ends the processes still running in namespace $1 (ours: nothing else runs
# there), TERM first, KILL after 2 s.
tb_kill_ns() {
    local pids i
    pids=$(ip netns pids "$1" 2>/dev/null) || return 0
    [ -n "$pids" ] || return 0
    # shellcheck disable=SC2086
    kill -TERM $pids 2>/dev/null || true
    for ((i = 0; i < 20; i++)); do
        pids=$(ip netns pids "$1" 2>/dev/null) || return 0
        [ -n "$pids" ] || return 0
        sleep 0.1
    done
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
}

# Removes one testbed (its processes, hosts, veths and switch).
tb_remove() {
    local name=$1 ns
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
        [[ $ns == "$name"-br || $ns =~ ^"$name"-h[0-9]+$ ]] || continue
        tb_kill_ns "$ns"
        ip netns del "$ns" 2>/dev/null || true
    done
}

tb_down() {
    local what=${1:-${TESTBED:-}} name hosts owner
    if [ -n "$what" ] && [ "$what" != --all ]; then
        tb_remove "$what"
        [ "$what" != "${TESTBED:-}" ] || unset TESTBED
        return 0
    fi
    while read -r name hosts owner; do
        [ -n "$name" ] || continue
        if [ "$what" = --all ] || ! kill -0 "$owner" 2>/dev/null; then
            echo "testbed: removing $name ($hosts hosts, owner $owner)" >&2
            tb_remove "$name"
        fi
    done < <(tb_list)
}

# Prints the tbf burst in bytes for rate $1, or fails on a bad rate.
tb_tbf_params() {
    local num unit bps
    [[ $1 =~ ^([0-9]+)(bit|kbit|mbit|gbit|tbit)$ ]] ||
        tb_die "rate '$1': expected a number with bit, kbit, mbit, gbit or tbit (SI), or none" ||
        return 1
    num=${BASH_REMATCH[1]}
    unit=${BASH_REMATCH[2]}
    case $unit in
    bit) bps=$num ;;
    kbit) bps=$((num * 1000)) ;;
    mbit) bps=$((num * 1000000)) ;;
    gbit) bps=$((num * 1000000000)) ;;
    tbit) bps=$((num * 1000000000000)) ;;
    esac
    [ "$bps" -ge 1000000 ] || tb_die "rate '$1' is below 1mbit" || return 1
    local ms=$((bps / 8 / 1000)) burst
    burst=$((ms > 131072 ? ms : 131072))
    echo "$burst"
}

# The body of tb_up; any failure leaves a half-built testbed that tb_up removes.
tb_build() {
    local n=$1 rate=$2 burst i h
    local br=$TESTBED-br
    if [ "$rate" != none ]; then burst=$(tb_tbf_params "$rate") || return 1; fi
    ip netns add "$br" || return 1
    ip netns exec "$br" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 \
        net.ipv6.conf.default.disable_ipv6=1 || return 1
    # Bridged frames must not detour through this namespace's iptables.
    ip netns exec "$br" sysctl -qw net.bridge.bridge-nf-call-iptables=0 \
        net.bridge.bridge-nf-call-ip6tables=0 net.bridge.bridge-nf-call-arptables=0 \
        2>/dev/null || true
    ip -n "$br" link add br0 type bridge || return 1
    ip -n "$br" link set br0 up || return 1
    for ((i = 0; i < n; i++)); do
        h=$TESTBED-h$i
        ip netns add "$h" || return 1
        ip netns exec "$h" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 \
            net.ipv6.conf.default.disable_ipv6=1 || return 1
        ip -n "$br" link add "h$i" type veth peer name eth0 netns "$h" || return 1
        ip -n "$br" link set "h$i" master br0 up || return 1
        ip -n "$h" link set lo up || return 1
        ip -n "$h" addr add "$(tb_addr "$i")/24" dev eth0 || return 1
        ip -n "$h" link set eth0 up || return 1
        if [ "$rate" != none ]; then
            tc -n "$h" qdisc replace dev eth0 root tbf rate "$rate" burst "$burst" \
                latency 5ms || return 1
            tc -n "$br" qdisc replace dev "h$i" root tbf rate "$rate" burst "$burst" \
                latency 5ms || return 1
        fi
    done
}

# tb_up N RATE: builds a testbed owned by the calling shell, sets TESTBED.
tb_up() {
    local n=${1:-} rate=${2:-} owner=${TB_OWNER:-$$} name k
    [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 250 ] ||
        tb_die "N '$n': expected 1 to 250 hosts" || return 1
    [ -n "$rate" ] || tb_die "missing RATE (e.g. 1gbit, or none)" || return 1
    [ "$(id -u)" -eq 0 ] || tb_die "needs root (network namespaces)" || return 1
    command -v ip >/dev/null && command -v tc >/dev/null ||
        tb_die "needs iproute2 (ip, tc)" || return 1
    name=$TB_PREFIX-$owner
    for ((k = 2; k < 100; k++)); do
        ip netns list | awk '{print $1}' | grep -q "^$name-" || break
        name=$TB_PREFIX-$owner-$k
    done
    TESTBED=$name
    export TESTBED
    if ! tb_build "$n" "$rate"; then
        tb_remove "$name"
        unset TESTBED
        tb_die "could not build $n hosts at $rate; nothing is left behind"
        return 1
    fi
}

# tb_exec HOST CMD...: runs CMD in host HOST's namespace.
tb_exec() {
    local ns
    [ $# -ge 2 ] || tb_die "usage: exec HOST CMD..." || return 1
    ns=$(tb_ns "$1") || return 1
    shift
    ip netns exec "$ns" "$@"
}

# Checks that testbed $TESTBED is what the header says: each host has lo and
# eth0 only, no route outside $TB_NET.0/24, and the calling namespace has
# neither its interfaces nor its addresses.
tb_verify() {
    local ns links routes net=${TB_NET//./\\.}
    for ns in $(ip netns list | awk '{print $1}' | grep "^$TESTBED-h[0-9]*$"); do
        links=$(ip -n "$ns" -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | sort |
            tr '\n' ' ')
        [ "$links" = "eth0 lo " ] || tb_die "$ns has interfaces '$links', expected eth0 and lo" ||
            return 1
        routes=$(ip -n "$ns" -4 route show | grep -v "^$net\\.0/24 " || true)
        [ -z "$routes" ] || tb_die "$ns has routes out of the testbed: $routes" || return 1
        ! ip -n "$ns" route get 192.0.2.1 >/dev/null 2>&1 ||
            tb_die "$ns can reach 192.0.2.1: traffic could leave the testbed" || return 1
    done
    ! ip -o addr show | grep -q " $net\\." ||
        tb_die "this namespace has an address in $TB_NET.0/24" || return 1
}

tb_main() {
    local cmd=${1:-}
    shift || true
    case $cmd in
    up)
        [ $# -eq 2 ] || tb_die "usage: up N RATE" || return 2
        # The testbed belongs to the shell that asked for it.
        TB_OWNER=$PPID tb_up "$1" "$2" || return 1
        echo "$TESTBED"
        ;;
    run)
        [ $# -ge 3 ] || tb_die "usage: run N RATE CMD..." || return 2
        local n=$1 rate=$2
        shift 2
        trap '[ -z "${TESTBED:-}" ] || tb_remove "$TESTBED"' EXIT
        trap 'exit 130' INT
        trap 'exit 143' TERM
        tb_up "$n" "$rate" || return 1
        tb_verify || return 1
        "$@"
        ;;
    exec)
        if [ -z "${TESTBED:-}" ]; then
            local all
            all=$(tb_list | awk '{print $1}')
            [ "$(echo "$all" | grep -c .)" -eq 1 ] ||
                tb_die "set TESTBED: there are $(echo "$all" | grep -c .) testbeds" || return 2
            TESTBED=$all
        fi
        tb_exec "$@"
        ;;
    addr) tb_addr "$@" ;;
    down) tb_down "$@" ;;
    list) tb_list ;;
    verify) tb_verify ;;
    *)
        sed -n '2,/^$/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
        return 2
        ;;
    esac
}

# Run as a command unless sourced.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -uo pipefail
    tb_main "$@"
    exit $?
fi
