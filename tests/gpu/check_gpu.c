/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GPU tests of the CUDA executor: device buffers for ranks that are threads of this
 * process on one GPU. Sections (argv[1], default all):
 *   coll     every collective x type x op of the thin matrix, and counts larger than the
 *            FIFO, at 1, 2, 4 and 8 ranks driven by one thread in groups, and at 2 and 4
 *            ranks with one thread per rank; results checked on the host against the
 *            reference of tests/common, with guards around every buffer
 *   threads  only the part of coll with one thread per rank
 *   streams  the thin matrix on the per-thread and the legacy default streams, a thread
 *            per rank
 *   biggroup a group whose launch's descriptors outgrow the buffer it reuses
 *   cliques  two cliques (ncclCommInitAll) on one GPU at once, from two threads, whose
 *            kernels cannot be resident together
 *   overlap  a call returns at once and its stream waits for the peer's call, while other
 *            streams go on
 *   errors   host and device buffers mixed; mismatched calls across ranks
 *   abort    ncclCommAbort from another thread releases a stream whose peer never called
 *   capture  a call captured into a CUDA graph
 *   multi    4 ranks on two GPUs of one process (P2P between them), where there are two
 *   latency  (not in "all") time per small AllReduce, one thread driving every rank
 *            against a thread per rank: printed, never asserted
 *   procs-stuck  (emulator only) 2 processes whose first call cannot progress: both
 *            fail within BRAID_CUDA_WAIT_TIMEOUT, saying why
 *   claim    (emulator only) kernels on two GPUs of one clique fail at once: every rank
 *            gets one device's whole report (check_gpu_claim.c)
 *   suspend  ncclCommSuspend / Resume between exact device AllReduces, MemStats counting
 *            the device FIFOs or staging until released: 3 threads, then 2 processes
 *   procs    ranks as processes on one GPU (2 and 4), every case of the thin matrix and a
 *            group of two calls; a peer process that dies: the waiting stream is
 *            released and the error names it; and ncclCommAbort from another thread
 *            while the stream waits for a peer that never calls: the abort releases it
 * Without a GPU (or without the CUDA runtime) it prints SKIP and why, and exits 77.
 * This file holds main and the sections over the case matrices of tests/common (coll,
 * threads, streams, multi) with their device mirrors of the cases' buffers; the sections
 * written by hand are in check_gpu_waits.c, procs in check_gpu_procs.c, suspend in
 * check_gpu_suspend.c.
 */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "brt_coll.h"
#include "check_gpu.h"
#include "gpu_check.h"
#include "nccl.h"

int failures;

/* The device of each rank of the current communicators (buffers go there). */
static int rank_dev[MAXR];

/* Device mirrors of a case's host buffers (guards included). */
typedef struct {
    unsigned char *dsend, *drecv;
    void *hsendbuff, *hrecvbuff;
    int pooled; /* dsend/drecv belong to a pool_t: not freed by mirror_down */
} mirror_t;

/* Device buffers a rank reuses for every case. Ranks driven by threads of one process
 * must not cudaFree between calls: cudaFree waits for the whole device, so a rank freeing
 * while a peer's stream waits for that rank's next call deadlocks (as with NCCL). */
typedef struct {
    unsigned char *dsend, *drecv;
    size_t send_cap, recv_cap;
} pool_t;

static void *to_dev_ptr(const brt_buf_t *b, const mirror_t *m, void *p)
{
    unsigned char *q = p;
    if (q == NULL) {
        return NULL;
    }
    if (b->send_mem && q >= b->send_mem && q < b->send_mem + b->send_bytes + 2 * BRT_GUARD) {
        return m->dsend + (q - b->send_mem);
    }
    return m->drecv + (q - b->recv_mem);
}

/* The case's buffers on the device: from the pool when one is given (and large enough),
 * else allocated. The uploads are ordered in the call's stream: a cudaMemcpy from
 * pageable memory may return before its copy lands, and the legacy stream it uses does
 * not order work on non-blocking streams. */
