/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Operation entry points: argument checks, then an op for the group layer. AlltoAll,
 * Gather and Scatter are groups of sends and receives, as in NCCL. Also the user
 * reduction ops and the memory/registration calls.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api.h"
#include "api_route.h"
#include "util.h"

/* Everything a call needs checked, in one place. */
typedef struct {
    const char *fn;
    br_func_t func;
    const void *sendbuff;
    void *recvbuff;
    size_t count;
    ncclDataType_t type;
    ncclRedOp_t op;
    int root;
    int peer;
    int has_op, has_root, has_peer; /* which of op, root and peer the call takes */
    size_t send_mult;    /* elements of sendbuff per count (AllGather: 1, ReduceScatter: n) */
    size_t recv_mult;
    int send_needed;     /* does this rank read sendbuff / write recvbuff */
    int recv_needed;
    cudaStream_t stream;
    const ncclCollConfig_t *cfg; /* the nccl*Config variants' config, or NULL */
} call_t;

#define ARG_FAIL(comm, c, ...)                                                                     \
    do {                                                                                           \
        char what_[640];                                                                           \
        snprintf(what_, sizeof(what_), __VA_ARGS__);                                               \
        BR_WARN(NCCL_COLL, "rank %d (host %s): %s: %s", (comm)->rank, br_host_name(), (c)->fn,    \
                what_);                                                                            \
        return ncclInvalidArgument;                                                                \
    } while (0)

static ncclResult_t resolve_op(ncclComm_t comm, const call_t *c, br_redop_t *out)
{
    int op = (int)c->op;
    if (op >= 0 && op < (int)ncclNumOps) {
        br_redop_builtin(out, c->op, c->type, comm->nranks);
        return ncclSuccess;
    }
    int idx = op - (int)ncclNumOps;
    if (idx < 0 || idx >= BR_MAX_USER_OPS) {
        ARG_FAIL(comm, c, "invalid reduction op %d", op);
    }
    pthread_mutex_lock(&comm->lock);
    br_user_op_t u = comm->user_ops[idx];
    pthread_mutex_unlock(&comm->lock);
    if (!u.in_use) {
        ARG_FAIL(comm, c, "reduction op %d was not created on this communicator (or was destroyed)",
                 op);
    }
    if (u.type != c->type) {
        ARG_FAIL(comm, c, "reduction op %d was created for %s but the call uses %s", op,
                 br_type_name(u.type), br_type_name(c->type));
    }
    if (u.residence == ncclScalarDevice) {
        int dev;
        if (br_cuda_ptr_kind(u.scalar_ptr, &dev) != BR_MEM_HOST) {
            /* Read by the kernel when it runs, as NCCL does. */
            unsigned char zero[8] = {0};
            br_redop_premulsum(out, u.type, zero);
            out->scalar_dev = u.scalar_ptr;
            return ncclSuccess;
        }
    }
    br_redop_premulsum(out, u.type,
                       u.residence == ncclScalarHostImmediate ? (const void *)u.scalar
                                                              : u.scalar_ptr);
    return ncclSuccess;
}

/* Which executor runs the call: the memory of its buffers decides (api_route.h). */
static ncclResult_t route(ncclComm_t comm, const call_t *c, br_op_t *op)
{
    br_route_buf_t b[2];
    char msg[512];
    int n = 0;

    op->on_device = 0;
    op->stream = (void *)c->stream;
    if (!br_cuda_in_process()) {
        return ncclSuccess; /* no CUDA in the process: no device memory either */
    }
    if (c->send_needed && c->sendbuff != NULL) {
        b[n].name = "sendbuff";
        b[n].ptr = c->sendbuff;
        b[n].kind = br_cuda_ptr_kind(c->sendbuff, &b[n].device);
        n++;
    }
    if (c->recv_needed && c->recvbuff != NULL) {
        b[n].name = "recvbuff";
        b[n].ptr = c->recvbuff;
        if (n > 0 && c->recvbuff == c->sendbuff) {
            b[n].kind = b[0].kind;
            b[n].device = b[0].device;
        } else {
            b[n].kind = br_cuda_ptr_kind(c->recvbuff, &b[n].device);
        }
        n++;
    }
    int r = br_route_decide(b, n, comm->ec->cuda_dev, comm->cuda_why, msg, sizeof(msg));
    if (r == BR_ROUTE_REFUSED) {
        ARG_FAIL(comm, c, "%s", msg);
    }
    op->on_device = r == BR_ROUTE_DEVICE;
    if (op->on_device && comm->ec->stage == NULL && br_op_owner_fold(op, comm->nranks) &&
        BR_PARAM_INT(CUDA_DIRECT) == 0) {
        /* Ranks that are threads of one process fold on the direct kernel only. */
        BR_WARN(NCCL_COLL,
                "rank %d (host %s): %s: deterministic reductions and fp32 accumulation "
                "(BRAID_DETERMINISTIC, BRAID_ACCUMULATE, BRAID_OPT_*) on device buffers of "
                "ranks that are threads of one process run on the direct kernel, which "
                "BRAID_CUDA_DIRECT=0 turns off",
                comm->rank, br_host_name(), c->fn);
        return ncclInvalidUsage;
    }
    if (!op->on_device && op->redop.scalar_dev != NULL) {
        ARG_FAIL(comm, c,
                 "the PreMulSum scalar %p of op %d is device memory, but the call's buffers "
                 "are host memory",
                 op->redop.scalar_dev, (int)c->op);
    }
    return ncclSuccess;
}

