/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Seeded chaos: each iteration draws, from one 64-bit seed, a rank count (2-6), a layout
 * (processes, a thread per rank, or ncclCommInitAll driven by one thread), a transport
 * (shared memory, or sockets with NCCL_P2P_DISABLE/NCCL_SHM_DISABLE), BRAID_BOOTSTRAP_SHM,
 * a short program of collectives on host memory (every collective of tests/common,
 * Send/Recv groups, braidAllGatherV and braidAlltoAllV, 0 to 4 MiB) and one fault:
 *   kill      a victim process _exit()s or SIGKILLs itself before init, in init
 *             (BRAID_TEST_EXIT_AT), mid-call (a timer thread), between calls or in destroy;
 *   abort     a thread of the victim calls ncclCommAbort or ncclCommRevoke while its
 *   revoke    main thread is at a drawn step;
 *   mismatch  the victim makes a different call (count, type, op, root or collective);
 *   none      the control: every call must succeed with the right result.
 * The oracle (judge() below): no rank dies of a signal or hangs past the deadline, no
 * process outlives its iteration, every step a rank completes gives the right result, and
 *   kill/abort/revoke: a survivor completes no step (init counting as one) that the victim
 *     had not entered when the fault struck (read after the abort returned), except steps
 *     it can finish without the victim (step_needs_all(): count 0, a rank that only sends,
 *     a Broadcast whose root lives), and every error it gets names the victim ("rank V",
 *     also inside "rank R reported: ...");
 *   mismatch: each rank either fails or returns the right result for its own call, every
 *     error names the victim, and at least one rank fails (a call or destroy);
 *   none: everything succeeds.
 * Each iteration runs in a fresh process of this program (so its environment, read once
 * by the library, can differ), in a process group of its own that must be empty after.
 * BRAID_CHAOS_SEED (first seed; iteration i uses seed + i) and BRAID_CHAOS_ITERS override
 * --seed and --iters; a failure prints its seed, so BRAID_CHAOS_SEED=S BRAID_CHAOS_ITERS=1
 * runs it again; --repeat R runs each seed R times (a race that needs several tries).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <braid.h>
#include <nccl.h>

#include "brt_coll.h"
#include "brt_data.h"
#include "brt_launch.h"

#define CH_MAX_RANKS 6
#define CH_MAX_STEPS 4
#define CH_MAX_BYTES ((size_t)4 << 20)
#define CH_MSG 1024
#define CH_TIMEOUT_S 10 /* BRAID_TIMEOUT and BRAID_BOOTSTRAP_TIMEOUT */

enum { CH_PROC, CH_THREADS, CH_INITALL, CH_NLAYOUTS };
static const char *const ch_layout_names[] = {"processes", "threads", "initall"};
enum { CH_NONE, CH_KILL, CH_ABORT, CH_REVOKE, CH_MISMATCH, CH_NFAULTS };
static const char *const ch_fault_names[] = {"none", "kill", "abort", "revoke", "mismatch"};
enum { CH_K_BEFORE_INIT, CH_K_IN_INIT, CH_K_MIDCALL, CH_K_BETWEEN, CH_K_DESTROY, CH_NKPOINTS };
static const char *const ch_kpoint_names[] = {"before init", "in init", "mid-call", "between calls",
                                              "in destroy"};
static const char *const ch_exit_at[] = {"boot-shm-map", "boot-shm-gather", "init-connect"};
enum { CH_MM_COUNT, CH_MM_TYPE, CH_MM_OP, CH_MM_ROOT, CH_MM_FUNC };
static const char *const ch_mm_names[] = {"count", "type", "op", "root", "collective"};

/* A step beyond tests/common's collectives. */
enum { CH_STEP_CASE, CH_STEP_AGV, CH_STEP_A2AV };

typedef struct {
    int kind;
    brt_case_t c;      /* CH_STEP_CASE: the call every rank makes */
    brt_case_t victim; /* what the victim makes (differs only at the mismatched step) */
    size_t vmax;       /* V collectives: most elements in one block */
    uint32_t seed;
} ch_step_t;

typedef struct {
    uint64_t seed;
    int nranks, layout, net, boot_shm, small_fifo;
    int nsteps;
    ch_step_t steps[CH_MAX_STEPS];
    int fault, victim;
    int kpoint, kexit_at, ksigkill, kstep, kdelay_us; /* kill */
    int astep, adelay_us;                             /* abort, revoke: at step astep */
    int mstep, mkind;                                 /* mismatch */
} ch_scn_t;

/* One rank's outcome, in memory shared with the iteration process. Steps: 0 is init,
 * 1..nsteps the program, nsteps + 1 destroy. */
typedef struct {
    volatile int entered;   /* steps begun */
    volatile int completed; /* steps that returned success with the right result */
    volatile int failed_at; /* step of the first error (-1: none) */
    volatile int res;
    volatile int wrong; /* a step returned success with a wrong result */
    volatile int finished;
    volatile int destroy_res;
    volatile int fault_entered; /* abort/revoke: the victim's entered after the call */
    volatile int fault_done;
    volatile int main_done;
    char err[CH_MSG]; /* ncclGetLastError of the failed step */
    char destroy_err[CH_MSG];
    char wrong_msg[CH_MSG];
} ch_out_t;

