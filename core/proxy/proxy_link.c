/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the two ends of a net connection tell each other, over the bootstrap (link
 * messages, never through the net plugin that may be failing):
 *
 *  - ACK, receiver to sender: the receiver holds the first `count` steps. With failover on
 *    the sender hands a slot back to its executor only once the step was sent *and*
 *    acknowledged, or sent and copied into the keep ring (steps of up to
 *    BR_NET_KEEP_BYTES, fifo.h), so whatever the receiver may lack when the connection
 *    breaks is still in the sender's FIFO or ring. While every step since its last
 *    acknowledgement came kept (the descriptor says so), the receiver acknowledges every
 *    BR_NET_KEEP_STEPS / 2 steps, when idle, at the latest two steps before the ring is
 *    full; the reasoning below then holds with the ring's size for the FIFO's. Otherwise
 *    the receiver acknowledges every BR_STEPS / 2 steps, when it
 *    has nothing else to do (at the latest two steps before the sender could run out of
 *    slots), on a socket of the connection's own (transport_net.c) that the sender reads
 *    only when it needs slots, so no thread wakes and no system call lies on the path of
 *    a small operation's data. The sender always has the slots of at least BR_STEPS / 2
 *    + 1 steps beyond what the receiver consumed: a receiver lets its acknowledgement lag
 *    only while it received fewer than BR_STEPS / 2 steps it did not confirm, and those it
 *    announced it would consume (a sender runs short only where the receiver has not
 *    reached the operation yet, whose data it does not need).
 *
 *  - Failover: when a transfer fails while both ranks live, the connection is replaced.
 *    The receiver drives, as at setup: it closes the failed plugin comm, listens on the
 *    replacement's device and OFFERs the handle with the step the stream resumes at
 *    (every step it holds); the sender closes its comm, connects, and re-sends from that
 *    step. A sender that notices the failure first asks with a REQ. Each replacement
 *    raises the connection's epoch at both ends, so late messages about an older one are
 *    ignored. Either end that cannot go on sends GIVEUP, and both fail the connection with
 *    the reason, within BRAID_FAILOVER_TIMEOUT at worst.
 *
 * The replacement is the next device of the communicator's plugin while it has devices
 * not tried yet, then Braid's socket plugin (unless NCCL_NET names the network, which is
 * never left), else the same device again. A connection fails over at most
 * BRAID_FAILOVER times.
 *
 * Messages reach the proxy through a mailbox the bootstrap thread fills; everything else
 * runs under the proxy lock, from br_proxy_progress or the proxy thread.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proxy_int.h"
#include "util.h"
#include "util_socket.h"

/* Steps from this size on are acknowledged at once instead of when idle. */
#define BR_ACK_EAGER_BYTES (64 * 1024)

enum { LINK_ACK = 1, LINK_REQ = 2, LINK_OFFER = 3, LINK_GIVEUP = 4 };

/* One link message on the wire (host byte order: all ranks run the same build). */
typedef struct {
    uint32_t type;
    uint32_t fid;     /* the connection, numbered as both ends number it */
    uint32_t epoch;   /* ACK: unused; REQ: the failed incarnation; OFFER: the new one */
    int32_t is_send;  /* the direction of the connection at the sender of this message */
    int32_t fallback; /* OFFER: the replacement is on Braid's socket plugin */
    int32_t dev;      /* OFFER: the receiver's device (for messages) */
    uint64_t count;   /* ACK: steps received; OFFER: the step the stream resumes at */
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    char what[192]; /* REQ, OFFER, GIVEUP: what failed */
} link_wire_t;

_Static_assert(sizeof(link_wire_t) <= BR_BOOT_LINK_MAX, "link message too large");

struct br_link_mail {
    br_link_mail_t *next;
    int from;
    uint64_t since; /* arrival: a message for a connection not set up yet waits a while */
    link_wire_t m;
};

/* Reasons nest ("what failed; why it was not replaced"): a long one is cut, never an
 * error. */
