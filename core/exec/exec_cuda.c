/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA executor: calls on device buffers, for ranks that are threads of this process.
 *
 * The ranks of one communicator that live in this process form a clique. Each rank's
 * device calls of one group (or one lone call) are a deposit; the k-th deposits of every
 * rank form gang k. A rank's deposit records an event on its stream (its inputs are ready
 * there) and makes the stream wait, in the stream, until the clique's `done` word reaches
 * k + 1: the call returns at once, as NCCL's do. The rank that completes gang k builds
 * the launch: the work items of every rank and channel, from plan's schedules, and one
 * kernel on each device of the clique that holds every block of that device's ranks. The
 * launch stream first waits for every rank's event, and writes `done` after the kernels.
 *
 * Why one launch for all ranks: a block that waits for a peer's block must wait for
 * something that runs. Kernels of separate launches are co-resident only when the GPU has
 * room and its scheduler puts them side by side, which nothing guarantees (several ranks on
 * one GPU, other work, streams sharing a hardware queue). Blocks of one launch whose grid
 * fits the GPU at once all become resident once earlier work drains, so no wait can
 * deadlock. The grid is bounded at clique setup (channels x ranks <= what the device
 * holds resident), and waiting for a rank that has not called yet happens in the streams
 * (stream memory operations), never on the SMs. What it costs: a launch waits for the
 * slowest rank's call, and a gang is one kernel for all local ranks (no per-rank overlap).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev_work.h"
#include "exec_int.h"
#include "util.h"
#include "util_cuda.h"

/* The kernels, embedded by core/device (absent from a build without a CUDA compiler). */
extern const unsigned char br_dev_fatbin[] __attribute__((weak));
extern const size_t br_dev_fatbin_size __attribute__((weak));

#define GANGS 4          /* gangs in flight per clique */
#define MAX_DEVS 16

/* Host-mapped words the streams and kernels share with the host. */
typedef struct {
    uint32_t done;       /* gangs finished (written by the launch stream) */
    uint32_t abort_flag; /* nonzero: kernels stop waiting */
    uint32_t status;     /* BR_DEV_* of the first failure */
    int32_t fail_rank, fail_peer;
    uint32_t pad;
    uint64_t fail_step;
} flags_t;

/* One rank's share of a gang. */
typedef struct {
    int have;
    br_op_t *ops;
    int nops, cap;
    br_cu_stream_t stream;
    br_cu_event_t arrive; /* recorded on the rank's stream at its deposit */
} share_t;

typedef struct {
    uint64_t k;         /* the gang this slot holds */
    int deposited;      /* ranks that deposited */
    share_t *share;     /* [nranks] */
    /* Descriptors of its launch: pinned, mapped, read by the kernels. */
    char *desc;
    br_cu_ptr_t desc_d;
    size_t desc_cap;
} gang_t;

typedef struct {
    int ordinal;
    br_cu_context_t ctx;
    br_cu_module_t mod;
    br_cu_function_t fn;
    br_cu_stream_t stream; /* launch stream */
    br_cu_event_t finished; /* after its kernel (several devices: the last one waits) */
    int capacity;           /* blocks resident at once */
} dev_t_;

struct br_cuda_clique {
    uint64_t hash;
    int nranks, registered, refs;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    br_exec_comm_t **ec; /* [nranks] */
    int *rank_dev;       /* [nranks]: index into devs */
    dev_t_ devs[MAX_DEVS];
    int ndevs;
    int nch;             /* channels a device collective may use */
    br_graph_t *graph;   /* nch channels over the clique's ranks */
    /* Connections: (channel, from, to) -> index; device structs and their ring arrays. */
    int nconn;
    int *conn_key;             /* [nconn * 3] */
    br_cu_ptr_t conn_d;        /* br_dev_conn_t[nconn] */
    br_cu_ptr_t *conn_mem;     /* per connection: its buffer and counters */
    br_cu_ptr_t ring_d;        /* int32 ring orders, nch x nranks */
    int setup_done;
    ncclResult_t setup_res;
    flags_t *flags;            /* pinned, mapped */
    br_cu_ptr_t flags_d;
    uint64_t *rank_next;       /* [nranks]: the next gang each rank deposits */
    uint64_t launched;         /* gangs launched (their done write enqueued) */
    gang_t gang[GANGS];
    int failed;                /* sticky: no more launches */
    char fail_msg[512];
    br_clique_t *next_in_registry;
};

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static br_clique_t *registry;

static ncclResult_t cu_check(br_cu_result_t e, const char *what, int rank)
{
    if (e == BR_CU_SUCCESS) {
        return ncclSuccess;
    }
    BR_WARN(NCCL_INIT, "rank %d (host %s): %s failed: %s", rank, br_host_name(), what,
            br_cuda_error_string(e));
    return ncclUnhandledCudaError;
}

#define CU(call, what, rank) BR_CHECK(cu_check((call), (what), (rank)))

int br_exec_cuda_has_kernels(void)
{
    return &br_dev_fatbin_size != NULL && br_dev_fatbin_size > 0;
}

/* ---- registry ---- */

ncclResult_t br_exec_cuda_attach(br_exec_comm_t *ec, uint64_t hash, int device)
{
    br_clique_t *cl;
    pthread_mutex_lock(&registry_mu);
    for (cl = registry; cl != NULL && cl->hash != hash; cl = cl->next_in_registry) {
    }
    if (cl == NULL) {
        if (br_calloc(&cl, 1, "CUDA clique") != ncclSuccess) {
            pthread_mutex_unlock(&registry_mu);
            return ncclSystemError;
        }
        cl->hash = hash;
        cl->nranks = ec->nranks;
        pthread_mutex_init(&cl->mu, NULL);
        pthread_cond_init(&cl->cv, NULL);
        if (br_calloc(&cl->ec, (size_t)ec->nranks, "CUDA clique") != ncclSuccess ||
            br_calloc(&cl->rank_dev, (size_t)ec->nranks, "CUDA clique") != ncclSuccess ||
            br_calloc(&cl->rank_next, (size_t)ec->nranks, "CUDA clique") != ncclSuccess) {
            pthread_mutex_unlock(&registry_mu);
            return ncclSystemError;
        }
        for (int g = 0; g < GANGS; g++) {
            cl->gang[g].k = (uint64_t)g;
            if (br_calloc(&cl->gang[g].share, (size_t)ec->nranks, "CUDA gang") != ncclSuccess) {
                pthread_mutex_unlock(&registry_mu);
                return ncclSystemError;
            }
        }
        cl->next_in_registry = registry;
        registry = cl;
    }
    pthread_mutex_lock(&cl->mu);
    cl->ec[ec->rank] = ec;
    cl->registered++;
    cl->refs++;
    int d = 0;
    while (d < cl->ndevs && cl->devs[d].ordinal != device) {
        d++;
    }
    if (d == cl->ndevs) {
        if (cl->ndevs == MAX_DEVS) {
            pthread_mutex_unlock(&cl->mu);
            pthread_mutex_unlock(&registry_mu);
            BR_WARN(NCCL_INIT, "rank %d: more than %d CUDA devices in one communicator",
                    ec->rank, MAX_DEVS);
            return ncclInvalidUsage;
        }
        cl->devs[cl->ndevs++].ordinal = device;
    }
    cl->rank_dev[ec->rank] = d;
    pthread_mutex_unlock(&cl->mu);
    pthread_mutex_unlock(&registry_mu);
    ec->cuda = cl;
    ec->cuda_dev = device;
    return ncclSuccess;
}

