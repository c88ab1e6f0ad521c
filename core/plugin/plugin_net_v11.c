/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Net ABI v11 adapter (NCCL 2.28's current version). The function list is v12's; only
 * the properties differ: vProps holds 4 devices instead of 8, which moves every later
 * field, and railId/planeId do not exist. So calls forward to the plugin's table (copied
 * after its per-comm init) and properties are converted field by field.
 */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "plugin_int.h"

#define V11(net) (&br_net_state(net)->fn.v11)

static ncclResult_t v11_devices(br_net_t *net, int *ndev)
{
    return V11(net)->devices(ndev);
}

void br_net_props_v11(const ncclNetProperties_v11_t *p, int dev, ncclNetProperties_v12_t *props)
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
    for (int i = 0; i < p->vProps.ndevs && i < NCCL_NET_MAX_DEVS_PER_NIC_V11; i++) {
        props->vProps.devs[i] = p->vProps.devs[i];
    }
    props->maxP2pBytes = p->maxP2pBytes;
    props->maxCollBytes = p->maxCollBytes;
    props->maxMultiRequestSize = p->maxMultiRequestSize;
}

static ncclResult_t v11_get_properties(br_net_t *net, int dev, ncclNetProperties_v12_t *props)
{
    ncclNetProperties_v11_t p;

    memset(&p, 0, sizeof(p));
    BR_CHECK(V11(net)->getProperties(dev, &p));
    br_net_props_v11(&p, dev, props);
    return ncclSuccess;
}

static ncclResult_t v11_listen(br_net_t *net, int dev, void *handle, void **listen_comm)
{
    return V11(net)->listen(br_net_state(net)->ctx, dev, handle, listen_comm);
}

static ncclResult_t v11_connect(br_net_t *net, int dev, void *handle, void **send_comm)
{
    ncclNetDeviceHandle_v11_t *dev_handle = NULL;
    return V11(net)->connect(br_net_state(net)->ctx, dev, handle, send_comm, &dev_handle);
}

static ncclResult_t v11_accept(br_net_t *net, void *listen_comm, void **recv_comm)
{
    ncclNetDeviceHandle_v11_t *dev_handle = NULL;
    return V11(net)->accept(listen_comm, recv_comm, &dev_handle);
}

static ncclResult_t v11_reg_mr(br_net_t *net, void *comm, void *data, size_t size, int type,
                               void **mhandle)
{
    return V11(net)->regMr(comm, data, size, type, mhandle);
}

static ncclResult_t v11_dereg_mr(br_net_t *net, void *comm, void *mhandle)
{
    return V11(net)->deregMr(comm, mhandle);
}

static ncclResult_t v11_isend(br_net_t *net, void *send_comm, void *data, size_t size, int tag,
                              void *mhandle, void *phandle, void **request)
{
    return V11(net)->isend(send_comm, data, size, tag, mhandle, phandle, request);
}

static ncclResult_t v11_irecv(br_net_t *net, void *recv_comm, int n, void **data, size_t *sizes,
                              int *tags, void **mhandles, void **phandles, void **request)
{
    return V11(net)->irecv(recv_comm, n, data, sizes, tags, mhandles, phandles, request);
}

static ncclResult_t v11_test(br_net_t *net, void *request, int *done, int *sizes)
{
    return V11(net)->test(request, done, sizes);
}

static ncclResult_t v11_close_send(br_net_t *net, void *send_comm)
{
    return V11(net)->closeSend(send_comm);
}

static ncclResult_t v11_close_recv(br_net_t *net, void *recv_comm)
{
    return V11(net)->closeRecv(recv_comm);
}

static ncclResult_t v11_close_listen(br_net_t *net, void *listen_comm)
{
    return V11(net)->closeListen(listen_comm);
}

static ncclResult_t v11_irecv_consumed(br_net_t *net, void *recv_comm, int n, void *request)
{
    return V11(net)->irecvConsumed(recv_comm, n, request);
}

static const br_net_ops_t v11_ops = {
    .devices = v11_devices,
    .get_properties = v11_get_properties,
    .listen = v11_listen,
    .connect = v11_connect,
    .accept = v11_accept,
    .reg_mr = v11_reg_mr,
    .dereg_mr = v11_dereg_mr,
    .isend = v11_isend,
    .irecv = v11_irecv,
    .test = v11_test,
    .close_send = v11_close_send,
    .close_recv = v11_close_recv,
    .close_listen = v11_close_listen,
    .irecv_consumed = v11_irecv_consumed,
};

static ncclResult_t v11_init(br_net_t *net, br_net_state_t *st, const br_net_request_t *req,
                             char *why, size_t why_len)
{
    const ncclNet_v11_t *exp = st->exported;
    const ncclNet_v11_t *t = &st->fn.v11;
    const char *missing;
    ncclResult_t res;

    (void)net;
    if (exp->init == NULL) {
        snprintf(why, why_len, "ncclNetPlugin_v11.init is NULL");
        return ncclInternalError;
    }
    st->config.v11.trafficClass = req->traffic_class;
    res = exp->init(&st->ctx, req->comm_hash, &st->config.v11, br_log_plugin, br_net_prof_callback);
    if (res != ncclSuccess) {
        snprintf(why, why_len, "init failed: %s", br_plugin_result_str(res));
        return res;
    }
    /* Function pointers are read only now: a plugin may patch its table in init. */
    st->fn.v11 = *exp;
    const br_net_member_t required[] = {
        BR_NET_MEMBER(t, devices),     BR_NET_MEMBER(t, getProperties), BR_NET_MEMBER(t, listen),
        BR_NET_MEMBER(t, connect),     BR_NET_MEMBER(t, accept),        BR_NET_MEMBER(t, regMr),
        BR_NET_MEMBER(t, deregMr),     BR_NET_MEMBER(t, isend),         BR_NET_MEMBER(t, irecv),
        BR_NET_MEMBER(t, test),        BR_NET_MEMBER(t, closeSend),     BR_NET_MEMBER(t, closeRecv),
        BR_NET_MEMBER(t, closeListen), BR_NET_MEMBER(t, finalize),      {NULL, NULL},
    };
    missing = br_net_first_missing(required);
    if (missing != NULL) {
        snprintf(why, why_len, "ncclNetPlugin_v11.%s is NULL", missing);
        if (t->finalize != NULL) {
            (void)t->finalize(st->ctx);
        }
        return ncclInternalError;
    }
    return ncclSuccess;
}

static ncclResult_t v11_fini(br_net_t *net, br_net_state_t *st)
{
    (void)net;
    return st->fn.v11.finalize(st->ctx);
}

static int v11_has_irecv_consumed(const br_net_state_t *st)
{
    return st->fn.v11.irecvConsumed != NULL;
}

const br_net_adapter_t br_net_adapter_v11 = {
    .ops = &v11_ops,
    .init = v11_init,
    .fini = v11_fini,
    .has_irecv_consumed = v11_has_irecv_consumed,
};
