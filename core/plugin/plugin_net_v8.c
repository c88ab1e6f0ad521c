/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Net ABI v8 adapter (NCCL 2.20), the oldest Braid loads. On top of v9's emulation
 * (process-wide init, no traffic class, no profiler handles): isend/irecv sizes are int,
 * so each size_t is range-checked against 1 GiB (NCCL's MAX_NET_SIZE, the maxP2pBytes
 * assumed for v8) and narrowed, and a larger one fails with ncclInternalError instead of
 * being truncated; the optional-receive-completion hint is cleared before irecv, since
 * v8 plugins predate it; properties lack forceFlush, vProps and the size limits, which
 * get NCCL's defaults.
 */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "plugin_int.h"

#define V8(net) (&br_net_state(net)->fn.v8)

static ncclResult_t v8_devices(br_net_t *net, int *ndev)
{
    return V8(net)->devices(ndev);
}

void br_net_props_v8(const ncclNetProperties_v8_t *p, int dev, ncclNetProperties_v12_t *props)
{
    br_net_props_defaults(props, dev);
    props->name = p->name;
    props->pciPath = p->pciPath;
    props->guid = p->guid;
    props->ptrSupport = p->ptrSupport;
    props->regIsGlobal = p->regIsGlobal;
    props->speed = p->speed;
    props->port = p->port;
    props->latency = p->latency;
    props->maxComms = p->maxComms;
    props->maxRecvs = p->maxRecvs;
    props->netDeviceType = p->netDeviceType;
    props->netDeviceVersion = p->netDeviceVersion;
}

static ncclResult_t v8_get_properties(br_net_t *net, int dev, ncclNetProperties_v12_t *props)
{
    ncclNetProperties_v8_t p;

    memset(&p, 0, sizeof(p));
    BR_CHECK(V8(net)->getProperties(dev, &p));
    br_net_props_v8(&p, dev, props);
    return ncclSuccess;
}

static ncclResult_t v8_listen(br_net_t *net, int dev, void *handle, void **listen_comm)
{
    return V8(net)->listen(dev, handle, listen_comm);
}

static ncclResult_t v8_connect(br_net_t *net, int dev, void *handle, void **send_comm)
{
    ncclNetDeviceHandle_v8_t *dev_handle = NULL;
    return V8(net)->connect(dev, handle, send_comm, &dev_handle);
}

static ncclResult_t v8_accept(br_net_t *net, void *listen_comm, void **recv_comm)
{
    ncclNetDeviceHandle_v8_t *dev_handle = NULL;
    return V8(net)->accept(listen_comm, recv_comm, &dev_handle);
}

static ncclResult_t v8_reg_mr(br_net_t *net, void *comm, void *data, size_t size, int type,
                              void **mhandle)
{
    return V8(net)->regMr(comm, data, size, type, mhandle);
}

static ncclResult_t v8_dereg_mr(br_net_t *net, void *comm, void *mhandle)
{
    return V8(net)->deregMr(comm, mhandle);
}

static ncclResult_t v8_isend(br_net_t *net, void *send_comm, void *data, size_t size, int tag,
                             void *mhandle, void *phandle, void **request)
{
    (void)phandle; /* v8 has no profiler handles */
    if (size > BR_NET_V8_MAX_SIZE) {
        BR_WARN(NCCL_NET,
                "NET/Plugin: isend of %zu bytes exceeds the 1 GiB a v8 net plugin "
                "(%s) accepts",
                size, net->name);
        return ncclInternalError;
    }
    return V8(net)->isend(send_comm, data, (int)size, tag, mhandle, request);
}

