#!/usr/bin/env bash
# Install the Debian packages that shadowsync needs to build, test and boot its
# Soft-RoCE guest. Idempotent: does nothing (and prints nothing) when every
# package is already installed.
set -euo pipefail

PKGS=(
    build-essential cmake pkg-config
    libibverbs-dev librdmacm-dev ibverbs-providers ibverbs-utils rdma-core
    rdmacm-utils perftest iproute2
    libhwloc-dev hwloc libnuma-dev numactl check
    libssl-dev libxxhash-dev
    valgrind clang libclang-rt-14-dev
    qemu-system-x86 busybox-static cpio kmod
    openmpi-bin libopenmpi-dev
    shellcheck
    python3-dev python3-numpy python3-torch python3-pytest
)
# Open MPI: the guest test rdma.mpirun.* starts the ranks with mpirun (the
# library finds rank and size itself); shellcheck: unit.shellcheck; Debian's
# Python 3 headers, NumPy, PyTorch 1.13 and pytest: the Python package
# (python/) and its tests (rdma.python.*).
# --compare: also the peers of the side-by-side comparisons: Gloo with its
# ibverbs transport and a C++ compiler for the Gloo driver
# (tools/allreduce-compare), Redis and hiredis (tools/emb-compare). The
# library, its tests and CI never need them.
if [ "${1:-}" = "--compare" ]; then
    PKGS+=(g++ libgloo-dev redis-server libhiredis-dev)
fi

missing=()
for p in "${PKGS[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing packages: ${missing[*]}" >&2
    echo "install-deps: run as root (or: sudo $0)" >&2
    exit 1
fi

echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
    echo "install-deps: apt-get failed; last lines:" >&2
    tail -n 20 "$log" >&2
    rm -f "$log"
    exit 1
fi
rm -f "$log"
