/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Layout facts of the net and collnet plugin ABIs (plugin-abi.md 1.2-1.6 and 1.10):
 * size of every table and auxiliary struct, the slot of every function member, and the
 * offset of every property field of every version. The numbers are written out from
 * the document, never computed, so an edit of a frozen header shows up here.
 */
#include "nccl.h"
#include "plugin_api/collnet/collnet.h"
#include "plugin_api/net/net.h"

#include "abi_facts.h"

/* Slots 0-16: the v6 member list, which every later version keeps in place. */
#define NET_SLOTS_V6(T)                                                                            \
    ABI_SLOT(T, name, 0), ABI_SLOT(T, init, 1), ABI_SLOT(T, devices, 2),                           \
        ABI_SLOT(T, getProperties, 3), ABI_SLOT(T, listen, 4), ABI_SLOT(T, connect, 5),            \
        ABI_SLOT(T, accept, 6), ABI_SLOT(T, regMr, 7), ABI_SLOT(T, regMrDmaBuf, 8),                \
        ABI_SLOT(T, deregMr, 9), ABI_SLOT(T, isend, 10), ABI_SLOT(T, irecv, 11),                   \
        ABI_SLOT(T, iflush, 12), ABI_SLOT(T, test, 13), ABI_SLOT(T, closeSend, 14),                \
        ABI_SLOT(T, closeRecv, 15), ABI_SLOT(T, closeListen, 16)
#define NET_SLOTS_V7(T)                                                                            \
    NET_SLOTS_V6(T), ABI_SLOT(T, getDeviceMr, 17), ABI_SLOT(T, irecvConsumed, 18)
#define NET_SLOTS_V9(T) NET_SLOTS_V7(T), ABI_SLOT(T, makeVDevice, 19)
#define NET_SLOTS_V11(T) NET_SLOTS_V9(T), ABI_SLOT(T, finalize, 20), ABI_SLOT(T, setNetAttr, 21)

/* Property fields present since v6 (offsets for v6/v7, where nothing precedes speed). */
#define PROPS_HEAD(T)                                                                              \
    ABI_OFF(T, name, 0), ABI_OFF(T, pciPath, 8), ABI_OFF(T, guid, 16), ABI_OFF(T, ptrSupport, 24)

/* Device handle (v7..v12, 32 bytes). */
#define DEVHANDLE(T)                                                                               \
    ABI_SIZE(T, 32), ABI_OFF(T, netDeviceType, 0), ABI_OFF(T, netDeviceVersion, 4),                \
        ABI_OFF(T, handle, 8), ABI_OFF(T, size, 16), ABI_OFF(T, needsProxyProgress, 24)

/* Property fields of v9 up to netDeviceVersion (v9, v10, v11, v12 share them). */
#define PROPS_V9_HEAD(T)                                                                           \
    PROPS_HEAD(T), ABI_OFF(T, regIsGlobal, 28), ABI_OFF(T, forceFlush, 32), ABI_OFF(T, speed, 36), \
        ABI_OFF(T, port, 40), ABI_OFF(T, latency, 44), ABI_OFF(T, maxComms, 48),                   \
        ABI_OFF(T, maxRecvs, 52), ABI_OFF(T, netDeviceType, 56), ABI_OFF(T, netDeviceVersion, 60), \
        ABI_OFF(T, vProps, 64)

static const abi_fact_t net_v6[] = {
    ABI_SIZE(ncclNet_v6_t, 136),
    NET_SLOTS_V6(ncclNet_v6_t),
    ABI_SIZE(ncclNetProperties_v6_t, 48),
    PROPS_HEAD(ncclNetProperties_v6_t),
    ABI_OFF(ncclNetProperties_v6_t, speed, 28),
    ABI_OFF(ncclNetProperties_v6_t, port, 32),
    ABI_OFF(ncclNetProperties_v6_t, latency, 36),
    ABI_OFF(ncclNetProperties_v6_t, maxComms, 40),
    ABI_OFF(ncclNetProperties_v6_t, maxRecvs, 44),
    ABI_VAL(NCCL_NET_MAX_REQUESTS_V6, 8),
};

