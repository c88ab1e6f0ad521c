/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A synthetic core for the profiler conformance kit (see prof_kit.h). Per rank, an "API
 * thread" runs groups in the order of plugin-abi.md 3.7 (GroupApi, CollApi, P2pApi,
 * KernelLaunch, legacy Group, Coll and P2p, which stop once "enqueued") and hands each
 * task to its "proxy thread" through a small mutex/condvar queue; the proxy thread runs
 * the ProxyOps with their ProxySteps (send and receive state sequences), the NetPlugin
 * events a net plugin would report for each step, KernelCh events and ProxyCtrl.
 * Counters are updated atomically since all these threads run at once.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include "prof_kit.h"

int prof_kit_mask;

int prof_kit_open(const char *path, int version, prof_kit_t *kit, char *err, size_t errlen)
{
    memset(kit, 0, sizeof(*kit));
    kit->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (kit->lib == NULL) {
        snprintf(err, errlen, "dlopen(%s): %s", path, dlerror());
        return -1;
    }
    for (int v = 7; v >= 5; v--) {
        char sym[32];
        if (version != 0 && v != version) {
            continue;
        }
        snprintf(sym, sizeof(sym), "ncclProfiler_v%d", v);
        kit->table = dlsym(kit->lib, sym);
        if (kit->table != NULL) {
            kit->version = v;
            kit->name = *(const char *const *)kit->table;
            return 0;
        }
    }
    snprintf(err, errlen, "%s exports no ncclProfiler_v%s", path, version ? "<version>" : "7/v6/v5");
    dlclose(kit->lib);
    kit->lib = NULL;
    return -1;
}

void prof_kit_close(prof_kit_t *kit)
{
    if (kit->lib != NULL) {
        dlclose(kit->lib);
    }
    memset(kit, 0, sizeof(*kit));
}

/* ---- One rank's view of the plugin ---- */

typedef struct {
    prof_kit_t *kit;
    void *ctx;
    int rank;
    int mask; /* snapshot at the group start, as the core takes it */
    prof_kit_stats_t *stats;
} rank_t;

static void count_call(rank_t *r, ncclResult_t res)
{
    __atomic_add_fetch(&r->stats->calls, 1, __ATOMIC_RELAXED);
    if (res != ncclSuccess) {
        __atomic_add_fetch(&r->stats->failed_calls, 1, __ATOMIC_RELAXED);
    }
}

/* Types an event stands for in the mask: itself and its descendants (3.6). */
static int subtree(uint64_t type)
{
    const int net = ncclProfileNetPlugin, step = ncclProfileProxyStep | net;
    const int kch = ncclProfileKernelCh | ncclProfileKernelPhase;
    const int op = ncclProfileProxyOp | step, task = op | kch;
    const int ce = ncclProfileCeColl | ncclProfileCeSync | ncclProfileCeBatch;

    switch (type) {
    case ncclProfileGroupApi:
        return (int)type | ncclProfileCollApi | ncclProfileP2pApi | ncclProfileKernelLaunch |
               ncclProfileColl | ncclProfileP2p | task | ce;
    case ncclProfileCollApi: return (int)type | ncclProfileColl | task | ce;
    case ncclProfileP2pApi: return (int)type | ncclProfileP2p | task;
    case ncclProfileGroup: return (int)type | ncclProfileColl | ncclProfileP2p | task;
    case ncclProfileColl:
    case ncclProfileP2p: return (int)type | task;
    case ncclProfileProxyOp: return op;
    case ncclProfileProxyStep: return step;
    case ncclProfileKernelCh: return kch;
    default: return (int)type;
    }
}

static int is_sync(uint64_t type)
{
    return type == ncclProfileGroupApi || type == ncclProfileCollApi || type == ncclProfileP2pApi ||
           type == ncclProfileKernelLaunch || type == ncclProfileProxyCtrl;
}

/* A v6 descriptor as NCCL 2.32 hands it to a v7 plugin: the same members (v7 appends a user
 * tag to the API, task and CE descriptors), the kit's tag on every call. */
