/* SPDX-License-Identifier: Apache-2.0 */
/*
 * An owner whose in-place collective fails (node arena, exec_arena.c and exec_a2av.c):
 * AlltoAllV with every block read straight from its owner's send buffer, DirectRead
 * AllGather, DirectRead Broadcast (the readers copy from the root's input, the root
 * writes part of every reader's output), ranks as threads DirectRead AllReduce (every
 * rank loads the others' inputs and outputs), and a group of a DirectRead AllGather on a
 * second communicator (ncclCommSplit) queued before the AlltoAllV that fails on the
 * first, so that the AllGather is in flight on a communicator that did not fail itself.
 * Four ranks; rank 0 fails after it published its buffer (AlltoAllV: it expects one
 * element more from rank 1 than rank 1 sends, which it sees when it reads rank 1's
 * table; the others: a thread of rank 0 revokes its communicator while it waits for rank
 * 3). As soon as its call returns, rank 0 overwrites that buffer with a poison pattern
 * (and, ranks as threads, may free it). Rank 3 enters the call late: once rank 0 has
 * returned, or after 0.6 s if it has not. Every rank must return an error, rank 3's
 * naming rank 0; no rank's output may hold a poisoned byte, only what it had before the
 * call or the right values; and rank 0's buffer must hold the poison still when rank 3
 * has returned (no Broadcast root writes into it after its owner's call returned). A
 * rank that reads a freed buffer crashes the test (under ASan: heap-use-after-free).
 * Processes (process_vm_readv, ptrace rules permitting) and threads (memcpy). And, with
 * processes, a reader that never enters the call and is killed while rank 0 waits for it
 * ("reader_dies": rank 0 must see that its process is gone).
 */
#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <braid.h>
#include <nccl.h>

#include "brt_check.h"
#include "brt_launch.h"

#define OF_RANKS 4
#define OF_FAIL 0                /* the rank that fails */
#define OF_LATE 3                /* the rank that comes late */
#define OF_COUNT ((size_t)65536) /* floats per rank (AlltoAllV: per block) */
#define OF_GUARD (-7.0f)
#define OF_POISON 0xffu /* every byte of the failed rank's buffer after its call */
#define OF_MSG 1024

/* The last is for threads only: DirectRead AllReduce runs between threads of a process. */
enum { OF_A2AV, OF_ALLGATHER, OF_BCAST_ROOT, OF_BCAST_READER, OF_GROUP, OF_ALLREDUCE, OF_NKINDS };
#define OF_NKINDS_PROC OF_ALLREDUCE
static const char *const of_names[] = {"AlltoAllV",
                                       "AllGather",
                                       "Broadcast (root fails)",
                                       "Broadcast (a reader fails, the root is late)",
                                       "AllGather and AlltoAllV in a group",
                                       "AllReduce"};
enum { OF_KEEP, OF_FREE }; /* what rank 0 does with its poisoned buffer */

static struct {
    int mode;
} cfg;

typedef struct {
    int kind;
    int release;
    int dies; /* rank 3 never enters: the parent kills it while rank 0 waits for it */
} of_arg_t;

/* Element i of rank r's input. */
static float of_val(int r, size_t i)
{
    return (float)(r * 100003 + (int)(i % 65521));
}

/* The calls of a kind: count per rank (or per block) and the buffers' sizes in floats. */
static size_t send_len(int kind)
{
    return kind == OF_A2AV ? OF_RANKS * OF_COUNT : OF_COUNT;
}

static size_t recv_len(int kind)
{
    /* AlltoAllV: room for one element more from rank 1 (what rank 0 wrongly expects). */
    return kind == OF_A2AV        ? OF_RANKS * OF_COUNT + 1
           : kind == OF_ALLGATHER ? OF_RANKS * OF_COUNT
                                  : OF_COUNT;
}

static int bcast_root(int kind)
{
    return kind == OF_BCAST_READER ? OF_LATE : OF_FAIL;
}

