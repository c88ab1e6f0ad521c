/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Deterministic reductions and fp32 accumulation (issue 38) on device buffers of ranks that
 * are threads of one process: 4 ranks on one GPU (ncclCommInitAll, one thread issuing
 * every rank's call in a group), where they run on the direct kernel. For float32,
 * bfloat16, float16 and both fp8 types, sums and averages, AllReduce (in place),
 * ReduceScatter and Reduce, with BRAID_OPT_DETERMINISTIC and (narrow types)
 * BRAID_OPT_ACCUMULATE_FP32 per call, on inputs whose sums depend on their order:
 *  - the device result has the bits of the same call on host buffers of the same
 *    communicators (the host's owner fold, checked against references in check_mp_det);
 *  - float32 deterministic sums are also checked against this file's own rank-order fold,
 *    and the fp32-accumulated sums against the exact sum rounded once;
 *  - the option at 0 and an integer sum with it at 1 still run and sum right.
 * With BRAID_CUDA_DIRECT=0 (no direct kernel) such a call is refused with ncclInvalidUsage
 * and a message that says why. Without a GPU (or the CUDA runtime) it prints SKIP and exits
 * 77; the emulated driver of tests/cuda-emu runs it without one (cuda_emu_det*).
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "braid.h"
#include "brt_data.h"
#include "brt_fp.h"
#include "gpu_check.h"
#include "nccl.h"

#define NR 4
#define BLOCK 1027 /* elements of one rank's ReduceScatter block: odd, not 16-byte whole */
#define COUNT (NR * BLOCK)

static int failures;
static char first_msg[1024]; /* ncclGetLastError after the group's first failed call */

enum { F_ALLREDUCE, F_REDUCESCATTER, F_REDUCE, NFN };
static const char *const fn_names[] = {"AllReduce", "ReduceScatter", "Reduce"};

/* 32 well-mixed bits of x. */
static uint32_t mix(uint32_t x)
{
    return (uint32_t)(brt_mix64(x) >> 32);
}

/* Input element i of rank r, as type t holds it: large values of both signs beside small
 * ones, so that sums rounded at each step depend on their order (float32: 3e7 beside
 * thirds; the narrow types: up to 84 beside eighths, which sum exactly in fp32 and within
 * fp8 e4m3's range). */
static double input(ncclDataType_t t, int r, size_t i)
{
    uint32_t m = mix((uint32_t)(r * 7919) ^ (uint32_t)i * 2654435761u);
    double mant = 1.0 + (double)(m >> 8 & 3) / 4.0;
    double big = t == ncclFloat32 ? 3.0e7 : 48.0;
    double small = t == ncclFloat32 ? mant / 3.0 : mant / 8.0;
    double v = (m & 3) == 0 ? big * mant : (m & 3) == 1 ? -big * mant / 1.5 : small;
    char cell[4];
    brt_fp_put(t, cell, 0, v);
    return brt_fp_get(t, cell, 0);
}

/* A per-call config holding one Braid option. */
static ncclCollConfig_t *cfg_with(ncclCollConfig_t *c, ncclConfigExt_t *e, int opt, int val)
{
    ncclCollConfig_t init = NCCL_COLLCONFIG_INITIALIZER;
    *c = init;
    memset(e, 0, sizeof(*e));
    e->key.vendorId = BRAID_VENDOR_ID;
    e->key.optionId = opt;
    e->val.i = val;
    c->ext = e;
    return c;
}

/* One grouped call over every rank: AllReduce in place on buf, ReduceScatter from buf into
 * out, Reduce from buf into out at root 0. Returns the first failure. */
static ncclResult_t call(int fn, ncclComm_t *comms, cudaStream_t *st, void **buf, void **out,
                         ncclDataType_t t, ncclRedOp_t op, ncclCollConfig_t *c)
{
    ncclResult_t res = ncclGroupStart(), first = ncclSuccess;
    first_msg[0] = '\0';
    for (int r = 0; r < NR; r++) {
        switch (fn) {
        case F_ALLREDUCE:
            res = ncclAllReduceConfig(buf[r], buf[r], COUNT, t, op, comms[r], st[r], c);
            break;
        case F_REDUCESCATTER:
            res = ncclReduceScatterConfig(buf[r], out[r], BLOCK, t, op, comms[r], st[r], c);
            break;
        default: res = ncclReduceConfig(buf[r], out[r], COUNT, t, op, 0, comms[r], st[r], c);
        }
        if (first == ncclSuccess && res != ncclSuccess) {
            first = res;
            snprintf(first_msg, sizeof(first_msg), "%s", ncclGetLastError(comms[r]));
        }
    }
    res = ncclGroupEnd();
    return first != ncclSuccess ? first : res;
}

/* Elements of rank r's result, and where its first one is in the full reduction. */
static size_t result_count(int fn, int r, size_t *first)
{
    *first = fn == F_REDUCESCATTER ? (size_t)r * BLOCK : 0;
    return fn == F_REDUCESCATTER ? BLOCK : fn == F_REDUCE && r != 0 ? 0 : COUNT;
}

/* This file's references for element e: the rank-order sum with every step rounded to
 * float32, and the exact sum rounded once to t (what fp32 accumulation gives, since the
 * narrow types' inputs sum exactly in fp32). */
static double ref_steps_f32(size_t e)
{
    float acc = (float)input(ncclFloat32, 0, e);
    for (int r = 1; r < NR; r++) {
        acc = acc + (float)input(ncclFloat32, r, e);
    }
    return acc;
}

static double ref_once(ncclDataType_t t, size_t e)
{
    double s = 0;
    char cell[4];
    for (int r = 0; r < NR; r++) {
        s += input(t, r, e);
    }
    brt_fp_put(t, cell, 0, s);
    return brt_fp_get(t, cell, 0);
}

/* Run one case on device buffers and on host buffers; compare. */
static void one_case(ncclComm_t *comms, cudaStream_t *st, void **dbuf, void **dout, int fn,
                     ncclDataType_t t, ncclRedOp_t op, int opt)
{
    const size_t ts = brt_fp_size(t), bytes = COUNT * ts;
    void *hbuf[NR], *hout[NR], *dres[NR];
    char what[160];
    ncclCollConfig_t c;
    ncclConfigExt_t x;
    snprintf(what, sizeof(what), "%s type %d op %d option %d", fn_names[fn], (int)t, (int)op,
             opt);
    for (int r = 0; r < NR; r++) {
        hbuf[r] = malloc(bytes);
        hout[r] = calloc(COUNT, ts);
        dres[r] = calloc(COUNT, ts);
        for (size_t i = 0; i < COUNT; i++) {
            brt_fp_put(t, hbuf[r], i, input(t, r, i));
        }
        CUDA_OK(cudaMemcpy(dbuf[r], hbuf[r], bytes, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(dout[r], hout[r], bytes, cudaMemcpyHostToDevice)); /* zeros */
    }
    CUDA_OK(cudaDeviceSynchronize()); /* the copies land before the non-blocking streams */
    ncclResult_t res = call(fn, comms, st, dbuf, dout, t, op, cfg_with(&c, &x, opt, 1));
    EXPECT(res == ncclSuccess, "%s on device buffers: %d, %s", what, (int)res, first_msg);
    res = call(fn, comms, st, hbuf, hout, t, op, cfg_with(&c, &x, opt, 1));
    EXPECT(res == ncclSuccess, "%s on host buffers: %d, %s", what, (int)res, first_msg);
    for (int r = 0; r < NR; r++) {
        CUDA_OK(cudaStreamSynchronize(st[r]));
        CUDA_OK(cudaMemcpy(dres[r], fn == F_ALLREDUCE ? dbuf[r] : dout[r], bytes,
                           cudaMemcpyDeviceToHost));
        const void *hres = fn == F_ALLREDUCE ? hbuf[r] : hout[r];
        size_t first, n = result_count(fn, r, &first);
        int differ = 0, off_ref = 0;
        for (size_t i = 0; i < n; i++) {
            differ += memcmp((char *)dres[r] + i * ts, (const char *)hres + i * ts, ts) != 0;
            if (op == ncclSum && t == ncclFloat32 && opt == BRAID_OPT_DETERMINISTIC) {
                off_ref += brt_fp_get(t, dres[r], i) != ref_steps_f32(first + i);
            } else if (op == ncclSum && opt == BRAID_OPT_ACCUMULATE_FP32) {
                off_ref += brt_fp_get(t, dres[r], i) != ref_once(t, first + i);
            }
        }
        EXPECT(differ == 0, "%s: rank %d: %d of %zu elements differ between device and host",
               what, r, differ, n);
        EXPECT(off_ref == 0, "%s: rank %d: %d of %zu elements differ from the reference", what,
               r, off_ref, n);
    }
    for (int r = 0; r < NR; r++) {
        free(hbuf[r]);
        free(hout[r]);
        free(dres[r]);
    }
}

/* BRAID_CUDA_DIRECT=0: the clique has no kernel that folds in rank order. */
static void refused(ncclComm_t *comms, cudaStream_t *st, void **dbuf, void **dout)
{
    ncclCollConfig_t c;
    ncclConfigExt_t x;
    for (int opt = BRAID_OPT_DETERMINISTIC; opt <= BRAID_OPT_ACCUMULATE_FP32; opt++) {
        for (int fn = 0; fn < NFN; fn++) {
            ncclResult_t res = call(fn, comms, st, dbuf, dout, ncclBfloat16, ncclSum,
                                    cfg_with(&c, &x, opt, 1));
            EXPECT(res == ncclInvalidUsage && strstr(first_msg, "BRAID_CUDA_DIRECT=0"),
                   "%s with option %d and BRAID_CUDA_DIRECT=0: returned %d, \"%s\"",
                   fn_names[fn], opt, (int)res, first_msg);
        }
    }
}

/* The option at 0 on floats, and at 1 on integers (no fold needed): plain sums. */
static void plain(ncclComm_t *comms, cudaStream_t *st, void **dbuf)
{
    ncclCollConfig_t c;
    ncclConfigExt_t x;
    for (int integer = 0; integer < 2; integer++) {
        ncclDataType_t t = integer ? ncclInt32 : ncclFloat32;
        for (int r = 0; r < NR; r++) {
            float f[COUNT];
            int32_t k[COUNT];
            for (int i = 0; i < COUNT; i++) {
                f[i] = (float)(r + 1);
                k[i] = r + 1;
            }
            CUDA_OK(cudaMemcpy(dbuf[r], integer ? (void *)k : (void *)f, sizeof(f),
                               cudaMemcpyHostToDevice));
        }
        CUDA_OK(cudaDeviceSynchronize());
        ncclResult_t res = call(F_ALLREDUCE, comms, st, dbuf, NULL, t, ncclSum,
                                cfg_with(&c, &x, BRAID_OPT_DETERMINISTIC, integer));
        EXPECT(res == ncclSuccess, "%s AllReduce with the option at %d: %s",
               integer ? "int32" : "float32", integer, first_msg);
        for (int r = 0; r < NR; r++) {
            float f[COUNT];
            int32_t k[COUNT];
            CUDA_OK(cudaStreamSynchronize(st[r]));
            CUDA_OK(cudaMemcpy(integer ? (void *)k : (void *)f, dbuf[r], sizeof(f),
                               cudaMemcpyDeviceToHost));
            int bad = 0;
            for (int i = 0; i < COUNT; i++) {
                bad += integer ? k[i] != 10 : f[i] != 10.0f;
            }
            EXPECT(bad == 0, "%s: rank %d: %d of %d elements are not 10",
                   integer ? "int32" : "float32", r, bad, COUNT);
        }
    }
}

int main(void)
{
    static const ncclDataType_t types[] = {ncclFloat32, ncclBfloat16, ncclFloat16,
                                           ncclFloat8e4m3, ncclFloat8e5m2};
    int devs[NR] = {0};
    int skip = gpu_or_skip();
    if (skip != 0) {
        return skip;
    }
    const char *direct = getenv("BRAID_CUDA_DIRECT");
    int no_direct = direct != NULL && strcmp(direct, "0") == 0;
    ncclComm_t comms[NR];
    cudaStream_t st[NR];
    void *dbuf[NR], *dout[NR];
    CUDA_OK(cudaSetDevice(0));
    if (ncclCommInitAll(comms, NR, devs) != ncclSuccess) {
        printf("FAIL: ncclCommInitAll(%d): %s\n", NR, ncclGetLastError(NULL));
        return 1;
    }
    for (int r = 0; r < NR; r++) {
        CUDA_OK(cudaStreamCreateWithFlags(&st[r], cudaStreamNonBlocking));
        CUDA_OK(cudaMalloc(&dbuf[r], COUNT * sizeof(float)));
        CUDA_OK(cudaMalloc(&dout[r], COUNT * sizeof(float)));
    }
    if (no_direct) {
        refused(comms, st, dbuf, dout);
    } else {
        for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
            for (int opt = BRAID_OPT_DETERMINISTIC; opt <= BRAID_OPT_ACCUMULATE_FP32; opt++) {
                if (opt == BRAID_OPT_ACCUMULATE_FP32 && types[ti] == ncclFloat32) {
                    continue; /* float32 sums are fp32 already */
                }
                for (int fn = 0; fn < NFN; fn++) {
                    one_case(comms, st, dbuf, dout, fn, types[ti], ncclSum, opt);
                    one_case(comms, st, dbuf, dout, fn, types[ti], ncclAvg, opt);
                }
            }
        }
    }
    plain(comms, st, dbuf);
    for (int r = 0; r < NR; r++) {
        ncclCommDestroy(comms[r]);
        cudaFree(dbuf[r]);
        cudaFree(dout[r]);
        cudaStreamDestroy(st[r]);
    }
    printf("det: %d ranks on one GPU%s: %d failed\n", NR, no_direct ? " (no direct kernel)" : "",
           failures);
    return failures ? 1 : 0;
}
