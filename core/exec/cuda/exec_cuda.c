/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA executor: calls on device buffers, for ranks that are threads of this process.
 *
 * The ranks of one communicator that live in this process form a clique. A rank's device
 * calls of one group (or one lone call) are a deposit, with a ticket in the rank's queue.
 * The deposit records an event on the call's stream (the inputs are ready there).
 *
 * Deposits launch in units, each rank's in call order. A unit is every rank's next deposit
 * when those hold collectives (they must all hold the same ones), or a set of next
 * deposits holding only sends and receives that pair up among themselves (ranks outside
 * the set call nothing). The call that completes a unit launches it: one kernel per device
 * of the clique holding the blocks of every rank of that device, after waiting for every
 * rank's event; then an event per rank of the unit is recorded after the kernels. A call
 * returns once its unit is launched: a rank whose peers have not called yet waits for them
 * on the host (briefly spinning, then sleeping, at most BRAID_CUDA_WAIT_TIMEOUT), and its
 * stream then waits for the unit's event. Every wait between streams is an event, which
 * CUDA sees: a stream memory wait enqueued before the launch that releases it could hold
 * that launch up for ever when the two streams share a hardware queue (cuda.h's warning on
 * stream memory operations; CUDA_DEVICE_MAX_CONNECTIONS=1, as Megatron-LM sets, puts every
 * stream in one). Ranks of one GPU whose calls are collectives take the direct kernel
 * (dev_direct.h), which reads every rank's input in place and writes every output: no FIFO,
 * one pass over memory.
 *
 * Why one launch for all ranks: a block that waits for a peer's block must wait for
 * something that runs. Kernels of separate launches are co-resident only when the GPU has
 * room and its scheduler puts them side by side, which nothing guarantees (several ranks on
 * one GPU, other work, streams sharing a hardware queue). Blocks of one launch whose grid
 * fits the GPU at once all become resident once earlier work drains, so no wait between
 * them can deadlock. Waiting for a rank that has not called yet happens on the host, never
 * on the SMs. Each launch waits only for deposits made before it (a rank's deposits launch
 * in order), so the launch streams cannot deadlock either. What it costs: a unit starts
 * when its slowest rank's call is reached, and a call returns when its peers have called.
 *
 * Nothing waits for ever without a diagnosis: kernels give up after BRAID_CUDA_WAIT_TIMEOUT
 * and report who they waited for; a watchdog thread per clique fails deposits whose peers
 * never call, naming what each rank did call, and launches that never finish (a kernel that
 * never got to run); either way the error reaches every rank's calls and
 * ncclCommGetAsyncError.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>

#include "device.h"
#include "exec_cuda_int.h"
#include "util.h"

/* Kernels copy a work item into shared memory in 16-byte words (dev_prims.h). */
_Static_assert(sizeof(br_dev_work_t) % 16 == 0, "br_dev_work_t is not a whole number of 16 bytes");

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static br_clique_t *registry;

int br_exec_cuda_has_kernels(void)
{
    return br_dev_fatbin_size > 0;
}

int br_exec_cuda_nchannels(const br_exec_comm_t *ec)
{
    int n = (int)BR_PARAM_INT(CUDA_NCHANNELS);
    (void)ec;
    return n < 1 ? 1 : n > BR_MAX_CHANNELS ? BR_MAX_CHANNELS : n;
}

uint64_t br_cuda_wait_limit_ns(void)
{
    return (uint64_t)BR_PARAM_INT(CUDA_WAIT_TIMEOUT) * 1000000000ull;
}

/* ---- the clique registry ---- */

static ncclResult_t clique_new(uint64_t hash, int nranks, br_clique_t **cl_p)
{
    br_clique_t *cl = NULL;
    BR_CHECK(br_calloc(&cl, 1, "CUDA clique"));
    cl->hash = hash;
    cl->nranks = nranks;
    pthread_mutex_init(&cl->mu, NULL);
    pthread_cond_init(&cl->cv, NULL);
    if (br_calloc(&cl->ec, (size_t)nranks, "CUDA clique") != ncclSuccess ||
        br_calloc(&cl->rank_dev, (size_t)nranks, "CUDA clique") != ncclSuccess ||
        br_calloc(&cl->rank, (size_t)nranks, "CUDA clique") != ncclSuccess) {
        free(cl->ec);
        free(cl->rank_dev);
        free(cl);
        return ncclSystemError;
    }
    *cl_p = cl;
    return ncclSuccess;
}