/* ---- setup: contexts, kernels, FIFOs (once, by the first launcher) ---- */

static ncclResult_t dev_setup(br_clique_t *cl, dev_t_ *d, int rank)
{
    const br_cuda_t *cu = br_cuda(NULL);
    br_cu_device_t dev;
    int sms = 0, per_sm = 0;

    CU(cu->DeviceGet(&dev, d->ordinal), "cuDeviceGet", rank);
    CU(cu->DevicePrimaryCtxRetain(&d->ctx, dev), "cuDevicePrimaryCtxRetain", rank);
    CU(cu->CtxSetCurrent(d->ctx), "cuCtxSetCurrent", rank);
    br_cu_result_t e = cu->ModuleLoadData(&d->mod, br_dev_fatbin);
    if (e != BR_CU_SUCCESS) {
        int major = 0, minor = 0;
        cu->DeviceGetAttribute(&major, BR_CU_DEV_ATTR_CC_MAJOR, dev);
        cu->DeviceGetAttribute(&minor, BR_CU_DEV_ATTR_CC_MINOR, dev);
        BR_WARN(NCCL_INIT,
                "rank %d (host %s): Braid's kernels do not load on device %d (compute "
                "capability %d.%d): %s; this build carries sm_80, sm_90 and compute_90 PTX",
                rank, br_host_name(), d->ordinal, major, minor, br_cuda_error_string(e));
        return ncclUnhandledCudaError;
    }
    CU(cu->ModuleGetFunction(&d->fn, d->mod, "br_dev_kernel"), "cuModuleGetFunction", rank);
    CU(cu->StreamCreate(&d->stream, BR_CU_STREAM_NON_BLOCKING), "cuStreamCreate", rank);
    CU(cu->EventCreate(&d->finished, BR_CU_EVENT_DISABLE_TIMING), "cuEventCreate", rank);
    CU(cu->DeviceGetAttribute(&sms, BR_CU_DEV_ATTR_SM_COUNT, dev), "cuDeviceGetAttribute", rank);
    CU(cu->OccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, d->fn, BR_DEV_NTHREADS, 0),
       "cuOccupancyMaxActiveBlocksPerMultiprocessor", rank);
    d->capacity = sms * per_sm;
    (void)cl;
    return ncclSuccess;
}

/* Index of connection (c, from -> to), or -1. */
static int conn_index(const br_clique_t *cl, int c, int from, int to)
{
    for (int i = 0; i < cl->nconn; i++) {
        const int *k = &cl->conn_key[3 * i];
        if (k[0] == c && k[1] == from && k[2] == to) {
            return i;
        }
    }
    return -1;
}

static ncclResult_t conn_add(br_clique_t *cl, int c, int from, int to, int *cap)
{
    if (from < 0 || to < 0 || from == to || conn_index(cl, c, from, to) >= 0) {
        return ncclSuccess;
    }
    if (cl->nconn == *cap) {
        int n = *cap ? 2 * *cap : 64;
        int *k = realloc(cl->conn_key, (size_t)n * 3 * sizeof(int));
        if (k == NULL) {
            return ncclSystemError;
        }
        cl->conn_key = k;
        *cap = n;
    }
    int *k = &cl->conn_key[3 * cl->nconn++];
    k[0] = c;
    k[1] = from;
    k[2] = to;
    return ncclSuccess;
}

