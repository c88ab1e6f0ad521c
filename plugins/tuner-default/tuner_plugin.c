/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The default tuner, "Braid default": ncclTunerPlugin_v7, _v6 and _v5 over one
 * implementation. init reads the rules of NCCL_TUNER_CONFIG_FILE (else nccl_tuner.conf
 * in the current directory, if present) into a per-communicator context; getCollInfo
 * finds the first rule that matches the collective and whose (algorithm, protocol) the
 * core offers, writes 0.0 into that cost-table entry so the core picks it, and sets the
 * channel count when the rule gives one. Entries the core marked unavailable (-1.0)
 * are never touched. A context is read-only after init, so concurrent getCollInfo calls
 * need no lock.
 */
#include <stdlib.h>
#include <string.h>

#include "param_lite.h"
#include "plugin_api/tuner/tuner.h"
#include "plugin_log.h"
#include "tuner_config.h"

#include "check.h"

#define TUNER_CTX_MAGIC 0x524e5554u /* "TUNR" */

/* Per-communicator state. */
typedef struct {
    uint32_t magic;
    uint64_t comm_id;
    size_t nranks;
    size_t nnodes;
    tuner_config_t cfg;
} tuner_ctx_t;

static ncclResult_t tuner_init(void **ctx_p, uint64_t comm_id, size_t nranks, size_t nnodes,
                               ncclDebugLogger_t logger)
{
    const char *path = br_lite_param_str("NCCL_TUNER_CONFIG_FILE");
    int required = path != NULL;
    ncclResult_t res;
    tuner_ctx_t *ctx;

    /* Every init of one core passes the same logger; skip the needless racing write. */
    if (logger != NULL && br_plugin_logger != logger) {
        br_plugin_logger = logger;
    }
    if (ctx_p == NULL) {
        BR_WARN(NCCL_TUNING, "tuner init called without a context pointer");
        return ncclInternalError;
    }
    ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL) {
        BR_WARN(NCCL_TUNING, "out of memory creating the tuner context");
        return ncclSystemError;
    }
    BR_CHECK_GOTO(
        tuner_config_load(required ? path : TUNER_DEFAULT_CONFIG_FILE, required, &ctx->cfg), res,
        err_free);
    ctx->magic = TUNER_CTX_MAGIC;
    ctx->comm_id = comm_id;
    ctx->nranks = nranks;
    ctx->nnodes = nnodes;
    BR_INFO(NCCL_INIT | NCCL_TUNING, "tuner Braid default for comm 0x%llx: %zu ranks on %zu nodes",
            (unsigned long long)comm_id, nranks, nnodes);
    *ctx_p = ctx;
    return ncclSuccess;
err_free:
    free(ctx);
    return res;
}

static int rule_matches(const tuner_ctx_t *ctx, const tuner_rule_t *r, ncclFunc_t coll,
                        size_t nbytes, int pipe_ops, int reg_buff)
{
    return r->coll == coll && nbytes >= r->min_bytes && nbytes <= r->max_bytes &&
           (r->nnodes == -1 || (size_t)r->nnodes == ctx->nnodes) &&
           (r->nranks == -1 || (size_t)r->nranks == ctx->nranks) &&
           (r->pipe_ops == -1 || r->pipe_ops == pipe_ops) &&
           (r->reg_buff == -1 || r->reg_buff == reg_buff);
}

