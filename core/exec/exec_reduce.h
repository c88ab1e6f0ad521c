/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Element-wise reductions and conversions for every data type on host memory, the
 * arithmetic under the host executor. fp16, bf16 and both fp8 formats compute in wider
 * precision and round to nearest even (fp8 saturates to the largest finite value, NaN
 * stays NaN). Integer sums and products wrap (computed unsigned).
 */
#ifndef BR_EXEC_REDUCE_H_
#define BR_EXEC_REDUCE_H_

#include <stddef.h>
#include <stdint.h>

#include "coll.h"

/* Flags for br_reduce. */
#define BR_REDUCE_POST 0x1 /* apply the final step (SUMPOSTDIV's division) to the result */

/*
 * dst[i] = post( recv[i]  (+)  pre(local[i]) ) for i < count, where (+) is the op, pre()
 * multiplies by the PREMULSUM scalar (identity otherwise) and post() is applied only with
 * BR_REDUCE_POST. recv == NULL means "no received operand" (dst = post(pre(local))),
 * local == NULL means "no local operand" (dst = post(recv)). dst may be the same pointer
 * as recv or local; partial overlap is not allowed. Vectorizable for the common types.
 */
void br_reduce(void *dst, const void *recv, const void *local, size_t count,
               const br_redop_t *op, int flags);

/*
 * dst[i] = the fold of srcs[0][i], ..., srcs[n-1][i] in that order, for i < count: with
 * acc32 == 0, ((s0 (+) s1) (+) s2) ... with every step rounded to the type as br_reduce
 * rounds it (each input pre-multiplied for PREMULSUM, SUMPOSTDIV's division after the
 * last step), the same bits as a chain of br_reduce calls in rank order; with acc32 and a
 * narrow float type (fp16, bf16, fp8), sums and products stay in fp32 (inputs decoded
 * exactly, pre-multiplied in fp32 by the scalar rounded to the type) and each result is
 * rounded to the type once. MAX and MIN ignore acc32 (they round nothing). dst may be one
 * of srcs (the same elements); no other overlap. n >= 1.
 */
void br_reduce_fold(void *dst, const void *const *srcs, int n, size_t count, const br_redop_t *op,
                    int acc32);

/* Make br_reduce use the portable C loops only (portable != 0), or the fastest this CPU
 * supports (0, the default). Both give bit-identical results; this exists so tests cover
 * both. Returns the name of the loops now in use ("portable", "avx2+f16c"). */
const char *br_reduce_use_portable(int portable);

/* Conversions used by the reductions and by tests (round to nearest even). */
float br_half_to_float(uint16_t h);
uint16_t br_float_to_half(float f);
float br_bf16_to_float(uint16_t b);
uint16_t br_float_to_bf16(float f);
float br_e4m3_to_float(uint8_t v);
uint8_t br_float_to_e4m3(float f);
float br_e5m2_to_float(uint8_t v);
uint8_t br_float_to_e5m2(float f);

#endif /* BR_EXEC_REDUCE_H_ */
