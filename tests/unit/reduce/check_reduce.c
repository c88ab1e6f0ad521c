/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "reduce": br_reduce and the narrow-float conversions against a reference
 * written from the format definitions (reduce_ref.c), which shares no code or trick with
 * core/exec/exec_reduce.c.
 * Every type, op, awkward count, aliasing and NULL operand is run through both the
 * portable loops and the fastest ones of this CPU.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_reduce.h"
#include "nccl.h"
#include "reduce_ref.h"

/* ---- Types ---------------------------------------------------------------------- */

static const ncclDataType_t all_types[] = {
    ncclInt8,    ncclUint8,   ncclInt32,   ncclUint32,   ncclInt64,      ncclUint64,
    ncclFloat16, ncclFloat32, ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2,
};
#define NTYPES ((int)(sizeof(all_types) / sizeof(all_types[0])))

/* ---- Ops under test ---------------------------------------------------------------- */

#define NOPS 9
static const char *const op_names[NOPS] = {"sum",       "prod",       "max",
                                           "min",       "avg",        "avg-nopost",
                                           "premulsum", "sumpostdiv", "sumpostdiv-nopost"};

/* Build op number `which` for type t, its flags, and the reference description. */
static void make_op(ncclDataType_t t, int which, br_redop_t *op, int *flags_p, ref_op_t *ref)
{
    static const ncclRedOp_t builtin[] = {ncclSum, ncclProd, ncclMax, ncclMin};
    const int nranks = 3;

    memset(ref, 0, sizeof(*ref));
    ref->divisor = 1;
    *flags_p = BR_REDUCE_POST;
    if (which < 4) {
        br_redop_builtin(op, builtin[which], t, nranks);
        ref->kind = which == 0 ? R_SUM : which == 1 ? R_PROD : which == 2 ? R_MAX : R_MIN;
        return;
    }
    if (which == 4 || which == 5) {
        br_redop_builtin(op, ncclAvg, t, nranks);
        *flags_p = which == 4 ? BR_REDUCE_POST : 0;
        if (is_int(t)) {
            ref->kind = which == 4 ? R_SUMDIV : R_SUM;
            ref->divisor = nranks;
        } else {
            /* 1/3, rounded to float and then to the type, as NCCL does (double keeps
             * its own rounding). */
            ref->kind = R_PREMUL;
            ref->scalar =
                t == ncclFloat64 ? fbits(t, 1.0 / nranks) : fbits(t, (double)(float)(1.0 / nranks));
        }
        return;
    }
    if (which == 6) {
        uint64_t s;
        if (is_int(t)) {
            s = is_signed_int(t) ? (uint64_t)-3 & type_mask(t)
                                 : 0xc8c8c8c8c8c8c8c8ull & type_mask(t);
        } else {
            s = fbits(t, -1.25);
        }
        br_redop_premulsum(op, t, &s); /* little endian: the low bytes are the element */
        ref->kind = R_PREMUL;
        ref->scalar = s;
        return;
    }
    /* A SUMPOSTDIV op built by hand, floats included. */
    br_redop_builtin(op, ncclSum, t, 1);
    op->kind = BR_RED_SUMPOSTDIV;
    op->divisor = 5;
    ref->divisor = 5;
    ref->kind = which == 7 ? R_SUMDIV : R_SUM;
    *flags_p = which == 7 ? BR_REDUCE_POST : 0;
}

/* Reference kinds for the unary forms: recv == NULL applies pre then post to local;
 * local == NULL applies post to recv. */
static int unary_kind(int kind, int recv_null)
{
    if (kind == R_PREMUL) {
        return recv_null ? R_PRE1 : R_COPY;
    }
    if (kind == R_SUMDIV) {
        return R_DIV1;
    }
    return R_COPY;
}

/* ---- Reduction tests --------------------------------------------------------------- */

/* The big count runs many random values through every loop (every bit pattern of the 8-bit
 * and, nearly, the 16-bit types). Sanitizers look for memory errors, not wrong values, and
 * the loops have no path that depends on the count beyond the 8-element vector tail, so
 * their builds run a smaller one: still many vector iterations and an unaligned tail. */
#ifdef BR_REDUCE_TEST_SANITIZED
#define BIG_COUNT ((size_t)(1u << 16) + 3)
#else
#define BIG_COUNT ((size_t)(1u << 20) + 3)
#endif
static const size_t counts[] = {0, 1, 7, 4097, BIG_COUNT};
#define NCOUNTS (sizeof(counts) / sizeof(counts[0]))

