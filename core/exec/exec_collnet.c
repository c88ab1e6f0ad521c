/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CollNet AllReduce on the host executor: the input is cut into chunks of the staging
 * buffers' size; each chunk is copied into a registered send buffer, handed to the
 * plugin's iallreduce, polled with test, and its result copied from the registered
 * receive buffer into the output. Two staging pairs keep one chunk in the network while
 * the other is copied. Every rank posts the same chunks in the same order (the plugin
 * matches them by order, as NCCL's proxy does). A plugin error or a completion of the
 * wrong size fails the call, naming the rank, host, operation and plugin.
 *
 * Threading: called by the thread that runs the communicator's batch; the plugin's data
 * path (iallreduce, test) is only ever called by that one thread at a time.
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
    if (size < 0 || (size_t)size != n * esize) {
        /* A plugin that lies about what it delivered: the data cannot be trusted. */
        snprintf(why, sizeof(why), "completed a chunk of %zu bytes with size %d", n * esize, size);
        collnet_fail(ec, w, ncclSystemError, "test", why);
        return -1;
    }
    memcpy((char *)w->op.recvbuff + first * esize, x->recv[s], n * esize);
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

    if (!w->cn_staged[s]) {
        memcpy(x->send[s], (const char *)w->op.sendbuff + first * esize, n * esize);
        w->cn_staged[s] = 1;
    }
    res = x->cn->ops->iallreduce(x->cn, x->coll_comm, x->send[s], x->recv[s], n, w->op.type,
                                 collnet_op(&w->op.redop), x->send_mh[s], x->recv_mh[s], &req);
    if (res != ncclSuccess) {
        snprintf(why, sizeof(why), "of %zu elements failed: %s", n, br_plugin_result_str(res));
        collnet_fail(ec, w, res, "iallreduce", why);
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
    size_t nchunks = (w->op.count + per - 1) / per;
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
