/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Net plugin ABI version 6 (NCCL 2.13): symbol "ncclNetPlugin_v6", type ncclNet_v6_t,
 * 17 slots (136 bytes on LP64). Frozen: a released version is never edited; a change is
 * a new version file. The oldest version NCCL 2.28 and 2.30 still load.
 *
 * What v6 added over v5: regMrDmaBuf after regMr, and the NCCL_PTR_DMABUF bit. There is
 * no device offload (no device handles, getDeviceMr or irecvConsumed); properties are
 * 48 bytes. The NCCL of that era required NCCL_NET_MAX_REQUESTS_V6 (8) outstanding
 * requests per comm. init is process-wide (logger only).
 *
 * Threading, for every member below: the core calls init, devices and getProperties
 * from communicator-init paths (any application thread, serialized by the core);
 * listen/connect/accept from init or from the proxy thread; regMr/deregMr from any
 * thread that owns the comm; the data path (isend, irecv, iflush, test)
 * only from the proxy thread that owns the comm. A single comm is never used by two
 * threads at once, but different comms of one plugin may be used concurrently, so
 * plugin-global state needs locking. No member may block waiting for a peer.
 */
#ifndef BRAID_PLUGIN_API_NET_V6_H_
#define BRAID_PLUGIN_API_NET_V6_H_

#include "net_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Outstanding requests per comm the NCCL of the v6 era expected (v7 and later: 32). */
#define NCCL_NET_MAX_REQUESTS_V6 8

/*
 * Properties of one device (48 bytes on LP64), filled by getProperties into memory
 * the core owns (usually its stack). String pointers must stay valid for the life of
 * the plugin (the core keeps them without copying).
 */
typedef struct {
    char *name;     /* device name, for logs */
    char *pciPath;  /* sysfs PCI directory of the NIC (topology); NULL if virtual */
    uint64_t guid;  /* devices sharing a guid are one physical port */
    int ptrSupport; /* OR of NCCL_PTR_HOST, NCCL_PTR_CUDA, NCCL_PTR_DMABUF */
    int speed;      /* Mbps (100000 = 100 Gb/s) */
    int port;       /* port number, used together with guid */
    float latency;  /* microseconds; 0 = the core's default */
    int maxComms;   /* most connections the device can create */
    int maxRecvs;   /* most buffers one grouped irecv may carry (1: no grouping) */
} ncclNetProperties_v6_t;

/* The net plugin's function table (17 slots). Every function returns ncclResult_t. */
typedef struct {
    /* Slot 0. Name of the network (logs; matched case-insensitively against NCCL_NET).
     * Static storage owned by the plugin. Since v2. */
    const char *name;
    /* Slot 1. Initialize the plugin once per process. logFunction is the core's logger
     * and stays valid until the library is closed. May block briefly (device discovery).
     * A non-success return disables the plugin. Since v2. */
    ncclResult_t (*init)(ncclDebugLogger_t logFunction);
    /* Slot 2. Out: *ndev = number of physical devices. 0 or an error disables the
     * plugin. Does not block. Since v2. */
    ncclResult_t (*devices)(int *ndev);
    /* Slot 3. Fill *props (core-owned) for device dev, physical or virtual. May be
     * called any number of times, from any thread. Does not block. Since v3. */
    ncclResult_t (*getProperties)(int dev, ncclNetProperties_v6_t *props);
    /* Slot 4. Receiver side: create a listening object on dev and write up to
     * NCCL_NET_HANDLE_MAXSIZE bytes of connection info into handle (a core-owned
     * buffer the core ships to the peer). Out: *listenComm, non-NULL on success,
     * plugin-owned until closeListen. Must not block. Since v2. */
    ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
    /* Slot 5. Sender side: connect to the peer whose listen produced handle.
     * Non-blocking: success with *sendComm == NULL means "call again". *sendComm is
     * plugin-owned until closeSend. Must not block. Non-blocking since v5. */
    ncclResult_t (*connect)(int dev, void *handle, void **sendComm);
    /* Slot 6. Receiver side: complete a connection on listenComm. Same non-blocking
     * rule as connect (NULL *recvComm = call again). *recvComm is plugin-owned until
     * closeRecv. Must not block. Non-blocking since v5. */
    ncclResult_t (*accept)(void *listenComm, void **recvComm);
    /* Slot 7. Register data[0..size) for use with a send or receive comm; type is
     * NCCL_PTR_HOST or NCCL_PTR_CUDA. Out: *mhandle, plugin-owned until deregMr. The
     * memory stays owned by the caller. May block (pinning). int size up to v7. */
    ncclResult_t (*regMr)(void *comm, void *data, int size, int type, void **mhandle);
    /* Slot 8. Register a dma-buf (fd, offset) backing data[0..size); type is
     * NCCL_PTR_CUDA. The core closes fd as soon as this returns, so import it before
     * returning. Optional: NULL unless ptrSupport has NCCL_PTR_DMABUF. Since v6. */
    ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                                int fd, void **mhandle);
    /* Slot 9. Release a registration made by regMr or regMrDmaBuf. Since v2. */
    ncclResult_t (*deregMr)(void *comm, void *mhandle);
    /* Slot 10. Post a send of data[0..size) registered as mhandle; tag is the sender's
     * rank. Out: *request, plugin-owned; NULL means "could not post now, retry". The
     * buffer must stay untouched until test reports done. Proxy thread; must not
     * block. Since v5 (tagged); size is int up to v8. */
    ncclResult_t (*isend)(void *sendComm, void *data, int size, int tag, void *mhandle,
                          void **request);
    /* Slot 11. Post one grouped receive of n <= maxRecvs buffers; sizes are capacities
     * and tags select which buffer a send lands in. Out: *request as for isend. Proxy
     * thread; must not block. Since v5 (grouped); sizes are int up to v8. */
    ncclResult_t (*irecv)(void *recvComm, int n, void **data, int *sizes, int *tags,
                          void **mhandles, void **request);
    /* Slot 12. Make data received into GPU memory visible to the GPU. Out: *request;
     * NULL means nothing to wait for. Proxy thread; must not block. Since v4. */
    ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                           void **request);
    /* Slot 13. Poll request. Out: *done = 1 when complete, and if sizes is not NULL the
     * byte count of each buffer (n entries for a grouped receive). Once done, the
     * request belongs to the plugin again. Proxy thread; must not block. Since v2. */
    ncclResult_t (*test)(void *request, int *done, int *sizes);
    /* Slots 14-16. Destroy a send comm, receive comm or listener and everything the
     * plugin allocated for it. No requests are pending. */
    ncclResult_t (*closeSend)(void *sendComm);
    ncclResult_t (*closeRecv)(void *recvComm);
    ncclResult_t (*closeListen)(void *listenComm);
} ncclNet_v6_t;

#ifdef __cplusplus
}
#endif

#endif /* BRAID_PLUGIN_API_NET_V6_H_ */