static ncclResult_t clique_setup(br_clique_t *cl, int rank)
{
    const br_cuda_t *cu = br_cuda(NULL);
    int cap = 0, capacity = 0, most = 0;
    uint64_t *hosts = NULL;
    ncclResult_t res;

    for (int d = 0; d < cl->ndevs; d++) {
        BR_CHECK(dev_setup(cl, &cl->devs[d], rank));
    }
    /* Channels: as many as fit resident with every rank of each device, a quarter of the
     * room kept for the copy blocks of point-to-point work. */
    cl->nch = BR_MAX_CHANNELS;
    for (int d = 0; d < cl->ndevs; d++) {
        int n = 0;
        for (int r = 0; r < cl->nranks; r++) {
            n += cl->rank_dev[r] == d;
        }
        int fit = n > 0 ? cl->devs[d].capacity * 3 / 4 / n : BR_MAX_CHANNELS;
        if (fit < cl->nch) {
            cl->nch = fit;
            most = n;
            capacity = cl->devs[d].capacity;
        }
    }
    if (cl->nch > (int)BR_PARAM_INT(CUDA_NCHANNELS)) {
        cl->nch = (int)BR_PARAM_INT(CUDA_NCHANNELS);
    }
    if (cl->nch > BR_MAX_CHANNELS) {
        cl->nch = BR_MAX_CHANNELS;
    }
    if (cl->nch < 1) {
        BR_WARN(NCCL_INIT,
                "rank %d (host %s): %d ranks share one GPU, which holds %d blocks of %d "
                "threads at once: every rank needs at least one resident block",
                rank, br_host_name(), most, capacity, BR_DEV_NTHREADS);
        return ncclInvalidUsage;
    }
    /* Rings and trees over the clique's ranks (one host: every rank is local). */
    BR_CHECK(br_calloc(&hosts, (size_t)cl->nranks, "CUDA graph"));
    res = br_graph_build(cl->nranks, hosts, cl->nch, &cl->graph);
    free(hosts);
    BR_CHECK(res);
    for (int c = 0; c < cl->nch; c++) {
        const int *ring = br_graph_ring(cl->graph, c);
        for (int p = 0; p < cl->nranks; p++) {
            BR_CHECK(conn_add(cl, c, ring[p], ring[(p + 1) % cl->nranks], &cap));
        }
        for (int r = 0; r < cl->nranks; r++) {
            const br_tree_node_t *t = br_graph_tree(cl->graph, c, r);
            BR_CHECK(conn_add(cl, c, r, t->up, &cap));
            BR_CHECK(conn_add(cl, c, t->up, r, &cap));
        }
    }
    /* FIFO memory in each receiver's device; the structs on device 0 of the clique (every
     * device of the clique reaches it: peer access, or one device). */
    size_t slot = (size_t)BR_PARAM_INT(BUFFSIZE) / BR_STEPS;
    slot = (slot + 127) & ~(size_t)127;
    if (slot < 4096) {
        slot = 4096;
    }
    br_dev_conn_t *conns = NULL;
    BR_CHECK(br_calloc(&conns, (size_t)(cl->nconn > 0 ? cl->nconn : 1), "CUDA FIFOs"));
    BR_CHECK(br_calloc(&cl->conn_mem, (size_t)(cl->nconn > 0 ? cl->nconn : 1), "CUDA FIFOs"));
    size_t ctl = 4 * 128 + BR_STEPS * 2 * sizeof(uint64_t); /* tail, head, desc */
    for (int i = 0; i < cl->nconn; i++) {
        int to = cl->conn_key[3 * i + 2];
        dev_t_ *d = &cl->devs[cl->rank_dev[to]];
        br_cu_ptr_t m;
        CU(cu->CtxSetCurrent(d->ctx), "cuCtxSetCurrent", rank);
        CU(cu->MemAlloc(&m, slot * BR_STEPS + ctl), "cuMemAlloc (FIFO)", rank);
        CU(cu->MemsetD8(m, 0, slot * BR_STEPS + ctl), "cuMemsetD8 (FIFO)", rank);
        cl->conn_mem[i] = m;
        conns[i].buf = (char *)(uintptr_t)m;
        conns[i].slot_bytes = slot;
        conns[i].tail = (uint64_t *)(uintptr_t)(m + slot * BR_STEPS);
        conns[i].head = (uint64_t *)(uintptr_t)(m + slot * BR_STEPS + 128);
        conns[i].desc = (uint64_t *)(uintptr_t)(m + slot * BR_STEPS + 4 * 128);
    }
    CU(cu->CtxSetCurrent(cl->devs[0].ctx), "cuCtxSetCurrent", rank);
    size_t conn_bytes = (size_t)(cl->nconn > 0 ? cl->nconn : 1) * sizeof(br_dev_conn_t);
    size_t ring_bytes = (size_t)cl->nch * (size_t)cl->nranks * sizeof(int32_t);
    CU(cu->MemAlloc(&cl->conn_d, conn_bytes), "cuMemAlloc (connections)", rank);
    CU(cu->MemAlloc(&cl->ring_d, ring_bytes), "cuMemAlloc (rings)", rank);
    int32_t *rings = NULL;
    BR_CHECK(br_calloc(&rings, (size_t)cl->nch * (size_t)cl->nranks, "CUDA rings"));
    for (int c = 0; c < cl->nch; c++) {
        for (int p = 0; p < cl->nranks; p++) {
            rings[(size_t)c * (size_t)cl->nranks + (size_t)p] = br_graph_ring(cl->graph, c)[p];
        }
    }
    CU(cu->MemcpyHtoDAsync(cl->conn_d, conns, conn_bytes, cl->devs[0].stream), "cuMemcpy", rank);
    CU(cu->MemcpyHtoDAsync(cl->ring_d, rings, ring_bytes, cl->devs[0].stream), "cuMemcpy", rank);
    CU(cu->StreamSynchronize(cl->devs[0].stream), "cuStreamSynchronize", rank);
    free(conns);
    free(rings);
    /* Peer access between the clique's devices, where there are several. */
    for (int a = 0; a < cl->ndevs; a++) {
        for (int b = 0; b < cl->ndevs; b++) {
            int can = 0;
            if (a == b) {
                continue;
            }
            cu->DeviceCanAccessPeer(&can, cl->devs[a].ordinal, cl->devs[b].ordinal);
            if (!can) {
                BR_WARN(NCCL_INIT,
                        "rank %d: devices %d and %d of one communicator cannot access each "
                        "other's memory (no P2P): device buffers need peer access here",
                        rank, cl->devs[a].ordinal, cl->devs[b].ordinal);
                return ncclInvalidUsage;
            }
            CU(cu->CtxSetCurrent(cl->devs[a].ctx), "cuCtxSetCurrent", rank);
            br_cu_result_t e = cu->CtxEnablePeerAccess(cl->devs[b].ctx, 0);
            if (e != BR_CU_SUCCESS && e != 704 /* CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED */) {
                return cu_check(e, "cuCtxEnablePeerAccess", rank);
            }
        }
    }
    void *fh = NULL;
    CU(cu->MemHostAlloc(&fh, sizeof(flags_t),
                        BR_CU_MEMHOSTALLOC_PORTABLE | BR_CU_MEMHOSTALLOC_DEVICEMAP),
       "cuMemHostAlloc (flags)", rank);
    memset(fh, 0, sizeof(flags_t));
    cl->flags = fh;
    CU(cu->MemHostGetDevicePointer(&cl->flags_d, fh, 0), "cuMemHostGetDevicePointer", rank);
    for (int g = 0; g < GANGS; g++) {
        for (int r = 0; r < cl->nranks; r++) {
            CU(cu->CtxSetCurrent(cl->devs[cl->rank_dev[r]].ctx), "cuCtxSetCurrent", rank);
            CU(cu->EventCreate(&cl->gang[g].share[r].arrive, BR_CU_EVENT_DISABLE_TIMING),
               "cuEventCreate", rank);
        }
    }
    BR_INFO(NCCL_INIT,
            "CUDA executor: %d ranks on %d device%s, %d channels per collective, %d "
            "connections of %d x %zu bytes",
            cl->nranks, cl->ndevs, cl->ndevs == 1 ? "" : "s", cl->nch, cl->nconn, BR_STEPS,
            slot);
    return ncclSuccess;
}

/* ---- failures ---- */