#define KIT_USER_TAG 0x7a9ull
static void to_v7(const ncclProfilerEventDescr_v6_t *d, ncclProfilerEventDescr_v7_t *o)
{
    memset(o, 0, sizeof(*o));
    o->type = d->type;
    o->parentObj = d->parentObj;
    o->rank = d->rank;
    switch (d->type) {
    case ncclProfileCollApi:
        memcpy(&o->collApi, &d->collApi, sizeof(d->collApi));
        o->collApi.userTag = KIT_USER_TAG;
        break;
    case ncclProfileP2pApi:
        memcpy(&o->p2pApi, &d->p2pApi, sizeof(d->p2pApi));
        o->p2pApi.userTag = KIT_USER_TAG;
        break;
    case ncclProfileColl:
        memcpy(&o->coll, &d->coll, sizeof(d->coll));
        o->coll.userTag = KIT_USER_TAG;
        break;
    case ncclProfileP2p:
        memcpy(&o->p2p, &d->p2p, sizeof(d->p2p));
        o->p2p.userTag = KIT_USER_TAG;
        break;
    case ncclProfileCeColl:
        memcpy(&o->ceColl, &d->ceColl, sizeof(d->ceColl));
        o->ceColl.userTag = KIT_USER_TAG;
        break;
    default: /* the other members are v6's, whole */
        memcpy(&o->groupApi, &d->groupApi,
               sizeof(*d) - offsetof(ncclProfilerEventDescr_v6_t, groupApi));
        break;
    }
}

/* Start an event if the mask asks for it (or for a descendant); NULL otherwise. */
static void *start(rank_t *r, ncclProfilerEventDescr_v6_t *d, void *parent)
{
    void *h = NULL;
    ncclResult_t res;

    if ((r->mask & subtree(d->type)) == 0) {
        return NULL;
    }
    d->parentObj = parent;
    d->rank = r->rank;
    if (r->kit->version == 7) {
        ncclProfilerEventDescr_v7_t d7;
        to_v7(d, &d7);
        res = ((const ncclProfiler_v7_t *)r->kit->table)->startEvent(r->ctx, &h, &d7);
    } else if (r->kit->version == 6) {
        res = ((const ncclProfiler_v6_t *)r->kit->table)->startEvent(r->ctx, &h, d);
    } else {
        ncclProfilerEventDescr_v5_t d5;
        memcpy(&d5, d, sizeof(d5)); /* same layout for every v5 member */
        res = ((const ncclProfiler_v5_t *)r->kit->table)->startEvent(r->ctx, &h, &d5);
    }
    count_call(r, res);
    if (h == NULL) {
        __atomic_add_fetch(&r->stats->dropped, 1, __ATOMIC_RELAXED);
    } else {
        __atomic_add_fetch(is_sync(d->type) ? &r->stats->sync_events : &r->stats->async_events, 1,
                           __ATOMIC_RELAXED);
    }
    return h;
}

static void stop(rank_t *r, void *h)
{
    if (h != NULL) {
        count_call(r, ((const ncclProfiler_v6_t *)r->kit->table)->stopEvent(h));
    }
}

static void state(rank_t *r, void *h, ncclProfilerEventState_t s, uint64_t arg)
{
    ncclProfilerEventStateArgs_v6_t a;

    if (h == NULL) {
        return;
    }
    memset(&a, 0, sizeof(a));
    /* One 8-byte union: transSize, appendedProxyOps, the net payload pointer, pTimer. */
    if (s == ncclProfilerNetPluginUpdate) {
        a.netPlugin.data = (void *)(uintptr_t)arg;
    } else if (s == ncclProfilerProxyCtrlAppendEnd) {
        a.proxyCtrl.appendedProxyOps = (int)arg;
    } else {
        a.kernelCh.pTimer = arg;
    }
    if (r->kit->version >= 6) { /* v7's state args are v6's */
        count_call(r, ((const ncclProfiler_v6_t *)r->kit->table)->recordEventState(h, s, &a));
    } else {
        ncclProfilerEventStateArgs_v5_t a5;
        memcpy(&a5, &a, sizeof(a5));
        count_call(r, ((const ncclProfiler_v5_t *)r->kit->table)->recordEventState(h, s, &a5));
    }
}

/* ---- The proxy thread: ops, steps, net events, kernel channels, control ---- */

#define QUEUE_LEN 64

typedef struct {
    void *coll, *p2p;
    int seq;
    int mask; /* the group's mask snapshot travels with its work, as in the core */
} work_t;

typedef struct {
    rank_t *rank;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    work_t items[QUEUE_LEN];
    int head, tail, done;
} proxy_t;

