#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# braid-sim's arguments: an unknown collective name and malformed numbers are refused with a
# message naming them (exit status 2), never run as AllReduce or as 0; -b 0 prints a row for
# 0 bytes and goes on at 4 bytes, and ends (as every table does, whatever the factor).
set -uo pipefail
sim=$1 src=$2
topo=$src/tests/topo/dgx-h100.xml
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail() { echo "FAIL: $*"; cat "$out"; exit 1; }

# run EXPECTED_RC ARGS...: braid-sim bounded in time, its stdout and stderr in $out.
run() {
    local want=$1 rc=0
    shift
    timeout 60 "$sim" "$@" > "$out" 2>&1 || rc=$?
    [ "$rc" -ne 124 ] || fail "braid-sim $* did not end within 60 s"
    [ "$rc" -eq "$want" ] || fail "braid-sim $*: exit status $rc, not $want"
}

run 2 -t "$topo" -c allredcue
grep -qF -- "-c allredcue: unknown collective" "$out" || fail "unknown -c not named"
grep -qF "broadcast, reduce, allgather, reducescatter, allreduce, all" "$out" ||
    fail "valid names not listed"
grep -q "allreduce, float" "$out" && fail "an unknown name ran AllReduce"
run 2 -t "$topo" -c allgather,bogus
grep -qF -- "-c bogus: unknown collective" "$out" || fail "second unknown -c not named"

for bad in "-n x" "-n 4x" "-n 0" "-n -2" "-n 99999999999" "-p abc" "-p 0" "-b 8Q" "-b -8" \
    "-b nan" "-e" "-e 1.5.2M" "-f x" "-f 1" "-f 0.5" "-f inf"; do
    read -r opt val <<< "$bad"
    run 2 -t "$topo" $bad
    grep -qF -- "$opt" "$out" || fail "braid-sim $bad: message does not name $opt"
done
run 2 -t "$topo" -b 1M -e 1K
grep -qF -- "is above -e" "$out" || fail "-b above -e not explained"
run 2 -t "$topo" stray
grep -qF "unexpected argument 'stray'" "$out" || fail "stray argument accepted"

# -b 0 as nccl-tests: a 0-byte row first, then data-carrying sizes, and the table ends.
run 0 -t "$topo" -b 0 -e 64 -f 2
rows=$(grep -v '^#' "$out" | awk '{print $1}' | tr '\n' ' ')
[ "$rows" = "0 4 8 16 32 64 " ] || fail "-b 0 -e 64 -f 2 sizes are '$rows'"
grep -Eq '^ +0 +0 +float +sum +-1 +0\.00 +0\.00 +0\.00  none' "$out" || fail "0-byte row"
run 0 -t "$topo" -c all -b 0 -e 1K -f 4
[ "$(grep -c '^ *0 ' "$out")" -eq 5 ] || fail "-c all -b 0: one 0-byte row per collective"
grep -q ' 1024 ' "$out" || fail "-c all -b 0 -e 1K -f 4 stops before 1K"
# A factor too small to move a small size on still ends (1, 2, 3, 4, 6, 9 ... 1K).
run 0 -t "$topo" -b 1 -e 1K -f 1.5
grep -Eq '^ +4 +1 ' "$out" || fail "-b 1 -f 1.5 has no 4-byte row"
# Suffixes as nccl-tests (binary units), and -c all lists each collective once.
run 0 -t "$topo" -c all,allreduce -b 1K -e 1K
[ "$(grep -c '^ *1024 ' "$out")" -eq 5 ] || fail "-c all,allreduce: not five tables of 1K"
echo "PASS"
