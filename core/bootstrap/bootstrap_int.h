/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bootstrap internals shared by bootstrap_root.c (unique id, root thread),
 * bootstrap_init.c (joining, ring collectives, teardown) and bootstrap_p2p.c (background
 * thread, unexpected queue, send/recv, abort). Wire structs are sent as raw bytes in host
 * byte order (all ranks run the same build); each one has a fixed, asserted size.
 */
#ifndef BR_BOOTSTRAP_INT_H_
#define BR_BOOTSTRAP_INT_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "bootstrap.h"
#include "util.h"
#include "util_socket.h"

/* First field of every unique id made here: "BraidId1" read as little-endian bytes. */
#define BR_BOOT_ID_MAGIC 0x3164496469617242ull
/* Wire protocol version, checked at every hello. */
#define BR_BOOT_PROTO 4u
/* The id was made from NCCL_COMM_ID: rank 0 starts the root inside init. */
#define BR_BOOT_FLAG_COMM_ID 0x1u
#define BR_BOOT_FLAGS_KNOWN BR_BOOT_FLAG_COMM_ID

#define BR_BOOT_HOST_LEN 64
#define BR_BOOT_MSG_LEN 512
#define BR_BOOT_REASON_LEN 1024
/* Largest out-of-band message accepted; anything bigger is a corrupt stream. */
#define BR_BOOT_MAX_MSG (1ull << 30)
/* Allgather partners a rank is told of: rank - 2^k for 2^k < nranks (nranks < 2^31). */
#define BR_BOOT_HOPS 31
/* Extra time a rank gives the root beyond the root's own deadline, for its answer. */
#define BR_BOOT_ANSWER_GRACE_NS (2ull * 1000000000ull)
/* The secret of an NCCL_COMM_ID handle: from the address and the job's identity ("NAME=value"
 * of BRAID_COMM_SECRET or the launcher's job id; NULL when there is none). */
uint64_t br_boot_comm_id_secret(const char *comm_id, const char *job);

/* A unique id's root refusing connections this long in a row is gone. */
#define BR_BOOT_REFUSED_NS (2ull * 1000000000ull)

/* The front of the 128-byte ncclUniqueId; the remaining bytes are zero. */
typedef struct {
    uint64_t magic;        /* BR_BOOT_ID_MAGIC */
    uint64_t secret;       /* random, never zero; every connection presents it */
    br_socket_addr_t root; /* where the root listens (28 bytes) */
    uint32_t flags;        /* BR_BOOT_FLAG_* */
} br_boot_handle_t;

/* Rank -> root, once, on the rank's connection to the root. */
typedef struct {
    uint64_t secret;
    uint32_t proto;
    int32_t rank;
    int32_t nranks;
    int32_t pid;
    br_socket_addr_t addr; /* the rank's listener */
    char host[BR_BOOT_HOST_LEN];
    uint64_t shm_key; /* br_shm_key(): ranks with equal keys share /dev/shm */
    uint64_t pid_ns;  /* its pid namespace (br_pid_ns) */
    int32_t shm;      /* BRAID_BOOTSTRAP_SHM */
    int32_t pad;
} br_boot_checkin_t;

/* Root -> rank, once every rank has checked in (or when the init has failed). */
typedef struct {
    uint64_t secret;
    int32_t res; /* ncclSuccess, or the error every rank returns */
    int32_t pad;
    br_socket_addr_t next; /* ring successor's listener */
    br_socket_addr_t prev; /* ring predecessor's listener */
    char msg[BR_BOOT_MSG_LEN];
    /* hop[k]: the listener of rank hop_rank[k], whom the first allgather's round k sends
     * to, and from_rank[k] the rank it receives from then (bootstrap_init.c). Over
     * sockets: ranks (rank -/+ 2^k) mod nranks, for 2^k < nranks. Through host memory
     * (hier): for a host's leader, the leaders of the hosts 2^k before and after its own
     * (hosts ordered by their leaders' ranks), for 2^k < nnodes; none for the others. */
    br_socket_addr_t hop[BR_BOOT_HOPS];
    uint32_t pad2;
    int32_t hop_rank[BR_BOOT_HOPS];
    int32_t from_rank[BR_BOOT_HOPS];
    /* Allgathers through host memory (every rank has BRAID_BOOTSTRAP_SHM and some host
     * holds several ranks): 1, and this rank's host as the root grouped them by shm_key
     * (a "host" here is the ranks that share one /dev/shm):
     * its leader (lowest rank), the leader's pid, the host's rank count, this rank's index
     * among them (by rank), the host count and this host's index (by leader rank). */
    int32_t hier;
    int32_t leader;
    int32_t leader_pid;
    int32_t nlocal;
    int32_t lidx;
    int32_t nnodes;
    int32_t node;
    int32_t pad3;
    uint64_t leader_pid_ns;
    uint64_t nonce; /* random per init: tells this init's host segments from a stale one's */
} br_boot_answer_t;