/* No gang launches any more: let every stream that waits for one go on. The launch
 * streams drain first (they hold finite work: kernels that stop waiting once failed or
 * aborted), so no `done` write of theirs lands after ours. Caller holds cl->mu. */
static void release_streams(br_clique_t *cl)
{
    const br_cuda_t *cu = br_cuda(NULL);
    if (cl->flags == NULL) {
        return; /* no stream ever waited */
    }
    for (int d = 0; d < cl->ndevs; d++) {
        if (cl->devs[d].stream != NULL) {
            cu->CtxSetCurrent(cl->devs[d].ctx);
            cu->StreamSynchronize(cl->devs[d].stream);
        }
    }
    __atomic_store_n(&cl->flags->done, 0x7fffffffu, __ATOMIC_RELEASE);
}

/* Fail every rank of the clique (sticky), with the message, and release the streams.
 * Caller holds cl->mu. */
static void clique_fail(br_clique_t *cl, ncclResult_t res, const char *msg)
{
    if (!cl->failed) {
        cl->failed = 1;
        snprintf(cl->fail_msg, sizeof(cl->fail_msg), "%s", msg);
        release_streams(cl);
        pthread_cond_broadcast(&cl->cv);
    }
    for (int r = 0; r < cl->nranks; r++) {
        if (cl->ec[r] != NULL) {
            br_exec_fail(cl->ec[r], res, "%s", msg);
        }
    }
}

/* Read what the kernels reported. Caller holds cl->mu. */
static void poll_status(br_clique_t *cl)
{
    if (cl->flags == NULL || cl->failed) {
        return;
    }
    uint32_t st = __atomic_load_n(&cl->flags->status, __ATOMIC_ACQUIRE);
    if (st == BR_DEV_OK) {
        return;
    }
    char msg[512];
    int r = cl->flags->fail_rank, p = cl->flags->fail_peer;
    unsigned long long step = (unsigned long long)cl->flags->fail_step;
    switch (st) {
    case BR_DEV_ABORTED:
        snprintf(msg, sizeof(msg), "rank %d (host %s): device collective aborted "
                 "(ncclCommAbort) while waiting for rank %d at step %llu", r, br_host_name(), p, step);
        break;
    case BR_DEV_TIMEOUT:
        snprintf(msg, sizeof(msg),
                 "rank %d (host %s): device collective waited more than %lld s for rank %d "
                 "at step %llu (BRAID_CUDA_WAIT_TIMEOUT)",
                 r, br_host_name(), (long long)BR_PARAM_INT(CUDA_WAIT_TIMEOUT), p, step);
        break;
    case BR_DEV_MISMATCH:
        snprintf(msg, sizeof(msg),
                 "rank %d (host %s): mismatched calls: the data rank %d sent for step %llu "
                 "belongs to another call (different collective, count or order)",
                 r, br_host_name(), p, step);
        break;
    default:
        snprintf(msg, sizeof(msg), "rank %d (host %s): device kernel failed (status %u)", r,
                 br_host_name(), st);
        break;
    }
    clique_fail(cl, st == BR_DEV_MISMATCH ? ncclInvalidUsage
                    : st == BR_DEV_ABORTED ? ncclRemoteError : ncclInternalError, msg);
}

/* ---- building a launch ---- */

typedef struct {
    br_dev_block_t *blocks;
    br_dev_work_t *works;
    int nblocks, nworks, cap_blocks, cap_works;
} build_t;

static ncclResult_t add_block(build_t *b, int rank, int ch)
{
    if (b->nblocks == b->cap_blocks) {
        int n = b->cap_blocks ? 2 * b->cap_blocks : 64;
        br_dev_block_t *p = realloc(b->blocks, (size_t)n * sizeof(*p));
        if (p == NULL) {
            return ncclSystemError;
        }
        b->blocks = p;
        b->cap_blocks = n;
    }
    br_dev_block_t *blk = &b->blocks[b->nblocks++];
    blk->first = (uint32_t)b->nworks;
    blk->nworks = 0;
    blk->rank = rank;
    blk->channel = ch;
    return ncclSuccess;
}

static ncclResult_t add_work(build_t *b, const br_dev_work_t *w)
{
    if (b->nworks == b->cap_works) {
        int n = b->cap_works ? 2 * b->cap_works : 128;
        br_dev_work_t *p = realloc(b->works, (size_t)n * sizeof(*p));
        if (p == NULL) {
            return ncclSystemError;
        }
        b->works = p;
        b->cap_works = n;
    }
    b->works[b->nworks++] = *w;
    b->blocks[b->nblocks - 1].nworks++;
    return ncclSuccess;
}

/* Payload bytes of one step under proto. */
static size_t step_payload(const br_clique_t *cl, int proto)
{
    size_t slot = (size_t)BR_PARAM_INT(BUFFSIZE) / BR_STEPS;
    slot = (slot + 127) & ~(size_t)127;
    if (slot < 4096) {
        slot = 4096;
    }
    (void)cl;
    if (proto == BR_PROTO_LL) {
        /* LL steps stay small: latency, not bandwidth, is what LL is for. */
        size_t s = slot / BR_DEV_LL_LINE * BR_DEV_LL_DATA;
        return s < 16384 ? s : 16384;
    }
    if (proto == BR_PROTO_LL128) {
        return slot / BR_DEV_LL128_LINE * BR_DEV_LL128_DATA;
    }
    return slot;
}

static void fill_conns(const br_clique_t *cl, br_dev_work_t *w, int c, int r)
{
    const int *ring = br_graph_ring(cl->graph, c), *pos = br_graph_ring_pos(cl->graph, c);
    const br_tree_node_t *t = br_graph_tree(cl->graph, c, r);
    int n = cl->nranks;
    int recv[BR_DEV_MAX_PEERS], send[BR_DEV_MAX_PEERS], nr = 0, ns = 0;
    br_dev_conn_t *base = (br_dev_conn_t *)(uintptr_t)cl->conn_d;

    recv[nr++] = ring[(pos[r] + n - 1) % n];
    send[ns++] = ring[(pos[r] + 1) % n];
    if (t->up >= 0) {
        recv[nr++] = t->up;
        send[ns++] = t->up;
    }
    for (int i = 0; i < t->ndown; i++) {
        recv[nr++] = t->down[i];
        send[ns++] = t->down[i];
    }
    w->nrecv_peers = w->nsend_peers = 0;
    for (int i = 0; i < nr; i++) {
        int dup = 0;
        for (int j = 0; j < w->nrecv_peers; j++) {
            dup |= w->recv_peer[j] == recv[i];
        }
        int idx = conn_index(cl, c, recv[i], r);
        if (!dup && idx >= 0) {
            w->recv_peer[w->nrecv_peers] = recv[i];
            w->recv_conn[w->nrecv_peers++] = base + idx;
        }
    }
    for (int i = 0; i < ns; i++) {
        int dup = 0;
        for (int j = 0; j < w->nsend_peers; j++) {
            dup |= w->send_peer[j] == send[i];
        }
        int idx = conn_index(cl, c, r, send[i]);
        if (!dup && idx >= 0) {
            w->send_peer[w->nsend_peers] = send[i];
            w->send_conn[w->nsend_peers++] = base + idx;
        }
    }
}

