/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The cost model where every rank has a GPU: NCCL's (nccl-internals.md 4.3-4.4), with the
 * bandwidths from the topology through the graph search (per-channel speed x search
 * channels) instead of constants, and NCCL's tables for latencies and per-protocol caps
 * (which the tuner plugin may edit at init, br_tune_constants_t has their layout).
 *
 *     time (us) = latency + bytes / (1000 x algorithm bandwidth in GB/s)
 *
 * Ring and Tree with LL, LL128 and Simple. Left out: NVLS, CollNet and PAT (no executor
 * runs them here), the tree's per-size correction table and aggregation (one operation
 * per call). Pure functions of the plan; any thread.
 */
#include <math.h>
#include <string.h>

#include "plan_int.h"

/* NCCL's arch rows: Volta, Ampere, Hopper, Blackwell. */
static int arch_row(int sm)
{
    return sm >= 100 ? 3 : sm >= 90 ? 2 : sm >= 80 ? 1 : 0;
}

/* Scale column: one node, two nodes, more. */
static int scale_col(int nnodes)
{
    return nnodes <= 1 ? 0 : nnodes == 2 ? 1 : 2;
}

void br_plan_gpu_constants(br_tune_constants_t *k)
{
    /* Base latencies {LL, LL128, Simple} and per hop on NVLink, PCI, network (us). */
    static const double base_tree[3] = {6.8, 14.0, 8.4}, base_ring[3] = {6.6, 14.0, 8.4};
    static const double hw_tree[3][3] = {{0.6, 1.25, 4.0}, {1.0, 1.9, 4.0}, {5.0, 8.5, 14.0}};
    static const double hw_ring[3][3] = {{0.6, 1.9, 3.4}, {1.0, 2.5, 5.7}, {2.7, 4.0, 14.0}};
    static const double ll_max[4][3] = {
        {39.0, 39.0, 20.4}, {87.7, 22.5, 19.0}, {141.0, 45.0, 35.0}, {282.0, 90.0, 70.0}};
    static const double ring_ll128[4] = {20.0, 20.0, 36.7, 40.0};
    static const double tree_ll128[4][3] = {
        {20.0, 20.0, 20.0}, {20.0, 20.0, 20.0}, {36.7, 36.7, 29.0}, {55.6, 31.67, 20.0}};
    static const double tree_bw[4][3] = {
        {26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}, {70.0, 42.8, 24.0}};

    memset(k, 0, sizeof(*k));
    for (int pr = 0; pr < BR_NUM_PROTOS; pr++) {
        k->base_latencies[BR_ALGO_TREE][pr] = base_tree[pr];
        k->base_latencies[BR_ALGO_RING][pr] = base_ring[pr];
        for (int hw = 0; hw < 3; hw++) {
            k->hw_latencies[hw][BR_ALGO_TREE][pr] = hw_tree[hw][pr];
            k->hw_latencies[hw][BR_ALGO_RING][pr] = hw_ring[hw][pr];
        }
    }
    for (int a = 0; a < 4; a++) {
        for (int s = 0; s < 3; s++) {
            k->ll_max_bws[a][s] = ll_max[a][s];
            k->per_ch_max_ring_ll128_bws[a][s] = ring_ll128[a];
            k->per_ch_max_tree_ll128_bws[a][s] = tree_ll128[a][s];
            k->per_ch_max_tree_bws[a][s] = tree_bw[a][s];
        }
    }
}

static double min2(double a, double b)
{
    return a < b ? a : b;
}

/* LL's cap: one node by GPU generation; across nodes by CPU vendor (Intel row 0, others
 * row 1), as NCCL picks it. */
static double ll_cap(const br_plan_t *p)
{
    int col = scale_col(p->pc.nnodes);
    int row = col == 0 ? arch_row(p->pc.sm) : (p->pc.cpu_vendor == 1 ? 0 : 1);
    return p->k.ll_max_bws[row][col];
}

/* Bus bandwidth (GB/s) of (algo, proto) for func. */
static double bus_bw(const br_plan_t *p, int func, int algo, int proto)
{
    const br_plan_comm_t *pc = &p->pc;
    int nch = pc->graph_nch, arch = arch_row(pc->sm), col = scale_col(pc->nnodes);
    double bw = nch * (double)(pc->nnodes <= 2 ? pc->bw_intra : pc->bw_inter);
    if (algo == BR_ALGO_RING) {
        if (proto == BR_PROTO_LL) {
            bw = min2(ll_cap(p), bw * 0.5);
        } else if (proto == BR_PROTO_LL128) {
            bw = min2(bw * 0.92, nch * p->k.per_ch_max_ring_ll128_bws[arch][col]);
        }
        return bw;
    }
    /* Tree (AllReduce only). */
    (void)func;
    bw = min2(bw * 0.92, nch * p->k.per_ch_max_tree_bws[arch][col]);
    if (proto == BR_PROTO_LL) {
        bw = min2(bw / 3.8, ll_cap(p));
    } else if (proto == BR_PROTO_LL128) {
        double eff = pc->nnodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0;
        bw = min2(bw * eff, nch * p->k.per_ch_max_tree_ll128_bws[arch][col]);
    }
    return bw;
}

double br_plan_gpu_us(const br_plan_t *p, int func, int algo, int proto, size_t bytes)
{
    const br_plan_comm_t *pc = &p->pc;
    int n = pc->nranks, N = pc->nnodes, ppn = (n + N - 1) / N;
    int intra = pc->intra_hw == BR_HW_NVLINK ? BR_HW_NVLINK : BR_HW_PCI;
    int ar = func == BR_FUNC_ALLREDUCE,
        agrs = func == BR_FUNC_ALLGATHER || func == BR_FUNC_REDUCESCATTER;
    int nsteps = ar ? 2 * (n - 1) : agrs ? n - 1 : n;
    /* NCCL counts AllGather and ReduceScatter bytes over the whole buffer. */
    double total = (double)bytes * (agrs ? n : 1);
    double busbw = bus_bw(p, func, algo, proto), algbw, lat;
    double intra_lat = p->k.hw_latencies[intra][algo][proto];
    double inter_lat = p->k.hw_latencies[BR_HW_NET][algo][proto];

    if (busbw <= 0.0) {
        return -1.0;
    }
    if (algo == BR_ALGO_RING) {
        int inter_steps = N > 1 ? (ar ? 2 * (N - 1) : N - 1) : 0;
        if (N > 1) {
            /* Per-step network overhead: 1 us on Intel, 2 elsewhere, x3 for Simple. */
            double ov = (pc->cpu_vendor == 1 ? 1.0 : 2.0) * (proto == BR_PROTO_SIMPLE ? 3.0 : 1.0);
            intra_lat = intra_lat > ov ? intra_lat : ov;
        }
        lat = p->k.base_latencies[algo][proto] + (nsteps - inter_steps) * intra_lat +
              inter_steps * inter_lat;
        if (ar && N > 1 && proto == BR_PROTO_SIMPLE &&
            total / ((double)pc->nchannels * n) >= 64.0) {
            lat *= pc->sm >= 80 ? 1.4 : 1.9;
        }
        algbw = busbw * n / (nsteps > 0 ? nsteps : 1);
    } else {
        if (N == 1 && ppn == 1) {
            intra_lat = inter_lat = p->k.hw_latencies[BR_HW_NET][BR_ALGO_TREE][proto];
        }
        lat = p->k.base_latencies[algo][proto] +
              2.0 * ((ppn - 1) * intra_lat + log2((double)N) * inter_lat);
        algbw = busbw * 0.5;
    }
    return lat + total / (1000.0 * algbw);
}
