/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "collnet_e2e": CollNet through the real core, one process per rank on
 * simulated hosts (NCCL_HOSTID per rank), the failures a user can meet. NCCL_ALGO asking
 * for CollNet without a collnet fails the call with a message naming the variable, the
 * rank and the host; a plugin whose iallreduce fails, that reports a completion of the
 * wrong size, or whose reducer sees ranks call with different counts, fails the call on
 * every rank with the rank, host, operation and plugin named, and nobody hangs. With a
 * collnet and no NCCL_ALGO, the model takes CollNet for a small AllReduce (results
 * checked) and the TUNING log says so, and a v2 tuner is told collNetSupport 1 (0 with
 * collnet off); ranks that disagree on NCCL_COLLNET_ENABLE agree not to use it.
 * AllGather / ReduceScatter forced to CollNetDirect run through a v8 plugin's iallgather /
 * ireducescatter in NCCL's window layout (results checked), fail on a completion of the
 * wrong size, accept an ireducescatter completion of bytesPerRank (the SHARP plugin's),
 * and fail, naming the missing member and NCCL_ALGO, with a plugin that has none.
 */
#include <check.h>
#include <dlfcn.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "brt_launch.h"

#define OUT_LEN 16384

typedef struct {
    size_t count[2];     /* AllReduce count of ranks 0 and 1 (later ranks: count[1]) */
    int ncalls;          /* AllReduces each rank makes */
    int fail_at;         /* the call expected to fail (1-based), 0: none */
    const char *need[3]; /* what the failing call's ncclGetLastError must contain */
    int tuner_collnet;   /* 0 or 1: what the v2 test tuner must have been told last; -1 */
    int off_rank;        /* > 0: this rank sets NCCL_COLLNET_ENABLE=0 */
    int func;            /* FN_ALLREDUCE (count: per rank's buffer) or FN_ALLGATHER /
                          * FN_REDUCESCATTER (count: per rank's block) */
} scenario_t;

enum { FN_ALLREDUCE = 0, FN_ALLGATHER = 1, FN_REDUCESCATTER = 2 };
static const char *const fn_name[] = {"AllReduce", "AllGather", "ReduceScatter"};

/* The v2 test tuner's record (tests/unit/plugin/testtp.h): its first fields. */
typedef struct {
    int init_calls, fini_calls, coll_calls;
    size_t nranks, nnodes;
    uint64_t comm_id;
    int nvl[3];
    int last_func;
    size_t last_bytes;
    int last_collnet, last_nvls;
} tuner_seen_t;

/* Did the v2 tuner loaded in this process get collNetSupport as expected for AllReduce? */
static int check_tuner(brt_rank_ctx_t *ctx, int want)
{
    void *dl = dlopen(CN_TUNER_V2, RTLD_NOW | RTLD_NOLOAD);
    const tuner_seen_t *seen = dl != NULL ? dlsym(dl, "testtuner_stats") : NULL;
    int bad = 0;

    if (seen == NULL) {
        brt_fail(ctx, "the v2 test tuner is not loaded");
        return 1;
    }
    if (seen->coll_calls == 0 || seen->last_func != 4 /* ncclFuncAllReduce */ ||
        seen->last_collnet != want) {
        brt_fail(ctx, "v2 tuner: %d calls, last function %d, collNetSupport %d (want %d)",
                 seen->coll_calls, seen->last_func, seen->last_collnet, want);
        bad = 1;
    }
    dlclose(dl);
    return bad;
}

/* Small integers: every sum is exact in float32. */
static float in_val(int r, size_t i)
{
    return (float)((int)((i * 5 + (size_t)r * 11) % 17) - 8);
}

/* AllReduce: out[i] = sum over ranks of in_val(r, i). AllGather: block b of out is rank
 * b's input. ReduceScatter: out[i] = sum over ranks of element (rank x count + i). */
static int check_result(brt_rank_ctx_t *ctx, const float *out, size_t count, int func)
{
    size_t n = func == FN_ALLGATHER ? count * (size_t)ctx->nranks : count;
    for (size_t i = 0; i < n; i++) {
        float want = 0;
        if (func == FN_ALLGATHER) {
            want = in_val((int)(i / count), i % count);
        }
        for (int r = 0; r < ctx->nranks && func != FN_ALLGATHER; r++) {
            want += in_val(r, func == FN_REDUCESCATTER ? (size_t)ctx->rank * count + i : i);
        }
        if (out[i] != want) {
            brt_fail(ctx, "element %zu of %zu is %g, expected %g", i, count, (double)out[i],
                     (double)want);
            return 1;
        }
    }
    return 0;
}

static int one_call(brt_rank_ctx_t *ctx, ncclComm_t comm, const scenario_t *sc, int call)
{
    size_t count = sc->count[ctx->rank == 0 ? 0 : 1], nr = (size_t)ctx->nranks;
    size_t nin = sc->func == FN_REDUCESCATTER ? count * nr : count;
    size_t nout = sc->func == FN_ALLGATHER ? count * nr : count;
    float *buf = malloc((nin + 1) * sizeof(float)), *out = malloc((nout + 1) * sizeof(float));
    int bad = 0;
    ncclResult_t res;

    if (buf == NULL || out == NULL) {
        free(buf);
        free(out);
        brt_fail(ctx, "out of memory");
        return 1;
    }
    for (size_t i = 0; i < nin; i++) {
        buf[i] = in_val(ctx->rank, i);
    }
    brt_doing(ctx, "%s %d of %zu floats", fn_name[sc->func], call, count);
    if (sc->func == FN_ALLGATHER) {
        res = ncclAllGather(buf, out, count, ncclFloat, comm, NULL);
    } else if (sc->func == FN_REDUCESCATTER) {
        res = ncclReduceScatter(buf, out, count, ncclFloat, ncclSum, comm, NULL);
    } else {
        res = ncclAllReduce(buf, out, count, ncclFloat, ncclSum, comm, NULL);
    }
    if (call == sc->fail_at) {
        const char *msg = ncclGetLastError(comm);
        if (res == ncclSuccess) {
            brt_fail(ctx, "%s %d succeeded; it should have failed", fn_name[sc->func], call);
            bad = 1;
        }
        for (int k = 0; k < 3 && sc->need[k] != NULL && !bad; k++) {
            if (strstr(msg, sc->need[k]) == NULL) {
                brt_fail(ctx, "%s %d failed with '%s', which lacks '%s'", fn_name[sc->func], call,
                         msg, sc->need[k]);
                bad = 1;
            }
        }
        bad = bad ? bad : -1; /* failed as expected: stop */
    } else if (res != ncclSuccess) {
        brt_fail(ctx, "%s %d returned %d: %s", fn_name[sc->func], call, (int)res,
                 ncclGetLastError(comm));
        bad = 1;
    } else {
        bad = check_result(ctx, out, count, sc->func);
    }
    free(buf);
    free(out);
    return bad;
}

static int rank_body(brt_rank_ctx_t *ctx)
{
    const scenario_t *sc = ctx->arg;
    char host[32];
    ncclComm_t comm = NULL;
    int bad = 0;

    snprintf(host, sizeof(host), "cn-host-%d", ctx->rank);
    setenv("NCCL_HOSTID", host, 1);
    if (sc->off_rank > 0 && ctx->rank == sc->off_rank) {
        setenv("NCCL_COLLNET_ENABLE", "0", 1);
    }
    if (brt_rank_init(ctx, &comm) != ncclSuccess) {
        return 1;
    }
    for (int call = 1; call <= sc->ncalls && bad == 0; call++) {
        bad = one_call(ctx, comm, sc, call);
    }
    if (bad == 0 && sc->tuner_collnet >= 0) {
        bad = check_tuner(ctx, sc->tuner_collnet);
    }
    if (bad != 0) {
        ncclCommAbort(comm);
        return bad > 0;
    }
    return ncclCommDestroy(comm) != ncclSuccess;
}

static void run(int nranks, const scenario_t *sc)
{
    char *out = malloc(OUT_LEN);
    ck_assert_ptr_nonnull(out);
    out[0] = '\0';
    int bad = brt_procs_run(nranks, rank_body, (void *)sc, 60 * brt_time_scale(), out, OUT_LEN);
    ck_assert_msg(!bad, "%s", out);
    free(out);
}

static void use_plugin(const char *path, const char *mode)
{
    setenv("NCCL_NET_PLUGIN", path, 1);
    setenv("NCCL_COLLNET_ENABLE", "1", 1);
    setenv("BRAID_TEST_COLLNET", mode, 1);
}

START_TEST(test_algo_without_collnet)
{
    scenario_t sc = {
        {1000, 1000}, 1, 1, {"NCCL_ALGO", "CollNetDirect/Simple needs a collnet", "(host "}, -1, 0,
        FN_ALLREDUCE};
    use_plugin(CN_SOCKET, "");
    setenv("NCCL_ALGO", "allreduce:CollNetDirect", 1);
    run(2, &sc);
}
END_TEST

START_TEST(test_algo_collnet_disabled)
{
    /* The plugin is there but NCCL_COLLNET_ENABLE is off: the same clear failure. */
    scenario_t sc = {{64, 64}, 1, 1,           {"CollNetChain/Simple needs a collnet", NULL, NULL},
                     -1,       0, FN_ALLREDUCE};
    use_plugin(CN_PLUGIN_V12, "");
    setenv("NCCL_COLLNET_ENABLE", "0", 1);
    setenv("NCCL_ALGO", "allreduce:CollNetChain", 1);
    run(2, &sc);
}
END_TEST

START_TEST(test_iallreduce_fails)
{
    scenario_t sc = {{5000, 5000}, 3, 2,           {"iallreduce", "(host ", "CollNetTest"},
                     -1,           0, FN_ALLREDUCE};
    use_plugin(CN_PLUGIN_V12, "failop");
    setenv("NCCL_ALGO", "allreduce:CollNetDirect", 1);
    run(3, &sc);
}
END_TEST

START_TEST(test_wrong_size)
{
    scenario_t sc = {
        {777, 777},  2,
        1,           {"completed a chunk of 3108 bytes with size 3107", "CollNetTestV8 (v8)", NULL},
        -1,          0,
        FN_ALLREDUCE};
    use_plugin(CN_PLUGIN_V8, "badsize");
    setenv("NCCL_ALGO", "allreduce:CollNetDirect", 1);
    run(2, &sc);
}
END_TEST

START_TEST(test_mismatched_counts)
{
    scenario_t sc = {{100, 200}, 1, 1, {"test failed", "AllReduce", NULL}, -1, 0, FN_ALLREDUCE};
    use_plugin(CN_PLUGIN_V12, "");
    setenv("NCCL_ALGO", "allreduce:CollNetDirect", 1);
    run(2, &sc);
}
END_TEST

START_TEST(test_model_takes_collnet)
{
    /* No NCCL_ALGO: a small AllReduce over three hosts goes to the collnet (the model's
     * choice, logged by rank 0), and is right. */
    scenario_t sc = {{100, 100}, 4, 0, {NULL, NULL, NULL}, -1, 0, FN_ALLREDUCE};
    char pattern[96], logs[96];
    glob_t g;
    int seen = 0;
    snprintf(pattern, sizeof(pattern), "/tmp/collnet_e2e_%d.%%p.log", (int)getpid());
    snprintf(logs, sizeof(logs), "/tmp/collnet_e2e_%d.*.log", (int)getpid());
    use_plugin(CN_PLUGIN_V12, "");
    setenv("NCCL_DEBUG", "INFO", 1);
    setenv("NCCL_DEBUG_SUBSYS", "TUNING", 1);
    setenv("NCCL_DEBUG_FILE", pattern, 1);
    run(3, &sc);
    ck_assert_int_eq(glob(logs, 0, NULL, &g), 0);
    for (size_t k = 0; k < g.gl_pathc; k++) {
        FILE *f = fopen(g.gl_pathv[k], "r");
        char line[512];
        while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
            seen |= strstr(line, "AllReduce 1 B - ") != NULL &&
                    strstr(line, ": CollNetDirect/Simple") != NULL;
        }
        if (f != NULL) {
            fclose(f);
        }
        if (getenv("CN_KEEP_LOGS") == NULL) {
            remove(g.gl_pathv[k]);
        }
    }
    globfree(&g);
    ck_assert_msg(seen, "rank 0's TUNING log does not show CollNetDirect for small AllReduce");
}
END_TEST

