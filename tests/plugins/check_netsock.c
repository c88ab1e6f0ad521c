/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tests specific to the socket plugin (argv[1]: libnccl-net-socket.so), beyond the
 * conformance kit: interface selection (NCCL_SOCKET_IFNAME, NCCL_SOCKET_FAMILY), the
 * transport settings carried in the handle, the TCP user timeout of every socket, the
 * per-version properties wrappers, the exported symbol set, and a listener facing raw TCP
 * peers that do not speak the protocol. Each test sets its environment and then initializes
 * the plugin, which reads the environment once per process: keep Check's fork mode on (the
 * default).
 */
#include <arpa/inet.h>
#include <check.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "net_kit.h"
#include "netsock_handle.h"

#define TIMEOUT 20.0
#define MIB ((size_t)1 << 20)

static const char *plugin_path;

static void env_clear(void)
{
    unsetenv("NCCL_SOCKET_IFNAME");
    unsetenv("NCCL_SOCKET_FAMILY");
    unsetenv("NCCL_SOCKET_NTHREADS");
    unsetenv("NCCL_NSOCKS_PERTHREAD");
    unsetenv("BRAID_SOCKET_MIN_CHUNK");
    unsetenv("BRAID_SOCKET_INLINE_BYTES");
    unsetenv("BRAID_SOCKET_BUFSIZE");
    unsetenv("BRAID_SOCKET_USER_TIMEOUT");
    unsetenv("BRAID_SOCKET_KEEPALIVE");
}

/* Device names after init under the current environment; returns the count or -1. */
static int devices_named(char names[][64], int max)
{
    int ndev = 0;

    if (kit_init() != ncclSuccess) {
        return -1;
    }
    ck_assert_int_eq(kit_devices(&ndev), ncclSuccess);
    for (int d = 0; d < ndev && d < max; d++) {
        ncclNetProperties_v12_t p;
        ck_assert_int_eq(kit_properties(d, &p), ncclSuccess);
        snprintf(names[d], 64, "%s", p.name);
    }
    return ndev;
}

static int has_name(char names[][64], int n, const char *name)
{
    for (int i = 0; i < n; i++) {
        if (strcmp(names[i], name) == 0) {
            return 1;
        }
    }
    return 0;
}

START_TEST(test_ifname_exact_lo)
{
    char names[32][64];

    env_clear();
    setenv("NCCL_SOCKET_IFNAME", "=lo", 1);
    ck_assert_int_eq(devices_named(names, 32), 1);
    ck_assert_str_eq(names[0], "lo");
    kit_fini();
}
END_TEST

START_TEST(test_ifname_prefix_list)
{
    char names[32][64];
    int n;

    env_clear();
    setenv("NCCL_SOCKET_IFNAME", "nosuchif,l", 1);
    n = devices_named(names, 32);
    ck_assert_int_ge(n, 1);
    ck_assert(has_name(names, n, "lo"));
    kit_fini();
}
END_TEST

/* No interface matches: init fails, with a warning, rather than offering no device. */
START_TEST(test_ifname_no_match_fails_init)
{
    char names[32][64];

    env_clear();
    setenv("NCCL_SOCKET_IFNAME", "=l", 1);
    ck_assert_int_eq(devices_named(names, 32), -1);
    ck_assert_int_gt(kit_warn_count(), 0);
}
END_TEST

START_TEST(test_ifname_exclude)
{
    char names[32][64];
    int n;

    env_clear();
    setenv("NCCL_SOCKET_IFNAME", "^lo,docker", 1);
    n = devices_named(names, 32);
    if (n > 0) {
        ck_assert(!has_name(names, n, "lo"));
        kit_fini();
    }
}
END_TEST

/* Default selection: loopback only when nothing else qualifies. */
START_TEST(test_ifname_default)
{
    char names[32][64];
    int n;

    env_clear();
    n = devices_named(names, 32);
    ck_assert_int_ge(n, 1);
    if (has_name(names, n, "lo")) {
        ck_assert_int_eq(n, 1);
    }
    for (int i = 0; i < n; i++) {
        ck_assert_msg(strncmp(names[i], "docker", 6) != 0, "picked %s", names[i]);
    }
    kit_fini();
}
END_TEST

