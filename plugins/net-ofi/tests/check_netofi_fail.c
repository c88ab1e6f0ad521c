/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_netofi, failures: what the plugin refuses (grouped receives, device memory),
 * closes with receives pending or mid-way through a 64 MiB message on either side, a
 * peer's close failing a posted receive (and one posted after it, while the message sent
 * before it still arrives), and init failing with a message that names what it found.
 * The init cases have no fixture: the knobs they set must be in place before init.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "netofi_test_util.h"
#include "plugin_api/net/net.h"

START_TEST(test_grouped_irecv_refused)
{
    uint8_t a[8], b[8];
    void *data[2] = {a, b}, *mh[2] = {NULL, NULL}, *req = NULL;
    size_t sizes[2] = {8, 8};
    int tags[2] = {0, 1};
    nt_pair_t p;

    nt_pair_open(nt_net, nt_ctx, nt_ctx, &p, 0);
    ck_assert_int_eq(nt_net->regMr(p.rc, a, 8, NCCL_PTR_HOST, &mh[0]), ncclSuccess);
    ck_assert_int_ne(nt_net->irecv(p.rc, 2, data, sizes, tags, mh, NULL, &req), ncclSuccess);
    ck_assert_ptr_null(req);
    ck_assert_int_eq(nt_net->deregMr(p.rc, mh[0]), ncclSuccess);
    /* Device memory is refused too: host only. */
    ck_assert_int_ne(nt_net->regMr(p.rc, a, 8, NCCL_PTR_CUDA, &mh[0]), ncclSuccess);
    nt_pair_close(nt_net, &p);
}
END_TEST

/* Close with receives posted and nothing sent, and a connection never accepted. */
START_TEST(test_close_outstanding)
{
    static uint8_t buf[4][4096];
    char handle[NCCL_NET_HANDLE_MAXSIZE] = {0};
    void *mh, *req, *lc = NULL, *sc = NULL;
    size_t cap = sizeof(buf[0]);
    int tag = 0;
    nt_pair_t p;

    nt_pair_open(nt_net, nt_ctx, nt_ctx, &p, 0);
    ck_assert_int_eq(nt_net->regMr(p.rc, buf, sizeof(buf), NCCL_PTR_HOST, &mh), ncclSuccess);
    for (int i = 0; i < 4; i++) {
        void *rb = buf[i];
        ck_assert_int_eq(nt_net->irecv(p.rc, 1, &rb, &cap, &tag, &mh, NULL, &req), ncclSuccess);
        ck_assert_ptr_nonnull(req);
    }
    ck_assert_int_eq(nt_net->deregMr(p.rc, mh), ncclSuccess);
    nt_pair_close(nt_net, &p);
    ck_assert_int_eq(nt_net->listen(nt_ctx, 0, handle, &lc), ncclSuccess);
    ck_assert_int_eq(nt_net->connect(nt_ctx, 0, handle, &sc, NULL), ncclSuccess);
    ck_assert_int_eq(nt_net->closeSend(sc), ncclSuccess);
    ck_assert_int_eq(nt_net->closeListen(lc), ncclSuccess);
}
END_TEST

/* Poll req until it completes or fails (bounded); returns the result, *done_p the flag. */
static ncclResult_t settle(void *req, int *done_p)
{
    ncclResult_t res = ncclSuccess;
    double end = nt_now() + 20.0;

    *done_p = 0;
    while (res == ncclSuccess && !*done_p && nt_now() < end) {
        res = nt_net->test(req, done_p, NULL);
    }
    return res;
}

/* One side closes mid-way through a 64 MiB message and frees its buffer at once (ASan
 * watches): close must not return while the provider can still touch that buffer, and
 * the other side's request must fail (ncclRemoteError) or complete, never hang. */
