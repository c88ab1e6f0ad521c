/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "mp_comm": communicator life cycle and groups with several ranks.
 *   queries    ncclGetVersion, ncclCommCount/UserRank/CuDevice, ncclGetErrorString
 *   groups     an AllReduce and a ring of sends/recvs in one group; every collective in
 *              one group; 32 AllReduces in one group; several send/recv exchanges with
 *              the same peers in one group (matched in order)
 *   split      ncclCommSplit by parity with keys that reverse the order, NOCOLOR giving
 *              NULL, a split of a split, collectives on the children checked against the
 *              reference while the parent stays usable
 *   lifecycle  a second, nonblocking communicator (ncclInProgress polled through
 *              ncclCommGetAsyncError) made from an id broadcast over the first, with the
 *              ranks reversed, used interleaved with the first; finalize and destroy
 *   concurrent two threads per rank, each with its own communicator, run the thin matrix
 *              at the same time
 *   late_receiver  ranks send to rank 0 and leave at once (destroy, exit) before rank 0
 *              posts its receives: the data they sent must still arrive
 *
 *   check_mp_comm --mode proc|threads|initall --ranks 1,2,4
 *
 * proc and threads run one rank per process or thread (ncclCommInitRank); initall makes
 * the ranks with ncclCommInitAll (or grouped ncclCommInitRank) and drives them all from
 * this thread, with ncclGroupStart/End around the per-rank calls.
 */
#include <check.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "brt_check.h"
#include "brt_coll.h"
#include "brt_launch.h"

static struct {
    int mode;
    int ranks[BRT_MAX_RANKS];
    int nranks_list;
} cfg;

#define ERR_LEN 16384
#define TIMEOUT 120.0

static ncclResult_t wait_done(ncclComm_t comm, ncclResult_t res);

static brt_case_t mk(brt_func_t f, ncclDataType_t t, int op, size_t count, int root, int inplace,
                     uint32_t seed)
{
    brt_case_t c = {.func = f,
                    .type = t,
                    .op = op,
                    .count = count,
                    .root = root,
                    .inplace = inplace,
                    .null_unused = 0,
                    .seed = seed};
    return c;
}

/* The groups of the "groups" TCase for n ranks; returns how many lists, each in lists[k]
 * with count counts[k]. */
#define NGROUPS 4
#define GROUP_MAX 40
static int group_lists(int n, brt_case_t lists[NGROUPS][GROUP_MAX], size_t counts[NGROUPS])
{
    /* An AllReduce and a ring exchange. */
    lists[0][0] = mk(BRT_ALLREDUCE, ncclInt32, BRT_SUM, 4097, 0, 0, 11);
    lists[0][1] = mk(BRT_SENDRECV, ncclFloat32, BRT_SUM, 1000, 1 % n, 0, 12);
    counts[0] = 2;
    /* Every collective at once, sizes around and above a 64 KiB FIFO. */
    lists[1][0] = mk(BRT_ALLREDUCE, ncclBfloat16, BRT_AVG, 7, 0, 0, 21);
    lists[1][1] = mk(BRT_BROADCAST, ncclInt64, BRT_SUM, 70001, n - 1, 0, 22);
    lists[1][2] = mk(BRT_REDUCE, ncclFloat16, BRT_MAX, 4097, 1 % n, 1, 23);
    lists[1][3] = mk(BRT_ALLGATHER, ncclUint8, BRT_SUM, 100003, 0, 1, 24);
    lists[1][4] = mk(BRT_REDUCESCATTER, ncclFloat64, BRT_PREMULSUM, 513, 0, 0, 25);
    lists[1][5] = mk(BRT_ALLTOALL, ncclInt8, BRT_SUM, 1001, 0, 0, 26);
    lists[1][6] = mk(BRT_GATHER, ncclFloat8e4m3, BRT_SUM, 333, 0, 1, 27);
    lists[1][7] = mk(BRT_SCATTER, ncclFloat8e5m2, BRT_SUM, 4097, n / 2, 0, 28);
    lists[1][8] = mk(BRT_SENDRECV, ncclUint32, BRT_SUM, 77, BRT_SHIFT_ALL, 0, 29);
    lists[1][9] = mk(BRT_BCAST, ncclUint64, BRT_SUM, 9, 0, 0, 30);
    lists[1][10] = mk(BRT_REDUCE, ncclInt32, BRT_PROD, 65539, n - 1, 0, 31);
    lists[1][11] = mk(BRT_ALLREDUCE, ncclFloat8e5m2, BRT_MIN, 200000, 0, 1, 32);
    counts[1] = 12;
    /* Many small AllReduces. */
    for (int k = 0; k < 32; k++) {
        lists[2][k] = mk(BRT_ALLREDUCE, ncclFloat32, BRT_SUM, (size_t)k * 37 + 1, 0, k & 1,
                         (uint32_t)(100 + k));
    }
    counts[2] = 32;
    /* The same peers several times: sends and receives match in the order they were made. */
    lists[3][0] = mk(BRT_SENDRECV, ncclInt8, BRT_SUM, 10, 1 % n, 0, 41);
    lists[3][1] = mk(BRT_SENDRECV, ncclInt8, BRT_SUM, 4097, 1 % n, 0, 42);
    lists[3][2] = mk(BRT_SENDRECV, ncclInt64, BRT_SUM, 3, BRT_SHIFT_ALL, 0, 43);
    lists[3][3] = mk(BRT_SENDRECV, ncclFloat64, BRT_SUM, 70000, (n - 1) % n, 0, 44);
    counts[3] = 4;
    return NGROUPS;
}

