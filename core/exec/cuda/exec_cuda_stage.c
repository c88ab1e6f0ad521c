/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Device calls of communicators whose ranks live in several processes (or hosts): staged
 * through pinned host memory and run by the host executor.
 *
 * The clique of exec_cuda.c lets blocks wait for their peers' blocks on the SMs, which is
 * safe only because every block is in one launch. Kernels of two processes never are: on
 * one GPU they run in separate contexts, time-sliced, so a kernel spinning for the other
 * process's kernel would hold the GPU for a whole time slice, or for ever when other work
 * keeps the peer from running. Here nothing waits on the SMs. A rank's deposit (its device
 * calls of one group) becomes, on the call's stream:
 *
 *   its inputs copied, device -> pinned host staging        (cuMemcpyDtoHAsync)
 *   ready[slot] = n                                         (cuStreamWriteValue32)
 *   ... the call returns; later, br_exec_cuda_wait adds:
 *   wait until done[slot] >= n                              (cuStreamWaitValue32)
 *   its outputs copied, staging -> device                   (cuMemcpyHtoDAsync)
 *
 * A thread of the rank, the stager, takes the deposits in call order, waits on the host
 * for ready, runs the calls on the staging buffers with the host executor (every
 * transport: shm, sockets, net plugins, so across hosts too) and writes done. The stream
 * waits in the stream, on no SM, and the stager on the host. What it costs: each call's
 * bytes cross PCIe twice and move at the host executor's speed (docs/cuda.md).
 *
 * Slots: deposit t uses slot t % BR_CUDA_QUEUE, its words ready/done holding t / QUEUE + 1,
 * so a slot's values only grow and streams that wait on different slots never see a
 * value go back. A slot is reused once the stager finished its last deposit and the
 * stream copied that deposit's outputs out (its `freed` event).
 *
 * Failures: an error of the host executor fails the communicator (sticky, as NCCL's
 * asynchronous errors) and releases every waiting stream, so cudaStreamSynchronize
 * returns and ncclCommGetAsyncError names the rank and the cause; ncclCommAbort does the
 * same from any thread.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec_cuda_stage_int.h"
#include "util.h"

static inline size_t align_up(size_t n)
{
    return (n + STAGE_ALIGN - 1) / STAGE_ALIGN * STAGE_ALIGN;
}

static inline uint32_t slot_value(uint64_t t)
{
    return (uint32_t)(t / BR_CUDA_QUEUE + 1);
}

static volatile uint32_t *ready_word(br_cuda_stage_t *st, uint64_t t)
{
    return &st->words[t % BR_CUDA_QUEUE];
}

static volatile uint32_t *done_word(br_cuda_stage_t *st, uint64_t t)
{
    return &st->words[BR_CUDA_QUEUE + t % BR_CUDA_QUEUE];
}

/* The bytes a call of this rank reads from its device input and writes to its device
 * output, and the staging it needs. */
static void layout_op(const br_op_t *op, int rank, int nranks, size_t *at, stage_layout_t *l)
{
    size_t es = br_type_size(op->type), n = op->count * es;
    size_t in = 0, out = 0, back = 0;

    switch (op->func) {
    case BR_FUNC_ALLREDUCE: in = n, out = back = n; break;
    case BR_FUNC_BROADCAST:
        in = rank == op->root ? n : 0;
        out = back = n;
        break;
    case BR_FUNC_REDUCE:
        /* Every rank gets an output: the host executor may use a non-root's as scratch. */
        in = n, out = n, back = rank == op->root ? n : 0;
        break;
    case BR_FUNC_ALLGATHER: in = n, out = back = n * (size_t)nranks; break;
    case BR_FUNC_REDUCESCATTER: in = n * (size_t)nranks, out = back = n; break;
    case BR_FUNC_SEND: in = n; break;
    case BR_FUNC_RECV: out = back = n; break;
    default: break;
    }
    l->in_off = *at;
    l->in_bytes = in;
    *at += align_up(in);
    l->out_off = *at;
    l->out_bytes = out;
    l->back_bytes = back;
    *at += align_up(out);
    l->scalar_off = SIZE_MAX;
    if (op->redop.scalar_dev != NULL) {
        l->scalar_off = *at;
        *at += align_up(es);
    }
}

