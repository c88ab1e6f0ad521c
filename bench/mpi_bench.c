/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mpi_bench: the Open MPI side of bench/compare. Times MPI_Allreduce (float sum),
 * MPI_Allgather and MPI_Bcast (bytes) the way braid-perf times NCCL calls: warm-up, a
 * barrier, `iters` calls back to back, mean time per call, maximum over ranks; sizes and
 * bus bandwidth follow nccl-tests (allgather's size is the whole output buffer). Then
 * checks `check` calls with fresh inputs whose exact result is known, and counts wrong
 * elements over all ranks. Exit status 1 if any element was wrong.
 *
 * usage: mpirun -np N mpi_bench -C allreduce|allgather|broadcast -b 8 -e 256M -f 4
 *                               [-n iters] [-w warmup] [-c checks]
 * Prints one row per size: size count type redop root time(us) algbw busbw #wrong.
 */
#define _POSIX_C_SOURCE 200809L

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { AR, AG, BC };

struct bench {
    int coll, rank, n, iters, warmup, check;
    size_t min_bytes, max_bytes;
    double factor;
    char *send, *recv;
};

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'K': case 'k': v *= 1024.0; break;
    case 'M': case 'm': v *= 1048576.0; break;
    case 'G': case 'g': v *= 1073741824.0; break;
    default: break;
    }
    return (size_t)v;
}

/* Element count per rank for a size, as nccl-tests counts it. */
static size_t count_of(const struct bench *b, size_t bytes)
{
    return b->coll == AR ? bytes / sizeof(float) : b->coll == AG ? bytes / (size_t)b->n : bytes;
}