ncclResult_t br_exec_cuda_attach(br_exec_comm_t *ec, uint64_t hash, int device)
{
    br_clique_t *cl;
    ncclResult_t res = ncclSuccess;

    pthread_mutex_lock(&registry_mu);
    for (cl = registry; cl != NULL && cl->hash != hash; cl = cl->next_in_registry) {
    }
    if (cl == NULL) {
        res = clique_new(hash, ec->nranks, &cl);
        if (res != ncclSuccess) {
            pthread_mutex_unlock(&registry_mu);
            return res;
        }
        cl->next_in_registry = registry;
        registry = cl;
    }
    pthread_mutex_lock(&cl->mu);
    int d = 0;
    while (d < cl->ndevs && cl->devs[d].ordinal != device) {
        d++;
    }
    if (d == BR_CUDA_MAX_DEVS) {
        BR_WARN(NCCL_INIT, "rank %d: more than %d CUDA devices in one communicator", ec->rank,
                BR_CUDA_MAX_DEVS);
        res = ncclInvalidUsage;
    } else {
        if (d == cl->ndevs) {
            cl->devs[cl->ndevs++].ordinal = device;
        }
        cl->rank_dev[ec->rank] = d;
        cl->ec[ec->rank] = ec;
        cl->refs++;
        ec->cuda = cl;
        ec->cuda_dev = device;
    }
    pthread_mutex_unlock(&cl->mu);
    pthread_mutex_unlock(&registry_mu);
    return res;
}

/* ---- failures ---- */

/* Fail every rank of the clique (sticky) with msg; calls waiting for their peers return
 * it. Streams wait only for units that were launched, whose kernels end (a failure or an
 * abort stops their waits). Caller holds cl->mu. */
void br_cuda_clique_fail(br_clique_t *cl, ncclResult_t res, const char *msg)
{
    if (cl->failed) {
        return;
    }
    cl->failed = 1;
    snprintf(cl->fail_msg, sizeof(cl->fail_msg), "%s", msg);
    for (int r = 0; r < cl->nranks; r++) {
        if (cl->ec[r] != NULL) {
            br_exec_fail(cl->ec[r], res, "%s", msg);
        }
    }
    pthread_cond_broadcast(&cl->cv);
}

/* How long the host waits, after a device's report, for the others of a clique on several
 * GPUs while a launch of the clique is still running: devices that fail at once report
 * microseconds apart, and the error should name the one that failed first. */
#define BR_CUDA_REPORT_GRACE_NS 1000000000ull

/* Has every launch of the clique finished (no device can report any more)? Caller holds
 * cl->mu; the calling thread's context is kept. */
static int launches_finished(const br_clique_t *cl)
{
    const br_cuda_t *cu = br_cuda(NULL);
    br_cu_context_t saved = NULL;
    int finished = 1;
    cu->CtxGetCurrent(&saved);
    cu->CtxSetCurrent(cl->devs[0].ctx);
    for (int i = 0; i < BR_CUDA_DESC_BUFS && finished; i++) {
        finished = !cl->desc[i].used || cu->EventQuery(cl->desc[i].done) != BR_CU_ERROR_NOT_READY;
    }
    cu->CtxSetCurrent(saved);
    return finished;
}

/* The report to name among those the clique's devices wrote (each device's is whole: one
 * block wrote it, its status last): the earliest by its %globaltimer stamp, the lowest
 * device index among equal stamps. Returns its device index, or -1 when none is there;
 * *count: how many devices reported. */
static int first_report(const br_cuda_flags_t *f, int ndevs, br_dev_report_t *out, int *count)
{
    int first = -1;
    *count = 0;
    for (int d = 0; d < ndevs; d++) {
        br_dev_report_t r;
        r.status = __atomic_load_n(&f->report[d].status, __ATOMIC_ACQUIRE);
        if (r.status == BR_DEV_OK) {
            continue;
        }
        r.rank = f->report[d].rank;
        r.peer = f->report[d].peer;
        r.step = f->report[d].step;
        r.time_ns = f->report[d].time_ns;
        ++*count;
        if (first < 0 || r.time_ns < out->time_ns) {
            *out = r;
            first = d;
        }
    }
    return first;
}

