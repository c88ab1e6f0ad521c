/* SPDX-License-Identifier: Apache-2.0 */
/*
 * proxy: drives the network side of net connections. For a send connection it ships
 * each slot the executor filled (isend, test) and returns the credit (head); for a
 * receive connection it keeps irecvs posted into free slots and publishes each completed
 * one (tail). One proxy per communicator: br_proxy_progress(), which the executor calls
 * while it waits, so a rank whose thread would be waiting anyway moves its own network
 * data without a context switch, plus a thread that is parked while an executor is
 * active and finishes the sends an executor leaves behind. Both paths share one lock (the executor
 * only try-locks).
 */
#ifndef BR_PROXY_H_
#define BR_PROXY_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "bootstrap.h"
#include "fifo.h"
#include "plugin.h"

typedef struct br_proxy br_proxy_t;

/* ProxyOp events open at once on one connection: a receive's end once the executor
 * consumed it, a send's until its last step left, and sends have BR_STEPS in flight. */
#define BR_PROXY_OPS (BR_STEPS + 2)

/* One operation's steps [first, end) that move between the user's buffer and the
 * plugin, without the FIFO (user-buffer path): step k moves bytes
 * [(k - first) * step_size, ...) of ptr. The registration mh is made on first use with
 * the connection's current plugin comm and released when the steps are done (a failover
 * drops it with the old comm; the replacement registers again). */
/* Host buffers the application registered with ncclCommRegister: the proxy registers
 * each with the net plugin once per connection that moves bytes in it, and keeps that
 * registration until ncclCommDeregister (or the connection's comm goes), so repeated
 * calls on those buffers pay no regMr. One per communicator (its transport state). */
typedef struct br_net_reg_range {
    uint64_t id;
    char *base;
    size_t len;
    struct br_net_reg_range *next;
} br_net_reg_range_t;

typedef struct {
    pthread_mutex_t lock; /* inside the proxy lock where both are taken */
    br_net_reg_range_t *list;
    uint64_t next_id;
} br_net_regs_t;

/* A connection's registration of one registered buffer. */
typedef struct br_net_rcache {
    uint64_t id;
    void *mh;
    struct br_net_rcache *next;
} br_net_rcache_t;

void br_net_regs_init(br_net_regs_t *regs);
void br_net_regs_fini(br_net_regs_t *regs);
/* Record [base, base + len); *id_p names it for br_net_regs_remove. */
ncclResult_t br_net_regs_add(br_net_regs_t *regs, void *base, size_t len, uint64_t *id_p);
/* Forget it, and drop every connection's registration of it (proxy may be NULL). The
 * application must not have calls in flight on the buffer, as NCCL requires. */
void br_net_regs_remove(br_net_regs_t *regs, struct br_proxy *proxy, uint64_t id);

/* A user buffer one operation's segments share a registration of (ring collectives:
 * its input or its output), so a plugin that pins pages does so once per call. */
typedef struct br_net_ureg {
    uint64_t key;
    char *base;
    size_t len;
    void *mh;   /* regMr on the connection's current comm, or NULL */
    int refused;
    int cached; /* mh is a registered buffer's (br_net_rcache_t): not ours to deregister */
    int refs;   /* segments using it */
    int held;   /* send side: the executor still adds steps (br_proxy_userbuf_release) */
    struct br_net_ureg *next;
} br_net_ureg_t;

typedef struct br_net_useg {
    uint64_t first, end;
    char *ptr;
    size_t bytes;
    size_t unit;         /* bytes of each step but the last */
    uint64_t key;        /* the operation's (seq + 1; 0 for Send/Recv): steps of one
                          * operation that are contiguous in memory share a segment */
    int ack_end;         /* receive side: the operation's last user-buffer step, which the
                          * receiver confirms at once (its sender waits for that) */
    void *mh;            /* regMr of [ptr, ptr + bytes) (or of reg), or NULL */
    br_net_ureg_t *reg;  /* the registration it borrows, or NULL: its own */
    int cached;          /* mh is a registered buffer's (br_net_rcache_t) */
    int staged;          /* regMr failed: this operation moves through the FIFO slots */
    br_slot_desc_t desc; /* receive side: the descriptor the executor checks (bytes per step) */
    struct br_net_useg *next;
} br_net_useg_t;

