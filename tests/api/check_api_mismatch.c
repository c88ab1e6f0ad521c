/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The mismatch matrix: for every data path a call can take and every way ranks can
 * disagree about a call, either each rank gets an error, or the result it returns is the
 * right one for the call it made. Four forked ranks; rank 2 is the odd one. A path is
 * forced with NCCL_ALGO / NCCL_PROTO (set before the ranks fork); a path this machine
 * cannot run (reads in place need process_vm_readv) is skipped with the reason.
 *
 * Kinds of disagreement: the function, the count, the type (same bytes), the reduction,
 * the root, and a call rank 2 never makes. Rules checked on each rank:
 *   - it returns within the deadline;
 *   - an error comes with a message, and for a missing call the message names rank 2;
 *   - a success leaves in its receive buffer exactly what its own call, made by every
 *     rank, would have produced (a Reduce's non-roots have no result to check);
 *   - and at least one rank reports the mismatch.
 * A OneShot Broadcast's root returns without waiting for the other ranks and checks their
 * calls later (issue 19): in that cell every rank that believes it is the root must
 * report the mismatch, at the call or at its next call (made once every rank returned).
 * The "deferred" case checks that check on two ranks, where nobody else can catch it:
 * reported by the next call of any kind, by later root Broadcasts within the arena's
 * reuse bound, by ncclCommFinalize and by ncclCommDestroy, and never when calls agree.
 * The same binary runs over shared memory and over the socket plugin (ctest variants).
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nccl.h>

#include "brt_launch.h"

#define NRANKS 4
#define ODD 2

typedef enum { F_ALLREDUCE, F_BROADCAST, F_REDUCE, F_ALLGATHER } fn_t;
typedef enum { K_FUNC, K_COUNT, K_TYPE, K_OP, K_ROOT, K_MISSING, K_COUNT_ALL } kind_t;

static const char *const fn_names[] = {"AllReduce", "Broadcast", "Reduce", "AllGather"};
static const char *const kind_names[] = {"function", "count", "type", "reduction", "root",
                                         "missing call"};

/* A data path: how to force it, the call it is tried with, and where it exists. */
typedef struct {
    const char *name;
    const char *algo;
    const char *proto;
    size_t count; /* elements per rank */
    int shm_only; /* one host's arena: not over the network */
    int net_only;
    int gather;   /* AllGather/Broadcast only (DirectRead) */
} path_t;

static const path_t paths[] = {
    {"OneShot", "OneShot", "Simple", 4096, 1, 0, 0},
    {"DirectRead", "DirectRead", "Simple", 100000, 1, 0, 1},
    {"Ring/Simple", "Ring", "Simple", 40000, 0, 0, 0},
    {"Ring/LL", "Ring", "LL", 4096, 0, 0, 0},
    {"Tree/Simple", "Tree", "Simple", 40000, 0, 0, 0},
    {"Tree/LL", "Tree", "LL", 4096, 0, 0, 0},
    {"RingOneShot", "RingOneShot", "LL", 1024, 0, 1, 0},
};
#define NPATHS ((int)(sizeof(paths) / sizeof(paths[0])))

/* One call as a rank makes it. */
typedef struct {
    fn_t fn;
    size_t count;
    ncclDataType_t type;
    ncclRedOp_t op;
    int root;
} call_t;

typedef struct {
    const path_t *path;
    kind_t kind;
    call_t base; /* what ranks other than ODD call */
    call_t odd;  /* what ODD calls (unused for K_MISSING) */
} mm_case_t;

/* The call the case is built around: AllReduce for the reduction-type kinds, a rooted
 * call for the root; DirectRead has only AllGather and Broadcast. Returns 0 when the kind
 * means nothing on that path (a reduction on a path with no reducing call). */
static int case_make(int path_i, kind_t kind, int rooted_reduce, mm_case_t *c)
{
    const path_t *p = &paths[path_i];
    memset(c, 0, sizeof(*c));
    c->path = p;
    c->kind = kind;
    c->base.count = p->count;
    c->base.type = ncclFloat;
    c->base.op = ncclSum;
    if (p->gather) {
        if (kind == K_OP) {
            return 0;
        }
        c->base.fn = kind == K_ROOT ? F_BROADCAST : F_ALLGATHER;
    } else if (kind == K_ROOT) {
        c->base.fn = rooted_reduce ? F_REDUCE : F_BROADCAST;
    } else {
        c->base.fn = F_ALLREDUCE;
    }
    c->odd = c->base;
    switch (kind) {
    case K_FUNC: c->odd.fn = p->gather ? F_BROADCAST : F_REDUCE; break;
    case K_COUNT: c->odd.count = c->base.count - c->base.count / 3; break;
    case K_TYPE: c->odd.type = ncclInt32; break;
    case K_OP: c->odd.op = ncclMax; break;
    case K_ROOT: c->odd.root = ODD; break;
    default: break;
    }
    return 1;
}

/* Rank r's input element i for a call of type t: small integers, exact in float too. */
static double input_value(int r, size_t i)
{
    return (double)(r * 7 + (int)(i % 13));
}

static void fill(void *buf, ncclDataType_t t, int r, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (t == ncclFloat) {
            ((float *)buf)[i] = (float)input_value(r, i);
        } else {
            ((int32_t *)buf)[i] = (int32_t)input_value(r, i);
        }
    }
}