/* ---- failures ---- */

/* No deposit runs any more: every stream waiting on a slot goes on. Caller holds st->mu. */
static void stage_release(br_cuda_stage_t *st)
{
    for (uint64_t t = st->taken; t < st->next; t++) {
        __atomic_store_n(done_word(st, t), slot_value(t), __ATOMIC_RELEASE);
    }
}

void br_stage_fail(br_cuda_stage_t *st, ncclResult_t res, const char *why)
{
    if (!st->failed) {
        st->failed = 1;
        if (st->ec->error == ncclSuccess) {
            br_exec_fail(st->ec, res, "%s", why);
        }
        br_ipc_release(st);
    }
    stage_release(st);
    pthread_cond_broadcast(&st->cv);
}

/* ---- the stager thread ---- */

/* One unsuccessful look at a stream's progress, the i-th after `waited` ns: spins briefly,
 * then yields, then sleeps: a stream may take long to get there, and the cores are shared. */
static void stage_backoff(unsigned i, uint64_t waited)
{
    if (i < 64) {
        return;
    }
    if (waited < 200000) {
        sched_yield();
    } else {
        struct timespec ts = {0, waited < 10000000 ? 20000 : 200000};
        nanosleep(&ts, NULL);
    }
}

/* Wait on the host until the stream reached deposit t (its inputs are staged). Returns 0
 * when it did, -1 when the communicator failed meanwhile, -2 when it waited past
 * BRAID_CUDA_WAIT_TIMEOUT (described in late). */
static int wait_ready(br_cuda_stage_t *st, uint64_t t, char *late, size_t len)
{
    uint32_t want = slot_value(t);
    uint64_t start = br_time_ns();
    uint64_t limit = (uint64_t)BR_PARAM_INT(CUDA_WAIT_TIMEOUT) * 1000000000ull;
    for (unsigned i = 0;; i++) {
        if (__atomic_load_n(ready_word(st, t), __ATOMIC_ACQUIRE) >= want) {
            return 0;
        }
        if (__atomic_load_n(&st->failed, __ATOMIC_ACQUIRE)) {
            return -1;
        }
        uint64_t waited = i < 64 ? 0 : br_time_ns() - start;
        if (limit > 0 && waited > limit) {
            char what[256];
            br_cuda_op_describe(what, sizeof(what), &st->slot[t % BR_CUDA_QUEUE].ops[0]);
            snprintf(late, len,
                     "rank %d (host %s): device %s: this process's stream had not reached the "
                     "call after %llu s (BRAID_CUDA_WAIT_TIMEOUT): the copy that stages its "
                     "input had not run, so the stream's earlier work had not finished or the "
                     "GPU was running other work (ranks of several processes on one GPU: "
                     "another rank's process may hold it, see docs/cuda.md)",
                     st->ec->rank, br_host_name(), what,
                     (unsigned long long)(waited / 1000000000ull));
            return -2;
        }
        stage_backoff(i, waited);
    }
}

/* Run deposit t's calls on its staging buffers. */
static ncclResult_t stage_run(br_cuda_stage_t *st, stage_slot_t *s)
{
    br_op_t *h = NULL;
    BR_CHECK(br_calloc(&h, (size_t)s->nops, "staged device calls"));
    for (int i = 0; i < s->nops; i++) {
        const stage_layout_t *l = &s->lay[i];
        h[i] = s->ops[i];
        h[i].on_device = 0;
        h[i].stream = NULL;
        h[i].recvbuff = l->out_bytes > 0 ? s->mem + l->out_off : NULL;
        h[i].sendbuff = l->in_bytes > 0 ? s->mem + l->in_off : h[i].recvbuff;
        if (l->scalar_off != SIZE_MAX) {
            br_redop_premulsum(&h[i].redop, h[i].type, s->mem + l->scalar_off);
        }
    }
    ncclResult_t res = st->run(st->run_arg, h, s->nops);
    free(h);
    return res;
}

