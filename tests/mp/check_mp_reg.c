/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Buffers read in place across processes (issue 19): AllGather and Broadcast (and
 * AllReduce, read in place between threads, through the ring between processes) on buffers
 * from ncclMemAlloc (which peers map once and keep mapped), registered with
 * ncclCommRegister or not, and on plain malloc memory (process_vm_readv), mixed in one
 * call, in place and out of place, at sizes below and above the split of a Broadcast's
 * copy between root and reader; buffers reused for many calls, then freed and allocated
 * again (a new allocation may reuse a freed one's descriptor and address, and must not be
 * served from a stale mapping). Every result is checked against values computed here.
 * Runs with every AllGather and Broadcast read in place (BRAID_CMA_BYTES=1,
 * BRAID_CMA_MAX_BYTES=0, set by CTest); also as chunked OneShot (NCCL_ALGO set by CTest).
 * Send/Recv (TCase "sendrecv") on the same kinds of buffers, over the socket plugin with
 * the network's user-buffer path, and with every user-buffer registration refused.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "brt_check.h"
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

/* An AllReduce (uint8 sum, which wraps) of c elements: between threads of one process it
 * reads the peers' buffers in place (DirectRead), between processes it runs the ring. */
static int allreduce_once(brt_rank_ctx_t *ctx, ncclComm_t comm, buf_t *send, buf_t *recv,
                          size_t c, int inplace, int round)
{
    unsigned char *in = (unsigned char *)(inplace ? recv->p : send->p);
    unsigned char *out = (unsigned char *)recv->p;

    for (size_t i = 0; i < c; i++) {
        in[i] = val(ctx->rank, i, round);
    }
    if (!inplace) {
        memset(out, 0x3c, c);
    }
    brt_doing(ctx, "AllReduce count %zu %s round %d", c, inplace ? "in place" : "", round);
    if (ncclAllReduce(in, out, c, ncclUint8, ncclSum, comm, NULL) != ncclSuccess) {
        brt_fail(ctx, "AllReduce: %s", ncclGetLastError(comm));
        return 1;
    }
    for (size_t i = 0; i < c; i++) {
        unsigned want = 0;
        for (int r = 0; r < ctx->nranks; r++) {
            want += val(r, i, round);
        }
        if (out[i] != (unsigned char)want) {
            brt_fail(ctx, "AllReduce round %d: byte %zu is %u, want %u", round, i, out[i],
                     want & 0xffu);
            return 1;
        }
    }
    return 0;
}

/* One AllGather, one Broadcast and one AllReduce per (size, placement) on send/recv buffers
 * of the given kinds; buffers are (re)allocated only when `fresh`. */
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
            if (allreduce_once(ctx, comm, send, recv, c, inplace, round + 2)) {
                return 1;
            }
        }
    }
    return 0;
}

/*
 * Send/Recv around the ring (to rank + 1, from rank - 1; at 2 ranks both with the one
 * peer), two messages per peer in one group, at sizes below and above the user-buffer
 * threshold (CTest sets BRAID_NET_USERBUF_BYTES=65536 for the net runs) with odd tails,
 * in place (the message sent from inside the receive buffer's allocation) and out of
 * place. Over the socket plugin the large ones go from and into these buffers directly.
 */
static int sendrecv_round(brt_rank_ctx_t *ctx, ncclComm_t comm, buf_t *send, buf_t *recv, int round)
{
    static const size_t counts[] = {4096, 65536 + 4099, 300000, (1 << 20) - 13};
    int n = ctx->nranks, me = ctx->rank;
    int to = (me + 1) % n, from = (me + n - 1) % n;

    for (size_t s = 0; s < sizeof(counts) / sizeof(counts[0]); s++) {
        size_t c = counts[s], half = c / 2;
        for (int inplace = 0; inplace < 2; inplace++) {
            /* In place: what is sent sits in the receive buffer's allocation, after the
             * part received into. */
            char *out = inplace ? recv->p + c : send->p;
            memset(recv->p, 0xa5, c);
            for (size_t i = 0; i < c; i++) {
                out[i] = (char)val(me, i, round);
            }
            brt_doing(ctx, "Send/Recv count %zu %s round %d", c, inplace ? "in place" : "", round);
            if (ncclGroupStart() != ncclSuccess ||
                ncclSend(out, half, ncclUint8, to, comm, NULL) != ncclSuccess ||
                ncclSend(out + half, c - half, ncclUint8, to, comm, NULL) != ncclSuccess ||
                ncclRecv(recv->p, half, ncclUint8, from, comm, NULL) != ncclSuccess ||
                ncclRecv(recv->p + half, c - half, ncclUint8, from, comm, NULL) != ncclSuccess ||
                ncclGroupEnd() != ncclSuccess) {
                brt_fail(ctx, "Send/Recv: %s", ncclGetLastError(comm));
                return 1;
            }
            if (check_bytes(ctx, "Send/Recv", (unsigned char *)recv->p, from, c, round)) {
                return 1;
            }
            /* What was sent is untouched. */
            if (check_bytes(ctx, "Send/Recv's send buffer", (unsigned char *)out, me, c, round)) {
                return 1;
            }
        }
    }
    return 0;
}

