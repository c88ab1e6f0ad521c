/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Numbering shared by every tuner plugin ABI version (NCCL's nccl_common.h and tuner
 * headers): collective functions, algorithms, protocols, and the indices of the
 * tuning-constant tables of tuner v5/v6. Values are NCCL's and never change.
 */
#ifndef BRAID_PLUGIN_API_TUNER_COMMON_H_
#define BRAID_PLUGIN_API_TUNER_COMMON_H_

#include "../common.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifndef BRAID_NCCL_FUNC_T_
#define BRAID_NCCL_FUNC_T_
/*
 * The operation a tuner is asked about (4-byte enum). A tuner is consulted for the
 * collectives 0..NCCL_NUM_FUNCTIONS-1 only. Values 0-10 are the same in NCCL 2.28 and
 * 2.30; 11 and up are 2.30's (in 2.28, ncclNumFuncs was 11), so a plugin must not use
 * ncclNumFuncs to size anything it shares with a core of another release.
 */
typedef enum {
    ncclFuncBroadcast = 0,
    ncclFuncReduce = 1,
    ncclFuncAllGather = 2,
    ncclFuncReduceScatter = 3,
    ncclFuncAllReduce = 4,
    ncclFuncSendRecv = 5,
    ncclFuncSend = 6,
    ncclFuncRecv = 7,
    ncclFuncAlltoAll = 8,
    ncclFuncScatter = 9,
    ncclFuncGather = 10,
    ncclFuncAllGatherV = 11, /* 2.30 */
    ncclFuncPutSignal = 12,  /* 2.30 */
    ncclFuncSignal = 13,     /* 2.30 */
    ncclFuncWaitSignal = 14, /* 2.30 */
    ncclNumFuncs = 15        /* 2.30 value; 11 in 2.28 */
} ncclFunc_t;
#endif

/* Number of tunable collectives: ncclFuncBroadcast .. ncclFuncAllReduce. */
#define NCCL_NUM_FUNCTIONS 5

/* Algorithms: the row index of the cost table. */
#define NCCL_ALGO_UNDEF -1
#define NCCL_ALGO_TREE 0
#define NCCL_ALGO_RING 1
#define NCCL_ALGO_COLLNET_DIRECT 2
#define NCCL_ALGO_COLLNET_CHAIN 3
#define NCCL_ALGO_NVLS 4
#define NCCL_ALGO_NVLS_TREE 5
#define NCCL_ALGO_PAT 6
#define NCCL_NUM_ALGORITHMS 7

/* Protocols: the column index of the cost table. */
#define NCCL_PROTO_UNDEF -1
#define NCCL_PROTO_LL 0
#define NCCL_PROTO_LL128 1
#define NCCL_PROTO_SIMPLE 2
#define NCCL_NUM_PROTOCOLS 3

/* A cost-table entry holding this value is unavailable: the core never picks it, and
 * a tuner writes it to forbid a combination. */
#define NCCL_ALGO_PROTO_IGNORE -1.0

/* First index of ncclTunerConstants_vN_t.hwLatencies: the kind of link crossed. */
#define NCCL_HW_NVLINK 0
#define NCCL_HW_PCI 1
#define NCCL_HW_NET 2
#define NCCL_NUM_HW_LINKS 3

/* Rows of the bandwidth tables: GPU compute-capability generation. */
#define NCCL_VOLTA_COMPCAP_IDX 0
#define NCCL_AMPERE_COMPCAP_IDX 1
#define NCCL_HOPPER_COMPCAP_IDX 2
#define NCCL_BLACKWELL_COMPCAP_IDX 3
#define NCCL_NUM_COMPCAPS 4

/* Columns of the bandwidth tables: communicator scale in nodes. */
#define NCCL_TUNING_SCALE_1NODE 0
#define NCCL_TUNING_SCALE_2NODES 1
#define NCCL_TUNING_SCALE_4NODES 2
#define NCCL_NUM_TUNING_SCALES 3

#ifdef __cplusplus
}
#endif

#endif /* BRAID_PLUGIN_API_TUNER_COMMON_H_ */
