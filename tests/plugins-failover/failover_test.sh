#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs 4 ranks of failover_run as 4 processes of this host, each on its own simulated
# host (NCCL_HOSTID), so every link goes through the net plugin named by NCCL_NET_PLUGIN
# (the faulty wrapper in CTest). One rank may get extra environment variables:
#
#   failover_test.sh FAILOVER_RUN FAULT [failover_run options...]
#   FAULT: none, or RANK:VAR=VALUE[,VAR=VALUE...] (e.g. 1:FAULTY_NET_FAIL_SEND=300)
#
# Passes only if every rank exits 0 and reports mismatches 0, and a FAULTY_NET_FAIL_*
# fault was injected. Once a rank has failed the others get FAILOVER_GRACE seconds
# (default 5) to report theirs before they are killed; all are killed after
# FAILOVER_DEADLINE seconds (default 90). Every rank's output is printed on failure, the
# summary lines on success.
set -u

if [ $# -lt 2 ]; then
    echo "usage: $0 FAILOVER_RUN FAULT [failover_run options...]" >&2
    exit 2
fi
run=$1
fault=$2
shift 2
nranks=4

. "$(dirname "$0")/failover_lib.sh"
trap 'fo_kill killed; rm -rf "$fo_tmp"' EXIT
trap 'exit 130' INT TERM

fault_rank=-1
fault_env=()
if [ "$fault" != none ]; then
    fault_rank=${fault%%:*}
    IFS=, read -ra fault_env <<<"${fault#*:}"
fi

port=$("$run" --free-port) || exit 1
export NCCL_COMM_ID=127.0.0.1:$port
for ((r = 0; r < nranks; r++)); do
    vars=(NCCL_HOSTID="failover-host-$r" NCCL_DEBUG="${NCCL_DEBUG:-WARN}")
    if [ "$r" = "$fault_rank" ]; then
        vars+=("${fault_env[@]}")
        echo "rank $r: ${fault_env[*]}"
    fi
    fo_start "$r" env "${vars[@]}" "$run" --rank "$r" --nranks "$nranks" "$@"
done
fo_wait "${FAILOVER_GRACE:-5}" "${FAILOVER_DEADLINE:-90}"
check_rank=
if [[ "$fault" == *FAULTY_NET_FAIL_* ]]; then
    check_rank=$fault_rank
fi
fo_verdict "$nranks ranks, fault $fault" $check_rank