static double get(const void *buf, ncclDataType_t t, size_t i)
{
    return t == ncclFloat ? (double)((const float *)buf)[i] : (double)((const int32_t *)buf)[i];
}

/* Is out what `call` produces on rank `me` when every rank makes it? Returns the index of
 * the first wrong element, or -1. */
static long check_output(const call_t *call, int me, const void *out)
{
    size_t n = call->count;
    switch (call->fn) {
    case F_REDUCE:
        if (me != call->root) {
            return -1;
        }
        /* fall through */
    case F_ALLREDUCE:
        for (size_t i = 0; i < n; i++) {
            double want = call->op == ncclMax ? input_value(NRANKS - 1, i) : 0;
            for (int r = 0; call->op == ncclSum && r < NRANKS; r++) {
                want += input_value(r, i);
            }
            if (get(out, call->type, i) != want) {
                return (long)i;
            }
        }
        return -1;
    case F_BROADCAST:
        for (size_t i = 0; i < n; i++) {
            if (get(out, call->type, i) != input_value(call->root, i)) {
                return (long)i;
            }
        }
        return -1;
    default:
        for (int r = 0; r < NRANKS; r++) {
            for (size_t i = 0; i < n; i++) {
                if (get(out, call->type, (size_t)r * n + i) != input_value(r, i)) {
                    return (long)((size_t)r * n + i);
                }
            }
        }
        return -1;
    }
}

static ncclResult_t make_call(const call_t *c, const void *in, void *out, ncclComm_t comm)
{
    switch (c->fn) {
    case F_ALLREDUCE: return ncclAllReduce(in, out, c->count, c->type, c->op, comm, NULL);
    case F_BROADCAST: return ncclBroadcast(in, out, c->count, c->type, c->root, comm, NULL);
    case F_REDUCE: return ncclReduce(in, out, c->count, c->type, c->op, c->root, comm, NULL);
    default: return ncclAllGather(in, out, c->count, c->type, comm, NULL);
    }
}

/* Does the root of this cell's call check the other ranks only after it returned? */
static int root_check_deferred(const mm_case_t *c)
{
    return c->kind == K_ROOT && c->base.fn == F_BROADCAST && strcmp(c->path->algo, "OneShot") == 0;
}

/* The deferred cell: once every rank returned from the mismatched call, a rank that
 * succeeded makes the call again; a failure there is its report ("at the next call"). */
static ncclResult_t next_call(brt_rank_ctx_t *ctx, const call_t *mine, void *in, void *out,
                              ncclComm_t comm, ncclResult_t first)
{
    double t0 = brt_now();
    ctx->report->progress = 4;
    for (int r = 0; r < NRANKS; r++) {
        while (ctx->all[r].progress != 4 && ctx->all[r].progress != 2 &&
               brt_now() - t0 < 60 * brt_time_scale()) {
            brt_sleep_ms(5);
        }
    }
    if (first != ncclSuccess || ctx->report->msg[0] != '\0') {
        return first; /* reported already (or a wrong result, which must stay reported) */
    }
    brt_doing(ctx, "the call after the mismatched one");
    ncclResult_t res = make_call(mine, in, out, comm);
    if (res != ncclSuccess) {
        snprintf(ctx->report->msg, sizeof(ctx->report->msg), "at the next call: %s",
                 ncclGetLastError(comm));
    }
    return res;
}

