/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the in-memory test net plugin (testnet.c) saw, exported as the data symbol
 * "testnet_stats" so that check_plugin can tell what the loader's adapters handed it.
 */
#ifndef BR_TESTNET_H_
#define BR_TESTNET_H_

#include <stdint.h>

typedef struct {
    int init_calls;            /* plugin init calls (process-wide ones count once) */
    int finalize_calls;        /* v11+ finalize calls */
    int last_traffic_class;    /* from init's config (v11+) or connect's (v10) */
    uint64_t last_comm_id;     /* v11+ init's commId */
    long long last_isend_size; /* size as the plugin's isend received it */
    int isend_calls;
    void *last_irecv_hint; /* *request on entry to irecv */
    void *last_phandle;    /* isend's profiler handle (v10+) */
    int consumed_calls;    /* irecvConsumed calls */
} testnet_stats_t;

#endif /* BR_TESTNET_H_ */
