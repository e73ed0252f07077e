#!/usr/bin/env bash
# Installs the Debian packages ringd needs: to build it and run its demo
# (--build), or also to run every test (the default). Does nothing when they
# are all present, so it is cheap to call every time.
set -euo pipefail

packages=(
    gcc make cmake pkg-config       # toolchain
    libuv1-dev libyaml-dev libssl-dev # the daemon's libraries (libcrypto: HMAC)
    libsystemd-dev                  # sd_notify for the systemd unit
    libcriterion-dev                # tests (the build compiles them too)
)
if [ "${1:-}" != "--build" ]; then
    packages+=(
        python3 python3-numpy           # the Python client (Debian's python3)
        python3-torch python3-pytest    # its PyTorch helpers and tests
        g++ python3-dev libtorch-dev pybind11-dev # the torch.distributed backend's C++ half
        iproute2 iperf3                 # the network-namespace testbed and benchmark
        systemd man-db                  # systemd-analyze verify of the unit (and its man pages)
        clang-14 libclang-rt-14-dev     # the libFuzzer targets (libFuzzer is in compiler-rt)
    )
fi

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}" >&2
if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: need root to install packages (run with sudo)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
