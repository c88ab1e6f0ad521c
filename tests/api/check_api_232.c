/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NCCL 2.32's additions to the API, through the public header only:
 *   config_sizes  ncclConfig_t of every layout since 2.19 (48, 72, 80, 88, 96, 120 bytes),
 *                 each in a buffer of exactly its size, is accepted; a bad one is refused
 *   collcfg       the eight nccl*Config collectives with per-call algorithm, protocol
 *                 (Braid's vendor option) and channel choices, on 3 ranks as threads and
 *                 as processes, checked against sums computed here; selections that cannot
 *                 run, unknown names and Braid options, bad handshakes are refused on
 *                 every rank (or ignored where forceAlgSelection is 0)
 *   params        the parameter API over the values set in this process's environment
 *   grow          2 ranks grow to 4 with ncclCommGetUniqueId and ncclCommGrow (threads and
 *                 processes): sums over the grown communicator and over the parent
 *   rma           ncclPutSignal / ncclSignal / ncclWaitSignal between 3 threads and 4
 *                 processes: every chunk in place once the waits return, out-of-order
 *                 signals kept for later waits, puts past a window refused
 *   refused       suspend/resume/mem stats on one rank; calls not implemented yet
 *                 return ncclInvalidUsage naming themselves
 *   teams         the device API's teams on 3 ranks (world, LSA of one rank, rail), rank
 *                 mapping, LL all-to-all slots; barrier and LL requirements refused
 */
#include <check.h>
#include <dlfcn.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <braid.h>
#include <nccl.h>

#include "brt_launch.h"

#define N 1031 /* elements per rank: odd, not a multiple of anything */

/* ---- config sizes ---- */

/* Init one rank with a config of `size` bytes (an older header's layout) in a buffer of
 * exactly that size, so that a read past it is caught by the sanitizers. */
static ncclResult_t init_with_size(size_t size, unsigned version, unsigned magic)
{
    ncclUniqueId id;
    ncclComm_t comm = NULL;
    ncclConfig_t full = NCCL_CONFIG_INITIALIZER;
    unsigned char *buf = malloc(size);
    ck_assert_ptr_nonnull(buf);
    full.size = size;
    full.version = version;
    full.magic = magic;
    full.blocking = 1;
    memcpy(buf, &full, size);
    ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
    ncclResult_t res = ncclCommInitRankConfig(&comm, 1, id, 0, (ncclConfig_t *)(void *)buf);
    free(buf);
    if (res == ncclSuccess) {
        float x = 2.0f;
        ck_assert_int_eq(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, NULL), ncclSuccess);
        ck_assert(x == 2.0f);
        ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
    }
    return res;
}

START_TEST(test_config_sizes)
{
    /* (size, version) of NCCL 2.19 ... 2.32's ncclConfig_t (LP64). */
    static const struct {
        size_t size;
        unsigned version;
    } layouts[] = {{48, 21903}, {48, 22602}, {72, 22703}, {80, 22809},
                   {88, 22907}, {96, 23007}, {120, 23203}};
    ck_assert_uint_eq(sizeof(ncclConfig_t), 120);
    for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++) {
        ck_assert_msg(init_with_size(layouts[i].size, layouts[i].version, NCCL_API_MAGIC) ==
                          ncclSuccess,
                      "a %zu-byte config of version %u was refused: %s", layouts[i].size,
                      layouts[i].version, ncclGetLastError(NULL));
    }
    ck_assert_int_eq(init_with_size(48, 22809, 0x12345678), ncclInvalidArgument);
    ck_assert(strstr(ncclGetLastError(NULL), "NCCL_CONFIG_INITIALIZER") != NULL);
    ck_assert_int_eq(init_with_size(16, 22809, NCCL_API_MAGIC), ncclInvalidArgument);
}
END_TEST

/* ---- per-call configuration ---- */

typedef struct {
    const char *algos; /* algSelection */
    const char *proto; /* BRAID_OPT_PROTO, or NULL */
    int min_ch, max_ch;
    int force; /* forceAlgSelection: 0 where some of the collectives cannot run it */
} sel_t;

static const sel_t selections[] = {
    {NULL, NULL, 0, 0, 1},         {"Ring", "Simple", 0, 0, 1},
    {"TREE", NULL, 0, 0, 0},       {"RING", "LL", 1, 1, 1},
    {"^Tree", NULL, 0, 2, 1},      {"OneShot,DirectRead", NULL, 0, 0, 0},
    {"Ring,Tree", "^LL", 2, 2, 1},
};

static float in_val(int rank, size_t i)
{
    return (float)(rank + 1) + (float)(i % 7);
}

static int check_vec(brt_rank_ctx_t *ctx, const char *what, const float *got, const float *want,
                     size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (got[i] != want[i]) {
            brt_fail(ctx, "%s: element %zu is %g, expected %g", what, i, got[i], want[i]);
            return 1;
        }
    }
    return 0;
}

static void fill_config(ncclCollConfig_t *cfg, ncclConfigExt_t *ext, const sel_t *s)
{
    ncclCollConfig_t init = NCCL_COLLCONFIG_INITIALIZER;
    *cfg = init;
    cfg->algSelection = s->algos;
    cfg->userProfilerTag = 42;
    cfg->forceAlgSelection = s->force;
    if (s->min_ch > 0) {
        cfg->minCTAs = s->min_ch;
    }
    if (s->max_ch > 0) {
        cfg->maxCTAs = s->max_ch;
    }
    /* Another vendor's option first: Braid ignores it. */
    memset(ext, 0, 2 * sizeof(*ext));
    ext[0].key.vendorId = 0x123456;
    ext[0].key.optionId = 7;
    ext[0].val.i = 1;
    if (s->proto != NULL) {
        ext[0].next = &ext[1];
        ext[1].key.vendorId = BRAID_VENDOR_ID;
        ext[1].key.optionId = BRAID_OPT_PROTO;
        ext[1].val.s = s->proto;
    }
    cfg->ext = ext;
}

