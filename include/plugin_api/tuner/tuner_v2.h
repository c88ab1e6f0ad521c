/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tuner plugin ABI version 2 (NCCL 2.21): symbol "ncclTunerPlugin_v2", type
 * ncclTuner_v2_t, 4 slots (32 bytes on LP64). Frozen: a released version is never
 * edited; a change is a new version file. The oldest version NCCL 2.28/2.30 load.
 *
 * What v2 added over v1: a per-communicator context (init's last argument, passed to
 * getCollInfo and destroy). getCollInfo returns the chosen algorithm and protocol
 * through out-parameters; a core applies the choice to its cost table by setting that
 * entry to 0.0 when it is available (NCCL's v2 adapter does exactly this).
 *
 * Life cycle: the library is opened once per process; init/destroy run once per
 * communicator. Threading: init and destroy are called from communicator init/destroy;
 * getCollInfo from the thread enqueuing the operation. Two communicators may call in
 * concurrently, each with its own context. No member may block.
 */
#ifndef BRAID_PLUGIN_API_TUNER_V2_H_
#define BRAID_PLUGIN_API_TUNER_V2_H_

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
     * Slot 2. Choose the algorithm, protocol and channels of one collective.
     * In:  context, collType (0..NCCL_NUM_FUNCTIONS-1), nBytes
     *      collNetSupport - 1 if CollNet algorithms are usable for this operation
     *      nvlsSupport    - 1 if NVLS algorithms are usable
     *      numPipeOps     - operations aggregated into one launch
     * Out: *algorithm - an NCCL_ALGO_* (leave NCCL_ALGO_UNDEF to keep the core's choice)
     *      *protocol  - an NCCL_PROTO_* (same rule)
     *      *nChannels - 0 keeps the core's count; positive replaces it
     * A choice the core cannot use is ignored. A non-success return fails the
     * collective. Must not block. Since v2 (v1 had no context).
     */
    ncclResult_t (*getCollInfo)(void *context, ncclFunc_t collType, size_t nBytes,
                                int collNetSupport, int nvlsSupport, int numPipeOps, int *algorithm,
                                int *protocol, int *nChannels);

    /* Slot 3. Destroy the context of init (once per successful init). Since v1. */
    ncclResult_t (*destroy)(void *context);
} ncclTuner_v2_t;

#ifdef __cplusplus
}
#endif

#endif /* BRAID_PLUGIN_API_TUNER_V2_H_ */