/* Listen on device 0 and return the decoded handle. */
static netsock_handle_t listen_handle(void **lc)
{
    char raw[NCCL_NET_HANDLE_MAXSIZE];
    netsock_handle_t h;

    ck_assert_int_eq(kit_listen(0, raw, lc), ncclSuccess);
    memcpy(&h, raw, sizeof(h));
    ck_assert_uint_eq(h.magic, NETSOCK_HANDLE_MAGIC);
    return h;
}

/* Connect to the listener lc (handle: its handle) until both sides have a comm. */
static void connect_pair(char *handle, void *lc, void **sc, void **rc)
{
    double end = kit_now() + TIMEOUT;

    *sc = *rc = NULL;
    while ((*sc == NULL || *rc == NULL) && kit_now() < end) {
        if (*sc == NULL) {
            ck_assert_int_eq(kit_connect(0, handle, sc), ncclSuccess);
        }
        if (*rc == NULL) {
            ck_assert_int_eq(kit_accept(lc, rc), ncclSuccess);
        }
    }
    ck_assert(*sc != NULL && *rc != NULL);
}

START_TEST(test_family)
{
    static const struct {
        const char *family;
        int af;
    } cases[] = {{"AF_INET", AF_INET}, {"AF_INET6", AF_INET6}};
    netsock_handle_t h;
    void *lc;

    env_clear();
    setenv("NCCL_SOCKET_IFNAME", "=lo", 1);
    setenv("NCCL_SOCKET_FAMILY", cases[_i].family, 1);
    if (kit_init() != ncclSuccess) {
        ck_assert_int_eq(cases[_i].af, AF_INET6); /* lo without ::1 */
        printf("no IPv6 loopback address: %s not tested\n", cases[_i].family);
        return;
    }
    h = listen_handle(&lc);
    ck_assert_int_eq(h.addr.sa.sa_family, cases[_i].af);
    ck_assert_int_eq(kit_close_listen(lc), ncclSuccess);
    kit_fini();
}
END_TEST

static const struct {
    const char *nthreads, *nsocks, *min_chunk, *inline_max;
    int want_threads, want_socks, want_warn;
} settings_cases[] = {
    {"4", "2", NULL, NULL, 4, 8, 0},
    {"16", "16", NULL, NULL, 16, 64, 1}, /* 256 sockets: clamped to 64 */
    {"99", NULL, NULL, NULL, 16, 16, 1}, /* above 16: 16, as NCCL */
    {"-5", NULL, NULL, NULL, 0, 0, 1},   /* negative: the default */
    {"0", "8", NULL, NULL, 0, 0, 0},     /* no helpers: no data sockets */
    {"2", "0", NULL, NULL, 0, 0, 0},
    {"-2", "-2", NULL, NULL, 0, 0, 0}, /* NCCL's "auto": the defaults */
    {"1", "1", "262144", "1024", 1, 1, 0},
    {"1", "1", "100", "1G", 1, 1, 1}, /* chunk below the 4 KiB floor: the default */
};

/* The listener's settings travel in the handle, clamped and validated. */
START_TEST(test_settings_in_handle)
{
    netsock_handle_t h;
    void *lc;

    env_clear();
    setenv("NCCL_SOCKET_IFNAME", "=lo", 1);
    if (settings_cases[_i].nthreads) {
        setenv("NCCL_SOCKET_NTHREADS", settings_cases[_i].nthreads, 1);
    }
    if (settings_cases[_i].nsocks) {
        setenv("NCCL_NSOCKS_PERTHREAD", settings_cases[_i].nsocks, 1);
    }
    if (settings_cases[_i].min_chunk) {
        setenv("BRAID_SOCKET_MIN_CHUNK", settings_cases[_i].min_chunk, 1);
    }
    if (settings_cases[_i].inline_max) {
        setenv("BRAID_SOCKET_INLINE_BYTES", settings_cases[_i].inline_max, 1);
    }
    ck_assert_int_eq(kit_init(), ncclSuccess);
    kit_warn_reset();
    h = listen_handle(&lc);
    ck_assert_int_eq(h.nthreads, settings_cases[_i].want_threads);
    ck_assert_int_eq(h.nsocks, settings_cases[_i].want_socks);
    ck_assert_int_ge(h.min_chunk, 4096);
    if (settings_cases[_i].min_chunk && !settings_cases[_i].want_warn) {
        ck_assert_int_eq(h.min_chunk, atoi(settings_cases[_i].min_chunk));
        ck_assert_int_eq((int)h.inline_max, atoi(settings_cases[_i].inline_max));
    }
    ck_assert_int_eq(kit_warn_count() > 0, settings_cases[_i].want_warn);
    ck_assert_int_eq(kit_close_listen(lc), ncclSuccess);
    kit_fini();
}
END_TEST

