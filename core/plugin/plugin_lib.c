/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Finding and opening plugin libraries, for every plugin kind: selector value -> file
 * names (plugin-abi.md 5.2), dlopen(RTLD_NOW | RTLD_LOCAL), and the one process-wide
 * table of loaded libraries with their reference counts. The table is the only global
 * state of the module; a mutex guards it. Also the directory of Braid's own plugins.
 */
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "check.h"
#include "param.h"
#include "plugin_int.h"
#include "util.h"

static pthread_mutex_t lib_lock = PTHREAD_MUTEX_INITIALIZER;
static br_plugin_lib_t *lib_list;

void br_plugin_lib_lock(void)
{
    pthread_mutex_lock(&lib_lock);
}

void br_plugin_lib_unlock(void)
{
    pthread_mutex_unlock(&lib_lock);
}

void br_plugin_report_add(br_plugin_report_t *rep, const char *what, const char *fmt, ...)
{
    char why[320];
    va_list ap;
    int n;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    if (rep->len >= sizeof(rep->text) - 1) {
        return;
    }
    n = snprintf(rep->text + rep->len, sizeof(rep->text) - rep->len, "%s%s (%s)",
                 rep->count > 0 ? ", " : "", what, why);
    if (n > 0) {
        rep->len += (size_t)n;
        if (rep->len >= sizeof(rep->text)) {
            /* Truncated: mark it so a reader knows the list goes on. */
            rep->len = sizeof(rep->text) - 1;
            memcpy(rep->text + sizeof(rep->text) - 4, "...", 4);
        }
    }
    rep->count++;
}

void br_plugin_init_reason(const char *before, char *out, size_t len)
{
    const char *now = br_log_last_error();

    /* The plugin's WARN went through br_log_plugin, which records it like the core's. */
    if (now[0] != '\0' && strcmp(now, before) != 0) {
        snprintf(out, len, ": %s", now);
    } else if (len > 0) {
        out[0] = '\0';
    }
}

const char *br_plugin_result_str(ncclResult_t res)
{
    switch (res) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    default: return "unknown error code";
    }
}

/* Resolved file of a handle, for logs: the link map's name, else what was asked for. */
static void lib_path(void *dl, const char *name, char *out, size_t len)
{
    struct link_map *lm = NULL;

    if (name == NULL) {
        snprintf(out, len, "(main program)");
        return;
    }
    if (dlinfo(dl, RTLD_DI_LINKMAP, &lm) == 0 && lm != NULL && lm->l_name != NULL &&
        lm->l_name[0] != '\0') {
        snprintf(out, len, "%s", lm->l_name);
        return;
    }
    snprintf(out, len, "%s", name);
}

ncclResult_t br_plugin_lib_open(const char *name, int pin, br_plugin_lib_t **lib_p,
                                int *not_found_p, char *why, size_t why_len)
{
    br_plugin_lib_t *lib;
    const char *err;
    void *dl;

    *not_found_p = 0;
    dl = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (dl == NULL) {
        err = dlerror();
        if (err == NULL) {
            err = "unknown dlopen error";
        }
        *not_found_p = strstr(err, "No such file") != NULL;
        /* dlerror repeats the name first; the report already names it. */
        if (name != NULL && strncmp(err, name, strlen(name)) == 0 &&
            strncmp(err + strlen(name), ": ", 2) == 0) {
            err += strlen(name) + 2;
        }
        snprintf(why, why_len, "%s: %s", *not_found_p ? "not found" : "failed to load", err);
        return ncclSystemError;
    }
    pthread_mutex_lock(&lib_lock);
    for (lib = lib_list; lib != NULL; lib = lib->next) {
        if (lib->dl == dl) {
            lib->refs++;
            lib->pinned |= pin;
            pthread_mutex_unlock(&lib_lock);
            /* The entry holds its own dlopen reference; drop the one just taken. */
            dlclose(dl);
            *lib_p = lib;
            return ncclSuccess;
        }
    }
    lib = calloc(1, sizeof(*lib));
    if (lib == NULL) {
        pthread_mutex_unlock(&lib_lock);
        dlclose(dl);
        snprintf(why, why_len, "out of memory");
        return ncclSystemError;
    }
    lib->dl = dl;
    lib->refs = 1;
    lib->pinned = pin;
    lib_path(dl, name, lib->path, sizeof(lib->path));
    lib->next = lib_list;
    lib_list = lib;
    pthread_mutex_unlock(&lib_lock);
    *lib_p = lib;
    return ncclSuccess;
}

void br_plugin_lib_ref(br_plugin_lib_t *lib)
{
    pthread_mutex_lock(&lib_lock);
    lib->refs++;
    pthread_mutex_unlock(&lib_lock);
}

void br_plugin_lib_close(br_plugin_lib_t *lib)
{
    br_plugin_lib_t **pp;
    int last;

    if (lib == NULL) {
        return;
    }
    pthread_mutex_lock(&lib_lock);
    last = --lib->refs == 0;
    if (last) {
        for (pp = &lib_list; *pp != NULL; pp = &(*pp)->next) {
            if (*pp == lib) {
                *pp = lib->next;
                break;
            }
        }
    }
    pthread_mutex_unlock(&lib_lock);
    if (!last) {
        return;
    }
    if (!lib->pinned) {
        dlclose(lib->dl);
    }
    free(lib);
}

void *br_plugin_lib_sym(br_plugin_lib_t *lib, const char *symbol)
{
    return dlsym(lib->dl, symbol);
}

/* A bare name: no '/', so the loader's search path applies. */
static int is_bare(const char *value)
{
    return strchr(value, '/') == NULL;
}

