/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CollNet ABI v10 adapter (NCCL 2.26): init takes only the logger and is process-wide,
 * so it runs while no comm holds the library's collnet and later comms only count (there
 * is no finalize); listen takes no context; properties are the net v10 layout.
 */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "plugin_int.h"

#define C10(cn) (&br_collnet_state(cn)->fn.v10)

static ncclResult_t c10_devices(br_collnet_t *cn, int *ndev)
{
    return C10(cn)->devices(ndev);
}

static ncclResult_t c10_get_properties(br_collnet_t *cn, int dev, ncclNetProperties_v12_t *props)
{
    ncclNetProperties_v10_t p;

    memset(&p, 0, sizeof(p));
    BR_CHECK(C10(cn)->getProperties(dev, &p));
    br_net_props_v10(&p, dev, props);
    return ncclSuccess;
}

static ncclResult_t c10_listen(br_collnet_t *cn, int dev, void *handle, void **listen_comm)
{
    return C10(cn)->listen(dev, handle, listen_comm);
}

static ncclResult_t c10_connect(br_collnet_t *cn, void *handles[], int nranks, int rank,
                                void *listen_comm, void **coll_comm)
{
    return C10(cn)->connect(handles, nranks, rank, listen_comm, coll_comm);
}

static ncclResult_t c10_reduce_support(br_collnet_t *cn, ncclDataType_t type, ncclRedOp_t op,
                                       int *supported)
{
    return C10(cn)->reduceSupport(type, op, supported);
}

static ncclResult_t c10_reg_mr(br_collnet_t *cn, void *coll_comm, void *data, size_t size, int type,
                               void **mhandle)
{
    return C10(cn)->regMr(coll_comm, data, size, type, mhandle);
}

static ncclResult_t c10_dereg_mr(br_collnet_t *cn, void *coll_comm, void *mhandle)
{
    return C10(cn)->deregMr(coll_comm, mhandle);
}

static ncclResult_t c10_iallreduce(br_collnet_t *cn, void *coll_comm, void *send, void *recv,
                                   size_t count, ncclDataType_t type, ncclRedOp_t op, void *send_mh,
                                   void *recv_mh, void **request)
{
    return C10(cn)->iallreduce(coll_comm, send, recv, count, type, op, send_mh, recv_mh, request);
}

/* The parts, checked and converted to this version's scatter/gather type. */
static ncclResult_t c10_parts(br_collnet_t *cn, const char *call, int present, int nparts,
                              const br_collnet_part_t *parts, ncclNetSGE_v10_t *out)
{
    BR_CHECK(br_collnet_check_parts(cn, call, present, nparts, parts, 0));
    for (int i = 0; i < nparts; i++) {
        out[i].mhandle = parts[i].mhandle;
        out[i].address = parts[i].address;
        out[i].size = parts[i].size;
    }
    return ncclSuccess;
}

static ncclResult_t c10_iallgather(br_collnet_t *cn, void *coll_comm, void *send, int nparts,
                                   br_collnet_part_t *recv_parts, size_t bytes_per_rank,
                                   size_t window_off, size_t window_bytes, void *send_mh,
                                   void **request)
{
    ncclNetSGE_v10_t sge[BR_COLLNET_MAX_PARTS];

    BR_CHECK(c10_parts(cn, "iallgather", C10(cn)->iallgather != NULL, nparts, recv_parts, sge));
    return C10(cn)->iallgather(coll_comm, send, nparts, sge, bytes_per_rank, window_off,
                               window_bytes, send_mh, request);
}

static ncclResult_t c10_ireducescatter(br_collnet_t *cn, void *coll_comm, int nparts,
                                       br_collnet_part_t *send_parts, void *recv,
                                       size_t bytes_per_rank, size_t window_off,
                                       size_t window_bytes, ncclDataType_t type, ncclRedOp_t op,
                                       void *recv_mh, void **request)
{
    ncclNetSGE_v10_t sge[BR_COLLNET_MAX_PARTS];

    BR_CHECK(
        c10_parts(cn, "ireducescatter", C10(cn)->ireducescatter != NULL, nparts, send_parts, sge));
    return C10(cn)->ireducescatter(coll_comm, nparts, sge, recv, bytes_per_rank, window_off,
                                   window_bytes, type, op, recv_mh, request);
}

