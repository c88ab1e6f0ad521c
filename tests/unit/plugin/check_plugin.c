/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "plugin": the net loader through br_plugin_net_open and the br_net ops,
 * against tiny test plugins (testnet.c built per ABI version and per failure mode, in
 * the directory given as argv[1]) and Braid's own socket plugin (BRAID_PLUGIN_PATH);
 * the tuner and profiler loaders and their adapters (check_plugin_tp.c).
 * Every test runs in its own process (fork mode), so each starts with nothing loaded.
 */
#include <check.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_plugin.h"
#include "log.h"
#include "plugin.h"
#include "testnet.h"

const char *mods_dir = ".";

/* ---- Helpers ---- */

static br_net_request_t request(const char *plugin, const char *net_name)
{
    br_net_request_t req;
    memset(&req, 0, sizeof(req));
    req.plugin = plugin;
    req.net_name = net_name;
    req.comm_hash = 0xabcdef12345ULL;
    req.traffic_class = 7;
    return req;
}

static br_net_t *open_ok(const char *plugin, const char *net_name)
{
    br_net_request_t req = request(plugin, net_name);
    br_net_t *net = NULL;
    ncclResult_t res = br_plugin_net_open(&req, &net);
    ck_assert_msg(res == ncclSuccess, "opening %s failed (%d): %s", plugin ? plugin : "(default)",
                  (int)res, br_log_last_error());
    ck_assert_ptr_nonnull(net);
    return net;
}

/* The stats block of a loaded test plugin. */
static testnet_stats_t *stats_of(const br_net_t *net)
{
    void *dl = dlopen(net->path, RTLD_NOW | RTLD_NOLOAD);
    testnet_stats_t *stats;
    ck_assert_msg(dl != NULL, "%s is not loaded", net->path);
    stats = dlsym(dl, "testnet_stats");
    dlclose(dl); /* the loader still holds it */
    ck_assert_ptr_nonnull(stats);
    return stats;
}

/* Fails the test with the last error if res is not success. */
#define CK_OK(expr)                                                                                \
    do {                                                                                           \
        ncclResult_t r_ = (expr);                                                                  \
        ck_assert_msg(r_ == ncclSuccess, "%s -> %d: %s", #expr, (int)r_, br_log_last_error());     \
    } while (0)

typedef struct {
    void *lc, *sc, *rc, *smh, *rmh;
} conn_t;

static void conn_open(br_net_t *net, conn_t *c, void *sbuf, void *rbuf, size_t bytes)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    memset(c, 0, sizeof(*c));
    memset(handle, 0, sizeof(handle));
    CK_OK(net->ops->listen(net, net->dev, handle, &c->lc));
    for (int i = 0; i < 1000000 && (c->sc == NULL || c->rc == NULL); i++) {
        if (c->sc == NULL) {
            CK_OK(net->ops->connect(net, net->dev, handle, &c->sc));
        }
        if (c->rc == NULL) {
            CK_OK(net->ops->accept(net, c->lc, &c->rc));
        }
    }
    ck_assert_ptr_nonnull(c->sc);
    ck_assert_ptr_nonnull(c->rc);
    CK_OK(net->ops->reg_mr(net, c->sc, sbuf, bytes, NCCL_PTR_HOST, &c->smh));
    CK_OK(net->ops->reg_mr(net, c->rc, rbuf, bytes, NCCL_PTR_HOST, &c->rmh));
}

static void conn_close(br_net_t *net, conn_t *c)
{
    CK_OK(net->ops->dereg_mr(net, c->sc, c->smh));
    CK_OK(net->ops->dereg_mr(net, c->rc, c->rmh));
    CK_OK(net->ops->close_send(net, c->sc));
    CK_OK(net->ops->close_recv(net, c->rc));
    CK_OK(net->ops->close_listen(net, c->lc));
}

/* One message of `bytes` from sbuf to rbuf; returns the first error of a data call. The
 * receive is posted with the optional-completion hint, as NCCL does for LL protocols. */
