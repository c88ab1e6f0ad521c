/* SPDX-License-Identifier: Apache-2.0 */
/*
 * braid-perf data: the datatypes, the input generator and the checker.
 *
 * Every input element is a small integer drawn from a hash of (seed, source rank, index),
 * with the range chosen per type, operator and rank count so that every partial result a
 * reduction can form, in any order, is exactly representable: the expected value is then
 * exact whatever algorithm the library uses. Products get a single contributor per
 * element (the others give 1). Only the floating-point average is compared with a
 * tolerance, since 1/n is inexact for most n. Values travel as doubles, exact here for
 * every integer the generator produces (at most 2^20 in magnitude, times the rank count).
 */
#include "perf.h"

#include <math.h>
#include <string.h>
#include <strings.h>

#define GEN_CAP 1048576.0 /* largest magnitude generated, so int64 values stay exact */

/* exact_max: the largest integer M with every integer of [-M, M] exact in the type. */
static const struct perf_type types[] = {
    {ncclInt8, "int8", 1, 0, 1, 127.0},
    {ncclUint8, "uint8", 1, 0, 0, 255.0},
    {ncclInt32, "int32", 4, 0, 1, 2147483647.0},
    {ncclUint32, "uint32", 4, 0, 0, 4294967295.0},
    {ncclInt64, "int64", 8, 0, 1, 9007199254740992.0},
    {ncclUint64, "uint64", 8, 0, 0, 9007199254740992.0},
    {ncclFloat16, "half", 2, 1, 1, 2048.0},
    {ncclFloat32, "float", 4, 1, 1, 16777216.0},
    {ncclFloat64, "double", 8, 1, 1, 9007199254740992.0},
    {ncclBfloat16, "bfloat16", 2, 1, 1, 256.0},
    {ncclFloat8e4m3, "f8e4m3", 1, 1, 1, 16.0},
    {ncclFloat8e5m2, "f8e5m2", 1, 1, 1, 8.0},
};
#define NTYPES ((int)(sizeof(types) / sizeof(types[0])))

/* Other spellings people use for the same types. */
static const struct {
    const char *name;
    ncclDataType_t type;
} type_aliases[] = {
    {"char", ncclInt8},          {"int", ncclInt32},          {"float16", ncclFloat16},
    {"fp16", ncclFloat16},       {"float32", ncclFloat32},    {"fp32", ncclFloat32},
    {"float64", ncclFloat64},    {"fp64", ncclFloat64},       {"bf16", ncclBfloat16},
    {"fp8e4m3", ncclFloat8e4m3}, {"fp8e5m2", ncclFloat8e5m2},
};

static const char *const op_names[] = {"sum", "prod", "max", "min", "avg"};

/* Layout of the small floating-point formats: exponent bits, mantissa bits, bias, and
 * whether the all-ones exponent means inf/NaN (IEEE) or only mantissa-all-ones is NaN. */
struct minifloat {
    int ebits, mbits, bias, ieee;
};
static const struct minifloat fmt_half = {5, 10, 15, 1};
static const struct minifloat fmt_bf16 = {8, 7, 127, 1};
static const struct minifloat fmt_e4m3 = {4, 3, 7, 0};
static const struct minifloat fmt_e5m2 = {5, 2, 15, 1};

const struct perf_type *perf_type_get(int nccl_type)
{
    for (int i = 0; i < NTYPES; i++) {
        if ((int)types[i].nccl == nccl_type) {
            return &types[i];
        }
    }
    return NULL;
}

int perf_type_lookup(const char *name, int *type_p)
{
    for (int i = 0; i < NTYPES; i++) {
        if (strcasecmp(name, types[i].name) == 0) {
            *type_p = (int)types[i].nccl;
            return 0;
        }
    }
    for (size_t i = 0; i < sizeof(type_aliases) / sizeof(type_aliases[0]); i++) {
        if (strcasecmp(name, type_aliases[i].name) == 0) {
            *type_p = (int)type_aliases[i].type;
            return 0;
        }
    }
    return -1;
}

