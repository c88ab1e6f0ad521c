/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers shared by the bootstrap Check binaries: ranks as threads of this process (one
 * bt_rank_job_t each) or as forked processes, all over loopback; the rank bodies that more
 * than one binary runs (allgather, send/recv to every peer, abort notice); a free port;
 * and the SRunner wrapper every main() uses. Functions that assert run on the test thread;
 * rank bodies run off it (or in a child) and only return a code.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "bootstrap_test_util.h"
#include "util.h"
#include "util_socket.h"

void bt_sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

double bt_now_s(void)
{
    return (double)br_time_ns() * 1e-9;
}

static void *rank_thread(void *p)
{
    bt_rank_job_t *job = p;
    br_bootstrap_t *boot = NULL;
    double t0;

    if (job->delay_ms > 0) {
        bt_sleep_ms(job->delay_ms);
    }
    br_log_clear_last_error();
    t0 = bt_now_s();
    job->init_res = br_bootstrap_init(&job->id, job->rank, job->nranks, &boot);
    job->secs = bt_now_s() - t0;
    if (job->init_res != ncclSuccess) {
        snprintf(job->err, sizeof(job->err), "%s", br_log_last_error());
        return NULL;
    }
    job->fn_ret = job->fn != NULL ? job->fn(boot, job->rank, job->nranks, job->arg) : 0;
    br_bootstrap_close(boot);
    return NULL;
}

/* Run the jobs, one thread each, and wait for all of them. */
void bt_run_jobs(bt_rank_job_t *jobs, int njobs)
{
    pthread_t th[BT_MAX_RANKS];

    ck_assert_int_le(njobs, BT_MAX_RANKS);
    for (int i = 0; i < njobs; i++) {
        ck_assert_int_eq(pthread_create(&th[i], NULL, rank_thread, &jobs[i]), 0);
    }
    for (int i = 0; i < njobs; i++) {
        pthread_join(th[i], NULL);
    }
}

/* nranks ranks as threads, all expected to succeed. */
void bt_run_threads(int nranks, bt_rank_fn_t fn, void *arg)
{
    bt_rank_job_t jobs[BT_MAX_RANKS];
    ncclUniqueId id;

    ck_assert_int_eq(br_bootstrap_get_unique_id(&id), ncclSuccess);
    memset(jobs, 0, sizeof(jobs));
    for (int r = 0; r < nranks; r++) {
        jobs[r] = (bt_rank_job_t){.id = id, .rank = r, .nranks = nranks, .fn = fn, .arg = arg};
    }
    bt_run_jobs(jobs, nranks);
    for (int r = 0; r < nranks; r++) {
        ck_assert_msg(jobs[r].init_res == ncclSuccess, "rank %d of %d: init failed (%d): %s", r,
                      nranks, (int)jobs[r].init_res, jobs[r].err);
        ck_assert_msg(jobs[r].fn_ret == 0, "rank %d of %d: body failed (%d)", r, nranks,
                      jobs[r].fn_ret);
    }
}

/* One rank in a forked child: init on id (as a rank of host `host`, NCCL_HOSTID, when not
 * NULL), run the body, exit with its verdict. */
static void proc_rank(const ncclUniqueId *id, int r, int nranks, const char *host, bt_rank_fn_t fn,
                      void *arg)
{
    br_bootstrap_t *boot = NULL;
    int ret;
    if (host != NULL) {
        setenv("NCCL_HOSTID", host, 1);
    }
    if (br_bootstrap_init(id, r, nranks, &boot) != ncclSuccess) {
        fprintf(stderr, "rank %d: init failed: %s\n", r, br_log_last_error());
        _exit(2);
    }
    ret = fn(boot, r, nranks, arg);
    br_bootstrap_close(boot);
    _exit(ret == 0 ? 0 : 3);
}

static void procs_reap(const pid_t *pids, int nranks)
{
    for (int r = 0; r < nranks; r++) {
        int status = 0;
        ck_assert_int_eq(waitpid(pids[r], &status, 0), pids[r]);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                      "rank %d process failed (status 0x%x)", r, status);
    }
}

/* nranks ranks as forked processes; the id (and its root thread) comes from this one. */
void bt_run_procs_id(const ncclUniqueId *id, int nranks, bt_rank_fn_t fn, void *arg)
{
    pid_t pids[BT_MAX_RANKS];

    fflush(NULL);
    for (int r = 0; r < nranks; r++) {
        pids[r] = fork();
        ck_assert_int_ge(pids[r], 0);
        if (pids[r] == 0) {
            proc_rank(id, r, nranks, NULL, fn, arg);
        }
    }
    procs_reap(pids, nranks);
}

/* Every rank is forked before the id exists, and reads it from a pipe: the id starts the
 * root's thread, and a fork while that thread serves the ranks forked earlier could copy a
 * lock it holds into the child (the sanitizers' allocator lock deadlocked a child under
 * ASan, as in tests/common/brt_launch.c). An id is far smaller than PIPE_BUF, so each of
 * the nranks writes reaches one reader whole. */