static const abi_fact_t net_v7[] = {
    ABI_SIZE(ncclNet_v7_t, 152),
    NET_SLOTS_V7(ncclNet_v7_t),
    ABI_SIZE(ncclNetProperties_v7_t, 56),
    PROPS_HEAD(ncclNetProperties_v7_t),
    ABI_OFF(ncclNetProperties_v7_t, speed, 28),
    ABI_OFF(ncclNetProperties_v7_t, port, 32),
    ABI_OFF(ncclNetProperties_v7_t, latency, 36),
    ABI_OFF(ncclNetProperties_v7_t, maxComms, 40),
    ABI_OFF(ncclNetProperties_v7_t, maxRecvs, 44),
    ABI_OFF(ncclNetProperties_v7_t, netDeviceType, 48),
    ABI_OFF(ncclNetProperties_v7_t, netDeviceVersion, 52),
    DEVHANDLE(ncclNetDeviceHandle_v7_t),
};

static const abi_fact_t net_v8[] = {
    ABI_SIZE(ncclNet_v8_t, 152),
    NET_SLOTS_V7(ncclNet_v8_t),
    ABI_SIZE(ncclNetProperties_v8_t, 64),
    PROPS_HEAD(ncclNetProperties_v8_t),
    ABI_OFF(ncclNetProperties_v8_t, regIsGlobal, 28),
    ABI_OFF(ncclNetProperties_v8_t, speed, 32),
    ABI_OFF(ncclNetProperties_v8_t, port, 36),
    ABI_OFF(ncclNetProperties_v8_t, latency, 40),
    ABI_OFF(ncclNetProperties_v8_t, maxComms, 44),
    ABI_OFF(ncclNetProperties_v8_t, maxRecvs, 48),
    ABI_OFF(ncclNetProperties_v8_t, netDeviceType, 52),
    ABI_OFF(ncclNetProperties_v8_t, netDeviceVersion, 56),
    DEVHANDLE(ncclNetDeviceHandle_v8_t),
};

static const abi_fact_t net_v9[] = {
    ABI_SIZE(ncclNet_v9_t, 160),
    NET_SLOTS_V9(ncclNet_v9_t),
    ABI_SIZE(ncclNetProperties_v9_t, 104),
    PROPS_V9_HEAD(ncclNetProperties_v9_t),
    ABI_OFF(ncclNetProperties_v9_t, maxP2pBytes, 88),
    ABI_OFF(ncclNetProperties_v9_t, maxCollBytes, 96),
    DEVHANDLE(ncclNetDeviceHandle_v9_t),
    ABI_SIZE(ncclNetVDeviceProps_v9_t, 20),
    ABI_OFF(ncclNetVDeviceProps_v9_t, devs, 4),
    ABI_VAL(NCCL_NET_MAX_DEVS_PER_NIC_V9, 4),
};

static const abi_fact_t net_v10[] = {
    ABI_SIZE(ncclNet_v10_t, 160),
    NET_SLOTS_V9(ncclNet_v10_t),
    ABI_SIZE(ncclNetProperties_v10_t, 104),
    PROPS_V9_HEAD(ncclNetProperties_v10_t),
    ABI_OFF(ncclNetProperties_v10_t, maxP2pBytes, 88),
    ABI_OFF(ncclNetProperties_v10_t, maxCollBytes, 96),
    DEVHANDLE(ncclNetDeviceHandle_v10_t),
    ABI_SIZE(ncclNetVDeviceProps_v10_t, 20),
    ABI_SIZE(ncclNetCommConfig_v10_t, 4),
    ABI_VAL(NCCL_NET_MAX_DEVS_PER_NIC_V10, 4),
};

