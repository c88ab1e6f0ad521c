/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ncclCommSuspend / ncclCommResume / ncclCommMemStats (NCCL 2.32) on host memory, 4 ranks
 * as threads and as processes (over shared memory, and over the socket plugin when the
 * environment says so: api_suspend_net). Each rank runs a round of calls that touch
 * every kind of buffer (a large AllReduce through the rings, a small one through the node
 * arena, an AllGather, Send/Recv around the ring), checked against values computed here;
 * MemStats must report the bytes held, Suspend must bring them to 0 and refuse calls,
 * Resume must make them again and the same round must be exact again (twice over).
 * Misuse is refused on every rank with a message naming the call and the rank.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nccl.h>

#include "brt_launch.h"

#define NRANKS 4
#define BIG 300007 /* floats: larger than the FIFO of the ring channels, odd */
#define SMALL 7    /* floats: one arena slot */
#define P2P 5003   /* floats per Send/Recv */

/* Rank r's input element i: small integers, so every sum is exact in float. */
static float input(int r, size_t i)
{
    return (float)((r + 1) * (int)(i % 97 + 1));
}

/* A round of calls, each result compared with its reference. Returns 0 when all exact. */
static int round_exact(brt_rank_ctx_t *ctx, ncclComm_t comm, float *a, float *b, int round)
{
    int r = ctx->rank, n = ctx->nranks, bad = 0;
    int next = (r + 1) % n, prev = (r + n - 1) % n;

    brt_doing(ctx, "round %d: AllReduce of %d floats", round, BIG);
    for (size_t i = 0; i < BIG; i++) {
        a[i] = input(r, i);
    }
    ncclResult_t res = ncclAllReduce(a, b, BIG, ncclFloat, ncclSum, comm, NULL);
    for (size_t i = 0; res == ncclSuccess && i < BIG && !bad; i++) {
        float want = (float)(n * (n + 1) / 2 * (int)(i % 97 + 1));
        if (b[i] != want) {
            brt_fail(ctx, "round %d: AllReduce [%zu] = %g, not %g", round, i, (double)b[i],
                     (double)want);
            bad = 1;
        }
    }
    brt_doing(ctx, "round %d: small AllReduce", round);
    res = res != ncclSuccess ? res : ncclAllReduce(a, b, SMALL, ncclFloat, ncclMax, comm, NULL);
    for (size_t i = 0; res == ncclSuccess && i < SMALL && !bad; i++) {
        if (b[i] != input(n - 1, i)) {
            brt_fail(ctx, "round %d: small AllReduce (max) [%zu] = %g, not %g", round, i,
                     (double)b[i], (double)input(n - 1, i));
            bad = 1;
        }
    }
    brt_doing(ctx, "round %d: AllGather", round);
    res = res != ncclSuccess ? res : ncclAllGather(a, b, P2P, ncclFloat, comm, NULL);
    for (int q = 0; res == ncclSuccess && q < n && !bad; q++) {
        for (size_t i = 0; i < P2P && !bad; i++) {
            if (b[(size_t)q * P2P + i] != input(q, i)) {
                brt_fail(ctx, "round %d: AllGather from rank %d [%zu] = %g, not %g", round, q, i,
                         (double)b[(size_t)q * P2P + i], (double)input(q, i));
                bad = 1;
            }
        }
    }
    brt_doing(ctx, "round %d: Send/Recv around the ring", round);
    if (res == ncclSuccess) {
        ncclGroupStart();
        ncclSend(a, P2P, ncclFloat, next, comm, NULL);
        ncclRecv(b, P2P, ncclFloat, prev, comm, NULL);
        res = ncclGroupEnd();
    }
    for (size_t i = 0; res == ncclSuccess && i < P2P && !bad; i++) {
        if (b[i] != input(prev, i)) {
            brt_fail(ctx, "round %d: Recv from rank %d [%zu] = %g, not %g", round, prev, i,
                     (double)b[i], (double)input(prev, i));
            bad = 1;
        }
    }
    if (res != ncclSuccess) {
        brt_fail(ctx, "round %d: a call failed (%d): %s", round, (int)res, ncclGetLastError(comm));
        bad = 1;
    }
    return bad;
}

static int stat_of(brt_rank_ctx_t *ctx, ncclComm_t comm, ncclCommMemStat_t st, uint64_t *v)
{
    *v = UINT64_MAX;
    if (ncclCommMemStats(comm, st, v) != ncclSuccess) {
        brt_fail(ctx, "ncclCommMemStats(%d): %s", (int)st, ncclGetLastError(comm));
        return 1;
    }
    return 0;
}

/* What MemStats says: `suspended` and, held bytes > 0 (want_held) or == 0. */
static int stats_are(brt_rank_ctx_t *ctx, ncclComm_t comm, int suspended, int want_held,
                     const char *when)
{
    uint64_t held, flag, kept, total;
    if (stat_of(ctx, comm, ncclStatGpuMemSuspend, &held) ||
        stat_of(ctx, comm, ncclStatGpuMemSuspended, &flag) ||
        stat_of(ctx, comm, ncclStatGpuMemPersist, &kept) ||
        stat_of(ctx, comm, ncclStatGpuMemTotal, &total)) {
        return 1;
    }
    if ((int)flag != suspended || (want_held ? held == 0 : held != 0) || total != held + kept) {
        brt_fail(ctx,
                 "%s: MemStats say suspended %llu, %llu bytes releasable, %llu kept, %llu in "
                 "all (expected suspended %d and %s releasable bytes)",
                 when, (unsigned long long)flag, (unsigned long long)held, (unsigned long long)kept,
                 (unsigned long long)total, suspended, want_held ? "some" : "no");
        return 1;
    }
    return 0;
}

