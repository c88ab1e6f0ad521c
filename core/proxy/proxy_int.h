/* SPDX-License-Identifier: Apache-2.0 */
/*
 * proxy internals shared by proxy.c (the progress loop, the thread, profiler events,
 * close) and proxy_link.c (what the two ends of a connection tell each other: the
 * receiver's acknowledgements and the failover that replaces a failed connection).
 */
#ifndef BR_PROXY_INT_H_
#define BR_PROXY_INT_H_

#include <pthread.h>
#include <stdatomic.h>

#include "proxy.h"

/* A link message waiting for the proxy (the bootstrap thread queues, progress takes). */
typedef struct br_link_mail br_link_mail_t;

struct br_proxy {
    br_net_t *net;
    br_bootstrap_t *boot;
    int rank;
    uint64_t comm_hash;
    int traffic_class;
    int net_required;
    br_net_regs_t *regs; /* registered buffers (br_proxy_config_t), or NULL */
    int failover;        /* BRAID_FAILOVER at creation: times a connection may fail over */
    br_net_t *fallback;  /* Braid's socket plugin once a failover opened it (under lock) */
    int nfailover;       /* connections being replaced now (under lock) */
    int acks_due;        /* a receive connection has an acknowledgement to send when idle */
    unsigned idle_streak; /* progress calls in a row that moved nothing */
    pthread_t thread;
    pthread_mutex_t lock;      /* guards the connection list and its progress */
    pthread_mutex_t wake_lock; /* guards active/stop with `wake` */
    pthread_cond_t wake;
    int active;
    int stop;
    br_net_conn_t *conns;
    _Atomic int error;   /* ncclResult_t of the first failure */
    br_profiler_t *prof; /* ProxyStep events, or NULL */
    void *park_ev;       /* ProxyCtrl Sleep while executors are active (under wake_lock) */
    char error_msg[512];
    /* Link messages from the bootstrap thread, oldest first. */
    pthread_mutex_t mail_lock;
    br_link_mail_t *mail_head, *mail_tail;
    _Atomic int mail_n;
};

/* States of br_net_conn_t.fo_state. */
enum {
    BR_FO_NONE = 0,     /* running */
    BR_FO_WAIT_OFFER,   /* send side: the old connection is closed; the receiver was asked
                         * for a replacement */
    BR_FO_CONNECTING,   /* send side: connecting to the replacement the receiver offered */
    BR_FO_ACCEPTING,    /* receive side: offered a replacement, waiting for the sender */
    BR_FO_DEAD          /* given up: the error is set */
};

/* A send connection failed for good: record the error every later call reports. */
void br_proxy_fail_send(br_proxy_t *proxy, br_net_conn_t *nc, ncclResult_t res, const char *what);
/* A receive connection failed for good: the executor reports it once it waits on it. */
void br_proxy_fail_recv(br_proxy_t *proxy, br_net_conn_t *nc, ncclResult_t res, const char *what);

/* ---- proxy_link.c ---- */

/* Start receiving link messages (at creation) and stop (at destroy, before freeing). */
void br_proxy_link_start(br_proxy_t *proxy);
void br_proxy_link_stop(br_proxy_t *proxy);

/* A transfer of nc failed (res, what: "send", "receive"): replace the connection if
 * failover allows, else fail it for good. */
void br_proxy_link_failed(br_proxy_t *proxy, br_net_conn_t *nc, ncclResult_t res,
                          const char *what);

/* Handle waiting link messages and move replacements in progress (under lock). Returns
 * the number of state changes. */
int br_proxy_link_progress(br_proxy_t *proxy);

/* Send side: the head to give the executor: completed sends the receiver confirmed, then
 * completed sends in the keep ring. */
static inline uint64_t br_proxy_link_head(br_net_conn_t *nc)
{
    if (!nc->acks) {
        return nc->done;
    }
    uint64_t acked = atomic_load_explicit(&nc->acked, memory_order_acquire);
    uint64_t head = acked < nc->done ? acked : nc->done;
    if (nc->keep == NULL) {
        return head;
    }
    /* Sent steps in the keep ring are free too, up to the first one that is not. */
    head = nc->keep_head > head ? nc->keep_head : head;
    while (head < nc->done && nc->keep_seq[head % BR_NET_KEEP_STEPS] == head + 1) {
        head++;
    }
    nc->keep_head = head;
    return head;
}

/* Is step s of a send connection in its keep ring? */
static inline int br_proxy_kept(const br_net_conn_t *nc, uint64_t s)
{
    return nc->keep != NULL && nc->keep_seq[s % BR_NET_KEEP_STEPS] == s + 1;
}

/* Send side: read the receiver's acknowledgements. `idle` (progress moved nothing: the
 * executor waits anyway) reads once per wait while BR_STEPS / 2 sent steps hold slots
 * unconfirmed (BR_NET_KEEP_STEPS / 2 when all are kept); otherwise only when every slot is
 * taken, or once a millisecond; idle 2 (a user-buffer send waits for its confirmations)
 * at most every 5 us. */
void br_proxy_link_read_acks(br_proxy_t *proxy, br_net_conn_t *nc, int idle);

/* Receive side: confirm what the receiver holds, every BR_STEPS / 2 steps received
 * (BR_NET_KEEP_STEPS / 2 while the sender kept every one since the last confirmation).
 * Only `idle` calls (progress that moved nothing: the executor waits anyway) send it, so
 * the system call stays off the path of the data, unless the sender could run out of
 * slots within two more steps. idle 2: confirm now (the last step of a user-buffer
 * operation, whose sender waits for it before its call returns). */
void br_proxy_link_ack(br_proxy_t *proxy, br_net_conn_t *nc, int idle);

/* Close nc's plugin comm (and registration) now, with whatever is outstanding. */
void br_proxy_comm_close(br_proxy_t *proxy, br_net_conn_t *nc);

/* ---- proxy_userbuf.c (all under lock) ---- */

/* The user-buffer operation that step belongs to, or NULL (a FIFO step). */
br_net_useg_t *br_proxy_useg_of(const br_net_conn_t *nc, uint64_t step);

/* Post step of segment s (isend or irecv, from or into the user's buffer). */
ncclResult_t br_proxy_useg_post(br_proxy_t *proxy, br_net_conn_t *nc, br_net_useg_t *s,
                                uint64_t step, void **req_p);

/* A receive of segment s completed with size bytes: check it and give the executor its
 * descriptor. Returns -1 when the connection failed. */
int br_proxy_useg_recv_done(br_proxy_t *proxy, br_net_conn_t *nc, br_net_useg_t *s, uint64_t step,
                            int size);

/* Free the segments whose steps are all done (send: confirmed), deregistering them. */
void br_proxy_useg_retire(br_net_conn_t *nc);

/* The plugin comm closes (failover, close): release the registrations made on it. */
void br_proxy_useg_drop_regs(br_net_conn_t *nc);

/* Free every segment (the connection closes). */
void br_proxy_useg_free_all(br_net_conn_t *nc);

#endif /* BR_PROXY_INT_H_ */
