/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Connection setup of the socket plugin. listen binds an ephemeral port on the device's
 * address and writes a handle (address, a random 64-bit secret, transport settings).
 * connect opens 1 + nsocks non-blocking sockets to it and sends a hello with the secret
 * and a per-connection nonce on each; accept groups incoming sockets by nonce, drops
 * (and logs) any socket whose hello is wrong, and acknowledges a complete group on its
 * control socket. Neither side ever blocks: each call moves the handshake as far as it
 * can and returns a NULL comm until it is done.
 *
 * A connect in progress is found again by the address of the caller's handle buffer
 * (which the caller keeps while retrying) plus the secret, in a mutex-guarded list, so
 * no pointer is ever read back out of handle bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "netsock.h"
#include "param_lite.h"
#include "plugin_log.h"

#include "check.h"

#define BR_LITE_PARAM BR_LITE_PARAM_DEFINE
#include "netsock_params.def"
#undef BR_LITE_PARAM
/* The defaults again, for values outside the accepted range. */
#define BR_LITE_PARAM(getter, key, def, doc) static const int64_t getter##_default = (def);
#include "netsock_params.def"
#undef BR_LITE_PARAM

#define LISTEN_MAGIC 0x4c53424eu /* "NBSL" */
#define MAX_PENDING 4096         /* sockets accepted but not yet identified */
#define MIN_CHUNK_FLOOR 4096

/* A connecting socket: TCP connect, TLS handshake (ncclSetEncryption), hello, done. */
enum { ST_CONNECTING, ST_TLS, ST_HELLO, ST_READY };

/* A socket accepted by a listener whose hello is not complete yet. */
typedef struct {
    int fd;
    int tls; /* its TLS handshake is under way */
    size_t off;
    netsock_hello_t hello;
    char peer[NETSOCK_ADDR_STRLEN];
} pending_t;

/* The sockets of one connecting peer, collected by nonce. */
typedef struct {
    uint64_t nonce;
    int count;
    size_t ack_off;
    int fds[NETSOCK_MAX_SOCKS + 1];
    char peer[NETSOCK_ADDR_STRLEN];
} group_t;

typedef struct {
    uint32_t magic;
    int fd;
    netsock_handle_t h;
    char addr[NETSOCK_ADDR_STRLEN];
    pending_t *pend;
    int npend, cap_pend;
    group_t *groups;
    int ngroups, cap_groups;
} listen_comm_t;

/* A connect in progress. */
typedef struct connector {
    struct connector *next;
    const void *handle; /* the caller's buffer, our lookup key with the secret */
    netsock_handle_t h;
    uint64_t nonce;
    int nfds;
    int fds[NETSOCK_MAX_SOCKS + 1];
    int stage[NETSOCK_MAX_SOCKS + 1];
    size_t hello_off[NETSOCK_MAX_SOCKS + 1];
    netsock_ack_t ack;
    size_t ack_off;
    char peer[NETSOCK_ADDR_STRLEN];
} connector_t;

static pthread_mutex_t connector_lock = PTHREAD_MUTEX_INITIALIZER;
static connector_t *connectors;

/* Transport settings, from the environment once per process. */
static pthread_once_t settings_once = PTHREAD_ONCE_INIT;
static int set_nthreads, set_nsocks;
static int64_t set_min_chunk, set_inline_max, set_bufsize, set_user_timeout, set_keepalive;

static int64_t clamp_param(const char *key, int64_t v, int64_t lo, int64_t hi, int64_t def)
{
    if (v < lo || v > hi) {
        BR_WARN(NCCL_NET | NCCL_ENV, "%s %lld is outside [%lld, %lld]; using %lld", key,
                (long long)v, (long long)lo, (long long)hi, (long long)def);
        return def;
    }
    return v;
}

