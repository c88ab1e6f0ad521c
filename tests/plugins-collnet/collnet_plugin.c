/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A software collnet plugin for tests: the library exports a net table (NCCL looks for
 * collnet only next to a net table) and one collnet table, ncclCollNetPlugin_vN with
 * N = COLLNET_TEST_VERSION (8 to 12; 12 by default), so every adapter of the core runs.
 * The net table forwards to Braid's socket plugin, opened at init from
 * BRAID_TEST_INNER_NET (a path), by copying its members into the exported table.
 *
 * The collnet: every rank listens on a loopback TCP socket and publishes its port; at
 * connect, rank 0 starts the reducer process (collnet_reducer.c, fork and exec) with its
 * listening socket, and every rank connects to it. iallreduce queues a request; test moves its
 * bytes without blocking (header and data out, header and result back). The reducer reads one
 * request from every rank, checks that they agree (count, type, op), combines the inputs exactly
 * (in integer or double arithmetic, rank order, rounded once to the type) and sends the result to
 * each rank, or an error status naming the mismatch.
 *
 * iallgather and ireducescatter go through the same reducer, with the semantics NCCL's proxy
 * gives them (src/transport/coll_net.cc; docs/plugins.md): a call covers the window
 * [windowOffset, windowOffset + windowBytes) of the concatenation of every rank's block of
 * bytesPerRank bytes. iallgather sends the bytes of this rank's block that lie in the
 * window, read from sendData (none when the window misses the block), and delivers the
 * whole window into recvParts; ireducescatter reads the window from sendParts and delivers
 * the reduced bytes of this rank's block that lie in it at recvData. The parts (any number,
 * in order) must hold exactly windowBytes, and the window must lie inside the nranks
 * blocks: anything else fails the call with a WARN saying why. test reports the bytes
 * delivered: windowBytes for iallgather, this rank's bytes of the window for
 * ireducescatter.
 *
 * BRAID_TEST_COLLNET selects a failure mode: "nodev" (0 devices), "negdev" (-1 devices),
 * "initfail", "noiallreduce" (the table loses iallreduce at init), "failop" (iallreduce
 * fails from the second call on), "badsize" (test reports one byte less than delivered),
 * "blocksize" (ireducescatter's test reports bytesPerRank, as the SHARP plugin does),
 * "noiallgather" / "noireducescatter" (the table loses that member at init).
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "plugin_api/collnet/collnet.h"
#include "plugin_api/net/net_v12.h"

#include "collnet_wire.h"

#define CN_MAX_REQS 8
#define CN_MAX_PARTS 16

static ncclDebugLogger_t cn_log;
static const char *cn_mode = "";

#define CN_WARN(...) cn_log(NCCL_LOG_WARN, NCCL_ALL, __FILE__, __LINE__, __VA_ARGS__)

/* ---- Net: Braid's socket plugin, forwarded ---- */

static ncclResult_t tn_init(void **ctx, uint64_t comm_id, ncclNetCommConfig_v12_t *config,
                            ncclDebugLogger_t log, ncclProfilerCallback_t prof);

__attribute__((visibility("default"))) ncclNet_v12_t ncclNetPlugin_v12 = {
    .name = "CollNetTest",
    .init = tn_init,
};

static ncclResult_t tn_init(void **ctx, uint64_t comm_id, ncclNetCommConfig_v12_t *config,
                            ncclDebugLogger_t log, ncclProfilerCallback_t prof)
{
    static const ncclNet_v12_t *inner;
    const char *path = getenv("BRAID_TEST_INNER_NET");

    cn_log = log;
    if (inner == NULL) {
        void *lib = path != NULL ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
        inner = lib != NULL ? dlsym(lib, "ncclNetPlugin_v12") : NULL;
        if (inner == NULL) {
            CN_WARN("collnet test plugin: BRAID_TEST_INNER_NET=%s has no ncclNetPlugin_v12",
                    path != NULL ? path : "(unset)");
            return ncclInvalidUsage;
        }
        /* Everything but our name and init comes from the socket plugin; the core reads
         * the table only after init returns. */
        ncclNet_v12_t t = *inner;
        t.name = ncclNetPlugin_v12.name;
        t.init = tn_init;
        ncclNetPlugin_v12 = t;
    }
    return inner->init(ctx, comm_id, config, log, prof);
}

/* ---- Collnet ---- */

typedef struct {
    uint32_t magic;
    uint16_t port;
} cn_handle_t;

typedef struct {
    int fd; /* listening socket, -1 once handed to the reducer */
} cn_listen_t;

typedef struct cn_comm cn_comm_t;

typedef struct {
    cn_comm_t *comm;
    int used;
    cn_hdr_t h, reply;
    const char *send;
    char *recv;
    size_t bytes, rbytes;      /* data bytes sent and received back */
    size_t sent, rcvd;         /* header + data bytes moved each way */
    char *own_send, *own_recv; /* gathered parts (reduce-scatter), result to scatter (gather) */
    int nparts;
    void *part_addr[CN_MAX_PARTS];
    size_t part_size[CN_MAX_PARTS];
    int done;
    int error;
} cn_req_t;

struct cn_comm {
    int fd, rank, nranks;
    pid_t reducer; /* rank 0: the reducer's pid */
    uint64_t seq;
    cn_req_t reqs[CN_MAX_REQS];
    int head, count; /* requests in posting order, a ring */
    int calls;
};

static ncclResult_t cn_init(void **ctx, uint64_t comm_id, ncclDebugLogger_t log)
{
    const char *m = getenv("BRAID_TEST_COLLNET");
    (void)comm_id;
    cn_log = log;
    cn_mode = m != NULL ? m : "";
    if (strcmp(cn_mode, "initfail") == 0) {
        return ncclSystemError;
    }
    if (ctx != NULL) {
        *ctx = &cn_mode; /* any non-NULL context */
    }
    return ncclSuccess;
}

static ncclResult_t cn_devices(int *ndev)
{
    *ndev = strcmp(cn_mode, "nodev") == 0 ? 0 : strcmp(cn_mode, "negdev") == 0 ? -1 : 1;
    return ncclSuccess;
}

static void cn_props_common(const char **name, int *ptr, int *speed, int *max_comms)
{
    *name = "collnet-test";
    *ptr = NCCL_PTR_HOST;
    *speed = 10000;
    *max_comms = 1024;
}

static ncclResult_t cn_listen_dev(int dev, void *handle, void **listen_comm)
{
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    cn_listen_t *l = calloc(1, sizeof(*l));
    cn_handle_t h;

    (void)dev;
    if (l == NULL) {
        return ncclSystemError;
    }
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    l->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (l->fd < 0 || bind(l->fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(l->fd, 64) != 0 ||
        getsockname(l->fd, (struct sockaddr *)&a, &len) != 0) {
        CN_WARN("collnet test plugin: listen on loopback failed: %s", strerror(errno));
        if (l->fd >= 0) {
            close(l->fd);
        }
        free(l);
        return ncclSystemError;
    }
    memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
    h.magic = CN_MAGIC;
    h.port = ntohs(a.sin_port);
    memcpy(handle, &h, sizeof(h));
    *listen_comm = l;
    return ncclSuccess;
}

static ncclResult_t cn_connect(void *handles[], int nranks, int rank, void *listen_comm,
                               void **coll_comm)
{
    cn_listen_t *l = listen_comm;
    cn_handle_t h0;
    struct sockaddr_in a;
    cn_comm_t *c = calloc(1, sizeof(*c));
    int32_t me = rank;
    int one = 1;

    if (c == NULL) {
        return ncclSystemError;
    }
    memcpy(&h0, handles[0], sizeof(h0));
    if (h0.magic != CN_MAGIC) {
        CN_WARN("collnet test plugin: rank 0's handle is not ours");
        free(c);
        return ncclInternalError;
    }
    c->rank = rank;
    c->nranks = nranks;
    if (rank == 0) {
        char fdarg[16], narg[16];
        snprintf(fdarg, sizeof(fdarg), "%d", l->fd);
        snprintf(narg, sizeof(narg), "%d", nranks);
        pid_t pid = fork();
        if (pid == 0) {
            /* Only async-signal-safe calls until exec: the reducer keeps only its
             * listening socket (whose close-on-exec flag goes). */
            for (int fd = 3; fd < 4096; fd++) {
                if (fd != l->fd) {
                    close(fd);
                }
            }
            (void)fcntl(l->fd, F_SETFD, 0);
            execl(COLLNET_REDUCER, "collnet-reducer", fdarg, narg, (char *)NULL);
            _exit(127);
        }
        if (pid < 0) {
            CN_WARN("collnet test plugin: fork of the reducer failed: %s", strerror(errno));
            free(c);
            return ncclSystemError;
        }
        c->reducer = pid;
    }
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(h0.port);
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        cn_write_all(c->fd, &me, sizeof(me)) != 0) {
        CN_WARN("collnet test plugin: rank %d cannot reach the reducer on port %u: %s", rank,
                (unsigned)h0.port, strerror(errno));
        if (c->fd >= 0) {
            close(c->fd);
        }
        free(c);
        return ncclSystemError;
    }
    (void)setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    *coll_comm = c;
    return ncclSuccess;
}

static ncclResult_t cn_reduce_support(ncclDataType_t type, ncclRedOp_t op, int *supported)
{
    *supported = cn_type_supported((int)type) && (int)op >= ncclSum && (int)op <= ncclMin;
    return ncclSuccess;
}

static ncclResult_t cn_reg_mr(void *coll_comm, void *data, size_t size, int type, void **mhandle)
{
    (void)coll_comm;
    (void)data;
    (void)size;
    if (type != NCCL_PTR_HOST) {
        return ncclInternalError;
    }
    *mhandle = malloc(1); /* a real handle, so the core's deregMr has something to free */
    return *mhandle != NULL ? ncclSuccess : ncclSystemError;
}

static ncclResult_t cn_reg_mr_dmabuf(void *coll_comm, void *data, size_t size, int type,
                                     uint64_t offset, int fd, void **mhandle)
{
    (void)offset;
    (void)fd;
    return cn_reg_mr(coll_comm, data, size, type, mhandle);
}

static ncclResult_t cn_dereg_mr(void *coll_comm, void *mhandle)
{
    (void)coll_comm;
    free(mhandle);
    return ncclSuccess;
}

static ncclResult_t cn_iallreduce_impl(void *coll_comm, void *send, void *recv, size_t count,
                                       ncclDataType_t type, ncclRedOp_t op, void **request)
{
    cn_comm_t *c = coll_comm;
    cn_req_t *r;

    *request = NULL;
    if (strcmp(cn_mode, "failop") == 0 && ++c->calls >= 2) {
        CN_WARN("collnet test plugin: rank %d: iallreduce failing on purpose (failop)", c->rank);
        return ncclSystemError;
    }
    if (!cn_type_supported((int)type) || (int)op < ncclSum || (int)op > ncclMin) {
        CN_WARN("collnet test plugin: iallreduce of type %d op %d, which reduceSupport refused",
                (int)type, (int)op);
        return ncclInvalidUsage;
    }
    if (c->count == CN_MAX_REQS) {
        return ncclSuccess; /* full: the core retries */
    }
    r = &c->reqs[(c->head + c->count) % CN_MAX_REQS];
    memset(r, 0, sizeof(*r));
    r->comm = c;
    r->used = 1;
    r->h.magic = CN_MAGIC;
    r->h.type = (int32_t)type;
    r->h.op = (int32_t)op;
    r->h.count = count;
    r->h.seq = c->seq++;
    r->send = send;
    r->recv = recv;
    r->bytes = r->rbytes = count * cn_type_size((int)type);
    r->h.kind = CN_ALLREDUCE;
    c->count++;
    *request = r;
    return ncclSuccess;
}

/* A part list, checked against the window (windowBytes of the nranks blocks' concatenation)
 * and copied. */
static int cn_take_parts(cn_comm_t *c, cn_req_t *r, const char *call, int nparts, void *const *addr,
                         const size_t *size, size_t bytes_per_rank, size_t window_off,
                         size_t window_bytes)
{
    size_t all = (size_t)c->nranks * bytes_per_rank, total = 0;
    if (nparts < 1 || nparts > CN_MAX_PARTS || window_bytes == 0 || window_off > all ||
        window_bytes > all - window_off) {
        CN_WARN("collnet test plugin: rank %d: %s with %d parts, window %zu + %zu outside the "
                "%d x %zu bytes of the blocks",
                c->rank, call, nparts, window_off, window_bytes, c->nranks, bytes_per_rank);
        return -1;
    }
    for (int i = 0; i < nparts; i++) {
        r->part_addr[i] = addr[i];
        r->part_size[i] = size[i];
        total += size[i];
    }
    r->nparts = nparts;
    if (total != window_bytes) {
        CN_WARN("collnet test plugin: rank %d: %s parts hold %zu bytes, not the window's %zu "
                "(window at %zu of the %d x %zu bytes of the blocks)",
                c->rank, call, total, window_bytes, window_off, c->nranks, bytes_per_rank);
        return -1;
    }
    return 0;
}

/* A free request slot at the tail (NULL: full, the core retries), zeroed. */
static cn_req_t *cn_new_req(cn_comm_t *c)
{
    cn_req_t *r;
    if (c->count == CN_MAX_REQS) {
        return NULL;
    }
    r = &c->reqs[(c->head + c->count) % CN_MAX_REQS];
    memset(r, 0, sizeof(*r));
    r->comm = c;
    r->h.magic = CN_MAGIC;
    return r;
}

static ncclResult_t cn_iallgather_impl(void *coll_comm, void *send, int nparts, void *const *addr,
                                       const size_t *size, size_t bytes_per_rank, size_t window_off,
                                       size_t window_bytes, void **request)
{
    cn_comm_t *c = coll_comm;
    cn_req_t *r = cn_new_req(c);

    *request = NULL;
    if (r == NULL) {
        return ncclSuccess;
    }
    if (cn_take_parts(c, r, "iallgather", nparts, addr, size, bytes_per_rank, window_off,
                      window_bytes) != 0) {
        return ncclInvalidUsage;
    }
    r->own_recv = malloc(window_bytes);
    if (r->own_recv == NULL) {
        return ncclSystemError;
    }
    r->used = 1;
    r->h.kind = CN_ALLGATHER;
    r->h.type = 1; /* uint8: bytes */
    r->h.count = window_bytes;
    r->h.bytes_per_rank = bytes_per_rank;
    r->h.window_off = window_off;
    r->h.seq = c->seq++;
    r->send = send;
    r->recv = r->own_recv;
    r->bytes = cn_data_bytes(&r->h, c->rank, 0); /* this rank's bytes of the window */
    r->rbytes = window_bytes;
    c->count++;
    *request = r;
    return ncclSuccess;
}

static ncclResult_t cn_ireducescatter_impl(void *coll_comm, int nparts, void *const *addr,
                                           const size_t *size, void *recv, size_t bytes_per_rank,
                                           size_t window_off, size_t window_bytes,
                                           ncclDataType_t type, ncclRedOp_t op, void **request)
{
    cn_comm_t *c = coll_comm;
    cn_req_t *r = cn_new_req(c);
    size_t es = cn_type_size((int)type), at = 0;

    *request = NULL;
    if (!cn_type_supported((int)type) || (int)op < ncclSum || (int)op > ncclMin) {
        CN_WARN("collnet test plugin: ireducescatter of type %d op %d, which reduceSupport "
                "refused",
                (int)type, (int)op);
        return ncclInvalidUsage;
    }
    if (r == NULL) {
        return ncclSuccess;
    }
    if (cn_take_parts(c, r, "ireducescatter", nparts, addr, size, bytes_per_rank, window_off,
                      window_bytes) != 0) {
        return ncclInvalidUsage;
    }
    if (window_bytes % es != 0 || window_off % es != 0 || bytes_per_rank % es != 0) {
        CN_WARN("collnet test plugin: rank %d: ireducescatter window %zu + %zu or block of %zu "
                "bytes is not whole elements of %zu bytes",
                c->rank, window_off, window_bytes, bytes_per_rank, es);
        return ncclInvalidUsage;
    }
    r->own_send = malloc(window_bytes);
    if (r->own_send == NULL) {
        return ncclSystemError;
    }
    for (int i = 0; i < nparts; i++) { /* gathered now: the parts are the caller's */
        memcpy(r->own_send + at, addr[i], size[i]);
        at += size[i];
    }
    r->used = 1;
    r->h.kind = CN_REDUCESCATTER;
    r->h.type = (int32_t)type;
    r->h.op = (int32_t)op;
    r->h.count = window_bytes / es;
    r->h.bytes_per_rank = bytes_per_rank;
    r->h.window_off = window_off;
    r->h.seq = c->seq++;
    r->send = r->own_send;
    r->recv = recv;
    r->bytes = window_bytes;
    r->rbytes = cn_data_bytes(&r->h, c->rank, 1); /* this rank's bytes of the window */
    c->count++;
    *request = r;
    return ncclSuccess;
}

/* Move bytes of the requests in order, without blocking; -1 on a broken connection. */
static int cn_progress(cn_comm_t *c)
{
    /* Sends: every queued request, in order. */
    for (int i = 0; i < c->count; i++) {
        cn_req_t *r = &c->reqs[(c->head + i) % CN_MAX_REQS];
        size_t total = sizeof(cn_hdr_t) + r->bytes;
        while (r->sent < total) {
            const char *p = r->sent < sizeof(cn_hdr_t) ? (const char *)&r->h + r->sent
                                                       : r->send + (r->sent - sizeof(cn_hdr_t));
            size_t left = r->sent < sizeof(cn_hdr_t) ? sizeof(cn_hdr_t) - r->sent : total - r->sent;
            ssize_t n = send(c->fd, p, left, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
                return 0;
            }
            if (n <= 0) {
                return -1;
            }
            r->sent += (size_t)n;
        }
    }
    /* Receives: the oldest request not yet done. */
    for (int i = 0; i < c->count; i++) {
        cn_req_t *r = &c->reqs[(c->head + i) % CN_MAX_REQS];
        if (r->done) {
            continue;
        }
        for (;;) {
            size_t total = sizeof(cn_hdr_t) +
                           (r->rcvd >= sizeof(cn_hdr_t) && r->reply.status == 0 ? r->rbytes : 0);
            if (r->rcvd >= sizeof(cn_hdr_t) && r->rcvd == total) {
                r->done = 1;
                r->error = r->reply.status;
                break;
            }
            char *p = r->rcvd < sizeof(cn_hdr_t) ? (char *)&r->reply + r->rcvd
                                                 : r->recv + (r->rcvd - sizeof(cn_hdr_t));
            size_t left = r->rcvd < sizeof(cn_hdr_t) ? sizeof(cn_hdr_t) - r->rcvd : total - r->rcvd;
            ssize_t n = recv(c->fd, p, left, MSG_DONTWAIT);
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
                return 0;
            }
            if (n <= 0) {
                return -1;
            }
            r->rcvd += (size_t)n;
        }
        if (!r->done) {
            return 0;
        }
    }
    return 0;
}