/* report->progress: 1 the matched call passed, 2 the mismatched call returned (and in
 * the deferred cell the next call too; 4 between them), 3 the path is not available here
 * (the matched call failed on this rank: reason in msg). */
static int body(brt_rank_ctx_t *ctx)
{
    const mm_case_t *c = ctx->arg;
    const call_t *mine = ctx->rank == ODD ? &c->odd : &c->base;
    size_t cap = c->base.count * NRANKS + 16;
    void *in = calloc(cap, 4), *out = calloc(cap, 4);
    ncclComm_t comm;
    ncclResult_t res;

    if (in == NULL || out == NULL) {
        return 1;
    }
    brt_doing(ctx, "ncclCommInitRank");
    res = ncclCommInitRank(&comm, ctx->nranks, ctx->id, ctx->rank);
    if (res != ncclSuccess) {
        /* A rank slow to finish init can hear of the mismatch from ranks that went on
         * without it (a Reduce's leaves need nobody's data): then init itself fails with
         * that report, which is this rank's answer to the mismatch. Any other init
         * failure fails the test. */
        const char *why = ncclGetLastError(NULL);
        free(in);
        free(out);
        if (strstr(why, "reported a failure: rank ") == NULL ||
            strstr(why, "mismatched calls") == NULL) {
            ctx->report->result = res;
            brt_fail(ctx, "ncclCommInitRank(nranks %d, rank %d) returned %d (%s): %s",
                     ctx->nranks, ctx->rank, (int)res, ncclGetErrorString(res), why);
            return 1;
        }
        ctx->report->result = res;
        snprintf(ctx->report->msg, sizeof(ctx->report->msg), "%s", why);
        ctx->report->progress = 2;
        return 0;
    }
    /* The path must work when every rank agrees, or the matrix cell means nothing. A path
     * that cannot run here (the plan says so) skips the cell (progress 3); any other
     * failure of the agreed call, or a wrong result, fails it (progress 4). */
    brt_doing(ctx, "the matched %s", fn_names[c->base.fn]);
    fill(in, c->base.type, ctx->rank, c->base.count);
    res = make_call(&c->base, in, out, comm);
    if (res != ncclSuccess || check_output(&c->base, ctx->rank, out) >= 0) {
        const char *err = res != ncclSuccess ? ncclGetLastError(comm) : "wrong result";
        snprintf(ctx->report->msg, sizeof(ctx->report->msg), "%s", err);
        ctx->report->progress =
            res == ncclInvalidUsage && strstr(err, "no algorithm/protocol available") ? 3 : 4;
        ncclCommAbort(comm);
        free(in);
        free(out);
        return 0;
    }
    ctx->report->progress = 1;

    memset(out, 0xA5, cap * 4);
    fill(in, mine->type, ctx->rank, mine->count);
    double t0 = brt_now();
    if (c->kind == K_MISSING && ctx->rank == ODD) {
        /* Never make the call; stay alive until the others have given up on it. */
        brt_doing(ctx, "staying out of the call");
        for (int r = 0; r < NRANKS; r++) {
            while (r != ODD && ctx->all[r].progress < 2 && ctx->all[r].progress != 3 &&
                   brt_now() - t0 < 60 * brt_time_scale()) {
                brt_sleep_ms(20);
            }
        }
        res = ncclSuccess;
    } else {
        brt_doing(ctx, "the mismatched call (%s %s, count %zu)", c->path->name,
                  fn_names[mine->fn], mine->count);
        res = make_call(mine, in, out, comm);
    }
    ctx->report->t_mark = brt_now() - t0;
    ctx->report->result = res;
    if (res != ncclSuccess) {
        snprintf(ctx->report->msg, sizeof(ctx->report->msg), "%s", ncclGetLastError(comm));
    } else if (!(c->kind == K_MISSING && ctx->rank == ODD)) {
        long bad = check_output(mine, ctx->rank, out);
        if (bad >= 0) {
            snprintf(ctx->report->msg, sizeof(ctx->report->msg),
                     "WRONG RESULT with success: element %ld is %g", bad,
                     get(out, mine->type, (size_t)bad));
        }
    }
    if (root_check_deferred(c)) {
        ctx->report->result = next_call(ctx, mine, in, out, comm, res);
    }
    ctx->report->progress = 2;
    brt_doing(ctx, "ncclCommAbort after the mismatched call");
    ncclCommAbort(comm);
    free(in);
    free(out);
    return 0;
}

