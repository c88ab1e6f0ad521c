/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "api_args": bad input to every entry point is refused with
 * ncclInvalidArgument or ncclInvalidUsage, and ncclGetLastError says what was wrong
 * (names the argument and, where there is one, the offending value). Calls go to a
 * one-rank communicator (where a correct call completes at once) or to rank 0 of a
 * two-rank ncclCommInitAll set (where only calls that must fail their argument checks
 * are made, since a correct one would wait for rank 1). Unique ids that cannot work
 * are tried in a forked child with a deadline, so a hang fails the test instead of
 * stalling it.
 */
#include <check.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "brt_launch.h"

static ncclComm_t one;    /* a one-rank communicator */
static ncclComm_t two[2]; /* both ranks of a two-rank communicator, this thread */
/* The communicator whose ncclGetLastError EXPECT_REFUSED reads (NULL: the thread's). */
static ncclComm_t err_comm;
/* What the loop around an EXPECT_REFUSED is trying, for its failure message. */
static char note[96];
/* Failures of the current test, collected so that one run lists every refused-call gap
 * (each is also printed at once, in case a later call crashes the test). */
static char fails[3000];

static void comms_setup(void)
{
    ncclUniqueId id;
    ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
    ck_assert_int_eq(ncclCommInitRank(&one, 1, id, 0), ncclSuccess);
    ck_assert_int_eq(ncclCommInitAll(two, 2, NULL), ncclSuccess);
    err_comm = NULL;
    note[0] = '\0';
    fails[0] = '\0';
}

static void comms_teardown(void)
{
    ncclCommDestroy(one);
    ncclCommDestroy(two[0]);
    ncclCommDestroy(two[1]);
}

static void soft_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void soft_fail(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    size_t used = strlen(fails);
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, "FAIL: %s\n", line);
    if (used + 2 < sizeof(fails)) {
        snprintf(fails + used, sizeof(fails) - used, "\n%s", line);
    }
}

