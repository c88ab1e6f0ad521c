/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Device calls captured into a CUDA graph. The graph's launches happen whenever its owner
 * replays it, so the unit is launched into the capture itself, at once: every rank's calls
 * must be here (one group, one thread), on one GPU, with nothing of theirs still waiting.
 * The kernel goes on one member's stream after it joins the others' (their arrival events,
 * in the capture), and the others join it back (an event recorded after it); the launch
 * has FIFOs and descriptors of its own, kept until the clique ends. No done word is
 * written: nothing outside the graph waits for it.
 */
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "exec_cuda_int.h"
#include "util.h"

int br_exec_cuda_capturing(void *stream)
{
    const br_cuda_t *cu = br_cuda(NULL);
    int status = BR_CU_CAPTURE_STATUS_NONE;
    return cu != NULL && cu->StreamIsCapturing((br_cu_stream_t)stream, &status) == BR_CU_SUCCESS &&
           status != BR_CU_CAPTURE_STATUS_NONE;
}

/* Refuse a capture, with the reason; the clique stays usable. Caller holds cl->mu. */
static ncclResult_t capture_refuse(br_exec_comm_t *ec, const char *why)
{
    BR_WARN(NCCL_COLL, "rank %d (host %s): device calls captured into a CUDA graph: %s", ec->rank,
            br_host_name(), why);
    return ncclInvalidUsage;
}

/* May these calls be captured: a usable clique on one GPU, every member's stream capturing,
 * and nothing of theirs still waiting for a launch? Caller holds cl->mu. */
static ncclResult_t capture_admit(br_clique_t *cl, br_exec_comm_t *const *ecs,
                                  const br_op_t *const *ops, int n)
{
    if (cl->failed) {
        br_exec_fail(ecs[0], ncclInvalidUsage, "%s", cl->fail_msg);
        return ecs[0]->error;
    }
    if (cl->ndevs > 1) {
        return capture_refuse(ecs[0], "the communicator spans several GPUs (capture is supported "
                                      "for ranks on one GPU)");
    }
    for (int i = 0; i < n; i++) {
        const br_cuda_rank_t *q = &cl->rank[ecs[i]->rank];
        if (ecs[i]->cuda != cl) {
            return capture_refuse(ecs[i], "one group holds device calls of several communicators");
        }
        if (!br_exec_cuda_capturing(ops[i][0].stream)) {
            return capture_refuse(ecs[i], "some ranks' streams of the group are captured and "
                                          "others are not");
        }
        if (q->launched != q->next) {
            return capture_refuse(ecs[i], "an earlier device call of this rank has not started "
                                          "yet (its peers have not called)");
        }
    }
    return ncclSuccess;
}

/* The calls as the ranks' next deposits, each reached on its stream (in the capture); they
 * must form one unit by themselves (in_unit says whose). On failure the caller takes back
 * the deposits made. Caller holds cl->mu. */
static ncclResult_t capture_unit(br_clique_t *cl, br_exec_comm_t *const *ecs,
                                 const br_op_t *const *ops, const int *nops, int n, char *in_unit,
                                 int *stack)
{
    for (int i = 0; i < n; i++) {
        BR_CHECK(br_cuda_dep_add(cl, ecs[i]->rank, ops[i], nops[i]));
    }
    int whole = br_cuda_unit_collective(cl, in_unit);
    if (!whole && !br_cuda_head(cl, ecs[0]->rank)->has_coll) {
        whole = br_cuda_unit_p2p(cl, ecs[0]->rank, in_unit, stack);
        for (int r = 0; r < cl->nranks && whole; r++) {
            int here = 0;
            for (int i = 0; i < n; i++) {
                here |= ecs[i]->rank == r;
            }
            whole = in_unit[r] == here;
        }
    }
    if (!whole) {
        return capture_refuse(ecs[0], "capturing device calls needs every rank's calls in the "
                                      "same group (one thread driving every rank, as with "
                                      "ncclCommInitAll), and they must match");
    }
    return ncclSuccess;
}

/* The descriptors of build b in host memory the device maps, kept with the launch; L points
 * the kernel at them. */
