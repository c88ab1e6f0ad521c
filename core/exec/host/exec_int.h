/* SPDX-License-Identifier: Apache-2.0 */
/* exec module-private: work items, their step functions, and the call descriptor. */
#ifndef BR_EXEC_INT_H_
#define BR_EXEC_INT_H_

#include "exec.h"
#include "util.h"

typedef enum {
    BR_WORK_SCHED, /* a Ring or Tree schedule (RingOneShot included) on one channel */
    BR_WORK_SEND,
    BR_WORK_RECV,
    BR_WORK_COPY,
    BR_WORK_ARENA,   /* OneShot or DirectRead through the node arena */
    BR_WORK_COLLNET, /* CollNet AllReduce / AllGather / ReduceScatter through the collnet plugin */
    BR_WORK_VFOLD    /* ReduceScatterV: fold every rank's block, in rank order, once all arrived */
} br_work_kind_t;

/* What the work items of one ReduceScatterV share: its receives count down `left`, and
 * its fold runs when it is 0. srcs[p] is where rank p's block is: in scratch for the
 * others (received), this rank's own in its send buffer. Owned by the batch
 * (br_exec_batch_t.owned). Only the batch's thread touches it. */
typedef struct br_vstate {
    int left;
    const void **srcs;
} br_vstate_t;

/* Progress of one stream of a schedule. */
typedef struct {
    size_t base;  /* start of the current iteration, in units */
    size_t chunk; /* units per chunk of that iteration (0: not begun) */
    int j;        /* next step of the iteration */
    int nsteps;   /* steps per iteration (0: nothing for this rank in the stream) */
} br_stream_t;

struct br_work {
    br_work_kind_t kind;
    br_op_t op;
    int ch;               /* channel (SCHED) */
    br_conn_t *conn;      /* send/recv: the peer connection */
    br_sched_t sched;     /* SCHED: who this rank is in the ring or tree */
    br_plan_layout_t lay; /* SCHED: the channel's part of the data */
    br_stream_t st[2];
    char *scratch; /* RingOneShot: where the inputs are gathered */
    /* Send/recv/copy progress, in bytes. */
    size_t bytes, off;
    int userbuf;          /* send/recv over net: the proxy moves the user's buffer itself
                           * (recv: 1 until the sender's descriptor step is checked, then 2) */
    uint64_t userbuf_end; /* send: the step head must reach before the buffer is free */
    /* SCHED over net: a Ring collective whose final data moves from and into user
     * buffers on the connections that agreed to (exec_sched.c, "user buffers"). */
    int ub;                /* this work item may */
    int ub_hdr;            /* 1: its descriptor step sent; 2: the sender's one checked */
    br_conn_t *ub_sc;      /* the send connection of its user-buffer steps */
    uint64_t ub_send_end;  /* the step head must reach there before the buffers are free */
    const void *copy_src;  /* copy: source (self send; a v-collective's own block) */
    /* A v-collective's part for one peer (exec_engine.c, enqueue_v). */
    int vhdr;          /* its count is 0: one step with the descriptor alone */
    br_vstate_t *vst;  /* ReduceScatterV: the state its receives and fold share */
    uint8_t *a2av_got; /* AlltoAllV through the arena: 1 per owner whose block we copied
                        * (owned by the batch) */
    /* Node arena. */
    uint64_t arena_k;  /* the operation's number in the arena */
    int arena_phase;   /* 0: input not published, 1: published, reading; 2: waiting for
                        * readers of our input (DirectRead); 3: only the deferred checks
                        * of earlier root Broadcasts (br_exec_defer_settle); 4: reading
                        * the others' reduced parts (DirectRead AllReduce); 5: this rank
                        * failed, withdrawn, waiting until no peer copies from or into its
                        * buffers; 6: that wait is over */
    int arena_next;    /* first rank whose input (or done) has not been seen yet */
    int arena_small;   /* the input goes in a small slot */
    int arena_defer;   /* a OneShot Broadcast's root: other ranks checked after it returns */
    /* A OneShot Broadcast or AllGather larger than an arena buffer moves in chunks of a
     * buffer each, chunk j as arena operation arena_k + j (exec_arena.c); a DirectRead
     * AllReduce takes two numbers. */
    uint64_t arena_nchunk; /* chunks (1: not cut), or arena numbers taken */
    uint64_t arena_pub;    /* chunks of this rank's input published */
    uint64_t arena_rd;     /* chunks read (or, for a Broadcast root, checked) */
    int event;         /* index in the batch's events, or -1 */
    void *kch;         /* its KernelCh event while it runs, or NULL */
    int kch_started;   /* br_exec_prof_work_start ran for it */
    /* Its kernel phases (profiler v7), stamped while it runs when asked for: started,
     * first and last step that moved data (0: none yet). */
    int phases;
    uint64_t ph_start, ph_first, ph_last;
    /* Collnet: chunks of the staging buffers' size, posted and finished in order. */
    size_t cn_next;                    /* next chunk to post */
    size_t cn_done;                    /* chunks whose result was copied out */
    size_t cn_chunk[BR_COLLNET_NBUF];  /* the chunk in each staging pair */
    void *cn_req[BR_COLLNET_NBUF];     /* its request, NULL when the pair is free */
    int cn_staged[BR_COLLNET_NBUF];    /* copied in, not yet accepted by the plugin */
};

