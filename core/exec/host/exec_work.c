/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Work items other than schedules and the arena: send/recv move a byte stream through the
 * peer connection one slot per step, and a copy does a rank's own part. Also the call
 * descriptor that travels with every slot: the receiver checks it and reports mismatched
 * calls instead of corrupting data, and while a work item waits, the probe looks for the
 * same collective on a path this rank is not reading (different arguments made the ranks
 * choose differently).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "exec_int.h"
#include "util.h"

static uint32_t desc_type_word(const br_op_t *op)
{
    return (uint32_t)op->type | ((uint32_t)op->redop.kind << 8) |
           ((uint32_t)(op->root & 0xffff) << 16);
}

static uint32_t desc_func_word(const br_op_t *op)
{
    return (uint32_t)op->func | ((uint32_t)op->algo << 8) | ((uint32_t)op->proto << 16);
}

br_slot_desc_t br_desc_make(const br_op_t *op, size_t bytes)
{
    br_slot_desc_t d = {bytes, op->seq + 1, op->count, desc_func_word(op), desc_type_word(op)};
    if (op->func == BR_FUNC_SEND) {
        d.type = (uint32_t)op->type;
    }
    return d;
}

void br_desc_describe(char *buf, size_t len, const br_slot_desc_t *d)
{
    br_func_t func = (br_func_t)(d->func & 0xff);
    char what[64] = "";

    /* The reduction and root words are part of the call only where the function has them. */
    if (func == BR_FUNC_ALLREDUCE || func == BR_FUNC_REDUCE || func == BR_FUNC_REDUCESCATTER ||
        func == BR_FUNC_REDUCESCATTERV) {
        snprintf(what, sizeof(what), ", %s", br_red_kind_name((br_red_kind_t)((d->type >> 8) & 0xff)));
    }
    if (func == BR_FUNC_BROADCAST || func == BR_FUNC_REDUCE || func == BR_FUNC_GATHER ||
        func == BR_FUNC_SCATTER) {
        snprintf(what + strlen(what), sizeof(what) - strlen(what), ", root %u", d->type >> 16);
    }
    if (br_func_is_v(func) || func == BR_FUNC_ALLTOALL || func == BR_FUNC_GATHER ||
        func == BR_FUNC_SCATTER) { /* no algorithm to name: a fixed schedule */
        snprintf(buf, len, "%s #%llu (count %llu, %s%s)", br_func_name(func),
                 (unsigned long long)(d->seq - 1), (unsigned long long)d->count,
                 br_type_name((ncclDataType_t)(d->type & 0xff)), what);
        return;
    }
    snprintf(buf, len, "%s #%llu (count %llu, %s%s, %s/%s)", br_func_name(func),
             (unsigned long long)(d->seq - 1), (unsigned long long)d->count,
             br_type_name((ncclDataType_t)(d->type & 0xff)), what,
             br_algo_name((int)(d->func >> 8) & 0xff), br_proto_name((int)(d->func >> 16) & 0xff));
}

br_slot_desc_t br_exec_call_desc(const br_op_t *op)
{
    br_slot_desc_t d = {0, 0, 0, 0, 0};
    if (op->fold_of != NULL) {
        return br_exec_call_desc(op->fold_of); /* a phase of an owner fold: that call */
    }
    if (op->pattern_seq != 0) {
        uint32_t root = op->pattern == BR_FUNC_ALLTOALL ? 0u : (uint32_t)(op->root & 0xffff);
        d.seq = op->pattern_seq;
        d.count = op->count;
        d.func = (uint32_t)op->pattern;
        d.type = (uint32_t)op->type | root << 16;
    } else if (br_func_is_v(op->func)) {
        d.seq = op->seq + 1;
        d.count = op->count;
        d.func = (uint32_t)op->func;
        d.type = (uint32_t)op->type;
    } else if (op->func != BR_FUNC_SEND && op->func != BR_FUNC_RECV) {
        d = br_desc_make(op, 0);
    }
    return d;
}