static void settings_load(void)
{
    int64_t nt = netsock_param_nthreads(), ns = netsock_param_nsocks_perthread();

    /* NCCL uses -2 for "pick automatically": that is our default. */
    nt = nt == -2 ? netsock_param_nthreads_default : nt;
    ns = ns == -2 ? netsock_param_nsocks_perthread_default : ns;
    if (nt > NETSOCK_MAX_THREADS) {
        /* As NCCL: too many threads means the most allowed. */
        BR_WARN(NCCL_NET | NCCL_ENV, "NCCL_SOCKET_NTHREADS %lld is above the maximum; using %d",
                (long long)nt, NETSOCK_MAX_THREADS);
        nt = NETSOCK_MAX_THREADS;
    }
    nt = clamp_param("NCCL_SOCKET_NTHREADS", nt, 0, NETSOCK_MAX_THREADS,
                     netsock_param_nthreads_default);
    ns = clamp_param("NCCL_NSOCKS_PERTHREAD", ns, 0, NETSOCK_MAX_SOCKS,
                     netsock_param_nsocks_perthread_default);
    if (nt * ns > NETSOCK_MAX_SOCKS) {
        BR_WARN(NCCL_NET | NCCL_ENV,
                "NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD (%lld x %lld) "
                "exceeds %d sockets; using %lld sockets per thread",
                (long long)nt, (long long)ns, NETSOCK_MAX_SOCKS,
                (long long)(NETSOCK_MAX_SOCKS / nt));
        ns = NETSOCK_MAX_SOCKS / nt;
    }
    set_nsocks = (int)(nt * ns);
    set_nthreads = set_nsocks > 0 ? (int)nt : 0;
    set_min_chunk = clamp_param("BRAID_SOCKET_MIN_CHUNK", netsock_param_min_chunk(),
                                MIN_CHUNK_FLOOR, 1LL << 30, netsock_param_min_chunk_default);
    set_inline_max = clamp_param("BRAID_SOCKET_INLINE_BYTES", netsock_param_inline_max(), 0,
                                 1LL << 30, netsock_param_inline_max_default);
    set_bufsize = clamp_param("BRAID_SOCKET_BUFSIZE", netsock_param_bufsize(), 0, 1LL << 30,
                              netsock_param_bufsize_default);
    set_user_timeout = clamp_param("BRAID_SOCKET_USER_TIMEOUT", netsock_param_user_timeout(), 0,
                                   INT_MAX, netsock_param_user_timeout_default);
    set_keepalive = clamp_param("BRAID_SOCKET_KEEPALIVE", netsock_param_keepalive(), 0, 86400,
                                netsock_param_keepalive_default);
    BR_INFO(NCCL_NET | NCCL_INIT,
            "socket plugin: %d helper threads, %d data sockets per "
            "connection, chunks of at least %lld bytes, inline up to %lld bytes, "
            "TCP user timeout %lld ms, keepalive %lld s",
            set_nthreads, set_nsocks, (long long)set_min_chunk, (long long)set_inline_max,
            (long long)set_user_timeout, (long long)set_keepalive);
}

static uint64_t random64(void)
{
    uint64_t v = 0;
    static atomic_uint_fast64_t fallback;

    if (getrandom(&v, sizeof(v), 0) == (ssize_t)sizeof(v)) {
        return v;
    }
    /* No entropy source: still unique per call, though guessable. */
    BR_WARN(NCCL_NET, "getrandom failed: %s; the connection secret is weak", strerror(errno));
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    v = ((uint64_t)ts.tv_nsec << 32) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 16);
    return v ^ atomic_fetch_add(&fallback, 0x9e3779b97f4a7c15ULL);
}

ncclResult_t netsock_socket_setup(int fd)
{
    ncclResult_t res = ncclSuccess;
    int one = 1;
    int buf = (int)set_bufsize;
    unsigned int user_timeout = (unsigned int)set_user_timeout;

    /* Latency: never hold back a small segment waiting for an ACK. */
    BR_SYS_GOTO(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)), res, out);
    if (user_timeout > 0) {
        /* A link that stops acknowledging (an interface down, a cable pulled) fails the
         * connection after this long instead of after ~15 minutes of retransmissions, so
         * the core hears of it in time to do something. It also bounds a connect's SYN
         * retries. Set before connect/listen: accepted sockets inherit it. */
        BR_SYS_GOTO(
            setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof(user_timeout)), res,
            out);
    }
    if (set_keepalive > 0) {
        /* A receiver that waits for data sends nothing, so no retransmission ever tells it
         * that the link or the peer's host died: it would wait forever. Keepalive probes on
         * a connection idle for half the time, one every tenth (at least a second), fail it
         * after about BRAID_SOCKET_KEEPALIVE seconds without an answer; the peer's kernel
         * answers them however late the peer process itself is. */
        int idle = set_keepalive / 2 > 0 ? (int)(set_keepalive / 2) : 1;
        int intvl = set_keepalive / 10 > 0 ? (int)(set_keepalive / 10) : 1;
        int cnt = ((int)set_keepalive - idle) / intvl > 0 ? ((int)set_keepalive - idle) / intvl : 1;
        BR_SYS_GOTO(setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)), res, out);
        BR_SYS_GOTO(setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)), res, out);
        BR_SYS_GOTO(setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl)), res, out);
        BR_SYS_GOTO(setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt)), res, out);
    }
    if (buf > 0) {
        /* A fixed size turns kernel autotuning off, so only when asked for. */
        BR_SYS_GOTO(setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf)), res, out);
        BR_SYS_GOTO(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf)), res, out);
    }
