/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ncclSetEncryption (NCCL 2.32): TLS 1.3 on Braid's own connections, 3 ranks as processes
 * over the socket plugin (the environment of the ctest entry turns shm and p2p off, and
 * failover's acknowledgement sockets are on by default), the root in this process.
 *   all          every process has the key: AllGather and AllReduce exact, and not one
 *                byte of the data (collectives over the socket plugin, a put over the
 *                bootstrap) or of the host name (when it has 8 characters or more, so that
 *                ciphertext cannot hold it by chance) leaves any process in clear: send and
 *                sendmsg are interposed here (the library and the dlopen'ed plugin bind to
 *                these), and every TCP write is searched
 *   clear        the control: the same run with TLS off must show the data in clear, or
 *                the search above could not fail
 *   off_rank     rank 1 turns TLS off: init fails on every rank within the bootstrap
 *                timeout, rank 1's error says TLS
 *   wrong_key    rank 2 has another key: the same
 *   cert         BRAID_TLS_CERT / _KEY / _CA (certificates made here, P-256, one authority):
 *                the calls exact, nothing in clear
 *   cert_wrong_ca  rank 2's certificate comes from another authority: refused, its error
 *                says TLS
 */

#include <check.h>
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nccl.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "brt_launch.h"

#define NRANKS 3
#define COUNT 65536 /* bytes per rank: several socket-plugin chunks */

static const char key_a[] = "braid-test-key-A-0123456789abcdef0123456789";
static const char key_b[] = "braid-test-key-B-0123456789abcdef0123456789";
static const char marker[] = "PLAINTEXT-MARKER"; /* 16 bytes, repeated through the data */

/* ---- every TCP write of this process ---- */

static _Atomic int seen_marker, seen_host;
static _Atomic uint64_t tcp_bytes;
static char host[256];

static int is_tcp(int fd)
{
    struct sockaddr_storage a;
    socklen_t len = sizeof(a);
    return getsockname(fd, (struct sockaddr *)&a, &len) == 0 &&
           (a.ss_family == AF_INET || a.ss_family == AF_INET6);
}

static void inspect(int fd, const void *buf, size_t len)
{
    if (len == 0 || !is_tcp(fd)) {
        return;
    }
    atomic_fetch_add(&tcp_bytes, len);
    if (memmem(buf, len, marker, 16) != NULL) {
        atomic_store(&seen_marker, 1);
    }
    if (strlen(host) >= 8 && memmem(buf, len, host, strlen(host)) != NULL) {
        atomic_store(&seen_host, 1);
    }
}

__attribute__((visibility("default"))) ssize_t send(int fd, const void *buf, size_t len, int flags)
{
    static ssize_t (*real)(int, const void *, size_t, int);
    if (real == NULL) {
        real = (ssize_t(*)(int, const void *, size_t, int))dlsym(RTLD_NEXT, "send");
    }
    inspect(fd, buf, len);
    return real(fd, buf, len, flags);
}

__attribute__((visibility("default"))) ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
    static ssize_t (*real)(int, const struct msghdr *, int);
    if (real == NULL) {
        real = (ssize_t(*)(int, const struct msghdr *, int))dlsym(RTLD_NEXT, "sendmsg");
    }
    for (size_t i = 0; i < msg->msg_iovlen; i++) {
        inspect(fd, msg->msg_iov[i].iov_base, msg->msg_iov[i].iov_len);
    }
    return real(fd, msg, flags);
}

/* ---- ranks ---- */

typedef struct {
    const char *key[NRANKS]; /* per rank: its key, or NULL for TLS off */
    int expect_ok;
    int cert[NRANKS]; /* certificate mode: 1 or 2, the authority of the rank's certificate */
} tls_case_t;

/* ---- certificates ---- */

static char cert_dir[64];

static X509 *cert_make(EVP_PKEY *key, const char *cn, X509 *issuer, EVP_PKEY *issuer_key)
{
    static long serial = 1;
    X509 *x = X509_new();
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), serial++);
    X509_gmtime_adj(X509_getm_notBefore(x), -3600);
    X509_gmtime_adj(X509_getm_notAfter(x), 86400);
    X509_set_pubkey(x, key);
    X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_ASC,
                               (const unsigned char *)cn, -1, -1, 0);
    X509_set_issuer_name(x, X509_get_subject_name(issuer != NULL ? issuer : x));
    if (issuer == NULL) { /* an authority */
        X509_EXTENSION *e =
            X509V3_EXT_conf_nid(NULL, NULL, NID_basic_constraints, "critical,CA:TRUE");
        X509_add_ext(x, e, -1);
        X509_EXTENSION_free(e);
    }
    X509_sign(x, issuer_key != NULL ? issuer_key : key, EVP_sha256());
    return x;
}

static void pem_write(const char *name, X509 *x, EVP_PKEY *key)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/%s", cert_dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert(x != NULL ? PEM_write_X509(f, x)
                        : PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL));
    fclose(f);
}

/* Two authorities (ca1.pem, ca2.pem), each with one certificate and key (cert1.pem and
 * key1.pem, cert2.pem and key2.pem). */