enum { M_DISTINCT, M_DST_RECV, M_DST_LOCAL, M_RECV_NULL, M_LOCAL_NULL, NMODES };
static const char *const mode_names[NMODES] = {"distinct", "dst==recv", "dst==local", "recv=NULL",
                                               "local=NULL"};

typedef struct {
    ncclDataType_t t;
    size_t n;
    unsigned char *recv, *local, *dst;
    uint64_t *want[3]; /* two operands, recv NULL, local NULL */
} fixture_t;

/* Run one (op, mode, count) through br_reduce and compare with the expectation. The
 * destination is offset by one element from its allocation's alignment in half the runs
 * and followed by a guard element that must not change. */
static void run_case(fixture_t *fx, const br_redop_t *op, int flags, int mode, size_t n,
                     const char *what)
{
    ncclDataType_t t = fx->t;
    size_t es = (size_t)tsize(t);
    unsigned char *buf = malloc((n + 2) * es);
    unsigned char *d = buf + (n & 1) * es;
    const uint64_t *want = mode == M_RECV_NULL    ? fx->want[1]
                           : mode == M_LOCAL_NULL ? fx->want[2]
                                                  : fx->want[0];
    const uint64_t guard = 0xa5a5a5a5a5a5a5a5ull & type_mask(t);

    ck_assert_ptr_nonnull(buf);
    memset(buf, 0x5a, (n + 2) * es);
    set_bits(t, d, n, guard);
    switch (mode) {
    case M_DISTINCT: br_reduce(d, fx->recv, fx->local, n, op, flags); break;
    case M_DST_RECV:
        memcpy(d, fx->recv, n * es);
        br_reduce(d, d, fx->local, n, op, flags);
        break;
    case M_DST_LOCAL:
        memcpy(d, fx->local, n * es);
        br_reduce(d, fx->recv, d, n, op, flags);
        break;
    case M_RECV_NULL: br_reduce(d, NULL, fx->local, n, op, flags); break;
    default: br_reduce(d, fx->recv, NULL, n, op, flags); break;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t got = get_bits(t, d, i);
        if (!same_bits(t, got, want[i])) {
            ck_abort_msg("%s %s %s count %zu: element %zu is 0x%llx, want 0x%llx (recv 0x%llx, "
                         "local 0x%llx)",
                         what, br_type_name(t), mode_names[mode], n, i, (unsigned long long)got,
                         (unsigned long long)want[i], (unsigned long long)get_bits(t, fx->recv, i),
                         (unsigned long long)get_bits(t, fx->local, i));
        }
    }
    ck_assert_msg(get_bits(t, d, n) == guard, "%s %s %s count %zu wrote past the end", what,
                  br_type_name(t), mode_names[mode], n);
    free(buf);
}

static void fixture_alloc(fixture_t *fx, ncclDataType_t t, size_t n)
{
    fx->t = t;
    fx->n = n;
    fx->recv = malloc(n * (size_t)tsize(t));
    fx->local = malloc(n * (size_t)tsize(t));
    for (int k = 0; k < 3; k++) {
        fx->want[k] = malloc(n * sizeof(uint64_t));
        ck_assert_ptr_nonnull(fx->want[k]);
    }
    ck_assert_ptr_nonnull(fx->recv);
    ck_assert_ptr_nonnull(fx->local);
    rnd_seed(0x9e3779b97f4a7c15ull + (uint64_t)t);
    for (size_t i = 0; i < n; i++) {
        set_bits(t, fx->recv, i, random_elem(t));
        set_bits(t, fx->local, i, random_elem(t));
    }
}

static void fixture_free(fixture_t *fx)
{
    free(fx->recv);
    free(fx->local);
    for (int k = 0; k < 3; k++) {
        free(fx->want[k]);
    }
}

/* Every op, count and mode for one type, through each set of loops. The big count runs
 * the modes that matter for throughput (two operands, in place) and, for the ops whose
 * unary forms compute, the NULL-operand modes too. */
