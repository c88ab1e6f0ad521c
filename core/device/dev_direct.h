/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The direct kernel (BR_DEV_DIRECT_KERNEL_NAME): one collective of ranks that are threads of
 * one process on one GPU. They share a context and an address space, so the kernel reads
 * every rank's input where it is and writes every rank's output, with no FIFO in between:
 * the bytes it moves are the collective's own (an AllReduce of N bytes over n ranks reads
 * nN and writes nN), which is the memory-traffic limit. It waits for nothing: the launch
 * stream runs it after every rank's call was reached on its stream, and every rank's stream
 * waits for it (core/exec/cuda/exec_cuda.c). No block waits for another block either, so
 * any grid size is safe, resident or not.
 *
 * Work is cut in 16-byte pieces of a segment, grid-stride over every thread of the launch;
 * one thread makes each output piece from the input pieces it needs, so a call in place
 * (an output that is its rank's input) reads each input piece before anything overwrites it.
 * Segments: AllGather has one per source rank, ReduceScatter one per destination rank, the
 * others one. Reductions fold the ranks' inputs in rank order, as the IPC path's reduce
 * kernel does: every rank gets the same bits, and they are the bits of the host's
 * deterministic fold (br_reduce_fold), in fp32 when acc32 asks for it.
 *
 * On the GPU, when every pointer is 16-byte aligned, Broadcast and AllGather of any type and
 * sums of float32, bfloat16 and float16 take vector paths (16 bytes a thread, the type and
 * operation fixed at compile time, narrow sums rounded at each step as the rings round
 * them); every other case goes through the interpreter's per-piece arithmetic
 * (dev_reduce.h).
 */
#ifndef BR_DEVICE_DEV_DIRECT_H_
#define BR_DEVICE_DEV_DIRECT_H_

#include "dev_prims.h"

#define BR_DEV_DIRECT_MAX 16 /* ranks of one direct collective */

typedef struct {
    const char *in[BR_DEV_DIRECT_MAX]; /* each rank's input (the root's alone: Broadcast) */
    char *out[BR_DEV_DIRECT_MAX];      /* each rank's output (the root's alone: Reduce) */
    /* Bytes of a segment: the whole buffer (AllReduce, Broadcast, Reduce), one rank's input
     * (AllGather), one rank's output (ReduceScatter). */
    uint64_t bytes;
    uint32_t nranks;
    uint32_t func; /* br_func_t */
    uint32_t root;
    uint32_t type;    /* ncclDataType_t */
    uint32_t red;     /* br_red_kind_t */
    uint32_t aligned; /* every pointer, and bytes, a multiple of 16 */
    uint32_t acc32;   /* fold in fp32, round once (br_dev_acc32_applies to type and red) */
    double scalar_f;  /* PreMulSum (the same on every rank) */
    uint64_t scalar_i;
    uint64_t divisor; /* integer Avg */
} br_dev_direct_t;

/* Segments of a direct collective (see above). */
BR_DEV_HD uint32_t br_dev_direct_segments(const br_dev_direct_t *D)
{
    return D->func == BR_FUNC_ALLGATHER || D->func == BR_FUNC_REDUCESCATTER ? D->nranks : 1;
}

/* The reduction of every rank's piece at byte `at` of its input (nb bytes), in rank order. */
BR_DEV_HD br_dev_v2_t br_dev_direct_fold(const br_dev_direct_t *D, const br_dev_red_t *R,
                                         uint64_t at, uint32_t nb)
{
    return D->acc32 ? br_dev_fold_n_acc32(R, D->red, D->in, D->nranks, at, nb)
                    : br_dev_fold_n(R, D->red, D->in, D->nranks, at, nb);
}

/* Piece `p` of segment `seg`: read what it needs, write every output it makes. */
BR_DEV_HD void br_dev_direct_piece(const br_dev_direct_t *D, const br_dev_red_t *R, uint32_t seg,
                                   uint64_t p)
{
    uint64_t off = p * 16;
    uint32_t nb = br_dev_piece_bytes(D->bytes, off, 16);
    br_dev_v2_t v;
    switch (D->func) {
    case BR_FUNC_ALLREDUCE:
        v = br_dev_direct_fold(D, R, off, nb);
        for (uint32_t r = 0; r < D->nranks; r++) {
            br_dev_st_any(D->out[r] + off, v, nb);
        }
        break;
    case BR_FUNC_REDUCE:
        v = br_dev_direct_fold(D, R, off, nb);
        br_dev_st_any(D->out[D->root] + off, v, nb);
        break;
    case BR_FUNC_BROADCAST:
        v = br_dev_ld_any(D->in[D->root] + off, nb);
        for (uint32_t r = 0; r < D->nranks; r++) {
            br_dev_st_any(D->out[r] + off, v, nb);
        }
        break;
    case BR_FUNC_ALLGATHER:
        v = br_dev_ld_any(D->in[seg] + off, nb);
        for (uint32_t r = 0; r < D->nranks; r++) {
            br_dev_st_any(D->out[r] + (uint64_t)seg * D->bytes + off, v, nb);
        }
        break;
    default: /* BR_FUNC_REDUCESCATTER */
        v = br_dev_direct_fold(D, R, (uint64_t)seg * D->bytes + off, nb);
        br_dev_st_any(D->out[seg] + off, v, nb);
        break;
    }
}

/* BR_DEV_DIRECT_VECTOR: the vector paths are compiled (nvcc; and the emulated driver's C++
 * unit, tests/cuda-emu/fake_cuda_direct.cc, with host stand-ins for uint4, float4 and
 * __fadd_rn, so that CI runs them too). */
#if defined(__CUDACC__) || defined(BR_DEV_DIRECT_VECTOR_EMU)
#define BR_DEV_DIRECT_VECTOR 1
#endif

#ifdef BR_DEV_DIRECT_VECTOR
/* The vector paths: every pointer, and the segment, 16-byte aligned; the type and the
 * operation fixed at compile time, one uint4 (16 bytes) a thread at a time. */

/* Lane j (of 8) of a uint4 of 16-bit values, and back. */
static __device__ __forceinline__ uint32_t br_dev_h8_get(const uint4 &v, int j)
{
    uint32_t w = j < 2 ? v.x : j < 4 ? v.y : j < 6 ? v.z : v.w;
    return (j & 1) ? w >> 16 : w & 0xffffu;
}

template <int T> static __device__ __forceinline__ uint4 br_dev_sum16_narrow(uint4 a, uint4 b);

/* a (+)= b over 16 bytes of type T, rounded to T at each step as the rings are. */
template <int T> static __device__ __forceinline__ uint4 br_dev_sum16(uint4 a, uint4 b)
{
    if constexpr (T == ncclFloat32) {
        float4 x = *(float4 *)&a, y = *(float4 *)&b;
        x.x = __fadd_rn(x.x, y.x);
        x.y = __fadd_rn(x.y, y.y);
        x.z = __fadd_rn(x.z, y.z);
        x.w = __fadd_rn(x.w, y.w);
        return *(uint4 *)&x;
    } else {
        return br_dev_sum16_narrow<T>(a, b);
    }
}

/* The 16-bit types' sums, eight lanes. */
template <int T> static __device__ __forceinline__ uint4 br_dev_sum16_narrow(uint4 a, uint4 b)
{
    uint32_t o[4];
    for (int j = 0; j < 8; j += 2) {
        uint32_t lo, hi;
        if (T == ncclBfloat16) {
            lo = br_dev_bf16_st(__fadd_rn(br_dev_bf16_ld(br_dev_h8_get(a, j)),
                                          br_dev_bf16_ld(br_dev_h8_get(b, j))));
            hi = br_dev_bf16_st(__fadd_rn(br_dev_bf16_ld(br_dev_h8_get(a, j + 1)),
                                          br_dev_bf16_ld(br_dev_h8_get(b, j + 1))));
        } else {
            lo = br_dev_f16_st(__fadd_rn(br_dev_f16_ld(br_dev_h8_get(a, j)),
                                         br_dev_f16_ld(br_dev_h8_get(b, j))));
            hi = br_dev_f16_st(__fadd_rn(br_dev_f16_ld(br_dev_h8_get(a, j + 1)),
                                         br_dev_f16_ld(br_dev_h8_get(b, j + 1))));
        }
        o[j / 2] = (lo & 0xffffu) | (hi << 16);
    }
    return make_uint4(o[0], o[1], o[2], o[3]);
}

/* Sums of type T (AllReduce, Reduce, ReduceScatter), rank order, as the generic path. */
template <int T>
static __device__ void br_dev_direct_sum(const br_dev_direct_t *D, uint64_t first, uint64_t stride)
{
    uint64_t pieces = D->bytes / 16, segs = br_dev_direct_segments(D);
    const uint32_t n = D->nranks;
    for (uint64_t i = first; i < pieces * segs; i += stride) {
        uint64_t seg = i / pieces, p = i - seg * pieces;
        uint64_t at = seg * pieces + p;
        uint4 a = ((const uint4 *)D->in[0])[at];
        for (uint32_t k = 1; k < n; k++) {
            a = br_dev_sum16<T>(a, ((const uint4 *)D->in[k])[at]);
        }
        if (D->func == BR_FUNC_ALLREDUCE) {
            for (uint32_t r = 0; r < n; r++) {
                ((uint4 *)D->out[r])[p] = a;
            }
        } else {
            ((uint4 *)D->out[D->func == BR_FUNC_REDUCE ? D->root : seg])[p] = a;
        }
    }
}

/* Broadcast and AllGather: copies, any type. */
static __device__ void br_dev_direct_copy(const br_dev_direct_t *D, uint64_t first, uint64_t stride)
{
    uint64_t pieces = D->bytes / 16, segs = br_dev_direct_segments(D);
    for (uint64_t i = first; i < pieces * segs; i += stride) {
        uint64_t seg = i / pieces, p = i - seg * pieces;
        uint32_t src = D->func == BR_FUNC_BROADCAST ? D->root : (uint32_t)seg;
        uint4 v = ((const uint4 *)D->in[src])[p];
        for (uint32_t r = 0; r < D->nranks; r++) {
            ((uint4 *)D->out[r])[seg * pieces + p] = v;
        }
    }
}

/* The vector path for D, if it has one; returns 0 when it has none. */
static __device__ __forceinline__ int br_dev_direct_vector(const br_dev_direct_t *D, uint64_t first,
                                                           uint64_t stride)
{
    if (!D->aligned) {
        return 0;
    }
    if (D->func == BR_FUNC_BROADCAST || D->func == BR_FUNC_ALLGATHER) {
        br_dev_direct_copy(D, first, stride);
        return 1;
    }
    if (D->red != BR_RED_SUM || D->acc32) {
        return 0;
    }
    switch (D->type) {
    case ncclFloat32: br_dev_direct_sum<ncclFloat32>(D, first, stride); return 1;
    case ncclBfloat16: br_dev_direct_sum<ncclBfloat16>(D, first, stride); return 1;
    case ncclFloat16: br_dev_direct_sum<ncclFloat16>(D, first, stride); return 1;
    default: return 0;
    }
}
#endif

/* Block b of nb: its pieces of the collective (every thread of the block, grid-stride). */
BR_DEV_HD void br_dev_direct_run(const br_dev_direct_t *D, int b, int nb)
{
    uint64_t first = (uint64_t)b * (uint64_t)BR_DEV_NTHR + (uint64_t)BR_DEV_TID;
    uint64_t stride = (uint64_t)nb * (uint64_t)BR_DEV_NTHR;
#ifdef BR_DEV_DIRECT_VECTOR
    if (br_dev_direct_vector(D, first, stride)) {
        return;
    }
#endif
    br_dev_red_t R;
    br_dev_red_of(&R, D->type, D->red, D->scalar_f, D->scalar_i, NULL, D->divisor);
    uint64_t pieces = (D->bytes + 15) / 16, segs = br_dev_direct_segments(D);
    for (uint64_t i = first; i < pieces * segs; i += stride) {
        uint64_t seg = i / pieces;
        br_dev_direct_piece(D, &R, (uint32_t)seg, i - seg * pieces);
    }
}

#endif /* BR_DEVICE_DEV_DIRECT_H_ */
