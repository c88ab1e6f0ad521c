/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The primitives and the algorithms built from them. A ring collective runs, per channel
 * and per iteration, a fixed list of steps; each step moves one chunk (at most one FIFO
 * slot) and combines some of: receive from the previous rank, reduce with the local
 * input, copy to the output, send to the next rank. Which chunk a step handles follows
 * NCCL's ring schedules (reduce-scatter then all-gather for AllReduce; chains starting or
 * ending at the root for Broadcast and Reduce). Send/recv move a byte stream through
 * the peer connection, one slot per step.
 *
 * A step runs only when its counters allow (a filled slot to receive, a free slot to
 * send), so it never blocks. Every slot carries a descriptor of the call it belongs to;
 * the receiver checks it and reports mismatched calls instead of corrupting data.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>

#include "exec_int.h"
#include "util.h"

#define BR_MIN_SLICE ((size_t)64 << 10) /* smallest slot a pipelined step is cut into */

enum { P_RECV = 1, P_REDUCE = 2, P_COPY = 4, P_SEND = 8, P_POST = 16, P_LOCAL = 32 };

static int is_reduction(br_func_t func)
{
    return func == BR_FUNC_ALLREDUCE || func == BR_FUNC_REDUCESCATTER || func == BR_FUNC_REDUCE;
}

/* dst = the inputs of every rank, rank r's at first + r * stride, folded in rank order. */
static void fold_ranks(void *dst, const char *first, size_t stride, int n, const br_op_t *op)
{
    int r = 1;
    if (op->redop.kind == BR_RED_PREMULSUM) {
        /* Every input is scaled, and br_reduce scales only its local operand. */
        br_reduce(dst, NULL, first, op->count, &op->redop, 0);
    } else {
        /* Ranks 0 and 1 in one pass (the ops are commutative, bit for bit). */
        br_reduce(dst, first, first + stride, op->count, &op->redop, n == 2 ? BR_REDUCE_POST : 0);
        r = 2;
    }
    for (; r < n; r++) {
        br_reduce(dst, dst, first + (size_t)r * stride, op->count, &op->redop,
                  r == n - 1 ? BR_REDUCE_POST : 0);
    }
}

static int mod(int a, int n)
{
    return ((a % n) + n) % n;
}

void br_work_ring_init(br_work_t *w, const br_exec_comm_t *ec, int ch, int nch)
{
    const br_op_t *op = &w->op;
    size_t tsize = br_type_size(op->type);
    int n = ec->nranks;

    w->kind = BR_WORK_RING;
    w->ch = ch;
    /* Data that is only moved is cut in bytes; reduced data in elements. */
    w->esize = is_reduction(op->func) ? tsize : 1;
    w->units = is_reduction(op->func) ? op->count : op->count * tsize;
    br_plan_channel_range(w->units, nch, ch, &w->lo, &w->hi);
    w->slice = ec->ring_send[ch]->step_size / w->esize;
    /* Cut what one step moves into at least ec->pipeline slots (of at least
     * BR_MIN_SLICE bytes): a mid-size call that fits one slot would otherwise copy in,
     * transfer and copy out one after the other, with nothing overlapping. */
    if (ec->pipeline > 1) {
        size_t per = w->hi - w->lo;
        if (op->func == BR_FUNC_ALLREDUCE) {
            per = (per + (size_t)n - 1) / (size_t)n;
        }
        size_t want = per / (size_t)ec->pipeline;
        size_t floor_units = BR_MIN_SLICE / w->esize;
        want = want > floor_units ? want : floor_units;
        w->slice = want < w->slice ? want : w->slice;
    }
    w->base = w->lo;
    w->j = 0;
    switch (op->func) {
    case BR_FUNC_ALLREDUCE: w->nsteps = 2 * n - 1; break;
    case BR_FUNC_ALLGATHER:
    case BR_FUNC_REDUCESCATTER: w->nsteps = n; break;
    default: w->nsteps = 1; break;
    }
    w->chunk = 0;
}

int br_work_gather_fits(const br_exec_comm_t *ec, const br_op_t *op)
{
    size_t bytes = op->count * br_type_size(op->type);
    size_t cap = (size_t)BR_PARAM_INT(ONESHOT_BYTES);
    if (op->func != BR_FUNC_ALLREDUCE || ec->nranks < 2 || ec->ring_send[0] == NULL) {
        return 0;
    }
    /* Every rank forwards n - 1 inputs instead of 2(n - 1)/n of one: worth it while hops,
     * not bytes, cost the time. One FIFO slot each keeps it to one iteration. */
    cap = cap < BR_GATHER_MAX ? cap : BR_GATHER_MAX;
    return bytes > 0 && bytes <= cap && bytes <= ec->ring_send[0]->step_size;
}

