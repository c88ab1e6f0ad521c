/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Buffers read in place across processes (issue 19): AllGather and Broadcast on buffers
 * from ncclMemAlloc (which peers map once and keep mapped), registered with
 * ncclCommRegister or not, and on plain malloc memory (process_vm_readv), mixed in one
 * call, in place and out of place, at sizes below and above the split of a Broadcast's
 * copy between root and reader; buffers reused for many calls, then freed and allocated
 * again (a new allocation may reuse a freed one's descriptor and address, and must not be
 * served from a stale mapping). Every result is checked against values computed here.
 * Runs with every AllGather and Broadcast read in place (BRAID_CMA_BYTES=1,
 * BRAID_CMA_MAX_BYTES=0, set by CTest); also as chunked OneShot (NCCL_ALGO set by CTest).
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "brt_launch.h"

enum { BUF_MEMALLOC, BUF_MEMALLOC_REG, BUF_MALLOC, BUF_KINDS };

typedef struct {
    char *p;
    size_t bytes;
    int kind;
    void *reg;
} buf_t;

static ncclResult_t buf_get(ncclComm_t comm, buf_t *b, size_t bytes, int kind)
{
    b->bytes = bytes;
    b->kind = kind;
    b->reg = NULL;
    if (kind == BUF_MALLOC) {
        b->p = malloc(bytes);
        return b->p != NULL ? ncclSuccess : ncclSystemError;
    }
    ncclResult_t res = ncclMemAlloc((void **)&b->p, bytes);
    if (res == ncclSuccess && kind == BUF_MEMALLOC_REG) {
        res = ncclCommRegister(comm, b->p, bytes, &b->reg);
    }
    return res;
}

static ncclResult_t buf_put(ncclComm_t comm, buf_t *b)
{
    ncclResult_t res = ncclSuccess;
    if (b->reg != NULL) {
        res = ncclCommDeregister(comm, b->reg);
    }
    if (b->kind == BUF_MALLOC) {
        free(b->p);
    } else if (res == ncclSuccess) {
        res = ncclMemFree(b->p);
    }
    b->p = NULL;
    return res;
}

/* The byte rank r contributes at index i in round `round`. */
static unsigned char val(int r, size_t i, int round)
{
    uint64_t x = ((uint64_t)r * 0x9e3779b97f4a7c15ULL) ^ ((uint64_t)i * 0xbf58476d1ce4e5b9ULL) ^
                 ((uint64_t)round << 17);
    x ^= x >> 29;
    return (unsigned char)(x * 0x94d049bb133111ebULL >> 56);
}

static int check_bytes(brt_rank_ctx_t *ctx, const char *what, const unsigned char *got, int owner,
                       size_t count, int round)
{
    for (size_t i = 0; i < count; i++) {
        if (got[i] != val(owner, i, round)) {
            brt_fail(ctx, "%s round %d: byte %zu of rank %d's block is %u, want %u", what, round, i,
                     owner, got[i], val(owner, i, round));
            return 1;
        }
    }
    return 0;
}

/* One AllGather and one Broadcast per (size, placement) on send/recv buffers of the given
 * kinds; buffers are (re)allocated only when `fresh`. */
static int one_round(brt_rank_ctx_t *ctx, ncclComm_t comm, buf_t *send, buf_t *recv, int round)
{
    static const size_t counts[] = {4096, 65536 + 4099, 300000, 1 << 20};
    int n = ctx->nranks, me = ctx->rank;

    for (size_t s = 0; s < sizeof(counts) / sizeof(counts[0]); s++) {
        size_t c = counts[s];
        for (int inplace = 0; inplace < 2; inplace++) {
            char *in = inplace ? recv->p + (size_t)me * c : send->p;
            memset(recv->p, 0xa5, c * (size_t)n); /* stale results must not pass */
            for (size_t i = 0; i < c; i++) {
                in[i] = (char)val(me, i, round);
            }
            brt_doing(ctx, "AllGather count %zu %s round %d", c, inplace ? "in place" : "", round);
            if (ncclAllGather(in, recv->p, c, ncclUint8, comm, NULL) != ncclSuccess) {
                brt_fail(ctx, "AllGather: %s", ncclGetLastError(comm));
                return 1;
            }
            for (int r = 0; r < n; r++) {
                if (check_bytes(ctx, "AllGather", (unsigned char *)recv->p + (size_t)r * c, r, c,
                                round)) {
                    return 1;
                }
            }
            int root = (round + (int)s) % n;
            char *bin = inplace ? recv->p : send->p;
            if (me == root) {
                for (size_t i = 0; i < c; i++) {
                    bin[i] = (char)val(root, i, round + 1);
                }
            }
            if (!inplace || me != root) {
                memset(recv->p, 0x5a, c);
            }
            brt_doing(ctx, "Broadcast count %zu root %d round %d", c, root, round);
            if (ncclBroadcast(bin, recv->p, c, ncclUint8, root, comm, NULL) != ncclSuccess) {
                brt_fail(ctx, "Broadcast: %s", ncclGetLastError(comm));
                return 1;
            }
            if (check_bytes(ctx, "Broadcast", (unsigned char *)recv->p, root, c, round + 1)) {
                return 1;
            }
        }
    }
    return 0;
}

