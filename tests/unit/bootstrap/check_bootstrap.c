/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "bootstrap": unique ids, the root, the ring, out-of-band messages and abort
 * notices over loopback, with ranks as threads of this process and as forked processes.
 * Rank bodies run off the main thread (or in a child), so they report failures by return
 * code and stderr; the test thread makes the assertions. White-box where it must be:
 * bootstrap_int.h gives the root's and the listeners' addresses for the intruder tests.
 * Cases tagged "timeout" run in their own CTest entry with BRAID_BOOTSTRAP_TIMEOUT=3.
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
#include "bootstrap_int.h"
#include "util.h"
#include "util_socket.h"

#define MAX_RANKS 16

typedef int (*rank_fn_t)(br_bootstrap_t *boot, int rank, int nranks, void *arg);

/* One rank run by a thread: what it was given and what came of it. */
typedef struct {
    ncclUniqueId id;
    int rank;
    int nranks;
    int delay_ms; /* sleep before init */
    rank_fn_t fn;
    void *arg;
    ncclResult_t init_res;
    int fn_ret;
    double secs; /* time init took */
    char err[1024];
} rank_job_t;

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static double now_s(void)
{
    return (double)br_time_ns() * 1e-9;
}

static void *rank_thread(void *p)
{
    rank_job_t *job = p;
    br_bootstrap_t *boot = NULL;
    double t0;

    if (job->delay_ms > 0) {
        sleep_ms(job->delay_ms);
    }
    br_log_clear_last_error();
    t0 = now_s();
    job->init_res = br_bootstrap_init(&job->id, job->rank, job->nranks, &boot);
    job->secs = now_s() - t0;
    if (job->init_res != ncclSuccess) {
        snprintf(job->err, sizeof(job->err), "%s", br_log_last_error());
        return NULL;
    }
    job->fn_ret = job->fn != NULL ? job->fn(boot, job->rank, job->nranks, job->arg) : 0;
    br_bootstrap_close(boot);
    return NULL;
}

/* Run the jobs, one thread each, and wait for all of them. */
static void run_jobs(rank_job_t *jobs, int njobs)
{
    pthread_t th[MAX_RANKS];

    ck_assert_int_le(njobs, MAX_RANKS);
    for (int i = 0; i < njobs; i++) {
        ck_assert_int_eq(pthread_create(&th[i], NULL, rank_thread, &jobs[i]), 0);
    }
    for (int i = 0; i < njobs; i++) {
        pthread_join(th[i], NULL);
    }
}

/* nranks ranks as threads, all expected to succeed. */
static void run_threads(int nranks, rank_fn_t fn, void *arg)
{
    rank_job_t jobs[MAX_RANKS];
    ncclUniqueId id;

    ck_assert_int_eq(br_bootstrap_get_unique_id(&id), ncclSuccess);
    memset(jobs, 0, sizeof(jobs));
    for (int r = 0; r < nranks; r++) {
        jobs[r] = (rank_job_t){.id = id, .rank = r, .nranks = nranks, .fn = fn, .arg = arg};
    }
    run_jobs(jobs, nranks);
    for (int r = 0; r < nranks; r++) {
        ck_assert_msg(jobs[r].init_res == ncclSuccess, "rank %d of %d: init failed (%d): %s", r,
                      nranks, (int)jobs[r].init_res, jobs[r].err);
        ck_assert_msg(jobs[r].fn_ret == 0, "rank %d of %d: body failed (%d)", r, nranks,
                      jobs[r].fn_ret);
    }
}

/* nranks ranks as forked processes; the id (and its root thread) comes from this one. */
static void run_procs_id(const ncclUniqueId *id, int nranks, rank_fn_t fn, void *arg)
{
    pid_t pids[MAX_RANKS];

    for (int r = 0; r < nranks; r++) {
        pids[r] = fork();
        ck_assert_int_ge(pids[r], 0);
        if (pids[r] == 0) {
            br_bootstrap_t *boot = NULL;
            int ret;
            if (br_bootstrap_init(id, r, nranks, &boot) != ncclSuccess) {
                fprintf(stderr, "rank %d: init failed: %s\n", r, br_log_last_error());
                _exit(2);
            }
            ret = fn(boot, r, nranks, arg);
            br_bootstrap_close(boot);
            _exit(ret == 0 ? 0 : 3);
        }
    }
    for (int r = 0; r < nranks; r++) {
        int status = 0;
        ck_assert_int_eq(waitpid(pids[r], &status, 0), pids[r]);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                      "rank %d process failed (status 0x%x)", r, status);
    }
}

static void run_procs(int nranks, rank_fn_t fn, void *arg)
{
    ncclUniqueId id;

    ck_assert_int_eq(br_bootstrap_get_unique_id(&id), ncclSuccess);
    run_procs_id(&id, nranks, fn, arg);
}

