/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A fault-injecting net plugin for the transport failover tests (libnccl-net-faulty.so,
 * network "Faulty", or FAULTY_NET_NAME). It exports ncclNetPlugin_v12, _v11 and _v10, as
 * the socket plugin does, and forwards every call to the same version of the plugin named
 * by BRAID_TEST_INNER_NET (a path, required), opened at the first init. As in
 * tests/plugins-collnet/collnet_plugin.c, the first init copies the members that need no
 * wrapping (devices, getProperties, makeVDevice, finalize, setNetAttr) from the inner table.
 *
 * Faults, read when the library is loaded and counted per process:
 *   FAULTY_NET_FAIL_SEND=N  the N-th isend carrying data (size > 0) breaks its connection
 *   FAULTY_NET_FAIL_RECV=N  the N-th irecv with room for data breaks its connection
 *   FAULTY_NET_FAIL_DEV=d   count only requests on connections of device d
 * A broken connection is what a failed link leaves: its inner comm is deregistered and
 * closed at once (so the peer's transfers fail too), and that request's test and every
 * later isend / irecv / iflush / test on the connection return ncclSystemError. close
 * still succeeds and frees everything.
 *
 * Data structures: connections (fn_comm_t) and listeners are wrapped; requests are slots
 * of a fixed per-connection pool that live as long as the connection, so a test on a
 * broken connection's request touches nothing freed. Registrations stay the inner ones,
 * tracked per connection so a break can release them before the close.
 * Threading: as the ABI says, one connection is driven by one thread at a time; the
 * fault counters are process-wide atomics, the inner library is opened once.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plugin_api/net/net.h"
#include "plugin_log.h"

#include "check.h"

/* Requests per connection: NCCL_NET_MAX_REQUESTS posted ones plus flushes, with room. */
#define FN_REQS (2 * NCCL_NET_MAX_REQUESTS)

/* The members a wrapped connection calls; the same signatures in v10, v11 and v12. */
typedef struct {
    ncclResult_t (*reg_mr)(void *comm, void *data, size_t size, int type, void **mhandle);
    ncclResult_t (*reg_mr_dmabuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                                  int fd, void **mhandle);
    ncclResult_t (*dereg_mr)(void *comm, void *mhandle);
    ncclResult_t (*isend)(void *comm, void *data, size_t size, int tag, void *mhandle,
                          void *phandle, void **request);
    ncclResult_t (*irecv)(void *comm, int n, void **data, size_t *sizes, int *tags, void **mhandles,
                          void **phandles, void **request);
    ncclResult_t (*iflush)(void *comm, int n, void **data, int *sizes, void **mhandles,
                           void **request);
    ncclResult_t (*test)(void *request, int *done, int *sizes);
    ncclResult_t (*close_send)(void *comm);
    ncclResult_t (*close_recv)(void *comm);
    ncclResult_t (*close_listen)(void *comm);
    ncclResult_t (*get_device_mr)(void *comm, void *mhandle, void **dptr_mhandle);
    ncclResult_t (*irecv_consumed)(void *comm, int n, void *request);
} fn_ops_t;

/* One fault: which request breaks, and how many have been counted. */
typedef struct {
    const char *env;
    long at; /* 0: none */
    atomic_long count;
} fn_fault_t;

typedef struct fn_comm fn_comm_t;

typedef struct {
    fn_comm_t *comm;
    void *inner;     /* the inner request; NULL for the request that broke the connection */
    atomic_int used; /* handed out and not yet completed */
} fn_req_t;

struct fn_comm {
    int is_send;
    int dev;
    const fn_ops_t *ops;
    void *inner;       /* NULL once broken (closed) */
    atomic_int broken; /* the connection was broken on purpose */
    int warned;        /* the failure was logged */
    unsigned next;     /* where the next free request slot is looked for */
    void **mrs;        /* live inner registrations */
    int nmrs, cap_mrs;
    fn_req_t reqs[FN_REQS];
};

typedef struct {
    int dev;
    const fn_ops_t *ops;
    void *inner;
} fn_listen_t;

static const ncclNet_v12_t *inner_v12;
static const ncclNet_v11_t *inner_v11;
static const ncclNet_v10_t *inner_v10;
static fn_ops_t ops_v12, ops_v11, ops_v10;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static fn_fault_t fault_send = {.env = "FAULTY_NET_FAIL_SEND"};
static fn_fault_t fault_recv = {.env = "FAULTY_NET_FAIL_RECV"};
static int fault_dev = -1;                      /* FAULTY_NET_FAIL_DEV; -1: every device */
static char env_error[256];                     /* a malformed variable, reported by init */
static char load_error[256] = "no such symbol"; /* why the inner plugin did not open */

/* The core's logger, from init (plugin_log.h routes BR_WARN through it). */
ncclDebugLogger_t br_plugin_logger;

/* ---- Environment and inner plugin ---- */

/* A whole decimal number >= lo from the environment; -1 when unset, -2 when malformed. */
static long env_long(const char *key, long lo)
{
    const char *s = getenv(key);
    char *end;
    long v;

    if (s == NULL || s[0] == '\0') {
        return -1;
    }
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo) {
        snprintf(env_error, sizeof(env_error), "%s='%s' is not a whole number >= %ld", key, s, lo);
        return -2;
    }
    return v;
}

