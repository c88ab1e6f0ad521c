/* SPDX-License-Identifier: Apache-2.0 */
/*
 * net-ofi internals: the libfabric net plugin's devices, endpoints, connections and requests.
 *
 * - netofi_fabric.c loads libfabric (dlopen, so a missing library is an init error, not a
 *   load error), picks one provider and lists its domains as devices.
 * - netofi_ep.c owns the endpoints: per device, one fabric, domain, address vector,
 *   completion queue and FI_EP_RDM endpoint, shared by every connection of the process
 *   on that device (so any call's progress moves every connection, whoever polls).
 * - netofi_conn.c makes and closes connections (the handshake, control messages).
 * - netofi_data.c is the data path: registration, isend/irecv/test, completions.
 * - netofi_plugin.c holds the per-communicator contexts and the exported ABI tables.
 *
 * Tags. Every connection owns an id on the receiving endpoint; a message is matched by the
 * tag (id, sequence number, chunk index), so sends and receives of one connection match in
 * posting order whatever order the provider delivers or completes them in. The top usable
 * tag bit marks control messages (connection request, acknowledgement, close notice).
 *
 * Threading: everything reachable from an endpoint (its connections, requests, address
 * cache, libfabric objects) is guarded by that endpoint's mutex, and no libfabric object
 * is shared between endpoints, so FI_THREAD_DOMAIN is all the plugin asks of a provider.
 */
#ifndef NETOFI_H_
#define NETOFI_H_

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "plugin_log.h"

#include "plugin_api/net/net.h"

#define NETOFI_MAX_DEVS 32
#define NETOFI_MAX_REQUESTS NCCL_NET_MAX_REQUESTS /* data requests per connection */
#define NETOFI_ID_BITS 20                         /* connection ids per endpoint: 2^20 */
#define NETOFI_SEQ_BITS 16                        /* sequence numbers wrap at 2^16 */
#define NETOFI_MIN_TAG_BITS 40                    /* 1 control + id + seq + >= 3 chunk bits */
#define NETOFI_NAME_MAX 100                       /* endpoint name bytes a handle carries */
#define NETOFI_MAGIC 0x4f464931u                  /* "OFI1" */
#define NETOFI_CLOSE_WAIT_SECONDS 5.0 /* close waits this long for transfers in flight */

/* Control message types, carried in the chunk field of a control tag. */
#define NETOFI_CTRL_CONN 1u  /* connector -> listener: "here is my address and id" */
#define NETOFI_CTRL_ACK 2u   /* acceptor -> connector: "send to this id" */
#define NETOFI_CTRL_CLOSE 3u /* either side: "closed; messages from seq on never match" */

/* One libfabric domain of the chosen provider. Immutable after netofi_fabric_init. */
typedef struct {
    struct fi_info *info; /* fi_getinfo's entry for this domain (owned) */
    const char *name;     /* info->domain_attr->name */
    char *pci_path;       /* resolved sysfs path of the NIC's PCI function, or NULL */
    size_t max_msg;       /* largest payload of one provider operation */
    size_t max_bytes;     /* largest message a request may carry once split in chunks */
    uint64_t ctrl_bit;    /* the top usable tag bit */
    int chunk_bits;       /* low tag bits holding the chunk index (or control type) */
    int tag_bits;         /* usable tag bits (from mem_tag_format) */
    int speed_mbps;
    int mr_local;    /* register buffers and pass descriptors (FI_MR_LOCAL or forced) */
    int mr_endpoint; /* registrations must be bound to the endpoint (FI_MR_ENDPOINT) */
    int mr_prov_key; /* the provider picks MR keys (FI_MR_PROV_KEY) */
} netofi_dev_t;

/* The libfabric entry points that are real symbols (everything else is inline). */
typedef struct {
    uint32_t runtime_version; /* fi_version() of the loaded library */
    uint32_t api_version;     /* version passed to fi_getinfo */
    int (*getinfo)(uint32_t version, const char *node, const char *service, uint64_t flags,
                   const struct fi_info *hints, struct fi_info **info);
    void (*freeinfo)(struct fi_info *info);
    struct fi_info *(*dupinfo)(const struct fi_info *info);
    int (*fabric)(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context);
    const char *(*strerror)(int errnum);
    char *(*tostr)(const void *data, enum fi_type datatype);
} netofi_fi_t;