typedef struct {
    ch_scn_t s;
    ch_out_t out[CH_MAX_RANKS];
} ch_shared_t;

static ch_shared_t *g_sh;

/* ---- drawing a scenario ------------------------------------------------------------ */

static uint64_t rng_next(uint64_t *st)
{
    *st += 0x9e3779b97f4a7c15ull;
    return brt_mix64(*st);
}

static int rng_int(uint64_t *st, int n)
{
    return (int)(rng_next(st) % (uint64_t)n);
}

/* A byte size of 0..4 MiB: zero one time in ten, else log-uniform. */
static size_t rng_bytes(uint64_t *st)
{
    if (rng_int(st, 10) == 0) {
        return 0;
    }
    int bits = rng_int(st, 23); /* up to 2^22 = 4 MiB */
    size_t b = (size_t)1 << bits;
    return b + (size_t)(rng_next(st) % b);
}

/* Elements per block of this call such that no buffer exceeds 4 MiB. */
static size_t case_count(const brt_case_t *c, int nranks, size_t bytes)
{
    size_t per = brt_type_info(c->type)->size;
    switch (c->func) {
    case BRT_ALLGATHER:
    case BRT_REDUCESCATTER:
    case BRT_ALLTOALL:
    case BRT_GATHER:
    case BRT_SCATTER: per *= (size_t)nranks; break;
    case BRT_SENDRECV:
        if (c->root == BRT_SHIFT_ALL) {
            per *= (size_t)nranks;
        }
        break;
    default: break;
    }
    if (bytes > CH_MAX_BYTES) {
        bytes = CH_MAX_BYTES;
    }
    return bytes / per;
}

static int func_has_root(brt_func_t f)
{
    return f == BRT_BROADCAST || f == BRT_BCAST || f == BRT_REDUCE || f == BRT_GATHER ||
           f == BRT_SCATTER;
}

/* The victim's call at the mismatched step: one thing changed. */
static void draw_mismatch(ch_scn_t *s, uint64_t *st)
{
    ch_step_t *p = &s->steps[s->mstep - 1];
    brt_case_t *v = &p->victim;
    int kinds[5], n = 0;

    /* A call of count 0 moves nothing and returns at once (as in NCCL), so a mismatch with
     * it cannot be seen: the mismatched step gets a count of at least 1. */
    if (p->c.count == 0) {
        p->c.count = v->count = 1 + (size_t)rng_int(st, 4096);
    }
    kinds[n++] = CH_MM_COUNT;
    kinds[n++] = CH_MM_FUNC;
    if (v->op <= BRT_MIN) {
        kinds[n++] = CH_MM_TYPE;
    }
    if (brt_func_reduces(v->func) && v->op <= BRT_MIN) {
        kinds[n++] = CH_MM_OP;
    }
    if (func_has_root(v->func)) {
        kinds[n++] = CH_MM_ROOT;
    }
    s->mkind = kinds[rng_int(st, n)];
    switch (s->mkind) {
    case CH_MM_COUNT: v->count = v->count == 0 ? 5 : v->count + 1 + v->count / 2; break;
    case CH_MM_TYPE: v->type = v->type == ncclFloat32 ? ncclInt32 : ncclFloat32; break;
    case CH_MM_OP: v->op = v->op == BRT_SUM ? BRT_MAX : BRT_SUM; break;
    case CH_MM_ROOT: v->root = (v->root + 1) % s->nranks; break;
    default:
        /* AllReduce <-> Broadcast keep the count's meaning (one buffer of count). */
        v->func = v->func == BRT_ALLREDUCE ? BRT_BROADCAST : BRT_ALLREDUCE;
        v->type = ncclFloat32;
        v->op = BRT_SUM;
        v->root = 0;
        v->count = case_count(v, s->nranks, v->count * brt_type_info(p->c.type)->size);
        v->count += v->count == 0; /* a call of count 0 would not be a call at all */
        break;
    }
}

