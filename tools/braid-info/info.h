/* SPDX-License-Identifier: Apache-2.0 */
/*
 * braid-info's parts beyond the core parameter table: the plugins' parameters
 * (info_env.c, from each plugin's <plugin>_params.def), the check of the environment
 * for unknown, misspelt or invalid NCCL_* / BRAID_* variables (info_env.c), and what
 * plugins a communicator would load (info_plugins.c).
 */
#ifndef BRAID_INFO_H_
#define BRAID_INFO_H_

#include <stdio.h>

/* One parameter a plugin reads from the environment. */
typedef struct {
    const char *key;
    const char *def; /* default as text; "" for strings without one */
    int is_int;      /* parsed as an integer (K, M, G suffixes allowed) */
    const char *plugin;
    const char *doc;
} info_plugin_param_t;

/* Every parameter of Braid's plugins, and their number in *count_p. */
const info_plugin_param_t *info_plugin_params(int *count_p);

/* Prints the plugins' parameters, with their current values, as text or as Markdown. */
void info_print_plugin_params(FILE *out, int markdown, int defaults);

/* Checks every NCCL_* and BRAID_* variable of the environment against the core's and
 * the plugins' tables: unknown names (with the nearest known name when it looks like a
 * misspelling) and values that do not parse. Prints one line per finding; returns their
 * number. */
int info_check_env(FILE *out);

/* Prints which env, net, tuner and profiler plugins a communicator created now would
 * load and why, as the core's own log says: creates a one-rank communicator with the
 * log at INFO, captured in a temporary file. Returns 0, or 1 when that failed. */
int info_print_plugins(FILE *out);

/* Checks the exported tables of a plugin library (any vendor's): each a data object of
 * its version's exact size, with a name and an init; says which version Braid loads.
 * Returns 0 when all is well, 1 otherwise. */
int info_check_plugin(FILE *out, const char *path);

#endif /* BRAID_INFO_H_ */
