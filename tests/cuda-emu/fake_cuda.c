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
 * writes, 64-bit ones too, copies, memsets, kernel launches), and a kernel launch runs every block of the
 * grid as its own CPU thread, all at once: the co-residency the executor relies on. Stream
 * capture and graphs are in fake_cuda_capture.c.
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
 *   its blocks at once, and fails when they can never fit).
 */
/* memfd_create: _GNU_SOURCE comes from the build */
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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
static void ctx_sync(const char *call);
static void land_later(const char *call, uintptr_t dst, const void *src, unsigned char byte,
                       size_t n);

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

static void event_wait_gen(event_t *ev, uint64_t gen)
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

/* ---- streams ---- */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int env_int(const char *key, int def, int lo, int hi)
{
    const char *e = getenv(key);
    int v = e != NULL && *e != '\0' ? atoi(e) : def;
    return v < lo ? lo : v > hi ? hi : v;
}

/* Hardware queues: per device, CUDA_DEVICE_MAX_CONNECTIONS of them. An operation starts
 * only once every operation given to its queue before it has started (`dispatched`). */
#define MAX_QUEUES 32
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t issued, dispatched;
} hwq_t;
static hwq_t hwqs[8][MAX_QUEUES];
static int nqueues, queue_rr[8];
static pthread_once_t hwq_once = PTHREAD_ONCE_INIT;

static void hwq_init(void)
{
    nqueues = env_int("CUDA_DEVICE_MAX_CONNECTIONS", 8, 1, MAX_QUEUES);
    for (int d = 0; d < 8; d++) {
        for (int q = 0; q < MAX_QUEUES; q++) {
            pthread_mutex_init(&hwqs[d][q].mu, NULL);
            pthread_cond_init(&hwqs[d][q].cv, NULL);
        }
    }
}

static hwq_t *queue_of(const stream_t *s)
{
    return &hwqs[s->dev][s->hwq];
}

/* Wait for o's turn in its stream's queue. */
static void queue_turn(stream_t *s, const op_t *o)
{
    hwq_t *q = queue_of(s);
    pthread_mutex_lock(&q->mu);
    s->in_turn = 1;
    while (q->dispatched + 1 < o->qseq) {
        pthread_cond_wait(&q->cv, &q->mu);
    }
    s->in_turn = 0;
    pthread_mutex_unlock(&q->mu);
}