typedef int (*round_fn)(brt_rank_ctx_t *ctx, ncclComm_t comm, buf_t *send, buf_t *recv,
                        int round);

/* Six rounds of fn on buffers of send_bytes and recv_bytes. Kinds rotate per rank and
 * round, so one call mixes mapped and unmapped buffers; odd rounds reuse the buffers of the
 * round before, even rounds free them and allocate new ones (perhaps at the same
 * addresses). */
static int run_rounds(brt_rank_ctx_t *ctx, size_t send_bytes, size_t recv_bytes, round_fn fn)
{
    ncclComm_t comm;
    buf_t send = {0}, recv = {0};
    int bad = 0;

    if (brt_rank_init(ctx, &comm) != ncclSuccess) {
        return 1;
    }
    for (int round = 0; round < 6 && !bad; round++) {
        if (round % 2 == 0) {
            if ((send.p != NULL && buf_put(comm, &send) != ncclSuccess) ||
                (recv.p != NULL && buf_put(comm, &recv) != ncclSuccess)) {
                brt_fail(ctx, "freeing buffers: %s", ncclGetLastError(comm));
                bad = 1;
                break;
            }
            int ks = (ctx->rank + round / 2) % BUF_KINDS,
                kr = (ctx->rank + round / 2 + 1) % BUF_KINDS;
            if (buf_get(comm, &send, send_bytes, ks) != ncclSuccess ||
                buf_get(comm, &recv, recv_bytes, kr) != ncclSuccess) {
                brt_fail(ctx, "allocating buffers: %s", ncclGetLastError(comm));
                bad = 1;
                break;
            }
        }
        bad = fn(ctx, comm, &send, &recv, round);
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

static int body_sendrecv(brt_rank_ctx_t *ctx)
{
    const size_t max = (size_t)1 << 20;
    return run_rounds(ctx, max, 2 * max, sendrecv_round);
}

/* A Send longer than its Recv, both large enough for the user-buffer path: the receiver
 * must fail naming the mismatch (the bytes beyond its count must not wait on the
 * connection for its next call), and nobody may hang; the sender may finish or fail. */
static int body_sendrecv_mismatch(brt_rank_ctx_t *ctx)
{
    const size_t sent = 300000, want = 200000;
    ncclComm_t comm;
    char *buf = malloc(sent);
    int bad = 0;

    if (buf == NULL || brt_rank_init(ctx, &comm) != ncclSuccess) {
        free(buf);
        return 1;
    }
    memset(buf, 7, sent);
    brt_doing(ctx, "mismatched Send/Recv");
    ncclResult_t res = ctx->rank == 0 ? ncclSend(buf, sent, ncclUint8, 1, comm, NULL)
                                      : ncclRecv(buf, want, ncclUint8, 0, comm, NULL);
    if (ctx->rank == 1) {
        const char *msg = ncclGetLastError(comm);
        if (res == ncclSuccess) {
            brt_fail(ctx, "a Recv of %zu bytes matched a Send of %zu", want, sent);
            bad = 1;
        } else if (strstr(msg, "mismatch") == NULL) {
            brt_fail(ctx, "the error does not name the mismatch: %s", msg);
            bad = 1;
        }
    }
    ncclCommAbort(comm);
    free(buf);
    return bad;
}

START_TEST(test_sendrecv_mismatch)
{
    char out[8192];
    int bad =
        brt_procs_run(2, body_sendrecv_mismatch, NULL, 120 * brt_time_scale(), out, sizeof(out));
    ck_assert_msg(!bad, "%s", brt_clip(out, 3000));
}
END_TEST

START_TEST(test_sendrecv_procs)
{
    char out[8192];
    int n = 2 + _i;
    int bad = brt_procs_run(n, body_sendrecv, NULL, 240 * brt_time_scale(), out, sizeof(out));
    ck_assert_msg(!bad, "%d ranks: %s", n, brt_clip(out, 3000));
}
END_TEST

static int body(brt_rank_ctx_t *ctx)
{
    const size_t max = (size_t)1 << 20;
    return run_rounds(ctx, max, max * (size_t)ctx->nranks, one_round);
}

/*
 * Registered buffers over the network (CK_RUN_CASE=regcache, the socket plugin with every
 * ring collective on user buffers): ncclCommRegister'ed send and receive buffers serve 64
 * AllGathers and Broadcasts, and each connection registers each of them with the plugin
 * once (INFO "registered with net plugin"), not once per call; results are checked.
 */
static int body_regcache(brt_rank_ctx_t *ctx)
{
    const size_t max = (size_t)1 << 20;
    char log[128];
    ncclComm_t comm;
    buf_t send = {0}, recv = {0};
    int bad = 0;

    snprintf(log, sizeof(log), "/tmp/braid-regcache-%d.log", (int)getpid());
    setenv("NCCL_DEBUG", "INFO", 1);
    setenv("NCCL_DEBUG_SUBSYS", "REG", 1);
    setenv("NCCL_DEBUG_FILE", log, 1);
    if (brt_rank_init(ctx, &comm) != ncclSuccess) {
        return 1;
    }
    if (buf_get(comm, &send, max, BUF_MEMALLOC_REG) != ncclSuccess ||
        buf_get(comm, &recv, max * (size_t)ctx->nranks, BUF_MEMALLOC_REG) != ncclSuccess) {
        brt_fail(ctx, "allocating buffers: %s", ncclGetLastError(comm));
        return 1;
    }
    for (int round = 0; round < 4 && !bad; round++) {
        bad = one_round(ctx, comm, &send, &recv, round);
    }
    buf_put(comm, &send);
    buf_put(comm, &recv);
    ncclCommDestroy(comm);
    int lines = 0;
    char line[1024];
    FILE *f = fopen(log, "r");
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        lines += strstr(line, "ncclCommRegister) registered with net plugin") != NULL;
    }
    if (f != NULL) {
        fclose(f);
    }
    unlink(log);
    /* Two buffers, a send and a receive connection per channel (at most 4 here). Only
     * over the network (the other runs of this binary check the results alone). */
    const char *shm_off = getenv("NCCL_SHM_DISABLE");
    int net = shm_off != NULL && strcmp(shm_off, "1") == 0;
    if (!bad && net && (lines < 1 || lines > 2 * 2 * 4)) {
        brt_fail(ctx, "%d registrations with the net plugin for 64 calls on 2 registered buffers",
                 lines);
        bad = 1;
    }
    return bad;
}

START_TEST(test_regcache_procs)
{
    char out[8192];
    int bad = brt_procs_run(2, body_regcache, NULL, 240 * brt_time_scale(), out, sizeof(out));
    ck_assert_msg(!bad, "2 ranks: %s", brt_clip(out, 3000));
}
END_TEST

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
    /* Send/Recv on the same kinds of buffers (the user-buffer path over the network). */
    TCase *tsr = tcase_create("sendrecv");
    tcase_set_timeout(tsr, 300 * brt_time_scale());
    tcase_add_loop_test(tsr, test_sendrecv_procs, 0, 3); /* 2, 3 and 4 processes */
    tcase_add_test(tsr, test_sendrecv_mismatch);
    suite_add_tcase(s, tsr);
    /* Registered buffers over the network: registered with the plugin once. */
    TCase *trc = tcase_create("regcache");
    tcase_set_timeout(trc, 300 * brt_time_scale());
    tcase_add_test(trc, test_regcache_procs);
    suite_add_tcase(s, trc);
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
    return brt_suite_run(mp_reg_suite());
}
