#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Net close semantics, every net device, NCCL_IB_HCA and the env plugin, through the
# strict net plugin (net_strict.c: three devices over the socket plugin's first; a close
# with a request not tested to completion is a violation) in real multi-process runs of
# the collective and send/recv matrix (check_mp_coll's thin matrix, 2 and 4 ranks, three
# channels, shared memory and p2p disabled so every link is a net connection).
#   net_strict.sh CHECK_MP_COLL STRICT_PLUGIN SOCKET_PLUGIN ENV_PLUGIN [CHECK_API_FAIL]
set -euo pipefail
mp=$1 strict=$2 socket=$3 envplug=$4 apifail=${5:-}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# run NAME [VAR=VALUE ...]: one matrix run; reports go to $dir/NAME, the log to $dir/NAME.log.
run() {
    local name=$1
    shift
    mkdir -p "$dir/$name"
    env CK_DEFAULT_TIMEOUT=300 NCCL_SOCKET_IFNAME=lo NCCL_SHM_DISABLE=1 NCCL_P2P_DISABLE=1 \
        NCCL_NET_PLUGIN="$strict" NCCL_NET=Strict BRAID_TEST_INNER_NET="$socket" \
        BRAID_TEST_STRICT_DIR="$dir/$name" NCCL_BUFFSIZE=65536 BRAID_NCHANNELS=3 \
        NCCL_P2P_NET_CHUNKSIZE=16384 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,ENV "$@" \
        "$mp" --mode proc --ranks 2,4 --matrix thin --timeout 120 > "$dir/$name.log" 2>&1
}

fail() {
    echo "FAIL: $*"
    exit 1
}

# check NAME USED...: no violation, every connection closed, and exactly the devices
# listed (of 0 1 2) carried traffic both ways.
check() {
    local name=$1
    shift
    local files=("$dir/$name"/strict.*)
    [ -e "${files[0]}" ] || fail "$name: the strict plugin wrote no report"
    if grep -h "^violation" "${files[@]}"; then
        fail "$name: the core broke the net close rules (above)"
    fi
    if grep -hv "^open 0$" "${files[@]}" | grep "^open"; then
        fail "$name: connections left open at exit"
    fi
    for d in 0 1 2; do
        local s r want=0
        s=$(awk -v d=$d '$1 == "dev" && $2 == d { t += $4 } END { print t + 0 }' "${files[@]}")
        r=$(awk -v d=$d '$1 == "dev" && $2 == d { t += $6 } END { print t + 0 }' "${files[@]}")
        for u in "$@"; do
            [ "$u" = "$d" ] && want=1
        done
        if [ $want = 1 ] && { [ "$s" = 0 ] || [ "$r" = 0 ]; }; then
            fail "$name: device strict$d carried no traffic (sent $s, received $r bytes)"
        fi
        if [ $want = 0 ] && [ "$s$r" != 00 ]; then
            fail "$name: device strict$d carried traffic (sent $s, received $r) but is filtered out"
        fi
        echo "$name: device strict$d sent $s received $r bytes"
    done
}

# 1. Every device in use, nothing left posted or untested at close.
run all || { tail -50 "$dir/all.log"; fail "all: the matrix failed"; }
check all 0 1 2
grep -q "Using network Strict (v10, 3 of 3 devices: 0:strict0 1:strict1 2:strict2)" "$dir/all.log" \
    || fail "all: init does not list the devices in use"
grep -q "channel 2 send to rank 1 via NET/Strict device [0-2] (strict[0-2])" "$dir/all.log" \
    || fail "all: INFO does not say which device a channel uses"
grep -q "p2p receive from rank [0-3] via NET/Strict device [0-2] (strict[0-2])" "$dir/all.log" \
    || fail "all: INFO does not say which device a p2p peer uses"

# 2. NCCL_IB_HCA: exclusion, and a name:port selection.
run exclude NCCL_IB_HCA=^strict1 || { tail -50 "$dir/exclude.log"; fail "exclude: the matrix failed"; }
check exclude 0 2
grep -q "device 1 (strict1) not used: not selected by NCCL_IB_HCA=^strict1" "$dir/exclude.log" \
    || fail "exclude: the excluded device is not logged"
run port NCCL_IB_HCA=strict2:1 || { tail -50 "$dir/port.log"; fail "port: the matrix failed"; }
check port 2

