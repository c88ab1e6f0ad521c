/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_netofi, the data path: every size checked byte for byte (also into larger
 * buffers), 32 requests outstanding each way with the 33rd refused, truncation reported;
 * then under settings fixed before init: NCCL_OFI_MAX_MSG_SIZE=65536 (test case "split":
 * chunked messages, truncation again) and NCCL_OFI_MR_LOCAL=1 ("mr_local": registration
 * required, unregistered buffers refused, the outstanding requests again).
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netofi_test_util.h"
#include "plugin_api/net/net.h"

static void setup_split(void)
{
    setenv("NCCL_OFI_MAX_MSG_SIZE", "65536", 1);
    nt_setup();
}

static void setup_mr_local(void)
{
    setenv("NCCL_OFI_MR_LOCAL", "1", 1);
    nt_setup();
}

START_TEST(test_sizes)
{
    nt_pair_t p;

    nt_pair_open(nt_net, nt_ctx, nt_ctx, &p, 0);
    nt_check_xfer(nt_net, &p, nt_sizes[_i], 0);
    nt_check_xfer(nt_net, &p, nt_sizes[_i], 4096); /* receive buffer larger than the message */
    nt_pair_close(nt_net, &p);
}
END_TEST

/* 32 receives and 32 sends outstanding at once: the 33rd is refused (NULL request), and
 * message i lands in receive i whatever order the requests are tested in. */
START_TEST(test_outstanding)
{
    enum { N = NCCL_NET_MAX_REQUESTS, SZ = 8192 };
    uint8_t *s = malloc((size_t)N * SZ), *r = malloc((size_t)N * SZ);
    void *sreq[N] = {0}, *rreq[N] = {0}, *smh, *rmh, *extra = NULL;
    int sdone[N] = {0}, rdone[N] = {0}, tag = 1, left = 2 * N;
    double end = nt_now() + NT_POLL_SECONDS;
    nt_pair_t p;

    nt_pair_open(nt_net, nt_ctx, nt_ctx, &p, 1);
    ck_assert_int_eq(nt_net->regMr(p.sc, s, (size_t)N * SZ, NCCL_PTR_HOST, &smh), ncclSuccess);
    ck_assert_int_eq(nt_net->regMr(p.rc, r, (size_t)N * SZ, NCCL_PTR_HOST, &rmh), ncclSuccess);
    for (int i = 0; i < N; i++) {
        size_t cap = SZ;
        void *rb = r + (size_t)i * SZ;
        nt_fill(s + (size_t)i * SZ, SZ, (unsigned)i + 1);
        ck_assert_int_eq(nt_net->irecv(p.rc, 1, &rb, &cap, &tag, &rmh, NULL, &rreq[i]),
                         ncclSuccess);
        ck_assert_ptr_nonnull(rreq[i]);
    }
    {
        size_t cap = SZ;
        void *rb = r;
        ck_assert_int_eq(nt_net->irecv(p.rc, 1, &rb, &cap, &tag, &rmh, NULL, &extra), ncclSuccess);
        ck_assert_ptr_null(extra);
    }
    for (int i = 0; i < N && nt_now() < end; i++) {
        /* NULL until the connection's acknowledgement arrived: retry. */
        while (sreq[i] == NULL && nt_now() < end) {
            size_t len = SZ - (size_t)i; /* distinct lengths */
            ck_assert_int_eq(nt_net->isend(p.sc, s + (size_t)i * SZ, len, tag, smh, NULL, &sreq[i]),
                             ncclSuccess);
        }
    }
    ck_assert_int_eq(nt_net->isend(p.sc, s, 1, tag, smh, NULL, &extra), ncclSuccess);
    ck_assert_ptr_null(extra);
    while (left > 0 && nt_now() < end) {
        for (int i = N - 1; i >= 0; i--) { /* newest first */
            int size = -1;
            if (!rdone[i]) {
                ck_assert_int_eq(nt_net->test(rreq[i], &rdone[i], &size), ncclSuccess);
                if (rdone[i]) {
                    ck_assert_int_eq(size, SZ - i);
                    ck_assert(memcmp(s + (size_t)i * SZ, r + (size_t)i * SZ, SZ - i) == 0);
                    left--;
                }
            }
            if (!sdone[i]) {
                ck_assert_int_eq(nt_net->test(sreq[i], &sdone[i], NULL), ncclSuccess);
                left -= sdone[i];
            }
        }
    }
    ck_assert_int_eq(left, 0);
    ck_assert_int_eq(nt_net->deregMr(p.sc, smh), ncclSuccess);
    ck_assert_int_eq(nt_net->deregMr(p.rc, rmh), ncclSuccess);
    nt_pair_close(nt_net, &p);
    free(s);
    free(r);
}
END_TEST

