#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The whole GPU verification of the CUDA executor in one go, for whoever is lent a GPU,
# most important first, inside a time budget (GPU time is rare):
#   1. check_gpu: procs (ranks as processes on one GPU) and the probe procs-stuck first,
#      then every protocol forced, Tree forced where it runs; overlap, errors, capture,
#      abort, multi, suspend (ncclCommSuspend / Resume on device buffers), streams (the
#      per-thread and legacy default streams);
#   2. braid-perf AllReduce for 2 ranks as threads on one GPU, 8 B to 1 GiB; the
#      device-to-device copy bandwidth; NVIDIA NCCL's one-rank AllReduce beside Braid's,
#      where a libnccl.so.2 of NVIDIA's is found (the one PyTorch's wheels bring);
#   3. NVIDIA's nccl-tests against Braid and against NVIDIA's NCCL (tests/gpu/nccl_tests.sh;
#      its source or binaries must be carried in at .gpu-carry);
#   4. PyTorch: all_reduce of CUDA tensors with Braid preloaded next to Gloo
#      (bench/torch_gpu_allreduce.py), the DDP examples (examples/ddp/gpu/run_gpu.sh);
#   5. the remaining braid-perf tables (AllGather, ReduceScatter, 4 ranks, 2 processes);
#   6. procs again under MPS, where nvidia-cuda-mps-control is found.
# Each says SKIP and why where its part is missing, or where the budget is spent.
# Usage: tests/gpu/run.sh [--smoke] [build dir]  (default: build). Results go to $OUT (or
# ./gpu-out). It builds nothing: tests/gpu/prepare_carry.sh prepares the build on the build
# machine, whose bin/ and lib/ the device tool carries.
# --smoke: one case of each path in under 3 minutes (ranks as threads, the direct kernel's
# speed, ranks as processes, nccl-tests with one rank, PyTorch's all_reduce).
# BRAID_GPU_BUDGET: seconds the whole run may take (default 450, 170 with --smoke); every
# step's timeout is cut to what is left, a step with under 20 s left is skipped, and one
# that the cut ends counts as SKIP, not FAIL. A probe reports what it saw (PROBE) and
# never fails the run; a check does.
# Libraries the build machine had and a bare GPU machine may lack (libhwloc.so.15): put
# them in .gpu-carry/lib; it goes on LD_LIBRARY_PATH after the build's own lib.
set -uo pipefail
smoke=0
if [ "${1:-}" = "--smoke" ]; then
    smoke=1
    shift
fi
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$root/build}"
out="${OUT:-$PWD/gpu-out}"
mkdir -p "$out"
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
[ -d "$root/.gpu-carry/lib" ] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$root/.gpu-carry/lib"
budget=${BRAID_GPU_BUDGET:-$([ $smoke = 1 ] && echo 170 || echo 450)}
status=0

if ! nvidia-smi -L > "$out/gpus.txt" 2>&1; then
    echo "SKIP: no GPU here (nvidia-smi: $(head -1 "$out/gpus.txt"))"
    exit 77
fi
cat "$out/gpus.txt"
if [ ! -x "$build/bin/check_gpu" ]; then
    echo "FAIL: no prepared build at $build (run tests/gpu/prepare_carry.sh on the build machine and carry what it lists: GPU minutes are not for building)"
    exit 1
fi
# Every library the carried build links must resolve here. What the build machine had
# and this one may lack comes from the carry: .gpu-carry/lib (hwloc, udev) is on the path
# already; from .gpu-carry/lib-fallback only what is still missing, so that this
# machine's own copies (libssl, libcrypto) keep serving everything else.
missing_libs() {
    ldd "$build/lib/libnccl.so.2" "$build/bin/check_gpu" "$build/bin/braid-perf" 2>/dev/null |
        awk '/not found/ {print $1}' | sort -u
}
miss=$(missing_libs)
if [ -n "$miss" ] && [ -d "$root/.gpu-carry/lib-fallback" ]; then
    fallback=$(mktemp -d)
    for n in $miss; do
        [ -e "$root/.gpu-carry/lib-fallback/$n" ] && ln -s "$root/.gpu-carry/lib-fallback/$n" "$fallback/$n"
    done
    LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$fallback"
    miss=$(missing_libs)
