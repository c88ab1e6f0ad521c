/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The part of the CUDA runtime API that tests/gpu/check_gpu.c uses, written over the
 * driver API, so that the same test source runs against the emulated driver
 * (tests/cuda-emu/fake_cuda.c) in CI. Only for that build; the GPU build uses the real
 * cuda_runtime.h.
 */
#ifndef BRAID_EMU_CUDA_RUNTIME_H_
#define BRAID_EMU_CUDA_RUNTIME_H_

#include <stddef.h>
#include <stdint.h>

typedef struct CUstream_st *cudaStream_t;
typedef struct CUgraph_st *cudaGraph_t;
typedef struct CUgraphExec_st *cudaGraphExec_t;
typedef struct CUevent_st *cudaEvent_t;
typedef enum { cudaSuccess = 0, cudaErrorNotReady = 600, cudaErrorEmu = 999 } cudaError_t;
enum { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2, cudaMemcpyDeviceToDevice = 3 };
enum { cudaStreamNonBlocking = 1 };
/* The default streams' special handles (driver_types.h). */
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)
enum { cudaStreamCaptureModeThreadLocal = 1 };

int cuInit(unsigned);
int cuDeviceGetCount(int *);
int cuDevicePrimaryCtxRetain(void **, int);
int cuCtxSetCurrent(void *);
int cuMemAlloc_v2(unsigned long long *, size_t);
int cuMemFree_v2(unsigned long long);
int cuCtxSynchronize(void);
int cuMemcpy(unsigned long long, unsigned long long, size_t);
int cuMemsetD8Async(unsigned long long, unsigned char, size_t, void *);
int cuMemcpyAsync(unsigned long long, unsigned long long, size_t, void *);
int cuStreamCreate(void **, unsigned);
int cuStreamDestroy_v2(void *);
int cuStreamSynchronize(void *);
int cuStreamQuery(void *);
int cuStreamBeginCapture_v2(void *, int);
int cuStreamEndCapture(void *, void **);
int cuGetErrorString(int, const char **);
int cuEventCreate(void **, unsigned);
int cuEventDestroy_v2(void *);
int cuEventRecord(void *, void *);
int cuStreamWaitEvent(void *, void *, unsigned);
int cuGraphInstantiateWithFlags(void **, void *, unsigned long long);
int cuGraphLaunch(void *, void *);
int cuGraphDestroy(void *);
int cuGraphExecDestroy(void *);

static inline cudaError_t emu_err(int e)
{
    return e == 0 ? cudaSuccess : e == 600 ? cudaErrorNotReady : cudaErrorEmu;
}

static inline const char *cudaGetErrorString(cudaError_t e)
{
    const char *s = "emulated driver error";
    cuGetErrorString((int)e, &s);
    return s;
}

static inline cudaError_t cudaGetDeviceCount(int *n)
{
    cuInit(0);
    return emu_err(cuDeviceGetCount(n));
}

static inline cudaError_t cudaSetDevice(int d)
{
    void *ctx;
    int e = cuDevicePrimaryCtxRetain(&ctx, d);
    return emu_err(e != 0 ? e : cuCtxSetCurrent(ctx));
}

static inline cudaError_t cudaMalloc(void **p, size_t n)
{
    unsigned long long d = 0;
    int e = cuMemAlloc_v2(&d, n);
    *p = (void *)(uintptr_t)d;
    return emu_err(e);
}

static inline cudaError_t cudaFree(void *p)
{
    return emu_err(cuMemFree_v2((unsigned long long)(uintptr_t)p));
}

static inline cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind)
{
    (void)kind;
    return emu_err(
        cuMemcpy((unsigned long long)(uintptr_t)dst, (unsigned long long)(uintptr_t)src, n));
}

static inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind,
                                          cudaStream_t s)
{
    (void)kind;
    return emu_err(cuMemcpyAsync((unsigned long long)(uintptr_t)dst,
                                 (unsigned long long)(uintptr_t)src, n, s));
}

/* check_gpu calls it only to let a pageable cudaMemcpy land; the emulator's cudaMemcpy has
 * landed when it returns, and no stream has work then. */
static inline cudaError_t cudaDeviceSynchronize(void)
{
    return emu_err(cuCtxSynchronize());
}

static inline cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
    return emu_err(cuMemsetD8Async((unsigned long long)(uintptr_t)p, (unsigned char)v, n, s));
}

static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    return emu_err(cuStreamCreate((void **)s, flags));
}

static inline cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    return emu_err(cuStreamDestroy_v2(s));
}

static inline cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    return emu_err(cuStreamSynchronize(s));
}

static inline cudaError_t cudaStreamQuery(cudaStream_t s)
{
    return emu_err(cuStreamQuery(s));
}

static inline cudaError_t cudaStreamBeginCapture(cudaStream_t s, int mode)
{
    return emu_err(cuStreamBeginCapture_v2(s, mode));
}

static inline cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g)
{
    return emu_err(cuStreamEndCapture(s, (void **)g));
}

static inline cudaError_t cudaGraphDestroy(cudaGraph_t g)
{
    return emu_err(cuGraphDestroy(g));
}

static inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g,
                                               unsigned long long flags)
{
    return emu_err(cuGraphInstantiateWithFlags((void **)e, g, flags));
}

static inline cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s)
{
    return emu_err(cuGraphLaunch(e, s));
}

static inline cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e)
{
    return emu_err(cuGraphExecDestroy(e));
}

static inline cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    return emu_err(cuEventCreate((void **)e, 0));
}

static inline cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    return emu_err(cuEventDestroy_v2(e));
}

static inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    return emu_err(cuEventRecord(e, s));
}

static inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
    return emu_err(cuStreamWaitEvent(s, e, flags));
}

#endif /* BRAID_EMU_CUDA_RUNTIME_H_ */
