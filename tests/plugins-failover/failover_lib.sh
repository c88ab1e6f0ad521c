# SPDX-License-Identifier: Apache-2.0
# Shell helpers of the failover runners (sourced by failover_test.sh and
# netns_failover.sh): start ranks in the background, reap them with a bounded wait, and
# judge the run from their exit codes and output.
#
#   fo_start RANK CMD...   start CMD in the background, output in $fo_tmp/rankRANK.log
#   fo_wait GRACE DEADLINE reap every rank; once one has failed the others get GRACE
#                          seconds, and all are killed DEADLINE seconds after the start
#   fo_kill                kill every rank still running (for the scripts' exit traps)
#   fo_verdict WHAT [FAULT_RANK]  0 when every rank exited 0 and printed "mismatches 0"
#                          (and FAULT_RANK, if given, printed the wrapper's fault line);
#                          prints the summaries, or every rank's output on failure
#                          (or with FAILOVER_VERBOSE set)

fo_tmp=$(mktemp -d "${TMPDIR:-/tmp}/failover.XXXXXX") || exit 1
fo_pids=()
fo_status=()
fo_t0=$(date +%s.%N)

fo_start() {
    local r=$1
    shift
    "$@" >"$fo_tmp/rank$r.log" 2>&1 &
    fo_pids[r]=$!
}

fo_kill() {
    local r
    for r in "${!fo_pids[@]}"; do
        if [ -z "${fo_status[$r]:-}" ]; then
            kill -9 "${fo_pids[$r]}" 2>/dev/null
            wait "${fo_pids[$r]}" 2>/dev/null
            fo_status[r]=$1
        fi
    done
}

fo_wait() {
    local grace=$1 deadline=$2 failed_at= r left=${#fo_pids[@]} start=$SECONDS
    while [ "$left" -gt 0 ]; do
        for r in "${!fo_pids[@]}"; do
            if [ -z "${fo_status[$r]:-}" ] && ! kill -0 "${fo_pids[$r]}" 2>/dev/null; then
                wait "${fo_pids[$r]}"
                fo_status[r]=$?
                left=$((left - 1))
                if [ "${fo_status[$r]}" != 0 ] && [ -z "$failed_at" ]; then
                    failed_at=$SECONDS
                fi
            fi
        done
        if [ "$left" -gt 0 ] && [ -n "$failed_at" ] && [ $((SECONDS - failed_at)) -ge "$grace" ]; then
            fo_kill "killed ${grace} s after the first failure"
            left=0
        elif [ "$left" -gt 0 ] && [ $((SECONDS - start)) -ge "$deadline" ]; then
            fo_kill "killed at the ${deadline} s deadline"
            left=0
        fi
        sleep 0.1
    done
}

fo_verdict() {
    local what=$1 fault_rank=${2:-} ok=1 r elapsed
    elapsed=$(awk -v a="$fo_t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    for r in "${!fo_pids[@]}"; do
        if [ "${fo_status[$r]}" != 0 ] || ! grep -q "mismatches 0" "$fo_tmp/rank$r.log"; then
            ok=0
        fi
    done
    # A fault that never fired would make a passing run prove nothing.
    if [ -n "$fault_rank" ] && ! grep -q "^faulty-net: pid" "$fo_tmp/rank$fault_rank.log"; then
        echo "rank $fault_rank: the fault was never injected"
        ok=0
    fi
    if [ "$ok" = 1 ] && [ -z "${FAILOVER_VERBOSE:-}" ]; then
        cat "$fo_tmp"/rank*.log | grep -E "mismatches 0|^faulty-net"
        echo "PASS: $what, ${elapsed} s"
        return 0
    fi
    for r in "${!fo_pids[@]}"; do
        echo "==== rank $r: exit ${fo_status[$r]}"
        cat "$fo_tmp/rank$r.log"
    done
    if [ "$ok" = 1 ]; then
        echo "PASS: $what, ${elapsed} s"
        return 0
    fi
    echo "FAIL: $what, ${elapsed} s"
    return 1
}