#define BODY_CHECK(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rank %d: %s:%d: ", rank, __FILE__, __LINE__);                         \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            ret = 1;                                                                               \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

static unsigned char pattern(int src, int dst, int tag, size_t i)
{
    return (unsigned char)((size_t)src * 131u + (size_t)dst * 17u + (size_t)tag * 7u + i);
}

/* ---- allgather, barrier, peer info ---- */

static int check_allgather(br_bootstrap_t *boot, int rank, int nranks, size_t size)
{
    unsigned char *buf = calloc((size_t)nranks, size);
    int ret = 0;

    BODY_CHECK(buf != NULL, "out of memory");
    for (size_t i = 0; i < size; i++) {
        buf[(size_t)rank * size + i] = pattern(rank, 0, 1, i);
    }
    BODY_CHECK(br_bootstrap_allgather(boot, buf, size) == ncclSuccess, "allgather %zu", size);
    for (int r = 0; r < nranks; r++) {
        for (size_t i = 0; i < size; i++) {
            BODY_CHECK(buf[(size_t)r * size + i] == pattern(r, 0, 1, i),
                       "slot %d byte %zu of %zu wrong", r, i, size);
        }
    }
out:
    free(buf);
    return ret;
}

static int allgather_body(br_bootstrap_t *boot, int rank, int nranks, void *arg)
{
    int ret = 0;

    (void)arg;
    BODY_CHECK(check_allgather(boot, rank, nranks, 37) == 0, "37-byte slots");
    BODY_CHECK(check_allgather(boot, rank, nranks, 1) == 0, "1-byte slots");
    BODY_CHECK(check_allgather(boot, rank, nranks, 70001) == 0, "70001-byte slots");
    BODY_CHECK(br_bootstrap_barrier(boot) == ncclSuccess, "barrier");
    BODY_CHECK(br_bootstrap_peer_pid(boot, rank) == (int)getpid(), "own pid");
    BODY_CHECK(strcmp(br_bootstrap_peer_host(boot, nranks - 1), br_host_name()) == 0, "host");
    for (int r = 0; r < nranks; r++) {
        BODY_CHECK(br_bootstrap_peer_pid(boot, r) > 0, "pid of rank %d", r);
    }
out:
    return ret;
}

START_TEST(test_allgather_threads)
{
    run_threads(_i, allgather_body, NULL);
}
END_TEST

START_TEST(test_allgather_procs)
{
    run_procs(_i, allgather_body, NULL);
}
END_TEST

/* Ranks enter the barrier at staggered times; none may leave before all have entered. */
static _Atomic int barrier_entered;

static int barrier_body(br_bootstrap_t *boot, int rank, int nranks, void *arg)
{
    int ret = 0;

    (void)arg;
    for (int round = 1; round <= 3; round++) {
        sleep_ms(rank * 7);
        atomic_fetch_add(&barrier_entered, 1);
        BODY_CHECK(br_bootstrap_barrier(boot) == ncclSuccess, "barrier round %d", round);
        BODY_CHECK(atomic_load(&barrier_entered) >= round * nranks,
                   "left round %d after only %d entries", round, atomic_load(&barrier_entered));
        BODY_CHECK(br_bootstrap_barrier(boot) == ncclSuccess, "second barrier");
    }
out:
    return ret;
}

START_TEST(test_barrier_threads)
{
    atomic_store(&barrier_entered, 0);
    run_threads(5, barrier_body, NULL);
}
END_TEST

static int barrier_procs_body(br_bootstrap_t *boot, int rank, int nranks, void *arg)
{
    int ret = 0;

    (void)nranks;
    (void)arg;
    for (int round = 0; round < 5; round++) {
        sleep_ms(((rank + round) % 3) * 5);
        BODY_CHECK(br_bootstrap_barrier(boot) == ncclSuccess, "barrier round %d", round);
    }
out:
    return ret;
}

START_TEST(test_barrier_procs)
{
    run_procs(4, barrier_procs_body, NULL);
}
END_TEST

/* ---- send / recv ---- */

typedef struct {
    int ntags;
    size_t big;
} sendrecv_arg_t;

static size_t tag_size(int tag)
{
    return (size_t)(tag * 97) % 300;
}

