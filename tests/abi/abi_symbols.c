/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Exported symbols of our built plugins. Each library is read as an ELF file and its
 * dynamic symbol table (what `nm -D --defined-only` prints) must hold exactly the
 * expected plugin tables: data objects of the right size, nothing else. Then the
 * library is dlopen'ed as NCCL does (RTLD_NOW | RTLD_LOCAL) and each table is looked
 * up by name and must carry a name string.
 */
#include <dlfcn.h>
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "abi_symbols.h"

/* sizeof of each table type, by symbol prefix (plugin-abi.md 1.5, 2.2, 3.2). */
static const struct {
    const char *symbol;
    size_t size;
} table_sizes[] = {
    {"ncclNetPlugin_v12", 176}, {"ncclNetPlugin_v11", 176}, {"ncclNetPlugin_v10", 160},
    {"ncclTunerPlugin_v7", 40}, {"ncclTunerPlugin_v6", 40}, {"ncclTunerPlugin_v5", 32},
    {"ncclProfiler_v7", 48},    {"ncclProfiler_v6", 48},    {"ncclProfiler_v5", 48},
};

const abi_plugin_t abi_plugins[] = {
    {"libnccl-net-socket.so",
     {"ncclNetPlugin_v12", "ncclNetPlugin_v11", "ncclNetPlugin_v10"},
     NULL,
     {"braidNetTlsConfigure"}},
    {"libnccl-net-ofi.so",
     {"ncclNetPlugin_v12", "ncclNetPlugin_v11", "ncclNetPlugin_v10"},
     NULL,
     {NULL}},
    {"libnccl-tuner-default.so",
     {"ncclTunerPlugin_v7", "ncclTunerPlugin_v6", "ncclTunerPlugin_v5"},
     "Braid default",
     {NULL}},
    {"libnccl-profiler-braid.so",
     {"ncclProfiler_v7", "ncclProfiler_v6", "ncclProfiler_v5"},
     "Braid trace",
     {NULL}},
};
const int abi_nplugins = (int)(sizeof(abi_plugins) / sizeof(abi_plugins[0]));

static size_t expected_size(const char *symbol)
{
    for (size_t i = 0; i < sizeof(table_sizes) / sizeof(table_sizes[0]); i++) {
        if (strcmp(table_sizes[i].symbol, symbol) == 0) {
            return table_sizes[i].size;
        }
    }
    return 0;
}

static int is_expected(const abi_plugin_t *plugin, const char *name)
{
    for (int i = 0; i < ABI_MAX_SYMBOLS && plugin->symbols[i] != NULL; i++) {
        if (strcmp(plugin->symbols[i], name) == 0) {
            return 1;
        }
    }
    return 0;
}

static char *read_file(const char *path, size_t *len_p)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long len;

    if (f == NULL) {
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0) {
        buf = malloc((size_t)len);
        if (buf != NULL && fread(buf, 1, (size_t)len, f) != (size_t)len) {
            free(buf);
            buf = NULL;
        }
        *len_p = (size_t)len;
    }
    fclose(f);
    return buf;
}

/* Walk the defined global/weak entries of .dynsym; report each unexpected one and each
 * expected one that is missing or of the wrong kind or size. Returns the problems. */
