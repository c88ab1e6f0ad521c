/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Joining a communicator and the bootstrap collectives. br_bootstrap_init opens this
 * rank's listener, starts its background thread (bootstrap_p2p.c), checks in with the
 * root (bootstrap_root.c), connects to both ring neighbours the root names, waits for them
 * to connect back, and allgathers every rank's {listen address, host, pid}. That
 * allgather takes log2(n) rounds with the partners the root names (Bruck's algorithm);
 * later ones go through each host's shared memory where hosts hold several ranks
 * (bootstrap_shm.c), else the same way. Collectives
 * are called by one thread per rank; their messages are tagged with a per-bootstrap
 * sequence number.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap_int.h"

static void boot_free(br_bootstrap_t *boot)
{
    br_boot_thread_stop(boot);
    br_boot_hier_free(boot);
    br_socket_close(&boot->listen_fd);
    br_socket_close(&boot->wake_fd[0]);
    br_socket_close(&boot->wake_fd[1]);
    for (int r = 0; r < boot->nranks; r++) {
        br_socket_close(&boot->peers[r].out_fd);
        pthread_mutex_destroy(&boot->peers[r].out_lock);
    }
    br_boot_queues_free(boot);
    free(boot->in);
    free(boot->peers);
    pthread_cond_destroy(&boot->cond);
    pthread_mutex_destroy(&boot->lock);
    pthread_mutex_destroy(&boot->link_lock);
    free(boot);
}

static ncclResult_t boot_alloc(int rank, int nranks, uint64_t secret, br_bootstrap_t **boot_p)
{
    ncclResult_t res = ncclSuccess;
    br_bootstrap_t *boot = NULL;
    br_boot_rank_t *peers = NULL;
    pthread_condattr_t attr;

    BR_CHECK(br_calloc(&peers, (size_t)nranks, "bootstrap peers"));
    BR_CHECK_GOTO(br_calloc(&boot, 1, "bootstrap"), res, err_free_peers);
    boot->peers = peers;
    boot->rank = rank;
    boot->nranks = nranks;
    boot->secret = secret;
    boot->timeout_ns = br_boot_timeout_ns();
    boot->listen_fd = boot->wake_fd[0] = boot->wake_fd[1] = -1;
    for (int r = 0; r < nranks; r++) {
        peers[r].out_fd = -1;
        pthread_mutex_init(&peers[r].out_lock, NULL);
    }
    pthread_mutex_init(&boot->lock, NULL);
    pthread_mutex_init(&boot->link_lock, NULL);
    /* Deadlines come from br_time_ns(), the monotonic clock: make the condvar use it too. */
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&boot->cond, &attr);
    pthread_condattr_destroy(&attr);
    atomic_init(&boot->aborted, 0);
    boot->abort_from = -1;
    BR_SYS_GOTO(pipe2(boot->wake_fd, O_NONBLOCK | O_CLOEXEC), res, err_free_boot);
    *boot_p = boot;
    return ncclSuccess;
err_free_boot:
    boot_free(boot);
    return res;
err_free_peers:
    free(peers);
    return res;
}

void br_bootstrap_test_exit(const br_bootstrap_t *boot, const char *point)
{
    const char *at = BR_PARAM_STR(TEST_EXIT_AT);
    if (at != NULL && strcmp(at, point) == 0) {
        BR_INFO(NCCL_INIT | NCCL_BOOTSTRAP, "bootstrap: rank %d ends at %s (BRAID_TEST_EXIT_AT)",
                boot->rank, point);
        _exit(3);
    }
}

