/* SPDX-License-Identifier: Apache-2.0 */
/*
 * An MPI program that uses NCCL (Braid) for its collective, as HPC codes do: MPI starts
 * the ranks and broadcasts the unique id, NCCL does the AllReduce. Every result is
 * checked; each rank prints one line (docs/guide-hpc.md):
 *   mpicc examples/mpi_allreduce.c $(pkg-config --cflags --libs braid) -o mpi_allreduce
 *   mpirun -np 4 ./mpi_allreduce
 */
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>

#define COUNT 4

/* Prints the failed call with NCCL's reason and stops every rank. */
#define CHECK(call)                                                                                \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        if (r_ != ncclSuccess) {                                                                   \
            fprintf(stderr, "%s failed: %s: %s\n", #call, ncclGetErrorString(r_),                  \
                    ncclGetLastError(NULL));                                                       \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                          \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    int rank, nranks, wrong = 0, any_wrong = 0;
    ncclUniqueId id;
    ncclComm_t comm;
    float data[COUNT];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (rank == 0) {
        CHECK(ncclGetUniqueId(&id));
    }
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    CHECK(ncclCommInitRank(&comm, nranks, id, rank));

    for (int i = 0; i < COUNT; i++) {
        data[i] = (float)(rank + i);
    }
    /* Host buffers: the call returns when the result is in place. */
    CHECK(ncclAllReduce(data, data, COUNT, ncclFloat, ncclSum, comm, NULL));
    for (int i = 0; i < COUNT; i++) {
        /* sum over r of (r + i) */
        wrong += data[i] != (float)(nranks * (nranks - 1) / 2 + nranks * i);
    }
    printf("rank %d of %d: %g %g %g %g %s\n", rank, nranks, data[0], data[1], data[2], data[3],
           wrong ? "WRONG" : "ok");
    fflush(stdout);
    CHECK(ncclCommDestroy(comm));

    MPI_Allreduce(&wrong, &any_wrong, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any_wrong != 0;
}