static void fn_load(void);

/* Open the inner plugin once; fails when it lacks the version or a fault is malformed. */
static ncclResult_t fn_prepare(ncclDebugLogger_t log, int version)
{
    const void *t;

    if (log != NULL && br_plugin_logger != log) {
        br_plugin_logger = log;
    }
    pthread_once(&load_once, fn_load);
    if (env_error[0] != '\0') {
        BR_WARN(NCCL_NET, "faulty-net: %s", env_error);
        return ncclInvalidUsage;
    }
    t = version == 12   ? (const void *)inner_v12
        : version == 11 ? (const void *)inner_v11
                        : (const void *)inner_v10;
    if (t == NULL) {
        BR_WARN(NCCL_NET, "faulty-net: BRAID_TEST_INNER_NET=%s has no ncclNetPlugin_v%d (%s)",
                getenv("BRAID_TEST_INNER_NET") ? getenv("BRAID_TEST_INNER_NET") : "(unset)",
                version, load_error);
        return ncclInvalidUsage;
    }
    return ncclSuccess;
}

/* ---- Requests and breaking ---- */

/* A free request slot of c, or NULL when all are handed out. */
static fn_req_t *req_claim(fn_comm_t *c)
{
    for (unsigned i = 0; i < FN_REQS; i++) {
        fn_req_t *r = &c->reqs[(c->next + i) % FN_REQS];
        if (atomic_exchange_explicit(&r->used, 1, memory_order_acquire) == 0) {
            c->next = (c->next + i + 1) % FN_REQS;
            r->inner = NULL;
            return r;
        }
    }
    return NULL;
}

static void req_release(fn_req_t *r)
{
    r->inner = NULL;
    atomic_store_explicit(&r->used, 0, memory_order_release);
}

/* Does this request trip fault f? Counts it when its device is the one watched. */
static int fault_due(fn_fault_t *f, const fn_comm_t *c)
{
    if (f->at == 0 || (fault_dev >= 0 && c->dev != fault_dev)) {
        return 0;
    }
    return atomic_fetch_add(&f->count, 1) + 1 == f->at;
}

/* Break c as a failed link would: release its registrations, close its inner comm. */
static void comm_break(fn_comm_t *c, long n)
{
    fprintf(stderr,
            "faulty-net: pid %d breaking the %s connection on device %d at data request #%ld\n",
            (int)getpid(), c->is_send ? "send" : "receive", c->dev, n);
    atomic_store(&c->broken, 1);
    for (int i = 0; i < c->nmrs; i++) {
        (void)c->ops->dereg_mr(c->inner, c->mrs[i]);
    }
    c->nmrs = 0;
    (void)(c->is_send ? c->ops->close_send(c->inner) : c->ops->close_recv(c->inner));
    c->inner = NULL;
}

