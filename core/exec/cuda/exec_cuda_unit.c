/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA executor's units (exec_cuda.c says what cliques, deposits and units are): which
 * next deposits of a clique's ranks form a unit (every rank's collectives, or a set of
 * sends and receives that pair up), the work descriptors a unit's kernels read, and the
 * launch of a complete unit: one kernel per device of the clique (the FIFO kernel, or the
 * direct kernel for collectives of ranks on one GPU: exec_cuda_direct.c) after every
 * rank's input event, and an event per rank after it. br_cuda_launch_ready launches every
 * unit that is complete; the calls (exec_cuda.c) run it under the clique's lock.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "exec_cuda_int.h"
#include "util.h"

/* Every rank's next deposit holds collectives: all of them are one unit. */
int br_cuda_unit_collective(br_clique_t *cl, char *in_unit)
{
    for (int r = 0; r < cl->nranks; r++) {
        const br_cuda_dep_t *d = br_cuda_head(cl, r);
        if (d == NULL || !d->has_coll) {
            return 0;
        }
    }
    memset(in_unit, 1, (size_t)cl->nranks);
    return 1;
}

/* Sends of deposit d to `to`, and receives from `from`. */
static int count_p2p(const br_cuda_dep_t *d, br_func_t func, int peer)
{
    int n = 0;
    for (int i = 0; i < d->nops; i++) {
        n += d->ops[i].func == func && d->ops[i].peer == peer;
    }
    return n;
}

/* The send/recv-only next deposits reachable from rank a through the peers they name, when
 * every send among them has its receive and the other way round. */
int br_cuda_unit_p2p(br_clique_t *cl, int a, char *in_unit, int *stack)
{
    int n = cl->nranks, top = 0;
    memset(in_unit, 0, (size_t)n);
    in_unit[a] = 1;
    stack[top++] = a;
    while (top > 0) {
        int r = stack[--top];
        const br_cuda_dep_t *d = br_cuda_head(cl, r);
        if (d == NULL || d->has_coll) {
            return 0;
        }
        for (int i = 0; i < d->nops; i++) {
            int p = d->ops[i].peer;
            if (!in_unit[p]) {
                in_unit[p] = 1;
                stack[top++] = p;
            }
        }
    }
    for (int s = 0; s < n; s++) {
        for (int r = 0; r < n; r++) {
            if (in_unit[s] && in_unit[r] &&
                count_p2p(br_cuda_head(cl, s), BR_FUNC_SEND, r) !=
                    count_p2p(br_cuda_head(cl, r), BR_FUNC_RECV, s)) {
                return 0;
            }
        }
    }
    return 1;
}

/* A descriptor buffer of at least `bytes` whose last launch has finished. One that grows
 * keeps its old memory until the clique ends: cuMemFreeHost waits for every stream of the
 * context, and calls that hold cl->mu must never wait for a stream (one may wait for a
 * launch that needs cl->mu). Growth doubles, so what is kept is at most the final size. */
ncclResult_t br_cuda_desc_get(br_clique_t *cl, size_t bytes, int rank, br_cuda_desc_t **out)
{
    const br_cuda_t *cu = br_cuda(NULL);
    br_cuda_desc_t *b = &cl->desc[cl->desc_next];
    cl->desc_next = (cl->desc_next + 1) % BR_CUDA_DESC_BUFS;
    if (b->used) {
        /* Launched BR_CUDA_DESC_BUFS launches ago: finite work, normally long finished. */
        BR_CHECK(br_cuda_check(cu->EventSynchronize(b->done), "cuEventSynchronize", rank));
    }
    if (b->cap < bytes) {
        void *p = NULL;
        size_t cap = b->cap > 0 ? 2 * b->cap : 65536;
        while (cap < bytes) {
            cap *= 2;
        }
        BR_CHECK(br_cuda_check(
            cu->MemHostAlloc(&p, cap, BR_CU_MEMHOSTALLOC_PORTABLE | BR_CU_MEMHOSTALLOC_DEVICEMAP),
            "cuMemHostAlloc (descriptors)", rank));
        if (b->h != NULL) {
            br_cuda_kept_t *k = NULL;
            if (br_calloc(&k, 1, "CUDA descriptors") != ncclSuccess) {
                cu->MemFreeHost(p);
                return ncclSystemError;
            }
            k->desc = b->h; /* freed with the clique's captured launches */
            k->next = cl->kept;
            cl->kept = k;
        }
        b->h = p;
        b->cap = cap;
        BR_CHECK(br_cuda_check(cu->MemHostGetDevicePointer(&b->d, p, 0),
                               "cuMemHostGetDevicePointer", rank));
    }
    *out = b;
    return ncclSuccess;
}