/* Expect a usage error from call, with a last error text holding each needle. */
#define EXPECT_REFUSED(call, ...)                                                                  \
    do {                                                                                           \
        ncclResult_t res_ = (call);                                                                \
        const char *text_ = ncclGetLastError(err_comm);                                            \
        const char *needles_[] = {__VA_ARGS__};                                                    \
        if (res_ != ncclInvalidArgument && res_ != ncclInvalidUsage) {                             \
            soft_fail("%s%s returned %d (%s), not ncclInvalidArgument/Usage", note, #call,         \
                      (int)res_, ncclGetErrorString(res_));                                        \
            break;                                                                                 \
        }                                                                                          \
        for (size_t k_ = 0; k_ < sizeof(needles_) / sizeof(needles_[0]); k_++) {                   \
            if (!brt_text_has(text_, needles_[k_])) {                                              \
                soft_fail("%s%s: ncclGetLastError does not mention \"%s\": \"%s\"", note, #call,   \
                          needles_[k_], text_);                                                    \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* End of a test: every soft failure fails it. */
#define EXPECT_NO_FAILS() ck_assert_msg(fails[0] == '\0', "%s", fails)

static float fbuf[64];
static float gbuf[64];

START_TEST(test_null_buffers)
{
    ncclComm_t c = two[0]; /* rank 0: the root of root-0 calls */
    err_comm = c;
    EXPECT_REFUSED(ncclAllReduce(NULL, gbuf, 4, ncclFloat, ncclSum, c, NULL), "sendbuff");
    EXPECT_REFUSED(ncclAllReduce(fbuf, NULL, 4, ncclFloat, ncclSum, c, NULL), "recvbuff");
    EXPECT_REFUSED(ncclBroadcast(NULL, gbuf, 4, ncclFloat, 0, c, NULL), "sendbuff");
    EXPECT_REFUSED(ncclBroadcast(fbuf, NULL, 4, ncclFloat, 0, c, NULL), "recvbuff");
    EXPECT_REFUSED(ncclBcast(NULL, 4, ncclFloat, 0, c, NULL), "buff");
    EXPECT_REFUSED(ncclReduce(NULL, gbuf, 4, ncclFloat, ncclSum, 0, c, NULL), "sendbuff");
    EXPECT_REFUSED(ncclReduce(fbuf, NULL, 4, ncclFloat, ncclSum, 0, c, NULL), "recvbuff");
    EXPECT_REFUSED(ncclAllGather(NULL, gbuf, 4, ncclFloat, c, NULL), "sendbuff");
    EXPECT_REFUSED(ncclAllGather(fbuf, NULL, 4, ncclFloat, c, NULL), "recvbuff");
    EXPECT_REFUSED(ncclReduceScatter(NULL, gbuf, 4, ncclFloat, ncclSum, c, NULL), "sendbuff");
    EXPECT_REFUSED(ncclReduceScatter(fbuf, NULL, 4, ncclFloat, ncclSum, c, NULL), "recvbuff");
    EXPECT_REFUSED(ncclAlltoAll(NULL, gbuf, 4, ncclFloat, c, NULL), "sendbuff");
    EXPECT_REFUSED(ncclAlltoAll(fbuf, NULL, 4, ncclFloat, c, NULL), "recvbuff");
    EXPECT_REFUSED(ncclGather(NULL, gbuf, 4, ncclFloat, 0, c, NULL), "sendbuff");
    EXPECT_REFUSED(ncclGather(fbuf, NULL, 4, ncclFloat, 0, c, NULL), "recvbuff");
    EXPECT_REFUSED(ncclScatter(NULL, gbuf, 4, ncclFloat, 0, c, NULL), "sendbuff");
    EXPECT_REFUSED(ncclScatter(fbuf, NULL, 4, ncclFloat, 0, c, NULL), "recvbuff");
    EXPECT_REFUSED(ncclSend(NULL, 4, ncclFloat, 1, c, NULL), "sendbuff");
    EXPECT_REFUSED(ncclRecv(NULL, 4, ncclFloat, 1, c, NULL), "recvbuff");
    /* Count 0 needs no memory: NULL is fine (on one rank the call completes at once). */
    ck_assert_int_eq(ncclAllReduce(NULL, NULL, 0, ncclFloat, ncclSum, one, NULL), ncclSuccess);
    ck_assert_int_eq(ncclAllGather(NULL, NULL, 0, ncclInt8, one, NULL), ncclSuccess);
    ck_assert_int_eq(ncclBroadcast(NULL, NULL, 0, ncclInt8, 0, one, NULL), ncclSuccess);
    EXPECT_NO_FAILS();
}
END_TEST

START_TEST(test_count_overflow)
{
    char num[32];
    size_t huge = SIZE_MAX / 2;
    snprintf(num, sizeof(num), "%zu", huge);
    err_comm = one;
    EXPECT_REFUSED(ncclAllReduce(fbuf, gbuf, huge, ncclFloat, ncclSum, one, NULL), "count", num);
    EXPECT_REFUSED(ncclBroadcast(fbuf, gbuf, SIZE_MAX, ncclInt32, 0, one, NULL), "count");
    EXPECT_REFUSED(ncclSend(fbuf, huge, ncclFloat64, 0, one, NULL), "count");
    /* Overflows only once multiplied by the number of ranks. */
    size_t per_rank = SIZE_MAX / 4 / 2 + 1;
    snprintf(num, sizeof(num), "%zu", per_rank);
    err_comm = two[0];
    EXPECT_REFUSED(ncclAllGather(fbuf, gbuf, per_rank, ncclFloat, two[0], NULL), "count", num);
    EXPECT_REFUSED(ncclReduceScatter(fbuf, gbuf, per_rank, ncclFloat, ncclSum, two[0], NULL),
                   "count", num);
    EXPECT_REFUSED(ncclAlltoAll(fbuf, gbuf, per_rank, ncclFloat, two[0], NULL), "count");
    EXPECT_REFUSED(ncclGather(fbuf, gbuf, per_rank, ncclFloat, 0, two[0], NULL), "count");
    EXPECT_REFUSED(ncclScatter(fbuf, gbuf, per_rank, ncclFloat, 0, two[0], NULL), "count");
    EXPECT_NO_FAILS();
}
END_TEST

START_TEST(test_bad_datatype)
{
    ncclDataType_t bad[] = {(ncclDataType_t)99, (ncclDataType_t)-1, ncclNumTypes};
    err_comm = one;
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        char num[16];
        ncclDataType_t t = bad[k];
        ncclRedOp_t op;
        float scalar = 1.0f;
        snprintf(num, sizeof(num), "%d", (int)t);
        snprintf(note, sizeof(note), "[datatype %d] ", (int)t);
        EXPECT_REFUSED(ncclAllReduce(fbuf, gbuf, 4, t, ncclSum, one, NULL), "datatype", num);
        EXPECT_REFUSED(ncclBroadcast(fbuf, gbuf, 4, t, 0, one, NULL), "datatype", num);
        EXPECT_REFUSED(ncclReduce(fbuf, gbuf, 4, t, ncclMax, 0, one, NULL), "datatype", num);
        EXPECT_REFUSED(ncclAllGather(fbuf, gbuf, 4, t, one, NULL), "datatype", num);
        EXPECT_REFUSED(ncclReduceScatter(fbuf, gbuf, 4, t, ncclSum, one, NULL), "datatype", num);
        EXPECT_REFUSED(ncclAlltoAll(fbuf, gbuf, 4, t, one, NULL), "datatype", num);
        EXPECT_REFUSED(ncclSend(fbuf, 4, t, 0, one, NULL), "datatype", num);
        EXPECT_REFUSED(ncclRecv(gbuf, 4, t, 0, one, NULL), "datatype", num);
        EXPECT_REFUSED(ncclRedOpCreatePreMulSum(&op, &scalar, t, ncclScalarHostImmediate, one),
                       "datatype", num);
    }
    EXPECT_NO_FAILS();
}
END_TEST

START_TEST(test_bad_op)
{
    ncclRedOp_t bad[] = {(ncclRedOp_t)99, ncclNumOps, (ncclRedOp_t)-1, (ncclRedOp_t)-7,
                         ncclMaxRedOp};
    err_comm = one;
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        char num[16];
        snprintf(num, sizeof(num), "%d", (int)bad[k]);
        snprintf(note, sizeof(note), "[op %d] ", (int)bad[k]);
        EXPECT_REFUSED(ncclAllReduce(fbuf, gbuf, 4, ncclFloat, bad[k], one, NULL), "op", num);
        EXPECT_REFUSED(ncclReduce(fbuf, gbuf, 4, ncclFloat, bad[k], 0, one, NULL), "op", num);
        EXPECT_REFUSED(ncclReduceScatter(fbuf, gbuf, 4, ncclFloat, bad[k], one, NULL), "op", num);
    }
    EXPECT_NO_FAILS();
}
END_TEST

START_TEST(test_bad_root)
{
    int roots[] = {-1, 2, 1000};
    err_comm = two[0];
    for (size_t k = 0; k < sizeof(roots) / sizeof(roots[0]); k++) {
        char num[16];
        int r = roots[k];
        snprintf(num, sizeof(num), "%d", r);
        snprintf(note, sizeof(note), "[root %d of 2 ranks] ", r);
        EXPECT_REFUSED(ncclBroadcast(fbuf, gbuf, 4, ncclFloat, r, two[0], NULL), "root", num);
        EXPECT_REFUSED(ncclBcast(fbuf, 4, ncclFloat, r, two[0], NULL), "root", num);
        EXPECT_REFUSED(ncclReduce(fbuf, gbuf, 4, ncclFloat, ncclSum, r, two[0], NULL), "root", num);
        EXPECT_REFUSED(ncclGather(fbuf, gbuf, 4, ncclFloat, r, two[0], NULL), "root", num);
        EXPECT_REFUSED(ncclScatter(fbuf, gbuf, 4, ncclFloat, r, two[0], NULL), "root", num);
    }
    /* On one rank, root 1 is already out of range. */
    err_comm = one;
    EXPECT_REFUSED(ncclBroadcast(fbuf, gbuf, 4, ncclFloat, 1, one, NULL), "root", "1");
    EXPECT_NO_FAILS();
}
END_TEST

START_TEST(test_bad_peer)
{
    int peers[] = {2, 77, -1}; /* -1 last: a crash there would hide the rest */
    err_comm = two[0];
    for (size_t k = 0; k < sizeof(peers) / sizeof(peers[0]); k++) {
        char num[16];
        snprintf(num, sizeof(num), "%d", peers[k]);
        snprintf(note, sizeof(note), "[peer %d of 2 ranks] ", peers[k]);
        EXPECT_REFUSED(ncclSend(fbuf, 4, ncclFloat, peers[k], two[0], NULL), "peer", num);
        EXPECT_REFUSED(ncclRecv(gbuf, 4, ncclFloat, peers[k], two[0], NULL), "peer", num);
    }
    EXPECT_NO_FAILS();
}
END_TEST

START_TEST(test_null_comm)
{
    int v;
    ncclComm_t child;
    ncclRedOp_t op;
    float s = 1.0f;
    EXPECT_REFUSED(ncclAllReduce(fbuf, gbuf, 4, ncclFloat, ncclSum, NULL, NULL), "comm");
    EXPECT_REFUSED(ncclBroadcast(fbuf, gbuf, 4, ncclFloat, 0, NULL, NULL), "comm");
    EXPECT_REFUSED(ncclReduce(fbuf, gbuf, 4, ncclFloat, ncclSum, 0, NULL, NULL), "comm");
    EXPECT_REFUSED(ncclAllGather(fbuf, gbuf, 4, ncclFloat, NULL, NULL), "comm");
    EXPECT_REFUSED(ncclReduceScatter(fbuf, gbuf, 4, ncclFloat, ncclSum, NULL, NULL), "comm");
    EXPECT_REFUSED(ncclAlltoAll(fbuf, gbuf, 4, ncclFloat, NULL, NULL), "comm");
    EXPECT_REFUSED(ncclGather(fbuf, gbuf, 4, ncclFloat, 0, NULL, NULL), "comm");
    EXPECT_REFUSED(ncclScatter(fbuf, gbuf, 4, ncclFloat, 0, NULL, NULL), "comm");
    EXPECT_REFUSED(ncclSend(fbuf, 4, ncclFloat, 0, NULL, NULL), "comm");
    EXPECT_REFUSED(ncclRecv(gbuf, 4, ncclFloat, 0, NULL, NULL), "comm");
    EXPECT_REFUSED(ncclCommCount(NULL, &v), "comm");
    EXPECT_REFUSED(ncclCommUserRank(NULL, &v), "comm");
    EXPECT_REFUSED(ncclCommCuDevice(NULL, &v), "comm");
    EXPECT_REFUSED(ncclCommSplit(NULL, 0, 0, &child, NULL), "comm");
    EXPECT_REFUSED(ncclCommFinalize(NULL), "comm");
    EXPECT_REFUSED(ncclRedOpCreatePreMulSum(&op, &s, ncclFloat, ncclScalarHostImmediate, NULL),
                   "comm");
    /* NULL output pointers. */
    EXPECT_REFUSED(ncclGetVersion(NULL), "version");
    EXPECT_REFUSED(ncclGetUniqueId(NULL), "id");
    EXPECT_REFUSED(ncclCommCount(one, NULL), "count");
    EXPECT_REFUSED(ncclCommUserRank(one, NULL), "rank");
    EXPECT_REFUSED(ncclCommSplit(one, 0, 0, NULL, NULL), "newcomm");
    EXPECT_NO_FAILS();
}
END_TEST

/* A destroyed communicator is refused (not used: under ASan a read of its memory would
 * abort), also after the allocator has handed its memory out again. */
START_TEST(test_use_after_destroy)
{
    ncclUniqueId id;
    ncclComm_t dead, aborted;
    int v;
    ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
    ck_assert_int_eq(ncclCommInitRank(&dead, 1, id, 0), ncclSuccess);
    ck_assert_int_eq(ncclCommDestroy(dead), ncclSuccess);
    EXPECT_REFUSED(ncclAllReduce(fbuf, gbuf, 4, ncclFloat, ncclSum, dead, NULL), "comm");
    EXPECT_REFUSED(ncclCommCount(dead, &v), "comm");
    EXPECT_REFUSED(ncclSend(fbuf, 4, ncclFloat, 0, dead, NULL), "comm");
    EXPECT_REFUSED(ncclCommDestroy(dead), "comm");
    EXPECT_REFUSED(ncclCommFinalize(dead), "comm");
    /* Churn the heap so the old memory is reused and overwritten. */
    void *blocks[256];
    for (int k = 0; k < 256; k++) {
        blocks[k] = malloc((size_t)(16 << (k % 12)));
        memset(blocks[k], 0xff, (size_t)(16 << (k % 12)));
    }
    EXPECT_REFUSED(ncclAllReduce(fbuf, gbuf, 4, ncclFloat, ncclSum, dead, NULL), "comm");
    EXPECT_REFUSED(ncclCommUserRank(dead, &v), "comm");
    for (int k = 0; k < 256; k++) {
        free(blocks[k]);
    }
    ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
    ck_assert_int_eq(ncclCommInitRank(&aborted, 1, id, 0), ncclSuccess);
    ck_assert_int_eq(ncclCommAbort(aborted), ncclSuccess);
    EXPECT_REFUSED(ncclAllReduce(fbuf, gbuf, 4, ncclFloat, ncclSum, aborted, NULL), "comm");
    /* Destroying NULL is a no-op in NCCL. */
    ck_assert_int_eq(ncclCommDestroy(NULL), ncclSuccess);
    EXPECT_NO_FAILS();
}
END_TEST

static int body_init_with_id(brt_rank_ctx_t *ctx)
{
    const ncclUniqueId *id = ctx->arg;
    ncclComm_t c = NULL;
    double t0 = brt_now();
    ncclResult_t res = ncclCommInitRank(&c, 2, *id, 0);
    ctx->report->result = res;
    ctx->report->t_mark = brt_now() - t0;
    snprintf(ctx->report->msg, sizeof(ctx->report->msg), "%s", ncclGetLastError(NULL));
    if (res == ncclSuccess) {
        ncclCommAbort(c);
    }
    return 0;
}

/* Init with id in a child; returns its result, text in msg, seconds in *secs. */
static ncclResult_t init_in_child(const ncclUniqueId *id, double deadline, char *msg, size_t len,
                                  double *secs)
{
    brt_procs_t p;
    char out[4096];
    ck_assert_int_eq(brt_procs_start(&p, 1, body_init_with_id, (void *)id, out, sizeof(out)), 0);
    int bad = brt_procs_wait(&p, brt_now() + deadline, 0, out, sizeof(out), 1);
    ck_assert_msg(!bad, "ncclCommInitRank with a bad unique id did not return within %.0f s: %s",
                  deadline, out);
    ncclResult_t res = (ncclResult_t)p.reports[0].result;
    snprintf(msg, len, "%s", p.reports[0].msg);
    *secs = p.reports[0].t_mark;
    brt_procs_free(&p);
    return res;
}

START_TEST(test_bad_unique_id)
{
    ncclUniqueId id;
    char msg[3072];
    double secs;
    ncclResult_t res;

    memset(&id, 0, sizeof(id));
    res = init_in_child(&id, 30, msg, sizeof(msg), &secs);
    ck_assert_msg(res == ncclInvalidArgument || res == ncclInvalidUsage,
                  "all-zero unique id: ncclCommInitRank returned %d after %.1f s: %s", (int)res,
                  secs, msg);
    ck_assert_msg(brt_text_has(msg, "id"), "all-zero unique id: text: %s", msg);

    uint64_t x = 12345;
    for (size_t k = 0; k < sizeof(id.internal); k++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        id.internal[k] = (char)(x >> 56);
    }
    res = init_in_child(&id, 30, msg, sizeof(msg), &secs);
    ck_assert_msg(res == ncclInvalidArgument || res == ncclInvalidUsage,
                  "random unique id: ncclCommInitRank returned %d after %.1f s: %s", (int)res, secs,
                  msg);
    ck_assert_msg(brt_text_has(msg, "id"), "random unique id: text: %s", msg);
}
END_TEST

static int body_make_id_and_exit(brt_rank_ctx_t *ctx)
{
    ncclUniqueId id;
    if (ncclGetUniqueId(&id) != ncclSuccess) {
        return 1;
    }
    memcpy(ctx->report->msg, &id, sizeof(id));
    return 0;
}

/* An id whose root (the process that made it) is gone: init fails within a few seconds
 * (refusals for 2 s in a row), not after BRAID_BOOTSTRAP_TIMEOUT, and says so. */
START_TEST(test_stale_unique_id)
{
    brt_procs_t p;
    char out[4096], msg[3072];
    ncclUniqueId id;
    double secs;
    ck_assert_int_eq(brt_procs_start(&p, 1, body_make_id_and_exit, NULL, out, sizeof(out)), 0);
    ck_assert_int_eq(brt_procs_wait(&p, brt_now() + 30, 0, out, sizeof(out), 1), 0);
    memcpy(&id, p.reports[0].msg, sizeof(id));
    brt_procs_free(&p);
    ncclResult_t res = init_in_child(&id, 60, msg, sizeof(msg), &secs);
    ck_assert_msg(res != ncclSuccess, "init with the id of an exited root succeeded");
    fprintf(stderr, "stale unique id: ncclCommInitRank returned %d after %.1f s: %s\n", (int)res,
            secs, msg);
    ck_assert_msg(secs < 6.0, "init with the id of an exited root took %.1f s to fail", secs);
    ck_assert_msg(brt_text_has(msg, "refused"), "the error does not say the root refused: %s", msg);
}
END_TEST

START_TEST(test_bad_nranks_rank)
{
    ncclUniqueId id;
    ncclComm_t c;
    ncclComm_t cs[2];
    ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
    EXPECT_REFUSED(ncclCommInitRank(&c, 0, id, 0), "nranks", "0");
    EXPECT_REFUSED(ncclCommInitRank(&c, -1, id, 0), "nranks", "-1");
    EXPECT_REFUSED(ncclCommInitRank(&c, 2, id, -1), "rank", "-1");
    EXPECT_REFUSED(ncclCommInitRank(&c, 2, id, 2), "rank", "2");
    EXPECT_REFUSED(ncclCommInitRank(&c, 2, id, 5), "rank", "5");
    EXPECT_REFUSED(ncclCommInitRank(NULL, 1, id, 0), "comm");
    EXPECT_REFUSED(ncclCommInitAll(cs, 0, NULL), "0");
    EXPECT_REFUSED(ncclCommInitAll(NULL, 2, NULL), "comm");
    EXPECT_REFUSED(ncclCommInitRankScalable(&c, 1, 0, 0, &id, NULL), "0");
    EXPECT_REFUSED(ncclCommInitRankScalable(&c, 1, 0, 1, NULL, NULL), "id");
    /* The id was not spent by the refusals: a good init with it still works. */
    ck_assert_int_eq(ncclCommInitRank(&c, 1, id, 0), ncclSuccess);
    ck_assert_int_eq(ncclCommDestroy(c), ncclSuccess);
    ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
    ck_assert_int_eq(ncclCommInitRankScalable(&c, 1, 0, 1, &id, NULL), ncclSuccess);
    ck_assert_int_eq(ncclCommDestroy(c), ncclSuccess);
    EXPECT_NO_FAILS();
}
END_TEST

START_TEST(test_bad_config)
{
    ncclUniqueId id;
    ncclComm_t c;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);

    cfg.magic = 0;
    EXPECT_REFUSED(ncclCommInitRankConfig(&c, 1, id, 0, &cfg), "magic");
    cfg = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
    cfg.magic = 0xdeadbeef;
    EXPECT_REFUSED(ncclCommInitRankConfig(&c, 1, id, 0, &cfg), "magic");
    cfg = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
    cfg.size = 0;
    EXPECT_REFUSED(ncclCommInitRankConfig(&c, 1, id, 0, &cfg), "size");
    cfg = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
    cfg.size = (size_t)1 << 40;
    EXPECT_REFUSED(ncclCommInitRankConfig(&c, 1, id, 0, &cfg), "size");
    cfg = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
    cfg.version = 0;
    EXPECT_REFUSED(ncclCommInitRankConfig(&c, 1, id, 0, &cfg), "version");
    cfg = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 7;
    EXPECT_REFUSED(ncclCommInitRankConfig(&c, 1, id, 0, &cfg), "blocking");
    /* Split checks its config the same way. */
    cfg = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
    cfg.magic = 1;
    ncclComm_t child;
    EXPECT_REFUSED(ncclCommSplit(one, 0, 0, &child, &cfg), "magic");
    /* And a good config works. */
    cfg = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
    cfg.commName = "api-args";
    cfg.blocking = 1;
    ck_assert_int_eq(ncclCommInitRankConfig(&c, 1, id, 0, &cfg), ncclSuccess);
    ck_assert_int_eq(ncclCommDestroy(c), ncclSuccess);
    EXPECT_NO_FAILS();
}
END_TEST

