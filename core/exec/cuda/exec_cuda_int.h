/* SPDX-License-Identifier: Apache-2.0 */
/* exec module-private: the CUDA executor's clique, its queues and its launches. */
#ifndef BR_EXEC_CUDA_INT_H_
#define BR_EXEC_CUDA_INT_H_

#include <pthread.h>

#include "dev_direct.h"
#include "dev_work.h"
#include "exec.h"
#include "util_cuda.h"

#define BR_CUDA_QUEUE 8 /* device calls (deposits) a rank may have waiting for a launch */
#define BR_CUDA_MAX_DEVS 16
#define BR_CUDA_DESC_BUFS 8 /* launches whose descriptors may be in flight at once */

/* One rank's device calls of one group (or one lone call): a deposit. */
typedef struct {
    br_op_t *ops;
    int nops, cap;
    int has_coll; /* holds collectives: launched with every rank's next deposit */
    br_cu_stream_t stream;
    uint64_t since_ns; /* when it was deposited */
} br_cuda_dep_t;

/* A rank's deposits, in call order: tickets launched <= t < next are waiting. */
typedef struct {
    br_cuda_dep_t q[BR_CUDA_QUEUE];      /* ticket t in q[t % BR_CUDA_QUEUE] */
    br_cu_event_t arrive[BR_CUDA_QUEUE]; /* recorded on the rank's stream at the deposit */
    br_cu_event_t done[BR_CUDA_QUEUE];   /* recorded on the launch stream after its unit */
    uint64_t next;                       /* tickets handed out */
    uint64_t launched;                   /* tickets launched (read without cl->mu too) */
} br_cuda_rank_t;

typedef struct {
    int ordinal;
    br_cu_context_t ctx;
    br_cu_module_t mod;
    br_cu_function_t fn;
    br_cu_function_t direct_fn; /* the direct kernel (dev_direct.h) */
    int sms;
    br_cu_stream_t stream;  /* launch stream */
    br_cu_event_t finished; /* after its kernel (the first device's stream waits on it) */
    int capacity;           /* blocks of the kernel resident at once */
    br_cu_ptr_t claim_d;    /* in its memory: the word its FIFO kernels' first failure claims */
} br_cuda_dev_t;

/* Descriptors of one launch: pinned, mapped, read by its kernels until `done` fires. */
typedef struct {
    char *h;
    br_cu_ptr_t d;
    size_t cap;
    br_cu_event_t done;
    int used;          /* done was recorded at least once */
    uint64_t since_ns; /* when it was last launched (0: seen finished) */
    char what[96];     /* the launch's first call, for messages */
} br_cuda_desc_t;

/* A set of FIFOs: one per connection (channel, from, to) of the clique. */
typedef struct {
    br_cu_ptr_t conn_d; /* br_dev_conn_t[nconn] in device memory */
    br_cu_ptr_t *mem;   /* per connection: its buffer and counters */
} br_cuda_fifos_t;

/* What a launch captured into a CUDA graph uses, kept until the clique ends: its own
 * FIFOs (a graph replays whenever its owner launches it, so it may not share FIFOs with
 * launches made by calls) and its descriptors. */
typedef struct br_cuda_kept {
    br_cuda_fifos_t fifos;
    void *desc; /* pinned, mapped */
    br_cu_event_t finished;
    struct br_cuda_kept *next;
} br_cuda_kept_t;

/* Host-mapped words the kernels share with the host. */
typedef struct {
    uint32_t abort_flag; /* nonzero: kernels stop waiting */
    uint32_t stop;       /* nonzero: a block of some device failed (every device's stop) */
    br_dev_report_t report[BR_CUDA_MAX_DEVS]; /* per device of the clique (devs[] index) */
} br_cuda_flags_t;

