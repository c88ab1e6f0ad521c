/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Owner-fold reductions: the path of an AllReduce, Reduce or ReduceScatter of a float type
 * that asks for reproducible bits (BRAID_DETERMINISTIC, BRAID_OPT_DETERMINISTIC) or for
 * fp32 sums of a narrow type (BRAID_ACCUMULATE=fp32, BRAID_OPT_ACCUMULATE_FP32). The
 * element range is cut into n slices, slice p owned by rank p. Phase A: every rank sends
 * slice p of its input to rank p and receives every rank's copy of its own slice into a
 * scratch buffer (sends and receives, an all-to-all). The fold: the owner combines the n
 * contributions of each element in rank order 0..n-1 with one arithmetic (br_reduce_fold:
 * every step rounded to the type, or fp32 throughout and one rounding). Phase C: an
 * AllReduce gathers the slices with an AllGather that plan chooses like any other (so the
 * algorithm, protocol, channels and chunking move bytes but never touch the sums); a
 * Reduce sends them to the root; a ReduceScatter's slice is its output already. Every
 * element is thus the same fold on every rank, whatever the split, and moves the bytes of
 * a ring AllReduce: (n - 1) / n of the input out and in per phase.
 *
 * A PreMulSum's scalar is each rank's own (ncclRedOpCreatePreMulSum is per rank): in
 * phase A every rank also sends its scalar with its slice, and an owner that got scalars
 * other than its own scales each contribution by its rank's scalar before the fold.
 *
 * The phases of every owner-fold call of a group run after its other operations, each
 * phase as one executor batch over all communicators, so one thread can drive every rank
 * (the ncclCommInitAll pattern). The scratch buffer is kept per thread and reused.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "group_int.h"
#include "util.h"

/* One owner-fold call while its phases run. */
typedef struct {
    gcall_t *call;
    size_t per;   /* elements of one slice (ReduceScatter: the count) */
    size_t total; /* elements of one input */
    size_t tsz;
    char *scratch; /* n slices: received contributions, then (AllReduce) the gathered result */
    char *out;     /* where this rank's folded slice goes */
    int padded;    /* AllReduce whose count n does not divide: gathered in scratch */
    double *scalar; /* PREMULSUM: rank q's scalar at [q] (this rank's own sent from there) */
} fold_t;

/* The thread's scratch memory, kept between groups (freed when the thread ends). */
typedef struct {
    char *p;
    size_t cap;
} scratch_t;

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *v)
{
    scratch_t *s = v;
    free(s->p);
    free(s);
}

static void scratch_key_make(void)
{
    (void)pthread_key_create(&scratch_key, scratch_free);
}

/* At least bytes of the thread's scratch (its contents are not kept). */
static ncclResult_t scratch_get(size_t bytes, char **p_p)
{
    pthread_once(&scratch_once, scratch_key_make);
    scratch_t *s = pthread_getspecific(scratch_key);
    if (s == NULL) {
        BR_CHECK(br_calloc(&s, 1, "owner-fold scratch"));
        if (pthread_setspecific(scratch_key, s) != 0) {
            free(s);
            BR_WARN(NCCL_ALLOC, "cannot keep the owner-fold scratch of this thread");
            return ncclSystemError;
        }
    }
    if (s->cap < bytes) {
        char *p = malloc(bytes);
        if (p == NULL) {
            BR_WARN(NCCL_ALLOC, "out of memory: %zu bytes of owner-fold scratch", bytes);
            return ncclSystemError;
        }
        free(s->p);
        s->p = p;
        s->cap = bytes;
    }
    *p_p = s->p;
    return ncclSuccess;
}

/* Elements of slice p: [p * per, min(total, (p + 1) * per)). */
static size_t slice_len(const fold_t *f, int p)
{
    size_t lo = f->per * (size_t)p;
    if (lo >= f->total) {
        return 0;
    }
    return f->total - lo < f->per ? f->total - lo : f->per;
}

static char *slice_at(const void *base, const fold_t *f, int p)
{
    return (char *)base + (size_t)p * f->per * f->tsz;
}

/* Scratch bytes of one call: n slices, cache-line aligned. */
static size_t fold_bytes(const fold_t *f, int n)
{
    return ((size_t)n * f->per * f->tsz + 63) & ~(size_t)63;
}

static void fold_shape(fold_t *f, gcall_t *c)
{
    const br_op_t *op = &c->op;
    size_t n = (size_t)c->comm->nranks;
    f->call = c;
    f->tsz = br_type_size(op->type);
    if (op->func == BR_FUNC_REDUCESCATTER) {
        f->per = op->count;
        f->total = op->count * n;
    } else {
        f->per = (op->count + n - 1) / n;
        f->total = op->count;
    }
    f->padded = op->func == BR_FUNC_ALLREDUCE && op->count % n != 0;
}