static int send_all_peers(br_bootstrap_t *boot, int rank, int nranks, const sendrecv_arg_t *a,
                          unsigned char *buf)
{
    int ret = 0;

    for (int p = 0; p < nranks; p++) {
        /* Tags go out in reverse order, so the receiver finds them out of order. */
        for (int tag = a->ntags - 1; tag >= 0; tag--) {
            for (size_t i = 0; i < tag_size(tag); i++) {
                buf[i] = pattern(rank, p, tag, i);
            }
            BODY_CHECK(br_bootstrap_send(boot, p, tag, buf, tag_size(tag)) == ncclSuccess,
                       "send to %d tag %d", p, tag);
        }
        /* Several messages on one tag must arrive in order. */
        for (int k = 0; k < 3; k++) {
            BODY_CHECK(br_bootstrap_send(boot, p, 1000, &k, sizeof(k)) == ncclSuccess, "send");
        }
        for (size_t i = 0; i < a->big; i++) {
            buf[i] = pattern(rank, p, 2000, i);
        }
        BODY_CHECK(br_bootstrap_send(boot, p, -5, buf, a->big) == ncclSuccess, "big send");
    }
out:
    return ret;
}

static int recv_all_peers(br_bootstrap_t *boot, int rank, int nranks, const sendrecv_arg_t *a,
                          unsigned char *buf)
{
    int ret = 0;

    for (int i = 0; i < nranks; i++) {
        int p = (rank + i) % nranks;
        for (int tag = 0; tag < a->ntags; tag++) {
            BODY_CHECK(br_bootstrap_recv(boot, p, tag, buf, tag_size(tag)) == ncclSuccess,
                       "recv from %d tag %d", p, tag);
            for (size_t j = 0; j < tag_size(tag); j++) {
                BODY_CHECK(buf[j] == pattern(p, rank, tag, j), "data from %d tag %d", p, tag);
            }
        }
        for (int k = 0; k < 3; k++) {
            int v = -1;
            BODY_CHECK(br_bootstrap_recv(boot, p, 1000, &v, sizeof(v)) == ncclSuccess, "recv");
            BODY_CHECK(v == k, "message %d of tag 1000 from %d came as %d", k, p, v);
        }
        BODY_CHECK(br_bootstrap_recv(boot, p, -5, buf, a->big) == ncclSuccess, "big recv");
        for (size_t j = 0; j < a->big; j++) {
            BODY_CHECK(buf[j] == pattern(p, rank, 2000, j), "big data from %d at %zu", p, j);
        }
    }
out:
    return ret;
}

/* Every rank sends everything to everyone (itself included) before receiving anything:
 * with multi-megabyte messages this deadlocks unless sends never wait for recvs. */
static int sendrecv_body(br_bootstrap_t *boot, int rank, int nranks, void *arg)
{
    const sendrecv_arg_t *a = arg;
    unsigned char *buf = malloc(a->big > 300 ? a->big : 300);
    int ret = 0;

    BODY_CHECK(buf != NULL, "out of memory");
    BODY_CHECK(send_all_peers(boot, rank, nranks, a, buf) == 0, "sends");
    BODY_CHECK(recv_all_peers(boot, rank, nranks, a, buf) == 0, "recvs");
    /* A size mismatch is an error, not a truncation. */
    BODY_CHECK(br_bootstrap_send(boot, rank, 77, buf, 8) == ncclSuccess, "self send");
    BODY_CHECK(br_bootstrap_recv(boot, rank, 77, buf, 4) != ncclSuccess, "size mismatch");
    BODY_CHECK(br_bootstrap_barrier(boot) == ncclSuccess, "final barrier");
out:
    free(buf);
    return ret;
}

START_TEST(test_sendrecv_threads)
{
    sendrecv_arg_t a = {.ntags = 20, .big = 4u << 20};
    run_threads(4, sendrecv_body, &a);
}
END_TEST

START_TEST(test_sendrecv_procs)
{
    sendrecv_arg_t a = {.ntags = 20, .big = 4u << 20};
    run_procs(3, sendrecv_body, &a);
}
END_TEST

/* Connection setup at scale: 8 ranks, 64 small messages to every peer. */
START_TEST(test_sendrecv_many)
{
    sendrecv_arg_t a = {.ntags = 64, .big = 1000};
    double t0 = now_s();
    run_threads(8, sendrecv_body, &a);
    ck_assert_msg(now_s() - t0 < 20.0, "8 ranks x 64 messages took %.1f s", now_s() - t0);
}
END_TEST

/* Several threads of one rank sending to the same peer at once. */
typedef struct {
    br_bootstrap_t *boot;
    int base;
    int ret;
} sender_t;

static void *sender_thread(void *p)
{
    sender_t *s = p;
    for (int k = 0; k < 50; k++) {
        int v = s->base + k;
        if (br_bootstrap_send(s->boot, 1, s->base, &v, sizeof(v)) != ncclSuccess) {
            s->ret = 1;
        }
    }
    return NULL;
}

