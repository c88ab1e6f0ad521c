/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The harness of check_netofi: the plugin, loaded from nt_plugin_path with dlopen as a core
 * loads it (once per test process: Check forks one per test), the fixture that initializes
 * its v12 table, the logger that keeps its WARN lines for tests to search, and the helpers
 * that open a connection and move a message through it. Transfers drive both sides from
 * one thread: every loop polls the receive and the send, which is all the plugin needs
 * (its endpoint is shared by the process).
 */
#include <check.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "netofi_test_util.h"
#include "plugin_api/net/net.h"

const char *nt_plugin_path;
const ncclNet_v12_t *nt_net;
void *nt_ctx;
char nt_warn[8192];
const size_t nt_sizes[NT_NSIZES] = {0, 1, 4097, 1 << 20, 64 << 20};

static void *g_dl;

void nt_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
               const char *fmt, ...)
{
    char buf[2048];
    va_list ap;

    (void)flags;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (level == NCCL_LOG_WARN) {
        size_t len = strlen(nt_warn);
        snprintf(nt_warn + len, sizeof(nt_warn) - len, "%s\n", buf);
        fprintf(stderr, "WARN %s:%d %s\n", file, line, buf);
    } else if (getenv("NETOFI_TEST_VERBOSE") != NULL) {
        fprintf(stderr, "INFO %s:%d %s\n", file, line, buf);
    }
}

double nt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void *nt_sym(const char *name)
{
    if (g_dl == NULL) {
        g_dl = dlopen(nt_plugin_path, RTLD_NOW | RTLD_LOCAL);
        ck_assert_msg(g_dl != NULL, "dlopen %s: %s", nt_plugin_path, dlerror());
    }
    return dlsym(g_dl, name);
}

void nt_setup(void)
{
    ncclNetCommConfig_v12_t cfg = {.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF};
    int ndev = 0;

    nt_net = nt_sym("ncclNetPlugin_v12");
    ck_assert_ptr_nonnull(nt_net);
    ck_assert_int_eq(nt_net->init(&nt_ctx, 0x1234, &cfg, nt_logger, NULL), ncclSuccess);
    ck_assert_int_eq(nt_net->devices(&ndev), ncclSuccess);
    ck_assert_int_ge(ndev, 1);
}

void nt_teardown(void)
{
    if (nt_ctx != NULL) {
        ck_assert_int_eq(nt_net->finalize(nt_ctx), ncclSuccess);
        nt_ctx = NULL;
    }
}

void nt_pair_open(const ncclNet_v12_t *net, void *sctx, void *rctx, nt_pair_t *p, int connect_first)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE] = {0};
    double end = nt_now() + NT_POLL_SECONDS;

    memset(p, 0, sizeof(*p));
    ck_assert_int_eq(net->listen(rctx, 0, handle, &p->lc), ncclSuccess);
    ck_assert_ptr_nonnull(p->lc);
    while (connect_first && p->sc == NULL && nt_now() < end) {
        ck_assert_int_eq(net->connect(sctx, 0, handle, &p->sc, NULL), ncclSuccess);
    }
    while ((p->sc == NULL || p->rc == NULL) && nt_now() < end) {
        if (p->rc == NULL) {
            ck_assert_int_eq(net->accept(p->lc, &p->rc, NULL), ncclSuccess);
        }
        if (p->sc == NULL) {
            ck_assert_int_eq(net->connect(sctx, 0, handle, &p->sc, NULL), ncclSuccess);
        }
    }
    ck_assert_msg(p->sc != NULL && p->rc != NULL, "connect/accept did not finish");
}

void nt_pair_close(const ncclNet_v12_t *net, nt_pair_t *p)
{
    ck_assert_int_eq(net->closeSend(p->sc), ncclSuccess);
    ck_assert_int_eq(net->closeRecv(p->rc), ncclSuccess);
    ck_assert_int_eq(net->closeListen(p->lc), ncclSuccess);
}

void nt_fill(uint8_t *buf, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        buf[i] = (uint8_t)((i * 131u) ^ (i >> 11) ^ (seed * 29u));
    }
}

/* Send size bytes into a receive of capacity cap, polling both; returns the receive's
 * result and its reported size. */
ncclResult_t nt_xfer(const ncclNet_v12_t *net, nt_pair_t *p, void *sbuf, size_t size, void *rbuf,
                     size_t cap, int *rsize_p)
{
    void *smh = NULL, *rmh = NULL, *sreq = NULL, *rreq = NULL;
    int sdone = 0, rdone = 0, ssize = -1, tag = 7;
    ncclResult_t res = ncclSuccess;
    double end = nt_now() + NT_POLL_SECONDS;

    ck_assert_int_eq(net->regMr(p->sc, sbuf, size ? size : 1, NCCL_PTR_HOST, &smh), ncclSuccess);
    ck_assert_int_eq(net->regMr(p->rc, rbuf, cap ? cap : 1, NCCL_PTR_HOST, &rmh), ncclSuccess);
    *rsize_p = -1;
    while ((!sdone || !rdone) && nt_now() < end) {
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
void nt_check_xfer(const ncclNet_v12_t *net, nt_pair_t *p, size_t size, size_t extra)
{
    uint8_t *s = malloc(size + 1), *r = malloc(size + extra + 1);
    int got = -1;

    ck_assert(s != NULL && r != NULL);
    nt_fill(s, size, (unsigned)size);
    memset(r, 0xee, size + extra + 1);
    ck_assert_int_eq(nt_xfer(net, p, s, size, r, size + extra, &got), ncclSuccess);
    ck_assert_int_eq(got, (int)size);
    ck_assert_msg(memcmp(s, r, size) == 0, "%zu-byte message arrived corrupted", size);
    ck_assert_msg(r[size] == (extra ? 0xee : r[size]), "bytes past the message were written");
    free(s);
    free(r);
}