/* Read what the kernels reported: one device's report names the failure; any other
 * device's that is there too is logged. may_wait (the watchdog): while some devices have
 * not reported and a launch still runs, leave the decision to a later poll, at most
 * BR_CUDA_REPORT_GRACE_NS after the first report; a caller asking for the error now
 * (ncclCommGetAsyncError, typically after its stream finished) gets it now. Caller holds
 * cl->mu. */
static void poll_status(br_clique_t *cl, int may_wait)
{
    char msg[512];
    br_dev_report_t rep;
    int nrep = 0;
    if (cl->flags == NULL || cl->failed) {
        return;
    }
    int dev = first_report(cl->flags, cl->ndevs, &rep, &nrep);
    if (dev < 0) {
        return;
    }
    if (cl->report_seen_ns == 0) {
        cl->report_seen_ns = br_time_ns();
    }
    if (may_wait && nrep < cl->ndevs &&
        br_time_ns() - cl->report_seen_ns < BR_CUDA_REPORT_GRACE_NS && !launches_finished(cl)) {
        return; /* another device may be reporting a failure of the same instant */
    }
    for (int d = 0; d < cl->ndevs; d++) {
        const br_dev_report_t *o = &cl->flags->report[d];
        if (d != dev && __atomic_load_n(&o->status, __ATOMIC_ACQUIRE) != BR_DEV_OK) {
            BR_WARN(NCCL_COLL,
                    "host %s: GPU %d's kernel failed too (status %u: rank %d, peer %d, step "
                    "%llu, %lld ns after GPU %d's); the error names GPU %d's",
                    br_host_name(), cl->devs[d].ordinal, o->status, o->rank, o->peer,
                    (unsigned long long)o->step, (long long)(o->time_ns - rep.time_ns),
                    cl->devs[dev].ordinal, cl->devs[dev].ordinal);
        }
    }
    uint32_t st = rep.status;
    int r = rep.rank, p = rep.peer;
    unsigned long long step = (unsigned long long)rep.step;
    ncclResult_t res = ncclInternalError;
    switch (st) {
    case BR_DEV_ABORTED:
        snprintf(msg, sizeof(msg),
                 "rank %d (host %s): device call aborted (ncclCommAbort) while waiting for "
                 "rank %d at step %llu",
                 r, br_host_name(), p, step);
        res = ncclRemoteError;
        break;
    case BR_DEV_TIMEOUT:
        snprintf(msg, sizeof(msg),
                 "rank %d (host %s): a device kernel waited more than %lld s for rank %d at "
                 "step %llu (BRAID_CUDA_WAIT_TIMEOUT)",
                 r, br_host_name(), (long long)BR_PARAM_INT(CUDA_WAIT_TIMEOUT), p, step);
        res = ncclTimeout;
        break;
    case BR_DEV_MISMATCH:
        snprintf(msg, sizeof(msg),
                 "rank %d (host %s): mismatched calls: what rank %d sent for step %llu belongs "
                 "to another call (a different collective, count or order)",
                 r, br_host_name(), p, step);
        res = ncclInvalidUsage;
        break;
    case BR_DEV_BADWORK:
        snprintf(msg, sizeof(msg),
                 "rank %d (host %s): the device kernel read a work item of no kind it knows "
                 "(its descriptors were overwritten, or libnccl and its kernels are of "
                 "different builds)",
                 r, br_host_name());
        break;
    default:
        snprintf(msg, sizeof(msg), "rank %d (host %s): device kernel failed (status %u)", r,
                 br_host_name(), st);
        break;
    }
    br_cuda_clique_fail(cl, res, msg);
}

/* ---- the watchdog ---- */