static ncclResult_t xfer(br_net_t *net, conn_t *c, void *sbuf, void *rbuf, size_t bytes,
                         int *received)
{
    void *sreq = NULL, *rreq = (void *)(uintptr_t)NCCL_NET_OPTIONAL_RECV_COMPLETION;
    size_t cap = bytes;
    int tag = 3, sdone = 0, rdone = 0, size = -1;
    ncclResult_t res;

    for (int i = 0; i < 1000000 && sreq == NULL; i++) {
        res = net->ops->isend(net, c->sc, sbuf, bytes, tag, c->smh, (void *)0x5eed, &sreq);
        if (res != ncclSuccess) {
            return res;
        }
    }
    res = net->ops->irecv(net, c->rc, 1, &rbuf, &cap, &tag, &c->rmh, NULL, &rreq);
    if (res != ncclSuccess) {
        return res;
    }
    for (int i = 0; i < 10000000 && (!sdone || !rdone); i++) {
        if (!sdone && (res = net->ops->test(net, sreq, &sdone, NULL)) != ncclSuccess) {
            return res;
        }
        if (!rdone && (res = net->ops->test(net, rreq, &rdone, &size)) != ncclSuccess) {
            return res;
        }
    }
    ck_assert(sdone && rdone);
    if (net->ops->irecv_consumed != NULL) {
        CK_OK(net->ops->irecv_consumed(net, c->rc, 1, rreq));
    }
    *received = size;
    return ncclSuccess;
}

/* A full round: connect, move a pattern, check it, close. */
static void roundtrip(br_net_t *net, size_t bytes)
{
    char *sbuf = malloc(bytes), *rbuf = calloc(1, bytes);
    conn_t c;
    int got = -1;

    ck_assert(sbuf != NULL && rbuf != NULL);
    for (size_t i = 0; i < bytes; i++) {
        sbuf[i] = (char)(i * 7 + 1);
    }
    conn_open(net, &c, sbuf, rbuf, bytes);
    CK_OK(xfer(net, &c, sbuf, rbuf, bytes, &got));
    ck_assert_int_eq(got, (int)bytes);
    ck_assert_int_eq(memcmp(sbuf, rbuf, bytes), 0);
    conn_close(net, &c);
    free(sbuf);
    free(rbuf);
}

static void assert_error_has(const char *what)
{
    const char *err = br_log_last_error();
    ck_assert_msg(strstr(err, what) != NULL, "expected \"%s\" in the error: %s", what, err);
}

/* ---- Loading ---- */

START_TEST(test_net_load_by_name)
{
    br_net_t *net = open_ok("testv8", NULL);
    ck_assert_int_eq(net->version, 8);
    ck_assert_str_eq(net->name, "TestNet");
    ck_assert_ptr_nonnull(strstr(net->path, "libnccl-net-testv8.so"));
    ck_assert_int_eq(net->ndev, 1);
    ck_assert_int_eq(net->dev, 0);
    br_plugin_net_close(net);
}
END_TEST

START_TEST(test_net_load_by_path)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/libnccl-net-testv12.so", mods_dir);
    br_net_t *net = open_ok(path, NULL);
    ck_assert_int_eq(net->version, 12);
    ck_assert_ptr_nonnull(strstr(net->path, "libnccl-net-testv12.so"));
    br_plugin_net_close(net);
}
END_TEST

START_TEST(test_net_load_by_file_name)
{
    br_net_t *net = open_ok("libnccl-net-testv11.so", NULL);
    ck_assert_int_eq(net->version, 11);
    br_plugin_net_close(net);
}
END_TEST

START_TEST(test_net_newest_symbol_wins)
{
    br_net_t *net = open_ok("testmulti", NULL); /* exports v8, v10 and v12 */
    ck_assert_int_eq(net->version, 12);
    ck_assert_int_eq(net->props.speed, 12000);
    br_plugin_net_close(net);
    net = open_ok("testmulti9", NULL); /* exports v8 and v9 */
    ck_assert_int_eq(net->version, 9);
    br_plugin_net_close(net);
}
END_TEST

START_TEST(test_net_list_takes_first_usable)
{
    br_net_t *net = open_ok("doesnotexist, testv9", NULL);
    ck_assert_int_eq(net->version, 9);
    br_plugin_net_close(net);
}
END_TEST

START_TEST(test_net_network_name_case_insensitive)
{
    br_net_t *net = open_ok("testv12", "testnet");
    ck_assert_str_eq(net->name, "TestNet");
    br_plugin_net_close(net);
}
END_TEST

/* ---- Adapters ---- */

