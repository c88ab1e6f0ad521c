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
 * window, the same range [off, off + wb) of every rank's block (count elements), with
 * nranks x wb at most stage_bytes. AllGather sends this rank's window (wb bytes) and gets
 * every rank's, in rank order, in one part of nranks x wb bytes; ReduceScatter sends every
 * block's window in rank order (one part of nranks x wb bytes) and gets the reduced window
 * of this rank's block (wb bytes). bytesPerRank is the whole block, windowOffset off,
 * windowBytes wb (docs/plugins.md).
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

/* Poll the chunk in staging pair s; copy its result out when done. <0 on error. */
static int collnet_finish(br_exec_comm_t *ec, br_work_t *w, int s, size_t per)
{
    br_exec_collnet_t *x = ec->collnet;
    size_t esize = br_type_size(w->op.type);
    size_t first = w->cn_chunk[s] * per;
    size_t n = w->op.count - first < per ? w->op.count - first : per;
    int done = 0, size = -1;
    char why[96];
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
    size_t want = n * esize * (w->op.func == BR_FUNC_ALLGATHER ? (size_t)ec->nranks : 1);
    if (size < 0 || (size_t)size != want) {
        /* A plugin that lies about what it delivered: the data cannot be trusted. */
        snprintf(why, sizeof(why), "completed a chunk of %zu bytes with size %d", want, size);
        collnet_fail(ec, w, ncclSystemError, "test", why);
        return -1;
    }
    if (w->op.func == BR_FUNC_ALLGATHER) { /* rank r's window lands in block r */
        for (int r = 0; r < ec->nranks; r++) {
            memcpy((char *)w->op.recvbuff + ((size_t)r * w->op.count + first) * esize,
                   x->recv[s] + (size_t)r * n * esize, n * esize);
        }
    } else {
        memcpy((char *)w->op.recvbuff + first * esize, x->recv[s], n * esize);
    }
    w->cn_done++;
    return 1;
}

/* Stage and post the next chunk in the free pair s. 0 when the plugin asks to retry. */
static int collnet_post(br_exec_comm_t *ec, br_work_t *w, int s, size_t per)
{
    br_exec_collnet_t *x = ec->collnet;
    size_t esize = br_type_size(w->op.type);
    size_t first = w->cn_next * per;
    size_t n = w->op.count - first < per ? w->op.count - first : per;
    void *req = NULL;
    char why[64];
    ncclResult_t res;

    size_t wb = n * esize, block = w->op.count * esize, nr = (size_t)ec->nranks;
    br_collnet_part_t part;
    const char *call;

    if (!w->cn_staged[s]) {
        if (w->op.func == BR_FUNC_REDUCESCATTER) { /* every block's window, in rank order */
            for (size_t r = 0; r < nr; r++) {
                memcpy(x->send[s] + r * wb,
                       (const char *)w->op.sendbuff + r * block + first * esize, wb);
            }
        } else {
            memcpy(x->send[s], (const char *)w->op.sendbuff + first * esize, wb);
        }
        w->cn_staged[s] = 1;
    }
    if (w->op.func == BR_FUNC_ALLGATHER) {
        call = "iallgather";
        part =
            (br_collnet_part_t){.mhandle = x->recv_mh[s], .address = x->recv[s], .size = nr * wb};
        res = x->cn->ops->iallgather(x->cn, x->coll_comm, x->send[s], 1, &part, block,
                                     first * esize, wb, x->send_mh[s], &req);
    } else if (w->op.func == BR_FUNC_REDUCESCATTER) {
        call = "ireducescatter";
        part =
            (br_collnet_part_t){.mhandle = x->send_mh[s], .address = x->send[s], .size = nr * wb};
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
    size_t per = ec->collnet->stage_bytes / br_type_size(w->op.type);
    size_t nchunks;
    int moved = 0, r;

    if (w->op.func != BR_FUNC_ALLREDUCE) { /* a window of every rank's block per chunk */
        per /= (size_t)ec->nranks;
    }
    if (per == 0) { /* plan offers collnet only where an element per rank fits */
        collnet_fail(ec, w, ncclInternalError, "staging",
                     "buffers too small for one element per rank");
        return -1;
    }
    nchunks = (w->op.count + per - 1) / per;

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