/* Every nccl*Config collective with selection s, results checked. */
static int run_all(brt_rank_ctx_t *ctx, ncclComm_t comm, const sel_t *s)
{
    int r = ctx->rank, n = ctx->nranks, root = n - 1;
    size_t total = (size_t)N * (size_t)n;
    float *send = malloc(total * sizeof(float)), *recv = malloc(total * sizeof(float));
    float *want = malloc(total * sizeof(float));
    ncclCollConfig_t cfg;
    ncclConfigExt_t ext[2];
    int bad = 0;
    char what[160];

    fill_config(&cfg, ext, s);
    snprintf(what, sizeof(what), "algSelection %s, protocols %s, channels %d-%d",
             s->algos ? s->algos : "-", s->proto ? s->proto : "-", s->min_ch, s->max_ch);
    brt_doing(ctx, "nccl*Config with %s", what);
#define RUN(call, name)                                                                            \
    do {                                                                                           \
        ncclResult_t res_ = (call);                                                                \
        if (res_ != ncclSuccess) {                                                                 \
            brt_fail(ctx, "%s with %s returned %d: %s", name, what, (int)res_,                     \
                     ncclGetLastError(comm));                                                      \
            bad = 1;                                                                               \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)
    for (size_t i = 0; i < total; i++) {
        send[i] = in_val(r, i);
    }
    /* AllReduce: the sum over ranks. */
    for (size_t i = 0; i < N; i++) {
        want[i] = 0;
        for (int q = 0; q < n; q++) {
            want[i] += in_val(q, i);
        }
    }
    RUN(ncclAllReduceConfig(send, recv, N, ncclFloat, ncclSum, comm, NULL, &cfg),
        "ncclAllReduceConfig");
    bad |= check_vec(ctx, "ncclAllReduceConfig", recv, want, N);
    /* Reduce to root: the same sums there. */
    RUN(ncclReduceConfig(send, recv, N, ncclFloat, ncclSum, root, comm, NULL, &cfg),
        "ncclReduceConfig");
    bad |= r == root && check_vec(ctx, "ncclReduceConfig", recv, want, N);
    /* ReduceScatter: block r of the sums over ranks of the whole input. */
    for (size_t i = 0; i < N; i++) {
        want[i] = 0;
        for (int q = 0; q < n; q++) {
            want[i] += in_val(q, (size_t)r * N + i);
        }
    }
    RUN(ncclReduceScatterConfig(send, recv, N, ncclFloat, ncclSum, comm, NULL, &cfg),
        "ncclReduceScatterConfig");
    bad |= check_vec(ctx, "ncclReduceScatterConfig", recv, want, N);
    /* Broadcast from root. */
    for (size_t i = 0; i < N; i++) {
        want[i] = in_val(root, i);
    }
    RUN(ncclBroadcastConfig(send, recv, N, ncclFloat, root, comm, NULL, &cfg),
        "ncclBroadcastConfig");
    bad |= check_vec(ctx, "ncclBroadcastConfig", recv, want, N);
    /* AllGather: block q is rank q's first N inputs. */
    for (int q = 0; q < n; q++) {
        for (size_t i = 0; i < N; i++) {
            want[(size_t)q * N + i] = in_val(q, i);
        }
    }
    RUN(ncclAllGatherConfig(send, recv, N, ncclFloat, comm, NULL, &cfg), "ncclAllGatherConfig");
    bad |= check_vec(ctx, "ncclAllGatherConfig", recv, want, total);
    /* Gather, AlltoAll and Scatter are sends and receives with no algorithm: a selection
     * is ignored only when not forced. */
    cfg.forceAlgSelection = s->algos == NULL;
    /* Gather to root: the same blocks there. */
    RUN(ncclGatherConfig(send, recv, N, ncclFloat, root, comm, NULL, &cfg), "ncclGatherConfig");
    bad |= r == root && check_vec(ctx, "ncclGatherConfig", recv, want, total);
    /* AlltoAll: block q comes from rank q's block r. */
    for (int q = 0; q < n; q++) {
        for (size_t i = 0; i < N; i++) {
            want[(size_t)q * N + i] = in_val(q, (size_t)r * N + i);
        }
    }
    RUN(ncclAlltoAllConfig(send, recv, N, ncclFloat, comm, NULL, &cfg), "ncclAlltoAllConfig");
    bad |= check_vec(ctx, "ncclAlltoAllConfig", recv, want, total);
    /* Scatter from root: block r of root's input. */
    for (size_t i = 0; i < N; i++) {
        want[i] = in_val(root, (size_t)r * N + i);
    }
    RUN(ncclScatterConfig(send, recv, N, ncclFloat, root, comm, NULL, &cfg), "ncclScatterConfig");
    bad |= check_vec(ctx, "ncclScatterConfig", recv, want, N);
#undef RUN
out:
    free(send);
    free(recv);
    free(want);
    return bad;
}

/* A call every rank must refuse with `expect`, the error text naming `needle`. */
static int expect_refused(brt_rank_ctx_t *ctx, ncclComm_t comm, ncclResult_t res,
                          ncclResult_t expect, const char *what, const char *needle)
{
    const char *text = ncclGetLastError(comm);
    if (res != expect || strstr(text, needle) == NULL) {
        brt_fail(ctx, "%s returned %d (expected %d) with \"%s\" (expected to mention \"%s\")", what,
                 (int)res, (int)expect, text, needle);
        return 1;
    }
    return 0;
}

static int refusals(brt_rank_ctx_t *ctx, ncclComm_t comm)
{
    float x[8] = {0}, y[8];
    ncclCollConfig_t cfg = NCCL_COLLCONFIG_INITIALIZER;
    ncclConfigExt_t ext;
    int bad = 0;

    brt_doing(ctx, "refused configurations");
    /* NVLS needs NVLink SHARP: no host call can run it. */
    cfg.algSelection = "NVLS";
    bad |= expect_refused(ctx, comm,
                          ncclAllReduceConfig(x, y, 8, ncclFloat, ncclSum, comm, NULL, &cfg),
                          ncclInvalidUsage, "algSelection NVLS", "forceAlgSelection");
    cfg.forceAlgSelection = 0; /* then Braid chooses */
    if (ncclAllReduceConfig(x, y, 8, ncclFloat, ncclSum, comm, NULL, &cfg) != ncclSuccess) {
        brt_fail(ctx, "NVLS with forceAlgSelection 0 failed: %s", ncclGetLastError(comm));
        bad = 1;
    }
    cfg.forceAlgSelection = 1;
    cfg.algSelection = "Ring,Bogus";
    bad |= expect_refused(ctx, comm,
                          ncclAllReduceConfig(x, y, 8, ncclFloat, ncclSum, comm, NULL, &cfg),
                          ncclInvalidArgument, "unknown algorithm", "Bogus");
    cfg.algSelection = NULL;
    memset(&ext, 0, sizeof(ext));
    ext.key.vendorId = BRAID_VENDOR_ID;
    ext.key.optionId = 99;
    cfg.ext = &ext;
    bad |= expect_refused(ctx, comm,
                          ncclAllReduceConfig(x, y, 8, ncclFloat, ncclSum, comm, NULL, &cfg),
                          ncclInvalidArgument, "unknown Braid option", "unknown Braid option 99");
    ext.key.optionId = BRAID_OPT_DETERMINISTIC;
    ext.val.i = 2;
    bad |= expect_refused(ctx, comm,
                          ncclAllReduceConfig(x, y, 8, ncclFloat, ncclSum, comm, NULL, &cfg),
                          ncclInvalidArgument, "determinism 2", "BRAID_OPT_DETERMINISTIC is 2");
    ext.key.optionId = BRAID_OPT_ACCUMULATE_FP32;
    ext.val.i = -1;
    bad |= expect_refused(ctx, comm,
                          ncclAllReduceConfig(x, y, 8, ncclFloat, ncclSum, comm, NULL, &cfg),
                          ncclInvalidArgument, "accumulate -1", "BRAID_OPT_ACCUMULATE_FP32 is -1");
    ext.key.optionId = BRAID_OPT_PROTO;
    ext.val.s = "Fast";
    bad |= expect_refused(ctx, comm,
                          ncclAllReduceConfig(x, y, 8, ncclFloat, ncclSum, comm, NULL, &cfg),
                          ncclInvalidArgument, "bad protocol", "Fast");
    ext.next = &ext; /* circular */
    bad |= expect_refused(ctx, comm,
                          ncclAllReduceConfig(x, y, 8, ncclFloat, ncclSum, comm, NULL, &cfg),
                          ncclInvalidArgument, "circular list", "twice");
    cfg.ext = NULL;
    cfg.magic = 0;
    bad |= expect_refused(ctx, comm,
                          ncclAllReduceConfig(x, y, 8, ncclFloat, ncclSum, comm, NULL, &cfg),
                          ncclInvalidArgument, "bad magic", "NCCL_COLLCONFIG_INITIALIZER");
    cfg.magic = NCCL_API_MAGIC;
    cfg.size = 24;
    bad |= expect_refused(ctx, comm,
                          ncclAllReduceConfig(x, y, 8, ncclFloat, ncclSum, comm, NULL, &cfg),
                          ncclInvalidArgument, "small size", "size 24");
    cfg.size = sizeof(cfg);
    cfg.algSelection = "Ring";
    bad |= expect_refused(ctx, comm, ncclAlltoAllConfig(x, y, 1, ncclFloat, comm, NULL, &cfg),
                          ncclInvalidUsage, "AlltoAll with a forced selection", "no algorithm");
    /* The communicator still works after every refusal. */
    if (ncclAllReduceConfig(x, y, 8, ncclFloat, ncclSum, comm, NULL, NULL) != ncclSuccess) {
        brt_fail(ctx, "a plain call after the refusals failed: %s", ncclGetLastError(comm));
        bad = 1;
    }
    return bad;
}

static int body_collcfg(brt_rank_ctx_t *ctx)
{
    ncclComm_t comm;
    int bad = 0;
    if (brt_rank_init(ctx, &comm) != ncclSuccess) {
        return 1;
    }
    for (size_t i = 0; i < sizeof(selections) / sizeof(selections[0]) && !bad; i++) {
        bad |= run_all(ctx, comm, &selections[i]);
    }
    bad |= bad ? 0 : refusals(ctx, comm);
    /* Suspended and resumed, the communicator computes as before. */
    if (!bad && (ncclCommSuspend(comm, NCCL_SUSPEND_MEM) != ncclSuccess ||
                 ncclCommResume(comm) != ncclSuccess)) {
        brt_fail(ctx, "suspend/resume: %s", ncclGetLastError(comm));
        bad = 1;
    }
    bad |= bad ? 0 : run_all(ctx, comm, &selections[0]);
    ncclCommDestroy(comm);
    return bad;
}

START_TEST(test_collcfg_threads)
{
    char out[8192];
    int bad = brt_threads_run(3, body_collcfg, NULL, 120 * brt_time_scale(), out, sizeof(out));
    ck_assert_msg(!bad, "%s", brt_clip(out, 3000));
}
END_TEST

START_TEST(test_collcfg_procs)
{
    char out[8192];
    int bad = brt_procs_run(3, body_collcfg, NULL, 120 * brt_time_scale(), out, sizeof(out));
    ck_assert_msg(!bad, "%s", brt_clip(out, 3000));
}
END_TEST

/* ---- parameters ---- */

START_TEST(test_params)
{
    ncclParamHandle_t h, h2;
    int64_t v64;
    int32_t v32;
    int8_t v8;
    const char *s;
    int len;
    char raw[64];

    /* Set before the first call of this (forked) test process: the values load once. */
    setenv("NCCL_BUFFSIZE", "1M", 1);
    setenv("BRAID_NCHANNELS", "3", 1);
    setenv("NCCL_DEBUG_SUBSYS", "INIT,COLL", 1);
    ck_assert_int_eq(ncclParamBind(&h, "NCCL_BUFFSIZE"), ncclSuccess);
    ck_assert_int_eq(ncclParamBind(&h2, "NCCL_BUFFSIZE"), ncclSuccess);
    ck_assert_ptr_eq(h, h2);
    ck_assert_int_eq(ncclParamGetI64(h, &v64), ncclSuccess);
    ck_assert_int_eq(v64, 1 << 20);
    ck_assert_int_eq(ncclParamGetI32(h, &v32), ncclSuccess);
    ck_assert_int_eq(v32, 1 << 20);
    ck_assert_int_eq(ncclParamGetI8(h, &v8), ncclInvalidUsage); /* does not fit */
    ck_assert_int_eq(ncclParamGetStr(h, &s), ncclSuccess);
    ck_assert_str_eq(s, "1048576");
    ck_assert_int_eq(ncclParamGet(h, raw, sizeof(raw), &len), ncclSuccess);
    ck_assert_int_eq(len, 8);
    memcpy(&v64, raw, sizeof(v64));
    ck_assert_int_eq(v64, 1 << 20);
    ck_assert_int_eq(ncclParamGet(h, raw, 4, &len), ncclInvalidArgument);
    ck_assert_int_eq(ncclParamGetParameter("BRAID_NCHANNELS", &s, &len), ncclSuccess);
    ck_assert_str_eq(s, "3");
    ck_assert_int_eq(len, 1);
    ck_assert_int_eq(ncclParamBind(&h, "NCCL_DEBUG_SUBSYS"), ncclSuccess);
    ck_assert_int_eq(ncclParamGetStr(h, &s), ncclSuccess);
    ck_assert_str_eq(s, "INIT,COLL");
    ck_assert_int_eq(ncclParamGetI32(h, &v32), ncclInvalidUsage); /* a string */
    ck_assert_int_eq(ncclParamGet(h, raw, sizeof(raw), &len), ncclSuccess);
    ck_assert_int_eq(len, (int)strlen("INIT,COLL") + 1);
    ck_assert_str_eq(raw, "INIT,COLL");
    ck_assert_int_eq(ncclParamBind(&h, "NCCL_NO_SUCH_THING"), ncclInvalidArgument);
    ck_assert(strstr(ncclGetLastError(NULL), "NCCL_NO_SUCH_THING") != NULL);
    ck_assert_int_eq(ncclParamGetParameter("NCCL_NO_SUCH_THING", &s, &len), ncclInvalidArgument);
    ck_assert_int_eq(ncclParamGetI32((ncclParamHandle_t)(void *)raw, &v32), ncclInvalidArgument);
    /* The key list: the PUBLIC parameters by default (BRAID_NCHANNELS is EXPERT). */
    const char **keys;
    int nkeys, buffsize = 0, nch = 0;
    ck_assert_int_eq(ncclParamGetAllParameterKeys(&keys, &nkeys), ncclSuccess);
    ck_assert_int_gt(nkeys, 10);
    for (int i = 0; i < nkeys; i++) {
        buffsize += strcmp(keys[i], "NCCL_BUFFSIZE") == 0;
        nch += strcmp(keys[i], "BRAID_NCHANNELS") == 0;
    }
    ck_assert_int_eq(buffsize, 1);
    ck_assert_int_eq(nch, 0);
    ncclParamDumpAll();
}
END_TEST

/* NCCL_PARAM_DUMP_ALL=1: every parameter is listed. */
START_TEST(test_params_all)
{
    const char **keys;
    int nkeys, nch = 0;
    setenv("NCCL_PARAM_DUMP_ALL", "1", 1);
    ck_assert_int_eq(ncclParamGetAllParameterKeys(&keys, &nkeys), ncclSuccess);
    for (int i = 0; i < nkeys; i++) {
        nch += strcmp(keys[i], "BRAID_NCHANNELS") == 0;
    }
    ck_assert_int_eq(nch, 1);
}
END_TEST

/* ---- growing ---- */

/* Ranks 0 and 1 make a communicator, rank 0 makes an id for 2 more, ranks 2 and 3 join with
 * it; the grown communicator reduces over all 4, and the parent still works. */
typedef struct {
    volatile int ready; /* the id below is set */
    ncclUniqueId id;
} grow_share_t;

static int check_sum(brt_rank_ctx_t *ctx, ncclComm_t comm, int n, const char *what)
{
    float x[5];
    float want = (float)(n * (n + 1) / 2);
    for (int i = 0; i < 5; i++) {
        x[i] = (float)(ctx->rank + 1);
    }
    ncclResult_t res = ncclAllReduce(x, x, 5, ncclFloat, ncclSum, comm, NULL);
    if (res != ncclSuccess || x[0] != want || x[4] != want) {
        brt_fail(ctx, "%s: AllReduce returned %d, sum %g, expected %g: %s", what, (int)res,
                 (double)x[0], (double)want, ncclGetLastError(comm));
        return 1;
    }
    return 0;
}

static int body_grow(brt_rank_ctx_t *ctx)
{
    grow_share_t *sh = ctx->arg;
    ncclComm_t small = NULL, big = NULL;
    int bad = 0, n = 0, r = -1;
    ncclResult_t res;

    if (ctx->rank < 2) {
        brt_doing(ctx, "init of the 2 first ranks");
        if (ncclCommInitRank(&small, 2, ctx->id, ctx->rank) != ncclSuccess) {
            brt_fail(ctx, "init: %s", ncclGetLastError(NULL));
            return 1;
        }
        bad |= check_sum(ctx, small, 2, "the 2-rank parent");
        if (ctx->rank == 0) {
            ncclUniqueId id;
            if (ncclCommGetUniqueId(small, &id) != ncclSuccess) {
                brt_fail(ctx, "ncclCommGetUniqueId: %s", ncclGetLastError(small));
                return 1;
            }
            sh->id = id;
            __atomic_store_n(&sh->ready, 1, __ATOMIC_RELEASE);
        }
        brt_doing(ctx, "ncclCommGrow as an existing rank");
        res = ncclCommGrow(small, 4, ctx->rank == 0 ? &sh->id : NULL, -1, &big, NULL);
    } else {
        brt_doing(ctx, "waiting for the grow id");
        double until = brt_now() + 60 * brt_time_scale();
        while (!__atomic_load_n(&sh->ready, __ATOMIC_ACQUIRE) && brt_now() < until) {
            brt_sleep_ms(5);
        }
        ncclUniqueId id = sh->id;
        brt_doing(ctx, "ncclCommGrow as a new rank");
        res = ncclCommGrow(NULL, 4, &id, ctx->rank, &big, NULL);
    }
    if (res != ncclSuccess) {
        brt_fail(ctx, "ncclCommGrow returned %d: %s", (int)res, ncclGetLastError(small));
        return 1;
    }
    ncclCommCount(big, &n);
    ncclCommUserRank(big, &r);
    if (n != 4 || r != ctx->rank) {
        brt_fail(ctx, "the grown communicator has %d ranks and this is rank %d", n, r);
        bad = 1;
    }
    bad |= check_sum(ctx, big, 4, "the grown communicator");
    if (small != NULL) {
        bad |= check_sum(ctx, small, 2, "the parent after the grow");
        ncclUniqueId again;
        if (ctx->rank == 0 && ncclCommGetUniqueId(small, &again) != ncclSuccess) {
            brt_fail(ctx, "a second id after the grow: %s", ncclGetLastError(small));
            bad = 1;
        }
        ncclCommDestroy(small);
    }
    ncclCommDestroy(big);
    return bad;
}

static grow_share_t *grow_share(void)
{
    grow_share_t *sh =
        mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(sh, MAP_FAILED);
    memset(sh, 0, sizeof(*sh));
    return sh;
}

START_TEST(test_grow_threads)
{
    char out[8192];
    grow_share_t *sh = grow_share();
    int bad = brt_threads_run(4, body_grow, sh, 120 * brt_time_scale(), out, sizeof(out));
    ck_assert_msg(!bad, "%s", brt_clip(out, 3000));
}
END_TEST

START_TEST(test_grow_procs)
{
    char out[8192];
    grow_share_t *sh = grow_share();
    int bad = brt_procs_run(4, body_grow, sh, 120 * brt_time_scale(), out, sizeof(out));
    ck_assert_msg(!bad, "%s", brt_clip(out, 3000));
}
END_TEST

/* ---- one-sided ---- */

#define RMA_CHUNK 67 /* floats each rank puts into each peer's window */

/* Every rank puts a chunk into every other rank's window (signal 0), then signals it
 * (signal 1); every rank waits for signal 1 first, so the puts arrive before the signal
 * waited for and are counted for the second wait; the windows then hold every chunk. */
static int body_rma(brt_rank_ctx_t *ctx)
{
    ncclComm_t comm;
    int r = ctx->rank, n = ctx->nranks, bad = 0;
    size_t wfloats = (size_t)RMA_CHUNK * (size_t)n;
    float *win_buf = calloc(wfloats, sizeof(float)), mine[RMA_CHUNK];
    ncclWindow_t win;
    void *user = NULL;
    ncclWaitSignalDesc_t d[2 * BRT_MAX_RANKS];
    int nd = 0;

    if (brt_rank_init(ctx, &comm) != ncclSuccess) {
        return 1;
    }
    brt_doing(ctx, "window registration");
    if (ncclCommWindowRegister(comm, win_buf, wfloats * sizeof(float), &win, NCCL_WIN_DEFAULT) !=
            ncclSuccess ||
        ncclWinGetUserPtr(comm, win, &user) != ncclSuccess || user != win_buf) {
        brt_fail(ctx, "window: %s", ncclGetLastError(comm));
        return 1;
    }
    for (int i = 0; i < RMA_CHUNK; i++) {
        mine[i] = (float)(r * 1000 + i);
    }
    brt_doing(ctx, "puts and signals");
    for (int p = 0; p < n; p++) {
        if (p == r) {
            continue;
        }
        if (ncclPutSignal(mine, RMA_CHUNK, ncclFloat, p, win, (size_t)r * RMA_CHUNK * sizeof(float),
                          0, 0, 0, comm, NULL) != ncclSuccess ||
            ncclSignal(p, 1, 0, 0, comm, NULL) != ncclSuccess) {
            brt_fail(ctx, "put/signal to rank %d: %s", p, ncclGetLastError(comm));
            bad = 1;
        }
        d[nd++] = (ncclWaitSignalDesc_t){1, p, 1, 0};
    }
    for (int p = 0; p < n; p++) {
        if (p != r) {
            d[nd++] = (ncclWaitSignalDesc_t){1, p, 0, 0};
        }
    }
    brt_doing(ctx, "waiting for the signals");
    if (!bad && ncclWaitSignal(nd, d, comm, NULL) != ncclSuccess) {
        brt_fail(ctx, "ncclWaitSignal: %s", ncclGetLastError(comm));
        bad = 1;
    }
    for (int q = 0; q < n && !bad; q++) {
        for (int i = 0; i < RMA_CHUNK && q != r; i++) {
            if (win_buf[(size_t)q * RMA_CHUNK + i] != (float)(q * 1000 + i)) {
                brt_fail(ctx, "window element %d of rank %d's chunk is %g", i, q,
                         (double)win_buf[(size_t)q * RMA_CHUNK + i]);
                bad = 1;
                break;
            }
        }
    }
    /* A put past the peer's window, and reserved flags, are refused here. */
    int peer = (r + 1) % n;
    if (ncclPutSignal(mine, RMA_CHUNK, ncclFloat, peer, win, wfloats * sizeof(float), 0, 0, 0, comm,
                      NULL) != ncclInvalidArgument ||
        ncclSignal(peer, 0, 0, 1, comm, NULL) != ncclInvalidArgument) {
        brt_fail(ctx, "a put past the window or flags 1 was not refused");
        bad = 1;
    }
    float x = 1.0f; /* nobody deregisters while a peer may still put */
    ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, NULL);
    ncclCommWindowDeregister(comm, win);
    ncclCommDestroy(comm);
    free(win_buf);
    return bad;
}

