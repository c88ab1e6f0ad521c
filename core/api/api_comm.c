/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Communicator entry points: ids, init (plain, config, all), split, finalize, destroy,
 * abort, queries, errors and groups.
 */
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "braid.h"
#include "util.h"

void br_api_enter(ncclComm_t comm)
{
    br_log_clear_last_error();
    if (comm != NULL && br_comm_is_live(comm)) {
        br_log_set_rank(comm->rank);
    }
}

ncclResult_t br_api_check_comm(ncclComm_t comm, const char *fn)
{
    if (comm == NULL) {
        BR_WARN(NCCL_INIT, "%s: comm is NULL (host %s)", fn, br_host_name());
        return ncclInvalidArgument;
    }
    if (!br_comm_is_live(comm)) {
        BR_WARN(NCCL_INIT,
                "%s: %p is not a live communicator (destroyed, aborted, or never "
                "initialized) (host %s)",
                fn, (void *)comm, br_host_name());
        return ncclInvalidArgument;
    }
    return ncclSuccess;
}

ncclResult_t br_api_hold_comm(ncclComm_t comm, const char *fn)
{
    BR_CHECK(br_api_check_comm(comm, fn));
    if (br_comm_hold(comm) != ncclSuccess) { /* released by another thread just now */
        BR_WARN(NCCL_INIT, "%s: %p was destroyed or aborted by another thread (host %s)", fn,
                (void *)comm, br_host_name());
        return ncclInvalidArgument;
    }
    return ncclSuccess;
}

ncclResult_t br_api_refuse(ncclComm_t comm, const char *fn, const char *what)
{
    if (comm != NULL && br_comm_is_live(comm)) {
        BR_WARN(NCCL_INIT, "%s: rank %d (host %s): %s is not implemented by Braid", fn, comm->rank,
                br_host_name(), what);
    } else {
        BR_WARN(NCCL_INIT, "%s (host %s): %s is not implemented by Braid", fn, br_host_name(),
                what);
    }
    return ncclInvalidUsage;
}

