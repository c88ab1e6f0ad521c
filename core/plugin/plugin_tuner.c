/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tuner plugin loading and adapters. The internal interface has tuner v6 semantics (the
 * 7 x 3 cost table, nChannels, optional getChunkSize); v7 has v6's functions with a fifth
 * GPU generation in the constants (copied in and out around init; Braid has no values for
 * that row, so the plugin sees it 0); v5 lacks getChunkSize; v4 has a
 * context-last init without commId, NVL domains or constants, and names its finalize
 * destroy; v3 also lacks regBuff; v2 chooses (algorithm, protocol) instead of editing a
 * table, so its choice is written into the table as a 0.0 entry, and its
 * collNetSupport/nvlsSupport arguments are derived from the table (plugin-abi.md 2.5).
 * The library comes from br_plugin_find; state is per communicator.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "plugin_api/tuner/tuner.h"
#include "plugin_int.h"
#include "util.h"

typedef struct tuner_state tuner_state_t;

typedef struct {
    int version;
    /* Call the plugin's init and copy its table (after init). */
    ncclResult_t (*init)(tuner_state_t *st, const br_tuner_request_t *req);
    ncclResult_t (*get_coll_info)(tuner_state_t *st, int func, size_t bytes, int num_pipe_ops,
                                  float *table, int reg_buff, int *nchannels);
    ncclResult_t (*fini)(tuner_state_t *st);
} tuner_adapter_t;

struct tuner_state {
    br_plugin_lib_t *lib;
    const tuner_adapter_t *adapter;
    const void *exported;
    void *ctx;
    ncclNvlDomainInfo_v6_t nvl;
    ncclTunerConstants_v6_t scratch; /* constants when the caller gave none */
    union {
        ncclTuner_v7_t v7;
        ncclTuner_v6_t v6;
        ncclTuner_v5_t v5;
        ncclTuner_v4_t v4;
        ncclTuner_v3_t v3;
        ncclTuner_v2_t v2;
    } fn;
};

#define TABLE_AT(table, a, p) ((table)[(a)*NCCL_NUM_PROTOCOLS + (p)])

/* ---- v7, v6 and v5 ---- */

/* The rows [0, NCCL_NUM_COMPCAPS) of every bandwidth table, from one layout to the other:
 * v7 has NCCL_NUM_COMPCAPS_V7 rows, v6 NCCL_NUM_COMPCAPS. */
#define COPY_ROWS(dst, src, field)                                                                 \
    memcpy((dst)->field, (src)->field, sizeof(ncclTunerConstants_v6_t){0}.field)
static void constants_v6_to_v7(ncclTunerConstants_v7_t *d, const ncclTunerConstants_v6_t *s)
{
    memset(d, 0, sizeof(*d));
    memcpy(d->baseLatencies, s->baseLatencies, sizeof(s->baseLatencies));
    memcpy(d->hwLatencies, s->hwLatencies, sizeof(s->hwLatencies));
    COPY_ROWS(d, s, llMaxBws);
    COPY_ROWS(d, s, perChMaxRingLL128Bws);
    COPY_ROWS(d, s, perChMaxTreeLL128Bws);
    COPY_ROWS(d, s, perChMaxTreeBws);
    COPY_ROWS(d, s, perChMaxNVLSTreeBws);
}

static void constants_v7_to_v6(ncclTunerConstants_v6_t *d, const ncclTunerConstants_v7_t *s)
{
    memcpy(d->baseLatencies, s->baseLatencies, sizeof(d->baseLatencies));
    memcpy(d->hwLatencies, s->hwLatencies, sizeof(d->hwLatencies));
    COPY_ROWS(d, s, llMaxBws);
    COPY_ROWS(d, s, perChMaxRingLL128Bws);
    COPY_ROWS(d, s, perChMaxTreeLL128Bws);
    COPY_ROWS(d, s, perChMaxTreeBws);
    COPY_ROWS(d, s, perChMaxNVLSTreeBws);
}
#undef COPY_ROWS

static ncclResult_t tuner_init_v7(tuner_state_t *st, const br_tuner_request_t *req)
{
    const ncclTuner_v7_t *exp = st->exported;
    ncclTunerConstants_v6_t *mine =
        req->constants != NULL ? (ncclTunerConstants_v6_t *)req->constants : &st->scratch;
    ncclTunerConstants_v7_t c7;
    /* The domain info has v6's layout under the v7 name. */
    ncclNvlDomainInfo_v7_t *nvl = (ncclNvlDomainInfo_v7_t *)(void *)&st->nvl;

    constants_v6_to_v7(&c7, mine);
    BR_CHECK(
        exp->init(&st->ctx, req->comm_hash, req->nranks, req->nnodes, br_log_plugin, nvl, &c7));
    constants_v7_to_v6(mine, &c7); /* what the plugin edited, in the rows Braid has */
    st->fn.v7 = *exp;
    return ncclSuccess;
}

