/* SPDX-License-Identifier: Apache-2.0 */
/*
 * group: ncclGroupStart/End. Calls made inside a group (operations, and communicator
 * inits and splits) are queued per thread and run together at the outermost
 * ncclGroupEnd: inits and splits first (in parallel threads, so one thread may create
 * every rank of a process), then missing p2p connections, then every operation of every
 * communicator, progressed together so a single thread can drive several ranks.
 * Outside a group each call is its own group.
 */
#ifndef BR_GROUP_H_
#define BR_GROUP_H_

#include "comm.h"

ncclResult_t br_group_start(void);
ncclResult_t br_group_end(void);
int br_group_depth(void);
/* ncclGroupSimulateEnd: close the group like br_group_end, but plan its collectives and
 * put the sum of their predicted times (us) in *us_p instead of running them. */
ncclResult_t br_group_simulate_end(float *us_p);

/* A call refused inside a group: the outermost ncclGroupEnd returns the first such error
 * and runs nothing of the group, as NCCL does. No effect outside a group. */
void br_group_note_error(ncclResult_t res);

/* Queue an operation (assigns its sequence number) and, outside a group, run it. The
 * caller holds comm (br_comm_hold); a queued call holds it until its group has run. */
ncclResult_t br_group_add_op(ncclComm_t comm, br_op_t *op);

/* The collective number of a Gather, Scatter or AlltoAll, taken before its sends and
 * receives are queued with it as their pattern_seq (number + 1). Same caller rule. */
uint64_t br_group_pattern_number(ncclComm_t comm);

/* Run host operations (sequenced already, buffers in host memory) on a communicator as one
 * group, from any thread: the stager of device calls across processes
 * (br_cuda_stage_run_fn; comm_v is the ncclComm_t). */
ncclResult_t br_group_run_host(void *comm_v, br_op_t *ops, int nops);

/* Communicator creation, deferred to ncclGroupEnd inside a group (a split's caller holds
 * the parent, as for an operation). */
ncclResult_t br_group_add_init(ncclComm_t *comm_p, int nranks, const ncclUniqueId *id, int rank,
                               const ncclConfig_t *config);
/* The same, for CUDA device `device` (-1: none; ncclCommInitAll's list). */
ncclResult_t br_group_add_init_dev(ncclComm_t *comm_p, int nranks, const ncclUniqueId *id,
                                   int rank, const ncclConfig_t *config, int device);
ncclResult_t br_group_add_split(ncclComm_t parent, int color, int key, ncclComm_t *comm_p,
                                const ncclConfig_t *config);

#endif /* BR_GROUP_H_ */
