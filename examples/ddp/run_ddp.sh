#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the two DDP examples under torchrun with 2 processes and checks them:
#   ddp_simple on "braid": every rank prints "reduced dy/dw: 3.5";
#   ddp_example on "braid" and on "gloo" (same seeds): the final parameters are identical
#   across the ranks of each run, and Braid's equal Gloo's within float tolerance.
# Usage: examples/ddp/run_ddp.sh [--size N] [--batch B]
#   ddp_example's layer width (default 256) and batch per rank (default 1000, the lecture's)
# Needs braid_torch built (cmake --build build); PYTHONPATH defaults to build/python.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
py=${BRAID_TORCH_PYTHON:-/usr/bin/python3}
export PYTHONPATH=${PYTHONPATH:-$repo/build/python}
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
size=256
batch=1000
while [ $# -gt 0 ]; do
    case $1 in
    --size) size=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    *) echo "usage: $0 [--size N] [--batch B]" >&2; exit 2 ;;
    esac
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# torchrun on 2 local processes, on a free port so that parallel runs do not collide.
# torchrun picks the workers' MASTER_PORT by binding a free port and letting it go, so another process can
# take it first ("Address already in use"): such a start is tried again, twice at most.
torchrun2() {
    local log="$out/torchrun.log" attempt
    for attempt in 1 2 3; do
        if "$py" -m torch.distributed.run --nnodes=1 --nproc_per_node=2 --rdzv_backend=c10d \
            --rdzv_endpoint=localhost:0 --monitor_interval=0.2 "$@" > "$log" 2>&1; then
            cat "$log"
            return 0
        fi
        cat "$log"
        if ! grep -q "Address already in use" "$log" || [ "$attempt" = 3 ]; then
            return 1
        fi
        echo "run_ddp.sh: torchrun lost its port to another process; starting again"
    done
}

echo "== ddp_simple, braid, 2 processes"
torchrun2 "$here/ddp_simple.py" | tee "$out/simple.log"
for rank in 0 1; do
    if ! grep -Eq "rank $rank: reduced dy/dw: 3\.5($|[^0-9])" "$out/simple.log"; then
        echo "FAIL: rank $rank did not print reduced dy/dw: 3.5"
        exit 1
    fi
done
echo "ddp_simple: reduced dy/dw 3.5 on both ranks"

for backend in braid gloo; do
    echo "== ddp_example, $backend, 2 processes, size $size, batch $batch"
    torchrun2 "$here/ddp_example.py" --backend "$backend" --size "$size" --batch "$batch" \
        --save "$out/$backend-{rank}.pt"
done
"$py" - "$out" <<'PY'
import sys
import torch
out = sys.argv[1]
load = lambda name: torch.load(f"{out}/{name}.pt")
braid, gloo = [load(f"braid-{r}") for r in (0, 1)], [load(f"gloo-{r}") for r in (0, 1)]
fail = []
for name, run in (("braid", braid), ("gloo", gloo)):
    if not all(torch.equal(a, b) for a, b in zip(run[0], run[1])):
        fail.append(f"{name}: the ranks' parameters differ")
diff = max((a - b).abs().max().item() for a, b in zip(braid[0], gloo[0]))
if not all(torch.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(braid[0], gloo[0])):
    fail.append(f"braid and gloo differ by up to {diff:g}")
print(f"ddp_example: parameters identical across ranks; braid - gloo: max |diff| {diff:g}")
for f in fail:
    print("FAIL:", f)
sys.exit(1 if fail else 0)
PY
