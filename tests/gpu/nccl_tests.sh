#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# NVIDIA's nccl-tests, built beside the project against Braid's include/nccl.h and linked
# with Braid's libnccl.so.2 (nothing of theirs enters the repo), run with one rank on one
# GPU: all_reduce, all_gather, reduce_scatter, broadcast, reduce, sendrecv and alltoall, each validated
# (-c 1). The same binaries then run on NVIDIA's NCCL (the one PyTorch's wheels bring)
# in the same run, for the side-by-side times.
# Usage: tests/gpu/nccl_tests.sh [build dir]
#        tests/gpu/nccl_tests.sh --pack SM TARBALL [build dir]  (build and pack, no GPU)
#   the source: $NCCL_TESTS_SRC, else .gpu-carry/nccl-tests in the checkout (a clone of
#   NVIDIA/nccl-tests; .gpu-carry is ignored by git, so the device tool's `carry` takes it);
#   or binaries built elsewhere against Braid's nccl.h (smaller to carry than the source
#   plus a build there): $NCCL_TESTS_BIN, else .gpu-carry/nccl-tests-bin.tgz (a tarball
#   of one folder holding the *_perf programs)
#   From a git clone it builds NCCL_TESTS_REF (v2.16.9): from 2.17 on, nccl-tests includes
#   NCCL 2.28's nccl_device.h (the device API, which Braid does not have) whenever nccl.h
#   says 2.28 or later, as Braid's 2.32.3 does, and does not build against it.
# Results in $OUT (or ./gpu-out)/nccl-tests. Exit 77 (SKIP) without a GPU or the source.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
src=${NCCL_TESTS_SRC:-$root/.gpu-carry/nccl-tests}
cuda=${CUDA_HOME:-/usr/local/cuda}
# NCCL_TESTS_RUN: which of them to run (all by default; run.sh --smoke: all_reduce), up to
# NCCL_TESTS_MAX bytes (256M).
tests="all_reduce all_gather reduce_scatter broadcast reduce sendrecv alltoall"
ref=${NCCL_TESTS_REF:-v2.16.9}

# Builds the tests against Braid's nccl.h and the build's libnccl.so.2, for sm_$1, into
# $2 (its build log beside it); no GPU needed.
build_tests() { # sm bindir build
    local home tree=$src
    home=$(mktemp -d)
    ln -s "$root/include" "$home/include"
    ln -s "$(cd "$3" && pwd)/lib" "$home/lib"
    if git -C "$src" rev-parse -q --verify "$ref^{commit}" > /dev/null 2>&1; then
        tree="$home/src-$ref"
        mkdir -p "$tree"
        git -C "$src" archive "$ref" | tar -x -C "$tree"
    elif grep -q nccl_device.h "$src/src/common.h"; then
        echo "FAIL: the nccl-tests at $src include nccl_device.h (NCCL's device API, not in Braid) and the clone has no $ref (a full clone of NVIDIA/nccl-tests has it; NCCL_TESTS_REF names another)"
        rm -rf "$home"
        return 1
    fi
    echo "== building nccl-tests ($(git -C "$src" describe --tags "$ref" 2> /dev/null || echo "$tree")) against Braid's nccl.h (sm_$1)"
    if ! make -C "$tree/src" -j"$(nproc)" CUDA_HOME="$cuda" NCCL_HOME="$home" \
        NVCC_GENCODE="-gencode=arch=compute_$1,code=sm_$1" BUILDDIR="$2" build \
        > "$2.log" 2>&1; then
        tail -20 "$2.log"
        echo "FAIL: nccl-tests did not build against Braid's nccl.h (log $2.log)"
        rm -rf "$home"
        return 1
    fi
    rm -rf "$home"
}

# --pack SM TARBALL [build dir]: build here, and pack the tests this script runs.
if [ "${1:-}" = --pack ]; then
    [ -f "$src/src/Makefile" ] || { echo "no nccl-tests source at $src"; exit 1; }
    work=$(mktemp -d)
    build_tests "$2" "$work/build" "${4:-$root/build}" || exit 1
    mkdir -p "$work/nt"
    for t in $tests; do
        cp "$work/build/${t}_perf" "$work/nt/"
    done
    tar czf "$3" -C "$work" nt
    rm -rf "$work"
    exit 0
fi

build=${1:-$root/build}
out=${OUT:-$PWD/gpu-out}/nccl-tests
mkdir -p "$out"
if ! nvidia-smi -L > /dev/null 2>&1; then
    echo "SKIP: no GPU here"
    exit 77
fi
tests=${NCCL_TESTS_RUN:-$tests}
bin=${NCCL_TESTS_BIN:-}
# The binaries go outside $out, which comes back from the GPU machine: logs only there.
if [ -z "$bin" ] && [ -f "$root/.gpu-carry/nccl-tests-bin.tgz" ]; then
    unpacked=$(mktemp -d)
    tar xzf "$root/.gpu-carry/nccl-tests-bin.tgz" -C "$unpacked" --strip-components=1 &&
        bin="$unpacked"
fi
if [ -n "$bin" ]; then
    echo "== nccl-tests built elsewhere against Braid's nccl.h: $bin"
elif [ ! -f "$src/src/Makefile" ]; then
    echo "SKIP: no nccl-tests source at $src (clone NVIDIA/nccl-tests there, or set NCCL_TESTS_SRC)"
    exit 77
else
    bin=$(mktemp -d)/bin
    build_tests "$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')" \
        "$bin" "$build" || exit 1
fi
nvlib=$(python3 -c 'import os, nvidia.nccl as m; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null || true)
status=0
for t in $tests; do
    for lib in braid nvidia; do
        if [ "$lib" = braid ]; then
            path="$build/lib"
        elif [ -n "$nvlib" ] && [ -e "$nvlib/libnccl.so.2" ]; then
            path="$nvlib"
        else
            echo "$t: no NVIDIA libnccl.so.2 found (python3 -c 'import nvidia.nccl'): NCCL's column not taken"
            continue
        fi
        log="$out/$t-$lib.log"
        LD_LIBRARY_PATH="$path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout -k 5 60 \
            "$bin/${t}_perf" -g 1 -b 8 -e "${NCCL_TESTS_MAX:-256M}" -f 4 -c 1 \
            -n 20 -w 5 > "$log" 2>&1
        rc=$?
        wrong=$(grep -E "Out of bounds values" "$log" | head -1)
        echo "$t on $lib: exit $rc; ${wrong:-no validation line}"
        if [ $rc -ne 0 ] || ! grep -q "Out of bounds values : 0 OK" "$log"; then
            echo "FAIL: $t on $lib (log $log)"
            [ "$lib" = braid ] && status=1
        fi
    done
done
# Side by side: the out-of-place time (us) of each size, Braid then NVIDIA.
for t in $tests; do
    [ -f "$out/$t-nvidia.log" ] || continue
    echo "== $t: bytes, Braid us, NCCL us (out of place)"
    join <(awk '/^ +[0-9]+ +[0-9]+ /{print $1, $6}' "$out/$t-braid.log") \
         <(awk '/^ +[0-9]+ +[0-9]+ /{print $1, $6}' "$out/$t-nvidia.log")
done | tee "$out/side-by-side.txt"
exit $status
