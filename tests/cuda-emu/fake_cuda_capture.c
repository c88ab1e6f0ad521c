/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The emulated CUDA driver's stream capture and graphs (tests/cuda-emu, fake_cuda*.c have the
 * rest). A capture records what capturing streams are given (streams join a capture by
 * waiting on an event recorded in it), one capture at a time, and a graph launch replays
 * it in order on one stream, which keeps every dependency the capture had. As the driver
 * does, allocations fail while a capture forbids them (a capture this thread began, or a
 * global-mode one of any thread), unless cuThreadExchangeStreamCaptureMode made this
 * thread relaxed.
 */
#include <stdlib.h>

#include "fake_cuda_int.h"

/* The stream-capture rules for "potentially unsafe" calls such as allocations. */
static __thread int thread_capture_mode; /* 0 global (the default), 1 thread-local, 2 relaxed */
static __thread int local_captures;      /* non-relaxed captures this thread began */
static int global_captures;              /* global-mode captures of any thread */

int capture_forbids(void)
{
    return thread_capture_mode != 2 &&
           (local_captures > 0 ||
            (thread_capture_mode == 0 && __atomic_load_n(&global_captures, __ATOMIC_SEQ_CST) > 0));
}

EXPORT CUresult cuThreadExchangeStreamCaptureMode(int *mode)
{
    int old = thread_capture_mode;
    thread_capture_mode = *mode;
    *mode = old;
    return OK;
}

/* The capture in progress (one at a time): its operations in the order they were given. */
static pthread_mutex_t cap_mu = PTHREAD_MUTEX_INITIALIZER;
static op_t *cap_head, *cap_tail;

typedef struct {
    op_t *ops; /* a list, replayed in order */
} graph_t;

void capture_append(op_t *o)
{
    pthread_mutex_lock(&cap_mu);
    o->next = NULL;
    if (cap_tail != NULL) {
        cap_tail->next = o;
    } else {
        cap_head = o;
    }
    cap_tail = o;
    pthread_mutex_unlock(&cap_mu);
}

EXPORT CUresult cuStreamBeginCapture_v2(void *h, int mode)
{
    stream_of(h)->capture_mode = mode;
    if (mode != 2) {
        local_captures++;
    }
    if (mode == 0) {
        __atomic_add_fetch(&global_captures, 1, __ATOMIC_SEQ_CST);
    }
    pthread_mutex_lock(&cap_mu);
    cap_head = cap_tail = NULL;
    pthread_mutex_unlock(&cap_mu);
    stream_of(h)->capturing = 1;
    return OK;
}

EXPORT CUresult cuStreamEndCapture(void *h, void **graph)
{
    graph_t *g = calloc(1, sizeof(*g));
    if (stream_of(h)->capture_mode != 2 && local_captures > 0) {
        local_captures--;
    }
    if (stream_of(h)->capture_mode == 0) {
        __atomic_sub_fetch(&global_captures, 1, __ATOMIC_SEQ_CST);
    }
    stream_of(h)->capturing = 0;
    streams_end_capture();
    pthread_mutex_lock(&cap_mu);
    g->ops = cap_head;
    cap_head = cap_tail = NULL;
    pthread_mutex_unlock(&cap_mu);
    *graph = g;
    return OK;
}

static void ops_free(op_t *o)
{
    while (o != NULL) {
        op_t *next = o->next;
        free(o);
        o = next;
    }
}

/* An executable graph: its own copy of the graph's operations. */
EXPORT CUresult cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags)
{
    graph_t *g = graph, *e = calloc(1, sizeof(*e));
    op_t **tail = &e->ops;
    (void)flags;
    for (const op_t *c = g->ops; c != NULL; c = c->next) {
        op_t *o = op_new(c->kind);
        *o = *c;
        o->next = NULL;
        *tail = o;
        tail = &o->next;
    }
    *exec = e;
    return OK;
}

/* Replay: the captured operations in capture order on one stream. Waits on events recorded
 * in the capture are met by that order; records are made again for outside observers. */
EXPORT CUresult cuGraphLaunch(void *exec, void *h)
{
    graph_t *g = exec;
    for (op_t *c = g->ops; c != NULL; c = c->next) {
        if (c->kind == OP_WAIT_EVENT) {
            continue;
        }
        if (c->kind == OP_RECORD) {
            cuEventRecord(c->ev, h);
            continue;
        }
        op_t *o = op_new(c->kind);
        *o = *c;
        o->next = NULL;
        push(h, o);
    }
    return OK;
}

EXPORT CUresult cuGraphDestroy(void *graph)
{
    graph_t *g = graph;
    ops_free(g->ops);
    free(g);
    return OK;
}

EXPORT CUresult cuGraphExecDestroy(void *exec)
{
    return cuGraphDestroy(exec);
}

EXPORT CUresult cuStreamIsCapturing(void *h, int *status)
{
    *status = stream_of(h)->capturing;
    return OK;
}
