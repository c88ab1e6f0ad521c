/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The net-ib plugin's ABI surface: ncclNetPlugin_v12, _v11 and _v10, named "IB" as NCCL's
 * own IB transport. v12/v11 init makes one small context per communicator (its traffic
 * class); v10 init is process-wide and connect brings the traffic class itself. Devices
 * are found once per process (netib_dev.c); nothing here holds a verbs object.
 */
#include <stdlib.h>
#include <string.h>

#include "netib.h"

#include "common/check.h"

#define NETIB_PLUGIN_NAME "IB"

typedef struct {
    uint64_t comm_id;
    int tc; /* traffic class for the comm's queue pairs */
} netib_ctx_t;

/* The queue pairs' traffic class: the communicator's when it set one, else NCCL_IB_TC
 * (read in netib_dev.c's parameter table; -1 there means "use the parameter"). */
static int ctx_tc(int traffic_class)
{
    return traffic_class == NCCL_NET_TRAFFIC_CLASS_UNDEF ? -1 : traffic_class;
}

static ncclResult_t common_init(ncclDebugLogger_t logger)
{
    if (logger != NULL) {
        br_plugin_logger = logger;
    }
    return netib_dev_init();
}

static ncclResult_t netib_init(void **ctx, uint64_t comm_id, int traffic_class,
                               ncclDebugLogger_t logger)
{
    netib_ctx_t *c;

    BR_CHECK(common_init(logger));
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        BR_WARN(NCCL_INIT | NCCL_NET, "NET/IB : out of memory for a context");
        return ncclSystemError;
    }
    c->comm_id = comm_id;
    c->tc = ctx_tc(traffic_class);
    *ctx = c;
    return ncclSuccess;
}

static ncclResult_t netib_finalize(void *ctx)
{
    free(ctx);
    return ncclSuccess;
}

static ncclResult_t netib_devices(int *ndev)
{
    *ndev = netib_dev_count();
    return ncclSuccess;
}

static ncclResult_t netib_listen(void *ctx, int dev, void *handle, void **listen_comm)
{
    return netib_conn_listen(dev, ((netib_ctx_t *)ctx)->tc, handle, listen_comm);
}

static ncclResult_t netib_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                                void *phandle, void **request)
{
    (void)phandle; /* no profiler events of our own */
    return netib_data_isend(send_comm, data, size, tag, mhandle, request);
}

static ncclResult_t netib_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                                void **mhandles, void **phandles, void **request)
{
    (void)phandles;
    return netib_data_irecv(recv_comm, n, data, sizes, tags, mhandles, request);
}

/* The fields every properties version shares, copied from the v12 layout. */
#define NETIB_COPY_PROPS(o, p)                                                                     \
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

static ncclResult_t netib_init_v12(void **ctx, uint64_t comm_id, ncclNetCommConfig_v12_t *config,
                                   ncclDebugLogger_t logger, ncclProfilerCallback_t prof)
{
    (void)prof;
    return netib_init(ctx, comm_id, config ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF,
                      logger);
}

static ncclResult_t netib_connect_v12(void *ctx, int dev, void *handle, void **send_comm,
                                      ncclNetDeviceHandle_v12_t **dev_comm)
{
    (void)dev_comm; /* host only: no device handle */
    return netib_conn_connect(dev, ((netib_ctx_t *)ctx)->tc, handle, send_comm);
}

static ncclResult_t netib_accept_v12(void *listen_comm, void **recv_comm,
                                     ncclNetDeviceHandle_v12_t **dev_comm)
{
    (void)dev_comm;
    return netib_conn_accept(listen_comm, recv_comm);
}

__attribute__((visibility("default"))) const ncclNet_v12_t ncclNetPlugin_v12 = {
    .name = NETIB_PLUGIN_NAME,
    .init = netib_init_v12,
    .devices = netib_devices,
    .getProperties = netib_dev_properties,
    .listen = netib_listen,
    .connect = netib_connect_v12,
    .accept = netib_accept_v12,
    .regMr = netib_data_reg_mr,
    .regMrDmaBuf = netib_data_reg_mr_dmabuf,
    .deregMr = netib_data_dereg_mr,
    .isend = netib_isend,
    .irecv = netib_irecv,
    .iflush = netib_data_iflush,
    .test = netib_data_test,
    .closeSend = netib_conn_close_send,
    .closeRecv = netib_conn_close_recv,
    .closeListen = netib_conn_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = NULL,
    .finalize = netib_finalize,
    .setNetAttr = NULL,
};

