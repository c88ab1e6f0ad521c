/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Notices between the ranks of one bootstrap, beside its messages (bootstrap_p2p.c): an
 * abort, a wait (which peer a rank waits for, for the state dump), and the recovery
 * messages of failover. Each goes on a short-lived connection of its own, within a
 * deadline, so it never waits behind a message connection's traffic and a dead peer
 * costs no more than the deadline; the receiving thread sets what poll_abort and
 * peer_wait read.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap_int.h"

/* abort_notify's total budget, and its budget per peer. */
#define ABORT_TOTAL_NS (1000ull * 1000000ull)
#define ABORT_PEER_NS (250ull * 1000000ull)

/* One notice (an abort, or a wait) on a connection of its own, within deadline_ns: it
 * never waits behind a message connection's traffic, and a dead peer costs no more than
 * the deadline. */
static int notice_one(br_bootstrap_t *boot, int peer, uint32_t kind, const void *data,
                      size_t len, uint64_t deadline_ns)
{
    struct {
        br_boot_hello_t hello;
        br_boot_frame_t frame;
        char body[sizeof(br_boot_wait_t) > sizeof(br_boot_recover_t) ? sizeof(br_boot_wait_t)
                                                                      : sizeof(br_boot_recover_t)];
    } pkt;
    const char *what = kind == BR_BOOT_MSG_ABORT  ? "the failure"
                       : kind == BR_BOOT_MSG_WAIT ? "what it waits for"
                                                  : "the recovery";
    int fd = -1, ok = 1;

    memset(&pkt, 0, sizeof(pkt));
    pkt.hello.secret = boot->secret;
    pkt.hello.proto = BR_BOOT_PROTO;
    pkt.hello.rank = boot->rank;
    pkt.hello.conn = BR_BOOT_CONN_ABORT;
    pkt.frame.kind = kind;
    pkt.frame.size = len;
    memcpy(pkt.body, data, len);
    if (br_socket_connect_once(&boot->peers[peer].info.addr, deadline_ns, &fd) != ncclSuccess) {
        BR_INFO(NCCL_INIT | NCCL_BOOTSTRAP, "bootstrap: could not tell rank %d about %s: %s",
                peer, what, strerror(errno));
        return 0;
    }
    if (br_socket_send_all(fd, &pkt, sizeof(pkt.hello) + sizeof(pkt.frame) + len, deadline_ns) !=
        ncclSuccess) {
        BR_INFO(NCCL_INIT | NCCL_BOOTSTRAP, "bootstrap: could not tell rank %d about %s: %s",
                peer, what, strerror(errno));
        ok = 0;
    }
    br_socket_close(&fd);
    return ok;
}

ncclResult_t br_bootstrap_send_recovery(br_bootstrap_t *boot, int peer, uint32_t seq,
                                        const void *data, size_t size)
{
    br_boot_recover_t m;

    if (size > sizeof(m.data) || seq == 0) {
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "bootstrap: bad recovery message (%zu bytes, #%u)",
                size, seq);
        return ncclInternalError;
    }
    memset(&m, 0, sizeof(m));
    m.seq = seq;
    m.size = (uint32_t)size;
    memcpy(m.data, data, size);
    if (!notice_one(boot, peer, BR_BOOT_MSG_RECOVER, &m, sizeof(m),
                    br_time_ns() + boot->timeout_ns)) {
        char who[160];
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "bootstrap: rank %d could not reach %s to recover: %s",
                boot->rank, br_boot_rank_str(boot, peer, who, sizeof(who)), strerror(errno));
        return ncclRemoteError;
    }
    return ncclSuccess;
}

ncclResult_t br_bootstrap_recv_recovery(br_bootstrap_t *boot, int peer, uint32_t seq, void *data,
                                        size_t size)
{
    uint64_t deadline = br_time_ns() + boot->timeout_ns;
    br_boot_rank_t *p = &boot->peers[peer];
    ncclResult_t res = ncclSuccess;
    struct timespec ts;
    char who[160];
    const char *why = NULL;

    br_boot_deadline_to_ts(deadline, &ts);
    pthread_mutex_lock(&boot->lock);
    while (p->recover == NULL || p->recover->seq != seq) {
        if (p->recover != NULL && p->recover->seq > seq) {
            why = "it sent a later recovery than this rank expects (do the ranks shrink the same "
                  "communicator in the same order?)";
            res = ncclInvalidUsage;
            break;
        }
        if (boot->stop || boot->thread_failed) {
            why = "the bootstrap's receive thread stopped";
            res = ncclInternalError;
            break;
        }
        /* A peer whose process is gone closed its message connection: only a rank that
         * exited can be waited for no longer (its communicator may have failed too). */
        if (p->in_closed) {
            why = "it closed its connection (its process exited or it destroyed the communicator)";
            res = ncclRemoteError;
            break;
        }
        if (pthread_cond_timedwait(&boot->cond, &boot->lock, &ts) == ETIMEDOUT &&
            br_time_ns() >= deadline) {
            why = "nothing came within BRAID_BOOTSTRAP_TIMEOUT";
            res = ncclRemoteError;
            break;
        }
    }
    if (res == ncclSuccess) {
        if (p->recover->size != size) {
            why = "its message has another size (do the ranks run the same code?)";
            res = ncclInternalError;
        } else {
            memcpy(data, p->recover->data, size);
        }
    }
    pthread_mutex_unlock(&boot->lock);
    if (res != ncclSuccess) {
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "bootstrap: rank %d waited for recovery #%u from %s: %s",
                boot->rank, seq, br_boot_rank_str(boot, peer, who, sizeof(who)), why);
    }
    return res;
}

