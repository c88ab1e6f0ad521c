/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The host executor's engine: builds the queues of a group from what plan chose and runs
 * them to completion from the calling thread. While nothing moves it spins briefly, then
 * yields, then sleeps in growing naps (ranks often outnumber cores, and a spinning waiter
 * starves the peer it waits for), and runs the health checks of exec_health.c. A failure
 * is recorded in the communicator (sticky) and announced to its other ranks so nobody is
 * left waiting.
 */
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec_int.h"
#include "util.h"

enum { Q_CHANNEL = 0, Q_SEND = 1, Q_RECV = 2, Q_LOCAL = 3, Q_ARENA = 4, Q_COLLNET = 5 };

void br_exec_fail(br_exec_comm_t *ec, ncclResult_t res, const char *fmt, ...)
{
    va_list ap;
    if (ec->error != ncclSuccess) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(ec->error_msg, sizeof(ec->error_msg), fmt, ap);
    va_end(ap);
    /* Release: a state dump in another thread that sees the error sees its text whole. */
    __atomic_store_n(&ec->error, res, __ATOMIC_RELEASE);
    BR_WARN(NCCL_COLL, "%s", ec->error_msg);
}

static ncclResult_t queue_get(br_exec_batch_t *b, br_exec_comm_t *ec, int type, int idx,
                              br_exec_queue_t **q_p)
{
    for (int i = 0; i < b->n; i++) {
        br_exec_queue_t *q = &b->queues[i];
        if (q->ec == ec && q->key_type == type && q->key_idx == idx) {
            *q_p = q;
            return ncclSuccess;
        }
    }
    if (b->n == b->cap) {
        int cap = b->cap ? 2 * b->cap : 16;
        br_exec_queue_t *nq = realloc(b->queues, (size_t)cap * sizeof(*nq));
        if (nq == NULL) {
            BR_WARN(NCCL_ALLOC, "out of memory building a group");
            return ncclSystemError;
        }
        b->queues = nq;
        b->cap = cap;
    }
    br_exec_queue_t *q = &b->queues[b->n];
    br_work_t *items = NULL;
    int items_cap = 0;
    if (b->n < b->ninit) {
        items = q->items; /* a slot from before a reset: keep its array */
        items_cap = q->cap;
    } else {
        b->ninit++;
    }
    b->n++;
    memset(q, 0, sizeof(*q));
    q->items = items;
    q->cap = items_cap;
    q->ec = ec;
    q->key_type = type;
    q->key_idx = idx;
    q->wait_peer = -1;
    *q_p = q;
    return ncclSuccess;
}

static ncclResult_t queue_push(br_exec_queue_t *q, const br_work_t *w)
{
    if (q->n == q->cap) {
        int cap = q->cap ? 2 * q->cap : 8;
        br_work_t *items = realloc(q->items, (size_t)cap * sizeof(*items));
        if (items == NULL) {
            BR_WARN(NCCL_ALLOC, "out of memory building a group");
            return ncclSystemError;
        }
        q->items = items;
        q->cap = cap;
    }
    q->items[q->n++] = *w;
    return ncclSuccess;
}

/* ---- Profiler events: GroupApi per comm and batch, Coll/P2p per operation ---- */
br_conn_t *br_exec_chan_send(const br_exec_comm_t *ec, int c, int peer)
{
    const br_exec_channel_t *ch = &ec->chan[c];
    for (int i = 0; i < ch->nsend; i++) {
        if (ch->send_peer[i] == peer) {
            return ch->send[i];
        }
    }
    return NULL;
}

br_conn_t *br_exec_chan_recv(const br_exec_comm_t *ec, int c, int peer)
{
    const br_exec_channel_t *ch = &ec->chan[c];
    for (int i = 0; i < ch->nrecv; i++) {
        if (ch->recv_peer[i] == peer) {
            return ch->recv[i];
        }
    }
    return NULL;
}

/* A work item of an operation: noted in the communicator's operation log. */
static ncclResult_t push_item(br_exec_queue_t *q, const br_work_t *w)
{
    br_oplog_note(q->ec, w->op.log_ticket, BR_OPLOG_EV_ITEM, -1, NULL, 0);
    return queue_push(q, w);
}

/* RingOneShot gathers every rank's input into a buffer of the communicator, sized once
 * for the largest input plan lets it take: queued items keep pointing at it. */
static ncclResult_t gather_scratch(br_exec_comm_t *ec, char **scratch_p)
{
    if (ec->gather_scratch == NULL) {
        BR_CHECK(br_calloc(&ec->gather_scratch, (size_t)ec->nranks * BR_PLAN_RING_ONESHOT_MAX,
                           "one-shot buffer"));
        ec->gather_cap = BR_PLAN_RING_ONESHOT_MAX;
    }
    *scratch_p = ec->gather_scratch;
    return ncclSuccess;
}