BR_API(ncclResult_t, ncclGetVersion, (int *version))
{
    br_api_enter(NULL);
    if (version == NULL) {
        BR_WARN(NCCL_INIT, "ncclGetVersion: version is NULL");
        return ncclInvalidArgument;
    }
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

BR_API(ncclResult_t, ncclGetUniqueId, (ncclUniqueId * uniqueId))
{
    br_api_enter(NULL);
    if (uniqueId == NULL) {
        BR_WARN(NCCL_INIT, "ncclGetUniqueId: uniqueId is NULL");
        return ncclInvalidArgument;
    }
    BR_CHECK(br_comm_env_init());
    return br_bootstrap_get_unique_id(uniqueId);
}

static ncclResult_t check_init_args(const char *fn, ncclComm_t *comm, int nranks, int rank)
{
    if (comm == NULL) {
        BR_WARN(NCCL_INIT, "%s: comm (the output pointer) is NULL", fn);
        return ncclInvalidArgument;
    }
    if (nranks < 1) {
        BR_WARN(NCCL_INIT, "%s: invalid nranks %d (must be at least 1)", fn, nranks);
        return ncclInvalidArgument;
    }
    if (rank < 0 || rank >= nranks) {
        BR_WARN(NCCL_INIT, "%s: invalid rank %d (nranks %d)", fn, rank, nranks);
        return ncclInvalidArgument;
    }
    return ncclSuccess;
}

/* Copy a caller's config of any NCCL 2.x layout over the defaults, after checking the
 * NCCL_CONFIG_INITIALIZER handshake. */
ncclResult_t br_api_config_import(const char *fn, const ncclConfig_t *in, ncclConfig_t *out)
{
    ncclConfig_t def = NCCL_CONFIG_INITIALIZER;
    size_t min_size = offsetof(ncclConfig_t, cgaClusterSize);

    *out = def;
    if (in == NULL) {
        return ncclSuccess;
    }
    if (in->magic != 0xcafebeef) {
        BR_WARN(NCCL_INIT,
                "%s: config magic is 0x%x, not 0xcafebeef: initialise the config "
                "with NCCL_CONFIG_INITIALIZER",
                fn, in->magic);
        return ncclInvalidArgument;
    }
    if (in->size < min_size || in->size > 4096) {
        BR_WARN(NCCL_INIT, "%s: config size %zu is not a valid ncclConfig_t size", fn, in->size);
        return ncclInvalidArgument;
    }
    if (in->version < NCCL_VERSION(2, 14, 0) || in->version > NCCL_VERSION(2, 99, 99)) {
        BR_WARN(NCCL_INIT, "%s: config version %u is not an NCCL 2.14 or later header", fn,
                in->version);
        return ncclInvalidArgument;
    }
    memcpy(out, in, in->size < sizeof(*out) ? in->size : sizeof(*out));
    out->size = sizeof(*out);
    if (out->blocking != NCCL_CONFIG_UNDEF_INT && out->blocking != 0 && out->blocking != 1) {
        BR_WARN(NCCL_INIT, "%s: config blocking must be 0 or 1, not %d", fn, out->blocking);
        return ncclInvalidArgument;
    }
    if (out->minCTAs != NCCL_CONFIG_UNDEF_INT && out->maxCTAs != NCCL_CONFIG_UNDEF_INT &&
        out->minCTAs > out->maxCTAs) {
        BR_WARN(NCCL_INIT, "%s: config minCTAs %d exceeds maxCTAs %d", fn, out->minCTAs,
                out->maxCTAs);
        return ncclInvalidArgument;
    }
    return ncclSuccess;
}

BR_API(ncclResult_t, ncclCommInitRankConfig,
       (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t *config))
{
    const char *fn = "ncclCommInitRankConfig";
    ncclConfig_t cfg;

    br_api_enter(NULL);
    BR_CHECK(check_init_args(fn, comm, nranks, rank));
    BR_CHECK(br_api_config_import(fn, config, &cfg));
    if (br_bootstrap_check_unique_id(&commId) != ncclSuccess) {
        BR_WARN(NCCL_INIT, "%s: rank %d: invalid unique id: %s", fn, rank, br_log_last_error());
        return ncclInvalidArgument;
    }
    *comm = NULL;
    return br_group_add_init(comm, nranks, &commId, rank, &cfg);
}

BR_API(ncclResult_t, ncclCommInitRank,
       (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank))
{
    return pncclCommInitRankConfig(comm, nranks, commId, rank, NULL);
}

BR_API(ncclResult_t, ncclCommInitRankScalable,
       (ncclComm_t * newcomm, int nranks, int myrank, int nId, ncclUniqueId *commIds,
        ncclConfig_t *config))
{
    br_api_enter(NULL);
    if (commIds == NULL || nId < 1) {
        BR_WARN(NCCL_INIT, "ncclCommInitRankScalable: need at least one unique id (nId %d)", nId);
        return ncclInvalidArgument;
    }
    /* One root serves every rank here: the first id is the rendezvous. */
    return pncclCommInitRankConfig(newcomm, nranks, commIds[0], myrank, config);
}

BR_API(ncclResult_t, ncclCommInitAll, (ncclComm_t * comms, int ndev, const int *devlist))
{
    ncclUniqueId id;
    ncclResult_t res, end;

    br_api_enter(NULL);
    if (comms == NULL) {
        BR_WARN(NCCL_INIT, "ncclCommInitAll: comms is NULL");
        return ncclInvalidArgument;
    }
    if (ndev < 1) {
        BR_WARN(NCCL_INIT, "ncclCommInitAll: invalid ndev %d", ndev);
        return ncclInvalidArgument;
    }
    BR_CHECK(br_bootstrap_new_unique_id(&id));
    BR_CHECK(br_group_start());
    res = ncclSuccess;
    /* Rank i on device devlist[i] (or i), as NCCL; without CUDA in the process the ranks
     * are host ranks and the list only labels them. */
    int cuda = br_comm_capture_device() >= 0;
    for (int i = 0; i < ndev && res == ncclSuccess; i++) {
        comms[i] = NULL;
        res = br_group_add_init_dev(&comms[i], ndev, &id, i, NULL,
                                    cuda ? (devlist != NULL ? devlist[i] : i) : -1);
    }
    end = br_group_end();
    return res != ncclSuccess ? res : end;
}

BR_API(ncclResult_t, ncclCommSplit,
       (ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config))
{
    const char *fn = "ncclCommSplit";
    ncclConfig_t cfg;

    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, fn));
    if (newcomm == NULL) {
        BR_WARN(NCCL_INIT, "%s: rank %d: newcomm is NULL", fn, comm->rank);
        return ncclInvalidArgument;
    }
    if (color < 0 && color != NCCL_SPLIT_NOCOLOR) {
        BR_WARN(NCCL_INIT, "%s: rank %d: invalid color %d (must be >= 0 or NCCL_SPLIT_NOCOLOR)", fn,
                comm->rank, color);
        return ncclInvalidArgument;
    }
    BR_CHECK(br_api_config_import(fn, config, &cfg));
    *newcomm = NULL;
    BR_CHECK(br_api_hold_comm(comm, fn));
    ncclResult_t res = br_group_add_split(comm, color, key, newcomm, config != NULL ? &cfg : NULL);
    br_comm_unhold(comm);
    return res;
}