static void scn_draw(ch_scn_t *s, uint64_t seed)
{
    uint64_t st = seed;
    brt_case_t *thin = NULL;
    size_t nthin;

    memset(s, 0, sizeof(*s));
    s->seed = seed;
    s->nranks = 2 + rng_int(&st, CH_MAX_RANKS - 1);
    s->layout = rng_int(&st, CH_NLAYOUTS);
    s->net = rng_int(&st, 3) == 0;
    s->boot_shm = rng_int(&st, 2);
    s->small_fifo = rng_int(&st, 2);
    s->nsteps = 1 + rng_int(&st, CH_MAX_STEPS);
    nthin = brt_cases_build(BRT_MATRIX_THIN, s->nranks, &thin);
    for (int i = 0; i < s->nsteps; i++) {
        ch_step_t *p = &s->steps[i];
        int k = rng_int(&st, 12);
        p->seed = (uint32_t)rng_next(&st);
        if (k == 10 || k == 11) {
            p->kind = k == 10 ? CH_STEP_AGV : CH_STEP_A2AV;
            p->vmax = rng_bytes(&st) / 4 / (size_t)s->nranks;
            continue;
        }
        p->kind = CH_STEP_CASE;
        p->c = thin[rng_next(&st) % nthin];
        p->c.seed = p->seed;
        p->c.null_unused = 0;
        if (p->c.func == BRT_SENDRECV) {
            p->c.root = rng_int(&st, 3) == 0 ? BRT_SHIFT_ALL : 1 + rng_int(&st, s->nranks);
        } else if (func_has_root(p->c.func)) {
            p->c.root = rng_int(&st, s->nranks);
        }
        p->c.count = case_count(&p->c, s->nranks, rng_bytes(&st));
        p->victim = p->c;
    }
    free(thin);

    s->fault = rng_int(&st, 7); /* none, kill three times in seven, abort, revoke, mismatch */
    s->fault = s->fault == 0 ? CH_NONE : s->fault <= 3 ? CH_KILL : s->fault - 2;
    if (s->fault == CH_KILL && s->layout != CH_PROC) {
        s->fault = CH_ABORT + rng_int(&st, 3); /* a kill would take every rank with it */
    }
    s->victim = rng_int(&st, s->nranks);
    switch (s->fault) {
    case CH_KILL:
        s->kpoint = rng_int(&st, CH_NKPOINTS);
        s->kexit_at = rng_int(&st, 3);
        s->ksigkill = rng_int(&st, 2);
        s->kstep =
            s->kpoint == CH_K_BETWEEN ? rng_int(&st, s->nsteps + 1) : 1 + rng_int(&st, s->nsteps);
        s->kdelay_us = rng_int(&st, 4) == 0 ? 0 : rng_int(&st, 30000);
        break;
    case CH_ABORT:
    case CH_REVOKE:
        s->astep = rng_int(&st, s->nsteps + 2);
        s->adelay_us = rng_int(&st, 3) == 0 ? 0 : rng_int(&st, 30000);
        break;
    case CH_MISMATCH: {
        int idx[CH_MAX_STEPS], n = 0;
        for (int i = 0; i < s->nsteps; i++) {
            if (s->steps[i].kind == CH_STEP_CASE && s->steps[i].c.func != BRT_SENDRECV) {
                idx[n++] = i;
            }
        }
        if (n == 0) { /* no collective to mismatch: the first step becomes an AllReduce */
            ch_step_t *p = &s->steps[0];
            p->kind = CH_STEP_CASE;
            p->c = (brt_case_t){.func = BRT_ALLREDUCE,
                                .type = ncclFloat32,
                                .op = BRT_SUM,
                                .count = 1 + rng_bytes(&st) / 4,
                                .seed = p->seed};
            p->victim = p->c;
            idx[n++] = 0;
        }
        s->mstep = 1 + idx[rng_int(&st, n)];
        draw_mismatch(s, &st);
        break;
    }
    default: break;
    }
}

static void step_name(const ch_step_t *p, int nranks, const brt_case_t *c, char *buf, size_t len)
{
    if (p->kind == CH_STEP_CASE) {
        brt_case_name(c, nranks, buf, len);
    } else {
        snprintf(buf, len, "%s float32 up to %zu per block seed %u",
                 p->kind == CH_STEP_AGV ? "braidAllGatherV" : "braidAlltoAllV", p->vmax, p->seed);
    }
}

static void scn_describe(const ch_scn_t *s, FILE *f)
{
    char name[256];
    fprintf(f, "  %d ranks, %s, %s, BRAID_BOOTSTRAP_SHM=%d, NCCL_BUFFSIZE %s\n", s->nranks,
            ch_layout_names[s->layout], s->net ? "sockets (shm and p2p disabled)" : "default",
            s->boot_shm, s->small_fifo ? "64K" : "default");
    for (int i = 0; i < s->nsteps; i++) {
        step_name(&s->steps[i], s->nranks, &s->steps[i].c, name, sizeof(name));
        fprintf(f, "  step %d: %s\n", i + 1, name);
    }
    fprintf(f, "  fault: %s, victim rank %d", ch_fault_names[s->fault], s->victim);
    switch (s->fault) {
    case CH_KILL:
        fprintf(f, ", %s, %s", s->ksigkill ? "SIGKILL" : "_exit", ch_kpoint_names[s->kpoint]);
        if (s->kpoint == CH_K_IN_INIT) {
            fprintf(f, " (BRAID_TEST_EXIT_AT=%s)", ch_exit_at[s->kexit_at]);
        } else if (s->kpoint == CH_K_BETWEEN) {
            fprintf(f, " (after step %d)", s->kstep);
        } else if (s->kpoint == CH_K_MIDCALL) {
            fprintf(f, " (step %d, after %d us)", s->kstep, s->kdelay_us);
        } else if (s->kpoint == CH_K_DESTROY) {
            fprintf(f, " (after %d us)", s->kdelay_us);
        }
        break;
    case CH_ABORT:
    case CH_REVOKE:
        fprintf(f, " from a second thread at step %d (0 init, %d destroy) after %d us", s->astep,
                s->nsteps + 1, s->adelay_us);
        break;
    case CH_MISMATCH:
        step_name(&s->steps[s->mstep - 1], s->nranks, &s->steps[s->mstep - 1].victim, name,
                  sizeof(name));
        fprintf(f, ", %s at step %d: it calls %s", ch_mm_names[s->mkind], s->mstep, name);
        break;
    default: break;
    }
    fprintf(f, "\n");
}