static ncclResult_t c10_test(br_collnet_t *cn, void *request, int *done, int *size)
{
    return C10(cn)->test(request, done, size);
}

static ncclResult_t c10_close_coll(br_collnet_t *cn, void *coll_comm)
{
    return C10(cn)->closeColl(coll_comm);
}

static ncclResult_t c10_close_listen(br_collnet_t *cn, void *listen_comm)
{
    return C10(cn)->closeListen(listen_comm);
}

static const br_collnet_ops_t c10_ops = {
    .get_properties = c10_get_properties,
    .listen = c10_listen,
    .connect = c10_connect,
    .reduce_support = c10_reduce_support,
    .reg_mr = c10_reg_mr,
    .dereg_mr = c10_dereg_mr,
    .iallreduce = c10_iallreduce,
    .iallgather = c10_iallgather,
    .ireducescatter = c10_ireducescatter,
    .test = c10_test,
    .close_coll = c10_close_coll,
    .close_listen = c10_close_listen,
};

static ncclResult_t c10_call_init(const void *exported)
{
    const ncclCollNet_v10_t *exp = exported;
    return exp->init(br_log_plugin);
}

static ncclResult_t c10_init(br_collnet_t *cn, br_collnet_state_t *st, uint64_t comm_hash,
                             char *why, size_t why_len, int *lied_p)
{
    const ncclCollNet_v10_t *exp = st->exported;
    const ncclCollNet_v10_t *t = &st->fn.v10;
    const char *missing;
    ncclResult_t res;

    *lied_p = 0;
    if (exp->init == NULL) {
        *lied_p = 1;
        snprintf(why, why_len, "ncclCollNetPlugin_v10.init is NULL");
        return ncclInternalError;
    }
    (void)comm_hash; /* process-wide init: no comm hash before v11 */
    res = br_collnet_shared_init(st, c10_call_init);
    if (res != ncclSuccess) {
        snprintf(why, why_len, "init failed: %s", br_plugin_result_str(res));
        return res;
    }
    /* Function pointers are read only now: a plugin may patch its table in init (the
     * SHARP plugin clears iallgather there). */
    st->fn.v10 = *exp;
    cn->has_iallgather = t->iallgather != NULL;
    cn->has_ireducescatter = t->ireducescatter != NULL;
    const br_net_member_t required[] = {
        BR_NET_MEMBER(t, devices),   BR_NET_MEMBER(t, getProperties), BR_NET_MEMBER(t, listen),
        BR_NET_MEMBER(t, connect),   BR_NET_MEMBER(t, reduceSupport), BR_NET_MEMBER(t, regMr),
        BR_NET_MEMBER(t, deregMr),   BR_NET_MEMBER(t, iallreduce),    BR_NET_MEMBER(t, test),
        BR_NET_MEMBER(t, closeColl), BR_NET_MEMBER(t, closeListen),   {NULL, NULL},
    };
    missing = br_net_first_missing(required);
    if (missing != NULL) {
        *lied_p = 1;
        snprintf(why, why_len, "ncclCollNetPlugin_v10.%s is NULL", missing);
        br_collnet_shared_fini(st);
        return ncclInternalError;
    }
    return ncclSuccess;
}

static ncclResult_t c10_fini(br_collnet_t *cn, br_collnet_state_t *st)
{
    (void)cn;
    br_collnet_shared_fini(st);
    return ncclSuccess;
}

const br_collnet_adapter_t br_collnet_adapter_v10 = {
    .ops = &c10_ops,
    .init = c10_init,
    .fini = c10_fini,
    .devices = c10_devices,
};