static ncclResult_t cn_test(void *request, int *done, int *size)
{
    cn_req_t *r = request;
    cn_comm_t *c = r->comm;

    *done = 0;
    if (cn_progress(c) < 0) {
        CN_WARN("collnet test plugin: rank %d lost the reducer: %s", c->rank,
                errno != 0 ? strerror(errno) : "connection closed");
        return ncclSystemError;
    }
    if (!r->done) {
        return ncclSuccess;
    }
    if (r->error != 0) {
        CN_WARN("collnet test plugin: rank %d: the reducer refused request %llu: rank %d sent "
                "other arguments than rank 0 (this rank: count %llu, type %d, op %d)",
                c->rank, (unsigned long long)r->h.seq, r->error, (unsigned long long)r->h.count,
                r->h.type, r->h.op);
        return ncclInvalidUsage;
    }
    *done = 1;
    *size = (int)r->rbytes - (strcmp(cn_mode, "badsize") == 0 ? 1 : 0);
    if (r->h.kind == CN_REDUCESCATTER && strcmp(cn_mode, "blocksize") == 0) {
        *size = (int)r->h.bytes_per_rank;
    }
    if (r->own_recv != NULL) { /* the gathered window, into the parts in order */
        size_t at = 0;
        for (int i = 0; i < r->nparts; i++) {
            memcpy(r->part_addr[i], r->own_recv + at, r->part_size[i]);
            at += r->part_size[i];
        }
    }
    free(r->own_recv);
    free(r->own_send);
    r->own_recv = r->own_send = NULL;
    /* Requests complete in order: release this one (the head). */
    r->used = 0;
    if (&c->reqs[c->head] == r) {
        c->head = (c->head + 1) % CN_MAX_REQS;
        c->count--;
    }
    return ncclSuccess;
}

