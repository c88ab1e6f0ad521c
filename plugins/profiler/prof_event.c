/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Recording events. startEvent takes the next record of the context's pool with one
 * atomic fetch-add (no lock, no allocation) and copies what the trace needs out of the
 * descriptor; stopEvent stores one timestamp; recordEventState appends to a small
 * per-event array through an atomic slot index. Calls come concurrently from the
 * application threads and the proxy thread(s); a record is written by its starter
 * before the handle is returned, and by stop/record later, and read only at finalize,
 * after the core stopped calling (the ABI's ordering), so no further fences are needed
 * beyond the release/acquire on stop_ns that pairs with finalize's reads.
 */
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "prof.h"

/* Thread lanes: small per-process thread numbers for trace tracks. */
static int lane_next = 1;
static __thread int lane_self;

static int my_lane(void)
{
    if (lane_self == 0) {
        lane_self = __atomic_fetch_add(&lane_next, 1, __ATOMIC_RELAXED);
    }
    return lane_self;
}

uint64_t prof_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void copy_name(char *dst, const char *src)
{
    size_t n = src != NULL ? strnlen(src, PROF_NAME_LEN - 1) : 0;

    if (n > 0) {
        memcpy(dst, src, n);
    }
    dst[n] = '\0';
}

/* parentObj is ours only if it points into this context's pool: never dereference a
 * handle of another context or of another process's proxy (PXN). */
static const prof_event_t *own_parent(const prof_ctx_t *ctx, const void *p)
{
    uintptr_t a = (uintptr_t)p, base = (uintptr_t)ctx->events;

    /* Integer comparisons: p may point anywhere, even into another process. */
    if (a < base || a >= base + ctx->capacity * sizeof(prof_event_t) ||
        (a - base) % sizeof(prof_event_t) != 0) {
        return NULL;
    }
    return p;
}

/* Decode the payload of NCCL's own net plugins (Socket and IB, payload version 1):
 * the operation and the byte count. Returns 0 when the payload is of another kind. */
static int decode_net_payload(int64_t id, const void *data, int *op_p, size_t *len_p)
{
    if (data == NULL || (id & 0xffff) != 1) {
        return 0;
    }
    if ((id & ~0xffffLL) == NCCL_PROFILER_NET_TYPE_SOCK) {
        /* {uint8_t type; union {struct {int fd; int op; size_t length;} sock;}} */
        memcpy(op_p, (const char *)data + 12, sizeof(*op_p));
        memcpy(len_p, (const char *)data + 16, sizeof(*len_p));
        return 1;
    }
    if ((id & ~0xffffLL) == NCCL_PROFILER_NET_TYPE_IB) {
        /* {uint8_t type; union {struct {int device; uint64_t wr_id; int opcode;
         *  int qpNum; size_t length;} qp;}} */
        memcpy(op_p, (const char *)data + 24, sizeof(*op_p));
        memcpy(len_p, (const char *)data + 32, sizeof(*len_p));
        return 1;
    }
    return 0;
}

static void fill_coll(prof_event_t *ev, const ncclProfilerEventDescr_v6_t *d)
{
    ev->seq = d->coll.seqNumber;
    copy_name(ev->func, d->coll.func);
    copy_name(ev->dtype, d->coll.datatype);
    copy_name(ev->algo, d->coll.algo);
    copy_name(ev->proto, d->coll.proto);
    ev->count = d->coll.count;
    ev->peer = d->coll.root;
    ev->nchannels = d->coll.nChannels;
    ev->nwarps = d->coll.nWarps;
}

/* Copy the descriptor fields of the event's type. */
static void fill_fields(prof_event_t *ev, const ncclProfilerEventDescr_v6_t *d)
{
    switch (d->type) {
    case ncclProfileGroupApi:
        ev->step = d->groupApi.groupDepth;
        ev->flag = d->groupApi.graphCaptured;
        break;
    case ncclProfileCollApi:
        copy_name(ev->func, d->collApi.func);
        copy_name(ev->dtype, d->collApi.datatype);
        ev->count = d->collApi.count;
        ev->peer = d->collApi.root;
        ev->flag = d->collApi.graphCaptured;
        break;
    case ncclProfileP2pApi:
        copy_name(ev->func, d->p2pApi.func);
        copy_name(ev->dtype, d->p2pApi.datatype);
        ev->count = d->p2pApi.count;
        ev->flag = d->p2pApi.graphCaptured;
        break;
    case ncclProfileColl: fill_coll(ev, d); break;
    case ncclProfileP2p:
        copy_name(ev->func, d->p2p.func);
        copy_name(ev->dtype, d->p2p.datatype);
        ev->count = d->p2p.count;
        ev->peer = d->p2p.peer;
        ev->nchannels = d->p2p.nChannels;
        break;
    case ncclProfileProxyOp:
        ev->channel = d->proxyOp.channelId;
        ev->peer = d->proxyOp.peer;
        ev->nchannels = d->proxyOp.nSteps;
        ev->nwarps = d->proxyOp.chunkSize;
        ev->step = d->proxyOp.isSend;
        break;
    case ncclProfileProxyStep: ev->step = d->proxyStep.step; break;
    case ncclProfileKernelCh:
        ev->channel = d->kernelCh.channelId;
        ev->ptimer = d->kernelCh.pTimer;
        break;
    case ncclProfileNetPlugin:
        ev->net_id = d->netPlugin.id;
        decode_net_payload(d->netPlugin.id, d->netPlugin.data, &ev->flag, &ev->count);
        break;
    case ncclProfileCeColl:
        ev->seq = d->ceColl.seqNumber;
        copy_name(ev->func, d->ceColl.func);
        copy_name(ev->dtype, d->ceColl.datatype);
        copy_name(ev->algo, d->ceColl.syncStrategy);
        ev->count = d->ceColl.count;
        ev->peer = d->ceColl.root;
        break;
    case ncclProfileCeBatch:
        ev->count = d->ceCollBatch.totalBytes;
        ev->nchannels = d->ceCollBatch.numOps;
        break;
    default: /* Group, KernelLaunch, ProxyCtrl, CeSync: nothing beyond the header */ break;
    }
}

static int type_index(uint64_t type)
{
    int i = 0;

    while (i < 16 && !(type & (1ull << i))) {
        i++;
    }
    return i;
}

/* The next record of the pool, cleared, for an event of `type` started by this thread;
 * NULL (the event dropped) when the pool is full. */
static prof_event_t *new_event(prof_ctx_t *ctx, uint64_t type)
{
    size_t idx = __atomic_fetch_add(&ctx->next, 1, __ATOMIC_RELAXED);
    prof_event_t *ev;

    if (idx >= ctx->capacity) {
        /* Pool exhausted: drop the event (the core then skips its stop and states). */
        __atomic_fetch_add(&ctx->dropped, 1, __ATOMIC_RELAXED);
        return NULL;
    }
    ev = &ctx->events[idx];
    memset(ev, 0, sizeof(*ev));
    ev->ctx = ctx;
    ev->type = type;
    ev->lane = my_lane();
    ev->channel = -1;
    ev->peer = -1;
    return ev;
}

ncclResult_t prof_start_phase(prof_ctx_t *ctx, void **handle_p,
                              const ncclProfilerEventDescr_v7_t *d)
{
    prof_event_t *ev = new_event(ctx, d->type);

    *handle_p = NULL;
    if (ev == NULL) {
        return ncclSuccess;
    }
    ev->parent = own_parent(ctx, d->parentObj);
    ev->channel = d->kernelPhase.channelId;
    ev->step = d->kernelPhase.phaseId;
    copy_name(ev->func, d->kernelPhase.phaseName);
    ev->ptimer = d->kernelPhase.pTimer;
    ev->seq = ev->parent != NULL ? ev->parent->seq : 0;
    ev->start_ns = prof_now_ns();
    *handle_p = ev;
    return ncclSuccess;
}

ncclResult_t prof_start_event(prof_ctx_t *ctx, void **handle_p,
                              const ncclProfilerEventDescr_v6_t *d, uint64_t tag)
{
    prof_event_t *ev = new_event(ctx, d->type);

    *handle_p = NULL;
    if (ev == NULL) {
        return ncclSuccess;
    }
    /* A ProxyOp posted by another process's proxy carries a foreign parent. */
    if (d->type != ncclProfileProxyOp || d->proxyOp.pid == ctx->pid) {
        ev->parent = own_parent(ctx, d->parentObj);
    }
    ev->tag = tag;
    fill_fields(ev, d);
    if (ev->parent != NULL) {
        if (ev->channel < 0) {
            ev->channel = ev->parent->channel; /* steps and net events sit on their op's channel */
        }
        if (d->type != ncclProfileColl && d->type != ncclProfileCeColl) {
            ev->seq = ev->parent->seq;
        }
    } else if (d->type != ncclProfileColl && d->type != ncclProfileCeColl) {
        ev->seq = __atomic_fetch_add(&ctx->counters[type_index(d->type)], 1, __ATOMIC_RELAXED);
    }
    ev->start_ns = prof_now_ns();
    *handle_p = ev;
    return ncclSuccess;
}

ncclResult_t prof_stop_event(void *handle)
{
    prof_event_t *ev = handle;

    if (ev != NULL) {
        /* Release: the record's fields are complete before finalize sees stop_ns. */
        __atomic_store_n(&ev->stop_ns, prof_now_ns(), __ATOMIC_RELEASE);
    }
    return ncclSuccess;
}

ncclResult_t prof_record_state(void *handle, int state, const ncclProfilerEventStateArgs_v6_t *a)
{
    prof_event_t *ev = handle;
    int slot;

    if (ev == NULL) {
        return ncclSuccess;
    }
    /* Distinct slots even if two threads record on one event at once. */
    slot = __atomic_fetch_add(&ev->nstates, 1, __ATOMIC_RELAXED);
    if (slot >= PROF_MAX_STATES) {
        return ncclSuccess;
    }
    ev->states[slot].ts_ns = prof_now_ns();
    ev->states[slot].state = state;
    if (a != NULL) {
        switch (state) {
        case ncclProfilerProxyCtrlAppendEnd:
            ev->states[slot].arg = (uint64_t)a->proxyCtrl.appendedProxyOps;
            break;
        case ncclProfilerNetPluginUpdate: {
            /* The payload is valid during this call only: keep its byte count. */
            int op = 0;
            size_t len = 0;
            decode_net_payload(ev->net_id, a->netPlugin.data, &op, &len);
            ev->states[slot].arg = len;
            break;
        }
        default: /* transSize and pTimer share the 8 bytes */
            ev->states[slot].arg = a->kernelCh.pTimer;
            break;
        }
    }
    return ncclSuccess;
}
