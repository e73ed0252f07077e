#!/usr/bin/env bash
# Data-parallel training of a small MLP on a 4-host ring on this machine, in
# one command: installs what is missing, builds ringd into build/, starts 4
# daemons on 127.0.0.1 (free ports, generated config in a temporary
# directory) and 4 training processes, checks the result, stops everything.
#
#   examples/run_train.sh                        20 epochs, float64
#   examples/run_train.sh --epochs 5 --dtype float32
#   RINGD_HOSTS=8 examples/run_train.sh --batch 512
#
# Arguments go to examples/train_mlp.py (see --help there).
set -euo pipefail
cd "$(dirname "$0")/.."

"deploy/install-deps.sh" --python
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" --target ringd ringd_client >/dev/null

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
exec "$python" examples/train_mlp.py --launch "${RINGD_HOSTS:-4}" "$@"
