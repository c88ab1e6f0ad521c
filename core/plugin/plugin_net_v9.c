/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Net ABI v9 adapter (NCCL 2.24). As for v10, init is process-wide (logger only) and
 * emulated per comm with a count; connect takes no config (the traffic class is dropped),
 * isend/irecv take no profiler handles (dropped), and properties gain
 * maxMultiRequestSize 1 and railId/planeId -1.
 */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "plugin_int.h"

#define V9(net) (&br_net_state(net)->fn.v9)

static ncclResult_t v9_devices(br_net_t *net, int *ndev)
{
    return V9(net)->devices(ndev);
}

void br_net_props_v9(const ncclNetProperties_v9_t *p, int dev, ncclNetProperties_v12_t *props)
{
    br_net_props_defaults(props, dev);
    props->name = p->name;
    props->pciPath = p->pciPath;
    props->guid = p->guid;
    props->ptrSupport = p->ptrSupport;
    props->regIsGlobal = p->regIsGlobal;
    props->forceFlush = p->forceFlush;
    props->speed = p->speed;
    props->port = p->port;
    props->latency = p->latency;
    props->maxComms = p->maxComms;
    props->maxRecvs = p->maxRecvs;
    props->netDeviceType = p->netDeviceType;
    props->netDeviceVersion = p->netDeviceVersion;
    props->vProps.ndevs = p->vProps.ndevs;
    for (int i = 0; i < p->vProps.ndevs && i < NCCL_NET_MAX_DEVS_PER_NIC_V9; i++) {
        props->vProps.devs[i] = p->vProps.devs[i];
    }
    props->maxP2pBytes = p->maxP2pBytes;
    props->maxCollBytes = p->maxCollBytes;
}

static ncclResult_t v9_get_properties(br_net_t *net, int dev, ncclNetProperties_v12_t *props)
{
    ncclNetProperties_v9_t p;

    memset(&p, 0, sizeof(p));
    BR_CHECK(V9(net)->getProperties(dev, &p));
    br_net_props_v9(&p, dev, props);
    return ncclSuccess;
}

static ncclResult_t v9_listen(br_net_t *net, int dev, void *handle, void **listen_comm)
{
    return V9(net)->listen(dev, handle, listen_comm);
}

static ncclResult_t v9_connect(br_net_t *net, int dev, void *handle, void **send_comm)
{
    ncclNetDeviceHandle_v9_t *dev_handle = NULL;
    return V9(net)->connect(dev, handle, send_comm, &dev_handle);
}

static ncclResult_t v9_accept(br_net_t *net, void *listen_comm, void **recv_comm)
{
    ncclNetDeviceHandle_v9_t *dev_handle = NULL;
    return V9(net)->accept(listen_comm, recv_comm, &dev_handle);
}

static ncclResult_t v9_reg_mr(br_net_t *net, void *comm, void *data, size_t size, int type,
                              void **mhandle)
{
    return V9(net)->regMr(comm, data, size, type, mhandle);
}

static ncclResult_t v9_dereg_mr(br_net_t *net, void *comm, void *mhandle)
{
    return V9(net)->deregMr(comm, mhandle);
}

static ncclResult_t v9_isend(br_net_t *net, void *send_comm, void *data, size_t size, int tag,
                             void *mhandle, void *phandle, void **request)
{
    (void)phandle; /* v9 has no profiler handles */
    return V9(net)->isend(send_comm, data, size, tag, mhandle, request);
}

static ncclResult_t v9_irecv(br_net_t *net, void *recv_comm, int n, void **data, size_t *sizes,
                             int *tags, void **mhandles, void **phandles, void **request)
{
    (void)phandles; /* v9 has no profiler handles */
    return V9(net)->irecv(recv_comm, n, data, sizes, tags, mhandles, request);
}

static ncclResult_t v9_test(br_net_t *net, void *request, int *done, int *sizes)
{
    return V9(net)->test(request, done, sizes);
}

static ncclResult_t v9_close_send(br_net_t *net, void *send_comm)
{
    return V9(net)->closeSend(send_comm);
}

static ncclResult_t v9_close_recv(br_net_t *net, void *recv_comm)
{
    return V9(net)->closeRecv(recv_comm);
}

static ncclResult_t v9_close_listen(br_net_t *net, void *listen_comm)
{
    return V9(net)->closeListen(listen_comm);
}

static ncclResult_t v9_irecv_consumed(br_net_t *net, void *recv_comm, int n, void *request)
{
    return V9(net)->irecvConsumed(recv_comm, n, request);
}

static const br_net_ops_t v9_ops = {
    .devices = v9_devices,
    .get_properties = v9_get_properties,
    .listen = v9_listen,
    .connect = v9_connect,
    .accept = v9_accept,
    .reg_mr = v9_reg_mr,
    .dereg_mr = v9_dereg_mr,
    .isend = v9_isend,
    .irecv = v9_irecv,
    .test = v9_test,
    .close_send = v9_close_send,
    .close_recv = v9_close_recv,
    .close_listen = v9_close_listen,
    .irecv_consumed = v9_irecv_consumed,
};

static ncclResult_t v9_call_init(const void *exported)
{
    const ncclNet_v9_t *exp = exported;
    return exp->init(br_log_plugin);
}

static ncclResult_t v9_init(br_net_t *net, br_net_state_t *st, const br_net_request_t *req,
                            char *why, size_t why_len)
{
    const ncclNet_v9_t *exp = st->exported;
    const ncclNet_v9_t *t = &st->fn.v9;
    const char *missing;
    ncclResult_t res;

    (void)net;
    if (exp->init == NULL) {
        snprintf(why, why_len, "ncclNetPlugin_v9.init is NULL");
        return ncclInternalError;
    }
    (void)req; /* v9 knows neither comm hash nor traffic class */
    res = br_net_shared_init(st, v9_call_init);
    if (res != ncclSuccess) {
        snprintf(why, why_len, "init failed: %s", br_plugin_result_str(res));
        return res;
    }
    st->fn.v9 = *exp;
    const br_net_member_t required[] = {
        BR_NET_MEMBER(t, devices),     BR_NET_MEMBER(t, getProperties),
        BR_NET_MEMBER(t, listen),      BR_NET_MEMBER(t, connect),
        BR_NET_MEMBER(t, accept),      BR_NET_MEMBER(t, regMr),
        BR_NET_MEMBER(t, deregMr),     BR_NET_MEMBER(t, isend),
        BR_NET_MEMBER(t, irecv),       BR_NET_MEMBER(t, test),
        BR_NET_MEMBER(t, closeSend),   BR_NET_MEMBER(t, closeRecv),
        BR_NET_MEMBER(t, closeListen), {NULL, NULL},
    };
    missing = br_net_first_missing(required);
    if (missing != NULL) {
        snprintf(why, why_len, "ncclNetPlugin_v9.%s is NULL", missing);
        br_net_shared_fini(st);
        return ncclInternalError;
    }
    return ncclSuccess;
}

static ncclResult_t v9_fini(br_net_t *net, br_net_state_t *st)
{
    (void)net;
    br_net_shared_fini(st);
    return ncclSuccess;
}

static int v9_has_irecv_consumed(const br_net_state_t *st)
{
    return st->fn.v9.irecvConsumed != NULL;
}

const br_net_adapter_t br_net_adapter_v9 = {
    .ops = &v9_ops,
    .init = v9_init,
    .fini = v9_fini,
    .has_irecv_consumed = v9_has_irecv_consumed,
};
