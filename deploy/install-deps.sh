#!/usr/bin/env bash
# Installs the Debian packages ringd needs, for one purpose each, and only
# those: every script that needs packages calls it with its own. Does
# nothing when they are all present, so it is cheap to call every time.
#
#   deploy/install-deps.sh            everything the tests need (tests/run.sh)
#   deploy/install-deps.sh --build    to build ringd and run its demo (deploy/demo.sh)
#   deploy/install-deps.sh --python   --build, and Debian's python3 with numpy and
#                                     torch (examples/run_train.sh)
#   deploy/install-deps.sh --bench    --build, and iproute2 and iperf3 (bench/run.sh), g++
#                                     and libgloo-dev (bench/gloo.sh), openmpi-bin and
#                                     libopenmpi-dev (bench/compare.sh)
#   deploy/install-deps.sh --package  --python (python3-ringd-torch is built against Debian's
#                                     torch), and what cpack -G DEB runs (dpkg-dev, file)
#   deploy/install-deps.sh --list [PURPOSE]   print the packages instead
set -euo pipefail

build=(
    gcc make cmake pkg-config         # toolchain
    libuv1-dev libyaml-dev libssl-dev # the daemon's libraries (libcrypto: HMAC)
    libsystemd-dev                    # sd_notify for the systemd unit
    libcriterion-dev                  # tests (the build compiles them unless -DRINGD_TESTS=OFF)
)
python=(python3 python3-numpy python3-torch # the Python client, Debian's python3
    g++ python3-dev libtorch-dev pybind11-dev)   # ringd.torch's torch.distributed backend (C++)
bench=(iproute2 iperf3                       # the network-namespace testbed and benchmark
    g++ libgloo-dev                          # bench/gloo.sh: Gloo's allreduce to compare with
    openmpi-bin libopenmpi-dev)              # bench/compare.sh: and Open MPI's
package=(dpkg-dev file)                      # cpack -G DEB: dpkg-shlibdeps, dpkg-buildflags
tests=(
    python3-pytest                    # the Python and service tests
    python3-jsonschema                # tests/python/test_report.py: the trace's schema
    systemd man-db                    # systemd-analyze verify of the unit (and its man pages)
    clang-14 libclang-rt-14-dev       # the libFuzzer targets (libFuzzer is in compiler-rt)
    lintian                           # the Debian packages' check
    systemd-container mmdebstrap      # the unit under a booted systemd (tests/package)
)

list=0
if [ "${1:-}" = --list ]; then
    list=1
    shift
fi
case "${1:-}" in
"") packages=("${build[@]}" "${python[@]}" "${bench[@]}" "${package[@]}" "${tests[@]}") ;;
--build) packages=("${build[@]}") ;;
--python) packages=("${build[@]}" "${python[@]}") ;;
--bench) packages=("${build[@]}" "${bench[@]}") ;;
--package) packages=("${build[@]}" "${python[@]}" "${package[@]}") ;;
*)
    echo "install-deps: unknown purpose '$1' (--build, --python, --bench, --package or none)" >&2
    exit 2
    ;;
esac
if [ $list -eq 1 ]; then
    printf '%s\n' "${packages[@]}"
    exit 0
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
