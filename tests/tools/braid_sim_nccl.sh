#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# braid-sim --model nccl: NCCL's tuning model, which is arithmetic (no timing here).
#  1. A few predictions recomputed here from NCCL's formulas and constants (nccl-internals.md
#     4.3-4.4), independently of sim_nccl.c, with 2.30's constants and with older releases'
#     (--nccl-version: the values each release's src/graph/tuning.cc had).
#  2. The topology's NIC latency and coll attributes reach the model, and their absence is
#     stated with NCCL's defaults.
#  3. Every published configuration of nccl_published.txt predicts the value and algorithm the
#     table records, docs/topology.md shows the same row, and its hit/miss verdict (within 15 %
#     of the published figure) holds: at least 20 hits, at least 2 of them 8-byte latencies.
#  4. --model braid (the default) names only what Braid's executors run: Ring and Tree.
set -uo pipefail
sim=$1 src=$2
topo=$src/tests/topo/dgx-h100.xml
out=$(mktemp) tmp=$(mktemp --suffix=.xml)
trap 'rm -f "$out" "$tmp"' EXIT
fail() { echo "FAIL: $*"; cat "$out"; exit 1; }

# sim [ENV...] -- ARGS...: braid-sim bounded in time, its output in $out.
sim() {
    local env=()
    while [ "$1" != "--" ]; do env+=("$1"); shift; done
    shift
    timeout 60 env "${env[@]}" "$sim" "$@" > "$out" 2>&1 || fail "braid-sim $* failed"
}
# The last table row's field (6 time, 8 busbw, 9 algo/proto).
field() { grep -v '^#' "$out" | tail -1 | awk -v f="$1" '{print $f}'; }
# near A B REL: |A - B| <= REL * |B|
near() { awk -v a="$1" -v b="$2" -v r="$3" 'BEGIN{d=a-b; if(d<0)d=-d; m=b<0?-b:b; exit !(d<=r*m)}'; }

# 1. Formulas. One DGX H100, 8 GiB AllReduce: NVLS with 8 channels at 60 GB/s (busBw 480),
# latency the NVLink hop of NVLS, 25 us; algBw = busBw x n / (2(n-1)).
sim -- -t "$topo" --model nccl -b 8G -e 8G
want=$(awk 'BEGIN{n=8; alg=480*n/(2*(n-1)); t=25+8589934592/(1000*alg); print 8589934592/(t*1e3)*2*(n-1)/n}')
[ "$(field 9)" = NVLS/Simple ] || fail "1 node 8 GiB: $(field 9), not NVLS/Simple"
near "$(field 8)" "$want" 0.001 || fail "1 node NVLS busbw $(field 8), formula $want"
grep -qF "NVLS on (NVSwitch and sm90+" "$out" || fail "NVLS capability not stated"
# 8 bytes on one node: Ring/LL, 6.6 + 14 x 0.6 = 15.0 us.
sim -- -t "$topo" --model nccl -b 8 -e 8
[ "$(field 9)" = Ring/LL ] && near "$(field 6)" 15.0 0.001 || fail "1 node 8 B: not Ring/LL 15.0 us"
# Two nodes, 8 bytes: Tree/LL, 6.8 + 2 x (7 x 0.6 + log2(2) x 5.0) = 25.2 us.
sim -- -t "$topo" --model nccl -n 2 -b 8 -e 8
[ "$(field 9)" = Tree/LL ] && near "$(field 6)" 25.2 0.001 || fail "2 nodes 8 B: not Tree/LL 25.2 us"
# Four nodes, forced Ring/Simple, 8 GiB: busBw 8 x 48; latency 8.4 + (62-6) x max(3.4, 3 x 1)
# + 6 x 14, x 1.4 (the plateau).
sim NCCL_ALGO=Ring NCCL_PROTO=Simple -- -t "$topo" --model nccl -n 4 -b 8G -e 8G
want=$(awk 'BEGIN{n=32; lat=(8.4+56*3.4+6*14)*1.4; alg=384*n/(2*(n-1)); t=lat+8589934592/(1000*alg); print 8589934592/(t*1e3)*2*(n-1)/n}')
near "$(field 8)" "$want" 0.001 || fail "4 nodes Ring busbw $(field 8), formula $want"
# PAT: one GPU per node, AllGather, small sizes: 8 + log2(16) x 14/3.5 + 2.8 x 16 = 68.8 us plus
# bytes at 0.75 x the ring's bandwidth.
sim -- -t "$topo" --model nccl -n 16 -p 1 -c allgather -b 64K -e 64K
[ "$(field 9)" = PAT/Simple ] || fail "16 nodes x 1 GPU AllGather 64K: $(field 9), not PAT"