/* How a reduction combines inputs by default: BRAID_DETERMINISTIC and BRAID_ACCUMULATE
 * (the call's config may then change either). A value BRAID_ACCUMULATE does not know fails
 * the call rather than silently rounding every step. */
static ncclResult_t reduce_mode(ncclComm_t comm, const call_t *c, br_op_t *op)
{
    const char *acc = BR_PARAM_STR(ACCUMULATE);

    op->det = BR_PARAM_INT(DETERMINISTIC) != 0;
    op->acc32 = acc != NULL && strcasecmp(acc, "fp32") == 0;
    if (acc != NULL && !op->acc32 && strcasecmp(acc, "type") != 0) {
        BR_WARN(NCCL_COLL, "rank %d (host %s): %s: BRAID_ACCUMULATE is '%s'; it takes fp32 or type",
                comm->rank, br_host_name(), c->fn, acc);
        return ncclInvalidUsage;
    }
    return ncclSuccess;
}

static ncclResult_t check_call(ncclComm_t comm, const call_t *c, br_op_t *op)
{
    size_t tsize;

    /* br_api_enter() without its own liveness lookup: one is enough per call. */
    br_log_clear_last_error();
    BR_CHECK(br_api_check_comm(comm, c->fn));
    br_log_set_rank(comm->rank);
    /* Relaxed: the program orders its own ncclCommSuspend / Resume and its calls. */
    if (atomic_load_explicit(&comm->suspended, memory_order_relaxed)) {
        BR_WARN(NCCL_COLL,
                "rank %d (host %s): %s: the communicator is suspended "
                "(ncclCommSuspend); call ncclCommResume first",
                comm->rank, br_host_name(), c->fn);
        return ncclInvalidUsage;
    }
    if ((int)c->type < 0 || (int)c->type >= (int)ncclNumTypes) {
        ARG_FAIL(comm, c, "invalid datatype %d", (int)c->type);
    }
    tsize = br_type_size(c->type);
    if (c->has_root && (c->root < 0 || c->root >= comm->nranks)) {
        ARG_FAIL(comm, c, "invalid root %d (nranks %d)", c->root, comm->nranks);
    }
    if (c->has_peer && (c->peer < 0 || c->peer >= comm->nranks)) {
        ARG_FAIL(comm, c, "invalid peer %d (nranks %d)", c->peer, comm->nranks);
    }
    size_t mult = c->send_mult > c->recv_mult ? c->send_mult : c->recv_mult;
    if (c->count > SIZE_MAX / tsize / (mult ? mult : 1)) {
        ARG_FAIL(comm, c, "count %zu of %s overflows the address space", c->count,
                 br_type_name(c->type));
    }
    if (c->count > 0 && c->send_needed && c->sendbuff == NULL) {
        ARG_FAIL(comm, c, "sendbuff is NULL (count %zu)", c->count);
    }
    if (c->count > 0 && c->recv_needed && c->recvbuff == NULL) {
        ARG_FAIL(comm, c, "recvbuff is NULL (count %zu)", c->count);
    }
    memset(op, 0, sizeof(*op));
    if (c->has_op) {
        BR_CHECK(resolve_op(comm, c, &op->redop));
    } else {
        op->redop.type = c->type;
    }
    op->func = c->func;
    op->sendbuff = c->sendbuff;
    op->recvbuff = c->recvbuff;
    op->count = c->count;
    op->type = c->type;
    op->root = c->has_root ? c->root : 0;
    op->peer = c->has_peer ? c->peer : -1;
    if (br_func_is_reduction(c->func) || c->func == BR_FUNC_REDUCESCATTERV) {
        BR_CHECK(reduce_mode(comm, c, op)); /* ReduceScatterV: BRAID_ACCUMULATE applies */
    }
    int has_algos = c->func != BR_FUNC_ALLTOALL && c->func != BR_FUNC_GATHER &&
                    c->func != BR_FUNC_SCATTER && c->func != BR_FUNC_SEND &&
                    c->func != BR_FUNC_RECV && !br_func_is_v(c->func);
    BR_CHECK(br_api_collcfg_apply(comm, c->fn, has_algos, c->cfg, op));
    return route(comm, c, op);
}

