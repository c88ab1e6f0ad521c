/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The net-ofi plugin's ABI surface: ncclNetPlugin_v12, _v11 and _v10, named "OFI".
 * v12/v11 init makes one context per communicator; v10 init is process-wide, so v10 calls
 * share one context made by its first init. A context references the process's endpoint
 * of a device from its first use (listen or connect) to finalize; connections and
 * registrations hold references of their own, so finalize may come before the last close.
 *
 * Threading: contexts guard their endpoint table with a mutex; everything else is
 * guarded per endpoint (netofi_ep.c). Only the three tables are exported.
 */
#include <stdlib.h>
#include <string.h>

#include "netofi.h"

#include "common/check.h"

#define NETOFI_PLUGIN_NAME "OFI"

typedef struct {
    pthread_mutex_t lock;              /* guards eps */
    netofi_ep_t *eps[NETOFI_MAX_DEVS]; /* endpoints this context references */
    uint64_t comm_id;
    int traffic_class; /* recorded for logs; providers' traffic classes are not set */
} netofi_ctx_t;

static pthread_mutex_t netofi_v10_lock = PTHREAD_MUTEX_INITIALIZER;
static netofi_ctx_t *netofi_v10_ctx; /* the v10 ABI's process-wide context */

static ncclResult_t ctx_create(uint64_t comm_id, int traffic_class, netofi_ctx_t **ctx_p)
{
    netofi_ctx_t *ctx = calloc(1, sizeof(*ctx));

    if (ctx == NULL) {
        BR_WARN(NCCL_INIT | NCCL_NET, "net-ofi: out of memory for a context");
        return ncclSystemError;
    }
    pthread_mutex_init(&ctx->lock, NULL);
    ctx->comm_id = comm_id;
    ctx->traffic_class = traffic_class;
    *ctx_p = ctx;
    return ncclSuccess;
}

/* The endpoint on dev, referenced by the context from its first use to finalize. */
static ncclResult_t ctx_ep(netofi_ctx_t *ctx, int dev, netofi_ep_t **ep_p)
{
    ncclResult_t res = ncclSuccess;

    if (dev < 0 || dev >= netofi_fabric_ndev()) {
        BR_WARN(NCCL_NET, "net-ofi: device %d does not exist (%d devices)", dev,
                netofi_fabric_ndev());
        return ncclInternalError;
    }
    pthread_mutex_lock(&ctx->lock);
    if (ctx->eps[dev] == NULL) {
        res = netofi_ep_get(dev, &ctx->eps[dev]);
    }
    *ep_p = ctx->eps[dev];
    pthread_mutex_unlock(&ctx->lock);
    return res;
}

static ncclResult_t common_init(ncclDebugLogger_t logger)
{
    if (logger != NULL) {
        br_plugin_logger = logger;
    }
    return netofi_fabric_init();
}

static ncclResult_t netofi_init(void **ctx, uint64_t comm_id, int traffic_class,
                                ncclDebugLogger_t logger)
{
    netofi_ctx_t *c = NULL;

    BR_CHECK(common_init(logger));
    BR_CHECK(ctx_create(comm_id, traffic_class, &c));
    BR_TRACE(NCCL_INIT | NCCL_NET, "net-ofi: context %p for comm %#llx", (void *)c,
             (unsigned long long)comm_id);
    *ctx = c;
    return ncclSuccess;
}

static ncclResult_t netofi_finalize(void *ctx)
{
    netofi_ctx_t *c = ctx;

    if (c == NULL) {
        return ncclSuccess;
    }
    for (int i = 0; i < NETOFI_MAX_DEVS; i++) {
        if (c->eps[i] != NULL) {
            netofi_ep_release(c->eps[i]);
        }
    }
    pthread_mutex_destroy(&c->lock);
    free(c);
    return ncclSuccess;
}

static ncclResult_t netofi_devices(int *ndev)
{
    *ndev = netofi_fabric_ndev();
    return ncclSuccess;
}

static ncclResult_t netofi_listen(void *ctx, int dev, void *handle, void **listen_comm)
{
    netofi_ep_t *ep = NULL;

    *listen_comm = NULL;
    BR_CHECK(ctx_ep(ctx, dev, &ep));
    return netofi_conn_listen(ep, handle, listen_comm);
}

static ncclResult_t netofi_connect(void *ctx, int dev, void *handle, void **send_comm)
{
    netofi_ep_t *ep = NULL;

    *send_comm = NULL;
    BR_CHECK(ctx_ep(ctx, dev, &ep));
    return netofi_conn_connect(ep, handle, send_comm);
}

