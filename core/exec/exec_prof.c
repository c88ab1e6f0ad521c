/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Profiler events in NCCL's hierarchy. The group layer starts a GroupApi event per
 * communicator and outermost group and a CollApi or P2pApi event per call (exec.h); the
 * executor starts a Coll or P2p event per operation, whose parent is the call's API event,
 * and stops it when the operation's last work item finishes (or when the batch ends, after
 * a failure too). Coll events name the algorithm and protocol plan chose.
 */
#include <stdlib.h>
#include <string.h>

#include "exec_int.h"
#include "util.h"

static const char *prof_type_name(ncclDataType_t t)
{
    static const char *const names[ncclNumTypes] = {
        "ncclInt8",    "ncclUint8",    "ncclInt32",      "ncclUint32",
        "ncclInt64",   "ncclUint64",   "ncclFloat16",    "ncclFloat32",
        "ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2"};
    return (unsigned)t < ncclNumTypes ? names[t] : "unknown";
}

/* Algorithm and protocol as NCCL's profiler descriptors spell them ("RING", "SIMPLE"),
 * and Braid's own algorithms in the same style. */
static const char *prof_algo_name(int algo)
{
    static const char *const names[BR_NUM_ALGOS] = {
        "TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS",
        "NVLS_TREE", "PAT", "ONESHOT", "DIRECT_READ", "RING_ONESHOT"};
    return algo >= 0 && algo < BR_NUM_ALGOS ? names[algo] : "UNDEF";
}

static const char *prof_proto_name(int proto)
{
    static const char *const names[BR_NUM_PROTOS] = {"LL", "LL128", "SIMPLE"};
    return proto >= 0 && proto < BR_NUM_PROTOS ? names[proto] : "UNDEF";
}

/* Event bits below each kind of event (itself included): an event is emitted when one of
 * them is in the mask. */
#define PROF_BELOW_COLL                                                                           \
    (ncclProfileColl | ncclProfileProxyOp | ncclProfileProxyStep | ncclProfileKernelCh |         \
     ncclProfileNetPlugin)
#define PROF_BELOW_P2P                                                                            \
    (ncclProfileP2p | ncclProfileProxyOp | ncclProfileProxyStep | ncclProfileKernelCh |          \
     ncclProfileNetPlugin)
#define PROF_BELOW_COLLAPI (ncclProfileCollApi | PROF_BELOW_COLL)
#define PROF_BELOW_P2PAPI (ncclProfileP2pApi | PROF_BELOW_P2P)
#define PROF_BELOW_GROUPAPI                                                                       \
    (ncclProfileGroupApi | ncclProfileKernelLaunch | PROF_BELOW_COLLAPI | PROF_BELOW_P2PAPI)

int br_exec_prof_mask(const br_exec_comm_t *ec)
{
    return ec->prof != NULL ? br_plugin_profiler_mask() : 0;
}

static int is_p2p(const br_op_t *op)
{
    return op->func == BR_FUNC_SEND || op->func == BR_FUNC_RECV;
}

void *br_exec_prof_group_start(br_exec_comm_t *ec, int mask, int depth)
{
    ncclProfilerEventDescr_v6_t d;
    void *h = NULL;

    if (ec->prof == NULL || (mask & PROF_BELOW_GROUPAPI) == 0) {
        return NULL;
    }
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileGroupApi;
    d.rank = ec->rank;
    d.groupApi.groupDepth = depth;
    if (br_plugin_profiler_start_event(ec->prof, &d, &h) != ncclSuccess || h == NULL) {
        return NULL;
    }
    (void)br_plugin_profiler_record_event_state(ec->prof, h, ncclProfilerGroupStartApiStop, NULL);
    return h;
}

void br_exec_prof_group_end_api(br_exec_comm_t *ec, void *group)
{
    if (group != NULL) {
        (void)br_plugin_profiler_record_event_state(ec->prof, group, ncclProfilerGroupEndApiStart,
                                                    NULL);
    }
}

void br_exec_prof_group_stop(br_exec_comm_t *ec, void *group)
{
    if (group != NULL) {
        (void)br_plugin_profiler_stop_event(ec->prof, group);
    }
}

