/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Net plugin conformance kit: loads any net plugin .so (argv[1]), probes
 * ncclNetPlugin_v12, _v11, _v10 (newest first, or the one --version names) and runs the
 * same battery against it: properties, non-blocking connection setup, transfers of
 * awkward sizes checked byte for byte, 32 outstanding requests per direction, in-order
 * completion, truncation, bad handles, peers that vanish mid-transfer, and teardown with
 * requests pending. Both ends of every connection live in the test process and one
 * thread drives them, as a proxy thread would; every wait is bounded by a deadline.
 *
 * Usage: check_net_conformance PLUGIN.so [--version 12|11|10] [--require-device]
 *                              [--strict-order] [-v]
 * Exit 77 (skipped) when the plugin reports no device, unless --require-device.
 * --strict-order also requires requests to complete in posting order (a newer one done
 * implies every older one done), which the ABI does not demand but the socket plugin
 * promises.
 */
#include <check.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net_kit.h"
#include "netsock_handle.h"

#define CONNECT_TIMEOUT 20.0 /* seconds for connect/accept to complete */
#define XFER_TIMEOUT 120.0   /* seconds for a transfer (64 MiB under sanitizers included) */
#define ERROR_TIMEOUT 20.0   /* seconds for a failure to be reported */
#define BAD_CONNECT_TIME 2.0 /* seconds a bad handle is given to (not) connect */
#define MIB ((size_t)1 << 20)
#define NREQ NCCL_NET_MAX_REQUESTS
#define CANARY 0xa5

typedef struct {
    void *lc, *sc, *rc;
    char handle[NCCL_NET_HANDLE_MAXSIZE];
} pair_t;

static void kit_setup(void)
{
    ck_assert_int_eq(kit_init(), ncclSuccess);
    kit_warn_reset();
}

static void kit_teardown(void)
{
    kit_fini();
}

/* Deterministic bytes for message `seed`. */
static void pattern(unsigned char *buf, size_t n, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 12345u;

    for (size_t i = 0; i < n; i++) {
        if ((i & 3) == 0) {
            x = x * 1664525u + 1013904223u;
        }
        buf[i] = (unsigned char)(x >> (8 * (i & 3)));
    }
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(p);
    return p;
}

/* Check buf holds pattern(seed) over n bytes; report the first difference. */
static void check_pattern(const unsigned char *buf, size_t n, uint32_t seed)
{
    unsigned char *want = xmalloc(n);
    size_t i;

    pattern(want, n, seed);
    if (memcmp(buf, want, n) != 0) {
        for (i = 0; i < n && buf[i] == want[i]; i++) {
        }
        ck_abort_msg("message %u: byte %zu of %zu is 0x%02x, expected 0x%02x", seed, i, n, buf[i],
                     want[i]);
    }
    free(want);
}

static void pair_listen(pair_t *p)
{
    memset(p, 0, sizeof(*p));
    ck_assert_int_eq(kit_listen(0, p->handle, &p->lc), ncclSuccess);
    ck_assert_ptr_nonnull(p->lc);
}

/* Poll the non-blocking connect and accept until both are done. */
static void pair_connect(pair_t *p)
{
    double end = kit_now() + CONNECT_TIMEOUT;

    while ((p->sc == NULL || p->rc == NULL) && kit_now() < end) {
        if (p->sc == NULL) {
            ck_assert_int_eq(kit_connect(0, p->handle, &p->sc), ncclSuccess);
        }
        if (p->rc == NULL) {
            ck_assert_int_eq(kit_accept(p->lc, &p->rc), ncclSuccess);
        }
        if (p->sc == NULL || p->rc == NULL) {
            sched_yield();
        }
    }
    ck_assert_msg(p->sc != NULL && p->rc != NULL,
                  "connect (%p) / accept (%p) not done within %.0f s", p->sc, p->rc,
                  CONNECT_TIMEOUT);
}

static void pair_open(pair_t *p)
{
    pair_listen(p);
    pair_connect(p);
}

static void pair_close(pair_t *p)
{
    if (p->sc != NULL) {
        ck_assert_int_eq(kit_close_send(p->sc), ncclSuccess);
    }
    if (p->rc != NULL) {
        ck_assert_int_eq(kit_close_recv(p->rc), ncclSuccess);
    }
    if (p->lc != NULL) {
        ck_assert_int_eq(kit_close_listen(p->lc), ncclSuccess);
    }
    memset(p, 0, sizeof(*p));
}