void br_work_gather_init(br_work_t *w, const br_exec_comm_t *ec, char *scratch)
{
    w->kind = BR_WORK_RING;
    w->ch = 0;
    w->gather = 1;
    w->scratch = scratch;
    w->esize = 1;
    w->units = w->op.count * br_type_size(w->op.type);
    w->lo = w->base = 0;
    w->hi = w->units;
    w->slice = ec->ring_send[0]->step_size;
    w->j = 0;
    w->nsteps = ec->nranks;
    w->chunk = 0;
}

/* Chunk size of the iteration starting at w->base. */
static void ring_iteration_begin(br_work_t *w, int n)
{
    size_t left = w->hi - w->base;
    if (w->op.func == BR_FUNC_ALLREDUCE && !w->gather) {
        size_t per = (left + (size_t)n - 1) / (size_t)n;
        w->chunk = per < w->slice ? per : w->slice;
    } else {
        w->chunk = left < w->slice ? left : w->slice;
    }
}

/* Which primitive step j is, and which chunk it handles. r and the root are positions
 * on the ring (the ring need not follow rank order: ranks of a host are adjacent), and so
 * is the chunk index; ring_chunk_place() maps it to a rank's block where that matters. */
static int ring_step_kind(const br_work_t *w, int n, int r, int root, int j, int *chunk_p)
{
    switch (w->gather ? BR_FUNC_ALLGATHER : w->op.func) {
    case BR_FUNC_ALLREDUCE:
        if (j == 0) {
            *chunk_p = mod(r - 1, n);
            return P_SEND;
        }
        if (j < n - 1) {
            *chunk_p = mod(r - 1 - j, n);
            return P_RECV | P_REDUCE | P_SEND;
        }
        if (j == n - 1) {
            *chunk_p = r;
            return P_RECV | P_REDUCE | P_COPY | P_SEND | P_POST;
        }
        *chunk_p = mod(r - j + n - 1, n);
        return j < 2 * n - 2 ? (P_RECV | P_COPY | P_SEND) : (P_RECV | P_COPY);
    case BR_FUNC_REDUCESCATTER:
        if (j == 0) {
            *chunk_p = mod(r - 1, n);
            return P_SEND;
        }
        *chunk_p = mod(r - 1 - j, n);
        return j < n - 1 ? (P_RECV | P_REDUCE | P_SEND) : (P_RECV | P_REDUCE | P_COPY | P_POST);
    case BR_FUNC_ALLGATHER:
        *chunk_p = mod(r - j, n);
        if (j == 0) {
            return P_LOCAL | P_SEND;
        }
        return j < n - 1 ? (P_RECV | P_COPY | P_SEND) : (P_RECV | P_COPY);
    case BR_FUNC_BROADCAST: {
        int pos = mod(r - root, n);
        *chunk_p = 0;
        if (pos == 0) {
            return P_LOCAL | P_SEND;
        }
        return pos < n - 1 ? (P_RECV | P_COPY | P_SEND) : (P_RECV | P_COPY);
    }
    default: { /* Reduce: the chain starts after the root and ends at it. */
        int pos = mod(r - root - 1, n);
        *chunk_p = 0;
        if (pos == 0) {
            return P_SEND;
        }
        return pos < n - 1 ? (P_RECV | P_REDUCE | P_SEND) : (P_RECV | P_REDUCE | P_COPY | P_POST);
    }
    }
}

/* Input and output offsets (in units) and length of chunk k of this iteration. */
static void ring_chunk_place(const br_exec_comm_t *ec, const br_work_t *w, int k, size_t *in_p,
                             size_t *out_p, size_t *len_p)
{
    size_t len = w->chunk, off;
    switch (w->gather ? BR_FUNC_ALLGATHER : w->op.func) {
    case BR_FUNC_ALLREDUCE:
        off = w->base + (size_t)k * w->chunk;
        if (off >= w->hi) {
            len = 0;
            off = w->hi;
        } else if (off + len > w->hi) {
            len = w->hi - off;
        }
        *in_p = *out_p = off;
        break;
    case BR_FUNC_REDUCESCATTER: /* chunk k is the block of the rank at position k */
        *in_p = (size_t)ec->ring_rank[k] * w->units + w->base;
        *out_p = w->base;
        break;
    case BR_FUNC_ALLGATHER:
        *in_p = w->base;
        *out_p = (size_t)ec->ring_rank[k] * w->units + w->base;
        break;
    default: *in_p = *out_p = w->base; break;
    }
    *len_p = len;
}