/* A host's leader: read the root's list of its host's ranks that follows the answer. */
static ncclResult_t root_recv_local(br_bootstrap_t *boot, int fd, const br_boot_answer_t *ans,
                                    const char *root, br_boot_local_t **local_p)
{
    br_boot_local_t *local = NULL;
    ncclResult_t res;

    if (!ans->hier || ans->lidx != 0 || ans->nlocal < 2 || ans->nlocal > boot->nranks) {
        return ncclSuccess;
    }
    BR_CHECK(br_calloc(&local, (size_t)ans->nlocal, "bootstrap host ranks"));
    res = br_socket_recv_all(fd, local, (size_t)ans->nlocal * sizeof(*local),
                             br_time_ns() + boot->timeout_ns);
    if (res != ncclSuccess) {
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP,
                "bootstrap: rank %d: the root at %s sent its answer but not this host's %d "
                "ranks: %s",
                boot->rank, root, ans->nlocal, strerror(errno));
        free(local);
        return ncclSystemError;
    }
    *local_p = local;
    return ncclSuccess;
}

/* Check in with the root and read its answer (and, for a host's leader, the host's ranks:
 * *local_p, which the caller frees). */
static ncclResult_t root_exchange(br_bootstrap_t *boot, const br_boot_handle_t *h,
                                  uint64_t deadline, br_boot_answer_t *ans,
                                  br_boot_local_t **local_p)
{
    char root[BR_SOCKET_ADDR_STRLEN];
    br_boot_checkin_t c;
    ncclResult_t res;
    int fd = -1;

    br_socket_addr_str(&h->root, root, sizeof(root));
    memset(&c, 0, sizeof(c));
    c.secret = h->secret;
    c.proto = BR_BOOT_PROTO;
    c.rank = boot->rank;
    c.nranks = boot->nranks;
    c.pid = (int32_t)getpid();
    c.addr = boot->listen_addr;
    snprintf(c.host, sizeof(c.host), "%s", br_host_name());
    c.shm_key = br_shm_key(NULL);
    c.pid_ns = br_pid_ns();
    c.shm = BR_PARAM_INT(BOOTSTRAP_SHM) != 0;
    /* A unique id's root listens from ncclGetUniqueId on, so refusals mean its process is
     * gone: give up after BR_BOOT_REFUSED_NS. NCCL_COMM_ID's rank 0 may simply start late. */
    res = br_socket_connect_up(&h->root, deadline,
                               (h->flags & BR_BOOT_FLAG_COMM_ID) ? 0 : BR_BOOT_REFUSED_NS, &fd);
    if (res == ncclSuccess) {
        res = br_socket_send_all(fd, &c, sizeof(c), deadline);
    }
    /* With certificates, TLS 1.3 lets the client finish its handshake before the server
     * checks the client's certificate: a refusal comes as a reset on the first bytes. */
    int tls_reset = br_socket_tls() != NULL && (errno == ECONNRESET || errno == EPIPE);
    if (res != ncclSuccess && (errno == EPROTO || tls_reset)) {
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP,
                "bootstrap: rank %d (host %s): the root at %s refused this rank's TLS: TLS is on "
                "here and off there, or the key or certificate authority differs "
                "(ncclSetEncryption or BRAID_TLS_* alike in every process of the job)",
                boot->rank, br_host_name(), root);
        res = ncclSystemError;
        goto out;
    }
    if (res != ncclSuccess && errno == ECONNREFUSED && !(h->flags & BR_BOOT_FLAG_COMM_ID)) {
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP,
                "bootstrap: rank %d: the root at %s refused every connection for %d s: the "
                "process that called ncclGetUniqueId for this id is gone (or the id is not "
                "this job's)",
                boot->rank, root, (int)(BR_BOOT_REFUSED_NS / 1000000000ull));
        res = ncclSystemError;
        goto out;
    }
    if (res != ncclSuccess) {
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP,
                "bootstrap: rank %d could not reach the root at %s within %d s: %s (%s)",
                boot->rank, root, br_boot_timeout_s(), strerror(errno),
                (h->flags & BR_BOOT_FLAG_COMM_ID)
                    ? "is rank 0 running with the same NCCL_COMM_ID?"
                    : "is the process that called ncclGetUniqueId still running, "
                      "and its address reachable from here?");
        res = ncclSystemError;
        goto out;
    }
    /* The root answers at the latest a timeout after the first rank arrived, so waiting a
     * timeout (plus delivery slack) from our own arrival always covers it. */
    memset(ans, 0, sizeof(*ans));
    res = br_socket_recv_all(fd, ans, sizeof(*ans),
                             br_time_ns() + boot->timeout_ns + BR_BOOT_ANSWER_GRACE_NS);
    if (res != ncclSuccess) {
        const unsigned char *b = (const unsigned char *)ans;
        if (br_socket_tls() != NULL && errno != ETIMEDOUT) {
            BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP,
                    "bootstrap: rank %d (host %s): the root at %s ended this rank's TLS "
                    "connection without answering: TLS is on here; the root may have it off, "
                    "or another key or certificate authority (ncclSetEncryption or BRAID_TLS_* "
                    "alike in every process of the job)",
                    boot->rank, br_host_name(), root);
        } else if (b[0] == 0x15 && b[1] == 0x03) { /* a TLS alert record, in clear */
            BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP,
                    "bootstrap: rank %d (host %s): the root at %s refused this rank with a TLS "
                    "alert: TLS is on there and off here (ncclSetEncryption or BRAID_TLS_* "
                    "alike in every process of the job)",
                    boot->rank, br_host_name(), root);
        } else if (errno == ETIMEDOUT) {
            BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP,
                    "bootstrap: rank %d: the root at %s did not answer within %d s", boot->rank,
                    root, br_boot_timeout_s() + (int)(BR_BOOT_ANSWER_GRACE_NS / 1000000000ull));
        } else {
            BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP,
                    "bootstrap: rank %d: the root at %s closed the connection without answering "
                    "(did its process exit?)",
                    boot->rank, root);
        }
        res = ncclSystemError;
        goto out;
    }
    if (ans->secret != h->secret) {
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP,
                "bootstrap: rank %d: the root at %s answered without the communicator's secret",
                boot->rank, root);
        res = ncclSystemError;
        goto out;
    }
    ans->msg[sizeof(ans->msg) - 1] = '\0';
    if (ans->res != ncclSuccess) {
        /* The root's text names the culprits; every arrived rank reports the same. */
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "%s", ans->msg);
        res = (ans->res > ncclSuccess && ans->res < ncclNumResults) ? (ncclResult_t)ans->res
                                                                    : ncclSystemError;
        goto out;
    }
    res = root_recv_local(boot, fd, ans, root, local_p);
