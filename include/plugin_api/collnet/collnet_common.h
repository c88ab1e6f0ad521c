/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Types shared by every collnet (in-network collectives) plugin ABI version: the data
 * type and reduction operation enums of nccl.h, which reduceSupport, iallreduce and
 * ireducescatter take. A plugin normally does not include nccl.h, so they are declared
 * here with nccl.h's values; when nccl.h was included first (NCCL_H_ defined) its own
 * declarations are used instead. Include nccl.h before this header if you need both.
 */
#ifndef BRAID_PLUGIN_API_COLLNET_COMMON_H_
#define BRAID_PLUGIN_API_COLLNET_COMMON_H_

#include "../common.h"

#ifdef __cplusplus
extern "C" {
#endif

#if !defined(NCCL_H_) && !defined(BRAID_NCCL_DATATYPE_T_)
#define BRAID_NCCL_DATATYPE_T_
/* Element types (4-byte enum, values as nccl.h). */
typedef enum {
    ncclInt8 = 0,
    ncclChar = 0,
    ncclUint8 = 1,
    ncclInt32 = 2,
    ncclInt = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6,
    ncclHalf = 6,
    ncclFloat32 = 7,
    ncclFloat = 7,
    ncclFloat64 = 8,
    ncclDouble = 8,
    ncclBfloat16 = 9,
    ncclFloat8e4m3 = 10,
    ncclFloat8e5m2 = 11,
    ncclNumTypes = 12
} ncclDataType_t;

/* Reduction operations (4-byte enum). Values from ncclNumOps up are user-created
 * operations (ncclRedOpCreatePreMulSum), which a collnet plugin should report as
 * unsupported. */
typedef enum {
    ncclSum = 0,
    ncclProd = 1,
    ncclMax = 2,
    ncclMin = 3,
    ncclAvg = 4,
    ncclNumOps = 5,
    ncclMaxRedOp = 0x7fffffff
} ncclRedOp_t;
#endif

#ifdef __cplusplus
}
#endif

#endif /* BRAID_PLUGIN_API_COLLNET_COMMON_H_ */
