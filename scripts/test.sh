#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The tests: install dependencies, build with warnings as errors, run the whole suite,
# then build again with AddressSanitizer and UndefinedBehaviorSanitizer and run it again
# (without the PyTorch tests, label "torch": PyTorch is not built with the sanitizers, and
# the sanitizer build does not build braid_torch), and without the soft-RoCE guest (label
# "rdma-vm": the guest would need the sanitizer runtimes; the sanitizer build does not
# register it), and without the emulated-GPU runs of the LL and LL128 protocols (label
# "cuda-emu-proto": the interpreter's protocols run under the sanitizers in check_device).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
jobs=$(nproc)
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} FI_TCP_IFACE=${FI_TCP_IFACE:-lo}

echo "== build (Release, -Werror)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DBRAID_WERROR=ON -DBRAID_TESTS=ON > /dev/null
cmake --build build -j"$jobs"
echo "== tests"
# A test that fails is run once more, and the first failure stays in the log: timing on a
# loaded 2-core machine has caught tests out before (mp_comm_ofi's late receiver until
# eeaa76e), and a real regression fails twice.
(cd build && ctest --output-on-failure -j"$jobs" --timeout 600 --repeat until-pass:2)

if [ "${BRAID_SKIP_SANITIZERS:-0}" != 1 ]; then
    echo "== build (ASan + UBSan)"
    cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DBRAID_WERROR=ON \
        -DBRAID_SANITIZE=address,undefined > /dev/null
    cmake --build build-asan -j"$jobs"
    echo "== tests under ASan + UBSan"
    (cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
        UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        ctest --output-on-failure -j"$jobs" --timeout 900 -LE "perf-smoke|torch|rdma-vm|cuda-emu-proto" --repeat until-pass:2)
fi
