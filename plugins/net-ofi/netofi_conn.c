/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Connections: the handshake that turns a 128-byte handle into a send/receive pair, and
 * the teardown that tells the peer. Control messages carry a control tag (top tag bit,
 * the addressee's connection id, the message type) and a netofi_ctrl_msg_t.
 *
 *   listen  posts RX for CONN on a new id L; the handle holds L, the endpoint name and the
 *           provider.
 *   connect inserts the listener's address, posts RX for ACK on its own id S, sends
 *           CONN{S, own name} to L, and returns the send comm once CONN has left (until
 *           then NULL, keeping the comm in the handle's `stage`, as NCCL's IB plugin
 *           does): a caller that moves on to its own accepts, or to a barrier, never
 *           leaves CONN queued in a provider that progresses only when called.
 *   accept  returns NULL until a CONN arrived, then inserts the connector's address, makes
 *           the receive comm R, sends ACK{R} to S, posts RX for CLOSE on R and reposts L.
 *   ACK     tells the send comm R (isend answers "retry" until then); it then posts RX for
 *           CLOSE on S.
 *   close   waits (bounded) for transfers in flight, then sends CLOSE{seq} to the peer,
 *           seq being its first message still unfinished after that wait: the peer
 *           fails its requests from there on (closing aborts what is in flight, as a
 *           socket reset would; the provider may still finish it, unreported).
 * So connect never waits for accept (only for its own message to leave), and a peer that
 * closes fails what will never match.
 *
 * A closed connection with operations in flight stays on its endpoint's zombie list until
 * their completions arrive (or the endpoint closes), since the provider still owns them.
 * Threading: every function runs under the endpoint's lock (taken here or by the caller).
 */
#include <sched.h>
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
    uint64_t stage; /* connect's own: the send comm whose CONN is on its way (0 from listen) */
} netofi_handle_t;

_Static_assert(sizeof(netofi_handle_t) <= NCCL_NET_HANDLE_MAXSIZE, "handle too large");

/* Prepare control request k of c for a message of `type` to (or, RX, from) connection
 * `dest_id`; the message itself is c->ctrl_msg[k]. */
static netofi_req_t *ctrl_req(netofi_comm_t *c, int k, uint32_t dest_id, uint32_t type)
{
    netofi_req_t *req = &c->ctrl_req[k];

    req->op = k == NETOFI_CTRL_RX ? NETOFI_OP_CTRL_RECV : NETOFI_OP_CTRL_SEND;
    req->buf = (char *)&c->ctrl_msg[k];
    req->size = sizeof(c->ctrl_msg[k]);
    req->done = 0;
    req->chunk = type;
    req->tag = netofi_tag_ctrl(c->ep->dev, dest_id);
    req->addr = c->peer;
    req->desc = c->ctrl_mr != NULL ? fi_mr_desc(c->ctrl_mr) : NULL;
    req->err = ncclSuccess;
    return req;
}

static void ctrl_msg_init(netofi_ctrl_msg_t *msg, uint32_t type, uint32_t id)
{
    memset(msg, 0, sizeof(*msg));
    msg->magic = NETOFI_MAGIC;
    msg->type = type;
    msg->id = id;
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
        netofi_req_put(c, &c->reqs[i]);
    }
    for (int k = 0; k < NETOFI_CTRL_NREQ; k++) {
        c->ctrl_req[k].comm = c;
    }
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

/* Undo comm_alloc of a connection nothing was posted for. Lock held. */
static void comm_discard(netofi_comm_t *c)
{
    c->ep->refs--; /* never the last: the caller's context holds one */
    netofi_conn_free(c);
}

void netofi_conn_free(netofi_comm_t *c)
{
    if (c->ctrl_mr != NULL) {
        fi_close(&c->ctrl_mr->fid);
    }
    netofi_ep_id_free(c->ep, c->id);
    free(c);
}

