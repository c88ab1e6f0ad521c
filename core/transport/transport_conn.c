/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Connection setup and teardown, the same for every kind of transport: choose the kind
 * per peer, then for a batch of connections (1) every receiver prepares its end and sends
 * the blob describing it through the bootstrap, (2) every sender attaches with the blob
 * it gets, (3) whatever is still pending completes (net: the plugin's non-blocking
 * connect/accept), bounded by the bootstrap timeout. Each phase calls the kind's ops
 * table (transport_int.h); the node arena is in transport_arena.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "transport_int.h"
#include "util.h"

static const br_transport_ops_t *const kinds[] = {
    [BR_TRANSPORT_P2P] = &br_transport_p2p,
    [BR_TRANSPORT_SHM] = &br_transport_shm,
    [BR_TRANSPORT_NET] = &br_transport_net,
};

const char *br_transport_name(br_transport_t kind)
{
    return (unsigned)kind <= BR_TRANSPORT_NET ? kinds[kind]->name : "unknown";
}

br_transport_t br_transport_select(const br_transport_comm_t *tc, int peer)
{
    return br_transport_select_pair(&tc->peers[tc->rank], &tc->peers[peer]);
}

br_transport_t br_transport_select_pair(const br_peer_info_t *me, const br_peer_info_t *p)
{
    if (me->pid_hash == p->pid_hash && me->host_hash == p->host_hash && !me->p2p_disable &&
        !p->p2p_disable) {
        return BR_TRANSPORT_P2P;
    }
    if (br_peer_shares_shm(me, p) && !me->shm_disable && !p->shm_disable) {
        return BR_TRANSPORT_SHM;
    }
    return BR_TRANSPORT_NET;
}

int br_transport_one_process(const br_transport_comm_t *tc)
{
    const br_peer_info_t *me = &tc->peers[tc->rank];
    for (int r = 0; r < tc->nranks; r++) {
        if (tc->peers[r].pid_hash != me->pid_hash || tc->peers[r].host_hash != me->host_hash) {
            return 0;
        }
    }
    return 1;
}

/* Append " r" to list (up to a few ranks, then "..."), counting every one in *n_p. */
static void split_note(char *list, size_t cap, int r, int *n_p)
{
    size_t len = strlen(list);
    if (*n_p < 8) {
        snprintf(list + len, cap - len, " %d", r);
    } else if (*n_p == 8) {
        snprintf(list + len, cap - len, " ...");
    }
    (*n_p)++;
}

void br_transport_report_split(const br_transport_comm_t *tc)
{
    const br_peer_info_t *me = &tc->peers[tc->rank];
    char no_shm[96] = "", no_pid[96] = "";
    int n_shm = 0, n_pid = 0;
    uint64_t other_dev = 0;

    for (int r = 0; r < tc->nranks; r++) {
        const br_peer_info_t *p = &tc->peers[r];
        if (r == tc->rank || p->host_hash != me->host_hash) {
            continue;
        }
        if (!br_peer_shares_shm(p, me)) {
            other_dev = p->shm_dev;
            split_note(no_shm, sizeof(no_shm), r, &n_shm);
        } else if (!br_peer_sees_pid(p, me)) {
            split_note(no_pid, sizeof(no_pid), r, &n_pid);
        }
    }
    if (n_shm > 0) {
        BR_INFO(NCCL_INIT | NCCL_SHM,
                "rank %d (host %s): %d rank(s) of this host do not share its /dev/shm (device "
                "0x%llx here, e.g. 0x%llx there: separate containers), so no shared memory "
                "with them; they talk over the network:%s",
                tc->rank, me->host, n_shm, (unsigned long long)me->shm_dev,
                (unsigned long long)other_dev, no_shm);
    }
    if (n_pid > 0) {
        BR_INFO(NCCL_INIT | NCCL_SHM,
                "rank %d (host %s): %d rank(s) that share its /dev/shm live in another pid "
                "namespace: shared memory with them, but no single-copy reads or pid "
                "liveness checks:%s",
                tc->rank, me->host, n_pid, no_pid);
    }
}

