/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The trace profiler, "Braid trace": ncclProfiler_v7, _v6 and _v5 over one
 * implementation. init creates a per-communicator context with a preallocated event
 * pool and tells the core which events to emit through the shared activation mask;
 * start/stop/record (prof_event.c) fill the pool from any thread without locks; finalize
 * writes <BRAID_PROFILER_DIR>/braid-trace-<commHash>-r<rank>.json (prof_trace.c) and
 * frees the context. No trace is lost in silence: init creates a missing directory, or
 * fails with the reason; a process that exits with contexts never finalized (no
 * ncclCommDestroy) writes them from the library's destructor. v5 descriptors are copied
 * into the v6 layout (same members, same offsets) so one code path serves both; v7's,
 * whose members moved (user tags, kernel metadata), are translated member by member with
 * the call's user tag kept beside them, and v7's KernelPhase events are recorded on
 * their own (phase id, name, timer stamps).
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "param_lite.h"
#include "plugin_log.h"
#include "prof.h"

#include "check.h"

#define BR_LITE_PARAM BR_LITE_PARAM_DEFINE
#include "prof_params.def"
#undef BR_LITE_PARAM

/* What we ask for by default: every event type except ProxyCtrl (one event per proxy
 * thread wake-up adds volume, not insight) and, for v5, the v6-only CE types. */
#define PROF_DEFAULT_MASK_V5 (NCCL_PROFILER_EVENT_MASK_V5 & ~ncclProfileProxyCtrl)
#define PROF_DEFAULT_MASK_V6 (NCCL_PROFILER_EVENT_MASK_V6 & ~ncclProfileProxyCtrl)
#define PROF_DEFAULT_MASK_V7 (NCCL_PROFILER_EVENT_MASK_V7 & ~ncclProfileProxyCtrl)
#define PROF_MAX_EVENTS (1 << 26)

/* Contexts initialized and not yet finalized, for the exit-time flush. */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static prof_ctx_t *live_list;

static uint64_t realtime_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The event types to ask for: BRAID_PROFILER_MASK, or the default of the ABI version. */
static int wanted_mask(int version)
{
    int64_t m = prof_param_mask();
    int all = version >= 7   ? NCCL_PROFILER_EVENT_MASK_V7
              : version >= 6 ? NCCL_PROFILER_EVENT_MASK_V6
                             : NCCL_PROFILER_EVENT_MASK_V5;

    if (m == -1) {
        return version >= 7   ? PROF_DEFAULT_MASK_V7
               : version >= 6 ? PROF_DEFAULT_MASK_V6
                              : PROF_DEFAULT_MASK_V5;
    }
    return (int)(m & all);
}

static ncclResult_t alloc_ctx(int version, uint64_t comm_hash, const char *comm_name,
                              prof_ctx_t **ctx_p)
{
    int64_t cap = prof_param_events();
    const char *dir = br_lite_param_str("BRAID_PROFILER_DIR");
    prof_ctx_t *ctx;

    if (cap < 1 || cap > PROF_MAX_EVENTS) {
        BR_WARN(NCCL_INIT, "profiler: BRAID_PROFILER_EVENTS %lld is outside 1..%d", (long long)cap,
                PROF_MAX_EVENTS);
        return ncclInvalidUsage;
    }
    ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL) {
        BR_WARN(NCCL_INIT, "profiler: out of memory");
        return ncclSystemError;
    }
    /* calloc: pages of the pool are only touched as events arrive. */
    ctx->events = calloc((size_t)cap, sizeof(prof_event_t));
    if (ctx->events == NULL) {
        BR_WARN(NCCL_INIT, "profiler: cannot allocate %lld events", (long long)cap);
        free(ctx);
        return ncclSystemError;
    }
    ctx->capacity = (size_t)cap;
    ctx->version = version;
    ctx->comm_hash = comm_hash;
    ctx->pid = getpid();
    snprintf(ctx->comm_name, sizeof(ctx->comm_name), "%s", comm_name != NULL ? comm_name : "");
    snprintf(ctx->dir, sizeof(ctx->dir), "%s", dir != NULL ? dir : ".");
    ctx->clock_base_mono_ns = prof_now_ns();
    ctx->clock_base_real_ns = realtime_ns();
    *ctx_p = ctx;
    return ncclSuccess;
}

