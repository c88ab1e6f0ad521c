/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CollNet (in-network collectives) plugin ABI version 12 (NCCL 2.30): symbol
 * "ncclCollNetPlugin_v12", type ncclCollNet_v12_t, 19 slots (152 bytes on LP64). Frozen:
 * a released version is never edited; a change is a new version file.
 *
 * The collnet table is optional and lives in the same library as the net plugin
 * (ncclNetPlugin_v12); the core disables collnet, but keeps the net plugin, when the
 * symbol is absent, init fails or devices reports 0. It is used only when the user
 * enables it (NCCL_COLLNET_ENABLE or ncclConfig_t.collnetEnable).
 *
 * Same member list as v11; the referenced net properties are the v12 layout
 * (128 bytes, 8-device virtual NICs), which is what makes this a new version.
 *
 * Threading: init, devices, getProperties, listen, connect and reduceSupport are
 * called from communicator init (any application thread, serialized by the core);
 * the data path (iallreduce, iallgather, ireducescatter, iflush, test) only from the
 * proxy thread that owns the collComm. Distinct collComms may be used concurrently.
 * No member may block waiting for peers, except connect, which is collective.
 */
#ifndef BRAID_PLUGIN_API_COLLNET_V12_H_
#define BRAID_PLUGIN_API_COLLNET_V12_H_

#include "../net/net_v12.h"
#include "collnet_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * One part of a scattered buffer for iallgather / ireducescatter (24 bytes on LP64).
 * The array is core-owned and valid only during the call that receives it.
 */
typedef struct {
    void *mhandle; /* registration (regMr) covering the part */
    void *address; /* first byte of the part */
    size_t size;   /* bytes of this part */
} ncclNetSGE_v12_t;

