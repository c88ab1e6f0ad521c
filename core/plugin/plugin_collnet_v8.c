/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CollNet ABI v8 adapter (NCCL 2.20), the oldest Braid loads: as v9, and iallreduce's
 * count is an int, so it is range-checked and narrowed (a count above INT_MAX fails with
 * ncclInternalError instead of being truncated); properties are the net v8 layout with
 * NCCL's defaults for what it lacks (maxCollBytes 512 MiB), and the device type is taken
 * as host, as NCCL does for v8 collnet. iallgather / ireducescatter parts have a 32-bit
 * size in v8: each is range-checked the same way (ncclInternalError, never truncated).
 */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "plugin_int.h"

#define C8(cn) (&br_collnet_state(cn)->fn.v8)

static ncclResult_t c8_devices(br_collnet_t *cn, int *ndev)
{
    return C8(cn)->devices(ndev);
}

static ncclResult_t c8_get_properties(br_collnet_t *cn, int dev, ncclNetProperties_v12_t *props)
{
    ncclNetProperties_v8_t p;

    memset(&p, 0, sizeof(p));
    BR_CHECK(C8(cn)->getProperties(dev, &p));
    br_net_props_v8(&p, dev, props);
    props->netDeviceType = NCCL_NET_DEVICE_HOST; /* NCCL's view of v8 collnet */
    props->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
    return ncclSuccess;
}

static ncclResult_t c8_listen(br_collnet_t *cn, int dev, void *handle, void **listen_comm)
{
    return C8(cn)->listen(dev, handle, listen_comm);
}

static ncclResult_t c8_connect(br_collnet_t *cn, void *handles[], int nranks, int rank,
                               void *listen_comm, void **coll_comm)
{
    return C8(cn)->connect(handles, nranks, rank, listen_comm, coll_comm);
}

static ncclResult_t c8_reduce_support(br_collnet_t *cn, ncclDataType_t type, ncclRedOp_t op,
                                      int *supported)
{
    return C8(cn)->reduceSupport(type, op, supported);
}

static ncclResult_t c8_reg_mr(br_collnet_t *cn, void *coll_comm, void *data, size_t size, int type,
                              void **mhandle)
{
    return C8(cn)->regMr(coll_comm, data, size, type, mhandle);
}

static ncclResult_t c8_dereg_mr(br_collnet_t *cn, void *coll_comm, void *mhandle)
{
    return C8(cn)->deregMr(coll_comm, mhandle);
}

static ncclResult_t c8_iallreduce(br_collnet_t *cn, void *coll_comm, void *send, void *recv,
                                  size_t count, ncclDataType_t type, ncclRedOp_t op, void *send_mh,
                                  void *recv_mh, void **request)
{
    int n;

    BR_CHECK(br_collnet_narrow_count(cn, count, &n));
    return C8(cn)->iallreduce(coll_comm, send, recv, n, type, op, send_mh, recv_mh, request);
}

/* The parts, checked and converted to this version's scatter/gather type. */
static ncclResult_t c8_parts(br_collnet_t *cn, const char *call, int present, int nparts,
                             const br_collnet_part_t *parts, ncclNetSGE_v8_t *out)
{
    BR_CHECK(br_collnet_check_parts(cn, call, present, nparts, parts, 1));
    for (int i = 0; i < nparts; i++) {
        out[i].mhandle = parts[i].mhandle;
        out[i].address = parts[i].address;
        out[i].size = (uint32_t)parts[i].size;
    }
    return ncclSuccess;
}

static ncclResult_t c8_iallgather(br_collnet_t *cn, void *coll_comm, void *send, int nparts,
                                  br_collnet_part_t *recv_parts, size_t bytes_per_rank,
                                  size_t window_off, size_t window_bytes, void *send_mh,
                                  void **request)
{
    ncclNetSGE_v8_t sge[BR_COLLNET_MAX_PARTS];

    BR_CHECK(c8_parts(cn, "iallgather", C8(cn)->iallgather != NULL, nparts, recv_parts, sge));
    return C8(cn)->iallgather(coll_comm, send, nparts, sge, bytes_per_rank, window_off,
                              window_bytes, send_mh, request);
}

static ncclResult_t c8_ireducescatter(br_collnet_t *cn, void *coll_comm, int nparts,
                                      br_collnet_part_t *send_parts, void *recv,
                                      size_t bytes_per_rank, size_t window_off, size_t window_bytes,
                                      ncclDataType_t type, ncclRedOp_t op, void *recv_mh,
                                      void **request)
{
    ncclNetSGE_v8_t sge[BR_COLLNET_MAX_PARTS];

    BR_CHECK(
        c8_parts(cn, "ireducescatter", C8(cn)->ireducescatter != NULL, nparts, send_parts, sge));
    return C8(cn)->ireducescatter(coll_comm, nparts, sge, recv, bytes_per_rank, window_off,
                                  window_bytes, type, op, recv_mh, request);
}

static ncclResult_t c8_test(br_collnet_t *cn, void *request, int *done, int *size)
{
    return C8(cn)->test(request, done, size);
}

static ncclResult_t c8_close_coll(br_collnet_t *cn, void *coll_comm)
{
    return C8(cn)->closeColl(coll_comm);
}

static ncclResult_t c8_close_listen(br_collnet_t *cn, void *listen_comm)
{
    return C8(cn)->closeListen(listen_comm);
}

static const br_collnet_ops_t c8_ops = {
    .get_properties = c8_get_properties,
    .listen = c8_listen,
    .connect = c8_connect,
    .reduce_support = c8_reduce_support,
    .reg_mr = c8_reg_mr,
    .dereg_mr = c8_dereg_mr,
    .iallreduce = c8_iallreduce,
    .iallgather = c8_iallgather,
    .ireducescatter = c8_ireducescatter,
    .test = c8_test,
    .close_coll = c8_close_coll,
    .close_listen = c8_close_listen,
};

static ncclResult_t c8_call_init(const void *exported)
{
    const ncclCollNet_v8_t *exp = exported;
    return exp->init(br_log_plugin);
}

static ncclResult_t c8_init(br_collnet_t *cn, br_collnet_state_t *st, uint64_t comm_hash, char *why,
                            size_t why_len, int *lied_p)
{
    const ncclCollNet_v8_t *exp = st->exported;
    const ncclCollNet_v8_t *t = &st->fn.v8;
    const char *missing;
    ncclResult_t res;

    *lied_p = 0;
    if (exp->init == NULL) {
        *lied_p = 1;
        snprintf(why, why_len, "ncclCollNetPlugin_v8.init is NULL");
        return ncclInternalError;
    }
    (void)comm_hash; /* process-wide init: no comm hash before v11 */
    res = br_collnet_shared_init(st, c8_call_init);
    if (res != ncclSuccess) {
        snprintf(why, why_len, "init failed: %s", br_plugin_result_str(res));
        return res;
    }
    /* Function pointers are read only now: a plugin may patch its table in init (the
     * SHARP plugin clears iallgather there). */
    st->fn.v8 = *exp;
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
        snprintf(why, why_len, "ncclCollNetPlugin_v8.%s is NULL", missing);
        br_collnet_shared_fini(st);
        return ncclInternalError;
    }
    return ncclSuccess;
}

static ncclResult_t c8_fini(br_collnet_t *cn, br_collnet_state_t *st)
{
    (void)cn;
    br_collnet_shared_fini(st);
    return ncclSuccess;
}

const br_collnet_adapter_t br_collnet_adapter_v8 = {
    .ops = &c8_ops,
    .init = c8_init,
    .fini = c8_fini,
    .devices = c8_devices,
};
