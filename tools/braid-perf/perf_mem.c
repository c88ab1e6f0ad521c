/* SPDX-License-Identifier: Apache-2.0 */
/*
 * braid-perf buffers: host memory by default, CUDA device memory with --mem device when
 * the tool was built against the CUDA runtime and a GPU is present. Host buffers need no
 * stream (Braid completes host collectives before the call returns); device buffers get
 * one stream per rank, synchronised after each batch of calls.
 */
#include "perf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef BRAID_PERF_CUDA
#include <cuda_runtime.h>

/* A CUDA failure mid-benchmark leaves nothing worth measuring: report and stop. */
#define PERF_CUDA(call)                                                                            \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "braid-perf: %s failed: %s\n", #call, cudaGetErrorString(e_));         \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)
#endif

int perf_mem_device_available(char *why, size_t len)
{
#ifdef BRAID_PERF_CUDA
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        snprintf(why, len, "no CUDA device (%s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "device count is 0");
        return 0;
    }
    return n;
#else
    snprintf(why, len, "braid-perf was built without CUDA");
    return 0;
#endif
}

void perf_mem_describe(int device, int dev, char *buf, size_t len)
{
#ifdef BRAID_PERF_CUDA
    struct cudaDeviceProp prop;
    if (device && cudaGetDeviceProperties(&prop, dev) == cudaSuccess) {
        snprintf(buf, len, "device %2d [%04x:%02x:%02x] %s", dev, prop.pciDomainID, prop.pciBusID,
                 prop.pciDeviceID, prop.name);
        return;
    }
#endif
    (void)device;
    (void)dev;
    snprintf(buf, len, "device -1 [host] host memory");
}

int perf_mem_select_device(int dev)
{
#ifdef BRAID_PERF_CUDA
    return cudaSetDevice(dev) == cudaSuccess ? 0 : -1;
#else
    (void)dev;
    return -1;
#endif
}

void *perf_mem_alloc(int device, size_t bytes)
{
    void *p = NULL;
    if (bytes == 0) {
        bytes = 1; /* a valid, distinct pointer even for empty buffers */
    }
#ifdef BRAID_PERF_CUDA
    if (device) {
        PERF_CUDA(cudaMalloc(&p, bytes));
        return p;
    }
#endif
    (void)device;
    /* Page-aligned like cudaMalloc'd memory, so alignment never differs between modes. */
    if (posix_memalign(&p, 4096, bytes) != 0) {
        return NULL;
    }
    memset(p, 0, bytes); /* touch every page now, not inside the first timed call */
    return p;
}

void perf_mem_free(int device, void *p)
{
#ifdef BRAID_PERF_CUDA
    if (device) {
        cudaFree(p);
        return;
    }
#endif
    (void)device;
    free(p);
}

/* Ordered in the calls' stream: a cudaMemcpy from pageable memory can return before its copy
 * lands, and its legacy stream does not order the non-blocking stream of the calls. */
void perf_mem_to_dev(int device, void *dst, const void *host, size_t bytes, cudaStream_t s)
{
#ifdef BRAID_PERF_CUDA
    if (device) {
        PERF_CUDA(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, s));
        return;
    }
#endif
    (void)device;
    (void)s;
    if (dst != host) {
        memcpy(dst, host, bytes);
    }
}

void perf_mem_to_host(int device, void *host, const void *src, size_t bytes)
{
#ifdef BRAID_PERF_CUDA
    if (device) {
        PERF_CUDA(cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost));
        return;
    }
#endif
    (void)device;
    if (host != src) {
        memcpy(host, src, bytes);
    }
}

cudaStream_t perf_mem_stream_create(int device)
{
    cudaStream_t s = NULL;
#ifdef BRAID_PERF_CUDA
    if (device) {
        PERF_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    }
#endif
    (void)device;
    return s;
}

void perf_mem_stream_destroy(int device, cudaStream_t s)
{
#ifdef BRAID_PERF_CUDA
    if (device && s != NULL) {
        cudaStreamDestroy(s);
    }
#endif
    (void)device;
    (void)s;
}

int perf_mem_stream_sync(int device, cudaStream_t s)
{
#ifdef BRAID_PERF_CUDA
    if (device) {
        cudaError_t e = cudaStreamSynchronize(s);
        if (e != cudaSuccess) {
            fprintf(stderr, "braid-perf: cudaStreamSynchronize: %s\n", cudaGetErrorString(e));
            return -1;
        }
    }
#endif
    (void)device;
    (void)s;
    return 0;
}