START_TEST(test_close_mid_message)
{
    size_t big = (size_t)64 << 20;
    uint8_t *s = malloc(big), *r = malloc(big);
    void *sreq = NULL, *rreq = NULL, *smh, *rmh, *rb = r;
    int sdone = 0, rdone = 0, tag = 0;
    double end = nt_now() + NT_POLL_SECONDS;
    ncclResult_t res;
    nt_pair_t p;

    ck_assert(s != NULL && r != NULL);
    memset(s, 5, big);
    nt_pair_open(nt_net, nt_ctx, nt_ctx, &p, 0);
    ck_assert_int_eq(nt_net->regMr(p.sc, s, big, NCCL_PTR_HOST, &smh), ncclSuccess);
    ck_assert_int_eq(nt_net->regMr(p.rc, r, big, NCCL_PTR_HOST, &rmh), ncclSuccess);
    ck_assert_int_eq(nt_net->irecv(p.rc, 1, &rb, &big, &tag, &rmh, NULL, &rreq), ncclSuccess);
    while (sreq == NULL && nt_now() < end) {
        ck_assert_int_eq(nt_net->isend(p.sc, s, big, tag, smh, NULL, &sreq), ncclSuccess);
    }
    ck_assert_ptr_nonnull(sreq);
    for (int i = 0; i < 2; i++) {
        if (!sdone) {
            ck_assert_int_eq(nt_net->test(sreq, &sdone, NULL), ncclSuccess);
        }
        if (!rdone) {
            ck_assert_int_eq(nt_net->test(rreq, &rdone, NULL), ncclSuccess);
        }
    }
    if (_i == 0) { /* the receiver goes */
        ck_assert_int_eq(nt_net->deregMr(p.rc, rmh), ncclSuccess);
        ck_assert_int_eq(nt_net->closeRecv(p.rc), ncclSuccess);
        free(r);
        res = sdone ? ncclSuccess : settle(sreq, &sdone);
        ck_assert_msg(sdone || res == ncclRemoteError, "send after the receiver closed: %d", res);
        ck_assert_int_eq(nt_net->deregMr(p.sc, smh), ncclSuccess);
        ck_assert_int_eq(nt_net->closeSend(p.sc), ncclSuccess);
        free(s);
    } else { /* the sender goes */
        ck_assert_int_eq(nt_net->deregMr(p.sc, smh), ncclSuccess);
        ck_assert_int_eq(nt_net->closeSend(p.sc), ncclSuccess);
        free(s);
        res = rdone ? ncclSuccess : settle(rreq, &rdone);
        ck_assert_msg(rdone || res == ncclRemoteError, "receive after the sender closed: %d", res);
        ck_assert_int_eq(nt_net->deregMr(p.rc, rmh), ncclSuccess);
        ck_assert_int_eq(nt_net->closeRecv(p.rc), ncclSuccess);
        free(r);
    }
    ck_assert_int_eq(nt_net->closeListen(p.lc), ncclSuccess);
}
END_TEST

/* A receive posted before the sender closes without sending fails, in bounded time. */
START_TEST(test_peer_close_fails_pending)
{
    uint8_t buf[64];
    void *mh, *req = NULL, *rb = buf;
    size_t cap = sizeof(buf);
    int tag = 0, done = 0;
    nt_pair_t p;

    nt_pair_open(nt_net, nt_ctx, nt_ctx, &p, 1);
    ck_assert_int_eq(nt_net->regMr(p.rc, buf, cap, NCCL_PTR_HOST, &mh), ncclSuccess);
    ck_assert_int_eq(nt_net->irecv(p.rc, 1, &rb, &cap, &tag, &mh, NULL, &req), ncclSuccess);
    ck_assert_int_eq(nt_net->closeSend(p.sc), ncclSuccess); /* maybe before its ACK came */
    nt_warn[0] = '\0';
    ck_assert_int_eq(settle(req, &done), ncclRemoteError);
    ck_assert_ptr_nonnull(strstr(nt_warn, "closed"));
    ck_assert_int_eq(nt_net->deregMr(p.rc, mh), ncclSuccess);
    ck_assert_int_eq(nt_net->closeRecv(p.rc), ncclSuccess);
    ck_assert_int_eq(nt_net->closeListen(p.lc), ncclSuccess);
}
END_TEST

/* The sender sends one message and closes; the receiver sees the close notice before it
 * tests that message, then posts one more receive, as a proxy posting ahead does. That
 * receive fails in its turn, through test, and the message sent before the close still
 * arrives: an irecv that failed at once made the core drop the connection with it. */
START_TEST(test_peer_close_after_send)
{
    enum { SZ = 1 << 20 }; /* a rendezvous-sized message on tcp;ofi_rxm */
    uint8_t *s = malloc(SZ), *r = malloc(2 * (size_t)SZ);
    void *smh, *rmh, *sreq = NULL, *rreq[2] = {NULL, NULL}, *rc = NULL, *rb[2];
    size_t cap = SZ;
    int tag = 0, done = 0, size = -1;
    double end;
    nt_pair_t p;

    ck_assert(s != NULL && r != NULL);
    nt_fill(s, SZ, 3);
    rb[0] = r;
    rb[1] = r + SZ;
    nt_pair_open(nt_net, nt_ctx, nt_ctx, &p, 0);
    ck_assert_int_eq(nt_net->regMr(p.sc, s, SZ, NCCL_PTR_HOST, &smh), ncclSuccess);
    ck_assert_int_eq(nt_net->regMr(p.rc, r, 2 * (size_t)SZ, NCCL_PTR_HOST, &rmh), ncclSuccess);
    ck_assert_int_eq(nt_net->irecv(p.rc, 1, &rb[0], &cap, &tag, &rmh, NULL, &rreq[0]), ncclSuccess);
    ck_assert_ptr_nonnull(rreq[0]);
    end = nt_now() + NT_POLL_SECONDS;
    while (sreq == NULL && nt_now() < end) {
        ck_assert_int_eq(nt_net->isend(p.sc, s, SZ, tag, smh, NULL, &sreq), ncclSuccess);
    }
    ck_assert_ptr_nonnull(sreq);
    ck_assert_int_eq(settle(sreq, &done), ncclSuccess);
    ck_assert(done);
    ck_assert_int_eq(nt_net->deregMr(p.sc, smh), ncclSuccess);
    ck_assert_int_eq(nt_net->closeSend(p.sc), ncclSuccess);
    /* accept polls the shared endpoint without testing the receive: the close notice
     * arrives meanwhile. */
    end = nt_now() + 0.3;
    while (nt_now() < end) {
        ck_assert_int_eq(nt_net->accept(p.lc, &rc, NULL), ncclSuccess);
        ck_assert_ptr_null(rc);
    }
    nt_warn[0] = '\0';
    ck_assert_int_eq(nt_net->irecv(p.rc, 1, &rb[1], &cap, &tag, &rmh, NULL, &rreq[1]), ncclSuccess);
    ck_assert_ptr_nonnull(rreq[1]);
    done = 0;
    end = nt_now() + NT_POLL_SECONDS;
    while (!done && nt_now() < end) {
        ck_assert_int_eq(nt_net->test(rreq[0], &done, &size), ncclSuccess);
    }
    ck_assert(done);
    ck_assert_int_eq(size, SZ);
    ck_assert_msg(memcmp(s, r, SZ) == 0, "the message sent before the close arrived corrupted");
    ck_assert_int_eq(settle(rreq[1], &done), ncclRemoteError);
    ck_assert_ptr_nonnull(strstr(nt_warn, "closed"));
    ck_assert_int_eq(nt_net->deregMr(p.rc, rmh), ncclSuccess);
    ck_assert_int_eq(nt_net->closeRecv(p.rc), ncclSuccess);
    ck_assert_int_eq(nt_net->closeListen(p.lc), ncclSuccess);
    free(s);
    free(r);
}
END_TEST