int br_exec_call_differs(const br_slot_desc_t *a, const br_slot_desc_t *b)
{
    br_func_t func = (br_func_t)(a->func & 0xff);
    return func != (br_func_t)(b->func & 0xff) ||
           (!br_func_is_v(func) && (a->count != b->count || a->type != b->type));
}

void br_exec_call_mismatch(char *buf, size_t len, int rank, const br_slot_desc_t *mine, int peer,
                           const char *peer_host, const br_slot_desc_t *theirs)
{
    char mine_s[200], theirs_s[200];
    br_desc_describe(mine_s, sizeof(mine_s), mine);
    br_desc_describe(theirs_s, sizeof(theirs_s), theirs);
    snprintf(buf, len,
             "rank %d (host %s): mismatched calls: rank %d is in %s but rank %d (host %s) waits for "
             "it in %s",
             rank, br_host_name(), rank, mine_s, peer, peer_host, theirs_s);
}

int br_desc_matches(const br_slot_desc_t *d, const br_op_t *op)
{
    if (op->func == BR_FUNC_RECV) {
        return d->seq == op->seq + 1 && (d->func & 0xff) == BR_FUNC_SEND &&
               d->count == op->count && (d->type & 0xff) == (uint32_t)op->type;
    }
    return d->seq == op->seq + 1 && d->func == desc_func_word(op) && d->count == op->count &&
           d->type == desc_type_word(op);
}

/* A v-collective's count for this pair differs between its two ranks: say which entry
 * of which array on each side (op is this rank's receive from peer). */
static void v_count_mismatch(br_exec_comm_t *ec, const br_op_t *op, int peer,
                             unsigned long long theirs)
{
    const char *mine_a = "recvcounts", *theirs_a = "sendcounts";
    int theirs_i = ec->rank, mine_i = peer;
    if (op->func == BR_FUNC_ALLGATHERV) {
        theirs_a = "sendcount";
    } else if (op->func == BR_FUNC_REDUCESCATTERV) {
        theirs_a = "recvcounts";
        theirs_i = mine_i = ec->rank;
    }
    char idx[32] = "";
    if (op->func != BR_FUNC_ALLGATHERV) {
        snprintf(idx, sizeof(idx), "[%d]", theirs_i);
    }
    br_exec_fail(ec, ncclInvalidUsage,
                 "rank %d (host %s): mismatched counts in %s #%llu: rank %d expects %zu "
                 "elements from rank %d (its %s[%d]) but rank %d sends %llu (its %s%s)",
                 ec->rank, br_host_name(), br_func_name(op->func), (unsigned long long)op->seq,
                 ec->rank, op->count, peer, mine_a, mine_i, peer, theirs, theirs_a, idx);
}

void br_desc_mismatch(br_exec_comm_t *ec, const br_op_t *op, int peer, const char *what,
                      const br_slot_desc_t *d)
{
    char theirs[200];
    const char *hint = "";

    if (br_func_is_v(op->func) && (d->func & 0xff) == (uint32_t)op->func && d->seq == op->seq + 1 &&
        d->count != op->count) {
        v_count_mismatch(ec, op, peer, d->count);
        return;
    }
    br_desc_describe(theirs, sizeof(theirs), d);
    if (op->func == BR_FUNC_RECV) {
        hint = " (a send must match a recv of the same count and type)";
    } else if ((d->func & 0xff) == (uint32_t)op->func && d->count == op->count &&
               d->type == desc_type_word(op) && d->func != desc_func_word(op)) {
        hint = " (the same call runs another algorithm there: does a tuner decide differently "
               "on different ranks?)";
    }
    br_slot_desc_t mine_d = br_desc_make(op, 0);
    char mine[200];
    br_desc_describe(mine, sizeof(mine), &mine_d);
    br_exec_fail(ec, ncclInvalidUsage,
                 "rank %d (host %s): mismatched calls: rank %d is in %s but rank %d %s %s%s",
                 ec->rank, br_host_name(), ec->rank, mine, peer, what, theirs, hint);
}

