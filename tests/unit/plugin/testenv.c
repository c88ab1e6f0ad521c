/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A test env plugin exporting ncclEnvPlugin_v1 (TESTENV_V1) or _v2 (TESTENV_V2): it
 * answers "from-plugin-vN" for BRAID_TEST_ENV_VAR and NULL for everything else.
 */
#include <string.h>

#include "plugin_api/env/env.h"

#define EXPORT __attribute__((visibility("default")))

EXPORT int testenv_init_calls;
EXPORT int testenv_fini_calls;
EXPORT int testenv_major;

static const char *te_get(const char *name)
{
#ifdef TESTENV_V2
    static const char value[] = "from-plugin-v2";
#else
    static const char value[] = "from-plugin-v1";
#endif
    return strcmp(name, "BRAID_TEST_ENV_VAR") == 0 ? value : NULL;
}

static ncclResult_t te_fini(void)
{
    testenv_fini_calls++;
    return ncclSuccess;
}

#ifdef TESTENV_V2
static ncclResult_t te_init(uint8_t major, uint8_t minor, uint8_t patch, const char *suffix,
                            ncclDebugLogger_t log)
{
    (void)minor;
    (void)patch;
    (void)suffix;
    if (log == NULL) {
        return ncclInternalError;
    }
    testenv_init_calls++;
    testenv_major = major;
    return ncclSuccess;
}

EXPORT const ncclEnvPlugin_v2_t ncclEnvPlugin_v2 = {
    .name = "TestEnvV2",
    .init = te_init,
    .finalize = te_fini,
    .getEnv = te_get,
};
#else
static ncclResult_t te_init(uint8_t major, uint8_t minor, uint8_t patch, const char *suffix)
{
    (void)minor;
    (void)patch;
    (void)suffix;
    testenv_init_calls++;
    testenv_major = major;
    return ncclSuccess;
}

EXPORT const ncclEnvPlugin_v1_t ncclEnvPlugin_v1 = {
    .name = "TestEnvV1",
    .init = te_init,
    .finalize = te_fini,
    .getEnv = te_get,
};
#endif
