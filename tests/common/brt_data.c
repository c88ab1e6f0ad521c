/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Inputs and references for the collective tests (see brt_data.h for the contract).
 * Sum-like ops and max/min read a per-type table of BRT_PERIOD values at an index mixed
 * from (element, rank, seed), so filling and checking a million elements costs a table
 * lookup per element and rank; products use a closed formula that bounds the number of
 * 2s per element. Tables are built once under pthread_once and only read afterwards.
 */
#include "brt_data.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "brt_fp.h"

/* A prime, so a misplacement by a power-of-two number of elements never lands on the
 * same input. */
#define BRT_PERIOD 4093

static const brt_type_info_t type_infos[BRT_NTYPES] = {
    {ncclInt8, "int8", 1, BRT_KIND_SINT, 0.0, 0.0},
    {ncclUint8, "uint8", 1, BRT_KIND_UINT, 0.0, 0.0},
    {ncclInt32, "int32", 4, BRT_KIND_SINT, 0.0, 0.0},
    {ncclUint32, "uint32", 4, BRT_KIND_UINT, 0.0, 0.0},
    {ncclInt64, "int64", 8, BRT_KIND_SINT, 0.0, 0.0},
    {ncclUint64, "uint64", 8, BRT_KIND_UINT, 0.0, 0.0},
    {ncclFloat16, "float16", 2, BRT_KIND_FLOAT, 0x1p-11, 0x1p-24},
    {ncclFloat32, "float32", 4, BRT_KIND_FLOAT, 0x1p-24, 0x1p-149},
    {ncclFloat64, "float64", 8, BRT_KIND_FLOAT, 0x1p-53, 0x1p-1074},
    {ncclBfloat16, "bfloat16", 2, BRT_KIND_FLOAT, 0x1p-8, 0x1p-133},
    {ncclFloat8e4m3, "float8e4m3", 1, BRT_KIND_FLOAT, 0x1p-4, 0x1p-9},
    {ncclFloat8e5m2, "float8e5m2", 1, BRT_KIND_FLOAT, 0x1p-3, 0x1p-16},
};

static const char *const op_names[BRT_NOPS] = {"sum", "prod", "max", "min", "avg", "premulsum"};

/* Per type: inputs for sum/avg/premulsum, and for max/min. */
static brt_val_t sum_table[BRT_NTYPES][BRT_PERIOD];
static brt_val_t minmax_table[BRT_NTYPES][BRT_PERIOD];
/* The same values encoded in their type, so filling a buffer is a copy per element. */
static unsigned char sum_bits[BRT_NTYPES][BRT_PERIOD][8];
static unsigned char minmax_bits[BRT_NTYPES][BRT_PERIOD][8];
/* Product inputs -4..4 encoded (index m + 4). */
static unsigned char prod_bits[BRT_NTYPES][9][8];
/* Decoding of every 16- and 8-bit float pattern, so checking reads a table. */
static double fp16_dec[65536], bf16_dec[65536], e4m3_dec[256], e5m2_dec[256];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

uint64_t brt_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

ncclDataType_t brt_type_at(int i)
{
    return type_infos[i].type;
}

const brt_type_info_t *brt_type_info(ncclDataType_t t)
{
    if ((int)t < 0 || (int)t >= BRT_NTYPES) {
        return NULL;
    }
    return &type_infos[(int)t];
}

const char *brt_op_name(int op)
{
    return op >= 0 && op < BRT_NOPS ? op_names[op] : "?";
}

/* Round a double to the nearest value of float type t (the value, not the bits). */
static double round_to_type(ncclDataType_t t, double x)
{
    switch (t) {
    case ncclFloat16: return brt_fp16_to_double(brt_fp16_from_double(x));
    case ncclBfloat16: return brt_bf16_to_double(brt_bf16_from_double(x));
    case ncclFloat8e4m3: return brt_e4m3_to_double(brt_e4m3_from_double(x));
    case ncclFloat8e5m2: return brt_e5m2_to_double(brt_e5m2_from_double(x));
    case ncclFloat32: return (double)(float)x;
    default: return x;
    }
}

