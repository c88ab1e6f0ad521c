/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Layout and value facts of the tuner (plugin-abi.md 2), profiler (3), env (4.1) ABIs,
 * the logger's levels and subsystem bits (5.5), and the public nccl.h (6): sizes,
 * offsets, slots and enum values, written out from the document.
 */
#include "nccl.h"
#include "plugin_api/env/env.h"
#include "plugin_api/profiler/profiler.h"
#include "plugin_api/tuner/tuner.h"

#include "abi_facts.h"

#define TUNER_CONSTANTS(T)                                                                         \
    ABI_SIZE(T, 1152), ABI_OFF(T, baseLatencies, 0), ABI_OFF(T, hwLatencies, 168),                 \
        ABI_OFF(T, llMaxBws, 672), ABI_OFF(T, perChMaxRingLL128Bws, 768),                          \
        ABI_OFF(T, perChMaxTreeLL128Bws, 864), ABI_OFF(T, perChMaxTreeBws, 960),                   \
        ABI_OFF(T, perChMaxNVLSTreeBws, 1056)
#define NVL_DOMAIN(T)                                                                              \
    ABI_SIZE(T, 12), ABI_OFF(T, nNvlDomains, 0), ABI_OFF(T, minRanksPerNvlDomain, 4),              \
        ABI_OFF(T, maxRanksPerNvlDomain, 8)

static const abi_fact_t tuner[] = {
    ABI_SIZE(ncclTuner_v2_t, 32),
    ABI_SLOT(ncclTuner_v2_t, name, 0),
    ABI_SLOT(ncclTuner_v2_t, init, 1),
    ABI_SLOT(ncclTuner_v2_t, getCollInfo, 2),
    ABI_SLOT(ncclTuner_v2_t, destroy, 3),
    ABI_SIZE(ncclTuner_v3_t, 32),
    ABI_SLOT(ncclTuner_v3_t, getCollInfo, 2),
    ABI_SLOT(ncclTuner_v3_t, destroy, 3),
    ABI_SIZE(ncclTuner_v4_t, 32),
    ABI_SLOT(ncclTuner_v4_t, getCollInfo, 2),
    ABI_SLOT(ncclTuner_v4_t, destroy, 3),
    ABI_SIZE(ncclTuner_v5_t, 32),
    ABI_SLOT(ncclTuner_v5_t, name, 0),
    ABI_SLOT(ncclTuner_v5_t, init, 1),
    ABI_SLOT(ncclTuner_v5_t, getCollInfo, 2),
    ABI_SLOT(ncclTuner_v5_t, finalize, 3),
    ABI_SIZE(ncclTuner_v6_t, 40),
    ABI_SLOT(ncclTuner_v6_t, name, 0),
    ABI_SLOT(ncclTuner_v6_t, init, 1),
    ABI_SLOT(ncclTuner_v6_t, getCollInfo, 2),
    ABI_SLOT(ncclTuner_v6_t, finalize, 3),
    ABI_SLOT(ncclTuner_v6_t, getChunkSize, 4),
    TUNER_CONSTANTS(ncclTunerConstants_v5_t),
    TUNER_CONSTANTS(ncclTunerConstants_v6_t),
    NVL_DOMAIN(ncclNvlDomainInfo_v5_t),
    NVL_DOMAIN(ncclNvlDomainInfo_v6_t),
    NVL_DOMAIN(ncclNvlDomainInfo_v7_t),
    /* v7 (NCCL 2.32): v6's slots; the bandwidth tables have 5 GPU generations. */
    ABI_SIZE(ncclTuner_v7_t, 40),
    ABI_SLOT(ncclTuner_v7_t, name, 0),
    ABI_SLOT(ncclTuner_v7_t, init, 1),
    ABI_SLOT(ncclTuner_v7_t, getCollInfo, 2),
    ABI_SLOT(ncclTuner_v7_t, finalize, 3),
    ABI_SLOT(ncclTuner_v7_t, getChunkSize, 4),
    ABI_VAL(NCCL_NUM_COMPCAPS_V7, 5),
    ABI_SIZE(ncclTunerConstants_v7_t, 1272),
    ABI_OFF(ncclTunerConstants_v7_t, hwLatencies, 168),
    ABI_OFF(ncclTunerConstants_v7_t, llMaxBws, 672),
    ABI_OFF(ncclTunerConstants_v7_t, perChMaxRingLL128Bws, 792),
    ABI_OFF(ncclTunerConstants_v7_t, perChMaxTreeLL128Bws, 912),
    ABI_OFF(ncclTunerConstants_v7_t, perChMaxTreeBws, 1032),
    ABI_OFF(ncclTunerConstants_v7_t, perChMaxNVLSTreeBws, 1152),
    /* A contiguous float[7][3] cost table: 84 bytes. */
    ABI_VAL(sizeof(float[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS]), 84),
};

