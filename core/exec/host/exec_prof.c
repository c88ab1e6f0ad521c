/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Profiler events in NCCL's hierarchy. The group layer starts a GroupApi event per
 * communicator and outermost group and a CollApi or P2pApi event per call (exec.h). When
 * a batch is launched the executor emits, per communicator, KernelLaunch (parent
 * GroupApi), the legacy Group event, and a Coll or P2p event per operation (parent the
 * call's API event, parentGroup the Group event), stopped once enqueued as NCCL does;
 * each work item (a channel's share of an operation) is a KernelCh event under its Coll
 * or P2p, from when it starts running to when it finishes, with the host clock where a
 * kernel gives its GPU timer. Coll events name the algorithm and protocol plan chose.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
     ncclProfileKernelPhase | ncclProfileNetPlugin)
#define PROF_BELOW_P2P                                                                            \
    (ncclProfileP2p | ncclProfileProxyOp | ncclProfileProxyStep | ncclProfileKernelCh |          \
     ncclProfileKernelPhase | ncclProfileNetPlugin)
#define PROF_BELOW_COLLAPI (ncclProfileCollApi | PROF_BELOW_COLL)
#define PROF_BELOW_P2PAPI (ncclProfileP2pApi | PROF_BELOW_P2P)
#define PROF_BELOW_GROUPAPI                                                                       \
    (ncclProfileGroupApi | ncclProfileKernelLaunch | ncclProfileGroup | PROF_BELOW_COLLAPI |       \
     PROF_BELOW_P2PAPI)
/* What makes the executor emit anything at launch. */
#define PROF_AT_LAUNCH                                                                            \
    (ncclProfileKernelLaunch | ncclProfileGroup | PROF_BELOW_COLL | PROF_BELOW_P2P)

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
    op->prof_group = group;
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
    if (br_plugin_profiler_start_event_tagged(ec->prof, &d, op->user_tag, &h) != ncclSuccess ||
        h == NULL) {
        return;
    }
    /* As NCCL: the API event stops before the call returns; the Coll or P2p event that the
     * executor starts later names it as its parent. */
    (void)br_plugin_profiler_stop_event(ec->prof, h);
    op->prof_parent = h;
}

static ncclResult_t event_push(br_exec_batch_t *b, br_exec_comm_t *ec, const br_op_t *op,
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
    b->events[b->nevents].op = *op;
    b->events[b->nevents].handle = NULL;
    *idx_p = b->nevents++;
    return ncclSuccess;
}

int br_exec_prof_op_start(br_exec_batch_t *b, br_exec_comm_t *ec, const br_op_t *op)
{
    int idx;
    if (ec->prof == NULL || (op->prof_mask & PROF_AT_LAUNCH) == 0 ||
        event_push(b, ec, op, &idx) != ncclSuccess) {
        return -1;
    }
    return idx;
}

/* Start the Coll or P2p event of e under the legacy Group event `group` (or NULL). */
static void task_start(br_exec_event_t *e, void *group)
{
    ncclProfilerEventDescr_v6_t d;
    const br_op_t *op = &e->op;
    br_exec_comm_t *ec = e->ec;

    e->handle = NULL;
    if ((op->prof_mask & (is_p2p(op) ? PROF_BELOW_P2P : PROF_BELOW_COLL)) == 0) {
        return;
    }
    memset(&d, 0, sizeof(d));
    d.parentObj = op->prof_parent;
    d.rank = ec->rank;
    if (is_p2p(op)) {
        d.type = ncclProfileP2p;
        d.p2p.func = br_func_name(op->func);
        d.p2p.buff = op->func == BR_FUNC_SEND ? (void *)(uintptr_t)op->sendbuff : op->recvbuff;
        d.p2p.datatype = prof_type_name(op->type);
        d.p2p.count = op->count;
        d.p2p.peer = op->peer;
        d.p2p.nChannels = 1;
        d.p2p.parentGroup = group;
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
        d.coll.parentGroup = group;
    }
    if (br_plugin_profiler_start_event_tagged(ec->prof, &d, op->user_tag, &e->handle) !=
        ncclSuccess) {
        e->handle = NULL;
    }
}

/* Per communicator, in NCCL's order: KernelLaunch around the "launch" (under the
 * GroupApi event), then the legacy Group event, the task events started, and stopped
 * again once enqueued (their work items' KernelCh events show when they ran), then the
 * Group event stopped. */
