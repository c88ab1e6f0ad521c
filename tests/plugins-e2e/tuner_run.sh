#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The default tuner with a config that forces 1 channel for AllReduce up to 100000 bytes
# and asks for an algorithm Braid does not implement (NVLS) above that: the TUNING log must show
# the forced channel count used for small sizes and the model's choice for large ones.
set -euo pipefail
demo=$1 libdir=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/tuner.conf" <<'CONF'
# collective, min bytes, max bytes, algorithm, protocol, channels, nNodes, nRanks
allreduce, 0, 100000, ring, simple, 1, -1, -1
allreduce, 100001, 4294967295, nvls, simple, -1, -1, -1
CONF
NCCL_TUNER_PLUGIN=default NCCL_TUNER_CONFIG_FILE="$dir/tuner.conf" BRAID_PLUGIN_PATH="$libdir" \
    NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING,INIT LD_LIBRARY_PATH="$libdir" \
    "$demo" 2 > "$dir/log" 2>&1 || { cat "$dir/log"; exit 1; }
grep -q "TUNER/Plugin: loaded .*libnccl-tuner-default.so" "$dir/log" \
    || { echo "FAIL: tuner not loaded"; cat "$dir/log"; exit 1; }
grep -q "AllReduce 65536 bytes -> Ring/Simple, 1 channel (set by the tuner; the model alone: " "$dir/log" \
    || { echo "FAIL: the forced choice is not in the TUNING log"; grep TUNING -i "$dir/log" | head; exit 1; }
grep -q "AllReduce 16777216 bytes -> Ring/Simple, 2 channels (the tuner left the model's table" "$dir/log" \
    || { echo "FAIL: the unavailable NVLS rule changed the large-size choice"; exit 1; }
echo "OK: tuner choices visible in the TUNING log"