/* ret is ncclInvalidUsage and the last error names `what`. */
static int refused(brt_rank_ctx_t *ctx, ncclComm_t comm, ncclResult_t ret, ncclResult_t want,
                   const char *call, const char *what)
{
    const char *msg = ncclGetLastError(comm);
    char rank[32];
    snprintf(rank, sizeof(rank), "rank %d", ctx->rank);
    if (ret != want || strstr(msg, what) == NULL || strstr(msg, rank) == NULL) {
        brt_fail(ctx, "%s returned %d (expected %d) with \"%s\" (expected \"%s\" and \"%s\")", call,
                 (int)ret, (int)want, msg, what, rank);
        return 1;
    }
    return 0;
}

static int misuse(brt_rank_ctx_t *ctx, ncclComm_t comm, float *a)
{
    int bad = 0;
    bad |= refused(ctx, comm, ncclCommResume(comm), ncclInvalidUsage, "ncclCommResume",
                   "not suspended");
    bad |= refused(ctx, comm, ncclCommSuspend(comm, 0x10), ncclInvalidArgument,
                   "ncclCommSuspend(0x10)", "unknown flags");
    /* A call of an open group is queued on the communicator: not idle. */
    ncclGroupStart();
    ncclAllReduce(a, a, SMALL, ncclFloat, ncclSum, comm, NULL);
    bad |= refused(ctx, comm, ncclCommSuspend(comm, NCCL_SUSPEND_MEM), ncclInvalidUsage,
                   "ncclCommSuspend in a group", "open group");
    if (ncclGroupEnd() != ncclSuccess) {
        brt_fail(ctx, "the group after the refused suspend: %s", ncclGetLastError(comm));
        bad = 1;
    }
    /* Without NCCL_SUSPEND_MEM nothing happens, as in NCCL. */
    if (ncclCommSuspend(comm, 0) != ncclSuccess) {
        brt_fail(ctx, "ncclCommSuspend(0): %s", ncclGetLastError(comm));
        bad = 1;
    }
    return bad || stats_are(ctx, comm, 0, 1, "after ncclCommSuspend(0)");
}

static int body_suspend(brt_rank_ctx_t *ctx)
{
    ncclComm_t comm;
    int bad = 0;
    float *a = malloc(BIG * sizeof(float));
    float *b = malloc(BIG * sizeof(float));
    if (a == NULL || b == NULL || brt_rank_init(ctx, &comm) != ncclSuccess) {
        free(a);
        free(b);
        return 1;
    }
    for (int round = 0; round < 3 && !bad; round++) {
        bad |= round_exact(ctx, comm, a, b, round);
        bad |= bad ? 0 : stats_are(ctx, comm, 0, 1, "before suspend");
        bad |= bad || round > 0 ? 0 : misuse(ctx, comm, a);
        if (bad || round == 2) {
            break;
        }
        brt_doing(ctx, "round %d: suspend", round);
        if (ncclCommSuspend(comm, NCCL_SUSPEND_MEM) != ncclSuccess) {
            brt_fail(ctx, "ncclCommSuspend: %s", ncclGetLastError(comm));
            bad = 1;
            break;
        }
        bad |= stats_are(ctx, comm, 1, 0, "suspended");
        bad |= refused(ctx, comm, ncclAllReduce(a, b, SMALL, ncclFloat, ncclSum, comm, NULL),
                       ncclInvalidUsage, "ncclAllReduce while suspended", "suspended");
        bad |= refused(ctx, comm, ncclSend(a, 1, ncclFloat, 0, comm, NULL), ncclInvalidUsage,
                       "ncclSend while suspended", "suspended");
        bad |= refused(ctx, comm, ncclCommSuspend(comm, NCCL_SUSPEND_MEM), ncclInvalidUsage,
                       "ncclCommSuspend twice", "suspended already");
        brt_doing(ctx, "round %d: resume", round);
        if (ncclCommResume(comm) != ncclSuccess) {
            brt_fail(ctx, "ncclCommResume: %s", ncclGetLastError(comm));
            bad = 1;
        }
    }
    ncclCommDestroy(comm);
    free(a);
    free(b);
    return bad;
}

START_TEST(test_suspend_threads)
{
    char out[8192];
    int bad = brt_threads_run(NRANKS, body_suspend, NULL, 120 * brt_time_scale(), out, sizeof(out));
    ck_assert_msg(!bad, "%s", brt_clip(out, 3000));
}
END_TEST

START_TEST(test_suspend_procs)
{
    char out[8192];
    int bad = brt_procs_run(NRANKS, body_suspend, NULL, 120 * brt_time_scale(), out, sizeof(out));
    ck_assert_msg(!bad, "%s", brt_clip(out, 3000));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("api_suspend");
    TCase *tc = tcase_create("suspend");
    tcase_set_timeout(tc, 150 * brt_time_scale());
    tcase_add_test(tc, test_suspend_threads);
    tcase_add_test(tc, test_suspend_procs);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
