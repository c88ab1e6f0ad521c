/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Definitions shared by every profiler plugin ABI version: the event-type bits (used
 * both in the activation mask and in a descriptor's `type`), the one event-state enum
 * all versions share, and the constants of the net-plugin -> profiler callback
 * (ncclProfilerCallback_t in ../common.h). Values are NCCL's; new versions only append.
 */
#ifndef BRAID_PLUGIN_API_PROFILER_COMMON_H_
#define BRAID_PLUGIN_API_PROFILER_COMMON_H_

#include "../common.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The descriptors of v4 and later hold an anonymous union, as NCCL's do, so plugins
 * written for NCCL compile unchanged (eDescr->coll.func). Anonymous unions are C11 and
 * C++; BRAID_PROFILER_ANON_UNION marks them as a GNU extension so strict C99 builds
 * stay warning-free.
 */
#if defined(__GNUC__) || defined(__clang__)
#define BRAID_PROFILER_ANON_UNION __extension__ union
#else
#define BRAID_PROFILER_ANON_UNION union
#endif

/*
 * Event types. Each is one bit: the plugin ORs the bits it wants into the activation
 * mask at init, and a descriptor's `type` holds exactly one of them. Asking for an event
 * makes the core also emit its ancestors (see the hierarchy in profiler_v5.h).
 */
enum {
    ncclProfileGroup = (1 << 0),         /* legacy group; parent of Coll/P2p up to v4 (v1) */
    ncclProfileColl = (1 << 1),          /* a collective task as scheduled (v1) */
    ncclProfileP2p = (1 << 2),           /* a send or receive task (v1) */
    ncclProfileProxyOp = (1 << 3),       /* network work of a task on one channel/peer (v1) */
    ncclProfileProxyStep = (1 << 4),     /* one network transfer of a ProxyOp (v1) */
    ncclProfileProxyCtrl = (1 << 5),     /* proxy thread activity: sleep, append, idle (v1) */
    ncclProfileKernelCh = (1 << 6),      /* a kernel's work on one channel, GPU timed (v3) */
    ncclProfileNetPlugin = (1 << 7),     /* an event a net plugin reports itself (v3) */
    ncclProfileGroupApi = (1 << 8),      /* ncclGroupStart..End, implicit or explicit (v5) */
    ncclProfileCollApi = (1 << 9),       /* one collective API call (v5) */
    ncclProfileP2pApi = (1 << 10),       /* one ncclSend/ncclRecv call (v5) */
    ncclProfileKernelLaunch = (1 << 11), /* the launch of a plan's kernel (v5) */
    ncclProfileCeColl = (1 << 12),       /* a copy-engine collective (v6) */
    ncclProfileCeSync = (1 << 13),       /* a copy-engine synchronization (v6) */
    ncclProfileCeBatch = (1 << 14),      /* a batch of copy-engine copies (v6) */
    ncclProfileKernelPhase = (1 << 15)   /* a phase of a kernel's channel work (v7) */
};

/*
 * Event states passed to recordEventState (4-byte enum, one for all versions; each
 * version header gives it its own typedef name). 0-7 are the v1-v3 ProxyOp states,
 * no longer emitted by v4+ cores.
 */
typedef enum {
    ncclProfilerProxyOpSendPosted = 0,         /* v1-v3 only */
    ncclProfilerProxyOpSendRemFifoWait = 1,    /* v1-v3 only */
    ncclProfilerProxyOpSendTransmitted = 2,    /* v1-v3 only */
    ncclProfilerProxyOpSendDone = 3,           /* v1-v3 only */
    ncclProfilerProxyOpRecvPosted = 4,         /* v1-v3 only */
    ncclProfilerProxyOpRecvReceived = 5,       /* v1-v3 only */
    ncclProfilerProxyOpRecvTransmitted = 6,    /* v1-v3 only */
    ncclProfilerProxyOpRecvDone = 7,           /* v1-v3 only */
    ncclProfilerProxyStepSendGPUWait = 8,      /* send step: waiting for the GPU's data */
    ncclProfilerProxyStepSendWait = 9,         /* send step: isend posted (args: transSize) */
    ncclProfilerProxyStepRecvWait = 10,        /* recv step: irecv posted */
    ncclProfilerProxyStepRecvFlushWait = 11,   /* recv step: arrived, flushing (transSize) */
    ncclProfilerProxyStepRecvGPUWait = 12,     /* recv step: handed to the GPU */
    ncclProfilerProxyCtrlIdle = 13,            /* proxy thread went idle */
    ncclProfilerProxyCtrlActive = 14,          /* proxy thread became active */
    ncclProfilerProxyCtrlSleep = 15,           /* proxy thread about to sleep */
    ncclProfilerProxyCtrlWakeup = 16,          /* proxy thread woke up */
    ncclProfilerProxyCtrlAppend = 17,          /* proxy thread appending new ops */
    ncclProfilerProxyCtrlAppendEnd = 18,       /* appended (args: appendedProxyOps) */
    ncclProfilerProxyOpInProgress_v4 = 19,     /* ProxyOp: progress began (v4+) */
    ncclProfilerProxyStepSendPeerWait_v4 = 20, /* send step: data ready, waiting for peer */
    ncclProfilerNetPluginUpdate = 21,          /* NetPlugin: update (args: data) */
    ncclProfilerKernelChStop = 22,             /* KernelCh: GPU end stamp (args: pTimer) */
    ncclProfilerGroupStartApiStop = 23,        /* GroupApi: ncclGroupStart returned (v5) */
    ncclProfilerGroupEndApiStart = 24,         /* GroupApi: outermost ncclGroupEnd began (v5) */
    ncclProfilerCeCollStart = 25,              /* v6; not emitted by NCCL 2.30.7 */
    ncclProfilerCeCollComplete = 26,           /* v6; not emitted by NCCL 2.30.7 */
    ncclProfilerCeSyncStart = 27,              /* v6; not emitted by NCCL 2.30.7 */
    ncclProfilerCeSyncComplete = 28,           /* v6; not emitted by NCCL 2.30.7 */
    ncclProfilerCeBatchStart = 29,             /* v6; not emitted by NCCL 2.30.7 */
    ncclProfilerCeBatchComplete = 30,          /* v6; not emitted by NCCL 2.30.7 */
    ncclProfilerKernelPhaseStop = 31 /* KernelPhase: GPU end stamp (args: kernelCh) (v7) */
} ncclProfilerEventState_t;

/* `type` argument of the net-plugin -> profiler callback (ncclProfilerCallback_t). */
enum {
    ncclProfilerNetEventStart = 0,        /* start a NetPlugin event; *eHandle is set */
    ncclProfilerNetEventStop = 1,         /* stop the event in *eHandle */
    ncclProfilerNetEventUpdate = 2,       /* recordEventState(NetPluginUpdate, extData) */
    ncclProfilerNetEventUpdateAndStop = 3 /* update, then stop */
};

/* `pluginId` of the callback (and netPlugin.id of the descriptor): the payload version
 * in the low 16 bits, the network type above. */
#define NCCL_PROFILER_NET_VER_BITS (16)
#define NCCL_PROFILER_NET_VER_MASK (~0U >> NCCL_PROFILER_NET_VER_BITS)
#define NCCL_PROFILER_NET_TYPE_MASK (~0U << NCCL_PROFILER_NET_VER_BITS)
#define NCCL_PROFILER_NET_TYPE_IB (1U << NCCL_PROFILER_NET_VER_BITS)
#define NCCL_PROFILER_NET_TYPE_SOCK (2U << NCCL_PROFILER_NET_VER_BITS)

#ifdef __cplusplus
}
#endif

#endif /* BRAID_PLUGIN_API_PROFILER_COMMON_H_ */