START_TEST(test_redops)
{
    ncclRedOp_t op, op2;
    float s = 2.0f;
    err_comm = one;
    EXPECT_REFUSED(ncclRedOpDestroy(ncclSum, one), "op");
    EXPECT_REFUSED(ncclRedOpDestroy(ncclAvg, one), "op");
    EXPECT_REFUSED(ncclRedOpDestroy((ncclRedOp_t)(ncclNumOps + 3), one), "op");
    EXPECT_REFUSED(ncclRedOpCreatePreMulSum(&op, NULL, ncclFloat, ncclScalarHostImmediate, one),
                   "scalar");
    EXPECT_REFUSED(ncclRedOpCreatePreMulSum(NULL, &s, ncclFloat, ncclScalarHostImmediate, one),
                   "op");
    EXPECT_REFUSED(ncclRedOpCreatePreMulSum(&op, &s, ncclFloat, (ncclScalarResidence_t)5, one),
                   "residence");
    ck_assert_int_eq(ncclRedOpCreatePreMulSum(&op, &s, ncclFloat, ncclScalarHostImmediate, one),
                     ncclSuccess);
    ck_assert_int_ge((int)op, (int)ncclNumOps);
    /* Made for float: another type, or another communicator, is refused. */
    EXPECT_REFUSED(ncclAllReduce(fbuf, gbuf, 4, ncclInt32, op, one, NULL), "op");
    EXPECT_REFUSED(ncclAllReduce(fbuf, gbuf, 4, ncclFloat, op, two[0], NULL), "op");
    fbuf[0] = 3.0f;
    ck_assert_int_eq(ncclAllReduce(fbuf, gbuf, 1, ncclFloat, op, one, NULL), ncclSuccess);
    ck_assert(gbuf[0] == 6.0f);
    ck_assert_int_eq(ncclRedOpDestroy(op, one), ncclSuccess);
    EXPECT_REFUSED(ncclRedOpDestroy(op, one), "op");
    EXPECT_REFUSED(ncclAllReduce(fbuf, gbuf, 4, ncclFloat, op, one, NULL), "op");
    /* ncclScalarDevice: the scalar is read when the collective runs, not at creation. */
    float live = 2.0f;
    ck_assert_int_eq(ncclRedOpCreatePreMulSum(&op, &live, ncclFloat, ncclScalarDevice, one),
                     ncclSuccess);
    live = 5.0f;
    fbuf[0] = 3.0f;
    ck_assert_int_eq(ncclAllReduce(fbuf, gbuf, 1, ncclFloat, op, one, NULL), ncclSuccess);
    ck_assert_msg(gbuf[0] == 15.0f, "ncclScalarDevice scalar read at creation: got %g",
                  (double)gbuf[0]);
    ck_assert_int_eq(ncclRedOpDestroy(op, one), ncclSuccess);
    /* Ops are per communicator and get reused after destruction. */
    ck_assert_int_eq(ncclRedOpCreatePreMulSum(&op2, &s, ncclFloat, ncclScalarHostImmediate, one),
                     ncclSuccess);
    ck_assert_int_eq(ncclRedOpDestroy(op2, one), ncclSuccess);
    EXPECT_NO_FAILS();
}
END_TEST

