/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A strict test net plugin (ncclNetPlugin_v10, network "Strict"): it forwards everything
 * to Braid's socket plugin (BRAID_TEST_INNER_NET, a path) and checks how the core uses a
 * net plugin, as aws-ofi-nccl would complain about it:
 *
 *  - closeSend/closeRecv with a request of that connection not yet tested to completion
 *    (a receive left posted, a send never tested) is a violation;
 *  - testing a request again after it reported done is a violation (it is the plugin's);
 *  - it reports BRAID_TEST_STRICT_NDEV devices (default 3, "strict0", "strict1", ...,
 *    port 1), all carried by the inner plugin's device 0, and counts the bytes each
 *    device carried.
 *
 * After every close it rewrites BRAID_TEST_STRICT_DIR/strict.<pid>: one "dev D sent S recv R
 * conns C" line per device, "open N" (connections not closed yet) and one "violation ..."
 * line per violation (also printed on stderr), for tests/plugins-e2e/net_strict.sh.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plugin_api/net/net_v10.h"

#define STRICT_MAX_DEVS 8
#define STRICT_MAX_VIOLATIONS 16
#define STRICT_REQ_MAGIC 0x5354524943545251ull /* live request */
#define STRICT_REQ_DEAD 0x444541445245510aull  /* tested to completion */

typedef struct {
    void *inner;
    int dev;
    int is_send;
    int outstanding; /* requests handed out and not yet tested to completion */
} strict_comm_t;

typedef struct {
    void *inner;
    int dev;
} strict_listen_t;

typedef struct strict_req {
    uint64_t magic;
    void *inner;
    strict_comm_t *comm;
    size_t size;             /* send: bytes posted */
    struct strict_req *next; /* on the free list */
} strict_req_t;

static const ncclNet_v10_t *inner;
static ncclDebugLogger_t logger;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int ndev = 3;
static uint64_t sent[STRICT_MAX_DEVS], recvd[STRICT_MAX_DEVS];
static int conns[STRICT_MAX_DEVS];
static int open_comms;
static int nviolations;
static char violations[STRICT_MAX_VIOLATIONS][200];
static char dev_names[STRICT_MAX_DEVS][16];
/* Requests tested to completion, reused oldest first: a second test of one that is not
 * reused yet is caught by its magic rather than reading freed memory. */
static strict_req_t *free_head, *free_tail;
static int nfree;

/* Rewrite the report (lock held). */
static void report_locked(void)
{
    const char *dir = getenv("BRAID_TEST_STRICT_DIR");
    char path[512], tmp[560];
    if (dir == NULL) {
        return;
    }
    snprintf(path, sizeof(path), "%s/strict.%d", dir, (int)getpid());
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (f == NULL) {
        return;
    }
    for (int d = 0; d < ndev; d++) {
        fprintf(f, "dev %d sent %llu recv %llu conns %d\n", d, (unsigned long long)sent[d],
                (unsigned long long)recvd[d], conns[d]);
    }
    fprintf(f, "open %d\n", open_comms);
    for (int i = 0; i < nviolations && i < STRICT_MAX_VIOLATIONS; i++) {
        fprintf(f, "violation %s\n", violations[i]);
    }
    fclose(f);
    rename(tmp, path);
}

__attribute__((format(printf, 1, 2))) static void violation_locked(const char *fmt, ...)
{
    char text[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    fprintf(stderr, "net-strict: pid %d: VIOLATION: %s\n", (int)getpid(), text);
    if (nviolations < STRICT_MAX_VIOLATIONS) {
        snprintf(violations[nviolations], sizeof(violations[0]), "%s", text);
    }
    nviolations++;
    report_locked();
}

static ncclResult_t strict_init(ncclDebugLogger_t log, ncclProfilerCallback_t prof)
{
    const char *path = getenv("BRAID_TEST_INNER_NET");
    const char *n = getenv("BRAID_TEST_STRICT_NDEV");
    void *lib = path != NULL ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;

    (void)prof;
    logger = log;
    inner = lib != NULL ? dlsym(lib, "ncclNetPlugin_v10") : NULL;
    if (inner == NULL) {
        if (log != NULL) {
            log(NCCL_LOG_WARN, NCCL_ALL, __FILE__, __LINE__,
                "net strict test plugin: BRAID_TEST_INNER_NET=%s has no ncclNetPlugin_v10",
                path != NULL ? path : "(unset)");
        }
        return ncclInvalidUsage;
    }
    if (n != NULL && atoi(n) >= 1 && atoi(n) <= STRICT_MAX_DEVS) {
        ndev = atoi(n);
    }
    for (int d = 0; d < STRICT_MAX_DEVS; d++) {
        snprintf(dev_names[d], sizeof(dev_names[d]), "strict%d", d);
    }
    return inner->init(log, NULL);
}

static ncclResult_t strict_devices(int *n)
{
    *n = ndev;
    return ncclSuccess;
}

static ncclResult_t strict_props(int dev, ncclNetProperties_v10_t *p)
{
    if (dev < 0 || dev >= ndev) {
        return ncclInvalidArgument;
    }
    ncclResult_t res = inner->getProperties(0, p);
    if (res != ncclSuccess) {
        return res;
    }
    p->name = dev_names[dev];
    p->port = 1;
    p->guid = (uint64_t)dev;
    p->vProps.ndevs = 1;
    p->vProps.devs[0] = dev;
    return ncclSuccess;
}

static ncclResult_t strict_listen(int dev, void *handle, void **listen_comm)
{
    strict_listen_t *l;
    if (dev < 0 || dev >= ndev) {
        return ncclInvalidArgument;
    }
    l = calloc(1, sizeof(*l));
    if (l == NULL) {
        return ncclSystemError;
    }
    ncclResult_t res = inner->listen(0, handle, &l->inner);
    if (res != ncclSuccess) {
        free(l);
        return res;
    }
    l->dev = dev;
    *listen_comm = l;
    return ncclSuccess;
}

/* Wrap a connection the inner plugin just made (NULL stays NULL: not yet). */
static ncclResult_t wrap_comm(void *in, int dev, int is_send, void **comm_p)
{
    strict_comm_t *c;
    if (in == NULL) {
        *comm_p = NULL;
        return ncclSuccess;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return ncclSystemError;
    }
    c->inner = in;
    c->dev = dev;
    c->is_send = is_send;
    pthread_mutex_lock(&lock);
    open_comms++;
    conns[dev]++;
    pthread_mutex_unlock(&lock);
    *comm_p = c;
    return ncclSuccess;
}

static ncclResult_t strict_connect(int dev, ncclNetCommConfig_v10_t *config, void *handle,
                                   void **send_comm, ncclNetDeviceHandle_v10_t **dev_comm)
{
    void *in = NULL;
    (void)dev_comm;
    if (dev < 0 || dev >= ndev) {
        return ncclInvalidArgument;
    }
    ncclResult_t res = inner->connect(0, config, handle, &in, NULL);
    if (res != ncclSuccess) {
        return res;
    }
    return wrap_comm(in, dev, 1, send_comm);
}

static ncclResult_t strict_accept(void *listen_comm, void **recv_comm,
                                  ncclNetDeviceHandle_v10_t **dev_comm)
{
    strict_listen_t *l = listen_comm;
    void *in = NULL;
    (void)dev_comm;
    ncclResult_t res = inner->accept(l->inner, &in, NULL);
    if (res != ncclSuccess) {
        return res;
    }
    return wrap_comm(in, l->dev, 0, recv_comm);
}

static ncclResult_t strict_reg(void *comm, void *data, size_t size, int type, void **mhandle)
{
    return inner->regMr(((strict_comm_t *)comm)->inner, data, size, type, mhandle);
}

static ncclResult_t strict_dereg(void *comm, void *mhandle)
{
    return inner->deregMr(((strict_comm_t *)comm)->inner, mhandle);
}

static ncclResult_t wrap_req(strict_comm_t *c, void *in, size_t size, void **request)
{
    strict_req_t *r;
    if (in == NULL) {
        *request = NULL;
        return ncclSuccess;
    }
    pthread_mutex_lock(&lock);
    if (nfree > 64) {
        r = free_head;
        free_head = r->next;
        nfree--;
    } else if ((r = calloc(1, sizeof(*r))) == NULL) {
        pthread_mutex_unlock(&lock);
        return ncclSystemError;
    }
    r->magic = STRICT_REQ_MAGIC;
    r->inner = in;
    r->comm = c;
    r->size = size;
    r->next = NULL;
    c->outstanding++;
    pthread_mutex_unlock(&lock);
    *request = r;
    return ncclSuccess;
}

static ncclResult_t strict_isend(void *comm, void *data, size_t size, int tag, void *mhandle,
                                 void *phandle, void **request)
{
    strict_comm_t *c = comm;
    void *in = NULL;
    ncclResult_t res = inner->isend(c->inner, data, size, tag, mhandle, phandle, &in);
    if (res != ncclSuccess) {
        return res;
    }
    return wrap_req(c, in, size, request);
}

static ncclResult_t strict_irecv(void *comm, int n, void **data, size_t *sizes, int *tags,
                                 void **mhandles, void **phandles, void **request)
{
    strict_comm_t *c = comm;
    void *in = NULL;
    ncclResult_t res = inner->irecv(c->inner, n, data, sizes, tags, mhandles, phandles, &in);
    if (res != ncclSuccess) {
        return res;
    }
    return wrap_req(c, in, 0, request);
}

static ncclResult_t strict_iflush(void *comm, int n, void **data, int *sizes, void **mhandles,
                                  void **request)
{
    return inner->iflush(((strict_comm_t *)comm)->inner, n, data, sizes, mhandles, request);
}

static ncclResult_t strict_test(void *request, int *done, int *sizes)
{
    strict_req_t *r = request;
    int got[8] = {0};

    if (r == NULL || r->magic != STRICT_REQ_MAGIC) {
        pthread_mutex_lock(&lock);
        violation_locked("test() of a request that is not live (already reported done?)");
        pthread_mutex_unlock(&lock);
        return ncclInternalError;
    }
    ncclResult_t res = inner->test(r->inner, done, got);
    if (res != ncclSuccess || *done) {
        strict_comm_t *c = r->comm;
        pthread_mutex_lock(&lock);
        c->outstanding--;
        if (res == ncclSuccess) {
            if (c->is_send) {
                sent[c->dev] += r->size;
            } else {
                recvd[c->dev] += (uint64_t)got[0];
            }
        }
        r->magic = STRICT_REQ_DEAD;
        if (free_tail != NULL) {
            free_tail->next = r;
        } else {
            free_head = r;
        }
        free_tail = r;
        nfree++;
        pthread_mutex_unlock(&lock);
    }
    if (sizes != NULL && res == ncclSuccess && *done) {
        sizes[0] = got[0];
    }
    return res;
}

static ncclResult_t close_comm(strict_comm_t *c, const char *what)
{
    ncclResult_t res;
    pthread_mutex_lock(&lock);
    if (c->outstanding > 0) {
        violation_locked("%s on device %d with %d requests not tested to completion", what, c->dev,
                         c->outstanding);
    }
    open_comms--;
    pthread_mutex_unlock(&lock);
    res = c->is_send ? inner->closeSend(c->inner) : inner->closeRecv(c->inner);
    pthread_mutex_lock(&lock);
    report_locked();
    pthread_mutex_unlock(&lock);
    free(c);
    return res;
}

static ncclResult_t strict_close_send(void *comm)
{
    return close_comm(comm, "closeSend");
}

static ncclResult_t strict_close_recv(void *comm)
{
    return close_comm(comm, "closeRecv");
}

static ncclResult_t strict_close_listen(void *comm)
{
    strict_listen_t *l = comm;
    ncclResult_t res = inner->closeListen(l->inner);
    free(l);
    return res;
}

__attribute__((visibility("default"))) const ncclNet_v10_t ncclNetPlugin_v10 = {
    .name = "Strict",
    .init = strict_init,
    .devices = strict_devices,
    .getProperties = strict_props,
    .listen = strict_listen,
    .connect = strict_connect,
    .accept = strict_accept,
    .regMr = strict_reg,
    .regMrDmaBuf = NULL,
    .deregMr = strict_dereg,
    .isend = strict_isend,
    .irecv = strict_irecv,
    .iflush = strict_iflush,
    .test = strict_test,
    .closeSend = strict_close_send,
    .closeRecv = strict_close_recv,
    .closeListen = strict_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = NULL,
};