static void fill_redop(br_dev_work_t *w, const br_op_t *op)
{
    w->type = (uint32_t)op->type;
    w->red = (uint32_t)op->redop.kind;
    w->scalar_f = op->redop.scalar_f;
    w->scalar_i = op->redop.scalar_i;
    w->scalar_dev = op->redop.scalar_dev;
    w->divisor = op->redop.divisor;
    w->seq = op->seq + 1;
}

/* Do two ranks' calls describe the same collective? */
static int same_coll(const br_op_t *a, const br_op_t *b)
{
    return a->func == b->func && a->count == b->count && a->type == b->type &&
           a->redop.kind == b->redop.kind && a->root == b->root && a->algo == b->algo &&
           a->proto == b->proto && a->nchannels == b->nchannels && a->seq == b->seq;
}

static void op_describe(char *buf, size_t len, const br_op_t *op)
{
    snprintf(buf, len, "%s #%llu (count %zu, %s, %s, root %d)", br_func_name(op->func),
             (unsigned long long)op->seq, op->count, br_type_name(op->type),
             br_red_kind_name(op->redop.kind), op->root);
}

/* The i-th collective of a share, or NULL. */
static const br_op_t *nth_coll(const share_t *s, int i)
{
    for (int j = 0; j < s->nops; j++) {
        if (br_func_is_collective(s->ops[j].func) && i-- == 0) {
            return &s->ops[j];
        }
    }
    return NULL;
}

/* The collectives of gang g, every rank's, as work items; *msg on a mismatch. */
static ncclResult_t build_colls(br_clique_t *cl, gang_t *g, build_t *per_dev, char *msg,
                                size_t len)
{
    int n = cl->nranks, ncoll = 0;
    char a[160], b[160];

    while (nth_coll(&g->share[0], ncoll) != NULL) {
        ncoll++;
    }
    /* Every rank must have the same collectives in the same order. */
    for (int r = 1; r < n; r++) {
        for (int i = 0; i <= ncoll; i++) {
            const br_op_t *ref = nth_coll(&g->share[0], i), *op = nth_coll(&g->share[r], i);
            if (ref == NULL && op == NULL) {
                break;
            }
            if (ref == NULL || op == NULL) {
                op_describe(a, sizeof(a), ref != NULL ? ref : op);
                snprintf(msg, len, "mismatched calls: rank %d called %s, rank %d has no such call "
                         "in this group", ref != NULL ? 0 : r, a, ref != NULL ? r : 0);
                return ncclInvalidUsage;
            }
            if (!same_coll(ref, op)) {
                op_describe(a, sizeof(a), ref);
                op_describe(b, sizeof(b), op);
                snprintf(msg, len, "mismatched calls: rank 0 called %s where rank %d called %s",
                         a, r, b);
                return ncclInvalidUsage;
            }
        }
    }
    for (int r = 0; r < n; r++) {
        build_t *bd = &per_dev[cl->rank_dev[r]];
        for (int c = 0; c < cl->nch; c++) {
            int opened = 0;
            for (int i = 0; i < ncoll; i++) {
                br_op_t o = *nth_coll(&g->share[r], i);
                br_plan_layout_t lay;
                br_dev_work_t w;
                /* The executor may hold fewer channels than plan allowed: every rank cuts
                 * the data alike, here, for all of them. */
                if (o.nchannels > cl->nch) {
                    o.nchannels = cl->nch;
                }
                if (c >= o.nchannels || o.count == 0) {
                    continue;
                }
                o.chunk_bytes = step_payload(cl, o.proto);
                br_plan_layout(&o, n, c, &lay);
                if (lay.lo >= lay.hi) {
                    continue;
                }
                memset(&w, 0, sizeof(w));
                w.kind = BR_DEV_WORK_SCHED;
                w.proto = (uint32_t)o.proto;
                fill_redop(&w, &o);
                br_plan_sched(cl->graph, &o, c, r, &w.sched);
                w.esize = lay.esize;
                w.units = lay.units;
                w.lo = lay.lo;
                w.hi = lay.hi;
                w.slice = lay.slice;
                w.ring_rank = (const int32_t *)(uintptr_t)(cl->ring_d + (size_t)c * (size_t)n *
                                                                          sizeof(int32_t));
                w.send = o.sendbuff;
                w.recv = o.recvbuff;
                fill_conns(cl, &w, c, r);
                if (!opened) {
                    BR_CHECK(add_block(bd, r, c));
                    opened = 1;
                }
                BR_CHECK(add_work(bd, &w));
            }
        }
    }
    return ncclSuccess;
}

