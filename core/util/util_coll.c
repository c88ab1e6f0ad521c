/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The shared vocabulary's functions (core/common/coll.h): names of functions, types,
 * algorithms and protocols, type sizes, and the resolution of a reduction into its
 * arithmetic. Pure functions of their arguments; any thread.
 */
#include <math.h>
#include <string.h>

#include "coll.h"
#include "util.h"

const char *br_func_name(br_func_t func)
{
    static const char *const names[BR_NUM_FUNCS] = {
        "Broadcast", "Reduce",     "AllGather",      "ReduceScatter", "AllReduce",
        "SendRecv",  "Send",       "Recv",           "AlltoAll",      "Scatter",
        "Gather",    "AllGatherV", "ReduceScatterV", "AlltoAllV"};
    return (unsigned)func < BR_NUM_FUNCS ? names[func] : "unknown";
}

static int type_is_valid(ncclDataType_t type)
{
    return (int)type >= 0 && (int)type < (int)ncclNumTypes;
}

size_t br_type_size(ncclDataType_t type)
{
    static const unsigned char sizes[ncclNumTypes] = {
        [ncclInt8] = 1,    [ncclUint8] = 1,    [ncclInt32] = 4,      [ncclUint32] = 4,
        [ncclInt64] = 8,   [ncclUint64] = 8,   [ncclFloat16] = 2,    [ncclFloat32] = 4,
        [ncclFloat64] = 8, [ncclBfloat16] = 2, [ncclFloat8e4m3] = 1, [ncclFloat8e5m2] = 1,
    };
    return type_is_valid(type) ? sizes[type] : 0;
}

const char *br_type_name(ncclDataType_t type)
{
    static const char *const names[ncclNumTypes] = {
        [ncclInt8] = "int8",           [ncclUint8] = "uint8",        [ncclInt32] = "int32",
        [ncclUint32] = "uint32",       [ncclInt64] = "int64",        [ncclUint64] = "uint64",
        [ncclFloat16] = "float16",     [ncclFloat32] = "float32",    [ncclFloat64] = "float64",
        [ncclBfloat16] = "bfloat16",   [ncclFloat8e4m3] = "float8e4m3",
        [ncclFloat8e5m2] = "float8e5m2",
    };
    return type_is_valid(type) ? names[type] : "invalid";
}

int br_type_is_float(ncclDataType_t type)
{
    return type == ncclFloat16 || type == ncclFloat32 || type == ncclFloat64 ||
           type == ncclBfloat16 || type == ncclFloat8e4m3 || type == ncclFloat8e5m2;
}

const char *br_algo_name(int algo)
{
    static const char *const names[BR_NUM_ALGOS] = {
        "Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS",
        "NVLSTree", "PAT", "OneShot", "DirectRead", "RingOneShot"};
    return algo >= 0 && algo < BR_NUM_ALGOS ? names[algo] : "undef";
}

const char *br_proto_name(int proto)
{
    static const char *const names[BR_NUM_PROTOS] = {"LL", "LL128", "Simple"};
    return proto >= 0 && proto < BR_NUM_PROTOS ? names[proto] : "undef";
}

const char *br_red_kind_name(br_red_kind_t kind)
{
    static const char *const names[] = {
        [BR_RED_SUM] = "sum", [BR_RED_PROD] = "prod",           [BR_RED_MAX] = "max",
        [BR_RED_MIN] = "min", [BR_RED_PREMULSUM] = "premulsum", [BR_RED_SUMPOSTDIV] = "sumpostdiv",
    };
    return (int)kind >= 0 && (int)kind <= (int)BR_RED_SUMPOSTDIV ? names[kind] : "invalid";
}

