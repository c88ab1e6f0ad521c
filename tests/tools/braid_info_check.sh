#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# braid-info: --check flags misspelt and unknown NCCL_*/BRAID_* variables and invalid
# values (exit status 1), passes a clean environment (0); the parameter listing holds the
# plugins' variables, every key a plugin reads with br_lite_param_str() among them;
# --plugins names the tuner and profiler plugins that load, and why none loads.
set -euo pipefail
info=$1 src=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail() { echo "FAIL: $*"; cat "$out"; exit 1; }

# A clean environment: no NCCL_*/BRAID_* variable but the interface.
clean=(env -i PATH="$PATH" NCCL_SOCKET_IFNAME=lo)
"${clean[@]}" "$info" --check > "$out" || fail "--check fails a clean environment"

rc=0
"${clean[@]}" NCCL_SOCKET_NTHREAD=2 BRAID_BUFFSIZE=1M NCCL_NO_SUCH_KNOB=1 NCCL_BUFFSIZE=4X \
    NCCL_DEBUG=inf0 NCCL_IB_TIMEOUT=abc "$info" --check > "$out" || rc=$?
cat "$out"
[ "$rc" -eq 1 ] || fail "--check exit status $rc with findings, not 1"
for want in "NCCL_SOCKET_NTHREAD: unknown, ignored: did you mean NCCL_SOCKET_NTHREADS?" \
    "BRAID_BUFFSIZE: unknown, ignored: did you mean NCCL_BUFFSIZE?" \
    "NCCL_NO_SUCH_KNOB: unknown to Braid" "NCCL_BUFFSIZE=4X (from environment): invalid" \
    "NCCL_DEBUG=inf0 (from environment): not a log level" "NCCL_IB_TIMEOUT=abc: invalid"; do
    grep -qF "$want" "$out" || fail "no '$want'"
done
[ "$(wc -l < "$out")" -eq 6 ] || fail "expected 6 findings"
# The full listing shows the findings too, and then the tables.
"${clean[@]}" NCCL_SOCKET_NTHREAD=2 "$info" > "$out"
grep -q "^Environment check (1 finding)" "$out" || fail "the listing does not show the check"

# Every key the plugins read by name is listed.
"${clean[@]}" "$info" > "$out"
grep -q "^Plugin parameters" "$out" || fail "no plugin parameters listed"
keys=$(grep -rhoE 'br_lite_param_(str|int)\("[A-Z_0-9]+"' "$src/plugins" --include='*.c' |
    grep -oE '"[A-Z_0-9]+"' | tr -d '"' | grep -E '^(NCCL|BRAID)_' | sort -u)
for k in $keys; do
    grep -qE "^$k " "$out" || fail "plugin variable $k is not listed by braid-info"
done

"${clean[@]}" NCCL_TUNER_PLUGIN=default NCCL_PROFILER_PLUGIN=braid "$info" --plugins > "$out" ||
    fail "--plugins failed"
cat "$out"
grep -qE "NET/Plugin: loaded .*libnccl-net-socket.so" "$out" || fail "no net plugin line"
grep -qE "TUNER/Plugin: loaded .*libnccl-tuner-default.so" "$out" || fail "no tuner line"
grep -qE "PROFILER/Plugin: loaded .*libnccl-profiler-braid.so" "$out" || fail "no profiler line"
grep -qE "ENV/Plugin: no plugin found: tried libnccl-env.so" "$out" || fail "no env plugin line"
echo "braid-info: ok"
