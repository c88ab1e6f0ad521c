/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The in-memory simulator of tests/unit/plan: runs plan_sched.h's schedules for every rank
 * and channel of one case, without transports. Each rank and channel walks its streams
 * step by step; a step runs only when every FIFO it receives from holds a slot and every
 * FIFO it sends to has one free (8 slots, NCCL_STEPS), and its primitive moves and combines
 * real data. Each slot carries a tag of the step that filled it, so a receiver that takes
 * another iteration's or another chunk's data is named at once.
 *
 * A case fails when a rank's output differs from a reference computed here, a guard byte or
 * an input changes, a step talks to a rank that is not its ring neighbour or tree link,
 * sends from output it has not written, writes an output element twice, deadlocks, or
 * leaves a slot in a FIFO; the slot counts per channel and per ring link must also be the
 * ones the algorithms imply.
 */
#ifndef BR_TEST_PLAN_SIM_H_
#define BR_TEST_PLAN_SIM_H_

#include <stddef.h>

#include "graph.h"
#include "plan.h"

#define MAXR 64 /* ranks */
#define MAXCH 4 /* channels */

/* Orders in which the simulator visits ranks and streams. */
enum { ORDER_GREEDY, ORDER_REVERSE, ORDER_RANDOM, NORDERS };

/* One case of the matrix. */
typedef struct {
    br_func_t func;
    int algo;
    ncclDataType_t type; /* ncclInt32, ncclUint32 (with ncclAvg) or ncclUint64 */
    ncclRedOp_t red;     /* reductions: ncclSum, ncclAvg (uint32) or ncclMax (uint64) */
    size_t count, chunk_bytes;
    int root, inplace, nch, order;
    const char *layout;
} case_t;

/* Run case k on graph g (built for k->nch channels): 0, or 1 with what failed in msg. */
int plan_sim_run_case(const case_t *k, const br_graph_t *g, char *msg, size_t len);

/* Steps the whole case takes, roughly, over all ranks and channels (for sampling). */
double plan_sim_est_steps(const case_t *k, int n);

#endif /* BR_TEST_PLAN_SIM_H_ */