static int body(brt_rank_ctx_t *ctx)
{
    const size_t max = (size_t)1 << 20;
    ncclComm_t comm;
    buf_t send = {0}, recv = {0};
    int bad = 0;

    if (brt_rank_init(ctx, &comm) != ncclSuccess) {
        return 1;
    }
    /* Kinds rotate per rank and round, so one call mixes mapped and unmapped buffers. */
    for (int round = 0; round < 6 && !bad; round++) {
        int fresh = round % 2 == 0; /* odd rounds reuse the previous round's buffers */
        if (fresh) {
            if ((send.p != NULL && buf_put(comm, &send) != ncclSuccess) ||
                (recv.p != NULL && buf_put(comm, &recv) != ncclSuccess)) {
                brt_fail(ctx, "freeing buffers: %s", ncclGetLastError(comm));
                bad = 1;
                break;
            }
            int ks = (ctx->rank + round / 2) % BUF_KINDS,
                kr = (ctx->rank + round / 2 + 1) % BUF_KINDS;
            if (buf_get(comm, &send, max, ks) != ncclSuccess ||
                buf_get(comm, &recv, max * (size_t)ctx->nranks, kr) != ncclSuccess) {
                brt_fail(ctx, "allocating buffers: %s", ncclGetLastError(comm));
                bad = 1;
                break;
            }
        }
        bad = one_round(ctx, comm, &send, &recv, round);
        ctx->report->progress = round + 1;
    }
    if (send.p != NULL) {
        buf_put(comm, &send);
    }
    if (recv.p != NULL) {
        buf_put(comm, &recv);
    }
    ncclCommDestroy(comm);
    return bad;
}

/* ncclCommWindowRegister on host memory: a symmetric window per rank over the buffers the
 * calls then use, and a symmetric registration whose sizes differ, refused on every rank. */
static int body_window(brt_rank_ctx_t *ctx)
{
    const size_t max = (size_t)1 << 20;
    ncclComm_t comm;
    buf_t send = {0}, recv = {0};
    ncclWindow_t ws = NULL, wr = NULL, wbad = NULL;
    int bad = 0;

    if (brt_rank_init(ctx, &comm) != ncclSuccess) {
        return 1;
    }
    if (buf_get(comm, &send, max, BUF_MEMALLOC) != ncclSuccess ||
        buf_get(comm, &recv, max * (size_t)ctx->nranks, BUF_MEMALLOC) != ncclSuccess ||
        ncclCommWindowRegister(comm, send.p, max, &ws, NCCL_WIN_COLL_SYMMETRIC) != ncclSuccess ||
        ncclCommWindowRegister(comm, recv.p, max * (size_t)ctx->nranks, &wr,
                               NCCL_WIN_COLL_SYMMETRIC) != ncclSuccess) {
        brt_fail(ctx, "setting up windows: %s", ncclGetLastError(comm));
        return 1;
    }
    bad = one_round(ctx, comm, &send, &recv, 1) || one_round(ctx, comm, &send, &recv, 2);
    ncclResult_t res = ncclCommWindowRegister(comm, send.p, max - 4096 * (size_t)ctx->rank, &wbad,
                                              NCCL_WIN_COLL_SYMMETRIC);
    if (!bad && res != ncclInvalidUsage) {
        brt_fail(ctx, "symmetric windows of different sizes: got %d, want ncclInvalidUsage", res);
        bad = 1;
    }
    if (ncclCommWindowDeregister(comm, ws) != ncclSuccess ||
        ncclCommWindowDeregister(comm, wr) != ncclSuccess) {
        brt_fail(ctx, "ncclCommWindowDeregister: %s", ncclGetLastError(comm));
        bad = 1;
    }
    buf_put(comm, &send);
    buf_put(comm, &recv);
    ncclCommDestroy(comm);
    return bad;
}

START_TEST(test_window_procs)
{
    char out[8192];
    int bad = brt_procs_run(3, body_window, NULL, 240 * brt_time_scale(), out, sizeof(out));
    ck_assert_msg(!bad, "3 ranks: %s", brt_clip(out, 3000));
}
END_TEST

START_TEST(test_reg_procs)
{
    char out[8192];
    int n = 2 + _i;
    int bad = brt_procs_run(n, body, NULL, 240 * brt_time_scale(), out, sizeof(out));
    ck_assert_msg(!bad, "%d ranks: %s", n, brt_clip(out, 3000));
}
END_TEST

START_TEST(test_reg_threads)
{
    char out[8192];
    int bad = brt_threads_run(3, body, NULL, 240 * brt_time_scale(), out, sizeof(out));
    ck_assert_msg(!bad, "3 threads: %s", brt_clip(out, 3000));
}
END_TEST

START_TEST(test_memfree_foreign)
{
    /* ncclMemFree of memory ncclMemAlloc did not return is refused, not freed. */
    void *p = malloc(64);
    ck_assert_int_eq(ncclMemFree(p), ncclInvalidArgument);
    free(p);
    ck_assert_int_eq(ncclMemFree(NULL), ncclSuccess);
}
END_TEST

static Suite *mp_reg_suite(void)
{
    Suite *s = suite_create("mp_reg");
    TCase *tc = tcase_create("reg");
    tcase_set_timeout(tc, 300 * brt_time_scale());
    tcase_add_loop_test(tc, test_reg_procs, 0, 3); /* 2, 3 and 4 processes */
    tcase_add_test(tc, test_reg_threads);
    tcase_add_test(tc, test_memfree_foreign);
    tcase_add_test(tc, test_window_procs);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!brt_select_option(argv[i], argv[i + 1])) {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    SRunner *sr = srunner_create(mp_reg_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