out:
    br_socket_close(&fd);
    return res;
}

/* Open this rank's listener; with NCCL_COMM_ID, rank 0 also starts the root. */
static ncclResult_t open_listeners(br_bootstrap_t *boot, const br_boot_handle_t *h)
{
    int comm_id = (h->flags & BR_BOOT_FLAG_COMM_ID) != 0;
    br_socket_addr_t local, bound;
    char text[BR_SOCKET_ADDR_STRLEN];
    int fd = -1;

    /* With NCCL_COMM_ID, prefer the interface on the root's subnet. */
    BR_CHECK(br_socket_iface_pick(comm_id ? &h->root : NULL, NULL, 0, &local));
    BR_CHECK(br_socket_listen(&local, &boot->listen_fd, &boot->listen_addr));
    if (!comm_id || boot->rank != 0) {
        return ncclSuccess;
    }
    if (br_socket_listen(&h->root, &fd, &bound) != ncclSuccess) {
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP,
                "bootstrap: rank 0 cannot start the root on "
                "NCCL_COMM_ID %s (port in use, or not an address of this host?)",
                br_socket_addr_str(&h->root, text, sizeof(text)));
        return ncclSystemError;
    }
    return br_boot_root_start(fd, &bound, h->secret, boot->timeout_ns);
}

/* Both ring neighbours: connect to each, and wait until each has connected to us. */
static ncclResult_t ring_connect(br_bootstrap_t *boot, uint64_t deadline)
{
    int n = boot->nranks;
    int next = (boot->rank + 1) % n, prev = (boot->rank + n - 1) % n;

    if (n == 1) {
        return ncclSuccess;
    }
    BR_CHECK(br_boot_connect_peer(boot, next, deadline));
    if (prev != next) {
        BR_CHECK(br_boot_connect_peer(boot, prev, deadline));
        BR_CHECK(br_boot_wait_hello(boot, next, deadline));
    }
    return br_boot_wait_hello(boot, prev, deadline);
}