void br_exec_prof_launch(br_exec_batch_t *b)
{
    for (int i = 0; i < b->nevents; i++) {
        br_exec_comm_t *ec = b->events[i].ec;
        int first = 1;
        for (int k = 0; k < i && first; k++) {
            first = b->events[k].ec != ec;
        }
        if (!first) {
            continue;
        }
        const br_op_t *op = &b->events[i].op;
        int mask = op->prof_mask;
        ncclProfilerEventDescr_v6_t d;
        void *h = NULL, *group = NULL;

        if ((mask & ncclProfileKernelLaunch) && op->prof_group != NULL) {
            memset(&d, 0, sizeof(d));
            d.type = ncclProfileKernelLaunch;
            d.parentObj = op->prof_group;
            d.rank = ec->rank;
            if (br_plugin_profiler_start_event(ec->prof, &d, &h) == ncclSuccess && h != NULL) {
                (void)br_plugin_profiler_stop_event(ec->prof, h);
            }
        }
        /* v4 plugins hang Coll and P2p under the Group event, so they need it whenever
         * those are emitted; later versions only when they ask for it. */
        if ((mask & ncclProfileGroup) ||
            (ec->prof->version == 4 && (mask & (PROF_BELOW_COLL | PROF_BELOW_P2P)))) {
            memset(&d, 0, sizeof(d));
            d.type = ncclProfileGroup;
            d.parentObj = NULL; /* the legacy Group event has no parent, as in NCCL */
            d.rank = ec->rank;
            if (br_plugin_profiler_start_event(ec->prof, &d, &group) != ncclSuccess) {
                group = NULL;
            }
        }
        for (int k = i; k < b->nevents; k++) {
            if (b->events[k].ec == ec) {
                task_start(&b->events[k], group);
            }
        }
        for (int k = i; k < b->nevents; k++) {
            if (b->events[k].ec == ec && b->events[k].handle != NULL) {
                (void)br_plugin_profiler_stop_event(ec->prof, b->events[k].handle);
            }
        }
        if (group != NULL) {
            (void)br_plugin_profiler_stop_event(ec->prof, group);
        }
    }
}

/* Steps a Ring/Tree work item moves through its connection to (send) or from `peer`:
 * the steps of one iteration that touch it, times the iterations. */
static uint64_t sched_steps(const br_work_t *w, int peer, int is_send)
{
    uint64_t n = 0;
    br_step_t st;

    for (int s = 0; s < br_sched_nstreams(&w->sched); s++) {
        uint64_t per = 0, iters = 0;
        for (int j = 0; j < br_sched_nsteps(&w->sched, s); j++) {
            br_sched_step(&w->sched, s, j, &st);
            const int32_t *peers = is_send ? st.send : st.recv;
            for (int i = 0; i < (is_send ? st.nsend : st.nrecv); i++) {
                per += peers[i] == peer;
            }
        }
        for (size_t base = w->lay.lo; per > 0 && base < w->lay.hi; iters++) {
            base += br_sched_advance(&w->sched,
                                     br_sched_chunk(&w->sched, base, w->lay.hi, w->lay.slice));
        }
        n += per * iters;
    }
    return n;
}

/* A ProxyOp event for w's use of net connection c (nsteps network transfers); the proxy
 * stops it when the last of them completes. */
static void proxy_op(const br_exec_event_t *e, const br_work_t *w, br_conn_t *c, uint64_t nsteps,
                     size_t chunk_bytes)
{
    ncclProfilerEventDescr_v6_t d;
    void *h = NULL;

    if (nsteps == 0) {
        return;
    }
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileProxyOp;
    d.parentObj = e->handle;
    d.rank = e->ec->rank;
    d.proxyOp.pid = getpid();
    d.proxyOp.channelId = (uint8_t)(w->kind == BR_WORK_SCHED ? w->ch : 0);
    d.proxyOp.peer = c->peer;
    d.proxyOp.nSteps = (int)(nsteps > 0x7fffffff ? 0x7fffffff : nsteps);
    d.proxyOp.chunkSize = (int)(chunk_bytes > 0x7fffffff ? 0x7fffffff : chunk_bytes);
    d.proxyOp.isSend = c->is_send;
    if (br_plugin_profiler_start_event(e->ec->prof, &d, &h) != ncclSuccess || h == NULL) {
        return;
    }
    (void)br_plugin_profiler_record_event_state(e->ec->prof, h, ncclProfilerProxyOpInProgress_v4,
                                                NULL);
    br_proxy_op_begin(e->ec->tc->proxy, c->net, h, c->step, nsteps);
}