void br_exec_prof_api(br_exec_comm_t *ec, void *group, br_op_t *op)
{
    ncclProfilerEventDescr_v6_t d;
    void *h = NULL;
    int p2p = is_p2p(op);

    op->prof_parent = NULL;
    if (ec->prof == NULL || (op->prof_mask & (p2p ? PROF_BELOW_P2PAPI : PROF_BELOW_COLLAPI)) == 0) {
        return;
    }
    memset(&d, 0, sizeof(d));
    d.parentObj = group;
    d.rank = ec->rank;
    if (p2p) {
        d.type = ncclProfileP2pApi;
        d.p2pApi.func = br_func_name(op->func);
        d.p2pApi.count = op->count;
        d.p2pApi.datatype = prof_type_name(op->type);
    } else {
        d.type = ncclProfileCollApi;
        d.collApi.func = br_func_name(op->func);
        d.collApi.count = op->count;
        d.collApi.datatype = prof_type_name(op->type);
        d.collApi.root = op->root;
    }
    if (br_plugin_profiler_start_event(ec->prof, &d, &h) != ncclSuccess || h == NULL) {
        return;
    }
    /* As NCCL: the API event stops before the call returns; the Coll or P2p event that the
     * executor starts later names it as its parent. */
    (void)br_plugin_profiler_stop_event(ec->prof, h);
    op->prof_parent = h;
}

static ncclResult_t event_push(br_exec_batch_t *b, br_exec_comm_t *ec, void *handle, int remaining,
                               int *idx_p)
{
    if (b->nevents == b->events_cap) {
        int cap = b->events_cap ? 2 * b->events_cap : 16;
        br_exec_event_t *e = realloc(b->events, (size_t)cap * sizeof(*e));
        if (e == NULL) {
            BR_WARN(NCCL_ALLOC, "out of memory tracking profiler events");
            return ncclSystemError;
        }
        b->events = e;
        b->events_cap = cap;
    }
    b->events[b->nevents].ec = ec;
    b->events[b->nevents].handle = handle;
    b->events[b->nevents].remaining = remaining;
    *idx_p = b->nevents++;
    return ncclSuccess;
}

/* Start the Coll or P2p event of op; returns its index, or -1 when not profiled. */
int br_exec_prof_op_start(br_exec_batch_t *b, br_exec_comm_t *ec, const br_op_t *op)
{
    ncclProfilerEventDescr_v6_t d;
    void *h = NULL;
    int idx;
    int p2p = is_p2p(op);

    if (ec->prof == NULL || (op->prof_mask & (p2p ? PROF_BELOW_P2P : PROF_BELOW_COLL)) == 0) {
        return -1;
    }
    memset(&d, 0, sizeof(d));
    d.parentObj = op->prof_parent;
    d.rank = ec->rank;
    if (p2p) {
        d.type = ncclProfileP2p;
        d.p2p.func = br_func_name(op->func);
        d.p2p.buff = op->func == BR_FUNC_SEND ? (void *)(uintptr_t)op->sendbuff : op->recvbuff;
        d.p2p.datatype = prof_type_name(op->type);
        d.p2p.count = op->count;
        d.p2p.peer = op->peer;
        d.p2p.nChannels = 1;
    } else {
        d.type = ncclProfileColl;
        d.coll.seqNumber = ec->prof_seq[op->func]++;
        d.coll.func = br_func_name(op->func);
        d.coll.sendBuff = op->sendbuff;
        d.coll.recvBuff = op->recvbuff;
        d.coll.count = op->count;
        d.coll.root = op->root;
        d.coll.datatype = prof_type_name(op->type);
        d.coll.nChannels = (uint8_t)op->nchannels;
        d.coll.algo = prof_algo_name(op->algo);
        d.coll.proto = prof_proto_name(op->proto);
    }
    if (br_plugin_profiler_start_event(ec->prof, &d, &h) != ncclSuccess || h == NULL ||
        event_push(b, ec, h, 0, &idx) != ncclSuccess) {
        return -1;
    }
    return idx;
}

/* A work item of event idx finished (or none was queued: count 0). */
void br_exec_prof_op_done(br_exec_batch_t *b, int idx, int finished)
{
    br_exec_event_t *e;
    if (idx < 0) {
        return;
    }
    e = &b->events[idx];
    e->remaining -= finished;
    if (e->remaining == 0 && e->handle != NULL) {
        (void)br_plugin_profiler_stop_event(e->ec->prof, e->handle);
        e->handle = NULL;
    }
}

/* End of a batch: every event still open stops (after a failure too). */
void br_exec_prof_batch_end(br_exec_batch_t *b)
{
    for (int i = 0; i < b->nevents; i++) {
        br_exec_event_t *e = &b->events[i];
        if (e->handle != NULL) {
            (void)br_plugin_profiler_stop_event(e->ec->prof, e->handle);
            e->handle = NULL;
        }
    }
}

