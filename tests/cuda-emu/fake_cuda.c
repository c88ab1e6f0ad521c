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
 * device allows. The timeline (streams, queues, kernels, the context's synchronisation,
 * late landings) is in fake_cuda_stream.c; stream capture and graphs in
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
 */
/* memfd_create: _GNU_SOURCE comes from the build */
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_cuda_int.h"

/* ---- memory ---- */

typedef struct {
    uintptr_t base;
    size_t size;
    int ordinal;
    int fd;      /* the memfd behind it (other processes map it through IPC handles) */
    int opened;  /* mapped from another process's handle (cuIpcOpenMemHandle) */
} alloc_t;

static pthread_mutex_t mem_mu = PTHREAD_MUTEX_INITIALIZER;
static alloc_t *allocs;
static int nallocs, cap_allocs;

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

static const alloc_t *find_alloc(uintptr_t p)
{
    for (int i = 0; i < nallocs; i++) {
        if (p >= allocs[i].base && p < allocs[i].base + allocs[i].size) {
            return &allocs[i];
        }
    }
    return NULL;
}

static void alloc_add(uintptr_t base, size_t size, int ordinal, int fd, int opened)
{
    pthread_mutex_lock(&mem_mu);
    if (nallocs == cap_allocs) {
        cap_allocs = cap_allocs ? 2 * cap_allocs : 256;
        allocs = realloc(allocs, (size_t)cap_allocs * sizeof(*allocs));
    }
    allocs[nallocs++] = (alloc_t){base, size, ordinal, fd, opened};
    pthread_mutex_unlock(&mem_mu);
}

/* Remove the allocation at base (opened or not, as asked); 0 when there was one. */
static int alloc_remove(uintptr_t base, int opened, alloc_t *out)
{
    int found = -1;
    pthread_mutex_lock(&mem_mu);
    for (int i = 0; i < nallocs; i++) {
        if (allocs[i].base == base && allocs[i].opened == opened) {
            *out = allocs[i];
            allocs[i] = allocs[--nallocs];
            found = 0;
            break;
        }
    }
    pthread_mutex_unlock(&mem_mu);
    return found;
}

static int is_device_memory(uintptr_t p)
{
    pthread_mutex_lock(&mem_mu);
    int yes = find_alloc(p) != NULL;
    pthread_mutex_unlock(&mem_mu);
    return yes;
}

/* CUDA's blocking rules (defined with the streams, below). */

/* Device memory is a shared mapping of a memfd, so that another process can map it from
 * an IPC handle, as a GPU's memory is reached by other processes' contexts. */

EXPORT CUresult cuMemAlloc_v2(unsigned long long *p, size_t bytes)
{
    if (capture_forbids()) {
        return ERR_CAPTURE_UNSUPPORTED;
    }
    size_t size = bytes ? bytes : 1;
    int fd = memfd_create("fake-cuda", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
        if (fd >= 0) {
            close(fd);
        }
        return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
    }
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        close(fd);
        return 2;
    }
    memset(m, 0xee, bytes); /* like device memory: not zero */
    alloc_add((uintptr_t)m, size, cur_ctx > 0 ? cur_ctx - 1 : 0, fd, 0);
    *p = (unsigned long long)(uintptr_t)m;
    return OK;
}

EXPORT CUresult cuMemFree_v2(unsigned long long p)
{
    alloc_t a;
    ctx_sync("cuMemFree");
    if (alloc_remove((uintptr_t)p, 0, &a) != 0) {
        return ERR_INVALID_VALUE;
    }
    munmap((void *)a.base, a.size);
    close(a.fd);
    return OK;
}

/* An IPC handle: who has the memory, and which descriptor of theirs maps it. */
typedef struct {
    int32_t pid, fd;
    uint64_t size;
    int32_t ordinal;
    char pad[64 - 20];
} ipc_handle_t;

typedef struct {
    char reserved[64];
} CUipcMemHandle;

EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *h, unsigned long long p)
{
    ipc_handle_t ih;
    memset(&ih, 0, sizeof(ih));
    pthread_mutex_lock(&mem_mu);
    const alloc_t *a = find_alloc((uintptr_t)p);
    int ok = a != NULL && a->base == (uintptr_t)p && !a->opened;
    if (ok) {
        ih.pid = (int32_t)getpid();
        ih.fd = a->fd;
        ih.size = a->size;
        ih.ordinal = a->ordinal;
    }
    pthread_mutex_unlock(&mem_mu);
    if (!ok) {
        return ERR_INVALID_VALUE;
    }
    memcpy(h, &ih, sizeof(ih));
    return OK;
}

EXPORT CUresult cuIpcOpenMemHandle_v2(unsigned long long *p, CUipcMemHandle h, unsigned flags)
{
    ipc_handle_t ih;
    char path[64];
    (void)flags;
    memcpy(&ih, &h, sizeof(ih));
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)ih.pid, (int)ih.fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        return ERR_INVALID_VALUE;
    }
    void *m = mmap(NULL, (size_t)ih.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        close(fd);
        return ERR_INVALID_VALUE;
    }
    alloc_add((uintptr_t)m, (size_t)ih.size, ih.ordinal, fd, 1);
    *p = (unsigned long long)(uintptr_t)m;
    return OK;
}

EXPORT CUresult cuIpcCloseMemHandle(unsigned long long p)
{
    alloc_t a;
    if (alloc_remove((uintptr_t)p, 1, &a) != 0) {
        return ERR_INVALID_VALUE;
    }
    munmap((void *)a.base, a.size);
    close(a.fd);
    return OK;
}

EXPORT CUresult cuMemHostAlloc(void **p, size_t bytes, unsigned flags)
{
    (void)flags;
    if (capture_forbids()) {
        return ERR_CAPTURE_UNSUPPORTED;
    }
    return posix_memalign(p, 4096, bytes ? bytes : 1) == 0 ? OK : 2;
}

EXPORT CUresult cuMemFreeHost(void *p)
{
    ctx_sync("cuMemFreeHost");
    free(p);
    return OK;
}

/* Host memory the device may reach: in the emulator every host address is reachable. */
EXPORT CUresult cuMemHostRegister_v2(void *p, size_t bytes, unsigned flags)
{
    (void)p;
    (void)bytes;
    (void)flags;
    return OK;
}

EXPORT CUresult cuMemHostUnregister(void *p)
{
    (void)p;
    ctx_sync("cuMemHostUnregister");
    return OK;
}

EXPORT CUresult cuMemHostGetDevicePointer_v2(unsigned long long *d, void *h, unsigned flags)
{
    (void)flags;
    *d = (unsigned long long)(uintptr_t)h;
    return OK;
}

EXPORT CUresult cuPointerGetAttributes(unsigned n, int *attrs, void **data, unsigned long long p)
{
    pthread_mutex_lock(&mem_mu);
    const alloc_t *a = find_alloc((uintptr_t)p);
    int ordinal = a != NULL ? a->ordinal : -2;
    pthread_mutex_unlock(&mem_mu);
    for (unsigned i = 0; i < n; i++) {
        switch (attrs[i]) {
        case 2: /* MEMORY_TYPE */ *(unsigned *)data[i] = ordinal >= 0 ? 2u : 0u; break;
        case 8: /* IS_MANAGED */ *(unsigned char *)data[i] = 0; break;
        case 9: /* DEVICE_ORDINAL */ *(int *)data[i] = ordinal >= 0 ? ordinal : -2; break;
        default: break;
        }
    }
    return OK;
}

/* The synchronous memset and copy: see land_later (the rules at the top). */
EXPORT CUresult cuMemsetD8_v2(unsigned long long p, unsigned char v, size_t n)
{
    if (!is_device_memory((uintptr_t)p)) {
        memset((void *)(uintptr_t)p, v, n);
        return OK;
    }
    land_later("cuMemsetD8", (uintptr_t)p, NULL, v, n);
    return OK;
}

EXPORT CUresult cuMemcpy(unsigned long long dst, unsigned long long src, size_t n)
{
    ctx_sync("cuMemcpy");
    if (!is_device_memory((uintptr_t)dst) || is_device_memory((uintptr_t)src)) {
        memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
        return OK;
    }
    land_later("cuMemcpy (host to device)", (uintptr_t)dst, (const void *)(uintptr_t)src, 0, n);
    return OK;
}