static int run_groups(ncclComm_t *comms, int nlocal, int n, char *err, size_t errlen)
{
    static brt_case_t lists[NGROUPS][GROUP_MAX];
    size_t counts[NGROUPS];
    int ng = group_lists(n, lists, counts);
    for (int g = 0; g < ng; g++) {
        int ret = brt_group_run(comms, nlocal, lists[g], counts[g], err, errlen);
        if (ret != 0) {
            size_t used = strlen(err);
            snprintf(err + used, errlen - used, " [group %d]", g);
            return ret;
        }
    }
    return 0;
}

/* ---- per-rank bodies (proc and threads modes) ---- */

static int body_queries(brt_rank_ctx_t *ctx, ncclComm_t comm)
{
    int v = 0, count = -1, rank = -1, dev = -7, bad = 0;
    ncclResult_t res;

    if (ncclGetVersion(&v) != ncclSuccess || v != 23203 || v != NCCL_VERSION_CODE) {
        brt_fail(ctx, "ncclGetVersion gave %d, expected 23203", v);
        bad = 1;
    }
    if (ncclCommCount(comm, &count) != ncclSuccess || count != ctx->nranks) {
        brt_fail(ctx, "ncclCommCount gave %d, expected %d", count, ctx->nranks);
        bad = 1;
    }
    if (ncclCommUserRank(comm, &rank) != ncclSuccess || rank != ctx->rank) {
        brt_fail(ctx, "ncclCommUserRank gave %d, expected %d", rank, ctx->rank);
        bad = 1;
    }
    res = ncclCommCuDevice(comm, &dev);
    if (res != ncclSuccess || dev == -7) {
        brt_fail(ctx, "ncclCommCuDevice returned %d and device %d", (int)res, dev);
        bad = 1;
    }
    ncclResult_t async = ncclInternalError;
    if (ncclCommGetAsyncError(comm, &async) != ncclSuccess || async != ncclSuccess) {
        brt_fail(ctx, "ncclCommGetAsyncError on a healthy communicator gave %d", (int)async);
        bad = 1;
    }
    return bad;
}

/* Shared memory objects left behind by a killed process that had the same id, named as
 * the library named them before its names took a random number per load ("/braid-<pid>-<k>"
 * and "/braid-arena-<pid>-<k>"): made before init (rank_main), they must not stop this
 * one. (A name of today's form cannot be foreseen here; br_shm_create_own's removal of
 * one that exists is what made these pass when the names had no load number.) */
#define STALE_SHM 64

static void stale_shm_name(char *name, size_t len, int arena, int k)
{
    snprintf(name, len, arena ? "/braid-arena-%d-%d" : "/braid-%d-%d", (int)getpid(), k);
}

static void stale_shm_make(void)
{
    for (int arena = 0; arena < 2; arena++) {
        for (int k = 0; k < STALE_SHM; k++) {
            char name[64];
            stale_shm_name(name, sizeof(name), arena, k);
            int fd = shm_open(name, O_CREAT | O_RDWR, 0600);
            if (fd >= 0) {
                close(fd);
            }
        }
    }
}

/* Remove what the library did not use (it unlinks the ones it replaced itself). */
static void stale_shm_clean(void)
{
    for (int arena = 0; arena < 2; arena++) {
        for (int k = 0; k < STALE_SHM; k++) {
            char name[64];
            stale_shm_name(name, sizeof(name), arena, k);
            shm_unlink(name);
        }
    }
}

/* Collectives work (init already did, over names the stale objects held). */
static int body_stale_shm(brt_rank_ctx_t *ctx, ncclComm_t comm)
{
    char err[1024];
    brt_case_t c = mk(BRT_ALLREDUCE, ncclInt32, BRT_SUM, 100003, 0, 0, 3);
    int bad = brt_cases_run(&comm, 1, &c, 1, ctx, err, sizeof(err)) != 0;
    if (bad) {
        brt_fail(ctx, "AllReduce beside stale shared memory objects: %s", err);
    }
    stale_shm_clean();
    return bad;
}

static int body_groups(brt_rank_ctx_t *ctx, ncclComm_t comm)
{
    char *err = malloc(ERR_LEN);
    int ret;
    if (err == NULL) {
        return 1;
    }
    brt_doing(ctx, "grouped collectives");
    ret = run_groups(&comm, 1, ctx->nranks, err, ERR_LEN);
    if (ret != 0) {
        brt_fail(ctx, "%s", err);
    }
    free(err);
    return ret;
}

