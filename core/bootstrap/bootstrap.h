/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bootstrap: how ranks find each other before any transport exists. A unique id holds
 * the root's address and a random secret; every rank checks in with the root, learns its
 * ring neighbours and its log2(nranks) allgather partners, and connects to them. Out-of-band send/recv
 * between any two ranks carries connection setup. Every connection presents the secret;
 * one that does not is dropped and logged. Every wait is bounded (BRAID_BOOTSTRAP_TIMEOUT)
 * and fails naming the rank(s) it waited for.
 *
 * Threading: one br_bootstrap_t per communicator rank. allgather/barrier are collective
 * and called by one thread per rank. send/recv may be called from any thread of the
 * owning rank (internally serialized). A background thread per bootstrap accepts
 * incoming connections and queues their messages, so recv() and poll_abort() only
 * look at the queue.
 */
#ifndef BR_BOOTSTRAP_H_
#define BR_BOOTSTRAP_H_

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "util_socket.h"

typedef struct br_bootstrap br_bootstrap_t;

/* Make a unique id: a random 8-byte secret and the address of a root listener this
 * process starts (a detached thread serving exactly one communicator init). With
 * NCCL_COMM_ID=host:port set, the id instead carries that address and a secret derived
 * from it, and rank 0 starts the root inside br_bootstrap_init. */
ncclResult_t br_bootstrap_get_unique_id(ncclUniqueId *id);

/* A fresh id with a root served by this process, ignoring NCCL_COMM_ID: for
 * communicators made from other communicators (split) or within one process (InitAll),
 * which must not collide on the NCCL_COMM_ID port. */
ncclResult_t br_bootstrap_new_unique_id(ncclUniqueId *id);

/* Is this id plausibly one that br_bootstrap_get_unique_id made (magic, address family,
 * port)? A zeroed or garbage id fails here, with a WARN saying why. */
ncclResult_t br_bootstrap_check_unique_id(const ncclUniqueId *id);

/* Join the communicator: check in with the root, connect the ring, exchange listen
 * addresses. Fails within BRAID_BOOTSTRAP_TIMEOUT seconds when a rank never arrives,
 * with an error text naming the missing ranks (every arrived rank gets that text). */
ncclResult_t br_bootstrap_init(const ncclUniqueId *id, int rank, int nranks,
                               br_bootstrap_t **boot_p);

/* Allgather: data holds nranks slots of size bytes; this rank's slot is filled on entry,
 * every slot on return. Through each host's shared memory, a leader per host exchanging
 * with the other hosts' in ceil(log2(hosts)) rounds (bootstrap_shm.c); over sockets in
 * ceil(log2(nranks)) rounds where hosts hold one rank each. */
ncclResult_t br_bootstrap_allgather(br_bootstrap_t *boot, void *data, size_t size);

/* How allgathers travel: the number of ranks (this one included) whose slots meet in this
 * rank's host memory, and in *nhosts_p the number of hosts; 0 and 0 when every rank goes
 * over sockets (one rank per host, one rank, or BRAID_BOOTSTRAP_SHM=0). */
int br_bootstrap_local_ranks(br_bootstrap_t *boot, int *nhosts_p);

/* Barrier over all ranks. */
ncclResult_t br_bootstrap_barrier(br_bootstrap_t *boot);

/* Out-of-band message to one peer, matched on the receiver by (peer, tag) in order.
 * send does not wait for the matching recv (it returns once the bytes are written). */
ncclResult_t br_bootstrap_send(br_bootstrap_t *boot, int peer, int tag, const void *data,
                               size_t size);
/* The same for a small message that may be lost: within budget_ns, only if the
 * connection takes it whole at once (a peer that does not read loses it, and the
 * connection stays as it was), and a failure is only returned (no WARN, no wait for the
 * peer's own report). */
ncclResult_t br_bootstrap_send_brief(br_bootstrap_t *boot, int peer, int tag, const void *data,
                                     size_t size, uint64_t budget_ns);
