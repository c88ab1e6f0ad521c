#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# CPack's Debian package: build it, check its control fields and contents, unpack it with
# `dpkg -x` (no root, nothing installed system-wide) and build and run the README's
# example against the unpacked tree with its own braid.pc.
# Usage: check_package.sh <build dir> <source dir>
set -euo pipefail
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset LD_LIBRARY_PATH

(cd "$build" && cpack -G DEB -B "$tmp/out" > "$tmp/cpack.log") || { cat "$tmp/cpack.log"; exit 1; }
deb=$(ls "$tmp"/out/braid_*.deb)
echo "package: $(basename "$deb")"
dpkg-deb -I "$deb" | tee "$tmp/info"
for field in "Package: braid" "Provides: libnccl2, libnccl-dev" "Conflicts: libnccl2, libnccl-dev"; do
    grep -qF " $field" "$tmp/info" || { echo "FAIL: no '$field'"; exit 1; }
done
grep -E "^ Depends:.*libhwloc" "$tmp/info" || { echo "FAIL: Depends lacks libhwloc"; exit 1; }
# braid-perf-mpi stays out: the package must not depend on one MPI for everyone.
! grep -E "^ Depends:.*(mpi|libcudart)" "$tmp/info" || { echo "FAIL: Depends names MPI or CUDA"; exit 1; }
dpkg-deb -c "$deb" > "$tmp/contents"
for f in ./usr/include/nccl.h ./usr/lib/libnccl.so.2 ./usr/lib/libbraid.so \
    ./usr/lib/libnccl-net-socket.so ./usr/lib/pkgconfig/braid.pc \
    ./usr/lib/cmake/Braid/BraidConfig.cmake ./usr/bin/braid-info ./usr/bin/braid-perf \
    ./usr/share/doc/braid/README.md; do
    grep -qE " $f( ->|$)" "$tmp/contents" || { echo "FAIL: $f not in the package"; exit 1; }
done

dpkg -x "$deb" "$tmp/root"
flags=$(PKG_CONFIG_PATH="$tmp/root/usr/lib/pkgconfig" pkg-config --cflags --libs braid)
# shellcheck disable=SC2086 # the flags are words
cc "$src/examples/hello_allreduce.c" $flags -o "$tmp/hello"
bash "$src/tests/install/check_example.sh" "$tmp/hello"
"$tmp/root/usr/bin/braid-info" --version
echo "package: ok"
