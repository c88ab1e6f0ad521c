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
 * kernel does: every rank gets the same bits.
 *
 * On the GPU a float32 sum whose pointers are all 16-byte aligned takes a vector path of
 * float4 loads and stores with the type and operation fixed outside the loop; every other
 * type and operation goes through the interpreter's per-piece arithmetic (dev_reduce.h).
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
    int kind = (int)D->red;
    int mid = kind == BR_RED_PREMULSUM    ? BR_DEV_F_PREMULSUM
              : kind == BR_RED_SUMPOSTDIV ? BR_DEV_F_SUM
                                          : kind;
    int last = kind == BR_RED_SUMPOSTDIV ? BR_DEV_F_SUMPOSTDIV : mid;
    int words = nb > 8 ? 2 : 1;
    br_dev_v2_t v = br_dev_ld_any(D->in[0] + at, nb);
    if (kind == BR_RED_PREMULSUM) {
        v = br_dev_piece_op(R, BR_DEV_F_PRE1, v, v, words);
    }
    for (uint32_t k = 1; k < D->nranks; k++) {
        v = br_dev_piece_op(R, k + 1 == D->nranks ? last : mid, v,
                            br_dev_ld_any(D->in[k] + at, nb), words);
    }
    return v;
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

#ifdef __CUDACC__
/* float32 sum, every pointer 16-byte aligned: four floats a thread at a time, the type and
 * the operation known at compile time. Returns 0 when the call is not one for it. */
static __device__ __forceinline__ int br_dev_direct_f32sum(const br_dev_direct_t *D, uint64_t first,
                                                           uint64_t stride)
{
    if (!D->aligned || D->type != ncclFloat32 || D->red != BR_RED_SUM ||
        (D->func != BR_FUNC_ALLREDUCE && D->func != BR_FUNC_REDUCESCATTER &&
         D->func != BR_FUNC_REDUCE)) {
        return 0;
    }
    uint64_t pieces = D->bytes / 16, segs = br_dev_direct_segments(D);
    const uint32_t n = D->nranks;
    for (uint64_t i = first; i < pieces * segs; i += stride) {
        uint64_t seg = i / pieces, p = i - seg * pieces;
        uint64_t at = seg * D->bytes / 16 + p;
        float4 a = ((const float4 *)D->in[0])[at];
        for (uint32_t k = 1; k < n; k++) {
            float4 b = ((const float4 *)D->in[k])[at];
            a.x += b.x;
            a.y += b.y;
            a.z += b.z;
            a.w += b.w;
        }
        if (D->func == BR_FUNC_ALLREDUCE) {
            for (uint32_t r = 0; r < n; r++) {
                ((float4 *)D->out[r])[p] = a;
            }
        } else {
            ((float4 *)D->out[D->func == BR_FUNC_REDUCE ? D->root : seg])[p] = a;
        }
    }
    return 1;
}
#endif

/* Block b of nb: its pieces of the collective (every thread of the block, grid-stride). */
BR_DEV_HD void br_dev_direct_run(const br_dev_direct_t *D, int b, int nb)
{
    uint64_t first = (uint64_t)b * (uint64_t)BR_DEV_NTHR + (uint64_t)BR_DEV_TID;
    uint64_t stride = (uint64_t)nb * (uint64_t)BR_DEV_NTHR;
#ifdef __CUDACC__
    if (br_dev_direct_f32sum(D, first, stride)) {
        return;
    }
#endif
    br_dev_work_t w;
    br_dev_red_t R;
    w.type = D->type;
    w.red = D->red;
    w.scalar_f = D->scalar_f;
    w.scalar_i = D->scalar_i;
    w.scalar_dev = NULL;
    w.divisor = D->divisor;
    br_dev_red_init(&R, &w);
    uint64_t pieces = (D->bytes + 15) / 16, segs = br_dev_direct_segments(D);
    for (uint64_t i = first; i < pieces * segs; i += stride) {
        uint64_t seg = i / pieces;
        br_dev_direct_piece(D, &R, (uint32_t)seg, i - seg * pieces);
    }
}

#endif /* BR_DEVICE_DEV_DIRECT_H_ */
