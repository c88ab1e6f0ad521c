/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Lazy CUDA: the driver API loaded with dlopen on first need, so that libnccl links no CUDA
 * library and runs without a GPU or a driver (host memory only). The process "uses CUDA"
 * once libcuda.so.1 is loaded in it (by the CUDA runtime, PyTorch, or us): before that no
 * pointer can be device memory, and nothing here loads the driver unless BRAID_CUDA asks.
 *
 * The few driver types and values Braid needs are declared here (facts of cuda.h), so a
 * build needs no CUDA toolkit; the symbols are the versioned entry points the driver
 * exports (cuMemAlloc_v2, cuStreamWaitValue32_v2, ...).
 */
#ifndef BR_UTIL_CUDA_H_
#define BR_UTIL_CUDA_H_

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

typedef int br_cu_result_t; /* CUresult */
typedef int br_cu_device_t; /* CUdevice */
typedef struct CUctx_st *br_cu_context_t;
typedef struct CUstream_st *br_cu_stream_t; /* the same type as cudaStream_t */
typedef struct CUevent_st *br_cu_event_t;
typedef struct CUmod_st *br_cu_module_t;
typedef struct CUfunc_st *br_cu_function_t;
typedef unsigned long long br_cu_ptr_t; /* CUdeviceptr */

#define BR_CU_SUCCESS 0
#define BR_CU_ERROR_NOT_READY 600
#define BR_CU_MEMHOSTALLOC_PORTABLE 0x01
#define BR_CU_MEMHOSTREGISTER_PORTABLE 0x01
#define BR_CU_MEMHOSTREGISTER_DEVICEMAP 0x02
#define BR_CU_MEMHOSTALLOC_DEVICEMAP 0x02
#define BR_CU_STREAM_NON_BLOCKING 0x1
#define BR_CU_EVENT_DISABLE_TIMING 0x2
#define BR_CU_STREAM_WAIT_VALUE_GEQ 0x0
#define BR_CU_DEV_ATTR_SM_COUNT 16
#define BR_CU_DEV_ATTR_CC_MAJOR 75
#define BR_CU_DEV_ATTR_CC_MINOR 76
#define BR_CU_DEV_ATTR_MAX_THREADS_PER_SM 39
#define BR_CU_DEV_ATTR_UNIFIED_ADDRESSING 41
#define BR_CU_DEV_ATTR_MPS_ENABLED 133
/* 64-bit stream memory operations (cuStreamWaitValue64 / WriteValue64): the attribute of
 * CUDA 12 and later, and the one drivers before it answer. */
#define BR_CU_DEV_ATTR_MEMOPS64 122
#define BR_CU_DEV_ATTR_MEMOPS64_V1 93
#define BR_CU_CAPTURE_STATUS_NONE 0
#define BR_CU_CAPTURE_MODE_RELAXED 2
#define BR_CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS 0x1

/* CUipcMemHandle: 64 opaque bytes, passed by value. */
typedef struct {
    char reserved[64];
} br_cu_ipc_handle_t;

