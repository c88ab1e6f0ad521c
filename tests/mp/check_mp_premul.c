/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "mp_premul": PreMulSum ops whose scalar differs from rank to rank.
 *
 *   check_mp_premul --mode proc|threads --ranks 4 [--timeout s]
 *
 * NCCL's ncclRedOpCreatePreMulSum is made by each rank for itself, so the result of a
 * reduction with it is sum over r of (rank r's scalar * rank r's input). Here rank r makes
 * its op with scalar (r + 1) / 2 for float32 and r + 1 for int32, and every rank's input
 * holds small integers, so every product and sum is exact in both types and the expected
 * value (computed here in int64) is the only right answer. AllReduce, Reduce (root
 * n - 1) and ReduceScatter run under each host algorithm (the per-call selection, forced
 * where the call can take it: Ring, Tree, OneShot, DirectRead, RingOneShot) and with the
 * per-call deterministic option (the owner fold), at counts that fit an arena small slot,
 * a large buffer, and more than one. A path where one rank folds the others' raw inputs
 * with its own scalar gets the wrong sum.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "braid.h"
#include "brt_check.h"
#include "brt_launch.h"

static struct {
    int mode;
    int ranks[BRT_MAX_RANKS];
    int nranks_list;
    double timeout;
} cfg;

#define ERR_LEN 8192

typedef struct {
    const char *algos; /* NULL: the library's choice */
    int det;           /* the per-call deterministic option */
} sel_t;

static const sel_t sels[] = {
    {NULL, 0},      {"Ring", 0},        {"Tree", 0}, {"OneShot", 0},
    {"DirectRead", 0}, {"RingOneShot", 0}, {NULL, 1},
};
#define NSELS ((int)(sizeof(sels) / sizeof(sels[0])))

static const size_t counts[] = {8, 1003, 70001};
#define NCOUNTS ((int)(sizeof(counts) / sizeof(counts[0])))

enum { F_AR, F_REDUCE, F_RS, NFN };
static const char *const fn_names[NFN] = {"AllReduce", "Reduce", "ReduceScatter"};

static const ncclDataType_t types[] = {ncclFloat32, ncclInt32};
#define NTYPES 2

/* Rank r's input element i (of the whole input), a small integer of either sign. */
static int64_t input_of(int r, size_t i)
{
    return (int64_t)((i * 3 + (size_t)r * 5) % 11) - 5;
}

/* Rank r's scalar, times 2 for float32 (whose scalar is (r + 1) / 2). */
static int64_t scalar2_of(ncclDataType_t t, int r)
{
    return t == ncclFloat32 ? r + 1 : 2 * (r + 1);
}

/* Twice the expected result at element i of the whole reduction. */
static int64_t expect2(ncclDataType_t t, int n, size_t i)
{
    int64_t s = 0;
    for (int r = 0; r < n; r++) {
        s += scalar2_of(t, r) * input_of(r, i);
    }
    return s;
}

static ncclCollConfig_t *callcfg(ncclCollConfig_t *c, ncclConfigExt_t *ext, const sel_t *s)
{
    ncclCollConfig_t init = NCCL_COLLCONFIG_INITIALIZER;
    *c = init;
    c->algSelection = s->algos;
    c->forceAlgSelection = 0; /* a selection the call cannot take falls back */
    if (s->det) {
        memset(ext, 0, sizeof(*ext));
        ext->key.vendorId = BRAID_VENDOR_ID;
        ext->key.optionId = BRAID_OPT_DETERMINISTIC;
        ext->val.i = 1;
        c->ext = ext;
    }
    return c;
}

/* One call; returns the number of wrong elements (0 right), or -1 when it failed. */
static int one_call(brt_rank_ctx_t *ctx, ncclComm_t comm, const sel_t *s, int fn,
                    ncclDataType_t t, size_t count, void *in, void *out, char *err, size_t errlen)
{
    int n = ctx->nranks, me = ctx->rank, root = n - 1;
    size_t in_count = fn == F_RS ? count * (size_t)n : count;
    float fs = (float)(me + 1) / 2.0f;
    int32_t is = me + 1;
    ncclRedOp_t op;
    ncclCollConfig_t c;
    ncclConfigExt_t ext;
    ncclResult_t res;

    for (size_t i = 0; i < in_count; i++) {
        if (t == ncclFloat32) {
            ((float *)in)[i] = (float)input_of(me, i);
        } else {
            ((int32_t *)in)[i] = (int32_t)input_of(me, i);
        }
    }
    memset(out, 0xa5, count * 4);
    res = ncclRedOpCreatePreMulSum(&op, t == ncclFloat32 ? (void *)&fs : (void *)&is, t,
                                   ncclScalarHostImmediate, comm);
    if (res != ncclSuccess) {
        snprintf(err, errlen, "rank %d: ncclRedOpCreatePreMulSum returned %d: %s", me, (int)res,
                 ncclGetLastError(comm));
        return -1;
    }
    callcfg(&c, &ext, s);
    switch (fn) {
    case F_AR: res = ncclAllReduceConfig(in, out, count, t, op, comm, NULL, &c); break;
    case F_REDUCE: res = ncclReduceConfig(in, out, count, t, op, root, comm, NULL, &c); break;
    default: res = ncclReduceScatterConfig(in, out, count, t, op, comm, NULL, &c); break;
    }
    if (res != ncclSuccess) {
        snprintf(err, errlen, "rank %d: %s failed (%d): %s", me, fn_names[fn], (int)res,
                 ncclGetLastError(comm));
        ncclRedOpDestroy(op, comm);
        return -1;
    }
    res = ncclRedOpDestroy(op, comm);
    if (res != ncclSuccess) {
        snprintf(err, errlen, "rank %d: ncclRedOpDestroy returned %d", me, (int)res);
        return -1;
    }
    if (fn == F_REDUCE && me != root) {
        return 0;
    }
    size_t base = fn == F_RS ? (size_t)me * count : 0;
    int bad = 0;
    for (size_t i = 0; i < count; i++) {
        int64_t want2 = expect2(t, n, base + i);
        double got = t == ncclFloat32 ? (double)((float *)out)[i] : (double)((int32_t *)out)[i];
        double want = t == ncclFloat32 ? (double)want2 / 2.0 : (double)(want2 / 2);
        if (got != want) {
            if (bad == 0) {
                snprintf(err, errlen,
                         "rank %d: %s %s count %zu algo %s%s: element %zu is %g, expected %g",
                         me, fn_names[fn], t == ncclFloat32 ? "float32" : "int32", count,
                         s->algos != NULL ? s->algos : "default", s->det ? " deterministic" : "",
                         i, got, want);
            }
            bad++;
        }
    }
    return bad;
}