out:
    return res;
}

ncclResult_t netsock_listen(int dev, void *handle, void **listen_comm)
{
    const netsock_dev_t *d = netsock_dev_get(dev);
    listen_comm_t *lc = NULL;
    ncclResult_t res = ncclSuccess;
    socklen_t len;

    pthread_once(&settings_once, settings_load);
    if (d == NULL || handle == NULL || listen_comm == NULL) {
        BR_WARN(NCCL_NET, "listen on device %d of %d (handle %p)", dev, netsock_dev_count(),
                handle);
        return ncclInternalError;
    }
    lc = calloc(1, sizeof(*lc));
    if (lc == NULL) {
        BR_WARN(NCCL_NET, "out of memory for a listen comm");
        return ncclSystemError;
    }
    lc->magic = LISTEN_MAGIC;
    lc->h.magic = NETSOCK_HANDLE_MAGIC;
    lc->h.version = NETSOCK_WIRE_VERSION;
    lc->h.nsocks = (uint16_t)set_nsocks;
    lc->h.nthreads = (uint16_t)set_nthreads;
    lc->h.min_chunk = (uint32_t)set_min_chunk;
    lc->h.inline_max = (uint64_t)set_inline_max;
    lc->h.secret = random64();
    lc->h.addr = d->addr;
    BR_SYS_GOTO(lc->fd =
                    socket(d->addr.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0),
                res, err_free);
    /* Accepted sockets inherit the options; a receive buffer must be set before the
     * handshake for the window scale to match it. */
    BR_CHECK_GOTO(netsock_socket_setup(lc->fd), res, err_close);
    BR_SYS_GOTO(bind(lc->fd, &d->addr.sa, netsock_addr_len(&d->addr)), res, err_close);
    BR_SYS_GOTO(listen(lc->fd, SOMAXCONN), res, err_close);
    len = sizeof(lc->h.addr);
    BR_SYS_GOTO(getsockname(lc->fd, &lc->h.addr.sa, &len), res, err_close);
    netsock_addr_str(&lc->h.addr.sa, lc->addr, sizeof(lc->addr));
    memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
    memcpy(handle, &lc->h, sizeof(lc->h));
    BR_INFO(NCCL_NET, "listening on %s (%s)", lc->addr, d->name);
    *listen_comm = lc;
    return ncclSuccess;

err_close:
    netsock_fd_close(lc->fd);
err_free:
    free(lc);
    return res;
}

/* Validate a handle from the peer; the bytes may be anything. */
static ncclResult_t handle_check(const void *handle, netsock_handle_t *h)
{
    memcpy(h, handle, sizeof(*h));
    if (h->magic != NETSOCK_HANDLE_MAGIC || h->version != NETSOCK_WIRE_VERSION ||
        h->nsocks > NETSOCK_MAX_SOCKS || h->nthreads > NETSOCK_MAX_THREADS ||
        (h->nsocks > 0 && (h->nthreads == 0 || h->nthreads > h->nsocks)) ||
        h->min_chunk < MIN_CHUNK_FLOOR ||
        (h->addr.sa.sa_family != AF_INET && h->addr.sa.sa_family != AF_INET6)) {
        BR_WARN(NCCL_NET,
                "connect: the handle was not written by a socket plugin listen "
                "(magic 0x%x, version %u, %u sockets, %u threads): refusing it",
                h->magic, h->version, h->nsocks, h->nthreads);
        return ncclInternalError;
    }
    return ncclSuccess;
}