static uint32_t desc_type_word(const br_op_t *op)
{
    return (uint32_t)op->type | ((uint32_t)op->redop.kind << 8) |
           ((uint32_t)(op->root & 0xffff) << 16);
}

static void desc_describe(char *buf, size_t len, const br_slot_desc_t *d)
{
    snprintf(buf, len, "%s #%llu (count %llu, %s)", br_func_name((br_func_t)d->func),
             (unsigned long long)(d->seq - 1), (unsigned long long)d->count,
             br_type_name((ncclDataType_t)(d->type & 0xff)));
}

/* Check a received slot's descriptor against what this rank expects. */
static int check_desc(br_exec_queue_t *q, const br_work_t *w, const br_conn_t *rc,
                      const br_slot_desc_t *d, size_t bytes)
{
    br_exec_comm_t *ec = q->ec;
    const br_op_t *op = &w->op;
    char theirs[160];

    if (d->seq != 0) {
        int p2p = w->kind == BR_WORK_RECV;
        uint32_t func = p2p ? BR_FUNC_SEND : (uint32_t)op->func;
        uint32_t type = p2p ? (uint32_t)op->type : desc_type_word(op);
        uint32_t their_type = p2p ? (d->type & 0xff) : d->type;
        if (d->seq != op->seq + 1 || d->func != func || d->count != op->count ||
            their_type != type) {
            desc_describe(theirs, sizeof(theirs), d);
            br_exec_fail(ec, ncclInvalidUsage,
                         "mismatched calls: rank %d is in %s #%llu (count %zu, %s, %s, root %d) "
                         "but rank %d sent data for %s%s",
                         ec->rank, br_func_name(op->func), (unsigned long long)op->seq, op->count,
                         br_type_name(op->type), br_red_kind_name(op->redop.kind), op->root,
                         rc->peer, theirs,
                         p2p ? " (a send must match a recv of the same count and type)" : "");
            return -1;
        }
    }
    if (d->bytes != bytes) {
        br_exec_fail(ec, ncclInvalidUsage,
                     "mismatched calls: rank %d expected %zu bytes from rank %d for %s #%llu "
                     "(count %zu, %s) but received %llu",
                     ec->rank, bytes, rc->peer, br_func_name(op->func), (unsigned long long)op->seq,
                     op->count, br_type_name(op->type), (unsigned long long)d->bytes);
        return -1;
    }
    return 0;
}

static inline int recv_ready(br_conn_t *c)
{
    /* Acquire pairs with the sender's release of tail: the slot is complete. */
    return atomic_load_explicit(&c->ctrl->tail, memory_order_acquire) > c->step;
}

static inline int send_ready(br_conn_t *c)
{
    /* Acquire pairs with the receiver's release of head: it finished reading the slot. */
    return atomic_load_explicit(&c->ctrl->head, memory_order_acquire) + BR_STEPS > c->step;
}

static inline char *slot_of(br_conn_t *c)
{
    return c->buf + (size_t)(c->step % BR_STEPS) * c->stride;
}

static inline void send_post(br_conn_t *c, const br_slot_desc_t *d)
{
    c->ctrl->slot[c->step % BR_STEPS] = *d;
    /* Release: the slot's data and descriptor are visible before the new tail. */
    atomic_store_explicit(&c->ctrl->tail, ++c->step, memory_order_release);
}

static inline void recv_post(br_conn_t *c)
{
    /* Release: our reads of the slot are done before the sender may reuse it. */
    atomic_store_explicit(&c->ctrl->head, ++c->step, memory_order_release);
}