/* Deposits waiting longer than the limit: fail them, saying what every rank called. */
static void check_stalled(br_clique_t *cl)
{
    uint64_t now = br_time_ns(), limit = br_cuda_wait_limit_ns(), oldest = 0;
    if (limit == 0 || cl->failed) {
        return;
    }
    for (int r = 0; r < cl->nranks; r++) {
        const br_cuda_dep_t *d = br_cuda_head(cl, r);
        if (d != NULL && (oldest == 0 || d->since_ns < oldest)) {
            oldest = d->since_ns;
        }
    }
    if (oldest == 0 || now - oldest < limit) {
        return;
    }
    char msg[768], one[192];
    size_t at = (size_t)snprintf(msg, sizeof(msg),
                                 "device calls waited %lld s for their peers "
                                 "(BRAID_CUDA_WAIT_TIMEOUT):",
                                 (long long)BR_PARAM_INT(CUDA_WAIT_TIMEOUT));
    for (int r = 0; r < cl->nranks && at < sizeof(msg) - 64; r++) {
        const br_cuda_dep_t *d = br_cuda_head(cl, r);
        if (d == NULL) {
            snprintf(one, sizeof(one), "no call");
        } else {
            br_cuda_op_describe(one, sizeof(one), &d->ops[0]);
        }
        at += (size_t)snprintf(msg + at, sizeof(msg) - at, " rank %d: %s%s;", r,
                               d != NULL ? "next " : "", one);
    }
    br_cuda_clique_fail(cl, ncclTimeout, msg);
}

/* Launches whose kernels have not finished long after they were launched: the kernels'
 * own waits time out, so a launch this late never got to run (the GPU held other work
 * that does not end, or a stream it waits for is held up). Caller holds cl->mu. */
static void check_launches(br_clique_t *cl)
{
    const br_cuda_t *cu = br_cuda(NULL);
    uint64_t limit = br_cuda_wait_limit_ns();
    char msg[768];
    if (limit == 0 || cl->failed) {
        return;
    }
    /* The kernels' own timeout first, and some room for the report to land. */
    limit += 5000000000ull;
    for (int i = 0; i < BR_CUDA_DESC_BUFS; i++) {
        br_cuda_desc_t *b = &cl->desc[i];
        if (!b->used || b->since_ns == 0 || br_time_ns() - b->since_ns < limit) {
            continue;
        }
        cu->CtxSetCurrent(cl->devs[0].ctx);
        if (cu->EventQuery(b->done) != BR_CU_ERROR_NOT_READY) {
            b->since_ns = 0; /* finished */
            continue;
        }
        snprintf(msg, sizeof(msg),
                 "ranks 0-%d (host %s): a device launch of %s has not finished %llu s after it "
                 "was launched: its kernel never got to run (other work held the GPU, or "
                 "the launch stream waits behind a stream that does not move; "
                 "CUDA_DEVICE_MAX_CONNECTIONS puts several streams in one hardware queue)",
                 cl->nranks - 1, br_host_name(), b->what,
                 (unsigned long long)((br_time_ns() - b->since_ns) / 1000000000ull));
        br_cuda_clique_fail(cl, ncclUnhandledCudaError, msg);
        return;
    }
}

static void *watchdog_main(void *arg)
{
    br_clique_t *cl = arg;
    pthread_mutex_lock(&cl->mu);
    while (!cl->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&cl->cv, &cl->mu, &ts);
        poll_status(cl, 1);
        check_stalled(cl);
        check_launches(cl);
    }
    pthread_mutex_unlock(&cl->mu);
    return NULL;
}

/* ---- the calls ---- */

/* Relaxed capture mode for this thread while it allocates, as NCCL does: in the default
 * (global) mode, cuMemAlloc and its kin fail while a stream of this thread, or a
 * global-mode capture of any thread, is capturing, and a first device call or a captured
 * one allocates. Returns the mode to give back to br_cuda_capture_restore. */
int br_cuda_capture_relax(const br_cuda_t *cu)
{
    int mode = BR_CU_CAPTURE_MODE_RELAXED;
    cu->ThreadExchangeStreamCaptureMode(&mode);
    return mode;
}

void br_cuda_capture_restore(const br_cuda_t *cu, int mode)
{
    cu->ThreadExchangeStreamCaptureMode(&mode);
}

/* The first device call of a clique sets the executor up and starts its watchdog. Caller
 * holds cl->mu. */
