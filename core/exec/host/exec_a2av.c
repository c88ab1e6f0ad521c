/* SPDX-License-Identifier: Apache-2.0 */
/*
 * AlltoAllV through the node arena, on one host whose ranks may read each other's memory.
 * Each rank (the owner) publishes in its large arena buffer for the operation a table
 * with one entry per reader: the reader's element count, and where its block is, either
 * copied into the buffer after the table (a small block: the owner then need not wait for
 * that reader) or left in the owner's send buffer, whose address heads the table. Each
 * reader takes every owner's block for it, a large one straight from the owner's send
 * buffer (memcpy between threads of one process or from ncclMemAlloc memory mapped here,
 * process_vm_readv between processes): one copy per byte where the pairwise exchange over
 * p2p FIFOs makes two. A reader checks the owner's count against its own recvcounts entry
 * before it copies anything, so ranks that disagree get an error naming both and never a
 * copy past either rank's block. An owner that left blocks in place returns only once
 * those readers' `done` passed the operation. One work item per call on the arena queue,
 * run by the batch's thread.
 */
#include <string.h>

#include "exec_int.h"
#include "util.h"

/* What heads an owner's table. */
typedef struct {
    br_arena_buf_t src; /* the owner's send buffer */
    uint64_t nranks;
} a2av_head_t;

/* The owner's entry for one reader. */
typedef struct {
    uint64_t count; /* elements: the owner's sendcounts[reader] */
    uint64_t off;   /* bytes: into the send buffer, or (A2AV_INLINE) into the arena buffer */
    uint64_t how;   /* A2AV_* */
} a2av_entry_t;

enum {
    A2AV_READ = 0,   /* read from the owner's send buffer */
    A2AV_INLINE = 1, /* copied into the owner's arena buffer */
    A2AV_FIFO = 2    /* sent over the pair's p2p connection (br_work_a2av_fifo) */
};

/* Largest block copied into the arena for a reader that is a thread of the owner's
 * process (BRAID_ALLTOALLV_INLINE_BYTES, if lower, caps it). */
#define BR_A2AV_INLINE_THREAD ((size_t)4 << 10)

static size_t round64(size_t x)
{
    return (x + 63) & ~(size_t)63;
}

/* Bytes of the head and the table for n ranks (inline blocks follow, 64-byte aligned). */
static size_t table_bytes(int n)
{
    return round64(sizeof(a2av_head_t) + (size_t)n * sizeof(a2av_entry_t));
}

int br_work_a2av_fifo(const br_exec_comm_t *ec, int peer, size_t bytes)
{
    /* Both ranks of the pair decide alike from the block's size (each from its own count:
     * if they differ, the reader's check of the owner's entry fails the call). */
    const br_peer_info_t *pi = ec->tc->peers;
    size_t most = ec->arena->a2av_max;
    return pi[peer].pid_hash != pi[ec->rank].pid_hash && most > 0 && bytes > most;
}

int br_work_a2av_takes(const br_exec_comm_t *ec, const br_op_t *op)
{
    /* Every input of the decision is agreed by all ranks at init (the arena's size and
     * whether every rank can read every other), so all ranks choose alike. At 2 ranks the
     * pairwise exchange measured as fast (docs/performance.md). */
    const br_arena_t *a = ec->arena;
    return op->func == BR_FUNC_ALLTOALLV && ec->nranks > 2 && a != NULL && a->a2av &&
           table_bytes(ec->nranks) <= a->max_bytes;
}

static const a2av_entry_t *table_of(const br_arena_t *a, int r, uint64_t k)
{
    return (const a2av_entry_t *)(void *)(br_arena_data(a, r, k, 0) + sizeof(a2av_head_t));
}

/* Phase 0: fill the table (and the small blocks) once our buffer is free, publish it,
 * then copy our own block. */