/* Uniform integer in [lo, hi] from 64 random bits (hi - lo < 2^63). */
static int64_t pick_range(uint64_t r, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(r % (uint64_t)(hi - lo + 1));
}

/* Inputs for sums: the largest magnitude keeps every partial sum of 8 ranks (times the
 * PreMulSum scalar) exact in the type; see the ranges in the comments. */
static brt_val_t sum_value(ncclDataType_t t, uint64_t r)
{
    brt_val_t v;
    switch (t) {
    case ncclInt8: v.i = pick_range(r, -4, 4); break;           /* 8 * 4 * 3 <= 127 */
    case ncclUint8: v.u = (uint64_t)pick_range(r, 0, 8); break; /* 8 * 8 * 3 <= 255 */
    case ncclInt32: v.i = pick_range(r, -(1LL << 26), 1LL << 26); break;
    case ncclUint32: v.u = (uint64_t)pick_range(r, 0, 1LL << 27); break;
    case ncclInt64: v.i = pick_range(r, -(1LL << 58), 1LL << 58); break;
    case ncclUint64: v.u = (r % ((1ULL << 59) + 1)); break;
    case ncclFloat16: v.f = (double)pick_range(r, -60, 60) / 4.0; break;  /* 480 eighths */
    case ncclBfloat16: v.f = (double)pick_range(r, -30, 30) / 4.0; break; /* 240 eighths */
    case ncclFloat32: v.f = (double)pick_range(r, -(1LL << 20), 1LL << 20) / 16.0; break;
    case ncclFloat64: v.f = (double)pick_range(r, -(1LL << 40), 1LL << 40) / 16.0; break;
    case ncclFloat8e4m3: v.f = (double)pick_range(r, -2, 2); break; /* |sums| <= 16 */
    case ncclFloat8e5m2: v.f = (double)pick_range(r, -1, 1); break; /* |sums| <= 8 */
    default: v.u = 0; break;
    }
    return v;
}

/* Inputs for max/min: any value of the type (finite for floats), over its whole range. */
static brt_val_t minmax_value(ncclDataType_t t, uint64_t r)
{
    const brt_type_info_t *ti = brt_type_info(t);
    brt_val_t v;
    int emin, emax;
    double maxfinite;

    if (ti->kind == BRT_KIND_SINT) {
        int bits = (int)ti->size * 8;
        v.i = bits == 64 ? (int64_t)r : (int64_t)(r << (64 - bits)) >> (64 - bits);
        return v;
    }
    if (ti->kind == BRT_KIND_UINT) {
        v.u = ti->size == 8 ? r : r & ((1ULL << (ti->size * 8)) - 1);
        return v;
    }
    switch (t) {
    case ncclFloat8e4m3:
        emin = -9;
        emax = 8;
        maxfinite = 448.0;
        break;
    case ncclFloat8e5m2:
        emin = -16;
        emax = 15;
        maxfinite = 57344.0;
        break;
    case ncclFloat16:
        emin = -24;
        emax = 15;
        maxfinite = 65504.0;
        break;
    case ncclBfloat16:
        emin = -130;
        emax = 126;
        maxfinite = 0x1.fep127;
        break;
    case ncclFloat32:
        emin = -140;
        emax = 126;
        maxfinite = 0x1.fffffep127;
        break;
    default:
        emin = -1000;
        emax = 1000;
        maxfinite = 0x1.fffffffffffffp1023;
        break;
    }
    int e = (int)pick_range(r >> 8, emin, emax);
    double m = 1.0 + (double)(r >> 12 & 0xfffffffffffULL) * 0x1p-44;
    if ((r & 0xff) == 0) {
        m = 0.0;
    }
    /* Above the largest finite value rounding would give infinity or NaN: clamp first. */
    double x = fmin(ldexp(m, e), maxfinite);
    v.f = round_to_type(t, (r & 0x100) ? -x : x);
    return v;
}

static void store_slow(ncclDataType_t t, void *buf, size_t i, brt_val_t v);