/* One ring step; returns 1 done, 0 blocked, -1 error. */
static int ring_step(br_exec_queue_t *q, br_work_t *w)
{
    br_exec_comm_t *ec = q->ec;
    br_conn_t *rc = ec->ring_recv[w->ch], *sc = ec->ring_send[w->ch];
    const br_op_t *op = &w->op;
    int k, flags = ring_step_kind(w, ec->nranks, ec->ring_pos, ec->ring_pos_of[op->root], w->j, &k);
    size_t in_off, out_off, len;

    if ((flags & P_RECV) && !recv_ready(rc)) {
        q->wait_peer = rc->peer;
        q->wait_what = "data from";
        return 0;
    }
    if ((flags & P_SEND) && !send_ready(sc)) {
        q->wait_peer = sc->peer;
        q->wait_what = "free FIFO space at";
        return 0;
    }
    ring_chunk_place(ec, w, k, &in_off, &out_off, &len);
    size_t bytes = len * w->esize;
    /* Ranks that do not read the input or write the output may pass NULL for them. */
    const char *in = op->sendbuff != NULL ? (const char *)op->sendbuff + in_off * w->esize : NULL;
    char *outbase = w->gather ? w->scratch : (char *)op->recvbuff;
    char *out = outbase != NULL ? outbase + out_off * w->esize : NULL;
    char *rslot = (flags & P_RECV) ? slot_of(rc) : NULL;
    char *sslot = (flags & P_SEND) ? slot_of(sc) : NULL;

    if (rslot != NULL && check_desc(q, w, rc, &rc->ctrl->slot[rc->step % BR_STEPS], bytes) != 0) {
        return -1;
    }
    if (flags & P_REDUCE) {
        /* Received partial result (+) this rank's contribution. */
        char *dst = (flags & P_COPY) ? out : sslot;
        br_reduce(dst, rslot, in, len, &op->redop, (flags & P_POST) ? BR_REDUCE_POST : 0);
        if ((flags & P_COPY) && sslot != NULL) {
            memcpy(sslot, out, bytes);
        }
    } else if (flags & P_RECV) {
        if (flags & P_COPY) {
            memcpy(out, rslot, bytes);
        }
        if (sslot != NULL) {
            memcpy(sslot, rslot, bytes);
        }
    } else if (is_reduction(op->func) && !w->gather) {
        /* First contributor of a reduction chain: scaled input for PreMulSum. */
        br_reduce(sslot, NULL, in, len, &op->redop, 0);
    } else {
        if ((flags & P_LOCAL) && out != in) {
            memcpy(out, in, bytes);
        }
        memcpy(sslot, in, bytes);
    }
    if (rslot != NULL) {
        recv_post(rc);
    }
    if (sslot != NULL) {
        br_slot_desc_t d = {bytes, op->seq + 1, op->count, (uint32_t)op->func, desc_type_word(op)};
        send_post(sc, &d);
    }
    return 1;
}

static int ring_work(br_exec_queue_t *q, br_work_t *w, int *done_p)
{
    int moved = 0, n = q->ec->nranks;
    while (w->base < w->hi) {
        if (w->j == 0 && w->chunk == 0) {
            ring_iteration_begin(w, n);
        }
        int r = ring_step(q, w);
        if (r <= 0) {
            return r < 0 ? -1 : moved;
        }
        moved++;
        if (++w->j == w->nsteps) {
            w->j = 0;
            w->base +=
                w->op.func == BR_FUNC_ALLREDUCE && !w->gather ? (size_t)n * w->chunk : w->chunk;
            w->chunk = 0;
        }
    }
    if (w->gather) {
        fold_ranks(w->op.recvbuff, w->scratch, w->units, n, &w->op);
    }
    *done_p = 1;
    return moved;
}

static int send_work(br_exec_queue_t *q, br_work_t *w, int *done_p)
{
    br_conn_t *c = w->conn;
    int moved = 0;
    while (w->off < w->bytes) {
        if (!send_ready(c)) {
            q->wait_peer = c->peer;
            q->wait_what = "free FIFO space at";
            return moved;
        }
        size_t n = w->bytes - w->off < c->step_size ? w->bytes - w->off : c->step_size;
        memcpy(slot_of(c), (const char *)w->op.sendbuff + w->off, n);
        br_slot_desc_t d = {n, w->op.seq + 1, w->op.count, BR_FUNC_SEND, (uint32_t)w->op.type};
        send_post(c, &d);
        w->off += n;
        moved++;
    }
    *done_p = 1;
    return moved;
}

static int recv_work(br_exec_queue_t *q, br_work_t *w, int *done_p)
{
    br_conn_t *c = w->conn;
    int moved = 0;
    while (w->off < w->bytes) {
        if (!recv_ready(c)) {
            q->wait_peer = c->peer;
            q->wait_what = "data from";
            return moved;
        }
        size_t n = w->bytes - w->off < c->step_size ? w->bytes - w->off : c->step_size;
        if (check_desc(q, w, c, &c->ctrl->slot[c->step % BR_STEPS], n) != 0) {
            return -1;
        }
        memcpy((char *)w->op.recvbuff + w->off, slot_of(c), n);
        recv_post(c);
        w->off += n;
        moved++;
    }
    *done_p = 1;
    return moved;
}

