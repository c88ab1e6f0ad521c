/* SPDX-License-Identifier: Apache-2.0 */
/*
 * net-ib connections: listen / connect / accept over a TCP handshake, queue pairs, close.
 *
 * The 128-byte handle carries the listener's address and a random secret. connect and
 * accept are non-blocking state machines (NETIB_ST_*): the connector makes its queue
 * pairs and FIFO, sends a netib_info_t, receives the acceptor's, moves its queue pairs to
 * RTR and RTS and sends one "ready" byte; the acceptor makes its queue pairs from the
 * connector's info (count, split mode), moves them to RTS before answering and returns the
 * comm once "ready" came, i.e. once the connector can take the FIFO writes. A connect in
 * progress is found again through a list keyed by the handle's address and contents (the
 * handle itself is only read, so a garbage handle can do no harm).
 *
 * The socket stays open for the comm's life: its end of file tells the data path that the
 * peer closed, long before queue pair retries would.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "netib.h"
#include "param_lite.h"

#include "common/check.h"

/* The handle: what listen writes and connect reads. */
typedef struct {
    uint32_t magic;
    uint32_t port; /* the listener's device port, for logs */
    uint64_t secret;
    union {
        struct sockaddr sa;
        struct sockaddr_in sin;
        struct sockaddr_in6 sin6;
    } addr;
    char dev[32];
} netib_handle_t;

_Static_assert(sizeof(netib_handle_t) <= NCCL_NET_HANDLE_MAXSIZE, "handle too large");

typedef struct {
    netib_dev_t *dev;
    int fd;
    int tc;
    uint64_t secret;
    char addr[NETIB_ADDR_STRLEN];
    netib_comm_t *pending; /* the connection being accepted, or NULL */
} netib_listen_t;

/* A connect in progress, found again by the handle the caller passes on every call. */
typedef struct netib_pending {
    struct netib_pending *next;
    const void *handle;
    unsigned char copy[sizeof(netib_handle_t)];
    netib_comm_t *comm;
} netib_pending_t;

static pthread_mutex_t netib_pending_lock = PTHREAD_MUTEX_INITIALIZER;
static netib_pending_t *netib_pending;

void netib_comm_fail(netib_comm_t *comm, ncclResult_t res)
{
    if (comm->err == ncclSuccess) {
        comm->err = res;
    }
}

/* Move bytes on a non-blocking socket. 1: all of len moved; 0: not yet; -1: error or end
 * of file (logged, naming the peer). */
