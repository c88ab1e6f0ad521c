/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Connections and the data path. A connection is a tag space on an endpoint: the
 * receiver's id, a 16-bit sequence number and a chunk index form the tag of every
 * message, so the n-th isend of a connection always matches its n-th irecv.
 *
 * Handshake (non-blocking, carried by the 128-byte handle and two control messages):
 *   listen  posts a receive for CONN on a new id L; the handle holds (L, endpoint name).
 *   connect inserts the listener's address, posts a receive for ACK on its own id S,
 *           sends CONN{S, its endpoint name} to L and returns the send comm at once.
 *   accept  returns NULL until CONN arrives, then inserts the connector's address,
 *           allocates the receive id R, sends ACK{R} to S and reposts the CONN receive.
 *   isend   returns a NULL request ("retry") until the ACK has told it R.
 * So connect never waits for the peer to call accept, and accept never waits for more
 * than the connector's first message.
 *
 * Threading: every function takes the endpoint's lock; none blocks.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "netofi.h"

#include "common/check.h"

/* The listen handle, as NCCL ships it to the connecting rank. */
typedef struct {
    uint32_t magic;
    uint32_t id;          /* the listener's connection id */
    uint32_t prov_hash;   /* netofi_fabric_prov_hash() of the listener */
    uint32_t addr_format; /* fi_info addr_format of name */
    uint16_t name_len;
    uint16_t reserved;
    uint8_t name[NETOFI_NAME_MAX]; /* the listener's endpoint name */
} netofi_handle_t;

_Static_assert(sizeof(netofi_handle_t) <= NCCL_NET_HANDLE_MAXSIZE, "handle too large");

static const char *const netofi_op_names[] = {"send", "receive", "connection request send",
                                              "connection message receive"};

static netofi_req_t *pool_get(netofi_comm_t *c)
{
    netofi_req_t *req = c->free_reqs;

    if (req != NULL) {
        c->free_reqs = req->next;
        req->next = NULL;
    }
    return req;
}

static void pool_put(netofi_comm_t *c, netofi_req_t *req)
{
    req->state = NETOFI_REQ_FREE;
    req->next = c->free_reqs;
    c->free_reqs = req;
}

/* Prepare control request k (0 receive, 1 send) of c. */
static netofi_req_t *ctrl_req(netofi_comm_t *c, int k, uint64_t tag, uint32_t type)
{
    netofi_req_t *req = &c->ctrl_req[k];

    req->op = k == 0 ? NETOFI_OP_CTRL_RECV : NETOFI_OP_CTRL_SEND;
    req->buf = (char *)&c->ctrl_msg[k];
    req->size = sizeof(c->ctrl_msg[k]);
    req->done = 0;
    req->chunk = type;
    req->tag = tag;
    req->addr = c->peer;
    req->desc = c->ctrl_mr != NULL ? fi_mr_desc(c->ctrl_mr) : NULL;
    req->err = ncclSuccess;
    return req;
}

/* A new connection of the given type on ep, holding a reference to it. Lock held. */
static ncclResult_t comm_alloc(netofi_ep_t *ep, int type, netofi_comm_t **comm_p)
{
    netofi_comm_t *c = calloc(1, sizeof(*c));
    ncclResult_t res;

    if (c == NULL) {
        BR_WARN(NCCL_NET, "net-ofi: out of memory for a connection");
        return ncclSystemError;
    }
    res = netofi_ep_id_alloc(ep, &c->id);
    if (res != ncclSuccess) {
        free(c);
        return res;
    }
    c->ep = ep;
    c->type = type;
    c->peer = FI_ADDR_UNSPEC;
    for (int i = NETOFI_MAX_REQUESTS - 1; i >= 0; i--) {
        c->reqs[i].comm = c;
        pool_put(c, &c->reqs[i]);
    }
    c->ctrl_req[0].comm = c;
    c->ctrl_req[1].comm = c;
    if (ep->dev->mr_local) {
        res = netofi_ep_mr_reg(ep, c->ctrl_msg, sizeof(c->ctrl_msg), &c->ctrl_mr);
        if (res != ncclSuccess) {
            netofi_ep_id_free(ep, c->id);
            free(c);
            return res;
        }
    }
    ep->refs++;
    *comm_p = c;
    return ncclSuccess;
}