/* Runs one cell; returns 0 pass, 1 skipped, and fails the test otherwise. */
static int run_cell(const mm_case_t *c, int net)
{
    char out[16384], what[160];
    brt_procs_t p;
    double limit = 60 * brt_time_scale();
    int errors = 0, named = 0;

    snprintf(what, sizeof(what), "%s: %s differs (%s vs %s on rank %d)%s", c->path->name,
             kind_names[c->kind], fn_names[c->base.fn],
             c->kind == K_MISSING ? "no call" : fn_names[c->odd.fn], ODD, net ? " over sockets" : "");
    setenv("NCCL_ALGO", c->path->algo, 1);
    setenv("NCCL_PROTO", c->path->proto, 1);
    double t0 = brt_now();
    ck_assert_int_eq(brt_procs_start(&p, NRANKS, body, (void *)c, out, sizeof(out)), 0);
    int bad = brt_procs_wait(&p, brt_now() + limit, 0, out, sizeof(out), 1);
    ck_assert_msg(!bad, "%s: ranks did not all return within %.0f s: %s", what, limit,
                  brt_clip(out, 3000));
    for (int r = 0; r < NRANKS; r++) {
        ck_assert_msg(p.reports[r].progress != 4, "%s: rank %d: the call every rank agreed on "
                      "failed: %s", what, r, p.reports[r].msg);
    }
    for (int r = 0; r < NRANKS; r++) {
        if (p.reports[r].progress == 3) {
            fprintf(stderr, "SKIP %s: the path does not run here: rank %d: %s\n", what, r,
                    p.reports[r].msg);
            brt_procs_free(&p);
            return 1;
        }
    }
    fprintf(stderr, "%s (%.2f s):\n", what, brt_now() - t0);
    for (int r = 0; r < NRANKS; r++) {
        const brt_report_t *rep = &p.reports[r];
        fprintf(stderr, "  rank %d: %s after %.2f s%s%.300s\n", r,
                rep->result == ncclSuccess ? "success" : ncclGetErrorString(rep->result),
                rep->t_mark, rep->msg[0] ? ": " : "", rep->msg);
        ck_assert_msg(rep->progress == 2, "%s: rank %d never returned from the call", what, r);
        if (c->kind == K_MISSING && r == ODD) {
            continue;
        }
        if (rep->result == ncclSuccess) {
            ck_assert_msg(rep->msg[0] == '\0', "%s: rank %d: %s", what, r, rep->msg);
            continue;
        }
        errors++;
        ck_assert_msg(rep->msg[0] != '\0', "%s: rank %d failed with no message", what, r);
        if (c->kind == K_MISSING) {
            named += brt_text_names_rank(rep->msg, ODD);
        }
    }
    ck_assert_msg(errors > 0, "%s: every rank returned success; nobody saw the mismatch", what);
    if (root_check_deferred(c)) {
        /* Each of the two roots is the only rank that can see the other's call. */
        ck_assert_msg(p.reports[0].result != ncclSuccess && p.reports[ODD].result != ncclSuccess,
                      "%s: a root returned success at the call and the next one", what);
    }
    if (c->kind == K_MISSING) {
        ck_assert_msg(errors == NRANKS - 1, "%s: a rank returned success without rank %d", what,
                      ODD);
        ck_assert_msg(named > 0, "%s: no rank's error names rank %d, which never made the call",
                      what, ODD);
    }
    brt_procs_free(&p);
    return 0;
}

START_TEST(test_matrix)
{
    const char *shm_off = getenv("NCCL_SHM_DISABLE");
    int net = shm_off != NULL && atoi(shm_off) != 0;
    int path_i = _i / (K_COUNT_ALL + 1), k = _i % (K_COUNT_ALL + 1);
    /* The extra kind slot is the root mismatch on a Reduce (K_ROOT is on a Broadcast). */
    kind_t kind = k == K_COUNT_ALL ? K_ROOT : (kind_t)k;
    mm_case_t c;

    if ((net && paths[path_i].shm_only) || (!net && paths[path_i].net_only)) {
        return; /* the path does not exist on this transport: no cell */
    }
#ifdef BR_API_MISMATCH_SANITIZED
    /* Sanitizer builds run half the cells, kinds alternating along the paths (every path
     * and every kind still runs); Release runs them all. */
    if ((path_i + k) % 2 != 0) {
        return;
    }
#endif
    if (!case_make(path_i, kind, k == K_COUNT_ALL, &c)) {
        return;
    }
    if (k == K_COUNT_ALL && paths[path_i].gather) {
        return; /* DirectRead has no Reduce */
    }
    (void)run_cell(&c, net);
}
END_TEST

