/* SPDX-License-Identifier: Apache-2.0 */
/*
 * exec: executors run what plan chose. An executor is an ops table (br_exec_ops_t); the
 * host executor (CPU threads on host memory) is the first. It turns each operation into
 * work items queued per connection set: one queue per channel (collectives, in call
 * order), one per peer and direction (send/recv), one for the node arena and one for local
 * copies. Running a batch progresses every queue of every communicator of a group from
 * the calling thread: each step of a work item is one primitive of plan's schedule on one
 * FIFO slot (core/common/fifo.h), taken only when its counters allow, so nothing blocks
 * inside a step and a single thread can drive several ranks of one process without
 * deadlock. Waiting spins briefly, then yields, then sleeps; while waiting it checks peer
 * liveness, abort notices and the watchdog.
 */
#ifndef BR_EXEC_H_
#define BR_EXEC_H_

#include <stddef.h>
#include <stdint.h>

#include "coll.h"
#include "exec_reduce.h"
#include "graph.h"
#include "plan.h"
#include "transport.h"

/* Peers a channel talks to in one direction: ring neighbour, tree parent and children. */
#define BR_CHANNEL_PEERS (2 + BR_MAX_TREE_ARITY)

/* The connections of one channel, one per distinct peer and direction (a tree link and a
 * ring link to the same peer share one, as in NCCL). */
typedef struct {
    int nsend, nrecv;
    int send_peer[BR_CHANNEL_PEERS];
    int recv_peer[BR_CHANNEL_PEERS];
    br_conn_t *send[BR_CHANNEL_PEERS];
    br_conn_t *recv[BR_CHANNEL_PEERS];
} br_exec_channel_t;

/* A communicator's collnet (CollNetDirect / CollNetChain AllReduce, and CollNetDirect
 * AllGather / ReduceScatter where the plugin has iallgather / ireducescatter): the plugin, the
 * collective communicator every rank joined, and two pairs of staging buffers registered
 * with it once at init, so one chunk is copied in or out while the other is in the
 * network. Made by comm (core/comm/comm_collnet.c); the executor only drives it. */
#define BR_COLLNET_NBUF 2
typedef struct {
    br_collnet_t *cn;
    void *coll_comm;
    size_t stage_bytes;                 /* bytes of each staging buffer */
    char *send[BR_COLLNET_NBUF], *recv[BR_COLLNET_NBUF];
    void *send_mh[BR_COLLNET_NBUF], *recv_mh[BR_COLLNET_NBUF];
    unsigned char red[ncclNumTypes];    /* per type, bit k: br_red_kind_t k (sum .. min) is
                                         * reduced by every rank's plugin */
    int allgather, reducescatter;       /* every rank's plugin has iallgather /
                                         * ireducescatter (CollNet AllGather / ReduceScatter) */
} br_exec_collnet_t;

/* What an executor needs of a communicator. */
/*
 * The operation log: a ring of a communicator's last BRAID_DUMP_OPS operations, for the
 * state dump (core/comm/comm_dump.c). The group records an operation when the call is
 * accepted (queued); the executor when it runs, waits (for which peer, on what), resumes
 * and finishes; the group or the solo path marks what never finished as failed. Every
 * update takes the log's mutex for a few stores, so any thread may read it meanwhile.
 */
typedef enum {
    BR_OPLOG_QUEUED,  /* accepted by the call; its group or its connections not ready yet */
    BR_OPLOG_RUNNING, /* in the executor */
    BR_OPLOG_WAITING, /* in the executor (or connecting), nothing moving */
    BR_OPLOG_DONE,
    BR_OPLOG_FAILED
} br_oplog_state_t;

/* One operation as the log holds it. Times are br_time_ns(). */
typedef struct {
    uint64_t ticket; /* 1 + its index among the comm's logged operations (0: empty) */
    br_func_t func;
    size_t count;
    ncclDataType_t type;
    br_red_kind_t red;
    int root, peer;
    uint64_t seq;
    int algo, proto;
    br_oplog_state_t state;
    int items;            /* work items not finished yet */
    uint64_t queued_ns;   /* when the call was accepted */
    uint64_t wait_ns;     /* WAITING: since when */
    uint64_t end_ns;      /* DONE, FAILED: when */
    int wait_peer;        /* WAITING: the peer it waits for (-1: none known) */
    const char *wait_what; /* ... and on what: "data from", ... (a static string) */
} br_oplog_rec_t;