/* Post a send, retrying while the plugin says "later"; bounded. */
static void *post_send(void *sc, void *data, size_t size, void *mh)
{
    void *req = NULL;
    double end = kit_now() + XFER_TIMEOUT;

    while (req == NULL) {
        ck_assert_int_eq(kit_isend(sc, data, size, 0, mh, &req), ncclSuccess);
        ck_assert_msg(req != NULL || kit_now() < end, "isend of %zu bytes never posted", size);
    }
    return req;
}

static void *post_recv(void *rc, void *data, size_t cap, void *mh)
{
    void *req = NULL;
    int tag = 0;
    double end = kit_now() + XFER_TIMEOUT;

    while (req == NULL) {
        ck_assert_int_eq(kit_irecv(rc, 1, &data, &cap, &tag, &mh, &req), ncclSuccess);
        ck_assert_msg(req != NULL || kit_now() < end, "irecv of %zu bytes never posted", cap);
    }
    return req;
}

/* Test every request until all are done; sizes[i] gets what test reported (-1: unset).
 * NULL entries are requests already done: their sizes are left alone. */
static void wait_all(void **reqs, int *sizes, int n)
{
    double end = kit_now() + XFER_TIMEOUT;
    int left = 0;

    for (int i = 0; i < n; i++) {
        if (reqs[i] != NULL) {
            sizes[i] = -1;
            left++;
        }
    }
    while (left > 0) {
        int moved = 0;
        for (int i = 0; i < n; i++) {
            int done = 0;
            if (reqs[i] == NULL) {
                continue;
            }
            ck_assert_int_eq(kit_test(reqs[i], &done, &sizes[i]), ncclSuccess);
            if (done) {
                reqs[i] = NULL;
                left--;
                moved = 1;
            }
        }
        ck_assert_msg(kit_now() < end, "%d of %d requests not done within %.0f s", left, n,
                      XFER_TIMEOUT);
        if (!moved) {
            sched_yield();
        }
    }
}

/* Test reqs in posting order from *next, as a proxy does: stop at the first not done. */
static void progress_in_order(void **reqs, int *sizes, int n, int *next)
{
    while (*next < n) {
        int done = 0;
        ck_assert_int_eq(kit_test(reqs[*next], &done, &sizes[*next]), ncclSuccess);
        if (!done) {
            return;
        }
        reqs[(*next)++] = NULL;
    }
}

/* Post a send; while the plugin says "later", progress the peer's receives (posting
 * order), as a proxy would. Sends are never tested here, so they stay outstanding. */
static void *post_send_progress(void *sc, void *data, size_t size, void **rreqs, int *rsizes,
                                int nr, int *rnext)
{
    void *req = NULL;
    double end = kit_now() + XFER_TIMEOUT;

    for (;;) {
        ck_assert_int_eq(kit_isend(sc, data, size, 0, NULL, &req), ncclSuccess);
        if (req != NULL) {
            return req;
        }
        ck_assert_msg(kit_now() < end, "isend of %zu bytes never posted", size);
        progress_in_order(rreqs, rsizes, nr, rnext);
        sched_yield();
    }
}

START_TEST(test_devices_and_properties)
{
    int ndev = 0;

    ck_assert_int_eq(kit_devices(&ndev), ncclSuccess);
    ck_assert_int_gt(ndev, 0);
    for (int d = 0; d < ndev; d++) {
        ncclNetProperties_v12_t p;
        ck_assert_int_eq(kit_properties(d, &p), ncclSuccess);
        ck_assert_msg(p.name != NULL && p.name[0] != '\0', "device %d has no name", d);
        ck_assert_int_ge(p.maxRecvs, 1);
        ck_assert_int_gt(p.speed, 0);
        ck_assert_int_gt(p.maxComms, 0);
        ck_assert_msg(p.latency >= 0.0f, "device %d latency %f", d, (double)p.latency);
        ck_assert_msg(p.ptrSupport & NCCL_PTR_HOST, "device %d cannot send host memory", d);
        ck_assert_msg(p.maxP2pBytes > 0 && p.maxP2pBytes <= NCCL_MAX_NET_SIZE_BYTES,
                      "maxP2pBytes %zu", p.maxP2pBytes);
        ck_assert_msg(p.maxCollBytes > 0 && p.maxCollBytes <= NCCL_MAX_NET_SIZE_BYTES,
                      "maxCollBytes %zu", p.maxCollBytes);
        ck_assert_msg(p.netDeviceType == NCCL_NET_DEVICE_HOST ||
                          p.netDeviceType == NCCL_NET_DEVICE_UNPACK,
                      "netDeviceType %d", (int)p.netDeviceType);
        ck_assert_msg(p.vProps.ndevs >= 1 && p.vProps.ndevs <= NCCL_NET_MAX_DEVS_PER_NIC_V12,
                      "vProps.ndevs %d", p.vProps.ndevs);
        printf("device %d: %s, %d Mbps, pci %s, maxRecvs %d (%s)\n", d, p.name, p.speed,
               p.pciPath ? p.pciPath : "none", p.maxRecvs, kit_symbol());
    }
}
END_TEST

