/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Environment-only parameter reading for plugins, and the plugin logger variable.
 * The only getenv() calls in plugin code are here.
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>

#include "param_lite.h"
#include "plugin_log.h"

ncclDebugLogger_t br_plugin_logger;

int64_t br_lite_param_int(const char *key, int64_t def)
{
    const char *s = getenv(key);
    char *end = NULL;
    long long v;

    if (s == NULL || *s == '\0') {
        return def;
    }
    errno = 0;
    v = strtoll(s, &end, 0);
    if (errno == 0 && end != s) {
        switch (toupper((unsigned char)*end)) {
        case 'K': v <<= 10; end++; break;
        case 'M': v <<= 20; end++; break;
        case 'G': v <<= 30; end++; break;
        default: break;
        }
        if (*end == '\0') {
            return v;
        }
    }
    BR_WARN(NCCL_ENV, "%s has invalid value '%s'; using the default %lld", key, s, (long long)def);
    return def;
}

const char *br_lite_param_str(const char *key)
{
    const char *s = getenv(key);
    return (s != NULL && *s != '\0') ? s : NULL;
}