START_TEST(test_groups_unbalanced)
{
    err_comm = NULL;
    EXPECT_REFUSED(ncclGroupEnd(), "group");
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
    ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
    EXPECT_REFUSED(ncclGroupEnd(), "group");
    /* A refused call inside a group: the group still ends, and the thread is usable. */
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    EXPECT_REFUSED(ncclAllReduce(fbuf, gbuf, 4, (ncclDataType_t)42, ncclSum, one, NULL),
                   "datatype");
    ncclResult_t end = ncclGroupEnd();
    /* NCCL keeps the first error of a group and returns it from ncclGroupEnd, so code that
     * checks only ncclGroupEnd still sees it. */
    if (end != ncclInvalidArgument) {
        soft_fail("ncclGroupEnd after a refused call in the group returned %d, not the "
                  "call's ncclInvalidArgument",
                  (int)end);
    }
    fbuf[0] = 5.0f;
    ck_assert_int_eq(ncclAllReduce(fbuf, gbuf, 1, ncclFloat, ncclSum, one, NULL), ncclSuccess);
    ck_assert(gbuf[0] == 5.0f);
    EXPECT_REFUSED(ncclGroupEnd(), "group");
    EXPECT_NO_FAILS();
}
END_TEST

/* A send to oneself with no receive can never complete: an error, not a hang. */
START_TEST(test_unmatched_self_send)
{
    ncclResult_t res = ncclSend(fbuf, 4, ncclFloat, 0, one, NULL);
    ck_assert_msg(res != ncclSuccess, "a lone ncclSend to self succeeded");
    fprintf(stderr, "lone send to self: %d: %s\n", (int)res, ncclGetLastError(one));
    /* Matched inside a group, it works. */
    fbuf[0] = 9.0f;
    gbuf[0] = 0.0f;
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    ck_assert_int_eq(ncclSend(fbuf, 1, ncclFloat, 0, one, NULL), ncclSuccess);
    ck_assert_int_eq(ncclRecv(gbuf, 1, ncclFloat, 0, one, NULL), ncclSuccess);
    ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
    ck_assert(gbuf[0] == 9.0f);
}
END_TEST