__attribute__((format(printf, 3, 4))) static void say(char *dst, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(dst, len, fmt, ap);
    va_end(ap);
}

static const char *dir_name(const br_net_conn_t *nc)
{
    return nc->is_send ? "send to" : "receive from";
}

/* The bootstrap thread: queue the message for the proxy. */
static void link_receive(void *arg, int from, const void *data, size_t size)
{
    br_proxy_t *proxy = arg;
    br_link_mail_t *mail;

    if (size != sizeof(link_wire_t) || (mail = malloc(sizeof(*mail))) == NULL) {
        BR_INFO(NCCL_NET | NCCL_PROXY, "rank %d: dropped a %zu-byte link message from rank %d",
                proxy->rank, size, from);
        return;
    }
    memcpy(&mail->m, data, sizeof(mail->m));
    mail->m.what[sizeof(mail->m.what) - 1] = '\0';
    mail->from = from;
    mail->since = br_time_ns();
    mail->next = NULL;
    pthread_mutex_lock(&proxy->mail_lock);
    if (proxy->mail_tail != NULL) {
        proxy->mail_tail->next = mail;
    } else {
        proxy->mail_head = mail;
    }
    proxy->mail_tail = mail;
    atomic_fetch_add_explicit(&proxy->mail_n, 1, memory_order_release);
    pthread_mutex_unlock(&proxy->mail_lock);
    if (mail->m.type != LINK_ACK) {
        /* A napping proxy thread should start the replacement now, not in 50 ms. */
        pthread_mutex_lock(&proxy->wake_lock);
        pthread_cond_signal(&proxy->wake);
        pthread_mutex_unlock(&proxy->wake_lock);
    }
}

void br_proxy_link_start(br_proxy_t *proxy)
{
    if (proxy->boot != NULL) {
        br_bootstrap_set_link_fn(proxy->boot, link_receive, proxy);
    }
}

void br_proxy_link_stop(br_proxy_t *proxy)
{
    if (proxy->boot != NULL) {
        br_bootstrap_set_link_fn(proxy->boot, NULL, NULL);
    }
    while (proxy->mail_head != NULL) {
        br_link_mail_t *mail = proxy->mail_head;
        proxy->mail_head = mail->next;
        free(mail);
    }
    proxy->mail_tail = NULL;
}

/* Send one message about nc to its peer; returns the bootstrap's result. */
static ncclResult_t link_send(br_proxy_t *proxy, const br_net_conn_t *nc, uint32_t type,
                              link_wire_t *m)
{
    m->type = type;
    m->fid = (uint32_t)nc->fid;
    m->is_send = nc->is_send;
    return br_bootstrap_send_link(proxy->boot, nc->peer, m, sizeof(*m));
}

static ncclResult_t link_send_text(br_proxy_t *proxy, const br_net_conn_t *nc, uint32_t type,
                                   uint32_t epoch, const char *what)
{
    link_wire_t m;
    memset(&m, 0, sizeof(m));
    m.epoch = epoch;
    say(m.what, sizeof(m.what), "%s", what);
    return link_send(proxy, nc, type, &m);
}

/* The acknowledgement socket failed: from now on acknowledgements go as link messages. */
static void ack_socket_lost(br_proxy_t *proxy, br_net_conn_t *nc, const char *what)
{
    BR_INFO(NCCL_NET | NCCL_PROXY,
            "rank %d: the acknowledgement socket of the %s rank %d %s (%s); acknowledgements "
            "go through the bootstrap from here on",
            proxy->rank, nc->is_send ? "send to" : "receive from", nc->peer, what, strerror(errno));
    br_socket_close(&nc->ack_fd);
}