void br_redop_builtin(br_redop_t *op, ncclRedOp_t builtin, ncclDataType_t type, int nranks)
{
    BR_ASSERT(nranks > 0);
    memset(op, 0, sizeof(*op));
    op->type = type;
    op->scalar_f = 1.0;
    op->scalar_i = 1;
    op->divisor = 1;
    switch (builtin) {
    case ncclProd: op->kind = BR_RED_PROD; break;
    case ncclMax: op->kind = BR_RED_MAX; break;
    case ncclMin: op->kind = BR_RED_MIN; break;
    case ncclAvg:
        /* As NCCL: floating types scale each input by 1/nranks before summing (so sums
         * do not overflow), integers sum and divide the total. */
        if (br_type_is_float(type)) {
            op->kind = BR_RED_PREMULSUM;
            op->scalar_f = 1.0 / (double)(nranks > 0 ? nranks : 1);
        } else {
            op->kind = BR_RED_SUMPOSTDIV;
            op->divisor = (uint64_t)(nranks > 0 ? nranks : 1);
        }
        break;
    case ncclSum:
    default:
        BR_ASSERT(builtin == ncclSum);
        op->kind = BR_RED_SUM;
        break;
    }
}

/*
 * The value of a narrow IEEE-style float with `mbits` mantissa bits and exponent bias
 * `bias`: sign, biased exponent e and mantissa m give (-1)^s * 2^(e - bias) * (1 + m/2^mbits)
 * for normal numbers and 2^(1 - bias) * m/2^mbits for e == 0. `top` is the all-ones exponent
 * (infinity or NaN); e4m3 has no infinity and only its all-ones pattern is NaN.
 */
static double narrow_to_double(unsigned bits, int ebits, int mbits, int bias, int e4m3)
{
    unsigned m = bits & ((1u << mbits) - 1);
    unsigned e = (bits >> mbits) & ((1u << ebits) - 1);
    int neg = (bits >> (ebits + mbits)) & 1;
    unsigned top = (1u << ebits) - 1;
    double v;

    if (e4m3 ? (e == top && m == (1u << mbits) - 1) : (e == top && m != 0)) {
        return NAN;
    }
    if (!e4m3 && e == top) {
        v = INFINITY;
    } else if (e == 0) {
        v = ldexp((double)m, 1 - bias - mbits);
    } else {
        v = ldexp((double)(m | (1u << mbits)), (int)e - bias - mbits);
    }
    return neg ? -v : v;
}

void br_redop_premulsum(br_redop_t *op, ncclDataType_t type, const void *scalar)
{
    union {
        int8_t i8;
        uint8_t u8;
        int32_t i32;
        uint32_t u32;
        int64_t i64;
        uint64_t u64;
        uint16_t h;
        float f;
        double d;
    } v;

    memset(op, 0, sizeof(*op));
    op->kind = BR_RED_PREMULSUM;
    op->type = type;
    op->divisor = 1;
    memset(&v, 0, sizeof(v));
    memcpy(&v, scalar, br_type_size(type));
    /* Integer scalars keep their bit pattern sign-extended to 64 bits: the loops multiply
     * modulo 2^bits, which is the two's complement product for signed types too. */
    switch (type) {
    case ncclInt8: op->scalar_i = (uint64_t)(int64_t)v.i8; break;
    case ncclUint8: op->scalar_i = v.u8; break;
    case ncclInt32: op->scalar_i = (uint64_t)(int64_t)v.i32; break;
    case ncclUint32: op->scalar_i = v.u32; break;
    case ncclInt64: op->scalar_i = (uint64_t)v.i64; break;
    case ncclUint64: op->scalar_i = v.u64; break;
    case ncclFloat16: op->scalar_f = narrow_to_double(v.h, 5, 10, 15, 0); break;
    case ncclFloat32: op->scalar_f = v.f; break;
    case ncclFloat64: op->scalar_f = v.d; break;
    case ncclBfloat16: op->scalar_f = narrow_to_double(v.h, 8, 7, 127, 0); break;
    case ncclFloat8e4m3: op->scalar_f = narrow_to_double(v.u8, 4, 3, 7, 1); break;
    case ncclFloat8e5m2: op->scalar_f = narrow_to_double(v.u8, 5, 2, 15, 0); break;
    default: BR_ASSERT(0); break;
    }
    if (!br_type_is_float(type)) {
        op->scalar_f = type == ncclUint64 || type == ncclUint32 || type == ncclUint8
                           ? (double)op->scalar_i
                           : (double)(int64_t)op->scalar_i;
    }
}
