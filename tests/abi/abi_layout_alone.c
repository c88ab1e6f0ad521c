/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Facts about the declarations the plugin headers make when nccl.h is NOT included,
 * which is how a plugin is built: ncclResult_t from common.h and ncclDataType_t /
 * ncclRedOp_t from collnet_common.h must carry nccl.h's values. This file must never
 * include nccl.h.
 */
#include "plugin_api/collnet/collnet.h"
#include "plugin_api/env/env.h"
#include "plugin_api/net/net.h"
#include "plugin_api/profiler/profiler.h"
#include "plugin_api/tuner/tuner.h"

#include "abi_facts.h"

#ifdef NCCL_H_
#error "abi_layout_alone.c checks the plugin headers without nccl.h"
#endif

static const abi_fact_t alone[] = {
    ABI_SIZE(ncclResult_t, 4),
    ABI_VAL(ncclSuccess, 0),
    ABI_VAL(ncclUnhandledCudaError, 1),
    ABI_VAL(ncclSystemError, 2),
    ABI_VAL(ncclInternalError, 3),
    ABI_VAL(ncclInvalidArgument, 4),
    ABI_VAL(ncclInvalidUsage, 5),
    ABI_VAL(ncclRemoteError, 6),
    ABI_VAL(ncclInProgress, 7),
    ABI_VAL(ncclTimeout, 8),
    ABI_VAL(ncclNumResults, 9),
    ABI_SIZE(ncclDataType_t, 4),
    ABI_VAL(ncclInt8, 0),
    ABI_VAL(ncclChar, 0),
    ABI_VAL(ncclUint8, 1),
    ABI_VAL(ncclInt32, 2),
    ABI_VAL(ncclInt, 2),
    ABI_VAL(ncclUint32, 3),
    ABI_VAL(ncclInt64, 4),
    ABI_VAL(ncclUint64, 5),
    ABI_VAL(ncclFloat16, 6),
    ABI_VAL(ncclHalf, 6),
    ABI_VAL(ncclFloat32, 7),
    ABI_VAL(ncclFloat, 7),
    ABI_VAL(ncclFloat64, 8),
    ABI_VAL(ncclDouble, 8),
    ABI_VAL(ncclBfloat16, 9),
    ABI_VAL(ncclFloat8e4m3, 10),
    ABI_VAL(ncclFloat8e5m2, 11),
    ABI_VAL(ncclNumTypes, 12),
    ABI_SIZE(ncclRedOp_t, 4),
    ABI_VAL(ncclSum, 0),
    ABI_VAL(ncclProd, 1),
    ABI_VAL(ncclMax, 2),
    ABI_VAL(ncclMin, 3),
    ABI_VAL(ncclAvg, 4),
    ABI_VAL(ncclNumOps, 5),
    ABI_VAL(ncclMaxRedOp, 0x7fffffff),
    /* The same layouts whether or not nccl.h came first. */
    ABI_SIZE(ncclCollNet_v12_t, 152),
    ABI_SIZE(ncclNet_v12_t, 176),
    ABI_SIZE(ncclTuner_v6_t, 40),
    ABI_SIZE(ncclTuner_v7_t, 40),
    ABI_SIZE(ncclTunerConstants_v7_t, 1272),
    ABI_SIZE(ncclProfilerEventDescr_v6_t, 112),
};

static const abi_fact_table_t alone_tables[] = {
    ABI_TABLE("plugin headers without nccl.h", alone),
};

const abi_fact_table_t *abi_alone_tables(size_t *n_p)
{
    *n_p = sizeof(alone_tables) / sizeof(alone_tables[0]);
    return alone_tables;
}