static ncclResult_t submit(ncclComm_t comm, const call_t *c)
{
    br_op_t op;
    ncclResult_t res = check_call(comm, c, &op);
    if (res == ncclSuccess) {
        res = br_api_hold_comm(comm, c->fn);
        if (res == ncclSuccess) {
            res = br_group_add_op(comm, &op);
            br_comm_unhold(comm);
        }
    }
    br_group_note_error(res);
    return res;
}

static call_t call_init(const char *fn, br_func_t func, const void *sb, void *rb, size_t count,
                        ncclDataType_t type);

ncclResult_t br_api_v_check(ncclComm_t comm, const char *fn, br_func_t func, const void *sendbuff,
                            void *recvbuff, ncclDataType_t type, const ncclRedOp_t *redop,
                            cudaStream_t stream, br_op_t *op)
{
    call_t c = call_init(fn, func, sendbuff, recvbuff, 0, type);
    c.stream = stream;
    c.has_op = redop != NULL;
    c.op = redop != NULL ? *redop : ncclSum;
    return check_call(comm, &c, op);
}

static call_t call_init(const char *fn, br_func_t func, const void *sb, void *rb, size_t count,
                        ncclDataType_t type)
{
    call_t c;
    memset(&c, 0, sizeof(c));
    c.fn = fn;
    c.func = func;
    c.sendbuff = sb;
    c.recvbuff = rb;
    c.count = count;
    c.type = type;
    c.op = ncclSum;
    c.root = 0;
    c.peer = -1;
    c.send_mult = c.recv_mult = 1;
    c.send_needed = c.recv_needed = 1;
    return c;
}

static ncclResult_t coll_allreduce(const char *fn, const void *sendbuff, void *recvbuff,
                                   size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                                   ncclComm_t comm, cudaStream_t stream,
                                   const ncclCollConfig_t *cfg)
{
    call_t c = call_init(fn, BR_FUNC_ALLREDUCE, sendbuff, recvbuff, count, datatype);
    c.stream = stream;
    c.cfg = cfg;
    c.op = op;
    c.has_op = 1;
    return submit(comm, &c);
}

BR_API(ncclResult_t, ncclAllReduce,
       (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
        ncclComm_t comm, cudaStream_t stream))
{
    return coll_allreduce("ncclAllReduce", sendbuff, recvbuff, count, datatype, op, comm, stream,
                          NULL);
}

BR_API(ncclResult_t, ncclAllReduceConfig,
       (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
        ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t *config))
{
    return coll_allreduce("ncclAllReduceConfig", sendbuff, recvbuff, count, datatype, op, comm,
                          stream, config);
}

static ncclResult_t coll_broadcast(const char *fn, const void *sendbuff, void *recvbuff,
                                   size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                                   cudaStream_t stream, const ncclCollConfig_t *cfg)
{
    call_t c = call_init(fn, BR_FUNC_BROADCAST, sendbuff, recvbuff, count, datatype);
    c.stream = stream;
    c.cfg = cfg;
    c.root = root;
    c.has_root = 1;
    /* Only the root reads sendbuff. */
    c.send_needed = comm != NULL && br_comm_is_live(comm) && comm->rank == root;
    return submit(comm, &c);
}

BR_API(ncclResult_t, ncclBroadcast,
       (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
        ncclComm_t comm, cudaStream_t stream))
{
    return coll_broadcast("ncclBroadcast", sendbuff, recvbuff, count, datatype, root, comm, stream,
                          NULL);
}

BR_API(ncclResult_t, ncclBroadcastConfig,
       (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
        ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t *config))
{
    return coll_broadcast("ncclBroadcastConfig", sendbuff, recvbuff, count, datatype, root, comm,
                          stream, config);
}