/* o has started: the queue goes on to its next operation. */
static void queue_dispatched(stream_t *s, const op_t *o)
{
    hwq_t *q = queue_of(s);
    pthread_mutex_lock(&q->mu);
    if (o->qseq > q->dispatched) {
        q->dispatched = o->qseq;
    }
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

/* Blocks resident at once per device: SMs x 2 (cuDeviceGetAttribute and the occupancy
 * call say the same). */
#define DEVICE_BLOCKS (8 * 2)
static pthread_mutex_t sm_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sm_cv = PTHREAD_COND_INITIALIZER;
static int sm_used[8];

static void blocks_take(int dev, int n)
{
    pthread_mutex_lock(&sm_mu);
    while (sm_used[dev] + n > DEVICE_BLOCKS) {
        pthread_cond_wait(&sm_cv, &sm_mu);
    }
    sm_used[dev] += n;
    pthread_mutex_unlock(&sm_mu);
}

static void blocks_give(int dev, int n)
{
    pthread_mutex_lock(&sm_mu);
    sm_used[dev] -= n;
    pthread_cond_broadcast(&sm_cv);
    pthread_mutex_unlock(&sm_mu);
}

typedef struct {
    const br_dev_launch_t *L;
    int b, dev, give; /* give: the block returns its room when it ends */
} block_arg_t;

/* Threads per block (BRAID_FAKE_CUDA_BLOCK_THREADS, 2 unless set, at most 8): they share
 * the block's state and barrier as a CUDA block's threads do, so the interpreter's split
 * between thread 0 (polls, plans, counters) and the others (data) runs concurrently. */
static int block_threads(void)
{
    const char *v = getenv("BRAID_FAKE_CUDA_BLOCK_THREADS");
    int n = v != NULL ? atoi(v) : 2;
    return n < 1 ? 1 : n > 8 ? 8 : n;
}

typedef struct {
    const br_dev_launch_t *L;
    br_dev_shared_t *sh;
    pthread_barrier_t *barrier;
    int b, tid, nthr;
} block_thread_t;

static void *block_thread(void *p)
{
    block_thread_t *t = p;
    br_dev_emu_enter(t->tid, t->nthr, t->nthr > 1 ? t->barrier : NULL);
    br_dev_run_block_with(t->L, t->b, t->sh);
    return NULL;
}

static void *block_main(void *p)
{
    block_arg_t *a = p;
    const int nthr = block_threads();
    br_dev_shared_t *sh = aligned_alloc(16, (sizeof(*sh) + 15) / 16 * 16);
    pthread_barrier_t barrier;
    pthread_t th[8];
    block_thread_t t[8];
    if (sh == NULL || pthread_barrier_init(&barrier, NULL, (unsigned)nthr) != 0) {
        fprintf(stderr, "fake_cuda: out of memory for a block\n");
        abort();
    }
    for (int i = 0; i < nthr; i++) {
        t[i] = (block_thread_t){a->L, sh, &barrier, a->b, i, nthr};
        if (i > 0 && pthread_create(&th[i], NULL, block_thread, &t[i]) != 0) {
            fprintf(stderr, "fake_cuda: cannot start a block's thread\n");
            abort();
        }
    }
    block_thread(&t[0]);
    for (int i = 1; i < nthr; i++) {
        pthread_join(th[i], NULL);
    }
    pthread_barrier_destroy(&barrier);
    free(sh);
    if (a->give) {
        blocks_give(a->dev, 1);
    }
    return NULL;
}

static uint64_t value_load(const op_t *o)
{
    return o->wide ? __atomic_load_n((volatile uint64_t *)o->addr, __ATOMIC_ACQUIRE)
                   : __atomic_load_n((volatile uint32_t *)o->addr, __ATOMIC_ACQUIRE);
}

static stream_t *legacy_stream(void);
static void land(op_t *o);

/* A kernel of the interpreter: every block its own thread, started as room on the device
 * allows (a cooperative launch takes room for all of them at once); the queue goes on once
 * every block has started. */
static void run_kernel(stream_t *s, op_t *o)
{
    pthread_t *th = calloc(o->nblocks, sizeof(*th));
    block_arg_t *args = calloc(o->nblocks, sizeof(*args));
    if (o->cooperative) {
        blocks_take(s->dev, (int)o->nblocks);
    }
    for (unsigned b = 0; b < o->nblocks; b++) {
        if (!o->cooperative) {
            blocks_take(s->dev, 1);
        }
        args[b] = (block_arg_t){&o->launch, (int)b, s->dev, !o->cooperative};
        pthread_create(&th[b], NULL, block_main, &args[b]);
    }
    queue_dispatched(s, o);
    for (unsigned b = 0; b < o->nblocks; b++) {
        pthread_join(th[b], NULL);
    }
    if (o->cooperative) {
        blocks_give(s->dev, (int)o->nblocks);
    }
    free(th);
    free(args);
}

static void run_op(stream_t *s, op_t *o)
{
    int waits = o->kind == OP_WAIT_EVENT || o->kind == OP_WAIT_VALUE || o->kind == OP_WAIT_LEGACY;
    if (!waits && o->kind != OP_KERNEL) {
        queue_dispatched(s, o);
    }
    switch (o->kind) {
    case OP_RECORD:
        pthread_mutex_lock(&o->ev->mu);
        if (o->gen > o->ev->completed) {
            o->ev->completed = o->gen;
        }
        pthread_cond_broadcast(&o->ev->cv);
        pthread_mutex_unlock(&o->ev->mu);
        break;
    case OP_WAIT_EVENT: event_wait_gen(o->ev, o->gen); break;
    case OP_WAIT_VALUE:
        while (value_load(o) < o->value) { /* GEQ */
            usleep(20);
        }
        break;
    case OP_WAIT_LEGACY: {
        stream_t *l = legacy_stream();
        pthread_mutex_lock(&l->mu);
        while (l->completed < o->value) {
            pthread_cond_wait(&l->cv, &l->mu);
        }
        pthread_mutex_unlock(&l->mu);
        break;
    }
    case OP_WRITE_VALUE:
        if (o->wide) {
            __atomic_store_n((volatile uint64_t *)o->addr, o->value, __ATOMIC_RELEASE);
        } else {
            __atomic_store_n((volatile uint32_t *)o->addr, (uint32_t)o->value, __ATOMIC_RELEASE);
        }
        break;
    case OP_REDUCE: br_dev_reduce_n(&o->reduce, 0, 1); break; /* one block does it all */
    case OP_COPY: memmove(o->dst, o->src, o->n); break;
    case OP_SET: memset(o->dst, o->byte, o->n); break;
    case OP_LAND: land(o); break;
    case OP_KERNEL:
        if (o->direct) {
            queue_dispatched(s, o);
            br_dev_direct_run(&o->direct_args, 0, 1); /* waits for nothing: one block */
        } else {
            run_kernel(s, o);
        }
        break;
    }
    if (waits) {
        queue_dispatched(s, o);
    }
}

/* BRAID_FAKE_CUDA_EXCLUSIVE: the process holds the GPU while any of its streams has work. */
static pthread_mutex_t gpu_mu = PTHREAD_MUTEX_INITIALIZER;
static int gpu_fd = -2, gpu_holders;

static void gpu_take(void)
{
    pthread_mutex_lock(&gpu_mu);
    if (gpu_fd == -2) {
        const char *path = getenv("BRAID_FAKE_CUDA_EXCLUSIVE");
        gpu_fd = path != NULL && *path != '\0' ? open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600)
                                               : -1;
    }
    if (gpu_fd >= 0 && gpu_holders++ == 0) {
        while (flock(gpu_fd, LOCK_EX) != 0) {
        }
    }
    pthread_mutex_unlock(&gpu_mu);
}

