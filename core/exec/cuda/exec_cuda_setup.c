/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA executor's setup, once per clique at its first device call: each device's
 * primary context, Braid's kernels loaded from the embedded fatbin, a launch stream; the
 * channels the ranks of one device can hold resident at once; rings and trees over the
 * clique's ranks; a FIFO in the receiver's GPU memory for every ring and tree link of
 * every channel; the host-mapped words kernels and streams report and wait on.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "exec_cuda_int.h"
#include "util.h"

ncclResult_t br_cuda_check(br_cu_result_t e, const char *what, int rank)
{
    if (e == BR_CU_SUCCESS) {
        return ncclSuccess;
    }
    BR_WARN(NCCL_INIT, "rank %d (host %s): %s failed: %s", rank, br_host_name(), what,
            br_cuda_error_string(e));
    return ncclUnhandledCudaError;
}

#define CU(call, what, rank) BR_CHECK(br_cuda_check((call), (what), (rank)))

static ncclResult_t dev_setup(br_clique_t *cl, br_cuda_dev_t *d, int rank)
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
    CU(cu->ModuleGetFunction(&d->fn, d->mod, BR_DEV_KERNEL_NAME), "cuModuleGetFunction", rank);
    CU(cu->ModuleGetFunction(&d->direct_fn, d->mod, BR_DEV_DIRECT_KERNEL_NAME),
       "cuModuleGetFunction", rank);
    CU(cu->StreamCreate(&d->stream, BR_CU_STREAM_NON_BLOCKING), "cuStreamCreate", rank);
    CU(cu->EventCreate(&d->finished, BR_CU_EVENT_DISABLE_TIMING), "cuEventCreate", rank);
    CU(cu->DeviceGetAttribute(&sms, BR_CU_DEV_ATTR_SM_COUNT, dev), "cuDeviceGetAttribute", rank);
    CU(cu->OccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, d->fn, BR_DEV_NTHREADS, 0),
       "cuOccupancyMaxActiveBlocksPerMultiprocessor", rank);
    d->capacity = sms * per_sm;
    d->sms = sms;
    (void)cl;
    return ncclSuccess;
}

/* Index of connection (c, from -> to), or -1. */
int br_cuda_conn_index(const br_clique_t *cl, int c, int from, int to)
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
    if (from < 0 || to < 0 || from == to || br_cuda_conn_index(cl, c, from, to) >= 0) {
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

ncclResult_t br_cuda_setup(br_clique_t *cl, int rank)
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
    cl->slot_bytes = slot;
    BR_CHECK(br_cuda_fifos_alloc(cl, &cl->fifos, rank));
    CU(cu->CtxSetCurrent(cl->devs[0].ctx), "cuCtxSetCurrent", rank);
    size_t ring_bytes = (size_t)cl->nch * (size_t)cl->nranks * sizeof(int32_t);
    CU(cu->MemAlloc(&cl->ring_d, ring_bytes), "cuMemAlloc (rings)", rank);
    int32_t *rings = NULL;
    BR_CHECK(br_calloc(&rings, (size_t)cl->nch * (size_t)cl->nranks, "CUDA rings"));
    for (int c = 0; c < cl->nch; c++) {
        for (int p = 0; p < cl->nranks; p++) {
            rings[(size_t)c * (size_t)cl->nranks + (size_t)p] = br_graph_ring(cl->graph, c)[p];
        }
    }
    CU(cu->MemcpyHtoDAsync(cl->ring_d, rings, ring_bytes, cl->devs[0].stream), "cuMemcpy", rank);
    CU(cu->StreamSynchronize(cl->devs[0].stream), "cuStreamSynchronize", rank);
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
                return br_cuda_check(e, "cuCtxEnablePeerAccess", rank);
            }
        }
    }
    /* Each device's failure claim in its own memory: its blocks take it with a GPU-scope
     * compare-and-swap, which is atomic only among the blocks of one GPU (docs/cuda.md). */
    for (int d = 0; d < cl->ndevs; d++) {
        br_cuda_dev_t *dv = &cl->devs[d];
        CU(cu->CtxSetCurrent(dv->ctx), "cuCtxSetCurrent", rank);
        CU(cu->MemAlloc(&dv->claim_d, 64), "cuMemAlloc (failure claim)", rank);
        CU(cu->MemsetD8Async(dv->claim_d, 0, 64, dv->stream), "cuMemsetD8Async", rank);
        CU(cu->StreamSynchronize(dv->stream), "cuStreamSynchronize", rank);
    }
    void *fh = NULL;
    CU(cu->MemHostAlloc(&fh, sizeof(br_cuda_flags_t),
                        BR_CU_MEMHOSTALLOC_PORTABLE | BR_CU_MEMHOSTALLOC_DEVICEMAP),
       "cuMemHostAlloc (flags)", rank);
    memset(fh, 0, sizeof(br_cuda_flags_t));
    cl->flags = fh;
    CU(cu->MemHostGetDevicePointer(&cl->flags_d, fh, 0), "cuMemHostGetDevicePointer", rank);
    for (int r = 0; r < cl->nranks; r++) {
        CU(cu->CtxSetCurrent(cl->devs[cl->rank_dev[r]].ctx), "cuCtxSetCurrent", rank);
        for (int i = 0; i < BR_CUDA_QUEUE; i++) {
            CU(cu->EventCreate(&cl->rank[r].arrive[i], BR_CU_EVENT_DISABLE_TIMING), "cuEventCreate",
               rank);
        }
    }
    /* Done events are recorded on the first device's launch stream. */
    CU(cu->CtxSetCurrent(cl->devs[0].ctx), "cuCtxSetCurrent", rank);
    for (int r = 0; r < cl->nranks; r++) {
        for (int i = 0; i < BR_CUDA_QUEUE; i++) {
            CU(cu->EventCreate(&cl->rank[r].done[i], BR_CU_EVENT_DISABLE_TIMING), "cuEventCreate",
               rank);
        }
    }
    CU(cu->CtxSetCurrent(cl->devs[0].ctx), "cuCtxSetCurrent", rank);
    for (int i = 0; i < BR_CUDA_DESC_BUFS; i++) {
        CU(cu->EventCreate(&cl->desc[i].done, BR_CU_EVENT_DISABLE_TIMING), "cuEventCreate", rank);
    }
    BR_INFO(NCCL_INIT,
            "CUDA executor: %d ranks on %d device%s, %d channels per collective, %d "
            "connections of %d x %zu bytes",
            cl->nranks, cl->ndevs, cl->ndevs == 1 ? "" : "s", cl->nch, cl->nconn, BR_STEPS, slot);
    return ncclSuccess;
}

