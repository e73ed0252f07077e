#!/usr/bin/env bash
# Data-parallel training of a small MLP on a 4-host ring on this machine, in
# one command: installs what is missing, builds ringd into build/, starts 4
# daemons on 127.0.0.1 (free ports, generated config in a temporary
# directory) and 4 training processes, checks the result, stops everything.
#
# It checkpoints every 25 steps, and rank 0 crashes at step 110 on purpose:
# the job is started again, resumes from the newest checkpoint complete on
# every host (step 100) and ends with the same weights, bit for bit, as a run
# that never crashed (RINGD_CRASH_AT=0 runs that one: compare the sha256).
#
#   examples/run_train.sh                        20 epochs, float64
#   examples/run_train.sh --epochs 5 --dtype float32
#   RINGD_HOSTS=8 examples/run_train.sh --batch 512
#   RINGD_CRASH_AT=0 examples/run_train.sh       no crash
#
# Arguments go to examples/train_mlp.py (see --help there).
set -euo pipefail
cd "$(dirname "$0")/.."

"deploy/install-deps.sh" --python
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" --target ringd ringd_client ringctl >/dev/null

# Debian's python3, where python3-numpy and python3-torch are installed.
python=/usr/bin/python3
[ -x "$python" ] || python=python3
for mod in numpy torch; do
    if ! "$python" -c "import $mod" 2>/dev/null; then
        echo "run_train.sh: $python cannot import $mod: apt-get install python3-$mod" >&2
        exit 1
    fi
done

export PYTHONPATH="$PWD/client/python${PYTHONPATH:+:$PYTHONPATH}"
export RINGD_LIBRARY="$PWD/build/client/libringd.so.0" RINGD_BIN="$PWD/build/daemon/ringd"

# One directory shared by the 4 "hosts" of this machine; on a cluster, a
# local directory on each host works the same.
checkpoints="$(mktemp -d /tmp/ringd-checkpoints.XXXXXX)"
trap 'rm -rf "$checkpoints"' EXIT
train=("$python" examples/train_mlp.py --launch "${RINGD_HOSTS:-4}"
       --checkpoint-dir "$checkpoints" --checkpoint-every 25)
crash="${RINGD_CRASH_AT:-110}"

if [ "$crash" != 0 ]; then
    echo "== run 1: a checkpoint every 25 steps; rank 0 crashes at step $crash"
    # The launcher shows the daemons' logs when a rank fails: expected here.
    if "${train[@]}" --crash-at-step "$crash" "$@" 2> >(grep -v '^  h[0-9]*| ' >&2); then
        echo "run_train.sh: rank 0 was meant to crash at step $crash" >&2
        exit 1
    fi
    echo "== the checkpoints left (build/client/ringctl checkpoints $checkpoints):"
    build/client/ringctl checkpoints "$checkpoints"
    echo "== run 2: the same command, started again"
fi
"${train[@]}" "$@"
