/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CollNet loading: the optional in-network-collectives table that lives in the net
 * plugin's library (plugin-abi.md 1.10 and 5.4 step 5). ncclCollNetPlugin_v12 .. _v8 are
 * probed newest first, independently of the net table's version; init, then devices, then
 * device 0's properties. Whatever keeps collnet from working only disables collnet (the
 * net plugin stays): absence or a refusal (init failed, no devices) is an INFO, a table
 * that lies (a NULL required member, a negative device count, impossible properties) a
 * WARN. Each comm holds its own reference on the library.
 *
 * Threading: opens and closes are serialized by collnet_lock (held across plugin init).
 */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "plugin_int.h"
#include "util.h"

typedef struct {
    int version;
    const char *symbol;
    const br_collnet_adapter_t *adapter;
} collnet_probe_t;

static const collnet_probe_t collnet_probes[] = {
    {12, "ncclCollNetPlugin_v12", &br_collnet_adapter_v12},
    {11, "ncclCollNetPlugin_v11", &br_collnet_adapter_v11},
    {10, "ncclCollNetPlugin_v10", &br_collnet_adapter_v10},
    {9, "ncclCollNetPlugin_v9", &br_collnet_adapter_v9},
    {8, "ncclCollNetPlugin_v8", &br_collnet_adapter_v8},
};
#define COLLNET_NPROBES (sizeof(collnet_probes) / sizeof(collnet_probes[0]))

static pthread_mutex_t collnet_lock = PTHREAD_MUTEX_INITIALIZER;

ncclResult_t br_collnet_shared_init(br_collnet_state_t *st,
                                    ncclResult_t (*call)(const void *exported))
{
    ncclResult_t res = ncclSuccess;

    /* Up to v10 collnet init is process-wide: run it while no comm holds it. */
    br_plugin_lib_lock();
    if (st->lib->collnet_init_refs == 0) {
        res = call(st->exported);
    }
    if (res == ncclSuccess) {
        st->lib->collnet_init_refs++;
    }
    br_plugin_lib_unlock();
    return res;
}

void br_collnet_shared_fini(br_collnet_state_t *st)
{
    br_plugin_lib_lock();
    st->lib->collnet_init_refs--;
    br_plugin_lib_unlock();
}

ncclResult_t br_collnet_narrow_count(const br_collnet_t *cn, size_t count, int *out)
{
    if (count > (size_t)INT_MAX) {
        BR_WARN(NCCL_NET,
                "CollNet/Plugin: iallreduce of %zu elements exceeds the int count a "
                "v%d collnet plugin (%s) accepts",
                count, cn->version, cn->name);
        return ncclInternalError;
    }
    *out = (int)count;
    return ncclSuccess;
}

ncclResult_t br_collnet_check_parts(const br_collnet_t *cn, const char *call, int present,
                                    int nparts, const br_collnet_part_t *parts, int narrow_sizes)
{
    if (!present) {
        BR_WARN(NCCL_NET, "CollNet/Plugin: %s called, but the v%d collnet plugin (%s) has none",
                call, cn->version, cn->name);
        return ncclInternalError;
    }
    if (nparts < 1 || nparts > BR_COLLNET_MAX_PARTS) {
        BR_WARN(NCCL_NET, "CollNet/Plugin: %s with %d parts (1 .. %d allowed)", call, nparts,
                BR_COLLNET_MAX_PARTS);
        return ncclInternalError;
    }
    for (int i = 0; i < nparts && narrow_sizes; i++) {
        if (parts[i].size > (size_t)UINT32_MAX) {
            BR_WARN(NCCL_NET,
                    "CollNet/Plugin: %s part %d of %zu bytes exceeds the 32-bit part size a "
                    "v%d collnet plugin (%s) accepts",
                    call, i, parts[i].size, cn->version, cn->name);
            return ncclInternalError;
        }
    }
    return ncclSuccess;
}

/* Device 0, checked: *lied_p tells a table that contradicts itself from one that refuses. */
static ncclResult_t collnet_pick_device(br_collnet_t *cn, const br_collnet_adapter_t *ad, char *why,
                                        size_t why_len, int *lied_p)
{
    ncclResult_t res = ad->devices(cn, &cn->ndev);

    *lied_p = 0;
    if (res != ncclSuccess) {
        snprintf(why, why_len, "devices() failed: %s", br_plugin_result_str(res));
        return ncclSystemError;
    }
    if (cn->ndev <= 0) {
        *lied_p = cn->ndev < 0;
        snprintf(why, why_len, "reports %d devices", cn->ndev);
        return ncclSystemError;
    }
    cn->dev = 0;
    br_net_props_defaults(&cn->props, 0);
    res = cn->ops->get_properties(cn, 0, &cn->props);
    if (res != ncclSuccess) {
        snprintf(why, why_len, "getProperties(0) failed: %s", br_plugin_result_str(res));
        return ncclSystemError;
    }
    *lied_p = 1;
    if (cn->props.netDeviceType != NCCL_NET_DEVICE_HOST) {
        snprintf(why, why_len, "device 0 needs device-side code (netDeviceType %d)",
                 (int)cn->props.netDeviceType);
        return ncclSystemError;
    }
    if (cn->props.maxCollBytes == 0 || cn->props.maxCollBytes > NCCL_MAX_NET_SIZE_BYTES) {
        snprintf(why, why_len, "device 0 reports maxCollBytes %zu, outside (0, 2^40]",
                 cn->props.maxCollBytes);
        return ncclSystemError;
    }
    if ((cn->props.ptrSupport & NCCL_PTR_HOST) == 0) {
        snprintf(why, why_len, "device 0 cannot register host memory (ptrSupport 0x%x)",
                 (unsigned)cn->props.ptrSupport);
        return ncclSystemError;
    }
    *lied_p = 0;
    return ncclSuccess;
}

