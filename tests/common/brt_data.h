/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test data and references for every nccl.h data type and reduction op. Inputs are a
 * pure function of (seed, type, op, nranks, rank, element index), so every rank (and the
 * checker) can rebuild any rank's input. Reduction inputs are chosen so the result is
 * exact whatever order the library combines them in: small integers (or quarters) for
 * sums, products of 1, 2 and -1 with at most two 2s per element, any representable value
 * for max and min. The reference is computed here in exact integer or double arithmetic
 * and rounded to the type with the encoders of brt_fp.h. Only ncclAvg of a float type is
 * inexact (the library may scale each input by a rounded 1/n); it is compared with a
 * bound on the rounding error. Tables are built once and read-only after; thread-safe.
 */
#ifndef BRT_DATA_H_
#define BRT_DATA_H_

#include <stddef.h>
#include <stdint.h>

#include <nccl.h>

/* How a type stores numbers. */
typedef enum { BRT_KIND_SINT, BRT_KIND_UINT, BRT_KIND_FLOAT } brt_kind_t;

typedef struct {
    ncclDataType_t type;
    const char *name;
    size_t size;
    brt_kind_t kind;
    double unit_roundoff; /* floats: 2^-(mantissa bits + 1); integers: 0 */
    double min_subnormal; /* floats: smallest positive value; integers: 0 */
} brt_type_info_t;

/* Test ops: the five built-ins, then a PreMulSum made with ncclScalarHostImmediate. */
enum { BRT_SUM, BRT_PROD, BRT_MAX, BRT_MIN, BRT_AVG, BRT_PREMULSUM, BRT_NOPS };

/* One number of any type: integers exactly, floats as the double they decode to. */
typedef union {
    int64_t i;
    uint64_t u;
    double f;
} brt_val_t;

#define BRT_NTYPES 12

/* The type at position i (0..BRT_NTYPES-1), in nccl.h order. */
ncclDataType_t brt_type_at(int i);
/* Facts about type t, or NULL for a type nccl.h does not define. */
const brt_type_info_t *brt_type_info(ncclDataType_t t);
/* "sum", "prod", "max", "min", "avg", "premulsum". */
const char *brt_op_name(int op);

/* Read or write element i of a buffer of type t. */
brt_val_t brt_load(ncclDataType_t t, const void *buf, size_t i);
void brt_store(ncclDataType_t t, void *buf, size_t i, brt_val_t v);

/* The PreMulSum scalar for type t, as a value and encoded into out (>= 8 bytes). */
brt_val_t brt_premul_scalar(ncclDataType_t t, void *out);

/* Input of `rank` at element i for a reduction with test op `op` over nranks ranks. */
brt_val_t brt_input(ncclDataType_t t, int op, uint32_t seed, int nranks, int rank, size_t i);

/* Fill count elements of buf with rank's inputs, starting at element index first. */
void brt_fill_inputs(ncclDataType_t t, int op, uint32_t seed, int nranks, int rank, void *buf,
                     size_t first, size_t count);

/*
 * Check count reduced elements in got against the reference for element indices
 * first..first+count-1. Returns 0 when all match; otherwise 1 with the first mismatch
 * described in err ("element 5: expected 3 got 4", plus how many differ).
 */
int brt_check_reduced(ncclDataType_t t, int op, uint32_t seed, int nranks, const void *got,
                      size_t first, size_t count, char *err, size_t errlen);

/* Bytes for the data-movement collectives: element i sent by src (to dst, for p2p). */
void brt_fill_bytes(uint32_t seed, int src, int dst, void *buf, size_t first, size_t nbytes);
/* 0 when buf holds exactly those bytes, else 1 with the first differing byte in err. */
int brt_check_bytes(uint32_t seed, int src, int dst, const void *buf, size_t first, size_t nbytes,
                    char *err, size_t errlen);

/* splitmix64, the generator behind everything here. */
uint64_t brt_mix64(uint64_t x);

#endif /* BRT_DATA_H_ */
