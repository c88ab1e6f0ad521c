/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The profiler conformance kit's stand-in for a core: it loads a profiler plugin
 * (ncclProfiler_v7, _v6 or _v5), owns the process-wide activation mask, and emits a synthetic
 * but well-formed event sequence per plugin-abi.md 3.6/3.7 for several ranks at once:
 * API events on one thread per rank, proxy/net/kernel events on another, honouring the
 * mask the plugin set (an event is emitted when its bit or a descendant's bit is set)
 * and NULL handles (no stop or state for them; children get a NULL parent).
 */
#ifndef PROF_KIT_H_
#define PROF_KIT_H_

#include <stddef.h>
#include <stdint.h>

#include "plugin_api/profiler/profiler.h"

typedef struct {
    void *lib;
    int version; /* 6 or 5 */
    const char *name;
    const void *table;
} prof_kit_t;

/* What a run did, for comparison with what the plugin wrote. */
typedef struct {
    long calls;        /* plugin calls made */
    long failed_calls; /* calls that did not return ncclSuccess */
    long sync_events;  /* non-NULL handles of GroupApi/CollApi/P2pApi/KernelLaunch/ProxyCtrl */
    long async_events; /* non-NULL handles of every other type */
    long dropped;      /* NULL handles returned for emitted events */
} prof_kit_stats_t;

/* dlopen (RTLD_NOW | RTLD_LOCAL) and find ncclProfiler_v<version> (0: the newest of v7, v6, v5). */
int prof_kit_open(const char *path, int version, prof_kit_t *kit, char *err, size_t errlen);
void prof_kit_close(prof_kit_t *kit);

/* The process-wide mask the kit hands to every init (the plugin writes it). */
extern int prof_kit_mask;

/* One communicator of nranks ranks, run as 2 * nranks threads doing `iters` groups
 * (each: an AllReduce and a Send with their proxy ops, steps, net and kernel events).
 * comm_hash names the communicator. Fills *stats; returns 0, or -1 with err set when a
 * call failed or init failed. */
int prof_kit_run(prof_kit_t *kit, uint64_t comm_hash, int nranks, int iters,
                 prof_kit_stats_t *stats, char *err, size_t errlen);

/* One context, one event whose parentObj is garbage from another process (PXN): the
 * plugin must not touch it. */
int prof_kit_foreign_parent(prof_kit_t *kit, char *err, size_t errlen);

#endif /* PROF_KIT_H_ */
