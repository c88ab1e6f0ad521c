/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Copies of large outputs with non-temporal stores, and the cache size that decides
 * when (util.h). A copy whose source and destination no longer fit the last-level cache
 * only evicts other lines on its way to memory, and each destination line it writes is
 * first read from memory (the read for ownership): a third of the traffic of a copy
 * that is bound by memory bandwidth. Non-temporal stores write whole lines without
 * reading them. glibc's memcpy switches to them above a threshold it takes from the
 * cache size CPUID reports, which on virtual machines can be the whole socket's (256
 * MiB here, where the cores share 32 MiB): so Braid decides for its own copies.
 */
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "util.h"

void br_copy_out(void *dst, const void *src, size_t n, int stream)
{
    if (stream) {
        br_copy_stream(dst, src, n);
    } else {
        memcpy(dst, src, n);
    }
}

void br_copy_stream(void *dst, const void *src, size_t n)
{
#if defined(__x86_64__)
    char *d = dst;
    const char *s = src;
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;
    if (n < head + 256) {
        memcpy(dst, src, n);
        return;
    }
    memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    size_t body = n & ~(size_t)63;
    for (size_t i = 0; i < body; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));
        _mm_stream_si128((__m128i *)(d + i), a);
        _mm_stream_si128((__m128i *)(d + i + 16), b);
        _mm_stream_si128((__m128i *)(d + i + 32), c);
        _mm_stream_si128((__m128i *)(d + i + 48), e);
    }
    /* Non-temporal stores are weakly ordered: make them visible before any later store
     * (a `done` flag another rank acquires). */
    _mm_sfence();
    memcpy(d + body, s + body, n - body);
#else
    memcpy(dst, src, n);
#endif
}

/* The first line of a sysfs file of cache index i of CPU 0, or "" when absent. */
static void cache_attr(int i, const char *name, char *buf, size_t len)
{
    char path[96];
    snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/%s", i, name);
    FILE *f = fopen(path, "r");
    buf[0] = '\0';
    if (f != NULL) {
        if (fgets(buf, (int)len, f) == NULL) {
            buf[0] = '\0';
        }
        fclose(f);
    }
    buf[strcspn(buf, "\n")] = '\0';
}

/* CPUs in a sysfs CPU list such as "0-15,32-47". */
static int count_cpus(const char *list)
{
    int n = 0;
    for (const char *p = list; *p != '\0';) {
        char *end;
        long lo = strtol(p, &end, 10), hi = lo;
        if (end == p) {
            break;
        }
        if (*end == '-') {
            hi = strtol(end + 1, &end, 10);
        }
        n += hi >= lo ? (int)(hi - lo + 1) : 0;
        if (*end != ',') {
            break;
        }
        p = end + 1;
    }
    return n;
}

/* What br_llc_size answers: read once per process (about 200 us of sysfs reads, which
 * every communicator's init would otherwise pay again). */
static pthread_once_t llc_once = PTHREAD_ONCE_INIT;
static size_t llc_bytes;
static int llc_cpus;
static const char *llc_source;

static void llc_read(void)
{
    size_t best = 0;
    int best_level = 0, ncpus = 0;
    char buf[256];

    /* The largest level of unified or data cache CPU 0 has, as the kernel reports it. */
    for (int i = 0; i < 16; i++) {
        cache_attr(i, "level", buf, sizeof(buf));
        if (buf[0] == '\0') {
            break;
        }
        int level = atoi(buf);
        cache_attr(i, "type", buf, sizeof(buf));
        if (strcmp(buf, "Instruction") == 0 || level < best_level) {
            continue;
        }
        cache_attr(i, "size", buf, sizeof(buf));
        char *end;
        unsigned long long v = strtoull(buf, &end, 10);
        switch (toupper((unsigned char)*end)) {
        case 'K': v <<= 10; break;
        case 'M': v <<= 20; break;
        default: break;
        }
        if (v == 0) {
            continue;
        }
        cache_attr(i, "shared_cpu_list", buf, sizeof(buf));
        best = (size_t)v;
        best_level = level;
        ncpus = count_cpus(buf);
    }
    if (best > 0) {
        llc_bytes = best;
        llc_cpus = ncpus;
        llc_source = "sysfs";
        return;
    }
    long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
    llc_bytes = v > 0 ? (size_t)v : 0;
    llc_cpus = 0;
    llc_source = "sysconf";
}

size_t br_llc_size(int *ncpus_p, const char **source_p)
{
    pthread_once(&llc_once, llc_read);
    *ncpus_p = llc_cpus;
    *source_p = llc_source;
    return llc_bytes;
}
