/* SPDX-License-Identifier: Apache-2.0 */
/*
 * netofi_perf: throughput and latency of a net plugin between two processes on this host
 * (a benchmark, not a test). Usage: netofi_perf path/to/libnccl-net-ofi.so [seconds]
 * Rank 0 (parent) and rank 1 (forked child) each open one connection towards the other,
 * exchanging listen handles through pipes, then measure:
 *   - ping-pong latency for 8-byte messages (half the round trip),
 *   - one-way bandwidth for several sizes up to 64 MiB, WINDOW messages in flight,
 *     timed on the sender until the receiver's final 8-byte acknowledgement.
 * The provider is whatever the plugin picks (set FI_PROVIDER to choose).
 */
#include <dlfcn.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "plugin_api/net/net.h"

#define WINDOW 4
#define MAX_SIZE ((size_t)64 << 20)

static const ncclNet_v12_t *net;

static void logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                   const char *fmt, ...)
{
    va_list ap;

    (void)flags;
    if (level != NCCL_LOG_WARN && getenv("NETOFI_PERF_VERBOSE") == NULL) {
        return;
    }
    va_start(ap, fmt);
    fprintf(stderr, "%s:%d ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define CHECK(call)                                                                                \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        if (r_ != ncclSuccess) {                                                                   \
            fprintf(stderr, "%s failed: %d\n", #call, (int)r_);                                    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

typedef struct {
    void *sc, *rc, *smh, *rmh;
    char *sbuf, *rbuf; /* WINDOW slots of MAX_SIZE each */
} conn_t;

static void *post_send(conn_t *c, int slot, size_t size)
{
    void *req = NULL;
    while (req == NULL) {
        CHECK(net->isend(c->sc, c->sbuf + (size_t)slot * MAX_SIZE, size, 0, c->smh, NULL, &req));
    }
    return req;
}

static void *post_recv(conn_t *c, int slot, size_t size)
{
    void *req = NULL, *buf = c->rbuf + (size_t)slot * MAX_SIZE;
    int tag = 0;
    while (req == NULL) {
        CHECK(net->irecv(c->rc, 1, &buf, &size, &tag, &c->rmh, NULL, &req));
    }
    return req;
}

/* Poll until done. Yield between unsuccessful polls: the host may have fewer cores than
 * busy processes, and a spinning waiter would starve the peer it waits for. */
static void wait_req(void *req)
{
    int done = 0;
    for (;;) {
        CHECK(net->test(req, &done, NULL));
        if (done) {
            return;
        }
        sched_yield();
    }
}

static double pingpong(conn_t *c, int rank, int iters)
{
    double t0 = 0;

    for (int i = -100; i < iters; i++) {
        if (i == 0) {
            t0 = now();
        }
        if (rank == 0) {
            void *r = post_recv(c, 0, 8);
            wait_req(post_send(c, 0, 8));
            wait_req(r);
        } else {
            void *r = post_recv(c, 0, 8);
            wait_req(r);
            wait_req(post_send(c, 0, 8));
        }
    }
    return (now() - t0) / iters / 2 * 1e6;
}

static double bandwidth(conn_t *c, int rank, size_t size, int iters)
{
    void *req[WINDOW] = {0};
    double t0 = now();

    /* Keep WINDOW messages in flight; slot i % WINDOW is reused once its request is done. */
    for (int i = 0; i < iters; i++) {
        int slot = i % WINDOW;
        if (req[slot] != NULL) {
            wait_req(req[slot]);
        }
        req[slot] = rank == 0 ? post_send(c, slot, size) : post_recv(c, slot, size);
    }
    for (int s = 0; s < WINDOW; s++) {
        if (req[s] != NULL) {
            wait_req(req[s]);
        }
    }
    if (rank == 0) {
        wait_req(post_recv(c, 0, 8)); /* the receiver has everything */
    } else {
        wait_req(post_send(c, 0, 8));
    }
    return (double)size * iters / (now() - t0) / 1e9;
}

static void run(int rank, int wfd, int rfd, double seconds)
{
    ncclNetCommConfig_v12_t cfg = {.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF};
    char mine[NCCL_NET_HANDLE_MAXSIZE], peer[NCCL_NET_HANDLE_MAXSIZE];
    static const size_t sizes[] = {8, 65536, 1 << 20, 8 << 20, MAX_SIZE};
    ncclNetProperties_v12_t props;
    void *ctx = NULL, *lc = NULL;
    conn_t c = {0};

    CHECK(net->init(&ctx, 1, &cfg, logger, NULL));
    CHECK(net->listen(ctx, 0, mine, &lc));
    if (write(wfd, mine, sizeof(mine)) != (ssize_t)sizeof(mine) ||
        read(rfd, peer, sizeof(peer)) != (ssize_t)sizeof(peer)) {
        perror("handle exchange");
        exit(1);
    }
    while (c.sc == NULL || c.rc == NULL) {
        if (c.sc == NULL) {
            CHECK(net->connect(ctx, 0, peer, &c.sc, NULL));
        }
        if (c.rc == NULL) {
            CHECK(net->accept(lc, &c.rc, NULL));
        }
    }
    c.sbuf = calloc(WINDOW, MAX_SIZE);
    c.rbuf = calloc(WINDOW, MAX_SIZE);
    if (c.sbuf == NULL || c.rbuf == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    CHECK(net->regMr(c.sc, c.sbuf, WINDOW * MAX_SIZE, NCCL_PTR_HOST, &c.smh));
    CHECK(net->regMr(c.rc, c.rbuf, WINDOW * MAX_SIZE, NCCL_PTR_HOST, &c.rmh));
    CHECK(net->getProperties(0, &props));

    {
        double lat = pingpong(&c, rank, (int)(20000 * seconds));
        if (rank == 0) {
            printf("device %s, plugin %s\n", props.name, net->name);
            printf("8-byte ping-pong latency: %.2f us (half round trip)\n", lat);
            printf("%12s %10s %12s %10s\n", "bytes", "GB/s", "us/message", "messages");
        }
    }
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        /* About `seconds` of traffic at ~1 GB/s, at least 2*WINDOW messages. */
        int iters = (int)(seconds * 1e9 / (double)sizes[i]);
        iters = iters < 2 * WINDOW ? 2 * WINDOW : iters > 200000 ? 200000 : iters;
        double bw = bandwidth(&c, rank, sizes[i], iters);
        if (rank == 0) {
            printf("%12zu %10.3f %12.2f %10d\n", sizes[i], bw, (double)sizes[i] / bw / 1e3, iters);
        }
    }
    CHECK(net->deregMr(c.sc, c.smh));
    CHECK(net->deregMr(c.rc, c.rmh));
    CHECK(net->closeSend(c.sc));
    CHECK(net->closeRecv(c.rc));
    CHECK(net->closeListen(lc));
    CHECK(net->finalize(ctx));
    free(c.sbuf);
    free(c.rbuf);
}

int main(int argc, char **argv)
{
    int p2c[2], c2p[2], status = 0;
    double seconds = argc > 2 ? atof(argv[2]) : 1.0;
    void *dl;
    pid_t pid;

    if (argc < 2) {
        fprintf(stderr, "usage: %s path/to/libnccl-net-ofi.so [seconds]\n", argv[0]);
        return 2;
    }
    dl = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    net = dl ? dlsym(dl, "ncclNetPlugin_v12") : NULL;
    if (net == NULL) {
        fprintf(stderr, "cannot load ncclNetPlugin_v12 from %s: %s\n", argv[1], dlerror());
        return 1;
    }
    if (pipe(p2c) != 0 || pipe(c2p) != 0) {
        perror("pipe");
        return 1;
    }
    fflush(stdout);
    pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        run(1, c2p[1], p2c[0], seconds);
        _exit(0);
    }
    run(0, p2c[1], c2p[0], seconds);
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