# NCCL releases. NVLSTree forced on 2 nodes, 8 bytes: intra 25 + 2 x log2(2) x the network
# hop, 20.9 from 2.29, 14 in 2.21-2.28; 2.19 and 2.20 had 23 for the NVLink hop.
for vl in 2.30:66.8 2.29:66.8 2.28:53.0 2.21.5:53.0 2.20:51.0 2.19:51.0; do
    sim NCCL_ALGO=NVLSTree -- -t "$topo" --model nccl --nccl-version "${vl%%:*}" -n 2 -b 8 -e 8
    near "$(field 6)" "${vl##*:}" 0.001 || fail "NVLSTree 8 B at NCCL ${vl%%:*}: $(field 6), not ${vl##*:}"
done
grep -qF "NCCL 2.19's tuning constants" "$out" || fail "the release's constants not stated"
# Tree/Simple, 2 nodes, 8 bytes: up to 2.22 no base and 28 us a hop, 2 x (7 x 28 + 28) = 448;
# from 2.23 8.4 + 2 x (7 x 4 + 14) = 92.4.
sim NCCL_ALGO=Tree NCCL_PROTO=Simple -- -t "$topo" --model nccl --nccl-version 2.22 -n 2 -b 8 -e 8
near "$(field 6)" 448.0 0.001 || fail "Tree/Simple at 2.22: $(field 6), not 448"
sim NCCL_ALGO=Tree NCCL_PROTO=Simple -- -t "$topo" --model nccl --nccl-version 2.23 -n 2 -b 8 -e 8
near "$(field 6)" 92.4 0.001 || fail "Tree/Simple at 2.23: $(field 6), not 92.4"
# Ring/LL on one node, 1 GiB: up to 2.20 a quarter of 12 x 30 GB/s capped at Ampere's 87.7
# (Hopper had no row of its own); from 2.21 half, capped at 141.
for vl in 2.20:87.7 2.21:141; do
    sim NCCL_ALGO=Ring NCCL_PROTO=LL -- -t "$topo" --model nccl --nccl-version "${vl%%:*}" -b 1G -e 1G
    want=$(awk -v b="${vl##*:}" 'BEGIN{B=1073741824; t=15.0+B/(1000*b*8/14); print B/(t*1e3)*14/8}')
    near "$(field 8)" "$want" 0.001 || fail "Ring/LL 1 GiB at ${vl%%:*}: busbw $(field 8), formula $want"
done
# Blackwell (sm100 on the same board): before 2.25 NCCL had no Blackwell row and took Hopper's
# LL cap (141); from 2.25 Blackwell's (282).
sed -e 's/sm="90"/sm="100"/' "$topo" > "$tmp"
for vl in 2.24:141 2.25:282; do
    sim NCCL_ALGO=Ring NCCL_PROTO=LL -- -t "$tmp" --model nccl --nccl-version "${vl%%:*}" -b 1G -e 1G
    want=$(awk -v b="${vl##*:}" 'BEGIN{B=1073741824; t=15.0+B/(1000*b*8/14); print B/(t*1e3)*14/8}')
    near "$(field 8)" "$want" 0.001 || fail "sm100 Ring/LL at ${vl%%:*}: busbw $(field 8), formula $want"
done
# NCCL_ALGO leaving AllReduce nothing: up to 2.23 NCCL ran Ring (6.6 + 2 x 0.6 on 2 GPUs),
# from 2.24 it refuses.
sim NCCL_ALGO=NVLSTree -- -t "$topo" --model nccl --nccl-version 2.23 -p 2 -b 8 -e 8
[ "$(field 9)" = Ring/LL ] && near "$(field 6)" 7.8 0.001 || fail "2.23 ring backup: $(field 9) $(field 6)"
sim NCCL_ALGO=NVLSTree -- -t "$topo" --model nccl --nccl-version 2.24 -p 2 -b 8 -e 8
grep -qF "nothing can run it" "$out" || fail "2.24 ran a function NCCL_ALGO left nothing"
# NCCL's own estimate logged on a 2-node H100 cluster (NVIDIA/nccl#1453): 128 bytes -> Tree/LL,
# 25.214764 us.
sim -- -t "$topo" --model nccl -n 2 -b 128 -e 128
[ "$(field 9)" = Tree/LL ] && near "$(field 6)" 25.2148 0.001 || fail "nccl#1453's estimate: $(field 9) $(field 6)"
for bad in 2.18 3.0 2.31 2.x 2.21.; do
    rc=0
    timeout 60 "$sim" -t "$topo" --model nccl --nccl-version "$bad" -b 8 -e 8 > "$out" 2>&1 || rc=$?
    [ "$rc" -ne 0 ] && grep -qF -- "--nccl-version $bad: not an NCCL release" "$out" ||
        fail "--nccl-version $bad not refused"