static ncclResult_t cn_iflush(void *coll_comm, void *data, int size, void *mhandle, void **request)
{
    (void)coll_comm;
    (void)data;
    (void)size;
    (void)mhandle;
    *request = NULL; /* host memory: nothing to flush */
    return ncclSuccess;
}

static ncclResult_t cn_close_coll(void *coll_comm)
{
    cn_comm_t *c = coll_comm;
    close(c->fd);
    if (c->reducer > 0) {
        int st;
        /* The reducer ends when it sees a rank close, but may still be sending the last
         * results to other ranks: give it time, then make sure it is gone. */
        for (int i = 0; i < 2000 && waitpid(c->reducer, &st, WNOHANG) == 0; i++) {
            usleep(5000);
            if (i == 1999) {
                kill(c->reducer, SIGKILL);
                (void)waitpid(c->reducer, &st, 0);
            }
        }
    }
    free(c);
    return ncclSuccess;
}

static ncclResult_t cn_close_listen(void *listen_comm)
{
    cn_listen_t *l = listen_comm;
    if (l->fd >= 0) {
        close(l->fd);
    }
    free(l);
    return ncclSuccess;
}

/* ---- The exported table, of version COLLNET_TEST_VERSION (8 .. 12) ---- */

#ifndef COLLNET_TEST_VERSION
#define COLLNET_TEST_VERSION 12
#endif
#define CN_CAT3(a, b, c) a##b##c
#define CN_XCAT3(a, b, c) CN_CAT3(a, b, c)
#define CN_TABLE_T CN_XCAT3(ncclCollNet_v, COLLNET_TEST_VERSION, _t)
#define CN_PROPS_T CN_XCAT3(ncclNetProperties_v, COLLNET_TEST_VERSION, _t)
#define CN_SGE_T CN_XCAT3(ncclNetSGE_v, COLLNET_TEST_VERSION, _t)
#define CN_SYMBOL CN_XCAT3(ncclCollNetPlugin_v, COLLNET_TEST_VERSION, )
#define CN_STR(x) #x
#define CN_NAME(v) "CollNetTestV" CN_STR(v)
#if COLLNET_TEST_VERSION == 8
#define CN_COUNT_T int
#else
#define CN_COUNT_T size_t
#endif

