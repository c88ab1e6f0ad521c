/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The parameter table: every core knob, expanded from params.def. Values load once (on
 * first use) from the environment, the configuration files and the defaults.
 */
#ifndef BR_COMMON_PARAM_H_
#define BR_COMMON_PARAM_H_

#include <stdint.h>

typedef enum { BR_PTYPE_INT, BR_PTYPE_BOOL, BR_PTYPE_SIZE, BR_PTYPE_STR } br_param_type_t;
typedef enum { BR_PLEVEL_PUBLIC, BR_PLEVEL_EXPERT, BR_PLEVEL_DEBUG } br_param_level_t;

typedef enum {
#define BR_PARAM(prefix, name, type, def, level, doc) BR_PARAM_ID_##name,
#include "params.def"
#undef BR_PARAM
    BR_PARAM_COUNT
} br_param_id_t;

/* One row of the table, as braid-info prints it. */
typedef struct {
    const char *key;       /* environment key, e.g. "NCCL_BUFFSIZE" */
    br_param_type_t type;
    const char *def;       /* default, as text */
    br_param_level_t level;
    const char *doc;       /* one-line description */
    const char *text;      /* current value as text */
    int64_t value;         /* current value (numeric types) */
    const char *source;    /* "default", "environment", or the configuration file's path */
} br_param_row_t;

/* Numeric value of a parameter (INT, BOOL, SIZE). */
int64_t br_param_int(br_param_id_t id);
/* Text of a STR parameter, NULL when empty. */
const char *br_param_str(br_param_id_t id);
/* The whole table (loads it on first use). */
const br_param_row_t *br_param_table(int *count_p);
/* Parse a value of the given type; returns 0 on success. Exposed for tests. */
int br_param_parse(br_param_type_t type, const char *text, int64_t *value_p);

/* A getEnv: the value of `key`, or NULL when unset. */
typedef const char *(*br_param_env_fn_t)(const char *key);

/* Read values through `get` (an env plugin's getEnv; `name` names it in sources and logs)
 * instead of the process environment: NCCL_* keys only through it, BRAID_* keys through
 * it and then the environment; NCCL_ENV_PLUGIN always from the environment. The table is
 * loaded again at once (values read earlier by a thread are not re-read by it). NULL
 * stops calling the previous one and keeps the values. */
void br_param_set_env_source(br_param_env_fn_t get, const char *name);

#define BR_PARAM_INT(N) br_param_int(BR_PARAM_ID_##N)
#define BR_PARAM_STR(N) br_param_str(BR_PARAM_ID_##N)

#endif /* BR_COMMON_PARAM_H_ */
