/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Check suite "api_fail": what the other ranks see when one goes wrong. Ranks are
 * forked processes; the parent watches them with deadlines, so a library that hangs
 * fails the test with what each rank was doing.
 *   kill      a rank is SIGKILLed in the middle of a loop of large AllReduces: every
 *             other rank gets an error (not ncclSuccess) within 60 s, whose
 *             ncclGetLastError text names the dead rank; the failure sticks
 *             (ncclCommGetAsyncError, the next call fails at once) and the communicator
 *             can be aborted (BRAID_TIMEOUT unset: detection must not rely on it)
 *   missing   a rank never calls ncclCommInitRank: the others' init fails within
 *             BRAID_BOOTSTRAP_TIMEOUT (set to 3 s by CTest) plus a margin, naming it
 *   mismatch  ranks make different calls (count, collective, datatype, and sizes that
 *             take different paths on one host): with BRAID_TIMEOUT=5 every rank returns
 *             an error instead of hanging; a rank that makes no call at all: the other
 *             fails after BRAID_TIMEOUT, naming it (and with BRAID_WAIT_WARN below it and
 *             NCCL_DEBUG unset, first prints a line on its own naming it); a silent rank
 *             behind a rank one call ahead: its timeout follows the waits into the call
 *             behind and names the silent rank; a Broadcast root
 *             whose buffer is not
 *             readable: the ranks that read it in place fail naming it, and so does it
 *   abort     another thread aborts, revokes or destroys a communicator that a blocked
 *             call (AllReduce, Recv) or an open group is using: the call fails within 1 s
 * CTest runs each TCase on its own (CK_RUN_CASE), over shm and over the socket plugin.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "brt_launch.h"

#define KILL_NRANKS 4
#define KILL_RANK 2
#define KILL_COUNT ((size_t)4 << 20) /* floats per AllReduce: 16 MiB */
#define DETECT_LIMIT 60.0            /* seconds a survivor may take to see the death */

/* Shared with the parent through the report slots: progress = iterations done,
 * result = the failing call's code, t_mark = when it failed, msg = its text. */
static int body_allreduce_loop(brt_rank_ctx_t *ctx)
{
    ncclComm_t comm;
    float *buf;
    double start;

    if (brt_rank_init(ctx, &comm) != ncclSuccess) {
        return 1;
    }
    buf = malloc(KILL_COUNT * sizeof(float));
    if (buf == NULL) {
        brt_fail(ctx, "out of memory");
        return 1;
    }
    for (size_t i = 0; i < KILL_COUNT; i++) {
        buf[i] = 1.0f;
    }
    start = brt_now();
    for (int it = 0;; it++) {
        brt_doing(ctx, "AllReduce iteration %d", it);
        ncclResult_t res = ncclAllReduce(buf, buf, KILL_COUNT, ncclFloat, ncclMax, comm, NULL);
        if (res != ncclSuccess) {
            ctx->report->t_mark = brt_now();
            ctx->report->result = res;
            snprintf(ctx->report->msg, sizeof(ctx->report->msg), "%s", ncclGetLastError(comm));
            break;
        }
        __atomic_store_n(&ctx->report->progress, it + 1, __ATOMIC_RELEASE);
        if (brt_now() - start > 600) {
            brt_fail(ctx, "no error after 600 s of AllReduces");
            return 1;
        }
    }
    /* The failure sticks: the communicator reports it, and the next call fails at once. */
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(comm, &async) != ncclSuccess || async == ncclSuccess) {
        brt_fail(ctx, "ncclCommGetAsyncError after the failure reports %d", (int)async);
        return 1;
    }
    brt_doing(ctx, "an AllReduce on the failed communicator");
    double t0 = brt_now();
    ncclResult_t again = ncclAllReduce(buf, buf, 16, ncclFloat, ncclSum, comm, NULL);
    if (again == ncclSuccess || brt_now() - t0 > 10) {
        brt_fail(ctx, "AllReduce on the failed communicator returned %d after %.1f s", (int)again,
                 brt_now() - t0);
        return 1;
    }
    brt_doing(ctx, "ncclCommAbort after the error");
    t0 = brt_now();
    ncclCommAbort(comm);
    if (brt_now() - t0 > 30) {
        brt_fail(ctx, "ncclCommAbort after the error took %.1f s", brt_now() - t0);
        return 1;
    }
    free(buf);
    return 0;
}

