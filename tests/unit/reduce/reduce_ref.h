/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The reference that check_reduce tests br_reduce and the narrow-float conversions
 * against, written from the format definitions: it decodes with ldexp, encodes by
 * searching the sorted list of a format's values (ties to the even encoding), and does
 * its arithmetic in double, so it shares no code or trick with core/exec/exec_reduce.c.
 */
#ifndef BR_TEST_REDUCE_REF_H
#define BR_TEST_REDUCE_REF_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

typedef struct {
    int bits;  /* 8 or 16 */
    int ebits; /* exponent bits */
    int mbits; /* mantissa bits */
    int bias;
    int ieee;     /* all-ones exponent is inf (m == 0) or NaN; else only S.1..1.1..1 is NaN */
    int saturate; /* overflow gives the largest finite value instead of inf */
    int nvals;    /* number of finite non-negative encodings, 0..max */
    double *vals; /* their values, ascending */
    double *dec;  /* ref_decode() of every encoding, a cache for the big runs */
} fmt_t;

extern fmt_t fmt_f16, fmt_bf16, fmt_e4m3, fmt_e5m2;

enum { R_SUM, R_PROD, R_MAX, R_MIN, R_PREMUL, R_SUMDIV, R_PRE1, R_DIV1, R_COPY };

typedef struct {
    int kind;         /* R_* for two operands */
    uint64_t scalar;  /* PREMULSUM: the scalar's bits in the type (floats: already rounded) */
    uint64_t divisor; /* SUMPOSTDIV */
} ref_op_t;

/* Value of encoding v of format f (NaN and inf as the format defines them). */
double ref_decode(const fmt_t *f, uint32_t v);
/* Fills f's sorted list of values and its decode cache, once. */
void fmt_init(fmt_t *f);
/* Correctly rounded encoding of x, ties to the even encoding. NaN gives the all-ones
 * pattern (any NaN encoding is accepted by the comparisons). */
uint32_t ref_encode(fmt_t *f, double x);
int tsize(ncclDataType_t t);
int is_signed_int(ncclDataType_t t);
int is_int(ncclDataType_t t);
fmt_t *narrow_fmt(ncclDataType_t t);
uint64_t get_bits(ncclDataType_t t, const void *buf, size_t i);
void set_bits(ncclDataType_t t, void *buf, size_t i, uint64_t v);
uint64_t type_mask(ncclDataType_t t);
/* Signed value of an integer bit pattern. */
int64_t sext(ncclDataType_t t, uint64_t v);
/* Value of a floating bit pattern, as double. */
double fval(ncclDataType_t t, uint64_t v);
/* Bits of a value correctly rounded to a floating type. */
uint64_t fbits(ncclDataType_t t, double x);
/* One operation on bit patterns of type t, computed in wider arithmetic and rounded or
 * wrapped once. For floats, (float)(double op) is correctly rounded (53 >= 2 * 24 + 2). */
uint64_t ref_apply(ncclDataType_t t, const ref_op_t *op, int kind, uint64_t a, uint64_t b);
/* Equal bits, or both NaN (a NaN's payload is not specified). */
int same_bits(ncclDataType_t t, uint64_t got, uint64_t want);
/* The next pseudo-random number of a sequence that rnd_seed restarts. */
uint64_t rnd(void);
void rnd_seed(uint64_t seed);
/* Random elements: every bit pattern for integers and narrow floats (so NaN, inf,
 * subnormals and overflow all occur); mostly moderate values for float and double, with
 * some raw patterns for the specials. */
uint64_t random_elem(ncclDataType_t t);

#endif