void br_proxy_link_ack(br_proxy_t *proxy, br_net_conn_t *nc, int idle)
{
    uint64_t count = nc->done;

    if (count == nc->ack_sent) {
        return;
    }
    /* A large step takes far longer than the system call: confirm each one at once, so
     * the sender keeps all its slots busy. Small ones every BR_STEPS / 2, when idle, or
     * every BR_NET_KEEP_STEPS / 2 while the sender kept every one since the last
     * confirmation (it holds no slot for them). */
    if (idle < 2 && nc->ctrl->slot[(count - 1) % BR_STEPS].bytes < BR_ACK_EAGER_BYTES) {
        uint64_t window = nc->rx_unkept ? BR_STEPS : BR_NET_KEEP_STEPS;
        if (count - nc->ack_sent < window / 2) {
            return;
        }
        if (!idle && count - nc->ack_sent < window - 2) {
            proxy->acks_due = 1;
            return;
        }
    }
    if (nc->ack_fd >= 0) {
        ssize_t n = br_socket_send_nb(nc->ack_fd, &count, sizeof(count));
        if (n == (ssize_t)sizeof(count)) {
            nc->ack_sent = count;
            nc->rx_unkept = 0;
            return;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            proxy->acks_due = 1; /* the sender has not read for a while: again later */
            return;
        }
        if (n > 0 &&
            br_socket_send_all(nc->ack_fd, (const char *)&count + n, sizeof(count) - (size_t)n,
                               br_time_ns() + 1000000000ull) == ncclSuccess) {
            nc->ack_sent = count;
            nc->rx_unkept = 0;
            return;
        }
        ack_socket_lost(proxy, nc, "failed");
        if (n > 0) {
            return; /* a part of the count went: the stream is broken, its reader drops it */
        }
    }
    link_wire_t m;
    memset(&m, 0, sizeof(m));
    m.count = count;
    /* A failed send is the failover's business (the peer's process may be gone, which the
     * executor reports); the sender then merely waits longer for its slots. */
    if (link_send(proxy, nc, LINK_ACK, &m) == ncclSuccess) {
        nc->ack_sent = count;
        nc->rx_unkept = 0;
    }
}

void br_proxy_link_read_acks(br_proxy_t *proxy, br_net_conn_t *nc, int idle)
{
    uint64_t tail = atomic_load_explicit(&nc->ctrl->tail, memory_order_relaxed);
    uint64_t head = atomic_load_explicit(&nc->ctrl->head, memory_order_relaxed);
    unsigned char buf[512];
    uint64_t count = 0;
    int found = 0;

    /* A system call on the path of a small operation's data costs more than the rest of
     * it. The receiver confirms every BR_STEPS / 2 steps: look while waiting anyway, once
     * per wait, when that many are unconfirmed; when every slot is taken (the executor may
     * be waiting for one); and else once a millisecond, so nothing piles up. */
    if (nc->ack_fd < 0) {
        return;
    }
    if (idle == 1) {
        /* Steps that hold slots are confirmed every BR_STEPS / 2; kept ones less often. */
        uint64_t due = br_proxy_link_head(nc) < nc->done ? BR_STEPS / 2 : BR_NET_KEEP_STEPS / 2;
        if (proxy->idle_streak != 8 ||
            nc->done - atomic_load_explicit(&nc->acked, memory_order_relaxed) < due) {
            return;
        }
    } else if (idle == 0 && tail - head < BR_STEPS) {
        uint64_t now;
        if ((++nc->ack_polls & 15) != 0 || (now = br_time_ns()) - nc->ack_read_ns < 1000000) {
            return;
        }
        nc->ack_read_ns = now;
    } else {
        /* Every slot is taken, or (idle 2) a user-buffer send waits for its steps to be
         * confirmed before its call returns: while a stream runs at network speed this
         * holds most of the time, so look at most every 5 us rather than at every turn of
         * the loop. */
        uint64_t now = br_time_ns();
        if (now - nc->ack_read_ns < 5000) {
            return;
        }
        nc->ack_read_ns = now;
    }
    for (;;) {
        ssize_t n = br_socket_recv_nb(nc->ack_fd, buf, sizeof(buf));
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            ack_socket_lost(proxy, nc, n == 0 ? "was closed by the receiver" : "failed");
            break;
        }
        if (n < 0) {
            break;
        }
        /* Counts of 8 bytes, each one at least the one before: the last whole one wins. */
        for (ssize_t i = 0; i < n; i++) {
            nc->ack_part[nc->ack_got++] = buf[i];
            if (nc->ack_got == sizeof(count)) {
                memcpy(&count, nc->ack_part, sizeof(count));
                nc->ack_got = 0;
                found = 1;
            }
        }
        if ((size_t)n < sizeof(buf)) {
            break;
        }
    }
    if (found && count > atomic_load_explicit(&nc->acked, memory_order_relaxed)) {
        atomic_store_explicit(&nc->acked, count, memory_order_release);
    }
}