static int concurrent_body(br_bootstrap_t *boot, int rank, int nranks, void *arg)
{
    int ret = 0;

    (void)nranks;
    (void)arg;
    if (rank == 0) {
        pthread_t th[4];
        sender_t s[4];
        for (int t = 0; t < 4; t++) {
            s[t] = (sender_t){.boot = boot, .base = (t + 1) * 1000, .ret = 0};
            pthread_create(&th[t], NULL, sender_thread, &s[t]);
        }
        for (int t = 0; t < 4; t++) {
            pthread_join(th[t], NULL);
            BODY_CHECK(s[t].ret == 0, "sender thread %d", t);
        }
    } else {
        for (int t = 3; t >= 0; t--) {
            for (int k = 0; k < 50; k++) {
                int v = -1, base = (t + 1) * 1000;
                BODY_CHECK(br_bootstrap_recv(boot, 0, base, &v, sizeof(v)) == ncclSuccess, "recv");
                BODY_CHECK(v == base + k, "got %d, expected %d", v, base + k);
            }
        }
    }
    BODY_CHECK(br_bootstrap_barrier(boot) == ncclSuccess, "barrier");
out:
    return ret;
}

START_TEST(test_send_concurrent_threads)
{
    run_threads(2, concurrent_body, NULL);
}
END_TEST

/* ---- abort ---- */

static int abort_body(br_bootstrap_t *boot, int rank, int nranks, void *arg)
{
    int ret = 0, from = -1, ready = 0;
    char reason[128] = "";

    (void)arg;
    if (rank == 0) {
        /* Notify only once everyone is past init and waiting for it. */
        for (int p = 1; p < nranks; p++) {
            BODY_CHECK(br_bootstrap_recv(boot, p, 9, &ready, sizeof(ready)) == ncclSuccess,
                       "ready from %d", p);
        }
        BODY_CHECK(!br_bootstrap_poll_abort(boot, &from, reason, sizeof(reason)), "early abort");
        br_bootstrap_abort_notify(boot, "rank 0 hit a test failure");
        goto out;
    }
    BODY_CHECK(br_bootstrap_send(boot, 0, 9, &ready, sizeof(ready)) == ncclSuccess, "ready");
    for (double t0 = now_s(); !br_bootstrap_poll_abort(boot, &from, reason, sizeof(reason));) {
        BODY_CHECK(now_s() - t0 < 10.0, "no abort notice within 10 s");
        sleep_ms(1);
    }
    BODY_CHECK(from == 0, "abort from %d", from);
    BODY_CHECK(strstr(reason, "test failure") != NULL, "reason '%s'", reason);
    /* A rank waiting on a peer fails at once after an abort rather than timing out. */
    {
        double t0 = now_s();
        BODY_CHECK(br_bootstrap_recv(boot, 0, 10, &ready, sizeof(ready)) == ncclRemoteError,
                   "recv after abort");
        BODY_CHECK(now_s() - t0 < 5.0, "recv after abort took %.1f s", now_s() - t0);
    }
out:
    return ret;
}

START_TEST(test_abort_threads)
{
    run_threads(4, abort_body, NULL);
}
END_TEST

START_TEST(test_abort_procs)
{
    run_procs(3, abort_body, NULL);
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
        BODY_CHECK(br_bootstrap_send(boot, 0, 4, &v, sizeof(v)) == ncclSuccess, "ready");
        for (double t0 = now_s(); !br_bootstrap_poll_abort(boot, &from, reason, sizeof(reason));) {
            BODY_CHECK(now_s() - t0 < 10.0, "no abort notice within 10 s");
            sleep_ms(1);
        }
        BODY_CHECK(from == 0, "abort from %d", from);
        goto out;
    }
    BODY_CHECK(br_bootstrap_recv(boot, 1, 4, &v, sizeof(v)) == ncclSuccess, "ready");
    BODY_CHECK(br_bootstrap_recv(boot, 2, 3, &v, sizeof(v)) == ncclSuccess, "bye");
    /* Once rank 2's connection has closed, its listener is gone too. */
    for (double t0 = now_s(); br_bootstrap_recv(boot, 2, 5, &v, sizeof(v)) != ncclRemoteError;) {
        BODY_CHECK(now_s() - t0 < 10.0, "rank 2 never went away");
    }
    {
        double t0 = now_s();
        br_bootstrap_abort_notify(boot, "rank 0 gives up");
        BODY_CHECK(now_s() - t0 < 1.5, "abort_notify took %.2f s", now_s() - t0);
    }
out:
    return ret;
}

START_TEST(test_abort_dead_peer)
{
    run_threads(3, abort_dead_body, NULL);
}
END_TEST

/* ---- unique ids ---- */

