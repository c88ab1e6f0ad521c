/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Connection setup and teardown for the three transports. The receiver of a connection
 * prepares its end (p2p: memory in this process; shm: a POSIX shared-memory segment;
 * net: a listening comm) and sends a blob describing it through the bootstrap; the
 * sender attaches to it. Net connections are then completed with the plugin's
 * non-blocking connect/accept, registered, and handed to the proxy.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "transport.h"
#include "util.h"

/* What the receiver sends the sender. */
typedef struct {
    int32_t kind;
    uint64_t step_size;
    uint64_t ptr;                             /* p2p */
    char shm_name[64];                        /* shm */
    char net_handle[NCCL_NET_HANDLE_MAXSIZE]; /* net */
} conn_blob_t;

static _Atomic unsigned shm_counter;

const char *br_transport_name(br_transport_t kind)
{
    switch (kind) {
    case BR_TRANSPORT_P2P: return "P2P/direct pointer";
    case BR_TRANSPORT_SHM: return "SHM/direct";
    default: return "NET";
    }
}

br_transport_t br_transport_select(const br_transport_comm_t *tc, int peer)
{
    return br_transport_select_pair(&tc->peers[tc->rank], &tc->peers[peer]);
}

br_transport_t br_transport_select_pair(const br_peer_info_t *me, const br_peer_info_t *p)
{
    if (me->pid_hash == p->pid_hash && me->host_hash == p->host_hash && !me->p2p_disable &&
        !p->p2p_disable) {
        return BR_TRANSPORT_P2P;
    }
    if (me->host_hash == p->host_hash && !me->shm_disable && !p->shm_disable) {
        return BR_TRANSPORT_SHM;
    }
    return BR_TRANSPORT_NET;
}

static size_t ctrl_bytes(void)
{
    return (sizeof(br_fifo_ctrl_t) + 4095) & ~(size_t)4095;
}

static ncclResult_t conn_track(br_transport_comm_t *tc, br_conn_t *conn)
{
    if (tc->nconns == tc->conns_cap) {
        int cap = tc->conns_cap ? tc->conns_cap * 2 : 16;
        br_conn_t **c = realloc(tc->conns, (size_t)cap * sizeof(*c));
        if (c == NULL) {
            BR_WARN(NCCL_ALLOC, "out of memory tracking connections");
            return ncclSystemError;
        }
        tc->conns = c;
        tc->conns_cap = cap;
    }
    tc->conns[tc->nconns++] = conn;
    return ncclSuccess;
}

/* Every FIFO mapping is populated (MAP_POPULATE) when it is made: a page's first touch
 * costs microseconds (far more under a hypervisor), and touching a 512 KiB slot for the
 * first time inside a collective made the first calls of each size several times slower. */

/* Lay the control block and the slots out in one mapping. */
static size_t conn_stride(const br_conn_t *conn)
{
    return conn->kind == BR_TRANSPORT_NET ? conn->step_size + BR_NET_DESC_ROOM : conn->step_size;
}

static void conn_layout(br_conn_t *conn, void *base, size_t step_size)
{
    conn->ctrl = base;
    conn->buf = (char *)base + ctrl_bytes();
    conn->step_size = step_size;
    conn->stride = conn_stride(conn);
}

