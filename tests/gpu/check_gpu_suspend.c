/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The suspend section of the GPU tests (check_gpu.c's "suspend"): ncclCommSuspend /
 * ncclCommResume between exact device AllReduces, with MemStats counting the device FIFOs
 * (ranks as threads: the CUDA executor's clique) or the staging (ranks as processes:
 * check_gpu_procs.c runs suspend_rounds in each), until the suspend releases them.
 */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "check_gpu.h"
#include "gpu_check.h"
#include "nccl.h"

/* A rank's rounds of device AllReduces around ncclCommSuspend / ncclCommResume: exact
 * before and after, MemStats counting bytes (the device FIFOs or the staging among them)
 * until the suspend releases them all, calls refused meanwhile. Returns the failures. */
int suspend_rounds(ncclComm_t comm, cudaStream_t s, int rank, int n, const char *who)
{
    enum { COUNT = 70001 };
    float *dbuf, *host = malloc(COUNT * sizeof(float));
    uint64_t held = 0, flag = 0;
    int fails = 0;
    CUDA_OK(cudaMalloc((void **)&dbuf, COUNT * sizeof(float)));
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < COUNT; i++) {
            host[i] = (float)((rank + 1) * (int)(i % 31 + round));
        }
        CUDA_OK(cudaMemcpyAsync(dbuf, host, COUNT * sizeof(float), cudaMemcpyHostToDevice, s));
        ncclResult_t res = ncclAllReduce(dbuf, dbuf, COUNT, ncclFloat, ncclSum, comm, s);
        CUDA_OK(cudaStreamSynchronize(s));
        CUDA_OK(cudaMemcpy(host, dbuf, COUNT * sizeof(float), cudaMemcpyDeviceToHost));
        size_t bad = 0;
        for (size_t i = 0; res == ncclSuccess && i < COUNT; i++) {
            bad += host[i] != (float)(n * (n + 1) / 2 * (int)(i % 31 + round));
        }
        if (res != ncclSuccess || bad != 0) {
            printf("FAIL: %s rank %d: round %d: AllReduce returned %d, %zu wrong: %s\n", who, rank,
                   round, res, bad, ncclGetLastError(comm));
            fails++;
            break;
        }
        ncclCommMemStats(comm, ncclStatGpuMemSuspend, &held);
        if (held == 0) {
            printf("FAIL: %s rank %d: round %d: MemStats says 0 bytes held\n", who, rank, round);
            fails++;
        }
        if (round == 2) {
            break;
        }
        if (ncclCommSuspend(comm, NCCL_SUSPEND_MEM) != ncclSuccess) {
            printf("FAIL: %s rank %d: ncclCommSuspend: %s\n", who, rank, ncclGetLastError(comm));
            fails++;
            break;
        }
        ncclCommMemStats(comm, ncclStatGpuMemSuspend, &held);
        ncclCommMemStats(comm, ncclStatGpuMemSuspended, &flag);
        if (held != 0 || flag != 1) {
            printf("FAIL: %s rank %d: suspended: MemStats say %llu bytes held, suspended %llu\n",
                   who, rank, (unsigned long long)held, (unsigned long long)flag);
            fails++;
        }
        if (ncclAllReduce(dbuf, dbuf, COUNT, ncclFloat, ncclSum, comm, s) != ncclInvalidUsage) {
            printf("FAIL: %s rank %d: a device call while suspended was not refused\n", who, rank);
            fails++;
        }
        if (ncclCommResume(comm) != ncclSuccess) {
            printf("FAIL: %s rank %d: ncclCommResume: %s\n", who, rank, ncclGetLastError(comm));
            fails++;
            break;
        }
    }
    printf("suspend: %s rank %d of %d: %s\n", who, rank, n, fails ? "FAILED" : "passed");
    cudaFree(dbuf);
    free(host);
    return fails;
}

/* One thread per rank. */
typedef struct {
    ncclUniqueId id;
    int rank, n;
    int fails;
} suspend_arg_t;

static void *suspend_main(void *p)
{
    suspend_arg_t *a = p;
    ncclComm_t comm;
    cudaStream_t s;
    CUDA_OK(cudaSetDevice(0));
    if (ncclCommInitRank(&comm, a->n, a->id, a->rank) != ncclSuccess) {
        a->fails = 1;
        return NULL;
    }
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    a->fails += suspend_rounds(comm, s, a->rank, a->n, "thread");
    ncclCommDestroy(comm);
    cudaStreamDestroy(s);
    return NULL;
}

/* 3 ranks as threads of this process (the CUDA executor's clique), then 2 processes. */
void section_suspend(void)
{
    enum { NT = 3 };
    pthread_t th[NT];
    suspend_arg_t a[NT];
    ncclUniqueId id;
    ncclGetUniqueId(&id);
    for (int r = 0; r < NT; r++) {
        a[r] = (suspend_arg_t){id, r, NT, 0};
        pthread_create(&th[r], NULL, suspend_main, &a[r]);
    }
    for (int r = 0; r < NT; r++) {
        pthread_join(th[r], NULL);
        failures += a[r].fails;
    }
    run_procs("suspend", 2);
}
