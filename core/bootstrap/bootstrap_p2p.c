/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Out-of-band messages between the ranks of one bootstrap. Each rank keeps one persistent
 * connection to every peer it has sent to (opened on first use, under that peer's
 * out_lock), so messages from one sender arrive in order. A background thread per
 * bootstrap owns the listener and every accepted connection: it checks the secret in the
 * first bytes, then reads frames {kind, tag, size} + payload into the sender's unexpected
 * queue (boot->peers[src], under boot->lock) and signals boot->cond. recv only waits on
 * that queue, so a send never waits for a recv and two ranks sending to each other cannot
 * deadlock. Abort and wait notices and recovery messages (bootstrap_notice.c) come on
 * short-lived connections of their own.
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

/* What an accepted connection is reading now. */
enum { IN_HELLO, IN_FRAME, IN_PAYLOAD };

/* Messages up to this size go out in one write together with their header. */
#define SEND_COALESCE 4096

const char *br_boot_rank_str(const br_bootstrap_t *boot, int rank, char *buf, size_t len)
{
    const br_boot_peer_t *p = &boot->peers[rank].info;
    char text[BR_SOCKET_ADDR_STRLEN];

    if (p->host[0] != '\0') {
        snprintf(buf, len, "rank %d (host %s, pid %d)", rank, p->host, (int)p->pid);
    } else if (br_socket_addr_is_valid(&p->addr)) {
        snprintf(buf, len, "rank %d (at %s)", rank,
                 br_socket_addr_str(&p->addr, text, sizeof(text)));
    } else {
        snprintf(buf, len, "rank %d", rank);
    }
    return buf;
}

static void drop_conn(br_bootstrap_t *boot, br_boot_inconn_t *c, const char *why)
{
    char text[BR_SOCKET_ADDR_STRLEN];

    BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "bootstrap: dropped a connection from %s %s (rank %d)",
            br_socket_addr_str(&c->from, text, sizeof(text)), why, boot->rank);
}

/* A whole hello is in: is it one of ours? 0 to keep the connection, -1 to drop it, 1 when
 * it was a state query, answered. */
static int hello_done(br_bootstrap_t *boot, br_boot_inconn_t *c)
{
    const br_boot_hello_t *h = &c->hello;
    char why[128];

    if (h->proto != BR_BOOT_PROTO || h->rank < 0 || h->rank >= boot->nranks ||
        h->rank == boot->rank ||
        (h->conn != BR_BOOT_CONN_MSG && h->conn != BR_BOOT_CONN_ABORT &&
         h->conn != BR_BOOT_CONN_QUERY)) {
        snprintf(why, sizeof(why),
                 "that had the secret but a bad hello (protocol %u, rank %d, kind %u)", h->proto,
                 h->rank, h->conn);
        drop_conn(boot, c, why);
        return -1;
    }
    if (h->conn == BR_BOOT_CONN_QUERY) {
        br_boot_query_serve(boot, c->fd, h->rank); /* answered: the connection is done */
        return 1;
    }
    if (h->conn == BR_BOOT_CONN_MSG) {
        pthread_mutex_lock(&boot->lock);
        boot->peers[h->rank].in_open = 1;
        boot->peers[h->rank].in_closed = 0;
        pthread_cond_broadcast(&boot->cond);
        pthread_mutex_unlock(&boot->lock);
    }
    c->state = IN_FRAME;
    c->got = 0;
    return 0;
}

