/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The kernels as the host side sees them: one fatbin (sm_80 and sm_90 code, compute_90
 * PTX for later GPUs) built from dev_kernel.cu and embedded in the library, loaded with
 * cuModuleLoadData through the driver library the host side opens itself (libnccl links no
 * CUDA library). Its one kernel is BR_DEV_KERNEL_NAME, taking a br_dev_launch_t by value
 * (dev_work.h), launched with BR_DEV_NTHREADS threads per block and one block per entry
 * of br_dev_launch_t.blocks. A build without a CUDA compiler carries no kernels: the size
 * is then 0.
 */
#ifndef BR_DEVICE_DEVICE_H_
#define BR_DEVICE_DEVICE_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The kernel's name, for cuModuleGetFunction. */
#define BR_DEV_KERNEL_NAME "br_dev_kernel"
/* The reduce kernel's (ranks in several processes): one br_dev_reduce_t by value. */
#define BR_DEV_REDUCE_KERNEL_NAME "br_dev_reduce_kernel"
/* The direct kernel's (ranks that are threads of one process on one GPU): one
 * br_dev_direct_t by value (dev_direct.h). */
#define BR_DEV_DIRECT_KERNEL_NAME "br_dev_direct_kernel"

/* The fatbin image (br_dev_fatbin_size bytes; 0 when this build has no kernels). */
extern const unsigned char br_dev_fatbin[];
extern const size_t br_dev_fatbin_size;

#ifdef __cplusplus
}
#endif

#endif /* BR_DEVICE_DEVICE_H_ */
