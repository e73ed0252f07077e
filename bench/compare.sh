#!/usr/bin/env bash
# compare.sh - ringd, Open MPI and Gloo side by side in one run: the same
# float32 sum allreduce on the same testbed (N hosts, default 4; links of
# RATE, default none: unshaped, for latency), ROUNDS rounds (default 3) of
# each in turn for every size of SIZES (default "8 4K 64K 1M").
#
#   bench/compare.sh [N [RATE]]      SIZES, ROUNDS, ITERS (200) from the environment
#
# Each is timed the same way (ringd_bench's): every timed run right after an
# 8-byte allreduce that starts the ranks together, the time of a run the
# slowest rank's, the median over ITERS runs (ringd_bench takes fewer when
# they would pass 20 s). ringd: bench/run.sh (a daemon and a ringd_bench
# rank per host, the default configuration); Open MPI: bench/mpi_bench.c
# under mpirun, its default tuning (the tcp and self transports on eth0,
# since a namespace has no other; the launcher reaches the other hosts
# through `ip netns exec`, not ssh) but for mpi_yield_when_idle 1: the
# testbed's hosts share this machine's cores, and Open MPI's busy polling,
# free on a host of its own, takes the CPU the other hosts' ranks need
# (8 ms for 8 bytes at N = 4 on 2 cores without it, 135 us with it);
# MPI_ARGS adds options. Gloo: bench/gloo_bench.cc (its ring allreduce as
# PyTorch runs it). Prints each round's medians, then the
# median of the rounds for each and the ratios ringd / Open MPI and
# ringd / Gloo.
#
# Needs root, and installs what is missing (deploy/install-deps.sh --bench:
# g++, libgloo-dev, openmpi-bin, libopenmpi-dev).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=../tests/netns/testbed.sh
source "$root/tests/netns/testbed.sh"
case ${1:-} in -h | --help) sed -n '2,/^set -e/{/^set -e/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;; esac
n=${1:-4} rate=${2:-none}
sizes=${SIZES:-8 4K 64K 1M} rounds=${ROUNDS:-3} iters=${ITERS:-200}
read -ra mpi_args <<<"${MPI_ARGS:-}"
[ "$(id -u)" -eq 0 ] || { echo "compare.sh: needs root (network namespaces)" >&2; exit 1; }
if [ ! -f /usr/include/gloo/allreduce.h ] || ! command -v g++ >/dev/null ||
    ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
    "$root/deploy/install-deps.sh" --bench
fi
build=${RINGD_BUILD:-$root/build}
dir=$(mktemp -d /tmp/ringd-compare.XXXXXX)
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    [ -z "${TESTBED:-}" ] || tb_down "$TESTBED"
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

g++ -O2 -std=c++17 "$root/bench/gloo_bench.cc" -o "$dir/gloo_bench" -lgloo -lpthread
mpicc -O2 "$root/bench/mpi_bench.c" -o "$dir/mpi_bench"
# mpirun's launcher: "AGENT HOST COMMAND..." runs COMMAND, as ssh would, in
# the namespace of the testbed host whose address HOST is.
cat >"$dir/nsexec" <<'EOF'
#!/usr/bin/env bash
host=$1
shift
exec ip netns exec "$TESTBED-h$((${host##*.} - 1))" /bin/sh -c "$*"
EOF
chmod +x "$dir/nsexec"

# Each sets us to the median in microseconds of one run of ringd, Open MPI or
# Gloo (in this shell, so that cleanup knows the testbed it is on).
ringd_once() {
    us=""
    RINGD_BUILD="$build" "$root/bench/run.sh" "$n" "$rate" --no-iperf -- --min "$1" --max "$1" \
        --iters "$iters" --budget 20 >"$dir/ringd.txt" 2>&1 ||
        { cat "$dir/ringd.txt" >&2; return 1; }
    us=$(awk '!/^#/ && NF >= 7 { print $4 }' "$dir/ringd.txt")
}

