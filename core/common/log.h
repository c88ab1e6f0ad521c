/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one logging idiom: NCCL_DEBUG levels and NCCL_DEBUG_SUBSYS subsystems, lines in
 * NCCL's "host:pid:tid [rank] NCCL INFO ..." format. Each macro tests level and mask with
 * one relaxed load before calling anything. A WARN also becomes the text behind
 * ncclGetLastError().
 */
#ifndef BR_COMMON_LOG_H_
#define BR_COMMON_LOG_H_

#include <stdatomic.h>

#include "nccl.h"
#include "plugin_api/common.h"

/* Current level (NCCL_LOG_*), or -1 before the first use loads the settings. */
extern _Atomic int br_log_level;
/* Current subsystem mask. */
extern _Atomic unsigned long br_log_mask;

/* Load NCCL_DEBUG, NCCL_DEBUG_SUBSYS and NCCL_DEBUG_FILE (once). */
void br_log_init(void);

/* Write one line. Use the macros below rather than calling this. Saves errno. */
void br_log_write(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                  const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* The logger handed to plugins (ncclDebugLogger_t). */
void br_log_plugin(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Rank printed in this thread's log lines (-1: none). */
void br_log_set_rank(int rank);

/* Text of the last WARN of this thread, or of the process when this thread has none. */
const char *br_log_last_error(void);
/* Forget this thread's last error (at the start of an API call). */
void br_log_clear_last_error(void);
/* Make msg this thread's ncclGetLastError() text (the root cause of a failure, after
 * consequences logged later in the same call). */
void br_log_set_last_error(const char *msg);

static inline int br_log_enabled(int level, unsigned long flags)
{
    int cur = atomic_load_explicit(&br_log_level, memory_order_relaxed);
    if (cur < 0) {
        br_log_init();
        cur = atomic_load_explicit(&br_log_level, memory_order_relaxed);
    }
    if (level > cur) {
        return 0;
    }
    return level == NCCL_LOG_WARN ||
           (flags & atomic_load_explicit(&br_log_mask, memory_order_relaxed)) != 0;
}

/* Warnings are always recorded for ncclGetLastError, even when not printed. */
#define BR_WARN(subsys, ...) br_log_write(NCCL_LOG_WARN, (subsys), __FILE__, __LINE__, __VA_ARGS__)

#define BR_INFO(subsys, ...)                                                                       \
    do {                                                                                           \
        if (br_log_enabled(NCCL_LOG_INFO, (subsys))) {                                             \
            br_log_write(NCCL_LOG_INFO, (subsys), __FILE__, __LINE__, __VA_ARGS__);                \
        }                                                                                          \
    } while (0)

/* A WARN, or only an INFO where the caller handles the failure itself (quiet). */
#define BR_WARN_UNLESS(quiet, subsys, ...)                                                         \
    do {                                                                                           \
        if (quiet) {                                                                               \
            BR_INFO(subsys, __VA_ARGS__);                                                          \
        } else {                                                                                   \
            BR_WARN(subsys, __VA_ARGS__);                                                          \
        }                                                                                          \
    } while (0)

#ifdef BR_ENABLE_TRACE
#define BR_TRACE(subsys, ...)                                                                      \
    do {                                                                                           \
        if (br_log_enabled(NCCL_LOG_TRACE, (subsys))) {                                            \
            br_log_write(NCCL_LOG_TRACE, (subsys), __FILE__, __LINE__, __VA_ARGS__);               \
        }                                                                                          \
    } while (0)
#else
#define BR_TRACE(subsys, ...)                                                                      \
    do {                                                                                           \
    } while (0)
#endif

#define BR_WARN_ONCE(subsys, ...)                                                                  \
    do {                                                                                           \
        static _Atomic int warned_;                                                                \
        if (!atomic_exchange(&warned_, 1)) {                                                       \
            BR_WARN(subsys, __VA_ARGS__);                                                          \
        }                                                                                          \
    } while (0)

#endif /* BR_COMMON_LOG_H_ */