BR_API(ncclResult_t, ncclBcast,
       (void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
        cudaStream_t stream))
{
    return pncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

static ncclResult_t coll_reduce(const char *fn, const void *sendbuff, void *recvbuff, size_t count,
                                ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                                cudaStream_t stream, const ncclCollConfig_t *cfg)
{
    call_t c = call_init(fn, BR_FUNC_REDUCE, sendbuff, recvbuff, count, datatype);
    c.stream = stream;
    c.cfg = cfg;
    c.op = op;
    c.has_op = 1;
    c.root = root;
    c.has_root = 1;
    /* Only the root writes recvbuff. */
    c.recv_needed = comm != NULL && br_comm_is_live(comm) && comm->rank == root;
    return submit(comm, &c);
}

BR_API(ncclResult_t, ncclReduce,
       (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
        int root, ncclComm_t comm, cudaStream_t stream))
{
    return coll_reduce("ncclReduce", sendbuff, recvbuff, count, datatype, op, root, comm, stream,
                       NULL);
}

BR_API(ncclResult_t, ncclReduceConfig,
       (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
        int root, ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t *config))
{
    return coll_reduce("ncclReduceConfig", sendbuff, recvbuff, count, datatype, op, root, comm,
                       stream, config);
}

static ncclResult_t coll_allgather(const char *fn, const void *sendbuff, void *recvbuff,
                                   size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
                                   cudaStream_t stream, const ncclCollConfig_t *cfg)
{
    call_t c = call_init(fn, BR_FUNC_ALLGATHER, sendbuff, recvbuff, sendcount, datatype);
    c.stream = stream;
    c.cfg = cfg;
    c.recv_mult = comm != NULL && br_comm_is_live(comm) ? (size_t)comm->nranks : 1;
    return submit(comm, &c);
}

BR_API(ncclResult_t, ncclAllGather,
       (const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
        ncclComm_t comm, cudaStream_t stream))
{
    return coll_allgather("ncclAllGather", sendbuff, recvbuff, sendcount, datatype, comm, stream,
                          NULL);
}

BR_API(ncclResult_t, ncclAllGatherConfig,
       (const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
        ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t *config))
{
    return coll_allgather("ncclAllGatherConfig", sendbuff, recvbuff, sendcount, datatype, comm,
                          stream, config);
}

static ncclResult_t coll_reducescatter(const char *fn, const void *sendbuff, void *recvbuff,
                                       size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,
                                       ncclComm_t comm, cudaStream_t stream,
                                       const ncclCollConfig_t *cfg)
{
    call_t c = call_init(fn, BR_FUNC_REDUCESCATTER, sendbuff, recvbuff, recvcount, datatype);
    c.stream = stream;
    c.cfg = cfg;
    c.op = op;
    c.has_op = 1;
    c.send_mult = comm != NULL && br_comm_is_live(comm) ? (size_t)comm->nranks : 1;
    return submit(comm, &c);
}

BR_API(ncclResult_t, ncclReduceScatter,
       (const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
        ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream))
{
    return coll_reducescatter("ncclReduceScatter", sendbuff, recvbuff, recvcount, datatype, op,
                              comm, stream, NULL);
}

BR_API(ncclResult_t, ncclReduceScatterConfig,
       (const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
        ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t *config))
{
    return coll_reducescatter("ncclReduceScatterConfig", sendbuff, recvbuff, recvcount, datatype,
                              op, comm, stream, config);
}

BR_API(ncclResult_t, ncclSend,
       (const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
        cudaStream_t stream))
{
    call_t c = call_init("ncclSend", BR_FUNC_SEND, sendbuff, NULL, count, datatype);
    c.stream = stream;
    c.peer = peer;
    c.has_peer = 1;
    c.recv_needed = 0;
    return submit(comm, &c);
}

BR_API(ncclResult_t, ncclRecv,
       (void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
        cudaStream_t stream))
{
    call_t c = call_init("ncclRecv", BR_FUNC_RECV, NULL, recvbuff, count, datatype);
    c.stream = stream;
    c.peer = peer;
    c.has_peer = 1;
    c.send_needed = 0;
    return submit(comm, &c);
}

/* AlltoAll, Gather and Scatter: checked as a whole, then run as one group of sends and
 * receives (block p of the send buffer goes to rank p). */
static ncclResult_t p2p_pattern(ncclComm_t comm, const call_t *c)
{
    br_op_t op;
    ncclResult_t res = ncclSuccess, end;
    size_t block;

    res = check_call(comm, c, &op);
    res = res == ncclSuccess ? br_api_hold_comm(comm, c->fn) : res;
    if (res != ncclSuccess) {
        br_group_note_error(res);
        return res;
    }
    block = c->count * br_type_size(c->type);
    op.pattern = c->func;
    op.pattern_seq = br_group_pattern_number(comm) + 1;
    br_group_start();
    for (int p = 0; p < comm->nranks && res == ncclSuccess; p++) {
        br_op_t s = op, r = op;
        int sends = c->func == BR_FUNC_ALLTOALL || (c->func == BR_FUNC_SCATTER && comm->rank == c->root) ||
                    (c->func == BR_FUNC_GATHER && p == c->root);
        int recvs = c->func == BR_FUNC_ALLTOALL || (c->func == BR_FUNC_GATHER && comm->rank == c->root) ||
                    (c->func == BR_FUNC_SCATTER && p == c->root);
        if (sends) {
            s.func = BR_FUNC_SEND;
            s.peer = p;
            s.sendbuff = c->func == BR_FUNC_GATHER ? c->sendbuff
                                                   : (const char *)c->sendbuff + (size_t)p * block;
            res = br_group_add_op(comm, &s);
        }
        if (recvs && res == ncclSuccess) {
            r.func = BR_FUNC_RECV;
            r.peer = p;
            r.recvbuff = c->func == BR_FUNC_SCATTER ? c->recvbuff
                                                    : (char *)c->recvbuff + (size_t)p * block;
            res = br_group_add_op(comm, &r);
        }
    }
    end = br_group_end();
    br_comm_unhold(comm);
    return res != ncclSuccess ? res : end;
}

static ncclResult_t coll_alltoall(const char *fn, const void *sendbuff, void *recvbuff,
                                  size_t count, ncclDataType_t datatype, ncclComm_t comm,
                                  cudaStream_t stream, const ncclCollConfig_t *cfg)
{
    call_t c = call_init(fn, BR_FUNC_ALLTOALL, sendbuff, recvbuff, count, datatype);
    c.stream = stream;
    c.cfg = cfg;
    c.send_mult = c.recv_mult = comm != NULL && br_comm_is_live(comm) ? (size_t)comm->nranks : 1;
    return p2p_pattern(comm, &c);
}

BR_API(ncclResult_t, ncclAlltoAll,
       (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
        ncclComm_t comm, cudaStream_t stream))
{
    return coll_alltoall("ncclAlltoAll", sendbuff, recvbuff, count, datatype, comm, stream, NULL);
}

BR_API(ncclResult_t, ncclAlltoAllConfig,
       (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
        ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t *config))
{
    return coll_alltoall("ncclAlltoAllConfig", sendbuff, recvbuff, count, datatype, comm, stream,
                         config);
}

static ncclResult_t coll_gather(const char *fn, const void *sendbuff, void *recvbuff, size_t count,
                                ncclDataType_t datatype, int root, ncclComm_t comm,
                                cudaStream_t stream, const ncclCollConfig_t *cfg)
{
    call_t c = call_init(fn, BR_FUNC_GATHER, sendbuff, recvbuff, count, datatype);
    c.stream = stream;
    c.cfg = cfg;
    c.root = root;
    c.has_root = 1;
    c.recv_mult = comm != NULL && br_comm_is_live(comm) ? (size_t)comm->nranks : 1;
    c.recv_needed = comm != NULL && br_comm_is_live(comm) && comm->rank == root;
    return p2p_pattern(comm, &c);
}

BR_API(ncclResult_t, ncclGather,
       (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
        ncclComm_t comm, cudaStream_t stream))
{
    return coll_gather("ncclGather", sendbuff, recvbuff, count, datatype, root, comm, stream, NULL);
}

BR_API(ncclResult_t, ncclGatherConfig,
       (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
        ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t *config))
{
    return coll_gather("ncclGatherConfig", sendbuff, recvbuff, count, datatype, root, comm, stream,
                       config);
}

static ncclResult_t coll_scatter(const char *fn, const void *sendbuff, void *recvbuff, size_t count,
                                 ncclDataType_t datatype, int root, ncclComm_t comm,
                                 cudaStream_t stream, const ncclCollConfig_t *cfg)
{
    call_t c = call_init(fn, BR_FUNC_SCATTER, sendbuff, recvbuff, count, datatype);
    c.stream = stream;
    c.cfg = cfg;
    c.root = root;
    c.has_root = 1;
    c.send_mult = comm != NULL && br_comm_is_live(comm) ? (size_t)comm->nranks : 1;
    c.send_needed = comm != NULL && br_comm_is_live(comm) && comm->rank == root;
    return p2p_pattern(comm, &c);
}

BR_API(ncclResult_t, ncclScatter,
       (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
        ncclComm_t comm, cudaStream_t stream))
{
    return coll_scatter("ncclScatter", sendbuff, recvbuff, count, datatype, root, comm, stream,
                        NULL);
}

BR_API(ncclResult_t, ncclScatterConfig,
       (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
        ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t *config))
{
    return coll_scatter("ncclScatterConfig", sendbuff, recvbuff, count, datatype, root, comm,
                        stream, config);
}

BR_API(ncclResult_t, ncclRedOpCreatePreMulSum,
       (ncclRedOp_t *op, void *scalar, ncclDataType_t datatype, ncclScalarResidence_t residence,
        ncclComm_t comm))
{
    const char *fn = "ncclRedOpCreatePreMulSum";
    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, fn));
    if (op == NULL || scalar == NULL) {
        BR_WARN(NCCL_COLL, "%s: rank %d: %s is NULL", fn, comm->rank, op == NULL ? "op" : "scalar");
        return ncclInvalidArgument;
    }
    if ((int)datatype < 0 || (int)datatype >= (int)ncclNumTypes) {
        BR_WARN(NCCL_COLL, "%s: rank %d: invalid datatype %d", fn, comm->rank, (int)datatype);
        return ncclInvalidArgument;
    }
    if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate) {
        BR_WARN(NCCL_COLL, "%s: rank %d: invalid scalar residence %d", fn, comm->rank,
                (int)residence);
        return ncclInvalidArgument;
    }
    pthread_mutex_lock(&comm->lock);
    for (int i = 0; i < BR_MAX_USER_OPS; i++) {
        br_user_op_t *u = &comm->user_ops[i];
        if (!u->in_use) {
            u->in_use = 1;
            u->type = datatype;
            u->residence = residence;
            u->scalar_ptr = scalar;
            if (residence == ncclScalarHostImmediate) {
                memcpy(u->scalar, scalar, br_type_size(datatype));
            }
            *op = (ncclRedOp_t)((int)ncclNumOps + i);
            pthread_mutex_unlock(&comm->lock);
            return ncclSuccess;
        }
    }
    pthread_mutex_unlock(&comm->lock);
    BR_WARN(NCCL_COLL, "%s: rank %d: all %d user reduction ops are in use", fn, comm->rank,
            BR_MAX_USER_OPS);
    return ncclInvalidUsage;
}

