/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_netofi, more than one process: two processes exchanging every size over the real
 * provider path, a connect whose process falls silent while its peer still accepts, and
 * (shm only) a region left in /dev/shm under our pid by another live process. These cases
 * have no fixture: each forks before anything touches libfabric and calls nt_setup() on
 * both sides itself.
 */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "netofi_test_util.h"
#include "plugin_api/net/net.h"

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
    nt_setup();
    {
        int child = pid == 0;
        nt_pair_t in = {0}, out = {0};
        double end = nt_now() + NT_POLL_SECONDS;

        /* Each side listens for its incoming connection and sends the handle over. */
        ck_assert_int_eq(nt_net->listen(nt_ctx, 0, child ? h1 : h2, &in.lc), ncclSuccess);
        ck_assert_int_eq(
            write(child ? to_parent[1] : to_child[1], child ? h1 : h2, NCCL_NET_HANDLE_MAXSIZE),
            NCCL_NET_HANDLE_MAXSIZE);
        ck_assert_int_eq(
            read(child ? to_child[0] : to_parent[0], child ? h2 : h1, NCCL_NET_HANDLE_MAXSIZE),
            NCCL_NET_HANDLE_MAXSIZE);
        while ((!out.sc || !in.rc) && nt_now() < end) {
            if (!out.sc) {
                ck_assert_int_eq(nt_net->connect(nt_ctx, 0, child ? h2 : h1, &out.sc, NULL),
                                 ncclSuccess);
            }
            if (!in.rc) {
                ck_assert_int_eq(nt_net->accept(in.lc, &in.rc, NULL), ncclSuccess);
            }
        }
        ck_assert(out.sc && in.rc);
        /* nt_pair_t views for xfer: send on out.sc, receive on in.rc. */
        {
            nt_pair_t io = {.sc = out.sc, .rc = in.rc};
            for (size_t i = 0; i < sizeof(nt_sizes) / sizeof(nt_sizes[0]); i++) {
                nt_check_xfer(nt_net, &io, nt_sizes[i], 0);
            }
        }
        ck_assert_int_eq(nt_net->closeSend(out.sc), ncclSuccess);
        ck_assert_int_eq(nt_net->closeRecv(in.rc), ncclSuccess);
        ck_assert_int_eq(nt_net->closeListen(in.lc), ncclSuccess);
        if (child) {
            nt_teardown();
            _exit(0);
        }
    }
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed (%#x)", status);
    nt_teardown();
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
    nt_setup();
    if (pid == 0) {
        void *sc = NULL;
        double end = nt_now() + NT_POLL_SECONDS;
        close(to_child[1]);
        ck_assert_int_eq(read(to_child[0], h, sizeof(h)), (ssize_t)sizeof(h));
        while (sc == NULL && nt_now() < end) {
            ck_assert_int_eq(nt_net->connect(nt_ctx, 0, h, &sc, NULL), ncclSuccess);
        }
        ck_assert_ptr_nonnull(sc);
        /* Silent until the parent is done (its end of the pipe: a byte, or EOF). */
        (void)read(to_child[0], &byte, 1);
        ck_assert_int_eq(nt_net->closeSend(sc), ncclSuccess);
        nt_teardown();
        _exit(0);
    }
    close(to_child[0]);
    void *lc = NULL, *rc = NULL;
    ck_assert_int_eq(nt_net->listen(nt_ctx, 0, h, &lc), ncclSuccess);
    ck_assert_int_eq(write(to_child[1], h, sizeof(h)), (ssize_t)sizeof(h));
    double end = nt_now() + NT_POLL_SECONDS;
    while (rc == NULL && nt_now() < end) {
        ck_assert_int_eq(nt_net->accept(lc, &rc, NULL), ncclSuccess);
    }
    close(to_child[1]); /* the child may finish */
    ck_assert_msg(rc != NULL, "accept did not complete while the connecting process was silent");
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed (%#x)", status);
    ck_assert_int_eq(nt_net->closeRecv(rc), ncclSuccess);
    ck_assert_int_eq(nt_net->closeListen(lc), ncclSuccess);
    nt_teardown();
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
    nt_pair_t p;
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

        nt_setup();
        ck_assert_int_eq(nt_net->listen(nt_ctx, 0, handle, &lc), ncclSuccess);
        ck_assert_int_eq(write(to_parent[1], "r", 1), 1);
        ck_assert_int_eq(read(to_child[0], &byte, 1), 1); /* alive until the parent is done */
        ck_assert_int_eq(nt_net->closeListen(lc), ncclSuccess);
        nt_teardown();
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
    nt_setup();
    nt_pair_open(nt_net, nt_ctx, nt_ctx, &p, 0);
    nt_check_xfer(nt_net, &p, 4097, 0);
    nt_pair_close(nt_net, &p);
    nt_teardown();
    ck_assert_int_eq(write(to_child[1], "d", 1), 1);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed (%#x)", status);
    if (region[0] != '\0') {
        (void)unlink(stale);
    }
}
END_TEST

void nt_add_procs_tcases(Suite *s)
{
    TCase *tc = tcase_create("processes");

    tcase_set_timeout(tc, NT_TEST_TIMEOUT);
    tcase_add_test(tc, test_two_processes);
    tcase_add_test(tc, test_connect_then_silent);
    tcase_add_test(tc, test_shm_stale_region);
    suite_add_tcase(s, tc);
}
