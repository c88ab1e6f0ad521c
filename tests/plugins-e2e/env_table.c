/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A test env plugin (ncclEnvPlugin_v2, "EnvTable"): it answers getEnv from its own table
 * and never from the process environment, so a test can prove that a value set only here
 * changes what the core does and that the environment's value of the same variable is
 * not consulted. The table is read at init from the file BRAID_TEST_ENV_TABLE names (the
 * plugin's own configuration, the only variable it reads): KEY=VALUE lines, at most 32.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugin_api/env/env_v2.h"

#define ENVT_MAX 32

static char keys[ENVT_MAX][64], values[ENVT_MAX][512];
static int count;

static ncclResult_t envt_init(uint8_t major, uint8_t minor, uint8_t patch, const char *suffix,
                              ncclDebugLogger_t log)
{
    const char *path = getenv("BRAID_TEST_ENV_TABLE");
    FILE *f = path != NULL ? fopen(path, "r") : NULL;
    char line[640];

    (void)major;
    (void)minor;
    (void)patch;
    (void)suffix;
    if (f == NULL) {
        if (log != NULL) {
            log(NCCL_LOG_WARN, NCCL_ENV, __FILE__, __LINE__,
                "env table test plugin: cannot open BRAID_TEST_ENV_TABLE=%s",
                path != NULL ? path : "(unset)");
        }
        return ncclInvalidUsage;
    }
    count = 0;
    while (count < ENVT_MAX && fgets(line, sizeof(line), f) != NULL) {
        char *eq = strchr(line, '=');
        if (eq == NULL) {
            continue;
        }
        *eq = '\0';
        line[strcspn(line, "\n")] = '\0';
        eq[1 + strcspn(eq + 1, "\n")] = '\0';
        if (strlen(line) >= sizeof(keys[0]) || strlen(eq + 1) >= sizeof(values[0])) {
            continue;
        }
        memcpy(keys[count], line, strlen(line) + 1);
        memcpy(values[count], eq + 1, strlen(eq + 1) + 1);
        count++;
    }
    fclose(f);
    if (log != NULL) {
        log(NCCL_LOG_INFO, NCCL_ENV, __FILE__, __LINE__, "env table test plugin: %d entries",
            count);
    }
    return ncclSuccess;
}

static ncclResult_t envt_finalize(void)
{
    count = 0;
    return ncclSuccess;
}

static const char *envt_get(const char *name)
{
    for (int i = 0; i < count; i++) {
        if (strcmp(keys[i], name) == 0) {
            return values[i];
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
