#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `cmake --install` into a temporary prefix, then build the README's example outside the
# tree twice, with pkg-config and with find_package(Braid), and run each with no
# LD_LIBRARY_PATH: the rpath must load the installed libnccl.so.2.
# Usage: check_install.sh <build dir> <source dir>
set -euo pipefail
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset LD_LIBRARY_PATH
prefix=$tmp/prefix

cmake --install "$build" --prefix "$prefix" > "$tmp/install.log"
pc=$(find "$prefix" -name braid.pc)
libdir=$(dirname "$(dirname "$pc")")
missing=0
for f in include/nccl.h include/braid.h include/braid/plugin_api/net/net.h \
    include/braid/plugin_api/tuner/tuner.h include/braid/plugin_api/profiler/profiler.h \
    bin/braid-info bin/braid-perf bin/braid-sim bin/braid-trace-merge \
    share/doc/braid/README.md share/doc/braid/docs/user-guide.md \
    share/doc/braid/examples/hello_allreduce.c; do
    [ -e "$prefix/$f" ] || { echo "FAIL: $f not installed"; missing=1; }
done
for f in libnccl.so.2 libnccl.so libbraid.so libnccl-net-socket.so libnccl-tuner-default.so \
    libnccl-profiler-braid.so cmake/Braid/BraidConfig.cmake cmake/Braid/BraidTargets.cmake; do
    [ -e "$libdir/$f" ] || { echo "FAIL: $f not installed in $libdir"; missing=1; }
done
[ "$missing" -eq 0 ] || { sed -n 1,200p "$tmp/install.log"; exit 1; }

# The installed tools run from the prefix and load the prefix's library.
"$prefix/bin/braid-info" --version
loaded_nccl() { # the libnccl.so.2 a program would load, as a canonical path
    ldd "$1" | awk '$1 == "libnccl.so.2" { print $3 }' | xargs -r realpath
}
want=$(realpath "$libdir/libnccl.so.2")
[ "$(loaded_nccl "$prefix/bin/braid-perf")" = "$want" ] ||
    { ldd "$prefix/bin/braid-perf"; echo "FAIL: braid-perf does not load $want"; exit 1; }

echo "== pkg-config"
flags=$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs braid)
echo "pkg-config --cflags --libs braid: $flags"
# shellcheck disable=SC2086 # the flags are words
cc "$src/examples/hello_allreduce.c" $flags -o "$tmp/hello_pc"
[ "$(loaded_nccl "$tmp/hello_pc")" = "$want" ] ||
    { ldd "$tmp/hello_pc"; echo "FAIL: hello does not load $want"; exit 1; }
bash "$src/tests/install/check_example.sh" "$tmp/hello_pc"

echo "== find_package(Braid)"
cmake -S "$src/tests/install/consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
    -DHELLO_SOURCE="$src/examples/hello_allreduce.c" > "$tmp/consumer.log" ||
    { cat "$tmp/consumer.log"; exit 1; }
cmake --build "$tmp/consumer" > "$tmp/consumer-build.log" ||
    { cat "$tmp/consumer-build.log"; exit 1; }
[ "$(loaded_nccl "$tmp/consumer/hello")" = "$want" ] ||
    { ldd "$tmp/consumer/hello"; echo "FAIL: hello does not load $want"; exit 1; }
bash "$src/tests/install/check_example.sh" "$tmp/consumer/hello"
echo "install: ok"