/* ---- Giving up ---- */

static void leave_failover(br_proxy_t *proxy, br_net_conn_t *nc)
{
    if (nc->fo_state != BR_FO_NONE && nc->fo_state != BR_FO_DEAD) {
        proxy->nfailover--;
    }
}

/* The connection cannot be replaced: fail it for good with why, and tell the peer
 * (unless it was the peer that gave up). */
static void give_up(br_proxy_t *proxy, br_net_conn_t *nc, ncclResult_t res, const char *why,
                    int tell)
{
    char what[512];

    leave_failover(proxy, nc);
    br_proxy_comm_close(proxy, nc);
    if (tell && proxy->boot != NULL) {
        (void)link_send_text(proxy, nc, LINK_GIVEUP, nc->epoch, why);
    }
    say(what, sizeof(what), "%s (%s)", nc->is_send ? "send" : "receive", why);
    if (nc->is_send) {
        br_proxy_fail_send(proxy, nc, res, what);
    } else {
        br_proxy_fail_recv(proxy, nc, res, what);
    }
}

/* May nc be replaced once more? If not, why goes to whynot. */
static int may_fail_over(br_proxy_t *proxy, const br_net_conn_t *nc, char *whynot, size_t len)
{
    if (proxy->failover <= 0) {
        say(whynot, len, "failover is off (BRAID_FAILOVER=0)");
        return 0;
    }
    if (nc->nfail >= proxy->failover) {
        say(whynot, len, "it already failed over %d time%s (BRAID_FAILOVER=%d)", nc->nfail,
            nc->nfail == 1 ? "" : "s", proxy->failover);
        return 0;
    }
    if (br_bootstrap_peer_gone(proxy->boot, nc->peer)) {
        say(whynot, len,
            "rank %d closed its bootstrap connection (its process exited or it "
            "destroyed the communicator)",
            nc->peer);
        return 0;
    }
    return 1;
}

/* Enter (or move within) a replacement; `attempt`: this is a new one, which counts
 * towards BRAID_FAILOVER. */
static void enter_failover(br_proxy_t *proxy, br_net_conn_t *nc, int state, int attempt)
{
    if (nc->fo_state == BR_FO_NONE) {
        proxy->nfailover++;
        nc->fo_start = br_time_ns();
    }
    nc->nfail += attempt;
    nc->fo_state = state;
    nc->fo_deadline = br_time_ns() + (uint64_t)BR_PARAM_INT(FAILOVER_TIMEOUT) * 1000000000ull;
}

/* ---- Where the replacement goes ---- */

static br_net_t *fallback_net(br_proxy_t *proxy)
{
    if (proxy->fallback == NULL) {
        br_net_request_t req;
        memset(&req, 0, sizeof(req));
        req.comm_hash = proxy->comm_hash;
        req.traffic_class = proxy->traffic_class;
        if (br_plugin_net_open_internal(&req, &proxy->fallback) != ncclSuccess) {
            proxy->fallback = NULL;
        }
    }
    return proxy->fallback;
}