void bt_run_procs(int nranks, bt_rank_fn_t fn, void *arg)
{
    bt_run_procs_hosts(nranks, NULL, fn, arg);
}

void bt_run_procs_hosts(int nranks, const char *const *hosts, bt_rank_fn_t fn, void *arg)
{
    pid_t pids[BT_MAX_RANKS];
    ncclUniqueId id;
    int fds[2];

    ck_assert_int_eq(pipe(fds), 0);
    fflush(NULL);
    for (int r = 0; r < nranks; r++) {
        pids[r] = fork();
        ck_assert_int_ge(pids[r], 0);
        if (pids[r] == 0) {
            close(fds[1]);
            ssize_t n;
            do {
                n = read(fds[0], &id, sizeof(id));
            } while (n < 0 && errno == EINTR);
            if (n != (ssize_t)sizeof(id)) {
                fprintf(stderr, "rank %d: no id from the parent (%zd bytes)\n", r, n);
                _exit(4);
            }
            proc_rank(&id, r, nranks, hosts != NULL ? hosts[r] : NULL, fn, arg);
        }
    }
    close(fds[0]);
    ncclResult_t got = br_bootstrap_get_unique_id(&id);
    for (int r = 0; r < nranks && got == ncclSuccess; r++) {
        ck_assert_int_eq(write(fds[1], &id, sizeof(id)), (ssize_t)sizeof(id));
    }
    close(fds[1]); /* without an id the children read 0 bytes and exit */
    ck_assert_int_eq(got, ncclSuccess);
    procs_reap(pids, nranks);
}

unsigned char bt_pattern(int src, int dst, int tag, size_t i)
{
    return (unsigned char)((size_t)src * 131u + (size_t)dst * 17u + (size_t)tag * 7u + i);
}

static int check_allgather(br_bootstrap_t *boot, int rank, int nranks, size_t size)
{
    unsigned char *buf = calloc((size_t)nranks, size);
    int ret = 0;

    BT_BODY_CHECK(buf != NULL, "out of memory");
    for (size_t i = 0; i < size; i++) {
        buf[(size_t)rank * size + i] = bt_pattern(rank, 0, 1, i);
    }
    BT_BODY_CHECK(br_bootstrap_allgather(boot, buf, size) == ncclSuccess, "allgather %zu", size);
    for (int r = 0; r < nranks; r++) {
        for (size_t i = 0; i < size; i++) {
            BT_BODY_CHECK(buf[(size_t)r * size + i] == bt_pattern(r, 0, 1, i),
                          "slot %d byte %zu of %zu wrong", r, i, size);
        }
    }
out:
    free(buf);
    return ret;
}

int bt_allgather_body(br_bootstrap_t *boot, int rank, int nranks, void *arg)
{
    int ret = 0;

    (void)arg;
    BT_BODY_CHECK(check_allgather(boot, rank, nranks, 37) == 0, "37-byte slots");
    BT_BODY_CHECK(check_allgather(boot, rank, nranks, 1) == 0, "1-byte slots");
    BT_BODY_CHECK(check_allgather(boot, rank, nranks, 70001) == 0, "70001-byte slots");
    BT_BODY_CHECK(br_bootstrap_barrier(boot) == ncclSuccess, "barrier");
    BT_BODY_CHECK(br_bootstrap_peer_pid(boot, rank) == (int)getpid(), "own pid");
    BT_BODY_CHECK(strcmp(br_bootstrap_peer_host(boot, nranks - 1), br_host_name()) == 0, "host");
    for (int r = 0; r < nranks; r++) {
        BT_BODY_CHECK(br_bootstrap_peer_pid(boot, r) > 0, "pid of rank %d", r);
    }
out:
    return ret;
}

static size_t tag_size(int tag)
{
    return (size_t)(tag * 97) % 300;
}

static int send_all_peers(br_bootstrap_t *boot, int rank, int nranks, const bt_sendrecv_arg_t *a,
                          unsigned char *buf)
{
    int ret = 0;

    for (int p = 0; p < nranks; p++) {
        /* Tags go out in reverse order, so the receiver finds them out of order. */
        for (int tag = a->ntags - 1; tag >= 0; tag--) {
            for (size_t i = 0; i < tag_size(tag); i++) {
                buf[i] = bt_pattern(rank, p, tag, i);
            }
            BT_BODY_CHECK(br_bootstrap_send(boot, p, tag, buf, tag_size(tag)) == ncclSuccess,
                          "send to %d tag %d", p, tag);
        }
        /* Several messages on one tag must arrive in order. */
        for (int k = 0; k < 3; k++) {
            BT_BODY_CHECK(br_bootstrap_send(boot, p, 1000, &k, sizeof(k)) == ncclSuccess, "send");
        }
        for (size_t i = 0; i < a->big; i++) {
            buf[i] = bt_pattern(rank, p, 2000, i);
        }
        BT_BODY_CHECK(br_bootstrap_send(boot, p, -5, buf, a->big) == ncclSuccess, "big send");
    }
out:
    return ret;
}