/* A whole message is in: queue it, or record the abort it carries. */
static void msg_done(br_bootstrap_t *boot, br_boot_inconn_t *c)
{
    br_boot_msg_t *m = c->msg;
    int from = c->hello.rank;
    int first = 0;

    c->msg = NULL;
    c->state = IN_FRAME;
    c->got = 0;
    if (m->kind == BR_BOOT_MSG_RECOVER) {
        if (m->size == sizeof(br_boot_recover_t)) {
            pthread_mutex_lock(&boot->lock);
            if (boot->peers[from].recover == NULL) { /* the message's own memory keeps it */
                boot->peers[from].recover = (br_boot_recover_t *)(void *)m->data;
                boot->peers[from].recover_msg = m;
                m = NULL;
            } else {
                memcpy(boot->peers[from].recover, m->data, sizeof(br_boot_recover_t));
            }
            pthread_cond_broadcast(&boot->cond);
            pthread_mutex_unlock(&boot->lock);
        }
        free(m);
        return;
    }
    if (m->kind == BR_BOOT_MSG_LINK) {
        pthread_mutex_lock(&boot->link_lock);
        if (boot->link_fn != NULL) {
            boot->link_fn(boot->link_arg, from, m->data, m->size);
        }
        pthread_mutex_unlock(&boot->link_lock);
        free(m);
        return;
    }
    if (m->kind == BR_BOOT_MSG_WAIT) {
        if (m->size == sizeof(br_boot_wait_t)) {
            br_boot_wait_t *w = (br_boot_wait_t *)(void *)m->data;
            w->what[sizeof(w->what) - 1] = '\0';
            pthread_mutex_lock(&boot->lock);
            if (boot->peers[from].wait == NULL) { /* the message's own memory keeps it */
                boot->peers[from].wait = w;
                boot->peers[from].wait_msg = m;
                m = NULL;
            } else {
                memcpy(boot->peers[from].wait, w, sizeof(*w));
            }
            pthread_mutex_unlock(&boot->lock);
        }
        free(m);
        return;
    }
    if (m->kind != BR_BOOT_MSG_ABORT) {
        br_boot_queue_push(boot, from, m);
        return;
    }
    pthread_mutex_lock(&boot->lock);
    if (!atomic_load_explicit(&boot->aborted, memory_order_relaxed)) {
        size_t max = sizeof(boot->abort_reason) - 1;
        size_t n = m->size < max ? m->size : max;
        boot->abort_from = from;
        memcpy(boot->abort_reason, m->data, n);
        boot->abort_reason[n] = '\0';
        /* Release: a reader that sees the flag also sees abort_from and abort_reason. */
        atomic_store_explicit(&boot->aborted, 1, memory_order_release);
        pthread_cond_broadcast(&boot->cond);
        first = 1;
    }
    pthread_mutex_unlock(&boot->lock);
    if (first) {
        BR_INFO(NCCL_INIT | NCCL_BOOTSTRAP, "bootstrap: rank %d reported a failure: %s", from,
                boot->abort_reason);
    }
    free(m);
}

/* A whole frame header is in: check it and make room for the payload. */
static int frame_done(br_bootstrap_t *boot, br_boot_inconn_t *c)
{
    const br_boot_frame_t *f = &c->frame;
    char why[128];

    int notice = f->kind == BR_BOOT_MSG_ABORT || f->kind == BR_BOOT_MSG_WAIT ||
                 f->kind == BR_BOOT_MSG_RECOVER;
    int link = f->kind == BR_BOOT_MSG_LINK;
    if ((f->kind != BR_BOOT_MSG_USER && f->kind != BR_BOOT_MSG_RING && !notice && !link) ||
        f->size > BR_BOOT_MAX_MSG || (link && f->size > BR_BOOT_LINK_MAX) ||
        (c->hello.conn == BR_BOOT_CONN_ABORT && !notice)) {
        snprintf(why, sizeof(why), "from rank %d: corrupt message header (kind %u, %llu bytes)",
                 c->hello.rank, f->kind, (unsigned long long)f->size);
        drop_conn(boot, c, why);
        return -1;
    }
    c->msg = malloc(sizeof(*c->msg) + (size_t)f->size);
    if (c->msg == NULL) {
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP,
                "bootstrap: out of memory for a %llu-byte message from rank %d",
                (unsigned long long)f->size, c->hello.rank);
        return -1;
    }
    c->msg->kind = f->kind;
    c->msg->tag = f->tag;
    c->msg->size = (size_t)f->size;
    c->state = IN_PAYLOAD;
    c->got = 0;
    if (f->size == 0) {
        msg_done(boot, c);
    }
    return 0;
}

/* The connection closed or failed. */
static void conn_ended(br_bootstrap_t *boot, br_boot_inconn_t *c)
{
    if (c->state == IN_HELLO) {
        if (c->got < sizeof(c->hello.secret)) {
            drop_conn(boot, c, "that did not present the communicator's secret");
        } else {
            drop_conn(boot, c, "that closed in the middle of its hello");
        }
        return;
    }
    if (c->state != IN_FRAME || c->got != 0) {
        BR_INFO(NCCL_INIT | NCCL_BOOTSTRAP,
                "bootstrap: rank %d's connection closed in the middle of a message", c->hello.rank);
    }
    if (c->hello.conn == BR_BOOT_CONN_MSG) {
        pthread_mutex_lock(&boot->lock);
        boot->peers[c->hello.rank].in_closed = 1;
        pthread_cond_broadcast(&boot->cond);
        pthread_mutex_unlock(&boot->lock);
    }
}

