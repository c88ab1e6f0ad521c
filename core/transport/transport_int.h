/* SPDX-License-Identifier: Apache-2.0 */
/*
 * transport module-private: the blob a receiver sends its sender, and the ops table each
 * kind of transport (p2p, shm, net) implements. transport_conn.c drives the phases of a
 * batch of connections through these tables and never branches on the kind.
 */
#ifndef BR_TRANSPORT_INT_H_
#define BR_TRANSPORT_INT_H_

#include "transport.h"
#include "util_socket.h"

/* What the receiver sends the sender. */
typedef struct {
    int32_t kind;
    uint64_t step_size;
    uint64_t ll_bytes;
    uint64_t ptr;                             /* p2p */
    uint64_t ptr_serial;                      /* p2p: which FIFO made at ptr */
    char shm_name[64];                        /* shm */
    char net_handle[NCCL_NET_HANDLE_MAXSIZE]; /* net */
    br_socket_addr_t ack_addr; /* net with failover: where the sender connects the socket
                                * the receiver acknowledges on (unset: no acknowledgements) */
    uint64_t ack_token;        /* what the sender says first there */
    int32_t net_userbuf;       /* net: the receiver's plugin registers host memory */
    br_slot_desc_t call;       /* the call the receiver sets the end up for (seq 0: none) */
} br_conn_blob_t;

typedef struct br_transport_ops {
    br_transport_t kind;
    const char *name; /* as NCCL's INFO lines name it: "P2P/direct pointer", "SHM/direct" */
    /* Receiver: make this end of conn and describe it in blob. */
    ncclResult_t (*recv_setup)(br_transport_comm_t *tc, br_conn_t *conn, br_conn_blob_t *blob);
    /* Sender: attach to the receiving end that blob describes. */
    ncclResult_t (*send_attach)(br_transport_comm_t *tc, br_conn_t *conn,
                                const br_conn_blob_t *blob);
    /* Non-blocking completion (net: the plugin's connect/accept, then the proxy takes the
     * connection). Sets *done_p once the connection is usable; NULL when setup completes
     * the connection. */
    ncclResult_t (*complete)(br_transport_comm_t *tc, br_conn_t *conn, int *done_p);
    /* Undo whatever setup and completion left, successful or not. */
    void (*close)(br_transport_comm_t *tc, br_conn_t *conn);
} br_transport_ops_t;

extern const br_transport_ops_t br_transport_p2p;
extern const br_transport_ops_t br_transport_shm;
extern const br_transport_ops_t br_transport_net;

/* Bytes of the control block at the start of every FIFO mapping (a page multiple). */
size_t br_transport_ctrl_bytes(void);

/* Point conn's control block, Simple slots and LL region into a mapping laid out as
 * ctrl | BR_STEPS x stride | BR_STEPS x ll_bytes (no LL region on net links), then on a
 * net send connection with failover on the keep ring (fifo.h). */
void br_transport_layout(br_conn_t *conn, void *base);

/* Bytes of conn's keep ring after its slots (0 for none), and of its whole mapping. */
size_t br_transport_keep_bytes(const br_conn_t *conn);
size_t br_transport_mapping_bytes(const br_conn_t *conn);

#endif /* BR_TRANSPORT_INT_H_ */
