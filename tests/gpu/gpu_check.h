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

#endif /* BR_TESTS_GPU_CHECK_H_ */
