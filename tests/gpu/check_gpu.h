/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the files of the check_gpu program (check_gpu.c, check_gpu_procs.c) share.
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

/* Every case on one rank (this thread drives only it), on `s`; returns the failures. */
int run_cases_one_rank(ncclComm_t comm, cudaStream_t s, int rank, int n, const brt_case_t *cases,
                       size_t ncases, const char *who);

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

#endif /* BR_TESTS_CHECK_GPU_H_ */
