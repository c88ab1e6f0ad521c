// SPDX-License-Identifier: Apache-2.0
// The emulated driver's direct kernel with its vector paths (core/device/dev_direct.h), which
// only the CUDA build has otherwise: the same templates compiled for the host, over stand-ins
// for the CUDA types and the one intrinsic they use, so that CI runs the code a GPU runs for
// aligned Broadcast, AllGather and float32/bfloat16/float16 sums. C++ only because the
// vector paths are templates; fake_cuda_stream.c calls fake_direct_run.
#include <cstdint>

// What nvcc provides: 16-byte vectors (aligned as on the GPU, so that UBSan reports a
// misaligned access the GPU would fault on) and single-precision adds rounded to nearest.
struct alignas(16) uint4 {
    unsigned int x, y, z, w;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
static inline uint4 make_uint4(unsigned int x, unsigned int y, unsigned int z, unsigned int w)
{
    return uint4{x, y, z, w};
}
static inline float __fadd_rn(float a, float b)
{
    return a + b; // SSE arithmetic: one rounding to nearest, no contraction (-ffp-contract=off)
}
#define __device__
#define __forceinline__ inline
#define _Thread_local thread_local
#define BR_DEV_DIRECT_VECTOR_EMU 1

#include "dev_direct.h"

// Thread tid of nthr of block b of nb: its share of the collective, vector path first.
extern "C" void fake_direct_run(const br_dev_direct_t *D, int b, int nb, int tid, int nthr);

extern "C" void fake_direct_run(const br_dev_direct_t *D, int b, int nb, int tid, int nthr)
{
    br_dev_emu_enter(tid, nthr, nullptr);
    br_dev_direct_run(D, b, nb);
    br_dev_emu_enter(0, 1, nullptr);
}
