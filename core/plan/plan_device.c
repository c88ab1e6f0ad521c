/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Choices for calls on device buffers (the CUDA executor): Ring or Tree, with LL, LL128 or
 * Simple, and the channels, within what NCCL_ALGO / NCCL_PROTO allow. The host model's
 * constants describe CPU threads; kernels on one GPU are another machine, so this model
 * has its own, NCCL-like figures (per-hop latency of each protocol, a block's copy rate,
 * the protocols' efficiency). They are first estimates, to be replaced by measurements on
 * a GPU (docs/performance.md says which were measured).
 */
#include "plan_int.h"

/* us per hop and per launch; GB/s a block moves with Simple; protocol efficiency. */
static const double dev_hop_us[BR_NUM_PROTOS] = {0.6, 1.1, 2.5}; /* LL, LL128, Simple */
static const double dev_base_us[BR_NUM_PROTOS] = {3.0, 4.0, 5.0};
static const double dev_block_gbps = 40.0;
static const double dev_eff[BR_NUM_PROTOS] = {0.25, 0.9, 1.0};
/* Bytes each channel should have at least, per protocol, before another one pays. */
static const size_t dev_per_channel[BR_NUM_PROTOS] = {16384, 131072, 524288};

static double dev_us(const br_plan_t *p, int func, int algo, int proto, size_t bytes, int nch)
{
    int n = p->pc.nranks;
    double hops, moved;
    if (algo == BR_ALGO_TREE) {
        int depth = p->tree_intra + p->tree_inter;
        hops = func == BR_FUNC_ALLREDUCE ? 2.0 * depth : depth;
        moved = (double)bytes * (func == BR_FUNC_ALLREDUCE ? 2.0 : 1.0);
    } else {
        hops = func == BR_FUNC_ALLREDUCE ? 2.0 * (n - 1) : (double)(n - 1);
        if (func == BR_FUNC_ALLREDUCE) {
            moved = 2.0 * (double)bytes * (n - 1) / n;
        } else if (func == BR_FUNC_ALLGATHER || func == BR_FUNC_REDUCESCATTER) {
            moved = (double)bytes * (n - 1); /* bytes is the per-rank block */
        } else {
            moved = (double)bytes;
        }
    }
    double gbps = dev_block_gbps * dev_eff[proto] * nch;
    return dev_base_us[proto] + hops * dev_hop_us[proto] + moved / (gbps * 1e3);
}

static int dev_channels(size_t bytes, int proto, int max_nch)
{
    size_t n = bytes / dev_per_channel[proto];
    if (n < 1) {
        n = 1;
    }
    return n > (size_t)max_nch ? max_nch : (int)n;
}

/* The cheapest (algorithm, protocol) the CUDA executor runs for op, among those op's own
 * selection allows when `own`; *algo_p is -1 when there is none. */
static void dev_best(const br_plan_t *p, const br_op_t *op, int own, int max_nch, int *algo_p,
                     int *proto_p, int *nch_p)
{
    int func = (int)op->func;
    size_t bytes = br_op_bytes(op);
    double best = 0;

    *algo_p = -1;
    for (int algo = BR_ALGO_TREE; algo <= BR_ALGO_RING; algo++) {
        if (algo == BR_ALGO_TREE && func != BR_FUNC_ALLREDUCE && func != BR_FUNC_BROADCAST &&
            func != BR_FUNC_REDUCE) {
            continue;
        }
        for (int proto = 0; proto < BR_NUM_PROTOS; proto++) {
            if (!p->enabled[func][algo][proto] || (own && !br_op_allows(op, algo, proto))) {
                continue;
            }
            int nch = dev_channels(bytes, proto, max_nch);
            double us = dev_us(p, func, algo, proto, bytes, nch);
            if (*algo_p < 0 || us < best) {
                best = us;
                *algo_p = algo;
                *proto_p = proto;
                *nch_p = nch;
            }
        }
    }
}

ncclResult_t br_plan_choose_device(br_plan_t *p, br_op_t *op, int max_nch)
{
    int func = (int)op->func, best_algo = -1, best_proto = -1, best_nch = 1;
    size_t bytes = br_op_bytes(op);
    int own = op->call_algos != 0 || op->call_protos != 0;

    dev_best(p, op, own, max_nch, &best_algo, &best_proto, &best_nch);
    if (best_algo < 0 && own && !op->call_force) {
        own = 0; /* forceAlgSelection 0: as if the call selected nothing */
        dev_best(p, op, own, max_nch, &best_algo, &best_proto, &best_nch);
    }
    if (best_algo < 0 && own) {
        BR_WARN(NCCL_TUNING,
                "rank %d: %s of %zu bytes on device buffers: its ncclCollConfig_t allows nothing "
                "the CUDA executor runs (Ring and Tree with LL, LL128 and Simple); set "
                "forceAlgSelection to 0 to let Braid choose instead",
                p->pc.rank, br_func_name(func), bytes);
        return ncclInvalidUsage;
    }
    if (best_algo < 0) {
        BR_WARN(NCCL_TUNING,
                "rank %d: no algorithm for %s of %zu bytes on device buffers: the CUDA "
                "executor runs Ring and Tree with LL, LL128 and Simple, and NCCL_ALGO / "
                "NCCL_PROTO exclude all of them",
                p->pc.rank, br_func_name(func), bytes);
        return ncclInvalidUsage;
    }
    op->algo = best_algo;
    op->proto = best_proto;
    op->nchannels = best_nch;
    op->chunk_bytes = 0; /* the executor's FIFO geometry sets it */
    return ncclSuccess;
}
