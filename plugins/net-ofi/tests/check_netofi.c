/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check tests of the net-ofi plugin, loaded from argv[1] with dlopen as a core loads it.
 * Run once per provider (ctest sets FI_PROVIDER=tcp, FI_PROVIDER=shm). Each test runs in
 * its own forked child (Check's fork mode), so libfabric is initialized per test and
 * environment knobs set in a fixture apply to that test only.
 *
 * Transfers drive both sides from one thread: every loop polls the receive and the send,
 * which is all the plugin needs (its endpoint is shared by the process).
 */
#include <check.h>
#include <dirent.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "plugin_api/net/net.h"

#define TEST_TIMEOUT 120
#define POLL_SECONDS 60.0

static const char *g_path;
static void *g_dl;
static const ncclNet_v12_t *g_net;
static void *g_ctx;
static char g_warn[8192]; /* every WARN the plugin logged, newline separated */

static void test_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                        const char *fmt, ...)
{
    char buf[2048];
    va_list ap;

    (void)flags;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (level == NCCL_LOG_WARN) {
        size_t len = strlen(g_warn);
        snprintf(g_warn + len, sizeof(g_warn) - len, "%s\n", buf);
        fprintf(stderr, "WARN %s:%d %s\n", file, line, buf);
    } else if (getenv("NETOFI_TEST_VERBOSE") != NULL) {
        fprintf(stderr, "INFO %s:%d %s\n", file, line, buf);
    }
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *sym(const char *name)
{
    if (g_dl == NULL) {
        g_dl = dlopen(g_path, RTLD_NOW | RTLD_LOCAL);
        ck_assert_msg(g_dl != NULL, "dlopen %s: %s", g_path, dlerror());
    }
    return dlsym(g_dl, name);
}

static void setup(void)
{
    ncclNetCommConfig_v12_t cfg = {.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF};
    int ndev = 0;

    g_net = sym("ncclNetPlugin_v12");
    ck_assert_ptr_nonnull(g_net);
    ck_assert_int_eq(g_net->init(&g_ctx, 0x1234, &cfg, test_logger, NULL), ncclSuccess);
    ck_assert_int_eq(g_net->devices(&ndev), ncclSuccess);
    ck_assert_int_ge(ndev, 1);
}

static void teardown(void)
{
    if (g_ctx != NULL) {
        ck_assert_int_eq(g_net->finalize(g_ctx), ncclSuccess);
        g_ctx = NULL;
    }
}

static void setup_split(void)
{
    setenv("NCCL_OFI_MAX_MSG_SIZE", "65536", 1);
    setup();
}

static void setup_mr_local(void)
{
    setenv("NCCL_OFI_MR_LOCAL", "1", 1);
    setup();
}

/* One connection: listen on rctx, connect from sctx. */
typedef struct {
    void *lc, *sc, *rc;
} pair_t;

static void pair_open(const ncclNet_v12_t *net, void *sctx, void *rctx, pair_t *p,
                      int connect_first)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE] = {0};
    double end = now() + POLL_SECONDS;

    memset(p, 0, sizeof(*p));
    ck_assert_int_eq(net->listen(rctx, 0, handle, &p->lc), ncclSuccess);
    ck_assert_ptr_nonnull(p->lc);
    while (connect_first && p->sc == NULL && now() < end) {
        ck_assert_int_eq(net->connect(sctx, 0, handle, &p->sc, NULL), ncclSuccess);
    }
    while ((p->sc == NULL || p->rc == NULL) && now() < end) {
        if (p->rc == NULL) {
            ck_assert_int_eq(net->accept(p->lc, &p->rc, NULL), ncclSuccess);
        }
        if (p->sc == NULL) {
            ck_assert_int_eq(net->connect(sctx, 0, handle, &p->sc, NULL), ncclSuccess);
        }
    }
    ck_assert_msg(p->sc != NULL && p->rc != NULL, "connect/accept did not finish");
}

static void pair_close(const ncclNet_v12_t *net, pair_t *p)
{
    ck_assert_int_eq(net->closeSend(p->sc), ncclSuccess);
    ck_assert_int_eq(net->closeRecv(p->rc), ncclSuccess);
    ck_assert_int_eq(net->closeListen(p->lc), ncclSuccess);
}

static void fill(uint8_t *buf, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        buf[i] = (uint8_t)((i * 131u) ^ (i >> 11) ^ (seed * 29u));
    }
}

/* Send size bytes into a receive of capacity cap, polling both; returns the receive's
 * result and its reported size. */