/* Makes sure the trace can be written in dir: creates it and its missing parents (as
 * mkdir -p), then checks that it is a directory this process may write into. Failing
 * here, at init, names the directory now rather than losing the trace at finalize. */
static ncclResult_t ensure_dir(const char *dir)
{
    char path[sizeof(((prof_ctx_t *)0)->dir)];
    struct stat st;
    size_t len = strlen(dir);

    if (len == 0 || len >= sizeof(path)) {
        BR_WARN(NCCL_INIT, "profiler: BRAID_PROFILER_DIR '%s' is empty or too long", dir);
        return ncclInvalidUsage;
    }
    memcpy(path, dir, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (path[i] != '/' && path[i] != '\0') {
            continue;
        }
        char saved = path[i];
        path[i] = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST) {
            BR_WARN(NCCL_INIT, "profiler: cannot create the trace directory %s: %s", path,
                    strerror(errno));
            return ncclSystemError;
        }
        path[i] = saved;
    }
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        BR_WARN(NCCL_INIT, "profiler: the trace directory %s is not a directory", dir);
        return ncclSystemError;
    }
    if (access(dir, W_OK | X_OK) != 0) {
        BR_WARN(NCCL_INIT, "profiler: cannot write into the trace directory %s: %s", dir,
                strerror(errno));
        return ncclSystemError;
    }
    return ncclSuccess;
}

/* At exit (or when the library is unloaded), writes the trace of every context of this
 * process that was never finalized: a program that returns from main without
 * ncclCommDestroy still leaves its trace. Events still open are written as such (see
 * prof_trace.c); threads still recording are not waited for. Contexts inherited through
 * fork() belong to the parent, which writes them itself. */
__attribute__((destructor)) static void flush_live_at_exit(void)
{
    pid_t pid = getpid();

    pthread_mutex_lock(&live_lock);
    for (prof_ctx_t *ctx = live_list; ctx != NULL; ctx = ctx->next_live) {
        if (ctx->pid != pid) {
            continue;
        }
        BR_WARN(NCCL_INIT,
                "profiler: comm 0x%llx rank %d was not destroyed before the process exited; "
                "writing its trace now",
                (unsigned long long)ctx->comm_hash, ctx->rank);
        (void)prof_trace_write(ctx, NULL, 0); /* a failure was logged */
    }
    live_list = NULL; /* written once; the memory goes with the process */
    pthread_mutex_unlock(&live_lock);
}

static void live_add(prof_ctx_t *ctx)
{
    pthread_mutex_lock(&live_lock);
    ctx->next_live = live_list;
    live_list = ctx;
    pthread_mutex_unlock(&live_lock);
}

