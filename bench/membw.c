/* SPDX-License-Identifier: Apache-2.0 */
/*
 * membw: what one core can move, the ceiling for any collective on host memory here.
 * Times memcpy and an out-of-place float sum (c[i] = a[i] + b[i], the inner step of a
 * ring reduction) over buffers of the given size (default 256 MiB), best of `reps`.
 * Prints "memcpy_GBps X" and "sum_GBps Y" (bytes of output per second), and the memory
 * traffic behind each (copy: read + write; sum: two reads + one write).
 *
 * usage: membw [bytes] [reps]
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Kept out of line so the compiler cannot fold the loop into the caller's knowledge. */
__attribute__((noinline)) static void sum_floats(float *restrict c, const float *restrict a,
                                                 const float *restrict b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        c[i] = a[i] + b[i];
    }
}

int main(int argc, char **argv)
{
    size_t bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : (size_t)256 << 20;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    size_t n = bytes / sizeof(float);
    float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
    double best_copy = 1e30, best_sum = 1e30, check = 0;

    if (a == NULL || b == NULL || c == NULL || reps < 1) {
        fprintf(stderr, "membw: cannot allocate 3 x %zu bytes\n", bytes);
        return 2;
    }
    for (size_t i = 0; i < n; i++) { /* touch every page before timing */
        a[i] = (float)(i & 1023);
        b[i] = 1.0f;
        c[i] = 0.0f;
    }
    for (int r = 0; r < reps; r++) {
        double t = now_s();
        memcpy(c, a, bytes);
        t = now_s() - t;
        best_copy = t < best_copy ? t : best_copy;
        check += c[n / 2];
        t = now_s();
        sum_floats(c, a, b, n);
        t = now_s() - t;
        best_sum = t < best_sum ? t : best_sum;
        check += c[n / 3];
    }
    printf("bytes %zu reps %d\n", bytes, reps);
    printf("memcpy_GBps %.3f traffic_GBps %.3f\n", bytes / best_copy / 1e9,
           2.0 * bytes / best_copy / 1e9);
    printf("sum_GBps %.3f traffic_GBps %.3f\n", bytes / best_sum / 1e9,
           3.0 * bytes / best_sum / 1e9);
    printf("checksum %.1f\n", check); /* keeps the results observable */
    free(a);
    free(b);
    free(c);
    return 0;
}
