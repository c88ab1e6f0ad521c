/* SPDX-License-Identifier: Apache-2.0 */
/* The reference of check_reduce (reduce_ref.h). */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "reduce_ref.h"

/* ---- Reference narrow formats ------------------------------------------------------ */

fmt_t fmt_f16 = {16, 5, 10, 15, 1, 0, 0, NULL, NULL};
fmt_t fmt_bf16 = {16, 8, 7, 127, 1, 0, 0, NULL, NULL};
fmt_t fmt_e4m3 = {8, 4, 3, 7, 0, 1, 0, NULL, NULL};
fmt_t fmt_e5m2 = {8, 5, 2, 15, 1, 1, 0, NULL, NULL};

double ref_decode(const fmt_t *f, uint32_t v)
{
    uint32_t sign = (v >> (f->bits - 1)) & 1u;
    uint32_t emax = (1u << f->ebits) - 1u, mmax = (1u << f->mbits) - 1u;
    uint32_t e = (v >> f->mbits) & emax, m = v & mmax;
    double mag;

    if (f->ieee && e == emax) {
        mag = m == 0 ? INFINITY : NAN;
    } else if (!f->ieee && e == emax && m == mmax) {
        mag = NAN;
    } else if (e == 0) {
        mag = ldexp((double)m, 1 - f->bias - f->mbits);
    } else {
        mag = ldexp((double)(m + mmax + 1u), (int)e - f->bias - f->mbits);
    }
    return sign ? -mag : mag;
}

void fmt_init(fmt_t *f)
{
    if (f->vals != NULL) {
        return;
    }
    uint32_t limit = 1u << (f->bits - 1);
    f->vals = malloc(limit * sizeof(double));
    f->dec = malloc(2 * limit * sizeof(double));
    ck_assert_ptr_nonnull(f->vals);
    ck_assert_ptr_nonnull(f->dec);
    for (uint32_t v = 0; v < 2 * limit; v++) {
        f->dec[v] = ref_decode(f, v);
    }
    for (uint32_t v = 0; v < limit; v++) {
        double d = ref_decode(f, v);
        if (isnan(d) || isinf(d)) {
            break;
        }
        f->vals[f->nvals++] = d;
    }
}

uint32_t ref_encode(fmt_t *f, double x)
{
    uint32_t sign = signbit(x) ? 1u << (f->bits - 1) : 0;
    uint32_t inf_code = ((1u << f->ebits) - 1u) << f->mbits;
    double a = fabs(x), max;
    int lo = 0, hi;

    fmt_init(f);
    if (isnan(x)) {
        return (1u << f->bits) - 1u;
    }
    max = f->vals[f->nvals - 1];
    if (a > max) {
        /* The next value past max (one more ulp) does not exist; the midpoint to it
         * rounds up (max's mantissa is odd), to infinity. */
        double next = max + (max - f->vals[f->nvals - 2]);
        if (f->saturate) {
            return sign | (uint32_t)(f->nvals - 1);
        }
        if (a >= (max + next) / 2) {
            return sign | inf_code;
        }
        return sign | (uint32_t)(f->nvals - 1);
    }
    hi = f->nvals - 1;
    while (lo < hi) { /* largest k with vals[k] <= a */
        int mid = (lo + hi + 1) / 2;
        if (f->vals[mid] <= a) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    if (f->vals[lo] == a || lo == f->nvals - 1) {
        return sign | (uint32_t)lo;
    }
    double midpoint = (f->vals[lo] + f->vals[lo + 1]) / 2;
    if (a < midpoint || (a == midpoint && (lo & 1) == 0)) {
        return sign | (uint32_t)lo;
    }
    return sign | (uint32_t)(lo + 1);
}

/* ---- Typed element access ---------------------------------------------------------- */

int tsize(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    default: return 8;
    }
}

int is_signed_int(ncclDataType_t t)
{
    return t == ncclInt8 || t == ncclInt32 || t == ncclInt64;
}

int is_int(ncclDataType_t t)
{
    return is_signed_int(t) || t == ncclUint8 || t == ncclUint32 || t == ncclUint64;
}

fmt_t *narrow_fmt(ncclDataType_t t)
{
    switch (t) {
    case ncclFloat16: return &fmt_f16;
    case ncclBfloat16: return &fmt_bf16;
    case ncclFloat8e4m3: return &fmt_e4m3;
    case ncclFloat8e5m2: return &fmt_e5m2;
    default: return NULL;
    }
}

