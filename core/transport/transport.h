/* SPDX-License-Identifier: Apache-2.0 */
/*
 * transport: per-peer connections, and the node arena. Every connection, whatever carries
 * it, looks the same to an executor (core/common/fifo.h): BR_STEPS slots of step_size
 * bytes, an LL region of BR_STEPS lines slots where the peer writes them, and a control
 * block with the sender's `tail`, the receiver's `head` and a call descriptor per slot.
 * Each kind of transport is one ops table (transport_int.h):
 *
 *  - p2p (ranks of one process): the receiver allocates the FIFO; the sender writes into
 *    it directly.
 *  - shm (processes of one node): the receiver creates a POSIX shared-memory segment that
 *    both map.
 *  - net (everything else): each side has a local FIFO; the proxy thread ships filled
 *    slots with the net plugin (sender) and receives into free slots (receiver). LL lines
 *    travel in the Simple slots there.
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

struct br_transport_ops;

/* One direction of a connection as an executor sees it. */
typedef struct br_conn {
    br_fifo_ctrl_t *ctrl;
    char *buf; /* BR_STEPS * stride bytes: the Simple slots */
    size_t step_size;
    size_t stride;    /* bytes between slots: step_size, plus room for the call
                       * descriptor that travels after the payload on net links */
    uint64_t *ll; /* LL region (BR_STEPS slots of ll_bytes), NULL on net links,
                           * where LL lines go in the Simple slots */
    size_t ll_bytes;      /* wire bytes of one LL slot (0: no LL on this connection) */
    uint64_t step; /* executor-local: next slot to fill (send) or consume (recv) */
    int peer;      /* rank at the other end */
    int lane;      /* channel, or peer for p2p: with the local rank, picks the net device */
    int p2p;       /* a send/recv connection (lane is the peer), not a channel's */
    int is_send;
    br_transport_t kind;
    const struct br_transport_ops *ops;
    br_net_conn_t *net; /* net only: the proxy's half */
    void *setup;        /* net only, while connecting: the plugin handshake state */
    void *mapping;      /* shm/p2p allocation owned by this end, or NULL */
    size_t mapping_size;
    void *p2p_held;     /* p2p: the receiver's FIFO memory this end holds (see
                         * transport_mem.c: the last end to close unmaps it), or NULL */
    char shm_name[64]; /* shm segment name while it may still need unlinking */
} br_conn_t;

/* The LL lines of step `step`'s slot: in the LL region, or in the Simple slot on net. */
static inline uint64_t *br_conn_ll_slot(const br_conn_t *c, uint64_t step)
{
    if (c->ll != NULL) {
        return (uint64_t *)((char *)c->ll + (size_t)(step % BR_STEPS) * c->ll_bytes);
    }
    return (uint64_t *)(c->buf + (size_t)(step % BR_STEPS) * c->stride);
}

/* The executor will consume n more slots of the receive connection c (it says so when it
 * queues an operation): on net links the proxy posts that many receives and no more. */
static inline void br_conn_expect(br_conn_t *c, uint64_t n)
{
    if (c != NULL && c->net != NULL && !c->is_send && n > 0) {
        br_proxy_expect(c->net, n);
    }
}

/* The executor waits for the slot of c's next step: on net links make sure its receive
 * may be posted even if an announced count fell short. */
static inline void br_conn_need(br_conn_t *c)
{
    if (c->net != NULL) {
        br_proxy_need(c->net, c->step);
    }
}

/* The Simple slot of step `step`. */
static inline char *br_conn_slot(const br_conn_t *c, uint64_t step)
{
    return c->buf + (size_t)(step % BR_STEPS) * c->stride;
}

/* What a rank tells every other rank at init. */
typedef struct {
    int rank;
    int pid;
    uint64_t host_hash;
    uint64_t machine_hash; /* the machine whatever NCCL_HOSTID says: who shares the cores */
    uint64_t pid_hash;
    uint64_t shm_key;  /* br_shm_key(): equal values map each other's /dev/shm segments */
    uint64_t shm_dev;  /* the device of its /dev/shm, for messages */
    uint64_t pid_ns;   /* br_pid_ns(): equal values (on one machine) see each other's pids */
    uint64_t comm_ptr; /* for p2p within one process */
    int64_t buffsize;
    int64_t ll_buffsize;
    int64_t p2p_chunk;
    int64_t oneshot_bytes; /* BRAID_ONESHOT_BYTES */
    int nchannels;
    int channels_auto; /* nchannels is Braid's default, not set by the user */
    int cpus;          /* online CPUs of the rank's host */
    int pipeline;      /* BRAID_RING_PIPELINE */
    int shm_disable;
    int p2p_disable;
    int collnet_enable;    /* NCCL_COLLNET_ENABLE */
    int collnet_threshold; /* NCCL_COLLNET_NODE_THRESHOLD */
    int topo_share;        /* takes its topology from its host's first such rank */
    char host[64];
    char gpu_busid[24]; /* PCI bus id of the rank's CUDA device ("": none or not known) */
    int gpu_mps;        /* that device's contexts are shared through MPS */
} br_peer_info_t;

