/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The schedules of the Ring and Tree algorithms, as data and pure functions. For one
 * rank, one channel and one collective, br_sched_t says who the rank is in the channel's
 * ring or tree; br_sched_step() says what step j of an iteration does: which primitive
 * (a combination of receive, reduce, copy, send), from and to which peers, and on which
 * chunk. An executor walks the steps of each stream in order, one FIFO slot per step,
 * and owns nothing of the algorithm itself.
 *
 * The structs hold no pointers and the functions touch nothing but their arguments, so
 * the host executor (core/exec) and the CUDA kernels interpret the very same tables; the
 * in-memory simulator in tests/unit/plan checks every schedule for exact results.
 *
 * Streams: a Ring collective is one stream of steps. A Tree collective is two: stream 0
 * moves data up towards the tree's root, stream 1 down from it; they progress
 * independently (each on its own connections), except that a step marked `after` waits
 * until stream 0 has finished the same chunk on this rank.
 *
 * Chunks: a channel's share [lo, hi) of the data (in units: elements when reducing,
 * bytes when only moving) is cut into iterations. A Ring AllReduce iteration covers
 * nranks chunks of br_sched_chunk() units each (one per ring position); every other
 * iteration covers one chunk.
 */
#ifndef BR_PLAN_SCHED_H_
#define BR_PLAN_SCHED_H_

#include <stddef.h>
#include <stdint.h>

#include "coll.h"

#ifdef __CUDACC__
#define BR_SCHED_FN static inline __host__ __device__
#else
#define BR_SCHED_FN static inline
#endif

/* The primitive of a step: which of these it does, in this order. NCCL's names are the
 * combinations: send, recv (RECV|COPY), recvReduceSend, recvReduceCopy,
 * recvReduceCopySend, recvCopySend, copySend (LOCAL|SEND), recvSend, sendFromOutput. */
#define BR_PRIM_RECV 0x01        /* take a filled slot from every recv peer */
#define BR_PRIM_REDUCE 0x02      /* combine what was received with this rank's input */
#define BR_PRIM_COPY 0x04        /* write the step's data to the output */
#define BR_PRIM_SEND 0x08        /* fill a slot at every send peer */
#define BR_PRIM_POST 0x10        /* the reduction is complete: apply its final step */
#define BR_PRIM_LOCAL 0x20       /* copy this rank's input to its own output first */
#define BR_PRIM_FROM_OUTPUT 0x40 /* what is sent comes from the output (written earlier) */

/* Who a rank is in one channel's ring or tree, for one collective. */
typedef struct {
    uint8_t algo;    /* BR_ALGO_RING or BR_ALGO_TREE */
    uint8_t func;    /* br_func_t the steps implement (a RingOneShot runs an AllGather) */
    int32_t nranks;
    int32_t rank;
    /* Ring: positions on the ring, and the neighbours (ranks). */
    int32_t pos;      /* this rank's position */
    int32_t root_pos; /* position of the op's root (Broadcast, Reduce) */
    int32_t prev, next;
    /* Tree: this rank's links (ranks, -1 for none). */
    int32_t up;
    int32_t down[BR_MAX_TREE_ARITY];
    int32_t ndown;
    int32_t root;      /* the op's root rank (Broadcast, Reduce) */
    int32_t tree_root; /* the rank at the tree's root */
    int32_t toward;    /* child on the way down to `root`, -1 when root is not below */
    int32_t on_path;   /* Broadcast/Reduce: this rank lies between root and tree_root */
} br_sched_t;

/* One step. */
typedef struct {
    uint32_t prim;  /* BR_PRIM_* */
    int32_t nrecv, nsend;
    int32_t recv[BR_MAX_TREE_ARITY]; /* peers (ranks) a slot is taken from */
    int32_t send[BR_MAX_TREE_ARITY]; /* peers (ranks) a slot is filled for */
    int32_t chunk;  /* Ring: the ring position whose chunk this is; Tree: 0 */
    int32_t after;  /* Tree stream 1: wait for stream 0 to finish this chunk first */
} br_step_t;