/* Wait on st->cv, waking every 10 ms while direct deposits are in flight (to watch them). */
static void stager_sleep(br_cuda_stage_t *st, int watching)
{
    if (!watching) {
        pthread_cond_wait(&st->cv, &st->mu);
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 10000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&st->cv, &st->mu, &ts);
}

static void *stager_main(void *arg)
{
    br_cuda_stage_t *st = arg;
    char why[1200];

    br_cuda(NULL)->CtxSetCurrent(st->ctx);
    pthread_mutex_lock(&st->mu);
    for (;;) {
        int watching = br_ipc_watch(st);
        if (st->taken == st->next) {
            if (st->stop && !watching) {
                break; /* stopping, and nothing left */
            }
            stager_sleep(st, watching);
            continue;
        }
        uint64_t t = st->taken;
        stage_slot_t *s = &st->slot[t % BR_CUDA_QUEUE];
        pthread_mutex_unlock(&st->mu);
        ncclResult_t res = ncclSuccess;
        int ready = wait_ready(st, t, why, sizeof(why));
        if (ready == 0) {
            res = stage_run(st, s);
        } else if (ready == -2) {
            /* The peers wait for this rank in the host executor: they learn why now. */
            br_bootstrap_abort_notify(st->ec->tc->boot, why);
        }
        if (ready == 0 && res == ncclSuccess) {
            /* Published before st->mu: a depositing thread may hold it while the stream
             * that waits for this word holds up others (its hardware queue). */
            __atomic_store_n(done_word(st, t), slot_value(t), __ATOMIC_RELEASE);
        }
        pthread_mutex_lock(&st->mu);
        if (ready == -2) {
            br_stage_fail(st, ncclUnhandledCudaError, why);
        } else if (res != ncclSuccess) {
            snprintf(why, sizeof(why), "rank %d (host %s): staged device call %s failed: %s",
                     st->ec->rank, br_host_name(), br_func_name(s->ops[0].func),
                     st->ec->error_msg[0] != '\0' ? st->ec->error_msg : "see the warnings above");
            br_stage_fail(st, res, why);
        }
        __atomic_store_n(done_word(st, t), slot_value(t), __ATOMIC_RELEASE);
        st->taken = t + 1;
        pthread_cond_broadcast(&st->cv);
    }
    pthread_mutex_unlock(&st->mu);
    return NULL;
}

/* ---- attach, deposit, wait ---- */

ncclResult_t br_exec_cuda_attach_staged(br_exec_comm_t *ec, int device, br_cuda_stage_run_fn run,
                                        void *run_arg, int host_sync)
{
    const br_cuda_t *cu = br_cuda(NULL);
    br_cuda_stage_t *st = NULL;
    br_cu_device_t dev;
    br_cu_context_t saved = NULL;
    ncclResult_t res = ncclSuccess;
    void *words = NULL;

    BR_CHECK(br_calloc(&st, 1, "CUDA stager"));
    st->ec = ec;
    st->device = device;
    st->run = run;
    st->run_arg = run_arg;
    st->host_sync = host_sync;
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->cv, NULL);
    cu->CtxGetCurrent(&saved);
    BR_CHECK_GOTO(br_cuda_check(cu->DeviceGet(&dev, device), "cuDeviceGet", ec->rank), res, fail);
    BR_CHECK_GOTO(br_cuda_check(cu->DevicePrimaryCtxRetain(&st->ctx, dev),
                                "cuDevicePrimaryCtxRetain", ec->rank),
                  res, fail);
    BR_CHECK_GOTO(br_cuda_check(cu->CtxSetCurrent(st->ctx), "cuCtxSetCurrent", ec->rank), res,
                  fail);
    BR_CHECK_GOTO(
        br_cuda_check(cu->MemHostAlloc(&words, 2 * BR_CUDA_QUEUE * sizeof(uint32_t),
                                       BR_CU_MEMHOSTALLOC_PORTABLE | BR_CU_MEMHOSTALLOC_DEVICEMAP),
                      "cuMemHostAlloc", ec->rank),
        res, fail);
    st->words = words;
    memset(words, 0, 2 * BR_CUDA_QUEUE * sizeof(uint32_t));
    BR_CHECK_GOTO(br_cuda_check(cu->MemHostGetDevicePointer(&st->words_d, words, 0),
                                "cuMemHostGetDevicePointer", ec->rank),
                  res, fail);
    for (int i = 0; i < BR_CUDA_QUEUE; i++) {
        BR_CHECK_GOTO(br_cuda_check(cu->EventCreate(&st->slot[i].freed, BR_CU_EVENT_DISABLE_TIMING),
                                    "cuEventCreate", ec->rank),
                      res, fail);
        BR_CHECK_GOTO(br_cuda_check(cu->EventCreate(&st->slot[i].staged, BR_CU_EVENT_DISABLE_TIMING),
                                    "cuEventCreate", ec->rank),
                      res, fail);
    }
    br_ipc_decide(st);
    if (st->ipc.state == 0) {
        BR_CHECK_GOTO(br_ipc_setup(st), res, fail);
    }
    if (pthread_create(&st->thread, NULL, stager_main, st) != 0) {
        BR_WARN(NCCL_INIT, "rank %d: cannot start the thread that stages device calls", ec->rank);
        res = ncclSystemError;
        goto fail;
    }
    st->started = 1;
    ec->stage = st;
    ec->cuda_dev = device;
    cu->CtxSetCurrent(saved);
    return ncclSuccess;
