/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_netofi, setup and connections in one process: the exported tables and hidden
 * symbols, properties in the v12, v11 and v10 layouts, connect/accept in both orders, one
 * listener with two connectors, two contexts (one finalized while its connections live),
 * and the v11 and v10 tables end to end. Every case runs with the nt_setup() fixture.
 */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "netofi_test_util.h"
#include "plugin_api/net/net.h"

START_TEST(test_exports)
{
    const ncclNet_v11_t *v11 = nt_sym("ncclNetPlugin_v11");
    const ncclNet_v10_t *v10 = nt_sym("ncclNetPlugin_v10");

    ck_assert_ptr_nonnull(v11);
    ck_assert_ptr_nonnull(v10);
    ck_assert_str_eq(nt_net->name, "OFI");
    ck_assert_str_eq(v11->name, "OFI");
    ck_assert_str_eq(v10->name, "OFI");
    /* Internal symbols stay hidden. */
    ck_assert_ptr_null(nt_sym("netofi_fabric_init"));
    ck_assert_ptr_null(nt_sym("br_plugin_logger"));
    ck_assert_ptr_null(nt_sym("br_lite_param_int"));
    /* Optional members this host-only plugin leaves out. */
    ck_assert_ptr_null(nt_net->regMrDmaBuf);
    ck_assert_ptr_null(nt_net->makeVDevice);
    ck_assert_ptr_nonnull(nt_net->iflush);
    ck_assert_ptr_nonnull(nt_net->finalize);
}
END_TEST

START_TEST(test_properties)
{
    const ncclNet_v11_t *v11 = nt_sym("ncclNetPlugin_v11");
    const ncclNet_v10_t *v10 = nt_sym("ncclNetPlugin_v10");
    ncclNetProperties_v12_t p;
    unsigned char buf[256];
    const ncclNetProperties_v11_t *p11 = (const void *)buf;
    const ncclNetProperties_v10_t *p10 = (const void *)buf;

    ck_assert_int_eq(nt_net->getProperties(0, &p), ncclSuccess);
    ck_assert_ptr_nonnull(p.name);
    ck_assert_int_eq(p.ptrSupport, NCCL_PTR_HOST);
    ck_assert_int_eq(p.maxRecvs, 1);
    ck_assert_int_gt(p.speed, 0);
    ck_assert_int_eq(p.vProps.ndevs, 1);
    ck_assert_int_eq(p.vProps.devs[0], 0);
    ck_assert(p.maxP2pBytes > 0 && p.maxP2pBytes <= NCCL_MAX_NET_SIZE_BYTES);
    ck_assert_int_eq(p.netDeviceType, NCCL_NET_DEVICE_HOST);
    ck_assert_int_eq(p.railId, -1);
    ck_assert_int_eq(p.planeId, -1);
    ck_assert_int_ge(p.maxComms, 1024);
    ck_assert_int_ne(nt_net->getProperties(99, &p), ncclSuccess);

    /* Older layouts: right fields, nothing written past their size. */
    memset(buf, 0xa5, sizeof(buf));
    ck_assert_int_eq(v11->getProperties(0, (ncclNetProperties_v11_t *)buf), ncclSuccess);
    ck_assert_uint_eq(p11->maxP2pBytes, p.maxP2pBytes);
    ck_assert_int_eq(p11->maxMultiRequestSize, 1);
    ck_assert_str_eq(p11->name, p.name);
    for (size_t i = sizeof(ncclNetProperties_v11_t); i < sizeof(buf); i++) {
        ck_assert_int_eq(buf[i], 0xa5);
    }
    ck_assert_int_eq(v10->init(nt_logger, NULL), ncclSuccess);
    memset(buf, 0xa5, sizeof(buf));
    ck_assert_int_eq(v10->getProperties(0, (ncclNetProperties_v10_t *)buf), ncclSuccess);
    ck_assert_uint_eq(p10->maxCollBytes, p.maxCollBytes);
    ck_assert_int_eq(p10->vProps.ndevs, 1);
    for (size_t i = sizeof(ncclNetProperties_v10_t); i < sizeof(buf); i++) {
        ck_assert_int_eq(buf[i], 0xa5);
    }
}
END_TEST