BR_SCHED_FN int br_sched_mod(int a, int n)
{
    return ((a % n) + n) % n;
}

/* Streams of the collective (1 for Ring, 2 for Tree). */
BR_SCHED_FN int br_sched_nstreams(const br_sched_t *s)
{
    return s->algo == BR_ALGO_TREE ? 2 : 1;
}

/* Steps per iteration of a stream: 0 when this rank has nothing to do in it. */
BR_SCHED_FN int br_sched_nsteps(const br_sched_t *s, int stream)
{
    int n = s->nranks;
    if (n < 2) {
        return 0;
    }
    if (s->algo != BR_ALGO_TREE) {
        switch (s->func) {
        case BR_FUNC_ALLREDUCE: return 2 * n - 1;
        case BR_FUNC_ALLGATHER:
        case BR_FUNC_REDUCESCATTER: return n;
        default: return 1;
        }
    }
    if (s->func == BR_FUNC_BROADCAST) {
        if (stream == 0) {
            return s->on_path && s->root != s->tree_root ? 1 : 0;
        }
        if (!s->on_path) {
            return 1;
        }
        /* On the path: it sends to its children off the path (and copies its input
         * when it is the root). */
        return s->ndown > (s->toward >= 0 ? 1 : 0) || (s->rank == s->root && s->up < 0) ? 1 : 0;
    }
    if (s->func == BR_FUNC_REDUCE && stream == 1) {
        return s->on_path && s->up >= 0 ? 1 : 0;
    }
    return 1; /* AllReduce both ways, Reduce upwards */
}

BR_SCHED_FN void br_sched_step_clear(br_step_t *st)
{
    st->prim = 0;
    st->nrecv = st->nsend = 0;
    st->chunk = 0;
    st->after = 0;
    for (int i = 0; i < BR_MAX_TREE_ARITY; i++) {
        st->recv[i] = st->send[i] = -1;
    }
}

BR_SCHED_FN void br_sched_ring_step(const br_sched_t *s, int j, br_step_t *st)
{
    int n = s->nranks, r = s->pos, rel;
    uint32_t p;

    switch (s->func) {
    case BR_FUNC_ALLREDUCE: /* reduce-scatter, then all-gather of the finished chunks */
        if (j == 0) {
            st->chunk = br_sched_mod(r - 1, n);
            p = BR_PRIM_SEND;
        } else if (j < n - 1) {
            st->chunk = br_sched_mod(r - 1 - j, n);
            p = BR_PRIM_RECV | BR_PRIM_REDUCE | BR_PRIM_SEND;
        } else if (j == n - 1) {
            st->chunk = r;
            p = BR_PRIM_RECV | BR_PRIM_REDUCE | BR_PRIM_COPY | BR_PRIM_SEND | BR_PRIM_POST;
        } else {
            st->chunk = br_sched_mod(r - j + n - 1, n);
            p = j < 2 * n - 2 ? (BR_PRIM_RECV | BR_PRIM_COPY | BR_PRIM_SEND)
                              : (BR_PRIM_RECV | BR_PRIM_COPY);
        }
        break;
    case BR_FUNC_REDUCESCATTER:
        st->chunk = br_sched_mod(r - 1 - j, n);
        p = j == 0       ? BR_PRIM_SEND
            : j < n - 1 ? (BR_PRIM_RECV | BR_PRIM_REDUCE | BR_PRIM_SEND)
                        : (BR_PRIM_RECV | BR_PRIM_REDUCE | BR_PRIM_COPY | BR_PRIM_POST);
        break;
    case BR_FUNC_ALLGATHER:
        st->chunk = br_sched_mod(r - j, n);
        p = j == 0       ? (BR_PRIM_LOCAL | BR_PRIM_SEND)
            : j < n - 1 ? (BR_PRIM_RECV | BR_PRIM_COPY | BR_PRIM_SEND)
                        : (BR_PRIM_RECV | BR_PRIM_COPY);
        break;
    case BR_FUNC_BROADCAST: /* a chain from the root */
        rel = br_sched_mod(r - s->root_pos, n);
        p = rel == 0       ? (BR_PRIM_LOCAL | BR_PRIM_SEND)
            : rel < n - 1 ? (BR_PRIM_RECV | BR_PRIM_COPY | BR_PRIM_SEND)
                          : (BR_PRIM_RECV | BR_PRIM_COPY);
        break;
    default: /* Reduce: a chain that starts after the root and ends at it */
        rel = br_sched_mod(r - s->root_pos - 1, n);
        p = rel == 0       ? BR_PRIM_SEND
            : rel < n - 1 ? (BR_PRIM_RECV | BR_PRIM_REDUCE | BR_PRIM_SEND)
                          : (BR_PRIM_RECV | BR_PRIM_REDUCE | BR_PRIM_COPY | BR_PRIM_POST);
        break;
    }
    st->prim = p;
    if (p & BR_PRIM_RECV) {
        st->recv[st->nrecv++] = s->prev;
    }
    if (p & BR_PRIM_SEND) {
        st->send[st->nsend++] = s->next;
    }
}