/* Which host-memory mechanisms two ranks may use between them. "One host" (host_hash) is
 * what topology and tuning go by: ranks of one machine share its links and cores even in
 * separate containers. Shared memory (the shm transport, the node arena, the bootstrap's
 * host segments) needs the same /dev/shm. Reading or mapping another process's memory by
 * its pid (process_vm_readv, /proc/<pid>/fd) and asking whether it lives (kill(pid, 0))
 * need the same machine and pid namespace: in another, a pid names another process. */
static inline int br_peer_shares_shm(const br_peer_info_t *a, const br_peer_info_t *b)
{
    return a->shm_key == b->shm_key;
}

static inline int br_peer_sees_pid(const br_peer_info_t *a, const br_peer_info_t *b)
{
    return a->machine_hash == b->machine_hash && a->pid_ns == b->pid_ns;
}

/* ---- The node arena ----
 * One shared-memory segment per communicator whose ranks all share one host, where every
 * rank publishes a small operation's whole input in one step and reads everyone else's.
 * A small collective then costs one hop between ranks (a ring needs up to 2(n-1)), which
 * matters most when ranks outnumber cores and every hop waits for the scheduler.
 * Each rank owns a `done` counter, BR_ARENA_NBUF large buffers and BR_ARENA_NSMALL small
 * slots, used in turn by operation number k. The `done` counters of all ranks sit together
 * (a cache line each), and so do all ranks' small slots of one k (slot-major), so a small
 * operation among n ranks touches n lines on a few pages rather than two pages of every
 * rank's region (at 1024 ranks, 48 pages instead of 2048 mapped into every process); each
 * rank's large buffers are a region of their own pages. a buffer is rewritten only after every rank
 * has finished reading the operation that last used it (several let a writer look at
 * the others' `done` counters once every few operations, not every time). A buffer starts
 * with its header (the flag k + 1 once the data is complete, and the call descriptor) on
 * the same cache line as the first data bytes, so a reader of a small input takes one
 * cache miss per peer. For inputs read in place (DirectRead) a rank publishes only the
 * input's address, the readers copy from the owner's memory (process_vm_readv between
 * processes) and the owner waits until every reader's `done` passed the operation.
 * On failure: a rank's `failed` word (beside its `done`) says it will read or write no
 * peer's buffer again; it is set by a rank whose arena operation failed, before it
 * withdraws what it published (br_arena_withdraw: the flag stops reading k + 1, so a
 * reader that comes later copies nothing) and before it tells the other ranks, and by a
 * rank that closes its arena. A reader looks at the owner's flag right before each copy
 * from the owner's memory. An owner that fails returns only once every reader of its
 * memory has passed `done` for the operation or set `failed` (exec_engine.c), since a
 * reader that looked just before the withdrawal may still be copying.
 */
typedef struct {
    _Atomic uint64_t flag; /* k + 1 once operation k's input and descriptor are complete */
    br_slot_desc_t desc;   /* the call the data belongs to */
} br_arena_hdr_t;

#define BR_ARENA_HDR_BYTES 40 /* data follows the header, 8-byte aligned */
#define BR_ARENA_NBUF 8       /* large buffers per rank */
#define BR_ARENA_NSMALL 64    /* small slots per rank */
#define BR_ARENA_SMALL_BYTES 128
#define BR_ARENA_SMALL_MAX (BR_ARENA_SMALL_BYTES - BR_ARENA_HDR_BYTES)

typedef struct {
    _Alignas(64) _Atomic uint64_t done; /* operations this rank finished reading */
    _Atomic uint64_t failed;            /* BR_ARENA_FAILED, BR_ARENA_LEFT, or 0 */
} br_arena_ctrl_t;