void br_cuda_ensure_setup(br_clique_t *cl, int rank)
{
    const br_cuda_t *cu = br_cuda(NULL);
    char msg[256];
    if (cl->setup_done) {
        return;
    }
    cl->setup_done = 1;
    int mode = br_cuda_capture_relax(cu);
    cl->setup_res = br_cuda_setup(cl, rank);
    br_cuda_capture_restore(cu, mode);
    if (cl->setup_res != ncclSuccess) {
        snprintf(msg, sizeof(msg),
                 "rank %d (host %s): the CUDA executor could not be set up (see the warning "
                 "above)",
                 rank, br_host_name());
        br_cuda_clique_fail(cl, cl->setup_res, msg);
    } else if (pthread_create(&cl->watchdog, NULL, watchdog_main, cl) == 0) {
        cl->watchdog_started = 1;
    }
}

/* Rank r's next deposit: its operations (one stream) into its queue, and the event that
 * says its stream reached them. The ticket is taken only when all of that worked. Caller
 * holds cl->mu and made sure the queue has room. */
ncclResult_t br_cuda_dep_add(br_clique_t *cl, int r, const br_op_t *ops, int nops)
{
    const br_cuda_t *cu = br_cuda(NULL);
    br_cuda_rank_t *q = &cl->rank[r];
    br_cuda_dep_t *d = &q->q[q->next % BR_CUDA_QUEUE];

    if (d->cap < nops) {
        br_op_t *p = realloc(d->ops, (size_t)nops * sizeof(*p));
        if (p == NULL) {
            return ncclSystemError;
        }
        d->ops = p;
        d->cap = nops;
    }
    memcpy(d->ops, ops, (size_t)nops * sizeof(*ops));
    d->nops = nops;
    d->has_coll = 0;
    for (int i = 0; i < nops; i++) {
        d->has_coll |= br_func_is_collective(ops[i].func);
    }
    d->stream = (br_cu_stream_t)ops[0].stream;
    d->since_ns = br_time_ns();
    BR_CHECK(br_cuda_check(cu->CtxSetCurrent(cl->devs[cl->rank_dev[r]].ctx), "cuCtxSetCurrent", r));
    BR_CHECK(br_cuda_check(cu->EventRecord(q->arrive[q->next % BR_CUDA_QUEUE], d->stream),
                           "cuEventRecord", r));
    q->next++;
    return ncclSuccess;
}

/* The k-th operation of kind func among ops (k counts from 0); the caller knows it exists. */
static const br_op_t *one_rank_nth(const br_op_t *ops, int nops, br_func_t func, int k)
{
    for (int i = 0; i < nops; i++) {
        if (ops[i].func == func && k-- == 0) {
            return &ops[i];
        }
    }
    return NULL;
}

/* A communicator of one rank: its collectives are copies from input to output (none in
 * place), and its sends to itself copies into the matching receives, put on each call's
 * stream at once, as NCCL's are, with no launch and no wait. Returns 1 when it took the
 * calls (*res says how that went), 0 when they need the executor: a PreMulSum that scales,
 * sends and receives that do not pair up, a profiler (its events come from the launch). */
