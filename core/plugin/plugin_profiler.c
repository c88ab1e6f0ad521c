/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Profiler plugin loading and adapters. The internal interface speaks profiler v6: its
 * descriptor, states and state arguments, and the call's user tag beside the descriptor.
 * v7 descriptors are v6's members and the tag (and kernel metadata Braid leaves empty:
 * no kernel variant, no symmetric kernels); only v7 gets KernelPhase events
 * (br_plugin_profiler_kernel_phases). v5 has the same layout minus the
 * copy-engine events, which are dropped for it. v4 has an 8-bit `type`, no API events (dropped), no
 * parentGroup (NCCL hands a v4 Coll/P2p event the legacy Group handle as its parent),
 * and an init that takes commHash after the mask instead of commId first.
 *
 * The activation mask is one process-wide int, as in NCCL: every profiler init gets its
 * address, plugins write it, the core reads it with relaxed loads.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "plugin_int.h"
#include "util.h"

_Static_assert(sizeof(ncclProfilerEventDescr_v5_t) == sizeof(ncclProfilerEventDescr_v6_t),
               "v5 and v6 descriptors share their layout");
_Static_assert(sizeof(ncclProfilerEventStateArgs_v4_t) == sizeof(ncclProfilerEventStateArgs_v6_t),
               "state arguments are one 8-byte union since v4");

/* Written by plugins through the pointer their init got. */
static int prof_mask;

int br_plugin_profiler_mask(void)
{
    return __atomic_load_n(&prof_mask, __ATOMIC_RELAXED);
}

typedef struct {
    br_plugin_lib_t *lib;
    int version;
    void *ctx;
    union {
        ncclProfiler_v7_t v7;
        ncclProfiler_v6_t v6;
        ncclProfiler_v5_t v5;
        ncclProfiler_v4_t v4;
    } fn;
} prof_state_t;

static const char *const prof_symbols[] = {"ncclProfiler_v7", "ncclProfiler_v6", "ncclProfiler_v5",
                                           "ncclProfiler_v4"};
static const int prof_versions[] = {7, 6, 5, 4};

static const br_plugin_kind_t prof_kind = {
    .tag = "PROFILER/Plugin",
    .env = "NCCL_PROFILER_PLUGIN",
    .prefix = "libnccl-profiler",
    .subsys = NCCL_INIT,
    .symbols = prof_symbols,
    .nsymbols = (int)(sizeof(prof_symbols) / sizeof(prof_symbols[0])),
};

/* Every slot of every version is required (6 slots, the same meaning in each). */
static int prof_complete(const void *table)
{
    void *slots[6];
    memcpy(slots, table, sizeof(slots));
    for (int i = 1; i < 6; i++) {
        if (slots[i] == NULL) {
            return 0;
        }
    }
    return 1;
}

static ncclResult_t prof_init(prof_state_t *st, const void *exported,
                              const br_profiler_request_t *req)
{
    const char *comm_name = req->comm_name != NULL ? req->comm_name : "";

    switch (st->version) {
    case 7: {
        const ncclProfiler_v7_t *exp = exported;
        BR_CHECK(exp->init(&st->ctx, req->comm_hash, &prof_mask, comm_name, req->nnodes,
                           req->nranks, req->rank, br_log_plugin));
        st->fn.v7 = *exp;
        break;
    }
    case 6: {
        const ncclProfiler_v6_t *exp = exported;
        BR_CHECK(exp->init(&st->ctx, req->comm_hash, &prof_mask, comm_name, req->nnodes,
                           req->nranks, req->rank, br_log_plugin));
        st->fn.v6 = *exp;
        break;
    }
    case 5: {
        const ncclProfiler_v5_t *exp = exported;
        BR_CHECK(exp->init(&st->ctx, req->comm_hash, &prof_mask, comm_name, req->nnodes,
                           req->nranks, req->rank, br_log_plugin));
        st->fn.v5 = *exp;
        break;
    }
    default: {
        const ncclProfiler_v4_t *exp = exported;
        BR_CHECK(exp->init(&st->ctx, &prof_mask, comm_name, req->comm_hash, req->nnodes,
                           req->nranks, req->rank, br_log_plugin));
        st->fn.v4 = *exp;
        break;
    }
    }
    return ncclSuccess;
}

