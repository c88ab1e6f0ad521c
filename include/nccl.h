/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Braid's public API: NCCL 2.28's names, enum values and struct layouts, written for
 * Braid so that programs built for NCCL compile and link against it unchanged.
 * Compiles as C99, C11 and C++, with or without the CUDA toolkit installed; a
 * host-only user has no cuda_runtime.h, so cudaStream_t is declared here when the
 * CUDA runtime header is absent (it is the same type CUDA declares).
 */
#ifndef NCCL_H_
#define NCCL_H_

#include <limits.h>
#include <stddef.h>

#if defined(CUDART_VERSION) || defined(__CUDA_RUNTIME_H__)
/* The CUDA runtime header is already in: cudaStream_t comes from it. */
#elif !defined(BRAID_NO_CUDA_RUNTIME_H) && defined(__has_include)
#if __has_include(<cuda_runtime.h>)
#include <cuda_runtime.h>
#else
typedef struct CUstream_st *cudaStream_t;
#endif
#else
typedef struct CUstream_st *cudaStream_t;
#endif

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 9
#define NCCL_SUFFIX ""

#define NCCL_VERSION_CODE 22809
#define NCCL_VERSION(X, Y, Z)                                                                      \
    (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque handles. */
typedef struct ncclComm *ncclComm_t;
typedef struct ncclWindow_vidmem *ncclWindow_t;
#define NCCL_COMM_NULL NULL

#define NCCL_UNIQUE_ID_BYTES 128
/* The bootstrap id every rank of a communicator must share before init. */
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

/* Result codes. */
typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
    ncclNumResults = 8
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_UNDEF_FLOAT -1.0f

/* Window registration flags. */
#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096

/* CTA policies. */
#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02

/* ncclCommShrink flags. */
#define NCCL_SHRINK_DEFAULT 0x00
#define NCCL_SHRINK_ABORT 0x01

/* ncclCommRevoke flags (reserved, must be 0). */
#define NCCL_REVOKE_DEFAULT 0x00

/*
 * Communicator configuration (80 bytes on LP64). Initialise with NCCL_CONFIG_INITIALIZER:
 * size, magic and version let the library accept layouts of older and newer headers.
 */
typedef struct ncclConfig_v22800 {
    size_t size;           /* sizeof(ncclConfig_t) of the caller's header */
    unsigned int magic;    /* 0xcafebeef */
    unsigned int version;  /* NCCL_VERSION() of the caller's header */
    int blocking;          /* 1 (default): calls block; 0: may return ncclInProgress */
    int cgaClusterSize;    /* CUDA thread-block cluster size */
    int minCTAs;           /* fewest channels per collective */
    int maxCTAs;           /* most channels per collective */
    const char *netName;   /* force a network by name, like NCCL_NET */
    int splitShare;        /* share the parent's resources on split */
    int trafficClass;      /* QoS value handed to the net plugin */
    const char *commName;  /* label for logs and the profiler */
    int collnetEnable;     /* enable in-network reductions */
    int CTAPolicy;         /* NCCL_CTA_POLICY_* */
    int shrinkShare;       /* share the parent's resources on shrink */
    int nvlsCTAs;          /* CTAs for NVLS kernels */
    int nChannelsPerNetPeer; /* network channels per p2p peer */
    int nvlinkCentricSched;  /* NVLink-centric scheduling */
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER                                                                    \
    {                                                                                              \
        sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH),       \
            NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,                   \
            NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,                   \
            NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,                   \
            NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,                   \
            NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT                                           \
    }

/* Result of ncclGroupSimulateEnd (24 bytes). */
typedef struct ncclSimInfo_v22200 {
    size_t size;
    unsigned int magic; /* 0x74685283 */
    unsigned int version;
    float estimatedTime; /* microseconds; -1 until simulated */
} ncclSimInfo_t;

#define NCCL_SIM_INFO_INITIALIZER                                                                  \
    {                                                                                              \
        sizeof(ncclSimInfo_t), 0x74685283, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH),      \
            NCCL_UNDEF_FLOAT                                                                       \
    }