int br_desc_check(br_exec_comm_t *ec, const br_work_t *w, int peer, const br_slot_desc_t *d,
                  size_t bytes)
{
    const br_op_t *op = &w->op;

    if (d->seq != 0 && !br_desc_matches(d, op)) {
        br_desc_mismatch(ec, op, peer, "sent data for", d);
        return -1;
    }
    if (d->bytes != bytes) {
        br_exec_fail(ec, ncclInvalidUsage,
                     "rank %d (host %s): mismatched calls: rank %d expected %zu bytes from "
                     "rank %d for %s #%llu (count %zu, %s) but received %llu",
                     ec->rank, br_host_name(), ec->rank, bytes, peer, br_func_name(op->func), (unsigned long long)op->seq,
                     op->count, br_type_name(op->type), (unsigned long long)d->bytes);
        return -1;
    }
    return 0;
}

int br_work_desc_send(br_exec_queue_t *q, const br_work_t *w, br_conn_t *c)
{
    if (!br_fifo_free(c->ctrl, c->step)) {
        q->wait_peer = c->peer;
        q->wait_what = "free FIFO space at";
        return 0;
    }
    br_slot_desc_t d = br_desc_make(&w->op, 0);
    br_fifo_post_send(c->ctrl, c->step++, &d);
    return 1;
}

int br_work_desc_recv(br_exec_queue_t *q, const br_work_t *w, br_conn_t *c)
{
    if (!br_fifo_filled(c->ctrl, c->step)) {
        br_conn_need(c);
        q->wait_peer = c->peer;
        q->wait_what = "data from";
        return 0;
    }
    if (br_desc_check(q->ec, w, c->peer, &c->ctrl->slot[c->step % BR_STEPS], 0) != 0) {
        return -1;
    }
    br_fifo_post_recv(c->ctrl, c->step++);
    return 1;
}

/*
 * A send on the user-buffer path: first one FIFO step with no payload, whose descriptor
 * lets the receiver check that the calls match (the count above all: a longer Send than
 * its Recv must fail, not leave bytes for the next call); then the proxy sends each
 * step's bytes from sendbuff itself (proxy_userbuf.c), so a step only takes a slot's
 * credit. The call returns once head passed every step (sent, and confirmed with
 * failover on, which may send them again from sendbuff until then).
 */
static int send_userbuf(br_exec_queue_t *q, br_work_t *w, int *done_p)
{
    br_conn_t *c = w->conn;
    int moved = 0;

    if (w->userbuf_end == 0) {
        if (br_work_desc_send(q, w, c) == 0) {
            return 0;
        }
        uint64_t nsteps = (w->bytes + c->step_size - 1) / c->step_size;
        moved++;
        if (br_proxy_userbuf_send(q->ec->tc->proxy, c->net, c->step, nsteps, w->op.sendbuff,
                                  w->bytes) != ncclSuccess) {
            br_exec_fail(q->ec, ncclSystemError,
                         "rank %d (host %s): cannot queue a send of %zu bytes to rank %d",
                         q->ec->rank, br_host_name(), w->bytes, c->peer);
            return -1;
        }
        w->userbuf_end = c->step + nsteps;
    }
    while (w->off < w->bytes) {
        if (!br_fifo_free(c->ctrl, c->step)) {
            q->wait_peer = c->peer;
            q->wait_what = "free FIFO space at";
            return moved;
        }
        size_t n = w->bytes - w->off < c->step_size ? w->bytes - w->off : c->step_size;
        br_slot_desc_t d = br_desc_make(&w->op, n);
        br_fifo_post_send(c->ctrl, c->step++, &d);
        w->off += n;
        moved++;
    }
    /* Acquire pairs with the proxy's release of head: it no longer reads sendbuff. */
    if (atomic_load_explicit(&c->ctrl->head, memory_order_acquire) < w->userbuf_end) {
        q->wait_peer = c->peer;
        q->wait_what = "the network to take the send buffer by";
        return moved;
    }
    *done_p = 1;
    return moved + 1;
}

