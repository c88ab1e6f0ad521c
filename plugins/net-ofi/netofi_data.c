/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The data path: registration, isend/irecv/test, and completion dispatch. A message is
 * matched by its tag (receiver's connection id, 16-bit sequence number, chunk index), so
 * the n-th isend of a connection lands in its n-th irecv whatever order the provider
 * delivers or completes them in. Messages above the provider's max_msg_size go as chunks,
 * one in flight per request; a chunk shorter than max_msg_size ends the message.
 *
 * Requests come from a pool of NCCL_NET_MAX_REQUESTS per connection; a full pool, or a
 * provider answering EAGAIN, gives the caller a NULL request ("retry later").
 * Threading: every entry point takes the endpoint's lock; none blocks.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netofi.h"

#include "common/check.h"

ncclResult_t netofi_data_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle)
{
    netofi_comm_t *c = comm;
    netofi_ep_t *ep = c->ep;
    netofi_mr_t *m;
    ncclResult_t res = ncclSuccess;

    if (type != NCCL_PTR_HOST) {
        BR_WARN(NCCL_NET,
                "net-ofi: only host memory can be registered (type %d asked); device memory "
                "(FI_HMEM) is not supported",
                type);
        return ncclInternalError;
    }
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        BR_WARN(NCCL_NET, "net-ofi: out of memory for a registration");
        return ncclSystemError;
    }
    m->ep = ep;
    pthread_mutex_lock(&ep->lock);
    if (ep->dev->mr_local && size > 0) {
        res = netofi_ep_mr_reg(ep, data, size, &m->mr);
    }
    if (res == ncclSuccess) {
        /* A registration keeps its endpoint (and domain) alive until deregMr. */
        ep->refs++;
        m->desc = m->mr != NULL ? fi_mr_desc(m->mr) : NULL;
    }
    pthread_mutex_unlock(&ep->lock);
    if (res != ncclSuccess) {
        free(m);
        return res;
    }
    *mhandle = m;
    return ncclSuccess;
}

ncclResult_t netofi_data_dereg_mr(void *comm, void *mhandle)
{
    netofi_mr_t *m = mhandle;
    netofi_ep_t *ep;

    (void)comm;
    if (m == NULL) {
        return ncclSuccess;
    }
    ep = m->ep;
    if (m->mr != NULL) {
        pthread_mutex_lock(&ep->lock);
        fi_close(&m->mr->fid);
        pthread_mutex_unlock(&ep->lock);
    }
    free(m);
    netofi_ep_release(ep);
    return ncclSuccess;
}

/* The descriptor to use for a buffer of size bytes registered as mhandle. */
static ncclResult_t desc_of(const netofi_comm_t *c, void *mhandle, size_t size, void **desc_p)
{
    const netofi_mr_t *m = mhandle;

    *desc_p = NULL;
    if (!c->ep->dev->mr_local || size == 0) {
        return ncclSuccess;
    }
    if (m == NULL || m->ep != c->ep || m->mr == NULL) {
        BR_WARN(NCCL_NET,
                "net-ofi: a %zu-byte buffer was posted without a registration made on its "
                "connection; provider %s needs one (FI_MR_LOCAL)",
                size, netofi_fabric_prov());
        return ncclInternalError;
    }
    *desc_p = m->desc;
    return ncclSuccess;
}

/* Start message req on c; *request_p stays NULL if the provider is full. Lock held. */
static ncclResult_t start(netofi_comm_t *c, netofi_req_t *req, void **request_p)
{
    int posted = 0;
    ncclResult_t res;

    req->seq = c->seq;
    req->done = 0;
    req->chunk = 0;
    req->err = ncclSuccess;
    res = netofi_ep_post(c->ep, req, &posted);
    if (res != ncclSuccess || !posted) {
        netofi_req_put(c, req);
        /* Let completions free provider resources before the caller retries. */
        return res != ncclSuccess ? res : netofi_ep_progress(c->ep);
    }
    c->seq++;
    *request_p = req;
    return ncclSuccess;
}

