/* SPDX-License-Identifier: Apache-2.0 */
/*
 * net-ib data path: registrations, isend / irecv / iflush / test.
 *
 * Receiver: irecv takes FIFO slot seq % NETIB_NREQ, posts one receive work request on
 * each queue pair the slot uses (all of them when data is split, else queue pair
 * seq % nqps), then RDMA WRITEs the slot's entries into the sender's FIFO. The request
 * completes when every one of those queue pairs delivered its immediate.
 *
 * Sender: isend queues the request; progress takes the next slot once its entries carry
 * the expected sequence number, matches each entry to the oldest queued isend with its
 * tag, and posts the data writes. The last work request on each queue pair of the slot is
 * an RDMA WRITE WITH IMMEDIATE and the only signalled one, so the slot's sends complete
 * when each of those completed. A message that does not fit the buffer it matched is
 * refused on both sides: the immediate carries NETIB_IMM_ERROR instead of a size.
 *
 * Work request ids: kind in the low 8 bits, slot or request index above.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netib.h"
#include "param_lite.h"

#include "common/check.h"

enum { WR_SEND = 1, WR_RECV, WR_FIFO, WR_FLUSH };

#define WR_ID(kind, idx) ((uint64_t)(kind) | ((uint64_t)(idx) << 8))

static netib_req_t *req_get(netib_comm_t *c, int type)
{
    netib_req_t *r;

    if (c->nfree == 0) {
        return NULL;
    }
    r = c->free_reqs[--c->nfree];
    memset(r, 0, sizeof(*r));
    r->comm = c;
    r->type = (uint8_t)type;
    return r;
}

static void req_release_mrs(netib_req_t *r)
{
    for (int i = 0; i < NETIB_MAX_RECVS; i++) {
        if (r->tmp_mr[i] != NULL) {
            netib_mr_put(r->tmp_mr[i]);
            r->tmp_mr[i] = NULL;
        }
    }
}

static void req_put(netib_req_t *r)
{
    netib_comm_t *c = r->comm;

    req_release_mrs(r);
    r->state = NETIB_REQ_FREE;
    c->free_reqs[c->nfree++] = r;
}

/* The state a finished request moves to (and the count of outstanding ones). */
static void req_finish(netib_req_t *r, int ok)
{
    r->state = ok ? NETIB_REQ_DONE : NETIB_REQ_ERROR;
    r->comm->outstanding--;
    req_release_mrs(r); /* the buffers are the caller's again */
}

void netib_data_release_all(netib_comm_t *c)
{
    for (int i = 0; c->reqs != NULL && i < c->nreqs; i++) {
        req_release_mrs(&c->reqs[i]);
    }
}

/* The key of data for this comm's device: mhandle's, or a registration made for the
 * request (kept in *tmp until it completes). */
static ncclResult_t key_for(netib_comm_t *c, void *data, size_t size, netib_mr_t *mh,
                            netib_mr_t **tmp, struct ibv_mr **mr_p)
{
    if (size == 0) {
        *mr_p = NULL;
        return ncclSuccess;
    }
    if (mh != NULL) {
        *mr_p = mh->mr;
        return ncclSuccess;
    }
    BR_CHECK(netib_mr_get(c->dev, data, size, 0, tmp));
    *mr_p = (*tmp)->mr;
    return ncclSuccess;
}

/* registration ---------------------------------------------------------------------- */

ncclResult_t netib_data_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle)
{
    netib_comm_t *c = comm;

    *mhandle = NULL;
    if (type != NCCL_PTR_HOST &&
        !(type == NCCL_PTR_CUDA && (c->dev->ptr_support & NCCL_PTR_CUDA))) {
        BR_WARN(NCCL_NET,
                "NET/IB : %s:%d: regMr of memory type %d, which the device does not "
                "offer (ptrSupport %#x)",
                c->dev->name, c->dev->port, type, c->dev->ptr_support);
        return ncclInvalidUsage;
    }
    return netib_mr_get(c->dev, data, size ? size : 1, type == NCCL_PTR_CUDA,
                        (netib_mr_t **)mhandle);
}