/* Receive exactly size bytes from (peer, tag); a size mismatch is an error. Bounded by
 * BRAID_BOOTSTRAP_TIMEOUT; a dead peer fails it sooner. */
ncclResult_t br_bootstrap_recv(br_bootstrap_t *boot, int peer, int tag, void *data, size_t size);
/* The same, calling watch(arg) (without the bootstrap's lock) whenever the wait has seen
 * nothing for a while (50 ms at first, then up to a second): an error it returns (having
 * logged why) ends the wait with that error. */
ncclResult_t br_bootstrap_recv_watch(br_bootstrap_t *boot, int peer, int tag, void *data,
                                     size_t size, ncclResult_t (*watch)(void *arg), void *arg);
/* Copy the nth oldest (from 0) message from (peer, tag) that has arrived and is not
 * received yet into data without taking it: 1 if there is one of exactly size bytes. */
int br_bootstrap_peek(br_bootstrap_t *boot, int peer, int tag, int nth, void *data, size_t size);
/* How many messages (any peer, any tag) have arrived and are not received yet: a cheap
 * look before peeking at every peer. Approximate while messages arrive. */
int br_bootstrap_queued(br_bootstrap_t *boot);
/* Throw away every message from (peer, tag) that has arrived and is not received yet. */
void br_bootstrap_drop(br_bootstrap_t *boot, int peer, int tag);
/* The same for those of them that stale(arg, data, size) says are (called under the
 * bootstrap's lock: it must only look at the bytes). */
void br_bootstrap_drop_if(br_bootstrap_t *boot, int peer, int tag,
                          int (*stale)(void *arg, const void *data, size_t size), void *arg);

/* Tell every other rank that this rank failed, with a reason (best effort, bounded to
 * about a second in total, never blocks on a dead peer). */
void br_bootstrap_abort_notify(br_bootstrap_t *boot, const char *reason);

/* Tell every other rank what this rank is blocked in: the operation (key, nonzero, as the
 * caller numbers them), for each of BR_BOOT_WAIT_SLOTS slots (the caller's channels) the
 * rank it waits for there (-1: none), and a text. Each rank keeps the latest notice of
 * each peer; a rank that times out follows the chain of waits to the rank that is not in
 * the operation. Best effort, bounded like abort_notify. */
#define BR_BOOT_WAIT_SLOTS 16
void br_bootstrap_post_wait(br_bootstrap_t *boot, uint64_t key, const int *wait_peer,
                            const char *what);

/* rank's latest wait notice: returns 1 and fills key, wait_peer (BR_BOOT_WAIT_SLOTS
 * entries) and what, or 0 if none. */
int br_bootstrap_peer_wait(br_bootstrap_t *boot, int rank, uint64_t *key_p, int *wait_peer,
                           char *what, size_t len);

/* Recovery after a failure (ncclCommShrink): a small numbered message (at most
 * BR_BOOT_RECOVER_MAX bytes) to one peer, on a connection of its own, that arrives and is
 * waited for even when this bootstrap was cancelled or told of a failure (the state every
 * survivor's communicator is in then). The receiver keeps the latest per sender; recv
 * waits until rank `peer`'s message numbered `seq` is there, and fails early if that
 * rank's process is gone, else after BRAID_BOOTSTRAP_TIMEOUT. */
#define BR_BOOT_RECOVER_MAX 256
ncclResult_t br_bootstrap_send_recovery(br_bootstrap_t *boot, int peer, uint32_t seq,
                                        const void *data, size_t size);
ncclResult_t br_bootstrap_recv_recovery(br_bootstrap_t *boot, int peer, uint32_t seq, void *data,
                                        size_t size);

/* From any thread: every wait of this bootstrap, in progress or to come, ends at once
 * with reason (the communicator was aborted or revoked). */
void br_bootstrap_cancel(br_bootstrap_t *boot, const char *reason);