/* AllReduce (sum, int64) of v over comm; 0 and the result in *out, or 1. */
static int allreduce_i64(brt_rank_ctx_t *ctx, ncclComm_t comm, int64_t v, int64_t *out,
                         const char *what)
{
    int64_t in = v;
    ncclResult_t res = wait_done(comm, ncclAllReduce(&in, out, 1, ncclInt64, ncclSum, comm, NULL));
    if (res != ncclSuccess) {
        brt_fail(ctx, "%s: ncclAllReduce returned %d: %s", what, (int)res, ncclGetLastError(comm));
        return 1;
    }
    return 0;
}

static int check_comm_shape(brt_rank_ctx_t *ctx, ncclComm_t c, int want_n, int want_r,
                            const char *what)
{
    int n = -1, r = -1;
    if (ncclCommCount(c, &n) != ncclSuccess || ncclCommUserRank(c, &r) != ncclSuccess ||
        n != want_n || r != want_r) {
        brt_fail(ctx, "%s: child has %d ranks and rank %d, expected %d and %d", what, n, r, want_n,
                 want_r);
        return 1;
    }
    return 0;
}

/* Split by parity with keys n - rank: the child ranks run in reverse parent order. */
static int split_parity(brt_rank_ctx_t *ctx, ncclComm_t comm, char *err, size_t errlen)
{
    const int n = ctx->nranks, r = ctx->rank;
    ncclComm_t child = NULL;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    int want_n = 0, want_r = 0, bad = 0;
    brt_case_t *cases = NULL;

    config.commName = "parity";
    for (int q = 0; q < n; q++) {
        want_n += q % 2 == r % 2;
        want_r += q % 2 == r % 2 && q > r;
    }
    brt_doing(ctx, "ncclCommSplit by parity");
    ncclResult_t res = ncclCommSplit(comm, r % 2, n - r, &child, &config);
    if (res != ncclSuccess || child == NULL) {
        brt_fail(ctx, "ncclCommSplit(color %d, key %d) returned %d, comm %p: %s", r % 2, n - r,
                 (int)res, (void *)child, ncclGetLastError(comm));
        return 1;
    }
    bad |= check_comm_shape(ctx, child, want_n, want_r, "parity split");
    /* AllGather of the parent ranks shows the order the keys asked for. */
    int32_t mine = r, all[BRT_MAX_RANKS];
    brt_doing(ctx, "AllGather on the parity child");
    res = ncclAllGather(&mine, all, 1, ncclInt32, child, NULL);
    if (res != ncclSuccess) {
        brt_fail(ctx, "AllGather on the child returned %d: %s", (int)res, ncclGetLastError(child));
        ncclCommAbort(child);
        return 1;
    }
    for (int k = 0, q = n - 1; k < want_n && !bad; k++, q--) {
        q -= q % 2 != r % 2; /* next parent rank of our parity, going down */
        if (all[k] != q) {
            brt_fail(ctx, "parity child: rank %d is parent rank %d, expected %d (keys n - rank)", k,
                     all[k], q);
            bad = 1;
        }
    }
    /* One group with calls on the parent and the child: progressed together. */
    int64_t gin[2] = {r, 1}, gout[2] = {-1, -1};
    brt_doing(ctx, "one group over the parent and the parity child");
    res = ncclGroupStart();
    if (res == ncclSuccess) {
        ncclResult_t a = ncclAllReduce(&gin[0], &gout[0], 1, ncclInt64, ncclSum, comm, NULL);
        ncclResult_t b = ncclAllReduce(&gin[1], &gout[1], 1, ncclInt64, ncclSum, child, NULL);
        res = ncclGroupEnd();
        res = a != ncclSuccess ? a : b != ncclSuccess ? b : res;
    }
    if (res != ncclSuccess || gout[0] != (int64_t)n * (n - 1) / 2 || gout[1] != want_n) {
        brt_fail(ctx,
                 "group over parent and child: returned %d, sums %lld (want %lld) and %lld "
                 "(want %d): %s",
                 (int)res, (long long)gout[0], (long long)n * (n - 1) / 2, (long long)gout[1],
                 want_n, ncclGetLastError(NULL));
        ncclCommAbort(child);
        return 1;
    }
    /* The whole thin matrix on the child; both children run at the same time. */
    size_t ncases = brt_cases_build(BRT_MATRIX_THIN, want_n, &cases);
    int ret = brt_cases_run(&child, 1, cases, ncases, ctx, err, errlen);
    free(cases);
    if (ret != 0) {
        brt_fail(ctx, "on the parity child: %s", err);
        bad = 1;
    }
    if (ret == 2) {
        ncclCommAbort(child);
        return 1;
    }
    res = ncclCommDestroy(child);
    if (res != ncclSuccess) {
        brt_fail(ctx, "ncclCommDestroy of the parity child returned %d", (int)res);
        bad = 1;
    }
    return bad;
}

