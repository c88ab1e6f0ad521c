/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Cutting an operation up: which part of the data each channel owns, how many units one
 * FIFO slot carries, and who a rank is in a channel's ring or tree for the operation.
 * Deterministic from the call's arguments and the graph alone, so every rank cuts alike.
 * No state, any thread.
 */
#include "plan_int.h"

void br_plan_channel_range(size_t units, int nch, int c, size_t *lo_p, size_t *hi_p)
{
    size_t part = (units + (size_t)nch - 1) / (size_t)nch;
    /* Keep channel boundaries on 64-unit multiples so slices stay aligned. */
    part = (part + 63) & ~(size_t)63;
    size_t lo = part * (size_t)c, hi = lo + part;
    if (lo > units) {
        lo = units;
    }
    if (hi > units) {
        hi = units;
    }
    *lo_p = lo;
    *hi_p = hi;
}

void br_plan_layout(const br_op_t *op, int nranks, int c, br_plan_layout_t *l)
{
    size_t tsize = br_type_size(op->type);
    int reduce = br_func_is_reduction(op->func) && op->algo != BR_ALGO_RING_ONESHOT;

    (void)nranks;
    /* Data that is only moved is cut in bytes; reduced data in elements. */
    l->esize = reduce ? tsize : 1;
    l->units = reduce ? op->count : op->count * tsize;
    if (op->algo == BR_ALGO_RING_ONESHOT) {
        l->lo = 0;
        l->hi = l->units;
    } else {
        br_plan_channel_range(l->units, op->nchannels, c, &l->lo, &l->hi);
    }
    l->slice = op->chunk_bytes / l->esize;
    if (l->slice == 0) {
        l->slice = 1;
    }
}

void br_plan_sched(const br_graph_t *g, const br_op_t *op, int c, int rank, br_sched_t *s)
{
    const int *ring = br_graph_ring(g, c), *pos = br_graph_ring_pos(g, c);
    const br_tree_node_t *t = br_graph_tree(g, c, rank);
    int n = g->nranks;

    s->algo = op->algo == BR_ALGO_TREE ? BR_ALGO_TREE : BR_ALGO_RING;
    s->func = (uint8_t)(op->algo == BR_ALGO_RING_ONESHOT ? BR_FUNC_ALLGATHER : op->func);
    s->nranks = n;
    s->rank = rank;
    s->pos = pos[rank];
    s->root_pos = pos[op->root];
    s->prev = ring[(s->pos + n - 1) % n];
    s->next = ring[(s->pos + 1) % n];
    s->up = t->up;
    s->ndown = t->ndown;
    for (int i = 0; i < BR_MAX_TREE_ARITY; i++) {
        s->down[i] = t->down[i];
    }
    s->root = op->root;
    s->tree_root = g->tree_root[c];
    s->toward = -1;
    s->on_path = 0;
    if (op->func == BR_FUNC_BROADCAST || op->func == BR_FUNC_REDUCE) {
        s->toward = br_graph_tree_child_toward(g, c, rank, op->root);
        s->on_path = rank == op->root || s->toward >= 0;
    }
}
