/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The net transport: each end keeps its FIFO in local memory and the proxy moves slots
 * through the net plugin. The receiver listens and sends the plugin's handle in its blob;
 * the sender connects with it; both complete with the plugin's non-blocking
 * connect/accept, register the FIFO's slots, complete one empty first message, and hand
 * the connection to the proxy, which owns the plugin comm from then on. LL lines travel
 * in the Simple slots (the plugin writes received bytes in no particular order, so the
 * receiver reads them after tail).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "transport_int.h"
#include "util.h"

/* The plugin handshake of one connection while it completes. */
typedef struct {
    void *listen_comm; /* receiver */
    void *comm;
    int dev;                              /* the net device this end uses */
    int fid;                              /* br_net_conn_t.fid */
    void *mhandle;                        /* the FIFO's registration, once comm is up */
    void *req;                            /* the first (empty) message, while in flight */
    char handle[NCCL_NET_HANDLE_MAXSIZE]; /* sender */
} net_setup_t;

/* This rank's place among the ranks of its host (NCCL's local rank). */
static int local_rank(const br_transport_comm_t *tc)
{
    int n = 0;
    for (int r = 0; r < tc->rank; r++) {
        n += tc->peers[r].host_hash == tc->peers[tc->rank].host_hash;
    }
    return n;
}

/* The device of a new connection: its lane (channel, or the peer for p2p) and the local
 * rank spread connections over every device in use, as NCCL spreads channels over NICs.
 * Each end picks its own; the two need not agree. */
static int net_dev(const br_transport_comm_t *tc, const br_conn_t *conn)
{
    return br_plugin_net_dev_pick(tc->net, conn->lane, local_rank(tc));
}

static ncclResult_t net_require(br_transport_comm_t *tc, int peer)
{
    if (tc->net == NULL) {
        BR_WARN(NCCL_NET,
                "rank %d needs the network to reach rank %d (host %s) but no net plugin could "
                "be loaded (see the earlier warning)",
                tc->rank, peer, tc->peers[peer].host);
        return ncclSystemError;
    }
    return ncclSuccess;
}

/* A local FIFO (registered with the plugin once the connection completes), and the
 * connection's number among those with the same peer and direction: both ends set up
 * their connections to one peer in the same order, so they number them alike. */
static ncclResult_t net_local_fifo(br_transport_comm_t *tc, br_conn_t *conn)
{
    if (tc->net_fid == NULL) {
        BR_CHECK(br_calloc(&tc->net_fid, 2 * (size_t)tc->nranks, "net connection numbers"));
    }
    size_t size = br_transport_mapping_bytes(conn);
    void *base =
        mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (base == MAP_FAILED) {
        BR_WARN(NCCL_ALLOC, "rank %d: cannot allocate a %zu-byte net FIFO: %s", tc->rank, size,
                strerror(errno));
        return ncclSystemError;
    }
    /* Slots are written, not only mapped, as for shm (transport_mem.c). */
    memset((char *)base + br_transport_ctrl_bytes(), 0x5a, size - br_transport_ctrl_bytes());
    conn->mapping = base;
    conn->mapping_size = size;
    br_transport_layout(conn, base);
    if (conn->ll_bytes > conn->step_size) {
        BR_WARN(NCCL_NET, "rank %d: LL slots of %zu bytes do not fit %zu-byte net slots",
                tc->rank, conn->ll_bytes, conn->step_size);
        return ncclInternalError;
    }
    BR_CHECK(br_calloc((net_setup_t **)&conn->setup, 1, "net connection setup"));
    int *count = &tc->net_fid[(conn->is_send ? tc->nranks : 0) + conn->peer];
    ((net_setup_t *)conn->setup)->fid = (*count)++;
    return ncclSuccess;
}

