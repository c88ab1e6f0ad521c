/* SPDX-License-Identifier: Apache-2.0 */
/* The emulated CUDA driver's own header (tests/cuda-emu): what fake_cuda.c (devices,
 * contexts, events, the stream calls), fake_cuda_mem.c (device and host memory, IPC),
 * fake_cuda_launch.c (modules, kernel launches), fake_cuda_stream.c (the timeline: streams,
 * hardware queues, kernels, the context's synchronisation, late landings) and
 * fake_cuda_capture.c (stream capture and graphs) share. Everything here is hidden in
 * libcuda.so.1 but the EXPORT entry points. */
#ifndef FAKE_CUDA_INT_H_
#define FAKE_CUDA_INT_H_

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "dev_direct.h"
#include "dev_prims.h"

typedef int CUresult;
#define OK 0
#define ERR_INVALID_VALUE 1
#define ERR_INVALID_CONTEXT 201
#define ERR_NOT_FOUND 500
#define ERR_NOT_READY 600
#define ERR_CAPTURE_UNSUPPORTED 900
#define ERR_INVALID_DEVICE 101
#define ERR_INVALID_IMAGE 200
#define ERR_PEER_ACCESS_UNSUPPORTED 217
#define ERR_INVALID_HANDLE 400
#define ERR_LAUNCH_OUT_OF_RESOURCES 701
#define ERR_PEER_ACCESS_ALREADY_ENABLED 704
#define ERR_HOST_MEMORY_ALREADY_REGISTERED 712
#define ERR_HOST_MEMORY_NOT_REGISTERED 713
#define ERR_COOPERATIVE_LAUNCH_TOO_LARGE 720
#define ERR_NOT_SUPPORTED 801

#define EXPORT __attribute__((visibility("default")))

/* The entry points are the driver's ABI, declared by cuda.h, which an emulation built
 * without the toolkit does not include: no prototypes to check them against here. */
#pragma GCC diagnostic ignored "-Wmissing-prototypes"

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int dev;            /* the device of the context it was made in */
    uint64_t recorded;  /* records enqueued */
    uint64_t completed; /* records executed */
    int captured;       /* last recorded inside a capture */
} event_t;

/* ---- stream operations ---- */

typedef enum {
    OP_RECORD,
    OP_WAIT_EVENT,
    OP_WAIT_VALUE,
    OP_WRITE_VALUE,
    OP_REDUCE,
    OP_COPY,
    OP_SET,
    OP_KERNEL,
    OP_LAND,      /* a synchronous cuMemcpy / cuMemsetD8 landing later (legacy stream) */
    OP_WAIT_LEGACY /* a blocking stream's implicit wait for the legacy stream's earlier work */
} op_kind_t;

typedef struct op {
    op_kind_t kind;
    event_t *ev;
    uint64_t gen;
    volatile void *addr;
    uint64_t value;
    int wide; /* 64-bit value operation */
    br_dev_reduce_t reduce;
    void *dst;
    const void *src;
    size_t n;
    unsigned char byte;
    br_dev_launch_t launch;
    unsigned nblocks;
    int cooperative;    /* OP_KERNEL: every block resident at once, or none */
    int direct;         /* OP_KERNEL: the direct kernel (br_dev_direct_t in `direct_args`) */
    br_dev_direct_t direct_args;
    uint64_t qseq;      /* its place in its stream's hardware queue */
    void *land_tmp;     /* OP_LAND: the bytes to land (NULL: a memset of `byte`) */
    int land_slot;      /* OP_LAND: its record in the pending landings */
    struct op *next;
} op_t;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    op_t *head, *tail;
    int busy, stop, capturing;
    int capture_mode; /* of the capture begun on this stream */
    pthread_t worker;
    int id;           /* creation order, for messages */
    int dev;          /* the device of the context it was made in */
    int hwq;          /* the hardware queue it is multiplexed onto */
    int blocking;     /* made without CU_STREAM_NON_BLOCKING: ordered after the legacy stream */
    int legacy;       /* the legacy default stream */
    uint64_t pushed, completed; /* operations given to it, and run */
    uint64_t head_since_ns;     /* when its current operation began */
    int in_turn;      /* its current operation waits for its turn in the hardware queue */
} stream_t;

/* A device holds SMs x 2 resident blocks (8 SMs). */
#define DEVICE_BLOCKS (8 * 2)

/* fake_cuda.c: the device of the calling thread's context (0 without one); waiting for an
 * event's record number gen to complete. */
int ctx_device(void);
void event_wait_gen(event_t *ev, uint64_t gen);
CUresult cuEventRecord(void *e, void *h);
/* fake_cuda.c: the report of a misuse that a real driver would answer with an error Braid
 * ignores, or with a fault of the context: the process aborts. And whether the environment
 * variable `key` is set to a number other than 0 (the emulation's switches). */
__attribute__((noreturn, format(printf, 1, 2))) void misuse(const char *fmt, ...);
int env_on(const char *key);

/* fake_cuda_mem.c: may the device reach [p, p + n) (device memory, or host memory mapped
 * for it)? Is p inside device memory (allocated here or opened from an IPC handle)? Whose
 * (the device's ordinal, -1: not device memory)? */
int device_reaches(uintptr_t p, size_t n);
int is_device_memory(uintptr_t p);
int memory_device(uintptr_t p);

/* fake_cuda_stream.c: the stream of a handle (NULL: the legacy default stream), a new
 * stream (blocking: ordered after the legacy stream) and its end (drained first), a new
 * operation, and giving one to a stream (to the capture while the stream captures). */
stream_t *stream_of(void *h);
stream_t *stream_new(int blocking, int legacy);
void stream_destroy(stream_t *s);
op_t *op_new(op_kind_t k);
void push(void *h, op_t *o);
/* fake_cuda_stream.c: every stream leaves the capture (it ended). */
void streams_end_capture(void);
/* fake_cuda_stream.c: what a call that synchronises the context does (waits for every
 * stream, reports a hang); a synchronous copy (src) or memset (byte) of n bytes at dst that
 * lands later on the legacy stream. */
void ctx_sync(const char *call);
void land_later(const char *call, uintptr_t dst, const void *src, unsigned char byte, size_t n);

/* fake_cuda_direct.cc: thread tid of nthr of block b of nb of the direct kernel, vector
 * paths included, as nvcc builds it. */
void fake_direct_run(const br_dev_direct_t *D, int b, int nb, int tid, int nthr);

/* fake_cuda_capture.c: does a capture forbid this thread "potentially unsafe" calls such
 * as allocations? And the capture's next operation, in the order given. */
int capture_forbids(void);
void capture_append(op_t *o);

#endif