int perf_op_lookup(const char *name, int *op_p)
{
    for (int i = 0; i < (int)(sizeof(op_names) / sizeof(op_names[0])); i++) {
        if (strcasecmp(name, op_names[i]) == 0) {
            *op_p = i; /* the table follows ncclRedOp_t's order */
            return 0;
        }
    }
    return -1;
}

const char *perf_op_name(int op)
{
    if (op < 0 || op >= (int)(sizeof(op_names) / sizeof(op_names[0]))) {
        return "none";
    }
    return op_names[op];
}

/* The mantissa width (with the implicit bit) of a floating type, for the avg tolerance. */
static int precision_bits(ncclDataType_t t)
{
    switch (t) {
    case ncclFloat16: return 11;
    case ncclBfloat16: return 8;
    case ncclFloat32: return 24;
    case ncclFloat8e4m3: return 4;
    case ncclFloat8e5m2: return 3;
    default: return 53;
    }
}

/* One contributor per element for products (and for sums the type cannot hold). */
static int single_contributor(const struct perf_gen *g)
{
    return g->op == ncclProd ||
           ((g->op == ncclSum || g->op == ncclAvg) && g->type->exact_max < g->nranks);
}

void perf_gen_init(struct perf_gen *g, const struct perf_type *t, int op, int nranks, uint64_t seed)
{
    double k = fmin(t->exact_max, GEN_CAP);
    memset(g, 0, sizeof(*g));
    g->type = t;
    g->op = op;
    g->nranks = nranks;
    g->seed = seed;
    if ((op == ncclSum || op == ncclAvg) && !single_contributor(g)) {
        /* n values of magnitude <= k/n never sum past k, in any order. */
        k = floor(k / nranks);
    }
    g->hi = k;
    /* Averages stay non-negative so integer division truncates the same way everywhere. */
    g->lo = (t->is_signed && op != ncclAvg) ? -k : 0;
}

/* splitmix64's finaliser: a cheap, well-mixed hash of one 64-bit word. */
static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

double perf_gen_value(const struct perf_gen *g, int src, size_t idx)
{
    uint64_t h = mix64(g->seed + (uint64_t)idx * 0x9e3779b97f4a7c15ULL +
                       (uint64_t)(src + 1) * 0xd1b54a32d192ed03ULL);
    uint64_t span = (uint64_t)(g->hi - g->lo) + 1;
    if (single_contributor(g) && (size_t)src != (idx + (size_t)(g->seed >> 40)) % g->nranks) {
        return g->op == ncclProd ? 1.0 : 0.0;
    }
    return g->lo + (double)(h % span);
}

double perf_gen_reduced(const struct perf_gen *g, size_t idx)
{
    double acc = perf_gen_value(g, 0, idx);
    for (int p = 1; p < g->nranks; p++) {
        double v = perf_gen_value(g, p, idx);
        switch (g->op) {
        case ncclProd: acc *= v; break;
        case ncclMax: acc = v > acc ? v : acc; break;
        case ncclMin: acc = v < acc ? v : acc; break;
        default: acc += v; break;
        }
    }
    if (g->op == ncclAvg) {
        /* NCCL divides the integer sum (truncating); floats are compared with a tolerance. */
        acc = g->type->is_float ? acc / g->nranks : floor(acc / g->nranks);
    }
    return acc;
}

int perf_value_ok(const struct perf_gen *g, double expected, double got)
{
    if (g->op == ncclAvg && g->type->is_float && expected != 0.0) {
        /* A few ulps: the scaling by 1/n and each addition may round once. */
        int e;
        frexp(fabs(expected), &e);
        double ulp = ldexp(1.0, e - precision_bits(g->type->nccl));
        return fabs(got - expected) <= (g->nranks + 1) * ulp;
    }
    return got == expected;
}