# 3. A filter that leaves nothing: init fails and says why.
if run none NCCL_IB_HCA==strict; then
    fail "none: a run with no device left succeeded"
fi
grep -q "device 0 (strict0) not selected by NCCL_IB_HCA==strict" "$dir/none.log" \
    || { grep -i "warn" "$dir/none.log" | head; fail "none: the error does not name the filter"; }

# 4. The env plugin: its table (not the environment) gives every NCCL_* value the run
# needs, among them NCCL_IB_HCA=^strict0; the environment's NCCL_IB_HCA=^strict1 and
# NCCL_NET=Nothing must not be read.
mkdir -p "$dir/envplugin"
cat > "$dir/env.table" <<TABLE
NCCL_NET_PLUGIN=$strict
NCCL_NET=Strict
NCCL_SHM_DISABLE=1
NCCL_P2P_DISABLE=1
NCCL_BUFFSIZE=65536
NCCL_P2P_NET_CHUNKSIZE=16384
NCCL_IB_HCA=^strict0
TABLE
env -u NCCL_NET_PLUGIN -u NCCL_SHM_DISABLE -u NCCL_P2P_DISABLE CK_DEFAULT_TIMEOUT=300 \
    NCCL_SOCKET_IFNAME=lo NCCL_ENV_PLUGIN="$envplug" BRAID_TEST_ENV_TABLE="$dir/env.table" \
    NCCL_IB_HCA=^strict1 NCCL_NET=Nothing BRAID_TEST_INNER_NET="$socket" \
    BRAID_TEST_STRICT_DIR="$dir/envplugin" BRAID_NCHANNELS=3 NCCL_DEBUG=INFO \
    NCCL_DEBUG_SUBSYS=INIT,NET,ENV "$mp" --mode proc --ranks 2,4 --matrix thin --timeout 120 \
    > "$dir/envplugin.log" 2>&1 || { tail -50 "$dir/envplugin.log"; fail "envplugin: the matrix failed"; }
check envplugin 1 2
grep -q "NCCL_IB_HCA set by env plugin EnvTable to ^strict0" "$dir/envplugin.log" \
    || fail "envplugin: the value's source is not logged"
grep -q "NCCL_IB_HCA is set in the environment but not read: env plugin EnvTable" \
    "$dir/envplugin.log" || fail "envplugin: the ignored environment value is not logged"
# 5. Abort with a receive posted for a peer that stays silent (check_api_fail's abort
# cases): the net ABI has no cancel, so the receive is closed outstanding after the
# bounded wait; every such close must be one the core reported, none unannounced.
if [ -n "$apifail" ]; then
    mkdir -p "$dir/abort"
    env CK_RUN_CASE=abort CK_DEFAULT_TIMEOUT=120 NCCL_SOCKET_IFNAME=lo NCCL_SHM_DISABLE=1 \
        NCCL_P2P_DISABLE=1 NCCL_NET_PLUGIN="$strict" NCCL_NET=Strict \
        BRAID_TEST_INNER_NET="$socket" BRAID_TEST_STRICT_DIR="$dir/abort" NCCL_DEBUG=INFO \
        NCCL_DEBUG_SUBSYS=NET "$apifail" > "$dir/abort.log" 2>&1 \
        || { tail -50 "$dir/abort.log"; fail "abort: check_api_fail's abort cases failed"; }
    v=$(cat "$dir/abort"/strict.* | grep -c "^violation closeRecv" || true)
    other=$(cat "$dir/abort"/strict.* | grep "^violation" | grep -vc "^violation closeRecv" || true)
    told=$(grep -c "closing the receive connection from rank [0-9]* on net device [0-9]* with [0-9]* requests\? not completed (abort: the peer may be gone)" "$dir/abort.log" || true)
    echo "abort: $v receive connections closed with a request outstanding, $told reported"
    [ "$other" = 0 ] || fail "abort: violations other than a receive closed at abort"
    [ "$v" = "$told" ] || fail "abort: $v outstanding closes but $told reported"
    [ "$v" -gt 0 ] || fail "abort: no receive was outstanding at abort (the case lost its point)"
fi
echo "OK: net close semantics, every device, NCCL_IB_HCA, the env plugin, abort"
