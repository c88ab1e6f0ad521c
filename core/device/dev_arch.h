/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The few machine primitives the kernels' interpreter (dev_prims.h) is written against, in
 * two builds of the same source:
 *
 *  - CUDA (dev_kernel.cu, nvcc): a block of blockDim.x threads, __syncthreads() as the
 *    barrier, PTX acquire/release at system scope for the FIFO counters (a peer may be
 *    another GPU reached over P2P), %globaltimer for time, 16-byte vector loads/stores.
 *  - Host emulation (tests/device, a C compiler): a "block" is one CPU thread (thread 0 of
 *    1), the barrier is a no-op, counters use the __atomic builtins, time is
 *    CLOCK_MONOTONIC, a waiting block yields its CPU (many blocks share few cores), and an
 *    8- or 16-byte access not aligned to its size aborts, as the GPU faults on it.
 *
 * Everything above this header is plain C that also compiles as CUDA C++: no templates,
 * no references; functions are BR_DEV_HD (static inline, and __device__ under nvcc).
 */
#ifndef BR_DEVICE_DEV_ARCH_H_
#define BR_DEVICE_DEV_ARCH_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A 16-byte piece of data as two little-endian words (both GPUs and x86-64 are LE). */
typedef struct {
    uint64_t lo, hi;
} br_dev_v2_t;

#ifdef __CUDACC__

#define BR_DEV_HD static __device__ __forceinline__
/* Kept out of line: one copy of a large function (the arithmetic's type switch). */
#define BR_DEV_NOINLINE static __device__ __noinline__
#define BR_DEV_TID ((int)threadIdx.x)
#define BR_DEV_PRAGMA_UNROLL _Pragma("unroll")
#define BR_DEV_NTHR ((int)blockDim.x)
#define BR_DEV_SYNC() __syncthreads()

/* Orders this thread's earlier memory accesses before its later ones for every observer
 * in the system (peers on other GPUs and the host included): fence.sc.sys. */
BR_DEV_HD void br_dev_fence(void)
{
    __threadfence_system();
}

/* The same for observers on this GPU only (fence.sc.gpu): enough when every block that
 * reads or writes the memory runs on this GPU, and far cheaper than the system scope. */
BR_DEV_HD void br_dev_fence_gpu(void)
{
    __threadfence();
}

/* Acquire load of a FIFO counter: data the writer published before its release store is
 * visible to this thread (and, after a block barrier, to the whole block). */
