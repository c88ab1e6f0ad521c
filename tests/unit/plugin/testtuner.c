/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A test tuner, built per ABI version (TESTTUNER_V2, _V3, _V6; TESTTUNER_INIT_FAIL makes
 * init fail). Its choices are fixed so tests can see them arrive in the cost table:
 *   v2: RING / LL128 with 3 channels (as algorithm/protocol out-parameters)
 *   v3: RING / SIMPLE forced (0.0), TREE / LL forbidden (-1.0), 5 channels
 *   v6: TREE / SIMPLE forced, 2 channels; init raises baseLatencies[0][0] to 42; its
 *       getChunkSize doubles the chunk
 */
#include <string.h>

#include "plugin_api/tuner/tuner.h"
#include "testtp.h"

#define EXPORT __attribute__((visibility("default")))

EXPORT testtuner_stats_t testtuner_stats;
static int tt_ctx;

static ncclResult_t tt_init_old(size_t nranks, size_t nnodes, ncclDebugLogger_t log, void **ctx)
{
    (void)log;
    testtuner_stats.init_calls++;
    testtuner_stats.nranks = nranks;
    testtuner_stats.nnodes = nnodes;
    *ctx = &tt_ctx;
#ifdef TESTTUNER_INIT_FAIL
    /* Says why, as a plugin should: the reason must reach ncclGetLastError. */
    log(NCCL_LOG_WARN, NCCL_ALL, __FILE__, __LINE__, "testtuner: rule 3 is bad on purpose");
    return ncclInternalError;
#else
    return ncclSuccess;
#endif
}

static ncclResult_t tt_fini(void *ctx)
{
    if (ctx != &tt_ctx) {
        return ncclInternalError;
    }
    testtuner_stats.fini_calls++;
    return ncclSuccess;
}

static void tt_seen(int func, size_t bytes)
{
    testtuner_stats.coll_calls++;
    testtuner_stats.last_func = func;
    testtuner_stats.last_bytes = bytes;
}

#ifdef TESTTUNER_V2
static ncclResult_t tt_coll_v2(void *ctx, ncclFunc_t func, size_t bytes, int collnet, int nvls,
                               int pipe_ops, int *algo, int *proto, int *nchannels)
{
    (void)ctx;
    (void)pipe_ops;
    tt_seen(func, bytes);
    testtuner_stats.last_collnet = collnet;
    testtuner_stats.last_nvls = nvls;
    *algo = NCCL_ALGO_RING;
    *proto = NCCL_PROTO_LL128;
    *nchannels = 3;
    return ncclSuccess;
}

EXPORT const ncclTuner_v2_t ncclTunerPlugin_v2 = {
    .name = "TestTunerV2",
    .init = tt_init_old,
    .getCollInfo = tt_coll_v2,
    .destroy = tt_fini,
};
#endif

#ifdef TESTTUNER_V3
static ncclResult_t tt_coll_v3(void *ctx, ncclFunc_t func, size_t bytes, int pipe_ops,
                               float **cost_table, int num_algo, int num_proto, int *nchannels)
{
    float(*table)[NCCL_NUM_PROTOCOLS] = (float(*)[NCCL_NUM_PROTOCOLS])cost_table;
    (void)ctx;
    (void)pipe_ops;
    tt_seen(func, bytes);
    testtuner_stats.num_algo = num_algo;
    testtuner_stats.num_proto = num_proto;
    table[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] = 0.0f;
    table[NCCL_ALGO_TREE][NCCL_PROTO_LL] = NCCL_ALGO_PROTO_IGNORE;
    *nchannels = 5;
    return ncclSuccess;
}

EXPORT const ncclTuner_v3_t ncclTunerPlugin_v3 = {
    .name = "TestTunerV3",
    .init = tt_init_old,
    .getCollInfo = tt_coll_v3,
    .destroy = tt_fini,
};
#endif

#ifdef TESTTUNER_V6
static ncclResult_t tt_init_v6(void **ctx, uint64_t comm_id, size_t nranks, size_t nnodes,
                               ncclDebugLogger_t log, ncclNvlDomainInfo_v6_t *nvl,
                               ncclTunerConstants_v6_t *constants)
{
    testtuner_stats.comm_id = comm_id;
    testtuner_stats.nvl[0] = nvl->nNvlDomains;
    testtuner_stats.nvl[1] = nvl->minRanksPerNvlDomain;
    testtuner_stats.nvl[2] = nvl->maxRanksPerNvlDomain;
    constants->baseLatencies[0][0] = 42.0;
    return tt_init_old(nranks, nnodes, log, ctx);
}

static ncclResult_t tt_coll_v6(void *ctx, ncclFunc_t func, size_t bytes, int pipe_ops,
                               float **cost_table, int num_algo, int num_proto, int reg_buff,
                               int *nchannels)
{
    float(*table)[NCCL_NUM_PROTOCOLS] = (float(*)[NCCL_NUM_PROTOCOLS])cost_table;
    (void)ctx;
    (void)pipe_ops;
    tt_seen(func, bytes);
    testtuner_stats.num_algo = num_algo;
    testtuner_stats.num_proto = num_proto;
    testtuner_stats.last_reg_buff = reg_buff;
    table[NCCL_ALGO_TREE][NCCL_PROTO_SIMPLE] = 0.0f;
    *nchannels = 2;
    return ncclSuccess;
}

static ncclResult_t tt_chunk_v6(void *ctx, ncclFunc_t func, size_t bytes, int algo, int proto,
                                int nchannels, size_t *chunk)
{
    (void)ctx;
    (void)func;
    (void)bytes;
    (void)algo;
    (void)proto;
    (void)nchannels;
    *chunk *= 2;
    return ncclSuccess;
}

EXPORT const ncclTuner_v6_t ncclTunerPlugin_v6 = {
    .name = "TestTunerV6",
    .init = tt_init_v6,
    .getCollInfo = tt_coll_v6,
    .finalize = tt_fini,
    .getChunkSize = tt_chunk_v6,
};
#endif
