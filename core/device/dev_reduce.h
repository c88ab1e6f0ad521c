/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The kernels' arithmetic: every nccl.h data type and reduction on 8-byte words, each word
 * holding 8 / size elements (the data loops move 16-byte pieces, i.e. two words). The
 * results are those of the host executor (core/exec/exec_reduce.h), bit for bit:
 *
 *  - integers compute in 64-bit unsigned arithmetic, kept to the type's width, so sums and
 *    products wrap; max/min compare as the type's signedness says; the integer average
 *    divides the wrapped sum as C does (towards zero), in 64 bits of the type's sign;
 *  - fp32 and fp64 round each operation to nearest even, never fused;
 *  - fp16, bf16, fp8 e4m3 and e5m2 decode exactly to float, compute there, and encode back
 *    rounding to nearest even (fp8 saturates to its largest finite value, infinities
 *    included; NaN stays NaN); a pre-multiplied operand is rounded to the type before it
 *    is summed; the PreMulSum scalar is rounded double -> float -> type;
 *  - max/min propagate NaN from either side and otherwise return a > b ? a : b with `a`
 *    the received operand, so the bits of equal values (+0 / -0) follow the host.
 *
 * Operands of a binary word op: `a` is the received (or accumulated) operand and `b` the
 * local one, the order of br_reduce(dst, recv, local).
 */
#ifndef BR_DEVICE_DEV_REDUCE_H_
#define BR_DEVICE_DEV_REDUCE_H_

#include "dev_arch.h"
#include "nccl.h"

/* Word functions. */
#define BR_DEV_F_SUM 0
#define BR_DEV_F_PROD 1
#define BR_DEV_F_MAX 2
#define BR_DEV_F_MIN 3
#define BR_DEV_F_PREMULSUM 4  /* a + pre(b) */
#define BR_DEV_F_SUMPOSTDIV 5 /* (a + b) / divisor */
#define BR_DEV_F_PRE1 6       /* pre(a): a PreMulSum's first contribution */

/* A reduction resolved for one work item. */
typedef struct {
    uint32_t type; /* ncclDataType_t */
    uint32_t kind; /* br_red_kind_t */
    uint64_t si;   /* PreMulSum scalar: integer bit pattern (sign-extended) */
    double sd;     /* ... as double (fp64) */
    float sf;      /* ... as float, already rounded to the type (narrow floats) */
    uint64_t div;  /* SUMPOSTDIV divisor */
} br_dev_red_t;

/* ---- conversions (exact decoding, round-to-nearest-even encoding) ---- */

/* Round m * 2^-shift to an integer, ties to even (shift in 1..63; m < 2^25). */
BR_DEV_HD uint32_t br_dev_rne_shift(uint32_t m, int shift)
{
    if (shift >= 32) {
        return 0; /* m < 2^25 <= 2^(shift - 1): below half of the smallest step */
    }
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    return q + (rem > half || (rem == half && (q & 1u)) ? 1u : 0u);
}

/* A float that is below a narrow type's normal range: its magnitude in units of 2^-unit_exp
 * (the type's smallest subnormal), rounded. The result may reach the smallest normal,
 * whose encoding follows the subnormals'. */
BR_DEV_HD uint32_t br_dev_tiny(uint32_t a, int unit_exp)
{
    int e = (int)(a >> 23);
    if (e == 0) {
        return 0; /* a float subnormal is far below every narrow type's subnormals */
    }
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    /* value = m * 2^(e - 150) = m * 2^(e - 150 - unit_exp) units, and e - 150 - unit_exp < 0 */
    return br_dev_rne_shift(m, 150 + unit_exp - e);
}

/* Normal encoding: the float's exponent and top `mbits` mantissa bits, rounded to nearest
 * even (a carry into the exponent is the right answer), rebiased. */
BR_DEV_HD uint32_t br_dev_round_normal(uint32_t a, int mbits, int rebias)
{
    int drop = 23 - mbits;
    uint32_t r = (a + ((1u << (drop - 1)) - 1u) + ((a >> drop) & 1u)) >> drop;
    return r - ((uint32_t)rebias << mbits);
}