/* Rank 0 opts out with NCCL_SPLIT_NOCOLOR; the rest split again into two halves. */
static int split_nocolor(brt_rank_ctx_t *ctx, ncclComm_t comm)
{
    const int n = ctx->nranks, r = ctx->rank;
    ncclComm_t child = NULL, grand = NULL;
    int64_t sum = 0;
    int bad = 0;

    brt_doing(ctx, "ncclCommSplit with NOCOLOR on rank 0");
    child = (ncclComm_t)&sum; /* must be overwritten with NULL on rank 0 */
    ncclResult_t res = ncclCommSplit(comm, r == 0 ? NCCL_SPLIT_NOCOLOR : 7, 0, &child, NULL);
    if (res != ncclSuccess) {
        brt_fail(ctx, "ncclCommSplit (rank 0 NOCOLOR) returned %d: %s", (int)res,
                 ncclGetLastError(comm));
        return 1;
    }
    if (r == 0) {
        if (child != NULL) {
            brt_fail(ctx, "ncclCommSplit with NCCL_SPLIT_NOCOLOR gave comm %p, expected NULL",
                     (void *)child);
            return 1;
        }
        return 0;
    }
    if (child == NULL || check_comm_shape(ctx, child, n - 1, r - 1, "NOCOLOR split")) {
        brt_fail(ctx, "NOCOLOR split: rank %d got comm %p", r, (void *)child);
        return 1;
    }
    if (allreduce_i64(ctx, child, r, &sum, "NOCOLOR child")) {
        ncclCommAbort(child);
        return 1;
    }
    if (sum != (int64_t)n * (n - 1) / 2) {
        brt_fail(ctx, "NOCOLOR child: AllReduce of parent ranks 1..%d gave %lld", n - 1,
                 (long long)sum);
        bad = 1;
    }
    /* A split of the split: halves by child rank, negative keys reversing each half. */
    int cr = r - 1, half = (n - 1) / 2, color = cr < half ? 0 : 1;
    int size = color == 0 ? half : n - 1 - half;
    int pos = color == 0 ? half - 1 - cr : (n - 2) - cr;
    brt_doing(ctx, "ncclCommSplit of the NOCOLOR child");
    res = ncclCommSplit(child, color, -cr, &grand, NULL);
    if (res != ncclSuccess || grand == NULL) {
        brt_fail(ctx, "second-level ncclCommSplit returned %d: %s", (int)res,
                 ncclGetLastError(child));
        ncclCommAbort(child);
        return 1;
    }
    bad |= check_comm_shape(ctx, grand, size, pos, "split of a split");
    if (allreduce_i64(ctx, grand, r, &sum, "grandchild") == 0) {
        int64_t want = 0;
        for (int q = 1; q < n; q++) {
            want += ((q - 1 < half ? 0 : 1) == color) ? q : 0;
        }
        if (sum != want) {
            brt_fail(ctx, "grandchild: AllReduce gave %lld, expected %lld", (long long)sum,
                     (long long)want);
            bad = 1;
        }
    } else {
        bad = 1;
    }
    /* Destroy the parent of grand first: each communicator stands alone. */
    bad |= ncclCommDestroy(child) != ncclSuccess;
    bad |= ncclCommDestroy(grand) != ncclSuccess;
    return bad;
}

static int body_split(brt_rank_ctx_t *ctx, ncclComm_t comm)
{
    char *err = malloc(ERR_LEN);
    int64_t sum = 0;
    int bad;
    if (err == NULL) {
        return 1;
    }
    bad = split_parity(ctx, comm, err, ERR_LEN);
    free(err);
    if (bad) {
        return 1;
    }
    bad = split_nocolor(ctx, comm);
    /* The parent still works after its children are gone. */
    brt_doing(ctx, "AllReduce on the parent after the splits");
    if (!bad && allreduce_i64(ctx, comm, ctx->rank + 1, &sum, "parent after splits") == 0) {
        int64_t n = ctx->nranks;
        if (sum != n * (n + 1) / 2) {
            brt_fail(ctx, "parent after splits: AllReduce gave %lld", (long long)sum);
            bad = 1;
        }
    }
    return bad;
}

/* A nonblocking call may answer ncclInProgress: poll the communicator until it is done. */
static ncclResult_t wait_done(ncclComm_t comm, ncclResult_t res)
{
    double deadline = brt_now() + 60 * brt_time_scale();
    while (res == ncclInProgress && brt_now() < deadline) {
        if (ncclCommGetAsyncError(comm, &res) != ncclSuccess) {
            return ncclInternalError;
        }
    }
    return res;
}

/* A second communicator over the same ranks, from an id that rank 0 makes and broadcasts
 * over the first; rank order reversed if asked; nonblocking config if asked. */
