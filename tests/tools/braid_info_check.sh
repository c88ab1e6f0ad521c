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
# --check-plugin takes any library: Braid's pass; a table of the wrong size and a library
# without tables fail.
libdir=$(dirname "$(ldd "$info" | awk '$1 == "libnccl.so.2" { print $3 }')")
for p in "$libdir"/libnccl-net-socket.so "$libdir"/libnccl-tuner-default.so \
    "$libdir"/libnccl-profiler-braid.so; do
    "$info" --check-plugin "$p" > "$out" || fail "--check-plugin $p"
    grep -q "Braid loads: ncclNetPlugin_v12\|Braid loads: ncclTunerPlugin_v7\|Braid loads: ncclProfiler_v7" \
        "$out" || fail "--check-plugin $p names no version"
done
tmp=$(mktemp -d)
printf 'struct t { const char *name; void *init; };\n%s\n' \
    '__attribute__((visibility("default"))) const struct t ncclTunerPlugin_v6 = {"Short", (void *)1};' \
    > "$tmp/short.c"
cc -shared -fPIC -o "$tmp/libnccl-tuner-short.so" "$tmp/short.c"
rc=0
"$info" --check-plugin "$tmp/libnccl-tuner-short.so" > "$out" || rc=$?
rm -rf "$tmp"
cat "$out"
[ "$rc" -eq 1 ] && grep -q "ncclTunerPlugin_v6 *is 16 bytes; this version's struct is 40: FAIL" "$out" ||
    fail "--check-plugin passed a table of the wrong size"
rc=0
"$info" --check-plugin "$libdir/libnccl.so.2" > "$out" || rc=$?
[ "$rc" -eq 1 ] && grep -q "no plugin table of any kind" "$out" || fail "libnccl.so.2 passed as a plugin"
echo "braid-info: ok"
