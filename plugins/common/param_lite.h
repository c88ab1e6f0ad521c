/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Environment-only parameters for plugins, which must not depend on the core. A plugin
 * lists its knobs in <plugin>_params.def as
 *   BR_LITE_PARAM(getter_name, "NCCL_KEY", default, "one-line doc")
 * and expands the file with BR_LITE_PARAM defined as BR_LITE_PARAM_DEFINE to get a
 * cached int64_t getter per line. Strings are read with br_lite_param_str().
 */
#ifndef BR_PLUGIN_PARAM_LITE_H_
#define BR_PLUGIN_PARAM_LITE_H_

#include <stdint.h>

/* Integer value of key (base 0, K/M/G suffixes allowed), or def when unset or invalid
 * (an invalid value is logged as a warning through the plugin logger). */
int64_t br_lite_param_int(const char *key, int64_t def) __attribute__((visibility("hidden")));
/* Value of key, or NULL when unset or empty. */
const char *br_lite_param_str(const char *key) __attribute__((visibility("hidden")));

#define BR_LITE_PARAM_DEFINE(getter, key, def, doc)                                                \
    static int64_t getter(void)                                                                    \
    {                                                                                              \
        static int64_t cached_;                                                                    \
        static int loaded_;                                                                        \
        if (!__atomic_load_n(&loaded_, __ATOMIC_ACQUIRE)) {                                        \
            cached_ = br_lite_param_int(key, def);                                                 \
            __atomic_store_n(&loaded_, 1, __ATOMIC_RELEASE);                                       \
        }                                                                                          \
        return cached_;                                                                            \
    }

#endif /* BR_PLUGIN_PARAM_LITE_H_ */