fail:
    ec->stage = st;
    br_exec_cuda_stage_detach(ec);
    cu->CtxSetCurrent(saved);
    return res;
}

static void stage_unregister(br_cuda_stage_t *st, stage_slot_t *s)
{
    if (s->net_id != 0) {
        br_net_regs_remove(&st->ec->tc->net_regs, st->ec->tc->proxy, s->net_id);
        s->net_id = 0;
    }
}

/* Wait, with st->mu released, until the stream copied slot s's last deposit out (its
 * `freed` event): the stream may wait behind other streams in its hardware queue, and
 * those for the stager, which takes st->mu to finish a deposit. Caller holds st->mu;
 * ticket t is not handed out yet, so neither the stager nor the stream touches s. */
static ncclResult_t slot_drained(br_cuda_stage_t *st, stage_slot_t *s)
{
    const br_cuda_t *cu = br_cuda(NULL);
    br_cu_result_t e = BR_CU_SUCCESS;
    uint64_t start = br_time_ns();
    if (!s->used) {
        return ncclSuccess;
    }
    pthread_mutex_unlock(&st->mu);
    for (unsigned i = 0; (e = cu->EventQuery(s->freed)) == BR_CU_ERROR_NOT_READY; i++) {
        stage_backoff(i, i < 64 ? 0 : br_time_ns() - start);
    }
    pthread_mutex_lock(&st->mu);
    return br_cuda_check(e, "cuEventQuery", st->ec->rank);
}

/* Slot s big enough for the layout's `bytes`, its previous use copied out. A slot that
 * grows keeps its old buffer until the communicator ends: cuMemFreeHost waits for every
 * stream of the context, and a stream may be waiting for this very stager (a deposit
 * made earlier, or another communicator's). Growth at least doubles, so what is kept is
 * at most the final size again. Caller holds st->mu; the current context is the stager's. */
