#!/usr/bin/env bash
# run.sh - ringd on emulated Ethernet: a testbed of N hosts (network
# namespaces, tests/netns/testbed.sh), one ringd and one ringd_bench rank per
# host, the sweep table with busbw / iperf3 goodput, and the CPU the daemons
# used per GB reduced. Everything is torn down however it ends.
#
#   bench/run.sh [N [RATE]] [OPTIONS] [-- RINGD_BENCH OPTIONS]
#       N hosts (default 4) on links of RATE (default 1gbit; a tc rate, or
#       `none`: unshaped veths, for latency and CPU figures)
#   bench/run.sh --latency [OPTIONS] [-- RINGD_BENCH OPTIONS]
#       8-byte allreduce latency on unshaped links for N = 1, 2, 4, 8, and the
#       least-squares fit time = a + b x hops (a ring allreduce is 2(N-1) hops);
#       the hop limit: one hop measured by bench/ringd_hop (a frame's round
#       trip between hosts 0 and 1, halved) and the client's round trip to its
#       daemon (N = 1), and each N's time as a multiple of 2(N-1) hops plus it
#
# Options:
#   --algorithm ALG       algorithm of the daemons: ring (default) or star
#   --segment SIZE        segment_size of the daemons (default: ringd's)
#   --socket-buffer SIZE  socket_buffer of the daemons (default: ringd's)
#   --no-iperf            skip the iperf3 goodput measurement
#   --perf FILE           perf record -g the daemon of host 0 into FILE
#   --keep DIR            keep the configuration, logs and outputs in DIR
#   --cc NAME             the hosts' default TCP congestion control (sysctl in
#                         each namespace; default: the machine's)
# Environment: RINGD_EXTRA_YAML, lines added to the daemons' configuration
# (e.g. "checksum: none").
#
# Examples:
#   bench/run.sh                                   # 4 hosts, 1gbit, 8 B..256 MiB
#   bench/run.sh 8 1gbit -- --min 1M --max 64M --factor 4
#   bench/run.sh 4 none -- --min 64M --max 64M     # CPU per GB, unshaped
#
# The binaries come from $RINGD_BUILD (default build/, configured and built
# here if it has no ringd_bench). iperf3 is installed (install-deps.sh --bench)
# if it is missing. Needs root (namespaces) and iproute2. The goodput is that of one
# TCP stream from host 0 to host 1, alone on the testbed (the issue's
# reference); the table's bus/good column divides busbw by it. With several
# hosts it also reports the goodput of N streams at once around the ring
# (i -> i+1), which is what the ring's links see, on a machine whose cores
# carry every link's traffic.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=../tests/netns/testbed.sh
source "$root/tests/netns/testbed.sh"

n=4 rate=1gbit latency=0 iperf=1 segment="" sockbuf="" perf_out="" keep="" algorithm="" cc=""
bench_args=()
pos=0
while [ $# -gt 0 ]; do
    case $1 in
    --latency) latency=1 ;;
    --algorithm) algorithm=$2; shift ;;
    --segment) segment=$2; shift ;;
    --socket-buffer) sockbuf=$2; shift ;;
    --no-iperf) iperf=0 ;;
    --perf) perf_out=$2; shift ;;
    --keep) keep=$2; shift ;;
    --cc) cc=$2; shift ;;
    --) shift; bench_args=("$@"); break ;;
    -h | --help) sed -n '2,/^set -e/{/^set -e/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    -*) echo "run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *)
        case $pos in
        0) n=$1 ;;
        1) rate=$1 ;;
        *) echo "run.sh: unexpected argument $1" >&2; exit 2 ;;
        esac
        pos=$((pos + 1))
        ;;
    esac
    shift
