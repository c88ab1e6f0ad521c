#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The whole GPU verification of the CUDA executor in one go, for whoever is lent a GPU:
# the GPU tests with every protocol forced, then the benchmarks docs/performance.md asks
# for (braid-perf AllReduce, AllGather, ReduceScatter for 2 and 4 ranks as threads on one
# GPU from 8 B to 1 GiB; the device-to-device copy bandwidth; NVIDIA NCCL's one-rank
# AllReduce where a libnccl.so.2 of NVIDIA's is found, e.g. the one PyTorch bundles).
# Then (issue 13) ranks as processes: the procs section, braid-perf with 2 processes on one
# GPU, the DDP examples under PyTorch with Braid preloaded (examples/ddp/gpu/run_gpu.sh),
# all_reduce of CUDA tensors next to Gloo (bench/torch_gpu_allreduce.py), and NVIDIA's
# nccl-tests built against Braid (tests/gpu/nccl_tests.sh; its source must be carried in at
# .gpu-carry/nccl-tests). Each says SKIP and why where its part is missing.
# Usage: tests/gpu/run.sh [build dir]  (default: build). Results go to $OUT (or ./gpu-out).
# Bounded: every step has a timeout; the whole run is meant to stay under 8 minutes on an
# H100 (not yet timed with the issue 13 steps: a first run should say).
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$root/build}"
out="${OUT:-$PWD/gpu-out}"
mkdir -p "$out"
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
status=0

if ! nvidia-smi -L > "$out/gpus.txt" 2>&1; then
    echo "SKIP: no GPU here (nvidia-smi: $(head -1 "$out/gpus.txt"))"
    exit 77
fi
cat "$out/gpus.txt"
if [ ! -x "$build/bin/check_gpu" ]; then
    echo "building in $build"
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release > "$out/cmake.log" 2>&1 &&
        cmake --build "$build" -j"$(nproc)" >> "$out/cmake.log" 2>&1 || {
        echo "FAIL: build (see $out/cmake.log)"; exit 1; }
fi

step() { # name timeout command...
    local name=$1 t=$2
    shift 2
    echo "== $name"
    timeout "$t" "$@" > "$out/$name.log" 2>&1
    local rc=$?
    tail -5 "$out/$name.log"
    if [ $rc -ne 0 ]; then
        echo "FAIL: $name (exit $rc, log $out/$name.log)"
        status=1
    fi
}

for proto in Simple LL LL128; do
    NCCL_PROTO=$proto NCCL_BUFFSIZE=262144 step "coll-$proto" 150 "$build/bin/check_gpu" coll
done
for s in overlap errors capture multi; do
    BRAID_CUDA_WAIT_TIMEOUT=20 step "$s" 90 "$build/bin/check_gpu" "$s"
done
# As in the ctest entries: abort keeps the default wait timeout (600 s) so that only
# ncclCommAbort can release the stream within the test's 20 s alarm, and procs' own
# abort case needs one beyond that alarm too.
step "abort" 90 "$build/bin/check_gpu" abort
BRAID_CUDA_WAIT_TIMEOUT=60 step "procs" 90 "$build/bin/check_gpu" procs

perf="$build/bin/braid-perf"
for n in 2 4; do
    for c in allreduce allgather reducescatter; do
        step "perf-$c-$n" 90 "$perf" -C "$c" -t "$n" --mem device -b 8 -e 1G -f 4 -n 20 -w 5 -c 1
    done
done
step "copy-bandwidth" 60 "$build/bin/gpu_copy_bw"
# NVIDIA NCCL (the one PyTorch bundles), one rank, through the same braid-perf.
nvlib=$(python3 -c 'import os, nvidia.nccl as m; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null || true)
if [ -n "$nvlib" ] && [ -e "$nvlib/libnccl.so.2" ]; then
    LD_LIBRARY_PATH="$nvlib" step "nccl-1rank-allreduce" 90 "$perf" -C allreduce -t 1 --mem device -b 8 -e 1G -f 4 -n 20 -w 5 -c 1
    step "braid-1rank-allreduce" 90 "$perf" -C allreduce -t 1 --mem device -b 8 -e 1G -f 4 -n 20 -w 5 -c 1
else
    echo "no NVIDIA libnccl.so.2 found (python3 -c 'import nvidia.nccl'): NCCL's figures not taken"
fi
# Ranks as processes on one GPU (device buffers staged through pinned host memory).
step "perf-allreduce-procs2" 120 "$perf" -C allreduce -N 2 --mem device -b 8 -e 1G -f 4 -n 10 -w 3 -c 1

# PyTorch (issue 13): the DDP examples with Braid under the "nccl" backend, and
# all_reduce of CUDA tensors, Braid next to Gloo, 2 processes on one GPU.
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    OUT="$out/ddp" step "ddp-gpu" 360 "$root/examples/ddp/gpu/run_gpu.sh" "$build"
    LD_PRELOAD="$build/lib/libnccl.so.2" step "torch-allreduce-braid" 150 \
        python3 -m torch.distributed.run --standalone --nproc_per_node=2 \
        "$root/bench/torch_gpu_allreduce.py" --backend nccl
    step "torch-allreduce-gloo" 150 python3 -m torch.distributed.run --standalone \
        --nproc_per_node=2 "$root/bench/torch_gpu_allreduce.py" --backend gloo --max 268435456
else
    echo "no PyTorch with CUDA here: the DDP examples and the PyTorch all_reduce not run"
fi
# nccl-tests against Braid, and on NVIDIA's NCCL beside it (needs the source carried in).
OUT="$out" "$root/tests/gpu/nccl_tests.sh" "$build"
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 77 ] && status=1
echo "results in $out"
exit $status