/* Root -> a host's leader, after its answer when nlocal > 1: one per rank of its host, by
 * index there, so that the leader can tell a rank that died before it mapped the host's
 * segment from one that is merely slow. */
typedef struct {
    int32_t rank;
    int32_t pid;
    uint64_t pid_ns;
} br_boot_local_t;

/* Kinds of connection to a rank's listener. */
enum { BR_BOOT_CONN_MSG = 1, BR_BOOT_CONN_ABORT = 2, BR_BOOT_CONN_QUERY = 3 };

/* First bytes of every connection to a rank's listener. */
typedef struct {
    uint64_t secret;
    uint32_t proto;
    int32_t rank;  /* sender */
    uint32_t conn; /* BR_BOOT_CONN_* */
    uint32_t pad;
} br_boot_hello_t;

/* Kinds of message; each has its own tag space. */
enum {
    BR_BOOT_MSG_USER = 1,
    BR_BOOT_MSG_RING = 2,
    BR_BOOT_MSG_ABORT = 3,
    BR_BOOT_MSG_STATE = 4,
    BR_BOOT_MSG_WAIT = 5,
    BR_BOOT_MSG_RECOVER = 6,
    BR_BOOT_MSG_LINK = 7 /* to the link handler (br_bootstrap_set_link_fn), never queued */
};

/* A recovery message (br_bootstrap_send_recovery): numbered, and kept apart from the
 * message queues, which a failed communicator no longer reads. */
typedef struct {
    uint32_t seq;
    uint32_t size;
    char data[BR_BOOT_RECOVER_MAX];
} br_boot_recover_t;

/* A wait notice: what a blocked rank waits in (br_bootstrap_post_wait). */
typedef struct {
    uint64_t key;                         /* the operation, as the caller numbers it; 0: none */
    int32_t wait_peer[BR_BOOT_WAIT_SLOTS]; /* per slot (channel): the rank it waits for, or -1 */
    char what[BR_BOOT_REASON_LEN];
} br_boot_wait_t;

/* Header of every message after the hello. */
typedef struct {
    uint32_t kind;
    int32_t tag;
    uint64_t size;
} br_boot_frame_t;

/* What the first allgather exchanges about each rank. */
typedef struct {
    br_socket_addr_t addr;
    int32_t pid;
    char host[BR_BOOT_HOST_LEN];
    uint64_t shm_key; /* br_shm_key(): ranks with equal keys share /dev/shm */
    uint64_t pid_key; /* machine and pid namespace: equal keys, pids mean the same */
} br_boot_peer_t;

_Static_assert(sizeof(br_boot_handle_t) <= NCCL_UNIQUE_ID_BYTES, "unique id too small");
_Static_assert(sizeof(br_boot_handle_t) == 48, "handle layout");
_Static_assert(sizeof(br_boot_checkin_t) == 144, "checkin layout");
_Static_assert(sizeof(br_boot_answer_t) == 584 + BR_BOOT_HOPS * (28 + 8) + 4 + 48, "answer layout");
_Static_assert(sizeof(br_boot_hello_t) == 24, "hello layout");
_Static_assert(sizeof(br_boot_frame_t) == 16, "frame layout");
_Static_assert(sizeof(br_boot_peer_t) == 112, "peer layout");
_Static_assert(sizeof(br_boot_local_t) == 16, "local rank layout");

