#!/usr/bin/env bash
# Runs test_nemesis.py on a testbed of 5 hosts of its own (testbed.sh run:
# namespaces rnem-PID-*, addresses 198.19.200.0/24, apart from the other
# tests' testbeds), which is removed however the test ends. Exit 77
# (skipped) without root or iproute2. $RINGD_NEMESIS_S: seconds of faults
# (120 by default); $RINGD_TEST_SEED: the seed to replay;
# $RINGD_NEMESIS_KEEP_GOING: go on past a violation. Arguments go to pytest
# (--basetemp=DIR keeps the logs in DIR).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
    echo "SKIP: needs root and iproute2"
    exit 77
fi
export TB_PREFIX=rnem TB_NET=198.19.200
exec bash "$here/../netns/testbed.sh" run 5 none \
    /usr/bin/python3 -m pytest -q -s -p no:cacheprovider "$here/test_nemesis.py" "$@"