/* Make w (its op set) the node arena's next operation(s). */
static void arena_item(br_exec_comm_t *ec, br_work_t *w)
{
    const br_op_t *op = &w->op;
    size_t bytes = br_op_bytes(op) * (op->func == BR_FUNC_REDUCESCATTER ? (size_t)ec->nranks : 1);
    w->kind = BR_WORK_ARENA;
    w->arena_k = ec->arena_seq;
    w->arena_nchunk = br_work_arena_chunks(ec, op);
    ec->arena_seq += w->arena_nchunk;
    /* Decided on the call's arguments alone, so writer and readers pick the same slot. */
    w->arena_small = op->algo == BR_ALGO_DIRECT_READ || br_arena_is_small(bytes);
}

static ncclResult_t enqueue_coll(br_exec_batch_t *b, br_exec_comm_t *ec, br_work_t *w)
{
    const br_op_t *op = &w->op;
    br_exec_queue_t *q;

    if (ec->nranks == 1) {
        w->kind = BR_WORK_COPY;
        w->copy_src = op->sendbuff;
        w->bytes = br_op_bytes(op);
        BR_CHECK(queue_get(b, ec, Q_LOCAL, 0, &q));
        return push_item(q, w);
    }
    if (op->algo == BR_ALGO_ONESHOT || op->algo == BR_ALGO_DIRECT_READ) {
        arena_item(ec, w);
        BR_CHECK(queue_get(b, ec, Q_ARENA, 0, &q));
        return push_item(q, w);
    }
    if (op->algo == BR_ALGO_COLLNET_DIRECT || op->algo == BR_ALGO_COLLNET_CHAIN) {
        if (ec->collnet == NULL) { /* plan offers collnet only where comm set it up */
            BR_WARN(NCCL_COLL, "rank %d: %s chose %s without a collnet", ec->rank,
                    br_func_name(op->func), br_algo_name(op->algo));
            return ncclInternalError;
        }
        w->kind = BR_WORK_COLLNET;
        BR_CHECK(queue_get(b, ec, Q_COLLNET, 0, &q));
        return push_item(q, w);
    }
    char *scratch = NULL;
    if (op->algo == BR_ALGO_RING_ONESHOT) {
        BR_CHECK(gather_scratch(ec, &scratch));
    }
    for (int c = 0; c < op->nchannels; c++) {
        if (!br_work_sched_init(w, ec, c, scratch)) {
            continue;
        }
        BR_CHECK(br_work_sched_expect(ec, w));
        BR_CHECK(queue_get(b, ec, Q_CHANNEL, c, &q));
        BR_CHECK(push_item(q, w));
    }
    return ncclSuccess;
}

/* Queue w (kind SEND or RECV, w->op.peer and count set) on its peer's p2p connection.
 * A v-collective's part with count 0 still moves one step: its descriptor. */
static ncclResult_t p2p_item(br_exec_batch_t *b, br_exec_comm_t *ec, br_work_t *w)
{
    const br_op_t *op = &w->op;
    br_exec_queue_t *q;

    w->bytes = br_op_bytes(op);
    w->vhdr = w->bytes == 0;
    if (w->kind == BR_WORK_SEND) {
        w->conn = ec->p2p_send[op->peer];
        w->userbuf = w->conn != NULL && !w->vhdr && br_proxy_userbuf_takes(w->conn->net, w->bytes);
        BR_CHECK(queue_get(b, ec, Q_SEND, op->peer, &q));
        return push_item(q, w);
    }
    w->conn = ec->p2p_recv[op->peer];
    if (w->conn != NULL && w->vhdr) {
        br_conn_expect(w->conn, 1);
    } else if (w->conn != NULL) {
        uint64_t nsteps = (w->bytes + w->conn->step_size - 1) / w->conn->step_size;
        if (br_proxy_userbuf_takes(w->conn->net, w->bytes)) {
            /* The proxy receives straight into recvbuff (proxy_userbuf.c), and gives each
             * step the descriptor the matching Send would have sent (a v-collective's
             * parts send their own operation's). */
            br_op_t as_sent = *op;
            as_sent.func = br_func_is_v(op->func) ? op->func : BR_FUNC_SEND;
            br_slot_desc_t d = br_desc_make(&as_sent, 0);
            w->userbuf = 1;
            BR_CHECK(br_proxy_userbuf_recv(ec->tc->proxy, w->conn->net, nsteps, op->recvbuff,
                                           w->bytes, &d));
        } else {
            br_conn_expect(w->conn, nsteps);
        }
    }
    BR_CHECK(queue_get(b, ec, Q_RECV, op->peer, &q));
    return push_item(q, w);
}