void netofi_comm_free(netofi_comm_t *c)
{
    if (c->ctrl_mr != NULL) {
        fi_close(&c->ctrl_mr->fid);
    }
    netofi_ep_id_free(c->ep, c->id);
    free(c);
}

ncclResult_t netofi_comm_listen(netofi_ep_t *ep, void *handle, void **listen_comm)
{
    netofi_handle_t h;
    netofi_comm_t *c = NULL;
    ncclResult_t res;

    pthread_mutex_lock(&ep->lock);
    res = comm_alloc(ep, NETOFI_COMM_LISTEN, &c);
    if (res != ncclSuccess) {
        goto out;
    }
    res = netofi_ep_post_or_queue(
        ep, ctrl_req(c, 0, netofi_tag_ctrl(ep->dev, c->id), NETOFI_CTRL_CONN));
    if (res != ncclSuccess) {
        ep->refs--;
        netofi_comm_free(c);
        goto out;
    }
    memset(&h, 0, sizeof(h));
    h.magic = NETOFI_MAGIC;
    h.id = c->id;
    h.prov_hash = netofi_fabric_prov_hash();
    h.addr_format = ep->dev->info->addr_format;
    h.name_len = (uint16_t)ep->name_len;
    memcpy(h.name, ep->name, ep->name_len);
    memcpy(handle, &h, sizeof(h));
    BR_TRACE(NCCL_NET, "net-ofi: listening on %s as connection %#x", ep->dev->name, c->id);
    *listen_comm = c;
out:
    pthread_mutex_unlock(&ep->lock);
    return res;
}

static ncclResult_t check_handle(const netofi_ep_t *ep, const netofi_handle_t *h)
{
    if (h->magic != NETOFI_MAGIC) {
        BR_WARN(NCCL_NET, "net-ofi: connect got a handle that net-ofi did not make");
        return ncclInternalError;
    }
    if (h->prov_hash != netofi_fabric_prov_hash()) {
        BR_WARN(NCCL_NET,
                "net-ofi: the peer listens on another libfabric provider than %s; every rank "
                "must pick the same one (FI_PROVIDER, NCCL_OFI_PROVIDER)",
                netofi_fabric_prov());
        return ncclInvalidUsage;
    }
    if (h->addr_format != ep->dev->info->addr_format || h->name_len == 0 ||
        h->name_len > NETOFI_NAME_MAX) {
        BR_WARN(NCCL_NET,
                "net-ofi: the peer's address (format %u, %u bytes) cannot be used from %s "
                "(format %u, provider %s)",
                h->addr_format, h->name_len, ep->dev->name, ep->dev->info->addr_format,
                netofi_fabric_prov());
        return ncclInvalidUsage;
    }
    return ncclSuccess;
}