static int second_comm(brt_rank_ctx_t *ctx, ncclComm_t comm, int reversed, int nonblocking,
                       ncclComm_t *comm2)
{
    const int n = ctx->nranks, r = ctx->rank, r2 = reversed ? n - 1 - r : r;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    ncclUniqueId id2;
    ncclResult_t res;

    memset(&id2, 0, sizeof(id2));
    if (r == 0 && ncclGetUniqueId(&id2) != ncclSuccess) {
        brt_fail(ctx, "ncclGetUniqueId in rank 0: %s", ncclGetLastError(NULL));
        return 1;
    }
    brt_doing(ctx, "Broadcast of a second unique id");
    res = ncclBroadcast(&id2, &id2, sizeof(id2), ncclUint8, 0, comm, NULL);
    if (res != ncclSuccess) {
        brt_fail(ctx, "Broadcast of the id returned %d: %s", (int)res, ncclGetLastError(comm));
        return 1;
    }
    brt_doing(ctx, "init of a second communicator (%s, %s)", reversed ? "reversed" : "same order",
              nonblocking ? "nonblocking" : "blocking");
    config.blocking = nonblocking ? 0 : 1;
    *comm2 = NULL;
    res = ncclCommInitRankConfig(comm2, n, id2, r2, &config);
    if (res == ncclInProgress) {
        res = wait_done(*comm2, res);
    }
    if (res != ncclSuccess) {
        brt_fail(ctx, "second ncclCommInitRankConfig (blocking %d) returned %d: %s",
                 config.blocking, (int)res, ncclGetLastError(NULL));
        return 1;
    }
    return check_comm_shape(ctx, *comm2, n, r2, "second communicator");
}

/* A second communicator, nonblocking and with the ranks reversed, used interleaved with
 * the first; then finalized and destroyed while the first goes on. */
static int body_lifecycle(brt_rank_ctx_t *ctx, ncclComm_t comm)
{
    const int n = ctx->nranks, r = ctx->rank;
    ncclComm_t comm2 = NULL;
    ncclResult_t res;
    int64_t a = 0, b = 0;
    int bad = 0;

    if (second_comm(ctx, comm, 1, 1, &comm2) != 0) {
        return 1;
    }
    for (int it = 0; it < 20 && !bad; it++) {
        brt_doing(ctx, "interleaved AllReduces, iteration %d", it);
        if (allreduce_i64(ctx, it % 2 ? comm : comm2, r * 10 + it, &a, "interleaved") ||
            allreduce_i64(ctx, it % 2 ? comm2 : comm, r, &b, "interleaved")) {
            return 1;
        }
        if (a != 10LL * n * (n - 1) / 2 + (int64_t)it * n || b != (int64_t)n * (n - 1) / 2) {
            brt_fail(ctx, "interleaved iteration %d: sums %lld and %lld", it, (long long)a,
                     (long long)b);
            bad = 1;
        }
    }
    brt_doing(ctx, "ncclCommFinalize/Destroy of the second communicator");
    res = wait_done(comm2, ncclCommFinalize(comm2));
    if (res != ncclSuccess) {
        brt_fail(ctx, "ncclCommFinalize returned %d: %s", (int)res, ncclGetLastError(comm2));
        bad = 1;
    }
    res = ncclCommDestroy(comm2);
    if (res != ncclSuccess) {
        brt_fail(ctx, "ncclCommDestroy returned %d", (int)res);
        bad = 1;
    }
    if (!bad && allreduce_i64(ctx, comm, 1, &a, "first communicator after the second") == 0 &&
        a != n) {
        brt_fail(ctx, "first communicator after destroying the second: sum %lld", (long long)a);
        bad = 1;
    }
    return bad;
}

/* Ranks 1..n-1 send to rank 0 and leave (finalize, destroy, exit) at once; rank 0 posts
 * its receives only later. Data already sent must still arrive: a peer that finished and
 * went away is not an error for the operations it completed. Connections are warmed up
 * by one exchange first, so the late round finds them made. */
