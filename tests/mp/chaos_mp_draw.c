/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Drawing a chaos scenario (chaos_mp.c's comment says what the test does): from one 64-bit
 * seed, by a splitmix64 stream, the rank count, layout, transport and environment, a short
 * program of steps (tests/common's thin matrix at drawn sizes, or the V collectives) and
 * one fault with its victim and moment; a mismatch changes one thing of one step of the
 * victim's. The same seed draws the same scenario in every process, so the driver, the
 * iteration and each rank draw it again rather than pass it. And a scenario's description.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "brt_coll.h"
#include "brt_data.h"
#include "chaos_mp.h"

static const char *const ch_layout_names[] = {"processes", "threads", "initall"};
static const char *const ch_fault_names[] = {"none", "kill", "abort", "revoke", "mismatch"};
static const char *const ch_kpoint_names[] = {"before init", "in init", "mid-call", "between calls",
                                              "in destroy"};
const char *const ch_exit_at[] = {"boot-shm-map", "boot-shm-gather", "init-connect"};
static const char *const ch_mm_names[] = {"count", "type", "op", "root", "collective"};

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

void scn_draw(ch_scn_t *s, uint64_t seed)
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

void step_name(const ch_step_t *p, int nranks, const brt_case_t *c, char *buf, size_t len)
{
    if (p->kind == CH_STEP_CASE) {
        brt_case_name(c, nranks, buf, len);
    } else {
        snprintf(buf, len, "%s float32 up to %zu per block seed %u",
                 p->kind == CH_STEP_AGV ? "braidAllGatherV" : "braidAlltoAllV", p->vmax, p->seed);
    }
}

void scn_describe(const ch_scn_t *s, FILE *f)
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
