/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The net transport: each end keeps its FIFO in local memory and the proxy moves slots
 * through the net plugin. The receiver listens and sends the plugin's handle in its blob;
 * the sender connects with it; both complete with the plugin's non-blocking
 * connect/accept, register the FIFO's slots, complete one 8-byte first message (the
 * sender's choice of the user-buffer path), and hand the connection to the proxy, which
 * owns the plugin comm from then on. LL lines travel in the Simple slots (the plugin
 * writes received bytes in no particular order, so the receiver reads them after tail).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "transport_int.h"
#include "util.h"

/* The plugin handshake of one connection while it completes. */
typedef struct {
    void *listen_comm; /* receiver */
    void *comm;
    int dev;                              /* the net device this end uses */
    int fid;                              /* br_net_conn_t.fid */
    /* The acknowledgement socket (failover): the receiver listens, the sender connects and
     * says the token; -1 when unused. */
    int ack_listen, ack_fd;
    uint64_t ack_token;
    int ack_tls;    /* ack_fd's TLS handshake is under way (ncclSetEncryption) */
    int first_done; /* the first message completed */
    char ack_peer[BR_SOCKET_ADDR_STRLEN]; /* the other end, for messages */
    void *mhandle;                        /* the FIFO's registration, once comm is up */
    void *req;                            /* the first message, while in flight */
    uint64_t userbuf;                     /* br_net_conn_t.userbuf: the sender decides and
                                           * says it in the first message */
    int peer_host_ptr;                    /* sender: the receiver registers host memory */
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

/* The device of a new connection: the rank's NIC by affinity when the topology placed it
 * near one of the plugin's devices (lanes taking turns over the NICs as near as that one),
 * else its lane (channel, or the peer for p2p) and the local rank spread connections over
 * every device in use, as NCCL spreads channels over NICs. Each end picks its own; the
 * two need not agree. */
static int net_dev(const br_transport_comm_t *tc, const br_conn_t *conn)
{
    if (tc->net_npref > 0 && tc->net_pref_of == tc->net) {
        return tc->net_pref[(unsigned)conn->lane % (unsigned)tc->net_npref];
    }
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
    net_setup_t *ns = conn->setup;
    ns->fid = tc->net_fid[(conn->is_send ? tc->nranks : 0) + conn->peer]++;
    ns->ack_listen = ns->ack_fd = -1;
    return ncclSuccess;
}

/*
 * With failover on, the receiver acknowledges the steps it holds on a TCP socket of the
 * connection's own (core/proxy/proxy_link.c), beside the bootstrap's and never through
 * the net plugin: the receiver writes, the sender's proxy reads when it needs slots, and
 * no thread is woken for it. The receiver listens on the bootstrap's address and puts
 * it in the blob with a random token; the sender connects and sends the token first.
 */
static ncclResult_t ack_listen(br_transport_comm_t *tc, net_setup_t *ns, br_conn_blob_t *blob)
{
    br_socket_addr_t local;

    if (BR_PARAM_INT(FAILOVER) <= 0) {
        return ncclSuccess;
    }
    br_bootstrap_listen_ip(tc->boot, &local);
    BR_CHECK(br_socket_listen(&local, &ns->ack_listen, &blob->ack_addr));
    BR_CHECK(br_random_bytes(&ns->ack_token, sizeof(ns->ack_token)));
    blob->ack_token = ns->ack_token;
    return ncclSuccess;
}

static ncclResult_t ack_connect(br_transport_comm_t *tc, br_conn_t *conn, net_setup_t *ns,
                                const br_conn_blob_t *blob)
{
    uint64_t deadline = br_time_ns() + (uint64_t)BR_PARAM_INT(BOOTSTRAP_TIMEOUT) * 1000000000ull;
    ncclResult_t res;

    if (!br_socket_addr_is_valid(&blob->ack_addr)) {
        return ncclSuccess; /* the receiver does not acknowledge */
    }
    /* With TLS the handshake moves in net_complete's polls (ack_secure), as the receiver's
     * does: both ends of a ring of ranks attach before either accepts. The token follows. */
    res = br_socket_connect_plain(&blob->ack_addr, deadline, &ns->ack_fd);
    br_socket_addr_str(&blob->ack_addr, ns->ack_peer, sizeof(ns->ack_peer));
    ns->ack_token = blob->ack_token;
    if (res == ncclSuccess) {
        int t = br_socket_secure_begin(ns->ack_fd, 0, ns->ack_peer);
        ns->ack_tls = t > 0;
        res = t < 0 ? ncclRemoteError
              : t == 0
                  ? br_socket_send_all(ns->ack_fd, &ns->ack_token, sizeof(ns->ack_token), deadline)
                  : ncclSuccess;
    }
    if (res != ncclSuccess) {
        char text[BR_SOCKET_ADDR_STRLEN], fate[1100];
        int err = errno;
        /* Refused: the peer closed after publishing it, which it does when it failed. */
        br_transport_peer_fate(tc, conn->peer, err == ECONNREFUSED ? BR_FATE_WAIT_NS : 0, fate,
                               sizeof(fate));
        BR_WARN(NCCL_NET, "rank %d: cannot connect the acknowledgement socket of rank %d (host "
                "%s) at %s: %s%s", tc->rank, conn->peer, tc->peers[conn->peer].host,
                br_socket_addr_str(&blob->ack_addr, text, sizeof(text)), strerror(err), fate);
    }
    return res;
}

/* Either end: move ack_fd's TLS handshake. Returns 1 once it is done (or there is none);
 * the sender then writes its token. */
static int ack_secure(net_setup_t *ns, int server, ncclResult_t *res_p)
{
    if (!ns->ack_tls) {
        return 1;
    }
    int r = br_socket_secure_step(ns->ack_fd, server, ns->ack_peer);
    if (r <= 0) {
        *res_p = r < 0 ? ncclRemoteError : ncclSuccess;
        return 0;
    }
    ns->ack_tls = 0;
    if (!server) {
        *res_p = br_socket_send_all(ns->ack_fd, &ns->ack_token, sizeof(ns->ack_token),
                                    br_time_ns() + 5000000000ull);
        return *res_p == ncclSuccess;
    }
    return 1;
}

/* Receiver: take the sender's acknowledgement connection. Returns 1 once it is there (or
 * none is expected), 0 while it is not. */
static int ack_accept(br_transport_comm_t *tc, br_conn_t *conn, net_setup_t *ns,
                      ncclResult_t *res_p)
{
    uint64_t token = 0;
    int fd = -1;

    *res_p = ncclSuccess;
    if (ns->ack_tls) {
        if (!ack_secure(ns, 1, res_p)) {
            if (*res_p != ncclSuccess) { /* refused: wait for another */
                br_socket_close(&ns->ack_fd);
                *res_p = ncclSuccess;
            }
            return 0;
        }
        fd = ns->ack_fd;
        ns->ack_fd = -1;
        goto token;
    }
    if (ns->ack_listen < 0) {
        return 1;
    }
    fd = accept4(ns->ack_listen, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
            BR_WARN(NCCL_NET, "rank %d: accepting the acknowledgement socket of rank %d failed: %s",
                    tc->rank, conn->peer, strerror(errno));
            *res_p = ncclSystemError;
        }
        return 0;
    }
    snprintf(ns->ack_peer, sizeof(ns->ack_peer), "rank %d (host %s)", conn->peer,
             tc->peers[conn->peer].host);
    switch (br_socket_secure_begin(fd, 1, ns->ack_peer)) {
    case 1: /* the handshake goes on in the next calls */
        ns->ack_fd = fd;
        ns->ack_tls = 1;
        return 0;
    case -1: br_socket_close(&fd); return 0;
    default: break;
    }
token:
    /* The sender wrote the token right after connecting (with TLS: after the handshake). */
    if (br_socket_recv_all(fd, &token, sizeof(token), br_time_ns() + 5000000000ull) !=
            ncclSuccess ||
        token != ns->ack_token) {
        BR_INFO(NCCL_NET, "rank %d: dropped a connection to the acknowledgement socket for rank "
                "%d without its token", tc->rank, conn->peer);
        br_socket_close(&fd);
        return 0;
    }
    ns->ack_fd = fd;
    br_socket_close(&ns->ack_listen);
    return 1;
}