/* ---- the V collectives: bytes of (seed, src, dst), counts of (seed, src, dst) --------- */

static size_t v_count(const ch_step_t *p, int src, int dst)
{
    if (p->vmax == 0) {
        return 0;
    }
    uint64_t h = brt_mix64((uint64_t)p->seed << 16 ^ (uint64_t)src << 8 ^ (uint64_t)dst);
    return h % 7 == 0 ? 0 : (size_t)(h >> 8) % (p->vmax + 1);
}

typedef struct {
    size_t counts[CH_MAX_RANKS], sdisp[CH_MAX_RANKS], rcounts[CH_MAX_RANKS], rdisp[CH_MAX_RANKS];
    float *send, *recv;
    size_t nsend, nrecv;
} ch_vbuf_t;

static int v_setup(const ch_step_t *p, int rank, int nranks, ch_vbuf_t *b)
{
    memset(b, 0, sizeof(*b));
    for (int q = 0; q < nranks; q++) {
        if (p->kind == CH_STEP_AGV) {
            b->rcounts[q] = v_count(p, q, 0);
        } else {
            b->counts[q] = v_count(p, rank, q);
            b->rcounts[q] = v_count(p, q, rank);
        }
        b->sdisp[q] = b->nsend;
        b->rdisp[q] = b->nrecv;
        b->nsend += b->counts[q];
        b->nrecv += b->rcounts[q];
    }
    if (p->kind == CH_STEP_AGV) {
        b->nsend = b->rcounts[rank];
    }
    b->send = malloc((b->nsend + 1) * sizeof(float));
    b->recv = malloc((b->nrecv + 1) * sizeof(float));
    if (b->send == NULL || b->recv == NULL) {
        return 1;
    }
    if (p->kind == CH_STEP_AGV) {
        brt_fill_bytes(p->seed, rank, 0, b->send, 0, b->nsend * sizeof(float));
    } else {
        for (int q = 0; q < nranks; q++) {
            brt_fill_bytes(p->seed, rank, q, b->send + b->sdisp[q], 0,
                           b->counts[q] * sizeof(float));
        }
    }
    memset(b->recv, 0xa5, (b->nrecv + 1) * sizeof(float));
    return 0;
}

static ncclResult_t v_issue(const ch_step_t *p, ch_vbuf_t *b, ncclComm_t comm)
{
    if (p->kind == CH_STEP_AGV) {
        return braidAllGatherV(b->send, b->nsend, b->recv, b->rcounts, b->rdisp, ncclFloat32, comm,
                               NULL);
    }
    return braidAlltoAllV(b->send, b->counts, b->sdisp, b->recv, b->rcounts, b->rdisp, ncclFloat32,
                          comm, NULL);
}

static int v_verify(const ch_step_t *p, int rank, int nranks, ch_vbuf_t *b, char *err, size_t len)
{
    for (int q = 0; q < nranks; q++) {
        char e[256];
        int dst = p->kind == CH_STEP_AGV ? 0 : rank;
        if (brt_check_bytes(p->seed, q, dst, b->recv + b->rdisp[q], 0,
                            b->rcounts[q] * sizeof(float), e, sizeof(e)) != 0) {
            snprintf(err, len, "block from rank %d: %s", q, e);
            return 1;
        }
    }
    return 0;
}

static void v_free(ch_vbuf_t *b)
{
    free(b->send);
    free(b->recv);
}

/* ---- a rank's program ------------------------------------------------------------- */

static void die_now(const ch_scn_t *s)
{
    if (s->ksigkill) {
        raise(SIGKILL);
    }
    _exit(3);
}

typedef struct {
    const ch_scn_t *s;
    ch_out_t *out;
    ncclComm_t comm;
} ch_timer_t;

static void *kill_timer_main(void *a)
{
    ch_timer_t *t = a;
    if (t->s->kdelay_us > 0) {
        usleep((useconds_t)t->s->kdelay_us);
    }
    die_now(t->s);
    return NULL;
}

static void start_kill_timer(ch_timer_t *t)
{
    pthread_t tid;
    if (pthread_create(&tid, NULL, kill_timer_main, t) != 0) {
        die_now(t->s);
    }
    pthread_detach(tid);
}

/* A second thread of the victim: waits until the victim's main thread has entered step
 * astep (or finished), then aborts or revokes the communicator. */
