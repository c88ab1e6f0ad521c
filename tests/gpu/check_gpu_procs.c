/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_gpu's ranks as processes (check_gpu.c lists the sections): `procs` starts 2 and 4
 * processes of this program on one GPU (`check_gpu proc-rank ...`, one rank each) over a
 * unique id passed in hex, and `procs-stuck` two whose first call cannot progress.
 */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "brt_coll.h"
#include "check_gpu.h"
#include "gpu_check.h"
#include "nccl.h"

/* An AllReduce on dbuf that must fail, by its return code or the communicator's asynchronous
 * error, with a last error that holds `needle`; a stream never released ends the test (the
 * alarm). Returns the error text. */
static const char *failed_call(ncclComm_t comm, cudaStream_t s, int rank, float *dbuf,
                               const char *needle)
{
    ncclResult_t res = ncclAllReduce(dbuf, dbuf, 1024, ncclFloat, ncclSum, comm, s);
    alarm(120);
    CUDA_OK(cudaStreamSynchronize(s));
    alarm(0);
    /* Asynchronous errors are polled, as PyTorch's watchdog does: a peer's failure notice
     * may land just after this rank's stream was released. */
    ncclResult_t async = ncclSuccess;
    for (int i = 0; i < 100 && res == ncclSuccess && async == ncclSuccess; i++) {
        ncclCommGetAsyncError(comm, &async);
        if (async == ncclSuccess) {
            usleep(50000);
        }
    }
    const char *msg = ncclGetLastError(comm);
    EXPECT(res != ncclSuccess || async != ncclSuccess,
           "process rank %d: an AllReduce that could not complete reported nothing in 5 s", rank);
    EXPECT(strstr(msg, needle) != NULL, "process rank %d: the error does not say '%s': '%s'", rank,
           needle, msg);
    return msg;
}

/* One rank of `procs`, in a process of its own: what = "coll" (the thin matrix and counts
 * larger than the FIFO, a grouped pair of calls, 200 calls in flight at once), "dead" or "dead-later" (rank 1
 * leaves before its first call, or after two; rank 0's stream must be released and the
 * error name the peer), "abort" (rank 1 lives but never calls; another thread of rank 0
 * aborts, which must release rank 0's waiting stream). Exit status: failures (0 passes). */