typedef struct br_oplog br_oplog_t;

typedef struct br_exec_comm {
    int rank, nranks;
    int nchannels;
    br_exec_channel_t chan[BR_MAX_CHANNELS];
    const br_graph_t *graph;
    br_conn_t **p2p_send; /* per peer, made on first use */
    br_conn_t **p2p_recv;
    br_transport_comm_t *tc;
    uint64_t coll_seq;             /* collectives issued */
    uint64_t *send_seq, *recv_seq; /* messages per peer */
    /* Messages per peer of owner-fold reductions (core/group/group_fold.c), numbered apart
     * from the program's: a stager numbers them when it runs them, while the program's
     * thread numbers its own sends and receives as it makes them. */
    uint64_t *fold_send_seq, *fold_recv_seq;
    struct br_exec_batch *solo;    /* reused for operations outside a group */
    br_arena_t *arena;             /* node arena for one-hop small collectives, or NULL */
    br_exec_collnet_t *collnet;    /* collnet, when every rank could join it, or NULL */
    uint64_t arena_seq;            /* operations run through the arena */
    struct br_arena_defer *defer;  /* root Broadcasts not checked yet (exec_arena.c), or NULL */
    char *gather_scratch;          /* RingOneShot inputs: nranks x gather_cap bytes */
    size_t gather_cap;
    char *ll_scratch;       /* LL steps: unpacked receives and the data sent */
    size_t ll_scratch_each; /* bytes of one of its BR_MAX_TREE_ARITY + 1 parts */
    int has_net;            /* some connection goes through the proxy */
    int oversubscribed;     /* more ranks on this host than CPU cores */
    size_t nt_bytes;        /* arena copies of inputs this large stream (0: never) */
    size_t a2av_inline;     /* node-arena AlltoAllV: blocks up to this size for readers of
                             * other processes are copied into the arena (exec_a2av.c) */
    br_profiler_t *prof;    /* profiler plugin, or NULL */
    uint64_t prof_seq[BR_NUM_FUNCS]; /* per-function counters for its events */
    uint64_t symptom_ns;             /* when a local network symptom was first seen */
    uint64_t wait_posted;            /* key of the last wait notice sent to the peers */
    uint64_t asked_seq; /* the call (br_slot_desc_t seq) whose wants went to its peers */
    ncclResult_t error;              /* sticky: the first failure */
    char error_msg[1024];
    _Atomic int revoked;             /* set by any thread: every call now fails with ... */
    char revoked_why[160];           /* ... this (written before revoked is set) */
    br_oplog_t *oplog;               /* recent operations, or NULL (not recorded) */
    struct br_cuda_clique *cuda;     /* CUDA executor of device calls, or NULL (none) */
    struct br_cuda_stage *stage;     /* ... or, ranks in several processes: the stager */
    int cuda_dev;                    /* the CUDA device the comm is bound to, -1 none */
} br_exec_comm_t;

/* A OneShot Broadcast's root returns without waiting for the other ranks' call
 * descriptors; its later calls check them (exec_arena.c). Finish those checks now: with
 * wait, waiting for ranks that have not published theirs yet under the executor's health
 * checks and timeout (ncclCommFinalize, ncclCommDestroy); without, only those already
 * there (ncclCommAbort). Returns the error these checks found (a mismatch names both
 * calls and ranks), else ncclSuccess (also when the communicator had failed before). */
ncclResult_t br_exec_defer_settle(br_exec_comm_t *ec, int wait);

/* Start recording ec's last n operations (n <= 0: none). */
ncclResult_t br_exec_oplog_open(br_exec_comm_t *ec, int n);
/* Record op as queued; sets op->log_ticket (left 0 without a log). */
void br_exec_oplog_add(br_exec_comm_t *ec, br_op_t *op);
/* The call of op has ended: if its operation did not finish, it failed. */
void br_exec_oplog_settle(br_exec_comm_t *ec, const br_op_t *op);
/* p2p connections to the peers listed (-1: none; nranks entries each) are being made:
 * queued Send/Recv records to and from them wait for that. */
