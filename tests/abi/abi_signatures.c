/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Signature facts: the type of every function member of every table, compared with the
 * parameter list plugin-abi.md gives (GCC/Clang __builtin_types_compatible_p). Sizes
 * and slots cannot see a wrong parameter list; these facts can.
 */
#include "nccl.h"
#include "plugin_api/collnet/collnet.h"
#include "plugin_api/env/env.h"
#include "plugin_api/net/net.h"
#include "plugin_api/profiler/profiler.h"
#include "plugin_api/tuner/tuner.h"

#include "abi_facts.h"

/* Member `m` of table type T has exactly the function-pointer type given. */
#define SIG(T, m, ...)                                                                             \
    {                                                                                              \
#T "." #m " has type " #__VA_ARGS__,                                                       \
            __builtin_types_compatible_p(__typeof__(((T *)0)->m), __VA_ARGS__), 1                  \
    }

typedef ncclResult_t res_t;
typedef ncclDebugLogger_t log_t;

/* Members whose types do not change from v6 to v12. */
#define NET_SIG_STABLE(T)                                                                          \
    SIG(T, devices, res_t (*)(int *)),                                                             \
        SIG(T, regMrDmaBuf, res_t (*)(void *, void *, size_t, int, uint64_t, int, void **)),       \
        SIG(T, deregMr, res_t (*)(void *, void *)),                                                \
        SIG(T, iflush, res_t (*)(void *, int, void **, int *, void **, void **)),                  \
        SIG(T, test, res_t (*)(void *, int *, int *)), SIG(T, closeSend, res_t (*)(void *)),       \
        SIG(T, closeRecv, res_t (*)(void *)), SIG(T, closeListen, res_t (*)(void *))
/* v7..v12 additions. */
#define NET_SIG_DEV(T)                                                                             \
    SIG(T, getDeviceMr, res_t (*)(void *, void *, void **)),                                       \
        SIG(T, irecvConsumed, res_t (*)(void *, int, void *))