START_TEST(test_rank_killed_mid_collective)
{
    brt_procs_t p;
    char out[16384];
    int started = 0;
    double t_kill, deadline = brt_now() + 120 * brt_time_scale();

    ck_assert_int_eq(brt_procs_start(&p, KILL_NRANKS, body_allreduce_loop, NULL, out, sizeof(out)),
                     0);
    /* Wait until every rank is into the loop, then kill one during a collective. */
    while (!started && brt_now() < deadline) {
        started = 1;
        for (int r = 0; r < KILL_NRANKS; r++) {
            started &= __atomic_load_n(&p.reports[r].progress, __ATOMIC_ACQUIRE) >= 2;
            if (brt_procs_exited(&p, r)) {
                started = 0;
                deadline = 0; /* a rank ended early: report below */
            }
        }
        brt_sleep_ms(5);
    }
    if (!started) {
        brt_procs_wait(&p, brt_now(), 0, out, sizeof(out), 0);
        ck_abort_msg("the ranks did not get going: %s", brt_clip(out, 3000));
    }
    brt_sleep_ms(20);
    t_kill = brt_now();
    brt_procs_kill(&p, KILL_RANK);
    int bad = brt_procs_wait(&p, t_kill + DETECT_LIMIT, 1u << KILL_RANK, out, sizeof(out), 1);
    ck_assert_msg(!bad, "after SIGKILL of rank %d: %s", KILL_RANK, brt_clip(out, 3000));
    for (int r = 0; r < KILL_NRANKS; r++) {
        if (r != KILL_RANK) {
            fprintf(stderr, "rank %d: error %d after %.2f s: %s\n", r, p.reports[r].result,
                    p.reports[r].t_mark - t_kill, p.reports[r].msg);
        }
    }
    for (int r = 0; r < KILL_NRANKS; r++) {
        const brt_report_t *rep = &p.reports[r];
        if (r == KILL_RANK) {
            continue;
        }
        ck_assert_msg(rep->result != ncclSuccess, "rank %d saw no error", r);
        ck_assert_msg(rep->t_mark - t_kill < DETECT_LIMIT, "rank %d took %.1f s to see the death",
                      r, rep->t_mark - t_kill);
        ck_assert_msg(brt_text_names_rank(rep->msg, KILL_RANK),
                      "rank %d's ncclGetLastError does not name rank %d: \"%s\"", r, KILL_RANK,
                      rep->msg);
    }
    brt_procs_free(&p);
}
END_TEST

#define MISSING_NRANKS 3
#define MISSING_RANK 1

static int body_missing(brt_rank_ctx_t *ctx)
{
    ncclComm_t comm;
    if (ctx->rank == MISSING_RANK) {
        brt_doing(ctx, "staying away from init");
        for (;;) {
            brt_sleep_ms(1000); /* killed by the parent */
        }
    }
    double t0 = brt_now();
    brt_doing(ctx, "ncclCommInitRank without rank %d", MISSING_RANK);
    ncclResult_t res = ncclCommInitRank(&comm, ctx->nranks, ctx->id, ctx->rank);
    ctx->report->t_mark = brt_now() - t0;
    ctx->report->result = res;
    snprintf(ctx->report->msg, sizeof(ctx->report->msg), "%s", ncclGetLastError(NULL));
    if (res == ncclSuccess) {
        ncclCommAbort(comm);
    }
    return 0;
}

START_TEST(test_rank_never_joins)
{
    brt_procs_t p;
    char out[16384];
    const char *env = getenv("BRAID_BOOTSTRAP_TIMEOUT");
    double limit = (env != NULL ? atof(env) : 60.0) + 20.0;

    ck_assert_int_eq(brt_procs_start(&p, MISSING_NRANKS, body_missing, NULL, out, sizeof(out)), 0);
    /* The others return by themselves; then the absent rank is killed. */
    double deadline = brt_now() + limit * brt_time_scale();
    for (int done = 0; !done && brt_now() < deadline;) {
        done = 1;
        for (int r = 0; r < MISSING_NRANKS; r++) {
            done &= r == MISSING_RANK || brt_procs_exited(&p, r);
        }
        brt_sleep_ms(10);
    }
    brt_procs_kill(&p, MISSING_RANK);
    int bad = brt_procs_wait(&p, brt_now() + 5, 1u << MISSING_RANK, out, sizeof(out), 1);
    ck_assert_msg(!bad, "init without rank %d did not end within %.0f s: %s", MISSING_RANK,
                  limit * brt_time_scale(), brt_clip(out, 3000));
    for (int r = 0; r < MISSING_NRANKS; r++) {
        if (r != MISSING_RANK) {
            fprintf(stderr, "rank %d: init returned %d after %.1f s: %s\n", r, p.reports[r].result,
                    p.reports[r].t_mark, p.reports[r].msg);
        }
    }
    for (int r = 0; r < MISSING_NRANKS; r++) {
        const brt_report_t *rep = &p.reports[r];
        if (r == MISSING_RANK) {
            continue;
        }
        ck_assert_msg(rep->result != ncclSuccess, "rank %d: init succeeded without rank %d", r,
                      MISSING_RANK);
        ck_assert_msg(brt_text_names_rank(rep->msg, MISSING_RANK),
                      "rank %d: the error does not name the missing rank %d: \"%s\"", r,
                      MISSING_RANK, rep->msg);
    }
    brt_procs_free(&p);
}
END_TEST