BR_API(ncclResult_t, ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t comm))
{
    const char *fn = "ncclRedOpDestroy";
    int idx = (int)op - (int)ncclNumOps;
    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, fn));
    if ((int)op >= 0 && (int)op < (int)ncclNumOps) {
        BR_WARN(NCCL_COLL, "%s: rank %d: op %d is a built-in op and cannot be destroyed", fn,
                comm->rank, (int)op);
        return ncclInvalidArgument;
    }
    pthread_mutex_lock(&comm->lock);
    if (idx < 0 || idx >= BR_MAX_USER_OPS || !comm->user_ops[idx].in_use) {
        pthread_mutex_unlock(&comm->lock);
        BR_WARN(NCCL_COLL, "%s: rank %d: op %d was not created on this communicator", fn,
                comm->rank, (int)op);
        return ncclInvalidArgument;
    }
    comm->user_ops[idx].in_use = 0;
    pthread_mutex_unlock(&comm->lock);
    return ncclSuccess;
}

/* Device memory of the calling thread's current device (its primary context made current
 * when the thread has none, as the CUDA runtime does), or 0 with *why set. */
static ncclResult_t mem_alloc_device(void **ptr, size_t size, int *done)
{
    const br_cuda_t *cu;
    br_cu_context_t ctx = NULL;
    br_cu_ptr_t p = 0;
    int dev;

    *done = 0;
    if (BR_PARAM_INT(CUDA) == 0 || (dev = br_cuda_current_device()) < 0 ||
        (cu = br_cuda(NULL)) == NULL) {
        return ncclSuccess; /* the process does not use CUDA: host memory */
    }
    if (cu->CtxGetCurrent(&ctx) != BR_CU_SUCCESS || ctx == NULL) {
        br_cu_device_t d;
        if (cu->DeviceGet(&d, dev) != BR_CU_SUCCESS ||
            cu->DevicePrimaryCtxRetain(&ctx, d) != BR_CU_SUCCESS ||
            cu->CtxSetCurrent(ctx) != BR_CU_SUCCESS) {
            BR_WARN(NCCL_ALLOC, "ncclMemAlloc: cannot make device %d current", dev);
            return ncclUnhandledCudaError;
        }
    }
    br_cu_result_t e = cu->MemAlloc(&p, size ? size : 1);
    if (e != BR_CU_SUCCESS) {
        BR_WARN(NCCL_ALLOC, "ncclMemAlloc: cannot allocate %zu bytes on device %d: %s", size, dev,
                br_cuda_error_string(e));
        return ncclUnhandledCudaError;
    }
    *ptr = (void *)(uintptr_t)p;
    *done = 1;
    BR_INFO(NCCL_ALLOC, "ncclMemAlloc: %zu bytes of device %d at %p", size, dev, *ptr);
    return ncclSuccess;
}

