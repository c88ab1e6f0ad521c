/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The plugins' parameters and the check of the environment. The plugins' table is built
 * here from each plugin's own <plugin>_params.def (the lines that plugin expands into its
 * getters), plus the string keys plugins read directly with br_lite_param_str() (a test,
 * tests/unit/params, keeps that list complete). The check walks environ for NCCL_* and
 * BRAID_* names: each must be a core or plugin parameter, and its value must parse.
 * Single-threaded.
 */
#include <stdlib.h>
#include <string.h>

#include "info.h"
#include "param.h"

extern char **environ;

#define BR_LITE_PARAM(getter, key, def, doc) {key, #def, 1, PLUGIN, doc},
#define NETIB_STR_PARAM(getter, key, doc) {key, "", 0, PLUGIN, doc},
#define NETOFI_STR_PARAM(getter, key, doc) {key, "", 0, PLUGIN, doc},
static const info_plugin_param_t plugin_params[] = {
#define PLUGIN "net-socket"
#include "net-socket/netsock_params.def"
    {"NCCL_SOCKET_IFNAME", "", 0, PLUGIN,
     "interfaces the socket plugin uses: prefix list, ^ excludes, = exact match"},
    {"NCCL_SOCKET_FAMILY", "", 0, PLUGIN, "AF_INET or AF_INET6: only interfaces of that family"},
#undef PLUGIN
#define PLUGIN "net-ib"
#include "net-ib/netib_params.def"
#undef PLUGIN
#define PLUGIN "net-ofi"
#include "net-ofi/netofi_params.def"
#undef PLUGIN
#define PLUGIN "tuner-default"
    {"NCCL_TUNER_CONFIG_FILE", "", 0, PLUGIN,
     "the tuner's rules (default: nccl_tuner.conf in the current directory, if present)"},
#undef PLUGIN
#define PLUGIN "profiler"
#include "profiler/prof_params.def"
    {"BRAID_PROFILER_DIR", "", 0, PLUGIN,
     "directory of the trace files, created at init when missing (default: the current "
     "directory)"},
#undef PLUGIN
};
#undef BR_LITE_PARAM
#undef NETIB_STR_PARAM
#undef NETOFI_STR_PARAM

#define NPLUGIN_PARAMS ((int)(sizeof(plugin_params) / sizeof(plugin_params[0])))

const info_plugin_param_t *info_plugin_params(int *count_p)
{
    *count_p = NPLUGIN_PARAMS;
    return plugin_params;
}

/* The environment's value of key, or NULL (environ is read directly: the core's table
 * is the only reader of the environment through getenv). */
static const char *env_value(const char *key)
{
    size_t n = strlen(key);

    for (char **e = environ; e != NULL && *e != NULL; e++) {
        if (strncmp(*e, key, n) == 0 && (*e)[n] == '=') {
            return *e + n + 1;
        }
    }
    return NULL;
}

void info_print_plugin_params(FILE *out, int markdown, int defaults)
{
    if (markdown) {
        fputs("\n## Plugin parameters\n\n"
              "Read by Braid's plugins from the environment only (a plugin does not read "
              "the configuration files).\n\n"
              "| Variable | Plugin | Default | Description |\n|---|---|---|---|\n",
              out);
    } else {
        fprintf(out, "\nPlugin parameters (environment only):\n%-28s  %-13s  %-10s  %s\n", "KEY",
                "PLUGIN", "VALUE", "DOC");
    }
    for (int i = 0; i < NPLUGIN_PARAMS; i++) {
        const info_plugin_param_t *p = &plugin_params[i];
        const char *v = defaults ? NULL : env_value(p->key);
        if (markdown) {
            fprintf(out, "| `%s` | %s | %s%s%s | %s |\n", p->key, p->plugin, p->def[0] ? "`" : "",
                    p->def[0] ? p->def : "(unset)", p->def[0] ? "`" : "", p->doc);
        } else {
            fprintf(out, "%-28s  %-13s  %-10s  %s\n", p->key, p->plugin,
                    v != NULL ? v : (p->def[0] ? p->def : "-"), p->doc);
        }
    }
}

/* Edit distance with adjacent transpositions (optimal string alignment), capped: the
 * names compared are environment keys, well under 64 characters. */
static int distance(const char *a, const char *b)
{
    int la = (int)strlen(a), lb = (int)strlen(b);
    static int d[64][64];

    if (la >= 64 || lb >= 64) {
        return 99;
    }
    for (int i = 0; i <= la; i++) {
        for (int j = 0; j <= lb; j++) {
            if (i == 0 || j == 0) {
                d[i][j] = i + j;
                continue;
            }
            int cost = a[i - 1] != b[j - 1];
            int best = d[i - 1][j - 1] + cost;
            best = d[i - 1][j] + 1 < best ? d[i - 1][j] + 1 : best;
            best = d[i][j - 1] + 1 < best ? d[i][j - 1] + 1 : best;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best) {
                best = d[i - 2][j - 2] + 1;
            }
            d[i][j] = best;
        }
    }
    return d[la][lb];
}

