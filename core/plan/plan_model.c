/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The cost model of the host executor: for every (algorithm, protocol) implemented for a
 * collective, a predicted time in microseconds,
 *
 *     base latency + hops on each kind of link x that link's per-hop latency
 *                  + bytes each rank moves / (link bandwidth x channels),
 *
 * in NCCL's shape (nccl-internals.md 4.4) with constants measured on the host executor
 * (docs/performance.md has the measurements). Ring and Tree read their latencies from the
 * NCCL-layout constants a tuner plugin may edit; Braid's own algorithms (OneShot,
 * DirectRead, RingOneShot) keep theirs in br_plan_host_t. Also the slot size per choice.
 * Pure functions of the plan; any thread.
 */
#include "plan_int.h"

/* Two ranks' ring is short: from 16 KiB up it moves data faster than the node arena
 * (measured; docs/performance.md). With more ranks every hop saved counts. */
#define BR_ARENA_TWO_RANK_MAX (16 * 1024)
/* Smallest slot a pipelined network ring step is cut into. */
#define BR_MIN_SLICE ((size_t)64 << 10)
/* Payload bytes of a Tree slot. */
#define BR_TREE_CHUNK ((size_t)32 << 10) /* the smallest */
/* Below this many bytes per channel a second channel costs more than it brings. */
#define BR_MIN_CHANNEL_BYTES (256 * 1024)

static const char *const no_arena = "needs every rank on one host with shared memory";

/* The call's size as the node arena sees it (ReduceScatter publishes its whole input). */
static size_t arena_bytes(const br_plan_t *p, int func, size_t bytes)
{
    return func == BR_FUNC_REDUCESCATTER ? bytes * (size_t)p->pc.nranks : bytes;
}

/* DirectRead: AllGather and Broadcast inputs of direct_lo..direct_hi bytes, and where the
 * ranks are threads of one process, AllReduce inputs from direct_lo up and AllGather and
 * Broadcast ones too at 2 ranks. There a rank loads the others' buffers where they are
 * (an AllReduce folds their inputs and copies their results): at 2, 4 and 8 threads from
 * 1 to 64 MiB AllReduce measured 1.6-2.9x the ring's busbw (docs/performance.md). An
 * AllGather or Broadcast of 3 or more ranks keeps direct_hi: above it its n - 1 readers
 * each read an input from memory where the arena's chunks read it once and pass it on
 * through the cache (at 4 and 8 threads from 16 MiB the two measured within the noise,
 * 0.8-1.4x); at 2 ranks the one reader reads it once either way (2 threads, 16 MiB:
 * 1.6-2.3x the chunks). Between processes direct_hi caps process_vm_readv, which lost to
 * the arena's chunks above it, and an AllReduce keeps the ring: read with
 * process_vm_readv it measured no faster (2 and 4 ranks, 1 to 16 MiB). */
static int direct_fits(const br_plan_t *p, int func, size_t bytes)
{
    const br_plan_comm_t *pc = &p->pc;
    /* An empty call fits any window (it only meets the others), so that NCCL_ALGO naming
     * DirectRead alone does not refuse it. */
    if (pc->arena_bytes == 0 || pc->direct_lo == 0 || (bytes > 0 && bytes < pc->direct_lo)) {
        return 0;
    }
    int capped = pc->direct_hi != 0 && bytes > pc->direct_hi;
    if (pc->one_process) {
        return func == BR_FUNC_ALLREDUCE ||
               ((func == BR_FUNC_ALLGATHER || func == BR_FUNC_BROADCAST) &&
                (pc->nranks == 2 || !capped));
    }
    return (func == BR_FUNC_ALLGATHER || func == BR_FUNC_BROADCAST) && !capped;
}

static int arena_available(const br_plan_t *p, int func, int algo, size_t bytes, const char **why)
{
    const br_plan_comm_t *pc = &p->pc;
    if (pc->arena_bytes == 0 && (algo == BR_ALGO_ONESHOT || pc->direct_lo == 0)) {
        *why = no_arena;
        return 0;
    }
    if (algo == BR_ALGO_DIRECT_READ) {
        *why = "reads AllGather and Broadcast inputs of BRAID_CMA_BYTES..BRAID_CMA_MAX_BYTES "
               "in place, where every rank may read the others' memory, and AllReduce inputs "
               "(AllGather and Broadcast at 2 ranks) from BRAID_CMA_BYTES up where the ranks "
               "are threads of one process";
        return direct_fits(p, func, bytes);
    }
    *why = "takes inputs up to BRAID_ONESHOT_BYTES per rank (16 KiB with 2 ranks), and "
           "Broadcast and AllGather inputs beyond that in chunks of BRAID_ONESHOT_BYTES";
    size_t b = arena_bytes(p, func, bytes);
    if (b > pc->arena_bytes) {
        return func == BR_FUNC_BROADCAST || func == BR_FUNC_ALLGATHER;
    }
    return pc->nranks > 2 || b <= BR_ARENA_TWO_RANK_MAX;
}

