#!/usr/bin/env bash
# The demo: a ring of 4 ringd daemons on this machine (127.0.0.1), one client
# per host, allreduces of a few sizes, checked and timed.
#
#   deploy/demo.sh                 build if needed, then run the demo
#   RINGD_DEMO_PORT=9701 deploy/demo.sh   use ports 9701..9704
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

"deploy/install-deps.sh" --build
echo "Building ringd and ringctl into build/ (about a minute the first time)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
# One line per file compiled, so that a first build shows it is going on.
cmake --build build -j "$(nproc)" --target ringd ringctl | grep --line-buffered -E '^\[ *[0-9]+%\] (Building|Linking)' | sed -u 's/^/  /' || true
[ -x build/daemon/ringd ] && [ -x build/client/ringctl ] || { echo "build failed" >&2; exit 1; }

port=${RINGD_DEMO_PORT:-7701}
hosts=(a b c d)
dir=$(mktemp -d /tmp/ringd-demo.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT

# A cluster key, as on a real cluster: every link authenticates with it.
(umask 077 && head -c 32 /dev/urandom | base64 >"$dir/cluster.key")
{
    echo "cluster: demo"
    echo "secret_file: $dir/cluster.key"
    echo "hosts:"
    for i in "${!hosts[@]}"; do
        echo "  - name: ${hosts[$i]}"
        echo "    address: 127.0.0.1:$((port + i))"
        echo "    socket: $dir/${hosts[$i]}.sock"
    done
} >"$dir/ringd.yaml"

echo "Starting 4 daemons (in reverse order: the ring forms whatever the order)"
for ((i = ${#hosts[@]} - 1; i >= 0; i--)); do
    h=${hosts[$i]}
    build/daemon/ringd --config "$dir/ringd.yaml" --host "$h" 2>"$dir/$h.log" &
    pids+=($!)
done
for h in "${hosts[@]}"; do
    for _ in $(seq 100); do [ -S "$dir/$h.sock" ] && break; sleep 0.05; done
done

run_allreduce() { # count dtype op
    local outs=()
    for h in "${hosts[@]}"; do
        build/client/ringctl --socket "$dir/$h.sock" allreduce --count "$1" --dtype "$2" \
            --op "$3" --iters 5 >"$dir/$h.out" 2>&1 &
        outs+=($!)
    done
    local ok=1
    for p in "${outs[@]}"; do wait "$p" || ok=0; done
    if [ $ok -eq 1 ]; then
        sed -n 1p "$dir/a.out"
    else
        echo "allreduce failed:"; cat "$dir"/*.out; exit 1
    fi
}

echo
echo "Allreduce, 4 ranks, each checking every element of its result:"
run_allreduce 1 float32 sum
run_allreduce 1024 float32 sum
run_allreduce 262144 float32 sum
run_allreduce 4194304 float32 mean
run_allreduce 16777216 float32 sum
run_allreduce 4194304 bfloat16 sum
run_allreduce 1048576 int64 max

echo
echo "Ring state as host a sees it (ringctl status). Each ringctl above was a"
echo "job of its own, numbering its collectives from #0; its ranks have exited,"
echo "so the ring is not ready until a new job's ranks connect:"
build/client/ringctl --socket "$dir/a.sock" status
echo
lines=$(wc -l <"$dir/a.log")
problems=$(grep -E ': (warn|error): ' "$dir/a.log" || true)
echo "Daemon log of host a (stderr; under systemd, the journal): $lines lines about links,"
echo "epochs and each job's ranks coming and going, at info level;"
if [ -n "$problems" ]; then
    echo "its warnings and errors:"
    sed 's/^/  /' <<<"$problems"
else
    echo "no warning, no error."
fi
