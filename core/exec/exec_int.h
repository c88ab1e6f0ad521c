/* SPDX-License-Identifier: Apache-2.0 */
/* exec module-private: work items and their step functions. */
#ifndef BR_EXEC_INT_H_
#define BR_EXEC_INT_H_

#include "exec.h"

typedef enum {
    BR_WORK_RING,
    BR_WORK_SEND,
    BR_WORK_RECV,
    BR_WORK_COPY,
    BR_WORK_FLAT
} br_work_kind_t;

struct br_work {
    br_work_kind_t kind;
    br_op_t op;
    int ch;          /* ring channel */
    br_conn_t *conn; /* send/recv: the peer connection */
    /* Ring progress, in units of esize bytes. */
    size_t esize;  /* element size (1 when the data is only moved, not reduced) */
    size_t units;  /* per-rank unit (allgather/reducescatter block, or the buffer) */
    size_t lo, hi; /* this channel's part of the unit */
    size_t slice;  /* most units per FIFO slot */
    size_t base;   /* start of the current iteration */
    size_t chunk;  /* units per chunk in the current iteration */
    int j, nsteps; /* primitive index within the iteration, and their number */
    /* Send/recv progress, in bytes. */
    size_t bytes, off;
    const void *copy_src; /* copy: source (self send) */
    /* One-hop operations through the node arena. */
    uint64_t flat_k; /* the operation's number in the arena */
    int flat_phase;  /* 0: input not published yet, 1: published, reading */
    int flat_next;   /* first rank whose input has not been seen yet */
    int flat_small;  /* the input goes in a small slot */
    int flat_direct; /* single copy: the slot holds the input's address, readers copy from
                      * the owner's memory, and the owner waits for them (phase 2) */
    /* Ring one-shot: every rank's whole input travels the ring (as an AllGather) into
     * `scratch`, then each rank reduces them in rank order. */
    int gather;
    char *scratch;
    int event; /* index in the batch's events, or -1 */
};

/* Do as many steps of w as the FIFOs allow. Returns >0 steps done, 0 if blocked (with
 * q->wait_peer set), <0 on error (recorded in the comm). Sets *done_p when finished. */
int br_work_step(br_exec_queue_t *q, br_work_t *w, int *done_p);

/* Does op run in one hop through the node arena (same answer on every rank)? */
int br_work_flat_fits(const br_exec_comm_t *ec, const br_op_t *op);

/* Of those, is it a single-copy AllGather/Broadcast (inputs read in place)? */
int br_work_flat_direct(const br_exec_comm_t *ec, const br_op_t *op);

/* While w waits at the head of q: has a peer run the same collective by the other path
 * (ring versus node arena), i.e. with different arguments? Records the failure and
 * returns nonzero if so. */
int br_work_probe_mismatch(br_exec_queue_t *q, const br_work_t *w);

/* Initialise the ring state of a collective's work item for channel ch of nch. */
void br_work_ring_init(br_work_t *w, const br_exec_comm_t *ec, int ch, int nch);

#define BR_GATHER_MAX (16 * 1024) /* largest ring one-shot input per rank */

/* Does op run as a ring one-shot (an AllReduce small enough that gathering every input
 * costs fewer hops than reduce-scatter + all-gather; same answer on every rank)? */
int br_work_gather_fits(const br_exec_comm_t *ec, const br_op_t *op);

/* Set w up as a ring one-shot on channel 0, gathering into scratch (nranks inputs). */
void br_work_gather_init(br_work_t *w, const br_exec_comm_t *ec, char *scratch);

#endif /* BR_EXEC_INT_H_ */