ncclResult_t netib_data_reg_mr_dmabuf(void *comm, void *data, size_t size, int type,
                                      uint64_t offset, int fd, void **mhandle)
{
    netib_comm_t *c = comm;

    *mhandle = NULL;
    if (type == NCCL_PTR_HOST) {
        return netib_data_reg_mr(comm, data, size, type, mhandle);
    }
    if (type != NCCL_PTR_CUDA || !c->dev->dmabuf) {
        BR_WARN(NCCL_NET,
                "NET/IB : %s:%d: regMrDmaBuf of memory type %d: dma-buf is not "
                "offered on this device",
                c->dev->name, c->dev->port, type);
        return ncclInvalidUsage;
    }
    return netib_mr_dmabuf(c->dev, data, size, offset, fd, (netib_mr_t **)mhandle);
}

ncclResult_t netib_data_dereg_mr(void *comm, void *mhandle)
{
    (void)comm;
    if (mhandle != NULL) {
        netib_mr_put(mhandle);
    }
    return ncclSuccess;
}

/* completions ----------------------------------------------------------------------- */

static const char *wr_kind_str(int kind)
{
    switch (kind) {
    case WR_SEND: return "RDMA write";
    case WR_RECV: return "receive";
    case WR_FIFO: return "FIFO write";
    case WR_FLUSH: return "flush read";
    default: return "work request";
    }
}

/* A receive slot's immediate arrived on one of its queue pairs. */
static void recv_event(netib_comm_t *c, int slot, uint32_t imm)
{
    netib_req_t *r = c->recv_slot[slot];

    if (r == NULL) {
        return;
    }
    if (imm & NETIB_IMM_ERROR) {
        if (r->state == NETIB_REQ_POSTED) {
            BR_WARN(NCCL_NET,
                    "NET/IB : %s:%d: peer %s refused receive slot %d: a message did "
                    "not fit the %d-buffer receive posted for it (capacity %zu, sent %u bytes)",
                    c->dev->name, c->dev->port, c->peer, slot, r->n, r->size,
                    imm & ~NETIB_IMM_ERROR);
            /* The comm fails with it: the slot's other immediates may still be on the way. */
            c->recv_slot[slot] = NULL;
            req_finish(r, 0);
            netib_comm_fail(c, ncclInvalidUsage);
        }
        return;
    }
    if (r->n == 1) {
        r->sizes[0] = (int)imm;
    }
    if (--r->events == 0) {
        if (r->n > 1) {
            for (int i = 0; i < r->n; i++) {
                r->sizes[i] = __atomic_load_n(&c->gsizes[slot][i], __ATOMIC_ACQUIRE);
            }
        }
        c->recv_slot[slot] = NULL;
        req_finish(r, 1);
    }
}

static void send_event(netib_comm_t *c, int slot)
{
    if (--c->slots[slot].events == 0) {
        for (int i = 0; i < c->slots[slot].n; i++) {
            netib_req_t *r = c->slots[slot].reqs[i];
            req_finish(r, r->state != NETIB_REQ_ERROR); /* refused ones stay failed */
        }
        c->slots[slot].n = 0;
    }
}

/* Drain the completion queue. Errors fail the comm, naming the queue pair and peer. */
static void poll_cq(netib_comm_t *c)
{
    struct ibv_wc wc[16];
    int n;

    while ((n = ibv_poll_cq(c->cq, 16, wc)) > 0) {
        for (int i = 0; i < n; i++) {
            int kind = (int)(wc[i].wr_id & 0xff), idx = (int)(wc[i].wr_id >> 8);
            if (wc[i].status != IBV_WC_SUCCESS) {
                if (c->err == ncclSuccess) {
                    BR_WARN(NCCL_NET,
                            "NET/IB : %s:%d: %s on QP %#x (%s comm with peer %s) "
                            "failed: %s (status %d, vendor error %#x)",
                            c->dev->name, c->dev->port, wr_kind_str(kind), wc[i].qp_num,
                            c->is_send ? "send" : "receive", c->peer,
                            ibv_wc_status_str(wc[i].status), (int)wc[i].status, wc[i].vendor_err);
                }
                netib_comm_fail(c, ncclRemoteError);
                continue;
            }
            switch (kind) {
            case WR_SEND: send_event(c, idx); break;
            case WR_RECV: recv_event(c, idx, ntohl(wc[i].imm_data)); break;
            case WR_FLUSH: req_finish(&c->reqs[idx], 1); break;
            default: break; /* FIFO writes: nothing waits for them */
            }
        }
    }
    if (n < 0) {
        BR_WARN(NCCL_NET, "NET/IB : %s:%d: ibv_poll_cq failed (peer %s)", c->dev->name,
                c->dev->port, c->peer);
        netib_comm_fail(c, ncclSystemError);
    }
}