static int rank_body(brt_rank_ctx_t *ctx)
{
    ncclComm_t comm = NULL;
    int n = ctx->nranks, wrong_calls = 0, total = 0, wrong_by_sel[NSELS] = {0};
    size_t most = counts[NCOUNTS - 1] * (size_t)n;
    char err[512], first[512];
    void *in = malloc(most * 4), *out = malloc(most * 4);

    first[0] = '\0';
    if (in == NULL || out == NULL) {
        brt_fail(ctx, "out of memory");
        free(in);
        free(out);
        return 1;
    }
    if (brt_rank_init(ctx, &comm) != ncclSuccess) {
        free(in);
        free(out);
        return 1;
    }
    for (int si = 0; si < NSELS; si++) {
        for (int fn = 0; fn < NFN; fn++) {
            for (int ti = 0; ti < NTYPES; ti++) {
                for (int ci = 0; ci < NCOUNTS; ci++) {
                    brt_doing(ctx, "%s %s count %zu sel %d", fn_names[fn],
                              types[ti] == ncclFloat32 ? "float32" : "int32", counts[ci], si);
                    int r = one_call(ctx, comm, &sels[si], fn, types[ti], counts[ci], in, out,
                                     err, sizeof(err));
                    total++;
                    if (r < 0) {
                        brt_fail(ctx, "%s", err);
                        ncclCommAbort(comm);
                        free(in);
                        free(out);
                        return 1;
                    }
                    if (r > 0) {
                        wrong_by_sel[si]++;
                        if (wrong_calls++ == 0) {
                            snprintf(first, sizeof(first), "%s", err);
                        }
                    }
                }
            }
        }
    }
    free(in);
    free(out);
    int bad = wrong_calls > 0;
    if (bad) {
        char by[256];
        size_t used = 0;
        by[0] = '\0';
        for (int si = 0; si < NSELS && used < sizeof(by); si++) {
            used += (size_t)snprintf(by + used, sizeof(by) - used, " %s%s=%d",
                                     sels[si].algos != NULL ? sels[si].algos : "default",
                                     sels[si].det ? "+det" : "", wrong_by_sel[si]);
        }
        brt_fail(ctx, "rank %d: %d of %d calls gave wrong results (per selection:%s); first: %s",
                 ctx->rank, wrong_calls, total, by, first);
    }
    if (ncclCommFinalize(comm) != ncclSuccess || ncclCommDestroy(comm) != ncclSuccess) {
        brt_fail(ctx, "rank %d: finalize/destroy failed: %s", ctx->rank, ncclGetLastError(NULL));
        bad = 1;
    }
    return bad;
}

START_TEST(test_premul_per_rank)
{
    int n = cfg.ranks[_i];
    double timeout = cfg.timeout * brt_time_scale();
    char *out = malloc(4 * ERR_LEN);
    int bad;

    ck_assert_ptr_nonnull(out);
    out[0] = '\0';
    if (cfg.mode == BRT_MODE_PROC) {
        bad = brt_procs_run(n, rank_body, NULL, timeout, out, 4 * ERR_LEN);
    } else {
        bad = brt_threads_run(n, rank_body, NULL, timeout, out, 4 * ERR_LEN);
    }
    ck_assert_msg(!bad, "%d ranks (%s):\n%s", n,
                  cfg.mode == BRT_MODE_PROC ? "processes" : "threads", brt_clip(out, 3000));
    free(out);
}
END_TEST

static int parse_args(int argc, char **argv)
{
    cfg.mode = BRT_MODE_PROC;
    cfg.timeout = 120;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (brt_layout_option(k, v, &cfg.mode, cfg.ranks, &cfg.nranks_list)) {
            continue;
        } else if (strcmp(k, "--timeout") == 0) {
            cfg.timeout = atof(v);
        } else {
            fprintf(stderr, "unknown option %s\n", k);
            return -1;
        }
    }
    if (cfg.mode == BRT_MODE_INITALL) {
        fprintf(stderr, "--mode initall is not supported here\n");
        return -1;
    }
    if (cfg.nranks_list == 0) {
        cfg.ranks[cfg.nranks_list++] = 4;
    }
    return 0;
}

static Suite *mp_premul_suite(void)
{
    Suite *s = suite_create("mp_premul");
    TCase *tc = tcase_create("per_rank_scalar");
    tcase_set_timeout(tc, cfg.timeout * brt_time_scale() + 60);
    tcase_add_loop_test(tc, test_premul_per_rank, 0, cfg.nranks_list);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    if (parse_args(argc, argv) != 0) {
        return 2;
    }
    return brt_suite_run(mp_premul_suite());
}
