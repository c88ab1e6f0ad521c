/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tuner and profiler loader tests: search order (named library, default, the net plugin's
 * library), no silent fallback for a named plugin, and the adapters: a v2/v3 tuner's
 * choice reaching the v6-style cost table, v6 constants and chunk size, v4 profiler events
 * passing through with v4's descriptor; the env plugin (v1, v2).
 */
#include <check.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "check_plugin.h"
#include "log.h"
#include "plugin.h"
#include "plugin_api/tuner/tuner_common.h"
#include "testtp.h"

static void *stats_sym(const char *path, const char *symbol)
{
    void *dl = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    void *sym;
    ck_assert_msg(dl != NULL, "%s is not loaded", path);
    sym = dlsym(dl, symbol);
    dlclose(dl);
    ck_assert_ptr_nonnull(sym);
    return sym;
}

static void assert_error_has(const char *what)
{
    const char *err = br_log_last_error();
    ck_assert_msg(strstr(err, what) != NULL, "expected \"%s\" in the error: %s", what, err);
}

/* ---- Tuner ---- */

static br_tuner_request_t tuner_request(const char *plugin)
{
    br_tuner_request_t req;
    memset(&req, 0, sizeof(req));
    req.plugin = plugin;
    req.comm_hash = 0x77;
    req.nranks = 8;
    req.nnodes = 2;
    req.nvl_domains = 2;
    req.min_ranks_per_nvl = 4;
    req.max_ranks_per_nvl = 4;
    return req;
}

static br_tuner_t *tuner_open_ok(br_tuner_request_t *req)
{
    br_tuner_t *tuner = NULL;
    ncclResult_t res = br_plugin_tuner_open(req, &tuner);
    ck_assert_msg(res == ncclSuccess, "tuner open failed (%d): %s", (int)res, br_log_last_error());
    ck_assert_ptr_nonnull(tuner);
    return tuner;
}

/* A table as a core's model fills it: every tree/ring entry available, no CollNet, no
 * NVLS, no PAT. */
static void fill_table(float table[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS])
{
    for (int a = 0; a < NCCL_NUM_ALGORITHMS; a++) {
        for (int p = 0; p < NCCL_NUM_PROTOCOLS; p++) {
            table[a][p] =
                (a == NCCL_ALGO_TREE || a == NCCL_ALGO_RING) ? 10.0f + (float)(a * 3 + p) : -1.0f;
        }
    }
}