static ncclResult_t capture_descriptors(br_clique_t *cl, const br_cuda_build_t *b, int rank,
                                        br_cuda_kept_t *kept, br_dev_launch_t *L)
{
    const br_cuda_t *cu = br_cuda(NULL);
    br_cu_ptr_t desc_d;

    BR_CHECK(br_cuda_check(cu->MemHostAlloc(&kept->desc, br_cuda_desc_bytes(b),
                                            BR_CU_MEMHOSTALLOC_PORTABLE |
                                                BR_CU_MEMHOSTALLOC_DEVICEMAP),
                           "cuMemHostAlloc (captured descriptors)", rank));
    BR_CHECK(br_cuda_check(cu->MemHostGetDevicePointer(&desc_d, kept->desc, 0),
                           "cuMemHostGetDevicePointer", rank));
    (void)br_cuda_desc_fill(cl, 0, kept->desc, desc_d, 0, b, L); /* one device */
    return ncclSuccess;
}

/* Into the capture: the last member's stream joins the others, runs the kernel of nblocks
 * blocks, and they join it back. */
static ncclResult_t capture_enqueue(br_clique_t *cl, br_exec_comm_t *const *ecs,
                                    const br_op_t *const *ops, int n, br_cuda_kept_t *kept,
                                    br_dev_launch_t *L, int nblocks)
{
    const br_cuda_t *cu = br_cuda(NULL);
    br_cu_stream_t s = (br_cu_stream_t)ops[n - 1][0].stream;

    for (int i = 0; i < n - 1; i++) {
        const br_cuda_rank_t *q = &cl->rank[ecs[i]->rank];
        if ((br_cu_stream_t)ops[i][0].stream != s) {
            BR_CHECK(br_cuda_check(
                cu->StreamWaitEvent(s, q->arrive[q->launched % BR_CUDA_QUEUE], 0),
                "cuStreamWaitEvent", ecs[i]->rank));
        }
    }
    if (nblocks > 0) {
        void *params[1] = {L};
        /* Cooperative, as eager launches: its blocks wait for each other (exec_cuda.c). */
        BR_CHECK(br_cuda_check(cu->LaunchCooperativeKernel(cl->devs[0].fn, (unsigned)nblocks, 1,
                                                           1, BR_DEV_NTHREADS, 1, 1, 0, s, params),
                               "cuLaunchCooperativeKernel", ecs[0]->rank));
    }
    BR_CHECK(br_cuda_check(cu->EventRecord(kept->finished, s), "cuEventRecord", ecs[0]->rank));
    for (int i = 0; i < n - 1; i++) {
        if ((br_cu_stream_t)ops[i][0].stream != s) {
            BR_CHECK(br_cuda_check(
                cu->StreamWaitEvent((br_cu_stream_t)ops[i][0].stream, kept->finished, 0),
                "cuStreamWaitEvent", ecs[i]->rank));
        }
    }
    return ncclSuccess;
}

/* The unit's one launch with FIFOs and descriptors of its own (kept), put into the
 * capture. *nblocks_p: its blocks. Caller holds cl->mu. */
static ncclResult_t capture_launch(br_clique_t *cl, br_exec_comm_t *const *ecs,
                                   const br_op_t *const *ops, int n, const char *in_unit,
                                   br_cuda_kept_t *kept, int *nblocks_p)
{
    const br_cuda_t *cu = br_cuda(NULL);
    br_cuda_build_t per_dev[BR_CUDA_MAX_DEVS];
    const br_cuda_build_t *b = &per_dev[0];
    br_dev_launch_t L;
    char msg[640] = "";
    int rank = ecs[0]->rank;
    ncclResult_t res;

    memset(per_dev, 0, sizeof(per_dev));
    BR_CHECK(br_cuda_fifos_alloc(cl, &kept->fifos, rank));
    res = br_cuda_build(cl, in_unit, kept->fifos.conn_d, per_dev, msg, sizeof(msg));
    if (res != ncclSuccess) {
        res = capture_refuse(ecs[0], msg[0] ? msg : "out of memory");
    } else if (b->nwaiting > cl->devs[0].capacity) {
        res = capture_refuse(ecs[0], "the group needs more blocks resident at once than the GPU "
                                     "holds: split the group");
    } else {
        res = capture_descriptors(cl, b, rank, kept, &L);
    }
    if (res == ncclSuccess) {
        res = br_cuda_check(cu->EventCreate(&kept->finished, BR_CU_EVENT_DISABLE_TIMING),
                            "cuEventCreate", rank);
    }
    if (res == ncclSuccess) {
        res = capture_enqueue(cl, ecs, ops, n, kept, &L, b->nblocks);
    }
    *nblocks_p = b->nblocks;
    br_cuda_build_free(per_dev);
    return res;
}