START_TEST(test_rma_threads)
{
    char out[8192];
    int bad = brt_threads_run(3, body_rma, NULL, 120 * brt_time_scale(), out, sizeof(out));
    ck_assert_msg(!bad, "%s", brt_clip(out, 3000));
}
END_TEST

START_TEST(test_rma_procs)
{
    char out[8192];
    int bad = brt_procs_run(4, body_rma, NULL, 120 * brt_time_scale(), out, sizeof(out));
    ck_assert_msg(!bad, "%s", brt_clip(out, 3000));
}
END_TEST

/* ---- the profiler tag ---- */

/* A v7 profiler (prof_tag.c) sees ncclCollConfig_t.userProfilerTag in the API and task
 * events of the call that carried it, and 0 in those of a plain call. */
START_TEST(test_profiler_tag)
{
    const char *lib = getenv("BRT_PROF_TAG_LIB");
    ncclUniqueId id;
    ncclComm_t comm;
    float x[4] = {1, 2, 3, 4}, y[4];
    ncclCollConfig_t cfg = NCCL_COLLCONFIG_INITIALIZER;

    if (lib == NULL) {
        fprintf(stderr, "BRT_PROF_TAG_LIB is not set: no profiler to check the tag with\n");
        return;
    }
    setenv("NCCL_PROFILER_PLUGIN", lib, 1); /* before the first call of this process */
    /* Held open here, so that it outlives the communicator that loads it too. */
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(h != NULL, "dlopen(%s): %s", lib, dlerror());
    ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
    ck_assert_int_eq(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
    cfg.userProfilerTag = 42;
    ck_assert_int_eq(ncclAllReduceConfig(x, y, 4, ncclFloat, ncclSum, comm, NULL, &cfg),
                     ncclSuccess);
    ck_assert_int_eq(ncclAllReduce(x, y, 4, ncclFloat, ncclSum, comm, NULL), ncclSuccess);
    cfg.userProfilerTag = 43;
    ck_assert_int_eq(ncclAlltoAllConfig(x, y, 4, ncclFloat, comm, NULL, &cfg), ncclSuccess);
    ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
    int (*count)(uint64_t, uint64_t) = (int (*)(uint64_t, uint64_t))dlsym(h, "test_prof_tag_count");
    ck_assert_ptr_nonnull(count);
    ck_assert_int_ge(count(1 << 9, 42), 1); /* CollApi */
    ck_assert_int_ge(count(1 << 1, 42), 1); /* Coll */
    ck_assert_int_ge(count(1 << 9, 0), 1);  /* the plain call's CollApi */
    ck_assert_int_ge(count(1 << 10, 43),
                     1); /* P2pApi of the AlltoAll's sends/receives (1 rank: no P2p tasks) */
    ck_assert_int_eq(count(1 << 1, 43), 0);
    dlclose(h);
}
END_TEST

/* ---- refused until implemented ---- */

/* The device API's host side, declared as NVIDIA's nccl_device/core.h does (2.30 layout of
 * ncclCommProperties_t; the test does not include that header). */
typedef struct {
    size_t size;
    unsigned int magic;
    unsigned int version;
    int rank, nRanks, cudaDev, nvmlDev;
    bool deviceApiSupport, multimemSupport;
    int ginType, nLsaTeams;
    bool hostRmaSupport;
    int railedGinType;
} test_props_t;
ncclResult_t ncclCommQueryProperties(ncclComm_t comm, test_props_t *props);
ncclResult_t ncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer, void **outPtr);

