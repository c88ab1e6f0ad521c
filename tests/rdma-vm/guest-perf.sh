#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Figures for docs/performance.md, in the soft-RoCE guest of run-vm.sh (one boot):
#   run-vm.sh --timeout 900 -- sh tests/rdma-vm/guest-perf.sh BUILD_DIR
# perftest's ib_write_bw / ib_write_lat on rxe0 (loopback: server and client in the
# guest), the net-ib plugin's one-way bandwidth and latency (net_plugin_bench), and
# braid-perf AllReduce over net-ib and over the socket plugin (2 ranks, shm/p2p off).
b=$(cd "${1:?usage: guest-perf.sh BUILD_DIR}" && pwd)
export NCCL_SOCKET_IFNAME=lo
gid=$(ibv_devinfo -v -d rxe0 | awk '/GID\[/ && /::ffff:/ {gsub(/[^0-9]/, "", $1); print $1; exit}')
[ -n "$gid" ] || gid=1

perftest() { # perftest TOOL ARGS...: server and client on rxe0 through 127.0.0.1
    tool=$1
    shift
    timeout 120 "$tool" -d rxe0 -x "$gid" "$@" > /tmp/srv.log 2>&1 &
    sleep 2
    timeout 120 "$tool" -d rxe0 -x "$gid" "$@" 127.0.0.1
    wait
}

echo "== ib_write_bw, 1 MiB, 200 iterations"
perftest ib_write_bw -s 1048576 -n 200 -F
echo "== ib_write_bw, sizes 2^12..2^22"
perftest ib_write_bw -a -n 100 -F 2>&1 | awk '$1 ~ /^[0-9]+$/ && $1 >= 4096'
echo "== ib_write_lat, 8 B"
perftest ib_write_lat -s 8 -n 1000 -F

for size in 4096 65536 1048576 4194304; do
    echo "== net_plugin_bench net-ib bw $size"
    timeout 120 "$b/bin/net_plugin_bench" "$b/lib/libnccl-net-ib.so" --mode bw --size $size \
        --iters $((268435456 / size > 2000 ? 2000 : 268435456 / size))
done
echo "== net_plugin_bench net-ib lat 8"
timeout 120 "$b/bin/net_plugin_bench" "$b/lib/libnccl-net-ib.so" --mode lat --size 8 --iters 2000
echo "== net_plugin_bench net-socket bw 1048576 (same guest, over lo)"
timeout 120 "$b/bin/net_plugin_bench" "$b/lib/libnccl-net-socket.so" --mode bw --size 1048576 \
    --iters 256

for p in ib socket; do
    echo "== braid-perf allreduce, 2 ranks, NCCL_NET_PLUGIN=$p"
    NCCL_SHM_DISABLE=1 NCCL_P2P_DISABLE=1 NCCL_NET_PLUGIN=$p timeout 300 "$b/bin/braid-perf" \
        -C allreduce -N 2 -b 8 -e 16M -f 8 -n 10 -w 2 -T 280
done
