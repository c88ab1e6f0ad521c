/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Braid's collectives with a count per rank (braid.h): braidAllGatherV,
 * braidReduceScatterV and braidAlltoAllV. The counts and displacements are checked here
 * and copied into one br_vspec_t (this rank's view: what goes to each peer, what comes
 * from each), which travels with the operation. Host memory: the group layer hands the
 * operation to the host executor, which runs it as a pairwise exchange whose descriptors
 * let each receiver check the sender's count (exec_engine.c). Device memory: the same
 * exchange as one group of the CUDA executor's Broadcasts (AllGatherV), Reduces
 * (ReduceScatterV) or Sends and Receives (AlltoAllV).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "braid.h"
#include "util.h"

/* One call's arrays as the user passed them (displacements may be NULL: packed). */
typedef struct {
    const char *fn;
    br_func_t func;
    const void *sendbuff;
    void *recvbuff;
    size_t sendcount;         /* AllGatherV */
    const size_t *sendcounts; /* AlltoAllV */
    const size_t *sdispls;    /* ReduceScatterV, AlltoAllV */
    const size_t *recvcounts; /* all three */
    const size_t *rdispls;    /* AllGatherV, AlltoAllV */
} vcall_t;

#define V_FAIL(comm, c, ...)                                                                       \
    do {                                                                                           \
        char what_[400];                                                                           \
        snprintf(what_, sizeof(what_), __VA_ARGS__);                                               \
        BR_WARN(NCCL_COLL, "rank %d (host %s): %s: %s", (comm)->rank, br_host_name(), (c)->fn,     \
                what_);                                                                            \
        res = ncclInvalidArgument;                                                                 \
        goto err_free;                                                                             \
    } while (0)

/* displ[p], or with no array the sum of count[0..p-1] (blocks packed in rank order).
 * Returns -1 when packed blocks add up past `limit` elements. */
static int displs_fill(size_t *out, const size_t *displs, const size_t *count, int n, size_t limit)
{
    size_t at = 0;
    for (int p = 0; p < n; p++) {
        out[p] = displs != NULL ? displs[p] : at;
        if (displs == NULL && (count[p] > limit || at > limit - count[p])) {
            return -1;
        }
        at += displs == NULL ? count[p] : 0;
    }
    return 0;
}

/* This rank's counts of the call, or ncclInvalidArgument naming what is wrong. */
static ncclResult_t vspec_make(ncclComm_t comm, const vcall_t *c, size_t ts, br_vspec_t **v_p)
{
    int n = comm->nranks, me = comm->rank;
    ncclResult_t res = ncclSuccess;
    char *mem = NULL;

    BR_CHECK(br_calloc(&mem, sizeof(br_vspec_t) + 4 * (size_t)n * sizeof(size_t), c->fn));
    br_vspec_t *v = (br_vspec_t *)(void *)mem;
    v->nranks = n;
    v->scount = (size_t *)(v + 1);
    v->sdispl = v->scount + n;
    v->rcount = v->sdispl + n;
    v->rdispl = v->rcount + n;
    if (c->recvcounts == NULL || (c->func == BR_FUNC_ALLTOALLV && c->sendcounts == NULL)) {
        V_FAIL(comm, c, "%s is NULL", c->recvcounts == NULL ? "recvcounts" : "sendcounts");
    }
    for (int p = 0; p < n; p++) {
        switch (c->func) {
        case BR_FUNC_ALLGATHERV: /* my block to everyone; block p from p */
            v->scount[p] = c->sendcount;
            v->rcount[p] = c->recvcounts[p];
            break;
        case BR_FUNC_REDUCESCATTERV: /* block p to p; my block from everyone */
            v->scount[p] = c->recvcounts[p];
            v->rcount[p] = c->recvcounts[me];
            break;
        default:
            v->scount[p] = c->sendcounts[p];
            v->rcount[p] = c->recvcounts[p];
            break;
        }
    }
    size_t limit = SIZE_MAX / ts;
    if (displs_fill(v->sdispl, c->sdispls, v->scount, n, limit) != 0 ||
        displs_fill(v->rdispl, c->rdispls, v->rcount, n, limit) != 0) {
        V_FAIL(comm, c, "the blocks, packed in rank order, overflow the address space");
    }
    if (c->func == BR_FUNC_ALLGATHERV) {
        memset(v->sdispl, 0, (size_t)n * sizeof(size_t));
    } else if (c->func == BR_FUNC_REDUCESCATTERV) {
        memset(v->rdispl, 0, (size_t)n * sizeof(size_t));
    }
    if (v->scount[me] != v->rcount[me]) {
        V_FAIL(comm, c, "this rank's own block: %s %zu but recvcounts[%d] %zu",
               c->func == BR_FUNC_ALLGATHERV ? "sendcount" : "sendcounts[rank]", v->scount[me], me,
               v->rcount[me]);
    }
    int sends = 0, recvs = 0;
    for (int p = 0; p < n; p++) {
        if (v->scount[p] > limit || v->sdispl[p] > limit - v->scount[p] || v->rcount[p] > limit ||
            v->rdispl[p] > limit - v->rcount[p]) {
            V_FAIL(comm, c,
                   "the block of rank %d (counts %zu/%zu at %zu/%zu) overflows the "
                   "address space",
                   p, v->scount[p], v->rcount[p], v->sdispl[p], v->rdispl[p]);
        }
        sends |= v->scount[p] > 0;
        recvs |= v->rcount[p] > 0;
    }
    if ((sends && c->sendbuff == NULL) || (recvs && c->recvbuff == NULL)) {
        V_FAIL(comm, c, "%s is NULL but its counts are not all 0",
               sends && c->sendbuff == NULL ? "sendbuff" : "recvbuff");
    }
    if (c->func == BR_FUNC_ALLTOALLV && (sends || recvs) && c->sendbuff == c->recvbuff) {
        V_FAIL(comm, c,
               "sendbuff and recvbuff are the same buffer: in-place AlltoAllV is not "
               "supported");
    }
    *v_p = v;
    return ncclSuccess;
err_free:
    free(v);
    return res;
}

