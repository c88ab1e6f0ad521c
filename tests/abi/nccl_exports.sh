#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every function NVIDIA's libnccl.so.2 exports, Braid's exports too: a program built
# against NCCL (PyTorch's libtorch_cuda, nccl-tests) must load with Braid's library in
# its place, and a symbol it imports that Braid lacks stops it at load time, whether or
# not it would ever call it. PyTorch 2.11 stopped so on ncclDevCommDestroy (found on an
# H100). Compared: the nccl*/pncclX functions (T or W) of both libraries, NVIDIA's
# version printed. Allowed to be absent, and listed when it is: NVIDIA's internal debug
# reset. (The device API's teams, requirements and LL all-to-all sizes are exported since
# issue 36.)
#   nccl_exports.sh <Braid's libnccl.so.2>
# NVIDIA's library: $NVIDIA_LIBNCCL, else the CUDA toolkit's, else the system's. Exit 77
# (SKIP) where there is none.
set -uo pipefail
braid=$1
nv=${NVIDIA_LIBNCCL:-}
if [ -z "$nv" ]; then
    for c in "${CUDA_HOME:-/usr/local/cuda}"/lib/libnccl.so.2 "${CUDA_HOME:-/usr/local/cuda}"/lib64/libnccl.so.2 \
             /usr/lib/x86_64-linux-gnu/libnccl.so.2 /usr/lib64/libnccl.so.2; do
        [ -e "$c" ] && { nv=$c; break; }
    done
fi
if [ -z "$nv" ] || [ ! -e "$nv" ]; then
    echo "SKIP: no NVIDIA libnccl.so.2 here (set NVIDIA_LIBNCCL, or install the CUDA toolkit's NCCL)"
    exit 77
fi
if [ "$(readlink -f "$nv")" = "$(readlink -f "$braid")" ]; then
    echo "FAIL: $nv is Braid's own library"
    exit 1
fi
funcs() { nm -D --defined-only "$1" | awk '$2 == "T" || $2 == "W" {print $3}' | grep -E '^p?nccl' | sort -u; }
allowed='^p?ncclResetDebugInitInternal$'
ver=$(strings "$nv" | grep -m1 -E '^NCCL version [0-9]')
missing=$(comm -23 <(funcs "$nv") <(funcs "$braid"))
n_nv=$(funcs "$nv" | wc -l)
echo "NVIDIA: $nv (${ver:-version unknown}, $n_nv functions); Braid: $braid"
bad=$(grep -vE "$allowed" <<< "$missing" | grep . || true)
ok=$(grep -E "$allowed" <<< "$missing" | tr '\n' ' ')
[ -n "$ok" ] && echo "absent, allowed (internal): $ok"
if [ -n "$bad" ]; then
    echo "FAIL: Braid lacks functions NVIDIA's NCCL exports: $(tr '\n' ' ' <<< "$bad")"
    exit 1
fi
echo "every other function NVIDIA's NCCL exports, Braid exports"