/* Reduction operations. User-created ops (ncclRedOpCreatePreMulSum) start at ncclNumOps. */
typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum {
    ncclSum = 0,
    ncclProd = 1,
    ncclMax = 2,
    ncclMin = 3,
    ncclAvg = 4,
    ncclNumOps = 5,
    ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

/* Data types. */
typedef enum {
    ncclInt8 = 0,
    ncclChar = 0,
    ncclUint8 = 1,
    ncclInt32 = 2,
    ncclInt = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6,
    ncclHalf = 6,
    ncclFloat32 = 7,
    ncclFloat = 7,
    ncclFloat64 = 8,
    ncclDouble = 8,
    ncclBfloat16 = 9,
    ncclFloat8e4m3 = 10,
    ncclFloat8e5m2 = 11,
    ncclNumTypes = 12
} ncclDataType_t;

/* Where the scalar of ncclRedOpCreatePreMulSum lives. */
typedef enum { ncclScalarDevice = 0, ncclScalarHostImmediate = 1 } ncclScalarResidence_t;

/*
 * Every entry point has a pnccl twin with the same signature (the profiling and
 * interposition entry). BRAID_API_PAIR declares both.
 */
#define BRAID_API_PAIR(ret, name, args)                                                            \
    ret name args;                                                                                 \
    ret p##name args

/* Memory, version and ids. */
BRAID_API_PAIR(ncclResult_t, ncclMemAlloc, (void **ptr, size_t size));
BRAID_API_PAIR(ncclResult_t, ncclMemFree, (void *ptr));
BRAID_API_PAIR(ncclResult_t, ncclGetVersion, (int *version));
BRAID_API_PAIR(ncclResult_t, ncclGetUniqueId, (ncclUniqueId * uniqueId));

/* Communicator life cycle. */
BRAID_API_PAIR(ncclResult_t, ncclCommInitRankConfig,
               (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank,
                ncclConfig_t *config));
BRAID_API_PAIR(ncclResult_t, ncclCommInitRank,
               (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank));
BRAID_API_PAIR(ncclResult_t, ncclCommInitAll, (ncclComm_t * comm, int ndev, const int *devlist));
BRAID_API_PAIR(ncclResult_t, ncclCommInitRankScalable,
               (ncclComm_t * newcomm, int nranks, int myrank, int nId, ncclUniqueId *commIds,
                ncclConfig_t *config));
BRAID_API_PAIR(ncclResult_t, ncclCommFinalize, (ncclComm_t comm));
BRAID_API_PAIR(ncclResult_t, ncclCommDestroy, (ncclComm_t comm));
BRAID_API_PAIR(ncclResult_t, ncclCommAbort, (ncclComm_t comm));
BRAID_API_PAIR(ncclResult_t, ncclCommRevoke, (ncclComm_t comm, int revokeFlags));
BRAID_API_PAIR(ncclResult_t, ncclCommSplit,
               (ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config));
BRAID_API_PAIR(ncclResult_t, ncclCommShrink,
               (ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
                ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags));

/* Queries and errors. */
BRAID_API_PAIR(const char *, ncclGetErrorString, (ncclResult_t result));
BRAID_API_PAIR(const char *, ncclGetLastError, (ncclComm_t comm));
BRAID_API_PAIR(void, ncclResetDebugInit, (void));
BRAID_API_PAIR(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t *asyncError));
BRAID_API_PAIR(ncclResult_t, ncclCommCount, (const ncclComm_t comm, int *count));
BRAID_API_PAIR(ncclResult_t, ncclCommCuDevice, (const ncclComm_t comm, int *device));
BRAID_API_PAIR(ncclResult_t, ncclCommUserRank, (const ncclComm_t comm, int *rank));

/* Registration and windows. */
BRAID_API_PAIR(ncclResult_t, ncclCommRegister,
               (const ncclComm_t comm, void *buff, size_t size, void **handle));
BRAID_API_PAIR(ncclResult_t, ncclCommDeregister, (const ncclComm_t comm, void *handle));
BRAID_API_PAIR(ncclResult_t, ncclCommWindowRegister,
               (ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win, int winFlags));
BRAID_API_PAIR(ncclResult_t, ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win));

/* Reduction operators. */
BRAID_API_PAIR(ncclResult_t, ncclRedOpCreatePreMulSum,
               (ncclRedOp_t * op, void *scalar, ncclDataType_t datatype,
                ncclScalarResidence_t residence, ncclComm_t comm));
BRAID_API_PAIR(ncclResult_t, ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t comm));

/* Collectives. With host buffers Braid completes the call before it returns (inside a
 * group: before ncclGroupEnd returns). */
BRAID_API_PAIR(ncclResult_t, ncclReduce,
               (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream));
BRAID_API_PAIR(ncclResult_t, ncclBcast,
               (void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                cudaStream_t stream));
BRAID_API_PAIR(ncclResult_t, ncclBroadcast,
               (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                int root, ncclComm_t comm, cudaStream_t stream));
BRAID_API_PAIR(ncclResult_t, ncclAllReduce,
               (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream));
BRAID_API_PAIR(ncclResult_t, ncclReduceScatter,
               (const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
                ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream));
BRAID_API_PAIR(ncclResult_t, ncclAllGather,
               (const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                ncclComm_t comm, cudaStream_t stream));
BRAID_API_PAIR(ncclResult_t, ncclAlltoAll,
               (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                ncclComm_t comm, cudaStream_t stream));
BRAID_API_PAIR(ncclResult_t, ncclGather,
               (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                int root, ncclComm_t comm, cudaStream_t stream));
BRAID_API_PAIR(ncclResult_t, ncclScatter,
               (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                int root, ncclComm_t comm, cudaStream_t stream));

/* Point to point. */
BRAID_API_PAIR(ncclResult_t, ncclSend,
               (const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                ncclComm_t comm, cudaStream_t stream));
BRAID_API_PAIR(ncclResult_t, ncclRecv,
               (void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                cudaStream_t stream));

/* Groups. */
BRAID_API_PAIR(ncclResult_t, ncclGroupStart, (void));
BRAID_API_PAIR(ncclResult_t, ncclGroupEnd, (void));
BRAID_API_PAIR(ncclResult_t, ncclGroupSimulateEnd, (ncclSimInfo_t * simInfo));

#undef BRAID_API_PAIR

#ifdef __cplusplus
}
#endif

#endif /* NCCL_H_ */