void br_exec_oplog_connecting(br_exec_comm_t *ec, const int *recv_peers, const int *send_peers);
/* Copy the log, oldest first, into out (up to max records); returns how many. Any thread. */
int br_exec_oplog_snapshot(br_exec_comm_t *ec, br_oplog_rec_t *out, int max);
/* "queued", "running", "waiting", "done", "failed". */
const char *br_oplog_state_name(br_oplog_state_t state);

/*
 * Profiler events of the API layer, in NCCL's hierarchy: GroupApi (one per communicator
 * per outermost group, started at its first operation) -> CollApi / P2pApi (started and
 * stopped inside the call) -> Coll / P2p (started by the executor) -> ... An event is
 * emitted when its bit or a descendant's is in the mask snapshot taken when the group's
 * event starts. A NULL handle means not emitted (or dropped by the plugin).
 */
int br_exec_prof_mask(const br_exec_comm_t *ec); /* the snapshot to take; 0 without plugin */
void *br_exec_prof_group_start(br_exec_comm_t *ec, int mask, int depth);
void br_exec_prof_group_end_api(br_exec_comm_t *ec, void *group); /* GroupEndApiStart */
void br_exec_prof_group_stop(br_exec_comm_t *ec, void *group);
/* Start and stop op's CollApi or P2pApi event under group; sets op->prof_parent. */
void br_exec_prof_api(br_exec_comm_t *ec, void *group, br_op_t *op);

/* From any thread: calls in flight on ec fail within ~100 ms, later ones at once. */
void br_exec_revoke(br_exec_comm_t *ec, const char *why);

/* The call an operation belongs to, as a descriptor another rank can compare with its own
 * (p2p connection setup sends it with each receive end): the Gather, Scatter or AlltoAll
 * of a send or receive that came from one, the owner-fold reduction of one of its phases
 * (its AllGather included), any other collective itself; seq 0 for a send or receive of
 * its own, which pairs by message, not by call. */
br_slot_desc_t br_exec_call_desc(const br_op_t *op);
/* Are two calls of the same number different calls (function, count, type, reduction or
 * root; a v-collective's counts differ by rank and are compared when its data comes)? */
int br_exec_call_differs(const br_slot_desc_t *a, const br_slot_desc_t *b);
/* The error of a rank in call `mine` whose peer asked it for a p2p connection in call
 * `theirs` of the same number (br_transport_peer_ask). */
void br_exec_call_mismatch(char *buf, size_t len, int rank, const br_slot_desc_t *mine, int peer,
                           const char *peer_host, const br_slot_desc_t *theirs);
/* "AllReduce #3 (count 64, float32, sum, Ring/Simple)": what a descriptor describes. */
void br_desc_describe(char *buf, size_t len, const br_slot_desc_t *d);

/* The send and receive connections of channel c to/from peer (NULL if none). */
br_conn_t *br_exec_chan_send(const br_exec_comm_t *ec, int c, int peer);
br_conn_t *br_exec_chan_recv(const br_exec_comm_t *ec, int c, int peer);

typedef struct br_work br_work_t;

/* An ordered queue of work items that share connections. */
typedef struct {
    br_exec_comm_t *ec;
    int key_type, key_idx; /* which connection set: channel, send/recv peer, arena, local */
    br_work_t *items;
    int n, cap, cur;
    int wait_peer;         /* whom the head item last waited for, -1 none */
    const char *wait_what; /* "data from" / "space at" */
} br_exec_queue_t;

/* The Coll or P2p event of one operation: recorded at enqueue, started and stopped when
 * the batch is launched (NCCL's "stop" of a task means enqueued); its handle stays the
 * parent of the KernelCh events of the operation's work items. */
typedef struct {
    br_exec_comm_t *ec;
    br_op_t op;
    void *handle;
} br_exec_event_t;

/* A group's worth of queues across communicators. Queue slots keep their item arrays
 * across a reset, so a reused batch allocates nothing. */
