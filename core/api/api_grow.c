/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NCCL 2.29-2.32's membership and memory calls: growing a communicator by new ranks
 * (ncclCommGetUniqueId makes the id on one existing rank; ncclCommGrow, called by every
 * existing and every new rank, makes the grown communicator: comm_split.c), and releasing
 * its buffers while it is idle (ncclCommSuspend, ncclCommResume, ncclCommMemStats; see
 * below what they do on host memory).
 */
#include <pthread.h>
#include <stdatomic.h>

#include "api.h"
#include "util.h"

BR_API(ncclResult_t, ncclCommGetUniqueId, (ncclComm_t comm, ncclUniqueId *uniqueId))
{
    const char *fn = "ncclCommGetUniqueId";
    ncclUniqueId id;

    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, fn));
    if (uniqueId == NULL) {
        BR_WARN(NCCL_INIT, "%s: rank %d: uniqueId is NULL", fn, comm->rank);
        return ncclInvalidArgument;
    }
    pthread_mutex_lock(&comm->lock);
    if (comm->grow_pending) {
        pthread_mutex_unlock(&comm->lock);
        BR_WARN(NCCL_INIT,
                "%s: rank %d (host %s): the id this rank made before was not used by "
                "an ncclCommGrow yet (one id at a time, each used once)",
                fn, comm->rank, br_host_name());
        return ncclInvalidUsage;
    }
    /* A root served by this process, as ncclGetUniqueId's; not NCCL_COMM_ID's port. */
    ncclResult_t res = br_bootstrap_new_unique_id(&id);
    if (res == ncclSuccess) {
        comm->grow_id = id;
        comm->grow_pending = 1;
        *uniqueId = id;
    }
    pthread_mutex_unlock(&comm->lock);
    return res;
}

BR_API(ncclResult_t, ncclCommGrow,
       (ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId, int rank, ncclComm_t *newcomm,
        ncclConfig_t *config))
{
    const char *fn = "ncclCommGrow";
    ncclConfig_t cfg;

    br_api_enter(comm);
    if (newcomm == NULL) {
        BR_WARN(NCCL_INIT, "%s: newcomm is NULL", fn);
        return ncclInvalidArgument;
    }
    *newcomm = NULL;
    if (comm == NULL) {
        /* A new rank: it joins with the id alone, like an ncclCommInitRankConfig. */
        if (uniqueId == NULL) {
            BR_WARN(NCCL_INIT,
                    "%s: a new rank (comm NULL, rank %d) needs the unique id an "
                    "existing rank made with ncclCommGetUniqueId",
                    fn, rank);
            return ncclInvalidArgument;
        }
        return pncclCommInitRankConfig(newcomm, nRanks, *uniqueId, rank, config);
    }
    BR_CHECK(br_api_check_comm(comm, fn));
    if (rank != -1 || nRanks <= comm->nranks) {
        BR_WARN(NCCL_INIT,
                "%s: rank %d: an existing rank passes rank -1 (not %d) and more "
                "ranks than its %d (nRanks %d)",
                fn, comm->rank, rank, comm->nranks, nRanks);
        return ncclInvalidArgument;
    }
    if (uniqueId != NULL && br_bootstrap_check_unique_id(uniqueId) != ncclSuccess) {
        BR_WARN(NCCL_INIT, "%s: rank %d: invalid unique id: %s", fn, comm->rank,
                br_log_last_error());
        return ncclInvalidArgument;
    }
    BR_CHECK(br_api_config_import(fn, config, &cfg));
    BR_CHECK(br_api_hold_comm(comm, fn));
    ncclResult_t res = br_comm_grow(comm, nRanks, uniqueId, newcomm, config != NULL ? &cfg : NULL);
    br_comm_unhold(comm);
    return res;
}

/*
 * Suspending. NCCL releases the communicator's GPU memory; a communicator on host memory
 * holds none (ncclCommMemStats says 0 bytes), and its FIFOs and arena stay mapped: what
 * suspending does here is refuse every call on it until ncclCommResume, as NCCL does.
 * A communicator with a CUDA device is refused: releasing its device buffers is not
 * implemented yet.
 */
static ncclResult_t device_refused(ncclComm_t comm, const char *fn)
{
    if (comm->ec->cuda_dev >= 0) {
        return br_api_refuse(comm, fn,
                             "releasing the device memory of a communicator with a "
                             "CUDA device");
    }
    return ncclSuccess;
}

BR_API(ncclResult_t, ncclCommSuspend, (ncclComm_t comm, int flags))
{
    const char *fn = "ncclCommSuspend";
    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, fn));
    if ((flags & ~NCCL_SUSPEND_MEM) != 0) {
        BR_WARN(NCCL_INIT, "%s: rank %d: unknown flags 0x%x (NCCL_SUSPEND_MEM)", fn, comm->rank,
                flags);
        return ncclInvalidArgument;
    }
    BR_CHECK(device_refused(comm, fn));
    int was = atomic_exchange(&comm->suspended, 1);
    if (was) {
        BR_WARN(NCCL_INIT, "%s: rank %d: the communicator is suspended already", fn, comm->rank);
        return ncclInvalidUsage;
    }
    return ncclSuccess;
}

BR_API(ncclResult_t, ncclCommResume, (ncclComm_t comm))
{
    const char *fn = "ncclCommResume";
    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, fn));
    if (!atomic_exchange(&comm->suspended, 0)) {
        BR_WARN(NCCL_INIT, "%s: rank %d: the communicator is not suspended", fn, comm->rank);
        return ncclInvalidUsage;
    }
    return ncclSuccess;
}

BR_API(ncclResult_t, ncclCommMemStats, (ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *value))
{
    const char *fn = "ncclCommMemStats";
    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, fn));
    if (value == NULL || (int)stat < (int)ncclStatGpuMemSuspend ||
        (int)stat > (int)ncclStatGpuMemTotal) {
        BR_WARN(NCCL_INIT, "%s: rank %d: %s", fn, comm->rank,
                value == NULL ? "value is NULL" : "unknown statistic");
        return ncclInvalidArgument;
    }
    BR_CHECK(device_refused(comm, fn));
    /* GPU memory, as NCCL counts it: none on a host communicator. */
    *value = stat == ncclStatGpuMemSuspended ? (uint64_t)atomic_load(&comm->suspended) : 0;
    return ncclSuccess;
}
