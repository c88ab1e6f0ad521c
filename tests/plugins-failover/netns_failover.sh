#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A real link failure: 4 ranks of failover_run, each in its own network namespace with two
# interfaces, "fa" on 10.77.1.0/24 and "fb" on 10.77.2.0/24 (veth pairs into one bridge
# per subnet, the bridges in a fifth namespace, so the host's own network is untouched).
# The socket plugin uses both (NCCL_SOCKET_IFNAME=fa,fb), with keepalive probes that give
# up on a silent link after 2 s (BRAID_SOCKET_KEEPALIVE), and 1 MiB AllReduces, so that both of its 2 channels run
# (each has 256 KiB at least) and both interfaces carry data; once rank 0 has done FAILOVER_DOWN_AFTER iterations
# (default 200 of 1000), rank 1's fb goes down. The receivers of the connections through
# it notice within about 2 s, and each connection moves to the other device (fa). Passes
# when every rank still completes with correct results.
#
#   netns_failover.sh FAILOVER_RUN [--no-fault] [failover_run options...]
#
# --no-fault leaves both interfaces up (the setup alone). Needs root and `ip netns`;
# otherwise prints "SKIP: <reason>" and exits 77. Every namespace (and with it every
# interface and bridge) and every rank is removed on every exit path. Bounded: ranks are
# killed 45 s after the start (FAILOVER_DEADLINE) or 5 s after the first failure.
set -u

if [ $# -lt 1 ]; then
    echo "usage: $0 FAILOVER_RUN [--no-fault] [failover_run options...]" >&2
    exit 2
fi
run=$1
shift
fault=1
if [ "${1:-}" = --no-fault ]; then
    fault=0
    shift
fi
nranks=4
down_after=${FAILOVER_DOWN_AFTER:-200}
# Should the failover not happen, the core's own timeout ends the run.
export BRAID_TIMEOUT=${BRAID_TIMEOUT:-20}

skip() {
    echo "SKIP: $*"
    exit 77
}
[ "$(id -u)" = 0 ] || skip "not root (network namespaces need CAP_NET_ADMIN)"
command -v ip >/dev/null 2>&1 || skip "no ip command (iproute2)"

# Names unique per run, so parallel runs do not collide; interface names stay <= 15 chars.
tag=fo$$
sw=$tag-sw
ns=()
for ((r = 0; r < nranks; r++)); do
    ns[r]=$tag-$r
done

. "$(dirname "$0")/failover_lib.sh"
cleanup() {
    fo_kill killed
    for n in "${ns[@]}" "$sw"; do
        ip netns del "$n" 2>/dev/null
    done
    rm -rf "$fo_tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$sw" 2>/dev/null || skip "ip netns add failed (no network namespace support?)"
ip -n "$sw" link add br-a type bridge 2>/dev/null || skip "cannot create a bridge"
ip link add "${tag}x" type veth peer name "${tag}y" 2>/dev/null || skip "cannot create a veth pair"
ip link del "${tag}x"

# Any failure from here on is a broken setup, not a missing feature.
setup() {
    set -e
    ip -n "$sw" link add br-b type bridge
    ip -n "$sw" link set br-a up
    ip -n "$sw" link set br-b up
    for ((r = 0; r < nranks; r++)); do
        ip netns add "${ns[$r]}"
        ip -n "${ns[$r]}" link set lo up
        for net in a b; do
            local subnet=1 inside=${tag}r${r}$net outside=${tag}s${r}$net
            [ $net = b ] && subnet=2
            ip link add "$inside" type veth peer name "$outside"
            ip link set "$inside" netns "${ns[$r]}"
            ip link set "$outside" netns "$sw"
            ip -n "${ns[$r]}" link set "$inside" name "f$net"
            ip -n "${ns[$r]}" addr add "10.77.$subnet.$((r + 1))/24" dev "f$net"
            ip -n "${ns[$r]}" link set "f$net" up
            ip -n "$sw" link set "$outside" master "br-$net" up
        done
    done
    set +e
}
if ! (setup); then
    echo "FAIL: the namespaces could not be set up"
    exit 1
fi

for ((r = 0; r < nranks; r++)); do
    fo_start "$r" ip netns exec "${ns[$r]}" env NCCL_DEBUG="${NCCL_DEBUG:-WARN}" NCCL_HOSTID="failover-ns-$r" \
        NCCL_SOCKET_IFNAME=fa,fb NCCL_COMM_ID=10.77.1.1:29477 BRAID_SOCKET_KEEPALIVE=2 \
        BRAID_NCHANNELS=2 "$run" --rank "$r" --nranks "$nranks" --progress 100 --count 262144 "$@"
done
if [ "$fault" = 1 ]; then
    # Wait (bounded) for rank 0's progress line, then take rank 1's second interface down.
    for ((i = 0; i < 200; i++)); do
        grep -q "iteration $down_after done" "$fo_tmp/rank0.log" && break
        kill -0 "${fo_pids[0]}" 2>/dev/null || break
        sleep 0.1
    done
    echo "taking rank 1's fb down after $(grep -c 'done$' "$fo_tmp/rank0.log") progress lines of rank 0"
    ip -n "${ns[1]}" link set fb down
fi
fo_wait 5 "${FAILOVER_DEADLINE:-45}"
if [ "$fault" = 1 ]; then
    fo_verdict "$nranks namespaces, rank 1's fb down after $down_after iterations"
else
    fo_verdict "$nranks namespaces, no fault"
fi