static void tables_build(void)
{
    for (uint32_t b = 0; b < 65536; b++) {
        fp16_dec[b] = brt_fp16_to_double((uint16_t)b);
        bf16_dec[b] = brt_bf16_to_double((uint16_t)b);
    }
    for (uint32_t b = 0; b < 256; b++) {
        e4m3_dec[b] = brt_e4m3_to_double((uint8_t)b);
        e5m2_dec[b] = brt_e5m2_to_double((uint8_t)b);
    }
    for (int ti = 0; ti < BRT_NTYPES; ti++) {
        ncclDataType_t t = type_infos[ti].type;
        for (int k = 0; k < BRT_PERIOD; k++) {
            uint64_t r = brt_mix64(((uint64_t)ti << 32) ^ (uint64_t)k);
            sum_table[ti][k] = sum_value(t, r);
            minmax_table[ti][k] = minmax_value(t, brt_mix64(r ^ 0x5bd1e995));
            store_slow(t, sum_bits[ti][k], 0, sum_table[ti][k]);
            store_slow(t, minmax_bits[ti][k], 0, minmax_table[ti][k]);
        }
        for (int m = -4; m <= 4; m++) {
            brt_val_t v;
            if (type_infos[ti].kind == BRT_KIND_FLOAT) {
                v.f = m;
            } else {
                v.i = m; /* the unsigned types only ever see 1, 2 and 4 */
            }
            store_slow(t, prod_bits[ti][m + 4], 0, v);
        }
    }
}

brt_val_t brt_load(ncclDataType_t t, const void *buf, size_t i)
{
    brt_val_t v;
    pthread_once(&tables_once, tables_build);
    switch (t) {
    case ncclInt8: v.i = ((const int8_t *)buf)[i]; break;
    case ncclUint8: v.u = ((const uint8_t *)buf)[i]; break;
    case ncclInt32: v.i = ((const int32_t *)buf)[i]; break;
    case ncclUint32: v.u = ((const uint32_t *)buf)[i]; break;
    case ncclInt64: v.i = ((const int64_t *)buf)[i]; break;
    case ncclUint64: v.u = ((const uint64_t *)buf)[i]; break;
    case ncclFloat16: v.f = fp16_dec[((const uint16_t *)buf)[i]]; break;
    case ncclFloat32: v.f = ((const float *)buf)[i]; break;
    case ncclFloat64: v.f = ((const double *)buf)[i]; break;
    case ncclBfloat16: v.f = bf16_dec[((const uint16_t *)buf)[i]]; break;
    case ncclFloat8e4m3: v.f = e4m3_dec[((const uint8_t *)buf)[i]]; break;
    case ncclFloat8e5m2: v.f = e5m2_dec[((const uint8_t *)buf)[i]]; break;
    default: v.u = 0; break;
    }
    return v;
}

void brt_store(ncclDataType_t t, void *buf, size_t i, brt_val_t v)
{
    store_slow(t, buf, i, v);
}

static void store_slow(ncclDataType_t t, void *buf, size_t i, brt_val_t v)
{
    switch (t) {
    case ncclInt8: ((int8_t *)buf)[i] = (int8_t)v.i; break;
    case ncclUint8: ((uint8_t *)buf)[i] = (uint8_t)v.u; break;
    case ncclInt32: ((int32_t *)buf)[i] = (int32_t)v.i; break;
    case ncclUint32: ((uint32_t *)buf)[i] = (uint32_t)v.u; break;
    case ncclInt64: ((int64_t *)buf)[i] = v.i; break;
    case ncclUint64: ((uint64_t *)buf)[i] = v.u; break;
    case ncclFloat16: ((uint16_t *)buf)[i] = brt_fp16_from_double(v.f); break;
    case ncclFloat32: ((float *)buf)[i] = (float)v.f; break;
    case ncclFloat64: ((double *)buf)[i] = v.f; break;
    case ncclBfloat16: ((uint16_t *)buf)[i] = brt_bf16_from_double(v.f); break;
    case ncclFloat8e4m3: ((uint8_t *)buf)[i] = brt_e4m3_from_double(v.f); break;
    case ncclFloat8e5m2: ((uint8_t *)buf)[i] = brt_e5m2_from_double(v.f); break;
    default: break;
    }
}