BR_DEV_HD float br_dev_f16_ld(uint32_t h)
{
    uint32_t sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) {
        return br_dev_u2f(sign | 0x7f800000u | (m << 13)); /* infinity, NaN with its payload */
    }
    if (e == 0) { /* m * 2^-24, exact in float */
        float f = BR_DEV_FMUL((float)m, 5.9604644775390625e-8f);
        return br_dev_u2f(sign | br_dev_f2u(f));
    }
    return br_dev_u2f(sign | ((e + 112u) << 23) | (m << 13));
}

BR_DEV_HD uint32_t br_dev_f16_st(float f)
{
    uint32_t x = br_dev_f2u(f), sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
    if (a > 0x7f800000u) {
        return sign | 0x7e00u | ((a >> 13) & 0x1ffu); /* quiet NaN, top payload bits kept */
    }
    if (a >= 0x477ff000u) {
        return sign | 0x7c00u; /* from 65520 (half way past 65504) up: infinity */
    }
    if (a < 0x38800000u) {
        return sign | br_dev_tiny(a, -24); /* below 2^-14 */
    }
    return sign | br_dev_round_normal(a, 10, 112);
}

BR_DEV_HD float br_dev_bf16_ld(uint32_t b)
{
    return br_dev_u2f(b << 16);
}