START_TEST(test_reduce_type_op_count_mode)
{
    ncclDataType_t t = all_types[_i];
    fixture_t fx;

    fixture_alloc(&fx, t, BIG_COUNT);
    for (int w = 0; w < NOPS; w++) {
        br_redop_t op;
        ref_op_t ref;
        int flags;
        make_op(t, w, &op, &flags, &ref);
        int kr = unary_kind(ref.kind, 1), kl = unary_kind(ref.kind, 0);
        for (size_t i = 0; i < fx.n; i++) {
            uint64_t r = get_bits(t, fx.recv, i), l = get_bits(t, fx.local, i);
            fx.want[0][i] = ref_apply(t, &ref, ref.kind, r, l);
            fx.want[1][i] = ref_apply(t, &ref, kr, l, 0);
            fx.want[2][i] = ref_apply(t, &ref, kl, r, 0);
        }
        for (int portable = 0; portable <= 1; portable++) {
            char what[96];
            const char *impl = br_reduce_use_portable(portable);
            snprintf(what, sizeof(what), "%s (%s loops)", op_names[w], impl);
            for (size_t c = 0; c < NCOUNTS; c++) {
                for (int m = 0; m < NMODES; m++) {
                    int unary = m == M_RECV_NULL || m == M_LOCAL_NULL;
                    if (counts[c] == BIG_COUNT &&
                        (m == M_DST_LOCAL || (unary && kr == R_COPY && kl == R_COPY))) {
                        continue;
                    }
                    run_case(&fx, &op, flags, m, counts[c], what);
                }
            }
        }
    }
    br_reduce_use_portable(0);
    fixture_free(&fx);
}
END_TEST

/* Nothing is read or written for count 0, even through NULL pointers. */
START_TEST(test_reduce_count_zero_touches_nothing)
{
    br_redop_t op;
    br_redop_builtin(&op, ncclSum, all_types[_i], 2);
    br_reduce(NULL, NULL, NULL, 0, &op, BR_REDUCE_POST);
    br_reduce(NULL, (void *)8, (void *)16, 0, &op, 0);
}
END_TEST

/* ---- Named cases ------------------------------------------------------------------- */

static uint64_t reduce1(ncclDataType_t t, ncclRedOp_t o, uint64_t a, uint64_t b)
{
    br_redop_t op;
    uint64_t d = 0;
    br_redop_builtin(&op, o, t, 2);
    br_reduce(&d, &a, &b, 1, &op, BR_REDUCE_POST);
    return d;
}

START_TEST(test_reduce_rounds_ties_to_even)
{
    /* fp16 has 11 significant bits: 2048 + 1 is halfway between 2048 and 2050. */
    ck_assert_uint_eq(reduce1(ncclFloat16, ncclSum, 0x6800, 0x3c00), 0x6800);
    ck_assert_uint_eq(reduce1(ncclFloat16, ncclSum, 0x6801, 0x3c00), 0x6802); /* 2050+1 */
    /* bf16 has 8: 256 + 1 -> 256, 258 + 1 -> 260. */
    ck_assert_uint_eq(reduce1(ncclBfloat16, ncclSum, 0x4380, 0x3f80), 0x4380);
    ck_assert_uint_eq(reduce1(ncclBfloat16, ncclSum, 0x4381, 0x3f80), 0x4382);
    /* e4m3 has 4: 16 + 1 -> 16, 18 + 1 -> 20. */
    ck_assert_uint_eq(reduce1(ncclFloat8e4m3, ncclSum, 0x58, 0x38), 0x58);
    ck_assert_uint_eq(reduce1(ncclFloat8e4m3, ncclSum, 0x59, 0x38), 0x5a);
    /* e5m2 has 3: 8 + 1 -> 8, 10 + 1 -> 12. */
    ck_assert_uint_eq(reduce1(ncclFloat8e5m2, ncclSum, 0x48, 0x3c), 0x48);
    ck_assert_uint_eq(reduce1(ncclFloat8e5m2, ncclSum, 0x49, 0x3c), 0x4a);
    /* Subnormal results: the smallest fp16 subnormal halved ties to 0, 3/2 of it to 2. */
    ck_assert_uint_eq(reduce1(ncclFloat16, ncclProd, 0x0001, 0x3800), 0x0000);
    ck_assert_uint_eq(reduce1(ncclFloat16, ncclProd, 0x0003, 0x3800), 0x0002);
    ck_assert_uint_eq(reduce1(ncclFloat8e4m3, ncclProd, 0x03, 0x30), 0x02); /* 3*2^-9 / 2 */
}
END_TEST

