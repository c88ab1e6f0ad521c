/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plugin: finding, loading and adapting plugins (net now; tuner, profiler and env follow
 * the same pattern). Every ABI version a plugin may export is adapted to one internal
 * table with NCCL v12 semantics plus an explicit `net` argument, so adapters keep their
 * state per load (no static singletons) and versioned types never leave core/plugin.
 *
 * Threading: open/close are called by communicator init/destroy (any thread, serialized
 * internally). The data-path members are called by the owning comm's proxy thread.
 */
#ifndef BR_PLUGIN_H_
#define BR_PLUGIN_H_

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "plugin_api/net/net.h"
#include "plugin_api/profiler/profiler.h"

typedef struct br_net br_net_t;

#define BR_NET_MAX_DEVS 32 /* devices of one net plugin a communicator spreads over */

/* The internal net table: ncclNet_v12_t's members with the loaded net first. Optional
 * members (irecv_consumed) may be NULL. Properties always come back in the v12 layout,
 * with the fields an older version lacks filled with NCCL's defaults. */
typedef struct {
    ncclResult_t (*devices)(br_net_t *net, int *ndev);
    ncclResult_t (*get_properties)(br_net_t *net, int dev, ncclNetProperties_v12_t *props);
    ncclResult_t (*listen)(br_net_t *net, int dev, void *handle, void **listen_comm);
    ncclResult_t (*connect)(br_net_t *net, int dev, void *handle, void **send_comm);
    ncclResult_t (*accept)(br_net_t *net, void *listen_comm, void **recv_comm);
    ncclResult_t (*reg_mr)(br_net_t *net, void *comm, void *data, size_t size, int type,
                           void **mhandle);
    ncclResult_t (*dereg_mr)(br_net_t *net, void *comm, void *mhandle);
    ncclResult_t (*isend)(br_net_t *net, void *send_comm, void *data, size_t size, int tag,
                          void *mhandle, void *phandle, void **request);
    ncclResult_t (*irecv)(br_net_t *net, void *recv_comm, int n, void **data, size_t *sizes,
                          int *tags, void **mhandles, void **phandles, void **request);
    ncclResult_t (*test)(br_net_t *net, void *request, int *done, int *sizes);
    ncclResult_t (*close_send)(br_net_t *net, void *send_comm);
    ncclResult_t (*close_recv)(br_net_t *net, void *recv_comm);
    ncclResult_t (*close_listen)(br_net_t *net, void *listen_comm);
    ncclResult_t (*irecv_consumed)(br_net_t *net, void *recv_comm, int n, void *request);
} br_net_ops_t;

/* A net plugin loaded and initialized for one communicator. */
struct br_net {
    const br_net_ops_t *ops;
    char name[64];       /* the plugin's own name (ncclNet_vN_t.name) */
    char path[256];      /* the library it came from */
    int version;         /* ABI version found (12, 11, 10, ...) */
    int ndev;            /* devices reported */
    int dev;             /* the first device in use */
    ncclNetProperties_v12_t props; /* properties of `dev` */
    /* Devices in use: what NCCL_IB_HCA and the checks left, in the plugin's order, with
     * their names; connections are spread over them. */
    int nused;
    int used[BR_NET_MAX_DEVS];
    char used_name[BR_NET_MAX_DEVS][64];
    void *priv;          /* loader/adapter state: the versioned table, ctx, library ref */
};

/* The device a connection of channel (or p2p lane) `lane` uses on a rank that is the
 * local_rank-th of its host, the way NCCL spreads channels over NICs: consecutive lanes
 * and consecutive local ranks take consecutive devices. */
static inline int br_plugin_net_dev_pick(const br_net_t *net, int lane, int local_rank)
{
    return net->used[(unsigned)(lane + local_rank) % (unsigned)net->nused];
}

/* The name of device dev among those in use ("?" when it is not one of them). */
static inline const char *br_plugin_net_dev_name(const br_net_t *net, int dev)
{
    for (int i = 0; i < net->nused; i++) {
        if (net->used[i] == dev) {
            return net->used_name[i];
        }
    }
    return "?";
}

/* What the user asked for. */
typedef struct {
    const char *net_name;   /* NCCL_NET or ncclConfig_t.netName: a plugin name, or NULL */
    const char *plugin;     /* NCCL_NET_PLUGIN: name, file name, path, "none", or NULL */
    uint64_t comm_hash;     /* the communicator hash passed to per-comm init */
    int traffic_class;      /* ncclConfig_t.trafficClass, or -1 */
} br_net_request_t;