/* Sends and receives of gang g, matched in order per pair, as copies. */
static ncclResult_t build_p2p(br_clique_t *cl, gang_t *g, build_t *per_dev, char *msg, size_t len)
{
    int n = cl->nranks;
    for (int s = 0; s < n; s++) {
        for (int d = 0; d < n; d++) {
            int si = 0, ri = 0;
            share_t *ss = &g->share[s], *ds = &g->share[d];
            for (;;) {
                while (si < ss->nops && !(ss->ops[si].func == BR_FUNC_SEND && ss->ops[si].peer == d)) {
                    si++;
                }
                while (ri < ds->nops && !(ds->ops[ri].func == BR_FUNC_RECV && ds->ops[ri].peer == s)) {
                    ri++;
                }
                if (si == ss->nops && ri == ds->nops) {
                    break;
                }
                if (si == ss->nops || ri == ds->nops) {
                    snprintf(msg, len,
                             "mismatched calls: rank %d %s rank %d in this group but rank %d has "
                             "no matching %s",
                             si < ss->nops ? s : d, si < ss->nops ? "sends to" : "receives from",
                             si < ss->nops ? d : s, si < ss->nops ? d : s,
                             si < ss->nops ? "ncclRecv" : "ncclSend");
                    return ncclInvalidUsage;
                }
                const br_op_t *so = &ss->ops[si++], *ro = &ds->ops[ri++];
                size_t sb = br_op_bytes(so), rb = br_op_bytes(ro);
                if (sb != rb) {
                    snprintf(msg, len,
                             "mismatched calls: rank %d sends %zu bytes to rank %d, which "
                             "receives %zu bytes",
                             s, sb, d, rb);
                    return ncclInvalidUsage;
                }
                if (sb == 0) {
                    continue;
                }
                /* The receiver's device runs the copy, split over a few blocks. */
                build_t *b = &per_dev[cl->rank_dev[d]];
                int parts = sb >= (8u << 20) ? 4 : sb >= (1u << 20) ? 2 : 1;
                size_t each = (sb / (size_t)parts + 15) & ~(size_t)15;
                for (int p = 0; p < parts; p++) {
                    size_t off = (size_t)p * each;
                    if (off >= sb) {
                        break;
                    }
                    br_dev_work_t w;
                    memset(&w, 0, sizeof(w));
                    w.kind = BR_DEV_WORK_COPY;
                    w.src = (const char *)so->sendbuff + off;
                    w.dst = (char *)ro->recvbuff + off;
                    w.bytes = off + each > sb ? sb - off : each;
                    w.seq = ro->seq + 1;
                    BR_CHECK(add_block(b, d, -1));
                    BR_CHECK(add_work(b, &w));
                }
            }
        }
    }
    return ncclSuccess;
}

/* Copy a build into the gang's pinned descriptor memory; returns the device addresses. */
static ncclResult_t stage(gang_t *g, const build_t *b, size_t at, size_t *used,
                          br_cu_ptr_t *blocks_d, br_cu_ptr_t *works_d)
{
    size_t bb = (size_t)b->nblocks * sizeof(br_dev_block_t);
    size_t wb = (size_t)b->nworks * sizeof(br_dev_work_t);
    at = (at + 63) & ~(size_t)63;
    memcpy(g->desc + at, b->blocks, bb);
    *blocks_d = g->desc_d + at;
    at = (at + bb + 63) & ~(size_t)63;
    memcpy(g->desc + at, b->works, wb);
    *works_d = g->desc_d + at;
    *used = at + wb;
    return ncclSuccess;
}

static ncclResult_t ensure_desc(gang_t *g, size_t bytes, int rank)
{
    const br_cuda_t *cu = br_cuda(NULL);
    if (g->desc_cap >= bytes) {
        return ncclSuccess;
    }
    if (g->desc != NULL) {
        cu->MemFreeHost(g->desc);
        g->desc = NULL;
    }
    size_t cap = 65536;
    while (cap < bytes) {
        cap *= 2;
    }
    void *p = NULL;
    CU(cu->MemHostAlloc(&p, cap, BR_CU_MEMHOSTALLOC_PORTABLE | BR_CU_MEMHOSTALLOC_DEVICEMAP),
       "cuMemHostAlloc (descriptors)", rank);
    g->desc = p;
    g->desc_cap = cap;
    CU(cu->MemHostGetDevicePointer(&g->desc_d, p, 0), "cuMemHostGetDevicePointer", rank);
    return ncclSuccess;
}

/* Enqueue the `done` write of gang k on the first device's launch stream (after the
 * kernels of every device). */
static ncclResult_t write_done(br_clique_t *cl, uint64_t k, int rank)
{
    const br_cuda_t *cu = br_cuda(NULL);
    dev_t_ *d0 = &cl->devs[0];
    CU(cu->CtxSetCurrent(d0->ctx), "cuCtxSetCurrent", rank);
    for (int d = 1; d < cl->ndevs; d++) {
        CU(cu->StreamWaitEvent(d0->stream, cl->devs[d].finished, 0), "cuStreamWaitEvent", rank);
    }
    CU(cu->StreamWriteValue32(d0->stream, cl->flags_d + offsetof(flags_t, done),
                              (uint32_t)(k + 1), 0),
       "cuStreamWriteValue32", rank);
    return ncclSuccess;
}

/* Build and launch gang g (every rank deposited). Caller holds cl->mu. */
static ncclResult_t launch(br_clique_t *cl, gang_t *g, int rank)
{
    const br_cuda_t *cu = br_cuda(NULL);
    build_t per_dev[MAX_DEVS];
    char msg[512] = "";
    ncclResult_t res = ncclSuccess;

    memset(per_dev, 0, sizeof(per_dev));
    poll_status(cl);
    if (!cl->failed) {
        res = build_colls(cl, g, per_dev, msg, sizeof(msg));
        if (res == ncclSuccess) {
            res = build_p2p(cl, g, per_dev, msg, sizeof(msg));
        }
        if (res != ncclSuccess) {
            char full[600];
            snprintf(full, sizeof(full), "device calls of group #%llu: %s",
                     (unsigned long long)g->k, msg[0] ? msg : "out of memory");
            clique_fail(cl, res, full);
        }
    }
    if (cl->failed) {
        goto out; /* clique_fail released the streams */
    }
    size_t need = 0;
    for (int d = 0; d < cl->ndevs; d++) {
        need += 128 + (size_t)per_dev[d].nblocks * sizeof(br_dev_block_t) +
                (size_t)per_dev[d].nworks * sizeof(br_dev_work_t) + 128;
    }
    BR_CHECK_GOTO(ensure_desc(g, need, rank), res, out);
    size_t at = 0;
    for (int d = 0; d < cl->ndevs; d++) {
        dev_t_ *dv = &cl->devs[d];
        build_t *b = &per_dev[d];
        br_dev_launch_t L;
        br_cu_ptr_t blocks_d, works_d;

        BR_CHECK_GOTO(cu_check(cu->CtxSetCurrent(dv->ctx), "cuCtxSetCurrent", rank), res, out);
        /* Inputs ready: every rank's call was reached on its stream. */
        for (int r = 0; r < cl->nranks; r++) {
            BR_CHECK_GOTO(cu_check(cu->StreamWaitEvent(dv->stream, g->share[r].arrive, 0),
                                   "cuStreamWaitEvent", rank), res, out);
        }
        if (b->nblocks > 0) {
            if (b->nblocks > dv->capacity) {
                snprintf(msg, sizeof(msg),
                         "rank %d (host %s): a group of device calls needs %d blocks on device "
                         "%d, which holds %d at once: split the group",
                         rank, br_host_name(), b->nblocks, dv->ordinal, dv->capacity);
                clique_fail(cl, ncclInvalidUsage, msg);
                res = ncclInvalidUsage;
                goto out;
            }
            stage(g, b, at, &at, &blocks_d, &works_d);
            memset(&L, 0, sizeof(L));
            L.blocks = (const br_dev_block_t *)(uintptr_t)blocks_d;
            L.works = (const br_dev_work_t *)(uintptr_t)works_d;
            L.abort_flag = (volatile uint32_t *)(uintptr_t)(cl->flags_d + offsetof(flags_t, abort_flag));
            L.wait_timeout_ns = (uint64_t)BR_PARAM_INT(CUDA_WAIT_TIMEOUT) * 1000000000ull;
            L.status = (volatile uint32_t *)(uintptr_t)(cl->flags_d + offsetof(flags_t, status));
            L.fail_rank = (volatile int32_t *)(uintptr_t)(cl->flags_d + offsetof(flags_t, fail_rank));
            L.fail_peer = (volatile int32_t *)(uintptr_t)(cl->flags_d + offsetof(flags_t, fail_peer));
            L.fail_step = (volatile uint64_t *)(uintptr_t)(cl->flags_d + offsetof(flags_t, fail_step));
            void *params[1] = {&L};
            BR_CHECK_GOTO(cu_check(cu->LaunchKernel(dv->fn, (unsigned)b->nblocks, 1, 1,
                                                    BR_DEV_NTHREADS, 1, 1, 0, dv->stream, params,
                                                    NULL),
                                   "cuLaunchKernel", rank), res, out);
        }
        if (d > 0) {
            BR_CHECK_GOTO(cu_check(cu->EventRecord(dv->finished, dv->stream), "cuEventRecord",
                                   rank), res, out);
        }
    }
    res = write_done(cl, g->k, rank);
out:
    for (int d = 0; d < MAX_DEVS; d++) {
        free(per_dev[d].blocks);
        free(per_dev[d].works);
    }
    return res;
}