ncclResult_t netofi_conn_listen(netofi_ep_t *ep, void *handle, void **listen_comm)
{
    netofi_handle_t h;
    netofi_comm_t *c = NULL;
    ncclResult_t res;

    pthread_mutex_lock(&ep->lock);
    res = comm_alloc(ep, NETOFI_COMM_LISTEN, &c);
    if (res != ncclSuccess) {
        goto out;
    }
    res = netofi_ep_post_or_queue(ep, ctrl_req(c, NETOFI_CTRL_RX, c->id, NETOFI_CTRL_CONN));
    if (res != ncclSuccess) {
        comm_discard(c);
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
        h->name_len > NETOFI_NAME_MAX || h->id >= (1u << NETOFI_ID_BITS)) {
        BR_WARN(NCCL_NET,
                "net-ofi: the peer's address (format %u, %u bytes) cannot be used from %s "
                "(format %u, provider %s)",
                h->addr_format, h->name_len, ep->dev->name, ep->dev->info->addr_format,
                netofi_fabric_prov());
        return ncclInvalidUsage;
    }
    return ncclSuccess;
}

ncclResult_t netofi_conn_connect(netofi_ep_t *ep, void *handle, void **send_comm)
{
    netofi_handle_t h;
    netofi_ctrl_msg_t *msg;
    netofi_comm_t *c = NULL;
    fi_addr_t peer;
    ncclResult_t res;

    *send_comm = NULL;
    memcpy(&h, handle, sizeof(h));
    BR_CHECK(check_handle(ep, &h));
    pthread_mutex_lock(&ep->lock);
    if (h.stage != 0) {
        c = (netofi_comm_t *)(uintptr_t)h.stage; /* a call before posted its CONN */
        goto wait;
    }
    res = netofi_ep_addr(ep, h.name, h.name_len, &peer);
    if (res == ncclSuccess) {
        res = comm_alloc(ep, NETOFI_COMM_SEND, &c);
    }
    if (res != ncclSuccess) {
        goto out;
    }
    c->peer = peer;
    c->peer_id = h.id;
    /* Posts fail only for real errors; EAGAIN queues them for progress to retry. */
    res = netofi_ep_post_or_queue(ep, ctrl_req(c, NETOFI_CTRL_RX, c->id, NETOFI_CTRL_ACK));
    if (res != ncclSuccess) {
        comm_discard(c);
        c = NULL;
        goto out;
    }
    msg = &c->ctrl_msg[NETOFI_CTRL_TX];
    ctrl_msg_init(msg, NETOFI_CTRL_CONN, c->id);
    msg->addr_format = ep->dev->info->addr_format;
    msg->name_len = (uint16_t)ep->name_len;
    memcpy(msg->name, ep->name, ep->name_len);
    res = netofi_ep_post_or_queue(ep, ctrl_req(c, NETOFI_CTRL_TX, h.id, NETOFI_CTRL_CONN));
    if (res != ncclSuccess) {
        c->err = res; /* the ACK receive is posted: close cancels it and frees c later */
        goto out;
    }
    BR_TRACE(NCCL_NET, "net-ofi: connection %#x on %s connecting to listener %#x", c->id,
             ep->dev->name, h.id);
wait:
    res = netofi_ep_progress(ep);
    if (res == ncclSuccess) {
        res = c->err;
    }
    if (res != ncclSuccess) {
        c->err = res;
        h.stage = 0;
    } else if (c->ctrl_req[NETOFI_CTRL_TX].state == NETOFI_REQ_DONE) {
        *send_comm = c; /* CONN left: the listener's accept no longer needs this side */
        h.stage = 0;
    } else {
        h.stage = (uint64_t)(uintptr_t)c; /* NULL now: the caller calls again */
    }
    memcpy(handle, &h, sizeof(h));
out:
    pthread_mutex_unlock(&ep->lock);
    if (res != ncclSuccess && c != NULL && c->err != ncclSuccess) {
        netofi_conn_close(c);
    }
    return res;
}

