/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The socket net plugin's exported tables: ncclNetPlugin_v12, _v11 and _v10, all named
 * "Socket". The versions differ only in init (per-communicator context for v11/v12,
 * process-wide for v10), where connect finds its traffic-class config, and the layout of
 * the properties struct, so each member is a thin wrapper around one shared function.
 * Host memory only: regMr refuses GPU memory and iflush has nothing to do.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netsock.h"
#include "plugin_log.h"

#include "check.h"

#define CTX_MAGIC 0x58544353u /* "SCTX" */
#define MR_MAGIC 0x524d4353u  /* "SCMR" */
#define NETSOCK_MAX_COMMS 65536

/* Per-communicator context of v11/v12 (the ABI's ctx). */
typedef struct {
    uint32_t magic;
    int traffic_class; /* recorded; TCP here has no use for it */
    uint64_t comm_id;
} netsock_ctx_t;

/* A registration: host memory needs none, so it only remembers what was registered. */
typedef struct {
    uint32_t magic;
    int type;
} netsock_mr_t;

static ncclResult_t plugin_setup(ncclDebugLogger_t logger)
{
    /* The logger is the same for every init of one core; avoid needless racing writes. */
    if (logger != NULL && br_plugin_logger != logger) {
        br_plugin_logger = logger;
    }
    return netsock_dev_init();
}

static ncclResult_t ctx_create(uint64_t comm_id, int traffic_class, void **ctx)
{
    netsock_ctx_t *c;

    if (ctx == NULL) {
        BR_WARN(NCCL_NET | NCCL_INIT, "init without a ctx pointer");
        return ncclInternalError;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        BR_WARN(NCCL_NET | NCCL_INIT, "out of memory for a net context");
        return ncclSystemError;
    }
    c->magic = CTX_MAGIC;
    c->comm_id = comm_id;
    c->traffic_class = traffic_class;
    *ctx = c;
    return ncclSuccess;
}

static ncclResult_t netsock_init_v12(void **ctx, uint64_t comm_id, ncclNetCommConfig_v12_t *config,
                                     ncclDebugLogger_t logger, ncclProfilerCallback_t prof)
{
    (void)prof;
    BR_CHECK(plugin_setup(logger));
    return ctx_create(comm_id, config ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF, ctx);
}

static ncclResult_t netsock_init_v11(void **ctx, uint64_t comm_id, ncclNetCommConfig_v11_t *config,
                                     ncclDebugLogger_t logger, ncclProfilerCallback_t prof)
{
    (void)prof;
    BR_CHECK(plugin_setup(logger));
    return ctx_create(comm_id, config ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF, ctx);
}

static ncclResult_t netsock_init_v10(ncclDebugLogger_t logger, ncclProfilerCallback_t prof)
{
    (void)prof;
    return plugin_setup(logger);
}

static ncclResult_t netsock_finalize(void *ctx)
{
    netsock_ctx_t *c = ctx;

    if (c == NULL) {
        return ncclSuccess; /* NCCL 2.28 finalizes even after a failed init */
    }
    if (c->magic != CTX_MAGIC) {
        BR_WARN(NCCL_NET, "finalize of an invalid context %p", ctx);
        return ncclInternalError;
    }
    c->magic = 0;
    free(c);
    return ncclSuccess;
}

static ncclResult_t netsock_set_net_attr(void *ctx, ncclNetAttr_v12_t *attr)
{
    /* Hints only: the connection shape is fixed by NCCL_SOCKET_NTHREADS and friends. */
    (void)ctx;
    (void)attr;
    return ncclSuccess;
}

static ncclResult_t netsock_devices(int *ndev)
{
    if (ndev == NULL) {
        return ncclInternalError;
    }
    *ndev = netsock_dev_count();
    return ncclSuccess;
}

/* The one properties function; older layouts copy from it. */
static ncclResult_t props_fill(int dev, ncclNetProperties_v12_t *p)
{
    const netsock_dev_t *d = netsock_dev_get(dev);

    if (d == NULL || p == NULL) {
        BR_WARN(NCCL_NET, "getProperties of device %d of %d", dev, netsock_dev_count());
        return ncclInternalError;
    }
    memset(p, 0, sizeof(*p));
    p->name = (char *)d->name; /* lives as long as the library */
    p->pciPath = d->pci_path;
    p->guid = (uint64_t)dev;
    p->ptrSupport = NCCL_PTR_HOST;
    p->regIsGlobal = 0;
    p->forceFlush = 0;
    p->speed = d->speed;
    p->port = 0;
    p->latency = 0;
    p->maxComms = NETSOCK_MAX_COMMS;
    p->maxRecvs = 1;
    p->netDeviceType = NCCL_NET_DEVICE_HOST;
    p->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
    p->vProps.ndevs = 1;
    p->vProps.devs[0] = dev;
    p->maxP2pBytes = NCCL_MAX_NET_SIZE_BYTES;
    p->maxCollBytes = NCCL_MAX_NET_SIZE_BYTES;
    p->maxMultiRequestSize = 1;
    p->railId = NCCL_NET_ID_UNDEF;
    p->planeId = NCCL_NET_ID_UNDEF;
    return ncclSuccess;
}