/* Device memory: the exchange as one group of the CUDA executor's operations. */
static ncclResult_t v_device(ncclComm_t comm, const br_op_t *base, const br_vspec_t *v)
{
    size_t ts = br_type_size(base->type);
    int me = comm->rank;
    ncclResult_t res = ncclSuccess;

    br_group_start();
    for (int k = 0; k < comm->nranks && res == ncclSuccess; k++) {
        br_op_t o = *base;
        o.v = NULL;
        o.root = k;
        if (base->func == BR_FUNC_ALLGATHERV) {
            o.func = BR_FUNC_BROADCAST; /* block k, from rank k, to rdispl[k] everywhere */
            o.count = v->rcount[k];
            o.recvbuff = (char *)base->recvbuff + v->rdispl[k] * ts;
            o.sendbuff = k == me ? base->sendbuff : o.recvbuff;
        } else if (base->func == BR_FUNC_REDUCESCATTERV) {
            o.func = BR_FUNC_REDUCE; /* block k of every rank, reduced into rank k */
            o.count = v->scount[k];
            o.sendbuff = (const char *)base->sendbuff + v->sdispl[k] * ts;
        } else {
            o.func = BR_FUNC_SEND;
            o.peer = k;
            o.count = v->scount[k];
            o.sendbuff = (const char *)base->sendbuff + v->sdispl[k] * ts;
            res = o.count > 0 ? br_group_add_op(comm, &o) : ncclSuccess;
            o = *base;
            o.v = NULL;
            o.func = BR_FUNC_RECV;
            o.peer = k;
            o.count = v->rcount[k];
            o.recvbuff = (char *)base->recvbuff + v->rdispl[k] * ts;
            if (o.count == 0 || res != ncclSuccess) {
                continue;
            }
        }
        res = br_group_add_op(comm, &o);
    }
    ncclResult_t end = br_group_end();
    return res != ncclSuccess ? res : end;
}

static ncclResult_t v_submit(ncclComm_t comm, const vcall_t *c, cudaStream_t stream,
                             const ncclRedOp_t *redop, ncclDataType_t type)
{
    br_op_t op;
    br_vspec_t *v = NULL;
    ncclResult_t res =
        br_api_v_check(comm, c->fn, c->func, c->sendbuff, c->recvbuff, type, redop, stream, &op);
    res = res == ncclSuccess ? vspec_make(comm, c, br_type_size(type), &v) : res;
    res = res == ncclSuccess ? br_api_hold_comm(comm, c->fn) : res;
    if (res != ncclSuccess) {
        free(v);
        br_group_note_error(res);
        return res;
    }
    op.count = v->rcount[comm->rank];
    if (c->func == BR_FUNC_ALLTOALLV) {
        op.count = 0; /* the state dump shows what this rank sends in all */
        for (int p = 0; p < comm->nranks; p++) {
            op.count += v->scount[p];
        }
    }
    if (op.on_device) {
        res = v_device(comm, &op, v);
        free(v);
    } else {
        op.v = v; /* the group layer's from here on */
        res = br_group_add_op(comm, &op);
    }
    br_comm_unhold(comm);
    br_group_note_error(res);
    return res;
}

BR_API(ncclResult_t, braidAllGatherV,
       (const void *sendbuff, size_t sendcount, void *recvbuff, const size_t *recvcounts,
        const size_t *rdispls, ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream))
{
    vcall_t c = {.fn = "braidAllGatherV",
                 .func = BR_FUNC_ALLGATHERV,
                 .sendbuff = sendbuff,
                 .recvbuff = recvbuff,
                 .sendcount = sendcount,
                 .recvcounts = recvcounts,
                 .rdispls = rdispls};
    return v_submit(comm, &c, stream, NULL, datatype);
}

BR_API(ncclResult_t, braidReduceScatterV,
       (const void *sendbuff, void *recvbuff, const size_t *recvcounts, const size_t *sdispls,
        ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream))
{
    vcall_t c = {.fn = "braidReduceScatterV",
                 .func = BR_FUNC_REDUCESCATTERV,
                 .sendbuff = sendbuff,
                 .recvbuff = recvbuff,
                 .sdispls = sdispls,
                 .recvcounts = recvcounts};
    return v_submit(comm, &c, stream, &op, datatype);
}

BR_API(ncclResult_t, braidAlltoAllV,
       (const void *sendbuff, const size_t *sendcounts, const size_t *sdispls, void *recvbuff,
        const size_t *recvcounts, const size_t *rdispls, ncclDataType_t datatype, ncclComm_t comm,
        cudaStream_t stream))
{
    vcall_t c = {.fn = "braidAlltoAllV",
                 .func = BR_FUNC_ALLTOALLV,
                 .sendbuff = sendbuff,
                 .recvbuff = recvbuff,
                 .sendcounts = sendcounts,
                 .sdispls = sdispls,
                 .recvcounts = recvcounts,
                 .rdispls = rdispls};
    return v_submit(comm, &c, stream, NULL, datatype);
}