__attribute__((visibility("default"))) CN_TABLE_T CN_SYMBOL;

static ncclResult_t cn_props(int dev, CN_PROPS_T *p)
{
    (void)dev;
    memset(p, 0, sizeof(*p));
    cn_props_common((const char **)&p->name, &p->ptrSupport, &p->speed, &p->maxComms);
    p->pciPath = "";
    p->maxRecvs = 1;
    p->netDeviceType = NCCL_NET_DEVICE_HOST;
#if COLLNET_TEST_VERSION >= 9
    p->vProps.ndevs = 1;
    p->maxP2pBytes = (size_t)1 << 30;
    p->maxCollBytes = (size_t)1 << 28; /* not NCCL's default, so the test sees it read */
#endif
#if COLLNET_TEST_VERSION >= 11
    p->maxMultiRequestSize = 1;
#endif
#if COLLNET_TEST_VERSION >= 12
    p->railId = p->planeId = -1;
#endif
    return ncclSuccess;
}

static ncclResult_t cn_iallreduce(void *coll_comm, void *send, void *recv, CN_COUNT_T count,
                                  ncclDataType_t type, ncclRedOp_t op, void *smh, void *rmh,
                                  void **request)
{
    (void)smh;
    (void)rmh;
#if COLLNET_TEST_VERSION == 8
    if (count < 0) { /* an int count that went negative */
        return ncclInternalError;
    }
#endif
    return cn_iallreduce_impl(coll_comm, send, recv, (size_t)count, type, op, request);
}