/* The device after dev in net's list of devices in use. */
static int next_dev(const br_net_t *net, int dev)
{
    for (int i = 0; i < net->nused; i++) {
        if (net->used[i] == dev) {
            return net->used[(i + 1) % net->nused];
        }
    }
    return net->used[0];
}

/* The receiver's choice: the communicator's plugin on its next device while devices are
 * left to try, then the socket plugin (unless the network was required), else the same
 * device again. */
static void pick_replacement(br_proxy_t *proxy, const br_net_conn_t *nc, br_net_t **net_p,
                             int *dev_p, int *fallback_p)
{
    br_net_t *net = nc->net;

    *fallback_p = net == proxy->fallback;
    if (net == proxy->net && nc->nfail < net->nused) {
        *net_p = net;
        *dev_p = next_dev(net, nc->dev);
        return;
    }
    if (net == proxy->net && !proxy->net_required && fallback_net(proxy) != NULL) {
        *net_p = proxy->fallback;
        *dev_p = br_plugin_net_dev_pick(proxy->fallback, nc->lane, nc->local_rank);
        *fallback_p = 1;
        return;
    }
    *net_p = net;
    *dev_p = net->nused > 1 ? next_dev(net, nc->dev) : nc->dev;
}

/* A new replacement of nc because of `what`, if failover allows one (else nc fails for
 * good and 0 is returned): the failed comm closes with whatever was in flight, and
 * everything not completed on it is posted again on the replacement. */
static int begin_replacement(br_proxy_t *proxy, br_net_conn_t *nc, const char *what, int state)
{
    char whynot[256];

    if (!may_fail_over(proxy, nc, whynot, sizeof(whynot))) {
        char why[512];
        say(why, sizeof(why), "%s; not replaced: %s", what, whynot);
        give_up(proxy, nc, ncclRemoteError, why, 1);
        return 0;
    }
    br_proxy_comm_close(proxy, nc);
    nc->posted = nc->done;
    enter_failover(proxy, nc, state, 1);
    say(nc->fo_what, sizeof(nc->fo_what), "%s", what);
    return 1;
}

/* ---- Receive side ---- */

/* Replace the receive connection nc: listen on the replacement and offer it. */
static void recv_replace(br_proxy_t *proxy, br_net_conn_t *nc, const char *what)
{
    char whynot[256];
    link_wire_t m;
    br_net_t *net;
    int dev, fallback;
    ncclResult_t res;

    if (!begin_replacement(proxy, nc, what, BR_FO_ACCEPTING)) {
        return;
    }
    pick_replacement(proxy, nc, &net, &dev, &fallback);
    memset(&m, 0, sizeof(m));
    res = net->ops->listen(net, dev, m.handle, &nc->fo_listen);
    if (res != ncclSuccess) {
        nc->fo_listen = NULL;
        say(whynot, sizeof(whynot), "%s; the replacement cannot listen on NET/%s device %d", what,
            net->name, dev);
        give_up(proxy, nc, res, whynot, 1);
        return;
    }
    nc->fo_net = net;
    nc->fo_dev = dev;
    nc->epoch++;
    m.epoch = nc->epoch;
    m.count = nc->done;
    m.fallback = fallback;
    m.dev = dev;
    say(m.what, sizeof(m.what), "%s", what);
    BR_INFO(NCCL_NET | NCCL_PROXY,
            "rank %d: %s; offering rank %d a replacement on NET/%s device %d from step %llu",
            proxy->rank, what, nc->peer, net->name, dev, (unsigned long long)nc->done);
    if (link_send(proxy, nc, LINK_OFFER, &m) != ncclSuccess) {
        say(whynot, sizeof(whynot), "%s; rank %d cannot be reached to replace it", what, nc->peer);
        give_up(proxy, nc, ncclRemoteError, whynot, 0);
    }
}

/* ---- Send side ---- */