static int a2av_publish(br_exec_queue_t *q, br_work_t *w)
{
    br_exec_comm_t *ec = q->ec;
    br_arena_t *a = ec->arena;
    const br_op_t *op = &w->op;
    const br_vspec_t *v = op->v;
    size_t ts = br_type_size(op->type), extent = 0;
    int n = ec->nranks, me = ec->rank, wait = -1;

    if (!br_arena_writable(a, me, w->arena_k, 0, &wait)) {
        q->wait_peer = wait;
        q->wait_what = "the node arena to be read by";
        return 0;
    }
    char *data = br_arena_data(a, me, w->arena_k, 0);
    a2av_head_t head;
    a2av_entry_t *tab = (a2av_entry_t *)(void *)(data + sizeof(head));
    size_t used = table_bytes(n);
    for (int i = 0; i < n; i++) {
        int r = (me + i) % n; /* the nearest readers get the room first */
        size_t bytes = v->scount[r] * ts, at = v->sdispl[r] * ts;
        a2av_entry_t e = {v->scount[r], at, A2AV_READ};
        if (r != me && br_work_a2av_fifo(ec, r, bytes)) {
            e.how = A2AV_FIFO; /* its own work item sends it */
            tab[r] = e;
            continue;
        }
        extent = at + bytes > extent ? at + bytes : extent;
        /* A reader of another process would pay a system call to read a small block in
         * place; a thread of this process reads it with a plain memcpy, and only a tiny
         * block is worth a second copy so that the owner need not wait for that reader
         * (4 threads, 1 KiB blocks: 12.6 us against 16.4, 6 of 7 rounds; from 4 KiB
         * blocks on level, docs/performance.md). */
        int other = ec->tc->peers[r].pid_hash != ec->tc->peers[me].pid_hash;
        size_t most = other || ec->a2av_inline < BR_A2AV_INLINE_THREAD ? ec->a2av_inline
                                                                       : BR_A2AV_INLINE_THREAD;
        if (r != me && bytes > 0 && bytes <= most && used + bytes <= a->max_bytes) {
            memcpy(data + used, (const char *)op->sendbuff + at, bytes);
            e.off = used;
            e.how = A2AV_INLINE;
            used += round64(bytes);
        }
        tab[r] = e;
    }
    memset(&head, 0, sizeof(head));
    br_exec_publish_buf(&head.src, op->sendbuff, extent);
    head.nranks = (uint64_t)n;
    memcpy(data, &head, sizeof(head));
    br_slot_desc_t d = br_desc_make(op, used);
    br_arena_publish(a, me, w->arena_k, 0, NULL, 0, &d); /* written in place above */
    size_t mine = v->rcount[me] * ts;
    if (mine > 0) {
        br_exec_copy_out(ec, op, (char *)op->recvbuff + v->rdispl[me] * ts,
                         (const char *)op->sendbuff + v->sdispl[me] * ts, mine);
    }
    w->arena_phase = 1;
    w->arena_next = n - 1; /* blocks to read */
    return 1;
}

/* Rank o's table is for this call and its count for us is ours? 0, or -1 (recorded). */
static int a2av_check(br_exec_comm_t *ec, const br_work_t *w, int o, const a2av_entry_t *e)
{
    const br_arena_t *a = ec->arena;
    const br_op_t *op = &w->op;
    const br_slot_desc_t *d = &br_arena_hdr(a, o, w->arena_k, 0)->desc;
    a2av_head_t head;
    br_op_t expect = *op;

    expect.count = d->count; /* the owner's total: it sends its own counts */
    if (!br_desc_matches(d, &expect)) {
        br_desc_mismatch(ec, op, o, "published its input for", d);
        return -1;
    }
    memcpy(&head, br_arena_data(a, o, w->arena_k, 0), sizeof(head));
    size_t ts = br_type_size(op->type), want = op->v->rcount[o];
    if (head.nranks != (uint64_t)ec->nranks || d->bytes > a->max_bytes) {
        br_exec_fail(ec, ncclInternalError,
                     "rank %d: AlltoAllV #%llu: rank %d's table in the node arena is damaged "
                     "(%llu ranks, %llu bytes)",
                     ec->rank, (unsigned long long)op->seq, o, (unsigned long long)head.nranks,
                     (unsigned long long)d->bytes);
        return -1;
    }
    if (e->count != want) {
        /* Described as the pairwise exchange's receive would: both entries named. */
        br_slot_desc_t theirs = *d;
        theirs.count = e->count;
        expect.count = want;
        br_desc_mismatch(ec, &expect, o, "published its input for", &theirs);
        return -1;
    }
    if (e->how == A2AV_INLINE && (e->off > d->bytes || want * ts > d->bytes - e->off)) {
        br_exec_fail(ec, ncclInternalError,
                     "rank %d: AlltoAllV #%llu: rank %d's block for it lies outside its "
                     "table (%llu bytes at %llu of %llu)",
                     ec->rank, (unsigned long long)op->seq, o, (unsigned long long)(want * ts),
                     (unsigned long long)e->off, (unsigned long long)d->bytes);
        return -1;
    }
    return 0;
}

