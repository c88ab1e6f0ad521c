#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Gets a GPU run ready on the build machine, so that the lent GPU's minutes go to the
# tests: the device machine has CUDA, PyTorch and NVIDIA's NCCL but neither hwloc nor a
# way to fetch anything, and building there costs its time. Puts under .gpu-carry (ignored
# by git; the device tool's `carry` takes it):
#   lib/     libhwloc.so.15 and libudev.so.1, which Braid's libraries link
#   lib-fallback/  every other library the build links outside the C library and CUDA
#            (libssl, libcrypto): run.sh takes from here only what the GPU machine lacks
#   cudart/  libcudart.so.13, for check_gpu and braid-perf where the machine lacks it
#   nccl-tests-bin.tgz  NVIDIA's nccl-tests built here against Braid's nccl.h for one GPU
#            architecture (from a clone at .gpu-carry/nccl-tests; skipped without one)
# then prints the command and the carry list for the device tool.
#   tests/gpu/prepare_carry.sh [build dir] [sm, default 90]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
sm=${2:-90}
carry=$root/.gpu-carry
[ -x "$build/bin/check_gpu" ] || {
    echo "no $build/bin/check_gpu: build with the CUDA toolkit first (cmake -S . -B build && cmake --build build)"
    exit 1
}
mkdir -p "$carry/lib" "$carry/cudart"
lib_of() { ldd "$1" | awk -v n="$2" '$1 == n {print $3}'; }
for n in libhwloc.so.15 libudev.so.1; do
    p=$(lib_of "$build/lib/libnccl.so.2" "$n")
    [ -n "$p" ] && cp -L "$p" "$carry/lib/$n"
done
p=$(lib_of "$build/bin/check_gpu" libcudart.so.13)
[ -n "$p" ] && cp -L "$p" "$carry/cudart/libcudart.so.13"
rm -rf "$carry/lib-fallback"
mkdir -p "$carry/lib-fallback"
for f in "$build/lib/libnccl.so.2" "$build/bin/check_gpu" "$build/bin/braid-perf"; do
    ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r n p; do
    case "$n" in
    libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | ld-linux* | libgcc_s.so* | \
        libcudart.so* | libhwloc.so* | libudev.so*) continue ;;
    esac
    case "$p" in "$build"/*) continue ;; esac
    cp -L "$p" "$carry/lib-fallback/$n"
done
if [ -f "$carry/nccl-tests/src/Makefile" ]; then
    NCCL_TESTS_SRC="$carry/nccl-tests" bash "$root/tests/gpu/nccl_tests.sh" --pack "$sm" \
        "$carry/nccl-tests-bin.tgz" "$build"
else
    echo "no nccl-tests clone at $carry/nccl-tests (fetch github:NVIDIA/nccl-tests, clone it there): nccl-tests will say SKIP"
fi
rel=${build#"$root"/}
paths=("$rel/bin" "$rel/lib" .gpu-carry/lib .gpu-carry/lib-fallback .gpu-carry/cudart)
[ -f "$carry/nccl-tests-bin.tgz" ] && paths+=(.gpu-carry/nccl-tests-bin.tgz)
(cd "$root" && du -shL "${paths[@]}")
# The device tool carries at most 64 MiB in all, 8 paths (its README).
mib=$(cd "$root" && du -scmL "${paths[@]}" | tail -1 | cut -f1)
echo "carry: ${#paths[@]} paths, $mib MiB (the device tool takes 8 paths and 64 MiB at most)"
if [ "$mib" -gt 64 ] || [ ${#paths[@]} -gt 8 ]; then
    echo "FAIL: the carry is over the device tool's limits"
    exit 1
fi
list=$(printf '"%s", ' "${paths[@]}")
cat <<EOT
device tool, run:
  carry: [${list%, }]
  command: export R=\$OUT; c=/usr/local/cuda/lib64; [ -e \$c/libcudart.so.13 ] || c=\$PWD/.gpu-carry/cudart; export LD_LIBRARY_PATH=\$c; chmod +x $rel/bin/*; OUT=/tmp/g bash tests/gpu/run.sh \$PWD/$rel 2>&1 | tee \$R/run.log; tar czf \$R/gpu-out.tgz --exclude='*.json' -C /tmp g
  timeout_s: 520 (run.sh keeps to BRAID_GPU_BUDGET, 450 s by default; --smoke: 170 s, timeout_s 200)
EOT
