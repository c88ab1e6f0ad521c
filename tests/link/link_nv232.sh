#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# link_nv232.c compiled against NVIDIA's own NCCL 2.32 nccl.h, linked with Braid's
# libnccl.so.2 and run: a program built for NVIDIA's NCCL 2.32 runs on Braid.
#   link_nv232.sh CC LIB_DIR SRC STUB_DIR WORK_DIR
# NVIDIA's header is generated into WORK_DIR from src/nccl.h.in and makefiles/version.mk
# of NVIDIA's sources: NVIDIA_NCCL_SRC (a checkout at 2.32), else the first ref at 2.32 of
# a git mirror of NVIDIA/nccl (NVIDIA_NCCL_GIT). Exit 77 (SKIP) where neither is here.
# STUB_DIR holds the two CUDA runtime types the header needs, for machines without CUDA.
set -uo pipefail
cc=$1 lib=$2 src=$3 stub=$4 work=$5
mkdir -p "$work"
in="" ver=""
if [ -n "${NVIDIA_NCCL_SRC:-}" ] && [ -f "$NVIDIA_NCCL_SRC/src/nccl.h.in" ]; then
    in=$(cat "$NVIDIA_NCCL_SRC/src/nccl.h.in")
    ver=$(cat "$NVIDIA_NCCL_SRC/makefiles/version.mk")
elif [ -n "${NVIDIA_NCCL_GIT:-}" ] && [ -d "$NVIDIA_NCCL_GIT" ]; then
    for ref in $(git -C "$NVIDIA_NCCL_GIT" for-each-ref --format='%(refname)' refs/tags refs/heads); do
        v=$(git -C "$NVIDIA_NCCL_GIT" show "$ref:makefiles/version.mk" 2>/dev/null)
        if grep -qE 'NCCL_MINOR *:= *32' <<< "$v"; then
            in=$(git -C "$NVIDIA_NCCL_GIT" show "$ref:src/nccl.h.in") ver=$v
            echo "NVIDIA's sources: $NVIDIA_NCCL_GIT at $ref"
            break
        fi
    done
fi
if [ -z "$in" ]; then
    echo "SKIP: NVIDIA's NCCL 2.32 sources are not here (set NVIDIA_NCCL_SRC to a checkout of" \
         "NVIDIA/nccl at 2.32, or NVIDIA_NCCL_GIT to a git mirror of it that has a 2.32 ref)"
    exit 77
fi
field() { sed -n "s/^NCCL_$1 *:= *//p" <<< "$ver" | tr -d ' '; }
major=$(field MAJOR) minor=$(field MINOR) patch=$(field PATCH) suffix=$(field SUFFIX)
if [ "$major.$minor" != 2.32 ]; then
    echo "FAIL: NVIDIA's sources are NCCL $major.$minor.$patch, not 2.32"
    exit 1
fi
code=$((major * 10000 + minor * 100 + patch))
sed -e "s/\${nccl:Major}/$major/g" -e "s/\${nccl:Minor}/$minor/g" -e "s/\${nccl:Patch}/$patch/g" \
    -e "s/\${nccl:Suffix}/$suffix/g" -e "s/\${nccl:Version}/$code/g" <<< "$in" > "$work/nccl.h"
echo "NVIDIA's nccl.h $major.$minor.$patch generated in $work"
"$cc" -Wall -Wextra -Werror -DNCCL_OS_LINUX -I "$work" -I "$stub" "$src" -L "$lib" -lnccl \
    -o "$work/link_nv232" || { echo "FAIL: link_nv232.c does not build against NVIDIA's header"; exit 1; }
LD_LIBRARY_PATH="$lib" "$work/link_nv232"