static ncclResult_t xfer(const ncclNet_v12_t *net, pair_t *p, void *sbuf, size_t size, void *rbuf,
                         size_t cap, int *rsize_p)
{
    void *smh = NULL, *rmh = NULL, *sreq = NULL, *rreq = NULL;
    int sdone = 0, rdone = 0, ssize = -1, tag = 7;
    ncclResult_t res = ncclSuccess;
    double end = now() + POLL_SECONDS;

    ck_assert_int_eq(net->regMr(p->sc, sbuf, size ? size : 1, NCCL_PTR_HOST, &smh), ncclSuccess);
    ck_assert_int_eq(net->regMr(p->rc, rbuf, cap ? cap : 1, NCCL_PTR_HOST, &rmh), ncclSuccess);
    *rsize_p = -1;
    while ((!sdone || !rdone) && now() < end) {
        if (rreq == NULL) {
            ck_assert_int_eq(net->irecv(p->rc, 1, &rbuf, &cap, &tag, &rmh, NULL, &rreq),
                             ncclSuccess);
        }
        if (sreq == NULL) {
            ck_assert_int_eq(net->isend(p->sc, sbuf, size, tag, smh, NULL, &sreq), ncclSuccess);
        }
        if (rreq != NULL && !rdone) {
            res = net->test(rreq, &rdone, rsize_p);
            if (res != ncclSuccess) {
                break;
            }
        }
        if (sreq != NULL && !sdone) {
            ck_assert_int_eq(net->test(sreq, &sdone, &ssize), ncclSuccess);
        }
    }
    if (res == ncclSuccess) {
        ck_assert_msg(sdone && rdone, "transfer of %zu bytes did not complete", size);
        ck_assert_int_eq(ssize, (int)size);
    }
    ck_assert_int_eq(net->deregMr(p->sc, smh), ncclSuccess);
    ck_assert_int_eq(net->deregMr(p->rc, rmh), ncclSuccess);
    return res;
}

/* Transfer size bytes (receive capacity size + extra) and check them byte by byte. */
static void check_xfer(const ncclNet_v12_t *net, pair_t *p, size_t size, size_t extra)
{
    uint8_t *s = malloc(size + 1), *r = malloc(size + extra + 1);
    int got = -1;

    ck_assert(s != NULL && r != NULL);
    fill(s, size, (unsigned)size);
    memset(r, 0xee, size + extra + 1);
    ck_assert_int_eq(xfer(net, p, s, size, r, size + extra, &got), ncclSuccess);
    ck_assert_int_eq(got, (int)size);
    ck_assert_msg(memcmp(s, r, size) == 0, "%zu-byte message arrived corrupted", size);
    ck_assert_msg(r[size] == (extra ? 0xee : r[size]), "bytes past the message were written");
    free(s);
    free(r);
}

START_TEST(test_exports)
{
    const ncclNet_v11_t *v11 = sym("ncclNetPlugin_v11");
    const ncclNet_v10_t *v10 = sym("ncclNetPlugin_v10");

    ck_assert_ptr_nonnull(v11);
    ck_assert_ptr_nonnull(v10);
    ck_assert_str_eq(g_net->name, "OFI");
    ck_assert_str_eq(v11->name, "OFI");
    ck_assert_str_eq(v10->name, "OFI");
    /* Internal symbols stay hidden. */
    ck_assert_ptr_null(sym("netofi_fabric_init"));
    ck_assert_ptr_null(sym("br_plugin_logger"));
    ck_assert_ptr_null(sym("br_lite_param_int"));
    /* Optional members this host-only plugin leaves out. */
    ck_assert_ptr_null(g_net->regMrDmaBuf);
    ck_assert_ptr_null(g_net->makeVDevice);
    ck_assert_ptr_nonnull(g_net->iflush);
    ck_assert_ptr_nonnull(g_net->finalize);
}
END_TEST

START_TEST(test_properties)
{
    const ncclNet_v11_t *v11 = sym("ncclNetPlugin_v11");
    const ncclNet_v10_t *v10 = sym("ncclNetPlugin_v10");
    ncclNetProperties_v12_t p;
    unsigned char buf[256];
    const ncclNetProperties_v11_t *p11 = (const void *)buf;
    const ncclNetProperties_v10_t *p10 = (const void *)buf;

    ck_assert_int_eq(g_net->getProperties(0, &p), ncclSuccess);
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
    ck_assert_int_ne(g_net->getProperties(99, &p), ncclSuccess);

    /* Older layouts: right fields, nothing written past their size. */
    memset(buf, 0xa5, sizeof(buf));
    ck_assert_int_eq(v11->getProperties(0, (ncclNetProperties_v11_t *)buf), ncclSuccess);
    ck_assert_uint_eq(p11->maxP2pBytes, p.maxP2pBytes);
    ck_assert_int_eq(p11->maxMultiRequestSize, 1);
    ck_assert_str_eq(p11->name, p.name);
    for (size_t i = sizeof(ncclNetProperties_v11_t); i < sizeof(buf); i++) {
        ck_assert_int_eq(buf[i], 0xa5);
    }
    ck_assert_int_eq(v10->init(test_logger, NULL), ncclSuccess);
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
    pair_t a, b;

    pair_open(g_net, g_ctx, g_ctx, &a, 1); /* connect returns before accept is called */
    pair_open(g_net, g_ctx, g_ctx, &b, 0); /* accept polled first */
    check_xfer(g_net, &b, 100, 0);
    check_xfer(g_net, &a, 100, 0);
    pair_close(g_net, &a);
    pair_close(g_net, &b);
}
END_TEST

static const size_t g_sizes[] = {0, 1, 4097, 1 << 20, 64 << 20};