brt_val_t brt_premul_scalar(ncclDataType_t t, void *out)
{
    brt_val_t v;
    if (brt_type_info(t)->kind == BRT_KIND_FLOAT) {
        v.f = 0.5; /* a power of two: scaled inputs stay exact */
    } else if (brt_type_info(t)->kind == BRT_KIND_SINT) {
        v.i = 3;
    } else {
        v.u = 3;
    }
    memset(out, 0, 8);
    brt_store(t, out, 0, v);
    return v;
}

/* Product inputs: 1 or 2 from two rules that each pick one rank per element (so at most
 * two 2s), negated now and then for types with a sign. */
static brt_val_t prod_value(ncclDataType_t t, uint32_t seed, int nranks, int rank, size_t i)
{
    const brt_type_info_t *ti = brt_type_info(t);
    int64_t m = 1;
    brt_val_t v;

    if ((i + seed) % (size_t)nranks == (size_t)rank) {
        m *= 2;
    }
    if ((i / 3 + seed + 1) % (size_t)(nranks + 1) == (size_t)rank) {
        m *= 2;
    }
    if (ti->kind != BRT_KIND_UINT && (i * 3 + (size_t)rank * 5 + seed) % 7 == 0) {
        m = -m;
    }
    if (ti->kind == BRT_KIND_FLOAT) {
        v.f = (double)m;
    } else if (ti->kind == BRT_KIND_SINT) {
        v.i = m;
    } else {
        v.u = (uint64_t)m;
    }
    return v;
}

/* Where rank's element i of a table-driven input sits in the tables. */
static size_t table_index(uint32_t seed, int rank, size_t i)
{
    return (size_t)((i * (uint64_t)(2 * rank + 1) + (uint64_t)rank * 7919 + (uint64_t)seed * 131) %
                    BRT_PERIOD);
}

brt_val_t brt_input(ncclDataType_t t, int op, uint32_t seed, int nranks, int rank, size_t i)
{
    pthread_once(&tables_once, tables_build);
    if (op == BRT_PROD) {
        return prod_value(t, seed, nranks, rank, i);
    }
    size_t k = table_index(seed, rank, i);
    if (op == BRT_MAX || op == BRT_MIN) {
        return minmax_table[(int)t][k];
    }
    return sum_table[(int)t][k];
}

void brt_fill_inputs(ncclDataType_t t, int op, uint32_t seed, int nranks, int rank, void *buf,
                     size_t first, size_t count)
{
    const size_t ts = brt_type_info(t)->size;
    const int ti = (int)t;
    unsigned char *p = buf;
    pthread_once(&tables_once, tables_build);
    for (size_t j = 0; j < count; j++, p += ts) {
        const unsigned char *src;
        if (op == BRT_PROD) {
            brt_val_t v = prod_value(t, seed, nranks, rank, first + j);
            int m = brt_type_info(t)->kind == BRT_KIND_FLOAT ? (int)v.f : (int)v.i;
            src = prod_bits[ti][m + 4];
        } else if (op == BRT_MAX || op == BRT_MIN) {
            src = minmax_bits[ti][table_index(seed, rank, first + j)];
        } else {
            src = sum_bits[ti][table_index(seed, rank, first + j)];
        }
        memcpy(p, src, ts);
    }
}