static const abi_fact_t tuner_numbering[] = {
    ABI_VAL(NCCL_ALGO_UNDEF, -1),
    ABI_VAL(NCCL_ALGO_TREE, 0),
    ABI_VAL(NCCL_ALGO_RING, 1),
    ABI_VAL(NCCL_ALGO_COLLNET_DIRECT, 2),
    ABI_VAL(NCCL_ALGO_COLLNET_CHAIN, 3),
    ABI_VAL(NCCL_ALGO_NVLS, 4),
    ABI_VAL(NCCL_ALGO_NVLS_TREE, 5),
    ABI_VAL(NCCL_ALGO_PAT, 6),
    ABI_VAL(NCCL_NUM_ALGORITHMS, 7),
    ABI_VAL(NCCL_PROTO_UNDEF, -1),
    ABI_VAL(NCCL_PROTO_LL, 0),
    ABI_VAL(NCCL_PROTO_LL128, 1),
    ABI_VAL(NCCL_PROTO_SIMPLE, 2),
    ABI_VAL(NCCL_NUM_PROTOCOLS, 3),
    ABI_VAL(NCCL_ALGO_PROTO_IGNORE, -1),
    ABI_VAL(NCCL_NUM_FUNCTIONS, 5),
    ABI_VAL(ncclFuncBroadcast, 0),
    ABI_VAL(ncclFuncReduce, 1),
    ABI_VAL(ncclFuncAllGather, 2),
    ABI_VAL(ncclFuncReduceScatter, 3),
    ABI_VAL(ncclFuncAllReduce, 4),
    ABI_VAL(ncclFuncSendRecv, 5),
    ABI_VAL(ncclFuncSend, 6),
    ABI_VAL(ncclFuncRecv, 7),
    ABI_VAL(ncclFuncAlltoAll, 8),
    ABI_VAL(ncclFuncScatter, 9),
    ABI_VAL(ncclFuncGather, 10),
    ABI_VAL(ncclFuncAllGatherV, 11),
    ABI_VAL(ncclFuncPutSignal, 12),
    ABI_VAL(ncclFuncSignal, 13),
    ABI_VAL(ncclFuncWaitSignal, 14),
    ABI_VAL(ncclNumFuncs, 15),
    ABI_SIZE(ncclFunc_t, 4),
    ABI_VAL(NCCL_HW_NVLINK, 0),
    ABI_VAL(NCCL_HW_PCI, 1),
    ABI_VAL(NCCL_HW_NET, 2),
    ABI_VAL(NCCL_NUM_HW_LINKS, 3),
    ABI_VAL(NCCL_VOLTA_COMPCAP_IDX, 0),
    ABI_VAL(NCCL_AMPERE_COMPCAP_IDX, 1),
    ABI_VAL(NCCL_HOPPER_COMPCAP_IDX, 2),
    ABI_VAL(NCCL_BLACKWELL_COMPCAP_IDX, 3),
    ABI_VAL(NCCL_NUM_COMPCAPS, 4),
    ABI_VAL(NCCL_TUNING_SCALE_1NODE, 0),
    ABI_VAL(NCCL_TUNING_SCALE_2NODES, 1),
    ABI_VAL(NCCL_TUNING_SCALE_4NODES, 2),
    ABI_VAL(NCCL_NUM_TUNING_SCALES, 3),
};

#define PROF_SLOTS(T)                                                                              \
    ABI_SIZE(T, 48), ABI_SLOT(T, name, 0), ABI_SLOT(T, init, 1), ABI_SLOT(T, startEvent, 2),       \
        ABI_SLOT(T, stopEvent, 3), ABI_SLOT(T, recordEventState, 4), ABI_SLOT(T, finalize, 5)