static void connector_free(connector_t *c)
{
    for (int i = 0; i < c->nfds; i++) {
        if (c->fds[i] >= 0) {
            netsock_fd_close(c->fds[i]);
        }
    }
    free(c);
}

/* A connect the caller gave up on (its peer failed before accepting: the net ABI has no
 * call to cancel one) stays in the list until this module is unloaded; then nobody can
 * retry it, so its sockets are closed and it is freed. */
__attribute__((destructor)) static void connectors_drop(void)
{
    pthread_mutex_lock(&connector_lock);
    while (connectors != NULL) {
        connector_t *c = connectors;
        connectors = c->next;
        connector_free(c);
    }
    pthread_mutex_unlock(&connector_lock);
}

static const char *const tls_hint =
    "TLS is on here (ncclSetEncryption): the peer has it off, or another key or certificate "
    "authority";

/* Socket i's TCP connect is done: next its TLS handshake, when TLS is on, else its hello. */
static ncclResult_t connector_connected(connector_t *c, int i)
{
    char why[320];
    c->stage[i] = ST_HELLO;
    if (br_tls_mode() == BR_TLS_OFF) {
        return ncclSuccess;
    }
    if (br_tls_begin(c->fds[i], 0, why, sizeof(why)) != 0) {
        BR_WARN(NCCL_NET, "connection to %s refused: %s (%s)", c->peer, why, tls_hint);
        return ncclRemoteError;
    }
    c->stage[i] = ST_TLS;
    return ncclSuccess;
}

static ncclResult_t connector_new(const void *handle, const netsock_handle_t *h, connector_t **c_p)
{
    connector_t *c = calloc(1, sizeof(*c));
    ncclResult_t res = ncclSuccess;

    if (c == NULL) {
        BR_WARN(NCCL_NET, "out of memory for a connection");
        return ncclSystemError;
    }
    c->handle = handle;
    c->h = *h;
    c->nonce = random64();
    netsock_addr_str(&h->addr.sa, c->peer, sizeof(c->peer));
    for (c->nfds = 0; c->nfds < h->nsocks + 1; c->nfds++) {
        int fd, i = c->nfds;
        c->fds[i] = -1;
        BR_SYS_GOTO(fd =
                        socket(h->addr.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0),
                    res, err_free);
        c->fds[i] = fd;
        BR_CHECK_GOTO(netsock_socket_setup(fd), res, err_free);
        if (connect(fd, &h->addr.sa, netsock_addr_len(&h->addr)) == 0) {
            BR_CHECK_GOTO(connector_connected(c, i), res, err_free);
        } else if (errno == EINPROGRESS || errno == EINTR) {
            c->stage[i] = ST_CONNECTING;
        } else {
            BR_WARN(NCCL_NET, "connect to %s failed: %s", c->peer, strerror(errno));
            res = ncclRemoteError;
            goto err_free;
        }
    }
    *c_p = c;
    return ncclSuccess;
err_free:
    c->nfds++; /* include the socket that failed */
    connector_free(c);
    return res;
}