/* ---- One hop through the node arena ----
 * Every rank publishes its whole input for operation k in its buffer k % 2, then reads
 * every other rank's and computes its output locally. Reductions fold the inputs in rank
 * order 0..n-1 on every rank, so every rank gets bit-identical results. */

#define BR_FLAT_TWO_RANK_MAX (16 * 1024)

/* Bytes `rank` publishes for op (0 when it contributes nothing). */
static size_t flat_publish_bytes(const br_exec_comm_t *ec, const br_op_t *op, int rank)
{
    size_t bytes = op->count * br_type_size(op->type);
    switch (op->func) {
    case BR_FUNC_BROADCAST: return rank == op->root ? bytes : 0;
    case BR_FUNC_REDUCESCATTER: return bytes * (size_t)ec->nranks;
    default: return bytes;
    }
}

/* The call's size as every rank sees it (ReduceScatter: the whole input). */
static size_t flat_call_bytes(const br_exec_comm_t *ec, const br_op_t *op)
{
    size_t bytes = op->count * br_type_size(op->type);
    return op->func == BR_FUNC_REDUCESCATTER ? bytes * (size_t)ec->nranks : bytes;
}

int br_work_flat_direct(const br_exec_comm_t *ec, const br_op_t *op)
{
    if (ec->flat == NULL || ec->flat->cma_bytes == 0 ||
        (op->func != BR_FUNC_ALLGATHER && op->func != BR_FUNC_BROADCAST)) {
        return 0;
    }
    size_t bytes = op->count * br_type_size(op->type);
    return bytes >= ec->flat->cma_bytes && (ec->flat->cma_max == 0 || bytes <= ec->flat->cma_max);
}

int br_work_flat_fits(const br_exec_comm_t *ec, const br_op_t *op)
{
    if (ec->flat == NULL || !br_func_is_collective(op->func)) {
        return 0;
    }
    if (br_work_flat_direct(ec, op)) {
        return 1;
    }
    /* Decided on the call's arguments alone, so every rank decides alike. */
    size_t bytes = flat_call_bytes(ec, op);
    /* Two ranks' ring is already short: from 16 KiB up it moves data faster than the
     * arena (measured; docs/performance.md). With more ranks every hop saved counts. */
    if (ec->nranks == 2 && bytes > BR_FLAT_TWO_RANK_MAX) {
        return 0;
    }
    return bytes <= ec->flat->max_bytes;
}

static int flat_check_desc(br_exec_queue_t *q, const br_work_t *w, int peer,
                           const br_slot_desc_t *d)
{
    br_exec_comm_t *ec = q->ec;
    const br_op_t *op = &w->op;
    size_t want = flat_publish_bytes(ec, op, peer);
    char theirs[160];

    if (d->seq == op->seq + 1 && d->func == (uint32_t)op->func && d->count == op->count &&
        d->type == desc_type_word(op) && d->bytes == want) {
        return 0;
    }
    desc_describe(theirs, sizeof(theirs), d);
    br_exec_fail(ec, ncclInvalidUsage,
                 "mismatched calls: rank %d is in %s #%llu (count %zu, %s, %s, root %d) but rank "
                 "%d published its input for %s",
                 ec->rank, br_func_name(op->func), (unsigned long long)op->seq, op->count,
                 br_type_name(op->type), br_red_kind_name(op->redop.kind), op->root, peer, theirs);
    return -1;
}

/* dst = inputs of every rank in the arena folded in rank order (element offset `at`). */
static void flat_fold(const br_exec_comm_t *ec, const br_work_t *w, void *dst, size_t at)
{
    const br_flat_t *f = ec->flat;
    const br_op_t *op = &w->op;
    size_t off = at * br_type_size(op->type);

    fold_ranks(dst, br_flat_buf(f, 0, w->flat_k, w->flat_small) + off, f->stride, ec->nranks, op);
}