/* The call; `odd` makes rank 0's AlltoAllV expect one element more from rank 1. */
static ncclResult_t of_call(int kind, int me, const float *sbuf, float *rbuf, int odd,
                            ncclComm_t comm)
{
    size_t sc[OF_RANKS], rc[OF_RANKS], rd[OF_RANKS];
    switch (kind) {
    case OF_A2AV:
        for (int p = 0; p < OF_RANKS; p++) {
            sc[p] = OF_COUNT;
            rc[p] = OF_COUNT + (odd && p == 1);
            rd[p] = (size_t)p * OF_COUNT + (odd && p > 1);
        }
        (void)me;
        return braidAlltoAllV(sbuf, sc, NULL, rbuf, rc, rd, ncclFloat, comm, NULL);
    case OF_ALLGATHER: return ncclAllGather(sbuf, rbuf, OF_COUNT, ncclFloat, comm, NULL);
    case OF_ALLREDUCE: return ncclAllReduce(sbuf, rbuf, OF_COUNT, ncclFloat, ncclSum, comm, NULL);
    default: return ncclBroadcast(sbuf, rbuf, OF_COUNT, ncclFloat, bcast_root(kind), comm, NULL);
    }
}

/* Expected element i of rank me's output (after an agreed call). */
static float of_want(int kind, int me, size_t i)
{
    switch (kind) {
    case OF_A2AV: /* block p: rank p's block for me */
        return of_val((int)(i / OF_COUNT), (size_t)me * OF_COUNT + i % OF_COUNT);
    case OF_ALLGATHER: return of_val((int)(i / OF_COUNT), i % OF_COUNT);
    case OF_ALLREDUCE: /* exact: integers below 2^24 */
        return of_val(0, i) + of_val(1, i) + of_val(2, i) + of_val(3, i);
    default: return of_val(bcast_root(kind), i);
    }
}

/* rbuf holds, element by element, OF_GUARD or what the call should have written there
 * (`whole`: only the right values). For rank 0's AlltoAllV, whose rank-1 block is one
 * element longer, anything but the poison is fine past block 0. 0, or -1 with msg. */
static int out_check(int kind, int me, const float *rbuf, int whole, int odd, char *msg)
{
    for (size_t i = 0; i < recv_len(kind) - (kind == OF_A2AV); i++) {
        float want = of_want(kind, me, i), got = rbuf[i];
        uint32_t bits;
        memcpy(&bits, &got, sizeof(bits));
        if (bits == 0xffffffffu) {
            snprintf(msg, OF_MSG,
                     "rank %d: element %zu of its output holds rank %d's poison "
                     "(written after rank %d's call returned)",
                     me, i, OF_FAIL, OF_FAIL);
            return -1;
        }
        if (odd && i >= OF_COUNT) {
            continue;
        }
        if (got != want && (whole || got != OF_GUARD)) {
            snprintf(msg, OF_MSG, "rank %d: element %zu of its output is %g, want %g%s", me, i,
                     (double)got, (double)want, whole ? "" : " or the guard");
            return -1;
        }
    }
    return 0;
}

static void fill(float *buf, size_t n, int r, int guard)
{
    for (size_t i = 0; i < n; i++) {
        buf[i] = guard ? OF_GUARD : of_val(r, i);
    }
}

/* Rank 0's helper thread: revoke the communicator while rank 0 waits for rank 3. */
static void *revoker(void *arg)
{
    brt_sleep_ms(100);
    (void)ncclCommRevoke((ncclComm_t)arg, 0);
    return NULL;
}

static void flag_set(brt_report_t *rep)
{
    __atomic_store_n(&rep->progress, 1, __ATOMIC_RELEASE);
}

static int flag_get(const brt_report_t *rep)
{
    return __atomic_load_n(&rep->progress, __ATOMIC_ACQUIRE);
}

/* One call of a run: its kind, communicator and buffers. */
typedef struct {
    int kind;
    ncclComm_t comm;
    float *sbuf, *rbuf;
} of_one_t;