/* Read what is ready on an accepted connection. Returns 1 when it is to be closed. */
static int conn_read(br_bootstrap_t *boot, br_boot_inconn_t *c)
{
    for (;;) {
        char *dst;
        size_t want, got = 0;

        if (c->state == IN_HELLO) {
            dst = (char *)&c->hello + c->got;
            want = sizeof(c->hello) - c->got;
        } else if (c->state == IN_FRAME) {
            dst = (char *)&c->frame + c->got;
            want = sizeof(c->frame) - c->got;
        } else {
            dst = c->msg->data + c->got;
            want = c->msg->size - c->got;
        }
        if (br_socket_recv_some(c->fd, dst, want, &got) != ncclSuccess) {
            conn_ended(boot, c);
            return 1;
        }
        if (got == 0) {
            return 0;
        }
        c->got += got;
        /* Check the secret as soon as it is in, before trusting anything else. */
        if (c->state == IN_HELLO && c->got >= sizeof(c->hello.secret) &&
            c->hello.secret != boot->secret) {
            drop_conn(boot, c, "that did not present the communicator's secret");
            return 1;
        }
        if (got < want) {
            continue;
        }
        /* The current part is complete: move on to the next. */
        if (c->state == IN_HELLO) {
            if (hello_done(boot, c) != 0) {
                return 1;
            }
        } else if (c->state == IN_FRAME) {
            if (frame_done(boot, c) != 0) {
                return 1;
            }
        } else {
            msg_done(boot, c);
        }
    }
}

/* Take every connection waiting on the listener. */
static int accept_all(br_bootstrap_t *boot)
{
    for (;;) {
        br_boot_inconn_t *c;
        br_socket_addr_t from;
        int fd = -1;

        if (br_socket_accept(boot->listen_fd, 0, &fd, &from) != ncclSuccess) {
            return 0;
        }
        if (boot->nin == boot->in_cap) {
            int cap = boot->in_cap ? 2 * boot->in_cap : 16;
            br_boot_inconn_t *in = realloc(boot->in, sizeof(*in) * (size_t)cap);
            if (in == NULL) {
                BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "bootstrap: out of memory for connections");
                br_socket_close(&fd);
                return -1;
            }
            boot->in = in;
            boot->in_cap = cap;
        }
        c = &boot->in[boot->nin++];
        memset(c, 0, sizeof(*c));
        c->fd = fd;
        c->from = from;
        c->state = IN_HELLO;
        c->deadline = br_time_ns() + boot->timeout_ns;
    }
}

static void conn_free(br_boot_inconn_t *c)
{
    br_socket_close(&c->fd);
    free(c->msg);
    c->msg = NULL;
}

/* Poll timeout: until the earliest hello deadline, at most a second. */
static int next_timeout_ms(const br_bootstrap_t *boot)
{
    uint64_t first = BR_SOCKET_NO_DEADLINE;

    for (int i = 0; i < boot->nin; i++) {
        if (boot->in[i].state == IN_HELLO && boot->in[i].deadline < first) {
            first = boot->in[i].deadline;
        }
    }
    return br_socket_poll_ms(first, 1000);
}

/* One pass: poll, read, accept, expire. Returns 1 to stop, -1 on failure. */
static int thread_step(br_bootstrap_t *boot, struct pollfd *pfd)
{
    int n = boot->nin, j = 0;
    uint64_t now;

    pfd[0] = (struct pollfd){.fd = boot->wake_fd[0], .events = POLLIN};
    pfd[1] = (struct pollfd){.fd = boot->listen_fd, .events = POLLIN};
    for (int i = 0; i < n; i++) {
        pfd[2 + i] = (struct pollfd){.fd = boot->in[i].fd, .events = POLLIN};
    }
    if (poll(pfd, (nfds_t)(n + 2), next_timeout_ms(boot)) < 0) {
        if (errno == EINTR) {
            return 0;
        }
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "bootstrap: poll failed: %s", strerror(errno));
        return -1;
    }
    if (pfd[0].revents != 0) {
        return 1; /* only close() writes to the pipe */
    }
    now = br_time_ns();
    for (int i = 0; i < n; i++) {
        br_boot_inconn_t *c = &boot->in[i];
        int done = pfd[2 + i].revents != 0 && conn_read(boot, c);
        if (!done && c->state == IN_HELLO && now >= c->deadline) {
            drop_conn(boot, c, "that did not present the communicator's secret in time");
            done = 1;
        }
        if (done) {
            conn_free(c);
        } else {
            boot->in[j++] = *c;
        }
    }
    boot->nin = j;
    if (pfd[1].revents != 0) {
        return accept_all(boot);
    }
    return 0;
}