typedef struct br_exec_batch {
    br_exec_queue_t *queues;
    int n, cap;
    int ninit;               /* queue slots whose item arrays are initialised */
    br_exec_event_t *events; /* Coll/P2p events, and one GroupApi per profiled comm */
    int nevents, events_cap;
    void **owned;          /* memory its work items use (v-collectives' scratch), freed */
    int nowned, owned_cap; /* by reset and free */
} br_exec_batch_t;

/* An executor. Every call is made by the thread that owns the batch. */
typedef struct br_exec_ops {
    const char *name;
    /* Append the work of one operation to the batch, as plan chose it (op->algo, proto,
     * nchannels, chunk_bytes); p2p connections must already exist. */
    ncclResult_t (*enqueue)(br_exec_batch_t *batch, br_exec_comm_t *ec, const br_op_t *op);
    /* Append a copy of bytes from src to dst (a send to self matched with its recv). */
    ncclResult_t (*enqueue_copy)(br_exec_batch_t *batch, br_exec_comm_t *ec, const void *src,
                                 void *dst, size_t bytes);
    /* Run everything in the batch to completion, or to the first error (recorded, sticky,
     * in the failing communicator and announced to its other ranks). */
    ncclResult_t (*run)(br_exec_batch_t *batch);
    /* Empty the batch for reuse, keeping its memory (open profiler events are stopped). */
    void (*reset)(br_exec_batch_t *batch);
    /* Free the batch's queues (not the communicators). */
    void (*free)(br_exec_batch_t *batch);
} br_exec_ops_t;

/* The host executor: CPU threads on host memory. */
extern const br_exec_ops_t br_exec_host;

/* Run one operation outside any group on its communicator's reusable batch: the path
 * of a lone ncclAllReduce, which allocates nothing once the batch has grown. */
ncclResult_t br_exec_run_solo(br_exec_comm_t *ec, const br_op_t *op);

/* Is a process of this host gone (exited, or a zombie nobody reaped yet)? The host
 * executor's health checks and the CUDA stager's both ask (host/exec_health.c). */
int br_exec_pid_is_dead(int pid);