/* The payload NCCL's Socket plugin reports (type SOCK, version 1). */
typedef struct {
    uint8_t type;
    struct {
        int fd;
        int op;
        size_t length;
    } sock;
} sock_payload_t;

static void run_step(rank_t *r, void *op, int step, int is_send)
{
    ncclProfilerEventDescr_v6_t d = {.type = ncclProfileProxyStep};
    sock_payload_t payload = {1, {7, is_send, 65536}};
    void *h, *net;

    d.proxyStep.step = step;
    h = start(r, &d, op);
    state(r, h, is_send ? ncclProfilerProxyStepSendGPUWait : ncclProfilerProxyStepRecvWait, 0);
    /* What the net plugin reports through the profiler callback for this transfer. */
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileNetPlugin;
    d.netPlugin.id = NCCL_PROFILER_NET_TYPE_SOCK | 1;
    d.netPlugin.data = &payload;
    net = start(r, &d, h);
    state(r, net, ncclProfilerNetPluginUpdate, (uint64_t)(uintptr_t)&payload);
    stop(r, net);
    if (is_send) {
        state(r, h, ncclProfilerProxyStepSendPeerWait_v4, 0);
        state(r, h, ncclProfilerProxyStepSendWait, 65536);
    } else {
        state(r, h, ncclProfilerProxyStepRecvFlushWait, 65536);
        state(r, h, ncclProfilerProxyStepRecvGPUWait, 65536);
    }
    stop(r, h);
}

static void run_op(rank_t *r, void *task, int channel, int peer, int is_send)
{
    ncclProfilerEventDescr_v6_t d = {.type = ncclProfileProxyOp};
    void *h;

    d.proxyOp.pid = getpid();
    d.proxyOp.channelId = (uint8_t)channel;
    d.proxyOp.peer = peer;
    d.proxyOp.nSteps = 4;
    d.proxyOp.chunkSize = 65536;
    d.proxyOp.isSend = is_send;
    h = start(r, &d, task);
    state(r, h, ncclProfilerProxyOpInProgress_v4, 0);
    for (int s = 0; s < 4; s++) {
        run_step(r, h, s, is_send);
    }
    stop(r, h);
}

static void run_kernel_ch(rank_t *r, void *task, int channel)
{
    ncclProfilerEventDescr_v6_t d = {.type = ncclProfileKernelCh};
    void *h;

    d.kernelCh.channelId = (uint8_t)channel;
    d.kernelCh.pTimer = 1000;
    h = start(r, &d, task);
    /* v7: the kernel's three phases under it, as NCCL reports them after the kernel. */
    for (int i = 0; i < 3 && r->kit->version >= 7 && (r->mask & ncclProfileKernelPhase); i++) {
        static const char *const names[3] = {"initial_sync", "compute", "final_sync"};
        ncclProfilerEventDescr_v7_t p = {.type = ncclProfileKernelPhase};
        void *ph = NULL;

        p.parentObj = h;
        p.rank = r->rank;
        p.kernelPhase.channelId = (uint8_t)channel;
        p.kernelPhase.phaseId = (uint8_t)i;
        p.kernelPhase.phaseName = names[i];
        p.kernelPhase.pTimer = 1000 + 300 * (uint64_t)i;
        count_call(r, ((const ncclProfiler_v7_t *)r->kit->table)->startEvent(r->ctx, &ph, &p));
        if (ph == NULL) {
            __atomic_add_fetch(&r->stats->dropped, 1, __ATOMIC_RELAXED);
            continue;
        }
        __atomic_add_fetch(&r->stats->async_events, 1, __ATOMIC_RELAXED);
        state(r, ph, ncclProfilerKernelPhaseStop, 1300 + 300 * (uint64_t)i);
        stop(r, ph);
    }
    state(r, h, ncclProfilerKernelChStop, 2000);
    stop(r, h);
}

static void run_ctrl(rank_t *r)
{
    ncclProfilerEventDescr_v6_t d = {.type = ncclProfileProxyCtrl};
    void *h = start(r, &d, NULL);

    state(r, h, ncclProfilerProxyCtrlAppend, 0);
    state(r, h, ncclProfilerProxyCtrlAppendEnd, 3);
    stop(r, h);
}

