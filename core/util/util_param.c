/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The parameter table: params.def expanded into rows of {key, type, default, level, doc,
 * value, source}. Loaded once under pthread_once, in NCCL's precedence: the environment,
 * then NCCL_CONF_FILE (or ~/.nccl.conf when unset), then /etc/nccl.conf, then the default.
 * Loading never logs (the logger itself reads this table); what loading found worth
 * saying is reported by br_param_report(), which the logger calls once it is ready.
 * Once an env plugin is loaded, the plugin module registers its getEnv here (the table
 * sits below the plugin module) and the table is loaded again with the plugin in place
 * of the process environment. This is the only file that calls getenv().
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "check.h"
#include "param.h"
#include "util.h"

extern char **environ;

static br_param_row_t table[BR_PARAM_COUNT] = {
#define BR_PARAM(prefix, name, type, def, level, doc)                                              \
    [BR_PARAM_ID_##name] = {#prefix "_" #name, BR_PTYPE_##type, def, BR_PLEVEL_##level, doc,       \
                            NULL, 0, "default"},
#include "params.def"
#undef BR_PARAM
};

/* Values that failed to parse, reported (and replaced by the default) at report time. */
static char bad_values[BR_PARAM_COUNT];
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

/* The env plugin's getEnv once the plugin module registered it (br_param_set_env_source):
 * then NCCL_* values come from it instead of the process environment. */
static br_param_env_fn_t env_get;
static char env_source[96];
static pthread_mutex_t reload_lock = PTHREAD_MUTEX_INITIALIZER;

/* Every string the table ever pointed to stays reachable from here: a reload replaces
 * values that another thread may still be reading, so none is freed. */
typedef struct kept {
    struct kept *next;
    char text[];
} kept_t;
static kept_t *kept_list;

static const char *keep(const char *text)
{
    size_t n = strlen(text) + 1;
    kept_t *k = malloc(sizeof(*k) + n);
    if (k == NULL) {
        return "";
    }
    memcpy(k->text, text, n);
    k->next = kept_list;
    kept_list = k;
    return k->text;
}

int br_param_parse(br_param_type_t type, const char *text, int64_t *value_p)
{
    char *end = NULL;
    long long v;

    if (type == BR_PTYPE_STR) {
        *value_p = 0;
        return 0;
    }
    if (text == NULL || *text == '\0') {
        return -1;
    }
    errno = 0;
    v = strtoll(text, &end, 0);
    if (errno != 0 || end == text) {
        return -1;
    }
    if (type == BR_PTYPE_SIZE && *end != '\0') {
        /* K, M and G suffixes, optionally followed by B or iB: binary multiples. */
        int shift = 0;
        switch (toupper((unsigned char)*end)) {
        case 'K': shift = 10; break;
        case 'M': shift = 20; break;
        case 'G': shift = 30; break;
        default: return -1;
        }
        end++;
        if (strcasecmp(end, "") != 0 && strcasecmp(end, "B") != 0 && strcasecmp(end, "iB") != 0) {
            return -1;
        }
        if (v < 0 || v > (INT64_MAX >> shift)) {
            return -1;
        }
        v <<= shift;
        end = (char *)"";
    }
    if (*end != '\0') {
        return -1;
    }
    if (type == BR_PTYPE_BOOL && v != 0 && v != 1) {
        return -1;
    }
    if (type == BR_PTYPE_SIZE && v < 0) {
        return -1;
    }
    *value_p = v;
    return 0;
}

static br_param_row_t *row_by_key(br_param_row_t *rows, const char *key, size_t len)
{
    for (int i = 0; i < BR_PARAM_COUNT; i++) {
        if (strlen(rows[i].key) == len && strncmp(rows[i].key, key, len) == 0) {
            return &rows[i];
        }
    }
    return NULL;
}

static void set_value(br_param_row_t *row, const char *text, const char *source)
{
    row->text = keep(text);
    row->source = source;
}