/* NCCL 2.28's device API, declared in nccl_device.h (not nccl.h): exported, refused. */
struct ncclDevComm;
struct ncclDevCommRequirements;
ncclResult_t ncclDevCommCreate(ncclComm_t comm, const struct ncclDevCommRequirements *reqs,
                               struct ncclDevComm *out);
ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const struct ncclDevComm *devComm);

START_TEST(test_device_api_refused)
{
    long storage[64] = {0};
    err_comm = one;
    EXPECT_REFUSED(ncclDevCommCreate(one, NULL, (struct ncclDevComm *)(void *)storage),
                   "ncclDevCommCreate", "rank 0", "device API", "not implemented");
    EXPECT_REFUSED(ncclDevCommDestroy(one, (const struct ncclDevComm *)(void *)storage),
                   "ncclDevCommDestroy", "not implemented");
    err_comm = NULL;
    EXPECT_REFUSED(ncclDevCommCreate(NULL, NULL, NULL), "ncclDevCommCreate", "NULL");
    EXPECT_NO_FAILS();
}
END_TEST

START_TEST(test_error_strings)
{
    const char *seen[ncclNumResults];
    for (int r = 0; r < (int)ncclNumResults; r++) {
        seen[r] = ncclGetErrorString((ncclResult_t)r);
        ck_assert_ptr_nonnull(seen[r]);
        ck_assert_uint_gt(strlen(seen[r]), 0);
        for (int q = 0; q < r; q++) {
            ck_assert_str_ne(seen[q], seen[r]);
        }
    }
    ck_assert_ptr_nonnull(ncclGetErrorString((ncclResult_t)1000));
}
END_TEST