int br_plan_available(const br_plan_t *p, int func, int algo, int proto, size_t bytes,
                      const char **why)
{
    const br_plan_comm_t *pc = &p->pc;
    const char *dummy;
    why = why != NULL ? why : &dummy;
    int tree_func =
        func == BR_FUNC_ALLREDUCE || func == BR_FUNC_BROADCAST || func == BR_FUNC_REDUCE;
    *why = "not implemented by the host executor";
    if (proto == BR_PROTO_LL128 && !(pc->gpus && pc->ll128 && pc->nranks > 1)) {
        return 0;
    }
    if (pc->gpus && pc->nranks > 1 && algo != BR_ALGO_RING && algo != BR_ALGO_TREE &&
        algo != BR_ALGO_COLLNET_DIRECT && algo != BR_ALGO_COLLNET_CHAIN) {
        *why = "runs on the host executor only";
        return 0;
    }
    if (pc->nranks == 1) { /* a local copy, whatever the ring or tree would have been */
        return algo == BR_ALGO_RING || (algo == BR_ALGO_TREE && tree_func);
    }
    if (proto == BR_PROTO_LL && pc->ll_bytes == 0) {
        *why = "needs NCCL_LL_BUFFSIZE above 0";
        return 0;
    }
    switch (algo) {
    case BR_ALGO_RING: return 1;
    case BR_ALGO_TREE:
        *why = pc->gpus ? "runs AllReduce on GPUs (as in NCCL)"
                        : "runs AllReduce, Broadcast and Reduce";
        return pc->gpus ? func == BR_FUNC_ALLREDUCE : tree_func;
    case BR_ALGO_ONESHOT:
    case BR_ALGO_DIRECT_READ:
        if (proto != BR_PROTO_SIMPLE) {
            *why = "moves data through the node arena, with no FIFO protocol";
            return 0;
        }
        return arena_available(p, func, algo, bytes, why);
    case BR_ALGO_COLLNET_DIRECT:
    case BR_ALGO_COLLNET_CHAIN:
        if (!pc->collnet) {
            *why = "needs a collnet: NCCL_COLLNET_ENABLE=1, a net plugin library that exports "
                   "ncclCollNetPlugin_v8..v12 with devices, at least NCCL_COLLNET_NODE_THRESHOLD "
                   "hosts";
            return 0;
        }
        if (proto != BR_PROTO_SIMPLE) {
            *why = "runs with the Simple protocol only";
            return 0;
        }
        if (func == BR_FUNC_ALLREDUCE) {
            *why = "the collnet plugin does not reduce this type with this operation";
            return p->op_collnet;
        }
        if (func != BR_FUNC_ALLGATHER && func != BR_FUNC_REDUCESCATTER) {
            *why = "runs AllReduce, AllGather and ReduceScatter";
            return 0;
        }
        if (algo != BR_ALGO_COLLNET_DIRECT) {
            *why = "runs AllGather and ReduceScatter as CollNetDirect only";
            return 0;
        }
        if (func == BR_FUNC_ALLGATHER && !pc->collnet_ag) {
            *why = "needs a collnet plugin with iallgather (NULL in some rank's table)";
            return 0;
        }
        if (func == BR_FUNC_REDUCESCATTER && !pc->collnet_rs) {
            *why = "needs a collnet plugin with ireducescatter (NULL in some rank's table)";
            return 0;
        }
        *why = "the collnet plugin does not reduce this type with this operation";
        return func == BR_FUNC_ALLGATHER || p->op_collnet;
    case BR_ALGO_RING_ONESHOT: {
        size_t cap = pc->oneshot_bytes < BR_PLAN_RING_ONESHOT_MAX ? pc->oneshot_bytes
                                                                  : BR_PLAN_RING_ONESHOT_MAX;
        size_t slot = proto == BR_PROTO_LL ? pc->ll_bytes : pc->step_bytes;
        *why = "runs AllReduce inputs of at most 16 KiB (and BRAID_ONESHOT_BYTES) that fit a "
               "slot";
        return func == BR_FUNC_ALLREDUCE && bytes > 0 && bytes <= cap && bytes <= slot;
    }
    default: return 0;
    }
}

