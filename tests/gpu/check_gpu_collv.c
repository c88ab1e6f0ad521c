/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The v-collectives of braid.h on device memory: ranks that are threads of this process
 * on one GPU (ncclCommInitAll, one thread issuing every rank's call in a group), at 1, 3
 * and 4 ranks. braidAllGatherV (also in place), braidReduceScatterV (sum and max, also in
 * place) and braidAlltoAllV with uneven counts, zeros included, and gapped displacements;
 * each rank's output is copied back and checked element by element against a reference
 * computed here, and the gaps between blocks must stay untouched. Without a GPU (or the
 * CUDA runtime) it prints SKIP and exits 77; the emulated driver of tests/cuda-emu runs
 * it without one (cuda_emu_collv). `check_gpu_collv procs` runs the same cases with each
 * rank a process of its own on the GPU (2, 3 and 4; this program started again per rank),
 * which takes the paths of ranks in separate processes (cuda_emu_collv_procs*).
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "braid.h"
#include "gpu_check.h"
#include "nccl.h"

#define MAXR 8
#define GAP 2
#define FILL (-7.0f) /* what the receive buffers hold before a call */

static int failures;

enum { AG, RS, A2A };
static const char *const names[] = {"AllGatherV", "ReduceScatterV", "AlltoAllV"};

/* Elements rank p sends rank q (AlltoAllV), or of rank p's block (q unused); some 0. */
static size_t vcount(int func, int p, int q, int big)
{
    unsigned h = (unsigned)(p * 7 + (func == A2A ? q * 3 : 0) + func) % 5;
    return h == 0 ? 0 : h * (big ? 20011u : 3u);
}

/* Element i of what rank r contributes for rank q: small integers, exact in float. */
static float val(int r, int q, size_t i)
{
    return (float)((r * 5 + q * 3 + (int)i) % 11);
}

typedef struct {
    size_t sc[MAXR], sd[MAXR], rc[MAXR], rd[MAXR], send, recv;
} lay_t;

static void layout(int func, int n, int me, int big, lay_t *l)
{
    size_t s = 0, r = 0;
    for (int p = 0; p < n; p++) {
        l->sc[p] =
            func == AG ? vcount(func, me, 0, big) : vcount(func, func == RS ? p : me, p, big);
        l->rc[p] =
            func == RS ? vcount(func, me, 0, big) : vcount(func, p, func == A2A ? me : 0, big);
        l->sd[p] = func == AG ? 0 : s + GAP;
        s += GAP + l->sc[p];
        l->rd[p] = func == RS ? 0 : r + GAP;
        r += GAP + l->rc[p];
    }
    l->send = func == AG ? l->sc[0] : s;
    l->recv = func == RS ? l->rc[0] : r;
}

/* One case on the ranks first .. first + nl - 1 (comms[l], streams[l] are rank first + l;
 * the other ranks run it in other processes): returns the number of wrong elements (and
 * prints the first). */
static int run_case(ncclComm_t *comms, cudaStream_t *streams, int n, int first, int nl, int func,
                    int inplace, ncclRedOp_t op, int big)
{
    lay_t l[MAXR];
    float *dsend[MAXR], *drecv[MAXR], *host[MAXR], *hsend[MAXR];
    int bad = 0;

    for (int k = 0; k < nl; k++) {
        int r = first + k;
        layout(func, n, r, big, &l[k]);
        size_t rs = l[k].recv + 1, ss = l[k].send + 1;
        host[k] = malloc(rs * sizeof(float));
        hsend[k] = malloc(ss * sizeof(float));
        for (size_t i = 0; i < rs; i++) {
            host[k][i] = FILL;
        }
        for (int q = 0; q < n; q++) {
            for (size_t i = 0; i < l[k].sc[q] && (func != AG || q == 0); i++) {
                hsend[k][l[k].sd[q] + i] = val(r, func == AG ? 0 : q, i);
            }
        }
        CUDA_OK(cudaMalloc((void **)&drecv[k], rs * sizeof(float)));
        CUDA_OK(cudaMemcpy(drecv[k], host[k], rs * sizeof(float), cudaMemcpyHostToDevice));
        if (inplace && func == AG) { /* my block already at rd[me] */
            dsend[k] = drecv[k] + l[k].rd[r];
            CUDA_OK(
                cudaMemcpy(dsend[k], hsend[k], l[k].sc[0] * sizeof(float), cudaMemcpyHostToDevice));
        } else {
            CUDA_OK(cudaMalloc((void **)&dsend[k], ss * sizeof(float)));
            CUDA_OK(cudaMemcpy(dsend[k], hsend[k], ss * sizeof(float), cudaMemcpyHostToDevice));
        }
    }
    /* The copies above land in order with the legacy stream only: the calls' streams do
     * not wait for them. */
    CUDA_OK(cudaDeviceSynchronize());
    ncclResult_t res = ncclGroupStart();
    for (int k = 0; k < nl && res == ncclSuccess; k++) {
        int r = first + k;
        if (func == AG) {
            res = braidAllGatherV(dsend[k], l[k].sc[0], drecv[k], l[k].rc, l[k].rd, ncclFloat,
                                  comms[k], streams[k]);
        } else if (func == RS) {
            float *out = inplace ? dsend[k] + l[k].sd[r] : drecv[k];
            res = braidReduceScatterV(dsend[k], out, l[k].sc, l[k].sd, ncclFloat, op, comms[k],
                                      streams[k]);
        } else {
            res = braidAlltoAllV(dsend[k], l[k].sc, l[k].sd, drecv[k], l[k].rc, l[k].rd, ncclFloat,
                                 comms[k], streams[k]);
        }
    }
    ncclResult_t end = ncclGroupEnd();
    EXPECT(res == ncclSuccess && end == ncclSuccess, "%s on %d ranks (rank %d..): %d/%d: %s",
           names[func], n, first, res, end, ncclGetLastError(NULL));
    for (int k = 0; k < nl; k++) {
        int r = first + k;
        CUDA_OK(cudaStreamSynchronize(streams[k]));
        const float *src = inplace && func == RS ? dsend[k] + l[k].sd[r] : drecv[k];
        CUDA_OK(cudaMemcpy(host[k], src,
                           (l[k].recv + (inplace && func == RS ? 0 : 1)) * sizeof(float),
                           cudaMemcpyDeviceToHost));
        size_t at = 0;
        for (int p = 0; p < n && bad == 0; p++) {
            for (size_t i = 0; i < l[k].rc[p] && (func != RS || p == 0); i++) {
                float want = 0;
                if (func == RS) {
                    for (int j = 0; j < n; j++) {
                        float x = val(j, r, i);
                        want = j == 0 ? x : op == ncclMax ? (x > want ? x : want) : want + x;
                    }
                } else {
                    want = val(p, func == A2A ? r : 0, i);
                }
                float got = host[k][l[k].rd[p] + i];
                if (got != want) {
                    printf("FAIL: %s%s on %d ranks: rank %d block %d element %zu is %g, "
                           "expected %g\n",
                           names[func], inplace ? " in place" : "", n, r, p, i, (double)got,
                           (double)want);
                    bad++;
                    break;
                }
            }
            for (size_t i = at; func != RS && !inplace && i < l[k].rd[p] && bad == 0; i++) {
                if (host[k][i] != FILL) {
                    printf("FAIL: %s on %d ranks: rank %d: gap element %zu written\n", names[func],
                           n, r, i);
                    bad++;
                }
            }
            at = l[k].rd[p] + l[k].rc[p];
        }
        if (!(inplace && func == AG)) {
            cudaFree(dsend[k]);
        }
        cudaFree(drecv[k]);
        free(host[k]);
        free(hsend[k]);
    }
    failures += bad;
    return bad;
}

/* Every case on n ranks, ranks first .. first + nl - 1 here; returns how many cases. */
static int run_all(ncclComm_t *comms, cudaStream_t *streams, int n, int first, int nl)
{
    int cases = 0;
    for (int big = 0; big < 2; big++) {
        for (int func = AG; func <= A2A; func++) {
            for (int inplace = 0; inplace < (func == A2A ? 1 : 2); inplace++) {
                run_case(comms, streams, n, first, nl, func, inplace, ncclSum, big);
                cases++;
            }
        }
        run_case(comms, streams, n, first, nl, RS, 0, ncclMax, big);
        cases++;
    }
    return cases;
}

/* One rank of `procs`, in a process of its own (gpu_procs_run): every case. Returns the
 * exit status (failures). */
static int proc_rank(int rank, int n, const char *hex)
{
    ncclComm_t comm;
    cudaStream_t s;
    if (gpu_rank_init(rank, n, hex, &comm) != 0) {
        return 1;
    }
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int cases = run_all(&comm, &s, n, rank, 1);
    printf("collv procs: rank %d of %d: %d cases, %d failed\n", rank, n, cases, failures);
    EXPECT(ncclCommDestroy(comm) == ncclSuccess, "process rank %d: ncclCommDestroy: %s", rank,
           ncclGetLastError(NULL));
    cudaStreamDestroy(s);
    return failures;
}

int main(int argc, char **argv)
{
    static const int sizes[] = {1, 3, 4};
    if (argc > 1 && !(argc == 2 && !strcmp(argv[1], "procs")) &&
        !(argc == 6 && !strcmp(argv[1], "proc-rank"))) {
        /* A misspelt mode must not pass as the threads' run. */
        fprintf(stderr, "check_gpu_collv: unknown arguments (usage: check_gpu_collv [procs])\n");
        return 2;
    }
    int skip = gpu_or_skip();
    if (skip != 0) {
        return skip;
    }
    if (argc == 6 && !strcmp(argv[1], "proc-rank")) {
        return proc_rank(atoi(argv[3]), atoi(argv[4]), argv[5]) ? 1 : 0;
    }
    if (argc == 2 && !strcmp(argv[1], "procs")) {
        for (int n = 2; n <= 4; n++) {
            int bad = gpu_procs_run("collv", n);
            failures += bad;
            printf("collv: %d processes on one GPU: %s\n", n, bad ? "FAILED" : "passed");
        }
        return failures ? 1 : 0;
    }
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
        int n = sizes[si], devs[MAXR];
        ncclComm_t comms[MAXR];
        cudaStream_t streams[MAXR];
        for (int r = 0; r < n; r++) {
            devs[r] = 0;
        }
        CUDA_OK(cudaSetDevice(0));
        if (ncclCommInitAll(comms, n, devs) != ncclSuccess) {
            printf("FAIL: ncclCommInitAll(%d): %s\n", n, ncclGetLastError(NULL));
            return 1;
        }
        for (int r = 0; r < n; r++) {
            CUDA_OK(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
        }
        int before = failures;
        int cases = run_all(comms, streams, n, 0, n);
        printf("collv: %d rank%s on one GPU: %d cases, %d failed\n", n, n == 1 ? "" : "s", cases,
               failures - before);
        for (int r = 0; r < n; r++) {
            ncclCommDestroy(comms[r]);
            cudaStreamDestroy(streams[r]);
        }
    }
    printf("collv: %d failure%s\n", failures, failures == 1 ? "" : "s");
    return failures ? 1 : 0;
}