START_TEST(test_sizes)
{
    pair_t p;

    pair_open(g_net, g_ctx, g_ctx, &p, 0);
    check_xfer(g_net, &p, g_sizes[_i], 0);
    check_xfer(g_net, &p, g_sizes[_i], 4096); /* receive buffer larger than the message */
    pair_close(g_net, &p);
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
    double end = now() + POLL_SECONDS;
    pair_t p;

    pair_open(g_net, g_ctx, g_ctx, &p, 1);
    ck_assert_int_eq(g_net->regMr(p.sc, s, (size_t)N * SZ, NCCL_PTR_HOST, &smh), ncclSuccess);
    ck_assert_int_eq(g_net->regMr(p.rc, r, (size_t)N * SZ, NCCL_PTR_HOST, &rmh), ncclSuccess);
    for (int i = 0; i < N; i++) {
        size_t cap = SZ;
        void *rb = r + (size_t)i * SZ;
        fill(s + (size_t)i * SZ, SZ, (unsigned)i + 1);
        ck_assert_int_eq(g_net->irecv(p.rc, 1, &rb, &cap, &tag, &rmh, NULL, &rreq[i]), ncclSuccess);
        ck_assert_ptr_nonnull(rreq[i]);
    }
    {
        size_t cap = SZ;
        void *rb = r;
        ck_assert_int_eq(g_net->irecv(p.rc, 1, &rb, &cap, &tag, &rmh, NULL, &extra), ncclSuccess);
        ck_assert_ptr_null(extra);
    }
    for (int i = 0; i < N && now() < end; i++) {
        /* NULL until the connection's acknowledgement arrived: retry. */
        while (sreq[i] == NULL && now() < end) {
            size_t len = SZ - (size_t)i; /* distinct lengths */
            ck_assert_int_eq(g_net->isend(p.sc, s + (size_t)i * SZ, len, tag, smh, NULL, &sreq[i]),
                             ncclSuccess);
        }
    }
    ck_assert_int_eq(g_net->isend(p.sc, s, 1, tag, smh, NULL, &extra), ncclSuccess);
    ck_assert_ptr_null(extra);
    while (left > 0 && now() < end) {
        for (int i = N - 1; i >= 0; i--) { /* newest first */
            int size = -1;
            if (!rdone[i]) {
                ck_assert_int_eq(g_net->test(rreq[i], &rdone[i], &size), ncclSuccess);
                if (rdone[i]) {
                    ck_assert_int_eq(size, SZ - i);
                    ck_assert(memcmp(s + (size_t)i * SZ, r + (size_t)i * SZ, SZ - i) == 0);
                    left--;
                }
            }
            if (!sdone[i]) {
                ck_assert_int_eq(g_net->test(sreq[i], &sdone[i], NULL), ncclSuccess);
                left -= sdone[i];
            }
        }
    }
    ck_assert_int_eq(left, 0);
    ck_assert_int_eq(g_net->deregMr(p.sc, smh), ncclSuccess);
    ck_assert_int_eq(g_net->deregMr(p.rc, rmh), ncclSuccess);
    pair_close(g_net, &p);
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
    pair_t p;

    if (prov != NULL && strcmp(prov, "shm") == 0 && cases[_i][0] > 4096) {
        /* libfabric 1.17's shm spins forever inside fi_cq_read when a message above its
         * 4 KiB inject size is truncated (both sides hang); nothing a plugin can catch. */
        fprintf(stderr, "skipped: shm cannot report truncation of %zu bytes\n", cases[_i][0]);
        free(s);
        free(r);
        return;
    }

    pair_open(g_net, g_ctx, g_ctx, &p, 0);
    g_warn[0] = '\0';
    ck_assert_int_eq(xfer(g_net, &p, s, cases[_i][0], r, cases[_i][1], &got), ncclInvalidUsage);
    ck_assert_msg(strstr(g_warn, "truncated") != NULL, "no truncation message: %s", g_warn);
    ck_assert_msg(strstr(g_warn, "provider") != NULL, "provider not named: %s", g_warn);
    /* Close what we opened: an endpoint left open at exit leaves its shm region behind. */
    pair_close(g_net, &p);
    free(s);
    free(r);
}
END_TEST

START_TEST(test_split)
{
    static const size_t sizes[] = {0, 65535, 65536, 65537, 3 * 65536, (1 << 20) + 3, 64 << 20};
    ncclNetProperties_v12_t props;
    pair_t p;

    ck_assert_int_eq(g_net->getProperties(0, &props), ncclSuccess);
    ck_assert_uint_eq(props.maxP2pBytes, 65536);
    pair_open(g_net, g_ctx, g_ctx, &p, 0);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        check_xfer(g_net, &p, sizes[i], 0);
        check_xfer(g_net, &p, sizes[i], 65536 + 17);
    }
    pair_close(g_net, &p);
}
END_TEST

START_TEST(test_mr_local)
{
    uint8_t buf[64];
    void *req = NULL;
    pair_t p;

    pair_open(g_net, g_ctx, g_ctx, &p, 0);
    for (size_t i = 0; i < sizeof(g_sizes) / sizeof(g_sizes[0]); i++) {
        check_xfer(g_net, &p, g_sizes[i], 1);
    }
    /* A registration is required now: an unregistered buffer is refused, clearly. */
    g_warn[0] = '\0';
    ck_assert_int_ne(g_net->isend(p.sc, buf, sizeof(buf), 0, NULL, NULL, &req), ncclSuccess);
    ck_assert_ptr_null(req);
    ck_assert_ptr_nonnull(strstr(g_warn, "FI_MR_LOCAL"));
    pair_close(g_net, &p);
}
END_TEST

