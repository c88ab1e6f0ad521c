/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "copy": br_copy_stream copies exactly the bytes asked for, whatever the
 * alignment of source and destination and whatever the length (the head before the
 * first 16-byte boundary, the 64-byte body, the tail, and the short copies that take
 * memcpy), and writes nothing outside them; br_llc_size reads the cache the kernel
 * reports (compared with sysfs read here).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define GUARD 80

/* A byte pattern no shifted copy of itself matches. */
static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        p[i] = (unsigned char)((i * 131u + seed * 7u + (i >> 8)) ^ (i >> 16));
    }
}

static void check_one(size_t src_off, size_t dst_off, size_t n)
{
    size_t cap = n + 2 * GUARD + 64;
    unsigned char *src = malloc(cap), *dst = malloc(cap);
    ck_assert_ptr_nonnull(src);
    ck_assert_ptr_nonnull(dst);
    fill(src, cap, 1);
    memset(dst, 0xA5, cap);
    br_copy_stream(dst + GUARD + dst_off, src + GUARD + src_off, n);
    ck_assert_msg(memcmp(dst + GUARD + dst_off, src + GUARD + src_off, n) == 0,
                  "%zu bytes from offset %zu to offset %zu differ", n, src_off, dst_off);
    for (size_t i = 0; i < cap; i++) {
        if (i < GUARD + dst_off || i >= GUARD + dst_off + n) {
            ck_assert_msg(dst[i] == 0xA5, "byte %zd outside the copy of %zu bytes (offsets %zu, "
                          "%zu) was written", (ssize_t)i - (ssize_t)(GUARD + dst_off), n, src_off,
                          dst_off);
        }
    }
    free(src);
    free(dst);
}

START_TEST(test_copy_every_alignment_and_short_length)
{
    static const size_t lens[] = {0, 1, 15, 16, 63, 64, 255, 256, 257, 271, 272, 319, 320, 1000};
    for (size_t s = 0; s < 16; s++) {
        for (size_t d = 0; d < 16; d++) {
            for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
                check_one(s, d, lens[i]);
            }
        }
    }
}
END_TEST

START_TEST(test_copy_long_with_odd_tails)
{
    static const size_t lens[] = {4096, 4096 + 63, 65536 + 17, (1u << 20) + 1, (3u << 20) + 45};
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        check_one(3, 9, lens[i]);
        check_one(0, 0, lens[i]);
        check_one(16, 48, lens[i]);
    }
}
END_TEST

START_TEST(test_llc_size_matches_sysfs)
{
    int ncpus = -1;
    const char *source = NULL;
    size_t llc = br_llc_size(&ncpus, &source);
    ck_assert_ptr_nonnull(source);
    ck_assert_int_ge(ncpus, 0);
    /* The reference: the largest size among CPU 0's data or unified caches in sysfs. */
    size_t want = 0;
    int any = 0;
    for (int i = 0; i < 16; i++) {
        char path[96], type[32] = "", size[32] = "";
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
        FILE *f = fopen(path, "r");
        if (f == NULL) {
            break;
        }
        any = 1;
        ck_assert_ptr_nonnull(fgets(type, sizeof(type), f));
        fclose(f);
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        f = fopen(path, "r");
        if (f == NULL || strncmp(type, "Instruction", 11) == 0) {
            if (f != NULL) {
                fclose(f);
            }
            continue;
        }
        ck_assert_ptr_nonnull(fgets(size, sizeof(size), f));
        fclose(f);
        char *end;
        size_t v = strtoull(size, &end, 10);
        v <<= *end == 'K' ? 10 : *end == 'M' ? 20 : 0;
        want = v > want ? v : want;
    }
    if (!any || want == 0) {
        printf("SKIP llc_size_matches_sysfs: this machine's sysfs lists no caches (%s gave %zu)\n",
               source, llc);
        return;
    }
    ck_assert_str_eq(source, "sysfs");
    ck_assert_uint_eq(llc, want);
    ck_assert_int_gt(ncpus, 0);
}
END_TEST

static Suite *copy_suite(void)
{
    Suite *s = suite_create("copy");
    TCase *tc = tcase_create("copy");
    tcase_add_test(tc, test_copy_every_alignment_and_short_length);
    tcase_add_test(tc, test_copy_long_with_odd_tails);
    tcase_add_test(tc, test_llc_size_matches_sysfs);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(copy_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