static void mirror_up(brt_buf_t *b, mirror_t *m, pool_t *pool, cudaStream_t s)
{
    size_t sb = b->send_bytes + 2 * BRT_GUARD, rb = b->recv_bytes + 2 * BRT_GUARD;
    memset(m, 0, sizeof(*m));
    m->pooled = pool != NULL && (!b->send_mem || sb <= pool->send_cap) &&
                (!b->recv_mem || rb <= pool->recv_cap);
    if (b->send_mem) {
        if (m->pooled) {
            m->dsend = pool->dsend;
        } else {
            CUDA_OK(cudaMalloc((void **)&m->dsend, sb));
        }
        CUDA_OK(cudaMemcpyAsync(m->dsend, b->send_mem, sb, cudaMemcpyHostToDevice, s));
    }
    if (b->recv_mem) {
        if (m->pooled) {
            m->drecv = pool->drecv;
        } else {
            CUDA_OK(cudaMalloc((void **)&m->drecv, rb));
        }
        CUDA_OK(cudaMemcpyAsync(m->drecv, b->recv_mem, rb, cudaMemcpyHostToDevice, s));
    }
    m->hsendbuff = b->sendbuff;
    m->hrecvbuff = b->recvbuff;
    b->sendbuff = to_dev_ptr(b, m, b->sendbuff);
    b->recvbuff = to_dev_ptr(b, m, b->recvbuff);
}

/* Back to the host; the caller synchronised the call's stream. */
static void mirror_down(brt_buf_t *b, mirror_t *m)
{
    if (b->send_mem) {
        CUDA_OK(cudaMemcpy(b->send_mem, m->dsend, b->send_bytes + 2 * BRT_GUARD,
                           cudaMemcpyDeviceToHost));
        if (!m->pooled) {
            cudaFree(m->dsend);
        }
    }
    if (b->recv_mem) {
        CUDA_OK(cudaMemcpy(b->recv_mem, m->drecv, b->recv_bytes + 2 * BRT_GUARD,
                           cudaMemcpyDeviceToHost));
        if (!m->pooled) {
            cudaFree(m->drecv);
        }
    }
    b->sendbuff = m->hsendbuff;
    b->recvbuff = m->hrecvbuff;
}

/* A pool as large as the largest buffers of these cases (set up on the host to see). */
static void pool_init(pool_t *pool, ncclComm_t comm, const brt_case_t *cases, size_t ncases,
                      int rank, int n)
{
    char err[1024];
    memset(pool, 0, sizeof(*pool));
    for (size_t i = 0; i < ncases; i++) {
        brt_buf_t b;
        memset(&b, 0, sizeof(b));
        b.comm = comm;
        b.rank = rank;
        b.nranks = n;
        if (brt_case_setup(&cases[i], &b, err, sizeof(err)) != 0) {
            continue;
        }
        if (b.send_mem && b.send_bytes + 2 * BRT_GUARD > pool->send_cap) {
            pool->send_cap = b.send_bytes + 2 * BRT_GUARD;
        }
        if (b.recv_mem && b.recv_bytes + 2 * BRT_GUARD > pool->recv_cap) {
            pool->recv_cap = b.recv_bytes + 2 * BRT_GUARD;
        }
        brt_case_teardown(&b);
    }
    CUDA_OK(cudaMalloc((void **)&pool->dsend, pool->send_cap ? pool->send_cap : 1));
    CUDA_OK(cudaMalloc((void **)&pool->drecv, pool->recv_cap ? pool->recv_cap : 1));
}

static void pool_free(pool_t *pool)
{
    cudaFree(pool->dsend);
    cudaFree(pool->drecv);
}

/* One case on n ranks driven by this thread: one group for every rank's call. */
static int run_case_group(ncclComm_t *comms, cudaStream_t *streams, int n, const brt_case_t *c)
{
    brt_buf_t b[MAXR];
    mirror_t m[MAXR];
    char err[1024], name[192];
    int bad = 0;

    brt_case_name(c, n, name, sizeof(name));
    for (int r = 0; r < n; r++) {
        memset(&b[r], 0, sizeof(b[r]));
        b[r].comm = comms[r];
        b[r].rank = r;
        b[r].nranks = n;
        b[r].stream = streams[r];
        CUDA_OK(cudaSetDevice(rank_dev[r]));
        if (brt_case_setup(c, &b[r], err, sizeof(err)) != 0) {
            EXPECT(0, "%s: setup: %s", name, err);
            return 1;
        }
        mirror_up(&b[r], &m[r], NULL, streams[r]);
    }
    ncclResult_t res = ncclGroupStart();
    for (int r = 0; r < n && res == ncclSuccess; r++) {
        res = brt_case_issue(c, &b[r]);
    }
    ncclResult_t end = ncclGroupEnd();
    EXPECT(res == ncclSuccess && end == ncclSuccess, "%s: calls returned %d/%d: %s", name, res, end,
           ncclGetLastError(comms[0]));
    for (int r = 0; r < n; r++) {
        CUDA_OK(cudaStreamSynchronize(streams[r]));
    }
    for (int r = 0; r < n; r++) {
        mirror_down(&b[r], &m[r]);
        if (res == ncclSuccess && end == ncclSuccess &&
            brt_case_verify(c, &b[r], err, sizeof(err)) != 0) {
            if (bad++ < 3) {
                EXPECT(0, "%s rank %d: %s", name, r, err);
            }
        }
        brt_case_teardown(&b[r]);
    }
    return bad || res != ncclSuccess || end != ncclSuccess;
}