/* Descriptor members whose offsets v4, v5 and v6 share. */
#define DESCR_COMMON(T)                                                                            \
    ABI_OFF(T, type, 0), ABI_OFF(T, parentObj, 8), ABI_OFF(T, rank, 16),                           \
        ABI_OFF(T, coll.seqNumber, 24), ABI_OFF(T, coll.func, 32), ABI_OFF(T, coll.sendBuff, 40),  \
        ABI_OFF(T, coll.recvBuff, 48), ABI_OFF(T, coll.count, 56), ABI_OFF(T, coll.root, 64),      \
        ABI_OFF(T, coll.datatype, 72), ABI_OFF(T, coll.nChannels, 80),                             \
        ABI_OFF(T, coll.nWarps, 81), ABI_OFF(T, coll.algo, 88), ABI_OFF(T, coll.proto, 96),        \
        ABI_OFF(T, p2p.func, 24), ABI_OFF(T, p2p.buff, 32), ABI_OFF(T, p2p.datatype, 40),          \
        ABI_OFF(T, p2p.count, 48), ABI_OFF(T, p2p.peer, 56), ABI_OFF(T, p2p.nChannels, 60),        \
        ABI_OFF(T, proxyOp.pid, 24), ABI_OFF(T, proxyOp.channelId, 28),                            \
        ABI_OFF(T, proxyOp.peer, 32), ABI_OFF(T, proxyOp.nSteps, 36),                              \
        ABI_OFF(T, proxyOp.chunkSize, 40), ABI_OFF(T, proxyOp.isSend, 44),                         \
        ABI_OFF(T, proxyStep.step, 24), ABI_OFF(T, kernelCh.channelId, 24),                        \
        ABI_OFF(T, kernelCh.pTimer, 32), ABI_OFF(T, netPlugin.id, 24),                             \
        ABI_OFF(T, netPlugin.data, 32)
/* v5 and v6: the API events and the parentGroup fields. */
#define DESCR_V5(T)                                                                                \
    ABI_SIZE(T, 112), DESCR_COMMON(T), ABI_VAL(sizeof(((T *)0)->type), 8),                         \
        ABI_OFF(T, coll.parentGroup, 104), ABI_OFF(T, p2p.parentGroup, 64),                        \
        ABI_OFF(T, groupApi.graphCaptured, 24), ABI_OFF(T, groupApi.groupDepth, 28),               \
        ABI_OFF(T, collApi.func, 24), ABI_OFF(T, collApi.count, 32),                               \
        ABI_OFF(T, collApi.datatype, 40), ABI_OFF(T, collApi.root, 48),                            \
        ABI_OFF(T, collApi.stream, 56), ABI_OFF(T, collApi.graphCaptured, 64),                     \
        ABI_OFF(T, p2pApi.func, 24), ABI_OFF(T, p2pApi.count, 32),                                 \
        ABI_OFF(T, p2pApi.datatype, 40), ABI_OFF(T, p2pApi.stream, 48),                            \
        ABI_OFF(T, p2pApi.graphCaptured, 56), ABI_OFF(T, kernelLaunch.stream, 24)
#define STATE_ARGS(T)                                                                              \
    ABI_SIZE(T, 8), ABI_OFF(T, proxyStep.transSize, 0), ABI_OFF(T, proxyCtrl.appendedProxyOps, 0), \
        ABI_OFF(T, netPlugin.data, 0), ABI_OFF(T, kernelCh.pTimer, 0)

