/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tuner plugin ABI version 7 (NCCL 2.32): symbol "ncclTunerPlugin_v7", type
 * ncclTuner_v7_t, 5 slots (40 bytes on LP64). Frozen: a released version is never
 * edited; a change is a new version file. The newest version NCCL 2.32 loads.
 *
 * What v7 changed over v6: the tuning constants have one more GPU generation
 * (NCCL_NUM_COMPCAPS_V7 = 5 rows instead of 4 in the five bandwidth tables), so the
 * constants struct is 1272 bytes and every table after llMaxBws moves. The function
 * list, the NVLink domain info and the meaning of every slot are v6's.
 *
 * Life cycle and threading: as v6 (tuner_v6.h).
 */
#ifndef BRAID_PLUGIN_API_TUNER_V7_H_
#define BRAID_PLUGIN_API_TUNER_V7_H_

#include "tuner_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* GPU generations of the v7 bandwidth tables (v2-v6: NCCL_NUM_COMPCAPS, 4). */
#define NCCL_NUM_COMPCAPS_V7 5

/* NVLink domains of the communicator (12 bytes), as v6. Core-owned; valid during init. */
typedef struct {
    int nNvlDomains;          /* number of NVLink domains (nodes) */
    int minRanksPerNvlDomain; /* fewest ranks in one domain */
    int maxRanksPerNvlDomain; /* most ranks in one domain */
} ncclNvlDomainInfo_v7_t;

/*
 * The core's tuning constants (1272 bytes of double), passed to init for the plugin to
 * edit, as in v6. Latencies in microseconds, bandwidths in GB/s. A core with fewer GPU
 * generations of its own fills the rows it has and leaves the others 0.
 */
typedef struct {
    /* Base latency of each (algorithm, protocol). Offset 0. */
    double baseLatencies[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
    /* Per-hop latency by link kind (NCCL_HW_*), algorithm, protocol. Offset 168. */
    double hwLatencies[NCCL_NUM_HW_LINKS][NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
    /* LL bandwidth ceiling by GPU generation and scale. Offset 672. */
    double llMaxBws[NCCL_NUM_COMPCAPS_V7][NCCL_NUM_TUNING_SCALES];
    /* Per-channel ceilings: ring/LL128 (792), tree/LL128 (912), tree (1032),
     * NVLS tree (1152). */
    double perChMaxRingLL128Bws[NCCL_NUM_COMPCAPS_V7][NCCL_NUM_TUNING_SCALES];
    double perChMaxTreeLL128Bws[NCCL_NUM_COMPCAPS_V7][NCCL_NUM_TUNING_SCALES];
    double perChMaxTreeBws[NCCL_NUM_COMPCAPS_V7][NCCL_NUM_TUNING_SCALES];
    double perChMaxNVLSTreeBws[NCCL_NUM_COMPCAPS_V7][NCCL_NUM_TUNING_SCALES];
} ncclTunerConstants_v7_t;

/* The tuner's function table (5 slots): v6's, with the v7 constants and domain types.
 * Every function returns ncclResult_t; tuner_v6.h documents each slot. */
typedef struct {
    /* Slot 0. Name of the tuner, for logs. Plugin-owned static storage. */
    const char *name;
    /* Slot 1. Create the per-communicator context; may edit *constants now. */
    ncclResult_t (*init)(void **ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                         ncclDebugLogger_t logFunction, ncclNvlDomainInfo_v7_t *nvlDomainInfo,
                         ncclTunerConstants_v7_t *constants);
    /* Slot 2. Edit the cost table of one collective (address of a contiguous numAlgo x
     * numProto float table) and optionally set *nChannels. */
    ncclResult_t (*getCollInfo)(void *ctx, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                                float **collCostTable, int numAlgo, int numProto, int regBuff,
                                int *nChannels);
    /* Slot 3. Destroy the context of init. */
    ncclResult_t (*finalize)(void *ctx);
    /* Slot 4. Optional: adjust the chosen chunk size (NULL keeps the core's). */
    ncclResult_t (*getChunkSize)(void *ctx, ncclFunc_t collType, size_t nBytes, int algo, int proto,
                                 int nChannels, size_t *chunkSize);
} ncclTuner_v7_t;

#ifdef __cplusplus
}
#endif

#endif /* BRAID_PLUGIN_API_TUNER_V7_H_ */