static int send_work(br_exec_queue_t *q, br_work_t *w, int *done_p)
{
    br_conn_t *c = w->conn;
    int moved = 0;
    if (w->vhdr) {
        *done_p = br_work_desc_send(q, w, c) > 0;
        return *done_p;
    }
    if (w->userbuf) {
        return send_userbuf(q, w, done_p);
    }
    while (w->off < w->bytes) {
        if (!br_fifo_free(c->ctrl, c->step)) {
            q->wait_peer = c->peer;
            q->wait_what = "free FIFO space at";
            return moved;
        }
        size_t n = w->bytes - w->off < c->step_size ? w->bytes - w->off : c->step_size;
        memcpy(br_conn_slot(c, c->step), (const char *)w->op.sendbuff + w->off, n);
        br_slot_desc_t d = br_desc_make(&w->op, n);
        br_fifo_post_send(c->ctrl, c->step++, &d);
        w->off += n;
        moved++;
    }
    *done_p = 1;
    return moved;
}

/* A receive of a ReduceScatterV has arrived: one block fewer for its fold to wait for. */
static void recv_finished(br_work_t *w, int *done_p)
{
    if (w->vst != NULL) {
        w->vst->left--;
    }
    *done_p = 1;
}

static int recv_work(br_exec_queue_t *q, br_work_t *w, int *done_p)
{
    br_conn_t *c = w->conn;
    int moved = 0;
    if (w->vhdr) {
        int r = br_work_desc_recv(q, w, c);
        if (r > 0) {
            recv_finished(w, done_p);
        }
        return r;
    }
    if (w->userbuf == 1) {
        /* The user-buffer path's first step: the sender's descriptor, no payload. */
        int r = br_work_desc_recv(q, w, c);
        if (r <= 0) {
            return r;
        }
        w->userbuf = 2;
        moved++;
    }
    while (w->off < w->bytes) {
        if (!br_fifo_filled(c->ctrl, c->step)) {
            br_conn_need(c);
            q->wait_peer = c->peer;
            q->wait_what = "data from";
            return moved;
        }
        size_t n = w->bytes - w->off < c->step_size ? w->bytes - w->off : c->step_size;
        if (br_desc_check(q->ec, w, c->peer, &c->ctrl->slot[c->step % BR_STEPS], n) != 0) {
            return -1;
        }
        if (!w->userbuf) { /* else the proxy received into recvbuff itself */
            memcpy((char *)w->op.recvbuff + w->off, br_conn_slot(c, c->step), n);
        }
        br_fifo_post_recv(c->ctrl, c->step++);
        w->off += n;
        moved++;
    }
    recv_finished(w, done_p);
    return moved;
}

/* A ReduceScatterV's result: once every rank's block arrived, fold them in rank order,
 * this rank's own from its send buffer (in place, the output is that block: the fold
 * allows it), with fp16/bf16/fp8 sums in fp32 under BRAID_ACCUMULATE=fp32. */
static int vfold_work(br_exec_queue_t *q, br_work_t *w, int *done_p)
{
    const br_op_t *op = &w->op;

    if (w->vst->left > 0) {
        q->wait_peer = -1; /* the receive queues say whom they wait for */
        q->wait_what = "the other ranks' blocks";
        return 0;
    }
    if (w->bytes > 0) {
        br_reduce_fold(op->recvbuff, w->vst->srcs, q->ec->nranks, op->count, &op->redop,
                       op->acc32 && br_type_is_narrow_float(op->type));
    }
    *done_p = 1;
    return 1;
}

/* A rank's own part: single-rank collectives and sends to itself. */
static int copy_work(br_work_t *w, int *done_p)
{
    const br_op_t *op = &w->op;
    if (br_func_is_reduction(op->func)) {
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
    case BR_WORK_SCHED: return br_work_sched(q, w, done_p);
    case BR_WORK_SEND: return send_work(q, w, done_p);
    case BR_WORK_RECV: return recv_work(q, w, done_p);
    case BR_WORK_ARENA: return br_work_arena(q, w, done_p);
    case BR_WORK_COLLNET: return br_work_collnet(q, w, done_p);
    case BR_WORK_VFOLD: return vfold_work(q, w, done_p);
    default: return copy_work(w, done_p);
    }
}

/* Is d the data of op (as a probe sees it)? A v-collective's ranks send different
 * counts, which its own checks compare: here only the function matters. */