struct br_cuda_clique {
    uint64_t hash;
    int nranks, refs;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    br_exec_comm_t **ec; /* [nranks] */
    int *rank_dev;       /* [nranks]: index into devs */
    br_cuda_dev_t devs[BR_CUDA_MAX_DEVS];
    int ndevs;
    br_cuda_rank_t *rank; /* [nranks] */
    /* Set up by the first deposit. */
    int setup_done;
    ncclResult_t setup_res;
    int nch;           /* channels a device collective may use */
    br_graph_t *graph; /* nch channels over the clique's ranks */
    int nconn;
    int *conn_key;         /* [nconn * 3]: channel, from, to */
    br_cuda_fifos_t fifos; /* the FIFOs of launches made by calls */
    br_cuda_kept_t *kept;  /* what captured launches use, for the communicator's life */
    br_cu_ptr_t ring_d;    /* int32 ring orders, nch x nranks */
    size_t slot_bytes;
    br_cuda_flags_t *flags; /* pinned, mapped */
    br_cu_ptr_t flags_d;
    br_cuda_desc_t desc[BR_CUDA_DESC_BUFS];
    int desc_next;
    /* Failure (sticky): no more launches, every waiting stream released. */
    int failed;
    char fail_msg[768];
    uint64_t report_seen_ns; /* when the host first saw a device's report (0: none yet) */
    /* The watchdog: reports calls whose peers never come, and kernel failures, even when
     * every thread of the program waits on a stream. */
    pthread_t watchdog;
    int watchdog_started, stop;
    br_clique_t *next_in_registry;
};

/* The deposit at the head of rank r's queue, or NULL. */
static inline br_cuda_dep_t *br_cuda_head(br_clique_t *cl, int r)
{
    br_cuda_rank_t *q = &cl->rank[r];
    return q->launched < q->next ? &q->q[q->launched % BR_CUDA_QUEUE] : NULL;
}

/* A launch under construction: one list of blocks and work items per device. */
typedef struct {
    br_dev_block_t *blocks;
    br_dev_work_t *works;
    int nblocks, nworks, cap_blocks, cap_works;
    int nwaiting;          /* blocks that may wait for other blocks (collectives): these
                            * must all be resident at once */
    br_dev_work_t *copies; /* copies, spread over a few blocks at the end (they never wait,
                            * so they need no room of their own) */
    int ncopies, cap_copies;
} br_cuda_build_t;

/* exec_cuda.c, for exec_cuda_capture.c. Callers hold cl->mu except for the capture mode. */
/* Relaxed stream-capture mode for this thread while it allocates; returns the mode to give
 * back to br_cuda_capture_restore. */
int br_cuda_capture_relax(const br_cuda_t *cu);
void br_cuda_capture_restore(const br_cuda_t *cu, int mode);
/* The clique's setup and watchdog, at its first device call (a failure fails the clique). */
void br_cuda_ensure_setup(br_clique_t *cl, int rank);
/* Rank r's next deposit: ops (one stream) and the event that says its stream reached them. */
ncclResult_t br_cuda_dep_add(br_clique_t *cl, int r, const br_op_t *ops, int nops);
/* Is every rank's next deposit a collective one (in_unit: all ranks)? Or, from rank a, a
 * set of send/recv-only next deposits that pair up among themselves (in_unit: which;
 * stack: room for nranks)? */
/* Shared by exec_cuda.c and exec_cuda_unit.c: the host-side wait limit
 * (BRAID_CUDA_WAIT_TIMEOUT, ns); fail every rank of the clique (sticky; caller holds cl->mu);
 * launch every complete unit (exec_cuda_unit.c; caller holds cl->mu). */
uint64_t br_cuda_wait_limit_ns(void);
void br_cuda_clique_fail(br_clique_t *cl, ncclResult_t res, const char *msg);
ncclResult_t br_cuda_launch_ready(br_clique_t *cl, int rank);
int br_cuda_unit_collective(br_clique_t *cl, char *in_unit);
int br_cuda_unit_p2p(br_clique_t *cl, int a, char *in_unit, int *stack);
/* The words of a launch on the clique's device dev (devs[] index) shared with the host:
 * abort, timeout, stop, and that device's own failure claim and report. */
