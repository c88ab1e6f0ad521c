/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A communicator and CUDA: the device it is bound to (the calling thread's current device
 * when it was created, as NCCL's cudaGetDevice; ncclCommInitAll's device list), resolved
 * as init starts so that the topology places the rank on that GPU, or why it has none,
 * and its place in the CUDA executor's clique.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "comm.h"
#include "topo.h"
#include "util.h"
#include "util_cuda.h"

static _Thread_local int init_device = BR_COMM_DEVICE_CURRENT;
/* How a stager runs host calls: the group layer's, handed down (comm may not call up). */
static _Atomic(br_cuda_stage_run_fn) stage_runner;

void br_comm_set_stage_runner(br_cuda_stage_run_fn fn)
{
    atomic_store(&stage_runner, fn);
}

void br_comm_set_init_device(int device)
{
    init_device = device;
}

int br_comm_capture_device(void)
{
    return br_cuda_current_device();
}

int br_comm_init_device(void)
{
    return init_device == BR_COMM_DEVICE_CURRENT ? br_cuda_current_device() : init_device;
}

void br_comm_gpu_identity(int dev, char *busid, size_t len, int *mps)
{
    const br_cuda_t *cu = br_cuda_in_process() ? br_cuda(NULL) : NULL;
    br_cu_device_t d;
    int on = 0;

    busid[0] = '\0';
    *mps = 0;
    if (cu == NULL || dev < 0 || dev >= cu->ndevices || cu->DeviceGetPCIBusId == NULL ||
        cu->DeviceGet(&d, dev) != BR_CU_SUCCESS ||
        cu->DeviceGetPCIBusId(busid, (int)len, d) != BR_CU_SUCCESS) {
        busid[0] = '\0';
        return;
    }
    busid[len - 1] = '\0';
    /* Drivers older than the attribute answer with an error: no MPS known. */
    *mps = cu->DeviceGetAttribute(&on, BR_CU_DEV_ATTR_MPS_ENABLED, d) == BR_CU_SUCCESS && on;
}

/* Do ranks of several processes of this machine share a GPU without MPS on it? Then a
 * stream waiting in the GPU for another process's progress may hold the GPU that process
 * needs (the H100 hang): such communicators complete device calls on the host. The same
 * answer on every rank (from every rank's peer info). Says which ranks in *a, *b. */
static int shared_gpu(const br_transport_comm_t *tc, int nranks, int *a, int *b)
{
    for (int q = 0; q < nranks; q++) {
        const br_peer_info_t *pq = &tc->peers[q];
        for (int p = 0; p < q && pq->gpu_busid[0] != '\0'; p++) {
            const br_peer_info_t *pp = &tc->peers[p];
            if (pp->machine_hash == pq->machine_hash && pp->pid_hash != pq->pid_hash &&
                strcmp(pp->gpu_busid, pq->gpu_busid) == 0 && !(pp->gpu_mps && pq->gpu_mps)) {
                *a = p;
                *b = q;
                return 1;
            }
        }
    }
    return 0;
}

int br_comm_topo_gpu(ncclComm_t comm)
{
    int dev = comm->init_dev, g = -1;
    const char *how = "PCI bus id";

    if (dev < 0 || comm->topo == NULL || br_topo_count(comm->topo, BR_TOPO_GPU) == 0) {
        return -1;
    }
    /* The bus id the driver gave at init (the rank's peer info). */
    const char *busid = comm->tc->peers[comm->rank].gpu_busid;
    g = busid[0] != '\0' ? br_topo_find_gpu(comm->topo, busid) : -1;
    for (int i = 0; g < 0 && i < br_topo_count(comm->topo, BR_TOPO_GPU); i++) {
        if (br_topo_gpu_dev(br_topo_node(comm->topo, BR_TOPO_GPU, i)) == dev) {
            g = i;
            how = "dev index";
        }
    }
    if (g < 0) {
        BR_INFO(NCCL_INIT | NCCL_GRAPH,
                "rank %d: CUDA device %d is no GPU of the topology: placed by its CPU set",
                comm->rank, dev);
        return -1;
    }
    BR_INFO(NCCL_INIT | NCCL_GRAPH, "rank %d: CUDA device %d is the topology's GPU %d (%s, by %s)",
            comm->rank, dev, g, br_topo_node_busid(br_topo_node(comm->topo, BR_TOPO_GPU, g)), how);
    return g;
}