static void flat_output(const br_exec_comm_t *ec, const br_work_t *w)
{
    const br_flat_t *f = ec->flat;
    const br_op_t *op = &w->op;
    size_t bytes = op->count * br_type_size(op->type);
    int n = ec->nranks, me = ec->rank;

    switch (op->func) {
    case BR_FUNC_ALLREDUCE: flat_fold(ec, w, op->recvbuff, 0); break;
    case BR_FUNC_REDUCE:
        if (me == op->root) {
            flat_fold(ec, w, op->recvbuff, 0);
        }
        break;
    case BR_FUNC_REDUCESCATTER: flat_fold(ec, w, op->recvbuff, (size_t)me * op->count); break;
    case BR_FUNC_ALLGATHER:
        for (int r = 0; r < n; r++) {
            memcpy((char *)op->recvbuff + (size_t)r * bytes,
                   br_flat_buf(f, r, w->flat_k, w->flat_small), bytes);
        }
        break;
    default: /* Broadcast */
        if (op->recvbuff != op->sendbuff || me != op->root) {
            memcpy(op->recvbuff, br_flat_buf(f, op->root, w->flat_k, w->flat_small), bytes);
        }
        break;
    }
}

/* Does this rank need rank r's input? Broadcast needs only the root's, and a Reduce's
 * non-roots need nothing (they publish and go, as a root's send is eager). */
static int flat_needs(const br_exec_comm_t *ec, const br_op_t *op, int r)
{
    switch (op->func) {
    case BR_FUNC_BROADCAST: return r == op->root;
    case BR_FUNC_REDUCE: return ec->rank == op->root;
    default: return 1;
    }
}

/* ---- Single copy: inputs read in place ----
 * A large AllGather or Broadcast on one host. Each rank publishes only where its input
 * is (its address, in a small slot); every rank that needs it copies it straight from the
 * owner's memory (process_vm_readv between processes, memcpy within one), then sets its
 * `done`; the owner returns only when all its readers are done, since the user may reuse
 * the buffer after that. One copy per byte instead of two through a FIFO, and no
 * per-slot handshakes. */

#define BR_CMA_CHUNK ((size_t)1 << 20) /* per process_vm_readv call (measured best here) */

/* Copy the `bytes` of rank r's published input to dst. */
static int flat_read_peer(br_exec_queue_t *q, const br_work_t *w, int r, char *dst, size_t bytes)
{
    br_exec_comm_t *ec = q->ec;
    const br_peer_info_t *pi = &ec->tc->peers[r];
    uint64_t addr;

    memcpy(&addr, br_flat_buf(ec->flat, r, w->flat_k, 1), sizeof(addr));
    const char *src = (const char *)(uintptr_t)addr;
    if (pi->pid_hash == ec->tc->peers[ec->rank].pid_hash) {
        memcpy(dst, src, bytes);
        return 0;
    }
    for (size_t done = 0; done < bytes;) {
        size_t n = bytes - done < BR_CMA_CHUNK ? bytes - done : BR_CMA_CHUNK;
        struct iovec local = {dst + done, n};
        struct iovec remote = {(void *)(src + done), n};
        ssize_t got = process_vm_readv(pi->pid, &local, 1, &remote, 1, 0);
        if (got > 0) {
            done += (size_t)got;
            continue;
        }
        if (got < 0 && errno == EINTR) {
            continue;
        }
        int err = got < 0 ? errno : EIO;
        ncclResult_t res = err == EFAULT  ? ncclInvalidArgument
                           : err == ESRCH ? ncclRemoteError
                                          : ncclSystemError;
        br_exec_fail(
            ec, res,
            "rank %d: %s #%llu (count %zu, %s): reading rank %d's buffer %p (pid %d on %s) "
            "into %p failed at byte %zu of %zu: %s%s",
            ec->rank, br_func_name(w->op.func), (unsigned long long)w->op.seq, w->op.count,
            br_type_name(w->op.type), r, (const void *)src, pi->pid, pi->host, (void *)dst, done,
            bytes, strerror(err),
            err == EFAULT  ? " (one of the two buffers is not valid for the call's count)"
            : err == ESRCH ? " (the rank's process is gone)"
                           : "");
        return -1;
    }
    return 0;
}

/* The local part and the reads of a single-copy operation, once every input it needs is
 * published. */
static int flat_direct_output(br_exec_queue_t *q, const br_work_t *w)
{
    const br_op_t *op = &w->op;
    size_t bytes = op->count * br_type_size(op->type);
    int n = q->ec->nranks, me = q->ec->rank;

    if (op->func == BR_FUNC_BROADCAST) {
        if (me != op->root) {
            return flat_read_peer(q, w, op->root, op->recvbuff, bytes);
        }
        if (op->recvbuff != op->sendbuff) {
            memcpy(op->recvbuff, op->sendbuff, bytes);
        }
        return 0;
    }
    char *mine = (char *)op->recvbuff + (size_t)me * bytes;
    if (mine != op->sendbuff) {
        memcpy(mine, op->sendbuff, bytes);
    }
    /* Start after ourselves, so the ranks do not all read rank 0 first. */
    for (int i = 1; i < n; i++) {
        int r = (me + i) % n;
        if (flat_read_peer(q, w, r, (char *)op->recvbuff + (size_t)r * bytes, bytes) != 0) {
            return -1;
        }
    }
    return 0;
}