static ncclResult_t netsock_get_properties_v12(int dev, ncclNetProperties_v12_t *props)
{
    return props_fill(dev, props);
}

/* v10 and v11 share their first fields and vProps shape; the macro copies them. */
#define PROPS_COPY_COMMON(dst, src)                                                                \
    do {                                                                                           \
        (dst)->name = (src).name;                                                                  \
        (dst)->pciPath = (src).pciPath;                                                            \
        (dst)->guid = (src).guid;                                                                  \
        (dst)->ptrSupport = (src).ptrSupport;                                                      \
        (dst)->regIsGlobal = (src).regIsGlobal;                                                    \
        (dst)->forceFlush = (src).forceFlush;                                                      \
        (dst)->speed = (src).speed;                                                                \
        (dst)->port = (src).port;                                                                  \
        (dst)->latency = (src).latency;                                                            \
        (dst)->maxComms = (src).maxComms;                                                          \
        (dst)->maxRecvs = (src).maxRecvs;                                                          \
        (dst)->netDeviceType = (src).netDeviceType;                                                \
        (dst)->netDeviceVersion = (src).netDeviceVersion;                                          \
        (dst)->vProps.ndevs = (src).vProps.ndevs;                                                  \
        memcpy((dst)->vProps.devs, (src).vProps.devs, sizeof((dst)->vProps.devs));                 \
        (dst)->maxP2pBytes = (src).maxP2pBytes;                                                    \
        (dst)->maxCollBytes = (src).maxCollBytes;                                                  \
    } while (0)

static ncclResult_t netsock_get_properties_v11(int dev, ncclNetProperties_v11_t *props)
{
    ncclNetProperties_v12_t p;

    BR_CHECK(props_fill(dev, &p));
    memset(props, 0, sizeof(*props));
    PROPS_COPY_COMMON(props, p);
    props->maxMultiRequestSize = p.maxMultiRequestSize;
    return ncclSuccess;
}

static ncclResult_t netsock_get_properties_v10(int dev, ncclNetProperties_v10_t *props)
{
    ncclNetProperties_v12_t p;

    BR_CHECK(props_fill(dev, &p));
    memset(props, 0, sizeof(*props));
    PROPS_COPY_COMMON(props, p);
    return ncclSuccess;
}

static ncclResult_t netsock_listen_ctx(void *ctx, int dev, void *handle, void **listen_comm)
{
    (void)ctx;
    return netsock_listen(dev, handle, listen_comm);
}

static ncclResult_t netsock_connect_v12(void *ctx, int dev, void *handle, void **send_comm,
                                        ncclNetDeviceHandle_v12_t **dev_comm)
{
    (void)ctx;
    (void)dev_comm; /* host only: no device handle, whatever the caller offers */
    return netsock_connect(dev, handle, send_comm);
}

static ncclResult_t netsock_connect_v11(void *ctx, int dev, void *handle, void **send_comm,
                                        ncclNetDeviceHandle_v11_t **dev_comm)
{
    (void)ctx;
    (void)dev_comm;
    return netsock_connect(dev, handle, send_comm);
}

static ncclResult_t netsock_connect_v10(int dev, ncclNetCommConfig_v10_t *config, void *handle,
                                        void **send_comm, ncclNetDeviceHandle_v10_t **dev_comm)
{
    (void)config;
    (void)dev_comm;
    return netsock_connect(dev, handle, send_comm);
}

static ncclResult_t netsock_accept_v12(void *listen_comm, void **recv_comm,
                                       ncclNetDeviceHandle_v12_t **dev_comm)
{
    (void)dev_comm;
    return netsock_accept(listen_comm, recv_comm);
}

static ncclResult_t netsock_accept_v11(void *listen_comm, void **recv_comm,
                                       ncclNetDeviceHandle_v11_t **dev_comm)
{
    (void)dev_comm;
    return netsock_accept(listen_comm, recv_comm);
}

static ncclResult_t netsock_accept_v10(void *listen_comm, void **recv_comm,
                                       ncclNetDeviceHandle_v10_t **dev_comm)
{
    (void)dev_comm;
    return netsock_accept(listen_comm, recv_comm);
}

static ncclResult_t netsock_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle)
{
    netsock_mr_t *mr;

    if (comm == NULL || mhandle == NULL) {
        BR_WARN(NCCL_NET | NCCL_REG, "regMr on comm %p", comm);
        return ncclInternalError;
    }
    if (type != NCCL_PTR_HOST) {
        BR_WARN(NCCL_NET | NCCL_REG,
                "regMr of %zu bytes at %p with type 0x%x: the socket plugin "
                "moves host memory only (NCCL_PTR_HOST)",
                size, data, type);
        return ncclInternalError;
    }
    mr = malloc(sizeof(*mr));
    if (mr == NULL) {
        BR_WARN(NCCL_NET | NCCL_REG, "out of memory for a registration");
        return ncclSystemError;
    }
    mr->magic = MR_MAGIC;
    mr->type = type;
    *mhandle = mr;
    return ncclSuccess;
}