static int sock_io(netib_comm_t *c, int send_dir, void *buf, size_t len, const char *what)
{
    while (c->off < len) {
        ssize_t n = send_dir ? send(c->fd, (char *)buf + c->off, len - c->off, MSG_NOSIGNAL)
                             : recv(c->fd, (char *)buf + c->off, len - c->off, 0);
        if (n > 0) {
            c->off += (size_t)n;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return 0;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        BR_WARN(NCCL_NET, "NET/IB : %s:%d: handshake with %s: %s failed: %s", c->dev->name,
                c->dev->port, c->peer, what,
                n == 0 ? "the peer closed the connection" : strerror(errno));
        return -1;
    }
    c->off = 0;
    return 1;
}

static ncclResult_t create_qp(netib_comm_t *c, struct ibv_qp **qp_p)
{
    struct ibv_qp_init_attr ia;
    struct ibv_qp_attr a;
    struct ibv_qp *qp;

    memset(&ia, 0, sizeof(ia));
    ia.qp_context = c;
    ia.send_cq = c->cq;
    ia.recv_cq = c->cq;
    ia.qp_type = IBV_QPT_RC;
    /* Sender: per slot up to NETIB_MAX_RECVS data writes, the sizes write and the
     * immediate; receiver: one FIFO write per slot (flush reads on their own QP). */
    ia.cap.max_send_wr = NETIB_NREQ * (NETIB_MAX_RECVS + 2);
    ia.cap.max_recv_wr = NETIB_NREQ;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    ia.cap.max_inline_data = NETIB_INLINE_WANT;
    qp = ibv_create_qp(c->dev->pd, &ia);
    if (qp == NULL) { /* a device without inline data */
        ia.cap.max_inline_data = 0;
        qp = ibv_create_qp(c->dev->pd, &ia);
    }
    if (qp == NULL) {
        BR_WARN(NCCL_NET, "NET/IB : %s:%d: ibv_create_qp for peer %s failed: %s", c->dev->name,
                c->dev->port, c->peer, strerror(errno));
        return ncclSystemError;
    }
    c->max_inline = ia.cap.max_inline_data;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = (uint16_t)netib_param_pkey();
    a.port_num = (uint8_t)c->dev->port;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    if (ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
        BR_WARN(NCCL_NET, "NET/IB : %s:%d: QP %#x to INIT failed: %s", c->dev->name, c->dev->port,
                qp->qp_num, strerror(errno));
        ibv_destroy_qp(qp);
        return ncclSystemError;
    }
    *qp_p = qp;
    return ncclSuccess;
}

/* INIT -> RTR -> RTS towards the remote queue pair qpn described by r. */
static ncclResult_t qp_connect(netib_comm_t *c, struct ibv_qp *qp, uint32_t qpn,
                               const netib_info_t *r)
{
    netib_dev_t *d = c->dev;
    struct ibv_qp_attr a;

    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = d->mtu < (enum ibv_mtu)r->mtu ? d->mtu : (enum ibv_mtu)r->mtu;
    a.dest_qp_num = qpn;
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    if (d->gid_index >= 0) {
        a.ah_attr.is_global = 1;
        memcpy(a.ah_attr.grh.dgid.raw, r->gid, 16);
        a.ah_attr.grh.sgid_index = (uint8_t)d->gid_index;
        a.ah_attr.grh.hop_limit = 255;
        a.ah_attr.grh.traffic_class = (uint8_t)c->tc;
    }
    a.ah_attr.dlid = r->lid;
    a.ah_attr.sl = (uint8_t)netib_param_sl();
    a.ah_attr.port_num = (uint8_t)d->port;
    if (ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0) {
        BR_WARN(NCCL_NET, "NET/IB : %s:%d: QP %#x to RTR (peer %s QP %#x on %.32s) failed: %s",
                d->name, d->port, qp->qp_num, c->peer, qpn, r->dev, strerror(errno));
        return ncclSystemError;
    }
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = (uint8_t)netib_param_timeout();
    a.retry_cnt = (uint8_t)netib_param_retry_cnt();
    a.rnr_retry = 7; /* infinite: a receive is always posted before its FIFO entry */
    a.sq_psn = 0;
    a.max_rd_atomic = 1;
    if (ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) != 0) {
        BR_WARN(NCCL_NET, "NET/IB : %s:%d: QP %#x to RTS failed: %s", d->name, d->port, qp->qp_num,
                strerror(errno));
        return ncclSystemError;
    }
    return ncclSuccess;
}

static void *alloc_reg(netib_comm_t *c, size_t len, int access, struct ibv_mr **mr_p)
{
    void *p = NULL;

    if (posix_memalign(&p, 4096, len) != 0) {
        BR_WARN(NCCL_NET, "NET/IB : out of memory for a %zu-byte comm buffer", len);
        return NULL;
    }
    memset(p, 0, len);
    *mr_p = ibv_reg_mr(c->dev->pd, p, len, access);
    if (*mr_p == NULL) {
        BR_WARN(NCCL_NET, "NET/IB : %s:%d: ibv_reg_mr of a %zu-byte comm buffer failed: %s",
                c->dev->name, c->dev->port, len, strerror(errno));
        free(p);
        return NULL;
    }
    return p;
}