/* BRAID_SOCKET_USER_TIMEOUT reaches every TCP socket of a connection, both sides, data
 * sockets included; 0 (the default) leaves the kernel's (0), a negative value the default.
 * Every socket also has BRAID_SOCKET_KEEPALIVE's probes. */
static const struct {
    const char *value;
    unsigned want;
    int want_warn;
} user_timeout_cases[] = {{NULL, 0, 0}, {"1234", 1234, 0}, {"0", 0, 0}, {"-1", 0, 1}};

START_TEST(test_user_timeout_on_every_socket)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *lc = NULL, *sc = NULL, *rc = NULL;
    int nsockets = 0;

    env_clear();
    setenv("NCCL_SOCKET_IFNAME", "=lo", 1);
    setenv("NCCL_SOCKET_NTHREADS", "2", 1); /* data sockets too */
    if (user_timeout_cases[_i].value != NULL) {
        setenv("BRAID_SOCKET_USER_TIMEOUT", user_timeout_cases[_i].value, 1);
    }
    ck_assert_int_eq(kit_init(), ncclSuccess);
    kit_warn_reset();
    ck_assert_int_eq(kit_listen(0, handle, &lc), ncclSuccess);
    connect_pair(handle, lc, &sc, &rc);
    /* The plugin's sockets are the only TCP sockets of this forked test process. */
    for (int fd = 3; fd < 1024; fd++) {
        unsigned v = 0;
        socklen_t len = sizeof(v);
        if (getsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &v, &len) == 0) {
            ck_assert_msg(v == user_timeout_cases[_i].want, "fd %d: TCP_USER_TIMEOUT %u, not %u",
                          fd, v, user_timeout_cases[_i].want);
            /* BRAID_SOCKET_KEEPALIVE's default, 20 s: idle 10 s, then 5 probes 2 s apart. */
            int ka = 0, idle = 0, intvl = 0, cnt = 0;
            socklen_t ilen = sizeof(int);
            ck_assert_int_eq(getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &ka, &ilen), 0);
            ck_assert_int_eq(getsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, &ilen), 0);
            ck_assert_int_eq(getsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, &ilen), 0);
            ck_assert_int_eq(getsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, &ilen), 0);
            ck_assert_msg(ka == 1 && idle == 10 && intvl == 2 && cnt == 5,
                          "fd %d: keepalive %d idle %d interval %d count %d", fd, ka, idle, intvl,
                          cnt);
            nsockets++;
        }
    }
    /* listener, 2 x (control + 2 data sockets) */
    ck_assert_int_ge(nsockets, 7);
    ck_assert_int_eq(kit_warn_count() > 0, user_timeout_cases[_i].want_warn);
    ck_assert_int_eq(kit_close_send(sc), ncclSuccess);
    ck_assert_int_eq(kit_close_recv(rc), ncclSuccess);
    ck_assert_int_eq(kit_close_listen(lc), ncclSuccess);
    kit_fini();
}
END_TEST