START_TEST(test_unique_id_checks)
{
    ncclUniqueId id, bad;
    br_boot_handle_t h;
    br_bootstrap_t *boot = NULL;

    memset(&bad, 0, sizeof(bad));
    ck_assert_int_eq(br_bootstrap_check_unique_id(&bad), ncclInvalidArgument);
    ck_assert_ptr_nonnull(strstr(br_log_last_error(), "all zeros"));
    ck_assert_int_eq(br_bootstrap_init(&bad, 0, 1, &boot), ncclInvalidArgument);
    ck_assert_ptr_null(boot);

    ck_assert_int_eq(br_bootstrap_get_unique_id(&id), ncclSuccess);
    ck_assert_int_eq(br_bootstrap_check_unique_id(&id), ncclSuccess);
    memcpy(&h, id.internal, sizeof(h));
    ck_assert(h.magic == BR_BOOT_ID_MAGIC);
    ck_assert(h.secret != 0);
    ck_assert_int_eq(h.root.sa.sa_family, AF_INET);
    ck_assert_int_ne(br_socket_addr_port(&h.root), 0);

    bad = id;
    bad.internal[0] ^= 0x40; /* magic */
    ck_assert_int_eq(br_bootstrap_check_unique_id(&bad), ncclInvalidArgument);
    ck_assert_ptr_nonnull(strstr(br_log_last_error(), "magic"));
    bad = id;
    memset(&((br_boot_handle_t *)(void *)bad.internal)->root, 0, sizeof(br_socket_addr_t));
    ck_assert_int_eq(br_bootstrap_check_unique_id(&bad), ncclInvalidArgument);
    ck_assert_ptr_nonnull(strstr(br_log_last_error(), "family"));
    bad = id;
    bad.internal[100] = 1;
    ck_assert_int_eq(br_bootstrap_check_unique_id(&bad), ncclInvalidArgument);

    /* Two ids never share a secret or a root. */
    ck_assert_int_eq(br_bootstrap_get_unique_id(&bad), ncclSuccess);
    ck_assert(memcmp(&bad, &id, sizeof(id)) != 0);
}
END_TEST

/* Single-rank communicators need no network partner but still use the root. */
START_TEST(test_single_rank)
{
    run_threads(1, sendrecv_body, &(sendrecv_arg_t){.ntags = 3, .big = 10});
}
END_TEST

/* ---- intruders ---- */

static int raw_connect(const br_socket_addr_t *addr, br_socket_addr_t *local_p)
{
    int fd = -1;
    socklen_t len = sizeof(*local_p);

    if (br_socket_connect(addr, br_time_ns() + 5000000000ull, &fd) != ncclSuccess) {
        return -1;
    }
    memset(local_p, 0, sizeof(*local_p));
    getsockname(fd, &local_p->sa, &len);
    return fd;
}

/* Wait until the process's last WARN mentions both strings. */
static int wait_warning(const char *a, const char *b)
{
    for (double t0 = now_s(); now_s() - t0 < 10.0; sleep_ms(5)) {
        const char *e = br_log_last_error();
        if (strstr(e, a) != NULL && strstr(e, b) != NULL) {
            return 1;
        }
    }
    return 0;
}

START_TEST(test_root_drops_bad_secret)
{
    ncclUniqueId id;
    br_boot_handle_t h;
    br_socket_addr_t local;
    char junk[64], text[BR_SOCKET_ADDR_STRLEN];
    int fd;

    ck_assert_int_eq(br_bootstrap_get_unique_id(&id), ncclSuccess);
    memcpy(&h, id.internal, sizeof(h));
    fd = raw_connect(&h.root, &local);
    ck_assert_int_ge(fd, 0);
    memset(junk, 0x55, sizeof(junk));
    ck_assert_int_eq(br_socket_send_all(fd, junk, sizeof(junk), br_time_ns() + 1000000000ull),
                     ncclSuccess);
    br_socket_addr_str(&local, text, sizeof(text));
    ck_assert_msg(wait_warning("did not present the communicator's secret", text),
                  "no warning naming %s; last error: %s", text, br_log_last_error());
    close(fd);
    /* A connection that closes before saying anything is dropped too. */
    fd = raw_connect(&h.root, &local);
    ck_assert_int_ge(fd, 0);
    close(fd);
    br_socket_addr_str(&local, text, sizeof(text));
    ck_assert_msg(wait_warning("did not present the communicator's secret", text),
                  "no warning naming %s; last error: %s", text, br_log_last_error());
    /* ... and the root still serves the real ranks. */
    {
        rank_job_t jobs[3];
        for (int r = 0; r < 3; r++) {
            jobs[r] = (rank_job_t){.id = id, .rank = r, .nranks = 3, .fn = allgather_body};
        }
        run_jobs(jobs, 3);
        for (int r = 0; r < 3; r++) {
            ck_assert_msg(jobs[r].init_res == ncclSuccess && jobs[r].fn_ret == 0,
                          "rank %d: %d/%d %s", r, jobs[r].init_res, jobs[r].fn_ret, jobs[r].err);
        }
    }
}
END_TEST