/* What every call on a broken connection returns; logged once per connection. */
static ncclResult_t comm_failed(fn_comm_t *c, const char *call)
{
    if (!c->warned) {
        c->warned = 1;
        BR_WARN(NCCL_NET,
                "faulty-net: %s on the %s connection of device %d, which was broken on purpose "
                "(%s=%ld)",
                call, c->is_send ? "send" : "receive", c->dev,
                c->is_send ? fault_send.env : fault_recv.env,
                c->is_send ? fault_send.at : fault_recv.at);
    }
    return ncclSystemError;
}

/* Hand out inner request in (NULL: the inner plugin said "later") through a slot. */
static ncclResult_t req_wrap(fn_req_t *r, void *in, void **request)
{
    if (in == NULL) {
        req_release(r);
        *request = NULL;
        return ncclSuccess;
    }
    r->inner = in;
    *request = r;
    return ncclSuccess;
}

/* ---- Connections ---- */

static ncclResult_t comm_wrap(void *in, int is_send, int dev, const fn_ops_t *ops, void **comm_p)
{
    fn_comm_t *c;

    if (in == NULL) {
        *comm_p = NULL; /* not connected yet: the caller comes back */
        return ncclSuccess;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        BR_WARN(NCCL_NET, "faulty-net: out of memory for a connection");
        (void)(is_send ? ops->close_send(in) : ops->close_recv(in));
        return ncclSystemError;
    }
    c->is_send = is_send;
    c->dev = dev;
    c->ops = ops;
    c->inner = in;
    for (int i = 0; i < FN_REQS; i++) {
        c->reqs[i].comm = c;
    }
    *comm_p = c;
    return ncclSuccess;
}

static ncclResult_t listen_wrap(void *in, int dev, const fn_ops_t *ops, void **listen_comm)
{
    fn_listen_t *l = calloc(1, sizeof(*l));
    if (l == NULL) {
        BR_WARN(NCCL_NET, "faulty-net: out of memory for a listener");
        (void)ops->close_listen(in);
        return ncclSystemError;
    }
    l->dev = dev;
    l->ops = ops;
    l->inner = in;
    *listen_comm = l;
    return ncclSuccess;
}

static ncclResult_t fn_close_listen(void *listen_comm)
{
    fn_listen_t *l = listen_comm;
    ncclResult_t res = l->ops->close_listen(l->inner);

    free(l);
    return res;
}

static ncclResult_t comm_close(fn_comm_t *c)
{
    ncclResult_t res = ncclSuccess;

    if (c->inner != NULL) {
        res = c->is_send ? c->ops->close_send(c->inner) : c->ops->close_recv(c->inner);
    }
    free(c->mrs);
    free(c);
    return res;
}

static ncclResult_t fn_close_send(void *send_comm)
{
    return comm_close(send_comm);
}

static ncclResult_t fn_close_recv(void *recv_comm)
{
    return comm_close(recv_comm);
}

/* ---- Registrations ---- */

/* Remember a registration the inner plugin just made. */
static ncclResult_t mr_track(fn_comm_t *c, void *mhandle)
{
    if (c->nmrs == c->cap_mrs) {
        int cap = c->cap_mrs ? 2 * c->cap_mrs : 4;
        void **m = realloc(c->mrs, (size_t)cap * sizeof(*m));
        if (m == NULL) {
            BR_WARN(NCCL_NET, "faulty-net: out of memory for a registration");
            (void)c->ops->dereg_mr(c->inner, mhandle);
            return ncclSystemError;
        }
        c->mrs = m;
        c->cap_mrs = cap;
    }
    c->mrs[c->nmrs++] = mhandle;
    return ncclSuccess;
}