static int body_late_receiver(brt_rank_ctx_t *ctx, ncclComm_t comm)
{
    static const size_t counts[] = {1, 4097, 100003};
    const int n = ctx->nranks, r = ctx->rank;
    char err[1024];

    for (int round = 0; round < 2; round++) {
        for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
            const size_t cnt = counts[k];
            const uint32_t seed = (uint32_t)(round * 10 + k);
            unsigned char *buf = malloc(cnt * (size_t)(n > 1 ? n - 1 : 1) + 1);
            ncclResult_t res = ncclGroupStart();
            if (round == 1 && r == 0) {
                brt_doing(ctx, "sleeping before the late receives");
                brt_sleep_ms(500); /* everyone else has sent and is leaving */
            }
            brt_doing(ctx, "late-receiver round %d, count %zu", round, cnt);
            for (int p = 1; p < n && res == ncclSuccess; p++) {
                if (r == 0) {
                    res = ncclRecv(buf + (size_t)(p - 1) * cnt, cnt, ncclInt8, p, comm, NULL);
                } else if (p == r) {
                    brt_fill_bytes(seed, r, 0, buf, 0, cnt);
                    res = ncclSend(buf, cnt, ncclInt8, 0, comm, NULL);
                }
            }
            ncclResult_t end = ncclGroupEnd();
            res = res != ncclSuccess ? res : end;
            if (res != ncclSuccess) {
                brt_fail(ctx, "late-receiver round %d count %zu: returned %d: %s", round, cnt,
                         (int)res, ncclGetLastError(comm));
                free(buf);
                return 1;
            }
            for (int p = 1; p < n && r == 0; p++) {
                if (brt_check_bytes(seed, p, 0, buf + (size_t)(p - 1) * cnt, 0, cnt, err,
                                    sizeof(err))) {
                    brt_fail(ctx, "late-receiver round %d count %zu from rank %d: %s", round, cnt,
                             p, err);
                    free(buf);
                    return 1;
                }
            }
            free(buf);
        }
    }
    /* Rank 0 waits for rank 1 (which takes its time) while the other ranks, done with
     * everything, leave: their closing connections must not fail the wait on rank 1. */
    if (n > 2 && r <= 1) {
        const size_t big = (size_t)1048576 + 3;
        int32_t *b = malloc(big * sizeof(int32_t));
        ncclResult_t res;
        if (r == 1) {
            brt_doing(ctx, "sleeping before the big send to rank 0");
            brt_sleep_ms(700);
            brt_fill_bytes(77, 1, 0, b, 0, big * sizeof(int32_t));
            res = ncclSend(b, big, ncclInt32, 0, comm, NULL);
        } else {
            brt_doing(ctx, "receiving from rank 1 while ranks 2..%d leave", n - 1);
            res = ncclRecv(b, big, ncclInt32, 1, comm, NULL);
        }
        if (res != ncclSuccess) {
            brt_fail(ctx,
                     "big transfer from rank 1 to rank 0 while the other ranks left: "
                     "returned %d: %s",
                     (int)res, ncclGetLastError(comm));
            free(b);
            return 1;
        }
        if (r == 0 && brt_check_bytes(77, 1, 0, b, 0, big * sizeof(int32_t), err, sizeof(err))) {
            brt_fail(ctx, "big transfer from rank 1: %s", err);
            free(b);
            return 1;
        }
        free(b);
    }
    return 0;
}

typedef struct {
    brt_rank_ctx_t *ctx;
    ncclComm_t comm;
    int ret;
    char err[ERR_LEN / 2];
} worker_t;

static void *worker_main(void *a)
{
    worker_t *w = a;
    brt_case_t *cases = NULL;
    size_t ncases = brt_cases_build(BRT_MATRIX_THIN, w->ctx->nranks, &cases);
    for (int round = 0; round < 3 && w->ret == 0; round++) {
        w->ret = brt_cases_run(&w->comm, 1, cases, ncases, NULL, w->err, sizeof(w->err));
    }
    free(cases);
    return NULL;
}

/* Two threads of every rank, each with its own communicator over the same ranks, run
 * the thin matrix at the same time (as frameworks with several process groups do). */
static int body_concurrent(brt_rank_ctx_t *ctx, ncclComm_t comm)
{
    ncclComm_t comm2 = NULL;
    worker_t *w = calloc(2, sizeof(*w));
    pthread_t tid;
    int bad = 0;

    if (w == NULL || second_comm(ctx, comm, 0, 0, &comm2) != 0) {
        free(w);
        return 1;
    }
    w[0].ctx = w[1].ctx = ctx;
    w[0].comm = comm;
    w[1].comm = comm2;
    brt_doing(ctx, "two threads, two communicators, thin matrix at once");
    if (pthread_create(&tid, NULL, worker_main, &w[1]) != 0) {
        brt_fail(ctx, "pthread_create failed");
        ncclCommDestroy(comm2);
        free(w);
        return 1;
    }
    worker_main(&w[0]);
    pthread_join(tid, NULL);
    for (int k = 0; k < 2; k++) {
        if (w[k].ret != 0) {
            brt_fail(ctx, "thread %d (communicator %d): %s", k, k + 1, w[k].err);
            bad = 1;
        }
    }
    if (w[1].ret == 2) {
        ncclCommAbort(comm2);
    } else if (ncclCommDestroy(comm2) != ncclSuccess) {
        brt_fail(ctx, "ncclCommDestroy of the second communicator failed");
        bad = 1;
    }
    free(w);
    return bad;
}

typedef int (*body_fn_t)(brt_rank_ctx_t *ctx, ncclComm_t comm);

/* Init, run the body, finalize and destroy: one rank of the proc and threads modes. */
static int rank_main(brt_rank_ctx_t *ctx)
{
    body_fn_t body = (body_fn_t)ctx->arg;
    ncclComm_t comm = NULL;
    int bad;

    if (body == body_stale_shm) {
        stale_shm_make();
    }
    if (brt_rank_init(ctx, &comm) != ncclSuccess) {
        if (body == body_stale_shm) {
            stale_shm_clean();
        }
        return 1;
    }
    bad = body(ctx, comm);
    if (bad) {
        ncclCommAbort(comm);
        return 1;
    }
    brt_doing(ctx, "ncclCommFinalize/ncclCommDestroy");
    if (ncclCommFinalize(comm) != ncclSuccess || ncclCommDestroy(comm) != ncclSuccess) {
        brt_fail(ctx, "finalize/destroy failed: %s", ncclGetLastError(NULL));
        return 1;
    }
    return 0;
}

/* ---- initall mode: every rank driven by this thread ---- */