ncclResult_t br_plugin_profiler_open(const br_profiler_request_t *req, br_profiler_t **prof_p)
{
    br_plugin_lib_t *net_lib = req->net != NULL ? ((br_net_state_t *)req->net->priv)->lib : NULL;
    br_plugin_lib_t *lib = NULL;
    br_profiler_t *prof = NULL;
    prof_state_t *st = NULL;
    const void *exported;
    const char *name;
    int which = -1;
    ncclResult_t res;
    char before[2048], reason[600]; /* the plugin's own reason, should init fail */

    *prof_p = NULL;
    BR_CHECK(br_plugin_find(&prof_kind, req->plugin, net_lib, &lib, &which));
    if (lib == NULL) {
        return ncclSuccess;
    }
    BR_CHECK_GOTO(br_calloc(&prof, 1, "profiler"), res, err_close);
    BR_CHECK_GOTO(br_calloc(&st, 1, "profiler state"), res, err_free);
    exported = br_plugin_lib_sym(lib, prof_symbols[which]);
    st->lib = lib;
    st->version = prof_versions[which];
    name = *(const char *const *)exported;
    snprintf(prof->name, sizeof(prof->name), "%s", name != NULL ? name : "");
    snprintf(prof->path, sizeof(prof->path), "%.255s", lib->path);
    prof->version = st->version;
    prof->priv = st;
    if (!prof_complete(exported)) {
        BR_WARN(NCCL_INIT, "PROFILER/Plugin: %s: %s has NULL members", lib->path,
                prof_symbols[which]);
        res = ncclInvalidUsage;
        goto err_free;
    }
    snprintf(before, sizeof(before), "%s", br_log_last_error());
    res = prof_init(st, exported, req);
    if (res != ncclSuccess) {
        /* As in NCCL: a profiler that fails init is off for this comm, not fatal. */
        br_plugin_init_reason(before, reason, sizeof(reason));
        BR_WARN(NCCL_INIT,
                "PROFILER/Plugin: %s (%s): init failed: %s%s; profiling is off for "
                "this communicator",
                lib->path, prof_symbols[which], br_plugin_result_str(res), reason);
        res = ncclSuccess;
        goto err_free;
    }
    if (!prof_complete(&st->fn)) {
        BR_WARN(NCCL_INIT, "PROFILER/Plugin: %s: %s lost members in init; profiling is off",
                lib->path, prof_symbols[which]);
        (void)st->fn.v6.finalize(st->ctx); /* finalize is slot 5 in every version */
        res = ncclSuccess;
        goto err_free;
    }
    BR_INFO(NCCL_INIT, "PROFILER/Plugin: loaded %s symbol %s (v%d), profiler %s, mask 0x%x",
            lib->path, prof_symbols[which], prof->version, prof->name, br_plugin_profiler_mask());
    *prof_p = prof;
    return ncclSuccess;

err_free:
    free(st);
    free(prof);
err_close:
    br_plugin_lib_close(lib);
    return res;
}