/*
 * Load, init and pick a device of a net plugin for one communicator. Search order: the
 * libraries NCCL_NET_PLUGIN names (else libnccl-net.so), then Braid's own socket plugin
 * (libnccl-net-socket.so in BRAID_PLUGIN_PATH or beside libbraid). Symbols are probed
 * newest first. A plugin the user named (net_name or plugin) that cannot be used fails
 * with ncclInvalidUsage and a message saying what was tried and why; without such a
 * request, skipping a candidate is logged as WARN. INFO names library, symbol, version.
 */
ncclResult_t br_plugin_net_open(const br_net_request_t *req, br_net_t **net_p);

/* Braid's own socket plugin alone, for one communicator (transport failover's last
 * resort); req's net_name and plugin are ignored. */
ncclResult_t br_plugin_net_open_internal(const br_net_request_t *req, br_net_t **net_p);

/* Finalize the per-comm context, drop the library reference, free. */
void br_plugin_net_close(br_net_t *net);

/* The directory Braid's own plugins live in (BRAID_PLUGIN_PATH, else libbraid's). */
const char *br_plugin_dir(void);

/* Short name of a result code ("ncclSystemError", ...), for messages. */
const char *br_plugin_result_str(ncclResult_t res);

/* ---- CollNet ---- */

typedef struct br_collnet br_collnet_t;

/* One part of a scattered buffer for iallgather / ireducescatter: ncclNetSGE_v12_t's
 * members (an adapter converts to its version's type, v8's with a 32-bit size). */
typedef struct {
    void *mhandle;
    void *address;
    size_t size;
} br_collnet_part_t;

/* Most parts one iallgather / ireducescatter call may pass (the executor passes one). */
#define BR_COLLNET_MAX_PARTS 16

/* The internal collnet table: ncclCollNet_v12_t's members that the host executor drives,
 * with the loaded collnet first, in v12 semantics whatever the plugin's version (counts
 * are size_t; an older plugin's adapter range-checks and narrows them). */
typedef struct {
    ncclResult_t (*get_properties)(br_collnet_t *cn, int dev, ncclNetProperties_v12_t *props);
    ncclResult_t (*listen)(br_collnet_t *cn, int dev, void *handle, void **listen_comm);
    ncclResult_t (*connect)(br_collnet_t *cn, void *handles[], int nranks, int rank,
                            void *listen_comm, void **coll_comm);
    ncclResult_t (*reduce_support)(br_collnet_t *cn, ncclDataType_t type, ncclRedOp_t op,
                                   int *supported);
    ncclResult_t (*reg_mr)(br_collnet_t *cn, void *coll_comm, void *data, size_t size, int type,
                           void **mhandle);
    ncclResult_t (*dereg_mr)(br_collnet_t *cn, void *coll_comm, void *mhandle);
    ncclResult_t (*iallreduce)(br_collnet_t *cn, void *coll_comm, void *send, void *recv,
                               size_t count, ncclDataType_t type, ncclRedOp_t op, void *send_mh,
                               void *recv_mh, void **request);
    /* The optional members (cn->has_iallgather / has_ireducescatter say whether the plugin
     * has them; calling an absent one fails with ncclInternalError). One call moves the
     * window [window_off, window_off + window_bytes) of the concatenation of every rank's
     * bytes_per_rank-byte block, in NCCL's layout: see docs/plugins.md. */
    ncclResult_t (*iallgather)(br_collnet_t *cn, void *coll_comm, void *send, int nparts,
                               br_collnet_part_t *recv_parts, size_t bytes_per_rank,
                               size_t window_off, size_t window_bytes, void *send_mh,
                               void **request);
    ncclResult_t (*ireducescatter)(br_collnet_t *cn, void *coll_comm, int nparts,
                                   br_collnet_part_t *send_parts, void *recv, size_t bytes_per_rank,
                                   size_t window_off, size_t window_bytes, ncclDataType_t type,
                                   ncclRedOp_t op, void *recv_mh, void **request);
    ncclResult_t (*test)(br_collnet_t *cn, void *request, int *done, int *size);
    ncclResult_t (*close_coll)(br_collnet_t *cn, void *coll_comm);
    ncclResult_t (*close_listen)(br_collnet_t *cn, void *listen_comm);
} br_collnet_ops_t;

/* A collnet table loaded from a net plugin's library and initialized for one comm. */
struct br_collnet {
    const br_collnet_ops_t *ops;
    char name[64];   /* the collnet's own name (ncclCollNet_vN_t.name) */
    char path[256];  /* the library (the net plugin's) */
    int version;     /* ABI version found (12 .. 8) */
    int ndev;        /* devices reported (at least 1) */
    int dev;         /* device this communicator uses (0) */
    int has_iallgather, has_ireducescatter; /* the optional members are present */
    ncclNetProperties_v12_t props; /* properties of `dev`, v12 layout */
    void *priv;      /* loader/adapter state */
};