static ncclResult_t fn_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle)
{
    fn_comm_t *c = comm;

    if (atomic_load(&c->broken)) {
        return comm_failed(c, "regMr");
    }
    BR_CHECK(c->ops->reg_mr(c->inner, data, size, type, mhandle));
    return mr_track(c, *mhandle);
}

static ncclResult_t fn_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset,
                                     int fd, void **mhandle)
{
    fn_comm_t *c = comm;

    if (atomic_load(&c->broken)) {
        return comm_failed(c, "regMrDmaBuf");
    }
    BR_CHECK(c->ops->reg_mr_dmabuf(c->inner, data, size, type, offset, fd, mhandle));
    return mr_track(c, *mhandle);
}

static ncclResult_t fn_dereg_mr(void *comm, void *mhandle)
{
    fn_comm_t *c = comm;

    for (int i = 0; i < c->nmrs; i++) {
        if (c->mrs[i] == mhandle) {
            c->mrs[i] = c->mrs[--c->nmrs];
            return c->ops->dereg_mr(c->inner, mhandle);
        }
    }
    /* A broken connection released its registrations already. */
    if (atomic_load(&c->broken)) {
        return ncclSuccess;
    }
    BR_WARN(NCCL_NET, "faulty-net: deregMr of %p, which this connection did not register", mhandle);
    return ncclInternalError;
}

static ncclResult_t fn_get_device_mr(void *comm, void *mhandle, void **dptr_mhandle)
{
    fn_comm_t *c = comm;

    if (atomic_load(&c->broken)) {
        return comm_failed(c, "getDeviceMr");
    }
    return c->ops->get_device_mr(c->inner, mhandle, dptr_mhandle);
}

/* ---- Data path ---- */

static ncclResult_t fn_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                             void *phandle, void **request)
{
    fn_comm_t *c = send_comm;
    fn_req_t *r;
    void *in = NULL;
    ncclResult_t res;

    if (atomic_load(&c->broken)) {
        return comm_failed(c, "isend");
    }
    r = req_claim(c);
    if (r == NULL) {
        *request = NULL; /* every slot in flight: the core retries */
        return ncclSuccess;
    }
    res = c->ops->isend(c->inner, data, size, tag, mhandle, phandle, &in);
    if (res != ncclSuccess || in == NULL) {
        req_release(r);
        *request = NULL;
        return res;
    }
    /* Only posted sends count; the break takes the posted one down with the link. */
    if (size > 0 && fault_due(&fault_send, c)) {
        comm_break(c, fault_send.at);
        *request = r;
        return ncclSuccess;
    }
    return req_wrap(r, in, request);
}

static ncclResult_t fn_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                             void **mhandles, void **phandles, void **request)
{
    fn_comm_t *c = recv_comm;
    fn_req_t *r;
    void *in;
    size_t room = 0;
    ncclResult_t res;

    if (atomic_load(&c->broken)) {
        return comm_failed(c, "irecv");
    }
    r = req_claim(c);
    if (r == NULL) {
        *request = NULL;
        return ncclSuccess;
    }
    in = *request; /* NCCL may leave a hint there (NCCL_NET_OPTIONAL_RECV_COMPLETION) */
    res = c->ops->irecv(c->inner, n, data, sizes, tags, mhandles, phandles, &in);
    if (res != ncclSuccess || in == NULL) {
        req_release(r);
        *request = NULL;
        return res;
    }
    for (int i = 0; i < n; i++) {
        room += sizes[i];
    }
    if (room > 0 && fault_due(&fault_recv, c)) {
        comm_break(c, fault_recv.at);
        *request = r;
        return ncclSuccess;
    }
    return req_wrap(r, in, request);
}

