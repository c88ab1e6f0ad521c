/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Narrow float formats for the tests' references, from one description of a format:
 * exponent bits, mantissa bits, and whether the top exponent field is reserved for
 * infinities and NaNs (IEEE style) or holds finite values with only the all-ones
 * mantissa meaning NaN (the "FN" style of E4M3). Rounding uses rint() in the default
 * round-to-nearest-even mode on a value scaled so that one unit is the quantum of the
 * target; scaling by powers of two is exact in double, so the result is exact.
 */
#include "brt_fp.h"

#include <math.h>
#include <string.h>

typedef struct {
    int ebits;
    int mbits;
    int fn; /* 1: no infinities, only S.1..1.1..1 is NaN */
} mini_fmt_t;

static const mini_fmt_t fmt_fp16 = {5, 10, 0};
static const mini_fmt_t fmt_bf16 = {8, 7, 0};
static const mini_fmt_t fmt_e4m3 = {4, 3, 1};
static const mini_fmt_t fmt_e5m2 = {5, 2, 0};

static uint32_t mini_nan(const mini_fmt_t *f, uint32_t sign)
{
    uint32_t exp_all = ((1u << f->ebits) - 1u) << f->mbits;
    uint32_t mant = f->fn ? (1u << f->mbits) - 1u : 1u << (f->mbits - 1);
    return sign | exp_all | mant;
}

/* Overflow: infinity where the format has one, NaN otherwise. */
static uint32_t mini_overflow(const mini_fmt_t *f, uint32_t sign)
{
    if (f->fn) {
        return mini_nan(f, sign);
    }
    return sign | (((1u << f->ebits) - 1u) << f->mbits);
}

static uint32_t mini_encode(const mini_fmt_t *f, double x)
{
    const int bias = (1 << (f->ebits - 1)) - 1;
    const int emin = 1 - bias; /* exponent of the smallest normal */
    const int top_field = f->fn ? (1 << f->ebits) - 1 : (1 << f->ebits) - 2;
    const uint32_t top_mant = f->fn ? (1u << f->mbits) - 2u : (1u << f->mbits) - 1u;
    const uint32_t sign = signbit(x) ? 1u << (f->ebits + f->mbits) : 0u;
    double a = fabs(x);
    int e2;

    if (isnan(x)) {
        return mini_nan(f, sign);
    }
    if (isinf(x)) {
        return mini_overflow(f, sign);
    }
    if (a == 0.0) {
        return sign;
    }
    (void)frexp(a, &e2); /* a = m * 2^e2 with m in [0.5, 1) */
    int e = e2 - 1;      /* a = 1.x * 2^e */
    if (e < emin) {
        e = emin; /* subnormal: the quantum stops shrinking */
    }
    if (e - bias > (1 << f->ebits)) {
        return mini_overflow(f, sign); /* far too large: avoid scaling past double's range */
    }
    double q = rint(ldexp(a, f->mbits - e)); /* units of the quantum 2^(e - mbits) */
    if (q >= ldexp(1.0, f->mbits + 1)) {
        q = ldexp(q, -1); /* rounded up to the next binade; q is 2^(mbits+1), exact */
        e++;
    }
    uint32_t iq = (uint32_t)q;
    if (iq < (1u << f->mbits)) {
        return sign | iq; /* subnormal (or zero after rounding) */
    }
    int field = e + bias;
    uint32_t mant = iq - (1u << f->mbits);
    if (field > top_field || (field == top_field && mant > top_mant)) {
        return mini_overflow(f, sign);
    }
    return sign | ((uint32_t)field << f->mbits) | mant;
}

static double mini_decode(const mini_fmt_t *f, uint32_t bits)
{
    const int bias = (1 << (f->ebits - 1)) - 1;
    const uint32_t mant_mask = (1u << f->mbits) - 1u;
    const int field = (int)((bits >> f->mbits) & ((1u << f->ebits) - 1u));
    const uint32_t mant = bits & mant_mask;
    const double s = (bits >> (f->ebits + f->mbits)) & 1u ? -1.0 : 1.0;

    if (field == (1 << f->ebits) - 1) {
        if (f->fn) {
            if (mant == mant_mask) {
                return NAN;
            }
        } else {
            return mant != 0 ? NAN : s * INFINITY;
        }
    }
    if (field == 0) {
        return s * ldexp((double)mant, 1 - bias - f->mbits);
    }
    return s * ldexp((double)(mant | (1u << f->mbits)), field - bias - f->mbits);
}

uint16_t brt_fp16_from_double(double x)
{
    return (uint16_t)mini_encode(&fmt_fp16, x);
}

double brt_fp16_to_double(uint16_t h)
{
    return mini_decode(&fmt_fp16, h);
}

uint16_t brt_bf16_from_double(double x)
{
    return (uint16_t)mini_encode(&fmt_bf16, x);
}

double brt_bf16_to_double(uint16_t h)
{
    return mini_decode(&fmt_bf16, h);
}

uint8_t brt_e4m3_from_double(double x)
{
    return (uint8_t)mini_encode(&fmt_e4m3, x);
}

double brt_e4m3_to_double(uint8_t b)
{
    return mini_decode(&fmt_e4m3, b);
}

uint8_t brt_e5m2_from_double(double x)
{
    return (uint8_t)mini_encode(&fmt_e5m2, x);
}

double brt_e5m2_to_double(uint8_t b)
{
    return mini_decode(&fmt_e5m2, b);
}

size_t brt_fp_size(ncclDataType_t t)
{
    return t == ncclFloat64                               ? 8
           : t == ncclFloat32                             ? 4
           : (t == ncclFloat8e4m3 || t == ncclFloat8e5m2) ? 1
                                                          : 2;
}

void brt_fp_put(ncclDataType_t t, void *buf, size_t i, double x)
{
    unsigned char *p = (unsigned char *)buf + i * brt_fp_size(t);
    float f = (float)x;
    uint16_t h;
    switch (t) {
    case ncclFloat64: memcpy(p, &x, 8); break;
    case ncclFloat32: memcpy(p, &f, 4); break;
    case ncclBfloat16: h = brt_bf16_from_double(x); memcpy(p, &h, 2); break;
    case ncclFloat16: h = brt_fp16_from_double(x); memcpy(p, &h, 2); break;
    case ncclFloat8e4m3: *p = brt_e4m3_from_double(x); break;
    default: *p = brt_e5m2_from_double(x); break;
    }
}

double brt_fp_get(ncclDataType_t t, const void *buf, size_t i)
{
    const unsigned char *p = (const unsigned char *)buf + i * brt_fp_size(t);
    double d;
    float f;
    uint16_t h;
    switch (t) {
    case ncclFloat64: memcpy(&d, p, 8); return d;
    case ncclFloat32: memcpy(&f, p, 4); return f;
    case ncclBfloat16: memcpy(&h, p, 2); return brt_bf16_to_double(h);
    case ncclFloat16: memcpy(&h, p, 2); return brt_fp16_to_double(h);
    case ncclFloat8e4m3: return brt_e4m3_to_double(*p);
    default: return brt_e5m2_to_double(*p);
    }
}