static void certs_make(void)
{
    snprintf(cert_dir, sizeof(cert_dir), "/tmp/braid-tls-test-%d", (int)getpid());
    ck_assert_int_eq(mkdir(cert_dir, 0700), 0);
    for (int a = 1; a <= 2; a++) {
        char name[32];
        EVP_PKEY *ca_key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
        EVP_PKEY *key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
        ck_assert(ca_key != NULL && key != NULL);
        X509 *ca =
            cert_make(ca_key, a == 1 ? "braid test CA one" : "braid test CA two", NULL, NULL);
        X509 *leaf = cert_make(key, "braid test rank", ca, ca_key);
        snprintf(name, sizeof(name), "ca%d.pem", a);
        pem_write(name, ca, NULL);
        snprintf(name, sizeof(name), "cert%d.pem", a);
        pem_write(name, leaf, NULL);
        snprintf(name, sizeof(name), "key%d.pem", a);
        pem_write(name, NULL, key);
        X509_free(ca);
        X509_free(leaf);
        EVP_PKEY_free(ca_key);
        EVP_PKEY_free(key);
    }
}

static void certs_remove(void)
{
    char path[128];
    static const char *const names[] = {"ca1.pem", "cert1.pem", "key1.pem",
                                        "ca2.pem", "cert2.pem", "key2.pem"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", cert_dir, names[i]);
        unlink(path);
    }
    rmdir(cert_dir);
}

/* BRAID_TLS_*: the certificate of authority a, trusting authority 1 (the job's). */
static void certs_use(int a)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/cert%d.pem", cert_dir, a);
    setenv("BRAID_TLS_CERT", path, 1);
    snprintf(path, sizeof(path), "%s/key%d.pem", cert_dir, a);
    setenv("BRAID_TLS_KEY", path, 1);
    snprintf(path, sizeof(path), "%s/ca1.pem", cert_dir);
    setenv("BRAID_TLS_CA", path, 1);
}

static ncclResult_t set_key(const char *key)
{
    ncclEncryptionConfig_t enc = NCCL_ENCRYPTION_CONFIG_INITIALIZER;
    if (key != NULL) {
        enc.mode = NCCL_ENCRYPTION_MODE_PSK;
        enc.psk = key;
    }
    return ncclSetEncryption(&enc);
}

static int run_calls(brt_rank_ctx_t *ctx, ncclComm_t comm)
{
    unsigned char *in = malloc(COUNT), *out = malloc((size_t)COUNT * NRANKS);
    int32_t x[1000];
    int bad = 0;
    for (size_t i = 0; i < COUNT; i++) {
        in[i] = (unsigned char)marker[i % 16];
    }
    in[0] = (unsigned char)ctx->rank; /* each rank's block recognisable */
    brt_doing(ctx, "AllGather");
    ncclResult_t res = ncclAllGather(in, out, COUNT, ncclUint8, comm, NULL);
    for (int r = 0; res == ncclSuccess && r < NRANKS && !bad; r++) {
        const unsigned char *b = out + (size_t)r * COUNT;
        bad = b[0] != (unsigned char)r || memcmp(b + 1, in + 1, COUNT - 1) != 0;
        if (bad) {
            brt_fail(ctx, "AllGather: rank %d's block is wrong", r);
        }
    }
    for (int i = 0; i < 1000; i++) {
        x[i] = (ctx->rank + 1) * i;
    }
    brt_doing(ctx, "AllReduce");
    res = res != ncclSuccess ? res : ncclAllReduce(x, x, 1000, ncclInt32, ncclSum, comm, NULL);
    for (int i = 0; res == ncclSuccess && i < 1000 && !bad; i++) {
        if (x[i] != NRANKS * (NRANKS + 1) / 2 * i) {
            brt_fail(ctx, "AllReduce [%d] = %d, not %d", i, x[i], NRANKS * (NRANKS + 1) / 2 * i);
            bad = 1;
        }
    }
    /* One-sided: the payload of a put travels over the bootstrap connections. */
    char *wbuf = calloc(1, 4096);
    ncclWindow_t win;
    int next = (ctx->rank + 1) % NRANKS, prev = (ctx->rank + NRANKS - 1) % NRANKS;
    ncclWaitSignalDesc_t desc = {1, prev, 0, 0};
    brt_doing(ctx, "put");
    res =
        res != ncclSuccess ? res : ncclCommWindowRegister(comm, wbuf, 4096, &win, NCCL_WIN_DEFAULT);
    if (res == ncclSuccess) {
        res = ncclPutSignal(in, 4096, ncclUint8, next, win, 0, 0, 0, 0, comm, NULL);
        res = res != ncclSuccess ? res : ncclWaitSignal(1, &desc, comm, NULL);
        if (res == ncclSuccess && !bad &&
            ((unsigned char)wbuf[0] != (unsigned char)prev || memcmp(wbuf + 1, in + 1, 4095))) {
            brt_fail(ctx, "the put from rank %d did not land whole", prev);
            bad = 1;
        }
        ncclCommWindowDeregister(comm, win);
    }
    if (res != ncclSuccess) {
        brt_fail(ctx, "a call failed (%d): %s", (int)res, ncclGetLastError(comm));
        bad = 1;
    }
    free(wbuf);
    free(in);
    free(out);
    return bad;
}

