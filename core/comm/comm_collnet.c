/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A communicator's collnet, set up at init when NCCL_COLLNET_ENABLE is on and the
 * communicator spans at least NCCL_COLLNET_NODE_THRESHOLD hosts: the collnet table of the
 * net plugin's library is loaded, every rank listens, the handles are gathered, every rank
 * joins the plugin's collective communicator (connect), registers its staging buffers, and
 * the ranks agree that all of them could; otherwise no rank uses collnet (NCCL's rule:
 * collnet is disabled, the net plugin stays). Every rank of the communicator joins, not one
 * head per host (docs/architecture.md says why). What the plugin reduces is asked with
 * reduceSupport for every type and sum/prod/max/min and agreed (the intersection), so plan
 * offers collnet only for what every rank's plugin supports; likewise AllGather and
 * ReduceScatter only when every rank's plugin has iallgather / ireducescatter.
 *
 * Whether to try is decided alike on every rank from every rank's NCCL_COLLNET_ENABLE and
 * NCCL_COLLNET_NODE_THRESHOLD (exchanged with the peer information at init), so ranks
 * with different settings never wait for each other in different places.
 *
 * Threading: init and destroy of one communicator.
 */
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "util.h"

/* What each rank tells the others. */
typedef struct {
    int ok;                          /* this rank listened and can join */
    uint64_t stage_bytes;            /* its staging size (the smallest wins) */
    unsigned char red[ncclNumTypes]; /* bit k: br_red_kind_t k (sum .. min) is reduced */
    int ag, rs;                      /* its plugin has iallgather / ireducescatter */
    char handle[NCCL_NET_HANDLE_MAXSIZE];
} collnet_info_t;

static const ncclRedOp_t collnet_ops[] = {ncclSum, ncclProd, ncclMax, ncclMin};

/* Load, listen and ask what the plugin reduces. 0 when this rank cannot take part. */
static int collnet_local(ncclComm_t comm, br_exec_collnet_t *x, void **listen_p, collnet_info_t *me)
{
    br_collnet_t *cn = NULL;
    ncclResult_t res;

    if (comm->tc->net == NULL) {
        BR_INFO(NCCL_INIT | NCCL_NET, "rank %d: no net plugin, so no collnet", comm->rank);
        return 0;
    }
    if (br_plugin_collnet_open(comm->tc->net, comm->comm_hash, &cn) != ncclSuccess || cn == NULL) {
        return 0;
    }
    x->cn = cn;
    res = cn->ops->listen(cn, cn->dev, me->handle, listen_p);
    if (res != ncclSuccess) {
        BR_WARN(NCCL_INIT | NCCL_NET,
                "rank %d (host %s): collnet %s listen failed: %s; collnet "
                "disabled",
                comm->rank, br_host_name(), cn->name, br_plugin_result_str(res));
        return 0;
    }
    for (int t = 0; t < ncclNumTypes; t++) {
        for (int k = 0; k < 4; k++) {
            int sup = 0;
            res = cn->ops->reduce_support(cn, (ncclDataType_t)t, collnet_ops[k], &sup);
            me->red[t] |= res == ncclSuccess && sup ? (unsigned char)(1u << k) : 0;
        }
    }
    me->ag = cn->has_iallgather;
    me->rs = cn->has_ireducescatter;
    size_t want = (size_t)BR_PARAM_INT(COLLNET_CHUNK);
    want = want < cn->props.maxCollBytes ? want : cn->props.maxCollBytes;
    me->stage_bytes = want < 64 ? 64 : want & ~(size_t)63;
    return 1;
}

