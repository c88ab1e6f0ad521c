/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "mp_topo": the topology across the processes of one host.
 *   share     4 ranks as processes: only the host's first rank runs topology detection,
 *             the others say they use the topology rank 0 detected; with
 *             BRAID_TOPO_SHARE=0 every process detects its own. Both run an AllReduce.
 *   leader_dies  rank 0 dies in the middle of detection (a fake NVML ends it): every
 *             other rank's init fails, naming the topology it waited for, instead of
 *             hanging.
 *
 * Ranks are forked and meet through NCCL_COMM_ID; each writes its INFO log to its own
 * NCCL_DEBUG_FILE, which the test reads. The test process never calls NCCL.
 */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nccl.h>

#define NRANKS 4
#define COUNT 1000

static char log_dir[256];

/* A loopback port nobody holds now (the kernel picks it), for NCCL_COMM_ID. */
static int free_port(void)
{
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    ck_assert_int_ge(fd, 0);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

static void log_path(int rank, char *buf, size_t len)
{
    snprintf(buf, len, "%s/rank%d.log", log_dir, rank);
}

/* Does rank's log hold a line with `what`? */
static int log_has(int rank, const char *what)
{
    char path[300], line[1024];
    int found = 0;
    log_path(rank, path, sizeof(path));
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return 0;
    }
    while (!found && fgets(line, sizeof(line), f) != NULL) {
        found = strstr(line, what) != NULL;
    }
    fclose(f);
    return found;
}

/* One rank: init, an AllReduce checked exactly, destroy. With expect_fail, init must
 * fail with `expect_fail` in its error text. Returns 0 when all went as expected. */
static int rank_run(int rank, const char *comm_id, const char *expect_fail)
{
    char path[300];
    ncclUniqueId id;
    ncclComm_t comm;
    float *buf;
    int bad = 0;

    log_path(rank, path, sizeof(path));
    setenv("NCCL_COMM_ID", comm_id, 1);
    setenv("NCCL_DEBUG", "INFO", 1);
    setenv("NCCL_DEBUG_SUBSYS", "INIT,GRAPH,NET", 1);
    setenv("NCCL_DEBUG_FILE", path, 1);
    if (ncclGetUniqueId(&id) != ncclSuccess) {
        return 1;
    }
    ncclResult_t res = ncclCommInitRank(&comm, NRANKS, id, rank);
    if (expect_fail != NULL) {
        const char *err = ncclGetLastError(NULL);
        if (res == ncclSuccess || strstr(err, expect_fail) == NULL) {
            fprintf(stderr, "rank %d: init returned %d (%s), expected a failure with '%s'\n", rank,
                    (int)res, err, expect_fail);
            return 1;
        }
        return 0;
    }
    if (res != ncclSuccess) {
        fprintf(stderr, "rank %d: init failed: %s\n", rank, ncclGetLastError(NULL));
        return 1;
    }
    buf = malloc(COUNT * sizeof(float));
    for (int i = 0; buf != NULL && i < COUNT; i++) {
        buf[i] = (float)(rank + i % 7);
    }
    bad = buf == NULL || ncclAllReduce(buf, buf, COUNT, ncclFloat, ncclSum, comm, NULL) != 0;
    for (int i = 0; !bad && i < COUNT; i++) {
        /* sum over r of r + i % 7 */
        bad = buf[i] != (float)(NRANKS * (NRANKS - 1) / 2 + NRANKS * (i % 7));
    }
    free(buf);
    if (bad) {
        fprintf(stderr, "rank %d: AllReduce failed or gave a wrong result\n", rank);
        ncclCommAbort(comm);
        return 1;
    }
    return ncclCommDestroy(comm) == ncclSuccess ? 0 : 1;
}

/* Fork NRANKS ranks; env_of(rank) may set the rank's own environment. Asserts that each
 * exits with 0. */
static void run_ranks(void (*env_of)(int rank), const char *expect_fail_of_others)
{
    char comm_id[64];
    pid_t pids[NRANKS];
    int status;

    snprintf(comm_id, sizeof(comm_id), "127.0.0.1:%d", free_port());
    for (int r = 0; r < NRANKS; r++) {
        pids[r] = fork();
        ck_assert_int_ge(pids[r], 0);
        if (pids[r] == 0) {
            alarm(120); /* a hang kills the rank, and fails the test with a signal */
            if (env_of != NULL) {
                env_of(r);
            }
            _exit(rank_run(r, comm_id, r == 0 ? NULL : expect_fail_of_others));
        }
    }
    for (int r = 0; r < NRANKS; r++) {
        ck_assert_int_eq(waitpid(pids[r], &status, 0), pids[r]);
        if (expect_fail_of_others != NULL && r == 0) {
            ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 42,
                          "rank 0 should have died in detection (exit 42), status 0x%x", status);
            continue;
        }
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank %d: %s %d (see stderr)",
                      r, WIFEXITED(status) ? "exit" : "signal",
                      WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    }
}

static void make_log_dir(void)
{
    snprintf(log_dir, sizeof(log_dir), "/tmp/braid-mp-topo-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(log_dir));
}

static void remove_log_dir(void)
{
    char path[300];
    for (int r = 0; r < NRANKS; r++) {
        log_path(r, path, sizeof(path));
        unlink(path);
    }
    rmdir(log_dir);
}

START_TEST(test_share_detects_once)
{
    run_ranks(NULL, NULL);
    ck_assert_msg(log_has(0, "topology detected in"), "rank 0 did not detect the topology");
    for (int r = 1; r < NRANKS; r++) {
        char what[64];
        snprintf(what, sizeof(what), "Topology: rank %d: detected by rank 0", r);
        ck_assert_msg(!log_has(r, "topology detected in"), "rank %d detected it again", r);
        ck_assert_msg(log_has(r, what), "rank %d does not use rank 0's topology", r);
    }
}
END_TEST

static void no_share(int rank)
{
    (void)rank;
    setenv("BRAID_TOPO_SHARE", "0", 1);
}

START_TEST(test_share_off_detects_everywhere)
{
    run_ranks(no_share, NULL);
    for (int r = 0; r < NRANKS; r++) {
        ck_assert_msg(log_has(r, "topology detected in"), "rank %d did not detect", r);
    }
}
END_TEST

static void leader_dies(int rank)
{
    if (rank == 0) {
        setenv("BRAID_NVML_LIBRARY", NVML_EXIT_PATH, 1);
    }
}

START_TEST(test_leader_dies)
{
    run_ranks(leader_dies, "this host's topology from rank");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("mp_topo");
    TCase *tc = tcase_create("share");
    tcase_set_timeout(tc, 180);
    tcase_add_checked_fixture(tc, make_log_dir, remove_log_dir);
    tcase_add_test(tc, test_share_detects_once);
    tcase_add_test(tc, test_share_off_detects_everywhere);
    tcase_add_test(tc, test_leader_dies);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
