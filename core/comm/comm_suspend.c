/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Suspending a communicator (ncclCommSuspend with NCCL_SUSPEND_MEM, ncclCommResume): the
 * buffers its calls run through go, and come back made afresh from what init agreed (the
 * graph, the buffer sizes, the net plugin). Both are collective, as in NCCL: a barrier over
 * the bootstrap before the first buffer goes (no peer still reads a FIFO or the arena) and
 * after the last (every rank has released when any returns); resume connects again in
 * the order init did, so both ends of every link meet. The API layer holds the
 * communicator, checked that no other thread is in a call on it, and refuses calls while
 * the suspended flag is set.
 */
#include <time.h>

#include "comm.h"
#include "util.h"

/* The device calls made before the suspend finish first: their kernels or the stager use
 * the FIFOs, the staging and the connections. Bounded by BRAID_CUDA_WAIT_TIMEOUT. */
static ncclResult_t device_drain(ncclComm_t comm)
{
    int64_t limit = BR_PARAM_INT(CUDA_WAIT_TIMEOUT);
    uint64_t t0 = br_time_ns();
    struct timespec nap = {0, 1000000};

    while (br_exec_cuda_pending(comm->ec)) {
        if (limit > 0 && br_time_ns() - t0 > (uint64_t)limit * 1000000000ULL) {
            BR_WARN(NCCL_INIT,
                    "rank %d (host %s): ncclCommSuspend: the device calls made before it have "
                    "not finished after %lld s (BRAID_CUDA_WAIT_TIMEOUT)",
                    comm->rank, br_host_name(), (long long)limit);
            return ncclInvalidUsage;
        }
        nanosleep(&nap, NULL);
    }
    return ncclSuccess;
}

void br_comm_mem_bytes(ncclComm_t comm, uint64_t *releasable_p, uint64_t *kept_p)
{
    const br_exec_collnet_t *cn = comm->ec->collnet;

    *releasable_p = br_transport_mem_bytes(comm->tc) + br_exec_mem_bytes(comm->ec) +
                    br_exec_cuda_mem_bytes(comm->ec);
    /* Collnet's staging is registered with the plugin's collective communicator, which
     * lives as long as the communicator: kept. */
    *kept_p = cn != NULL ? 2 * BR_COLLNET_NBUF * (uint64_t)cn->stage_bytes : 0;
}

ncclResult_t br_comm_suspend(ncclComm_t comm)
{
    br_exec_comm_t *ec = comm->ec;
    uint64_t before, kept;

    BR_CHECK(device_drain(comm));
    /* A OneShot Broadcast's root checks its readers' descriptors later: now, while the
     * arena holds them. */
    BR_CHECK(br_exec_defer_settle(ec, 1));
    BR_CHECK(br_bootstrap_barrier(comm->tc->boot));
    br_comm_mem_bytes(comm, &before, &kept);
    /* The stager's staging is registered through the proxy: it goes before the proxy. */
    br_exec_cuda_stage_detach(ec);
    br_exec_cuda_detach(ec);
    br_exec_comm_suspend(ec);
    br_transport_close_all(comm->tc, 1);
    BR_CHECK(br_bootstrap_barrier(comm->tc->boot));
    BR_INFO(NCCL_INIT | NCCL_ALLOC,
            "ncclCommSuspend: rank %d released %llu bytes of buffers (%llu kept)", comm->rank,
            (unsigned long long)before, (unsigned long long)kept);
    return ncclSuccess;
}

ncclResult_t br_comm_resume(ncclComm_t comm)
{
    uint64_t after, kept;

    BR_CHECK(br_bootstrap_barrier(comm->tc->boot));
    BR_CHECK(br_comm_channels_connect(comm));
    BR_CHECK(br_comm_arena_setup(comm));
    /* A communicator that had a CUDA device joins its clique or starts its stager again;
     * one that had none stays without. */
    if (comm->cuda_why[0] == '\0') {
        BR_CHECK(br_comm_cuda_setup(comm));
    }
    BR_CHECK(br_bootstrap_barrier(comm->tc->boot));
    br_comm_mem_bytes(comm, &after, &kept);
    BR_INFO(NCCL_INIT | NCCL_ALLOC, "ncclCommResume: rank %d made %llu bytes of buffers again",
            comm->rank, (unsigned long long)after);
    return ncclSuccess;
}