START_TEST(test_net_v12_passes_everything)
{
    br_net_t *net = open_ok("testv12", NULL);
    testnet_stats_t *st = stats_of(net);
    ck_assert_int_eq(st->init_calls, 1);
    ck_assert_int_eq(st->last_traffic_class, 7);
    ck_assert(st->last_comm_id == 0xabcdef12345ULL);
    ck_assert_int_eq(net->props.railId, 3);
    ck_assert_int_eq(net->props.planeId, 4);
    ck_assert(net->props.maxP2pBytes == ((size_t)2 << 30));
    ck_assert_ptr_nonnull(net->ops->irecv_consumed);
    roundtrip(net, 1000);
    ck_assert_ptr_eq(st->last_phandle, (void *)0x5eed);
    /* v9+ plugins see the optional-completion hint. */
    ck_assert_ptr_eq(st->last_irecv_hint, (void *)(uintptr_t)NCCL_NET_OPTIONAL_RECV_COMPLETION);
    ck_assert_int_eq(st->consumed_calls, 1);
    br_plugin_net_close(net);
}
END_TEST

START_TEST(test_net_v11_props_converted)
{
    br_net_t *net = open_ok("testv11", NULL);
    ck_assert_int_eq(net->props.speed, 11000);
    ck_assert_int_eq(net->props.vProps.ndevs, 1);
    ck_assert_int_eq(net->props.vProps.devs[0], 0);
    ck_assert(net->props.maxP2pBytes == ((size_t)2 << 30));
    ck_assert_int_eq(net->props.maxMultiRequestSize, 1);
    ck_assert_int_eq(net->props.railId, -1);
    ck_assert_int_eq(net->props.planeId, -1);
    ck_assert_int_eq(stats_of(net)->last_traffic_class, 7);
    roundtrip(net, 333);
    br_plugin_net_close(net);
}
END_TEST

START_TEST(test_net_v10_init_once_and_traffic_class)
{
    br_net_t *a = open_ok("testv10", NULL);
    br_net_t *b = open_ok("testv10", NULL);
    testnet_stats_t *st = stats_of(a);
    ck_assert_int_eq(a->version, 10);
    /* One process-wide init, however many comms. */
    ck_assert_int_eq(st->init_calls, 1);
    ck_assert_int_eq(a->props.maxMultiRequestSize, 1);
    ck_assert_int_eq(a->props.railId, -1);
    roundtrip(a, 64);
    ck_assert_int_eq(st->last_traffic_class, 7); /* via connect's config */
    ck_assert_ptr_eq(st->last_phandle, (void *)0x5eed);
    br_plugin_net_close(a);
    roundtrip(b, 64);
    br_plugin_net_close(b);
}
END_TEST

START_TEST(test_net_v11_finalize_per_comm)
{
    br_net_t *a = open_ok("testv11", NULL);
    br_net_t *b = open_ok("testv11", NULL);
    testnet_stats_t *st = stats_of(a);
    ck_assert_int_eq(st->init_calls, 2);
    br_plugin_net_close(a);
    ck_assert_int_eq(st->finalize_calls, 1);
    br_plugin_net_close(b);
}
END_TEST

START_TEST(test_net_v9_drops_profiler_handles)
{
    br_net_t *net = open_ok("testv9", NULL);
    testnet_stats_t *st = stats_of(net);
    ck_assert_int_eq(net->props.speed, 9000);
    ck_assert(net->props.maxP2pBytes == ((size_t)2 << 30));
    roundtrip(net, 4096);
    ck_assert_ptr_null(st->last_phandle);
    ck_assert_ptr_eq(st->last_irecv_hint, (void *)(uintptr_t)NCCL_NET_OPTIONAL_RECV_COMPLETION);
    br_plugin_net_close(net);
}
END_TEST

START_TEST(test_net_v8_defaults_and_hint)
{
    br_net_t *net = open_ok("testv8", NULL);
    testnet_stats_t *st = stats_of(net);
    ck_assert_int_eq(net->props.speed, 8000);
    ck_assert(net->props.maxP2pBytes == ((size_t)1 << 30));
    ck_assert(net->props.maxCollBytes == ((size_t)1 << 29));
    ck_assert_int_eq(net->props.vProps.ndevs, 1);
    ck_assert_int_eq(net->props.vProps.devs[0], 0);
    ck_assert_int_eq(net->props.forceFlush, 0);
    ck_assert_int_eq(net->props.railId, -1);
    roundtrip(net, 12345);
    ck_assert(st->last_isend_size == 12345);
    /* v8 predates the hint: the adapter clears it. */
    ck_assert_ptr_null(st->last_irecv_hint);
    br_plugin_net_close(net);
}
END_TEST