/* Do as many steps of w as the FIFOs allow. Returns >0 steps done, 0 if blocked (with
 * q->wait_peer set), <0 on error (recorded in the comm). Sets *done_p when finished. */
int br_work_step(br_exec_queue_t *q, br_work_t *w, int *done_p);

/* Set up a SCHED work item of op on channel c (scratch: RingOneShot's gather buffer).
 * Returns 0 when this channel has no data. */
int br_work_sched_init(br_work_t *w, const br_exec_comm_t *ec, int c, char *scratch);
/* Announce to the receive connections the slots the work item will take from each. */
ncclResult_t br_work_sched_expect(const br_exec_comm_t *ec, const br_work_t *w);

/* The user-buffer paths' first step on a connection: send, or take and check, the call's
 * descriptor with no payload (exec_work.c). 1 done, 0 blocked (q says on whom), -1 a
 * mismatch (recorded in the comm). */
int br_work_desc_send(br_exec_queue_t *q, const br_work_t *w, br_conn_t *c);
int br_work_desc_recv(br_exec_queue_t *q, const br_work_t *w, br_conn_t *c);

/* Steps of the kinds (exec_sched.c, exec_arena.c, exec_work.c). */
int br_work_sched(br_exec_queue_t *q, br_work_t *w, int *done_p);
int br_work_arena(br_exec_queue_t *q, br_work_t *w, int *done_p);

/* DirectRead: what a rank publishes of one of its buffers (its address and, in
 * ncclMemAlloc memory, where peers of other processes can map it; exec_arena.c). */
void br_exec_publish_buf(br_arena_buf_t *b, const void *buf, size_t bytes);
/* DirectRead: a copy `how` ("reading", "writing") rank r's buffer `theirs` failed after
 * `done` of `bytes` with errno err; record it in ec naming both ranks and buffers. */
void br_exec_peer_copy_failed(br_exec_comm_t *ec, const br_work_t *w, int r, const char *how,
                              const void *theirs, const void *ours, size_t done, size_t bytes,
                              int err);

/* A peer and the node arena, for w (exec_arena.c): has rank r failed or closed its arena?
 * 0 no, -1 yes (recorded in ec, naming it). Does its publication of w's operation
 * (`small`: in a small slot) still stand, right before a copy from or into its memory? 0
 * yes, -1 it failed (recorded). Has r stopped for good (failed, or with `dead` its process
 * is gone: a system call)? */
int br_exec_arena_gone(br_exec_comm_t *ec, const br_work_t *w, int r);
int br_exec_arena_present(br_exec_comm_t *ec, const br_work_t *w, int r, int small);
int br_exec_arena_stopped(const br_exec_comm_t *ec, int r, int dead);
/* This rank failed with w in flight on its arena queue (exec_arena.c, "A failed rank's
 * operation"): may peers copy from or into w's buffers in place (published, not
 * finished)? Then withdraw it, and settle: 1 once no peer can, 0 waiting (q says for
 * whom; with `dead`, peers whose process is gone count as stopped). */
int br_work_arena_exposed(const br_work_t *w);
void br_work_arena_withdraw(br_exec_comm_t *ec, br_work_t *w);
int br_work_arena_settle(br_exec_queue_t *q, br_work_t *w, int dead);

/* AlltoAllV through the node arena (exec_a2av.c): may op run that way here (the same
 * answer on every rank), and its steps (called by br_work_arena). */
int br_work_a2av_takes(const br_exec_comm_t *ec, const br_op_t *op);
/* Does its block of `bytes` between this rank and peer go over their p2p connection
 * instead (a large block between processes: BRAID_ALLTOALLV_READ_MAX_BYTES)? */
int br_work_a2av_fifo(const br_exec_comm_t *ec, int peer, size_t bytes);
int br_work_a2av(br_exec_queue_t *q, br_work_t *w, int *done_p);
/* Its part of br_work_arena_settle. */
int br_work_a2av_settle(br_exec_queue_t *q, br_work_t *w, int dead);

/* Arena operation numbers op takes: one, or one per chunk for a OneShot Broadcast or
 * AllGather larger than an arena buffer. Every rank computes the same. */
uint64_t br_work_arena_chunks(const br_exec_comm_t *ec, const br_op_t *op);
int br_work_collnet(br_exec_queue_t *q, br_work_t *w, int *done_p);

/* While w waits at the head of q: has a peer run the same collective with different
 * arguments, seen on another path (a node arena slot, or a connection w does not read
 * now)? Records the failure and returns nonzero if so. */
int br_work_probe_mismatch(br_exec_queue_t *q, const br_work_t *w);

