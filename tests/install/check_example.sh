#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the README's example as a user would, with its output redirected (to a file, and
# through a pipe), and checks every line it must print. Usage: check_example.sh ./hello
set -euo pipefail
hello=$1
out=$(mktemp)
trap 'rm -f "$out"' EXIT

"$hello" > "$out" 2>&1 || { cat "$out"; echo "FAIL: exit status $?"; exit 1; }
"$hello" 2>&1 | cat >> "$out"
cat "$out"
for want in "rank 0: 1 4 6 8 ok" "rank 1: 1 4 6 8 ok" "all ranks ok"; do
    n=$(grep -cxF "$want" "$out" || true)
    [ "$n" -eq 2 ] || { echo "FAIL: '$want' printed $n times in two runs, not 2"; exit 1; }
done
# The version line says which NCCL was loaded: Braid's ends in +braid.
NCCL_DEBUG=VERSION "$hello" | grep -E "NCCL version [0-9]+\.[0-9]+\.[0-9]+\+braid" ||
    { echo "FAIL: no '+braid' version line under NCCL_DEBUG=VERSION"; exit 1; }
echo "example: ok"
