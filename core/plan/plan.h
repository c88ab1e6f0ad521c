/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plan: the one place that decides how a collective runs. For each call it chooses the
 * algorithm, the protocol, the channels and the chunk size (the cost model, then the
 * tuner plugin, within what NCCL_ALGO / NCCL_PROTO allow), and it owns the algorithms'
 * schedules (plan_sched.h) and how an operation's data is cut into channels and chunks.
 * Every rank computes the same answer from the same call arguments and the communicator
 * facts all ranks agreed on at init, so both ends of every connection run matching steps.
 * An executor runs what plan chose and never decides again.
 */
#ifndef BR_PLAN_H_
#define BR_PLAN_H_

#include <stddef.h>
#include <stdint.h>

#include "coll.h"
#include "graph.h"
#include "plan_sched.h"

/* Links the model knows (NCCL's hardware latency classes): threads of one process,
 * processes of one host, and the network. */
#define BR_HW_NVLINK 0 /* p2p: in-process */
#define BR_HW_PCI 1    /* shm: same host */
#define BR_HW_NET 2

/* Largest AllReduce input (bytes per rank) that RingOneShot gathers whole. */
#define BR_PLAN_RING_ONESHOT_MAX (16 * 1024)

/* What plan knows of a communicator: identical on every rank (comm agrees on it at init). */
typedef struct {
    int rank, nranks, nnodes;
    int local_ranks;      /* most ranks on one host */
    int nchannels;        /* channels with connected rings and trees */
    int intra_hw;         /* BR_HW_NVLINK or BR_HW_PCI: links inside a host */
    double net_gbps;      /* network bandwidth per channel (GB/s) */
    size_t step_bytes;    /* Simple payload bytes of one FIFO slot of a ring/tree connection */
    size_t ll_bytes;      /* LL payload bytes of one slot (data, not lines); 0: no LL */
    int pipeline;         /* a network ring step is cut into at least this many slots */
    int ring_net;         /* the ring crosses the network */
    size_t arena_bytes;   /* node arena: most bytes a rank publishes per operation; 0: none */
    size_t direct_lo;     /* DirectRead: smallest input read in place; 0: never */
    size_t direct_hi;     /* and the largest (0: no limit) */
    int one_process;      /* every rank is a thread of one process (loads reach any buffer) */
    size_t oneshot_bytes; /* BRAID_ONESHOT_BYTES: the one-shot paths' cap per rank */
    double share;         /* ranks per core on the busiest machine, at least 1 */
    int collnet;          /* every rank joined a collnet communicator (CollNet AllReduce) */
    unsigned char collnet_red[ncclNumTypes]; /* per type, bit k: br_red_kind_t k (sum, prod,
                                              * max, min) is reduced by the collnet */
    int collnet_ag; /* and every rank's plugin has iallgather (CollNetDirect AllGather) */
    int collnet_rs; /* ireducescatter (CollNetDirect ReduceScatter) */
    /* With GPUs on every rank (graph->gpus) the model is NCCL's, fed by the topology:
     * per-channel bandwidths and path types from the graph search, NCCL's latency and
     * bandwidth-cap tables by GPU generation and CPU vendor. Without, the host
     * executor's measured constants. */
    int gpus;
    int sm;         /* smallest compute capability */
    int cpu_vendor; /* NCCL's code (1 Intel, 2 AMD): the multi-node LL row */
    int graph_nch;  /* search channels (NCCL's graph nChannels) */
    float bw_intra; /* GB/s per search channel inside a node */
    float bw_inter; /* and across nodes */
    int ll128;      /* LL128 may run (the executor implements it) */
} br_plan_comm_t;

/* Tuning constants in the layout of ncclTunerConstants_v5/v6 (1152 bytes of doubles); the
 * tuner plugin may edit them at init, before the model uses them. The model reads the
 * latencies of NCCL's algorithms from here (Braid's own algorithms keep theirs inside). */
typedef struct {
    double base_latencies[BR_NCCL_NUM_ALGOS][BR_NUM_PROTOS];  /* us */
    double hw_latencies[3][BR_NCCL_NUM_ALGOS][BR_NUM_PROTOS]; /* us per hop: NVLINK, PCI, NET */
    double ll_max_bws[4][3];
    double per_ch_max_ring_ll128_bws[4][3];
    double per_ch_max_tree_ll128_bws[4][3];
    double per_ch_max_tree_bws[4][3];
    double per_ch_max_nvls_tree_bws[4][3];
} br_tune_constants_t;