static ncclResult_t fn_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                              void **request)
{
    fn_comm_t *c = recv_comm;
    fn_req_t *r;
    void *in = NULL;
    ncclResult_t res;

    if (atomic_load(&c->broken)) {
        return comm_failed(c, "iflush");
    }
    res = c->ops->iflush(c->inner, n, data, sizes, mhandles, &in);
    if (res != ncclSuccess || in == NULL) {
        *request = NULL; /* nothing to wait for */
        return res;
    }
    r = req_claim(c);
    if (r == NULL) {
        /* A flush cannot be refused for later once posted: more requests than the ABI
         * allows are in flight. */
        BR_WARN(NCCL_NET, "faulty-net: iflush with all %d request slots of the connection in use",
                FN_REQS);
        return ncclInternalError;
    }
    return req_wrap(r, in, request);
}

static ncclResult_t fn_test(void *request, int *done, int *sizes)
{
    fn_req_t *r = request;
    fn_comm_t *c = r->comm;
    ncclResult_t res;

    *done = 0;
    if (atomic_load(&c->broken)) {
        /* The slot stays with the connection, which hands out no new request now. */
        req_release(r);
        return comm_failed(c, "test");
    }
    res = c->ops->test(r->inner, done, sizes);
    if (res != ncclSuccess || *done) {
        req_release(r);
    }
    return res;
}

static ncclResult_t fn_irecv_consumed(void *recv_comm, int n, void *request)
{
    fn_comm_t *c = recv_comm;
    fn_req_t *r = request;

    if (atomic_load(&c->broken)) {
        return comm_failed(c, "irecvConsumed");
    }
    return c->ops->irecv_consumed(c->inner, n, r->inner);
}

/* ---- Per-version entry points ---- */

static ncclResult_t fn_init_v12(void **ctx, uint64_t comm_id, ncclNetCommConfig_v12_t *config,
                                ncclDebugLogger_t log, ncclProfilerCallback_t prof)
{
    BR_CHECK(fn_prepare(log, 12));
    return inner_v12->init(ctx, comm_id, config, log, prof);
}

static ncclResult_t fn_init_v11(void **ctx, uint64_t comm_id, ncclNetCommConfig_v11_t *config,
                                ncclDebugLogger_t log, ncclProfilerCallback_t prof)
{
    BR_CHECK(fn_prepare(log, 11));
    return inner_v11->init(ctx, comm_id, config, log, prof);
}

static ncclResult_t fn_init_v10(ncclDebugLogger_t log, ncclProfilerCallback_t prof)
{
    BR_CHECK(fn_prepare(log, 10));
    return inner_v10->init(log, prof);
}

static ncclResult_t fn_listen_v12(void *ctx, int dev, void *handle, void **listen_comm)
{
    void *in = NULL;
    BR_CHECK(inner_v12->listen(ctx, dev, handle, &in));
    return listen_wrap(in, dev, &ops_v12, listen_comm);
}

static ncclResult_t fn_listen_v11(void *ctx, int dev, void *handle, void **listen_comm)
{
    void *in = NULL;
    BR_CHECK(inner_v11->listen(ctx, dev, handle, &in));
    return listen_wrap(in, dev, &ops_v11, listen_comm);
}

static ncclResult_t fn_listen_v10(int dev, void *handle, void **listen_comm)
{
    void *in = NULL;
    BR_CHECK(inner_v10->listen(dev, handle, &in));
    return listen_wrap(in, dev, &ops_v10, listen_comm);
}

static ncclResult_t fn_connect_v12(void *ctx, int dev, void *handle, void **send_comm,
                                   ncclNetDeviceHandle_v12_t **dev_comm)
{
    void *in = NULL;
    BR_CHECK(inner_v12->connect(ctx, dev, handle, &in, dev_comm));
    return comm_wrap(in, 1, dev, &ops_v12, send_comm);
}

static ncclResult_t fn_connect_v11(void *ctx, int dev, void *handle, void **send_comm,
                                   ncclNetDeviceHandle_v11_t **dev_comm)
{
    void *in = NULL;
    BR_CHECK(inner_v11->connect(ctx, dev, handle, &in, dev_comm));
    return comm_wrap(in, 1, dev, &ops_v11, send_comm);
}