/* Memory of `bytes` that lives as long as the batch's current contents (reset frees it). */
static ncclResult_t batch_own(br_exec_batch_t *b, size_t bytes, void **mem_p)
{
    if (b->nowned == b->owned_cap) {
        int cap = b->owned_cap ? 2 * b->owned_cap : 4;
        void **o = realloc(b->owned, (size_t)cap * sizeof(*o));
        if (o == NULL) {
            BR_WARN(NCCL_ALLOC, "out of memory building a group");
            return ncclSystemError;
        }
        b->owned = o;
        b->owned_cap = cap;
    }
    void *mem = malloc(bytes); /* not zeroed: every byte is received or copied first */
    if (mem == NULL) {
        BR_WARN(NCCL_ALLOC, "out of memory allocating %zu bytes for a v-collective", bytes);
        return ncclSystemError;
    }
    b->owned[b->nowned++] = mem;
    *mem_p = mem;
    return ncclSuccess;
}

static void batch_disown(br_exec_batch_t *b)
{
    for (int i = 0; i < b->nowned; i++) {
        free(b->owned[i]);
    }
    b->nowned = 0;
}

/*
 * A v-collective (braid.h) as a pairwise exchange over the p2p connections: step s of
 * n - 1 sends this rank's block for rank + s and receives rank - s's block for it, each
 * on that peer's queue. Queues are created (and so first progressed) in step order, so
 * at the start every rank sends to a different rank and receives from a different one
 * instead of all sending to rank 0 first. Every pair exchanges at least one step, whose
 * descriptor carries the sender's count: the receiver checks it against its own (its
 * recvcounts entry), so ranks that disagree on a count get an error naming both. The
 * rank's own block is a local copy, or for a ReduceScatterV the fold of every rank's
 * block in rank order (the same arithmetic on every rank and at any timing).
 */
static ncclResult_t enqueue_v(br_exec_batch_t *b, br_exec_comm_t *ec, const br_work_t *w0)
{
    const br_op_t *op = &w0->op;
    const br_vspec_t *v = op->v;
    size_t ts = br_type_size(op->type);
    int n = ec->nranks, me = ec->rank;
    size_t mine = v->rcount[me] * ts;
    br_vstate_t *vst = NULL;
    br_exec_queue_t *q;
    br_work_t w;

    if (op->func == BR_FUNC_ALLGATHERV && n > 2 && ec->arena != NULL &&
        ec->arena->max_bytes > 0) {
        /* Every rank on one host: through the node arena as a chunked OneShot AllGather
         * (exec_arena.c): each block copied in once and out once per reader, n copies
         * where the pairwise exchange makes 2 (n - 1) (at 2 ranks both make 2, and the
         * FIFO's finer steps won: 64 KiB in 5.5 us against 13.8, docs/performance.md).
         * The same choice on every rank. */
        w = *w0;
        w.op.algo = BR_ALGO_ONESHOT;
        w.op.proto = BR_PROTO_SIMPLE;
        w.kind = BR_WORK_ARENA;
        w.arena_k = ec->arena_seq;
        w.arena_nchunk = br_work_arena_chunks(ec, &w.op);
        ec->arena_seq += w.arena_nchunk;
        BR_CHECK(queue_get(b, ec, Q_ARENA, 0, &q));
        return push_item(q, &w);
    }
    int a2av = br_work_a2av_takes(ec, op);
    if (a2av) {
        /* Every rank on one host and able to read the others: through the node arena,
         * large blocks read straight from their owner's send buffer (exec_a2av.c), but
         * for the largest between processes, which take the FIFOs below. */
        w = *w0;
        w.op.algo = BR_ALGO_DIRECT_READ;
        w.op.proto = BR_PROTO_SIMPLE;
        w.kind = BR_WORK_ARENA;
        w.arena_k = ec->arena_seq++;
        w.arena_nchunk = 1;
        void *got = NULL;
        BR_CHECK(batch_own(b, (size_t)n, &got));
        memset(got, 0, (size_t)n);
        w.a2av_got = got;
        BR_CHECK(queue_get(b, ec, Q_ARENA, 0, &q));
        BR_CHECK(push_item(q, &w));
    }
    char *scratch = NULL;
    if (op->func == BR_FUNC_REDUCESCATTERV) {
        void *mem = NULL;
        BR_CHECK(batch_own(b, sizeof(*vst) + (size_t)n * (sizeof(void *) + mine), &mem));
        vst = mem;
        vst->left = n - 1;
        vst->srcs = (const void **)(void *)(vst + 1);
        scratch = (char *)(vst->srcs + n);
        for (int p = 0; p < n; p++) {
            vst->srcs[p] = p == me ? (const char *)op->sendbuff + v->sdispl[me] * ts
                                   : scratch + (size_t)p * mine;
        }
    }
    for (int s = 1; s < n; s++) {
        int to = (me + s) % n, from = (me - s + n) % n;
        w = *w0;
        w.kind = BR_WORK_SEND;
        w.op.peer = to;
        w.op.count = v->scount[to];
        w.op.sendbuff = (const char *)op->sendbuff + v->sdispl[to] * ts;
        if (!a2av || br_work_a2av_fifo(ec, to, w.op.count * ts)) {
            BR_CHECK(p2p_item(b, ec, &w));
        }
        w = *w0;
        w.kind = BR_WORK_RECV;
        w.op.peer = from;
        w.op.count = v->rcount[from];
        w.op.recvbuff = vst != NULL ? scratch + (size_t)from * mine
                                    : (char *)op->recvbuff + v->rdispl[from] * ts;
        w.vst = vst;
        if (!a2av || br_work_a2av_fifo(ec, from, w.op.count * ts)) {
            BR_CHECK(p2p_item(b, ec, &w));
        }
    }
    if (a2av) {
        return ncclSuccess; /* the arena item copies this rank's own block */
    }
    w = *w0;
    w.kind = vst != NULL ? BR_WORK_VFOLD : BR_WORK_COPY;
    w.vst = vst;
    w.op.peer = me;
    w.op.count = v->rcount[me];
    w.copy_src = (const char *)op->sendbuff + v->sdispl[me] * ts;
    w.op.recvbuff = (char *)op->recvbuff + v->rdispl[me] * ts;
    w.bytes = mine;
    BR_CHECK(queue_get(b, ec, Q_LOCAL, 0, &q));
    return push_item(q, &w);
}

