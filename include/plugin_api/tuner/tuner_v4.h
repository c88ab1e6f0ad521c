/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tuner plugin ABI version 4 (NCCL 2.24): symbol "ncclTunerPlugin_v4", type
 * ncclTuner_v4_t, 4 slots (32 bytes on LP64). Frozen: a released version is never
 * edited; a change is a new version file.
 *
 * What v4 added over v3: getCollInfo takes regBuff (whether the user buffers are
 * registered) before nChannels. init still takes the context out-parameter last and
 * has no communicator hash or tuning constants.
 *
 * Life cycle: the library is opened once per process; init/destroy run once per
 * communicator. Threading: init and destroy are called from communicator init/destroy;
 * getCollInfo from the thread enqueuing the operation. Two communicators may call in
 * concurrently, each with its own context. No member may block.
 */
#ifndef BRAID_PLUGIN_API_TUNER_V4_H_
#define BRAID_PLUGIN_API_TUNER_V4_H_

#include "tuner_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The tuner's function table (4 slots). Every function returns ncclResult_t. */
typedef struct {
    /* Slot 0. Name of the tuner, for logs. Plugin-owned static storage. Since v1. */
    const char *name;

    /*
     * Slot 1. Create the per-communicator context.
     * In:  nRanks, nNodes - size of the communicator
     *      logFunction    - the core's logger; valid until the library is closed
     * Out: *context       - plugin-owned, passed to later calls, released by destroy.
     * A non-success return fails communicator creation. Must not block. Context
     * argument since v2.
     */
    ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction,
                         void **context);

    /*
     * Slot 2. Influence the choice of algorithm, protocol and channels of one
     * collective, through the cost table.
     * In:  context, collType (0..NCCL_NUM_FUNCTIONS-1), nBytes, numPipeOps
     *      collCostTable - address of a contiguous row-major numAlgo x numProto float
     *                      table (cast it to float (*)[NCCL_NUM_PROTOCOLS]); entries are
     *                      estimated microseconds or -1.0 (unavailable)
     *      numAlgo, numProto - NCCL_NUM_ALGORITHMS, NCCL_NUM_PROTOCOLS
     *      regBuff       - 1 when the user buffers are registered
     * In/out: the table - the core picks the smallest entry >= 0; 0.0 forces a choice,
     *                      -1.0 forbids one. Core-owned, valid during the call.
     * Out: *nChannels    - preset to 0 (keep the core's count); positive replaces it.
     * A non-success return fails the collective. Must not block. regBuff since v4; the
     * cost table since v3.
     */
    ncclResult_t (*getCollInfo)(void *context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                                float **collCostTable, int numAlgo, int numProto, int regBuff,
                                int *nChannels);

    /* Slot 3. Destroy the context of init (once per successful init). Since v1. */
    ncclResult_t (*destroy)(void *context);
} ncclTuner_v4_t;

#ifdef __cplusplus
}
#endif

#endif /* BRAID_PLUGIN_API_TUNER_V4_H_ */