static void *proxy_main(void *arg)
{
    proxy_t *p = arg;
    /* The proxy's own view: the API thread rewrites its mask snapshot per group. */
    rank_t self = {p->rank->kit, p->rank->ctx, p->rank->rank, 0, p->rank->stats};
    rank_t *r = &self;
    int peer = (r->rank + 1) % 2;

    for (;;) {
        work_t w;
        pthread_mutex_lock(&p->lock);
        while (p->head == p->tail && !p->done) {
            pthread_cond_wait(&p->cond, &p->lock);
        }
        if (p->head == p->tail) {
            pthread_mutex_unlock(&p->lock);
            return NULL;
        }
        w = p->items[p->head++ % QUEUE_LEN];
        pthread_cond_broadcast(&p->cond);
        pthread_mutex_unlock(&p->lock);
        /* ProxyCtrl uses the live mask (3.7); the rest the group's snapshot. */
        r->mask = __atomic_load_n(&prof_kit_mask, __ATOMIC_RELAXED);
        run_ctrl(r);
        r->mask = w.mask;
        run_op(r, w.coll, w.seq % 2, peer, 1);
        run_op(r, w.coll, w.seq % 2, peer, 0);
        run_kernel_ch(r, w.coll, w.seq % 2);
        run_op(r, w.p2p, 2, peer, 1);
    }
}

static void proxy_push(proxy_t *p, work_t w)
{
    pthread_mutex_lock(&p->lock);
    while (p->tail - p->head == QUEUE_LEN) {
        pthread_cond_wait(&p->cond, &p->lock);
    }
    p->items[p->tail++ % QUEUE_LEN] = w;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
}

/* ---- The API thread: one group with an AllReduce and a Send ---- */

static void run_group(rank_t *r, proxy_t *p, int seq)
{
    ncclProfilerEventDescr_v6_t d = {.type = ncclProfileGroupApi};
    void *gapi, *capi, *papi, *launch, *group, *coll, *p2p;

    r->mask = __atomic_load_n(&prof_kit_mask, __ATOMIC_RELAXED);
    d.groupApi.groupDepth = 1;
    gapi = start(r, &d, NULL);
    state(r, gapi, ncclProfilerGroupStartApiStop, 0);
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileCollApi;
    d.collApi.func = "AllReduce";
    d.collApi.count = 1024;
    d.collApi.datatype = "ncclFloat32";
    capi = start(r, &d, gapi);
    stop(r, capi); /* the API call returns once enqueued */
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileP2pApi;
    d.p2pApi.func = "Send";
    d.p2pApi.count = 256;
    d.p2pApi.datatype = "ncclInt8";
    papi = start(r, &d, gapi);
    stop(r, papi);
    state(r, gapi, ncclProfilerGroupEndApiStart, 0);
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileKernelLaunch;
    launch = start(r, &d, gapi);
    stop(r, launch);
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileGroup;
    group = start(r, &d, NULL);
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileColl;
    d.coll.seqNumber = (uint64_t)seq;
    d.coll.func = "AllReduce";
    d.coll.count = 1024;
    d.coll.datatype = "ncclFloat32";
    d.coll.nChannels = 2;
    d.coll.nWarps = 16;
    d.coll.algo = "RING";
    d.coll.proto = "SIMPLE";
    d.coll.parentGroup = group;
    coll = start(r, &d, capi);
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileP2p;
    d.p2p.func = "Send";
    d.p2p.count = 256;
    d.p2p.datatype = "ncclInt8";
    d.p2p.peer = (r->rank + 1) % 2;
    d.p2p.nChannels = 1;
    d.p2p.parentGroup = group;
    p2p = start(r, &d, papi);
    proxy_push(p, (work_t){coll, p2p, seq, r->mask});
    /* Coll/P2p stop once their proxy work is posted, not when it completes (3.7). */
    stop(r, coll);
    stop(r, p2p);
    stop(r, group);
    stop(r, gapi);
}

typedef struct {
    rank_t rank;
    proxy_t proxy;
    int iters;
    pthread_t api_thread, proxy_thread;
} rank_run_t;

static void *api_main(void *arg)
{
    rank_run_t *rr = arg;

    for (int i = 0; i < rr->iters; i++) {
        run_group(&rr->rank, &rr->proxy, i);
    }
    pthread_mutex_lock(&rr->proxy.lock);
    rr->proxy.done = 1;
    pthread_cond_broadcast(&rr->proxy.cond);
    pthread_mutex_unlock(&rr->proxy.lock);
    return NULL;
}