/* Rank 0 sends junk to rank 1's listener, then the two still exchange messages. */
static int listener_intruder_body(br_bootstrap_t *boot, int rank, int nranks, void *arg)
{
    int ret = 0, v = 0, fd = -1;
    char text[BR_SOCKET_ADDR_STRLEN];
    br_socket_addr_t local;

    (void)nranks;
    (void)arg;
    if (rank == 0) {
        fd = raw_connect(&boot->peers[1].info.addr, &local);
        BODY_CHECK(fd >= 0, "raw connect");
        BODY_CHECK(br_socket_send_all(fd, "not the secret!!", 16, br_time_ns() + 1000000000ull) ==
                       ncclSuccess,
                   "junk");
        br_socket_addr_str(&local, text, sizeof(text));
        BODY_CHECK(wait_warning("did not present the communicator's secret", text),
                   "no warning naming %s; last error: %s", text, br_log_last_error());
        BODY_CHECK(br_bootstrap_send(boot, 1, 7, &v, sizeof(v)) == ncclSuccess, "send");
        BODY_CHECK(br_bootstrap_recv(boot, 1, 8, &v, sizeof(v)) == ncclSuccess, "recv");
        BODY_CHECK(v == 42, "reply %d", v);
    } else {
        BODY_CHECK(br_bootstrap_recv(boot, 0, 7, &v, sizeof(v)) == ncclSuccess, "recv");
        v = 42;
        BODY_CHECK(br_bootstrap_send(boot, 0, 8, &v, sizeof(v)) == ncclSuccess, "send");
    }
out:
    if (fd >= 0) {
        close(fd);
    }
    return ret;
}

START_TEST(test_listener_drops_bad_secret)
{
    run_threads(2, listener_intruder_body, NULL);
}
END_TEST

/* ---- user errors the root catches ---- */

START_TEST(test_nranks_mismatch)
{
    rank_job_t jobs[2];
    ncclUniqueId id;

    ck_assert_int_eq(br_bootstrap_get_unique_id(&id), ncclSuccess);
    jobs[0] = (rank_job_t){.id = id, .rank = 0, .nranks = 2};
    jobs[1] = (rank_job_t){.id = id, .rank = 1, .nranks = 3, .delay_ms = 50};
    run_jobs(jobs, 2);
    for (int r = 0; r < 2; r++) {
        ck_assert_int_eq(jobs[r].init_res, ncclInvalidUsage);
        ck_assert_msg(strstr(jobs[r].err, "disagree on the number of ranks") != NULL &&
                          strstr(jobs[r].err, "rank 0") != NULL &&
                          strstr(jobs[r].err, "rank 1") != NULL,
                      "rank %d: %s", r, jobs[r].err);
        ck_assert_msg(jobs[r].secs < 10.0, "took %.1f s", jobs[r].secs);
    }
}
END_TEST

START_TEST(test_duplicate_rank)
{
    rank_job_t jobs[2];
    ncclUniqueId id;

    ck_assert_int_eq(br_bootstrap_get_unique_id(&id), ncclSuccess);
    jobs[0] = (rank_job_t){.id = id, .rank = 1, .nranks = 3};
    jobs[1] = (rank_job_t){.id = id, .rank = 1, .nranks = 3, .delay_ms = 50};
    run_jobs(jobs, 2);
    for (int r = 0; r < 2; r++) {
        ck_assert_int_eq(jobs[r].init_res, ncclInvalidUsage);
        ck_assert_msg(strstr(jobs[r].err, "rank 1 checked in twice") != NULL, "%s", jobs[r].err);
    }
}
END_TEST

/* ---- NCCL_COMM_ID ---- */

static int free_port(void)
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

