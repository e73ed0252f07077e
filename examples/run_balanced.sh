#!/usr/bin/env bash
# One host at half speed, in one command: installs what is missing, builds
# ringd into build/, starts 4 daemons on 127.0.0.1 (free ports, generated
# config in a temporary directory) and 4 training processes, the last one
# slowed per row, and trains the same MLP twice on the same global batches:
# with equal shares, then with shares proportional to the ranks' measured
# speeds (ringd.balance). Prints both runs' step times against the ideal,
# shows that their final weights differ only by the order of the additions,
# and shows the split as the daemon reports it (ringctl status).
#
#   examples/run_balanced.sh                        the last rank at 1/2 speed
#   examples/run_balanced.sh --slowdown 3           at 1/3
#   RINGD_HOSTS=8 examples/run_balanced.sh --batch 384
#
# Arguments go to examples/train_balanced.py (see --help there).
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
        echo "run_balanced.sh: $python cannot import $mod: apt-get install python3-$mod" >&2
        exit 1
    fi
done

export PYTHONPATH="$PWD/client/python${PYTHONPATH:+:$PYTHONPATH}"
export RINGD_LIBRARY="$PWD/build/client/libringd.so.0" RINGD_BIN="$PWD/build/daemon/ringd"
exec "$python" examples/train_balanced.py --launch "${RINGD_HOSTS:-4}" "$@"