static int probe_matches(const br_slot_desc_t *d, const br_op_t *op)
{
    if (br_func_is_v(op->func)) {
        return (d->func & 0xff) == (uint32_t)op->func;
    }
    return br_desc_matches(d, op);
}

/* Is the slot waiting at the head of a receive connection data for op with other
 * arguments? (Only filled slots are looked at: the sender wrote them.) */
static int probe_conn(br_exec_comm_t *ec, const br_op_t *op, const br_conn_t *rc)
{
    if (rc == NULL || !br_fifo_filled(rc->ctrl, rc->step)) {
        return 0;
    }
    const br_slot_desc_t *d = &rc->ctrl->slot[rc->step % BR_STEPS];
    if (d->seq != op->seq + 1 || probe_matches(d, op)) {
        return 0;
    }
    br_desc_mismatch(ec, op, rc->peer, "sent data for", d);
    return 1;
}

/* A peer's arena slot of the same collective number with other arguments. Only slots on
 * pages that exist are read: a page nobody wrote holds no published slot, and reading it
 * would make the page (tmpfs allocates on a read fault) and map it here, with the kernel's
 * fault-around, its neighbours too: at 1024 ranks one probe mapped the whole 45 MiB
 * arena into the prober and took 11,000 page faults. */
static int probe_arena(br_exec_comm_t *ec, const br_op_t *op)
{
    const br_arena_t *a = ec->arena;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char *resident = malloc((a->size + page - 1) / page);
    int found = 0;

    if (resident != NULL && mincore(a->base, a->size, resident) != 0) {
        free(resident);
        resident = NULL; /* read every slot, as without the check */
    }
    for (int r = 0; r < ec->nranks && !found; r++) {
        for (uint64_t i = 0; i < BR_ARENA_NBUF + BR_ARENA_NSMALL && r != ec->rank; i++) {
            int small = i >= BR_ARENA_NBUF;
            const br_arena_hdr_t *h =
                br_arena_hdr(ec->arena, r, small ? i - BR_ARENA_NBUF : i, small);
            if (resident != NULL && !(resident[(size_t)((const char *)h - a->base) / page] & 1)) {
                continue;
            }
            if (atomic_load_explicit(&h->flag, memory_order_acquire) == 0 ||
                h->desc.seq != op->seq + 1 || probe_matches(&h->desc, op)) {
                continue;
            }
            br_desc_mismatch(ec, op, r, "published its input for", &h->desc);
            found = 1;
            break;
        }
    }
    free(resident);
    return found;
}

/* A v-collective's data of the same collective number on a p2p connection (other data
 * there is numbered per peer, not per collective, and is not looked at). */
static int probe_p2p_v(br_exec_comm_t *ec, const br_op_t *op)
{
    for (int p = 0; p < ec->nranks; p++) {
        const br_conn_t *rc = ec->p2p_recv[p];
        if (rc != NULL && br_fifo_filled(rc->ctrl, rc->step) &&
            br_func_is_v((br_func_t)(rc->ctrl->slot[rc->step % BR_STEPS].func & 0xff)) &&
            probe_conn(ec, op, rc)) {
            return 1;
        }
    }
    return 0;
}

int br_work_probe_mismatch(br_exec_queue_t *q, const br_work_t *w)
{
    br_exec_comm_t *ec = q->ec;
    const br_op_t *op = &w->op;

    if (w->kind != BR_WORK_SCHED && w->kind != BR_WORK_ARENA && w->kind != BR_WORK_COLLNET &&
        !br_func_is_v(op->func)) {
        return 0;
    }
    if (ec->arena != NULL && probe_arena(ec, op)) {
        return 1;
    }
    if (!br_func_is_v(op->func) && probe_p2p_v(ec, op)) {
        return 1;
    }
    for (int c = 0; c < ec->nchannels; c++) {
        for (int i = 0; i < ec->chan[c].nrecv; i++) {
            if (probe_conn(ec, op, ec->chan[c].recv[i])) {
                return 1;
            }
        }
    }
    return 0;
}
