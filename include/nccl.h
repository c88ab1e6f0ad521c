/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Braid's public API: NCCL 2.32's names, enum values and struct layouts, written for
 * Braid so that programs built for NCCL compile and link against it unchanged.
 * Compiles as C99, C11 and C++, with or without the CUDA toolkit installed; a
 * host-only user has no cuda_runtime.h, so cudaStream_t is declared here when the
 * CUDA runtime header is absent (it is the same type CUDA declares); where it is in,
 * cuda_fp16.h, cuda_bf16.h and (C++) cuda_fp8.h come with nccl.h, as with NCCL's.
 */
#ifndef NCCL_H_
#define NCCL_H_

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#if defined(CUDART_VERSION) || defined(__CUDA_RUNTIME_H__)
/* The CUDA runtime header is already in: cudaStream_t comes from it. */
#elif !defined(BRAID_NO_CUDA_RUNTIME_H) && defined(__has_include)
#if __has_include(<cuda_runtime.h>)
#include <cuda_runtime.h>
#else
#define BRAID_DECLARE_CUDA_TYPES_
#endif
#else
#define BRAID_DECLARE_CUDA_TYPES_
#endif
#ifdef BRAID_DECLARE_CUDA_TYPES_
/* The same types cuda_runtime.h declares (a later include of it repeats them). */
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
#undef BRAID_DECLARE_CUDA_TYPES_
#elif defined(CUDART_VERSION)
/* With the CUDA runtime, the half-precision headers too, as NCCL's nccl.h has them: NCCL
 * programs (nccl-tests among them) use __half and __nv_bfloat16 having included only it. */
#include <cuda_fp16.h>
#if CUDART_VERSION >= 11000
#include <cuda_bf16.h>
#endif
#if defined(__cplusplus) && CUDART_VERSION >= 11080
#include <cuda_fp8.h>
#endif
#endif

#define NCCL_MAJOR 2
#define NCCL_MINOR 32
#define NCCL_PATCH 3
#define NCCL_SUFFIX ""

#define NCCL_VERSION_CODE 23203
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
    ncclTimeout = 8, /* a wait ran past its limit (BRAID_TIMEOUT, a socket deadline, ...) */
    ncclNumResults = 9
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_UNDEF_FLOAT -1.0f

/* The magic of every versioned struct (ncclConfig_t, ncclCollConfig_t, ...). */
#define NCCL_API_MAGIC 0xcafebeef

/* Window registration flags. */
#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#define NCCL_WIN_STRICT_ORDERING 0x02
#define NCCL_WIN_GIN_ONLY 0x04    /* GPU-initiated networking only (2.30) */
#define NCCL_WIN_CFT_COUNTED 0x08 /* counted CFT entries only (2.32) */
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

/* ncclConfig_t.hostCftMode (2.31). */
typedef enum {
    ncclHostCftDefault = NCCL_CONFIG_UNDEF_INT,
    ncclHostCftEnable = 1,
    ncclHostCftDisable = 2,
    ncclHostCftFallback = 3
} ncclHostCftMode_t;

/* ncclConfig_t.nvlsHostMode (2.31): NVLS components to turn off, or'ed. */
typedef enum {
    ncclNvlsHostModeDefault = NCCL_CONFIG_UNDEF_INT,
    ncclNvlsHostModeEnable = 0,
    ncclNvlsHostModeDisableTransport = 1 << 0,
    ncclNvlsHostModeDisableSymmetricMultimem = 1 << 1,
    ncclNvlsHostModeDisable = INT_MAX
} ncclNvlsHostMode_t;

/*
 * Communicator configuration (120 bytes on LP64). Initialise with NCCL_CONFIG_INITIALIZER:
 * size, magic and version let the library accept the layouts of older headers (48 bytes
 * up to 2.26, 72 in 2.27, 80 in 2.28, 88 in 2.29, 96 in 2.30) and of newer ones. The
 * struct only grows at its end.
 */