BR_API(ncclResult_t, ncclCommShrink,
       (ncclComm_t comm, int *excludeRanksList, int excludeRanksCount, ncclComm_t *newcomm,
        ncclConfig_t *config, int shrinkFlags))
{
    const char *fn = "ncclCommShrink";
    ncclConfig_t cfg;

    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, fn));
    if (newcomm == NULL) {
        BR_WARN(NCCL_INIT, "%s: rank %d: newcomm is NULL", fn, comm->rank);
        return ncclInvalidArgument;
    }
    *newcomm = NULL;
    if (excludeRanksCount < 0 || (excludeRanksCount > 0 && excludeRanksList == NULL)) {
        BR_WARN(NCCL_INIT,
                "%s: rank %d: excludeRanksList is NULL or excludeRanksCount (%d) "
                "negative",
                fn, comm->rank, excludeRanksCount);
        return ncclInvalidArgument;
    }
    if ((shrinkFlags & ~NCCL_SHRINK_ABORT) != 0) {
        BR_WARN(NCCL_INIT,
                "%s: rank %d: unknown shrinkFlags 0x%x (NCCL_SHRINK_DEFAULT or "
                "NCCL_SHRINK_ABORT)",
                fn, comm->rank, shrinkFlags);
        return ncclInvalidArgument;
    }
    BR_CHECK(br_api_config_import(fn, config, &cfg));
    /* Not through the group layer: after a failure the parent cannot run anything
     * collective, and the survivors meet out of band. */
    BR_CHECK(br_api_hold_comm(comm, fn));
    ncclResult_t res = br_comm_shrink(comm, excludeRanksList, excludeRanksCount, newcomm,
                                      config != NULL ? &cfg : NULL, shrinkFlags);
    br_comm_unhold(comm);
    return res;
}

BR_API(ncclResult_t, ncclCommFinalize, (ncclComm_t comm))
{
    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, "ncclCommFinalize"));
    /* Host operations complete before their call returns; device calls staged through the
     * host (ranks in several processes) complete here on the host side. */
    br_exec_cuda_stage_quiesce(comm->ec);
    comm->finalized = 1;
    /* A Broadcast root's check of the other ranks' calls, deferred past its return. */
    ncclResult_t res = ncclSuccess;
    BR_CHECK(br_api_hold_comm(comm, "ncclCommFinalize"));
    if (br_comm_busy(comm) == 1) { /* not while another thread runs a call on it */
        res = br_exec_defer_settle(comm->ec, 1);
    }
    br_comm_unhold(comm);
    return res;
}