static ncclResult_t host_enqueue(br_exec_batch_t *b, br_exec_comm_t *ec, const br_op_t *op)
{
    br_work_t w;

    memset(&w, 0, sizeof(w));
    w.op = *op;
    w.event = ec->prof != NULL ? br_exec_prof_op_start(b, ec, op) : -1;
    if (br_func_is_collective(op->func)) {
        if (op->count > 0) {
            BR_CHECK(enqueue_coll(b, ec, &w));
        } else {
            br_oplog_note(ec, op->log_ticket, BR_OPLOG_EV_DONE, -1, NULL, 0);
        }
        return ncclSuccess;
    }
    if (br_func_is_v(op->func)) {
        return enqueue_v(b, ec, &w);
    }
    w.bytes = br_op_bytes(op);
    if (w.bytes == 0) {
        br_oplog_note(ec, op->log_ticket, BR_OPLOG_EV_DONE, -1, NULL, 0);
        return ncclSuccess;
    }
    w.kind = op->func == BR_FUNC_SEND ? BR_WORK_SEND : BR_WORK_RECV;
    return p2p_item(b, ec, &w);
}

static ncclResult_t host_enqueue_copy(br_exec_batch_t *b, br_exec_comm_t *ec, const void *src,
                                      void *dst, size_t bytes)
{
    br_exec_queue_t *q;
    br_work_t w;

    if (bytes == 0) {
        return ncclSuccess;
    }
    memset(&w, 0, sizeof(w));
    w.event = -1;
    w.kind = BR_WORK_COPY;
    w.op.func = BR_FUNC_SEND;
    w.op.recvbuff = dst;
    w.copy_src = src;
    w.bytes = bytes;
    BR_CHECK(queue_get(b, ec, Q_LOCAL, 0, &q));
    return queue_push(q, &w);
}

static void host_free(br_exec_batch_t *b)
{
    br_exec_prof_batch_end(b);
    batch_disown(b);
    free(b->owned);
    free(b->events);
    for (int i = 0; i < b->ninit; i++) {
        free(b->queues[i].items);
    }
    free(b->queues);
    memset(b, 0, sizeof(*b));
}

static void host_reset(br_exec_batch_t *b)
{
    br_exec_prof_batch_end(b);
    batch_disown(b);
    b->nevents = 0;
    b->n = 0;
}

static void proxies_active(br_exec_batch_t *b, int delta)
{
    for (int i = 0; i < b->n; i++) {
        br_exec_comm_t *ec = b->queues[i].ec;
        int first = 1;
        for (int k = 0; k < i; k++) {
            first &= b->queues[k].ec != ec;
        }
        if (first && ec->tc->proxy != NULL) {
            br_proxy_active(ec->tc->proxy, delta);
        }
    }
}

/* Waiting: spin (only when every local rank has a core), then yield (lets a peer on the
 * same core run), and only after a long wait sleep in naps growing to 1 ms. */
static void nap(unsigned idle, unsigned spin)
{
    if (idle < spin) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        __asm__ __volatile__("yield");
#endif
    } else if (idle < spin + 20000) {
        sched_yield();
    } else {
        unsigned us = (idle - spin - 20000) / 16 + 1;
        struct timespec ts = {0, (long)(us > 1000 ? 1000 : us) * 1000};
        nanosleep(&ts, NULL);
    }
}

/* Tell the operation logs about the operation at the head of every queue: it waits for
 * the peer its queue last waited for, since `since` (WAIT), or runs again (RUN). Only
 * when the whole batch is blocked, and when it moves again, so a call that never waits
 * long costs nothing here. */