int br_plan_nchannels(const br_plan_t *p, size_t bytes)
{
    /* On GPUs NCCL's rule: a channel (512 threads) wants 64 bytes per thread. */
    size_t n = bytes / (p->pc.gpus ? (size_t)512 * 64 : BR_MIN_CHANNEL_BYTES);
    if (n < 1) {
        n = 1;
    }
    return n < (size_t)p->pc.nchannels ? (int)n : p->pc.nchannels;
}

/* Bandwidth of (proto, nch channels) on the slowest link crossed, in bytes per
 * microsecond, as one rank gets it: one thread copies for every channel of a rank, so
 * channels add bandwidth only where the network (the plugin's own threads and sockets)
 * is the bottleneck, and ranks that share a machine's cores share its copy rate. */
static double link_bw(const br_plan_t *p, int proto, int nch)
{
    const br_plan_comm_t *pc = &p->pc;
    double gbps = pc->intra_hw == BR_HW_NVLINK ? p->h.inproc_gbps : p->h.intra_gbps;
    int net = (pc->nnodes > 1 || pc->intra_hw == BR_HW_NET) && pc->net_gbps * nch < gbps;
    if (net) {
        gbps = pc->net_gbps * nch;
    }
    if (proto == BR_PROTO_LL) {
        gbps *= p->h.ll_efficiency;
    }
    return gbps * 1e3 / pc->share;
}

/* Latency of one hop on a link class: when ranks outnumber cores, a hop also waits for
 * the next rank to be scheduled, in proportion (measured: docs/performance.md). */
static double hop_us(const br_plan_t *p, int hw, int algo, int proto)
{
    return p->k.hw_latencies[hw][algo][proto] * p->pc.share;
}

/* Ring, and the ring half of RingOneShot: every step one hop, the network crossed where
 * the ring leaves a host. */
static double ring_us(const br_plan_t *p, int func, int proto, size_t bytes, int nch)
{
    const br_plan_comm_t *pc = &p->pc;
    int n = pc->nranks, N = pc->nnodes, a = BR_ALGO_RING;
    int ar = func == BR_FUNC_ALLREDUCE;
    int steps = ar ? 2 * (n - 1) : n - 1;
    int inter = N > 1 ? (ar ? 2 * (N - 1) : N - 1) : 0;
    double traffic = ar ? 2.0 * (n - 1) / n
                     : func == BR_FUNC_ALLGATHER || func == BR_FUNC_REDUCESCATTER ? (double)(n - 1)
                                                                                  : 1.0;
    return p->k.base_latencies[a][proto] + (steps - inter) * hop_us(p, pc->intra_hw, a, proto) +
           inter * hop_us(p, BR_HW_NET, a, proto) +
           (double)bytes * traffic / link_bw(p, proto, nch);
}

/*
 * Tree: up the deepest path and down again for AllReduce, one way and part of the other
 * for Broadcast and Reduce (measurements in docs/performance.md).
 *  - Latency: over the network a tree hop costs tree_hop of a ring hop (0.6 measured
 *    at 2 to 16 ranks over sockets): a ring step keeps every rank busy at once, a tree hop
 *    one rank per branch. On shared memory the two measured alike.
 *  - Bandwidth: where every rank has cores of its own, a tree's root (and, across
 *    hosts, every rank with two children) moves half as much again as a ring rank (the
 *    2-rank chain measured 1.4x the ring's time at 64 MiB; NCCL's model halves the
 *    tree's bandwidth for the same reason). Where ranks share cores over the network the
 *    ratio moved between runs (0.8 to 1.45 of the ring's time from 1 to 64 MiB over
 *    sockets at 4 and 8 ranks; 1.0 to 1.6 over libfabric's tcp provider): 1.2, so large
 *    messages go to the ring, as on the GPU. On shared memory the two measured alike.
 */