static void *thread_main(void *arg)
{
    br_bootstrap_t *boot = arg;
    struct pollfd *pfd = NULL;
    size_t cap = 0;
    int ret = 0;
    char name[16];

    snprintf(name, sizeof(name), "braid-boot%u", (unsigned)boot->rank % 10000u);
    pthread_setname_np(pthread_self(), name);
    br_log_set_rank(boot->rank);
    while (ret == 0) {
        size_t need = 2 + (size_t)boot->nin;
        if (need > cap) {
            struct pollfd *p = realloc(pfd, 2 * need * sizeof(*p));
            if (p == NULL) {
                BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "bootstrap: out of memory");
                ret = -1;
                break;
            }
            pfd = p;
            cap = 2 * need;
        }
        ret = thread_step(boot, pfd);
    }
    free(pfd);
    for (int i = 0; i < boot->nin; i++) {
        conn_free(&boot->in[i]);
    }
    boot->nin = 0;
    if (ret < 0) {
        /* Nothing will arrive any more: make every waiter fail now rather than time out. */
        pthread_mutex_lock(&boot->lock);
        boot->thread_failed = 1;
        pthread_cond_broadcast(&boot->cond);
        pthread_mutex_unlock(&boot->lock);
    }
    return NULL;
}

ncclResult_t br_boot_thread_start(br_bootstrap_t *boot)
{
    int ret = pthread_create(&boot->thread, NULL, thread_main, boot);

    if (ret != 0) {
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "cannot start the bootstrap thread: %s", strerror(ret));
        return ncclSystemError;
    }
    boot->thread_started = 1;
    return ncclSuccess;
}

void br_boot_thread_stop(br_bootstrap_t *boot)
{
    char c = 1;

    if (!boot->thread_started) {
        return;
    }
    pthread_mutex_lock(&boot->lock);
    boot->stop = 1;
    pthread_mutex_unlock(&boot->lock);
    /* The pipe is non-blocking and nearly empty: this write cannot block or fail. */
    while (write(boot->wake_fd[1], &c, 1) < 0 && errno == EINTR) {
    }
    pthread_join(boot->thread, NULL);
    boot->thread_started = 0;
}

#define BR_BOOT_FATE_LEN 1024
#define BR_BOOT_FATE_WAIT_NS 1000000000ull

/* A peer refused the connection or closed it under a send: it closed its bootstrap, which
 * a rank does after it failed and told the others why. Wait up to a second for that notice
 * and say what it reported, so the failure names its first cause (a rank that died, say)
 * and not only the rank that went away because of it. */
static void refused_fate(br_bootstrap_t *boot, char *buf, size_t len)
{
    char reason[BR_BOOT_FATE_LEN - 64];
    int from = -1;

    if (br_bootstrap_await_abort(boot, BR_BOOT_FATE_WAIT_NS, &from, reason, sizeof(reason))) {
        snprintf(buf, len, "; rank %d reported: %s", from, reason);
    }
}

/* A connect or send failed because the peer's end is gone: refused, or reset or closed
 * under us (a connection the kernel accepted on a listener then closed is reset). */
static int peer_went_away(int err)
{
    return err == ECONNREFUSED || err == ECONNRESET || err == ECONNABORTED || err == EPIPE;
}

