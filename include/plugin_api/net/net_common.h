/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Constants shared by every net plugin ABI version (values as in NCCL 2.28 and 2.30).
 */
#ifndef BRAID_PLUGIN_API_NET_COMMON_H_
#define BRAID_PLUGIN_API_NET_COMMON_H_

#include "../common.h"

#define NCCL_NET_HANDLE_MAXSIZE 128   /* bytes of the opaque connection handle */
#define NCCL_PTR_HOST 0x1             /* host memory */
#define NCCL_PTR_CUDA 0x2             /* GPU memory (GPUDirect RDMA) */
#define NCCL_PTR_DMABUF 0x4           /* the plugin implements regMrDmaBuf */
#define NCCL_NET_MAX_REQUESTS 32      /* outstanding requests each comm must accept */
#define NCCL_NET_OPTIONAL_RECV_COMPLETION 0x1 /* hint stored in *request before irecv */
#define NCCL_NET_MULTI_REQUEST 0x2
#define NCCL_MAX_NET_SIZE_BYTES (1ULL << 40) /* largest maxP2pBytes/maxCollBytes accepted */
#define NCCL_NET_TRAFFIC_CLASS_UNDEF -1
#define NCCL_NET_ATTR_UNDEF -1
#define NCCL_NET_ID_UNDEF -1
#define NCCL_NET_DEVICE_INVALID_VERSION 0x0
#define NCCL_NET_MTU_SIZE 4096

/* Device offload kind of a net device; host-only plugins report NCCL_NET_DEVICE_HOST. */
typedef enum {
    NCCL_NET_DEVICE_HOST = 0,
    NCCL_NET_DEVICE_UNPACK = 1,
    NCCL_NET_DEVICE_GIN_PROXY = 2,
    NCCL_NET_DEVICE_GIN_GDAKI = 3
} ncclNetDeviceType;

#endif /* BRAID_PLUGIN_API_NET_COMMON_H_ */