fi
if [ -n "$miss" ]; then
    echo "FAIL: libraries the build links are missing here: $(echo $miss) (tests/gpu/prepare_carry.sh copies them into .gpu-carry: carry what it lists)"
    exit 1
fi

left() { echo $((budget - SECONDS)); }
# step KIND NAME TIMEOUT COMMAND...: KIND "check" fails the run when the command does;
# "probe" only reports. The timeout is cut to the budget left; a step the cut ends is a
# SKIP (the budget), not a FAIL.
summary=()
step() {
    local kind=$1 name=$2 t=$3 l cut=0
    shift 3
    l=$(left)
    if [ "$l" -lt 20 ]; then
        echo "SKIP: $name (the time budget of $budget s is spent)"
        summary+=("SKIP $name (budget)")
        return
    fi
    if [ "$t" -gt $((l - 5)) ]; then
        t=$((l - 5))
        cut=1
    fi
    echo "== $name (limit $t s)"
    local t0=$SECONDS
    timeout -k 5 "$t" "$@" > "$out/$name.log" 2>&1
    local rc=$?
    tail -5 "$out/$name.log"
    echo "   $name: exit $rc after $((SECONDS - t0)) s"
    if [ $rc -eq 0 ]; then
        summary+=("PASS $name")
    elif [ $cut = 1 ] && { [ $rc -eq 124 ] || [ $rc -eq 137 ]; }; then
        echo "SKIP: $name (cut at $t s by the time budget)"
        summary+=("SKIP $name (cut by the budget)")
    elif [ $rc -eq 77 ]; then
        summary+=("SKIP $name (exit 77)")
    elif [ "$kind" = probe ]; then
        echo "PROBE: $name exit $rc (a report, not a check; log $out/$name.log)"
        summary+=("PROBE $name exit $rc")
    else
        echo "FAIL: $name (exit $rc, log $out/$name.log)"
        summary+=("FAIL $name exit $rc")
        status=1
    fi
}
finish() {
    printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
    echo "results in $out ($SECONDS s)"
    exit $status
}
perf="$build/bin/braid-perf"
# nccl_tests LIMIT CUT: nccl-tests (tests/gpu/nccl_tests.sh) within LIMIT seconds, into the
# summary; CUT=1 when LIMIT is what the budget leaves, so that its end is a SKIP.
nccl_tests() {
    OUT="$out" timeout -k 5 "$1" "$root/tests/gpu/nccl_tests.sh" "$build" > "$out/nccl-tests.log" 2>&1
    local rc=$?
    tail -12 "$out/nccl-tests.log"
    if [ $rc -eq 0 ]; then
        summary+=("PASS nccl-tests")
    elif [ $rc -eq 77 ]; then
        summary+=("SKIP nccl-tests ($(grep -m1 '^SKIP' "$out/nccl-tests.log" | cut -c7-))")
    elif [ "$2" = 1 ] && { [ $rc -eq 124 ] || [ $rc -eq 137 ]; }; then
        summary+=("SKIP nccl-tests (cut at $1 s by the time budget)")
    else
        summary+=("FAIL nccl-tests exit $rc")
        status=1
    fi
}
have_torch() {
    if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
        return 0
    fi
    echo "no PyTorch with CUDA here: the PyTorch steps are not run"
    summary+=("SKIP torch (no PyTorch with CUDA)")
    return 1
}