/* send ---------------------------------------------------------------------------- */

static int post_send_wr(netib_comm_t *c, struct ibv_qp *qp, struct ibv_send_wr *wr)
{
    struct ibv_send_wr *bad = NULL;
    int e = ibv_post_send(qp, wr, &bad);

    if (e != 0) {
        BR_WARN(NCCL_NET, "NET/IB : %s:%d: ibv_post_send on QP %#x (peer %s) failed: %s",
                c->dev->name, c->dev->port, qp->qp_num, c->peer, strerror(e));
        netib_comm_fail(c, ncclSystemError);
    }
    return e;
}

/* One RDMA write of [buf, buf+len) to remote addr on qp; imm >= 0 makes it the signalled
 * write with immediate that ends the slot on that queue pair. */
static int write_one(netib_comm_t *c, struct ibv_qp *qp, const void *buf, size_t len, uint32_t lkey,
                     uint64_t raddr, uint32_t rkey, int64_t imm, int slot)
{
    struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = (uint32_t)len, .lkey = lkey};
    struct ibv_send_wr wr;

    memset(&wr, 0, sizeof(wr));
    wr.wr_id = WR_ID(WR_SEND, slot);
    wr.sg_list = len > 0 ? &sge : NULL;
    wr.num_sge = len > 0 ? 1 : 0;
    wr.opcode = imm >= 0 ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
    wr.send_flags = imm >= 0 ? IBV_SEND_SIGNALED : 0;
    if (len > 0 && len <= c->max_inline) {
        wr.send_flags |= IBV_SEND_INLINE;
    }
    wr.imm_data = htonl((uint32_t)(imm >= 0 ? imm : 0));
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    return post_send_wr(c, qp, &wr);
}

/* Post the slot's data. reqs[i] goes into entry e[i]. */
static void post_slot(netib_comm_t *c, int slot, netib_req_t **reqs, const netib_fifo_elem_t *e,
                      int n)
{
    int q0 = c->split ? 0 : (int)(c->seq % (uint64_t)c->nqps), nq = c->split ? c->nqps : 1;
    uint32_t imm;
    int refused = 0;
    int has_last[NETIB_MAX_QPS] = {0};

    for (int i = 0; i < n; i++) {
        netib_req_t *r = reqs[i];
        c->slots[slot].reqs[i] = r;
        r->slot = slot;
        r->state = NETIB_REQ_POSTED;
        if (r->size > e[i].size) {
            BR_WARN(NCCL_NET,
                    "NET/IB : %s:%d: send of %zu bytes (tag %d) to peer %s does not "
                    "fit the %llu-byte receive posted for it; refusing it",
                    c->dev->name, c->dev->port, r->size, r->tag, c->peer,
                    (unsigned long long)e[i].size);
            r->state = NETIB_REQ_ERROR;
            refused = 1;
        }
        c->gsizes[slot][i] = (int32_t)r->size;
    }
    c->slots[slot].n = n;
    c->slots[slot].events = nq;
    imm = refused ? NETIB_IMM_ERROR | (uint32_t)(reqs[0]->size & 0x7fffffff)
                  : (n == 1 ? (uint32_t)reqs[0]->size : 0);
    if (!refused) {
        /* Data writes; with n == 1 and no split the data rides on the immediate's write. */
        for (int i = 0; i < n; i++) {
            netib_req_t *r = reqs[i];
            size_t chunk = c->split ? (r->size + (size_t)nq - 1) / (size_t)nq : r->size;
            if (c->split) {
                chunk = (chunk + NETIB_SPLIT_ALIGN - 1) & ~(size_t)(NETIB_SPLIT_ALIGN - 1);
            }
            for (int k = 0; k < nq; k++) {
                size_t off = (size_t)k * chunk, len;
                if (off >= r->size) {
                    break;
                }
                len = r->size - off < chunk ? r->size - off : chunk;
                if (n == 1) { /* the last write on this QP carries the immediate */
                    has_last[k] = 1;
                    if (write_one(c, c->qps[q0 + k], r->data + off, len, r->lkey, e[i].addr + off,
                                  e[i].rkey, imm, slot) != 0) {
                        return;
                    }
                    continue;
                }
                if (write_one(c, c->qps[q0 + k], r->data + off, len, r->lkey, e[i].addr + off,
                              e[i].rkey, -1, slot) != 0) {
                    return;
                }
            }
        }
        if (n > 1) { /* the sizes go ahead of the immediate on the first queue pair */
            if (write_one(c, c->qps[q0], c->gsizes[slot], (size_t)n * sizeof(int32_t),
                          c->gsizes_mr->lkey,
                          c->remote_addr + (uint64_t)slot * sizeof(c->gsizes[0]), c->remote_rkey,
                          -1, slot) != 0) {
                return;
            }
        }
    }
    for (int k = 0; k < nq; k++) { /* queue pairs without a data write of their own */
        if (!has_last[k] &&
            write_one(c, c->qps[q0 + k], NULL, 0, 0, e[0].addr, e[0].rkey, imm, slot) != 0) {
            return;
        }
    }
}

