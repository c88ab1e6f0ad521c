/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The progress engine: builds the queues of a group and runs them to completion from the
 * calling thread. While nothing moves it spins briefly, then yields, then sleeps in
 * growing naps (ranks often outnumber cores, and a spinning waiter starves the peer it
 * waits for). While blocked it checks, every ~100 ms: the proxy's network errors, abort
 * notices from other ranks, whether peers on this host are still alive, and the
 * watchdog (BRAID_WAIT_WARN, BRAID_TIMEOUT). A failure is recorded in the communicator
 * (sticky) and announced to its other ranks so nobody is left waiting.
 */
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "exec_int.h"
#include "util.h"

enum { Q_RING = 0, Q_SEND = 1, Q_RECV = 2, Q_LOCAL = 3, Q_FLAT = 4 };

void br_exec_fail(br_exec_comm_t *ec, ncclResult_t res, const char *fmt, ...)
{
    va_list ap;
    if (ec->error != ncclSuccess) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(ec->error_msg, sizeof(ec->error_msg), fmt, ap);
    va_end(ap);
    ec->error = res;
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

static const char *prof_type_name(ncclDataType_t t)
{
    static const char *const names[ncclNumTypes] = {
        "ncclInt8",    "ncclUint8",    "ncclInt32",      "ncclUint32",
        "ncclInt64",   "ncclUint64",   "ncclFloat16",    "ncclFloat32",
        "ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2"};
    return (unsigned)t < ncclNumTypes ? names[t] : "unknown";
}

static int prof_wants(const br_exec_comm_t *ec, uint64_t bits)
{
    return ec->prof != NULL && (br_plugin_profiler_mask() & bits) != 0;
}

static ncclResult_t event_push(br_exec_batch_t *b, br_exec_comm_t *ec, void *handle, int remaining,
                               int *idx_p)
{
    if (b->nevents == b->events_cap) {
        int cap = b->events_cap ? 2 * b->events_cap : 16;
        br_exec_event_t *e = realloc(b->events, (size_t)cap * sizeof(*e));
        if (e == NULL) {
            BR_WARN(NCCL_ALLOC, "out of memory tracking profiler events");
            return ncclSystemError;
        }
        b->events = e;
        b->events_cap = cap;
    }
    b->events[b->nevents].ec = ec;
    b->events[b->nevents].handle = handle;
    b->events[b->nevents].remaining = remaining;
    *idx_p = b->nevents++;
    return ncclSuccess;
}

/* The GroupApi event of this comm in this batch (remaining -1 marks group events). */
static void *prof_group(br_exec_batch_t *b, br_exec_comm_t *ec)
{
    ncclProfilerEventDescr_v6_t d;
    void *h = NULL;
    int idx;

    for (int i = 0; i < b->nevents; i++) {
        if (b->events[i].ec == ec && b->events[i].remaining == -1) {
            return b->events[i].handle;
        }
    }
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileGroupApi;
    d.rank = ec->rank;
    d.groupApi.groupDepth = 1;
    if (br_plugin_profiler_start_event(ec->prof, &d, &h) != ncclSuccess ||
        event_push(b, ec, h, -1, &idx) != ncclSuccess) {
        return NULL;
    }
    (void)br_plugin_profiler_record_event_state(ec->prof, h, ncclProfilerGroupStartApiStop, NULL);
    (void)br_plugin_profiler_record_event_state(ec->prof, h, ncclProfilerGroupEndApiStart, NULL);
    return h;
}

/* Start the Coll or P2p event of op; returns its index, or -1 when not profiled. */
static int prof_op_start(br_exec_batch_t *b, br_exec_comm_t *ec, const br_op_t *op, int nch,
                         const char *algo)
{
    ncclProfilerEventDescr_v6_t d;
    void *h = NULL;
    int idx;
    int p2p = op->func == BR_FUNC_SEND || op->func == BR_FUNC_RECV;

    if (!prof_wants(ec, ncclProfileColl | ncclProfileP2p | ncclProfileGroupApi)) {
        return -1;
    }
    memset(&d, 0, sizeof(d));
    d.parentObj = prof_group(b, ec);
    d.rank = ec->rank;
    if (p2p) {
        d.type = ncclProfileP2p;
        d.p2p.func = br_func_name(op->func);
        d.p2p.buff = op->func == BR_FUNC_SEND ? (void *)(uintptr_t)op->sendbuff : op->recvbuff;
        d.p2p.datatype = prof_type_name(op->type);
        d.p2p.count = op->count;
        d.p2p.peer = op->peer;
        d.p2p.nChannels = 1;
    } else {
        d.type = ncclProfileColl;
        d.coll.seqNumber = ec->prof_seq[op->func]++;
        d.coll.func = br_func_name(op->func);
        d.coll.sendBuff = op->sendbuff;
        d.coll.recvBuff = op->recvbuff;
        d.coll.count = op->count;
        d.coll.root = op->root;
        d.coll.datatype = prof_type_name(op->type);
        d.coll.nChannels = (uint8_t)nch;
        d.coll.algo = algo;
        d.coll.proto = "SIMPLE";
    }
    if (br_plugin_profiler_start_event(ec->prof, &d, &h) != ncclSuccess || h == NULL ||
        event_push(b, ec, h, 0, &idx) != ncclSuccess) {
        return -1;
    }
    return idx;
}

/* A work item of event idx finished (or none was queued: count 0). */
static void prof_op_done(br_exec_batch_t *b, int idx, int finished)
{
    br_exec_event_t *e;
    if (idx < 0) {
        return;
    }
    e = &b->events[idx];
    e->remaining -= finished;
    if (e->remaining == 0 && e->handle != NULL) {
        (void)br_plugin_profiler_stop_event(e->ec->prof, e->handle);
        e->handle = NULL;
    }
}

/* End of a batch: every event still open stops (after a failure too), groups last. */
static void prof_batch_end(br_exec_batch_t *b)
{
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < b->nevents; i++) {
            br_exec_event_t *e = &b->events[i];
            if (e->handle != NULL && (e->remaining == -1) == (pass == 1)) {
                (void)br_plugin_profiler_stop_event(e->ec->prof, e->handle);
                e->handle = NULL;
            }
        }
    }
}

