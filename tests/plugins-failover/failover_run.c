/* SPDX-License-Identifier: Apache-2.0 */
/*
 * failover_run: one rank of a long AllReduce run, for the transport failover tests. The
 * process is rank --rank of --nranks; the ranks meet through NCCL_COMM_ID (rank 0 serves
 * it), and each names its own host with NCCL_HOSTID, so every link crosses the net
 * transport. It runs --iters float sums of --count elements on host memory, the input
 * changing every iteration (small integers, so every sum is exact), checks every element
 * of every result, and stops at the first error or wrong element. The last line gives
 * the median and the slowest iteration: with a connection broken mid-run, the slowest is
 * the recovery.
 *
 * With FAILOVER_STALL_MS set, the rank sleeps that long before its first AllReduce: a
 * rank late to a collective (loading data, say), which must not pass for a broken link.
 *
 * `failover_run --free-port` prints a free TCP port on 127.0.0.1 for NCCL_COMM_ID.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nccl.h>

#include "brt_launch.h"

typedef struct {
    int rank, nranks;
    long iters;
    size_t count;
    long progress; /* print a line every this many iterations (0: never) */
    long stall_ms; /* FAILOVER_STALL_MS: sleep before the first iteration (a late rank) */
    int sendrecv;  /* --sendrecv 1: a ring of Send/Recv (rank + 1, from rank - 1) instead */
} opts_t;

/* Element i of rank r's input in iteration it: small integers, exact in float. */
static float input(int r, long it, size_t i)
{
    return (float)((r + 1) * (it % 17 + 1) + (long)(i % 5));
}

