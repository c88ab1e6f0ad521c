/* SPDX-License-Identifier: Apache-2.0 */
/*
 * net-ib internals: the RDMA verbs net plugin (libnccl-net-ib.so, named "IB").
 *
 * - netib_dev.c   devices: every ACTIVE port of every verbs device passing NCCL_IB_HCA, its
 *                 GID, protection domain, registration cache and asynchronous events.
 * - netib_conn.c  listen / connect / accept: a TCP handshake (addressed by the 128-byte
 *                 handle) that swaps queue pair numbers, GIDs, LIDs, MTUs and the
 *                 addresses and keys of the FIFO; queue pair state changes; close.
 * - netib_data.c  the data path: regMr, isend / irecv / iflush / test.
 * - netib_util.c  pure decisions (NCCL_IB_HCA, GID choice, speed), unit-tested on hosts.
 * - netib_plugin.c the per-communicator contexts and the exported v12/v11/v10 tables.
 *
 * Data path (as NCCL's IB transport): reliable-connected queue pairs. The receiver
 * describes each posted receive (address, rkey, capacity, tag; up to NETIB_MAX_RECVS
 * buffers for a grouped receive) in one slot of a FIFO that lives in the sender's memory
 * and writes it there with an RDMA WRITE. The sender matches its isends to the slot's
 * buffers by tag, RDMA WRITEs the data straight into them and ends with an RDMA WRITE
 * WITH IMMEDIATE on each queue pair the slot uses: the immediate carries the size (or,
 * for a grouped receive, the sizes go by RDMA WRITE into the receiver's sizes array
 * first) and the receiver's pre-posted receive work request completes with it.
 *
 * Threading: a communicator is driven by one thread at a time (NCCL's proxy thread); a
 * device's registration cache and async event queue are guarded by the device's mutex.
 */
#ifndef NETIB_H_
#define NETIB_H_

#include <netinet/in.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <infiniband/verbs.h>

#include "plugin_log.h"

#include "plugin_api/net/net.h"

#define NETIB_MAX_DEVS 32
#define NETIB_MAX_QPS 16                 /* NCCL_IB_QPS_PER_CONNECTION upper bound */
#define NETIB_MAX_RECVS 8                /* buffers of one grouped receive (maxRecvs) */
#define NETIB_NREQ NCCL_NET_MAX_REQUESTS /* receives outstanding = FIFO slots */
#define NETIB_MAX_SENDS (NETIB_NREQ * NETIB_MAX_RECVS) /* sends outstanding per comm */
#define NETIB_MAX_MSG ((size_t)1 << 30) /* largest message: fits the 31-bit immediate */
#define NETIB_IMM_ERROR 0x80000000u     /* immediate flag: the sender refused the slot */
#define NETIB_INLINE_WANT 256           /* inline bytes asked of each queue pair */
#define NETIB_SPLIT_ALIGN 128           /* split chunks start on 128-byte boundaries */
#define NETIB_MAGIC 0x42524942u         /* "BRIB" */
#define NETIB_NAME_LEN 64
#define NETIB_ADDR_STRLEN 64
#define NETIB_CHECK_NS 1000000L /* idle progress looks at the socket and events every 1 ms */

/* One port of a verbs device, usable by the plugin. Set up once by netib_dev_init. */
typedef struct {
    char name[NETIB_NAME_LEN]; /* verbs device name, e.g. mlx5_0, rxe0 */
    int port;
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    int link_layer; /* IBV_LINK_LAYER_INFINIBAND or _ETHERNET */
    uint16_t lid;
    enum ibv_mtu mtu; /* active MTU */
    int gid_index;    /* -1 for InfiniBand without a GRH */
    union ibv_gid gid;
    uint64_t guid;  /* node GUID, host order */
    char *pci_path; /* realpath of /sys/class/infiniband/<name>/device, or NULL */
    int speed_mbps;
    int max_qp;
    int ptr_support;             /* NCCL_PTR_* offered */
    int dmabuf;                  /* regMrDmaBuf is implemented for this device */
    int mr_access;               /* access flags of every registration */
    struct sockaddr_storage oob; /* address the handshake socket listens on (port 0) */
    pthread_mutex_t lock;        /* guards the fields below */
    int port_down;               /* IBV_EVENT_PORT_ERR seen and no PORT_ACTIVE since */
    int fatal;                   /* IBV_EVENT_DEVICE_FATAL seen */
    struct netib_mr *mrs;        /* registration cache */
} netib_dev_t;