static ncclResult_t net_recv_setup(br_transport_comm_t *tc, br_conn_t *conn, br_conn_blob_t *blob)
{
    BR_CHECK(net_require(tc, conn->peer));
    BR_CHECK(net_local_fifo(tc, conn));
    net_setup_t *ns = conn->setup;
    ns->dev = net_dev(tc, conn);
    return tc->net->ops->listen(tc->net, ns->dev, blob->net_handle, &ns->listen_comm);
}

static ncclResult_t net_send_attach(br_transport_comm_t *tc, br_conn_t *conn,
                                    const br_conn_blob_t *blob)
{
    BR_CHECK(net_require(tc, conn->peer));
    BR_CHECK(net_local_fifo(tc, conn));
    net_setup_t *ns = conn->setup;
    ns->dev = net_dev(tc, conn);
    memcpy(ns->handle, blob->net_handle, sizeof(ns->handle));
    return ncclSuccess;
}

/*
 * The first message: every net connection carries one empty message, sender to receiver,
 * which both ends complete before setup returns. Some plugins finish their handshake
 * lazily (a connect that returns at once, a provider with manual progress that moves
 * nothing unless called), and the receive side posts nothing until an operation needs
 * it; without this, a rank whose own connections were done could leave setup while a
 * peer's accept still waited for the handshake message only its progress would send.
 * Returns 1 once the message is done, 0 while in flight.
 */
static int net_first_message(br_transport_comm_t *tc, br_conn_t *conn, net_setup_t *ns,
                             ncclResult_t *res_p)
{
    br_net_t *net = tc->net;
    int done = 0, size = 0;

    *res_p = ncclSuccess;
    if (ns->req == NULL) {
        void *data = conn->buf;
        size_t room = conn->stride;
        int tag = conn->peer;
        *res_p = conn->is_send ? net->ops->isend(net, ns->comm, data, 0, tc->rank, ns->mhandle,
                                                 NULL, &ns->req)
                               : net->ops->irecv(net, ns->comm, 1, &data, &room, &tag, &ns->mhandle,
                                                 NULL, &ns->req);
        if (*res_p != ncclSuccess || ns->req == NULL) {
            return 0; /* an error, or the plugin is not ready yet: retry */
        }
    }
    *res_p = net->ops->test(net, ns->req, &done, &size);
    if (*res_p != ncclSuccess) {
        ns->req = NULL; /* finished, failed */
        BR_WARN(NCCL_NET, "rank %d: the first message %s rank %d (host %s) failed on net plugin %s",
                tc->rank, conn->is_send ? "to" : "from", conn->peer, tc->peers[conn->peer].host,
                net->name);
        return 0;
    }
    if (!done) {
        return 0;
    }
    ns->req = NULL;
    if (size != 0) {
        BR_WARN(NCCL_NET, "rank %d: the first message from rank %d (host %s) has %d bytes, not 0",
                tc->rank, conn->peer, tc->peers[conn->peer].host, size);
        *res_p = ncclRemoteError;
        return 0;
    }
    return 1;
}

