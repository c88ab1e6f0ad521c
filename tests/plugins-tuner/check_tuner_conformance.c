/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tuner plugin conformance kit (Check suite "tuner_conformance"), run against any tuner
 * library:
 *
 *   check_tuner_conformance <plugin.so> [--version N] [--no-config]
 *
 * It loads the newest ncclTunerPlugin_vN (or the one --version names), then checks the
 * cost-table contract of plugin-abi.md 2.5 over a matrix of collectives, sizes and
 * communicator shapes: getCollInfo succeeds, writes nothing outside the 7x3 table, never
 * makes an unavailable (-1.0) entry available, only lowers available entries, leaves at
 * least one candidate, and sets a sane channel count. Unless --no-config is given, it
 * also checks the NCCL_TUNER_CONFIG_FILE format of NCCL's example tuner (2.6): a file
 * forcing choices for size ranges yields exactly those choices, and a bad line makes
 * init fail with the file name and line number in a warning.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tuner_kit.h"

#define MAX_SANE_CHANNELS 64 /* NCCL's MAXCHANNELS and Braid's BR_MAX_CHANNELS */
#define NA NCCL_ALGO_PROTO_IGNORE

static const char *plugin_path;
static int plugin_version; /* 0: newest */
static int config_tests = 1;

static tuner_kit_t kit;
static char tmpdir[256];
static char conf_path[320];

/* Per-test fixture (runs in the forked child): load the plugin, make a scratch dir, and
 * start without any configuration. */
static void setup(void)
{
    char err[512];

    ck_assert_msg(tuner_kit_open(plugin_path, plugin_version, &kit, err, sizeof(err)) == 0, "%s",
                  err);
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/braid-tuner-kit-XXXXXX");
    ck_assert_msg(mkdtemp(tmpdir) != NULL, "mkdtemp: %s", strerror(errno));
    ck_assert_int_eq(chdir(tmpdir), 0); /* no stray nccl_tuner.conf in the way */
    snprintf(conf_path, sizeof(conf_path), "%s/tuner.conf", tmpdir);
    unsetenv("NCCL_TUNER_CONFIG_FILE");
    tuner_kit_log_reset();
}

static void teardown(void)
{
    unlink(conf_path);
    if (chdir("/") == 0) {
        rmdir(tmpdir);
    }
    tuner_kit_close(&kit);
}

/* Write `text` as the configuration file and point NCCL_TUNER_CONFIG_FILE at it. */
static void use_config(const char *text)
{
    FILE *f = fopen(conf_path, "w");

    ck_assert_msg(f != NULL, "cannot write %s: %s", conf_path, strerror(errno));
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_int_eq(setenv("NCCL_TUNER_CONFIG_FILE", conf_path, 1), 0);
}

