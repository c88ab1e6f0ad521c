/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A tiny in-memory loopback net plugin for the loader's tests, built several times with
 * different definitions:
 *   TESTNET_V8 .. TESTNET_V12  export ncclNetPlugin_vN (any combination)
 *   TESTNET_NAME               the network name (default "TestNet")
 *   TESTNET_INIT_FAIL          init returns ncclSystemError
 *   TESTNET_NDEV               devices reported (default 1)
 *   TESTNET_FAIL_AFTER         test() fails once this many receives completed (0: never)
 *   TESTNET_MINIMAL            every optional member NULL
 *   TESTNET_PROF_EVENTS        (v12) each isend with a phandle reports a NetPlugin event
 *                              (start, update, stop) through the profiler callback
 * Connections live in this process: the listen handle carries the listen comm's address.
 * Each isend copies its data into a queue that the matching irecv drains, in order.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugin_api/net/net.h"
#include "plugin_api/profiler/profiler_common.h"
#include "testnet.h"

#define EXPORT __attribute__((visibility("default")))

#ifndef TESTNET_NAME
#define TESTNET_NAME "TestNet"
#endif
#ifndef TESTNET_NDEV
#define TESTNET_NDEV 1
#endif
#ifndef TESTNET_FAIL_AFTER
#define TESTNET_FAIL_AFTER 0
#endif

EXPORT testnet_stats_t testnet_stats;

typedef struct msg {
    struct msg *next;
    size_t size;
    char data[];
} msg_t;

/* One direction of a connection: the queue shared by its send and recv comms. */
typedef struct {
    pthread_mutex_t lock;
    msg_t *head, *tail;
    int refs;
} pipe_t;

typedef struct {
    pipe_t *pending; /* made by connect, taken by accept */
} listen_comm_t;

typedef struct {
    pipe_t *pipe;
} comm_t;

typedef struct {
    int is_send;
    comm_t *comm;
    void *buf;
    size_t size; /* bytes sent, or receive capacity */
} req_t;

static pthread_mutex_t recv_lock = PTHREAD_MUTEX_INITIALIZER;
static int recvs_done;

static void pipe_release(pipe_t *p)
{
    int last;
    pthread_mutex_lock(&p->lock);
    last = --p->refs == 0;
    pthread_mutex_unlock(&p->lock);
    if (last) {
        while (p->head != NULL) {
            msg_t *m = p->head;
            p->head = m->next;
            free(m);
        }
        pthread_mutex_destroy(&p->lock);
        free(p);
    }
}

static ncclResult_t tn_init_common(void)
{
    testnet_stats.init_calls++;
#ifdef TESTNET_INIT_FAIL
    return ncclSystemError;
#else
    return ncclSuccess;
#endif
}

static ncclResult_t tn_devices(int *ndev)
{
    *ndev = TESTNET_NDEV;
    return ncclSuccess;
}

static ncclResult_t tn_listen(int dev, void *handle, void **listen_comm)
{
    listen_comm_t *lc = calloc(1, sizeof(*lc));
    (void)dev;
    if (lc == NULL) {
        return ncclSystemError;
    }
    memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
    memcpy(handle, &lc, sizeof(lc));
    *listen_comm = lc;
    return ncclSuccess;
}

static ncclResult_t tn_connect(int dev, void *handle, void **send_comm)
{
    listen_comm_t *lc;
    comm_t *c = calloc(1, sizeof(*c));
    pipe_t *p = calloc(1, sizeof(*p));
    (void)dev;
    if (c == NULL || p == NULL) {
        free(c);
        free(p);
        return ncclSystemError;
    }
    memcpy(&lc, handle, sizeof(lc));
    pthread_mutex_init(&p->lock, NULL);
    p->refs = 2;
    c->pipe = p;
    lc->pending = p;
    *send_comm = c;
    return ncclSuccess;
}