/* Open the persistent connection to a peer and say hello. Called with its out_lock. */
static ncclResult_t connect_locked(br_bootstrap_t *boot, int peer, uint64_t deadline_ns,
                                   int quiet)
{
    br_boot_rank_t *p = &boot->peers[peer];
    br_boot_hello_t hello;
    char who[160], text[BR_SOCKET_ADDR_STRLEN];
    ncclResult_t res;
    int fd = -1;

    if (!br_socket_addr_is_valid(&p->info.addr)) {
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP,
                "bootstrap: rank %d does not know rank %d's address "
                "yet (message before init finished?)",
                boot->rank, peer);
        return ncclInternalError;
    }
    memset(&hello, 0, sizeof(hello));
    hello.secret = boot->secret;
    hello.proto = BR_BOOT_PROTO;
    hello.rank = boot->rank;
    hello.conn = BR_BOOT_CONN_MSG;
    /* Every listener is up before its rank checks in with the root, and stays up until the
     * bootstrap closes: a refusal (or a reset of the hello) means the peer is gone, so there
     * is nothing to wait for. */
    res = br_socket_connect_once(&p->info.addr, deadline_ns, &fd);
    if (res == ncclSuccess) {
        res = br_socket_send_all(fd, &hello, sizeof(hello), deadline_ns);
    }
    if (res != ncclSuccess) {
        int err = errno;
        char fate[BR_BOOT_FATE_LEN] = "";
        if (!quiet && peer_went_away(err)) {
            refused_fate(boot, fate, sizeof(fate));
        }
        BR_WARN_UNLESS(quiet, NCCL_INIT | NCCL_BOOTSTRAP,
                       "bootstrap: rank %d cannot connect to %s at %s: %s%s", boot->rank,
                       br_boot_rank_str(boot, peer, who, sizeof(who)),
                       br_socket_addr_str(&p->info.addr, text, sizeof(text)), strerror(err),
                       fate);
        br_socket_close(&fd);
        return res;
    }
    p->out_fd = fd;
    return ncclSuccess;
}

ncclResult_t br_boot_connect_peer(br_bootstrap_t *boot, int peer, uint64_t deadline_ns)
{
    br_boot_rank_t *p = &boot->peers[peer];
    ncclResult_t res = ncclSuccess;

    pthread_mutex_lock(&p->out_lock);
    if (p->out_fd < 0) {
        res = connect_locked(boot, peer, deadline_ns, 0);
    }
    pthread_mutex_unlock(&p->out_lock);
    return res;
}

/* Send one message within deadline; quiet: the caller handles a failure (no WARN, no
 * wait for the peer's report); brief: a small message that may be lost goes only if the
 * connection takes it whole at once (closing a connection on a timeout mid-stream would
 * look to the peer like this rank leaving). */
static ncclResult_t send_msg(br_bootstrap_t *boot, int peer, uint32_t kind, int tag,
                             const void *data, size_t size, uint64_t deadline, int quiet,
                             int brief)
{
    br_boot_rank_t *p = &boot->peers[peer];
    br_boot_frame_t f = {.kind = kind, .tag = tag, .size = size};
    char buf[sizeof(f) + SEND_COALESCE];
    char who[160];
    ncclResult_t res;

    if (size > BR_BOOT_MAX_MSG) {
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP,
                "bootstrap: a %zu-byte message is over the %llu-byte limit of out-of-band messages",
                size, (unsigned long long)BR_BOOT_MAX_MSG);
        return ncclInvalidArgument;
    }
    if (peer == boot->rank) {
        /* To ourselves: straight into our own queue. */
        br_boot_msg_t *m = malloc(sizeof(*m) + size);
        if (m == NULL) {
            BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "bootstrap: out of memory for a %zu-byte message",
                    size);
            return ncclSystemError;
        }
        m->kind = kind;
        m->tag = tag;
        m->size = size;
        if (size > 0) {
            memcpy(m->data, data, size);
        }
        br_boot_queue_push(boot, peer, m);
        return ncclSuccess;
    }
    pthread_mutex_lock(&p->out_lock);
    res = p->out_fd < 0 ? connect_locked(boot, peer, deadline, quiet) : ncclSuccess;
    if (res != ncclSuccess) {
        goto out;
    }
    /* Small messages leave in one segment together with their header. */
    if (size <= SEND_COALESCE) {
        memcpy(buf, &f, sizeof(f));
        if (size > 0) {
            memcpy(buf + sizeof(f), data, size);
        }
        size_t off = 0, len = sizeof(f) + size;
        if (brief) {
            ssize_t n = br_socket_send_nb(p->out_fd, buf, len);
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
                res = ncclSystemError; /* nothing written: the peer is not reading */
                goto out;
            }
            res = n < 0 ? ncclSystemError : ncclSuccess; /* a broken connection: closed below */
            off = n < 0 ? 0 : (size_t)n;
        }
        if (res == ncclSuccess && off < len) {
            res = br_socket_send_all(p->out_fd, buf + off, len - off, deadline);
        }
    } else {
        res = br_socket_send_all(p->out_fd, &f, sizeof(f), deadline);
        if (res == ncclSuccess) {
            res = br_socket_send_all(p->out_fd, data, size, deadline);
        }
    }
    if (res != ncclSuccess) {
        int err = errno;
        char fate[BR_BOOT_FATE_LEN] = "";
        if (!quiet && peer_went_away(err)) {
            refused_fate(boot, fate, sizeof(fate));
        }
        BR_WARN_UNLESS(quiet, NCCL_INIT | NCCL_BOOTSTRAP,
                       "bootstrap: rank %d could not send %zu bytes (tag %d) to %s: %s%s",
                       boot->rank, size, tag, br_boot_rank_str(boot, peer, who, sizeof(who)),
                       strerror(err), fate);
        /* The stream is now out of step: the next send starts a fresh connection. */
        br_socket_close(&p->out_fd);
    }