#define NET_ATTR(V)                                                                                \
    ABI_SIZE(ncclNetCommAttr_##V##_t, 16),                                                         \
        ABI_OFF(ncclNetCommAttr_##V##_t, maxConcurrentPeers, 0),                                   \
        ABI_OFF(ncclNetCommAttr_##V##_t, minConcurrentPeers, 4),                                   \
        ABI_OFF(ncclNetCommAttr_##V##_t, maxFlowsPerPeer, 8),                                      \
        ABI_OFF(ncclNetCommAttr_##V##_t, minFlowsPerPeer, 12), ABI_SIZE(ncclNetAttr_##V##_t, 44),  \
        ABI_OFF(ncclNetAttr_##V##_t, sendCommAttr, 0),                                             \
        ABI_OFF(ncclNetAttr_##V##_t, recvCommAttr, 16), ABI_OFF(ncclNetAttr_##V##_t, op, 32),      \
        ABI_OFF(ncclNetAttr_##V##_t, algo, 36), ABI_OFF(ncclNetAttr_##V##_t, proto, 40),           \
        ABI_SIZE(ncclNetCommConfig_##V##_t, 4)

static const abi_fact_t net_v11[] = {
    ABI_SIZE(ncclNet_v11_t, 176),
    NET_SLOTS_V11(ncclNet_v11_t),
    ABI_SIZE(ncclNetProperties_v11_t, 112),
    PROPS_V9_HEAD(ncclNetProperties_v11_t),
    ABI_OFF(ncclNetProperties_v11_t, maxP2pBytes, 88),
    ABI_OFF(ncclNetProperties_v11_t, maxCollBytes, 96),
    ABI_OFF(ncclNetProperties_v11_t, maxMultiRequestSize, 104),
    DEVHANDLE(ncclNetDeviceHandle_v11_t),
    ABI_SIZE(ncclNetVDeviceProps_v11_t, 20),
    NET_ATTR(v11),
};

static const abi_fact_t net_v12[] = {
    ABI_SIZE(ncclNet_v12_t, 176),
    NET_SLOTS_V11(ncclNet_v12_t),
    ABI_SIZE(ncclNetProperties_v12_t, 128),
    PROPS_V9_HEAD(ncclNetProperties_v12_t),
    ABI_OFF(ncclNetProperties_v12_t, maxP2pBytes, 104),
    ABI_OFF(ncclNetProperties_v12_t, maxCollBytes, 112),
    ABI_OFF(ncclNetProperties_v12_t, maxMultiRequestSize, 120),
    ABI_OFF(ncclNetProperties_v12_t, railId, 124),
    ABI_OFF(ncclNetProperties_v12_t, planeId, 126),
    DEVHANDLE(ncclNetDeviceHandle_v12_t),
    ABI_SIZE(ncclNetVDeviceProps_v12_t, 36),
    ABI_VAL(NCCL_NET_MAX_DEVS_PER_NIC_V12, 8),
    NET_ATTR(v12),
};

static const abi_fact_t net_constants[] = {
    ABI_VAL(NCCL_NET_HANDLE_MAXSIZE, 128),
    ABI_VAL(NCCL_PTR_HOST, 1),
    ABI_VAL(NCCL_PTR_CUDA, 2),
    ABI_VAL(NCCL_PTR_DMABUF, 4),
    ABI_VAL(NCCL_NET_MAX_REQUESTS, 32),
    ABI_VAL(NCCL_NET_OPTIONAL_RECV_COMPLETION, 1),
    ABI_VAL(NCCL_NET_MULTI_REQUEST, 2),
    ABI_VAL(NCCL_MAX_NET_SIZE_BYTES, 1LL << 40),
    ABI_VAL(NCCL_NET_TRAFFIC_CLASS_UNDEF, -1),
    ABI_VAL(NCCL_NET_ATTR_UNDEF, -1),
    ABI_VAL(NCCL_NET_ID_UNDEF, -1),
    ABI_VAL(NCCL_NET_DEVICE_INVALID_VERSION, 0),
    ABI_VAL(NCCL_NET_MTU_SIZE, 4096),
    ABI_VAL(NCCL_NET_DEVICE_HOST, 0),
    ABI_VAL(NCCL_NET_DEVICE_UNPACK, 1),
    ABI_VAL(NCCL_NET_DEVICE_GIN_PROXY, 2),
    ABI_VAL(NCCL_NET_DEVICE_GIN_GDAKI, 3),
    ABI_SIZE(ncclNetDeviceType, 4),
};

/* CollNet slots 0-16 (v8), 17 (v9+), 18 (v11+). */
#define COLLNET_SLOTS_V8(T)                                                                        \
    ABI_SLOT(T, name, 0), ABI_SLOT(T, init, 1), ABI_SLOT(T, devices, 2),                           \
        ABI_SLOT(T, getProperties, 3), ABI_SLOT(T, listen, 4), ABI_SLOT(T, connect, 5),            \
        ABI_SLOT(T, reduceSupport, 6), ABI_SLOT(T, regMr, 7), ABI_SLOT(T, regMrDmaBuf, 8),         \
        ABI_SLOT(T, deregMr, 9), ABI_SLOT(T, iallreduce, 10), ABI_SLOT(T, iallgather, 11),         \
        ABI_SLOT(T, ireducescatter, 12), ABI_SLOT(T, iflush, 13), ABI_SLOT(T, test, 14),           \
        ABI_SLOT(T, closeColl, 15), ABI_SLOT(T, closeListen, 16)
#define COLLNET_SLOTS_V9(T) COLLNET_SLOTS_V8(T), ABI_SLOT(T, makeVDevice, 17)
#define COLLNET_SLOTS_V11(T) COLLNET_SLOTS_V9(T), ABI_SLOT(T, finalize, 18)
#define SGE(T) ABI_SIZE(T, 24), ABI_OFF(T, mhandle, 0), ABI_OFF(T, address, 8), ABI_OFF(T, size, 16)

static const abi_fact_t collnet[] = {
    ABI_SIZE(ncclCollNet_v8_t, 136),
    COLLNET_SLOTS_V8(ncclCollNet_v8_t),
    SGE(ncclNetSGE_v8_t),
    ABI_VAL(sizeof(((ncclNetSGE_v8_t *)0)->size), 4),
    ABI_SIZE(ncclCollNet_v9_t, 144),
    COLLNET_SLOTS_V9(ncclCollNet_v9_t),
    SGE(ncclNetSGE_v9_t),
    ABI_VAL(sizeof(((ncclNetSGE_v9_t *)0)->size), 8),
    ABI_SIZE(ncclCollNet_v10_t, 144),
    COLLNET_SLOTS_V9(ncclCollNet_v10_t),
    SGE(ncclNetSGE_v10_t),
    ABI_SIZE(ncclCollNet_v11_t, 152),
    COLLNET_SLOTS_V11(ncclCollNet_v11_t),
    SGE(ncclNetSGE_v11_t),
    ABI_SIZE(ncclCollNet_v12_t, 152),
    COLLNET_SLOTS_V11(ncclCollNet_v12_t),
    SGE(ncclNetSGE_v12_t),
};

static const abi_fact_table_t net_tables[] = {
    ABI_TABLE("net v6", net_v6),          ABI_TABLE("net v7", net_v7),
    ABI_TABLE("net v8", net_v8),          ABI_TABLE("net v9", net_v9),
    ABI_TABLE("net v10", net_v10),        ABI_TABLE("net v11", net_v11),
    ABI_TABLE("net v12", net_v12),        ABI_TABLE("net constants", net_constants),
    ABI_TABLE("collnet v8-v12", collnet),
};

const abi_fact_table_t *abi_net_tables(size_t *n_p)
{
    *n_p = sizeof(net_tables) / sizeof(net_tables[0]);
    return net_tables;
}
