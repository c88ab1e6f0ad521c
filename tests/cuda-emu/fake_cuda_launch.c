/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The emulated CUDA driver's modules and kernel launches (tests/cuda-emu; what the driver
 * emulates: fake_cuda.c's comment). A module is any fatbin, cubin or PTX image; its three
 * kernels are markers whose address names them. A launch is checked as a GPU would check
 * it (grid, block and shared-memory limits, the cooperative attribute), and so is every
 * address its arguments give the kernel (an address the device cannot reach aborts with
 * MISUSE, the fault a GPU would raise there); then it becomes one operation of its stream,
 * which fake_cuda_stream.c runs. No state but the kernel markers: any thread may call.
 */
#include <stdint.h>
#include <string.h>

#include "fake_cuda_int.h"

/* ---- modules ---- */

static int the_kernel;    /* br_dev_kernel */
static int reduce_kernel; /* br_dev_reduce_kernel */
static int direct_kernel; /* br_dev_direct_kernel */

EXPORT CUresult cuModuleLoadData(void **m, const void *image)
{
    uint32_t magic = 0;
    if (image == NULL) {
        return ERR_INVALID_VALUE;
    }
    memcpy(&magic, image, sizeof(magic));
    if (magic != 0xba55ed50u && memcmp(image, "\177ELF", 4) != 0 && memcmp(image, "//", 2) != 0) {
        return ERR_INVALID_IMAGE; /* neither a fatbin, a cubin nor PTX text */
    }
    ctx_sync("cuModuleLoadData");
    *m = &the_kernel;
    return OK;
}

EXPORT CUresult cuModuleGetFunction(void **f, void *m, const char *name)
{
    (void)m;
    ctx_sync("cuModuleGetFunction (lazy loading loads the kernel here)");
    if (strcmp(name, "br_dev_kernel") == 0) {
        *f = &the_kernel;
    } else if (strcmp(name, "br_dev_reduce_kernel") == 0) {
        *f = &reduce_kernel;
    } else if (strcmp(name, "br_dev_direct_kernel") == 0) {
        *f = &direct_kernel;
    } else {
        return ERR_NOT_FOUND;
    }
    return OK;
}

/* Every kernel of Braid's is built with __launch_bounds__(512): a block of more threads
 * cannot run (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES at launch, no room in the occupancy). */
#define KERNEL_MAX_THREADS 512
#define STATIC_SMEM_MAX 49152 /* without cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES) */

EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, void *f, int threads,
                                                            size_t smem)
{
    (void)f;
    if (threads <= 0) {
        return ERR_INVALID_VALUE;
    }
    *n = threads > KERNEL_MAX_THREADS || smem > STATIC_SMEM_MAX ? 0 : 2;
    return OK;
}

/* ---- launches ---- */

/* A kernel argument the device must reach, n bytes at p (NULL: not used): on a GPU,
 * anything else faults the context (CUDA_ERROR_ILLEGAL_ADDRESS) when the kernel runs. */
static void reach_arg(const char *kernel, const char *what, const void *p, size_t n)
{
    if (p != NULL && n > 0 && !device_reaches((uintptr_t)p, n)) {
        misuse("%s: %s at %p (%zu bytes) is neither device memory nor host memory mapped for "
               "the device: a GPU faults there (CUDA_ERROR_ILLEGAL_ADDRESS)",
               kernel, what, p, n);
    }
}

static void check_direct_args(const br_dev_direct_t *D)
{
    const char *k = "br_dev_direct_kernel";
    size_t all = (size_t)D->bytes * D->nranks;
    /* What the kernel touches: a Broadcast reads the root's input alone, a Reduce writes
     * the root's output alone (the others' pointers are whatever their callers passed). */
    for (uint32_t r = 0; r < D->nranks && r < BR_DEV_DIRECT_MAX; r++) {
        if (D->func != BR_FUNC_BROADCAST || r == D->root) {
            reach_arg(k, "an input", D->in[r], D->func == BR_FUNC_REDUCESCATTER ? all : D->bytes);
        }
        if (D->func != BR_FUNC_REDUCE || r == D->root) {
            reach_arg(k, "an output", D->out[r], D->func == BR_FUNC_ALLGATHER ? all : D->bytes);
        }
    }
}