/* ---- The deferred root check on two ranks ----
 * Each rank calls an 8-byte OneShot Broadcast naming itself the root, then `then`: the
 * mismatch must be reported by that, naming both ranks and calls. */
typedef enum {
    D_NEXT_CALL,
    D_NEXT_AT_ONCE,
    D_MORE_ROOTS,
    D_FINALIZE,
    D_DESTROY,
    D_REVOKE,
    D_AGREE
} dcase_t;
static const char *const dcase_names[] = {"an AllReduce once both returned",
                                          "an AllReduce at once",
                                          "more root Broadcasts only",
                                          "ncclCommFinalize",
                                          "ncclCommDestroy",
                                          "ncclCommRevoke and ncclCommDestroy",
                                          "nothing (the calls agree)"};

/* Wait (bounded) until every rank's progress reached at least `at`. */
static void wait_all(brt_rank_ctx_t *ctx, int at)
{
    double t0 = brt_now();
    for (int r = 0; r < ctx->nranks; r++) {
        while (ctx->all[r].progress < at && brt_now() - t0 < 30 * brt_time_scale()) {
            brt_sleep_ms(2);
        }
    }
}

/* Records where the mismatch was reported (msg: "<where>: <error>"); 0 unless the
 * test could not run. */
static int deferred_body(brt_rank_ctx_t *ctx)
{
    dcase_t dc = (dcase_t)(intptr_t)ctx->arg;
    float in[2] = {(float)ctx->rank, 1.0f}, out[2] = {0, 0}, sum[2];
    int root = dc == D_AGREE ? 0 : ctx->rank;
    const char *where = "the Broadcast";
    ncclComm_t comm;
    ncclResult_t res;

    brt_doing(ctx, "ncclCommInitRank");
    if (brt_rank_init(ctx, &comm) != ncclSuccess) {
        return 1;
    }
    if (ctx->rank == 1) {
        /* Rank 0 returns before rank 1 publishes its call, so rank 0's Broadcast cannot
         * see the mismatch: what comes next on rank 0 must. */
        for (double t0 = brt_now();
             ctx->all[0].progress < 2 && brt_now() - t0 < 30 * brt_time_scale();) {
            brt_sleep_ms(2);
        }
    }
    brt_doing(ctx, "Broadcast from root %d", root);
    res = ncclBroadcast(in, out, 2, ncclFloat, root, comm, NULL);
    ctx->report->progress = 2;
    if (res == ncclSuccess && dc != D_NEXT_AT_ONCE) {
        wait_all(ctx, 2); /* every rank published its call */
    }
    for (int i = 0; res == ncclSuccess && i < 64 && dc == D_MORE_ROOTS; i++) {
        where = "a later root Broadcast";
        res = ncclBroadcast(in, out, 2, ncclFloat, root, comm, NULL);
    }
    if (res == ncclSuccess && (dc == D_NEXT_CALL || dc == D_NEXT_AT_ONCE || dc == D_AGREE)) {
        where = "the AllReduce";
        res = ncclAllReduce(in, sum, 2, ncclFloat, ncclSum, comm, NULL);
    }
    if (res == ncclSuccess && dc == D_FINALIZE) {
        where = "ncclCommFinalize";
        res = ncclCommFinalize(comm);
    }
    if (res == ncclSuccess && dc == D_AGREE) {
        where = "ncclCommFinalize";
        res = ncclCommFinalize(comm);
        if (res == ncclSuccess && (out[0] != 0.0f || sum[0] != 1.0f || sum[1] != 2.0f)) {
            brt_fail(ctx, "wrong result: broadcast %g, sum %g %g", out[0], sum[0], sum[1]);
        }
    }
    if (res == ncclSuccess && dc == D_REVOKE) {
        where = "ncclCommRevoke";
        res = ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT);
    }
    ctx->report->result = res;
    if (res != ncclSuccess) {
        snprintf(ctx->report->msg, sizeof(ctx->report->msg), "%s: %s", where,
                 ncclGetLastError(comm));
    }
    brt_doing(ctx, "ncclCommDestroy");
    where = "ncclCommDestroy";
    ncclResult_t dres = ncclCommDestroy(comm);
    if (res == ncclSuccess && dres != ncclSuccess) {
        ctx->report->result = dres;
        snprintf(ctx->report->msg, sizeof(ctx->report->msg), "%s: %s", where,
                 ncclGetLastError(NULL));
    }
    ctx->report->progress = 3;
    return 0;
}