void br_cuda_launch_words(const br_clique_t *cl, int dev, br_dev_launch_t *L);
/* Build b's blocks and works into descriptor memory (host view h, device view d) from
 * offset `at` on, each 128-byte aligned, and L pointed at them with the words of a launch
 * on device dev; returns the offset after them. */
size_t br_cuda_desc_fill(const br_clique_t *cl, int dev, char *h, br_cu_ptr_t d, size_t at,
                         const br_cuda_build_t *b, br_dev_launch_t *L);
/* The room br_cuda_desc_fill needs for b, alignment included. */
static inline size_t br_cuda_desc_bytes(const br_cuda_build_t *b)
{
    return 256 + (size_t)b->nblocks * sizeof(br_dev_block_t) +
           (size_t)b->nworks * sizeof(br_dev_work_t);
}

/* exec_cuda.c: a descriptor buffer of at least `bytes` whose last launch has finished; the
 * unit's ranks' done events after its kernels (the first device's launch stream). Callers
 * hold cl->mu. */
ncclResult_t br_cuda_desc_get(br_clique_t *cl, size_t bytes, int rank, br_cuda_desc_t **out);
ncclResult_t br_cuda_unit_done_events(br_clique_t *cl, const char *in_unit, int rank,
                                      br_cuda_desc_t *desc);

/* exec_cuda_direct.c: does the unit fit the direct kernel (every rank on one device,
 * collectives it runs that agree across ranks, BRAID_CUDA_DIRECT)? And the unit on it:
 * after every rank's call was reached, one launch per collective, then the done events.
 * Callers hold cl->mu. */
int br_cuda_direct_fits(const br_clique_t *cl, const char *in_unit);
ncclResult_t br_cuda_direct_unit(br_clique_t *cl, const char *in_unit, int rank);
/* exec_cuda_direct.c: does the unit hold a reduction that must fold as the host does
 * (br_op_owner_fold), which only the direct kernel can run? */
int br_cuda_unit_folds(const br_clique_t *cl, const char *in_unit);

/* exec_cuda_setup.c: contexts, kernels, FIFOs, flags, events (once per clique). */
ncclResult_t br_cuda_setup(br_clique_t *cl, int rank);
/* A set of FIFOs for every connection, zeroed; and its release. */
/* Device bytes of one FIFO: the slots, then tail, head and descriptors. */
size_t br_cuda_fifo_bytes(const br_clique_t *cl);
ncclResult_t br_cuda_fifos_alloc(br_clique_t *cl, br_cuda_fifos_t *f, int rank);
void br_cuda_fifos_free(br_clique_t *cl, br_cuda_fifos_t *f);
/* A captured launch's own FIFOs, descriptors and event (NULL: nothing). */
void br_cuda_kept_free(br_clique_t *cl, br_cuda_kept_t *k);
void br_cuda_teardown(br_clique_t *cl);
/* Index of the connection (channel c, from -> to) among cl->conn_key, or -1. */
int br_cuda_conn_index(const br_clique_t *cl, int c, int from, int to);
ncclResult_t br_cuda_check(br_cu_result_t e, const char *what, int rank);

/* exec_cuda_build.c: the work of a unit (in_unit[r]: rank r's head deposit is part of it),
 * per device. Collectives of every rank's head (all ranks must be in the unit), then the
 * sends and receives among the unit's heads as copies. A mismatch across ranks returns
 * ncclInvalidUsage with msg. */
ncclResult_t br_cuda_build(br_clique_t *cl, const char *in_unit, br_cu_ptr_t conn_d,
                           br_cuda_build_t *per_dev, char *msg, size_t len);
/* Blocks that hold the copies of a device's build: a quarter of what it holds resident. */
#define BR_CUDA_COPY_BLOCKS(capacity) ((capacity) / 4 > 0 ? (capacity) / 4 : 1)
void br_cuda_build_free(br_cuda_build_t *per_dev);
/* "AllReduce #3 (count 1024, float32, sum, root 0)", "Send to rank 2 (4096 bytes)". */
void br_cuda_op_describe(char *buf, size_t len, const br_op_t *op);

#endif /* BR_EXEC_CUDA_INT_H_ */
