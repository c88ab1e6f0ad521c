/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one error idiom: ncclResult_t everywhere, and these five propagation macros.
 * The first function that detects an error logs it once (BR_WARN) with its cause;
 * callers that only propagate stay silent.
 */
#ifndef BR_COMMON_CHECK_H_
#define BR_COMMON_CHECK_H_

#include <errno.h>
#include <string.h>

#include "log.h"

/* Propagate an error by return; only in functions that own nothing. */
#define BR_CHECK(expr)                                                                             \
    do {                                                                                           \
        ncclResult_t res_ = (expr);                                                                \
        if (res_ != ncclSuccess) {                                                                 \
            return res_;                                                                           \
        }                                                                                          \
    } while (0)

/* Propagate an error into `res` and jump to the cleanup label. */
#define BR_CHECK_GOTO(expr, res, label)                                                            \
    do {                                                                                           \
        (res) = (expr);                                                                            \
        if ((res) != ncclSuccess) {                                                                \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

/* A call returning -1 with errno: retry on EINTR, log the call and strerror, set
 * ncclSystemError and jump. */
#define BR_SYS_GOTO(expr, res, label)                                                              \
    do {                                                                                           \
        long sys_ret_;                                                                             \
        do {                                                                                       \
            sys_ret_ = (long)(expr);                                                               \
        } while (sys_ret_ == -1 && errno == EINTR);                                                \
        if (sys_ret_ == -1) {                                                                      \
            BR_WARN(NCCL_ALL, "%s failed: %s", #expr, strerror(errno));                            \
            (res) = ncclSystemError;                                                               \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

/* A CUDA runtime call: log its error string, set ncclUnhandledCudaError and jump. */
#define BR_CUDA_GOTO(expr, res, label)                                                             \
    do {                                                                                           \
        int cuda_err_ = (int)(expr);                                                               \
        if (cuda_err_ != 0) {                                                                      \
            BR_WARN(NCCL_ALL, "%s failed: CUDA error %d", #expr, cuda_err_);                       \
            (res) = ncclUnhandledCudaError;                                                        \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

/* Teardown: log a failure, keep the first error in `res`, carry on. */
#define BR_CLEANUP(expr, res)                                                                      \
    do {                                                                                           \
        ncclResult_t cleanup_res_ = (expr);                                                        \
        if (cleanup_res_ != ncclSuccess) {                                                         \
            BR_INFO(NCCL_ALL, "%s failed during cleanup: %d", #expr, (int)cleanup_res_);           \
            if ((res) == ncclSuccess) {                                                            \
                (res) = cleanup_res_;                                                              \
            }                                                                                      \
        }                                                                                          \
    } while (0)

#ifdef NDEBUG
#define BR_ASSERT(cond) ((void)0)
#else
#include <assert.h>
/* Internal invariants only; user input is checked in core/api. */
#define BR_ASSERT(cond) assert(cond)
#endif

#endif /* BR_COMMON_CHECK_H_ */
