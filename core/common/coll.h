/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The shared vocabulary of core/: what a collective operation is, in words every module
 * uses (functions, data types and their sizes, reductions, algorithm and protocol ids,
 * channel limits) and the operation itself as it travels from api through group and plan
 * to an executor. Nothing here knows about communicators, connections or threads, so any
 * module may include it without reaching up or sideways; the few functions are in
 * core/util/util_coll.c.
 */
#ifndef BR_COMMON_COLL_H_
#define BR_COMMON_COLL_H_

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

#define BR_MAX_CHANNELS 64   /* NCCL's MAXCHANNELS */
#define BR_MAX_TREE_ARITY 3  /* tree children of a rank: two across nodes, one in the node */

/* NCCL's ncclFunc_t values, then the patterns Braid runs as groups of sends and receives. */
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
    /* Braid's collectives with a count per rank (braid.h): one operation each, run by the
     * host executor as a pairwise exchange over the p2p connections (exec_work.c). */
    BR_FUNC_ALLGATHERV = 11,
    BR_FUNC_REDUCESCATTERV = 12,
    BR_FUNC_ALLTOALLV = 13,
    BR_NUM_FUNCS = 14
} br_func_t;

#define BR_NUM_COLL_FUNCS (BR_FUNC_ALLREDUCE + 1) /* the ones plan chooses algorithms for */

/* Broadcast, Reduce, AllGather, ReduceScatter, AllReduce (not send/recv patterns). */
static inline int br_func_is_collective(br_func_t func)
{
    return func <= BR_FUNC_ALLREDUCE;
}

/* Do the ranks' inputs combine (AllReduce, ReduceScatter, Reduce)? */
static inline int br_func_is_reduction(br_func_t func)
{
    return func == BR_FUNC_ALLREDUCE || func == BR_FUNC_REDUCESCATTER || func == BR_FUNC_REDUCE;
}

/* AllGatherV, ReduceScatterV or AlltoAllV? */
static inline int br_func_is_v(br_func_t func)
{
    return func >= BR_FUNC_ALLGATHERV && func <= BR_FUNC_ALLTOALLV;
}

/* "AllReduce", "Send", ... as NCCL names them in logs. */
const char *br_func_name(br_func_t func);

/* Bytes per element of a type (0 for an invalid type). */
size_t br_type_size(ncclDataType_t type);
/* "float32", "bfloat16", ... for messages. */
const char *br_type_name(ncclDataType_t type);
/* Is it one of the floating-point types? */
int br_type_is_float(ncclDataType_t type);

/*
 * Algorithms. 0..6 are NCCL's ids (the tuner plugin's cost table has these rows); the
 * others are Braid's own, numbered after them so that they never collide with an id a
 * tuner knows.
 */
#define BR_ALGO_TREE 0
#define BR_ALGO_RING 1
#define BR_ALGO_COLLNET_DIRECT 2
#define BR_ALGO_COLLNET_CHAIN 3
#define BR_ALGO_NVLS 4
#define BR_ALGO_NVLS_TREE 5
#define BR_ALGO_PAT 6
#define BR_NCCL_NUM_ALGOS 7
/* Node arena: every rank publishes its whole input once, every rank reads all it needs. */
#define BR_ALGO_ONESHOT 7
/* Node arena with inputs read in place from their owners' memory (single copy). */
#define BR_ALGO_DIRECT_READ 8
/* AllReduce: the inputs travel the ring as an AllGather, each rank reduces them itself. */
#define BR_ALGO_RING_ONESHOT 9
#define BR_NUM_ALGOS 10

/* NCCL's protocol ids. */
#define BR_PROTO_LL 0
#define BR_PROTO_LL128 1
#define BR_PROTO_SIMPLE 2
#define BR_NUM_PROTOS 3

/* "Ring", "Tree", "OneShot", ... and "LL", "LL128", "Simple" ("undef" out of range). */
const char *br_algo_name(int algo);
const char *br_proto_name(int proto);

/* The arithmetic of one reduction, resolved from (ncclRedOp_t, type, nranks). */
typedef enum {
    BR_RED_SUM,
    BR_RED_PROD,
    BR_RED_MAX,
    BR_RED_MIN,
    BR_RED_PREMULSUM, /* sum of (scalar * input): user PreMulSum ops and float ncclAvg */
    BR_RED_SUMPOSTDIV /* sum, then integer division by nranks: integer ncclAvg */
} br_red_kind_t;

typedef struct {
    br_red_kind_t kind;
    ncclDataType_t type;
    /* PREMULSUM scalar, already converted: as double (floating types) and as int64/uint64
     * bit pattern (integer types). */
    double scalar_f;
    uint64_t scalar_i;
    /* SUMPOSTDIV divisor. */
    uint64_t divisor;
    /* PREMULSUM with a scalar in device memory (ncclScalarDevice on a device call): read
     * from here when the kernel runs; NULL otherwise. */
    const void *scalar_dev;
} br_redop_t;

/* "sum", "prod", ... for messages. */
const char *br_red_kind_name(br_red_kind_t kind);
/* The arithmetic of a built-in op (ncclSum..ncclAvg) on nranks ranks. */
void br_redop_builtin(br_redop_t *op, ncclRedOp_t builtin, ncclDataType_t type, int nranks);
/* A PREMULSUM op whose scalar is one element of `type` at `scalar`. */
void br_redop_premulsum(br_redop_t *op, ncclDataType_t type, const void *scalar);

/* How two partial results combine: the op itself for sum, prod, max and min; a plain sum
 * for PREMULSUM (the inputs were scaled already) and SUMPOSTDIV (divided at the end). */