size_t br_cuda_fifo_bytes(const br_clique_t *cl)
{
    return cl->slot_bytes * BR_STEPS + 4 * 128 + BR_STEPS * 2 * sizeof(uint64_t);
}

ncclResult_t br_cuda_fifos_alloc(br_clique_t *cl, br_cuda_fifos_t *f, int rank)
{
    const br_cuda_t *cu = br_cuda(NULL);
    size_t slot = cl->slot_bytes;
    size_t ctl = br_cuda_fifo_bytes(cl) - slot * BR_STEPS; /* tail, head, desc */
    size_t conn_bytes = (size_t)(cl->nconn > 0 ? cl->nconn : 1) * sizeof(br_dev_conn_t);
    br_dev_conn_t *conns = NULL;
    ncclResult_t res = ncclSuccess;

    memset(f, 0, sizeof(*f));
    BR_CHECK(br_calloc(&conns, (size_t)(cl->nconn > 0 ? cl->nconn : 1), "CUDA FIFOs"));
    BR_CHECK_GOTO(br_calloc(&f->mem, (size_t)(cl->nconn > 0 ? cl->nconn : 1), "CUDA FIFOs"), res,
                  out);
    /* Each FIFO in its receiver's GPU, zeroed: no LL or LL128 line looks current before
     * its sender first writes the slot. Zeroed and filled on each device's launch stream,
     * which is then synchronised: the synchronous memset and copy would run on the legacy
     * stream, which kernels on non-blocking streams do not wait for. */
    for (int i = 0; i < cl->nconn; i++) {
        int to = cl->conn_key[3 * i + 2];
        br_cuda_dev_t *d = &cl->devs[cl->rank_dev[to]];
        br_cu_ptr_t m;
        BR_CHECK_GOTO(br_cuda_check(cu->CtxSetCurrent(d->ctx), "cuCtxSetCurrent", rank), res, out);
        BR_CHECK_GOTO(
            br_cuda_check(cu->MemAlloc(&m, slot * BR_STEPS + ctl), "cuMemAlloc (FIFO)", rank), res,
            out);
        f->mem[i] = m;
        BR_CHECK_GOTO(br_cuda_check(cu->MemsetD8Async(m, 0, slot * BR_STEPS + ctl, d->stream),
                                    "cuMemsetD8Async (FIFO)", rank),
                      res, out);
        conns[i].buf = (char *)(uintptr_t)m;
        conns[i].slot_bytes = slot;
        conns[i].tail = (uint64_t *)(uintptr_t)(m + slot * BR_STEPS);
        conns[i].head = (uint64_t *)(uintptr_t)(m + slot * BR_STEPS + 128);
        conns[i].desc = (uint64_t *)(uintptr_t)(m + slot * BR_STEPS + 4 * 128);
    }
    BR_CHECK_GOTO(br_cuda_check(cu->CtxSetCurrent(cl->devs[0].ctx), "cuCtxSetCurrent", rank), res,
                  out);
    BR_CHECK_GOTO(
        br_cuda_check(cu->MemAlloc(&f->conn_d, conn_bytes), "cuMemAlloc (connections)", rank), res,
        out);
    BR_CHECK_GOTO(br_cuda_check(cu->MemcpyHtoDAsync(f->conn_d, conns, conn_bytes,
                                                     cl->devs[0].stream),
                                "cuMemcpyHtoDAsync (connections)", rank),
                  res, out);
    for (int d = 0; d < cl->ndevs; d++) {
        BR_CHECK_GOTO(br_cuda_check(cu->CtxSetCurrent(cl->devs[d].ctx), "cuCtxSetCurrent", rank),
                      res, out);
        BR_CHECK_GOTO(br_cuda_check(cu->StreamSynchronize(cl->devs[d].stream),
                                    "cuStreamSynchronize (FIFOs)", rank),
                      res, out);
    }
out:
    free(conns);
    return res;
}