/* A registration: a cache entry of page-aligned host memory (refs counts its users) or a
 * dma-buf registration (never cached). The mhandle of regMr. */
typedef struct netib_mr {
    struct netib_mr *next;
    netib_dev_t *dev;
    struct ibv_mr *mr;
    uintptr_t base; /* page-aligned range covered */
    size_t len;
    int refs;
    int cuda; /* registered as NCCL_PTR_CUDA (iflush reads it back) */
    int cached;
} netib_mr_t;

/* What each side sends the other during the handshake (fixed layout, host order: both
 * ends run this plugin on the same architecture). */
typedef struct {
    uint32_t magic;
    uint32_t nqps;
    uint64_t secret;
    uint32_t qpn[NETIB_MAX_QPS];
    uint8_t gid[16];
    uint16_t lid;
    uint8_t link_layer;
    uint8_t mtu;
    uint8_t split;
    uint8_t pad[3];
    uint64_t addr; /* connector: its FIFO; acceptor: its sizes array */
    uint32_t rkey;
    uint32_t port;
    char dev[32]; /* device name, for the peer's logs */
} netib_info_t;

/* One buffer of a FIFO slot, written by the receiver into the sender's memory. */
typedef struct {
    uint64_t addr;
    uint64_t size; /* capacity */
    uint32_t rkey;
    int32_t tag;
    uint32_t nreqs; /* buffers in the slot (same in each entry) */
    uint32_t pad;
    uint64_t seq; /* the slot's sequence number + 1; written last, checked first */
} netib_fifo_elem_t;

typedef netib_fifo_elem_t netib_fifo_slot_t[NETIB_MAX_RECVS];

typedef enum { NETIB_SEND = 1, NETIB_RECV, NETIB_FLUSH } netib_req_type_t;
typedef enum {
    NETIB_REQ_FREE = 0,
    NETIB_REQ_QUEUED, /* send waiting for its FIFO slot */
    NETIB_REQ_POSTED,
    NETIB_REQ_DONE,
    NETIB_REQ_ERROR
} netib_req_state_t;

typedef struct netib_comm netib_comm_t;

typedef struct netib_req {
    netib_comm_t *comm;
    uint8_t type;  /* netib_req_type_t */
    uint8_t state; /* netib_req_state_t */
    int n;         /* buffers (receive) */
    int slot;
    int events; /* receive: immediates still expected */
    int tag;
    char *data;
    size_t size;                         /* send: length */
    int sizes[NETIB_MAX_RECVS];          /* receive: bytes received per buffer */
    netib_mr_t *tmp_mr[NETIB_MAX_RECVS]; /* registrations made for a NULL mhandle */
    uint32_t lkey;                       /* send */
} netib_req_t;

typedef enum {
    NETIB_ST_CONNECTING = 0, /* TCP connect in progress (connector) */
    NETIB_ST_SEND_INFO,
    NETIB_ST_RECV_INFO,
    NETIB_ST_SEND_READY, /* connector: queue pairs are ready for the peer's writes */
    NETIB_ST_RECV_READY, /* acceptor: waits for that */
    NETIB_ST_DONE
} netib_stage_t;

/* A send or receive communicator (one direction of one connection). */
struct netib_comm {
    netib_dev_t *dev;
    int is_send;
    int fd; /* the handshake socket, kept open: its EOF tells of a peer gone */
    char peer[NETIB_ADDR_STRLEN];
    int tc; /* traffic class */
    struct ibv_cq *cq;
    int nqps;
    int split;
    struct ibv_qp *qps[NETIB_MAX_QPS];
    uint32_t max_inline;
    /* FIFO: sender: written by the peer; receiver: the source of its writes. */
    netib_fifo_slot_t *fifo;
    struct ibv_mr *fifo_mr;
    /* Grouped receive sizes: receiver: written by the peer; sender: source. */
    int32_t (*gsizes)[NETIB_MAX_RECVS];
    struct ibv_mr *gsizes_mr;
    uint64_t remote_addr; /* sender: peer's sizes array; receiver: peer's FIFO */
    uint32_t remote_rkey;
    uint64_t seq;      /* FIFO slots used so far */
    uint64_t done_seq; /* receiver: slots completed, in order (flow control) */
    /* Requests: sends (sender) or receives + flushes (receiver). */
    netib_req_t *reqs;
    int nreqs;
    netib_req_t **free_reqs;
    int nfree;
    /* Sender: isends waiting for their slot, in posting order; per-slot posted sends. */
    netib_req_t *queue[NETIB_MAX_SENDS];
    int nqueue;
    struct {
        netib_req_t *reqs[NETIB_MAX_RECVS];
        int n;
        int events; /* signalled work requests not yet completed */
    } slots[NETIB_NREQ];
    netib_req_t *recv_slot[NETIB_NREQ]; /* receiver: the request of each slot */
    /* Receiver: the loopback queue pair iflush reads through, and its target. */
    struct ibv_qp *flush_qp;
    struct ibv_mr *flush_mr;
    uint32_t flush_buf;
    int outstanding;  /* requests posted and not yet done */
    ncclResult_t err; /* sticky: every call fails once set */
    long next_check_ns;
    /* Handshake. */
    netib_stage_t stage;
    netib_info_t info_out, info_in;
    size_t off;
    uint64_t secret;
};