static void send_request(br_proxy_t *proxy, br_net_conn_t *nc, const char *what)
{
    char whynot[256];

    if (!begin_replacement(proxy, nc, what, BR_FO_WAIT_OFFER)) {
        return;
    }
    BR_INFO(NCCL_NET | NCCL_PROXY, "rank %d: %s; asking rank %d for a replacement", proxy->rank,
            what, nc->peer);
    if (link_send_text(proxy, nc, LINK_REQ, nc->epoch, what) != ncclSuccess) {
        say(whynot, sizeof(whynot), "%s; rank %d cannot be reached to replace it", what, nc->peer);
        give_up(proxy, nc, ncclRemoteError, whynot, 0);
    }
}

/* The receiver offered a replacement: the stream resumes at step m->count. */
static void send_take_offer(br_proxy_t *proxy, br_net_conn_t *nc, const link_wire_t *m)
{
    uint64_t head = atomic_load_explicit(&nc->ctrl->head, memory_order_relaxed);
    uint64_t tail = atomic_load_explicit(&nc->ctrl->tail, memory_order_acquire);
    char why[512];
    br_net_t *net;

    int first = nc->fo_state == BR_FO_NONE; /* the receiver noticed first */

    if (first) {
        char whynot[256];
        say(why, sizeof(why), "rank %d reports: %s", nc->peer, m->what);
        if (!may_fail_over(proxy, nc, whynot, sizeof(whynot))) {
            say(why, sizeof(why), "rank %d reports: %s; not replaced: %s", nc->peer, m->what,
                whynot);
            give_up(proxy, nc, ncclRemoteError, why, 1);
            return;
        }
        br_proxy_comm_close(proxy, nc);
        say(nc->fo_what, sizeof(nc->fo_what), "%s", why);
    }
    enter_failover(proxy, nc, BR_FO_CONNECTING, first);
    nc->epoch = m->epoch;
    /* Steps from the receiver's count on are in their slots (from head) or kept. */
    int lost = m->count > tail;
    for (uint64_t k = m->count; k < head && !lost; k++) {
        lost = !br_proxy_kept(nc, k);
    }
    if (lost) {
        say(why, sizeof(why),
            "%s; rank %d holds %llu steps, but this rank kept steps %llu to %llu only", nc->fo_what,
            nc->peer, (unsigned long long)m->count, (unsigned long long)head,
            (unsigned long long)tail);
        give_up(proxy, nc, ncclInternalError, why, 1);
        return;
    }
    net = m->fallback ? fallback_net(proxy) : proxy->net;
    if (net == NULL) {
        say(why, sizeof(why),
            "%s; the replacement needs Braid's socket plugin, which this "
            "rank cannot load",
            nc->fo_what);
        give_up(proxy, nc, ncclSystemError, why, 1);
        return;
    }
    nc->fo_net = net;
    if (net != nc->net) {
        nc->fo_dev = br_plugin_net_dev_pick(net, nc->lane, nc->local_rank);
    } else {
        nc->fo_dev = net->nused > 1 ? next_dev(net, nc->dev) : nc->dev;
    }
    memcpy(nc->fo_handle, m->handle, sizeof(nc->fo_handle));
    nc->fo_kept = head > m->count ? head - m->count : 0;
    nc->posted = nc->done = m->count; /* everything from there on goes again */
    nc->keep_head = m->count;
}

/* ---- Messages ---- */

static br_net_conn_t *find_conn(br_proxy_t *proxy, int peer, int is_send, uint32_t fid)
{
    for (br_net_conn_t *nc = proxy->conns; nc != NULL; nc = nc->next) {
        if (nc->peer == peer && nc->is_send == is_send && (uint32_t)nc->fid == fid) {
            return nc;
        }
    }
    return NULL;
}