typedef struct ncclConfig_v23100 {
    size_t size;           /* sizeof(ncclConfig_t) of the caller's header */
    unsigned int magic;    /* NCCL_API_MAGIC */
    unsigned int version;  /* NCCL_VERSION_CODE of the caller's header */
    int blocking;          /* 1 (default): calls block; 0: may return ncclInProgress */
    int cgaClusterSize;    /* CUDA thread-block cluster size */
    int minCTAs;           /* fewest channels per collective */
    int maxCTAs;           /* most channels per collective */
    const char *netName;   /* force a network by name, like NCCL_NET */
    int splitShare;        /* share the parent's resources on split */
    int trafficClass;      /* QoS value handed to the net plugin (2.26) */
    const char *commName;  /* label for logs and the profiler (2.27) */
    int collnetEnable;     /* enable in-network reductions (2.27) */
    int CTAPolicy;         /* NCCL_CTA_POLICY_* (2.27) */
    int shrinkShare;       /* share the parent's resources on shrink (2.27) */
    int nvlsCTAs;          /* CTAs for NVLS kernels (2.27) */
    int nChannelsPerNetPeer; /* network channels per p2p peer (2.28) */
    int nvlinkCentricSched;  /* NVLink-centric scheduling (2.28) */
    int graphUsageMode;      /* CUDA graph usage (2.29) */
    int numRmaCtx;           /* one-sided contexts (2.29) */
    int maxP2pPeers;         /* most p2p peers at once (2.30) */
    int graphStreamOrdering; /* stream ordering of captured calls (2.30) */
    int launchOrderImplicit; /* implicit launch order across communicators (2.31) */
    int numRmaSig;           /* one-sided signals per context (2.31) */
    int rmaEagerInit;        /* set up one-sided resources at init (2.31) */
    int hostCftMode;         /* ncclHostCftMode_t (2.31) */
    int nvlsHostMode;        /* ncclNvlsHostMode_t (2.31) */
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER                                                                    \
    {                                                                                              \
        sizeof(ncclConfig_t), NCCL_API_MAGIC, NCCL_VERSION_CODE, NCCL_CONFIG_UNDEF_INT,            \
            NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,                   \
            NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,                   \
            NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,                   \
            NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,                   \
            NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,                   \
            NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,                   \
            NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,                   \
            NCCL_CONFIG_UNDEF_INT                                                                  \
    }

/*
 * One vendor option of a per-call configuration (2.31): a key (vendorId, optionId) and a
 * value, chained through next. NVIDIA's NCCL ignores every option; Braid reads the ones
 * with its vendor id (braid.h) and ignores the others.
 */
typedef struct ncclConfigExt {
    struct ncclConfigExt *next; /* next option, or NULL */
    struct {
        int vendorId; /* non-zero, below 2^24, picked by each vendor */
        int optionId; /* the vendor's own option number */
    } key;
    union {
        int i;
        const char *s;
        void *raw;
    } val;
} ncclConfigExt_t;

/*
 * Per-call configuration of the nccl*Config collectives (2.31; 72 bytes on LP64 in 2.32,
 * 64 in 2.31). Initialise with NCCL_COLLCONFIG_INITIALIZER and pass the same values on
 * every rank; a NULL config is the plain call.
 */
typedef struct ncclCollConfig_v23200 {
    size_t size;
    unsigned int magic;       /* NCCL_API_MAGIC */
    unsigned int version;     /* NCCL_VERSION_CODE of the caller's header */
    ncclConfigExt_t *ext;     /* vendor options, or NULL */
    int minCTAs;              /* fewest channels for this call */
    int maxCTAs;              /* most channels for this call */
    int nvlsCTAs;             /* channel cap of NVLS algorithms */
    int cgaClusterSize;       /* CUDA thread-block cluster size */
    const char *algSelection; /* algorithms this call may use ("RING", "TREE", ...); NULL: any */
    int forceAlgSelection;    /* 1 (default): an algorithm that cannot run is an error */
    int CTAPolicy;            /* NCCL_CTA_POLICY_*; UNDEF: the communicator's */
    uint64_t userProfilerTag; /* handed to the profiler with this call's events; 0: none */
    cudaEvent_t launchCompletionEvent; /* recorded when the call's kernel is launched (2.32) */
} ncclCollConfig_t;

#define NCCL_COLLCONFIG_INITIALIZER                                                                \
    {                                                                                              \
        sizeof(ncclCollConfig_t), NCCL_API_MAGIC, NCCL_VERSION_CODE, NCCL_CONFIG_UNDEF_PTR,        \
            NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,                   \
            NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, 1, NCCL_CONFIG_UNDEF_INT, 0,             \
            NCCL_CONFIG_UNDEF_PTR                                                                  \
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
        sizeof(ncclSimInfo_t), 0x74685283, NCCL_VERSION_CODE, NCCL_UNDEF_FLOAT                     \
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

/* ncclCommSuspend flags. */
#define NCCL_SUSPEND_MEM 0x01 /* release the communicator's buffers */

/* What ncclCommMemStats reports. */
typedef enum {
    ncclStatGpuMemSuspend = 0,   /* bytes a suspend releases */
    ncclStatGpuMemSuspended = 1, /* 1 while suspended, else 0 */
    ncclStatGpuMemPersist = 2,   /* bytes a suspend keeps */
    ncclStatGpuMemTotal = 3      /* all bytes the communicator holds */
} ncclCommMemStat_t;

/* One entry of ncclWaitSignal: wait for opCnt signals from peer on (sigIdx, ctx). */
typedef struct {
    int opCnt;
    int peer;
    int sigIdx;
    int ctx;
} ncclWaitSignalDesc_t;

/* ncclSetEncryption (2.32): TLS 1.3 on the library's own TCP connections. */
typedef enum { NCCL_ENCRYPTION_MODE_NONE = 0, NCCL_ENCRYPTION_MODE_PSK = 1 } ncclEncryptionMode_t;

typedef struct ncclEncryptionConfig_v23200 {
    size_t size;
    unsigned int magic;   /* NCCL_API_MAGIC */
    unsigned int version; /* NCCL_VERSION_CODE of the caller's header */
    int mode;             /* ncclEncryptionMode_t */
    const char *psk;      /* NCCL_ENCRYPTION_MODE_PSK: the job's key, at least 32 bytes */
} ncclEncryptionConfig_t;

#define NCCL_ENCRYPTION_CONFIG_INITIALIZER                                                         \
    {                                                                                              \
        sizeof(ncclEncryptionConfig_t), NCCL_API_MAGIC, NCCL_VERSION_CODE,                         \
            NCCL_ENCRYPTION_MODE_NONE, NCCL_CONFIG_UNDEF_PTR                                       \
    }

/* A bound parameter (ncclParamBind); owned by the library, never freed by the caller. */
typedef struct ncclParamHandle *ncclParamHandle_t;

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
/* Growing: an existing rank takes an id for the new ranks, which join with it. */
BRAID_API_PAIR(ncclResult_t, ncclCommGetUniqueId, (ncclComm_t comm, ncclUniqueId *uniqueId));
BRAID_API_PAIR(ncclResult_t, ncclCommGrow,
               (ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId, int rank,
                ncclComm_t *newcomm, ncclConfig_t *config));
/* Suspending: release the communicator's buffers and take them back. */
BRAID_API_PAIR(ncclResult_t, ncclCommSuspend, (ncclComm_t comm, int flags));
BRAID_API_PAIR(ncclResult_t, ncclCommResume, (ncclComm_t comm));
BRAID_API_PAIR(ncclResult_t, ncclCommMemStats,
               (ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *value));

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
BRAID_API_PAIR(ncclResult_t, ncclWinGetUserPtr,
               (ncclComm_t comm, ncclWindow_t win, void **outUserPtr));

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

/* The same collectives with a per-call configuration (NULL: the plain call). */
BRAID_API_PAIR(ncclResult_t, ncclAllReduceConfig,
               (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream,
                const ncclCollConfig_t *config));
BRAID_API_PAIR(ncclResult_t, ncclBroadcastConfig,
               (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                int root, ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t *config));
BRAID_API_PAIR(ncclResult_t, ncclReduceConfig,
               (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream,
                const ncclCollConfig_t *config));
BRAID_API_PAIR(ncclResult_t, ncclAllGatherConfig,
               (const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t *config));
BRAID_API_PAIR(ncclResult_t, ncclReduceScatterConfig,
               (const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
                ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream,
                const ncclCollConfig_t *config));
BRAID_API_PAIR(ncclResult_t, ncclAlltoAllConfig,
               (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t *config));
BRAID_API_PAIR(ncclResult_t, ncclGatherConfig,
               (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                int root, ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t *config));
BRAID_API_PAIR(ncclResult_t, ncclScatterConfig,
               (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                int root, ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t *config));

/* Point to point. */
BRAID_API_PAIR(ncclResult_t, ncclSend,
               (const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                ncclComm_t comm, cudaStream_t stream));
BRAID_API_PAIR(ncclResult_t, ncclRecv,
               (void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                cudaStream_t stream));

/* One-sided: write into a peer's registered window, and count signals. */
BRAID_API_PAIR(ncclResult_t, ncclPutSignal,
               (const void *localbuff, size_t count, ncclDataType_t datatype, int peer,
                ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags,
                ncclComm_t comm, cudaStream_t stream));
BRAID_API_PAIR(ncclResult_t, ncclSignal,
               (int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                cudaStream_t stream));
BRAID_API_PAIR(ncclResult_t, ncclWaitSignal,
               (int nDesc, ncclWaitSignalDesc_t *signalDescs, ncclComm_t comm,
                cudaStream_t stream));

/* Groups. */
BRAID_API_PAIR(ncclResult_t, ncclGroupStart, (void));
BRAID_API_PAIR(ncclResult_t, ncclGroupEnd, (void));
BRAID_API_PAIR(ncclResult_t, ncclGroupSimulateEnd, (ncclSimInfo_t * simInfo));

/* Encryption of the library's own TCP connections, for the whole process. */
BRAID_API_PAIR(ncclResult_t, ncclSetEncryption, (const ncclEncryptionConfig_t *config));

/* Parameters (NCCL_* and BRAID_* settings) by handle, typed, or by key as a string. */
BRAID_API_PAIR(ncclResult_t, ncclParamBind, (ncclParamHandle_t * out, const char *key));
BRAID_API_PAIR(ncclResult_t, ncclParamGetI8, (ncclParamHandle_t h, int8_t *out));
BRAID_API_PAIR(ncclResult_t, ncclParamGetI16, (ncclParamHandle_t h, int16_t *out));
BRAID_API_PAIR(ncclResult_t, ncclParamGetI32, (ncclParamHandle_t h, int32_t *out));
BRAID_API_PAIR(ncclResult_t, ncclParamGetI64, (ncclParamHandle_t h, int64_t *out));
BRAID_API_PAIR(ncclResult_t, ncclParamGetU8, (ncclParamHandle_t h, uint8_t *out));
BRAID_API_PAIR(ncclResult_t, ncclParamGetU16, (ncclParamHandle_t h, uint16_t *out));
BRAID_API_PAIR(ncclResult_t, ncclParamGetU32, (ncclParamHandle_t h, uint32_t *out));
BRAID_API_PAIR(ncclResult_t, ncclParamGetU64, (ncclParamHandle_t h, uint64_t *out));
BRAID_API_PAIR(ncclResult_t, ncclParamGetStr, (ncclParamHandle_t h, const char **out));
BRAID_API_PAIR(ncclResult_t, ncclParamGet, (ncclParamHandle_t h, void *out, int maxLen, int *len));
BRAID_API_PAIR(ncclResult_t, ncclParamGetParameter,
               (const char *key, const char **value, int *valueLen));
BRAID_API_PAIR(ncclResult_t, ncclParamGetAllParameterKeys, (const char ***table, int *tableLen));
BRAID_API_PAIR(void, ncclParamDumpAll, (void));

#undef BRAID_API_PAIR

#ifdef __cplusplus
}
#endif

#endif /* NCCL_H_ */
