/* SPDX-License-Identifier: Apache-2.0 */
/*
 * comm: the communicator's life cycle (init, split, finalize, destroy, abort) and the
 * registry of live communicators, so a handle used after destroy is recognised and
 * refused instead of dereferenced. struct ncclComm is the public opaque type; it holds
 * each module's state (bootstrap, transport, executor) rather than their fields.
 */
#ifndef BR_COMM_H_
#define BR_COMM_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "exec.h"

#define BR_COMM_MAGIC 0x62726169645f636dULL /* "braid_cm" */
#define BR_MAX_USER_OPS 64

/* A user-created reduction (ncclRedOpCreatePreMulSum). */
typedef struct {
    int in_use;
    ncclDataType_t type;
    ncclScalarResidence_t residence;
    const void *scalar_ptr;  /* for ncclScalarDevice: read at each use */
    unsigned char scalar[8]; /* for ncclScalarHostImmediate: copied at creation */
} br_user_op_t;

struct ncclComm {
    uint64_t magic;
    int rank, nranks;
    uint64_t comm_hash;
    int blocking;
    char name[64];     /* config.commName */
    char net_name[64]; /* config.netName */
    int traffic_class;
    br_transport_comm_t *tc;
    br_exec_comm_t *ec;
    br_graph_t *graph;     /* the rings and trees of every channel */
    const br_topo_t *topo; /* the process's topology (shared, not owned), or NULL */
    br_plan_t *plan;       /* the choices: cost model and the tuner hook */
    br_tuner_t *tuner;     /* tuner plugin, or NULL */
    int pipeline;          /* agreed BRAID_RING_PIPELINE (the smallest any rank set) */
    size_t oneshot_bytes;  /* agreed BRAID_ONESHOT_BYTES (the smallest) */
    br_user_op_t user_ops[BR_MAX_USER_OPS];
    pthread_mutex_t lock; /* user ops */
    int finalized;
    _Atomic int refs;    /* the registry's one, plus one per thread using the comm */
    _Atomic int queued;  /* of those, held by calls queued in open groups */
    int flush;           /* what the last holder frees it with */
    _Atomic int shrinks; /* ncclCommShrink calls on it (numbers their messages) */
    char cuda_why[160];  /* why it has no CUDA device ("": it has one, ec->cuda_dev) */
    int init_dev;        /* the device it is bound to, resolved as init starts; -1 none */
    ncclUniqueId grow_id;    /* the id ncclCommGetUniqueId made for a grow (under lock) */
    int grow_pending;        /* grow_id was handed out and no grow has consumed it yet */
    _Atomic int suspended;   /* between ncclCommSuspend and ncclCommResume: calls refused,
                              * buffers released (comm_suspend.c) */
    struct br_comm_rma *rma; /* windows and signals of one-sided calls (comm_rma.c), or NULL */
};

/* The CUDA device of the next communicator this thread creates: BR_COMM_DEVICE_CURRENT
 * (the current device, as cudaGetDevice says) or an ordinal (ncclCommInitAll's list, or
 * the device captured when a grouped init was called). comm_cuda.c. */
#define BR_COMM_DEVICE_CURRENT (-2)
void br_comm_set_init_device(int device);
/* The calling thread's current device (-1: the process does not use CUDA). */
int br_comm_capture_device(void);
/* The device the communicator being created by this thread is bound to (its init
 * device, else the current one), -1 without CUDA: known before the topology placement. */
int br_comm_init_device(void);
/* CUDA device dev's PCI bus id (as the driver writes it) and whether MPS shares its
 * contexts, for the peer info; busid "" when the process has no CUDA or dev is none. */
void br_comm_gpu_identity(int dev, char *busid, size_t len, int *mps);
/* The GPU (index in comm->topo) of comm->init_dev: by PCI bus id when the driver gives
 * it, else the topology GPU whose `dev` is that index; -1 when none. Logs the match. */
int br_comm_topo_gpu(ncclComm_t comm);
/* The process's topology for comm (comm->topo: detected by the host's first rank and
 * received by the others, or loaded from NCCL_TOPO_FILE) and its "Topology:" summary.
 * Collective over the host's ranks; fails only on a bad NCCL_TOPO_FILE or when the rank
 * it receives from fails or dies (a WARN names it). comm_topo.c. */
ncclResult_t br_comm_topo_setup(ncclComm_t comm);
/* Bind the communicator to comm->init_dev and join the CUDA executor, or note why not. */
ncclResult_t br_comm_cuda_setup(ncclComm_t comm);
/* The function stagers run host calls with (the group layer's br_group_run_host), set by
 * the group layer before it creates a communicator. */
void br_comm_set_stage_runner(br_cuda_stage_run_fn fn);