START_TEST(test_listen_connect_accept_close)
{
    pair_t p;
    static const char zero[NCCL_NET_HANDLE_MAXSIZE];

    pair_listen(&p);
    ck_assert_msg(memcmp(p.handle, zero, sizeof(zero)) != 0, "listen wrote no handle");
    pair_connect(&p);
    pair_close(&p);
}
END_TEST

/* Eight connections set up at once, interleaved, then one message each. */
START_TEST(test_concurrent_connections)
{
    enum { N = 8 };
    pair_t p[N];
    double end;
    int left = N;
    unsigned char sbuf[N][64], rbuf[N][64];
    void *reqs[2 * N];
    int sizes[2 * N];

    for (int i = 0; i < N; i++) {
        pair_listen(&p[i]);
    }
    end = kit_now() + CONNECT_TIMEOUT;
    while (left > 0) {
        left = 0;
        for (int i = 0; i < N; i++) {
            if (p[i].sc == NULL) {
                ck_assert_int_eq(kit_connect(0, p[i].handle, &p[i].sc), ncclSuccess);
            }
            if (p[i].rc == NULL) {
                ck_assert_int_eq(kit_accept(p[i].lc, &p[i].rc), ncclSuccess);
            }
            left += p[i].sc == NULL || p[i].rc == NULL;
        }
        ck_assert_msg(kit_now() < end, "%d of %d connections not set up", left, N);
    }
    for (int i = 0; i < N; i++) {
        pattern(sbuf[i], sizeof(sbuf[i]), 100 + (uint32_t)i);
        reqs[2 * i] = post_recv(p[i].rc, rbuf[i], sizeof(rbuf[i]), NULL);
        reqs[2 * i + 1] = post_send(p[i].sc, sbuf[i], sizeof(sbuf[i]), NULL);
    }
    wait_all(reqs, sizes, 2 * N);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(sizes[2 * i], (int)sizeof(rbuf[i]));
        check_pattern(rbuf[i], sizeof(rbuf[i]), 100 + (uint32_t)i);
        pair_close(&p[i]);
    }
}
END_TEST

/* Closing the listener leaves the connections it accepted working. */
START_TEST(test_close_listen_keeps_comms)
{
    pair_t p;
    unsigned char sbuf[1000], rbuf[1000];
    void *reqs[2];
    int sizes[2];

    pair_open(&p);
    ck_assert_int_eq(kit_close_listen(p.lc), ncclSuccess);
    p.lc = NULL;
    pattern(sbuf, sizeof(sbuf), 7);
    reqs[0] = post_recv(p.rc, rbuf, sizeof(rbuf), NULL);
    reqs[1] = post_send(p.sc, sbuf, sizeof(sbuf), NULL);
    wait_all(reqs, sizes, 2);
    check_pattern(rbuf, sizeof(rbuf), 7);
    pair_close(&p);
}
END_TEST

static const size_t xfer_sizes[] = {0, 1, 4097, MIB, 64 * MIB};

/* One message of each awkward size into a larger, registered buffer. */
START_TEST(test_sendrecv_sizes)
{
    size_t size = xfer_sizes[_i], cap = size + 4096;
    unsigned char *sbuf = xmalloc(size), *rbuf = xmalloc(cap);
    void *smh = NULL, *rmh = NULL, *reqs[2];
    int sizes[2];
    pair_t p;

    pair_open(&p);
    pattern(sbuf, size, (uint32_t)_i);
    memset(rbuf, CANARY, cap);
    ck_assert_int_eq(kit_reg_mr(p.sc, sbuf, size ? size : 1, NCCL_PTR_HOST, &smh), ncclSuccess);
    ck_assert_int_eq(kit_reg_mr(p.rc, rbuf, cap, NCCL_PTR_HOST, &rmh), ncclSuccess);
    reqs[0] = post_recv(p.rc, rbuf, cap, rmh);
    reqs[1] = post_send(p.sc, sbuf, size, smh);
    wait_all(reqs, sizes, 2);
    ck_assert_int_eq(sizes[0], (int)size);
    ck_assert_msg(sizes[1] == -1 || sizes[1] == (int)size, "send reported %d bytes", sizes[1]);
    check_pattern(rbuf, size, (uint32_t)_i);
    for (size_t i = size; i < cap; i++) {
        ck_assert_msg(rbuf[i] == CANARY, "byte %zu past a %zu-byte message was written", i, size);
    }
    ck_assert_int_eq(kit_dereg_mr(p.sc, smh), ncclSuccess);
    ck_assert_int_eq(kit_dereg_mr(p.rc, rmh), ncclSuccess);
    pair_close(&p);
    free(sbuf);
    free(rbuf);
}
END_TEST