BR_API(ncclResult_t, ncclMemAlloc, (void **ptr, size_t size))
{
    int done;
    br_api_enter(NULL);
    if (ptr == NULL) {
        BR_WARN(NCCL_ALLOC, "ncclMemAlloc: ptr is NULL");
        return ncclInvalidArgument;
    }
    /* In a process that uses CUDA, device memory of the current device, as NCCL; in one
     * that does not, page-aligned host memory, which the host executor works on. */
    BR_CHECK(mem_alloc_device(ptr, size, &done));
    if (done) {
        return ncclSuccess;
    }
    /* Shareable (a memfd), so that ranks of other processes on this host map it once and
     * copy from it directly instead of through process_vm_readv on every call. */
    return br_hostmem_alloc(size, ptr);
}

BR_API(ncclResult_t, ncclMemFree, (void *ptr))
{
    int dev;
    br_api_enter(NULL);
    if (br_cuda_ptr_kind(ptr, &dev) == BR_MEM_DEVICE) {
        br_cu_result_t e = br_cuda(NULL)->MemFree((br_cu_ptr_t)(uintptr_t)ptr);
        if (e != BR_CU_SUCCESS) {
            BR_WARN(NCCL_ALLOC, "ncclMemFree: %p (device %d): %s", ptr, dev,
                    br_cuda_error_string(e));
            return ncclUnhandledCudaError;
        }
        return ncclSuccess;
    }
    if (ptr != NULL && !br_hostmem_free(ptr)) {
        BR_WARN(NCCL_ALLOC, "ncclMemFree: %p was not returned by ncclMemAlloc", ptr);
        return ncclInvalidArgument;
    }
    return ncclSuccess;
}

