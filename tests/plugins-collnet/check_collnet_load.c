/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "collnet_load": the collnet loader and its adapters (core/plugin), white
 * box, against the software collnet plugin of this directory built with each table
 * version, v12 to v8. A table loads next to its net table and reports what the plugin says
 * (version, name, devices, maxCollBytes, v8's defaults); a one-rank collnet communicator
 * reduces through the adapters (listen, connect, regMr, iallreduce, test) with the
 * reducer process; v8's int count is range-checked; a library without collnet, zero
 * devices and a failing init disable collnet quietly; a table that lies (negative
 * devices, a NULL member after init) is refused with a WARN.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "plugin.h"

static br_net_t *net_open(const char *path)
{
    br_net_request_t req;
    br_net_t *net = NULL;

    memset(&req, 0, sizeof(req));
    req.plugin = path;
    req.comm_hash = 0x1234;
    req.traffic_class = -1;
    ck_assert_msg(br_plugin_net_open(&req, &net) == ncclSuccess, "net %s: %s", path,
                  br_log_last_error());
    return net;
}

/* Open the collnet of `path` with BRAID_TEST_COLLNET=mode; NULL when disabled. */
static br_collnet_t *collnet_open(const char *path, const char *mode, br_net_t **net_p)
{
    br_collnet_t *cn = NULL;
    setenv("BRAID_TEST_COLLNET", mode, 1);
    *net_p = net_open(path);
    ck_assert_int_eq(br_plugin_collnet_open(*net_p, 0x1234, &cn), ncclSuccess);
    return cn;
}

/* One rank's allreduce of 1000 int32 through every data-path member of the adapter. */
static void one_rank_allreduce(br_collnet_t *cn)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *lc = NULL, *cc = NULL, *smh = NULL, *rmh = NULL, *req = NULL;
    void *handles[1] = {handle};
    int32_t in[1000], out[1000];
    int done = 0, size = 0, sup = -1;

    for (int i = 0; i < 1000; i++) {
        in[i] = i * 3 - 7;
        out[i] = 0;
    }
    ck_assert_int_eq(cn->ops->reduce_support(cn, ncclInt32, ncclMax, &sup), ncclSuccess);
    ck_assert_int_eq(sup, 1);
    ck_assert_int_eq(cn->ops->reduce_support(cn, ncclFloat8e4m3, ncclSum, &sup), ncclSuccess);
    ck_assert_int_eq(sup, 0);
    ck_assert_int_eq(cn->ops->listen(cn, cn->dev, handle, &lc), ncclSuccess);
    ck_assert_int_eq(cn->ops->connect(cn, handles, 1, 0, lc, &cc), ncclSuccess);
    ck_assert_int_eq(cn->ops->close_listen(cn, lc), ncclSuccess);
    ck_assert_int_eq(cn->ops->reg_mr(cn, cc, in, sizeof(in), NCCL_PTR_HOST, &smh), ncclSuccess);
    ck_assert_int_eq(cn->ops->reg_mr(cn, cc, out, sizeof(out), NCCL_PTR_HOST, &rmh), ncclSuccess);
    ck_assert_int_eq(cn->ops->iallreduce(cn, cc, in, out, 1000, ncclInt32, ncclSum, smh, rmh, &req),
                     ncclSuccess);
    ck_assert_ptr_nonnull(req);
    for (int i = 0; i < 20000000 && !done; i++) {
        ck_assert_int_eq(cn->ops->test(cn, req, &done, &size), ncclSuccess);
    }
    ck_assert_int_eq(done, 1);
    ck_assert_int_eq(size, (int)sizeof(in));
    for (int i = 0; i < 1000; i++) {
        ck_assert_int_eq(out[i], in[i]); /* one rank: the sum is the input */
    }
    ck_assert_int_eq(cn->ops->dereg_mr(cn, cc, smh), ncclSuccess);
    ck_assert_int_eq(cn->ops->dereg_mr(cn, cc, rmh), ncclSuccess);
    ck_assert_int_eq(cn->ops->close_coll(cn, cc), ncclSuccess);
}