static void apply(br_proxy_t *proxy, br_net_conn_t *nc, const link_wire_t *m)
{
    char why[512];

    switch (m->type) {
    case LINK_ACK: {
        uint64_t acked = atomic_load_explicit(&nc->acked, memory_order_relaxed);
        if (m->count > acked) {
            atomic_store_explicit(&nc->acked, m->count, memory_order_release);
        }
        break;
    }
    case LINK_REQ:
        /* About the incarnation we run (or offered a replacement for, which failed too). */
        if (m->epoch == nc->epoch && nc->fo_state != BR_FO_DEAD) {
            say(why, sizeof(why), "rank %d reports: %s", nc->peer, m->what);
            recv_replace(proxy, nc, why);
        }
        break;
    case LINK_OFFER:
        if (m->epoch > nc->epoch && nc->fo_state != BR_FO_DEAD) {
            send_take_offer(proxy, nc, m);
        }
        break;
    case LINK_GIVEUP:
        if (nc->fo_state != BR_FO_DEAD) {
            say(why, sizeof(why), "rank %d could not replace the connection: %s", nc->peer,
                m->what);
            give_up(proxy, nc, ncclRemoteError, why, 0);
        }
        break;
    default:
        BR_INFO(NCCL_NET | NCCL_PROXY, "rank %d: link message of unknown type %u from rank %d",
                proxy->rank, m->type, nc->peer);
    }
}

/* Handle the mailbox; a message for a connection not handed to the proxy yet is kept
 * for BRAID_FAILOVER_TIMEOUT. */
static int take_mail(br_proxy_t *proxy)
{
    br_link_mail_t *list, *keep = NULL, *keep_last = NULL;
    uint64_t now = br_time_ns();
    uint64_t wait = (uint64_t)BR_PARAM_INT(FAILOVER_TIMEOUT) * 1000000000ull;
    int n = 0, kept = 0;

    pthread_mutex_lock(&proxy->mail_lock);
    list = proxy->mail_head;
    proxy->mail_head = proxy->mail_tail = NULL;
    atomic_store_explicit(&proxy->mail_n, 0, memory_order_relaxed);
    pthread_mutex_unlock(&proxy->mail_lock);
    while (list != NULL) {
        br_link_mail_t *mail = list;
        br_net_conn_t *nc = find_conn(proxy, mail->from, !mail->m.is_send, mail->m.fid);
        list = mail->next;
        mail->next = NULL;
        if (nc == NULL && now - mail->since < wait) {
            if (keep_last != NULL) {
                keep_last->next = mail;
            } else {
                keep = mail;
            }
            keep_last = mail;
            kept++;
            continue;
        }
        if (nc != NULL) {
            apply(proxy, nc, &mail->m);
            n++;
        }
        free(mail);
    }
    if (keep != NULL) {
        /* Back in front of anything that arrived meanwhile, in order. */
        pthread_mutex_lock(&proxy->mail_lock);
        keep_last->next = proxy->mail_head;
        if (proxy->mail_head == NULL) {
            proxy->mail_tail = keep_last;
        }
        proxy->mail_head = keep;
        atomic_fetch_add_explicit(&proxy->mail_n, kept, memory_order_release);
        pthread_mutex_unlock(&proxy->mail_lock);
    }
    return n;
}

/* ---- Moving a replacement ---- */

/* The replacement's plugin comm is up: register the FIFO and resume. */
static void replaced(br_proxy_t *proxy, br_net_conn_t *nc, void *comm)
{
    br_net_t *old = nc->net;
    int old_dev = nc->dev;
    char why[512];
    ncclResult_t res;

    nc->comm = comm;
    nc->net = nc->fo_net;
    nc->dev = nc->fo_dev;
    res = nc->net->ops->reg_mr(nc->net, comm, nc->buf, nc->reg_bytes, NCCL_PTR_HOST,
                               &nc->mhandle);
    if (res != ncclSuccess) {
        nc->mhandle = NULL;
        say(why, sizeof(why), "%s; NET/%s cannot register the FIFO of the replacement", nc->fo_what,
            nc->net->name);
        give_up(proxy, nc, res, why, 1);
        return;
    }
    leave_failover(proxy, nc);
    nc->fo_state = BR_FO_NONE;
    char kept[64] = "";
    if (nc->is_send && nc->fo_kept > 0) {
        snprintf(kept, sizeof(kept), ", the first %llu from the keep ring",
                 (unsigned long long)nc->fo_kept);
    }
    BR_WARN(NCCL_NET | NCCL_PROXY,
            "rank %d: the network %s rank %d on NET/%s device %d failed (%s); NET/%s device %d "
            "(%s) took over after %.1f ms, resuming at step %llu%s (failover %d of at most %d)",
            proxy->rank, dir_name(nc), nc->peer, old->name, old_dev, nc->fo_what, nc->net->name,
            nc->dev, br_plugin_net_dev_name(nc->net, nc->dev),
            (double)(br_time_ns() - nc->fo_start) / 1e6, (unsigned long long)nc->done, kept,
            nc->nfail, proxy->failover);
}