ncclResult_t br_comm_cuda_setup(ncclComm_t comm)
{
    const br_transport_comm_t *tc = comm->tc;
    const char *why = NULL;
    int staged = 0;
    int dev = comm->init_dev;

    comm->ec->cuda_dev = -1;
    if (BR_PARAM_INT(CUDA) == 0) {
        why = "BRAID_CUDA=0";
    } else if (dev < 0 && !br_cuda_in_process()) {
        why = "the process had not used CUDA when the communicator was created";
    } else if (br_cuda(&why) == NULL) {
        /* why says it */
    } else if (!br_exec_cuda_has_kernels()) {
        why = "this build of Braid carries no CUDA kernels (it was built without nvcc)";
    } else if (dev < 0 || dev >= br_cuda(NULL)->ndevices) {
        snprintf(comm->cuda_why, sizeof(comm->cuda_why), "device %d does not exist (%d devices)",
                 dev, br_cuda(NULL)->ndevices);
    } else {
        for (int r = 0; r < comm->nranks && !staged; r++) {
            staged = tc->peers[r].pid_hash != tc->peers[comm->rank].pid_hash;
        }
    }
    if (why != NULL) {
        snprintf(comm->cuda_why, sizeof(comm->cuda_why), "%s", why);
    }
    if (comm->cuda_why[0] != '\0') {
        BR_INFO(NCCL_INIT, "rank %d: host buffers only: %s", comm->rank, comm->cuda_why);
        return ncclSuccess;
    }
    if (staged) {
        /* Kernels of separate processes are never in one launch, so none may wait for
         * another's: device calls are staged through host memory (exec_cuda_stage.c). */
        br_cuda_stage_run_fn run = atomic_load(&stage_runner);
        if (run == NULL) {
            BR_WARN(NCCL_INIT, "rank %d: internal error: no runner for staged device calls",
                    comm->rank);
            return ncclInternalError;
        }
        int a = -1, b = -1, mode = (int)BR_PARAM_INT(CUDA_SHARED_GPU_SYNC);
        int shared = shared_gpu(tc, comm->nranks, &a, &b);
        int host_sync = mode == 1 || (mode < 0 && shared);
        BR_CHECK(br_exec_cuda_attach_staged(comm->ec, dev, run, comm, host_sync));
        BR_INFO(NCCL_INIT,
                "rank %d: CUDA device %d (device buffers are staged through pinned host memory "
                "and run by the host executor: ranks are in several processes)",
                comm->rank, dev);
        if (shared) {
            BR_INFO(NCCL_INIT,
                    "rank %d: ranks %d and %d (processes %d and %d) share GPU %s without MPS: %s "
                    "(BRAID_CUDA_SHARED_GPU_SYNC=%d)",
                    comm->rank, a, b, tc->peers[a].pid, tc->peers[b].pid, tc->peers[a].gpu_busid,
                    host_sync ? "each device call completes on the host before it returns, so no "
                                "stream waits in the GPU for another process"
                              : "streams wait in the GPU for other processes all the same",
                    mode);
        } else if (host_sync) {
            BR_INFO(NCCL_INIT,
                    "rank %d: each device call completes on the host before it returns "
                    "(BRAID_CUDA_SHARED_GPU_SYNC=1)",
                    comm->rank);
        }
        const br_net_t *net = tc->net;
        for (int i = 0; net != NULL && i < net->nused; i++) {
            BR_INFO(NCCL_INIT | NCCL_NET,
                    "rank %d: GPU Direct RDMA Disabled for HCA %d '%s' (%s)", comm->rank,
                    net->used[i], net->used_name[i],
                    (net->props.ptrSupport & NCCL_PTR_CUDA) != 0
                        ? "the plugin can register device memory, but this version of Braid "
                          "stages device buffers through host memory"
                        : "the plugin registers host memory only");
        }
        return ncclSuccess;
    }
    BR_CHECK(br_exec_cuda_attach(comm->ec, comm->comm_hash, dev));
    BR_INFO(NCCL_INIT, "rank %d: CUDA device %d (device buffers run on the CUDA executor)",
            comm->rank, dev);
    return ncclSuccess;
}