static int one_rank(br_exec_comm_t *ec, const br_op_t *ops, int nops, ncclResult_t *res)
{
    const br_cuda_t *cu = br_cuda(NULL);
    br_clique_t *cl = ec->cuda;
    br_cu_context_t saved = NULL;

    int nsend = 0, nrecv = 0;
    if (ec->nranks != 1 || cl == NULL || ec->stage != NULL || ec->prof != NULL) {
        return 0;
    }
    for (int i = 0; i < nops; i++) {
        const br_redop_t *r = &ops[i].redop;
        /* A scaling by one (float ncclAvg of one rank) copies too; any other scale does not. */
        int scales = r->kind == BR_RED_PREMULSUM &&
                     (r->scalar_dev != NULL ||
                      (br_type_is_float(r->type) ? r->scalar_f != 1.0 : r->scalar_i != 1));
        nsend += ops[i].func == BR_FUNC_SEND;
        nrecv += ops[i].func == BR_FUNC_RECV;
        if (scales || (!br_func_is_collective(ops[i].func) && ops[i].func != BR_FUNC_SEND &&
                       ops[i].func != BR_FUNC_RECV)) {
            return 0;
        }
    }
    /* Sends to itself pair with its receives in call order; unpaired or unequal ones are
     * left to the executor, which says what is wrong. */
    if (nsend != nrecv) {
        return 0;
    }
    for (int k = 0; k < nsend; k++) {
        const br_op_t *snd = one_rank_nth(ops, nops, BR_FUNC_SEND, k);
        const br_op_t *rcv = one_rank_nth(ops, nops, BR_FUNC_RECV, k);
        if (br_op_bytes(snd) != br_op_bytes(rcv)) {
            return 0;
        }
    }
    cu->CtxGetCurrent(&saved);
    pthread_mutex_lock(&cl->mu);
    br_cuda_ensure_setup(cl, ec->rank);
    if (cl->failed) {
        br_exec_fail(ec, ncclInvalidUsage, "%s", cl->fail_msg);
        *res = ec->error;
        goto out;
    }
    *res = br_cuda_check(cu->CtxSetCurrent(cl->devs[cl->rank_dev[ec->rank]].ctx),
                         "cuCtxSetCurrent", ec->rank);
    for (int i = 0, k = 0; i < nops && *res == ncclSuccess; i++) {
        const void *from = ops[i].sendbuff;
        if (ops[i].func == BR_FUNC_SEND) {
            continue; /* copied with its receive */
        } else if (ops[i].func == BR_FUNC_RECV) {
            from = one_rank_nth(ops, nops, BR_FUNC_SEND, k++)->sendbuff;
        }
        size_t bytes = br_op_bytes(&ops[i]);
        if (bytes > 0 && from != ops[i].recvbuff) {
            *res = br_cuda_check(cu->MemcpyAsync((br_cu_ptr_t)(uintptr_t)ops[i].recvbuff,
                                                 (br_cu_ptr_t)(uintptr_t)from, bytes,
                                                 (br_cu_stream_t)ops[i].stream),
                                 "cuMemcpyAsync (one rank)", ec->rank);
        }
    }
out:
    pthread_mutex_unlock(&cl->mu);
    cu->CtxSetCurrent(saved);
    return 1;
}

ncclResult_t br_exec_cuda_deposit(br_exec_comm_t *ec, const br_op_t *ops, int nops,
                                  uint64_t *ticket_p)
{
    br_clique_t *cl = ec->cuda;
    const br_cuda_t *cu = br_cuda(NULL);
    br_cu_stream_t stream = (br_cu_stream_t)ops[0].stream;
    int capturing = BR_CU_CAPTURE_STATUS_NONE;
    ncclResult_t res = ncclSuccess;

    for (int i = 1; i < nops; i++) {
        if (ops[i].stream != ops[0].stream) {
            BR_WARN(NCCL_COLL,
                    "rank %d (host %s): the device calls of one group use different streams "
                    "(%p and %p): Braid orders one rank's group on one stream",
                    ec->rank, br_host_name(), ops[0].stream, ops[i].stream);
            return ncclInvalidUsage;
        }
    }
    if (ec->stage != NULL) {
        return br_exec_cuda_stage_deposit(ec, ops, nops, ticket_p);
    }
    if (one_rank(ec, ops, nops, &res)) {
        *ticket_p = BR_CUDA_NO_TICKET;
        return res;
    }
    if (cu->StreamIsCapturing(stream, &capturing) == BR_CU_SUCCESS &&
        capturing != BR_CU_CAPTURE_STATUS_NONE) {
        /* Callers send capturing calls to br_exec_cuda_capture. */
        BR_WARN(NCCL_COLL, "rank %d: %s on a capturing stream reached the eager path", ec->rank,
                br_func_name(ops[0].func));
        return ncclInternalError;
    }
    /* The executor switches contexts (a rank's device, the launch devices); the caller's
     * current context is put back before returning, as NCCL leaves the current device. */
    br_cu_context_t saved = NULL;
    cu->CtxGetCurrent(&saved);
    pthread_mutex_lock(&cl->mu);
    br_cuda_ensure_setup(cl, ec->rank);
    br_cuda_rank_t *q = &cl->rank[ec->rank];
    /* Room in the rank's queue: a rank BR_CUDA_QUEUE calls ahead of a peer waits here. */
    while (!cl->failed && q->next - q->launched >= BR_CUDA_QUEUE) {
        pthread_cond_wait(&cl->cv, &cl->mu);
    }
    if (cl->failed) {
        br_exec_fail(ec, ncclInvalidUsage, "%s", cl->fail_msg);
        res = ec->error;
        goto out;
    }
    uint64_t t = q->next;
    BR_CHECK_GOTO(br_cuda_dep_add(cl, ec->rank, ops, nops), res, out);
    *ticket_p = t;
    res = br_cuda_launch_ready(cl, ec->rank);
    if (res == ncclSuccess && ec->error != ncclSuccess) {
        res = ec->error;
    }
out:
    pthread_mutex_unlock(&cl->mu);
    cu->CtxSetCurrent(saved);
    return res;
}

