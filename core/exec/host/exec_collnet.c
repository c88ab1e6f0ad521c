/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CollNet on the host executor: AllReduce, and AllGather / ReduceScatter where every
 * rank's plugin has iallgather / ireducescatter. The data is cut into chunks that fit the
 * staging buffers; each chunk is copied into a registered send buffer, handed to the
 * plugin, polled with test, and its result copied from the registered receive buffer into
 * the output. Two staging pairs keep one chunk in the network while the other is copied.
 * Every rank posts the same chunks in the same order (the plugin matches them by order, as
 * NCCL's proxy does). A plugin error or a completion of the wrong size fails the call,
 * naming the rank, host, operation and plugin.
 *
 * AllReduce: a chunk is stage_bytes of the input. AllGather / ReduceScatter: a chunk is a
 * window of the concatenation of every rank's block (nranks x count elements: the
 * AllGather output, the ReduceScatter input), stage_bytes at most, in the layout NCCL's
 * proxy passes (src/transport/coll_net.cc, docs/plugins.md): bytesPerRank is one block,
 * windowOffset and windowBytes the window's place in the concatenation, and the one part
 * holds the window (iallgather's recvParts, ireducescatter's sendParts). sendData
 * (iallgather) holds this rank's bytes inside the window, recvData (ireducescatter) gets
 * them reduced: none when the window does not reach this rank's block.
 *
 * Threading: called by the thread that runs the communicator's batch; the plugin's data
 * path (iallreduce, iallgather, ireducescatter, test) is only ever called by that one
 * thread at a time.
 */
#include <stdio.h>
#include <string.h>

#include "exec_int.h"
#include "util.h"

/* The plugin's name of a reduction plan allowed on collnet (sum, prod, max, min). */
static ncclRedOp_t collnet_op(const br_redop_t *r)
{
    switch (r->kind) {
    case BR_RED_PROD: return ncclProd;
    case BR_RED_MAX: return ncclMax;
    case BR_RED_MIN: return ncclMin;
    default: return ncclSum;
    }
}

static void collnet_fail(br_exec_comm_t *ec, const br_work_t *w, ncclResult_t res, const char *call,
                         const char *why)
{
    const br_exec_collnet_t *x = ec->collnet;
    br_exec_fail(ec, res == ncclSuccess ? ncclSystemError : res,
                 "rank %d (host %s): %s #%llu (count %zu, %s, %s) through collnet %s (v%d): %s %s",
                 ec->rank, br_host_name(), br_func_name(w->op.func), (unsigned long long)w->op.seq,
                 w->op.count, br_type_name(w->op.type), br_red_kind_name(w->op.redop.kind),
                 x->cn->name, x->cn->version, call, why);
}

/* Elements the chunks cut: the AllReduce input, or the concatenation of every block. */
static size_t collnet_total(const br_exec_comm_t *ec, const br_work_t *w)
{
    return w->op.func == BR_FUNC_ALLREDUCE ? w->op.count : w->op.count * (size_t)ec->nranks;
}

/* How many elements of this rank's block lie in the window [first, first + n) of the
 * concatenation, and where they start in the block (*in_p). */
static size_t collnet_own(const br_exec_comm_t *ec, const br_work_t *w, size_t first, size_t n,
                          size_t *in_p)
{
    size_t lo = (size_t)ec->rank * w->op.count, hi = lo + w->op.count;
    size_t b = first > lo ? first : lo, e = first + n < hi ? first + n : hi;

    *in_p = b < e ? b - lo : 0;
    return b < e ? e - b : 0;
}

/* Poll the chunk in staging pair s; copy its result out when done. <0 on error. */
static int collnet_finish(br_exec_comm_t *ec, br_work_t *w, int s, size_t per)
{
    br_exec_collnet_t *x = ec->collnet;
    size_t esize = br_type_size(w->op.type), total = collnet_total(ec, w);
    size_t first = w->cn_chunk[s] * per;
    size_t n = total - first < per ? total - first : per, in = 0, own = 0;
    size_t block = w->op.count * esize;
    int done = 0, size = -1;
    char why[160];
    ncclResult_t res;

    res = x->cn->ops->test(x->cn, w->cn_req[s], &done, &size);
    if (res != ncclSuccess) {
        snprintf(why, sizeof(why), "failed: %s", br_plugin_result_str(res));
        collnet_fail(ec, w, res, "test", why);
        return -1;
    }
    if (!done) {
        return 0;
    }
    w->cn_req[s] = NULL;
    if (w->op.func == BR_FUNC_REDUCESCATTER) {
        /* What landed in recvData: this rank's part of the window. NCCL never reads this
         * size; the SHARP plugin reports bytesPerRank instead, so that passes too. */
        own = collnet_own(ec, w, first, n, &in);
        if (size < 0 || ((size_t)size != own * esize && (size_t)size != block)) {
            snprintf(why, sizeof(why),
                     "completed a window with %zu bytes of this rank's block with size %d "
                     "(neither those bytes nor bytesPerRank %zu)",
                     own * esize, size, block);
            collnet_fail(ec, w, ncclSystemError, "test", why);
            return -1;
        }
        memcpy((char *)w->op.recvbuff + in * esize, x->recv[s], own * esize);
        w->cn_done++;
        return 1;
    }
    if (size < 0 || (size_t)size != n * esize) {
        /* A plugin that lies about what it delivered: the data cannot be trusted. */
        snprintf(why, sizeof(why), "completed a chunk of %zu bytes with size %d", n * esize, size);
        collnet_fail(ec, w, ncclSystemError, "test", why);
        return -1;
    }
    /* AllReduce: the chunk of the output; AllGather: the window of the concatenation,
     * which is the output. */
    memcpy((char *)w->op.recvbuff + first * esize, x->recv[s], n * esize);
    w->cn_done++;
    return 1;
}

