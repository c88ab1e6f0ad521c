/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The emulated CUDA driver's memory (tests/cuda-emu; what the driver emulates and the rules
 * it keeps: fake_cuda.c's comment). Device memory is a shared mapping of a memfd, listed in
 * one table (allocs) so that pointer attributes and the device's reach tell it apart, and
 * handed to other processes through IPC handles that name the owner's descriptor; host
 * memory the driver knows (pinned by cuMemHostAlloc, or a range of cuMemHostRegister) is a
 * second table (hosts). Both tables are guarded by one mutex (mem_mu): any thread may call.
 * The synchronous cuMemcpy and cuMemsetD8 to device memory land later (fake_cuda_stream.c).
 */
/* memfd_create: _GNU_SOURCE comes from the build */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_cuda_int.h"

/* ---- device memory ---- */

typedef struct {
    uintptr_t base;
    size_t size;
    int ordinal;
    int fd;     /* the memfd behind it (other processes map it through IPC handles) */
    int opened; /* mapped from another process's handle (cuIpcOpenMemHandle) */
} alloc_t;

static pthread_mutex_t mem_mu = PTHREAD_MUTEX_INITIALIZER;
static alloc_t *allocs;
static int nallocs, cap_allocs;

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

int memory_device(uintptr_t p)
{
    pthread_mutex_lock(&mem_mu);
    const alloc_t *a = find_alloc(p);
    int dev = a != NULL ? a->ordinal : -1;
    pthread_mutex_unlock(&mem_mu);
    return dev;
}

int is_device_memory(uintptr_t p)
{
    return memory_device(p) >= 0;
}

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
    alloc_add((uintptr_t)m, size, ctx_device(), fd, 0);
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
    if (flags != 1) { /* must be CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS */
        return ERR_INVALID_VALUE;
    }
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

/* ---- host memory ---- */

/* Host memory the driver knows: pinned by cuMemHostAlloc, or a range of
 * cuMemHostRegister. Only such memory mapped for the device (DEVICEMAP) has a device
 * pointer, and only it and device memory may a stream memory operation or a kernel touch. */
#define HOST_DEVICEMAP 0x02u
typedef struct {
    uintptr_t base;
    size_t size;
    unsigned flags;
    int registered; /* cuMemHostRegister (else cuMemHostAlloc) */
} host_t;

static host_t *hosts;
static int nhosts, cap_hosts;

static int find_host(uintptr_t p, size_t n)
{
    for (int i = 0; i < nhosts; i++) {
        if (p < hosts[i].base + hosts[i].size && p + (n ? n : 1) > hosts[i].base) {
            return i;
        }
    }
    return -1;
}

/* Add [p, p + n) unless it overlaps memory known already (-1). */
static int host_add(uintptr_t p, size_t n, unsigned flags, int registered)
{
    int ok = 0;
    pthread_mutex_lock(&mem_mu);
    if (find_host(p, n) >= 0) {
        ok = -1;
    } else {
        if (nhosts == cap_hosts) {
            cap_hosts = cap_hosts ? 2 * cap_hosts : 64;
            hosts = realloc(hosts, (size_t)cap_hosts * sizeof(*hosts));
        }
        hosts[nhosts++] = (host_t){p, n, flags, registered};
    }
    pthread_mutex_unlock(&mem_mu);
    return ok;
}

/* Remove the host memory that starts at p, of the kind asked; -1 when there is none. */
static int host_remove(uintptr_t p, int registered)
{
    int found = -1;
    pthread_mutex_lock(&mem_mu);
    int i = find_host(p, 1);
    if (i >= 0 && hosts[i].base == p && hosts[i].registered == registered) {
        hosts[i] = hosts[--nhosts];
        found = 0;
    }
    pthread_mutex_unlock(&mem_mu);
    return found;
}