/* Until ticket t of rank r is launched, or the clique failed (the watchdog fails deposits
 * whose peers do not call within BRAID_CUDA_WAIT_TIMEOUT): spins a little, for the usual
 * case of ranks' threads calling together, then sleeps on cl->cv. Caller holds cl->mu. */
static void wait_launched(br_clique_t *cl, int r, uint64_t t)
{
    uint64_t *launched = &cl->rank[r].launched;
    if (__atomic_load_n(launched, __ATOMIC_ACQUIRE) > t) {
        return;
    }
    pthread_mutex_unlock(&cl->mu);
    for (int i = 0; i < 2000 && __atomic_load_n(launched, __ATOMIC_ACQUIRE) <= t &&
                    !__atomic_load_n(&cl->failed, __ATOMIC_ACQUIRE);
         i++) {
        if (i >= 200) {
            sched_yield();
        }
    }
    pthread_mutex_lock(&cl->mu);
    while (*launched <= t && !cl->failed) {
        pthread_cond_wait(&cl->cv, &cl->mu);
    }
}

ncclResult_t br_exec_cuda_wait(br_exec_comm_t *ec, uint64_t ticket, void *stream)
{
    br_clique_t *cl = ec->cuda;
    const br_cuda_t *cu = br_cuda(NULL);
    br_cu_context_t saved = NULL;
    ncclResult_t res;

    if (ec->stage != NULL) {
        return br_exec_cuda_stage_wait(ec, ticket, stream);
    }
    if (ticket == BR_CUDA_NO_TICKET) {
        return ncclSuccess; /* done on its stream already (one rank) */
    }
    cu->CtxGetCurrent(&saved);
    pthread_mutex_lock(&cl->mu);
    wait_launched(cl, ec->rank, ticket);
    if (cl->rank[ec->rank].launched <= ticket) {
        br_exec_fail(ec, ncclInvalidUsage, "%s", cl->fail_msg);
        res = ec->error;
        goto out;
    }
    res = br_cuda_check(cu->CtxSetCurrent(cl->devs[cl->rank_dev[ec->rank]].ctx), "cuCtxSetCurrent",
                        ec->rank);
    if (res == ncclSuccess) {
        res = br_cuda_check(
            cu->StreamWaitEvent((br_cu_stream_t)stream,
                                cl->rank[ec->rank].done[ticket % BR_CUDA_QUEUE], 0),
            "cuStreamWaitEvent", ec->rank);
    }
out:
    pthread_mutex_unlock(&cl->mu);
    cu->CtxSetCurrent(saved);
    return res;
}

ncclResult_t br_exec_cuda_submit(br_exec_comm_t *ec, const br_op_t *ops, int nops)
{
    uint64_t t = 0;
    if (br_exec_cuda_capturing(ops[0].stream)) {
        return br_exec_cuda_capture(&ec, &ops, &nops, 1);
    }
    BR_CHECK(br_exec_cuda_deposit(ec, ops, nops, &t));
    return br_exec_cuda_wait(ec, t, ops[0].stream);
}

ncclResult_t br_exec_cuda_async_error(br_exec_comm_t *ec)
{
    br_clique_t *cl = ec->cuda;
    if (ec->stage != NULL) {
        return br_exec_cuda_stage_async_error(ec);
    }
    if (cl != NULL) {
        pthread_mutex_lock(&cl->mu);
        poll_status(cl, 0);
        check_stalled(cl);
        pthread_mutex_unlock(&cl->mu);
    }
    return ec->error;
}