extern netofi_fi_t netofi_fi;

typedef struct netofi_ep netofi_ep_t;
typedef struct netofi_comm netofi_comm_t;
typedef struct netofi_req netofi_req_t;

typedef enum {
    NETOFI_REQ_FREE = 0, /* in its connection's pool */
    NETOFI_REQ_PENDING,  /* the provider said EAGAIN; queued on the endpoint for a retry */
    NETOFI_REQ_POSTED,   /* one provider operation in flight */
    NETOFI_REQ_DONE,
    NETOFI_REQ_ERROR
} netofi_req_state_t;

typedef enum {
    NETOFI_OP_SEND = 0,
    NETOFI_OP_RECV,
    NETOFI_OP_CTRL_SEND,
    NETOFI_OP_CTRL_RECV
} netofi_op_t;

/*
 * One message, sent or received in chunks of at most dev->max_msg bytes, one chunk in
 * flight at a time. A chunk shorter than max_msg ends the message, so a message of an
 * exact multiple of max_msg bytes ends with an empty chunk.
 */
struct netofi_req {
    struct fi_context2 fictx; /* first: the op_context; the provider may use it (FI_CONTEXT2) */
    netofi_comm_t *comm;
    netofi_req_t *next; /* pool or pending-list link */
    uint8_t op;         /* netofi_op_t */
    uint8_t state;      /* netofi_req_state_t */
    uint32_t chunk;     /* index of the chunk in flight (control: the message type) */
    uint32_t seq;       /* the message's sequence number on its connection */
    char *buf;
    size_t size;      /* send: message length; receive: buffer capacity */
    size_t done;      /* bytes of completed chunks */
    size_t chunk_len; /* length of the chunk in flight */
    void *desc;       /* memory descriptor, or NULL */
    uint64_t tag;     /* tag of the message without the chunk bits */
    fi_addr_t addr;   /* destination of sends */
    ncclResult_t err;
};

/* Control message. Same byte order on both ends (as NCCL's own plugins assume). */
typedef struct {
    uint32_t magic;
    uint32_t type; /* NETOFI_CTRL_* */
    uint32_t id;   /* CONN: the connector's id; ACK: the acceptor's id */
    uint32_t seq;  /* CLOSE: the first sequence number that will not complete */
    uint32_t addr_format;
    uint16_t name_len;
    uint16_t reserved;
    uint8_t name[NETOFI_NAME_MAX]; /* CONN: the connector's endpoint name */
} netofi_ctrl_msg_t;

typedef enum { NETOFI_COMM_LISTEN = 1, NETOFI_COMM_SEND, NETOFI_COMM_RECV } netofi_comm_type_t;

/* Control requests of a connection. */
enum { NETOFI_CTRL_RX = 0, NETOFI_CTRL_TX, NETOFI_CTRL_TX_CLOSE, NETOFI_CTRL_NREQ };

/* A listening, sending or receiving connection. Guarded by ep->lock. */
struct netofi_comm {
    netofi_ep_t *ep;
    int type;              /* netofi_comm_type_t */
    uint32_t id;           /* this connection's id on ep (tags it receives) */
    uint32_t peer_id;      /* the peer connection's id (send: known once acked) */
    fi_addr_t peer;        /* send: the receiver; recv: the sender */
    uint32_t seq;          /* sequence number of the next message */
    uint32_t peer_seq;     /* after the peer's CLOSE: messages from this seq on fail */
    int acked;             /* send: the ACK arrived, data may flow */
    int peer_closed;       /* the peer's CLOSE arrived */
    int peer_close_warned; /* a request failed by it was reported */
    int close_on_ack;      /* send: closed before the ACK; send CLOSE once it arrives */
    int closed;            /* closed by the user; freed when inflight drops to 0 */
    int closing;           /* close() still waits on it: not to be freed yet */
    int inflight;          /* provider operations posted and not yet completed */
    int queued;            /* requests on the endpoint's pending FIFO */
    ncclResult_t err;      /* sticky connection error */
    netofi_comm_t *zombie_next;
    struct fid_mr *ctrl_mr; /* registration of ctrl_msg (FI_MR_LOCAL only) */
    /* RX receives CONN (listen), ACK then CLOSE (send) or CLOSE (recv); TX sends CONN or
     * ACK; TX_CLOSE sends CLOSE. */
    netofi_req_t ctrl_req[NETOFI_CTRL_NREQ];
    netofi_ctrl_msg_t ctrl_msg[NETOFI_CTRL_NREQ];
    netofi_req_t *free_reqs;
    netofi_req_t reqs[NETOFI_MAX_REQUESTS];
};