/* A received message waiting in a peer's unexpected queue. */
typedef struct br_boot_msg br_boot_msg_t;
struct br_boot_msg {
    struct br_boot_msg *next;
    uint32_t kind;
    int32_t tag;
    size_t size;
    char data[];
};

/* One peer as seen by this rank. */
typedef struct {
    br_boot_peer_t info;      /* listener, host, pid (ring neighbours first, all after init) */
    pthread_mutex_t out_lock; /* serializes connecting and writing frames to this peer */
    int out_fd;               /* persistent connection to the peer, -1 until first use */
    /* The fields below are under boot->lock. */
    br_boot_msg_t *head, *tail; /* unexpected queue, in arrival order */
    int in_open;                /* the peer's message connection said hello */
    int in_closed;              /* ... and has since closed */
    /* The peer's latest wait notice and recovery message, NULL until the first comes
     * (in the data of the message that brought it, *_msg, freed with the queues): a
     * thousand peers' worth of them would be 600 KB a rank, nearly all never used. */
    br_boot_wait_t *wait;
    br_boot_recover_t *recover;
    br_boot_msg_t *wait_msg, *recover_msg;
} br_boot_rank_t;

/* A connection accepted by the background thread (owned by that thread). */
typedef struct {
    int fd;
    br_socket_addr_t from;
    int state;         /* reading the hello, a frame header, or a payload */
    size_t got;        /* bytes of the current part read so far */
    uint64_t deadline; /* for the hello */
    br_boot_hello_t hello;
    br_boot_frame_t frame;
    br_boot_msg_t *msg; /* payload being read */
} br_boot_inconn_t;

/* Allgathers through each host's shared memory (bootstrap_shm.c). */
typedef struct br_boot_hier br_boot_hier_t;

struct br_bootstrap {
    int rank;
    int nranks;
    uint64_t secret;
    uint64_t timeout_ns;
    int listen_fd;
    br_socket_addr_t listen_addr;
    br_boot_rank_t *peers; /* nranks entries */
    int coll_seq;          /* tag of the next ring collective (one caller thread) */
    int wake_fd[2];        /* close() wakes the background thread through this pipe */
    pthread_t thread;
    int thread_started;
    br_boot_inconn_t *in; /* background thread only */
    int nin;
    int in_cap;
    /* Under lock: */
    pthread_mutex_t lock;
    pthread_cond_t cond; /* a message, a hello, a close or an abort arrived */
    /* Messages in the peers' queues; read without the lock for a cheap first look. */
    _Atomic int queued;
    int stop;
    int thread_failed;
    int abort_from;
    char abort_reason[BR_BOOT_REASON_LEN];
    int cancelled; /* br_bootstrap_cancel: every wait ends with cancel_reason */
    char cancel_reason[BR_BOOT_REASON_LEN];
    /* Set (release) after abort_from/abort_reason are written, so poll_abort may read it
     * without the lock. */
    _Atomic int aborted;
    /* Under lock: what answers a state query (br_bootstrap_set_state_fn), or NULL. */
    br_bootstrap_state_fn_t state_fn;
    void *state_arg;
    /* What receives link messages (br_bootstrap_set_link_fn), or NULL; link_lock is held
     * while it runs, so clearing it waits for a call in progress. */
    pthread_mutex_t link_lock;
    br_bootstrap_link_fn_t link_fn;
    void *link_arg;
    /* Set at the end of init when allgathers go through hosts' shared memory; NULL: the
     * sockets' log2(n) rounds (one rank per host, one rank, or BRAID_BOOTSTRAP_SHM=0). */
    br_boot_hier_t *hier;
};

/* Timeout in nanoseconds, and in seconds for messages (BRAID_BOOTSTRAP_TIMEOUT). */
uint64_t br_boot_timeout_ns(void);
int br_boot_timeout_s(void);

/* Decode an id without logging; 0 when it looks like one of ours. */
int br_boot_handle_decode(const ncclUniqueId *id, br_boot_handle_t *h_p, char *why, size_t len);

