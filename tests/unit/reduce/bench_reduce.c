/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Throughput of br_reduce against memcpy, for the record (never run as a test, never
 * asserted): bench_reduce [SIZE [REPETITIONS [PORTABLE]]], SIZE like 256K or 64M (default:
 * both). For each type it times dst = recv (+) local with distinct buffers and in place
 * (dst == recv), and prints GB/s of output written, next to a memcpy of the same size.
 * PORTABLE=1 measures the portable C loops instead of the fastest for this CPU.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec_reduce.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Best of `reps` runs, in seconds. */
static double time_reduce(void *dst, const void *a, const void *b, size_t n, const br_redop_t *op,
                          int reps)
{
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t = now_s();
        br_reduce(dst, a, b, n, op, 0);
        t = now_s() - t;
        best = t < best ? t : best;
    }
    return best;
}

static double time_memcpy(void *dst, const void *src, size_t bytes, int reps)
{
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t = now_s();
        memcpy(dst, src, bytes);
        t = now_s() - t;
        best = t < best ? t : best;
        /* Keep the copy observable. */
        __asm__ volatile("" : : "r"(dst) : "memory");
    }
    return best;
}

/* "64M", "256K" or a byte count. */
static size_t parse_size(const char *s)
{
    char *end;
    size_t v = strtoul(s, &end, 0);
    switch (*end) {
    case 'k':
    case 'K': return v << 10;
    case 'm':
    case 'M': return v << 20;
    case 'g':
    case 'G': return v << 30;
    default: return v;
    }
}

static void bench_size(size_t bytes, int reps)
{
    static const ncclDataType_t types[] = {ncclFloat32,    ncclFloat16,   ncclBfloat16,
                                           ncclFloat64,    ncclInt32,     ncclInt8,
                                           ncclFloat8e4m3, ncclFloat8e5m2};
    static const ncclRedOp_t ops[] = {ncclSum, ncclMax, ncclAvg};
    static const char *const op_names[] = {"sum", "max", "avg"};
    unsigned char *a = malloc(bytes), *b = malloc(bytes), *d = malloc(bytes);

    if (a == NULL || b == NULL || d == NULL) {
        fprintf(stderr, "bench_reduce: cannot allocate 3 x %zu bytes\n", bytes);
        exit(1);
    }
    /* Small positive values: no NaN or infinity in any type, no denormal slow paths. */
    for (size_t i = 0; i < bytes; i++) {
        a[i] = (unsigned char)(0x30 + (i * 7) % 13);
        b[i] = (unsigned char)(0x30 + (i * 5) % 11);
    }
    memset(d, 0, bytes);
    double tm = time_memcpy(d, a, bytes, reps);
    printf("%zu KiB per buffer; GB/s of output (best of %d)\n", bytes >> 10, reps);
    printf("  %-11s %-4s %8.2f\n", "memcpy", "", (double)bytes / tm * 1e-9);
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
            br_redop_t op;
            size_t n = bytes / br_type_size(types[t]);
            br_redop_builtin(&op, ops[o], types[t], 4);
            double t3 = time_reduce(d, a, b, n, &op, reps);
            memcpy(d, a, bytes);
            double t2 = time_reduce(d, d, b, n, &op, reps);
            printf("  %-11s %-4s %8.2f  in place %6.2f  (%.2f x memcpy)\n", br_type_name(types[t]),
                   op_names[o], (double)bytes / t3 * 1e-9, (double)bytes / t2 * 1e-9, tm / t3);
        }
    }
    free(a);
    free(b);
    free(d);
}

int main(int argc, char **argv)
{
    int reps = argc > 2 ? atoi(argv[2]) : 10;
    int portable = argc > 3 ? atoi(argv[3]) : 0;

    printf("loops: %s\n", br_reduce_use_portable(portable));
    if (argc > 1) {
        bench_size(parse_size(argv[1]), reps);
        return 0;
    }
    /* Cache-resident (an executor chunk) and memory-bound. */
    bench_size(256 << 10, reps * 20);
    bench_size(64 << 20, reps);
    return 0;
}