/* Address vector cache entry: endpoint name -> fi_addr_t. */
typedef struct {
    uint32_t hash;
    uint16_t len; /* 0: empty slot */
    uint8_t name[NETOFI_NAME_MAX];
    fi_addr_t addr;
} netofi_av_entry_t;

struct netofi_ep {
    pthread_mutex_t lock; /* guards everything below and all comms and requests on it */
    int refs;             /* contexts, open connections and registrations using it */
    int index;            /* device index, its slot in the endpoint table */
    netofi_dev_t *dev;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    struct fi_info *shm_info;      /* shm: what ep was opened with, its own name (owned) */
    uint8_t name[NETOFI_NAME_MAX]; /* fi_getname of ep */
    size_t name_len;
    uint64_t next_mr_key; /* requested keys when the provider does not pick them */
    uint32_t *ids;        /* bitmap of connection ids in use */
    uint32_t next_id;     /* next-fit cursor, so ids are reused as late as possible */
    netofi_av_entry_t *av_cache;
    size_t av_cap, av_count;
    netofi_req_t *pending_head, *pending_tail; /* FIFO of requests to (re)post */
    netofi_comm_t *zombies; /* closed connections with operations still in flight */
    ncclResult_t err;       /* sticky completion-queue failure */
};

/* A registration handed out by regMr. mr is NULL when the provider needs none. */
typedef struct {
    struct fid_mr *mr;
    void *desc;
    netofi_ep_t *ep;
} netofi_mr_t;

/* netofi_fabric.c ------------------------------------------------------------------------ */

/* Load libfabric, choose a provider and find its devices; later calls return at once.
 * Thread-safe. Failures are logged with what was offered and why it was not used. */
ncclResult_t netofi_fabric_init(void);
/* Number of devices (0 before a successful netofi_fabric_init). */
int netofi_fabric_ndev(void);
/* Device dev, or NULL (logged) when out of range. */
netofi_dev_t *netofi_fabric_dev(int dev);
/* The chosen provider's name (e.g. "tcp;ofi_rxm") and a hash of it for handles. */
const char *netofi_fabric_prov(void);
uint32_t netofi_fabric_prov_hash(void);
/* Fill v12 properties of dev; the strings stay valid for the life of the process. */
ncclResult_t netofi_fabric_properties(int dev, ncclNetProperties_v12_t *props);
/* FNV-1a of bytes (handle checks, address cache). */
uint32_t netofi_hash(const void *data, size_t len);

/* netofi_ep.c ---------------------------------------------------------------------------- */

/* A reference to the process's endpoint on device dev, opened on first use (which may
 * take milliseconds: it opens a fabric and a domain). Thread-safe. */
ncclResult_t netofi_ep_get(int dev, netofi_ep_t **ep_p);
/* CLOCK_MONOTONIC in seconds. */
double netofi_now(void);
/* Drop a reference; the last one closes every libfabric object and frees. Thread-safe;
 * call without ep->lock. */
void netofi_ep_release(netofi_ep_t *ep);
/* Read the completion queue and dispatch completions; retry pending posts. Lock held.
 * Never blocks. Returns the endpoint's sticky error, if any. */
