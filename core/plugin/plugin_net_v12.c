/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Net ABI v12 adapter: the internal table has v12 semantics, so every call forwards to
 * the plugin's table (copied after its per-comm init) with the per-comm context added
 * where v12 takes it. Device-offload handles are requested as "host only" (pointer to
 * NULL) and ignored.
 */
#include <stdio.h>

#include "check.h"
#include "plugin_int.h"

#define V12(net) (&br_net_state(net)->fn.v12)

static ncclResult_t v12_devices(br_net_t *net, int *ndev)
{
    return V12(net)->devices(ndev);
}

static ncclResult_t v12_get_properties(br_net_t *net, int dev, ncclNetProperties_v12_t *props)
{
    return V12(net)->getProperties(dev, props);
}

static ncclResult_t v12_listen(br_net_t *net, int dev, void *handle, void **listen_comm)
{
    return V12(net)->listen(br_net_state(net)->ctx, dev, handle, listen_comm);
}

static ncclResult_t v12_connect(br_net_t *net, int dev, void *handle, void **send_comm)
{
    ncclNetDeviceHandle_v12_t *dev_handle = NULL;
    return V12(net)->connect(br_net_state(net)->ctx, dev, handle, send_comm, &dev_handle);
}

static ncclResult_t v12_accept(br_net_t *net, void *listen_comm, void **recv_comm)
{
    ncclNetDeviceHandle_v12_t *dev_handle = NULL;
    return V12(net)->accept(listen_comm, recv_comm, &dev_handle);
}

static ncclResult_t v12_reg_mr(br_net_t *net, void *comm, void *data, size_t size, int type,
                               void **mhandle)
{
    return V12(net)->regMr(comm, data, size, type, mhandle);
}

static ncclResult_t v12_dereg_mr(br_net_t *net, void *comm, void *mhandle)
{
    return V12(net)->deregMr(comm, mhandle);
}

static ncclResult_t v12_isend(br_net_t *net, void *send_comm, void *data, size_t size, int tag,
                              void *mhandle, void *phandle, void **request)
{
    return V12(net)->isend(send_comm, data, size, tag, mhandle, phandle, request);
}

static ncclResult_t v12_irecv(br_net_t *net, void *recv_comm, int n, void **data, size_t *sizes,
                              int *tags, void **mhandles, void **phandles, void **request)
{
    return V12(net)->irecv(recv_comm, n, data, sizes, tags, mhandles, phandles, request);
}

static ncclResult_t v12_test(br_net_t *net, void *request, int *done, int *sizes)
{
    return V12(net)->test(request, done, sizes);
}

static ncclResult_t v12_close_send(br_net_t *net, void *send_comm)
{
    return V12(net)->closeSend(send_comm);
}

static ncclResult_t v12_close_recv(br_net_t *net, void *recv_comm)
{
    return V12(net)->closeRecv(recv_comm);
}

static ncclResult_t v12_close_listen(br_net_t *net, void *listen_comm)
{
    return V12(net)->closeListen(listen_comm);
}

static ncclResult_t v12_irecv_consumed(br_net_t *net, void *recv_comm, int n, void *request)
{
    return V12(net)->irecvConsumed(recv_comm, n, request);
}

static const br_net_ops_t v12_ops = {
    .devices = v12_devices,
    .get_properties = v12_get_properties,
    .listen = v12_listen,
    .connect = v12_connect,
    .accept = v12_accept,
    .reg_mr = v12_reg_mr,
    .dereg_mr = v12_dereg_mr,
    .isend = v12_isend,
    .irecv = v12_irecv,
    .test = v12_test,
    .close_send = v12_close_send,
    .close_recv = v12_close_recv,
    .close_listen = v12_close_listen,
    .irecv_consumed = v12_irecv_consumed,
};

static ncclResult_t v12_init(br_net_t *net, br_net_state_t *st, const br_net_request_t *req,
                             char *why, size_t why_len)
{
    const ncclNet_v12_t *exp = st->exported;
    const ncclNet_v12_t *t = &st->fn.v12;
    const char *missing;
    ncclResult_t res;

    (void)net;
    if (exp->init == NULL) {
        snprintf(why, why_len, "ncclNetPlugin_v12.init is NULL");
        return ncclInternalError;
    }
    st->config.v12.trafficClass = req->traffic_class;
    res = exp->init(&st->ctx, req->comm_hash, &st->config.v12, br_log_plugin, br_net_prof_callback);
    if (res != ncclSuccess) {
        snprintf(why, why_len, "init failed: %s", br_plugin_result_str(res));
        return res;
    }
    /* Function pointers are read only now: a plugin may patch its table in init. */
    st->fn.v12 = *exp;
    const br_net_member_t required[] = {
        BR_NET_MEMBER(t, devices),     BR_NET_MEMBER(t, getProperties), BR_NET_MEMBER(t, listen),
        BR_NET_MEMBER(t, connect),     BR_NET_MEMBER(t, accept),        BR_NET_MEMBER(t, regMr),
        BR_NET_MEMBER(t, deregMr),     BR_NET_MEMBER(t, isend),         BR_NET_MEMBER(t, irecv),
        BR_NET_MEMBER(t, test),        BR_NET_MEMBER(t, closeSend),     BR_NET_MEMBER(t, closeRecv),
        BR_NET_MEMBER(t, closeListen), BR_NET_MEMBER(t, finalize),      {NULL, NULL},
    };
    missing = br_net_first_missing(required);
    if (missing != NULL) {
        snprintf(why, why_len, "ncclNetPlugin_v12.%s is NULL", missing);
        if (t->finalize != NULL) {
            (void)t->finalize(st->ctx);
        }
        return ncclInternalError;
    }
    return ncclSuccess;
}

static ncclResult_t v12_fini(br_net_t *net, br_net_state_t *st)
{
    (void)net;
    return st->fn.v12.finalize(st->ctx);
}

static int v12_has_irecv_consumed(const br_net_state_t *st)
{
    return st->fn.v12.irecvConsumed != NULL;
}

const br_net_adapter_t br_net_adapter_v12 = {
    .ops = &v12_ops,
    .init = v12_init,
    .fini = v12_fini,
    .has_irecv_consumed = v12_has_irecv_consumed,
};
