/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Profiler plugin ABI version 5 (NCCL 2.28): symbol "ncclProfiler_v5" (no "Plugin" in
 * the name), type ncclProfiler_v5_t, 6 slots (48 bytes on LP64). Frozen: a released
 * version is never edited; a change is a new version file. The newest version NCCL
 * 2.28 loads.
 *
 * What v5 added over v4: the descriptor's `type` is a uint64_t (was uint8_t), the API
 * events GroupApi, CollApi, P2pApi and KernelLaunch, a new hierarchy in which Coll/P2p
 * hang under CollApi/P2pApi and the legacy Group travels in coll/p2p.parentGroup, and
 * init takes commId second (before the mask).
 *
 * Event hierarchy (parentObj is the handle the plugin returned for the parent):
 *
 *   GroupApi -+- CollApi -- Coll -+- ProxyOp -- ProxyStep -- NetPlugin
 *             |                   +- KernelCh
 *             +- P2pApi -- P2p ---+- ProxyOp -- ProxyStep -- NetPlugin
 *             |                   +- KernelCh
 *             +- KernelLaunch
 *   ProxyCtrl (no parent)         Group (legacy; in coll/p2p.parentGroup)
 *
 * Threading: startEvent/stopEvent/recordEventState are called concurrently from the
 * application threads (API events, Group, Coll, P2p, KernelLaunch) and the proxy
 * thread(s) (ProxyOp, ProxyStep, ProxyCtrl, KernelCh, NetPlugin, which arrives through
 * a net plugin's callback on the proxy thread), for one context; the plugin must be
 * thread-safe and should be cheap (these calls sit on the data path). None may block.
 * A stop may come from a different thread than its start. Only init may fail; the
 * other calls should return ncclSuccess.
 */
#ifndef BRAID_PLUGIN_API_PROFILER_V5_H_
#define BRAID_PLUGIN_API_PROFILER_V5_H_

#include <sys/types.h>

#include "profiler_common.h"

#ifndef __cplusplus
#include <stdbool.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Description of an event being started (112 bytes on LP64). Core-owned and valid
 * during startEvent only: copy what you keep (the strings it points to are static in
 * the core and may be kept). Which union member is valid depends on `type`.
 */
typedef struct {
    uint64_t type;   /* exactly one ncclProfile* bit (uint64_t since v5) */
    void *parentObj; /* the parent's eHandle, or NULL (no parent, or parent dropped) */
    int rank;        /* rank of the communicator emitting the event */
    BRAID_PROFILER_ANON_UNION
    {
        /* ncclProfileGroupApi: ncclGroupStart..End (implicit groups have depth 1). */
        struct {
            bool graphCaptured; /* the group is being captured in a CUDA graph */
            int groupDepth;     /* nesting depth; > 1 means a user ncclGroupStart */
        } groupApi;
        /* ncclProfileCollApi: one collective call (parent: GroupApi). */
        struct {
            const char *func;     /* "AllReduce", "Broadcast", ... */
            size_t count;         /* elements */
            const char *datatype; /* "ncclFloat32", ... */
            int root;             /* root rank; meaningful for rooted collectives */
            void *stream;         /* the user's cudaStream_t */
            bool graphCaptured;
        } collApi;
        /* ncclProfileP2pApi: one ncclSend/ncclRecv call (parent: GroupApi). */
        struct {
            const char *func; /* "Send" or "Recv" */
            size_t count;
            const char *datatype;
            void *stream;
            bool graphCaptured;
        } p2pApi;
        /* ncclProfileKernelLaunch: a plan's kernel launch (parent: GroupApi). */
        struct {
            void *stream;
        } kernelLaunch;
        /* ncclProfileColl: a collective task as scheduled (parent: CollApi). Stops when
         * its work was enqueued, not when it completed. */
        struct {
            uint64_t seqNumber; /* per-communicator, per-function counter */
            const char *func;
            const void *sendBuff;
            void *recvBuff;
            size_t count;
            int root;
            const char *datatype;
            uint8_t nChannels; /* channels used */
            uint8_t nWarps;    /* warps per block */
            const char *algo;  /* "RING", "TREE", ... */
            const char *proto; /* "LL", "LL128", "SIMPLE" */
            void *parentGroup; /* the legacy Group event's handle */
        } coll;
        /* ncclProfileP2p: a send or receive task (parent: P2pApi). */
        struct {
            const char *func; /* "Send", "Recv" */
            void *buff;
            const char *datatype;
            size_t count;
            int peer;
            uint8_t nChannels;
            void *parentGroup; /* the legacy Group event's handle */
        } p2p;
        /* ncclProfileProxyOp: the network work of a task on one channel and peer
         * (parent: Coll or P2p, possibly in another process: compare pid first). */
        struct {
            pid_t pid; /* process that posted the op; parentObj is only
                        * dereferenceable when it equals the plugin's pid */
            uint8_t channelId;
            int peer;
            int nSteps;    /* network transfers of the op */
            int chunkSize; /* bytes per transfer */
            int isSend;    /* 1 send, 0 receive */
        } proxyOp;
        /* ncclProfileProxyStep: one network transfer (parent: ProxyOp). */
        struct {
            int step; /* index of the step within the op */
        } proxyStep;
        /* ncclProfileKernelCh: a kernel's work on one channel (parent: Coll or P2p). */
        struct {
            uint8_t channelId;
            uint64_t pTimer; /* GPU global-timer stamp of the start (ns) */
        } kernelCh;
        /* ncclProfileNetPlugin: an event a net plugin reported (parent: ProxyStep). */
        struct {
            int64_t id; /* the plugin's pluginId: NCCL_PROFILER_NET_TYPE_* | version */
            void *data; /* the plugin's payload, valid during the call */
        } netPlugin;
    };
} ncclProfilerEventDescr_v5_t;

/* The state enum, under this version's name. */
typedef ncclProfilerEventState_t ncclProfilerEventState_v5_t;

/* Argument of recordEventState (8 bytes); the member follows the state. Core-owned,
 * valid during the call. */
typedef union {
    struct {
        size_t transSize; /* bytes of the transfer (ProxyStepSendWait, RecvFlushWait) */
    } proxyStep;
    struct {
        int appendedProxyOps; /* ops appended (ProxyCtrlAppendEnd) */
    } proxyCtrl;
    struct {
        void *data; /* the net plugin's payload (NetPluginUpdate) */
    } netPlugin;
    struct {
        uint64_t pTimer; /* GPU global-timer stamp of the end (KernelChStop) */
    } kernelCh;
} ncclProfilerEventStateArgs_v5_t;

/* The profiler's function table (6 slots). Every function returns ncclResult_t. */
typedef struct {
    /* Slot 0. Name of the profiler, for logs. Plugin-owned static storage. Since v1. */
    const char *name;

    /*
     * Slot 1. Create the per-communicator context.
     * In:  commId          - the communicator hash (same value net and tuner see)
     *      eActivationMask - address of the core's single process-wide mask. The plugin
     *                        stores the OR of the ncclProfile* bits it wants; it may
     *                        change it later (the core re-reads it with relaxed atomic
     *                        loads at each API call and proxy event). Valid for the life
     *                        of the library.
     *      commName        - user label (ncclConfig_t.commName) or NULL; valid during
     *                        the call
     *      nNodes, nranks, rank - shape of the communicator and this rank
     *      logfn           - the core's logger, valid until the library is closed
     * Out: *context        - plugin-owned, passed to startEvent and finalize.
     * Called once per communicator during its init. A non-success return disables the
     * profiler for that communicator only. May allocate; must not block.
     * This argument order since v5.
     */
    ncclResult_t (*init)(void **context, uint64_t commId, int *eActivationMask,
                         const char *commName, int nNodes, int nranks, int rank,
                         ncclDebugLogger_t logfn);

    /*
     * Slot 2. An event starts.
     * In:  context - from init; eDescr - the event (see above; core-owned)
     * Out: *eHandle - plugin-owned handle passed to stopEvent, recordEventState and as
     *      children's parentObj; NULL drops the event (the core then skips its stop and
     *      state updates, and its children get a NULL parent).
     * Thread-safe; must not block. Since v1.
     */
    ncclResult_t (*startEvent)(void *context, void **eHandle, ncclProfilerEventDescr_v5_t *eDescr);

    /*
     * Slot 3. The event of eHandle stops. Called once per non-NULL handle; after it the
     * core no longer uses eHandle except as an (undereferenced) parentObj of children
     * already started. Thread-safe; must not block. Since v1.
     */
    ncclResult_t (*stopEvent)(void *eHandle);

    /*
     * Slot 4. The event of eHandle entered state eState; eStateArgs (may be NULL,
     * core-owned) carries the state's argument. Between its start and stop only.
     * Thread-safe; must not block. Since v1.
     */
    ncclResult_t (*recordEventState)(void *eHandle, ncclProfilerEventState_v5_t eState,
                                     ncclProfilerEventStateArgs_v5_t *eStateArgs);

    /*
     * Slot 5. Destroy the context of init (once per successful init, at communicator
     * destroy, after its last event stopped). A plugin may write its output here; this
     * may take time but should not wait on other ranks. Since v1.
     */
    ncclResult_t (*finalize)(void *context);
} ncclProfiler_v5_t;

#ifdef __cplusplus
}
#endif

#endif /* BRAID_PLUGIN_API_PROFILER_V5_H_ */