/* ---- the calls ---- */

ncclResult_t br_exec_cuda_deposit(br_exec_comm_t *ec, const br_op_t *ops, int nops,
                                  uint64_t *gang_p)
{
    br_clique_t *cl = ec->cuda;
    const br_cuda_t *cu = br_cuda(NULL);
    ncclResult_t res = ncclSuccess;
    br_cu_stream_t stream = (br_cu_stream_t)ops[0].stream;
    int capturing = BR_CU_CAPTURE_STATUS_NONE;

    for (int i = 1; i < nops; i++) {
        if (ops[i].stream != ops[0].stream) {
            BR_WARN(NCCL_COLL,
                    "rank %d (host %s): the device calls of one group use different streams "
                    "(%p and %p): Braid orders a rank's group on one stream",
                    ec->rank, br_host_name(), ops[0].stream, ops[i].stream);
            return ncclInvalidUsage;
        }
    }
    if (cu->StreamIsCapturing(stream, &capturing) == BR_CU_SUCCESS &&
        capturing != BR_CU_CAPTURE_STATUS_NONE) {
        BR_WARN(NCCL_COLL,
                "rank %d (host %s): %s on a stream being captured into a CUDA graph: capture "
                "of device calls is not supported by this version of Braid",
                ec->rank, br_host_name(), br_func_name(ops[0].func));
        return ncclInvalidUsage;
    }
    pthread_mutex_lock(&cl->mu);
    if (cl->failed) {
        br_exec_fail(ec, ncclInvalidUsage, "%s", cl->fail_msg);
        res = ec->error;
        goto out;
    }
    uint64_t k = cl->rank_next[ec->rank];
    gang_t *g = &cl->gang[k % GANGS];
    /* The slot must hold gang k: wait (host side) while gang k - GANGS is not launched or
     * its kernels may still read its descriptors. */
    uint64_t t0 = br_time_ns(), limit = (uint64_t)BR_PARAM_INT(CUDA_WAIT_TIMEOUT) * 1000000000ull;
    while (g->k != k || (cl->flags != NULL && k >= GANGS &&
                         __atomic_load_n(&cl->flags->done, __ATOMIC_ACQUIRE) < (uint32_t)(k - GANGS + 1))) {
        if (cl->failed) {
            br_exec_fail(ec, ncclInvalidUsage, "%s", cl->fail_msg);
            res = ec->error;
            goto out;
        }
        if (limit > 0 && br_time_ns() - t0 > limit) {
            char who[256] = "";
            size_t at = 0;
            for (int r = 0; r < cl->nranks && at < sizeof(who) - 8; r++) {
                if (cl->rank_next[r] + GANGS <= k) {
                    at += (size_t)snprintf(who + at, sizeof(who) - at, "%s%d", at ? "," : "", r);
                }
            }
            br_exec_fail(ec, ncclInvalidUsage,
                         "rank %d (host %s): %s: %d device groups behind it are not complete; "
                         "rank(s) %s have not issued their calls for %lld s",
                         ec->rank, br_host_name(), br_func_name(ops[0].func), GANGS,
                         who[0] ? who : "?", (long long)BR_PARAM_INT(CUDA_WAIT_TIMEOUT));
            res = ec->error;
            goto out;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&cl->cv, &cl->mu, &ts);
    }
    share_t *s = &g->share[ec->rank];
    if (s->cap < nops) {
        br_op_t *p = realloc(s->ops, (size_t)nops * sizeof(*p));
        if (p == NULL) {
            res = ncclSystemError;
            goto out;
        }
        s->ops = p;
        s->cap = nops;
    }
    memcpy(s->ops, ops, (size_t)nops * sizeof(*ops));
    s->nops = nops;
    s->stream = stream;
    if (!cl->setup_done) {
        /* The first gang sets the executor up (contexts, kernels, FIFOs, flags): the
         * arrival events exist only afterwards. */
        cl->setup_done = 1;
        cl->setup_res = clique_setup(cl, ec->rank);
        if (cl->setup_res != ncclSuccess) {
            clique_fail(cl, cl->setup_res,
                        "the CUDA executor could not be set up (see the warning above)");
            res = cl->setup_res;
            goto out;
        }
    }
    {
        dev_t_ *dv = &cl->devs[cl->rank_dev[ec->rank]];
        BR_CHECK_GOTO(cu_check(cu->CtxSetCurrent(dv->ctx), "cuCtxSetCurrent", ec->rank), res, out);
        BR_CHECK_GOTO(cu_check(cu->EventRecord(s->arrive, stream), "cuEventRecord", ec->rank),
                      res, out);
    }
    *gang_p = k;
    s->have = 1;
    cl->rank_next[ec->rank] = k + 1;
    if (++g->deposited == cl->nranks) {
        res = launch(cl, g, ec->rank);
        for (int r = 0; r < cl->nranks; r++) {
            g->share[r].have = 0;
            g->share[r].nops = 0;
        }
        g->deposited = 0;
        g->k = k + GANGS;
        cl->launched = k + 1;
        pthread_cond_broadcast(&cl->cv);
        if (res == ncclSuccess && ec->error != ncclSuccess) {
            res = ec->error;
        }
    }
out:
    pthread_mutex_unlock(&cl->mu);
    return res;
}

