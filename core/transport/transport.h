/* SPDX-License-Identifier: Apache-2.0 */
/*
 * transport: per-peer connections. Every connection, whatever carries it, looks the same
 * to the executor: a FIFO of BR_STEPS slots of step_size bytes plus a control block with
 * two counters, the sender's `tail` (slots filled) and the receiver's `head` (slots
 * freed), and a descriptor per slot (bytes, and which call the data belongs to).
 *
 *  - p2p (ranks of one process): the receiver allocates the FIFO; the sender writes into
 *    it directly.
 *  - shm (processes of one node): the receiver creates a POSIX shared-memory segment that
 *    both map.
 *  - net (everything else): each side has a local FIFO; the proxy thread ships filled
 *    slots with the net plugin (sender) and receives into free slots (receiver).
 *
 * Setup is receiver-driven: the receiver prepares its end and sends a small blob through
 * the bootstrap; the sender attaches with it.
 */
#ifndef BR_TRANSPORT_H_
#define BR_TRANSPORT_H_

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "bootstrap.h"
#include "fifo.h"
#include "plugin.h"
#include "proxy.h"

typedef enum { BR_TRANSPORT_P2P = 0, BR_TRANSPORT_SHM = 1, BR_TRANSPORT_NET = 2 } br_transport_t;

/* One direction of a connection as the executor sees it. */
typedef struct br_conn {
    br_fifo_ctrl_t *ctrl;
    char *buf;             /* BR_STEPS * step_size bytes */
    size_t step_size;
    size_t stride;         /* bytes between slots: step_size, plus room for the call
                            * descriptor that travels after the payload on net links */
    uint64_t step;         /* executor-local: next slot to fill (send) or consume (recv) */
    int peer;              /* rank at the other end */
    int is_send;
    br_transport_t kind;
    br_net_conn_t *net;    /* net only: the proxy's half */
    void *mapping;         /* shm/p2p allocation owned by this end, or NULL */
    size_t mapping_size;
    char shm_name[64];     /* shm segment name while it may still need unlinking */
} br_conn_t;

/* What a rank tells every other rank at init. */
typedef struct {
    int rank;
    int pid;
    uint64_t host_hash;
    uint64_t pid_hash;
    uint64_t comm_ptr;     /* for p2p within one process */
    int64_t buffsize;
    int64_t p2p_chunk;
    int nchannels;
    int shm_disable;
    int p2p_disable;
    char host[64];
} br_peer_info_t;

/* The transport state of a communicator. */
typedef struct br_transport_comm {
    int rank, nranks;
    uint64_t comm_hash;
    br_bootstrap_t *boot;
    br_peer_info_t *peers; /* nranks entries */
    int64_t buffsize;      /* agreed by all ranks: collective FIFO bytes */
    int64_t p2p_chunk;     /* agreed by all ranks: p2p step bytes */
    br_net_t *net;         /* loaded net plugin, or NULL */
    struct br_proxy *proxy;
    br_conn_t **conns;     /* every connection made, for teardown */
    int nconns, conns_cap;
} br_transport_comm_t;

/* Which transport connects this rank to peer (p2p, shm or net). */
br_transport_t br_transport_select(const br_transport_comm_t *tc, int peer);
const char *br_transport_name(br_transport_t kind);

/*
 * Connect a batch of connections: for each i, a receive connection from recv_peers[i]
 * and/or a send connection to send_peers[i] (-1 = none), with FIFO steps of step_size.
 * Blobs travel on bootstrap `tag`, matched per peer in order, so both ends must list
 * their connections to one peer in the same order (ring: by channel). Blocking, bounded by the
 * bootstrap timeout; every rank involved must call it with matching peers.
 */
ncclResult_t br_transport_connect(br_transport_comm_t *tc, int n, const int *recv_peers,
                                  const int *send_peers, size_t step_size, int tag,
                                  br_conn_t **recv_p, br_conn_t **send_p);

/* Close every connection and the proxy; with flush, let pending network sends finish
 * first (bounded). */
void br_transport_close_all(br_transport_comm_t *tc, int flush);

#endif /* BR_TRANSPORT_H_ */