out:
    pthread_mutex_unlock(&p->out_lock);
    return res;
}

ncclResult_t br_boot_send_msg(br_bootstrap_t *boot, int peer, uint32_t kind, int tag,
                              const void *data, size_t size)
{
    /* A link message's sender handles its failure (the peer may have left normally). */
    return send_msg(boot, peer, kind, tag, data, size, br_time_ns() + boot->timeout_ns,
                    kind == BR_BOOT_MSG_LINK, 0);
}

ncclResult_t br_bootstrap_send_brief(br_bootstrap_t *boot, int peer, int tag, const void *data,
                                     size_t size, uint64_t budget_ns)
{
    if (peer < 0 || peer >= boot->nranks) {
        return ncclInternalError;
    }
    if (size > SEND_COALESCE) {
        return ncclInternalError; /* brief messages are small */
    }
    return send_msg(boot, peer, BR_BOOT_MSG_USER, tag, data, size, br_time_ns() + budget_ns, 1,
                    1);
}

void br_boot_deadline_to_ts(uint64_t deadline_ns, struct timespec *ts)
{
    ts->tv_sec = (time_t)(deadline_ns / 1000000000ull);
    ts->tv_nsec = (long)(deadline_ns % 1000000000ull);
}

ncclResult_t br_boot_wait_blocked(br_bootstrap_t *boot, int peer, char *why, size_t len)
{
    if (atomic_load_explicit(&boot->aborted, memory_order_relaxed)) {
        snprintf(why, len, "rank %d reported a failure: %s", boot->abort_from, boot->abort_reason);
        return ncclRemoteError;
    }
    if (boot->cancelled) {
        snprintf(why, len, "%s", boot->cancel_reason);
        return ncclInvalidUsage;
    }
    if (boot->peers[peer].in_closed) {
        snprintf(why, len,
                 "it closed its connection (its process exited or it closed the communicator)");
        return ncclRemoteError;
    }
    if (boot->stop || boot->thread_failed) {
        snprintf(why, len, "the bootstrap's receive thread stopped");
        return ncclInternalError;
    }
    return ncclSuccess;
}

void br_bootstrap_cancel(br_bootstrap_t *boot, const char *reason)
{
    if (boot == NULL) {
        return;
    }
    pthread_mutex_lock(&boot->lock);
    if (!boot->cancelled) {
        boot->cancelled = 1;
        snprintf(boot->cancel_reason, sizeof(boot->cancel_reason), "%s", reason);
    }
    pthread_cond_broadcast(&boot->cond);
    pthread_mutex_unlock(&boot->lock);
    br_boot_hier_kick(boot);
}

int br_bootstrap_cancelled(br_bootstrap_t *boot, char *reason, size_t len)
{
    int c;
    pthread_mutex_lock(&boot->lock);
    c = boot->cancelled;
    if (c) {
        snprintf(reason, len, "%s", boot->cancel_reason);
    }
    pthread_mutex_unlock(&boot->lock);
    return c;
}

/* Is the peer's process known to be gone? Asked only where its pid means it here (the
 * same machine and pid namespace, from the peer table: before it, nobody's pid is known).
 * A peer that never connected to this rank closes nothing here when it dies. */
static int peer_gone(const br_bootstrap_t *boot, int peer)
{
    const br_boot_peer_t *p = &boot->peers[peer].info, *me = &boot->peers[boot->rank].info;
    return p->pid > 0 && me->pid > 0 && p->pid_key == me->pid_key && br_proc_gone(p->pid);
}

