/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CollNet ABI v9 adapter (NCCL 2.24): as v10 (process-wide init, no context, no
 * finalize); properties are the net v9 layout.
 */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "plugin_int.h"

#define C9(cn) (&br_collnet_state(cn)->fn.v9)

static ncclResult_t c9_devices(br_collnet_t *cn, int *ndev)
{
    return C9(cn)->devices(ndev);
}

static ncclResult_t c9_get_properties(br_collnet_t *cn, int dev, ncclNetProperties_v12_t *props)
{
    ncclNetProperties_v9_t p;

    memset(&p, 0, sizeof(p));
    BR_CHECK(C9(cn)->getProperties(dev, &p));
    br_net_props_v9(&p, dev, props);
    return ncclSuccess;
}

static ncclResult_t c9_listen(br_collnet_t *cn, int dev, void *handle, void **listen_comm)
{
    return C9(cn)->listen(dev, handle, listen_comm);
}

static ncclResult_t c9_connect(br_collnet_t *cn, void *handles[], int nranks, int rank,
                               void *listen_comm, void **coll_comm)
{
    return C9(cn)->connect(handles, nranks, rank, listen_comm, coll_comm);
}

static ncclResult_t c9_reduce_support(br_collnet_t *cn, ncclDataType_t type, ncclRedOp_t op,
                                      int *supported)
{
    return C9(cn)->reduceSupport(type, op, supported);
}

static ncclResult_t c9_reg_mr(br_collnet_t *cn, void *coll_comm, void *data, size_t size, int type,
                              void **mhandle)
{
    return C9(cn)->regMr(coll_comm, data, size, type, mhandle);
}

static ncclResult_t c9_dereg_mr(br_collnet_t *cn, void *coll_comm, void *mhandle)
{
    return C9(cn)->deregMr(coll_comm, mhandle);
}

static ncclResult_t c9_iallreduce(br_collnet_t *cn, void *coll_comm, void *send, void *recv,
                                  size_t count, ncclDataType_t type, ncclRedOp_t op, void *send_mh,
                                  void *recv_mh, void **request)
{
    return C9(cn)->iallreduce(coll_comm, send, recv, count, type, op, send_mh, recv_mh, request);
}

/* The parts, checked and converted to this version's scatter/gather type. */
static ncclResult_t c9_parts(br_collnet_t *cn, const char *call, int present, int nparts,
                             const br_collnet_part_t *parts, ncclNetSGE_v9_t *out)
{
    BR_CHECK(br_collnet_check_parts(cn, call, present, nparts, parts, 0));
    for (int i = 0; i < nparts; i++) {
        out[i].mhandle = parts[i].mhandle;
        out[i].address = parts[i].address;
        out[i].size = parts[i].size;
    }
    return ncclSuccess;
}

static ncclResult_t c9_iallgather(br_collnet_t *cn, void *coll_comm, void *send, int nparts,
                                  br_collnet_part_t *recv_parts, size_t bytes_per_rank,
                                  size_t window_off, size_t window_bytes, void *send_mh,
                                  void **request)
{
    ncclNetSGE_v9_t sge[BR_COLLNET_MAX_PARTS];

    BR_CHECK(c9_parts(cn, "iallgather", C9(cn)->iallgather != NULL, nparts, recv_parts, sge));
    return C9(cn)->iallgather(coll_comm, send, nparts, sge, bytes_per_rank, window_off,
                              window_bytes, send_mh, request);
}

static ncclResult_t c9_ireducescatter(br_collnet_t *cn, void *coll_comm, int nparts,
                                      br_collnet_part_t *send_parts, void *recv,
                                      size_t bytes_per_rank, size_t window_off, size_t window_bytes,
                                      ncclDataType_t type, ncclRedOp_t op, void *recv_mh,
                                      void **request)
{
    ncclNetSGE_v9_t sge[BR_COLLNET_MAX_PARTS];

    BR_CHECK(
        c9_parts(cn, "ireducescatter", C9(cn)->ireducescatter != NULL, nparts, send_parts, sge));
    return C9(cn)->ireducescatter(coll_comm, nparts, sge, recv, bytes_per_rank, window_off,
                                  window_bytes, type, op, recv_mh, request);
}

static ncclResult_t c9_test(br_collnet_t *cn, void *request, int *done, int *size)
{
    return C9(cn)->test(request, done, size);
}

static ncclResult_t c9_close_coll(br_collnet_t *cn, void *coll_comm)
{
    return C9(cn)->closeColl(coll_comm);
}

static ncclResult_t c9_close_listen(br_collnet_t *cn, void *listen_comm)
{
    return C9(cn)->closeListen(listen_comm);
}

static const br_collnet_ops_t c9_ops = {
    .get_properties = c9_get_properties,
    .listen = c9_listen,
    .connect = c9_connect,
    .reduce_support = c9_reduce_support,
    .reg_mr = c9_reg_mr,
    .dereg_mr = c9_dereg_mr,
    .iallreduce = c9_iallreduce,
    .iallgather = c9_iallgather,
    .ireducescatter = c9_ireducescatter,
    .test = c9_test,
    .close_coll = c9_close_coll,
    .close_listen = c9_close_listen,
};

static ncclResult_t c9_call_init(const void *exported)
{
    const ncclCollNet_v9_t *exp = exported;
    return exp->init(br_log_plugin);
}

static ncclResult_t c9_init(br_collnet_t *cn, br_collnet_state_t *st, uint64_t comm_hash, char *why,
                            size_t why_len, int *lied_p)
{
    const ncclCollNet_v9_t *exp = st->exported;
    const ncclCollNet_v9_t *t = &st->fn.v9;
    const char *missing;
    ncclResult_t res;

    *lied_p = 0;
    if (exp->init == NULL) {
        *lied_p = 1;
        snprintf(why, why_len, "ncclCollNetPlugin_v9.init is NULL");
        return ncclInternalError;
    }
    (void)comm_hash; /* process-wide init: no comm hash before v11 */
    res = br_collnet_shared_init(st, c9_call_init);
    if (res != ncclSuccess) {
        snprintf(why, why_len, "init failed: %s", br_plugin_result_str(res));
        return res;
    }
    /* Function pointers are read only now: a plugin may patch its table in init (the
     * SHARP plugin clears iallgather there). */
    st->fn.v9 = *exp;
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
        snprintf(why, why_len, "ncclCollNetPlugin_v9.%s is NULL", missing);
        br_collnet_shared_fini(st);
        return ncclInternalError;
    }
    return ncclSuccess;
}

static ncclResult_t c9_fini(br_collnet_t *cn, br_collnet_state_t *st)
{
    (void)cn;
    br_collnet_shared_fini(st);
    return ncclSuccess;
}

const br_collnet_adapter_t br_collnet_adapter_v9 = {
    .ops = &c9_ops,
    .init = c9_init,
    .fini = c9_fini,
    .devices = c9_devices,
};