/* Process-wide init with the logger only, ctx-less listen (v6..v9). */
#define NET_SIG_OLD(T, V)                                                                          \
    SIG(T, init, res_t (*)(log_t)), SIG(T, listen, res_t (*)(int, void *, void **)),               \
        SIG(T, getProperties, res_t (*)(int, ncclNetProperties_##V##_t *))

static const abi_fact_t net_sigs[] = {
    /* v6 */
    NET_SIG_STABLE(ncclNet_v6_t),
    NET_SIG_OLD(ncclNet_v6_t, v6),
    SIG(ncclNet_v6_t, connect, res_t (*)(int, void *, void **)),
    SIG(ncclNet_v6_t, accept, res_t (*)(void *, void **)),
    SIG(ncclNet_v6_t, regMr, res_t (*)(void *, void *, int, int, void **)),
    SIG(ncclNet_v6_t, isend, res_t (*)(void *, void *, int, int, void *, void **)),
    SIG(ncclNet_v6_t, irecv, res_t (*)(void *, int, void **, int *, int *, void **, void **)),
    /* v7 */
    NET_SIG_STABLE(ncclNet_v7_t),
    NET_SIG_DEV(ncclNet_v7_t),
    NET_SIG_OLD(ncclNet_v7_t, v7),
    SIG(ncclNet_v7_t, connect, res_t (*)(int, void *, void **, ncclNetDeviceHandle_v7_t **)),
    SIG(ncclNet_v7_t, accept, res_t (*)(void *, void **, ncclNetDeviceHandle_v7_t **)),
    SIG(ncclNet_v7_t, regMr, res_t (*)(void *, void *, int, int, void **)),
    SIG(ncclNet_v7_t, isend, res_t (*)(void *, void *, int, int, void *, void **)),
    SIG(ncclNet_v7_t, irecv, res_t (*)(void *, int, void **, int *, int *, void **, void **)),
    /* v8 */
    NET_SIG_STABLE(ncclNet_v8_t),
    NET_SIG_DEV(ncclNet_v8_t),
    NET_SIG_OLD(ncclNet_v8_t, v8),
    SIG(ncclNet_v8_t, connect, res_t (*)(int, void *, void **, ncclNetDeviceHandle_v8_t **)),
    SIG(ncclNet_v8_t, accept, res_t (*)(void *, void **, ncclNetDeviceHandle_v8_t **)),
    SIG(ncclNet_v8_t, regMr, res_t (*)(void *, void *, size_t, int, void **)),
    SIG(ncclNet_v8_t, isend, res_t (*)(void *, void *, int, int, void *, void **)),
    SIG(ncclNet_v8_t, irecv, res_t (*)(void *, int, void **, int *, int *, void **, void **)),
    /* v9 */
    NET_SIG_STABLE(ncclNet_v9_t),
    NET_SIG_DEV(ncclNet_v9_t),
    NET_SIG_OLD(ncclNet_v9_t, v9),
    SIG(ncclNet_v9_t, connect, res_t (*)(int, void *, void **, ncclNetDeviceHandle_v9_t **)),
    SIG(ncclNet_v9_t, accept, res_t (*)(void *, void **, ncclNetDeviceHandle_v9_t **)),
    SIG(ncclNet_v9_t, regMr, res_t (*)(void *, void *, size_t, int, void **)),
    SIG(ncclNet_v9_t, isend, res_t (*)(void *, void *, size_t, int, void *, void **)),
    SIG(ncclNet_v9_t, irecv, res_t (*)(void *, int, void **, size_t *, int *, void **, void **)),
    SIG(ncclNet_v9_t, makeVDevice, res_t (*)(int *, ncclNetVDeviceProps_v9_t *)),
    /* v10: every member but init and connect (those are in net_v10_calls) */
    NET_SIG_STABLE(ncclNet_v10_t),
    NET_SIG_DEV(ncclNet_v10_t),
    SIG(ncclNet_v10_t, getProperties, res_t (*)(int, ncclNetProperties_v10_t *)),
    SIG(ncclNet_v10_t, listen, res_t (*)(int, void *, void **)),
    SIG(ncclNet_v10_t, accept, res_t (*)(void *, void **, ncclNetDeviceHandle_v10_t **)),
    SIG(ncclNet_v10_t, regMr, res_t (*)(void *, void *, size_t, int, void **)),
    SIG(ncclNet_v10_t, isend, res_t (*)(void *, void *, size_t, int, void *, void *, void **)),
    SIG(ncclNet_v10_t, irecv,
        res_t (*)(void *, int, void **, size_t *, int *, void **, void **, void **)),
    SIG(ncclNet_v10_t, makeVDevice, res_t (*)(int *, ncclNetVDeviceProps_v10_t *)),
};

#define NET_SIG_NEW(T, V)                                                                          \
    NET_SIG_STABLE(T), NET_SIG_DEV(T),                                                             \
        SIG(T, init,                                                                               \
            res_t (*)(void **, uint64_t, ncclNetCommConfig_##V##_t *, log_t,                       \
                      ncclProfilerCallback_t)),                                                    \
        SIG(T, getProperties, res_t (*)(int, ncclNetProperties_##V##_t *)),                        \
        SIG(T, listen, res_t (*)(void *, int, void *, void **)),                                   \
        SIG(T, connect, res_t (*)(void *, int, void *, void **, ncclNetDeviceHandle_##V##_t **)),  \
        SIG(T, accept, res_t (*)(void *, void **, ncclNetDeviceHandle_##V##_t **)),                \
        SIG(T, regMr, res_t (*)(void *, void *, size_t, int, void **)),                            \
        SIG(T, isend, res_t (*)(void *, void *, size_t, int, void *, void *, void **)),            \
        SIG(T, irecv,                                                                              \
            res_t (*)(void *, int, void **, size_t *, int *, void **, void **, void **)),          \
        SIG(T, makeVDevice, res_t (*)(int *, ncclNetVDeviceProps_##V##_t *)),                      \
        SIG(T, finalize, res_t (*)(void *)),                                                       \
        SIG(T, setNetAttr, res_t (*)(void *, ncclNetAttr_##V##_t *))

static const abi_fact_t net_new_sigs[] = {
    NET_SIG_NEW(ncclNet_v11_t, v11),
    NET_SIG_NEW(ncclNet_v12_t, v12),
};

/* plugin-abi.md 1.6: v10 init is process-wide (logger, profiler callback), and connect
 * takes the traffic-class config second. */
static const abi_fact_t net_v10_calls[] = {
    SIG(ncclNet_v10_t, init, res_t (*)(log_t, ncclProfilerCallback_t)),
    SIG(ncclNet_v10_t, connect,
        res_t (*)(int, ncclNetCommConfig_v10_t *, void *, void **, ncclNetDeviceHandle_v10_t **)),
};

#define COLLNET_SIG(T, V, COUNT_T)                                                                 \
    SIG(T, devices, res_t (*)(int *)),                                                             \
        SIG(T, getProperties, res_t (*)(int, ncclNetProperties_##V##_t *)),                        \
        SIG(T, connect, res_t (*)(void **, int, int, void *, void **)),                            \
        SIG(T, reduceSupport, res_t (*)(ncclDataType_t, ncclRedOp_t, int *)),                      \
        SIG(T, regMr, res_t (*)(void *, void *, size_t, int, void **)),                            \
        SIG(T, regMrDmaBuf, res_t (*)(void *, void *, size_t, int, uint64_t, int, void **)),       \
        SIG(T, deregMr, res_t (*)(void *, void *)),                                                \
        SIG(T, iallreduce,                                                                         \
            res_t (*)(void *, void *, void *, COUNT_T, ncclDataType_t, ncclRedOp_t, void *,        \
                      void *, void **)),                                                           \
        SIG(T, iallgather,                                                                         \
            res_t (*)(void *, void *, int, ncclNetSGE_##V##_t *, size_t, size_t, size_t, void *,   \
                      void **)),                                                                   \
        SIG(T, ireducescatter,                                                                     \
            res_t (*)(void *, int, ncclNetSGE_##V##_t *, void *, size_t, size_t, size_t,           \
                      ncclDataType_t, ncclRedOp_t, void *, void **)),                              \
        SIG(T, iflush, res_t (*)(void *, void *, int, void *, void **)),                           \
        SIG(T, test, res_t (*)(void *, int *, int *)), SIG(T, closeColl, res_t (*)(void *)),       \
        SIG(T, closeListen, res_t (*)(void *))
#define COLLNET_SIG_OLD(T, V)                                                                      \
    SIG(T, init, res_t (*)(log_t)), SIG(T, listen, res_t (*)(int, void *, void **))
#define COLLNET_SIG_NEW(T, V)                                                                      \
    SIG(T, init, res_t (*)(void **, uint64_t, log_t)),                                             \
        SIG(T, listen, res_t (*)(void *, int, void *, void **)),                                   \
        SIG(T, makeVDevice, res_t (*)(int *, ncclNetVDeviceProps_##V##_t *)),                      \
        SIG(T, finalize, res_t (*)(void *))

static const abi_fact_t collnet_sigs[] = {
    COLLNET_SIG(ncclCollNet_v8_t, v8, int),
    COLLNET_SIG_OLD(ncclCollNet_v8_t, v8),
    COLLNET_SIG(ncclCollNet_v9_t, v9, size_t),
    COLLNET_SIG_OLD(ncclCollNet_v9_t, v9),
    SIG(ncclCollNet_v9_t, makeVDevice, res_t (*)(int *, ncclNetVDeviceProps_v9_t *)),
    COLLNET_SIG(ncclCollNet_v10_t, v10, size_t),
    COLLNET_SIG_OLD(ncclCollNet_v10_t, v10),
    SIG(ncclCollNet_v10_t, makeVDevice, res_t (*)(int *, ncclNetVDeviceProps_v10_t *)),
    COLLNET_SIG(ncclCollNet_v11_t, v11, size_t),
    COLLNET_SIG_NEW(ncclCollNet_v11_t, v11),
    COLLNET_SIG(ncclCollNet_v12_t, v12, size_t),
    COLLNET_SIG_NEW(ncclCollNet_v12_t, v12),
};

/* getCollInfo on the cost table: without regBuff (v3), with it (v4..v6). */
#define TUNER_CI_V3(T)                                                                             \
    SIG(T, getCollInfo, res_t (*)(void *, ncclFunc_t, size_t, int, float **, int, int, int *))
#define TUNER_CI_V4(T)                                                                             \
    SIG(T, getCollInfo, res_t (*)(void *, ncclFunc_t, size_t, int, float **, int, int, int, int *))
#define TUNER_INIT_V5(T, V)                                                                        \
    SIG(T, init,                                                                                   \
        res_t (*)(void **, uint64_t, size_t, size_t, log_t, ncclNvlDomainInfo_##V##_t *,           \
                  ncclTunerConstants_##V##_t *)),                                                  \
        TUNER_CI_V4(T), SIG(T, finalize, res_t (*)(void *))

static const abi_fact_t tuner_sigs[] = {
    SIG(ncclTuner_v2_t, init, res_t (*)(size_t, size_t, log_t, void **)),
    SIG(ncclTuner_v2_t, getCollInfo,
        res_t (*)(void *, ncclFunc_t, size_t, int, int, int, int *, int *, int *)),
    SIG(ncclTuner_v2_t, destroy, res_t (*)(void *)),
    SIG(ncclTuner_v3_t, init, res_t (*)(size_t, size_t, log_t, void **)),
    TUNER_CI_V3(ncclTuner_v3_t),
    SIG(ncclTuner_v3_t, destroy, res_t (*)(void *)),
    SIG(ncclTuner_v4_t, init, res_t (*)(size_t, size_t, log_t, void **)),
    TUNER_CI_V4(ncclTuner_v4_t),
    SIG(ncclTuner_v4_t, destroy, res_t (*)(void *)),
    TUNER_INIT_V5(ncclTuner_v5_t, v5),
    TUNER_INIT_V5(ncclTuner_v6_t, v6),
    SIG(ncclTuner_v6_t, getChunkSize,
        res_t (*)(void *, ncclFunc_t, size_t, int, int, int, size_t *)),
    TUNER_INIT_V5(ncclTuner_v7_t, v7),
    SIG(ncclTuner_v7_t, getChunkSize,
        res_t (*)(void *, ncclFunc_t, size_t, int, int, int, size_t *)),
};

#define PROF_SIG(T, V)                                                                             \
    SIG(T, startEvent, res_t (*)(void *, void **, ncclProfilerEventDescr_##V##_t *)),              \
        SIG(T, stopEvent, res_t (*)(void *)),                                                      \
        SIG(T, recordEventState,                                                                   \
            res_t (*)(void *, ncclProfilerEventState_##V##_t,                                      \
                      ncclProfilerEventStateArgs_##V##_t *)),                                      \
        SIG(T, finalize, res_t (*)(void *))
#define PROF_INIT_V5(T)                                                                            \
    SIG(T, init, res_t (*)(void **, uint64_t, int *, const char *, int, int, int, log_t))

static const abi_fact_t profiler_env_sigs[] = {
    SIG(ncclProfiler_v4_t, init,
        res_t (*)(void **, int *, const char *, uint64_t, int, int, int, log_t)),
    PROF_SIG(ncclProfiler_v4_t, v4),
    PROF_INIT_V5(ncclProfiler_v5_t),
    PROF_SIG(ncclProfiler_v5_t, v5),
    PROF_INIT_V5(ncclProfiler_v6_t),
    PROF_SIG(ncclProfiler_v6_t, v6),
    PROF_INIT_V5(ncclProfiler_v7_t),
    PROF_SIG(ncclProfiler_v7_t, v7),
    SIG(ncclEnvPlugin_v1_t, init, res_t (*)(uint8_t, uint8_t, uint8_t, const char *)),
    SIG(ncclEnvPlugin_v1_t, finalize, res_t (*)(void)),
    SIG(ncclEnvPlugin_v1_t, getEnv, const char *(*)(const char *)),
    SIG(ncclEnvPlugin_v2_t, init, res_t (*)(uint8_t, uint8_t, uint8_t, const char *, log_t)),
    SIG(ncclEnvPlugin_v2_t, finalize, res_t (*)(void)),
    SIG(ncclEnvPlugin_v2_t, getEnv, const char *(*)(const char *)),
    /* The two callbacks every plugin receives. */
    {"ncclDebugLogger_t signature",
     __builtin_types_compatible_p(
         ncclDebugLogger_t,
         void (*)(ncclDebugLogLevel, unsigned long, const char *, int, const char *, ...)),
     1},
    {"ncclProfilerCallback_t signature",
     __builtin_types_compatible_p(ncclProfilerCallback_t,
                                  res_t (*)(void **, int, void *, int64_t, void *)),
     1},
};

static const abi_fact_table_t sig_tables[] = {
    ABI_TABLE("net v6-v10 signatures", net_sigs),
    ABI_TABLE("net v10 init/connect signatures", net_v10_calls),
    ABI_TABLE("net v11-v12 signatures", net_new_sigs),
    ABI_TABLE("collnet signatures", collnet_sigs),
    ABI_TABLE("tuner signatures", tuner_sigs),
    ABI_TABLE("profiler and env signatures", profiler_env_sigs),
};

const abi_fact_table_t *abi_signature_tables(size_t *n_p)
{
    *n_p = sizeof(sig_tables) / sizeof(sig_tables[0]);
    return sig_tables;
}