/* ncclGroupSimulateEnd plans the group's collectives and runs nothing: the estimate is
 * positive and grows with the size, and a real group afterwards still matches its peer
 * (the simulated calls' sequence numbers were given back). */
START_TEST(test_group_simulate)
{
    enum { N = 1 << 18 };
    float *buf[2];
    float est[2];
    for (int k = 0; k < 2; k++) {
        size_t count = k == 0 ? 16 : N;
        ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
        ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
        for (int r = 0; r < 2; r++) {
            buf[r] = calloc(N, sizeof(float));
            ck_assert_int_eq(ncclAllReduce(buf[r], buf[r], count, ncclFloat, ncclSum, two[r], NULL),
                             ncclSuccess);
        }
        ck_assert_int_eq(ncclGroupSimulateEnd(&info), ncclSuccess);
        ck_assert(info.estimatedTime > 0.0f);
        est[k] = info.estimatedTime;
        for (int r = 0; r < 2; r++) {
            free(buf[r]);
        }
    }
    ck_assert(est[1] > est[0]);
    for (int r = 0; r < 2; r++) {
        buf[r] = malloc(N * sizeof(float));
        for (int i = 0; i < N; i++) {
            buf[r][i] = (float)(r + 1);
        }
    }
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < 2; r++) {
        ck_assert_int_eq(ncclAllReduce(buf[r], buf[r], N, ncclFloat, ncclSum, two[r], NULL),
                         ncclSuccess);
    }
    ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
    ck_assert(buf[0][0] == 3.0f && buf[1][N - 1] == 3.0f);
    free(buf[0]);
    free(buf[1]);
    ncclSimInfo_t bad = NCCL_SIM_INFO_INITIALIZER;
    ck_assert_int_eq(ncclGroupSimulateEnd(&bad), ncclInvalidUsage); /* no group open */
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    ck_assert_int_eq(ncclGroupSimulateEnd(NULL), ncclInvalidArgument);
    ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
}
END_TEST