static ncclResult_t netofi_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                                 void *phandle, void **request)
{
    (void)phandle; /* no profiler events of our own */
    return netofi_data_isend(send_comm, data, size, tag, mhandle, request);
}

static ncclResult_t netofi_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                                 void **mhandles, void **phandles, void **request)
{
    (void)phandles;
    return netofi_data_irecv(recv_comm, n, data, sizes, tags, mhandles, request);
}

/* The fields every properties version shares, copied from the v12 layout. */
#define NETOFI_COPY_PROPS(o, p)                                                                    \
    do {                                                                                           \
        (o)->name = (p)->name;                                                                     \
        (o)->pciPath = (p)->pciPath;                                                               \
        (o)->guid = (p)->guid;                                                                     \
        (o)->ptrSupport = (p)->ptrSupport;                                                         \
        (o)->regIsGlobal = (p)->regIsGlobal;                                                       \
        (o)->forceFlush = (p)->forceFlush;                                                         \
        (o)->speed = (p)->speed;                                                                   \
        (o)->port = (p)->port;                                                                     \
        (o)->latency = (p)->latency;                                                               \
        (o)->maxComms = (p)->maxComms;                                                             \
        (o)->maxRecvs = (p)->maxRecvs;                                                             \
        (o)->netDeviceType = (p)->netDeviceType;                                                   \
        (o)->netDeviceVersion = (p)->netDeviceVersion;                                             \
        (o)->vProps.ndevs = (p)->vProps.ndevs; /* always 1: no virtual devices */                  \
        (o)->vProps.devs[0] = (p)->vProps.devs[0];                                                 \
        (o)->maxP2pBytes = (p)->maxP2pBytes;                                                       \
        (o)->maxCollBytes = (p)->maxCollBytes;                                                     \
    } while (0)

/* v12 --------------------------------------------------------------------------------------- */

static ncclResult_t netofi_init_v12(void **ctx, uint64_t comm_id, ncclNetCommConfig_v12_t *config,
                                    ncclDebugLogger_t logger, ncclProfilerCallback_t prof)
{
    (void)prof;
    return netofi_init(ctx, comm_id, config ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF,
                       logger);
}

static ncclResult_t netofi_get_properties_v12(int dev, ncclNetProperties_v12_t *props)
{
    return netofi_fabric_properties(dev, props);
}

static ncclResult_t netofi_connect_v12(void *ctx, int dev, void *handle, void **send_comm,
                                       ncclNetDeviceHandle_v12_t **dev_comm)
{
    (void)dev_comm; /* host only: no device handle */
    return netofi_connect(ctx, dev, handle, send_comm);
}

static ncclResult_t netofi_accept_v12(void *listen_comm, void **recv_comm,
                                      ncclNetDeviceHandle_v12_t **dev_comm)
{
    (void)dev_comm;
    return netofi_conn_accept(listen_comm, recv_comm);
}

__attribute__((visibility("default"))) const ncclNet_v12_t ncclNetPlugin_v12 = {
    .name = NETOFI_PLUGIN_NAME,
    .init = netofi_init_v12,
    .devices = netofi_devices,
    .getProperties = netofi_get_properties_v12,
    .listen = netofi_listen,
    .connect = netofi_connect_v12,
    .accept = netofi_accept_v12,
    .regMr = netofi_data_reg_mr,
    .regMrDmaBuf = NULL,
    .deregMr = netofi_data_dereg_mr,
    .isend = netofi_isend,
    .irecv = netofi_irecv,
    .iflush = netofi_data_iflush,
    .test = netofi_data_test,
    .closeSend = netofi_conn_close,
    .closeRecv = netofi_conn_close,
    .closeListen = netofi_conn_close,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = NULL,
    .finalize = netofi_finalize,
    .setNetAttr = NULL,
};

/* v11 --------------------------------------------------------------------------------------- */

static ncclResult_t netofi_init_v11(void **ctx, uint64_t comm_id, ncclNetCommConfig_v11_t *config,
                                    ncclDebugLogger_t logger, ncclProfilerCallback_t prof)
{
    (void)prof;
    return netofi_init(ctx, comm_id, config ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF,
                       logger);
}

static ncclResult_t netofi_get_properties_v11(int dev, ncclNetProperties_v11_t *props)
{
    ncclNetProperties_v12_t p;

    BR_CHECK(netofi_fabric_properties(dev, &p));
    memset(props, 0, sizeof(*props));
    NETOFI_COPY_PROPS(props, &p);
    props->maxMultiRequestSize = p.maxMultiRequestSize;
    return ncclSuccess;
}