static ncclResult_t tuner_coll_v7(tuner_state_t *st, int func, size_t bytes, int num_pipe_ops,
                                  float *table, int reg_buff, int *nchannels)
{
    return st->fn.v7.getCollInfo(st->ctx, (ncclFunc_t)func, bytes, num_pipe_ops, (float **)table,
                                 NCCL_NUM_ALGORITHMS, NCCL_NUM_PROTOCOLS, reg_buff, nchannels);
}

static ncclResult_t tuner_fini_v7(tuner_state_t *st)
{
    return st->fn.v7.finalize(st->ctx);
}

static ncclResult_t tuner_init_v6(tuner_state_t *st, const br_tuner_request_t *req)
{
    const ncclTuner_v6_t *exp = st->exported;
    ncclTunerConstants_v6_t *constants =
        req->constants != NULL ? (ncclTunerConstants_v6_t *)req->constants : &st->scratch;
    BR_CHECK(exp->init(&st->ctx, req->comm_hash, req->nranks, req->nnodes, br_log_plugin, &st->nvl,
                       constants));
    st->fn.v6 = *exp;
    return ncclSuccess;
}

static ncclResult_t tuner_coll_v6(tuner_state_t *st, int func, size_t bytes, int num_pipe_ops,
                                  float *table, int reg_buff, int *nchannels)
{
    /* float** is NCCL's spelling of "address of the first element" (plugin-abi.md 2.5). */
    return st->fn.v6.getCollInfo(st->ctx, (ncclFunc_t)func, bytes, num_pipe_ops, (float **)table,
                                 NCCL_NUM_ALGORITHMS, NCCL_NUM_PROTOCOLS, reg_buff, nchannels);
}

static ncclResult_t tuner_fini_v6(tuner_state_t *st)
{
    return st->fn.v6.finalize(st->ctx);
}

static ncclResult_t tuner_init_v5(tuner_state_t *st, const br_tuner_request_t *req)
{
    const ncclTuner_v5_t *exp = st->exported;
    ncclTunerConstants_v5_t *constants = req->constants != NULL
                                             ? (ncclTunerConstants_v5_t *)req->constants
                                             : (ncclTunerConstants_v5_t *)(void *)&st->scratch;
    ncclNvlDomainInfo_v5_t *nvl = (ncclNvlDomainInfo_v5_t *)(void *)&st->nvl;
    BR_CHECK(exp->init(&st->ctx, req->comm_hash, req->nranks, req->nnodes, br_log_plugin, nvl,
                       constants));
    st->fn.v5 = *exp;
    return ncclSuccess;
}

static ncclResult_t tuner_coll_v5(tuner_state_t *st, int func, size_t bytes, int num_pipe_ops,
                                  float *table, int reg_buff, int *nchannels)
{
    return st->fn.v5.getCollInfo(st->ctx, (ncclFunc_t)func, bytes, num_pipe_ops, (float **)table,
                                 NCCL_NUM_ALGORITHMS, NCCL_NUM_PROTOCOLS, reg_buff, nchannels);
}

static ncclResult_t tuner_fini_v5(tuner_state_t *st)
{
    return st->fn.v5.finalize(st->ctx);
}

/* ---- v4, v3, v2: init(nRanks, nNodes, logger, &ctx), destroy(ctx) ---- */

static ncclResult_t tuner_init_v4(tuner_state_t *st, const br_tuner_request_t *req)
{
    const ncclTuner_v4_t *exp = st->exported;
    BR_CHECK(exp->init(req->nranks, req->nnodes, br_log_plugin, &st->ctx));
    st->fn.v4 = *exp;
    return ncclSuccess;
}

static ncclResult_t tuner_coll_v4(tuner_state_t *st, int func, size_t bytes, int num_pipe_ops,
                                  float *table, int reg_buff, int *nchannels)
{
    return st->fn.v4.getCollInfo(st->ctx, (ncclFunc_t)func, bytes, num_pipe_ops, (float **)table,
                                 NCCL_NUM_ALGORITHMS, NCCL_NUM_PROTOCOLS, reg_buff, nchannels);
}

static ncclResult_t tuner_fini_v4(tuner_state_t *st)
{
    return st->fn.v4.destroy(st->ctx);
}

static ncclResult_t tuner_init_v3(tuner_state_t *st, const br_tuner_request_t *req)
{
    const ncclTuner_v3_t *exp = st->exported;
    BR_CHECK(exp->init(req->nranks, req->nnodes, br_log_plugin, &st->ctx));
    st->fn.v3 = *exp;
    return ncclSuccess;
}

