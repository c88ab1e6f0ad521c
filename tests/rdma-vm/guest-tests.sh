#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The net-ib tests, run inside the soft-RoCE guest of run-vm.sh (ctest: rdma_vm):
#   guest-tests.sh BUILD_DIR
# conformance kit against the plugin's v12, v11 and v10 tables; the multi-process
# collective suite over NCCL_NET_PLUGIN=ib (2 ranks: full + big matrices with a 64 KiB
# FIFO; 4 ranks: thin + big) with shm and p2p disabled; then the failure cases (no device,
# filtered out, port down, queue pair in error, asynchronous event). Every step is bounded
# by timeout(1); the exit status is the number of failed steps (0: all passed).
b=$(cd "${1:?usage: guest-tests.sh BUILD_DIR}" && pwd)
plugin=$b/lib/libnccl-net-ib.so
failed=0
t0=$(cut -d' ' -f1 /proc/uptime)

step() { # step NAME SECONDS COMMAND...: run, time and record one step
    name=$1 limit=$2
    shift 2
    s=$(cut -d' ' -f1 /proc/uptime)
    echo "== $name"
    timeout "$limit" "$@"
    rc=$?
    e=$(cut -d' ' -f1 /proc/uptime)
    if [ $rc = 0 ]; then res=PASS; else res="FAIL (exit $rc)"; failed=$((failed + 1)); fi
    echo "== $name: $res in $(awk "BEGIN{print $e - $s}")s"
    echo "$name: $res" >> /tmp/summary
}

# expect NAME SECONDS PATTERN COMMAND...: the command's output must contain PATTERN.
expect() {
    name=$1 limit=$2 pat=$3
    shift 3
    step "$name" "$limit" sh -c 'out=$("$@" 2>&1); echo "$out"; echo "$out" | grep -q -- "$0"' \
        "$pat" "$@"
}

export NCCL_SOCKET_IFNAME=lo
for v in 12 11 10; do
    step "conformance v$v" 200 "$b/bin/check_net_conformance" "$plugin" --require-device \
        --version "$v"
done

mp="NCCL_SHM_DISABLE=1 NCCL_P2P_DISABLE=1 NCCL_NET_PLUGIN=ib NCCL_NET=IB"
step "mp_coll 2 ranks full,big (NCCL_BUFFSIZE=64K)" 300 env $mp NCCL_BUFFSIZE=65536 \
    "$b/bin/check_mp_coll" --mode proc --ranks 2 --matrix full,big --timeout 240
step "mp_coll 4 ranks thin,big (NCCL_BUFFSIZE=64K, 2 QPs split)" 300 env $mp \
    NCCL_BUFFSIZE=65536 NCCL_IB_QPS_PER_CONNECTION=2 NCCL_IB_SPLIT_DATA_ON_QPS=1 \
    "$b/bin/check_mp_coll" --mode proc --ranks 4 --matrix thin,big --timeout 240

# Failure cases.
chk=$b/bin/netib_check
expect "flush path (BRAID_IB_FLUSH_HOST=1)" 60 "100%: Checks" env BRAID_IB_FLUSH_HOST=1 \
    CK_RUN_CASE=misuse "$b/bin/check_net_conformance" "$plugin" --require-device
expect "filtered out (NCCL_IB_HCA=^rxe)" 30 "no usable port left by NCCL_IB_HCA '^rxe'" \
    env NCCL_IB_HCA=^rxe "$chk" "$plugin" devices 0
expect "malformed NCCL_IB_HCA" 30 "NCCL_IB_HCA 'rxe0:x' is malformed" \
    env NCCL_IB_HCA=rxe0:x "$chk" "$plugin" devices -1
expect "queue pair in error (remote access)" 90 "remote access error" "$chk" "$plugin" access
expect "port down mid-connection (async event, both ends fail)" 120 "asynchronous event" \
    env NCCL_IB_TIMEOUT=8 NCCL_IB_RETRY_CNT=2 "$chk" "$plugin" portdown "ip link set d0 down"
expect "port down at init" 30 "rxe0:1 named by NCCL_IB_HCA is" \
    env NCCL_IB_HCA=rxe0 "$chk" "$plugin" devices 0
ip link set d0 up
rdma link delete rxe0
expect "no device" 30 "NET/IB : No device found" "$chk" "$plugin" devices 0

echo "== summary ($(awk "BEGIN{print $(cut -d' ' -f1 /proc/uptime) - $t0}")s in the guest)"
cat /tmp/summary
exit $failed