START_TEST(test_comm_id)
{
    char text[64];
    ncclUniqueId id, id2;
    br_boot_handle_t h;
    rank_job_t jobs[4];
    const char *seen;

    snprintf(text, sizeof(text), "127.0.0.1:%d", free_port());
    setenv("NCCL_COMM_ID", text, 1);
    seen = BR_PARAM_STR(COMM_ID);
    if (seen == NULL || strcmp(seen, text) != 0) {
        /* Parameters load once per process: only a fresh (forked) test can set one. */
        fprintf(stderr, "test_comm_id: parameters already loaded (CK_FORK=no?): not run\n");
        return;
    }
    ck_assert_int_eq(br_bootstrap_get_unique_id(&id), ncclSuccess);
    ck_assert_int_eq(br_bootstrap_check_unique_id(&id), ncclSuccess);
    memcpy(&h, id.internal, sizeof(h));
    ck_assert_uint_eq(h.flags & BR_BOOT_FLAG_COMM_ID, BR_BOOT_FLAG_COMM_ID);
    /* Every process derives the same id from the same NCCL_COMM_ID. */
    ck_assert_int_eq(br_bootstrap_get_unique_id(&id2), ncclSuccess);
    ck_assert(memcmp(&id, &id2, sizeof(id)) == 0);

    /* Threads, with rank 0 (the root's host) last to start: the others retry. */
    for (int r = 0; r < 4; r++) {
        jobs[r] = (rank_job_t){
            .id = id, .rank = r, .nranks = 4, .fn = allgather_body, .delay_ms = r == 0 ? 300 : 0};
    }
    run_jobs(jobs, 4);
    for (int r = 0; r < 4; r++) {
        ck_assert_msg(jobs[r].init_res == ncclSuccess && jobs[r].fn_ret == 0, "rank %d: %s", r,
                      jobs[r].err);
    }
    /* Then processes, on the same port again. The first root thread is detached and may
     * still be freeing its memory: give it time to exit, because forking while another
     * thread holds AddressSanitizer's allocator lock deadlocks the child (glibc's malloc
     * has fork handlers, ASan's in GCC 12 does not). */
    sleep_ms(200);
    run_procs_id(&id, 3, allgather_body, NULL);
}
END_TEST

/* ---- failures that take a timeout (BRAID_BOOTSTRAP_TIMEOUT=3) ---- */

START_TEST(test_missing_rank)
{
    rank_job_t jobs[3];
    ncclUniqueId id;
    int timeout = br_boot_timeout_s();

    ck_assert_int_eq(br_bootstrap_get_unique_id(&id), ncclSuccess);
    for (int r = 0; r < 3; r++) {
        jobs[r] = (rank_job_t){.id = id, .rank = r, .nranks = 4, .fn = allgather_body};
    }
    run_jobs(jobs, 3);
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
    rank_job_t job;
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
    run_jobs(&job, 1);
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
    rank_job_t job;
    int timeout = br_boot_timeout_s();

    memset(&h, 0, sizeof(h));
    h.magic = BR_BOOT_ID_MAGIC;
    h.secret = 0x1234;
    h.root.sin.sin_family = AF_INET;
    h.root.sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    h.root.sin.sin_port = htons((uint16_t)free_port());
    memset(&job, 0, sizeof(job));
    memcpy(job.id.internal, &h, sizeof(h));
    job.rank = 1;
    job.nranks = 2;
    run_jobs(&job, 1);
    ck_assert_int_eq(job.init_res, ncclSystemError);
    ck_assert_msg(strstr(job.err, "could not reach the root") != NULL, "%s", job.err);
    ck_assert_msg(job.secs < timeout + 2.0, "failed after %.1f s (timeout %d s)", job.secs,
                  timeout);
}
END_TEST

/* ---- resources ---- */

static int count_fds(void)
{
    char path[64];
    int n = 0;

    for (int fd = 0; fd < 4096; fd++) {
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        n += access(path, F_OK) == 0;
    }
    return n;
}

/* Init, traffic and close leave no descriptor behind (the detached root closes its own
 * once it has answered, so wait for it a little). */
START_TEST(test_no_fd_leak)
{
    sendrecv_arg_t a = {.ntags = 4, .big = 100};
    int before = count_fds(), after = -1;

    run_threads(4, sendrecv_body, &a);
    run_threads(3, abort_body, NULL);
    for (double t0 = now_s(); now_s() - t0 < 5.0; sleep_ms(10)) {
        after = count_fds();
        if (after == before) {
            break;
        }
    }
    ck_assert_int_eq(after, before);
}
END_TEST

/* ---- socket helpers ---- */

START_TEST(test_socket_addr_parse)
{
    br_socket_addr_t a;
    char text[BR_SOCKET_ADDR_STRLEN];

    ck_assert_int_eq(br_socket_addr_parse("127.0.0.1:1234", &a), ncclSuccess);
    ck_assert_str_eq(br_socket_addr_str(&a, text, sizeof(text)), "127.0.0.1:1234");
    ck_assert_int_eq(br_socket_addr_parse("[::1]:80", &a), ncclSuccess);
    ck_assert_int_eq(a.sa.sa_family, AF_INET6);
    ck_assert_str_eq(br_socket_addr_str(&a, text, sizeof(text)), "[::1]:80");
    ck_assert_int_eq(br_socket_addr_parse("::1:81", &a), ncclSuccess);
    ck_assert_int_eq(br_socket_addr_port(&a), 81);
    ck_assert_int_eq(br_socket_addr_parse("localhost:5000", &a), ncclSuccess);
    ck_assert_int_eq(br_socket_addr_port(&a), 5000);
    ck_assert(br_socket_addr_is_valid(&a));
    ck_assert_int_eq(br_socket_addr_parse("127.0.0.1", &a), ncclInvalidArgument);
    ck_assert_int_eq(br_socket_addr_parse("127.0.0.1:0", &a), ncclInvalidArgument);
    ck_assert_int_eq(br_socket_addr_parse("127.0.0.1:70000", &a), ncclInvalidArgument);
    ck_assert_int_eq(br_socket_addr_parse(":80", &a), ncclInvalidArgument);
    ck_assert_int_eq(br_socket_addr_parse("[::1:80", &a), ncclInvalidArgument);
    ck_assert_int_eq(br_socket_addr_parse("no.such.host.invalid:80", &a), ncclInvalidArgument);
}
END_TEST

