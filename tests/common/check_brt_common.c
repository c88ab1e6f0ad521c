/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "brt_common": the test helpers are tested before anything is judged with
 * them. The float encoders against known bit patterns, ties and overflow, exhaustive
 * round trips, and the compiler's own _Float16 where it has one; the reference against
 * an in-process "library" that reduces in another order and rounds every step, so the
 * claim that the chosen inputs give order-independent exact results is checked for every
 * type, op and rank count; and the launcher's reporting of failed, dead and hung ranks.
 */
#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "brt_check.h"
#include "brt_coll.h"
#include "brt_data.h"
#include "brt_fp.h"
#include "brt_launch.h"

START_TEST(test_fp16_known_values)
{
    ck_assert_uint_eq(brt_fp16_from_double(1.0), 0x3c00);
    ck_assert_uint_eq(brt_fp16_from_double(-2.0), 0xc000);
    ck_assert_uint_eq(brt_fp16_from_double(0.1), 0x2e66);
    ck_assert_uint_eq(brt_fp16_from_double(-0.0), 0x8000);
    ck_assert_uint_eq(brt_fp16_from_double(65504.0), 0x7bff);
    ck_assert_uint_eq(brt_fp16_from_double(65519.0), 0x7bff);
    ck_assert_uint_eq(brt_fp16_from_double(65520.0), 0x7c00); /* tie goes to even: infinity */
    ck_assert_uint_eq(brt_fp16_from_double(INFINITY), 0x7c00);
    ck_assert_uint_eq(brt_fp16_from_double(0x1p-24), 0x0001);
    ck_assert_uint_eq(brt_fp16_from_double(0x1p-25), 0x0000);       /* tie to even: zero */
    ck_assert_uint_eq(brt_fp16_from_double(0x3p-25), 0x0002);       /* 1.5 quanta: to 2 */
    ck_assert_uint_eq(brt_fp16_from_double(0x1p-14), 0x0400);       /* smallest normal */
    ck_assert_uint_eq(brt_fp16_from_double(1.0 + 0x1p-11), 0x3c00); /* tie to even */
    ck_assert_uint_eq(brt_fp16_from_double(1.0 + 0x3p-11), 0x3c02);
    ck_assert_uint_eq(brt_fp16_from_double(1.0 + 0x1p-11 + 0x1p-40), 0x3c01);
    ck_assert(isnan(brt_fp16_to_double(brt_fp16_from_double(NAN))));
    ck_assert(brt_fp16_to_double(0x7bff) == 65504.0);
    ck_assert(brt_fp16_to_double(0x0001) == 0x1p-24);
    ck_assert(isinf(brt_fp16_to_double(0xfc00)) && brt_fp16_to_double(0xfc00) < 0);
}
END_TEST

START_TEST(test_bf16_known_values)
{
    ck_assert_uint_eq(brt_bf16_from_double(1.0), 0x3f80);
    ck_assert_uint_eq(brt_bf16_from_double(3.0), 0x4040);
    ck_assert_uint_eq(brt_bf16_from_double(-0.5), 0xbf00);
    ck_assert_uint_eq(brt_bf16_from_double(1.0 + 0x1p-8), 0x3f80); /* tie to even */
    ck_assert_uint_eq(brt_bf16_from_double(1.0 + 0x3p-8), 0x3f82);
    ck_assert_uint_eq(brt_bf16_from_double(0x1.fep127), 0x7f7f); /* largest finite */
    ck_assert_uint_eq(brt_bf16_from_double(0x1.ffp127), 0x7f80); /* tie: infinity */
    ck_assert_uint_eq(brt_bf16_from_double(0x1p-133), 0x0001);
    ck_assert_uint_eq(brt_bf16_from_double(0x1p-126), 0x0080);
    ck_assert(isnan(brt_bf16_to_double(brt_bf16_from_double(NAN))));
}
END_TEST