/* Rounds v to the nearest value of the format (ties to even), saturating. */
static unsigned encode_minifloat(const struct minifloat *f, double v)
{
    unsigned sign = signbit(v) ? 1u << (f->ebits + f->mbits) : 0;
    unsigned max_finite =
        f->ieee ? ((((1u << f->ebits) - 1) << f->mbits) - 1) : ((1u << (f->ebits + f->mbits)) - 2);
    double a = fabs(v), bits;
    int e;
    if (isnan(v)) {
        return ((1u << (f->ebits + f->mbits)) - 1); /* a NaN in every format here */
    }
    if (a == 0.0) {
        return sign;
    }
    frexp(a, &e); /* a = m * 2^e with m in [0.5, 1): the unbiased exponent is e - 1 */
    if (e - 1 + f->bias <= 0) {
        bits = nearbyint(ldexp(a, f->bias - 1 + f->mbits)); /* subnormal */
    } else {
        /* The pattern (exponent << mbits) + mantissa is monotonic, so a mantissa that
         * rounds up to 2^mbits correctly carries into the exponent. */
        double mant = nearbyint(ldexp(a, f->mbits - (e - 1)) - ldexp(1.0, f->mbits));
        bits = ldexp((double)(e - 1 + f->bias), f->mbits) + mant;
    }
    return sign | (bits > max_finite ? max_finite : (unsigned)bits);
}

static double decode_minifloat(const struct minifloat *f, unsigned bits)
{
    unsigned mmask = (1u << f->mbits) - 1, emax = (1u << f->ebits) - 1;
    unsigned exp = (bits >> f->mbits) & emax, mant = bits & mmask;
    double sign = (bits >> (f->ebits + f->mbits)) & 1 ? -1.0 : 1.0;
    if (f->ieee && exp == emax) {
        return mant ? NAN : sign * INFINITY;
    }
    if (!f->ieee && exp == emax && mant == mmask) {
        return NAN;
    }
    if (exp == 0) {
        return sign * ldexp((double)mant, 1 - f->bias - f->mbits);
    }
    return sign * ldexp((double)(mant | (1u << f->mbits)), (int)exp - f->bias - f->mbits);
}

void perf_store(const struct perf_type *t, void *buf, size_t i, double v)
{
    switch (t->nccl) {
    case ncclInt8: ((int8_t *)buf)[i] = (int8_t)v; break;
    case ncclUint8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case ncclInt32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case ncclUint32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
    case ncclInt64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case ncclUint64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
    case ncclFloat16: ((uint16_t *)buf)[i] = (uint16_t)encode_minifloat(&fmt_half, v); break;
    case ncclFloat32: ((float *)buf)[i] = (float)v; break;
    case ncclFloat64: ((double *)buf)[i] = v; break;
    case ncclBfloat16: ((uint16_t *)buf)[i] = (uint16_t)encode_minifloat(&fmt_bf16, v); break;
    case ncclFloat8e4m3: ((uint8_t *)buf)[i] = (uint8_t)encode_minifloat(&fmt_e4m3, v); break;
    case ncclFloat8e5m2: ((uint8_t *)buf)[i] = (uint8_t)encode_minifloat(&fmt_e5m2, v); break;
    default: break;
    }
}

double perf_load(const struct perf_type *t, const void *buf, size_t i)
{
    switch (t->nccl) {
    case ncclInt8: return ((const int8_t *)buf)[i];
    case ncclUint8: return ((const uint8_t *)buf)[i];
    case ncclInt32: return ((const int32_t *)buf)[i];
    case ncclUint32: return ((const uint32_t *)buf)[i];
    case ncclInt64: return (double)((const int64_t *)buf)[i];
    case ncclUint64: return (double)((const uint64_t *)buf)[i];
    case ncclFloat16: return decode_minifloat(&fmt_half, ((const uint16_t *)buf)[i]);
    case ncclFloat32: return ((const float *)buf)[i];
    case ncclFloat64: return ((const double *)buf)[i];
    case ncclBfloat16: return decode_minifloat(&fmt_bf16, ((const uint16_t *)buf)[i]);
    case ncclFloat8e4m3: return decode_minifloat(&fmt_e4m3, ((const uint8_t *)buf)[i]);
    case ncclFloat8e5m2: return decode_minifloat(&fmt_e5m2, ((const uint8_t *)buf)[i]);
    default: return NAN;
    }
}