static int recv_all_peers(br_bootstrap_t *boot, int rank, int nranks, const bt_sendrecv_arg_t *a,
                          unsigned char *buf)
{
    int ret = 0;

    for (int i = 0; i < nranks; i++) {
        int p = (rank + i) % nranks;
        for (int tag = 0; tag < a->ntags; tag++) {
            BT_BODY_CHECK(br_bootstrap_recv(boot, p, tag, buf, tag_size(tag)) == ncclSuccess,
                          "recv from %d tag %d", p, tag);
            for (size_t j = 0; j < tag_size(tag); j++) {
                BT_BODY_CHECK(buf[j] == bt_pattern(p, rank, tag, j), "data from %d tag %d", p, tag);
            }
        }
        for (int k = 0; k < 3; k++) {
            int v = -1;
            BT_BODY_CHECK(br_bootstrap_recv(boot, p, 1000, &v, sizeof(v)) == ncclSuccess, "recv");
            BT_BODY_CHECK(v == k, "message %d of tag 1000 from %d came as %d", k, p, v);
        }
        BT_BODY_CHECK(br_bootstrap_recv(boot, p, -5, buf, a->big) == ncclSuccess, "big recv");
        for (size_t j = 0; j < a->big; j++) {
            BT_BODY_CHECK(buf[j] == bt_pattern(p, rank, 2000, j), "big data from %d at %zu", p, j);
        }
    }
out:
    return ret;
}

/* Every rank sends everything to everyone (itself included) before receiving anything:
 * with multi-megabyte messages this deadlocks unless sends never wait for recvs. */
int bt_sendrecv_body(br_bootstrap_t *boot, int rank, int nranks, void *arg)
{
    const bt_sendrecv_arg_t *a = arg;
    unsigned char *buf = malloc(a->big > 300 ? a->big : 300);
    int ret = 0;

    BT_BODY_CHECK(buf != NULL, "out of memory");
    BT_BODY_CHECK(send_all_peers(boot, rank, nranks, a, buf) == 0, "sends");
    BT_BODY_CHECK(recv_all_peers(boot, rank, nranks, a, buf) == 0, "recvs");
    /* A size mismatch is an error, not a truncation. */
    BT_BODY_CHECK(br_bootstrap_send(boot, rank, 77, buf, 8) == ncclSuccess, "self send");
    BT_BODY_CHECK(br_bootstrap_recv(boot, rank, 77, buf, 4) != ncclSuccess, "size mismatch");
    BT_BODY_CHECK(br_bootstrap_barrier(boot) == ncclSuccess, "final barrier");
out:
    free(buf);
    return ret;
}

int bt_abort_body(br_bootstrap_t *boot, int rank, int nranks, void *arg)
{
    int ret = 0, from = -1, ready = 0;
    char reason[128] = "";

    (void)arg;
    if (rank == 0) {
        /* Notify only once everyone is past init and waiting for it. */
        for (int p = 1; p < nranks; p++) {
            BT_BODY_CHECK(br_bootstrap_recv(boot, p, 9, &ready, sizeof(ready)) == ncclSuccess,
                          "ready from %d", p);
        }
        BT_BODY_CHECK(!br_bootstrap_poll_abort(boot, &from, reason, sizeof(reason)), "early abort");
        br_bootstrap_abort_notify(boot, "rank 0 hit a test failure");
        goto out;
    }
    BT_BODY_CHECK(br_bootstrap_send(boot, 0, 9, &ready, sizeof(ready)) == ncclSuccess, "ready");
    for (double t0 = bt_now_s(); !br_bootstrap_poll_abort(boot, &from, reason, sizeof(reason));) {
        BT_BODY_CHECK(bt_now_s() - t0 < 10.0, "no abort notice within 10 s");
        bt_sleep_ms(1);
    }
    BT_BODY_CHECK(from == 0, "abort from %d", from);
    BT_BODY_CHECK(strstr(reason, "test failure") != NULL, "reason '%s'", reason);
    /* A rank waiting on a peer fails at once after an abort rather than timing out. */
    {
        double t0 = bt_now_s();
        BT_BODY_CHECK(br_bootstrap_recv(boot, 0, 10, &ready, sizeof(ready)) == ncclRemoteError,
                      "recv after abort");
        BT_BODY_CHECK(bt_now_s() - t0 < 5.0, "recv after abort took %.1f s", bt_now_s() - t0);
    }
out:
    return ret;
}

int bt_free_port(void)
{
    br_socket_addr_t any, bound;
    int fd = -1, port;

    memset(&any, 0, sizeof(any));
    any.sin.sin_family = AF_INET;
    any.sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(br_socket_listen(&any, &fd, &bound), ncclSuccess);
    port = br_socket_addr_port(&bound);
    close(fd);
    return port;
}

int bt_suite_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