START_TEST(test_fp8_known_values)
{
    /* E4M3 (FN): bias 7, no infinities, 0x7f/0xff NaN, 448 the largest. */
    ck_assert_uint_eq(brt_e4m3_from_double(1.0), 0x38);
    ck_assert_uint_eq(brt_e4m3_from_double(-1.0), 0xb8);
    ck_assert_uint_eq(brt_e4m3_from_double(448.0), 0x7e);
    ck_assert_uint_eq(brt_e4m3_from_double(464.0), 0x7e); /* tie to even mantissa 110 */
    ck_assert_uint_eq(brt_e4m3_from_double(480.0) & 0x7f, 0x7f);
    ck_assert_uint_eq(brt_e4m3_from_double(0x1p-9), 0x01);
    ck_assert_uint_eq(brt_e4m3_from_double(0x1p-6), 0x08);
    ck_assert_uint_eq(brt_e4m3_from_double(1.0625), 0x38); /* tie to even */
    ck_assert_uint_eq(brt_e4m3_from_double(1.1875), 0x3a);
    ck_assert_uint_eq(brt_e4m3_from_double(16.0), 0x58);
    ck_assert(brt_e4m3_to_double(0x7e) == 448.0);
    ck_assert(isnan(brt_e4m3_to_double(0x7f)) && isnan(brt_e4m3_to_double(0xff)));
    ck_assert(brt_e4m3_to_double(0x78) == 256.0); /* exponent field 15 is finite */
    /* E5M2: bias 15, IEEE-like. */
    ck_assert_uint_eq(brt_e5m2_from_double(1.0), 0x3c);
    ck_assert_uint_eq(brt_e5m2_from_double(57344.0), 0x7b);
    ck_assert_uint_eq(brt_e5m2_from_double(61440.0), 0x7c); /* tie: infinity */
    ck_assert_uint_eq(brt_e5m2_from_double(0x1p-16), 0x01);
    ck_assert_uint_eq(brt_e5m2_from_double(1.125), 0x3c);
    ck_assert_uint_eq(brt_e5m2_from_double(1.375), 0x3e);
    ck_assert_uint_eq(brt_e5m2_from_double(-8.0), 0xc8);
    ck_assert(isinf(brt_e5m2_to_double(0x7c)));
    ck_assert(isnan(brt_e5m2_to_double(0x7d)));
}
END_TEST

/* Every bit pattern decodes to a value that encodes back to it (NaNs stay NaN). */
START_TEST(test_round_trips)
{
    for (uint32_t b = 0; b < 65536; b++) {
        double h = brt_fp16_to_double((uint16_t)b), f = brt_bf16_to_double((uint16_t)b);
        if (isnan(h)) {
            ck_assert(isnan(brt_fp16_to_double(brt_fp16_from_double(h))));
        } else {
            ck_assert_uint_eq(brt_fp16_from_double(h), b);
        }
        if (isnan(f)) {
            ck_assert(isnan(brt_bf16_to_double(brt_bf16_from_double(f))));
        } else {
            ck_assert_uint_eq(brt_bf16_from_double(f), b);
        }
    }
    for (uint32_t b = 0; b < 256; b++) {
        double x = brt_e4m3_to_double((uint8_t)b), y = brt_e5m2_to_double((uint8_t)b);
        if (!isnan(x)) {
            ck_assert_uint_eq(brt_e4m3_from_double(x), b);
        }
        if (!isnan(y)) {
            ck_assert_uint_eq(brt_e5m2_from_double(y), b);
        }
    }
}
END_TEST

/* Against conversions this file does not write: the compiler's _Float16 and the classic
 * float-to-bfloat16 rounding on the bits of a float. */
START_TEST(test_against_hardware_conversions)
{
    uint64_t s = 1;
    for (int k = 0; k < 200000; k++) {
        s = brt_mix64(s);
        double x = ldexp((double)(s >> 11) * 0x1p-53, (int)(s % 60) - 40) * ((s & 1) ? -1 : 1);
#ifdef __FLT16_MAX__
        _Float16 h = (_Float16)x;
        uint16_t hb;
        memcpy(&hb, &h, 2);
        ck_assert_msg(brt_fp16_from_double(x) == hb, "fp16 of %a: 0x%04x, compiler 0x%04x", x,
                      brt_fp16_from_double(x), hb);
#endif
        float f = (float)x;
        uint32_t fb;
        memcpy(&fb, &f, 4);
        uint16_t bb = (uint16_t)((fb + 0x7fffu + ((fb >> 16) & 1u)) >> 16);
        ck_assert_msg(brt_bf16_from_double((double)f) == bb, "bf16 of %a: 0x%04x, bit trick 0x%04x",
                      (double)f, brt_bf16_from_double((double)f), bb);
    }
}
END_TEST

/* A reduction the way a library might do it: ranks in reverse order, rounded to the type
 * after every step, avg as scaled inputs (float) or sum then divide (integers). */