/* A cost table with guard words around it, to catch writes outside the 7x3 floats. */
typedef struct {
    float before[4];
    float t[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
    float after[4];
} guarded_table_t;

#define GUARD 12345.0f

/* Availability pattern k: RING/SIMPLE always available, others by a rotating pattern;
 * available entries get distinct positive costs. */
static void fill_table(guarded_table_t *g, int k)
{
    for (int i = 0; i < 4; i++) {
        g->before[i] = g->after[i] = GUARD;
    }
    for (int a = 0; a < NCCL_NUM_ALGORITHMS; a++) {
        for (int p = 0; p < NCCL_NUM_PROTOCOLS; p++) {
            int avail = (a == NCCL_ALGO_RING && p == NCCL_PROTO_SIMPLE) || (a * 3 + p + k) % 3;
            g->t[a][p] = avail ? 10.0f + (float)(a * 3 + p + k) : (float)NA;
        }
    }
}

/* The 2.5 contract for one call; returns a description of the first violation or NULL. */
static const char *check_contract(const guarded_table_t *in, const guarded_table_t *out, int nch,
                                  char *buf, size_t len)
{
    int candidates = 0;

    for (int i = 0; i < 4; i++) {
        if (out->before[i] != GUARD || out->after[i] != GUARD) {
            return "wrote outside the 7x3 cost table";
        }
    }
    for (int a = 0; a < NCCL_NUM_ALGORITHMS; a++) {
        for (int p = 0; p < NCCL_NUM_PROTOCOLS; p++) {
            float was = in->t[a][p], now = out->t[a][p];
            if (isnan(now) || (was == (float)NA && now != (float)NA) ||
                (was != (float)NA && (now > was || (now < 0.0f && now != (float)NA)))) {
                snprintf(buf, len, "entry [algo %d][proto %d] went from %g to %g", a, p,
                         (double)was, (double)now);
                return buf;
            }
            candidates += now >= 0.0f;
        }
    }
    if (candidates == 0) {
        return "left no (algorithm, protocol) candidate";
    }
    if (nch < 0 || nch > MAX_SANE_CHANNELS) {
        snprintf(buf, len, "set nChannels to %d", nch);
        return buf;
    }
    return NULL;
}

static const size_t sizes[] = {0, 1, 1000, 4096, 65535, 65536, 1 << 20, 1 << 26, 4294967296ULL};
static const struct {
    size_t nranks, nnodes;
} shapes[] = {{1, 1}, {2, 1}, {8, 1}, {8, 2}, {64, 8}};
#define NSHAPES ((int)(sizeof(shapes) / sizeof(shapes[0])))

static const char forcing_config[] = "# Braid tuner conformance: forced choices\n"
                                     "allreduce, 0, 65535, tree, ll, 4, -1, -1\n"
                                     "\n"
                                     "allgather, 1048576, 4294967295, ring, simple, -1, -1, -1\n"
                                     "broadcast, 0, 100, nvls, simple, 2, -1, -1\n"
                                     "reduce, 0, 1000, tree, simple, 3, 4, -1\n"
                                     "  reduce,0,1000,ring,ll128,-1,2,8   \n"
                                     "reducescatter, 0, 1000, pat, simple, -1, -1, -1, 2\n"
                                     "reducescatter, 0, 1000, ring, ll, 5, -1, -1, -1, 1\n";

/* Every collective x size x pipeOps x regBuff x availability pattern, for one shape. */
static void run_matrix(int shape)
{
    void *ctx = NULL;
    char buf[256];

    ck_assert_int_eq(tuner_kit_init(&kit, 0x1234abcdULL + (uint64_t)shape, shapes[shape].nranks,
                                    shapes[shape].nnodes, &ctx),
                     ncclSuccess);
    for (int coll = 0; coll < NCCL_NUM_FUNCTIONS; coll++) {
        for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
            for (int k = 0; k < 12; k++) {
                guarded_table_t in, out;
                int nch = 0, pipe = 1 + (k & 1) * 3, reg = (k >> 1) & 1;
                fill_table(&in, k % 3);
                out = in;
                ncclResult_t res = tuner_kit_get_coll_info(&kit, ctx, (ncclFunc_t)coll, sizes[s],
                                                           pipe, out.t, reg, &nch);
                ck_assert_msg(res == ncclSuccess, "getCollInfo(coll %d, %zu bytes) returned %d",
                              coll, sizes[s], (int)res);
                const char *why = check_contract(&in, &out, nch, buf, sizeof(buf));
                ck_assert_msg(why == NULL,
                              "getCollInfo(coll %d, %zu bytes, %zu ranks, %zu nodes) %s", coll,
                              sizes[s], shapes[shape].nranks, shapes[shape].nnodes, why);
            }
        }
    }
    ck_assert_int_eq(tuner_kit_finalize(&kit, ctx), ncclSuccess);
}

START_TEST(test_tuner_table_has_name_and_members)
{
    const void *const *slots = kit.table;

    ck_assert_msg(kit.name != NULL && kit.name[0] != '\0', "the tuner table has no name");
    /* init, getCollInfo and finalize/destroy (slots 1-3) are mandatory in every version. */
    for (int i = 1; i <= 3; i++) {
        ck_assert_msg(slots[i] != NULL, "slot %d of ncclTunerPlugin_v%d is NULL", i, kit.version);
    }
    fprintf(stderr, "tuner '%s', ncclTunerPlugin_v%d\n", kit.name, kit.version);
}
END_TEST

START_TEST(test_tuner_init_finalize_without_config)
{
    void *ctx = NULL;

    ck_assert_int_eq(tuner_kit_init(&kit, 42, 4, 1, &ctx), ncclSuccess);
    ck_assert_int_eq(tuner_kit_finalize(&kit, ctx), ncclSuccess);
}
END_TEST