static int body_tls(brt_rank_ctx_t *ctx)
{
    const tls_case_t *tc = ctx->arg;
    ncclComm_t comm = NULL;
    int bad = 0;

    gethostname(host, sizeof(host));
    atomic_store(&seen_marker, 0);
    atomic_store(&seen_host, 0);
    atomic_store(&tcp_bytes, 0);
    if (tc->cert[ctx->rank] != 0) {
        certs_use(tc->cert[ctx->rank]); /* before this process's first NCCL call */
    } else if (set_key(tc->key[ctx->rank]) != ncclSuccess) {
        brt_fail(ctx, "ncclSetEncryption: %s", ncclGetLastError(NULL));
        return 1;
    }
    brt_doing(ctx, "init");
    ncclResult_t res = ncclCommInitRank(&comm, ctx->nranks, ctx->id, ctx->rank);
    if (!tc->expect_ok) {
        const char *msg = ncclGetLastError(NULL);
        if (res == ncclSuccess) {
            brt_fail(ctx, "init succeeded with mismatched TLS");
            ncclCommDestroy(comm);
            return 1;
        }
        /* The rank that differs must be told it is about TLS. */
        int odd = tc->key[ctx->rank] != tc->key[0] || tc->cert[ctx->rank] != tc->cert[0];
        if (odd && strstr(msg, "TLS") == NULL) {
            brt_fail(ctx, "init failed, but its error does not say TLS: %s", msg);
            return 1;
        }
        return 0;
    }
    if (res != ncclSuccess) {
        brt_fail(ctx, "init: %s", ncclGetLastError(NULL));
        return 1;
    }
    bad = run_calls(ctx, comm);
    ncclCommDestroy(comm);
    int tls = tc->key[ctx->rank] != NULL || tc->cert[ctx->rank] != 0;
    if (atomic_load(&tcp_bytes) == 0) {
        brt_fail(ctx, "no TCP byte seen: the interposed send is not in use");
        bad = 1;
    } else if (tls && (atomic_load(&seen_marker) || atomic_load(&seen_host))) {
        brt_fail(ctx, "with TLS on, %s travelled in clear",
                 atomic_load(&seen_marker) ? "the data" : "the host name");
        bad = 1;
    } else if (!tls && !atomic_load(&seen_marker)) {
        brt_fail(ctx, "with TLS off the data never showed in clear: the search is blind");
        bad = 1;
    }
    return bad;
}

static void run(const tls_case_t *tc, double timeout)
{
    char out[8192];
    /* The root of the unique id lives in this process: it takes rank 0's key or
     * certificate. Certificates are parameters, read at this process's first NCCL call:
     * none is made before the ranks are forked, so each reads its own. */
    if (tc->cert[0] != 0) {
        certs_make();
        certs_use(tc->cert[0]);
    } else {
        ck_assert_int_eq(set_key(tc->key[0]), ncclSuccess);
    }
    int bad =
        brt_procs_run(NRANKS, body_tls, (void *)tc, timeout * brt_time_scale(), out, sizeof(out));
    if (tc->cert[0] != 0) {
        certs_remove();
    }
    ck_assert_msg(!bad, "%s", brt_clip(out, 3000));
}

START_TEST(test_tls_all)
{
    static const tls_case_t tc = {{key_a, key_a, key_a}, 1, {0, 0, 0}};
    run(&tc, 60);
}
END_TEST

START_TEST(test_tls_clear)
{
    static const tls_case_t tc = {{NULL, NULL, NULL}, 1, {0, 0, 0}};
    run(&tc, 60);
}
END_TEST

START_TEST(test_tls_off_rank)
{
    static const tls_case_t tc = {{key_a, NULL, key_a}, 0, {0, 0, 0}};
    run(&tc, 60);
}
END_TEST

START_TEST(test_tls_wrong_key)
{
    static const tls_case_t tc = {{key_a, key_a, key_b}, 0, {0, 0, 0}};
    run(&tc, 60);
}
END_TEST

START_TEST(test_tls_cert)
{
    static const tls_case_t tc = {{NULL, NULL, NULL}, 1, {1, 1, 1}};
    run(&tc, 60);
}
END_TEST

START_TEST(test_tls_cert_wrong_ca)
{
    static const tls_case_t tc = {{NULL, NULL, NULL}, 0, {1, 1, 2}};
    run(&tc, 60);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("api_tls");
    TCase *tc = tcase_create("tls");
    tcase_set_timeout(tc, 90 * brt_time_scale());
    tcase_add_test(tc, test_tls_all);
    tcase_add_test(tc, test_tls_clear);
    tcase_add_test(tc, test_tls_off_rank);
    tcase_add_test(tc, test_tls_wrong_key);
    tcase_add_test(tc, test_tls_cert);
    tcase_add_test(tc, test_tls_cert_wrong_ca);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