size_t br_transport_ctrl_bytes(void)
{
    return (sizeof(br_fifo_ctrl_t) + 4095) & ~(size_t)4095;
}

/* Net messages carry their call descriptor after the payload: slots leave room for it.
 * LL lines travel in those slots too, so there is no separate LL region on net links. */
static size_t conn_stride(const br_conn_t *conn)
{
    return conn->kind == BR_TRANSPORT_NET ? conn->step_size + BR_NET_DESC_ROOM : conn->step_size;
}

static size_t conn_ll_region(const br_conn_t *conn)
{
    return conn->kind == BR_TRANSPORT_NET ? 0 : BR_STEPS * conn->ll_bytes;
}

size_t br_transport_keep_bytes(const br_conn_t *conn)
{
    return conn->kind == BR_TRANSPORT_NET && conn->is_send && BR_PARAM_INT(FAILOVER) > 0
               ? (size_t)BR_NET_KEEP_STEPS * BR_NET_KEEP_STRIDE
               : 0;
}

size_t br_transport_mapping_bytes(const br_conn_t *conn)
{
    return br_transport_ctrl_bytes() + BR_STEPS * conn_stride(conn) + conn_ll_region(conn) +
           br_transport_keep_bytes(conn);
}

void br_transport_layout(br_conn_t *conn, void *base)
{
    conn->ctrl = base;
    conn->stride = conn_stride(conn);
    conn->buf = (char *)base + br_transport_ctrl_bytes();
    conn->ll = conn_ll_region(conn) > 0
                   ? (uint64_t *)(void *)(conn->buf + BR_STEPS * conn->stride)
                   : NULL;
}

static ncclResult_t conn_track(br_transport_comm_t *tc, br_conn_t *conn)
{
    if (tc->nconns == tc->conns_cap) {
        int cap = tc->conns_cap ? tc->conns_cap * 2 : 16;
        br_conn_t **c = realloc(tc->conns, (size_t)cap * sizeof(*c));
        if (c == NULL) {
            BR_WARN(NCCL_ALLOC, "out of memory tracking connections");
            return ncclSystemError;
        }
        tc->conns = c;
        tc->conns_cap = cap;
    }
    tc->conns[tc->nconns++] = conn;
    return ncclSuccess;
}

static ncclResult_t conn_new(br_transport_comm_t *tc, int peer, int lane, int p2p, int is_send,
                             size_t step_size, size_t ll_bytes, br_conn_t **conn_p)
{
    br_conn_t *conn = NULL;
    BR_CHECK(br_calloc(&conn, 1, "connection"));
    conn->peer = peer;
    conn->lane = lane;
    conn->p2p = p2p;
    conn->is_send = is_send;
    conn->step_size = step_size;
    conn->ll_bytes = ll_bytes;
    conn->kind = br_transport_select(tc, peer);
    conn->ops = kinds[conn->kind];
    if (conn_track(tc, conn) != ncclSuccess) {
        free(conn);
        return ncclSystemError;
    }
    *conn_p = conn;
    return ncclSuccess;
}

/* What a waiting rank tells and looks at besides its own connections (br_conn_purpose_t).
 * A sender that has waited WANT_AFTER_NS for one peer's receive end sends that peer its
 * "want" (the call it is in, on a tag of its own), once: a setup that goes at its usual
 * pace sends none, and a slow one (a root publishing to a thousand ranks) one per peer
 * waited on, not one per pair. */
typedef struct {
    br_transport_comm_t *tc;
    int tag;
    const br_conn_purpose_t *purpose;
    int waiting;       /* index of the send end waited for (-1: none) */
    int peer;          /* its peer */
    uint64_t since_ns; /* since when */
    int told;          /* the index whose peer got the want (-1: none) */
} conn_watch_t;

#define WANT_TAG(tag) ((tag) | 0x40000000)
#define WANT_AFTER_NS (1000ull * 1000000ull)
/* How often complete_all looks at what peers asked for: from 50 ms, doubling to 1 s. */
#define WATCH_FIRST_NS (50ull * 1000000ull)
#define WATCH_MAX_NS (1000ull * 1000000ull)

