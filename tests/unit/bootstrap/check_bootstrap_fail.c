/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "bootstrap", failures and how they are reported: abort notices (threads,
 * processes, and one that must skip a peer that already left), a rank or a host's leader
 * that dies between allgathers through host memory, and the cases tagged
 * "timeout" (a rank that never joins, a root that accepts but never answers, a root that
 * is not there). The timeout cases run in their own CTest entry, check_bootstrap_timeout,
 * with BRAID_BOOTSTRAP_TIMEOUT=3 so that they fail fast.
 */
#include <arpa/inet.h>
#include <check.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bootstrap.h"
#include "bootstrap_int.h"
#include "bootstrap_test_util.h"
#include "util.h"
#include "util_socket.h"

/* ---- abort ---- */

START_TEST(test_abort_threads)
{
    bt_run_threads(4, bt_abort_body, NULL);
}
END_TEST

START_TEST(test_abort_procs)
{
    bt_run_procs(3, bt_abort_body, NULL);
}
END_TEST

/* Rank 2 leaves; rank 0's abort notice skips it quickly and still reaches rank 1. */
static int abort_dead_body(br_bootstrap_t *boot, int rank, int nranks, void *arg)
{
    int ret = 0, v = 0, from = -1;
    char reason[64];

    (void)nranks;
    (void)arg;
    if (rank == 2) {
        return br_bootstrap_send(boot, 0, 3, &v, sizeof(v)) != ncclSuccess;
    }
    if (rank == 1) {
        BT_BODY_CHECK(br_bootstrap_send(boot, 0, 4, &v, sizeof(v)) == ncclSuccess, "ready");
        for (double t0 = bt_now_s();
             !br_bootstrap_poll_abort(boot, &from, reason, sizeof(reason));) {
            BT_BODY_CHECK(bt_now_s() - t0 < 10.0, "no abort notice within 10 s");
            bt_sleep_ms(1);
        }
        BT_BODY_CHECK(from == 0, "abort from %d", from);
        goto out;
    }
    BT_BODY_CHECK(br_bootstrap_recv(boot, 1, 4, &v, sizeof(v)) == ncclSuccess, "ready");
    BT_BODY_CHECK(br_bootstrap_recv(boot, 2, 3, &v, sizeof(v)) == ncclSuccess, "bye");
    /* Once rank 2's connection has closed, its listener is gone too. */
    for (double t0 = bt_now_s(); br_bootstrap_recv(boot, 2, 5, &v, sizeof(v)) != ncclRemoteError;) {
        BT_BODY_CHECK(bt_now_s() - t0 < 10.0, "rank 2 never went away");
    }
    {
        double t0 = bt_now_s();
        br_bootstrap_abort_notify(boot, "rank 0 gives up");
        BT_BODY_CHECK(bt_now_s() - t0 < 1.5, "abort_notify took %.2f s", bt_now_s() - t0);
    }
out:
    return ret;
}

START_TEST(test_abort_dead_peer)
{
    bt_run_threads(3, abort_dead_body, NULL);
}
END_TEST

/* ---- a rank that dies between allgathers through host memory ---- */

/* Six ranks on two simulated hosts: A holds 0, 1, 3 (leader 0), B holds 2, 4, 5. Rank 3
 * never sent rank 0 a message, nor rank 0 ranks 1 and 3 (the first allgather's partners
 * are r - 1, r - 2, r - 4): no closed connection tells them of a death, only the
 * process's own state. */
static const char *const dying_hosts[] = {"bt-A", "bt-A", "bt-B", "bt-A", "bt-B", "bt-B"};

/* After one good allgather the victim (*arg) exits without a word; everyone else's next
 * allgather must fail well inside the bootstrap timeout (30 s here), and on the victim's
 * host name it. */
static int dying_body(br_bootstrap_t *boot, int rank, int nranks, void *arg)
{
    int victim = *(const int *)arg, ret = 0, nhosts = 0;
    unsigned char *buf = calloc((size_t)nranks, 64);
    char want[32];
    double t0;

    BT_BODY_CHECK(buf != NULL, "out of memory");
    BT_BODY_CHECK(br_bootstrap_local_ranks(boot, &nhosts) == 3 && nhosts == 2, "two hosts of 3");
    buf[(size_t)rank * 64] = (unsigned char)rank;
    BT_BODY_CHECK(br_bootstrap_allgather(boot, buf, 64) == ncclSuccess, "first allgather");
    for (int r = 0; r < nranks; r++) {
        BT_BODY_CHECK(buf[(size_t)r * 64] == r, "slot %d", r);
    }
    if (rank == victim) {
        _exit(0);
    }
    t0 = bt_now_s();
    BT_BODY_CHECK(br_bootstrap_allgather(boot, buf, 64) != ncclSuccess,
                  "the allgather succeeded without rank %d", victim);
    BT_BODY_CHECK(bt_now_s() - t0 < 10.0, "failing took %.1f s", bt_now_s() - t0);
    snprintf(want, sizeof(want), "rank %d (", victim);
    BT_BODY_CHECK(strcmp(dying_hosts[rank], dying_hosts[victim]) != 0 ||
                      strstr(br_log_last_error(), want) != NULL,
                  "the error does not name rank %d: %s", victim, br_log_last_error());
out:
    free(buf);
    return ret;
}

