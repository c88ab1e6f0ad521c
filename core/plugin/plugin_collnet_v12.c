/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CollNet ABI v12 adapter (NCCL 2.30): the internal table has v12 semantics, so every call
 * forwards to the plugin's table (copied after its per-comm init), with the per-comm
 * context added to listen.
 */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "plugin_int.h"

#define C12(cn) (&br_collnet_state(cn)->fn.v12)

static ncclResult_t c12_devices(br_collnet_t *cn, int *ndev)
{
    return C12(cn)->devices(ndev);
}

static ncclResult_t c12_get_properties(br_collnet_t *cn, int dev, ncclNetProperties_v12_t *props)
{
    return C12(cn)->getProperties(dev, props);
}

static ncclResult_t c12_listen(br_collnet_t *cn, int dev, void *handle, void **listen_comm)
{
    return C12(cn)->listen(br_collnet_state(cn)->ctx, dev, handle, listen_comm);
}

static ncclResult_t c12_connect(br_collnet_t *cn, void *handles[], int nranks, int rank,
                                void *listen_comm, void **coll_comm)
{
    return C12(cn)->connect(handles, nranks, rank, listen_comm, coll_comm);
}

static ncclResult_t c12_reduce_support(br_collnet_t *cn, ncclDataType_t type, ncclRedOp_t op,
                                       int *supported)
{
    return C12(cn)->reduceSupport(type, op, supported);
}

static ncclResult_t c12_reg_mr(br_collnet_t *cn, void *coll_comm, void *data, size_t size, int type,
                               void **mhandle)
{
    return C12(cn)->regMr(coll_comm, data, size, type, mhandle);
}

static ncclResult_t c12_dereg_mr(br_collnet_t *cn, void *coll_comm, void *mhandle)
{
    return C12(cn)->deregMr(coll_comm, mhandle);
}

static ncclResult_t c12_iallreduce(br_collnet_t *cn, void *coll_comm, void *send, void *recv,
                                   size_t count, ncclDataType_t type, ncclRedOp_t op, void *send_mh,
                                   void *recv_mh, void **request)
{
    return C12(cn)->iallreduce(coll_comm, send, recv, count, type, op, send_mh, recv_mh, request);
}

/* The parts, checked and converted to this version's scatter/gather type. */
static ncclResult_t c12_parts(br_collnet_t *cn, const char *call, int present, int nparts,
                              const br_collnet_part_t *parts, ncclNetSGE_v12_t *out)
{
    BR_CHECK(br_collnet_check_parts(cn, call, present, nparts, parts, 0));
    for (int i = 0; i < nparts; i++) {
        out[i].mhandle = parts[i].mhandle;
        out[i].address = parts[i].address;
        out[i].size = parts[i].size;
    }
    return ncclSuccess;
}

static ncclResult_t c12_iallgather(br_collnet_t *cn, void *coll_comm, void *send, int nparts,
                                   br_collnet_part_t *recv_parts, size_t bytes_per_rank,
                                   size_t window_off, size_t window_bytes, void *send_mh,
                                   void **request)
{
    ncclNetSGE_v12_t sge[BR_COLLNET_MAX_PARTS];

    BR_CHECK(c12_parts(cn, "iallgather", C12(cn)->iallgather != NULL, nparts, recv_parts, sge));
    return C12(cn)->iallgather(coll_comm, send, nparts, sge, bytes_per_rank, window_off,
                               window_bytes, send_mh, request);
}

static ncclResult_t c12_ireducescatter(br_collnet_t *cn, void *coll_comm, int nparts,
                                       br_collnet_part_t *send_parts, void *recv,
                                       size_t bytes_per_rank, size_t window_off,
                                       size_t window_bytes, ncclDataType_t type, ncclRedOp_t op,
                                       void *recv_mh, void **request)
{
    ncclNetSGE_v12_t sge[BR_COLLNET_MAX_PARTS];

    BR_CHECK(
        c12_parts(cn, "ireducescatter", C12(cn)->ireducescatter != NULL, nparts, send_parts, sge));
    return C12(cn)->ireducescatter(coll_comm, nparts, sge, recv, bytes_per_rank, window_off,
                                   window_bytes, type, op, recv_mh, request);
}

static ncclResult_t c12_test(br_collnet_t *cn, void *request, int *done, int *size)
{
    return C12(cn)->test(request, done, size);
}

static ncclResult_t c12_close_coll(br_collnet_t *cn, void *coll_comm)
{
    return C12(cn)->closeColl(coll_comm);
}

static ncclResult_t c12_close_listen(br_collnet_t *cn, void *listen_comm)
{
    return C12(cn)->closeListen(listen_comm);
}

static const br_collnet_ops_t c12_ops = {
    .get_properties = c12_get_properties,
    .listen = c12_listen,
    .connect = c12_connect,
    .reduce_support = c12_reduce_support,
    .reg_mr = c12_reg_mr,
    .dereg_mr = c12_dereg_mr,
    .iallreduce = c12_iallreduce,
    .iallgather = c12_iallgather,
    .ireducescatter = c12_ireducescatter,
    .test = c12_test,
    .close_coll = c12_close_coll,
    .close_listen = c12_close_listen,
};

static ncclResult_t c12_init(br_collnet_t *cn, br_collnet_state_t *st, uint64_t comm_hash,
                             char *why, size_t why_len, int *lied_p)
{
    const ncclCollNet_v12_t *exp = st->exported;
    const ncclCollNet_v12_t *t = &st->fn.v12;
    const char *missing;
    ncclResult_t res;

    *lied_p = 0;
    if (exp->init == NULL) {
        *lied_p = 1;
        snprintf(why, why_len, "ncclCollNetPlugin_v12.init is NULL");
        return ncclInternalError;
    }
    res = exp->init(&st->ctx, comm_hash, br_log_plugin);
    if (res != ncclSuccess) {
        snprintf(why, why_len, "init failed: %s", br_plugin_result_str(res));
        return res;
    }
    /* Function pointers are read only now: a plugin may patch its table in init (the
     * SHARP plugin clears iallgather there). */
    st->fn.v12 = *exp;
    cn->has_iallgather = t->iallgather != NULL;
    cn->has_ireducescatter = t->ireducescatter != NULL;
    const br_net_member_t required[] = {
        BR_NET_MEMBER(t, devices),
        BR_NET_MEMBER(t, getProperties),
        BR_NET_MEMBER(t, listen),
        BR_NET_MEMBER(t, connect),
        BR_NET_MEMBER(t, reduceSupport),
        BR_NET_MEMBER(t, regMr),
        BR_NET_MEMBER(t, deregMr),
        BR_NET_MEMBER(t, iallreduce),
        BR_NET_MEMBER(t, test),
        BR_NET_MEMBER(t, closeColl),
        BR_NET_MEMBER(t, closeListen),
        BR_NET_MEMBER(t, finalize),
        {NULL, NULL},
    };
    missing = br_net_first_missing(required);
    if (missing != NULL) {
        *lied_p = 1;
        snprintf(why, why_len, "ncclCollNetPlugin_v12.%s is NULL", missing);
        if (t->finalize != NULL) {
            (void)t->finalize(st->ctx);
        }
        return ncclInternalError;
    }
    return ncclSuccess;
}

static ncclResult_t c12_fini(br_collnet_t *cn, br_collnet_state_t *st)
{
    (void)cn;
    return st->fn.v12.finalize(st->ctx);
}

const br_collnet_adapter_t br_collnet_adapter_v12 = {
    .ops = &c12_ops,
    .init = c12_init,
    .fini = c12_fini,
    .devices = c12_devices,
};
