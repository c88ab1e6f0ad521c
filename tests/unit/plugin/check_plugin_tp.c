/* SPDX-License-Identifier: Apache-2.0 */
/* Tuner and profiler loader tests (filled in with those loaders). */
#include "check_plugin.h"

void br_plugin_tp_tcases(Suite *s)
{
    (void)s;
}