START_TEST(test_reduce_overflow_saturates_fp8_and_goes_inf_ieee)
{
    ck_assert_uint_eq(reduce1(ncclFloat8e4m3, ncclSum, 0x7e, 0x7e), 0x7e); /* 448+448 */
    ck_assert_uint_eq(reduce1(ncclFloat8e4m3, ncclSum, 0xfe, 0xfe), 0xfe);
    ck_assert_uint_eq(reduce1(ncclFloat8e4m3, ncclProd, 0x7e, 0x7e), 0x7e);
    ck_assert_uint_eq(reduce1(ncclFloat8e5m2, ncclSum, 0x7b, 0x7b), 0x7b); /* 57344*2 */
    ck_assert_uint_eq(reduce1(ncclFloat8e5m2, ncclSum, 0xfb, 0xfb), 0xfb);
    /* e5m2 infinity through arithmetic saturates too (as a satfinite conversion would)... */
    ck_assert_uint_eq(reduce1(ncclFloat8e5m2, ncclSum, 0x7c, 0x3c), 0x7b);
    /* ...but max/min and copies return operands' bits. */
    ck_assert_uint_eq(reduce1(ncclFloat8e5m2, ncclMax, 0x7c, 0x3c), 0x7c);
    ck_assert_uint_eq(reduce1(ncclFloat16, ncclSum, 0x7bff, 0x7bff), 0x7c00);
    ck_assert_uint_eq(reduce1(ncclFloat16, ncclSum, 0xfbff, 0xfbff), 0xfc00);
    ck_assert_uint_eq(reduce1(ncclBfloat16, ncclSum, 0x7f7f, 0x7f7f), 0x7f80);
}
END_TEST

START_TEST(test_reduce_nan_propagates_through_max_min_both_ways)
{
    const uint64_t nan32 = 0x7fc00000, one32 = 0x3f800000;
    for (int o = ncclSum; o <= ncclMin; o++) {
        uint64_t r1 = reduce1(ncclFloat32, (ncclRedOp_t)o, nan32, one32);
        uint64_t r2 = reduce1(ncclFloat32, (ncclRedOp_t)o, one32, nan32);
        ck_assert_msg(isnan(fval(ncclFloat32, r1)) && isnan(fval(ncclFloat32, r2)), "op %d", o);
    }
    ck_assert(isnan(fval(ncclFloat16, reduce1(ncclFloat16, ncclMax, 0x3c00, 0x7e00))));
    ck_assert(isnan(fval(ncclFloat16, reduce1(ncclFloat16, ncclMin, 0x7e00, 0x3c00))));
    ck_assert(isnan(fval(ncclBfloat16, reduce1(ncclBfloat16, ncclMax, 0x3f80, 0xffc0))));
    ck_assert_uint_eq(reduce1(ncclFloat8e4m3, ncclSum, 0x7f, 0x38) & 0x7f, 0x7f);
    ck_assert_uint_eq(reduce1(ncclFloat8e4m3, ncclMin, 0x38, 0xff), 0xff);
    ck_assert(isnan(fval(ncclFloat8e5m2, reduce1(ncclFloat8e5m2, ncclSum, 0x7d, 0x3c))));
    /* inf + -inf */
    ck_assert(isnan(fval(ncclFloat32, reduce1(ncclFloat32, ncclSum, 0x7f800000, 0xff800000))));
    ck_assert(isnan(fval(ncclFloat16, reduce1(ncclFloat16, ncclSum, 0x7c00, 0xfc00))));
}
END_TEST

START_TEST(test_reduce_integers_wrap_and_divide_like_c)
{
    ck_assert_uint_eq(reduce1(ncclInt8, ncclSum, 0x7f, 0x01), 0x80);
    ck_assert_uint_eq(reduce1(ncclUint8, ncclProd, 200, 200), (200 * 200) & 0xff);
    ck_assert_uint_eq(reduce1(ncclInt32, ncclSum, 0x7fffffff, 1), 0x80000000u);
    ck_assert_uint_eq(reduce1(ncclInt64, ncclProd, 0x4000000000000000ull, 4), 0);
    ck_assert_uint_eq(reduce1(ncclInt64, ncclSum, 0x7fffffffffffffffull, 1), 0x8000000000000000ull);
    ck_assert_uint_eq(reduce1(ncclInt8, ncclMax, 0x80, 0x7f), 0x7f);  /* signed compare */
    ck_assert_uint_eq(reduce1(ncclUint8, ncclMax, 0x80, 0x7f), 0x80); /* unsigned compare */
    /* ncclAvg on 2 ranks: (-3 + 0) / 2 == -1 (towards zero), (7 + 0) / 2 == 3. */
    ck_assert_uint_eq(reduce1(ncclInt32, ncclAvg, (uint32_t)-3, 0), (uint32_t)-1);
    ck_assert_uint_eq(reduce1(ncclUint32, ncclAvg, 7, 0), 3);
    /* The int8 sum wraps before the division: (100 + 100) as int8 is -56, / 2 = -28. */
    ck_assert_uint_eq(reduce1(ncclInt8, ncclAvg, 100, 100), (uint8_t)-28);
}
END_TEST

/* A ring reduction as the executor runs it: the first rank's input enters unscaled by
 * br_reduce(dst, NULL, in), each next rank adds its own, the last applies post. */