/* Many threads and sockets: odd and large messages survive the chunking. */
START_TEST(test_many_sockets_transfer)
{
    static const size_t sizes[] = {64 * MIB + 4097, 3, 300000, 65536, 65537, 8 * MIB + 1};
    enum { N = sizeof(sizes) / sizeof(sizes[0]) };
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    unsigned char *sbuf[N], *rbuf[N];
    void *lc = NULL, *sc = NULL, *rc = NULL, *reqs[2 * N];
    int left = 2 * N, tag = 0;
    double end;

    env_clear();
    setenv("NCCL_SOCKET_IFNAME", "=lo", 1);
    setenv("NCCL_SOCKET_NTHREADS", "16", 1);
    setenv("NCCL_NSOCKS_PERTHREAD", "4", 1);
    setenv("BRAID_SOCKET_MIN_CHUNK", "4096", 1);
    ck_assert_int_eq(kit_init(), ncclSuccess);
    ck_assert_int_eq(kit_listen(0, handle, &lc), ncclSuccess);
    connect_pair(handle, lc, &sc, &rc);
    for (int i = 0; i < N; i++) {
        size_t cap = sizes[i];
        sbuf[i] = malloc(sizes[i]);
        rbuf[i] = calloc(1, sizes[i]);
        ck_assert(sbuf[i] != NULL && rbuf[i] != NULL);
        for (size_t k = 0; k < sizes[i]; k++) {
            sbuf[i][k] = (unsigned char)(k * 31 + (size_t)i + (k >> 12));
        }
        void *data = rbuf[i];
        ck_assert_int_eq(kit_irecv(rc, 1, &data, &cap, &tag, NULL, &reqs[2 * i]), ncclSuccess);
        ck_assert_int_eq(kit_isend(sc, sbuf[i], sizes[i], 0, NULL, &reqs[2 * i + 1]), ncclSuccess);
        ck_assert(reqs[2 * i] != NULL && reqs[2 * i + 1] != NULL);
    }
    end = kit_now() + 10 * TIMEOUT;
    while (left > 0) {
        for (int i = 0; i < 2 * N; i++) {
            int done = 0, size = -1;
            if (reqs[i] != NULL) {
                ck_assert_int_eq(kit_test(reqs[i], &done, &size), ncclSuccess);
                if (done) {
                    ck_assert_int_eq(size, (int)sizes[i / 2]);
                    reqs[i] = NULL;
                    left--;
                }
            }
        }
        ck_assert_msg(kit_now() < end, "%d requests not done", left);
        sched_yield();
    }
    for (int i = 0; i < N; i++) {
        ck_assert_msg(memcmp(sbuf[i], rbuf[i], sizes[i]) == 0, "message %d differs", i);
        free(sbuf[i]);
        free(rbuf[i]);
    }
    ck_assert_int_eq(kit_close_send(sc), ncclSuccess);
    ck_assert_int_eq(kit_close_recv(rc), ncclSuccess);
    ck_assert_int_eq(kit_close_listen(lc), ncclSuccess);
    kit_fini();
}
END_TEST

/* Every version's getProperties describes device 0 the same way, with the values this
 * plugin promises. */