/* The sum over n ranks of input(r, it, i), in closed form. */
static float expected(int n, long it, size_t i)
{
    return (float)(n * (n + 1) / 2 * (it % 17 + 1) + n * (long)(i % 5));
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int usage(void)
{
    fprintf(stderr, "usage: failover_run --rank R --nranks N [--iters 1000] [--count 65536]\n"
                    "                    [--progress K] [--sendrecv 1]\n"
                    "       failover_run --free-port\n"
                    "NCCL_COMM_ID names the rendezvous (rank 0 serves it), NCCL_HOSTID the host;\n"
                    "FAILOVER_STALL_MS=MS makes this rank sleep before its first AllReduce.\n");
    return 2;
}

static int parse(int argc, char **argv, opts_t *o)
{
    *o = (opts_t){.rank = -1, .nranks = 0, .iters = 1000, .count = 65536};
    for (int i = 1; i + 1 < argc; i += 2) {
        long v = strtol(argv[i + 1], NULL, 10);
        if (strcmp(argv[i], "--rank") == 0) {
            o->rank = (int)v;
        } else if (strcmp(argv[i], "--nranks") == 0) {
            o->nranks = (int)v;
        } else if (strcmp(argv[i], "--iters") == 0) {
            o->iters = v;
        } else if (strcmp(argv[i], "--count") == 0) {
            o->count = (size_t)v;
        } else if (strcmp(argv[i], "--progress") == 0) {
            o->progress = v;
        } else if (strcmp(argv[i], "--sendrecv") == 0) {
            o->sendrecv = v != 0;
        } else {
            return -1;
        }
    }
    if (getenv("FAILOVER_STALL_MS") != NULL) {
        o->stall_ms = strtol(getenv("FAILOVER_STALL_MS"), NULL, 10);
    }
    if (argc % 2 == 0 || o->nranks < 1 || o->rank < 0 || o->rank >= o->nranks || o->iters < 1 ||
        o->count < 1 || getenv("NCCL_COMM_ID") == NULL) {
        return -1;
    }
    return 0;
}

/* One ring exchange: in to rank + 1, out from rank - 1. */
static ncclResult_t sendrecv(const opts_t *o, ncclComm_t comm, const float *in, float *out)
{
    int to = (o->rank + 1) % o->nranks, from = (o->rank + o->nranks - 1) % o->nranks;
    ncclResult_t res = ncclGroupStart();
    if (res == ncclSuccess) {
        res = ncclSend(in, o->count, ncclFloat, to, comm, NULL);
    }
    if (res == ncclSuccess) {
        res = ncclRecv(out, o->count, ncclFloat, from, comm, NULL);
    }
    ncclResult_t end = ncclGroupEnd();
    return res != ncclSuccess ? res : end;
}

/* The timed iterations; returns 0 when every result was right. */
static int run(const opts_t *o, ncclComm_t comm, float *in, float *out, double *ms)
{
    const int rank = o->rank;

    for (long it = 0; it < o->iters; it++) {
        for (size_t i = 0; i < o->count; i++) {
            in[i] = input(rank, it, i);
        }
        if (o->stall_ms > 0 && it == 0) {
            brt_sleep_ms((int)o->stall_ms);
        }
        double t0 = brt_now();
        int from = (rank + o->nranks - 1) % o->nranks;
        ncclResult_t res = o->sendrecv
                               ? sendrecv(o, comm, in, out)
                               : ncclAllReduce(in, out, o->count, ncclFloat, ncclSum, comm, NULL);
        ms[it] = (brt_now() - t0) * 1e3;
        if (res != ncclSuccess) {
            fprintf(stderr, "rank %d: iteration %ld: %s failed after %.1f ms: %s: %s\n", rank, it,
                    o->sendrecv ? "ncclSend/ncclRecv" : "ncclAllReduce", ms[it],
                    ncclGetErrorString(res), ncclGetLastError(comm));
            return 1;
        }
        for (size_t i = 0; i < o->count; i++) {
            float want = o->sendrecv ? input(from, it, i) : expected(o->nranks, it, i);
            if (out[i] != want) {
                fprintf(stderr,
                        "rank %d: iteration %ld index %zu: got %g, expected %g (last error: %s)\n",
                        rank, it, i, (double)out[i], (double)want, ncclGetLastError(comm));
                return 1;
            }
        }
        if (o->progress > 0 && (it + 1) % o->progress == 0) {
            printf("rank %d: iteration %ld done\n", rank, it + 1);
            fflush(stdout);
        }
    }
    return 0;
}

static void report(const opts_t *o, double *ms)
{
    long slowest = 0;

    for (long it = 1; it < o->iters; it++) {
        slowest = ms[it] > ms[slowest] ? it : slowest;
    }
    double worst = ms[slowest];
    qsort(ms, (size_t)o->iters, sizeof(*ms), cmp_double);
    printf("rank %d: iterations %ld, mismatches 0, median iteration %.3f ms, slowest iteration "
           "#%ld: %.3f ms\n",
           o->rank, o->iters, ms[o->iters / 2], slowest, worst);
}

int main(int argc, char **argv)
{
    opts_t o;
    ncclUniqueId id;
    ncclComm_t comm = NULL;
    ncclResult_t res;
    int ret;

    if (argc == 2 && strcmp(argv[1], "--free-port") == 0) {
        int port = brt_free_port();
        printf("%d\n", port);
        return port > 0 ? 0 : 1;
    }
    if (parse(argc, argv, &o) != 0) {
        return usage();
    }
    float *in = malloc(o.count * sizeof(float)), *out = malloc(o.count * sizeof(float));
    double *ms = malloc((size_t)o.iters * sizeof(double));
    if (in == NULL || out == NULL || ms == NULL) {
        fprintf(stderr, "rank %d: out of memory\n", o.rank);
        return 1;
    }
    res = ncclGetUniqueId(&id);
    if (res == ncclSuccess) {
        res = ncclCommInitRank(&comm, o.nranks, id, o.rank);
    }
    if (res != ncclSuccess) {
        fprintf(stderr, "rank %d: init failed: %s: %s\n", o.rank, ncclGetErrorString(res),
                ncclGetLastError(NULL));
        return 1;
    }
    ret = run(&o, comm, in, out, ms);
    if (ret == 0) {
        report(&o, ms);
        res = ncclCommDestroy(comm);
        if (res != ncclSuccess) {
            fprintf(stderr, "rank %d: destroy failed: %s\n", o.rank, ncclGetErrorString(res));
            ret = 1;
        }
    } else {
        (void)ncclCommAbort(comm);
    }
    free(in);
    free(out);
    free(ms);
    return ret;
}