START_TEST(test_tuner_v2_choice_reaches_table)
{
    br_tuner_request_t req = tuner_request("testv2");
    br_tuner_t *tuner = tuner_open_ok(&req);
    testtuner_stats_t *st = stats_sym(tuner->path, "testtuner_stats");
    float table[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
    int nch = 0;

    ck_assert_int_eq(tuner->version, 2);
    ck_assert_str_eq(tuner->name, "TestTunerV2");
    ck_assert_int_eq(st->init_calls, 1);
    ck_assert(st->nranks == 8 && st->nnodes == 2);
    fill_table(table);
    ck_assert_int_eq(br_plugin_tuner_get_coll_info(tuner, 4, 1 << 20, 1, &table[0][0], 0, &nch),
                     ncclSuccess);
    ck_assert(table[NCCL_ALGO_RING][NCCL_PROTO_LL128] == 0.0f);
    ck_assert(table[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] == 10.0f + 5.0f); /* untouched */
    ck_assert_int_eq(nch, 3);
    ck_assert_int_eq(st->last_func, 4);
    ck_assert(st->last_bytes == (1 << 20));
    ck_assert_int_eq(st->last_collnet, 0);
    ck_assert_int_eq(st->last_nvls, 0);

    /* Support flags come from the table; a choice of an unavailable entry changes nothing. */
    fill_table(table);
    table[NCCL_ALGO_NVLS_TREE][NCCL_PROTO_SIMPLE] = 7.0f;
    table[NCCL_ALGO_COLLNET_CHAIN][NCCL_PROTO_SIMPLE] = 8.0f;
    table[NCCL_ALGO_RING][NCCL_PROTO_LL128] = -1.0f;
    nch = 0;
    ck_assert_int_eq(br_plugin_tuner_get_coll_info(tuner, 4, 64, 1, &table[0][0], 0, &nch),
                     ncclSuccess);
    ck_assert_int_eq(st->last_collnet, 1);
    ck_assert_int_eq(st->last_nvls, 1);
    ck_assert(table[NCCL_ALGO_RING][NCCL_PROTO_LL128] == -1.0f);
    br_plugin_tuner_close(tuner);
}
END_TEST

START_TEST(test_tuner_v3_edits_table_through_hook)
{
    br_tuner_request_t req = tuner_request("testv3");
    br_tuner_t *tuner = tuner_open_ok(&req);
    testtuner_stats_t *st = stats_sym(tuner->path, "testtuner_stats");
    float table[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
    int nch = 0;

    ck_assert_int_eq(tuner->version, 3);
    fill_table(table);
    /* Through the br_tune_hook_t-shaped entry the planner installs. */
    ck_assert_int_eq(br_plugin_tuner_hook(tuner, 2, 4096, &table[0][0], &nch), ncclSuccess);
    ck_assert(table[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] == 0.0f);
    ck_assert(table[NCCL_ALGO_TREE][NCCL_PROTO_LL] == -1.0f);
    ck_assert(table[NCCL_ALGO_TREE][NCCL_PROTO_SIMPLE] == 12.0f);
    ck_assert_int_eq(nch, 5);
    ck_assert_int_eq(st->num_algo, NCCL_NUM_ALGORITHMS);
    ck_assert_int_eq(st->num_proto, NCCL_NUM_PROTOCOLS);
    /* v3 has no getChunkSize: the chunk is left alone. */
    size_t chunk = 1000;
    ck_assert_int_eq(br_plugin_tuner_get_chunk_size(tuner, 2, 4096, 1, 2, 1, &chunk), ncclSuccess);
    ck_assert(chunk == 1000);
    br_plugin_tuner_close(tuner);
}
END_TEST

START_TEST(test_tuner_v6_constants_and_chunk)
{
    br_tuner_request_t req = tuner_request("testv6");
    double constants[144]; /* ncclTunerConstants_v6_t: 1152 bytes of doubles */
    br_tuner_t *tuner;
    testtuner_stats_t *st;
    float table[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
    size_t chunk = 1000;
    int nch = 0;

    memset(constants, 0, sizeof(constants));
    req.constants = constants;
    tuner = tuner_open_ok(&req);
    st = stats_sym(tuner->path, "testtuner_stats");
    ck_assert_int_eq(tuner->version, 6);
    ck_assert(constants[0] == 42.0);
    ck_assert(st->comm_id == 0x77);
    ck_assert_int_eq(st->nvl[0], 2);
    ck_assert_int_eq(st->nvl[2], 4);
    fill_table(table);
    ck_assert_int_eq(br_plugin_tuner_get_coll_info(tuner, 0, 100, 1, &table[0][0], 1, &nch),
                     ncclSuccess);
    ck_assert(table[NCCL_ALGO_TREE][NCCL_PROTO_SIMPLE] == 0.0f);
    ck_assert_int_eq(st->last_reg_buff, 1);
    ck_assert_int_eq(nch, 2);
    ck_assert_int_eq(br_plugin_tuner_get_chunk_size(tuner, 0, 100, 0, 2, 2, &chunk), ncclSuccess);
    ck_assert(chunk == 2000);
    br_plugin_tuner_close(tuner);
}
END_TEST

START_TEST(test_tuner_found_in_net_library)
{
    br_net_request_t nreq;
    br_net_t *net = NULL;
    br_tuner_request_t req = tuner_request(NULL); /* NCCL_TUNER_PLUGIN unset */
    br_tuner_t *tuner;

    memset(&nreq, 0, sizeof(nreq));
    nreq.plugin = "testmixed";
    nreq.traffic_class = -1;
    ck_assert_int_eq(br_plugin_net_open(&nreq, &net), ncclSuccess);
    req.net = net;
    tuner = tuner_open_ok(&req);
    ck_assert_str_eq(tuner->path, net->path);
    ck_assert_int_eq(tuner->version, 3);
    /* The tuner holds its own reference: closing the net first is fine. */
    br_plugin_net_close(net);
    float table[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
    int nch = 0;
    fill_table(table);
    ck_assert_int_eq(br_plugin_tuner_hook(tuner, 4, 1, &table[0][0], &nch), ncclSuccess);
    ck_assert_int_eq(nch, 5);
    br_plugin_tuner_close(tuner);
}
END_TEST

START_TEST(test_tuner_none_and_absent)
{
    br_tuner_request_t req = tuner_request("none");
    br_tuner_t *tuner = (br_tuner_t *)&req;

    ck_assert_int_eq(br_plugin_tuner_open(&req, &tuner), ncclSuccess);
    ck_assert_ptr_null(tuner);
    /* Unset, no libnccl-tuner.so and no net plugin: no tuner, no error. */
    req = tuner_request(NULL);
    tuner = (br_tuner_t *)&req;
    ck_assert_int_eq(br_plugin_tuner_open(&req, &tuner), ncclSuccess);
    ck_assert_ptr_null(tuner);
}
END_TEST

START_TEST(test_tuner_named_missing_is_an_error)
{
    br_tuner_request_t req = tuner_request("nosuchtuner");
    br_tuner_t *tuner = NULL;

    ck_assert_int_eq(br_plugin_tuner_open(&req, &tuner), ncclInvalidUsage);
    ck_assert_ptr_null(tuner);
    assert_error_has("NCCL_TUNER_PLUGIN=nosuchtuner");
    assert_error_has("libnccl-tuner-nosuchtuner.so (not found");
    assert_error_has("no fallback");
    /* A library without tuner symbols, named: an error too. */
    req = tuner_request("libnccl-net-testv12.so");
    ck_assert_int_eq(br_plugin_tuner_open(&req, &tuner), ncclInvalidUsage);
    assert_error_has("no ncclTunerPlugin_v7 .. ncclTunerPlugin_v2 symbol");
}
END_TEST

START_TEST(test_tuner_init_failure_fails)
{
    br_tuner_request_t req = tuner_request("testinitfail");
    br_tuner_t *tuner = NULL;

    ck_assert_int_eq(br_plugin_tuner_open(&req, &tuner), ncclInternalError);
    ck_assert_ptr_null(tuner);
    assert_error_has("libnccl-tuner-testinitfail.so");
    /* The plugin's own reason, not only the core's "init failed". */
    assert_error_has("init failed: ncclInternalError: testtuner: rule 3 is bad on purpose");
}
END_TEST

/* ---- Profiler ---- */

static br_profiler_request_t prof_request(const char *plugin)
{
    br_profiler_request_t req;
    memset(&req, 0, sizeof(req));
    req.plugin = plugin;
    req.comm_hash = 0x1234;
    req.comm_name = "world";
    req.nnodes = 1;
    req.nranks = 4;
    req.rank = 2;
    return req;
}

START_TEST(test_profiler_v4_events_pass_through)
{
    br_profiler_request_t req = prof_request("testv4");
    br_profiler_t *prof = NULL;
    testprof_stats_t *st;
    ncclProfilerEventDescr_v6_t d;
    ncclProfilerEventStateArgs_v6_t args;
    void *group = NULL, *coll = NULL, *api = NULL, *step = NULL;

    ck_assert_int_eq(br_plugin_profiler_open(&req, &prof), ncclSuccess);
    ck_assert_ptr_nonnull(prof);
    ck_assert_int_eq(prof->version, 4);
    st = stats_sym(prof->path, "testprof_stats");
    ck_assert_int_eq(st->init_calls, 1);
    ck_assert(st->comm_hash == 0x1234);
    ck_assert_str_eq(st->comm_name, "world");
    ck_assert_int_eq(st->nranks, 4);
    ck_assert_int_eq(st->rank, 2);
    ck_assert_int_eq(br_plugin_profiler_mask(), ncclProfileGroup | ncclProfileColl |
                                                    ncclProfileP2p | ncclProfileProxyStep |
                                                    ncclProfileNetPlugin);

    /* A v5+ API event: v4 has none, the adapter drops it. */
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileCollApi;
    d.collApi.func = "AllReduce";
    ck_assert_int_eq(br_plugin_profiler_start_event(prof, &d, &api), ncclSuccess);
    ck_assert_ptr_null(api);
    ck_assert_int_eq(st->nevents, 0);

    memset(&d, 0, sizeof(d));
    d.type = ncclProfileGroup;
    d.rank = 2;
    ck_assert_int_eq(br_plugin_profiler_start_event(prof, &d, &group), ncclSuccess);
    ck_assert_ptr_nonnull(group);

    /* Coll: parentObj (the CollApi) is replaced by the legacy Group, as NCCL does for v4. */
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileColl;
    d.parentObj = (void *)0xdead;
    d.coll.parentGroup = group;
    d.coll.func = "AllReduce";
    d.coll.count = 10;
    ck_assert_int_eq(br_plugin_profiler_start_event(prof, &d, &coll), ncclSuccess);
    ck_assert_ptr_nonnull(coll);
    ck_assert_int_eq(st->nevents, 2);
    ck_assert_int_eq(st->events[1].type, ncclProfileColl);
    ck_assert_ptr_eq(st->events[1].parent, group);
    ck_assert_str_eq(st->events[1].func, "AllReduce");

    memset(&d, 0, sizeof(d));
    d.type = ncclProfileProxyStep;
    d.parentObj = coll;
    d.proxyStep.step = 5;
    ck_assert_int_eq(br_plugin_profiler_start_event(prof, &d, &step), ncclSuccess);
    ck_assert_int_eq(st->events[2].step, 5);
    ck_assert_ptr_eq(st->events[2].parent, coll);
    memset(&args, 0, sizeof(args));
    args.proxyStep.transSize = 4096;
    ck_assert_int_eq(
        br_plugin_profiler_record_event_state(prof, step, ncclProfilerProxyStepSendWait, &args),
        ncclSuccess);
    ck_assert_int_eq(st->last_state, ncclProfilerProxyStepSendWait);
    ck_assert(st->last_trans_size == 4096);
    /* A v5-only state is dropped; NULL handles are ignored. */
    ck_assert_int_eq(
        br_plugin_profiler_record_event_state(prof, group, ncclProfilerGroupEndApiStart, NULL),
        ncclSuccess);
    ck_assert_int_eq(st->nstates, 1);
    ck_assert_int_eq(br_plugin_profiler_stop_event(prof, NULL), ncclSuccess);
    ck_assert_int_eq(br_plugin_profiler_stop_event(prof, step), ncclSuccess);
    ck_assert_int_eq(br_plugin_profiler_stop_event(prof, coll), ncclSuccess);
    ck_assert_int_eq(br_plugin_profiler_stop_event(prof, group), ncclSuccess);
    ck_assert_int_eq(st->nstops, 3);
    br_plugin_profiler_close(prof);
}
END_TEST

/* A net plugin's own events (profiler callback, phandle from the proxy step) reach the
 * profiler as NetPlugin events under the step. */
START_TEST(test_profiler_net_plugin_events)
{
    br_profiler_request_t preq = prof_request("testv4");
    br_net_request_t nreq;
    br_profiler_t *prof = NULL;
    br_net_t *net = NULL;
    ncclProfilerEventDescr_v6_t d;
    br_net_phandle_t ph;
    testprof_stats_t *st;
    char handle[NCCL_NET_HANDLE_MAXSIZE], buf[64] = "data";
    void *lc = NULL, *sc = NULL, *rc = NULL, *mh = NULL, *req = NULL, *step = NULL;
    int done = 0;

    ck_assert_int_eq(br_plugin_profiler_open(&preq, &prof), ncclSuccess);
    ck_assert_ptr_nonnull(prof);
    st = stats_sym(prof->path, "testprof_stats");
    memset(&nreq, 0, sizeof(nreq));
    nreq.plugin = "testprofevents";
    nreq.traffic_class = -1;
    ck_assert_int_eq(br_plugin_net_open(&nreq, &net), ncclSuccess);

    memset(&d, 0, sizeof(d));
    d.type = ncclProfileProxyStep;
    d.proxyStep.step = 1;
    ck_assert_int_eq(br_plugin_profiler_start_event(prof, &d, &step), ncclSuccess);
    ck_assert_ptr_nonnull(step);

    ck_assert_int_eq(net->ops->listen(net, 0, handle, &lc), ncclSuccess);
    ck_assert_int_eq(net->ops->connect(net, 0, handle, &sc), ncclSuccess);
    ck_assert_int_eq(net->ops->accept(net, lc, &rc), ncclSuccess);
    ck_assert_int_eq(net->ops->reg_mr(net, sc, buf, sizeof(buf), NCCL_PTR_HOST, &mh), ncclSuccess);
    ph.prof = prof;
    ph.step = step;
    ph.rank = 2;
    ck_assert_int_eq(net->ops->isend(net, sc, buf, sizeof(buf), 0, mh, &ph, &req), ncclSuccess);
    ck_assert_int_eq(net->ops->test(net, req, &done, NULL), ncclSuccess);
    ck_assert(done);

    ck_assert_int_eq(st->nevents, 2);
    ck_assert_int_eq(st->events[1].type, ncclProfileNetPlugin);
    ck_assert_ptr_eq(st->events[1].parent, step);
    ck_assert(st->events[1].net_id == (int64_t)(NCCL_PROFILER_NET_TYPE_SOCK | 1));
    ck_assert_ptr_nonnull(st->events[1].net_data);
    ck_assert_int_eq(st->last_state, ncclProfilerNetPluginUpdate);
    ck_assert_ptr_nonnull(st->last_net_data);
    ck_assert_int_eq(st->nstops, 1); /* the NetPlugin event */

    /* Without a phandle the plugin's events are dropped. */
    ck_assert_int_eq(net->ops->isend(net, sc, buf, sizeof(buf), 0, mh, NULL, &req), ncclSuccess);
    ck_assert_int_eq(net->ops->test(net, req, &done, NULL), ncclSuccess);
    ck_assert_int_eq(st->nevents, 2);

    ck_assert_int_eq(br_plugin_profiler_stop_event(prof, step), ncclSuccess);
    ck_assert_int_eq(net->ops->dereg_mr(net, sc, mh), ncclSuccess);
    ck_assert_int_eq(net->ops->close_send(net, sc), ncclSuccess);
    ck_assert_int_eq(net->ops->close_recv(net, rc), ncclSuccess);
    ck_assert_int_eq(net->ops->close_listen(net, lc), ncclSuccess);
    br_plugin_net_close(net);
    br_plugin_profiler_close(prof);
}
END_TEST

START_TEST(test_profiler_none_absent_and_named_missing)
{
    br_profiler_request_t req = prof_request("none");
    br_profiler_t *prof = (br_profiler_t *)&req;

    ck_assert_int_eq(br_plugin_profiler_open(&req, &prof), ncclSuccess);
    ck_assert_ptr_null(prof);
    req = prof_request(NULL);
    ck_assert_int_eq(br_plugin_profiler_open(&req, &prof), ncclSuccess);
    ck_assert_ptr_null(prof);
    req = prof_request("nosuchprof");
    ck_assert_int_eq(br_plugin_profiler_open(&req, &prof), ncclInvalidUsage);
    assert_error_has("NCCL_PROFILER_PLUGIN=nosuchprof");
    assert_error_has("libnccl-profiler-nosuchprof.so");
}
END_TEST

/* ---- Env ---- */

static const struct {
    const char *plugin;
    const char *value;
} env_cases[] = {
    {"testv1", "from-plugin-v1"},
    {"testv2", "from-plugin-v2"},
};

START_TEST(test_env_plugin_answers)
{
    const char *path;
    int *init_calls, *fini_calls, *major;
    void *dl;

    ck_assert_int_eq(br_plugin_env_open(env_cases[_i].plugin), ncclSuccess);
    ck_assert(br_plugin_env_loaded());
    ck_assert_str_eq(br_plugin_env_get("BRAID_TEST_ENV_VAR"), env_cases[_i].value);
    ck_assert_ptr_null(br_plugin_env_get("BRAID_TEST_OTHER"));
    /* Once per process: a second open changes nothing. */
    ck_assert_int_eq(br_plugin_env_open("none"), ncclSuccess);
    ck_assert(br_plugin_env_loaded());
    path = _i == 0 ? "libnccl-env-testv1.so" : "libnccl-env-testv2.so";
    dl = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    ck_assert_ptr_nonnull(dl);
    init_calls = dlsym(dl, "testenv_init_calls");
    fini_calls = dlsym(dl, "testenv_fini_calls");
    major = dlsym(dl, "testenv_major");
    ck_assert_int_eq(*init_calls, 1);
    ck_assert_int_eq(*major, 2);
    br_plugin_env_close();
    ck_assert_int_eq(*fini_calls, 1); /* our own dlopen keeps it mapped */
    dlclose(dl);
    ck_assert(!br_plugin_env_loaded());
    ck_assert_ptr_null(br_plugin_env_get("BRAID_TEST_ENV_VAR"));
}
END_TEST

START_TEST(test_env_none_absent_and_named_missing)
{
    ck_assert_int_eq(br_plugin_env_open(NULL), ncclSuccess); /* no libnccl-env.so */
    ck_assert(!br_plugin_env_loaded());
    br_plugin_env_close();
    ck_assert_int_eq(br_plugin_env_open("none"), ncclSuccess);
    ck_assert(!br_plugin_env_loaded());
    br_plugin_env_close();
    ck_assert_int_eq(br_plugin_env_open("nosuchenv"), ncclInvalidUsage);
    assert_error_has("NCCL_ENV_PLUGIN=nosuchenv");
    assert_error_has("libnccl-env-nosuchenv.so");
    ck_assert(!br_plugin_env_loaded());
}
END_TEST

void br_plugin_tp_tcases(Suite *s)
{
    TCase *tc = tcase_create("tuner");
    tcase_add_test(tc, test_tuner_v2_choice_reaches_table);
    tcase_add_test(tc, test_tuner_v3_edits_table_through_hook);
    tcase_add_test(tc, test_tuner_v6_constants_and_chunk);
    tcase_add_test(tc, test_tuner_found_in_net_library);
    tcase_add_test(tc, test_tuner_none_and_absent);
    tcase_add_test(tc, test_tuner_named_missing_is_an_error);
    tcase_add_test(tc, test_tuner_init_failure_fails);
    suite_add_tcase(s, tc);

    tc = tcase_create("profiler");
    tcase_add_test(tc, test_profiler_v4_events_pass_through);
    tcase_add_test(tc, test_profiler_net_plugin_events);
    tcase_add_test(tc, test_profiler_none_absent_and_named_missing);
    suite_add_tcase(s, tc);

    tc = tcase_create("env");
    tcase_add_loop_test(tc, test_env_plugin_answers, 0,
                        (int)(sizeof(env_cases) / sizeof(env_cases[0])));
    tcase_add_test(tc, test_env_none_absent_and_named_missing);
    suite_add_tcase(s, tc);
}
