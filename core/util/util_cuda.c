/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Lazy CUDA (util_cuda.h): libcuda.so.1 opened with dlopen the first time something needs
 * it, its entry points looked up by their versioned names, and one INFO line that says
 * what was found or why nothing was.
 */
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "util.h"
#include "util_cuda.h"

/* Pointer attributes and memory types (cuda.h). */
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CU_POINTER_ATTRIBUTE_IS_MANAGED 8
#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define CU_MEMORYTYPE_DEVICE 2
#define CU_MEMORYTYPE_UNIFIED 4

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static br_cuda_t drv;
static const br_cuda_t *loaded;
static char why_none[256];
static _Atomic int in_process; /* libcuda.so.1 seen loaded in the process */

/* dl_iterate_phdr callbacks: the loader's count of objects loaded so far (from the first
 * object, then stop), and whether one of them is the CUDA driver. */
static int adds_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    *(unsigned long long *)data = info->dlpi_adds;
    return 1;
}

static int find_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    const char *slash = info->dlpi_name != NULL ? strrchr(info->dlpi_name, '/') : NULL;
    const char *base = slash != NULL ? slash + 1 : info->dlpi_name;
    if (base != NULL && strncmp(base, "libcuda.so", 10) == 0) {
        *(int *)data = 1;
        return 1;
    }
    return 0;
}

int br_cuda_in_process(void)
{
    static _Atomic unsigned long long seen_adds;
    static _Atomic uint64_t looked_at; /* the coarse clock at the last look, + 1 */
    unsigned long long adds = 0;
    int found = 0;

    if (atomic_load_explicit(&in_process, memory_order_relaxed)) {
        return 1;
    }
    /* Asked on every call of a process without CUDA, so it must be cheap. The loader's
     * count of loaded objects costs about 60 ns (it takes the loader's lock; dlopen with
     * RTLD_NOLOAD of a library that is not loaded costs 100 us here, it searches the file
     * system), and the names are looked at only when something was loaded since. Within
     * one tick of the coarse clock (1 to 10 ms) the answer of the first look stands: a
     * device buffer needs libcuda loaded and then cuInit and an allocation, which take
     * longer than a tick, so a buffer made after a look is seen by a later one. */
    uint64_t now = br_time_coarse_ns() + 1;
    if (atomic_load_explicit(&looked_at, memory_order_acquire) == now) {
        return atomic_load(&in_process);
    }
    dl_iterate_phdr(adds_cb, &adds);
    if (adds != atomic_load_explicit(&seen_adds, memory_order_relaxed)) {
        dl_iterate_phdr(find_cb, &found);
        if (found) {
            atomic_store(&in_process, 1);
        }
        atomic_store(&seen_adds, adds);
    }
    /* Only once the answer is known: a thread that looks in the same tick while another
     * is still looking must not take "not yet" for the answer (two ranks' threads creating
     * their communicators at once saw no CUDA in one of them). */
    atomic_store_explicit(&looked_at, now, memory_order_release);
    return found || atomic_load(&in_process);
}

/* Look up sym (and the versioned name first, when given). */
static void *sym(void *h, const char *versioned, const char *plain)
{
    void *p = versioned != NULL ? dlsym(h, versioned) : NULL;
    return p != NULL ? p : dlsym(h, plain);
}

#define LOAD(member, versioned, plain)                                                             \
    do {                                                                                           \
        *(void **)&drv.member = sym(h, versioned, plain);                                          \
        if (drv.member == NULL) {                                                                  \
            snprintf(why_none, sizeof(why_none),                                                   \
                     "libcuda.so.1 has no %s (driver too old for this build)", plain);             \
            return;                                                                                \
        }                                                                                          \
    } while (0)

/* The same for an entry point Braid can do without (left NULL). */
#define LOAD_OPT(member, versioned, plain)                                                         \
    (*(void **)&drv.member = sym(h, versioned, plain))