START_TEST(test_dying_rank)
{
    static const int victims[] = {3, 0}; /* a rank of host A; host A's leader */
    bt_run_procs_hosts(6, dying_hosts, dying_body, (void *)&victims[_i]);
}
END_TEST

/* ---- a message that never comes: its sender's process is gone ---- */

/* Four processes (rings 0-1-2-3): rank 2 exits after init without ever having sent rank
 * 0 anything, so no connection of rank 0's closes; rank 0's receive from it must end well
 * inside the bootstrap timeout (30 s here) with the reason, from its process's state. */
static int silent_exit_body(br_bootstrap_t *boot, int rank, int nranks, void *arg)
{
    int ret = 0, v = 0;
    double t0;

    (void)nranks;
    (void)arg;
    if (rank == 2) {
        _exit(0);
    }
    if (rank != 0) {
        goto out;
    }
    t0 = bt_now_s();
    BT_BODY_CHECK(br_bootstrap_recv(boot, 2, 7, &v, sizeof(v)) == ncclRemoteError,
                  "a receive from the departed rank 2 did not fail as remote");
    BT_BODY_CHECK(bt_now_s() - t0 < 10.0, "failing took %.1f s", bt_now_s() - t0);
    BT_BODY_CHECK(strstr(br_log_last_error(), "from rank 2 (host ") != NULL &&
                      strstr(br_log_last_error(), "its process is gone") != NULL,
                  "the error does not say rank 2's process is gone: %s", br_log_last_error());
out:
    return ret;
}

START_TEST(test_silent_exit)
{
    bt_run_procs(4, silent_exit_body, NULL);
}
END_TEST

/* ---- failures that take a timeout (BRAID_BOOTSTRAP_TIMEOUT=3) ---- */

START_TEST(test_missing_rank)
{
    bt_rank_job_t jobs[3];
    ncclUniqueId id;
    int timeout = br_boot_timeout_s();

    ck_assert_int_eq(br_bootstrap_get_unique_id(&id), ncclSuccess);
    for (int r = 0; r < 3; r++) {
        jobs[r] = (bt_rank_job_t){.id = id, .rank = r, .nranks = 4, .fn = bt_allgather_body};
    }
    bt_run_jobs(jobs, 3);
    for (int r = 0; r < 3; r++) {
        ck_assert_int_eq(jobs[r].init_res, ncclSystemError);
        ck_assert_msg(strstr(jobs[r].err, "rank 3 of 4 did not join") != NULL, "rank %d: %s", r,
                      jobs[r].err);
        ck_assert_msg(jobs[r].secs >= timeout - 0.5 && jobs[r].secs < timeout + 5.0,
                      "rank %d failed after %.1f s (timeout %d s)", r, jobs[r].secs, timeout);
    }
}
END_TEST

START_TEST(test_root_silent)
{
    br_socket_addr_t lo, bound;
    br_boot_handle_t h;
    bt_rank_job_t job;
    int fd = -1;
    int timeout = br_boot_timeout_s();

    /* A listener that accepts (in the kernel) but never answers. */
    memset(&lo, 0, sizeof(lo));
    lo.sin.sin_family = AF_INET;
    lo.sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(br_socket_listen(&lo, &fd, &bound), ncclSuccess);
    memset(&h, 0, sizeof(h));
    h.magic = BR_BOOT_ID_MAGIC;
    h.secret = 0x1234;
    h.root = bound;
    memset(&job, 0, sizeof(job));
    memcpy(job.id.internal, &h, sizeof(h));
    job.rank = 1;
    job.nranks = 2;
    bt_run_jobs(&job, 1);
    close(fd);
    ck_assert_int_eq(job.init_res, ncclSystemError);
    ck_assert_msg(strstr(job.err, "did not answer") != NULL, "%s", job.err);
    ck_assert_msg(job.secs < timeout + 5.0, "failed after %.1f s (timeout %d s)", job.secs,
                  timeout);
}
END_TEST

