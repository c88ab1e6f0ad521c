/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The sections of check_gpu written by hand around how a call waits, launches and is
 * released, each with buffers of its own (the case matrices are check_gpu.c's): latency
 * (where the time of a small call goes, printed), biggroup (a group whose descriptors
 * outgrow the buffer its launch reuses), cliques (two cliques whose kernels cannot be
 * resident together), overlap (a stream waits for its peer's call while others go on),
 * errors (mixed buffers, mismatched calls), abort (ncclCommAbort releases a waiting stream)
 * and capture (a grouped call captured into a CUDA graph). Ranks are threads of this
 * process; each section makes and destroys its own communicators.
 */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check_gpu.h"
#include "gpu_check.h"
#include "nccl.h"

/* ---- latency: where the time of a small call goes (a measurement, never asserted) ---- */

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

typedef struct {
    ncclComm_t comm;
    cudaStream_t s;
    float *buf;
    size_t count;
    int iters;
} lat_arg_t;

static void *lat_rank(void *p)
{
    lat_arg_t *a = p;
    CUDA_OK(cudaSetDevice(0));
    for (int i = 0; i < a->iters; i++) {
        ncclAllReduce(a->buf, a->buf, a->count, ncclFloat, ncclSum, a->comm, a->s);
    }
    CUDA_OK(cudaStreamSynchronize(a->s));
    return NULL;
}

/* Time per AllReduce on 2 and 4 ranks of the one GPU, for 8 B and 512 KiB: one thread
 * driving every rank in a group (each call's unit is complete at once) against a thread
 * per rank (the last rank to call launches). Printed; the GPU run records it. */
void section_latency(void)
{
    static const size_t counts[] = {2, 131072};
    enum { ITERS = 200 };
    for (int n = 2; n <= 4; n += 2) {
        for (size_t ci = 0; ci < 2; ci++) {
            ncclComm_t comms[MAXR];
            cudaStream_t st[MAXR];
            float *buf[MAXR];
            size_t count = counts[ci];
            init_all(comms, n, 0);
            for (int r = 0; r < n; r++) {
                CUDA_OK(cudaStreamCreateWithFlags(&st[r], cudaStreamNonBlocking));
                CUDA_OK(cudaMalloc((void **)&buf[r], count * sizeof(float)));
                CUDA_OK(cudaMemsetAsync(buf[r], 0, count * sizeof(float), st[r]));
                CUDA_OK(cudaStreamSynchronize(st[r]));
            }
            double t[2];
            for (int mode = 0; mode < 2; mode++) {
                double t0 = now_us();
                if (mode == 0) {
                    for (int i = 0; i < ITERS; i++) {
                        ncclGroupStart();
                        for (int r = 0; r < n; r++) {
                            ncclAllReduce(buf[r], buf[r], count, ncclFloat, ncclSum, comms[r],
                                          st[r]);
                        }
                        ncclGroupEnd();
                    }
                    for (int r = 0; r < n; r++) {
                        CUDA_OK(cudaStreamSynchronize(st[r]));
                    }
                } else {
                    pthread_t th[MAXR];
                    lat_arg_t a[MAXR];
                    for (int r = 0; r < n; r++) {
                        a[r] = (lat_arg_t){comms[r], st[r], buf[r], count, ITERS};
                        pthread_create(&th[r], NULL, lat_rank, &a[r]);
                    }
                    for (int r = 0; r < n; r++) {
                        pthread_join(th[r], NULL);
                    }
                }
                t[mode] = (now_us() - t0) / ITERS;
            }
            printf("latency: %d ranks, %zu bytes: %.1f us per AllReduce driven by one thread, "
                   "%.1f us with a thread per rank\n",
                   n, count * sizeof(float), t[0], t[1]);
            for (int r = 0; r < n; r++) {
                cudaFree(buf[r]);
                cudaStreamDestroy(st[r]);
                ncclCommDestroy(comms[r]);
            }
        }
    }
}

/* A rank's thread of `biggroup`: eight lone calls (each launch's descriptor buffer used
 * once), then one group of many AllReduces, whose descriptors outgrow the buffer its launch
 * reuses, while the other rank's stream may already wait for that launch. */
static void *biggroup_main(void *p)
{
    enum { CALLS = 32, COUNT = 1024 };
    rank_arg_t *a = p;
    ncclComm_t comm;
    cudaStream_t s;
    float *dbuf, *host = malloc((size_t)CALLS * COUNT * sizeof(float));
    CUDA_OK(cudaSetDevice(0));
    if (ncclCommInitRank(&comm, a->n, a->id, a->rank) != ncclSuccess) {
        a->fails = 1;
        free(host);
        return NULL;
    }
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUDA_OK(cudaMalloc((void **)&dbuf, (size_t)CALLS * COUNT * sizeof(float)));
    for (size_t i = 0; i < (size_t)CALLS * COUNT; i++) {
        host[i] = (float)(a->rank + 1);
    }
    CUDA_OK(cudaMemcpyAsync(dbuf, host, (size_t)CALLS * COUNT * sizeof(float),
                            cudaMemcpyHostToDevice, s));
    for (int k = 0; k < 8; k++) { /* sums of 1 and 2 on the first element, 8 times */
        a->fails +=
            ncclAllReduce(dbuf + (size_t)(CALLS - 1) * COUNT, dbuf + (size_t)(CALLS - 1) * COUNT, 1,
                          ncclFloat, ncclSum, comm, s) != ncclSuccess;
    }
    ncclGroupStart();
    for (int k = 0; k < CALLS - 1; k++) {
        ncclAllReduce(dbuf + (size_t)k * COUNT, dbuf + (size_t)k * COUNT, COUNT, ncclFloat, ncclSum,
                      comm, s);
    }
    ncclResult_t res = ncclGroupEnd();
    EXPECT(res == ncclSuccess, "biggroup: rank %d: group of %d AllReduces: %s", a->rank, CALLS - 1,
           ncclGetLastError(comm));
    alarm(120);
    CUDA_OK(cudaStreamSynchronize(s));
    alarm(0);
    CUDA_OK(cudaMemcpy(host, dbuf, (size_t)CALLS * COUNT * sizeof(float), cudaMemcpyDeviceToHost));
    int bad = 0;
    for (size_t i = 0; i < (size_t)(CALLS - 1) * COUNT; i++) {
        bad += host[i] != 3.0f;
    }
    EXPECT(bad == 0, "biggroup: rank %d: %d wrong elements (first %g, not 3)", a->rank, bad,
           host[0]);
    a->fails += bad != 0;
    cudaFree(dbuf);
    ncclCommDestroy(comm);
    cudaStreamDestroy(s);
    free(host);
    return NULL;
}

/* Two ranks with a thread each, one group large enough that its launch's descriptors need
 * a bigger buffer than the one it reuses. */
void section_biggroup(void)
{
    pthread_t th[2];
    rank_arg_t a[2];
    ncclUniqueId id;
    int fails = 0;
    ncclGetUniqueId(&id);
    for (int r = 0; r < 2; r++) {
        a[r] = (rank_arg_t){id, r, 2, NULL, 0, 0};
        pthread_create(&th[r], NULL, biggroup_main, &a[r]);
    }
    for (int r = 0; r < 2; r++) {
        pthread_join(th[r], NULL);
        fails += a[r].fails;
    }
    printf("biggroup: 2 ranks, one thread each, a group of 31 AllReduces: %d failed\n", fails);
}

/* The two threads of `cliques` start each round together, so their launches meet. */
static pthread_barrier_t cliques_round;

#define CLIQUE_RANKS 4

/* GPUs each clique of `cliques` spans (BRAID_TEST_CLIQUE_GPUS, 1 or 2): with 2, both cliques
 * have ranks on both GPUs, and each GPU runs one kernel of each clique per round. */
static int cliques_gpus(void)
{
    const char *e = getenv("BRAID_TEST_CLIQUE_GPUS");
    return e != NULL && atoi(e) == 2 ? 2 : 1;
}

/* A thread of `cliques`: its own clique of 4 ranks on device 0 (ncclCommInitAll), forty
 * grouped AllReduces large enough for every channel, each waited for. */
static void *clique_main(void *p)
{
    enum { ROUNDS = 40, COUNT = 64 * 1024 };
    rank_arg_t *a = p;
    ncclComm_t comms[CLIQUE_RANKS];
    cudaStream_t s[CLIQUE_RANKS];
    float *d[CLIQUE_RANKS], *host = malloc(COUNT * sizeof(float));
    int devs[CLIQUE_RANKS] = {0}, ngpus = cliques_gpus();
    for (int r = 0; r < CLIQUE_RANKS; r++) {
        devs[r] = r % ngpus;
    }
    CUDA_OK(cudaSetDevice(0));
    if (host == NULL || ncclCommInitAll(comms, CLIQUE_RANKS, devs) != ncclSuccess) {
        printf("FAIL cliques: clique %d: ncclCommInitAll failed\n", a->rank);
        exit(1); /* the other thread would wait for this one at every round */
    }
    for (int r = 0; r < CLIQUE_RANKS; r++) {
        CUDA_OK(cudaSetDevice(devs[r]));
        CUDA_OK(cudaStreamCreateWithFlags(&s[r], cudaStreamNonBlocking));
        CUDA_OK(cudaMalloc((void **)&d[r], COUNT * sizeof(float)));
        for (int i = 0; i < COUNT; i++) {
            host[i] = (float)(r + 1 + a->rank);
        }
        CUDA_OK(cudaMemcpyAsync(d[r], host, COUNT * sizeof(float), cudaMemcpyHostToDevice, s[r]));
        CUDA_OK(cudaStreamSynchronize(s[r]));
    }
    for (int k = 0; k < ROUNDS; k++) {
        pthread_barrier_wait(&cliques_round);
        ncclGroupStart();
        for (int r = 0; r < CLIQUE_RANKS; r++) {
            ncclAllReduce(d[r], d[r], COUNT, ncclFloat, ncclMax, comms[r], s[r]);
        }
        ncclResult_t res = ncclGroupEnd();
        EXPECT(res == ncclSuccess, "cliques: clique %d: round %d: %s", a->rank, k,
               ncclGetLastError(comms[0]));
        alarm(120); /* a kernel that never gets all its blocks resident hangs here */
        for (int r = 0; r < CLIQUE_RANKS; r++) {
            CUDA_OK(cudaStreamSynchronize(s[r]));
        }
        alarm(0);
    }
    for (int r = 0; r < CLIQUE_RANKS; r++) {
        int want = CLIQUE_RANKS + a->rank, bad = 0;
        CUDA_OK(cudaMemcpy(host, d[r], COUNT * sizeof(float), cudaMemcpyDeviceToHost));
        for (int i = 0; i < COUNT; i++) {
            bad += host[i] != (float)want;
        }
        EXPECT(bad == 0, "cliques: clique %d rank %d: %d wrong elements (first %g, not %d)",
               a->rank, r, bad, host[0], want);
        a->fails += bad != 0;
        cudaFree(d[r]);
        cudaStreamDestroy(s[r]);
        ncclCommDestroy(comms[r]);
    }
    free(host);
    return NULL;
}

/* Two cliques on one GPU at once, each from its own thread: each kernel takes more than
 * half of the blocks the device holds, so they can never be resident together. A kernel
 * whose blocks start as room frees (not cooperatively) could get some of its blocks in
 * beside the other's, and both would spin for blocks that never start: a channel's block
 * of one rank waits for the same channel's blocks of the others. */
void section_cliques(void)
{
    pthread_t th[2];
    rank_arg_t a[2];
    int fails = 0;
    pthread_barrier_init(&cliques_round, NULL, 2);
    for (int c = 0; c < 2; c++) {
        a[c] = (rank_arg_t){{{0}}, c, CLIQUE_RANKS, NULL, 0, 0};
        pthread_create(&th[c], NULL, clique_main, &a[c]);
    }
    for (int c = 0; c < 2; c++) {
        pthread_join(th[c], NULL);
        fails += a[c].fails;
    }
    pthread_barrier_destroy(&cliques_round);
    printf("cliques: two cliques of %d ranks on %d GPU%s at once, 40 rounds each: %d failed\n",
           CLIQUE_RANKS, cliques_gpus(), cliques_gpus() == 1 ? "" : "s", fails);
}

/* Rank 0's call, made by a thread of its own (a thread that drives several ranks groups
 * their calls, as with NCCL). */
typedef struct {
    ncclComm_t comm;
    float *buf;
    cudaStream_t s;
    ncclResult_t res;
    int returned;
} overlap_call_t;

static void *overlap_rank0(void *arg)
{
    overlap_call_t *c = arg;
    c->res = ncclAllReduce(c->buf, c->buf, 1024, ncclFloat, ncclSum, c->comm, c->s);
    __atomic_store_n(&c->returned, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Rank 0 calls, rank 1 has not yet: rank 0's AllReduce does not finish (its call waits for
 * rank 1's on the host, or its stream in the GPU), while another stream's work completes;
 * then rank 1 calls and both finish. */
void section_overlap(void)
{
    ncclComm_t comms[2];
    cudaStream_t s[2], other;
    float *buf[2], *scratch, host[1024];
    init_all(comms, 2, 0);
    for (int r = 0; r < 2; r++) {
        CUDA_OK(cudaStreamCreateWithFlags(&s[r], cudaStreamNonBlocking));
        CUDA_OK(cudaMalloc((void **)&buf[r], sizeof(host)));
        for (int i = 0; i < 1024; i++) {
            host[i] = (float)(r + 1);
        }
        CUDA_OK(cudaMemcpy(buf[r], host, sizeof(host), cudaMemcpyHostToDevice));
    }
    /* A cudaMemcpy from pageable memory can return before its copy lands. */
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    CUDA_OK(cudaMalloc((void **)&scratch, 1 << 20));
    overlap_call_t c0 = {comms[0], buf[0], s[0], ncclSuccess, 0};
    pthread_t t0;
    EXPECT(pthread_create(&t0, NULL, overlap_rank0, &c0) == 0, "thread for rank 0");
    usleep(20000);
    CUDA_OK(cudaMemsetAsync(scratch, 1, 1 << 20, other));
    CUDA_OK(cudaStreamSynchronize(other));
    EXPECT(!__atomic_load_n(&c0.returned, __ATOMIC_ACQUIRE) ||
               cudaStreamQuery(s[0]) == cudaErrorNotReady,
           "rank 0's AllReduce finished before rank 1 called");
    EXPECT(ncclAllReduce(buf[1], buf[1], 1024, ncclFloat, ncclSum, comms[1], s[1]) == ncclSuccess,
           "rank 1's AllReduce: %s", ncclGetLastError(comms[1]));
    pthread_join(t0, NULL);
    EXPECT(c0.res == ncclSuccess, "rank 0's AllReduce: %s", ncclGetLastError(comms[0]));
    for (int r = 0; r < 2; r++) {
        CUDA_OK(cudaStreamSynchronize(s[r]));
        CUDA_OK(cudaMemcpy(host, buf[r], sizeof(host), cudaMemcpyDeviceToHost));
        EXPECT(host[0] == 3.0f && host[1023] == 3.0f, "rank %d: AllReduce gave %g, not 3", r,
               host[0]);
        cudaFree(buf[r]);
        ncclCommDestroy(comms[r]);
        cudaStreamDestroy(s[r]);
    }
    cudaFree(scratch);
    cudaStreamDestroy(other);
    printf("overlap: done\n");
}

void section_errors(void)
{
    ncclComm_t comms[2];
    cudaStream_t s[2];
    float *dev[2], hostbuf[64];
    init_all(comms, 2, 0);
    for (int r = 0; r < 2; r++) {
        CUDA_OK(cudaStreamCreateWithFlags(&s[r], cudaStreamNonBlocking));
        CUDA_OK(cudaMalloc((void **)&dev[r], 1 << 20));
    }
    /* Host sendbuff, device recvbuff. */
    ncclResult_t res = ncclAllReduce(hostbuf, dev[0], 64, ncclFloat, ncclSum, comms[0], s[0]);
    EXPECT(res == ncclInvalidArgument, "mixed buffers returned %d", res);
    EXPECT(strstr(ncclGetLastError(comms[0]), "host memory") != NULL, "mixed buffers: message '%s'",
           ncclGetLastError(comms[0]));
    /* Mismatched counts in one group: an error, and no stream hangs. */
    ncclGroupStart();
    ncclAllReduce(dev[0], dev[0], 64, ncclFloat, ncclSum, comms[0], s[0]);
    ncclAllReduce(dev[1], dev[1], 65, ncclFloat, ncclSum, comms[1], s[1]);
    res = ncclGroupEnd();
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comms[0], &async);
    EXPECT(res != ncclSuccess || async != ncclSuccess, "mismatched counts were not reported");
    EXPECT(strstr(ncclGetLastError(NULL), "mismatched") != NULL ||
               strstr(ncclGetLastError(comms[0]), "mismatched") != NULL,
           "mismatch message: '%s'", ncclGetLastError(comms[0]));
    for (int r = 0; r < 2; r++) {
        CUDA_OK(cudaStreamSynchronize(s[r]));
        cudaFree(dev[r]);
        ncclCommDestroy(comms[r]);
        cudaStreamDestroy(s[r]);
    }
    printf("errors: done\n");
}

void *abort_later(void *p)
{
    usleep(300 * 1000);
    ncclCommAbort(*(ncclComm_t *)p);
    return NULL;
}

void section_abort(void)
{
    ncclComm_t comms[2];
    cudaStream_t s;
    float *dev;
    pthread_t th;
    init_all(comms, 2, 0);
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUDA_OK(cudaMalloc((void **)&dev, 4096));
    /* Rank 1 never calls: rank 0's call waits for it (on the host, or its stream in the
     * GPU) until another thread aborts the communicator. A call or a stream that is never
     * released ends the test here. The ctest entries leave BRAID_CUDA_WAIT_TIMEOUT at its
     * default (600 s), so only the abort can release them. */
    pthread_create(&th, NULL, abort_later, &comms[0]);
    alarm(20);
    ncclResult_t res = ncclAllReduce(dev, dev, 1024, ncclFloat, ncclSum, comms[0], s);
    CUDA_OK(cudaStreamSynchronize(s));
    alarm(0);
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comms[0], &async);
    EXPECT(res != ncclSuccess || async != ncclSuccess,
           "rank 0's AllReduce, aborted while it waited for rank 1, reported nothing");
    pthread_join(th, NULL);
    ncclCommAbort(comms[1]);
    cudaFree(dev);
    cudaStreamDestroy(s);
    printf("abort: the waiting stream was released\n");
}

/* Two ranks' AllReduce captured into one graph (one thread, the ranks on two streams
 * forked from and joined back to the capturing one), replayed three times on fresh inputs;
 * and a lone rank's call captured without its peer, which is refused. */
void section_capture(void)
{
    ncclComm_t comms[2];
    cudaStream_t s[2];
    cudaEvent_t fork, join;
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    float *buf[2], host[4096];
    init_all(comms, 2, 0);
    for (int r = 0; r < 2; r++) {
        CUDA_OK(cudaStreamCreateWithFlags(&s[r], cudaStreamNonBlocking));
        CUDA_OK(cudaMalloc((void **)&buf[r], sizeof(host)));
    }
    CUDA_OK(cudaEventCreate(&fork));
    CUDA_OK(cudaEventCreate(&join));
    CUDA_OK(cudaStreamBeginCapture(s[0], cudaStreamCaptureModeThreadLocal));
    CUDA_OK(cudaEventRecord(fork, s[0]));
    CUDA_OK(cudaStreamWaitEvent(s[1], fork, 0));
    ncclGroupStart();
    ncclResult_t r0 = ncclAllReduce(buf[0], buf[0], 4096, ncclFloat, ncclSum, comms[0], s[0]);
    ncclResult_t r1 = ncclAllReduce(buf[1], buf[1], 4096, ncclFloat, ncclSum, comms[1], s[1]);
    ncclResult_t end = ncclGroupEnd();
    CUDA_OK(cudaEventRecord(join, s[1]));
    CUDA_OK(cudaStreamWaitEvent(s[0], join, 0));
    CUDA_OK(cudaStreamEndCapture(s[0], &g));
    EXPECT(r0 == ncclSuccess && r1 == ncclSuccess && end == ncclSuccess,
           "capture of a grouped AllReduce: %d/%d/%d: %s", r0, r1, end, ncclGetLastError(comms[0]));
    CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
    for (int rep = 0; rep < 3; rep++) {
        for (int r = 0; r < 2; r++) {
            for (int i = 0; i < 4096; i++) {
                host[i] = (float)((r + 1) * (rep + 1) + i % 7);
            }
            CUDA_OK(cudaMemcpy(buf[r], host, sizeof(host), cudaMemcpyHostToDevice));
        }
        CUDA_OK(cudaDeviceSynchronize()); /* the uploads landed (pageable cudaMemcpy) */
        CUDA_OK(cudaGraphLaunch(ge, s[0]));
        CUDA_OK(cudaStreamSynchronize(s[0]));
        for (int r = 0; r < 2; r++) {
            CUDA_OK(cudaMemcpy(host, buf[r], sizeof(host), cudaMemcpyDeviceToHost));
            int bad = 0;
            for (int i = 0; i < 4096; i++) {
                bad += host[i] != (float)(3 * (rep + 1) + 2 * (i % 7));
            }
            EXPECT(bad == 0, "replay %d, rank %d: %d wrong elements (first %g)", rep, r, bad,
                   host[0]);
        }
    }
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    /* One rank alone, as a thread per rank would: refused, naming why. */
    CUDA_OK(cudaStreamBeginCapture(s[0], cudaStreamCaptureModeThreadLocal));
    ncclResult_t res = ncclAllReduce(buf[0], buf[0], 4096, ncclFloat, ncclSum, comms[0], s[0]);
    g = NULL;
    cudaStreamEndCapture(s[0], &g);
    EXPECT(res == ncclInvalidUsage && strstr(ncclGetLastError(comms[0]), "same group") != NULL,
           "a lone rank's capture: returned %d, '%s'", res, ncclGetLastError(comms[0]));
    if (g != NULL) {
        cudaGraphDestroy(g);
    }
    for (int r = 0; r < 2; r++) {
        cudaFree(buf[r]);
        ncclCommDestroy(comms[r]);
        cudaStreamDestroy(s[r]);
    }
    cudaEventDestroy(fork);
    cudaEventDestroy(join);
    printf("capture: a grouped AllReduce replayed 3 times; a lone rank refused\n");
}