static brt_val_t lib_like_reduce(ncclDataType_t t, int op, uint32_t seed, int n, size_t i)
{
    const brt_type_info_t *ti = brt_type_info(t);
    unsigned char tmp[8], sc[8];
    brt_val_t s = brt_premul_scalar(t, sc), acc = {0}, x, inv;
    inv.f = 1.0 / n;
    brt_store(t, tmp, 0, inv);
    inv = brt_load(t, tmp, 0); /* 1/n rounded to the type, as NCCL's float avg uses */
    for (int r = n - 1; r >= 0; r--) {
        x = brt_input(t, op, seed, n, r, i);
        if (ti->kind == BRT_KIND_FLOAT) {
            if (op == BRT_PREMULSUM) {
                x.f *= s.f;
            } else if (op == BRT_AVG) {
                x.f *= inv.f;
            }
            brt_store(t, tmp, 0, x);
            x = brt_load(t, tmp, 0);
        } else if (op == BRT_PREMULSUM) {
            x.i *= s.i; /* same bits for the unsigned types */
        }
        if (r == n - 1) {
            acc = x;
        } else if (ti->kind == BRT_KIND_FLOAT) {
            switch (op) {
            case BRT_PROD: acc.f *= x.f; break;
            case BRT_MAX: acc.f = fmax(acc.f, x.f); break;
            case BRT_MIN: acc.f = fmin(acc.f, x.f); break;
            default: acc.f += x.f; break;
            }
        } else if (ti->kind == BRT_KIND_SINT) {
            switch (op) {
            case BRT_PROD: acc.i *= x.i; break;
            case BRT_MAX: acc.i = x.i > acc.i ? x.i : acc.i; break;
            case BRT_MIN: acc.i = x.i < acc.i ? x.i : acc.i; break;
            default: acc.i += x.i; break;
            }
        } else {
            switch (op) {
            case BRT_PROD: acc.u *= x.u; break;
            case BRT_MAX: acc.u = x.u > acc.u ? x.u : acc.u; break;
            case BRT_MIN: acc.u = x.u < acc.u ? x.u : acc.u; break;
            default: acc.u += x.u; break;
            }
        }
        brt_store(t, tmp, 0, acc); /* every step rounds (and wraps) in the type */
        acc = brt_load(t, tmp, 0);
    }
    if (op == BRT_AVG && ti->kind == BRT_KIND_SINT) {
        acc.i /= n;
    } else if (op == BRT_AVG && ti->kind == BRT_KIND_UINT) {
        acc.u /= (uint64_t)n;
    }
    return acc;
}

START_TEST(test_reference_is_order_independent)
{
    const size_t count = 5003;
    char err[512];
    for (int n = 1; n <= 8; n++) {
        for (int ti = 0; ti < BRT_NTYPES; ti++) {
            ncclDataType_t t = brt_type_at(ti);
            unsigned char *buf = malloc(count * 8);
            for (int op = 0; op < BRT_NOPS; op++) {
                uint32_t seed = (uint32_t)(n * 100 + ti * 10 + op);
                for (size_t i = 0; i < count; i++) {
                    brt_store(t, buf, i, lib_like_reduce(t, op, seed, n, 77 + i));
                }
                int bad = brt_check_reduced(t, op, seed, n, buf, 77, count, err, sizeof(err));
                ck_assert_msg(!bad, "%s %s n=%d: %s", brt_type_info(t)->name, brt_op_name(op), n,
                              err);
                /* And a wrong element is caught and named. */
                if (op != BRT_AVG || brt_type_info(t)->kind != BRT_KIND_FLOAT) {
                    brt_val_t v = brt_load(t, buf, 4000);
                    if (brt_type_info(t)->kind == BRT_KIND_FLOAT) {
                        v.f = v.f == 0.0 ? 1.0 : -v.f;
                    } else {
                        v.u ^= 1;
                    }
                    brt_store(t, buf, 4000, v);
                    bad = brt_check_reduced(t, op, seed, n, buf, 77, count, err, sizeof(err));
                    ck_assert_msg(bad && strstr(err, "element 4000") != NULL, "%s %s: %s",
                                  brt_type_info(t)->name, brt_op_name(op), err);
                }
            }
            free(buf);
        }
    }
}
END_TEST

START_TEST(test_float_avg_tolerance_catches_missing_division)
{
    const size_t count = 1000;
    char err[512];
    for (int ti = 0; ti < BRT_NTYPES; ti++) {
        ncclDataType_t t = brt_type_at(ti);
        unsigned char buf[1000 * 8];
        int n = 4;
        if (brt_type_info(t)->kind != BRT_KIND_FLOAT) {
            continue;
        }
        /* A library that forgets to divide: a sum where the average should be. */
        for (size_t i = 0; i < count; i++) {
            brt_store(t, buf, i, lib_like_reduce(t, BRT_SUM, 3, n, i));
        }
        ck_assert_msg(brt_check_reduced(t, BRT_AVG, 3, n, buf, 0, count, err, sizeof(err)),
                      "%s: avg check passed a plain sum", brt_type_info(t)->name);
    }
}
END_TEST

static int body_ok(brt_rank_ctx_t *ctx)
{
    (void)ctx;
    return 0;
}

static int body_rank1_fails(brt_rank_ctx_t *ctx)
{
    if (ctx->rank == 1) {
        brt_fail(ctx, "deliberate failure %d", 42);
        return 1;
    }
    return 0;
}

static int body_rank2_hangs(brt_rank_ctx_t *ctx)
{
    if (ctx->rank == 2) {
        brt_doing(ctx, "sleeping on purpose");
        for (;;) {
            pause();
        }
    }
    return 0;
}