/* Receive from every child, or send to every child except `skip`. */
BR_SCHED_FN void br_sched_children(const br_sched_t *s, int recv, int skip, br_step_t *st)
{
    for (int i = 0; i < s->ndown; i++) {
        if (s->down[i] < 0 || s->down[i] == skip) {
            continue;
        }
        if (recv) {
            st->recv[st->nrecv++] = s->down[i];
        } else {
            st->send[st->nsend++] = s->down[i];
        }
    }
}

/* Reduce up the tree (AllReduce, Reduce): leaves send, others fold their children's
 * partial results into their input; the tree's root completes the reduction. */
BR_SCHED_FN void br_sched_tree_reduce_up(const br_sched_t *s, br_step_t *st)
{
    if (s->ndown == 0) {
        st->prim = BR_PRIM_SEND;
        st->send[st->nsend++] = s->up;
        return;
    }
    br_sched_children(s, 1, -1, st);
    st->prim = BR_PRIM_RECV | BR_PRIM_REDUCE;
    if (s->up >= 0) {
        st->prim |= BR_PRIM_SEND;
        st->send[st->nsend++] = s->up;
    } else if (s->func == BR_FUNC_ALLREDUCE || s->rank == s->root) {
        st->prim |= BR_PRIM_COPY | BR_PRIM_POST;
    } else {
        /* Reduce whose root is elsewhere: the result goes down the path to it. */
        st->prim |= BR_PRIM_POST | BR_PRIM_SEND;
        st->send[st->nsend++] = s->toward;
    }
}

BR_SCHED_FN void br_sched_tree_step(const br_sched_t *s, int stream, br_step_t *st)
{
    int is_root = s->rank == s->root;

    if (s->func == BR_FUNC_ALLREDUCE) {
        if (stream == 0) {
            br_sched_tree_reduce_up(s, st);
        } else if (s->up < 0) { /* the root sends its result down */
            st->prim = BR_PRIM_SEND | BR_PRIM_FROM_OUTPUT;
            st->after = 1;
            br_sched_children(s, 0, -1, st);
        } else {
            st->prim = BR_PRIM_RECV | BR_PRIM_COPY | (s->ndown > 0 ? BR_PRIM_SEND : 0);
            st->recv[st->nrecv++] = s->up;
            br_sched_children(s, 0, -1, st);
        }
    } else if (s->func == BR_FUNC_REDUCE) {
        if (stream == 0) {
            br_sched_tree_reduce_up(s, st);
        } else { /* on the path below the tree's root: pass the result on to the root */
            st->recv[st->nrecv++] = s->up;
            if (is_root) {
                st->prim = BR_PRIM_RECV | BR_PRIM_COPY;
            } else {
                st->prim = BR_PRIM_RECV | BR_PRIM_SEND;
                st->send[st->nsend++] = s->toward;
            }
        }
    } else if (stream == 0) { /* Broadcast: the data climbs from the root to the top */
        st->send[0] = s->up;
        st->nsend = s->up >= 0 ? 1 : 0;
        if (is_root) {
            st->prim = BR_PRIM_LOCAL | BR_PRIM_SEND;
        } else {
            st->prim = BR_PRIM_RECV | BR_PRIM_COPY | (s->up >= 0 ? BR_PRIM_SEND : 0);
            st->recv[st->nrecv++] = s->toward;
        }
    } else if (s->on_path) { /* and spreads down from every rank on the path */
        br_sched_children(s, 0, s->toward, st);
        st->prim = st->nsend > 0 ? BR_PRIM_SEND : 0;
        if (is_root && s->up < 0) {
            st->prim |= BR_PRIM_LOCAL;
        } else if (!is_root) {
            st->prim |= BR_PRIM_FROM_OUTPUT;
            st->after = 1;
        }
    } else {
        st->prim = BR_PRIM_RECV | BR_PRIM_COPY | (s->ndown > 0 ? BR_PRIM_SEND : 0);
        st->recv[st->nrecv++] = s->up;
        br_sched_children(s, 0, -1, st);
    }
}