/* Apply one KEY=VALUE configuration file; values already set by a stronger source stay. */
static void load_file(br_param_row_t *rows, const char *path, const char *weaker_than)
{
    FILE *f = fopen(path, "r");
    char line[1024];

    if (f == NULL) {
        return;
    }
    const char *source = keep(path);
    while (fgets(line, sizeof(line), f) != NULL) {
        char *s = line, *eq, *e;
        while (isspace((unsigned char)*s)) {
            s++;
        }
        if (*s == '#' || *s == '\0') {
            continue;
        }
        eq = strchr(s, '=');
        if (eq == NULL) {
            continue;
        }
        e = eq + strlen(eq);
        while (e > eq + 1 && isspace((unsigned char)e[-1])) {
            *--e = '\0';
        }
        size_t klen = (size_t)(eq - s);
        while (klen > 0 && isspace((unsigned char)s[klen - 1])) {
            klen--;
        }
        br_param_row_t *row = row_by_key(rows, s, klen);
        if (row == NULL) {
            continue;
        }
        /* The user's file overrides /etc/nccl.conf; the environment overrides both. */
        if (strcmp(row->source, "default") == 0 ||
            (weaker_than != NULL && strcmp(row->source, weaker_than) == 0)) {
            set_value(row, eq + 1, source);
        }
    }
    fclose(f);
}

/* The strongest source's value of row i: the env plugin for NCCL_* keys once one is
 * registered (the process environment is not consulted for them, as in NCCL), the plugin
 * then the environment for BRAID_* keys, the environment alone before a plugin loads and
 * for NCCL_ENV_PLUGIN itself. */
static const char *strongest(int i, const char **source_p)
{
    const char *key = table[i].key, *v;
    if (env_get != NULL && i != BR_PARAM_ID_ENV_PLUGIN) {
        if ((v = env_get(key)) != NULL) {
            *source_p = env_source;
            return v;
        }
        if (strncmp(key, "NCCL_", 5) == 0) {
            return NULL;
        }
    }
    *source_p = "environment";
    return getenv(key);
}

/* Load every row of rows (a copy of the table with every text NULL and every source
 * "default") from the files and the strongest source; bad marks values that did not
 * parse. */
static void load_rows(br_param_row_t *rows, char *bad)
{
    const char *conf, *home;
    char path[4096];
    const char *etc = "/etc/nccl.conf";

    load_file(rows, etc, NULL);
    conf = getenv("NCCL_CONF_FILE");
    if (conf != NULL && *conf != '\0') {
        load_file(rows, conf, etc);
    } else if ((home = getenv("HOME")) != NULL) {
        snprintf(path, sizeof(path), "%s/.nccl.conf", home);
        load_file(rows, path, etc);
    }
    for (int i = 0; i < BR_PARAM_COUNT; i++) {
        const char *source = NULL;
        const char *v = strongest(i, &source);
        if (v != NULL) {
            set_value(&rows[i], v, source);
        }
    }
    for (int i = 0; i < BR_PARAM_COUNT; i++) {
        br_param_row_t *row = &rows[i];
        if (row->text == NULL) {
            row->text = row->def;
        }
        if (br_param_parse(row->type, row->text, &row->value) != 0) {
            bad[i] = 1;
            (void)br_param_parse(row->type, row->def, &row->value);
        }
    }
}

static void load(void)
{
    load_rows(table, bad_values);
}

static inline void ensure_loaded(void)
{
    pthread_once(&load_once, load);
}

int64_t br_param_int(br_param_id_t id)
{
    ensure_loaded();
    return table[id].value;
}

const char *br_param_str(br_param_id_t id)
{
    ensure_loaded();
    const char *s = bad_values[id] ? table[id].def : table[id].text;
    return (s != NULL && *s != '\0') ? s : NULL;
}