int br_transport_peer_ask(br_transport_comm_t *tc, int tag, int peer, int nth,
                          br_slot_desc_t *call)
{
    br_conn_blob_t blob;
    int k = 0;

    /* Receive ends first, then wants; asks without a call (seq 0) are skipped. */
    for (int i = 0; br_bootstrap_peek(tc->boot, peer, tag, i, &blob, sizeof(blob)); i++) {
        if (blob.call.seq != 0 && k++ == nth) {
            *call = blob.call;
            return 1;
        }
    }
    for (int i = 0; br_bootstrap_peek(tc->boot, peer, WANT_TAG(tag), i, call, sizeof(*call)); i++) {
        if (call->seq != 0 && k++ == nth) {
            return 1;
        }
    }
    return 0;
}

/* A want is a hint: it must not hold up a rank that waits, and a peer it cannot reach is
 * found out by the wait itself. */
#define ASK_BUDGET_NS (100ull * 1000000ull)

void br_transport_ask(br_transport_comm_t *tc, int tag, int peer, const br_slot_desc_t *call)
{
    if (br_bootstrap_send_brief(tc->boot, peer, WANT_TAG(tag), call, sizeof(*call),
                                ASK_BUDGET_NS) != ncclSuccess) {
        BR_INFO(NCCL_INIT | NCCL_P2P, "rank %d: could not tell rank %d which call it waits in",
                tc->rank, peer);
    }
}

static int want_below(void *arg, const void *data, size_t size)
{
    br_slot_desc_t call;
    if (size != sizeof(call)) {
        return 0;
    }
    memcpy(&call, data, sizeof(call));
    return call.seq < *(const uint64_t *)arg;
}

void br_transport_asks_prune(br_transport_comm_t *tc, int tag, uint64_t seq)
{
    if (br_bootstrap_queued(tc->boot) == 0) {
        return;
    }
    for (int p = 0; p < tc->nranks; p++) {
        if (p != tc->rank) {
            br_bootstrap_drop_if(tc->boot, p, WANT_TAG(tag), want_below, &seq);
        }
    }
}

/* Give check() every call a peer asked this rank for a connection in. */
static ncclResult_t check_asks(const conn_watch_t *w)
{
    br_slot_desc_t call;

    if (br_bootstrap_queued(w->tc->boot) == 0) {
        return ncclSuccess;
    }
    for (int p = 0; p < w->tc->nranks; p++) {
        for (int k = 0; p != w->tc->rank && br_transport_peer_ask(w->tc, w->tag, p, k, &call);
             k++) {
            BR_CHECK(w->purpose->check(w->purpose->arg, p, &call, 0));
        }
    }
    return ncclSuccess;
}

/* Called while the batch waits: a bootstrap receive's watch, and complete_all's poll. */
static ncclResult_t conn_watch(void *arg)
{
    conn_watch_t *w = arg;

    if (w->purpose == NULL || w->purpose->check == NULL) {
        return ncclSuccess;
    }
    if (w->waiting >= 0 && w->told != w->waiting && w->purpose->send_call != NULL &&
        w->purpose->send_call[w->waiting].seq != 0 &&
        br_time_ns() - w->since_ns >= WANT_AFTER_NS) {
        w->told = w->waiting;
        br_transport_ask(w->tc, w->tag, w->peer, &w->purpose->send_call[w->waiting]);
    }
    return check_asks(w);
}