static double tree_us(const br_plan_t *p, int func, int proto, size_t bytes, int nch)
{
    const br_plan_comm_t *pc = &p->pc;
    int n = pc->nranks, a = BR_ALGO_TREE;
    int net = pc->nnodes > 1 || pc->intra_hw == BR_HW_NET;
    double depth = p->tree_intra * hop_us(p, pc->intra_hw, a, proto) +
                   p->tree_inter * hop_us(p, BR_HW_NET, a, proto);
    double ways = (func == BR_FUNC_ALLREDUCE ? 2.0 : 1.5) * (net ? p->h.tree_hop : 1.0);
    if (pc->share > 1.0 && pc->intra_hw == BR_HW_NET && func != BR_FUNC_ALLREDUCE) {
        /* Ranks that share cores and talk over the network: a Broadcast or Reduce costs
         * the work of its n - 1 messages, done by the cores in turn, whatever the tree's
         * shape; its depth saves nothing over the ring's pipeline (4 and 8 ranks on 2
         * cores, binary trees inside the host: the ring as fast or faster from 8 B to
         * 128 KiB, docs/performance.md). */
        depth = (n - 1) * hop_us(p, pc->intra_hw, a, proto);
        ways = 1.0;
    }
    double traffic = func == BR_FUNC_ALLREDUCE ? 2.0 * (n - 1) / n : 1.0;
    double fan = pc->share <= 1.0 ? 1.5 : net ? 1.2 : 1.0;
    return p->k.base_latencies[a][proto] + ways * depth +
           (double)bytes * traffic * fan / link_bw(p, proto, nch);
}

/*
 * CollNet, in NCCL's shape: the reduction happens in the network, so one network latency
 * whatever the rank count (NCCL charges CollNet one inter-node latency), each rank's data
 * crossing its link once each way (full duplex: once), plus copying each chunk into and
 * out of the registered staging buffers. Chain costs a little more than Direct so a tie
 * goes to Direct (on the host both run the same path; docs/architecture.md).
 */
static double collnet_us(const br_plan_t *p, int func, int algo, int proto, size_t bytes)
{
    const br_plan_comm_t *pc = &p->pc;
    double net = pc->net_gbps * 1e3 / pc->share, copy = p->h.intra_gbps * 1e3 / pc->share;
    /* AllGather / ReduceScatter: bytes is one rank's block; every block crosses a link
     * and the staging buffers of each rank. */
    double moved = (double)bytes * (func == BR_FUNC_ALLREDUCE ? 1.0 : (double)pc->nranks);
    return p->k.base_latencies[algo][proto] + hop_us(p, BR_HW_NET, algo, proto) +
           (algo == BR_ALGO_COLLNET_CHAIN ? 0.5 : 0.0) + moved * (1.0 / net + 2.0 / copy);
}

/*
 * OneShot for a Broadcast or AllGather larger than an arena buffer (it moves in chunks of
 * one buffer, exec_arena.c): copy-bound like the ring, so it is charged the ring's transfer
 * time scaled by the copies each design makes of every byte. A ring Broadcast copies each
 * byte twice per hop, 2(n-1) times; the arena once in and once out per reader, n times. A
 * ring AllGather copies each rank's block 2n-1 times per rank (own block to its output and
 * to the FIFO, then in and on at each hop), the arena n+1 times (publish, own block, n-1
 * reads). Two ranks tie (the ring's latency loses the tie); at 4 ranks on 2 cores the arena
 * measured 0.3-0.8x the ring's time from 256 KiB to 16 MiB for both collectives
 * (docs/performance.md, issue 19), which the copy ratios (0.67, 0.71) underestimate.
 */
static double oneshot_chunked_us(const br_plan_t *p, int func, size_t bytes)
{
    const br_plan_host_t *h = &p->h;
    int n = p->pc.nranks;
    double ratio =
        func == BR_FUNC_BROADCAST ? (double)n / (2.0 * (n - 1)) : (double)(n + 1) / (2.0 * n - 1);
    double traffic = func == BR_FUNC_BROADCAST ? 1.0 : (double)(n - 1);
    return h->arena_base + (n - 1) * h->arena_peer +
           (double)bytes * traffic * ratio / link_bw(p, BR_PROTO_SIMPLE, 1);
}