BR_API(ncclResult_t, ncclCommDestroy, (ncclComm_t comm))
{
    br_api_enter(comm);
    if (comm == NULL) {
        return ncclSuccess; /* as NCCL: destroying NULL is a no-op */
    }
    BR_CHECK(br_api_check_comm(comm, "ncclCommDestroy"));
    /* Checks a Broadcast root deferred past its return: a mismatch they find is reported
     * (logged, and returned once the communicator is gone), never dropped. */
    ncclResult_t found = ncclSuccess;
    BR_CHECK(br_api_hold_comm(comm, "ncclCommDestroy"));
    if (br_comm_busy(comm) == 1) {            /* not while another thread runs a call on it */
        br_exec_cuda_stage_quiesce(comm->ec); /* nor while its stager runs device calls */
        found = br_exec_defer_settle(comm->ec, 1);
    }
    br_comm_unhold(comm);
    ncclResult_t res = br_comm_release(comm, comm->ec->error == ncclSuccess, "ncclCommDestroy");
    return res != ncclSuccess ? res : found;
}

BR_API(ncclResult_t, ncclCommAbort, (ncclComm_t comm))
{
    br_api_enter(comm);
    if (comm == NULL) {
        return ncclSuccess;
    }
    BR_CHECK(br_api_check_comm(comm, "ncclCommAbort"));
    /* Nothing is waited for, but a mismatch a Broadcast root's deferred check can see
     * already is logged. */
    if (br_api_hold_comm(comm, "ncclCommAbort") == ncclSuccess) {
        if (br_comm_busy(comm) == 1 && comm->ec->stage == NULL) { /* nobody else in it */
            (void)br_exec_defer_settle(comm->ec, 0);
        }
        br_comm_unhold(comm);
    }
    return br_comm_release(comm, 0, "ncclCommAbort");
}

BR_API(ncclResult_t, ncclCommRevoke, (ncclComm_t comm, int revokeFlags))
{
    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, "ncclCommRevoke"));
    if (revokeFlags != NCCL_REVOKE_DEFAULT) {
        BR_WARN(NCCL_INIT, "ncclCommRevoke: revokeFlags must be 0, not %d", revokeFlags);
        return ncclInvalidArgument;
    }
    /* Calls in flight in other threads fail within ~100 ms, later calls at once; the
     * communicator is then only good for ncclCommDestroy or ncclCommAbort. */
    br_comm_revoke(comm, "the communicator was revoked (ncclCommRevoke)");
    return ncclSuccess;
}

BR_API(ncclResult_t, ncclCommCount, (const ncclComm_t comm, int *count))
{
    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, "ncclCommCount"));
    if (count == NULL) {
        BR_WARN(NCCL_INIT, "ncclCommCount: count is NULL");
        return ncclInvalidArgument;
    }
    *count = comm->nranks;
    return ncclSuccess;
}

BR_API(ncclResult_t, ncclCommUserRank, (const ncclComm_t comm, int *rank))
{
    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, "ncclCommUserRank"));
    if (rank == NULL) {
        BR_WARN(NCCL_INIT, "ncclCommUserRank: rank is NULL");
        return ncclInvalidArgument;
    }
    *rank = comm->rank;
    return ncclSuccess;
}

/* The device API: ranks' own kernels communicating through an ncclDevComm (load/store
 * over NVLink, multimem, GPU-initiated networking). Not implemented: refused, so that a
 * program that asks learns it at once and a program that only links them runs. */