static int cn_split_parts(int n, const CN_SGE_T *parts, void **addr, size_t *size)
{
    if (n < 1 || n > CN_MAX_PARTS) {
        CN_WARN("collnet test plugin: %d parts (1 .. %d)", n, CN_MAX_PARTS);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        addr[i] = parts[i].address;
        size[i] = (size_t)parts[i].size;
    }
    return 0;
}

static ncclResult_t cn_iallgather(void *coll_comm, void *send, int nparts, CN_SGE_T *parts,
                                  size_t bytes_per_rank, size_t window_off, size_t window_bytes,
                                  void *smh, void **request)
{
    void *addr[CN_MAX_PARTS];
    size_t size[CN_MAX_PARTS];
    (void)smh;
    *request = NULL;
    if (cn_split_parts(nparts, parts, addr, size) != 0) {
        return ncclInvalidUsage;
    }
    return cn_iallgather_impl(coll_comm, send, nparts, addr, size, bytes_per_rank, window_off,
                              window_bytes, request);
}

static ncclResult_t cn_ireducescatter(void *coll_comm, int nparts, CN_SGE_T *parts, void *recv,
                                      size_t bytes_per_rank, size_t window_off, size_t window_bytes,
                                      ncclDataType_t type, ncclRedOp_t op, void *rmh,
                                      void **request)
{
    void *addr[CN_MAX_PARTS];
    size_t size[CN_MAX_PARTS];
    (void)rmh;
    *request = NULL;
    if (cn_split_parts(nparts, parts, addr, size) != 0) {
        return ncclInvalidUsage;
    }
    return cn_ireducescatter_impl(coll_comm, nparts, addr, size, recv, bytes_per_rank, window_off,
                                  window_bytes, type, op, request);
}

