/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the GPU test programs (check_gpu.c, check_gpu_collv.c) share: EXPECT counts a
 * failed check in the program's `failures` and prints it, CUDA_OK ends the program when a
 * CUDA runtime call fails (nothing after it could be trusted).
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

#endif /* BR_TESTS_GPU_CHECK_H_ */
