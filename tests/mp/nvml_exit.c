/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A fake NVML for check_mp_topo (loaded through BRAID_NVML_LIBRARY): loading it ends the
 * process, so the rank that detects its host's topology dies in the middle of detection,
 * as a crash there would.
 */
#include <unistd.h>

__attribute__((constructor)) static void die_on_load(void)
{
    _exit(42);
}