static void comm_free(netib_comm_t *c)
{
    if (c == NULL) {
        return;
    }
    netib_data_release_all(c);
    if (c->flush_qp != NULL) {
        ibv_destroy_qp(c->flush_qp);
    }
    for (int i = 0; i < NETIB_MAX_QPS; i++) {
        if (c->qps[i] != NULL) {
            ibv_destroy_qp(c->qps[i]);
        }
    }
    if (c->flush_mr != NULL) {
        ibv_dereg_mr(c->flush_mr);
    }
    if (c->fifo_mr != NULL) {
        ibv_dereg_mr(c->fifo_mr);
    }
    if (c->gsizes_mr != NULL) {
        ibv_dereg_mr(c->gsizes_mr);
    }
    if (c->cq != NULL) {
        ibv_destroy_cq(c->cq);
    }
    if (c->fd >= 0) {
        close(c->fd);
    }
    free(c->fifo);
    free(c->gsizes);
    free(c->reqs);
    free(c->free_reqs);
    free(c);
}

/* A comm with its completion queue, buffers and request pool (no queue pairs yet). */
static ncclResult_t comm_create(netib_dev_t *d, int is_send, int tc, int fd, netib_comm_t **c_p)
{
    netib_comm_t *c = calloc(1, sizeof(*c));
    int fifo_access =
        is_send ? IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE : IBV_ACCESS_LOCAL_WRITE;
    int sizes_access =
        is_send ? IBV_ACCESS_LOCAL_WRITE : IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

    if (c == NULL) {
        BR_WARN(NCCL_NET, "NET/IB : out of memory for a comm");
        return ncclSystemError;
    }
    c->dev = d;
    c->is_send = is_send;
    c->fd = fd;
    c->tc = tc >= 0 ? tc : (int)netib_param_tc();
    c->cq = ibv_create_cq(d->ctx, 2 * NETIB_NREQ * (NETIB_MAX_QPS + 2) + 16, NULL, NULL, 0);
    if (c->cq == NULL) {
        BR_WARN(NCCL_NET, "NET/IB : %s:%d: ibv_create_cq failed: %s", d->name, d->port,
                strerror(errno));
        goto err;
    }
    c->fifo = alloc_reg(c, NETIB_NREQ * sizeof(netib_fifo_slot_t), fifo_access, &c->fifo_mr);
    c->gsizes = alloc_reg(c, NETIB_NREQ * sizeof(*c->gsizes), sizes_access, &c->gsizes_mr);
    c->nreqs = is_send ? NETIB_MAX_SENDS : 2 * NETIB_NREQ;
    c->reqs = calloc((size_t)c->nreqs, sizeof(*c->reqs));
    c->free_reqs = calloc((size_t)c->nreqs, sizeof(*c->free_reqs));
    if (c->fifo == NULL || c->gsizes == NULL || c->reqs == NULL || c->free_reqs == NULL) {
        goto err;
    }
    for (int i = 0; i < c->nreqs; i++) {
        c->reqs[i].comm = c;
        c->free_reqs[c->nfree++] = &c->reqs[c->nreqs - 1 - i];
    }
    *c_p = c;
    return ncclSuccess;
err:
    c->fd = -1; /* the caller owns fd on failure */
    comm_free(c);
    return ncclSystemError;
}

static void fill_info(netib_comm_t *c, netib_info_t *i, uint64_t secret)
{
    memset(i, 0, sizeof(*i));
    i->magic = NETIB_MAGIC;
    i->secret = secret;
    i->nqps = (uint32_t)c->nqps;
    i->split = (uint8_t)c->split;
    for (int q = 0; q < c->nqps; q++) {
        i->qpn[q] = c->qps[q]->qp_num;
    }
    memcpy(i->gid, c->dev->gid.raw, 16);
    i->lid = c->dev->lid;
    i->link_layer = (uint8_t)c->dev->link_layer;
    i->mtu = (uint8_t)c->dev->mtu;
    i->port = (uint32_t)c->dev->port;
    snprintf(i->dev, sizeof(i->dev), "%.31s", c->dev->name);
    if (c->is_send) {
        i->addr = (uint64_t)(uintptr_t)c->fifo;
        i->rkey = c->fifo_mr->rkey;
    } else {
        i->addr = (uint64_t)(uintptr_t)c->gsizes;
        i->rkey = c->gsizes_mr->rkey;
    }
}

