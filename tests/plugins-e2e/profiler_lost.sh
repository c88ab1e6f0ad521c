#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The trace profiler loses no trace in silence (prof_exit.c: 2 ranks, one AllReduce with a
# user profiler tag, no ncclCommDestroy before the process exits):
#  - a BRAID_PROFILER_DIR that does not exist is created, parents included, and the
#    traces written at exit pair up (braid-trace-merge --check), with a WARN naming the
#    communicators that were not destroyed;
#  - a directory that cannot be created is reported at init, by name, and the run
#    goes on without profiling.
set -euo pipefail
prog=$1 merge=$2 libdir=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export NCCL_PROFILER_PLUGIN=braid BRAID_PLUGIN_PATH="$libdir" NCCL_DEBUG=WARN

BRAID_PROFILER_DIR="$dir/new/traces" "$prog" > "$dir/exit.log" 2>&1 ||
    { cat "$dir/exit.log"; echo "FAIL: the run failed"; exit 1; }
cat "$dir/exit.log"
n=$(find "$dir/new/traces" -name 'braid-trace-*.json' | wc -l)
[ "$n" -eq 2 ] || { echo "FAIL: $n trace files written at exit, not 2"; exit 1; }
[ "$(grep -c "was not destroyed before the process exited" "$dir/exit.log")" -eq 2 ] ||
    { echo "FAIL: no WARN for each communicator left live"; exit 1; }
python3 "$merge" --check --expect-ranks 2 "$dir"/new/traces/braid-trace-*.json
grep -q '"AllReduce' "$dir"/new/traces/braid-trace-*.json ||
    { echo "FAIL: no AllReduce in the traces"; exit 1; }
# Profiler v7: the call's user tag on its CollApi and Coll events, and kernel phases.
python3 "$(dirname "$0")/trace_phases.py" --tag 0x5eed "$dir"/new/traces/braid-trace-*.json

touch "$dir/file"
BRAID_PROFILER_DIR="$dir/file/traces" "$prog" > "$dir/refused.log" 2>&1 ||
    { cat "$dir/refused.log"; echo "FAIL: the run failed"; exit 1; }
cat "$dir/refused.log"
grep -q "cannot create the trace directory $dir/file/traces: Not a directory" "$dir/refused.log" ||
    { echo "FAIL: no error at init for a directory that cannot be created"; exit 1; }
echo "OK: traces written at exit into a created directory; an impossible one refused at init"