/* Patched in init, as the SHARP plugin does (the core reads the table after init). */
static void cn_patch(void)
{
    CN_SYMBOL.iallreduce = strcmp(cn_mode, "noiallreduce") == 0 ? NULL : cn_iallreduce;
    CN_SYMBOL.iallgather = strcmp(cn_mode, "noiallgather") == 0 ? NULL : cn_iallgather;
    CN_SYMBOL.ireducescatter = strcmp(cn_mode, "noireducescatter") == 0 ? NULL : cn_ireducescatter;
}

#if COLLNET_TEST_VERSION >= 11
static ncclResult_t cn_init_vn(void **ctx, uint64_t comm_id, ncclDebugLogger_t log)
{
    ncclResult_t res = cn_init(ctx, comm_id, log);
    cn_patch();
    return res;
}

static ncclResult_t cn_listen(void *ctx, int dev, void *handle, void **listen_comm)
{
    (void)ctx;
    return cn_listen_dev(dev, handle, listen_comm);
}

static ncclResult_t cn_finalize(void *ctx)
{
    (void)ctx;
    return ncclSuccess;
}
#else
static ncclResult_t cn_init_vn(ncclDebugLogger_t log)
{
    ncclResult_t res = cn_init(NULL, 0, log);
    cn_patch();
    return res;
}
#define cn_listen cn_listen_dev
#endif

__attribute__((visibility("default"))) CN_TABLE_T CN_SYMBOL = {
#if COLLNET_TEST_VERSION == 12
    .name = "CollNetTest",
#else
    .name = CN_NAME(COLLNET_TEST_VERSION),
#endif
    .init = cn_init_vn,
    .devices = cn_devices,
    .getProperties = cn_props,
    .listen = cn_listen,
    .connect = cn_connect,
    .reduceSupport = cn_reduce_support,
    .regMr = cn_reg_mr,
    .regMrDmaBuf = cn_reg_mr_dmabuf,
    .deregMr = cn_dereg_mr,
    .iallreduce = cn_iallreduce,
    .iallgather = cn_iallgather,
    .ireducescatter = cn_ireducescatter,
    .iflush = cn_iflush,
    .test = cn_test,
    .closeColl = cn_close_coll,
    .closeListen = cn_close_listen,
#if COLLNET_TEST_VERSION >= 9
    .makeVDevice = NULL,
#endif
#if COLLNET_TEST_VERSION >= 11
    .finalize = cn_finalize,
#endif
};