const br_param_row_t *br_param_table(int *count_p)
{
    ensure_loaded();
    *count_p = BR_PARAM_COUNT;
    return table;
}

/* Known variables that belong to plugins or to NCCL features read elsewhere. */
static int is_plugin_key(const char *key)
{
    static const char *const prefixes[] = {"NCCL_SOCKET_", "NCCL_NSOCKS_", "NCCL_IB_",
                                           "NCCL_OFI_",    "NCCL_TUNER_",  "NCCL_PROFILER_",
                                           "NCCL_TOPO_",
                                           "NCCL_ENV_PLUGIN"};
    for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
        if (strncmp(key, prefixes[i], strlen(prefixes[i])) == 0) {
            return 1;
        }
    }
    return 0;
}

void br_param_report(void)
{
    ensure_loaded();
    for (int i = 0; i < BR_PARAM_COUNT; i++) {
        const br_param_row_t *row = &table[i];
        if (bad_values[i]) {
            BR_WARN(NCCL_ENV, "%s has invalid value '%s' (from %s); using the default %s",
                    row->key, row->text, row->source, row->def);
        } else if (strcmp(row->source, "default") != 0) {
            BR_INFO(NCCL_ENV, "%s set by %s to %s", row->key, row->source, row->text);
        }
    }
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        const char *eq = strchr(*e, '=');
        if (eq == NULL || (strncmp(*e, "NCCL_", 5) != 0 && strncmp(*e, "BRAID_", 6) != 0)) {
            continue;
        }
        if (row_by_key(table, *e, (size_t)(eq - *e)) == NULL && !is_plugin_key(*e)) {
            BR_INFO(NCCL_ENV, "%.*s is not a Braid core parameter and is ignored by the core",
                    (int)(eq - *e), *e);
        }
    }
}

void br_param_set_env_source(br_param_env_fn_t get, const char *name)
{
    ensure_loaded();
    pthread_mutex_lock(&reload_lock);
    env_get = get;
    if (get == NULL) {
        /* The plugin is going away: values stay as they are; nothing calls it again. */
        pthread_mutex_unlock(&reload_lock);
        return;
    }
    snprintf(env_source, sizeof(env_source), "env plugin %s", name != NULL ? name : "?");
    /* Load a fresh copy with the plugin in place of the environment, then publish it row
     * by row: a thread reading meanwhile sees the old value or the new one, never none. */
    static br_param_row_t fresh[BR_PARAM_COUNT]; // under reload_lock
    char bad[BR_PARAM_COUNT];
    memcpy(fresh, table, sizeof(fresh));
    memset(bad, 0, sizeof(bad));
    for (int i = 0; i < BR_PARAM_COUNT; i++) {
        fresh[i].text = NULL;
        fresh[i].source = "default";
    }
    load_rows(fresh, bad);
    for (int i = 0; i < BR_PARAM_COUNT; i++) {
        table[i].value = fresh[i].value;
        table[i].text = fresh[i].text;
        table[i].source = fresh[i].source;
        bad_values[i] = bad[i];
    }
    pthread_mutex_unlock(&reload_lock);
    for (int i = 0; i < BR_PARAM_COUNT; i++) {
        const br_param_row_t *row = &table[i];
        if (bad_values[i]) {
            BR_WARN(NCCL_ENV, "%s has invalid value '%s' (from %s); using the default %s", row->key,
                    row->text, row->source, row->def);
        } else if (row->source == env_source) {
            BR_INFO(NCCL_ENV, "%s set by %s to %s", row->key, row->source, row->text);
        }
        if (strncmp(row->key, "NCCL_", 5) == 0 && i != BR_PARAM_ID_ENV_PLUGIN &&
            getenv(row->key) != NULL) {
            BR_INFO(NCCL_ENV,
                    "%s is set in the environment but not read: %s serves NCCL_* "
                    "variables",
                    row->key, env_source);
        }
    }
}
