/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Compiled, never run, as C99, C11 and C++ under -Wall -Wextra -Werror -pedantic:
 * braid.h (Braid's extensions) must be usable wherever nccl.h is, and declare
 * braidDumpState and its pbraid twin with the documented signature.
 */
#include <braid.h>

typedef ncclResult_t (*link_dump_fn)(const char *);

int link_braid_header_use(void);

int link_braid_header_use(void)
{
    link_dump_fn f = braidDumpState, pf = pbraidDumpState;
    return f != 0 && pf != 0;
}