/* Join the collective communicator and register the staging buffers. */
static int collnet_join(ncclComm_t comm, br_exec_collnet_t *x, collnet_info_t *all,
                        void *listen_comm)
{
    br_collnet_t *cn = x->cn;
    void **handles = NULL;
    ncclResult_t res;
    const char *what = "connect";

    if (br_calloc(&handles, (size_t)comm->nranks, "collnet handles") != ncclSuccess) {
        return 0;
    }
    for (int r = 0; r < comm->nranks; r++) {
        handles[r] = all[r].handle;
    }
    res = cn->ops->connect(cn, handles, comm->nranks, comm->rank, listen_comm, &x->coll_comm);
    free(handles);
    if (res == ncclSuccess && x->coll_comm == NULL) {
        res = ncclInternalError; /* a plugin that lies: success without a communicator */
        what = "connect (no communicator returned)";
    }
    for (int i = 0; i < BR_COLLNET_NBUF && res == ncclSuccess; i++) {
        what = "staging buffers";
        if (br_calloc(&x->send[i], x->stage_bytes, "collnet staging") != ncclSuccess ||
            br_calloc(&x->recv[i], x->stage_bytes, "collnet staging") != ncclSuccess) {
            res = ncclSystemError;
            break;
        }
        what = "regMr";
        res = cn->ops->reg_mr(cn, x->coll_comm, x->send[i], x->stage_bytes, NCCL_PTR_HOST,
                              &x->send_mh[i]);
        if (res == ncclSuccess) {
            res = cn->ops->reg_mr(cn, x->coll_comm, x->recv[i], x->stage_bytes, NCCL_PTR_HOST,
                                  &x->recv_mh[i]);
        }
    }
    if (res != ncclSuccess) {
        BR_WARN(NCCL_INIT | NCCL_NET,
                "rank %d (host %s): collnet %s %s failed: %s; collnet "
                "disabled on every rank",
                comm->rank, br_host_name(), cn->name, what, br_plugin_result_str(res));
        return 0;
    }
    return 1;
}

/* Release what a (partial) setup made. */
static void collnet_release(br_exec_collnet_t *x)
{
    ncclResult_t res = ncclSuccess;

    if (x == NULL) {
        return;
    }
    for (int i = 0; i < BR_COLLNET_NBUF; i++) {
        if (x->send_mh[i] != NULL) {
            BR_CLEANUP(x->cn->ops->dereg_mr(x->cn, x->coll_comm, x->send_mh[i]), res);
        }
        if (x->recv_mh[i] != NULL) {
            BR_CLEANUP(x->cn->ops->dereg_mr(x->cn, x->coll_comm, x->recv_mh[i]), res);
        }
        free(x->send[i]);
        free(x->recv[i]);
    }
    if (x->coll_comm != NULL) {
        BR_CLEANUP(x->cn->ops->close_coll(x->cn, x->coll_comm), res);
    }
    br_plugin_collnet_close(x->cn);
    free(x);
}

/* Did every rank report ok? The first that did not, or -1. */
static int collnet_first_missing(const collnet_info_t *all, int nranks)
{
    for (int r = 0; r < nranks; r++) {
        if (!all[r].ok) {
            return r;
        }
    }
    return -1;
}