ncclResult_t netofi_comm_connect(netofi_ep_t *ep, const void *handle, void **send_comm)
{
    const netofi_dev_t *dev = ep->dev;
    netofi_handle_t h;
    netofi_ctrl_msg_t *msg;
    netofi_comm_t *c = NULL;
    fi_addr_t peer;
    ncclResult_t res;

    *send_comm = NULL;
    memcpy(&h, handle, sizeof(h));
    BR_CHECK(check_handle(ep, &h));
    pthread_mutex_lock(&ep->lock);
    res = netofi_ep_addr(ep, h.name, h.name_len, &peer);
    if (res == ncclSuccess) {
        res = comm_alloc(ep, NETOFI_COMM_SEND, &c);
    }
    if (res != ncclSuccess) {
        goto out;
    }
    c->peer = peer;
    /* Both posts only fail for real errors; EAGAIN queues them for progress to retry. */
    res = netofi_ep_post_or_queue(ep, ctrl_req(c, 0, netofi_tag_ctrl(dev, c->id), NETOFI_CTRL_ACK));
    if (res != ncclSuccess) {
        goto err_free;
    }
    msg = &c->ctrl_msg[1];
    msg->magic = NETOFI_MAGIC;
    msg->type = NETOFI_CTRL_CONN;
    msg->id = c->id;
    msg->addr_format = dev->info->addr_format;
    msg->name_len = (uint16_t)ep->name_len;
    memcpy(msg->name, ep->name, ep->name_len);
    res = netofi_ep_post_or_queue(ep, ctrl_req(c, 1, netofi_tag_ctrl(dev, h.id), NETOFI_CTRL_CONN));
    if (res != ncclSuccess) {
        /* The ACK receive is posted: let close cancel it and free c when it completes. */
        c->err = res;
        goto out;
    }
    BR_TRACE(NCCL_NET, "net-ofi: connection %#x on %s connecting to listener %#x", c->id, dev->name,
             h.id);
    *send_comm = c;
out:
    pthread_mutex_unlock(&ep->lock);
    if (c != NULL && *send_comm == NULL) {
        netofi_comm_close(c);
    }
    return res;
err_free:
    ep->refs--;
    netofi_comm_free(c);
    pthread_mutex_unlock(&ep->lock);
    return res;
}

/* The CONN message in l's receive buffer: make the receive connection. Lock held. */
static ncclResult_t accept_conn(netofi_comm_t *l, netofi_comm_t **comm_p)
{
    netofi_ep_t *ep = l->ep;
    const netofi_ctrl_msg_t *in = &l->ctrl_msg[0];
    netofi_ctrl_msg_t *ack;
    netofi_comm_t *c = NULL;
    uint32_t peer_id = in->id;
    fi_addr_t peer;
    ncclResult_t res;

    if (in->magic != NETOFI_MAGIC || in->type != NETOFI_CTRL_CONN ||
        in->addr_format != ep->dev->info->addr_format) {
        BR_WARN(NCCL_NET, "net-ofi: listener %#x on %s got a malformed connection request", l->id,
                ep->dev->name);
        return ncclInternalError;
    }
    res = netofi_ep_addr(ep, in->name, in->name_len, &peer);
    if (res == ncclSuccess) {
        res = comm_alloc(ep, NETOFI_COMM_RECV, &c);
    }
    if (res != ncclSuccess) {
        return res;
    }
    c->peer = peer;
    ack = &c->ctrl_msg[1];
    ack->magic = NETOFI_MAGIC;
    ack->type = NETOFI_CTRL_ACK;
    ack->id = c->id;
    res = netofi_ep_post_or_queue(
        ep, ctrl_req(c, 1, netofi_tag_ctrl(ep->dev, peer_id), NETOFI_CTRL_ACK));
    if (res != ncclSuccess) {
        ep->refs--;
        netofi_comm_free(c);
        return res;
    }
    BR_TRACE(NCCL_NET, "net-ofi: listener %#x accepted connection %#x from peer %#x", l->id, c->id,
             peer_id);
    *comm_p = c;
    return ncclSuccess;
}

ncclResult_t netofi_comm_accept(void *listen_comm, void **recv_comm)
{
    netofi_comm_t *l = listen_comm, *c = NULL;
    netofi_ep_t *ep = l->ep;
    netofi_req_t *rx = &l->ctrl_req[0];
    ncclResult_t res;

    *recv_comm = NULL;
    pthread_mutex_lock(&ep->lock);
    res = l->err;
    if (res == ncclSuccess && rx->state != NETOFI_REQ_DONE) {
        res = netofi_ep_progress(ep);
    }
    if (res == ncclSuccess && rx->state == NETOFI_REQ_ERROR) {
        res = rx->err;
    }
    if (res != ncclSuccess || rx->state != NETOFI_REQ_DONE) {
        goto out;
    }
    res = accept_conn(l, &c);
    /* Listen again on the same id (also after a malformed request), so one handle can
     * serve several connectors. */
    l->err = netofi_ep_post_or_queue(ep, ctrl_req(l, 0, rx->tag, NETOFI_CTRL_CONN));
    if (res == ncclSuccess) {
        *recv_comm = c;
    }
out:
    pthread_mutex_unlock(&ep->lock);
    return res;
}