static Suite *api_args_suite(void)
{
    Suite *s = suite_create("api_args");
    TCase *tc = tcase_create("calls");
    tcase_set_timeout(tc, 60 * brt_time_scale());
    tcase_add_checked_fixture(tc, comms_setup, comms_teardown);
    tcase_add_test(tc, test_null_buffers);
    tcase_add_test(tc, test_device_api_refused);
    tcase_add_test(tc, test_group_simulate);
    tcase_add_test(tc, test_count_overflow);
    tcase_add_test(tc, test_bad_datatype);
    tcase_add_test(tc, test_bad_op);
    tcase_add_test(tc, test_bad_root);
    tcase_add_test(tc, test_bad_peer);
    tcase_add_test(tc, test_null_comm);
    tcase_add_test(tc, test_redops);
    tcase_add_test(tc, test_bad_config);
    tcase_add_test(tc, test_groups_unbalanced);
    tcase_add_test(tc, test_unmatched_self_send);
    suite_add_tcase(s, tc);

    tc = tcase_create("init");
    tcase_set_timeout(tc, 120 * brt_time_scale());
    tcase_add_test(tc, test_use_after_destroy);
    tcase_add_test(tc, test_bad_unique_id);
    tcase_add_test(tc, test_stale_unique_id);
    tcase_add_test(tc, test_bad_nranks_rank);
    tcase_add_test(tc, test_error_strings);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(api_args_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