/* A waiter looks at the peer's process after a slice without news; slices grow from the
 * first to the last, so a long wait costs a wake-up a second. A peer found gone is given
 * LIVE_GRACE_NS more: what it sent before it exited may still wait in this rank's listen
 * queue for the receive thread. */
#define LIVE_SLICE_MIN_NS (50ull * 1000000ull)
#define LIVE_SLICE_MAX_NS (1000ull * 1000000ull)
#define LIVE_GRACE_NS (1000ull * 1000000ull)

/* What a waiter calls between slices without news (br_bootstrap_recv_watch). */
typedef struct {
    ncclResult_t (*fn)(void *arg);
    void *arg;
} boot_watch_t;

/* Wait for the oldest message of (kind, tag) from peer and unlink it; NULL (logged, unless
 * the watch ended the wait: it logged its own reason) when the wait ends without one. */
static br_boot_msg_t *take_msg(br_bootstrap_t *boot, int peer, uint32_t kind, int tag,
                               uint64_t deadline_ns, const boot_watch_t *watch,
                               ncclResult_t *res_p)
{
    br_boot_rank_t *p = &boot->peers[peer];
    br_boot_msg_t *m = NULL;
    ncclResult_t res = ncclSuccess;
    struct timespec ts;
    uint64_t slice = LIVE_SLICE_MIN_NS, gone_since = 0;
    char why[BR_BOOT_REASON_LEN + 64], who[160];
    int watched = 0;

    pthread_mutex_lock(&boot->lock);
    while ((m = br_boot_queue_take(boot, p, kind, tag)) == NULL) {
        res = br_boot_wait_blocked(boot, peer, why, sizeof(why));
        if (res != ncclSuccess) {
            break;
        }
        uint64_t now = br_time_ns();
        if (now >= deadline_ns) {
            snprintf(why, sizeof(why), "nothing came within %d s", br_boot_timeout_s());
            res = ncclSystemError;
            break;
        }
        br_boot_deadline_to_ts(deadline_ns - now < slice ? deadline_ns : now + slice, &ts);
        if (pthread_cond_timedwait(&boot->cond, &boot->lock, &ts) != ETIMEDOUT) {
            continue;
        }
        slice = slice * 2 < LIVE_SLICE_MAX_NS ? slice * 2 : LIVE_SLICE_MAX_NS;
        pthread_mutex_unlock(&boot->lock);
        int gone = peer_gone(boot, peer);
        res = watch != NULL ? watch->fn(watch->arg) : ncclSuccess;
        pthread_mutex_lock(&boot->lock);
        if (res != ncclSuccess) {
            watched = 1;
            break;
        }
        /* A connection it opened ends with its EOF, after everything it sent (the check
         * at the loop's top): only one that never opened needs the grace. */
        if (!gone || (p->in_open && !p->in_closed)) {
            continue;
        }
        gone_since = gone_since == 0 ? now : gone_since;
        slice = LIVE_SLICE_MIN_NS;
        if (br_time_ns() - gone_since >= LIVE_GRACE_NS) {
            snprintf(why, sizeof(why), "its process is gone");
            res = ncclRemoteError;
            break;
        }
    }
    pthread_mutex_unlock(&boot->lock);
    if (m == NULL && !watched) {
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP,
                "bootstrap: rank %d gave up waiting for a %s message (tag %d) from %s: %s",
                boot->rank, kind == BR_BOOT_MSG_RING ? "collective" : "point-to-point", tag,
                br_boot_rank_str(boot, peer, who, sizeof(who)), why);
    }
    *res_p = res;
    return m;
}

static ncclResult_t recv_msg(br_bootstrap_t *boot, int peer, uint32_t kind, int tag, void *data,
                             size_t size, uint64_t deadline_ns, const boot_watch_t *watch)
{
    ncclResult_t res = ncclSuccess;
    br_boot_msg_t *m = take_msg(boot, peer, kind, tag, deadline_ns, watch, &res);
    char who[160];

    if (m == NULL) {
        return res;
    }
    if (m->size != size) {
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP,
                "bootstrap: rank %d expected %zu bytes from %s "
                "(tag %d) but the message has %zu: do the ranks run the same code?",
                boot->rank, size, br_boot_rank_str(boot, peer, who, sizeof(who)), tag, m->size);
        free(m);
        return ncclInternalError;
    }
    if (size > 0) {
        memcpy(data, m->data, size);
    }
    free(m);
    return ncclSuccess;
}