/* Teams and requirements, declared as nccl_device/core.h, lsa_barrier.h, gin_barrier.h
 * and ll_a2a.h do (the handles and requirements are opaque here). */
typedef struct {
    int nRanks, rank, stride;
} test_team_t;
test_team_t ncclTeamWorld(ncclComm_t comm);
test_team_t ncclTeamLsa(ncclComm_t comm);
test_team_t ncclTeamRail(ncclComm_t comm);
int ncclTeamRankToWorld(ncclComm_t comm, test_team_t team, int rank);
int ncclTeamRankToLsa(ncclComm_t comm, test_team_t team, int rank);
int ncclLLA2ACalcSlots(int maxElts, int maxEltSize);
ncclResult_t ncclLLA2ACreateRequirement(int nBlocks, int nSlots, void *outHandle, void *outReq);
ncclResult_t ncclLsaBarrierCreateRequirement(test_team_t team, int nBarriers, void *outHandle,
                                             void *outReq);
ncclResult_t ncclGinBarrierCreateRequirement(ncclComm_t comm, test_team_t team, int nBarriers,
                                             void *outHandle, void *outReq);

static int team_is(brt_rank_ctx_t *ctx, const char *what, test_team_t t, int n, int r, int s)
{
    if (t.nRanks != n || t.rank != r || t.stride != s) {
        brt_fail(ctx, "%s is {%d, %d, %d}, not {%d, %d, %d}", what, t.nRanks, t.rank, t.stride, n,
                 r, s);
        return 1;
    }
    return 0;
}

