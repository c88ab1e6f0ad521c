/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Logging for plugins: the same BR_WARN / BR_INFO / BR_TRACE macros as the core, routed
 * to the logger the core (Braid's or NVIDIA's) passed to the plugin's init. Include this
 * before core/common/check.h so the error macros log through the plugin logger too.
 */
#ifndef BR_PLUGIN_LOG_H_
#define BR_PLUGIN_LOG_H_

/* Keep core/common/log.h out: the plugin has no core to link against. */
#define BR_COMMON_LOG_H_

#include "plugin_api/common.h"

/* Set from the logger argument of init; NULL (silent) before. Hidden per plugin. */
extern ncclDebugLogger_t br_plugin_logger __attribute__((visibility("hidden")));

#define BR_PLUGIN_LOG(level, subsys, ...)                                                          \
    do {                                                                                           \
        if (br_plugin_logger != NULL) {                                                            \
            br_plugin_logger((level), (unsigned long)(subsys), __FILE__, __LINE__, __VA_ARGS__);   \
        }                                                                                          \
    } while (0)

#define BR_WARN(subsys, ...) BR_PLUGIN_LOG(NCCL_LOG_WARN, NCCL_ALL, __VA_ARGS__)
#define BR_INFO(subsys, ...) BR_PLUGIN_LOG(NCCL_LOG_INFO, (subsys), __VA_ARGS__)
#ifdef BR_ENABLE_TRACE
#define BR_TRACE(subsys, ...) BR_PLUGIN_LOG(NCCL_LOG_TRACE, (subsys), __VA_ARGS__)
#else
#define BR_TRACE(subsys, ...)                                                                      \
    do {                                                                                           \
    } while (0)
#endif

#endif /* BR_PLUGIN_LOG_H_ */