static ncclResult_t net_recv_setup(br_transport_comm_t *tc, br_conn_t *conn, br_conn_blob_t *blob)
{
    BR_CHECK(net_require(tc, conn->peer));
    BR_CHECK(net_local_fifo(tc, conn));
    net_setup_t *ns = conn->setup;
    ns->dev = net_dev(tc, conn);
    BR_CHECK(ack_listen(tc, ns, blob));
    blob->net_userbuf = (tc->net->props.ptrSupport & NCCL_PTR_HOST) != 0;
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
    ns->peer_host_ptr = blob->net_userbuf != 0;
    if (ns->peer_host_ptr && (tc->net->props.ptrSupport & NCCL_PTR_HOST) != 0) {
        ns->userbuf = (uint64_t)BR_PARAM_INT(NET_USERBUF_BYTES);
    }
    return ack_connect(tc, conn, ns, blob);
}

/*
 * The first message: every net connection carries one 8-byte message, sender to receiver
 * (the sender's choice of the user-buffer path for the connection: the smallest
 * operation that takes it, 0 for none, so both ends choose alike),
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
        if (conn->is_send) {
            memcpy(conn->buf, &ns->userbuf, sizeof(ns->userbuf));
        }
        *res_p = conn->is_send ? net->ops->isend(net, ns->comm, data, sizeof(ns->userbuf), tc->rank,
                                                 ns->mhandle, NULL, &ns->req)
                               : net->ops->irecv(net, ns->comm, 1, &data, &room, &tag, &ns->mhandle,
                                                 NULL, &ns->req);
        if (*res_p != ncclSuccess || ns->req == NULL) {
            return 0; /* an error, or the plugin is not ready yet: retry */
        }
    }
    *res_p = net->ops->test(net, ns->req, &done, &size);
    if (*res_p != ncclSuccess) {
        ns->req = NULL; /* finished, failed */
        /* The peer closed: say whether a failed rank reported why (the first cause). */
        char fate[1100];
        br_transport_peer_fate(tc, conn->peer, BR_FATE_WAIT_NS, fate, sizeof(fate));
        BR_WARN(NCCL_NET,
                "rank %d: the first message %s rank %d (host %s) failed on net plugin %s%s",
                tc->rank, conn->is_send ? "to" : "from", conn->peer, tc->peers[conn->peer].host,
                net->name, fate);
        return 0;
    }
    if (!done) {
        return 0;
    }
    ns->req = NULL;
    if (conn->is_send) {
        return 1;
    }
    if (size != (int)sizeof(ns->userbuf)) {
        BR_WARN(NCCL_NET, "rank %d: the first message from rank %d (host %s) has %d bytes, not %zu",
                tc->rank, conn->peer, tc->peers[conn->peer].host, size, sizeof(ns->userbuf));
        *res_p = ncclRemoteError;
        return 0;
    }
    memcpy(&ns->userbuf, conn->buf, sizeof(ns->userbuf));
    return 1;
}