static size_t many_size(int i)
{
    return (size_t)(i * 4099 + 13) % (96 * 1024) + (i % 5 == 0 ? 300 * 1024 : 0);
}

/* 32 receives and 32 sends outstanding on each of two opposite connections. */
START_TEST(test_32_outstanding_each_direction)
{
    pair_t ab, ba;
    unsigned char *sbuf[2][NREQ], *rbuf[2][NREQ];
    void *reqs[4 * NREQ];
    int sizes[4 * NREQ];

    pair_open(&ab);
    pair_open(&ba);
    for (int d = 0; d < 2; d++) {
        for (int i = 0; i < NREQ; i++) {
            size_t n = many_size(i + d * NREQ);
            sbuf[d][i] = xmalloc(n);
            rbuf[d][i] = xmalloc(n);
            pattern(sbuf[d][i], n, (uint32_t)(i + d * NREQ));
        }
    }
    for (int d = 0; d < 2; d++) {
        pair_t *p = d ? &ba : &ab;
        for (int i = 0; i < NREQ; i++) {
            size_t n = many_size(i + d * NREQ);
            void *data = rbuf[d][i], **req = &reqs[(2 * d) * NREQ + i];
            int tag = 0;
            *req = NULL;
            ck_assert_int_eq(kit_irecv(p->rc, 1, &data, &n, &tag, NULL, req), ncclSuccess);
            ck_assert_msg(*req != NULL, "irecv %d of %d was refused", i + 1, NREQ);
        }
    }
    /* All 32 sends of each direction are posted before any send is tested. */
    for (int d = 0; d < 2; d++) {
        pair_t *p = d ? &ba : &ab;
        int rnext = 0;
        for (int i = 0; i < NREQ; i++) {
            reqs[(2 * d + 1) * NREQ + i] =
                post_send_progress(p->sc, sbuf[d][i], many_size(i + d * NREQ),
                                   &reqs[(2 * d) * NREQ], &sizes[(2 * d) * NREQ], NREQ, &rnext);
        }
    }
    wait_all(reqs, sizes, 4 * NREQ);
    for (int d = 0; d < 2; d++) {
        for (int i = 0; i < NREQ; i++) {
            size_t n = many_size(i + d * NREQ);
            ck_assert_int_eq(sizes[(2 * d) * NREQ + i], (int)n);
            check_pattern(rbuf[d][i], n, (uint32_t)(i + d * NREQ));
            free(sbuf[d][i]);
            free(rbuf[d][i]);
        }
    }
    pair_close(&ab);
    pair_close(&ba);
}
END_TEST

/* With every request in flight, posting says "later" (NULL) rather than failing, and a
 * completed request makes room again. */
START_TEST(test_full_means_retry_later)
{
    enum { LIMIT = 1024 };
    static unsigned char rbuf[LIMIT][8];
    static void *reqs[LIMIT];
    unsigned char sbuf[8];
    void *sreq, *extra = NULL, *one[2];
    int posted = 0, sizes[2], tag = 0;
    pair_t p;

    pair_open(&p);
    while (posted < LIMIT) {
        void *data = rbuf[posted];
        size_t cap = sizeof(rbuf[0]);
        reqs[posted] = NULL;
        ck_assert_int_eq(kit_irecv(p.rc, 1, &data, &cap, &tag, NULL, &reqs[posted]), ncclSuccess);
        if (reqs[posted] == NULL) {
            break;
        }
        posted++;
    }
    ck_assert_int_ge(posted, NREQ);
    pattern(sbuf, sizeof(sbuf), 3);
    sreq = post_send(p.sc, sbuf, sizeof(sbuf), NULL);
    one[0] = reqs[0];
    one[1] = sreq;
    wait_all(one, sizes, 2);
    check_pattern(rbuf[0], sizeof(sbuf), 3);
    if (posted < LIMIT) {
        void *data = rbuf[0];
        size_t cap = sizeof(rbuf[0]);
        ck_assert_int_eq(kit_irecv(p.rc, 1, &data, &cap, &tag, NULL, &extra), ncclSuccess);
        ck_assert_msg(extra != NULL, "no irecv could be posted after one completed");
    }
    pair_close(&p); /* with the other receives still pending */
}
END_TEST

static size_t order_size(int k)
{
    if (k % 29 == 0) {
        return MIB + (size_t)k;
    }
    if (k % 7 == 0) {
        return 200 * 1024 + (size_t)k;
    }
    return (size_t)(k * 37) % 5000;
}