/* Take the next slot(s) whose entries arrived and whose buffers all have an isend. */
static void progress_send(netib_comm_t *c)
{
    while (c->nqueue > 0 && c->err == ncclSuccess) {
        int slot = (int)(c->seq % NETIB_NREQ), pick[NETIB_MAX_RECVS], n;
        netib_fifo_elem_t *e = c->fifo[slot];
        uint64_t want = c->seq + 1;
        netib_req_t *reqs[NETIB_MAX_RECVS];

        if (c->slots[slot].n != 0) {
            break; /* that slot's previous sends have not completed yet */
        }
        /* The receiver writes each entry whole; seq is checked before the rest is read. */
        if (__atomic_load_n(&e[0].seq, __ATOMIC_ACQUIRE) != want) {
            break;
        }
        n = (int)e[0].nreqs;
        if (n < 1 || n > NETIB_MAX_RECVS) {
            BR_WARN(NCCL_NET, "NET/IB : %s:%d: peer %s wrote a FIFO slot of %d buffers",
                    c->dev->name, c->dev->port, c->peer, n);
            netib_comm_fail(c, ncclRemoteError);
            return;
        }
        for (int i = 1; i < n; i++) {
            if (__atomic_load_n(&e[i].seq, __ATOMIC_ACQUIRE) != want) {
                return;
            }
        }
        /* Each entry takes the oldest queued isend with its tag. */
        for (int i = 0; i < n; i++) {
            pick[i] = -1;
            for (int j = 0; j < c->nqueue && pick[i] < 0; j++) {
                int used = 0;
                for (int k = 0; k < i; k++) {
                    used |= pick[k] == j;
                }
                if (!used && c->queue[j]->tag == e[i].tag) {
                    pick[i] = j;
                }
            }
            if (pick[i] < 0) {
                return; /* its isend has not come yet */
            }
            reqs[i] = c->queue[pick[i]];
        }
        for (int j = 0, k = 0; j < c->nqueue; j++) { /* drop the picked ones, keep order */
            int used = 0;
            for (int i = 0; i < n; i++) {
                used |= pick[i] == j;
            }
            if (!used) {
                c->queue[k++] = c->queue[j];
            }
        }
        c->nqueue -= n;
        post_slot(c, slot, reqs, e, n);
        c->seq++;
    }
}