/* The proxy's half of one net connection. */
typedef struct br_net_conn {
    br_fifo_ctrl_t *ctrl;
    char *buf;
    size_t step_size;
    size_t stride; /* slot stride: step_size + BR_NET_DESC_ROOM */
    int is_send;
    int peer;      /* rank at the other end, for messages */
    void *comm;    /* the plugin's send or recv comm */
    void *mhandle; /* registration of buf (and of the keep ring after it) */
    size_t reg_bytes; /* bytes it covers */
    void *req[BR_STEPS];
    void *ev[BR_STEPS]; /* ProxyStep profiler handles */
    br_net_phandle_t ph[BR_STEPS]; /* the phandle each transfer hands the plugin (NetPlugin
                                    * events' parent: its ProxyStep) */
    uint64_t posted, done;
    /* ProxyOp profiler events of the operations using this connection, each covering
     * the steps [first, end) (br_proxy_op_begin); ev NULL: a free entry. */
    struct {
        void *ev;
        uint64_t first, end;
    } ops[BR_PROXY_OPS];
    /* Receive side: how many receives the executor will consume in all (it adds each
     * operation's count when it queues the operation). The proxy posts no receive beyond
     * it, so none is left posted when the connection closes, as in NCCL. */
    _Atomic uint64_t want;
    int dev; /* the net device the connection runs on */
    br_net_t *net; /* the plugin it runs on: the communicator's, or after a failover the
                    * socket plugin (net_hand_over sets it; the proxy owns it then) */
    int fid;       /* its number among this rank's net connections in the same direction
                    * with peer, in creation order: the same number at the other end */
    int lane, local_rank; /* what picked its device (br_plugin_net_dev_pick) */
    /* Send side, with failover on: steps the receiver confirmed it holds. A slot is
     * handed back to the executor (head) only once sent and confirmed, so everything the
     * receiver may lack is still in the FIFO when a connection has to be replaced. */
    _Atomic uint64_t acked;
    uint64_t ack_sent; /* receive side: the count last confirmed to the sender */
    int acks;          /* the receiver acknowledges (both ends run with failover on) */
    int ack_fd;        /* the connection's acknowledgement socket (-1: the bootstrap's link
                        * messages carry them, as after that socket failed) */
    unsigned ack_polls;               /* send side: when to look at the socket next */
    uint64_t ack_read_ns;             /* send side: when it was last read */
    unsigned ack_got;                 /* send side: bytes of a count read so far */
    unsigned char ack_part[8];
    /* Send side, with failover on: the keep ring (fifo.h), BR_NET_KEEP_STEPS entries of
     * BR_NET_KEEP_STRIDE bytes after the slots (NULL without acknowledgements). Entry
     * s % BR_NET_KEEP_STEPS holds step s, as sent, when keep_seq says s + 1; keep_head:
     * every step from the last confirmed one up to it is kept. A step is kept only while
     * fewer than BR_NET_KEEP_STEPS lie after the last confirmed one, so no entry that a
     * failover may need is overwritten. */
    char *keep;
    uint64_t keep_seq[BR_NET_KEEP_STEPS];
    uint32_t keep_len[BR_NET_KEEP_STEPS];
    uint64_t keep_head;
    uint64_t fo_kept; /* steps the replacement sends again from the keep ring */
    int rx_unkept; /* receive side: a step since the last confirmation was not kept */
    /* Failover (proxy_link.c): the state of a replacement in progress, the number of the
     * connection's current incarnation (both ends agree on it), how often it failed. */
    int fo_state;
    uint32_t epoch;
    int nfail;
    uint64_t fo_start, fo_deadline;
    void *fo_listen;    /* receive side: listening for the replacement */
    br_net_t *fo_net;   /* the plugin and device of the replacement */
    int fo_dev;
    char fo_handle[NCCL_NET_HANDLE_MAXSIZE]; /* send side: where to connect */
    char fo_what[256];  /* what failed (for the WARN once it is replaced) */
    /* A receive connection that failed (the peer closed it or died). Receives are kept
     * posted ahead of need, so this is an error only once the executor waits on it. */
    _Atomic int failed;
    char why[384];
    /* User-buffer path: both ends agreed at setup (the sender decides and says so in the
     * first message): the smallest operation in bytes that takes it, 0 for none; and the
     * operations on it, oldest first (under the proxy lock). */
    uint64_t userbuf;
    br_net_useg_t *useg;
    br_net_ureg_t *ureg;
    br_net_rcache_t *rcache; /* its registrations of ncclCommRegister'ed buffers */
    int reg_refused; /* the plugin refused a user buffer's regMr (said at INFO once) */
    struct br_net_conn *next;
} br_net_conn_t;

/* The executor will consume n more receives of the receive connection nc. */
static inline void br_proxy_expect(br_net_conn_t *nc, uint64_t n)
{
    /* Relaxed: the counter guards no data; the slots are guarded by head and tail. */
    atomic_fetch_add_explicit(&nc->want, n, memory_order_relaxed);
}

/* The executor waits for receive number `step` (from 0) of nc: make sure the proxy may
 * post it. Only a count that fell short needs this; it keeps a miscount from hanging. */
static inline void br_proxy_need(br_net_conn_t *nc, uint64_t step)
{
    uint64_t w = atomic_load_explicit(&nc->want, memory_order_relaxed);
    while (w <= step && !atomic_compare_exchange_weak_explicit(
                            &nc->want, &w, step + 1, memory_order_relaxed, memory_order_relaxed)) {
    }
}

/* Does an operation of `bytes` on nc take the user-buffer path? Both ends compute the same:
 * they agreed on nc->userbuf and the sender's threshold at setup, and the matching Send
 * and Recv have the same size. */
static inline int br_proxy_userbuf_takes(const br_net_conn_t *nc, size_t bytes)
{
    return nc != NULL && nc->userbuf > 0 && (uint64_t)bytes >= nc->userbuf;
}