/* The collnet plugin's function table (19 slots). Every function returns ncclResult_t. */
typedef struct {
    /* Slot 0. Name of the collnet implementation, for logs. Plugin-owned static
     * storage. Since v3. */
    const char *name;
    /* Slot 1. Create a per-communicator context in *ctx (plugin-owned until finalize).
     * commId is the communicator hash; logFunction the core's logger, valid until the
     * library is closed. Called once per communicator; a non-success return disables
     * collnet for it. May block briefly. Per-communicator since v11. */
    ncclResult_t (*init)(void **ctx, uint64_t commId, ncclDebugLogger_t logFunction);
    /* Slot 2. Out: *ndev = number of collnet devices; 0 disables collnet. Since v3. */
    ncclResult_t (*devices)(int *ndev);
    /* Slot 3. Fill *props (core-owned; the net v12 property layout) for device dev.
     * Callable any time, from any thread. Does not block. Since v3. */
    ncclResult_t (*getProperties)(int dev, ncclNetProperties_v12_t *props);
    /* Slot 4. Create a listening object on dev and write up to NCCL_NET_HANDLE_MAXSIZE
     * bytes of connection info into handle (core-owned; the core gathers every rank's
     * handle). ctx is the context from init. Out: *listenComm, plugin-owned until
     * closeListen. Must not block. ctx argument since v11. */
    ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);
    /* Slot 5. Create the collective communicator: handles[i] points to rank i's
     * handle (nranks entries, core-owned), rank is this rank, listenComm this rank's
     * listener. Out: *collComm, plugin-owned until closeColl. Collective across the
     * ranks, so it may block until every rank has called it. Since v3. */
    ncclResult_t (*connect)(void *handles[], int nranks, int rank, void *listenComm,
                            void **collComm);
    /* Slot 6. Out: *supported = 1 if the network can reduce dataType with redOp, else
     * 0. Pure query; does not block. Since v3. */
    ncclResult_t (*reduceSupport)(ncclDataType_t dataType, ncclRedOp_t redOp, int *supported);
    /* Slot 7. Register data[0..size) (NCCL_PTR_HOST or NCCL_PTR_CUDA per type) with
     * collComm. Out: *mhandle, plugin-owned until deregMr; the memory stays the
     * caller's. May block (pinning). size_t size since v8. */
    ncclResult_t (*regMr)(void *collComm, void *data, size_t size, int type, void **mhandle);
    /* Slot 8. Register a dma-buf (fd, offset) backing data[0..size). The core closes fd
     * right after the call returns. Optional (NULL) unless NCCL_PTR_DMABUF is
     * advertised. Since v6. */
    ncclResult_t (*regMrDmaBuf)(void *collComm, void *data, size_t size, int type, uint64_t offset,
                                int fd, void **mhandle);
    /* Slot 9. Release a registration of regMr or regMrDmaBuf. Since v3. */
    ncclResult_t (*deregMr)(void *collComm, void *mhandle);
    /* Slot 10. Start an allreduce of count elements from sendData into recvData (both
     * registered). Out: *request (plugin-owned; NULL = retry later). Buffers stay
     * untouched by the core until test reports done. Proxy thread; must not block.
     * Since v3; count is size_t since v9. */
    ncclResult_t (*iallreduce)(void *collComm, void *sendData, void *recvData, size_t count,
                               ncclDataType_t dataType, ncclRedOp_t redOp, void *sendMhandle,
                               void *recvMhandle, void **request);
    /* Slot 11. Start an allgather: this rank contributes bytesPerRank bytes at
     * sendData; the gathered result lands in the nRecvParts parts of recvParts (a
     * core-owned array valid during the call only), of which this call covers the
     * window [windowOffset, windowOffset + windowBytes). Out: *request as for
     * iallreduce. Optional (NULL: the core never selects CollNet AllGather). Since v8. */
    ncclResult_t (*iallgather)(void *collComm, void *sendData, int nRecvParts,
                               ncclNetSGE_v12_t *recvParts, size_t bytesPerRank,
                               size_t windowOffset, size_t windowBytes, void *sendMhandle,
                               void **request);
    /* Slot 12. Start a reduce-scatter: the input is the nSendParts parts of sendParts
     * (core-owned, valid during the call), this rank's bytesPerRank-byte block lands at
     * recvData; the call covers [windowOffset, windowOffset + windowBytes). Out:
     * *request. Optional (NULL: the core never selects CollNet ReduceScatter). Since v8. */
    ncclResult_t (*ireducescatter)(void *collComm, int nSendParts, ncclNetSGE_v12_t *sendParts,
                                   void *recvData, size_t bytesPerRank, size_t windowOffset,
                                   size_t windowBytes, ncclDataType_t dataType, ncclRedOp_t redOp,
                                   void *recvMhandle, void **request);
    /* Slot 13. Make data the network wrote into GPU memory visible to the GPU. Out:
     * *request; NULL means nothing to wait for. Proxy thread. Since v4. */
    ncclResult_t (*iflush)(void *collComm, void *data, int size, void *mhandle, void **request);
    /* Slot 14. Poll request. Out: *done = 1 when complete and *size = bytes handled.
     * A completed request belongs to the plugin again. Proxy thread. Since v3. */
    ncclResult_t (*test)(void *request, int *done, int *size);
    /* Slot 15. Destroy a collective communicator; no requests are pending. Since v3. */
    ncclResult_t (*closeColl)(void *collComm);
    /* Slot 16. Destroy a listener. Since v3. */
    ncclResult_t (*closeListen)(void *listenComm);
    /* Slot 17. NIC fusion: create a virtual collnet device merging
     * props->devs[0..ndevs-1] (core-owned, read only); its index goes to *d.
     * Optional (NULL = no fusion). Since v9. */
    ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_v12_t *props);
    /* Slot 18. Destroy the context init created, once per successful init, after
     * every collComm and listener of it was closed. Since v11. */
    ncclResult_t (*finalize)(void *ctx);
} ncclCollNet_v12_t;

#ifdef __cplusplus
}
#endif

#endif /* BRAID_PLUGIN_API_COLLNET_V12_H_ */
