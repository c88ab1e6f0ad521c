#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The two DDP examples on GPUs with Braid under PyTorch's "nccl" backend, changed in
# nothing but the library: LD_PRELOAD puts Braid's libnccl.so.2 in place of the NCCL that
# PyTorch's wheels bring. 2 processes (torchrun), rank r on device r % device count, so
# both share GPU 0 on a one-GPU machine. Checks:
#   - Braid is the library PyTorch uses (the probe reads /proc/self/maps and ncclGetVersion);
#   - ddp_simple: every rank prints "reduced dy/dw: 3.5"; its profiler trace is exported;
#   - ddp_example: the final parameters are identical across ranks, and equal within float
#     tolerance to the same run on Gloo; its trace is exported; step times of the 2-process
#     run and of 1 process alone are printed (per sample: the target is at most 1.2x).
# Usage: examples/ddp/gpu/run_gpu.sh [build dir]   Results (logs, traces) in $OUT or
# ./ddp-gpu-out. Exit 77 (SKIP) without a GPU or without PyTorch built with CUDA.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
build=${1:-$repo/build}
out=${OUT:-$PWD/ddp-gpu-out}
py=${PYTHON:-python3}
lib="$build/lib/libnccl.so.2"
mkdir -p "$out"
if ! "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "SKIP: no PyTorch with a usable CUDA GPU here ($py)"
    exit 77
fi
[ -e "$lib" ] || { echo "FAIL: $lib not built"; exit 1; }
status=0
fail() { echo "FAIL: $*"; status=1; }

# torchrun from the same Python; a free port each run.
trun() { # nproc logfile args...
    local n=$1 log=$2
    shift 2
    timeout 300 "$py" -m torch.distributed.run --standalone --nnodes=1 --nproc_per_node="$n" \
        "$@" > "$log" 2>&1
    local rc=$?
    tail -4 "$log"
    return $rc
}

echo "== which libnccl.so.2 PyTorch loads, with and without LD_PRELOAD"
probe() {
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$((20000 + RANDOM % 20000)) RANK=0 WORLD_SIZE=1 "$py" - <<'PY'
import torch, torch.distributed as dist
dist.init_process_group("nccl")
t = torch.ones(4, device="cuda")
dist.all_reduce(t)
torch.cuda.synchronize()
maps = [l.split()[-1] for l in open("/proc/self/maps") if "libnccl" in l]
print("libnccl:", sorted(set(maps)), "version:", torch.cuda.nccl.version(), "sum:", t.sum().item())
dist.destroy_process_group()
PY
}
probe > "$out/probe-default.log" 2>&1; tail -1 "$out/probe-default.log"
LD_PRELOAD="$lib" probe > "$out/probe-preload.log" 2>&1; tail -1 "$out/probe-preload.log"
grep -q "$(readlink -f "$lib" | xargs dirname)" "$out/probe-preload.log" ||
    grep -q "$build/lib" "$out/probe-preload.log" || fail "LD_PRELOAD did not put Braid's libnccl.so.2 under PyTorch"
LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" probe > "$out/probe-ldpath.log" 2>&1
if grep -q "$build/lib" "$out/probe-ldpath.log"; then
    echo "LD_LIBRARY_PATH also works for this PyTorch"
else
    echo "LD_LIBRARY_PATH does not reach this PyTorch (its libraries find their own NCCL first): use LD_PRELOAD"
fi

echo "== the nccl symbols PyTorch's CUDA library imports, against Braid's exports"
tlib=$("$py" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
nm -D --undefined-only "$tlib"/libtorch_cuda.so 2>/dev/null | awk '{print $2}' | grep '^nccl' | sort -u > "$out/torch-imports.txt"
nm -D --defined-only "$lib" | awk '{print $3}' | grep '^nccl' | sort -u > "$out/braid-exports.txt"
comm -23 "$out/torch-imports.txt" "$out/braid-exports.txt" > "$out/missing.txt"
echo "$(wc -l < "$out/torch-imports.txt") imported, $(wc -l < "$out/missing.txt") missing from Braid: $(tr '\n' ' ' < "$out/missing.txt")"
[ -s "$out/missing.txt" ] && fail "Braid lacks symbols PyTorch imports"

export LD_PRELOAD="$lib"
echo "== ddp_simple on Braid, 2 processes"
(cd "$out" && trun 2 "$out/ddp_simple.log" "$here/ddp_simple.py") || fail "ddp_simple exited non-zero"
for r in 0 1; do
    grep -Eq "rank $r: reduced dy/dw: 3\.5($|[^0-9])" "$out/ddp_simple.log" || fail "ddp_simple rank $r did not print reduced dy/dw: 3.5"
done
[ -s "$out/trace_ddp_simple.json" ] || fail "ddp_simple wrote no trace"

echo "== ddp_example on Braid, 2 processes; then on Gloo; then 1 process alone"
(cd "$out" && trun 2 "$out/ddp_example-braid.log" "$here/ddp_example.py" --save "$out/braid-{rank}.pt") || fail "ddp_example on Braid"
[ -s "$out/trace_ddp_example.json" ] || fail "ddp_example wrote no trace"
(cd "$out" && LD_PRELOAD= trun 2 "$out/ddp_example-gloo.log" "$here/ddp_example.py" --backend gloo --trace "" --save "$out/gloo-{rank}.pt") || fail "ddp_example on Gloo"
(cd "$out" && trun 1 "$out/ddp_example-alone.log" "$here/ddp_example.py" --trace "") || fail "ddp_example alone"
"$py" - "$out" <<'PY' || status=1
import re, sys, torch
out = sys.argv[1]
load = lambda n: torch.load(f"{out}/{n}.pt")
braid, gloo = [load(f"braid-{r}") for r in (0, 1)], [load(f"gloo-{r}") for r in (0, 1)]
bad = []
for name, run in (("braid", braid), ("gloo", gloo)):
    if not all(torch.equal(a, b) for a, b in zip(run[0], run[1])):
        bad.append(f"{name}: the ranks' parameters differ")
diff = max((a - b).abs().max().item() for a, b in zip(braid[0], gloo[0]))
if not all(torch.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(braid[0], gloo[0])):
    bad.append(f"braid and gloo differ by up to {diff:g}")
def ms(name):
    m = re.search(r"([0-9.]+) ms per step", open(f"{out}/ddp_example-{name}.log").read())
    return float(m.group(1)) if m else float("nan")
b, g, a = ms("braid"), ms("gloo"), ms("alone")
print(f"ddp_example: parameters identical across ranks; braid - gloo max |diff| {diff:g}")
print(f"step time: braid 2 procs {b:.2f} ms, gloo 2 procs {g:.2f} ms, 1 process alone {a:.2f} ms;"
      f" per sample, braid 2 procs / alone = {b / 2 / a:.2f} (target <= 1.2)")
for x in bad:
    print("FAIL:", x)
sys.exit(1 if bad else 0)
PY
echo "results in $out"
exit $status
