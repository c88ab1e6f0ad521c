/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Profiler events of the host executor: a GroupApi event per communicator and batch, and
 * a Coll or P2p event per operation that stops when the operation's last work item
 * finishes (or when the batch ends, after a failure too). Coll events name the algorithm
 * and protocol plan chose. Called by the thread that runs the batch.
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

static int prof_wants(const br_exec_comm_t *ec, uint64_t bits)
{
    return ec->prof != NULL && (br_plugin_profiler_mask() & bits) != 0;
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

/* The GroupApi event of this comm in this batch (remaining -1 marks group events). */
static void *prof_group(br_exec_batch_t *b, br_exec_comm_t *ec)
{
    ncclProfilerEventDescr_v6_t d;
    void *h = NULL;
    int idx;

    for (int i = 0; i < b->nevents; i++) {
        if (b->events[i].ec == ec && b->events[i].remaining == -1) {
            return b->events[i].handle;
        }
    }
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileGroupApi;
    d.rank = ec->rank;
    d.groupApi.groupDepth = 1;
    if (br_plugin_profiler_start_event(ec->prof, &d, &h) != ncclSuccess ||
        event_push(b, ec, h, -1, &idx) != ncclSuccess) {
        return NULL;
    }
    (void)br_plugin_profiler_record_event_state(ec->prof, h, ncclProfilerGroupStartApiStop, NULL);
    (void)br_plugin_profiler_record_event_state(ec->prof, h, ncclProfilerGroupEndApiStart, NULL);
    return h;
}

/* Start the Coll or P2p event of op; returns its index, or -1 when not profiled. */
int br_exec_prof_op_start(br_exec_batch_t *b, br_exec_comm_t *ec, const br_op_t *op)
{
    ncclProfilerEventDescr_v6_t d;
    void *h = NULL;
    int idx;
    int p2p = op->func == BR_FUNC_SEND || op->func == BR_FUNC_RECV;

    if (!prof_wants(ec, ncclProfileColl | ncclProfileP2p | ncclProfileGroupApi)) {
        return -1;
    }
    memset(&d, 0, sizeof(d));
    d.parentObj = prof_group(b, ec);
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

/* End of a batch: every event still open stops (after a failure too), groups last. */
void br_exec_prof_batch_end(br_exec_batch_t *b)
{
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < b->nevents; i++) {
            br_exec_event_t *e = &b->events[i];
            if (e->handle != NULL && (e->remaining == -1) == (pass == 1)) {
                (void)br_plugin_profiler_stop_event(e->ec->prof, e->handle);
                e->handle = NULL;
            }
        }
    }
}