/* Reference of element i in exact arithmetic; *abs_sum gets sum |x_r| (for avg). */
static brt_val_t reference(ncclDataType_t t, int op, uint32_t seed, int nranks, size_t i,
                           brt_val_t s, double *abs_sum)
{
    const brt_kind_t kind = brt_type_info(t)->kind;
    const brt_val_t *table =
        op == BRT_MAX || op == BRT_MIN ? minmax_table[(int)t] : sum_table[(int)t];
    brt_val_t acc =
        op == BRT_PROD ? prod_value(t, seed, nranks, 0, i) : table[table_index(seed, 0, i)];
    brt_val_t x;

    *abs_sum = kind == BRT_KIND_FLOAT ? fabs(acc.f) : 0.0;
    if (op == BRT_PREMULSUM) {
        if (kind == BRT_KIND_SINT) {
            acc.i *= s.i;
        } else if (kind == BRT_KIND_UINT) {
            acc.u *= s.u;
        } else {
            acc.f *= s.f;
        }
    }
    for (int r = 1; r < nranks; r++) {
        x = op == BRT_PROD ? prod_value(t, seed, nranks, r, i) : table[table_index(seed, r, i)];
        if (kind == BRT_KIND_FLOAT) {
            *abs_sum += fabs(x.f);
        }
        switch (op) {
        case BRT_SUM:
        case BRT_AVG:
            if (kind == BRT_KIND_SINT)
                acc.i += x.i;
            else if (kind == BRT_KIND_UINT)
                acc.u += x.u;
            else
                acc.f += x.f;
            break;
        case BRT_PREMULSUM:
            if (kind == BRT_KIND_SINT)
                acc.i += x.i * s.i;
            else if (kind == BRT_KIND_UINT)
                acc.u += x.u * s.u;
            else
                acc.f += x.f * s.f;
            break;
        case BRT_PROD:
            if (kind == BRT_KIND_SINT)
                acc.i *= x.i;
            else if (kind == BRT_KIND_UINT)
                acc.u *= x.u;
            else
                acc.f *= x.f;
            break;
        case BRT_MAX:
            if (kind == BRT_KIND_SINT)
                acc.i = x.i > acc.i ? x.i : acc.i;
            else if (kind == BRT_KIND_UINT)
                acc.u = x.u > acc.u ? x.u : acc.u;
            else
                acc.f = x.f > acc.f ? x.f : acc.f;
            break;
        default: /* BRT_MIN */
            if (kind == BRT_KIND_SINT)
                acc.i = x.i < acc.i ? x.i : acc.i;
            else if (kind == BRT_KIND_UINT)
                acc.u = x.u < acc.u ? x.u : acc.u;
            else
                acc.f = x.f < acc.f ? x.f : acc.f;
            break;
        }
    }
    if (op == BRT_AVG) {
        /* Integers as NCCL: the sum divided by nranks, truncated toward zero. */
        if (kind == BRT_KIND_SINT)
            acc.i /= nranks;
        else if (kind == BRT_KIND_UINT)
            acc.u /= (uint64_t)nranks;
        else
            acc.f /= nranks;
    }
    return acc;
}

static void val_format(ncclDataType_t t, brt_val_t v, char *buf, size_t len)
{
    switch (brt_type_info(t)->kind) {
    case BRT_KIND_SINT: snprintf(buf, len, "%" PRId64, v.i); break;
    case BRT_KIND_UINT: snprintf(buf, len, "%" PRIu64, v.u); break;
    default: snprintf(buf, len, "%.17g", v.f); break;
    }
}

/* Does got match the reference? Floats compare as values (so -0 == +0; NaN never
 * matches); avg of a float type within its rounding bound. */
static int val_matches(ncclDataType_t t, int op, int nranks, brt_val_t ref, double abs_sum,
                       double avg_factor, brt_val_t got)
{
    const brt_type_info_t *ti = brt_type_info(t);
    if (ti->kind == BRT_KIND_SINT) {
        return got.i == ref.i;
    }
    if (ti->kind == BRT_KIND_UINT) {
        return got.u == ref.u;
    }
    if (op != BRT_AVG) {
        /* The inputs make every exact result representable (check_brt_common checks it). */
        return got.f == ref.f;
    }
    double bound = avg_factor * abs_sum / nranks + nranks * ti->min_subnormal;
    return fabs(got.f - ref.f) <= bound;
}

