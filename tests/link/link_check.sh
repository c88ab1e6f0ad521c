#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Steps of the link tests, each one CTest entry:
#   link_check.sh build CC INCLUDE_DIR LIB_DIR SRC OUT [CFLAGS]
#       compile a plain NCCL program: CC -I INCLUDE_DIR SRC -L LIB_DIR -lnccl -o OUT
#   link_check.sh needed PROG LIB_DIR
#       PROG needs libnccl.so.2 (the SONAME, not libbraid), and ldd resolves it in LIB_DIR
#       when LD_LIBRARY_PATH=LIB_DIR
#   link_check.sh header COMPILER INCLUDE_DIR SRC FLAGS...
#       compile SRC (which includes nccl.h) with -fsyntax-only and the given flags
set -eu
step=$1
shift
case "$step" in
build)
    cc=$1 inc=$2 lib=$3 src=$4 out=$5 extra=${6:-}
    # shellcheck disable=SC2086 # extra holds several flags
    "$cc" -Wall -Wextra -Werror $extra -I "$inc" "$src" -L "$lib" -lnccl -o "$out"
    echo "built $out against $lib/libnccl.so"
    ;;
needed)
    prog=$1 lib=$2
    needed=$(readelf -d "$prog" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
    echo "NEEDED: $needed"
    echo "$needed" | grep -qx 'libnccl\.so\.2' || { echo "libnccl.so.2 is not NEEDED"; exit 1; }
    if echo "$needed" | grep -q 'braid'; then echo "the program needs libbraid"; exit 1; fi
    soname=$(readelf -d "$lib/libnccl.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
    [ "$soname" = libnccl.so.2 ] || { echo "libnccl.so SONAME is '$soname'"; exit 1; }
    resolved=$(LD_LIBRARY_PATH="$lib" ldd "$prog" | sed -n 's/^[[:space:]]*libnccl\.so\.2 => \([^ ]*\).*/\1/p')
    echo "libnccl.so.2 => $resolved"
    [ "$(readlink -f "$resolved")" = "$(readlink -f "$lib/libnccl.so.2")" ] ||
        { echo "ldd does not resolve libnccl.so.2 to $lib"; exit 1; }
    ;;
header)
    cxx=$1 inc=$2 src=$3
    shift 3
    "$cxx" -fsyntax-only -Wall -Wextra -Werror -pedantic-errors "$@" -I "$inc" "$src"
    echo "nccl.h compiles with: $cxx $*"
    ;;
*)
    echo "unknown step $step" >&2
    exit 2
    ;;
esac