static void initall_make(ncclComm_t *comms, int n, int grouped_initrank)
{
    ncclResult_t res;
    if (grouped_initrank) {
        ncclUniqueId id;
        ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
        ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
        for (int r = 0; r < n; r++) {
            res = ncclCommInitRank(&comms[r], n, id, r);
            ck_assert_msg(res == ncclSuccess, "grouped ncclCommInitRank(rank %d) returned %d: %s",
                          r, (int)res, ncclGetLastError(NULL));
        }
        res = ncclGroupEnd();
    } else {
        res = ncclCommInitAll(comms, n, NULL);
    }
    ck_assert_msg(res == ncclSuccess, "%s of %d ranks returned %d: %s",
                  grouped_initrank ? "grouped ncclCommInitRank" : "ncclCommInitAll", n, (int)res,
                  ncclGetLastError(NULL));
    for (int r = 0; r < n; r++) {
        int c = -1, u = -1;
        ck_assert_int_eq(ncclCommCount(comms[r], &c), ncclSuccess);
        ck_assert_int_eq(ncclCommUserRank(comms[r], &u), ncclSuccess);
        ck_assert_int_eq(c, n);
        ck_assert_int_eq(u, r);
    }
}

static void initall_destroy(ncclComm_t *comms, int n)
{
    for (int r = 0; r < n; r++) {
        ck_assert_int_eq(ncclCommFinalize(comms[r]), ncclSuccess);
        ck_assert_int_eq(ncclCommDestroy(comms[r]), ncclSuccess);
    }
}

static void initall_groups(int n, int grouped_initrank)
{
    ncclComm_t comms[BRT_MAX_RANKS];
    char *err = malloc(ERR_LEN);
    brt_report_t rep;
    memset(&rep, 0, sizeof(rep));
    snprintf(rep.doing, sizeof(rep.doing), "grouped collectives over %d ranks in one thread", n);
    brt_watchdog_start(TIMEOUT * brt_time_scale(), &rep);
    initall_make(comms, n, grouped_initrank);
    int ret = run_groups(comms, n, n, err, ERR_LEN);
    ck_assert_msg(ret == 0, "%d ranks, one thread: %s", n, brt_clip(err, 3000));
    brt_case_t *cases = NULL;
    size_t ncases = brt_cases_build(BRT_MATRIX_THIN, n, &cases);
    ret = brt_cases_run(comms, n, cases, ncases, NULL, err, ERR_LEN);
    free(cases);
    ck_assert_msg(ret == 0, "%d ranks, one thread, thin matrix: %s", n, brt_clip(err, 3000));
    initall_destroy(comms, n);
    brt_watchdog_stop();
    free(err);
}

static void initall_split(int n)
{
    ncclComm_t comms[BRT_MAX_RANKS], child[BRT_MAX_RANKS], part[2][BRT_MAX_RANKS];
    int npart[2] = {0, 0};
    char *err = malloc(ERR_LEN);
    brt_report_t rep;
    memset(&rep, 0, sizeof(rep));
    snprintf(rep.doing, sizeof(rep.doing), "grouped ncclCommSplit over %d ranks", n);
    brt_watchdog_start(TIMEOUT * brt_time_scale(), &rep);
    initall_make(comms, n, 0);
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < n; r++) {
        int color = r == n - 1 && n > 2 ? NCCL_SPLIT_NOCOLOR : r % 2;
        ck_assert_int_eq(ncclCommSplit(comms[r], color, n - r, &child[r], NULL), ncclSuccess);
    }
    ncclResult_t res = ncclGroupEnd();
    ck_assert_msg(res == ncclSuccess, "grouped ncclCommSplit returned %d: %s", (int)res,
                  ncclGetLastError(NULL));
    /* Child ranks in reverse parent order (keys n - r). */
    for (int r = n - 1; r >= 0; r--) {
        if (r == n - 1 && n > 2) {
            ck_assert_msg(child[r] == NULL, "NOCOLOR rank %d got a communicator", r);
            continue;
        }
        part[r % 2][npart[r % 2]++] = child[r];
    }
    for (int p = 0; p < 2; p++) {
        for (int k = 0; k < npart[p]; k++) {
            int c = -1, u = -1;
            ncclCommCount(part[p][k], &c);
            ncclCommUserRank(part[p][k], &u);
            ck_assert_msg(c == npart[p] && u == k, "child %d of color %d: %d ranks, rank %d", k, p,
                          c, u);
        }
        if (npart[p] == 0) {
            continue;
        }
        brt_case_t *cases = NULL;
        size_t ncases = brt_cases_build(BRT_MATRIX_THIN, npart[p], &cases);
        int ret = brt_cases_run(part[p], npart[p], cases, ncases, NULL, err, ERR_LEN);
        free(cases);
        ck_assert_msg(ret == 0, "color %d child of %d ranks: %s", p, npart[p], brt_clip(err, 3000));
        initall_destroy(part[p], npart[p]);
    }
    initall_destroy(comms, n);
    brt_watchdog_stop();
    free(err);
}

/* ---- tests ---- */