static ncclResult_t dev_api_refuse(ncclComm_t comm, const char *fn)
{
    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, fn));
    BR_WARN(NCCL_INIT,
            "%s: rank %d (host %s): NCCL's device API (ncclDevComm: communication from the "
            "application's own kernels) is not implemented by Braid; its host API "
            "(collectives, send/recv, registration, windows on host memory) is",
            fn, comm->rank, br_host_name());
    return ncclInvalidUsage;
}

BR_API(ncclResult_t, ncclDevCommCreate,
       (ncclComm_t comm, const struct ncclDevCommRequirements *reqs, struct ncclDevComm *out))
{
    (void)reqs;
    (void)out;
    return dev_api_refuse(comm, "ncclDevCommCreate");
}

BR_API(ncclResult_t, ncclDevCommDestroy, (ncclComm_t comm, const struct ncclDevComm *devComm))
{
    (void)devComm;
    return dev_api_refuse(comm, "ncclDevCommDestroy");
}

/* ncclCommProperties_t of nccl_device/core.h (NCCL 2.29-2.32): a versioned struct that
 * grows at its end; the caller's `size` says how much of it there is. */
struct ncclCommProperties {
    size_t size;
    unsigned int magic;
    unsigned int version;
    int rank;
    int nRanks;
    int cudaDev;
    int nvmlDev;
    _Bool deviceApiSupport;
    _Bool multimemSupport;
    int ginType; /* ncclGinType_t: NCCL_GIN_TYPE_NONE is 0 */
    int nLsaTeams;
    _Bool hostRmaSupport;
    int railedGinType;
};

BR_API(ncclResult_t, ncclCommQueryProperties, (ncclComm_t comm, struct ncclCommProperties *props))
{
    const char *fn = "ncclCommQueryProperties";
    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, fn));
    if (props == NULL || props->magic != NCCL_API_MAGIC ||
        props->size < offsetof(struct ncclCommProperties, rank)) {
        BR_WARN(NCCL_INIT,
                "%s: rank %d: props is NULL or not initialised with "
                "NCCL_COMM_PROPERTIES_INITIALIZER",
                fn, comm->rank);
        return ncclInvalidArgument;
    }
    /* Each field only where the caller's struct has it. */
#define PROP_SET(field, value)                                                                     \
    do {                                                                                           \
        if (props->size >= offsetof(struct ncclCommProperties, field) + sizeof(props->field)) {    \
            props->field = (value);                                                                \
        }                                                                                          \
    } while (0)
    PROP_SET(rank, comm->rank);
    PROP_SET(nRanks, comm->nranks);
    PROP_SET(cudaDev, comm->ec->cuda_dev);
    PROP_SET(nvmlDev, comm->ec->cuda_dev);
    PROP_SET(deviceApiSupport, 0); /* no ncclDevComm: the device API is not implemented */
    PROP_SET(multimemSupport, 0);
    PROP_SET(ginType, 0);
    PROP_SET(nLsaTeams, comm->nranks); /* LSA teams of one rank each (ncclTeamLsa) */
    PROP_SET(hostRmaSupport, 1); /* ncclPutSignal & co. on host windows */
    PROP_SET(railedGinType, 0);
#undef PROP_SET
    return ncclSuccess;
}

/* Teams (NCCL's host forms of ncclTeamWorld & co.): arithmetic over what Braid has. A
 * handle that is not a live communicator gets a WARN and an empty team, or -1. */
static int team_comm_ok(ncclComm_t comm, const char *fn)
{
    br_api_enter(comm);
    return br_api_check_comm(comm, fn) == ncclSuccess;
}

BR_API(br_team_t, ncclTeamWorld, (ncclComm_t comm))
{
    br_team_t t = {0, 0, 0};
    if (team_comm_ok(comm, "ncclTeamWorld")) {
        t = (br_team_t){comm->nranks, comm->rank, 1};
    }
    return t;
}