static ncclResult_t tn_accept(void *listen_comm, void **recv_comm)
{
    listen_comm_t *lc = listen_comm;
    comm_t *c;
    if (lc->pending == NULL) {
        *recv_comm = NULL; /* not yet: call again */
        return ncclSuccess;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return ncclSystemError;
    }
    c->pipe = lc->pending;
    lc->pending = NULL;
    *recv_comm = c;
    return ncclSuccess;
}

static ncclResult_t tn_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle)
{
    (void)comm;
    (void)data;
    (void)size;
    (void)type;
    *mhandle = &testnet_stats; /* any non-NULL marker */
    return ncclSuccess;
}

static ncclResult_t tn_dereg_mr(void *comm, void *mhandle)
{
    (void)comm;
    (void)mhandle;
    return ncclSuccess;
}

static ncclResult_t tn_isend(void *send_comm, void *data, size_t size, void **request)
{
    comm_t *c = send_comm;
    msg_t *m = malloc(sizeof(*m) + size);
    req_t *r = calloc(1, sizeof(*r));
    if (m == NULL || r == NULL) {
        free(m);
        free(r);
        return ncclSystemError;
    }
    testnet_stats.isend_calls++;
    testnet_stats.last_isend_size = (long long)size;
    m->next = NULL;
    m->size = size;
    if (size > 0) {
        memcpy(m->data, data, size);
    }
    pthread_mutex_lock(&c->pipe->lock);
    if (c->pipe->tail != NULL) {
        c->pipe->tail->next = m;
    } else {
        c->pipe->head = m;
    }
    c->pipe->tail = m;
    pthread_mutex_unlock(&c->pipe->lock);
    r->is_send = 1;
    r->comm = c;
    r->size = size;
    *request = r;
    return ncclSuccess;
}

static ncclResult_t tn_irecv(void *recv_comm, int n, void **data, size_t *sizes, void **request)
{
    req_t *r;
    testnet_stats.last_irecv_hint = *request;
    if (n != 1) {
        return ncclInternalError;
    }
    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        return ncclSystemError;
    }
    r->comm = recv_comm;
    r->buf = data[0];
    r->size = sizes[0];
    *request = r;
    return ncclSuccess;
}

static ncclResult_t tn_test(void *request, int *done, int *sizes)
{
    req_t *r = request;
    msg_t *m;

    *done = 0;
    if (r->is_send) {
        *done = 1;
        if (sizes != NULL) {
            sizes[0] = (int)r->size;
        }
        free(r);
        return ncclSuccess;
    }
    pthread_mutex_lock(&recv_lock);
    if (TESTNET_FAIL_AFTER > 0 && recvs_done >= TESTNET_FAIL_AFTER) {
        pthread_mutex_unlock(&recv_lock);
        free(r);                /* a failed request is dead */
        return ncclSystemError; /* the connection "broke" */
    }
    pthread_mutex_unlock(&recv_lock);
    pthread_mutex_lock(&r->comm->pipe->lock);
    m = r->comm->pipe->head;
    if (m != NULL) {
        r->comm->pipe->head = m->next;
        if (m->next == NULL) {
            r->comm->pipe->tail = NULL;
        }
    }
    pthread_mutex_unlock(&r->comm->pipe->lock);
    if (m == NULL) {
        return ncclSuccess;
    }
    if (m->size > r->size) {
        free(m);
        free(r);
        return ncclInternalError; /* message larger than the posted buffer */
    }
    if (m->size > 0) {
        memcpy(r->buf, m->data, m->size);
    }
    *done = 1;
    if (sizes != NULL) {
        sizes[0] = (int)m->size;
    }
    free(m);
    free(r);
    pthread_mutex_lock(&recv_lock);
    recvs_done++;
    pthread_mutex_unlock(&recv_lock);
    return ncclSuccess;
}

static ncclResult_t tn_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                              void **request)
{
    (void)recv_comm;
    (void)n;
    (void)data;
    (void)sizes;
    (void)mhandles;
    *request = NULL;
    return ncclSuccess;
}