/* v11 --------------------------------------------------------------------------------------- */

static ncclResult_t netib_init_v11(void **ctx, uint64_t comm_id, ncclNetCommConfig_v11_t *config,
                                   ncclDebugLogger_t logger, ncclProfilerCallback_t prof)
{
    (void)prof;
    return netib_init(ctx, comm_id, config ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF,
                      logger);
}

static ncclResult_t netib_get_properties_v11(int dev, ncclNetProperties_v11_t *props)
{
    ncclNetProperties_v12_t p;

    BR_CHECK(netib_dev_properties(dev, &p));
    memset(props, 0, sizeof(*props));
    NETIB_COPY_PROPS(props, &p);
    props->maxMultiRequestSize = p.maxMultiRequestSize;
    return ncclSuccess;
}

static ncclResult_t netib_connect_v11(void *ctx, int dev, void *handle, void **send_comm,
                                      ncclNetDeviceHandle_v11_t **dev_comm)
{
    (void)dev_comm;
    return netib_conn_connect(dev, ((netib_ctx_t *)ctx)->tc, handle, send_comm);
}

static ncclResult_t netib_accept_v11(void *listen_comm, void **recv_comm,
                                     ncclNetDeviceHandle_v11_t **dev_comm)
{
    (void)dev_comm;
    return netib_conn_accept(listen_comm, recv_comm);
}

__attribute__((visibility("default"))) const ncclNet_v11_t ncclNetPlugin_v11 = {
    .name = NETIB_PLUGIN_NAME,
    .init = netib_init_v11,
    .devices = netib_devices,
    .getProperties = netib_get_properties_v11,
    .listen = netib_listen,
    .connect = netib_connect_v11,
    .accept = netib_accept_v11,
    .regMr = netib_data_reg_mr,
    .regMrDmaBuf = netib_data_reg_mr_dmabuf,
    .deregMr = netib_data_dereg_mr,
    .isend = netib_isend,
    .irecv = netib_irecv,
    .iflush = netib_data_iflush,
    .test = netib_data_test,
    .closeSend = netib_conn_close_send,
    .closeRecv = netib_conn_close_recv,
    .closeListen = netib_conn_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = NULL,
    .finalize = netib_finalize,
    .setNetAttr = NULL,
};

/* v10 --------------------------------------------------------------------------------------- */

static ncclResult_t netib_init_v10(ncclDebugLogger_t logger, ncclProfilerCallback_t prof)
{
    (void)prof;
    return common_init(logger);
}

static ncclResult_t netib_get_properties_v10(int dev, ncclNetProperties_v10_t *props)
{
    ncclNetProperties_v12_t p;

    BR_CHECK(netib_dev_properties(dev, &p));
    memset(props, 0, sizeof(*props));
    NETIB_COPY_PROPS(props, &p);
    return ncclSuccess;
}

static ncclResult_t netib_listen_v10(int dev, void *handle, void **listen_comm)
{
    return netib_conn_listen(dev, -1, handle, listen_comm);
}

static ncclResult_t netib_connect_v10(int dev, ncclNetCommConfig_v10_t *config, void *handle,
                                      void **send_comm, ncclNetDeviceHandle_v10_t **dev_comm)
{
    (void)dev_comm;
    return netib_conn_connect(dev,
                              ctx_tc(config ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF),
                              handle, send_comm);
}

static ncclResult_t netib_accept_v10(void *listen_comm, void **recv_comm,
                                     ncclNetDeviceHandle_v10_t **dev_comm)
{
    (void)dev_comm;
    return netib_conn_accept(listen_comm, recv_comm);
}

__attribute__((visibility("default"))) const ncclNet_v10_t ncclNetPlugin_v10 = {
    .name = NETIB_PLUGIN_NAME,
    .init = netib_init_v10,
    .devices = netib_devices,
    .getProperties = netib_get_properties_v10,
    .listen = netib_listen_v10,
    .connect = netib_connect_v10,
    .accept = netib_accept_v10,
    .regMr = netib_data_reg_mr,
    .regMrDmaBuf = netib_data_reg_mr_dmabuf,
    .deregMr = netib_data_dereg_mr,
    .isend = netib_isend,
    .irecv = netib_irecv,
    .iflush = netib_data_iflush,
    .test = netib_data_test,
    .closeSend = netib_conn_close_send,
    .closeRecv = netib_conn_close_recv,
    .closeListen = netib_conn_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = NULL,
};