/* 3 ranks: the world is the communicator, an LSA team is one rank (nothing is load/store
 * accessible without the device API), the rail is the world again; ranks map back; the
 * requirements, which size an ncclDevComm, are refused naming themselves. */
static int body_teams(brt_rank_ctx_t *ctx)
{
    ncclComm_t comm;
    char handle[256], req[256];
    int bad = 0, r = ctx->rank, n = ctx->nranks;
    if (brt_rank_init(ctx, &comm) != ncclSuccess) {
        return 1;
    }
    test_team_t world = ncclTeamWorld(comm), lsa = ncclTeamLsa(comm), rail = ncclTeamRail(comm);
    bad |= team_is(ctx, "ncclTeamWorld", world, n, r, 1);
    bad |= team_is(ctx, "ncclTeamLsa", lsa, 1, 0, 1);
    bad |= team_is(ctx, "ncclTeamRail", rail, n, r, 1);
    for (int k = 0; k < n && !bad; k++) {
        if (ncclTeamRankToWorld(comm, world, k) != k || ncclTeamRankToWorld(comm, rail, k) != k) {
            brt_fail(ctx, "team rank %d maps to world rank %d / %d", k,
                     ncclTeamRankToWorld(comm, world, k), ncclTeamRankToWorld(comm, rail, k));
            bad = 1;
        }
    }
    if (ncclTeamRankToWorld(comm, lsa, 0) != r || ncclTeamRankToLsa(comm, lsa, 0) != 0 ||
        ncclTeamRankToLsa(comm, world, r) != 0) {
        brt_fail(ctx, "the LSA team's rank 0 is not this rank");
        bad = 1;
    }
    if (ncclLLA2ACalcSlots(10, 12) != 20 || ncclLLA2ACalcSlots(3, 8) != 3) {
        brt_fail(ctx, "ncclLLA2ACalcSlots(10, 12) = %d, (3, 8) = %d", ncclLLA2ACalcSlots(10, 12),
                 ncclLLA2ACalcSlots(3, 8));
        bad = 1;
    }
    static const char *const names[3] = {"ncclLLA2ACreateRequirement",
                                         "ncclLsaBarrierCreateRequirement",
                                         "ncclGinBarrierCreateRequirement"};
    ncclResult_t res[3] = {ncclLLA2ACreateRequirement(4, 20, handle, req),
                           ncclLsaBarrierCreateRequirement(lsa, 2, handle, req),
                           ncclGinBarrierCreateRequirement(comm, world, 2, handle, req)};
    for (int i = 0; i < 3; i++) {
        if (res[i] != ncclInvalidUsage) {
            brt_fail(ctx, "%s returned %d, not ncclInvalidUsage", names[i], (int)res[i]);
            bad = 1;
        }
    }
    if (strstr(ncclGetLastError(comm), "ncclGinBarrierCreateRequirement") == NULL) {
        brt_fail(ctx, "the refusal does not name the call: %s", ncclGetLastError(comm));
        bad = 1;
    }
    ncclCommDestroy(comm);
    /* A handle that is no communicator: an empty team, -1. */
    test_team_t none = ncclTeamWorld(comm);
    if (none.nRanks != 0 || ncclTeamRankToWorld(comm, world, 0) != -1) {
        brt_fail(ctx, "a destroyed communicator's world is {%d, ...}", none.nRanks);
        bad = 1;
    }
    return bad;
}