done
[[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 2 ] && [ "$n" -le 64 ] ||
    { echo "run.sh: N must be 2 to 64, got '$n'" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "run.sh: needs root (network namespaces)" >&2; exit 1; }

build=${RINGD_BUILD:-$root/build}
if [ ! -x "$build/bench/ringd_bench" ] || [ ! -x "$build/bench/ringd_hop" ] ||
    [ ! -x "$build/daemon/ringd" ]; then
    "$root/deploy/install-deps.sh" --bench
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    cmake --build "$build" -j "$(nproc)" --target ringd ringd_bench ringd_hop >/dev/null
fi
if [ $iperf -eq 1 ] && ! command -v iperf3 >/dev/null; then
    "$root/deploy/install-deps.sh" --bench
fi

dir=$(mktemp -d /tmp/ringd-bench.XXXXXX)
daemons=() servers=()
cleanup() {
    local p
    for p in "${daemons[@]}" "${servers[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${daemons[@]}" "${servers[@]}"; do wait "$p" 2>/dev/null || true; done
    daemons=() servers=()
    [ -z "${TESTBED:-}" ] || tb_down "$TESTBED"
    if [ -n "$keep" ]; then
        mkdir -p "$keep" && cp -r "$dir"/. "$keep"/
    fi
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Prints the receiver's goodput in Mbit/s of `iperf3 -c` output on stdin.
receiver_mbits() {
    awk '/receiver/ { for (i = 1; i <= NF; i++) if ($i == "Mbits/sec") print $(i - 1) }' | tail -1
}

# Measures TCP goodput on the testbed: host 0 -> 1 alone, then N streams
# i -> i+1 at once. Sets goodput_MBps (the first, in MB/s).
measure_goodput() {
    local i secs=5 pids=() total=0 min="" v
    for ((i = 0; i < n; i++)); do
        ip netns exec "$(tb_ns "$i")" iperf3 -s -B "$(tb_addr "$i")" -p 5201 >"$dir/iperf-s$i.log" 2>&1 &
        servers+=($!)
    done
    sleep 0.5
    tb_exec 0 timeout 30 iperf3 -f m -c "$(tb_addr 1)" -p 5201 -t $secs >"$dir/iperf-pair.txt"
    v=$(receiver_mbits <"$dir/iperf-pair.txt")
    goodput_MBps=$(awk -v m="$v" 'BEGIN { printf "%.2f", m / 8 }')
    echo "# iperf3, one TCP stream host 0 -> 1 for ${secs} s: $v Mbit/s = $goodput_MBps MB/s"
    if [ "$n" -gt 2 ]; then
        for ((i = 0; i < n; i++)); do
            tb_exec "$i" timeout 30 iperf3 -f m -c "$(tb_addr $(((i + 1) % n)))" -p 5201 \
                -t $secs >"$dir/iperf-ring$i.txt" &
            pids+=($!)
        done
        for i in "${pids[@]}"; do wait "$i"; done
        for ((i = 0; i < n; i++)); do
            v=$(receiver_mbits <"$dir/iperf-ring$i.txt")
            total=$(awk -v a="$total" -v b="$v" 'BEGIN { print a + b }')
            min=$(awk -v a="${min:-$v}" -v b="$v" 'BEGIN { print (b < a ? b : a) }')
        done
        echo "# iperf3, $n streams i -> i+1 at once: mean $(awk -v t="$total" -v n="$n" \
            'BEGIN { printf "%.0f", t / n }') Mbit/s, slowest $min Mbit/s per link"
    fi
    for i in "${servers[@]}"; do kill -TERM "$i" 2>/dev/null || true; done
    for i in "${servers[@]}"; do wait "$i" 2>/dev/null || true; done
    servers=()
}

# user+sys CPU ticks of the processes given.
cpu_ticks() {
    local p sum=0 f
    for p in "$@"; do
        f=$(sed 's/^.*) //' "/proc/$p/stat") # fields from the 3rd on
        # utime and stime are fields 14 and 15: 12th and 13th after the name.
        sum=$((sum + $(echo "$f" | awk '{ print $12 + $13 }')))
    done
    echo "$sum"
}

# TX bytes of eth0 of hosts 0..$1-1 of the testbed, on one line.
tx_bytes() {
    local i out=()
    for ((i = 0; i < $1; i++)); do
        out+=("$(ip netns exec "$(tb_ns "$i")" cat /sys/class/net/eth0/statistics/tx_bytes)")
    done
    echo "${out[*]}"
}

# Busy and total CPU ticks of the machine (all cores), from /proc/stat.
# What the network did, summed over the hosts: TCP segments retransmitted,
# retransmission timeouts, tail loss probes, and packets the links' tbf
# dropped (hosts' eth0 and the switch's ports).
net_counters() {
    local i r=0 t=0 p=0 d=0 v
    for ((i = 0; i < $1; i++)); do
        v=$(ip netns exec "$(tb_ns "$i")" nstat -asz TcpRetransSegs TcpExtTCPTimeouts \
            TcpExtTCPLossProbes 2>/dev/null | awk '$1 == "TcpRetransSegs" { r = $2 }
            $1 == "TcpExtTCPTimeouts" { t = $2 } $1 == "TcpExtTCPLossProbes" { p = $2 }
            END { print r + 0, t + 0, p + 0 }')
        read -r a b c <<<"$v"
        r=$((r + a)) t=$((t + b)) p=$((p + c))
        v=$(tc -s -n "$(tb_ns "$i")" qdisc show dev eth0 2>/dev/null |
            awk '/dropped/ { for (k = 1; k <= NF; k++) if ($k == "(dropped") s += $(k + 1) } END { print s + 0 }')
        d=$((d + ${v%,}))
        v=$(tc -s -n "$TESTBED-br" qdisc show dev "h$i" 2>/dev/null |
            awk '/dropped/ { for (k = 1; k <= NF; k++) if ($k == "(dropped") s += $(k + 1) } END { print s + 0 }')
        d=$((d + ${v%,}))
    done
    echo "$r $t $p $d"
}

machine_ticks() {
    awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' \
        /proc/stat
}

# Runs one benchmark on a fresh testbed of $1 hosts at rate $2; the extra
# arguments go to ringd_bench. Rank 0's output goes to stdout.
run_one() {
    local hosts=$1 lrate=$2
    shift 2
    local i pids=() status=0
    goodput_MBps=0
    n=$hosts
    tb_up "$hosts" "$lrate"
    tb_verify
    if [ -n "$cc" ]; then
        for ((i = 0; i < hosts; i++)); do
            ip netns exec "$(tb_ns "$i")" sysctl -qw net.ipv4.tcp_congestion_control="$cc"
        done
    fi
    echo "# testbed $TESTBED: $hosts hosts, links $lrate; $(nproc) cores; binaries from $build;" \
        "TCP congestion control $(ip netns exec "$(tb_ns 0)" sysctl -n net.ipv4.tcp_congestion_control)"
    if [ "$lrate" != none ] && [ $iperf -eq 1 ]; then measure_goodput; fi

    {
        echo "cluster: bench"
        echo "collective_timeout: 30m"
        [ -z "$algorithm" ] || echo "algorithm: $algorithm"
        [ -z "$segment" ] || echo "segment_size: $segment"
        [ -z "$sockbuf" ] || echo "socket_buffer: $sockbuf"
        [ -z "${RINGD_EXTRA_YAML:-}" ] || printf '%s\n' "$RINGD_EXTRA_YAML"
        echo "hosts:"
        for ((i = 0; i < hosts; i++)); do
            echo "  - name: h$i"
            echo "    address: $(tb_addr "$i"):7701"
            echo "    socket: $dir/h$i.sock"
        done
    } >"$dir/ringd.yaml"
    echo "# ringd.yaml: algorithm ${algorithm:-ring}, segment_size ${segment:-default}, socket_buffer ${sockbuf:-default}"
    for ((i = 0; i < hosts; i++)); do
        rm -f "$dir/h$i.sock"
        # `ip netns exec` execs the command: $! is the daemon itself.
        ip netns exec "$(tb_ns "$i")" "$build/daemon/ringd" --config "$dir/ringd.yaml" --host "h$i" \
            2>"$dir/ringd-h$i.log" &
        daemons+=($!)
    done
    for ((i = 0; i < hosts; i++)); do
        local k
        for ((k = 0; k < 100; k++)); do [ -S "$dir/h$i.sock" ] && break; sleep 0.05; done
        [ -S "$dir/h$i.sock" ] || { echo "run.sh: ringd of h$i did not start:" >&2;
            cat "$dir/ringd-h$i.log" >&2; return 1; }
    done

    # One hop, between hosts 0 and 1, the daemons idle (--latency).
    if [ $latency -eq 1 ] && [ "$hosts" -ge 2 ]; then
        # `ip netns exec` execs the command: $! is the listener itself.
        ip netns exec "$(tb_ns 1)" timeout 120 "$build/bench/ringd_hop" --listen \
            "$(tb_addr 1):7702" --config "$dir/ringd.yaml" 2>"$dir/hop-listen.err" &
        local hop_pid=$! k hop_ok=0
        for ((k = 0; k < 100; k++)); do
            tb_exec 0 timeout 60 "$build/bench/ringd_hop" --connect "$(tb_addr 1):7702" \
                --config "$dir/ringd.yaml" >"$dir/hop-$hosts.txt" 2>"$dir/hop-connect.err" &&
                { hop_ok=1; break; }
            sleep 0.05 # the listener is not up yet
        done
        [ $hop_ok = 1 ] || kill -TERM "$hop_pid" 2>/dev/null || true
        if ! wait "$hop_pid" || [ $hop_ok = 0 ]; then
            echo "run.sh: ringd_hop failed:" >&2
            cat "$dir"/hop-*.err >&2
            return 1
        fi
        grep '^#' "$dir/hop-$hosts.txt"
    fi

    local perf_pid="" args=("$@")
    [ "$goodput_MBps" = 0 ] || args+=(--goodput "$goodput_MBps")
    if [ -n "$perf_out" ]; then
        perf record -q -g -o "$perf_out" -p "${daemons[0]}" 2>"$dir/perf.log" &
        perf_pid=$!
    fi
    local cpu0 t0 t1 m0 load0 tx0 net0
    tx0=$(tx_bytes "$hosts")
    net0=$(net_counters "$hosts")
    load0=$(cut -d' ' -f1 /proc/loadavg)
    m0=$(machine_ticks)
    cpu0=$(cpu_ticks "${daemons[@]}")
    t0=$(date +%s.%N)
    for ((i = 0; i < hosts; i++)); do
        ip netns exec "$(tb_ns "$i")" timeout 3600 "$build/bench/ringd_bench" --socket "$dir/h$i.sock" \
            "${args[@]}" >"$dir/bench-h$i.out" 2>"$dir/bench-h$i.err" &
        pids+=($!)
    done
    for i in "${!pids[@]}"; do wait "${pids[$i]}" || status=1; done
    t1=$(date +%s.%N)
    local cpu1 m1 tx1
    tx1=$(tx_bytes "$hosts")
    cpu1=$(cpu_ticks "${daemons[@]}")
    m1=$(machine_ticks)
    if [ -n "$perf_pid" ]; then
        kill -INT "$perf_pid" 2>/dev/null || true
        wait "$perf_pid" 2>/dev/null || true
    fi
    cat "$dir/bench-h0.out"
    if [ $status -ne 0 ]; then
        echo "run.sh: ringd_bench failed:" >&2
        cat "$dir"/bench-h*.err >&2
        return 1
    fi
    local bytes runs
    bytes=$(awk '/^# total:/ { print $3 } /total_bytes_reduced/ {
        sub(/.*"total_bytes_reduced":/, ""); sub(/,.*/, ""); print }' "$dir/bench-h0.out")
    runs=$(awk '/^# total:/ { print $7 } /total_bytes_reduced/ {
        sub(/.*"allreduces":/, ""); sub(/,.*/, ""); print }' "$dir/bench-h0.out")
    awk -v c="$((cpu1 - cpu0))" -v hz="$(getconf CLK_TCK)" -v b="${bytes:-0}" -v n="$hosts" \
        -v r="${runs:-0}" -v wall="$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" 'BEGIN {
        s = c / hz
        printf "# daemons: %.2f CPU s (user+sys, all %d) in %.1f s of wall time", s, n, wall
        if (b >= 1e8) printf "; %.3f CPU s per GB reduced (%.3f GB)", s / (b / 1e9), b / 1e9
        else if (r > 0) printf "; %.0f CPU us per allreduce (all daemons)", s * 1e6 / r
        printf "\n" }'
    # The ranks'"'"' own CPU inside libringd'"'"'s calls (not their refill and check).
    cat "$dir"/bench-h*.err | awk -v c="$((cpu1 - cpu0))" -v hz="$(getconf CLK_TCK)" \
        -v b="${bytes:-0}" -v n="$hosts" '/client CPU s in the allreduce calls/ { s += $NF; k++ }
        END { if (k == 0 || b < 1e8) exit
            printf "# clients: %.2f CPU s inside the allreduce calls (all %d); daemons and clients: %.3f CPU s per GB reduced\n", \
                s, k, (c / hz + s) / (b / 1e9) }'
    # What each host put on the wire (eth0 TX: frames with their headers)
    # per allreduce of the benchmark; the line-up allreduces add ~100 B.
    echo "$tx0 $tx1" | awk -v r="${runs:-0}" -v n="$hosts" '{
        if (r == 0) exit
        printf "# wire bytes sent per allreduce (eth0 TX / %d allreduces):", r
        max = 0
        for (i = 1; i <= n; i++) {
            d = ($(n + i) - $i) / r
            printf " h%d %.0f", i - 1, d
            if (d > max) { max = d; h = i - 1 }
        }
        printf "; busiest h%d %.0f\n", h, max }'
    echo "$net0 $(net_counters "$hosts")" | awk '{
        printf "# network during the run (all hosts): %d TCP segments retransmitted, %d retransmission timeouts, %d tail loss probes; %d packets dropped by the links\n", \
            $5 - $1, $6 - $2, $7 - $3, $8 - $4 }'
    echo "$m0 $m1" | awk -v c="$((cpu1 - cpu0))" -v hz="$(getconf CLK_TCK)" -v l0="$load0" \
        -v l1="$(cut -d' ' -f1 /proc/loadavg)" '{
        printf "# machine: %.1f of %.1f CPU s busy during the run, %.1f s of it not the daemons", \
            ($3 - $1) / hz, ($4 - $2) / hz, ($3 - $1 - c) / hz
        printf " (ringd_bench ranks, and anything else running); load average %s -> %s\n", l0, l1 }'

    for i in "${daemons[@]}"; do kill -TERM "$i" 2>/dev/null || true; done
    for i in "${daemons[@]}"; do wait "$i" 2>/dev/null || true; done
    daemons=()
    tb_down "$TESTBED"
}