/* Failing inits name what they found: no fixture, the knobs go in before init. */
static void expect_init_failure(const char *needle)
{
    ncclNetCommConfig_v12_t cfg = {.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF};
    const ncclNet_v12_t *net = nt_sym("ncclNetPlugin_v12");
    void *ctx = NULL;

    nt_warn[0] = '\0';
    ck_assert_int_ne(net->init(&ctx, 1, &cfg, nt_logger, NULL), ncclSuccess);
    ck_assert_msg(strstr(nt_warn, needle) != NULL, "expected '%s' in: %s", needle, nt_warn);
}

START_TEST(test_err_no_libfabric)
{
    setenv("NCCL_OFI_LIBFABRIC", "/nonexistent/libfabric.so.1", 1);
    expect_init_failure("/nonexistent/libfabric.so.1 not found");
}
END_TEST

START_TEST(test_err_no_provider)
{
    setenv("NCCL_OFI_PROVIDER", "nosuchprovider", 1);
    expect_init_failure("offered: ");
    ck_assert_ptr_nonnull(strstr(nt_warn, "nosuchprovider"));
}
END_TEST

START_TEST(test_err_excluded)
{
    const char *prov = getenv("FI_PROVIDER");

    if (prov == NULL) { /* with every provider offered, excluding one picks another */
        setenv("FI_PROVIDER", "tcp", 1);
        prov = "tcp";
    }
    setenv("NCCL_OFI_EXCLUDE_PROVIDERS", prov, 1);
    expect_init_failure("NCCL_OFI_EXCLUDE_PROVIDERS");
}
END_TEST

START_TEST(test_err_fi_provider)
{
    setenv("FI_PROVIDER", "nosuchprovider", 1);
    expect_init_failure("FI_PROVIDER=nosuchprovider");
}
END_TEST

/* Only providers without reliable tagged endpoints left: the message names what each
 * lacks (here udp, FI_EP_DGRAM only; a host without udp has nothing left at all). */
START_TEST(test_err_no_capable_provider)
{
    setenv("FI_PROVIDER", "^ofi_rxd,ofi_rxm,shm,sm2,tcp,sockets,net,efa,verbs,psm2,psm3,cxi", 1);
    expect_init_failure("net-ofi: ");
    ck_assert_msg(strstr(nt_warn, "lacks FI_EP_RDM") != NULL ||
                      strstr(nt_warn, "offers no provider at all") != NULL,
                  "unexpected message: %s", nt_warn);
}
END_TEST

void nt_add_failure_tcases(Suite *s)
{
    TCase *tc = tcase_create("failures");
    TCase *init = tcase_create("init_failures");

    tcase_add_checked_fixture(tc, nt_setup, nt_teardown);
    tcase_set_timeout(tc, NT_TEST_TIMEOUT);
    tcase_add_test(tc, test_grouped_irecv_refused);
    tcase_add_test(tc, test_close_outstanding);
    tcase_add_loop_test(tc, test_close_mid_message, 0, 2);
    tcase_add_test(tc, test_peer_close_fails_pending);
    tcase_add_test(tc, test_peer_close_after_send);
    suite_add_tcase(s, tc);

    tcase_set_timeout(init, NT_TEST_TIMEOUT);
    tcase_add_test(init, test_err_no_libfabric);
    tcase_add_test(init, test_err_no_provider);
    tcase_add_test(init, test_err_excluded);
    tcase_add_test(init, test_err_fi_provider);
    tcase_add_test(init, test_err_no_capable_provider);
    suite_add_tcase(s, init);
}
