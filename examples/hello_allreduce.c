/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The README's 60-second example: an NCCL program (nothing Braid-specific) that runs
 * 2 ranks as processes on host memory, sums a vector across them and checks the sums.
 * Every call's result is checked; output is flushed before each child exits, so it also
 * shows when piped or redirected. CI builds it, runs it and checks what it prints.
 *   cc examples/hello_allreduce.c -Iinclude -Lbuild/lib -Wl,-rpath,$PWD/build/lib -lnccl -o hello
 *   NCCL_SOCKET_IFNAME=lo ./hello
 */
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define NRANKS 2
#define COUNT 4

/* Prints the failed call with NCCL's reason and leaves the process with status 1. */
#define CHECK(call)                                                                                \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        if (r_ != ncclSuccess) {                                                                   \
            fprintf(stderr, "%s failed: %s: %s\n", #call, ncclGetErrorString(r_),                  \
                    ncclGetLastError(NULL));                                                       \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static int run_rank(ncclUniqueId id, int rank)
{
    ncclComm_t comm;
    float data[COUNT] = {1.0f * rank, 2, 3, 4};
    const float want[COUNT] = {0 + 1, 2 + 2, 3 + 3, 4 + 4}; /* the sums over both ranks */
    int wrong = 0;

    CHECK(ncclCommInitRank(&comm, NRANKS, id, rank));
    /* Host buffers: the call returns when the result is in place. */
    CHECK(ncclAllReduce(data, data, COUNT, ncclFloat, ncclSum, comm, NULL));
    CHECK(ncclCommDestroy(comm));
    for (int i = 0; i < COUNT; i++) {
        wrong += data[i] != want[i];
    }
    printf("rank %d: %g %g %g %g %s\n", rank, data[0], data[1], data[2], data[3],
           wrong ? "WRONG" : "ok");
    return wrong != 0;
}

int main(void)
{
    ncclUniqueId id;
    int status, failed = 0;

    CHECK(ncclGetUniqueId(&id)); /* made before fork: both ranks inherit it */
    fflush(stdout);              /* nothing buffered is copied into the children */
    for (int rank = 0; rank < NRANKS; rank++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0) {
            exit(run_rank(id, rank)); /* exit(), not _exit(): it flushes stdout */
        }
    }
    while (wait(&status) > 0) {
        failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    printf("%s\n", failed ? "FAILED" : "all ranks ok");
    return failed;
}