static const abi_fact_t profiler_layout[] = {
    PROF_SLOTS(ncclProfiler_v4_t),
    PROF_SLOTS(ncclProfiler_v5_t),
    PROF_SLOTS(ncclProfiler_v6_t),
    ABI_SIZE(ncclProfilerEventDescr_v4_t, 104),
    DESCR_COMMON(ncclProfilerEventDescr_v4_t),
    ABI_VAL(sizeof(((ncclProfilerEventDescr_v4_t *)0)->type), 1),
    DESCR_V5(ncclProfilerEventDescr_v5_t),
    DESCR_V5(ncclProfilerEventDescr_v6_t),
    ABI_OFF(ncclProfilerEventDescr_v6_t, ceColl.seqNumber, 24),
    ABI_OFF(ncclProfilerEventDescr_v6_t, ceColl.datatype, 72),
    ABI_OFF(ncclProfilerEventDescr_v6_t, ceColl.syncStrategy, 80),
    ABI_OFF(ncclProfilerEventDescr_v6_t, ceColl.intraBatchSync, 88),
    ABI_OFF(ncclProfilerEventDescr_v6_t, ceColl.batchSize, 92),
    ABI_OFF(ncclProfilerEventDescr_v6_t, ceColl.numBatches, 96),
    ABI_OFF(ncclProfilerEventDescr_v6_t, ceColl.ceSeqNum, 100),
    ABI_OFF(ncclProfilerEventDescr_v6_t, ceColl.stream, 104),
    ABI_OFF(ncclProfilerEventDescr_v6_t, ceCollSync.isComplete, 24),
    ABI_OFF(ncclProfilerEventDescr_v6_t, ceCollSync.nRanks, 28),
    ABI_OFF(ncclProfilerEventDescr_v6_t, ceCollBatch.numOps, 24),
    ABI_OFF(ncclProfilerEventDescr_v6_t, ceCollBatch.totalBytes, 32),
    ABI_OFF(ncclProfilerEventDescr_v6_t, ceCollBatch.useIntraSync, 40),
    STATE_ARGS(ncclProfilerEventStateArgs_v4_t),
    STATE_ARGS(ncclProfilerEventStateArgs_v5_t),
    STATE_ARGS(ncclProfilerEventStateArgs_v6_t),
    ABI_SIZE(ncclProfilerEventState_v6_t, 4),
    /* v7 (NCCL 2.32): v6's members, user tags appended, kernel metadata, kernel phases. */
    PROF_SLOTS(ncclProfiler_v7_t),
    ABI_SIZE(ncclProfilerEventDescr_v7_t, 136),
    ABI_OFF(ncclProfilerEventDescr_v7_t, collApi.userTag, 72),
    ABI_OFF(ncclProfilerEventDescr_v7_t, p2pApi.userTag, 64),
    ABI_OFF(ncclProfilerEventDescr_v7_t, coll.parentGroup, 104),
    ABI_OFF(ncclProfilerEventDescr_v7_t, coll.kernelVariant, 112),
    ABI_OFF(ncclProfilerEventDescr_v7_t, coll.isSymColl, 120),
    ABI_OFF(ncclProfilerEventDescr_v7_t, coll.userTag, 128),
    ABI_OFF(ncclProfilerEventDescr_v7_t, p2p.userTag, 72),
    ABI_OFF(ncclProfilerEventDescr_v7_t, ceColl.userTag, 112),
    ABI_OFF(ncclProfilerEventDescr_v7_t, kernelPhase.phaseId, 25),
    ABI_OFF(ncclProfilerEventDescr_v7_t, kernelPhase.phaseName, 32),
    ABI_OFF(ncclProfilerEventDescr_v7_t, kernelPhase.pTimer, 40),
    STATE_ARGS(ncclProfilerEventStateArgs_v7_t),
    ABI_SIZE(ncclProfilerEventState_v7_t, 4),
};