static void chain(ncclDataType_t t, ncclRedOp_t o, int nranks, const uint64_t *in, uint64_t *out)
{
    br_redop_t op;
    uint64_t acc = 0;
    br_redop_builtin(&op, o, t, nranks);
    br_reduce(&acc, NULL, &in[0], 1, &op, nranks == 1 ? BR_REDUCE_POST : 0);
    for (int r = 1; r < nranks; r++) {
        br_reduce(&acc, &acc, &in[r], 1, &op, r == nranks - 1 ? BR_REDUCE_POST : 0);
    }
    *out = acc;
}

START_TEST(test_reduce_avg_chain_matches_nccl_semantics)
{
    uint64_t in[8], out;
    /* Integers: sum, then one division. 1+2+...+8 = 36, / 8 = 4. */
    for (int r = 0; r < 8; r++) {
        in[r] = (uint64_t)(r + 1);
    }
    chain(ncclInt64, ncclAvg, 8, in, &out);
    ck_assert_uint_eq(out, 4);
    chain(ncclUint8, ncclAvg, 1, in, &out);
    ck_assert_uint_eq(out, 1);
    /* Floats: every input scaled by 1/n first. 3 ranks of 3.0f: 3 * fl(3 * fl(1/3)) = 3. */
    for (int r = 0; r < 3; r++) {
        in[r] = fbits(ncclFloat32, 3.0);
    }
    chain(ncclFloat32, ncclAvg, 3, in, &out);
    ck_assert_uint_eq(out, fbits(ncclFloat32, 3.0));
    /* fp16: 1/3 rounds to 0x3555; 6 times that is 2 - 2^-11, a tie that goes to 2.0. */
    for (int r = 0; r < 3; r++) {
        in[r] = fbits(ncclFloat16, 6.0);
    }
    chain(ncclFloat16, ncclAvg, 3, in, &out);
    {
        double s = fval(ncclFloat16, 0x3555) * 6.0;
        uint64_t p = fbits(ncclFloat16, s);
        uint64_t acc = fbits(ncclFloat16, fval(ncclFloat16, p) + fval(ncclFloat16, p));
        acc = fbits(ncclFloat16, fval(ncclFloat16, acc) + fval(ncclFloat16, p));
        ck_assert_uint_eq(out, acc);
    }
}
END_TEST

START_TEST(test_redop_builtin_and_premulsum_resolve_as_nccl)
{
    br_redop_t op;
    br_redop_builtin(&op, ncclAvg, ncclFloat32, 4);
    ck_assert_int_eq(op.kind, BR_RED_PREMULSUM);
    ck_assert(op.scalar_f == 0.25);
    br_redop_builtin(&op, ncclAvg, ncclBfloat16, 4);
    ck_assert_int_eq(op.kind, BR_RED_PREMULSUM);
    br_redop_builtin(&op, ncclAvg, ncclUint32, 4);
    ck_assert_int_eq(op.kind, BR_RED_SUMPOSTDIV);
    ck_assert_uint_eq(op.divisor, 4);
    br_redop_builtin(&op, ncclMin, ncclInt8, 4);
    ck_assert_int_eq(op.kind, BR_RED_MIN);

    int8_t s8 = -3;
    br_redop_premulsum(&op, ncclInt8, &s8);
    ck_assert_int_eq(op.kind, BR_RED_PREMULSUM);
    ck_assert_uint_eq(op.scalar_i, (uint64_t)-3);
    uint32_t su = 4000000000u;
    br_redop_premulsum(&op, ncclUint32, &su);
    ck_assert_uint_eq(op.scalar_i, 4000000000u);
    uint16_t h = 0xbc00; /* -1.0 */
    br_redop_premulsum(&op, ncclFloat16, &h);
    ck_assert(op.scalar_f == -1.0);
    uint8_t e = 0x30; /* e4m3 0.5 */
    br_redop_premulsum(&op, ncclFloat8e4m3, &e);
    ck_assert(op.scalar_f == 0.5);
    double d = 0.1;
    br_redop_premulsum(&op, ncclFloat64, &d);
    ck_assert(op.scalar_f == 0.1);
}
END_TEST