mpi_once() {
    local bytes hosts="" i try
    us=""
    bytes=$(numfmt --from=iec "$1")
    for ((try = 1; try <= 3; try++)); do
        tb_up "$n" "$rate"
        hosts=""
        for ((i = 0; i < n; i++)); do hosts+=${hosts:+,}$(tb_addr "$i"); done
        # mpirun in host 0's namespace, its daemons through nsexec (which
        # needs TESTBED). Without the rtc framework's hwloc component: it
        # maps mpirun's topology at a fixed address in every orted, which
        # the orteds of one machine may already use (they segfault).
        if ip netns exec "$(tb_ns 0)" env TESTBED="$TESTBED" timeout 300 \
            mpirun --allow-run-as-root -np "$n" --host "$hosts" \
            --mca plm_rsh_agent "$dir/nsexec" --mca rtc ^hwloc --mca pml ob1 \
            --mca btl tcp,self --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 \
            --mca mpi_yield_when_idle 1 "${mpi_args[@]}" "$dir/mpi_bench" "$bytes" "$iters" \
            >"$dir/mpi.txt" 2>&1; then
            tb_down "$TESTBED"
            unset TESTBED
            us=$(awk '$1 == "bytes" { print $6 }' "$dir/mpi.txt")
            return 0
        fi
        tb_down "$TESTBED"
        unset TESTBED
        echo "compare.sh: mpirun failed (attempt $try of 3):" >&2
        tail -5 "$dir/mpi.txt" >&2
    done
    return 1
}

gloo_once() {
    local bytes i status=0
    us=""
    bytes=$(numfmt --from=iec "$1")
    tb_up "$n" "$rate"
    rm -rf "$dir/store" && mkdir "$dir/store"
    pids=()
    for ((i = 0; i < n; i++)); do
        ip netns exec "$(tb_ns "$i")" timeout 300 "$dir/gloo_bench" "$i" "$n" "$dir/store" \
            "$(tb_addr "$i")" "$bytes" "$iters" each >"$dir/gloo-$i.txt" 2>&1 &
        pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i" || status=1; done
    pids=()
    tb_down "$TESTBED"
    unset TESTBED
    [ $status -eq 0 ] || { cat "$dir"/gloo-*.txt >&2; return 1; }
    us=$(awk '$1 == "bytes" { print $6 }' "$dir/gloo-0.txt")
}

printf '# %d hosts, links %s, float32 sum, median of %d runs (slowest rank); %s; load %s\n' \
    "$n" "$rate" "$iters" "$(date -u +%FT%TZ)" "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-6s %5s %12s %12s %12s\n' size round ringd_us mpi_us gloo_us
for size in $sizes; do
    for ((r = 1; r <= rounds; r++)); do
        # A run that fails (or prints no time) ends the script, saying why.
        ringd_once "$size"
        ringd_us=${us:?ringd_bench printed no time}
        mpi_once "$size"
        mpi_us=${us:?mpi_bench printed no time}
        gloo_once "$size"
        gloo_us=${us:?gloo_bench printed no time}
        printf '%-6s %5d %12.1f %12.1f %12.1f\n' "$size" "$r" "$ringd_us" "$mpi_us" "$gloo_us" |
            tee -a "$dir/rounds.txt"
    done
done
echo
echo "# the median of the rounds, and the ratios"
printf '%-6s %12s %12s %12s %14s %14s\n' size ringd_us mpi_us gloo_us ringd/mpi ringd/gloo
for size in $sizes; do
    awk -v s="$size" '
        function median(a, k,    i, j, t) {
            for (i = 2; i <= k; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) {
                t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
            return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2 }
        $1 == s { k++; r[k] = $3; m[k] = $4; g[k] = $5 }
        END { rm = median(r, k); mm = median(m, k); gm = median(g, k)
            printf "%-6s %12.1f %12.1f %12.1f %14.2f %14.2f\n", s, rm, mm, gm, rm / mm, rm / gm }
    ' "$dir/rounds.txt"
done