/* The peer's CLOSE says the next message of c will never match. Lock held. */
static int peer_rules_out(const netofi_comm_t *c)
{
    return c->peer_closed && (int32_t)(c->seq - c->peer_seq) >= 0;
}

/* A send the closed receiver will never take fails the connection, logged once. (A
 * receive fails alone and in order instead: see start_failed.) Lock held. */
static ncclResult_t check_peer(netofi_comm_t *c)
{
    if (!peer_rules_out(c)) {
        return c->err;
    }
    if (c->err == ncclSuccess) {
        BR_WARN(NCCL_NET, "net-ofi: send on connection %#x after its peer closed (provider %s)",
                c->id, netofi_fabric_prov());
        c->err = ncclRemoteError;
        c->peer_close_warned = 1;
    }
    return c->err;
}

ncclResult_t netofi_data_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                               void **request)
{
    netofi_comm_t *c = send_comm;
    netofi_ep_t *ep = c->ep;
    netofi_req_t *req;
    void *desc;
    ncclResult_t res;

    (void)tag; /* with maxRecvs 1 the tag selects nothing: order alone matches messages */
    *request = NULL;
    if (size > ep->dev->max_bytes) {
        BR_WARN(NCCL_NET, "net-ofi: a %zu-byte send exceeds the %zu bytes one request carries",
                size, ep->dev->max_bytes);
        return ncclInternalError;
    }
    BR_CHECK(desc_of(c, mhandle, size, &desc));
    pthread_mutex_lock(&ep->lock);
    res = c->err;
    if (res == ncclSuccess && !c->acked) {
        res = netofi_ep_progress(ep);
    }
    if (res == ncclSuccess) {
        res = check_peer(c);
    }
    if (res != ncclSuccess || !c->acked || (req = netofi_req_get(c)) == NULL) {
        goto out;
    }
    req->op = NETOFI_OP_SEND;
    req->buf = data;
    req->size = size;
    req->desc = desc;
    req->tag = netofi_tag_data(ep->dev, c->peer_id, c->seq);
    req->addr = c->peer;
    res = start(c, req, request);
    BR_TRACE(NCCL_NET, "net-ofi: isend %zu bytes on %#x -> %p", size, c->id, *request);
out:
    pthread_mutex_unlock(&ep->lock);
    return res;
}

/* Hand out req for a message the peer will never send, failed already: test reports
 * ncclRemoteError, in its turn. Failing irecv itself would be too early: a proxy posts
 * receives ahead of need, and an irecv error ends its connection before test reports the
 * messages the peer did send, which may still be arriving (a receiver slower than its
 * sender sees the CLOSE before it has tested them). Lock held. */
static void start_failed(netofi_comm_t *c, netofi_req_t *req, void **request_p)
{
    req->seq = c->seq++;
    req->done = 0;
    req->chunk = 0;
    req->state = NETOFI_REQ_ERROR;
    req->err = ncclRemoteError;
    *request_p = req;
}

ncclResult_t netofi_data_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                               void **mhandles, void **request)
{
    netofi_comm_t *c = recv_comm;
    netofi_ep_t *ep = c->ep;
    netofi_req_t *req;
    void *desc;
    ncclResult_t res;

    (void)tags;
    /* *request may hold NCCL_NET_OPTIONAL_RECV_COMPLETION; every receive completes fully. */
    *request = NULL;
    if (n != 1) {
        BR_WARN(NCCL_NET, "net-ofi: grouped receives (n %d) are not supported; maxRecvs is 1", n);
        return ncclInternalError;
    }
    BR_CHECK(desc_of(c, mhandles ? mhandles[0] : NULL, sizes[0], &desc));
    pthread_mutex_lock(&ep->lock);
    res = c->err;
    if (res != ncclSuccess || (req = netofi_req_get(c)) == NULL) {
        goto out;
    }
    req->op = NETOFI_OP_RECV;
    req->buf = data[0];
    /* No valid message is longer than max_bytes, so no more capacity is ever needed. */
    req->size = sizes[0] < ep->dev->max_bytes ? sizes[0] : ep->dev->max_bytes;
    req->desc = desc;
    req->tag = netofi_tag_data(ep->dev, c->id, c->seq);
    req->addr = FI_ADDR_UNSPEC;
    if (peer_rules_out(c)) {
        start_failed(c, req, request);
    } else {
        res = start(c, req, request);
    }
    BR_TRACE(NCCL_NET, "net-ofi: irecv %zu bytes on %#x -> %p", sizes[0], c->id, *request);
out:
    pthread_mutex_unlock(&ep->lock);
    return res;
}

