/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A test env plugin (ncclEnvPlugin_v2, "EnvTable"): it answers getEnv from its own table
 * and never from the process environment, so a test can prove that a value set only here
 * changes what the core does and that the environment's value of the same variable is
 * not consulted. The table: NCCL_IB_HCA=^strict0 (the strict net plugin's device 0 is
 * not used) and BRAID_TEST_ENV_TABLE=1.
 */
#include <stddef.h>
#include <string.h>

#include "plugin_api/env/env_v2.h"

static const char *const table[][2] = {
    {"NCCL_IB_HCA", "^strict0"},
    {"BRAID_TEST_ENV_TABLE", "1"},
};

static ncclResult_t envt_init(uint8_t major, uint8_t minor, uint8_t patch, const char *suffix,
                              ncclDebugLogger_t log)
{
    (void)major;
    (void)minor;
    (void)patch;
    (void)suffix;
    if (log != NULL) {
        log(NCCL_LOG_INFO, NCCL_ENV, __FILE__, __LINE__, "env table test plugin: %d entries",
            (int)(sizeof(table) / sizeof(table[0])));
    }
    return ncclSuccess;
}

static ncclResult_t envt_finalize(void)
{
    return ncclSuccess;
}

static const char *envt_get(const char *name)
{
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        if (strcmp(table[i][0], name) == 0) {
            return table[i][1];
        }
    }
    return NULL;
}

__attribute__((visibility("default"))) const ncclEnvPlugin_v2_t ncclEnvPlugin_v2 = {
    .name = "EnvTable",
    .init = envt_init,
    .finalize = envt_finalize,
    .getEnv = envt_get,
};
