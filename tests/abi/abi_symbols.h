/* SPDX-License-Identifier: Apache-2.0 */
/* What our built plugins must export, and the two checks of abi_symbols.c. */
#ifndef BR_ABI_SYMBOLS_H_
#define BR_ABI_SYMBOLS_H_

#include <stddef.h>

#define ABI_MAX_SYMBOLS 4

typedef struct {
    const char *file;                     /* library file name under <build>/lib */
    const char *symbols[ABI_MAX_SYMBOLS]; /* exactly these are exported (NULL-ended) */
    const char *name;                     /* the tables' name string, or NULL: any */
    const char *functions[2]; /* Braid's own entries it exports as well (functions, NULL-ended):
                               * the socket plugin's braidNetTlsConfigure */
} abi_plugin_t;

extern const abi_plugin_t abi_plugins[];
extern const int abi_nplugins;

/* The ELF dynamic symbol table of path holds exactly plugin->symbols, each a data
 * object of its table's size. Returns the number of problems, described in err. */
int abi_check_exports(const abi_plugin_t *plugin, const char *path, char *err, size_t errlen);

/* dlopen(path, RTLD_NOW | RTLD_LOCAL) succeeds and every expected table resolves and
 * carries a name (plugin->name when set). Returns the number of problems. */
int abi_check_dlsym(const abi_plugin_t *plugin, const char *path, char *err, size_t errlen);

#endif /* BR_ABI_SYMBOLS_H_ */