/* The part after NCCL_ or BRAID_. */
static const char *suffix(const char *key)
{
    return strncmp(key, "NCCL_", 5) == 0 ? key + 5 : key + 6;
}

/* Calls fn(key, arg) for every known key; stops at the first non-zero return. */
static const char *known_find(int (*fn)(const char *key, const void *arg), const void *arg)
{
    int n;
    const br_param_row_t *rows = br_param_table(&n);

    for (int i = 0; i < n; i++) {
        if (fn(rows[i].key, arg)) {
            return rows[i].key;
        }
    }
    for (int i = 0; i < NPLUGIN_PARAMS; i++) {
        if (fn(plugin_params[i].key, arg)) {
            return plugin_params[i].key;
        }
    }
    return NULL;
}

static int same_key(const char *key, const void *arg)
{
    return strcmp(key, arg) == 0;
}

/* A misspelling: within 1 edit of a short name, 2 of a longer one, or the right name
 * under the other prefix (BRAID_BUFFSIZE for NCCL_BUFFSIZE). */
static int near_key(const char *key, const void *arg)
{
    const char *name = arg;
    int limit = strlen(key) >= 12 ? 2 : 1;

    return distance(key, name) <= limit || strcmp(suffix(key), suffix(name)) == 0;
}

/* Values the log level takes (core/util/util_log.c); any other silences the log. */
static int debug_level_ok(const char *v)
{
    static const char *const levels[] = {"VERSION", "WARN", "INFO", "ABORT", "TRACE"};
    for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
        if (strcasecmp(v, levels[i]) == 0) {
            return 1;
        }
    }
    return 0;
}

static int check_values(FILE *out)
{
    int n, found = 0;
    int64_t v;
    const br_param_row_t *rows = br_param_table(&n);

    for (int i = 0; i < n; i++) {
        const br_param_row_t *r = &rows[i];
        if (r->text == NULL || strcmp(r->source, "default") == 0) {
            continue;
        }
        if (br_param_parse(r->type, r->text, &v) != 0) {
            fprintf(out, "%s=%s (from %s): invalid %s value; the default %s is used\n", r->key,
                    r->text, r->source, r->type == BR_PTYPE_BOOL ? "0/1" : "numeric",
                    r->def[0] ? r->def : "(unset)");
            found++;
        } else if (strcmp(r->key, "NCCL_DEBUG") == 0 && r->text[0] != '\0' &&
                   !debug_level_ok(r->text)) {
            fprintf(out,
                    "%s=%s (from %s): not a log level (VERSION, WARN, INFO, ABORT, TRACE); "
                    "nothing is logged\n",
                    r->key, r->text, r->source);
            found++;
        }
    }
    for (int i = 0; i < NPLUGIN_PARAMS; i++) {
        const info_plugin_param_t *p = &plugin_params[i];
        const char *val = env_value(p->key);
        /* The plugins parse integers as sizes do: base 0, K/M/G suffixes, sign allowed. */
        if (p->is_int && val != NULL && br_param_parse(BR_PTYPE_SIZE, val, &v) != 0) {
            fprintf(out, "%s=%s: invalid numeric value for the %s plugin; the default %s is used\n",
                    p->key, val, p->plugin, p->def);
            found++;
        }
    }
    return found;
}

int info_check_env(FILE *out)
{
    int found = check_values(out);

    for (char **e = environ; e != NULL && *e != NULL; e++) {
        const char *eq = strchr(*e, '=');
        char name[128];
        if (eq == NULL || (strncmp(*e, "NCCL_", 5) != 0 && strncmp(*e, "BRAID_", 6) != 0) ||
            (size_t)(eq - *e) >= sizeof(name)) {
            continue;
        }
        memcpy(name, *e, (size_t)(eq - *e));
        name[eq - *e] = '\0';
        /* Variables of Braid's own tests and of the braid_torch build. */
        if (strncmp(name, "BRAID_TEST_", 11) == 0 || strcmp(name, "BRAID_LIB_DIR") == 0 ||
            strcmp(name, "BRAID_INCLUDE_DIR") == 0 || known_find(same_key, name) != NULL) {
            continue;
        }
        const char *near = known_find(near_key, name);
        if (near != NULL) {
            fprintf(out, "%s: unknown, ignored: did you mean %s?\n", name, near);
        } else {
            fprintf(out,
                    "%s: unknown to Braid, ignored (an NCCL variable Braid does not use, "
                    "or a typo)\n",
                    name);
        }
        found++;
    }
    return found;
}