/* The ProxyOp events of every net connection w uses. */
static void proxy_ops(const br_exec_event_t *e, const br_work_t *w)
{
    const br_exec_comm_t *ec = e->ec;

    if (ec->tc->proxy == NULL) {
        return;
    }
    if (w->kind == BR_WORK_SEND || w->kind == BR_WORK_RECV) {
        if (w->conn != NULL && w->conn->net != NULL) {
            proxy_op(e, w, w->conn, (w->bytes + w->conn->step_size - 1) / w->conn->step_size,
                     w->conn->step_size);
        }
        return;
    }
    if (w->kind != BR_WORK_SCHED) {
        return;
    }
    for (int p = 0; p < ec->nranks; p++) {
        br_conn_t *cs = p != ec->rank ? br_exec_chan_send(ec, w->ch, p) : NULL;
        br_conn_t *cr = p != ec->rank ? br_exec_chan_recv(ec, w->ch, p) : NULL;
        size_t chunk = w->lay.slice * w->lay.esize;
        if (cs != NULL && cs->net != NULL) {
            proxy_op(e, w, cs, sched_steps(w, p, 1), chunk);
        }
        if (cr != NULL && cr->net != NULL) {
            proxy_op(e, w, cr, sched_steps(w, p, 0), chunk);
        }
    }
}

void br_exec_prof_work_start(br_exec_batch_t *b, br_work_t *w)
{
    const br_exec_event_t *e = &b->events[w->event];
    ncclProfilerEventDescr_v6_t d;

    w->kch_started = 1;
    w->kch = NULL;
    w->phases = 0;
    if (e->handle != NULL &&
        (w->op.prof_mask & (ncclProfileProxyOp | ncclProfileProxyStep | ncclProfileNetPlugin))) {
        proxy_ops(e, w);
    }
    if (e->handle == NULL || (w->op.prof_mask & (ncclProfileKernelCh | ncclProfileKernelPhase)) == 0) {
        return;
    }
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileKernelCh;
    d.parentObj = e->handle;
    d.rank = e->ec->rank;
    d.kernelCh.channelId = (uint8_t)(w->kind == BR_WORK_SCHED ? w->ch : 0);
    /* The host executor's clock where a kernel would give its GPU timer. */
    d.kernelCh.pTimer = br_time_ns();
    /* Phases hang under the KernelCh event; a plugin that asks for phases only gets them
     * without a parent. */
    if ((w->op.prof_mask & ncclProfileKernelCh) == 0 ||
        br_plugin_profiler_start_event(e->ec->prof, &d, &w->kch) != ncclSuccess) {
        w->kch = NULL;
    }
    if (w->op.prof_mask & ncclProfileKernelPhase) {
        w->phases = 1;
        w->ph_start = d.kernelCh.pTimer;
        w->ph_first = w->ph_last = 0;
    }
}

void br_exec_prof_work_done(br_exec_batch_t *b, br_work_t *w)
{
    const br_exec_comm_t *ec = b->events[w->event].ec;
    br_profiler_t *prof = ec->prof;
    ncclProfilerEventStateArgs_v6_t args;

    memset(&args, 0, sizeof(args));
    args.kernelCh.pTimer = br_time_ns();
    if (w->phases) {
        /* Waiting for the peers until the first step that moved data, moving data until
         * the last one, then waiting for the item to complete. An item that never moved
         * data (nothing to do on this channel) is all initial sync. */
        uint64_t t[4] = {w->ph_start, w->ph_first, w->ph_last, args.kernelCh.pTimer};
        if (w->ph_first == 0) {
            t[1] = t[2] = t[3];
        }
        br_plugin_profiler_kernel_phases(prof, w->kch, ec->rank,
                                         w->kind == BR_WORK_SCHED ? w->ch : 0, t);
        w->phases = 0;
    }
    (void)br_plugin_profiler_record_event_state(prof, w->kch, ncclProfilerKernelChStop, &args);
    (void)br_plugin_profiler_stop_event(prof, w->kch);
    w->kch = NULL;
}

/* End of a batch: KernelCh events of work items that never finished (a failure) stop. */
void br_exec_prof_batch_end(br_exec_batch_t *b)
{
    for (int i = 0; i < b->n; i++) {
        br_exec_queue_t *q = &b->queues[i];
        for (int k = q->cur; k < q->n; k++) {
            if (q->items[k].kch != NULL) {
                (void)br_plugin_profiler_stop_event(q->ec->prof, q->items[k].kch);
                q->items[k].kch = NULL;
            }
        }
    }
}
