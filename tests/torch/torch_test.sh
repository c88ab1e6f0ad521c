#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs one PyTorch test under torchrun, or skips it (exit 77) saying why.
#   torch_test.sh NPROC SCRIPT [ARGS...]   SCRIPT on NPROC local processes
#   torch_test.sh --exec COMMAND [ARGS...]  a command that launches torchrun itself
# Environment (set by tests/torch/CMakeLists.txt): BRAID_TORCH_PYTHON, the Python with
# torch; BRAID_TORCH_PYTHONPATH, where the build put braid_torch; BRAID_TORCH_SKIP, why
# the build did not build it (empty when it did).
set -euo pipefail
py=${BRAID_TORCH_PYTHON:-/usr/bin/python3}
if [ -n "${BRAID_TORCH_SKIP:-}" ]; then
    echo "SKIP: ${BRAID_TORCH_SKIP}"
    exit 77
fi
if ! "$py" -c "import torch" 2>/dev/null; then
    echo "SKIP: $py has no torch (scripts/install-deps.sh installs torch==2.13.0)"
    exit 77
fi
export PYTHONPATH="${BRAID_TORCH_PYTHONPATH}${PYTHONPATH:+:$PYTHONPATH}"
if [ "$1" = "--exec" ]; then
    shift
    exec "$@"
fi
nproc=$1
shift
# torchrun (torch.distributed.run). Port 0: parallel tests must not share torchrun's
# default port. torchrun
# then picks the workers' MASTER_PORT by binding a free port and letting it go, and
# another test can take it before rank 0 binds it again ("Address already in use"):
# that start is tried again, twice at most; any other failure is the test's.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for attempt in 1 2 3; do
    if "$py" -m torch.distributed.run --nnodes=1 --nproc_per_node="$nproc" --rdzv_backend=c10d \
        --rdzv_endpoint=localhost:0 --monitor_interval=0.2 "$@" > "$log" 2>&1; then
        cat "$log"
        exit 0
    fi
    cat "$log"
    if ! grep -q "Address already in use" "$log" || [ "$attempt" = 3 ]; then
        exit 1
    fi
    echo "torch_test.sh: torchrun lost its port to another process; starting again"
done