/* Returns 0 when ctx was no longer listed: the exit-time flush wrote it already. */
static int live_remove(prof_ctx_t *ctx)
{
    int found = 0;

    pthread_mutex_lock(&live_lock);
    for (prof_ctx_t **p = &live_list; *p != NULL; p = &(*p)->next_live) {
        if (*p == ctx) {
            *p = ctx->next_live;
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&live_lock);
    return found;
}

static ncclResult_t prof_init(int version, void **context, uint64_t comm_hash, int *mask,
                              const char *comm_name, int nnodes, int nranks, int rank,
                              ncclDebugLogger_t logger)
{
    prof_ctx_t *ctx = NULL;
    ncclResult_t res;
    int want;

    /* Every init of one core passes the same logger; skip the needless racing write. */
    if (logger != NULL && br_plugin_logger != logger) {
        br_plugin_logger = logger;
    }
    if (context == NULL || mask == NULL) {
        BR_WARN(NCCL_INIT, "profiler: init called without a context or mask pointer");
        return ncclInternalError;
    }
    BR_CHECK(alloc_ctx(version, comm_hash, comm_name, &ctx));
    res = ensure_dir(ctx->dir);
    if (res != ncclSuccess) {
        free(ctx->events);
        free(ctx);
        return res;
    }
    ctx->rank = rank;
    ctx->nranks = nranks;
    ctx->nnodes = nnodes;
    want = wanted_mask(version);
    /* The mask is one process-wide int the core reads with relaxed loads. */
    __atomic_store_n(mask, want, __ATOMIC_RELAXED);
    BR_INFO(NCCL_INIT,
            "profiler Braid trace (v%d): comm 0x%llx rank %d/%d, mask 0x%x, "
            "up to %zu events, trace in %s",
            version, (unsigned long long)comm_hash, rank, nranks, want, ctx->capacity, ctx->dir);
    live_add(ctx);
    *context = ctx;
    return ncclSuccess;
}

static ncclResult_t prof_init_v7(void **context, uint64_t comm_id, int *mask, const char *comm_name,
                                 int nnodes, int nranks, int rank, ncclDebugLogger_t logger)
{
    return prof_init(7, context, comm_id, mask, comm_name, nnodes, nranks, rank, logger);
}

static ncclResult_t prof_init_v6(void **context, uint64_t comm_id, int *mask, const char *comm_name,
                                 int nnodes, int nranks, int rank, ncclDebugLogger_t logger)
{
    return prof_init(6, context, comm_id, mask, comm_name, nnodes, nranks, rank, logger);
}

static ncclResult_t prof_init_v5(void **context, uint64_t comm_id, int *mask, const char *comm_name,
                                 int nnodes, int nranks, int rank, ncclDebugLogger_t logger)
{
    return prof_init(5, context, comm_id, mask, comm_name, nnodes, nranks, rank, logger);
}

/* A v6 descriptor (or v5's and v7's, translated) and the call's user tag. */
static ncclResult_t start_tagged(void *context, void **handle, ncclProfilerEventDescr_v6_t *d,
                                 uint64_t tag)
{
    if (handle == NULL) {
        return ncclSuccess;
    }
    if (context == NULL || d == NULL) {
        *handle = NULL;
        return ncclSuccess;
    }
    return prof_start_event(context, handle, d, tag);
}

static ncclResult_t prof_start_v6(void *context, void **handle, ncclProfilerEventDescr_v6_t *d)
{
    return start_tagged(context, handle, d, 0);
}

/* A v7 descriptor in v6's layout: the members v6 has, by name; the user tag is returned. */
static uint64_t descr_v7_to_v6(const ncclProfilerEventDescr_v7_t *d, ncclProfilerEventDescr_v6_t *o)
{
    uint64_t tag = 0;

    memset(o, 0, sizeof(*o));
    o->type = d->type;
    o->parentObj = d->parentObj;
    o->rank = d->rank;
    switch (d->type) {
    case ncclProfileGroupApi:
        o->groupApi.graphCaptured = d->groupApi.graphCaptured;
        o->groupApi.groupDepth = d->groupApi.groupDepth;
        break;
    case ncclProfileCollApi:
        o->collApi.func = d->collApi.func;
        o->collApi.count = d->collApi.count;
        o->collApi.datatype = d->collApi.datatype;
        o->collApi.root = d->collApi.root;
        o->collApi.stream = d->collApi.stream;
        o->collApi.graphCaptured = d->collApi.graphCaptured;
        tag = d->collApi.userTag;
        break;
    case ncclProfileP2pApi:
        o->p2pApi.func = d->p2pApi.func;
        o->p2pApi.count = d->p2pApi.count;
        o->p2pApi.datatype = d->p2pApi.datatype;
        o->p2pApi.stream = d->p2pApi.stream;
        o->p2pApi.graphCaptured = d->p2pApi.graphCaptured;
        tag = d->p2pApi.userTag;
        break;
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
        o->coll.parentGroup = d->coll.parentGroup;
        tag = d->coll.userTag;
        break;
    case ncclProfileP2p:
        o->p2p.func = d->p2p.func;
        o->p2p.buff = d->p2p.buff;
        o->p2p.datatype = d->p2p.datatype;
        o->p2p.count = d->p2p.count;
        o->p2p.peer = d->p2p.peer;
        o->p2p.nChannels = d->p2p.nChannels;
        o->p2p.parentGroup = d->p2p.parentGroup;
        tag = d->p2p.userTag;
        break;
    default:
        /* The other members did not move (kernelLaunch to ceCollBatch: as v6). */
        _Static_assert(offsetof(ncclProfilerEventDescr_v7_t, proxyOp) ==
                           offsetof(ncclProfilerEventDescr_v6_t, proxyOp),
                       "v6 and v7 unions start alike");
        memcpy(&o->proxyOp, &d->proxyOp,
               sizeof(*o) - offsetof(ncclProfilerEventDescr_v6_t, proxyOp));
        if (d->type == ncclProfileCeColl) {
            tag = d->ceColl.userTag;
        }
        break;
    }
    return tag;
}

static ncclResult_t prof_start_v7(void *context, void **handle, ncclProfilerEventDescr_v7_t *d)
{
    ncclProfilerEventDescr_v6_t d6;

    if (d != NULL && d->type == ncclProfileKernelPhase && context != NULL && handle != NULL) {
        return prof_start_phase(context, handle, d);
    }
    if (d == NULL) {
        return start_tagged(context, handle, NULL, 0);
    }
    uint64_t tag = descr_v7_to_v6(d, &d6);
    return start_tagged(context, handle, &d6, tag);
}

static ncclResult_t prof_start_v5(void *context, void **handle, ncclProfilerEventDescr_v5_t *d)
{
    ncclProfilerEventDescr_v6_t d6;

    if (d == NULL) {
        return prof_start_v6(context, handle, NULL);
    }
    /* v6 only appends union members: every v5 member has the same offset. */
    _Static_assert(sizeof(d6) == sizeof(*d), "v5 and v6 descriptors have one size");
    memcpy(&d6, d, sizeof(d6));
    return prof_start_v6(context, handle, &d6);
}

static ncclResult_t prof_stop(void *handle)
{
    return prof_stop_event(handle);
}

static ncclResult_t prof_record_v6(void *handle, ncclProfilerEventState_v6_t state,
                                   ncclProfilerEventStateArgs_v6_t *args)
{
    return prof_record_state(handle, (int)state, args);
}

static ncclResult_t prof_record_v7(void *handle, ncclProfilerEventState_v7_t state,
                                   ncclProfilerEventStateArgs_v7_t *args)
{
    _Static_assert(sizeof(ncclProfilerEventStateArgs_v6_t) == sizeof(*args),
                   "v6 and v7 state args have one layout");
    return prof_record_state(handle, (int)state, (const ncclProfilerEventStateArgs_v6_t *)args);
}

static ncclResult_t prof_record_v5(void *handle, ncclProfilerEventState_v5_t state,
                                   ncclProfilerEventStateArgs_v5_t *args)
{
    ncclProfilerEventStateArgs_v6_t a6;

    if (args == NULL) {
        return prof_record_state(handle, (int)state, NULL);
    }
    _Static_assert(sizeof(a6) == sizeof(*args), "v5 and v6 state args have one layout");
    memcpy(&a6, args, sizeof(a6));
    return prof_record_state(handle, (int)state, &a6);
}

static ncclResult_t prof_finalize(void *context)
{
    prof_ctx_t *ctx = context;

    if (ctx == NULL) {
        return ncclSuccess;
    }
    /* A failed write was logged; the communicator's teardown goes on regardless. */
    if (live_remove(ctx)) {
        (void)prof_trace_write(ctx, NULL, 0);
    }
    free(ctx->events);
    free(ctx);
    return ncclSuccess;
}

__attribute__((visibility("default"))) const ncclProfiler_v7_t ncclProfiler_v7 = {
    .name = "Braid trace",
    .init = prof_init_v7,
    .startEvent = prof_start_v7,
    .stopEvent = prof_stop,
    .recordEventState = prof_record_v7,
    .finalize = prof_finalize,
};

__attribute__((visibility("default"))) const ncclProfiler_v6_t ncclProfiler_v6 = {
    .name = "Braid trace",
    .init = prof_init_v6,
    .startEvent = prof_start_v6,
    .stopEvent = prof_stop,
    .recordEventState = prof_record_v6,
    .finalize = prof_finalize,
};

__attribute__((visibility("default"))) const ncclProfiler_v5_t ncclProfiler_v5 = {
    .name = "Braid trace",
    .init = prof_init_v5,
    .startEvent = prof_start_v5,
    .stopEvent = prof_stop,
    .recordEventState = prof_record_v5,
    .finalize = prof_finalize,
};