static int body_rank0_dies(brt_rank_ctx_t *ctx)
{
    if (ctx->rank == 0) {
        raise(SIGUSR1); /* ASan catches SIGSEGV and Check SIGTERM; nobody this one */
    }
    return 0;
}

START_TEST(test_launcher_reports)
{
    char out[8192];
    ck_assert_int_eq(brt_procs_run(3, body_ok, NULL, 30, out, sizeof(out)), 0);
    ck_assert_int_eq(brt_procs_run(3, body_rank1_fails, NULL, 30, out, sizeof(out)), 1);
    ck_assert_msg(strstr(out, "rank 1/3 failed: deliberate failure 42") != NULL, "%s", out);
    double t0 = brt_now();
    ck_assert_int_eq(brt_procs_run(3, body_rank2_hangs, NULL, 1.0, out, sizeof(out)), 1);
    ck_assert(brt_now() - t0 < 10);
    ck_assert_msg(strstr(out, "rank 2/3 hung") && strstr(out, "sleeping on purpose"), "%s", out);
    ck_assert_int_eq(brt_procs_run(2, body_rank0_dies, NULL, 30, out, sizeof(out)), 1);
    ck_assert_msg(strstr(out, "rank 0/2 died of signal 10") != NULL, "%s", out);
    ck_assert_int_eq(brt_threads_run(4, body_ok, NULL, 30, out, sizeof(out)), 0);
    ck_assert_int_eq(brt_threads_run(3, body_rank1_fails, NULL, 30, out, sizeof(out)), 1);
    ck_assert_msg(strstr(out, "rank 1/3 (thread) failed: deliberate failure 42") != NULL, "%s",
                  out);
}
END_TEST

START_TEST(test_text_names_rank)
{
    ck_assert(brt_text_names_rank("peer rank 2 died", 2));
    ck_assert(brt_text_names_rank("missing ranks: 1, 3", 3));
    ck_assert(brt_text_names_rank("Rank(s) 0 and 2 never arrived", 2));
    ck_assert(!brt_text_names_rank("rank 12 died", 2));
    ck_assert(!brt_text_names_rank("rank 0 (host 2) failed", 2));
    ck_assert(!brt_text_names_rank("peer 2 died", 2));
    ck_assert(brt_text_has("Invalid DataType 99", "datatype"));
}
END_TEST

START_TEST(test_case_lists_are_deterministic)
{
    brt_case_t *a = NULL, *b = NULL;
    setenv("NCCL_BUFFSIZE", "64K", 1); /* the big list exists only for a small FIFO */
    ck_assert_uint_eq(brt_buffsize(), 65536);
    for (int m = BRT_MATRIX_FULL; m <= BRT_MATRIX_HUGE; m++) {
        size_t na = brt_cases_build((brt_matrix_t)m, 5, &a);
        size_t nb = brt_cases_build((brt_matrix_t)m, 5, &b);
        ck_assert_uint_eq(na, nb);
        ck_assert_uint_gt(na, 10);
        ck_assert_int_eq(memcmp(a, b, na * sizeof(*a)), 0);
        /* Every collective appears, with roots other than 0. */
        int seen[BRT_NFUNCS] = {0}, nonzero_root = 0;
        for (size_t k = 0; k < na; k++) {
            seen[a[k].func] = 1;
            nonzero_root |= a[k].root > 0;
        }
        for (int f = 0; f < BRT_NFUNCS; f++) {
            ck_assert_msg(seen[f], "matrix %d lacks %s", m, brt_func_name((brt_func_t)f));
        }
        ck_assert(nonzero_root);
        free(a);
        free(b);
    }
}
END_TEST

static Suite *brt_common_suite(void)
{
    Suite *s = suite_create("brt_common");
    TCase *tc = tcase_create("fp");
    tcase_set_timeout(tc, 60 * brt_time_scale());
    tcase_add_test(tc, test_fp16_known_values);
    tcase_add_test(tc, test_bf16_known_values);
    tcase_add_test(tc, test_fp8_known_values);
    tcase_add_test(tc, test_round_trips);
    tcase_add_test(tc, test_against_hardware_conversions);
    suite_add_tcase(s, tc);
    tc = tcase_create("reference");
    tcase_set_timeout(tc, 120 * brt_time_scale());
    tcase_add_test(tc, test_reference_is_order_independent);
    tcase_add_test(tc, test_float_avg_tolerance_catches_missing_division);
    tcase_add_test(tc, test_case_lists_are_deterministic);
    suite_add_tcase(s, tc);
    tc = tcase_create("launcher");
    tcase_set_timeout(tc, 120 * brt_time_scale());
    tcase_add_test(tc, test_launcher_reports);
    tcase_add_test(tc, test_text_names_rank);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return brt_suite_run(brt_common_suite());
}
