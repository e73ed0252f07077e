#!/usr/bin/env bash
# Runs test_elastic_netns.py on a testbed of 5 hosts (testbed.sh run), which
# is removed however the test ends. Exit 77 (skipped) without root or
# iproute2.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
    echo "SKIP: needs root and iproute2"
    exit 77
fi
exec bash "$here/../netns/testbed.sh" run 5 none \
    /usr/bin/python3 -m pytest -q -s -p no:cacheprovider "$here/test_elastic_netns.py"