static ncclResult_t connect_all(netib_comm_t *c, const netib_info_t *r)
{
    if (r->link_layer != c->dev->link_layer) {
        BR_WARN(NCCL_NET, "NET/IB : %s:%d (%s) cannot reach peer %s on %.32s:%u (%s)", c->dev->name,
                c->dev->port, c->dev->link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "IB",
                c->peer, r->dev, r->port, r->link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "IB");
        return ncclSystemError;
    }
    for (int q = 0; q < c->nqps; q++) {
        BR_CHECK(qp_connect(c, c->qps[q], r->qpn[q], r));
    }
    c->remote_addr = r->addr;
    c->remote_rkey = r->rkey;
    return ncclSuccess;
}

/* listen --------------------------------------------------------------------------- */

ncclResult_t netib_conn_listen(int dev, int tc, void *handle, void **listen_comm)
{
    netib_dev_t *d = netib_dev_get(dev);
    netib_handle_t *h = handle;
    netib_listen_t *l;
    ncclResult_t res = ncclSuccess;
    socklen_t len;

    *listen_comm = NULL;
    if (d == NULL) {
        BR_WARN(NCCL_NET, "NET/IB : listen on device %d: no such device (%d devices)", dev,
                netib_dev_count());
        return ncclInvalidUsage;
    }
    BR_CHECK(netib_dev_check(d, "listen"));
    l = calloc(1, sizeof(*l));
    if (l == NULL) {
        BR_WARN(NCCL_NET, "NET/IB : out of memory for a listener");
        return ncclSystemError;
    }
    l->dev = d;
    l->tc = tc;
    l->fd = -1;
    if (getrandom(&l->secret, sizeof(l->secret), 0) != (ssize_t)sizeof(l->secret)) {
        l->secret = (uint64_t)netib_now_ns() * 0x9e3779b97f4a7c15ULL ^ (uint64_t)getpid();
    }
    memset(h, 0, NCCL_NET_HANDLE_MAXSIZE);
    memcpy(&h->addr, &d->oob,
           d->oob.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
    BR_SYS_GOTO(l->fd = socket(h->addr.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0),
                res, err_free);
    len = h->addr.sa.sa_family == AF_INET6 ? sizeof(h->addr.sin6) : sizeof(h->addr.sin);
    BR_SYS_GOTO(bind(l->fd, &h->addr.sa, len), res, err_close);
    BR_SYS_GOTO(listen(l->fd, 64), res, err_close);
    BR_SYS_GOTO(getsockname(l->fd, &h->addr.sa, &len), res, err_close);
    h->magic = NETIB_MAGIC;
    h->port = (uint32_t)d->port;
    h->secret = l->secret;
    snprintf(h->dev, sizeof(h->dev), "%.31s", d->name);
    netib_addr_str(&h->addr.sa, l->addr, sizeof(l->addr));
    BR_TRACE(NCCL_NET, "NET/IB : %s:%d listening on %s", d->name, d->port, l->addr);
    *listen_comm = l;
    return ncclSuccess;

err_close:
    close(l->fd);
err_free:
    free(l);
    return res;
}

/* connect -------------------------------------------------------------------------- */

static netib_pending_t *pending_find(const void *handle)
{
    netib_pending_t *p;

    pthread_mutex_lock(&netib_pending_lock);
    for (p = netib_pending; p != NULL; p = p->next) {
        if (p->handle == handle && memcmp(p->copy, handle, sizeof(p->copy)) == 0) {
            break;
        }
    }
    pthread_mutex_unlock(&netib_pending_lock);
    return p;
}

static void pending_remove(netib_pending_t *p)
{
    pthread_mutex_lock(&netib_pending_lock);
    for (netib_pending_t **pp = &netib_pending; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    }
    pthread_mutex_unlock(&netib_pending_lock);
    free(p);
}

/* First call for a handle: socket, queue pairs, FIFO; returns the pending entry. */
static ncclResult_t connect_start(netib_dev_t *d, int tc, const netib_handle_t *h,
                                  netib_pending_t **p_p)
{
    netib_pending_t *p = calloc(1, sizeof(*p));
    netib_comm_t *c = NULL;
    char peer[NETIB_ADDR_STRLEN];
    ncclResult_t res = ncclSuccess;
    int fd = -1, one = 1;
    socklen_t len = h->addr.sa.sa_family == AF_INET6 ? sizeof(h->addr.sin6) : sizeof(h->addr.sin);

    if (p == NULL) {
        BR_WARN(NCCL_NET, "NET/IB : out of memory for a connection");
        return ncclSystemError;
    }
    netib_addr_str(&h->addr.sa, peer, sizeof(peer));
    BR_SYS_GOTO(fd = socket(h->addr.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0),
                res, err_free);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, &h->addr.sa, len) != 0 && errno != EINPROGRESS) {
        BR_WARN(NCCL_NET, "NET/IB : %s:%d: connecting to %s (%.32s:%u) failed: %s", d->name,
                d->port, peer, h->dev, h->port, strerror(errno));
        res = ncclSystemError;
        goto err_close;
    }
    BR_CHECK_GOTO(comm_create(d, 1, tc, fd, &c), res, err_close);
    snprintf(c->peer, sizeof(c->peer), "%s", peer);
    c->nqps = (int)netib_param_qps_per_conn();
    if (c->nqps < 1 || c->nqps > NETIB_MAX_QPS) {
        BR_WARN(NCCL_NET | NCCL_ENV,
                "NET/IB : NCCL_IB_QPS_PER_CONNECTION %d is out of 1..%d; "
                "using %d",
                c->nqps, NETIB_MAX_QPS, c->nqps < 1 ? 1 : NETIB_MAX_QPS);
        c->nqps = c->nqps < 1 ? 1 : NETIB_MAX_QPS;
    }
    c->split = netib_param_split_data() != 0 && c->nqps > 1;
    for (int q = 0; q < c->nqps; q++) {
        BR_CHECK_GOTO(create_qp(c, &c->qps[q]), res, err_comm);
    }
    fill_info(c, &c->info_out, h->secret);
    c->stage = NETIB_ST_CONNECTING;
    p->handle = h;
    memcpy(p->copy, h, sizeof(p->copy));
    p->comm = c;
    pthread_mutex_lock(&netib_pending_lock);
    p->next = netib_pending;
    netib_pending = p;
    pthread_mutex_unlock(&netib_pending_lock);
    *p_p = p;
    return ncclSuccess;