/* A tuner's per-collective hook, in tuner v6 semantics: it sees NCCL's 7 x 3 rows of the
 * cost table (float[BR_NCCL_NUM_ALGOS][BR_NUM_PROTOS], -1 = unavailable), may lower
 * entries (0 forces one) and set *nchannels. */
typedef ncclResult_t (*br_tune_hook_t)(void *ctx, int func, size_t bytes, float *table,
                                       int *nchannels);

typedef struct br_plan br_plan_t;

/*
 * The plan of a communicator. Reads NCCL_ALGO and NCCL_PROTO (NCCL's syntax: a list of
 * names, ^ to exclude, per function as "allreduce:tree;broadcast:^tree"); an unknown name
 * fails with ncclInvalidUsage. The graph must outlive the plan.
 */
ncclResult_t br_plan_create(const br_plan_comm_t *pc, const br_graph_t *graph, br_plan_t **plan_p);
void br_plan_free(br_plan_t *plan);

/* The constants the tuner plugin may edit at its init. */
br_tune_constants_t *br_plan_constants(br_plan_t *plan);
/* NCCL 2.30's constants for Ring and Tree (tuning.cc; plan_gpu.c), which the plan uses where
 * every rank has a GPU and braid-sim's NCCL model starts from. */
void br_plan_gpu_constants(br_tune_constants_t *k);
/* Install a tuner hook (after the tuner's init). */
void br_plan_set_tuner(br_plan_t *plan, br_tune_hook_t hook, void *ctx, const char *name);

/* One TUNING line per (collective, size range) the model decides alike, with the reason
 * (rank 0 only; a tuner decides per call and is logged per call instead). */
void br_plan_log_choices(br_plan_t *plan);

/*
 * Choose algorithm, protocol, channels and chunk size for collective `op` (its func,
 * count, type and root are set) and write them into it. A call that nothing allowed can
 * run (NCCL_ALGO/NCCL_PROTO exclude every algorithm implemented for it) fails with
 * ncclInvalidUsage naming the variables, as NCCL does.
 */
ncclResult_t br_plan_choose(br_plan_t *plan, br_op_t *op);

/* The same for a call on device buffers (the CUDA executor): Ring or Tree with LL, LL128
 * or Simple, on at most max_nch channels (plan_device.c). */
ncclResult_t br_plan_choose_device(br_plan_t *plan, br_op_t *op, int max_nch);

/*
 * What br_plan_choose would take for func at `bytes` (br_op_bytes of the call), without a
 * call: algorithm, protocol, channels and the model's time in microseconds for that choice
 * (with use_tuner, after the tuner's edits; a tuner's forced 0 is replaced by the model's
 * cost of what it forced). ncclInvalidUsage when nothing can run it, ncclInternalError when
 * the tuner fails. For braid-sim and ncclGroupSimulateEnd; does not log.
 */
ncclResult_t br_plan_predict(br_plan_t *plan, int func, size_t bytes, int use_tuner, int *algo_p,
                             int *proto_p, int *nchannels_p, float *us_p);

/* The slice [lo, hi) of `units` that channel c of nch owns (empty when lo == hi). */
void br_plan_channel_range(size_t units, int nch, int c, size_t *lo_p, size_t *hi_p);

/* How a collective's data is cut on one channel. Units are elements of the call's type
 * when the data is reduced, bytes when it is only moved. */
typedef struct {
    size_t esize;  /* bytes per unit */
    size_t units;  /* per-rank block (AllGather, ReduceScatter) or the whole buffer */
    size_t lo, hi; /* this channel's part of a block */
    size_t slice;  /* most units one slot carries */
} br_plan_layout_t;

/* The layout of a Ring or Tree op (RingOneShot included) on channel c. */
void br_plan_layout(const br_op_t *op, int nranks, int c, br_plan_layout_t *l);

/* Who `rank` is in channel c's ring or tree for op (a RingOneShot runs as a Ring
 * AllGather of the inputs). */
void br_plan_sched(const br_graph_t *graph, const br_op_t *op, int c, int rank, br_sched_t *s);

#endif /* BR_PLAN_H_ */