/* Allgather in ceil(log2(n)) rounds (Bruck et al.): in round k, with d = 2^k, a rank
 * sends the min(d, n - d) slots it holds, starting with its own, to rank - d and receives
 * as many from rank + d, so after the last round it holds all n, rotated by its rank. A
 * ring takes n/2 steps in which every rank must run: with 256 ranks on 2 cores those
 * steps cost 0.8 s of context switches per allgather, the log2(n) rounds here 8. Sends
 * never wait for the matching recv (the peer's thread queues them), so every rank sends
 * first. Each rank connects to at most log2(n) partners (the root named them). */
static ncclResult_t log_allgather(br_bootstrap_t *boot, void *data, size_t size)
{
    int n = boot->nranks, r = boot->rank;
    int tag = boot->coll_seq++;
    uint64_t deadline = br_time_ns() + boot->timeout_ns;
    char *slots = data, *held = NULL;
    ncclResult_t res = ncclSuccess;

    if (n == 1 || size == 0) {
        return ncclSuccess;
    }
    BR_CHECK(br_calloc(&held, (size_t)n * size, "bootstrap allgather"));
    memcpy(held, slots + (size_t)r * size, size);
    for (int d = 1; d < n; d <<= 1) {
        size_t bytes = (size_t)(d < n - d ? d : n - d) * size;
        BR_CHECK_GOTO(br_boot_send_msg(boot, (r + n - d) % n, BR_BOOT_MSG_RING, tag, held, bytes),
                      res, out);
        BR_CHECK_GOTO(br_boot_recv_msg(boot, (r + d) % n, BR_BOOT_MSG_RING, tag,
                                       held + (size_t)d * size, bytes, deadline),
                      res, out);
    }
    /* held[i] is rank (r + i)'s slot. */
    for (int i = 1; i < n; i++) {
        memcpy(slots + (size_t)((r + i) % n) * size, held + (size_t)i * size, size);
    }
out:
    free(held);
    return res;
}

/* Everyone's listener, host and pid, in log2(n) rounds over the sockets: the hosts, and
 * so what shares memory, are known only after this one. */
static ncclResult_t exchange_peers(br_bootstrap_t *boot)
{
    ncclResult_t res = ncclSuccess;
    br_boot_peer_t *all = NULL, *me;

    BR_CHECK(br_calloc(&all, (size_t)boot->nranks, "bootstrap peer table"));
    me = &all[boot->rank];
    br_boot_peer_fill(boot, me);
    if (boot->hier != NULL) {
        br_bootstrap_test_exit(boot, "boot-shm-gather");
        BR_CHECK_GOTO(br_boot_hier_first(boot, all, sizeof(*all), boot->coll_seq++), res, out);
    } else {
        BR_CHECK_GOTO(log_allgather(boot, all, sizeof(*all)), res, out);
    }
    for (int r = 0; r < boot->nranks; r++) {
        all[r].host[sizeof(all[r].host) - 1] = '\0';
        boot->peers[r].info = all[r];
    }
out:
    free(all);
    return res;
}