static ncclResult_t tn_close(void *comm)
{
    comm_t *c = comm;
    pipe_release(c->pipe);
    free(c);
    return ncclSuccess;
}

static ncclResult_t tn_close_listen(void *listen_comm)
{
    free(listen_comm);
    return ncclSuccess;
}

#ifndef TESTNET_MINIMAL
static ncclResult_t tn_irecv_consumed(void *recv_comm, int n, void *request)
{
    (void)recv_comm;
    (void)n;
    (void)request;
    testnet_stats.consumed_calls++;
    return ncclSuccess;
}
#define TN_CONSUMED tn_irecv_consumed
#else
#define TN_CONSUMED NULL
#endif

/* Fields every version has, with a per-version speed so tests see which path ran. */
#define TN_PROPS_COMMON(p, dev, ver)                                                               \
    do {                                                                                           \
        memset((p), 0, sizeof(*(p)));                                                              \
        (p)->name = "testnet0";                                                                    \
        (p)->pciPath = NULL;                                                                       \
        (p)->guid = 0x1234 + (uint64_t)(dev);                                                      \
        (p)->ptrSupport = NCCL_PTR_HOST;                                                           \
        (p)->speed = 1000 * (ver);                                                                 \
        (p)->port = 1;                                                                             \
        (p)->maxComms = 1024;                                                                      \
        (p)->maxRecvs = 1;                                                                         \
        (p)->netDeviceType = NCCL_NET_DEVICE_HOST;                                                 \
    } while (0)

/* Plugins that know the size limits report 2 GiB, unlike the 1 GiB default of <= v8. */
#define TN_MAX_P2P ((size_t)2 << 30)

/* ---- v12 and v11: per-comm init ---- */

#if defined(TESTNET_V12) || defined(TESTNET_V11)
static int tn_ctx_marker;

static __attribute__((unused)) ncclProfilerCallback_t tn_prof_cb; /* set by v12 init */

static ncclResult_t tn_init_percomm(void **ctx, uint64_t comm_id, int traffic_class)
{
    testnet_stats.last_comm_id = comm_id;
    testnet_stats.last_traffic_class = traffic_class;
    *ctx = &tn_ctx_marker;
    return tn_init_common();
}

static ncclResult_t tn_finalize(void *ctx)
{
    (void)ctx;
    testnet_stats.finalize_calls++;
    return ncclSuccess;
}

static ncclResult_t tn_listen_ctx(void *ctx, int dev, void *handle, void **listen_comm)
{
    if (ctx != &tn_ctx_marker) {
        return ncclInternalError;
    }
    return tn_listen(dev, handle, listen_comm);
}

static ncclResult_t tn_isend_ph(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                                void *phandle, void **request)
{
    (void)tag;
    (void)mhandle;
    testnet_stats.last_phandle = phandle;
#ifdef TESTNET_PROF_EVENTS
    if (phandle != NULL && tn_prof_cb != NULL) {
        void *ev = NULL;
        int64_t id = (int64_t)(NCCL_PROFILER_NET_TYPE_SOCK | 1);
        tn_prof_cb(&ev, ncclProfilerNetEventStart, phandle, id, &testnet_stats);
        tn_prof_cb(&ev, ncclProfilerNetEventUpdate, phandle, id, &testnet_stats.isend_calls);
        tn_prof_cb(&ev, ncclProfilerNetEventStop, phandle, id, NULL);
    }
#endif
    return tn_isend(send_comm, data, size, request);
}

static ncclResult_t tn_irecv_ph(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                                void **mhandles, void **phandles, void **request)
{
    (void)tags;
    (void)mhandles;
    (void)phandles;
    return tn_irecv(recv_comm, n, data, sizes, request);
}
#endif