/* Phase 3: poll every connection that is not complete yet until all are. */
static ncclResult_t complete_all(br_transport_comm_t *tc, br_conn_t **conns, int n,
                                 conn_watch_t *watch)
{
    uint64_t deadline = br_time_ns() + (uint64_t)BR_PARAM_INT(BOOTSTRAP_TIMEOUT) * 1000000000ull;
    uint64_t watch_every = WATCH_FIRST_NS, next_watch = br_time_ns() + watch_every;
    int left = n;
    char *done = NULL;

    BR_CHECK(br_calloc(&done, (size_t)(n > 0 ? n : 1), "connection setup"));
    for (;;) {
        for (int i = 0; i < n; i++) {
            int d = 1;
            if (done[i]) {
                continue;
            }
            if (conns[i]->ops->complete != NULL) {
                ncclResult_t res = conns[i]->ops->complete(tc, conns[i], &d);
                if (res != ncclSuccess) {
                    free(done);
                    return res;
                }
            }
            done[i] = (char)d;
            left -= d;
        }
        if (left == 0) {
            break;
        }
        char why[1024];
        int from = -1;
        if (br_bootstrap_cancelled(tc->boot, why, sizeof(why))) {
            BR_WARN(NCCL_INIT, "rank %d (host %s): connection setup stopped: %s", tc->rank,
                    br_host_name(), why);
            free(done);
            return ncclInvalidUsage;
        }
        /* A peer that failed (and told us) will not complete its end: stop now, naming
         * what it reported, instead of at the deadline blaming the end that waits. */
        if (br_bootstrap_poll_abort(tc->boot, &from, why, sizeof(why))) {
            BR_WARN(NCCL_INIT, "rank %d (host %s): connection setup stopped: rank %d reported a "
                    "failure: %s", tc->rank, br_host_name(), from, why);
            free(done);
            return ncclRemoteError;
        }
        if (br_time_ns() > next_watch) {
            ncclResult_t res = conn_watch(watch);
            if (res != ncclSuccess) {
                free(done);
                return res;
            }
            watch_every = watch_every * 2 < WATCH_MAX_NS ? watch_every * 2 : WATCH_MAX_NS;
            next_watch = br_time_ns() + watch_every;
        }
        if (br_time_ns() > deadline) {
            for (int i = 0; i < n; i++) {
                if (!done[i]) {
                    BR_WARN(NCCL_NET,
                            "rank %d: %s with rank %d (host %s) did not complete within %lld s",
                            tc->rank, conns[i]->is_send ? "connect" : "accept", conns[i]->peer,
                            tc->peers[conns[i]->peer].host,
                            (long long)BR_PARAM_INT(BOOTSTRAP_TIMEOUT));
                    break;
                }
            }
            free(done);
            return ncclRemoteError;
        }
        usleep(100);
    }
    free(done);
    return ncclSuccess;
}

/* Phase 2 for one sender: the receiver's blob must describe the same connection, for the
 * same call. */
static ncclResult_t send_attach(br_transport_comm_t *tc, br_conn_t *conn, conn_watch_t *watch)
{
    br_conn_blob_t blob;
    const br_conn_purpose_t *purpose = watch->purpose;

    BR_CHECK(br_bootstrap_recv_watch(tc->boot, conn->peer, watch->tag, &blob, sizeof(blob),
                                     conn_watch, watch));
    if (purpose != NULL && purpose->check != NULL && blob.call.seq != 0) {
        BR_CHECK(purpose->check(purpose->arg, conn->peer, &blob.call, 1));
    }
    if (blob.kind != (int)conn->kind || blob.step_size != conn->step_size ||
        blob.ll_bytes != conn->ll_bytes) {
        BR_WARN(NCCL_INIT,
                "rank %d and rank %d disagree on their connection (transport %d vs %d, step "
                "%llu vs %zu, LL %llu vs %zu): are they running the same Braid with the same "
                "settings?",
                tc->rank, conn->peer, (int)conn->kind, blob.kind,
                (unsigned long long)blob.step_size, conn->step_size,
                (unsigned long long)blob.ll_bytes, conn->ll_bytes);
        return ncclInvalidUsage;
    }
    return conn->ops->send_attach(tc, conn, &blob);
}