/* Load the env plugin (NCCL_ENV_PLUGIN; once per process), through which the parameter
 * table then reads NCCL_* values. Called by ncclGetUniqueId and communicator init, the
 * first things a program calls, as NCCL does at its own init. */
ncclResult_t br_comm_env_init(void);

/* TLS on Braid's own connections (comm_tls.c): ncclSetEncryption's key (on 0: off), and
 * the BRAID_TLS_* parameters (read once, by br_comm_env_init, unless ncclSetEncryption
 * was called). Both fail with a WARN on a key or file that does not do. */
ncclResult_t br_comm_tls_set(int on, const char *psk);
ncclResult_t br_comm_tls_env(void);

/* Create this rank's communicator (collective over all ranks). */
ncclResult_t br_comm_init(ncclComm_t *comm_p, int nranks, const ncclUniqueId *id, int rank,
                          const ncclConfig_t *config);

/* Split: every rank of parent calls it; ranks with one color form a new communicator
 * ordered by (key, parent rank); NCCL_SPLIT_NOCOLOR gives NULL. */
ncclResult_t br_comm_split(ncclComm_t parent, int color, int key, ncclComm_t *newcomm_p,
                           const ncclConfig_t *config);

/* Shrink: the ranks not in exclude (every one of them calls it) form a new communicator
 * in parent order; with NCCL_SHRINK_ABORT the parent is revoked first. */
ncclResult_t br_comm_shrink(ncclComm_t parent, const int *exclude, int nexclude,
                            ncclComm_t *newcomm_p, const ncclConfig_t *config, int flags);

/* Grow: every rank of parent calls it, exactly one of them with the id (made by
 * ncclCommGetUniqueId) that the new ranks join with; the parent's ranks keep their numbers
 * in a new communicator of nranks ranks. A NULL config means the parent's settings. */
ncclResult_t br_comm_grow(ncclComm_t parent, int nranks, const ncclUniqueId *id,
                          ncclComm_t *newcomm_p, const ncclConfig_t *config);

/* One-sided calls on host windows (comm_rma.c). A window is numbered by its registration
 * order, the same on every rank (registration is collective). */
ncclResult_t br_comm_win_add(ncclComm_t comm, void *buff, size_t size, uint32_t *seq_p);
void br_comm_win_remove(ncclComm_t comm, uint32_t seq);
/* Send peer `bytes` of data for offset of its window win_seq (UINT32_MAX and 0 bytes: a
 * signal alone) and one signal (sig_idx, ctx); does not wait for the peer. */
ncclResult_t br_comm_rma_put(ncclComm_t comm, int peer, uint32_t win_seq, uint64_t offset,
                             const void *data, size_t bytes, int sig_idx, int ctx);
/* Wait until count signals (sig_idx, ctx) from peer arrived, their data in place; consumes
 * them. Bounded by BRAID_BOOTSTRAP_TIMEOUT per message. */
ncclResult_t br_comm_rma_wait(ncclComm_t comm, int peer, int sig_idx, int ctx, int count);
void br_comm_rma_free(ncclComm_t comm);

/* The calls a round of p2p connection setup serves (br_exec_call_desc): recv_call[p] /
 * send_call[p] the call that needs the receive end from / send end to rank p (nranks
 * entries each), calls[0..ncalls) every call of the round that has a number. A peer that
 * asks for a connection for a call of one of these numbers with other arguments fails the
 * setup, naming both calls. */
typedef struct {
    const br_slot_desc_t *recv_call, *send_call;
    const br_slot_desc_t *calls;
    int ncalls;
} br_p2p_calls_t;

/* Make sure p2p connections exist for the peers flagged (nranks entries each), for calls
 * (NULL: not known). */
ncclResult_t br_comm_connect_p2p(ncclComm_t comm, const char *need_send, const char *need_recv,
                                 const br_p2p_calls_t *calls);

/* Build the graph and connect every channel's ring and tree (comm_channels.c). */
ncclResult_t br_comm_channels_setup(ncclComm_t comm);
/* Connect every channel's ring and tree of the graph already built, and the LL scratch
 * (at init, and again on ncclCommResume). Collective. */
ncclResult_t br_comm_channels_connect(ncclComm_t comm);
/* The node arena (tc->arena and ec->arena) where the ranks allow one (comm_init.c; at
 * init and on ncclCommResume). Collective. */
ncclResult_t br_comm_arena_setup(ncclComm_t comm);

/*
 * Suspending (comm_suspend.c, ncclCommSuspend / ncclCommResume, collective over the
 * communicator as in NCCL). Suspend waits for the device calls made before it, then
 * releases every buffer the communicator's calls run through: the channel and p2p
 * connections (FIFOs in host, shared or registered memory, the proxy and its plugin
 * connections), the node arena, the executor's scratch, and the CUDA executor's device
 * FIFOs or the stager's pinned staging (and its IPC mappings). Resume makes them again
 * from the graph and settings agreed at init. What stays: the bootstrap, the peer table,
 * the graph, the plan, collnet's staging (its plugin communicator lives as long as the
 * communicator), registrations. Both fail with a message naming the rank on bad use.
 */