/* Registration is a hint for zero-copy paths. The CUDA executor needs none (its kernels
 * address every local rank's buffers). On the host, what makes a buffer readable in place
 * by other processes is where it lives, not the call: memory from ncclMemAlloc is a memfd
 * that peers map on first use and keep mapped (transport_arena.c), whether registered or
 * not, and other memory is read with process_vm_readv. So a handle only records the range
 * for ncclCommDeregister, and registering host memory says at INFO which of the two it
 * gets. */
typedef struct {
    uint64_t magic;
    void *buff;
    size_t size;
    uint64_t net_id; /* its entry in the comm's registered buffers (host memory), or 0 */
} reg_handle_t;

#define REG_MAGIC 0x62726169645f7267ULL

BR_API(ncclResult_t, ncclCommRegister, (const ncclComm_t comm, void *buff, size_t size, void **handle))
{
    reg_handle_t *h = NULL;
    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, "ncclCommRegister"));
    if (handle == NULL || (buff == NULL && size > 0)) {
        BR_WARN(NCCL_REG, "ncclCommRegister: rank %d: %s is NULL", comm->rank,
                handle == NULL ? "handle" : "buff");
        return ncclInvalidArgument;
    }
    br_hostmem_ref_t ref;
    int dev;
    if (size > 0 && br_cuda_ptr_kind(buff, &dev) != BR_MEM_DEVICE) {
        BR_INFO(NCCL_REG, "ncclCommRegister: rank %d: %zu bytes at %p: %s", comm->rank, size,
                buff,
                br_hostmem_find(buff, size, &ref)
                    ? "ncclMemAlloc memory, which ranks of other processes map once and copy "
                      "with memcpy"
                    : "not from ncclMemAlloc, so ranks of other processes read it with "
                      "process_vm_readv (the kernel pins its pages on every call)");
    }
    BR_CHECK(br_calloc(&h, 1, "registration"));
    /* Net connections register host buffers with their plugin once, at first use, and
     * keep that until ncclCommDeregister (proxy_userbuf.c). */
    if (size > 0 && br_cuda_ptr_kind(buff, &dev) != BR_MEM_DEVICE &&
        br_net_regs_add(&comm->tc->net_regs, buff, size, &h->net_id) != ncclSuccess) {
        free(h);
        return ncclSystemError;
    }
    h->magic = REG_MAGIC;
    h->buff = buff;
    h->size = size;
    *handle = h;
    return ncclSuccess;
}

BR_API(ncclResult_t, ncclCommDeregister, (const ncclComm_t comm, void *handle))
{
    reg_handle_t *h = handle;
    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, "ncclCommDeregister"));
    if (h == NULL || h->magic != REG_MAGIC) {
        BR_WARN(NCCL_REG, "ncclCommDeregister: rank %d: %p is not a registration handle",
                comm->rank, handle);
        return ncclInvalidArgument;
    }
    if (h->net_id != 0) {
        br_net_regs_remove(&comm->tc->net_regs, comm->tc->proxy, h->net_id);
    }
    h->magic = 0;
    free(h);
    return ncclSuccess;
}

/* A window on host memory (NCCL 2.28's ncclCommWindowRegister): collective, so every rank
 * learns that all of them called it and, for NCCL_WIN_COLL_SYMMETRIC, that the sizes agree.
 * What makes host memory readable in place is where it lives (see ncclCommRegister), so
 * the window records the range and says at INFO which path its buffers get. */
typedef struct {
    uint64_t magic;
    void *buff;
    size_t size;
    int flags;
    uint32_t seq; /* its number on every rank (comm_rma.c) */
    int nranks;
    uint64_t *peer_size; /* every rank's window size, for one-sided calls */
} win_handle_t;

#define WIN_MAGIC 0x62726169645f776eULL

typedef struct {
    uint64_t size;
    int32_t flags;
    int32_t mapped;
} win_blob_t;