ncclResult_t netofi_data_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                                void **request)
{
    /* Host memory only: received data is visible once the receive completes. */
    (void)recv_comm;
    (void)n;
    (void)data;
    (void)sizes;
    (void)mhandles;
    *request = NULL;
    return ncclSuccess;
}

ncclResult_t netofi_data_test(void *request, int *done, int *sizes)
{
    netofi_req_t *req = request;
    netofi_comm_t *c = req->comm;
    netofi_ep_t *ep = c->ep;
    ncclResult_t res = ncclSuccess;

    *done = 0;
    pthread_mutex_lock(&ep->lock);
    if (req->state == NETOFI_REQ_FREE) {
        BR_WARN(NCCL_NET,
                "net-ofi: test of a request on connection %#x that already completed (a done "
                "request belongs to the plugin again)",
                c->id);
        res = ncclInternalError;
        goto out;
    }
    if (req->state == NETOFI_REQ_POSTED || req->state == NETOFI_REQ_PENDING) {
        res = netofi_ep_progress(ep);
    }
    if (res != ncclSuccess) {
        goto out;
    }
    if (req->state == NETOFI_REQ_DONE) {
        size_t n = req->op == NETOFI_OP_SEND ? req->size : req->done;
        *done = 1;
        if (sizes != NULL) {
            sizes[0] = n > INT_MAX ? INT_MAX : (int)n;
        }
        netofi_req_put(c, req);
    } else if (req->state == NETOFI_REQ_ERROR) {
        res = req->err;
        netofi_req_put(c, req);
    } else if (req->err != ncclSuccess) {
        /* Failed by the peer's CLOSE while the provider still owns it: report, keep. */
        res = req->err;
    } else {
        res = c->err;
    }
    if (res == ncclRemoteError && !c->peer_close_warned) {
        c->peer_close_warned = 1;
        BR_WARN(NCCL_NET,
                "net-ofi: the peer closed connection %#x (%s) before this %s completed "
                "(provider %s)",
                c->id, ep->dev->name, c->type == NETOFI_COMM_SEND ? "send" : "receive",
                netofi_fabric_prov());
    }
out:
    pthread_mutex_unlock(&ep->lock);
    return res;
}

void netofi_data_peer_closed(netofi_ep_t *ep, netofi_comm_t *c)
{
    int failed = 0;

    for (int i = 0; i < NETOFI_MAX_REQUESTS; i++) {
        netofi_req_t *req = &c->reqs[i];
        int open = req->state == NETOFI_REQ_POSTED || req->state == NETOFI_REQ_PENDING;

        if (!open || (int32_t)(req->seq - c->peer_seq) < 0) {
            continue; /* done, or the peer still completes it */
        }
        req->err = ncclRemoteError;
        failed++;
        if (req->state == NETOFI_REQ_PENDING) {
            netofi_ep_unqueue(ep, req);
            req->state = NETOFI_REQ_ERROR;
        }
        /* A posted request stays with the provider, uncancelled: a receive may be halfway
         * through a rendezvous the closing sender is waiting on (and cancelling that
         * confuses tcp;ofi_rxm). test() reports the error meanwhile; close cancels. */
    }
    /* Normal at teardown (a receiver may have receives posted ahead): say it quietly here;
     * test() warns if anyone is still waiting on one of them. */
    if (failed > 0) {
        BR_INFO(NCCL_NET, "net-ofi: the peer closed connection %#x (%s) with %d %s pending", c->id,
                ep->dev->name, failed, c->type == NETOFI_COMM_SEND ? "sends" : "receives");
    }
}