/* The v4 descriptor of a v6 event, or 0 when v4 has no such event. */
static int prof_descr_v4(const ncclProfilerEventDescr_v6_t *d, ncclProfilerEventDescr_v4_t *o)
{
    memset(o, 0, sizeof(*o));
    if (d->type > ncclProfileNetPlugin) {
        return 0; /* API and copy-engine events came with v5 / v6 */
    }
    o->type = (uint8_t)d->type;
    o->parentObj = d->parentObj;
    o->rank = d->rank;
    switch (d->type) {
    case ncclProfileColl:
        o->coll.seqNumber = d->coll.seqNumber;
        o->coll.func = d->coll.func;
        o->coll.sendBuff = d->coll.sendBuff;
        o->coll.recvBuff = d->coll.recvBuff;
        o->coll.count = d->coll.count;
        o->coll.root = d->coll.root;
        o->coll.datatype = d->coll.datatype;
        o->coll.nChannels = d->coll.nChannels;
        o->coll.nWarps = d->coll.nWarps;
        o->coll.algo = d->coll.algo;
        o->coll.proto = d->coll.proto;
        /* v4's parent of a collective is the legacy Group event. */
        o->parentObj = d->coll.parentGroup;
        break;
    case ncclProfileP2p:
        o->p2p.func = d->p2p.func;
        o->p2p.buff = d->p2p.buff;
        o->p2p.datatype = d->p2p.datatype;
        o->p2p.count = d->p2p.count;
        o->p2p.peer = d->p2p.peer;
        o->p2p.nChannels = d->p2p.nChannels;
        o->parentObj = d->p2p.parentGroup;
        break;
    case ncclProfileProxyOp:
        o->proxyOp.pid = d->proxyOp.pid;
        o->proxyOp.channelId = d->proxyOp.channelId;
        o->proxyOp.peer = d->proxyOp.peer;
        o->proxyOp.nSteps = d->proxyOp.nSteps;
        o->proxyOp.chunkSize = d->proxyOp.chunkSize;
        o->proxyOp.isSend = d->proxyOp.isSend;
        break;
    case ncclProfileProxyStep: o->proxyStep.step = d->proxyStep.step; break;
    case ncclProfileKernelCh:
        o->kernelCh.channelId = d->kernelCh.channelId;
        o->kernelCh.pTimer = d->kernelCh.pTimer;
        break;
    case ncclProfileNetPlugin:
        o->netPlugin.id = d->netPlugin.id;
        o->netPlugin.data = d->netPlugin.data;
        break;
    default: /* Group and ProxyCtrl carry no fields */ break;
    }
    return 1;
}

/* The v7 descriptor of a v6 event and the call's tag. */
static void prof_descr_v7(const ncclProfilerEventDescr_v6_t *d, uint64_t tag,
                          ncclProfilerEventDescr_v7_t *o)
{
    memset(o, 0, sizeof(*o));
    o->type = d->type;
    o->parentObj = d->parentObj;
    o->rank = d->rank;
    /* Every v6 member sits at the start of its v7 namesake; v7 appends to some. */
    switch (d->type) {
    case ncclProfileCollApi:
        memcpy(&o->collApi, &d->collApi, sizeof(d->collApi));
        o->collApi.userTag = tag;
        break;
    case ncclProfileP2pApi:
        memcpy(&o->p2pApi, &d->p2pApi, sizeof(d->p2pApi));
        o->p2pApi.userTag = tag;
        break;
    case ncclProfileColl:
        memcpy(&o->coll, &d->coll, sizeof(d->coll));
        o->coll.userTag = tag;
        break;
    case ncclProfileP2p:
        memcpy(&o->p2p, &d->p2p, sizeof(d->p2p));
        o->p2p.userTag = tag;
        break;
    case ncclProfileCeColl:
        memcpy(&o->ceColl, &d->ceColl, sizeof(d->ceColl));
        o->ceColl.userTag = tag;
        break;
    default:
        /* The other members are v6's, whole: copy the union. */
        memcpy(&o->groupApi, &d->groupApi,
               sizeof(ncclProfilerEventDescr_v6_t) -
                   offsetof(ncclProfilerEventDescr_v6_t, groupApi));
        break;
    }
}

ncclResult_t br_plugin_profiler_start_event(br_profiler_t *prof, ncclProfilerEventDescr_v6_t *descr,
                                            void **handle_p)
{
    return br_plugin_profiler_start_event_tagged(prof, descr, 0, handle_p);
}

ncclResult_t br_plugin_profiler_start_event_tagged(br_profiler_t *prof,
                                                   ncclProfilerEventDescr_v6_t *descr,
                                                   uint64_t user_tag, void **handle_p)
{
    prof_state_t *st = prof->priv;

    *handle_p = NULL;
    switch (st->version) {
    case 7: {
        ncclProfilerEventDescr_v7_t d7;
        prof_descr_v7(descr, user_tag, &d7);
        return st->fn.v7.startEvent(st->ctx, handle_p, &d7);
    }
    case 6: return st->fn.v6.startEvent(st->ctx, handle_p, descr);
    case 5: {
        ncclProfilerEventDescr_v5_t d5;
        if (descr->type >= ncclProfileCeColl) {
            return ncclSuccess; /* copy-engine events came with v6 */
        }
        memcpy(&d5, descr, sizeof(d5)); /* same layout for every v5 member */
        return st->fn.v5.startEvent(st->ctx, handle_p, &d5);
    }
    default: {
        ncclProfilerEventDescr_v4_t d4;
        if (!prof_descr_v4(descr, &d4)) {
            return ncclSuccess;
        }
        return st->fn.v4.startEvent(st->ctx, handle_p, &d4);
    }
    }
}