static ncclResult_t slot_ready(br_cuda_stage_t *st, stage_slot_t *s, int nops, size_t bytes)
{
    const br_cuda_t *cu = br_cuda(NULL);
    int rank = st->ec->rank;
    BR_CHECK(slot_drained(st, s));
    if (s->mem_bytes < bytes) {
        size_t want = bytes < ((size_t)1 << 20) ? ((size_t)1 << 20) : bytes;
        void *p = NULL;
        want = want < 2 * s->mem_bytes ? 2 * s->mem_bytes : want;
        br_cu_result_t e = cu->MemHostAlloc(&p, want, BR_CU_MEMHOSTALLOC_PORTABLE);
        if (e != BR_CU_SUCCESS) {
            BR_WARN(NCCL_ALLOC,
                    "rank %d (host %s): cannot pin %zu bytes of host memory to stage device "
                    "calls across processes: %s",
                    rank, br_host_name(), want, br_cuda_error_string(e));
            return ncclSystemError;
        }
        if (s->mem != NULL) {
            stage_unregister(st, s);
            stage_retired_t *old = malloc(sizeof(*old));
            if (old == NULL) {
                cu->MemFreeHost(p);
                return ncclSystemError;
            }
            old->mem = s->mem;
            old->next = st->retired;
            st->retired = old;
        }
        s->mem = p;
        s->mem_bytes = want;
        /* Staged calls over the network move their bytes from and into it: registered
         * with the plugin once per connection, not per call (proxy_userbuf.c). */
        BR_CHECK(br_net_regs_add(&st->ec->tc->net_regs, p, want, &s->net_id));
    }
    if (s->cap < nops) {
        br_op_t *o = realloc(s->ops, (size_t)nops * sizeof(*o));
        if (o == NULL) {
            return ncclSystemError;
        }
        s->ops = o;
        stage_layout_t *l = realloc(s->lay, (size_t)nops * sizeof(*l));
        if (l == NULL) {
            return ncclSystemError;
        }
        s->lay = l;
        s->cap = nops;
    }
    return ncclSuccess;
}

/* The staged part of a deposit: inputs to a slot, then the ready word. Caller holds st->mu,
 * in the stager's context. */
static ncclResult_t stage_put(br_cuda_stage_t *st, const br_op_t *ops, int nops,
                              br_cu_stream_t stream, uint64_t *ticket_p)
{
    br_exec_comm_t *ec = st->ec;
    const br_cuda_t *cu = br_cuda(NULL);
    size_t bytes = 0;
    stage_layout_t one;

    for (int i = 0; i < nops; i++) {
        layout_op(&ops[i], ec->rank, ec->nranks, &bytes, &one);
    }
    /* The slot's last deposit must be finished: a rank QUEUE calls ahead waits here. */
    while (!st->failed && st->next - st->taken >= BR_CUDA_QUEUE) {
        pthread_cond_wait(&st->cv, &st->mu);
    }
    if (st->failed) {
        BR_WARN(NCCL_COLL, "rank %d: communicator already failed: %s", ec->rank, ec->error_msg);
        return ec->error != ncclSuccess ? ec->error : ncclInvalidUsage;
    }
    uint64_t t = st->next;
    stage_slot_t *s = &st->slot[t % BR_CUDA_QUEUE];
    BR_CHECK(slot_ready(st, s, nops, bytes));
    if (st->failed) { /* while slot_ready waited without st->mu */
        BR_WARN(NCCL_COLL, "rank %d: communicator already failed: %s", ec->rank, ec->error_msg);
        return ec->error != ncclSuccess ? ec->error : ncclInvalidUsage;
    }
    bytes = 0;
    for (int i = 0; i < nops; i++) {
        stage_layout_t *l = &s->lay[i];
        layout_op(&ops[i], ec->rank, ec->nranks, &bytes, l);
        s->ops[i] = ops[i];
        if (l->in_bytes > 0) {
            BR_CHECK(br_cuda_check(cu->MemcpyDtoHAsync(s->mem + l->in_off,
                                                       (br_cu_ptr_t)(uintptr_t)ops[i].sendbuff,
                                                       l->in_bytes, stream),
                                   "cuMemcpyDtoHAsync", ec->rank));
        }
        if (l->scalar_off != SIZE_MAX) {
            BR_CHECK(
                br_cuda_check(cu->MemcpyDtoHAsync(s->mem + l->scalar_off,
                                                  (br_cu_ptr_t)(uintptr_t)ops[i].redop.scalar_dev,
                                                  br_type_size(ops[i].type), stream),
                              "cuMemcpyDtoHAsync", ec->rank));
        }
    }
    if (st->host_sync) {
        /* The deposit waits for it on the host, then writes ready (stage_staged). */
        BR_CHECK(br_cuda_check(cu->EventRecord(s->staged, stream), "cuEventRecord", ec->rank));
    } else {
        BR_CHECK(br_cuda_check(
            cu->StreamWriteValue32(stream, st->words_d + (t % BR_CUDA_QUEUE) * sizeof(uint32_t),
                                   slot_value(t), 0),
            "cuStreamWriteValue32", ec->rank));
    }
    s->nops = nops;
    s->ticket = t;
    s->used = 0; /* until br_exec_cuda_stage_wait records freed */
    st->next = t + 1;
    *ticket_p = t;
    pthread_cond_broadcast(&st->cv);
    return ncclSuccess;
}

