/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A plain NCCL program, written only against NCCL's API (nccl.h, no Braid header), built
 * with "cc -I include link_prog.c -L lib -lnccl" and run with LD_LIBRARY_PATH pointing at
 * the build's lib directory: what an existing NCCL user does to swap Braid in.
 *
 *   link_prog NRANKS
 *
 * The parent makes the unique id and forks NRANKS ranks; each does an AllReduce (int32 and
 * float), an AllGather and a Broadcast from the last rank on host buffers, checks every
 * result, and exits 0 or 1. The parent waits at most 60 s and exits 0 only if all passed.
 */
#include <nccl.h>

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define COUNT 100003 /* odd, and several FIFO slots */

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "link_prog rank %d: ", rank);                                          \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

#define NCCLCHECK(call)                                                                            \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        CHECK(r_ == ncclSuccess, "%s failed: %s (%s)", #call, ncclGetErrorString(r_),              \
              ncclGetLastError(NULL));                                                             \
    } while (0)

static int run_rank(ncclUniqueId id, int rank, int nranks)
{
    ncclComm_t comm;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    int version = 0, count = 0, me = -1;
    int32_t *isend = malloc(COUNT * sizeof(int32_t)), *irecv = malloc(COUNT * sizeof(int32_t));
    float *fbuf = malloc(COUNT * sizeof(float));
    int32_t *gathered = malloc((size_t)nranks * COUNT * sizeof(int32_t));
    double *bc = malloc(COUNT * sizeof(double));

    CHECK(isend && irecv && fbuf && gathered && bc, "out of memory");
    NCCLCHECK(ncclGetVersion(&version));
    CHECK(version == NCCL_VERSION_CODE, "ncclGetVersion %d, header %d", version, NCCL_VERSION_CODE);
    /* Every field of the initializer is "undefined", the last one included. */
    CHECK(config.nvlinkCentricSched == NCCL_CONFIG_UNDEF_INT && config.blocking == INT_MIN,
          "NCCL_CONFIG_INITIALIZER leaves nvlinkCentricSched %d, blocking %d",
          config.nvlinkCentricSched, config.blocking);
    config.commName = "link_prog";
    NCCLCHECK(ncclCommInitRankConfig(&comm, nranks, id, rank, &config));
    NCCLCHECK(ncclCommCount(comm, &count));
    NCCLCHECK(ncclCommUserRank(comm, &me));
    CHECK(count == nranks && me == rank, "count %d rank %d", count, me);

    for (int i = 0; i < COUNT; i++) {
        isend[i] = (rank + 1) * (i % 1000);
        fbuf[i] = (float)(rank + 1) * 0.5f;
        bc[i] = rank == nranks - 1 ? (double)i * 0.25 : -1.0;
    }
    NCCLCHECK(ncclAllReduce(isend, irecv, COUNT, ncclInt32, ncclSum, comm, NULL));
    NCCLCHECK(ncclAllReduce(fbuf, fbuf, COUNT, ncclFloat, ncclSum, comm, NULL));
    NCCLCHECK(ncclAllGather(isend, gathered, COUNT, ncclInt32, comm, NULL));
    NCCLCHECK(ncclBroadcast(bc, bc, COUNT, ncclDouble, nranks - 1, comm, NULL));

    const int32_t tri = nranks * (nranks + 1) / 2;
    for (int i = 0; i < COUNT; i++) {
        CHECK(irecv[i] == tri * (i % 1000), "AllReduce int32 [%d] = %d, expected %d", i, irecv[i],
              tri * (i % 1000));
        CHECK(fbuf[i] == (float)tri * 0.5f, "AllReduce float [%d] = %g, expected %g", i,
              (double)fbuf[i], (double)tri * 0.5);
        CHECK(bc[i] == (double)i * 0.25, "Broadcast [%d] = %g", i, bc[i]);
        for (int r = 0; r < nranks; r++) {
            int32_t want = (r + 1) * (i % 1000);
            CHECK(gathered[(size_t)r * COUNT + i] == want, "AllGather block %d [%d] = %d", r, i,
                  gathered[(size_t)r * COUNT + i]);
        }
    }
    NCCLCHECK(ncclCommFinalize(comm));
    NCCLCHECK(ncclCommDestroy(comm));
    free(isend);
    free(irecv);
    free(fbuf);
    free(gathered);
    free(bc);
    return 0;
}

int main(int argc, char **argv)
{
    int nranks = argc > 1 ? atoi(argv[1]) : 2;
    pid_t pids[64];
    ncclUniqueId id;
    int failed = 0;
    time_t deadline = time(NULL) + 60;

    if (nranks < 1 || nranks > 64) {
        fprintf(stderr, "usage: link_prog NRANKS (1..64)\n");
        return 2;
    }
    if (ncclGetUniqueId(&id) != ncclSuccess) {
        fprintf(stderr, "link_prog: ncclGetUniqueId failed: %s\n", ncclGetLastError(NULL));
        return 1;
    }
    fflush(NULL);
    for (int r = 0; r < nranks; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            _exit(run_rank(id, r, nranks));
        }
        if (pids[r] < 0) {
            perror("fork");
            return 1;
        }
    }
    for (int left = nranks; left > 0;) {
        int status;
        pid_t w = waitpid(-1, &status, WNOHANG);
        if (w > 0) {
            left--;
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                fprintf(stderr, "link_prog: a rank (pid %d) failed, status 0x%x\n", (int)w, status);
                failed = 1;
            }
            continue;
        }
        if (time(NULL) > deadline) {
            fprintf(stderr, "link_prog: %d ranks still running after 60 s\n", left);
            for (int r = 0; r < nranks; r++) {
                kill(pids[r], SIGKILL);
            }
            while (waitpid(-1, &status, 0) > 0) {
            }
            return 1;
        }
        struct timespec ts = {0, 10000000L};
        nanosleep(&ts, NULL);
    }
    printf("link_prog: %d ranks %s\n", nranks, failed ? "FAILED" : "passed");
    return failed;
}
