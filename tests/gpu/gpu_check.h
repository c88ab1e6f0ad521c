/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the GPU test programs (check_gpu.c, check_gpu_collv.c) share: EXPECT counts a
 * failed check in the program's `failures` and prints it, CUDA_OK ends the program when a
 * CUDA runtime call fails (nothing after it could be trusted), gpu_or_skip says SKIP where
 * there is no GPU.
 */
#ifndef BR_TESTS_GPU_CHECK_H_
#define BR_TESTS_GPU_CHECK_H_

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nccl.h"

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
        }                                                                                          \
    } while (0)

#define CUDA_OK(call)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            printf("FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));     \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* Exit status of a test that cannot run here (ctest's SKIP_RETURN_CODE). */
#define GPU_SKIP 77

/* 0 when the process sees a GPU (stdout then line-buffered, for interleaved ranks), else
 * GPU_SKIP after printing why: what each program's main returns when it is not 0. */
static inline int gpu_or_skip(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        printf("SKIP: no GPU here (%s): the CUDA executor's tests need one\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return GPU_SKIP;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    return 0;
}

/* A unique id as hex text (2 * NCCL_UNIQUE_ID_BYTES digits and a NUL), and back (-1: not
 * one), to hand it to ranks started as programs of their own. */
static inline void gpu_id_to_hex(const ncclUniqueId *id, char *hex)
{
    for (size_t i = 0; i < sizeof(id->internal); i++) {
        sprintf(hex + 2 * i, "%02x", (unsigned char)id->internal[i]);
    }
}

static inline int gpu_id_from_hex(const char *hex, ncclUniqueId *id)
{
    if (strlen(hex) != 2 * sizeof(id->internal)) {
        return -1;
    }
    for (size_t i = 0; i < sizeof(id->internal); i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1) {
            return -1;
        }
        id->internal[i] = (char)v;
    }
    return 0;
}

/* A rank started by gpu_procs_run: its communicator on GPU 0 from the id's hex text.
 * Returns 0, or 1 after printing why not. */
static inline int gpu_rank_init(int rank, int n, const char *hex, ncclComm_t *comm_p)
{
    ncclUniqueId id;
    if (gpu_id_from_hex(hex, &id) != 0) {
        printf("FAIL: process rank %d: bad unique id argument\n", rank);
        return 1;
    }
    CUDA_OK(cudaSetDevice(0));
    if (ncclCommInitRank(comm_p, n, id, rank) != ncclSuccess) {
        printf("FAIL: process rank %d: ncclCommInitRank: %s\n", rank, ncclGetLastError(NULL));
        return 1;
    }
    return 0;
}

/* n ranks, each a process of its own on the GPU (as torchrun starts them): this program
 * started again for each as `PROGRAM proc-rank what rank n hex-id` (exec'd, not only
 * forked: a process that has used CUDA cannot hand it to a forked child), all waited for.
 * Returns how many did not exit 0 (each printed), or 1 when no id could be made. */
static inline int gpu_procs_run(const char *what, int n)
{
    ncclUniqueId id;
    char hex[2 * sizeof(id.internal) + 1], rs[16], ns[16];
    pid_t pid[64];
    int fails = 0;
    if (n > 64 || ncclGetUniqueId(&id) != ncclSuccess) {
        printf("FAIL: procs %s: %d ranks: no unique id: %s\n", what, n, ncclGetLastError(NULL));
        return 1;
    }
    gpu_id_to_hex(&id, hex);
    fflush(stdout);
    for (int r = 0; r < n; r++) {
        snprintf(rs, sizeof(rs), "%d", r);
        snprintf(ns, sizeof(ns), "%d", n);
        pid[r] = fork();
        if (pid[r] == 0) {
            execl("/proc/self/exe", "check_gpu", "proc-rank", what, rs, ns, hex, (char *)NULL);
            _exit(127);
        }
    }
    for (int r = 0; r < n; r++) {
        int st = 0;
        if (pid[r] < 0 || waitpid(pid[r], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            printf("FAIL: procs %s: rank %d's process ended with %s %d\n", what, r,
                   WIFEXITED(st) ? "status" : "signal",
                   WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
            fails++;
        }
    }
    return fails;
}

#endif /* BR_TESTS_GPU_CHECK_H_ */