static double model_us(const br_plan_t *p, int func, int algo, int proto, size_t bytes, int nch)
{
    const br_plan_host_t *h = &p->h;
    int n = p->pc.nranks;
    if (p->pc.gpus && (algo == BR_ALGO_RING || algo == BR_ALGO_TREE)) {
        return br_plan_gpu_us(p, func, algo, proto, bytes);
    }
    switch (algo) {
    case BR_ALGO_RING: return ring_us(p, func, proto, bytes, nch);
    case BR_ALGO_TREE: return tree_us(p, func, proto, bytes, nch);
    case BR_ALGO_COLLNET_DIRECT:
    case BR_ALGO_COLLNET_CHAIN: return collnet_us(p, func, algo, proto, bytes);
    case BR_ALGO_RING_ONESHOT: /* an AllGather of the inputs, then a local fold */
        return ring_us(p, BR_FUNC_ALLGATHER, proto, bytes, 1) +
               (double)bytes * n * p->pc.share / (h->fold_gbps * 1e3);
    case BR_ALGO_ONESHOT:
        if (arena_bytes(p, func, bytes) > p->pc.arena_bytes) {
            return oneshot_chunked_us(p, func, bytes);
        }
        return h->arena_base + (n - 1) * h->arena_peer +
               (double)arena_bytes(p, func, bytes) * (n + 1) / (h->arena_gbps * 1e3);
    default: { /* DirectRead */
        /* A Broadcast's root writes 1/n of every reader's output while the reader reads
         * the rest (exec_arena.c), so each of the n ranks copies (n-1)/n of the bytes. An
         * AllReduce rank folds (n-1)/n of the bytes from the others' inputs and copies as
         * much from their outputs, its core shared with `share` ranks. */
        if (func == BR_FUNC_ALLREDUCE) {
            double each = (double)bytes * (n - 1) / n * p->pc.share;
            return h->direct_base + 2.0 * (n - 1) * h->direct_peer +
                   each / (h->direct_gbps * 1e3) + each / (h->fold_gbps * 1e3);
        }
        double reads = func == BR_FUNC_ALLGATHER ? (double)(n - 1) : 1.0;
        double copied = func == BR_FUNC_ALLGATHER ? reads : (double)(n - 1) / n;
        return h->direct_base + reads * h->direct_peer +
               (double)bytes * copied / (h->direct_gbps * 1e3);
    }
    }
}

void br_plan_model(const br_plan_t *p, int func, size_t bytes, int nch, float *table)
{
    for (int a = 0; a < BR_NUM_ALGOS; a++) {
        for (int pr = 0; pr < BR_NUM_PROTOS; pr++) {
            float *e = &table[a * BR_NUM_PROTOS + pr];
            *e = -1.0f;
            char en = p->use_proto_only ? p->proto_only[func][a][pr] : p->enabled[func][a][pr];
            if (!en || !br_plan_available(p, func, a, pr, bytes, NULL)) {
                continue;
            }
            double us = p->pc.nranks == 1 ? 0.0 : model_us(p, func, a, pr, bytes, nch);
            *e = us < 0.0 ? -1.0f : (float)us;
        }
    }
}

size_t br_plan_chunk(const br_plan_t *p, int func, int algo, int proto, size_t bytes, int nch)
{
    const br_plan_comm_t *pc = &p->pc;
    size_t slot = proto == BR_PROTO_LL ? pc->ll_bytes : pc->step_bytes;
    size_t share = (bytes + (size_t)nch - 1) / (size_t)nch, want;

    if (algo == BR_ALGO_ONESHOT || algo == BR_ALGO_DIRECT_READ || algo == BR_ALGO_COLLNET_DIRECT ||
        algo == BR_ALGO_COLLNET_CHAIN) {
        return 0; /* collnet moves the staging buffers' size per request */
    }
    if (proto == BR_PROTO_LL || algo == BR_ALGO_RING_ONESHOT) {
        return slot;
    }
    if (algo == BR_ALGO_TREE && BR_PARAM_INT(TREE_CHUNK) > 0) {
        want = ((size_t)BR_PARAM_INT(TREE_CHUNK) + 63) & ~(size_t)63;
        return want < slot ? want : slot;
    }
    if (algo == BR_ALGO_TREE) {
        /* Down a tree every chunk is a hop per level, so chunks pipeline the levels: cut a
         * channel's share into 8 chunks per level of the deepest path, no smaller than
         * BR_TREE_CHUNK and no larger than a slot. Small chunks pipeline best where a
         * message costs little (sockets: 32 KiB to 512 KiB measured alike); large ones pay
         * each message's fixed cost less often (libfabric's tcp provider: 32 KiB chunks
         * ran 2x slower than 512 KiB at 16 MiB, docs/performance.md). */
        size_t depth = (size_t)(p->tree_intra + p->tree_inter);
        want = share / (8 * (depth > 0 ? depth : 1));
        want = (want + 63) & ~(size_t)63;
        want = want > BR_TREE_CHUNK ? want : BR_TREE_CHUNK;
        return want < slot ? want : slot;
    }
    /* Ring: on rings that cross the network, cut what one step moves into at least
     * `pipeline` slots (of at least BR_MIN_SLICE bytes): a mid-size call that fits one slot
     * would otherwise copy in, transfer and copy out one after the other. */
    if (!pc->ring_net || pc->pipeline <= 1) {
        return slot;
    }
    if (func == BR_FUNC_ALLREDUCE) {
        share = (share + (size_t)pc->nranks - 1) / (size_t)pc->nranks;
    }
    want = share / (size_t)pc->pipeline;
    want = want > BR_MIN_SLICE ? want : BR_MIN_SLICE;
    return want < slot ? want : slot;
}
