/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Net plugin ABI version 10 (NCCL 2.26): symbol "ncclNetPlugin_v10", 20 slots, 160 bytes.
 * Frozen: never edit a released version; a change is a new version file.
 * init is process-wide (logger and profiler callback); the traffic-class config travels
 * with connect. Properties are 104 bytes; virtual NICs merge up to 4 devices.
 */
#ifndef BRAID_PLUGIN_API_NET_V10_H_
#define BRAID_PLUGIN_API_NET_V10_H_

#include "net_common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NCCL_NET_MAX_DEVS_PER_NIC_V10 4

/* Device-offload handle (32 bytes); host-only plugins leave it NULL. */
typedef struct {
    ncclNetDeviceType netDeviceType;
    int netDeviceVersion;
    void *handle;
    size_t size;
    int needsProxyProgress;
} ncclNetDeviceHandle_v10_t;

/* Physical devices merged into one virtual NIC (20 bytes). */
typedef struct {
    int ndevs;
    int devs[NCCL_NET_MAX_DEVS_PER_NIC_V10];
} ncclNetVDeviceProps_v10_t;

/* Per-connection configuration handed to connect (4 bytes). */
typedef struct {
    int trafficClass; /* plugin-specific QoS; NCCL_NET_TRAFFIC_CLASS_UNDEF when unset */
} ncclNetCommConfig_v10_t;

/* Properties of one device, filled by getProperties (104 bytes on LP64). */
typedef struct {
    char *name;          /* for logs */
    char *pciPath;       /* sysfs PCI path of the NIC, NULL for virtual NICs */
    uint64_t guid;       /* devices with one guid are one physical port */
    int ptrSupport;      /* NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF */
    int regIsGlobal;     /* registrations are not bound to one comm */
    int forceFlush;      /* iflush after every GPU receive */
    int speed;           /* Mbps */
    int port;            /* port number, used with guid */
    float latency;       /* microseconds; 0 = use the core's default */
    int maxComms;        /* most connections the device can make */
    int maxRecvs;        /* most buffers in one grouped irecv */
    ncclNetDeviceType netDeviceType;
    int netDeviceVersion;
    ncclNetVDeviceProps_v10_t vProps;
    size_t maxP2pBytes;  /* largest single p2p transfer, in (0, 2^40] */
    size_t maxCollBytes; /* largest single collective transfer, in (0, 2^40] */
} ncclNetProperties_v10_t;

/*
 * The net plugin's function table. Every call returns ncclResult_t. Data-path calls
 * (isend, irecv, iflush, test) come from the core's proxy thread and must not block;
 * connect and accept are non-blocking and signal "call again" with a NULL comm.
 */
typedef struct {
    /* Name of the network; matched case-insensitively against NCCL_NET. */
    const char *name;
    /* Process-wide initialisation with the core's logger and profiler callback (called
     * once, whatever the number of communicators). */
    ncclResult_t (*init)(ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
    /* Number of physical devices. 0 disables the plugin. */
    ncclResult_t (*devices)(int *ndev);
    /* Fill the properties of device dev (physical or virtual). Callable any time. */
    ncclResult_t (*getProperties)(int dev, ncclNetProperties_v10_t *props);
    /* Receiver side: create a listening object and write up to NCCL_NET_HANDLE_MAXSIZE
     * bytes of connection info into handle. Must not block. */
    ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
    /* Sender side: connect to the peer's handle. Non-blocking: success with
     * *sendComm == NULL means call again. config carries the traffic class.
     * sendDevComm may be NULL (host only). */
    ncclResult_t (*connect)(int dev, ncclNetCommConfig_v10_t *config, void *handle,
                            void **sendComm, ncclNetDeviceHandle_v10_t **sendDevComm);
    /* Receiver side completion of a connection; same NULL-means-retry rule. */
    ncclResult_t (*accept)(void *listenComm, void **recvComm,
                           ncclNetDeviceHandle_v10_t **recvDevComm);
    /* Register memory for a send or receive comm; type is NCCL_PTR_HOST or _CUDA. */
    ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
    /* Register a dma-buf; the core closes fd right after the call. Optional (NULL). */
    ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type,
                                uint64_t offset, int fd, void **mhandle);
    /* Release a registration. */
    ncclResult_t (*deregMr)(void *comm, void *mhandle);
    /* Post a send; *request == NULL on return means "retry later". tag is the sender's
     * rank; phandle is an opaque profiler handle. */
    ncclResult_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle,
                          void *phandle, void **request);
    /* Post a grouped receive of n <= maxRecvs buffers; sizes are capacities. */
    ncclResult_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags,
                          void **mhandles, void **phandles, void **request);
    /* Make received GPU data visible; *request == NULL means nothing to wait for. */
    ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                           void **request);
    /* Poll a request; on completion *done = 1 and sizes (if not NULL) get the byte counts
     * per buffer. A completed request belongs to the plugin again. */
    ncclResult_t (*test)(void *request, int *done, int *sizes);
    /* Close connections and listeners. */
    ncclResult_t (*closeSend)(void *sendComm);
    ncclResult_t (*closeRecv)(void *recvComm);
    ncclResult_t (*closeListen)(void *listenComm);
    /* Device offload only: export an mhandle for device code. Optional (NULL). */
    ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
    /* Called after the data of a completed receive was consumed. Optional (NULL). */
    ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
    /* Merge physical devices into a virtual one; its index goes to *d. Optional (NULL). */
    ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_v10_t *props);
} ncclNet_v10_t;

#ifdef __cplusplus
}
#endif

#endif /* BRAID_PLUGIN_API_NET_V10_H_ */