/* The failed rank's buffer that its peers touch (a Broadcast reader's: its output, which
 * the root writes), and its length. */
static float *exposed(of_one_t *c, size_t *len_p)
{
    int out = c->kind == OF_BCAST_READER;
    *len_p = out ? recv_len(c->kind) : send_len(c->kind);
    return out ? c->rbuf : c->sbuf;
}

/* Make the calls of a run (several in one group). */
static ncclResult_t of_run(of_one_t *calls, int ncall, int me, int odd)
{
    if (ncall == 1) {
        return of_call(calls[0].kind, me, calls[0].sbuf, calls[0].rbuf, odd, calls[0].comm);
    }
    ncclResult_t res = ncclGroupStart();
    for (int i = 0; i < ncall && res == ncclSuccess; i++) {
        res = of_call(calls[i].kind, me, calls[i].sbuf, calls[i].rbuf, odd, calls[i].comm);
    }
    ncclResult_t end = ncclGroupEnd();
    return res != ncclSuccess ? res : end;
}

/* Rank 0 after its call: poison what its peers touch (and free it). */
static void poison(of_one_t *calls, int ncall, int release)
{
    for (int i = 0; i < ncall; i++) {
        size_t len;
        float *mine = exposed(&calls[i], &len);
        memset(mine, (int)OF_POISON, len * sizeof(float));
        if (release == OF_FREE) {
            free(mine);
            *(mine == calls[i].rbuf ? &calls[i].rbuf : &calls[i].sbuf) = NULL;
        }
    }
}

/* Rank 0, its buffers kept: once the late rank is through, nobody wrote into them. */
static int poison_kept(brt_rank_ctx_t *ctx, of_one_t *calls, int ncall)
{
    double until = brt_now() + 30 * brt_time_scale();
    while (!flag_get(&ctx->all[OF_LATE]) && brt_now() < until) {
        brt_sleep_ms(5);
    }
    for (int c = 0; c < ncall; c++) {
        size_t len;
        const unsigned char *mine = (const unsigned char *)exposed(&calls[c], &len);
        for (size_t i = 0; i < len * sizeof(float); i++) {
            if (mine[i] != OF_POISON) {
                brt_fail(ctx,
                         "%s: byte %zu of rank %d's buffer was written after its call "
                         "returned",
                         of_names[calls[c].kind], i, ctx->rank);
                return -1;
            }
        }
    }
    return 0;
}