static void gpu_give(void)
{
    pthread_mutex_lock(&gpu_mu);
    if (gpu_fd >= 0 && --gpu_holders == 0) {
        flock(gpu_fd, LOCK_UN);
    }
    pthread_mutex_unlock(&gpu_mu);
}

static void *stream_main(void *p)
{
    stream_t *s = p;
    int holding = 0;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (s->head == NULL && !s->stop) {
            pthread_cond_wait(&s->cv, &s->mu);
        }
        if (s->head == NULL) {
            break;
        }
        op_t *o = s->head;
        s->busy = 1;
        s->head_since_ns = now_ns();
        pthread_mutex_unlock(&s->mu);
        if (!holding) {
            gpu_take();
            holding = 1;
        }
        queue_turn(s, o);
        run_op(s, o);
        pthread_mutex_lock(&s->mu);
        s->head = o->next;
        if (s->head == NULL) {
            s->tail = NULL;
            gpu_give();
            holding = 0;
        }
        s->busy = 0;
        s->completed++;
        free(o);
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Every stream made (its slot NULL once destroyed), so that a capture's end and the
 * context's synchronisation reach them. */
static pthread_mutex_t streams_mu = PTHREAD_MUTEX_INITIALIZER;
static stream_t *all_streams[256];
static int nstreams_seen;

void streams_end_capture(void)
{
    pthread_mutex_lock(&streams_mu);
    for (int i = 0; i < nstreams_seen; i++) {
        if (all_streams[i] != NULL) {
            all_streams[i]->capturing = 0;
        }
    }
    pthread_mutex_unlock(&streams_mu);
}

static stream_t *stream_new(int blocking, int legacy)
{
    stream_t *s = calloc(1, sizeof(*s));
    pthread_once(&hwq_once, hwq_init);
    s->dev = cur_ctx > 0 ? cur_ctx - 1 : 0;
    s->blocking = blocking;
    s->legacy = legacy;
    pthread_mutex_lock(&streams_mu);
    s->hwq = queue_rr[s->dev]++ % nqueues;
    s->id = nstreams_seen;
    if (nstreams_seen < 256) {
        all_streams[nstreams_seen++] = s;
    }
    pthread_mutex_unlock(&streams_mu);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_create(&s->worker, NULL, stream_main, s);
    return s;
}

/* The legacy default stream (NULL). */
static pthread_once_t legacy_once = PTHREAD_ONCE_INIT;
static stream_t *legacy;

static void legacy_make(void)
{
    legacy = stream_new(1, 1);
}

static stream_t *legacy_stream(void)
{
    pthread_once(&legacy_once, legacy_make);
    return legacy;
}

stream_t *stream_of(void *h)
{
    return h == NULL ? legacy_stream() : h;
}

static void append(stream_t *s, op_t *o)
{
    hwq_t *q = queue_of(s);
    o->next = NULL;
    pthread_mutex_lock(&q->mu);
    o->qseq = ++q->issued;
    pthread_mutex_unlock(&q->mu);
    if (s->tail != NULL) {
        s->tail->next = o;
    } else {
        s->head = o;
    }
    s->tail = o;
    s->pushed++;
}

void push(void *h, op_t *o)
{
    stream_t *s = stream_of(h);
    if (s->capturing) {
        capture_append(o);
        return;
    }
    /* A blocking stream's work is ordered after the legacy stream's earlier work. */
    uint64_t legacy_pushed = 0;
    if (s->blocking && !s->legacy) {
        stream_t *l = legacy_stream();
        pthread_mutex_lock(&l->mu);
        legacy_pushed = l->pushed > l->completed ? l->pushed : 0;
        pthread_mutex_unlock(&l->mu);
    }
    pthread_mutex_lock(&s->mu);
    if (legacy_pushed > 0) {
        op_t *w = op_new(OP_WAIT_LEGACY);
        w->value = legacy_pushed;
        append(s, w);
    }
    append(s, o);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

op_t *op_new(op_kind_t k)
{
    op_t *o = calloc(1, sizeof(*o));
    o->kind = k;
    return o;
}

/* ---- the context's synchronisation ---- */

/* What stream s is stuck on, for the report. Caller holds s->mu. */
static void describe_head(const stream_t *s, char *buf, size_t len)
{
    const op_t *o = s->head;
    if (s->in_turn) {
        snprintf(buf, len,
                 "waits for its turn in hardware queue %d of %d (CUDA_DEVICE_MAX_CONNECTIONS), "
                 "behind another stream's operation that waits",
                 s->hwq, nqueues);
        return;
    }
    switch (o->kind) {
    case OP_WAIT_VALUE:
        snprintf(buf, len, "waits until the %d-bit word at %p reaches %llu (it holds %llu)",
                 o->wide ? 64 : 32, (void *)o->addr, (unsigned long long)o->value,
                 (unsigned long long)value_load(o));
        break;
    case OP_WAIT_EVENT: snprintf(buf, len, "waits for an event that was not reached"); break;
    case OP_WAIT_LEGACY: snprintf(buf, len, "waits for the legacy stream"); break;
    case OP_KERNEL: snprintf(buf, len, "runs a kernel that does not finish"); break;
    default: snprintf(buf, len, "runs operation %d", (int)o->kind); break;
    }
}

static void ctx_sync(const char *call)
{
    int dev = cur_ctx > 0 ? cur_ctx - 1 : 0;
    int limit = env_int("BRAID_FAKE_CUDA_HANG_TIMEOUT", 15, 1, 3600);
    pthread_once(&hwq_once, hwq_init);
    for (;;) {
        stream_t *stuck = NULL;
        int busy = 0;
        pthread_mutex_lock(&streams_mu);
        for (int i = 0; i < nstreams_seen; i++) {
            stream_t *s = all_streams[i];
            if (s == NULL || s->dev != dev) {
                continue;
            }
            pthread_mutex_lock(&s->mu);
            uint64_t now = now_ns();
            if (s->head != NULL) {
                /* Stuck: waiting (in the stream or for its queue) without moving. A kernel
                 * that runs long is not: its own waits time out. */
                const op_t *o = s->head;
                int waiting = s->in_turn || o->kind == OP_WAIT_VALUE ||
                              o->kind == OP_WAIT_EVENT || o->kind == OP_WAIT_LEGACY;
                busy = 1;
                if (waiting && s->busy && s->head_since_ns < now &&
                    now - s->head_since_ns > (uint64_t)limit * 1000000000ull) {
                    stuck = s;
                }
            }
            pthread_mutex_unlock(&s->mu);
            if (stuck != NULL) {
                break;
            }
        }
        pthread_mutex_unlock(&streams_mu);
        if (!busy) {
            return;
        }
        if (stuck != NULL) {
            char what[256];
            pthread_mutex_lock(&stuck->mu);
            describe_head(stuck, what, sizeof(what));
            pthread_mutex_unlock(&stuck->mu);
            fprintf(stderr,
                    "fake_cuda: HANG: %s synchronises the context (CUDA's rule), but stream %d "
                    "has not moved for %d s: it %s. On a GPU this call never returns.\n",
                    call, stuck->id, limit, what);
            abort();
        }
        usleep(200);
    }
}

EXPORT CUresult cuCtxSynchronize(void)
{
    ctx_sync("cuCtxSynchronize");
    return OK;
}

/* ---- bytes that land later ---- */

/* Pending landings of the synchronous memset and copy: their pages are inaccessible until
 * the legacy stream lands them, so that anything touching them first faults, and the fault
 * is reported as the race it is. Read by the signal handler: plain words, no lock. */
#define MAX_LANDINGS 256
typedef struct {
    volatile uintptr_t lo, hi; /* pages; hi 0: free */
    const char *call;
    uint64_t issued_ns;
} landing_t;
static landing_t landings[MAX_LANDINGS];
static pthread_mutex_t land_mu = PTHREAD_MUTEX_INITIALIZER;

static void protect_pending(void)
{
    for (int i = 0; i < MAX_LANDINGS; i++) {
        if (landings[i].hi != 0) {
            mprotect((void *)landings[i].lo, landings[i].hi - landings[i].lo, PROT_NONE);
        }
    }
}

static void on_segv(int sig, siginfo_t *si, void *uc)
{
    uintptr_t a = (uintptr_t)si->si_addr;
    (void)uc;
    for (int i = 0; i < MAX_LANDINGS; i++) {
        if (landings[i].hi != 0 && a >= landings[i].lo && a < landings[i].hi) {
            char msg[512];
            int n = snprintf(msg, sizeof(msg),
                             "fake_cuda: RACE: %p was touched by work that is not ordered after "
                             "the legacy stream, before the %s issued %llu us earlier had "
                             "landed there (the synchronous copy and memset return before "
                             "their bytes land, and non-blocking streams do not wait for "
                             "them). On a GPU it reads the old bytes.\n",
                             (void *)a, landings[i].call,
                             (unsigned long long)((now_ns() - landings[i].issued_ns) / 1000));
            if (write(2, msg, (size_t)n) < 0) {
                /* nothing more to say */
            }
            abort();
        }
    }
    signal(sig, SIG_DFL); /* not ours: the default action, on return */
}

__attribute__((constructor)) static void fake_cuda_init(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, NULL);
}

static void land_later(const char *call, uintptr_t dst, const void *src, unsigned char byte,
                       size_t n)
{
    long page = sysconf(_SC_PAGESIZE);
    op_t *o = op_new(OP_LAND);
    o->dst = (void *)dst;
    o->n = n;
    o->byte = byte;
    if (src != NULL) {
        o->land_tmp = malloc(n ? n : 1); /* the pageable buffer, staged */
        memcpy(o->land_tmp, src, n);
    }
    o->land_slot = -1;
    pthread_mutex_lock(&land_mu);
    for (int i = 0; i < MAX_LANDINGS && n > 0; i++) {
        if (landings[i].hi == 0) {
            landings[i].call = call;
            landings[i].issued_ns = now_ns();
            landings[i].lo = dst / (uintptr_t)page * (uintptr_t)page;
            landings[i].hi = (dst + n + (uintptr_t)page - 1) / (uintptr_t)page * (uintptr_t)page;
            o->land_slot = i;
            break;
        }
    }
    protect_pending();
    pthread_mutex_unlock(&land_mu);
    push(NULL, o);
}

static void land(op_t *o)
{
    usleep((useconds_t)env_int("BRAID_FAKE_CUDA_DMA_US", 20000, 0, 10000000));
    pthread_mutex_lock(&land_mu);
    if (o->land_slot >= 0) {
        landing_t *l = &landings[o->land_slot];
        mprotect((void *)l->lo, l->hi - l->lo, PROT_READ | PROT_WRITE);
        l->hi = 0;
    }
    if (o->land_tmp != NULL) {
        memcpy(o->dst, o->land_tmp, o->n);
    } else {
        memset(o->dst, o->byte, o->n);
    }
    protect_pending(); /* landings sharing a page with this one */
    pthread_mutex_unlock(&land_mu);
    free(o->land_tmp);
}

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
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->worker, NULL);
    pthread_mutex_lock(&streams_mu);
    for (int i = 0; i < nstreams_seen; i++) {
        if (all_streams[i] == s) {
            all_streams[i] = NULL;
        }
    }
    pthread_mutex_unlock(&streams_mu);
    free(s);
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