/* Wait (without blocking) for the TCP connects to finish. */
static ncclResult_t connector_poll_connects(connector_t *c)
{
    struct pollfd pfd[NETSOCK_MAX_SOCKS + 1];
    int idx[NETSOCK_MAX_SOCKS + 1];
    int n = 0, err = 0;
    socklen_t len = sizeof(err);

    for (int i = 0; i < c->nfds; i++) {
        if (c->stage[i] == ST_CONNECTING) {
            pfd[n].fd = c->fds[i];
            pfd[n].events = POLLOUT;
            idx[n++] = i;
        }
    }
    if (n == 0 || poll(pfd, (nfds_t)n, 0) <= 0) {
        return ncclSuccess;
    }
    for (int k = 0; k < n; k++) {
        if (pfd[k].revents == 0) {
            continue;
        }
        if (getsockopt(pfd[k].fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
            BR_WARN(NCCL_NET, "connect to %s failed: %s", c->peer, strerror(err ? err : errno));
            return ncclRemoteError;
        }
        BR_CHECK(connector_connected(c, idx[k]));
    }
    return ncclSuccess;
}

/* Move the handshake; *ready_p = 1 once the listener acknowledged it. */
static ncclResult_t connector_progress(connector_t *c, int *ready_p)
{
    int ready = 0;
    ssize_t n;

    BR_CHECK(connector_poll_connects(c));
    for (int i = 0; i < c->nfds; i++) {
        netsock_hello_t hello = {.magic = NETSOCK_HELLO_MAGIC,
                                 .version = NETSOCK_WIRE_VERSION,
                                 .index = (uint16_t)i,
                                 .nsocks = c->h.nsocks,
                                 .secret = c->h.secret,
                                 .nonce = c->nonce};
        if (c->stage[i] == ST_TLS) {
            char why[320];
            short events;
            int r = br_tls_step(c->fds[i], &events, why, sizeof(why));
            if (r < 0) {
                BR_WARN(NCCL_NET, "connection to %s refused: %s (%s)", c->peer, why, tls_hint);
                return ncclRemoteError;
            }
            c->stage[i] = r > 0 ? ST_HELLO : ST_TLS;
        }
        while (c->stage[i] == ST_HELLO) {
            n = br_tls_send(c->fds[i], (char *)&hello + c->hello_off[i],
                            sizeof(hello) - c->hello_off[i]);
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                break;
            }
            if (n < 0 && errno != EINTR) {
                BR_WARN(NCCL_NET, "sending the handshake to %s failed: %s", c->peer,
                        strerror(errno));
                return ncclRemoteError;
            }
            c->hello_off[i] += n > 0 ? (size_t)n : 0;
            if (c->hello_off[i] == sizeof(hello)) {
                c->stage[i] = ST_READY;
            }
        }
        ready += c->stage[i] == ST_READY;
    }
    while (ready == c->nfds && c->ack_off < sizeof(c->ack)) {
        n = br_tls_recv(c->fds[0], (char *)&c->ack + c->ack_off, sizeof(c->ack) - c->ack_off);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            break;
        }
        if (n <= 0 && !(n < 0 && errno == EINTR)) {
            BR_WARN(NCCL_NET,
                    "connection to %s closed during the handshake (%s): the listener "
                    "rejected it (wrong secret?) or was closed",
                    c->peer, n == 0 ? "end of stream" : strerror(errno));
            return ncclRemoteError;
        }
        c->ack_off += n > 0 ? (size_t)n : 0;
    }
    if (c->ack_off == sizeof(c->ack) &&
        (c->ack.magic != NETSOCK_ACK_MAGIC || c->ack.nsocks != c->h.nsocks)) {
        BR_WARN(NCCL_NET, "connection to %s: bad acknowledgement (magic 0x%x, %u sockets)", c->peer,
                c->ack.magic, c->ack.nsocks);
        return ncclRemoteError;
    }
    *ready_p = c->ack_off == sizeof(c->ack);
    return ncclSuccess;
}

