/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Env plugin ABI version 2 (NCCL 2.30.7): symbol "ncclEnvPlugin_v2", type
 * ncclEnvPlugin_v2_t, 4 slots (32 bytes on LP64). Frozen: a released version is never
 * edited; a change is a new version file.
 *
 * What v2 added over v1: init takes the core's logger as a last argument.
 *
 * An env plugin supplies (or transforms) the configuration the core reads: the core
 * routes its parameter lookups through getEnv. It is selected with NCCL_ENV_PLUGIN
 * (read with the C library's getenv, never through the plugin), loaded once per
 * process on the first API call that needs the environment, and finalized from an
 * atexit handler. Without one, the core reads the process environment directly.
 *
 * Threading: init and finalize run once, with no other call in flight; getEnv may be
 * called from any thread, concurrently, and must be thread-safe. No member may block.
 */
#ifndef BRAID_PLUGIN_API_ENV_V2_H_
#define BRAID_PLUGIN_API_ENV_V2_H_

#include "../common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The env plugin's function table (4 slots). */
typedef struct {
    /* Slot 0. Name of the plugin, for logs. Plugin-owned static storage. Since v1. */
    const char *name;
    /*
     * Slot 1. Initialize the plugin once per process.
     * In: ncclMajor, ncclMinor, ncclPatch - version of the loading library (2, 30, 7)
     *     suffix - its version suffix (NCCL_SUFFIX, usually ""); valid during the call
     * A non-success return: NCCL's documentation says the core falls back to its
     * built-in environment, while NCCL 2.30.7 fails the API call; do not fail init.
     * logFunction: the core's logger, valid until finalize (since v2).
     */
    ncclResult_t (*init)(uint8_t ncclMajor, uint8_t ncclMinor, uint8_t ncclPatch,
                         const char *suffix, ncclDebugLogger_t logFunction);
    /* Slot 2. Release everything; getEnv is not called afterwards. Since v1. */
    ncclResult_t (*finalize)(void);
    /*
     * Slot 3. Value of the variable `name` (valid during the call), or NULL when it is
     * not set. Returns a plugin-owned string that must stay valid until finalize or the
     * next getEnv of the same name. Thread-safe; must not block. Since v1.
     */
    const char *(*getEnv)(const char *name);
} ncclEnvPlugin_v2_t;

#ifdef __cplusplus
}
#endif

#endif /* BRAID_PLUGIN_API_ENV_V2_H_ */
