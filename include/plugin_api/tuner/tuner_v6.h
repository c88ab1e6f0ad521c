/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tuner plugin ABI version 6 (NCCL 2.30): symbol "ncclTunerPlugin_v6", type
 * ncclTuner_v6_t, 5 slots (40 bytes on LP64). Frozen: a released version is never
 * edited; a change is a new version file. The newest version NCCL 2.30 loads.
 *
 * What v6 added over v5: an optional getChunkSize appended as the last slot (slot 4).
 * Slots 0-3 and the auxiliary types have v5's layout, under their own v6 names.
 *
 * Life cycle: the library is opened once per process; init/finalize run once per
 * communicator, so a plugin keeps all per-communicator state behind its context.
 * Threading: init and finalize are called from communicator init/destroy; getCollInfo
 * from the thread enqueuing the operation. Two communicators may call into the plugin
 * concurrently, each with its own context; calls for one context are never concurrent.
 * No member may block.
 */
#ifndef BRAID_PLUGIN_API_TUNER_V6_H_
#define BRAID_PLUGIN_API_TUNER_V6_H_

#include "tuner_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * NVLink domains of the communicator (12 bytes). NCCL 2.30 fills it with the number of
 * nodes and the smallest and largest number of ranks per node. Core-owned; valid during
 * init only (copy what you need).
 */
typedef struct {
    int nNvlDomains;          /* number of NVLink domains (nodes) */
    int minRanksPerNvlDomain; /* fewest ranks in one domain */
    int maxRanksPerNvlDomain; /* most ranks in one domain */
} ncclNvlDomainInfo_v6_t;

/*
 * The core's tuning constants (1152 bytes of double). The core copies its defaults into
 * a per-communicator instance, passes it to init, and builds its model from it after
 * init returns: the plugin may overwrite any entry during init, and must not keep the
 * pointer (it is core-owned and not read again after the model is built). Latencies in
 * microseconds, bandwidths in GB/s.
 */
typedef struct {
    /* Base latency of each (algorithm, protocol). Offset 0. */
    double baseLatencies[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
    /* Per-hop latency by link kind (NCCL_HW_*), algorithm, protocol. Offset 168. */
    double hwLatencies[NCCL_NUM_HW_LINKS][NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
    /* LL bandwidth ceiling by GPU generation and scale. Offset 672. */
    double llMaxBws[NCCL_NUM_COMPCAPS][NCCL_NUM_TUNING_SCALES];
    /* Per-channel ceilings: ring/LL128 (768), tree/LL128 (864), tree (960),
     * NVLS tree (1056). NCCL's example tuner header omits the last array; the core
     * always provides all five. */
    double perChMaxRingLL128Bws[NCCL_NUM_COMPCAPS][NCCL_NUM_TUNING_SCALES];
    double perChMaxTreeLL128Bws[NCCL_NUM_COMPCAPS][NCCL_NUM_TUNING_SCALES];
    double perChMaxTreeBws[NCCL_NUM_COMPCAPS][NCCL_NUM_TUNING_SCALES];
    double perChMaxNVLSTreeBws[NCCL_NUM_COMPCAPS][NCCL_NUM_TUNING_SCALES];
} ncclTunerConstants_v6_t;

/* The tuner's function table (5 slots). Every function returns ncclResult_t. */
typedef struct {
    /* Slot 0. Name of the tuner, for logs. Plugin-owned static storage. Since v1. */
    const char *name;

    /*
     * Slot 1. Create the per-communicator context.
     * In:  commId        - the communicator hash (same value the profiler and net see)
     *      nRanks        - ranks in the communicator
     *      nNodes        - nodes in the communicator
     *      logFunction   - the core's logger; valid until the library is closed
     *      nvlDomainInfo - NVLink domains (core-owned, valid during the call)
     *      constants     - tuning constants the plugin may edit now (see above)
     * Out: *ctx          - plugin-owned context, passed to every later call and
     *                      released by finalize.
     * A non-success return fails communicator creation. May allocate; must not block.
     * This argument list since v5 (v4 had ctx last and no commId/domains/constants).
     */
    ncclResult_t (*init)(void **ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                         ncclDebugLogger_t logFunction, ncclNvlDomainInfo_v6_t *nvlDomainInfo,
                         ncclTunerConstants_v6_t *constants);

    /*
     * Slot 2. Influence the choice of algorithm, protocol and channels of one
     * collective.
     * In:  ctx           - from init
     *      collType      - the collective (0..NCCL_NUM_FUNCTIONS-1 in practice)
     *      nBytes        - message size the core tunes on (per-rank count x type size)
     *      numPipeOps    - operations aggregated into one launch (1 unless grouped)
     *      collCostTable - really float (*)[NCCL_NUM_PROTOCOLS]: the address of a
     *                      contiguous row-major numAlgo x numProto float table, not an
     *                      array of row pointers. Each entry holds the core's estimated
     *                      time in microseconds, or NCCL_ALGO_PROTO_IGNORE (-1.0) when
     *                      the combination is unavailable.
     *      numAlgo, numProto - table dimensions (NCCL_NUM_ALGORITHMS, NCCL_NUM_PROTOCOLS)
     *      regBuff       - 1 when the user buffers are registered (or graph-registered)
     * In/out: the table - the plugin may lower or raise available entries; the core
     *                      picks the smallest entry >= 0 (ties: lowest algorithm, then
     *                      lowest protocol), so writing 0.0 forces a choice. Writing
     *                      -1.0 forbids one; making an unavailable entry available is
     *                      a plugin error the core may reject.
     * Out: *nChannels    - preset to 0 by the core; leave 0 to keep the core's channel
     *                      count, or set a positive count to replace it.
     * The table is core-owned and valid during the call only. A non-success return fails
     * the collective (in NCCL 2.28 and 2.30, despite older comments saying otherwise).
     * Called on the enqueue path: keep it fast; must not block. regBuff since v4.
     */
    ncclResult_t (*getCollInfo)(void *ctx, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                                float **collCostTable, int numAlgo, int numProto, int regBuff,
                                int *nChannels);

    /* Slot 3. Destroy the context of init (once per successful init). Must not block.
     * Named destroy up to v4. */
    ncclResult_t (*finalize)(void *ctx);

    /*
     * Slot 4. Adjust the chunk size of the (algo, proto, nChannels) the core chose for
     * this collective.
     * In:     ctx, collType, nBytes as for getCollInfo; algo/proto - the chosen
     *         NCCL_ALGO_* / NCCL_PROTO_*; nChannels - the channel count in use
     * In/out: *chunkSize - the core's chunk size in bytes on entry; the plugin may
     *         change it. The core clamps the result to what its buffers allow and
     *         aligns it down to the protocol's grain.
     * Optional: NULL keeps the core's chunk sizes. Called on the enqueue path after
     * getCollInfo; must not block. Since v6.
     */
    ncclResult_t (*getChunkSize)(void *ctx, ncclFunc_t collType, size_t nBytes, int algo, int proto,
                                 int nChannels, size_t *chunkSize);
} ncclTuner_v6_t;

#ifdef __cplusplus
}
#endif

#endif /* BRAID_PLUGIN_API_TUNER_V6_H_ */