static inline br_redop_t br_redop_partial(const br_redop_t *op)
{
    br_redop_t p = *op;
    if (p.kind == BR_RED_PREMULSUM || p.kind == BR_RED_SUMPOSTDIV) {
        p.kind = BR_RED_SUM;
    }
    return p;
}

/*
 * The per-rank counts of a v-collective as this rank's part of it, in elements of the
 * call's type: for each peer p, what goes to p (scount[p] from sendbuff + sdispl[p]) and
 * what comes from p (rcount[p] to rdispl[p] of recvbuff; a ReduceScatterV receives its
 * own block from every rank into scratch and folds them in rank order). One allocation:
 * the four arrays follow the struct, so one free() releases it. Made by the api, owned by
 * the group layer from br_group_add_op on, which frees it when the call has ended.
 */
typedef struct {
    int nranks;
    size_t *scount, *sdispl, *rcount, *rdispl;
} br_vspec_t;

/* One operation as every rank sees it, from the api to an executor. */
typedef struct br_op {
    br_func_t func;
    const void *sendbuff;
    void *recvbuff;
    size_t count; /* NCCL's count argument (per rank for AllGather/ReduceScatter) */
    ncclDataType_t type;
    br_redop_t redop;
    int root;     /* Broadcast/Reduce */
    int peer;     /* Send/Recv */
    uint64_t seq; /* collective number on the comm, or message number to/from peer */
    /* A Gather, Scatter or AlltoAll runs as one group of sends and receives: each of them
     * carries that call and its collective number + 1 (0: a send or receive of its own),
     * so that connection setup can tell ranks in different calls apart. */
    br_func_t pattern;
    uint64_t pattern_seq;
    /* The sends, receives and AllGather that run an owner-fold reduction's phases
     * (group_fold.c) point to that call (NULL: none), so that they are described to the
     * peers as that call, whichever phase each rank is in. */
    const struct br_op *fold_of;
    /* What plan chose for a collective; the executor runs exactly this. */
    int algo, proto;
    int nchannels;
    size_t chunk_bytes; /* most payload bytes one FIFO slot carries (0 for the arena) */
    /* Profiler: the mask snapshot of the call's group and its CollApi/P2pApi event (the
     * parent of its Coll/P2p event; NULL when not profiled). Host side only. */
    int prof_mask;
    void *prof_parent;  /* the call's CollApi / P2pApi event */
    void *prof_group;   /* the GroupApi event it was called in */
    /* Its record in the communicator's operation log (core/exec/host/exec_oplog.c), 0: none. */
    uint64_t log_ticket;
    /* Which executor: 0 host (the buffers are host memory), 1 CUDA (device memory of the
     * communicator's device; the call is ordered on `stream`). */
    int on_device;
    void *stream; /* the user's cudaStream_t */
    /* The call's own configuration (ncclCollConfig_t, core/api/api_collcfg.c): algorithms
     * and protocols it may use (bits 1 << BR_ALGO_* / BR_PROTO_*; 0: any), whether a
     * selection that cannot run is an error (else the plan chooses as if none was given),
     * bounds on its channels (0: none), and the user's profiler tag (0: none). */
    uint32_t call_algos, call_protos;
    int call_force;
    int call_min_ch, call_max_ch;
    uint64_t user_tag;
    /* A v-collective's counts (br_func_is_v), NULL for every other operation. */
    br_vspec_t *v;
    /* How a reduction combines the ranks' inputs (BRAID_DETERMINISTIC, BRAID_ACCUMULATE
     * and the per-call options BRAID_OPT_DETERMINISTIC / _ACCUMULATE_FP32): det asks for
     * the same bits whatever the algorithm and timing, acc32 for fp16, bf16 and fp8 sums
     * kept in fp32. br_op_owner_fold says whether the call takes the owner-fold path. */
    int det, acc32;
} br_op_t;

/* Does the call's own configuration let it run (algo, proto)? */
static inline int br_op_allows(const br_op_t *op, int algo, int proto)
{
    return (op->call_algos == 0 || (op->call_algos >> algo & 1u)) &&
           (op->call_protos == 0 || (op->call_protos >> proto & 1u));
}

/* Is the type a float narrower than 32 bits (fp16, bf16, fp8 e4m3, fp8 e5m2)? */
static inline int br_type_is_narrow_float(ncclDataType_t type)
{
    return type == ncclFloat16 || type == ncclBfloat16 || type == ncclFloat8e4m3 ||
           type == ncclFloat8e5m2;
}

/*
 * Does the call run as an owner fold (core/group/group_fold.c): every rank folds its slice
 * of all inputs in rank order, so the result has the same bits whatever the algorithm,
 * protocol, channels, chunking and timing? Reductions of floating-point types on more than
 * one rank that ask for determinism, or for fp32 sums of a narrow type. Integer reductions
 * need neither: they wrap or select, so every order gives the same bits. br_op_wants_fold
 * is the call's side of it alone.
 */
static inline int br_op_wants_fold(const br_op_t *op)
{
    return br_func_is_reduction(op->func) && br_type_is_float(op->type) &&
           (op->det || (op->acc32 && br_type_is_narrow_float(op->type)));
}

static inline int br_op_owner_fold(const br_op_t *op, int nranks)
{
    return nranks > 1 && op->count > 0 && br_op_wants_fold(op);
}

/* Bytes of the call as NCCL sizes it for tuning: count x type size (per rank). */
static inline size_t br_op_bytes(const br_op_t *op)
{
    return op->count * br_type_size(op->type);
}

#endif /* BR_COMMON_COLL_H_ */