int brt_check_reduced(ncclDataType_t t, int op, uint32_t seed, int nranks, const void *got,
                      size_t first, size_t count, char *err, size_t errlen)
{
    size_t bad = 0, first_bad = 0;
    brt_val_t bad_ref = {0}, bad_got = {0};
    unsigned char scalar_bytes[8];
    const brt_val_t scalar = brt_premul_scalar(t, scalar_bytes);
    /* Float avg: each input may be scaled by a rounded 1/n, then n-1 rounded additions and
     * a final rounding; the relative error compounds to at most (1 + u)^(n + 2) - 1. */
    const double avg_factor = expm1((nranks + 2) * log1p(brt_type_info(t)->unit_roundoff));

    pthread_once(&tables_once, tables_build);

    for (size_t j = 0; j < count; j++) {
        double abs_sum;
        brt_val_t ref = reference(t, op, seed, nranks, first + j, scalar, &abs_sum);
        brt_val_t g = brt_load(t, got, j);
        if (!val_matches(t, op, nranks, ref, abs_sum, avg_factor, g)) {
            if (bad++ == 0) {
                first_bad = j;
                bad_ref = ref;
                bad_got = g;
            }
        }
    }
    if (bad == 0) {
        return 0;
    }
    char sref[48], sgot[48], inputs[160] = "";
    size_t used = 0;
    val_format(t, bad_ref, sref, sizeof(sref));
    val_format(t, bad_got, sgot, sizeof(sgot));
    for (int r = 0; r < nranks && used + 40 < sizeof(inputs); r++) {
        char s[40];
        val_format(t, brt_input(t, op, seed, nranks, r, first + first_bad), s, sizeof(s));
        used += (size_t)snprintf(inputs + used, sizeof(inputs) - used, "%s%s", r ? "," : "", s);
    }
    snprintf(err, errlen,
             "element %zu: expected %s got %s (inputs by rank: %s); %zu of %zu elements wrong",
             first_bad, sref, sgot, inputs, bad, count);
    return 1;
}

/* Byte pos of the stream of (seed, src, dst): byte pos % 8 of a word made per 8 bytes;
 * *cache keeps the last word so a sequential walk mixes once per word. */
typedef struct {
    uint64_t key;
    size_t word_index;
    uint64_t word;
    int valid;
} byte_stream_t;

static void stream_init(byte_stream_t *bs, uint32_t seed, int src, int dst)
{
    uint64_t key = ((uint64_t)seed << 40) ^ ((uint64_t)(src + 1) << 20) ^ (uint64_t)(dst + 7);
    bs->key = brt_mix64(key);
    bs->valid = 0;
}

static unsigned char stream_byte(byte_stream_t *bs, size_t pos)
{
    if (!bs->valid || bs->word_index != pos >> 3) {
        bs->word_index = pos >> 3;
        bs->word = brt_mix64(bs->key ^ (pos >> 3));
        bs->valid = 1;
    }
    return (unsigned char)(bs->word >> ((pos & 7) * 8));
}

void brt_fill_bytes(uint32_t seed, int src, int dst, void *buf, size_t first, size_t nbytes)
{
    unsigned char *p = buf;
    byte_stream_t bs;
    stream_init(&bs, seed, src, dst);
    for (size_t j = 0; j < nbytes; j++) {
        p[j] = stream_byte(&bs, first + j);
    }
}

int brt_check_bytes(uint32_t seed, int src, int dst, const void *buf, size_t first, size_t nbytes,
                    char *err, size_t errlen)
{
    const unsigned char *p = buf;
    size_t bad = 0, first_bad = 0;
    unsigned char want = 0;
    byte_stream_t bs;

    stream_init(&bs, seed, src, dst);
    for (size_t j = 0; j < nbytes; j++) {
        unsigned char b = stream_byte(&bs, first + j);
        if (p[j] != b && bad++ == 0) {
            first_bad = j;
            want = b;
        }
    }
    if (bad == 0) {
        return 0;
    }
    snprintf(err, errlen, "byte %zu: expected 0x%02x got 0x%02x; %zu of %zu bytes wrong", first_bad,
             want, p[first_bad], bad, nbytes);
    return 1;
}
