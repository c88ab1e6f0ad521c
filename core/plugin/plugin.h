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

typedef struct br_net br_net_t;

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
    int dev;             /* device this communicator uses */
    ncclNetProperties_v12_t props; /* properties of `dev` */
    void *priv;          /* loader/adapter state: the versioned table, ctx, library ref */
};

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

/* Finalize the per-comm context, drop the library reference, free. */
void br_plugin_net_close(br_net_t *net);

/* The directory Braid's own plugins live in (BRAID_PLUGIN_PATH, else libbraid's). */
const char *br_plugin_dir(void);

#endif /* BR_PLUGIN_H_ */