/* Free a closed connection once nothing of it is in flight. Lock held. */
static void reap_zombie(netofi_ep_t *ep, netofi_comm_t *c)
{
    netofi_comm_t **pp = &ep->zombies;

    if (c->inflight > 0) {
        return;
    }
    while (*pp != NULL && *pp != c) {
        pp = &(*pp)->zombie_next;
    }
    if (*pp == c) {
        *pp = c->zombie_next;
    }
    netofi_comm_free(c);
}

ncclResult_t netofi_comm_close(void *comm)
{
    netofi_comm_t *c = comm;
    netofi_ep_t *ep;

    if (c == NULL) {
        return ncclSuccess;
    }
    ep = c->ep;
    pthread_mutex_lock(&ep->lock);
    c->closed = 1;
    for (int i = 0; i < NETOFI_MAX_REQUESTS + 2; i++) {
        netofi_req_t *req = i < 2 ? &c->ctrl_req[i] : &c->reqs[i - 2];
        if (req->state == NETOFI_REQ_PENDING) {
            netofi_ep_unqueue(ep, req);
            req->state = NETOFI_REQ_FREE;
        } else if (req->op == NETOFI_OP_RECV || req->op == NETOFI_OP_CTRL_RECV) {
            netofi_ep_cancel(ep, req);
        }
    }
    if (c->inflight == 0) {
        netofi_comm_free(c);
    } else {
        /* Sends cannot be cancelled and cancelled receives still complete: keep c until
         * the completions arrive (or the endpoint closes), without holding ep. */
        c->zombie_next = ep->zombies;
        ep->zombies = c;
        (void)netofi_ep_progress(ep);
    }
    pthread_mutex_unlock(&ep->lock);
    netofi_ep_release(ep); /* the connection's reference */
    return ncclSuccess;
}

ncclResult_t netofi_comm_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle)
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

ncclResult_t netofi_comm_dereg_mr(void *comm, void *mhandle)
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
    ncclResult_t res = netofi_ep_post(c->ep, req, &posted);

    if (res != ncclSuccess || !posted) {
        pool_put(c, req);
        /* Let completions free provider resources before the caller retries. */
        return res != ncclSuccess ? res : netofi_ep_progress(c->ep);
    }
    c->seq++;
    *request_p = req;
    return ncclSuccess;
}

ncclResult_t netofi_comm_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
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
        res = c->err;
    }
    if (res != ncclSuccess || !c->acked || (req = pool_get(c)) == NULL) {
        goto out;
    }
    req->op = NETOFI_OP_SEND;
    req->buf = data;
    req->size = size;
    req->done = 0;
    req->chunk = 0;
    req->desc = desc;
    req->tag = netofi_tag_data(ep->dev, c->peer_id, c->seq);
    req->addr = c->peer;
    req->err = ncclSuccess;
    res = start(c, req, request);
    BR_TRACE(NCCL_NET, "net-ofi: isend %zu bytes on %#x seq %u -> %p", size, c->id, c->seq,
             *request);
out:
    pthread_mutex_unlock(&ep->lock);
    return res;
}

ncclResult_t netofi_comm_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
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
    if (res != ncclSuccess || (req = pool_get(c)) == NULL) {
        goto out;
    }
    req->op = NETOFI_OP_RECV;
    req->buf = data[0];
    /* No valid message is longer than max_bytes, so no more capacity is ever needed. */
    req->size = sizes[0] < ep->dev->max_bytes ? sizes[0] : ep->dev->max_bytes;
    req->done = 0;
    req->chunk = 0;
    req->desc = desc;
    req->tag = netofi_tag_data(ep->dev, c->id, c->seq);
    req->addr = FI_ADDR_UNSPEC;
    req->err = ncclSuccess;
    res = start(c, req, request);
    BR_TRACE(NCCL_NET, "net-ofi: irecv %zu bytes on %#x seq %u -> %p", sizes[0], c->id, c->seq,
             *request);