done
rc=0
timeout 60 "$sim" -t "$topo" --nccl-version 2.21 -b 8 -e 8 > "$out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -qF "applies to --model nccl only" "$out" || fail "--nccl-version without --model nccl"

# 2. NIC attributes: latency="5" adds 5 us to each network hop (twice for Simple), coll="1"
# with NCCL_COLLNET_ENABLE=1 turns CollNet (and multi-node NVLS) on.
sed -e 's/latency="0"/latency="5"/' -e 's/gdr="1"/gdr="1" coll="1"/' "$topo" > "$tmp"
sim -- -t "$topo" --model nccl -n 2 -b 8 -e 8
grep -qF "NIC latency 0.0 us (<net latency>)" "$out" || fail "latency attribute not stated"
grep -qF "CollNet off (no <net coll=\"1\">: no SHARP, NCCL's default)" "$out" ||
    fail "CollNet default not stated"
sim -- -t "$tmp" --model nccl -n 2 -b 8 -e 8
near "$(field 6)" 35.2 0.001 || fail "2 nodes 8 B with NIC latency 5: $(field 6), not 35.2 us"
grep -qF "CollNet off (SHARP NICs, NCCL_COLLNET_ENABLE=0" "$out" || fail "SHARP NICs not stated"
sim NCCL_COLLNET_ENABLE=1 NCCL_ALGO=CollNetDirect -- -t "$tmp" --model nccl -n 4 -b 8G -e 8G
[ "$(field 9)" = CollNetDirect/Simple ] || fail "CollNetDirect not run with SHARP NICs"
sed -e 's/ latency="0"//' "$topo" > "$tmp"
sim -- -t "$tmp" --model nccl -n 2 -b 8 -e 8
grep -qF "no <net latency>: NCCL's default 0" "$out" || fail "absent latency not stated"
rc=0
NCCL_ALGO=bogus timeout 60 "$sim" -t "$topo" --model nccl -b 8 -e 8 > "$out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || fail "NCCL_ALGO=bogus: exit status $rc, not 1"
grep -qF "unknown name 'bogus'" "$out" || fail "NCCL_ALGO=bogus not named"

# 3. The published configurations.
hits=0 us_hits=0
while IFS='|' read -r id cfg source envv args metric pub algo pred_ap pred verdict; do
    case "$id" in '#'* | '') continue ;; esac
    env=()
    [ "$envv" != "-" ] && env=("$envv")
    # shellcheck disable=SC2086
    sim "${env[@]}" -- -t "$topo" --model nccl $args
    got_ap=$(field 9) got=$(field "$([ "$metric" = us ] && echo 6 || echo 8)")
    [ "$got_ap" = "$pred_ap" ] || fail "$id: $got_ap, table says $pred_ap"
    [ "$algo" = "-" ] || [ "${got_ap%%/*}" = "$algo" ] || fail "$id: $got_ap, NCCL ran $algo"
    near "$got" "$pred" 0.005 || fail "$id: $got, table says $pred"
    # docs/topology.md shows the same row: published, arguments, prediction.
    u=$([ "$metric" = us ] && echo " us")
    a=$([ "$envv" != "-" ] && echo "$envv $args" || echo "$args")
    grep -qF "| $pub$u | \`$a\` | $pred$u $pred_ap |" "$src/docs/topology.md" ||
        fail "$id: docs/topology.md has no row '| $pub$u | \`$a\` | $pred$u $pred_ap |'"
    if near "$got" "$pub" 0.15; then
        [ "$verdict" = hit ] || fail "$id: within 15 % of $pub but recorded as a miss"
        hits=$((hits + 1))
        [ "$metric" = us ] && us_hits=$((us_hits + 1))
    else
        [ "$verdict" = miss ] || fail "$id: $got is over 15 % from $pub but recorded as a hit"
    fi
done < "$src/tests/tools/nccl_published.txt"
[ "$hits" -ge 20 ] || fail "only $hits published configurations within 15 %"
[ "$us_hits" -ge 2 ] || fail "only $us_hits 8-byte latencies within 15 %"

# 4. Braid's own model runs only what its executors have.
sim -- -t "$topo" -n 4 -c all -b 8 -e 8G -f 8 -L
grep -qF "# model braid" "$out" || fail "model not named"
grep -v '^#' "$out" | grep -Eq 'NVLS|CollNet|PAT' && fail "Braid's plan chose an algorithm it cannot run"
echo "braid_sim_nccl: $hits published configurations within 15 % ($us_hits of them 8-byte latencies)"
exit 0