/* The same notice to every other rank, within about a second in all. */
static void notice_all(br_bootstrap_t *boot, uint32_t kind, const void *data, size_t len)
{
    uint64_t end = br_time_ns() + ABORT_TOTAL_NS;

    /* Peer addresses are written during init only, so they are read here without a lock. */
    for (int i = 1; i < boot->nranks; i++) {
        int peer = (boot->rank + i) % boot->nranks;
        uint64_t now = br_time_ns();
        if (now >= end) {
            BR_INFO(NCCL_INIT | NCCL_BOOTSTRAP,
                    "bootstrap: out of time sending notices; %d rank(s) not told",
                    boot->nranks - i);
            break;
        }
        if (br_socket_addr_is_valid(&boot->peers[peer].info.addr)) {
            notice_one(boot, peer, kind, data, len,
                       now + ABORT_PEER_NS < end ? now + ABORT_PEER_NS : end);
        }
    }
}

void br_bootstrap_post_wait(br_bootstrap_t *boot, uint64_t key, const int *wait_peer,
                            const char *what)
{
    br_boot_wait_t w;

    if (boot == NULL) {
        return;
    }
    memset(&w, 0, sizeof(w));
    w.key = key;
    for (int i = 0; i < BR_BOOT_WAIT_SLOTS; i++) {
        w.wait_peer[i] = wait_peer[i];
    }
    snprintf(w.what, sizeof(w.what), "%s", what != NULL ? what : "");
    notice_all(boot, BR_BOOT_MSG_WAIT, &w, sizeof(w));
}

int br_bootstrap_peer_wait(br_bootstrap_t *boot, int rank, uint64_t *key_p, int *wait_peer,
                           char *what, size_t len)
{
    int known;

    if (boot == NULL || rank < 0 || rank >= boot->nranks) {
        return 0;
    }
    pthread_mutex_lock(&boot->lock);
    const br_boot_wait_t *w = boot->peers[rank].wait;
    known = w != NULL && w->key != 0;
    if (known) {
        *key_p = w->key;
        for (int i = 0; i < BR_BOOT_WAIT_SLOTS; i++) {
            wait_peer[i] = w->wait_peer[i];
        }
        if (what != NULL && len > 0) {
            snprintf(what, len, "%s", w->what);
        }
    }
    pthread_mutex_unlock(&boot->lock);
    return known;
}

void br_bootstrap_abort_notify(br_bootstrap_t *boot, const char *reason)
{
    char text[BR_BOOT_REASON_LEN];

    if (boot == NULL) {
        return;
    }
    /* A rank that fails after another rank told it of a failure passes that report on as
     * it came, instead of its own message (which quotes the report): each rank that takes
     * it on would otherwise wrap it once more ("rank 3 reported a failure: rank 3: ... rank
     * 1 reported a failure: ..."), until the first cause, the rank named at the end, is
     * cut off. Its own message still goes to its caller. */
    if (br_bootstrap_poll_abort(boot, NULL, text, sizeof(text))) {
        notice_all(boot, BR_BOOT_MSG_ABORT, text, strlen(text) + 1);
        return;
    }
    snprintf(text, sizeof(text), "%s", reason != NULL && reason[0] != '\0' ? reason : "unknown");
    notice_all(boot, BR_BOOT_MSG_ABORT, text, strlen(text) + 1);
}

int br_bootstrap_poll_abort(br_bootstrap_t *boot, int *from_rank_p, char *reason, size_t len)
{
    /* Acquire pairs with the release in msg_done: abort_from and abort_reason are written
     * once, before the flag, and never again, so no lock is needed to read them. */
    if (boot == NULL || !atomic_load_explicit(&boot->aborted, memory_order_acquire)) {
        return 0;
    }
    if (from_rank_p != NULL) {
        *from_rank_p = boot->abort_from;
    }
    if (reason != NULL && len > 0) {
        snprintf(reason, len, "%s", boot->abort_reason);
    }
    return 1;
}

int br_bootstrap_await_abort(br_bootstrap_t *boot, uint64_t wait_ns, int *from_rank_p,
                             char *reason, size_t len)
{
    uint64_t until = br_time_ns() + wait_ns;

    while (!br_bootstrap_poll_abort(boot, from_rank_p, reason, len)) {
        if (br_time_ns() >= until) {
            return 0;
        }
        usleep(1000);
    }
    return 1;
}