START_TEST(test_teams)
{
    char out[8192];
    int bad = brt_threads_run(3, body_teams, NULL, 60 * brt_time_scale(), out, sizeof(out));
    ck_assert_msg(!bad, "%s", brt_clip(out, 3000));
}
END_TEST

START_TEST(test_refused)
{
    ncclUniqueId id;
    ncclComm_t comm, grown = (ncclComm_t)(void *)&id;
    uint64_t v;
    float buf[4];
    void *user = NULL;
    ncclWindow_t win;
    ncclWaitSignalDesc_t desc = {1, 0, 0, 0};
    ncclEncryptionConfig_t enc = NCCL_ENCRYPTION_CONFIG_INITIALIZER;

    ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
    ck_assert_int_eq(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
    /* Growing: a second id before the first is used, and bad arguments. */
    ck_assert_int_eq(ncclCommGetUniqueId(comm, &id), ncclSuccess);
    ck_assert_int_eq(ncclCommGetUniqueId(comm, &id), ncclInvalidUsage);
    ck_assert(strstr(ncclGetLastError(comm), "ncclCommGrow") != NULL);
    ck_assert_int_eq(ncclCommGrow(comm, 1, &id, -1, &grown, NULL), ncclInvalidArgument);
    ck_assert_ptr_null(grown);
    ck_assert_int_eq(ncclCommGrow(NULL, 2, NULL, 1, &grown, NULL), ncclInvalidArgument);
    /* The only existing rank passes no id: refused, alike on every rank. */
    ck_assert_int_eq(ncclCommGrow(comm, 2, NULL, -1, &grown, NULL), ncclInvalidUsage);
    ck_assert(strstr(ncclGetLastError(comm), "none of the 1 ranks") != NULL);
    /* Suspending a communicator of one rank (no connections, no arena: 0 bytes held),
     * calls refused until resumed (check_api_suspend: ranks that hold buffers). */
    v = 7;
    ck_assert_int_eq(ncclCommMemStats(comm, ncclStatGpuMemTotal, &v), ncclSuccess);
    ck_assert_uint_eq(v, 0);
    ck_assert_int_eq(ncclCommSuspend(comm, NCCL_SUSPEND_MEM), ncclSuccess);
    ck_assert_int_eq(ncclCommMemStats(comm, ncclStatGpuMemSuspended, &v), ncclSuccess);
    ck_assert_uint_eq(v, 1);
    buf[0] = 3.0f;
    ck_assert_int_eq(ncclAllReduce(buf, buf, 1, ncclFloat, ncclSum, comm, NULL), ncclInvalidUsage);
    ck_assert(strstr(ncclGetLastError(comm), "suspended") != NULL);
    ck_assert_int_eq(ncclCommSuspend(comm, NCCL_SUSPEND_MEM), ncclInvalidUsage);
    ck_assert_int_eq(ncclCommResume(comm), ncclSuccess);
    ck_assert_int_eq(ncclCommResume(comm), ncclInvalidUsage);
    ck_assert_int_eq(ncclCommMemStats(comm, ncclStatGpuMemSuspended, &v), ncclSuccess);
    ck_assert_uint_eq(v, 0);
    ck_assert_int_eq(ncclAllReduce(buf, buf, 1, ncclFloat, ncclSum, comm, NULL), ncclSuccess);
    ck_assert(buf[0] == 3.0f);
    ck_assert_int_eq(ncclCommMemStats(comm, (ncclCommMemStat_t)9, &v), ncclInvalidArgument);
    ck_assert_int_eq(ncclCommWindowRegister(comm, buf, sizeof(buf), &win, NCCL_WIN_DEFAULT),
                     ncclSuccess);
    ck_assert_int_eq(ncclWinGetUserPtr(comm, win, &user), ncclSuccess);
    ck_assert_ptr_eq(user, buf);
    /* One-sided to itself: the put lands at the wait. */
    float one = 5.0f;
    ck_assert_int_eq(ncclPutSignal(&one, 1, ncclFloat, 0, win, 4, 0, 0, 0, comm, NULL),
                     ncclSuccess);
    ck_assert_int_eq(ncclWaitSignal(1, &desc, comm, NULL), ncclSuccess);
    ck_assert(buf[1] == 5.0f);
    ck_assert_int_eq(ncclPutSignal(&one, 1, ncclFloat, 1, win, 0, 0, 0, 0, comm, NULL),
                     ncclInvalidArgument);
    ck_assert(strstr(ncclGetLastError(comm), "ncclPutSignal") != NULL);
    ck_assert_int_eq(ncclCommWindowDeregister(comm, win), ncclSuccess);
    ck_assert_int_eq(ncclSetEncryption(&enc), ncclSuccess); /* off: the default */
    ck_assert_int_eq(ncclSetEncryption(NULL), ncclSuccess);
    enc.mode = NCCL_ENCRYPTION_MODE_PSK;
    enc.psk = "short";
    ck_assert_int_eq(ncclSetEncryption(&enc), ncclInvalidArgument);
    enc.mode = 7;
    ck_assert_int_eq(ncclSetEncryption(&enc), ncclInvalidArgument);
    ck_assert(strstr(ncclGetLastError(NULL), "unknown mode") != NULL);
    /* (A key of 32 bytes turns TLS on: check_api_tls.) */
    /* The device API: properties answered (in a struct of exactly the caller's size),
     * device pointers refused. */
    struct {
        size_t size;
        unsigned int magic, version;
        int rank, nRanks, cudaDev, nvmlDev;
        bool deviceApiSupport, multimemSupport;
    } small;
    memset(&small, 0x55, sizeof(small));
    small.size = offsetof(test_props_t, ginType); /* no ginType and later */
    small.magic = NCCL_API_MAGIC;
    small.version = 22900;
    ck_assert_int_eq(ncclCommQueryProperties(comm, (test_props_t *)(void *)&small), ncclSuccess);
    ck_assert_int_eq(small.rank, 0);
    ck_assert_int_eq(small.nRanks, 1);
    ck_assert(!small.deviceApiSupport && !small.multimemSupport);
    test_props_t full = {sizeof(full), NCCL_API_MAGIC, 23203, -1, -1, 0, 0, 1, 1, 9, 0, 0, 9};
    ck_assert_int_eq(ncclCommQueryProperties(comm, &full), ncclSuccess);
    ck_assert(full.hostRmaSupport && full.ginType == 0 && full.railedGinType == 0);
    full.magic = 0;
    ck_assert_int_eq(ncclCommQueryProperties(comm, &full), ncclInvalidArgument);
    void *dptr = NULL;
    ck_assert_int_eq(ncclGetPeerDevicePointer(NULL, 0, 0, &dptr), ncclInvalidUsage);
    ck_assert(strstr(ncclGetLastError(NULL), "ncclGetPeerDevicePointer") != NULL);
    ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
    ck_assert_str_ne(ncclGetErrorString(ncclTimeout), ncclGetErrorString(ncclRemoteError));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("api_232");
    TCase *tc = tcase_create("config_sizes");
    tcase_add_test(tc, test_config_sizes);
    suite_add_tcase(s, tc);
    tc = tcase_create("collcfg");
    tcase_set_timeout(tc, 240 * brt_time_scale());
    tcase_add_test(tc, test_collcfg_threads);
    tcase_add_test(tc, test_collcfg_procs);
    suite_add_tcase(s, tc);
    tc = tcase_create("params");
    tcase_add_test(tc, test_params);
    tcase_add_test(tc, test_params_all);
    suite_add_tcase(s, tc);
    tc = tcase_create("grow");
    tcase_set_timeout(tc, 240 * brt_time_scale());
    tcase_add_test(tc, test_grow_threads);
    tcase_add_test(tc, test_grow_procs);
    suite_add_tcase(s, tc);
    tc = tcase_create("rma");
    tcase_set_timeout(tc, 240 * brt_time_scale());
    tcase_add_test(tc, test_rma_threads);
    tcase_add_test(tc, test_rma_procs);
    suite_add_tcase(s, tc);
    tc = tcase_create("profiler_tag");
    tcase_add_test(tc, test_profiler_tag);
    suite_add_tcase(s, tc);
    tc = tcase_create("refused");
    tcase_add_test(tc, test_refused);
    tcase_add_test(tc, test_teams);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