static void run(const struct bench *b, size_t count)
{
    switch (b->coll) {
    case AR: MPI_Allreduce(b->send, b->recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    case AG:
        MPI_Allgather(b->send, (int)count, MPI_BYTE, b->recv, (int)count, MPI_BYTE,
                      MPI_COMM_WORLD);
        break;
    default: MPI_Bcast(b->recv, (int)count, MPI_BYTE, 0, MPI_COMM_WORLD); break;
    }
}

/* Inputs are small integers, so float sums are exact in any order. */
static float ar_val(int rank, size_t i, int seed)
{
    return (float)(((size_t)(rank + 1 + 3 * seed) * 7 + i) % 61);
}

static uint8_t byte_val(int rank, size_t i, int seed)
{
    return (uint8_t)(rank * 37 + i * 11 + (size_t)seed * 101 + 5);
}

static long check_once(const struct bench *b, size_t count, int seed)
{
    long wrong = 0;
    memset(b->recv, 0xa5, b->coll == AG ? count * (size_t)b->n : b->coll == AR ? count * 4 : count);
    for (size_t i = 0; i < count; i++) {
        if (b->coll == AR) {
            ((float *)b->send)[i] = ar_val(b->rank, i, seed);
        } else if (b->coll == AG) {
            ((uint8_t *)b->send)[i] = byte_val(b->rank, i, seed);
        } else if (b->rank == 0) {
            ((uint8_t *)b->recv)[i] = byte_val(0, i, seed);
        }
    }
    run(b, count);
    for (size_t i = 0; i < count; i++) {
        if (b->coll == AR) {
            float want = 0;
            for (int p = 0; p < b->n; p++) {
                want += ar_val(p, i, seed);
            }
            wrong += ((float *)b->recv)[i] != want;
        } else if (b->coll == AG) {
            for (int p = 0; p < b->n; p++) {
                wrong += ((uint8_t *)b->recv)[(size_t)p * count + i] != byte_val(p, i, seed);
            }
        } else {
            wrong += ((uint8_t *)b->recv)[i] != byte_val(0, i, seed);
        }
    }
    return wrong;
}

static int parse(struct bench *b, int argc, char **argv)
{
    int c;
    b->coll = AR;
    b->min_bytes = b->max_bytes = 32u << 20;
    b->factor = 2;
    b->iters = 20;
    b->warmup = 1;
    b->check = 1;
    while ((c = getopt(argc, argv, "C:b:e:f:n:w:c:")) != -1) {
        switch (c) {
        case 'C':
            b->coll = strcmp(optarg, "allreduce") == 0   ? AR
                      : strcmp(optarg, "allgather") == 0 ? AG
                      : strcmp(optarg, "broadcast") == 0 ? BC
                                                         : -1;
            break;
        case 'b': b->min_bytes = parse_size(optarg); break;
        case 'e': b->max_bytes = parse_size(optarg); break;
        case 'f': b->factor = atof(optarg); break;
        case 'n': b->iters = atoi(optarg); break;
        case 'w': b->warmup = atoi(optarg); break;
        case 'c': b->check = atoi(optarg); break;
        default: return -1;
        }
    }
    return b->coll < 0 || b->iters < 1 || b->factor <= 1 ? -1 : 0;
}

int main(int argc, char **argv)
{
    struct bench b = {0};
    long total_wrong = 0;
    double bw_sum = 0;
    int rows = 0;
    static const char *names[] = {"allreduce", "allgather", "broadcast"};

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &b.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &b.n);
    if (parse(&b, argc, argv) != 0) {
        if (b.rank == 0) {
            fprintf(stderr, "usage: mpi_bench -C allreduce|allgather|broadcast -b MIN -e MAX "
                            "-f FACTOR [-n iters] [-w warmup] [-c checks]\n");
        }
        MPI_Finalize();
        return 2;
    }
    b.send = malloc(b.max_bytes + 64);
    b.recv = malloc(b.max_bytes + 64);
    if (b.send == NULL || b.recv == NULL) {
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    memset(b.send, 0, b.max_bytes + 64);
    memset(b.recv, 0, b.max_bytes + 64);
    if (b.rank == 0) {
        printf("# mpi_bench %s nranks %d iters %d warmup %d check %d\n", names[b.coll], b.n,
               b.iters, b.warmup, b.check);
        printf("#       size         count      type   redop    root     time   algbw   busbw "
               "#wrong\n");
    }
    for (size_t bytes = b.min_bytes; bytes <= b.max_bytes; bytes = (size_t)(bytes * b.factor)) {
        size_t count = count_of(&b, bytes);
        size_t size = b.coll == AR ? count * 4 : b.coll == AG ? count * (size_t)b.n : count;
        double t, tmax, algbw, busbw;
        long wrong = 0, wsum = 0;
        for (int w = 0; w < b.warmup; w++) {
            run(&b, count);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        t = now_us();
        for (int it = 0; it < b.iters; it++) {
            run(&b, count);
        }
        t = (now_us() - t) / b.iters;
        MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        for (int c = 0; c < b.check; c++) {
            wrong += check_once(&b, count, c + 1);
        }
        MPI_Allreduce(&wrong, &wsum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        total_wrong += wsum;
        if (b.rank == 0) {
            double factor = b.coll == AR ? 2.0 * (b.n - 1) / b.n
                            : b.coll == AG ? (double)(b.n - 1) / b.n
                                           : 1.0;
            algbw = (double)size / tmax / 1e3; /* bytes per microsecond / 1e3 = GB/s */
            busbw = algbw * factor;
            bw_sum += busbw;
            rows++;
            printf("%12zu  %12zu  %8s  %6s  %6d  %7.2f  %6.3f  %6.3f  %6ld\n", size, count,
                   b.coll == AR ? "float" : "uint8", b.coll == AR ? "sum" : "none",
                   b.coll == BC ? 0 : -1, tmax, algbw, busbw, wsum);
            fflush(stdout);
        }
        if (bytes == 0) {
            break;
        }
    }
    if (b.rank == 0) {
        printf("# Out of bounds values : %ld %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %g\n", rows ? bw_sum / rows : 0.0);
    }
    free(b.send);
    free(b.recv);
    MPI_Finalize();
    return total_wrong != 0;
}