static int strict_order; /* --strict-order: the newest done implies every older done */

/* Batches of 32 mixed-size messages, each landing in the receive posted for it, tested in
 * posting order. With --strict-order the newest request is polled first and, once done,
 * every older one of the batch must be done too (the socket plugin guarantees it; the ABI
 * only requires matching in posting order). */
START_TEST(test_in_order_completion)
{
    enum { BATCHES = 40 };
    size_t cap = MIB + BATCHES * NREQ;
    unsigned char *sbuf[NREQ], *rbuf[NREQ];
    pair_t p;

    pair_open(&p);
    for (int i = 0; i < NREQ; i++) {
        sbuf[i] = xmalloc(cap);
        rbuf[i] = xmalloc(cap);
    }
    for (int b = 0; b < BATCHES; b++) {
        void *rreq[NREQ], *sreq[NREQ];
        int rsize[NREQ], ssize[NREQ], rnext = 0, snext = 0;
        double end = kit_now() + XFER_TIMEOUT;

        for (int i = 0; i < NREQ; i++) {
            rreq[i] = post_recv(p.rc, rbuf[i], cap, NULL);
        }
        for (int i = 0; i < NREQ; i++) {
            int k = b * NREQ + i;
            pattern(sbuf[i], order_size(k), (uint32_t)k);
            sreq[i] = post_send_progress(p.sc, sbuf[i], order_size(k), rreq, rsize, NREQ, &rnext);
        }
        if (strict_order) {
            int rdone = rnext == NREQ, sdone = 0;
            while (!rdone || !sdone) {
                if (!rdone) {
                    ck_assert_int_eq(kit_test(rreq[NREQ - 1], &rdone, &rsize[NREQ - 1]),
                                     ncclSuccess);
                }
                if (!sdone) {
                    ck_assert_int_eq(kit_test(sreq[NREQ - 1], &sdone, NULL), ncclSuccess);
                }
                ck_assert_msg(kit_now() < end, "batch %d not done in %.0f s", b, XFER_TIMEOUT);
            }
            rreq[NREQ - 1] = sreq[NREQ - 1] = NULL;
            for (int i = 0; i < NREQ - 1; i++) {
                int done = 0;
                if (rreq[i] != NULL) {
                    ck_assert_int_eq(kit_test(rreq[i], &done, &rsize[i]), ncclSuccess);
                    ck_assert_msg(done, "receive %d is not done although the later %d is",
                                  b * NREQ + i, b * NREQ + NREQ - 1);
                }
                ck_assert_int_eq(kit_test(sreq[i], &done, &ssize[i]), ncclSuccess);
                ck_assert_msg(done, "send %d is not done although the later one is", b * NREQ + i);
            }
        } else {
            while (rnext < NREQ || snext < NREQ) {
                progress_in_order(rreq, rsize, NREQ, &rnext);
                progress_in_order(sreq, ssize, NREQ, &snext);
                ck_assert_msg(kit_now() < end, "batch %d not done in %.0f s", b, XFER_TIMEOUT);
            }
        }
        for (int i = 0; i < NREQ; i++) {
            int k = b * NREQ + i;
            ck_assert_int_eq(rsize[i], (int)order_size(k));
            check_pattern(rbuf[i], order_size(k), (uint32_t)k);
        }
    }
    for (int i = 0; i < NREQ; i++) {
        free(sbuf[i]);
        free(rbuf[i]);
    }
    pair_close(&p);
}
END_TEST

/* A message larger than the posted buffer is an error on the receive side. */
START_TEST(test_truncation_is_an_error)
{
    unsigned char sbuf[1000], rbuf[100];
    void *rreq, *sreq;
    ncclResult_t rres = ncclSuccess;
    int rdone = 0, sdone = 0, sfailed = 0;
    double end;
    pair_t p;

    pair_open(&p);
    pattern(sbuf, sizeof(sbuf), 9);
    memset(rbuf, CANARY, sizeof(rbuf));
    rreq = post_recv(p.rc, rbuf, sizeof(rbuf), NULL);
    sreq = post_send(p.sc, sbuf, sizeof(sbuf), NULL);
    end = kit_now() + ERROR_TIMEOUT;
    while (rres == ncclSuccess && !rdone && kit_now() < end) {
        if (!sdone && !sfailed) {
            sfailed = kit_test(sreq, &sdone, NULL) != ncclSuccess;
        }
        rres = kit_test(rreq, &rdone, NULL);
        sched_yield();
    }
    ck_assert_msg(!rdone, "a 1000-byte message completed into a 100-byte buffer");
    ck_assert_msg(rres != ncclSuccess, "truncation not reported within %.0f s", ERROR_TIMEOUT);
    ck_assert_msg(kit_warn_count() > 0, "the error was not logged");
    printf("truncation: error %d; %s", (int)rres, kit_warn_text());
    pair_close(&p);
}
END_TEST