/* One cache line per rank: the arena's layout and per-process figures assume it. */
_Static_assert(sizeof(br_arena_ctrl_t) == 64, "br_arena_ctrl_t is one cache line");

#define BR_ARENA_FAILED 1 /* an operation of the rank failed */
#define BR_ARENA_LEFT 2   /* the rank closed its arena (communicator destroyed or suspended) */
#define BR_ARENA_WITHDRAWN (1ull << 63) /* in a flag: its owner failed (br_arena_withdraw) */

/* One buffer a DirectRead rank publishes: its address and, when it lies in memory from
 * ncclMemAlloc (a memfd), where peers of other processes can map it. */
typedef struct {
    uint64_t addr;
    uint64_t mem_id;   /* the allocation's number in its process; 0: not mappable */
    uint64_t mem_off;  /* the buffer's offset in it */
    uint64_t mem_size; /* its size */
    int32_t mem_fd;    /* its descriptor in the owner's process */
    int32_t pad;
} br_arena_buf_t;

/* Which of them. */
#define BR_ARENA_IN 0  /* the input (a Broadcast reader: its output, which the root writes) */
#define BR_ARENA_OUT 1 /* an AllReduce's output, where the others read its reduced part */

/* What a DirectRead rank publishes for an operation; a Broadcast's root also says how
 * much of every reader's output it writes itself, and a PreMulSum AllReduce's rank its
 * own scalar, with which the readers scale its input (it fills a small slot exactly). */
typedef struct {
    br_arena_buf_t buf[2]; /* BR_ARENA_IN, BR_ARENA_OUT */
    union {
        uint64_t split;  /* Broadcast root: bytes [0, split) of each reader's output */
        uint64_t scalar; /* PreMulSum AllReduce: the bits of the publisher's br_redop_t
                          * scalar_f (floating types) or scalar_i (integer types) */
    };
} br_arena_addr_t;

/* A peer's ncclMemAlloc memory mapped here, kept between calls (least recently used
 * goes first). */
typedef struct {
    int rank;     /* -1: free */
    uint64_t id;  /* the allocation's number in the peer's process */
    char *base;
    size_t size;
    uint64_t used; /* when last used (a counter) */
} br_arena_map_t;

#define BR_ARENA_NMAP 16

typedef struct br_arena {
    int nranks;
    size_t max_bytes;  /* bytes a rank may publish per operation */
    size_t buf_stride; /* bytes between a rank's buffers */
    size_t stride;     /* bytes between ranks' regions of large buffers */
    size_t small_off;  /* where the small slots start (after the `done` counters) */
    size_t large_off;  /* where the ranks' regions of large buffers start */
    char *base;        /* the mapping */
    size_t size;
    uint64_t min_done; /* local: the lowest `done` of the other ranks when last looked at */
    size_t cma_bytes;  /* smallest AllGather/Broadcast input read straight from its owner's
                        * memory (single copy), or 0 when ranks cannot read each other's */
    size_t cma_max;    /* and the largest (0: no limit) */
    int a2av;          /* AlltoAllV runs through the arena: every rank may read every
                        * other's memory (same process, or process_vm_readv proven at
                        * setup) and BRAID_ALLTOALLV_ARENA allows it */
    size_t a2av_max;   /* its largest block read in place between processes (larger ones
                        * go through the p2p FIFOs), 0: no limit */
    uint64_t probe;    /* a word the other ranks read at setup to prove they can */
    br_arena_map_t maps[BR_ARENA_NMAP]; /* peers' ncclMemAlloc memory mapped here */
    uint64_t map_clock;
    int map_warned; /* a mapping failed once (logged; process_vm_readv used instead) */
} br_arena_t;

/* Unmap every peer mapping (the communicator is closing). */
void br_arena_unmap_all(br_arena_t *a);

/* Does an input of `bytes` go in a small slot (DirectRead addresses always do)? */
static inline int br_arena_is_small(size_t bytes)
{
    return bytes <= BR_ARENA_SMALL_MAX;
}

/* Rank r's control block, and the header and data of its buffer (or small slot) for
 * operation k. */
static inline br_arena_ctrl_t *br_arena_ctrl(const br_arena_t *a, int r)
{
    return (br_arena_ctrl_t *)(a->base + (size_t)r * sizeof(br_arena_ctrl_t));
}

/* Bytes from rank r's data of an operation to rank r + 1's. */
static inline size_t br_arena_rank_stride(const br_arena_t *a, int small)
{
    return small ? BR_ARENA_SMALL_BYTES : a->stride;
}