static void logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                   const char *fmt, ...)
{
    va_list ap;

    (void)flags;
    va_start(ap, fmt);
    fprintf(stderr, "[plugin %s %s:%d] ", level == NCCL_LOG_WARN ? "WARN" : "INFO", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static ncclResult_t kit_init(prof_kit_t *kit, void **ctx, uint64_t hash, int nranks, int rank)
{
    if (kit->version == 7) {
        return ((const ncclProfiler_v7_t *)kit->table)
            ->init(ctx, hash, &prof_kit_mask, "kit", 1, nranks, rank, logger);
    }
    if (kit->version == 6) {
        return ((const ncclProfiler_v6_t *)kit->table)
            ->init(ctx, hash, &prof_kit_mask, "kit", 1, nranks, rank, logger);
    }
    return ((const ncclProfiler_v5_t *)kit->table)
        ->init(ctx, hash, &prof_kit_mask, "kit", 1, nranks, rank, logger);
}

static ncclResult_t kit_finalize(prof_kit_t *kit, void *ctx)
{
    return ((const ncclProfiler_v6_t *)kit->table)->finalize(ctx);
}

#define MAX_KIT_RANKS 8

int prof_kit_run(prof_kit_t *kit, uint64_t comm_hash, int nranks, int iters,
                 prof_kit_stats_t *stats, char *err, size_t errlen)
{
    rank_run_t runs[MAX_KIT_RANKS];
    int n = nranks < MAX_KIT_RANKS ? nranks : MAX_KIT_RANKS;
    ncclResult_t res;

    memset(stats, 0, sizeof(*stats));
    memset(runs, 0, sizeof(runs));
    for (int i = 0; i < n; i++) {
        rank_run_t *rr = &runs[i];
        rr->rank = (rank_t){kit, NULL, i, 0, stats};
        rr->iters = iters;
        res = kit_init(kit, &rr->rank.ctx, comm_hash, n, i);
        if (res != ncclSuccess) {
            snprintf(err, errlen, "init of rank %d returned %d", i, (int)res);
            return -1;
        }
        pthread_mutex_init(&rr->proxy.lock, NULL);
        pthread_cond_init(&rr->proxy.cond, NULL);
        rr->proxy.rank = &rr->rank;
    }
    for (int i = 0; i < n; i++) {
        pthread_create(&runs[i].proxy_thread, NULL, proxy_main, &runs[i].proxy);
        pthread_create(&runs[i].api_thread, NULL, api_main, &runs[i]);
    }
    for (int i = 0; i < n; i++) {
        pthread_join(runs[i].api_thread, NULL);
        pthread_join(runs[i].proxy_thread, NULL);
        res = kit_finalize(kit, runs[i].rank.ctx);
        count_call(&runs[i].rank, res);
        pthread_mutex_destroy(&runs[i].proxy.lock);
        pthread_cond_destroy(&runs[i].proxy.cond);
    }
    if (stats->failed_calls > 0) {
        snprintf(err, errlen, "%ld of %ld calls did not return ncclSuccess", stats->failed_calls,
                 stats->calls);
        return -1;
    }
    return 0;
}

int prof_kit_foreign_parent(prof_kit_t *kit, char *err, size_t errlen)
{
    prof_kit_stats_t stats = {0};
    rank_t r = {kit, NULL, 0, ~0, &stats};
    ncclProfilerEventDescr_v6_t d = {.type = ncclProfileProxyOp};
    void *h;

    if (kit_init(kit, &r.ctx, 0xf0f0, 1, 0) != ncclSuccess) {
        snprintf(err, errlen, "init failed");
        return -1;
    }
    /* A proxy op posted by another process: its parent handle is not ours to read. */
    d.proxyOp.pid = getpid() + 1;
    d.proxyOp.channelId = 3;
    h = start(&r, &d, (void *)(uintptr_t)0x10);
    state(&r, h, ncclProfilerProxyOpInProgress_v4, 0);
    stop(&r, h);
    count_call(&r, kit_finalize(kit, r.ctx));
    if (stats.failed_calls > 0) {
        snprintf(err, errlen, "%ld calls failed", stats.failed_calls);
        return -1;
    }
    return 0;
}