static void oplog_heads(br_exec_batch_t *b, br_oplog_event_t ev, uint64_t since)
{
    for (int i = 0; i < b->n; i++) {
        br_exec_queue_t *q = &b->queues[i];
        if (q->ec->oplog == NULL || q->cur >= q->n ||
            (ev == BR_OPLOG_EV_WAIT && q->wait_peer < 0)) {
            continue;
        }
        br_oplog_note(q->ec, q->items[q->cur].op.log_ticket, ev, q->wait_peer, q->wait_what,
                      since);
    }
}

/* The batch failed: the caller may free its buffers as soon as we return, so no network
 * transfer may still use them (proxy_userbuf.c closes the connections that hold some). */
static void userbuf_abandon(br_exec_batch_t *b)
{
    for (int i = 0; i < b->n; i++) {
        if (b->queues[i].ec->tc->proxy != NULL) {
            br_proxy_userbuf_abandon(b->queues[i].ec->tc->proxy);
        }
    }
}

/* ec failed in this call: tell the other ranks, so they fail now instead of waiting for
 * us, and make the cause what the caller reads in ncclGetLastError() (plugins may have
 * logged consequences since). */
static void announce_failure(br_exec_comm_t *ec)
{
    br_bootstrap_abort_notify(ec->tc->boot, ec->error_msg);
    br_log_set_last_error(ec->error_msg);
}

/* ---- A failed batch and the node arena ----
 * A rank's peers may be copying from (or, a DirectRead Broadcast's root, into) its
 * buffers in place when its operation fails, and the caller may free or rewrite them as
 * soon as the call returns. So before the failure is announced, every communicator of
 * the batch that failed sets its `failed` word in the arena (it copies nothing from
 * anyone any more) and withdraws what it published (exec_arena.c, "A failed rank's
 * operation"); then, once the others are told, the call waits until every peer that may
 * have looked before the withdrawal has passed `done` for the operation, failed, or
 * died. A failing rank sets its own word before it waits for anyone, so two that fail
 * together do not wait for each other. The wait is bounded by BRAID_TIMEOUT, or when
 * that is 0 by BR_SETTLE_S: a peer that has not come by then looks only after the
 * withdrawal (it would have to have stalled that long between its look and its copy). */
#define BR_SETTLE_S 10

static br_work_t *queue_head(br_exec_queue_t *q)
{
    return q->cur < q->n ? &q->items[q->cur] : NULL;
}

/* ec has failed: it reads and writes no peer's buffer from now on. */
static void arena_mark_failed(br_exec_comm_t *ec)
{
    if (ec->arena != NULL) {
        br_arena_fail(ec->arena, ec->rank, BR_ARENA_FAILED);
    }
}

/* Mark every failed communicator of b, and withdraw the operations whose buffers peers
 * may touch in place. A communicator that has such an operation in flight but did not
 * fail itself (another one of the group did: another communicator, or another rank's
 * handle where one thread drives several ranks) fails too: its peers would wait for the
 * rest of it for ever. Returns how many were withdrawn. */
static int fail_withdraw(br_exec_batch_t *b, const br_exec_comm_t *cause)
{
    int n = 0;
    for (int i = 0; i < b->n; i++) {
        br_exec_queue_t *q = &b->queues[i];
        br_exec_comm_t *ec = q->ec;
        br_work_t *w = queue_head(q);
        int exposed = w != NULL && br_work_arena_exposed(w);
        if (exposed && ec->error == ncclSuccess) {
            br_exec_fail(ec, cause->error,
                         "rank %d (host %s): %s #%llu abandoned: its group failed in "
                         "another communicator handle (rank %d): %s",
                         ec->rank, br_host_name(), br_func_name(w->op.func),
                         (unsigned long long)w->op.seq, cause->rank, cause->error_msg);
        }
        if (ec->error != ncclSuccess) {
            arena_mark_failed(ec);
        }
        if (exposed) {
            br_work_arena_withdraw(ec, w);
            n++;
        }
    }
    return n;
}

/* Wait until no peer can still copy from or into a withdrawn operation's buffers. */
static void fail_settle(br_exec_batch_t *b)
{
    int64_t t = BR_PARAM_INT(TIMEOUT);
    uint64_t start = br_time_ns(), limit = (uint64_t)(t > 0 ? t : BR_SETTLE_S) * 1000000000ull;

    for (unsigned idle = 0;; idle++) {
        int waiting = 0, dead = (idle & 63) == 63;
        for (int i = 0; i < b->n; i++) {
            br_work_t *w = queue_head(&b->queues[i]);
            if (w != NULL && w->kind == BR_WORK_ARENA && w->arena_phase == 5) {
                waiting += br_work_arena_settle(&b->queues[i], w, dead) == 0;
            }
        }
        if (waiting == 0) {
            return;
        }
        if (br_time_ns() - start > limit) {
            break;
        }
        nap(idle, 0);
    }
    for (int i = 0; i < b->n; i++) {
        br_exec_queue_t *q = &b->queues[i];
        br_work_t *w = queue_head(q);
        if (w != NULL && w->kind == BR_WORK_ARENA && w->arena_phase == 5) {
            BR_WARN(NCCL_COLL,
                    "rank %d (host %s): %s #%llu failed; returning after %llu s although rank %d "
                    "has neither finished nor failed (waiting for %s it)",
                    q->ec->rank, br_host_name(), br_func_name(w->op.func),
                    (unsigned long long)w->op.seq,
                    (unsigned long long)((br_time_ns() - start) / 1000000000ull), q->wait_peer,
                    q->wait_what);
        }
    }
}