/* The words of a launch on device dev that the kernels share with the host: abort, timeout,
 * stop, and the device's own failure claim and report. */
void br_cuda_launch_words(const br_clique_t *cl, int dev, br_dev_launch_t *L)
{
    br_cu_ptr_t f = cl->flags_d;
    L->abort_flag = (volatile uint32_t *)(uintptr_t)(f + offsetof(br_cuda_flags_t, abort_flag));
    L->stop = (volatile uint32_t *)(uintptr_t)(f + offsetof(br_cuda_flags_t, stop));
    L->report = (volatile br_dev_report_t *)(uintptr_t)(f + offsetof(br_cuda_flags_t, report) +
                                                        (size_t)dev * sizeof(br_dev_report_t));
    L->wait_timeout_ns = br_cuda_wait_limit_ns();
    L->claim = (uint32_t *)(uintptr_t)cl->devs[dev].claim_d;
    L->one_gpu = cl->ndevs == 1;
}

size_t br_cuda_desc_fill(const br_clique_t *cl, int dev, char *h, br_cu_ptr_t d, size_t at,
                         const br_cuda_build_t *b, br_dev_launch_t *L)
{
    size_t bb = (size_t)b->nblocks * sizeof(br_dev_block_t);
    size_t wb = (size_t)b->nworks * sizeof(br_dev_work_t);

    memset(L, 0, sizeof(*L));
    at = (at + 127) & ~(size_t)127;
    memcpy(h + at, b->blocks, bb);
    L->blocks = (const br_dev_block_t *)(uintptr_t)(d + at);
    at = (at + bb + 127) & ~(size_t)127;
    memcpy(h + at, b->works, wb);
    L->works = (const br_dev_work_t *)(uintptr_t)(d + at);
    br_cuda_launch_words(cl, dev, L);
    return at + wb;
}

/* The unit's work per device, checked against the blocks each device holds at once;
 * *need_p: the descriptor bytes of them all. A failure fails the clique. */
static ncclResult_t unit_build(br_clique_t *cl, const char *in_unit, int rank,
                               br_cuda_build_t *per_dev, size_t *need_p)
{
    char msg[640] = "";
    ncclResult_t res = br_cuda_build(cl, in_unit, cl->fifos.conn_d, per_dev, msg, sizeof(msg));

    if (res != ncclSuccess) {
        char full[768];
        snprintf(full, sizeof(full), "rank %d (host %s): device calls: %s", rank,
                 br_host_name(), msg[0] ? msg : "out of memory");
        br_cuda_clique_fail(cl, res, full);
        return res;
    }
    *need_p = 0;
    for (int d = 0; d < cl->ndevs; d++) {
        if (per_dev[d].nwaiting > cl->devs[d].capacity) {
            snprintf(msg, sizeof(msg),
                     "rank %d (host %s): one group of device calls needs %d blocks resident at "
                     "once on device %d, which holds %d: split the group",
                     rank, br_host_name(), per_dev[d].nwaiting, cl->devs[d].ordinal,
                     cl->devs[d].capacity);
            br_cuda_clique_fail(cl, ncclInvalidUsage, msg);
            return ncclInvalidUsage;
        }
        *need_p += br_cuda_desc_bytes(&per_dev[d]);
    }
    return ncclSuccess;
}

