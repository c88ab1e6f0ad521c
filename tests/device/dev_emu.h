/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The host emulation of the CUDA executor's launches, for check_device: FIFO connections in
 * host memory (one br_dev_conn_t per directed link of each channel's ring and tree), work
 * items filled from the real plan (br_plan_layout, br_plan_sched) and graph
 * (br_graph_build), and a launch run with one or more threads per block, each calling the
 * kernels' own br_dev_run_block_with(). References: the host executor's arithmetic (br_reduce) folded
 * in the order each schedule combines the ranks' inputs.
 */
#ifndef BR_TEST_DEV_EMU_H_
#define BR_TEST_DEV_EMU_H_

#include <stddef.h>
#include <stdint.h>

#include "coll.h"
#include "dev_work.h"
#include "graph.h"

#define EMU_MAXR 8  /* ranks */
#define EMU_MAXCH 2 /* channels */

/* Every connection of one communicator's channels. */
typedef struct {
    int n, nch;
    br_graph_t *g;
    size_t slot_bytes;
    uint64_t start_step; /* step numbers (and counters) new connections start at */
    br_dev_conn_t *conn[EMU_MAXCH][EMU_MAXR][EMU_MAXR]; /* [channel][sender][receiver] */
} emu_fabric_t;

/* Graph of n ranks over nch channels; host[r] is rank r's host (tree shapes follow it). */
void emu_fabric_init(emu_fabric_t *f, int n, int nch, const uint64_t *host, size_t slot_bytes);
void emu_fabric_free(emu_fabric_t *f);

/* The work item of rank r on channel c for op (its func, count, type, redop, root, algo,
 * proto, nchannels, chunk_bytes and seq set), over buffers send/recv. Returns 1 when the
 * channel has data for the rank, 0 when not (no work item: nothing to do). */
int emu_work_fill(emu_fabric_t *f, const br_op_t *op, int r, int c, const void *send, void *recv,
                  br_dev_work_t *w);

/* Launch state: the claim, stop word and report as those of one device's launch. */
typedef struct {
    br_dev_launch_t L;
    uint32_t abort_flag, stop, claim;
    br_dev_report_t report;
} emu_launch_t;

/* Threads per block of the launches that follow (1 at first): several threads of a block
 * share its state and barrier as a CUDA block's do (dev_arch.h). */
void emu_set_block_threads(int nthr);

/* Run blocks [0, nblocks) of works, emu_set_block_threads() threads each, until all
 * return. abort_after_ns > 0: raise the abort flag that long after the start. Returns the
 * status of its report (BR_DEV_OK: no block failed). */
uint32_t emu_launch(emu_launch_t *E, const br_dev_block_t *blocks, int nblocks,
                    const br_dev_work_t *works, uint64_t timeout_ns, uint64_t abort_after_ns);

/*
 * The expected output of a reduction on channel c's share (elements [lo, hi)): dst[e] for
 * every rank's combined input, folded in the schedule's order with the host executor's
 * arithmetic. in[r] is rank r's input (for ReduceScatter: the whole n * count array);
 * dst is the result for `owner` (ReduceScatter: the block of rank owner; others: whole).
 */
void emu_reference(emu_fabric_t *f, const br_op_t *op, int c, const void *const *in, int owner,
                   void *dst);

#endif /* BR_TEST_DEV_EMU_H_ */