static const abi_fact_t profiler_values[] = {
    ABI_VAL(ncclProfileGroup, 0x1),
    ABI_VAL(ncclProfileColl, 0x2),
    ABI_VAL(ncclProfileP2p, 0x4),
    ABI_VAL(ncclProfileProxyOp, 0x8),
    ABI_VAL(ncclProfileProxyStep, 0x10),
    ABI_VAL(ncclProfileProxyCtrl, 0x20),
    ABI_VAL(ncclProfileKernelCh, 0x40),
    ABI_VAL(ncclProfileNetPlugin, 0x80),
    ABI_VAL(ncclProfileGroupApi, 0x100),
    ABI_VAL(ncclProfileCollApi, 0x200),
    ABI_VAL(ncclProfileP2pApi, 0x400),
    ABI_VAL(ncclProfileKernelLaunch, 0x800),
    ABI_VAL(ncclProfileCeColl, 0x1000),
    ABI_VAL(ncclProfileCeSync, 0x2000),
    ABI_VAL(ncclProfileCeBatch, 0x4000),
    ABI_VAL(ncclProfileKernelPhase, 0x8000),
    ABI_VAL(NCCL_PROFILER_EVENT_MASK_V5, 4095),
    ABI_VAL(NCCL_PROFILER_EVENT_MASK_V6, 0x7fff),
    ABI_VAL(ncclProfilerProxyOpSendPosted, 0),
    ABI_VAL(ncclProfilerProxyOpSendRemFifoWait, 1),
    ABI_VAL(ncclProfilerProxyOpSendTransmitted, 2),
    ABI_VAL(ncclProfilerProxyOpSendDone, 3),
    ABI_VAL(ncclProfilerProxyOpRecvPosted, 4),
    ABI_VAL(ncclProfilerProxyOpRecvReceived, 5),
    ABI_VAL(ncclProfilerProxyOpRecvTransmitted, 6),
    ABI_VAL(ncclProfilerProxyOpRecvDone, 7),
    ABI_VAL(ncclProfilerProxyStepSendGPUWait, 8),
    ABI_VAL(ncclProfilerProxyStepSendWait, 9),
    ABI_VAL(ncclProfilerProxyStepRecvWait, 10),
    ABI_VAL(ncclProfilerProxyStepRecvFlushWait, 11),
    ABI_VAL(ncclProfilerProxyStepRecvGPUWait, 12),
    ABI_VAL(ncclProfilerProxyCtrlIdle, 13),
    ABI_VAL(ncclProfilerProxyCtrlActive, 14),
    ABI_VAL(ncclProfilerProxyCtrlSleep, 15),
    ABI_VAL(ncclProfilerProxyCtrlWakeup, 16),
    ABI_VAL(ncclProfilerProxyCtrlAppend, 17),
    ABI_VAL(ncclProfilerProxyCtrlAppendEnd, 18),
    ABI_VAL(ncclProfilerProxyOpInProgress_v4, 19),
    ABI_VAL(ncclProfilerProxyStepSendPeerWait_v4, 20),
    ABI_VAL(ncclProfilerNetPluginUpdate, 21),
    ABI_VAL(ncclProfilerKernelChStop, 22),
    ABI_VAL(ncclProfilerGroupStartApiStop, 23),
    ABI_VAL(ncclProfilerGroupEndApiStart, 24),
    ABI_VAL(ncclProfilerCeCollStart, 25),
    ABI_VAL(ncclProfilerCeCollComplete, 26),
    ABI_VAL(ncclProfilerCeSyncStart, 27),
    ABI_VAL(ncclProfilerCeSyncComplete, 28),
    ABI_VAL(ncclProfilerCeBatchStart, 29),
    ABI_VAL(ncclProfilerCeBatchComplete, 30),
    ABI_VAL(ncclProfilerKernelPhaseStop, 31),
    ABI_VAL(ncclProfilerNetEventStart, 0),
    ABI_VAL(ncclProfilerNetEventStop, 1),
    ABI_VAL(ncclProfilerNetEventUpdate, 2),
    ABI_VAL(ncclProfilerNetEventUpdateAndStop, 3),
    ABI_VAL(NCCL_PROFILER_NET_TYPE_IB, 0x10000),
    ABI_VAL(NCCL_PROFILER_NET_TYPE_SOCK, 0x20000),
    ABI_VAL(NCCL_PROFILER_NET_VER_MASK, 0xffff),
};

#define ENV_SLOTS(T)                                                                               \
    ABI_SIZE(T, 32), ABI_SLOT(T, name, 0), ABI_SLOT(T, init, 1), ABI_SLOT(T, finalize, 2),         \
        ABI_SLOT(T, getEnv, 3)

static const abi_fact_t env[] = {
    ENV_SLOTS(ncclEnvPlugin_v1_t),
    ENV_SLOTS(ncclEnvPlugin_v2_t),
};

static const abi_fact_t logging[] = {
    ABI_VAL(NCCL_LOG_NONE, 0),
    ABI_VAL(NCCL_LOG_VERSION, 1),
    ABI_VAL(NCCL_LOG_WARN, 2),
    ABI_VAL(NCCL_LOG_INFO, 3),
    ABI_VAL(NCCL_LOG_ABORT, 4),
    ABI_VAL(NCCL_LOG_TRACE, 5),
    ABI_SIZE(ncclDebugLogLevel, 4),
    ABI_VAL(NCCL_INIT, 0x1),
    ABI_VAL(NCCL_COLL, 0x2),
    ABI_VAL(NCCL_P2P, 0x4),
    ABI_VAL(NCCL_SHM, 0x8),
    ABI_VAL(NCCL_NET, 0x10),
    ABI_VAL(NCCL_GRAPH, 0x20),
    ABI_VAL(NCCL_TUNING, 0x40),
    ABI_VAL(NCCL_ENV, 0x80),
    ABI_VAL(NCCL_ALLOC, 0x100),
    ABI_VAL(NCCL_CALL, 0x200),
    ABI_VAL(NCCL_PROXY, 0x400),
    ABI_VAL(NCCL_NVLS, 0x800),
    ABI_VAL(NCCL_BOOTSTRAP, 0x1000),
    ABI_VAL(NCCL_REG, 0x2000),
    ABI_VAL(NCCL_PROFILE, 0x4000),
    ABI_VAL(NCCL_RAS, 0x8000),
    ABI_VAL(NCCL_DESTROY, 0x10000),
    ABI_VAL(NCCL_ALLOC_HOST, 0x20000),
    ABI_VAL(NCCL_ALL, -1),
};