/* Rank 0 and rank 1 make different calls; variant _i picks how they differ. */
static int body_mismatch(brt_rank_ctx_t *ctx)
{
    const int variant = *(const int *)ctx->arg;
    const size_t big = 300000;
    ncclComm_t comm;
    float *a = calloc(big, sizeof(float)), *b = calloc(big, sizeof(float));
    ncclResult_t res;

    if (a == NULL || b == NULL || brt_rank_init(ctx, &comm) != ncclSuccess) {
        return 1;
    }
    /* One good call first, so the connections are up. */
    res = ncclAllReduce(a, b, 1000, ncclFloat, ncclSum, comm, NULL);
    if (res != ncclSuccess) {
        brt_fail(ctx, "the matched AllReduce failed: %s", ncclGetLastError(comm));
        return 1;
    }
    double t0 = brt_now();
    brt_doing(ctx, "the mismatched call (variant %d)", variant);
    if (variant == 0) { /* counts differ */
        res = ncclAllReduce(a, b, ctx->rank == 0 ? 1000 : big, ncclFloat, ncclSum, comm, NULL);
    } else if (variant == 1) { /* collectives differ */
        res = ctx->rank == 0 ? ncclAllReduce(a, b, 4096, ncclFloat, ncclSum, comm, NULL)
                             : ncclBroadcast(a, b, 4096, ncclFloat, 0, comm, NULL);
    } else if (variant == 2) { /* types differ, same byte count */
        res = ncclAllReduce(a, b, ctx->rank == 0 ? 8192 : 4096,
                            ctx->rank == 0 ? ncclFloat16 : ncclFloat, ncclSum, comm, NULL);
    } else if (variant == 3) { /* one rank's AllGather is read in place, the other's is not */
        res = ncclAllGather(a, b, ctx->rank == 0 ? 1000 : big / 2, ncclFloat, comm, NULL);
    } else { /* both read in place on one host (256 KiB to 1 MiB), counts differ */
        res = ncclBroadcast(a, b, ctx->rank == 0 ? 200000 : 100000, ncclFloat, 0, comm, NULL);
    }
    ctx->report->t_mark = brt_now() - t0;
    ctx->report->result = res;
    snprintf(ctx->report->msg, sizeof(ctx->report->msg), "%s", ncclGetLastError(comm));
    brt_doing(ctx, "ncclCommAbort after the mismatched call");
    ncclCommAbort(comm);
    free(a);
    free(b);
    return 0;
}

START_TEST(test_mismatched_calls)
{
    static const char *const what[] = {
        "counts 1000 vs 300000", "AllReduce vs Broadcast", "float16 x 8192 vs float32 x 4096",
        "AllGather counts 1000 vs 150000", "Broadcast counts 200000 vs 100000"};
    int variant = _i;
    char out[16384];
    brt_procs_t p;
    double limit = 60 * brt_time_scale();
    const char *shm_off = getenv("NCCL_SHM_DISABLE");

    /* Variants 3 and 4 are about the paths of one host (one hop, read in place); over a
     * network a Broadcast root that sent everything has nothing to fail. */
    if (variant >= 3 && shm_off != NULL && atoi(shm_off) != 0) {
        fprintf(stderr, "SKIP mismatch (%s): only with shared memory\n", what[variant]);
        return;
    }

    ck_assert_int_eq(brt_procs_start(&p, 2, body_mismatch, &variant, out, sizeof(out)), 0);
    int bad = brt_procs_wait(&p, brt_now() + limit, 0, out, sizeof(out), 1);
    ck_assert_msg(!bad, "mismatched calls (%s) did not return within %.0f s: %s", what[variant],
                  limit, brt_clip(out, 3000));
    for (int r = 0; r < 2; r++) {
        fprintf(stderr, "mismatch (%s): rank %d returned %d after %.1f s: %s\n", what[variant], r,
                p.reports[r].result, p.reports[r].t_mark, p.reports[r].msg);
    }
    for (int r = 0; r < 2; r++) {
        ck_assert_msg(p.reports[r].result != ncclSuccess,
                      "mismatched calls (%s): rank %d returned ncclSuccess", what[variant], r);
    }
    brt_procs_free(&p);
}
END_TEST

/* Can a process read a sibling's memory (process_vm_readv)? Only then do ranks of one
 * host read large inputs in place. */