/* Are op's copies into its output made with non-temporal stores (util_copy.c)? From
 * the per-rank input size ec->nt_bytes on (BRAID_NT_COPY_BYTES). */
static inline int br_exec_streams(const br_exec_comm_t *ec, const br_op_t *op)
{
    return ec->nt_bytes > 0 && br_op_bytes(op) >= ec->nt_bytes;
}

/* Copy into op's output: with non-temporal stores where br_exec_streams, else memcpy. */
static inline void br_exec_copy_out(const br_exec_comm_t *ec, const br_op_t *op, void *dst,
                                    const void *src, size_t n)
{
    br_copy_out(dst, src, n, br_exec_streams(ec, op));
}

/* The op that folds inputs each already scaled by its own rank's PreMulSum scalar (the
 * arena's published inputs, RingOneShot's gathered ones): a plain sum for PREMULSUM, the
 * op itself otherwise (integer Avg still divides at the end). */
static inline br_redop_t br_redop_prescaled(const br_redop_t *op)
{
    br_redop_t p = *op;
    if (p.kind == BR_RED_PREMULSUM) {
        p.kind = BR_RED_SUM;
    }
    return p;
}

/* The descriptor of op's data, and its checks. */
br_slot_desc_t br_desc_make(const br_op_t *op, size_t bytes);
/* Does d describe op (apart from its byte count)? */
int br_desc_matches(const br_slot_desc_t *d, const br_op_t *op);

/* Record that what peer sent or published (`what`: "sent data for", ...) belongs to
 * another call than op: both calls named, and a hint when only the algorithm differs. */
void br_desc_mismatch(br_exec_comm_t *ec, const br_op_t *op, int peer, const char *what,
                      const br_slot_desc_t *d);

/* Check a received slot's descriptor against what this rank expects (bytes as sent:
 * LL lines counted in full). Records the failure and returns -1 if it does not match. */
int br_desc_check(br_exec_comm_t *ec, const br_work_t *w, int peer, const br_slot_desc_t *d,
                  size_t bytes);

/* Profiler events (exec_prof.c). Record the Coll or P2p event of op: its index in the
 * batch's events, or -1 when not profiled. */
int br_exec_prof_op_start(br_exec_batch_t *b, br_exec_comm_t *ec, const br_op_t *op);
/* The batch is handed to the executor: per communicator KernelLaunch, the legacy Group,
 * and every Coll / P2p event, started and stopped (enqueued) as NCCL does. */
void br_exec_prof_launch(br_exec_batch_t *b);
/* A work item starts running / has finished: its KernelCh event. */
void br_exec_prof_work_start(br_exec_batch_t *b, br_work_t *w);
void br_exec_prof_work_done(br_exec_batch_t *b, br_work_t *w);
/* A step of w moved data (r > 0): its kernel phases' stamps. */
static inline void br_exec_prof_work_moved(br_work_t *w)
{
    if (w->phases) {
        w->ph_last = br_time_ns();
        if (w->ph_first == 0) {
            w->ph_first = w->ph_last;
        }
    }
}
/* End of a batch: every KernelCh event still open stops (after a failure too). */
void br_exec_prof_batch_end(br_exec_batch_t *b);

/* The periodic checks of a blocked communicator (exec_health.c): abort notices, paths
 * that show mismatched calls, dead peers and connections, the timeout. Returns nonzero on
 * failure (recorded in ec). */
int br_exec_health_check(br_exec_batch_t *b, br_exec_comm_t *ec, uint64_t blocked_ns);
/* A communicator of the batch revoked? Fails it and returns its queue index + 1, else 0. */
int br_exec_revoked_check(br_exec_batch_t *b);
/* Log what every blocked queue waits for (BRAID_WAIT_WARN). */
void br_exec_watchdog_warn(br_exec_batch_t *b, uint64_t blocked_ns);

/* What the executor tells the operation log (exec_oplog.c) about an operation. */
typedef enum {
    BR_OPLOG_EV_ITEM,      /* one more work item queued for it */
    BR_OPLOG_EV_RUN,       /* running (again, after a wait) */
    BR_OPLOG_EV_WAIT,      /* nothing moves: waiting for peer, on what, since */
    BR_OPLOG_EV_ITEM_DONE, /* one of its work items finished (the last: done) */
    BR_OPLOG_EV_DONE       /* finished without any work item */
} br_oplog_event_t;

/* Update ticket's record of ec's log (nothing without a log or a ticket). */
void br_oplog_note(br_exec_comm_t *ec, uint64_t ticket, br_oplog_event_t ev, int peer,
                   const char *what, uint64_t since);
/* Free ec's operation log. */
void br_exec_oplog_close(br_exec_comm_t *ec);

/* Run one prepared work item of ec to completion (alone, like br_exec_run_solo). */
ncclResult_t br_exec_run_item(br_exec_comm_t *ec, const br_work_t *w);
/* Free ec's deferred Broadcast checks (exec_arena.c). */
void br_exec_defer_free(br_exec_comm_t *ec);


#endif /* BR_EXEC_INT_H_ */