START_TEST(test_tuner_matrix_respects_cost_table)
{
    run_matrix(_i);
}
END_TEST

START_TEST(test_tuner_matrix_with_config_respects_cost_table)
{
    use_config(forcing_config);
    run_matrix(_i);
}
END_TEST

START_TEST(test_tuner_chunk_size_is_sane)
{
    const ncclTuner_v6_t *t = kit.table;
    void *ctx = NULL;
    size_t chunk = 131072;

    if (kit.version < 6 || t->getChunkSize == NULL) { /* v7: v6's slots */
        return; /* optional member */
    }
    ck_assert_int_eq(tuner_kit_init(&kit, 7, 8, 1, &ctx), ncclSuccess);
    ck_assert_int_eq(t->getChunkSize(ctx, ncclFuncAllReduce, 1 << 20, NCCL_ALGO_RING,
                                     NCCL_PROTO_SIMPLE, 2, &chunk),
                     ncclSuccess);
    ck_assert_msg(chunk > 0, "getChunkSize returned a chunk of 0 bytes");
    ck_assert_int_eq(tuner_kit_finalize(&kit, ctx), ncclSuccess);
}
END_TEST

/* One expectation of the forcing configuration (8 ranks on 2 nodes). */
typedef struct {
    ncclFunc_t coll;
    size_t nbytes;
    int pipe_ops, reg_buff;
    int algo, proto; /* forced entry, or -1: table unchanged */
    int nch;         /* expected nChannels */
} expect_t;

static const expect_t expectations[] = {
    {ncclFuncAllReduce, 0, 1, 0, NCCL_ALGO_TREE, NCCL_PROTO_LL, 4},
    {ncclFuncAllReduce, 65535, 1, 0, NCCL_ALGO_TREE, NCCL_PROTO_LL, 4}, /* max is inclusive */
    {ncclFuncAllReduce, 65536, 1, 0, -1, -1, 0},
    {ncclFuncAllGather, 1048575, 1, 0, -1, -1, 0},
    {ncclFuncAllGather, 1048576, 1, 0, NCCL_ALGO_RING, NCCL_PROTO_SIMPLE, 0}, /* min incl. */
    {ncclFuncAllGather, 4294967295ULL, 1, 0, NCCL_ALGO_RING, NCCL_PROTO_SIMPLE, 0},
    {ncclFuncAllGather, 4294967296ULL, 1, 0, -1, -1, 0},
    {ncclFuncBroadcast, 50, 1, 0, -1, -1, 0}, /* NVLS is unavailable: nothing forced */
    {ncclFuncReduce, 500, 1, 0, NCCL_ALGO_RING, NCCL_PROTO_LL128, 0}, /* nNodes 4 skipped */
    {ncclFuncReduceScatter, 10, 2, 0, NCCL_ALGO_PAT, NCCL_PROTO_SIMPLE, 0},
    {ncclFuncReduceScatter, 10, 1, 1, NCCL_ALGO_RING, NCCL_PROTO_LL, 5},
    {ncclFuncReduceScatter, 10, 1, 0, -1, -1, 0},
    {ncclFuncReduceScatter, 2000, 2, 1, -1, -1, 0},
};

START_TEST(test_tuner_config_forces_exact_choice)
{
    const expect_t *e = &expectations[_i];
    guarded_table_t in, out;
    void *ctx = NULL;
    int nch = 0;

    use_config(forcing_config);
    ck_assert_int_eq(tuner_kit_init(&kit, 99, 8, 2, &ctx), ncclSuccess);
    fill_table(&in, 0);
    for (int p = 0; p < NCCL_NUM_PROTOCOLS; p++) { /* a typical host: no NVLS, no CollNet */
        in.t[NCCL_ALGO_NVLS][p] = in.t[NCCL_ALGO_NVLS_TREE][p] = (float)NA;
        in.t[NCCL_ALGO_COLLNET_DIRECT][p] = in.t[NCCL_ALGO_COLLNET_CHAIN][p] = (float)NA;
        in.t[NCCL_ALGO_TREE][p] = in.t[NCCL_ALGO_RING][p] = in.t[NCCL_ALGO_PAT][p] = 20.0f + p;
    }
    out = in;
    ck_assert_int_eq(tuner_kit_get_coll_info(&kit, ctx, e->coll, e->nbytes, e->pipe_ops, out.t,
                                             e->reg_buff, &nch),
                     ncclSuccess);
    for (int a = 0; a < NCCL_NUM_ALGORITHMS; a++) {
        for (int p = 0; p < NCCL_NUM_PROTOCOLS; p++) {
            float want = (a == e->algo && p == e->proto) ? 0.0f : in.t[a][p];
            ck_assert_msg(out.t[a][p] == want,
                          "case %d (coll %d, %zu bytes): entry [%d][%d] is %g, expected %g", _i,
                          (int)e->coll, e->nbytes, a, p, (double)out.t[a][p], (double)want);
        }
    }
    ck_assert_msg(nch == e->nch, "case %d: nChannels %d, expected %d", _i, nch, e->nch);
    ck_assert_int_eq(tuner_kit_finalize(&kit, ctx), ncclSuccess);
}
END_TEST