ncclResult_t br_boot_recv_msg(br_bootstrap_t *boot, int peer, uint32_t kind, int tag, void *data,
                              size_t size, uint64_t deadline_ns)
{
    return recv_msg(boot, peer, kind, tag, data, size, deadline_ns, NULL);
}

ncclResult_t br_boot_recv_msg_any(br_bootstrap_t *boot, int peer, uint32_t kind, int tag,
                                  br_boot_msg_t **msg_p, uint64_t deadline_ns)
{
    ncclResult_t res = ncclSuccess;
    *msg_p = take_msg(boot, peer, kind, tag, deadline_ns, NULL, &res);
    return res;
}

ncclResult_t br_boot_wait_hello(br_bootstrap_t *boot, int peer, uint64_t deadline_ns)
{
    ncclResult_t res = ncclSuccess;
    struct timespec ts;
    char who[160];

    br_boot_deadline_to_ts(deadline_ns, &ts);
    pthread_mutex_lock(&boot->lock);
    while (!boot->peers[peer].in_open && !boot->stop && !boot->thread_failed && !boot->cancelled) {
        if (pthread_cond_timedwait(&boot->cond, &boot->lock, &ts) == ETIMEDOUT &&
            br_time_ns() >= deadline_ns) {
            res = ncclSystemError;
            break;
        }
    }
    if (!boot->peers[peer].in_open && res == ncclSuccess) {
        res = ncclInternalError;
    }
    pthread_mutex_unlock(&boot->lock);
    if (res != ncclSuccess) {
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP,
                "bootstrap: rank %d: ring neighbour %s did not connect within %d s", boot->rank,
                br_boot_rank_str(boot, peer, who, sizeof(who)), br_boot_timeout_s());
    }
    return res;
}

ncclResult_t br_bootstrap_send(br_bootstrap_t *boot, int peer, int tag, const void *data,
                               size_t size)
{
    if (peer < 0 || peer >= boot->nranks) {
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "bootstrap: send to rank %d of %d", peer, boot->nranks);
        return ncclInternalError;
    }
    return br_boot_send_msg(boot, peer, BR_BOOT_MSG_USER, tag, data, size);
}

ncclResult_t br_bootstrap_recv(br_bootstrap_t *boot, int peer, int tag, void *data, size_t size)
{
    return br_bootstrap_recv_watch(boot, peer, tag, data, size, NULL, NULL);
}

ncclResult_t br_bootstrap_recv_watch(br_bootstrap_t *boot, int peer, int tag, void *data,
                                     size_t size, ncclResult_t (*watch)(void *arg), void *arg)
{
    boot_watch_t w = {watch, arg};
    if (peer < 0 || peer >= boot->nranks) {
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "bootstrap: recv from rank %d of %d", peer,
                boot->nranks);
        return ncclInternalError;
    }
    return recv_msg(boot, peer, BR_BOOT_MSG_USER, tag, data, size,
                    br_time_ns() + boot->timeout_ns, watch != NULL ? &w : NULL);
}

void br_bootstrap_set_link_fn(br_bootstrap_t *boot, br_bootstrap_link_fn_t fn, void *arg)
{
    pthread_mutex_lock(&boot->link_lock);
    boot->link_fn = fn;
    boot->link_arg = arg;
    pthread_mutex_unlock(&boot->link_lock);
}

ncclResult_t br_bootstrap_send_link(br_bootstrap_t *boot, int peer, const void *data,
                                    size_t size)
{
    if (peer < 0 || peer >= boot->nranks || peer == boot->rank || size > BR_BOOT_LINK_MAX) {
        BR_WARN(NCCL_INIT | NCCL_BOOTSTRAP, "bootstrap: bad link message (%zu bytes to rank %d)",
                size, peer);
        return ncclInternalError;
    }
    return br_boot_send_msg(boot, peer, BR_BOOT_MSG_LINK, 0, data, size);
}

void br_bootstrap_listen_ip(br_bootstrap_t *boot, br_socket_addr_t *addr_p)
{
    *addr_p = boot->listen_addr;
    if (addr_p->sa.sa_family == AF_INET6) {
        addr_p->sin6.sin6_port = 0;
    } else {
        addr_p->sin.sin_port = 0;
    }
}

int br_bootstrap_peer_gone(br_bootstrap_t *boot, int peer)
{
    int gone;
    pthread_mutex_lock(&boot->lock);
    gone = boot->peers[peer].in_closed;
    pthread_mutex_unlock(&boot->lock);
    return gone;
}