/* Poll req to completion; its size. */
static int wait_req(br_collnet_t *cn, void *req)
{
    int done = 0, size = -1;
    ck_assert_ptr_nonnull(req);
    for (int i = 0; i < 20000000 && !done; i++) {
        ck_assert_int_eq(cn->ops->test(cn, req, &done, &size), ncclSuccess);
    }
    ck_assert_int_eq(done, 1);
    return size;
}

/* One rank's iallgather and ireducescatter through the adapter, each with two parts: the
 * window of elements [100, 600) of a 1000-int32 block. With one rank both deliver the
 * window itself (gathered into the parts in order; reduced over one rank). */
static void one_rank_gather_scatter(br_collnet_t *cn)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *lc = NULL, *cc = NULL, *smh = NULL, *rmh = NULL, *req = NULL;
    void *handles[1] = {handle};
    int32_t in[1000], out[1000];
    br_collnet_part_t parts[2];

    for (int i = 0; i < 1000; i++) {
        in[i] = i * 7 - 3000;
        out[i] = -1;
    }
    ck_assert_int_eq(cn->has_iallgather, 1);
    ck_assert_int_eq(cn->has_ireducescatter, 1);
    ck_assert_int_eq(cn->ops->listen(cn, cn->dev, handle, &lc), ncclSuccess);
    ck_assert_int_eq(cn->ops->connect(cn, handles, 1, 0, lc, &cc), ncclSuccess);
    ck_assert_int_eq(cn->ops->close_listen(cn, lc), ncclSuccess);
    ck_assert_int_eq(cn->ops->reg_mr(cn, cc, in, sizeof(in), NCCL_PTR_HOST, &smh), ncclSuccess);
    ck_assert_int_eq(cn->ops->reg_mr(cn, cc, out, sizeof(out), NCCL_PTR_HOST, &rmh), ncclSuccess);

    parts[0] = (br_collnet_part_t){.mhandle = rmh, .address = out, .size = 1200};
    parts[1] = (br_collnet_part_t){.mhandle = rmh, .address = out + 300, .size = 800};
    ck_assert_int_eq(
        cn->ops->iallgather(cn, cc, in + 100, 2, parts, sizeof(in), 400, 2000, smh, &req),
        ncclSuccess);
    ck_assert_int_eq(wait_req(cn, req), 2000);
    for (int i = 0; i < 1000; i++) {
        ck_assert_int_eq(out[i], i < 500 ? in[100 + i] : -1);
        out[i] = -1;
    }

    parts[0] = (br_collnet_part_t){.mhandle = smh, .address = in + 100, .size = 1200};
    parts[1] = (br_collnet_part_t){.mhandle = smh, .address = in + 400, .size = 800};
    req = NULL;
    ck_assert_int_eq(cn->ops->ireducescatter(cn, cc, 2, parts, out, sizeof(in), 400, 2000,
                                             ncclInt32, ncclSum, rmh, &req),
                     ncclSuccess);
    ck_assert_int_eq(wait_req(cn, req), 2000);
    for (int i = 0; i < 1000; i++) {
        ck_assert_int_eq(out[i], i < 500 ? in[100 + i] : -1);
    }
    ck_assert_int_eq(cn->ops->dereg_mr(cn, cc, smh), ncclSuccess);
    ck_assert_int_eq(cn->ops->dereg_mr(cn, cc, rmh), ncclSuccess);
    ck_assert_int_eq(cn->ops->close_coll(cn, cc), ncclSuccess);
}

