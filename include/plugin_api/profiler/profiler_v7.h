/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Profiler plugin ABI version 7 (NCCL 2.32): symbol "ncclProfiler_v7", type
 * ncclProfiler_v7_t, 6 slots (48 bytes on LP64). Frozen: a released version is never
 * edited; a change is a new version file. The newest version NCCL 2.32 loads.
 *
 * What v7 added over v6:
 *   - userTag, the per-call tag of ncclCollConfig_t.userProfilerTag (0: untagged), at the
 *     end of the collApi, p2pApi, coll, p2p and ceColl descriptors;
 *   - kernelVariant and isSymColl in the coll descriptor, before userTag;
 *   - ncclProfileKernelPhase (1 << 15) events with their kernelPhase descriptor: a phase
 *     of a kernel's work on one channel (parent: KernelCh), stopped by the state
 *     ncclProfilerKernelPhaseStop (31) whose argument is the kernelCh member.
 * The descriptor grows to 136 bytes; slots, states and state arguments are v6's.
 *
 * Event hierarchy and threading: as v6 (profiler_v6.h), with KernelPhase under KernelCh.
 */
#ifndef BRAID_PLUGIN_API_PROFILER_V7_H_
#define BRAID_PLUGIN_API_PROFILER_V7_H_

#include <sys/types.h>

#include "profiler_common.h"

#ifndef __cplusplus
#include <stdbool.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Description of an event being started (136 bytes on LP64). Core-owned, valid during
 * startEvent only. Which union member is valid depends on `type`. */
typedef struct {
    uint64_t type;   /* exactly one ncclProfile* bit */
    void *parentObj; /* the parent's eHandle, or NULL */
    int rank;        /* rank of the communicator emitting the event */
    BRAID_PROFILER_ANON_UNION
    {
        /* ncclProfileGroupApi (as v6). */
        struct {
            bool graphCaptured;
            int groupDepth;
        } groupApi;
        /* ncclProfileCollApi (as v6, and the call's tag). */
        struct {
            const char *func;
            size_t count;
            const char *datatype;
            int root;
            void *stream;
            bool graphCaptured;
            uint64_t userTag; /* ncclCollConfig_t.userProfilerTag; 0: untagged. Since v7. */
        } collApi;
        /* ncclProfileP2pApi (as v6, and the call's tag). */
        struct {
            const char *func;
            size_t count;
            const char *datatype;
            void *stream;
            bool graphCaptured;
            uint64_t userTag; /* since v7 */
        } p2pApi;
        /* ncclProfileKernelLaunch (as v6). */
        struct {
            void *stream;
        } kernelLaunch;
        /* ncclProfileColl (as v6, then kernel metadata and the tag). */
        struct {
            uint64_t seqNumber;
            const char *func;
            const void *sendBuff;
            void *recvBuff;
            size_t count;
            int root;
            const char *datatype;
            uint8_t nChannels;
            uint8_t nWarps;
            const char *algo;
            const char *proto;
            void *parentGroup;
            const char *kernelVariant; /* the kernel that ran it, or NULL. Since v7. */
            bool isSymColl;            /* a symmetric-memory kernel. Since v7. */
            uint64_t userTag;          /* since v7 */
        } coll;
        /* ncclProfileP2p (as v6, and the tag). */
        struct {
            const char *func;
            void *buff;
            const char *datatype;
            size_t count;
            int peer;
            uint8_t nChannels;
            void *parentGroup;
            uint64_t userTag; /* since v7 */
        } p2p;
        /* ncclProfileProxyOp (as v6). */
        struct {
            pid_t pid;
            uint8_t channelId;
            int peer;
            int nSteps;
            int chunkSize;
            int isSend;
        } proxyOp;
        /* ncclProfileProxyStep (as v6). */
        struct {
            int step;
        } proxyStep;
        /* ncclProfileKernelCh (as v6). */
        struct {
            uint8_t channelId;
            uint64_t pTimer;
        } kernelCh;
        /* ncclProfileNetPlugin (as v6). */
        struct {
            int64_t id;
            void *data;
        } netPlugin;
        /* ncclProfileCeColl (as v6, and the tag). */
        struct {
            uint64_t seqNumber;
            const char *func;
            const void *sendBuff;
            void *recvBuff;
            size_t count;
            int root;
            const char *datatype;
            const char *syncStrategy;
            bool intraBatchSync;
            uint32_t batchSize;
            uint32_t numBatches;
            uint32_t ceSeqNum;
            void *stream;
            uint64_t userTag; /* since v7 */
        } ceColl;
        /* ncclProfileCeSync (as v6). */
        struct {
            bool isComplete;
            int nRanks;
        } ceCollSync;
        /* ncclProfileCeBatch (as v6). */
        struct {
            int numOps;
            size_t totalBytes;
            bool useIntraSync;
        } ceCollBatch;
        /* ncclProfileKernelPhase: one phase of a kernel's channel work (parent:
         * KernelCh). Since v7. */
        struct {
            uint8_t channelId;
            uint8_t phaseId;       /* 0 initial sync, 1 compute, 2 final sync */
            const char *phaseName; /* "initial_sync", "compute", "final_sync" */
            uint64_t pTimer;       /* GPU global-timer stamp of the start (ns) */
        } kernelPhase;
    };
} ncclProfilerEventDescr_v7_t;

/* The state enum, under this version's name. */
typedef ncclProfilerEventState_t ncclProfilerEventState_v7_t;

/* Argument of recordEventState (8 bytes), as v6; KernelPhaseStop uses kernelCh. */
typedef union {
    struct {
        size_t transSize;
    } proxyStep;
    struct {
        int appendedProxyOps;
    } proxyCtrl;
    struct {
        void *data;
    } netPlugin;
    struct {
        uint64_t pTimer; /* GPU end stamp (KernelChStop, KernelPhaseStop) */
    } kernelCh;
} ncclProfilerEventStateArgs_v7_t;

/* The profiler's function table (6 slots), v6's with the v7 types; profiler_v6.h
 * documents each slot. */
typedef struct {
    const char *name;
    ncclResult_t (*init)(void **context, uint64_t commId, int *eActivationMask,
                         const char *commName, int nNodes, int nranks, int rank,
                         ncclDebugLogger_t logfn);
    ncclResult_t (*startEvent)(void *context, void **eHandle, ncclProfilerEventDescr_v7_t *eDescr);
    ncclResult_t (*stopEvent)(void *eHandle);
    ncclResult_t (*recordEventState)(void *eHandle, ncclProfilerEventState_v7_t eState,
                                     ncclProfilerEventStateArgs_v7_t *eStateArgs);
    ncclResult_t (*finalize)(void *context);
} ncclProfiler_v7_t;

#ifdef __cplusplus
}
#endif

#endif /* BRAID_PLUGIN_API_PROFILER_V7_H_ */