/* ---- devices and contexts ---- */

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

EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, int d)
{
    (void)d;
    switch (attr) {
    case 16: *v = 8; break; /* SM count */
    case 75: *v = 9; break; /* compute capability 9.0 */
    case 76: *v = 0; break;
    case 133: *v = getenv("BRAID_FAKE_CUDA_MPS") != NULL && atoi(getenv("BRAID_FAKE_CUDA_MPS")) != 0; break;
    default: *v = 1; break;
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

EXPORT CUresult cuDevicePrimaryCtxRetain(void **ctx, int d)
{
    *ctx = (void *)(uintptr_t)(d + 1);
    return OK;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(int d)
{
    (void)d;
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

EXPORT CUresult cuCtxEnablePeerAccess(void *peer, unsigned flags)
{
    (void)peer;
    (void)flags;
    return OK;
}

/* ---- modules ---- */

static int the_kernel;    /* br_dev_kernel */
static int reduce_kernel; /* br_dev_reduce_kernel */
static int direct_kernel; /* br_dev_direct_kernel */

EXPORT CUresult cuModuleLoadData(void **m, const void *image)
{
    (void)image;
    ctx_sync("cuModuleLoadData");
    *m = &the_kernel;
    return OK;
}

EXPORT CUresult cuModuleGetFunction(void **f, void *m, const char *name)
{
    (void)m;
    ctx_sync("cuModuleGetFunction (lazy loading loads the kernel here)");
    if (strcmp(name, "br_dev_kernel") == 0) {
        *f = &the_kernel;
    } else if (strcmp(name, "br_dev_reduce_kernel") == 0) {
        *f = &reduce_kernel;
    } else if (strcmp(name, "br_dev_direct_kernel") == 0) {
        *f = &direct_kernel;
    } else {
        return ERR_NOT_FOUND;
    }
    return OK;
}

EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, void *f, int threads,
                                                            size_t smem)
{
    (void)f;
    (void)threads;
    (void)smem;
    *n = 2;
    return OK;
}

/* ---- events ---- */

EXPORT CUresult cuEventCreate(void **e, unsigned flags)
{
    event_t *ev = calloc(1, sizeof(*ev));
    (void)flags;
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

/* ---- streams and launches (the timeline itself: fake_cuda_stream.c) ---- */

EXPORT CUresult cuStreamCreate(void **s, unsigned flags)
{
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
    op_t *o = op_new(OP_WAIT_EVENT);
    (void)flags;
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

static CUresult launch(void *f, unsigned gx, unsigned gy, unsigned gz, void *h, void **params,
                       int cooperative)
{
    if (gy != 1 || gz != 1 || gx == 0 || gx > 8u * 2u * 64u) {
        return ERR_INVALID_VALUE;
    }
    if (cooperative && gx > DEVICE_BLOCKS) {
        return 720; /* CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE */
    }
    if (f == &reduce_kernel) {
        op_t *r = op_new(OP_REDUCE);
        memcpy(&r->reduce, params[0], sizeof(r->reduce));
        push(h, r);
        return OK;
    }
    op_t *o = op_new(OP_KERNEL);
    if (f == &direct_kernel) {
        o->direct = 1;
        memcpy(&o->direct_args, params[0], sizeof(o->direct_args));
    } else {
        memcpy(&o->launch, params[0], sizeof(o->launch));
    }
    o->nblocks = gx;
    o->cooperative = cooperative;
    push(h, o);
    return OK;
}

EXPORT CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned smem, void *h, void **params,
                               void **extra)
{
    (void)bx;
    (void)by;
    (void)bz;
    (void)smem;
    (void)extra;
    return launch(f, gx, gy, gz, h, params, 0);
}

EXPORT CUresult cuLaunchCooperativeKernel(void *f, unsigned gx, unsigned gy, unsigned gz,
                                          unsigned bx, unsigned by, unsigned bz, unsigned smem,
                                          void *h, void **params)
{
    (void)bx;
    (void)by;
    (void)bz;
    (void)smem;
    return launch(f, gx, gy, gz, h, params, 1);
}