START_TEST(test_connect_orders)
{
    nt_pair_t a, b;

    nt_pair_open(nt_net, nt_ctx, nt_ctx, &a, 1); /* connect returns before accept is called */
    nt_pair_open(nt_net, nt_ctx, nt_ctx, &b, 0); /* accept polled first */
    nt_check_xfer(nt_net, &b, 100, 0);
    nt_check_xfer(nt_net, &a, 100, 0);
    nt_pair_close(nt_net, &a);
    nt_pair_close(nt_net, &b);
}
END_TEST

START_TEST(test_two_contexts)
{
    ncclNetCommConfig_v12_t cfg = {.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF};
    void *ctx2 = NULL;
    nt_pair_t a, b;

    ck_assert_int_eq(nt_net->init(&ctx2, 0x5678, &cfg, nt_logger, NULL), ncclSuccess);
    nt_pair_open(nt_net, nt_ctx, ctx2, &a, 1);
    nt_pair_open(nt_net, ctx2, nt_ctx, &b, 0);
    nt_check_xfer(nt_net, &a, 1 << 20, 0);
    nt_check_xfer(nt_net, &b, 4097, 0);
    /* Finalize before the connections close: they keep what they use alive. */
    ck_assert_int_eq(nt_net->finalize(ctx2), ncclSuccess);
    nt_check_xfer(nt_net, &a, 4097, 0);
    nt_pair_close(nt_net, &a);
    nt_pair_close(nt_net, &b);
}
END_TEST

/* One listener, two connectors: each accept gets one of them, and data never crosses. */
START_TEST(test_multi_accept)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE] = {0};
    void *lc = NULL, *sc[2] = {0}, *rc[2] = {0}, *sreq[2] = {0}, *rreq[2] = {0};
    void *smh[2], *rmh[2];
    uint8_t sbyte[2] = {0x11, 0x22}, rbyte[2] = {0, 0};
    int sdone[2] = {0}, rdone[2] = {0}, tag = 0, from[2];
    double end = nt_now() + NT_POLL_SECONDS;
    nt_pair_t p;

    ck_assert_int_eq(nt_net->listen(nt_ctx, 0, handle, &lc), ncclSuccess);
    while ((!sc[0] || !sc[1] || !rc[0] || !rc[1]) && nt_now() < end) {
        for (int i = 0; i < 2; i++) {
            if (!sc[i]) {
                ck_assert_int_eq(nt_net->connect(nt_ctx, 0, handle, &sc[i], NULL), ncclSuccess);
            }
            if (!rc[i] && (i == 0 || rc[0])) {
                ck_assert_int_eq(nt_net->accept(lc, &rc[i], NULL), ncclSuccess);
            }
        }
    }
    ck_assert(sc[0] && sc[1] && rc[0] && rc[1]);
    /* Which connector each accept got depends on arrival order: tell by content. */
    for (int i = 0; i < 2; i++) {
        void *rb = &rbyte[i];
        size_t cap = 1;
        ck_assert_int_eq(nt_net->regMr(sc[i], &sbyte[i], 1, NCCL_PTR_HOST, &smh[i]), ncclSuccess);
        ck_assert_int_eq(nt_net->regMr(rc[i], &rbyte[i], 1, NCCL_PTR_HOST, &rmh[i]), ncclSuccess);
        ck_assert_int_eq(nt_net->irecv(rc[i], 1, &rb, &cap, &tag, &rmh[i], NULL, &rreq[i]),
                         ncclSuccess);
    }
    while (!(sdone[0] && sdone[1] && rdone[0] && rdone[1]) && nt_now() < end) {
        for (int i = 0; i < 2; i++) {
            if (!sreq[i]) {
                ck_assert_int_eq(nt_net->isend(sc[i], &sbyte[i], 1, 0, smh[i], NULL, &sreq[i]),
                                 ncclSuccess);
            }
            if (sreq[i] && !sdone[i]) {
                ck_assert_int_eq(nt_net->test(sreq[i], &sdone[i], NULL), ncclSuccess);
            }
            if (!rdone[i]) {
                ck_assert_int_eq(nt_net->test(rreq[i], &rdone[i], NULL), ncclSuccess);
            }
        }
    }
    ck_assert(sdone[0] && sdone[1] && rdone[0] && rdone[1]);
    for (int i = 0; i < 2; i++) {
        ck_assert(rbyte[i] == 0x11 || rbyte[i] == 0x22);
        from[i] = rbyte[i] == 0x11 ? 0 : 1;
        ck_assert_int_eq(nt_net->deregMr(sc[i], smh[i]), ncclSuccess);
        ck_assert_int_eq(nt_net->deregMr(rc[i], rmh[i]), ncclSuccess);
    }
    ck_assert_int_ne(from[0], from[1]);
    for (int i = 0; i < 2; i++) {
        p = (nt_pair_t){.sc = sc[from[i]], .rc = rc[i]};
        nt_check_xfer(nt_net, &p, i ? 1 << 20 : 4097, 0);
    }
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(nt_net->closeSend(sc[i]), ncclSuccess);
        ck_assert_int_eq(nt_net->closeRecv(rc[i]), ncclSuccess);
    }
    ck_assert_int_eq(nt_net->closeListen(lc), ncclSuccess);
}
END_TEST

