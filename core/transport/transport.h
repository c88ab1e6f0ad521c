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
    char *buf; /* BR_STEPS * step_size bytes */
    size_t step_size;
    size_t stride; /* bytes between slots: step_size, plus room for the call
                    * descriptor that travels after the payload on net links */
    uint64_t step; /* executor-local: next slot to fill (send) or consume (recv) */
    int peer;      /* rank at the other end */
    int is_send;
    br_transport_t kind;
    br_net_conn_t *net; /* net only: the proxy's half */
    void *mapping;      /* shm/p2p allocation owned by this end, or NULL */
    size_t mapping_size;
    char shm_name[64]; /* shm segment name while it may still need unlinking */
} br_conn_t;

/* What a rank tells every other rank at init. */
typedef struct {
    int rank;
    int pid;
    uint64_t host_hash;
    uint64_t pid_hash;
    uint64_t comm_ptr; /* for p2p within one process */
    int64_t buffsize;
    int64_t p2p_chunk;
    int nchannels;
    int channels_auto; /* nchannels is Braid's default, not set by the user */
    int cpus;          /* online CPUs of the rank's host */
    int pipeline;      /* BRAID_RING_PIPELINE */
    int shm_disable;
    int p2p_disable;
    char host[64];
} br_peer_info_t;

/*
 * The node arena: one shared-memory segment per communicator whose ranks all share one
 * host, where every rank publishes a small operation's whole input in one step and reads
 * everyone else's. A small collective then costs one hop between ranks (a ring needs up to
 * 2(n-1)), which matters most when ranks outnumber cores and every hop waits for the
 * scheduler. Each rank owns a `done` counter and BR_FLAT_NBUF buffers used in turn:
 * operation k goes to buffer k % BR_FLAT_NBUF, which is rewritten only after every rank
 * has finished reading operation k - BR_FLAT_NBUF from it (several buffers let a writer
 * look at the others' `done` counters once every few operations, not every time). A buffer starts
 * with its header (the flag k + 1 once the data is complete, and the call descriptor) on the same
 * cache line as the first data bytes, so a reader of a small input takes one cache miss per peer.
 */
typedef struct {
    _Atomic uint64_t flag; /* k + 1 once operation k's input and descriptor are complete */
    br_slot_desc_t desc;   /* the call the data belongs to */
} br_flat_hdr_t;

#define BR_FLAT_HDR_BYTES 40 /* data follows the header, 8-byte aligned */
#define BR_FLAT_NBUF 8       /* large buffers per rank */
#define BR_FLAT_NSMALL 64    /* small slots per rank */
#define BR_FLAT_SMALL_BYTES 128
#define BR_FLAT_SMALL_MAX (BR_FLAT_SMALL_BYTES - BR_FLAT_HDR_BYTES)

typedef struct {
    _Alignas(64) _Atomic uint64_t done; /* operations this rank finished reading */
} br_flat_ctrl_t;

typedef struct br_flat {
    int nranks;
    size_t max_bytes;  /* bytes a rank may publish per operation */
    size_t buf_stride; /* bytes between a rank's buffers */
    size_t stride;     /* bytes between ranks' regions */
    char *base;        /* the mapping */
    size_t size;
    uint64_t min_done; /* local: the lowest `done` of the other ranks when last looked at */
    size_t cma_bytes;  /* smallest AllGather/Broadcast input read straight from its owner's
                        * memory (single copy), or 0 when ranks cannot read each other's */
    size_t cma_max;    /* and the largest (0: no limit) */
    uint64_t probe;    /* a word the other ranks read at setup to prove they can */
} br_flat_t;

/* Rank r's control block, and the header and data of its buffer for operation k: one of
 * the BR_FLAT_NBUF large buffers, or for inputs of at most BR_FLAT_SMALL_MAX bytes one of
 * BR_FLAT_NSMALL two-line slots (many, so a rank can run far ahead of a slow reader,
 * e.g. a Broadcast root). */
static inline br_flat_ctrl_t *br_flat_ctrl(const br_flat_t *f, int r)
{
    return (br_flat_ctrl_t *)(f->base + (size_t)r * f->stride);
}

static inline br_flat_hdr_t *br_flat_hdr(const br_flat_t *f, int r, uint64_t k, int small)
{
    char *region = f->base + (size_t)r * f->stride + 64;
    if (small) {
        return (br_flat_hdr_t *)(region + BR_FLAT_NBUF * f->buf_stride +
                                 (size_t)(k % BR_FLAT_NSMALL) * BR_FLAT_SMALL_BYTES);
    }
    return (br_flat_hdr_t *)(region + (size_t)(k % BR_FLAT_NBUF) * f->buf_stride);
}

static inline char *br_flat_buf(const br_flat_t *f, int r, uint64_t k, int small)
{
    return (char *)br_flat_hdr(f, r, k, small) + BR_FLAT_HDR_BYTES;
}

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
    br_flat_t *flat;   /* node arena, or NULL when ranks span hosts or it is disabled */
    br_conn_t **conns; /* every connection made, for teardown */
    int nconns, conns_cap;
} br_transport_comm_t;

/* Which transport connects this rank to peer (p2p, shm or net). */
br_transport_t br_transport_select(const br_transport_comm_t *tc, int peer);
/* The same for any two ranks (symmetric), so every rank can judge every link alike. */
br_transport_t br_transport_select_pair(const br_peer_info_t *a, const br_peer_info_t *b);
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

/*
 * Collective over the communicator: map a node arena of max_bytes per rank and buffer
 * when every rank is on this host and may use shared memory (tc->flat, else NULL). Every
 * rank reaches the same answer; a failure to create or map the segment on any rank leaves
 * it off everywhere (logged), it is an optimisation and never required. With cma_bytes > 0
 * the ranks also check that each can read every other's memory (process_vm_readv), and if
 * all can, AllGather/Broadcast inputs from cma_bytes to cma_max (0: any) are read in place.
 */
ncclResult_t br_transport_flat_setup(br_transport_comm_t *tc, size_t max_bytes, size_t cma_bytes,
                                     size_t cma_max);

/* Close every connection and the proxy; with flush, let pending network sends finish
 * first (bounded). */
void br_transport_close_all(br_transport_comm_t *tc, int flush);

#endif /* BR_TRANSPORT_H_ */