int device_reaches(uintptr_t p, size_t n)
{
    pthread_mutex_lock(&mem_mu);
    const alloc_t *a = find_alloc(p);
    int h = find_host(p, n);
    int yes = (a != NULL && p + n <= a->base + a->size) ||
              (h >= 0 && (hosts[h].flags & HOST_DEVICEMAP) != 0 && p >= hosts[h].base &&
               p + n <= hosts[h].base + hosts[h].size);
    pthread_mutex_unlock(&mem_mu);
    return yes;
}

EXPORT CUresult cuMemHostAlloc(void **p, size_t bytes, unsigned flags)
{
    if (capture_forbids()) {
        return ERR_CAPTURE_UNSUPPORTED;
    }
    if ((flags & ~0x7u) != 0) { /* PORTABLE, DEVICEMAP, WRITECOMBINED */
        return ERR_INVALID_VALUE;
    }
    if (posix_memalign(p, 4096, bytes ? bytes : 1) != 0) {
        return 2;
    }
    host_add((uintptr_t)*p, bytes ? bytes : 1, flags, 0);
    return OK;
}

EXPORT CUresult cuMemFreeHost(void *p)
{
    ctx_sync("cuMemFreeHost");
    if (host_remove((uintptr_t)p, 0) != 0) {
        misuse("cuMemFreeHost(%p): not the start of memory of cuMemHostAlloc (a real driver "
               "returns CUDA_ERROR_INVALID_VALUE)",
               p);
    }
    free(p);
    return OK;
}

EXPORT CUresult cuMemHostRegister_v2(void *p, size_t bytes, unsigned flags)
{
    if (p == NULL || bytes == 0 || (flags & ~0xfu) != 0) {
        return ERR_INVALID_VALUE;
    }
    if (host_add((uintptr_t)p, bytes, flags, 1) != 0) {
        return ERR_HOST_MEMORY_ALREADY_REGISTERED;
    }
    return OK;
}

EXPORT CUresult cuMemHostUnregister(void *p)
{
    ctx_sync("cuMemHostUnregister");
    if (host_remove((uintptr_t)p, 1) != 0) {
        misuse("cuMemHostUnregister(%p): not the start of a range of cuMemHostRegister (a "
               "real driver returns CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED)",
               p);
    }
    return OK;
}

/* The device pointer of pinned host memory mapped for the device: the host pointer, as on
 * a GPU with CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM. */
EXPORT CUresult cuMemHostGetDevicePointer_v2(unsigned long long *d, void *h, unsigned flags)
{
    if (flags != 0) {
        return ERR_INVALID_VALUE;
    }
    pthread_mutex_lock(&mem_mu);
    int i = find_host((uintptr_t)h, 1);
    int mapped = i >= 0 && (hosts[i].flags & HOST_DEVICEMAP) != 0;
    pthread_mutex_unlock(&mem_mu);
    if (!mapped) {
        return ERR_INVALID_VALUE;
    }
    *d = (unsigned long long)(uintptr_t)h;
    return OK;
}

EXPORT CUresult cuPointerGetAttributes(unsigned n, int *attrs, void **data, unsigned long long p)
{
    pthread_mutex_lock(&mem_mu);
    const alloc_t *a = find_alloc((uintptr_t)p);
    int ordinal = a != NULL ? a->ordinal : -2;
    unsigned host = a == NULL && find_host((uintptr_t)p, 1) >= 0 ? 1u : 0u; /* pinned */
    pthread_mutex_unlock(&mem_mu);
    for (unsigned i = 0; i < n; i++) {
        switch (attrs[i]) {
        case 2: /* MEMORY_TYPE */ *(unsigned *)data[i] = ordinal >= 0 ? 2u : host; break;
        case 8: /* IS_MANAGED */ *(unsigned char *)data[i] = 0; break;
        case 9: /* DEVICE_ORDINAL */ *(int *)data[i] = ordinal >= 0 ? ordinal : -2; break;
        default: break;
        }
    }
    return OK;
}

/* ---- pointer attributes, the synchronous memset and copy ---- */

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
