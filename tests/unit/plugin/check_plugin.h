/* SPDX-License-Identifier: Apache-2.0 */
/* Shared by the files of the "plugin" Check suite. */
#ifndef BR_CHECK_PLUGIN_H_
#define BR_CHECK_PLUGIN_H_

#include <check.h>

/* Directory of the test plugins (argv[1]). */
extern const char *mods_dir;

/* Add the tuner and profiler test cases (check_plugin_tp.c) to the suite. */
void br_plugin_tp_tcases(Suite *s);

#endif /* BR_CHECK_PLUGIN_H_ */
