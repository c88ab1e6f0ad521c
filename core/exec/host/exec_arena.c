/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The OneShot and DirectRead algorithms over the node arena (its layout and protocol are
 * the transport's: transport.h). OneShot: every rank publishes its whole input for
 * operation k, reads every other input it needs and computes its own output; reductions
 * fold the inputs in rank order 0..n-1 on every rank, so every rank gets bit-identical
 * results. DirectRead (large AllGather/Broadcast): a rank publishes only its input's
 * address, every rank that needs it copies it straight from the owner's memory, and the
 * owner returns only once all its readers are done (the caller may reuse the buffer
 * after that): one copy per byte instead of two through a FIFO; a Broadcast's root
 * writes part of every reader's output meanwhile. A DirectRead AllReduce publishes its
 * input's and output's addresses: each rank reduces its part of the elements from every
 * input, then copies the others' parts from their outputs (below). OneShot Broadcast and
 * AllGather larger than an arena buffer move in chunks of one buffer each (below).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_int.h"
#include "util.h"

/* Bytes `rank` publishes for op (0 when it contributes nothing). */
static size_t publish_bytes(const br_exec_comm_t *ec, const br_op_t *op, int rank)
{
    size_t bytes = br_op_bytes(op);
    switch (op->func) {
    case BR_FUNC_BROADCAST: return rank == op->root ? bytes : 0;
    case BR_FUNC_REDUCESCATTER: return bytes * (size_t)ec->nranks;
    default: return bytes;
    }
}

/* Is rank `peer`'s input for arena operation k (slot kind `small`) the one op expects?
 * Records the mismatch (`what` says what the peer did) and returns -1 if not. */
static int check_input(br_exec_comm_t *ec, const br_op_t *op, uint64_t k, int small, int peer,
                       const char *what)
{
    const br_slot_desc_t *d = &br_arena_hdr(ec->arena, peer, k, small)->desc;
    size_t want = op->algo == BR_ALGO_DIRECT_READ ? sizeof(br_arena_addr_t)
                                                  : publish_bytes(ec, op, peer);

    if (br_desc_matches(d, op) && d->bytes == want) {
        return 0;
    }
    br_desc_mismatch(ec, op, peer, what, d);
    return -1;
}

/* dst = inputs of every rank in the arena folded in rank order (element offset `at`).
 * A PREMULSUM's inputs were published scaled by their own rank's scalar (publish), so
 * they fold as a plain sum. */
static void fold_inputs(const br_exec_comm_t *ec, const br_work_t *w, void *dst, size_t at)
{
    const br_arena_t *a = ec->arena;
    const br_op_t *op = &w->op;
    const char *first = br_arena_data(a, 0, w->arena_k, w->arena_small) + at * br_type_size(op->type);
    size_t stride = br_arena_rank_stride(a, w->arena_small);
    br_redop_t sum = br_redop_prescaled(&op->redop);
    int n = ec->nranks;

    /* Ranks 0 and 1 in one pass (the ops are commutative, bit for bit). */
    br_reduce(dst, first, first + stride, op->count, &sum, n == 2 ? BR_REDUCE_POST : 0);
    for (int r = 2; r < n; r++) {
        br_reduce(dst, dst, first + (size_t)r * stride, op->count, &sum,
                  r == n - 1 ? BR_REDUCE_POST : 0);
    }
}

static void oneshot_output(const br_exec_comm_t *ec, const br_work_t *w)
{
    const br_arena_t *a = ec->arena;
    const br_op_t *op = &w->op;
    size_t bytes = br_op_bytes(op);
    int me = ec->rank;

    switch (op->func) {
    case BR_FUNC_ALLREDUCE: fold_inputs(ec, w, op->recvbuff, 0); break;
    case BR_FUNC_REDUCE:
        if (me == op->root) {
            fold_inputs(ec, w, op->recvbuff, 0);
        }
        break;
    case BR_FUNC_REDUCESCATTER: fold_inputs(ec, w, op->recvbuff, (size_t)me * op->count); break;
    case BR_FUNC_ALLGATHER:
        for (int r = 0; r < ec->nranks; r++) {
            memcpy((char *)op->recvbuff + (size_t)r * bytes,
                   br_arena_data(a, r, w->arena_k, w->arena_small), bytes);
        }
        break;
    default: /* Broadcast */
        if (op->recvbuff != op->sendbuff || me != op->root) {
            memcpy(op->recvbuff, br_arena_data(a, op->root, w->arena_k, w->arena_small), bytes);
        }
        break;
    }
}

/* Does this rank need rank r's input (or at least its call descriptor) before its call
 * returns? A Reduce's non-roots need nothing (they publish and go, as a root's send is
 * eager). A Broadcast's non-roots need the root's input. Its root needs no data, but
 * every rank's descriptor: a rank that wrongly believes it is the root would otherwise
 * publish, return at once and keep its own buffer as the "result" with nobody noticing.
 * A OneShot root (w->arena_defer) checks them after it returned instead (below, "The
 * Broadcast root's deferred check"); any other root waits for them here. */
static int needs(const br_exec_comm_t *ec, const br_work_t *w, int r)
{
    const br_op_t *op = &w->op;
    switch (op->func) {
    case BR_FUNC_BROADCAST: return r == op->root || (ec->rank == op->root && !w->arena_defer);
    case BR_FUNC_REDUCE: return ec->rank == op->root;
    default: return 1;
    }
}

/* ---- The Broadcast root's deferred check ----
 * A OneShot Broadcast's root publishes its input and returns at once, as a sender does;
 * the other ranks' call descriptors for that operation (published when they enter their
 * call) are checked afterwards, in the order of the operations:
 *   - without waiting, at the end of every later root Broadcast and at the start of every
 *     later call on the communicator (host_run), so a mismatch fails the next call: every
 *     deferred operation against every rank that has published for it;
 *   - waiting for ranks that have not published yet (the executor's health checks and
 *     timeout apply): before any other arena operation starts, before a root Broadcast
 *     a slot window later (BR_ARENA_NSMALL operations for a small input, BR_ARENA_NBUF
 *     for a large one), and at ncclCommFinalize / ncclCommDestroy.
 * The rank's `done` counter stays at the oldest unchecked operation, so no rank reuses
 * (overwrites) the slot holding the descriptor before the root has read it; `done_hi` is
 * what it will say once every check passed. The waits cannot deadlock: the root waits
 * only for descriptors of operations before the one it is in, which a rank publishes as
 * it enters them, and what such a rank may wait for meanwhile is either already done by
 * the root (its data, or its `done` for slots within the window) or the root reaching a
 * later operation, whose own checks release the held `done`. A rank ahead of the root
 * in large-buffer operations may wait for the root to arrive where it would not have
 * before (the held `done` trails the root by up to the window). */
#define BR_DEFER_MAX BR_ARENA_NSMALL

typedef struct {
    br_op_t op; /* the root's call (for the check and the message) */
    uint64_t k; /* its arena operation */
    int small;  /* in a small slot */
} defer_rec_t;

/* Every rank publishes its operations in order, so what has been checked of a rank is a
 * prefix of the records: cursor[r] is the number (counted since the first record ever)
 * of the first record not yet checked against rank r. Each pair of record and rank is
 * checked once, and a rank that has not published holds back only its own cursor. */
struct br_arena_defer {
    defer_rec_t recs[BR_DEFER_MAX]; /* a ring, oldest at head */
    int head, n;
    uint64_t first;   /* the number of the record at head */
    uint64_t done_hi; /* `done` once every check passed */
    uint64_t cursor[]; /* per rank */
};

/* Publish `done`: the oldest unchecked operation, or done_hi when none is left. */
static void defer_publish_done(br_exec_comm_t *ec)
{
    const struct br_arena_defer *df = ec->defer;
    uint64_t v = df->n > 0 ? df->recs[df->head].k : df->done_hi;
    if (v > 0) {
        br_arena_done(ec->arena, ec->rank, v - 1);
    }
}

/* Check deferred root Broadcasts older than arena operation `before`: every rank against
 * the records it has published for, from its cursor on (a rank that has not published,
 * or failed before it did, hides nothing of the others), then retire the records every
 * rank has passed, oldest first. 1: all checked, 0: not yet (q, when given, notes whom it
 * waits for), -1: a mismatch (recorded in ec). */
static int defer_check(br_exec_comm_t *ec, br_exec_queue_t *q, uint64_t before)
{
    struct br_arena_defer *df = ec->defer;
    uint64_t end, low;
    int checked = 0, behind = -1;

    if (df == NULL || df->n == 0) {
        return 1;
    }
    end = df->first + (uint64_t)df->n;
    low = end;
    for (int r = 0; r < ec->nranks; r++) {
        if (r == ec->rank) {
            continue;
        }
        uint64_t c = df->cursor[r];
        for (; c < end; c++) {
            const defer_rec_t *e = &df->recs[(df->head + (int)(c - df->first)) % BR_DEFER_MAX];
            if (e->k >= before || !br_arena_published(ec->arena, r, e->k, e->small)) {
                break; /* the records are in operation order, and so are r's */
            }
            if (check_input(ec, &e->op, e->k, e->small, r,
                            "(seen by the root's deferred check) published its input for") != 0) {
                return -1; /* `done` stays: the comm has failed */
            }
        }
        df->cursor[r] = c;
        if (c < low) {
            low = c;
            behind = r;
        }
    }
    while (df->first < low) {
        df->head = (df->head + 1) % BR_DEFER_MAX;
        df->first++;
        df->n--;
        checked++;
    }
    if (checked > 0) {
        defer_publish_done(ec);
    }
    if (df->n > 0 && df->recs[df->head].k < before) {
        if (q != NULL) {
            q->wait_peer = behind;
            q->wait_what = "an earlier Broadcast's call descriptor from";
        }
        return 0;
    }
    return 1;
}

/* This rank finished the root Broadcast w without its check: note it, and check what
 * has been published meanwhile. 0, or -1 on a mismatch of an earlier one. */
static int defer_add(br_exec_comm_t *ec, const br_work_t *w)
{
    struct br_arena_defer *df = ec->defer;
    defer_rec_t *e = &df->recs[(df->head + df->n) % BR_DEFER_MAX];

    e->op = w->op;
    e->k = w->arena_k;
    e->small = w->arena_small;
    df->n++;
    df->done_hi = w->arena_k + 1;
    return defer_check(ec, NULL, UINT64_MAX) < 0 ? -1 : 0;
}

/* May w, a OneShot Broadcast's root, leave its check for later? (Room is left in the
 * ring by the waiting check before it publishes: see br_work_arena.) */
static int defer_can(br_exec_comm_t *ec, const br_work_t *w)
{
    const br_op_t *op = &w->op;
    if (op->func != BR_FUNC_BROADCAST || op->algo != BR_ALGO_ONESHOT || ec->rank != op->root ||
        w->arena_nchunk > 1) {
        return 0;
    }
    if (ec->defer == NULL &&
        br_calloc_impl((void **)&ec->defer, 1,
                       sizeof(*ec->defer) + (size_t)ec->nranks * sizeof(ec->defer->cursor[0]),
                       "deferred Broadcast checks") != ncclSuccess) {
        return 0; /* checked before returning, as without deferral */
    }
    return ec->defer->n < BR_DEFER_MAX;
}

/* Before w publishes anything: the deferred checks it may not run ahead of. A root
 * Broadcast that defers too leaves the last window - 1 operations of its slot kind
 * unchecked; any other operation checks them all (its `done` must be able to pass them). */
static int defer_before(br_exec_queue_t *q, br_work_t *w)
{
    br_exec_comm_t *ec = q->ec;
    if (ec->defer == NULL || ec->defer->n == 0) {
        return 1;
    }
    const br_op_t *op = &w->op;
    int root_bcast = op->func == BR_FUNC_BROADCAST && op->algo == BR_ALGO_ONESHOT &&
                     ec->rank == op->root && w->arena_nchunk == 1;
    uint64_t before = UINT64_MAX; /* any other operation: all of them */
    if (root_bcast) {
        /* Its own slot kind's window: the buffers' for a large input, the small slots'
         * (64, the ring's size) for a small one. */
        uint64_t window = w->arena_small ? BR_ARENA_NSMALL : BR_ARENA_NBUF;
        before = w->arena_k >= window - 1 ? w->arena_k - (window - 1) : 0;
    }
    return defer_check(ec, q, before);
}

ncclResult_t br_exec_defer_settle(br_exec_comm_t *ec, int wait)
{
    if (ec->defer == NULL || ec->defer->n == 0 || ec->error != ncclSuccess) {
        return ncclSuccess; /* nothing to check, or the failure was reported already */
    }
    if (atomic_load_explicit(&ec->revoked, memory_order_acquire)) {
        /* Good only for destroy or abort now, which must not fail on that: what can be
         * seen without waiting is still checked (a mismatch is logged). */
        (void)defer_check(ec, NULL, UINT64_MAX);
        return ncclSuccess;
    }
    if (!wait) {
        return defer_check(ec, NULL, UINT64_MAX) < 0 ? ec->error : ncclSuccess;
    }
    /* Run a work item that only checks, so the executor's waits, health checks and
     * timeout apply; it carries the oldest unchecked call, which the health check's
     * mismatch probe compares with the other ranks' slots. */
    br_work_t w;
    memset(&w, 0, sizeof(w));
    w.kind = BR_WORK_ARENA;
    w.op = ec->defer->recs[ec->defer->head].op;
    w.op.log_ticket = 0; /* returned already: not the operation log's any more */
    w.event = -1;
    w.arena_phase = 3;
    w.arena_nchunk = 1;
    return br_exec_run_item(ec, &w);
}

void br_exec_defer_free(br_exec_comm_t *ec)
{
    free(ec->defer);
    ec->defer = NULL;
}

void br_exec_peer_copy_failed(br_exec_comm_t *ec, const br_work_t *w, int r, const char *how,
                              const void *theirs, const void *ours, size_t done, size_t bytes,
                              int err)
{
    const br_peer_info_t *pi = &ec->tc->peers[r];
    ncclResult_t res = err == EFAULT ? ncclInvalidArgument : err == ESRCH ? ncclRemoteError
                                                                           : ncclSystemError;
    br_exec_fail(ec, res,
                 "rank %d: %s #%llu (count %zu, %s): %s rank %d's buffer %p (pid %d on %s) "
                 "%s %p failed at byte %zu of %zu: %s%s",
                 ec->rank, br_func_name(w->op.func), (unsigned long long)w->op.seq, w->op.count,
                 br_type_name(w->op.type), how, r, theirs, pi->pid, pi->host,
                 how[0] == 'r' ? "into" : "from", ours, done, bytes, strerror(err),
                 err == EFAULT  ? " (one of the two buffers is not valid for the call's count)"
                 : err == ESRCH ? " (the rank's process is gone)"
                                : "");
}

int br_exec_arena_gone(br_exec_comm_t *ec, const br_work_t *w, int r)
{
    uint64_t why = br_arena_failed(ec->arena, r);
    if (why == 0) {
        return 0;
    }
    const br_peer_info_t *pi = &ec->tc->peers[r];
    /* A rank leaves or fails in the arena before it tells the others why: wait a moment
     * for that report, so the message names the first cause and not only this rank. */
    char fate[1100];
    br_transport_peer_fate(ec->tc, r, BR_FATE_WAIT_NS, fate, sizeof(fate));
    br_exec_fail(ec, ncclRemoteError,
                 "rank %d (host %s): %s #%llu (count %zu, %s): rank %d (pid %d on %s) %s; "
                 "nothing more is copied from or into its buffers%s",
                 ec->rank, br_host_name(), br_func_name(w->op.func),
                 (unsigned long long)w->op.seq, w->op.count, br_type_name(w->op.type), r,
                 pi->pid, pi->host, why == BR_ARENA_LEFT ? "closed its communicator" : "failed",
                 fate);
    return -1;
}

int br_exec_arena_present(br_exec_comm_t *ec, const br_work_t *w, int r, int small)
{
    if (br_arena_published(ec->arena, r, w->arena_k, small)) {
        return 0;
    }
    /* Only a failed owner takes its flag back, after it set its `failed` word. */
    if (br_exec_arena_gone(ec, w, r) == 0) {
        br_exec_fail(ec, ncclInternalError,
                     "rank %d: %s #%llu: rank %d's input left the node arena while it was read",
                     ec->rank, br_func_name(w->op.func), (unsigned long long)w->op.seq, r);
    }
    return -1;
}

/* DirectRead: copy bytes [off, off + bytes) of rank r's published buffer `which`
 * (BR_ARENA_IN, BR_ARENA_OUT) to dst, unless r has failed. */
static int read_peer(br_exec_comm_t *ec, const br_work_t *w, int r, int which, char *dst,
                     size_t off, size_t bytes)
{
    const void *src = NULL;
    size_t done = 0;
    if (br_exec_arena_present(ec, w, r, 1) != 0) {
        return -1;
    }
    int err = br_arena_read_peer(ec->arena, &ec->tc->peers[r], &ec->tc->peers[ec->rank],
                                 w->arena_k, which, dst, off, bytes, br_exec_streams(ec, &w->op),
                                 &src, &done);
    if (err != 0) {
        br_exec_peer_copy_failed(ec, w, r, "reading", (const char *)src + off, dst, done, bytes,
                                 err);
        return -1;
    }
    return 0;
}

/* DirectRead Broadcast: bytes [0, split) of every reader's output are written by the
 * root while the reader reads the rest, so two cores copy at once where a reader alone
 * would copy everything. The root chooses the split and publishes it with its input's
 * address. It balances the time each spends copying: the root copies its own input to
 * its output when out of place (B bytes at memcpy speed m, else nothing) plus `split` for
 * each of the n - 1 readers, and each reader copies B - split, both at process_vm_readv /
 * writev speed c. In place that gives split = B / n. Out of place, B / m + (n - 1) split
 * / c = (B - split) / c gives split = (B / n)(1 - c / m). The input a root has just been
 * handed is in its cache, where memcpy runs faster than the kernel's copy: measured at 2
 * ranks, 1-4 MiB, out of place, B/3 did best (9.5-11.4 GB/s at 1-2 MiB, 8.4-9.7 at 4),
 * then B/4 (8.9-10.0, 8.3-9.5), B/6, B/8, the in-place B/2 (7.5-9.4, 5.4-6.9) and none
 * (6.5-7.8, 6.1-6.7) (docs/performance.md): m = 1.5c, split = 2B / 3n.
 * The split is cut on a page boundary, so that no page is pinned by both. Below 64 KiB
 * it is not split: half of the copy (32 KiB at the 6-10 GB/s process_vm_readv measured
 * here, 3-5 us) would no longer clearly exceed what splitting adds, one system call
 * (about 1 us here) and the reader's wait for the root's `done`. DirectRead's default
 * window starts at 256 KiB, so this matters only where BRAID_CMA_BYTES is lowered. */
#define BR_SPLIT_MIN ((size_t)64 << 10)
static size_t bcast_split(const br_exec_comm_t *ec, const br_op_t *op)
{
    size_t bytes = br_op_bytes(op);
    if (bytes < BR_SPLIT_MIN) {
        return 0;
    }
    size_t n = (size_t)ec->nranks;
    size_t split = op->recvbuff != op->sendbuff ? bytes / (3 * n) * 2 : bytes / n;
    return split & ~(size_t)4095;
}

/* The split the root of DirectRead Broadcast w published (it has published). */
static size_t root_split(const br_exec_comm_t *ec, const br_work_t *w)
{
    br_arena_addr_t pub;
    memcpy(&pub, br_arena_data(ec->arena, w->op.root, w->arena_k, 1), sizeof(pub));
    return (size_t)pub.split;
}

/* DirectRead Broadcast root: write its share of every reader's output. */
static int write_readers(br_exec_comm_t *ec, const br_work_t *w, size_t split)
{
    for (int i = 1; i < ec->nranks && split > 0; i++) {
        int r = (ec->rank + i) % ec->nranks;
        void *dst = NULL;
        size_t done = 0;
        if (br_exec_arena_present(ec, w, r, 1) != 0) {
            return -1; /* a reader that failed: its output may be gone */
        }
        int err = br_arena_write_peer(ec->arena, &ec->tc->peers[r], &ec->tc->peers[ec->rank],
                                      w->arena_k, w->op.sendbuff, split, &dst, &done);
        if (err != 0) {
            br_exec_peer_copy_failed(ec, w, r, "writing", dst, w->op.sendbuff, done, split, err);
            return -1;
        }
    }
    return 0;
}

/* ---- DirectRead AllReduce (ranks that are threads of one process) ----
 * Rank r owns part r of the elements (part_of). It folds that part of every rank's input
 * into its own output, loading the others' inputs where they are, and says so with its
 * `done` for arena operation k. Then it copies every other rank's part out of that rank's
 * output into its own, each once that rank's `done` passed k (phase 4), and says so with
 * its `done` for k + 1, the call's second arena number (nothing is published under it).
 * Before it returns it waits until every rank's `done` passed k + 1 (phase 2): they have
 * read its input and its output. In place, a rank overwrites its input's part j only
 * after rank j, that part's one reader, is done with it. Each rank reads (n-1)/n of the
 * bytes from the others' inputs, folds 1/n and copies (n-1)/n from their outputs, with no
 * FIFO between, where a ring copies every byte into and out of a FIFO at each of its
 * 2(n-1) steps. Every part is folded by one rank only, so every rank gets the same bits.
 * The plan offers it only where every peer's buffers can be loaded from here; between
 * processes each read would be a process_vm_readv, which measured no faster than the
 * ring (plan_model.c). */

/* The elements [*lo, *lo + *len) rank r folds: page-aligned parts of equal size, the
 * last ones shorter (or empty). */
static void part_of(const br_op_t *op, int n, int r, size_t *lo, size_t *len)
{
    size_t tsz = br_type_size(op->type), align = 4096 / tsz;
    size_t per = (op->count + (size_t)n - 1) / (size_t)n;
    per = (per + align - 1) / align * align;
    size_t a = per * (size_t)r, b = a + per;
    *lo = a < op->count ? a : op->count;
    *len = (b < op->count ? b : op->count) - *lo;
}

/* A PREMULSUM's scalar as the 64 bits a DirectRead rank publishes (br_arena_addr_t), and
 * back: the readers scale each rank's input by that rank's own scalar. */
static uint64_t scalar_bits(const br_redop_t *op)
{
    uint64_t bits = op->scalar_i;
    if (br_type_is_float(op->type)) {
        memcpy(&bits, &op->scalar_f, sizeof(bits));
    }
    return bits;
}

static br_redop_t peer_redop(const br_exec_comm_t *ec, const br_work_t *w, int r)
{
    br_redop_t op = w->op.redop;
    br_arena_addr_t pub;
    if (op.kind == BR_RED_PREMULSUM) {
        memcpy(&pub, br_arena_data(ec->arena, r, w->arena_k, 1), sizeof(pub));
        if (br_type_is_float(op.type)) {
            memcpy(&op.scalar_f, &pub.scalar, sizeof(op.scalar_f));
        } else {
            op.scalar_i = pub.scalar;
        }
    }
    return op;
}

/* Fold this rank's part of every input into its output, a piece at a time so that with
 * more than 2 ranks the partial sums are read back from the cache. Each input is scaled
 * by its own rank's PREMULSUM scalar. */
#define BR_DIRECT_PIECE ((size_t)128 << 10)
static int reduce_part(br_exec_comm_t *ec, const br_work_t *w)
{
    const br_op_t *op = &w->op;
    size_t tsz = br_type_size(op->type), lo, len, step = BR_DIRECT_PIECE / tsz;
    int n = ec->nranks, me = ec->rank;

    part_of(op, n, me, &lo, &len);
    for (size_t at = lo; at < lo + len; at += step) {
        size_t cnt = lo + len - at < step ? lo + len - at : step, off = at * tsz;
        char *out = (char *)op->recvbuff + off;
        const char *acc = (const char *)op->sendbuff + off;
        if (op->redop.kind == BR_RED_PREMULSUM) { /* br_reduce scales its local operand only */
            br_reduce(out, NULL, acc, cnt, &op->redop, 0);
            acc = out;
        }
        for (int i = 1; i < n; i++) {
            int r = (me + i) % n; /* not every rank on rank 0's memory at once */
            if (br_exec_arena_present(ec, w, r, 1) != 0) {
                return -1;
            }
            const char *src = br_arena_peer_ptr(ec->arena, &ec->tc->peers[r],
                                                &ec->tc->peers[me], w->arena_k, BR_ARENA_IN,
                                                off + cnt * tsz);
            if (src == NULL) {
                br_exec_fail(ec, ncclInternalError, "rank %d: AllReduce #%llu: DirectRead "
                             "chosen, but rank %d's input cannot be loaded from this process",
                             me, (unsigned long long)op->seq, r);
                return -1;
            }
            br_redop_t ro = peer_redop(ec, w, r);
            br_reduce(out, acc, src + off, cnt, &ro, i == n - 1 ? BR_REDUCE_POST : 0);
            acc = out;
        }
    }
    return 0;
}

/* Phase 4: copy every other rank's reduced part out of its output, once it is there.
 * Returns 1 when all are copied, 0 when waiting for one, -1 on a failed copy. */
static int gather_parts(br_exec_queue_t *q, br_work_t *w)
{
    br_exec_comm_t *ec = q->ec;
    const br_op_t *op = &w->op;
    size_t tsz = br_type_size(op->type), lo, len;
    int n = ec->nranks;

    for (; w->arena_next < n; w->arena_next++) {
        int r = (ec->rank + w->arena_next) % n;
        if (!br_arena_read_by(ec->arena, r, w->arena_k)) {
            q->wait_peer = r;
            q->wait_what = "its part of the reduction from";
            return br_exec_arena_gone(ec, w, r);
        }
        part_of(op, n, r, &lo, &len);
        if (len > 0 && read_peer(ec, w, r, BR_ARENA_OUT, (char *)op->recvbuff + lo * tsz,
                                 lo * tsz, len * tsz) != 0) {
            return -1;
        }
    }
    return 1;
}

/* DirectRead: the local part and the reads, once every input it needs is published. */
static int direct_output(br_exec_comm_t *ec, const br_work_t *w)
{
    const br_op_t *op = &w->op;
    size_t bytes = br_op_bytes(op);
    int n = ec->nranks, me = ec->rank;

    if (op->func == BR_FUNC_ALLREDUCE) {
        return reduce_part(ec, w);
    }
    if (op->func == BR_FUNC_BROADCAST) {
        size_t split = root_split(ec, w);
        if (me != op->root) {
            return read_peer(ec, w, op->root, BR_ARENA_IN, (char *)op->recvbuff + split, split,
                             bytes - split);
        }
        if (op->recvbuff != op->sendbuff) {
            br_exec_copy_out(ec, op, op->recvbuff, op->sendbuff, bytes);
        }
        return write_readers(ec, w, split);
    }
    char *mine = (char *)op->recvbuff + (size_t)me * bytes;
    if (mine != op->sendbuff) {
        br_exec_copy_out(ec, op, mine, op->sendbuff, bytes);
    }
    /* Start after ourselves, so the ranks do not all read rank 0 first. */
    for (int i = 1; i < n; i++) {
        int r = (me + i) % n;
        if (read_peer(ec, w, r, BR_ARENA_IN, (char *)op->recvbuff + (size_t)r * bytes, 0,
                      bytes) != 0) {
            return -1;
        }
    }
    return 0;
}

int br_exec_arena_stopped(const br_exec_comm_t *ec, int r, int dead)
{
    const br_peer_info_t *pi = ec->tc->peers;
    return br_arena_failed(ec->arena, r) != 0 ||
           (dead && br_peer_sees_pid(&pi[r], &pi[ec->rank]) &&
            pi[r].pid_hash != pi[ec->rank].pid_hash && br_exec_pid_is_dead(pi[r].pid));
}

/* DirectRead, phase 2: wait until every reader is done with our input (and a Broadcast
 * reader whose output the root writes in part, until the root is done writing). 1 when
 * they are, 0 waiting, -1 when one failed (recorded). With `failing` (this rank failed,
 * br_work_arena_settle) a reader that failed counts as done, as does, with `dead`, one
 * whose process is gone. */
static int wait_readers(br_exec_queue_t *q, br_work_t *w, int failing, int dead)
{
    br_exec_comm_t *ec = q->ec;
    const br_op_t *op = &w->op;
    int reader = op->func == BR_FUNC_BROADCAST && ec->rank != op->root;
    uint64_t last = w->arena_k + w->arena_nchunk - 1; /* an AllReduce's second number */
    for (; w->arena_next < ec->nranks; w->arena_next++) {
        int r = w->arena_next;
        if (r == ec->rank || (reader && r != op->root)) {
            continue;
        }
        if (!br_arena_read_by(ec->arena, r, last)) {
            if (failing && br_exec_arena_stopped(ec, r, dead)) {
                continue;
            }
            q->wait_peer = r;
            q->wait_what = reader                         ? "its output to be written by"
                           : op->func == BR_FUNC_ALLREDUCE ? "its input and output to be read by"
                                                           : "its input to be read by";
            return failing ? 0 : br_exec_arena_gone(ec, w, r);
        }
    }
    return 1;
}

/* DirectRead after this rank's own reads: an AllReduce's phase 4, then phase 2 (every
 * reader done). Returns 1 when the call is finished (*done_p set), 0 when waiting, -1 on
 * an error. */
static int direct_rest(br_exec_queue_t *q, br_work_t *w, int *done_p)
{
    if (w->arena_phase == 4) {
        int r = gather_parts(q, w);
        if (r <= 0) {
            return r;
        }
        br_arena_done(q->ec->arena, q->ec->rank, w->arena_k + 1);
        w->arena_phase = 2;
        w->arena_next = 0;
    }
    int r = wait_readers(q, w, 0, 0);
    if (r <= 0) {
        return r;
    }
    *done_p = 1;
    return 1;
}

void br_exec_publish_buf(br_arena_buf_t *b, const void *buf, size_t bytes)
{
    br_hostmem_ref_t ref;
    b->addr = (uint64_t)(uintptr_t)buf;
    b->mem_fd = -1;
    if (br_hostmem_find(buf, bytes, &ref)) {
        /* ncclMemAlloc memory: peers map it once and copy with memcpy. */
        b->mem_id = ref.id;
        b->mem_fd = ref.fd;
        b->mem_off = ref.off;
        b->mem_size = ref.size;
    }
}

/* Phase 0: publish this rank's input (or its address) once the buffer is free. */
static int publish(br_exec_queue_t *q, br_work_t *w)
{
    br_exec_comm_t *ec = q->ec;
    const br_op_t *op = &w->op;
    int wait = -1;

    if (!br_arena_writable(ec->arena, ec->rank, w->arena_k, w->arena_small, &wait)) {
        q->wait_peer = wait;
        q->wait_what = "the node arena to be read by";
        return 0;
    }
    br_slot_desc_t d;
    if (op->algo == BR_ALGO_DIRECT_READ) {
        /* A Broadcast reader publishes where its output is: the root writes part of it. */
        int reader = op->func == BR_FUNC_BROADCAST && ec->rank != op->root;
        br_arena_addr_t pub;
        memset(&pub, 0, sizeof(pub));
        br_exec_publish_buf(&pub.buf[BR_ARENA_IN], reader ? op->recvbuff : op->sendbuff,
                            br_op_bytes(op));
        if (op->func == BR_FUNC_ALLREDUCE) {
            br_exec_publish_buf(&pub.buf[BR_ARENA_OUT], op->recvbuff, br_op_bytes(op));
        }
        if (op->func == BR_FUNC_BROADCAST && !reader) {
            pub.split = bcast_split(ec, op);
        } else if (op->redop.kind == BR_RED_PREMULSUM && op->func == BR_FUNC_ALLREDUCE) {
            pub.scalar = scalar_bits(&op->redop);
        }
        d = br_desc_make(op, sizeof(pub));
        br_arena_publish(ec->arena, ec->rank, w->arena_k, 1, &pub, sizeof(pub), &d);
    } else if (op->redop.kind == BR_RED_PREMULSUM && br_func_is_reduction(op->func)) {
        /* Each rank's scalar is its own (ncclRedOpCreatePreMulSum is per rank): it scales
         * its input on the way into the arena, so the folds of every reader add inputs
         * already scaled, each by its owner's scalar, with the same rounding as before. */
        size_t bytes = publish_bytes(ec, op, ec->rank);
        br_reduce(br_arena_data(ec->arena, ec->rank, w->arena_k, w->arena_small), NULL,
                  op->sendbuff, bytes / br_type_size(op->type), &op->redop, 0);
        d = br_desc_make(op, bytes);
        br_arena_publish(ec->arena, ec->rank, w->arena_k, w->arena_small, NULL, 0, &d);
    } else {
        size_t bytes = publish_bytes(ec, op, ec->rank);
        d = br_desc_make(op, bytes);
        br_arena_publish(ec->arena, ec->rank, w->arena_k, w->arena_small, op->sendbuff, bytes, &d);
    }
    w->arena_phase = 1;
    w->arena_next = 0;
    return 1;
}

/* ---- Chunked OneShot: Broadcast and AllGather larger than one arena buffer ----
 * Chunk j of every input is arena operation arena_k + j, so the protocol above applies
 * to each chunk unchanged: a writer reuses a buffer only once every rank's `done` passed
 * the chunk that last used it, up to BR_ARENA_NBUF chunks ahead of the slowest reader.
 * Each byte is copied once into the arena and once out by each reader (a ring copies it
 * twice per hop), and a reader waits only for the chunk's owner, not for a chain of
 * ranks that may not be running (ranks outnumber cores). A Broadcast's non-roots publish
 * their call descriptor (no data) as chunk 0, which the root checks. */

/* Bytes of rank r's input: the call's size, or an AllGatherV's block r. */
static size_t rank_bytes(const br_op_t *op, int r)
{
    return op->v != NULL ? op->v->rcount[r] * br_type_size(op->type) : br_op_bytes(op);
}

uint64_t br_work_arena_chunks(const br_exec_comm_t *ec, const br_op_t *op)
{
    size_t bytes = br_op_bytes(op), each = ec->arena->max_bytes;

    if (op->func == BR_FUNC_ALLGATHERV) { /* as many chunks as the largest block needs */
        size_t most = 0;
        for (int r = 0; r < ec->nranks; r++) {
            most = rank_bytes(op, r) > most ? rank_bytes(op, r) : most;
        }
        return most > each ? (most + each - 1) / each : 1;
    }

    if (op->algo == BR_ALGO_DIRECT_READ && op->func == BR_FUNC_ALLREDUCE) {
        return 2; /* its inputs' reads, then its outputs' (DirectRead AllReduce, above) */
    }
    if (op->algo != BR_ALGO_ONESHOT || each == 0 || bytes <= each ||
        (op->func != BR_FUNC_BROADCAST && op->func != BR_FUNC_ALLGATHER)) {
        return 1;
    }
    return (bytes + each - 1) / each;
}

/* Bytes of chunk j of rank r's input (an AllGatherV's shorter blocks end early: their
 * last chunks are empty). */
static size_t chunk_len(const br_exec_comm_t *ec, const br_work_t *w, int r, uint64_t j)
{
    size_t each = ec->arena->max_bytes, bytes = rank_bytes(&w->op, r);
    size_t at = (size_t)j * each;
    return at >= bytes ? 0 : bytes - at < each ? bytes - at : each;
}

/* Where rank r's block starts in op's output. */
static size_t out_at(const br_op_t *op, int r)
{
    return op->v != NULL ? op->v->rdispl[r] * br_type_size(op->type) : (size_t)r * br_op_bytes(op);
}

/* Does this rank publish chunks of data (a Broadcast's non-roots publish only chunk 0's
 * descriptor)? */
static int chunk_writer(const br_exec_comm_t *ec, const br_op_t *op)
{
    return op->func == BR_FUNC_ALLGATHER || op->func == BR_FUNC_ALLGATHERV ||
           ec->rank == op->root;
}

/* A writer's own part of the output, chunk by chunk as it publishes them: the input
 * chunk is in the cache then, and a copy made when the chunk is read (up to the arena's
 * 8 buffers later) would read it from memory a second time. */
static void own_chunk_copy(const br_exec_comm_t *ec, const br_op_t *op, size_t at,
                           const char *src, size_t len)
{
    size_t mine = op->func == BR_FUNC_BROADCAST ? 0 : out_at(op, ec->rank);
    char *dst = (char *)op->recvbuff + mine + at;
    if (dst != src) {
        br_exec_copy_out(ec, op, dst, src, len);
    }
}

/* Publish as many chunks as the buffers allow (every rank's `done` passed the chunk that
 * last used each), and copy the writer's own part of each; returns how many. */
static int chunk_publish(br_exec_queue_t *q, br_work_t *w)
{
    br_exec_comm_t *ec = q->ec;
    const br_op_t *op = &w->op;
    uint64_t last = chunk_writer(ec, op) ? w->arena_nchunk : 1;
    int moved = 0, wait = -1;

    while (w->arena_pub < last) {
        uint64_t j = w->arena_pub, k = w->arena_k + j;
        if (!br_arena_writable(ec->arena, ec->rank, k, 0, &wait)) {
            q->wait_peer = wait;
            q->wait_what = "the node arena to be read by";
            break;
        }
        size_t len = chunk_writer(ec, op) ? chunk_len(ec, w, ec->rank, j) : 0;
        br_slot_desc_t d = br_desc_make(op, len);
        /* A Broadcast's non-roots publish no data (their sendbuff may be anything). */
        const char *src =
            len > 0 ? (const char *)op->sendbuff + (size_t)j * ec->arena->max_bytes : NULL;
        br_arena_publish(ec->arena, ec->rank, k, 0, src, len, &d);
        if (len > 0) {
            own_chunk_copy(ec, op, (size_t)j * ec->arena->max_bytes, src, len);
        }
        w->arena_pub++;
        moved++;
    }
    return moved;
}

/* Is chunk j of rank r's input there, and for this call? 1 yes, 0 not yet (waiting
 * noted), -1 a mismatch (recorded). */
static int chunk_ready(br_exec_queue_t *q, br_work_t *w, int r, uint64_t j, size_t want)
{
    br_exec_comm_t *ec = q->ec;
    uint64_t k = w->arena_k + j;

    if (!br_arena_published(ec->arena, r, k, 0)) {
        q->wait_peer = r;
        q->wait_what = "data from";
        return 0;
    }
    const br_slot_desc_t *d = &br_arena_hdr(ec->arena, r, k, 0)->desc;
    br_op_t expect = w->op;
    if (expect.v != NULL) {
        expect.count = expect.v->rcount[r]; /* an AllGatherV's rank r sends its own count */
    }
    if (br_desc_matches(d, &expect) && d->bytes == want) {
        return 1;
    }
    br_desc_mismatch(ec, &expect, r, "published its input for", d);
    return -1;
}

/* Read chunk arena_rd from every rank that has it, once all have published it. */
static int chunk_read(br_exec_queue_t *q, br_work_t *w)
{
    br_exec_comm_t *ec = q->ec;
    const br_op_t *op = &w->op;
    uint64_t j = w->arena_rd;
    size_t len = chunk_len(ec, w, op->root, j), at = (size_t)j * ec->arena->max_bytes;
    int n = ec->nranks;

    for (; w->arena_next < n; w->arena_next++) {
        int r = w->arena_next, ok;
        if (r == ec->rank) {
            continue;
        }
        if (op->func == BR_FUNC_BROADCAST && ec->rank == op->root) {
            ok = chunk_ready(q, w, r, 0, 0); /* the root checks everyone's descriptor */
        } else if (op->func == BR_FUNC_BROADCAST && r != op->root) {
            continue;
        } else {
            ok = chunk_ready(q, w, r, j, chunk_len(ec, w, r, j));
        }
        if (ok <= 0) {
            return ok;
        }
    }
    const br_arena_t *a = ec->arena;
    uint64_t k = w->arena_k + j;
    /* The writer's own part was copied when it published the chunk. */
    if (op->func == BR_FUNC_BROADCAST) {
        if (ec->rank != op->root) {
            br_exec_copy_out(ec, op, (char *)op->recvbuff + at, br_arena_data(a, op->root, k, 0),
                             len);
        }
    } else {
        for (int i = 1; i < n; i++) {
            int r = (ec->rank + i) % n; /* not every rank on rank 0's lines at once */
            size_t rlen = chunk_len(ec, w, r, j);
            if (rlen > 0) {
                br_exec_copy_out(ec, op, (char *)op->recvbuff + out_at(op, r) + at,
                                 br_arena_data(a, r, k, 0), rlen);
            }
        }
    }
    br_arena_done(ec->arena, ec->rank, k);
    w->arena_rd++;
    w->arena_next = 0;
    return 1;
}

/* Broadcast's root "reads" its own chunks (the out-of-place copy) after checking every
 * rank's descriptor once; its `done` advances with them. */
static int arena_chunked(br_exec_queue_t *q, br_work_t *w, int *done_p)
{
    br_exec_comm_t *ec = q->ec;
    int moved = chunk_publish(q, w);

    while (w->arena_rd < w->arena_nchunk) {
        /* A writer reads a chunk only after publishing it, so its peers never wait for it
         * on a chunk it has not offered yet. */
        if (chunk_writer(ec, &w->op) && w->arena_rd >= w->arena_pub) {
            return moved;
        }
        int r = chunk_read(q, w);
        if (r <= 0) {
            return r < 0 ? -1 : moved;
        }
        moved++;
        if (ec->rank == w->op.root && w->op.func == BR_FUNC_BROADCAST) {
            w->arena_next = ec->nranks; /* descriptors were checked with chunk 0 */
        }
        moved += chunk_publish(q, w);
    }
    *done_p = 1;
    return moved > 0 ? moved : 1;
}

/* ---- A failed rank's operation ----
 * The executor (exec_engine.c, fail_unwind) calls these for the operation in flight on
 * the arena queue of a rank that failed (or was abandoned with its group), once it has
 * set its `failed` word. An operation whose buffers peers copy in place (DirectRead, and
 * AlltoAllV's blocks read in place) is withdrawn: its flag stops saying k + 1, so a peer
 * that looks from now on copies nothing and fails naming this rank (every copy from or
 * into another rank's buffer looks at the flag right before it: br_exec_arena_present).
 * A peer that looked before may be copying still: the call returns only once every such
 * peer's `done` passed the operation, or it failed, or its process is gone. */
int br_work_arena_exposed(const br_work_t *w)
{
    return w->kind == BR_WORK_ARENA && w->op.algo == BR_ALGO_DIRECT_READ &&
           (w->arena_phase == 1 || w->arena_phase == 2 || w->arena_phase == 4);
}

void br_work_arena_withdraw(br_exec_comm_t *ec, br_work_t *w)
{
    br_arena_withdraw(ec->arena, ec->rank, w->arena_k, w->arena_small);
    w->arena_phase = 5;
    w->arena_next = w->op.func == BR_FUNC_ALLTOALLV ? 1 : 0; /* as phase 2 starts */
}

int br_work_arena_settle(br_exec_queue_t *q, br_work_t *w, int dead)
{
    int r = w->op.func == BR_FUNC_ALLTOALLV ? br_work_a2av_settle(q, w, dead)
                                             : wait_readers(q, w, 1, dead);
    if (r > 0) {
        w->arena_phase = 6;
    }
    return r;
}

int br_work_arena(br_exec_queue_t *q, br_work_t *w, int *done_p)
{
    br_exec_comm_t *ec = q->ec;
    const br_op_t *op = &w->op;
    int n = ec->nranks, moved = 0;

    if (w->arena_phase == 3) { /* br_exec_defer_settle: only the checks */
        int r = defer_check(ec, q, UINT64_MAX);
        *done_p = r > 0;
        return r;
    }
    if (w->arena_phase == 0 && w->arena_pub == 0) {
        int r = defer_before(q, w);
        if (r <= 0) {
            return r;
        }
    }
    if (op->func == BR_FUNC_ALLTOALLV) {
        return br_work_a2av(q, w, done_p);
    }
    if (op->algo == BR_ALGO_ONESHOT && (w->arena_nchunk > 1 || op->v != NULL)) {
        return arena_chunked(q, w, done_p); /* AllGatherV: chunked whatever its size */
    }

    if (w->arena_phase == 2 || w->arena_phase == 4) {
        return direct_rest(q, w, done_p);
    }
    if (w->arena_phase == 0) {
        w->arena_defer = defer_can(ec, w);
        if (!publish(q, w)) {
            return 0;
        }
        moved = 1;
    }
    for (; w->arena_next < n; w->arena_next++) {
        int r = w->arena_next;
        if (r != ec->rank && needs(ec, w, r) &&
            !br_arena_published(ec->arena, r, w->arena_k, w->arena_small)) {
            q->wait_peer = r;
            q->wait_what = "data from";
            return br_exec_arena_gone(ec, w, r) < 0 ? -1 : moved;
        }
    }
    for (int r = 0; r < n; r++) {
        if (r != ec->rank && needs(ec, w, r) &&
            check_input(ec, op, w->arena_k, w->arena_small, r, "published its input for") != 0) {
            return -1;
        }
    }
    if (op->algo == BR_ALGO_ONESHOT) {
        oneshot_output(ec, w);
    } else if (direct_output(ec, w) != 0) {
        return -1;
    }
    if (w->arena_defer) {
        if (defer_add(ec, w) != 0) {
            return -1;
        }
        *done_p = 1;
        return moved + 1;
    }
    /* DirectRead: an AllReduce goes on to read the others' parts; an owner waits for its
     * readers, and a Broadcast reader for the root's writes into its output if it makes
     * any (read before `done` lets the root's slot go). */
    int phase = op->algo != BR_ALGO_DIRECT_READ        ? 0
                : op->func == BR_FUNC_ALLREDUCE        ? 4
                : op->func == BR_FUNC_ALLGATHER || ec->rank == op->root || root_split(ec, w) > 0
                    ? 2
                    : 0;
    br_arena_done(ec->arena, ec->rank, w->arena_k);
    if (phase != 0) {
        w->arena_phase = phase;
        w->arena_next = phase == 4 ? 1 : 0;
        return direct_rest(q, w, done_p) < 0 ? -1 : moved + 1;
    }
    *done_p = 1;
    return moved + 1;
}