/* Device d's part of the unit on its launch stream: once every member's call was reached
 * on its stream (the inputs are ready), its kernel, on descriptors placed from *at_p in
 * desc; a device after the first then records that it finished. */
static ncclResult_t unit_launch_dev(br_clique_t *cl, const char *in_unit, int rank, int d,
                                    const br_cuda_build_t *b, br_cuda_desc_t *desc, size_t *at_p)
{
    const br_cuda_t *cu = br_cuda(NULL);
    br_cuda_dev_t *dv = &cl->devs[d];

    BR_CHECK(br_cuda_check(cu->CtxSetCurrent(dv->ctx), "cuCtxSetCurrent", rank));
    for (int r = 0; r < cl->nranks; r++) {
        if (in_unit[r]) {
            const br_cuda_rank_t *q = &cl->rank[r];
            BR_CHECK(br_cuda_check(
                cu->StreamWaitEvent(dv->stream, q->arrive[q->launched % BR_CUDA_QUEUE], 0),
                "cuStreamWaitEvent", rank));
        }
    }
    if (b->nblocks > 0) {
        br_dev_launch_t L;
        *at_p = br_cuda_desc_fill(cl, d, desc->h, desc->d, *at_p, b, &L);
        void *params[1] = {&L};
        /* Cooperative: its blocks wait for each other, so all of them must be resident
         * together; a plain launch may start some beside another clique's kernel and
         * leave the rest waiting for room that kernel, spinning too, never gives back. */
        BR_CHECK(br_cuda_check(cu->LaunchCooperativeKernel(dv->fn, (unsigned)b->nblocks, 1, 1,
                                                           BR_DEV_NTHREADS, 1, 1, 0, dv->stream,
                                                           params),
                               "cuLaunchCooperativeKernel", rank));
    }
    if (d > 0) {
        BR_CHECK(br_cuda_check(cu->EventRecord(dv->finished, dv->stream), "cuEventRecord", rank));
    }
    return ncclSuccess;
}

/* The unit's ranks' done events, on the first device's stream after every device's
 * kernel; the descriptors are free again once that stream gets there. */
ncclResult_t br_cuda_unit_done_events(br_clique_t *cl, const char *in_unit, int rank,
                                      br_cuda_desc_t *desc)
{
    const br_cuda_t *cu = br_cuda(NULL);
    br_cuda_dev_t *d0 = &cl->devs[0];

    BR_CHECK(br_cuda_check(cu->CtxSetCurrent(d0->ctx), "cuCtxSetCurrent", rank));
    for (int d = 1; d < cl->ndevs; d++) {
        BR_CHECK(br_cuda_check(cu->StreamWaitEvent(d0->stream, cl->devs[d].finished, 0),
                               "cuStreamWaitEvent", rank));
    }
    for (int r = 0; r < cl->nranks; r++) {
        if (in_unit[r]) {
            const br_cuda_rank_t *q = &cl->rank[r];
            BR_CHECK(br_cuda_check(
                cu->EventRecord(q->done[q->launched % BR_CUDA_QUEUE], d0->stream),
                "cuEventRecord", rank));
        }
    }
    BR_CHECK(br_cuda_check(cu->EventRecord(desc->done, d0->stream), "cuEventRecord", rank));
    desc->used = 1;
    desc->since_ns = br_time_ns();
    for (int r = 0; r < cl->nranks; r++) {
        if (in_unit[r]) {
            br_cuda_op_describe(desc->what, sizeof(desc->what), &br_cuda_head(cl, r)->ops[0]);
            break;
        }
    }
    return ncclSuccess;
}