if [ $smoke = 1 ]; then
    # One case of each path, most likely to fail first.
    BRAID_CUDA_WAIT_TIMEOUT=30 CUDA_DEVICE_MAX_CONNECTIONS=1 \
        step check "threads-queue1" 40 "$build/bin/check_gpu" threads
    step check "copy-bandwidth" 20 "$build/bin/gpu_copy_bw"
    step check "perf-allreduce-2" 40 "$perf" -C allreduce -t 2 --mem device -b 8 -e 512M -f 8 -n 10 -w 3 -c 1
    BRAID_CUDA_WAIT_TIMEOUT=30 step check "procs" 60 "$build/bin/check_gpu" procs
    if [ "$(left)" -ge 40 ]; then
        NCCL_TESTS_RUN=all_reduce NCCL_TESTS_MAX=64M nccl_tests 30 0
    else
        summary+=("SKIP nccl-tests (budget)")
    fi
    if have_torch; then
        LD_PRELOAD="$build/lib/libnccl.so.2" step check "torch-allreduce-braid" 45 \
            python3 -m torch.distributed.run --standalone --nproc_per_node=2 \
            "$root/bench/torch_gpu_allreduce.py" --backend nccl --largest 16777216
    fi
    finish
fi

# 1. Correctness. First what no GPU has passed yet: ranks as processes on the one GPU
# (2026-11-27, H100, no MPS: they stopped at the first call; now they complete each call
# on the host), and the probe of why: with streams waiting in the GPU
# (BRAID_CUDA_SHARED_GPU_SYNC=0) the first call must fail within the wait timeout saying
# the stream had not reached it. "procs-stuck" passing confirms that such a GPU keeps
# a waiting process's context; failing with "reported nothing" means it switched.
# The hangs the review read in the code (shared/reviews, docs/cuda.md): every stream in
# one hardware queue with a thread per rank; a group whose descriptors outgrow their
# buffer; then the direct kernel over every case.
BRAID_CUDA_WAIT_TIMEOUT=30 CUDA_DEVICE_MAX_CONNECTIONS=1 \
    step check "threads-queue1" 60 "$build/bin/check_gpu" threads
BRAID_CUDA_WAIT_TIMEOUT=30 BRAID_CUDA_DIRECT=0 step check "biggroup" 40 "$build/bin/check_gpu" biggroup
BRAID_CUDA_WAIT_TIMEOUT=30 BRAID_CUDA_DIRECT=0 step check "cliques" 40 "$build/bin/check_gpu" cliques
BRAID_CUDA_WAIT_TIMEOUT=30 step check "det" 40 "$build/bin/check_gpu_det"
BRAID_CUDA_WAIT_TIMEOUT=30 step check "collv" 40 "$build/bin/check_gpu_collv"
BRAID_CUDA_WAIT_TIMEOUT=30 step check "collv-procs" 60 "$build/bin/check_gpu_collv" procs
step check "coll-direct" 60 "$build/bin/check_gpu" coll
BRAID_CUDA_WAIT_TIMEOUT=60 step check "procs" 90 "$build/bin/check_gpu" procs
BRAID_CUDA_WAIT_TIMEOUT=10 BRAID_CUDA_SHARED_GPU_SYNC=0 \
    step probe "procs-stuck" 40 "$build/bin/check_gpu" procs-stuck
# Where a small call's 100-900 us went on the H100 (docs/performance.md): one thread
# driving every rank against a thread per rank.
step probe "latency" 60 "$build/bin/check_gpu" latency
for proto in Simple LL LL128; do
    BRAID_CUDA_DIRECT=0 NCCL_PROTO=$proto NCCL_BUFFSIZE=262144 step check "coll-$proto" 60 "$build/bin/check_gpu" coll
done
# Tree where NCCL runs it (AllReduce, Broadcast, Reduce); the others keep the model's pick.
BRAID_CUDA_DIRECT=0 NCCL_ALGO="allreduce:Tree;broadcast:Tree;reduce:Tree" NCCL_BUFFSIZE=262144 \
    step check "coll-Tree" 60 "$build/bin/check_gpu" coll
for s in overlap errors capture multi suspend streams; do
    BRAID_CUDA_WAIT_TIMEOUT=20 step check "$s" 60 "$build/bin/check_gpu" "$s"
done
# As in the ctest entries: abort keeps the default wait timeout (600 s) so that only
# ncclCommAbort can release the stream within the test's 20 s alarm.
step check "abort" 60 "$build/bin/check_gpu" abort