/*
 * Find and init the collnet table in the library `net` came from (NCCL's rule: collnet
 * lives next to net; ncclCollNetPlugin_v12 .. _v8 probed newest first, independently of
 * the net version). Absent, an init that fails or zero devices: success with *cn_p = NULL
 * and an INFO saying why (NCCL disables collnet and keeps the net plugin). A table that
 * lies (a required member NULL, a negative device count, device 0 not a host device or
 * with maxCollBytes outside (0, 2^40]) is refused: WARN, success, *cn_p = NULL.
 */
ncclResult_t br_plugin_collnet_open(const br_net_t *net, uint64_t comm_hash,
                                    br_collnet_t **cn_p);

/* Finalize (or drop the emulated process-wide init of <= v10), release, free. */
void br_plugin_collnet_close(br_collnet_t *cn);

/* ---- Tuner ---- */

typedef struct br_tuner br_tuner_t;

/* What a communicator's tuner is opened with. */
typedef struct {
    const char *plugin;     /* NCCL_TUNER_PLUGIN (BR_PARAM_STR(TUNER_PLUGIN)): name, file
                             * name, path, "none", or NULL for unset */
    const br_net_t *net;    /* the comm's net plugin, whose library is searched for tuner
                             * symbols when no tuner library is found; may be NULL */
    uint64_t comm_hash;
    size_t nranks, nnodes;
    int nvl_domains;        /* ncclNvlDomainInfo: NCCL passes (nodes, min and max local */
    int min_ranks_per_nvl;  /* ranks) */
    int max_ranks_per_nvl;
    void *constants;        /* tuning constants in ncclTunerConstants_v6_t's layout (1152
                             * bytes, e.g. br_plan_tune_constants()), which a v5/v6 tuner
                             * may edit in its init; NULL: the tuner gets a zeroed copy */
} br_tuner_request_t;

/* A tuner loaded and initialized for one communicator. */
struct br_tuner {
    char name[64];  /* the plugin's name */
    char path[256]; /* the library it came from */
    int version;    /* ABI version found (6 .. 2) */
    void *priv;     /* loader/adapter state */
};

/*
 * Load and init a tuner for one communicator. Search (plugin-abi.md 5.3): the library
 * NCCL_TUNER_PLUGIN names (else libnccl-tuner.so), then, unless a plugin was named, the
 * net plugin's library; ncclTunerPlugin_v6 .. _v2 are probed newest first. No tuner
 * ("none", or nothing found without a name) is success with *tuner_p = NULL. A named
 * tuner that cannot be loaded fails with ncclInvalidUsage (no silent fallback); a tuner
 * whose init fails fails the communicator with the tuner's error.
 */
ncclResult_t br_plugin_tuner_open(const br_tuner_request_t *req, br_tuner_t **tuner_p);

/*
 * Ask the tuner about one collective, in tuner v6 semantics whatever the plugin's
 * version: `table` is the contiguous float[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS]
 * (7 x 3, algorithm-major) cost table in microseconds, -1.0 for unavailable entries; the
 * tuner may lower entries (0.0 forces a choice) or set them to -1.0, and may set
 * *nchannels (preset it to 0: 0 on return means "keep the core's"). Older tuners are
 * adapted as NCCL does (v2's algorithm/protocol choice becomes a 0.0 entry). An error
 * should fail the collective. Called from the thread that plans the collective.
 */
ncclResult_t br_plugin_tuner_get_coll_info(br_tuner_t *tuner, int func, size_t bytes,
                                           int num_pipe_ops, float *table, int reg_buff,
                                           int *nchannels);

/* The same as a br_tune_hook_t (core/plan/plan.h): ctx is the br_tuner_t; one pipelined
 * op, unregistered buffers. */
ncclResult_t br_plugin_tuner_hook(void *ctx, int func, size_t bytes, float *table,
                                  int *nchannels);

/* Tuner v6's getChunkSize: may change *chunk_size (in/out). Success without a change for
 * tuners that have none. */
ncclResult_t br_plugin_tuner_get_chunk_size(br_tuner_t *tuner, int func, size_t bytes, int algo,
                                            int proto, int nchannels, size_t *chunk_size);

/* Finalize the tuner's context, drop the library reference, free. */
void br_plugin_tuner_close(br_tuner_t *tuner);

/* ---- Profiler ---- */

typedef struct br_profiler br_profiler_t;