START_TEST(test_properties_every_version)
{
    void *lib = dlopen(plugin_path, RTLD_NOW | RTLD_LOCAL);
    const ncclNet_v12_t *n12;
    const ncclNet_v11_t *n11;
    const ncclNet_v10_t *n10;
    ncclNetProperties_v12_t p12;
    ncclNetProperties_v11_t p11;
    ncclNetProperties_v10_t p10;
    ncclNetCommConfig_v12_t cfg = {.trafficClass = -1};
    void *ctx = NULL;

    env_clear();
    setenv("NCCL_SOCKET_IFNAME", "=lo", 1);
    ck_assert_ptr_nonnull(lib);
    n12 = dlsym(lib, "ncclNetPlugin_v12");
    n11 = dlsym(lib, "ncclNetPlugin_v11");
    n10 = dlsym(lib, "ncclNetPlugin_v10");
    ck_assert(n12 != NULL && n11 != NULL && n10 != NULL);
    ck_assert_str_eq(n12->name, "Socket");
    ck_assert_str_eq(n11->name, "Socket");
    ck_assert_str_eq(n10->name, "Socket");
    ck_assert_int_eq(n12->init(&ctx, 1, &cfg, NULL, NULL), ncclSuccess);
    ck_assert_int_eq(n10->init(NULL, NULL), ncclSuccess);
    memset(&p12, 0x55, sizeof(p12));
    ck_assert_int_eq(n12->getProperties(0, &p12), ncclSuccess);
    ck_assert_int_eq(n11->getProperties(0, &p11), ncclSuccess);
    ck_assert_int_eq(n10->getProperties(0, &p10), ncclSuccess);
    ck_assert_str_eq(p12.name, "lo");
    ck_assert_uint_eq(p12.guid, 0);
    ck_assert_int_eq(p12.ptrSupport, NCCL_PTR_HOST);
    ck_assert_int_eq(p12.regIsGlobal, 0);
    ck_assert_int_eq(p12.forceFlush, 0);
    ck_assert_int_gt(p12.speed, 0);
    ck_assert(p12.latency == 0.0f);
    ck_assert_int_eq(p12.maxComms, 65536);
    ck_assert_int_eq(p12.maxRecvs, 1);
    ck_assert_int_eq(p12.netDeviceType, NCCL_NET_DEVICE_HOST);
    ck_assert_int_eq(p12.vProps.ndevs, 1);
    ck_assert_int_eq(p12.vProps.devs[0], 0);
    ck_assert(p12.maxP2pBytes == NCCL_MAX_NET_SIZE_BYTES);
    ck_assert(p12.maxCollBytes == NCCL_MAX_NET_SIZE_BYTES);
    ck_assert_int_eq(p12.maxMultiRequestSize, 1);
    ck_assert_int_eq(p12.railId, -1);
    ck_assert_int_eq(p12.planeId, -1);
    /* The older layouts carry the same values at their own offsets. */
    ck_assert_str_eq(p11.name, p12.name);
    ck_assert_str_eq(p10.name, p12.name);
    ck_assert_int_eq(p11.speed, p12.speed);
    ck_assert_int_eq(p10.speed, p12.speed);
    ck_assert_int_eq(p11.maxRecvs, 1);
    ck_assert_int_eq(p10.maxRecvs, 1);
    ck_assert(p11.maxP2pBytes == p12.maxP2pBytes && p10.maxCollBytes == p12.maxCollBytes);
    ck_assert_int_eq(p11.maxMultiRequestSize, 1);
    ck_assert_int_eq(p10.vProps.ndevs, 1);
    ck_assert_int_eq(n12->finalize(ctx), ncclSuccess);
    /* Only the tables leave the library. */
    ck_assert_ptr_null(dlsym(lib, "netsock_isend"));
    ck_assert_ptr_null(dlsym(lib, "netsock_listen"));
    ck_assert_ptr_null(dlsym(lib, "br_plugin_logger"));
    ck_assert_ptr_null(dlsym(lib, "br_lite_param_int"));
    dlclose(lib);
}
END_TEST

/* A raw TCP peer: connect to the listener in handle h and send len bytes of data. */
static int raw_peer(const netsock_handle_t *h, const void *data, size_t len)
{
    int fd = socket(h->addr.sa.sa_family, SOCK_STREAM, 0);
    socklen_t alen = h->addr.sa.sa_family == AF_INET ? sizeof(h->addr.sin) : sizeof(h->addr.sin6);

    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(connect(fd, &h->addr.sa, alen), 0);
    if (len > 0) {
        ck_assert_int_eq(send(fd, data, len, MSG_NOSIGNAL), (ssize_t)len);
    }
    return fd;
}

/* Peers that do not speak the protocol, or stay silent, are dropped or ignored, and
 * the listener goes on to accept the real connection. */