START_TEST(test_multi_recv_beyond_max_rejected)
{
    ncclNetProperties_v12_t props;
    unsigned char a[8], b[8];
    void *data[2] = {a, b}, *req = NULL;
    size_t caps[2] = {8, 8};
    int tags[2] = {0, 0};
    pair_t p;

    ck_assert_int_eq(kit_properties(0, &props), ncclSuccess);
    if (props.maxRecvs > 1) {
        printf("maxRecvs %d: grouped receives are supported, nothing to reject\n", props.maxRecvs);
        return;
    }
    pair_open(&p);
    ck_assert_msg(kit_irecv(p.rc, 2, data, caps, tags, NULL, &req) != ncclSuccess,
                  "irecv of 2 buffers accepted with maxRecvs 1");
    pair_close(&p);
}
END_TEST

START_TEST(test_reg_mr_and_flush)
{
    ncclNetProperties_v12_t props;
    unsigned char buf[4096];
    void *mh = NULL, *gpu_mh = NULL, *req = NULL, *data = buf;
    int size = (int)sizeof(buf);
    pair_t p;

    ck_assert_int_eq(kit_properties(0, &props), ncclSuccess);
    pair_open(&p);
    ck_assert_int_eq(kit_reg_mr(p.rc, buf, sizeof(buf), NCCL_PTR_HOST, &mh), ncclSuccess);
    if (!(props.ptrSupport & NCCL_PTR_CUDA)) {
        ck_assert_msg(kit_reg_mr(p.rc, buf, sizeof(buf), NCCL_PTR_CUDA, &gpu_mh) != ncclSuccess,
                      "regMr of NCCL_PTR_CUDA accepted by a host-only plugin");
    }
    ck_assert_int_eq(kit_iflush(p.rc, 1, &data, &size, &mh, &req), ncclSuccess);
    if (req != NULL) {
        int sizes[1];
        wait_all(&req, sizes, 1);
    }
    ck_assert_int_eq(kit_dereg_mr(p.rc, mh), ncclSuccess);
    pair_close(&p);
}
END_TEST

/* Closing comms with sends and receives still in flight must be safe. */
START_TEST(test_close_with_requests_pending)
{
    size_t big = 64 * MIB;
    unsigned char *sbuf = xmalloc(big), *rbuf = xmalloc(big);
    void *sreq, *rreq[4];
    int done;
    pair_t p;

    pair_open(&p);
    memset(sbuf, 1, big);
    for (int i = 0; i < 4; i++) {
        rreq[i] = post_recv(p.rc, rbuf, big, NULL);
    }
    sreq = post_send(p.sc, sbuf, big, NULL);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(kit_test(sreq, &done, NULL), ncclSuccess);
        ck_assert_int_eq(kit_test(rreq[0], &done, NULL), ncclSuccess);
    }
    pair_close(&p);
    free(sbuf);
    free(rbuf);
}
END_TEST

/* Handles that are garbage must neither connect nor crash. */
START_TEST(test_garbage_handle_does_not_connect)
{
    unsigned char bad[3][NCCL_NET_HANDLE_MAXSIZE];
    pair_t p;

    pair_listen(&p);
    memset(bad[0], 0, sizeof(bad[0]));
    memset(bad[1], 0xff, sizeof(bad[1]));
    pattern(bad[2], sizeof(bad[2]), 77);
    for (int k = 0; k < 3; k++) {
        void *sc = NULL;
        ncclResult_t res = ncclSuccess;
        double end = kit_now() + BAD_CONNECT_TIME;
        while (res == ncclSuccess && sc == NULL && kit_now() < end) {
            res = kit_connect(0, bad[k], &sc);
            ck_assert_int_eq(kit_accept(p.lc, &p.rc), ncclSuccess);
            ck_assert_msg(p.rc == NULL, "accept returned a comm for garbage handle %d", k);
            sched_yield();
        }
        ck_assert_msg(sc == NULL, "garbage handle %d connected", k);
        printf("garbage handle %d: %s\n", k, res == ncclSuccess ? "still pending" : "refused");
    }
    pair_close(&p);
}
END_TEST

/* Socket plugin only: a connection with the wrong secret is dropped and logged with its
 * address, and the listener still accepts the right one afterwards. */