/* The direct part of a deposit: its collectives, on the stream now. Caller holds st->mu,
 * in the stager's context. A failure halfway leaves barriers the peers wait for: it fails
 * the communicator, which releases them. */
static ncclResult_t direct_put(br_cuda_stage_t *st, const br_op_t *ops, int nops,
                               br_cu_stream_t stream)
{
    const br_op_t *first = NULL;
    ncclResult_t res = ncclSuccess;
    char why[256];
    for (int i = 0; i < nops && res == ncclSuccess; i++) {
        if (br_ipc_handles(&ops[i])) {
            first = first != NULL ? first : &ops[i];
            res = br_ipc_enqueue(st, &ops[i]);
        }
    }
    if (res == ncclSuccess && first != NULL) {
        res = br_ipc_flight_add(st, stream, first);
    }
    if (res != ncclSuccess) {
        snprintf(why, sizeof(why), "rank %d (host %s): a device %s could not be enqueued",
                 st->ec->rank, br_host_name(), br_func_name(first->func));
        br_stage_fail(st, res, why);
    }
    return res;
}

/* host_sync: deposit t's inputs are staged once its stream reaches them (this process's
 * own work only); then ready is written here, and the stager runs it. Polled, not
 * synchronised: a stream that never gets there fails the communicator after
 * BRAID_CUDA_WAIT_TIMEOUT (the stager's wait_ready), and this call returns then. The
 * current context is the stager's. */
static ncclResult_t stage_staged(br_cuda_stage_t *st, uint64_t t)
{
    const br_cuda_t *cu = br_cuda(NULL);
    stage_slot_t *s = &st->slot[t % BR_CUDA_QUEUE];
    uint64_t start = br_time_ns();
    br_cu_result_t e;
    for (unsigned i = 0; (e = cu->EventQuery(s->staged)) == BR_CU_ERROR_NOT_READY; i++) {
        if (__atomic_load_n(&st->failed, __ATOMIC_ACQUIRE)) {
            BR_WARN(NCCL_COLL, "rank %d: %s", st->ec->rank, st->ec->error_msg);
            return st->ec->error != ncclSuccess ? st->ec->error : ncclUnhandledCudaError;
        }
        stage_backoff(i, i < 64 ? 0 : br_time_ns() - start);
    }
    if (e != BR_CU_SUCCESS) {
        char why[512];
        snprintf(why, sizeof(why),
                 "rank %d (host %s): the stream that stages a device call's inputs failed: "
                 "cuEventQuery: %s",
                 st->ec->rank, br_host_name(), br_cuda_error_string(e));
        pthread_mutex_lock(&st->mu);
        br_stage_fail(st, ncclUnhandledCudaError, why);
        pthread_mutex_unlock(&st->mu);
        return ncclUnhandledCudaError;
    }
    __atomic_store_n(ready_word(st, t), slot_value(t), __ATOMIC_RELEASE);
    return ncclSuccess;
}