/* A data chunk completed (len: bytes received). Lock held. */
static void chunk_done(netofi_ep_t *ep, netofi_req_t *req, size_t len)
{
    /* A send completion's len is not meaningful; the receiver's is the chunk size. */
    size_t chunk = req->op == NETOFI_OP_SEND ? req->chunk_len : len;
    ncclResult_t res;

    req->done += chunk;
    if (req->err != ncclSuccess) {
        req->state = NETOFI_REQ_ERROR; /* failed meanwhile by the peer's CLOSE */
        return;
    }
    if (chunk < ep->dev->max_msg) {
        req->state = NETOFI_REQ_DONE; /* a short chunk ends the message */
        return;
    }
    req->chunk++;
    res = netofi_ep_post_or_queue(ep, req);
    if (res != ncclSuccess) {
        req->state = NETOFI_REQ_ERROR;
        req->err = res;
    }
}

void netofi_data_complete(netofi_ep_t *ep, netofi_req_t *req, size_t len)
{
    netofi_comm_t *c = req->comm;

    c->inflight--;
    if (req->op == NETOFI_OP_CTRL_SEND || req->op == NETOFI_OP_CTRL_RECV) {
        netofi_conn_ctrl_done(ep, req, NULL);
    } else if (c->closed) {
        req->state = NETOFI_REQ_DONE; /* close() may be waiting for exactly this */
        netofi_conn_reap(ep, c);
    } else {
        chunk_done(ep, req, len);
    }
}

void netofi_data_fail(netofi_ep_t *ep, netofi_req_t *req, const struct fi_cq_err_entry *e)
{
    static const char *const names[] = {"send", "receive"};
    netofi_comm_t *c = req->comm;
    int err = e->err < 0 ? -e->err : e->err; /* shm 1.17 reports it negated */
    char buf[256];

    c->inflight--;
    if (req->op == NETOFI_OP_CTRL_SEND || req->op == NETOFI_OP_CTRL_RECV) {
        netofi_conn_ctrl_done(ep, req, e);
        return;
    }
    req->state = NETOFI_REQ_ERROR;
    if (c->closed) {
        netofi_conn_reap(ep, c); /* FI_ECANCELED from close, or a failure nobody awaits */
        return;
    }
    if (req->err != ncclSuccess) {
        return; /* failed already (the peer closed); this is its cancellation */
    }
    if (err == FI_ETRUNC && req->op == NETOFI_OP_RECV) {
        char over[48] = ""; /* not every provider reports the overflow (rxm eager: 0) */
        if (e->olen > 0) {
            snprintf(over, sizeof(over), " (%zu bytes did not fit)", e->olen);
        }
        BR_WARN(NCCL_NET,
                "net-ofi: message truncated on connection %#x (%s): a message longer than the "
                "%zu-byte receive buffer arrived%s; the sizes posted by sender and receiver "
                "disagree (provider %s)",
                c->id, ep->dev->name, req->size, over, netofi_fabric_prov());
        req->err = ncclInvalidUsage;
        return;
    }
    BR_WARN(NCCL_NET, "net-ofi: %s failed on connection %#x (%s): %s (%s; provider %s)",
            names[req->op == NETOFI_OP_RECV], c->id, ep->dev->name, netofi_fi.strerror(err),
            fi_cq_strerror(ep->cq, e->prov_errno, e->err_data, buf, sizeof(buf)),
            netofi_fabric_prov());
    req->err = ncclSystemError;
}