/* A v2 tuner is told collNetSupport from the table (plugin-abi.md 2.5): 1 with a collnet,
 * 0 with collnet off. */
static void tuner_run(const char *enable, int want)
{
    scenario_t sc = {{300, 300}, 2, 0, {NULL, NULL, NULL}, want, 0, FN_ALLREDUCE};
    use_plugin(CN_PLUGIN_V12, "");
    setenv("NCCL_COLLNET_ENABLE", enable, 1);
    setenv("NCCL_TUNER_PLUGIN", CN_TUNER_V2, 1);
    run(3, &sc);
}

START_TEST(test_tuner_sees_collnet)
{
    tuner_run("1", 1);
}
END_TEST

START_TEST(test_tuner_sees_no_collnet)
{
    tuner_run("0", 0);
}
END_TEST

/* Ranks that disagree on NCCL_COLLNET_ENABLE agree not to use collnet: no hang, right
 * results (the model's choice), and a forced CollNet fails alike on every rank. (One run
 * per test: the launcher's process reads the parameters once.) */
START_TEST(test_enable_differs)
{
    scenario_t sc = {{3000, 3000}, 3, 0, {NULL, NULL, NULL}, -1, 2, FN_ALLREDUCE};
    use_plugin(CN_PLUGIN_V12, "");
    run(3, &sc);
}
END_TEST

