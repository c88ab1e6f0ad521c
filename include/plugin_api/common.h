/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Types shared by every plugin ABI: the result code, the logger callback with its
 * levels and subsystem bits, and the profiler callback handed to net plugins.
 * Values are NCCL's; this header compiles alone as C99 and as C++.
 */
#ifndef BRAID_PLUGIN_API_COMMON_H_
#define BRAID_PLUGIN_API_COMMON_H_

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if !defined(NCCL_H_) && !defined(BRAID_NCCL_RESULT_T_)
#define BRAID_NCCL_RESULT_T_
/* The result code of every plugin call (same values as nccl.h). */
typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
    ncclTimeout = 8, /* NCCL 2.30 */
    ncclNumResults = 9
} ncclResult_t;
#endif

/* Log levels passed to the logger. */
typedef enum {
    NCCL_LOG_NONE = 0,
    NCCL_LOG_VERSION = 1,
    NCCL_LOG_WARN = 2,
    NCCL_LOG_INFO = 3,
    NCCL_LOG_ABORT = 4,
    NCCL_LOG_TRACE = 5
} ncclDebugLogLevel;

/* Subsystem bits, as NCCL_DEBUG_SUBSYS names them. */
typedef enum {
    NCCL_INIT = 0x1,
    NCCL_COLL = 0x2,
    NCCL_P2P = 0x4,
    NCCL_SHM = 0x8,
    NCCL_NET = 0x10,
    NCCL_GRAPH = 0x20,
    NCCL_TUNING = 0x40,
    NCCL_ENV = 0x80,
    NCCL_ALLOC = 0x100,
    NCCL_CALL = 0x200,
    NCCL_PROXY = 0x400,
    NCCL_NVLS = 0x800,
    NCCL_BOOTSTRAP = 0x1000,
    NCCL_REG = 0x2000,
    NCCL_PROFILE = 0x4000,
    NCCL_RAS = 0x8000,
    NCCL_DESTROY = 0x10000,
    NCCL_ALLOC_HOST = 0x20000,
    NCCL_ALL = ~0
} ncclDebugLogSubSys;

/*
 * The core's logger, handed to every plugin's init. printf-style; `flags` is a
 * subsystem mask (NCCL_ALL for warnings). Thread-safe; never blocks for long.
 */
typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags,
                                  const char *file, int line, const char *fmt, ...);

/*
 * Profiler callback handed to net plugins (net v10 and later): a net plugin reports
 * its own events through it. `pHandle` is the handle the core passed with the
 * operation; `type` a profiler event type; `extData` the plugin-specific payload.
 */
typedef ncclResult_t (*ncclProfilerCallback_t)(void **eHandle, int type, void *pHandle,
                                               int64_t pluginId, void *extData);

#ifdef __cplusplus
}
#endif

#endif /* BRAID_PLUGIN_API_COMMON_H_ */
