/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The kernels of the CUDA executor. br_dev_kernel: block b runs the work items of
 * br_dev_launch_t.blocks[b] through the interpreter of dev_prims.h (the same source the
 * host emulation test runs). Type, reduction and protocol are switches at run time, so a
 * single entry point serves every collective and the build stays small.
 */
#include "dev_direct.h"
#include "dev_prims.h"

extern "C" __global__ void __launch_bounds__(BR_DEV_NTHREADS, 2) br_dev_kernel(br_dev_launch_t L)
{
    br_dev_run_block(&L, (int)blockIdx.x);
}

/* Ranks in several processes: a reduction of buffers that are complete (dev_work.h). */
extern "C" __global__ void __launch_bounds__(BR_DEV_NTHREADS) br_dev_reduce_kernel(br_dev_reduce_t P)
{
    br_dev_reduce_n(&P, (int)blockIdx.x, (int)gridDim.x);
}

/* Ranks that are threads of one process on one GPU: one collective read and written in place
 * by every thread of the grid (dev_direct.h). */
extern "C" __global__ void __launch_bounds__(BR_DEV_NTHREADS) br_dev_direct_kernel(br_dev_direct_t D)
{
    br_dev_direct_run(&D, (int)blockIdx.x, (int)gridDim.x);
}