ncclResult_t br_bootstrap_init(const ncclUniqueId *id, int rank, int nranks,
                               br_bootstrap_t **boot_p)
{
    ncclResult_t res = ncclSuccess;
    br_bootstrap_t *boot = NULL;
    br_boot_handle_t h;
    br_boot_answer_t ans;
    br_boot_local_t *local = NULL;
    uint64_t t0 = br_time_ns(), t_root, t_ring, t_peers, deadline;
    int n = nranks;
    char why[256], text[BR_SOCKET_ADDR_STRLEN];

    if (br_boot_handle_decode(id, &h, why, sizeof(why)) != 0) {
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "bootstrap: rank %d: %s", rank, why);
        return ncclInvalidArgument;
    }
    if (nranks < 1 || rank < 0 || rank >= nranks) {
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "bootstrap: invalid rank %d of %d", rank, nranks);
        return ncclInvalidArgument;
    }
    BR_CHECK(boot_alloc(rank, nranks, h.secret, &boot));
    deadline = t0 + boot->timeout_ns;
    BR_CHECK_GOTO(open_listeners(boot, &h), res, err_free_boot);
    BR_CHECK_GOTO(br_boot_thread_start(boot), res, err_free_boot);
    BR_CHECK_GOTO(root_exchange(boot, &h, deadline, &ans, &local), res, err_free_boot);
    t_root = br_time_ns();
    /* Only the neighbours' addresses are known until the allgather below. */
    boot->peers[(rank + 1) % n].info.addr = ans.next;
    boot->peers[(rank + n - 1) % n].info.addr = ans.prev;
    boot->peers[rank].info.addr = boot->listen_addr;
    /* Whom the first allgather sends to: over sockets, ranks 2^k back; through host
     * memory, for a host's leader, the leaders 2^k hosts back. */
    for (int k = 0; k < BR_BOOT_HOPS && (1 << k) < (ans.hier ? ans.nnodes : n); k++) {
        if (ans.hop_rank[k] >= 0 && ans.hop_rank[k] < n && br_socket_addr_is_valid(&ans.hop[k])) {
            boot->peers[ans.hop_rank[k]].info.addr = ans.hop[k];
        }
    }
    BR_CHECK_GOTO(ring_connect(boot, t_root + boot->timeout_ns), res, err_free_boot);
    if (ans.hier) {
        br_bootstrap_test_exit(boot, "boot-shm-map");
        BR_CHECK_GOTO(br_boot_hier_open(boot, &ans, local), res, err_free_boot);
    }
    free(local);
    local = NULL;
    t_ring = br_time_ns();
    BR_CHECK_GOTO(exchange_peers(boot), res, err_free_boot);
    if (boot->hier != NULL) {
        BR_CHECK_GOTO(br_boot_hier_group(boot), res, err_free_boot);
    }
    t_peers = br_time_ns();
    BR_INFO(NCCL_INIT | NCCL_BOOTSTRAP,
            "bootstrap: rank %d of %d joined in %.1f ms (root %.1f, "
            "ring and host memory %.1f, allgather %.1f), listening on %s",
            rank, nranks, (double)(br_time_ns() - t0) * 1e-6, (double)(t_root - t0) * 1e-6,
            (double)(t_ring - t_root) * 1e-6, (double)(t_peers - t_ring) * 1e-6,
            br_socket_addr_str(&boot->listen_addr, text, sizeof(text)));
    *boot_p = boot;
    return ncclSuccess;
err_free_boot:
    free(local);
    boot_free(boot);
    return res;
}

ncclResult_t br_bootstrap_allgather(br_bootstrap_t *boot, void *data, size_t size)
{
    if (boot->hier != NULL && boot->nranks > 1 && size > 0) {
        return br_boot_hier_allgather(boot, data, size, boot->coll_seq++);
    }
    return log_allgather(boot, data, size);
}

ncclResult_t br_bootstrap_barrier(br_bootstrap_t *boot)
{
    ncclResult_t res;
    char *flags = NULL;

    /* Every slot arriving means every rank has entered: an allgather of one byte. */
    BR_CHECK(br_calloc(&flags, (size_t)boot->nranks, "barrier"));
    flags[boot->rank] = 1;
    res = br_bootstrap_allgather(boot, flags, 1);
    free(flags);
    return res;
}

const char *br_bootstrap_peer_host(br_bootstrap_t *boot, int rank)
{
    if (boot == NULL || rank < 0 || rank >= boot->nranks || boot->peers[rank].info.host[0] == 0) {
        return "unknown";
    }
    return boot->peers[rank].info.host;
}

int br_bootstrap_peer_pid(br_bootstrap_t *boot, int rank)
{
    if (boot == NULL || rank < 0 || rank >= boot->nranks) {
        return -1;
    }
    return boot->peers[rank].info.pid;
}

void br_bootstrap_close(br_bootstrap_t *boot)
{
    if (boot != NULL) {
        boot_free(boot);
    }
}