ncclResult_t br_comm_collnet_setup(ncclComm_t comm)
{
    br_exec_collnet_t *x = NULL;
    collnet_info_t *all = NULL;
    void *listen_comm = NULL;
    int nnodes = comm->graph->nnodes, threshold = 0, enable = 1;
    int missing;
    ncclResult_t res = ncclSuccess;

    /* Every rank decides alike from everyone's settings (exchanged at init): collnet only
     * if every rank enabled it, at the highest threshold any rank set. */
    for (int r = 0; r < comm->nranks; r++) {
        const br_peer_info_t *pi = &comm->tc->peers[r];
        if (pi->collnet_enable != comm->tc->peers[comm->rank].collnet_enable && comm->rank == 0) {
            BR_INFO(NCCL_INIT | NCCL_NET,
                    "collnet not used: NCCL_COLLNET_ENABLE is %d on rank "
                    "%d (host %s) and %d on rank 0",
                    pi->collnet_enable, r, pi->host, comm->tc->peers[0].collnet_enable);
        }
        enable &= pi->collnet_enable != 0;
        threshold = pi->collnet_threshold > threshold ? pi->collnet_threshold : threshold;
    }
    if (!enable) {
        return ncclSuccess;
    }
    if (nnodes < threshold) {
        BR_INFO(NCCL_INIT | NCCL_NET,
                "rank %d: collnet not used: %d host%s, fewer than "
                "NCCL_COLLNET_NODE_THRESHOLD %d",
                comm->rank, nnodes, nnodes == 1 ? "" : "s", threshold);
        return ncclSuccess;
    }
    BR_CHECK(br_calloc(&x, 1, "collnet state"));
    BR_CHECK_GOTO(br_calloc(&all, (size_t)comm->nranks, "collnet setup"), res, out);
    all[comm->rank].ok = collnet_local(comm, x, &listen_comm, &all[comm->rank]);
    BR_CHECK_GOTO(br_bootstrap_allgather(comm->tc->boot, all, sizeof(*all)), res, out);
    missing = collnet_first_missing(all, comm->nranks);
    if (missing >= 0) {
        BR_INFO(NCCL_INIT | NCCL_NET,
                "rank %d: collnet not used: rank %d (host %s) has none "
                "usable",
                comm->rank, missing, comm->tc->peers[missing].host);
        goto out;
    }
    x->stage_bytes = all[0].stage_bytes;
    x->allgather = x->reducescatter = 1;
    for (int r = 0; r < comm->nranks; r++) {
        x->allgather &= all[r].ag != 0;
        x->reducescatter &= all[r].rs != 0;
        x->stage_bytes = all[r].stage_bytes < x->stage_bytes ? all[r].stage_bytes : x->stage_bytes;
        for (int t = 0; t < ncclNumTypes; t++) {
            all[0].red[t] &= all[r].red[t];
        }
    }
    memcpy(x->red, all[0].red, sizeof(x->red));
    /* Connect is collective: every rank got here, so every rank calls it. */
    int joined = collnet_join(comm, x, all, listen_comm);
    memset(all, 0, (size_t)comm->nranks * sizeof(*all));
    all[comm->rank].ok = joined;
    BR_CHECK_GOTO(br_bootstrap_allgather(comm->tc->boot, all, sizeof(*all)), res, out);
    missing = collnet_first_missing(all, comm->nranks);
    if (missing >= 0) {
        BR_INFO(NCCL_INIT | NCCL_NET,
                "rank %d: collnet not used: rank %d (host %s) could not "
                "join the collnet communicator",
                comm->rank, missing, comm->tc->peers[missing].host);
        goto out;
    }
    if (comm->rank == 0) {
        BR_INFO(NCCL_INIT | NCCL_NET,
                "CollNet: %s (v%d) with all %d ranks on %d hosts, staging "
                "%zu bytes x %d; AllReduce%s%s",
                x->cn->name, x->cn->version, comm->nranks, nnodes, x->stage_bytes, BR_COLLNET_NBUF,
                x->allgather ? ", AllGather" : "", x->reducescatter ? ", ReduceScatter" : "");
    }
    comm->ec->collnet = x;
    x = NULL;
    res = ncclSuccess;
out:
    if (listen_comm != NULL) {
        ncclResult_t r2 = ncclSuccess;
        BR_CLEANUP(comm->ec->collnet != NULL ? comm->ec->collnet->cn->ops->close_listen(
                                                   comm->ec->collnet->cn, listen_comm)
                                             : x->cn->ops->close_listen(x->cn, listen_comm),
                   r2);
    }
    collnet_release(x);
    free(all);
    return res;
}

void br_comm_collnet_free(ncclComm_t comm)
{
    if (comm->ec != NULL) {
        collnet_release(comm->ec->collnet);
        comm->ec->collnet = NULL;
    }
}