START_TEST(test_wrong_secret_is_dropped)
{
    char bad[NCCL_NET_HANDLE_MAXSIZE];
    uint64_t secret;
    void *sc = NULL;
    ncclResult_t res = ncclSuccess;
    double end;
    unsigned char sbuf[100], rbuf[100];
    void *reqs[2];
    int sizes[2];
    pair_t p;

    if (strcmp(kit_name(), "Socket") != 0) {
        printf("plugin %s: the handle layout is unknown, skipping the secret test\n", kit_name());
        return;
    }
    pair_listen(&p);
    memcpy(bad, p.handle, sizeof(bad));
    memcpy(&secret, bad + offsetof(netsock_handle_t, secret), sizeof(secret));
    secret ^= 0x5a5a5a5a5a5a5a5aULL;
    memcpy(bad + offsetof(netsock_handle_t, secret), &secret, sizeof(secret));
    end = kit_now() + CONNECT_TIMEOUT;
    while (res == ncclSuccess && sc == NULL && kit_now() < end) {
        res = kit_connect(0, bad, &sc);
        ck_assert_int_eq(kit_accept(p.lc, &p.rc), ncclSuccess);
        ck_assert_msg(p.rc == NULL, "accept returned a comm for a wrong secret");
        sched_yield();
    }
    ck_assert_msg(sc == NULL, "connected with a wrong secret");
    ck_assert_msg(res != ncclSuccess, "the connector was not told it was refused");
    ck_assert_msg(strstr(kit_warn_text(), "secret") != NULL &&
                      (strstr(kit_warn_text(), "127.0.0.1") != NULL ||
                       strstr(kit_warn_text(), "::1") != NULL),
                  "the drop was not logged with the peer's address: %s", kit_warn_text());
    pair_connect(&p);
    pattern(sbuf, sizeof(sbuf), 11);
    reqs[0] = post_recv(p.rc, rbuf, sizeof(rbuf), NULL);
    reqs[1] = post_send(p.sc, sbuf, sizeof(sbuf), NULL);
    wait_all(reqs, sizes, 2);
    check_pattern(rbuf, sizeof(rbuf), 11);
    pair_close(&p);
}
END_TEST

/* Test req until it fails; it must not complete, and must fail in bounded time. */
static void expect_failure(void *req, const char *what)
{
    ncclResult_t res = ncclSuccess;
    int done = 0;
    double end = kit_now() + ERROR_TIMEOUT;

    while (res == ncclSuccess && !done && kit_now() < end) {
        res = kit_test(req, &done, NULL);
        sched_yield();
    }
    ck_assert_msg(!done, "%s completed although the peer was gone", what);
    ck_assert_msg(res != ncclSuccess, "%s: no error within %.0f s", what, ERROR_TIMEOUT);
    printf("%s: error %d\n", what, (int)res);
}

/* Test req until it fails or completes, within a bounded time; 1 when it failed. */
static int end_of_receive(void *req, const char *what)
{
    ncclResult_t res = ncclSuccess;
    int done = 0, size = -1;
    double end = kit_now() + ERROR_TIMEOUT;

    while (res == ncclSuccess && !done && kit_now() < end) {
        res = kit_test(req, &done, &size);
        sched_yield();
    }
    ck_assert_msg(res != ncclSuccess || done, "%s: neither error nor completion in %.0f s", what,
                  ERROR_TIMEOUT);
    printf("%s: %s %d\n", what, done ? "completed, bytes" : "error", done ? size : (int)res);
    return !done;
}

START_TEST(test_receiver_gone_fails_send)
{
    size_t big = 64 * MIB;
    unsigned char *sbuf = xmalloc(big);
    void *sreq;
    int done;
    pair_t p;

    pair_open(&p);
    memset(sbuf, 2, big);
    sreq = post_send(p.sc, sbuf, big, NULL);
    ck_assert_int_eq(kit_test(sreq, &done, NULL), ncclSuccess);
    ck_assert_int_eq(kit_close_recv(p.rc), ncclSuccess);
    p.rc = NULL;
    expect_failure(sreq, "a 64 MiB send to a closed receiver");
    ck_assert_int_gt(kit_warn_count(), 0);
    pair_close(&p);
    free(sbuf);
}
END_TEST