ncclResult_t br_exec_cuda_stage_deposit(br_exec_comm_t *ec, const br_op_t *ops, int nops,
                                        uint64_t *ticket_p)
{
    br_cuda_stage_t *st = ec->stage;
    const br_cuda_t *cu = br_cuda(NULL);
    br_cu_stream_t stream = (br_cu_stream_t)ops[0].stream;
    br_cu_context_t saved = NULL;
    br_op_t *rest = NULL;
    ncclResult_t res = ncclSuccess;
    int nrest = 0;

    *ticket_p = BR_CUDA_NO_TICKET;
    cu->CtxGetCurrent(&saved);
    pthread_mutex_lock(&st->mu);
    if (st->failed) {
        res = ec->error != ncclSuccess ? ec->error : ncclInvalidUsage;
        BR_WARN(NCCL_COLL, "rank %d: communicator already failed: %s", ec->rank, ec->error_msg);
        goto out;
    }
    BR_CHECK_GOTO(br_cuda_check(cu->CtxSetCurrent(st->ctx), "cuCtxSetCurrent", ec->rank), res, out);
    if (st->ipc.state == 1) {
        /* Collectives first, then the staged sends and receives: a group's calls have no
         * order, and every rank must take them in the same one. */
        BR_CHECK_GOTO(direct_put(st, ops, nops, stream), res, out);
        BR_CHECK_GOTO(br_calloc(&rest, (size_t)nops, "staged device calls"), res, out);
        for (int i = 0; i < nops; i++) {
            if (!br_ipc_handles(&ops[i])) {
                rest[nrest++] = ops[i];
            }
        }
        if (nrest > 0) {
            res = stage_put(st, rest, nrest, stream, ticket_p);
        }
    } else {
        res = stage_put(st, ops, nops, stream, ticket_p);
    }
out:
    pthread_mutex_unlock(&st->mu);
    if (res == ncclSuccess && st->host_sync && *ticket_p != BR_CUDA_NO_TICKET) {
        res = stage_staged(st, *ticket_p);
    }
    cu->CtxSetCurrent(saved);
    free(rest);
    return res;
}

ncclResult_t br_exec_cuda_stage_wait(br_exec_comm_t *ec, uint64_t t, void *stream_v)
{
    br_cuda_stage_t *st = ec->stage;
    const br_cuda_t *cu = br_cuda(NULL);
    br_cu_stream_t stream = (br_cu_stream_t)stream_v;
    stage_slot_t *s = &st->slot[t % BR_CUDA_QUEUE];
    br_cu_context_t saved = NULL;
    ncclResult_t res = ncclSuccess;

    if (t == BR_CUDA_NO_TICKET) {
        return ncclSuccess; /* all of it went the direct path: nothing to wait for */
    }
    cu->CtxGetCurrent(&saved);
    pthread_mutex_lock(&st->mu);
    BR_CHECK_GOTO(br_cuda_check(cu->CtxSetCurrent(st->ctx), "cuCtxSetCurrent", ec->rank), res, out);
    if (st->host_sync) {
        /* On the host: the stager finished it (or the communicator failed, which writes
         * every done word). */
        while (__atomic_load_n(done_word(st, t), __ATOMIC_ACQUIRE) < slot_value(t)) {
            pthread_cond_wait(&st->cv, &st->mu);
        }
        if (st->failed) {
            res = ec->error != ncclSuccess ? ec->error : ncclInvalidUsage;
            goto out;
        }
    } else {
        BR_CHECK_GOTO(
            br_cuda_check(cu->StreamWaitValue32(stream,
                                                st->words_d + (BR_CUDA_QUEUE + t % BR_CUDA_QUEUE) *
                                                                  sizeof(uint32_t),
                                                slot_value(t), BR_CU_STREAM_WAIT_VALUE_GEQ),
                          "cuStreamWaitValue32", ec->rank),
            res, out);
    }
    for (int i = 0; i < s->nops; i++) {
        const stage_layout_t *l = &s->lay[i];
        if (l->back_bytes > 0) {
            BR_CHECK_GOTO(
                br_cuda_check(cu->MemcpyHtoDAsync((br_cu_ptr_t)(uintptr_t)s->ops[i].recvbuff,
                                                  s->mem + l->out_off, l->back_bytes, stream),
                              "cuMemcpyHtoDAsync", ec->rank),
                res, out);
        }
    }
    BR_CHECK_GOTO(br_cuda_check(cu->EventRecord(s->freed, stream), "cuEventRecord", ec->rank), res,
                  out);
    s->used = 1;
out:
    pthread_mutex_unlock(&st->mu);
    cu->CtxSetCurrent(saved);
    return res;
}

ncclResult_t br_exec_cuda_stage_async_error(br_exec_comm_t *ec)
{
    br_cuda_stage_t *st = ec->stage;
    pthread_mutex_lock(&st->mu);
    br_ipc_peer_failed(st);
    pthread_mutex_unlock(&st->mu);
    return ec->error;
}