typedef struct {
    const char *plugin;    /* NCCL_PROFILER_PLUGIN (BR_PARAM_STR(PROFILER_PLUGIN)) or NULL */
    const br_net_t *net;   /* searched for profiler symbols as for the tuner; may be NULL */
    uint64_t comm_hash;
    const char *comm_name; /* ncclConfig_t.commName, or NULL */
    int nnodes, nranks, rank;
} br_profiler_request_t;

struct br_profiler {
    char name[64];
    char path[256];
    int version; /* 6, 5 or 4 */
    void *priv;
};

/*
 * Load and init a profiler for one communicator; search as for the tuner with
 * ncclProfiler_v6, _v5, _v4. No profiler is success with *prof_p = NULL; a named one that
 * cannot be loaded fails with ncclInvalidUsage; an init failure only disables profiling
 * for this communicator (WARN, success, NULL), as in NCCL.
 */
ncclResult_t br_plugin_profiler_open(const br_profiler_request_t *req, br_profiler_t **prof_p);

/* The process-wide activation mask (ncclProfile* bits) that profilers write through the
 * pointer their init got; read with a relaxed load. Snapshot it at each group start. */
int br_plugin_profiler_mask(void);

/*
 * Events in profiler v6 terms. start_event: *handle_p gets the plugin's handle, or NULL
 * when the plugin (or the adapter: an event type its version lacks) drops the event;
 * stop/record accept NULL handles and do nothing. For v4 plugins the descriptor is
 * converted (8-bit type; Coll/P2p's parentObj becomes the legacy Group handle in
 * coll/p2p.parentGroup, as NCCL does); v5 lacks only the copy-engine events. Callable
 * from any thread; a plugin error is returned (callers normally log and go on).
 */
ncclResult_t br_plugin_profiler_start_event(br_profiler_t *prof,
                                            ncclProfilerEventDescr_v6_t *descr,
                                            void **handle_p);
/* The same for an event of one call: user_tag is the call's ncclCollConfig_t tag (0:
 * none), handed to v7 plugins in the event's descriptor. */
ncclResult_t br_plugin_profiler_start_event_tagged(br_profiler_t *prof,
                                                   ncclProfilerEventDescr_v6_t *descr,
                                                   uint64_t user_tag, void **handle_p);
ncclResult_t br_plugin_profiler_stop_event(br_profiler_t *prof, void *handle);
/* A kernel's (for the host executor: a work item's) three phases on one channel, for v7
 * plugins that ask for ncclProfileKernelPhase (others get nothing): initial_sync from
 * t[0] to t[1], compute to t[2], final_sync to t[3], clock stamps in ns of the same clock
 * as the parent KernelCh event's pTimer. Each is started, given its KernelPhaseStop
 * state with its end stamp, and stopped at once. */
void br_plugin_profiler_kernel_phases(br_profiler_t *prof, void *kch, int rank, int channel,
                                      const uint64_t t[4]);
ncclResult_t br_plugin_profiler_record_event_state(br_profiler_t *prof, void *handle,
                                                   ncclProfilerEventState_t state,
                                                   ncclProfilerEventStateArgs_v6_t *args);

/* Finalize the profiler's context, drop the library reference, free. */
void br_plugin_profiler_close(br_profiler_t *prof);

/*
 * What the core passes as a net plugin's phandle (isend's phandle, irecv's phandles[i]) so
 * that the plugin's own events, reported through the profiler callback its init got (net
 * v10+), become NetPlugin events whose parent is the proxy step. It must stay valid until
 * the request completes. A NULL phandle, profiler or step drops the plugin's events, as
 * does a mask without ncclProfileNetPlugin.
 */
typedef struct {
    br_profiler_t *prof; /* the communicator's profiler, or NULL */
    void *step;          /* the ProxyStep event's handle, or NULL */
    int rank;            /* the communicator's rank, for the descriptor */
} br_net_phandle_t;

/* ---- Env ---- */

/*
 * Load the process-wide env plugin named by `plugin` (NCCL_ENV_PLUGIN: name, file, path;
 * NULL: libnccl-env.so if there is one; "none": no plugin) and call its init
 * (ncclEnvPlugin_v2, then _v1). Once per process: later calls return the first result.
 * A named plugin that cannot be loaded, or any plugin whose init fails, is
 * ncclInvalidUsage (NCCL 2.30 propagates an env init failure too).
 */
ncclResult_t br_plugin_env_open(const char *plugin);
/* The plugin's value for `name` (NULL: not set); NULL too when no env plugin is loaded,
 * so callers fall back to their own lookup. Valid until the next call for the same name. */
const char *br_plugin_env_get(const char *name);
/* Whether an env plugin is loaded. */
int br_plugin_env_loaded(void);
/* Finalize and unload it (at exit). */
void br_plugin_env_close(void);

#endif /* BR_PLUGIN_H_ */
