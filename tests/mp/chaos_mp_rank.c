/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A chaos rank's program (chaos_mp.c's comment says what the test does): init, the drawn
 * steps and destroy, on one rank (a process or a thread of its own) or on every rank from
 * one thread (ncclCommInitAll, each step one group). Each step's start, success, error or
 * wrong result is written to the rank's ch_out_t in the iteration's shared memory for the
 * oracle; the victim strikes its fault itself: it dies (_exit or SIGKILL) before or between
 * steps or from a timer thread mid-call or in destroy, or a second thread of it aborts or
 * revokes the communicator once the main thread has entered the drawn step.
 */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <braid.h>
#include <nccl.h>

#include "brt_coll.h"
#include "brt_data.h"
#include "brt_launch.h"
#include "chaos_mp.h"

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
void run_program(const ch_scn_t *s, const ncclUniqueId *id, int first, int nlocal)
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

int rank_body(brt_rank_ctx_t *ctx)
{
    const ch_scn_t *s = &g_sh->s;
    if (s->layout == CH_PROC) {
        alarm((unsigned)(6 * CH_TIMEOUT_S * brt_time_scale()));
    }
    run_program(s, &ctx->id, ctx->rank, 1);
    return 0;
}
