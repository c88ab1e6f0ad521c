/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plan: what an operation is and how it is cut up: functions (NCCL's ncclFunc_t
 * numbering), algorithm/protocol ids, how many channels an operation uses, and which
 * part of the data each channel owns. Every rank computes the same cut from the same
 * call arguments, so the step sequences on both ends of a connection agree.
 */
#ifndef BR_PLAN_H_
#define BR_PLAN_H_

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

#define BR_MAX_CHANNELS 64

/* NCCL's ncclFunc_t values. */
typedef enum {
    BR_FUNC_BROADCAST = 0,
    BR_FUNC_REDUCE = 1,
    BR_FUNC_ALLGATHER = 2,
    BR_FUNC_REDUCESCATTER = 3,
    BR_FUNC_ALLREDUCE = 4,
    BR_FUNC_SENDRECV = 5,
    BR_FUNC_SEND = 6,
    BR_FUNC_RECV = 7,
    BR_FUNC_ALLTOALL = 8,
    BR_FUNC_SCATTER = 9,
    BR_FUNC_GATHER = 10,
    BR_NUM_FUNCS = 11
} br_func_t;

/* NCCL's algorithm and protocol numbering (plugin-abi.md §2.4). */
#define BR_ALGO_TREE 0
#define BR_ALGO_RING 1
#define BR_NUM_ALGOS 7
#define BR_PROTO_LL 0
#define BR_PROTO_LL128 1
#define BR_PROTO_SIMPLE 2
#define BR_NUM_PROTOS 3

/* "AllReduce", "Send", ... as NCCL names them in logs. */
const char *br_func_name(br_func_t func);

/* Channels an operation of `bytes` per rank uses, out of `nchannels`: small operations
 * stay on one channel, where splitting would only add per-step overhead. */
int br_plan_nchannels(size_t bytes, int nchannels);

/* The slice [lo, hi) of `units` that channel c of nch owns (empty when lo == hi). */
void br_plan_channel_range(size_t units, int nch, int c, size_t *lo_p, size_t *hi_p);

#endif /* BR_PLAN_H_ */