err_comm:
    comm_free(c); /* closes fd */
    free(p);
    return res;
err_close:
    close(fd);
err_free:
    free(p);
    return res;
}

/* Advance a connect; 1 when the comm is ready, 0 not yet, -1 failed (logged). */
static int connect_step(netib_comm_t *c)
{
    int r;

    if (c->stage == NETIB_ST_CONNECTING) {
        struct pollfd pfd = {.fd = c->fd, .events = POLLOUT};
        int err = 0;
        socklen_t len = sizeof(err);
        if (poll(&pfd, 1, 0) != 1) {
            return 0;
        }
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
            BR_WARN(NCCL_NET, "NET/IB : %s:%d: connecting to %s failed: %s", c->dev->name,
                    c->dev->port, c->peer, strerror(err));
            return -1;
        }
        c->stage = NETIB_ST_SEND_INFO;
    }
    if (c->stage == NETIB_ST_SEND_INFO) {
        if ((r = sock_io(c, 1, &c->info_out, sizeof(c->info_out), "send")) != 1) {
            return r;
        }
        c->stage = NETIB_ST_RECV_INFO;
    }
    if (c->stage == NETIB_ST_RECV_INFO) {
        if ((r = sock_io(c, 0, &c->info_in, sizeof(c->info_in), "receive")) != 1) {
            return r;
        }
        if (c->info_in.magic != NETIB_MAGIC || c->info_in.nqps != (uint32_t)c->nqps) {
            BR_WARN(NCCL_NET,
                    "NET/IB : %s:%d: peer %s answered with a bad handshake (magic "
                    "%#x, %u QPs for %d)",
                    c->dev->name, c->dev->port, c->peer, c->info_in.magic, c->info_in.nqps,
                    c->nqps);
            return -1;
        }
        if (connect_all(c, &c->info_in) != ncclSuccess) {
            return -1;
        }
        c->stage = NETIB_ST_SEND_READY;
    }
    if (c->stage == NETIB_ST_SEND_READY) {
        uint8_t ready = 1;
        if ((r = sock_io(c, 1, &ready, 1, "send")) != 1) {
            return r;
        }
        c->stage = NETIB_ST_DONE;
    }
    return 1;
}