/* Do the other ranks read this rank's input in place (so it must wait for them)? */
static int flat_direct_has_readers(const br_exec_comm_t *ec, const br_op_t *op)
{
    return op->func == BR_FUNC_ALLGATHER || ec->rank == op->root;
}

/* Phase 2 of a single-copy operation: wait until every reader is done with our input. */
static int flat_direct_wait_readers(br_exec_queue_t *q, br_work_t *w)
{
    br_exec_comm_t *ec = q->ec;
    for (; w->flat_next < ec->nranks; w->flat_next++) {
        int r = w->flat_next;
        /* Acquire pairs with the reader's release of done after its last read. */
        if (r != ec->rank && atomic_load_explicit(&br_flat_ctrl(ec->flat, r)->done,
                                                  memory_order_acquire) < w->flat_k + 1) {
            q->wait_peer = r;
            q->wait_what = "its input to be read by";
            return 0;
        }
    }
    return 1;
}

static int flat_work(br_exec_queue_t *q, br_work_t *w, int *done_p)
{
    br_exec_comm_t *ec = q->ec;
    const br_flat_t *f = ec->flat;
    const br_op_t *op = &w->op;
    uint64_t k = w->flat_k;
    int n = ec->nranks, moved = 0;
    /* Decided on the call's arguments alone, so writer and readers pick the same slot. */
    int small = w->flat_direct || flat_call_bytes(ec, op) <= BR_FLAT_SMALL_MAX;
    uint64_t window = small ? BR_FLAT_NSMALL : BR_FLAT_NBUF;

    w->flat_small = small;
    if (w->flat_phase == 2) {
        if (!flat_direct_wait_readers(q, w)) {
            return 0;
        }
        *done_p = 1;
        return 1;
    }
    if (w->flat_phase == 0) {
        /* Our buffer for k last held operation k - NBUF: everyone must be done reading it.
         * Acquire pairs with each reader's release of done. */
        if (f->min_done + window <= k) {
            uint64_t low = UINT64_MAX;
            for (int r = 0; r < n; r++) {
                uint64_t d = r == ec->rank ? k
                                           : atomic_load_explicit(&br_flat_ctrl(f, r)->done,
                                                                  memory_order_acquire);
                if (d + window <= k) {
                    q->wait_peer = r;
                    q->wait_what = "the node arena to be read by";
                    return 0;
                }
                low = d < low ? d : low;
            }
            ec->flat->min_done = low;
        }
        br_flat_hdr_t *h = br_flat_hdr(f, ec->rank, k, small);
        size_t bytes = flat_publish_bytes(ec, op, ec->rank);
        if (w->flat_direct) {
            uint64_t addr = (uint64_t)(uintptr_t)op->sendbuff;
            memcpy(br_flat_buf(f, ec->rank, k, small), &addr, sizeof(addr));
        } else if (bytes > 0) {
            memcpy(br_flat_buf(f, ec->rank, k, small), op->sendbuff, bytes);
        }
        br_slot_desc_t d = {bytes, op->seq + 1, op->count, (uint32_t)op->func, desc_type_word(op)};
        h->desc = d;
        /* Release: the input and its descriptor are visible before the flag. */
        atomic_store_explicit(&h->flag, k + 1, memory_order_release);
        w->flat_phase = 1;
        w->flat_next = 0;
        moved = 1;
    }
    for (; w->flat_next < n; w->flat_next++) {
        int r = w->flat_next;
        /* Acquire pairs with the writer's release: its input and descriptor are complete.
         * The flag only grows on a buffer, and cannot pass k + 1 before we set done. */
        if (r != ec->rank && flat_needs(ec, op, r) &&
            atomic_load_explicit(&br_flat_hdr(f, r, k, small)->flag, memory_order_acquire) !=
                k + 1) {
            q->wait_peer = r;
            q->wait_what = "data from";
            return moved;
        }
    }
    for (int r = 0; r < n; r++) {
        if (r != ec->rank && flat_needs(ec, op, r) &&
            flat_check_desc(q, w, r, &br_flat_hdr(f, r, k, small)->desc) != 0) {
            return -1;
        }
    }
    if (!w->flat_direct) {
        flat_output(ec, w);
    } else if (flat_direct_output(q, w) != 0) {
        return -1;
    }
    /* Release: our reads of every buffer are done before writers may reuse them. */
    atomic_store_explicit(&br_flat_ctrl(f, ec->rank)->done, k + 1, memory_order_release);
    if (w->flat_direct && flat_direct_has_readers(ec, op)) {
        w->flat_phase = 2;
        w->flat_next = 0;
        if (!flat_direct_wait_readers(q, w)) {
            return moved + 1;
        }
    }
    *done_p = 1;
    return moved + 1;
}