/* Where this rank's folded slice goes, once its scratch is known. */
static void fold_place(fold_t *f)
{
    const br_op_t *op = &f->call->op;
    int me = f->call->comm->rank;
    if (op->func == BR_FUNC_REDUCESCATTER) {
        f->out = op->recvbuff;
    } else if ((op->func == BR_FUNC_ALLREDUCE && !f->padded) ||
               (op->func == BR_FUNC_REDUCE && op->root == me)) {
        f->out = slice_at(op->recvbuff, f, me);
    } else {
        f->out = slice_at(f->scratch, f, me);
    }
}

/* A send or receive of the call's, numbered among the owner folds' messages to or from
 * that peer (apart from the program's own: see fold_send_seq in exec.h). */
static void p2p_call(gcall_t *out, const gcall_t *c, br_func_t func, int peer, const void *sbuf,
                     void *rbuf, size_t count)
{
    br_exec_comm_t *ec = c->comm->ec;
    memset(out, 0, sizeof(*out));
    out->kind = G_OP;
    out->comm = c->comm;
    out->op.func = func;
    out->op.sendbuff = sbuf;
    out->op.recvbuff = rbuf;
    out->op.count = count;
    out->op.type = c->op.type;
    out->op.redop.type = c->op.type;
    out->op.peer = peer;
    out->op.fold_of = &c->op;
    out->op.seq = func == BR_FUNC_SEND ? ec->fold_send_seq[peer]++ : ec->fold_recv_seq[peer]++;
    /* The user's record in the operation log follows its phases' work items. */
    out->op.log_ticket = c->op.log_ticket;
}

/* Phase A: slice p of this rank's input to rank p, every rank's copy of slice me in; for a
 * PREMULSUM each followed by its sender's scalar (a double: the fold is of float types,
 * whose sizes divide 8). */
static int phase_a(const fold_t *f, gcall_t *out)
{
    const gcall_t *c = f->call;
    int n = c->comm->nranks, me = c->comm->rank, k = 0;
    size_t mine = slice_len(f, me), scount = sizeof(double) / f->tsz;
    int pre = c->op.redop.kind == BR_RED_PREMULSUM;
    for (int i = 1; i < n; i++) {
        int p = (me + i) % n; /* not every rank at rank 0 first */
        size_t len = slice_len(f, p);
        if (len > 0) {
            p2p_call(&out[k++], c, BR_FUNC_SEND, p, slice_at(c->op.sendbuff, f, p), NULL, len);
            if (pre) {
                p2p_call(&out[k++], c, BR_FUNC_SEND, p, &f->scalar[me], NULL, scount);
            }
        }
        int q = (me + n - i) % n;
        if (mine > 0) {
            p2p_call(&out[k++], c, BR_FUNC_RECV, q, NULL, slice_at(f->scratch, f, q), mine);
            if (pre) {
                p2p_call(&out[k++], c, BR_FUNC_RECV, q, NULL, &f->scalar[q], scount);
            }
        }
    }
    return k;
}

/* Did some rank send a PREMULSUM scalar other than this rank's? */
static int scalars_differ(const fold_t *f)
{
    const br_op_t *op = &f->call->op;
    if (op->redop.kind != BR_RED_PREMULSUM) {
        return 0;
    }
    for (int q = 0; q < f->call->comm->nranks; q++) {
        if (f->scalar[q] != op->redop.scalar_f) {
            return 1;
        }
    }
    return 0;
}

/* The fold of this rank's slice: rank q's contribution is its own input for q == me. When
 * the ranks' PreMulSum scalars differ, each contribution is first scaled by its own
 * rank's scalar and rounded to the type (with fp32 accumulation of a narrow type, that
 * product is rounded once more than with one common scalar), then summed in rank order. */
static void fold_slice(const fold_t *f, const void **srcs)
{
    const gcall_t *c = f->call;
    int n = c->comm->nranks, me = c->comm->rank;
    size_t len = slice_len(f, me);
    if (len == 0) {
        return;
    }
    for (int q = 0; q < n; q++) {
        srcs[q] = q == me ? slice_at(c->op.sendbuff, f, me) : slice_at(f->scratch, f, q);
    }
    if (!scalars_differ(f)) {
        br_reduce_fold(f->out, srcs, n, len, &c->op.redop, c->op.acc32);
        return;
    }
    for (int q = 0; q < n; q++) {
        br_redop_t qop = c->op.redop;
        char *dst = q == me ? f->out : slice_at(f->scratch, f, q);
        qop.scalar_f = f->scalar[q];
        br_reduce(dst, NULL, srcs[q], len, &qop, 0);
        srcs[q] = dst;
    }
    br_redop_t sum = br_redop_partial(&c->op.redop);
    br_reduce_fold(f->out, srcs, n, len, &sum, c->op.acc32);
}

/* Phase C: the gathering; *k_p gets the calls written to out. Fails (logged by plan) when
 * no AllGather may run under the call's NCCL_ALGO / NCCL_PROTO. */