/* Stage and post the next chunk in the free pair s. 0 when the plugin asks to retry. */
static int collnet_post(br_exec_comm_t *ec, br_work_t *w, int s, size_t per)
{
    br_exec_collnet_t *x = ec->collnet;
    size_t esize = br_type_size(w->op.type), total = collnet_total(ec, w);
    size_t first = w->cn_next * per;
    size_t n = total - first < per ? total - first : per, in = 0;
    size_t wb = n * esize, block = w->op.count * esize;
    size_t own = collnet_own(ec, w, first, n, &in);
    br_collnet_part_t part = {.size = wb};
    void *req = NULL;
    char why[64];
    const char *call;
    ncclResult_t res;

    if (!w->cn_staged[s]) {
        if (w->op.func == BR_FUNC_ALLGATHER) { /* this rank's bytes in the window, maybe none */
            memcpy(x->send[s], (const char *)w->op.sendbuff + in * esize, own * esize);
        } else { /* the chunk of the input (ReduceScatter: of the concatenation) */
            memcpy(x->send[s], (const char *)w->op.sendbuff + first * esize, wb);
        }
        w->cn_staged[s] = 1;
    }
    if (w->op.func == BR_FUNC_ALLGATHER) {
        call = "iallgather";
        part.mhandle = x->recv_mh[s];
        part.address = x->recv[s];
        res = x->cn->ops->iallgather(x->cn, x->coll_comm, x->send[s], 1, &part, block,
                                     first * esize, wb, x->send_mh[s], &req);
    } else if (w->op.func == BR_FUNC_REDUCESCATTER) {
        call = "ireducescatter";
        part.mhandle = x->send_mh[s];
        part.address = x->send[s];
        res = x->cn->ops->ireducescatter(x->cn, x->coll_comm, 1, &part, x->recv[s], block,
                                         first * esize, wb, w->op.type, collnet_op(&w->op.redop),
                                         x->recv_mh[s], &req);
    } else {
        call = "iallreduce";
        res = x->cn->ops->iallreduce(x->cn, x->coll_comm, x->send[s], x->recv[s], n, w->op.type,
                                     collnet_op(&w->op.redop), x->send_mh[s], x->recv_mh[s], &req);
    }
    if (res != ncclSuccess) {
        snprintf(why, sizeof(why), "of %zu elements failed: %s", n, br_plugin_result_str(res));
        collnet_fail(ec, w, res, call, why);
        return -1;
    }
    if (req == NULL) {
        return 0; /* the plugin has no room now: the same chunk is posted again later */
    }
    w->cn_staged[s] = 0;
    w->cn_req[s] = req;
    w->cn_chunk[s] = w->cn_next++;
    return 1;
}

int br_work_collnet(br_exec_queue_t *q, br_work_t *w, int *done_p)
{
    br_exec_comm_t *ec = q->ec;
    /* stage_bytes is a multiple of 64 (comm_collnet.c), so a chunk is whole elements. */
    size_t per = ec->collnet->stage_bytes / br_type_size(w->op.type);
    size_t nchunks = (collnet_total(ec, w) + per - 1) / per;
    int moved = 0, r;

    /* Chunks complete in the order they were posted (plugin order): poll the oldest. */
    for (int i = 0; i < BR_COLLNET_NBUF; i++) {
        int s = (int)(w->cn_done % BR_COLLNET_NBUF);
        if (w->cn_req[s] == NULL || w->cn_chunk[s] != w->cn_done) {
            break;
        }
        if ((r = collnet_finish(ec, w, s, per)) < 0) {
            return -1;
        }
        moved += r;
        if (r == 0) {
            break;
        }
    }
    for (int i = 0; i < BR_COLLNET_NBUF && w->cn_next < nchunks; i++) {
        int s = (int)(w->cn_next % BR_COLLNET_NBUF);
        if (w->cn_req[s] != NULL) {
            break;
        }
        if ((r = collnet_post(ec, w, s, per)) < 0) {
            return -1;
        }
        moved += r;
        if (r == 0) {
            break;
        }
    }
    *done_p = w->cn_done == nchunks;
    return moved; /* a wait is on the plugin, not a peer: exec_health.c names it */
}