START_TEST(test_type_names_sizes_and_kind_names)
{
    static const char *const names[] = {"int8",    "uint8",    "int32",      "uint32",
                                        "int64",   "uint64",   "float16",    "float32",
                                        "float64", "bfloat16", "float8e4m3", "float8e5m2"};
    static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
    for (int t = 0; t < NTYPES; t++) {
        ck_assert_str_eq(br_type_name((ncclDataType_t)t), names[t]);
        ck_assert_uint_eq(br_type_size((ncclDataType_t)t), sizes[t]);
    }
    ck_assert_uint_eq(br_type_size((ncclDataType_t)12), 0);
    ck_assert_uint_eq(br_type_size((ncclDataType_t)-1), 0);
    ck_assert_str_eq(br_type_name((ncclDataType_t)99), "invalid");
    ck_assert_str_eq(br_red_kind_name(BR_RED_SUM), "sum");
    ck_assert_str_eq(br_red_kind_name(BR_RED_PREMULSUM), "premulsum");
    ck_assert_str_eq(br_red_kind_name(BR_RED_SUMPOSTDIV), "sumpostdiv");
    ck_assert_str_eq(br_red_kind_name((br_red_kind_t)42), "invalid");
}
END_TEST

/* ---- Conversions ------------------------------------------------------------------- */

typedef struct {
    fmt_t *fmt;
    float (*decode)(uint32_t v);
    uint32_t (*encode)(float f);
    const char *name;
} conv_t;

static float dec_f16(uint32_t v)
{
    return br_half_to_float((uint16_t)v);
}
static uint32_t enc_f16(float f)
{
    return br_float_to_half(f);
}
static float dec_bf16(uint32_t v)
{
    return br_bf16_to_float((uint16_t)v);
}
static uint32_t enc_bf16(float f)
{
    return br_float_to_bf16(f);
}
static float dec_e4m3(uint32_t v)
{
    return br_e4m3_to_float((uint8_t)v);
}
static uint32_t enc_e4m3(float f)
{
    return br_float_to_e4m3(f);
}
static float dec_e5m2(uint32_t v)
{
    return br_e5m2_to_float((uint8_t)v);
}
static uint32_t enc_e5m2(float f)
{
    return br_float_to_e5m2(f);
}

static const conv_t convs[] = {
    {&fmt_f16, dec_f16, enc_f16, "float16"},
    {&fmt_bf16, dec_bf16, enc_bf16, "bfloat16"},
    {&fmt_e4m3, dec_e4m3, enc_e4m3, "float8e4m3"},
    {&fmt_e5m2, dec_e5m2, enc_e5m2, "float8e5m2"},
};

static void check_encode(const conv_t *c, float x)
{
    uint32_t got = c->encode(x), want = ref_encode(c->fmt, (double)x);
    if (isnan(x)) {
        ck_assert_msg(isnan(ref_decode(c->fmt, got)), "%s: NaN encodes to 0x%x", c->name, got);
        return;
    }
    ck_assert_msg(got == want, "%s: %a encodes to 0x%x, want 0x%x", c->name, (double)x, got, want);
}

/* Every encoding decodes to the value the format definition gives, sign of zero and NaN
 * included, and encodes back to itself. */
START_TEST(test_conv_decode_every_encoding)
{
    const conv_t *c = &convs[_i];
    uint32_t limit = 1u << c->fmt->bits;
    for (uint32_t v = 0; v < limit; v++) {
        double want = ref_decode(c->fmt, v);
        float got = c->decode(v);
        if (isnan(want)) {
            ck_assert_msg(isnan(got), "%s: 0x%x decodes to %a, want NaN", c->name, v, (double)got);
            ck_assert_msg(isnan(ref_decode(c->fmt, c->encode(got))), "%s: NaN 0x%x", c->name, v);
            continue;
        }
        ck_assert_msg((double)got == want && !signbit(got) == !signbit(want),
                      "%s: 0x%x decodes to %a, want %a", c->name, v, (double)got, want);
        if (c->fmt->saturate && isinf(want)) {
            continue; /* e5m2 infinity encodes to the largest finite value */
        }
        ck_assert_msg(c->encode(got) == v, "%s: 0x%x does not round-trip (0x%x)", c->name, v,
                      c->encode(got));
    }
}
END_TEST

/* Each value, each midpoint between neighbours (a tie), one float ulp either side of it,
 * for both signs, and the overflow region up to infinity. */
