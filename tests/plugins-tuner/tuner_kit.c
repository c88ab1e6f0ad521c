/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Loading a tuner plugin of any version v7..v2 and driving it with v6 semantics, as a
 * core's adapters do (plugin-abi.md 2.5): v5 is v6 without getChunkSize, v4/v3 take the
 * context last in init and lack commId/constants (v3 also regBuff), and v2 returns an
 * (algorithm, protocol) choice that is applied to the table as 0.0 when available, with
 * collNetSupport/nvlsSupport derived from the table. The logger keeps WARN lines in a
 * mutex-protected buffer, since a plugin may log from any thread.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tuner_kit.h"

static const char *const symbols[] = {
    NULL,
    NULL,
    "ncclTunerPlugin_v2",
    "ncclTunerPlugin_v3",
    "ncclTunerPlugin_v4",
    "ncclTunerPlugin_v5",
    "ncclTunerPlugin_v6",
    "ncclTunerPlugin_v7",
};

int tuner_kit_open(const char *path, int version, tuner_kit_t *kit, char *err, size_t errlen)
{
    memset(kit, 0, sizeof(*kit));
    kit->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (kit->lib == NULL) {
        snprintf(err, errlen, "dlopen(%s): %s", path, dlerror());
        return -1;
    }
    for (int v = 7; v >= 2; v--) {
        if (version != 0 && v != version) {
            continue;
        }
        kit->table = dlsym(kit->lib, symbols[v]);
        if (kit->table != NULL) {
            kit->version = v;
            /* Every tuner table starts with its name. */
            kit->name = *(const char *const *)kit->table;
            return 0;
        }
    }
    snprintf(err, errlen, "%s exports no %s", path,
             version != 0 && version >= 2 && version <= 7 ? symbols[version]
                                                          : "ncclTunerPlugin_v7..v2");
    dlclose(kit->lib);
    kit->lib = NULL;
    return -1;
}

void tuner_kit_close(tuner_kit_t *kit)
{
    if (kit->lib != NULL) {
        dlclose(kit->lib);
    }
    memset(kit, 0, sizeof(*kit));
}

ncclResult_t tuner_kit_init(tuner_kit_t *kit, uint64_t comm_id, size_t nranks, size_t nnodes,
                            void **ctx_p)
{
    /* Plausible values; a plugin may overwrite them (during init only). */
    ncclTunerConstants_v6_t constants;
    ncclNvlDomainInfo_v6_t nvl = {(int)nnodes, (int)(nranks / (nnodes ? nnodes : 1)),
                                  (int)((nranks + nnodes - 1) / (nnodes ? nnodes : 1))};

    memset(&constants, 0, sizeof(constants));
    for (int a = 0; a < NCCL_NUM_ALGORITHMS; a++) {
        for (int p = 0; p < NCCL_NUM_PROTOCOLS; p++) {
            constants.baseLatencies[a][p] = 6.8;
        }
    }
    switch (kit->version) {
    case 7: {
        ncclTunerConstants_v7_t c7;
        memset(&c7, 0, sizeof(c7));
        memcpy(c7.baseLatencies, constants.baseLatencies, sizeof(c7.baseLatencies));
        return ((const ncclTuner_v7_t *)kit->table)
            ->init(ctx_p, comm_id, nranks, nnodes, tuner_kit_logger,
                   (ncclNvlDomainInfo_v7_t *)(void *)&nvl, &c7);
    }
    case 6:
        return ((const ncclTuner_v6_t *)kit->table)
            ->init(ctx_p, comm_id, nranks, nnodes, tuner_kit_logger, &nvl, &constants);
    case 5:
        return ((const ncclTuner_v5_t *)kit->table)
            ->init(ctx_p, comm_id, nranks, nnodes, tuner_kit_logger,
                   (ncclNvlDomainInfo_v5_t *)(void *)&nvl,
                   (ncclTunerConstants_v5_t *)(void *)&constants);
    case 4:
        return ((const ncclTuner_v4_t *)kit->table)->init(nranks, nnodes, tuner_kit_logger, ctx_p);
    case 3:
        return ((const ncclTuner_v3_t *)kit->table)->init(nranks, nnodes, tuner_kit_logger, ctx_p);
    default:
        return ((const ncclTuner_v2_t *)kit->table)->init(nranks, nnodes, tuner_kit_logger, ctx_p);
    }
}