#ifdef TESTNET_V12
static ncclResult_t tn_init_v12(void **ctx, uint64_t comm_id, ncclNetCommConfig_v12_t *config,
                                ncclDebugLogger_t log, ncclProfilerCallback_t prof)
{
    (void)log;
    tn_prof_cb = prof;
#ifdef TESTNET_INIT_FAIL
    /* Says why, as a plugin should: the reason must reach the core's report. */
    log(NCCL_LOG_WARN, NCCL_ALL, __FILE__, __LINE__, "testnet: no fabric on purpose");
#endif
    return tn_init_percomm(ctx, comm_id, config != NULL ? config->trafficClass : -2);
}

static ncclResult_t tn_props_v12(int dev, ncclNetProperties_v12_t *p)
{
    TN_PROPS_COMMON(p, dev, 12);
    p->vProps.ndevs = 1;
    p->vProps.devs[0] = dev;
    p->maxP2pBytes = TN_MAX_P2P;
    p->maxCollBytes = TN_MAX_P2P;
    p->maxMultiRequestSize = 1;
    p->railId = 3;
    p->planeId = 4;
    return ncclSuccess;
}

static ncclResult_t tn_connect_v12(void *ctx, int dev, void *handle, void **send_comm,
                                   ncclNetDeviceHandle_v12_t **dev_comm)
{
    (void)ctx;
    (void)dev_comm;
    return tn_connect(dev, handle, send_comm);
}

static ncclResult_t tn_accept_v12(void *listen_comm, void **recv_comm,
                                  ncclNetDeviceHandle_v12_t **dev_comm)
{
    (void)dev_comm;
    return tn_accept(listen_comm, recv_comm);
}

EXPORT const ncclNet_v12_t ncclNetPlugin_v12 = {
    .name = TESTNET_NAME,
    .init = tn_init_v12,
    .devices = tn_devices,
    .getProperties = tn_props_v12,
    .listen = tn_listen_ctx,
    .connect = tn_connect_v12,
    .accept = tn_accept_v12,
    .regMr = tn_reg_mr,
    .regMrDmaBuf = NULL,
    .deregMr = tn_dereg_mr,
    .isend = tn_isend_ph,
    .irecv = tn_irecv_ph,
    .iflush = tn_iflush,
    .test = tn_test,
    .closeSend = tn_close,
    .closeRecv = tn_close,
    .closeListen = tn_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = TN_CONSUMED,
    .makeVDevice = NULL,
    .finalize = tn_finalize,
    .setNetAttr = NULL,
};
#endif

#ifdef TESTNET_V11
static ncclResult_t tn_init_v11(void **ctx, uint64_t comm_id, ncclNetCommConfig_v11_t *config,
                                ncclDebugLogger_t log, ncclProfilerCallback_t prof)
{
    (void)log;
    (void)prof;
    return tn_init_percomm(ctx, comm_id, config != NULL ? config->trafficClass : -2);
}

static ncclResult_t tn_props_v11(int dev, ncclNetProperties_v11_t *p)
{
    TN_PROPS_COMMON(p, dev, 11);
    p->vProps.ndevs = 1;
    p->vProps.devs[0] = dev;
    p->maxP2pBytes = TN_MAX_P2P;
    p->maxCollBytes = TN_MAX_P2P;
    p->maxMultiRequestSize = 1;
    return ncclSuccess;
}

static ncclResult_t tn_connect_v11(void *ctx, int dev, void *handle, void **send_comm,
                                   ncclNetDeviceHandle_v11_t **dev_comm)
{
    (void)ctx;
    (void)dev_comm;
    return tn_connect(dev, handle, send_comm);
}

static ncclResult_t tn_accept_v11(void *listen_comm, void **recv_comm,
                                  ncclNetDeviceHandle_v11_t **dev_comm)
{
    (void)dev_comm;
    return tn_accept(listen_comm, recv_comm);
}