START_TEST(test_two_contexts)
{
    ncclNetCommConfig_v12_t cfg = {.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF};
    void *ctx2 = NULL;
    pair_t a, b;

    ck_assert_int_eq(g_net->init(&ctx2, 0x5678, &cfg, test_logger, NULL), ncclSuccess);
    pair_open(g_net, g_ctx, ctx2, &a, 1);
    pair_open(g_net, ctx2, g_ctx, &b, 0);
    check_xfer(g_net, &a, 1 << 20, 0);
    check_xfer(g_net, &b, 4097, 0);
    /* Finalize before the connections close: they keep what they use alive. */
    ck_assert_int_eq(g_net->finalize(ctx2), ncclSuccess);
    check_xfer(g_net, &a, 4097, 0);
    pair_close(g_net, &a);
    pair_close(g_net, &b);
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
    double end = now() + POLL_SECONDS;
    pair_t p;

    ck_assert_int_eq(g_net->listen(g_ctx, 0, handle, &lc), ncclSuccess);
    while ((!sc[0] || !sc[1] || !rc[0] || !rc[1]) && now() < end) {
        for (int i = 0; i < 2; i++) {
            if (!sc[i]) {
                ck_assert_int_eq(g_net->connect(g_ctx, 0, handle, &sc[i], NULL), ncclSuccess);
            }
            if (!rc[i] && (i == 0 || rc[0])) {
                ck_assert_int_eq(g_net->accept(lc, &rc[i], NULL), ncclSuccess);
            }
        }
    }
    ck_assert(sc[0] && sc[1] && rc[0] && rc[1]);
    /* Which connector each accept got depends on arrival order: tell by content. */
    for (int i = 0; i < 2; i++) {
        void *rb = &rbyte[i];
        size_t cap = 1;
        ck_assert_int_eq(g_net->regMr(sc[i], &sbyte[i], 1, NCCL_PTR_HOST, &smh[i]), ncclSuccess);
        ck_assert_int_eq(g_net->regMr(rc[i], &rbyte[i], 1, NCCL_PTR_HOST, &rmh[i]), ncclSuccess);
        ck_assert_int_eq(g_net->irecv(rc[i], 1, &rb, &cap, &tag, &rmh[i], NULL, &rreq[i]),
                         ncclSuccess);
    }
    while (!(sdone[0] && sdone[1] && rdone[0] && rdone[1]) && now() < end) {
        for (int i = 0; i < 2; i++) {
            if (!sreq[i]) {
                ck_assert_int_eq(g_net->isend(sc[i], &sbyte[i], 1, 0, smh[i], NULL, &sreq[i]),
                                 ncclSuccess);
            }
            if (sreq[i] && !sdone[i]) {
                ck_assert_int_eq(g_net->test(sreq[i], &sdone[i], NULL), ncclSuccess);
            }
            if (!rdone[i]) {
                ck_assert_int_eq(g_net->test(rreq[i], &rdone[i], NULL), ncclSuccess);
            }
        }
    }
    ck_assert(sdone[0] && sdone[1] && rdone[0] && rdone[1]);
    for (int i = 0; i < 2; i++) {
        ck_assert(rbyte[i] == 0x11 || rbyte[i] == 0x22);
        from[i] = rbyte[i] == 0x11 ? 0 : 1;
        ck_assert_int_eq(g_net->deregMr(sc[i], smh[i]), ncclSuccess);
        ck_assert_int_eq(g_net->deregMr(rc[i], rmh[i]), ncclSuccess);
    }
    ck_assert_int_ne(from[0], from[1]);
    for (int i = 0; i < 2; i++) {
        p = (pair_t){.sc = sc[from[i]], .rc = rc[i]};
        check_xfer(g_net, &p, i ? 1 << 20 : 4097, 0);
    }
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(g_net->closeSend(sc[i]), ncclSuccess);
        ck_assert_int_eq(g_net->closeRecv(rc[i]), ncclSuccess);
    }
    ck_assert_int_eq(g_net->closeListen(lc), ncclSuccess);
}
END_TEST

START_TEST(test_grouped_irecv_refused)
{
    uint8_t a[8], b[8];
    void *data[2] = {a, b}, *mh[2] = {NULL, NULL}, *req = NULL;
    size_t sizes[2] = {8, 8};
    int tags[2] = {0, 1};
    pair_t p;

    pair_open(g_net, g_ctx, g_ctx, &p, 0);
    ck_assert_int_eq(g_net->regMr(p.rc, a, 8, NCCL_PTR_HOST, &mh[0]), ncclSuccess);
    ck_assert_int_ne(g_net->irecv(p.rc, 2, data, sizes, tags, mh, NULL, &req), ncclSuccess);
    ck_assert_ptr_null(req);
    ck_assert_int_eq(g_net->deregMr(p.rc, mh[0]), ncclSuccess);
    /* Device memory is refused too: host only. */
    ck_assert_int_ne(g_net->regMr(p.rc, a, 8, NCCL_PTR_CUDA, &mh[0]), ncclSuccess);
    pair_close(g_net, &p);
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
    pair_t p;

    pair_open(g_net, g_ctx, g_ctx, &p, 0);
    ck_assert_int_eq(g_net->regMr(p.rc, buf, sizeof(buf), NCCL_PTR_HOST, &mh), ncclSuccess);
    for (int i = 0; i < 4; i++) {
        void *rb = buf[i];
        ck_assert_int_eq(g_net->irecv(p.rc, 1, &rb, &cap, &tag, &mh, NULL, &req), ncclSuccess);
        ck_assert_ptr_nonnull(req);
    }
    ck_assert_int_eq(g_net->deregMr(p.rc, mh), ncclSuccess);
    pair_close(g_net, &p);
    ck_assert_int_eq(g_net->listen(g_ctx, 0, handle, &lc), ncclSuccess);
    ck_assert_int_eq(g_net->connect(g_ctx, 0, handle, &sc, NULL), ncclSuccess);
    ck_assert_int_eq(g_net->closeSend(sc), ncclSuccess);
    ck_assert_int_eq(g_net->closeListen(lc), ncclSuccess);
}
END_TEST

