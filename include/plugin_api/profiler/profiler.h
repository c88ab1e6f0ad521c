/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Every profiler plugin ABI version Braid knows: event-type bits, the event-state enum
 * and the net-callback constants (profiler_common.h), the per-version descriptor and
 * table layouts (profiler_v4.h .. profiler_v6.h), and the unversioned names of the
 * newest version. Note the symbol names: "ncclProfiler_vN", without "Plugin".
 */
#ifndef BRAID_PLUGIN_API_PROFILER_H_
#define BRAID_PLUGIN_API_PROFILER_H_

#include "profiler_common.h"
#include "profiler_v4.h"
#include "profiler_v5.h"
#include "profiler_v6.h"
#include "profiler_v7.h"

typedef ncclProfiler_v7_t ncclProfiler_t;
typedef ncclProfilerEventDescr_v7_t ncclProfilerEventDescr_t;
typedef ncclProfilerEventStateArgs_v7_t ncclProfilerEventStateArgs_t;

/* Every event type of v5 (0xfff), of v6 (0x7fff) and of v7 (0xffff). */
#define NCCL_PROFILER_EVENT_MASK_V5 0xfff
#define NCCL_PROFILER_EVENT_MASK_V6 0x7fff
#define NCCL_PROFILER_EVENT_MASK_V7 0xffff

/* Symbol name of the newest profiler table. */
#define NCCL_PROFILER_PLUGIN_SYMBOL "ncclProfiler_v7"

#endif /* BRAID_PLUGIN_API_PROFILER_H_ */