int proc_rank_main(const char *what, int rank, int n, const char *hex)
{
    ncclComm_t comm;
    cudaStream_t s;
    char who[64];
    int fails = 0;
    if (gpu_rank_init(rank, n, hex, &comm) != 0) {
        return 1;
    }
    int d = -2;
    EXPECT(ncclCommCuDevice(comm, &d) == ncclSuccess && d == 0,
           "process rank %d: ncclCommCuDevice says %d, not 0", rank, d);
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    snprintf(who, sizeof(who), "process (pid %d)", (int)getpid());
    if (!strcmp(what, "coll")) {
        brt_case_t *thin = NULL, *big = NULL;
        size_t nthin = brt_cases_build(BRT_MATRIX_THIN, n, &thin);
        size_t nbig = brt_cases_build(BRT_MATRIX_BIG, n, &big);
        fails += run_cases_one_rank(comm, s, rank, n, thin, nthin, who);
        fails += run_cases_one_rank(comm, s, rank, n, big, nbig, who);
        /* Two calls of one group, then the stream's result read back. */
        float *dbuf, host[1024];
        CUDA_OK(cudaMalloc((void **)&dbuf, 2 * sizeof(host)));
        for (int i = 0; i < 1024; i++) {
            host[i] = (float)(rank + i);
        }
        CUDA_OK(cudaMemcpyAsync(dbuf, host, sizeof(host), cudaMemcpyHostToDevice, s));
        ncclGroupStart();
        ncclAllReduce(dbuf, dbuf, 1024, ncclFloat, ncclSum, comm, s);
        ncclAllGather(dbuf, dbuf + 1024, 1024 / n, ncclFloat, comm, s);
        EXPECT(ncclGroupEnd() == ncclSuccess, "process rank %d: group: %s", rank,
               ncclGetLastError(comm));
        CUDA_OK(cudaStreamSynchronize(s));
        CUDA_OK(cudaMemcpy(host, dbuf, sizeof(host), cudaMemcpyDeviceToHost));
        for (int i = 0; i < 1024; i++) {
            float want = (float)(n * i + n * (n - 1) / 2);
            if (host[i] != want) {
                EXPECT(0, "process rank %d: grouped AllReduce [%d] = %g, not %g", rank, i,
                       host[i], want);
                break;
            }
        }
        /* Many calls in flight before the stream is waited for (more than any queue). */
        int32_t *ibuf, ih[200];
        CUDA_OK(cudaMalloc((void **)&ibuf, sizeof(ih)));
        for (int i = 0; i < 200; i++) {
            ih[i] = rank * i;
        }
        CUDA_OK(cudaMemcpyAsync(ibuf, ih, sizeof(ih), cudaMemcpyHostToDevice, s));
        for (int i = 0; i < 200; i++) {
            EXPECT(ncclAllReduce(ibuf + i, ibuf + i, 1, ncclInt32, ncclSum, comm, s) == ncclSuccess,
                   "process rank %d: AllReduce %d of 200: %s", rank, i, ncclGetLastError(comm));
        }
        CUDA_OK(cudaStreamSynchronize(s));
        CUDA_OK(cudaMemcpy(ih, ibuf, sizeof(ih), cudaMemcpyDeviceToHost));
        for (int i = 0; i < 200; i++) {
            if (ih[i] != i * n * (n - 1) / 2) {
                EXPECT(0, "process rank %d: AllReduce %d of 200 in flight = %d, not %d", rank, i,
                       ih[i], i * n * (n - 1) / 2);
                break;
            }
        }
        cudaFree(ibuf);
        cudaFree(dbuf);
        printf("procs: rank %d of %d: %zu cases, %d failed\n", rank, n, nthin + nbig + 201,
               fails + failures);
        free(thin);
        free(big);
        ncclCommDestroy(comm);
    } else if (!strcmp(what, "grow")) {
        /* Calls that each need more staging than any before, none waited for before the
         * next: a slot reused after BR_CUDA_QUEUE calls must grow while the stream still
         * waits for the calls before it (freeing its old buffer there waited for the whole
         * device, the stager's own stream included). */
        enum { CALLS = 16, STEP = 65536 };
        size_t total = (size_t)STEP * CALLS * (CALLS + 1) / 2;
        float *dbuf, *host = malloc(total * sizeof(float));
        CUDA_OK(cudaMalloc((void **)&dbuf, total * sizeof(float)));
        for (size_t i = 0; i < total; i++) {
            host[i] = (float)(rank + 1 + (int)(i % 5));
        }
        CUDA_OK(cudaMemcpyAsync(dbuf, host, total * sizeof(float), cudaMemcpyHostToDevice, s));
        for (size_t k = 0, at = 0; k < CALLS; at += STEP * (k + 1), k++) {
            EXPECT(ncclAllReduce(dbuf + at, dbuf + at, STEP * (k + 1), ncclFloat, ncclSum, comm,
                                 s) == ncclSuccess,
                   "process rank %d: AllReduce %zu of growing size: %s", rank, k,
                   ncclGetLastError(comm));
        }
        alarm(120);
        CUDA_OK(cudaStreamSynchronize(s));
        alarm(0);
        CUDA_OK(cudaMemcpy(host, dbuf, total * sizeof(float), cudaMemcpyDeviceToHost));
        size_t bad = 0;
        for (size_t i = 0; i < total; i++) {
            bad += host[i] != (float)(n * (n + 1) / 2 + n * (int)(i % 5));
        }
        EXPECT(bad == 0, "process rank %d: %zu wrong elements after calls of growing size", rank,
               bad);
        printf("procs grow: rank %d: %d calls of growing size, %zu wrong\n", rank, (int)CALLS,
               bad);
        cudaFree(dbuf);
        free(host);
        ncclCommDestroy(comm);
    } else if (!strcmp(what, "suspend")) {
        fails += suspend_rounds(comm, s, rank, n, who);
        ncclCommDestroy(comm);
    } else if (!strcmp(what, "stuck")) {
        /* A GPU that runs one process at a time, keeping it while a stream waits, with
         * streams told to wait in the GPU all the same (the emulator's exclusive model,
         * BRAID_CUDA_SHARED_GPU_SYNC=0): the first call cannot progress. It must fail on
         * both ranks within the wait timeout, saying why, instead of hanging. */
        float *dbuf;
        CUDA_OK(cudaMalloc((void **)&dbuf, 4096));
        const char *msg = failed_call(comm, s, rank, dbuf, "not reached");
        printf("procs stuck: rank %d: %s\n", rank, msg);
        cudaFree(dbuf);
        ncclCommAbort(comm);
    } else if (!strcmp(what, "abort")) {
        float *dbuf;
        char flag[96];
        /* Rank 0 creates it once its stream was released; rank 1 lives and calls nothing
         * until then (its own abort would release rank 0 too), or for 40 s at most. */
        unsigned long long h = 1469598103934665603ull; /* FNV-1a of the whole unique id */
        for (const char *c = hex; *c != '\0'; c++) {
            h = (h ^ (unsigned char)*c) * 1099511628211ull;
        }
        snprintf(flag, sizeof(flag), "/tmp/braid-check-gpu-abort-%016llx", h);
        CUDA_OK(cudaMalloc((void **)&dbuf, 4096));
        if (rank == 1) {
            for (int i = 0; i < 4000 && access(flag, F_OK) != 0; i++) {
                usleep(10000);
            }
            unlink(flag);
        } else {
            pthread_t th;
            /* The wait timeout (60 s in these runs) is beyond the alarm: only the abort can
             * release the call in time. Started first: where calls complete on the host
             * (ranks of several processes on one GPU, BRAID_CUDA_SHARED_GPU_SYNC) the call
             * itself waits, and the abort must release it with an error; else the call
             * returns at once and the abort releases the waiting stream. */
            pthread_create(&th, NULL, abort_later, &comm);
            alarm(20);
            ncclResult_t res = ncclAllReduce(dbuf, dbuf, 1024, ncclFloat, ncclSum, comm, s);
            EXPECT(res == ncclSuccess || strstr(ncclGetLastError(comm), "abort") != NULL,
                   "process rank 0: AllReduce returned %d: %s", res, ncclGetLastError(comm));
            CUDA_OK(cudaStreamSynchronize(s));
            alarm(0);
            pthread_join(th, NULL);
            FILE *f = fopen(flag, "w");
            if (f != NULL) {
                fclose(f);
            }
            printf("procs abort: rank 0: the waiting stream was released\n");
        }
        cudaFree(dbuf);
        if (rank == 1) {
            ncclCommAbort(comm);
        }
    } else {
        /* "dead": rank 1 dies without calling; "dead-later": after two AllReduces with
         * rank 0 (the second one past the set-up of calls across processes). */
        float *dbuf;
        CUDA_OK(cudaMalloc((void **)&dbuf, 4096));
        int warm = !strcmp(what, "dead-later") ? 2 : 0;
        for (int i = 0; i < warm; i++) {
            EXPECT(ncclAllReduce(dbuf, dbuf, 1024, ncclFloat, ncclSum, comm, s) == ncclSuccess,
                   "process rank %d: warm-up AllReduce: %s", rank, ncclGetLastError(comm));
            CUDA_OK(cudaStreamSynchronize(s));
        }
        if (rank == 1) {
            _exit(0); /* dies without destroying its communicator */
        }
        const char *msg = failed_call(comm, s, rank, dbuf, "rank 1");
        printf("procs %s: rank 0: the peer's death was reported: %s\n", what, msg);
        cudaFree(dbuf);
        ncclCommAbort(comm);
    }
    cudaStreamDestroy(s);
    return fails + failures;
}

/* n ranks, each a process of its own on GPU 0 (as torchrun starts them): this program
 * started again for each rank. */
void run_procs(const char *what, int n)
{
    int fails = gpu_procs_run(what, n);
    failures += fails;
    printf("procs %s: %d processes on one GPU: %s\n", what, n, fails ? "FAILED" : "passed");
}

void section_procs(void)
{
    run_procs("coll", 2);
    run_procs("coll", 4);
    run_procs("grow", 2);
    run_procs("dead", 2);
    run_procs("dead-later", 2);
    run_procs("abort", 2);
}
