/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A net plugin built outside Braid's tree, the shape a vendor's takes: one const
 * ncclNet_v12_t table of static functions, exported under "ncclNetPlugin_v12", built
 * against the installed plugin ABI headers only (docs/guide-plugin-vendor.md):
 *   cc -shared -fPIC -fvisibility=hidden -Wl,--no-undefined \
 *      $(pkg-config --cflags braid) example_net.c -o libnccl-net-example.so -ldl
 * Its "hardware" is Braid's socket plugin: init opens the library EXAMPLE_NET_INNER
 * names (default libnccl-net-socket.so) and every call is passed through to it, so the
 * plugin carries real traffic while showing only the boundary a real one implements.
 * Its network is named "Example" (NCCL_NET=Example selects it). Thread safety and
 * blocking are the inner plugin's.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

#include "plugin_api/net/net_v12.h"

static const ncclNet_v12_t *inner; /* the socket plugin's table, set by the first init */
static pthread_once_t inner_once = PTHREAD_ONCE_INIT;

static void inner_load(void)
{
    const char *path = getenv("EXAMPLE_NET_INNER");
    void *dl = dlopen(path != NULL ? path : "libnccl-net-socket.so", RTLD_NOW | RTLD_LOCAL);

    if (dl != NULL) {
        inner = dlsym(dl, "ncclNetPlugin_v12");
    }
}

static ncclResult_t ex_init(void **ctx, uint64_t comm_id, ncclNetCommConfig_v12_t *config,
                            ncclDebugLogger_t log, ncclProfilerCallback_t prof)
{
    pthread_once(&inner_once, inner_load);
    if (inner == NULL) {
        if (log != NULL) {
            log(NCCL_LOG_WARN, NCCL_NET, __FILE__, __LINE__,
                "Example: cannot load the socket plugin (set EXAMPLE_NET_INNER to its path)");
        }
        return ncclSystemError;
    }
    return inner->init(ctx, comm_id, config, log, prof);
}

static ncclResult_t ex_devices(int *ndev)
{
    return inner->devices(ndev);
}

static ncclResult_t ex_get_properties(int dev, ncclNetProperties_v12_t *props)
{
    return inner->getProperties(dev, props);
}

static ncclResult_t ex_listen(void *ctx, int dev, void *handle, void **listen_comm)
{
    return inner->listen(ctx, dev, handle, listen_comm);
}

static ncclResult_t ex_connect(void *ctx, int dev, void *handle, void **send_comm,
                               ncclNetDeviceHandle_v12_t **send_dev_comm)
{
    return inner->connect(ctx, dev, handle, send_comm, send_dev_comm);
}

static ncclResult_t ex_accept(void *listen_comm, void **recv_comm,
                              ncclNetDeviceHandle_v12_t **recv_dev_comm)
{
    return inner->accept(listen_comm, recv_comm, recv_dev_comm);
}

static ncclResult_t ex_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle)
{
    return inner->regMr(comm, data, size, type, mhandle);
}

static ncclResult_t ex_dereg_mr(void *comm, void *mhandle)
{
    return inner->deregMr(comm, mhandle);
}

static ncclResult_t ex_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                             void *phandle, void **request)
{
    return inner->isend(send_comm, data, size, tag, mhandle, phandle, request);
}

static ncclResult_t ex_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                             void **mhandles, void **phandles, void **request)
{
    return inner->irecv(recv_comm, n, data, sizes, tags, mhandles, phandles, request);
}

static ncclResult_t ex_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                              void **request)
{
    return inner->iflush(recv_comm, n, data, sizes, mhandles, request);
}

static ncclResult_t ex_test(void *request, int *done, int *sizes)
{
    return inner->test(request, done, sizes);
}

static ncclResult_t ex_close_send(void *send_comm)
{
    return inner->closeSend(send_comm);
}

static ncclResult_t ex_close_recv(void *recv_comm)
{
    return inner->closeRecv(recv_comm);
}

static ncclResult_t ex_close_listen(void *listen_comm)
{
    return inner->closeListen(listen_comm);
}

static ncclResult_t ex_finalize(void *ctx)
{
    return inner->finalize(ctx);
}

/* The optional members (DMA-BUF, device handles, irecvConsumed, virtual devices, net
 * attributes) stay NULL: the core does without them. */
__attribute__((visibility("default"))) const ncclNet_v12_t ncclNetPlugin_v12 = {
    .name = "Example",
    .init = ex_init,
    .devices = ex_devices,
    .getProperties = ex_get_properties,
    .listen = ex_listen,
    .connect = ex_connect,
    .accept = ex_accept,
    .regMr = ex_reg_mr,
    .regMrDmaBuf = NULL,
    .deregMr = ex_dereg_mr,
    .isend = ex_isend,
    .irecv = ex_irecv,
    .iflush = ex_iflush,
    .test = ex_test,
    .closeSend = ex_close_send,
    .closeRecv = ex_close_recv,
    .closeListen = ex_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = NULL,
    .finalize = ex_finalize,
    .setNetAttr = NULL,
};