/* The unit on the FIFO kernels: built, checked against what each device holds, launched. */
static ncclResult_t fifo_unit(br_clique_t *cl, const char *in_unit, int rank)
{
    br_cuda_build_t per_dev[BR_CUDA_MAX_DEVS];
    br_cuda_desc_t *desc = NULL;
    size_t need = 0, at = 0;

    memset(per_dev, 0, sizeof(per_dev));
    ncclResult_t res = unit_build(cl, in_unit, rank, per_dev, &need);
    if (res == ncclSuccess) {
        res = br_cuda_desc_get(cl, need, rank, &desc);
    }
    for (int d = 0; d < cl->ndevs && res == ncclSuccess; d++) {
        res = unit_launch_dev(cl, in_unit, rank, d, &per_dev[d], desc, &at);
    }
    if (res == ncclSuccess) {
        res = br_cuda_unit_done_events(cl, in_unit, rank, desc);
    }
    br_cuda_build_free(per_dev);
    return res;
}

/* Launch the unit's kernels (the direct kernel where it fits, else the FIFO kernels) and
 * record its ranks' done events. A failure fails the clique. Caller holds cl->mu. */
static ncclResult_t launch_unit(br_clique_t *cl, const char *in_unit, int rank)
{
    ncclResult_t res;
    if (br_cuda_direct_fits(cl, in_unit)) {
        res = br_cuda_direct_unit(cl, in_unit, rank);
    } else if (br_cuda_unit_folds(cl, in_unit)) {
        /* The FIFO kernels' sums follow the ring; only the direct kernel folds in rank
         * order as the host does. */
        char m[400];
        snprintf(m, sizeof(m),
                 "rank %d (host %s): a deterministic or fp32-accumulating reduction "
                 "(BRAID_DETERMINISTIC, BRAID_ACCUMULATE, BRAID_OPT_*) on device buffers of "
                 "ranks that are threads of one process needs the direct kernel: every rank "
                 "on one GPU (this clique spans %d), BRAID_CUDA_DIRECT=1, at most %d ranks, "
                 "no device PreMulSum scalar, and the same call and options on every rank",
                 rank, br_host_name(), cl->ndevs, BR_DEV_DIRECT_MAX);
        BR_WARN(NCCL_COLL, "%s", m);
        br_cuda_clique_fail(cl, ncclInvalidUsage, m);
        return ncclInvalidUsage;
    } else {
        res = fifo_unit(cl, in_unit, rank);
    }
    if (res != ncclSuccess && !cl->failed) {
        char m2[256];
        snprintf(m2, sizeof(m2),
                 "rank %d (host %s): a device launch failed (see the warning above)", rank,
                 br_host_name());
        br_cuda_clique_fail(cl, res, m2);
    }
    return res;
}

/* Launch every unit that is complete, in rank order of heads. Caller holds cl->mu. */
ncclResult_t br_cuda_launch_ready(br_clique_t *cl, int rank)
{
    char *in_unit = NULL;
    int *stack = NULL, progress = 1;
    ncclResult_t res = ncclSuccess;

    BR_CHECK(br_calloc(&in_unit, (size_t)cl->nranks, "CUDA unit"));
    if (br_calloc(&stack, (size_t)cl->nranks, "CUDA unit") != ncclSuccess) {
        free(in_unit);
        return ncclSystemError;
    }
    while (progress && !cl->failed && res == ncclSuccess) {
        progress = 0;
        int found = br_cuda_unit_collective(cl, in_unit);
        for (int a = 0; a < cl->nranks && !found; a++) {
            const br_cuda_dep_t *d = br_cuda_head(cl, a);
            found = d != NULL && !d->has_coll && br_cuda_unit_p2p(cl, a, in_unit, stack);
        }
        if (!found) {
            break;
        }
        res = launch_unit(cl, in_unit, rank);
        for (int r = 0; r < cl->nranks; r++) {
            if (in_unit[r]) {
                cl->rank[r].q[cl->rank[r].launched % BR_CUDA_QUEUE].nops = 0;
                __atomic_store_n(&cl->rank[r].launched, cl->rank[r].launched + 1,
                                 __ATOMIC_RELEASE);
            }
        }
        progress = 1;
        pthread_cond_broadcast(&cl->cv);
    }
    free(in_unit);
    free(stack);
    return res;
}