ncclResult_t netofi_ep_progress(netofi_ep_t *ep);
/* Post req's current chunk; on EAGAIN queue it for a retry by progress. Lock held. */
ncclResult_t netofi_ep_post_or_queue(netofi_ep_t *ep, netofi_req_t *req);
/* Post req's current chunk; *posted_p = 0 on EAGAIN (nothing queued). Lock held. */
ncclResult_t netofi_ep_post(netofi_ep_t *ep, netofi_req_t *req, int *posted_p);
/* Drop req from the pending FIFO if it is queued there. Lock held. */
void netofi_ep_unqueue(netofi_ep_t *ep, netofi_req_t *req);
/* Cancel a posted receive; its completion (cancelled or not) still arrives. Lock held. */
void netofi_ep_cancel(netofi_ep_t *ep, netofi_req_t *req);
/* fi_addr_t of a peer endpoint name, inserting it into the AV once. Lock held. */
ncclResult_t netofi_ep_addr(netofi_ep_t *ep, const uint8_t *name, size_t len, fi_addr_t *addr_p);
/* Allocate / free a connection id on ep. Lock held. */
ncclResult_t netofi_ep_id_alloc(netofi_ep_t *ep, uint32_t *id_p);
void netofi_ep_id_free(netofi_ep_t *ep, uint32_t id);
/* Register [buf, buf+len) for sends and receives, bound and enabled as the provider's MR
 * mode requires. Lock held. */
ncclResult_t netofi_ep_mr_reg(netofi_ep_t *ep, void *buf, size_t len, struct fid_mr **mr_p);

/* Tag of message seq of connection id (chunk bits zero). */
static inline uint64_t netofi_tag_data(const netofi_dev_t *dev, uint32_t id, uint32_t seq)
{
    uint64_t seq_field = (uint64_t)(seq & ((1u << NETOFI_SEQ_BITS) - 1));
    return ((uint64_t)id << (dev->chunk_bits + NETOFI_SEQ_BITS)) | (seq_field << dev->chunk_bits);
}

/* Tag of control messages addressed to connection id (the type goes in the chunk bits). */
static inline uint64_t netofi_tag_ctrl(const netofi_dev_t *dev, uint32_t id)
{
    return dev->ctrl_bit | ((uint64_t)id << (dev->chunk_bits + NETOFI_SEQ_BITS));
}

/* Take a request from c's pool (NULL when all are in use) / give one back. Lock held. */
static inline netofi_req_t *netofi_req_get(netofi_comm_t *c)
{
    netofi_req_t *req = c->free_reqs;

    if (req != NULL) {
        c->free_reqs = req->next;
        req->next = NULL;
    }
    return req;
}

static inline void netofi_req_put(netofi_comm_t *c, netofi_req_t *req)
{
    req->state = NETOFI_REQ_FREE;
    req->next = c->free_reqs;
    c->free_reqs = req;
}

/* netofi_conn.c -------------------------------------------------------------------------- */

/* listen/connect/accept/close of the ABI; connect and accept never block. */
ncclResult_t netofi_conn_listen(netofi_ep_t *ep, void *handle, void **listen_comm);
ncclResult_t netofi_conn_connect(netofi_ep_t *ep, void *handle, void **send_comm);
ncclResult_t netofi_conn_accept(void *listen_comm, void **recv_comm);
ncclResult_t netofi_conn_close(void *comm);
/* A control request completed (e NULL) or failed. Lock held. */
void netofi_conn_ctrl_done(netofi_ep_t *ep, netofi_req_t *req, const struct fi_cq_err_entry *e);
/* Free c if it is closed and nothing of it is in flight or queued. Lock held. */
void netofi_conn_reap(netofi_ep_t *ep, netofi_comm_t *c);
/* Free a connection (its registration, id and memory). Lock held. */
void netofi_conn_free(netofi_comm_t *c);

/* netofi_data.c -------------------------------------------------------------------------- */

ncclResult_t netofi_data_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle);
ncclResult_t netofi_data_dereg_mr(void *comm, void *mhandle);
ncclResult_t netofi_data_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                               void **request);
ncclResult_t netofi_data_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                               void **mhandles, void **request);
ncclResult_t netofi_data_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                                void **request);
ncclResult_t netofi_data_test(void *request, int *done, int *sizes);
/* Completion dispatch, called by netofi_ep_progress. Lock held. */
void netofi_data_complete(netofi_ep_t *ep, netofi_req_t *req, size_t len);
void netofi_data_fail(netofi_ep_t *ep, netofi_req_t *req, const struct fi_cq_err_entry *e);
/* The peer's CLOSE arrived: fail c's requests from c->peer_seq on. Lock held. */
void netofi_data_peer_closed(netofi_ep_t *ep, netofi_comm_t *c);

#endif /* NETOFI_H_ */