ncclResult_t br_comm_suspend(ncclComm_t comm);
ncclResult_t br_comm_resume(ncclComm_t comm);
/* Bytes the communicator holds now that a suspend releases (*releasable_p) and keeps
 * (*kept_p), host and device memory together. */
void br_comm_mem_bytes(ncclComm_t comm, uint64_t *releasable_p, uint64_t *kept_p);

/* The plan (cost model facts agreed by every rank, NCCL_ALGO/NCCL_PROTO), the tuner and
 * the profiler plugins (comm_tune.c). */
ncclResult_t br_comm_tune_setup(ncclComm_t comm);

/* The kind of the slowest link between two ranks of one host: BR_HW_NVLINK (p2p),
 * BR_HW_PCI (shared memory) or BR_HW_NET (comm_tune.c). Every rank judges alike. */
int br_comm_intra_hw(const br_transport_comm_t *tc);

/* Init consistency (comm_check.c): the ranks compare the library version, the net and
 * tuner plugins and the parameters that must agree; a difference fails init on every rank
 * with ncclInvalidUsage naming the values and the ranks that have them. */
ncclResult_t br_comm_check_consistency(ncclComm_t comm);
/* Collnet (comm_collnet.c): with NCCL_COLLNET_ENABLE on a communicator of enough hosts,
 * load the net plugin's collnet table and join its collective communicator on every rank,
 * or on none (then comm->ec->collnet stays NULL, with an INFO saying why). Fails only on
 * a bootstrap error. Called by br_comm_tune_setup, before the plan is made. */
ncclResult_t br_comm_collnet_setup(ncclComm_t comm);
void br_comm_collnet_free(ncclComm_t comm);

/* Free everything; with flush, pending network sends finish first (bounded). Only for a
 * communicator no other thread can reach (a failed init); live ones go through
 * br_comm_release. */
void br_comm_free(ncclComm_t comm, int flush);

/* Is comm a live communicator of this process? */
int br_comm_is_live(ncclComm_t comm);

/*
 * Lifetime across threads. A thread that uses a communicator beyond a quick look holds it:
 * br_comm_hold (a live comm only) or br_comm_hold_again (already held), then
 * br_comm_unhold. br_comm_release (ncclCommDestroy, ncclCommAbort) takes it out of the
 * registry, so no new holder can come, revokes it if another thread is using it (their
 * blocked calls fail within ~100 ms), waits for them up to a bound, and drops the
 * registry's reference: whoever drops the last one frees it.
 */
ncclResult_t br_comm_hold(ncclComm_t comm);
void br_comm_hold_again(ncclComm_t comm);
void br_comm_unhold(ncclComm_t comm);
/* A hold by a call queued in an open group: release does not wait for it until
 * br_comm_dequeue (its ncclGroupEnd runs it); then br_comm_unhold. */
void br_comm_hold_queued(ncclComm_t comm);
void br_comm_dequeue(ncclComm_t comm);
/* Threads inside a call on comm, besides the registry's reference (a call queued in an
 * open group does not count). */
int br_comm_busy(ncclComm_t comm);
/* ncclInvalidArgument if comm is no longer live (another thread released it first). */
ncclResult_t br_comm_release(ncclComm_t comm, int flush, const char *fn);
/* Make every call in flight and to come fail with why (ncclCommRevoke, abort). */
void br_comm_revoke(ncclComm_t comm, const char *why);
/* Every live communicator of the process, each held (br_comm_unhold each, free the
 * array): *comms_p gets a malloc'ed array of *n_p entries. */
ncclResult_t br_comm_hold_all(ncclComm_t **comms_p, int *n_p);

/*
 * The state dump (comm_dump.c). attach, when a communicator goes live: its operation log
 * (BRAID_DUMP_OPS), its answer to other ranks' queries, and with BRAID_DUMP the SIGUSR1
 * handler and dump thread of the process (while any communicator is live). detach, when
 * it is released: the last one out stops that thread and puts back the old handler.
 */
ncclResult_t br_comm_dump_attach(ncclComm_t comm);
void br_comm_dump_detach(ncclComm_t comm);
/* Write every live communicator's state, with every peer's (asked live, each bounded by
 * BRAID_DUMP_TIMEOUT), as JSON to path ("-": stderr; NULL: BRAID_DUMP's pattern). trigger
 * says what asked for it. Any thread. */
ncclResult_t br_comm_dump_write(const char *path, const char *trigger);

#endif /* BR_COMM_H_ */