START_TEST(test_enable_differs_forced)
{
    scenario_t sc = {
        {3000, 3000}, 1, 1,           {"CollNetDirect/Simple needs a collnet", NULL, NULL},
        -1,           1, FN_ALLREDUCE};
    use_plugin(CN_PLUGIN_V12, "");
    setenv("NCCL_ALGO", "allreduce:CollNetDirect", 1);
    run(3, &sc);
}
END_TEST

/* AllGather or ReduceScatter forced to CollNetDirect through `plugin` in failure mode
 * `mode`: 1000 floats a block over 3 ranks with 4096-byte staging buffers is a
 * concatenation of 12000 bytes cut into windows of 4096, 4096 and 3808 bytes, each
 * reaching into two blocks, results checked. (One run per test, as above.) */
static void windows_run(const char *plugin, const char *mode, int func)
{
    scenario_t sc = {{1000, 1000}, 2, 0, {NULL, NULL, NULL}, -1, 0, func};
    use_plugin(plugin, mode);
    setenv("BRAID_COLLNET_CHUNK", "4096", 1);
    setenv("NCCL_ALGO", "allgather:CollNetDirect;reducescatter:CollNetDirect", 1);
    run(3, &sc);
}

/* Through a v8 plugin (32-bit part sizes). */
START_TEST(test_v8_allgather)
{
    windows_run(CN_PLUGIN_V8, "", FN_ALLGATHER);
}
END_TEST