EXPORT const ncclNet_v11_t ncclNetPlugin_v11 = {
    .name = TESTNET_NAME,
    .init = tn_init_v11,
    .devices = tn_devices,
    .getProperties = tn_props_v11,
    .listen = tn_listen_ctx,
    .connect = tn_connect_v11,
    .accept = tn_accept_v11,
    .regMr = tn_reg_mr,
    .deregMr = tn_dereg_mr,
    .isend = tn_isend_ph,
    .irecv = tn_irecv_ph,
    .iflush = tn_iflush,
    .test = tn_test,
    .closeSend = tn_close,
    .closeRecv = tn_close,
    .closeListen = tn_close_listen,
    .irecvConsumed = TN_CONSUMED,
    .finalize = tn_finalize,
};
#endif

/* ---- v10: process-wide init(logger, profiler callback), config with connect ---- */

#ifdef TESTNET_V10
/* NCCL's v10 init: process-wide. */
static ncclResult_t tn_init_v10(ncclDebugLogger_t log, ncclProfilerCallback_t prof)
{
    (void)log;
    (void)prof;
    return tn_init_common();
}

static ncclResult_t tn_props_v10(int dev, ncclNetProperties_v10_t *p)
{
    TN_PROPS_COMMON(p, dev, 10);
    p->vProps.ndevs = 1;
    p->vProps.devs[0] = dev;
    p->maxP2pBytes = TN_MAX_P2P;
    p->maxCollBytes = TN_MAX_P2P;
    return ncclSuccess;
}

static ncclResult_t tn_connect_v10(int dev, ncclNetCommConfig_v10_t *config, void *handle,
                                   void **send_comm, ncclNetDeviceHandle_v10_t **dev_comm)
{
    (void)dev_comm;
    testnet_stats.last_traffic_class = config != NULL ? config->trafficClass : -2;
    return tn_connect(dev, handle, send_comm);
}

static ncclResult_t tn_accept_v10(void *listen_comm, void **recv_comm,
                                  ncclNetDeviceHandle_v10_t **dev_comm)
{
    (void)dev_comm;
    return tn_accept(listen_comm, recv_comm);
}

static ncclResult_t tn_isend_v10(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                                 void *phandle, void **request)
{
    (void)tag;
    (void)mhandle;
    testnet_stats.last_phandle = phandle;
    return tn_isend(send_comm, data, size, request);
}

static ncclResult_t tn_irecv_v10(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                                 void **mhandles, void **phandles, void **request)
{
    (void)tags;
    (void)mhandles;
    (void)phandles;
    return tn_irecv(recv_comm, n, data, sizes, request);
}

EXPORT const ncclNet_v10_t ncclNetPlugin_v10 = {
    .name = TESTNET_NAME,
    .init = tn_init_v10,
    .devices = tn_devices,
    .getProperties = tn_props_v10,
    .listen = tn_listen,
    .connect = tn_connect_v10,
    .accept = tn_accept_v10,
    .regMr = tn_reg_mr,
    .deregMr = tn_dereg_mr,
    .isend = tn_isend_v10,
    .irecv = tn_irecv_v10,
    .iflush = tn_iflush,
    .test = tn_test,
    .closeSend = tn_close,
    .closeRecv = tn_close,
    .closeListen = tn_close_listen,
    .irecvConsumed = TN_CONSUMED,
};
#endif

/* ---- v9 and v8: init(logger), no config, no profiler handles ---- */

#if defined(TESTNET_V9) || defined(TESTNET_V8)
static ncclResult_t tn_init_old(ncclDebugLogger_t log)
{
    (void)log;
    return tn_init_common();
}
#endif

#ifdef TESTNET_V9
static ncclResult_t tn_props_v9(int dev, ncclNetProperties_v9_t *p)
{
    TN_PROPS_COMMON(p, dev, 9);
    p->vProps.ndevs = 1;
    p->vProps.devs[0] = dev;
    p->maxP2pBytes = TN_MAX_P2P;
    p->maxCollBytes = TN_MAX_P2P;
    return ncclSuccess;
}