static ncclResult_t v8_irecv(br_net_t *net, void *recv_comm, int n, void **data, size_t *sizes,
                             int *tags, void **mhandles, void **phandles, void **request)
{
    int isizes[BR_NET_MAX_RECVS];

    (void)phandles; /* v8 has no profiler handles */
    if (n < 0 || n > BR_NET_MAX_RECVS) {
        BR_WARN(NCCL_NET, "NET/Plugin: irecv of %d buffers; at most %d are supported", n,
                BR_NET_MAX_RECVS);
        return ncclInternalError;
    }
    for (int i = 0; i < n; i++) {
        if (sizes[i] > BR_NET_V8_MAX_SIZE) {
            BR_WARN(NCCL_NET,
                    "NET/Plugin: irecv buffer %d of %zu bytes exceeds the 1 GiB a v8 "
                    "net plugin (%s) accepts",
                    i, sizes[i], net->name);
            return ncclInternalError;
        }
        isizes[i] = (int)sizes[i];
    }
    /* v8 plugins predate NCCL_NET_OPTIONAL_RECV_COMPLETION: no hint in *request. */
    *request = NULL;
    return V8(net)->irecv(recv_comm, n, data, isizes, tags, mhandles, request);
}

static ncclResult_t v8_test(br_net_t *net, void *request, int *done, int *sizes)
{
    return V8(net)->test(request, done, sizes);
}

static ncclResult_t v8_close_send(br_net_t *net, void *send_comm)
{
    return V8(net)->closeSend(send_comm);
}

static ncclResult_t v8_close_recv(br_net_t *net, void *recv_comm)
{
    return V8(net)->closeRecv(recv_comm);
}

static ncclResult_t v8_close_listen(br_net_t *net, void *listen_comm)
{
    return V8(net)->closeListen(listen_comm);
}

static ncclResult_t v8_irecv_consumed(br_net_t *net, void *recv_comm, int n, void *request)
{
    return V8(net)->irecvConsumed(recv_comm, n, request);
}

static const br_net_ops_t v8_ops = {
    .devices = v8_devices,
    .get_properties = v8_get_properties,
    .listen = v8_listen,
    .connect = v8_connect,
    .accept = v8_accept,
    .reg_mr = v8_reg_mr,
    .dereg_mr = v8_dereg_mr,
    .isend = v8_isend,
    .irecv = v8_irecv,
    .test = v8_test,
    .close_send = v8_close_send,
    .close_recv = v8_close_recv,
    .close_listen = v8_close_listen,
    .irecv_consumed = v8_irecv_consumed,
};

static ncclResult_t v8_call_init(const void *exported)
{
    const ncclNet_v8_t *exp = exported;
    return exp->init(br_log_plugin);
}

static ncclResult_t v8_init(br_net_t *net, br_net_state_t *st, const br_net_request_t *req,
                            char *why, size_t why_len)
{
    const ncclNet_v8_t *exp = st->exported;
    const ncclNet_v8_t *t = &st->fn.v8;
    const char *missing;
    ncclResult_t res;

    (void)net;
    if (exp->init == NULL) {
        snprintf(why, why_len, "ncclNetPlugin_v8.init is NULL");
        return ncclInternalError;
    }
    (void)req; /* v8 knows neither comm hash nor traffic class */
    res = br_net_shared_init(st, v8_call_init);
    if (res != ncclSuccess) {
        snprintf(why, why_len, "init failed: %s", br_plugin_result_str(res));
        return res;
    }
    st->fn.v8 = *exp;
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
        snprintf(why, why_len, "ncclNetPlugin_v8.%s is NULL", missing);
        br_net_shared_fini(st);
        return ncclInternalError;
    }
    return ncclSuccess;
}

static ncclResult_t v8_fini(br_net_t *net, br_net_state_t *st)
{
    (void)net;
    br_net_shared_fini(st);
    return ncclSuccess;
}

static int v8_has_irecv_consumed(const br_net_state_t *st)
{
    return st->fn.v8.irecvConsumed != NULL;
}

const br_net_adapter_t br_net_adapter_v8 = {
    .ops = &v8_ops,
    .init = v8_init,
    .fini = v8_fini,
    .has_irecv_consumed = v8_has_irecv_consumed,
};