/* Copy rank o's block for us (checked first). 0, or -1 (recorded). */
static int a2av_read(br_exec_comm_t *ec, const br_work_t *w, int o)
{
    br_arena_t *a = ec->arena;
    const br_op_t *op = &w->op;
    a2av_entry_t e;
    memcpy(&e, &table_of(a, o, w->arena_k)[ec->rank], sizeof(e));
    if (a2av_check(ec, w, o, &e) != 0) {
        return -1;
    }
    size_t ts = br_type_size(op->type), bytes = (size_t)e.count * ts;
    char *dst = (char *)op->recvbuff + op->v->rdispl[o] * ts;
    if (bytes == 0 || e.how == A2AV_FIFO) {
        return 0; /* a FIFO block: its receive work item takes it */
    }
    if (e.how == A2AV_INLINE) {
        br_exec_copy_out(ec, op, dst, br_arena_data(a, o, w->arena_k, 0) + e.off, bytes);
        return 0;
    }
    if (br_exec_arena_present(ec, w, o, 0) != 0) {
        return -1; /* the owner failed: its send buffer is no longer ours to read */
    }
    a2av_head_t head;
    const void *src = NULL;
    size_t done = 0;
    memcpy(&head, br_arena_data(a, o, w->arena_k, 0), sizeof(head));
    int err = br_arena_read_buf(a, &ec->tc->peers[o], &ec->tc->peers[ec->rank], &head.src, dst,
                                (size_t)e.off, bytes, br_exec_streams(ec, op), &src, &done);
    if (err != 0) {
        br_exec_peer_copy_failed(ec, w, o, "reading", (const char *)src + e.off, dst, done, bytes,
                                 err);
        return -1;
    }
    return 0;
}

/* Phase 1: every other owner's block, each as soon as its owner has published (ranks
 * often outnumber cores: one not running must not hold up the others' blocks), in the
 * order after ourselves (not everyone on rank 0 first). arena_next counts the blocks
 * still to read. 1 when all are read, 0 waiting, -1 error. */
static int a2av_gather(br_exec_queue_t *q, br_work_t *w, int *moved_p)
{
    br_exec_comm_t *ec = q->ec;
    int n = ec->nranks, waiting = -1;

    for (int i = 1; i < n && w->arena_next > 0; i++) {
        int o = (ec->rank + i) % n;
        if (w->a2av_got[o]) {
            continue;
        }
        if (!br_arena_published(ec->arena, o, w->arena_k, 0)) {
            if (br_exec_arena_gone(ec, w, o) != 0) {
                return -1;
            }
            waiting = waiting < 0 ? o : waiting;
            continue;
        }
        if (a2av_read(ec, w, o) != 0) {
            return -1;
        }
        w->a2av_got[o] = 1;
        w->arena_next--;
        (*moved_p)++;
    }
    if (w->arena_next > 0) {
        q->wait_peer = waiting;
        q->wait_what = "data from";
        return 0;
    }
    return 1;
}

/* Phase 2: every reader we left a block in place for has read it. 1 yes, 0 waiting, -1
 * one failed (recorded). With `failing` (this rank failed: br_work_arena_settle) a reader
 * that failed counts as done, and with `dead` one whose process is gone. */
static int a2av_readers(br_exec_queue_t *q, br_work_t *w, int failing, int dead)
{
    br_exec_comm_t *ec = q->ec;
    const a2av_entry_t *tab = table_of(ec->arena, ec->rank, w->arena_k);
    int n = ec->nranks;

    for (; w->arena_next < n; w->arena_next++) {
        int r = (ec->rank + w->arena_next) % n;
        if (tab[r].count > 0 && tab[r].how == A2AV_READ &&
            !br_arena_read_by(ec->arena, r, w->arena_k)) {
            if (failing && br_exec_arena_stopped(ec, r, dead)) {
                continue;
            }
            q->wait_peer = r;
            q->wait_what = "its input to be read by";
            return failing ? 0 : br_exec_arena_gone(ec, w, r);
        }
    }
    return 1;
}

int br_work_a2av_settle(br_exec_queue_t *q, br_work_t *w, int dead)
{
    return a2av_readers(q, w, 1, dead);
}

int br_work_a2av(br_exec_queue_t *q, br_work_t *w, int *done_p)
{
    br_exec_comm_t *ec = q->ec;
    int moved = 0, r;

    if (w->arena_phase == 0) {
        if (!a2av_publish(q, w)) {
            return 0;
        }
        moved = 1;
    }
    if (w->arena_phase == 1) {
        r = a2av_gather(q, w, &moved);
        if (r <= 0) {
            return r < 0 ? -1 : moved;
        }
        br_arena_done(ec->arena, ec->rank, w->arena_k);
        w->arena_phase = 2;
        w->arena_next = 1;
        moved++;
    }
    r = a2av_readers(q, w, 0, 0);
    if (r <= 0) {
        return r < 0 ? -1 : moved;
    }
    *done_p = 1;
    return moved > 0 ? moved : 1;
}
