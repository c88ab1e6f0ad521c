/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NCCL 2.29-2.32's membership and memory calls: growing a communicator by new ranks
 * (ncclCommGetUniqueId makes the id on one existing rank; ncclCommGrow, called by every
 * existing and every new rank, makes the grown communicator: comm_split.c), and releasing
 * its buffers while it is idle (ncclCommSuspend, ncclCommResume, ncclCommMemStats: the
 * checks here, the releasing in comm_suspend.c).
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
 * Suspending (NCCL 2.32). Collective: every rank of the communicator calls it. With
 * NCCL_SUSPEND_MEM the communicator's buffers are released (comm_suspend.c says which) and
 * calls on it are refused until ncclCommResume makes them again; without it, as in NCCL,
 * nothing happens. No other thread may be inside a call on the communicator, and no call
 * on it may wait in an open group.
 */
static ncclResult_t idle_check(ncclComm_t comm, const char *fn)
{
    const char *why = NULL;
    if (atomic_load(&comm->queued) > 0) {
        why = "calls on it wait in an open group (ncclGroupEnd first)";
    } else if (br_comm_busy(comm) > 1) { /* this call's own hold, and another thread's */
        why = "another thread is inside a call on it";
    }
    if (why != NULL) {
        BR_WARN(NCCL_INIT, "rank %d (host %s): %s: %s", comm->rank, br_host_name(), fn, why);
        return ncclInvalidUsage;
    }
    return ncclSuccess;
}

/* Whether the suspended flag already says `want`; then a WARN naming why fn is refused. */
static ncclResult_t state_check(ncclComm_t comm, const char *fn, int want)
{
    if (atomic_load(&comm->suspended) == want) {
        BR_WARN(NCCL_INIT, "rank %d (host %s): %s: the communicator is %s", comm->rank,
                br_host_name(), fn, want ? "suspended already" : "not suspended");
        return ncclInvalidUsage;
    }
    return ncclSuccess;
}

BR_API(ncclResult_t, ncclCommSuspend, (ncclComm_t comm, int flags))
{
    const char *fn = "ncclCommSuspend";
    ncclResult_t res;
    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, fn));
    if ((flags & ~NCCL_SUSPEND_MEM) != 0) {
        BR_WARN(NCCL_INIT, "rank %d (host %s): %s: unknown flags 0x%x (NCCL_SUSPEND_MEM is 0x%x)",
                comm->rank, br_host_name(), fn, flags, NCCL_SUSPEND_MEM);
        return ncclInvalidArgument;
    }
    BR_CHECK(state_check(comm, fn, 1));
    if ((flags & NCCL_SUSPEND_MEM) == 0) {
        return ncclSuccess;
    }
    BR_CHECK(br_api_hold_comm(comm, fn));
    res = idle_check(comm, fn);
    if (res == ncclSuccess) {
        /* Refused from now on, also while the buffers go. */
        atomic_store(&comm->suspended, 1);
        res = br_comm_suspend(comm);
    }
    br_comm_unhold(comm);
    return res;
}

BR_API(ncclResult_t, ncclCommResume, (ncclComm_t comm))
{
    const char *fn = "ncclCommResume";
    ncclResult_t res;
    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, fn));
    BR_CHECK(state_check(comm, fn, 0));
    BR_CHECK(br_api_hold_comm(comm, fn));
    res = idle_check(comm, fn);
    if (res == ncclSuccess) {
        res = br_comm_resume(comm);
    }
    if (res == ncclSuccess) {
        atomic_store(&comm->suspended, 0);
    }
    br_comm_unhold(comm);
    return res;
}

BR_API(ncclResult_t, ncclCommMemStats, (ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *value))
{
    const char *fn = "ncclCommMemStats";
    uint64_t releasable, kept;
    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, fn));
    if (value == NULL || (int)stat < (int)ncclStatGpuMemSuspend ||
        (int)stat > (int)ncclStatGpuMemTotal) {
        BR_WARN(NCCL_INIT, "rank %d (host %s): %s: %s", comm->rank, br_host_name(), fn,
                value == NULL ? "value is NULL" : "unknown statistic");
        return ncclInvalidArgument;
    }
    BR_CHECK(br_api_hold_comm(comm, fn));
    br_comm_mem_bytes(comm, &releasable, &kept);
    br_comm_unhold(comm);
    switch (stat) {
    case ncclStatGpuMemSuspend: *value = releasable; break;
    case ncclStatGpuMemSuspended: *value = (uint64_t)atomic_load(&comm->suspended); break;
    case ncclStatGpuMemPersist: *value = kept; break;
    default: *value = releasable + kept; break;
    }
    return ncclSuccess;
}
