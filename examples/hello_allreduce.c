/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The README's 60-second example: an NCCL program (nothing Braid-specific) that runs
 * 2 ranks as processes on host memory and sums a vector across them.
 *   cc hello_allreduce.c -Iinclude -Lbuild/lib -lnccl -o hello
 *   LD_LIBRARY_PATH=build/lib NCCL_SOCKET_IFNAME=lo ./hello
 */
#include <nccl.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void)
{
    ncclUniqueId id;
    ncclGetUniqueId(&id); /* made before fork: both ranks inherit it */
    for (int rank = 0; rank < 2; rank++) {
        if (fork() == 0) {
            ncclComm_t comm;
            float data[4] = {1.0f * rank, 2, 3, 4};
            ncclCommInitRank(&comm, 2, id, rank);
            /* Host buffers: the call returns when the result is in place. */
            ncclResult_t r = ncclAllReduce(data, data, 4, ncclFloat, ncclSum, comm, NULL);
            printf("rank %d: %s, data = %g %g %g %g\n", rank, ncclGetErrorString(r), data[0],
                   data[1], data[2], data[3]);
            ncclCommDestroy(comm);
            _exit(r != ncclSuccess);
        }
    }
    int status, failed = 0;
    while (wait(&status) > 0) {
        failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    return failed;
}