START_TEST(test_deferred_root)
{
    dcase_t dc = (dcase_t)_i;
    char out[16384];
    brt_procs_t p;
    double limit = 60 * brt_time_scale();

    if (getenv("NCCL_SHM_DISABLE") != NULL && atoi(getenv("NCCL_SHM_DISABLE")) != 0) {
        return; /* no node arena over sockets */
    }
    setenv("NCCL_ALGO", "OneShot", 1);
    setenv("NCCL_PROTO", "Simple", 1);
    ck_assert_int_eq(brt_procs_start(&p, 2, deferred_body, (void *)(intptr_t)dc, out, sizeof(out)),
                     0);
    int bad = brt_procs_wait(&p, brt_now() + limit, 0, out, sizeof(out), 1);
    ck_assert_msg(!bad, "deferred root check, then %s: ranks failed or hung: %s", dcase_names[dc],
                  brt_clip(out, 3000));
    for (int r = 0; r < 2; r++) {
        const brt_report_t *rep = &p.reports[r];
        fprintf(stderr, "deferred root check, then %s: rank %d: %s%s%.400s\n", dcase_names[dc], r,
                ncclGetErrorString(rep->result), rep->msg[0] ? ": " : "", rep->msg);
        ck_assert_msg(rep->progress == 3, "then %s: rank %d did not finish", dcase_names[dc], r);
        if (dc == D_AGREE || (dc == D_REVOKE && r == 0)) {
            /* A revoked communicator is only destroyed: that must not fail (the
             * mismatch its root can see then is logged). */
            ck_assert_msg(rep->result == ncclSuccess && rep->msg[0] == '\0', "then %s: rank %d: %s",
                          dcase_names[dc], r, rep->msg);
            continue;
        }
        ck_assert_msg(rep->result != ncclSuccess,
                      "then %s: rank %d (a root) never reported the mismatch", dcase_names[dc], r);
        ck_assert_msg(brt_text_has(rep->msg, "mismatched calls") ||
                          brt_text_has(rep->msg, "reported a failure"),
                      "then %s: rank %d: not a mismatch: %s", dcase_names[dc], r, rep->msg);
        /* Like every other error: "rank N (host H): ..." says where it was seen. */
        char where[32];
        snprintf(where, sizeof(where), "rank %d (host ", r);
        ck_assert_msg(brt_text_has(rep->msg, where), "then %s: rank %d: no \"%s...\" in: %s",
                      dcase_names[dc], r, where, rep->msg);
        ck_assert_msg(brt_text_names_rank(rep->msg, 1 - r),
                      "then %s: rank %d's error does not name rank %d: %s", dcase_names[dc], r,
                      1 - r, rep->msg);
    }
    if (dc != D_AGREE && dc != D_REVOKE) {
        /* Rank 0 returned from its Broadcast before rank 1 made its own: what came next
         * reported it. */
        ck_assert_msg(strncmp(p.reports[0].msg, "the Broadcast:", 14) != 0 &&
                          (brt_text_has(p.reports[0].msg, "root 1") ||
                           brt_text_has(p.reports[1].msg, "root 0")),
                      "then %s: rank 0's report: %s", dcase_names[dc], p.reports[0].msg);
    }
    brt_procs_free(&p);
}
END_TEST

static Suite *mismatch_suite(void)
{
    Suite *s = suite_create("api_mismatch");
    TCase *tc = tcase_create("matrix");
    tcase_set_timeout(tc, 120 * brt_time_scale());
    tcase_add_loop_test(tc, test_matrix, 0, NPATHS * (K_COUNT_ALL + 1));
    suite_add_tcase(s, tc);
    TCase *td = tcase_create("deferred");
    tcase_set_timeout(td, 90 * brt_time_scale());
    tcase_add_loop_test(td, test_deferred_root, 0, D_AGREE + 1);
    suite_add_tcase(s, td);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(mismatch_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