/* Deposits made for the capture leave the queues again (nothing was launched). */
static void deposits_undo(br_clique_t *cl, br_exec_comm_t *const *ecs, int n)
{
    for (int i = 0; i < n; i++) {
        br_cuda_rank_t *q = &cl->rank[ecs[i]->rank];
        if (q->next > q->launched) {
            q->q[(q->next - 1) % BR_CUDA_QUEUE].nops = 0;
            q->next--;
        }
    }
}

/* The deposits are in the capture: launched, as far as the queues go; the clique keeps
 * what the launch uses. */
static void deposits_commit(br_clique_t *cl, br_exec_comm_t *const *ecs, int n,
                            br_cuda_kept_t *kept)
{
    for (int i = 0; i < n; i++) {
        br_cuda_rank_t *q = &cl->rank[ecs[i]->rank];
        q->q[q->launched % BR_CUDA_QUEUE].nops = 0;
        __atomic_store_n(&q->launched, q->launched + 1, __ATOMIC_RELEASE); /* read unlocked */
    }
    kept->next = cl->kept;
    cl->kept = kept;
}

ncclResult_t br_exec_cuda_capture(br_exec_comm_t *const *ecs, const br_op_t *const *ops,
                                  const int *nops, int n)
{
    br_clique_t *cl = ecs[0]->cuda;
    const br_cuda_t *cu = br_cuda(NULL);
    br_cuda_kept_t *kept = NULL;
    br_cu_context_t saved = NULL;
    char *in_unit = NULL;
    int *stack = NULL, nblocks = 0;
    ncclResult_t res = ncclSuccess;

    for (int i = 0; i < n; i++) {
        if (ecs[i]->stage != NULL) {
            BR_WARN(NCCL_COLL,
                    "rank %d (host %s): device calls captured into a CUDA graph: the "
                    "communicator's ranks are in several processes, and this version of Braid "
                    "captures only calls of ranks that are threads of one process",
                    ecs[i]->rank, br_host_name());
            return ncclInvalidUsage;
        }
    }
    cu->CtxGetCurrent(&saved);
    int mode = br_cuda_capture_relax(cu); /* the launch's own FIFOs and descriptors */
    pthread_mutex_lock(&cl->mu);
    br_cuda_ensure_setup(cl, ecs[0]->rank);
    res = capture_admit(cl, ecs, ops, n);
    if (res == ncclSuccess) {
        res = br_calloc(&in_unit, (size_t)cl->nranks, "CUDA capture");
    }
    if (res == ncclSuccess) {
        res = br_calloc(&stack, (size_t)cl->nranks, "CUDA capture");
    }
    if (res == ncclSuccess) {
        res = capture_unit(cl, ecs, ops, nops, n, in_unit, stack);
        if (res == ncclSuccess) {
            res = br_calloc(&kept, 1, "CUDA capture");
        }
        if (res == ncclSuccess) {
            res = capture_launch(cl, ecs, ops, n, in_unit, kept, &nblocks);
        }
        if (res == ncclSuccess) {
            deposits_commit(cl, ecs, n, kept);
            kept = NULL;
            BR_INFO(NCCL_COLL,
                    "rank %d: %d rank%s' device calls captured into a CUDA graph (%d blocks)",
                    ecs[0]->rank, n, n == 1 ? "" : "s", nblocks);
        } else {
            deposits_undo(cl, ecs, n);
        }
    }
    br_cuda_kept_free(cl, kept); /* one that did not make it into the capture */
    pthread_mutex_unlock(&cl->mu);
    br_cuda_capture_restore(cu, mode);
    cu->CtxSetCurrent(saved);
    free(in_unit);
    free(stack);
    return res;
}