static inline br_arena_hdr_t *br_arena_hdr(const br_arena_t *a, int r, uint64_t k, int small)
{
    if (small) {
        return (br_arena_hdr_t *)(a->base + a->small_off +
                                  (size_t)(k % BR_ARENA_NSMALL) * (size_t)a->nranks *
                                      BR_ARENA_SMALL_BYTES +
                                  (size_t)r * BR_ARENA_SMALL_BYTES);
    }
    return (br_arena_hdr_t *)(a->base + a->large_off + (size_t)r * a->stride +
                              (size_t)(k % BR_ARENA_NBUF) * a->buf_stride);
}

static inline char *br_arena_data(const br_arena_t *a, int r, uint64_t k, int small)
{
    return (char *)br_arena_hdr(a, r, k, small) + BR_ARENA_HDR_BYTES;
}

/* May `rank` write its buffer for operation k (every rank done reading what it held)?
 * Returns 1, or 0 with *wait_p set to a rank that still reads it. */
int br_arena_writable(br_arena_t *a, int rank, uint64_t k, int small, int *wait_p);

/* Publish `bytes` of data (or, for DirectRead, the address of the input) and the call
 * descriptor as rank `rank`'s input for operation k. */
void br_arena_publish(br_arena_t *a, int rank, uint64_t k, int small, const void *data,
                      size_t bytes, const br_slot_desc_t *desc);

/* Has rank r published operation k? (Acquire: its data and descriptor are complete.) */
static inline int br_arena_published(const br_arena_t *a, int r, uint64_t k, int small)
{
    return atomic_load_explicit(&br_arena_hdr(a, r, k, small)->flag, memory_order_acquire) ==
           k + 1;
}

/* `rank` finished reading everything of operation k. */
static inline void br_arena_done(br_arena_t *a, int rank, uint64_t k)
{
    /* Release: our reads of every buffer are done before writers may reuse them. */
    atomic_store_explicit(&br_arena_ctrl(a, rank)->done, k + 1, memory_order_release);
}

/* `rank` reads or writes no peer's buffer from now on (why: BR_ARENA_FAILED or _LEFT).
 * Release: the copies it made before are complete for whoever sees the word. */
static inline void br_arena_fail(br_arena_t *a, int rank, uint64_t why)
{
    atomic_store_explicit(&br_arena_ctrl(a, rank)->failed, why, memory_order_release);
}

/* Rank r's `failed` word (0: it has not failed). Acquire pairs with br_arena_fail. */
static inline uint64_t br_arena_failed(const br_arena_t *a, int r)
{
    return atomic_load_explicit(&br_arena_ctrl(a, r)->failed, memory_order_acquire);
}

/* Failed `rank` takes back its publication of operation k, if it made it: readers that
 * look at the flag from now on see that it is not there (br_arena_published). */
static inline void br_arena_withdraw(br_arena_t *a, int rank, uint64_t k, int small)
{
    uint64_t want = k + 1;
    atomic_compare_exchange_strong_explicit(&br_arena_hdr(a, rank, k, small)->flag, &want,
                                            (k + 1) | BR_ARENA_WITHDRAWN, memory_order_acq_rel,
                                            memory_order_relaxed);
}

/* Has rank r finished reading operation k? (DirectRead owners wait for their readers.) */
static inline int br_arena_read_by(const br_arena_t *a, int r, uint64_t k)
{
    /* Acquire pairs with the reader's release of done after its last read. */
    return atomic_load_explicit(&br_arena_ctrl(a, r)->done, memory_order_acquire) >= k + 1;
}

/*
 * DirectRead: where bytes [0, end) of rank owner's published buffer `which` of operation k
 * can be read here with plain loads: the owner is this process, or the buffer lies in its
 * ncclMemAlloc memory, mapped here once and kept (made on first use). NULL: between
 * processes, copy it with br_arena_read_peer.
 */
char *br_arena_peer_ptr(br_arena_t *a, const br_peer_info_t *owner, const br_peer_info_t *me,
                        uint64_t k, int which, size_t end);

/*
 * DirectRead: copy `bytes` at offset `off` of rank owner's published buffer `which` of
 * operation k to dst: with memcpy where br_arena_peer_ptr gives a pointer (non-temporal
 * stores when `stream` is set, br_copy_stream), else with process_vm_readv. Returns 0, or
 * an errno value with *src_p the owner's buffer and *done_p the bytes copied before it
 * failed.
 */