/* The older tables end to end: v11 (per-comm init) and v10 (process-wide init). */
START_TEST(test_v11_v10)
{
    const ncclNet_v11_t *v11 = nt_sym("ncclNetPlugin_v11");
    const ncclNet_v10_t *v10 = nt_sym("ncclNetPlugin_v10");
    ncclNetCommConfig_v11_t cfg = {.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF};
    ncclNetCommConfig_v10_t cfg10 = {.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF};
    char handle[NCCL_NET_HANDLE_MAXSIZE] = {0};
    void *ctx = NULL;
    double end = nt_now() + NT_POLL_SECONDS;
    nt_pair_t p = {0};

    /* v11 through the same helpers: the function members have the v12 shapes. */
    ck_assert_int_eq(v11->init(&ctx, 9, &cfg, nt_logger, NULL), ncclSuccess);
    nt_pair_open((const ncclNet_v12_t *)v11, ctx, ctx, &p, 0);
    nt_check_xfer((const ncclNet_v12_t *)v11, &p, 4097, 0);
    nt_pair_close((const ncclNet_v12_t *)v11, &p);
    ck_assert_int_eq(v11->finalize(ctx), ncclSuccess);

    memset(&p, 0, sizeof(p));
    ck_assert_int_eq(v10->init(nt_logger, NULL), ncclSuccess);
    ck_assert_int_eq(v10->listen(0, handle, &p.lc), ncclSuccess);
    while ((!p.sc || !p.rc) && nt_now() < end) {
        if (!p.sc) {
            ck_assert_int_eq(v10->connect(0, &cfg10, handle, &p.sc, NULL), ncclSuccess);
        }
        if (!p.rc) {
            ck_assert_int_eq(v10->accept(p.lc, &p.rc, NULL), ncclSuccess);
        }
    }
    ck_assert(p.sc && p.rc);
    /* isend/irecv/test/close/regMr of v10 have the v12 shapes as well. */
    nt_check_xfer((const ncclNet_v12_t *)(const void *)v10, &p, 1 << 20, 0);
    nt_pair_close((const ncclNet_v12_t *)(const void *)v10, &p);
}
END_TEST

void nt_add_connect_tcases(Suite *s)
{
    TCase *tc = tcase_create("connect");

    tcase_add_checked_fixture(tc, nt_setup, nt_teardown);
    tcase_set_timeout(tc, NT_TEST_TIMEOUT);
    tcase_add_test(tc, test_exports);
    tcase_add_test(tc, test_properties);
    tcase_add_test(tc, test_connect_orders);
    tcase_add_test(tc, test_multi_accept);
    tcase_add_test(tc, test_v11_v10);
    tcase_add_test(tc, test_two_contexts);
    suite_add_tcase(s, tc);
}