/* The plugin comm is up and its first message done: give the connection to the proxy. */
/* What the plugin registers of a FIFO: its slots, and the keep ring after them if any. */
static size_t fifo_reg_bytes(const br_conn_t *conn)
{
    return BR_STEPS * conn->stride + br_transport_keep_bytes(conn);
}

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
    nc->ack_fd = ns->ack_fd;
    nc->acks = ns->ack_fd >= 0;
    nc->reg_bytes = fifo_reg_bytes(conn);
    if (nc->acks && br_transport_keep_bytes(conn) > 0) {
        nc->keep = conn->buf + BR_STEPS * conn->stride;
    }
    nc->userbuf = ns->userbuf; /* Send/Recv, and ring collectives (exec_sched.c) */
    if (tc->proxy == NULL) {
        br_proxy_config_t cfg = {.net = net,
                                 .boot = tc->boot,
                                 .rank = tc->rank,
                                 .comm_hash = tc->comm_hash,
                                 .traffic_class = tc->traffic_class,
                                 .net_required = tc->net_required,
                                 .regs = &tc->net_regs};
        res = br_proxy_create(&cfg, &tc->proxy);
        if (res != ncclSuccess) {
            free(nc);
            return res;
        }
    }
    conn->net = nc;
    ns->comm = NULL; /* owned by the proxy now, with the registration and the socket */
    ns->mhandle = NULL;
    ns->ack_fd = -1;
    char why[128];
    if (nc->userbuf > 0) {
        snprintf(why, sizeof(why), "user buffers from %llu bytes", (unsigned long long)nc->userbuf);
    } else if (!conn->is_send) {
        snprintf(why, sizeof(why), "FIFO only: the sender chose so");
    } else {
        snprintf(why, sizeof(why), "FIFO only: %s",
                 BR_PARAM_INT(NET_USERBUF_BYTES) <= 0 ? "BRAID_NET_USERBUF_BYTES is 0"
                 : !ns->peer_host_ptr ? "the receiver's plugin cannot register host memory"
                                      : "this plugin cannot register host memory");
    }
    if (conn->p2p) {
        BR_INFO(NCCL_INIT | NCCL_NET, "rank %d: p2p %s rank %d via NET/%s device %d (%s), %s",
                tc->rank, conn->is_send ? "send to" : "receive from", conn->peer, net->name,
                ns->dev, br_plugin_net_dev_name(net, ns->dev), why);
    } else {
        /* Ring collectives (Broadcast, AllGather, AllReduce on Simple) use it too. */
        BR_INFO(NCCL_INIT | NCCL_NET, "rank %d: channel %d %s rank %d via NET/%s device %d (%s), %s",
                tc->rank, conn->lane, conn->is_send ? "send to" : "receive from", conn->peer,
                net->name, ns->dev, br_plugin_net_dev_name(net, ns->dev), why);
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
        res = conn->is_send ? net->ops->connect(net, ns->dev, ns->handle, &ns->comm)
                            : net->ops->accept(net, ns->listen_comm, &ns->comm);
        if (res != ncclSuccess) {
            /* The plugin's own line names only an address: say whose, whether its process
             * still lives where this rank can tell, and what a failed rank reported (the
             * peer may have given up because of it). */
            const br_peer_info_t *pi = &tc->peers[conn->peer];
            char fate[400];
            /* At init a connection fails mostly because its peer failed and went: wait a
             * moment for that failure's report, so the error names the first cause. */
            br_transport_peer_fate(tc, conn->peer, BR_FATE_WAIT_NS, fate, sizeof(fate));
            BR_WARN(NCCL_NET | NCCL_INIT,
                    "rank %d (host %s): net plugin %s failed to %s rank %d (host %s, pid %d)%s",
                    tc->rank, tc->peers[tc->rank].host, net->name,
                    conn->is_send ? "connect to" : "accept the connection of", conn->peer, pi->host,
                    pi->pid, fate);
            return res;
        }
        if (ns->comm == NULL) {
            return ncclSuccess;
        }
        if (ns->listen_comm != NULL) {
            (void)net->ops->close_listen(net, ns->listen_comm);
            ns->listen_comm = NULL;
        }
        res = net->ops->reg_mr(net, ns->comm, conn->buf, fifo_reg_bytes(conn), NCCL_PTR_HOST,
                               &ns->mhandle);
        if (res != ncclSuccess) {
            BR_WARN(NCCL_NET, "rank %d: net plugin %s failed to register a FIFO for rank %d",
                    tc->rank, net->name, conn->peer);
            return res;
        }
    }
    /* The acknowledgement socket and the first message move side by side: with TLS the
     * sender's handshake needs the receiver's steps, which must not wait for the message. */
    res = ncclSuccess;
    int acked = conn->is_send ? ack_secure(ns, 0, &res) : ack_accept(tc, conn, ns, &res);
    BR_CHECK(res);
    ns->first_done = ns->first_done || net_first_message(tc, conn, ns, &res);
    if (!ns->first_done || !acked) {
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
        br_socket_close(&ns->ack_listen);
        br_socket_close(&ns->ack_fd);
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
