/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the files of the seeded chaos test share (chaos_mp.c's comment says what it does):
 * a scenario (ch_scn_t: layout, program, fault) drawn from a seed by chaos_mp_draw.c, each
 * rank's outcome (ch_out_t) that chaos_mp_rank.c writes while it runs the program, and the
 * oracle of chaos_mp_oracle.c that judges the outcomes; chaos_mp.c runs the iterations.
 * The scenario and the outcomes live in memory shared by an iteration's processes (g_sh).
 */
#ifndef BR_TESTS_CHAOS_MP_H_
#define BR_TESTS_CHAOS_MP_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <nccl.h>

#include "brt_coll.h"
#include "brt_launch.h"

#define CH_MAX_RANKS 6
#define CH_MAX_STEPS 4
#define CH_MAX_BYTES ((size_t)4 << 20)
#define CH_MSG 1024
#define CH_TIMEOUT_S 10 /* BRAID_TIMEOUT and BRAID_BOOTSTRAP_TIMEOUT */

/* How the ranks run, the fault, where a kill strikes, what a mismatch changes (their names,
 * for descriptions: chaos_mp_draw.c). */
enum { CH_PROC, CH_THREADS, CH_INITALL, CH_NLAYOUTS };
enum { CH_NONE, CH_KILL, CH_ABORT, CH_REVOKE, CH_MISMATCH, CH_NFAULTS };
enum { CH_K_BEFORE_INIT, CH_K_IN_INIT, CH_K_MIDCALL, CH_K_BETWEEN, CH_K_DESTROY, CH_NKPOINTS };
enum { CH_MM_COUNT, CH_MM_TYPE, CH_MM_OP, CH_MM_ROOT, CH_MM_FUNC };

/* A step beyond tests/common's collectives. */
enum { CH_STEP_CASE, CH_STEP_AGV, CH_STEP_A2AV };

/* A step of the program. */
typedef struct {
    int kind;
    brt_case_t c;      /* CH_STEP_CASE: the call every rank makes */
    brt_case_t victim; /* what the victim makes (differs only at the mismatched step) */
    size_t vmax;       /* V collectives: most elements in one block */
    uint32_t seed;
} ch_step_t;

/* A scenario: the layout and environment, the program and the fault, all drawn from seed. */
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

/* What an iteration's processes share. */
typedef struct {
    ch_scn_t s;
    ch_out_t out[CH_MAX_RANKS];
} ch_shared_t;

/* The iteration's shared memory (chaos_mp.c maps it before the ranks start). */
extern ch_shared_t *g_sh;

/* chaos_mp_draw.c: the BRAID_TEST_EXIT_AT points of a kill in init (kexit_at indexes it). */
extern const char *const ch_exit_at[];

/* chaos_mp_draw.c: the scenario of a seed (the same on every call); a description of it,
 * a line a setting and a step; the name of step p made as call c (p->c or p->victim). */
void scn_draw(ch_scn_t *s, uint64_t seed);
void scn_describe(const ch_scn_t *s, FILE *f);
void step_name(const ch_step_t *p, int nranks, const brt_case_t *c, char *buf, size_t len);

/* chaos_mp_rank.c: ranks first..first+nlocal-1 through init, the program and destroy
 * (nlocal > 1: one thread drives them, by ncclCommInitAll; id unused then), their outcomes
 * written to g_sh; and the body of a rank that is a process or a thread of its own. */
void run_program(const ch_scn_t *s, const ncclUniqueId *id, int first, int nlocal);
int rank_body(brt_rank_ctx_t *ctx);

/* chaos_mp_oracle.c: judge the outcomes in g_sh against the scenario (and what launching
 * the ranks reported, launch_err), writing every violation to f; 1 when there was one.
 * And every rank's outcome, a line or two each. */
int judge(const ch_scn_t *s, const char *launch_err, FILE *f);
void report_ranks(const ch_scn_t *s, FILE *f);

#endif /* BR_TESTS_CHAOS_MP_H_ */