static void run_body(body_fn_t body, int n)
{
    char *out = malloc(4 * ERR_LEN);
    int bad;
    ck_assert_ptr_nonnull(out);
    if (cfg.mode == BRT_MODE_PROC) {
        bad =
            brt_procs_run(n, rank_main, (void *)body, TIMEOUT * brt_time_scale(), out, 4 * ERR_LEN);
    } else {
        bad = brt_threads_run(n, rank_main, (void *)body, TIMEOUT * brt_time_scale(), out,
                              4 * ERR_LEN);
    }
    ck_assert_msg(!bad, "%d ranks (%s):\n%s", n,
                  cfg.mode == BRT_MODE_PROC ? "processes" : "threads", brt_clip(out, 3000));
    free(out);
}

START_TEST(test_queries)
{
    int n = cfg.ranks[_i];
    if (cfg.mode == BRT_MODE_INITALL) {
        ncclComm_t comms[BRT_MAX_RANKS];
        int dev = -7;
        initall_make(comms, n, 0);
        for (int r = 0; r < n; r++) {
            ck_assert_int_eq(ncclCommCuDevice(comms[r], &dev), ncclSuccess);
        }
        initall_destroy(comms, n);
        return;
    }
    run_body(body_queries, n);
}
END_TEST

START_TEST(test_groups)
{
    int n = cfg.ranks[_i];
    if (cfg.mode == BRT_MODE_INITALL) {
        initall_groups(n, 0);
        initall_groups(n, 1);
        return;
    }
    run_body(body_groups, n);
}
END_TEST

START_TEST(test_split)
{
    int n = cfg.ranks[_i];
    if (cfg.mode == BRT_MODE_INITALL) {
        initall_split(n);
        return;
    }
    run_body(body_split, n);
}
END_TEST

START_TEST(test_concurrent)
{
    int n = cfg.ranks[_i];
    if (cfg.mode == BRT_MODE_INITALL) {
        return; /* one thread by definition */
    }
    run_body(body_concurrent, n);
}
END_TEST

START_TEST(test_late_receiver)
{
    int n = cfg.ranks[_i];
    if (cfg.mode == BRT_MODE_INITALL) {
        return; /* one thread drives every rank: no rank can leave early */
    }
    run_body(body_late_receiver, n);
}
END_TEST

START_TEST(test_stale_shm)
{
    if (cfg.mode != BRT_MODE_PROC) {
        return; /* the names are per process: only processes of their own can leave them */
    }
    run_body(body_stale_shm, cfg.ranks[_i]);
}
END_TEST

START_TEST(test_lifecycle)
{
    int n = cfg.ranks[_i];
    if (cfg.mode == BRT_MODE_INITALL) {
        /* Two sets of communicators alive at once, each grouped on its own. */
        ncclComm_t a[BRT_MAX_RANKS], b[BRT_MAX_RANKS];
        initall_make(a, n, 0);
        initall_make(b, n, 1);
        char *err = malloc(ERR_LEN);
        brt_case_t c = mk(BRT_ALLREDUCE, ncclInt64, BRT_SUM, 4097, 0, 0, 5);
        for (int it = 0; it < 6; it++) {
            c.seed = (uint32_t)it;
            int ret = brt_cases_run(it % 2 ? a : b, n, &c, 1, NULL, err, ERR_LEN);
            ck_assert_msg(ret == 0, "iteration %d: %s", it, brt_clip(err, 3000));
        }
        initall_destroy(b, n);
        int ret = brt_cases_run(a, n, &c, 1, NULL, err, ERR_LEN);
        ck_assert_msg(ret == 0, "after destroying the second set: %s", brt_clip(err, 3000));
        initall_destroy(a, n);
        free(err);
        return;
    }
    run_body(body_lifecycle, n);
}
END_TEST

static int parse_args(int argc, char **argv)
{
    cfg.mode = BRT_MODE_PROC;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (brt_layout_option(k, v, &cfg.mode, cfg.ranks, &cfg.nranks_list)) {
            continue;
        } else if (!brt_select_option(k, v)) {
            fprintf(stderr, "unknown option %s\n", k);
            return -1;
        }
    }
    if (cfg.nranks_list == 0) {
        cfg.ranks[cfg.nranks_list++] = 2;
    }
    return 0;
}

static Suite *mp_comm_suite(void)
{
    Suite *s = suite_create("mp_comm");
    struct {
        const char *name;
        const TTest *test;
    } cases[] = {{"queries", test_queries},
                 {"groups", test_groups},
                 {"split", test_split},
                 {"lifecycle", test_lifecycle},
                 {"late_receiver", test_late_receiver},
                 {"concurrent", test_concurrent},
                 {"stale_shm", test_stale_shm}};
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        TCase *tc = tcase_create(cases[k].name);
        tcase_set_timeout(tc, TIMEOUT * brt_time_scale() + 60);
        tcase_add_loop_test(tc, cases[k].test, 0, cfg.nranks_list);
        suite_add_tcase(s, tc);
    }
    return s;
}

int main(int argc, char **argv)
{
    if (parse_args(argc, argv) != 0) {
        return 2;
    }
    return brt_suite_run(mp_comm_suite());
}