static void *fault_main(void *a)
{
    ch_timer_t *t = a;
    const ch_scn_t *s = t->s;
    ncclResult_t res;

    while (__atomic_load_n(&t->out->entered, __ATOMIC_ACQUIRE) <= s->astep &&
           !__atomic_load_n(&t->out->main_done, __ATOMIC_ACQUIRE)) {
        usleep(200);
    }
    if (s->adelay_us > 0) {
        usleep((useconds_t)s->adelay_us);
    }
    res = s->fault == CH_ABORT ? ncclCommAbort(t->comm) : ncclCommRevoke(t->comm, 0);
    (void)res; /* after a destroy: "not a live communicator"; either is fine */
    __atomic_store_n(&t->out->fault_entered, __atomic_load_n(&t->out->entered, __ATOMIC_ACQUIRE),
                     __ATOMIC_RELEASE);
    __atomic_store_n(&t->out->fault_done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void copy_err(char *dst, const char *what, ncclResult_t res)
{
    snprintf(dst, CH_MSG, "%s returned %d (%s): %s", what, (int)res, ncclGetErrorString(res),
             ncclGetLastError(NULL));
}

/* One step on comms[0..nlocal-1] (ranks first..first+nlocal-1; several: one group).
 * Returns 0 when it succeeded with the right results, 1 on an error, 2 when a result was
 * wrong. */
static int run_step(const ch_scn_t *s, int si, ncclComm_t *comms, int first, int nlocal)
{
    const ch_step_t *p = &s->steps[si - 1];
    brt_buf_t bufs[CH_MAX_RANKS];
    ch_vbuf_t vb[CH_MAX_RANKS];
    char err[CH_MSG], name[256];
    ncclResult_t res = ncclSuccess;
    int ret = 0, nset = 0;

    memset(bufs, 0, sizeof(bufs));
    memset(vb, 0, sizeof(vb));
    for (int i = 0; i < nlocal && res == ncclSuccess; i++) {
        int r = first + i;
        const brt_case_t *c = r == s->victim ? &p->victim : &p->c;
        if (p->kind == CH_STEP_CASE) {
            bufs[i] = (brt_buf_t){.comm = comms[i], .rank = r, .nranks = s->nranks};
            if (brt_case_setup(c, &bufs[i], err, sizeof(err)) != 0) {
                /* PreMulSum creates its op on the communicator: after an abort that fails */
                if (!brt_text_has(err, "not a live communicator")) {
                    fprintf(stderr, "chaos: rank %d: setup failed: %s\n", r, err);
                    _exit(4);
                }
                res = ncclInvalidArgument;
                break;
            }
        } else if (v_setup(p, r, s->nranks, &vb[i]) != 0) {
            fprintf(stderr, "chaos: rank %d: out of memory\n", r);
            _exit(4);
        }
        nset++;
    }
    if (nlocal > 1 && res == ncclSuccess) {
        ncclGroupStart();
    }
    for (int i = 0; i < nlocal && res == ncclSuccess; i++) {
        int r = first + i;
        const brt_case_t *c = r == s->victim ? &p->victim : &p->c;
        res = p->kind == CH_STEP_CASE ? brt_case_issue(c, &bufs[i]) : v_issue(p, &vb[i], comms[i]);
        if (res != ncclSuccess && nlocal > 1) {
            ncclGroupEnd(); /* closes the group; its message quotes the call's */
        }
    }
    if (nlocal > 1 && res == ncclSuccess) {
        res = ncclGroupEnd();
    }
    if (res != ncclSuccess) {
        step_name(p, s->nranks, &p->c, name, sizeof(name));
        for (int i = 0; i < nlocal; i++) {
            ch_out_t *o = &g_sh->out[first + i];
            o->failed_at = si;
            o->res = res;
            copy_err(o->err, name, res);
        }
        ret = 1;
    } else {
        for (int i = 0; i < nlocal; i++) {
            int r = first + i;
            const brt_case_t *c = r == s->victim ? &p->victim : &p->c;
            int bad = p->kind == CH_STEP_CASE ? brt_case_verify(c, &bufs[i], err, sizeof(err))
                                              : v_verify(p, r, s->nranks, &vb[i], err, sizeof(err));
            if (bad) {
                ch_out_t *o = &g_sh->out[r];
                o->wrong = si;
                step_name(p, s->nranks, c, name, sizeof(name));
                snprintf(o->wrong_msg, CH_MSG,
                         "step %d (%.200s) returned success with a wrong result: %.600s", si, name,
                         err);
                ret = 2;
            }
        }
    }
    for (int i = 0; i < nset; i++) {
        if (p->kind == CH_STEP_CASE) {
            brt_case_teardown(&bufs[i]);
        } else {
            v_free(&vb[i]);
        }
    }
    return ret;
}

static void enter(int first, int nlocal)
{
    for (int i = 0; i < nlocal; i++) {
        __atomic_add_fetch(&g_sh->out[first + i].entered, 1, __ATOMIC_ACQ_REL);
    }
}

static void complete(int first, int nlocal)
{
    for (int i = 0; i < nlocal; i++) {
        __atomic_add_fetch(&g_sh->out[first + i].completed, 1, __ATOMIC_ACQ_REL);
    }
}

/* Ranks first..first+nlocal-1 through init, the program and destroy. comms[0..] are set
 * by init (nlocal > 1: ncclCommInitAll) unless init already ran. */
static void run_program(const ch_scn_t *s, const ncclUniqueId *id, int first, int nlocal)
{
    ncclComm_t comms[CH_MAX_RANKS] = {0};
    int is_victim = s->victim >= first && s->victim < first + nlocal;
    int vi = s->victim - first;
    ch_timer_t timer = {.s = s, .out = &g_sh->out[s->victim]};
    pthread_t fault_tid;
    int fault_started = 0, failed = 0;
    ncclResult_t res;

    if (is_victim && s->fault == CH_KILL && s->kpoint == CH_K_BEFORE_INIT) {
        die_now(s);
    }
    if (is_victim && s->fault == CH_KILL && s->kpoint == CH_K_IN_INIT) {
        setenv("BRAID_TEST_EXIT_AT", ch_exit_at[s->kexit_at], 1);
    }
    enter(first, nlocal);
    res = nlocal > 1 ? ncclCommInitAll(comms, s->nranks, NULL)
                     : ncclCommInitRank(&comms[0], s->nranks, *id, first);
    if (res != ncclSuccess) {
        for (int i = 0; i < nlocal; i++) {
            g_sh->out[first + i].failed_at = 0;
            g_sh->out[first + i].res = res;
            copy_err(g_sh->out[first + i].err, "ncclCommInit", res);
        }
        goto out;
    }
    complete(first, nlocal);
    if (is_victim && (s->fault == CH_ABORT || s->fault == CH_REVOKE)) {
        timer.comm = comms[vi];
        if (pthread_create(&fault_tid, NULL, fault_main, &timer) == 0) {
            fault_started = 1;
        }
    }
    for (int si = 1; si <= s->nsteps && !failed; si++) {
        if (is_victim && s->fault == CH_KILL && s->kpoint == CH_K_BETWEEN && s->kstep == si - 1) {
            die_now(s);
        }
        enter(first, nlocal);
        if (is_victim && s->fault == CH_KILL && s->kpoint == CH_K_MIDCALL && s->kstep == si) {
            start_kill_timer(&timer);
        }
        int ret = run_step(s, si, comms, first, nlocal);
        if (ret == 0) {
            complete(first, nlocal);
        } else {
            failed = 1;
        }
    }
    if (is_victim && s->fault == CH_KILL && s->kpoint == CH_K_BETWEEN && s->kstep == s->nsteps &&
        !failed) {
        die_now(s);
    }
    enter(first, nlocal);
    if (is_victim && s->fault == CH_KILL && s->kpoint == CH_K_DESTROY) {
        start_kill_timer(&timer);
    }
    for (int i = 0; i < nlocal; i++) {
        ch_out_t *o = &g_sh->out[first + i];
        res = failed ? ncclCommAbort(comms[i]) : ncclCommDestroy(comms[i]);
        o->destroy_res = res;
        if (res != ncclSuccess) {
            copy_err(o->destroy_err, failed ? "ncclCommAbort" : "ncclCommDestroy", res);
        }
    }
out:
    if (is_victim) {
        __atomic_store_n(&g_sh->out[s->victim].main_done, 1, __ATOMIC_RELEASE);
        if (fault_started) {
            pthread_join(fault_tid, NULL);
        }
        if (s->fault == CH_KILL && s->kpoint == CH_K_DESTROY) {
            die_now(s); /* the timer may not have fired yet */
        }
    }
    for (int i = 0; i < nlocal; i++) {
        g_sh->out[first + i].finished = 1;
    }
}

static int rank_body(brt_rank_ctx_t *ctx)
{
    const ch_scn_t *s = &g_sh->s;
    if (s->layout == CH_PROC) {
        alarm((unsigned)(6 * CH_TIMEOUT_S * brt_time_scale()));
    }
    run_program(s, &ctx->id, ctx->rank, 1);
    return 0;
}

/* ---- the oracle ------------------------------------------------------------------- */

/* Does step si (0: init) of rank r need every rank? A call of count 0 returns at once
 * without a message (as in NCCL), and a rank that only sends (a Broadcast or Scatter root,
 * a Gather non-root) may finish once its data is out, as may a Reduce non-root (it may
 * wait for ranks further from the root, which the oracle does not trace); the V collectives exchange
 * descriptors at any count. */
static int step_needs_all(const ch_scn_t *s, int si, int r)
{
    if (si == 0 || si > s->nsteps) {
        return 1;
    }
    const ch_step_t *p = &s->steps[si - 1];
    if (p->kind != CH_STEP_CASE) {
        return 1;
    }
    switch (p->c.func) {
    case BRT_BROADCAST:
    case BRT_BCAST:
        /* On the node arena's OneShot path every rank copies from the root alone (the
         * root's check of the others ends at its next call or destroy): only a dead root
         * keeps the others from completing. */
        if (r == p->c.root || s->victim != p->c.root) {
            return 0;
        }
        break;
    case BRT_SCATTER:
        if (r == p->c.root) {
            return 0;
        }
        break;
    case BRT_SENDRECV:
        if (p->c.root != BRT_SHIFT_ALL) {
            /* A ring shift: rank r sends to r + shift and receives from r - shift only (a
             * shift of the rank count: from itself); a send may finish without its
             * receiver, so only a dead sender to r keeps r from completing. */
            int from = ((r - p->c.root) % s->nranks + s->nranks) % s->nranks;
            if (from != s->victim || from == r) {
                return 0;
            }
        }
        break;
    case BRT_GATHER:
    case BRT_REDUCE: /* data flows to the root only: a non-root never waits for it */
        if (r != p->c.root) {
            return 0;
        }
        break;
    default: break;
    }
    return p->c.count > 0;
}

static int judge(const ch_scn_t *s, const char *launch_err, FILE *f)
{
    int bad = 0, any_fail = 0;
    int bound = s->nsteps + 2; /* steps a survivor may complete */
    const ch_out_t *vo = &g_sh->out[s->victim];

    if (launch_err[0]) {
        fprintf(f, "  %s", launch_err);
        bad = 1;
    }
    if (s->fault == CH_KILL) {
        bound = vo->entered;
    } else if (s->fault == CH_ABORT || s->fault == CH_REVOKE) {
        bound = vo->fault_done ? vo->fault_entered : s->nsteps + 2;
    }
    for (int r = 0; r < s->nranks; r++) {
        const ch_out_t *o = &g_sh->out[r];
        int survivor = !(r == s->victim && s->fault == CH_KILL);
        int failed = o->failed_at >= 0;
        if (!survivor) {
            continue;
        }
        if (!o->finished) {
            fprintf(f, "  rank %d did not finish (entered %d steps, completed %d)\n", r, o->entered,
                    o->completed);
            bad = 1;
            continue;
        }
        if (o->wrong) {
            fprintf(f, "  rank %d: %s\n", r, o->wrong_msg);
            bad = 1;
        }
        any_fail |= failed || o->destroy_res != ncclSuccess;
        if (s->fault == CH_NONE) {
            if (failed || o->destroy_res != ncclSuccess) {
                fprintf(f, "  rank %d failed with no fault: %s%s\n", r, o->err, o->destroy_err);
                bad = 1;
            }
            continue;
        }
        if (r == s->victim && s->fault != CH_MISMATCH) {
            continue; /* its own abort or revoke: any error of its own */
        }
        for (int si = bound; s->fault != CH_MISMATCH && si < o->completed; si++) {
            if (step_needs_all(s, si, r)) {
                fprintf(f,
                        "  rank %d completed step %d (0 is init) but the victim had entered "
                        "only %d steps when the fault struck\n",
                        r, si, bound);
                bad = 1;
                break;
            }
        }
        if (failed && s->layout == CH_INITALL && s->fault == CH_ABORT &&
            brt_text_has(o->err, "not a live communicator")) {
            /* One thread drives every rank: it used the victim's handle after the abort
             * (the test's doing; the library can only say the handle is dead). */
            continue;
        }
        if (failed && !brt_text_names_rank(o->err, s->victim)) {
            fprintf(f, "  rank %d failed at step %d without naming rank %d: %s\n", r, o->failed_at,
                    s->victim, o->err);
            bad = 1;
        }
    }
    if (s->fault == CH_MISMATCH && !any_fail) {
        fprintf(f, "  the mismatch went unnoticed: every rank succeeded\n");
        bad = 1;
    }
    return bad;
}

static void report_ranks(const ch_scn_t *s, FILE *f)
{
    for (int r = 0; r < s->nranks; r++) {
        const ch_out_t *o = &g_sh->out[r];
        fprintf(f, "  rank %d: entered %d completed %d failed_at %d res %d destroy %d%s%s\n", r,
                o->entered, o->completed, o->failed_at, o->res, o->destroy_res,
                o->err[0] ? "\n    error: " : "", o->err);
        if (o->destroy_err[0]) {
            fprintf(f, "    destroy: %s\n", o->destroy_err);
        }
    }
}

/* ---- one iteration (in its own process) ------------------------------------------- */

static int run_iteration(uint64_t seed, int verbose)
{
    ch_scn_t *s;
    char launch_err[4096] = "";
    double scale = brt_time_scale();
    double deadline_s = 8 * CH_TIMEOUT_S * scale;
    int bad;

    g_sh = mmap(NULL, sizeof(*g_sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g_sh == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    memset(g_sh, 0, sizeof(*g_sh));
    s = &g_sh->s;
    scn_draw(s, seed);
    for (int r = 0; r < CH_MAX_RANKS; r++) {
        g_sh->out[r].failed_at = -1;
    }
    if (s->layout == CH_PROC) {
        brt_procs_t p;
        if (brt_procs_start(&p, s->nranks, rank_body, NULL, launch_err, sizeof(launch_err)) == 0) {
            char out[8192];
            /* The victim may end by SIGKILL; its exit status is not judged. */
            unsigned ok = s->fault == CH_KILL ? 1u << s->victim : 0;
            brt_procs_wait(&p, brt_now() + deadline_s, ok, out, sizeof(out), 0);
            /* Exit statuses: a rank that died of a signal or hung is a failure, except the
             * victim of a kill (which exits 3 or dies of SIGKILL on purpose). */
            char *line = out;
            while (line && *line) {
                char *nl = strchr(line, '\n');
                int r = -1;
                if (sscanf(line, "rank %d/", &r) == 1 && !(s->fault == CH_KILL && r == s->victim)) {
                    size_t used = strlen(launch_err);
                    snprintf(launch_err + used, sizeof(launch_err) - used, "%.*s\n",
                             nl ? (int)(nl - line) : (int)strlen(line), line);
                }
                line = nl ? nl + 1 : NULL;
            }
        }
    } else {
        alarm((unsigned)(deadline_s + 30));
        if (s->layout == CH_THREADS) {
            brt_threads_run(s->nranks, rank_body, NULL, deadline_s, launch_err, sizeof(launch_err));
        } else {
            run_program(s, NULL, 0, s->nranks);
        }
    }
    bad = judge(s, launch_err, stderr);
    if (bad || verbose) {
        fprintf(stderr, "chaos: seed %" PRIu64 " %s\n", seed, bad ? "FAILED" : "passed");
        scn_describe(s, stderr);
        report_ranks(s, stderr);
    }
    return bad;
}

/* ---- the driver ------------------------------------------------------------------- */

static void set_env(const ch_scn_t *s)
{
    char v[32];
    snprintf(v, sizeof(v), "%d", CH_TIMEOUT_S);
    setenv("BRAID_TIMEOUT", v, 1);
    setenv("BRAID_BOOTSTRAP_TIMEOUT", v, 1);
    setenv("BRAID_BOOTSTRAP_SHM", s->boot_shm ? "1" : "0", 1);
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    setenv("BRAID_WAIT_WARN", "0", 1);
    if (s->small_fifo) {
        setenv("NCCL_BUFFSIZE", "65536", 1);
    }
    if (s->net) {
        setenv("NCCL_P2P_DISABLE", "1", 1);
        setenv("NCCL_SHM_DISABLE", "1", 1);
        setenv("NCCL_NET_PLUGIN", "socket", 1);
    }
}

/* Run seed's iteration in a child process (own process group, own environment); 0 when
 * it passed. */
static int spawn_iteration(const char *self, uint64_t seed, int verbose)
{
    ch_scn_t s;
    char arg[32];
    double scale = brt_time_scale();
    double deadline = brt_now() + 10 * CH_TIMEOUT_S * scale + 30;
    int st = 0, bad = 0;
    pid_t pid;

    scn_draw(&s, seed);
    snprintf(arg, sizeof(arg), "%" PRIu64, seed);
    fflush(NULL);
    pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        set_env(&s);
        execl(self, self, "--one", arg, verbose ? "--verbose" : NULL, (char *)NULL);
        _exit(127);
    }
    setpgid(pid, pid);
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) {
            break;
        }
        if (brt_now() > deadline) {
            fprintf(stderr, "chaos: seed %" PRIu64 ": the iteration hung past %.0f s; killed\n",
                    seed, 10 * CH_TIMEOUT_S * scale + 30);
            kill(-pid, SIGKILL);
            waitpid(pid, &st, 0);
            bad = 1;
            break;
        }
        brt_sleep_ms(20);
    }
    if (!bad && WIFSIGNALED(st)) {
        fprintf(stderr, "chaos: seed %" PRIu64 ": the iteration process died of signal %d\n", seed,
                WTERMSIG(st));
        bad = 1;
    } else if (!bad && WEXITSTATUS(st) != 0) {
        bad = 1;
    }
    /* No rank may outlive its iteration (a rank that hung was killed by the iteration). */
    for (int i = 0; i < 50 && kill(-pid, 0) == 0; i++) {
        brt_sleep_ms(20);
    }
    if (kill(-pid, 0) == 0) {
        fprintf(stderr, "chaos: seed %" PRIu64 ": processes of the iteration outlived it\n", seed);
        kill(-pid, SIGKILL);
        bad = 1;
    }
    if (bad) {
        fprintf(stderr,
                "chaos: seed %" PRIu64 " failed; run it again with "
                "BRAID_CHAOS_SEED=%" PRIu64 " BRAID_CHAOS_ITERS=1\n",
                seed, seed);
        scn_describe(&s, stderr);
    }
    return bad;
}

static uint64_t num_arg(const char *env, const char *v, uint64_t dflt)
{
    const char *e = getenv(env);
    if (e != NULL && *e) {
        v = e;
    }
    return v != NULL ? strtoull(v, NULL, 0) : dflt;
}

int main(int argc, char **argv)
{
    const char *seed_arg = NULL, *iters_arg = NULL;
    int repeat = 1;
    int verbose = 0, nbad = 0;
    uint64_t seed, iters;
    double t0 = brt_now();

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--one") == 0 && i + 1 < argc) {
            return run_iteration(strtoull(argv[i + 1], NULL, 0),
                                 i + 2 < argc && strcmp(argv[i + 2], "--verbose") == 0);
        } else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            seed_arg = argv[++i];
        } else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
            iters_arg = argv[++i];
        } else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) {
            repeat = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--verbose") == 0) {
            verbose = 1;
        } else {
            fprintf(stderr,
                    "usage: %s [--seed S] [--iters N] [--repeat R] [--verbose] "
                    "(BRAID_CHAOS_SEED, BRAID_CHAOS_ITERS override)\n",
                    argv[0]);
            return 2;
        }
    }
    seed = num_arg("BRAID_CHAOS_SEED", seed_arg, 1);
    iters = num_arg("BRAID_CHAOS_ITERS", iters_arg, 10);
    for (uint64_t i = 0; i < iters * (uint64_t)(repeat > 0 ? repeat : 1); i++) {
        double t = brt_now();
        int bad = spawn_iteration("/proc/self/exe", seed + i % iters, verbose);
        nbad += bad;
        printf("chaos: seed %" PRIu64 " %s (%.2f s)\n", seed + i % iters, bad ? "FAILED" : "ok",
               brt_now() - t);
        fflush(stdout);
    }
    printf("chaos: %d of %" PRIu64 " iterations failed (seeds %" PRIu64 "..%" PRIu64 ", %.1f s)\n",
           nbad, iters * (uint64_t)(repeat > 0 ? repeat : 1), seed, seed + iters - 1,
           brt_now() - t0);
    return nbad ? 1 : 0;
}
