/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GPU's device-to-device copy bandwidth, the yardstick of docs/performance.md: bytes
 * read plus bytes written per second by cudaMemcpyAsync of 256 MiB and 1 GiB, best of 10.
 * Prints SKIP (exit 77) without a GPU.
 */
#include <cuda_runtime.h>
#include <stdio.h>

int main(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("SKIP: no GPU here\n");
        return 77;
    }
    static const size_t sizes[] = {256u << 20, 1u << 30};
    for (int i = 0; i < 2; i++) {
        size_t bytes = sizes[i];
        void *a, *b;
        cudaEvent_t e0, e1;
        float best = 1e30f;
        if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) {
            printf("cannot allocate 2 x %zu bytes\n", bytes);
            return 1;
        }
        cudaEventCreate(&e0);
        cudaEventCreate(&e1);
        for (int k = 0; k < 11; k++) {
            float ms;
            cudaEventRecord(e0, 0);
            cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, 0);
            cudaEventRecord(e1, 0);
            cudaEventSynchronize(e1);
            cudaEventElapsedTime(&ms, e0, e1);
            if (k > 0 && ms < best) {
                best = ms;
            }
        }
        printf("copy %zu MiB: %.3f ms, %.1f GB/s read + written\n", bytes >> 20, best,
               2.0 * (double)bytes / (best * 1e-3) / 1e9);
        cudaFree(a);
        cudaFree(b);
    }
    return 0;
}