void br_exec_cuda_stage_quiesce(br_exec_comm_t *ec)
{
    br_cuda_stage_t *st = ec->stage;
    if (st == NULL) {
        return;
    }
    pthread_mutex_lock(&st->mu);
    while (st->taken < st->next) {
        pthread_cond_wait(&st->cv, &st->mu);
    }
    pthread_mutex_unlock(&st->mu);
}

void br_exec_cuda_stage_abort(br_exec_comm_t *ec)
{
    br_cuda_stage_t *st = ec->stage;
    char msg[256];
    snprintf(msg, sizeof(msg), "rank %d (host %s): communicator aborted (ncclCommAbort)", ec->rank,
             br_host_name());
    pthread_mutex_lock(&st->mu);
    br_stage_fail(st, ncclRemoteError, msg);
    pthread_mutex_unlock(&st->mu);
}

int br_exec_cuda_stage_pending(br_exec_comm_t *ec)
{
    br_cuda_stage_t *st = ec->stage;
    pthread_mutex_lock(&st->mu);
    /* Deposits the stager has not finished, or direct-path kernels not yet seen complete
     * (some may have finished: stopping a communicator that is going away costs nothing
     * then). */
    int pending = st->taken < st->next || st->ipc.fl_done < st->ipc.fl_next;
    pthread_mutex_unlock(&st->mu);
    return pending;
}

size_t br_exec_cuda_stage_mem_bytes(const br_exec_comm_t *ec)
{
    br_cuda_stage_t *st = ec->stage;
    size_t bytes = 0;
    pthread_mutex_lock(&st->mu);
    for (int i = 0; i < BR_CUDA_QUEUE; i++) {
        bytes += st->slot[i].mem_bytes; /* pinned host staging */
    }
    if (st->ipc.state == 1) {
        bytes += st->ipc.data_bytes; /* the direct path's device staging */
    }
    pthread_mutex_unlock(&st->mu);
    return bytes;
}

void br_exec_cuda_stage_detach(br_exec_comm_t *ec)
{
    br_cuda_stage_t *st = ec->stage;
    const br_cuda_t *cu = br_cuda(NULL);
    br_cu_context_t saved = NULL;
    if (st == NULL) {
        return;
    }
    /* The stager finishes what was deposited (ncclCommDestroy after ncclCommFinalize has
     * nothing left; after an abort everything was released). */
    pthread_mutex_lock(&st->mu);
    st->stop = 1;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
    if (st->started) {
        pthread_join(st->thread, NULL);
    }
    cu->CtxGetCurrent(&saved);
    if (st->ctx != NULL) {
        cu->CtxSetCurrent(st->ctx);
    }
    for (int i = 0; i < BR_CUDA_QUEUE; i++) {
        stage_slot_t *s = &st->slot[i];
        if (s->used) {
            cu->EventSynchronize(s->freed); /* its stream no longer reads the staging */
        }
        if (s->freed != NULL) {
            cu->EventDestroy(s->freed);
        }
        if (s->staged != NULL) {
            cu->EventDestroy(s->staged);
        }
        if (s->mem != NULL) {
            stage_unregister(st, s);
            cu->MemFreeHost(s->mem);
        }
        free(s->ops);
        free(s->lay);
    }
    while (st->retired != NULL) {
        stage_retired_t *old = st->retired;
        st->retired = old->next;
        cu->MemFreeHost(old->mem);
        free(old);
    }
    br_ipc_free(st);
    if (st->words != NULL) {
        cu->MemFreeHost(st->words);
    }
    if (st->ctx != NULL) {
        br_cu_device_t dev;
        if (cu->DeviceGet(&dev, st->device) == BR_CU_SUCCESS) {
            cu->DevicePrimaryCtxRelease(dev);
        }
    }
    cu->CtxSetCurrent(saved);
    pthread_mutex_destroy(&st->mu);
    pthread_cond_destroy(&st->cv);
    free(st);
    ec->stage = NULL;
}