ncclResult_t netib_data_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                              void **request)
{
    netib_comm_t *c = send_comm;
    netib_req_t *r;
    struct ibv_mr *mr;

    *request = NULL;
    if (c->err != ncclSuccess) {
        return c->err;
    }
    if (size > NETIB_MAX_MSG) {
        BR_WARN(NCCL_NET, "NET/IB : send of %zu bytes is over maxP2pBytes %zu", size,
                NETIB_MAX_MSG);
        return ncclInvalidUsage;
    }
    if (c->nqueue == NETIB_MAX_SENDS || (r = req_get(c, NETIB_SEND)) == NULL) {
        progress_send(c);
        return ncclSuccess; /* full: try again later */
    }
    r->data = data;
    r->size = size;
    r->tag = tag;
    if (size > c->max_inline || c->split) {
        ncclResult_t res = key_for(c, data, size, mhandle, &r->tmp_mr[0], &mr);
        if (res != ncclSuccess) {
            req_put(r);
            return res;
        }
        r->lkey = mr ? mr->lkey : 0;
    }
    r->state = NETIB_REQ_QUEUED;
    c->queue[c->nqueue++] = r;
    c->outstanding++;
    progress_send(c);
    *request = r;
    return ncclSuccess;
}

/* receive -------------------------------------------------------------------------- */

ncclResult_t netib_data_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                              void **mhandles, void **request)
{
    netib_comm_t *c = recv_comm;
    int slot = (int)(c->seq % NETIB_NREQ);
    int q0 = c->split ? 0 : (int)(c->seq % (uint64_t)c->nqps), nq = c->split ? c->nqps : 1;
    netib_fifo_elem_t *e = c->fifo[slot];
    struct ibv_send_wr wr;
    struct ibv_sge sge;
    netib_req_t *r;
    ncclResult_t res;

    *request = NULL;
    if (c->err != ncclSuccess) {
        return c->err;
    }
    if (n < 1 || n > NETIB_MAX_RECVS) {
        BR_WARN(NCCL_NET, "NET/IB : irecv of %d buffers; maxRecvs is %d", n, NETIB_MAX_RECVS);
        return ncclInvalidUsage;
    }
    if (c->recv_slot[slot] != NULL || (r = req_get(c, NETIB_RECV)) == NULL) {
        return ncclSuccess; /* NETIB_NREQ receives outstanding: try again later */
    }
    r->n = n;
    r->slot = slot;
    r->events = nq;
    r->size = 0;
    for (int i = 0; i < n; i++) {
        struct ibv_mr *mr = NULL;
        res = key_for(c, data[i], sizes[i], mhandles ? mhandles[i] : NULL, &r->tmp_mr[i], &mr);
        if (res != ncclSuccess) {
            req_put(r);
            return res;
        }
        r->size += sizes[i];
        e[i].addr = (uint64_t)(uintptr_t)data[i];
        e[i].size = sizes[i];
        e[i].rkey = mr ? mr->rkey : 0;
        e[i].tag = tags ? tags[i] : 0;
        e[i].nreqs = (uint32_t)n;
        e[i].seq = c->seq + 1;
    }
    /* Receives first: the immediate must find one (rnr_retry covers a race anyway). */
    for (int k = 0; k < nq; k++) {
        struct ibv_recv_wr rwr, *bad = NULL;
        int err;
        memset(&rwr, 0, sizeof(rwr));
        rwr.wr_id = WR_ID(WR_RECV, slot);
        if ((err = ibv_post_recv(c->qps[q0 + k], &rwr, &bad)) != 0) {
            BR_WARN(NCCL_NET, "NET/IB : %s:%d: ibv_post_recv on QP %#x (peer %s) failed: %s",
                    c->dev->name, c->dev->port, c->qps[q0 + k]->qp_num, c->peer, strerror(err));
            netib_comm_fail(c, ncclSystemError);
            req_put(r);
            return ncclSystemError;
        }
    }
    sge.addr = (uintptr_t)e;
    sge.length = (uint32_t)((size_t)n * sizeof(*e));
    sge.lkey = c->fifo_mr->lkey;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = WR_ID(WR_FIFO, slot);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED | (sge.length <= c->max_inline ? IBV_SEND_INLINE : 0);
    wr.wr.rdma.remote_addr = c->remote_addr + (uint64_t)slot * sizeof(netib_fifo_slot_t);
    wr.wr.rdma.rkey = c->remote_rkey;
    if (post_send_wr(c, c->qps[0], &wr) != 0) {
        req_put(r);
        return ncclSystemError;
    }
    r->state = NETIB_REQ_POSTED;
    c->recv_slot[slot] = r;
    c->outstanding++;
    c->seq++;
    *request = r;
    return ncclSuccess;
}