static ncclResult_t recv_prepare_mem(br_transport_comm_t *tc, br_conn_t *conn, conn_blob_t *blob)
{
    size_t size = ctrl_bytes() + BR_STEPS * conn->step_size;
    void *base = NULL;

    if (conn->kind == BR_TRANSPORT_P2P) {
        base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                    -1, 0);
        if (base == MAP_FAILED) {
            BR_WARN(NCCL_ALLOC, "rank %d: cannot allocate a %zu-byte FIFO from rank %d: %s",
                    tc->rank, size, conn->peer, strerror(errno));
            return ncclSystemError;
        }
        blob->ptr = (uint64_t)(uintptr_t)base;
    } else {
        int fd;
        snprintf(conn->shm_name, sizeof(conn->shm_name), "/braid-%d-%u", (int)getpid(),
                 atomic_fetch_add(&shm_counter, 1));
        fd = shm_open(conn->shm_name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd < 0) {
            BR_WARN(NCCL_SHM, "rank %d: shm_open(%s) failed: %s", tc->rank, conn->shm_name,
                    strerror(errno));
            return ncclSystemError;
        }
        if (ftruncate(fd, (off_t)size) != 0) {
            BR_WARN(NCCL_SHM,
                    "rank %d: cannot size shared memory %s to %zu bytes: %s "
                    "(is /dev/shm large enough?)",
                    tc->rank, conn->shm_name, size, strerror(errno));
            close(fd);
            shm_unlink(conn->shm_name);
            return ncclSystemError;
        }
        base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
        close(fd);
        if (base == MAP_FAILED) {
            BR_WARN(NCCL_SHM, "rank %d: mmap of %s failed: %s", tc->rank, conn->shm_name,
                    strerror(errno));
            shm_unlink(conn->shm_name);
            return ncclSystemError;
        }
        snprintf(blob->shm_name, sizeof(blob->shm_name), "%s", conn->shm_name);
    }
    memset(base, 0, ctrl_bytes());
    /* Slots are written, not just mapped (see the note on MAP_POPULATE), and not with
     * zeros, which a hypervisor may keep backed by one shared zero page. */
    memset((char *)base + ctrl_bytes(), 0x5a, size - ctrl_bytes());
    conn->mapping = base;
    conn->mapping_size = size;
    conn_layout(conn, base, conn->step_size);
    return ncclSuccess;
}

static ncclResult_t send_attach_shm(br_transport_comm_t *tc, br_conn_t *conn,
                                    const conn_blob_t *blob)
{
    size_t size = ctrl_bytes() + BR_STEPS * conn->step_size;
    int fd = shm_open(blob->shm_name, O_RDWR, 0600);
    void *base;

    if (fd < 0) {
        BR_WARN(NCCL_SHM, "rank %d: cannot open rank %d's shared memory %s: %s", tc->rank,
                conn->peer, blob->shm_name, strerror(errno));
        return ncclSystemError;
    }
    base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    close(fd);
    /* Both ends have it mapped (or we failed): the name is no longer needed. */
    shm_unlink(blob->shm_name);
    if (base == MAP_FAILED) {
        BR_WARN(NCCL_SHM, "rank %d: mmap of rank %d's %s failed: %s", tc->rank, conn->peer,
                blob->shm_name, strerror(errno));
        return ncclSystemError;
    }
    /* Write-touch every slot page (rewriting the byte it holds: nothing is in flight
     * yet), so the first real sends do not take write faults. */
    for (size_t off = ctrl_bytes(); off < size; off += 4096) {
        ((volatile char *)base)[off] = ((volatile char *)base)[off];
    }
    conn->mapping = base;
    conn->mapping_size = size;
    conn_layout(conn, base, conn->step_size);
    return ncclSuccess;
}

/* Net: a local FIFO on each side, registered with the plugin. */
static ncclResult_t net_local_fifo(br_transport_comm_t *tc, br_conn_t *conn)
{
    size_t size = ctrl_bytes() + BR_STEPS * conn_stride(conn);
    void *base =
        mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (base == MAP_FAILED) {
        BR_WARN(NCCL_ALLOC, "rank %d: cannot allocate a %zu-byte net FIFO: %s", tc->rank, size,
                strerror(errno));
        return ncclSystemError;
    }
    memset((char *)base + ctrl_bytes(), 0x5a, size - ctrl_bytes()); /* as for shm slots */
    conn->mapping = base;
    conn->mapping_size = size;
    conn_layout(conn, base, conn->step_size);
    return ncclSuccess;
}

static ncclResult_t net_require(br_transport_comm_t *tc, int peer)
{
    if (tc->net == NULL) {
        BR_WARN(NCCL_NET,
                "rank %d needs the network to reach rank %d (host %s) but no net "
                "plugin could be loaded (see the earlier warning)",
                tc->rank, peer, tc->peers[peer].host);
        return ncclSystemError;
    }
    return ncclSuccess;
}

/* State of a net connection still being completed. */
typedef struct {
    br_conn_t *conn;
    void *listen_comm; /* recv side */
    void *comm;
    char handle[NCCL_NET_HANDLE_MAXSIZE]; /* send side */
} net_pending_t;

