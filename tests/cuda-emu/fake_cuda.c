/* SPDX-License-Identifier: Apache-2.0 */
/*
 * An emulated CUDA driver for tests: libcuda.so.1 with the entry points Braid's CUDA
 * executor loads, running on the CPU, so that the executor's whole path (pointer routing,
 * clique setup, deposits and units, stream waits, launches, abort, the watchdog) and the
 * kernels' interpreter (core/device, compiled for the host) run end to end in CI, where
 * there is no GPU. It is a test double, never installed or shipped.
 *
 * What it emulates: "device memory" is host memory it allocated and remembers (so pointer
 * attributes tell it apart), a shared mapping of a memfd, so that IPC handles let other
 * processes map it as CUDA IPC does, contexts are per-thread tags, each stream is a worker thread
 * that runs its operations in order (event records and waits, 32-bit value waits and
 * writes, 64-bit ones too, copies, memsets, kernel launches), and a kernel launch runs every
 * block of the grid as CPU threads (2 a block, BRAID_FAKE_CUDA_BLOCK_THREADS) as room on the
 * device allows. This file holds the devices, contexts, events and the stream calls'
 * entry points; memory, host memory and IPC are in fake_cuda_mem.c, modules and kernel
 * launches in fake_cuda_launch.c, the timeline (streams, queues, kernels, the context's
 * synchronisation, late landings) in fake_cuda_stream.c, stream capture and graphs in
 * fake_cuda_capture.c.
 * BRAID_FAKE_CUDA_EXCLUSIVE=<file> makes the GPU run one process's streams at a time, a
 * stream keeping it while it has work, waits included (a lock on that file): the model of
 * a GPU shared by processes without MPS where a stream waiting for another process holds
 * the GPU that process needs, which is what two processes on an H100 looked like.
 * Each device has PCI bus id 0000:e<d>:00.0; BRAID_FAKE_CUDA_MPS=1 says MPS shares it.
 * Devices: BRAID_FAKE_CUDA_DEVICES (1); each has 8 SMs of 2 resident blocks.
 *
 * CUDA's documented blocking rules, so that what would hang or race on a GPU fails here,
 * within a bounded time and saying why:
 * - calls that synchronise the context (cuMemFree, cuMemFreeHost, cuModuleLoadData,
 *   cuModuleGetFunction under lazy loading, the synchronous cuMemcpy, cuCtxSynchronize)
 *   wait until every stream of the context has drained; one that cannot, because a stream
 *   waits for something that does not come, is reported as a hang after
 *   BRAID_FAKE_CUDA_HANG_TIMEOUT seconds (15) without progress, and the process aborts;
 * - streams are multiplexed onto CUDA_DEVICE_MAX_CONNECTIONS hardware queues per device
 *   (8; round robin in creation order): an operation starts only once every operation
 *   given earlier to its queue has started, so a stream waiting on a value or an event
 *   holds up the other streams of its queue;
 * - the synchronous cuMemcpy to device memory and cuMemsetD8 return before their bytes
 *   land: they land on the legacy stream BRAID_FAKE_CUDA_DMA_US microseconds (20000) later,
 *   ordered before later work of the legacy stream and of blocking streams only. Until
 *   then the bytes cannot be touched (their pages are inaccessible), and a kernel or copy
 *   of a non-blocking stream that touches them is reported as a race;
 * - the device holds SMs x 2 blocks at once: a kernel's blocks beyond what is free wait
 *   until blocks of other kernels finish (a cooperative launch waits for room for all of
 *   its blocks at once, and fails when they can never fit); a plain launch's blocks are
 *   dispatched BRAID_FAKE_CUDA_DISPATCH_US (1000) apart, so two launches interleave, and
 *   a kernel partly resident whose next block waits as long as a hang takes is reported.
 *
 * And it is no more lenient than a real driver about arguments (docs/cuda.md, "The driver
 * API, call by call"): host memory is pinned memory of cuMemHostAlloc or a range of
 * cuMemHostRegister (registering a range twice, or freeing or unregistering anything else,
 * is an error), cuMemHostGetDevicePointer needs the DEVICEMAP flag and flags 0, stream
 * memory operations need an aligned address that the device can reach (device memory, or
 * host memory mapped for it) and 64-bit ones the device attribute (BRAID_FAKE_CUDA_NO_MEMOPS64=1
 * turns it off, as on a GPU without them), cooperative launches the cooperative-launch
 * attribute (BRAID_FAKE_CUDA_NO_COOPERATIVE=1), a launch at most the kernels' 512 threads
 * per block (__launch_bounds__) and 48 KiB of shared memory, an event is recorded only on a
 * stream of its own context, cuIpcOpenMemHandle takes only CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS,
 * cuCtxEnablePeerAccess refuses its own context and a second time, cuDeviceGetAttribute
 * answers only the attributes it knows, and a kernel given an address the device cannot
 * reach, or a primary context released more often than retained, is reported (MISUSE) and
 * the process aborts, as the error a GPU would return there is one Braid ignores.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_cuda_int.h"

/* ---- devices and contexts ---- */

