/* SPDX-License-Identifier: Apache-2.0 */
/*
 * group's private declarations, shared by group.c (the queue and ncclGroupEnd) and
 * group_fold.c (reductions that run as an owner fold, in phases of their own).
 */
#ifndef BR_GROUP_INT_H_
#define BR_GROUP_INT_H_

#include "group.h"

typedef enum { G_OP, G_INIT, G_SPLIT } gkind_t;

/* One queued call of a group. */
typedef struct {
    gkind_t kind;
    ncclComm_t comm; /* op: its comm; split: the parent */
    br_op_t op;
    ncclComm_t *out; /* init/split */
    int nranks, rank, color, key;
    ncclUniqueId id;
    ncclConfig_t config;
    int has_config;
    int device; /* init/split: the CUDA device captured when the call was made */
    ncclResult_t res;
} gcall_t;

/* Run the operations among cs[0..n) as one executor batch: device calls submitted, p2p
 * connections made, host calls progressed together. Owner-fold reductions are left out
 * (br_group_fold_run runs them). */
ncclResult_t br_group_run_batch(gcall_t *cs, int n);

/* Run fn on each of n argument structs (args, arg_size bytes apart), each in a thread of
 * its own where n > 1 (in the caller where a thread cannot start), and join them. */
void br_group_run_parallel(int n, void *(*fn)(void *), void *args, size_t arg_size);

/* Make the p2p connections that the host calls among cs[0..n) need, on each of comms
 * (group_connect.c). */
ncclResult_t br_group_connect(gcall_t *cs, int n, ncclComm_t *comms, int ncomms);

/* Does the queued call run as an owner fold (on host memory)? */
int br_group_is_fold(const gcall_t *c);

/*
 * Run the owner-fold reductions among cs[0..n), in call order, after the rest of the
 * group: one batch of sends and receives for all of them (each rank gets its slice of
 * every input), the folds, then one batch that gathers the slices (AllReduce: an
 * AllGather as plan chooses it; Reduce: sends to the root).
 */
ncclResult_t br_group_fold_run(gcall_t *cs, int n);

#endif /* BR_GROUP_INT_H_ */