/* Record a failure on the communicator (first one wins) and WARN it. */
void br_exec_fail(br_exec_comm_t *ec, ncclResult_t res, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * The CUDA executor (cuda/exec_cuda*.c): device calls of ranks that are threads of this process.
 * A communicator joins its clique (its ranks in this process) at init. A rank's device
 * calls of one group are one deposit, ordered on the call's stream; deposits launch in
 * units (every rank's next one when they hold collectives, else sends and receives that
 * pair up among some ranks), by the call that completes the unit; a call returns once its
 * unit is launched.
 */
typedef struct br_cuda_clique br_clique_t;
/* Does this build carry kernels (built with a CUDA compiler)? */
int br_exec_cuda_has_kernels(void);
/* Join the clique of communicator `hash`, bound to CUDA device `device`. */
ncclResult_t br_exec_cuda_attach(br_exec_comm_t *ec, uint64_t hash, int device);
/* Deposit one rank's device operations of one group (one stream, call order): the stream
 * records that they are reached, and the unit they complete is launched. *ticket_p says
 * what br_exec_cuda_wait then makes the stream wait for: BR_CUDA_NO_TICKET is nothing (a
 * communicator of one rank copies on the stream at once, as NCCL does; all of a deposit
 * went the CUDA IPC direct path). br_exec_cuda_wait waits on the host until the ticket's
 * unit is launched (its peers' calls made), so a thread that submits for several ranks of
 * one group deposits for every rank first, then waits. */
ncclResult_t br_exec_cuda_deposit(br_exec_comm_t *ec, const br_op_t *ops, int nops,
                                  uint64_t *ticket_p);
#define BR_CUDA_NO_TICKET UINT64_MAX
ncclResult_t br_exec_cuda_wait(br_exec_comm_t *ec, uint64_t ticket, void *stream);
/* Both, for one rank's lone call (or its capture). */
ncclResult_t br_exec_cuda_submit(br_exec_comm_t *ec, const br_op_t *ops, int nops);
/* Is the stream being captured into a CUDA graph? */
int br_exec_cuda_capturing(void *stream);
/* The device operations of a group whose streams are being captured: ecs[i] runs
 * ops[i][0..nops[i]); every rank of the unit must be there (see exec_cuda.c). */
ncclResult_t br_exec_cuda_capture(br_exec_comm_t *const *ecs, const br_op_t *const *ops,
                                  const int *nops, int n);
/* What the kernels and the watchdog reported (sticky in ec->error), for
 * ncclCommGetAsyncError. */
ncclResult_t br_exec_cuda_async_error(br_exec_comm_t *ec);
/* From any thread: kernels stop waiting, every waiting stream is released, the clique fails. */
void br_exec_cuda_abort(br_exec_comm_t *ec);
/* Has this rank device calls that have not finished (a stream may wait for a peer that
 * never calls, with no thread inside a call)? For ncclCommAbort, which stops them. */
int br_exec_cuda_pending(br_exec_comm_t *ec);
/* Leave the clique; the last rank waits for the kernels and frees everything. */
void br_exec_cuda_detach(br_exec_comm_t *ec);
/* Most channels a device collective may use (plan's bound; the clique may hold fewer). */
int br_exec_cuda_nchannels(const br_exec_comm_t *ec);

/*
 * Device calls of a communicator whose ranks are in several processes (cuda/exec_cuda_stage.c):
 * the stream copies the inputs to pinned host memory, a thread of the rank (the stager)
 * runs the calls there with the host executor, and the stream copies the outputs back;
 * nothing waits on the SMs. br_exec_cuda_deposit / _wait / _submit / _async_error /
 * _abort go there for such a communicator; captures are refused. comm frees the stager
 * with br_exec_cuda_stage_detach while the transports it runs on still exist.
 */
typedef struct br_cuda_stage br_cuda_stage_t;
/* Runs host operations (buffers in host memory, already sequenced) on the communicator,
 * as one group: the group layer's br_group_run_host. */
typedef ncclResult_t (*br_cuda_stage_run_fn)(void *arg, br_op_t *ops, int nops);
/* host_sync: every device call completes on the host before it returns; no stream waits
 * for the stager or for another process (ranks of several processes share a GPU). */
ncclResult_t br_exec_cuda_attach_staged(br_exec_comm_t *ec, int device, br_cuda_stage_run_fn run,
                                        void *run_arg, int host_sync);
/* ops share one stream (br_exec_cuda_deposit checks it before coming here). */
ncclResult_t br_exec_cuda_stage_deposit(br_exec_comm_t *ec, const br_op_t *ops, int nops,
                                        uint64_t *ticket_p);
ncclResult_t br_exec_cuda_stage_wait(br_exec_comm_t *ec, uint64_t ticket, void *stream);
void br_exec_cuda_stage_abort(br_exec_comm_t *ec);
/* br_exec_cuda_async_error's for a staged rank: a peer's failure notice counts. */
ncclResult_t br_exec_cuda_stage_async_error(br_exec_comm_t *ec);
/* br_exec_cuda_pending's answer for a staged rank. */
int br_exec_cuda_stage_pending(br_exec_comm_t *ec);
void br_exec_cuda_stage_detach(br_exec_comm_t *ec);
/* br_exec_cuda_mem_bytes's answer for a staged rank. */
size_t br_exec_cuda_stage_mem_bytes(const br_exec_comm_t *ec);
/* Wait until every device call deposited on ec has run (no-op without a stager): host
 * calls run after the device calls made before them, on every rank alike. */
void br_exec_cuda_stage_quiesce(br_exec_comm_t *ec);

/* Free what the executor allocated for a communicator (not the structure itself). */
void br_exec_comm_release(br_exec_comm_t *ec);
/* ncclCommSuspend: free the executor's scratch and operation queue and forget every
 * connection and the node arena (the transport closes them); they are made again before
 * the next call (ncclCommResume). The communicator must be idle. */
void br_exec_comm_suspend(br_exec_comm_t *ec);
/* Bytes of host scratch the executor holds now. */
size_t br_exec_mem_bytes(const br_exec_comm_t *ec);
/* Bytes the rank's CUDA executor holds now: the device FIFOs this rank receives into
 * (made at its clique's first device call), or the stager's pinned staging and device
 * staging buffer. 0 without either. */
size_t br_exec_cuda_mem_bytes(const br_exec_comm_t *ec);

#endif /* BR_EXEC_H_ */
