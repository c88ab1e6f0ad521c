/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the test tuner (testtuner.c) and test profiler (testprof.c) saw, exported as the
 * data symbols "testtuner_stats" and "testprof_stats".
 */
#ifndef BR_TESTTP_H_
#define BR_TESTTP_H_

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int init_calls, fini_calls, coll_calls;
    size_t nranks, nnodes;
    uint64_t comm_id; /* v5+ */
    int nvl[3];       /* v5+ NVL domain info */
    int last_func;
    size_t last_bytes;
    int last_collnet, last_nvls; /* v2's support flags */
    int num_algo, num_proto;     /* v3+ table shape */
    int last_reg_buff;           /* v4+ */
} testtuner_stats_t;

#define TESTPROF_MAX_EVENTS 16

typedef struct {
    int type;         /* descriptor type as the plugin saw it */
    void *parent;     /* parentObj */
    const char *func; /* coll.func / p2p.func */
    int peer;         /* p2p.peer */
    int step;         /* proxyStep.step */
    int64_t net_id;   /* netPlugin.id */
    void *net_data;   /* netPlugin.data */
} testprof_event_t;

typedef struct {
    int init_calls, fini_calls;
    uint64_t comm_hash;
    char comm_name[32];
    int nranks, rank, nnodes;
    int nevents;
    testprof_event_t events[TESTPROF_MAX_EVENTS];
    int nstops;
    int nstates;
    int last_state;
    size_t last_trans_size;
    void *last_net_data; /* args->netPlugin.data of the last state */
} testprof_stats_t;

#endif /* BR_TESTTP_H_ */
