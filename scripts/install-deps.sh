#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Install what building and testing Braid needs on Debian 12 (run as root, or with sudo).
#   (no option)  everything: the library, the tests, the soft-RoCE guest, PyTorch
#   --no-torch   all of that but PyTorch
#   --demo       only what building the library and its tools needs (scripts/demo.sh)
set -euo pipefail
mode=${1:-}
case "$mode" in
"" | --no-torch | --demo) ;;
*) echo "usage: $0 [--no-torch | --demo]" >&2; exit 2 ;;
esac
# The library: a compiler, CMake, pkg-config, hwloc (topology detection) and OpenSSL 3
# (TLS on Braid's own connections, ncclSetEncryption).
pkgs=(build-essential cmake pkg-config libhwloc-dev libssl-dev)
# The tests: Check, the libfabric and verbs plugins (plugins/net-ofi, plugins/net-ib),
# the tools the tests call, and Open MPI (the MPI example of docs/guide-hpc.md and
# braid-perf-mpi, run by the docs_guide_hpc test); the rest runs net-ib's tests in a QEMU
# guest on this machine's root with soft-RoCE (tests/rdma-vm): the guest's kernel and
# modules, QEMU, busybox for its initramfs, the rxe verbs provider and the rdma tool.
if [ "$mode" != --demo ]; then
    pkgs+=(check libsubunit-dev libfabric-dev libfabric-bin iproute2 procps libibverbs-dev
           ibverbs-providers ibverbs-utils openmpi-bin libopenmpi-dev
           qemu-system-x86 linux-image-amd64 busybox)
fi
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# The PyTorch backend (python/braid_torch) and its tests (label "torch"): PyTorch 2.13's
# CPU build from pip for /usr/bin/python3 (Debian's own PyTorch is 1.13, which braid_torch
# no longer builds against), expecttest for PyTorch's distributed test suite, and what
# torch.utils.cpp_extension builds with from apt, without their recommendations. pip
# installs under /usr/local (--break-system-packages: Debian marks its Python as managed
# by apt). Pinned: an unpinned `pip install torch` fetches a CUDA build of several GB.
torch_pkgs=(python3-dev python3-pip python3-setuptools ninja-build)
torch_pip=(torch==2.13.0 expecttest)
missing_torch=()
if [ -z "$mode" ]; then
    for p in "${torch_pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
            missing_torch+=("$p")
    done
fi
if [ ${#missing[@]} -gt 0 ] || [ ${#missing_torch[@]} -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO=sudo
    $SUDO apt-get update
    if [ ${#missing[@]} -gt 0 ]; then
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y "${missing[@]}"
    fi
    if [ ${#missing_torch[@]} -gt 0 ]; then
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends \
            "${missing_torch[@]}"
    fi
fi
if [ -z "$mode" ] &&
    ! /usr/bin/python3 -c "import torch, expecttest; assert torch.__version__.startswith('2.13.0')" \
        2>/dev/null; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO=sudo
    $SUDO /usr/bin/python3 -m pip install --break-system-packages --disable-pip-version-check \
        "${torch_pip[@]}"
fi