static int of_body(brt_rank_ctx_t *ctx)
{
    const of_arg_t *arg = ctx->arg;
    int kind = arg->kind, me = ctx->rank, ret = 1;
    /* A group: a DirectRead AllGather on a second communicator, queued before the
     * AlltoAllV that fails on the first, so it is in flight when the group fails. */
    int ncall = kind == OF_GROUP ? 2 : 1;
    of_one_t calls[2];
    ncclComm_t comm = NULL, comm2 = NULL;
    char msg[OF_MSG];
    pthread_t th;
    int th_made = 0;

    memset(calls, 0, sizeof(calls));
    if (brt_rank_init(ctx, &comm) != ncclSuccess) {
        return 1;
    }
    calls[0].kind = kind == OF_GROUP ? OF_ALLGATHER : kind;
    calls[0].comm = comm;
    if (kind == OF_GROUP) {
        ncclResult_t r2 = ncclCommSplit(comm, 0, me, &comm2, NULL);
        if (r2 != ncclSuccess) {
            brt_fail(ctx, "ncclCommSplit returned %d: %s", (int)r2, ncclGetLastError(comm));
            goto out;
        }
        calls[0].comm = comm2;
        calls[1].kind = OF_A2AV;
        calls[1].comm = comm;
    }
    for (int i = 0; i < ncall; i++) {
        of_one_t *c = &calls[i];
        c->sbuf = malloc(send_len(c->kind) * sizeof(float));
        c->rbuf = malloc(recv_len(c->kind) * sizeof(float));
        if (c->sbuf == NULL || c->rbuf == NULL) {
            brt_fail(ctx, "out of memory");
            goto out;
        }
        /* An agreed call first: the path works, and every mapping and connection is made. */
        brt_doing(ctx, "the agreed %s", of_names[c->kind]);
        fill(c->sbuf, send_len(c->kind), me, 0);
        fill(c->rbuf, recv_len(c->kind), me, 1);
        ncclResult_t res = of_call(c->kind, me, c->sbuf, c->rbuf, 0, c->comm);
        if (res != ncclSuccess) {
            brt_fail(ctx, "the agreed %s returned %d: %s", of_names[c->kind], (int)res,
                     ncclGetLastError(c->comm));
            goto out;
        }
        if (out_check(c->kind, me, c->rbuf, 1, 0, msg) != 0) {
            brt_fail(ctx, "the agreed %s: %s", of_names[c->kind], msg);
            goto out;
        }
        fill(c->rbuf, recv_len(c->kind), me, 1);
    }
    int odd = (kind == OF_A2AV || kind == OF_GROUP) && me == OF_FAIL;
    if (me == OF_FAIL && !odd) {
        if (pthread_create(&th, NULL, revoker, comm) != 0) {
            brt_fail(ctx, "pthread_create failed");
            goto out;
        }
        th_made = 1;
    }
    if (me == OF_LATE && arg->dies) {
        brt_doing(ctx, "waiting to be killed, never entering %s", of_names[kind]);
        __atomic_store_n(&ctx->report->progress, 2, __ATOMIC_RELEASE);
        for (;;) {
            brt_sleep_ms(100);
        }
    }
    if (me == OF_LATE) {
        /* Until rank 0 has returned (at once without the owner's wait), at most 0.6 s. */
        brt_doing(ctx, "waiting to enter %s late", of_names[kind]);
        double until = brt_now() + 0.6;
        while (!flag_get(&ctx->all[OF_FAIL]) && brt_now() < until) {
            brt_sleep_ms(5);
        }
    }
    brt_doing(ctx, "the %s where rank %d fails", of_names[kind], OF_FAIL);
    ncclResult_t res = of_run(calls, ncall, me, odd);
    snprintf(msg, sizeof(msg), "%s", res == ncclSuccess ? "" : ncclGetLastError(comm));
    if (th_made) {
        pthread_join(th, NULL);
    }
    if (me == OF_LATE) {
        flag_set(ctx->report); /* through: rank 0 may look at its buffers */
    }
    if (me == OF_FAIL) {
        poison(calls, ncall, arg->release);
        flag_set(ctx->report);
    }
    if (res == ncclSuccess) {
        brt_fail(ctx, "rank %d: %s returned success although rank %d failed in it", me,
                 of_names[kind], OF_FAIL);
        goto out;
    }
    if (me == OF_LATE && !brt_text_names_rank(msg, OF_FAIL)) {
        brt_fail(ctx, "rank %d: the error does not name rank %d: %s", me, OF_FAIL, msg);
        goto out;
    }
    for (int i = 0; i < ncall; i++) {
        of_one_t *c = &calls[i];
        size_t len;
        if (c->rbuf != NULL && (me != OF_FAIL || exposed(c, &len) != c->rbuf) &&
            out_check(c->kind, me, c->rbuf, 0, odd && c->kind == OF_A2AV, msg) != 0) {
            brt_fail(ctx, "%s: %s", of_names[kind], msg);
            goto out;
        }
    }
    if (me == OF_FAIL && arg->release == OF_KEEP && !arg->dies &&
        poison_kept(ctx, calls, ncall) != 0) {
        goto out;
    }
    ret = 0;
out:
    if (ret != 0 && (me == OF_FAIL || me == OF_LATE)) {
        flag_set(ctx->report); /* keep nobody waiting */
    }
    if (comm2 != NULL) {
        ncclCommAbort(comm2);
    }
    ncclCommAbort(comm);
    for (int i = 0; i < ncall; i++) {
        free(calls[i].sbuf);
        free(calls[i].rbuf);
    }
    return ret;
}