START_TEST(test_truncation)
{
    static const size_t cases[][2] = {{100, 50}, {4097, 4096}, {1 << 20, 4096}, {200000, 131071}};
    uint8_t *s = calloc(1, 1 << 20), *r = calloc(1, 1 << 20);
    const char *prov = getenv("FI_PROVIDER");
    int got;
    nt_pair_t p;

    if (prov != NULL && strcmp(prov, "shm") == 0 && cases[_i][0] > 4096) {
        /* libfabric 1.17's shm spins forever inside fi_cq_read when a message above its
         * 4 KiB inject size is truncated (both sides hang); nothing a plugin can catch. */
        fprintf(stderr, "skipped: shm cannot report truncation of %zu bytes\n", cases[_i][0]);
        free(s);
        free(r);
        return;
    }

    nt_pair_open(nt_net, nt_ctx, nt_ctx, &p, 0);
    nt_warn[0] = '\0';
    ck_assert_int_eq(nt_xfer(nt_net, &p, s, cases[_i][0], r, cases[_i][1], &got), ncclInvalidUsage);
    ck_assert_msg(strstr(nt_warn, "truncated") != NULL, "no truncation message: %s", nt_warn);
    ck_assert_msg(strstr(nt_warn, "provider") != NULL, "provider not named: %s", nt_warn);
    /* Close what we opened: an endpoint left open at exit leaves its shm region behind. */
    nt_pair_close(nt_net, &p);
    free(s);
    free(r);
}
END_TEST

START_TEST(test_split)
{
    static const size_t sizes[] = {0, 65535, 65536, 65537, 3 * 65536, (1 << 20) + 3, 64 << 20};
    ncclNetProperties_v12_t props;
    nt_pair_t p;

    ck_assert_int_eq(nt_net->getProperties(0, &props), ncclSuccess);
    ck_assert_uint_eq(props.maxP2pBytes, 65536);
    nt_pair_open(nt_net, nt_ctx, nt_ctx, &p, 0);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        nt_check_xfer(nt_net, &p, sizes[i], 0);
        nt_check_xfer(nt_net, &p, sizes[i], 65536 + 17);
    }
    nt_pair_close(nt_net, &p);
}
END_TEST

START_TEST(test_mr_local)
{
    uint8_t buf[64];
    void *req = NULL;
    nt_pair_t p;

    nt_pair_open(nt_net, nt_ctx, nt_ctx, &p, 0);
    for (size_t i = 0; i < sizeof(nt_sizes) / sizeof(nt_sizes[0]); i++) {
        nt_check_xfer(nt_net, &p, nt_sizes[i], 1);
    }
    /* A registration is required now: an unregistered buffer is refused, clearly. */
    nt_warn[0] = '\0';
    ck_assert_int_ne(nt_net->isend(p.sc, buf, sizeof(buf), 0, NULL, NULL, &req), ncclSuccess);
    ck_assert_ptr_null(req);
    ck_assert_ptr_nonnull(strstr(nt_warn, "FI_MR_LOCAL"));
    nt_pair_close(nt_net, &p);
}
END_TEST

void nt_add_data_tcases(Suite *s)
{
    TCase *data = tcase_create("data");
    TCase *split = tcase_create("split");
    TCase *mr = tcase_create("mr_local");

    tcase_add_checked_fixture(data, nt_setup, nt_teardown);
    tcase_set_timeout(data, NT_TEST_TIMEOUT);
    tcase_add_loop_test(data, test_sizes, 0, NT_NSIZES);
    tcase_add_test(data, test_outstanding);
    tcase_add_loop_test(data, test_truncation, 0, 4);
    suite_add_tcase(s, data);

    tcase_add_checked_fixture(split, setup_split, nt_teardown);
    tcase_set_timeout(split, NT_TEST_TIMEOUT);
    tcase_add_test(split, test_split);
    tcase_add_loop_test(split, test_truncation, 0, 4);
    suite_add_tcase(s, split);

    tcase_add_checked_fixture(mr, setup_mr_local, nt_teardown);
    tcase_set_timeout(mr, NT_TEST_TIMEOUT);
    tcase_add_test(mr, test_mr_local);
    tcase_add_test(mr, test_outstanding);
    suite_add_tcase(s, mr);
}