/* "lib*.so": a file name the user spelled out, never given the kind prefix. */
static int is_lib_name(const char *value)
{
    size_t n = strlen(value);
    return strncmp(value, "lib", 3) == 0 && n >= 6 && strcmp(value + n - 3, ".so") == 0;
}

ncclResult_t br_plugin_lib_resolve(const char *prefix, const char *value, int pin,
                                   br_plugin_report_t *rep, br_plugin_lib_t **lib_p,
                                   int *not_found_p)
{
    char names[4][512];
    char why[320];
    const char *dir = br_plugin_dir();
    int n = 0, not_found, all_not_found = 1;

    if (value != NULL && strcasecmp(value, "STATIC_PLUGIN") == 0) {
        if (br_plugin_lib_open(NULL, pin, lib_p, &not_found, why, sizeof(why)) == ncclSuccess) {
            return ncclSuccess;
        }
        br_plugin_report_add(rep, "STATIC_PLUGIN", "%s", why);
        *not_found_p = 0;
        return ncclSystemError;
    }
    if (value == NULL || value[0] == '\0') {
        snprintf(names[n++], sizeof(names[0]), "%s.so", prefix);
    } else {
        int prefixed = is_bare(value) && !is_lib_name(value);
        snprintf(names[n++], sizeof(names[0]), "%s", value);
        if (prefixed) {
            snprintf(names[n++], sizeof(names[0]), "%s-%.400s.so", prefix, value);
        }
        /* Braid's own plugins live beside libbraid, which need not be on the loader's
         * search path: a bare value also finds them there. */
        if (is_bare(value) && dir != NULL) {
            snprintf(names[n++], sizeof(names[0]), "%.250s/%.250s", dir, value);
            if (prefixed) {
                snprintf(names[n++], sizeof(names[0]), "%.200s/%s-%.200s.so", dir, prefix, value);
            }
        }
    }
    for (int i = 0; i < n; i++) {
        if (br_plugin_lib_open(names[i], pin, lib_p, &not_found, why, sizeof(why)) == ncclSuccess) {
            return ncclSuccess;
        }
        all_not_found &= not_found;
        br_plugin_report_add(rep, names[i], "%s", why);
    }
    *not_found_p = all_not_found;
    return ncclSystemError;
}

/* The first of kind's symbols lib exports, or -1. */
static int find_symbol(const br_plugin_kind_t *kind, br_plugin_lib_t *lib)
{
    for (int i = 0; i < kind->nsymbols; i++) {
        if (br_plugin_lib_sym(lib, kind->symbols[i]) != NULL) {
            return i;
        }
    }
    return -1;
}

ncclResult_t br_plugin_find(const br_plugin_kind_t *kind, const char *value,
                            br_plugin_lib_t *net_lib, br_plugin_lib_t **lib_p, int *which_p)
{
    br_plugin_report_t rep = {.len = 0, .count = 0};
    br_plugin_lib_t *lib = NULL;
    int named = value != NULL && value[0] != '\0';
    int not_found = 0, broken = 0, which;

    *lib_p = NULL;
    if (named && strcasecmp(value, "none") == 0) {
        BR_INFO(kind->subsys, "%s: %s=none, no plugin", kind->tag, kind->env);
        return ncclSuccess;
    }
    if (br_plugin_lib_resolve(kind->prefix, value, 0, &rep, &lib, &not_found) == ncclSuccess) {
        which = find_symbol(kind, lib);
        if (which >= 0) {
            *lib_p = lib;
            *which_p = which;
            return ncclSuccess;
        }
        br_plugin_report_add(&rep, lib->path, "no %s .. %s symbol", kind->symbols[0],
                             kind->symbols[kind->nsymbols - 1]);
        br_plugin_lib_close(lib);
    } else {
        broken = !not_found;
    }
    if (named) {
        BR_WARN(kind->subsys, "%s=%s: tried %s; no fallback because the plugin was named",
                kind->env, value, rep.text);
        return ncclInvalidUsage;
    }
    if (net_lib != NULL) {
        which = find_symbol(kind, net_lib);
        if (which >= 0) {
            br_plugin_lib_ref(net_lib);
            *lib_p = net_lib;
            *which_p = which;
            return ncclSuccess;
        }
        br_plugin_report_add(&rep, net_lib->path, "net plugin library: no %s symbol",
                             kind->symbols[0]);
    }
    if (broken) {
        /* The default library exists but does not load: worth a warning. */
        BR_WARN(kind->subsys, "%s: no plugin used: tried %s", kind->tag, rep.text);
    } else {
        BR_INFO(kind->subsys, "%s: no plugin found: tried %s", kind->tag, rep.text);
    }
    return ncclSuccess;
}

/* ---- The directory of Braid's own plugins ---- */

static pthread_once_t dir_once = PTHREAD_ONCE_INIT;
static char plugin_dir[512];

static void dir_load(void)
{
    const char *env = BR_PARAM_STR(PLUGIN_PATH);
    Dl_info info;

    if (env != NULL) {
        snprintf(plugin_dir, sizeof(plugin_dir), "%.511s", env);
        return;
    }
    /* The library (or program) this code was linked into: libbraid.so / libnccl.so.2 in
     * <build>/lib, where the plugins are built too. */
    if (dladdr((void *)(uintptr_t)&dir_load, &info) != 0 && info.dli_fname != NULL &&
        info.dli_fname[0] != '\0') {
        char tmp[PATH_MAX];
        if (realpath(info.dli_fname, tmp) == NULL) {
            snprintf(tmp, sizeof(tmp), "%s", info.dli_fname);
        }
        snprintf(plugin_dir, sizeof(plugin_dir), "%.511s", dirname(tmp));
        return;
    }
    snprintf(plugin_dir, sizeof(plugin_dir), ".");
}

const char *br_plugin_dir(void)
{
    pthread_once(&dir_once, dir_load);
    return plugin_dir;
}