START_TEST(test_conv_encode_rounding_boundaries)
{
    const conv_t *c = &convs[_i];
    fmt_t *f = c->fmt;
    fmt_init(f);
    for (int k = 0; k + 1 < f->nvals; k++) {
        float lo = (float)f->vals[k], hi = (float)f->vals[k + 1];
        float mid = (float)((f->vals[k] + f->vals[k + 1]) / 2);
        ck_assert_msg((double)mid == (f->vals[k] + f->vals[k + 1]) / 2, "midpoint not a float");
        const float xs[] = {lo, mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY), hi};
        for (size_t j = 0; j < sizeof(xs) / sizeof(xs[0]); j++) {
            check_encode(c, xs[j]);
            check_encode(c, -xs[j]);
        }
    }
    double max = f->vals[f->nvals - 1];
    double next = max + (max - f->vals[f->nvals - 2]);
    float mid = (float)((max + next) / 2);
    const float big[] = {nextafterf(mid, 0.0f),
                         mid,
                         nextafterf(mid, INFINITY),
                         (float)next,
                         (float)next * 3.0f,
                         FLT_MAX,
                         INFINITY,
                         NAN,
                         0x1p-149f,
                         0x1p-126f};
    for (size_t j = 0; j < sizeof(big) / sizeof(big[0]); j++) {
        check_encode(c, big[j]);
        check_encode(c, -big[j]);
    }
}
END_TEST

/* Random float bit patterns (every exponent) and random values in the format's range. The
 * boundaries above hold every rounding case; these look for the unexpected, which is the
 * Release run's job (sanitizer builds take a sample: it is one loop of scalar code). */
#ifdef BR_REDUCE_TEST_SANITIZED
#define RANDOM_FLOATS 50000
#else
#define RANDOM_FLOATS 1000000
#endif

START_TEST(test_conv_encode_random_floats)
{
    const conv_t *c = &convs[_i];
    fmt_init(c->fmt);
    double max = c->fmt->vals[c->fmt->nvals - 1];
    rnd_seed(0x1234567u + (uint64_t)_i);
    for (int k = 0; k < RANDOM_FLOATS; k++) {
        uint32_t u = (uint32_t)rnd();
        float x;
        memcpy(&x, &u, sizeof(x));
        check_encode(c, x);
        x = (float)(max * ldexp((double)(rnd() >> 11), -53 - (int)(rnd() % 40)));
        check_encode(c, (rnd() & 1) ? x : -x);
    }
}
END_TEST

/* ---- br_reduce_fold: n sources in rank order ---------------------------------------- */

