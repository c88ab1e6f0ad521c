/* SPDX-License-Identifier: Apache-2.0 */
/*
 * exec: the host executor. An operation becomes work items queued per connection set:
 * one queue per ring channel (collectives, in call order), one per peer and direction
 * (send/recv), one for local copies. br_exec_run() progresses every queue of every
 * communicator of a group from the calling thread: each step of a work item is one
 * primitive on one FIFO slot (send, recvReduceSend, recvCopySend, ...), taken only when
 * its counters allow, so nothing ever blocks inside a step and a single thread can drive
 * several ranks of one process without deadlock. Waiting spins briefly, then yields, then
 * sleeps; while waiting it checks peer liveness, abort notices and the watchdog.
 */
#ifndef BR_EXEC_H_
#define BR_EXEC_H_

#include <stddef.h>
#include <stdint.h>

#include "exec_reduce.h"
#include "plan.h"
#include "transport.h"

/* What the executor needs of a communicator. */
typedef struct br_exec_comm {
    int rank, nranks;
    int nchannels;
    br_conn_t *ring_send[BR_MAX_CHANNELS]; /* to the ring's next rank */
    br_conn_t *ring_recv[BR_MAX_CHANNELS]; /* from the ring's previous rank */
    int ring_prev, ring_next;
    int ring_pos;                 /* this rank's position on the ring */
    int *ring_rank, *ring_pos_of; /* rank at each position, position of each rank */
    br_conn_t **p2p_send;         /* per peer, made on first use */
    br_conn_t **p2p_recv;
    br_transport_comm_t *tc;
    uint64_t coll_seq;               /* collectives issued */
    uint64_t *send_seq, *recv_seq;   /* messages per peer */
    struct br_exec_batch *solo;      /* reused for operations outside a group */
    br_flat_t *flat;                 /* node arena for one-hop small collectives, or NULL */
    uint64_t flat_seq;               /* operations run through the arena */
    char *gather_scratch;            /* ring one-shot inputs: nranks x BR_GATHER_MAX */
    int has_net;                     /* some connection goes through the proxy */
    int oversubscribed;              /* more ranks on this host than CPU cores */
    int pipeline;                    /* fewest FIFO slots a ring step's data is cut into */
    br_profiler_t *prof;             /* profiler plugin, or NULL */
    uint64_t prof_seq[BR_NUM_FUNCS]; /* per-function counters for its events */
    uint64_t symptom_ns;             /* when a local network symptom was first seen */
    ncclResult_t error;              /* sticky: the first failure */
    char error_msg[1024];
} br_exec_comm_t;

typedef struct br_work br_work_t;

/* An ordered queue of work items that share connections. */
typedef struct {
    br_exec_comm_t *ec;
    int key_type, key_idx; /* which connection set: ring channel, send/recv peer, local */
    br_work_t *items;
    int n, cap, cur;
    int wait_peer;         /* whom the head item last waited for, -1 none */
    const char *wait_what; /* "data from" / "space at" */
} br_exec_queue_t;

/* A profiler event that stops when its last work item finishes. */
typedef struct {
    br_exec_comm_t *ec;
    void *handle;
    int remaining;
} br_exec_event_t;

/* A group's worth of queues across communicators. Queue slots keep their item arrays
 * across br_exec_batch_reset(), so a reused batch allocates nothing. */
typedef struct br_exec_batch {
    br_exec_queue_t *queues;
    int n, cap;
    int ninit;               /* queue slots whose item arrays are initialised */
    br_exec_event_t *events; /* Coll/P2p events, and one GroupApi per profiled comm */
    int nevents, events_cap;
} br_exec_batch_t;

/* Append the work of one operation to the batch (queues are found or created per
 * communicator and connection set). p2p connections must already exist. */
ncclResult_t br_exec_enqueue(br_exec_batch_t *batch, br_exec_comm_t *ec, const br_op_t *op);

/* Append a copy of bytes from src to dst (a send to self matched with its recv). */
ncclResult_t br_exec_enqueue_self(br_exec_batch_t *batch, br_exec_comm_t *ec, const void *src,
                                  void *dst, size_t bytes);

/* Run everything in the batch to completion, or to the first error (which is recorded,
 * sticky, in the failing communicator and announced to its other ranks). */
ncclResult_t br_exec_run(br_exec_batch_t *batch);

/* Free the batch's queues (not the communicators). */
void br_exec_batch_free(br_exec_batch_t *batch);

/* Empty the batch for reuse, keeping its memory (open profiler events are stopped). */
void br_exec_batch_reset(br_exec_batch_t *batch);

/* Run one operation outside any group on its communicator's reusable batch: the path
 * of a lone ncclAllReduce, which allocates nothing once the batch has grown. */
ncclResult_t br_exec_run_solo(br_exec_comm_t *ec, const br_op_t *op);

/* Record a failure on the communicator (first one wins) and WARN it. */
void br_exec_fail(br_exec_comm_t *ec, ncclResult_t res, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* BR_EXEC_H_ */