static void load(void)
{
    int mode = (int)br_param_int(BR_PARAM_ID_CUDA);
    void *h;

    if (mode == 0) {
        snprintf(why_none, sizeof(why_none), "BRAID_CUDA=0");
        BR_INFO(NCCL_INIT, "CUDA: not used (BRAID_CUDA=0): host buffers only");
        return;
    }
    h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *e = dlerror();
        snprintf(why_none, sizeof(why_none), "libcuda.so.1 cannot be loaded (%s)",
                 e != NULL ? e : "not found");
        BR_INFO(NCCL_INIT, "CUDA: none: %s; host buffers only", why_none);
        return;
    }
    atomic_store(&in_process, 1);
    LOAD(Init, NULL, "cuInit");
    LOAD(DriverGetVersion, NULL, "cuDriverGetVersion");
    LOAD(GetErrorString, NULL, "cuGetErrorString");
    LOAD(DeviceGetCount, NULL, "cuDeviceGetCount");
    LOAD(DeviceGet, NULL, "cuDeviceGet");
    LOAD(DeviceGetAttribute, NULL, "cuDeviceGetAttribute");
    LOAD(DeviceGetName, NULL, "cuDeviceGetName");
    /* Optional (an emulated driver may lack it): topology placement falls back to the
     * device index. */
    *(void **)&drv.DeviceGetPCIBusId = sym(h, NULL, "cuDeviceGetPCIBusId");
    LOAD(DeviceCanAccessPeer, NULL, "cuDeviceCanAccessPeer");
    LOAD(DevicePrimaryCtxRetain, NULL, "cuDevicePrimaryCtxRetain");
    LOAD(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease");
    LOAD(CtxGetCurrent, NULL, "cuCtxGetCurrent");
    LOAD(CtxSetCurrent, NULL, "cuCtxSetCurrent");
    LOAD(CtxGetDevice, NULL, "cuCtxGetDevice");
    LOAD(CtxEnablePeerAccess, NULL, "cuCtxEnablePeerAccess");
    LOAD(PointerGetAttributes, NULL, "cuPointerGetAttributes");
    LOAD(MemAlloc, "cuMemAlloc_v2", "cuMemAlloc");
    LOAD(MemFree, "cuMemFree_v2", "cuMemFree");
    LOAD(MemHostAlloc, NULL, "cuMemHostAlloc");
    LOAD(MemFreeHost, NULL, "cuMemFreeHost");
    LOAD(MemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2", "cuMemHostGetDevicePointer");
    LOAD(MemsetD8Async, NULL, "cuMemsetD8Async");
    LOAD(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync");
    LOAD(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoHAsync");
    LOAD(ModuleLoadData, NULL, "cuModuleLoadData");
    LOAD(ModuleGetFunction, NULL, "cuModuleGetFunction");
    LOAD(OccupancyMaxActiveBlocksPerMultiprocessor, NULL,
         "cuOccupancyMaxActiveBlocksPerMultiprocessor");
    LOAD(LaunchKernel, NULL, "cuLaunchKernel");
    LOAD(LaunchCooperativeKernel, NULL, "cuLaunchCooperativeKernel");
    LOAD(StreamCreate, NULL, "cuStreamCreate");
    LOAD(StreamDestroy, "cuStreamDestroy_v2", "cuStreamDestroy");
    LOAD(StreamSynchronize, NULL, "cuStreamSynchronize");
    LOAD(StreamQuery, NULL, "cuStreamQuery");
    LOAD(StreamWaitEvent, NULL, "cuStreamWaitEvent");
    LOAD(StreamWaitValue32, "cuStreamWaitValue32_v2", "cuStreamWaitValue32");
    LOAD(StreamWriteValue32, "cuStreamWriteValue32_v2", "cuStreamWriteValue32");
    LOAD(StreamIsCapturing, NULL, "cuStreamIsCapturing");
    LOAD(ThreadExchangeStreamCaptureMode, NULL, "cuThreadExchangeStreamCaptureMode");
    LOAD_OPT(IpcGetMemHandle, NULL, "cuIpcGetMemHandle");
    LOAD_OPT(IpcOpenMemHandle, "cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle");
    LOAD_OPT(IpcCloseMemHandle, NULL, "cuIpcCloseMemHandle");
    LOAD_OPT(MemHostRegister, "cuMemHostRegister_v2", "cuMemHostRegister");
    LOAD_OPT(MemHostUnregister, NULL, "cuMemHostUnregister");
    LOAD(MemcpyAsync, NULL, "cuMemcpyAsync");
    LOAD_OPT(StreamWaitValue64, "cuStreamWaitValue64_v2", "cuStreamWaitValue64");
    LOAD_OPT(StreamWriteValue64, "cuStreamWriteValue64_v2", "cuStreamWriteValue64");
    LOAD(EventQuery, NULL, "cuEventQuery");
    LOAD(EventCreate, NULL, "cuEventCreate");
    LOAD(EventDestroy, "cuEventDestroy_v2", "cuEventDestroy");
    LOAD(EventRecord, NULL, "cuEventRecord");
    LOAD(EventSynchronize, NULL, "cuEventSynchronize");

    br_cu_result_t e = drv.Init(0);
    if (e != BR_CU_SUCCESS) {
        snprintf(why_none, sizeof(why_none), "cuInit failed: %s", br_cuda_error_string(e));
        BR_INFO(NCCL_INIT, "CUDA: none: %s; host buffers only", why_none);
        return;
    }
    drv.DriverGetVersion(&drv.driver_version);
    if (drv.DeviceGetCount(&drv.ndevices) != BR_CU_SUCCESS || drv.ndevices == 0) {
        snprintf(why_none, sizeof(why_none), "the CUDA driver %d.%d sees no device",
                 drv.driver_version / 1000, drv.driver_version % 1000 / 10);
        BR_INFO(NCCL_INIT, "CUDA: none: %s; host buffers only", why_none);
        return;
    }
    char name[128] = "?";
    br_cu_device_t d0;
    if (drv.DeviceGet(&d0, 0) == BR_CU_SUCCESS) {
        drv.DeviceGetName(name, (int)sizeof(name), d0);
    }
    BR_INFO(NCCL_INIT, "CUDA: driver %d.%d, %d device%s (device 0: %s)", drv.driver_version / 1000,
            drv.driver_version % 1000 / 10, drv.ndevices, drv.ndevices == 1 ? "" : "s", name);
    loaded = &drv;
}

const br_cuda_t *br_cuda(const char **why)
{
    pthread_once(&load_once, load);
    if (loaded == NULL && why != NULL) {
        *why = why_none;
    }
    return loaded;
}

br_mem_kind_t br_cuda_ptr_kind(const void *p, int *device)
{
    uint64_t type = 0, managed = 0, ordinal = 0;
    int attrs[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
    void *data[3] = {&type, &managed, &ordinal};
    const br_cuda_t *cu;

    *device = -1;
    if (p == NULL || !br_cuda_in_process()) {
        return BR_MEM_HOST;
    }
    cu = br_cuda(NULL);
    if (cu == NULL) {
        /* BRAID_CUDA=0 or a broken driver: the caller reports what it cannot run. Ask
         * nobody; a pointer is taken for host memory, as before CUDA existed. */
        return BR_MEM_HOST;
    }
    /* Unlike cuPointerGetAttribute, the plural form succeeds on memory the driver does
     * not know and leaves the values zero: host memory. */
    if (cu->PointerGetAttributes(3, attrs, data, (br_cu_ptr_t)(uintptr_t)p) != BR_CU_SUCCESS) {
        return BR_MEM_HOST;
    }
    if ((uint32_t)managed != 0) {
        *device = (int)(int32_t)ordinal;
        return BR_MEM_MANAGED;
    }
    if ((uint32_t)type == CU_MEMORYTYPE_DEVICE || (uint32_t)type == CU_MEMORYTYPE_UNIFIED) {
        *device = (int)(int32_t)ordinal;
        return BR_MEM_DEVICE;
    }
    return BR_MEM_HOST;
}

const char *br_mem_kind_name(br_mem_kind_t kind)
{
    switch (kind) {
    case BR_MEM_DEVICE: return "device memory";
    case BR_MEM_MANAGED: return "managed memory";
    default: return "host memory";
    }
}

int br_cuda_current_device(void)
{
    const br_cuda_t *cu;
    br_cu_context_t ctx = NULL;
    br_cu_device_t d;

    if (!br_cuda_in_process() || (cu = br_cuda(NULL)) == NULL) {
        return -1;
    }
    if (cu->CtxGetCurrent(&ctx) != BR_CU_SUCCESS || ctx == NULL ||
        cu->CtxGetDevice(&d) != BR_CU_SUCCESS) {
        return 0; /* the runtime's default before any cudaSetDevice */
    }
    return (int)d;
}

const char *br_cuda_error_string(br_cu_result_t e)
{
    static _Thread_local char buf[160];
    const char *s = NULL;
    if (loaded != NULL || drv.GetErrorString != NULL) {
        drv.GetErrorString(e, &s);
    }
    snprintf(buf, sizeof(buf), "%s (CUDA error %d)", s != NULL ? s : "unknown error", e);
    return buf;
}