static int ndevices(void)
{
    const char *e = getenv("BRAID_FAKE_CUDA_DEVICES");
    int n = e != NULL ? atoi(e) : 1;
    return n < 0 ? 0 : n > 8 ? 8 : n;
}

static _Thread_local int cur_ctx; /* ordinal + 1; 0: none */

int ctx_device(void)
{
    return cur_ctx > 0 ? cur_ctx - 1 : 0;
}

void misuse(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "fake_cuda: MISUSE: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    fflush(stderr);
    abort();
}

int env_on(const char *key)
{
    const char *e = getenv(key);
    return e != NULL && atoi(e) != 0;
}

EXPORT CUresult cuInit(unsigned flags)
{
    (void)flags;
    return OK;
}

EXPORT CUresult cuDriverGetVersion(int *v)
{
    *v = 13000;
    return OK;
}

EXPORT CUresult cuGetErrorString(CUresult e, const char **s)
{
    switch (e) {
    case OK: *s = "no error"; break;
    case ERR_INVALID_VALUE: *s = "invalid argument"; break;
    case ERR_INVALID_CONTEXT: *s = "invalid device context"; break;
    case ERR_NOT_READY: *s = "device not ready"; break;
    case ERR_CAPTURE_UNSUPPORTED: *s = "operation not permitted when stream is capturing"; break;
    case ERR_INVALID_DEVICE: *s = "invalid device ordinal"; break;
    case ERR_INVALID_IMAGE: *s = "device kernel image is invalid"; break;
    case ERR_PEER_ACCESS_UNSUPPORTED:
        *s = "peer access is not supported between these two devices";
        break;
    case ERR_INVALID_HANDLE: *s = "invalid resource handle"; break;
    case ERR_LAUNCH_OUT_OF_RESOURCES: *s = "too many resources requested for launch"; break;
    case ERR_PEER_ACCESS_ALREADY_ENABLED: *s = "peer access is already enabled"; break;
    case ERR_HOST_MEMORY_ALREADY_REGISTERED:
        *s = "part or all of the requested memory range is already mapped";
        break;
    case ERR_HOST_MEMORY_NOT_REGISTERED:
        *s = "pointer does not correspond to a registered memory region";
        break;
    case ERR_COOPERATIVE_LAUNCH_TOO_LARGE: *s = "too many blocks in cooperative launch"; break;
    case ERR_NOT_SUPPORTED: *s = "operation not supported"; break;
    default: *s = "emulated driver error"; break;
    }
    return OK;
}

EXPORT CUresult cuDeviceGetCount(int *n)
{
    *n = ndevices();
    return OK;
}

EXPORT CUresult cuDeviceGet(int *d, int ordinal)
{
    if (ordinal < 0 || ordinal >= ndevices()) {
        return 101; /* CUDA_ERROR_INVALID_DEVICE */
    }
    *d = ordinal;
    return OK;
}

/* The attributes a caller may ask, as an H100 answers them but for its size (8 SMs);
 * anything else is refused, so a new query needs its answer written here first. */
EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, int d)
{
    if (d < 0 || d >= ndevices()) {
        return ERR_INVALID_DEVICE;
    }
    switch (attr) {
    case 1: *v = 1024; break;   /* MAX_THREADS_PER_BLOCK */
    case 8: *v = 49152; break;  /* MAX_SHARED_MEMORY_PER_BLOCK (without opting in) */
    case 16: *v = 8; break;     /* MULTIPROCESSOR_COUNT */
    case 19: *v = 1; break;     /* CAN_MAP_HOST_MEMORY */
    case 39: *v = 2048; break;  /* MAX_THREADS_PER_MULTIPROCESSOR */
    case 41: *v = 1; break;     /* UNIFIED_ADDRESSING */
    case 75: *v = 9; break;     /* COMPUTE_CAPABILITY_MAJOR */
    case 76: *v = 0; break;     /* COMPUTE_CAPABILITY_MINOR */
    case 91: *v = 1; break;     /* CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM */
    case 92: *v = 1; break;     /* CAN_USE_STREAM_MEM_OPS_V1 */
    case 93:                    /* CAN_USE_64_BIT_STREAM_MEM_OPS_V1 */
    case 122: *v = !env_on("BRAID_FAKE_CUDA_NO_MEMOPS64"); break; /* ..._64_BIT_STREAM_MEM_OPS */
    case 95: *v = !env_on("BRAID_FAKE_CUDA_NO_COOPERATIVE"); break; /* COOPERATIVE_LAUNCH */
    case 97: *v = 232448; break; /* MAX_SHARED_MEMORY_PER_BLOCK_OPTIN */
    case 133: *v = env_on("BRAID_FAKE_CUDA_MPS"); break; /* MPS_ENABLED */
    default:
        fprintf(stderr, "fake_cuda: cuDeviceGetAttribute(%d): an attribute the emulated "
                "driver does not answer (add it to fake_cuda.c)\n", attr);
        return ERR_INVALID_VALUE;
    }
    return OK;
}

EXPORT CUresult cuDeviceGetPCIBusId(char *busid, int len, int d)
{
    snprintf(busid, (size_t)len, "0000:e%x:00.0", d & 0xf);
    return OK;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, int d)
{
    snprintf(name, (size_t)len, "Braid emulated GPU %d (CPU threads)", d);
    return OK;
}

EXPORT CUresult cuDeviceCanAccessPeer(int *can, int d, int peer)
{
    (void)d;
    (void)peer;
    *can = 1;
    return OK;
}

/* Retains of each device's primary context, less its releases. */
static int primary_refs[8];