START_TEST(test_v8_reducescatter)
{
    windows_run(CN_PLUGIN_V8, "", FN_REDUCESCATTER);
}
END_TEST

/* An ireducescatter that reports bytesPerRank as its size (as the SHARP plugin does) is
 * accepted. */
START_TEST(test_reducescatter_blocksize)
{
    windows_run(CN_PLUGIN_V12, "blocksize", FN_REDUCESCATTER);
}
END_TEST

/* A completion of the wrong size (one byte short) fails the first call of `func` with
 * `need` in its error: 2 x 1000 floats are one window. */
static void wrong_size_run(int func, const char *need)
{
    scenario_t sc = {{1000, 1000}, 1, 1, {need, fn_name[func], "CollNetTest (v12)"}, -1, 0, func};
    use_plugin(CN_PLUGIN_V12, "badsize");
    setenv("NCCL_ALGO", "allgather:CollNetDirect;reducescatter:CollNetDirect", 1);
    run(2, &sc);
}

/* iallgather must report the window; ireducescatter this rank's 1000 floats of it. */
START_TEST(test_wrong_size_allgather)
{
    wrong_size_run(FN_ALLGATHER, "completed a chunk of 8000 bytes with size 7999");
}
END_TEST

START_TEST(test_wrong_size_reducescatter)
{
    wrong_size_run(FN_REDUCESCATTER,
                   "completed a window with 4000 bytes of this rank's block with size 3999");
}
END_TEST

/* A plugin without iallgather (NULL after init): NCCL_ALGO=allgather:CollNetDirect fails
 * the call with a message naming the missing member and NCCL_ALGO. */
START_TEST(test_no_iallgather)
{
    scenario_t sc = {
        {64, 64},    1,
        1,           {"NCCL_ALGO", "needs a collnet plugin with iallgather", "AllGather"},
        -1,          0,
        FN_ALLGATHER};
    use_plugin(CN_PLUGIN_V12, "noiallgather");
    setenv("NCCL_ALGO", "allgather:CollNetDirect", 1);
    run(2, &sc);
}
END_TEST

/* The same for ReduceScatter without ireducescatter. */
START_TEST(test_no_ireducescatter)
{
    scenario_t sc = {{64, 64},
                     1,
                     1,
                     {"NCCL_ALGO", "needs a collnet plugin with ireducescatter", NULL},
                     -1,
                     0,
                     FN_REDUCESCATTER};
    use_plugin(CN_PLUGIN_V12, "noireducescatter");
    setenv("NCCL_ALGO", "reducescatter:CollNetDirect", 1);
    run(2, &sc);
}
END_TEST

static Suite *collnet_e2e_suite(void)
{
    Suite *s = suite_create("collnet_e2e");
    TCase *tc = tcase_create("e2e");
    tcase_set_timeout(tc, 90 * brt_time_scale());
    tcase_add_test(tc, test_algo_without_collnet);
    tcase_add_test(tc, test_algo_collnet_disabled);
    tcase_add_test(tc, test_iallreduce_fails);
    tcase_add_test(tc, test_wrong_size);
    tcase_add_test(tc, test_mismatched_counts);
    tcase_add_test(tc, test_model_takes_collnet);
    tcase_add_test(tc, test_tuner_sees_collnet);
    tcase_add_test(tc, test_tuner_sees_no_collnet);
    tcase_add_test(tc, test_enable_differs);
    tcase_add_test(tc, test_enable_differs_forced);
    tcase_add_test(tc, test_v8_allgather);
    tcase_add_test(tc, test_v8_reducescatter);
    tcase_add_test(tc, test_wrong_size_allgather);
    tcase_add_test(tc, test_wrong_size_reducescatter);
    tcase_add_test(tc, test_reducescatter_blocksize);
    tcase_add_test(tc, test_no_iallgather);
    tcase_add_test(tc, test_no_ireducescatter);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(collnet_e2e_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