/* The CONN message in l's receive buffer: make the receive connection. Lock held. */
static ncclResult_t accept_conn(netofi_comm_t *l, netofi_comm_t **comm_p)
{
    netofi_ep_t *ep = l->ep;
    const netofi_ctrl_msg_t *in = &l->ctrl_msg[NETOFI_CTRL_RX];
    netofi_comm_t *c = NULL;
    fi_addr_t peer;
    ncclResult_t res;

    if (in->magic != NETOFI_MAGIC || in->type != NETOFI_CTRL_CONN ||
        in->addr_format != ep->dev->info->addr_format || in->id >= (1u << NETOFI_ID_BITS)) {
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
    c->peer_id = in->id;
    ctrl_msg_init(&c->ctrl_msg[NETOFI_CTRL_TX], NETOFI_CTRL_ACK, c->id);
    res = netofi_ep_post_or_queue(ep, ctrl_req(c, NETOFI_CTRL_TX, c->peer_id, NETOFI_CTRL_ACK));
    if (res != ncclSuccess) {
        comm_discard(c);
        return res;
    }
    /* Failing this only costs the early notice of the sender's close. */
    c->err = netofi_ep_post_or_queue(ep, ctrl_req(c, NETOFI_CTRL_RX, c->id, NETOFI_CTRL_CLOSE));
    BR_TRACE(NCCL_NET, "net-ofi: listener %#x accepted connection %#x from peer %#x", l->id, c->id,
             c->peer_id);
    *comm_p = c;
    return ncclSuccess;
}

ncclResult_t netofi_conn_accept(void *listen_comm, void **recv_comm)
{
    netofi_comm_t *l = listen_comm, *c = NULL;
    netofi_ep_t *ep = l->ep;
    netofi_req_t *rx = &l->ctrl_req[NETOFI_CTRL_RX];
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
    l->err = netofi_ep_post_or_queue(ep, ctrl_req(l, NETOFI_CTRL_RX, l->id, NETOFI_CTRL_CONN));
    if (res == ncclSuccess) {
        *recv_comm = c;
    }
out:
    pthread_mutex_unlock(&ep->lock);
    return res;
}

/* First sequence number whose message will not complete once c closes. Lock held. */
static uint32_t close_seq(const netofi_comm_t *c)
{
    uint32_t first = c->seq;

    for (int i = 0; i < NETOFI_MAX_REQUESTS; i++) {
        const netofi_req_t *req = &c->reqs[i];
        int open = req->state == NETOFI_REQ_POSTED || req->state == NETOFI_REQ_PENDING;
        if (open && (int32_t)(req->seq - first) < 0) {
            first = req->seq;
        }
    }
    return first;
}

/* First sequence number among requests still queued (not given to the provider), or
 * c->seq when none is. Lock held. */
static uint32_t first_queued_seq(const netofi_comm_t *c)
{
    uint32_t first = c->seq;

    for (int i = 0; i < NETOFI_MAX_REQUESTS; i++) {
        const netofi_req_t *req = &c->reqs[i];
        if (req->state == NETOFI_REQ_PENDING && (int32_t)(req->seq - first) < 0) {
            first = req->seq;
        }
    }
    return first;
}

/* Tell the peer that c closed at seq. Lock held. */
static void send_close(netofi_ep_t *ep, netofi_comm_t *c, uint32_t seq)
{
    netofi_ctrl_msg_t *msg = &c->ctrl_msg[NETOFI_CTRL_TX_CLOSE];

    ctrl_msg_init(msg, NETOFI_CTRL_CLOSE, c->id);
    msg->seq = seq;
    if (netofi_ep_post_or_queue(
            ep, ctrl_req(c, NETOFI_CTRL_TX_CLOSE, c->peer_id, NETOFI_CTRL_CLOSE)) != ncclSuccess) {
        BR_INFO(NCCL_NET, "net-ofi: connection %#x could not tell its peer it closed", c->id);
    }
}

void netofi_conn_reap(netofi_ep_t *ep, netofi_comm_t *c)
{
    netofi_comm_t **pp = &ep->zombies;

    if (!c->closed || c->closing || c->inflight > 0 || c->queued > 0) {
        return;
    }
    while (*pp != NULL && *pp != c) {
        pp = &(*pp)->zombie_next;
    }
    if (*pp == c) {
        *pp = c->zombie_next;
    }
    netofi_conn_free(c);
}

/* Operations of closing connection c that may still touch the user's buffers: sends the
 * peer has not ruled out, and receives (cancelled ones complete at once). Lock held. */
static int user_ops_in_flight(const netofi_comm_t *c)
{
    int n = 0;

    for (int i = 0; i < NETOFI_MAX_REQUESTS; i++) {
        const netofi_req_t *req = &c->reqs[i];
        int aborted = c->peer_closed && (int32_t)(req->seq - c->peer_seq) >= 0;
        n += req->state == NETOFI_REQ_POSTED && (req->op == NETOFI_OP_RECV || !aborted);
    }
    return n;
}

/* Retire c's requests: drop queued ones, cancel posted receives. Lock held. */
static void retire_requests(netofi_ep_t *ep, netofi_comm_t *c)
{
    for (int i = 0; i < NETOFI_CTRL_NREQ + NETOFI_MAX_REQUESTS; i++) {
        netofi_req_t *req = i < NETOFI_CTRL_NREQ ? &c->ctrl_req[i] : &c->reqs[i - NETOFI_CTRL_NREQ];
        /* An unacknowledged sender keeps its ACK receive: its CLOSE needs the peer's id. */
        int awaiting_ack = c->type == NETOFI_COMM_SEND && !c->acked && i == NETOFI_CTRL_RX;

        if (req->state == NETOFI_REQ_PENDING) {
            netofi_ep_unqueue(ep, req);
            req->state = NETOFI_REQ_ERROR;
        } else if (req->op == NETOFI_OP_RECV || (req->op == NETOFI_OP_CTRL_RECV && !awaiting_ack)) {
            netofi_ep_cancel(ep, req);
        }
    }
}

ncclResult_t netofi_conn_close(void *comm)
{
    netofi_comm_t *c = comm;
    netofi_ep_t *ep;
    double end = netofi_now() + NETOFI_CLOSE_WAIT_SECONDS;
    uint32_t seq, dropped;

    if (c == NULL) {
        return ncclSuccess;
    }
    ep = c->ep;
    pthread_mutex_lock(&ep->lock);
    c->closed = 1;
    c->closing = 1;                /* not reaped while we wait below */
    dropped = first_queued_seq(c); /* before retire_requests drops queued ones */
    retire_requests(ep, c);
    /* The caller may free its buffers once we return, so wait (bounded) for what the
     * provider could still read or write: a receive matched before it could be cancelled,
     * a send the peer may still be pulling. */
    while (user_ops_in_flight(c) > 0 && ep->err == ncclSuccess && netofi_now() < end) {
        (void)netofi_ep_progress(ep);
        pthread_mutex_unlock(&ep->lock);
        sched_yield();
        pthread_mutex_lock(&ep->lock);
    }
    /* Only now tell the peer where we stopped: a send still posted when close began may
     * have completed during the wait (the peer pulled it), and announcing its sequence
     * number earlier made the peer fail a receive whose data then arrived. */
    seq = close_seq(c);
    if ((int32_t)(dropped - seq) < 0) {
        seq = dropped;
    }
    if (c->type != NETOFI_COMM_LISTEN && !c->peer_closed) {
        if (c->type == NETOFI_COMM_RECV || c->acked) {
            send_close(ep, c, seq);
        } else if (c->ctrl_req[NETOFI_CTRL_RX].state == NETOFI_REQ_POSTED) {
            c->close_on_ack = 1; /* the receiver's id comes with the ACK */
        }
    }
    if (user_ops_in_flight(c) > 0) {
        BR_WARN(NCCL_NET,
                "net-ofi: connection %#x (%s) closed with %d transfers still in flight after "
                "%.0f s; the provider may still access their buffers (provider %s)",
                c->id, ep->dev->name, user_ops_in_flight(c), NETOFI_CLOSE_WAIT_SECONDS,
                netofi_fabric_prov());
    }
    c->closing = 0;
    if (c->inflight == 0 && c->queued == 0) {
        netofi_conn_free(c);
    } else {
        /* Control messages (CLOSE, an awaited ACK) or aborted sends remain: the endpoint
         * keeps c until they complete or it closes. */
        c->zombie_next = ep->zombies;
        ep->zombies = c;
    }
    pthread_mutex_unlock(&ep->lock);
    netofi_ep_release(ep); /* the connection's reference */
    return ncclSuccess;
}

/* The ACK in c's control buffer: data may flow to the receiver's id. Lock held. */
static void take_ack(netofi_ep_t *ep, netofi_comm_t *c)
{
    const netofi_ctrl_msg_t *ack = &c->ctrl_msg[NETOFI_CTRL_RX];

    if (ack->magic != NETOFI_MAGIC || ack->type != NETOFI_CTRL_ACK ||
        ack->id >= (1u << NETOFI_ID_BITS)) {
        BR_WARN(NCCL_NET, "net-ofi: connection %#x got a malformed acknowledgement", c->id);
        c->err = ncclInternalError;
        return;
    }
    c->peer_id = ack->id;
    c->acked = 1;
    BR_TRACE(NCCL_NET, "net-ofi: connection %#x acknowledged by peer %#x", c->id, c->peer_id);
    if (c->closed) {
        if (c->close_on_ack) {
            send_close(ep, c, c->seq); /* nothing was sent: the receiver fails all */
        }
        return;
    }
    c->err = netofi_ep_post_or_queue(ep, ctrl_req(c, NETOFI_CTRL_RX, c->id, NETOFI_CTRL_CLOSE));
}

/* The peer's CLOSE in c's control buffer. Lock held. */
static void take_close(netofi_ep_t *ep, netofi_comm_t *c)
{
    const netofi_ctrl_msg_t *msg = &c->ctrl_msg[NETOFI_CTRL_RX];

    if (msg->magic != NETOFI_MAGIC || msg->type != NETOFI_CTRL_CLOSE) {
        BR_WARN(NCCL_NET, "net-ofi: connection %#x got a malformed close notice", c->id);
        c->err = ncclInternalError;
        return;
    }
    c->peer_closed = 1;
    c->peer_seq = msg->seq;
    BR_TRACE(NCCL_NET, "net-ofi: peer of connection %#x closed at seq %u", c->id, msg->seq);
    netofi_data_peer_closed(ep, c);
}

void netofi_conn_ctrl_done(netofi_ep_t *ep, netofi_req_t *req, const struct fi_cq_err_entry *e)
{
    static const char *const names[] = {"", "connection request", "acknowledgement", "close"};
    netofi_comm_t *c = req->comm;
    char buf[256];

    if (e != NULL) {
        int err = e->err < 0 ? -e->err : e->err;
        req->state = NETOFI_REQ_ERROR;
        if (!c->closed && err != FI_ECANCELED) {
            BR_WARN(NCCL_NET, "net-ofi: %s %s failed on connection %#x (%s): %s (%s; provider %s)",
                    req->op == NETOFI_OP_CTRL_SEND ? "sending the" : "receiving the",
                    names[req->chunk & 3], c->id, ep->dev->name, netofi_fi.strerror(err),
                    fi_cq_strerror(ep->cq, e->prov_errno, e->err_data, buf, sizeof(buf)),
                    netofi_fabric_prov());
            c->err = ncclSystemError;
        }
    } else {
        req->state = NETOFI_REQ_DONE;
        if (req->op == NETOFI_OP_CTRL_RECV && req->chunk == NETOFI_CTRL_ACK) {
            take_ack(ep, c); /* also when closed: the peer still needs our CLOSE */
        } else if (req->op == NETOFI_OP_CTRL_RECV && req->chunk == NETOFI_CTRL_CLOSE &&
                   !c->closed) {
            take_close(ep, c);
        }
    }
    netofi_conn_reap(ep, c);
}
