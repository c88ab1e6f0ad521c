/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What a blocked executor checks, every ~100 ms while nothing moves: abort notices from
 * other ranks (they name the root cause), the same collective seen on another path
 * (mismatched calls), network connections a peer closed, the proxy's errors, peers of
 * this host that died, and BRAID_TIMEOUT; and, every BRAID_WAIT_WARN seconds, a line
 * saying what each queue waits for. Called by the thread that runs the batch.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_int.h"
#include "util.h"

/* Is a process of this host gone (exited, or a zombie nobody reaped yet)? */
int br_exec_pid_is_dead(int pid)
{
    return br_proc_gone(pid);
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
    char where[64] = "";
    if (w->kind == BR_WORK_SCHED) {
        snprintf(where, sizeof(where), ", %s/%s, channel %d", br_algo_name(w->op.algo),
                 br_proto_name(w->op.proto), w->ch);
    } else if (w->kind == BR_WORK_SEND || w->kind == BR_WORK_RECV) {
        snprintf(where, sizeof(where), ", peer %d", w->op.peer);
    } else if (w->kind == BR_WORK_COLLNET) {
        snprintf(where, sizeof(where), ", %s, chunk %zu in the collnet plugin",
                 br_algo_name(w->op.algo), w->cn_done);
    }
    if (q->wait_what == NULL || q->wait_peer < 0) { /* it has not had to wait yet */
        snprintf(buf, len, "%s #%llu (count %zu, %s%s)", br_func_name(w->op.func),
                 (unsigned long long)w->op.seq, w->op.count, br_type_name(w->op.type), where);
        return;
    }
    snprintf(buf, len, "%s #%llu (count %zu, %s%s) waiting for %s rank %d",
             br_func_name(w->op.func), (unsigned long long)w->op.seq, w->op.count,
             br_type_name(w->op.type), where, q->wait_what, q->wait_peer);
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

void br_exec_revoke(br_exec_comm_t *ec, const char *why)
{
    int expected = 0;
    /* The first revoker's reason stands; it is written before the flag is seen. */
    if (atomic_load_explicit(&ec->revoked, memory_order_acquire) == 0) {
        snprintf(ec->revoked_why, sizeof(ec->revoked_why), "%s", why);
    }
    atomic_compare_exchange_strong_explicit(&ec->revoked, &expected, 1, memory_order_release,
                                            memory_order_relaxed);
}

int br_exec_revoked_check(br_exec_batch_t *b)
{
    for (int i = 0; i < b->n; i++) {
        br_exec_comm_t *ec = b->queues[i].ec;
        if (atomic_load_explicit(&ec->revoked, memory_order_acquire)) {
            char what[300] = "a call that had not started";
            for (int j = 0; j < b->n; j++) {
                if (b->queues[j].ec == ec && queue_head(&b->queues[j]) != NULL) {
                    describe_wait(&b->queues[j], what, sizeof(what));
                    break;
                }
            }
            br_exec_fail(ec, ncclInvalidUsage, "rank %d (host %s): %s while in %s", ec->rank,
                         br_host_name(), ec->revoked_why, what);
            return i + 1;
        }
    }
    return 0;
}

/* The periodic checks of a blocked communicator. Returns nonzero on failure. */
/* The key of a blocked queue's operation in wait notices: the same call has the same key
 * on every rank (collectives by their function and sequence number, messages by theirs
 * per pair). With the function in it, a rank in another collective of the same number
 * (an AllReduce where the others are in AlltoAllV) is named as not in this call. */
static uint64_t wait_key(const br_work_t *w)
{
    int msg = w->op.func == BR_FUNC_SEND || w->op.func == BR_FUNC_RECV;
    uint64_t kind = msg ? 2 : 1, func = msg ? 0 : (uint64_t)w->op.func;
    return kind << 56 | func << 48 | ((w->op.seq + 1) & 0xffffffffffffull);
}

/* The notice slot of a queue: its channel (messages: slot 0). */
static int wait_slot(const br_work_t *w)
{
    return w->kind == BR_WORK_SCHED && w->ch >= 0 ? w->ch % BR_BOOT_WAIT_SLOTS : 0;
}

/* Which rank `rank` waits for in slot `slot` per its notice, or on any slot if not there;
 * -1 if none. */
static int notice_next(const int *peers, int slot, int nranks)
{
    if (peers[slot] >= 0 && peers[slot] < nranks) {
        return peers[slot];
    }
    for (int i = 0; i < BR_BOOT_WAIT_SLOTS; i++) {
        if (peers[i] >= 0 && peers[i] < nranks) {
            return peers[i];
        }
    }
    return -1;
}

/* After BRAID_TIMEOUT, follow the waits from the rank this one waits for to the rank that
 * is not waiting, and say so: in a ring every rank times out waiting for its neighbour,
 * and only the end of the chain is the one to look at. Each step follows the same
 * channel, whose waits form one path. A rank blocked in another call (it finished this
 * one early, as a Reduce non-root may, and waits in the next for a rank still in the
 * previous) is followed on in that call, so the chain still ends at the rank everyone
 * waits for (chaos seed 22049: a rank aborted between calls, and a rank one call ahead
 * named only its neighbour in the call behind). visited (nranks entries, may be NULL)
 * ends a cycle that does not pass through this rank. */
static void explain_chain(br_exec_comm_t *ec, const br_exec_queue_t *q, char *buf, size_t len)
{
    const br_work_t *w = queue_head(q);
    uint64_t key = wait_key(w), k;
    int slot = wait_slot(w), cur = q->wait_peer, next, steps = 0, other = 0;
    int peers[BR_BOOT_WAIT_SLOTS];
    char what[300];
    char *visited = NULL;
    size_t at = 0;

    buf[0] = '\0';
    if (cur < 0 || cur >= ec->nranks || cur == ec->rank) {
        return;
    }
    (void)br_calloc(&visited, (size_t)ec->nranks, "wait chain"); /* NULL: bounded by steps */
    while (steps++ < ec->nranks && at < len &&
           br_bootstrap_peer_wait(ec->tc->boot, cur, &k, peers, what, sizeof(what))) {
        if (visited != NULL) {
            visited[cur] = 1;
        }
        next = notice_next(peers, slot, ec->nranks);
        if (k != key) {
            /* In another call: say where (its notice names whom it waits for there), and
             * follow its waits in that call. */
            at += (size_t)snprintf(buf + at, len - at,
                                   "; rank %d is not in %s call but blocked in %s", cur,
                                   other ? "that" : "this", what);
            key = k;
            other = 1;
            if (next < 0 || next == cur) {
                goto out; /* no peer to follow: where it is blocked is the end */
            }
        } else if (next < 0 || next == cur) {
            break;
        } else {
            at += (size_t)snprintf(buf + at, len - at, "; rank %d waits in %s call for rank %d",
                                   cur, other ? "that" : "the same", next);
        }
        if (at >= len || next == ec->rank || (visited != NULL && visited[next])) {
            if (at < len) {
                snprintf(buf + at, len - at, ": the ranks wait for each other in a cycle");
            }
            goto out;
        }
        cur = next;
    }
    if (at < len) {
        snprintf(buf + at, len - at,
                 "; rank %d has not reported waiting in %s call: did it skip it, or is it "
                 "busy or stuck outside the library?",
                 cur, other ? "that" : "this");
    }
out:
    free(visited);
}

/* Tell the peers what this communicator's queues wait for in the call `key`. */
static void post_wait(br_exec_batch_t *b, br_exec_comm_t *ec, uint64_t key, const char *what)
{
    int peers[BR_BOOT_WAIT_SLOTS];

    for (int i = 0; i < BR_BOOT_WAIT_SLOTS; i++) {
        peers[i] = -1;
    }
    for (int i = 0; i < b->n; i++) {
        const br_exec_queue_t *q = &b->queues[i];
        const br_work_t *w = queue_head(q);
        if (q->ec == ec && w != NULL && wait_key(w) == key && q->wait_peer >= 0 &&
            peers[wait_slot(w)] < 0) {
            peers[wait_slot(w)] = q->wait_peer;
        }
    }
    ec->wait_posted = key;
    br_bootstrap_post_wait(ec->tc->boot, key, peers, what);
}

/* A blocked receive on a net connection the peer has closed will never complete: fail
 * with the plugin's reason. Returns 1 when it failed the communicator. */
static int check_net_closed(br_exec_batch_t *b, br_exec_comm_t *ec, char *what, size_t cap)
{
    for (int i = 0; i < b->n; i++) {
        const br_exec_queue_t *q = &b->queues[i];
        const br_work_t *w = queue_head(q);
        const br_conn_t *c = NULL;
        if (q->ec != ec || w == NULL) {
            continue;
        }
        if (w->kind == BR_WORK_RECV) {
            c = w->conn;
        } else if (w->kind == BR_WORK_SCHED && q->wait_peer >= 0 && q->wait_what != NULL &&
                   strcmp(q->wait_what, "data from") == 0) {
            c = br_exec_chan_recv(ec, w->ch, q->wait_peer);
        }
        if (c != NULL && c->net != NULL &&
            atomic_load_explicit(&c->net->failed, memory_order_acquire) != ncclSuccess &&
            recv_starved(c) && !symptom_wait(ec)) {
            describe_wait(q, what, cap);
            br_exec_fail(ec, ncclRemoteError, "rank %d (host %s): %s; while in %s", ec->rank,
                         br_host_name(), c->net->why, what);
            return 1;
        }
    }
    return 0;
}

/* Only a peer that a blocked operation waits for matters: a rank that finished its work
 * and left is no error. Ranks blocked further away learn through abort notices. Returns 1
 * when a peer of this host that we wait for is dead (the communicator failed). */
static int check_dead_peer(br_exec_batch_t *b, br_exec_comm_t *ec, char *what, size_t cap)
{
    const br_transport_comm_t *tc = ec->tc;
    for (int i = 0; i < b->n; i++) {
        const br_exec_queue_t *q = &b->queues[i];
        int p = q->wait_peer;
        if (q->ec != ec || queue_head(q) == NULL || p < 0 || p >= ec->nranks || p == ec->rank) {
            continue;
        }
        const br_peer_info_t *pi = &tc->peers[p];
        if (!br_peer_sees_pid(pi, &tc->peers[ec->rank]) ||
            pi->pid_hash == tc->peers[ec->rank].pid_hash) {
            continue;
        }
        /* Over the network, what a peer sent before exiting may still be on its way up
         * through the plugin: keep progressing a little before calling it lost. */
        if (br_exec_pid_is_dead(pi->pid) &&
            !(br_transport_select(tc, p) == BR_TRANSPORT_NET && symptom_wait(ec))) {
            describe_wait(q, what, cap);
            br_exec_fail(ec, ncclRemoteError,
                         "rank %d (pid %d on host %s) died while rank %d was in %s", p, pi->pid,
                         pi->host, ec->rank, what);
            return 1;
        }
    }
    return 0;
}

/* After this long blocked in a call, a rank tells the peers it waits for which call it is
 * in (br_transport_ask): a peer blocked in another call of that number finds out. */
#define ASK_AFTER_NS (1000ull * 1000000ull)

/* Send the wants of the call the queues wait in, once per call: to each distinct peer a
 * queue of that call waits for. */
static void post_asks(br_exec_batch_t *b, br_exec_comm_t *ec, uint64_t blocked_ns)
{
    br_slot_desc_t call = {0, 0, 0, 0, 0};
    uint64_t told[4] = {0, 0, 0, 0}; /* peers told (the first 256; a later one may be told
                                      * twice, which only costs a message) */

    if (blocked_ns < ASK_AFTER_NS) {
        return;
    }
    for (int i = 0; i < b->n; i++) {
        const br_exec_queue_t *q = &b->queues[i];
        const br_work_t *w = queue_head(q);
        int p = q->wait_peer;
        if (q->ec != ec || w == NULL || p < 0 || p >= ec->nranks || p == ec->rank) {
            continue;
        }
        br_slot_desc_t c = br_exec_call_desc(&w->op);
        if (c.seq == 0 || c.seq == ec->asked_seq || (call.seq != 0 && c.seq != call.seq)) {
            continue;
        }
        call = c;
        if (p < 256 && (told[p / 64] >> (p % 64) & 1)) {
            continue;
        }
        if (p < 256) {
            told[p / 64] |= 1ull << (p % 64);
        }
        br_transport_ask(ec->tc, BR_TRANSPORT_TAG_P2P, p, &call);
    }
    if (call.seq != 0) {
        ec->asked_seq = call.seq;
    }
}

/* A rank in another call of the same number waits for this one: in p2p connection setup
 * (it published a receive end from this rank, or wants to send here), or blocked in its
 * call (post_asks). The calls differ, and what it waits for will not come. Returns 1 when
 * it failed the communicator. */
static int check_asks(br_exec_batch_t *b, br_exec_comm_t *ec)
{
    enum { MAX_CALLS = 16 }; /* calls looked at per check: a group's first ones */
    br_slot_desc_t mine[MAX_CALLS], theirs;
    uint64_t oldest = UINT64_MAX;
    int n = 0;
    char msg[600];

    if (br_bootstrap_queued(ec->tc->boot) == 0) {
        return 0; /* nobody asked for anything */
    }
    /* The distinct calls at the heads of the queues (the channels of one collective share
     * one), then one pass over the peers' asks. */
    for (int i = 0; i < b->n; i++) {
        const br_work_t *w = queue_head(&b->queues[i]);
        if (b->queues[i].ec != ec || w == NULL) {
            continue;
        }
        br_slot_desc_t c = br_exec_call_desc(&w->op);
        int seen = c.seq == 0;
        for (int k = 0; k < n && !seen; k++) {
            seen = mine[k].seq == c.seq;
        }
        if (!seen && n < MAX_CALLS) {
            mine[n++] = c;
        }
        oldest = c.seq != 0 && c.seq < oldest ? c.seq : oldest;
    }
    if (oldest != UINT64_MAX) {
        br_transport_asks_prune(ec->tc, BR_TRANSPORT_TAG_P2P, oldest); /* calls we are past */
    }
    for (int p = 0; p < ec->nranks && n > 0; p++) {
        for (int k = 0;
             p != ec->rank && br_transport_peer_ask(ec->tc, BR_TRANSPORT_TAG_P2P, p, k, &theirs);
             k++) {
            for (int c = 0; c < n; c++) {
                if (theirs.seq == mine[c].seq && br_exec_call_differs(&mine[c], &theirs)) {
                    br_exec_call_mismatch(msg, sizeof(msg), ec->rank, &mine[c], p,
                                          ec->tc->peers[p].host, &theirs);
                    br_exec_fail(ec, ncclInvalidUsage, "%s", msg);
                    return 1;
                }
            }
        }
    }
    return 0;
}

/* BRAID_TIMEOUT: halfway, tell the peers what we wait in, so that whoever times out can
 * find the rank at the end of the chain of waits; at the timeout, fail naming it. Returns
 * 1 when it failed the communicator. */
static int check_timeout(br_exec_batch_t *b, br_exec_comm_t *ec, uint64_t blocked_ns,
                         const char *what)
{
    int64_t timeout = BR_PARAM_INT(TIMEOUT);
    const br_exec_queue_t *blocked = NULL;
    for (int i = 0; i < b->n && blocked == NULL; i++) {
        if (b->queues[i].ec == ec && queue_head(&b->queues[i]) != NULL) {
            blocked = &b->queues[i];
        }
    }
    if (timeout <= 0 || blocked == NULL) {
        return 0;
    }
    uint64_t key = wait_key(queue_head(blocked));
    if (blocked_ns > (uint64_t)timeout * 500000000ull && ec->wait_posted != key) {
        post_wait(b, ec, key, what);
    }
    if (blocked_ns > (uint64_t)timeout * 1000000000ull) {
        char chain[900];
        explain_chain(ec, blocked, chain, sizeof(chain));
        br_exec_fail(
            ec, ncclTimeout, "rank %d (host %s): no progress for %lld s (BRAID_TIMEOUT) in %s%s%s",
            ec->rank, br_host_name(), (long long)timeout, what, chain,
            chain[0] != '\0' ? "" : ": is that rank stuck, or did the ranks make different calls?");
        return 1;
    }
    return 0;
}

int br_exec_health_check(br_exec_batch_t *b, br_exec_comm_t *ec, uint64_t blocked_ns)
{
    br_transport_comm_t *tc = ec->tc;
    char msg[1024], what[300];
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
    post_asks(b, ec, blocked_ns);
    if (check_asks(b, ec) || check_net_closed(b, ec, what, sizeof(what))) {
        return 1;
    }
    if (tc->proxy != NULL && br_proxy_error(tc->proxy, msg, sizeof(msg)) != ncclSuccess &&
        !symptom_wait(ec)) {
        br_exec_fail(ec, ncclRemoteError, "rank %d (host %s): %s; while in %s", ec->rank,
                     br_host_name(), msg, what);
        return 1;
    }
    if (check_dead_peer(b, ec, what, sizeof(what))) {
        return 1;
    }
    return check_timeout(b, ec, blocked_ns, what);
}

void br_exec_watchdog_warn(br_exec_batch_t *b, uint64_t blocked_ns)
{
    char what[300];
    for (int i = 0; i < b->n; i++) {
        if (queue_head(&b->queues[i]) != NULL) {
            describe_wait(&b->queues[i], what, sizeof(what));
            if (br_log_enabled(NCCL_LOG_WARN, NCCL_COLL)) {
                BR_WARN(NCCL_COLL, "rank %d: no progress for %llu s: %s", b->queues[i].ec->rank,
                        (unsigned long long)(blocked_ns / 1000000000ull), what);
            } else {
                /* A hang explains itself even with NCCL_DEBUG unset: one line, no more
                 * often than BRAID_WAIT_WARN. */
                fprintf(stderr, "braid: rank %d (host %s): no progress for %llu s in %s "
                        "(BRAID_WAIT_WARN)\n", b->queues[i].ec->rank, br_host_name(),
                        (unsigned long long)(blocked_ns / 1000000000ull), what);
            }
        }
    }
}