START_TEST(test_root_absent)
{
    br_boot_handle_t h;
    bt_rank_job_t job;
    int timeout = br_boot_timeout_s();

    memset(&h, 0, sizeof(h));
    h.magic = BR_BOOT_ID_MAGIC;
    h.secret = 0x1234;
    h.root.sin.sin_family = AF_INET;
    h.root.sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    h.root.sin.sin_port = htons((uint16_t)bt_free_port());
    memset(&job, 0, sizeof(job));
    memcpy(job.id.internal, &h, sizeof(h));
    job.rank = 1;
    job.nranks = 2;
    bt_run_jobs(&job, 1);
    /* A unique id's root listens from ncclGetUniqueId on: refusals for 2 s mean it is gone. */
    ck_assert_int_eq(job.init_res, ncclSystemError);
    ck_assert_msg(strstr(job.err, "refused every connection") != NULL, "%s", job.err);
    ck_assert_msg(job.secs < 4.0, "failed after %.1f s, not about 2 s", job.secs);
    /* NCCL_COMM_ID's rank 0 may start late: the others keep trying for the timeout. */
    h.flags |= BR_BOOT_FLAG_COMM_ID;
    memset(&job, 0, sizeof(job));
    memcpy(job.id.internal, &h, sizeof(h));
    job.rank = 1;
    job.nranks = 2;
    bt_run_jobs(&job, 1);
    ck_assert_int_eq(job.init_res, ncclSystemError);
    ck_assert_msg(strstr(job.err, "could not reach the root") != NULL, "%s", job.err);
    ck_assert_msg(job.secs >= timeout - 1.0 && job.secs < timeout + 2.0,
                  "failed after %.1f s (timeout %d s)", job.secs, timeout);
}
END_TEST

/* A rank of another job (another secret) reaches this job's root: it is refused at once
 * with a reason, and the secret of an NCCL_COMM_ID id depends on the job's identity. */
START_TEST(test_other_job)
{
    ncclUniqueId id;
    br_boot_handle_t h;
    bt_rank_job_t job;

    ck_assert_uint_ne(br_boot_comm_id_secret("127.0.0.1:5000", "SLURM_JOB_ID=1"),
                      br_boot_comm_id_secret("127.0.0.1:5000", "SLURM_JOB_ID=2"));
    ck_assert_uint_eq(br_boot_comm_id_secret("127.0.0.1:5000", "BRAID_COMM_SECRET=x"),
                      br_boot_comm_id_secret("127.0.0.1:5000", "BRAID_COMM_SECRET=x"));
    ck_assert_uint_ne(br_boot_comm_id_secret("127.0.0.1:5000", NULL),
                      br_boot_comm_id_secret("127.0.0.1:5000", "BRAID_COMM_SECRET=x"));

    ck_assert_int_eq(br_bootstrap_get_unique_id(&id), ncclSuccess);
    memcpy(&h, id.internal, sizeof(h));
    h.secret ^= 0x2; /* another job's */
    memset(&job, 0, sizeof(job));
    memcpy(job.id.internal, &h, sizeof(h));
    job.rank = 1;
    job.nranks = 2;
    bt_run_jobs(&job, 1);
    ck_assert_int_eq(job.init_res, ncclInvalidUsage);
    ck_assert_msg(strstr(job.err, "belongs to another job") != NULL, "%s", job.err);
    ck_assert_msg(job.secs < 3.0, "refused after %.1f s", job.secs);
}
END_TEST

/* A rank of another Braid version (another bootstrap protocol, same secret) checks in:
 * the init fails at once for every rank with a message that says so, the old rank's
 * included (it is answered), instead of the others waiting BRAID_BOOTSTRAP_TIMEOUT for a
 * rank the root dropped. */
START_TEST(test_other_version)
{
    ncclUniqueId id;
    br_boot_handle_t h;
    br_boot_checkin_t c;
    br_boot_answer_t ans;
    bt_rank_job_t job;
    int fd = -1;
    uint64_t deadline = br_time_ns() + 5000000000ull;

    ck_assert_int_eq(br_bootstrap_get_unique_id(&id), ncclSuccess);
    memcpy(&h, id.internal, sizeof(h));
    memset(&c, 0, sizeof(c));
    c.secret = h.secret;
    c.proto = BR_BOOT_PROTO - 1;
    c.rank = 1;
    c.nranks = 2;
    c.pid = (int32_t)getpid();
    ck_assert_int_eq(br_socket_connect_up(&h.root, deadline, 0, &fd), ncclSuccess);
    ck_assert_int_eq(br_socket_send_all(fd, &c, sizeof(c), deadline), ncclSuccess);

    memset(&job, 0, sizeof(job));
    job.id = id;
    job.rank = 0;
    job.nranks = 2;
    bt_run_jobs(&job, 1);
    ck_assert_int_eq(job.init_res, ncclInvalidUsage);
    ck_assert_msg(strstr(job.err, "protocol") != NULL, "%s", job.err);
    ck_assert_msg(job.secs < 10.0, "failed after %.1f s", job.secs);

    memset(&ans, 0, sizeof(ans));
    ck_assert_int_eq(br_socket_recv_all(fd, &ans, sizeof(ans), br_time_ns() + 5000000000ull),
                     ncclSuccess);
    close(fd);
    ans.msg[sizeof(ans.msg) - 1] = '\0';
    ck_assert_int_eq(ans.res, ncclInvalidUsage);
    ck_assert_msg(strstr(ans.msg, "protocol") != NULL, "%s", ans.msg);
}
END_TEST

