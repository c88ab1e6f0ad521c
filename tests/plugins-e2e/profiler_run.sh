#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A real 4-rank run (braid-demo: AllReduce, AllGather, Broadcast) with Braid's trace
# profiler loaded through NCCL_PROFILER_PLUGIN; every rank must write a trace whose events
# pair up (braid-trace-merge --check), and the merged timeline must hold all 4 ranks.
set -euo pipefail
demo=$1 merge=$2 libdir=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
NCCL_PROFILER_PLUGIN=braid BRAID_PLUGIN_PATH="$libdir" BRAID_PROFILER_DIR="$dir" \
    LD_LIBRARY_PATH="$libdir" "$demo" 4 > "$dir/demo.log"
n=$(ls "$dir"/braid-trace-*.json | wc -l)
if [ "$n" -ne 4 ]; then
    echo "FAIL: expected 4 trace files, found $n"; cat "$dir/demo.log"; exit 1
fi
python3 "$merge" --check --expect-ranks 4 "$dir"/braid-trace-*.json
# Profiler v7's kernel phases: three per KernelCh event, in order, inside it.
python3 "$(dirname "$0")/trace_phases.py" "$dir"/braid-trace-*.json
python3 "$merge" -o "$dir/merged.json" "$dir"/braid-trace-*.json
grep -q '"AllReduce' "$dir/merged.json" || { echo "FAIL: no AllReduce events in the trace"; exit 1; }
# The per-operation table: one row per collective run, each with its calls.
python3 "$merge" --check --summary "$dir"/braid-trace-*.json > "$dir/summary"
cat "$dir/summary"
head -1 "$dir/summary" | grep -q "^operation *algorithm *protocol *calls *bytes/call *mean us *max us" ||
    { echo "FAIL: no summary header"; exit 1; }
for op in AllReduce AllGather Broadcast; do
    grep -qE "^$op +[A-Z_]+ +[A-Z0-9]+ +[0-9]+ " "$dir/summary" || { echo "FAIL: no $op row"; exit 1; }
done
echo "OK: 4 rank traces, events paired, merged, summarized"