/* Poll req until it completes or fails (bounded); returns the result, *done_p the flag. */
static ncclResult_t settle(void *req, int *done_p)
{
    ncclResult_t res = ncclSuccess;
    double end = now() + 20.0;

    *done_p = 0;
    while (res == ncclSuccess && !*done_p && now() < end) {
        res = g_net->test(req, done_p, NULL);
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
    double end = now() + POLL_SECONDS;
    ncclResult_t res;
    pair_t p;

    ck_assert(s != NULL && r != NULL);
    memset(s, 5, big);
    pair_open(g_net, g_ctx, g_ctx, &p, 0);
    ck_assert_int_eq(g_net->regMr(p.sc, s, big, NCCL_PTR_HOST, &smh), ncclSuccess);
    ck_assert_int_eq(g_net->regMr(p.rc, r, big, NCCL_PTR_HOST, &rmh), ncclSuccess);
    ck_assert_int_eq(g_net->irecv(p.rc, 1, &rb, &big, &tag, &rmh, NULL, &rreq), ncclSuccess);
    while (sreq == NULL && now() < end) {
        ck_assert_int_eq(g_net->isend(p.sc, s, big, tag, smh, NULL, &sreq), ncclSuccess);
    }
    ck_assert_ptr_nonnull(sreq);
    for (int i = 0; i < 2; i++) {
        if (!sdone) {
            ck_assert_int_eq(g_net->test(sreq, &sdone, NULL), ncclSuccess);
        }
        if (!rdone) {
            ck_assert_int_eq(g_net->test(rreq, &rdone, NULL), ncclSuccess);
        }
    }
    if (_i == 0) { /* the receiver goes */
        ck_assert_int_eq(g_net->deregMr(p.rc, rmh), ncclSuccess);
        ck_assert_int_eq(g_net->closeRecv(p.rc), ncclSuccess);
        free(r);
        res = sdone ? ncclSuccess : settle(sreq, &sdone);
        ck_assert_msg(sdone || res == ncclRemoteError, "send after the receiver closed: %d", res);
        ck_assert_int_eq(g_net->deregMr(p.sc, smh), ncclSuccess);
        ck_assert_int_eq(g_net->closeSend(p.sc), ncclSuccess);
        free(s);
    } else { /* the sender goes */
        ck_assert_int_eq(g_net->deregMr(p.sc, smh), ncclSuccess);
        ck_assert_int_eq(g_net->closeSend(p.sc), ncclSuccess);
        free(s);
        res = rdone ? ncclSuccess : settle(rreq, &rdone);
        ck_assert_msg(rdone || res == ncclRemoteError, "receive after the sender closed: %d", res);
        ck_assert_int_eq(g_net->deregMr(p.rc, rmh), ncclSuccess);
        ck_assert_int_eq(g_net->closeRecv(p.rc), ncclSuccess);
        free(r);
    }
    ck_assert_int_eq(g_net->closeListen(p.lc), ncclSuccess);
}
END_TEST

/* A receive posted before the sender closes without sending fails, in bounded time. */
START_TEST(test_peer_close_fails_pending)
{
    uint8_t buf[64];
    void *mh, *req = NULL, *rb = buf;
    size_t cap = sizeof(buf);
    int tag = 0, done = 0;
    pair_t p;

    pair_open(g_net, g_ctx, g_ctx, &p, 1);
    ck_assert_int_eq(g_net->regMr(p.rc, buf, cap, NCCL_PTR_HOST, &mh), ncclSuccess);
    ck_assert_int_eq(g_net->irecv(p.rc, 1, &rb, &cap, &tag, &mh, NULL, &req), ncclSuccess);
    ck_assert_int_eq(g_net->closeSend(p.sc), ncclSuccess); /* maybe before its ACK came */
    g_warn[0] = '\0';
    ck_assert_int_eq(settle(req, &done), ncclRemoteError);
    ck_assert_ptr_nonnull(strstr(g_warn, "closed"));
    ck_assert_int_eq(g_net->deregMr(p.rc, mh), ncclSuccess);
    ck_assert_int_eq(g_net->closeRecv(p.rc), ncclSuccess);
    ck_assert_int_eq(g_net->closeListen(p.lc), ncclSuccess);
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
    pair_t p;

    ck_assert(s != NULL && r != NULL);
    fill(s, SZ, 3);
    rb[0] = r;
    rb[1] = r + SZ;
    pair_open(g_net, g_ctx, g_ctx, &p, 0);
    ck_assert_int_eq(g_net->regMr(p.sc, s, SZ, NCCL_PTR_HOST, &smh), ncclSuccess);
    ck_assert_int_eq(g_net->regMr(p.rc, r, 2 * (size_t)SZ, NCCL_PTR_HOST, &rmh), ncclSuccess);
    ck_assert_int_eq(g_net->irecv(p.rc, 1, &rb[0], &cap, &tag, &rmh, NULL, &rreq[0]), ncclSuccess);
    ck_assert_ptr_nonnull(rreq[0]);
    end = now() + POLL_SECONDS;
    while (sreq == NULL && now() < end) {
        ck_assert_int_eq(g_net->isend(p.sc, s, SZ, tag, smh, NULL, &sreq), ncclSuccess);
    }
    ck_assert_ptr_nonnull(sreq);
    ck_assert_int_eq(settle(sreq, &done), ncclSuccess);
    ck_assert(done);
    ck_assert_int_eq(g_net->deregMr(p.sc, smh), ncclSuccess);
    ck_assert_int_eq(g_net->closeSend(p.sc), ncclSuccess);
    /* accept polls the shared endpoint without testing the receive: the close notice
     * arrives meanwhile. */
    end = now() + 0.3;
    while (now() < end) {
        ck_assert_int_eq(g_net->accept(p.lc, &rc, NULL), ncclSuccess);
        ck_assert_ptr_null(rc);
    }
    g_warn[0] = '\0';
    ck_assert_int_eq(g_net->irecv(p.rc, 1, &rb[1], &cap, &tag, &rmh, NULL, &rreq[1]), ncclSuccess);
    ck_assert_ptr_nonnull(rreq[1]);
    done = 0;
    end = now() + POLL_SECONDS;
    while (!done && now() < end) {
        ck_assert_int_eq(g_net->test(rreq[0], &done, &size), ncclSuccess);
    }
    ck_assert(done);
    ck_assert_int_eq(size, SZ);
    ck_assert_msg(memcmp(s, r, SZ) == 0, "the message sent before the close arrived corrupted");
    ck_assert_int_eq(settle(rreq[1], &done), ncclRemoteError);
    ck_assert_ptr_nonnull(strstr(g_warn, "closed"));
    ck_assert_int_eq(g_net->deregMr(p.rc, rmh), ncclSuccess);
    ck_assert_int_eq(g_net->closeRecv(p.rc), ncclSuccess);
    ck_assert_int_eq(g_net->closeListen(p.lc), ncclSuccess);
    free(s);
    free(r);
}
END_TEST

/* The older tables end to end: v11 (per-comm init) and v10 (process-wide init). */
START_TEST(test_v11_v10)
{
    const ncclNet_v11_t *v11 = sym("ncclNetPlugin_v11");
    const ncclNet_v10_t *v10 = sym("ncclNetPlugin_v10");
    ncclNetCommConfig_v11_t cfg = {.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF};
    ncclNetCommConfig_v10_t cfg10 = {.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF};
    char handle[NCCL_NET_HANDLE_MAXSIZE] = {0};
    void *ctx = NULL;
    double end = now() + POLL_SECONDS;
    pair_t p = {0};

    /* v11 through the same helpers: the function members have the v12 shapes. */
    ck_assert_int_eq(v11->init(&ctx, 9, &cfg, test_logger, NULL), ncclSuccess);
    pair_open((const ncclNet_v12_t *)v11, ctx, ctx, &p, 0);
    check_xfer((const ncclNet_v12_t *)v11, &p, 4097, 0);
    pair_close((const ncclNet_v12_t *)v11, &p);
    ck_assert_int_eq(v11->finalize(ctx), ncclSuccess);

    memset(&p, 0, sizeof(p));
    ck_assert_int_eq(v10->init(test_logger, NULL), ncclSuccess);
    ck_assert_int_eq(v10->listen(0, handle, &p.lc), ncclSuccess);
    while ((!p.sc || !p.rc) && now() < end) {
        if (!p.sc) {
            ck_assert_int_eq(v10->connect(0, &cfg10, handle, &p.sc, NULL), ncclSuccess);
        }
        if (!p.rc) {
            ck_assert_int_eq(v10->accept(p.lc, &p.rc, NULL), ncclSuccess);
        }
    }
    ck_assert(p.sc && p.rc);
    /* isend/irecv/test/close/regMr of v10 have the v12 shapes as well. */
    check_xfer((const ncclNet_v12_t *)(const void *)v10, &p, 1 << 20, 0);
    pair_close((const ncclNet_v12_t *)(const void *)v10, &p);
}
END_TEST

/* Two processes: the child receives and echoes, over the real provider path. */
START_TEST(test_two_processes)
{
    int to_child[2], to_parent[2], status = 0;
    char h1[NCCL_NET_HANDLE_MAXSIZE], h2[NCCL_NET_HANDLE_MAXSIZE];
    pid_t pid;

    ck_assert_int_eq(pipe(to_child), 0);
    ck_assert_int_eq(pipe(to_parent), 0);
    /* Fork before anything touches libfabric (this test case has no fixture). */
    pid = fork();
    ck_assert_int_ge(pid, 0);
    setup();
    {
        int child = pid == 0;
        pair_t in = {0}, out = {0};
        double end = now() + POLL_SECONDS;

        /* Each side listens for its incoming connection and sends the handle over. */
        ck_assert_int_eq(g_net->listen(g_ctx, 0, child ? h1 : h2, &in.lc), ncclSuccess);
        ck_assert_int_eq(
            write(child ? to_parent[1] : to_child[1], child ? h1 : h2, NCCL_NET_HANDLE_MAXSIZE),
            NCCL_NET_HANDLE_MAXSIZE);
        ck_assert_int_eq(
            read(child ? to_child[0] : to_parent[0], child ? h2 : h1, NCCL_NET_HANDLE_MAXSIZE),
            NCCL_NET_HANDLE_MAXSIZE);
        while ((!out.sc || !in.rc) && now() < end) {
            if (!out.sc) {
                ck_assert_int_eq(g_net->connect(g_ctx, 0, child ? h2 : h1, &out.sc, NULL),
                                 ncclSuccess);
            }
            if (!in.rc) {
                ck_assert_int_eq(g_net->accept(in.lc, &in.rc, NULL), ncclSuccess);
            }
        }
        ck_assert(out.sc && in.rc);
        /* pair_t views for xfer: send on out.sc, receive on in.rc. */
        {
            pair_t io = {.sc = out.sc, .rc = in.rc};
            for (size_t i = 0; i < sizeof(g_sizes) / sizeof(g_sizes[0]); i++) {
                check_xfer(g_net, &io, g_sizes[i], 0);
            }
        }
        ck_assert_int_eq(g_net->closeSend(out.sc), ncclSuccess);
        ck_assert_int_eq(g_net->closeRecv(in.rc), ncclSuccess);
        ck_assert_int_eq(g_net->closeListen(in.lc), ncclSuccess);
        if (child) {
            teardown();
            _exit(0);
        }
    }
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed (%#x)", status);
    teardown();
}
END_TEST

/* Once connect returned a comm, the listener's accept completes even if the connecting
 * process never calls the plugin again (NCCL's setup may go straight to a barrier): its
 * connection request has left by then. The connecting child is silent from the moment it
 * holds the comm while the parent keeps accepting; with a provider that moves data only
 * when called (tcp: even the TCP connection is made by the caller's progress), a connect
 * that returned before its request left would leave accept waiting forever. */
START_TEST(test_connect_then_silent)
{
    int to_child[2], status = 0;
    char h[NCCL_NET_HANDLE_MAXSIZE], byte = 0;
    pid_t pid;

    ck_assert_int_eq(pipe(to_child), 0);
    pid = fork(); /* before anything touches libfabric (no fixture) */
    ck_assert_int_ge(pid, 0);
    setup();
    if (pid == 0) {
        void *sc = NULL;
        double end = now() + POLL_SECONDS;
        close(to_child[1]);
        ck_assert_int_eq(read(to_child[0], h, sizeof(h)), (ssize_t)sizeof(h));
        while (sc == NULL && now() < end) {
            ck_assert_int_eq(g_net->connect(g_ctx, 0, h, &sc, NULL), ncclSuccess);
        }
        ck_assert_ptr_nonnull(sc);
        /* Silent until the parent is done (its end of the pipe: a byte, or EOF). */
        (void)read(to_child[0], &byte, 1);
        ck_assert_int_eq(g_net->closeSend(sc), ncclSuccess);
        teardown();
        _exit(0);
    }
    close(to_child[0]);
    void *lc = NULL, *rc = NULL;
    ck_assert_int_eq(g_net->listen(g_ctx, 0, h, &lc), ncclSuccess);
    ck_assert_int_eq(write(to_child[1], h, sizeof(h)), (ssize_t)sizeof(h));
    double end = now() + POLL_SECONDS;
    while (rc == NULL && now() < end) {
        ck_assert_int_eq(g_net->accept(lc, &rc, NULL), ncclSuccess);
    }
    close(to_child[1]); /* the child may finish */
    ck_assert_msg(rc != NULL, "accept did not complete while the connecting process was silent");
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed (%#x)", status);
    ck_assert_int_eq(g_net->closeRecv(rc), ncclSuccess);
    ck_assert_int_eq(g_net->closeListen(lc), ncclSuccess);
    teardown();
}
END_TEST

/* The name of the shm region (in /dev/shm) that a live process `pid` made, or "" when it
 * made none that net-ofi knows how to find. */
static void shm_region_of(pid_t pid, char *name, size_t len)
{
    char prefix[32];
    DIR *d = opendir("/dev/shm");
    struct dirent *e;

    name[0] = '\0';
    snprintf(prefix, sizeof(prefix), "%d", (int)pid);
    while (d != NULL && (e = readdir(d)) != NULL) {
        size_t n = strlen(prefix);
        if (strncmp(e->d_name, prefix, n) == 0 && (e->d_name[n] == ':' || e->d_name[n] == '-')) {
            snprintf(name, len, "%s", e->d_name);
        }
    }
    if (d != NULL) {
        closedir(d);
    }
}

/* libfabric's shm provider names its region after the process id by default, and a
 * region left in /dev/shm by a process that died without closing its endpoint makes
 * fi_enable fail with EBUSY in a later process that gets the same pid (while the pid the
 * region records is alive). Stage exactly that: a live child's region renamed after our
 * pid, before our first endpoint. Our endpoint must still open. */
START_TEST(test_shm_stale_region)
{
    const char *prov = getenv("FI_PROVIDER");
    int to_child[2], to_parent[2], status = 0;
    char region[256], stale[300], from[300], byte = 0;
    pair_t p;
    pid_t pid;

    if (prov == NULL || strcmp(prov, "shm") != 0) {
        return; /* only shm names regions after the process */
    }
    ck_assert_int_eq(pipe(to_child), 0);
    ck_assert_int_eq(pipe(to_parent), 0);
    pid = fork(); /* before anything touches libfabric: this case has no fixture */
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        void *lc = NULL;
        char handle[NCCL_NET_HANDLE_MAXSIZE];

        setup();
        ck_assert_int_eq(g_net->listen(g_ctx, 0, handle, &lc), ncclSuccess);
        ck_assert_int_eq(write(to_parent[1], "r", 1), 1);
        ck_assert_int_eq(read(to_child[0], &byte, 1), 1); /* alive until the parent is done */
        ck_assert_int_eq(g_net->closeListen(lc), ncclSuccess);
        teardown();
        _exit(0);
    }
    ck_assert_int_eq(read(to_parent[0], &byte, 1), 1);
    shm_region_of(pid, region, sizeof(region));
    if (region[0] == '\0') {
        fprintf(stderr, "skipped: no shm region of process %d found in /dev/shm\n", (int)pid);
    } else {
        snprintf(from, sizeof(from), "/dev/shm/%s", region);
        snprintf(stale, sizeof(stale), "/dev/shm/%d:%d:0", (int)getpid(), (int)getuid());
        ck_assert_int_eq(rename(from, stale), 0);
    }
    setup();
    pair_open(g_net, g_ctx, g_ctx, &p, 0);
    check_xfer(g_net, &p, 4097, 0);
    pair_close(g_net, &p);
    teardown();
    ck_assert_int_eq(write(to_child[1], "d", 1), 1);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed (%#x)", status);
    if (region[0] != '\0') {
        (void)unlink(stale);
    }
}
END_TEST

/* Failing inits name what they found: no fixture, the knobs go in before init. */
static void expect_init_failure(const char *needle)
{
    ncclNetCommConfig_v12_t cfg = {.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF};
    const ncclNet_v12_t *net = sym("ncclNetPlugin_v12");
    void *ctx = NULL;

    g_warn[0] = '\0';
    ck_assert_int_ne(net->init(&ctx, 1, &cfg, test_logger, NULL), ncclSuccess);
    ck_assert_msg(strstr(g_warn, needle) != NULL, "expected '%s' in: %s", needle, g_warn);
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
    ck_assert_ptr_nonnull(strstr(g_warn, "nosuchprovider"));
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
    ck_assert_msg(strstr(g_warn, "lacks FI_EP_RDM") != NULL ||
                      strstr(g_warn, "offers no provider at all") != NULL,
                  "unexpected message: %s", g_warn);
}
END_TEST

static Suite *netofi_suite(void)
{
    Suite *s = suite_create("net-ofi");
    TCase *tc = tcase_create("basic");
    TCase *data = tcase_create("data");
    TCase *split = tcase_create("split");
    TCase *mr = tcase_create("mr_local");
    TCase *err = tcase_create("no_fixture");
    size_t nsizes = sizeof(g_sizes) / sizeof(g_sizes[0]);

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, TEST_TIMEOUT);
    tcase_add_test(tc, test_exports);
    tcase_add_test(tc, test_properties);
    tcase_add_test(tc, test_connect_orders);
    tcase_add_test(tc, test_multi_accept);
    tcase_add_test(tc, test_grouped_irecv_refused);
    tcase_add_test(tc, test_close_outstanding);
    tcase_add_test(tc, test_v11_v10);
    tcase_add_test(tc, test_two_contexts);
    suite_add_tcase(s, tc);

    tcase_add_checked_fixture(data, setup, teardown);
    tcase_set_timeout(data, TEST_TIMEOUT);
    tcase_add_loop_test(data, test_sizes, 0, (int)nsizes);
    tcase_add_test(data, test_outstanding);
    tcase_add_loop_test(data, test_close_mid_message, 0, 2);
    tcase_add_test(data, test_peer_close_fails_pending);
    tcase_add_test(data, test_peer_close_after_send);
    tcase_add_loop_test(data, test_truncation, 0, 4);
    suite_add_tcase(s, data);

    tcase_add_checked_fixture(split, setup_split, teardown);
    tcase_set_timeout(split, TEST_TIMEOUT);
    tcase_add_test(split, test_split);
    tcase_add_loop_test(split, test_truncation, 0, 4);
    suite_add_tcase(s, split);

    tcase_add_checked_fixture(mr, setup_mr_local, teardown);
    tcase_set_timeout(mr, TEST_TIMEOUT);
    tcase_add_test(mr, test_mr_local);
    tcase_add_test(mr, test_outstanding);
    suite_add_tcase(s, mr);

    tcase_set_timeout(err, TEST_TIMEOUT);
    tcase_add_test(err, test_two_processes);    /* no fixture: it forks first */
    tcase_add_test(err, test_connect_then_silent); /* forks first too */
    tcase_add_test(err, test_shm_stale_region); /* forks first too */
    tcase_add_test(err, test_err_no_libfabric);
    tcase_add_test(err, test_err_no_provider);
    tcase_add_test(err, test_err_excluded);
    tcase_add_test(err, test_err_fi_provider);
    tcase_add_test(err, test_err_no_capable_provider);
    suite_add_tcase(s, err);
    return s;
}

int main(int argc, char **argv)
{
    SRunner *sr;
    int failed;

    if (argc < 2) {
        fprintf(stderr, "usage: %s path/to/libnccl-net-ofi.so\n", argv[0]);
        return 2;
    }
    g_path = argv[1];
    sr = srunner_create(netofi_suite());
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