# 2. Speed: Braid's own tables, the copy bandwidth, NVIDIA NCCL's one rank beside Braid's.
pargs=(--mem device -b 8 -e 1G -f 4 -n 20 -w 5 -c 1)
step check "perf-allreduce-2" 60 "$perf" -C allreduce -t 2 "${pargs[@]}"
step check "copy-bandwidth" 30 "$build/bin/gpu_copy_bw"
nvlib=$(python3 -c 'import os, nvidia.nccl as m; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null || true)
if [ -n "$nvlib" ] && [ -e "$nvlib/libnccl.so.2" ]; then
    LD_LIBRARY_PATH="$nvlib:$LD_LIBRARY_PATH" step check "nccl-1rank-allreduce" 60 "$perf" -C allreduce -t 1 "${pargs[@]}"
    step check "braid-1rank-allreduce" 60 "$perf" -C allreduce -t 1 "${pargs[@]}"
else
    echo "no NVIDIA libnccl.so.2 found (python3 -c 'import nvidia.nccl'): NCCL's figures not taken"
    summary+=("SKIP nccl-1rank-allreduce (no NVIDIA libnccl.so.2)")
fi

# 3. nccl-tests against Braid, and on NVIDIA's NCCL beside it (needs them carried in).
if [ "$(left)" -ge 60 ]; then
    nccl_tests $(($(left) - 5)) 1
else
    echo "SKIP: nccl-tests (the time budget of $budget s is spent)"
    summary+=("SKIP nccl-tests (budget)")
fi

# 4. PyTorch (issue 13): all_reduce of CUDA tensors, Braid next to Gloo, 2 processes on
# one GPU; the DDP examples with Braid under the "nccl" backend.
if have_torch; then
    LD_PRELOAD="$build/lib/libnccl.so.2" step check "torch-allreduce-braid" 90 \
        python3 -m torch.distributed.run --standalone --nproc_per_node=2 \
        "$root/bench/torch_gpu_allreduce.py" --backend nccl
    step check "torch-allreduce-gloo" 60 python3 -m torch.distributed.run --standalone \
        --nproc_per_node=2 "$root/bench/torch_gpu_allreduce.py" --backend gloo --largest 67108864
    OUT="$out/ddp" step check "ddp-gpu" 180 "$root/examples/ddp/gpu/run_gpu.sh" "$build"
fi

# 5. The rest of Braid's tables.
for n in 2 4; do
    for c in allgather reducescatter; do
        step check "perf-$c-$n" 45 "$perf" -C "$c" -t "$n" "${pargs[@]}"
    done
done
step check "perf-allreduce-4" 45 "$perf" -C allreduce -t 4 "${pargs[@]}"
# Ranks as processes on one GPU (device buffers through CUDA IPC).
step check "perf-allreduce-procs2" 60 "$perf" -C allreduce -N 2 --mem device -b 8 -e 1G -f 4 -n 10 -w 3 -c 1
# 6. Under MPS, where the driver has it: processes share one GPU context server, streams
# wait in the GPU again (MPS detected), and collectives take the CUDA IPC direct path.
mps=$(command -v nvidia-cuda-mps-control || true)
if [ -n "$mps" ] && [ "$(left)" -ge 60 ]; then
    export CUDA_MPS_PIPE_DIRECTORY=$out/mps-pipe CUDA_MPS_LOG_DIRECTORY=$out/mps-log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    if "$mps" -d; then
        NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT BRAID_CUDA_WAIT_TIMEOUT=30 \
            step check "procs-mps" 90 "$build/bin/check_gpu" procs
        grep -hE "share GPU|direct path|GPU to GPU" "$out/procs-mps.log" | sort -u | head -4
        echo quit | "$mps"
    else
        echo "SKIP: procs-mps (nvidia-cuda-mps-control -d failed)"
        summary+=("SKIP procs-mps (nvidia-cuda-mps-control -d failed)")
    fi
else
    echo "SKIP: procs-mps (no nvidia-cuda-mps-control, or the budget is spent)"
    summary+=("SKIP procs-mps (no nvidia-cuda-mps-control, or the budget)")
fi
finish