static const char *const bad_lines[] = {
    "allredcue, 0, 100, ring, simple, -1, -1, -1",          /* unknown collective */
    "allreduce, 0, 100, rign, simple, -1, -1, -1",          /* unknown algorithm */
    "allreduce, 0, 100, ring, simpel, -1, -1, -1",          /* unknown protocol */
    "allreduce, 0, 100, ring, simple, -1, -1",              /* 7 fields */
    "allreduce, 0, 100, ring, simple, -1, -1, -1, 1, 0, 7", /* 11 fields */
    "allreduce, zero, 100, ring, simple, -1, -1, -1",       /* not a number */
    "allreduce, 0, 100x, ring, simple, -1, -1, -1",         /* trailing garbage */
    "allreduce, 200, 100, ring, simple, -1, -1, -1",        /* min > max */
    "allreduce, -5, 100, ring, simple, -1, -1, -1",         /* negative size */
    "allreduce, 0, 100, ring, simple, 0, -1, -1",           /* zero channels */
    "allreduce, 0, 100, ring, simple, -1, abc, -1",         /* nNodes not a number */
    "allreduce, 0, 100, ring, simple, -1, -1, -1, -1, 2",   /* regBuff not 0/1/-1 */
    "allreduce,,100,ring,simple,-1,-1,-1",                  /* empty field */
};

START_TEST(test_tuner_bad_config_line_fails_init_with_line_number)
{
    char text[512], where[400];
    void *ctx = NULL;

    /* The bad line is line 4, after a comment, a blank line and a good rule. */
    snprintf(text, sizeof(text),
             "# conformance\n\nallreduce, 0, 100, ring, simple, -1, -1, -1\n%s\n"
             "allgather, 0, 100, ring, simple, -1, -1, -1\n",
             bad_lines[_i]);
    use_config(text);
    ncclResult_t res = tuner_kit_init(&kit, 5, 8, 1, &ctx);
    ck_assert_msg(res == ncclInvalidUsage, "init accepted bad line '%s' (returned %d)",
                  bad_lines[_i], (int)res);
    snprintf(where, sizeof(where), "%s:4", conf_path);
    ck_assert_msg(strstr(tuner_kit_log_warnings(), where) != NULL,
                  "no warning names '%s' for bad line '%s'; warnings were:\n%s", where,
                  bad_lines[_i], tuner_kit_log_warnings());
}
END_TEST

START_TEST(test_tuner_missing_named_config_fails_init)
{
    void *ctx = NULL;

    ck_assert_int_eq(setenv("NCCL_TUNER_CONFIG_FILE", "/nonexistent/braid/tuner.conf", 1), 0);
    ck_assert_int_eq(tuner_kit_init(&kit, 5, 8, 1, &ctx), ncclInvalidUsage);
    ck_assert_msg(strstr(tuner_kit_log_warnings(), "/nonexistent/braid/tuner.conf") != NULL,
                  "the warning does not name the file");
}
END_TEST

START_TEST(test_tuner_comments_and_blank_lines_only)
{
    guarded_table_t in, out;
    void *ctx = NULL;
    int nch = 0;

    use_config("# nothing but comments\n   # indented\n\n\t\n# allreduce,0,1,tree,ll,1,-1,-1\n");
    ck_assert_int_eq(tuner_kit_init(&kit, 5, 8, 1, &ctx), ncclSuccess);
    fill_table(&in, 1);
    out = in;
    ck_assert_int_eq(tuner_kit_get_coll_info(&kit, ctx, ncclFuncAllReduce, 0, 1, out.t, 0, &nch),
                     ncclSuccess);
    ck_assert_msg(memcmp(&in, &out, sizeof(in)) == 0 && nch == 0,
                  "a commented-out rule was applied");
    ck_assert_int_eq(tuner_kit_finalize(&kit, ctx), ncclSuccess);
}
END_TEST