uint64_t get_bits(ncclDataType_t t, const void *buf, size_t i)
{
    uint64_t v = 0;
    memcpy(&v, (const char *)buf + i * (size_t)tsize(t), (size_t)tsize(t));
    return v;
}

void set_bits(ncclDataType_t t, void *buf, size_t i, uint64_t v)
{
    memcpy((char *)buf + i * (size_t)tsize(t), &v, (size_t)tsize(t));
}

uint64_t type_mask(ncclDataType_t t)
{
    return tsize(t) == 8 ? ~0ull : (1ull << (8 * tsize(t))) - 1;
}

int64_t sext(ncclDataType_t t, uint64_t v)
{
    int sh = 64 - 8 * tsize(t);
    return (int64_t)(v << sh) >> sh;
}

double fval(ncclDataType_t t, uint64_t v)
{
    if (t == ncclFloat32) {
        float f;
        uint32_t u = (uint32_t)v;
        memcpy(&f, &u, sizeof(f));
        return f;
    }
    if (t == ncclFloat64) {
        double d;
        memcpy(&d, &v, sizeof(d));
        return d;
    }
    fmt_t *f = narrow_fmt(t);
    fmt_init(f);
    return f->dec[v];
}

uint64_t fbits(ncclDataType_t t, double x)
{
    if (t == ncclFloat32) {
        float f = (float)x;
        uint32_t u;
        memcpy(&u, &f, sizeof(u));
        return u;
    }
    if (t == ncclFloat64) {
        uint64_t u;
        memcpy(&u, &x, sizeof(u));
        return u;
    }
    return ref_encode(narrow_fmt(t), x);
}

/* ---- Reference arithmetic ---------------------------------------------------------- */

uint64_t ref_apply(ncclDataType_t t, const ref_op_t *op, int kind, uint64_t a, uint64_t b)
{
    if (kind == R_COPY) {
        return a;
    }
    if (is_int(t)) {
        uint64_t m = type_mask(t);
        int sg = is_signed_int(t);
        switch (kind) {
        case R_SUM: return (a + b) & m;
        case R_PROD: return (a * b) & m;
        case R_MAX: return (sg ? sext(t, a) > sext(t, b) : a > b) ? a : b;
        case R_MIN: return (sg ? sext(t, a) < sext(t, b) : a < b) ? a : b;
        case R_PREMUL: return (a + b * op->scalar) & m;
        case R_PRE1: return (a * op->scalar) & m;
        case R_SUMDIV:
        case R_DIV1: {
            uint64_t s = kind == R_SUMDIV ? (a + b) & m : a;
            if (sg) {
                return (uint64_t)(sext(t, s) / (int64_t)op->divisor) & m;
            }
            return s / op->divisor;
        }
        default: ck_abort_msg("bad kind %d", kind);
        }
    }
    double x = fval(t, a), y = fval(t, b), s = fval(t, op->scalar);
    switch (kind) {
    case R_SUM: return fbits(t, x + y);
    case R_PROD: return fbits(t, x * y);
    case R_MAX: return (x > y || isnan(x)) ? a : b;
    case R_MIN: return (x < y || isnan(x)) ? a : b;
    case R_PREMUL: return fbits(t, x + fval(t, fbits(t, y * s)));
    case R_PRE1: return fbits(t, x * s);
    case R_SUMDIV: return fbits(t, fval(t, fbits(t, x + y)) / (double)op->divisor);
    case R_DIV1: return fbits(t, x / (double)op->divisor);
    default: ck_abort_msg("bad kind %d", kind);
    }
    return 0;
}

int same_bits(ncclDataType_t t, uint64_t got, uint64_t want)
{
    if (got == want) {
        return 1;
    }
    return !is_int(t) && isnan(fval(t, want)) && isnan(fval(t, got));
}

/* ---- Inputs ------------------------------------------------------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

void rnd_seed(uint64_t seed)
{
    rng_state = seed;
}

uint64_t rnd(void)
{
    /* xorshift64*: deterministic, so failures reproduce. */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

uint64_t random_elem(ncclDataType_t t)
{
    uint64_t r = rnd();
    if (t == ncclFloat32 || t == ncclFloat64) {
        if ((r & 15) == 0) {
            return rnd() & type_mask(t);
        }
        double d =
            ldexp((double)(int64_t)(rnd() >> 11) - (double)(1ull << 52), (int)(r >> 58) - 84);
        return fbits(t, d);
    }
    return r & type_mask(t);
}
