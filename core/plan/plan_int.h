/* SPDX-License-Identifier: Apache-2.0 */
/* plan module-private: the plan of a communicator and the cost model's pieces. */
#ifndef BR_PLAN_INT_H_
#define BR_PLAN_INT_H_

#include "plan.h"
#include "util.h"

/* Latencies (us) of Braid's own algorithms, which have no row in NCCL's constants. */
typedef struct {
    double arena_base;    /* OneShot: publish, flag, fold */
    double arena_peer;    /* OneShot: per peer whose input is read */
    double direct_base;   /* DirectRead: publish an address, wait for readers */
    double direct_peer;   /* DirectRead: per process_vm_readv of a peer */
    double intra_gbps;    /* one core's copy rate through a FIFO in the host (GB/s) */
    double inproc_gbps;   /* the same between threads of one process */
    double arena_gbps;    /* reading peers' inputs out of the arena */
    double direct_gbps;   /* process_vm_readv */
    double fold_gbps;     /* reducing inputs that are in cache (RingOneShot's end) */
    double ll_efficiency; /* LL moves this fraction of Simple's bytes per second */
    double tree_hop;      /* a tree hop's latency relative to a ring hop's */
} br_plan_host_t;

/* What one decision was. */
typedef struct {
    int algo, proto, nchannels;
    size_t chunk_bytes;
    float us;   /* predicted (or the tuner's) cost of the winner */
    int runner; /* algo * BR_NUM_PROTOS + proto of the runner-up, -1 none */
    float runner_us;
    int by_tuner; /* the tuner changed the table or the channels */
} br_plan_choice_t;

struct br_plan {
    br_plan_comm_t pc;
    const br_graph_t *graph;
    br_tune_constants_t k;
    br_plan_host_t h;
    /* enabled[func][algo][proto] after NCCL_ALGO / NCCL_PROTO; proto_only after
     * NCCL_PROTO alone (the fallback of a call collnet cannot reduce). */
    char enabled[BR_NUM_COLL_FUNCS][BR_NUM_ALGOS][BR_NUM_PROTOS];
    char proto_only[BR_NUM_COLL_FUNCS][BR_NUM_ALGOS][BR_NUM_PROTOS];
    int use_proto_only; /* the model reads proto_only instead of enabled */
    int op_collnet;     /* the call being decided can be reduced by the collnet */
    const br_op_t *op_cfg; /* the call being decided when it carries its own selection */
    unsigned char collnet_logged[ncclNumTypes]; /* fallbacks already logged, bit per kind */
    int tree_intra, tree_inter; /* links of each kind on the deepest root-to-leaf path */
    int tree_fan;               /* most children of a rank */
    br_tune_hook_t hook;
    void *hook_ctx;
    char hook_name[64];
    /* Without a tuner the answer depends on (func, bytes) only: the last one per function
     * is kept, so a loop of equal calls computes it once. */
    size_t last_bytes[BR_NUM_COLL_FUNCS];
    br_plan_choice_t last[BR_NUM_COLL_FUNCS];
    char last_valid[BR_NUM_COLL_FUNCS];
    char last_collnet[BR_NUM_COLL_FUNCS]; /* op_collnet of that decision */
    /* Tuner decisions already logged, per function and power-of-two size class. */
    uint64_t tuner_logged[BR_NUM_COLL_FUNCS];
};

/* Is (algo, proto) implemented for func at `bytes` on this communicator? A reason why
 * not goes to why (for logs) when it is not NULL. */
int br_plan_available(const br_plan_t *p, int func, int algo, int proto, size_t bytes,
                      const char **why);

/* The model's cost table (us, -1 unavailable or disabled) for func at bytes with nch
 * channels: float[BR_NUM_ALGOS][BR_NUM_PROTOS]. */
void br_plan_model(const br_plan_t *p, int func, size_t bytes, int nch, float *table);

/* Channels a collective of `bytes` per rank uses: small ones stay on one channel, where
 * splitting would only add per-step overhead. */
int br_plan_nchannels(const br_plan_t *p, size_t bytes);

/* NCCL's model for Ring and Tree where every rank has a GPU (plan_gpu.c; its constants:
 * br_plan_gpu_constants, plan.h); -1 when the protocol has no bandwidth there. */
double br_plan_gpu_us(const br_plan_t *p, int func, int algo, int proto, size_t bytes);

/* Payload bytes one slot carries for (algo, proto) at this size and channel count. */
size_t br_plan_chunk(const br_plan_t *p, int func, int algo, int proto, size_t bytes, int nch);

#endif /* BR_PLAN_INT_H_ */