static ncclResult_t net_finish(br_transport_comm_t *tc, net_pending_t *np)
{
    br_net_t *net = tc->net;
    br_net_conn_t *nc = NULL;
    ncclResult_t res;

    BR_CHECK(br_calloc(&nc, 1, "net connection"));
    nc->ctrl = np->conn->ctrl;
    nc->buf = np->conn->buf;
    nc->step_size = np->conn->step_size;
    nc->stride = np->conn->stride;
    nc->is_send = np->conn->is_send;
    nc->peer = np->conn->peer;
    nc->comm = np->comm;
    res = net->ops->reg_mr(net, np->comm, nc->buf, BR_STEPS * nc->stride, NCCL_PTR_HOST,
                           &nc->mhandle);
    if (res != ncclSuccess) {
        BR_WARN(NCCL_NET, "rank %d: net plugin %s failed to register a FIFO for rank %d", tc->rank,
                net->name, nc->peer);
        free(nc);
        return res;
    }
    if (tc->proxy == NULL) {
        res = br_proxy_create(net, tc->rank, &tc->proxy);
        if (res != ncclSuccess) {
            (void)net->ops->dereg_mr(net, np->comm, nc->mhandle);
            free(nc);
            return res;
        }
    }
    np->conn->net = nc;
    np->comm = NULL; /* owned by the proxy now */
    return br_proxy_add(tc->proxy, nc);
}

/* Poll the plugin's non-blocking connect/accept until every pending one is done. */
static ncclResult_t net_complete(br_transport_comm_t *tc, net_pending_t *pend, int npend)
{
    br_net_t *net = tc->net;
    uint64_t deadline = br_time_ns() + (uint64_t)BR_PARAM_INT(BOOTSTRAP_TIMEOUT) * 1000000000ull;
    int left = npend;

    while (left > 0) {
        for (int i = 0; i < npend; i++) {
            net_pending_t *np = &pend[i];
            if (np->conn == NULL || np->conn->net != NULL) {
                continue;
            }
            if (np->conn->is_send) {
                BR_CHECK(net->ops->connect(net, net->dev, np->handle, &np->comm));
            } else {
                BR_CHECK(net->ops->accept(net, np->listen_comm, &np->comm));
            }
            if (np->comm != NULL) {
                if (np->listen_comm != NULL) {
                    (void)net->ops->close_listen(net, np->listen_comm);
                    np->listen_comm = NULL;
                }
                BR_CHECK(net_finish(tc, np));
                left--;
            }
        }
        if (left > 0) {
            if (br_time_ns() > deadline) {
                for (int i = 0; i < npend; i++) {
                    if (pend[i].conn != NULL && pend[i].conn->net == NULL) {
                        BR_WARN(NCCL_NET,
                                "rank %d: net %s with rank %d (host %s) did not "
                                "complete within %lld s",
                                tc->rank, pend[i].conn->is_send ? "connect" : "accept",
                                pend[i].conn->peer, tc->peers[pend[i].conn->peer].host,
                                (long long)BR_PARAM_INT(BOOTSTRAP_TIMEOUT));
                        break;
                    }
                }
                return ncclRemoteError;
            }
            usleep(100);
        }
    }
    return ncclSuccess;
}

static ncclResult_t conn_new(br_transport_comm_t *tc, int peer, int is_send, size_t step_size,
                             br_conn_t **conn_p)
{
    br_conn_t *conn = NULL;
    BR_CHECK(br_calloc(&conn, 1, "connection"));
    conn->peer = peer;
    conn->is_send = is_send;
    conn->step_size = step_size;
    conn->kind = br_transport_select(tc, peer);
    BR_CHECK(conn_track(tc, conn));
    *conn_p = conn;
    return ncclSuccess;
}