/* b failed: mark, withdraw, tell the other ranks (the cause last, so that its message is
 * what ncclGetLastError gives), and wait for the peers still in our buffers. */
static void fail_unwind(br_exec_batch_t *b)
{
    br_exec_comm_t *cause = NULL;
    for (int i = 0; i < b->n && cause == NULL; i++) {
        cause = b->queues[i].ec->error != ncclSuccess ? b->queues[i].ec : NULL;
    }
    if (cause == NULL) {
        return;
    }
    int exposed = fail_withdraw(b, cause);
    for (int i = 0; i < b->n; i++) {
        br_exec_comm_t *ec = b->queues[i].ec;
        int first = ec != cause && ec->error != ncclSuccess;
        for (int k = 0; k < i && first; k++) {
            first = b->queues[k].ec != ec;
        }
        if (first) {
            announce_failure(ec);
        }
    }
    announce_failure(cause);
    if (exposed > 0) {
        fail_settle(b);
    }
}

/* One pass over the batch's queues: every head item steps as far as it can, and items
 * that finish make way for the next. Returns the steps made, with *pending_p the queues
 * not yet finished, or -1 with *res_p the error of the communicator that failed. */
static int step_queues(br_exec_batch_t *b, int *pending_p, ncclResult_t *res_p)
{
    int moved = 0;
    for (int i = 0; i < b->n; i++) {
        br_exec_queue_t *q = &b->queues[i];
        while (q->cur < q->n) {
            int done = 0;
            br_work_t *w = &q->items[q->cur];
            if (w->event >= 0 && !w->kch_started) {
                br_exec_prof_work_start(b, w);
            }
            int r = br_work_step(q, w, &done);
            if (r < 0) {
                *res_p = q->ec->error;
                return -1;
            }
            moved += r;
            if (r > 0) {
                br_exec_prof_work_moved(w);
            }
            if (!done) {
                break;
            }
            if (w->kch != NULL || w->phases) {
                br_exec_prof_work_done(b, w);
            }
            br_oplog_note(q->ec, w->op.log_ticket, BR_OPLOG_EV_ITEM_DONE, -1, NULL, 0);
            q->cur++;
        }
        *pending_p += q->cur < q->n;
    }
    return moved;
}

/* The next call on a communicator checks what its last root Broadcasts deferred (as far
 * as the other ranks have published: no wait here). 1 with *res_p set on a mismatch. */
static int settle_deferred(br_exec_batch_t *b, ncclResult_t *res_p)
{
    for (int i = 0; i < b->n; i++) {
        br_exec_comm_t *ec = b->queues[i].ec;
        if (ec->defer != NULL && br_exec_defer_settle(ec, 0) != ncclSuccess) {
            *res_p = ec->error;
            return 1;
        }
    }
    return 0;
}

/* The health of every communicator of a batch blocked for blocked_ns: 1 with *res_p set
 * when one of them failed. */
static int health_round(br_exec_batch_t *b, uint64_t blocked_ns, ncclResult_t *res_p)
{
    for (int i = 0; i < b->n; i++) {
        if (br_exec_health_check(b, b->queues[i].ec, blocked_ns)) {
            *res_p = b->queues[i].ec->error;
            return 1;
        }
    }
    return 0;
}

