#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The profiler event tree the core emits, checked by profcheck (profiler_strict.c) under
# every event mask bit alone and all of them: AllReduce in user groups (braid-perf -m 2)
# and Send/Recv on 2 forked ranks over shared memory, and over the socket plugin for the
# network events' bits and for all bits (with Broadcast). Fails on any "profcheck: FAIL" line, on a run that fails, and when a mask that
# asks for an event type got none of it.
set -euo pipefail
perf=$1 plugin=$2 libdir=$3 profnet=${4:-}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export LD_LIBRARY_PATH="$libdir" BRAID_PLUGIN_PATH="$libdir" NCCL_PROFILER_PLUGIN="$plugin"
# Should a run hang, braid-perf's -T asks every rank for a state dump (to the log) before
# it stops them, and the log says what each waited for.
export BRAID_DUMP=- BRAID_WAIT_WARN=15
bad=0
run() { # mask transport coll extra-args...
    local mask=$1 tr=$2 coll=$3
    shift 3
    local out="$dir/out-$mask-$tr-$coll" log="$dir/log-$mask-$tr-$coll"
    local env=()
    [ "$tr" = net ] && env=(NCCL_SHM_DISABLE=1 NCCL_P2P_DISABLE=1 NCCL_NET_PLUGIN=socket)
    if ! env "${env[@]}" BRAID_TEST_PROF_MASK="$mask" BRAID_TEST_PROF_OUT="$out" \
        "$perf" -C "$coll" -N 2 -b 8 -e 256K -f 64 -n 3 -w 1 -T 60 "$@" > "$log" 2>&1; then
        echo "FAIL: mask $mask $tr $coll: the run failed"; tail -80 "$log"; bad=1; return
    fi
    if grep -q "profcheck: FAIL" "$log"; then
        echo "FAIL: mask $mask $tr $coll:"; grep "profcheck: FAIL" "$log" | sort | uniq -c | head; bad=1
    fi
    if [ "$(grep -c "0 failures" "$out" 2>/dev/null || true)" != 2 ]; then
        echo "FAIL: mask $mask $tr $coll: not every rank finalized its profiler cleanly"
        cat "$out" 2>/dev/null; bad=1
    fi
}
# Did the runs of this mask see at least one event of type name?
# (grep reads the files itself: with pipefail, `cat | grep -q` fails whenever grep stops
# early and cat dies of SIGPIPE, which made this check flaky.)
saw() { # mask name
    grep -qs " $2 [1-9]" "$dir"/out-"$1"-*
}
for bit in $(seq 0 14) all; do
    if [ "$bit" = all ]; then mask=$((0x7fff)); else mask=$((1 << bit)); fi
    trs=shm
    # Network transfers carry the proxy's and the net plugin's events.
    case $bit in 3|4|5|7|all) trs="shm net" ;; esac
    for tr in $trs; do
        run $mask $tr allreduce -m 2
        run $mask $tr sendrecv
        [ "$bit" = all ] && run $mask $tr broadcast
    done
    case $mask in
    2) saw $mask Coll && saw $mask CollApi && saw $mask GroupApi || { echo "FAIL: mask Coll: no Coll/CollApi/GroupApi events"; bad=1; } ;;
    4) saw $mask P2p && saw $mask P2pApi || { echo "FAIL: mask P2p: no P2p/P2pApi events"; bad=1; } ;;
    256) saw $mask GroupApi || { echo "FAIL: mask GroupApi: no GroupApi events"; bad=1; } ;;
    512) saw $mask CollApi || { echo "FAIL: mask CollApi: no CollApi events"; bad=1; } ;;
    1024) saw $mask P2pApi || { echo "FAIL: mask P2pApi: no P2pApi events"; bad=1; } ;;
    1) saw $mask Group || { echo "FAIL: mask Group: no Group events"; bad=1; } ;;
    8) saw $mask ProxyOp || { echo "FAIL: mask ProxyOp: no ProxyOp events over sockets"; bad=1; } ;;
    16) saw $mask ProxyStep && saw $mask ProxyOp || { echo "FAIL: mask ProxyStep: no ProxyStep/ProxyOp events over sockets"; bad=1; } ;;
    32) saw $mask ProxyCtrl || { echo "FAIL: mask ProxyCtrl: no ProxyCtrl events over sockets"; bad=1; } ;;
    64) saw $mask KernelCh || { echo "FAIL: mask KernelCh: no KernelCh events"; bad=1; } ;;
    2048) saw $mask KernelLaunch || { echo "FAIL: mask KernelLaunch: no KernelLaunch events"; bad=1; } ;;
    esac
done
# NetPlugin events: a v12 test net plugin that reports one per isend through the phandle
# the core hands it; each must hang under its ProxyStep. The plugin moves data within one
# process, so the two ranks are threads.
if [ -n "$profnet" ]; then
    for mask in $((0x80)) $((0x7fff)); do
        out="$dir/out-$mask-profnet" log="$dir/log-$mask-profnet"
        if ! NCCL_SHM_DISABLE=1 NCCL_P2P_DISABLE=1 NCCL_NET_PLUGIN="$profnet" \
            BRAID_TEST_PROF_MASK="$mask" BRAID_TEST_PROF_OUT="$out" \
            "$perf" -C allreduce -t 2 -b 8 -e 64K -f 64 -n 2 -w 1 -T 60 > "$log" 2>&1; then
            echo "FAIL: mask $mask over the test net plugin: the run failed"; tail -5 "$log"; bad=1
        elif grep -q "profcheck: FAIL" "$log"; then
            echo "FAIL: mask $mask over the test net plugin:"; grep "profcheck: FAIL" "$log" | sort | uniq -c | head; bad=1
        elif ! grep -qs " NetPlugin [1-9]" "$out"; then
            echo "FAIL: mask $mask over the test net plugin: no NetPlugin events"; bad=1
        fi
    done
fi
[ $bad = 0 ] || exit 1
echo "OK: 15 mask bits and all of them: every event's parent and mask as NCCL's"
cat "$dir"/out-32767-net-allreduce