/* _i: the kind, and with ranks as threads whether rank 0 also frees its buffer (a
 * process's freed buffer would only make process_vm_readv fail: the poison shows more). */
START_TEST(test_owner_fails)
{
    int threads = cfg.mode == BRT_MODE_THREADS;
    of_arg_t arg = {.kind = threads ? _i / 2 : _i, .release = threads ? _i % 2 : OF_KEEP};
    static char out[8192];
    double timeout = 60 * brt_time_scale();
    int bad = threads ? brt_threads_run(OF_RANKS, of_body, &arg, timeout, out, sizeof(out))
                      : brt_procs_run(OF_RANKS, of_body, &arg, timeout, out, sizeof(out));
    ck_assert_msg(!bad, "%s (%s): %s", of_names[arg.kind],
                  arg.release == OF_FREE ? "buffer freed" : "buffer poisoned", brt_clip(out, 3000));
}
END_TEST

/* Processes: rank 0's AlltoAllV fails, rank 3, a reader of its blocks, never enters the
 * call and is killed while rank 0 waits for it. With BRAID_TIMEOUT far beyond the test's
 * deadline, only seeing that rank 3's process is gone lets ranks 0, 1 and 2 return (with
 * an error) in time. */
START_TEST(test_reader_dies)
{
    of_arg_t arg = {.kind = OF_A2AV, .release = OF_KEEP, .dies = 1};
    brt_procs_t p;
    static char err[8192], out[8192];
    double deadline = brt_now() + 60 * brt_time_scale();

    setenv("BRAID_TIMEOUT", "600", 1); /* this forked test only */
    ck_assert_int_eq(brt_procs_start(&p, OF_RANKS, of_body, &arg, err, sizeof(err)), 0);
    while (__atomic_load_n(&p.reports[OF_LATE].progress, __ATOMIC_ACQUIRE) != 2 &&
           !brt_procs_exited(&p, OF_LATE) && brt_now() < deadline) {
        brt_sleep_ms(10);
    }
    brt_sleep_ms(300); /* rank 0 has failed and waits for rank 3 by now, or soon will */
    brt_procs_kill(&p, OF_LATE);
    int bad = brt_procs_wait(&p, deadline, 1u << OF_LATE, out, sizeof(out), 0);
    ck_assert_msg(!bad, "a rank that reads in place died: %s", brt_clip(out, 3000));
}
END_TEST

int main(int argc, char **argv)
{
    cfg.mode = BRT_MODE_PROC;
    for (int i = 1; i + 1 < argc; i += 2) {
        int ranks[BRT_MAX_RANKS], n = 0;
        if (!brt_layout_option(argv[i], argv[i + 1], &cfg.mode, ranks, &n)) {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    /* Every block and input read in place, whatever the size. */
    setenv("NCCL_ALGO", "DirectRead", 1);
    setenv("NCCL_PROTO", "Simple", 1);
    setenv("BRAID_CMA_BYTES", "1", 1);
    setenv("BRAID_CMA_MAX_BYTES", "0", 1);
    setenv("BRAID_ALLTOALLV_INLINE_BYTES", "0", 1);
    setenv("BRAID_ALLTOALLV_READ_MAX_BYTES", "0", 1);
    Suite *s = suite_create("mp_owner");
    TCase *tc = tcase_create("owner_fails");
    tcase_set_timeout(tc, 120 * brt_time_scale());
    tcase_add_loop_test(tc, test_owner_fails, 0,
                        cfg.mode == BRT_MODE_THREADS ? 2 * OF_NKINDS : OF_NKINDS_PROC);
    suite_add_tcase(s, tc);
    if (cfg.mode == BRT_MODE_PROC) {
        TCase *td = tcase_create("reader_dies");
        tcase_set_timeout(td, 120 * brt_time_scale());
        tcase_add_test(td, test_reader_dies);
        suite_add_tcase(s, td);
    }
    return brt_suite_run(s);
}