static ncclResult_t fn_connect_v10(int dev, ncclNetCommConfig_v10_t *config, void *handle,
                                   void **send_comm, ncclNetDeviceHandle_v10_t **dev_comm)
{
    void *in = NULL;
    BR_CHECK(inner_v10->connect(dev, config, handle, &in, dev_comm));
    return comm_wrap(in, 1, dev, &ops_v10, send_comm);
}

static ncclResult_t fn_accept_v12(void *listen_comm, void **recv_comm,
                                  ncclNetDeviceHandle_v12_t **dev_comm)
{
    fn_listen_t *l = listen_comm;
    void *in = NULL;
    BR_CHECK(inner_v12->accept(l->inner, &in, dev_comm));
    return comm_wrap(in, 0, l->dev, &ops_v12, recv_comm);
}

static ncclResult_t fn_accept_v11(void *listen_comm, void **recv_comm,
                                  ncclNetDeviceHandle_v11_t **dev_comm)
{
    fn_listen_t *l = listen_comm;
    void *in = NULL;
    BR_CHECK(inner_v11->accept(l->inner, &in, dev_comm));
    return comm_wrap(in, 0, l->dev, &ops_v11, recv_comm);
}

static ncclResult_t fn_accept_v10(void *listen_comm, void **recv_comm,
                                  ncclNetDeviceHandle_v10_t **dev_comm)
{
    fn_listen_t *l = listen_comm;
    void *in = NULL;
    BR_CHECK(inner_v10->accept(l->inner, &in, dev_comm));
    return comm_wrap(in, 0, l->dev, &ops_v10, recv_comm);
}

/* ---- The exported tables ---- */

/* Not const: the constructor may rename them, and fn_load fills the members taken from
 * the inner table; the core reads members other than the name only after init. */
__attribute__((visibility("default"))) ncclNet_v12_t ncclNetPlugin_v12 = {
    .name = "Faulty",
    .init = fn_init_v12,
    .devices = NULL, /* the members set to NULL here come from the inner table */
    .getProperties = NULL,
    .listen = fn_listen_v12,
    .connect = fn_connect_v12,
    .accept = fn_accept_v12,
    .regMr = fn_reg_mr,
    .regMrDmaBuf = NULL,
    .deregMr = fn_dereg_mr,
    .isend = fn_isend,
    .irecv = fn_irecv,
    .iflush = fn_iflush,
    .test = fn_test,
    .closeSend = fn_close_send,
    .closeRecv = fn_close_recv,
    .closeListen = fn_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = NULL,
    .finalize = NULL,
    .setNetAttr = NULL,
};

__attribute__((visibility("default"))) ncclNet_v11_t ncclNetPlugin_v11 = {
    .name = "Faulty",
    .init = fn_init_v11,
    .devices = NULL, /* the members set to NULL here come from the inner table */
    .getProperties = NULL,
    .listen = fn_listen_v11,
    .connect = fn_connect_v11,
    .accept = fn_accept_v11,
    .regMr = fn_reg_mr,
    .regMrDmaBuf = NULL,
    .deregMr = fn_dereg_mr,
    .isend = fn_isend,
    .irecv = fn_irecv,
    .iflush = fn_iflush,
    .test = fn_test,
    .closeSend = fn_close_send,
    .closeRecv = fn_close_recv,
    .closeListen = fn_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = NULL,
    .finalize = NULL,
    .setNetAttr = NULL,
};

__attribute__((visibility("default"))) ncclNet_v10_t ncclNetPlugin_v10 = {
    .name = "Faulty",
    .init = fn_init_v10,
    .devices = NULL, /* the members set to NULL here come from the inner table */
    .getProperties = NULL,
    .listen = fn_listen_v10,
    .connect = fn_connect_v10,
    .accept = fn_accept_v10,
    .regMr = fn_reg_mr,
    .regMrDmaBuf = NULL,
    .deregMr = fn_dereg_mr,
    .isend = fn_isend,
    .irecv = fn_irecv,
    .iflush = fn_iflush,
    .test = fn_test,
    .closeSend = fn_close_send,
    .closeRecv = fn_close_recv,
    .closeListen = fn_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = NULL,
};