static const ncclDataType_t fold_types[] = {ncclFloat32,  ncclFloat64,    ncclFloat16,
                                            ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
#define FOLD_N 5
#define FOLD_COUNT 5003 /* a few of the fold's pieces, and a partial one */

/* Source r, element i: magnitudes 1/16 to 16 of both signs, so every order of a sum
 * rounds differently and no sum of FOLD_N leaves e4m3's range (448). */
static uint64_t fold_src(ncclDataType_t t, int r, size_t i)
{
    double v = ldexp(1.0 + (double)(rnd() >> 44) / 1048576.0, (int)(rnd() % 9) - 4);
    (void)r;
    (void)i;
    return fbits(t, (rnd() & 1) ? -v : v);
}

/* FOLD_N sources of FOLD_COUNT elements each. */
static void fold_sources(ncclDataType_t t, char **src)
{
    for (int r = 0; r < FOLD_N; r++) {
        src[r] = malloc(FOLD_COUNT * (size_t)tsize(t));
        ck_assert_ptr_nonnull(src[r]);
        for (size_t i = 0; i < FOLD_COUNT; i++) {
            set_bits(t, src[r], i, fold_src(t, r, i));
        }
    }
}

/* Every step rounded to the type (acc32 0), in the order 0..n-1, matches a chain of
 * reference operations; the result is the same with the output on one of the inputs. */
START_TEST(test_fold_steps_are_the_rank_order_chain)
{
    ncclDataType_t t = fold_types[_i];
    size_t ts = (size_t)tsize(t);
    char *src[FOLD_N], *dst = malloc(FOLD_COUNT * ts);
    const void *srcs[FOLD_N];
    br_redop_t op;
    ck_assert_ptr_nonnull(dst);
    fold_sources(t, src);
    for (int r = 0; r < FOLD_N; r++) {
        srcs[r] = src[r];
    }
    for (int avg = 0; avg < 2; avg++) {
        br_redop_builtin(&op, avg ? ncclAvg : ncclSum, t, FOLD_N);
        ref_op_t ro = {R_PREMUL, 0, 0};
        ro.scalar = fbits(t, t == ncclFloat64 ? op.scalar_f : (double)(float)op.scalar_f);
        br_reduce_fold(dst, srcs, FOLD_N, FOLD_COUNT, &op, 0);
        for (size_t i = 0; i < FOLD_COUNT; i++) {
            uint64_t acc = get_bits(t, src[0], i);
            acc = avg ? ref_apply(t, &ro, R_PRE1, acc, 0) : acc;
            for (int r = 1; r < FOLD_N; r++) {
                acc = ref_apply(t, &ro, avg ? R_PREMUL : R_SUM, acc, get_bits(t, src[r], i));
            }
            ck_assert_msg(get_bits(t, dst, i) == acc, "type %d %s element %zu: %llx, want %llx",
                          (int)t, avg ? "avg" : "sum", i, (unsigned long long)get_bits(t, dst, i),
                          (unsigned long long)acc);
        }
        /* In place: the output is source 2 (an in-place call's own slice). */
        memcpy(dst, src[2], FOLD_COUNT * ts);
        char *keep = src[2];
        srcs[2] = dst;
        char *want = malloc(FOLD_COUNT * ts);
        ck_assert_ptr_nonnull(want);
        br_reduce_fold(want, (const void *const *)src, FOLD_N, FOLD_COUNT, &op, 0);
        br_reduce_fold(dst, srcs, FOLD_N, FOLD_COUNT, &op, 0);
        ck_assert_int_eq(memcmp(dst, want, FOLD_COUNT * ts), 0);
        srcs[2] = keep;
        free(want);
    }
    for (int r = 0; r < FOLD_N; r++) {
        free(src[r]);
    }
    free(dst);
}
END_TEST

/* acc32: the narrow types' sums in fp32, in rank order, rounded to the type once; wide
 * types are unaffected (the same bits as acc32 0). */
START_TEST(test_fold_acc32_rounds_once)
{
    ncclDataType_t t = fold_types[_i];
    size_t ts = (size_t)tsize(t);
    char *src[FOLD_N], *dst = malloc(FOLD_COUNT * ts), *plain = malloc(FOLD_COUNT * ts);
    br_redop_t op;
    int narrow = narrow_fmt(t) != NULL;
    ck_assert_ptr_nonnull(dst);
    ck_assert_ptr_nonnull(plain);
    fold_sources(t, src);
    br_redop_builtin(&op, ncclSum, t, FOLD_N);
    br_reduce_fold(dst, (const void *const *)src, FOLD_N, FOLD_COUNT, &op, 1);
    br_reduce_fold(plain, (const void *const *)src, FOLD_N, FOLD_COUNT, &op, 0);
    size_t differ = 0;
    for (size_t i = 0; i < FOLD_COUNT; i++) {
        float acc = (float)fval(t, get_bits(t, src[0], i));
        for (int r = 1; r < FOLD_N; r++) {
            acc += (float)fval(t, get_bits(t, src[r], i));
        }
        uint64_t want = narrow ? fbits(t, acc) : get_bits(t, plain, i);
        ck_assert_msg(get_bits(t, dst, i) == want, "type %d element %zu: %llx, want %llx", (int)t,
                      i, (unsigned long long)get_bits(t, dst, i), (unsigned long long)want);
        differ += get_bits(t, dst, i) != get_bits(t, plain, i);
    }
    /* Rounding every step must differ somewhere, or this proves nothing. */
    ck_assert(!narrow || differ > 0);
    for (int r = 0; r < FOLD_N; r++) {
        free(src[r]);
    }
    free(dst);
    free(plain);
}
END_TEST

static Suite *reduce_suite(void)
{
    Suite *s = suite_create("reduce");
    TCase *tc;

    tc = tcase_create("conversions");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_conv_decode_every_encoding, 0, 4);
    tcase_add_loop_test(tc, test_conv_encode_rounding_boundaries, 0, 4);
    tcase_add_loop_test(tc, test_conv_encode_random_floats, 0, 4);
    suite_add_tcase(s, tc);

    tc = tcase_create("reduce");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_reduce_type_op_count_mode, 0, NTYPES);
    tcase_add_loop_test(tc, test_reduce_count_zero_touches_nothing, 0, NTYPES);
    suite_add_tcase(s, tc);

    tc = tcase_create("fold");
    tcase_add_loop_test(tc, test_fold_steps_are_the_rank_order_chain, 0, 6);
    tcase_add_loop_test(tc, test_fold_acc32_rounds_once, 0, 6);
    suite_add_tcase(s, tc);

    tc = tcase_create("semantics");
    tcase_add_test(tc, test_reduce_rounds_ties_to_even);
    tcase_add_test(tc, test_reduce_overflow_saturates_fp8_and_goes_inf_ieee);
    tcase_add_test(tc, test_reduce_nan_propagates_through_max_min_both_ways);
    tcase_add_test(tc, test_reduce_integers_wrap_and_divide_like_c);
    tcase_add_test(tc, test_reduce_avg_chain_matches_nccl_semantics);
    tcase_add_test(tc, test_redop_builtin_and_premulsum_resolve_as_nccl);
    tcase_add_test(tc, test_type_names_sizes_and_kind_names);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(reduce_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