static const abi_fact_t nccl_h[] = {
    ABI_SIZE(ncclConfig_t, 120),
    ABI_OFF(ncclConfig_t, size, 0),
    ABI_OFF(ncclConfig_t, magic, 8),
    ABI_OFF(ncclConfig_t, version, 12),
    ABI_OFF(ncclConfig_t, blocking, 16),
    ABI_OFF(ncclConfig_t, cgaClusterSize, 20),
    ABI_OFF(ncclConfig_t, minCTAs, 24),
    ABI_OFF(ncclConfig_t, maxCTAs, 28),
    ABI_OFF(ncclConfig_t, netName, 32),
    ABI_OFF(ncclConfig_t, splitShare, 40),
    ABI_OFF(ncclConfig_t, trafficClass, 44),
    ABI_OFF(ncclConfig_t, commName, 48),
    ABI_OFF(ncclConfig_t, collnetEnable, 56),
    ABI_OFF(ncclConfig_t, CTAPolicy, 60),
    ABI_OFF(ncclConfig_t, shrinkShare, 64),
    ABI_OFF(ncclConfig_t, nvlsCTAs, 68),
    ABI_OFF(ncclConfig_t, nChannelsPerNetPeer, 72),
    ABI_OFF(ncclConfig_t, nvlinkCentricSched, 76),
    ABI_OFF(ncclConfig_t, graphUsageMode, 80),
    ABI_OFF(ncclConfig_t, numRmaCtx, 84),
    ABI_OFF(ncclConfig_t, maxP2pPeers, 88),
    ABI_OFF(ncclConfig_t, graphStreamOrdering, 92),
    ABI_OFF(ncclConfig_t, launchOrderImplicit, 96),
    ABI_OFF(ncclConfig_t, numRmaSig, 100),
    ABI_OFF(ncclConfig_t, rmaEagerInit, 104),
    ABI_OFF(ncclConfig_t, hostCftMode, 108),
    ABI_OFF(ncclConfig_t, nvlsHostMode, 112),
    ABI_SIZE(ncclCollConfig_t, 72),
    ABI_OFF(ncclCollConfig_t, ext, 16),
    ABI_OFF(ncclCollConfig_t, minCTAs, 24),
    ABI_OFF(ncclCollConfig_t, maxCTAs, 28),
    ABI_OFF(ncclCollConfig_t, nvlsCTAs, 32),
    ABI_OFF(ncclCollConfig_t, cgaClusterSize, 36),
    ABI_OFF(ncclCollConfig_t, algSelection, 40),
    ABI_OFF(ncclCollConfig_t, forceAlgSelection, 48),
    ABI_OFF(ncclCollConfig_t, CTAPolicy, 52),
    ABI_OFF(ncclCollConfig_t, userProfilerTag, 56),
    ABI_OFF(ncclCollConfig_t, launchCompletionEvent, 64),
    ABI_SIZE(ncclConfigExt_t, 24),
    ABI_OFF(ncclConfigExt_t, key.vendorId, 8),
    ABI_OFF(ncclConfigExt_t, key.optionId, 12),
    ABI_OFF(ncclConfigExt_t, val, 16),
    ABI_SIZE(ncclEncryptionConfig_t, 32),
    ABI_OFF(ncclEncryptionConfig_t, mode, 16),
    ABI_OFF(ncclEncryptionConfig_t, psk, 24),
    ABI_SIZE(ncclWaitSignalDesc_t, 16),
    ABI_OFF(ncclWaitSignalDesc_t, ctx, 12),
    ABI_VAL(NCCL_API_MAGIC, 0xcafebeef),
    ABI_VAL(NCCL_WIN_STRICT_ORDERING, 0x02),
    ABI_VAL(NCCL_WIN_GIN_ONLY, 0x04),
    ABI_VAL(NCCL_WIN_CFT_COUNTED, 0x08),
    ABI_VAL(NCCL_SUSPEND_MEM, 0x01),
    ABI_VAL(ncclStatGpuMemSuspend, 0),
    ABI_VAL(ncclStatGpuMemSuspended, 1),
    ABI_VAL(ncclStatGpuMemPersist, 2),
    ABI_VAL(ncclStatGpuMemTotal, 3),
    ABI_VAL(NCCL_ENCRYPTION_MODE_NONE, 0),
    ABI_VAL(NCCL_ENCRYPTION_MODE_PSK, 1),
    ABI_VAL(ncclHostCftDefault, -2147483647LL - 1),
    ABI_VAL(ncclHostCftFallback, 3),
    ABI_VAL(ncclNvlsHostModeDisableSymmetricMultimem, 2),
    ABI_VAL(ncclNvlsHostModeDisable, 2147483647),
    ABI_SIZE(ncclSimInfo_t, 24),
    ABI_OFF(ncclSimInfo_t, size, 0),
    ABI_OFF(ncclSimInfo_t, magic, 8),
    ABI_OFF(ncclSimInfo_t, version, 12),
    ABI_OFF(ncclSimInfo_t, estimatedTime, 16),
    ABI_SIZE(ncclUniqueId, 128),
    ABI_VAL(NCCL_UNIQUE_ID_BYTES, 128),
    ABI_VAL(NCCL_VERSION_CODE, 23203),
    ABI_VAL(NCCL_VERSION(2, 28, 9), 22809),
    ABI_VAL(NCCL_VERSION(2, 30, 7), 23007),
    ABI_VAL(NCCL_CONFIG_UNDEF_INT, -2147483647LL - 1),
    ABI_VAL(NCCL_SPLIT_NOCOLOR, -1),
    ABI_SIZE(ncclResult_t, 4),
    ABI_VAL(ncclSuccess, 0),
    ABI_VAL(ncclUnhandledCudaError, 1),
    ABI_VAL(ncclSystemError, 2),
    ABI_VAL(ncclInternalError, 3),
    ABI_VAL(ncclInvalidArgument, 4),
    ABI_VAL(ncclInvalidUsage, 5),
    ABI_VAL(ncclRemoteError, 6),
    ABI_VAL(ncclInProgress, 7),
    ABI_VAL(ncclTimeout, 8),
    ABI_VAL(ncclNumResults, 9),
    ABI_SIZE(ncclDataType_t, 4),
    ABI_VAL(ncclInt8, 0),
    ABI_VAL(ncclChar, 0),
    ABI_VAL(ncclUint8, 1),
    ABI_VAL(ncclInt32, 2),
    ABI_VAL(ncclInt, 2),
    ABI_VAL(ncclUint32, 3),
    ABI_VAL(ncclInt64, 4),
    ABI_VAL(ncclUint64, 5),
    ABI_VAL(ncclFloat16, 6),
    ABI_VAL(ncclHalf, 6),
    ABI_VAL(ncclFloat32, 7),
    ABI_VAL(ncclFloat, 7),
    ABI_VAL(ncclFloat64, 8),
    ABI_VAL(ncclDouble, 8),
    ABI_VAL(ncclBfloat16, 9),
    ABI_VAL(ncclFloat8e4m3, 10),
    ABI_VAL(ncclFloat8e5m2, 11),
    ABI_VAL(ncclNumTypes, 12),
    ABI_SIZE(ncclRedOp_t, 4),
    ABI_VAL(ncclSum, 0),
    ABI_VAL(ncclProd, 1),
    ABI_VAL(ncclMax, 2),
    ABI_VAL(ncclMin, 3),
    ABI_VAL(ncclAvg, 4),
    ABI_VAL(ncclNumOps, 5),
    ABI_VAL(ncclMaxRedOp, 0x7fffffff),
    ABI_VAL(ncclScalarDevice, 0),
    ABI_VAL(ncclScalarHostImmediate, 1),
};

static const abi_fact_table_t other_tables[] = {
    ABI_TABLE("tuner", tuner),
    ABI_TABLE("tuner numbering", tuner_numbering),
    ABI_TABLE("profiler layout", profiler_layout),
    ABI_TABLE("profiler values", profiler_values),
    ABI_TABLE("env", env),
    ABI_TABLE("logger", logging),
    ABI_TABLE("nccl.h", nccl_h),
};

const abi_fact_table_t *abi_other_tables(size_t *n_p)
{
    *n_p = sizeof(other_tables) / sizeof(other_tables[0]);
    return other_tables;
}