void br_cuda_fifos_free(br_clique_t *cl, br_cuda_fifos_t *f)
{
    const br_cuda_t *cu = br_cuda(NULL);
    for (int i = 0; i < cl->nconn && f->mem != NULL; i++) {
        if (f->mem[i] != 0) {
            cu->MemFree(f->mem[i]);
        }
    }
    if (f->conn_d != 0) {
        cu->CtxSetCurrent(cl->devs[0].ctx);
        cu->MemFree(f->conn_d);
    }
    free(f->mem);
    memset(f, 0, sizeof(*f));
}

void br_cuda_kept_free(br_clique_t *cl, br_cuda_kept_t *k)
{
    const br_cuda_t *cu = br_cuda(NULL);
    if (k == NULL) {
        return;
    }
    br_cuda_fifos_free(cl, &k->fifos);
    if (k->desc != NULL) {
        cu->MemFreeHost(k->desc);
    }
    if (k->finished != NULL) {
        cu->EventDestroy(k->finished);
    }
    free(k);
}

void br_cuda_teardown(br_clique_t *cl)
{
    const br_cuda_t *cu = br_cuda(NULL);
    if (!cl->setup_done || cu == NULL || cl->ndevs == 0 || cl->devs[0].ctx == NULL) {
        return;
    }
    /* Wait for the kernels, then free what they used. */
    for (int d = 0; d < cl->ndevs; d++) {
        if (cl->devs[d].stream != NULL) {
            cu->CtxSetCurrent(cl->devs[d].ctx);
            cu->StreamSynchronize(cl->devs[d].stream);
        }
    }
    br_cuda_fifos_free(cl, &cl->fifos);
    while (cl->kept != NULL) {
        br_cuda_kept_t *k = cl->kept;
        cl->kept = k->next;
        br_cuda_kept_free(cl, k);
    }
    cu->CtxSetCurrent(cl->devs[0].ctx);
    if (cl->ring_d != 0) {
        cu->MemFree(cl->ring_d);
    }
    for (int r = 0; r < cl->nranks; r++) {
        for (int i = 0; i < BR_CUDA_QUEUE; i++) {
            if (cl->rank[r].arrive[i] != NULL) {
                cu->EventDestroy(cl->rank[r].arrive[i]);
            }
            if (cl->rank[r].done[i] != NULL) {
                cu->EventDestroy(cl->rank[r].done[i]);
            }
        }
    }
    for (int i = 0; i < BR_CUDA_DESC_BUFS; i++) {
        if (cl->desc[i].h != NULL) {
            cu->MemFreeHost(cl->desc[i].h);
        }
        if (cl->desc[i].done != NULL) {
            cu->EventDestroy(cl->desc[i].done);
        }
    }
    if (cl->flags != NULL) {
        cu->MemFreeHost(cl->flags);
    }
    for (int d = 0; d < cl->ndevs; d++) {
        br_cu_device_t dev;
        if (cl->devs[d].claim_d != 0) {
            cu->CtxSetCurrent(cl->devs[d].ctx);
            cu->MemFree(cl->devs[d].claim_d);
        }
        if (cl->devs[d].finished != NULL) {
            cu->EventDestroy(cl->devs[d].finished);
        }
        if (cl->devs[d].stream != NULL) {
            cu->StreamDestroy(cl->devs[d].stream);
        }
        if (cl->devs[d].ctx != NULL && cu->DeviceGet(&dev, cl->devs[d].ordinal) == BR_CU_SUCCESS) {
            cu->DevicePrimaryCtxRelease(dev);
        }
    }
}