START_TEST(test_socket_iface_and_io)
{
    br_socket_addr_t addr, bound, peer;
    char name[BR_SOCKET_IFNAME_LEN];
    int lfd = -1, cfd = -1, afd = -1;
    char buf[8];
    double t0;

    /* The CTest environment sets NCCL_SOCKET_IFNAME=lo. */
    ck_assert_int_eq(br_socket_iface_pick(NULL, name, sizeof(name), &addr), ncclSuccess);
    ck_assert_str_eq(name, "lo");
    ck_assert_int_eq(br_socket_listen(&addr, &lfd, &bound), ncclSuccess);
    ck_assert(br_socket_addr_is_valid(&bound));
    /* Nobody connects: accept gives up at its deadline. */
    t0 = now_s();
    ck_assert_int_eq(br_socket_accept(lfd, br_time_ns() + 200000000ull, &afd, &peer),
                     ncclRemoteError);
    ck_assert_int_eq(errno, ETIMEDOUT);
    ck_assert(now_s() - t0 >= 0.15);
    ck_assert_int_eq(br_socket_connect(&bound, br_time_ns() + 1000000000ull, &cfd), ncclSuccess);
    ck_assert_int_eq(br_socket_accept(lfd, br_time_ns() + 1000000000ull, &afd, &peer), ncclSuccess);
    ck_assert_int_eq(br_socket_send_all(cfd, "abcd", 4, br_time_ns() + 1000000000ull), ncclSuccess);
    ck_assert_int_eq(br_socket_recv_all(afd, buf, 4, br_time_ns() + 1000000000ull), ncclSuccess);
    ck_assert(memcmp(buf, "abcd", 4) == 0);
    /* Nothing more is coming: recv_all times out; then the peer closes: reset. */
    ck_assert_int_eq(br_socket_recv_all(afd, buf, 4, br_time_ns() + 100000000ull), ncclRemoteError);
    ck_assert_int_eq(errno, ETIMEDOUT);
    br_socket_close(&cfd);
    ck_assert_int_eq(cfd, -1);
    ck_assert_int_eq(br_socket_recv_all(afd, buf, 4, br_time_ns() + 1000000000ull),
                     ncclRemoteError);
    ck_assert_int_eq(errno, ECONNRESET);
    br_socket_close(&afd);
    br_socket_close(&lfd);
}
END_TEST

static Suite *bootstrap_suite(void)
{
    Suite *s = suite_create("bootstrap");
    TCase *tc;

    tc = tcase_create("unique_id");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_unique_id_checks);
    tcase_add_test(tc, test_socket_addr_parse);
    tcase_add_test(tc, test_socket_iface_and_io);
    suite_add_tcase(s, tc);

    tc = tcase_create("allgather");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_single_rank);
    tcase_add_loop_test(tc, test_allgather_threads, 1, 9);
    tcase_add_loop_test(tc, test_allgather_procs, 1, 9);
    tcase_add_test(tc, test_barrier_threads);
    tcase_add_test(tc, test_barrier_procs);
    suite_add_tcase(s, tc);

    tc = tcase_create("sendrecv");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_sendrecv_threads);
    tcase_add_test(tc, test_sendrecv_procs);
    tcase_add_test(tc, test_sendrecv_many);
    tcase_add_test(tc, test_send_concurrent_threads);
    tcase_add_test(tc, test_no_fd_leak);
    suite_add_tcase(s, tc);

    tc = tcase_create("abort");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_abort_threads);
    tcase_add_test(tc, test_abort_procs);
    tcase_add_test(tc, test_abort_dead_peer);
    suite_add_tcase(s, tc);

    tc = tcase_create("security");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_root_drops_bad_secret);
    tcase_add_test(tc, test_listener_drops_bad_secret);
    tcase_add_test(tc, test_nranks_mismatch);
    tcase_add_test(tc, test_duplicate_rank);
    suite_add_tcase(s, tc);

    tc = tcase_create("comm_id");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_comm_id);
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
    SRunner *sr = srunner_create(bootstrap_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