static ncclResult_t netofi_connect_v11(void *ctx, int dev, void *handle, void **send_comm,
                                       ncclNetDeviceHandle_v11_t **dev_comm)
{
    (void)dev_comm;
    return netofi_connect(ctx, dev, handle, send_comm);
}

static ncclResult_t netofi_accept_v11(void *listen_comm, void **recv_comm,
                                      ncclNetDeviceHandle_v11_t **dev_comm)
{
    (void)dev_comm;
    return netofi_conn_accept(listen_comm, recv_comm);
}

__attribute__((visibility("default"))) const ncclNet_v11_t ncclNetPlugin_v11 = {
    .name = NETOFI_PLUGIN_NAME,
    .init = netofi_init_v11,
    .devices = netofi_devices,
    .getProperties = netofi_get_properties_v11,
    .listen = netofi_listen,
    .connect = netofi_connect_v11,
    .accept = netofi_accept_v11,
    .regMr = netofi_data_reg_mr,
    .regMrDmaBuf = NULL,
    .deregMr = netofi_data_dereg_mr,
    .isend = netofi_isend,
    .irecv = netofi_irecv,
    .iflush = netofi_data_iflush,
    .test = netofi_data_test,
    .closeSend = netofi_conn_close,
    .closeRecv = netofi_conn_close,
    .closeListen = netofi_conn_close,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = NULL,
    .finalize = netofi_finalize,
    .setNetAttr = NULL,
};

/* v10 --------------------------------------------------------------------------------------- */

static ncclResult_t netofi_init_v10(ncclDebugLogger_t logger, ncclProfilerCallback_t prof)
{
    ncclResult_t res = ncclSuccess;

    (void)prof;
    BR_CHECK(common_init(logger));
    pthread_mutex_lock(&netofi_v10_lock);
    if (netofi_v10_ctx == NULL) {
        res = ctx_create(0, NCCL_NET_TRAFFIC_CLASS_UNDEF, &netofi_v10_ctx);
    }
    pthread_mutex_unlock(&netofi_v10_lock);
    return res;
}

static ncclResult_t netofi_get_properties_v10(int dev, ncclNetProperties_v10_t *props)
{
    ncclNetProperties_v12_t p;

    BR_CHECK(netofi_fabric_properties(dev, &p));
    memset(props, 0, sizeof(*props));
    NETOFI_COPY_PROPS(props, &p);
    return ncclSuccess;
}

static ncclResult_t netofi_v10_ctx_get(netofi_ctx_t **ctx_p)
{
    pthread_mutex_lock(&netofi_v10_lock);
    *ctx_p = netofi_v10_ctx;
    pthread_mutex_unlock(&netofi_v10_lock);
    if (*ctx_p == NULL) {
        BR_WARN(NCCL_NET, "net-ofi: v10 call before a successful init");
        return ncclInternalError;
    }
    return ncclSuccess;
}

static ncclResult_t netofi_listen_v10(int dev, void *handle, void **listen_comm)
{
    netofi_ctx_t *ctx;

    BR_CHECK(netofi_v10_ctx_get(&ctx));
    return netofi_listen(ctx, dev, handle, listen_comm);
}

static ncclResult_t netofi_connect_v10(int dev, ncclNetCommConfig_v10_t *config, void *handle,
                                       void **send_comm, ncclNetDeviceHandle_v10_t **dev_comm)
{
    netofi_ctx_t *ctx;

    (void)config; /* the traffic class is not mapped to a provider setting */
    (void)dev_comm;
    BR_CHECK(netofi_v10_ctx_get(&ctx));
    return netofi_connect(ctx, dev, handle, send_comm);
}

static ncclResult_t netofi_accept_v10(void *listen_comm, void **recv_comm,
                                      ncclNetDeviceHandle_v10_t **dev_comm)
{
    (void)dev_comm;
    return netofi_conn_accept(listen_comm, recv_comm);
}

__attribute__((visibility("default"))) const ncclNet_v10_t ncclNetPlugin_v10 = {
    .name = NETOFI_PLUGIN_NAME,
    .init = netofi_init_v10,
    .devices = netofi_devices,
    .getProperties = netofi_get_properties_v10,
    .listen = netofi_listen_v10,
    .connect = netofi_connect_v10,
    .accept = netofi_accept_v10,
    .regMr = netofi_data_reg_mr,
    .regMrDmaBuf = NULL,
    .deregMr = netofi_data_dereg_mr,
    .isend = netofi_isend,
    .irecv = netofi_irecv,
    .iflush = netofi_data_iflush,
    .test = netofi_data_test,
    .closeSend = netofi_conn_close,
    .closeRecv = netofi_conn_close,
    .closeListen = netofi_conn_close,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = NULL,
};