BR_API(br_team_t, ncclTeamLsa, (ncclComm_t comm))
{
    br_team_t t = {0, 0, 0};
    if (team_comm_ok(comm, "ncclTeamLsa")) {
        t = (br_team_t){1, 0, 1}; /* no peer is load/store accessible (no device API) */
    }
    return t;
}

BR_API(br_team_t, ncclTeamRail, (ncclComm_t comm))
{
    br_team_t t = {0, 0, 0};
    if (team_comm_ok(comm, "ncclTeamRail")) {
        t = (br_team_t){comm->nranks, comm->rank, 1}; /* LSA teams of one rank each */
    }
    return t;
}

BR_API(int, ncclTeamRankToWorld, (ncclComm_t comm, br_team_t team, int rank))
{
    return team_comm_ok(comm, "ncclTeamRankToWorld") ? comm->rank + (rank - team.rank) * team.stride
                                                     : -1;
}

BR_API(int, ncclTeamRankToLsa, (ncclComm_t comm, br_team_t team, int rank))
{
    /* This rank is rank 0 of its LSA team of one. */
    return team_comm_ok(comm, "ncclTeamRankToLsa") ? (rank - team.rank) * team.stride : -1;
}

/* Slots of an LL all-to-all for maxElts elements of maxEltSize bytes: one 8-byte line per
 * 8 bytes of an element, as NCCL counts them. Braid has no LL all-to-all to size, but the
 * count is the program's to make. */
BR_API(int, ncclLLA2ACalcSlots, (int maxElts, int maxEltSize))
{
    br_api_enter(NULL);
    return maxElts * ((maxEltSize + 7) / 8);
}

/* Resource requirements of the device API's barriers and LL all-to-all: they size memory
 * for an ncclDevComm, which Braid cannot make (ncclDevCommCreate is refused). */
static ncclResult_t requirement_refuse(ncclComm_t comm, const char *fn)
{
    br_api_enter(comm);
    return br_api_refuse(comm, fn, "NCCL's device API (ncclDevComm, whose resources this sizes)");
}

BR_API(ncclResult_t, ncclLLA2ACreateRequirement,
       (int nBlocks, int nSlots, struct ncclLLA2AHandle *outHandle,
        struct ncclDevResourceRequirements *outReq))
{
    (void)nBlocks;
    (void)nSlots;
    (void)outHandle;
    (void)outReq;
    return requirement_refuse(NULL, "ncclLLA2ACreateRequirement");
}

BR_API(ncclResult_t, ncclLsaBarrierCreateRequirement,
       (br_team_t team, int nBarriers, struct ncclLsaBarrierHandle *outHandle,
        struct ncclDevResourceRequirements *outReq))
{
    (void)team;
    (void)nBarriers;
    (void)outHandle;
    (void)outReq;
    return requirement_refuse(NULL, "ncclLsaBarrierCreateRequirement");
}

BR_API(ncclResult_t, ncclGinBarrierCreateRequirement,
       (ncclComm_t comm, br_team_t team, int nBarriers, struct ncclGinBarrierHandle *outHandle,
        struct ncclDevResourceRequirements *outReq))
{
    (void)team;
    (void)nBarriers;
    (void)outHandle;
    (void)outReq;
    if (br_api_check_comm(comm, "ncclGinBarrierCreateRequirement") != ncclSuccess) {
        return ncclInvalidArgument;
    }
    return requirement_refuse(comm, "ncclGinBarrierCreateRequirement");
}

static ncclResult_t window_pointer_refuse(const char *fn)
{
    br_api_enter(NULL);
    return br_api_refuse(NULL, fn, "a device pointer into a window (the device API)");
}

BR_API(ncclResult_t, ncclGetLsaMultimemDevicePointer,
       (ncclWindow_t window, size_t offset, void **outPtr))
{
    (void)window, (void)offset, (void)outPtr;
    return window_pointer_refuse("ncclGetLsaMultimemDevicePointer");
}