ncclResult_t netib_conn_connect(int dev, int tc, void *handle, void **send_comm)
{
    netib_dev_t *d = netib_dev_get(dev);
    const netib_handle_t *h = handle;
    netib_pending_t *p;
    int r;

    *send_comm = NULL;
    if (d == NULL) {
        BR_WARN(NCCL_NET, "NET/IB : connect on device %d: no such device (%d devices)", dev,
                netib_dev_count());
        return ncclInvalidUsage;
    }
    p = pending_find(handle);
    if (p == NULL) {
        if (h->magic != NETIB_MAGIC ||
            (h->addr.sa.sa_family != AF_INET && h->addr.sa.sa_family != AF_INET6)) {
            BR_WARN(NCCL_NET,
                    "NET/IB : %s:%d: connect with a handle that net-ib did not make "
                    "(magic %#x)",
                    d->name, d->port, h->magic);
            return ncclInvalidUsage;
        }
        BR_CHECK(netib_dev_check(d, "connect"));
        BR_CHECK(connect_start(d, tc, h, &p));
    }
    r = connect_step(p->comm);
    if (r == 0) {
        return ncclSuccess;
    }
    if (r < 0) {
        comm_free(p->comm);
        pending_remove(p);
        return ncclRemoteError;
    }
    BR_INFO(NCCL_NET, "NET/IB : %s:%d: send comm to %s (%.32s:%u), %d QP%s from %#x%s", d->name,
            d->port, p->comm->peer, p->comm->info_in.dev, p->comm->info_in.port, p->comm->nqps,
            p->comm->nqps > 1 ? "s" : "", p->comm->qps[0]->qp_num,
            p->comm->split ? ", data split across them" : "");
    *send_comm = p->comm;
    pending_remove(p);
    return ncclSuccess;
}

/* accept --------------------------------------------------------------------------- */

/* The connector's info arrived on l->pending: check it, make and connect queue pairs. */
static ncclResult_t accept_setup(netib_listen_t *l, netib_comm_t *c)
{
    const netib_info_t *r = &c->info_in;

    if (r->magic != NETIB_MAGIC || r->secret != l->secret) {
        BR_WARN(NCCL_NET, "NET/IB : %s:%d: dropped a connection from %s to %s: wrong %s",
                l->dev->name, l->dev->port, c->peer, l->addr,
                r->magic != NETIB_MAGIC ? "magic" : "secret");
        return ncclRemoteError;
    }
    if (r->nqps < 1 || r->nqps > NETIB_MAX_QPS) {
        BR_WARN(NCCL_NET, "NET/IB : %s:%d: peer %s asks for %u QPs", l->dev->name, l->dev->port,
                c->peer, r->nqps);
        return ncclRemoteError;
    }
    c->nqps = (int)r->nqps;
    c->split = r->split != 0;
    for (int q = 0; q < c->nqps; q++) {
        BR_CHECK(create_qp(c, &c->qps[q]));
    }
    BR_CHECK(connect_all(c, r));
    if ((c->dev->ptr_support & NCCL_PTR_CUDA) || netib_param_flush_host()) {
        /* iflush reads through a queue pair connected to itself. */
        netib_info_t self;
        BR_CHECK(create_qp(c, &c->flush_qp));
        c->flush_mr =
            ibv_reg_mr(c->dev->pd, &c->flush_buf, sizeof(c->flush_buf), IBV_ACCESS_LOCAL_WRITE);
        if (c->flush_mr == NULL) {
            BR_WARN(NCCL_NET, "NET/IB : %s:%d: ibv_reg_mr of the flush buffer failed: %s",
                    c->dev->name, c->dev->port, strerror(errno));
            return ncclSystemError;
        }
        fill_info(c, &self, 0);
        BR_CHECK(qp_connect(c, c->flush_qp, c->flush_qp->qp_num, &self));
    }
    fill_info(c, &c->info_out, l->secret);
    return ncclSuccess;
}