if [ $latency -eq 0 ]; then
    run_one "$n" "$rate" "${bench_args[@]}"
    exit 0
fi

# Latency: 8 bytes, many runs, unshaped, N = 1 (the client's round trip to
# its daemon), 2, 4, 8.
fit=() meds=()
for hosts in 1 2 4 8; do
    run_one "$hosts" none --min 8 --max 8 --warmup 50 --iters 1000 --budget 10 \
        "${bench_args[@]}" | tee "$dir/lat-$hosts.txt"
    med=$(awk '!/^#/ && NF >= 5 { print $4 }' "$dir/lat-$hosts.txt")
    meds+=("$hosts $med")
    [ "$hosts" = 1 ] || fit+=("$((2 * (hosts - 1))) $med")
    echo
done
# The hop limit: 2(N-1) hops (the median of the hops measured with N = 2, 4
# and 8 hosts on the testbed) plus the client's round trip (N = 1).
hop=$(cat "$dir"/hop-*.txt | awk '/^hop_us/ { print $2 }' | sort -g | awk '{ v[NR] = $1 }
    END { print v[int((NR + 1) / 2)] }')
printf '%s\n' "${meds[@]}" | awk -v hop="$hop" '$1 == 1 { c = $2 } $1 > 1 { n[++k] = $1; t[k] = $2 }
    END {
        printf "# hop limit: one hop %.1f us (ringd_hop: half a frame'"'"'s median round trip between two hosts, median of %d testbeds); the client'"'"'s round trip to its daemon %.1f us (the 8-byte allreduce of one host)\n", hop, k, c
        for (i = 1; i <= k; i++) {
            lim = 2 * (n[i] - 1) * hop + c
            printf "#   N = %d: %.1f us measured, hop limit 2(N-1) x %.1f + %.1f = %.1f us: %.2f x the limit\n", n[i], t[i], hop, c, lim, t[i] / lim
        }
    }'
printf '%s\n' "${fit[@]}" | awk '{ x[NR] = $1; y[NR] = $2; sx += $1; sy += $2 }
    END {
        for (i = 1; i <= NR; i++) { sxx += (x[i] - sx / NR) ^ 2; sxy += (x[i] - sx / NR) * (y[i] - sy / NR) }
        b = sxy / sxx; a = sy / NR - b * sx / NR
        printf "# 8-byte allreduce, unshaped: median time = %.1f us + %.1f us x hops (hops = 2(N-1))\n", a, b
        for (i = 1; i <= NR; i++) printf "#   N = %d: %d hops, %.1f us measured, %.1f us fitted\n", x[i] / 2 + 1, x[i], y[i], a + b * x[i]
    }'