static void collnet_skip(const br_collnet_t *cn, const char *path, int lied, const char *why)
{
    if (lied) {
        BR_WARN(NCCL_INIT | NCCL_NET,
                "CollNet/Plugin: %s (%s) refused: %s; collnet disabled, "
                "the net plugin stays",
                path, cn->name, why);
    } else {
        BR_INFO(NCCL_INIT | NCCL_NET, "CollNet/Plugin: %s (%s): %s; collnet disabled", path,
                cn->name, why);
    }
}

ncclResult_t br_plugin_collnet_open(const br_net_t *net, uint64_t comm_hash, br_collnet_t **cn_p)
{
    br_net_state_t *nst = br_net_state((br_net_t *)net);
    const collnet_probe_t *probe = NULL;
    const void *sym = NULL;
    br_collnet_state_t *st = NULL;
    br_collnet_t *cn = NULL;
    char why[320];
    int lied = 0;

    *cn_p = NULL;
    for (size_t i = 0; i < COLLNET_NPROBES && probe == NULL; i++) {
        sym = br_plugin_lib_sym(nst->lib, collnet_probes[i].symbol);
        probe = sym != NULL ? &collnet_probes[i] : NULL;
    }
    if (probe == NULL) {
        BR_INFO(NCCL_INIT | NCCL_NET,
                "CollNet/Plugin: %s exports no ncclCollNetPlugin_v12 .. _v8; "
                "collnet disabled",
                nst->lib->path);
        return ncclSuccess;
    }
    if (br_calloc(&cn, 1, "collnet plugin") != ncclSuccess ||
        br_calloc(&st, 1, "collnet plugin state") != ncclSuccess) {
        free(cn);
        return ncclSystemError;
    }
    br_plugin_lib_ref(nst->lib);
    st->lib = nst->lib;
    st->exported = sym;
    cn->priv = st;
    cn->ops = probe->adapter->ops;
    cn->version = probe->version;
    /* The name is slot 0 of every version; the other members are read after init. */
    snprintf(cn->name, sizeof(cn->name), "%s",
             *(const char *const *)sym != NULL ? *(const char *const *)sym : "");
    snprintf(cn->path, sizeof(cn->path), "%.255s", st->lib->path);

    pthread_mutex_lock(&collnet_lock);
    if (probe->adapter->init(cn, st, comm_hash, why, sizeof(why), &lied) != ncclSuccess) {
        pthread_mutex_unlock(&collnet_lock);
        collnet_skip(cn, st->lib->path, lied, why);
        goto err_free;
    }
    if (collnet_pick_device(cn, probe->adapter, why, sizeof(why), &lied) != ncclSuccess) {
        (void)probe->adapter->fini(cn, st);
        pthread_mutex_unlock(&collnet_lock);
        collnet_skip(cn, st->lib->path, lied, why);
        goto err_free;
    }
    pthread_mutex_unlock(&collnet_lock);
    BR_INFO(NCCL_INIT | NCCL_NET,
            "CollNet/Plugin: loaded %s symbol %s (v%d), collnet %s, %d "
            "devices, maxCollBytes %zu%s%s",
            st->lib->path, probe->symbol, probe->version, cn->name, cn->ndev,
            cn->props.maxCollBytes, cn->has_iallgather ? ", iallgather" : "",
            cn->has_ireducescatter ? ", ireducescatter" : "");
    *cn_p = cn;
    return ncclSuccess;

err_free:
    br_plugin_lib_close(st->lib);
    free(st);
    free(cn);
    return ncclSuccess;
}

void br_plugin_collnet_close(br_collnet_t *cn)
{
    br_collnet_state_t *st;
    ncclResult_t res = ncclSuccess;

    if (cn == NULL) {
        return;
    }
    st = br_collnet_state(cn);
    pthread_mutex_lock(&collnet_lock);
    for (size_t i = 0; i < COLLNET_NPROBES; i++) {
        if (collnet_probes[i].version == cn->version) {
            BR_CLEANUP(collnet_probes[i].adapter->fini(cn, st), res);
            break;
        }
    }
    pthread_mutex_unlock(&collnet_lock);
    br_plugin_lib_close(st->lib);
    free(st);
    free(cn);
}
