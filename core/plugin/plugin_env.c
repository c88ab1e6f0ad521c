/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Env plugin loading (ncclEnvPlugin_v2, then _v1): one plugin per process, opened once
 * and consulted for environment values through getEnv: once it is loaded the parameter
 * table (core/util) reads NCCL_* values through it. v1's init lacks the logger; both
 * get NCCL's version numbers from nccl.h. The state is process-wide by nature (the
 * environment is), guarded by env_lock.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "param.h"
#include "plugin_api/env/env.h"
#include "plugin_int.h"

static pthread_mutex_t env_lock = PTHREAD_MUTEX_INITIALIZER;
static int env_opened; /* br_plugin_env_open ran (its result is env_result) */
static ncclResult_t env_result;
static br_plugin_lib_t *env_lib; /* NULL: no env plugin */
static int env_version;
static int env_registered; /* the parameter table reads through the plugin */
static union {
    ncclEnvPlugin_v2_t v2;
    ncclEnvPlugin_v1_t v1;
} env_fn;

static const char *const env_symbols[] = {"ncclEnvPlugin_v2", "ncclEnvPlugin_v1"};

static const br_plugin_kind_t env_kind = {
    .tag = "ENV/Plugin",
    .env = "NCCL_ENV_PLUGIN",
    .prefix = "libnccl-env",
    .subsys = NCCL_INIT | NCCL_ENV,
    .symbols = env_symbols,
    .nsymbols = 2,
};

/* Init the plugin found in lib as version `version`; copies its table after init. */
static ncclResult_t env_init(br_plugin_lib_t *lib, int which)
{
    const void *exported = br_plugin_lib_sym(lib, env_symbols[which]);
    void *slots[4];

    memcpy(slots, exported, sizeof(slots));
    if (slots[1] == NULL || slots[2] == NULL || slots[3] == NULL) {
        BR_WARN(NCCL_INIT | NCCL_ENV, "ENV/Plugin: %s: %s has NULL members", lib->path,
                env_symbols[which]);
        return ncclInvalidUsage;
    }
    if (which == 0) {
        const ncclEnvPlugin_v2_t *exp = exported;
        BR_CHECK(exp->init(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, NCCL_SUFFIX, br_log_plugin));
        env_fn.v2 = *exp;
        env_version = 2;
    } else {
        const ncclEnvPlugin_v1_t *exp = exported;
        BR_CHECK(exp->init(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, NCCL_SUFFIX));
        env_fn.v1 = *exp;
        env_version = 1;
    }
    return ncclSuccess;
}

/* The table's getter: the table calls it only while it loads, which happens inside
 * br_plugin_env_open with env_lock held (getEnv is thread-safe by the ABI). */
static const char *env_lookup(const char *name)
{
    return env_version == 2 ? env_fn.v2.getEnv(name) : env_fn.v1.getEnv(name);
}

ncclResult_t br_plugin_env_open(const char *plugin)
{
    br_plugin_lib_t *lib = NULL;
    char before[2048], reason[600]; /* the plugin's own reason, should init fail */
    int which = -1;
    ncclResult_t res;

    pthread_mutex_lock(&env_lock);
    if (env_opened) {
        res = env_result;
        goto out;
    }
    env_opened = 1;
    /* Unset: libnccl-env.so when there is one, as in NCCL. */
    res = br_plugin_find(&env_kind, plugin, NULL, &lib, &which);
    if (res != ncclSuccess || lib == NULL) {
        goto done;
    }
    snprintf(before, sizeof(before), "%s", br_log_last_error());
    res = env_init(lib, which);
    if (res != ncclSuccess) {
        br_plugin_init_reason(before, reason, sizeof(reason));
        BR_WARN(NCCL_INIT | NCCL_ENV, "ENV/Plugin: %s (%s): init failed: %s%s", lib->path,
                env_symbols[which], br_plugin_result_str(res), reason);
        br_plugin_lib_close(lib);
        res = ncclInvalidUsage;
        goto done;
    }
    env_lib = lib;
    BR_INFO(NCCL_INIT | NCCL_ENV, "ENV/Plugin: loaded %s symbol %s (v%d), plugin %s", lib->path,
            env_symbols[which], env_version, env_fn.v1.name != NULL ? env_fn.v1.name : "");
done:
    env_result = res;
    if (res == ncclSuccess && env_lib != NULL) {
        /* From now on the parameter table reads NCCL_* values through the plugin. It loads
         * again at once, under env_lock, so a thread that also opens the plugin waits
         * for the new values instead of reading the old ones. */
        env_registered = 1;
        br_param_set_env_source(env_lookup, env_fn.v1.name != NULL ? env_fn.v1.name : "(unnamed)");
    }
out:
    pthread_mutex_unlock(&env_lock);
    return res;
}

const char *br_plugin_env_get(const char *name)
{
    const char *value = NULL;

    pthread_mutex_lock(&env_lock);
    if (env_lib != NULL) {
        /* getEnv is slot 3 in both versions, with the same type. */
        value = env_version == 2 ? env_fn.v2.getEnv(name) : env_fn.v1.getEnv(name);
    }
    pthread_mutex_unlock(&env_lock);
    return value;
}

int br_plugin_env_loaded(void)
{
    int loaded;
    pthread_mutex_lock(&env_lock);
    loaded = env_lib != NULL;
    pthread_mutex_unlock(&env_lock);
    return loaded;
}

void br_plugin_env_close(void)
{
    ncclResult_t res = ncclSuccess;

    pthread_mutex_lock(&env_lock);
    int registered = env_registered;
    env_registered = 0;
    pthread_mutex_unlock(&env_lock);
    if (registered) {
        br_param_set_env_source(NULL, NULL);
    }
    pthread_mutex_lock(&env_lock);
    if (env_lib != NULL) {
        BR_CLEANUP(env_version == 2 ? env_fn.v2.finalize() : env_fn.v1.finalize(), res);
        br_plugin_lib_close(env_lib);
        env_lib = NULL;
    }
    env_opened = 0;
    pthread_mutex_unlock(&env_lock);
}