ncclResult_t netib_data_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                               void **request)
{
    netib_comm_t *c = recv_comm;
    netib_mr_t *mh = NULL;
    int last = -1, gpu = 0;
    struct ibv_send_wr wr, *bad = NULL;
    struct ibv_sge sge;
    netib_req_t *r;
    int e;

    *request = NULL;
    if (c->err != ncclSuccess) {
        return c->err;
    }
    for (int i = 0; i < n; i++) {
        netib_mr_t *m = mhandles ? mhandles[i] : NULL;
        if (sizes[i] > 0 && m != NULL) {
            last = i;
            gpu |= m->cuda;
        }
    }
    if (last < 0 || c->flush_qp == NULL || (!gpu && !netib_param_flush_host())) {
        return ncclSuccess; /* host memory: the data is visible already */
    }
    if ((r = req_get(c, NETIB_FLUSH)) == NULL) {
        BR_WARN(NCCL_NET, "NET/IB : %s:%d: no request left for a flush (peer %s)", c->dev->name,
                c->dev->port, c->peer);
        return ncclInternalError;
    }
    /* A read of the last buffer through the loopback queue pair completes only after
     * every earlier write into that memory has reached it. */
    mh = mhandles[last];
    sge.addr = (uintptr_t)&c->flush_buf;
    sge.length = sizeof(c->flush_buf);
    sge.lkey = c->flush_mr->lkey;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = WR_ID(WR_FLUSH, r - c->reqs);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_READ;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = (uint64_t)(uintptr_t)data[last];
    wr.wr.rdma.rkey = mh->mr->rkey;
    if ((e = ibv_post_send(c->flush_qp, &wr, &bad)) != 0) {
        BR_WARN(NCCL_NET, "NET/IB : %s:%d: flush read on QP %#x failed to post: %s", c->dev->name,
                c->dev->port, c->flush_qp->qp_num, strerror(e));
        req_put(r);
        netib_comm_fail(c, ncclSystemError);
        return ncclSystemError;
    }
    r->state = NETIB_REQ_POSTED;
    c->outstanding++;
    *request = r;
    return ncclSuccess;
}

/* test ------------------------------------------------------------------------------ */

static void progress(netib_comm_t *c)
{
    long now;

    poll_cq(c);
    if (c->is_send) {
        progress_send(c);
    }
    if (c->outstanding == 0 || c->err != ncclSuccess) {
        return;
    }
    /* While requests wait, look now and then for a peer gone and for device events. */
    now = netib_now_ns();
    if (now < c->next_check_ns) {
        return;
    }
    c->next_check_ns = now + NETIB_CHECK_NS;
    netib_dev_poll_events(c->dev);
    if (c->err == ncclSuccess) {
        netib_comm_check_peer(c);
    }
    if (c->err == ncclSuccess && (c->dev->fatal || c->dev->port_down)) {
        /* A request that waits for its peer's FIFO entry would otherwise wait forever. */
        BR_WARN(NCCL_NET, "NET/IB : %s:%d: %s with %d requests in flight (peer %s)", c->dev->name,
                c->dev->port, c->dev->fatal ? "the device failed" : "the port went down",
                c->outstanding, c->peer);
        netib_comm_fail(c, ncclSystemError);
    }
}

ncclResult_t netib_data_test(void *request, int *done, int *sizes)
{
    netib_req_t *r = request;
    netib_comm_t *c = r->comm;

    *done = 0;
    if (r->state == NETIB_REQ_POSTED || r->state == NETIB_REQ_QUEUED) {
        progress(c);
    }
    if (r->state == NETIB_REQ_DONE) {
        if (sizes != NULL) {
            if (r->type == NETIB_SEND) {
                sizes[0] = (int)r->size;
            } else if (r->type == NETIB_RECV) {
                for (int i = 0; i < r->n; i++) {
                    sizes[i] = r->sizes[i];
                }
            }
        }
        *done = 1;
        req_put(r);
        return ncclSuccess;
    }
    if (r->state == NETIB_REQ_ERROR) {
        return c->err != ncclSuccess ? c->err : ncclRemoteError;
    }
    return c->err;
}