START_TEST(test_net_v8_rejects_over_1gib)
{
    br_net_t *net = open_ok("testv8", NULL);
    testnet_stats_t *st = stats_of(net);
    char sbuf[16], rbuf[16];
    size_t big = ((size_t)1 << 30) + 1;
    conn_t c;
    void *req = NULL;
    int tag = 0, calls;

    conn_open(net, &c, sbuf, rbuf, sizeof(sbuf));
    calls = st->isend_calls;
    /* The buffer is never touched: the adapter refuses before calling the plugin. */
    ck_assert_int_eq(net->ops->isend(net, c.sc, sbuf, big, 0, c.smh, NULL, &req),
                     ncclInternalError);
    ck_assert_int_eq(st->isend_calls, calls);
    assert_error_has("1 GiB");
    ck_assert_int_eq(net->ops->isend(net, c.sc, sbuf, (size_t)4 << 30, 0, c.smh, NULL, &req),
                     ncclInternalError);
    void *data = rbuf;
    ck_assert_int_eq(net->ops->irecv(net, c.rc, 1, &data, &big, &tag, &c.rmh, NULL, &req),
                     ncclInternalError);
    /* Sizes that fit still work after a refusal. */
    int got = -1;
    memset(sbuf, 0x42, sizeof(sbuf));
    CK_OK(xfer(net, &c, sbuf, rbuf, sizeof(sbuf), &got));
    ck_assert_int_eq(got, (int)sizeof(sbuf));
    ck_assert(st->last_isend_size == (long long)sizeof(sbuf));
    conn_close(net, &c);
    br_plugin_net_close(net);
}
END_TEST

START_TEST(test_net_optional_members_null)
{
    br_net_t *net = open_ok("testminimal", NULL);
    ck_assert_ptr_null(net->ops->irecv_consumed);
    roundtrip(net, 100);
    br_plugin_net_close(net);
    /* Another load of a complete plugin still has it: ops are per load. */
    net = open_ok("testv12", NULL);
    ck_assert_ptr_nonnull(net->ops->irecv_consumed);
    br_plugin_net_close(net);
}
END_TEST

START_TEST(test_net_fails_mid_transfer)
{
    br_net_t *net = open_ok("testmidfail", NULL); /* test() fails after 3 receives */
    char sbuf[32] = "payload", rbuf[32];
    conn_t c;
    int got;

    conn_open(net, &c, sbuf, rbuf, sizeof(sbuf));
    for (int i = 0; i < 3; i++) {
        CK_OK(xfer(net, &c, sbuf, rbuf, sizeof(sbuf), &got));
    }
    ck_assert_int_eq(xfer(net, &c, sbuf, rbuf, sizeof(sbuf), &got), ncclSystemError);
    conn_close(net, &c);
    br_plugin_net_close(net);
}
END_TEST

/* ---- Failures when the user named the plugin: no fallback ---- */

static const struct {
    const char *plugin;
    const char *reason;
} named_failures[] = {
    {"testinitfail", "init failed: ncclSystemError: testnet: no fabric on purpose"},
    {"testzero", "reports 0 devices"},
    {"testnosym", "no ncclNetPlugin_v12"},
    {"testv7only", "exports only ncclNetPlugin_v7"},
    {"doesnotexist", "not found"},
};

START_TEST(test_net_named_failure_is_an_error)
{
    const char *plugin = named_failures[_i].plugin;
    br_net_request_t req = request(plugin, NULL);
    br_net_t *net = NULL;
    char lib[128];

    ck_assert_int_eq(br_plugin_net_open(&req, &net), ncclInvalidUsage);
    ck_assert_ptr_null(net);
    snprintf(lib, sizeof(lib), "libnccl-net-%s.so", plugin);
    assert_error_has("NCCL_NET_PLUGIN=");
    assert_error_has(lib);
    assert_error_has(named_failures[_i].reason);
    assert_error_has("no fallback because the plugin was named");
    /* The socket plugin was not tried. */
    ck_assert_ptr_null(strstr(br_log_last_error(), "libnccl-net-socket.so"));
}
END_TEST

START_TEST(test_net_named_network_mismatch)
{
    br_net_request_t req = request("testv12", "IB");
    br_net_t *net = NULL;
    ck_assert_int_eq(br_plugin_net_open(&req, &net), ncclInvalidUsage);
    assert_error_has("libnccl-net-testv12.so");
    assert_error_has("\"TestNet\" is not the requested \"IB\"");
}
END_TEST