static ncclResult_t window_agree(ncclComm_t comm, size_t size, int flags, int mapped,
                                 uint64_t *sizes)
{
    win_blob_t *all = NULL;
    ncclResult_t res;
    int nmapped = 0;

    BR_CHECK(br_calloc(&all, (size_t)comm->nranks, "window registration"));
    all[comm->rank] = (win_blob_t){size, flags, mapped};
    res = br_bootstrap_allgather(comm->tc->boot, all, sizeof(*all));
    for (int r = 0; r < comm->nranks && res == ncclSuccess; r++) {
        nmapped += all[r].mapped;
        sizes[r] = all[r].size;
        if ((flags & NCCL_WIN_COLL_SYMMETRIC) &&
            (all[r].size != size || all[r].flags != flags)) {
            BR_WARN(NCCL_REG, "ncclCommWindowRegister: rank %d: symmetric window of %zu bytes "
                    "(flags %d), but rank %d registered %llu bytes (flags %d)", comm->rank, size,
                    flags, r, (unsigned long long)all[r].size, (int)all[r].flags);
            res = ncclInvalidUsage;
        }
    }
    if (res == ncclSuccess) {
        BR_INFO(NCCL_REG, "ncclCommWindowRegister: rank %d: %zu bytes; %d of %d ranks' windows "
                "are ncclMemAlloc memory that peers map, the others are read with "
                "process_vm_readv", comm->rank, size, nmapped, comm->nranks);
    }
    free(all);
    return res;
}

BR_API(ncclResult_t, ncclCommWindowRegister,
       (ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win, int winFlags))
{
    win_handle_t *h = NULL;
    br_hostmem_ref_t ref;
    int dev;

    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, "ncclCommWindowRegister"));
    if (win == NULL || buff == NULL || size == 0) {
        BR_WARN(NCCL_REG, "ncclCommWindowRegister: rank %d: %s", comm->rank,
                win == NULL ? "win is NULL" : "the buffer is NULL or empty");
        return ncclInvalidArgument;
    }
    if (br_cuda_ptr_kind(buff, &dev) == BR_MEM_DEVICE) {
        BR_WARN(NCCL_REG, "ncclCommWindowRegister: rank %d: windows on device memory are not "
                "implemented (host memory is)", comm->rank);
        return ncclInvalidUsage;
    }
    uint64_t *sizes = NULL;
    uint32_t seq;
    BR_CHECK(br_calloc(&sizes, (size_t)comm->nranks, "window sizes"));
    ncclResult_t res = window_agree(comm, size, winFlags, br_hostmem_find(buff, size, &ref), sizes);
    res = res == ncclSuccess ? br_comm_win_add(comm, buff, size, &seq) : res;
    if (res == ncclSuccess && br_calloc(&h, 1, "window") != ncclSuccess) {
        br_comm_win_remove(comm, seq);
        res = ncclSystemError;
    }
    if (res != ncclSuccess) {
        free(sizes);
        return res;
    }
    *h = (win_handle_t){WIN_MAGIC, buff, size, winFlags, seq, comm->nranks, sizes};
    *win = (ncclWindow_t)(void *)h;
    return ncclSuccess;
}

BR_API(ncclResult_t, ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win))
{
    win_handle_t *h = (win_handle_t *)(void *)win;
    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, "ncclCommWindowDeregister"));
    if (h == NULL || h->magic != WIN_MAGIC) {
        BR_WARN(NCCL_REG, "ncclCommWindowDeregister: rank %d: %p is not a window", comm->rank,
                (void *)win);
        return ncclInvalidArgument;
    }
    br_comm_win_remove(comm, h->seq);
    h->magic = 0;
    free(h->peer_size);
    free(h);
    return ncclSuccess;
}

ncclResult_t br_api_win_lookup(ncclComm_t comm, ncclWindow_t win, const char *fn, int peer,
                               uint64_t offset, size_t bytes, uint32_t *seq_p)
{
    const win_handle_t *h = (const win_handle_t *)(const void *)win;
    if (h == NULL || h->magic != WIN_MAGIC || h->nranks != comm->nranks) {
        BR_WARN(NCCL_REG, "%s: rank %d: %p is not a window of this communicator", fn, comm->rank,
                (void *)win);
        return ncclInvalidArgument;
    }
    if (offset > h->peer_size[peer] || bytes > h->peer_size[peer] - offset) {
        BR_WARN(NCCL_REG,
                "%s: rank %d: %zu bytes at offset %llu do not fit rank %d's window of "
                "%llu bytes",
                fn, comm->rank, bytes, (unsigned long long)offset, peer,
                (unsigned long long)h->peer_size[peer]);
        return ncclInvalidArgument;
    }
    *seq_p = h->seq;
    return ncclSuccess;
}

BR_API(ncclResult_t, ncclWinGetUserPtr, (ncclComm_t comm, ncclWindow_t win, void **outUserPtr))
{
    win_handle_t *h = (win_handle_t *)(void *)win;
    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, "ncclWinGetUserPtr"));
    if (h == NULL || h->magic != WIN_MAGIC || outUserPtr == NULL) {
        BR_WARN(NCCL_REG, "ncclWinGetUserPtr: rank %d: %s", comm->rank,
                outUserPtr == NULL ? "outUserPtr is NULL" : "win is not a window");
        return ncclInvalidArgument;
    }
    *outUserPtr = h->buff;
    return ncclSuccess;
}