int br_arena_read_peer(br_arena_t *a, const br_peer_info_t *owner, const br_peer_info_t *me,
                       uint64_t k, int which, char *dst, size_t off, size_t bytes, int stream,
                       const void **src_p, size_t *done_p);

/* The same from a buffer `pub` that rank owner described elsewhere (an AlltoAllV's table
 * in its large arena buffer). */
int br_arena_read_buf(br_arena_t *a, const br_peer_info_t *owner, const br_peer_info_t *me,
                      const br_arena_buf_t *pub, char *dst, size_t off, size_t bytes, int stream,
                      const void **src_p, size_t *done_p);

/*
 * DirectRead Broadcast: the root copies `bytes` from src to the start of the output whose
 * address rank `owner` published (BR_ARENA_IN) for operation k (process_vm_writev between
 * processes, which the kernel allows exactly where it allows process_vm_readv: both check
 * ptrace attach rights). Returns 0, or an errno value with *done_p the bytes copied before it.
 */
int br_arena_write_peer(br_arena_t *a, const br_peer_info_t *owner,
                        const br_peer_info_t *me, uint64_t k, const char *src, size_t bytes,
                        void **dst_p, size_t *done_p);

/* The transport state of a communicator. */
typedef struct br_transport_comm {
    int rank, nranks;
    uint64_t comm_hash;
    br_bootstrap_t *boot;
    br_peer_info_t *peers; /* nranks entries */
    int64_t buffsize;      /* agreed by all ranks: collective FIFO bytes */
    int64_t ll_buffsize;   /* agreed: LL FIFO bytes of collective connections */
    int64_t p2p_chunk;     /* agreed by all ranks: p2p step bytes */
    br_net_t *net;         /* loaded net plugin, or NULL */
    int traffic_class;     /* ncclConfig_t.trafficClass, or -1 (for a failover's plugin) */
    int shm_prefault;      /* shm FIFOs and the node arena are written or mapped through at
                            * setup, else each page is faulted in on first use */
    int net_required;      /* NCCL_NET named the network: failover never leaves it */
    /* The plugin devices this rank's net connections use, by affinity (the NIC the topology
     * placed it near, then those as near, in turn over lanes), valid for net_pref_of only;
     * none: connections are spread over every device in use. Set by comm_channels.c. */
    int net_pref[BR_NET_MAX_DEVS];
    int net_npref;
    const br_net_t *net_pref_of;
    int *net_fid;          /* 2 x nranks: net connections made so far with each peer, receive
                            * ones then send ones; numbers a connection alike at both ends */
    struct br_proxy *proxy;
    br_net_regs_t net_regs; /* buffers registered with ncclCommRegister (proxy.h) */
    br_arena_t *arena; /* node arena, or NULL when ranks span hosts or it is disabled */
    br_conn_t **conns; /* every connection made, for teardown */
    int nconns, conns_cap;
} br_transport_comm_t;

/* Which transport connects this rank to peer (p2p, shm or net). */
br_transport_t br_transport_select(const br_transport_comm_t *tc, int peer);
/* The same for any two ranks (symmetric), so every rank can judge every link alike. */
br_transport_t br_transport_select_pair(const br_peer_info_t *a, const br_peer_info_t *b);
/* Is every rank a thread of this process (so any rank's buffers can be loaded here)? */
int br_transport_one_process(const br_transport_comm_t *tc);
/* Log at INFO which ranks of this rank's host it cannot share memory with (another
 * /dev/shm: the network instead) or whose pids it cannot see (another pid namespace: no
 * single-copy reads or liveness checks), naming a few of them and why. */
void br_transport_report_split(const br_transport_comm_t *tc);
const char *br_transport_name(br_transport_t kind);

/*
 * What a batch of connections is for, where it is set up inside a call (p2p connections):
 * recv_call[i] / send_call[i] is the call that needs the receive end from recv_peers[i] /
 * the send end to send_peers[i] (a descriptor as br_exec_call_desc makes it; seq 0: not
 * known). A receive end goes to its sender with its call; a sender that has waited a
 * second for a peer's receive end tells that peer which call it is in. While
 * this rank waits, and when it attaches to a peer's receive end, check() is given each
 * call a peer named: one this rank attaches to (attached 1), or one still unanswered in its
 * bootstrap queue (attached 0). Ranks in different calls (a Gather with another root, say)
 * wait for connections their peers never make: check() returns an error (logged) and the
 * setup stops instead of waiting out BRAID_BOOTSTRAP_TIMEOUT.
 */