static ncclResult_t host_run(br_exec_batch_t *b)
{
    ncclResult_t res = ncclSuccess;
    unsigned idle = 0, spin = (unsigned)BR_PARAM_INT(SPIN);
    uint64_t blocked_since = 0, next_check = 0, next_warn = 0;
    uint64_t warn_ns = (uint64_t)BR_PARAM_INT(WAIT_WARN) * 1000000000ull;

    for (int i = 0; i < b->n; i++) {
        b->queues[i].wait_peer = -1;
        if (b->queues[i].ec->oversubscribed) {
            spin = 0; /* more local ranks than cores: a spinning waiter starves its peer */
        }
        if (b->queues[i].ec->error != ncclSuccess) {
            BR_WARN(NCCL_COLL, "rank %d: communicator already failed: %s", b->queues[i].ec->rank,
                    b->queues[i].ec->error_msg);
            arena_mark_failed(b->queues[i].ec);
            userbuf_abandon(b);
            return b->queues[i].ec->error;
        }
    }
    if (b->nevents > 0) {
        br_exec_prof_launch(b);
    }
    proxies_active(b, 1);
    int revoked = br_exec_revoked_check(b);
    if (revoked) {
        res = b->queues[revoked - 1].ec->error;
        goto fail;
    }
    if (settle_deferred(b, &res)) {
        goto fail;
    }
    for (;;) {
        int pending = 0, moved = step_queues(b, &pending, &res);
        if (moved < 0) {
            goto fail;
        }
        if (!pending) {
            break;
        }
        for (int i = 0; i < b->n; i++) {
            if (b->queues[i].ec->tc->proxy != NULL) {
                moved += br_proxy_progress(b->queues[i].ec->tc->proxy);
            }
        }
        if (moved) {
            if (blocked_since != 0) {
                for (int i = 0; i < b->n; i++) {
                    b->queues[i].ec->symptom_ns = 0; /* symptoms seen were transient */
                }
                oplog_heads(b, BR_OPLOG_EV_RUN, 0);
            }
            idle = 0;
            blocked_since = 0;
            continue;
        }
        nap(idle++, spin);
        if ((idle & 63) != 0) {
            continue;
        }
        /* Another thread's ncclCommAbort, ncclCommDestroy or ncclCommRevoke. */
        revoked = br_exec_revoked_check(b);
        if (revoked) {
            res = b->queues[revoked - 1].ec->error;
            goto fail;
        }
        uint64_t now = br_time_ns();
        if (blocked_since == 0) {
            blocked_since = now;
            next_check = now + 100000000ull;
            next_warn = now + warn_ns;
            oplog_heads(b, BR_OPLOG_EV_WAIT, now);
            continue;
        }
        if (now >= next_check) {
            next_check = now + 100000000ull;
            oplog_heads(b, BR_OPLOG_EV_WAIT, blocked_since); /* whom it waits for may change */
            if (health_round(b, now - blocked_since, &res)) {
                goto fail;
            }
        }
        if (warn_ns > 0 && now >= next_warn) {
            next_warn = now + warn_ns;
            br_exec_watchdog_warn(b, now - blocked_since);
        }
    }
    proxies_active(b, -1);
    return ncclSuccess;
fail:
    proxies_active(b, -1);
    userbuf_abandon(b);
    fail_unwind(b);
    return res;
}

const br_exec_ops_t br_exec_host = {
    .name = "host",
    .enqueue = host_enqueue,
    .enqueue_copy = host_enqueue_copy,
    .run = host_run,
    .reset = host_reset,
    .free = host_free,
};

/* A lone operation through the node arena (the small calls, whose latency is mostly the
 * call's own bookkeeping) runs its work item from here for host_run's first 64 naps,
 * exactly as host_run would (the same naps; no health check, clock read or revocation
 * check happens before the 64th there either), and is handed to host_run only if it is
 * still waiting then. This skips the queue, the batch's setup and the proxy's
 * bookkeeping, which an arena operation does not use (it is taken only without a
 * proxy and without a profiler). Returns 1 when it ran the operation (result in
 * *res_p), 0 when host_run should run it from the start. */
static int solo_fast(br_exec_comm_t *ec, const br_op_t *op, ncclResult_t *res_p)
{
    if ((op->algo != BR_ALGO_ONESHOT && op->algo != BR_ALGO_DIRECT_READ) || op->count == 0 ||
        !br_func_is_collective(op->func) || ec->nranks == 1 || ec->prof != NULL ||
        ec->tc->proxy != NULL || atomic_load_explicit(&ec->revoked, memory_order_acquire)) {
        return 0;
    }
    if (ec->defer != NULL && br_exec_defer_settle(ec, 0) != ncclSuccess) {
        arena_mark_failed(ec);
        announce_failure(ec);
        *res_p = ec->error;
        return 1;
    }
    br_exec_queue_t q;
    br_work_t w;
    unsigned spin = ec->oversubscribed ? 0 : (unsigned)BR_PARAM_INT(SPIN);

    memset(&w, 0, sizeof(w));
    w.op = *op;
    w.event = -1;
    arena_item(ec, &w);
    memset(&q, 0, sizeof(q));
    q.ec = ec;
    q.wait_peer = -1;
    /* The log hears that the operation runs only once it waits: one update, not two, for
     * a call that finishes without waiting. */
    int noted = 0;
    for (unsigned idle = 0; idle < 64;) {
        int done = 0;
        int r = br_work_arena(&q, &w, &done);
        if (r < 0) {
            br_exec_batch_t one; /* the item as a batch of its own for fail_unwind */
            memset(&one, 0, sizeof(one));
            q.items = &w;
            q.n = 1;
            one.queues = &q;
            one.n = 1;
            fail_unwind(&one);
            *res_p = ec->error;
            return 1;
        }
        if (done) {
            br_oplog_note(ec, op->log_ticket, noted ? BR_OPLOG_EV_ITEM_DONE : BR_OPLOG_EV_DONE,
                          -1, NULL, 0);
            *res_p = ncclSuccess;
            return 1;
        }
        if (r > 0) {
            idle = 0;
            continue;
        }
        if (!noted) {
            br_oplog_note(ec, op->log_ticket, BR_OPLOG_EV_ITEM, -1, NULL, 0);
            noted = 1;
        }
        nap(idle++, spin);
    }
    /* Still waiting: the full loop takes the item where it is. */
    br_exec_queue_t *hq;
    ncclResult_t res = queue_get(ec->solo, ec, Q_ARENA, 0, &hq);
    if (res == ncclSuccess) {
        res = queue_push(hq, &w);
    }
    if (res == ncclSuccess) {
        res = host_run(ec->solo);
    }
    host_reset(ec->solo);
    *res_p = res;
    return 1;
}