/* Was collective `seq` run by a peer through the other path? (Different arguments made
 * the ranks decide differently between ring and node arena.) */
int br_work_probe_mismatch(br_exec_queue_t *q, const br_work_t *w)
{
    br_exec_comm_t *ec = q->ec;
    const br_op_t *op = &w->op;
    char theirs[160];

    if (ec->flat == NULL || (w->kind != BR_WORK_RING && w->kind != BR_WORK_FLAT)) {
        return 0;
    }
    if (w->kind == BR_WORK_RING) {
        for (int r = 0; r < ec->nranks; r++) {
            for (uint64_t p = 0; p < BR_FLAT_NBUF + BR_FLAT_NSMALL && r != ec->rank; p++) {
                int small = p >= BR_FLAT_NBUF;
                const br_flat_hdr_t *h =
                    br_flat_hdr(ec->flat, r, small ? p - BR_FLAT_NBUF : p, small);
                if (atomic_load_explicit(&h->flag, memory_order_acquire) == 0 ||
                    h->desc.seq != op->seq + 1) {
                    continue;
                }
                desc_describe(theirs, sizeof(theirs), &h->desc);
                br_exec_fail(ec, ncclInvalidUsage,
                             "mismatched calls: rank %d is in %s #%llu (count %zu, %s) but rank %d "
                             "is in %s",
                             ec->rank, br_func_name(op->func), (unsigned long long)op->seq,
                             op->count, br_type_name(op->type), r, theirs);
                return 1;
            }
        }
        return 0;
    }
    /* Different sizes can put one operation in a small slot on one rank and a large
     * buffer on another: then the peer's input is in the slot we do not read. */
    for (int r = 0; r < ec->nranks; r++) {
        const br_flat_hdr_t *h = br_flat_hdr(ec->flat, r, w->flat_k, !w->flat_small);
        if (r != ec->rank &&
            atomic_load_explicit(&h->flag, memory_order_acquire) == w->flat_k + 1 &&
            h->desc.seq == op->seq + 1) {
            return flat_check_desc(q, w, r, &h->desc) != 0;
        }
    }
    for (int c = 0; c < ec->nchannels; c++) {
        br_conn_t *rc = ec->ring_recv[c];
        if (rc == NULL || !recv_ready(rc)) {
            continue;
        }
        const br_slot_desc_t *d = &rc->ctrl->slot[rc->step % BR_STEPS];
        if (d->seq == op->seq + 1) {
            desc_describe(theirs, sizeof(theirs), d);
            br_exec_fail(ec, ncclInvalidUsage,
                         "mismatched calls: rank %d is in %s #%llu (count %zu, %s) but rank %d "
                         "sent data for %s",
                         ec->rank, br_func_name(op->func), (unsigned long long)op->seq, op->count,
                         br_type_name(op->type), rc->peer, theirs);
            return 1;
        }
    }
    return 0;
}

/* A rank's own part: single-rank collectives and sends to itself. */
static int copy_work(br_work_t *w, int *done_p)
{
    const br_op_t *op = &w->op;
    if (is_reduction(op->func)) {
        br_reduce(op->recvbuff, NULL, op->sendbuff, op->count, &op->redop, BR_REDUCE_POST);
    } else if (w->bytes > 0 && op->recvbuff != w->copy_src) {
        memmove(op->recvbuff, w->copy_src, w->bytes);
    }
    *done_p = 1;
    return 1;
}

int br_work_step(br_exec_queue_t *q, br_work_t *w, int *done_p)
{
    switch (w->kind) {
    case BR_WORK_RING: return ring_work(q, w, done_p);
    case BR_WORK_SEND: return send_work(q, w, done_p);
    case BR_WORK_RECV: return recv_work(q, w, done_p);
    case BR_WORK_FLAT: return flat_work(q, w, done_p);
    default: return copy_work(w, done_p);
    }
}
