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

enum { Q_RING = 0, Q_SEND = 1, Q_RECV = 2, Q_LOCAL = 3 };

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
    br_exec_queue_t *q = &b->queues[b->n++];
    memset(q, 0, sizeof(*q));
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

static int is_collective(br_func_t f)
{
    return f <= BR_FUNC_ALLREDUCE;
}

ncclResult_t br_exec_enqueue(br_exec_batch_t *b, br_exec_comm_t *ec, const br_exec_op_t *op)
{
    br_exec_queue_t *q;
    br_work_t w;
    size_t tsize = br_type_size(op->type);

    memset(&w, 0, sizeof(w));
    w.op = *op;
    if (is_collective(op->func)) {
        if (op->count == 0) {
            return ncclSuccess;
        }
        if (ec->nranks == 1) {
            w.kind = BR_WORK_COPY;
            w.copy_src = op->sendbuff;
            w.bytes = op->count * tsize;
            BR_CHECK(queue_get(b, ec, Q_LOCAL, 0, &q));
            return queue_push(q, &w);
        }
        int nch = op->nchannels > 0 && op->nchannels <= ec->nchannels
                      ? op->nchannels
                      : br_plan_nchannels(op->count * tsize, ec->nchannels);
        for (int c = 0; c < nch; c++) {
            br_work_ring_init(&w, ec, c, nch);
            if (w.lo == w.hi) {
                continue;
            }
            BR_CHECK(queue_get(b, ec, Q_RING, c, &q));
            BR_CHECK(queue_push(q, &w));
        }
        return ncclSuccess;
    }
    w.bytes = op->count * tsize;
    if (w.bytes == 0) {
        return ncclSuccess;
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
    for (int i = 0; i < b->n; i++) {
        free(b->queues[i].items);
    }
    free(b->queues);
    memset(b, 0, sizeof(*b));
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
    snprintf(buf, len, "%s #%llu (count %zu, %s%s%d) waiting for %s rank %d",
             br_func_name(w->op.func), (unsigned long long)w->op.seq, w->op.count,
             br_type_name(w->op.type), w->kind == BR_WORK_RING ? ", channel " : ", peer ",
             w->kind == BR_WORK_RING ? w->ch : w->op.peer, q->wait_what ? q->wait_what : "",
             q->wait_peer);
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
    if (tc->proxy != NULL && br_proxy_error(tc->proxy, msg, sizeof(msg)) != ncclSuccess) {
        br_exec_fail(ec, ncclRemoteError, "rank %d (host %s): %s; while in %s", ec->rank,
                     br_host_name(), msg, what);
        return 1;
    }
    if (br_bootstrap_poll_abort(tc->boot, &from, msg, sizeof(msg))) {
        br_exec_fail(ec, ncclRemoteError, "rank %d (host %s): rank %d reported a failure: %s",
                     ec->rank, br_host_name(), from, msg);
        return 1;
    }
    for (int p = 0; p < ec->nranks; p++) {
        const br_peer_info_t *pi = &tc->peers[p];
        if (p == ec->rank || pi->host_hash != tc->peers[ec->rank].host_hash ||
            pi->pid_hash == tc->peers[ec->rank].pid_hash) {
            continue;
        }
        if (pid_is_dead(pi->pid)) {
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
            break;
        }
    }
    return res;
}