START_TEST(test_v12_loads_and_reduces)
{
    br_net_t *net;
    br_collnet_t *cn = collnet_open(CN_PLUGIN_V12, "", &net);

    ck_assert_ptr_nonnull(cn);
    ck_assert_int_eq(cn->version, 12);
    ck_assert_str_eq(cn->name, "CollNetTest");
    ck_assert_int_eq(cn->ndev, 1);
    ck_assert_uint_eq(cn->props.maxCollBytes, (size_t)1 << 28); /* what the plugin says */
    one_rank_allreduce(cn);
    one_rank_gather_scatter(cn);
    br_plugin_collnet_close(cn);
    br_plugin_net_close(net);
}
END_TEST

/* v11, v10, v9: each through its own adapter (v11: per-comm init and context, v11
 * properties; v10/v9: process-wide init, no context), reducing end to end. */
static void middle_version(const char *path, int version, const char *name)
{
    br_net_t *net;
    br_collnet_t *cn = collnet_open(path, "", &net);

    ck_assert_ptr_nonnull(cn);
    ck_assert_int_eq(cn->version, version);
    ck_assert_str_eq(cn->name, name);
    ck_assert_uint_eq(cn->props.maxCollBytes, (size_t)1 << 28);
    ck_assert_int_eq(cn->props.railId, -1); /* v12's field, defaulted */
    one_rank_allreduce(cn);
    one_rank_gather_scatter(cn);
    br_plugin_collnet_close(cn);
    br_plugin_net_close(net);
}

START_TEST(test_v11_v10_v9)
{
    middle_version(CN_PLUGIN_V11, 11, "CollNetTestV11");
    middle_version(CN_PLUGIN_V10, 10, "CollNetTestV10");
    middle_version(CN_PLUGIN_V9, 9, "CollNetTestV9");
}
END_TEST

START_TEST(test_v8_loads_and_reduces)
{
    br_net_t *net;
    br_collnet_t *cn = collnet_open(CN_PLUGIN_V8, "", &net);
    void *req = NULL;

    ck_assert_ptr_nonnull(cn);
    ck_assert_int_eq(cn->version, 8);
    ck_assert_str_eq(cn->name, "CollNetTestV8");
    /* v8 properties lack these: NCCL's defaults. */
    ck_assert_uint_eq(cn->props.maxCollBytes, (size_t)1 << 29);
    ck_assert_int_eq(cn->props.railId, -1);
    one_rank_allreduce(cn);
    /* A count above INT_MAX cannot be narrowed: refused before the plugin sees it. */
    ck_assert_int_eq(cn->ops->iallreduce(cn, NULL, NULL, NULL, (size_t)1 << 31, ncclInt8, ncclSum,
                                         NULL, NULL, &req),
                     ncclInternalError);
    ck_assert_ptr_nonnull(strstr(br_log_last_error(), "exceeds the int count"));
    one_rank_gather_scatter(cn);
    /* A part of 4 GiB does not fit v8's 32-bit part size: refused, never truncated. */
    br_collnet_part_t big = {NULL, NULL, (size_t)1 << 32};
    ck_assert_int_eq(cn->ops->iallgather(cn, NULL, NULL, 1, &big, (size_t)1 << 32, 0,
                                         (size_t)1 << 32, NULL, &req),
                     ncclInternalError);
    ck_assert_ptr_nonnull(strstr(br_log_last_error(), "exceeds the 32-bit part size"));
    ck_assert_int_eq(cn->ops->ireducescatter(cn, NULL, 1, &big, NULL, (size_t)1 << 32, 0,
                                             (size_t)1 << 32, ncclInt8, ncclSum, NULL, &req),
                     ncclInternalError);
    br_plugin_collnet_close(cn);
    br_plugin_net_close(net);
}
END_TEST

/* Disabled without a WARN: absent, zero devices, init failing. */
static void disabled_quietly(const char *path, const char *mode)
{
    br_net_t *net;
    br_log_set_last_error("");
    ck_assert_ptr_null(collnet_open(path, mode, &net));
    ck_assert_str_eq(br_log_last_error(), "");
    br_plugin_net_close(net);
}

