/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The direct path of device calls across processes of one host: GPU to GPU, through a
 * staging buffer per rank in device memory that the other ranks map with CUDA IPC, with
 * every step ordered by stream memory operations. No kernel waits for another process's:
 * kernels and copies only ever read what is complete, because the stream got them there
 * after a barrier; a barrier is each rank's stream writing its count into every peer's
 * inbox (cuStreamWriteValue64) and then waiting, in the stream, until its own inbox holds
 * every peer's (cuStreamWaitValue64). Inboxes are host shared memory registered with the
 * driver, so that the host can read them, and release its own stream, without a stream
 * operation. Processes on one
 * GPU are time-sliced, never co-resident; the waits hold no SM, so they cannot deadlock.
 *
 * A collective moves in chunks of at most BRAID_CUDA_IPC_BYTES. AllReduce, per chunk:
 *   copy the chunk of the input into my staging              ; barrier
 *   reduce my 1/n part over every rank's staging (a kernel), into my staging and output
 *                                                             ; barrier
 *   copy every other rank's part from its staging into my output ; barrier
 * so each part is reduced once, by one rank, and every rank ends with the same bits.
 * Broadcast, Reduce, AllGather and ReduceScatter are the same steps, fewer of them. Sends
 * and receives are staged through host memory (exec_cuda_stage.c).
 *
 * Who may: ranks on one host, one per process (a process with several ranks uses the
 * clique's launches for them only when they are all its ranks), the driver's IPC and
 * 64-bit stream memory operations, BRAID_CUDA_IPC. The ranks agree when the communicator
 * is made (two bootstrap AllGathers): each says whether it can, with its buffer's IPC
 * handle, then whether it could map everyone's. Either every rank takes the direct path
 * from its first device call on, or none does, with INFO saying why. The set-up loads the
 * reduce kernel, allocates, maps and frees: calls that wait for every stream of the
 * context, so it runs before any stream can wait for this rank (at the first deposit, a
 * stream already waiting for the stager hung the stager that set up: docs/cuda.md).
 *
 * Failures: the stager watches each deposit's end (an event). A peer process that died,
 * or a wait longer than BRAID_CUDA_WAIT_TIMEOUT, fails the communicator naming the rank,
 * and this rank's inbox is filled so that its stream passes every barrier and drains.
 */
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "device.h"
#include "exec_cuda_stage_int.h"
#include "util.h"

#define IPC_RELEASED (1ull << 62) /* an inbox value past every barrier */

typedef struct {
    br_cu_ipc_handle_t handle;
    int32_t ok; /* could allocate, export and load the kernel */
    int32_t pid;
    char inbox[48];  /* the name of its inbox's shm object */
    char why[120]; /* why not, when not ok */
} ipc_hello_t;

static inline br_cu_ptr_t data_of(const ipc_state_t *s, int q)
{
    return s->peer[q];
}

/* Map (and, create: make) the inbox shm object `name` for rank q, and register it. */
static const char *inbox_map(ipc_state_t *s, int q, const char *name, int create)
{
    const br_cuda_t *cu = br_cuda(NULL);
    int fd = create ? br_shm_create_own(name) : shm_open(name, O_RDWR, 0600);
    if (fd < 0) {
        return create ? "shm_open of the inbox" : "shm_open of a peer's inbox";
    }
    if (create && ftruncate(fd, BR_IPC_INBOX) != 0) {
        close(fd);
        return "ftruncate of the inbox";
    }
    void *m = mmap(NULL, BR_IPC_INBOX, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        return "mmap of an inbox";
    }
    s->inbox[q] = m;
    if (cu->MemHostRegister(m, BR_IPC_INBOX, BR_CU_MEMHOSTREGISTER_PORTABLE |
                                                 BR_CU_MEMHOSTREGISTER_DEVICEMAP) != BR_CU_SUCCESS ||
        cu->MemHostGetDevicePointer(&s->inbox_d[q], m, 0) != BR_CU_SUCCESS) {
        return "cuMemHostRegister of an inbox";
    }
    return NULL;
}

static void inbox_unmap(ipc_state_t *s, int q)
{
    if (s->inbox != NULL && s->inbox[q] != NULL) {
        if (s->inbox_d[q] != 0) {
            br_cuda(NULL)->MemHostUnregister(s->inbox[q]);
        }
        munmap(s->inbox[q], BR_IPC_INBOX);
        s->inbox[q] = NULL;
        s->inbox_d[q] = 0;
    }
}

void br_ipc_decide(br_cuda_stage_t *st)
{
    const br_exec_comm_t *ec = st->ec;
    const br_peer_info_t *pi = ec->tc->peers;
    ipc_state_t *s = &st->ipc;
    const char *why = NULL;

    for (int q = 0; q < ec->nranks && why == NULL; q++) {
        if (pi[q].machine_hash != pi[ec->rank].machine_hash) {
            why = "ranks are on several hosts";
        } else if (!br_peer_shares_shm(&pi[q], &pi[ec->rank]) ||
                   !br_peer_sees_pid(&pi[q], &pi[ec->rank])) {
            /* The inboxes are /dev/shm objects, and a peer's liveness is asked by pid. */
            why = "ranks are in separate containers (another /dev/shm or pid namespace)";
        } else if (pi[q].gpu_busid[0] == '\0') {
            why = "a rank's process has no CUDA device";
        }
        for (int p = 0; p < q && why == NULL; p++) {
            if (pi[p].pid_hash == pi[q].pid_hash) {
                why = "a process holds several ranks";
            }
        }
    }
    if (why == NULL && ec->nranks > BR_DEV_REDUCE_MAX_SRC) {
        why = "more ranks than the direct path's reduce kernel reads (16)";
    }
    if (why != NULL) {
        s->state = -1;
        BR_INFO(NCCL_INIT | NCCL_COLL,
                "rank %d: device collectives staged through pinned host memory: no direct "
                "path (%s)",
                ec->rank, why);
        return;
    }
    s->state = 0;
}

/* This rank's part of the set-up: kernel, staging, its IPC handle. */
static void hello_make(br_cuda_stage_t *st, ipc_hello_t *h)
{
    const br_cuda_t *cu = br_cuda(NULL);
    ipc_state_t *s = &st->ipc;
    br_cu_device_t dev;
    br_cu_result_t e = BR_CU_SUCCESS;
    const char *what = NULL;

    memset(h, 0, sizeof(*h));
    h->pid = (int32_t)getpid();
    if (BR_PARAM_INT(CUDA_IPC) == 0) {
        snprintf(h->why, sizeof(h->why), "BRAID_CUDA_IPC=0");
        return;
    }
    if (st->host_sync) {
        /* Its barriers are streams waiting in the GPU for other processes' streams. */
        snprintf(h->why, sizeof(h->why),
                 "device calls complete on the host (BRAID_CUDA_SHARED_GPU_SYNC)");
        return;
    }
    if (cu->IpcGetMemHandle == NULL || cu->IpcOpenMemHandle == NULL ||
        cu->IpcCloseMemHandle == NULL || cu->StreamWaitValue64 == NULL ||
        cu->StreamWriteValue64 == NULL || cu->MemHostRegister == NULL ||
        cu->MemHostUnregister == NULL) {
        snprintf(h->why, sizeof(h->why),
                 "the CUDA driver lacks IPC, 64-bit stream memory operations or host memory "
                 "registration");
        return;
    }
    /* The barriers are 64-bit stream memory operations, which a device may lack (cuda.h:
     * "Support for this can be queried with ... CAN_USE_64_BIT_STREAM_MEM_OPS"): without
     * them the first call would fail, so the ranks stage instead. */
    int memops64 = 0;
    if ((e = cu->DeviceGet(&dev, st->device)) != BR_CU_SUCCESS ||
        (cu->DeviceGetAttribute(&memops64, BR_CU_DEV_ATTR_MEMOPS64, dev) != BR_CU_SUCCESS &&
         cu->DeviceGetAttribute(&memops64, BR_CU_DEV_ATTR_MEMOPS64_V1, dev) != BR_CU_SUCCESS)) {
        memops64 = 0;
    }
    if (!memops64) {
        snprintf(h->why, sizeof(h->why),
                 "device %d lacks 64-bit stream memory operations "
                 "(CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS = 0)",
                 st->device);
        return;
    }
    br_shm_name(h->inbox, sizeof(h->inbox), "ipc-");
    if ((what = inbox_map(s, st->ec->rank, h->inbox, 1)) != NULL) {
        snprintf(h->why, sizeof(h->why), "%s failed", what);
        return;
    }
    size_t want = (size_t)BR_PARAM_INT(CUDA_IPC_BYTES);
    s->data_bytes = want < 4096 ? 4096 : want / 256 * 256;
    if ((e = cu->ModuleLoadData(&s->mod, br_dev_fatbin)) != BR_CU_SUCCESS) {
        what = "cuModuleLoadData";
    } else if ((e = cu->ModuleGetFunction(&s->reduce_fn, s->mod, BR_DEV_REDUCE_KERNEL_NAME)) !=
               BR_CU_SUCCESS) {
        what = "cuModuleGetFunction";
    } else if ((e = cu->DeviceGetAttribute(&s->sms, BR_CU_DEV_ATTR_SM_COUNT, dev)) !=
               BR_CU_SUCCESS) {
        what = "cuDeviceGetAttribute";
    } else if ((e = cu->MemAlloc(&s->mine, s->data_bytes)) != BR_CU_SUCCESS) {
        what = "cuMemAlloc of the staging buffer";
    } else if ((e = cu->IpcGetMemHandle(&h->handle, s->mine)) != BR_CU_SUCCESS) {
        what = "cuIpcGetMemHandle";
    }
    if (what != NULL) {
        snprintf(h->why, sizeof(h->why), "%s failed: %s", what, br_cuda_error_string(e));
        return;
    }
    h->ok = 1;
}

/* One bootstrap AllGather of `bytes` per rank: all[rank] is this rank's on entry. */
static ncclResult_t exchange(br_cuda_stage_t *st, void *all, size_t bytes)
{
    ncclResult_t res = br_bootstrap_allgather(st->ec->tc->boot, all, bytes);
    if (res != ncclSuccess) {
        BR_WARN(NCCL_INIT,
                "rank %d (host %s): setting up device calls across processes failed (an "
                "exchange among the ranks while the communicator was made)",
                st->ec->rank, br_host_name());
    }
    return res;
}

ncclResult_t br_ipc_setup(br_cuda_stage_t *st)
{
    const br_cuda_t *cu = br_cuda(NULL);
    br_exec_comm_t *ec = st->ec;
    ipc_state_t *s = &st->ipc;
    int n = ec->nranks, r = ec->rank, opened = 0, state = -1;
    ipc_hello_t mine, *all = NULL;
    int32_t *oks = NULL;
    char why[200] = "";
    ncclResult_t res = ncclSuccess;

    if (br_calloc(&all, (size_t)n, "CUDA IPC set-up") != ncclSuccess ||
        br_calloc(&oks, (size_t)n, "CUDA IPC set-up") != ncclSuccess ||
        br_calloc(&s->peer, (size_t)n, "CUDA IPC set-up") != ncclSuccess ||
        br_calloc(&s->inbox, (size_t)n, "CUDA IPC set-up") != ncclSuccess ||
        br_calloc(&s->inbox_d, (size_t)n, "CUDA IPC set-up") != ncclSuccess ||
        br_calloc(&s->pid, (size_t)n, "CUDA IPC set-up") != ncclSuccess) {
        snprintf(why, sizeof(why), "out of memory");
        res = ncclSystemError;
        goto out;
    }
    hello_make(st, &mine);
    all[r] = mine;
    if ((res = exchange(st, all, sizeof(mine))) != ncclSuccess) {
        snprintf(why, sizeof(why), "the set-up exchange failed");
        goto out;
    }
    int32_t ok = 1;
    for (int q = 0; q < n; q++) {
        s->pid[q] = all[q].pid;
        if (!all[q].ok && ok) {
            snprintf(why, sizeof(why), "rank %d: %s", q, all[q].why);
            ok = 0;
        }
    }
    for (int q = 0; q < n && ok; q++) {
        if (q == r) {
            s->peer[q] = s->mine;
            continue;
        }
        const char *fail = inbox_map(s, q, all[q].inbox, 0);
        if (fail != NULL) {
            snprintf(mine.why, sizeof(mine.why), "rank %d cannot map rank %d's inbox: %s failed",
                     r, q, fail);
            ok = 0;
            break;
        }
        br_cu_result_t e =
            cu->IpcOpenMemHandle(&s->peer[q], all[q].handle, BR_CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
        if (e != BR_CU_SUCCESS) {
            snprintf(mine.why, sizeof(mine.why), "rank %d cannot map rank %d's buffer: %s", r, q,
                     br_cuda_error_string(e));
            ok = 0;
            break;
        }
        opened++;
    }
    oks[r] = ok;
    res = exchange(st, oks, sizeof(ok));
    if (mine.inbox[0] != '\0') {
        shm_unlink(mine.inbox); /* every peer that could map it has */
    }
    if (res != ncclSuccess) {
        snprintf(why, sizeof(why), "the set-up exchange failed");
        goto out;
    }
    state = 1;
    for (int q = 0; q < n && state == 1; q++) {
        if (!oks[q]) {
            state = -1;
            if (why[0] == '\0') {
                snprintf(why, sizeof(why), "%s",
                         q == r ? mine.why : "a rank could not map its peers' buffers");
            }
        }
    }
out:
    if (state != 1 && s->peer != NULL) {
        for (int q = 0; q < n && opened > 0; q++) {
            if (q != r && s->peer[q] != 0) {
                cu->IpcCloseMemHandle(s->peer[q]);
                opened--;
            }
        }
        memset(s->peer, 0, (size_t)n * sizeof(*s->peer));
    }
    if (state != 1 && s->mine != 0) {
        cu->MemFree(s->mine); /* staged from now on: the buffer is not needed */
        s->mine = 0;
    }
    for (int q = 0; q < n && state != 1 && s->inbox != NULL; q++) {
        inbox_unmap(s, q);
    }
    if (state == 1) {
        BR_INFO(NCCL_INIT | NCCL_COLL,
                "rank %d: device collectives GPU to GPU between the %d processes through CUDA "
                "IPC staging buffers of %zu MiB (stream memory operations order them)",
                r, n, s->data_bytes >> 20);
    } else {
        BR_INFO(NCCL_INIT | NCCL_COLL,
                "rank %d: device collectives staged through pinned host memory: no direct "
                "path (%s)",
                r, why);
    }
    s->state = state;
    free(all);
    free(oks);
    return res;
}

int br_ipc_handles(const br_op_t *op)
{
    /* Owner-fold reductions (deterministic, fp32 sums) are staged: the host path folds. */
    return br_func_is_collective(op->func) && !br_op_wants_fold(op);
}

/* ---- the steps ---- */

static ncclResult_t ck(br_cu_result_t e, const char *what, int rank)
{
    return br_cuda_check(e, what, rank);
}

static ncclResult_t barrier(br_cuda_stage_t *st, br_cu_stream_t stream)
{
    const br_cuda_t *cu = br_cuda(NULL);
    ipc_state_t *s = &st->ipc;
    int n = st->ec->nranks, r = st->ec->rank;
    uint64_t g = ++s->gen;
    for (int q = 0; q < n; q++) {
        if (q != r) {
            BR_CHECK(ck(cu->StreamWriteValue64(stream, s->inbox_d[q] + (size_t)r * 8, g, 0),
                        "cuStreamWriteValue64", r));
        }
    }
    for (int q = 0; q < n; q++) {
        if (q != r) {
            BR_CHECK(ck(cu->StreamWaitValue64(stream, s->inbox_d[r] + (size_t)q * 8, g,
                                              BR_CU_STREAM_WAIT_VALUE_GEQ),
                        "cuStreamWaitValue64", r));
        }
    }
    return ncclSuccess;
}

static ncclResult_t copy(br_cuda_stage_t *st, br_cu_ptr_t dst, br_cu_ptr_t src, size_t bytes,
                         br_cu_stream_t stream)
{
    if (bytes == 0 || dst == src) {
        return ncclSuccess;
    }
    return ck(br_cuda(NULL)->MemcpyAsync(dst, src, bytes, stream), "cuMemcpyAsync", st->ec->rank);
}

/* dst0 (and dst1) = the op's reduction over src + q * stride of every rank q's staging. */
static ncclResult_t reduce(br_cuda_stage_t *st, const br_op_t *op, size_t src_off, br_cu_ptr_t dst0,
                           br_cu_ptr_t dst1, size_t bytes, br_cu_stream_t stream)
{
    const ipc_state_t *s = &st->ipc;
    br_dev_reduce_t R;
    if (bytes == 0) {
        return ncclSuccess;
    }
    memset(&R, 0, sizeof(R));
    R.nsrc = (uint32_t)st->ec->nranks;
    for (int q = 0; q < st->ec->nranks; q++) {
        R.src[q] = (const char *)(uintptr_t)(data_of(s, q) + src_off);
    }
    R.dst[0] = (char *)(uintptr_t)dst0;
    R.dst[1] = (char *)(uintptr_t)dst1;
    R.bytes = bytes;
    R.type = (uint32_t)op->type;
    R.red = (uint32_t)op->redop.kind;
    R.scalar_f = op->redop.scalar_f;
    R.scalar_i = op->redop.scalar_i;
    R.scalar_dev = op->redop.scalar_dev;
    R.divisor = op->redop.divisor;
    uint64_t pieces = (bytes + 15) / 16;
    uint64_t blocks = (pieces + BR_DEV_NTHREADS - 1) / BR_DEV_NTHREADS;
    uint64_t most = (uint64_t)(s->sms > 0 ? s->sms : 1) * 4;
    blocks = blocks < 1 ? 1 : blocks > most ? most : blocks;
    void *params[] = {&R};
    return ck(br_cuda(NULL)->LaunchKernel(s->reduce_fn, (unsigned)blocks, 1, 1, BR_DEV_NTHREADS, 1,
                                          1, 0, stream, params, NULL),
              "cuLaunchKernel", st->ec->rank);
}

/* The chunk of a call of `bytes` that starts at off: at most `room` bytes, whole elements. */
static size_t chunk_at(size_t room, size_t es, size_t bytes, size_t off)
{
    size_t c = room / es * es;
    c = c > 0 ? c : es;
    return c < bytes - off ? c : bytes - off;
}

/* Where part q of n of a chunk of `elems` elements starts, in bytes (part n: its end). */
static size_t part_at(size_t elems, int q, int n, size_t es)
{
    return elems * (size_t)q / (size_t)n * es;
}

ncclResult_t br_ipc_enqueue(br_cuda_stage_t *st, const br_op_t *op)
{
    const ipc_state_t *s = &st->ipc;
    br_cu_stream_t S = (br_cu_stream_t)op->stream;
    int n = st->ec->nranks, r = st->ec->rank;
    size_t es = br_type_size(op->type), bytes = op->count * es;
    br_cu_ptr_t in = (br_cu_ptr_t)(uintptr_t)op->sendbuff;
    br_cu_ptr_t out = (br_cu_ptr_t)(uintptr_t)op->recvbuff;
    br_cu_ptr_t me = data_of(s, r);

    switch (op->func) {
    case BR_FUNC_ALLREDUCE:
        for (size_t off = 0, C; off < bytes; off += C) {
            C = chunk_at(s->data_bytes, es, bytes, off);
            size_t elems = C / es;
            BR_CHECK(copy(st, me, in + off, C, S));
            BR_CHECK(barrier(st, S));
            size_t lo = part_at(elems, r, n, es), hi = part_at(elems, r + 1, n, es);
            BR_CHECK(reduce(st, op, lo, me + lo, out + off + lo, hi - lo, S));
            BR_CHECK(barrier(st, S));
            for (int q = 0; q < n; q++) {
                size_t ql = part_at(elems, q, n, es), qh = part_at(elems, q + 1, n, es);
                if (q != r) {
                    BR_CHECK(copy(st, out + off + ql, data_of(s, q) + ql, qh - ql, S));
                }
            }
            BR_CHECK(barrier(st, S));
        }
        return ncclSuccess;
    case BR_FUNC_BROADCAST:
        for (size_t off = 0, C; off < bytes; off += C) {
            C = chunk_at(s->data_bytes, es, bytes, off);
            if (r == op->root) {
                BR_CHECK(copy(st, me, in + off, C, S));
            }
            BR_CHECK(barrier(st, S));
            BR_CHECK(copy(st, out + off, r == op->root ? in + off : data_of(s, op->root), C, S));
            BR_CHECK(barrier(st, S));
        }
        return ncclSuccess;
    case BR_FUNC_REDUCE:
        for (size_t off = 0, C; off < bytes; off += C) {
            C = chunk_at(s->data_bytes, es, bytes, off);
            BR_CHECK(copy(st, me, in + off, C, S));
            BR_CHECK(barrier(st, S));
            if (r == op->root) {
                BR_CHECK(reduce(st, op, 0, out + off, 0, C, S));
            }
            BR_CHECK(barrier(st, S));
        }
        return ncclSuccess;
    case BR_FUNC_ALLGATHER:
        for (size_t off = 0, C; off < bytes; off += C) {
            C = chunk_at(s->data_bytes, es, bytes, off);
            BR_CHECK(copy(st, me, in + off, C, S));
            BR_CHECK(barrier(st, S));
            for (int q = 0; q < n; q++) {
                br_cu_ptr_t dst = out + (size_t)q * bytes + off;
                BR_CHECK(copy(st, dst, q == r ? in + off : data_of(s, q), C, S));
            }
            BR_CHECK(barrier(st, S));
        }
        return ncclSuccess;
    case BR_FUNC_REDUCESCATTER:
        for (size_t off = 0, C; off < bytes; off += C) {
            C = chunk_at(s->data_bytes / (size_t)n, es, bytes, off);
            for (int q = 0; q < n; q++) {
                BR_CHECK(copy(st, me + (size_t)q * C, in + (size_t)q * bytes + off, C, S));
            }
            BR_CHECK(barrier(st, S));
            /* Rank q's segment r is at q's staging + r * C. */
            BR_CHECK(reduce(st, op, (size_t)r * C, out + off, 0, C, S));
            BR_CHECK(barrier(st, S));
        }
        return ncclSuccess;
    default:
        BR_WARN(NCCL_COLL, "rank %d: %s reached the direct path", r, br_func_name(op->func));
        return ncclInternalError;
    }
}

/* ---- the watch ---- */

ncclResult_t br_ipc_flight_add(br_cuda_stage_t *st, br_cu_stream_t stream, const br_op_t *first)
{
    const br_cuda_t *cu = br_cuda(NULL);
    ipc_state_t *s = &st->ipc;
    while (!st->failed && s->fl_next - s->fl_done >= BR_IPC_INFLIGHT) {
        /* Full: wait for the oldest here (the stager looks only every 10 ms). */
        br_cu_event_t oldest = s->flight[s->fl_done % BR_IPC_INFLIGHT].end;
        pthread_mutex_unlock(&st->mu);
        cu->EventSynchronize(oldest);
        pthread_mutex_lock(&st->mu);
        while (s->fl_done < s->fl_next &&
               cu->EventQuery(s->flight[s->fl_done % BR_IPC_INFLIGHT].end) == BR_CU_SUCCESS) {
            s->fl_done++;
        }
    }
    ipc_flight_t *f = &s->flight[s->fl_next % BR_IPC_INFLIGHT];
    if (f->end == NULL) {
        BR_CHECK(ck(cu->EventCreate(&f->end, BR_CU_EVENT_DISABLE_TIMING), "cuEventCreate",
                    st->ec->rank));
    }
    BR_CHECK(ck(cu->EventRecord(f->end, stream), "cuEventRecord", st->ec->rank));
    f->gen = s->gen;
    f->since_ns = br_time_ns();
    br_cuda_op_describe(f->what, sizeof(f->what), first);
    s->fl_next++;
    pthread_cond_broadcast(&st->cv);
    return ncclSuccess;
}

/* The ranks whose count in this rank's inbox is behind `gen`, as "1, 3" (for messages). */
static void laggards(br_cuda_stage_t *st, uint64_t gen, char *buf, size_t len)
{
    const uint64_t *inbox = st->ipc.inbox[st->ec->rank];
    int used = 0;
    buf[0] = '\0';
    for (int q = 0; q < st->ec->nranks; q++) {
        if (q != st->ec->rank && __atomic_load_n(&inbox[q], __ATOMIC_ACQUIRE) < gen &&
            used < (int)len) {
            used += snprintf(buf + used, len - (size_t)used, "%s%d", used ? ", " : "", q);
        }
    }
}

int br_ipc_peer_failed(br_cuda_stage_t *st)
{
    char why[600], msg[900];
    int from = -1;
    if (st->failed || !br_bootstrap_poll_abort(st->ec->tc->boot, &from, why, sizeof(why))) {
        return 0;
    }
    snprintf(msg, sizeof(msg), "rank %d (host %s): rank %d reported a failure: %s", st->ec->rank,
             br_host_name(), from, why);
    br_stage_fail(st, ncclRemoteError, msg);
    return 1;
}

int br_ipc_watch(br_cuda_stage_t *st)
{
    const br_cuda_t *cu = br_cuda(NULL);
    ipc_state_t *s = &st->ipc;
    br_exec_comm_t *ec = st->ec;
    char msg[512], who[128];

    while (s->fl_done < s->fl_next &&
           cu->EventQuery(s->flight[s->fl_done % BR_IPC_INFLIGHT].end) == BR_CU_SUCCESS) {
        s->fl_done++;
        pthread_cond_broadcast(&st->cv);
    }
    if (s->fl_done == s->fl_next || st->failed) {
        if (st->failed && s->fl_done < s->fl_next) {
            br_ipc_release(st); /* again: a live peer's stream may have written over it */
        }
        return s->fl_done < s->fl_next;
    }
    if (br_ipc_peer_failed(st)) {
        return 1;
    }
    const ipc_flight_t *f = &s->flight[s->fl_done % BR_IPC_INFLIGHT];
    uint64_t waited = br_time_ns() - f->since_ns;
    if (waited < 100000000ull) {
        return 1;
    }
    for (int q = 0; q < ec->nranks; q++) {
        if (q != ec->rank && br_exec_pid_is_dead(s->pid[q])) {
            snprintf(msg, sizeof(msg),
                     "rank %d (pid %d on host %s) died while rank %d's device %s waited for it", q,
                     s->pid[q], ec->tc->peers[q].host, ec->rank, f->what);
            br_bootstrap_abort_notify(ec->tc->boot, msg);
            br_stage_fail(st, ncclRemoteError, msg);
            return 1;
        }
    }
    uint64_t limit = (uint64_t)BR_PARAM_INT(CUDA_WAIT_TIMEOUT) * 1000000000ull;
    if (limit > 0 && waited > limit) {
        laggards(st, f->gen, who, sizeof(who));
        if (who[0] != '\0') {
            snprintf(msg, sizeof(msg),
                     "rank %d (host %s): device %s waited %llu s for rank(s) %s, whose streams "
                     "have not reached it",
                     ec->rank, br_host_name(), f->what,
                     (unsigned long long)(waited / 1000000000ull), who);
        } else {
            snprintf(msg, sizeof(msg),
                     "rank %d (host %s): device %s has not finished after %llu s: every peer's "
                     "stream reached it; this rank's own stream has not reached it",
                     ec->rank, br_host_name(), f->what,
                     (unsigned long long)(waited / 1000000000ull));
        }
        /* The peers first: once this rank's stream is released it passes its barriers, and
         * their streams with it; they must know the results are not to be trusted. */
        br_bootstrap_abort_notify(ec->tc->boot, msg);
        br_stage_fail(st, ncclInvalidUsage, msg);
    }
    return 1;
}

void br_ipc_release(br_cuda_stage_t *st)
{
    ipc_state_t *s = &st->ipc;
    if (s->state != 1) {
        return;
    }
    /* Plain stores from the host: no stream operation, which could wait in a hardware
     * queue behind this very stream. A live peer's stream may still write a smaller count
     * over one of them; the stager's watch writes them again while deposits are in flight. */
    uint64_t *inbox = s->inbox[st->ec->rank];
    for (int q = 0; q < st->ec->nranks; q++) {
        if (q != st->ec->rank) {
            __atomic_store_n(&inbox[q], IPC_RELEASED, __ATOMIC_RELEASE);
        }
    }
}

void br_ipc_free(br_cuda_stage_t *st)
{
    const br_cuda_t *cu = br_cuda(NULL);
    ipc_state_t *s = &st->ipc;
    for (int i = 0; i < BR_IPC_INFLIGHT; i++) {
        if (s->flight[i].end != NULL) {
            cu->EventSynchronize(s->flight[i].end);
            cu->EventDestroy(s->flight[i].end);
        }
    }
    if (s->peer != NULL) {
        for (int q = 0; q < st->ec->nranks; q++) {
            if (q != st->ec->rank && s->peer[q] != 0) {
                cu->IpcCloseMemHandle(s->peer[q]);
            }
        }
    }
    if (s->mine != 0) {
        cu->MemFree(s->mine);
    }
    for (int q = 0; q < st->ec->nranks && s->inbox != NULL; q++) {
        inbox_unmap(s, q);
    }
    free(s->peer);
    free(s->inbox);
    free(s->inbox_d);
    free(s->pid);
}