out:
    pthread_mutex_unlock(&ep->lock);
    return res;
}

ncclResult_t netofi_comm_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
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

ncclResult_t netofi_comm_test(void *request, int *done, int *sizes)
{
    netofi_req_t *req = request;
    netofi_comm_t *c = req->comm;
    netofi_ep_t *ep = c->ep;
    ncclResult_t res = ncclSuccess;

    *done = 0;
    pthread_mutex_lock(&ep->lock);
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
        pool_put(c, req);
    } else if (req->state == NETOFI_REQ_ERROR) {
        res = req->err;
        pool_put(c, req);
    } else {
        res = c->err;
    }
out:
    pthread_mutex_unlock(&ep->lock);
    return res;
}

/* The ACK in c's control receive buffer: data may flow to the receiver's id. */
static void take_ack(netofi_comm_t *c)
{
    const netofi_ctrl_msg_t *ack = &c->ctrl_msg[0];

    if (ack->magic != NETOFI_MAGIC || ack->type != NETOFI_CTRL_ACK ||
        ack->id >= (1u << NETOFI_ID_BITS)) {
        BR_WARN(NCCL_NET, "net-ofi: connection %#x got a malformed acknowledgement", c->id);
        c->err = ncclInternalError;
        return;
    }
    c->peer_id = ack->id;
    c->acked = 1;
    BR_TRACE(NCCL_NET, "net-ofi: connection %#x acknowledged by peer %#x", c->id, c->peer_id);
}

void netofi_comm_complete(netofi_ep_t *ep, netofi_req_t *req, size_t len)
{
    netofi_comm_t *c = req->comm;
    size_t chunk;
    ncclResult_t res;

    c->inflight--;
    if (c->closed) {
        reap_zombie(ep, c);
        return;
    }
    switch (req->op) {
    case NETOFI_OP_SEND:
    case NETOFI_OP_RECV:
        /* A send completion's len is not meaningful; the receiver's is the chunk size. */
        chunk = req->op == NETOFI_OP_SEND ? req->chunk_len : len;
        req->done += chunk;
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
        return;
    case NETOFI_OP_CTRL_RECV:
        req->state = NETOFI_REQ_DONE;
        if (c->type == NETOFI_COMM_SEND) {
            take_ack(c);
        }
        return;
    default: req->state = NETOFI_REQ_DONE; return;
    }
}

void netofi_comm_fail(netofi_ep_t *ep, netofi_req_t *req, const struct fi_cq_err_entry *e)
{
    netofi_comm_t *c = req->comm;
    char buf[256];
    int err = e->err < 0 ? -e->err : e->err; /* shm 1.17 reports it negated */

    c->inflight--;
    if (c->closed) {
        reap_zombie(ep, c); /* FI_ECANCELED from close, or a late failure nobody awaits */
        return;
    }
    req->state = NETOFI_REQ_ERROR;
    if (err == FI_ETRUNC && req->op == NETOFI_OP_RECV) {
        BR_WARN(NCCL_NET,
                "net-ofi: message truncated on connection %#x (%s): a message longer than the "
                "%zu-byte receive buffer arrived (%zu bytes did not fit); the sizes posted by "
                "sender and receiver disagree (provider %s)",
                c->id, ep->dev->name, req->size, e->olen, netofi_fabric_prov());
        req->err = ncclInvalidUsage;
        return;
    }
    BR_WARN(NCCL_NET, "net-ofi: %s failed on connection %#x (%s): %s (%s; provider %s)",
            netofi_op_names[req->op], c->id, ep->dev->name, netofi_fi.strerror(err),
            fi_cq_strerror(ep->cq, e->prov_errno, e->err_data, buf, sizeof(buf)),
            netofi_fabric_prov());
    req->err = ncclSystemError;
    if (req->op == NETOFI_OP_CTRL_SEND || req->op == NETOFI_OP_CTRL_RECV) {
        c->err = ncclSystemError;
    }
}
