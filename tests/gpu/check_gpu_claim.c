/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The `claim` section of check_gpu (emulated driver only): the FIFO kernel fails on both
 * GPUs of one clique, and the error every rank gets is one device's whole report. Four
 * ranks, 0 and 1 on GPU 0, 2 and 3 on GPU 1, one thread, one grouped AllReduce on one
 * channel of the ring 0 1 2 3. Two ways, by the emulator's fault injection:
 *
 *   BRAID_FAKE_CUDA_STALL_RANKS=0,2  the blocks of ranks 0 and 2 start only once the
 *       others have ended: rank 1 (GPU 0) and rank 3 (GPU 1) wait for them from the first
 *       step and time out (BRAID_CUDA_WAIT_TIMEOUT). Checked: every rank's call fails with
 *       ncclTimeout and the same message, exactly one timeout report, naming rank 1 with
 *       peer 0 or rank 3 with peer 2 (what each waits for), at step 0. Which GPU's comes
 *       first is timing; in the emulator the second seldom gets to report at all (it sees
 *       the first one's stop word before its own timeout).
 *   BRAID_FAKE_CUDA_BAD_RANKS=1,3    the first work item of rank 1's and rank 3's blocks is
 *       of no known kind, and both blocks start together: both GPUs' kernels fail in the
 *       same instant (BR_DEV_BADWORK), each into its own claim and report, every time.
 *       Checked: every rank fails with ncclInternalError and the same message, exactly one
 *       report (rank 1 or rank 3), and the log (NCCL_DEBUG_FILE, %p) says the other GPU's
 *       kernel failed too, naming the other rank: both devices did report.
 *
 * What it cannot show: the emulator's atomics are the host's, always atomic, so a claim
 * shared by the two GPUs would keep one report here too (the BAD_RANKS log check would
 * fail: one winner). The emulated driver refuses that layout at launch instead
 * (fake_cuda_launch.c, check_fifo_args: a FIFO kernel's claim must be in the memory of the
 * device it runs on), as a GPU-scope atomicCAS on a peer's memory is not atomic with that
 * peer's own (docs/cuda.md).
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_gpu.h"
#include "gpu_check.h"
#include "nccl.h"

#define CLAIM_RANKS 4
#define CLAIM_COUNT 4096

/* Lines of the log file (NCCL_DEBUG_FILE, its %p this process) holding `what`; the first
 * such line into line (len bytes). -1: no log file. */
static int log_lines(const char *what, char *line, size_t len)
{
    const char *f = getenv("NCCL_DEBUG_FILE");
    char path[512], buf[1024];
    size_t at = 0;
    int n = 0;
    for (const char *p = f != NULL ? f : ""; *p != '\0' && at < sizeof(path) - 24; p++) {
        if (p[0] == '%' && p[1] == 'p') {
            at += (size_t)snprintf(path + at, sizeof(path) - at, "%d", (int)getpid());
            p++;
        } else {
            path[at++] = *p;
        }
    }
    path[at] = '\0';
    FILE *fp = at > 0 ? fopen(path, "r") : NULL;
    if (fp == NULL) {
        return -1;
    }
    while (fgets(buf, sizeof(buf), fp) != NULL) {
        if (strstr(buf, what) != NULL && n++ == 0) {
            snprintf(line, len, "%s", buf);
        }
    }
    fclose(fp);
    unlink(path);
    return n;
}

void section_claim(void)
{
    ncclComm_t comms[CLAIM_RANKS];
    cudaStream_t s[CLAIM_RANKS];
    float *buf[CLAIM_RANKS];
    int devs[CLAIM_RANKS], ndev = 0;
    const char *stall = getenv("BRAID_FAKE_CUDA_STALL_RANKS");
    const char *bad = getenv("BRAID_FAKE_CUDA_BAD_RANKS");
    int timeout = stall != NULL && strcmp(stall, "0,2") == 0;
    int badwork = bad != NULL && strcmp(bad, "1,3") == 0;

    CUDA_OK(cudaGetDeviceCount(&ndev));
    if (ndev < 2 || timeout == badwork) {
        printf("claim: SKIP: needs two GPUs of the emulated driver and one of "
               "BRAID_FAKE_CUDA_STALL_RANKS=0,2 or BRAID_FAKE_CUDA_BAD_RANKS=1,3 (%d GPUs)\n",
               ndev);
        return;
    }
    for (int r = 0; r < CLAIM_RANKS; r++) {
        devs[r] = r / 2;
    }
    CUDA_OK(cudaSetDevice(0));
    if (ncclCommInitAll(comms, CLAIM_RANKS, devs) != ncclSuccess) {
        printf("FAIL: ncclCommInitAll over 2 GPUs: %s\n", ncclGetLastError(NULL));
        exit(1);
    }
    for (int r = 0; r < CLAIM_RANKS; r++) {
        CUDA_OK(cudaSetDevice(devs[r]));
        CUDA_OK(cudaStreamCreateWithFlags(&s[r], cudaStreamNonBlocking));
        CUDA_OK(cudaMalloc((void **)&buf[r], CLAIM_COUNT * sizeof(float)));
        CUDA_OK(cudaMemsetAsync(buf[r], 0, CLAIM_COUNT * sizeof(float), s[r]));
    }
    ncclResult_t res[CLAIM_RANKS], end;
    ncclGroupStart();
    for (int r = 0; r < CLAIM_RANKS; r++) {
        res[r] = ncclAllReduce(buf[r], buf[r], CLAIM_COUNT, ncclFloat, ncclSum, comms[r], s[r]);
    }
    end = ncclGroupEnd();
    EXPECT(end == ncclSuccess, "the group's launch returned %d: %s", end,
           ncclGetLastError(comms[0]));
    /* The kernels end: ranks 2 and 3 time out, then the held blocks run and see the stop. */
    for (int r = 0; r < CLAIM_RANKS; r++) {
        EXPECT(res[r] == ncclSuccess, "rank %d's AllReduce returned %d before the launch", r,
               res[r]);
        CUDA_OK(cudaSetDevice(devs[r]));
        CUDA_OK(cudaStreamSynchronize(s[r]));
    }
    ncclResult_t want = timeout ? ncclTimeout : ncclInternalError;
    char first[512] = "";
    for (int r = 0; r < CLAIM_RANKS; r++) {
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(comms[r], &async);
        EXPECT(async == want, "rank %d: async error %d, not %d", r, async, want);
        const char *m = ncclGetLastError(comms[r]);
        if (r == 0) {
            snprintf(first, sizeof(first), "%s", m);
        }
        EXPECT(strcmp(m, first) == 0, "rank %d's error '%s' is not rank 0's '%s'", r, m, first);
    }
    /* Exactly one device's report, nothing before or after it. */
    int rank = -1, peer = -1, secs = -1, used = 0;
    unsigned long long step = 99;
    char host[256] = "";
    if (timeout) {
        int got = sscanf(first,
                         "rank %d (host %255[^)]): a device kernel waited more than %d s for "
                         "rank %d at step %llu (BRAID_CUDA_WAIT_TIMEOUT)%n",
                         &rank, host, &secs, &peer, &step, &used);
        EXPECT(got == 5 && used == (int)strlen(first),
               "the error is not exactly one device's timeout report: '%s'", first);
        EXPECT((rank == 1 && peer == 0) || (rank == 3 && peer == 2),
               "rank %d cannot have waited for rank %d (rank 1 waits for 0, rank 3 for 2): a "
               "report mixed from two devices? '%s'",
               rank, peer, first);
        EXPECT(step == 0, "the report's step is %llu, not 0: '%s'", step, first);
    } else {
        static const char what[] = "the device kernel read a work item of no kind it knows "
                                   "(its descriptors were overwritten, or libnccl and its "
                                   "kernels are of different builds)";
        int got = sscanf(first, "rank %d (host %255[^)]): %n", &rank, host, &used);
        EXPECT(got == 2 && strcmp(first + used, what) == 0,
               "the error is not exactly one device's BR_DEV_BADWORK report: '%s'", first);
        EXPECT(rank == 1 || rank == 3, "the report names rank %d, not 1 or 3: '%s'", rank, first);
        /* The other GPU reported too, naming the other rank. */
        char line[1024] = "", other[64];
        snprintf(other, sizeof(other), "status 4: rank %d,", rank == 1 ? 3 : 1);
        int n = log_lines("kernel failed too", line, sizeof(line));
        EXPECT(n == 1 && strstr(line, other) != NULL,
               "the log has %d lines saying another GPU failed too (want 1, with '%s'): '%s'", n,
               other, line);
    }
    /* The failure is sticky: the next call says the same. */
    ncclResult_t again =
        ncclAllReduce(buf[0], buf[0], CLAIM_COUNT, ncclFloat, ncclSum, comms[0], s[0]);
    EXPECT(again != ncclSuccess, "a call after the failure returned ncclSuccess");
    for (int r = 0; r < CLAIM_RANKS; r++) {
        CUDA_OK(cudaSetDevice(devs[r]));
        CUDA_OK(cudaStreamSynchronize(s[r]));
        cudaFree(buf[r]);
        ncclCommDestroy(comms[r]);
        cudaStreamDestroy(s[r]);
    }
    CUDA_OK(cudaSetDevice(0));
    printf("claim (%s): every rank got one device's report: '%s'\n",
           timeout ? "timeouts" : "bad work on both GPUs at once", first);
}