static ncclResult_t phase_c(const fold_t *f, gcall_t *out, int *k_p)
{
    const gcall_t *c = f->call;
    const br_op_t *op = &c->op;
    int n = c->comm->nranks, me = c->comm->rank, k = 0;

    if (op->func == BR_FUNC_ALLREDUCE) {
        /* An AllGather in place, chosen by plan as any other: the call's own selection
         * applies to it where it can (forceAlgSelection does not make an AllReduce-only
         * algorithm an error here), and it keeps the call's number and log record. */
        char *base = f->padded ? f->scratch : op->recvbuff;
        gcall_t *g = &out[k++];
        memset(g, 0, sizeof(*g));
        g->kind = G_OP;
        g->comm = c->comm;
        g->op = *op;
        g->op.func = BR_FUNC_ALLGATHER;
        g->op.fold_of = op;
        g->op.sendbuff = slice_at(base, f, me);
        g->op.recvbuff = base;
        g->op.count = f->per;
        g->op.det = g->op.acc32 = 0;
        g->op.call_force = 0;
        g->op.prof_mask = 0;
        g->op.prof_parent = g->op.prof_group = NULL;
        BR_CHECK(br_plan_choose(c->comm->plan, &g->op));
    } else if (op->func == BR_FUNC_REDUCE && me != op->root) {
        size_t len = slice_len(f, me);
        if (len > 0) {
            p2p_call(&out[k++], c, BR_FUNC_SEND, op->root, f->out, NULL, len);
        }
    } else if (op->func == BR_FUNC_REDUCE) {
        for (int p = 0; p < n; p++) {
            size_t len = slice_len(f, p);
            if (p != me && len > 0) {
                p2p_call(&out[k++], c, BR_FUNC_RECV, p, NULL, slice_at(op->recvbuff, f, p), len);
            }
        }
    }
    *k_p = k;
    return ncclSuccess;
}

ncclResult_t br_group_fold_run(gcall_t *cs, int n)
{
    fold_t *fs = NULL;
    gcall_t *ps = NULL;
    const void **srcs = NULL;
    double *scalars = NULL, *scal;
    char *scratch = NULL;
    size_t bytes = 0;
    int nf = 0, np = 0, maxn = 1, nscal = 0;
    ncclResult_t res = ncclSuccess;

    for (int i = 0; i < n; i++) {
        if (br_group_is_fold(&cs[i])) {
            nf++;
            np += 4 * cs[i].comm->nranks; /* a slice and a scalar to and from each peer */
            nscal += cs[i].comm->nranks;
            maxn = cs[i].comm->nranks > maxn ? cs[i].comm->nranks : maxn;
        }
    }
    BR_CHECK_GOTO(br_calloc(&fs, (size_t)nf, "owner fold"), res, out);
    BR_CHECK_GOTO(br_calloc(&ps, (size_t)np, "owner fold"), res, out);
    BR_CHECK_GOTO(br_calloc(&srcs, (size_t)maxn, "owner fold"), res, out);
    BR_CHECK_GOTO(br_calloc(&scalars, (size_t)nscal, "owner fold"), res, out);
    nf = 0;
    scal = scalars;
    for (int i = 0; i < n; i++) {
        if (br_group_is_fold(&cs[i])) {
            fold_shape(&fs[nf], &cs[i]);
            fs[nf].scalar = scal;
            scal[cs[i].comm->rank] = cs[i].op.redop.scalar_f;
            scal += cs[i].comm->nranks;
            bytes += fold_bytes(&fs[nf], cs[i].comm->nranks);
            nf++;
        }
    }
    BR_CHECK_GOTO(scratch_get(bytes, &scratch), res, out);
    for (int i = 0; i < nf; i++) {
        fs[i].scratch = scratch;
        scratch += fold_bytes(&fs[i], fs[i].call->comm->nranks);
        fold_place(&fs[i]);
    }
    /* Phase A for every call, as one batch. */
    np = 0;
    for (int i = 0; i < nf; i++) {
        np += phase_a(&fs[i], ps + np);
    }
    BR_CHECK_GOTO(br_group_run_batch(ps, np), res, out);
    for (int i = 0; i < nf; i++) {
        fold_slice(&fs[i], srcs);
    }
    /* Phase C, as one batch. */
    np = 0;
    for (int i = 0; i < nf; i++) {
        int k = 0;
        BR_CHECK_GOTO(phase_c(&fs[i], ps + np, &k), res, out);
        np += k;
    }
    BR_CHECK_GOTO(br_group_run_batch(ps, np), res, out);
    for (int i = 0; i < nf; i++) {
        const br_op_t *op = &fs[i].call->op;
        if (fs[i].padded) {
            memcpy(op->recvbuff, fs[i].scratch, op->count * fs[i].tsz);
        }
    }
out:
    free(fs);
    free(ps);
    free(srcs);
    free(scalars);
    return res;
}