static ncclResult_t tn_connect_v9(int dev, void *handle, void **send_comm,
                                  ncclNetDeviceHandle_v9_t **dev_comm)
{
    (void)dev_comm;
    return tn_connect(dev, handle, send_comm);
}

static ncclResult_t tn_accept_v9(void *listen_comm, void **recv_comm,
                                 ncclNetDeviceHandle_v9_t **dev_comm)
{
    (void)dev_comm;
    return tn_accept(listen_comm, recv_comm);
}

static ncclResult_t tn_isend_v9(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                                void **request)
{
    (void)tag;
    (void)mhandle;
    return tn_isend(send_comm, data, size, request);
}

static ncclResult_t tn_irecv_v9(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                                void **mhandles, void **request)
{
    (void)tags;
    (void)mhandles;
    return tn_irecv(recv_comm, n, data, sizes, request);
}

EXPORT const ncclNet_v9_t ncclNetPlugin_v9 = {
    .name = TESTNET_NAME,
    .init = tn_init_old,
    .devices = tn_devices,
    .getProperties = tn_props_v9,
    .listen = tn_listen,
    .connect = tn_connect_v9,
    .accept = tn_accept_v9,
    .regMr = tn_reg_mr,
    .deregMr = tn_dereg_mr,
    .isend = tn_isend_v9,
    .irecv = tn_irecv_v9,
    .iflush = tn_iflush,
    .test = tn_test,
    .closeSend = tn_close,
    .closeRecv = tn_close,
    .closeListen = tn_close_listen,
    .irecvConsumed = TN_CONSUMED,
};
#endif

#ifdef TESTNET_V8
static ncclResult_t tn_props_v8(int dev, ncclNetProperties_v8_t *p)
{
    TN_PROPS_COMMON(p, dev, 8);
    return ncclSuccess;
}

static ncclResult_t tn_connect_v8(int dev, void *handle, void **send_comm,
                                  ncclNetDeviceHandle_v8_t **dev_comm)
{
    (void)dev_comm;
    return tn_connect(dev, handle, send_comm);
}

static ncclResult_t tn_accept_v8(void *listen_comm, void **recv_comm,
                                 ncclNetDeviceHandle_v8_t **dev_comm)
{
    (void)dev_comm;
    return tn_accept(listen_comm, recv_comm);
}

/* v8 sizes are int: a negative one means the core truncated a size_t. */
static ncclResult_t tn_isend_v8(void *send_comm, void *data, int size, int tag, void *mhandle,
                                void **request)
{
    (void)tag;
    (void)mhandle;
    if (size < 0) {
        return ncclInternalError;
    }
    return tn_isend(send_comm, data, (size_t)size, request);
}

static ncclResult_t tn_irecv_v8(void *recv_comm, int n, void **data, int *sizes, int *tags,
                                void **mhandles, void **request)
{
    size_t s;
    (void)tags;
    (void)mhandles;
    if (n != 1 || sizes[0] < 0) {
        return ncclInternalError;
    }
    s = (size_t)sizes[0];
    return tn_irecv(recv_comm, n, data, &s, request);
}

EXPORT const ncclNet_v8_t ncclNetPlugin_v8 = {
    .name = TESTNET_NAME,
    .init = tn_init_old,
    .devices = tn_devices,
    .getProperties = tn_props_v8,
    .listen = tn_listen,
    .connect = tn_connect_v8,
    .accept = tn_accept_v8,
    .regMr = tn_reg_mr,
    .deregMr = tn_dereg_mr,
    .isend = tn_isend_v8,
    .irecv = tn_irecv_v8,
    .iflush = tn_iflush,
    .test = tn_test,
    .closeSend = tn_close,
    .closeRecv = tn_close,
    .closeListen = tn_close_listen,
    .irecvConsumed = TN_CONSUMED,
};
#endif