static ncclResult_t tuner_coll_v3(tuner_state_t *st, int func, size_t bytes, int num_pipe_ops,
                                  float *table, int reg_buff, int *nchannels)
{
    (void)reg_buff; /* v3 predates regBuff */
    return st->fn.v3.getCollInfo(st->ctx, (ncclFunc_t)func, bytes, num_pipe_ops, (float **)table,
                                 NCCL_NUM_ALGORITHMS, NCCL_NUM_PROTOCOLS, nchannels);
}

static ncclResult_t tuner_fini_v3(tuner_state_t *st)
{
    return st->fn.v3.destroy(st->ctx);
}

static ncclResult_t tuner_init_v2(tuner_state_t *st, const br_tuner_request_t *req)
{
    const ncclTuner_v2_t *exp = st->exported;
    BR_CHECK(exp->init(req->nranks, req->nnodes, br_log_plugin, &st->ctx));
    st->fn.v2 = *exp;
    return ncclSuccess;
}

static ncclResult_t tuner_coll_v2(tuner_state_t *st, int func, size_t bytes, int num_pipe_ops,
                                  float *table, int reg_buff, int *nchannels)
{
    int algo = NCCL_ALGO_UNDEF, proto = NCCL_PROTO_UNDEF;
    int collnet, nvls;

    (void)reg_buff;
    /* What v2 is told, derived from the table as NCCL does. */
    collnet = TABLE_AT(table, NCCL_ALGO_COLLNET_CHAIN, NCCL_PROTO_SIMPLE) != NCCL_ALGO_PROTO_IGNORE;
    nvls = TABLE_AT(table, NCCL_ALGO_NVLS, NCCL_PROTO_SIMPLE) != NCCL_ALGO_PROTO_IGNORE ||
           TABLE_AT(table, NCCL_ALGO_NVLS_TREE, NCCL_PROTO_SIMPLE) != NCCL_ALGO_PROTO_IGNORE;
    BR_CHECK(st->fn.v2.getCollInfo(st->ctx, (ncclFunc_t)func, bytes, collnet, nvls, num_pipe_ops,
                                   &algo, &proto, nchannels));
    /* The choice wins by costing nothing, if it is available at all. */
    if (algo >= 0 && algo < NCCL_NUM_ALGORITHMS && proto >= 0 && proto < NCCL_NUM_PROTOCOLS &&
        TABLE_AT(table, algo, proto) != NCCL_ALGO_PROTO_IGNORE) {
        TABLE_AT(table, algo, proto) = 0.0f;
    }
    return ncclSuccess;
}

static ncclResult_t tuner_fini_v2(tuner_state_t *st)
{
    return st->fn.v2.destroy(st->ctx);
}

static const tuner_adapter_t tuner_adapters[] = {
    {7, tuner_init_v7, tuner_coll_v7, tuner_fini_v7},
    {6, tuner_init_v6, tuner_coll_v6, tuner_fini_v6},
    {5, tuner_init_v5, tuner_coll_v5, tuner_fini_v5},
    {4, tuner_init_v4, tuner_coll_v4, tuner_fini_v4},
    {3, tuner_init_v3, tuner_coll_v3, tuner_fini_v3},
    {2, tuner_init_v2, tuner_coll_v2, tuner_fini_v2},
};

/* Symbols in the order of tuner_adapters. */
static const char *const tuner_symbols[] = {"ncclTunerPlugin_v7", "ncclTunerPlugin_v6",
                                            "ncclTunerPlugin_v5", "ncclTunerPlugin_v4",
                                            "ncclTunerPlugin_v3", "ncclTunerPlugin_v2"};

static const br_plugin_kind_t tuner_kind = {
    .tag = "TUNER/Plugin",
    .env = "NCCL_TUNER_PLUGIN",
    .prefix = "libnccl-tuner",
    .subsys = NCCL_INIT | NCCL_TUNING,
    .symbols = tuner_symbols,
    .nsymbols = (int)(sizeof(tuner_symbols) / sizeof(tuner_symbols[0])),
};

/* Every version has init, getCollInfo and finalize (or destroy) in slots 1-3; the slots
 * are read as raw pointers (same size and representation on LP64). */
static int tuner_complete(const void *table)
{
    void *slots[4];
    memcpy(slots, table, sizeof(slots));
    return slots[1] != NULL && slots[2] != NULL && slots[3] != NULL;
}