BR_DEV_HD uint32_t br_dev_bf16_st(float f)
{
    uint32_t x = br_dev_f2u(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        return (x >> 16) | 0x40u; /* NaN stays NaN (quiet) */
    }
    /* bf16 is the upper half of a float: round the lower half away, overflow included. */
    return (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
}

BR_DEV_HD float br_dev_e4m3_ld(uint32_t v)
{
    uint32_t sign = (v & 0x80u) << 24, e = (v >> 3) & 0xfu, m = v & 7u;
    if ((v & 0x7fu) == 0x7fu) {
        return br_dev_u2f(sign | 0x7fc00000u); /* S.1111.111: NaN (no infinities) */
    }
    if (e == 0) { /* m * 2^-9 */
        float f = BR_DEV_FMUL((float)m, 0.001953125f);
        return br_dev_u2f(sign | br_dev_f2u(f));
    }
    return br_dev_u2f(sign | ((e + 120u) << 23) | (m << 20));
}

BR_DEV_HD uint32_t br_dev_e4m3_st(float f)
{
    uint32_t x = br_dev_f2u(f), sign = (x >> 24) & 0x80u, a = x & 0x7fffffffu;
    if (a > 0x7f800000u) {
        return sign | 0x7fu;
    }
    if (a < 0x3c800000u) {
        return sign | br_dev_tiny(a, -9); /* below 2^-6 */
    }
    uint32_t r = br_dev_round_normal(a, 3, 120);
    return sign | (r > 0x7eu ? 0x7eu : r); /* saturate at 448 (infinity too) */
}

BR_DEV_HD float br_dev_e5m2_ld(uint32_t v)
{
    return br_dev_f16_ld(v << 8); /* e5m2 is the upper byte of an fp16 */
}

BR_DEV_HD uint32_t br_dev_e5m2_st(float f)
{
    uint32_t x = br_dev_f2u(f), sign = (x >> 24) & 0x80u, a = x & 0x7fffffffu;
    if (a > 0x7f800000u) {
        return sign | 0x7fu;
    }
    if (a < 0x38800000u) {
        return sign | br_dev_tiny(a, -16); /* below 2^-14 */
    }
    uint32_t r = br_dev_round_normal(a, 2, 112);
    return sign | (r > 0x7bu ? 0x7bu : r); /* saturate at 57344 (infinity too) */
}

/* ---- lanes of a word ---- */

/*
 * BR_DEV_LANES(BITS, EXPR) evaluates EXPR for each of the 64 / BITS lanes of words a and b,
 * with x and y the lanes' bits (zero-extended), packs the results (kept to BITS) and
 * returns them; BR_DEV_LANES1 is the unary form (x only).
 */
#define BR_DEV_LANES_(BITS, DECL, EXPR)                                                            \
    do {                                                                                           \
        const uint64_t mask_ = (BITS) == 64 ? ~0ull : (1ull << ((BITS) % 64)) - 1ull;              \
        uint64_t res_ = 0;                                                                         \
        for (int k_ = 0; k_ < 64 / (BITS); k_++) {                                                 \
            uint64_t x = (a >> (k_ * (BITS))) & mask_;                                             \
            DECL res_ |= ((uint64_t)(EXPR)&mask_) << (k_ * (BITS));                                \
        }                                                                                          \
        return res_;                                                                               \
    } while (0)
#define BR_DEV_LANES(BITS, EXPR)                                                                   \
    BR_DEV_LANES_(BITS, uint64_t y = (b >> (k_ * (BITS))) & mask_;, EXPR)
#define BR_DEV_LANES1(BITS, EXPR) BR_DEV_LANES_(BITS, , EXPR)

/* Sign-extend the low `bits` of x. */
BR_DEV_HD int64_t br_dev_sext(uint64_t x, int bits)
{
    return bits == 64 ? (int64_t)x : (int64_t)(x << (64 - bits)) >> (64 - bits);
}

/* Integer words: wrap-around sums and products, signed or unsigned compare and divide. */
BR_DEV_HD uint64_t br_dev_word_int(const br_dev_red_t *R, int fn, uint64_t a, uint64_t b, int bits,
                                   int sgn)
{
    switch (fn) {
    case BR_DEV_F_SUM: BR_DEV_LANES(bits, x + y);
    case BR_DEV_F_PROD: BR_DEV_LANES(bits, x * y);
    case BR_DEV_F_MAX:
        if (sgn) {
            BR_DEV_LANES(bits, br_dev_sext(x, bits) > br_dev_sext(y, bits) ? x : y);
        }
        BR_DEV_LANES(bits, x > y ? x : y);
    case BR_DEV_F_MIN:
        if (sgn) {
            BR_DEV_LANES(bits, br_dev_sext(x, bits) < br_dev_sext(y, bits) ? x : y);
        }
        BR_DEV_LANES(bits, x < y ? x : y);
    case BR_DEV_F_PREMULSUM: BR_DEV_LANES(bits, x + y * R->si);
    case BR_DEV_F_SUMPOSTDIV:
        if (sgn) {
            BR_DEV_LANES(bits, (uint64_t)(br_dev_sext((x + y) & mask_, bits) / (int64_t)R->div));
        }
        BR_DEV_LANES(bits, ((x + y) & mask_) / R->div);
    default: (void)b; BR_DEV_LANES1(bits, x * R->si); /* PRE1 */
    }
}

BR_DEV_HD uint64_t br_dev_word_f32(const br_dev_red_t *R, int fn, uint64_t a, uint64_t b)
{
#define LD(v) br_dev_u2f((uint32_t)(v))
#define ST(f) br_dev_f2u(f)
    switch (fn) {
    case BR_DEV_F_SUM: BR_DEV_LANES(32, ST(BR_DEV_FADD(LD(x), LD(y))));
    case BR_DEV_F_PROD: BR_DEV_LANES(32, ST(BR_DEV_FMUL(LD(x), LD(y))));
    case BR_DEV_F_MAX: BR_DEV_LANES(32, ((LD(x) > LD(y)) | (LD(x) != LD(x))) ? x : y);
    case BR_DEV_F_MIN: BR_DEV_LANES(32, ((LD(x) < LD(y)) | (LD(x) != LD(x))) ? x : y);
    case BR_DEV_F_PREMULSUM:
        BR_DEV_LANES(32, ST(BR_DEV_FADD(LD(x), BR_DEV_FMUL(LD(y), (float)R->sd))));
    case BR_DEV_F_SUMPOSTDIV:
        BR_DEV_LANES(32, ST(BR_DEV_FDIV(BR_DEV_FADD(LD(x), LD(y)), (float)R->div)));
    default: (void)b; BR_DEV_LANES1(32, ST(BR_DEV_FMUL(LD(x), (float)R->sd)));
    }
#undef LD
#undef ST
}

BR_DEV_HD uint64_t br_dev_word_f64(const br_dev_red_t *R, int fn, uint64_t a, uint64_t b)
{
#define LD(v) br_dev_u2d(v)
#define ST(d) br_dev_d2u(d)
    switch (fn) {
    case BR_DEV_F_SUM: BR_DEV_LANES(64, ST(BR_DEV_DADD(LD(x), LD(y))));
    case BR_DEV_F_PROD: BR_DEV_LANES(64, ST(BR_DEV_DMUL(LD(x), LD(y))));
    case BR_DEV_F_MAX: BR_DEV_LANES(64, ((LD(x) > LD(y)) | (LD(x) != LD(x))) ? x : y);
    case BR_DEV_F_MIN: BR_DEV_LANES(64, ((LD(x) < LD(y)) | (LD(x) != LD(x))) ? x : y);
    case BR_DEV_F_PREMULSUM: BR_DEV_LANES(64, ST(BR_DEV_DADD(LD(x), BR_DEV_DMUL(LD(y), R->sd))));
    case BR_DEV_F_SUMPOSTDIV:
        BR_DEV_LANES(64, ST(BR_DEV_DDIV(BR_DEV_DADD(LD(x), LD(y)), (double)R->div)));
    default: (void)b; BR_DEV_LANES1(64, ST(BR_DEV_DMUL(LD(x), R->sd)));
    }
#undef LD
#undef ST
}

/* Narrow floats X (f16, bf16, e4m3, e5m2) of BITS bits: float arithmetic, every result
 * encoded back; the pre-multiplied operand is encoded and decoded before the sum. */
#define BR_DEV_WORD_NARROW(X, BITS)                                                                \
    BR_DEV_HD uint64_t br_dev_word_##X(const br_dev_red_t *R, int fn, uint64_t a, uint64_t b)      \
    {                                                                                              \
        switch (fn) {                                                                              \
        case BR_DEV_F_SUM:                                                                         \
            BR_DEV_LANES(BITS, br_dev_##X##_st(BR_DEV_FADD(br_dev_##X##_ld((uint32_t)x),           \
                                                           br_dev_##X##_ld((uint32_t)y))));        \
        case BR_DEV_F_PROD:                                                                        \
            BR_DEV_LANES(BITS, br_dev_##X##_st(BR_DEV_FMUL(br_dev_##X##_ld((uint32_t)x),           \
                                                           br_dev_##X##_ld((uint32_t)y))));        \
        case BR_DEV_F_MAX:                                                                         \
            BR_DEV_LANES(BITS, br_dev_narrow_pick(br_dev_##X##_ld((uint32_t)x),                    \
                                                  br_dev_##X##_ld((uint32_t)y), 1)                 \
                                   ? x                                                             \
                                   : y);                                                           \
        case BR_DEV_F_MIN:                                                                         \
            BR_DEV_LANES(BITS, br_dev_narrow_pick(br_dev_##X##_ld((uint32_t)x),                    \
                                                  br_dev_##X##_ld((uint32_t)y), 0)                 \
                                   ? x                                                             \
                                   : y);                                                           \
        case BR_DEV_F_PREMULSUM:                                                                   \
            BR_DEV_LANES(                                                                          \
                BITS, br_dev_##X##_st(BR_DEV_FADD(br_dev_##X##_ld((uint32_t)x),                    \
                                                  br_dev_##X##_ld(br_dev_##X##_st(BR_DEV_FMUL(     \
                                                      br_dev_##X##_ld((uint32_t)y), R->sf))))));   \
        case BR_DEV_F_SUMPOSTDIV:                                                                  \
            BR_DEV_LANES(BITS,                                                                     \
                         br_dev_##X##_st(BR_DEV_FDIV(                                              \
                             br_dev_##X##_ld(br_dev_##X##_st(BR_DEV_FADD(                          \
                                 br_dev_##X##_ld((uint32_t)x), br_dev_##X##_ld((uint32_t)y)))),    \
                             (float)R->div)));                                                     \
        default:                                                                                   \
            BR_DEV_LANES1(BITS,                                                                    \
                          br_dev_##X##_st(BR_DEV_FMUL(br_dev_##X##_ld((uint32_t)x), R->sf)));      \
        }                                                                                          \
    }

/* max (is_max) or min of decoded narrow values: take the received side when it wins or is
 * NaN. */
BR_DEV_HD int br_dev_narrow_pick(float fa, float fb, int is_max)
{
    return (is_max ? fa > fb : fa < fb) || fa != fa;
}

BR_DEV_WORD_NARROW(f16, 16)
BR_DEV_WORD_NARROW(bf16, 16)
BR_DEV_WORD_NARROW(e4m3, 8)
BR_DEV_WORD_NARROW(e5m2, 8)

/* fn applied to words a (received) and b (local) of R's type. */
BR_DEV_HD uint64_t br_dev_word(const br_dev_red_t *R, int fn, uint64_t a, uint64_t b)
{
    switch (R->type) {
    case ncclInt8: return br_dev_word_int(R, fn, a, b, 8, 1);
    case ncclUint8: return br_dev_word_int(R, fn, a, b, 8, 0);
    case ncclInt32: return br_dev_word_int(R, fn, a, b, 32, 1);
    case ncclUint32: return br_dev_word_int(R, fn, a, b, 32, 0);
    case ncclInt64: return br_dev_word_int(R, fn, a, b, 64, 1);
    case ncclUint64: return br_dev_word_int(R, fn, a, b, 64, 0);
    case ncclFloat16: return br_dev_word_f16(R, fn, a, b);
    case ncclFloat32: return br_dev_word_f32(R, fn, a, b);
    case ncclFloat64: return br_dev_word_f64(R, fn, a, b);
    case ncclBfloat16: return br_dev_word_bf16(R, fn, a, b);
    case ncclFloat8e4m3: return br_dev_word_e4m3(R, fn, a, b);
    default: return br_dev_word_e5m2(R, fn, a, b);
    }
}

/* fn on the nw (1 or 2) words of a 16-byte piece. Out of line on the GPU: the type switch
 * exists once in the kernel instead of once per call site, which keeps the build fast. */
BR_DEV_NOINLINE br_dev_v2_t br_dev_piece_op(const br_dev_red_t *R, int fn, br_dev_v2_t a,
                                            br_dev_v2_t b, int nw)
{
    br_dev_v2_t v;
    v.lo = br_dev_word(R, fn, a.lo, b.lo);
    v.hi = nw > 1 ? br_dev_word(R, fn, a.hi, b.hi) : 0;
    return v;
}

/* Bytes of one element of a type (0: not a type). */
BR_DEV_HD uint32_t br_dev_type_size(uint32_t type)
{
    switch (type) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
    }
}

/* Decode one element (size bytes, little-endian bits) into the scalar forms of R. */
BR_DEV_HD void br_dev_red_scalar_bits(br_dev_red_t *R, uint64_t bits)
{
    uint32_t size = br_dev_type_size(R->type);
    switch (R->type) {
    case ncclInt8:
    case ncclInt32:
    case ncclInt64: R->si = (uint64_t)br_dev_sext(bits, (int)size * 8); break;
    case ncclUint8:
    case ncclUint32:
    case ncclUint64: R->si = bits; break;
    case ncclFloat16: R->sd = br_dev_f16_ld((uint32_t)bits); break;
    case ncclFloat32: R->sd = br_dev_u2f((uint32_t)bits); break;
    case ncclFloat64: R->sd = br_dev_u2d(bits); break;
    case ncclBfloat16: R->sd = br_dev_bf16_ld((uint32_t)bits); break;
    case ncclFloat8e4m3: R->sd = br_dev_e4m3_ld((uint32_t)bits); break;
    default: R->sd = br_dev_e5m2_ld((uint32_t)bits); break;
    }
}

/* The PreMulSum scalar as the narrow types use it: double -> float -> type -> float. */
BR_DEV_HD float br_dev_red_narrow_scalar(uint32_t type, double sd)
{
    float f = (float)sd;
    switch (type) {
    case ncclFloat16: return br_dev_f16_ld(br_dev_f16_st(f));
    case ncclBfloat16: return br_dev_bf16_ld(br_dev_bf16_st(f));
    case ncclFloat8e4m3: return br_dev_e4m3_ld(br_dev_e4m3_st(f));
    case ncclFloat8e5m2: return br_dev_e5m2_ld(br_dev_e5m2_st(f));
    default: return f;
    }
}

/* A narrow float (f16, bf16, e4m3, e5m2) decoded from its bits, and encoded. */
BR_DEV_HD float br_dev_narrow_ld(uint32_t type, uint32_t v)
{
    switch (type) {
    case ncclFloat16: return br_dev_f16_ld(v);
    case ncclBfloat16: return br_dev_bf16_ld(v);
    case ncclFloat8e4m3: return br_dev_e4m3_ld(v);
    default: return br_dev_e5m2_ld(v);
    }
}

BR_DEV_HD uint32_t br_dev_narrow_st(uint32_t type, float f)
{
    switch (type) {
    case ncclFloat16: return br_dev_f16_st(f);
    case ncclBfloat16: return br_dev_bf16_st(f);
    case ncclFloat8e4m3: return br_dev_e4m3_st(f);
    default: return br_dev_e5m2_st(f);
    }
}

#endif /* BR_DEVICE_DEV_REDUCE_H_ */