static int siblings_can_read(void)
{
    static volatile uint64_t word = 0x5eed;
    int fds[2];
    pid_t a, b;
    int status = 1;

    if (pipe(fds) != 0) {
        return 0;
    }
    a = fork();
    if (a == 0) { /* the one read: waits until its reader is done */
        char c;
        close(fds[1]);
        _exit(read(fds[0], &c, 1) < 0);
    }
    b = fork();
    if (b == 0) {
        uint64_t got = 0;
        struct iovec l = {&got, sizeof(got)}, r = {(void *)&word, sizeof(got)};
        _exit(process_vm_readv(a, &l, 1, &r, 1, 0) == (ssize_t)sizeof(got) && got == word ? 0 : 1);
    }
    if (b > 0) {
        waitpid(b, &status, 0);
    }
    close(fds[0]);
    close(fds[1]);
    if (a > 0) {
        waitpid(a, NULL, 0);
    }
    return b > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* The root broadcasts in place from memory it cannot read itself (a user bug): the
 * ranks that read it in place must fail naming rank 0, and rank 0 must learn of it. */
static int body_unreadable_root(brt_rank_ctx_t *ctx)
{
    const size_t count = 128 << 10; /* 512 KiB: read in place (256 KiB to 1 MiB) */
    size_t bytes = count * sizeof(float);
    ncclComm_t comm;
    void *buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ncclResult_t res;

    if (buf == MAP_FAILED || brt_rank_init(ctx, &comm) != ncclSuccess) {
        return 1;
    }
    if (ctx->rank == 0 && mprotect(buf, bytes, PROT_NONE) != 0) {
        brt_fail(ctx, "mprotect: %s", strerror(errno));
        return 1;
    }
    double t0 = brt_now();
    brt_doing(ctx, "Broadcast from an unreadable root buffer");
    res = ncclBroadcast(buf, buf, count, ncclFloat, 0, comm, NULL);
    ctx->report->t_mark = brt_now() - t0;
    ctx->report->result = res;
    snprintf(ctx->report->msg, sizeof(ctx->report->msg), "%s", ncclGetLastError(comm));
    ncclCommAbort(comm);
    munmap(buf, bytes);
    return 0;
}

START_TEST(test_unreadable_root_buffer)
{
    const int n = 3;
    char out[16384];
    brt_procs_t p;
    const char *shm_off = getenv("NCCL_SHM_DISABLE");

    if ((shm_off != NULL && atoi(shm_off) != 0) || !siblings_can_read()) {
        fprintf(stderr, "SKIP unreadable root buffer: ranks do not read each other's memory "
                        "here (shared memory off, or process_vm_readv refused)\n");
        return;
    }
    ck_assert_int_eq(brt_procs_start(&p, n, body_unreadable_root, NULL, out, sizeof(out)), 0);
    int bad = brt_procs_wait(&p, brt_now() + 60 * brt_time_scale(), 0, out, sizeof(out), 1);
    ck_assert_msg(!bad, "Broadcast from an unreadable root buffer: %s", brt_clip(out, 3000));
    for (int r = 0; r < n; r++) {
        const brt_report_t *rep = &p.reports[r];
        fprintf(stderr, "unreadable root buffer: rank %d returned %d after %.1f s: %s\n", r,
                rep->result, rep->t_mark, rep->msg);
        ck_assert_msg(rep->result != ncclSuccess, "rank %d: the Broadcast succeeded", r);
        /* Readers name the root; the root names whichever reader told it first. */
        int named = r == 0 ? brt_text_names_rank(rep->msg, 1) || brt_text_names_rank(rep->msg, 2)
                           : brt_text_names_rank(rep->msg, 0);
        ck_assert_msg(named, "rank %d: the error does not name %s: \"%s\"", r,
                      r == 0 ? "a reader" : "rank 0", rep->msg);
    }
    ck_assert_msg(strstr(p.reports[1].msg, "buffer") != NULL,
                  "rank 1's error does not say which buffer failed: \"%s\"", p.reports[1].msg);
    brt_procs_free(&p);
}
END_TEST

/* The silent rank of the cases below: initialized, it makes no call until rank 0 is
 * done (or a minute passed), then aborts. */
static int stay_silent(brt_rank_ctx_t *ctx, ncclComm_t comm)
{
    brt_doing(ctx, "staying silent");
    double until = brt_now() + 60 * brt_time_scale();
    while (!__atomic_load_n(&ctx->all[0].done, __ATOMIC_ACQUIRE) && brt_now() < until) {
        brt_sleep_ms(20);
    }
    ncclCommAbort(comm);
    return 0;
}

/* Run n ranks of body in processes and wait for them (BRAID_TIMEOUT, *timeout_p, plus a
 * margin): what brt_procs_wait says (nonzero: a rank hung or failed, told in out), or -1
 * without BRAID_TIMEOUT, when nothing would bound the waits (nothing started). */
static int run_silent(brt_procs_t *p, int n, brt_rank_fn_t body, double *timeout_p, char *out,
                      size_t cap)
{
    const char *env = getenv("BRAID_TIMEOUT");
    double timeout = env != NULL ? atof(env) : 0.0;

    *timeout_p = timeout;
    if (timeout <= 0) {
        fprintf(stderr, "BRAID_TIMEOUT is not set: nothing bounds a wait on a silent peer\n");
        return -1;
    }
    ck_assert_int_eq(brt_procs_start(p, n, body, NULL, out, cap), 0);
    return brt_procs_wait(p, brt_now() + (timeout + 30) * brt_time_scale(), 0, out, cap, 1);
}

/* Rank 1 stays alive but makes no call: rank 0's AllReduce fails after BRAID_TIMEOUT,
 * naming rank 1, instead of waiting forever. */
static int body_silent_peer(brt_rank_ctx_t *ctx)
{
    ncclComm_t comm;
    float a[1024] = {0};
    ncclResult_t res;

    if (brt_rank_init(ctx, &comm) != ncclSuccess) {
        return 1;
    }
    if (ctx->rank == 1) {
        return stay_silent(ctx, comm);
    }
    double t0 = brt_now();
    /* What the wait prints on its own (BRAID_WAIT_WARN, NCCL_DEBUG unset) goes to a file. */
    char path[] = "/tmp/braid-wait-warn-XXXXXX";
    int fd = mkstemp(path), saved = dup(2);
    if (fd >= 0 && saved >= 0) {
        fflush(stderr);
        dup2(fd, 2);
    }
    brt_doing(ctx, "AllReduce that rank 1 never joins");
    res = ncclAllReduce(a, a, 1024, ncclFloat, ncclSum, comm, NULL);
    ctx->report->t_mark = brt_now() - t0;
    ctx->report->result = res;
    snprintf(ctx->report->msg, sizeof(ctx->report->msg), "%s", ncclGetLastError(comm));
    if (fd >= 0 && saved >= 0) {
        fflush(stderr);
        dup2(saved, 2);
        close(saved);
        ssize_t n = pread(fd, ctx->report->doing, sizeof(ctx->report->doing) - 1, 0);
        ctx->report->doing[n > 0 ? n : 0] = '\0';
        close(fd);
        unlink(path);
    }
    __atomic_store_n(&ctx->report->done, 1, __ATOMIC_RELEASE);
    ncclCommAbort(comm);
    return 0;
}

START_TEST(test_silent_peer)
{
    double timeout;
    char out[16384];
    brt_procs_t p;
    int bad = run_silent(&p, 2, body_silent_peer, &timeout, out, sizeof(out));

    if (bad < 0) {
        return;
    }
    const brt_report_t *rep = &p.reports[0];
    fprintf(stderr, "silent peer: rank 0 returned %d after %.1f s: %s\n", rep->result, rep->t_mark,
            rep->msg);
    ck_assert_msg(!bad, "a wait on a silent peer with BRAID_TIMEOUT=%g: %s", timeout,
                  brt_clip(out, 3000));
    ck_assert_msg(rep->result == ncclTimeout,
                  "rank 0's AllReduce without rank 1 returned %d, not ncclTimeout", rep->result);
    ck_assert_msg(rep->t_mark >= timeout - 0.5,
                  "rank 0 gave up after %.1f s, before BRAID_TIMEOUT=%g", rep->t_mark, timeout);
    ck_assert_msg(brt_text_names_rank(rep->msg, 1), "the timeout does not name rank 1: \"%s\"",
                  rep->msg);
    /* With BRAID_WAIT_WARN below the timeout and NCCL_DEBUG unset, the wait said so itself. */
    const char *ww = getenv("BRAID_WAIT_WARN"), *dbg = getenv("NCCL_DEBUG");
    if (ww != NULL && atof(ww) > 0 && atof(ww) < timeout && (dbg == NULL || dbg[0] == '\0')) {
        fprintf(stderr, "silent peer: rank 0 printed: %s\n", rep->doing);
        ck_assert_msg(brt_text_has(rep->doing, "no progress for") &&
                          brt_text_names_rank(rep->doing, 1),
                      "with BRAID_WAIT_WARN=%s and NCCL_DEBUG unset, rank 0's wait printed no "
                      "line naming rank 1: \"%s\"", ww, rep->doing);
    }
    brt_procs_free(&p);
}
END_TEST

/* A silent rank behind a rank that is one call ahead (chaos seed 22049). Four ranks on a
 * Ring (NCCL_ALGO=Ring): 0 -> 1 -> 2 -> 3 -> 0. In a Reduce of root 3, rank 0 only sends,
 * so it returns without rank 1, which stays silent, and waits in the next call (an
 * AllReduce) for rank 3, which waits in the Reduce for rank 2, which waits for rank 1.
 * Ranks 2 and 3 enter the Reduce SILENT_BEHIND_S later, so that they have told what they
 * wait for (halfway to BRAID_TIMEOUT) before rank 0 times out, and rank 0 times out
 * before they do: rank 0's own diagnosis must follow the waits into the Reduce and name
 * rank 1, not stop at rank 3's "waiting for data from rank 2". */
#define SILENT_BEHIND_NRANKS 4
static int body_silent_behind(brt_rank_ctx_t *ctx)
{
    ncclComm_t comm;
    float a[1024] = {0}, b[1024] = {0};
    const char *env = getenv("BRAID_TIMEOUT");
    double delay = (env != NULL ? atof(env) : 5.0) / 4;
    ncclResult_t res;

    setenv("NCCL_ALGO", "Ring", 1);
    if (brt_rank_init(ctx, &comm) != ncclSuccess) {
        return 1;
    }
    if (ctx->rank == 1) {
        return stay_silent(ctx, comm);
    }
    double t0 = brt_now();
    if (ctx->rank != 0) {
        brt_sleep_ms((int)(delay * 1000));
    }
    brt_doing(ctx, "Reduce (root 3) without rank 1");
    res = ncclReduce(a, b, 1024, ncclFloat, ncclSum, 3, comm, NULL);
    if (res == ncclSuccess && ctx->rank == 0) {
        brt_doing(ctx, "AllReduce after the Reduce, ranks 2 and 3 still in it");
        res = ncclAllReduce(a, b, 1024, ncclFloat, ncclSum, comm, NULL);
    }
    ctx->report->t_mark = brt_now() - t0;
    ctx->report->result = res;
    snprintf(ctx->report->msg, sizeof(ctx->report->msg), "%s", ncclGetLastError(comm));
    __atomic_store_n(&ctx->report->done, 1, __ATOMIC_RELEASE);
    ncclCommAbort(comm);
    return 0;
}

START_TEST(test_silent_behind)
{
    double timeout;
    char out[16384];
    brt_procs_t p;
    int bad = run_silent(&p, SILENT_BEHIND_NRANKS, body_silent_behind, &timeout, out, sizeof(out));

    if (bad < 0) {
        return;
    }
    ck_assert_msg(!bad, "a silent rank behind a rank one call ahead: %s", brt_clip(out, 3000));
    for (int r = 0; r < SILENT_BEHIND_NRANKS; r++) {
        const brt_report_t *rep = &p.reports[r];
        if (r == 1) {
            continue;
        }
        fprintf(stderr, "silent behind: rank %d returned %d after %.1f s: %s\n", r, rep->result,
                rep->t_mark, rep->msg);
        ck_assert_msg(rep->result != ncclSuccess, "rank %d: a call without rank 1 succeeded", r);
        ck_assert_msg(brt_text_names_rank(rep->msg, 1),
                      "rank %d's error does not name rank 1: \"%s\"", r, rep->msg);
    }
    /* Rank 0 timed out itself, first (not a report of rank 2 or 3, which name rank 1 from
     * their own wait). */
    ck_assert_msg(p.reports[0].result == ncclTimeout,
                  "rank 0 did not time out first on its own: \"%s\"", p.reports[0].msg);
    brt_procs_free(&p);
}
END_TEST

/*
 * Another thread ends the communicator while rank 0's first thread is blocked in a call on
 * it (how PyTorch's watchdog recovers from a hang). Rank 1 never makes the call. Variants:
 *   0  ncclCommAbort while the AllReduce waits for rank 1
 *   1  ncclCommAbort while a Recv waits for a Send that never comes
 *   2  ncclCommRevoke while the AllReduce waits, then ncclCommDestroy
 *   3  ncclCommAbort while the first thread holds a queued AllReduce in an open group; the
 *      thread then calls ncclGroupEnd, which fails instead of touching freed memory
 * The blocked call must return an error naming what happened within 1 s (scaled under
 * sanitizers), and nothing may crash; ASan checks that nothing is used after its free.
 */
#define ABORT_VARIANTS 4
#define ABORT_LIMIT 1.0 /* seconds from the abort to the blocked call's return */

typedef struct {
    ncclComm_t comm;
    int variant;
    _Atomic int stage; /* 1: about to block, 2: the comm was ended (variant 3) */
    ncclResult_t res;
    double t_return;
    char msg[1024];
} abort_job_t;

static void *abort_victim(void *arg)
{
    abort_job_t *j = arg;
    float a[256] = {0};
    ncclResult_t res;

    if (j->variant == 3) {
        ncclGroupStart();
        res = ncclAllReduce(a, a, 256, ncclFloat, ncclSum, j->comm, NULL);
        atomic_store(&j->stage, 1);
        while (atomic_load(&j->stage) != 2) {
            brt_sleep_ms(5);
        }
        res = res == ncclSuccess ? ncclGroupEnd() : res;
    } else {
        atomic_store(&j->stage, 1);
        res = j->variant == 1 ? ncclRecv(a, 256, ncclFloat, 1, j->comm, NULL)
                              : ncclAllReduce(a, a, 256, ncclFloat, ncclSum, j->comm, NULL);
    }
    j->t_return = brt_now();
    j->res = res;
    snprintf(j->msg, sizeof(j->msg), "%s", ncclGetLastError(NULL));
    return NULL;
}

static int body_abort_thread(brt_rank_ctx_t *ctx)
{
    abort_job_t j;
    pthread_t th;
    ncclResult_t res;

    memset(&j, 0, sizeof(j));
    j.variant = *(const int *)ctx->arg;
    if (brt_rank_init(ctx, &j.comm) != ncclSuccess) {
        return 1;
    }
    if (ctx->rank == 1) {
        brt_doing(ctx, "staying silent until rank 0 is done");
        double until = brt_now() + 30 * brt_time_scale();
        while (!__atomic_load_n(&ctx->all[0].done, __ATOMIC_ACQUIRE) && brt_now() < until) {
            brt_sleep_ms(20);
        }
        ncclCommAbort(j.comm);
        return 0;
    }
    brt_doing(ctx, "variant %d: a second thread blocks on the communicator", j.variant);
    if (pthread_create(&th, NULL, abort_victim, &j) != 0) {
        brt_fail(ctx, "pthread_create failed");
        __atomic_store_n(&ctx->report->done, 1, __ATOMIC_RELEASE);
        return 1;
    }
    while (atomic_load(&j.stage) < 1) {
        brt_sleep_ms(5);
    }
    brt_sleep_ms(300); /* let it block */
    brt_doing(ctx, "variant %d: ending the communicator from the main thread", j.variant);
    double t0 = brt_now();
    if (j.variant == 2) {
        res = ncclCommRevoke(j.comm, NCCL_REVOKE_DEFAULT);
        if (res == ncclSuccess) {
            /* The revoked call returns on its own; then the comm is destroyed. */
            double until = t0 + 5 * brt_time_scale();
            while (j.t_return == 0 && brt_now() < until) {
                brt_sleep_ms(5);
            }
            res = ncclCommDestroy(j.comm);
        }
    } else {
        res = ncclCommAbort(j.comm);
    }
    double t_end = brt_now();
    atomic_store(&j.stage, 2);
    pthread_join(th, NULL);
    ctx->report->result = j.res;
    ctx->report->t_mark = (j.variant == 3 ? t_end : j.t_return) - t0;
    snprintf(ctx->report->msg, sizeof(ctx->report->msg), "%s", j.msg);
    __atomic_store_n(&ctx->report->done, 1, __ATOMIC_RELEASE); /* rank 1 may go */
    if (res != ncclSuccess) {
        brt_fail(ctx, "ending the communicator returned %d: %s", res, ncclGetLastError(NULL));
        return 1;
    }
    return 0;
}

START_TEST(test_abort_from_thread)
{
    static const char *const what[ABORT_VARIANTS] = {
        "abort during AllReduce", "abort during Recv", "revoke during AllReduce, then destroy",
        "abort of a comm queued in another thread's open group"};
    static const char *const says[ABORT_VARIANTS] = {"aborted", "aborted", "revoked", "aborted"};
    int variant = _i;
    char out[16384];
    brt_procs_t p;

    ck_assert_int_eq(brt_procs_start(&p, 2, body_abort_thread, &variant, out, sizeof(out)), 0);
    int bad = brt_procs_wait(&p, brt_now() + 60 * brt_time_scale(), 0, out, sizeof(out), 1);
    const brt_report_t *rep = &p.reports[0];
    fprintf(stderr, "%s: the blocked call returned %d %.3f s after: %s\n", what[variant],
            rep->result, rep->t_mark, rep->msg);
    ck_assert_msg(!bad, "%s: %s", what[variant], brt_clip(out, 3000));
    ck_assert_msg(rep->result != ncclSuccess, "%s: the blocked call succeeded", what[variant]);
    ck_assert_msg(rep->t_mark < ABORT_LIMIT * brt_time_scale(),
                  "%s: the blocked call returned %.2f s after the abort (limit %.1f s)",
                  what[variant], rep->t_mark, ABORT_LIMIT * brt_time_scale());
    ck_assert_msg(brt_text_has(rep->msg, says[variant]), "%s: the error does not say \"%s\": %s",
                  what[variant], says[variant], rep->msg);
    brt_procs_free(&p);
}
END_TEST

/* Init consistency: one rank sets a parameter the others do not. */
#define CONFIG_VARIANTS 3
static const struct {
    const char *key, *value, *label; /* set on rank 1 only */
    int must_fail;
} config_cases[CONFIG_VARIANTS] = {
    {"NCCL_BUFFSIZE", "1048576", "NCCL_BUFFSIZE", 1},
    {"NCCL_PROTO", "Simple", "NCCL_PROTO", 1},
    {"BRAID_WAIT_WARN", "7", "BRAID_WAIT_WARN (local)", 0},
};

static int body_config(brt_rank_ctx_t *ctx)
{
    int v = *(const int *)ctx->arg;
    ncclComm_t comm;
    float x[64] = {0}, y[64];

    if (ctx->rank == 1) {
        setenv(config_cases[v].key, config_cases[v].value, 1);
    }
    ncclResult_t res = ncclCommInitRank(&comm, ctx->nranks, ctx->id, ctx->rank);
    ctx->report->result = res;
    snprintf(ctx->report->msg, sizeof(ctx->report->msg), "%s", ncclGetLastError(NULL));
    if (res != ncclSuccess) {
        return 0;
    }
    res = ncclAllReduce(x, y, 64, ncclFloat, ncclSum, comm, NULL);
    if (res != ncclSuccess) {
        brt_fail(ctx, "AllReduce after init returned %d: %s", res, ncclGetLastError(comm));
    }
    ncclCommDestroy(comm);
    return res != ncclSuccess;
}

START_TEST(test_config_mismatch)
{
    int v = _i;
    char out[16384];
    brt_procs_t p;

    ck_assert_int_eq(brt_procs_start(&p, 3, body_config, &v, out, sizeof(out)), 0);
    int bad = brt_procs_wait(&p, brt_now() + 60 * brt_time_scale(), 0, out, sizeof(out), 1);
    ck_assert_msg(!bad, "%s differs on rank 1: %s", config_cases[v].label, brt_clip(out, 3000));
    for (int r = 0; r < 3; r++) {
        const brt_report_t *rep = &p.reports[r];
        fprintf(stderr, "%s on rank 1: rank %d init returned %d: %s\n", config_cases[v].label, r,
                rep->result, rep->msg);
        if (!config_cases[v].must_fail) {
            ck_assert_msg(rep->result == ncclSuccess, "%s differs: rank %d's init failed: %s",
                          config_cases[v].label, r, rep->msg);
            continue;
        }
        ck_assert_msg(rep->result == ncclInvalidUsage,
                      "%s differs on rank 1: rank %d's init returned %d, not ncclInvalidUsage",
                      config_cases[v].label, r, rep->result);
        ck_assert_msg(brt_text_has(rep->msg, config_cases[v].key) &&
                          brt_text_has(rep->msg, config_cases[v].value) &&
                          brt_text_names_rank(rep->msg, 1),
                      "rank %d: the error does not name %s, the value %s and rank 1: %s", r,
                      config_cases[v].key, config_cases[v].value, rep->msg);
    }
    brt_procs_free(&p);
}
END_TEST

/* Shrink: rank 3 of 4 dies (variant 0) or just stays out (variant 1); the others shrink
 * it away and go on with exact collectives on the new communicator. */
#define SHRINK_DEAD 3
static int body_shrink(brt_rank_ctx_t *ctx)
{
    const int variant = *(const int *)ctx->arg;
    const size_t max = 1 << 18;
    float *in = malloc(max * sizeof(float)), *out = malloc(max * sizeof(float));
    ncclComm_t comm, small = NULL;
    ncclResult_t res;
    int dead = SHRINK_DEAD, n = 0, me = -1;

    if (in == NULL || out == NULL || brt_rank_init(ctx, &comm) != ncclSuccess) {
        return 1;
    }
    for (size_t i = 0; i < max; i++) {
        in[i] = (float)(ctx->rank + 1);
    }
    res = ncclAllReduce(in, out, 1024, ncclFloat, ncclSum, comm, NULL);
    if (res != ncclSuccess) {
        brt_fail(ctx, "the first AllReduce failed: %s", ncclGetLastError(comm));
        return 1;
    }
    if (ctx->rank == SHRINK_DEAD) {
        if (variant == 0) {
            raise(SIGKILL);
        }
        /* Stay out until the others are done with the shrunk communicator. */
        double until = brt_now() + 60 * brt_time_scale();
        brt_doing(ctx, "waiting outside while the others shrink");
        for (int r = 0; r < SHRINK_DEAD; r++) {
            while (ctx->all[r].progress < 2 && brt_now() < until) {
                brt_sleep_ms(20);
            }
        }
        ncclCommDestroy(comm);
        return 0;
    }
    ctx->report->t_mark = brt_now();
    if (variant == 0) {
        brt_doing(ctx, "AllReduce with rank %d dead", SHRINK_DEAD);
        res = ncclAllReduce(in, out, 1024, ncclFloat, ncclSum, comm, NULL);
        if (res == ncclSuccess) {
            brt_fail(ctx, "AllReduce with rank %d dead succeeded", SHRINK_DEAD);
            return 1;
        }
    }
    brt_doing(ctx, "ncclCommShrink");
    double t0 = brt_now();
    res = ncclCommShrink(comm, &dead, 1, &small, NULL, variant == 0 ? NCCL_SHRINK_ABORT
                                                                   : NCCL_SHRINK_DEFAULT);
    if (res != ncclSuccess || small == NULL) {
        brt_fail(ctx, "ncclCommShrink returned %d: %s", res, ncclGetLastError(comm));
        return 1;
    }
    fprintf(stderr, "shrink variant %d: rank %d: ncclCommShrink took %.3f s\n", variant,
            ctx->rank, brt_now() - t0);
    ncclCommCount(small, &n);
    ncclCommUserRank(small, &me);
    if (n != SHRINK_DEAD || me != ctx->rank) {
        brt_fail(ctx, "the shrunk communicator has %d ranks and this rank is %d in it", n, me);
        return 1;
    }
    ctx->report->progress = 1;
    for (size_t count = 1; count <= max; count *= 8) {
        brt_doing(ctx, "AllReduce of %zu floats on the shrunk communicator", count);
        memset(out, 0, count * sizeof(float));
        res = ncclAllReduce(in, out, count, ncclFloat, ncclSum, small, NULL);
        if (res != ncclSuccess) {
            brt_fail(ctx, "AllReduce of %zu on the shrunk comm failed: %s", count,
                     ncclGetLastError(small));
            return 1;
        }
        for (size_t i = 0; i < count; i++) {
            if (out[i] != 6.0f) { /* 1 + 2 + 3 */
                brt_fail(ctx, "AllReduce of %zu: element %zu is %g, not 6", count, i, out[i]);
                return 1;
            }
        }
        res = ncclBroadcast(in, out, count, ncclFloat, 2, small, NULL);
        if (res != ncclSuccess || out[count - 1] != 3.0f) {
            brt_fail(ctx, "Broadcast of %zu on the shrunk comm: %d, last element %g: %s", count,
                     res, out[count - 1], ncclGetLastError(small));
            return 1;
        }
    }
    ctx->report->progress = 2;
    ncclCommDestroy(small);
    ncclCommAbort(comm);
    free(in);
    free(out);
    return 0;
}

START_TEST(test_shrink)
{
    static const char *const what[] = {"rank 3 killed, NCCL_SHRINK_ABORT",
                                       "rank 3 alive but left out, NCCL_SHRINK_DEFAULT"};
    int variant = _i;
    char out[16384];
    brt_procs_t p;

    ck_assert_int_eq(brt_procs_start(&p, 4, body_shrink, &variant, out, sizeof(out)), 0);
    int bad = brt_procs_wait(&p, brt_now() + 90 * brt_time_scale(),
                             variant == 0 ? 1u << SHRINK_DEAD : 0, out, sizeof(out), 0);
    ck_assert_msg(!bad, "shrink (%s): %s", what[variant], brt_clip(out, 3000));
}
END_TEST

static Suite *api_fail_suite(void)
{
    Suite *s = suite_create("api_fail");
    TCase *tc = tcase_create("kill");
    tcase_set_timeout(tc, 200 * brt_time_scale());
    tcase_add_test(tc, test_rank_killed_mid_collective);
    suite_add_tcase(s, tc);
    tc = tcase_create("missing");
    tcase_set_timeout(tc, 120 * brt_time_scale());
    tcase_add_test(tc, test_rank_never_joins);
    suite_add_tcase(s, tc);
    tc = tcase_create("mismatch");
    tcase_set_timeout(tc, 90 * brt_time_scale());
    tcase_add_loop_test(tc, test_mismatched_calls, 0, 5);
    tcase_add_test(tc, test_unreadable_root_buffer);
    tcase_add_test(tc, test_silent_peer);
    tcase_add_test(tc, test_silent_behind);
    suite_add_tcase(s, tc);
    tc = tcase_create("config");
    tcase_set_timeout(tc, 90 * brt_time_scale());
    tcase_add_loop_test(tc, test_config_mismatch, 0, CONFIG_VARIANTS);
    suite_add_tcase(s, tc);
    tc = tcase_create("shrink");
    tcase_set_timeout(tc, 120 * brt_time_scale());
    tcase_add_loop_test(tc, test_shrink, 0, 2);
    suite_add_tcase(s, tc);
    tc = tcase_create("abort");
    tcase_set_timeout(tc, 90 * brt_time_scale());
    tcase_add_loop_test(tc, test_abort_from_thread, 0, ABORT_VARIANTS);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(api_fail_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