/* ---- br_proc_gone: the liveness check of a peer's process ---- */

static void *linger_thread(void *arg)
{
    (void)arg;
    sleep(30);
    _exit(0);
}

static char proc_state(pid_t pid)
{
    char path[64], buf[256];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY);
    ssize_t len = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
    if (fd >= 0) {
        close(fd);
    }
    buf[len > 0 ? len : 0] = '\0';
    const char *end = strrchr(buf, ')');
    return end != NULL && end[1] == ' ' ? end[2] : '?';
}

/* A process whose main thread called pthread_exit shows as a zombie in /proc/<pid>/stat
 * while its other threads (ranks, say) run: it lives. Once killed and not yet reaped it is
 * gone, and after the reaping too. */
START_TEST(test_proc_gone_main_exited)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        pthread_t t;
        if (pthread_create(&t, NULL, linger_thread, NULL) != 0) {
            _exit(3);
        }
        pthread_exit(NULL);
    }
    double t0 = bt_now_s();
    while (proc_state(pid) != 'Z' && bt_now_s() - t0 < 10.0) {
        bt_sleep_ms(5);
    }
    ck_assert_msg(proc_state(pid) == 'Z', "the leader never showed as a zombie (%c)",
                  proc_state(pid));
    ck_assert_msg(br_proc_gone(pid) == 0, "a live process whose main thread exited is 'gone'");
    ck_assert_int_eq(kill(pid, SIGKILL), 0);
    t0 = bt_now_s();
    while (!br_proc_gone(pid) && bt_now_s() - t0 < 10.0) {
        bt_sleep_ms(5);
    }
    ck_assert_msg(br_proc_gone(pid), "a killed, unreaped process is not 'gone'");
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(br_proc_gone(pid), "a reaped process is not 'gone'");
}
END_TEST

static int write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY);
    int ok = fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text);
    if (fd >= 0) {
        close(fd);
    }
    return ok ? 0 : -1;
}

/* Where /proc is not this pid namespace's (here: none, a tmpfs over it in a mount
 * namespace of our own), a live process must not be taken for gone. Needs unprivileged
 * user namespaces; without them the case says so and checks nothing more. */
START_TEST(test_proc_gone_no_proc)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char map[64];
        uid_t uid = getuid();
        gid_t gid = getgid();
        if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
            _exit(77);
        }
        snprintf(map, sizeof(map), "0 %u 1", (unsigned)uid);
        if (write_file("/proc/self/uid_map", map) != 0 ||
            write_file("/proc/self/setgroups", "deny") != 0) {
            _exit(77);
        }
        snprintf(map, sizeof(map), "0 %u 1", (unsigned)gid);
        if (write_file("/proc/self/gid_map", map) != 0 ||
            mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
            mount("none", "/proc", "tmpfs", 0, NULL) != 0) {
            _exit(77);
        }
        if (kill(parent, 0) != 0) {
            _exit(4); /* the test's premise: the parent lives and may be asked */
        }
        _exit(br_proc_gone(parent) == 0 ? 0 : 1);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77) {
        fprintf(stderr, "proc_gone_no_proc: no user and mount namespace here, not checked\n");
        return;
    }
    ck_assert_msg(WEXITSTATUS(status) == 0,
                  "without this namespace's /proc a live process is 'gone' (exit %d)",
                  WEXITSTATUS(status));
}
END_TEST

static Suite *bootstrap_fail_suite(void)
{
    Suite *s = suite_create("bootstrap");
    TCase *tc;

    tc = tcase_create("abort");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_abort_threads);
    tcase_add_test(tc, test_abort_procs);
    tcase_add_test(tc, test_abort_dead_peer);
    tcase_add_test(tc, test_other_job);
    tcase_add_loop_test(tc, test_dying_rank, 0, 2);
    tcase_add_test(tc, test_silent_exit);
    suite_add_tcase(s, tc);

    tc = tcase_create("proc");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_other_version);
    tcase_add_test(tc, test_proc_gone_main_exited);
    tcase_add_test(tc, test_proc_gone_no_proc);
    suite_add_tcase(s, tc);

    tc = tcase_create("timeout");
    tcase_set_tags(tc, "timeout");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_missing_rank);
    tcase_add_test(tc, test_root_silent);
    tcase_add_test(tc, test_root_absent);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return bt_suite_run(bootstrap_fail_suite());
}