ncclResult_t br_exec_enqueue(br_exec_batch_t *b, br_exec_comm_t *ec, const br_op_t *op)
{
    br_exec_queue_t *q;
    br_work_t w;
    size_t tsize = br_type_size(op->type);

    memset(&w, 0, sizeof(w));
    w.op = *op;
    w.event = -1;
    if (br_func_is_collective(op->func)) {
        int nch = op->nchannels > 0 && op->nchannels <= ec->nchannels
                      ? op->nchannels
                      : br_plan_nchannels(op->count * tsize, ec->nchannels);
        int flat = ec->nranks > 1 && br_work_flat_fits(ec, op);
        int gather = ec->nranks > 1 && !flat && br_work_gather_fits(ec, op);
        int direct = flat && br_work_flat_direct(ec, op);
        /* The one-shot paths are Braid's own: named so a trace shows which ran. */
        const char *algo = direct   ? "DIRECT_SHM"
                           : flat   ? "ONESHOT_SHM"
                           : gather ? "ONESHOT_RING"
                                    : "RING";
        w.event = ec->prof != NULL ? prof_op_start(b, ec, op, flat || gather ? 1 : nch, algo) : -1;
        if (op->count == 0) {
            prof_op_done(b, w.event, 0);
            return ncclSuccess;
        }
        if (ec->nranks == 1) {
            if (w.event >= 0) {
                b->events[w.event].remaining++;
            }
            w.kind = BR_WORK_COPY;
            w.copy_src = op->sendbuff;
            w.bytes = op->count * tsize;
            BR_CHECK(queue_get(b, ec, Q_LOCAL, 0, &q));
            return queue_push(q, &w);
        }
        if (flat) {
            if (w.event >= 0) {
                b->events[w.event].remaining++;
            }
            w.kind = BR_WORK_FLAT;
            w.flat_k = ec->flat_seq++;
            w.flat_direct = direct;
            BR_CHECK(queue_get(b, ec, Q_FLAT, 0, &q));
            return queue_push(q, &w);
        }
        if (gather) {
            if (ec->gather_scratch == NULL) {
                /* Sized for the largest one-shot once: queued items keep pointing at it. */
                BR_CHECK(br_calloc(&ec->gather_scratch, (size_t)ec->nranks * BR_GATHER_MAX,
                                   "one-shot buffer"));
            }
            if (w.event >= 0) {
                b->events[w.event].remaining++;
            }
            br_work_gather_init(&w, ec, ec->gather_scratch);
            BR_CHECK(queue_get(b, ec, Q_RING, 0, &q));
            return queue_push(q, &w);
        }
        for (int c = 0; c < nch; c++) {
            br_work_ring_init(&w, ec, c, nch);
            if (w.lo == w.hi) {
                continue;
            }
            BR_CHECK(queue_get(b, ec, Q_RING, c, &q));
            BR_CHECK(queue_push(q, &w));
            if (w.event >= 0) {
                b->events[w.event].remaining++;
            }
        }
        prof_op_done(b, w.event, 0);
        return ncclSuccess;
    }
    w.bytes = op->count * tsize;
    w.event = ec->prof != NULL ? prof_op_start(b, ec, op, 1, NULL) : -1;
    if (w.bytes == 0) {
        prof_op_done(b, w.event, 0);
        return ncclSuccess;
    }
    if (w.event >= 0) {
        b->events[w.event].remaining++;
    }
    if (op->func == BR_FUNC_SEND) {
        w.kind = BR_WORK_SEND;
        w.conn = ec->p2p_send[op->peer];
        BR_CHECK(queue_get(b, ec, Q_SEND, op->peer, &q));
    } else {
        w.kind = BR_WORK_RECV;
        w.conn = ec->p2p_recv[op->peer];
        BR_CHECK(queue_get(b, ec, Q_RECV, op->peer, &q));
    }
    return queue_push(q, &w);
}