/* Advance the accept in progress; 1 ready, 0 not yet, -1 this connection failed. */
static int accept_step(netib_listen_t *l, netib_comm_t *c)
{
    int r;

    if (c->stage == NETIB_ST_RECV_INFO) {
        if ((r = sock_io(c, 0, &c->info_in, sizeof(c->info_in), "receive")) != 1) {
            return r;
        }
        if (accept_setup(l, c) != ncclSuccess) {
            return -1;
        }
        c->stage = NETIB_ST_SEND_INFO;
    }
    if (c->stage == NETIB_ST_SEND_INFO) {
        if ((r = sock_io(c, 1, &c->info_out, sizeof(c->info_out), "send")) != 1) {
            return r;
        }
        c->stage = NETIB_ST_RECV_READY;
    }
    if (c->stage == NETIB_ST_RECV_READY) {
        uint8_t ready;
        if ((r = sock_io(c, 0, &ready, 1, "receive")) != 1) {
            return r;
        }
        c->stage = NETIB_ST_DONE;
    }
    return 1;
}

ncclResult_t netib_conn_accept(void *listen_comm, void **recv_comm)
{
    netib_listen_t *l = listen_comm;
    int r;

    *recv_comm = NULL;
    for (;;) {
        if (l->pending == NULL) {
            struct sockaddr_storage ss;
            socklen_t len = sizeof(ss);
            int one = 1;
            int fd = accept4(l->fd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ||
                    errno == ECONNABORTED) {
                    return ncclSuccess;
                }
                BR_WARN(NCCL_NET, "NET/IB : %s:%d: accept on %s failed: %s", l->dev->name,
                        l->dev->port, l->addr, strerror(errno));
                return ncclSystemError;
            }
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            BR_CHECK(comm_create(l->dev, 0, l->tc, fd, &l->pending));
            netib_addr_str((struct sockaddr *)&ss, l->pending->peer, sizeof(l->pending->peer));
            l->pending->stage = NETIB_ST_RECV_INFO;
        }
        r = accept_step(l, l->pending);
        if (r == 0) {
            return ncclSuccess;
        }
        if (r < 0) { /* that peer failed; keep listening for the others */
            comm_free(l->pending);
            l->pending = NULL;
            continue;
        }
        break;
    }
    BR_INFO(NCCL_NET, "NET/IB : %s:%d: receive comm from %s (%.32s:%u), %d QP%s from %#x",
            l->dev->name, l->dev->port, l->pending->peer, l->pending->info_in.dev,
            l->pending->info_in.port, l->pending->nqps, l->pending->nqps > 1 ? "s" : "",
            l->pending->qps[0]->qp_num);
    *recv_comm = l->pending;
    l->pending = NULL;
    return ncclSuccess;
}

/* close ---------------------------------------------------------------------------- */

ncclResult_t netib_conn_close_send(void *send_comm)
{
    comm_free(send_comm);
    return ncclSuccess;
}

ncclResult_t netib_conn_close_recv(void *recv_comm)
{
    comm_free(recv_comm);
    return ncclSuccess;
}

ncclResult_t netib_conn_close_listen(void *listen_comm)
{
    netib_listen_t *l = listen_comm;

    if (l == NULL) {
        return ncclSuccess;
    }
    comm_free(l->pending);
    close(l->fd);
    free(l);
    return ncclSuccess;
}

void netib_comm_check_peer(netib_comm_t *c)
{
    char b;
    ssize_t n = recv(c->fd, &b, 1, MSG_DONTWAIT | MSG_PEEK);

    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        BR_WARN(NCCL_NET,
                "NET/IB : %s:%d: peer %s closed the connection with %d request%s "
                "in flight (%s comm, QP %#x)",
                c->dev->name, c->dev->port, c->peer, c->outstanding, c->outstanding == 1 ? "" : "s",
                c->is_send ? "send" : "receive", c->qps[0]->qp_num);
        netib_comm_fail(c, ncclRemoteError);
    }
}
