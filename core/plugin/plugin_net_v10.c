/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Net ABI v10 adapter (NCCL 2.26). What NCCL fills for a v10 plugin, this fills too:
 * init is process-wide (logger and profiler callback), so it runs once per library while
 * any comm holds it and later comms only count; the comm's traffic class lives in this
 * load's state and travels with every connect; properties gain maxMultiRequestSize 1
 * and railId/planeId -1. There is no finalize.
 */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "plugin_int.h"

#define V10(net) (&br_net_state(net)->fn.v10)

static ncclResult_t v10_devices(br_net_t *net, int *ndev)
{
    return V10(net)->devices(ndev);
}

void br_net_props_v10(const ncclNetProperties_v10_t *p, int dev, ncclNetProperties_v12_t *props)
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
    for (int i = 0; i < p->vProps.ndevs && i < NCCL_NET_MAX_DEVS_PER_NIC_V10; i++) {
        props->vProps.devs[i] = p->vProps.devs[i];
    }
    props->maxP2pBytes = p->maxP2pBytes;
    props->maxCollBytes = p->maxCollBytes;
}

static ncclResult_t v10_get_properties(br_net_t *net, int dev, ncclNetProperties_v12_t *props)
{
    ncclNetProperties_v10_t p;

    memset(&p, 0, sizeof(p));
    BR_CHECK(V10(net)->getProperties(dev, &p));
    br_net_props_v10(&p, dev, props);
    return ncclSuccess;
}

static ncclResult_t v10_listen(br_net_t *net, int dev, void *handle, void **listen_comm)
{
    return V10(net)->listen(dev, handle, listen_comm);
}

static ncclResult_t v10_connect(br_net_t *net, int dev, void *handle, void **send_comm)
{
    ncclNetDeviceHandle_v10_t *dev_handle = NULL;
    return V10(net)->connect(dev, &br_net_state(net)->config.v10, handle, send_comm, &dev_handle);
}

static ncclResult_t v10_accept(br_net_t *net, void *listen_comm, void **recv_comm)
{
    ncclNetDeviceHandle_v10_t *dev_handle = NULL;
    return V10(net)->accept(listen_comm, recv_comm, &dev_handle);
}

static ncclResult_t v10_reg_mr(br_net_t *net, void *comm, void *data, size_t size, int type,
                               void **mhandle)
{
    return V10(net)->regMr(comm, data, size, type, mhandle);
}

static ncclResult_t v10_dereg_mr(br_net_t *net, void *comm, void *mhandle)
{
    return V10(net)->deregMr(comm, mhandle);
}

static ncclResult_t v10_isend(br_net_t *net, void *send_comm, void *data, size_t size, int tag,
                              void *mhandle, void *phandle, void **request)
{
    return V10(net)->isend(send_comm, data, size, tag, mhandle, phandle, request);
}

static ncclResult_t v10_irecv(br_net_t *net, void *recv_comm, int n, void **data, size_t *sizes,
                              int *tags, void **mhandles, void **phandles, void **request)
{
    return V10(net)->irecv(recv_comm, n, data, sizes, tags, mhandles, phandles, request);
}

static ncclResult_t v10_test(br_net_t *net, void *request, int *done, int *sizes)
{
    return V10(net)->test(request, done, sizes);
}

static ncclResult_t v10_close_send(br_net_t *net, void *send_comm)
{
    return V10(net)->closeSend(send_comm);
}

static ncclResult_t v10_close_recv(br_net_t *net, void *recv_comm)
{
    return V10(net)->closeRecv(recv_comm);
}

static ncclResult_t v10_close_listen(br_net_t *net, void *listen_comm)
{
    return V10(net)->closeListen(listen_comm);
}

static ncclResult_t v10_irecv_consumed(br_net_t *net, void *recv_comm, int n, void *request)
{
    return V10(net)->irecvConsumed(recv_comm, n, request);
}

static const br_net_ops_t v10_ops = {
    .devices = v10_devices,
    .get_properties = v10_get_properties,
    .listen = v10_listen,
    .connect = v10_connect,
    .accept = v10_accept,
    .reg_mr = v10_reg_mr,
    .dereg_mr = v10_dereg_mr,
    .isend = v10_isend,
    .irecv = v10_irecv,
    .test = v10_test,
    .close_send = v10_close_send,
    .close_recv = v10_close_recv,
    .close_listen = v10_close_listen,
    .irecv_consumed = v10_irecv_consumed,
};

static ncclResult_t v10_call_init(const void *exported)
{
    const ncclNet_v10_t *exp = exported;
    return exp->init(br_log_plugin, br_net_prof_callback);
}

static ncclResult_t v10_init(br_net_t *net, br_net_state_t *st, const br_net_request_t *req,
                             char *why, size_t why_len)
{
    const ncclNet_v10_t *exp = st->exported;
    const ncclNet_v10_t *t = &st->fn.v10;
    const char *missing;
    ncclResult_t res;

    (void)net;
    if (exp->init == NULL) {
        snprintf(why, why_len, "ncclNetPlugin_v10.init is NULL");
        return ncclInternalError;
    }
    st->config.v10.trafficClass = req->traffic_class;
    res = br_net_shared_init(st, v10_call_init);
    if (res != ncclSuccess) {
        snprintf(why, why_len, "init failed: %s", br_plugin_result_str(res));
        return res;
    }
    st->fn.v10 = *exp;
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
        snprintf(why, why_len, "ncclNetPlugin_v10.%s is NULL", missing);
        br_net_shared_fini(st);
        return ncclInternalError;
    }
    return ncclSuccess;
}

static ncclResult_t v10_fini(br_net_t *net, br_net_state_t *st)
{
    (void)net;
    br_net_shared_fini(st);
    return ncclSuccess;
}

static int v10_has_irecv_consumed(const br_net_state_t *st)
{
    return st->fn.v10.irecvConsumed != NULL;
}

const br_net_adapter_t br_net_adapter_v10 = {
    .ops = &v10_ops,
    .init = v10_init,
    .fini = v10_fini,
    .has_irecv_consumed = v10_has_irecv_consumed,
};