ncclResult_t br_exec_run_solo(br_exec_comm_t *ec, const br_op_t *op)
{
    ncclResult_t res;

    if (ec->error != ncclSuccess) {
        BR_WARN(NCCL_COLL, "rank %d: communicator already failed: %s", ec->rank, ec->error_msg);
        arena_mark_failed(ec);
        br_exec_oplog_settle(ec, op);
        return ec->error;
    }
    if (ec->solo == NULL) {
        BR_CHECK(br_calloc(&ec->solo, 1, "operation queue"));
    }
    /* Wants peers sent while they waited for calls before this one are answered (a group
     * drops them in its connection setup): a rank that is late to every call, and so
     * never waits, would otherwise keep one per call. */
    if (br_bootstrap_queued(ec->tc->boot) != 0) { /* the common case costs one load */
        br_transport_asks_prune(ec->tc, BR_TRANSPORT_TAG_P2P, br_exec_call_desc(op).seq);
    }
    if (solo_fast(ec, op, &res)) {
        if (res != ncclSuccess) {
            br_exec_oplog_settle(ec, op);
        }
        return res;
    }
    res = host_enqueue(ec->solo, ec, op);
    if (res == ncclSuccess) {
        res = host_run(ec->solo);
    }
    host_reset(ec->solo);
    if (res != ncclSuccess) {
        br_exec_oplog_settle(ec, op);
    }
    return res;
}

ncclResult_t br_exec_run_item(br_exec_comm_t *ec, const br_work_t *w)
{
    br_exec_queue_t *q;
    ncclResult_t res;

    if (ec->solo == NULL) {
        BR_CHECK(br_calloc(&ec->solo, 1, "operation queue"));
    }
    res = queue_get(ec->solo, ec, Q_ARENA, 0, &q);
    if (res == ncclSuccess) {
        res = queue_push(q, w);
    }
    if (res == ncclSuccess) {
        res = host_run(ec->solo);
    }
    host_reset(ec->solo);
    return res;
}

/* The operation queue, deferred checks and scratch (made again on use or by connect). */
static void buffers_free(br_exec_comm_t *ec)
{
    if (ec->solo != NULL) {
        host_free(ec->solo);
        free(ec->solo);
        ec->solo = NULL;
    }
    br_exec_defer_free(ec);
    free(ec->gather_scratch);
    free(ec->ll_scratch);
    ec->gather_scratch = ec->ll_scratch = NULL;
}

void br_exec_comm_release(br_exec_comm_t *ec)
{
    buffers_free(ec);
    br_exec_oplog_close(ec);
}

void br_exec_comm_suspend(br_exec_comm_t *ec)
{
    /* The operation log stays: it is the state dump's history, not a buffer of calls. */
    buffers_free(ec);
    /* The transport frees the connections: no pointer to them may outlive that. */
    for (int c = 0; c < BR_MAX_CHANNELS; c++) {
        memset(ec->chan[c].send, 0, sizeof(ec->chan[c].send));
        memset(ec->chan[c].recv, 0, sizeof(ec->chan[c].recv));
    }
    for (int p = 0; p < ec->nranks; p++) {
        ec->p2p_send[p] = ec->p2p_recv[p] = NULL;
    }
    /* A new arena starts at operation 0 on every rank alike. */
    ec->arena = NULL;
    ec->arena_seq = 0;
    ec->has_net = 0;
}

size_t br_exec_mem_bytes(const br_exec_comm_t *ec)
{
    size_t bytes = 0;
    if (ec->gather_scratch != NULL) {
        bytes += (size_t)ec->nranks * BR_PLAN_RING_ONESHOT_MAX;
    }
    if (ec->ll_scratch != NULL) {
        bytes += (BR_MAX_TREE_ARITY + 1) * ec->ll_scratch_each;
    }
    return bytes;
}
