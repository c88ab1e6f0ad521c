/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NCCL 2.29-2.32's membership and memory calls: growing a communicator by new ranks
 * (ncclCommGetUniqueId, ncclCommGrow) and releasing its buffers while it is idle
 * (ncclCommSuspend, ncclCommResume, ncclCommMemStats). Exported so that programs built
 * against NCCL 2.32 load; refused, with an error naming the call, until implemented.
 */
#include "api.h"
#include "util.h"

BR_API(ncclResult_t, ncclCommGetUniqueId, (ncclComm_t comm, ncclUniqueId *uniqueId))
{
    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, "ncclCommGetUniqueId"));
    (void)uniqueId;
    return br_api_refuse(comm, "ncclCommGetUniqueId", "growing a communicator");
}

BR_API(ncclResult_t, ncclCommGrow,
       (ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId, int rank, ncclComm_t *newcomm,
        ncclConfig_t *config))
{
    br_api_enter(comm);
    (void)nRanks;
    (void)uniqueId;
    (void)rank;
    (void)config;
    if (newcomm != NULL) {
        *newcomm = NULL;
    }
    return br_api_refuse(comm, "ncclCommGrow", "growing a communicator");
}

BR_API(ncclResult_t, ncclCommSuspend, (ncclComm_t comm, int flags))
{
    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, "ncclCommSuspend"));
    (void)flags;
    return br_api_refuse(comm, "ncclCommSuspend", "suspending a communicator");
}

BR_API(ncclResult_t, ncclCommResume, (ncclComm_t comm))
{
    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, "ncclCommResume"));
    return br_api_refuse(comm, "ncclCommResume", "suspending a communicator");
}

BR_API(ncclResult_t, ncclCommMemStats, (ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *value))
{
    br_api_enter(comm);
    BR_CHECK(br_api_check_comm(comm, "ncclCommMemStats"));
    (void)stat;
    (void)value;
    return br_api_refuse(comm, "ncclCommMemStats", "memory statistics of a communicator");
}
