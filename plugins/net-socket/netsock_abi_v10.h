/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The net v10 function table as NCCL 2.26 defines it (plugin-abi.md 1.6): init is
 * process-wide and takes only the logger and the profiler callback. The tree's
 * include/plugin_api/net/net_v10.h declares v10 init with the v11 per-communicator
 * signature, which is not NCCL's ABI, so this plugin and the conformance kit use this
 * type for ncclNetPlugin_v10 until that header is corrected. Every other member and all
 * the auxiliary types are the header's.
 */
#ifndef NETSOCK_ABI_V10_H_
#define NETSOCK_ABI_V10_H_

#include "plugin_api/net/net_v10.h"

/* ncclNet_v10_t with NCCL's process-wide init (20 slots, 160 bytes). */
typedef struct {
    const char *name;
    /* Process-wide: called once with the core's logger and profiler callback. */
    ncclResult_t (*init)(ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
    ncclResult_t (*devices)(int *ndev);
    ncclResult_t (*getProperties)(int dev, ncclNetProperties_v10_t *props);
    ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
    ncclResult_t (*connect)(int dev, ncclNetCommConfig_v10_t *config, void *handle, void **sendComm,
                            ncclNetDeviceHandle_v10_t **sendDevComm);
    ncclResult_t (*accept)(void *listenComm, void **recvComm,
                           ncclNetDeviceHandle_v10_t **recvDevComm);
    ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
    ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                                int fd, void **mhandle);
    ncclResult_t (*deregMr)(void *comm, void *mhandle);
    ncclResult_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle,
                          void *phandle, void **request);
    ncclResult_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags,
                          void **mhandles, void **phandles, void **request);
    ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                           void **request);
    ncclResult_t (*test)(void *request, int *done, int *sizes);
    ncclResult_t (*closeSend)(void *sendComm);
    ncclResult_t (*closeRecv)(void *recvComm);
    ncclResult_t (*closeListen)(void *listenComm);
    ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
    ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
    ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_v10_t *props);
} netsock_net_v10_t;

_Static_assert(sizeof(netsock_net_v10_t) == 160, "net v10 has 20 slots");

#endif /* NETSOCK_ABI_V10_H_ */