typedef struct {
    const br_slot_desc_t *recv_call, *send_call;
    ncclResult_t (*check)(void *arg, int peer, const br_slot_desc_t *theirs, int attached);
    void *arg;
} br_conn_purpose_t;

/* The bootstrap tag of p2p connection setup (channels use another). */
#define BR_TRANSPORT_TAG_P2P 2

/* The nth (from 0) call peer asked this rank for a connection in on `tag` that this rank
 * has not answered yet (a receive end it has not attached to, or a sender's want), for a
 * rank that waits elsewhere to compare with its own: 1 and *call if there is one. */
int br_transport_peer_ask(br_transport_comm_t *tc, int tag, int peer, int nth,
                          br_slot_desc_t *call);
/* Tell peer that this rank waits for it in `call` (a want, as a sender that waits for a
 * receive end sends: the peer compares it with its own call of that number). Best effort. */
void br_transport_ask(br_transport_comm_t *tc, int tag, int peer, const br_slot_desc_t *call);
/* Forget the wants peers sent for calls numbered below `seq` (br_slot_desc_t numbering):
 * this rank is past them. The first look is one atomic load. */
void br_transport_asks_prune(br_transport_comm_t *tc, int tag, uint64_t seq);

/*
 * Connect a batch of connections: for each i, a receive connection from recv_peers[i]
 * and/or a send connection to send_peers[i] (-1 = none), with Simple slots of step_size
 * bytes and LL slots of ll_bytes (0: no LL). Blobs travel on bootstrap `tag`, matched per
 * peer in order, so both ends must list their connections to one peer in the same order
 * (by channel). Entries [k * per_lane, (k + 1) * per_lane) are lane k: channel k, or with
 * per_lane 1 the p2p connections of peer k. The lane and the rank's place on its host
 * pick the net device a net connection uses. Blocking, bounded by the bootstrap timeout; every rank
 * involved must call it with matching peers. purpose: NULL, or what the batch is for (above).
 */
ncclResult_t br_transport_connect(br_transport_comm_t *tc, int n, const int *recv_peers,
                                  const int *send_peers, int per_lane, size_t step_size,
                                  size_t ll_bytes, int tag, const br_conn_purpose_t *purpose,
                                  br_conn_t **recv_p, br_conn_t **send_p);

/*
 * Collective over the communicator: map a node arena of max_bytes per rank and buffer
 * when every rank is on this host and may use shared memory (tc->arena, else NULL). Every
 * rank reaches the same answer; a failure to create or map the segment on any rank leaves
 * it off everywhere (logged), it is an optimisation and never required. The ranks also
 * check that each can read every other's memory (process_vm_readv), and if all can,
 * AllGather/Broadcast inputs from cma_bytes to cma_max (0: any; cma_bytes 0: none) may be
 * read in place, and with a2av AlltoAllV runs through the arena, its blocks between
 * processes read in place up to a2av_max bytes (0: any; rank 0's values hold for all).
 */
ncclResult_t br_transport_arena_setup(br_transport_comm_t *tc, size_t max_bytes,
                                      size_t cma_bytes, size_t cma_max, int a2av,
                                      size_t a2av_max);

/* Close every connection and the proxy; with flush, let pending network sends finish
 * first (bounded). */
void br_transport_close_all(br_transport_comm_t *tc, int flush);
/* Bytes of the connections' FIFO mappings (a shared segment counts at both ends that
 * map it) and of the node arena. */
uint64_t br_transport_mem_bytes(const br_transport_comm_t *tc);
/* What this rank can tell of why `peer` went away (a connection failed, its arena end
 * closed), for the end of a WARN:
 * ": its process is gone" where its pid means something here, then "; rank R reported:
 * ..." once some rank announced a failure. wait_ns > 0 (the peer's end vanished, which
 * happens when the peer failed) waits that long for the announcement, which may still be
 * on its way, so the error names the first failure rather than its echo. */
void br_transport_peer_fate(br_transport_comm_t *tc, int peer, uint64_t wait_ns, char *buf,
                            size_t len);
/* The wait_ns of a peer whose end vanished: how long its report may take to arrive. */
#define BR_FATE_WAIT_NS 1000000000ull

#endif /* BR_TRANSPORT_H_ */