static void connector_unlink(connector_t *c)
{
    pthread_mutex_lock(&connector_lock);
    for (connector_t **pp = &connectors; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    pthread_mutex_unlock(&connector_lock);
}

ncclResult_t netsock_connect(int dev, void *handle, void **send_comm)
{
    netsock_handle_t h;
    connector_t *c;
    netsock_comm_t *comm = NULL;
    ncclResult_t res;
    int ready = 0;

    pthread_once(&settings_once, settings_load);
    if (handle == NULL || send_comm == NULL || netsock_dev_get(dev) == NULL) {
        BR_WARN(NCCL_NET, "connect on device %d of %d (handle %p)", dev, netsock_dev_count(),
                handle);
        return ncclInternalError;
    }
    *send_comm = NULL;
    BR_CHECK(handle_check(handle, &h));
    pthread_mutex_lock(&connector_lock);
    for (c = connectors; c != NULL; c = c->next) {
        if (c->handle == handle && c->h.secret == h.secret) {
            break;
        }
    }
    pthread_mutex_unlock(&connector_lock);
    if (c == NULL) {
        BR_CHECK(connector_new(handle, &h, &c));
        pthread_mutex_lock(&connector_lock);
        c->next = connectors;
        connectors = c;
        pthread_mutex_unlock(&connector_lock);
    }
    res = connector_progress(c, &ready);
    if (res != ncclSuccess || !ready) {
        if (res != ncclSuccess) {
            connector_unlink(c);
            connector_free(c);
        }
        return res;
    }
    connector_unlink(c);
    res = netsock_comm_create(1, &c->h, c->fds, &comm); /* takes the fds */
    free(c);
    if (res == ncclSuccess) {
        *send_comm = comm;
    }
    return res;
}

static void pending_drop(listen_comm_t *lc, int i)
{
    netsock_fd_close(lc->pend[i].fd);
    lc->pend[i] = lc->pend[--lc->npend];
}

static void group_free(group_t *g)
{
    for (int i = 0; i < NETSOCK_MAX_SOCKS + 1; i++) {
        if (g->fds[i] >= 0) {
            netsock_fd_close(g->fds[i]);
        }
    }
}

/* Take new sockets off the listen queue. */
static ncclResult_t accept_new(listen_comm_t *lc)
{
    for (;;) {
        netsock_addr_t peer;
        socklen_t len = sizeof(peer);
        int fd = accept4(lc->fd, &peer.sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);

        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                return ncclSuccess;
            }
            if (errno == EINTR || errno == ECONNABORTED) {
                continue;
            }
            BR_WARN(NCCL_NET, "accept on %s failed: %s", lc->addr, strerror(errno));
            return ncclSystemError;
        }
        if (lc->npend == MAX_PENDING || netsock_socket_setup(fd) != ncclSuccess) {
            BR_WARN(NCCL_NET, "listener %s: dropping a connection (%d unidentified)", lc->addr,
                    lc->npend);
            netsock_fd_close(fd);
            continue;
        }
        if (lc->npend == lc->cap_pend) {
            int cap = lc->cap_pend ? 2 * lc->cap_pend : 16;
            pending_t *p = realloc(lc->pend, (size_t)cap * sizeof(*p));
            if (p == NULL) {
                netsock_fd_close(fd);
                BR_WARN(NCCL_NET, "out of memory accepting a connection");
                return ncclSystemError;
            }
            lc->pend = p;
            lc->cap_pend = cap;
        }
        pending_t *pn = &lc->pend[lc->npend];
        char why[320];
        memset(pn, 0, sizeof(pending_t));
        pn->fd = fd;
        netsock_addr_str(&peer.sa, pn->peer, sizeof(pn->peer));
        if (br_tls_mode() != BR_TLS_OFF) {
            if (br_tls_begin(fd, 1, why, sizeof(why)) != 0) {
                BR_WARN(NCCL_NET, "listener %s: refused %s: %s (%s)", lc->addr, pn->peer, why,
                        tls_hint);
                netsock_fd_close(fd);
                continue;
            }
            pn->tls = 1;
        }
        lc->npend++;
    }
}

/* Why a complete hello is refused, or NULL when it is acceptable. */
static const char *hello_problem(const listen_comm_t *lc, const netsock_hello_t *hi)
{
    if (hi->magic != NETSOCK_HELLO_MAGIC || hi->version != NETSOCK_WIRE_VERSION) {
        return "it does not speak the socket plugin's protocol";
    }
    if (hi->secret != lc->h.secret) {
        return "it did not present this listener's secret";
    }
    if (hi->nsocks != lc->h.nsocks || hi->index > hi->nsocks) {
        return "its socket count does not match the handle";
    }
    return NULL;
}

static ncclResult_t group_add(listen_comm_t *lc, const pending_t *p)
{
    group_t *g = NULL;

    for (int i = 0; i < lc->ngroups && g == NULL; i++) {
        g = lc->groups[i].nonce == p->hello.nonce ? &lc->groups[i] : NULL;
    }
    if (g == NULL) {
        if (lc->ngroups == lc->cap_groups) {
            int cap = lc->cap_groups ? 2 * lc->cap_groups : 4;
            group_t *gs = realloc(lc->groups, (size_t)cap * sizeof(*gs));
            if (gs == NULL) {
                BR_WARN(NCCL_NET, "out of memory accepting a connection");
                return ncclSystemError;
            }
            lc->groups = gs;
            lc->cap_groups = cap;
        }
        g = &lc->groups[lc->ngroups++];
        memset(g, 0, sizeof(*g));
        memset(g->fds, -1, sizeof(g->fds));
        g->nonce = p->hello.nonce;
    }
    if (g->fds[p->hello.index] >= 0) {
        BR_WARN(NCCL_NET, "listener %s: dropping a duplicate socket %u from %s", lc->addr,
                p->hello.index, p->peer);
        netsock_fd_close(p->fd);
        return ncclSuccess;
    }
    g->fds[p->hello.index] = p->fd;
    g->count++;
    if (p->hello.index == 0) {
        memcpy(g->peer, p->peer, sizeof(g->peer));
    }
    return ncclSuccess;
}