static ncclResult_t tuner_get_coll_info(void *opaque, ncclFunc_t coll, size_t nbytes, int pipe_ops,
                                        float **table, int nalgo, int nproto, int reg_buff,
                                        int *nchannels)
{
    tuner_ctx_t *ctx = opaque;
    /* The core passes the address of a contiguous nalgo x nproto table (2.5). */
    float *cost = (float *)(void *)table;

    if (ctx == NULL || ctx->magic != TUNER_CTX_MAGIC || table == NULL || nchannels == NULL) {
        BR_WARN(NCCL_TUNING, "tuner getCollInfo called with a bad context or table");
        return ncclInternalError;
    }
    for (int i = 0; i < ctx->cfg.nrules; i++) {
        const tuner_rule_t *r = &ctx->cfg.rules[i];
        if (!rule_matches(ctx, r, coll, nbytes, pipe_ops, reg_buff) || r->algo >= nalgo ||
            r->proto >= nproto) {
            continue;
        }
        float *entry = &cost[r->algo * nproto + r->proto];
        if (*entry < 0.0f) {
            /* The core cannot run it here: let a later rule (or the core) decide. */
            BR_TRACE(NCCL_TUNING, "%s:%d: %s/%s unavailable for %s of %zu bytes", ctx->cfg.path,
                     r->line, tuner_algo_name(r->algo), tuner_proto_name(r->proto),
                     tuner_coll_name(coll), nbytes);
            continue;
        }
        *entry = 0.0f;
        if (r->channels > 0) {
            *nchannels = r->channels;
        }
        BR_TRACE(NCCL_TUNING, "%s:%d: %s of %zu bytes -> %s/%s, channels %d", ctx->cfg.path,
                 r->line, tuner_coll_name(coll), nbytes, tuner_algo_name(r->algo),
                 tuner_proto_name(r->proto), r->channels);
        break;
    }
    return ncclSuccess;
}

static ncclResult_t tuner_finalize(void *opaque)
{
    tuner_ctx_t *ctx = opaque;

    if (ctx == NULL || ctx->magic != TUNER_CTX_MAGIC) {
        BR_WARN(NCCL_TUNING, "tuner finalize called with a bad context");
        return ncclInternalError;
    }
    tuner_config_free(&ctx->cfg);
    ctx->magic = 0;
    free(ctx);
    return ncclSuccess;
}

/* v7, v6 and v5 init differ only in the (unused) domain and constants types. */
static ncclResult_t tuner_init_v7(void **ctx, uint64_t comm_id, size_t nranks, size_t nnodes,
                                  ncclDebugLogger_t logger, ncclNvlDomainInfo_v7_t *nvl,
                                  ncclTunerConstants_v7_t *constants)
{
    (void)nvl;
    (void)constants; /* the core's defaults stand */
    return tuner_init(ctx, comm_id, nranks, nnodes, logger);
}

static ncclResult_t tuner_init_v6(void **ctx, uint64_t comm_id, size_t nranks, size_t nnodes,
                                  ncclDebugLogger_t logger, ncclNvlDomainInfo_v6_t *nvl,
                                  ncclTunerConstants_v6_t *constants)
{
    (void)nvl;
    (void)constants; /* the core's defaults stand */
    return tuner_init(ctx, comm_id, nranks, nnodes, logger);
}

static ncclResult_t tuner_init_v5(void **ctx, uint64_t comm_id, size_t nranks, size_t nnodes,
                                  ncclDebugLogger_t logger, ncclNvlDomainInfo_v5_t *nvl,
                                  ncclTunerConstants_v5_t *constants)
{
    (void)nvl;
    (void)constants;
    return tuner_init(ctx, comm_id, nranks, nnodes, logger);
}

__attribute__((visibility("default"))) const ncclTuner_v7_t ncclTunerPlugin_v7 = {
    .name = "Braid default",
    .init = tuner_init_v7,
    .getCollInfo = tuner_get_coll_info,
    .finalize = tuner_finalize,
    .getChunkSize = NULL, /* the core's chunk sizes stand */
};

__attribute__((visibility("default"))) const ncclTuner_v6_t ncclTunerPlugin_v6 = {
    .name = "Braid default",
    .init = tuner_init_v6,
    .getCollInfo = tuner_get_coll_info,
    .finalize = tuner_finalize,
    .getChunkSize = NULL, /* the core's chunk sizes stand */
};

__attribute__((visibility("default"))) const ncclTuner_v5_t ncclTunerPlugin_v5 = {
    .name = "Braid default",
    .init = tuner_init_v5,
    .getCollInfo = tuner_get_coll_info,
    .finalize = tuner_finalize,
};