/* Two communicators used from several threads at once. */
typedef struct {
    void *ctx[2];
    int errors;
} race_t;

static void *race_thread(void *arg)
{
    race_t *r = arg;

    for (int i = 0; i < 4000; i++) {
        int c = i & 1, nch = 0;
        guarded_table_t g;
        fill_table(&g, 0);
        g.t[NCCL_ALGO_TREE][NCCL_PROTO_LL] = 30.0f;
        g.t[NCCL_ALGO_RING][NCCL_PROTO_LL128] = 31.0f;
        if (tuner_kit_get_coll_info(&kit, r->ctx[c], ncclFuncAllReduce, 64, 1, g.t, 0, &nch) !=
                ncclSuccess ||
            g.t[c ? NCCL_ALGO_RING : NCCL_ALGO_TREE][c ? NCCL_PROTO_LL128 : NCCL_PROTO_LL] !=
                0.0f ||
            nch != (c ? 6 : 3)) {
            __atomic_add_fetch(&r->errors, 1, __ATOMIC_RELAXED);
        }
    }
    return NULL;
}

START_TEST(test_tuner_contexts_are_independent_and_thread_safe)
{
    pthread_t th[4];
    race_t r = {{NULL, NULL}, 0};

    use_config("allreduce, 0, 1000, tree, ll, 3, -1, 8\n"
               "allreduce, 0, 1000, ring, ll128, 6, -1, 16\n");
    ck_assert_int_eq(tuner_kit_init(&kit, 1, 8, 1, &r.ctx[0]), ncclSuccess);
    ck_assert_int_eq(tuner_kit_init(&kit, 2, 16, 2, &r.ctx[1]), ncclSuccess);
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(pthread_create(&th[i], NULL, race_thread, &r), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
    }
    ck_assert_msg(r.errors == 0, "%d calls got another communicator's choice", r.errors);
    ck_assert_int_eq(tuner_kit_finalize(&kit, r.ctx[0]), ncclSuccess);
    ck_assert_int_eq(tuner_kit_finalize(&kit, r.ctx[1]), ncclSuccess);
}
END_TEST

static Suite *tuner_suite(void)
{
    Suite *s = suite_create("tuner_conformance");
    TCase *tc = tcase_create("abi");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_tuner_table_has_name_and_members);
    tcase_add_test(tc, test_tuner_init_finalize_without_config);
    tcase_add_loop_test(tc, test_tuner_matrix_respects_cost_table, 0, NSHAPES);
    tcase_add_test(tc, test_tuner_chunk_size_is_sane);
    suite_add_tcase(s, tc);
    if (!config_tests) {
        return s;
    }
    tc = tcase_create("config");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_loop_test(tc, test_tuner_matrix_with_config_respects_cost_table, 0, NSHAPES);
    tcase_add_loop_test(tc, test_tuner_config_forces_exact_choice, 0,
                        (int)(sizeof(expectations) / sizeof(expectations[0])));
    tcase_add_loop_test(tc, test_tuner_bad_config_line_fails_init_with_line_number, 0,
                        (int)(sizeof(bad_lines) / sizeof(bad_lines[0])));
    tcase_add_test(tc, test_tuner_missing_named_config_fails_init);
    tcase_add_test(tc, test_tuner_comments_and_blank_lines_only);
    tcase_add_test(tc, test_tuner_contexts_are_independent_and_thread_safe);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    SRunner *sr;
    int failed;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--version") == 0 && i + 1 < argc) {
            plugin_version = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--no-config") == 0) {
            config_tests = 0;
        } else if (argv[i][0] != '-' && plugin_path == NULL) {
            plugin_path = argv[i];
        } else {
            plugin_path = NULL;
            break;
        }
    }
    if (plugin_path == NULL) {
        fprintf(stderr, "usage: %s <tuner-plugin.so> [--version N] [--no-config]\n", argv[0]);
        return 2;
    }
    sr = srunner_create(tuner_suite());
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