ncclResult_t br_transport_connect(br_transport_comm_t *tc, int n, const int *recv_peers,
                                  const int *send_peers, size_t step_size, int tag,
                                  br_conn_t **recv_p, br_conn_t **send_p)
{
    ncclResult_t res = ncclSuccess;
    net_pending_t *pend = NULL;
    int npend = 0;

    BR_CHECK(br_calloc(&pend, (size_t)(2 * n), "pending connections"));
    /* Receivers first: prepare and publish every receive end. */
    for (int i = 0; i < n; i++) {
        conn_blob_t blob;
        br_conn_t *conn;
        if (recv_peers[i] < 0) {
            continue;
        }
        memset(&blob, 0, sizeof(blob));
        BR_CHECK_GOTO(conn_new(tc, recv_peers[i], 0, step_size, &conn), res, out);
        recv_p[i] = conn;
        blob.kind = conn->kind;
        blob.step_size = step_size;
        if (conn->kind == BR_TRANSPORT_NET) {
            net_pending_t *np = &pend[npend++];
            BR_CHECK_GOTO(net_require(tc, conn->peer), res, out);
            BR_CHECK_GOTO(net_local_fifo(tc, conn), res, out);
            BR_CHECK_GOTO(
                tc->net->ops->listen(tc->net, tc->net->dev, blob.net_handle, &np->listen_comm), res,
                out);
            np->conn = conn;
        } else {
            BR_CHECK_GOTO(recv_prepare_mem(tc, conn, &blob), res, out);
        }
        BR_CHECK_GOTO(br_bootstrap_send(tc->boot, conn->peer, tag, &blob, sizeof(blob)), res, out);
    }
    /* Then senders attach to what their receivers published. */
    for (int i = 0; i < n; i++) {
        conn_blob_t blob;
        br_conn_t *conn;
        if (send_peers[i] < 0) {
            continue;
        }
        BR_CHECK_GOTO(conn_new(tc, send_peers[i], 1, step_size, &conn), res, out);
        send_p[i] = conn;
        BR_CHECK_GOTO(br_bootstrap_recv(tc->boot, conn->peer, tag, &blob, sizeof(blob)), res, out);
        if (blob.kind != (int)conn->kind || blob.step_size != step_size) {
            BR_WARN(NCCL_INIT,
                    "rank %d and rank %d disagree on their connection (transport %d "
                    "vs %d, step %llu vs %zu): are they running the same Braid with the same "
                    "settings?",
                    tc->rank, conn->peer, (int)conn->kind, blob.kind,
                    (unsigned long long)blob.step_size, step_size);
            res = ncclInvalidUsage;
            goto out;
        }
        if (conn->kind == BR_TRANSPORT_P2P) {
            conn_layout(conn, (void *)(uintptr_t)blob.ptr, step_size);
        } else if (conn->kind == BR_TRANSPORT_SHM) {
            BR_CHECK_GOTO(send_attach_shm(tc, conn, &blob), res, out);
        } else {
            net_pending_t *np = &pend[npend++];
            BR_CHECK_GOTO(net_require(tc, conn->peer), res, out);
            BR_CHECK_GOTO(net_local_fifo(tc, conn), res, out);
            memcpy(np->handle, blob.net_handle, sizeof(np->handle));
            np->conn = conn;
        }
    }
    BR_CHECK_GOTO(net_complete(tc, pend, npend), res, out);
out:
    for (int i = 0; i < npend; i++) {
        if (pend[i].listen_comm != NULL) {
            (void)tc->net->ops->close_listen(tc->net, pend[i].listen_comm);
        }
        if (pend[i].comm != NULL) {
            if (pend[i].conn->is_send) {
                (void)tc->net->ops->close_send(tc->net, pend[i].comm);
            } else {
                (void)tc->net->ops->close_recv(tc->net, pend[i].comm);
            }
        }
    }
    free(pend);
    return res;
}

void br_transport_close_all(br_transport_comm_t *tc, int flush)
{
    /* The proxy goes first: it closes the plugin comms that use the FIFOs. */
    br_proxy_destroy(tc->proxy, flush);
    tc->proxy = NULL;
    for (int i = 0; i < tc->nconns; i++) {
        br_conn_t *conn = tc->conns[i];
        /* p2p send ends point into the receiver's memory: only owners unmap. */
        if (conn->mapping != NULL) {
            munmap(conn->mapping, conn->mapping_size);
        }
        if (!conn->is_send && conn->kind == BR_TRANSPORT_SHM && conn->shm_name[0] != '\0') {
            shm_unlink(conn->shm_name); /* ENOENT once the sender attached: fine */
        }
        free(conn);
    }
    free(tc->conns);
    tc->conns = NULL;
    if (tc->flat != NULL) {
        munmap(tc->flat->base, tc->flat->size);
        free(tc->flat);
        tc->flat = NULL;
    }
    tc->nconns = tc->conns_cap = 0;
}