static int check_dynsym(const abi_plugin_t *plugin, const char *buf, size_t len, char *err,
                        size_t errlen)
{
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)buf;
    int problems = 0, found[ABI_MAX_SYMBOLS] = {0};
    size_t off = 0;

    if (len < sizeof(*eh) || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 ||
        eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_shoff == 0 ||
        eh->e_shoff + (size_t)eh->e_shnum * sizeof(Elf64_Shdr) > len) {
        snprintf(err, errlen, "not a 64-bit ELF file with section headers");
        return 1;
    }
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(buf + eh->e_shoff);
    for (int s = 0; s < eh->e_shnum; s++) {
        if (sh[s].sh_type != SHT_DYNSYM || sh[s].sh_link >= eh->e_shnum) {
            continue;
        }
        const Elf64_Sym *sym = (const Elf64_Sym *)(buf + sh[s].sh_offset);
        const char *strtab = buf + sh[sh[s].sh_link].sh_offset;
        size_t nsym = sh[s].sh_size / sizeof(Elf64_Sym);
        for (size_t i = 1; i < nsym; i++) {
            int bind = ELF64_ST_BIND(sym[i].st_info);
            const char *name = strtab + sym[i].st_name;
            if (sym[i].st_shndx == SHN_UNDEF || (bind != STB_GLOBAL && bind != STB_WEAK)) {
                continue;
            }
            int fn = 0;
            for (int k = 0; k < 2 && plugin->functions[k] != NULL; k++) {
                fn |= strcmp(plugin->functions[k], name) == 0;
            }
            if (fn) {
                if (ELF64_ST_TYPE(sym[i].st_info) != STT_FUNC) {
                    off += (size_t)snprintf(err + off, off < errlen ? errlen - off : 0,
                                            "'%s' is not a function; ", name);
                    problems++;
                }
                continue;
            }
            if (!is_expected(plugin, name)) {
                off += (size_t)snprintf(err + off, off < errlen ? errlen - off : 0,
                                        "unexpected export '%s'; ", name);
                problems++;
                continue;
            }
            for (int k = 0; k < ABI_MAX_SYMBOLS && plugin->symbols[k] != NULL; k++) {
                found[k] |= strcmp(plugin->symbols[k], name) == 0;
            }
            if (ELF64_ST_TYPE(sym[i].st_info) != STT_OBJECT ||
                sym[i].st_size != expected_size(name)) {
                off += (size_t)snprintf(err + off, off < errlen ? errlen - off : 0,
                                        "'%s' is not a %zu-byte data object (size %zu); ", name,
                                        expected_size(name), (size_t)sym[i].st_size);
                problems++;
            }
        }
    }
    for (int k = 0; k < ABI_MAX_SYMBOLS && plugin->symbols[k] != NULL; k++) {
        if (!found[k]) {
            off += (size_t)snprintf(err + off, off < errlen ? errlen - off : 0,
                                    "'%s' not exported; ", plugin->symbols[k]);
            problems++;
        }
    }
    return problems;
}

int abi_check_exports(const abi_plugin_t *plugin, const char *path, char *err, size_t errlen)
{
    size_t len = 0;
    char *buf = read_file(path, &len);
    int problems;

    err[0] = '\0';
    if (buf == NULL) {
        snprintf(err, errlen, "cannot read %s", path);
        return 1;
    }
    problems = check_dynsym(plugin, buf, len, err, errlen);
    free(buf);
    return problems;
}

int abi_check_dlsym(const abi_plugin_t *plugin, const char *path, char *err, size_t errlen)
{
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    int problems = 0;
    size_t off = 0;

    err[0] = '\0';
    if (lib == NULL) {
        snprintf(err, errlen, "dlopen(%s): %s", path, dlerror());
        return 1;
    }
    for (int k = 0; k < ABI_MAX_SYMBOLS && plugin->symbols[k] != NULL; k++) {
        /* Every plugin table starts with its name (slot 0). */
        const char *const *table = dlsym(lib, plugin->symbols[k]);
        if (table == NULL || table[0] == NULL || table[0][0] == '\0') {
            off += (size_t)snprintf(err + off, off < errlen ? errlen - off : 0, "dlsym(%s) %s; ",
                                    plugin->symbols[k], table == NULL ? "failed" : "has no name");
            problems++;
        } else if (plugin->name != NULL && strcmp(table[0], plugin->name) != 0) {
            off += (size_t)snprintf(err + off, off < errlen ? errlen - off : 0,
                                    "%s is named '%s', not '%s'; ", plugin->symbols[k], table[0],
                                    plugin->name);
            problems++;
        }
    }
    /* A name NCCL might probe that we do not export must not resolve. */
    if (dlsym(lib, "ncclNetPlugin_v1") != NULL || dlsym(lib, "ncclTunerPlugin_v1") != NULL) {
        off += (size_t)snprintf(err + off, off < errlen ? errlen - off : 0,
                                "an unsupported version resolves; ");
        problems++;
    }
    dlclose(lib);
    return problems;
}