START_TEST(test_sender_gone_fails_recv)
{
    size_t big = 64 * MIB;
    unsigned char *sbuf = xmalloc(big), *rbuf = xmalloc(big);
    void *sreq, *rreq;
    int done;
    pair_t p;

    /* Mid-message: part of a 64 MiB message has arrived when the sender closes. */
    pair_open(&p);
    memset(sbuf, 3, big);
    rreq = post_recv(p.rc, rbuf, big, NULL);
    sreq = post_send(p.sc, sbuf, big, NULL);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(kit_test(rreq, &done, NULL), ncclSuccess);
        ck_assert_int_eq(kit_test(sreq, &done, NULL), ncclSuccess);
    }
    ck_assert_int_eq(kit_close_send(p.sc), ncclSuccess);
    p.sc = NULL;
    if (!end_of_receive(rreq, "a 64 MiB receive from a sender closed mid-message")) {
        /* The plugin finished the send before closing: then the data must be whole.
         * (One assertion, not one per byte: Check reports every assertion's location.) */
        size_t bad = 0;
        while (bad < big && rbuf[bad] == 3) {
            bad++;
        }
        ck_assert_msg(bad == big, "byte %zu of a completed receive is wrong", bad);
    } else {
        ck_assert_int_gt(kit_warn_count(), 0);
    }
    pair_close(&p);

    /* Before any byte: a posted receive whose sender closes. */
    pair_open(&p);
    rreq = post_recv(p.rc, rbuf, big, NULL);
    ck_assert_int_eq(kit_close_send(p.sc), ncclSuccess);
    p.sc = NULL;
    expect_failure(rreq, "a receive from a sender that closed before sending");
    pair_close(&p);
    free(sbuf);
    free(rbuf);
}
END_TEST

static TCase *tcase_new(const char *name, int timeout)
{
    TCase *tc = tcase_create(name);
    tcase_add_checked_fixture(tc, kit_setup, kit_teardown);
    tcase_set_timeout(tc, timeout);
    return tc;
}

static Suite *net_conformance_suite(void)
{
    Suite *s = suite_create("net_conformance");
    TCase *tc;

    tc = tcase_new("properties", 30);
    tcase_add_test(tc, test_devices_and_properties);
    suite_add_tcase(s, tc);

    tc = tcase_new("connect", 60);
    tcase_add_test(tc, test_listen_connect_accept_close);
    tcase_add_test(tc, test_concurrent_connections);
    tcase_add_test(tc, test_close_listen_keeps_comms);
    suite_add_tcase(s, tc);

    tc = tcase_new("transfer", 300);
    tcase_add_loop_test(tc, test_sendrecv_sizes, 0,
                        (int)(sizeof(xfer_sizes) / sizeof(xfer_sizes[0])));
    suite_add_tcase(s, tc);

    tc = tcase_new("requests", 300);
    tcase_add_test(tc, test_32_outstanding_each_direction);
    tcase_add_test(tc, test_full_means_retry_later);
    tcase_add_test(tc, test_in_order_completion);
    suite_add_tcase(s, tc);

    tc = tcase_new("misuse", 60);
    tcase_add_test(tc, test_truncation_is_an_error);
    tcase_add_test(tc, test_multi_recv_beyond_max_rejected);
    tcase_add_test(tc, test_reg_mr_and_flush);
    tcase_add_test(tc, test_close_with_requests_pending);
    suite_add_tcase(s, tc);

    tc = tcase_new("handshake", 60);
    tcase_add_test(tc, test_garbage_handle_does_not_connect);
    tcase_add_test(tc, test_wrong_secret_is_dropped);
    suite_add_tcase(s, tc);

    tc = tcase_new("peer_failure", 120);
    tcase_add_test(tc, test_receiver_gone_fails_send);
    tcase_add_test(tc, test_sender_gone_fails_recv);
    suite_add_tcase(s, tc);
    return s;
}

static int usage(const char *prog)
{
    fprintf(stderr,
            "usage: %s PLUGIN.so [--version 12|11|10] [--require-device] [--strict-order] [-v]\n",
            prog);
    return 2;
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    int version = 0, require = 0, ndev = 0, failed;
    char err[512];
    SRunner *sr;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--version") == 0 && i + 1 < argc) {
            version = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--require-device") == 0) {
            require = 1;
        } else if (strcmp(argv[i], "--strict-order") == 0) {
            strict_order = 1;
        } else if (strcmp(argv[i], "-v") == 0) {
            kit_set_verbose(1);
        } else if (path == NULL && argv[i][0] != '-') {
            path = argv[i];
        } else {
            return usage(argv[0]);
        }
    }
    if (path == NULL || (version != 0 && (version < 10 || version > 12))) {
        return usage(argv[0]);
    }
    if (kit_load(path, version, err, sizeof(err)) != 0) {
        fprintf(stderr, "net conformance: %s\n", err);
        return 1;
    }
    printf("net conformance: %s: %s, plugin \"%s\"\n", path, kit_symbol(), kit_name());
    /* Probe once here so a plugin without devices is skipped, not failed. */
    if (kit_init() != ncclSuccess || kit_devices(&ndev) != ncclSuccess || ndev <= 0) {
        fprintf(stderr, "net conformance: plugin \"%s\" has no usable device\n", kit_name());
        return require ? 1 : 77;
    }
    kit_fini();
    sr = srunner_create(net_conformance_suite());
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
