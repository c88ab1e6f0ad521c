/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Compiled, never run, as C99, C11 and C++ (with and without the CUDA runtime header,
 * with and without BRAID_NO_CUDA_RUNTIME_H) under -Wall -Wextra -Werror -pedantic:
 * nccl.h must be usable by any NCCL program. The checks are compile-time facts of NCCL
 * 2.32.3's header: version, enum values and sizes, struct sizes (LP64), initializers,
 * and the signatures of a few entry points and their pnccl twins.
 */
#include <nccl.h>

#ifdef LINK_INCLUDE_CUDA_AFTER
#include <cuda_runtime.h> /* after nccl.h declared cudaStream_t itself */
#endif

#define LINK_ASSERT(name, cond) typedef char link_assert_##name[(cond) ? 1 : -1]

#if defined(CUDART_VERSION) && !defined(BRAID_NO_CUDA_RUNTIME_H)
/* NCCL's nccl.h brings the half-precision types (C: their raw forms; C++: the classes,
 * fp8 included); programs such as nccl-tests use them having included only nccl.h. */
#ifdef __cplusplus
LINK_ASSERT(half_types, sizeof(__half) == 2 && sizeof(__nv_bfloat16) == 2 &&
                            sizeof(__nv_fp8_e4m3) == 1 && sizeof(__nv_fp8_e5m2) == 1);
#else
LINK_ASSERT(half_types, sizeof(__half_raw) == 2 && sizeof(__nv_bfloat16_raw) == 2);
#endif
#endif

LINK_ASSERT(version_code, NCCL_VERSION_CODE == 23203);
LINK_ASSERT(version_macro, NCCL_VERSION(2, 28, 9) == 22809 && NCCL_VERSION(2, 30, 7) == 23007);
LINK_ASSERT(major_minor_patch, NCCL_MAJOR == 2 && NCCL_MINOR == 32 && NCCL_PATCH == 3);
LINK_ASSERT(unique_id_size, sizeof(ncclUniqueId) == 128 && NCCL_UNIQUE_ID_BYTES == 128);
LINK_ASSERT(enum_sizes, sizeof(ncclResult_t) == 4 && sizeof(ncclDataType_t) == 4 &&
                            sizeof(ncclRedOp_t) == 4 && sizeof(ncclScalarResidence_t) == 4);
LINK_ASSERT(config_size, sizeof(ncclConfig_t) == 120);
LINK_ASSERT(coll_config_size, sizeof(ncclCollConfig_t) == 72 && sizeof(ncclConfigExt_t) == 24);
LINK_ASSERT(encryption_config_size, sizeof(ncclEncryptionConfig_t) == 32);
LINK_ASSERT(wait_desc_size, sizeof(ncclWaitSignalDesc_t) == 16);
LINK_ASSERT(sim_info_size, sizeof(ncclSimInfo_t) == 24);
LINK_ASSERT(results, ncclSuccess == 0 && ncclUnhandledCudaError == 1 && ncclSystemError == 2 &&
                         ncclInternalError == 3 && ncclInvalidArgument == 4 &&
                         ncclInvalidUsage == 5 && ncclRemoteError == 6 && ncclInProgress == 7 &&
                         ncclTimeout == 8 && ncclNumResults == 9);
LINK_ASSERT(types, ncclInt8 == 0 && ncclChar == 0 && ncclUint8 == 1 && ncclInt32 == 2 &&
                       ncclInt == 2 && ncclUint32 == 3 && ncclInt64 == 4 && ncclUint64 == 5 &&
                       ncclFloat16 == 6 && ncclHalf == 6 && ncclFloat32 == 7 && ncclFloat == 7 &&
                       ncclFloat64 == 8 && ncclDouble == 8 && ncclBfloat16 == 9 &&
                       ncclFloat8e4m3 == 10 && ncclFloat8e5m2 == 11 && ncclNumTypes == 12);
LINK_ASSERT(ops, ncclSum == 0 && ncclProd == 1 && ncclMax == 2 && ncclMin == 3 && ncclAvg == 4 &&
                     ncclNumOps == 5 && ncclMaxRedOp == 0x7fffffff);
LINK_ASSERT(residence, ncclScalarDevice == 0 && ncclScalarHostImmediate == 1);
LINK_ASSERT(constants, NCCL_SPLIT_NOCOLOR == -1 && NCCL_CONFIG_UNDEF_INT == INT_MIN &&
                           NCCL_WIN_REQUIRED_ALIGNMENT == 4096 && NCCL_SHRINK_ABORT == 1 &&
                           NCCL_CTA_POLICY_ZERO == 2 && NCCL_API_MAGIC == 0xcafebeef &&
                           NCCL_WIN_STRICT_ORDERING == 2 && NCCL_WIN_GIN_ONLY == 4 &&
                           NCCL_WIN_CFT_COUNTED == 8 && NCCL_SUSPEND_MEM == 1 &&
                           NCCL_ENCRYPTION_MODE_PSK == 1 && ncclStatGpuMemTotal == 3 &&
                           ncclHostCftFallback == 3 && ncclNvlsHostModeDisable == INT_MAX);

typedef ncclResult_t (*link_allreduce_fn)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                                          ncclComm_t, cudaStream_t);
typedef ncclResult_t (*link_init_fn)(ncclComm_t *, int, ncclUniqueId, int);

int link_header_use(void);

int link_header_use(void)
{
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
    ncclCollConfig_t coll = NCCL_COLLCONFIG_INITIALIZER;
    ncclEncryptionConfig_t enc = NCCL_ENCRYPTION_CONFIG_INITIALIZER;
    ncclComm_t comm = NCCL_COMM_NULL;
    cudaStream_t stream = 0;
    link_allreduce_fn f = ncclAllReduce, pf = pncclAllReduce;
    link_init_fn g = ncclCommInitRank, pg = pncclCommInitRank;
    const char *(*e)(ncclResult_t) = ncclGetErrorString;
    return config.magic == 0xcafebeef && sim.magic == 0x74685283 && comm == 0 && stream == 0 &&
           coll.forceAlgSelection == 1 && coll.launchCompletionEvent == 0 &&
           enc.mode == NCCL_ENCRYPTION_MODE_NONE && config.nvlsHostMode == INT_MIN && f != 0 &&
           pf != 0 && g != 0 && pg != 0 && e != 0;
}
