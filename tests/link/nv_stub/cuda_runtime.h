/* SPDX-License-Identifier: Apache-2.0 */
/* The two CUDA runtime types NVIDIA's nccl.h uses, for compiling an NCCL program against
 * it on a machine without the CUDA toolkit (link_nv232.sh). Not the CUDA runtime. */
#ifndef LINK_NV_STUB_CUDA_RUNTIME_H_
#define LINK_NV_STUB_CUDA_RUNTIME_H_
#include <stddef.h>
#define CUDART_VERSION 12000
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
#endif