/* What a version's wrapped connections call, and the members its table takes from the
 * inner one as they are; the optional wrapped ones only where the inner plugin has them. */
#define FN_ADOPT(ops, exp, in)                                                                     \
    do {                                                                                           \
        (ops)->reg_mr = (in)->regMr;                                                               \
        (ops)->reg_mr_dmabuf = (in)->regMrDmaBuf;                                                  \
        (ops)->dereg_mr = (in)->deregMr;                                                           \
        (ops)->isend = (in)->isend;                                                                \
        (ops)->irecv = (in)->irecv;                                                                \
        (ops)->iflush = (in)->iflush;                                                              \
        (ops)->test = (in)->test;                                                                  \
        (ops)->close_send = (in)->closeSend;                                                       \
        (ops)->close_recv = (in)->closeRecv;                                                       \
        (ops)->close_listen = (in)->closeListen;                                                   \
        (ops)->get_device_mr = (in)->getDeviceMr;                                                  \
        (ops)->irecv_consumed = (in)->irecvConsumed;                                               \
        (exp)->devices = (in)->devices;                                                            \
        (exp)->getProperties = (in)->getProperties;                                                \
        (exp)->makeVDevice = (in)->makeVDevice;                                                    \
        (exp)->regMrDmaBuf = (in)->regMrDmaBuf != NULL ? fn_reg_mr_dmabuf : NULL;                  \
        (exp)->getDeviceMr = (in)->getDeviceMr != NULL ? fn_get_device_mr : NULL;                  \
        (exp)->irecvConsumed = (in)->irecvConsumed != NULL ? fn_irecv_consumed : NULL;             \
    } while (0)

static void fn_load(void)
{
    const char *path = getenv("BRAID_TEST_INNER_NET");
    /* Never closed: the inner plugin may keep threads until the process ends. */
    void *lib = path != NULL ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;

    if (lib == NULL) {
        snprintf(load_error, sizeof(load_error), "%s", path != NULL ? dlerror() : "not set");
        return;
    }
    inner_v12 = dlsym(lib, "ncclNetPlugin_v12");
    inner_v11 = dlsym(lib, "ncclNetPlugin_v11");
    inner_v10 = dlsym(lib, "ncclNetPlugin_v10");
    if (inner_v12 != NULL) {
        FN_ADOPT(&ops_v12, &ncclNetPlugin_v12, inner_v12);
        ncclNetPlugin_v12.finalize = inner_v12->finalize;
        ncclNetPlugin_v12.setNetAttr = inner_v12->setNetAttr;
    }
    if (inner_v11 != NULL) {
        FN_ADOPT(&ops_v11, &ncclNetPlugin_v11, inner_v11);
        ncclNetPlugin_v11.finalize = inner_v11->finalize;
        ncclNetPlugin_v11.setNetAttr = inner_v11->setNetAttr;
    }
    if (inner_v10 != NULL) {
        FN_ADOPT(&ops_v10, &ncclNetPlugin_v10, inner_v10);
    }
}

/* At load: the faults, and the name, which the core reads before init. */
__attribute__((constructor)) static void fn_setup(void)
{
    const char *name = getenv("FAULTY_NET_NAME");
    long v;

    if (name != NULL && name[0] != '\0') {
        ncclNetPlugin_v12.name = name;
        ncclNetPlugin_v11.name = name;
        ncclNetPlugin_v10.name = name;
    }
    fault_send.at = (v = env_long(fault_send.env, 1)) > 0 ? v : 0;
    fault_recv.at = (v = env_long(fault_recv.env, 1)) > 0 ? v : 0;
    fault_dev = (int)env_long("FAULTY_NET_FAIL_DEV", 0);
}
