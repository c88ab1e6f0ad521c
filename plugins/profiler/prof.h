/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The trace profiler's internals. A context (one per communicator) owns a preallocated
 * pool of event records handed out by an atomic bump index, so startEvent never locks
 * or allocates; an event's handle is its record. Records live until finalize, which
 * writes them as one Chrome-trace JSON file per rank (prof_trace.c); a context still
 * live when its process exits is written then.
 */
#ifndef PROF_H_
#define PROF_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "plugin_api/profiler/profiler.h"

#define PROF_MAX_STATES 6 /* state changes kept per event; more are counted, not kept */
#define PROF_NAME_LEN 16

/* One state change of an event. */
typedef struct {
    uint64_t ts_ns;
    uint64_t arg; /* transSize, appendedProxyOps, pTimer, or a net payload's bytes */
    int state;    /* ncclProfilerEventState_t */
} prof_state_t;

typedef struct prof_ctx prof_ctx_t;

/* One event record; its address is the handle given to the core. */
typedef struct prof_event {
    prof_ctx_t *ctx;
    uint64_t type;                   /* one ncclProfile* bit */
    uint64_t start_ns;               /* CLOCK_MONOTONIC */
    uint64_t stop_ns;                /* 0 until stopped; written once, read at finalize */
    uint64_t seq;                    /* coll seqNumber, else inherited from the parent or counted */
    const struct prof_event *parent; /* our record of the parent, or NULL */
    int lane;                        /* thread lane of the starting thread */
    int channel;                     /* proxy/kernel events: channel id, else -1 */
    /* Descriptor fields, by type (copied: the descriptor is valid during start only). */
    char func[PROF_NAME_LEN];
    char dtype[PROF_NAME_LEN];
    char algo[PROF_NAME_LEN];
    char proto[PROF_NAME_LEN];
    size_t count;
    int peer;       /* p2p/proxyOp peer, or coll root */
    int nchannels;  /* coll/p2p nChannels, proxyOp nSteps */
    int nwarps;     /* coll nWarps, proxyOp chunkSize */
    int step;       /* proxyStep step, proxyOp isSend, groupApi depth */
    int flag;       /* graphCaptured, or the net payload's op */
    int64_t net_id; /* netPlugin id (the payload's byte count goes to count) */
    uint64_t tag;   /* API and task events: the call's user tag (v7; 0: none) */
    uint64_t ptimer; /* KernelCh, KernelPhase: the start's timer stamp from the core */
    int nstates;    /* incremented atomically; may exceed PROF_MAX_STATES */
    prof_state_t states[PROF_MAX_STATES];
} prof_event_t;

struct prof_ctx {
    uint64_t comm_hash;
    int rank, nranks, nnodes;
    int version; /* ABI version the core uses: 5, 6 or 7 */
    char comm_name[64];
    pid_t pid;
    prof_event_t *events; /* the pool */
    size_t capacity;
    size_t next;           /* atomic bump index into events */
    size_t dropped;        /* atomic: starts refused because the pool was full */
    uint64_t counters[16]; /* atomic per-type sequence counters (by bit index) */
    uint64_t clock_base_mono_ns;
    uint64_t clock_base_real_ns; /* CLOCK_REALTIME at the same instant, for the trace */
    char dir[512];
    struct prof_ctx *next_live; /* the list of live contexts, under prof_plugin.c's lock */
};

/* Monotonic time in ns. */
uint64_t prof_now_ns(void);

/* Event calls, with v6 descriptor semantics (v5 descriptors are copied into v6 ones, v7's
 * translated, their user tag passed as tag). */
ncclResult_t prof_start_event(prof_ctx_t *ctx, void **handle_p,
                              const ncclProfilerEventDescr_v6_t *d, uint64_t tag);
/* A v7 KernelPhase event: the phase's id in step, its name in func. */
ncclResult_t prof_start_phase(prof_ctx_t *ctx, void **handle_p,
                              const ncclProfilerEventDescr_v7_t *d);
ncclResult_t prof_stop_event(void *handle);
ncclResult_t prof_record_state(void *handle, int state, const ncclProfilerEventStateArgs_v6_t *a);

/* Name of an event type bit and of a state, for the trace. */
const char *prof_type_name(uint64_t type);
const char *prof_state_name(int state);

/* Write the context's events to <dir>/braid-trace-<hash>-r<rank>.json; the path written
 * goes to path (may be NULL). */
ncclResult_t prof_trace_write(prof_ctx_t *ctx, char *path, size_t pathlen);

#endif /* PROF_H_ */