/* Step j (0 <= j < br_sched_nsteps(s, stream)) of every iteration of a stream. */
BR_SCHED_FN void br_sched_step(const br_sched_t *s, int stream, int j, br_step_t *st)
{
    br_sched_step_clear(st);
    if (s->algo == BR_ALGO_TREE) {
        br_sched_tree_step(s, stream, st);
    } else {
        br_sched_ring_step(s, j, st);
    }
}

/* Units per chunk of the iteration starting at `base` (< hi), at most `slice`. */
BR_SCHED_FN size_t br_sched_chunk(const br_sched_t *s, size_t base, size_t hi, size_t slice)
{
    size_t left = hi - base;
    if (s->algo == BR_ALGO_RING && s->func == BR_FUNC_ALLREDUCE) {
        size_t n = (size_t)s->nranks, per = (left + n - 1) / n;
        return per < slice ? per : slice;
    }
    return left < slice ? left : slice;
}

/* How far the next iteration starts after one of `chunk` units. */
BR_SCHED_FN size_t br_sched_advance(const br_sched_t *s, size_t chunk)
{
    if (s->algo == BR_ALGO_RING && s->func == BR_FUNC_ALLREDUCE) {
        return chunk * (size_t)s->nranks;
    }
    return chunk;
}

/*
 * Where a step's data is, in units: input offset, output offset and length of its chunk
 * in the iteration starting at `base` (chunk units each, channel share ending at hi).
 * `units` is the per-rank block (AllGather, ReduceScatter); ring_rank[k] is the rank at
 * ring position k, whose block chunk k is for those two.
 */
BR_SCHED_FN void br_sched_place(const br_sched_t *s, const br_step_t *st, size_t base,
                                size_t chunk, size_t hi, size_t units, const int *ring_rank,
                                size_t *in_p, size_t *out_p, size_t *len_p)
{
    size_t len = chunk, off = base;
    if (s->algo == BR_ALGO_RING && s->func == BR_FUNC_ALLREDUCE) {
        off = base + (size_t)st->chunk * chunk;
        if (off >= hi) {
            len = 0;
            off = hi;
        } else if (off + len > hi) {
            len = hi - off;
        }
        *in_p = *out_p = off;
    } else if (s->algo == BR_ALGO_RING && s->func == BR_FUNC_REDUCESCATTER) {
        *in_p = (size_t)ring_rank[st->chunk] * units + base;
        *out_p = base;
    } else if (s->algo == BR_ALGO_RING && s->func == BR_FUNC_ALLGATHER) {
        *in_p = base;
        *out_p = (size_t)ring_rank[st->chunk] * units + base;
    } else {
        *in_p = *out_p = base;
    }
    *len_p = len;
}

#endif /* BR_PLAN_SCHED_H_ */
