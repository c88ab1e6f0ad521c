/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A test profiler exporting ncclProfiler_v4 only: it asks for Group, Coll, P2p, ProxyStep
 * and NetPlugin events and records what it receives, so tests see what the v4 adapter
 * passes.
 */
#include <stdio.h>
#include <string.h>

#include "plugin_api/profiler/profiler.h"
#include "testtp.h"

#define EXPORT __attribute__((visibility("default")))

EXPORT testprof_stats_t testprof_stats;
static int tp_ctx;

static ncclResult_t tp_init(void **ctx, int *mask, const char *comm_name, uint64_t comm_hash,
                            int nnodes, int nranks, int rank, ncclDebugLogger_t log)
{
    (void)log;
    testprof_stats.init_calls++;
    testprof_stats.comm_hash = comm_hash;
    snprintf(testprof_stats.comm_name, sizeof(testprof_stats.comm_name), "%s",
             comm_name != NULL ? comm_name : "(null)");
    testprof_stats.nnodes = nnodes;
    testprof_stats.nranks = nranks;
    testprof_stats.rank = rank;
    *mask = ncclProfileGroup | ncclProfileColl | ncclProfileP2p | ncclProfileProxyStep |
            ncclProfileNetPlugin;
    *ctx = &tp_ctx;
    return ncclSuccess;
}

static ncclResult_t tp_start(void *ctx, void **handle, ncclProfilerEventDescr_v4_t *d)
{
    testprof_event_t *e;
    if (ctx != &tp_ctx || testprof_stats.nevents >= TESTPROF_MAX_EVENTS) {
        return ncclInternalError;
    }
    e = &testprof_stats.events[testprof_stats.nevents++];
    e->type = d->type;
    e->parent = d->parentObj;
    if (d->type == ncclProfileColl) {
        e->func = d->coll.func;
    } else if (d->type == ncclProfileP2p) {
        e->func = d->p2p.func;
        e->peer = d->p2p.peer;
    } else if (d->type == ncclProfileProxyStep) {
        e->step = d->proxyStep.step;
    } else if (d->type == ncclProfileNetPlugin) {
        e->net_id = d->netPlugin.id;
        e->net_data = d->netPlugin.data;
    }
    *handle = e;
    return ncclSuccess;
}

static ncclResult_t tp_stop(void *handle)
{
    (void)handle;
    testprof_stats.nstops++;
    return ncclSuccess;
}

static ncclResult_t tp_record(void *handle, ncclProfilerEventState_v4_t state,
                              ncclProfilerEventStateArgs_v4_t *args)
{
    (void)handle;
    testprof_stats.nstates++;
    testprof_stats.last_state = (int)state;
    testprof_stats.last_trans_size = args != NULL ? args->proxyStep.transSize : 0;
    testprof_stats.last_net_data = args != NULL ? args->netPlugin.data : NULL;
    return ncclSuccess;
}

static ncclResult_t tp_fini(void *ctx)
{
    (void)ctx;
    testprof_stats.fini_calls++;
    return ncclSuccess;
}

EXPORT const ncclProfiler_v4_t ncclProfiler_v4 = {
    .name = "TestProfV4",
    .init = tp_init,
    .startEvent = tp_start,
    .stopEvent = tp_stop,
    .recordEventState = tp_record,
    .finalize = tp_fini,
};