/* v2: ask for a choice and apply it as NCCL's v2 adapter does. */
static ncclResult_t get_coll_info_v2(const ncclTuner_v2_t *t, void *ctx, ncclFunc_t coll,
                                     size_t nbytes, int pipe_ops,
                                     float table[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS],
                                     int *nchannels)
{
    int algo = NCCL_ALGO_UNDEF, proto = NCCL_PROTO_UNDEF;
    int collnet = table[NCCL_ALGO_COLLNET_CHAIN][NCCL_PROTO_SIMPLE] != NCCL_ALGO_PROTO_IGNORE;
    int nvls = table[NCCL_ALGO_NVLS][NCCL_PROTO_SIMPLE] != NCCL_ALGO_PROTO_IGNORE ||
               table[NCCL_ALGO_NVLS_TREE][NCCL_PROTO_SIMPLE] != NCCL_ALGO_PROTO_IGNORE;
    ncclResult_t res =
        t->getCollInfo(ctx, coll, nbytes, collnet, nvls, pipe_ops, &algo, &proto, nchannels);

    if (res == ncclSuccess && algo >= 0 && algo < NCCL_NUM_ALGORITHMS && proto >= 0 &&
        proto < NCCL_NUM_PROTOCOLS && table[algo][proto] != NCCL_ALGO_PROTO_IGNORE) {
        table[algo][proto] = 0.0f;
    }
    return res;
}

ncclResult_t tuner_kit_get_coll_info(tuner_kit_t *kit, void *ctx, ncclFunc_t coll, size_t nbytes,
                                     int pipe_ops,
                                     float table[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS],
                                     int reg_buff, int *nchannels)
{
    /* The ABI passes the address of the first element as float** (2.5). */
    float **cost = (float **)(void *)table;

    switch (kit->version) {
    case 7:
        return ((const ncclTuner_v7_t *)kit->table)
            ->getCollInfo(ctx, coll, nbytes, pipe_ops, cost, NCCL_NUM_ALGORITHMS,
                          NCCL_NUM_PROTOCOLS, reg_buff, nchannels);
    case 6:
        return ((const ncclTuner_v6_t *)kit->table)
            ->getCollInfo(ctx, coll, nbytes, pipe_ops, cost, NCCL_NUM_ALGORITHMS,
                          NCCL_NUM_PROTOCOLS, reg_buff, nchannels);
    case 5:
        return ((const ncclTuner_v5_t *)kit->table)
            ->getCollInfo(ctx, coll, nbytes, pipe_ops, cost, NCCL_NUM_ALGORITHMS,
                          NCCL_NUM_PROTOCOLS, reg_buff, nchannels);
    case 4:
        return ((const ncclTuner_v4_t *)kit->table)
            ->getCollInfo(ctx, coll, nbytes, pipe_ops, cost, NCCL_NUM_ALGORITHMS,
                          NCCL_NUM_PROTOCOLS, reg_buff, nchannels);
    case 3:
        return ((const ncclTuner_v3_t *)kit->table)
            ->getCollInfo(ctx, coll, nbytes, pipe_ops, cost, NCCL_NUM_ALGORITHMS,
                          NCCL_NUM_PROTOCOLS, nchannels);
    default: return get_coll_info_v2(kit->table, ctx, coll, nbytes, pipe_ops, table, nchannels);
    }
}

ncclResult_t tuner_kit_finalize(tuner_kit_t *kit, void *ctx)
{
    switch (kit->version) {
    case 7: return ((const ncclTuner_v7_t *)kit->table)->finalize(ctx);
    case 6: return ((const ncclTuner_v6_t *)kit->table)->finalize(ctx);
    case 5: return ((const ncclTuner_v5_t *)kit->table)->finalize(ctx);
    case 4: return ((const ncclTuner_v4_t *)kit->table)->destroy(ctx);
    case 3: return ((const ncclTuner_v3_t *)kit->table)->destroy(ctx);
    default: return ((const ncclTuner_v2_t *)kit->table)->destroy(ctx);
    }
}

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_warnings[16384];
static size_t log_len;

void tuner_kit_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                      const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    (void)flags;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* CTest shows it when a test fails. */
    fprintf(stderr, "[plugin %s %s:%d] %s\n", level == NCCL_LOG_WARN ? "WARN" : "INFO", file, line,
            msg);
    if (level != NCCL_LOG_WARN) {
        return;
    }
    pthread_mutex_lock(&log_lock);
    log_len += (size_t)snprintf(log_warnings + log_len,
                                log_len < sizeof(log_warnings) ? sizeof(log_warnings) - log_len : 0,
                                "%s\n", msg);
    if (log_len >= sizeof(log_warnings)) {
        log_len = sizeof(log_warnings) - 1;
    }
    pthread_mutex_unlock(&log_lock);
}

void tuner_kit_log_reset(void)
{
    pthread_mutex_lock(&log_lock);
    log_len = 0;
    log_warnings[0] = '\0';
    pthread_mutex_unlock(&log_lock);
}

const char *tuner_kit_log_warnings(void)
{
    return log_warnings;
}