ncclResult_t br_exec_enqueue_self(br_exec_batch_t *b, br_exec_comm_t *ec, const void *src,
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

void br_exec_batch_free(br_exec_batch_t *b)
{
    prof_batch_end(b);
    free(b->events);
    for (int i = 0; i < b->ninit; i++) {
        free(b->queues[i].items);
    }
    free(b->queues);
    memset(b, 0, sizeof(*b));
}

void br_exec_batch_reset(br_exec_batch_t *b)
{
    prof_batch_end(b);
    b->nevents = 0;
    b->n = 0;
}

ncclResult_t br_exec_run_solo(br_exec_comm_t *ec, const br_op_t *op)
{
    ncclResult_t res;

    if (ec->error != ncclSuccess) {
        BR_WARN(NCCL_COLL, "rank %d: communicator already failed: %s", ec->rank, ec->error_msg);
        return ec->error;
    }
    if (ec->solo == NULL) {
        BR_CHECK(br_calloc(&ec->solo, 1, "operation queue"));
    }
    res = br_exec_enqueue(ec->solo, ec, op);
    if (res == ncclSuccess) {
        res = br_exec_run(ec->solo);
    }
    br_exec_batch_reset(ec->solo);
    return res;
}

/* Is a process of this host gone (exited, or a zombie nobody reaped yet)? */
static int pid_is_dead(int pid)
{
    char path[64], buf[256];
    FILE *f;

    if (kill(pid, 0) != 0 && errno == ESRCH) {
        return 1;
    }
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    f = fopen(path, "r");
    if (f == NULL) {
        return 0; /* no procfs: trust kill() */
    }
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    return p != NULL && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

static const br_work_t *queue_head(const br_exec_queue_t *q)
{
    return q->cur < q->n ? &q->items[q->cur] : NULL;
}

static void describe_wait(const br_exec_queue_t *q, char *buf, size_t len)
{
    const br_work_t *w = queue_head(q);
    if (w == NULL) {
        snprintf(buf, len, "nothing");
        return;
    }
    char where[32] = "";
    if (w->kind == BR_WORK_RING) {
        snprintf(where, sizeof(where), ", channel %d", w->ch);
    } else if (w->kind == BR_WORK_SEND || w->kind == BR_WORK_RECV) {
        snprintf(where, sizeof(where), ", peer %d", w->op.peer);
    }
    snprintf(buf, len, "%s #%llu (count %zu, %s%s) waiting for %s rank %d",
             br_func_name(w->op.func), (unsigned long long)w->op.seq, w->op.count,
             br_type_name(w->op.type), where, q->wait_what ? q->wait_what : "", q->wait_peer);
}

/* Has the executor consumed everything the connection delivered? */
static int recv_starved(const br_conn_t *c)
{
    return atomic_load_explicit(&c->ctrl->tail, memory_order_acquire) <= c->step;
}

/* A connection that a peer closed is often the consequence of a failure elsewhere (the
 * peer failed because a third rank died, and its abort notice is on the way). Wait a few
 * health checks for that notice, which names the root cause, before failing with the
 * local symptom. Returns nonzero while still waiting. */
static int symptom_wait(br_exec_comm_t *ec)
{
    uint64_t now = br_time_ns();
    if (ec->symptom_ns == 0) {
        ec->symptom_ns = now;
    }
    return now - ec->symptom_ns < 300000000ull;
}

/* The periodic checks of a blocked communicator. Returns nonzero on failure. */
static int health_check(br_exec_batch_t *b, br_exec_comm_t *ec, uint64_t blocked_ns)
{
    br_transport_comm_t *tc = ec->tc;
    char msg[600], what[300];
    int from;

    what[0] = '\0';
    for (int i = 0; i < b->n; i++) {
        if (b->queues[i].ec == ec && queue_head(&b->queues[i]) != NULL) {
            describe_wait(&b->queues[i], what, sizeof(what));
            break;
        }
    }
    /* Another rank's report names the root cause: check it before our own symptoms. */
    if (br_bootstrap_poll_abort(tc->boot, &from, msg, sizeof(msg))) {
        br_exec_fail(ec, ncclRemoteError, "rank %d (host %s): rank %d reported a failure: %s",
                     ec->rank, br_host_name(), from, msg);
        return 1;
    }
    /* A peer that ran the same collective by the other path got other arguments. */
    for (int i = 0; i < b->n; i++) {
        const br_work_t *w = queue_head(&b->queues[i]);
        if (b->queues[i].ec == ec && w != NULL && br_work_probe_mismatch(&b->queues[i], w)) {
            return 1;
        }
    }
    /* A blocked receive on a net connection the peer has closed will never complete. */
    for (int i = 0; i < b->n; i++) {
        const br_exec_queue_t *q = &b->queues[i];
        const br_work_t *w = queue_head(q);
        const br_conn_t *c = NULL;
        if (q->ec != ec || w == NULL) {
            continue;
        }
        if (w->kind == BR_WORK_RECV) {
            c = w->conn;
        } else if (w->kind == BR_WORK_RING) {
            c = ec->ring_recv[w->ch];
        }
        if (c != NULL && c->net != NULL &&
            atomic_load_explicit(&c->net->failed, memory_order_acquire) != ncclSuccess &&
            recv_starved(c) && !symptom_wait(ec)) {
            describe_wait(q, what, sizeof(what));
            br_exec_fail(ec, ncclRemoteError, "rank %d (host %s): %s; while in %s", ec->rank,
                         br_host_name(), c->net->why, what);
            return 1;
        }
    }
    if (tc->proxy != NULL && br_proxy_error(tc->proxy, msg, sizeof(msg)) != ncclSuccess &&
        !symptom_wait(ec)) {
        br_exec_fail(ec, ncclRemoteError, "rank %d (host %s): %s; while in %s", ec->rank,
                     br_host_name(), msg, what);
        return 1;
    }
    /* Only a peer that a blocked operation waits for matters: a rank that finished its
     * work and left is no error. Ranks blocked further away learn through abort notices. */
    for (int i = 0; i < b->n; i++) {
        const br_exec_queue_t *q = &b->queues[i];
        int p = q->wait_peer;
        if (q->ec != ec || queue_head(q) == NULL || p < 0 || p >= ec->nranks || p == ec->rank) {
            continue;
        }
        const br_peer_info_t *pi = &tc->peers[p];
        if (pi->host_hash != tc->peers[ec->rank].host_hash ||
            pi->pid_hash == tc->peers[ec->rank].pid_hash) {
            continue;
        }
        /* Over the network, what a peer sent before exiting may still be on its way up
         * through the plugin: keep progressing a little before calling it lost. */
        if (pid_is_dead(pi->pid) &&
            !(br_transport_select(tc, p) == BR_TRANSPORT_NET && symptom_wait(ec))) {
            describe_wait(q, what, sizeof(what));
            br_exec_fail(ec, ncclRemoteError,
                         "rank %d (pid %d on host %s) died while rank %d was in %s", p, pi->pid,
                         pi->host, ec->rank, what);
            return 1;
        }
    }
    int64_t timeout = BR_PARAM_INT(TIMEOUT);
    if (timeout > 0 && blocked_ns > (uint64_t)timeout * 1000000000ull) {
        br_exec_fail(ec, ncclRemoteError,
                     "rank %d (host %s): no progress for %lld s (BRAID_TIMEOUT) in %s: is that "
                     "rank stuck, or did the ranks make different calls?",
                     ec->rank, br_host_name(), (long long)timeout, what);
        return 1;
    }
    return 0;
}

static void watchdog_warn(br_exec_batch_t *b, uint64_t blocked_ns)
{
    char what[300];
    for (int i = 0; i < b->n; i++) {
        if (queue_head(&b->queues[i]) != NULL) {
            describe_wait(&b->queues[i], what, sizeof(what));
            BR_WARN(NCCL_COLL, "rank %d: no progress for %llu s: %s", b->queues[i].ec->rank,
                    (unsigned long long)(blocked_ns / 1000000000ull), what);
        }
    }
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

ncclResult_t br_exec_run(br_exec_batch_t *b)
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
            return b->queues[i].ec->error;
        }
    }
    proxies_active(b, 1);
    for (;;) {
        int pending = 0, moved = 0;
        for (int i = 0; i < b->n; i++) {
            br_exec_queue_t *q = &b->queues[i];
            while (q->cur < q->n) {
                int done = 0;
                int r = br_work_step(q, &q->items[q->cur], &done);
                if (r < 0) {
                    res = q->ec->error;
                    goto fail;
                }
                moved += r;
                if (!done) {
                    break;
                }
                prof_op_done(b, q->items[q->cur].event, 1);
                q->cur++;
            }
            pending += q->cur < q->n;
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
            }
            idle = 0;
            blocked_since = 0;
            continue;
        }
        nap(idle++, spin);
        if ((idle & 63) != 0) {
            continue;
        }
        uint64_t now = br_time_ns();
        if (blocked_since == 0) {
            blocked_since = now;
            next_check = now + 100000000ull;
            next_warn = now + warn_ns;
            continue;
        }
        if (now >= next_check) {
            next_check = now + 100000000ull;
            for (int i = 0; i < b->n; i++) {
                if (health_check(b, b->queues[i].ec, now - blocked_since)) {
                    res = b->queues[i].ec->error;
                    goto fail;
                }
            }
        }
        if (warn_ns > 0 && now >= next_warn) {
            next_warn = now + warn_ns;
            watchdog_warn(b, now - blocked_since);
        }
    }
    proxies_active(b, -1);
    return ncclSuccess;
fail:
    proxies_active(b, -1);
    for (int i = 0; i < b->n; i++) {
        br_exec_comm_t *ec = b->queues[i].ec;
        if (ec->error != ncclSuccess) {
            /* Tell the other ranks, so they fail now instead of waiting for us. */
            br_bootstrap_abort_notify(ec->tc->boot, ec->error_msg);
            /* Plugins may have logged consequences since: the cause is what the caller
             * should read in ncclGetLastError(). */
            br_log_set_last_error(ec->error_msg);
            break;
        }
    }
    return res;
}