/* The plugin comm is up and its first message done: give the connection to the proxy. */
static ncclResult_t net_hand_over(br_transport_comm_t *tc, br_conn_t *conn, net_setup_t *ns)
{
    br_net_t *net = tc->net;
    br_net_conn_t *nc = NULL;
    ncclResult_t res;

    BR_CHECK(br_calloc(&nc, 1, "net connection"));
    nc->ctrl = conn->ctrl;
    nc->buf = conn->buf;
    nc->step_size = conn->step_size;
    nc->stride = conn->stride;
    nc->is_send = conn->is_send;
    nc->peer = conn->peer;
    nc->dev = ns->dev;
    nc->net = net;
    nc->fid = ns->fid;
    nc->lane = conn->lane;
    nc->local_rank = local_rank(tc);
    nc->comm = ns->comm;
    nc->mhandle = ns->mhandle;
    if (tc->proxy == NULL) {
        br_proxy_config_t cfg = {.net = net,
                                 .boot = tc->boot,
                                 .rank = tc->rank,
                                 .comm_hash = tc->comm_hash,
                                 .traffic_class = tc->traffic_class,
                                 .net_required = tc->net_required};
        res = br_proxy_create(&cfg, &tc->proxy);
        if (res != ncclSuccess) {
            free(nc);
            return res;
        }
    }
    conn->net = nc;
    ns->comm = NULL; /* owned by the proxy now, with the registration */
    ns->mhandle = NULL;
    if (conn->p2p) {
        BR_INFO(NCCL_INIT | NCCL_NET, "rank %d: p2p %s rank %d via NET/%s device %d (%s)", tc->rank,
                conn->is_send ? "send to" : "receive from", conn->peer, net->name, ns->dev,
                br_plugin_net_dev_name(net, ns->dev));
    } else {
        BR_INFO(NCCL_INIT | NCCL_NET, "rank %d: channel %d %s rank %d via NET/%s device %d (%s)",
                tc->rank, conn->lane, conn->is_send ? "send to" : "receive from", conn->peer,
                net->name, ns->dev, br_plugin_net_dev_name(net, ns->dev));
    }
    return br_proxy_add(tc->proxy, nc);
}

static ncclResult_t net_complete(br_transport_comm_t *tc, br_conn_t *conn, int *done_p)
{
    br_net_t *net = tc->net;
    net_setup_t *ns = conn->setup;
    ncclResult_t res;

    *done_p = 0;
    if (ns->comm == NULL) {
        if (conn->is_send) {
            BR_CHECK(net->ops->connect(net, ns->dev, ns->handle, &ns->comm));
        } else {
            BR_CHECK(net->ops->accept(net, ns->listen_comm, &ns->comm));
        }
        if (ns->comm == NULL) {
            return ncclSuccess;
        }
        if (ns->listen_comm != NULL) {
            (void)net->ops->close_listen(net, ns->listen_comm);
            ns->listen_comm = NULL;
        }
        res = net->ops->reg_mr(net, ns->comm, conn->buf, BR_STEPS * conn->stride, NCCL_PTR_HOST,
                               &ns->mhandle);
        if (res != ncclSuccess) {
            BR_WARN(NCCL_NET, "rank %d: net plugin %s failed to register a FIFO for rank %d",
                    tc->rank, net->name, conn->peer);
            return res;
        }
    }
    if (!net_first_message(tc, conn, ns, &res)) {
        return res;
    }
    BR_CHECK(net_hand_over(tc, conn, ns));
    free(ns);
    conn->setup = NULL;
    *done_p = 1;
    return ncclSuccess;
}

/* The proxy closed the plugin comm of a completed connection; only a connection that
 * never completed still holds plugin state here. */
static void net_close(br_transport_comm_t *tc, br_conn_t *conn)
{
    net_setup_t *ns = conn->setup;
    if (ns != NULL) {
        if (ns->listen_comm != NULL) {
            (void)tc->net->ops->close_listen(tc->net, ns->listen_comm);
        }
        if (ns->mhandle != NULL) {
            /* A first message still in flight cannot be cancelled (the net ABI has none):
             * this is a failed setup, and the plugin comm closes with it. */
            (void)tc->net->ops->dereg_mr(tc->net, ns->comm, ns->mhandle);
        }
        if (ns->comm != NULL) {
            if (conn->is_send) {
                (void)tc->net->ops->close_send(tc->net, ns->comm);
            } else {
                (void)tc->net->ops->close_recv(tc->net, ns->comm);
            }
        }
        free(ns);
        conn->setup = NULL;
    }
    if (conn->mapping != NULL) {
        munmap(conn->mapping, conn->mapping_size);
        conn->mapping = NULL;
    }
}

const br_transport_ops_t br_transport_net = {
    .kind = BR_TRANSPORT_NET,
    .name = "NET",
    .recv_setup = net_recv_setup,
    .send_attach = net_send_attach,
    .complete = net_complete,
    .close = net_close,
};