ncclResult_t br_plugin_profiler_stop_event(br_profiler_t *prof, void *handle)
{
    prof_state_t *st = prof->priv;

    if (handle == NULL) {
        return ncclSuccess;
    }
    /* stopEvent(void *) is slot 3 in every version. */
    return st->fn.v6.stopEvent(handle);
}

ncclResult_t br_plugin_profiler_record_event_state(br_profiler_t *prof, void *handle,
                                                   ncclProfilerEventState_t state,
                                                   ncclProfilerEventStateArgs_v6_t *args)
{
    prof_state_t *st = prof->priv;

    if (handle == NULL) {
        return ncclSuccess;
    }
    switch (st->version) {
    case 7:
        return st->fn.v7.recordEventState(handle, state,
                                          (ncclProfilerEventStateArgs_v7_t *)(void *)args);
    case 6: return st->fn.v6.recordEventState(handle, state, args);
    case 5:
        if (state >= ncclProfilerCeCollStart) {
            return ncclSuccess;
        }
        return st->fn.v5.recordEventState(handle, state,
                                          (ncclProfilerEventStateArgs_v5_t *)(void *)args);
    default:
        if (state >= ncclProfilerGroupStartApiStop) {
            return ncclSuccess; /* states of events v4 does not have */
        }
        return st->fn.v4.recordEventState(handle, state,
                                          (ncclProfilerEventStateArgs_v4_t *)(void *)args);
    }
}

void br_plugin_profiler_kernel_phases(br_profiler_t *prof, void *kch, int rank, int channel,
                                      const uint64_t t[4])
{
    static const char *const names[3] = {"initial_sync", "compute", "final_sync"};
    prof_state_t *st = prof->priv;

    if (st->version < 7 || (br_plugin_profiler_mask() & ncclProfileKernelPhase) == 0) {
        return;
    }
    for (int i = 0; i < 3; i++) {
        ncclProfilerEventDescr_v7_t d;
        ncclProfilerEventStateArgs_v7_t args;
        void *h = NULL;

        memset(&d, 0, sizeof(d));
        d.type = ncclProfileKernelPhase;
        d.parentObj = kch;
        d.rank = rank;
        d.kernelPhase.channelId = (uint8_t)channel;
        d.kernelPhase.phaseId = (uint8_t)i;
        d.kernelPhase.phaseName = names[i];
        d.kernelPhase.pTimer = t[i];
        if (st->fn.v7.startEvent(st->ctx, &h, &d) != ncclSuccess || h == NULL) {
            continue;
        }
        memset(&args, 0, sizeof(args));
        args.kernelCh.pTimer = t[i + 1];
        (void)st->fn.v7.recordEventState(h, ncclProfilerKernelPhaseStop, &args);
        (void)st->fn.v7.stopEvent(h);
    }
}

void br_plugin_profiler_close(br_profiler_t *prof)
{
    prof_state_t *st;
    ncclResult_t res = ncclSuccess;

    if (prof == NULL) {
        return;
    }
    st = prof->priv;
    switch (st->version) {
    case 7: BR_CLEANUP(st->fn.v7.finalize(st->ctx), res); break;
    case 6: BR_CLEANUP(st->fn.v6.finalize(st->ctx), res); break;
    case 5: BR_CLEANUP(st->fn.v5.finalize(st->ctx), res); break;
    default: BR_CLEANUP(st->fn.v4.finalize(st->ctx), res); break;
    }
    br_plugin_lib_close(st->lib);
    free(st);
    free(prof);
}
