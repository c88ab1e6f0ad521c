/* SPDX-License-Identifier: Apache-2.0 */
/*
 * braid-info --check-plugin FILE: the binary side of any plugin library, Braid's or a
 * vendor's, before anything is called. Opens it as the core does (dlopen RTLD_NOW |
 * RTLD_LOCAL), then for every versioned table symbol of the five plugin kinds it finds:
 * the symbol must be a data object of exactly the size of that version's struct (the
 * ELF symbol's size against sizeof, from the frozen headers), with a name and an init
 * (the first two members of every table). It reports the other NULL members (optional
 * ones are allowed) and which version Braid's loader would take. Behaviour is the
 * conformance kits' business. Single-threaded; init is never called.
 */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdint.h>
#include <string.h>

#include "info.h"
#include "plugin_api/collnet/collnet.h"
#include "plugin_api/env/env.h"
#include "plugin_api/net/net.h"
#include "plugin_api/profiler/profiler.h"
#include "plugin_api/tuner/tuner.h"

/* One table symbol: its kind, symbol, size and whether Braid's loader takes it. */
typedef struct {
    const char *kind;
    const char *symbol;
    size_t size;
    int loaded; /* within the window Braid loads (docs/plugins.md) */
} abi_table_t;

#define T(kind, sym, type, loaded)                                                                 \
    {                                                                                              \
        kind, sym, sizeof(type), loaded                                                            \
    }
/* Newest first within each kind, as the loader probes them. */
static const abi_table_t tables[] = {
    T("net", "ncclNetPlugin_v12", ncclNet_v12_t, 1),
    T("net", "ncclNetPlugin_v11", ncclNet_v11_t, 1),
    T("net", "ncclNetPlugin_v10", ncclNet_v10_t, 1),
    T("net", "ncclNetPlugin_v9", ncclNet_v9_t, 1),
    T("net", "ncclNetPlugin_v8", ncclNet_v8_t, 1),
    T("net", "ncclNetPlugin_v7", ncclNet_v7_t, 0),
    T("net", "ncclNetPlugin_v6", ncclNet_v6_t, 0),
    T("collnet", "ncclCollNetPlugin_v12", ncclCollNet_v12_t, 1),
    T("collnet", "ncclCollNetPlugin_v11", ncclCollNet_v11_t, 1),
    T("collnet", "ncclCollNetPlugin_v10", ncclCollNet_v10_t, 1),
    T("collnet", "ncclCollNetPlugin_v9", ncclCollNet_v9_t, 1),
    T("collnet", "ncclCollNetPlugin_v8", ncclCollNet_v8_t, 1),
    T("tuner", "ncclTunerPlugin_v7", ncclTuner_v7_t, 1),
    T("tuner", "ncclTunerPlugin_v6", ncclTuner_v6_t, 1),
    T("tuner", "ncclTunerPlugin_v5", ncclTuner_v5_t, 1),
    T("tuner", "ncclTunerPlugin_v4", ncclTuner_v4_t, 1),
    T("tuner", "ncclTunerPlugin_v3", ncclTuner_v3_t, 1),
    T("tuner", "ncclTunerPlugin_v2", ncclTuner_v2_t, 1),
    T("profiler", "ncclProfiler_v7", ncclProfiler_v7_t, 1),
    T("profiler", "ncclProfiler_v6", ncclProfiler_v6_t, 1),
    T("profiler", "ncclProfiler_v5", ncclProfiler_v5_t, 1),
    T("profiler", "ncclProfiler_v4", ncclProfiler_v4_t, 1),
    T("env", "ncclEnvPlugin_v2", ncclEnvPlugin_v2_t, 1),
    T("env", "ncclEnvPlugin_v1", ncclEnvPlugin_v1_t, 1),
};
#undef T
#define NTABLES (sizeof(tables) / sizeof(tables[0]))

/* Checks one exported table; returns the number of errors found. */
static int check_table(FILE *out, void *dl, const abi_table_t *t, int *errors_p)
{
    void *sym = dlsym(dl, t->symbol);
    const ElfW(Sym) *es = NULL;
    Dl_info info;
    int bad = 0;

    if (sym == NULL) {
        return 0;
    }
    if (dladdr1(sym, &info, (void **)&es, RTLD_DL_SYMENT) == 0 || es == NULL) {
        fprintf(out, "  %-22s no symbol entry found (cannot check its size)\n", t->symbol);
        (*errors_p)++;
        return 1;
    }
    if (ELF64_ST_TYPE(es->st_info) != STT_OBJECT) {
        fprintf(out, "  %-22s is not a data object (a function?): FAIL\n", t->symbol);
        (*errors_p)++;
        return 1;
    }
    if (es->st_size != t->size) {
        fprintf(out, "  %-22s is %zu bytes; this version's struct is %zu: FAIL\n", t->symbol,
                (size_t)es->st_size, t->size);
        (*errors_p)++;
        return 1;
    }
    /* Every table is pointers only: name, init, then the functions. */
    void *const *slot = sym;
    size_t nslots = t->size / sizeof(void *), nulls = 0;
    const char *name = slot[0];
    if (name == NULL || slot[1] == NULL) {
        fprintf(out, "  %-22s %zu bytes, but its %s is NULL: FAIL\n", t->symbol, t->size,
                name == NULL ? "name" : "init");
        (*errors_p)++;
        bad = 1;
    }
    for (size_t i = 2; i < nslots; i++) {
        nulls += slot[i] == NULL;
    }
    if (!bad) {
        fprintf(out, "  %-22s %zu bytes, name \"%s\", %zu of %zu functions NULL%s%s\n", t->symbol,
                t->size, name, nulls, nslots - 1,
                nulls ? " (allowed where optional; the conformance kit checks use)" : "",
                t->loaded ? "" : "; too old for Braid");
    }
    return bad;
}

int info_check_plugin(FILE *out, const char *path)
{
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    int errors = 0, found_any = 0;

    if (dl == NULL) {
        fprintf(out, "%s: does not load: %s\n", path, dlerror());
        return 1;
    }
    fprintf(out, "%s: loads with dlopen(RTLD_NOW | RTLD_LOCAL)\n", path);
    for (size_t i = 0; i < NTABLES;) {
        const char *kind = tables[i].kind;
        const char *used = NULL;
        int found = 0;
        for (; i < NTABLES && strcmp(tables[i].kind, kind) == 0; i++) {
            if (dlsym(dl, tables[i].symbol) == NULL) {
                continue;
            }
            if (!found) {
                fprintf(out, "%s:\n", kind);
            }
            found = 1;
            if (check_table(out, dl, &tables[i], &errors) == 0 && used == NULL &&
                tables[i].loaded) {
                used = tables[i].symbol;
            }
        }
        if (found) {
            fprintf(out, "  Braid loads: %s\n", used != NULL ? used : "none of these (FAIL)");
            errors += used == NULL;
            found_any = 1;
        }
    }
    if (!found_any) {
        fprintf(out, "no plugin table of any kind (ncclNetPlugin_vN, ncclCollNetPlugin_vN, "
                     "ncclTunerPlugin_vN, ncclProfiler_vN, ncclEnvPlugin_vN): FAIL\n");
        errors++;
    }
    /* Not dlclose'd: a plugin's destructors could run and print after our report. */
    fprintf(out, "%s\n", errors ? "FAIL" : "OK");
    return errors != 0;
}