/* Was it cancelled? If so returns 1 and fills the reason. */
int br_bootstrap_cancelled(br_bootstrap_t *boot, char *reason, size_t len);

/* Non-blocking: has another rank sent an abort notification? If so returns 1 and fills
 * the sender's rank and its reason. */
int br_bootstrap_poll_abort(br_bootstrap_t *boot, int *from_rank_p, char *reason, size_t len);

/* As br_bootstrap_poll_abort, but waits up to wait_ns for a notification still on its way
 * (a peer whose end vanished has usually just failed and is telling the others why). */
int br_bootstrap_await_abort(br_bootstrap_t *boot, uint64_t wait_ns, int *from_rank_p,
                             char *reason, size_t len);

/* Host name and pid of a rank as exchanged at init (for error messages). */
const char *br_bootstrap_peer_host(br_bootstrap_t *boot, int rank);
int br_bootstrap_peer_pid(br_bootstrap_t *boot, int rank);

/*
 * State queries (the dump of core/comm/comm_dump.c). The background thread answers
 * another rank's query with what fn returns: a malloc'ed text that it frees, or NULL.
 * fn runs on the background thread until br_bootstrap_close, so arg must live until then.
 */
typedef char *(*br_bootstrap_state_fn_t)(void *arg, size_t *len_p);
void br_bootstrap_set_state_fn(br_bootstrap_t *boot, br_bootstrap_state_fn_t fn, void *arg);

/* One rank's answer to a query. */
typedef struct {
    char *text;     /* malloc'ed (the caller frees it), NULL when there is none */
    size_t len;
    char why[192];  /* when text is NULL: why ("connection refused: ...") */
} br_bootstrap_reply_t;

/* Ask every other rank for its state (replies: nranks entries; this rank's stays empty).
 * The connections are made one after the other, the answers read together; everything
 * ends by deadline_ns, and a rank that has not answered by then gets a reason. Any thread
 * may call it while the bootstrap is open; it uses its own sockets. */
void br_bootstrap_query_all(br_bootstrap_t *boot, uint64_t deadline_ns,
                            br_bootstrap_reply_t *replies);

/*
 * Link messages: small messages between the two ends of a data connection (the proxy's
 * acknowledgements and failover negotiation, core/proxy/proxy.c). They travel on the
 * persistent message connection to the peer, in order, and the receiving background
 * thread hands each to fn(arg, from, data, size) instead of queueing it (a message that
 * arrives while no handler is set is dropped). Setting NULL returns once no call of the
 * previous handler is running. send is blocking like br_bootstrap_send (bounded).
 */
#define BR_BOOT_LINK_MAX 512
typedef void (*br_bootstrap_link_fn_t)(void *arg, int from, const void *data, size_t size);
void br_bootstrap_set_link_fn(br_bootstrap_t *boot, br_bootstrap_link_fn_t fn, void *arg);
ncclResult_t br_bootstrap_send_link(br_bootstrap_t *boot, int peer, const void *data,
                                    size_t size);

/* The address this rank's bootstrap listens on, with port 0: where other sockets between
 * the ranks (the proxy's acknowledgements) can listen too. */
void br_bootstrap_listen_ip(br_bootstrap_t *boot, br_socket_addr_t *addr_p);

/* Has rank peer's process closed its message connection to this rank (it exited or
 * destroyed its communicator)? Only a peer that ever sent this rank a message can say so. */
int br_bootstrap_peer_gone(br_bootstrap_t *boot, int peer);

/* BRAID_TEST_EXIT_AT (a testing parameter): this process ends here (_exit(3)) when the
 * parameter names point, so tests can see what its peers make of a rank lost there. */
void br_bootstrap_test_exit(const br_bootstrap_t *boot, const char *point);

/* Stop the background thread, close every socket, free. */
void br_bootstrap_close(br_bootstrap_t *boot);

#endif /* BR_BOOTSTRAP_H_ */