/* Start a detached root thread that owns listen_fd and serves one init. wait_first_ns
 * bounds the wait for the first rank. */
ncclResult_t br_boot_root_start(int listen_fd, const br_socket_addr_t *addr, uint64_t secret,
                                uint64_t wait_first_ns);

/* Background thread of one bootstrap. */
ncclResult_t br_boot_thread_start(br_bootstrap_t *boot);
void br_boot_thread_stop(br_bootstrap_t *boot);

/* Message plumbing used by the ring collectives. */
ncclResult_t br_boot_send_msg(br_bootstrap_t *boot, int peer, uint32_t kind, int tag,
                              const void *data, size_t size);
ncclResult_t br_boot_recv_msg(br_bootstrap_t *boot, int peer, uint32_t kind, int tag, void *data,
                              size_t size, uint64_t deadline_ns);
/* The same for a message of any size: *msg_p (the caller frees it) has it in data[size]. */
ncclResult_t br_boot_recv_msg_any(br_bootstrap_t *boot, int peer, uint32_t kind, int tag,
                                  br_boot_msg_t **msg_p, uint64_t deadline_ns);
/* Open the persistent connection to a peer now (the ring at init). */
ncclResult_t br_boot_connect_peer(br_bootstrap_t *boot, int peer, uint64_t deadline_ns);
/* A deadline (br_time_ns) as the timespec of pthread_cond_timedwait. */
void br_boot_deadline_to_ts(uint64_t deadline_ns, struct timespec *ts);
/* Wait until a peer's message connection has said hello. */
ncclResult_t br_boot_wait_hello(br_bootstrap_t *boot, int peer, uint64_t deadline_ns);
/* Why a wait for peer has to end now (abort, cancel, its connection closed), or
 * ncclSuccess; why gets the reason. Called with boot->lock held. */
ncclResult_t br_boot_wait_blocked(br_bootstrap_t *boot, int peer, char *why, size_t len);

/* This rank's entry of the peer table. */
void br_boot_peer_fill(br_bootstrap_t *boot, br_boot_peer_t *me);
/* With the root's host grouping (ans->hier): map this host's segment (collective over the
 * host; fails naming the rank, and tells every rank, when it cannot). local: for the
 * host's leader, its ranks (ans->nlocal entries, from the root), else NULL. */
ncclResult_t br_boot_hier_open(br_bootstrap_t *boot, const br_boot_answer_t *ans,
                               const br_boot_local_t *local);

/* The first allgather through it (the peer table), between leaders the root named. */
ncclResult_t br_boot_hier_first(br_bootstrap_t *boot, void *data, size_t size, int tag);
/* Once the peer table is in: every host's ranks, as the later allgathers need them. */
ncclResult_t br_boot_hier_group(br_bootstrap_t *boot);
/* The allgather through it (boot->hier set, nranks > 1, size > 0); tag numbers the call. */
ncclResult_t br_boot_hier_allgather(br_bootstrap_t *boot, void *data, size_t size, int tag);
/* Wake this process's waiters in it, so they see an abort or cancel now. */
void br_boot_hier_kick(br_bootstrap_t *boot);
void br_boot_hier_free(br_bootstrap_t *boot);

/* The unexpected queues (bootstrap_queue.c): append a message to a peer's queue and wake
 * the waiters; unlink the oldest of (kind, tag) from a peer's queue, NULL when none (called
 * with boot->lock held); free them all. */
void br_boot_queue_push(br_bootstrap_t *boot, int peer, br_boot_msg_t *msg);
br_boot_msg_t *br_boot_queue_take(br_bootstrap_t *boot, br_boot_rank_t *p, uint32_t kind,
                                  int tag);
void br_boot_queues_free(br_bootstrap_t *boot);

/* The background thread got a state query on c's socket: answer it (bounded), then the
 * connection closes. */
void br_boot_query_serve(br_bootstrap_t *boot, int fd, int from);

/* Describe a rank for messages: "rank 3 (host h, pid 12)". */
const char *br_boot_rank_str(const br_bootstrap_t *boot, int rank, char *buf, size_t len);

#endif /* BR_BOOTSTRAP_INT_H_ */