/* The driver entry points Braid calls (NULL members were not found; see br_cuda()). */
typedef struct {
    br_cu_result_t (*Init)(unsigned flags);
    br_cu_result_t (*DriverGetVersion)(int *v);
    br_cu_result_t (*GetErrorString)(br_cu_result_t e, const char **s);
    br_cu_result_t (*DeviceGetCount)(int *n);
    br_cu_result_t (*DeviceGet)(br_cu_device_t *d, int ordinal);
    br_cu_result_t (*DeviceGetAttribute)(int *v, int attr, br_cu_device_t d);
    br_cu_result_t (*DeviceGetName)(char *name, int len, br_cu_device_t d);
    br_cu_result_t (*DeviceGetPCIBusId)(char *busid, int len, br_cu_device_t d); /* optional */
    br_cu_result_t (*DeviceCanAccessPeer)(int *can, br_cu_device_t d, br_cu_device_t peer);
    br_cu_result_t (*DevicePrimaryCtxRetain)(br_cu_context_t *ctx, br_cu_device_t d);
    br_cu_result_t (*DevicePrimaryCtxRelease)(br_cu_device_t d);
    br_cu_result_t (*CtxGetCurrent)(br_cu_context_t *ctx);
    br_cu_result_t (*CtxSetCurrent)(br_cu_context_t ctx);
    br_cu_result_t (*CtxGetDevice)(br_cu_device_t *d);
    br_cu_result_t (*CtxEnablePeerAccess)(br_cu_context_t peer, unsigned flags);
    br_cu_result_t (*PointerGetAttributes)(unsigned n, int *attrs, void **data, br_cu_ptr_t p);
    br_cu_result_t (*MemAlloc)(br_cu_ptr_t *p, size_t bytes);
    br_cu_result_t (*MemFree)(br_cu_ptr_t p);
    br_cu_result_t (*MemHostAlloc)(void **p, size_t bytes, unsigned flags);
    br_cu_result_t (*MemFreeHost)(void *p);
    br_cu_result_t (*MemHostGetDevicePointer)(br_cu_ptr_t *d, void *h, unsigned flags);
    /* Only the stream-ordered memset and copies: the synchronous ones return before their
     * bytes land and do not order with non-blocking streams (docs/cuda.md). */
    br_cu_result_t (*MemsetD8Async)(br_cu_ptr_t p, unsigned char v, size_t n, br_cu_stream_t s);
    br_cu_result_t (*MemcpyHtoDAsync)(br_cu_ptr_t dst, const void *src, size_t n, br_cu_stream_t s);
    br_cu_result_t (*MemcpyDtoHAsync)(void *dst, br_cu_ptr_t src, size_t n, br_cu_stream_t s);
    br_cu_result_t (*ModuleLoadData)(br_cu_module_t *m, const void *image);
    br_cu_result_t (*ModuleGetFunction)(br_cu_function_t *f, br_cu_module_t m, const char *name);
    br_cu_result_t (*OccupancyMaxActiveBlocksPerMultiprocessor)(int *n, br_cu_function_t f,
                                                                int threads, size_t smem);
    br_cu_result_t (*LaunchKernel)(br_cu_function_t f, unsigned gx, unsigned gy, unsigned gz,
                                   unsigned bx, unsigned by, unsigned bz, unsigned smem,
                                   br_cu_stream_t s, void **params, void **extra);
    /* Every block resident at once or none (CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE). */
    br_cu_result_t (*LaunchCooperativeKernel)(br_cu_function_t f, unsigned gx, unsigned gy,
                                              unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                              unsigned smem, br_cu_stream_t s, void **params);
    br_cu_result_t (*StreamCreate)(br_cu_stream_t *s, unsigned flags);
    br_cu_result_t (*StreamDestroy)(br_cu_stream_t s);
    br_cu_result_t (*StreamSynchronize)(br_cu_stream_t s);
    br_cu_result_t (*StreamQuery)(br_cu_stream_t s);
    br_cu_result_t (*StreamWaitEvent)(br_cu_stream_t s, br_cu_event_t e, unsigned flags);
    br_cu_result_t (*StreamWaitValue32)(br_cu_stream_t s, br_cu_ptr_t addr, uint32_t value,
                                        unsigned flags);
    br_cu_result_t (*StreamWriteValue32)(br_cu_stream_t s, br_cu_ptr_t addr, uint32_t value,
                                         unsigned flags);
    br_cu_result_t (*StreamIsCapturing)(br_cu_stream_t s, int *status);
    /* Swaps this thread's capture mode with *mode (CUstreamCaptureMode). */
    br_cu_result_t (*ThreadExchangeStreamCaptureMode)(int *mode);
    /* Optional (NULL where the driver lacks them): device memory shared between processes,
     * and 64-bit stream memory operations (exec_cuda_stage.c's direct path). */
    br_cu_result_t (*IpcGetMemHandle)(br_cu_ipc_handle_t *h, br_cu_ptr_t p);
    br_cu_result_t (*IpcOpenMemHandle)(br_cu_ptr_t *p, br_cu_ipc_handle_t h, unsigned flags);
    br_cu_result_t (*IpcCloseMemHandle)(br_cu_ptr_t p);
    /* Host memory made reachable by the device (the direct path's inboxes). */
    br_cu_result_t (*MemHostRegister)(void *p, size_t bytes, unsigned flags);
    br_cu_result_t (*MemHostUnregister)(void *p);
    br_cu_result_t (*MemcpyAsync)(br_cu_ptr_t dst, br_cu_ptr_t src, size_t n, br_cu_stream_t s);
    br_cu_result_t (*StreamWaitValue64)(br_cu_stream_t s, br_cu_ptr_t addr, uint64_t value,
                                        unsigned flags);
    br_cu_result_t (*StreamWriteValue64)(br_cu_stream_t s, br_cu_ptr_t addr, uint64_t value,
                                         unsigned flags);
    br_cu_result_t (*EventQuery)(br_cu_event_t e);
    br_cu_result_t (*EventCreate)(br_cu_event_t *e, unsigned flags);
    br_cu_result_t (*EventDestroy)(br_cu_event_t e);
    br_cu_result_t (*EventRecord)(br_cu_event_t e, br_cu_stream_t s);
    br_cu_result_t (*EventSynchronize)(br_cu_event_t e);
    int driver_version; /* e.g. 13000 */
    int ndevices;
} br_cuda_t;

/* Does the process use CUDA (is libcuda.so.1 loaded in it)? Cheap after the first yes. */
int br_cuda_in_process(void);

/*
 * The driver, loaded and initialised on first call (once per process), or NULL with the
 * reason in *why (a static string: "BRAID_CUDA=0", "libcuda.so.1 not found: ...", "no CUDA
 * device", ...). The first call logs one INFO line: the driver version and devices, or why
 * none. Thread-safe.
 */
const br_cuda_t *br_cuda(const char **why);

/* Where a pointer lives. */
typedef enum {
    BR_MEM_HOST = 0,   /* ordinary or pinned host memory: the host executor's */
    BR_MEM_DEVICE = 1, /* device memory of *device */
    BR_MEM_MANAGED = 2 /* managed (unified) memory, preferred on *device */
} br_mem_kind_t;

/*
 * Classify p. Without CUDA in the process every pointer is host memory and nothing is
 * loaded. With it, the driver's pointer attributes decide (pinned and registered host
 * memory count as host). Never fails: a pointer the driver does not know is host memory.
 */
br_mem_kind_t br_cuda_ptr_kind(const void *p, int *device);

/* "host memory", "device memory", "managed memory". */
const char *br_mem_kind_name(br_mem_kind_t kind);

/* The current device of the calling thread as the runtime would say (cudaGetDevice): the
 * device of the current context, else 0. Returns -1 when the process does not use CUDA. */
int br_cuda_current_device(void);

/* Text of a driver error, for messages ("CUDA_ERROR_..." name and code). */
const char *br_cuda_error_string(br_cu_result_t e);

#endif /* BR_UTIL_CUDA_H_ */