/* Send side: steps [first, first + nsteps) of nc send bytes of ptr (the executor posts
 * them without copying, after one FIFO step with its descriptor, and waits for head to
 * pass them before its buffer is free). */
ncclResult_t br_proxy_userbuf_send(br_proxy_t *proxy, br_net_conn_t *nc, uint64_t first,
                                   uint64_t nsteps, const void *ptr, size_t bytes);

/* Receive side, when the operation is queued: the next receive of nc is the sender's
 * descriptor (a FIFO step) and the nsteps after it land in ptr (this replaces
 * br_proxy_expect for all of them); d describes the operation (bytes set per step). */
ncclResult_t br_proxy_userbuf_recv(br_proxy_t *proxy, br_net_conn_t *nc, uint64_t nsteps, void *ptr,
                                   size_t bytes, const br_slot_desc_t *d);

/* The user-buffer path of a ring collective (exec_sched.c): one step of the operation
 * `key` whose bytes the proxy sends from ptr instead of FIFO slot `step` (the executor
 * calls this before it publishes the step). */
ncclResult_t br_proxy_userbuf_send_step(br_proxy_t *proxy, br_net_conn_t *nc, uint64_t step,
                                        const void *ptr, size_t bytes, uint64_t key,
                                        const void *base, size_t len);

/* One receive step of a ring collective, in the order the connection will take them:
 * its bytes land at ptr, or (ptr NULL) in a FIFO slot with the sender's descriptor. */
typedef struct {
    void *ptr;
    size_t bytes;
} br_userbuf_step_t;

/* Receive side, when the operation is queued: its next n receives of nc, as described
 * (this replaces br_proxy_expect for them); d describes the operation. */
ncclResult_t br_proxy_userbuf_recv_steps(br_proxy_t *proxy, br_net_conn_t *nc,
                                         const br_userbuf_step_t *steps, uint64_t n,
                                         const br_slot_desc_t *d, const void *base, size_t len);
/* For both: [base, base + len) is the user buffer the step's bytes lie in (its input or
 * output), registered once for all of the operation's steps in it. */

/* The send side of operation `key` on nc added its last step: its registrations go once
 * its steps are done. */
void br_proxy_userbuf_release(br_proxy_t *proxy, br_net_conn_t *nc, uint64_t key);

/* An operation failed and its caller may free its buffers on return: close every
 * connection still holding user-buffer transfers (the net ABI cannot cancel them, and
 * closing the plugin comm ends them) and fail it, so nothing touches those buffers. */
void br_proxy_userbuf_abandon(br_proxy_t *proxy);

/* What a communicator's proxy works with. */
typedef struct {
    br_net_t *net;        /* the communicator's net plugin */
    br_bootstrap_t *boot; /* link messages to the other end of each connection */
    int rank;
    uint64_t comm_hash;   /* for opening the socket plugin on failover */
    int traffic_class;
    int net_required;     /* NCCL_NET named the network: failover never leaves it */
    br_net_regs_t *regs;  /* the communicator's registered buffers, or NULL */
} br_proxy_config_t;

/* Start the proxy of one communicator. */
ncclResult_t br_proxy_create(const br_proxy_config_t *cfg, br_proxy_t **proxy_p);

/* Hand a connected, registered net connection to the proxy. */
ncclResult_t br_proxy_add(br_proxy_t *proxy, br_net_conn_t *nc);

/* The executor enters (+1) or leaves (-1) a phase that uses net connections. While any
 * executor is active the proxy thread is parked and the executor must call
 * br_proxy_progress() from its wait loop; leaving the last phase wakes the thread, which
 * finishes the sends still in flight. */
void br_proxy_active(br_proxy_t *proxy, int delta);

/* Emit a ProxyStep profiler event around every network transfer. */
void br_proxy_set_profiler(br_proxy_t *proxy, br_profiler_t *prof);

/* The ProxyOp event ev (already started, its parent the operation's Coll or P2p event)
 * covers the connection's steps [first, first + nsteps): the proxy makes it the parent of
 * those steps' ProxyStep events and stops it when the last of them completes (at once if
 * they all have). Without room it is stopped at once. */
void br_proxy_op_begin(br_proxy_t *proxy, br_net_conn_t *nc, void *ev, uint64_t first,
                       uint64_t nsteps);

/* Progress from the executor's wait loop if the proxy lock is free; returns >0 when
 * something moved. */
int br_proxy_progress(br_proxy_t *proxy);

/* ncclSuccess, or the first error the proxy hit; its text goes to msg. */
ncclResult_t br_proxy_error(br_proxy_t *proxy, char *msg, size_t len);

/* Stop the thread, close the connections, free. With flush (destroy, finalize), first
 * wait, at most BRAID_BOOTSTRAP_TIMEOUT seconds, until every filled send slot went out.
 * Then (abort too: a peer may be dead) test whatever request is still outstanding for at
 * most BRAID_NET_CLOSE_WAIT milliseconds; one still outstanding is logged and its
 * connection closed regardless. */
void br_proxy_destroy(br_proxy_t *proxy, int flush);

#endif /* BR_PROXY_H_ */
