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

#include "coll.h"

/* Channels an operation of `bytes` per rank uses, out of `nchannels`: small operations
 * stay on one channel, where splitting would only add per-step overhead. */
int br_plan_nchannels(size_t bytes, int nchannels);

/* The slice [lo, hi) of `units` that channel c of nch owns (empty when lo == hi). */
void br_plan_channel_range(size_t units, int nch, int c, size_t *lo_p, size_t *hi_p);

/* ---- The cost model and the choice of algorithm, protocol and channels ---- */

/* Tuning constants in the layout of ncclTunerConstants_v5/v6 (1152 bytes of doubles);
 * the tuner plugin may edit them at init, before the model uses them. */
typedef struct {
    double base_latencies[BR_NCCL_NUM_ALGOS][BR_NUM_PROTOS];  /* us */
    double hw_latencies[3][BR_NCCL_NUM_ALGOS][BR_NUM_PROTOS]; /* us per hop: NVLINK, PCI, NET */
    double ll_max_bws[4][3];
    double per_ch_max_ring_ll128_bws[4][3];
    double per_ch_max_tree_ll128_bws[4][3];
    double per_ch_max_tree_bws[4][3];
    double per_ch_max_nvls_tree_bws[4][3];
} br_tune_constants_t;

#define BR_HW_NVLINK 0
#define BR_HW_PCI 1
#define BR_HW_NET 2

/* A tuner's per-collective hook, in tuner v6 semantics: it may lower entries of the
 * cost table (float[BR_NUM_ALGOS][BR_NUM_PROTOS], -1 = unavailable) and set *nchannels. */
typedef ncclResult_t (*br_tune_hook_t)(void *ctx, int func, size_t bytes, float *table,
                                       int *nchannels);

/* What the model knows about a communicator. */
typedef struct {
    int nranks, nnodes;
    int max_channels;
    int hw;           /* BR_HW_*: the slowest link the ring crosses */
    double link_gbps; /* bandwidth of that link per channel, GB/s */
} br_tune_topo_t;

typedef struct br_tune br_tune_t;

/* The choice for one collective. */
typedef struct {
    int algo, proto, nchannels;
    float predicted_us;
} br_plan_choice_t;

/* Model of a communicator. Reads NCCL_ALGO and NCCL_PROTO (NCCL's syntax: a list of
 * names, ^ to exclude, optionally per function "allreduce:ring;broadcast:^tree"); a
 * value that leaves no implemented algorithm fails with ncclInvalidUsage. */
ncclResult_t br_plan_tune_create(const br_tune_topo_t *topo, br_tune_t **tune_p);
/* The constants the tuner plugin may edit at its init. */
br_tune_constants_t *br_plan_tune_constants(br_tune_t *tune);
/* Install a tuner hook (after the tuner's init). */
void br_plan_tune_set_hook(br_tune_t *tune, br_tune_hook_t hook, void *ctx, const char *name);
void br_plan_tune_free(br_tune_t *tune);

/* Choose algorithm, protocol and channels for a collective of `bytes` (NCCL's size:
 * per-rank count times type size). Logged under NCCL_DEBUG_SUBSYS=TUNING, including
 * tuner choices that were rejected. */
ncclResult_t br_plan_choose(br_tune_t *tune, br_func_t func, size_t bytes, br_plan_choice_t *out);


#endif /* BR_PLAN_H_ */