ncclResult_t br_exec_cuda_wait(br_exec_comm_t *ec, uint64_t k, void *stream)
{
    br_clique_t *cl = ec->cuda;
    const br_cuda_t *cu = br_cuda(NULL);
    ncclResult_t res = ncclSuccess;

    pthread_mutex_lock(&cl->mu);
    dev_t_ *dv = &cl->devs[cl->rank_dev[ec->rank]];
    if (cl->flags != NULL) {
        res = cu_check(cu->CtxSetCurrent(dv->ctx), "cuCtxSetCurrent", ec->rank);
        if (res == ncclSuccess) {
            res = cu_check(cu->StreamWaitValue32((br_cu_stream_t)stream,
                                                 cl->flags_d + offsetof(flags_t, done),
                                                 (uint32_t)(k + 1), BR_CU_STREAM_WAIT_VALUE_GEQ),
                           "cuStreamWaitValue32", ec->rank);
        }
    }
    pthread_mutex_unlock(&cl->mu);
    return res;
}

ncclResult_t br_exec_cuda_submit(br_exec_comm_t *ec, const br_op_t *ops, int nops)
{
    uint64_t k = 0;
    BR_CHECK(br_exec_cuda_deposit(ec, ops, nops, &k));
    return br_exec_cuda_wait(ec, k, ops[0].stream);
}

ncclResult_t br_exec_cuda_async_error(br_exec_comm_t *ec)
{
    br_clique_t *cl = ec->cuda;
    if (cl == NULL) {
        return ec->error;
    }
    pthread_mutex_lock(&cl->mu);
    poll_status(cl);
    pthread_mutex_unlock(&cl->mu);
    return ec->error;
}

void br_exec_cuda_abort(br_exec_comm_t *ec)
{
    br_clique_t *cl = ec->cuda;
    if (cl == NULL || cl->flags == NULL) {
        return;
    }
    /* Kernels stop waiting; streams still waiting for a gang that will never launch are
     * released once the launch streams drain (they hold only finite work). */
    __atomic_store_n(&cl->flags->abort_flag, 1u, __ATOMIC_RELEASE);
    pthread_mutex_lock(&cl->mu);
    char msg[256];
    snprintf(msg, sizeof(msg), "rank %d (host %s): communicator aborted (ncclCommAbort)",
             ec->rank, br_host_name());
    clique_fail(cl, ncclRemoteError, msg);
    pthread_mutex_unlock(&cl->mu);
}

void br_exec_cuda_detach(br_exec_comm_t *ec)
{
    br_clique_t *cl = ec->cuda;
    const br_cuda_t *cu = br_cuda(NULL);
    if (cl == NULL) {
        return;
    }
    ec->cuda = NULL;
    pthread_mutex_lock(&registry_mu);
    pthread_mutex_lock(&cl->mu);
    cl->ec[ec->rank] = NULL;
    int last = --cl->refs == 0;
    pthread_mutex_unlock(&cl->mu);
    if (last) {
        br_clique_t **pp = &registry;
        while (*pp != cl) {
            pp = &(*pp)->next_in_registry;
        }
        *pp = cl->next_in_registry;
    }
    pthread_mutex_unlock(&registry_mu);
    if (!last) {
        return;
    }
    if (cl->setup_done && cl->setup_res == ncclSuccess && cu != NULL) {
        /* Wait for the kernels, then free what they used. */
        for (int d = 0; d < cl->ndevs; d++) {
            cu->CtxSetCurrent(cl->devs[d].ctx);
            cu->StreamSynchronize(cl->devs[d].stream);
        }
        for (int i = 0; i < cl->nconn; i++) {
            cu->MemFree(cl->conn_mem[i]);
        }
        cu->CtxSetCurrent(cl->devs[0].ctx);
        cu->MemFree(cl->conn_d);
        cu->MemFree(cl->ring_d);
        for (int g = 0; g < GANGS; g++) {
            for (int r = 0; r < cl->nranks; r++) {
                if (cl->gang[g].share[r].arrive != NULL) {
                    cu->EventDestroy(cl->gang[g].share[r].arrive);
                }
            }
            if (cl->gang[g].desc != NULL) {
                cu->MemFreeHost(cl->gang[g].desc);
            }
        }
        cu->MemFreeHost(cl->flags);
        for (int d = 0; d < cl->ndevs; d++) {
            cu->EventDestroy(cl->devs[d].finished);
            cu->StreamDestroy(cl->devs[d].stream);
            br_cu_device_t dev;
            if (cu->DeviceGet(&dev, cl->devs[d].ordinal) == BR_CU_SUCCESS) {
                cu->DevicePrimaryCtxRelease(dev);
            }
        }
    }
    for (int g = 0; g < GANGS; g++) {
        for (int r = 0; r < cl->nranks; r++) {
            free(cl->gang[g].share[r].ops);
        }
        free(cl->gang[g].share);
    }
    if (cl->graph != NULL) {
        br_graph_free(cl->graph);
    }
    free(cl->conn_key);
    free(cl->conn_mem);
    free(cl->ec);
    free(cl->rank_dev);
    free(cl->rank_next);
    pthread_mutex_destroy(&cl->mu);
    pthread_cond_destroy(&cl->cv);
    free(cl);
}

int br_exec_cuda_nchannels(const br_exec_comm_t *ec)
{
    int n = (int)BR_PARAM_INT(CUDA_NCHANNELS);
    (void)ec;
    return n < 1 ? 1 : n > BR_MAX_CHANNELS ? BR_MAX_CHANNELS : n;
}
