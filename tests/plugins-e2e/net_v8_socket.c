/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A test net plugin that exports only ncclNetPlugin_v8, the oldest net ABI Braid loads,
 * so a real multi-process collective run goes through the core's v8 adapter (int sizes,
 * process-wide init, v8 properties). It forwards to Braid's socket plugin, which it opens
 * at init from BRAID_TEST_INNER_NET (a path), through that plugin's v10 table (also
 * process-wide init), narrowing and widening sizes as a v8 plugin's callers would.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "plugin_api/net/net_v10.h"
#include "plugin_api/net/net_v8.h"

static const ncclNet_v10_t *inner;

static ncclResult_t v8_init(ncclDebugLogger_t log)
{
    const char *path = getenv("BRAID_TEST_INNER_NET");
    void *lib = path != NULL ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    inner = lib != NULL ? dlsym(lib, "ncclNetPlugin_v10") : NULL;
    if (inner == NULL) {
        if (log != NULL) {
            log(NCCL_LOG_WARN, NCCL_ALL, __FILE__, __LINE__,
                "net v8 test plugin: BRAID_TEST_INNER_NET=%s has no ncclNetPlugin_v10",
                path != NULL ? path : "(unset)");
        }
        return ncclInvalidUsage;
    }
    return inner->init(log, NULL);
}

static ncclResult_t v8_devices(int *ndev)
{
    return inner->devices(ndev);
}

static ncclResult_t v8_props(int dev, ncclNetProperties_v8_t *p)
{
    ncclNetProperties_v10_t q;
    ncclResult_t res = inner->getProperties(dev, &q);
    if (res != ncclSuccess) {
        return res;
    }
    memset(p, 0, sizeof(*p));
    p->name = q.name;
    p->pciPath = q.pciPath;
    p->guid = q.guid;
    p->ptrSupport = q.ptrSupport;
    p->regIsGlobal = q.regIsGlobal;
    p->speed = q.speed;
    p->port = q.port;
    p->latency = q.latency;
    p->maxComms = q.maxComms;
    p->maxRecvs = q.maxRecvs;
    p->netDeviceType = q.netDeviceType;
    p->netDeviceVersion = q.netDeviceVersion;
    return ncclSuccess;
}

static ncclResult_t v8_listen(int dev, void *handle, void **listen_comm)
{
    return inner->listen(dev, handle, listen_comm);
}

static ncclResult_t v8_connect(int dev, void *handle, void **send_comm,
                               ncclNetDeviceHandle_v8_t **dev_comm)
{
    (void)dev_comm;
    return inner->connect(dev, NULL, handle, send_comm, NULL);
}

static ncclResult_t v8_accept(void *listen_comm, void **recv_comm,
                              ncclNetDeviceHandle_v8_t **dev_comm)
{
    (void)dev_comm;
    return inner->accept(listen_comm, recv_comm, NULL);
}

static ncclResult_t v8_reg(void *comm, void *data, size_t size, int type, void **mhandle)
{
    return inner->regMr(comm, data, size, type, mhandle);
}

static ncclResult_t v8_dereg(void *comm, void *mhandle)
{
    return inner->deregMr(comm, mhandle);
}

static ncclResult_t v8_isend(void *comm, void *data, int size, int tag, void *mhandle,
                             void **request)
{
    return inner->isend(comm, data, (size_t)size, tag, mhandle, NULL, request);
}

static ncclResult_t v8_irecv(void *comm, int n, void **data, int *sizes, int *tags,
                             void **mhandles, void **request)
{
    size_t wide[8];
    if (n < 1 || n > 8) {
        return ncclInternalError;
    }
    for (int i = 0; i < n; i++) {
        wide[i] = (size_t)sizes[i];
    }
    return inner->irecv(comm, n, data, wide, tags, mhandles, NULL, request);
}

static ncclResult_t v8_iflush(void *comm, int n, void **data, int *sizes, void **mhandles,
                              void **request)
{
    return inner->iflush(comm, n, data, sizes, mhandles, request);
}

static ncclResult_t v8_test(void *request, int *done, int *sizes)
{
    return inner->test(request, done, sizes);
}

static ncclResult_t v8_close_send(void *comm)
{
    return inner->closeSend(comm);
}

static ncclResult_t v8_close_recv(void *comm)
{
    return inner->closeRecv(comm);
}

static ncclResult_t v8_close_listen(void *comm)
{
    return inner->closeListen(comm);
}

__attribute__((visibility("default"))) const ncclNet_v8_t ncclNetPlugin_v8 = {
    .name = "SocketV8",
    .init = v8_init,
    .devices = v8_devices,
    .getProperties = v8_props,
    .listen = v8_listen,
    .connect = v8_connect,
    .accept = v8_accept,
    .regMr = v8_reg,
    .regMrDmaBuf = NULL,
    .deregMr = v8_dereg,
    .isend = v8_isend,
    .irecv = v8_irecv,
    .iflush = v8_iflush,
    .test = v8_test,
    .closeSend = v8_close_send,
    .closeRecv = v8_close_recv,
    .closeListen = v8_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
};