START_TEST(test_net_network_without_plugin_no_fallback)
{
    br_net_request_t req = request(NULL, "NoSuchNet");
    br_net_t *net = NULL;
    ck_assert_int_eq(br_plugin_net_open(&req, &net), ncclInvalidUsage);
    assert_error_has("NoSuchNet");
    assert_error_has("libnccl-net.so");
    assert_error_has("libnccl-net-socket.so");
    assert_error_has("\"Socket\" is not the requested");
    assert_error_has("no fallback because the network was named");
}
END_TEST

/* ---- Braid's own socket plugin as the fallback ---- */

START_TEST(test_net_socket_default_fallback)
{
    br_net_t *net = open_ok(NULL, NULL); /* no libnccl-net.so on the path */
    char want[600];
    snprintf(want, sizeof(want), "%s/libnccl-net-socket.so", br_plugin_dir());
    ck_assert_str_eq(net->name, "Socket");
    ck_assert_str_eq(net->path, want);
    ck_assert_int_eq(net->version, 12);
    ck_assert_int_ge(net->ndev, 1);
    roundtrip(net, 100000);
    br_plugin_net_close(net);
}
END_TEST

START_TEST(test_net_socket_by_network_name)
{
    br_net_t *net = open_ok("none", "socket");
    ck_assert_str_eq(net->name, "Socket");
    roundtrip(net, 10);
    br_plugin_net_close(net);
}
END_TEST

START_TEST(test_net_socket_by_plugin_name)
{
    br_net_t *net = open_ok("socket", NULL); /* found in the plugin directory */
    ck_assert_str_eq(net->name, "Socket");
    br_plugin_net_close(net);
}
END_TEST

/* Run with LD_LIBRARY_PATH holding a libnccl-net.so whose init fails (tag
 * default_fallback): nothing was named, so the loader warns and uses the socket plugin. */
START_TEST(test_net_default_fails_then_falls_back)
{
    br_net_t *net = open_ok(NULL, NULL);
    ck_assert_str_eq(net->name, "Socket");
    assert_error_has("libnccl-net.so");
    assert_error_has("init failed");
    assert_error_has("trying the next candidate");
    br_plugin_net_close(net);
}
END_TEST

static Suite *plugin_suite(void)
{
    Suite *s = suite_create("plugin");
    TCase *tc;

    tc = tcase_create("net_load");
    tcase_add_test(tc, test_net_load_by_name);
    tcase_add_test(tc, test_net_load_by_path);
    tcase_add_test(tc, test_net_load_by_file_name);
    tcase_add_test(tc, test_net_newest_symbol_wins);
    tcase_add_test(tc, test_net_list_takes_first_usable);
    tcase_add_test(tc, test_net_network_name_case_insensitive);
    suite_add_tcase(s, tc);

    tc = tcase_create("net_adapters");
    tcase_add_test(tc, test_net_v12_passes_everything);
    tcase_add_test(tc, test_net_v11_props_converted);
    tcase_add_test(tc, test_net_v11_finalize_per_comm);
    tcase_add_test(tc, test_net_v10_init_once_and_traffic_class);
    tcase_add_test(tc, test_net_v9_drops_profiler_handles);
    tcase_add_test(tc, test_net_v8_defaults_and_hint);
    tcase_add_test(tc, test_net_v8_rejects_over_1gib);
    tcase_add_test(tc, test_net_optional_members_null);
    tcase_add_test(tc, test_net_fails_mid_transfer);
    suite_add_tcase(s, tc);

    tc = tcase_create("net_failures");
    tcase_add_loop_test(tc, test_net_named_failure_is_an_error, 0,
                        (int)(sizeof(named_failures) / sizeof(named_failures[0])));
    tcase_add_test(tc, test_net_named_network_mismatch);
    tcase_add_test(tc, test_net_network_without_plugin_no_fallback);
    suite_add_tcase(s, tc);

    tc = tcase_create("net_socket");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_net_socket_default_fallback);
    tcase_add_test(tc, test_net_socket_by_network_name);
    tcase_add_test(tc, test_net_socket_by_plugin_name);
    suite_add_tcase(s, tc);

    tc = tcase_create("net_default_fallback");
    tcase_set_tags(tc, "default_fallback");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_net_default_fails_then_falls_back);
    suite_add_tcase(s, tc);

    br_plugin_tp_tcases(s);
    return s;
}

int main(int argc, char **argv)
{
    SRunner *sr;
    int failed;

    if (argc > 1) {
        mods_dir = argv[1];
    }
    sr = srunner_create(plugin_suite());
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