static ncclResult_t netsock_dereg_mr(void *comm, void *mhandle)
{
    netsock_mr_t *mr = mhandle;

    (void)comm;
    if (mr == NULL || mr->magic != MR_MAGIC) {
        BR_WARN(NCCL_NET | NCCL_REG, "deregMr of an invalid handle %p", mhandle);
        return ncclInternalError;
    }
    mr->magic = 0;
    free(mr);
    return ncclSuccess;
}

static ncclResult_t netsock_isend_abi(void *send_comm, void *data, size_t size, int tag,
                                      void *mhandle, void *phandle, void **request)
{
    (void)tag; /* one buffer per receive: tags select nothing */
    (void)mhandle;
    (void)phandle;
    return netsock_isend(send_comm, data, size, request);
}

static ncclResult_t netsock_irecv_abi(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                                      void **mhandles, void **phandles, void **request)
{
    (void)tags;
    (void)mhandles;
    (void)phandles;
    return netsock_irecv(recv_comm, n, data, sizes, request);
}

static ncclResult_t netsock_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                                   void **request)
{
    /* Host memory is coherent once recv() returned: nothing to flush. */
    (void)recv_comm;
    (void)n;
    (void)data;
    (void)sizes;
    (void)mhandles;
    if (request == NULL) {
        return ncclInternalError;
    }
    *request = NULL;
    return ncclSuccess;
}

static ncclResult_t netsock_close_send(void *send_comm)
{
    return netsock_comm_close(send_comm);
}

static ncclResult_t netsock_close_recv(void *recv_comm)
{
    return netsock_comm_close(recv_comm);
}

/* Braid's core hands over its TLS configuration (ncclSetEncryption) before init; under
 * another core, connections stay plain. Connections made from then on use it. */
__attribute__((visibility("default"))) int
braidNetTlsConfigure(const br_tls_config_t *cfg, size_t size, char *err, size_t errlen)
{
    if (cfg == NULL || size != sizeof(*cfg)) {
        snprintf(err, errlen, "socket plugin: a TLS configuration of %zu bytes, not %zu", size,
                 sizeof(*cfg));
        return -1;
    }
    return br_tls_configure(cfg, err, errlen);
}

__attribute__((visibility("default"))) const ncclNet_v12_t ncclNetPlugin_v12 = {
    .name = "Socket",
    .init = netsock_init_v12,
    .devices = netsock_devices,
    .getProperties = netsock_get_properties_v12,
    .listen = netsock_listen_ctx,
    .connect = netsock_connect_v12,
    .accept = netsock_accept_v12,
    .regMr = netsock_reg_mr,
    .regMrDmaBuf = NULL,
    .deregMr = netsock_dereg_mr,
    .isend = netsock_isend_abi,
    .irecv = netsock_irecv_abi,
    .iflush = netsock_iflush,
    .test = netsock_test,
    .closeSend = netsock_close_send,
    .closeRecv = netsock_close_recv,
    .closeListen = netsock_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = NULL,
    .finalize = netsock_finalize,
    .setNetAttr = netsock_set_net_attr,
};

/* ncclNetAttr_v11_t and _v12_t are the same 44 bytes; the cast is layout-safe. */
static ncclResult_t netsock_set_net_attr_v11(void *ctx, ncclNetAttr_v11_t *attr)
{
    return netsock_set_net_attr(ctx, (ncclNetAttr_v12_t *)(void *)attr);
}

__attribute__((visibility("default"))) const ncclNet_v11_t ncclNetPlugin_v11 = {
    .name = "Socket",
    .init = netsock_init_v11,
    .devices = netsock_devices,
    .getProperties = netsock_get_properties_v11,
    .listen = netsock_listen_ctx,
    .connect = netsock_connect_v11,
    .accept = netsock_accept_v11,
    .regMr = netsock_reg_mr,
    .regMrDmaBuf = NULL,
    .deregMr = netsock_dereg_mr,
    .isend = netsock_isend_abi,
    .irecv = netsock_irecv_abi,
    .iflush = netsock_iflush,
    .test = netsock_test,
    .closeSend = netsock_close_send,
    .closeRecv = netsock_close_recv,
    .closeListen = netsock_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = NULL,
    .finalize = netsock_finalize,
    .setNetAttr = netsock_set_net_attr_v11,
};

__attribute__((visibility("default"))) const ncclNet_v10_t ncclNetPlugin_v10 = {
    .name = "Socket",
    .init = netsock_init_v10,
    .devices = netsock_devices,
    .getProperties = netsock_get_properties_v10,
    .listen = netsock_listen,
    .connect = netsock_connect_v10,
    .accept = netsock_accept_v10,
    .regMr = netsock_reg_mr,
    .regMrDmaBuf = NULL,
    .deregMr = netsock_dereg_mr,
    .isend = netsock_isend_abi,
    .irecv = netsock_irecv_abi,
    .iflush = netsock_iflush,
    .test = netsock_test,
    .closeSend = netsock_close_send,
    .closeRecv = netsock_close_recv,
    .closeListen = netsock_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = NULL,
};