START_TEST(test_listener_survives_strangers)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    netsock_handle_t h;
    void *lc = NULL, *sc = NULL, *rc = NULL;
    static const char junk[64] = "GET / HTTP/1.0\r\n\r\n";
    netsock_hello_t hello = {.magic = NETSOCK_HELLO_MAGIC, .version = NETSOCK_WIRE_VERSION};
    int silent, stranger, impostor;
    double end;

    env_clear();
    setenv("NCCL_SOCKET_IFNAME", "=lo", 1);
    ck_assert_int_eq(kit_init(), ncclSuccess);
    ck_assert_int_eq(kit_listen(0, handle, &lc), ncclSuccess);
    memcpy(&h, handle, sizeof(h));
    silent = raw_peer(&h, NULL, 0);
    stranger = raw_peer(&h, junk, sizeof(junk));
    hello.nsocks = h.nsocks;
    hello.secret = h.secret + 1; /* right protocol, wrong secret */
    impostor = raw_peer(&h, &hello, sizeof(hello));
    end = kit_now() + TIMEOUT;
    while (kit_warn_count() < 2 && kit_now() < end) {
        ck_assert_int_eq(kit_accept(lc, &rc), ncclSuccess);
        ck_assert_ptr_null(rc);
    }
    ck_assert_msg(strstr(kit_warn_text(), "protocol") != NULL, "%s", kit_warn_text());
    ck_assert_msg(strstr(kit_warn_text(), "secret") != NULL, "%s", kit_warn_text());
    ck_assert_msg(strstr(kit_warn_text(), "127.0.0.1:") != NULL, "%s", kit_warn_text());
    connect_pair(handle, lc, &sc, &rc);
    close(silent);
    close(stranger);
    close(impostor);
    ck_assert_int_eq(kit_close_send(sc), ncclSuccess);
    ck_assert_int_eq(kit_close_recv(rc), ncclSuccess);
    ck_assert_int_eq(kit_close_listen(lc), ncclSuccess);
    kit_fini();
}
END_TEST

/* A listener closed before the handshake completes makes connect fail, not hang. */
START_TEST(test_connect_to_closed_listener_fails)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *lc = NULL, *sc = NULL;
    ncclResult_t res = ncclSuccess;
    double end;

    env_clear();
    setenv("NCCL_SOCKET_IFNAME", "=lo", 1);
    ck_assert_int_eq(kit_init(), ncclSuccess);
    ck_assert_int_eq(kit_listen(0, handle, &lc), ncclSuccess);
    ck_assert_int_eq(kit_connect(0, handle, &sc), ncclSuccess);
    ck_assert_ptr_null(sc); /* the listener has not acknowledged anything yet */
    ck_assert_int_eq(kit_close_listen(lc), ncclSuccess);
    end = kit_now() + TIMEOUT;
    while (res == ncclSuccess && sc == NULL && kit_now() < end) {
        res = kit_connect(0, handle, &sc);
        sched_yield();
    }
    ck_assert_ptr_null(sc);
    ck_assert_int_ne(res, ncclSuccess);
    kit_fini();
}
END_TEST

static Suite *netsock_suite(void)
{
    Suite *s = suite_create("netsock");
    TCase *tc;

    tc = tcase_create("devices");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_ifname_exact_lo);
    tcase_add_test(tc, test_ifname_prefix_list);
    tcase_add_test(tc, test_ifname_no_match_fails_init);
    tcase_add_test(tc, test_ifname_exclude);
    tcase_add_test(tc, test_ifname_default);
    tcase_add_loop_test(tc, test_family, 0, 2);
    tcase_add_test(tc, test_properties_every_version);
    suite_add_tcase(s, tc);

    tc = tcase_create("settings");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_settings_in_handle, 0,
                        (int)(sizeof(settings_cases) / sizeof(settings_cases[0])));
    tcase_add_test(tc, test_many_sockets_transfer);
    tcase_add_loop_test(tc, test_user_timeout_on_every_socket, 0,
                        (int)(sizeof(user_timeout_cases) / sizeof(user_timeout_cases[0])));
    suite_add_tcase(s, tc);

    tc = tcase_create("listener");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_listener_survives_strangers);
    tcase_add_test(tc, test_connect_to_closed_listener_fails);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    char err[512];
    SRunner *sr;
    int failed;

    if (argc != 2) {
        fprintf(stderr, "usage: %s libnccl-net-socket.so\n", argv[0]);
        return 2;
    }
    plugin_path = argv[1];
    if (kit_load(plugin_path, 0, err, sizeof(err)) != 0) {
        fprintf(stderr, "check_netsock: %s\n", err);
        return 1;
    }
    sr = srunner_create(netsock_suite());
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
