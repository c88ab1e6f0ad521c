#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The demo: install dependencies, build, and run 4 local ranks doing AllReduce, AllGather
# and Broadcast on host memory, with results checked and bus bandwidth printed.
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what building the library needs: no test framework, no QEMU, no RDMA packages.
bash scripts/install-deps.sh --demo
# BRAID_TESTS=OFF: the tests need Check, which the demo does not install.
# (scripts/test.sh turns them back on in the same build directory.)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DBRAID_TESTS=OFF > /dev/null
cmake --build build -j"$(nproc)" --target braid-demo nccl-net-socket
NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} ./build/bin/braid-demo "${1:-4}"