void init_all(ncclComm_t *comms, int n, int dev)
{
    int devs[MAXR];
    for (int r = 0; r < n; r++) {
        devs[r] = dev;
        rank_dev[r] = dev;
    }
    CUDA_OK(cudaSetDevice(dev));
    ncclResult_t res = ncclCommInitAll(comms, n, devs);
    if (res != ncclSuccess) {
        printf("FAIL: ncclCommInitAll(%d ranks on device %d): %s\n", n, dev,
               ncclGetLastError(NULL));
        exit(1);
    }
}

/* The cases again as sums, at counts of whole 16-byte pieces for every type (4096, 4112,
 * 4128 elements), so that every buffer is 16-byte aligned and the direct kernel takes its
 * vector paths (Broadcast and AllGather of any type, float32/bfloat16/float16 sums): the
 * matrices' own counts (0, 1, 7, 4097, FIFO + 3, ...) never are. */
static brt_case_t *aligned_copy(const brt_case_t *cases, size_t n)
{
    brt_case_t *a = malloc(n * sizeof(*a));
    if (a == NULL) {
        return NULL;
    }
    memcpy(a, cases, n * sizeof(*a));
    for (size_t i = 0; i < n; i++) {
        a[i].count = 4096 + 16 * (i % 3);
        if (brt_func_reduces(a[i].func)) {
            a[i].op = BRT_SUM; /* every type's sum: the float ones take the vector paths */
        }
    }
    return a;
}

static void section_coll_groups(void)
{
    static const int sizes[] = {1, 2, 4, 8};
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
        int n = sizes[si], fails = 0;
        ncclComm_t comms[MAXR];
        cudaStream_t streams[MAXR];
        brt_case_t *thin = NULL, *big = NULL;
        init_all(comms, n, 0);
        for (int r = 0; r < n; r++) {
            int d = -2;
            EXPECT(ncclCommCuDevice(comms[r], &d) == ncclSuccess && d == 0,
                   "rank %d of %d: ncclCommCuDevice says %d, not 0", r, n, d);
            CUDA_OK(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
        }
        size_t nthin = brt_cases_build(BRT_MATRIX_THIN, n, &thin);
        size_t nbig = brt_cases_build(BRT_MATRIX_BIG, n, &big);
        brt_case_t *aligned = aligned_copy(thin, nthin);
        EXPECT(aligned != NULL, "coll: out of memory");
        for (size_t i = 0; i < nthin; i++) {
            fails += run_case_group(comms, streams, n, &thin[i]);
        }
        for (size_t i = 0; i < nbig; i++) {
            fails += run_case_group(comms, streams, n, &big[i]);
        }
        for (size_t i = 0; i < nthin && aligned != NULL; i++) {
            fails += run_case_group(comms, streams, n, &aligned[i]);
        }
        printf("coll: %d rank%s on one GPU, one thread: %zu cases (%zu of them 16-byte aligned), "
               "%d failed\n",
               n, n == 1 ? "" : "s", 2 * nthin + nbig, nthin, fails);
        free(thin);
        free(big);
        free(aligned);
        for (int r = 0; r < n; r++) {
            ncclCommDestroy(comms[r]);
            cudaStreamDestroy(streams[r]);
        }
    }
}

/* Ranks alternating over two GPUs: FIFOs in each receiver's GPU, reached over P2P, one
 * kernel per GPU per launch. */
