/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Deterministic reductions and fp32 accumulation (issue 38) on device buffers of ranks that
 * are threads of one process (ncclCommInitAll on one GPU, one thread issuing every rank's
 * call in a group): the CUDA executor's kernels do not fold that way, so a float reduction
 * that asks for either (per-call option) is refused with ncclInvalidUsage and a message
 * that says so, whatever the collective; the same call with the option at 0, and an integer
 * reduction with it at 1 (integer sums need no fold), run and give the right sums. Without
 * a GPU (or the CUDA runtime) it prints SKIP and exits 77; the emulated driver of
 * tests/cuda-emu runs it without one (cuda_emu_det).
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "braid.h"
#include "gpu_check.h"
#include "nccl.h"

#define NR 2
#define COUNT 1000

static int failures;
static char first_msg[1024]; /* ncclGetLastError after the group's first failed call */

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

/* One grouped AllReduce / ReduceScatter / Reduce over both ranks; returns the first result. */
static ncclResult_t call(int fn, ncclComm_t *comms, cudaStream_t *st, void **buf, ncclDataType_t t,
                         ncclCollConfig_t *c)
{
    ncclResult_t res = ncclGroupStart(), first = ncclSuccess;
    first_msg[0] = '\0';
    for (int r = 0; r < NR; r++) {
        switch (fn) {
        case 0:
            res = ncclAllReduceConfig(buf[r], buf[r], COUNT, t, ncclSum, comms[r], st[r], c);
            break;
        case 1:
            res =
                ncclReduceScatterConfig(buf[r], buf[r], COUNT / NR, t, ncclSum, comms[r], st[r], c);
            break;
        default: res = ncclReduceConfig(buf[r], buf[r], COUNT, t, ncclSum, 0, comms[r], st[r], c);
        }
        if (first == ncclSuccess && res != ncclSuccess) {
            first = res;
            snprintf(first_msg, sizeof(first_msg), "%s", ncclGetLastError(comms[r]));
        }
    }
    res = ncclGroupEnd();
    return first != ncclSuccess ? first : res;
}

/* Fill both ranks' buffers with rank r's values (r + 1 everywhere) as type t. */
static void fill(void **buf, ncclDataType_t t)
{
    for (int r = 0; r < NR; r++) {
        float f[COUNT];
        int32_t k[COUNT];
        for (int i = 0; i < COUNT; i++) {
            f[i] = (float)(r + 1);
            k[i] = r + 1;
        }
        CUDA_OK(cudaMemcpy(buf[r], t == ncclFloat32 ? (void *)f : (void *)k, sizeof(f),
                           cudaMemcpyHostToDevice));
    }
    /* The copies return before their bytes land; the non-blocking streams do not wait. */
    CUDA_OK(cudaDeviceSynchronize());
}

/* After an AllReduce of fill()'s values, every element of every rank is 1 + 2 = 3. */
static void expect_sum(void **buf, cudaStream_t *st, ncclDataType_t t, const char *what)
{
    for (int r = 0; r < NR; r++) {
        float f[COUNT];
        int32_t k[COUNT];
        CUDA_OK(cudaStreamSynchronize(st[r]));
        CUDA_OK(cudaMemcpy(t == ncclFloat32 ? (void *)f : (void *)k, buf[r], sizeof(f),
                           cudaMemcpyDeviceToHost));
        int bad = 0;
        for (int i = 0; i < COUNT; i++) {
            bad += t == ncclFloat32 ? f[i] != 3.0f : k[i] != 3;
        }
        EXPECT(bad == 0, "%s: rank %d: %d of %d elements are not 3", what, r, bad, COUNT);
    }
}

int main(void)
{
    static const char *const fns[] = {"AllReduce", "ReduceScatter", "Reduce"};
    int ndev = 0, devs[NR] = {0, 0};
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        printf("SKIP: no GPU here (%s): the CUDA executor's tests need one\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 77;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    ncclComm_t comms[NR];
    cudaStream_t st[NR];
    void *buf[NR];
    CUDA_OK(cudaSetDevice(0));
    if (ncclCommInitAll(comms, NR, devs) != ncclSuccess) {
        printf("FAIL: ncclCommInitAll(%d): %s\n", NR, ncclGetLastError(NULL));
        return 1;
    }
    for (int r = 0; r < NR; r++) {
        CUDA_OK(cudaStreamCreateWithFlags(&st[r], cudaStreamNonBlocking));
        CUDA_OK(cudaMalloc(&buf[r], COUNT * sizeof(float)));
    }
    ncclCollConfig_t c;
    ncclConfigExt_t x;
    for (int opt = BRAID_OPT_DETERMINISTIC; opt <= BRAID_OPT_ACCUMULATE_FP32; opt++) {
        for (int fn = 0; fn < 3; fn++) {
            ncclDataType_t t = opt == BRAID_OPT_DETERMINISTIC ? ncclFloat32 : ncclBfloat16;
            ncclResult_t res = call(fn, comms, st, buf, t, cfg_with(&c, &x, opt, 1));
            const char *msg = first_msg;
            EXPECT(res == ncclInvalidUsage && strstr(msg, "not implemented for device buffers"),
                   "%s with option %d: returned %d, \"%s\"", fns[fn], opt, (int)res, msg);
        }
    }
    /* The communicators still work: the option at 0, and integers with it at 1. */
    fill(buf, ncclFloat32);
    EXPECT(call(0, comms, st, buf, ncclFloat32, cfg_with(&c, &x, BRAID_OPT_DETERMINISTIC, 0)) ==
               ncclSuccess,
           "AllReduce with BRAID_OPT_DETERMINISTIC 0: %s", ncclGetLastError(comms[0]));
    expect_sum(buf, st, ncclFloat32, "float32, option 0");
    fill(buf, ncclInt32);
    EXPECT(call(0, comms, st, buf, ncclInt32, cfg_with(&c, &x, BRAID_OPT_DETERMINISTIC, 1)) ==
               ncclSuccess,
           "int32 AllReduce with BRAID_OPT_DETERMINISTIC 1: %s", ncclGetLastError(comms[0]));
    expect_sum(buf, st, ncclInt32, "int32, option 1");
    for (int r = 0; r < NR; r++) {
        ncclCommDestroy(comms[r]);
        cudaFree(buf[r]);
        cudaStreamDestroy(st[r]);
    }
    printf("det: %d ranks on one GPU: %d failed\n", NR, failures);
    return failures ? 1 : 0;
}