ncclResult_t br_plugin_tuner_open(const br_tuner_request_t *req, br_tuner_t **tuner_p)
{
    br_plugin_lib_t *net_lib = req->net != NULL ? ((br_net_state_t *)req->net->priv)->lib : NULL;
    br_plugin_lib_t *lib = NULL;
    tuner_state_t *st = NULL;
    br_tuner_t *tuner = NULL;
    const char *name;
    int which = -1;
    ncclResult_t res;
    char before[2048], reason[600]; /* the plugin's own reason, should init fail */

    *tuner_p = NULL;
    BR_CHECK(br_plugin_find(&tuner_kind, req->plugin, net_lib, &lib, &which));
    if (lib == NULL) {
        return ncclSuccess;
    }
    BR_CHECK_GOTO(br_calloc(&tuner, 1, "tuner"), res, err_close);
    BR_CHECK_GOTO(br_calloc(&st, 1, "tuner state"), res, err_free);
    st->lib = lib;
    st->adapter = &tuner_adapters[which];
    st->exported = br_plugin_lib_sym(lib, tuner_symbols[which]);
    st->nvl.nNvlDomains = req->nvl_domains;
    st->nvl.minRanksPerNvlDomain = req->min_ranks_per_nvl;
    st->nvl.maxRanksPerNvlDomain = req->max_ranks_per_nvl;
    name = *(const char *const *)st->exported;
    snprintf(tuner->name, sizeof(tuner->name), "%s", name != NULL ? name : "");
    snprintf(tuner->path, sizeof(tuner->path), "%.255s", lib->path);
    tuner->version = st->adapter->version;
    tuner->priv = st;
    if (!tuner_complete(st->exported)) {
        BR_WARN(NCCL_INIT | NCCL_TUNING,
                "TUNER/Plugin: %s: %s lacks init, getCollInfo or "
                "finalize",
                lib->path, tuner_symbols[which]);
        res = ncclInvalidUsage;
        goto err_free;
    }
    snprintf(before, sizeof(before), "%s", br_log_last_error());
    res = st->adapter->init(st, req);
    if (res != ncclSuccess) {
        br_plugin_init_reason(before, reason, sizeof(reason));
        BR_WARN(NCCL_INIT | NCCL_TUNING, "TUNER/Plugin: %s (%s): init failed: %s%s", lib->path,
                tuner_symbols[which], br_plugin_result_str(res), reason);
        goto err_free;
    }
    /* Re-check what was copied after init: a plugin may patch its table there. */
    if (!tuner_complete(&st->fn)) {
        BR_WARN(NCCL_INIT | NCCL_TUNING, "TUNER/Plugin: %s: %s lost a required member in init",
                lib->path, tuner_symbols[which]);
        res = ncclInvalidUsage;
        goto err_free;
    }
    BR_INFO(NCCL_INIT | NCCL_TUNING, "TUNER/Plugin: loaded %s symbol %s (v%d), tuner %s", lib->path,
            tuner_symbols[which], tuner->version, tuner->name);
    *tuner_p = tuner;
    return ncclSuccess;

err_free:
    free(st);
    free(tuner);
err_close:
    br_plugin_lib_close(lib);
    return res;
}

ncclResult_t br_plugin_tuner_get_coll_info(br_tuner_t *tuner, int func, size_t bytes,
                                           int num_pipe_ops, float *table, int reg_buff,
                                           int *nchannels)
{
    tuner_state_t *st = tuner->priv;
    ncclResult_t res =
        st->adapter->get_coll_info(st, func, bytes, num_pipe_ops, table, reg_buff, nchannels);
    if (res != ncclSuccess) {
        BR_WARN(NCCL_TUNING, "TUNER/Plugin: %s getCollInfo(func %d, %zu bytes) failed: %s",
                tuner->name, func, bytes, br_plugin_result_str(res));
    }
    return res;
}

ncclResult_t br_plugin_tuner_hook(void *ctx, int func, size_t bytes, float *table, int *nchannels)
{
    return br_plugin_tuner_get_coll_info(ctx, func, bytes, 1, table, 0, nchannels);
}

ncclResult_t br_plugin_tuner_get_chunk_size(br_tuner_t *tuner, int func, size_t bytes, int algo,
                                            int proto, int nchannels, size_t *chunk_size)
{
    tuner_state_t *st = tuner->priv;
    ncclResult_t res;

    /* v7's table has v6's slots: its getChunkSize is read through fn.v6 too. */
    if (st->adapter->version < 6 || st->fn.v6.getChunkSize == NULL) {
        return ncclSuccess;
    }
    res = st->fn.v6.getChunkSize(st->ctx, (ncclFunc_t)func, bytes, algo, proto, nchannels,
                                 chunk_size);
    if (res != ncclSuccess) {
        BR_WARN(NCCL_TUNING, "TUNER/Plugin: %s getChunkSize failed: %s", tuner->name,
                br_plugin_result_str(res));
    }
    return res;
}

void br_plugin_tuner_close(br_tuner_t *tuner)
{
    tuner_state_t *st;
    ncclResult_t res = ncclSuccess;

    if (tuner == NULL) {
        return;
    }
    st = tuner->priv;
    BR_CLEANUP(st->adapter->fini(st), res);
    br_plugin_lib_close(st->lib);
    free(st);
    free(tuner);
}
