/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the files of the check_gpu program share: check_gpu.c (main, the case matrices on
 * device buffers), check_gpu_waits.c (the sections written by hand), check_gpu_procs.c
 * (ranks as processes) and check_gpu_suspend.c (ncclCommSuspend and Resume).
 */
#ifndef BR_TESTS_CHECK_GPU_H_
#define BR_TESTS_CHECK_GPU_H_

#include <cuda_runtime.h>
#include <stddef.h>

#include "brt_coll.h"
#include "nccl.h"

#define MAXR 8 /* ranks */

/* Checks that failed so far (EXPECT counts them). */
extern int failures;

/* What a rank's thread is given: its communicator's id, its rank of n, the cases to run
 * (if any); it adds its failures to `fails`. */
typedef struct {
    ncclUniqueId id;
    int rank, n;
    const brt_case_t *cases;
    size_t ncases;
    int fails;
} rank_arg_t;

/* n ranks on device dev by ncclCommInitAll (their buffers go there); the process ends when
 * it fails. */
void init_all(ncclComm_t *comms, int n, int dev);

/* Every case on one rank (this thread drives only it), on `s`; returns the failures. */
int run_cases_one_rank(ncclComm_t comm, cudaStream_t s, int rank, int n, const brt_case_t *cases,
                       size_t ncases, const char *who);

/* check_gpu_waits.c: the sections written by hand (check_gpu.c's comment says what each
 * does); failures are counted in `failures`. */
void section_latency(void);
void section_biggroup(void);
void section_cliques(void);
void section_overlap(void);
void section_errors(void);
void section_abort(void);
void section_capture(void);
/* A thread body: ncclCommAbort(*(ncclComm_t *)p) 300 ms from now. */
void *abort_later(void *p);

/* check_gpu_procs.c: the `procs` section; n ranks as processes doing `what`; one such rank
 * (`check_gpu proc-rank what rank n hex`), returning its failures. */
void section_procs(void);
void run_procs(const char *what, int n);
int proc_rank_main(const char *what, int rank, int n, const char *hex);

/* check_gpu_suspend.c: a rank's rounds of device AllReduces around ncclCommSuspend and
 * ncclCommResume (returns its failures), and the section that runs them. */
int suspend_rounds(ncclComm_t comm, cudaStream_t s, int rank, int n, const char *who);
void section_suspend(void);

/* check_gpu_claim.c: the `claim` section (emulated driver only): two GPUs of one clique
 * fail at once and every rank gets one device's whole report. */
void section_claim(void);

#endif /* BR_TESTS_CHECK_GPU_H_ */