/* Read hellos of unidentified sockets; good ones join their connection's group. */
static ncclResult_t accept_hellos(listen_comm_t *lc)
{
    for (int i = 0; i < lc->npend;) {
        pending_t *p = &lc->pend[i];
        const char *why;
        if (p->tls) {
            char text[320];
            short events;
            int r = br_tls_step(p->fd, &events, text, sizeof(text));
            if (r < 0) {
                BR_WARN(NCCL_NET, "listener %s: refused %s: %s (%s)", lc->addr, p->peer, text,
                        tls_hint);
                pending_drop(lc, i);
                continue;
            }
            if (r == 0) {
                i++;
                continue;
            }
            p->tls = 0;
        }
        ssize_t n = br_tls_recv(p->fd, (char *)&p->hello + p->off, sizeof(p->hello) - p->off);

        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            i++;
            continue;
        }
        if (n <= 0) {
            BR_INFO(NCCL_NET, "listener %s: %s closed before its handshake", lc->addr, p->peer);
            pending_drop(lc, i);
            continue;
        }
        p->off += (size_t)n;
        if (p->off < sizeof(p->hello)) {
            continue; /* read again: more may be there */
        }
        why = hello_problem(lc, &p->hello);
        if (why != NULL) {
            BR_WARN(NCCL_NET, "listener %s: dropping the connection from %s: %s", lc->addr, p->peer,
                    why);
            pending_drop(lc, i);
            continue;
        }
        BR_CHECK(group_add(lc, p));
        lc->pend[i] = lc->pend[--lc->npend]; /* the group owns the fd now */
    }
    return ncclSuccess;
}

ncclResult_t netsock_accept(void *listen_comm, void **recv_comm)
{
    listen_comm_t *lc = listen_comm;

    if (lc == NULL || lc->magic != LISTEN_MAGIC || recv_comm == NULL) {
        BR_WARN(NCCL_NET, "accept on an invalid listen comm %p", listen_comm);
        return ncclInternalError;
    }
    *recv_comm = NULL;
    BR_CHECK(accept_new(lc));
    BR_CHECK(accept_hellos(lc));
    for (int i = 0; i < lc->ngroups; i++) {
        group_t *g = &lc->groups[i];
        netsock_ack_t ack = {.magic = NETSOCK_ACK_MAGIC, .nsocks = lc->h.nsocks};
        netsock_comm_t *comm = NULL;
        ssize_t n;

        if (g->count != lc->h.nsocks + 1) {
            continue;
        }
        n = br_tls_send(g->fds[0], (char *)&ack + g->ack_off, sizeof(ack) - g->ack_off);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            continue;
        }
        if (n < 0) {
            BR_WARN(NCCL_NET, "listener %s: acknowledging %s failed: %s", lc->addr, g->peer,
                    strerror(errno));
            group_free(g);
            lc->groups[i--] = lc->groups[--lc->ngroups];
            continue;
        }
        g->ack_off += (size_t)n;
        if (g->ack_off < sizeof(ack)) {
            continue;
        }
        BR_INFO(NCCL_NET, "listener %s: accepted %s with %d data sockets", lc->addr, g->peer,
                lc->h.nsocks);
        group_t done = *g;
        lc->groups[i] = lc->groups[--lc->ngroups];
        BR_CHECK(netsock_comm_create(0, &lc->h, done.fds, &comm)); /* takes the fds */
        *recv_comm = comm;
        return ncclSuccess;
    }
    return ncclSuccess;
}

ncclResult_t netsock_close_listen(void *listen_comm)
{
    listen_comm_t *lc = listen_comm;

    if (lc == NULL || lc->magic != LISTEN_MAGIC) {
        BR_WARN(NCCL_NET, "closeListen on an invalid listen comm %p", listen_comm);
        return ncclInternalError;
    }
    for (int i = 0; i < lc->npend; i++) {
        netsock_fd_close(lc->pend[i].fd);
    }
    for (int i = 0; i < lc->ngroups; i++) {
        group_free(&lc->groups[i]);
    }
    netsock_fd_close(lc->fd);
    lc->magic = 0;
    free(lc->pend);
    free(lc->groups);
    free(lc);
    return ncclSuccess;
}
