/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A profiler v7 plugin for check_api_232: it asks for the API and task events of
 * collectives and sends/receives, and counts their user tags, which the test reads back
 * through test_prof_tag_count (found with dlopen RTLD_NOLOAD + dlsym in the same process).
 */
#include <pthread.h>
#include <stdint.h>

#include "plugin_api/profiler/profiler.h"

#define EXPORT __attribute__((visibility("default")))
#define MAX_SEEN 256

static struct {
    uint64_t type, tag;
} seen[MAX_SEEN];
static int nseen;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int handle; /* every event's handle: the plugin keeps no per-event state */

/* How many events of `type` carried `tag`. */
EXPORT int test_prof_tag_count(uint64_t type, uint64_t tag);
int test_prof_tag_count(uint64_t type, uint64_t tag)
{
    int n = 0;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nseen; i++) {
        n += seen[i].type == type && seen[i].tag == tag;
    }
    pthread_mutex_unlock(&mu);
    return n;
}

static ncclResult_t tag_init(void **ctx, uint64_t comm_id, int *mask, const char *name, int nnodes,
                             int nranks, int rank, ncclDebugLogger_t log)
{
    (void)comm_id, (void)name, (void)nnodes, (void)nranks, (void)rank, (void)log;
    *mask = ncclProfileCollApi | ncclProfileColl | ncclProfileP2pApi | ncclProfileP2p;
    *ctx = &handle;
    return ncclSuccess;
}

static ncclResult_t tag_start(void *ctx, void **h, ncclProfilerEventDescr_v7_t *d)
{
    uint64_t tag = 0;
    (void)ctx;
    switch (d->type) {
    case ncclProfileCollApi: tag = d->collApi.userTag; break;
    case ncclProfileColl: tag = d->coll.userTag; break;
    case ncclProfileP2pApi: tag = d->p2pApi.userTag; break;
    case ncclProfileP2p: tag = d->p2p.userTag; break;
    default: break;
    }
    pthread_mutex_lock(&mu);
    if (nseen < MAX_SEEN) {
        seen[nseen].type = d->type;
        seen[nseen].tag = tag;
        nseen++;
    }
    pthread_mutex_unlock(&mu);
    *h = &handle;
    return ncclSuccess;
}

static ncclResult_t tag_stop(void *h)
{
    (void)h;
    return ncclSuccess;
}

static ncclResult_t tag_record(void *h, ncclProfilerEventState_v7_t s,
                               ncclProfilerEventStateArgs_v7_t *a)
{
    (void)h, (void)s, (void)a;
    return ncclSuccess;
}

static ncclResult_t tag_finalize(void *ctx)
{
    (void)ctx;
    return ncclSuccess;
}

EXPORT const ncclProfiler_v7_t ncclProfiler_v7 = {
    .name = "test tags",
    .init = tag_init,
    .startEvent = tag_start,
    .stopEvent = tag_stop,
    .recordEventState = tag_record,
    .finalize = tag_finalize,
};