static int move_replacement(br_proxy_t *proxy, br_net_conn_t *nc)
{
    br_net_t *net = nc->fo_net;
    void *comm = NULL;
    char why[512];
    ncclResult_t res = ncclSuccess;

    if (br_time_ns() > nc->fo_deadline) {
        say(why, sizeof(why), "%s; no replacement within BRAID_FAILOVER_TIMEOUT (%d s)%s",
            nc->fo_what, (int)BR_PARAM_INT(FAILOVER_TIMEOUT),
            nc->fo_state == BR_FO_WAIT_OFFER ? ": rank did not offer one" : "");
        give_up(proxy, nc, ncclRemoteError, why, 1);
        return 1;
    }
    if (nc->fo_state == BR_FO_CONNECTING) {
        res = net->ops->connect(net, nc->fo_dev, nc->fo_handle, &comm);
    } else if (nc->fo_state == BR_FO_ACCEPTING) {
        res = net->ops->accept(net, nc->fo_listen, &comm);
    } else {
        return 0;
    }
    if (res != ncclSuccess) {
        /* The replacement failed too: the next one, if failover allows. */
        say(why, sizeof(why), "%s; then the replacement on NET/%s device %d failed to %s",
            nc->fo_what, net->name, nc->fo_dev, nc->is_send ? "connect" : "accept");
        br_proxy_link_failed(proxy, nc, res, why);
        return 1;
    }
    if (comm == NULL) {
        return 0;
    }
    if (nc->fo_listen != NULL) {
        (void)net->ops->close_listen(net, nc->fo_listen);
        nc->fo_listen = NULL;
    }
    replaced(proxy, nc, comm);
    return 1;
}

int br_proxy_link_progress(br_proxy_t *proxy)
{
    int moved = 0;

    if (atomic_load_explicit(&proxy->mail_n, memory_order_acquire) > 0) {
        moved += take_mail(proxy);
    }
    if (proxy->nfailover > 0) {
        for (br_net_conn_t *nc = proxy->conns; nc != NULL; nc = nc->next) {
            if (nc->fo_state != BR_FO_NONE && nc->fo_state != BR_FO_DEAD) {
                moved += move_replacement(proxy, nc);
            }
        }
    }
    return moved;
}

void br_proxy_link_failed(br_proxy_t *proxy, br_net_conn_t *nc, ncclResult_t res, const char *what)
{
    char why[512];

    if (nc->fo_state == BR_FO_NONE) {
        say(why, sizeof(why), "%s on NET/%s device %d failed with %s after %llu steps", what,
            nc->net->name, nc->dev, br_plugin_result_str(res), (unsigned long long)nc->done);
    } else {
        say(why, sizeof(why), "%s", what);
    }
    if (proxy->failover <= 0 || proxy->boot == NULL) {
        if (nc->is_send) {
            br_proxy_fail_send(proxy, nc, res, "send");
        } else {
            br_proxy_fail_recv(proxy, nc, res, "receive");
        }
        return;
    }
    if (nc->is_send) {
        send_request(proxy, nc, why);
    } else {
        recv_replace(proxy, nc, why);
    }
}