BR_DEV_HD uint64_t br_dev_ld_acquire(const uint64_t *p)
{
    uint64_t v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

/* Release store of a FIFO counter: everything this block wrote before the barrier that
 * precedes it is visible to whoever acquires the new value. */
BR_DEV_HD void br_dev_st_release(uint64_t *p, uint64_t v)
{
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

/* Plain store of a word another block reads after acquiring a counter or a flag. */
BR_DEV_HD void br_dev_st_word(uint64_t *p, uint64_t v)
{
    asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

BR_DEV_HD uint64_t br_dev_ld_word(const uint64_t *p)
{
    uint64_t v;
    asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

/* One 16-byte access that another block polls (LL and LL128 lines): a single vector
 * instruction, so data and flag of a line are seen together or not at all. */
BR_DEV_HD br_dev_v2_t br_dev_ld_volatile16(const void *p)
{
    br_dev_v2_t v;
    asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];"
                 : "=l"(v.lo), "=l"(v.hi)
                 : "l"(p)
                 : "memory");
    return v;
}

BR_DEV_HD void br_dev_st_volatile16(void *p, br_dev_v2_t v)
{
    asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(v.lo), "l"(v.hi)
                 : "memory");
}

/* Plain 16-byte accesses of aligned data (FIFO slots, aligned user buffers). */
BR_DEV_HD br_dev_v2_t br_dev_ld16(const void *p)
{
    ulonglong2 u = *(const ulonglong2 *)p;
    br_dev_v2_t v;
    v.lo = u.x;
    v.hi = u.y;
    return v;
}

BR_DEV_HD void br_dev_st16(void *p, br_dev_v2_t v)
{
    ulonglong2 u;
    u.x = v.lo;
    u.y = v.hi;
    *(ulonglong2 *)p = u;
}

/* Plain 8-byte accesses of 8-aligned data. */
BR_DEV_HD uint64_t br_dev_ld8(const void *p)
{
    return *(const uint64_t *)p;
}

BR_DEV_HD void br_dev_st8(void *p, uint64_t v)
{
    *(uint64_t *)p = v;
}

BR_DEV_HD uint64_t br_dev_now_ns(void)
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* A waiting thread backs off briefly so that polling does not starve the SM's memory
 * pipeline (the peer it waits for may share the SM). */
#define BR_DEV_YIELD() __nanosleep(64)

/* The device's first failure wins: only the block that turns the claim from 0 fills in the
 * device's report. atomicCAS is GPU scope: atomic among the blocks of one GPU, which is
 * why each device has its own claim word in its own memory (exec_cuda_setup.c). */
BR_DEV_HD int br_dev_claim_status(uint32_t *claim, uint32_t code)
{
    return atomicCAS((unsigned int *)claim, 0u, code) == 0u;
}

/* Bit casts. */
BR_DEV_HD float br_dev_u2f(uint32_t u)
{
    return __uint_as_float(u);
}

BR_DEV_HD uint32_t br_dev_f2u(float f)
{
    return __float_as_uint(f);
}

BR_DEV_HD double br_dev_u2d(uint64_t u)
{
    return __longlong_as_double((long long)u);
}

BR_DEV_HD uint64_t br_dev_d2u(double d)
{
    return (uint64_t)__double_as_longlong(d);
}

/* IEEE operations rounded to nearest even, never contracted into a fused multiply-add
 * (the host executor rounds the product and the sum separately). */
#define BR_DEV_FADD(a, b) __fadd_rn((a), (b))
#define BR_DEV_FMUL(a, b) __fmul_rn((a), (b))
#define BR_DEV_FDIV(a, b) __fdiv_rn((a), (b))
#define BR_DEV_DADD(a, b) __dadd_rn((a), (b))
#define BR_DEV_DMUL(a, b) __dmul_rn((a), (b))
#define BR_DEV_DDIV(a, b) __ddiv_rn((a), (b))

#else /* host emulation */

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <pthread.h>

#define BR_DEV_HD static inline
#define BR_DEV_NOINLINE static
#define BR_DEV_PRAGMA_UNROLL _Pragma("GCC unroll 4")

/* The calling thread's place in its block. A block is one thread unless a test runs it
 * as several (br_dev_emu_enter): then they share the block's state (br_dev_shared_t) and
 * meet at its barrier, so the interpreter's split between thread 0 and the others runs
 * with real concurrency. */
static _Thread_local int br_dev_emu_tid = 0, br_dev_emu_nthr = 1;
static _Thread_local pthread_barrier_t *br_dev_emu_barrier = NULL;

static inline void br_dev_emu_enter(int tid, int nthr, pthread_barrier_t *barrier)
{
    br_dev_emu_tid = tid;
    br_dev_emu_nthr = nthr;
    br_dev_emu_barrier = barrier;
}

static inline void br_dev_emu_sync(void)
{
    if (br_dev_emu_barrier != NULL) {
        pthread_barrier_wait(br_dev_emu_barrier);
    }
}

#define BR_DEV_TID br_dev_emu_tid
#define BR_DEV_NTHR br_dev_emu_nthr
#define BR_DEV_SYNC() br_dev_emu_sync()

/* A GPU faults on a vector or 8-byte access that is not aligned to its size
 * (CUDA_ERROR_MISALIGNED_ADDRESS, and the context is lost); the emulation stops there too,
 * where memcpy would have hidden it. */
static inline void br_dev_emu_aligned(const void *p, uintptr_t size)
{
    if (((uintptr_t)p & (size - 1)) != 0) {
        fprintf(stderr, "br_dev: misaligned %u-byte access at %p (a GPU faults here)\n",
                (unsigned)size, p);
        abort();
    }
}

static inline void br_dev_fence(void)
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

static inline void br_dev_fence_gpu(void)
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

static inline uint64_t br_dev_ld_acquire(const uint64_t *p)
{
    br_dev_emu_aligned(p, 8);
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static inline void br_dev_st_release(uint64_t *p, uint64_t v)
{
    br_dev_emu_aligned(p, 8);
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

static inline void br_dev_st_word(uint64_t *p, uint64_t v)
{
    br_dev_emu_aligned(p, 8);
    __atomic_store_n(p, v, __ATOMIC_RELAXED);
}

static inline uint64_t br_dev_ld_word(const uint64_t *p)
{
    br_dev_emu_aligned(p, 8);
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}

/* An aligned 16-byte vector access is one instruction (movdqa) on x86-64, which AVX-era
 * processors perform atomically, as the GPU does its v2.u64 accesses. */
typedef unsigned long long br_dev_hv2_t __attribute__((vector_size(16)));

static inline br_dev_v2_t br_dev_ld_volatile16(const void *p)
{
    br_dev_emu_aligned(p, 16);
    br_dev_hv2_t u = *(const volatile br_dev_hv2_t *)p;
    br_dev_v2_t v;
    v.lo = u[0];
    v.hi = u[1];
    return v;
}

static inline void br_dev_st_volatile16(void *p, br_dev_v2_t v)
{
    br_dev_emu_aligned(p, 16);
    br_dev_hv2_t u = {v.lo, v.hi};
    *(volatile br_dev_hv2_t *)p = u;
}

static inline br_dev_v2_t br_dev_ld16(const void *p)
{
    br_dev_v2_t v;
    br_dev_emu_aligned(p, 16);
    memcpy(&v, p, sizeof(v));
    return v;
}

static inline void br_dev_st16(void *p, br_dev_v2_t v)
{
    br_dev_emu_aligned(p, 16);
    memcpy(p, &v, sizeof(v));
}

static inline uint64_t br_dev_ld8(const void *p)
{
    uint64_t v;
    br_dev_emu_aligned(p, 8);
    memcpy(&v, p, sizeof(v));
    return v;
}

static inline void br_dev_st8(void *p, uint64_t v)
{
    br_dev_emu_aligned(p, 8);
    memcpy(p, &v, sizeof(v));
}

static inline uint64_t br_dev_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Blocks are threads, more of them than cores: a waiting one gives its core away. */
#define BR_DEV_YIELD() sched_yield()

static inline int br_dev_claim_status(uint32_t *claim, uint32_t code)
{
    uint32_t expected = 0;
    return __atomic_compare_exchange_n(claim, &expected, code, 0, __ATOMIC_SEQ_CST,
                                       __ATOMIC_SEQ_CST);
}

static inline float br_dev_u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static inline uint32_t br_dev_f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline double br_dev_u2d(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof(d));
    return d;
}

static inline uint64_t br_dev_d2u(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof(u));
    return u;
}

/* ISO C mode compiles these without contraction (-ffp-contract=off), one rounding each. */
#define BR_DEV_FADD(a, b) ((float)((a) + (b)))
#define BR_DEV_FMUL(a, b) ((float)((a) * (b)))
#define BR_DEV_FDIV(a, b) ((float)((a) / (b)))
#define BR_DEV_DADD(a, b) ((double)((a) + (b)))
#define BR_DEV_DMUL(a, b) ((double)((a) * (b)))
#define BR_DEV_DDIV(a, b) ((double)((a) / (b)))

#endif /* __CUDACC__ */

#endif /* BR_DEVICE_DEV_ARCH_H_ */