EXPORT CUresult cuDevicePrimaryCtxRetain(void **ctx, int d)
{
    if (d < 0 || d >= ndevices()) {
        return ERR_INVALID_DEVICE;
    }
    __atomic_add_fetch(&primary_refs[d], 1, __ATOMIC_RELAXED);
    *ctx = (void *)(uintptr_t)(d + 1);
    return OK;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(int d)
{
    if (d < 0 || d >= ndevices()) {
        return ERR_INVALID_DEVICE;
    }
    if (__atomic_sub_fetch(&primary_refs[d], 1, __ATOMIC_RELAXED) < 0) {
        misuse("cuDevicePrimaryCtxRelease(%d): released more often than retained (a real "
               "driver destroys the context under whoever still uses it)", d);
    }
    return OK;
}

EXPORT CUresult cuCtxGetCurrent(void **ctx)
{
    *ctx = cur_ctx ? (void *)(uintptr_t)cur_ctx : NULL;
    return OK;
}

EXPORT CUresult cuCtxSetCurrent(void *ctx)
{
    cur_ctx = (int)(uintptr_t)ctx;
    return OK;
}

EXPORT CUresult cuCtxGetDevice(int *d)
{
    if (cur_ctx == 0) {
        return ERR_INVALID_CONTEXT;
    }
    *d = cur_ctx - 1;
    return OK;
}

/* Peer access enabled: bit p of peer_on[d], from the context of device d to p's. */
static unsigned peer_on[8];

EXPORT CUresult cuCtxEnablePeerAccess(void *peer, unsigned flags)
{
    int p = (int)(uintptr_t)peer - 1;
    if (flags != 0) {
        return ERR_INVALID_VALUE;
    }
    if (cur_ctx == 0 || p < 0 || p >= ndevices() || p == cur_ctx - 1) {
        return ERR_INVALID_CONTEXT;
    }
    unsigned bit = 1u << p;
    if (__atomic_fetch_or(&peer_on[cur_ctx - 1], bit, __ATOMIC_RELAXED) & bit) {
        return ERR_PEER_ACCESS_ALREADY_ENABLED;
    }
    return OK;
}

/* ---- events ---- */

EXPORT CUresult cuEventCreate(void **e, unsigned flags)
{
    /* BLOCKING_SYNC 1, DISABLE_TIMING 2, INTERPROCESS 4 (which needs DISABLE_TIMING) */
    if ((flags & ~7u) != 0 || ((flags & 4u) != 0 && (flags & 2u) == 0)) {
        return ERR_INVALID_VALUE;
    }
    event_t *ev = calloc(1, sizeof(*ev));
    ev->dev = ctx_device();
    pthread_mutex_init(&ev->mu, NULL);
    pthread_cond_init(&ev->cv, NULL);
    *e = ev;
    return OK;
}

EXPORT CUresult cuEventDestroy_v2(void *e)
{
    event_t *ev = e;
    pthread_mutex_destroy(&ev->mu);
    pthread_cond_destroy(&ev->cv);
    free(ev);
    return OK;
}

void event_wait_gen(event_t *ev, uint64_t gen)
{
    pthread_mutex_lock(&ev->mu);
    while (ev->completed < gen) {
        pthread_cond_wait(&ev->cv, &ev->mu);
    }
    pthread_mutex_unlock(&ev->mu);
}

EXPORT CUresult cuEventSynchronize(void *e)
{
    event_t *ev = e;
    pthread_mutex_lock(&ev->mu);
    uint64_t gen = ev->recorded;
    pthread_mutex_unlock(&ev->mu);
    event_wait_gen(ev, gen);
    return OK;
}

EXPORT CUresult cuEventQuery(void *e)
{
    event_t *ev = e;
    pthread_mutex_lock(&ev->mu);
    int done = ev->completed >= ev->recorded;
    pthread_mutex_unlock(&ev->mu);
    return done ? OK : ERR_NOT_READY;
}

/* ---- streams, their memory operations and copies (the timeline: fake_cuda_stream.c) ---- */

EXPORT CUresult cuStreamCreate(void **s, unsigned flags)
{
    if ((flags & ~1u) != 0) { /* CU_STREAM_DEFAULT or CU_STREAM_NON_BLOCKING */
        return ERR_INVALID_VALUE;
    }
    *s = stream_new((flags & 1u) == 0, 0);
    return OK;
}

EXPORT CUresult cuStreamSynchronize(void *h)
{
    stream_t *s = stream_of(h);
    pthread_mutex_lock(&s->mu);
    while (s->head != NULL) {
        pthread_cond_wait(&s->cv, &s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return OK;
}

EXPORT CUresult cuStreamDestroy_v2(void *h)
{
    stream_t *s = h;
    if ((uintptr_t)h <= 2) { /* the default streams are not destroyed */
        return ERR_INVALID_HANDLE;
    }
    cuStreamSynchronize(h);
    stream_destroy(s);
    return OK;
}

EXPORT CUresult cuStreamQuery(void *h)
{
    stream_t *s = stream_of(h);
    pthread_mutex_lock(&s->mu);
    int idle = s->head == NULL;
    pthread_mutex_unlock(&s->mu);
    return idle ? OK : ERR_NOT_READY;
}

EXPORT CUresult cuEventRecord(void *e, void *h)
{
    event_t *ev = e;
    int sdev = h == NULL || h == (void *)1 ? ctx_device() : stream_of(h)->dev;
    if (sdev != ev->dev) {
        fprintf(stderr, "fake_cuda: cuEventRecord: an event of device %d's context on a stream of "
                "device %d's (CUDA_ERROR_INVALID_HANDLE)\n", ev->dev, sdev);
        return ERR_INVALID_HANDLE;
    }
    op_t *o = op_new(OP_RECORD);
    pthread_mutex_lock(&ev->mu);
    o->gen = ++ev->recorded;
    ev->captured = stream_of(h)->capturing;
    pthread_mutex_unlock(&ev->mu);
    o->ev = ev;
    push(h, o);
    return OK;
}

EXPORT CUresult cuStreamWaitEvent(void *h, void *e, unsigned flags)
{
    event_t *ev = e;
    if ((flags & ~1u) != 0) { /* CU_EVENT_WAIT_DEFAULT or CU_EVENT_WAIT_EXTERNAL */
        return ERR_INVALID_VALUE;
    }
    op_t *o = op_new(OP_WAIT_EVENT);
    pthread_mutex_lock(&ev->mu);
    o->gen = ev->recorded; /* the record most recently enqueued, as CUDA */
    if (ev->captured) {
        stream_of(h)->capturing = 1; /* the stream joins the capture */
    }
    pthread_mutex_unlock(&ev->mu);
    o->ev = ev;
    push(h, o);
    return OK;
}

static CUresult value_op(void *h, op_kind_t kind, unsigned long long addr, uint64_t value,
                         int wide, unsigned flags)
{
    if (kind == OP_WAIT_VALUE && flags != 0) { /* only GEQ is emulated */
        return ERR_INVALID_VALUE;
    }
    if (kind == OP_WRITE_VALUE && (flags & ~1u) != 0) { /* NO_MEMORY_BARRIER at most */
        return ERR_INVALID_VALUE;
    }
    if (wide && env_on("BRAID_FAKE_CUDA_NO_MEMOPS64")) {
        return ERR_NOT_SUPPORTED; /* CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS is 0 */
    }
    size_t width = wide ? 8 : 4;
    if (addr % width != 0 || !device_reaches((uintptr_t)addr, width)) {
        fprintf(stderr, "fake_cuda: cuStream%sValue%d at 0x%llx: %s\n",
                kind == OP_WAIT_VALUE ? "Wait" : "Write", wide ? 64 : 32, addr,
                addr % width != 0 ? "not aligned to its width"
                                  : "neither device memory nor host memory mapped for the device "
                                    "(cuMemHostAlloc or cuMemHostRegister with DEVICEMAP, through "
                                    "cuMemHostGetDevicePointer)");
        return ERR_INVALID_VALUE;
    }
    op_t *o = op_new(kind);
    o->addr = (volatile void *)(uintptr_t)addr;
    o->value = value;
    o->wide = wide;
    push(h, o);
    return OK;
}

EXPORT CUresult cuStreamWaitValue32_v2(void *h, unsigned long long addr, uint32_t value,
                                       unsigned flags)
{
    return value_op(h, OP_WAIT_VALUE, addr, value, 0, flags);
}

EXPORT CUresult cuStreamWriteValue32_v2(void *h, unsigned long long addr, uint32_t value,
                                        unsigned flags)
{
    return value_op(h, OP_WRITE_VALUE, addr, value, 0, flags);
}

EXPORT CUresult cuStreamWaitValue64_v2(void *h, unsigned long long addr, uint64_t value,
                                       unsigned flags)
{
    return value_op(h, OP_WAIT_VALUE, addr, value, 1, flags);
}

EXPORT CUresult cuStreamWriteValue64_v2(void *h, unsigned long long addr, uint64_t value,
                                        unsigned flags)
{
    return value_op(h, OP_WRITE_VALUE, addr, value, 1, flags);
}

EXPORT CUresult cuMemcpyHtoDAsync_v2(unsigned long long dst, const void *src, size_t n, void *h)
{
    op_t *o = op_new(OP_COPY);
    o->dst = (void *)(uintptr_t)dst;
    o->src = src;
    o->n = n;
    push(h, o);
    return OK;
}

EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, unsigned long long src, size_t n, void *h)
{
    return cuMemcpyHtoDAsync_v2((unsigned long long)(uintptr_t)dst, (const void *)(uintptr_t)src,
                                n, h);
}

EXPORT CUresult cuMemcpyAsync(unsigned long long dst, unsigned long long src, size_t n, void *h)
{
    return cuMemcpyHtoDAsync_v2(dst, (const void *)(uintptr_t)src, n, h);
}

EXPORT CUresult cuMemsetD8Async(unsigned long long p, unsigned char v, size_t n, void *h)
{
    op_t *o = op_new(OP_SET);
    o->dst = (void *)(uintptr_t)p;
    o->byte = v;
    o->n = n;
    push(h, o);
    return OK;
}
