#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Braid speaks NCCL 2.32's API: every function of NVIDIA's 2.32 nccl.h (the fact list
# nccl_2.32_functions.txt) is declared by Braid's nccl.h and exported, with its pnccl twin,
# by Braid's libnccl.so.2. Where NVIDIA's sources are here (NVIDIA_NCCL_SRC: a checkout of
# NVIDIA/nccl at 2.32), the list is also compared with their src/nccl.h.in.
#   nccl_api_list.sh <Braid's libnccl.so.2> <Braid's nccl.h> <function list>
set -uo pipefail
lib=$1 header=$2 list=$3
names=$(grep -v '^#' "$list" | grep .)
exports=$(nm -D --defined-only "$lib" | awk '$2 == "T" || $2 == "W" {print $3}' | sort -u)
fail=0
for n in $names; do
    grep -q "BRAID_API_PAIR([^,]*, $n," "$header" || { echo "FAIL: nccl.h does not declare $n"; fail=1; }
    grep -qx "$n" <<< "$exports" || { echo "FAIL: $lib does not export $n"; fail=1; }
    grep -qx "p$n" <<< "$exports" || { echo "FAIL: $lib does not export p$n"; fail=1; }
done
echo "$(wc -w <<< "$names") functions of NCCL 2.32's nccl.h checked against $lib"
src=${NVIDIA_NCCL_SRC:-}
if [ -n "$src" ] && [ -f "$src/src/nccl.h.in" ]; then
    theirs=$(grep -oE '^[A-Za-z_ *]*[ *]nccl[A-Za-z0-9]+\(' "$src/src/nccl.h.in" |
             grep -oE 'nccl[A-Za-z0-9]+\($' | tr -d '(' | sort -u)
    # ncclResetDebugInit is declared under NCCL_OS_LINUX with its deprecation attribute.
    grep -q 'void  *ncclResetDebugInit' "$src/src/nccl.h.in" && theirs=$(printf '%s\nncclResetDebugInit\n' "$theirs" | sort -u)
    d=$(diff <(sort -u <<< "$names") <(grep . <<< "$theirs"))
    if [ -n "$d" ]; then
        echo "FAIL: the list differs from $src/src/nccl.h.in (< list, > header):"
        echo "$d"
        fail=1
    else
        echo "the list is the one of $src/src/nccl.h.in"
    fi
else
    echo "(NVIDIA_NCCL_SRC unset: the list itself was not compared with NVIDIA's header)"
fi
exit $fail