static void check_reduce_args(const br_dev_reduce_t *R)
{
    const char *k = "br_dev_reduce_kernel";
    for (uint32_t q = 0; q < R->nsrc && q < BR_DEV_REDUCE_MAX_SRC; q++) {
        reach_arg(k, "a source", R->src[q], R->bytes);
    }
    reach_arg(k, "the output", R->dst[0], R->bytes);
    reach_arg(k, "the second output", R->dst[1], R->bytes);
    reach_arg(k, "the PreMulSum scalar", R->scalar_dev, 1);
}

/* dev: the device the kernel runs on. */
static void check_fifo_args(const br_dev_launch_t *L, unsigned nblocks, int dev)
{
    const char *k = "br_dev_kernel";
    uint32_t nworks = 0;
    reach_arg(k, "the block table", L->blocks, nblocks * sizeof(br_dev_block_t));
    for (unsigned b = 0; b < nblocks; b++) {
        uint32_t end = L->blocks[b].first + L->blocks[b].nworks;
        nworks = end > nworks ? end : nworks;
    }
    reach_arg(k, "the work items", L->works, nworks * sizeof(br_dev_work_t));
    reach_arg(k, "the abort flag", (const void *)L->abort_flag, sizeof(uint32_t));
    reach_arg(k, "the stop word", (const void *)L->stop, sizeof(uint32_t));
    reach_arg(k, "the failure report", (const void *)L->report, sizeof(br_dev_report_t));
    int claim_dev = memory_device((uintptr_t)L->claim);
    if (claim_dev < 0) {
        misuse("%s: the failure claim at %p is not device memory (an atomic compare-and-swap "
               "on host-mapped memory is not guaranteed)",
               k, (void *)L->claim);
    }
    /* The kernel's blocks take the claim with atomicCAS, which is GPU scope: atomic only
     * with the atomics of threads on the same GPU. Blocks of two GPUs taking one word (a
     * peer's memory for one of them) may both win it. */
    if (claim_dev != dev) {
        misuse("%s: the failure claim at %p is device %d's memory and the kernel runs on "
               "device %d: its GPU-scope atomicCAS is not atomic with device %d's own",
               k, (void *)L->claim, claim_dev, dev, claim_dev);
    }
}

static CUresult launch(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                       unsigned bz, unsigned smem, void *h, void **params, int cooperative)
{
    if (gy != 1 || gz != 1 || gx == 0 || gx > 8u * 2u * 64u) {
        return ERR_INVALID_VALUE;
    }
    unsigned long threads = (unsigned long)bx * by * bz;
    if (threads == 0 || threads > 1024 || smem > STATIC_SMEM_MAX) {
        return ERR_INVALID_VALUE; /* more than 48 KiB needs cuFuncSetAttribute first */
    }
    if (threads > KERNEL_MAX_THREADS) {
        return ERR_LAUNCH_OUT_OF_RESOURCES; /* beyond __launch_bounds__ */
    }
    if (cooperative && env_on("BRAID_FAKE_CUDA_NO_COOPERATIVE")) {
        return ERR_NOT_SUPPORTED; /* CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH is 0 */
    }
    if (cooperative && gx > DEVICE_BLOCKS) {
        return ERR_COOPERATIVE_LAUNCH_TOO_LARGE;
    }
    if (f == &reduce_kernel) {
        op_t *r = op_new(OP_REDUCE);
        memcpy(&r->reduce, params[0], sizeof(r->reduce));
        r->nblocks = gx;
        check_reduce_args(&r->reduce);
        push(h, r);
        return OK;
    }
    op_t *o = op_new(OP_KERNEL);
    if (f == &direct_kernel) {
        o->direct = 1;
        memcpy(&o->direct_args, params[0], sizeof(o->direct_args));
        check_direct_args(&o->direct_args);
    } else {
        memcpy(&o->launch, params[0], sizeof(o->launch));
        const stream_t *st = stream_of(h);
        check_fifo_args(&o->launch, gx, st->legacy ? ctx_device() : st->dev);
    }
    o->nblocks = gx;
    o->cooperative = cooperative;
    push(h, o);
    return OK;
}

EXPORT CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned smem, void *h, void **params,
                               void **extra)
{
    if (extra != NULL) {
        return ERR_INVALID_VALUE; /* Braid passes its arguments by kernelParams */
    }
    return launch(f, gx, gy, gz, bx, by, bz, smem, h, params, 0);
}

EXPORT CUresult cuLaunchCooperativeKernel(void *f, unsigned gx, unsigned gy, unsigned gz,
                                          unsigned bx, unsigned by, unsigned bz, unsigned smem,
                                          void *h, void **params)
{
    return launch(f, gx, gy, gz, bx, by, bz, smem, h, params, 1);
}