/* Parameter getters (netib_params.def), defined in netib_dev.c. */
#define NETIB_STR_PARAM(getter, key, doc)                                                          \
    const char *getter(void) __attribute__((visibility("hidden")));
#define BR_LITE_PARAM(getter, key, def, doc)                                                       \
    int64_t getter(void) __attribute__((visibility("hidden")));
#include "netib_params.def"
#undef BR_LITE_PARAM
#undef NETIB_STR_PARAM

/* netib_dev.c ---------------------------------------------------------------------- */
/* Find the devices once per process (NCCL_IB_*); later calls return the first result. */
ncclResult_t netib_dev_init(void);
int netib_dev_count(void);
netib_dev_t *netib_dev_get(int dev);
/* Properties of device dev in the newest layout. */
ncclResult_t netib_dev_properties(int dev, ncclNetProperties_v12_t *props);
/* Read and act on the device's pending asynchronous events (non-blocking). */
void netib_dev_poll_events(netib_dev_t *d);
/* ncclSuccess when the port can carry traffic, else a logged error naming it. */
ncclResult_t netib_dev_check(netib_dev_t *d, const char *what);
/* Registration cache: a registration covering [data, data+size) (refs + 1) or a new one. */
ncclResult_t netib_mr_get(netib_dev_t *d, void *data, size_t size, int cuda, netib_mr_t **mr_p);
void netib_mr_put(netib_mr_t *mr);
ncclResult_t netib_mr_dmabuf(netib_dev_t *d, void *data, size_t size, uint64_t offset, int fd,
                             netib_mr_t **mr_p);
/* "rxe0:1" style label. */
const char *netib_dev_label(const netib_dev_t *d, char *buf, size_t len);
void netib_addr_str(const struct sockaddr *sa, char *buf, size_t len);
long netib_now_ns(void);

/* netib_conn.c --------------------------------------------------------------------- */
ncclResult_t netib_conn_listen(int dev, int tc, void *handle, void **listen_comm);
ncclResult_t netib_conn_connect(int dev, int tc, void *handle, void **send_comm);
ncclResult_t netib_conn_accept(void *listen_comm, void **recv_comm);
ncclResult_t netib_conn_close_send(void *send_comm);
ncclResult_t netib_conn_close_recv(void *recv_comm);
ncclResult_t netib_conn_close_listen(void *listen_comm);
/* Mark comm failed with res (first error wins) after the caller logged why. */
void netib_comm_fail(netib_comm_t *comm, ncclResult_t res);
/* Has the peer closed the handshake socket? Logs and fails comm if so. */
void netib_comm_check_peer(netib_comm_t *comm);

/* netib_data.c --------------------------------------------------------------------- */
ncclResult_t netib_data_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle);
ncclResult_t netib_data_reg_mr_dmabuf(void *comm, void *data, size_t size, int type,
                                      uint64_t offset, int fd, void **mhandle);
ncclResult_t netib_data_dereg_mr(void *comm, void *mhandle);
ncclResult_t netib_data_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                              void **request);
ncclResult_t netib_data_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                              void **mhandles, void **request);
ncclResult_t netib_data_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                               void **request);
ncclResult_t netib_data_test(void *request, int *done, int *sizes);
/* Release what requests still hold (temporary registrations); for close. */
void netib_data_release_all(netib_comm_t *comm);

#endif /* NETIB_H_ */