BR_API(ncclResult_t, ncclGetMultimemDevicePointer,
       (ncclWindow_t window, size_t offset, br_multimem_handle_t multimem, void **outPtr))
{
    (void)window, (void)offset, (void)multimem, (void)outPtr;
    return window_pointer_refuse("ncclGetMultimemDevicePointer");
}

BR_API(ncclResult_t, ncclGetLsaDevicePointer,
       (ncclWindow_t window, size_t offset, int lsaRank, void **outPtr))
{
    (void)window, (void)offset, (void)lsaRank, (void)outPtr;
    return window_pointer_refuse("ncclGetLsaDevicePointer");
}

BR_API(ncclResult_t, ncclGetPeerDevicePointer,
       (ncclWindow_t window, size_t offset, int peer, void **outPtr))
{
    (void)window, (void)offset, (void)peer, (void)outPtr;
    return window_pointer_refuse("ncclGetPeerDevicePointer");
}

BR_API(ncclResult_t, ncclCommCuDevice, (const ncclComm_t comm, int *device))
{
    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, "ncclCommCuDevice"));
    if (device == NULL) {
        BR_WARN(NCCL_INIT, "ncclCommCuDevice: device is NULL");
        return ncclInvalidArgument;
    }
    *device = comm->ec->cuda_dev; /* -1: a host communicator (no CUDA device) */
    return ncclSuccess;
}

BR_API(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t *asyncError))
{
    char msg[8];
    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, "ncclCommGetAsyncError"));
    if (asyncError == NULL) {
        BR_WARN(NCCL_INIT, "ncclCommGetAsyncError: asyncError is NULL");
        return ncclInvalidArgument;
    }
    *asyncError = br_exec_cuda_async_error(comm->ec);
    if (*asyncError == ncclSuccess && comm->tc->proxy != NULL) {
        *asyncError = br_proxy_error(comm->tc->proxy, msg, sizeof(msg));
    }
    return ncclSuccess;
}

BR_API(const char *, ncclGetErrorString, (ncclResult_t result))
{
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError:
        return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
        return "internal error - please report this issue to the Braid developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    case ncclTimeout: return "operation timed out (BRAID_TIMEOUT or a connection deadline)";
    default: return "unknown result code";
    }
}

BR_API(const char *, ncclGetLastError, (ncclComm_t comm))
{
    const char *last = br_log_last_error();
    if (last[0] == '\0' && comm != NULL && br_comm_is_live(comm) &&
        comm->ec->error != ncclSuccess) {
        return comm->ec->error_msg;
    }
    return last;
}

BR_API(void, ncclResetDebugInit, (void))
{
    /* Deprecated in NCCL; Braid reads the logging settings once. */
}

BR_API(ncclResult_t, ncclGroupStart, (void))
{
    br_api_enter(NULL);
    return br_group_start();
}

BR_API(ncclResult_t, ncclGroupEnd, (void))
{
    br_api_enter(NULL);
    return br_group_end();
}

BR_API(ncclResult_t, ncclGroupSimulateEnd, (ncclSimInfo_t * simInfo))
{
    br_api_enter(NULL);
    if (simInfo == NULL || simInfo->magic != 0x74685283u || simInfo->size < sizeof(*simInfo)) {
        BR_WARN(NCCL_INIT, "ncclGroupSimulateEnd: simInfo must be an ncclSimInfo_t set with "
                           "NCCL_SIM_INFO_INITIALIZER");
        return ncclInvalidArgument;
    }
    float us = 0.0f;
    ncclResult_t res = br_group_simulate_end(&us);
    if (res == ncclSuccess) {
        simInfo->estimatedTime = us;
    }
    return res;
}

BR_API(ncclResult_t, braidDumpState, (const char *path))
{
    br_api_enter(NULL);
    return br_comm_dump_write(path, "braidDumpState");
}
