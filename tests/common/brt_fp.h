/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test-side encoders and decoders for the narrow float types of nccl.h: IEEE binary16,
 * bfloat16, and the OCP 8-bit formats E4M3 (FN: no infinities, one NaN pattern per sign,
 * largest finite 448) and E5M2 (IEEE-like: infinities and NaNs, largest finite 57344).
 * They are written independently of the library, so a reference computed with them does
 * not share the library's conversion bugs. Encoding is round-to-nearest-even from double,
 * with subnormals; values beyond the largest finite one become infinity (binary16,
 * bfloat16, E5M2) or NaN (E4M3). Every function is pure and thread-safe.
 */
#ifndef BRT_FP_H_
#define BRT_FP_H_

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

/* Round x to the nearest binary16 value (ties to even) and return its bits. */
uint16_t brt_fp16_from_double(double x);
/* The exact value of binary16 bits h. */
double brt_fp16_to_double(uint16_t h);

/* Round x to the nearest bfloat16 value (ties to even) and return its bits. */
uint16_t brt_bf16_from_double(double x);
/* The exact value of bfloat16 bits h. */
double brt_bf16_to_double(uint16_t h);

/* Round x to the nearest FP8 E4M3 (FN) value (ties to even) and return its bits. */
uint8_t brt_e4m3_from_double(double x);
/* The exact value of E4M3 bits b (NaN for 0x7f and 0xff). */
double brt_e4m3_to_double(uint8_t b);

/* Round x to the nearest FP8 E5M2 value (ties to even) and return its bits. */
uint8_t brt_e5m2_from_double(double x);
/* The exact value of E5M2 bits b. */
double brt_e5m2_to_double(uint8_t b);

/* The floating-point types of nccl.h as doubles: bytes of one element; element i of buf
 * set to x rounded to the type (to nearest, ties to even), and read back exactly. */
size_t brt_fp_size(ncclDataType_t t);
void brt_fp_put(ncclDataType_t t, void *buf, size_t i, double x);
double brt_fp_get(ncclDataType_t t, const void *buf, size_t i);

#endif /* BRT_FP_H_ */
