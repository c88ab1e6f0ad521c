/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Net plugin ABI version 8 (NCCL 2.20): symbol "ncclNetPlugin_v8", type ncclNet_v8_t,
 * 19 slots (152 bytes on LP64). Frozen: a released version is never edited; a change is
 * a new version file.
 *
 * What v8 added over v7: properties gain regIsGlobal after ptrSupport (64 bytes in all);
 * regMr takes a size_t size. Transfer sizes in isend/irecv are still int (the core
 * narrows and range-checks them to 1 GiB); there is no makeVDevice. init is
 * process-wide and takes only the logger. The collnet companion (collnet_v8.h) gained
 * iallgather/ireducescatter in this version.
 *
 * Threading, for every member below: the core calls init, devices and getProperties
 * from communicator-init paths (any application thread, serialized by the core);
 * listen/connect/accept from init or from the proxy thread; regMr/deregMr from any
 * thread that owns the comm; the data path (isend, irecv, iflush, test, irecvConsumed)
 * only from the proxy thread that owns the comm. A single comm is never used by two
 * threads at once, but different comms of one plugin may be used concurrently, so
 * plugin-global state needs locking. No member may block waiting for a peer.
 */
#ifndef BRAID_PLUGIN_API_NET_V8_H_
#define BRAID_PLUGIN_API_NET_V8_H_

#include "net_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Device-offload handle (32 bytes). A plugin that offloads part of the data path to
 * device code allocates one in connect/accept and returns it through the
 * sendDevComm/recvDevComm out-parameter; the plugin owns it and frees it in
 * closeSend/closeRecv. Host-only plugins never create one.
 */
typedef struct {
    ncclNetDeviceType netDeviceType; /* kind of device code that consumes `handle` */
    int netDeviceVersion;            /* version of that device code's protocol */
    void *handle;                    /* plugin data the device code reads */
    size_t size;                     /* bytes at `handle` */
    int needsProxyProgress;          /* 1: the core must keep calling the proxy path */
} ncclNetDeviceHandle_v8_t;

/*
 * Properties of one device (64 bytes on LP64), filled by getProperties into memory
 * the core owns (usually its stack). String pointers must stay valid for the life of
 * the plugin (the core keeps them without copying).
 */
typedef struct {
    char *name;      /* device name, for logs */
    char *pciPath;   /* sysfs PCI directory of the NIC (topology); NULL if virtual */
    uint64_t guid;   /* devices sharing a guid are one physical port */
    int ptrSupport;  /* OR of NCCL_PTR_HOST, NCCL_PTR_CUDA, NCCL_PTR_DMABUF */
    int regIsGlobal; /* 1: a registration is usable on any comm (since v8) */
    int speed;       /* Mbps (100000 = 100 Gb/s) */
    int port;        /* port number, used together with guid */
    float latency;   /* microseconds; 0 = the core's default */
    int maxComms;    /* most connections the device can create */
    int maxRecvs;    /* most buffers one grouped irecv may carry (1: no grouping) */
    ncclNetDeviceType netDeviceType; /* NCCL_NET_DEVICE_HOST unless offloading */
    int netDeviceVersion;            /* NCCL_NET_DEVICE_INVALID_VERSION when host-only */
} ncclNetProperties_v8_t;

/* The net plugin's function table (19 slots). Every function returns ncclResult_t. */
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
    ncclResult_t (*getProperties)(int dev, ncclNetProperties_v8_t *props);
    /* Slot 4. Receiver side: create a listening object on dev and write up to
     * NCCL_NET_HANDLE_MAXSIZE bytes of connection info into handle (a core-owned
     * buffer the core ships to the peer). Out: *listenComm, non-NULL on success,
     * plugin-owned until closeListen. Must not block. Since v2. */
    ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
    /* Slot 5. Sender side: connect to the peer whose listen produced handle.
     * Non-blocking: success with *sendComm == NULL means "call again". sendDevComm may
     * be NULL or point to NULL (host-only); when the core passes a non-NULL pointer and
     * the plugin offloads, the plugin stores its device handle there. *sendComm is
     * plugin-owned until closeSend. Must not block. Since v7 with sendDevComm. */
    ncclResult_t (*connect)(int dev, void *handle, void **sendComm,
                            ncclNetDeviceHandle_v8_t **sendDevComm);
    /* Slot 6. Receiver side: complete a connection on listenComm. Same non-blocking
     * rule as connect (NULL *recvComm = call again). *recvComm is plugin-owned until
     * closeRecv. Must not block. Since v7 with recvDevComm. */
    ncclResult_t (*accept)(void *listenComm, void **recvComm,
                           ncclNetDeviceHandle_v8_t **recvDevComm);
    /* Slot 7. Register data[0..size) for use with a send or receive comm; type is
     * NCCL_PTR_HOST or NCCL_PTR_CUDA. Out: *mhandle, plugin-owned until deregMr. The
     * memory stays owned by the caller. May block (pinning). size_t since v8. */
    ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
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
     * plugin allocated for it (device handles included). No requests are pending. */
    ncclResult_t (*closeSend)(void *sendComm);
    ncclResult_t (*closeRecv)(void *recvComm);
    ncclResult_t (*closeListen)(void *listenComm);
    /* Slot 17. Device offload only: export mhandle in a form device code can use, into
     * *dptr_mhandle (plugin-owned). Optional (NULL). Since v7. */
    ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
    /* Slot 18. Called after the GPU consumed the data of a completed receive; request is
     * the pointer irecv returned. Optional (NULL). Proxy thread. Since v7. */
    ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
} ncclNet_v8_t;

#ifdef __cplusplus
}
#endif

#endif /* BRAID_PLUGIN_API_NET_V8_H_ */