START_TEST(test_absent_nodev_initfail)
{
    disabled_quietly(CN_SOCKET, "");
    disabled_quietly(CN_PLUGIN_V12, "nodev");
    disabled_quietly(CN_PLUGIN_V12, "initfail");
    disabled_quietly(CN_PLUGIN_V8, "initfail");
}
END_TEST

/* Refused with a WARN naming the lie. */
static void refused(const char *path, const char *mode, const char *why)
{
    br_net_t *net;
    br_log_set_last_error("");
    ck_assert_ptr_null(collnet_open(path, mode, &net));
    ck_assert_msg(strstr(br_log_last_error(), why) != NULL, "%s %s: last error '%s' lacks '%s'",
                  path, mode, br_log_last_error(), why);
    br_plugin_net_close(net);
}

START_TEST(test_lies_refused)
{
    refused(CN_PLUGIN_V12, "negdev", "reports -1 devices");
    refused(CN_PLUGIN_V12, "noiallreduce", "ncclCollNetPlugin_v12.iallreduce is NULL");
    refused(CN_PLUGIN_V8, "noiallreduce", "ncclCollNetPlugin_v8.iallreduce is NULL");
}
END_TEST

/* After a refusal the library still works: the next comm loads collnet (the emulated
 * process-wide init of v8 was undone). */
START_TEST(test_v8_reload_after_refusal)
{
    br_net_t *net;
    ck_assert_ptr_null(collnet_open(CN_PLUGIN_V8, "noiallreduce", &net));
    br_plugin_net_close(net);
    br_collnet_t *cn = collnet_open(CN_PLUGIN_V8, "", &net);
    ck_assert_ptr_nonnull(cn);
    br_plugin_collnet_close(cn);
    br_plugin_net_close(net);
}
END_TEST

/* Without the optional members (the table loses them at init): loaded, recorded as absent,
 * and a call fails with ncclInternalError naming the member instead of jumping to NULL. */
START_TEST(test_optional_members_absent)
{
    br_net_t *net;
    br_collnet_t *cn = collnet_open(CN_PLUGIN_V12, "noiallgather", &net);
    void *req = NULL;
    br_collnet_part_t p = {NULL, NULL, 64};

    ck_assert_ptr_nonnull(cn);
    ck_assert_int_eq(cn->has_iallgather, 0);
    ck_assert_int_eq(cn->has_ireducescatter, 1);
    ck_assert_int_eq(cn->ops->iallgather(cn, NULL, NULL, 1, &p, 64, 0, 64, NULL, &req),
                     ncclInternalError);
    ck_assert_ptr_nonnull(strstr(br_log_last_error(), "iallgather called"));
    br_plugin_collnet_close(cn);
    br_plugin_net_close(net);
    cn = collnet_open(CN_PLUGIN_V9, "noireducescatter", &net);
    ck_assert_ptr_nonnull(cn);
    ck_assert_int_eq(cn->has_iallgather, 1);
    ck_assert_int_eq(cn->has_ireducescatter, 0);
    ck_assert_int_eq(
        cn->ops->ireducescatter(cn, NULL, 1, &p, NULL, 64, 0, 64, ncclInt8, ncclSum, NULL, &req),
        ncclInternalError);
    br_plugin_collnet_close(cn);
    br_plugin_net_close(net);
}
END_TEST

static Suite *collnet_load_suite(void)
{
    Suite *s = suite_create("collnet_load");
    TCase *tc = tcase_create("load");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_v12_loads_and_reduces);
    tcase_add_test(tc, test_v11_v10_v9);
    tcase_add_test(tc, test_v8_loads_and_reduces);
    tcase_add_test(tc, test_absent_nodev_initfail);
    tcase_add_test(tc, test_lies_refused);
    tcase_add_test(tc, test_v8_reload_after_refusal);
    tcase_add_test(tc, test_optional_members_absent);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(collnet_load_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