ncclResult_t br_transport_connect(br_transport_comm_t *tc, int n, const int *recv_peers,
                                  const int *send_peers, int per_lane, size_t step_size,
                                  size_t ll_bytes, int tag, const br_conn_purpose_t *purpose,
                                  br_conn_t **recv_p, br_conn_t **send_p)
{
    ncclResult_t res = ncclSuccess;
    br_conn_t **made = NULL;
    int nmade = 0;
    conn_watch_t watch = {tc, tag, purpose, -1, -1, 0, -1};

    BR_CHECK(br_calloc(&made, (size_t)(2 * n + 1), "connection setup"));
    /* Receivers first: prepare and publish every receive end. */
    for (int i = 0; i < n; i++) {
        br_conn_blob_t blob;
        br_conn_t *conn;
        if (recv_peers[i] < 0) {
            continue;
        }
        BR_CHECK_GOTO(
            conn_new(tc, recv_peers[i], i / per_lane, per_lane == 1, 0, step_size, ll_bytes, &conn),
            res, out);
        recv_p[i] = made[nmade++] = conn;
        memset(&blob, 0, sizeof(blob));
        blob.kind = conn->kind;
        blob.step_size = step_size;
        blob.ll_bytes = ll_bytes;
        BR_CHECK_GOTO(conn->ops->recv_setup(tc, conn, &blob), res, out);
        if (purpose != NULL && purpose->recv_call != NULL) {
            blob.call = purpose->recv_call[i];
        }
        BR_CHECK_GOTO(br_bootstrap_send(tc->boot, conn->peer, tag, &blob, sizeof(blob)), res, out);
        if (purpose != NULL) {
            br_bootstrap_drop(tc->boot, conn->peer, WANT_TAG(tag)); /* answered */
        }
    }
    /* Then senders attach to what their receivers published. */
    for (int i = 0; i < n; i++) {
        br_conn_t *conn;
        if (send_peers[i] < 0) {
            continue;
        }
        BR_CHECK_GOTO(
            conn_new(tc, send_peers[i], i / per_lane, per_lane == 1, 1, step_size, ll_bytes, &conn),
            res, out);
        send_p[i] = made[nmade++] = conn;
        watch.waiting = i;
        watch.peer = conn->peer;
        watch.since_ns = br_time_ns();
        BR_CHECK_GOTO(send_attach(tc, conn, &watch), res, out);
    }
    watch.waiting = -1;
    res = complete_all(tc, made, nmade, &watch);
out:
    free(made);
    return res;
}

void br_transport_close_all(br_transport_comm_t *tc, int flush)
{
    /* The proxy goes first: it closes the plugin comms that use the FIFOs. */
    br_proxy_destroy(tc->proxy, flush);
    tc->proxy = NULL;
    for (int i = 0; i < tc->nconns; i++) {
        br_conn_t *conn = tc->conns[i];
        conn->ops->close(tc, conn);
        free(conn);
    }
    free(tc->conns);
    tc->conns = NULL;
    tc->nconns = tc->conns_cap = 0;
    free(tc->net_fid);
    tc->net_fid = NULL;
    if (tc->arena != NULL) {
        if (br_arena_failed(tc->arena, tc->rank) == 0) {
            br_arena_fail(tc->arena, tc->rank, BR_ARENA_LEFT); /* a failed owner stops waiting */
        }
        br_arena_unmap_all(tc->arena);
        munmap(tc->arena->base, tc->arena->size);
        free(tc->arena);
        tc->arena = NULL;
    }
}

uint64_t br_transport_mem_bytes(const br_transport_comm_t *tc)
{
    uint64_t bytes = tc->arena != NULL ? tc->arena->size : 0;
    for (int i = 0; i < tc->nconns; i++) {
        bytes += tc->conns[i]->mapping_size; /* 0 where the end maps nothing of its own */
    }
    return bytes;
}

void br_transport_peer_fate(br_transport_comm_t *tc, int peer, uint64_t wait_ns, char *buf,
                            size_t len)
{
    const br_peer_info_t *pi = &tc->peers[peer];
    int gone = br_peer_sees_pid(pi, &tc->peers[tc->rank]) && br_proc_gone(pi->pid);
    char reason[256];
    int from = -1;
    int told = br_bootstrap_await_abort(tc->boot, wait_ns, &from, reason, sizeof(reason));

    snprintf(buf, len, "%s", gone ? ": its process is gone" : "");
    if (told) {
        size_t n = strlen(buf);
        snprintf(buf + n, len - n, "; rank %d reported: %s", from, reason);
    }
}
