/* SPDX-License-Identifier: Apache-2.0 */
/*
 * braid-demo: the README's first command. Forks N local ranks (default 4) that share a
 * unique id, then each runs AllReduce, AllGather and Broadcast on host memory at a few
 * sizes, checks every result against values computed here, and rank 0 prints time,
 * algorithm bandwidth and bus bandwidth (nccl-tests' formulas). Exit status 0 only if
 * every result on every rank was right.
 */
#include <fcntl.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

#define CHECK(call)                                                                                \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        if (r_ != ncclSuccess) {                                                                   \
            fprintf(stderr, "rank %d: %s failed: %s (%s)\n", rank, #call, ncclGetErrorString(r_),  \
                    ncclGetLastError(comm));                                                       \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

/* Runs `iters` timed calls of one collective; returns wrong element count or -1. */
static long run_one(ncclComm_t comm, int rank, int n, const char *name, size_t count, int iters,
                    double *us)
{
    float *in = malloc(count * sizeof(float)), *out = malloc(count * (size_t)n * sizeof(float));
    long wrong = 0;
    int is_ar = strcmp(name, "allreduce") == 0, is_ag = strcmp(name, "allgather") == 0;
    if (in == NULL || out == NULL) {
        return -1;
    }
    for (size_t i = 0; i < count; i++) {
        in[i] = (float)((rank + 1) * ((i % 7) + 1)); /* small integers: exact sums */
    }
    for (int it = -1; it < iters; it++) { /* iteration -1 warms up */
        double t0 = now_us();
        ncclResult_t r;
        if (is_ar) {
            r = ncclAllReduce(in, out, count, ncclFloat, ncclSum, comm, NULL);
        } else if (is_ag) {
            r = ncclAllGather(in, out, count, ncclFloat, comm, NULL);
        } else {
            r = ncclBroadcast(in, out, count, ncclFloat, 0, comm, NULL);
        }
        if (r != ncclSuccess) {
            fprintf(stderr, "rank %d: %s failed: %s\n", rank, name, ncclGetLastError(comm));
            wrong = -1;
            break;
        }
        if (it == 0) {
            *us = 0;
        }
        if (it >= 0) {
            *us += now_us() - t0;
        }
    }
    *us /= iters;
    for (size_t i = 0; i < count && wrong >= 0; i++) {
        float k = (float)((i % 7) + 1);
        if (is_ar) {
            wrong += out[i] != k * (float)(n * (n + 1) / 2);
        } else if (is_ag) {
            for (int p = 0; p < n; p++) {
                wrong += out[(size_t)p * count + i] != k * (float)(p + 1);
            }
        } else {
            wrong += out[i] != k;
        }
    }
    free(in);
    free(out);
    return wrong;
}

static int rank_main(int rank, int n, ncclUniqueId id, int report_fd)
{
    ncclComm_t comm = NULL;
    static const char *const colls[] = {"allreduce", "allgather", "broadcast"};
    static const size_t sizes[] = {1024, 1 << 16, 1 << 20, 1 << 24};

    CHECK(ncclCommInitRank(&comm, n, id, rank));
    for (int c = 0; c < 3; c++) {
        for (int s = 0; s < 4; s++) {
            size_t bytes = sizes[s], count = bytes / sizeof(float);
            int iters = bytes >= (1 << 24) ? 5 : 20;
            double us = 0;
            long wrong = run_one(comm, rank, n, colls[c], count, iters, &us);
            double line[4] = {(double)c, (double)bytes, us, (double)wrong};
            if (write(report_fd, line, sizeof(line)) != (ssize_t)sizeof(line) || wrong != 0) {
                ncclCommDestroy(comm);
                return 1;
            }
        }
    }
    CHECK(ncclCommDestroy(comm));
    return 0;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 4, pipes[2], failed = 0, rank = -1;
    ncclUniqueId id;
    ncclComm_t comm = NULL;
    static const char *const colls[] = {"allreduce", "allgather", "broadcast"};

    if (n < 1 || n > 64 || pipe(pipes) != 0) {
        fprintf(stderr, "usage: braid-demo [nranks]\n");
        return 2;
    }
    CHECK(ncclGetUniqueId(&id));
    for (int r = 0; r < n; r++) {
        pid_t pid = fork();
        if (pid == 0) {
            close(pipes[0]);
            _exit(rank_main(r, n, id, r == 0 ? pipes[1] : open("/dev/null", 1)));
        }
    }
    close(pipes[1]);
    printf("# braid-demo: %d ranks (processes) on host memory, float32\n", n);
    printf("# %-10s %12s %10s %10s %10s %7s\n", "coll", "size(B)", "time(us)", "algbw(GB/s)",
           "busbw(GB/s)", "#wrong");
    double line[4];
    while (read(pipes[0], line, sizeof(line)) == (ssize_t)sizeof(line)) {
        int c = (int)line[0];
        double bytes = line[1], us = line[2], algbw = 0, factor;
        /* nccl-tests: AllGather's size is the whole output; bus factors per collective. */
        double size = c == 1 ? bytes * n : bytes;
        factor = c == 0 ? 2.0 * (n - 1) / n : (c == 1 ? (double)(n - 1) / n : 1.0);
        algbw = us > 0 ? size / us / 1e3 : 0;
        printf("  %-10s %12.0f %10.1f %10.2f %10.2f %7.0f\n", colls[c], size, us, algbw,
               algbw * factor, line[3]);
        failed |= line[3] != 0;
    }
    for (int r = 0; r < n; r++) {
        int status;
        if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            failed = 1;
        }
    }
    printf("# %s\n", failed ? "FAILED: some results were wrong or a rank failed"
                            : "all results correct");
    return failed;
}