static void section_multi(void)
{
    int ndev = 0, fails = 0, n = 4;
    ncclComm_t comms[MAXR];
    cudaStream_t streams[MAXR];
    brt_case_t *thin = NULL;
    int devs[MAXR];
    CUDA_OK(cudaGetDeviceCount(&ndev));
    if (ndev < 2) {
        printf("multi: SKIP: one GPU here; ranks on several GPUs need two\n");
        return;
    }
    for (int r = 0; r < n; r++) {
        devs[r] = rank_dev[r] = r % 2;
    }
    CUDA_OK(cudaSetDevice(0));
    if (ncclCommInitAll(comms, n, devs) != ncclSuccess) {
        printf("FAIL: ncclCommInitAll over 2 GPUs: %s\n", ncclGetLastError(NULL));
        exit(1);
    }
    for (int r = 0; r < n; r++) {
        int d = -2;
        EXPECT(ncclCommCuDevice(comms[r], &d) == ncclSuccess && d == r % 2,
               "rank %d: ncclCommCuDevice says %d, not %d", r, d, r % 2);
        CUDA_OK(cudaSetDevice(r % 2));
        CUDA_OK(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
    }
    size_t nthin = brt_cases_build(BRT_MATRIX_THIN, n, &thin);
    for (size_t i = 0; i < nthin; i++) {
        fails += run_case_group(comms, streams, n, &thin[i]);
    }
    printf("multi: %d ranks on 2 GPUs, one thread: %zu cases, %d failed\n", n, nthin, fails);
    free(thin);
    for (int r = 0; r < n; r++) {
        ncclCommDestroy(comms[r]);
        cudaStreamDestroy(streams[r]);
        rank_dev[r] = 0;
    }
    CUDA_OK(cudaSetDevice(0));
}

/* Every case on one rank (this thread drives only it), on `s`; returns the failures. */
int run_cases_one_rank(ncclComm_t comm, cudaStream_t s, int rank, int n,
                              const brt_case_t *cases, size_t ncases, const char *who)
{
    char err[1024], name[192];
    int fails = 0;
    pool_t pool;
    pool_init(&pool, comm, cases, ncases, rank, n);
    for (size_t i = 0; i < ncases; i++) {
        brt_buf_t b;
        mirror_t m;
        memset(&b, 0, sizeof(b));
        b.comm = comm;
        b.rank = rank;
        b.nranks = n;
        b.stream = s;
        brt_case_name(&cases[i], n, name, sizeof(name));
        if (brt_case_setup(&cases[i], &b, err, sizeof(err)) != 0) {
            fails++;
            continue;
        }
        mirror_up(&b, &m, &pool, s);
        ncclResult_t res = brt_case_issue(&cases[i], &b);
        CUDA_OK(cudaStreamSynchronize(s));
        mirror_down(&b, &m);
        if (res != ncclSuccess) {
            printf("FAIL: %s rank %d: %s returned %d: %s\n", who, rank, name, res,
                   ncclGetLastError(comm));
            fails++;
        } else if (brt_case_verify(&cases[i], &b, err, sizeof(err)) != 0) {
            if (fails++ < 3) {
                printf("FAIL: %s rank %d: %s: %s\n", who, rank, name, err);
            }
        }
        brt_case_teardown(&b);
    }
    /* Safe now (see pool_t): this rank's last call completed, so its peers' calls of the
     * same collective did, and none of theirs waits for this rank any more. */
    pool_free(&pool);
    return fails;
}

static void *rank_main(void *p)
{
    rank_arg_t *a = p;
    ncclComm_t comm;
    cudaStream_t s;
    CUDA_OK(cudaSetDevice(0));
    if (ncclCommInitRank(&comm, a->n, a->id, a->rank) != ncclSuccess) {
        a->fails = 1;
        return NULL;
    }
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    a->fails += run_cases_one_rank(comm, s, a->rank, a->n, a->cases, a->ncases, "thread");
    ncclCommDestroy(comm);
    cudaStreamDestroy(s);
    return NULL;
}

/* n ranks of one new communicator, a thread each running fn over the cases; the failures. */
static int run_rank_threads(int n, void *(*fn)(void *), const brt_case_t *cases, size_t ncases)
{
    pthread_t th[MAXR];
    rank_arg_t a[MAXR];
    ncclUniqueId id;
    int fails = 0;
    ncclGetUniqueId(&id);
    for (int r = 0; r < n; r++) {
        a[r] = (rank_arg_t){id, r, n, cases, ncases, 0};
        pthread_create(&th[r], NULL, fn, &a[r]);
    }
    for (int r = 0; r < n; r++) {
        pthread_join(th[r], NULL);
        fails += a[r].fails;
    }
    failures += fails;
    return fails;
}

static void section_coll_threads(void)
{
    static const int sizes[] = {2, 4};
    for (size_t si = 0; si < 2; si++) {
        int n = sizes[si];
        brt_case_t *thin = NULL;
        size_t nthin = brt_cases_build(BRT_MATRIX_THIN, n, &thin);
        int fails = run_rank_threads(n, rank_main, thin, nthin);
        printf("coll: %d ranks on one GPU, one thread each: %zu cases, %d failed\n", n, nthin,
               fails);
        free(thin);
    }
}

/* A rank's thread of `streams`: the thin matrix on the calling thread's default stream
 * (cudaStreamPerThread), then on the legacy default stream that every thread shares. Every
 * stream operation of a call must be enqueued by the calling thread, since the handle
 * cudaStreamPerThread names another stream in any other thread. */
static void *default_streams_main(void *p)
{
    rank_arg_t *a = p;
    ncclComm_t comm;
    CUDA_OK(cudaSetDevice(0));
    if (ncclCommInitRank(&comm, a->n, a->id, a->rank) != ncclSuccess) {
        a->fails = 1;
        return NULL;
    }
    a->fails += run_cases_one_rank(comm, cudaStreamPerThread, a->rank, a->n, a->cases, a->ncases,
                                   "per-thread default stream");
    a->fails += run_cases_one_rank(comm, cudaStreamLegacy, a->rank, a->n, a->cases, a->ncases,
                                   "legacy default stream");
    ncclCommDestroy(comm);
    return NULL;
}

static void section_streams(void)
{
    enum { N = 2 };
    brt_case_t *thin = NULL;
    size_t nthin = brt_cases_build(BRT_MATRIX_THIN, N, &thin);
    int fails = run_rank_threads(N, default_streams_main, thin, nthin);
    printf("streams: %d ranks, one thread each, on the per-thread and the legacy default "
           "streams: %zu cases each, %d failed\n",
           N, nthin, fails);
    free(thin);
}

/* The sections main runs, by name: a name that is none of them fails before anything runs
 * (a GPU run's misspelt step must not pass as "0 failures"), on a machine without a GPU too. */
static const char *const sections[] = {"all",     "coll",   "threads", "biggroup", "cliques",
                                       "overlap", "errors", "abort",   "capture",  "multi",
                                       "procs",   "suspend", "streams", "latency", "procs-stuck",
                                       "proc-rank", "claim"};
#define NSECTIONS (sizeof(sections) / sizeof(sections[0]))

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "all";
    size_t known = 0;
    while (known < NSECTIONS && strcmp(sections[known], what) != 0) {
        known++;
    }
    if (known == NSECTIONS) {
        fprintf(stderr, "check_gpu: no section '%s'; the sections:", what);
        for (size_t i = 0; i < NSECTIONS; i++) {
            fprintf(stderr, " %s", sections[i]);
        }
        fprintf(stderr, "\n");
        return 2;
    }
    int skip = gpu_or_skip();
    if (skip != 0) {
        return skip;
    }
    if (!strcmp(what, "proc-rank") && argc == 6) {
        return proc_rank_main(argv[2], atoi(argv[3]), atoi(argv[4]), argv[5]) ? 1 : 0;
    }
    if (!strcmp(what, "all") || !strcmp(what, "coll")) {
        section_coll_groups();
    }
    if (!strcmp(what, "all") || !strcmp(what, "coll") || !strcmp(what, "threads")) {
        section_coll_threads();
    }
    if (!strcmp(what, "all") || !strcmp(what, "biggroup")) {
        section_biggroup();
    }
    if (!strcmp(what, "all") || !strcmp(what, "cliques")) {
        section_cliques();
    }
    if (!strcmp(what, "all") || !strcmp(what, "overlap")) {
        section_overlap();
    }
    if (!strcmp(what, "all") || !strcmp(what, "errors")) {
        section_errors();
    }
    if (!strcmp(what, "all") || !strcmp(what, "abort")) {
        section_abort();
    }
    if (!strcmp(what, "all") || !strcmp(what, "capture")) {
        section_capture();
    }
    if (!strcmp(what, "all") || !strcmp(what, "multi")) {
        section_multi();
    }
    if (!strcmp(what, "all") || !strcmp(what, "procs")) {
        section_procs();
    }
    if (!strcmp(what, "all") || !strcmp(what, "suspend")) {
        section_suspend();
    }
    if (!strcmp(what, "all") || !strcmp(what, "streams")) {
        section_streams();
    }
    if (!strcmp(what, "latency")) {
        section_latency();
    }
    if (!strcmp(what, "claim")) {
        section_claim();
    }
    if (!strcmp(what, "procs-stuck")) {
        run_procs("stuck", 2);
    }
    printf("%s: %d failure%s\n", what, failures, failures == 1 ? "" : "s");
    return failures ? 1 : 0;
}