void br_exec_cuda_abort(br_exec_comm_t *ec)
{
    br_clique_t *cl = ec->cuda;
    char msg[256];
    br_cu_context_t saved = NULL;
    if (ec->stage != NULL) {
        br_exec_cuda_stage_abort(ec);
        return;
    }
    if (cl == NULL) {
        return;
    }
    br_cuda(NULL)->CtxGetCurrent(&saved);
    pthread_mutex_lock(&cl->mu);
    if (cl->flags != NULL) {
        /* Kernels stop waiting, so the launch streams drain and release_streams returns. */
        __atomic_store_n(&cl->flags->abort_flag, 1u, __ATOMIC_RELEASE);
    }
    snprintf(msg, sizeof(msg), "rank %d (host %s): communicator aborted (ncclCommAbort)", ec->rank,
             br_host_name());
    br_cuda_clique_fail(cl, ncclRemoteError, msg);
    pthread_mutex_unlock(&cl->mu);
    br_cuda(NULL)->CtxSetCurrent(saved);
}

int br_exec_cuda_pending(br_exec_comm_t *ec)
{
    br_clique_t *cl = ec->cuda;
    if (ec->stage != NULL) {
        return br_exec_cuda_stage_pending(ec);
    }
    if (cl == NULL) {
        return 0;
    }
    pthread_mutex_lock(&cl->mu);
    /* Deposits not launched yet, or the last launched one's kernels not finished. */
    const br_cuda_rank_t *q = &cl->rank[ec->rank];
    int pending = q->next != q->launched;
    if (!pending && q->launched > 0) {
        br_cu_context_t saved = NULL;
        br_cuda(NULL)->CtxGetCurrent(&saved);
        br_cuda(NULL)->CtxSetCurrent(cl->devs[0].ctx);
        pending = br_cuda(NULL)->EventQuery(q->done[(q->launched - 1) % BR_CUDA_QUEUE]) ==
                  BR_CU_ERROR_NOT_READY;
        br_cuda(NULL)->CtxSetCurrent(saved);
    }
    pthread_mutex_unlock(&cl->mu);
    return pending;
}

void br_exec_cuda_detach(br_exec_comm_t *ec)
{
    br_clique_t *cl = ec->cuda;
    if (cl == NULL) {
        return;
    }
    ec->cuda = NULL;
    pthread_mutex_lock(&registry_mu);
    pthread_mutex_lock(&cl->mu);
    cl->ec[ec->rank] = NULL;
    int last = --cl->refs == 0;
    if (last) {
        cl->stop = 1;
        pthread_cond_broadcast(&cl->cv);
    }
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
    if (cl->watchdog_started) {
        pthread_join(cl->watchdog, NULL);
    }
    br_cu_context_t saved = NULL;
    br_cuda(NULL)->CtxGetCurrent(&saved);
    br_cuda_teardown(cl);
    br_cuda(NULL)->CtxSetCurrent(saved);
    for (int r = 0; r < cl->nranks; r++) {
        for (int i = 0; i < BR_CUDA_QUEUE; i++) {
            free(cl->rank[r].q[i].ops);
        }
    }
    if (cl->graph != NULL) {
        br_graph_free(cl->graph);
    }
    free(cl->conn_key);
    free(cl->ec);
    free(cl->rank_dev);
    free(cl->rank);
    pthread_mutex_destroy(&cl->mu);
    pthread_cond_destroy(&cl->cv);
    free(cl);
}

size_t br_exec_cuda_mem_bytes(const br_exec_comm_t *ec)
{
    br_clique_t *cl = ec->cuda;
    size_t bytes = 0;
    if (ec->stage != NULL) {
        return br_exec_cuda_stage_mem_bytes(ec);
    }
    if (cl == NULL) {
        return 0;
    }
    pthread_mutex_lock(&cl->mu);
    /* The FIFOs live in their receivers' GPUs: count those this rank receives into. */
    for (int i = 0; cl->setup_done && i < cl->nconn; i++) {
        bytes += cl->conn_key[3 * i + 2] == ec->rank ? br_cuda_fifo_bytes(cl) : 0;
    }
    pthread_mutex_unlock(&cl->mu);
    return bytes;
}
